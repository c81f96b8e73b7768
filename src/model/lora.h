/* lora.h — LoRA adapters applied without merging: for each adapted weight W, y = W x + s (alpha / rank) B (A x),
 * where s is the adapter's scale in the context. The base stays as it is (quantized, packed, shared by contexts);
 * adapters and scales can change between decodes. Or merged into the weights (hearth_lora_merge). See lora.c. */
#ifndef HEARTH_LORA_H
#define HEARTH_LORA_H

#include "model/context.h"

/* The context's product hook (matmul.c; n_mat matrices of the same x, y[m] = W[m] x of n_tok rows): adds the
 * terms of every adapter of the context that adapts W[m]. Before the products (fuse set), plans them into the
 * products' job and returns true, or returns false when they cannot be fused; after them (fuse NULL), adds
 * them itself. Nothing when the context has none. */
bool lora_add(hearth_ctx *c, const ht_tensor *const *W, float *const *y, int n_mat, const float *x, int n_tok,
              ht_product_fuse *fuse);
void lora_ctx_free(hearth_ctx *c);
/* hearth_lora_merge, with the type of each merged copy chosen by type_of (NULL: the weight's own type) — the
 * quantizer's, when quantize --lora writes the merged model out. */
typedef uint32_t (*lora_type_fn)(const hearth_model *m, const ht_tensor *W, void *user);
int lora_merge(hearth_model *m, hearth_lora *const *a, const float *scales, int n, int n_threads, lora_type_fn type_of,
               void *user, size_t *bytes, hearth_err *err);

#endif
