/* gemma3n.c — Gemma 3n (text): E2B / E4B. Gemma 3's sandwich-normed layers (q / k RMSNorm, V RMS-normed without a
 * weight, scale 1, sliding and global layers, final logit softcap, embeddings times sqrt(n_embd)), with:
 *  - AltUp: a token carries n_altup residual streams. The first is the embedding, the others its projections by
 *    altup_proj (each rescaled to the embedding's magnitude). A layer predicts every stream from all of them
 *    (coefficients from a router over stream altup_act), computes on the prediction of stream altup_act, and
 *    corrects every stream by the layer's innovation (output minus that prediction, coefficients + 1). At the end
 *    the other streams go back through altup_unembd (magnitudes matched to stream 0's) and all are averaged;
 *  - LAuReL: a low-rank residual (laurel_r . laurel_l, post-normed) beside attention: (attn + laurel) / sqrt(2);
 *  - per-layer embeddings (layers.c's, shared with Gemma 4) gated by the corrected active stream times
 *    altup_correct_scale, added to every stream but the first;
 *  - activation sparsity: Gaussian top-k on the FFN gate of the layers whose activation_sparsity_scale is finite;
 *  - the last shared_kv_layers layers attend an earlier layer's cache (model_share_kv, as Gemma 4).
 * The streams live in c->altup ([n_altup + 1][n_batch][n_embd]: the last row holds LAuReL's output); c->x is the
 * active stream's working copy. Norm weights are used as stored (the converter shifts none). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/layers.h"
#include "model/matmul.h"
#include "compute/ops.h"

#define ALTUP_MAX 8

static int gemma3n_hparams(hearth_model *m, hearth_err *err) {
    if (model_common_hparams(m, err)) return -1;
    ht_hparams *hp = &m->hp;
    /* llama.cpp reads none of these and uses the published values (4, 0, 256): the defaults here */
    if (model_meta_int(m, "altup.num_inputs", 2, ALTUP_MAX, 4, &hp->n_altup, err) ||
        model_meta_int(m, "altup.active_idx", 0, hp->n_altup - 1, 0, &hp->altup_act, err) ||
        model_meta_int(m, "embedding_length_per_layer_input", 1, 1 << 16, 256, &hp->n_embd_per_layer, err))
        return -1;
    if (hp->n_embd < hp->n_altup)   /* (the router's outputs share a row of the FFN scratch) */
        return herr(err, "gemma3n: %d AltUp streams for a model %d wide", hp->n_altup, hp->n_embd);
    if ((int64_t)hp->n_layer * hp->n_embd_per_layer > (1 << 24))
        return herr(err, "gemma3n: %d layers of %d per-layer inputs is implausible", hp->n_layer, hp->n_embd_per_layer);
    if (!hp->sliding_window) return herr(err, "metadata gemma3n.attention.sliding_window missing");
    if (!model_meta_f32(m, "rope.freq_base_swa", &hp->rope_base_swa)) hp->rope_base_swa = 10000.0f;
    gemma_hparams(m);
    return 0;
}

/* The sparse layers: activation_sparsity_scale holds each layer's std multiplier (the normal quantile of its
 * target sparsity; -inf for none). */
static int gemma3n_sparsity(hearth_model *m, hearth_err *err) {
    const gguf_kv *kv = gguf_find(m->gguf, "gemma3n.activation_sparsity_scale");
    if (!kv) return 0;
    if (kv->type != GGUF_ARR || kv->arr_n != (uint64_t)m->hp.n_layer)
        return herr(err, "metadata gemma3n.activation_sparsity_scale: an array of %d numbers expected", m->hp.n_layer);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const double k = gguf_arr_num(kv, (uint64_t)il);
        m->layers[il].ffn_sparse = isfinite(k);
        m->layers[il].ffn_sparse_std = isfinite(k) ? (float)k : 0.0f;
    }
    return 0;
}

static int gemma3n_bind(hearth_model *m, hearth_err *err) {
    ht_hparams *hp = &m->hp;
    const int E = hp->n_embd, NL = hp->n_layer, P = hp->n_embd_per_layer, N = hp->n_altup;
    int n_shared, max, *n_ff = malloc((size_t)NL * sizeof *n_ff);
    if (!n_ff) return herr(err, "out of memory");
    int rc = model_swa_pattern(m, 5, err) || gemma3n_sparsity(m, err) ||
             model_meta_int(m, "attention.shared_kv_layers", 0, NL - 1, 0, &n_shared, err) ||
             model_share_kv(m, n_shared, err) ||
             model_meta_layer_ints(m, "feed_forward_length", 1, 1 << 24, hp->n_ff, n_ff, &max, err) ||
             model_bind(m, &m->tok_embd, true, err, E, -1, "token_embd.weight") ||
             model_bind(m, &m->output_norm, true, err, E, 1, "output_norm.weight") ? -1 : 0;
    if (!rc) {
        hp->n_vocab = (int)m->tok_embd.ne[1];
        rc = model_bind(m, &m->output, false, err, E, hp->n_vocab, "output.weight") ||
             model_bind_stack(m, &m->altup_proj, err, E, E, N - 1, "altup_proj.weight", 0) ||
             model_bind_stack(m, &m->altup_unembd, err, E, E, N - 1, "altup_unembd_proj.weight", 0) ||
             model_bind(m, &m->ple_tok_embd, true, err, (int64_t)NL * P, -1, "per_layer_token_embd.weight") ||
             model_bind(m, &m->ple_model_proj, true, err, E, (int64_t)NL * P, "per_layer_model_proj.weight") ||
             model_bind(m, &m->ple_proj_norm, true, err, P, 1, "per_layer_proj_norm.weight") ? -1 : 0;
    }
    if (!rc && m->ple_tok_embd.ne[1] > hp->n_vocab)   /* (fewer: HF's text rows; the rest, vision / audio ids, get 0) */
        rc = herr(err, "per_layer_token_embd has %lld rows for %d tokens", (long long)m->ple_tok_embd.ne[1], hp->n_vocab);
    for (int il = 0; !rc && il < NL; il++) {
        ht_layer *L = &m->layers[il];
        const int hd = hp->head_dim, QD = hp->n_head * hd, KD = hp->n_head_kv * hd;
        if (model_bind(m, &L->attn_norm, true, err, E, 1, "blk.%d.attn_norm.weight", il) ||
            model_bind(m, &L->wq, true, err, E, QD, "blk.%d.attn_q.weight", il) ||
            model_bind(m, &L->q_norm, true, err, hd, 1, "blk.%d.attn_q_norm.weight", il) ||
            model_bind(m, &L->wo, true, err, QD, E, "blk.%d.attn_output.weight", il) ||
            model_bind(m, &L->attn_post_norm, true, err, E, 1, "blk.%d.post_attention_norm.weight", il) ||
            model_bind(m, &L->ffn_norm, true, err, E, 1, "blk.%d.ffn_norm.weight", il) ||
            model_bind(m, &L->ffn_gate, true, err, E, n_ff[il], "blk.%d.ffn_gate.weight", il) ||
            model_bind(m, &L->ffn_up, true, err, E, n_ff[il], "blk.%d.ffn_up.weight", il) ||
            model_bind(m, &L->ffn_down, true, err, n_ff[il], E, "blk.%d.ffn_down.weight", il) ||
            model_bind(m, &L->ffn_post_norm, true, err, E, 1, "blk.%d.post_ffw_norm.weight", il) ||
            model_bind(m, &L->ple_gate, true, err, E, P, "blk.%d.inp_gate.weight", il) ||
            model_bind(m, &L->ple_proj, true, err, P, E, "blk.%d.proj.weight", il) ||
            model_bind(m, &L->ple_norm, true, err, E, 1, "blk.%d.post_norm.weight", il) ||
            model_bind(m, &L->altup_router, true, err, E, N, "blk.%d.altup_router.weight", il) ||
            model_bind(m, &L->altup_router_norm, true, err, E, 1, "blk.%d.altup_router_norm.weight", il) ||
            model_bind(m, &L->altup_predict_coef, true, err, N, (int64_t)N * N, "blk.%d.altup_predict_coef.weight", il) ||
            model_bind(m, &L->altup_correct_coef, true, err, N, N, "blk.%d.altup_correct_coef.weight", il) ||
            model_bind(m, &L->altup_correct_scale, true, err, E, 1, "blk.%d.altup_correct_scale.weight", il) ||
            model_bind(m, &L->laurel_l, true, err, E, -1, "blk.%d.laurel_l.weight", il) ||
            model_bind(m, &L->laurel_r, true, err, L->laurel_l.ne[1], E, "blk.%d.laurel_r.weight", il) ||
            model_bind(m, &L->laurel_post_norm, true, err, E, 1, "blk.%d.laurel_post_norm.weight", il))
            rc = -1;
        else if (!L->kv_shared && (model_bind(m, &L->wk, true, err, E, KD, "blk.%d.attn_k.weight", il) ||
                                   model_bind(m, &L->wv, true, err, E, KD, "blk.%d.attn_v.weight", il) ||
                                   model_bind(m, &L->k_norm, true, err, hd, 1, "blk.%d.attn_k_norm.weight", il)))
            rc = -1;
        else if (L->laurel_l.ne[1] > E)
            rc = herr(err, "layer %d: LAuReL rank %lld is wider than the model (%d)", il, (long long)L->laurel_l.ne[1], E);
    }
    free(n_ff);
    return rc;
}

static float *stream(hearth_ctx *c, int k) { return c->altup + (size_t)k * c->n_batch * c->m->hp.n_embd; }

/* sqrt(sum of squares) of a row, in double. */
static double magnitude(const float *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

/* y[i] *= |ref[i]| / |y[i]| row by row. */
typedef struct { float *y; const float *ref; int E; } match_job;

static void match_rows(const void *arg, int r0, int r1) {
    const match_job *j = arg;
    for (int r = r0; r < r1; r++) {
        float *y = j->y + (size_t)r * j->E;
        const double my = magnitude(y, j->E);
        op_scale(y, (float)(magnitude(j->ref + (size_t)r * j->E, j->E) / (my > 0 ? my : 1)), j->E);
    }
}

/* out = stack[k] . in for rows [0, n), magnitudes matched to ref's. */
static void project_matched(hearth_ctx *c, const ht_ubatch *ub, const ht_tensor *stack, int k, const float *in,
                            const float *ref, float *out) {
    const ht_tensor s = ht_expert(stack, k);
    matmul(c, &s, in, ub->n, out);
    pool_share(c->pool, ub->n, match_rows, &(match_job){ out, ref, c->m->hp.n_embd });
}

/* The scaled token embeddings as stream 0, their projections as the others; the per-layer embeddings' inputs. */
static void gemma3n_embed(hearth_ctx *c, const ht_ubatch *ub) {
    const hearth_model *m = c->m;
    const size_t bytes = (size_t)ub->n * m->hp.n_embd * sizeof(float);
    ctx_embed_tokens(c, ub, c->x);
    layer_ple_inputs(c, ub, c->x);
    memcpy(stream(c, 0), c->x, bytes);
    for (int k = 1; k < m->hp.n_altup; k++) project_matched(c, ub, &m->altup_proj, k - 1, c->x, c->x, stream(c, k));
}

/* A small matrix (n_altup wide) as floats: rows [0, rows). */
static void small_matrix(const ht_tensor *W, int rows, float *out) {
    const ht_traits *tr = ht_get_traits(W->type);
    for (int r = 0; r < rows; r++) tr->to_float(ht_row(W, r), out + (size_t)r * W->ne[0], W->ne[0]);
}

/* AltUp's router: mod[i] = tanh(altup_router . RMSNorm_{router_norm}(x[i]) / n_embd), n_altup per token. */
static void modalities(hearth_ctx *c, const ht_ubatch *ub, const ht_layer *L, const float *x, float *mod) {
    const ht_hparams *hp = &c->m->hp;
    layer_norm_rows(c, ub, c->xb, x, &L->altup_router_norm, NULL, hp->n_embd, hp->norm_eps, NORM_RMS);
    layer_scale_rows(c, ub, c->xb, 1.0f / (float)hp->n_embd, hp->n_embd);
    matmul(c, &L->altup_router, c->xb, ub->n, mod);
    for (int i = 0; i < ub->n * hp->n_altup; i++) mod[i] = tanhf(mod[i]);
}

/* Per token: predict (stream_j += sum_k a[j][k] stream_k, a = predict_coef . mod) or correct (stream_j +=
 * (correct_coef . mod + 1)_j (x - stream_act)), in place over the n_altup streams. */
typedef struct { hearth_ctx *c; const float *mod, *coef, *x; bool correct; } altup_job;

static void altup_rows(const void *arg, int r0, int r1) {
    const altup_job *j = arg;
    const ht_hparams *hp = &j->c->m->hp;
    const int E = hp->n_embd, N = hp->n_altup, act = hp->altup_act;
    float *s[ALTUP_MAX];
    for (int k = 0; k < N; k++) s[k] = stream(j->c, k);
    for (int r = r0; r < r1; r++) {
        const float *mod = j->mod + (size_t)r * N;
        float a[ALTUP_MAX * ALTUP_MAX];
        const int rows = j->correct ? N : N * N;
        for (int q = 0; q < rows; q++) {
            float t = 0;
            for (int k = 0; k < N; k++) t += j->coef[q * N + k] * mod[k];
            a[q] = j->correct ? t + 1.0f : t;
        }
        const size_t o = (size_t)r * E;
        if (j->correct)
            for (int e = 0; e < E; e++) {
                const float inn = j->x[o + e] - s[act][o + e];
                for (int k = 0; k < N; k++) s[k][o + e] += a[k] * inn;
            }
        else
            for (int e = 0; e < E; e++) {
                float v[ALTUP_MAX], p[ALTUP_MAX];
                for (int k = 0; k < N; k++) v[k] = s[k][o + e];
                for (int q = 0; q < N; q++) {
                    float t = 0;
                    for (int k = 0; k < N; k++) t += v[k] * a[q * N + k];
                    p[q] = v[q] + t;
                }
                for (int k = 0; k < N; k++) s[k][o + e] = p[k];
            }
    }
}

static void altup_step(hearth_ctx *c, const ht_ubatch *ub, const ht_layer *L, const float *x, bool correct) {
    const int N = c->m->hp.n_altup;
    float coef[ALTUP_MAX * ALTUP_MAX * ALTUP_MAX];
    small_matrix(correct ? &L->altup_correct_coef : &L->altup_predict_coef, correct ? N : N * N, coef);
    modalities(c, ub, L, x, c->hb2);
    altup_job j = { c, c->hb2, coef, x, correct };
    pool_share(c->pool, ub->n, altup_rows, &j);
}

/* Row by row: out = a * w (elementwise, w of n_embd) when w is set, else out = (out + a) * s. */
typedef struct { float *out; const float *a, *w; int E; float s; } mul_job;

static void mul_rows(const void *arg, int r0, int r1) {
    const mul_job *j = arg;
    for (size_t i = (size_t)r0 * j->E; i < (size_t)r1 * j->E; i++)
        j->out[i] = j->w ? j->a[i] * j->w[i % (size_t)j->E] : (j->out[i] + j->a[i]) * j->s;
}

static void gemma3n_layer(hearth_ctx *c, const ht_ubatch *ub, int il) {
    const hearth_model *m = c->m;
    const ht_hparams *hp = &m->hp;
    const ht_layer *L = &m->layers[il];
    const int E = hp->n_embd, N = hp->n_altup;
    const float eps = hp->norm_eps;
    const size_t bytes = (size_t)ub->n * E * sizeof(float);
    float *active = stream(c, hp->altup_act), *laurel = stream(c, N);
    altup_step(c, ub, L, active, false);   /* (reads the active stream as x before it changes) */
    memcpy(c->x, active, bytes);           /* its prediction */
    layer_norm_rows(c, ub, c->xb, c->x, &L->attn_norm, NULL, E, eps, NORM_RMS);
    /* LAuReL: xb + RMSNorm(laurel_r . laurel_l . xb) */
    matmul(c, &L->laurel_l, c->xb, ub->n, c->hb);
    matmul(c, &L->laurel_r, c->hb, ub->n, laurel);
    layer_norm_rows(c, ub, laurel, laurel, &L->laurel_post_norm, NULL, E, eps, NORM_RMS);
    layer_residual(c, ub, laurel, c->xb, E);
    layer_attention(c, ub, il, c->xb, c->xb2, L->swa ? hp->rope_base_swa : hp->rope_base, L->swa ? hp->sliding_window : 0);
    layer_norm_rows(c, ub, c->xb2, c->xb2, &L->attn_post_norm, NULL, E, eps, NORM_RMS);
    layer_residual(c, ub, c->x, c->xb2, E);
    /* x = (x + laurel) / sqrt(2) */
    pool_share(c->pool, ub->n, mul_rows, &(mul_job){ c->x, laurel, NULL, E, 1.0f / sqrtf(2.0f) });
    layer_norm_rows(c, ub, c->xb, c->x, &L->ffn_norm, NULL, E, eps, NORM_RMS);
    layer_ffn_gated(c, ub, L, c->xb, c->xb2, ACT_GELU_TANH);
    layer_norm_rows(c, ub, c->xb2, c->xb2, &L->ffn_post_norm, NULL, E, eps, NORM_RMS);
    layer_residual(c, ub, c->x, c->xb2, E);
    altup_step(c, ub, L, c->x, true);
    /* the per-layer embedding, gated by the corrected active stream x altup_correct_scale, to streams 1.. */
    pool_share(c->pool, ub->n, mul_rows, &(mul_job){ c->xb, active, L->altup_correct_scale.data, E, 0 });
    layer_ple_out(c, ub, il, c->xb, c->xb2);
    for (int k = 1; k < N; k++) layer_residual(c, ub, stream(c, k), c->xb2, E);
}

/* The streams back to one: stream 0 plus the others' unembedded projections (magnitudes matched to stream 0's),
 * averaged; then the output norm and head. */
static void gemma3n_head(hearth_ctx *c, const ht_ubatch *ub) {
    const hearth_model *m = c->m;
    const int E = m->hp.n_embd, N = m->hp.n_altup;
    const float *s0 = stream(c, 0);
    memcpy(c->x, s0, (size_t)ub->n * E * sizeof(float));
    for (int k = 1; k < N; k++) {
        project_matched(c, ub, &m->altup_unembd, k - 1, stream(c, k), s0, c->xb);
        layer_residual(c, ub, c->x, c->xb, E);
    }
    layer_scale_rows(c, ub, c->x, 1.0f / (float)N, E);
    llama_head(c, ub);
}

const ht_arch ht_arch_gemma3n = { "gemma3n", false, gemma3n_hparams, gemma3n_bind, gemma3n_embed, gemma3n_layer, gemma3n_head };
