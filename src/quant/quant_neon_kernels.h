/* quant_neon_kernels.h — the aarch64 kernel bodies, compiled twice: quant_neon.c (baseline NEON: SMULL /
 * SMLAL2 into int16, SADALP into int32) and quant_neon_dotprod.c (SDOT, built with +dotprod and installed
 * only when the CPU reports it). The including file defines HT_NEON_DOTPROD (0 or 1); it gets neon_install().
 *
 * Same arithmetic contract as quant_x86_kernels.h. Weights are decoded to signed bytes (q - 8 for Q4_0, the
 * IQ4 tables, ...; NEON multiplies signed by signed, so no offsets or sign tricks). Per 16 bytes dot16 adds
 * the products into 4 int32 lanes (baseline: two products per int16 lane, safe since activations are in
 * [-127, 127]).
 *  - 32-element blocks: groups of 4; a pairwise-add tree (ADDP) turns the 4 blocks' lane vectors into their
 *    4 exact sums, then per lane acc += (d_w * d_a) * (float)isum [+ m_w * s_a]; leftover blocks after.
 *  - K-quants, IQ4_XS, the low-bit i-quants, TQ1_0, TQ2_0: per sub-block lane sums times the integer
 *    sub-block scale (MLA), offsets and min terms from Q8_K's bsums, then quant_ref.c's float formula in scalar, super-block by super-block: bit-identical
 *    to the scalar kernels.
 *  - F32 / F16 / BF16: 4 FMA accumulators of 4 lanes; activation quantizers bit-identical to the scalar ones
 *    (FCVTAS is roundf, FCVTNS is nearest_int).
 * Tiles and prefetching as in quant_simd.h. Tested under qemu-user (tests/test_neon_qemu.sh), which checks
 * results, not speed: these kernels have not been timed on real aarch64 hardware. */
#include <arm_neon.h>
#include <math.h>

#include "quant_simd.h"

#ifndef HT_NEON_DOTPROD
#error "define HT_NEON_DOTPROD before including quant_neon_kernels.h"
#endif

/* ======================= helpers ======================= */

HT_AI float h2f(const void *p) {
    __fp16 h;
    memcpy(&h, p, 2);
    return (float)h;
}

HT_AI uint16_t ldh(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* 4 halves at p, p + stride, ... as floats. */
HT_AI float32x4_t halves4(const uint8_t *p, size_t stride) {
    const uint16_t h[4] = {ldh(p), ldh(p + stride), ldh(p + 2 * stride), ldh(p + 3 * stride)};
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

/* acc + per int32 lane the sum of 4 products (the lanes' grouping differs between the two builds). */
HT_AI int32x4_t dot16(int32x4_t acc, int8x16_t x, int8x16_t y) {
#if HT_NEON_DOTPROD
    return vdotq_s32(acc, x, y);
#else
    const int16x8_t p = vmlal_high_s8(vmull_s8(vget_low_s8(x), vget_low_s8(y)), x, y);
    return vpadalq_s16(acc, p);
#endif
}

HT_AI int32x4_t dot32(int8x16_t x0, int8x16_t x1, const int8_t *a) {
    return dot16(dot16(vdupq_n_s32(0), x0, vld1q_s8(a)), x1, vld1q_s8(a + 16));
}

HT_AI int8x16_t lo4(uint8x16_t x) { return vreinterpretq_s8_u8(vandq_u8(x, vdupq_n_u8(0x0F))); }
HT_AI int8x16_t hi4(uint8x16_t x) { return vreinterpretq_s8_u8(vshrq_n_u8(x, 4)); }

/* Bytes of x with bit b set -> val, others 0. */
HT_AI int8x16_t bit_to(uint8x16_t x, int b, uint8_t val) {
    return vreinterpretq_s8_u8(vandq_u8(vtstq_u8(x, vdupq_n_u8((uint8_t)(1u << b))), vdupq_n_u8(val)));
}

/* Bits 0..15 of bits -> 16 bytes, 0x10 where set. */
HT_AI int8x16_t bits16(uint32_t bits) {
    static const uint8_t m[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t b = vcombine_u8(vdup_n_u8((uint8_t)bits), vdup_n_u8((uint8_t)(bits >> 8)));
    return vreinterpretq_s8_u8(vandq_u8(vtstq_u8(b, vld1q_u8(m)), vdupq_n_u8(0x10)));
}

HT_AI int8x16_t iq4nl_table(void) { return vld1q_s8(ht_kvalues_iq4nl); }

/* ======================= 32-element blocks x Q8_0 / Q8_1 ======================= */

typedef struct { int8x16_t lo, hi; } wq32;   /* a block's weights as signed bytes: elements 0..15, 16..31 */

HT_AI wq32 five_bit(const uint8_t *qs, const uint8_t *qh4, int off) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    const uint8x16_t x = vld1q_u8(qs);
    wq32 q = {vorrq_s8(lo4(x), bits16(qh)), vorrq_s8(hi4(x), bits16(qh >> 16))};
    q.lo = vsubq_s8(q.lo, vdupq_n_s8((int8_t)off));
    q.hi = vsubq_s8(q.hi, vdupq_n_s8((int8_t)off));
    return q;
}

HT_AI wq32 w_decode(const int T, const uint8_t *wb) {
    wq32 q;
    switch (T) {
    case HT_Q4_0: case HT_Q4_1: {
        const uint8x16_t x = vld1q_u8(wb + (T == HT_Q4_0 ? offsetof(block_q4_0, qs) : offsetof(block_q4_1, qs)));
        const int8x16_t off = vdupq_n_s8(T == HT_Q4_0 ? 8 : 0);
        q.lo = vsubq_s8(lo4(x), off);
        q.hi = vsubq_s8(hi4(x), off);
        return q;
    }
    case HT_Q5_0: return five_bit(((const block_q5_0 *)wb)->qs, ((const block_q5_0 *)wb)->qh, 16);
    case HT_Q5_1: return five_bit(((const block_q5_1 *)wb)->qs, ((const block_q5_1 *)wb)->qh, 0);
    case HT_Q8_0:
        q.lo = vld1q_s8(((const block_q8_0 *)wb)->qs);
        q.hi = vld1q_s8(((const block_q8_0 *)wb)->qs + 16);
        return q;
    case HT_MXFP4: {
        const uint8x16_t x = vld1q_u8(((const block_mxfp4 *)wb)->qs);
        const int8x16_t tab = vld1q_s8(ht_kvalues_mxfp4);
        q.lo = vqtbl1q_s8(tab, vandq_u8(x, vdupq_n_u8(0x0F)));
        q.hi = vqtbl1q_s8(tab, vshrq_n_u8(x, 4));
        return q;
    }
    default: {
        const uint8x16_t x = vld1q_u8(((const block_iq4_nl *)wb)->qs);
        q.lo = vqtbl1q_s8(iq4nl_table(), vandq_u8(x, vdupq_n_u8(0x0F)));
        q.hi = vqtbl1q_s8(iq4nl_table(), vshrq_n_u8(x, 4));
        return q;
    }
    }
}

HT_AI int32x4_t w_dot(const int T, wq32 q, const uint8_t *ab) {
    return dot32(q.lo, q.hi, (const int8_t *)ab + (uses_q8_1(T) ? offsetof(block_q8_1, qs) : offsetof(block_q8_0, qs)));
}

/* The weight scales of 4 consecutive blocks: halves, or MXFP4's E8M0 bytes (2^(e - 128), ht_e8m0_half). */
HT_AI float32x4_t w_scales4(const int T, const uint8_t *wb) {
    if (T != HT_MXFP4) return halves4(wb, w_size(T));
    const size_t S = sizeof(block_mxfp4);
    const uint32_t e4[4] = {wb[0], wb[S], wb[2 * S], wb[3 * S]};
    const uint32x4_t e = vld1q_u32(e4);
    const uint32x4_t norm = vshlq_n_u32(vsubq_u32(e, vdupq_n_u32(1)), 23);
    const uint32x4_t sub = vshlq_u32(vdupq_n_u32(0x00200000), vreinterpretq_s32_u32(e));
    return vreinterpretq_f32_u32(vbslq_u32(vcltq_u32(e, vdupq_n_u32(2)), sub, norm));
}

/* 4 blocks from block ib, NC activation rows: acc[c] += per lane the float formula of its block. */
HT_AI void group4(const int T, const int NC, const uint8_t *w, const uint8_t *const *a, size_t ib, float32x4_t *acc) {
    const size_t WS = w_size(T), AS = a_size(T);
    int32x4_t pr[4][2];
    HT_UNROLL
    for (int p = 0; p < 2; p++) {
        const size_t b = ib + 2 * (size_t)p;
        const wq32 q0 = w_decode(T, w + b * WS), q1 = w_decode(T, w + (b + 1) * WS);
        HT_UNROLL
        for (int c = 0; c < NC; c++) pr[c][p] = vpaddq_s32(w_dot(T, q0, a[c] + b * AS), w_dot(T, q1, a[c] + (b + 1) * AS));
    }
    const float32x4_t dw = w_scales4(T, w + ib * WS);
    const float32x4_t mw = uses_q8_1(T) ? halves4(w + ib * WS + offsetof(block_q4_1, m), WS) : dw;
    HT_UNROLL
    for (int c = 0; c < NC; c++) {
        const int32x4_t isum = vpaddq_s32(pr[c][0], pr[c][1]);
        const float32x4_t da = halves4(a[c] + ib * AS, AS);
        float32x4_t t = vmulq_f32(vmulq_f32(dw, da), vcvtq_f32_s32(isum));
        if (uses_q8_1(T)) t = vaddq_f32(t, vmulq_f32(mw, halves4(a[c] + ib * AS + offsetof(block_q8_1, s), AS)));
        acc[c] = vaddq_f32(acc[c], t);
    }
}

HT_AI float block1(const int T, const uint8_t *wb, const uint8_t *ab) {
    const int32_t isum = vaddvq_s32(w_dot(T, w_decode(T, wb), ab));
    float t = ((T == HT_MXFP4 ? ht_e8m0_half(wb[0]) : h2f(wb)) * h2f(ab)) * (float)isum;
    if (uses_q8_1(T)) t = t + h2f(wb + offsetof(block_q4_1, m)) * h2f(ab + offsetof(block_q8_1, s));
    return t;
}

/* nr weight rows (ws bytes apart, one after the other) x NC activation rows; each output gets exactly the
 * operations of the nr = NC = 1 instance, vec_dot. */
HT_AI void tile32(const int T, const int NC, int n, const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                  float *y, size_t ys) {
    const uint8_t *ac[4];
    HT_UNROLL
    for (int c = 0; c < NC; c++) ac[c] = a + (size_t)c * as;
    const size_t nb = (size_t)n / 32, ng = nb / 4 * 4;   /* blocks in full groups of 4 */
    for (int r = 0; r < nr; r++, w += ws, y++) {
        float32x4_t acc[4];
        HT_UNROLL
        for (int c = 0; c < NC; c++) acc[c] = vdupq_n_f32(0);
        for (size_t ib = 0; ib < ng; ib += 4) {
            ht_prefetch(w + ib * w_size(T), 4 * w_size(T));
            group4(T, NC, w, ac, ib, acc);
        }
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            float s = vaddvq_f32(acc[c]);
            for (size_t b = ng; b < nb; b++) s += block1(T, w + b * w_size(T), ac[c] + b * a_size(T));
            y[(size_t)c * ys] = s;
        }
    }
}

/* ======================= super-blocks of 256 x Q8_K ======================= */

/* Q4_K / Q5_K scales (bytes 0..7) and mins (8..15), as in quant_x86_kernels.h. */
HT_AI void scales_k4(const uint8_t *s12, uint8_t out[16]) {
    uint32_t u[4];
    memcpy(u, s12, 12);
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
    const uint32_t m03 = u[1] & k1;
    u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
    u[2] = m03;
    u[0] &= k1;
    memcpy(out, u, 16);
}

HT_AI void scales_q3_K(const uint8_t *s12, int8_t out[16]) {
    uint32_t u[4];
    memcpy(u, s12, 12);
    const uint32_t k1 = 0x03030303, k2 = 0x0f0f0f0f, tmp = u[2];
    u[2] = ((u[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4);
    u[3] = ((u[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4);
    u[0] = (u[0] & k2) | ((tmp & k1) << 4);
    u[1] = (u[1] & k2) | (((tmp >> 2) & k1) << 4);
    vst1q_s8(out, vsubq_s8(vreinterpretq_s8_u32(vld1q_u32(u)), vdupq_n_s8(32)));
}

/* Σ_j bsums[j] * s[j] over the 16 bsums (s: 16 int8). */
HT_AI int32_t bsums_dot(const block_q8_K *a, int8x16_t s) {
    const int16x8_t b0 = vld1q_s16(a->bsums), b1 = vld1q_s16(a->bsums + 8);
    const int32x4_t p = vmlal_high_s16(vmull_s16(vget_low_s16(b0), vget_low_s16(vmovl_s8(vget_low_s8(s)))), b0,
                                       vmovl_s8(vget_low_s8(s)));
    const int32x4_t q = vmlal_high_s16(vmull_s16(vget_low_s16(b1), vget_low_s16(vmovl_high_s8(s))), b1,
                                       vmovl_high_s8(s));
    return vaddvq_s32(vaddq_s32(p, q));
}

/* Q4_K, Q5_K: sub-blocks of 32 (low / high nibbles of 32-byte groups, Q5_K: + 16 from qh), mins. */
HT_AI void kb_q4_K_q5_K(const int T, const int NC, const uint8_t *wb, const block_q8_K *const *a, int32_t *isum,
                     int32_t *msum) {
    int32x4_t acc[4];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = vdupq_n_s32(0);
    const uint8_t *qs = T == HT_Q4_K ? ((const block_q4_K *)wb)->qs : ((const block_q5_K *)wb)->qs;
    uint8_t sm[16];
    scales_k4(T == HT_Q4_K ? ((const block_q4_K *)wb)->scales : ((const block_q5_K *)wb)->scales, sm);
    uint8x16_t qh0 = vdupq_n_u8(0), qh1 = vdupq_n_u8(0);
    if (T == HT_Q5_K) {
        qh0 = vld1q_u8(((const block_q5_K *)wb)->qh);
        qh1 = vld1q_u8(((const block_q5_K *)wb)->qh + 16);
    }
    HT_UNROLL
    for (int k = 0; k < 4; k++) {
        const uint8x16_t x0 = vld1q_u8(qs + 32 * k), x1 = vld1q_u8(qs + 32 * k + 16);
        int8x16_t l0 = lo4(x0), l1 = lo4(x1), h0 = hi4(x0), h1 = hi4(x1);
        if (T == HT_Q5_K) {
            l0 = vorrq_s8(l0, bit_to(qh0, 2 * k, 0x10));
            l1 = vorrq_s8(l1, bit_to(qh1, 2 * k, 0x10));
            h0 = vorrq_s8(h0, bit_to(qh0, 2 * k + 1, 0x10));
            h1 = vorrq_s8(h1, bit_to(qh1, 2 * k + 1, 0x10));
        }
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            acc[c] = vmlaq_n_s32(acc[c], dot32(l0, l1, a[c]->qs + 64 * k), sm[2 * k]);
            acc[c] = vmlaq_n_s32(acc[c], dot32(h0, h1, a[c]->qs + 64 * k + 32), sm[2 * k + 1]);
        }
    }
    /* min m[j] covers bsums 2j and 2j + 1 */
    const uint8x8_t m8 = vld1_u8(sm + 8);
    const int8x16_t mins = vreinterpretq_s8_u8(vzip1q_u8(vcombine_u8(m8, m8), vcombine_u8(m8, m8)));
    HT_UNROLL
    for (int c = 0; c < NC; c++) {
        isum[c] = vaddvq_s32(acc[c]);
        msum[c] = bsums_dot(a[c], mins);
    }
}

/* Q6_K: 6-bit quants stored unsigned (offset 32, removed through the bsums), int8 scales per 16. */
HT_AI void kb_q6_K(const int NC, const uint8_t *wb, const block_q8_K *const *a, int32_t *isum, int32_t *msum) {
    int32x4_t acc[4];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = vdupq_n_s32(0);
    const block_q6_K *b = (const block_q6_K *)wb;
    const int8x16_t m4 = vdupq_n_s8(0x0F), m2 = vdupq_n_s8(0x30), o32 = vdupq_n_s8(32);
    HT_UNROLL
    for (int h = 0; h < 2; h++) {
        HT_UNROLL
        for (int l = 0; l < 2; l++) {   /* bytes 16l..16l+15 of each 32-element group */
            const int8x16_t ql0 = vld1q_s8((const int8_t *)b->ql + 64 * h + 16 * l);
            const int8x16_t ql1 = vld1q_s8((const int8_t *)b->ql + 64 * h + 32 + 16 * l);
            const int8x16_t qh = vld1q_s8((const int8_t *)b->qh + 32 * h + 16 * l);
            int8x16_t q[4];
            q[0] = vorrq_s8(vandq_s8(ql0, m4), vandq_s8(vshlq_n_s8(qh, 4), m2));
            q[1] = vorrq_s8(vandq_s8(ql1, m4), vandq_s8(vshlq_n_s8(qh, 2), m2));
            q[2] = vorrq_s8(vreinterpretq_s8_u8(vshrq_n_u8(vreinterpretq_u8_s8(ql0), 4)), vandq_s8(qh, m2));
            q[3] = vorrq_s8(vreinterpretq_s8_u8(vshrq_n_u8(vreinterpretq_u8_s8(ql1), 4)),
                            vandq_s8(vreinterpretq_s8_u8(vshrq_n_u8(vreinterpretq_u8_s8(qh), 2)), m2));
            HT_UNROLL
            for (int g = 0; g < 4; g++) {
                const int sb = 8 * h + 2 * g + l;   /* element 128h + 32g + 16l: sub-block of 16 */
                const int8x16_t qs = vsubq_s8(q[g], o32);
                HT_UNROLL
                for (int c = 0; c < NC; c++)
                    acc[c] = vmlaq_n_s32(acc[c], dot16(vdupq_n_s32(0), qs, vld1q_s8(a[c]->qs + 16 * sb)), b->scales[sb]);
            }
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) {
        isum[c] = vaddvq_s32(acc[c]);
        msum[c] = 0;
    }
}

/* Q2_K (2 bits, 4-bit scale and min per 16) and Q3_K (+ a third bit from hmask, offset 4, 6-bit scales). */
HT_AI void kb_q2_K_q3_K(const int T, const int NC, const uint8_t *wb, const block_q8_K *const *a, int32_t *isum,
                     int32_t *msum) {
    int32x4_t acc[4];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = vdupq_n_s32(0);
    const uint8_t *qs = T == HT_Q2_K ? ((const block_q2_K *)wb)->qs : ((const block_q3_K *)wb)->qs;
    int8_t sc[16];
    int8x16_t mn = vdupq_n_s8(0);
    if (T == HT_Q2_K) {
        const uint8x16_t raw = vld1q_u8(((const block_q2_K *)wb)->scales);
        vst1q_s8(sc, vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(0x0F))));
        mn = vreinterpretq_s8_u8(vshrq_n_u8(raw, 4));
    } else {
        scales_q3_K(((const block_q3_K *)wb)->scales, sc);
    }
    uint8x16_t hm[2] = {vdupq_n_u8(0), vdupq_n_u8(0)};
    if (T == HT_Q3_K) {
        hm[0] = vld1q_u8(((const block_q3_K *)wb)->hmask);
        hm[1] = vld1q_u8(((const block_q3_K *)wb)->hmask + 16);
    }
    HT_UNROLL
    for (int h = 0; h < 2; h++) {
        HT_UNROLL
        for (int l = 0; l < 2; l++) {
            const uint8x16_t x = vld1q_u8(qs + 32 * h + 16 * l);
            HT_UNROLL
            for (int g = 0; g < 4; g++) {
                const int k = 4 * h + g, sb = 2 * k + l;   /* elements 32k + 16l .. +15 */
                int8x16_t u = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(x, vdupq_n_s8((int8_t)(-2 * g))), vdupq_n_u8(3)));
                if (T == HT_Q3_K) u = vsubq_s8(vorrq_s8(u, bit_to(hm[l], k, 4)), vdupq_n_s8(4));
                HT_UNROLL
                for (int c = 0; c < NC; c++)
                    acc[c] = vmlaq_n_s32(acc[c], dot16(vdupq_n_s32(0), u, vld1q_s8(a[c]->qs + 16 * sb)), sc[sb]);
            }
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) {
        isum[c] = vaddvq_s32(acc[c]);
        msum[c] = T == HT_Q2_K ? bsums_dot(a[c], mn) : 0;
    }
}

/* IQ4_XS: IQ4_NL bodies of 32 with 6-bit signed scales. */
HT_AI void kb_iq4_xs(const int NC, const uint8_t *wb, const block_q8_K *const *a, int32_t *isum, int32_t *msum) {
    int32x4_t acc[4];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = vdupq_n_s32(0);
    const block_iq4_xs *b = (const block_iq4_xs *)wb;
    const int8x16_t tab = iq4nl_table();
    HT_UNROLL
    for (int ib = 0; ib < 8; ib++) {
        const int ls = ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | ((b->scales_h >> (2 * ib)) & 3) << 4;
        const uint8x16_t x = vld1q_u8(b->qs + 16 * ib);
        const int8x16_t q0 = vqtbl1q_s8(tab, vandq_u8(x, vdupq_n_u8(0x0F))), q1 = vqtbl1q_s8(tab, vshrq_n_u8(x, 4));
        HT_UNROLL
        for (int c = 0; c < NC; c++) acc[c] = vmlaq_n_s32(acc[c], dot32(q0, q1, a[c]->qs + 32 * ib), ls - 32);
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) {
        isum[c] = vaddvq_s32(acc[c]);
        msum[c] = 0;
    }
}

/* ---- the low-bit i-quants and TQ2_0: one 32-element chunk at a time, decoded to signed bytes (lo: elements
 * 0..15, hi: 16..31) with an integer scale per 16 (quant_ref.c's unpack in registers): grid entries gathered by
 * index, signs applied as (x ^ m) - m with m = 0xFF where negative; IQ1's 8 * grid ± 1; TQ1_0's and TQ2_0's
 * value - 1. */
typedef struct { int8x16_t lo, hi; int sl, sh; } iqc;

HT_AI int8x16_t grid2(const uint64_t *g, unsigned i0, unsigned i1) {
    return vreinterpretq_s8_u64(vcombine_u64(vcreate_u64(g[i0]), vcreate_u64(g[i1])));
}

HT_AI int8x16_t grid4x4(const uint32_t *g, unsigned i0, unsigned i1, unsigned i2, unsigned i3) {
    const uint32_t v[4] = {g[i0], g[i1], g[i2], g[i3]};
    return vreinterpretq_s8_u32(vld1q_u32(v));
}

HT_AI int8x16_t apply_signs(int8x16_t x, int8x16_t m) { return vsubq_s8(veorq_s8(x, m), m); }

/* Sign masks of 16 elements from two ksigns64 indices, or from 16 sign bits. */
HT_AI int8x16_t ks64(unsigned i0, unsigned i1) { return grid2(ht_ksigns64, i0, i1); }
HT_AI int8x16_t signs16(unsigned bits) {
    static const uint8_t m[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t b = vcombine_u8(vdup_n_u8((uint8_t)bits), vdup_n_u8((uint8_t)(bits >> 8)));
    return vreinterpretq_s8_u8(vtstq_u8(b, vld1q_u8(m)));
}

/* IQ1: ternary grid bytes g and shift signs (one per 8 elements, -1 or 1) -> 8 * g + shift. */
HT_AI int8x16_t iq1_16(int8x16_t g, int d0, int d1) {
    return vaddq_s8(vshlq_n_s8(g, 3), vcombine_s8(vdup_n_s8((int8_t)d0), vdup_n_s8((int8_t)d1)));
}

HT_AI iqc iq_chunk(const int T, const uint8_t *wb, int ib) {
    iqc c;
    switch (T) {
    case HT_IQ2_XXS: {
        uint32_t w[2];
        memcpy(w, ((const block_iq2_xxs *)wb)->qs + 4 * ib, sizeof w);
        c.lo = apply_signs(grid2(ht_iq2xxs_grid, w[0] & 255, w[0] >> 8 & 255), ks64(w[1] & 127, w[1] >> 7 & 127));
        c.hi = apply_signs(grid2(ht_iq2xxs_grid, w[0] >> 16 & 255, w[0] >> 24), ks64(w[1] >> 14 & 127, w[1] >> 21 & 127));
        c.sl = c.sh = 2 * (int)(w[1] >> 28) + 1;
        break;
    }
    case HT_IQ2_XS: {
        const block_iq2_xs *b = (const block_iq2_xs *)wb;
        uint16_t w[4];
        memcpy(w, b->qs + 4 * ib, sizeof w);
        c.lo = apply_signs(grid2(ht_iq2xs_grid, w[0] & 511, w[1] & 511), ks64(w[0] >> 9, w[1] >> 9));
        c.hi = apply_signs(grid2(ht_iq2xs_grid, w[2] & 511, w[3] & 511), ks64(w[2] >> 9, w[3] >> 9));
        c.sl = 2 * (b->scales[ib] & 15) + 1;
        c.sh = 2 * (b->scales[ib] >> 4) + 1;
        break;
    }
    case HT_IQ2_S: {
        const block_iq2_s *b = (const block_iq2_s *)wb;
        const uint8_t *qs = b->qs + 4 * ib, *sg = b->qs + QK_K / 8 + 4 * ib;
        const unsigned h = b->qh[ib];
        c.lo = apply_signs(grid2(ht_iq2s_grid, qs[0] | (h << 8 & 0x300), qs[1] | (h << 6 & 0x300)), signs16(sg[0] | sg[1] << 8));
        c.hi = apply_signs(grid2(ht_iq2s_grid, qs[2] | (h << 4 & 0x300), qs[3] | (h << 2 & 0x300)), signs16(sg[2] | sg[3] << 8));
        c.sl = 2 * (b->scales[ib] & 15) + 1;
        c.sh = 2 * (b->scales[ib] >> 4) + 1;
        break;
    }
    case HT_IQ3_XXS: {
        const block_iq3_xxs *b = (const block_iq3_xxs *)wb;
        const uint8_t *qs = b->qs + 8 * ib;
        uint32_t w;
        memcpy(&w, b->qs + QK_K / 4 + 4 * ib, 4);
        c.lo = apply_signs(grid4x4(ht_iq3xxs_grid, qs[0], qs[1], qs[2], qs[3]), ks64(w & 127, w >> 7 & 127));
        c.hi = apply_signs(grid4x4(ht_iq3xxs_grid, qs[4], qs[5], qs[6], qs[7]), ks64(w >> 14 & 127, w >> 21 & 127));
        c.sl = c.sh = 2 * (int)(w >> 28) + 1;
        break;
    }
    case HT_IQ3_S: {
        const block_iq3_s *b = (const block_iq3_s *)wb;
        const uint8_t *qs = b->qs + 8 * ib, *sg = b->signs + 4 * ib;
        const unsigned h = b->qh[ib];
        c.lo = apply_signs(grid4x4(ht_iq3s_grid, qs[0] | (h << 8 & 256), qs[1] | (h << 7 & 256), qs[2] | (h << 6 & 256),
                                   qs[3] | (h << 5 & 256)), signs16(sg[0] | sg[1] << 8));
        c.hi = apply_signs(grid4x4(ht_iq3s_grid, qs[4] | (h << 4 & 256), qs[5] | (h << 3 & 256), qs[6] | (h << 2 & 256),
                                   qs[7] | (h << 1 & 256)), signs16(sg[2] | sg[3] << 8));
        c.sl = c.sh = 2 * (b->scales[ib / 2] >> 4 * (ib % 2) & 15) + 1;
        break;
    }
    case HT_IQ1_S: {
        const block_iq1_s *b = (const block_iq1_s *)wb;
        const unsigned h = b->qh[ib];
        const uint8_t *qs = b->qs + 4 * ib;
        const int d = h & 0x8000 ? -1 : 1;
        c.lo = iq1_16(grid2(ht_iq1s_grid, qs[0] | (h & 7) << 8, qs[1] | (h >> 3 & 7) << 8), d, d);
        c.hi = iq1_16(grid2(ht_iq1s_grid, qs[2] | (h >> 6 & 7) << 8, qs[3] | (h >> 9 & 7) << 8), d, d);
        c.sl = c.sh = 2 * (int)(h >> 12 & 7) + 1;
        break;
    }
    case HT_IQ1_M: {
        const block_iq1_m *b = (const block_iq1_m *)wb;
        const unsigned h0 = b->qh[2 * ib], h1 = b->qh[2 * ib + 1];
        const uint8_t *qs = b->qs + 4 * ib;
        c.lo = iq1_16(grid2(ht_iq1s_grid, qs[0] | (h0 & 7) << 8, qs[1] | (h0 >> 4 & 7) << 8), h0 & 0x08 ? -1 : 1,
                      h0 & 0x80 ? -1 : 1);
        c.hi = iq1_16(grid2(ht_iq1s_grid, qs[2] | (h1 & 7) << 8, qs[3] | (h1 >> 4 & 7) << 8), h1 & 0x08 ? -1 : 1,
                      h1 & 0x80 ? -1 : 1);
        uint16_t w;
        memcpy(&w, b->scales + 2 * (ib / 2), 2);
        const int s = w >> 6 * (ib % 2);
        c.sl = 2 * (s & 7) + 1;
        c.sh = 2 * (s >> 3 & 7) + 1;
        break;
    }
    case HT_TQ1_0: {   /* trit k of a byte: ((byte * 3^k mod 256) * 3) >> 8, minus 1 (quant_ref.c's trit) */
        const block_tq1_0 *b = (const block_tq1_0 *)wb;
        static const uint8_t p3[5] = {1, 3, 9, 27, 81};
        static const uint8_t mqh[16] = {1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27};
        static const uint8_t iqh[16] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
        uint8x16_t x0, x1, m0, m1;
        if (ib < 5) {   /* trit ib of qs[0..31] */
            x0 = vld1q_u8(b->qs);
            x1 = vld1q_u8(b->qs + 16);
            m0 = m1 = vdupq_n_u8(p3[ib]);
        } else if (ib < 7) {   /* trits 2 (ib - 5), + 1 of qs[32..47] */
            x0 = x1 = vld1q_u8(b->qs + 32);
            m0 = vdupq_n_u8(p3[2 * (ib - 5)]);
            m1 = vdupq_n_u8(p3[2 * (ib - 5) + 1]);
        } else {   /* trit 4 of qs[32..47], then trit k of qh[j] for element 240 + 4k + j */
            uint8_t h[16] = {0};
            memcpy(h, b->qh, 4);
            x0 = vld1q_u8(b->qs + 32);
            x1 = vqtbl1q_u8(vld1q_u8(h), vld1q_u8(iqh));
            m0 = vdupq_n_u8(81);
            m1 = vld1q_u8(mqh);
        }
        const uint8x16_t q0 = vmulq_u8(x0, m0), q1 = vmulq_u8(x1, m1), three = vdupq_n_u8(3);
        const uint8x16_t t0 = vcombine_u8(vshrn_n_u16(vmull_u8(vget_low_u8(q0), vget_low_u8(three)), 8),
                                          vshrn_n_u16(vmull_high_u8(q0, three), 8));
        const uint8x16_t t1 = vcombine_u8(vshrn_n_u16(vmull_u8(vget_low_u8(q1), vget_low_u8(three)), 8),
                                          vshrn_n_u16(vmull_high_u8(q1, three), 8));
        c.lo = vsubq_s8(vreinterpretq_s8_u8(t0), vdupq_n_s8(1));
        c.hi = vsubq_s8(vreinterpretq_s8_u8(t1), vdupq_n_s8(1));
        c.sl = c.sh = 1;
        break;
    }
    default: {   /* TQ2_0: chunk ib = bits 2 (ib % 4) of the 32 bytes of half ib / 4, minus 1 */
        const uint8_t *x = ((const block_tq2_0 *)wb)->qs + 32 * (ib / 4);
        const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * (ib % 4))), one = vdupq_n_s8(1);
        c.lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vshlq_u8(vld1q_u8(x), sh), vdupq_n_u8(3))), one);
        c.hi = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(vshlq_u8(vld1q_u8(x + 16), sh), vdupq_n_u8(3))), one);
        c.sl = c.sh = 1;
        break;
    }
    }
    return c;
}

HT_AI void kb_iq(const int T, const int NC, const uint8_t *wb, const block_q8_K *const *a, int32_t *isum, int32_t *msum) {
    int32x4_t acc[4];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = vdupq_n_s32(0);
    HT_UNROLL
    for (int ib = 0; ib < QK_K / 32; ib++) {
        const iqc q = iq_chunk(T, wb, ib);
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const int8_t *av = a[c]->qs + 32 * ib;
            if (q.sl == q.sh) {
                acc[c] = vmlaq_n_s32(acc[c], dot32(q.lo, q.hi, av), q.sl);
            } else {
                acc[c] = vmlaq_n_s32(acc[c], dot16(vdupq_n_s32(0), q.lo, vld1q_s8(av)), q.sl);
                acc[c] = vmlaq_n_s32(acc[c], dot16(vdupq_n_s32(0), q.hi, vld1q_s8(av + 16)), q.sh);
            }
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) {
        isum[c] = vaddvq_s32(acc[c]);
        msum[c] = 0;
    }
}

HT_AI void kblock(const int T, const int NC, const uint8_t *wb, const block_q8_K *const *a, int32_t *isum,
                  int32_t *msum) {
    if (T == HT_Q4_K || T == HT_Q5_K) kb_q4_K_q5_K(T, NC, wb, a, isum, msum);
    else if (T == HT_Q6_K) kb_q6_K(NC, wb, a, isum, msum);
    else if (T == HT_Q2_K || T == HT_Q3_K) kb_q2_K_q3_K(T, NC, wb, a, isum, msum);
    else if (T == HT_IQ4_XS) kb_iq4_xs(NC, wb, a, isum, msum);
    else kb_iq(T, NC, wb, a, isum, msum);
}

#include "quant_tile_k.h"

/* ======================= float weights x F32 ======================= */

HT_AI float32x4_t f_load(const int T, const uint8_t *w, int i) {
    switch (T) {
    case HT_F32: return vld1q_f32((const float *)w + i);
    case HT_F16: return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)w + i)));
    default: return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)w + i), 16));
    }
}

HT_AI float f_scalar(const int T, const uint8_t *w, int i) {
    switch (T) {
    case HT_F32: return ((const float *)w)[i];
    case HT_F16: return h2f((const uint16_t *)w + i);
    default: return bf16_to_f32(((const uint16_t *)w)[i]);
    }
}

HT_AI void colsF(const int T, const int NC, int n, const uint8_t *w, const uint8_t *a, size_t as, float *y,
                 size_t ys) {
    const float *ac[4];
    float32x4_t acc[4][4];
    HT_UNROLL
    for (int c = 0; c < NC; c++) {
        ac[c] = (const float *)(a + (size_t)c * as);
        HT_UNROLL
        for (int u = 0; u < 4; u++) acc[c][u] = vdupq_n_f32(0);
    }
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        HT_UNROLL
        for (int u = 0; u < 4; u++) {
            const float32x4_t wv = f_load(T, w, i + 4 * u);
            HT_UNROLL
            for (int c = 0; c < NC; c++) acc[c][u] = vfmaq_f32(acc[c][u], wv, vld1q_f32(ac[c] + i + 4 * u));
        }
    }
    for (; i + 4 <= n; i += 4) {
        const float32x4_t wv = f_load(T, w, i);
        HT_UNROLL
        for (int c = 0; c < NC; c++) acc[c][0] = vfmaq_f32(acc[c][0], wv, vld1q_f32(ac[c] + i));
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) {
        float s = vaddvq_f32(vaddq_f32(vaddq_f32(acc[c][0], acc[c][1]), vaddq_f32(acc[c][2], acc[c][3])));
        for (int j = i; j < n; j++) s += f_scalar(T, w, j) * ac[c][j];
        y[(size_t)c * ys] = s;
    }
}

HT_AI void tileF(const int T, const int NC, int n, const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                 float *y, size_t ys) {
    for (int r = 0; r < nr; r++) colsF(T, NC, n, w + (size_t)r * ws, a, as, y + r, ys);
}

/* ======================= activation quantizers ======================= */

/* 16 int32 (4 vectors, in order) -> 16 int8, saturating. */
HT_AI int8x16_t narrow16(int32x4_t q0, int32x4_t q1, int32x4_t q2, int32x4_t q3) {
    const int16x8_t a = vcombine_s16(vqmovn_s32(q0), vqmovn_s32(q1)), b = vcombine_s16(vqmovn_s32(q2), vqmovn_s32(q3));
    return vcombine_s8(vqmovn_s16(a), vqmovn_s16(b));
}

/* One Q8_0 / Q8_1 block: d = amax / 127 (returned), q = roundf(x / d) (FCVTAS); *sum = sum(q). */
HT_AI float q8_block(const float *x, ht_half *dh, int8_t *qs, int *sum) {
    float32x4_t v[8], amax = vdupq_n_f32(0);
    HT_UNROLL
    for (int k = 0; k < 8; k++) {
        v[k] = vld1q_f32(x + 4 * k);
        amax = vmaxq_f32(amax, vabsq_f32(v[k]));
    }
    const float d = vmaxvq_f32(amax) / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    *dh = f32_to_fp16(d);
    int32x4_t q[8], s = vdupq_n_s32(0);
    HT_UNROLL
    for (int k = 0; k < 8; k++) {
        q[k] = vcvtaq_s32_f32(vmulq_n_f32(v[k], id));
        s = vaddq_s32(s, q[k]);
    }
    vst1q_s8(qs, narrow16(q[0], q[1], q[2], q[3]));
    vst1q_s8(qs + 16, narrow16(q[4], q[5], q[6], q[7]));
    *sum = vaddvq_s32(s);
    return d;
}

static void q8_0_from_float(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    int sum;
    for (int64_t i = 0; i < n / QK8_0; i++) q8_block(x + i * QK8_0, &y[i].d, y[i].qs, &sum);
}

static void q8_1_from_float(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        int sum;
        const float d = q8_block(x + i * QK8_1, &y[i].d, y[i].qs, &sum);
        y[i].s = f32_to_fp16((float)sum * d);
    }
}

static void q8_K_from_float(const float *x, void *vy, int64_t n) {
    block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float32x4_t am = vdupq_n_f32(0);
        for (int k = 0; k < QK_K / 4; k++) am = vmaxq_f32(am, vabsq_f32(vld1q_f32(x + 4 * k)));
        const float amax = vmaxvq_f32(am);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int first = 0;
        while (fabsf(x[first]) != amax) first++;
        const float iscale = -127.f / x[first];
        for (int k = 0; k < QK_K / 16; k++) {
            int32x4_t q[4];
            HT_UNROLL
            for (int j = 0; j < 4; j++)
                q[j] = vminq_s32(vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 16 * k + 4 * j), iscale)), vdupq_n_s32(127));
            const int8x16_t b = narrow16(q[0], q[1], q[2], q[3]);
            vst1q_s8(y[i].qs + 16 * k, b);
            y[i].bsums[k] = (int16_t)vaddlvq_s8(b);
        }
        y[i].d = 1 / iscale;
    }
}

/* ======================= the kernel entries ======================= */

/* vec_dot is TILE's nr = nc = 1 instance; the tile runs its nc = 4 / 2 / 1 instances (HT_TILE_BODY). */
#define HT_NEON_KERNELS(name, T, TILE)                                                                       \
    static float vec_dot_##name(int n, const void *w, const void *a) {                                     \
        float y;                                                                                           \
        TILE(T, 1, n, w, 0, 1, a, 0, &y, 0);                                                               \
        return y;                                                                                          \
    }                                                                                                      \
    static void cols_##name(int n, const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nc, \
                            float *y, size_t ys) {                                                         \
        if (nc == 4) TILE(T, 4, n, w, ws, nr, a, as, y, ys);                                               \
        else if (nc == 2) TILE(T, 2, n, w, ws, nr, a, as, y, ys);                                          \
        else TILE(T, 1, n, w, ws, nr, a, as, y, ys);                                                       \
    }                                                                                                      \
    static void tile_##name(int n, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *y, \
                            size_t ys) {                                                                   \
        HT_TILE_BODY(cols_##name, 4)                                                                       \
    }

HT_NEON_KERNELS(q4_0, HT_Q4_0, tile32)
HT_NEON_KERNELS(q4_1, HT_Q4_1, tile32)
HT_NEON_KERNELS(q5_0, HT_Q5_0, tile32)
HT_NEON_KERNELS(q5_1, HT_Q5_1, tile32)
HT_NEON_KERNELS(q8_0, HT_Q8_0, tile32)
HT_NEON_KERNELS(iq4_nl, HT_IQ4_NL, tile32)
HT_NEON_KERNELS(q2_K, HT_Q2_K, tileK)
HT_NEON_KERNELS(q3_K, HT_Q3_K, tileK)
HT_NEON_KERNELS(q4_K, HT_Q4_K, tileK)
HT_NEON_KERNELS(q5_K, HT_Q5_K, tileK)
HT_NEON_KERNELS(q6_K, HT_Q6_K, tileK)
HT_NEON_KERNELS(iq4_xs, HT_IQ4_XS, tileK)
HT_NEON_KERNELS(iq2_xxs, HT_IQ2_XXS, tileK)
HT_NEON_KERNELS(iq2_xs, HT_IQ2_XS, tileK)
HT_NEON_KERNELS(iq2_s, HT_IQ2_S, tileK)
HT_NEON_KERNELS(iq3_xxs, HT_IQ3_XXS, tileK)
HT_NEON_KERNELS(iq3_s, HT_IQ3_S, tileK)
HT_NEON_KERNELS(iq1_s, HT_IQ1_S, tileK)
HT_NEON_KERNELS(iq1_m, HT_IQ1_M, tileK)
HT_NEON_KERNELS(tq1_0, HT_TQ1_0, tileK)
HT_NEON_KERNELS(tq2_0, HT_TQ2_0, tileK)
HT_NEON_KERNELS(mxfp4, HT_MXFP4, tile32)
HT_NEON_KERNELS(f32, HT_F32, tileF)
HT_NEON_KERNELS(f16, HT_F16, tileF)
HT_NEON_KERNELS(bf16, HT_BF16, tileF)

static void set_dot(ht_traits *t, ht_vec_dot_fn dot, ht_vec_dot_tile_fn tile) {
    t->vec_dot = dot;
    t->vec_dot_tile = tile;
}

/* The quantized types' dot products; with `all`, also the float ones and the activation quantizers (which
 * do not use the dot-product instructions, so the dotprod build leaves them to the baseline one). */
static void neon_install(ht_traits t[HT_NTYPES], bool all) {
    set_dot(&t[HT_Q4_0], vec_dot_q4_0, tile_q4_0);
    set_dot(&t[HT_Q4_1], vec_dot_q4_1, tile_q4_1);
    set_dot(&t[HT_Q5_0], vec_dot_q5_0, tile_q5_0);
    set_dot(&t[HT_Q5_1], vec_dot_q5_1, tile_q5_1);
    set_dot(&t[HT_Q8_0], vec_dot_q8_0, tile_q8_0);
    set_dot(&t[HT_IQ4_NL], vec_dot_iq4_nl, tile_iq4_nl);
    set_dot(&t[HT_Q2_K], vec_dot_q2_K, tile_q2_K);
    set_dot(&t[HT_Q3_K], vec_dot_q3_K, tile_q3_K);
    set_dot(&t[HT_Q4_K], vec_dot_q4_K, tile_q4_K);
    set_dot(&t[HT_Q5_K], vec_dot_q5_K, tile_q5_K);
    set_dot(&t[HT_Q6_K], vec_dot_q6_K, tile_q6_K);
    set_dot(&t[HT_IQ4_XS], vec_dot_iq4_xs, tile_iq4_xs);
    set_dot(&t[HT_IQ2_XXS], vec_dot_iq2_xxs, tile_iq2_xxs);
    set_dot(&t[HT_IQ2_XS], vec_dot_iq2_xs, tile_iq2_xs);
    set_dot(&t[HT_IQ2_S], vec_dot_iq2_s, tile_iq2_s);
    set_dot(&t[HT_IQ3_XXS], vec_dot_iq3_xxs, tile_iq3_xxs);
    set_dot(&t[HT_IQ3_S], vec_dot_iq3_s, tile_iq3_s);
    set_dot(&t[HT_IQ1_S], vec_dot_iq1_s, tile_iq1_s);
    set_dot(&t[HT_IQ1_M], vec_dot_iq1_m, tile_iq1_m);
    set_dot(&t[HT_TQ1_0], vec_dot_tq1_0, tile_tq1_0);
    set_dot(&t[HT_TQ2_0], vec_dot_tq2_0, tile_tq2_0);
    set_dot(&t[HT_MXFP4], vec_dot_mxfp4, tile_mxfp4);
    if (!all) return;
    set_dot(&t[HT_F32], vec_dot_f32, tile_f32);
    set_dot(&t[HT_F16], vec_dot_f16, tile_f16);
    set_dot(&t[HT_BF16], vec_dot_bf16, tile_bf16);
    t[HT_Q8_0].from_float = q8_0_from_float;
    t[HT_Q8_1].from_float = q8_1_from_float;
    t[HT_Q8_K].from_float = q8_K_from_float;
}
