/* layers.c — the shared transformer blocks (see layers.h). Scratch comes from the context: q/k/v and
 * the attention output have their own buffers, hb/hb2 hold the FFN's wide activations, and the
 * mixture-of-experts block has its moe_* buffers (a micro-batch's choices, ordered by expert). */
#include "model/layers.h"

#include "model/matmul.h"
#include "compute/ops.h"
#include "dist/dist.h"

#include <math.h>

typedef struct { float *out; const float *in; const float *w, *b; int width; float eps; int kind; } norm_job;

static void norm_rows(const void *arg, int r0, int r1) {
    const norm_job *j = arg;
    for (int i = r0; i < r1; i++) {
        const float *x = j->in + (size_t)i * j->width;
        float *y = j->out + (size_t)i * j->width;
        if (j->kind == NORM_RMS) op_rmsnorm(y, x, j->w, j->width, j->eps);
        else op_layernorm(y, x, j->w, j->b, j->width, j->eps);
    }
}

void layer_norm_rows(hearth_ctx *c, const ht_ubatch *ub, float *out, const float *in, const ht_tensor *w,
                     const ht_tensor *b, int width, float eps, int kind) {
    norm_job j = { out, in, w ? w->data : NULL, b && b->data ? b->data : NULL, width, eps, kind };
    pool_share(c->pool, ub->n, norm_rows, &j);
}

typedef struct { float *x; const float *y; int width; } add_job;

static void add_rows(const void *arg, int r0, int r1) {
    const add_job *j = arg;
    op_add(j->x + (size_t)r0 * j->width, j->y + (size_t)r0 * j->width, (r1 - r0) * j->width);
}

void layer_residual(hearth_ctx *c, const ht_ubatch *ub, float *x, const float *y, int width) {
    add_job j = { x, y, width };
    pool_share(c->pool, ub->n, add_rows, &j);
}

/* Splits fused QKV rows [n][QD + 2 KD] into q, k, v. */
static void split_qkv(const ht_ubatch *ub, const float *qkv, float *q, float *k, float *v, int QD, int KD, int VD) {
    for (int i = 0; i < ub->n; i++) {
        const float *r = qkv + (size_t)i * (QD + KD + VD);
        memcpy(q + (size_t)i * QD, r, (size_t)QD * sizeof(float));
        memcpy(k + (size_t)i * KD, r + QD, (size_t)KD * sizeof(float));
        memcpy(v + (size_t)i * VD, r + QD + KD, (size_t)VD * sizeof(float));
    }
}

/* Per token: the per-head RMSNorm of q and k (Qwen3, Gemma 3; when bound) and of v without a weight (Gemma 4), then
 * rope on q and k (rope: the tables' row of the token, or none) and the attention temperature on q (Mistral 3).
 * k and v NULL: a layer that reads another's cache. */
typedef struct { hearth_ctx *c; const ht_layer *L; float *q, *k, *v; bool rope; const int32_t *pos; } qk_job;

static void qk_rows(const void *arg, int r0, int r1) {
    const qk_job *j = arg;
    const ht_hparams *hp = &j->c->m->hp;
    const ht_layer *L = j->L;
    const int hd = L->head_dim, hdv = L->head_dim_v, nkv = L->n_head_kv, h = L->n_rot / 2;
    for (int i = r0; i < r1; i++) {
        float *q = j->q + (size_t)i * hp->n_head * hd, *k = j->k ? j->k + (size_t)i * nkv * hd : NULL;
        for (int t = 0; L->q_norm.data && t < hp->n_head; t++)
            op_rmsnorm(q + (size_t)t * hd, q + (size_t)t * hd, L->q_norm.data, hd, hp->norm_eps);
        for (int t = 0; k && L->k_norm.data && t < nkv; t++)
            op_rmsnorm(k + (size_t)t * hd, k + (size_t)t * hd, L->k_norm.data, hd, hp->norm_eps);
        for (int t = 0; j->v && t < nkv; t++) {
            float *v = j->v + ((size_t)i * nkv + t) * hdv;
            op_rmsnorm(v, v, NULL, hdv, hp->norm_eps);
        }
        if (j->rope) {
            const float *cs = j->c->rope_cos + (size_t)i * h, *sn = j->c->rope_sin + (size_t)i * h;
            op_rope(q, hp->n_head, hd, L->n_rot, cs, sn, hp->rope_type == ROPE_NEOX);
            if (k) op_rope(k, nkv, hd, L->n_rot, cs, sn, hp->rope_type == ROPE_NEOX);
            if (hp->attn_temp_scale != 0) {   /* Mistral 3: far positions attend sharper */
                const float t = (float)(log(floor((double)j->pos[i] / hp->n_ctx_orig) + 1.0) * hp->attn_temp_scale + 1.0);
                op_scale(q, t, hp->n_head * hd);
            }
        }
    }
}

/* Output-gated attention (Qwen3.5): each token's q rows hold per head [q | gate]; q is packed in place to
 * [n_head][head_dim] and the gates copied to gate. */
static void split_gate(int n, float *q, float *gate, int n_head, int hd) {
    for (int i = 0; i < n; i++)
        for (int h = 0; h < n_head; h++) {   /* a row's packed q never passes its unread part */
            const float *src = q + ((size_t)i * n_head + h) * 2 * hd;
            memcpy(gate + ((size_t)i * n_head + h) * hd, src + hd, (size_t)hd * sizeof(float));
            memmove(q + ((size_t)i * n_head + h) * hd, src, (size_t)hd * sizeof(float));
        }
}

typedef struct { float *x; const float *gate; } gate_job;

static void gate_range(const void *arg, int lo, int hi) {
    const gate_job *j = arg;
    for (int i = lo; i < hi; i++) j->x[i] *= 1.0f / (1.0f + expf(-j->gate[i]));
}

/* Tensor parallel (m->tp_size > 1): out[n][n_embd] = W in, where each rank holds part[n][its share of in's D
 * columns]: the parts are gathered to whole rows, each rank multiplies them by its share of W's output rows
 * (complete dot products, as one process computes them), and the outputs are gathered. Only copies cross
 * ranks, so the result is one process's bit for bit. */
static void tp_project(hearth_ctx *c, const ht_ubatch *ub, const ht_tensor *W, const ht_tensor *b, const float *part,
                       int D, int unit, float *out) {
    dist_tp_gather(c, part, ub->n, D, unit, c->tp_in);
    matmul_bias(c, W, b, c->tp_in, ub->n, c->tp_out);
    dist_tp_gather(c, c->tp_out, ub->n, c->m->hp.n_embd, 0, out);
}

void layer_attention(hearth_ctx *c, const ht_ubatch *ub, int il, const float *in, float *out, float rope_base,
                     int window) {
    const hearth_model *m = c->m;
    const ht_hparams *hp = &m->hp;
    const ht_layer *L = &m->layers[il];
    int QD = hp->n_head * L->head_dim, KD = L->n_head_kv * L->head_dim, VD = L->n_head_kv * L->head_dim_v;
    float *q = c->q, *k = c->k, *v = c->v;
    if (L->wqkv.data) {
        matmul_bias(c, &L->wqkv, &L->bqkv, in, ub->n, c->hb);
        split_qkv(ub, c->hb, q, k, v, QD, KD, VD);
    } else {   /* one job for the three where they share a format; q alone for a layer that reads another's cache;
                * no attn_v (Gemma 4's global layers): V is the K projection, before k's norm and rope */
        const ht_tensor *W[3] = { &L->wq, &L->wk, &L->wv }, *B[3] = { &L->bq, &L->bk, &L->bv };
        float *Y[3] = { q, k, v };
        const int nw = L->kv_shared ? 1 : L->wv.data ? 3 : 2;
        matmul_multi(c, W, Y, nw, in, ub->n);
        for (int i = 0; i < nw; i++) matmul_add_bias(B[i], Y[i], ub->n, (int)W[i]->ne[1]);
        if (nw == 2) memcpy(v, k, (size_t)ub->n * KD * sizeof(float));
        if (hp->attn_gate) split_gate(ub->n, q, c->hb, hp->n_head, L->head_dim);
    }
    if (L->kv_shared) k = v = NULL;
    if (rope_base > 0)
        ctx_rope_tables(c, ub, rope_base, ctx_layer_is_swa(m, il) ? hp->rope_scale_swa : hp->rope_scale, L->n_rot,
                        L->rope_freqs.data);
    if (L->q_norm.data || L->k_norm.data || rope_base > 0 || (hp->v_norm && v)) {
        qk_job j = { c, L, q, k, hp->v_norm ? v : NULL, rope_base > 0, ub->pos };
        pool_share(c->pool, ub->n, qk_rows, &j);
    }
    ctx_attention(c, il, ub, q, k, v, c->att, hp->attn_scale, window);
    if (hp->attn_gate) {
        gate_job g = { c->att, c->hb };   /* decode: a few thousand sigmoids, less than a dispatch (each element alone) */
        const int n = ub->n * hp->n_head * L->head_dim_v;
        if (ub->n == 1) gate_range(&g, 0, n);
        else pool_share(c->pool, n, gate_range, &g);
    }
    if (m->tp_size > 1)   /* the ranks' heads, each n_head / n_head_kv q heads per kv head */
        tp_project(c, ub, &L->wo, &L->bo, c->att, m->tp_n_head * hp->head_dim_v, hp->n_head / hp->n_head_kv * hp->head_dim_v, out);
    else matmul_bias(c, &L->wo, &L->bo, c->att, ub->n, out);
}

static void activate(float *x, int n, int act) {
    if (act == ACT_SILU) op_silu(x, n);
    else if (act == ACT_GELU_TANH) op_gelu_tanh(x, n);
    else if (act == ACT_GELU_ERF) op_gelu_erf(x, n);
}

/* x = act(x) (u NULL) or x = act(x) * u over the pool, each element alone. */
typedef struct { float *x; const float *u; int act; } act_job;

static void act_range(const void *arg, int lo, int hi) {
    const act_job *j = arg;
    float *x = j->x + lo;
    const float *u = j->u ? j->u + lo : NULL;
    const int m = hi - lo;
    if (!u) activate(x, m, j->act);
    else if (j->act == ACT_SILU) op_silu_mul(x, u, m);
    else if (j->act == ACT_GELU_TANH) op_gelu_tanh_mul(x, u, m);
    else if (j->act == ACT_SWIGLU_OAI) op_swiglu_oai(x, u, m);
    else { activate(x, m, j->act); for (int i = 0; i < m; i++) x[i] *= u[i]; }
}

static void activate_par(hearth_ctx *c, float *x, const float *u, size_t n, int act) {
    if (act == ACT_NONE && !u) return;
    act_job j = { .x = x, .u = u, .act = act };
    pool_share(c->pool, (int)n, act_range, &j);
}

void layer_dense(hearth_ctx *c, const ht_ubatch *ub, const ht_tensor *W, const ht_tensor *b, const float *in, float *out,
                 int act) {
    if (b) matmul_bias(c, W, b, in, ub->n, out);
    else matmul(c, W, in, ub->n, out);
    activate_par(c, out, NULL, (size_t)ub->n * (size_t)W->ne[1], act);
}

/* Gaussian top-k (Gemma 3n's activation sparsity), row by row: g = max(g - (mean + k std), 0), std over the row
 * with n - 1; then the activation times u. */
typedef struct { float *g; const float *u; int ff, act; float k; } sparse_job;

static void sparse_rows(const void *arg, int r0, int r1) {
    const sparse_job *j = arg;
    for (int r = r0; r < r1; r++) {
        float *g = j->g + (size_t)r * j->ff;
        double sum = 0, sq = 0;
        for (int i = 0; i < j->ff; i++) sum += g[i];
        const double mean = sum / j->ff;
        for (int i = 0; i < j->ff; i++) sq += (g[i] - mean) * (g[i] - mean);
        const float cut = (float)(mean + j->k * sqrt(sq / (j->ff > 1 ? j->ff - 1 : 1)));
        for (int i = 0; i < j->ff; i++) g[i] = g[i] > cut ? g[i] - cut : 0.0f;
        act_range(&(act_job){ .x = g, .u = j->u + (size_t)r * j->ff, .act = j->act }, 0, j->ff);
    }
}

void layer_ffn_gated(hearth_ctx *c, const ht_ubatch *ub, const ht_layer *L, const float *in, float *out, int act) {
    int ff = (int)L->ffn_up.ne[1];
    /* one job (and one activation prep) for both; the activation in it, chunk by chunk, when it has a gated form */
    void (*glu)(float *, const float *, int) = act == ACT_SILU ? op_silu_mul : act == ACT_GELU_TANH ? op_gelu_tanh_mul
                                               : act == ACT_SWIGLU_OAI ? op_swiglu_oai : NULL;
    if (L->ffn_sparse || !glu || !matmul_glu(c, &L->ffn_gate, &L->ffn_up, in, ub->n, c->hb, c->hb2, glu)) {
        const ht_tensor *W[2] = { &L->ffn_gate, &L->ffn_up };
        float *Y[2] = { c->hb, c->hb2 };
        matmul_multi(c, W, Y, 2, in, ub->n);
        if (L->ffn_sparse) pool_share(c->pool, ub->n, sparse_rows, &(sparse_job){ c->hb, c->hb2, ff, act, L->ffn_sparse_std });
        else activate_par(c, c->hb, c->hb2, (size_t)ub->n * (size_t)ff, act);
    }
    if (c->m->tp_size > 1) tp_project(c, ub, &L->ffn_down, &L->ffn_down_b, c->hb, (int)L->ffn_down.ne[0], 0, out);
    else matmul(c, &L->ffn_down, c->hb, ub->n, out);
}

void layer_ffn_plain(hearth_ctx *c, const ht_ubatch *ub, const ht_layer *L, const float *in, float *out, int act) {
    int ff = (int)L->ffn_up.ne[1];
    matmul_bias(c, &L->ffn_up, &L->ffn_up_b, in, ub->n, c->hb);
    activate_par(c, c->hb, NULL, (size_t)ub->n * (size_t)ff, act);
    matmul_bias(c, &L->ffn_down, &L->ffn_down_b, c->hb, ub->n, out);
}

/* Index of the largest of the n scores not yet taken (ties to the lower index), marked taken. */
static int take_best(const float *s, int n, bool *taken) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || s[i] > s[best])) best = i;
    taken[best] = true;
    return best;
}

/* DeepSeek-V3's group limit: only the n_group_used groups (of n_expert_groups consecutive experts) whose two
 * best scores sum highest stay eligible; the others' scores become -inf. */
static void moe_limit_groups(const ht_hparams *hp, float *s) {
    const int NG = hp->n_expert_groups, per = hp->n_expert / NG;
    float gs[HT_MAX_EXPERTS];
    bool taken[HT_MAX_EXPERTS] = { false }, keep[HT_MAX_EXPERTS] = { false };
    for (int g = 0; g < NG; g++) {
        bool t2[HT_MAX_EXPERTS] = { false };
        gs[g] = 0;
        for (int k = 0; k < HT_MIN(2, per); k++) gs[g] += s[g * per + take_best(s + g * per, per, t2)];
    }
    for (int k = 0; k < hp->n_group_used; k++) keep[take_best(gs, NG, taken)] = true;
    for (int e = 0; e < hp->n_expert; e++)
        if (!keep[e / per]) s[e] = -INFINITY;
}

/* The router's choice for one token, as the reference's build_moe_ffn: scores by softmax over the experts (or
 * a sigmoid each), the n_expert_used best (best first, ties to the lower index) by score + bias (exp_probs_b,
 * may be NULL) among the eligible groups, weighted by their unbiased scores, renormalised to sum to 1 when the
 * model does, times expert_w_scale when set. */
static void moe_route(const ht_hparams *hp, const float *logits, const float *bias, int *sel, float *w) {
    const int NE = hp->n_expert, K = hp->n_expert_used;
    float p[HT_MAX_EXPERTS], s[HT_MAX_EXPERTS], mx = -INFINITY, sum = 0;
    bool taken[HT_MAX_EXPERTS] = { false };
    if (hp->expert_sigmoid)
        for (int e = 0; e < NE; e++) p[e] = 1.0f / (1.0f + expf(-logits[e]));
    else {
        for (int e = 0; e < NE; e++) mx = HT_MAX(mx, logits[e]);
        for (int e = 0; e < NE; e++) sum += p[e] = expf(logits[e] - mx);
        for (int e = 0; e < NE; e++) p[e] /= sum;
    }
    for (int e = 0; e < NE; e++) s[e] = bias ? p[e] + bias[e] : p[e];
    if (hp->n_expert_groups > 1) moe_limit_groups(hp, s);
    float wsum = 0;
    for (int k = 0; k < K; k++) {
        sel[k] = take_best(s, NE, taken);
        wsum += w[k] = p[sel[k]];
    }
    if (hp->expert_norm_w)
        for (int k = 0; k < K; k++) w[k] /= wsum;
    if (hp->expert_w_scale != 0 && hp->expert_w_scale != 1)
        for (int k = 0; k < K; k++) w[k] *= hp->expert_w_scale;
}

/* out[t] = the router-weighted sum of token t's expert outputs, in the router's order whatever the batch; each
 * thread a share of the tokens. */
typedef struct { hearth_ctx *c; float *out; int n; const float *escale; } moe_job;

static void moe_combine(void *arg, int ith, int nth) {
    const moe_job *j = arg;
    const hearth_ctx *c = j->c;
    const int K = c->m->hp.n_expert_used, E = c->m->hp.n_embd;
    for (int t = ith; t < j->n; t += nth) {
        float *o = j->out + (size_t)t * E;
        for (int k = 0; k < K; k++) {
            const float wk = c->moe_w[t * K + k], *y = c->moe_y + (size_t)c->moe_row[t * K + k] * E;
            if (j->escale) {   /* the expert's output scale first, then its weight */
                const float s = j->escale[c->moe_sel[t * K + k]];
                if (k == 0) for (int i = 0; i < E; i++) o[i] = wk * (y[i] * s);
                else for (int i = 0; i < E; i++) o[i] += wk * (y[i] * s);
            } else if (k == 0) for (int i = 0; i < E; i++) o[i] = wk * y[i];
            else for (int i = 0; i < E; i++) o[i] += wk * y[i];
        }
    }
}

/* out[t] += sigmoid(ffn_gate_inp_shexp . in[t]) * the shared expert's SwiGLU FFN of in[t] (Qwen3.5-MoE), or
 * without the gate when the model has none (DeepSeek); its rows go through hb / hb2 and moe_y, its gates
 * through moe_logits, all free once the routed experts are added. */
typedef struct { float *out; const float *y, *g; int E; } shexp_job;

static void shexp_rows(const void *arg, int r0, int r1) {
    const shexp_job *j = arg;
    for (int t = r0; t < r1; t++) {
        const float g = j->g ? 1.0f / (1.0f + expf(-j->g[t])) : 1.0f, *y = j->y + (size_t)t * j->E;
        float *o = j->out + (size_t)t * j->E;
        for (int i = 0; i < j->E; i++) o[i] += g * y[i];
    }
}

static void moe_shared_expert(hearth_ctx *c, const ht_ubatch *ub, const ht_layer *L, const float *in, float *out) {
    const int ff = (int)L->ffn_up_shexp.ne[1];
    const ht_tensor *W[3] = { &L->ffn_gate_shexp, &L->ffn_up_shexp, &L->ffn_gate_inp_shexp };
    float *Y[3] = { c->hb, c->hb2, c->moe_logits };
    const bool gated = L->ffn_gate_inp_shexp.data != NULL;
    matmul_multi(c, W, Y, gated ? 3 : 2, in, ub->n);
    activate_par(c, c->hb, c->hb2, (size_t)ub->n * (size_t)ff, ACT_SILU);
    matmul(c, &L->ffn_down_shexp, c->hb, ub->n, c->moe_y);
    shexp_job j = { out, c->moe_y, gated ? c->moe_logits : NULL, c->m->hp.n_embd };
    pool_share(c->pool, ub->n, shexp_rows, &j);
}

/* The gated activation fused into the experts' gate and up products. */
static void (*expert_glu(int act))(float *, const float *, int) {
    return act == ACT_SWIGLU_OAI ? op_swiglu_oai : act == ACT_GELU_TANH ? op_gelu_tanh_mul : op_silu_mul;
}

void layer_ffn_moe(hearth_ctx *c, const ht_ubatch *ub, const ht_layer *L, const float *in, float *out, int act) {
    layer_ffn_moe_routed(c, ub, L, in, in, out, act);
}

void layer_ffn_moe_routed(hearth_ctx *c, const ht_ubatch *ub, const ht_layer *L, const float *router_in, const float *in,
                          float *out, int act) {
    const ht_hparams *hp = &c->m->hp;
    const int n = ub->n, NE = hp->n_expert, K = hp->n_expert_used;
    int *sel = c->moe_sel, *cnt = c->moe_cnt, *next = c->moe_first, *row = c->moe_row;
    matmul_bias(c, &L->ffn_gate_inp, &L->ffn_gate_inp_b, router_in, n, c->moe_logits);
    memset(cnt, 0, (size_t)NE * sizeof *cnt);
    for (int t = 0; t < n; t++) {
        moe_route(hp, c->moe_logits + (size_t)t * NE, L->exp_probs_b.data, sel + (size_t)t * K, c->moe_w + (size_t)t * K);
        for (int k = 0; k < K; k++) cnt[sel[t * K + k]]++;
    }
    /* the batch's choices ordered by expert (tokens in order within one): each expert then meets all its rows
     * in one product; moe_first serves as the fill cursor here */
    for (int e = 0, r = 0; e < NE; r += cnt[e++]) next[e] = r;
    for (int t = 0; t < n; t++)
        for (int k = 0; k < K; k++) {
            int r = next[sel[t * K + k]]++;
            row[t * K + k] = r;
            c->moe_src[r] = t;
        }
    matmul_experts(c, &L->ffn_gate_exps, &L->ffn_gate_exps_b, &L->ffn_up_exps, &L->ffn_up_exps_b, in, c->moe_src, n * K,
                   cnt, c->moe_g, c->moe_u, expert_glu(act));
    if (c->m->tp_size > 1) {   /* each rank its share of every expert's rows: gathered as layer_ffn_gated's are */
        dist_tp_gather(c, c->moe_g, n * K, hp->n_ff_exp, 0, c->tp_in);
        matmul_experts(c, &L->ffn_down_exps, &L->ffn_down_exps_b, NULL, NULL, c->tp_in, NULL, n * K, cnt, c->tp_out, NULL, NULL);
        dist_tp_gather(c, c->tp_out, n * K, hp->n_embd, 0, c->moe_y);
    } else
        matmul_experts(c, &L->ffn_down_exps, &L->ffn_down_exps_b, NULL, NULL, c->moe_g, NULL, n * K, cnt, c->moe_y, NULL, NULL);
    moe_job j = { c, out, ub->n, L->ffn_down_exps_s.data };
    if (n == 1) moe_combine(&j, 0, 1);   /* decode: a few thousand products, less than waking a thread */
    else pool_run(c->pool, moe_combine, &j);
    if (L->ffn_gate_shexp.data) moe_shared_expert(c, ub, L, in, out);
}

/* ---- per-layer embeddings (Gemma 4) ---- */
/* Token i's row of the table into c->ple_row, times sqrt(P), added to its normed projection, times 1/sqrt(2). */
void layer_ple_inputs(hearth_ctx *c, const ht_ubatch *ub, const float *x0) {
    const hearth_model *m = c->m;
    const ht_hparams *hp = &m->hp;
    const int E = hp->n_embd, P = hp->n_embd_per_layer, NL = hp->n_layer, W = NL * P;
    const ht_tensor *T = &m->ple_tok_embd;
    const ht_traits *tr = ht_get_traits(T->type);
    const float ts = sqrtf((float)P), is2 = 1.0f / sqrtf(2.0f);
    matmul(c, &m->ple_model_proj, x0, ub->n, c->ple);
    op_scale(c->ple, 1.0f / sqrtf((float)E), ub->n * W);
    const ht_ubatch rows = { .n = ub->n * NL };   /* every (token, layer) chunk a row of P */
    layer_norm_rows(c, &rows, c->ple, c->ple, &m->ple_proj_norm, NULL, P, hp->norm_eps, NORM_RMS);
    for (int i = 0; i < ub->n; i++) {
        float *e = c->ple + (size_t)i * W;
        if (ub->tokens[i] < T->ne[1]) tr->to_float(ht_row(T, ub->tokens[i]), c->ple_row, W);
        else memset(c->ple_row, 0, (size_t)W * sizeof(float));   /* (Gemma 3n from HF: ids past its text rows) */
        for (int k = 0; k < W; k++) e[k] = (e[k] + c->ple_row[k] * ts) * is2;
    }
}

typedef struct { float *g; const float *e; int P, W; } ple_mul_job;

static void ple_mul_rows(const void *arg, int r0, int r1) {
    const ple_mul_job *j = arg;
    for (int i = r0; i < r1; i++) {
        float *g = j->g + (size_t)i * j->P;
        const float *e = j->e + (size_t)i * j->W;
        op_gelu_tanh(g, j->P);
        for (int k = 0; k < j->P; k++) g[k] *= e[k];
    }
}

void layer_ple_out(hearth_ctx *c, const ht_ubatch *ub, int il, const float *in, float *out) {
    const ht_hparams *hp = &c->m->hp;
    const ht_layer *L = &c->m->layers[il];
    const int E = hp->n_embd, P = hp->n_embd_per_layer;
    matmul(c, &L->ple_gate, in, ub->n, c->hb);
    ple_mul_job j = { c->hb, c->ple + (size_t)il * P, P, hp->n_layer * P };
    pool_share(c->pool, ub->n, ple_mul_rows, &j);
    matmul(c, &L->ple_proj, c->hb, ub->n, out);
    layer_norm_rows(c, ub, out, out, &L->ple_norm, NULL, E, hp->norm_eps, NORM_RMS);
}

typedef struct { float *x; float s; int width; } scale_job;

static void scale_rows(const void *arg, int r0, int r1) {
    const scale_job *j = arg;
    op_scale(j->x + (size_t)r0 * j->width, j->s, (r1 - r0) * j->width);
}

void layer_scale_rows(hearth_ctx *c, const ht_ubatch *ub, float *x, float s, int width) {
    scale_job j = { x, s, width };
    pool_share(c->pool, ub->n, scale_rows, &j);
}
