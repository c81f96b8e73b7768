/* recurrent.h — the Gated DeltaNet layer (Qwen3.5, Qwen3-Next) and the per-sequence state it carries in
 * place of a KV cache: a causal conv1d's last inputs and a state matrix per v-head, kept at the start of the
 * current 64-position chunk beside the chunk's rows (see recurrent.c). A context owns one per recurrent layer. */
#ifndef HEARTH_RECURRENT_H
#define HEARTH_RECURRENT_H

#include "model/context.h"

/* Positions per chunk: the state matrices are stored at multiples of it. */
#define REC_CHUNK 64

/* Allocates the recurrent state of every recurrent layer for c's sequences, and the layer's scratch for
 * c->n_batch tokens (c->rec stays NULL for a model without recurrent layers). -1 when out of memory. */
int rec_ctx_new(hearth_ctx *c);
void rec_ctx_free(hearth_ctx *c);
/* Bytes of recurrent state per sequence (every recurrent layer, chunk rows included). */
size_t rec_state_bytes(const hearth_ctx *c);
/* The earliest position sequence seq can be cut back to and continue exactly: the start of its current
 * chunk (the state before it is gone). */
int rec_cut_floor(const hearth_ctx *c, int seq);
/* How many positions sequence seq can take and still be cut back to its current length (INT_MAX without
 * recurrent layers, here or on another rank): up to the one that would complete the current chunk. */
int rec_cut_room(const hearth_ctx *c, int seq);
/* A sequence whose attention KV was written back (hearth_kv_write) but not yet its state (hearth_state_write):
 * it cannot be decoded or cut back, only cleared or restored. */
void rec_set_pending(hearth_ctx *c, int seq, bool pending);
bool rec_pending(const hearth_ctx *c, int seq);
/* out = the Gated DeltaNet of layer il over the micro-batch's normed input rows in ([n][n_embd]): in-projections,
 * causal conv1d + SiLU, L2-normed q and k, the gated delta rule per v-head through the sequence's state, gated
 * RMSNorm, ssm_out. Updates the sequences' states. */
void layer_gated_deltanet(hearth_ctx *c, const ht_ubatch *ub, int il, const float *in, float *out);

#endif
