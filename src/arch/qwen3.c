/* qwen3.c — Qwen3 and Qwen3-MoE: the Llama decoder with a per-head RMSNorm on q and k before rope
 * (attn_q_norm / attn_k_norm), NEOX rope, and head_dim from attention.key_length, independent of
 * n_embd / n_head. Binding and the forward pass are Llama's; layer_attention applies the q/k norms, and
 * qwen3moe's expert stacks (qwen3moe.expert_count, expert_feed_forward_length) make each FFN a mixture. */
#include "model/layers.h"

static int qwen3_hparams(hearth_model *m, hearth_err *err) {
    if (model_common_hparams(m, err)) return -1;
    m->hp.rope_type = ROPE_NEOX;
    return 0;
}

static int qwen3_bind(hearth_model *m, hearth_err *err) {
    if (llama_bind_common(m, err)) return -1;
    const ht_hparams *hp = &m->hp;
    for (int il = 0; il < hp->n_layer; il++) {
        ht_layer *L = &m->layers[il];
        if (model_bind(m, &L->q_norm, true, err, hp->head_dim, 1, "blk.%d.attn_q_norm.weight", il) ||
            model_bind(m, &L->k_norm, true, err, hp->head_dim, 1, "blk.%d.attn_k_norm.weight", il))
            return -1;
    }
    return 0;
}

static int qwen3moe_hparams(hearth_model *m, hearth_err *err) {
    if (qwen3_hparams(m, err)) return -1;
    return m->hp.n_expert ? 0 : herr(err, "metadata qwen3moe.expert_count missing: a qwen3moe model needs experts");
}

const ht_arch ht_arch_qwen3 = { "qwen3", false, qwen3_hparams, qwen3_bind, llama_embed, llama_layer, llama_head };
const ht_arch ht_arch_qwen3moe = { "qwen3moe", false, qwen3moe_hparams, qwen3_bind, llama_embed, llama_layer, llama_head };
