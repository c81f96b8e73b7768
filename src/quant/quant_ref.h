/* quant_ref.h — the scalar reference kernels of quant_ref.c, one set per type, for quant.c's traits
 * table and for SIMD kernel files that keep the scalar version of some entries. Signatures are
 * quant.h's ht_to_float_fn / ht_from_float_fn / ht_vec_dot_fn. The exact float arithmetic of each
 * dot product (what a SIMD kernel must reproduce per block) is documented at the top of quant_ref.c. */
#ifndef HEARTH_QUANT_REF_H
#define HEARTH_QUANT_REF_H

#include "quant.h"

/* The 16 non-linear levels of IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl). */
extern const int8_t ht_kvalues_iq4nl[16];

/* The formats' tables (quant_grids.c, values from ggml-common.h). Grid entries hold 8 (or, iq3*, 4) byte
 * magnitudes, element 0 lowest; iq1s_grid's bytes are -1, 0, 1. ksigns_iq2xs maps 7 sign bits to 8 with
 * even parity (the eighth sign is implied). kvalues_mxfp4: the 16 E2M1 values, doubled (scale e then
 * stands for 2^(e - 128)). */
extern const uint8_t ht_ksigns_iq2xs[128];
extern const uint64_t ht_ksigns64[128];   /* the same 8 signs as bytes: 0xFF negative, 0x00 positive */
extern const uint64_t ht_iq2xxs_grid[256];
extern const uint64_t ht_iq2xs_grid[512];
extern const uint64_t ht_iq2s_grid[1024];
extern const uint32_t ht_iq3xxs_grid[256];
extern const uint32_t ht_iq3s_grid[512];
extern const uint64_t ht_iq1s_grid[2048];
extern const int8_t ht_kvalues_mxfp4[16];

/* MXFP4's scale: 2^(e - 128), half the E8M0 value, as ggml_e8m0_to_fp32_half (subnormal for e < 2). */
static inline float ht_e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* IQ1_M's fp16 scale, from the top nibbles of its four scale words. */
static inline ht_half ht_iq1_m_d(const block_iq1_m *b) {
    uint16_t sc[4];
    memcpy(sc, b->scales, sizeof sc);
    return (ht_half)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

/* The factor the i-quants' dot products and values carry beyond d * scale * quant (quant_ref.c, top). */
static inline float ht_iq_post(uint32_t type) {
    switch (type) {
    case HT_IQ2_XXS: case HT_IQ2_XS: case HT_IQ2_S: case HT_IQ1_S: case HT_IQ1_M: return 0.125f;
    case HT_IQ3_XXS: return 0.25f;
    default: return 1.0f;   /* IQ3_S, TQ1_0, TQ2_0 */
    }
}

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
void ht_ref_iq2_xxs_to_float(const void *src, float *dst, int64_t n);
void ht_ref_iq2_xs_to_float(const void *src, float *dst, int64_t n);
void ht_ref_iq2_s_to_float(const void *src, float *dst, int64_t n);
void ht_ref_iq3_xxs_to_float(const void *src, float *dst, int64_t n);
void ht_ref_iq3_s_to_float(const void *src, float *dst, int64_t n);
void ht_ref_iq1_s_to_float(const void *src, float *dst, int64_t n);
void ht_ref_iq1_m_to_float(const void *src, float *dst, int64_t n);
void ht_ref_tq1_0_to_float(const void *src, float *dst, int64_t n);
void ht_ref_tq2_0_to_float(const void *src, float *dst, int64_t n);
void ht_ref_mxfp4_to_float(const void *src, float *dst, int64_t n);

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
void ht_ref_tq1_0_from_float(const float *src, void *dst, int64_t n);
void ht_ref_tq2_0_from_float(const float *src, void *dst, int64_t n);
void ht_ref_mxfp4_from_float(const float *src, void *dst, int64_t n);
/* quant_iq_search.c: ggml's grid searches without an importance matrix. */
void ht_ref_iq3_s_from_float(const float *src, void *dst, int64_t n);
void ht_ref_iq2_s_from_float(const float *src, void *dst, int64_t n);
void ht_ref_iq3_xxs_from_float(const float *src, void *dst, int64_t n);
/* With an importance matrix (quant_weights: n per-column weights, required). */
void ht_ref_iq2_xxs_quantize(const float *src, void *dst, int64_t n, const float *quant_weights);
/* A row of n values quantized with per-column importance weights qw (ggml's quantize_* with quant_weights). */
typedef void (*ht_quantize_weighted_fn)(const float *x, void *dst, int64_t n, const float *qw);
void ht_ref_iq4_nl_weighted(const float *x, void *dst, int64_t n, const float *qw);
void ht_ref_iq4_xs_weighted(const float *x, void *dst, int64_t n, const float *qw);
void ht_ref_q6_K_weighted(const float *x, void *dst, int64_t n, const float *qw);
void ht_ref_q4_K_weighted(const float *x, void *dst, int64_t n, const float *qw);
void ht_ref_q5_K_weighted(const float *x, void *dst, int64_t n, const float *qw);
void ht_ref_q2_K_weighted(const float *x, void *dst, int64_t n, const float *qw);
void ht_ref_q3_K_weighted(const float *x, void *dst, int64_t n, const float *qw);
void ht_ref_q4_0_weighted(const float *x, void *dst, int64_t n, const float *qw);
void ht_ref_q4_1_weighted(const float *x, void *dst, int64_t n, const float *qw);
void ht_ref_q5_0_weighted(const float *x, void *dst, int64_t n, const float *qw);
void ht_ref_q5_1_weighted(const float *x, void *dst, int64_t n, const float *qw);
/* ggml's make_qp_quants: n non-negative values as levels 0..nmax with a weighted least-squares scale. */
float ht_make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *qw);
/* The weighted quantizer of a type, or NULL where hearth has none. */
ht_quantize_weighted_fn ht_ref_quantize_weighted(uint32_t type);
/* The types ggml will not quantize without an importance matrix (IQ2_XXS, IQ2_XS, IQ1_S, IQ1_M). */
bool ht_ref_requires_imatrix(uint32_t type);

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
float ht_ref_vec_dot_iq2_xxs_q8_K(int n, const void *w, const void *a);
float ht_ref_vec_dot_iq2_xs_q8_K(int n, const void *w, const void *a);
float ht_ref_vec_dot_iq2_s_q8_K(int n, const void *w, const void *a);
float ht_ref_vec_dot_iq3_xxs_q8_K(int n, const void *w, const void *a);
float ht_ref_vec_dot_iq3_s_q8_K(int n, const void *w, const void *a);
float ht_ref_vec_dot_iq1_s_q8_K(int n, const void *w, const void *a);
float ht_ref_vec_dot_iq1_m_q8_K(int n, const void *w, const void *a);
float ht_ref_vec_dot_tq1_0_q8_K(int n, const void *w, const void *a);
float ht_ref_vec_dot_tq2_0_q8_K(int n, const void *w, const void *a);
float ht_ref_vec_dot_mxfp4_q8_0(int n, const void *w, const void *a);
/* Attention over a Q8_0 row cache (ht_kq_fn, ht_pv_fn). */
void ht_ref_kq_q8_0(int n, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *y, size_t ys);
void ht_ref_pv_q8_0(int n, const void *v, size_t vs, int cap, int lo, int m, const float *p, size_t ld, int nc,
                    float *o, size_t os, int per);

#endif
