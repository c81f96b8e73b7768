/* ops.h — the element-wise and row-wise layers shared by every architecture: norms, rope, activations,
 * softmax. All work on contiguous float rows; none allocates. */
#ifndef HEARTH_OPS_H
#define HEARTH_OPS_H

#include <stddef.h>
#include <stdint.h>

/* out = x / rms(x) * w (w may be NULL; out may alias x). */
void op_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* out = (x - mean) / sqrt(var + eps) * w + b (w, b may be NULL; out may alias x). */
void op_layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps);
/* cos/sin table for one position: n_rot/2 entries, theta_i = pos / scale * base^(-2i/n_rot) / ff[i]. With yarn
 * = {lo, hi, ext} (YaRN's correction range, op_rope_yarn_dims, and its extrapolation weight, ggml's ext_factor),
 * pair i's angle is mixed from the interpolated one (/ scale) and the unscaled one: unscaled up to lo,
 * interpolated from hi, a linear ramp between, the unscaled share times ext (1 in the models seen). */
void op_rope_table(float *cosv, float *sinv, int pos, int n_rot, float base, float scale, const float *freq_factors,
                   const float *yarn);
/* YaRN's correction range [dims[0], dims[1]] of rope pairs for a model trained on n_ctx_orig positions. */
void op_rope_yarn_dims(int n_rot, int n_ctx_orig, float base, float beta_fast, float beta_slow, float dims[2]);
/* Rotates the first n_rot dims of each of n_heads heads (head_dim apart): NORM = adjacent pairs, NEOX = halves. */
void op_rope(float *x, int n_heads, int head_dim, int n_rot, const float *cosv, const float *sinv, int neox);
/* x = softmax(scale * x): exp in float (ops.c), the sums in double over 16 fixed lanes; the result
 * depends on the row's values and length only. */
void op_softmax(float *x, int n, float scale);
/* The same with an attention sink: the logit sink (not scaled) joins the max and the denominator, so the row
 * sums to less than 1. */
void op_softmax_sink(float *x, int n, float scale, float sink);
void op_silu(float *x, int n);
void op_silu_mul(float *gate, const float *up, int n);        /* gate = silu(gate) * up */
void op_gelu_tanh_mul(float *gate, const float *up, int n);   /* gate = gelu_tanh(gate) * up */
/* gpt-oss's clamped SwiGLU: g = min(gate, 7), u = clamp(up, -7, 7), gate = g sigmoid(1.702 g) (u + 1). */
void op_swiglu_oai(float *gate, const float *up, int n);
void op_gelu_tanh(float *x, int n);
void op_softcap(float *x, int n, float cap);                   /* x = cap tanh(x / cap) */
void op_gelu_erf(float *x, int n);
void op_add(float *y, const float *x, int n);                 /* y += x */
void op_scale(float *y, float s, int n);
/* x (n values, n a power of two) times the orthonormal Walsh-Hadamard matrix (Sylvester's order: symmetric and its
 * own inverse), with ggml's fwht's operations: scaled by 1/sqrt(n) first, then butterflies of span 1, 2, 4, ... */
void op_hadamard(float *x, int n);
/* Rows of a KV cache kept as rows (type HT_Q8_0, HT_Q4_0 or HT_BF16; m rows at rows[0..m), n values each) to floats
 * y[r * n + k], by the reference's formulas (bit-identical to the type's to_float). */
void op_kv_rows_to_float(uint32_t type, const uint8_t *const *rows, int m, float *y, int n);
/* softmax·V's accumulation over m value rows v (n values each, n apart): for each of nc outputs,
 * o_c = o + (c / per) * os + (c % per) * n and probabilities p_c = p + c * ld, o_c[k] = o_c[k] + p_c[0] * v[k] +
 * p_c[1] * v[n + k] + ... one row after another: the same sums however the rows are grouped into calls. */
void op_pv_add(float *o, size_t os, int per, int nc, const float *v, int m, int n, const float *p, size_t ld);
float op_dot(const float *a, const float *b, int n);
void op_axpy(float *y, float a, const float *x, int n);      /* y += a * x */
/* a . b through 16 lanes (vectorized; its own rounding, the same at every vector width). */
float op_dot_lanes(const float *a, const float *b, int n);
/* t[r * ts + k] = op_dot_lanes(w + k * ws, x + r * xs, n) for r < nr (1..4), k < 4, bit for bit (a register tile). */
void op_dot_lanes_x4(float *t, size_t ts, const float *x, size_t xs, int nr, const float *w, size_t ws, int n);
/* op_axpy(y, a[k], b + k * bs, n) for k = 0 .. m-1 in turn, bit for bit (y kept in registers). */
void op_axpy_m(float *y, const float *a, const float *b, size_t bs, int m, int n);
/* a = M^T x, b = M^T y for M of rows x n (row r of M scaled by x[r], summed over r in order). */
void op_matvec2_t(float *a, float *b, const float *M, const float *x, const float *y, int rows, int n);
/* The vector width for the loops above, after a quant kernel set's name ("avx512vnni", "avx512", "avx2"; any
 * other: the build's baseline), so that `--cpu` covers them too; quant_init / quant_set_backend call it. */
void ops_set_isa(const char *kernel_set);

#endif
