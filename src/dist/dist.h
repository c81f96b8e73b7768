/* dist.h — one model over the ranks of an MPI job (pipeline and tensor parallel). Rank 0 runs the command: it
 * owns the tokenizer, the embeddings, the output head and sampling, and the first range of layers; every other
 * rank holds its part of the layers and of their KV cache, and serves rank 0 (dist.c's worker loop). With
 * --tp K the ranks form groups of K consecutive ranks (a pipeline stage each): the group's first rank (its
 * leader) passes the residual stream on, and each of the K holds a K-th of every layer of the stage (dist.c
 * explains the split). The residual stream of a micro-batch travels stage 0 -> 1 -> ... -> back to rank 0 for
 * the head. Without HEARTH_MPI, or in a single process, every hook below does nothing and a context runs all
 * layers itself. */
#ifndef HEARTH_DIST_H
#define HEARTH_DIST_H

#include "model/model.h"

/* --dp R (hearth serve): the replicas of the job (1 without --dp) and this rank's replica. The job's ranks are
 * cut into R blocks of N consecutive ranks: with N = 1 each rank holds the whole model and the hooks below do
 * nothing; with N > 1 each block is a job of its own to the hooks (its first rank, the replica's leader, acts
 * as rank 0, the others run the worker loop and never return). srv_dp.c routes requests between the leaders. */
int dist_dp(int *rank);

#ifdef HEARTH_MPI
#include <mpi.h>
/* --dp: the communicator of the replicas' leaders, rank r the leader of replica r (MPI_COMM_NULL elsewhere). */
MPI_Comm dist_dp_comm(void);
/* hearth_ctx_new, first step: on rank 0 of a job, decides which layers each rank runs (once per model) and
 * sets m->layer_lo / layer_hi; elsewhere a no-op. */
int dist_plan(hearth_model *m, hearth_err *err);
/* hearth_ctx_new, after allocating: tells the other ranks to make their part of context c (they load the model
 * and pack their layers while this rank packs its own); dist_ctx_ready then waits for each to answer. */
int dist_ctx_open(hearth_ctx *c, hearth_err *err);
int dist_ctx_ready(hearth_ctx *c, hearth_err *err);
void dist_ctx_close(hearth_ctx *c);
/* hearth_seq_truncate: the same cut in every rank's cache. */
void dist_truncate(hearth_ctx *c, int seq, int pos);
/* hearth_decode, once the batch is checked (c->b_pos / b_seq / b_want hold it): the pipelined forward pass;
 * fills the wanted rows' outputs as a single process would, bit for bit. */
int dist_decode(hearth_ctx *c, const int32_t *tokens, int n, hearth_err *err);
/* Tensor parallel, inside a layer: every rank of the group holds part[n][its share] of rows of width total
 * (shares cut by dist.c's tp_range in whole units of unit values, or of 32 rows when unit is 0);
 * out[n][total] gets all of them, on every rank, bit for bit the rows one process computes. */
void dist_tp_gather(hearth_ctx *c, const float *part, int n, int total, int unit, float *out);
/* Tensor parallel, rank 0's output head: out[n][n_vocab] = W x over the group, each rank multiplying its share
 * of the vocabulary rows (W: rank 0's; the model's head is cut as the layers are). */
void dist_tp_head(hearth_ctx *c, const ht_tensor *W, const ht_tensor *b, const float *x, int n, float *out);
#else
static inline void dist_tp_head(hearth_ctx *c, const ht_tensor *W, const ht_tensor *b, const float *x, int n, float *out) {
    (void)c; (void)W; (void)b; (void)x; (void)n; (void)out;
}
static inline void dist_tp_gather(hearth_ctx *c, const float *part, int n, int total, int unit, float *out) {
    (void)c; (void)part; (void)n; (void)total; (void)unit; (void)out;
}
static inline int dist_plan(hearth_model *m, hearth_err *err) { (void)m; (void)err; return 0; }
static inline int dist_ctx_open(hearth_ctx *c, hearth_err *err) { (void)c; (void)err; return 0; }
static inline int dist_ctx_ready(hearth_ctx *c, hearth_err *err) { (void)c; (void)err; return 0; }
static inline void dist_ctx_close(hearth_ctx *c) { (void)c; }
static inline void dist_truncate(hearth_ctx *c, int seq, int pos) { (void)c; (void)seq; (void)pos; }
static inline int dist_decode(hearth_ctx *c, const int32_t *tokens, int n, hearth_err *err) {
    (void)c; (void)tokens; (void)n; return herr(err, "built without MPI");
}
#endif

#endif
