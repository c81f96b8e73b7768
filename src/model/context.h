/* context.h — the shared layers that need a context (KV cache, thread pool, scratch): token embedding,
 * rope over a micro-batch, attention through the cache, and the output head. Architecture files call
 * these; see context.c. */
#ifndef HEARTH_CONTEXT_H
#define HEARTH_CONTEXT_H

#include "model/model.h"

/* A zeroed buffer of n * sz bytes whose pages cost memory only once touched (blocks of 64 KiB or more are
 * anonymous mappings); *fail set on overflow or out of memory. Freed with ctx_buf_free. */
void *ctx_buf_calloc(size_t n, size_t sz, bool *fail);
void ctx_buf_free(void *p);
/* True if layer il uses a sliding window (its cache is then a ring of window + n_batch rows). */
bool ctx_layer_is_swa(const hearth_model *m, int il);
/* x[i] = token embedding row of ub->tokens[i] (n_embd floats each), dequantized, times hp.embd_scale. */
void ctx_embed_tokens(hearth_ctx *c, const ht_ubatch *ub, float *x);
/* x[i] = row ids[i] of table T (ids NULL: row 0 for every i), dequantized: learned position embeddings
 * (ids = ub->pos) and token-type embeddings (type 0). Rows were range-checked by the caller. */
void ctx_embed_rows(const ht_ubatch *ub, const ht_tensor *T, const int32_t *ids, float *x);
/* Computes the cos/sin tables (c->rope_cos / rope_sin, a row per token) for the micro-batch's positions with
 * the given base and linear scale, over n_rot dims, with frequency divisors ff (NULL: the model's, if any). */
void ctx_rope_tables(hearth_ctx *c, const ht_ubatch *ub, float base, float scale, int n_rot, const float *ff);
/* Stores k, v ([n][n_head_kv * head_dim(_v)]) in layer il's cache, then out[i] = softmax(q·K^T·scale)·V
 * per head over the positions token i may see (causal or not per the model; window > 0 limits it to
 * the last `window` positions); when the layer has attn_sinks, head h's sink is one more logit in its
 * softmax's denominator (it takes probability mass and gives no value). */
void ctx_attention(hearth_ctx *c, int il, const ht_ubatch *ub, float *q, float *k, float *v,
                   float *out, float scale, int window);
/* Runs this process's layers (all, or an MPI rank's range) over c->x, then counts the micro-batch's rows as
 * cached. */
void ctx_layers(hearth_ctx *c, const ht_ubatch *ub);
int ctx_serial_below(const hearth_model *m, int n_threads);
/* Bytes of KV cache layer il holds (both K and V, all sequences); il < 0: the whole cache. */
size_t ctx_kv_bytes(const hearth_ctx *c, int il);
/* For the rows the batch wants: keeps x (the final normed hidden state) and, if the model has logits,
 * computes them from x with the output matrix (or the tied embeddings) and output bias. */
void ctx_output(hearth_ctx *c, const ht_ubatch *ub, const float *x);
/* Same with the logits computed from `head` rows instead (a head transform applied to x, e.g. BERT's
 * masked-LM dense + GELU + LayerNorm); head NULL: hidden states only. */
void ctx_output_head(hearth_ctx *c, const ht_ubatch *ub, const float *hidden, const float *head);

#endif
