/* gemma4.c — Gemma 4 (text), dense (E2B / E4B / 31B) and mixture of experts (26B-A4B). Gemma 3's sandwich-normed
 * layers, with:
 *  - sliding and global layers per attention.sliding_window_pattern, each with its own head size, kv heads and
 *    rope dims (key_length_swa / rope.dimension_count_swa vs key_length / rope.dimension_count, head_count_kv
 *    per layer); global layers rope with the rope_freqs divisors, sliding ones with rope.freq_base_swa and none;
 *  - q / k RMSNorm, V RMS-normed without a weight, V = the K projection where attn_v is absent; scale 1;
 *  - the last shared_kv_layers layers compute no K / V and attend the cache of layer n_kv - 2 (sliding) or
 *    n_kv - 1 (global), n_kv = the layers that keep one (the reference's rule);
 *  - FFN widths per layer; MoE layers run a dense GELU MLP (ffn_norm .. post_ffw_norm_1) beside routed experts
 *    (pre_ffw_norm_2 .. post_ffw_norm_2; router on RMSNorm(x) / sqrt(n_embd) * ffn_gate_inp.scale, softmax top-k
 *    renormalized, fused [gate | up] expert rows, each expert's output times ffn_down_exps.scale), summed, then
 *    post_ffw_norm;
 *  - per-layer embeddings (embedding_length_per_layer_input) added after each layer's FFN, then the whole hidden
 *    state times layer_output_scale;
 *  - embeddings times sqrt(n_embd), tied output (or output.weight), final logit softcap. Norm weights are used as
 *    stored (Gemma 4's converter shifts none). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/layers.h"
#include "compute/ops.h"

void gemma_hparams(hearth_model *m) {
    ht_hparams *hp = &m->hp;
    hp->rope_type = ROPE_NEOX;
    hp->swa_per_layer = true;
    hp->rope_scale_swa = 1.0f;
    hp->attn_scale = 1.0f;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    hp->v_norm = true;
    float cap;
    if (model_meta_f32(m, "final_logit_softcapping", &cap) && cap > 0) hp->logit_softcap = cap;
}

static int gemma4_hparams(hearth_model *m, hearth_err *err) {
    if (model_common_hparams(m, err)) return -1;
    ht_hparams *hp = &m->hp;
    int hd_swa, hdv_swa, rot_swa;
    if (model_meta_int(m, "attention.key_length_swa", 1, 4096, hp->head_dim, &hd_swa, err) ||
        model_meta_int(m, "attention.value_length_swa", 1, 4096, hd_swa, &hdv_swa, err) ||
        model_meta_int(m, "rope.dimension_count_swa", 0, hd_swa, hd_swa, &rot_swa, err) ||
        model_meta_int(m, "embedding_length_per_layer_input", 0, 1 << 16, 0, &hp->n_embd_per_layer, err))
        return -1;
    if (hp->head_dim != hp->head_dim_v || hd_swa != hdv_swa)
        return herr(err, "gemma4: key and value head sizes differ (%d / %d, sliding %d / %d)", hp->head_dim, hp->head_dim_v,
                    hd_swa, hdv_swa);
    if (rot_swa % 2) return herr(err, "gemma4: rope dimension %d of the sliding layers is odd", rot_swa);
    if (!hp->sliding_window) return herr(err, "metadata gemma4.attention.sliding_window missing");
    if ((int64_t)hp->n_layer * hp->n_embd_per_layer > (1 << 24))
        return herr(err, "gemma4: %d layers of %d per-layer inputs is implausible", hp->n_layer, hp->n_embd_per_layer);
    /* buffers are sized by the widest layer */
    hp->head_dim = hp->head_dim_v = HT_MAX(hp->head_dim, hd_swa);
    hp->n_rot = HT_MAX(hp->n_rot, rot_swa);
    gemma_hparams(m);
    return 0;
}

/* The sliding pattern, each layer's attention geometry and FFN width, and which cache a KV-sharing layer reads. */
static int gemma4_layout(hearth_model *m, int *n_ff, hearth_err *err) {
    ht_hparams *hp = &m->hp;
    const int NL = hp->n_layer;
    if (model_swa_pattern(m, 0, err)) return -1;
    int hd, hd_swa, rot_swa, n_shared, max;
    int *nkv = malloc((size_t)NL * sizeof *nkv);
    if (!nkv) return herr(err, "out of memory");
    int rc = model_meta_layer_ints(m, "attention.head_count_kv", 1, hp->n_head, hp->n_head, nkv, &max, err) ||
             model_meta_layer_ints(m, "feed_forward_length", 1, 1 << 24, hp->n_ff, n_ff, &max, err) ||
             model_meta_int(m, "attention.key_length", 1, 4096, hp->head_dim, &hd, err) ||
             model_meta_int(m, "attention.key_length_swa", 1, 4096, hd, &hd_swa, err) ||
             model_meta_int(m, "rope.dimension_count_swa", 0, hd_swa, hd_swa, &rot_swa, err) ||
             model_meta_int(m, "attention.shared_kv_layers", 0, NL - 1, 0, &n_shared, err) ? -1 : 0;
    int rot;
    if (!rc) rc = model_meta_int(m, "rope.dimension_count", 0, hd, hd, &rot, err);
    for (int il = 0; !rc && il < NL; il++) {
        ht_layer *L = &m->layers[il];
        L->head_dim = L->head_dim_v = L->swa ? hd_swa : hd;
        L->n_rot = L->swa ? rot_swa : rot;
        L->n_head_kv = nkv[il];
        if (hp->n_head % L->n_head_kv)
            rc = herr(err, "layer %d: head_count_kv %d does not divide head_count %d", il, L->n_head_kv, hp->n_head);
    }
    free(nkv);
    return rc ? rc : model_share_kv(m, n_shared, err);
}

/* gate and up of a fused [gate | up] expert stack as two stacks of views (their slabs: each expert's half). */
static int split_gate_up(hearth_model *m, ht_layer *L, int F, hearth_err *err) {
    const ht_tensor *t = &L->ffn_gate_up_exps;
    const int NE = (int)t->ne[2];
    const void **sl = calloc(2 * (size_t)NE, sizeof *sl);
    if (!sl || model_own(m, (void *)sl, err)) return sl ? -1 : herr(err, "out of memory");
    for (int e = 0; e < NE; e++) {
        sl[e] = ht_row(t, (int64_t)e * 2 * F);
        sl[NE + e] = ht_row(t, (int64_t)e * 2 * F + F);
    }
    ht_tensor *half[2] = { &L->ffn_gate_exps, &L->ffn_up_exps };
    for (int h = 0; h < 2; h++) {
        *half[h] = *t;
        half[h]->ne[1] = F;
        half[h]->nbytes = (size_t)NE * F * t->row_bytes;
        half[h]->slabs = (const void *const *)(sl + (size_t)h * NE);
        half[h]->data = sl[(size_t)h * NE];
    }
    return 0;
}

static int gemma4_bind_moe(hearth_model *m, ht_layer *L, int il, hearth_err *err) {
    const ht_hparams *hp = &m->hp;
    const int E = hp->n_embd, F = hp->n_ff_exp, NE = hp->n_expert;
    if (model_bind(m, &L->ffn_gate_inp_s, true, err, E, 1, "blk.%d.ffn_gate_inp.scale", il) ||
        model_bind(m, &L->ffn_pre_norm_2, true, err, E, 1, "blk.%d.pre_ffw_norm_2.weight", il) ||
        model_bind(m, &L->ffn_post_norm_1, true, err, E, 1, "blk.%d.post_ffw_norm_1.weight", il) ||
        model_bind(m, &L->ffn_post_norm_2, true, err, E, 1, "blk.%d.post_ffw_norm_2.weight", il) ||
        model_bind(m, &L->ffn_down_exps_s, false, err, NE, 1, "blk.%d.ffn_down_exps.scale", il))
        return -1;
    if (model_has_tensor(m, "blk.%d.ffn_gate_up_exps.weight", il)) {
        if (model_bind_experts(m, &L->ffn_gate_up_exps, err, E, 2 * F, "blk.%d.ffn_gate_up_exps.weight", il) ||
            split_gate_up(m, L, F, err))
            return -1;
    } else if (model_bind_experts(m, &L->ffn_gate_exps, err, E, F, "blk.%d.ffn_gate_exps.weight", il) ||
               model_bind_experts(m, &L->ffn_up_exps, err, E, F, "blk.%d.ffn_up_exps.weight", il))
        return -1;
    return model_bind_experts(m, &L->ffn_down_exps, err, F, E, "blk.%d.ffn_down_exps.weight", il);
}

static int gemma4_bind(hearth_model *m, hearth_err *err) {
    ht_hparams *hp = &m->hp;
    const int E = hp->n_embd, NL = hp->n_layer, P = hp->n_embd_per_layer;
    int *n_ff = malloc((size_t)NL * sizeof *n_ff);
    if (!n_ff) return herr(err, "out of memory");
    int rc = gemma4_layout(m, n_ff, err);
    if (!rc && (model_bind(m, &m->tok_embd, true, err, E, -1, "token_embd.weight") ||
                model_bind(m, &m->output_norm, true, err, E, 1, "output_norm.weight")))
        rc = -1;
    if (!rc) {
        hp->n_vocab = (int)m->tok_embd.ne[1];
        if (model_bind(m, &m->output, false, err, E, hp->n_vocab, "output.weight") ||
            model_bind(m, &m->rope_freqs, false, err, -1, 1, "rope_freqs.weight"))
            rc = -1;
    }
    if (!rc && P && (model_bind(m, &m->ple_tok_embd, true, err, (int64_t)NL * P, hp->n_vocab, "per_layer_token_embd.weight") ||
                     model_bind(m, &m->ple_model_proj, true, err, E, (int64_t)NL * P, "per_layer_model_proj.weight") ||
                     model_bind(m, &m->ple_proj_norm, true, err, P, 1, "per_layer_proj_norm.weight")))
        rc = -1;
    for (int il = 0; !rc && il < NL; il++) {
        ht_layer *L = &m->layers[il];
        const int hd = L->head_dim, QD = hp->n_head * hd, KD = L->n_head_kv * hd;
        if (!L->swa && m->rope_freqs.data) {   /* the global layers' divisors: rope_freqs is theirs alone */
            if (m->rope_freqs.ne[0] != L->n_rot / 2) {
                rc = herr(err, "tensor rope_freqs.weight has %lld values, the global layers rope %d pairs",
                          (long long)m->rope_freqs.ne[0], L->n_rot / 2);
                break;
            }
            L->rope_freqs = m->rope_freqs;
        }
        if (model_bind(m, &L->attn_norm, true, err, E, 1, "blk.%d.attn_norm.weight", il) ||
            model_bind(m, &L->wq, true, err, E, QD, "blk.%d.attn_q.weight", il) ||
            model_bind(m, &L->q_norm, true, err, hd, 1, "blk.%d.attn_q_norm.weight", il) ||
            model_bind(m, &L->wo, true, err, QD, E, "blk.%d.attn_output.weight", il) ||
            model_bind(m, &L->attn_post_norm, true, err, E, 1, "blk.%d.post_attention_norm.weight", il) ||
            model_bind(m, &L->out_scale, false, err, 1, 1, "blk.%d.layer_output_scale.weight", il) ||
            model_bind(m, &L->ffn_norm, true, err, E, 1, "blk.%d.ffn_norm.weight", il) ||
            model_bind(m, &L->ffn_gate, true, err, E, n_ff[il], "blk.%d.ffn_gate.weight", il) ||
            model_bind(m, &L->ffn_up, true, err, E, n_ff[il], "blk.%d.ffn_up.weight", il) ||
            model_bind(m, &L->ffn_down, true, err, n_ff[il], E, "blk.%d.ffn_down.weight", il) ||
            model_bind(m, &L->ffn_post_norm, true, err, E, 1, "blk.%d.post_ffw_norm.weight", il) ||
            model_bind(m, &L->ffn_gate_inp, false, err, E, hp->n_expert, "blk.%d.ffn_gate_inp.weight", il))
            rc = -1;
        else if (!L->kv_shared && (model_bind(m, &L->wk, true, err, E, KD, "blk.%d.attn_k.weight", il) ||
                                   model_bind(m, &L->wv, false, err, E, KD, "blk.%d.attn_v.weight", il) ||
                                   model_bind(m, &L->k_norm, true, err, hd, 1, "blk.%d.attn_k_norm.weight", il)))
            rc = -1;
        else if (L->ffn_gate_inp.data && (!hp->n_expert ? herr(err, "layer %d has a router but the model no experts", il)
                                                       : gemma4_bind_moe(m, L, il, err)))
            rc = -1;
        else if (P && (model_bind(m, &L->ple_gate, true, err, E, P, "blk.%d.inp_gate.weight", il) ||
                       model_bind(m, &L->ple_proj, true, err, P, E, "blk.%d.proj.weight", il) ||
                       model_bind(m, &L->ple_norm, true, err, E, 1, "blk.%d.post_norm.weight", il)))
            rc = -1;
    }
    m->rope_freqs = (ht_tensor){ 0 };   /* bound per layer: the sliding layers have none */
    free(n_ff);
    return rc;
}

/* The router's input: RMSNorm(x) / sqrt(n_embd) * ffn_gate_inp.scale, row by row. */
typedef struct { float *out; const float *x, *s; int E; float eps; } router_job;

static void router_rows(const void *arg, int r0, int r1) {
    const router_job *j = arg;
    const float inv = 1.0f / sqrtf((float)j->E);
    for (int i = r0; i < r1; i++) {
        float *o = j->out + (size_t)i * j->E;
        op_rmsnorm(o, j->x + (size_t)i * j->E, NULL, j->E, j->eps);
        for (int k = 0; k < j->E; k++) o[k] = o[k] * inv * j->s[k];
    }
}

/* x += post_attention_norm(attn(attn_norm(x))); x += post_ffw_norm(ffn) where ffn is the GELU MLP, or in MoE layers
 * post_ffw_norm_1(MLP(ffn_norm(x))) + post_ffw_norm_2(experts(pre_ffw_norm_2(x))); then x += the layer's
 * per-layer embedding; x *= layer_output_scale. */
static void gemma4_layer(hearth_ctx *c, const ht_ubatch *ub, int il) {
    const hearth_model *m = c->m;
    const ht_hparams *hp = &m->hp;
    const ht_layer *L = &m->layers[il];
    const int E = hp->n_embd;
    const float eps = hp->norm_eps;
    const bool swa = L->swa;
    if (hp->n_embd_per_layer && il == m->layer_lo) {   /* the per-layer inputs, from the scaled token embeddings */
        ctx_embed_tokens(c, ub, c->xb);
        layer_ple_inputs(c, ub, c->xb);
    }
    layer_norm_rows(c, ub, c->xb, c->x, &L->attn_norm, NULL, E, eps, NORM_RMS);
    layer_attention(c, ub, il, c->xb, c->xb2, swa ? hp->rope_base_swa : hp->rope_base, swa ? hp->sliding_window : 0);
    layer_norm_rows(c, ub, c->xb2, c->xb2, &L->attn_post_norm, NULL, E, eps, NORM_RMS);
    layer_residual(c, ub, c->x, c->xb2, E);
    if (L->ffn_gate_inp.data) {
        router_job rj = { c->xb2, c->x, L->ffn_gate_inp_s.data, E, eps };
        pool_share(c->pool, ub->n, router_rows, &rj);
        layer_norm_rows(c, ub, c->xb, c->x, &L->ffn_pre_norm_2, NULL, E, eps, NORM_RMS);
        layer_ffn_moe_routed(c, ub, L, c->xb2, c->xb, c->xb2, ACT_GELU_TANH);
        layer_norm_rows(c, ub, c->xb2, c->xb2, &L->ffn_post_norm_2, NULL, E, eps, NORM_RMS);
        layer_norm_rows(c, ub, c->xb, c->x, &L->ffn_norm, NULL, E, eps, NORM_RMS);
        layer_ffn_gated(c, ub, L, c->xb, c->xb, ACT_GELU_TANH);   /* its input is read before its output is written */
        layer_norm_rows(c, ub, c->xb, c->xb, &L->ffn_post_norm_1, NULL, E, eps, NORM_RMS);
        layer_residual(c, ub, c->xb2, c->xb, E);
    } else {
        layer_norm_rows(c, ub, c->xb, c->x, &L->ffn_norm, NULL, E, eps, NORM_RMS);
        layer_ffn_gated(c, ub, L, c->xb, c->xb2, ACT_GELU_TANH);
    }
    layer_norm_rows(c, ub, c->xb2, c->xb2, &L->ffn_post_norm, NULL, E, eps, NORM_RMS);
    layer_residual(c, ub, c->x, c->xb2, E);
    if (hp->n_embd_per_layer) {
        layer_ple_out(c, ub, il, c->x, c->hb2);
        layer_residual(c, ub, c->x, c->hb2, E);
    }
    if (L->out_scale.data) layer_scale_rows(c, ub, c->x, ((const float *)L->out_scale.data)[0], E);
}

const ht_arch ht_arch_gemma4 = { "gemma4", false, gemma4_hparams, gemma4_bind, llama_embed, gemma4_layer, llama_head };
