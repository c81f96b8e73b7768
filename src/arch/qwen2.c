/* qwen2.c — Qwen2 / Qwen2.5: the Llama decoder with q/k/v projection biases and NEOX rope (the two
 * halves of each head rotated together); output tied to the embeddings when output.weight is absent.
 * Binding and the forward pass are Llama's (arch/llama.c); layer_attention adds the biases. */
#include "model/layers.h"

static int qwen2_hparams(hearth_model *m, hearth_err *err) {
    if (model_common_hparams(m, err)) return -1;
    m->hp.rope_type = ROPE_NEOX;
    return 0;
}

static int qwen2_bind(hearth_model *m, hearth_err *err) {
    if (llama_bind_common(m, err)) return -1;
    const ht_hparams *hp = &m->hp;
    int QD = hp->n_head * hp->head_dim, KD = hp->n_head_kv * hp->head_dim, VD = hp->n_head_kv * hp->head_dim_v;
    for (int il = 0; il < hp->n_layer; il++) {
        ht_layer *L = &m->layers[il];
        if (model_bind(m, &L->bq, true, err, QD, 1, "blk.%d.attn_q.bias", il) ||
            model_bind(m, &L->bk, true, err, KD, 1, "blk.%d.attn_k.bias", il) ||
            model_bind(m, &L->bv, true, err, VD, 1, "blk.%d.attn_v.bias", il))
            return -1;
    }
    return 0;
}

const ht_arch ht_arch_qwen2 = { "qwen2", false, qwen2_hparams, qwen2_bind, llama_embed, llama_layer, llama_head };
