/* quant_ref.c — scalar reference kernels for every tensor type: dequantization (to_float), the reference
 * quantizers (from_float) and the dot product of a weight row with an activation row (vec_dot).
 *
 * Quantizers are bit-identical to ggml's quantize_row_*_ref (and, for IQ4_NL, to the search
 * llama-quantize runs without an importance matrix), so re-quantizing F32 weights reproduces llama.cpp's
 * blocks byte for byte. That holds only if every float expression is evaluated exactly as ggml writes it:
 * same association, same statement split, round-half-even via the 1.5*2^23 trick (nearest_int), and no
 * fused multiply-add — hence the FP_CONTRACT pragma below. Do not "simplify" the arithmetic here.
 *
 * Dot products: each block is unpacked to small integers (int8 quants, integer sub-block scales), all
 * products and sums of quants are exact integer arithmetic (int32, cannot overflow for valid blocks), and
 * only the final scaling is float. Per block, with d_* the block scales converted to float
 * (fp16_to_f32, or the float d of Q8_K), isum the integer dot with the sub-block scales folded in and
 * msum = sum_j min_j * bsums_j, the float operations are exactly, in this order:
 *   Q4_0, Q5_0, Q8_0, IQ4_NL (x Q8_0):  sum += (d_w * d_a) * (float)isum
 *   Q4_1, Q5_1 (x Q8_1):                sum += (d_w * d_a) * (float)isum + m_w * s_a
 *   Q2_K, Q4_K, Q5_K (x Q8_K):          sum += (d_w * d_a) * (float)isum - (dmin_w * d_a) * (float)msum
 *   Q3_K, Q6_K, IQ4_XS (x Q8_K):        sum += (d_w * d_a) * (float)isum
 *   MXFP4 (x Q8_0):                     sum += (d_w * d_a) * (float)isum, d_w = 2^(e - 128)
 *   IQ1/IQ2/IQ3, TQ1_0, TQ2_0 (x Q8_K): sum += (d_w * d_a) * (float)isum, the result ht_iq_post(type) * sum
 * where isum for Q3_K/Q6_K/IQ4_XS uses the signed sub-block scales (s - 32, int8, ls - 32), for the i-quants
 * the odd scales 2s + 1 (see their unpack functions below; IQ1_M's d comes from its scale words). The blocks
 * are accumulated in one float, first to last. F32/F16/BF16 weights take F32 activations: each weight
 * is converted to float and sum += w * a, element by element. A SIMD kernel reproduces the per-block
 * integer sums exactly and the per-block float formula; only its accumulation order may differ.
 * (Exact test: with d_w = d_a = 1 and dmin_w = 1, every result is an integer < 2^24, hence exact.) */
#include "quant_ref.h"

#include <float.h>
#include <math.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define GROUP_MAX_EPS 1e-15f

const int8_t ht_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* ggml's nearest_int: round half to even for |f| <= 2^22, by letting the float adder do the rounding. */
static inline int nearest_int(float f) {
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static int32_t dot_i8(const int8_t *a, const int8_t *b, int n) {
    int32_t s = 0;
    for (int i = 0; i < n; i++) s += (int32_t)a[i] * b[i];
    return s;
}

static uint32_t load_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void store_u32le(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}

/* ======================= F32, F16, BF16 ======================= */

void ht_ref_f32_to_float(const void *src, float *dst, int64_t n) { memmove(dst, src, (size_t)n * sizeof(float)); }
void ht_ref_f32_from_float(const float *src, void *dst, int64_t n) { memmove(dst, src, (size_t)n * sizeof(float)); }

void ht_ref_f16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_f32(h[i]);
}

void ht_ref_f16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = f32_to_fp16(src[i]);
}

void ht_ref_bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(h[i]);
}

void ht_ref_bf16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = f32_to_bf16(src[i]);
}

float ht_ref_vec_dot_f32_f32(int n, const void *vw, const void *va) {
    const float *w = vw, *a = va;
    float sum = 0;
    for (int i = 0; i < n; i++) sum += w[i] * a[i];
    return sum;
}

float ht_ref_vec_dot_f16_f32(int n, const void *vw, const void *va) {
    const uint16_t *w = vw;
    const float *a = va;
    float sum = 0;
    for (int i = 0; i < n; i++) sum += fp16_to_f32(w[i]) * a[i];
    return sum;
}

/* Transposed products (ht_dot_t_fn): y accumulates row d of w times a_c[d], d = 0, 1, ... */
static void dot_t(bool f16, int k, const void *w, size_t ws, int n, const float *a, size_t as, int nc, float *y, size_t ys) {
    for (int c = 0; c < nc; c++)
        for (int t = 0; t < n; t++) y[(size_t)c * ys + (size_t)t] = 0.0f;
    for (int d = 0; d < k; d++)
        for (int c = 0; c < nc; c++) {
            const float ad = a[(size_t)c * as + (size_t)d];
            float *yc = y + (size_t)c * ys;
            for (int t = 0; t < n; t++) {
                const size_t i = (size_t)d * ws + (size_t)t;
                yc[t] += ad * (f16 ? fp16_to_f32(((const uint16_t *)w)[i]) : ((const float *)w)[i]);
            }
        }
}
void ht_ref_dot_t_f32(int k, const void *w, size_t ws, int n, const float *a, size_t as, int nc, float *y, size_t ys) {
    dot_t(false, k, w, ws, n, a, as, nc, y, ys);
}
void ht_ref_dot_t_f16(int k, const void *w, size_t ws, int n, const float *a, size_t as, int nc, float *y, size_t ys) {
    dot_t(true, k, w, ws, n, a, as, nc, y, ys);
}

float ht_ref_vec_dot_bf16_f32(int n, const void *vw, const void *va) {
    const uint16_t *w = vw;
    const float *a = va;
    float sum = 0;
    for (int i = 0; i < n; i++) sum += bf16_to_f32(w[i]) * a[i];
    return sum;
}

/* ======================= 32-element blocks: unpack to integers ======================= */

/* Element j of a 32-block sits in the low nibble of qs[j] (j < 16) or the high nibble of qs[j - 16];
 * the 5-bit formats keep bit 4 of element j in bit j of qh. */
static void unpack_nibbles(const uint8_t qs[16], int8_t q[32], int offset) {
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((qs[j] & 0x0F) - offset);
        q[j + 16] = (int8_t)((qs[j] >> 4) - offset);
    }
}

static void unpack_5bit(const uint8_t qs[16], const uint8_t qh_bytes[4], int8_t q[32], int offset) {
    const uint32_t qh = load_u32le(qh_bytes);
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((qs[j] & 0x0F) | ((qh >> j) & 1) << 4) - offset);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - offset);
    }
}

static void unpack_iq4_nl(const uint8_t qs[16], int8_t q[32]) {
    for (int j = 0; j < 16; j++) {
        q[j] = ht_kvalues_iq4nl[qs[j] & 0x0F];
        q[j + 16] = ht_kvalues_iq4nl[qs[j] >> 4];
    }
}

/* ======================= Q4_0, Q4_1, Q5_0, Q5_1 ======================= */

void ht_ref_q4_0_to_float(const void *src, float *y, int64_t n) {
    const block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, y += QK4_0) {
        int8_t q[QK4_0];
        unpack_nibbles(b[i].qs, q, 8);
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK4_0; j++) y[j] = q[j] * d;
    }
}

void ht_ref_q4_1_to_float(const void *src, float *y, int64_t n) {
    const block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK4_1; i++, y += QK4_1) {
        int8_t q[QK4_1];
        unpack_nibbles(b[i].qs, q, 0);
        const float d = fp16_to_f32(b[i].d), m = fp16_to_f32(b[i].m);
        for (int j = 0; j < QK4_1; j++) y[j] = q[j] * d + m;
    }
}

void ht_ref_q5_0_to_float(const void *src, float *y, int64_t n) {
    const block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK5_0; i++, y += QK5_0) {
        int8_t q[QK5_0];
        unpack_5bit(b[i].qs, b[i].qh, q, 16);
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK5_0; j++) y[j] = q[j] * d;
    }
}

void ht_ref_q5_1_to_float(const void *src, float *y, int64_t n) {
    const block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK5_1; i++, y += QK5_1) {
        int8_t q[QK5_1];
        unpack_5bit(b[i].qs, b[i].qh, q, 0);
        const float d = fp16_to_f32(b[i].d), m = fp16_to_f32(b[i].m);
        for (int j = 0; j < QK5_1; j++) y[j] = q[j] * d + m;
    }
}

/* ggml: d = max / -8 where max is the element of largest magnitude, q = min(15, trunc(x/d + 8.5)). */
void ht_ref_q4_0_from_float(const float *x, void *vy, int64_t n) {
    block_q4_0 *y = vy;
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK4_0; j++) {
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            const float x0 = x[j] * id;
            const float x1 = x[QK4_0 / 2 + j] * id;
            const int xi0 = HT_MIN(15, (int)(x0 + 8.5f));
            const int xi1 = HT_MIN(15, (int)(x1 + 8.5f));
            y[i].qs[j] = (uint8_t)(xi0 | xi1 << 4);
        }
    }
}

/* ggml: d = (max - min) / 15, m = min, q = min(15, trunc((x - min)/d + 0.5)). */
void ht_ref_q4_1_from_float(const float *x, void *vy, int64_t n) {
    block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK4_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        y[i].m = f32_to_fp16(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            const float x0 = (x[j] - min) * id;
            const float x1 = (x[QK4_1 / 2 + j] - min) * id;
            const int xi0 = HT_MIN(15, (int)(x0 + 0.5f));
            const int xi1 = HT_MIN(15, (int)(x1 + 0.5f));
            y[i].qs[j] = (uint8_t)(xi0 | xi1 << 4);
        }
    }
}

void ht_ref_q5_0_from_float(const float *x, void *vy, int64_t n) {
    block_q5_0 *y = vy;
    for (int64_t i = 0; i < n / QK5_0; i++, x += QK5_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK5_0; j++) {
            if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
        }
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; j++) {
            const float x0 = x[j] * id;
            const float x1 = x[QK5_0 / 2 + j] * id;
            const unsigned xi0 = (unsigned)HT_MIN(31, (int)(x0 + 16.5f));
            const unsigned xi1 = (unsigned)HT_MIN(31, (int)(x1 + 16.5f));
            y[i].qs[j] = (uint8_t)((xi0 & 0x0F) | (xi1 & 0x0F) << 4);
            qh |= ((xi0 & 0x10u) >> 4) << j;
            qh |= ((xi1 & 0x10u) >> 4) << (j + QK5_0 / 2);
        }
        store_u32le(y[i].qh, qh);
    }
}

/* Like Q4_1 with 31 levels; as in ggml there is no clamp (the largest element lands on 31). */
void ht_ref_q5_1_from_float(const float *x, void *vy, int64_t n) {
    block_q5_1 *y = vy;
    for (int64_t i = 0; i < n / QK5_1; i++, x += QK5_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK5_1; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        y[i].m = f32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; j++) {
            const float x0 = (x[j] - min) * id;
            const float x1 = (x[QK5_1 / 2 + j] - min) * id;
            const unsigned xi0 = (uint8_t)(int)(x0 + 0.5f);
            const unsigned xi1 = (uint8_t)(int)(x1 + 0.5f);
            y[i].qs[j] = (uint8_t)((xi0 & 0x0F) | (xi1 & 0x0F) << 4);
            qh |= ((xi0 & 0x10u) >> 4) << j;
            qh |= ((xi1 & 0x10u) >> 4) << (j + QK5_1 / 2);
        }
        store_u32le(y[i].qh, qh);
    }
}

/* ======================= Q8_0, Q8_1 ======================= */

void ht_ref_q8_0_to_float(const void *src, float *y, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++) y[j] = b[i].qs[j] * d;
    }
}

void ht_ref_q8_1_to_float(const void *src, float *y, int64_t n) {
    const block_q8_1 *b = src;
    for (int64_t i = 0; i < n / QK8_1; i++, y += QK8_1) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK8_1; j++) y[j] = b[i].qs[j] * d;
    }
}

/* ggml: d = amax / 127, q = roundf(x / d) (half away from zero). */
void ht_ref_q8_0_from_float(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = HT_MAX(amax, fabsf(x[j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) {
            const float x0 = x[j] * id;
            y[i].qs[j] = (int8_t)roundf(x0);
        }
    }
}

/* As Q8_0, plus s = fp16(d * sum(q)) for the min term of Q4_1/Q5_1 dot products. */
void ht_ref_q8_1_from_float(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; j++) amax = HT_MAX(amax, fabsf(x[j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            const float x0 = x[j] * id;
            y[i].qs[j] = (int8_t)roundf(x0);
            sum += y[i].qs[j];
        }
        y[i].s = f32_to_fp16(sum * d);
    }
}

/* ======================= dot products, 32-element blocks ======================= */

float ht_ref_vec_dot_q4_0_q8_0(int n, const void *vw, const void *va) {
    const block_q4_0 *w = vw;
    const block_q8_0 *a = va;
    float sum = 0;
    for (int i = 0; i < n / QK8_0; i++) {
        int8_t q[QK4_0];
        unpack_nibbles(w[i].qs, q, 8);
        const int32_t isum = dot_i8(q, a[i].qs, QK4_0);
        sum += (fp16_to_f32(w[i].d) * fp16_to_f32(a[i].d)) * (float)isum;
    }
    return sum;
}

float ht_ref_vec_dot_q5_0_q8_0(int n, const void *vw, const void *va) {
    const block_q5_0 *w = vw;
    const block_q8_0 *a = va;
    float sum = 0;
    for (int i = 0; i < n / QK8_0; i++) {
        int8_t q[QK5_0];
        unpack_5bit(w[i].qs, w[i].qh, q, 16);
        const int32_t isum = dot_i8(q, a[i].qs, QK5_0);
        sum += (fp16_to_f32(w[i].d) * fp16_to_f32(a[i].d)) * (float)isum;
    }
    return sum;
}

float ht_ref_vec_dot_q8_0_q8_0(int n, const void *vw, const void *va) {
    const block_q8_0 *w = vw;
    const block_q8_0 *a = va;
    float sum = 0;
    for (int i = 0; i < n / QK8_0; i++) {
        const int32_t isum = dot_i8(w[i].qs, a[i].qs, QK8_0);
        sum += (fp16_to_f32(w[i].d) * fp16_to_f32(a[i].d)) * (float)isum;
    }
    return sum;
}

void ht_ref_kq_q8_0(int n, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *y, size_t ys) {
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++)
            y[(size_t)c * ys + (size_t)r] = ht_ref_vec_dot_q8_0_q8_0(n, (const uint8_t *)w + (size_t)r * ws,
                                                                      (const uint8_t *)a + (size_t)c * as);
}

void ht_ref_pv_q8_0(int n, const void *v, size_t vs, int cap, int lo, int m, const float *p, size_t ld, int nc,
                    float *o, size_t os, int per) {
    for (int c = 0; c < nc; c++) {
        float *oc = o + (size_t)(c / per) * os + (size_t)(c % per) * n;
        for (int d = 0; d < n; d++) oc[d] = 0;
        for (int t = 0; t < m; t++) {
            const block_q8_0 *b = (const block_q8_0 *)((const uint8_t *)v + (size_t)((lo + t) % cap) * vs);
            const float pt = p[(size_t)c * ld + (size_t)t];
            for (int i = 0; i < n / QK8_0; i++) {
                const float f = pt * fp16_to_f32(b[i].d);
                for (int k = 0; k < QK8_0; k++) oc[i * QK8_0 + k] = fmaf(f, (float)b[i].qs[k], oc[i * QK8_0 + k]);
            }
        }
    }
}

float ht_ref_vec_dot_iq4_nl_q8_0(int n, const void *vw, const void *va) {
    const block_iq4_nl *w = vw;
    const block_q8_0 *a = va;
    float sum = 0;
    for (int i = 0; i < n / QK8_0; i++) {
        int8_t q[QK4_NL];
        unpack_iq4_nl(w[i].qs, q);
        const int32_t isum = dot_i8(q, a[i].qs, QK4_NL);
        sum += (fp16_to_f32(w[i].d) * fp16_to_f32(a[i].d)) * (float)isum;
    }
    return sum;
}

float ht_ref_vec_dot_q4_1_q8_1(int n, const void *vw, const void *va) {
    const block_q4_1 *w = vw;
    const block_q8_1 *a = va;
    float sum = 0;
    for (int i = 0; i < n / QK8_1; i++) {
        int8_t q[QK4_1];
        unpack_nibbles(w[i].qs, q, 0);
        const int32_t isum = dot_i8(q, a[i].qs, QK4_1);
        sum += (fp16_to_f32(w[i].d) * fp16_to_f32(a[i].d)) * (float)isum + fp16_to_f32(w[i].m) * fp16_to_f32(a[i].s);
    }
    return sum;
}

float ht_ref_vec_dot_q5_1_q8_1(int n, const void *vw, const void *va) {
    const block_q5_1 *w = vw;
    const block_q8_1 *a = va;
    float sum = 0;
    for (int i = 0; i < n / QK8_1; i++) {
        int8_t q[QK5_1];
        unpack_5bit(w[i].qs, w[i].qh, q, 0);
        const int32_t isum = dot_i8(q, a[i].qs, QK5_1);
        sum += (fp16_to_f32(w[i].d) * fp16_to_f32(a[i].d)) * (float)isum + fp16_to_f32(w[i].m) * fp16_to_f32(a[i].s);
    }
    return sum;
}

/* ======================= K-quants: unpack super-blocks of 256 ======================= */

/* Q2_K and Q3_K: element e's low 2 bits are bits 2*((e%128)/32) of qs[32*(e/128) + e%32];
 * sub-block (16 elements) s = e/16 has scale byte scales[s] (Q2_K: low nibble scale, high nibble min). */
static void unpack_2bit(const uint8_t qs[QK_K / 4], int8_t q[QK_K]) {
    for (int e = 0; e < QK_K; e++) q[e] = (int8_t)((qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3);
}

/* Q3_K: the third bit of element e is bit e/32 of hmask[e%32]; a clear bit subtracts 4. */
static void unpack_q3_K(const block_q3_K *b, int8_t q[QK_K], int sc[QK_K / 16]) {
    unpack_2bit(b->qs, q);
    for (int e = 0; e < QK_K; e++)
        if (!(b->hmask[e % 32] & (1u << (e / 32)))) q[e] = (int8_t)(q[e] - 4);
    /* 16 six-bit scales: low nibbles in bytes 0..7 (two per byte), high 2 bits in bytes 8..11. */
    for (int j = 0; j < QK_K / 16; j++) {
        const int lo = j < 8 ? b->scales[j] & 0xF : b->scales[j - 8] >> 4;
        const int hi = (b->scales[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (lo | hi << 4) - 32;
    }
}

/* Q4_K / Q5_K: 8 six-bit scales and mins in 12 bytes (ggml's get_scale_min_k4). */
static void unpack_scale_min_k4(const uint8_t s[K_SCALE_SIZE], uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            sc[j] = s[j] & 63;
            m[j] = s[j + 4] & 63;
        } else {
            sc[j] = (uint8_t)((s[j + 4] & 0xF) | (s[j - 4] >> 6) << 4);
            m[j] = (uint8_t)((s[j + 4] >> 4) | (s[j] >> 6) << 4);
        }
    }
}

/* Q4_K: element 64*k + l (l < 32) is the low nibble of qs[32*k + l], 64*k + 32 + l the high nibble. */
static void unpack_q4_K(const block_q4_K *b, int8_t q[QK_K]) {
    for (int k = 0; k < QK_K / 64; k++)
        for (int l = 0; l < 32; l++) {
            q[64 * k + l] = (int8_t)(b->qs[32 * k + l] & 0xF);
            q[64 * k + 32 + l] = (int8_t)(b->qs[32 * k + l] >> 4);
        }
}

/* Q5_K: as Q4_K, plus 16 when bit e/32 of qh[e%32] is set. */
static void unpack_q5_K(const block_q5_K *b, int8_t q[QK_K]) {
    for (int k = 0; k < QK_K / 64; k++)
        for (int l = 0; l < 32; l++) {
            q[64 * k + l] = (int8_t)(b->qs[32 * k + l] & 0xF);
            q[64 * k + 32 + l] = (int8_t)(b->qs[32 * k + l] >> 4);
        }
    for (int e = 0; e < QK_K; e++)
        if (b->qh[e % 32] & (1u << (e / 32))) q[e] = (int8_t)(q[e] + 16);
}

/* Q6_K, per half h of 128: element 32*g + l (g < 4, l < 32) takes nibble g/2 of ql[64h + 32*(g%2) + l]
 * and bits 2g..2g+1 of qh[32h + l] as its high bits; minus 32. Sub-block s = e/16 has scales[s]. */
static void unpack_q6_K(const block_q6_K *b, int8_t q[QK_K]) {
    for (int h = 0; h < QK_K / 128; h++)
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++) {
                const int lo = (b->ql[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0xF;
                const int hi = (b->qh[32 * h + l] >> (2 * g)) & 3;
                q[128 * h + 32 * g + l] = (int8_t)((lo | hi << 4) - 32);
            }
}

/* IQ4_XS: 8 sub-blocks of 32, each an IQ4_NL body, with 6-bit scales ls (low 4 bits in scales_l,
 * high 2 in scales_h); the signed scale is ls - 32. */
static void unpack_iq4_xs(const block_iq4_xs *b, int8_t q[QK_K], int sc[QK_K / 32]) {
    for (int ib = 0; ib < QK_K / 32; ib++) {
        unpack_iq4_nl(b->qs + 16 * ib, q + 32 * ib);
        const int ls = ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | ((b->scales_h >> (2 * ib)) & 3) << 4;
        sc[ib] = ls - 32;
    }
}

/* ======================= K-quants: to_float ======================= */

void ht_ref_q2_K_to_float(const void *src, float *y, int64_t n) {
    const block_q2_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        int8_t q[QK_K];
        unpack_2bit(b[i].qs, q);
        const float d = fp16_to_f32(b[i].d), min = fp16_to_f32(b[i].dmin);
        for (int s = 0; s < QK_K / 16; s++) {
            const float dl = d * (b[i].scales[s] & 0xF), ml = min * (b[i].scales[s] >> 4);
            for (int l = 0; l < 16; l++) y[16 * s + l] = dl * q[16 * s + l] - ml;
        }
    }
}

void ht_ref_q3_K_to_float(const void *src, float *y, int64_t n) {
    const block_q3_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        int8_t q[QK_K];
        int sc[QK_K / 16];
        unpack_q3_K(&b[i], q, sc);
        const float d_all = fp16_to_f32(b[i].d);
        for (int s = 0; s < QK_K / 16; s++) {
            const float dl = d_all * sc[s];
            for (int l = 0; l < 16; l++) y[16 * s + l] = dl * q[16 * s + l];
        }
    }
}

void ht_ref_q4_K_to_float(const void *src, float *y, int64_t n) {
    const block_q4_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        int8_t q[QK_K];
        uint8_t sc[8], m[8];
        unpack_q4_K(&b[i], q);
        unpack_scale_min_k4(b[i].scales, sc, m);
        const float d = fp16_to_f32(b[i].d), min = fp16_to_f32(b[i].dmin);
        for (int s = 0; s < QK_K / 32; s++) {
            const float d1 = d * sc[s], m1 = min * m[s];
            for (int l = 0; l < 32; l++) y[32 * s + l] = d1 * q[32 * s + l] - m1;
        }
    }
}

void ht_ref_q5_K_to_float(const void *src, float *y, int64_t n) {
    const block_q5_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        int8_t q[QK_K];
        uint8_t sc[8], m[8];
        unpack_q5_K(&b[i], q);
        unpack_scale_min_k4(b[i].scales, sc, m);
        const float d = fp16_to_f32(b[i].d), min = fp16_to_f32(b[i].dmin);
        for (int s = 0; s < QK_K / 32; s++) {
            const float d1 = d * sc[s], m1 = min * m[s];
            for (int l = 0; l < 32; l++) y[32 * s + l] = d1 * q[32 * s + l] - m1;
        }
    }
}

void ht_ref_q6_K_to_float(const void *src, float *y, int64_t n) {
    const block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        int8_t q[QK_K];
        unpack_q6_K(&b[i], q);
        const float d = fp16_to_f32(b[i].d);
        for (int e = 0; e < QK_K; e++) y[e] = d * b[i].scales[e / 16] * q[e];
    }
}

void ht_ref_q8_K_to_float(const void *src, float *y, int64_t n) {
    const block_q8_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K)
        for (int e = 0; e < QK_K; e++) y[e] = b[i].d * b[i].qs[e];
}

void ht_ref_iq4_nl_to_float(const void *src, float *y, int64_t n) {
    const block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / QK4_NL; i++, y += QK4_NL) {
        int8_t q[QK4_NL];
        unpack_iq4_nl(b[i].qs, q);
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK4_NL; j++) y[j] = d * q[j];
    }
}

void ht_ref_iq4_xs_to_float(const void *src, float *y, int64_t n) {
    const block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        int8_t q[QK_K];
        int sc[QK_K / 32];
        unpack_iq4_xs(&b[i], q, sc);
        const float d = fp16_to_f32(b[i].d);
        for (int s = 0; s < QK_K / 32; s++) {
            const float dl = d * sc[s];
            for (int l = 0; l < 32; l++) y[32 * s + l] = dl * q[32 * s + l];
        }
    }
}

/* ======================= K-quants: dot products with Q8_K ======================= */

float ht_ref_vec_dot_q2_K_q8_K(int n, const void *vw, const void *va) {
    const block_q2_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int8_t q[QK_K];
        unpack_2bit(w[i].qs, q);
        int32_t isum = 0, msum = 0;
        for (int s = 0; s < QK_K / 16; s++) {
            isum += (w[i].scales[s] & 0xF) * dot_i8(q + 16 * s, a[i].qs + 16 * s, 16);
            msum += (w[i].scales[s] >> 4) * a[i].bsums[s];
        }
        sum += (fp16_to_f32(w[i].d) * a[i].d) * (float)isum - (fp16_to_f32(w[i].dmin) * a[i].d) * (float)msum;
    }
    return sum;
}

float ht_ref_vec_dot_q3_K_q8_K(int n, const void *vw, const void *va) {
    const block_q3_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int8_t q[QK_K];
        int sc[QK_K / 16];
        unpack_q3_K(&w[i], q, sc);
        int32_t isum = 0;
        for (int s = 0; s < QK_K / 16; s++) isum += sc[s] * dot_i8(q + 16 * s, a[i].qs + 16 * s, 16);
        sum += (fp16_to_f32(w[i].d) * a[i].d) * (float)isum;
    }
    return sum;
}

/* Q4_K and Q5_K: one super-block's sum from its unpacked quants q and the fields both layouts have (d, dmin,
 * the 6-bit scales and mins). */
static float q45_K_term(ht_half d, ht_half dmin, const uint8_t *scales, const int8_t q[QK_K], const block_q8_K *a) {
    uint8_t sc[8], m[8];
    unpack_scale_min_k4(scales, sc, m);
    int32_t isum = 0, msum = 0;
    for (int s = 0; s < QK_K / 32; s++) isum += sc[s] * dot_i8(q + 32 * s, a->qs + 32 * s, 32);
    for (int s = 0; s < QK_K / 16; s++) msum += m[s / 2] * a->bsums[s];
    return (fp16_to_f32(d) * a->d) * (float)isum - (fp16_to_f32(dmin) * a->d) * (float)msum;
}

float ht_ref_vec_dot_q4_K_q8_K(int n, const void *vw, const void *va) {
    const block_q4_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int8_t q[QK_K];
        unpack_q4_K(&w[i], q);
        sum += q45_K_term(w[i].d, w[i].dmin, w[i].scales, q, &a[i]);
    }
    return sum;
}

float ht_ref_vec_dot_q5_K_q8_K(int n, const void *vw, const void *va) {
    const block_q5_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int8_t q[QK_K];
        unpack_q5_K(&w[i], q);
        sum += q45_K_term(w[i].d, w[i].dmin, w[i].scales, q, &a[i]);
    }
    return sum;
}

float ht_ref_vec_dot_q6_K_q8_K(int n, const void *vw, const void *va) {
    const block_q6_K *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int8_t q[QK_K];
        unpack_q6_K(&w[i], q);
        int32_t isum = 0;
        for (int s = 0; s < QK_K / 16; s++) isum += w[i].scales[s] * dot_i8(q + 16 * s, a[i].qs + 16 * s, 16);
        sum += (fp16_to_f32(w[i].d) * a[i].d) * (float)isum;
    }
    return sum;
}

float ht_ref_vec_dot_iq4_xs_q8_K(int n, const void *vw, const void *va) {
    const block_iq4_xs *w = vw;
    const block_q8_K *a = va;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int8_t q[QK_K];
        int sc[QK_K / 32];
        unpack_iq4_xs(&w[i], q, sc);
        int32_t isum = 0;
        for (int s = 0; s < QK_K / 32; s++) isum += sc[s] * dot_i8(q + 32 * s, a[i].qs + 32 * s, 32);
        sum += (fp16_to_f32(w[i].d) * a[i].d) * (float)isum;
    }
    return sum;
}

/* ======================= K-quants: ggml's scale searches ======================= */

/* Symmetric quants in [-nmax, nmax-1] (stored + nmax) with a least-squares scale, weights x^2 or the importance
 * weights qw (ggml's make_qx_quants with rmse_type 1); tries 18 nearby scales. */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L, const float *qw) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = clampi(l, -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = clampi(l, -nmax, nmax - 1);
            const float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                const int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + clampi(l, -nmax, nmax - 1));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Symmetric quants for Q3_K (ggml's make_q3_quants with do_rmse): start from the max-scaled rounding,
 * then up to 5 passes of coordinate descent on the weighted (x^2) least-squares error. */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = clampi(l, -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = clampi(new_l, -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Asymmetric quants in [0, nmax] with scale and min (ggml's make_qkx2_quants): weighted least squares
 * over nstep+1 candidate scales; returns the scale and stores -min (>= 0) in *the_min. */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                              uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)clampi(l, 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        const float w = weights[i];
        best_error += w * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = clampi(l, 0, nmax);
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                const float w = weights[i];
                cur_error += w * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* Packs 2-bit values L[0..255] as Q2_K/Q3_K store them (see unpack_2bit). */
static void pack_2bit(const uint8_t L[QK_K], uint8_t qs[QK_K / 4]) {
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
}

/* Packs 6-bit sub-block scales and mins as Q4_K/Q5_K store them (see unpack_scale_min_k4). */
static void pack_scale_min_k4(uint8_t s[K_SCALE_SIZE], int j, uint8_t ls, uint8_t lm) {
    if (j < 4) {
        s[j] = ls;
        s[j + 4] = lm;
    } else {
        s[j + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
        s[j - 4] |= (uint8_t)((ls >> 4) << 6);
        s[j - 0] |= (uint8_t)((lm >> 4) << 6);
    }
}

/* ======================= K-quants: reference quantizers ======================= */

void ht_ref_q2_K_from_float(const float *x, void *vy, int64_t n) {
    block_q2_K *y = vy;
    uint8_t L[QK_K], Laux[16];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[i].d = f32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = 0;
            y[i].d = f32_to_fp16(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; ++j) {
                const int l = nearest_int(iscale * mins[j]);
                y[i].scales[j] = (uint8_t)(y[i].scales[j] | (unsigned)l << 4);
            }
            y[i].dmin = f32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = f32_to_fp16(0.f);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fp16_to_f32(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = fp16_to_f32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                const int l = nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)clampi(l, 0, 3);
            }
        }
        pack_2bit(L, y[i].qs);
    }
}

void ht_ref_q3_K_from_float(const float *x, void *vy, int64_t n) {
    block_q3_K *y = vy;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            const float scale = fabsf(scales[j]);
            if (scale > amax) { amax = scale; max_scale = scales[j]; }
        }
        memset(y[i].scales, 0, 12);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) {
                int l = (int8_t)nearest_int(iscale * scales[j]);
                l = clampi(l, -32, 31) + 32;
                if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
                else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                l >>= 4;
                y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
            }
            y[i].d = f32_to_fp16(1 / iscale);
        } else {
            y[i].d = f32_to_fp16(0.f);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            int sc = j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j - 8] >> 4;
            sc = (sc | ((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
            const float d = fp16_to_f32(y[i].d) * sc;
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                const int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(clampi(l, -4, 3) + 4);
            }
        }
        /* Third bit of element j into bit j/32 of hmask[j%32]; the low two bits as in Q2_K. */
        memset(y[i].hmask, 0, QK_K / 8);
        uint8_t L2[QK_K];
        for (int j = 0; j < QK_K; ++j) {
            if (L[j] > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1u << (j / 32));
                L[j] = (int8_t)(L[j] - 4);
            }
            L2[j] = (uint8_t)L[j];
        }
        pack_2bit(L2, y[i].qs);
    }
}

/* ggml's make_qp_quants: non-negative quants 0 .. nmax of n non-negative values, the scale fitted by weighted
 * least squares after 8 nearby trial scales and up to 5 rounds of one-value changes. */
float ht_make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *qw) {
    float max = 0;
    for (int i = 0; i < n; i++) max = fmaxf(max, x[i]);
    if (max < 1e-15f) {   /* ggml's GROUP_MAX_EPS */
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)nearest_int(iscale * x[i]);
    float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; i++) {
        float diff = x[i] - scale * L[i];
        best_mse += qw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        float iscale_is = (0.1f * is + nmax) / max;
        float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale_is * x[i]);
            l = l < nmax ? l : nmax;
            float diff = x[i] - scale_is * l;
            mse += qw[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = l < nmax ? l : nmax;
        L[i] = (uint8_t)l;
        sumlx += qw[i] * x[i] * l;
        suml2 += qw[i] * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = qw[i];
            float slx = sumlx - w * x[i] * L[i];
            float sl2 = suml2 - w * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = new_l < nmax ? new_l : nmax;
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* ggml's make_qkx3_quants: asymmetric quants 0..nmax of n values with a scale and min (-min returned in
 * the_min), fitted by weighted least squares over nstep + 1 trial scales (squared error, weights given). */
static float make_qkx3_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                              uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max <= min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_mad = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)clampi(l, 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = diff * diff;
        best_mad += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float mad = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = diff * diff;
                mad += weights[i] * diff;
            }
            if (mad < best_mad) {
                memcpy(L, Laux, (size_t)n);
                best_mad = mad;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* The part Q4_K and Q5_K quantize alike: per 32-element sub-block a scale and min by make_qkx2_quants
 * (levels 0..nmax), both quantized to 6 bits against the block's d / dmin, then each element's level. */
static void k_levels(const float *x, int nmax, const uint8_t *scales12, ht_half dd, ht_half ddmin, uint8_t *L);
static void quantize_k_scale_min(const float *x, int nmax, float rmin, int nstep, uint8_t *scales12, ht_half *dd,
                                 ht_half *ddmin, uint8_t *L) {
    uint8_t Laux[32];
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = HT_MIN(63, ls);
        lm = HT_MIN(63, lm);
        pack_scale_min_k4(scales12, j, ls, lm);
    }
    *dd = f32_to_fp16(max_scale / 63.f);
    *ddmin = f32_to_fp16(max_min / 63.f);
    k_levels(x, nmax, scales12, *dd, *ddmin, L);
}

/* With importance weights qw (ggml's quantize_row_q4_K_impl / q5_K_impl): weights qw * sqrt(sigma2 + x^2),
 * make_qkx3_quants per sub-block, and the 6-bit scales and mins by make_qp_quants weighted by the sub-blocks'
 * weight sums. */
static void quantize_k_scale_min_weighted(const float *x, int nmax, const float *qw, uint8_t *scales12, ht_half *dd,
                                          ht_half *ddmin, uint8_t *L) {
    uint8_t Laux[32], Ls[QK_K / 32], Lm[QK_K / 32];
    float weights[32], sw[QK_K / 32], mins[QK_K / 32], scales[QK_K / 32];
    float sum_x2 = 0;
    for (int l = 0; l < QK_K; ++l) sum_x2 += x[l] * x[l];
    const float sigma2 = 2 * sum_x2 / QK_K;
    for (int j = 0; j < QK_K / 32; ++j) {
        for (int l = 0; l < 32; ++l) weights[l] = qw[32 * j + l] * sqrtf(sigma2 + x[32 * j + l] * x[32 * j + l]);
        float sumw = 0;
        for (int l = 0; l < 32; ++l) sumw += weights[l];
        sw[j] = sumw;
        scales[j] = make_qkx3_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36);
    }
    const float d_block = ht_make_qp_quants(QK_K / 32, 63, scales, Ls, sw);
    const float m_block = ht_make_qp_quants(QK_K / 32, 63, mins, Lm, sw);
    memset(scales12, 0, K_SCALE_SIZE);
    for (int j = 0; j < QK_K / 32; ++j) pack_scale_min_k4(scales12, j, HT_MIN(63, Ls[j]), HT_MIN(63, Lm[j]));
    *dd = f32_to_fp16(d_block);
    *ddmin = f32_to_fp16(m_block);
    k_levels(x, nmax, scales12, *dd, *ddmin, L);
}

/* Each element's level against the packed 6-bit scales and mins and the block's d, dmin. */
static void k_levels(const float *x, int nmax, const uint8_t *scales12, ht_half dd, ht_half ddmin, uint8_t *L) {
    uint8_t sc[8], m[8];
    unpack_scale_min_k4(scales12, sc, m);
    for (int j = 0; j < QK_K / 32; ++j) {
        const float d = fp16_to_f32(dd) * sc[j];
        if (!d) continue;
        const float dm = fp16_to_f32(ddmin) * m[j];
        for (int ii = 0; ii < 32; ++ii) {
            const int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)clampi(l, 0, nmax);
        }
    }
}

static void q4_K_quantize(const float *x, void *vy, int64_t n, const float *qw) {
    block_q4_K *y = vy;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        if (qw) quantize_k_scale_min_weighted(x, 15, qw + QK_K * i, y[i].scales, &y[i].d, &y[i].dmin, L);
        else quantize_k_scale_min(x, 15, -1.f, 20, y[i].scales, &y[i].d, &y[i].dmin, L);
        for (int k = 0; k < QK_K / 64; k++)
            for (int l = 0; l < 32; ++l) y[i].qs[32 * k + l] = (uint8_t)(L[64 * k + l] | L[64 * k + 32 + l] << 4);
    }
}

static void q5_K_quantize(const float *x, void *vy, int64_t n, const float *qw) {
    block_q5_K *y = vy;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        if (qw) quantize_k_scale_min_weighted(x, 31, qw + QK_K * i, y[i].scales, &y[i].d, &y[i].dmin, L);
        else quantize_k_scale_min(x, 31, -0.5f, 15, y[i].scales, &y[i].d, &y[i].dmin, L);
        /* Fifth bit of element e into bit e/32 of qh[e%32]; low nibbles as in Q4_K. */
        memset(y[i].qh, 0, QK_K / 8);
        for (int e = 0; e < QK_K; e++) {
            if (L[e] > 15) {
                L[e] = (uint8_t)(L[e] - 16);
                y[i].qh[e % 32] |= (uint8_t)(1u << (e / 32));
            }
        }
        for (int k = 0; k < QK_K / 64; k++)
            for (int l = 0; l < 32; ++l) y[i].qs[32 * k + l] = (uint8_t)(L[64 * k + l] | L[64 * k + 32 + l] << 4);
    }
}

void ht_ref_q4_K_from_float(const float *x, void *vy, int64_t n) { q4_K_quantize(x, vy, n, NULL); }
void ht_ref_q4_K_weighted(const float *x, void *vy, int64_t n, const float *qw) { q4_K_quantize(x, vy, n, qw); }
void ht_ref_q5_K_from_float(const float *x, void *vy, int64_t n) { q5_K_quantize(x, vy, n, NULL); }
void ht_ref_q5_K_weighted(const float *x, void *vy, int64_t n, const float *qw) { q5_K_quantize(x, vy, n, qw); }

static void q6_K_quantize(const float *x, void *vy, int64_t n, const float *qw) {
    block_q6_K *y = vy;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, qw ? qw + QK_K * i + 16 * ib : NULL);
            scales[ib] = scale;
            const float abs_scale = fabsf(scale);
            if (abs_scale > max_abs_scale) { max_abs_scale = abs_scale; max_scale = scale; }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            y[i].d = f32_to_fp16(0.f);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = f32_to_fp16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib) y[i].scales[ib] = (int8_t)HT_MIN(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fp16_to_f32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                const int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = (int8_t)(clampi(l, -32, 31) + 32);
            }
        }
        /* Inverse of unpack_q6_K. */
        for (int h = 0; h < QK_K / 128; h++)
            for (int l = 0; l < 32; ++l) {
                const int8_t *Lh = L + 128 * h;
                y[i].ql[64 * h + l] = (uint8_t)((Lh[l] & 0xF) | (Lh[l + 64] & 0xF) << 4);
                y[i].ql[64 * h + 32 + l] = (uint8_t)((Lh[l + 32] & 0xF) | (Lh[l + 96] & 0xF) << 4);
                y[i].qh[32 * h + l] = (uint8_t)((Lh[l] >> 4) | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 |
                                                (Lh[l + 96] >> 4) << 6);
            }
    }
}

void ht_ref_q6_K_from_float(const float *x, void *vy, int64_t n) { q6_K_quantize(x, vy, n, NULL); }
void ht_ref_q6_K_weighted(const float *x, void *vy, int64_t n, const float *qw) { q6_K_quantize(x, vy, n, qw); }

/* ======================= with an importance matrix: Q2_K, Q3_K, Q4_0, Q4_1, Q5_0, Q5_1 ======================= */

/* ggml's quantize_row_*_impl with quant_weights: each value weighs qw * sqrt(sigma2 + x^2), sigma2 the mean
 * square of its super-block (Q3_K: twice that; the legacy types: of the whole row). */
static void importance(const float *x, const float *qw, int n, float sigma2, float *weight) {
    for (int l = 0; l < n; ++l) weight[l] = qw[l] * sqrtf(sigma2 + x[l] * x[l]);
}

static float mean_square(const float *x, int64_t n) {
    float sumx2 = 0;
    for (int64_t j = 0; j < n; ++j) sumx2 += x[j] * x[j];
    return sumx2 / n;
}

/* Q2_K: per 16 values an asymmetric fit (make_qkx3_quants), the 4-bit scales and mins by make_qp_quants
 * weighted by each sub-block's total weight, then the values re-rounded with the stored scales. */
void ht_ref_q2_K_weighted(const float *x, void *vy, int64_t n, const float *quant_weights) {
    block_q2_K *y = vy;
    uint8_t L[QK_K], Laux[16], Ls[QK_K / 16], Lm[QK_K / 16];
    float mins[QK_K / 16], scales[QK_K / 16], sw[QK_K / 16], weight[16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        const float sigma2 = mean_square(x, QK_K);
        for (int j = 0; j < QK_K / 16; ++j) {
            importance(x + 16 * j, quant_weights + QK_K * i + 16 * j, 16, sigma2, weight);
            sw[j] = 0;
            for (int l = 0; l < 16; ++l) sw[j] += weight[l];
            scales[j] = make_qkx3_quants(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36);
        }
        float dm = ht_make_qp_quants(QK_K / 16, 15, scales, Ls, sw);
        float mm = ht_make_qp_quants(QK_K / 16, 15, mins, Lm, sw);
        y[i].d = f32_to_fp16(dm);
        y[i].dmin = f32_to_fp16(mm);
        dm = fp16_to_f32(y[i].d);
        mm = fp16_to_f32(y[i].dmin);
        for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = (uint8_t)(Ls[j] | Lm[j] << 4);
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = dm * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float m = mm * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = (uint8_t)clampi(nearest_int((x[16 * j + ii] + m) / d), 0, 3);
        }
        pack_2bit(L, y[i].qs);
    }
}

/* Q3_K: per 16 values make_qx_quants on the importance, the 6-bit scales by make_qx_quants weighted by each
 * sub-block's total weight, then re-rounding with the stored scales. */
void ht_ref_q3_K_weighted(const float *x, void *vy, int64_t n, const float *quant_weights) {
    block_q3_K *y = vy;
    int8_t L[QK_K], Ls[QK_K / 16];
    float scales[QK_K / 16], weight[16], sw[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        const float sigma2 = 2 * mean_square(x, QK_K);
        for (int j = 0; j < QK_K / 16; ++j) {
            importance(x + 16 * j, quant_weights + QK_K * i + 16 * j, 16, sigma2, weight);
            float sumw = 0;
            for (int l = 0; l < 16; ++l) sumw += weight[l];
            sw[j] = sumw;
            scales[j] = make_qx_quants(16, 4, x + 16 * j, L + 16 * j, weight);
        }
        memset(y[i].scales, 0, 12);
        const float d_block = make_qx_quants(QK_K / 16, 32, scales, Ls, sw);
        for (int j = 0; j < QK_K / 16; ++j) {
            int l = Ls[j];
            if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
            else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
            l >>= 4;
            y[i].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
        }
        y[i].d = f32_to_fp16(d_block);
        for (int j = 0; j < QK_K / 16; ++j) {
            int sc = j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j - 8] >> 4;
            sc = (int8_t)((sc | ((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32);
            const float d = fp16_to_f32(y[i].d) * sc;
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) L[16 * j + ii] = (int8_t)(clampi(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
        }
        memset(y[i].hmask, 0, QK_K / 8);
        uint8_t L2[QK_K];
        for (int j = 0; j < QK_K; ++j) {
            if (L[j] > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1u << (j / 32));
                L[j] = (int8_t)(L[j] - 4);
            }
            L2[j] = (uint8_t)L[j];
        }
        pack_2bit(L2, y[i].qs);
    }
}

/* The legacy 32-value blocks: symmetric (Q4_0, Q5_0: make_qx_quants) or with a min (Q4_1, Q5_1:
 * make_qkx3_quants), 4 or 5 bits. */
static void legacy_weighted(const float *x, void *vy, int64_t n, const float *quant_weights, int bits, bool with_min) {
    const float sigma2 = mean_square(x, n);
    float weight[32];
    for (int64_t ib = 0; ib < n / 32; ++ib) {
        const float *xb = x + 32 * ib;
        importance(xb, quant_weights + 32 * ib, 32, sigma2, weight);
        uint8_t L[32], Laux[32];
        float d, min = 0;
        if (with_min) {
            d = make_qkx3_quants(32, (1 << bits) - 1, xb, weight, L, &min, Laux, -0.9f, 0.05f, 36);
        } else {
            int8_t Ls[32];
            d = make_qx_quants(32, 1 << (bits - 1), xb, Ls, weight);
            for (int j = 0; j < 32; ++j) L[j] = (uint8_t)Ls[j];
        }
        uint8_t qs[16];
        uint32_t qh = 0;
        for (int j = 0; j < 16; ++j) {
            qs[j] = (uint8_t)((L[j] & 0x0F) | (L[j + 16] & 0x0F) << 4);
            qh |= ((L[j] & 0x10u) >> 4) << j;
            qh |= ((L[j + 16] & 0x10u) >> 4) << (j + 16);
        }
        const ht_half hd = f32_to_fp16(d), hm = f32_to_fp16(-min);
        if (bits == 4 && !with_min) {
            block_q4_0 *y = (block_q4_0 *)vy + ib;
            y->d = hd;
            memcpy(y->qs, qs, 16);
        } else if (bits == 4) {
            block_q4_1 *y = (block_q4_1 *)vy + ib;
            y->d = hd, y->m = hm;
            memcpy(y->qs, qs, 16);
        } else if (!with_min) {
            block_q5_0 *y = (block_q5_0 *)vy + ib;
            y->d = hd;
            store_u32le(y->qh, qh);
            memcpy(y->qs, qs, 16);
        } else {
            block_q5_1 *y = (block_q5_1 *)vy + ib;
            y->d = hd, y->m = hm;
            store_u32le(y->qh, qh);
            memcpy(y->qs, qs, 16);
        }
    }
}

void ht_ref_q4_0_weighted(const float *x, void *vy, int64_t n, const float *qw) { legacy_weighted(x, vy, n, qw, 4, false); }
void ht_ref_q4_1_weighted(const float *x, void *vy, int64_t n, const float *qw) { legacy_weighted(x, vy, n, qw, 4, true); }
void ht_ref_q5_0_weighted(const float *x, void *vy, int64_t n, const float *qw) { legacy_weighted(x, vy, n, qw, 5, false); }
void ht_ref_q5_1_weighted(const float *x, void *vy, int64_t n, const float *qw) { legacy_weighted(x, vy, n, qw, 5, true); }

/* ggml: d = max / -127 (max = element of largest magnitude), q = min(127, nearest_int(x / d)),
 * bsums = sums of 16 consecutive quants. An all-zero block gets d = 0 and zero quants and bsums. */
void ht_ref_q8_K_from_float(const float *x, void *vy, int64_t n) {
    block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; ++j) {
            const float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; ++j) y[i].qs[j] = (int8_t)HT_MIN(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < QK_K / 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

/* ======================= IQ4_NL, IQ4_XS ======================= */

/* Index of the level of ht_kvalues_iq4nl nearest to x (ties go up): level i is chosen once
 * 2x >= v[i-1] + v[i], compared exactly. */
static int best_index_iq4nl(float x) {
    const float x2 = x + x;
    int idx = 0;
    for (int step = 8; step > 0; step >>= 1) {
        const int j = idx + step;
        if (x2 >= (float)(ht_kvalues_iq4nl[j - 1] + ht_kvalues_iq4nl[j])) idx = j;
    }
    return idx;
}

/* ggml's quantize_row_iq4_nl_impl for 16 levels, blocks of 32, weights x^2 (or from importance weights qw):
 * per block, a least-squares scale refined over 2*ntry+1 candidate scales; with several blocks
 * (IQ4_XS, sbs = 256) the block scales become 6-bit multiples of a super-block fp16 scale and the
 * quants are re-picked with them. ntry <= 0 skips the search (quantize_row_iq4_nl_ref's -1). */
static void quantize_iq4_superblock(int sbs, const float *x, ht_half *dh, uint8_t *q4, uint16_t *scales_h,
                                    uint8_t *scales_l, int ntry, const float *qw) {
    const int8_t *values = ht_kvalues_iq4nl;
    float scales[QK_K / 32], weight[32];
    uint8_t L[QK_K];
    float sigma2 = 0;   /* with importance weights qw: weights qw * sqrt(sigma2 + x^2) */
    for (int j = 0; j < sbs; ++j) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / sbs;
    memset(q4, 0, (size_t)sbs / 2);
    *dh = f32_to_fp16(0.f);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < sbs / 32; ++ib) {
        const float *xb = x + 32 * ib;
        uint8_t *Lb = L + 32 * ib;
        for (int j = 0; j < 32; ++j) weight[j] = qw ? qw[32 * ib + j] * sqrtf(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
        float amax = 0, max = 0;
        for (int j = 0; j < 32; ++j) {
            const float ax = fabsf(xb[j]);
            if (ax > amax) { amax = ax; max = xb[j]; }
        }
        if (amax < GROUP_MAX_EPS) {
            scales[ib] = 0;
            memset(Lb, 0, 32);
            continue;
        }
        float d = ntry > 0 ? -max / values[0] : max / values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; ++j) {
            const float al = id * xb[j];
            const int l = best_index_iq4nl(al);
            Lb[j] = (uint8_t)l;
            const float q = values[l];
            const float w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; ++itry) {
            id = (itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < 32; ++j) {
                const float al = id * xb[j];
                const int l = best_index_iq4nl(al);
                const float q = values[l];
                const float w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        const float abs_d = fabsf(d);
        if (abs_d > amax_scale) { amax_scale = abs_d; max_scale = d; }
    }
    if (sbs / 32 > 1) {
        *scales_h = 0;
        const float d = -max_scale / 32;
        *dh = f32_to_fp16(d);
        const float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < sbs / 32; ++ib) {
            int l = nearest_int(id * scales[ib]);
            l = clampi(l, -32, 31);
            const float dl = d * l;
            const float idl = dl ? 1 / dl : 0.f;
            uint8_t *Lb = L + 32 * ib;
            const float *xb = x + 32 * ib;
            for (int j = 0; j < 32; ++j) Lb[j] = (uint8_t)best_index_iq4nl(idl * xb[j]);
            l += 32;
            const uint8_t l_l = (uint8_t)(l & 0xf), l_h = (uint8_t)(l >> 4);
            if (ib % 2 == 0) scales_l[ib / 2] = l_l;
            else scales_l[ib / 2] |= (uint8_t)(l_l << 4);
            *scales_h |= (uint16_t)(l_h << 2 * (ib % 8));
        }
    } else {
        *dh = f32_to_fp16(scales[0]);
        if (ntry > 0) {
            const float id = scales[0] ? 1 / scales[0] : 0;
            for (int j = 0; j < sbs; ++j) L[j] = (uint8_t)best_index_iq4nl(id * x[j]);
        }
    }
    for (int i = 0; i < sbs / 32; ++i)
        for (int j = 0; j < 16; ++j) q4[16 * i + j] = (uint8_t)(L[32 * i + j] | L[32 * i + 16 + j] << 4);
}

/* IQ4_NL uses the 7-step search, as llama-quantize's quantize_iq4_nl does (ggml's _ref variant skips
 * it): re-quantized files then match llama.cpp's and the error is lower. */
void ht_ref_iq4_nl_from_float(const float *x, void *vy, int64_t n) {
    block_iq4_nl *y = vy;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        uint16_t unused_h;
        quantize_iq4_superblock(QK4_NL, x + QK4_NL * i, &y[i].d, y[i].qs, &unused_h, NULL, 7, NULL);
    }
}

void ht_ref_iq4_xs_from_float(const float *x, void *vy, int64_t n) {
    block_iq4_xs *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++)
        quantize_iq4_superblock(QK_K, x + QK_K * i, &y[i].d, y[i].qs, &y[i].scales_h, y[i].scales_l, 7, NULL);
}

void ht_ref_iq4_nl_weighted(const float *x, void *vy, int64_t n, const float *qw) {
    block_iq4_nl *y = vy;
    for (int64_t i = 0; i < n / QK4_NL; i++) {
        uint16_t unused_h;
        quantize_iq4_superblock(QK4_NL, x + QK4_NL * i, &y[i].d, y[i].qs, &unused_h, NULL, 7, qw + QK4_NL * i);
    }
}

void ht_ref_iq4_xs_weighted(const float *x, void *vy, int64_t n, const float *qw) {
    block_iq4_xs *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++)
        quantize_iq4_superblock(QK_K, x + QK_K * i, &y[i].d, y[i].qs, &y[i].scales_h, y[i].scales_l, 7, qw + QK_K * i);
}

/* ======================= i-quants and ternary types: unpack super-blocks of 256 ======================= */

/* Each unpacks one super-block into signed int8 quants q and one integer scale per 16 elements, and returns
 * its fp16 d; the value of element e is then d * sc[e/16] * q[e] * ht_iq_post(type), and a dot product with
 * Q8_K is, per super-block, isum = sum_s sc[s] * (q . a over the 16 elements of s), exact in int32, then
 *   sum += (d_w * d_a) * (float)isum,   the result post * sum.
 * The scales are ggml's 2s + 1 (odd, so the 1/2-step of "0.5 + s" becomes the factor 1/8 or 1/4 of post).
 * IQ1's shifted ternary values (grid +- 1/8) become q = 8 * grid +- 1, post 1/8: an exact integer identity
 * with ggml's separate bsums term. */

/* 8 elements: the byte magnitudes of a grid entry with the signs of the 8 bits of `signs`. */
static void grid8(int8_t *q, uint64_t mags, unsigned signs) {
    for (int j = 0; j < 8; j++) q[j] = (int8_t)((signs >> j & 1) ? -(int)(mags >> 8 * j & 0xFF) : (int)(mags >> 8 * j & 0xFF));
}

static void grid4(int8_t *q, uint32_t mags, unsigned signs) {
    for (int j = 0; j < 4; j++) q[j] = (int8_t)((signs >> j & 1) ? -(int)(mags >> 8 * j & 0xFF) : (int)(mags >> 8 * j & 0xFF));
}

static void scale32(int16_t *sc, int ib, int ls) { sc[2 * ib] = sc[2 * ib + 1] = (int16_t)ls; }

/* IQ2_XXS: per 32 elements two u32 words: bytes of the first are 4 indices into iq2xxs_grid, the second holds
 * four 7-bit sign indices (ksigns_iq2xs) and, in its top 4 bits, the scale s. */
static ht_half unpack_iq2_xxs(const void *vb, int8_t q[QK_K], int16_t sc[QK_K / 16]) {
    const block_iq2_xxs *b = vb;
    for (int ib = 0; ib < QK_K / 32; ib++) {
        uint32_t w[2];
        memcpy(w, b->qs + 4 * ib, sizeof w);
        for (int l = 0; l < 4; l++)
            grid8(q + 32 * ib + 8 * l, ht_iq2xxs_grid[w[0] >> 8 * l & 0xFF], ht_ksigns_iq2xs[w[1] >> 7 * l & 127]);
        scale32(sc, ib, 2 * (int)(w[1] >> 28) + 1);
    }
    return b->d;
}

/* IQ2_XS: per 8 elements a u16: 9-bit index into iq2xs_grid, 7-bit sign index; a 4-bit scale per 16. */
static ht_half unpack_iq2_xs(const void *vb, int8_t q[QK_K], int16_t sc[QK_K / 16]) {
    const block_iq2_xs *b = vb;
    for (int g = 0; g < QK_K / 8; g++) grid8(q + 8 * g, ht_iq2xs_grid[b->qs[g] & 511], ht_ksigns_iq2xs[b->qs[g] >> 9]);
    for (int s = 0; s < QK_K / 16; s++) sc[s] = (int16_t)(2 * (b->scales[s / 2] >> 4 * (s % 2) & 0xF) + 1);
    return b->d;
}

/* IQ2_S: per 8 elements an index of 10 bits (qs byte, 2 more from qh[32-block]) into iq2s_grid and a whole
 * byte of signs (the second half of qs); a 4-bit scale per 16. */
static ht_half unpack_iq2_s(const void *vb, int8_t q[QK_K], int16_t sc[QK_K / 16]) {
    const block_iq2_s *b = vb;
    const uint8_t *signs = b->qs + QK_K / 8;
    for (int g = 0; g < QK_K / 8; g++)
        grid8(q + 8 * g, ht_iq2s_grid[b->qs[g] | (b->qh[g / 4] << (8 - 2 * (g % 4)) & 0x300)], signs[g]);
    for (int s = 0; s < QK_K / 16; s++) sc[s] = (int16_t)(2 * (b->scales[s / 2] >> 4 * (s % 2) & 0xF) + 1);
    return b->d;
}

/* IQ3_XXS: per 4 elements a byte index into iq3xxs_grid; per 32 a u32 (after the 64 index bytes) of four
 * 7-bit sign indices and the 4-bit scale. */
static ht_half unpack_iq3_xxs(const void *vb, int8_t q[QK_K], int16_t sc[QK_K / 16]) {
    const block_iq3_xxs *b = vb;
    for (int ib = 0; ib < QK_K / 32; ib++) {
        uint32_t w;
        memcpy(&w, b->qs + QK_K / 4 + 4 * ib, sizeof w);
        for (int l = 0; l < 4; l++) {
            const unsigned s = ht_ksigns_iq2xs[w >> 7 * l & 127];
            grid4(q + 32 * ib + 8 * l, ht_iq3xxs_grid[b->qs[8 * ib + 2 * l]], s);
            grid4(q + 32 * ib + 8 * l + 4, ht_iq3xxs_grid[b->qs[8 * ib + 2 * l + 1]], s >> 4);
        }
        scale32(sc, ib, 2 * (int)(w >> 28) + 1);
    }
    return b->d;
}

/* IQ3_S: per 4 elements a 9-bit index (qs byte, bit from qh[32-block]) into iq3s_grid, a sign bit per element,
 * a 4-bit scale per 32. */
static ht_half unpack_iq3_s(const void *vb, int8_t q[QK_K], int16_t sc[QK_K / 16]) {
    const block_iq3_s *b = vb;
    for (int ib = 0; ib < QK_K / 32; ib++) {
        for (int k = 0; k < 8; k++) {
            const int idx = b->qs[8 * ib + k] | (b->qh[ib] << (8 - k) & 256);
            grid4(q + 32 * ib + 4 * k, ht_iq3s_grid[idx], b->signs[4 * ib + k / 2] >> 4 * (k % 2));
        }
        scale32(sc, ib, 2 * (b->scales[ib / 2] >> 4 * (ib % 2) & 0xF) + 1);
    }
    return b->d;
}

/* IQ1_S: per 8 elements an 11-bit index (qs byte, 3 bits of qh[32-block]) into iq1s_grid; qh's bits 12..14
 * are the 32-block's scale, bit 15 the sign of its 1/8 shift. */
static ht_half unpack_iq1_s(const void *vb, int8_t q[QK_K], int16_t sc[QK_K / 16]) {
    const block_iq1_s *b = vb;
    for (int ib = 0; ib < QK_K / 32; ib++) {
        const int h = b->qh[ib], delta = h & 0x8000 ? -1 : 1;
        for (int l = 0; l < 4; l++) {
            const uint64_t g = ht_iq1s_grid[b->qs[4 * ib + l] | (h >> 3 * l & 7) << 8];
            for (int j = 0; j < 8; j++) q[32 * ib + 8 * l + j] = (int8_t)(8 * (int8_t)(g >> 8 * j) + delta);
        }
        scale32(sc, ib, 2 * (h >> 12 & 7) + 1);
    }
    return b->d;
}

/* IQ1_M: per 8 elements an 11-bit index (qs byte, a nibble of qh: 3 bits + the shift's sign in bit 3); a
 * 3-bit scale per 16 (four to each u16 of scales, whose top nibbles hold d, ht_iq1_m_d). */
static ht_half unpack_iq1_m(const void *vb, int8_t q[QK_K], int16_t sc[QK_K / 16]) {
    const block_iq1_m *b = vb;
    uint16_t w[4];
    memcpy(w, b->scales, sizeof w);
    for (int g = 0; g < QK_K / 8; g++) {
        const int nib = b->qh[g / 2] >> 4 * (g % 2) & 0xF, delta = nib & 8 ? -1 : 1;
        const uint64_t grid = ht_iq1s_grid[b->qs[g] | (nib & 7) << 8];
        for (int j = 0; j < 8; j++) q[8 * g + j] = (int8_t)(8 * (int8_t)(grid >> 8 * j) + delta);
    }
    for (int s = 0; s < QK_K / 16; s++) sc[s] = (int16_t)(2 * (w[s / 4] >> 3 * (s % 4) & 7) + 1);
    return ht_iq1_m_d(b);
}

/* TQ2_0: element 128h + 32l + m is bits 2l..2l+1 of qs[32h + m], minus 1. */
static ht_half unpack_tq2_0(const void *vb, int8_t q[QK_K], int16_t sc[QK_K / 16]) {
    const block_tq2_0 *b = vb;
    for (int e = 0; e < QK_K; e++) q[e] = (int8_t)((b->qs[32 * (e / 128) + e % 32] >> 2 * (e % 128 / 32) & 3) - 1);
    for (int s = 0; s < QK_K / 16; s++) sc[s] = 1;
    return b->d;
}

/* Trit k (0 = most significant) of a TQ1_0 byte: the byte is ceil(v * 256 / 243) of a 5-trit number v. */
static int trit(uint8_t byte, int k) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    const uint8_t x = (uint8_t)(byte * pow3[k]);
    return ((uint16_t)x * 3 >> 8) - 1;
}

/* TQ1_0: qs[0..31] hold trit k of elements 32k + m (k < 5), qs[32..47] trit k of 160 + 16k + m, qh[j] trit k
 * of 240 + 4k + j (k < 4). */
static ht_half unpack_tq1_0(const void *vb, int8_t q[QK_K], int16_t sc[QK_K / 16]) {
    const block_tq1_0 *b = vb;
    for (int k = 0; k < 5; k++)
        for (int m = 0; m < 32; m++) q[32 * k + m] = (int8_t)trit(b->qs[m], k);
    for (int k = 0; k < 5; k++)
        for (int m = 0; m < 16; m++) q[160 + 16 * k + m] = (int8_t)trit(b->qs[32 + m], k);
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 4; j++) q[240 + 4 * k + j] = (int8_t)trit(b->qh[j], k);
    for (int s = 0; s < QK_K / 16; s++) sc[s] = 1;
    return b->d;
}

typedef ht_half (*iq_unpack_fn)(const void *vb, int8_t q[QK_K], int16_t sc[QK_K / 16]);

static void iq_to_float(iq_unpack_fn unpack, size_t bytes, float post, const void *src, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        int8_t q[QK_K];
        int16_t sc[QK_K / 16];
        const float d = fp16_to_f32(unpack((const uint8_t *)src + (size_t)i * bytes, q, sc)) * post;
        for (int s = 0; s < QK_K / 16; s++) {
            const float dl = d * sc[s];
            for (int l = 0; l < 16; l++) y[16 * s + l] = dl * q[16 * s + l];
        }
    }
}

static float iq_vec_dot(iq_unpack_fn unpack, size_t bytes, float post, int n, const void *w, const void *va) {
    const block_q8_K *a = va;
    float sum = 0;
    for (int i = 0; i < n / QK_K; i++) {
        int8_t q[QK_K];
        int16_t sc[QK_K / 16];
        const ht_half d = unpack((const uint8_t *)w + (size_t)i * bytes, q, sc);
        int32_t isum = 0;
        for (int s = 0; s < QK_K / 16; s++) isum += sc[s] * dot_i8(q + 16 * s, a[i].qs + 16 * s, 16);
        sum += (fp16_to_f32(d) * a[i].d) * (float)isum;
    }
    return post * sum;
}

#define IQ_KERNELS(name, T)                                                                                   \
    void ht_ref_##name##_to_float(const void *src, float *y, int64_t n) {                                    \
        iq_to_float(unpack_##name, sizeof(block_##name), ht_iq_post(T), src, y, n);                          \
    }                                                                                                        \
    float ht_ref_vec_dot_##name##_q8_K(int n, const void *w, const void *a) {                                \
        return iq_vec_dot(unpack_##name, sizeof(block_##name), ht_iq_post(T), n, w, a);                      \
    }

IQ_KERNELS(iq2_xxs, HT_IQ2_XXS)
IQ_KERNELS(iq2_xs, HT_IQ2_XS)
IQ_KERNELS(iq2_s, HT_IQ2_S)
IQ_KERNELS(iq3_xxs, HT_IQ3_XXS)
IQ_KERNELS(iq3_s, HT_IQ3_S)
IQ_KERNELS(iq1_s, HT_IQ1_S)
IQ_KERNELS(iq1_m, HT_IQ1_M)
IQ_KERNELS(tq1_0, HT_TQ1_0)
IQ_KERNELS(tq2_0, HT_TQ2_0)

/* ggml's quantize_row_tq2_0_ref: d = the block's largest magnitude, each value rounded to -1, 0, 1 of it. */
void ht_ref_tq2_0_from_float(const float *x, void *vy, int64_t n) {
    block_tq2_0 *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax = 0;
        for (int j = 0; j < QK_K; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float id = amax ? 1.0f / amax : 0.0f;
        y[i].d = f32_to_fp16(amax);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int e = 0; e < QK_K; e++)
            y[i].qs[32 * (e / 128) + e % 32] |= (uint8_t)(((int)lroundf(x[e] * id) + 1) << 2 * (e % 128 / 32));
    }
}

/* ggml's quantize_row_tq1_0_ref: trits packed 5 a byte (4 in qh), most significant first, each byte scaled to
 * ceil(v * 256 / 243). */
static uint8_t pack_trits(const float *x, int stride, int count, float id) {
    unsigned v = 0;
    for (int k = 0; k < count; k++) v = v * 3 + (unsigned)(lroundf(x[k * stride] * id) + 1);
    if (count == 4) v *= 3;
    return (uint8_t)((v * 256 + 242) / 243);
}

void ht_ref_tq1_0_from_float(const float *x, void *vy, int64_t n) {
    block_tq1_0 *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax = 0;
        for (int j = 0; j < QK_K; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float id = amax ? 1.0f / amax : 0.0f;
        y[i].d = f32_to_fp16(amax);
        for (int m = 0; m < 32; m++) y[i].qs[m] = pack_trits(x + m, 32, 5, id);
        for (int m = 0; m < 16; m++) y[i].qs[32 + m] = pack_trits(x + 160 + m, 16, 5, id);
        for (int j = 0; j < 4; j++) y[i].qh[j] = pack_trits(x + 240 + j, 4, 4, id);
    }
}

/* ======================= MXFP4 (x Q8_0) ======================= */

/* Element j < 16 is the low nibble of qs[j], j + 16 the high one, each a doubled E2M1 value; per block
 *   sum += (d_w * d_a) * (float)isum   with d_w = ht_e8m0_half(e). */
static void unpack_mxfp4(const uint8_t qs[16], int8_t q[32]) {
    for (int j = 0; j < 16; j++) {
        q[j] = ht_kvalues_mxfp4[qs[j] & 0x0F];
        q[j + 16] = ht_kvalues_mxfp4[qs[j] >> 4];
    }
}

void ht_ref_mxfp4_to_float(const void *src, float *y, int64_t n) {
    const block_mxfp4 *b = src;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, y += QK_MXFP4) {
        int8_t q[QK_MXFP4];
        unpack_mxfp4(b[i].qs, q);
        const float d = ht_e8m0_half(b[i].e);
        for (int j = 0; j < QK_MXFP4; j++) y[j] = d * q[j];
    }
}

float ht_ref_vec_dot_mxfp4_q8_0(int n, const void *vw, const void *va) {
    const block_mxfp4 *w = vw;
    const block_q8_0 *a = va;
    float sum = 0;
    for (int i = 0; i < n / QK_MXFP4; i++) {
        int8_t q[QK_MXFP4];
        unpack_mxfp4(w[i].qs, q);
        sum += (ht_e8m0_half(w[i].e) * fp16_to_f32(a[i].d)) * (float)dot_i8(q, a[i].qs, QK_MXFP4);
    }
    return sum;
}

/* Index of the value of ht_kvalues_mxfp4 * d nearest to x (the first on ties), as ggml's best_index_mxfp4. */
static int best_index_mxfp4(float x, float d) {
    int best = 0;
    float err = fabsf(ht_kvalues_mxfp4[0] * d - x);
    for (int i = 1; i < 16; i++) {
        const float e = fabsf(ht_kvalues_mxfp4[i] * d - x);
        if (e < err) {
            best = i;
            err = e;
        }
    }
    return best;
}

/* ggml's quantize_row_mxfp4_ref: e = floor(log2(amax)) - 2 + 127 (so amax lands in the top binade, 4..8 x
 * the half scale), each value to the nearest E2M1 level. */
void ht_ref_mxfp4_from_float(const float *x, void *vy, int64_t n) {
    block_mxfp4 *y = vy;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, x += QK_MXFP4) {
        float amax = 0;
        for (int j = 0; j < QK_MXFP4; j++)
            if (amax < fabsf(x[j])) amax = fabsf(x[j]);
        const uint8_t e = amax > 0.0f ? (uint8_t)(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = ht_e8m0_half(e);
        y[i].e = e;
        for (int j = 0; j < QK_MXFP4 / 2; j++)
            y[i].qs[j] = (uint8_t)(best_index_mxfp4(x[j], d) | best_index_mxfp4(x[j + 16], d) << 4);
    }
}
