/* pack.h — repacking a model's weight matrices into the active kernel set's row-interleaved layouts. */
#ifndef HEARTH_PACK_H
#define HEARTH_PACK_H

#include "model/model.h"

/* Once per model (later calls return at once): every matrix the forward pass multiplies whose type the active
 * kernel set packs gets t->pack / t->packed, and its pages of the file mapping are released. */
int model_pack_weights(hearth_model *m, ht_pool *pool, hearth_err *err);
/* The matrices the forward pass of this process's layers multiplies through matmul() and packs (at most
 * MODEL_MATRICES(m) slots; absent ones have data NULL), the output head last: out[] gets their views. */
#define LAYER_MATRICES 31
#define MODEL_MATRICES(m) (LAYER_MATRICES * (m)->hp.n_layer + 1)
int model_matrices(hearth_model *m, ht_tensor **out);

#endif
