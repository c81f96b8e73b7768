/* matmul.h — y = W·x for a batch of activation rows, on the context's thread pool.
 * W is a weight matrix in any tensor type (used in place), x is [n_tok][W.ne[0]] floats, y is
 * [n_tok][W.ne[1]] floats. The activations are quantized once to W's vec_dot format. Each output element
 * is produced by one dot-product call, so results do not depend on the thread count. */
#ifndef HEARTH_MATMUL_H
#define HEARTH_MATMUL_H

#include "model/model.h"

void matmul(hearth_ctx *c, const ht_tensor *W, const float *x, int n_tok, float *y);
/* y = W_e x for matrix e of the 3-D stack W (ht_expert), used as a matrix of its own (MLA's per-head products). */
void matmul_one(hearth_ctx *c, const ht_tensor *W, int e, const float *x, int n_tok, float *y);
/* Same, then adds bias b (a vector of W.ne[1] floats, may be absent) to every row. */
void matmul_bias(hearth_ctx *c, const ht_tensor *W, const ht_tensor *b, const float *x, int n_tok, float *y);
/* y[t] += b for the n_tok rows of y (rows wide), when the bias b is present. */
void matmul_add_bias(const ht_tensor *b, float *y, int n_tok, int rows);
/* y[m] = W[m]·x for n_mat matrices on the same input (attention's q, k and v): those that share an activation
 * format are one job, so the input is prepared once and there is one wait instead of n_mat. */
void matmul_multi(hearth_ctx *c, const ht_tensor *const *W, float *const *y, int n_mat, const float *x, int n_tok);
/* yg = glu(G x, U x) (e.g. SiLU(gate) * up; yu holds U x) in one job whose items are the same rows of both
 * matrices, the activation applied to each as it is done: no pass of its own, no wait between. Declines (returns
 * false, nothing done) unless G and U share a format and shape, or when an adapter adds terms to the products. */
bool matmul_glu(hearth_ctx *c, const ht_tensor *G, const ht_tensor *U, const float *x, int n_tok, float *yg, float *yu,
                void (*glu)(float *g, const float *u, int n));
/* The products of a mixture-of-experts block, all experts in one job: W (and W2, optional, on the same
 * input) are expert stacks [n_in, n_out, n_expert]; the n_rows activation rows are ordered by expert, cnt[e]
 * rows for expert e, row r read from x[src[r]] (or x[r] when src is NULL; x rows of W.ne[0] floats). Row r of
 * y (and y2) is row r's product with its expert's matrix, plus its expert's bias when B (B2) is given and
 * bound (F32 [n_out, n_expert]); with glu (and W2), y then holds glu(y, y2) (e.g. SiLU(gate) * up), applied
 * as each chunk is done. Uses the context's moe_* scratch. */
void matmul_experts(hearth_ctx *c, const ht_tensor *W, const ht_tensor *B, const ht_tensor *W2, const ht_tensor *B2,
                    const float *x, const int *src, int n_rows, const int *cnt, float *y, float *y2,
                    void (*glu)(float *g, const float *u, int n));
/* Bytes of quantized-activation scratch a row of n elements may need in any format. */
size_t matmul_act_row_bytes(int64_t n);

#endif
