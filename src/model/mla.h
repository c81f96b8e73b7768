/* mla.h — multi-head latent attention (DeepSeek-V2/V3, Kimi-K2, GLM-4.7-Flash), the attention block of layers
 * that cache a compressed latent instead of per-head keys and values; see mla.c. */
#ifndef HEARTH_MLA_H
#define HEARTH_MLA_H

#include "model/context.h"

/* Per-thread attention scratch the latent attention needs at a context of n_ctx (context.c sizes it once). */
size_t mla_scratch_bytes(const ht_hparams *hp, int n_ctx);
/* Latent attention block of layer il: in (normed input, [n][n_embd]) -> out ([n][n_embd]). Caches per token
 * the normed latent and the roped shared key (hp.head_dim = kv_lora_rank + n_rot values, in the cache type)
 * and attends in the latent space (attn_k_b folded into q, attn_v_b applied after softmax). */
void layer_mla_attention(hearth_ctx *c, const ht_ubatch *ub, int il, const float *in, float *out);

#endif
