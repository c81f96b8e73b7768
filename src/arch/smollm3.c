/* smollm3.c — SmolLM3: the Llama block (NORM rope, GQA, SwiGLU, tied output), except that every 4th layer
 * ((il + 1) % 4 == 0, fixed by the architecture, no GGUF key) attends without rope. */
#include "model/layers.h"

#define SMOLLM3_NOPE_PERIOD 4

static int smollm3_hparams(hearth_model *m, hearth_err *err) {
    if (model_common_hparams(m, err)) return -1;
    m->hp.rope_type = ROPE_NORM;
    return 0;
}

static void smollm3_layer(hearth_ctx *c, const ht_ubatch *ub, int il) {
    const ht_hparams *hp = &c->m->hp;
    const ht_layer *L = &c->m->layers[il];
    const int E = hp->n_embd;
    layer_norm_rows(c, ub, c->xb, c->x, &L->attn_norm, NULL, E, hp->norm_eps, NORM_RMS);
    layer_attention(c, ub, il, c->xb, c->xb2, (il + 1) % SMOLLM3_NOPE_PERIOD ? hp->rope_base : 0, 0);
    layer_residual(c, ub, c->x, c->xb2, E);
    layer_norm_rows(c, ub, c->xb, c->x, &L->ffn_norm, NULL, E, hp->norm_eps, NORM_RMS);
    layer_ffn_gated(c, ub, L, c->xb, c->xb2, ACT_SILU);
    layer_residual(c, ub, c->x, c->xb2, E);
}

const ht_arch ht_arch_smollm3 = { "smollm3", false, smollm3_hparams, llama_bind_common, llama_embed, smollm3_layer, llama_head };
