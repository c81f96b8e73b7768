/* pack.h — repacking a model's weight matrices into the active kernel set's row-interleaved layouts. */
#ifndef HEARTH_PACK_H
#define HEARTH_PACK_H

#include "model/model.h"

/* Once per model (later calls return at once): every matrix the forward pass multiplies whose type the active
 * kernel set packs gets t->pack / t->packed, and its pages of the file mapping are released. */
int model_pack_weights(hearth_model *m, ht_pool *pool, hearth_err *err);

#endif
