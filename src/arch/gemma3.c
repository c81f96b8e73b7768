/* gemma3.c — Gemma 3 (text): embeddings × sqrt(n_embd); RMSNorm "sandwich" layers (pre- and post-norm
 * around both attention and FFN); per-head RMSNorm on q and k; NEOX rope; GELU-tanh gated FFN; tied
 * output. Sliding-window attention on every layer but each swa_period-th (those are global): local
 * layers use rope.freq_base_swa (default 10000) and no rope scaling, global ones rope.freq_base.
 * The GGUF converter stores every norm weight already as (1 + w), so they are used as they are. */
#include <math.h>

#include "model/layers.h"

#define GEMMA3_SWA_PERIOD 6            /* llama.cpp's fixed pattern: 5 local layers, then a global one */
#define GEMMA3_SWA_ROPE_BASE 10000.0f
#define GEMMA3_27B_LAYERS 62           /* the 27B scales queries by 1/sqrt(n_embd/n_head), not 1/sqrt(head_dim) */

static int gemma3_hparams(hearth_model *m, hearth_err *err) {
    if (model_common_hparams(m, err)) return -1;
    ht_hparams *hp = &m->hp;
    float f;
    hp->rope_type = ROPE_NEOX;
    if (model_meta_int(m, "attention.sliding_window_pattern", 0, 1 << 16, GEMMA3_SWA_PERIOD, &hp->swa_period, err)) return -1;
    if (hp->swa_period == 0) hp->swa_period = GEMMA3_SWA_PERIOD;
    if (!model_meta_f32(m, "rope.freq_base_swa", &hp->rope_base_swa)) hp->rope_base_swa = GEMMA3_SWA_ROPE_BASE;
    hp->rope_scale_swa = 1.0f;
    if (model_meta_f32(m, "attention.scale", &f) && f > 0) hp->attn_scale = f;
    else if (hp->n_layer == GEMMA3_27B_LAYERS) hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    hp->embd_scale = sqrtf((float)hp->n_embd);
    return 0;
}

static int gemma3_bind(hearth_model *m, hearth_err *err) {
    if (llama_bind_common(m, err)) return -1;
    const ht_hparams *hp = &m->hp;
    int E = hp->n_embd;
    for (int il = 0; il < hp->n_layer; il++) {
        ht_layer *L = &m->layers[il];
        if (model_bind(m, &L->q_norm, true, err, hp->head_dim, 1, "blk.%d.attn_q_norm.weight", il) ||
            model_bind(m, &L->k_norm, true, err, hp->head_dim, 1, "blk.%d.attn_k_norm.weight", il) ||
            model_bind(m, &L->attn_post_norm, true, err, E, 1, "blk.%d.post_attention_norm.weight", il) ||
            model_bind(m, &L->ffn_post_norm, true, err, E, 1, "blk.%d.post_ffw_norm.weight", il))
            return -1;
    }
    return 0;
}

/* x += post_norm(attn(norm(x))); x += post_norm(ffn(norm(x))); logits = output(norm(x)). */
static void gemma3_layer(hearth_ctx *c, const ht_ubatch *ub, int il) {
    const hearth_model *m = c->m;
    const ht_hparams *hp = &m->hp;
    const ht_layer *L = &m->layers[il];
    int E = hp->n_embd;
    float eps = hp->norm_eps;
    bool swa = ctx_layer_is_swa(m, il);
    layer_norm_rows(c, ub, c->xb, c->x, &L->attn_norm, NULL, E, eps, NORM_RMS);
    layer_attention(c, ub, il, c->xb, c->xb2, swa ? hp->rope_base_swa : hp->rope_base, swa ? hp->sliding_window : 0);
    layer_norm_rows(c, ub, c->xb2, c->xb2, &L->attn_post_norm, NULL, E, eps, NORM_RMS);
    layer_residual(c, ub, c->x, c->xb2, E);
    layer_norm_rows(c, ub, c->xb, c->x, &L->ffn_norm, NULL, E, eps, NORM_RMS);
    layer_ffn_gated(c, ub, L, c->xb, c->xb2, ACT_GELU_TANH);
    layer_norm_rows(c, ub, c->xb2, c->xb2, &L->ffn_post_norm, NULL, E, eps, NORM_RMS);
    layer_residual(c, ub, c->x, c->xb2, E);
}

const ht_arch ht_arch_gemma3 = { "gemma3", false, gemma3_hparams, gemma3_bind, llama_embed, gemma3_layer, llama_head };
