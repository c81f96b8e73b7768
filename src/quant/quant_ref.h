/* quant_ref.h — the scalar reference kernels of quant_ref.c, one set per type, for quant.c's traits
 * table and for SIMD kernel files that keep the scalar version of some entries. Signatures are
 * quant.h's ht_to_float_fn / ht_from_float_fn / ht_vec_dot_fn. The exact float arithmetic of each
 * dot product (what a SIMD kernel must reproduce per block) is documented at the top of quant_ref.c. */
#ifndef HEARTH_QUANT_REF_H
#define HEARTH_QUANT_REF_H

#include "quant.h"

/* The 16 non-linear levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl). */
extern const int8_t ht_kvalues_iq4nl[16];

/* to_float: dequantize n elements. */
void ht_ref_f32_to_float(const void *src, float *dst, int64_t n);
void ht_ref_f16_to_float(const void *src, float *dst, int64_t n);
void ht_ref_bf16_to_float(const void *src, float *dst, int64_t n);
void ht_ref_q4_0_to_float(const void *src, float *dst, int64_t n);
void ht_ref_q4_1_to_float(const void *src, float *dst, int64_t n);
void ht_ref_q5_0_to_float(const void *src, float *dst, int64_t n);
void ht_ref_q5_1_to_float(const void *src, float *dst, int64_t n);
void ht_ref_q8_0_to_float(const void *src, float *dst, int64_t n);
void ht_ref_q8_1_to_float(const void *src, float *dst, int64_t n);
void ht_ref_q2_K_to_float(const void *src, float *dst, int64_t n);
void ht_ref_q3_K_to_float(const void *src, float *dst, int64_t n);
void ht_ref_q4_K_to_float(const void *src, float *dst, int64_t n);
void ht_ref_q5_K_to_float(const void *src, float *dst, int64_t n);
void ht_ref_q6_K_to_float(const void *src, float *dst, int64_t n);
void ht_ref_q8_K_to_float(const void *src, float *dst, int64_t n);
void ht_ref_iq4_nl_to_float(const void *src, float *dst, int64_t n);
void ht_ref_iq4_xs_to_float(const void *src, float *dst, int64_t n);

/* from_float: the reference quantizers (bit-identical to ggml's; see quant_ref.c). */
void ht_ref_f32_from_float(const float *src, void *dst, int64_t n);
void ht_ref_f16_from_float(const float *src, void *dst, int64_t n);
void ht_ref_bf16_from_float(const float *src, void *dst, int64_t n);
void ht_ref_q4_0_from_float(const float *src, void *dst, int64_t n);
void ht_ref_q4_1_from_float(const float *src, void *dst, int64_t n);
void ht_ref_q5_0_from_float(const float *src, void *dst, int64_t n);
void ht_ref_q5_1_from_float(const float *src, void *dst, int64_t n);
void ht_ref_q8_0_from_float(const float *src, void *dst, int64_t n);
void ht_ref_q8_1_from_float(const float *src, void *dst, int64_t n);
void ht_ref_q2_K_from_float(const float *src, void *dst, int64_t n);
void ht_ref_q3_K_from_float(const float *src, void *dst, int64_t n);
void ht_ref_q4_K_from_float(const float *src, void *dst, int64_t n);
void ht_ref_q5_K_from_float(const float *src, void *dst, int64_t n);
void ht_ref_q6_K_from_float(const float *src, void *dst, int64_t n);
void ht_ref_q8_K_from_float(const float *src, void *dst, int64_t n);
void ht_ref_iq4_nl_from_float(const float *src, void *dst, int64_t n);
void ht_ref_iq4_xs_from_float(const float *src, void *dst, int64_t n);

/* vec_dot: weights of the first type × activations of the second. */
float ht_ref_vec_dot_f32_f32(int n, const void *w, const void *a);
float ht_ref_vec_dot_f16_f32(int n, const void *w, const void *a);
void ht_ref_dot_t_f32(int k, const void *w, size_t ws, int n, const float *a, size_t as, int nc, float *y, size_t ys);
void ht_ref_dot_t_f16(int k, const void *w, size_t ws, int n, const float *a, size_t as, int nc, float *y, size_t ys);
float ht_ref_vec_dot_bf16_f32(int n, const void *w, const void *a);
float ht_ref_vec_dot_q4_0_q8_0(int n, const void *w, const void *a);
float ht_ref_vec_dot_q5_0_q8_0(int n, const void *w, const void *a);
float ht_ref_vec_dot_q8_0_q8_0(int n, const void *w, const void *a);
float ht_ref_vec_dot_iq4_nl_q8_0(int n, const void *w, const void *a);
float ht_ref_vec_dot_q4_1_q8_1(int n, const void *w, const void *a);
float ht_ref_vec_dot_q5_1_q8_1(int n, const void *w, const void *a);
float ht_ref_vec_dot_q2_K_q8_K(int n, const void *w, const void *a);
float ht_ref_vec_dot_q3_K_q8_K(int n, const void *w, const void *a);
float ht_ref_vec_dot_q4_K_q8_K(int n, const void *w, const void *a);
float ht_ref_vec_dot_q5_K_q8_K(int n, const void *w, const void *a);
float ht_ref_vec_dot_q6_K_q8_K(int n, const void *w, const void *a);
float ht_ref_vec_dot_iq4_xs_q8_K(int n, const void *w, const void *a);

#endif
