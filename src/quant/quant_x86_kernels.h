/* quant_x86_kernels.h — the x86 kernel bodies, compiled once per x86 kernel set: quant_avx2.c (AVX2 + FMA +
 * F16C), quant_avx512.c (the same code with AVX-512 flags: EVEX encodings, 32 registers, 512-bit 4x4 float
 * tiles) and quant_avx512vnni.c (integer dots on VPDPBUSD / VPDPWSSD: 512-bit for the 32-element blocks
 * (tile32z) and Q4_K, the 256-bit AVX512VL form for the other K-quants). The including file defines
 * HT_X86_VNNI and HT_X86_AVX512 (0 or 1) and then defines its ht_kernel_set with x86_install(). Kernels
 * are written per quant_simd.h (always_inline bodies of a type id T and a column count NC; tiles
 * bit-identical to vec_dot).
 *
 * Integer parts (quant_ref.c's contract): every block's integer sum is exact. A byte vector of weights
 * (unsigned or signed) meets 32 activation bytes in dot_us / dot_ss, which leave in each int32 lane the sum
 * of 4 consecutive products: VPDPBUSD, or PMADDUBSW + PMADDWD on AVX2 (PMADDUBSW adds two u8*s8 products
 * into int16 and saturates, so unsigned operands stay <= 128; signed weights go through the sign trick
 * |w| * sign(a, w), which needs activations in [-127, 127] — every activation quantizer guarantees it).
 *  - 32-element blocks (Q4_0 ... IQ4_NL, MXFP4 x Q8_0 / Q8_1): groups of 8 blocks; the 8 lane vectors are reduced
 *    by a transposing add tree to one vector holding the 8 block sums isum_b, then per lane
 *    acc += (d_w * d_a) * (float)isum_b [+ m_w * s_a] — quant_ref.c's per-block float formula — so the
 *    float accumulation runs in 8 lanes; leftover blocks (n/32 % 8) are added one by one after the lanes.
 *    The VNNI set instead scales every int32 lane on its own, two blocks a 512-bit vector (tile32z).
 *  - 256-element super-blocks (K-quants, IQ4_XS, the low-bit i-quants, TQ2_0 x Q8_K): the sub-block scale
 *    multiplies the int16 pair sums (PMADDWD / VPDPWSSD), offsets of unsigned weights (Q3_K's 4, Q6_K's 32,
 *    TQ's 1) and the min terms come from the activation's bsums, and the float formula is evaluated in scalar, super-block after super-block, in
 *    quant_ref.c's order: these dot products are bit-identical to the scalar ones. The i-quants' one-token
 *    instance (tileK1) reduces and scales 8 super-blocks in one vector, then adds them in that same order;
 *    on AVX-512 their grid types put the signs on the activations by a masked subtract. Their prefill
 *    batches (8 tokens and more) take the panel GEMM of quant_x86_iqpanel.h, in every set.
 * Float weights (F32/F16/BF16 x F32): one FMA accumulator per output, reduced in a fixed order.
 * The dev box is a 2-core AMD EPYC with full-width AVX-512 (Zen 5 class: 2 zmm FMAs a cycle); the notes at
 * each kernel say what was measured there. Every weight row is prefetched 4 KB ahead (quant_simd.h).
 * Activation quantizers (Q8_0, Q8_1, Q8_K from_float) reproduce the scalar blocks exactly (roundf emulated
 * from truncation; nearest_int is the RNE of CVTPS2DQ). */
#include <immintrin.h>

#include "quant_simd.h"

#if !defined(HT_X86_VNNI) || !defined(HT_X86_AVX512)
#error "define HT_X86_VNNI and HT_X86_AVX512 before including quant_x86_kernels.h"
#endif

/* ======================= small helpers ======================= */

/* Keeps v in a register as one link of a chain of adds: GCC turns a token loop's running sums into a tree of
 * adds whose partial sums spill out of the 16 AVX2 registers (5-10% slower in each 8-row packed kernel; the
 * i-quant panel without VNNI stored every product to the stack: pp256 1.25-1.51x with it). */
#define HT_KEEP(v) __asm__("" : "+x"(v))

HT_AI __m256i ld256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
HT_AI __m128i ld128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }
HT_AI uint16_t ldh(const void *p) { uint16_t h; memcpy(&h, p, 2); return h; }
HT_AI float h2f(const void *p) { return _cvtsh_ss(ldh(p)); }

/* 8 halves at p, p + stride, ... as floats. */
HT_AI __m256 halves8(const uint8_t *p, size_t stride) {
    return _mm256_cvtph_ps(_mm_setr_epi16((short)ldh(p), (short)ldh(p + stride), (short)ldh(p + 2 * stride),
                                          (short)ldh(p + 3 * stride), (short)ldh(p + 4 * stride),
                                          (short)ldh(p + 5 * stride), (short)ldh(p + 6 * stride),
                                          (short)ldh(p + 7 * stride)));
}

#if HT_X86_AVX512
/* The halves at byte o of 16 rows (row[0..15] + o) as floats: 16 blocks' scales. */
HT_AI __m512 halves16(const uint8_t *const *row, size_t o) {
    return _mm512_cvtph_ps(_mm256_setr_epi16(
        (short)ldh(row[0] + o), (short)ldh(row[1] + o), (short)ldh(row[2] + o), (short)ldh(row[3] + o),
        (short)ldh(row[4] + o), (short)ldh(row[5] + o), (short)ldh(row[6] + o), (short)ldh(row[7] + o),
        (short)ldh(row[8] + o), (short)ldh(row[9] + o), (short)ldh(row[10] + o), (short)ldh(row[11] + o),
        (short)ldh(row[12] + o), (short)ldh(row[13] + o), (short)ldh(row[14] + o), (short)ldh(row[15] + o)));
}
#endif

HT_AI float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The horizontal sums of two vectors at once: *sa = sum(a), *sb = sum(b). */
HT_AI void hsum2_i32(__m256i a, __m256i b, int32_t *sa, int32_t *sb) {
    const __m256i h = _mm256_hadd_epi32(a, b);   /* a01 a23 b01 b23 | a45 a67 b45 b67 */
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    s = _mm_hadd_epi32(s, s);                     /* sum(a) sum(b) sum(a) sum(b) */
    *sa = _mm_cvtsi128_si32(s);
    *sb = _mm_extract_epi32(s, 1);
}

HT_AI int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* ======================= integer dot primitives ======================= */

/* acc + per int32 lane the sum of 4 products u*s, u unsigned (<= 128), s signed. */
HT_AI __m256i dot_us(__m256i acc, __m256i u, __m256i s) {
#if HT_X86_VNNI
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* Both signed: |x| * (y with x's sign). */
HT_AI __m256i dot_ss(__m256i acc, __m256i x, __m256i y) {
    return dot_us(acc, _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

/* Per lane the sum of 4 products (u - off) * s, for unsigned u <= 31 and off 8 or 16. */
HT_AI __m256i dot_us_off(__m256i u, __m256i s, int off) {
    const __m256i o = _mm256_set1_epi8((char)off);
#if HT_X86_VNNI
    const __m256i z = _mm256_setzero_si256();
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(z, u, s), _mm256_dpbusd_epi32(z, o, s));
#else
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(u, s), _mm256_maddubs_epi16(o, s));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
}

/* acc + per lane sc * (sum of 4 products u*s), sc16 holding one int16 scale per pair of int16 lanes. */
HT_AI __m256i dot_us_sc(__m256i acc, __m256i u, __m256i s, __m256i sc16) {
    const __m256i p = _mm256_maddubs_epi16(u, s);
#if HT_X86_VNNI
    return _mm256_dpwssd_epi32(acc, p, sc16);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, sc16));
#endif
}

HT_AI __m256i dot_ss_sc(__m256i acc, __m256i x, __m256i y, __m256i sc16) {
    return dot_us_sc(acc, _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x), sc16);
}

/* int16 element i of v (same in both 128-bit halves) broadcast: PSHUFB with bytes 2i, 2i+1. */
HT_AI __m256i bcast16(__m256i v, int i) { return _mm256_shuffle_epi8(v, _mm256_set1_epi16((short)(0x0100 + 0x0202 * i))); }

/* Low half: int16 element i of v, high half: element j (v's two 128-bit halves equal). */
HT_AI __m256i bcast16x2(__m256i v, int i, int j) {
    const __m256i idx = _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 + 0x0202 * j)),
                                         _mm_set1_epi16((short)(0x0100 + 0x0202 * i)));
    return _mm256_shuffle_epi8(v, idx);
}

HT_AI __m256i mask4(void) { return _mm256_set1_epi8(0x0F); }

/* 16 bytes of packed nibbles -> 32 bytes: the 16 low nibbles, then the 16 high ones (32-block order). */
HT_AI __m256i nibbles32(const uint8_t *qs) {
    /* broadcast load, then one variable shift (0 for the low half, 4 for the high half) and the mask */
    const __m256i x = _mm256_broadcastsi128_si256(ld128(qs));
    return _mm256_and_si256(_mm256_srlv_epi64(x, _mm256_setr_epi64x(0, 0, 4, 4)), mask4());
}

/* Bit j of 32 bits -> byte j = val when set, 0 when clear. */
HT_AI __m256i bits32(uint32_t bits, char val) {
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
    const __m256i bm = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i x = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), shuf), bm);
    return _mm256_and_si256(_mm256_cmpeq_epi8(x, bm), _mm256_set1_epi8(val));
}

/* Bytes of x with bit b set -> val, others 0. */
HT_AI __m256i bit_to(__m256i x, int b, char val) {
    const __m256i m = _mm256_set1_epi8((char)(1 << b));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(x, m), m), _mm256_set1_epi8(val));
}

HT_AI __m256i iq4nl_table(void) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ht_kvalues_iq4nl));
}

/* ======================= 32-element blocks x Q8_0 / Q8_1 ======================= */

/* The 32 weights of a block as bytes in element order: unsigned 0..15 / 0..31 for Q4_x / Q5_x (Q4_0, Q5_0
 * still offset by 8, 16), signed for Q8_0 and IQ4_NL. */
HT_AI __m256i w_decode(const int T, const uint8_t *wb) {
    switch (T) {
    case HT_Q4_0: return nibbles32(((const block_q4_0 *)wb)->qs);
    case HT_Q4_1: return nibbles32(((const block_q4_1 *)wb)->qs);
    case HT_Q5_0: {
        const block_q5_0 *b = (const block_q5_0 *)wb;
        uint32_t qh;
        memcpy(&qh, b->qh, 4);
        return _mm256_or_si256(nibbles32(b->qs), bits32(qh, 0x10));
    }
    case HT_Q5_1: {
        const block_q5_1 *b = (const block_q5_1 *)wb;
        uint32_t qh;
        memcpy(&qh, b->qh, 4);
        return _mm256_or_si256(nibbles32(b->qs), bits32(qh, 0x10));
    }
    case HT_Q8_0: return ld256(((const block_q8_0 *)wb)->qs);
    case HT_MXFP4: return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(ld128(ht_kvalues_mxfp4)),
                                              nibbles32(((const block_mxfp4 *)wb)->qs));
    default: return _mm256_shuffle_epi8(iq4nl_table(), nibbles32(((const block_iq4_nl *)wb)->qs));
    }
}

/* Lane partial sums of decoded weights q times the activation block at ab. */
HT_AI __m256i w_dot(const int T, __m256i q, const uint8_t *ab) {
    const __m256i a = ld256(ab + (uses_q8_1(T) ? offsetof(block_q8_1, qs) : offsetof(block_q8_0, qs)));
    switch (T) {
    case HT_Q4_0: return dot_us_off(q, a, 8);
    case HT_Q5_0: return dot_us_off(q, a, 16);
    case HT_Q8_0: case HT_IQ4_NL: case HT_MXFP4: return dot_ss(_mm256_setzero_si256(), q, a);
    default: return dot_us(_mm256_setzero_si256(), q, a);
    }
}

/* Q4_0 / Q5_0 store weights offset by 8 / 16: sum((u - off) * a) = sum(u * a) - off * sum(a), an exact
 * integer identity, so the offset term can come from the activations alone (see tile32). */
HT_AI int w_off(const int T) { return T == HT_Q4_0 ? 8 : T == HT_Q5_0 ? 16 : 0; }

/* The 8 lane vectors of blocks ib..ib+7 reduced to one vector of the 8 block sums (block order). */
HT_AI __m256i tree8(const __m256i *x) {
    const __m256i q0 = _mm256_hadd_epi32(_mm256_hadd_epi32(x[0], x[1]), _mm256_hadd_epi32(x[2], x[3]));
    const __m256i q1 = _mm256_hadd_epi32(_mm256_hadd_epi32(x[4], x[5]), _mm256_hadd_epi32(x[6], x[7]));
    /* low half: blocks' first 16 products, high half: last 16 */
    return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20), _mm256_permute2x128_si256(q0, q1, 0x31));
}

/* off * sum(activations) of the 8 blocks from ib (Q4_0 / Q5_0 only). */
HT_AI __m256i aoff8(const int T, const uint8_t *a, size_t ib) {
    const __m256i o = _mm256_set1_epi8((char)w_off(T));
    __m256i x[8];
    HT_UNROLL
    for (int k = 0; k < 8; k++) x[k] = dot_us(_mm256_setzero_si256(), o, ld256(a + (ib + k) * sizeof(block_q8_0) + offsetof(block_q8_0, qs)));
    return tree8(x);
}

/* The weight scales of 8 consecutive blocks. With AVX-512 and 18-byte blocks (Q4_0, IQ4_NL) the 8 halves lie
 * in the blocks' first 128 bytes at words 0, 9, ..., 63: two loads and one word permute instead of 8 inserts. */
HT_AI __m256 w_scales8(const int T, const uint8_t *wb) {
    if (T == HT_MXFP4) {   /* 8 E8M0 bytes: 2^(e - 128), ht_e8m0_half's bits (subnormal below e = 2) */
        const size_t S = sizeof(block_mxfp4);
        const __m256i e = _mm256_setr_epi32(wb[0], wb[S], wb[2 * S], wb[3 * S], wb[4 * S], wb[5 * S], wb[6 * S], wb[7 * S]);
        const __m256i norm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
        const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
        return _mm256_castsi256_ps(_mm256_blendv_epi8(norm, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
    }
#if HT_X86_AVX512
    if (w_size(T) == 18) {
        static const uint16_t idx[32] = {0, 9, 18, 27, 36, 45, 54, 63};
        const __m512i x = _mm512_permutex2var_epi16(_mm512_loadu_si512(wb), _mm512_loadu_si512(idx),
                                                    _mm512_loadu_si512(wb + 64));
        return _mm256_cvtph_ps(_mm512_castsi512_si128(x));
    }
#endif
    return halves8(wb, w_size(T));
}

/* 8 blocks from block ib, NC activation rows: acc[c] += per lane the float formula of its block. With aoff
 * (Q4_0 / Q5_0), the weights' offset is removed by subtracting aoff[c] (aoff8 of column c) from the sums;
 * with dap, dap[c] holds column c's 8 activation scales (else they are read from the blocks). */
HT_AI void group8(const int T, const int NC, const uint8_t *w, const uint8_t *const *a, size_t ib, __m256 *acc,
                  const __m256i *aoff, const __m256 *dap) {
    const size_t WS = w_size(T), AS = a_size(T);
    __m256i quad[4][2];
    HT_UNROLL
    for (int h = 0; h < 2; h++) {
        __m256i pair[4][2];
        HT_UNROLL
        for (int p = 0; p < 2; p++) {
            const size_t b = ib + 4 * (size_t)h + 2 * (size_t)p;
            const __m256i q0 = w_decode(T, w + b * WS), q1 = w_decode(T, w + (b + 1) * WS);
            HT_UNROLL
            for (int c = 0; c < NC; c++) {
                const __m256i x0 = aoff ? dot_us(_mm256_setzero_si256(), q0, ld256(a[c] + b * AS + offsetof(block_q8_0, qs)))
                                        : w_dot(T, q0, a[c] + b * AS);
                const __m256i x1 = aoff ? dot_us(_mm256_setzero_si256(), q1, ld256(a[c] + (b + 1) * AS + offsetof(block_q8_0, qs)))
                                        : w_dot(T, q1, a[c] + (b + 1) * AS);
                pair[c][p] = _mm256_hadd_epi32(x0, x1);
            }
        }
        HT_UNROLL
        for (int c = 0; c < NC; c++) quad[c][h] = _mm256_hadd_epi32(pair[c][0], pair[c][1]);
    }
    const __m256 dw = w_scales8(T, w + ib * WS);
    const __m256 mw = uses_q8_1(T) ? halves8(w + ib * WS + offsetof(block_q4_1, m), WS) : dw;
    HT_UNROLL
    for (int c = 0; c < NC; c++) {
        /* low half: blocks' first 16 products, high half: last 16 */
        __m256i isum = _mm256_add_epi32(_mm256_permute2x128_si256(quad[c][0], quad[c][1], 0x20),
                                        _mm256_permute2x128_si256(quad[c][0], quad[c][1], 0x31));
        if (aoff) isum = _mm256_sub_epi32(isum, aoff[c]);
        const __m256 da = dap ? dap[c] : halves8(a[c] + ib * AS, AS);
        __m256 t = _mm256_mul_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(isum));
        if (uses_q8_1(T)) t = _mm256_add_ps(t, _mm256_mul_ps(mw, halves8(a[c] + ib * AS + offsetof(block_q8_1, s), AS)));
        acc[c] = _mm256_add_ps(acc[c], t);
    }
}

/* One block's float term, for the blocks after the last full group. */
HT_AI float block1(const int T, const uint8_t *wb, const uint8_t *ab) {
    const int32_t isum = hsum_i32(w_dot(T, w_decode(T, wb), ab));
    float t = ((T == HT_MXFP4 ? ht_e8m0_half(wb[0]) : h2f(wb)) * h2f(ab)) * (float)isum;
    if (uses_q8_1(T)) t = t + h2f(wb + offsetof(block_q4_1, m)) * h2f(ab + offsetof(block_q8_1, s));
    return t;
}

/* nr weight rows (ws bytes apart, one after the other) x NC activation rows; each output gets exactly the
 * operations of the nr = NC = 1 instance, vec_dot. */
#define HT_PRE_GROUPS 64   /* tile32 precomputes per-activation terms for rows of up to 64 groups (16384) */

HT_AI void tile32(const int T, const int NC, int n, const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                  float *y, size_t ys) {
    const uint8_t *ac[4];
    HT_UNROLL
    for (int c = 0; c < NC; c++) ac[c] = a + (size_t)c * as;
    const size_t nb = (size_t)n / 32, ng = nb / 8 * 8;   /* blocks in full groups of 8 */
    /* A tile of several rows: what depends on the activations alone (their scales as floats, Q4_0 / Q5_0's
     * offset terms) is computed once for all rows. */
    __m256i aoff_buf[w_off(T) ? HT_PRE_GROUPS * NC : 1];
    __m256 da_buf[HT_PRE_GROUPS * NC];
    const bool pre = nr > 1 && ng / 8 <= HT_PRE_GROUPS;
    if (pre)
        for (size_t ib = 0; ib < ng; ib += 8) {
            HT_UNROLL
            for (int c = 0; c < NC; c++) {
                da_buf[ib / 8 * NC + c] = halves8(ac[c] + ib * a_size(T), a_size(T));
                if (w_off(T)) aoff_buf[ib / 8 * NC + c] = aoff8(T, ac[c], ib);
            }
        }
    for (int r = 0; r < nr; r++, w += ws, y++) {
        __m256 acc[4];
        HT_UNROLL
        for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_ps();
        if (pre)
            for (size_t ib = 0; ib < ng; ib += 8) {
                ht_prefetch(w + ib * w_size(T), 8 * w_size(T));
                group8(T, NC, w, ac, ib, acc, w_off(T) ? aoff_buf + ib / 8 * NC : NULL, da_buf + ib / 8 * NC);
            }
        else
            for (size_t ib = 0; ib < ng; ib += 8) {
                ht_prefetch(w + ib * w_size(T), 8 * w_size(T));
                group8(T, NC, w, ac, ib, acc, NULL, NULL);
            }
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            float s = hsum_ps(acc[c]);
            for (size_t b = ng; b < nb; b++) s += block1(T, w + b * w_size(T), ac[c] + b * a_size(T));
            y[(size_t)c * ys] = s;
        }
    }
}

/* ======================= super-blocks of 256 x Q8_K ======================= */

/* Q4_K / Q5_K: 8 six-bit scales (bytes 0..7) and mins (8..15) from the 12 packed bytes (ggml's layout).
 * The vector is built from registers: storing the words and reloading them as one vector would stall on
 * store forwarding every super-block. */
HT_AI __m128i scales_k4(const uint8_t *s12) {
    uint32_t u0, u1, u2;
    memcpy(&u0, s12, 4);
    memcpy(&u1, s12 + 4, 4);
    memcpy(&u2, s12 + 8, 4);
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    const uint32_t m47 = ((u2 >> 4) & k2) | (((u1 >> 6) & k3) << 4);
    const uint32_t sc47 = (u2 & k2) | (((u0 >> 6) & k3) << 4);
    return _mm_setr_epi32((int)(u0 & k1), (int)sc47, (int)(u1 & k1), (int)m47);
}

/* Q3_K: the 16 six-bit scales minus 32, as int8 (built from registers, as above). */
HT_AI __m128i scales_q3_K(const uint8_t *s12) {
    uint32_t u0, u1, tmp;
    memcpy(&u0, s12, 4);
    memcpy(&u1, s12 + 4, 4);
    memcpy(&tmp, s12 + 8, 4);
    const uint32_t k1 = 0x03030303, k2 = 0x0f0f0f0f;
    const uint32_t s0 = (u0 & k2) | ((tmp & k1) << 4), s1 = (u1 & k2) | (((tmp >> 2) & k1) << 4);
    const uint32_t s2 = ((u0 >> 4) & k2) | (((tmp >> 4) & k1) << 4), s3 = ((u1 >> 4) & k2) | (((tmp >> 6) & k1) << 4);
    return _mm_sub_epi8(_mm_setr_epi32((int)s0, (int)s1, (int)s2, (int)s3), _mm_set1_epi8(32));
}

/* IQ4_XS: the 8 six-bit scales minus 32, as int16: low nibbles from scales_l, high 2 bits from scales_h. */
HT_AI __m128i scales_iq4_xs(const block_iq4_xs *b) {
    uint32_t l4;
    memcpy(&l4, b->scales_l, 4);
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)l4), _mm_setr_epi32(0, 4, 8, 12)),
                                     _mm_set1_epi32(0xF));   /* nibbles 0..3 in dwords (as words 0, 2, 4, 6) */
    const __m128i lo2 = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32((int)l4), _mm_setr_epi32(16, 20, 24, 28)),
                                      _mm_set1_epi32(0xF));
    const __m128i nib = _mm_packus_epi32(lo, lo2);   /* int16: nibble ib of scales_l... in order 0..7 */
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(b->scales_h), _mm_setr_epi32(0, 2, 4, 6)),
                                     _mm_set1_epi32(3));
    const __m128i hi2 = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(b->scales_h), _mm_setr_epi32(8, 10, 12, 14)),
                                      _mm_set1_epi32(3));
    const __m128i h16 = _mm_slli_epi16(_mm_packus_epi32(hi, hi2), 4);
    return _mm_sub_epi16(_mm_or_si128(nib, h16), _mm_set1_epi16(32));
}

/* Lanes whose sum is Σ_j bsums[j] * s16[j] over the 16 bsums of a Q8_K block (s16: 16 int16). */
HT_AI __m256i bsums_madd(const block_q8_K *a, __m256i s16) { return _mm256_madd_epi16(ld256(a->bsums), s16); }

/* 16-element sub-blocks (Q2_K, Q3_K, Q6_K): sc = the 16 scales as int8; the chunk of elements 32k..32k+31
 * takes scale 2k on its low half and 2k + 1 on its high half. */
typedef struct { __m256i lo, hi; } scales16;

HT_AI scales16 scales16_make(__m128i sc8) {
    scales16 s;
    s.lo = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8));
    s.hi = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)));
    return s;
}

HT_AI __m256i scales16_chunk(scales16 s, int k) { return bcast16x2(k < 4 ? s.lo : s.hi, (2 * k) % 8, (2 * k + 1) % 8); }

#if HT_X86_VNNI
/* int16 scale i of sc (same in every 128-bit lane) in the low 256 bits, scale j in the high 256. */
HT_AI __m512i bcast16x2_512(__m512i sc, int i, int j) {
    const __m512i idx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)(0x0100 + 0x0202 * i))),
                                           _mm256_set1_epi16((short)(0x0100 + 0x0202 * j)), 1);
    return _mm512_shuffle_epi8(sc, idx);
}

/* Q4_K with 512-bit VPDPWSSD (VNNI set only; measured 1.13x the 256-bit kernel): 64 bytes of nibbles are two
 * 32-byte groups k, k + 1, whose low / high nibbles are sub-blocks 2k / 2k + 1; SHUF_I64X2 pairs them so that
 * each vector meets 64 consecutive activation bytes. Same integer sums as the 256-bit path. */
HT_AI void kblock_q4_K_zmm(const int NC, const block_q4_K *b, const block_q8_K *const *a, int32_t *isum,
                           int32_t *msum) {
    const __m128i sm = scales_k4(b->scales);
    const __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm));
    const __m256i mins = _mm256_cvtepu8_epi16(
        _mm_shuffle_epi8(sm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i acc[4];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_si512();
    HT_UNROLL
    for (int h = 0; h < 2; h++) {   /* sub-blocks 4h .. 4h + 3 */
        const __m512i x = _mm512_loadu_si512(b->qs + 64 * h);
        const __m512i lo = _mm512_and_si512(x, m4), hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
        const __m512i w0 = _mm512_shuffle_i64x2(lo, hi, 0x44), w1 = _mm512_shuffle_i64x2(lo, hi, 0xEE);
        const __m512i s0 = bcast16x2_512(sc, 4 * h, 4 * h + 1), s1 = bcast16x2_512(sc, 4 * h + 2, 4 * h + 3);
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            acc[c] = _mm512_dpwssd_epi32(acc[c], _mm512_maddubs_epi16(w0, _mm512_loadu_si512(a[c]->qs + 128 * h)), s0);
            acc[c] = _mm512_dpwssd_epi32(acc[c], _mm512_maddubs_epi16(w1, _mm512_loadu_si512(a[c]->qs + 128 * h + 64)), s1);
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) {
        const __m256i v = _mm256_add_epi32(_mm512_castsi512_si256(acc[c]), _mm512_extracti64x4_epi64(acc[c], 1));
        hsum2_i32(v, bsums_madd(a[c], mins), &isum[c], &msum[c]);
    }
}
#endif

/* Q4_K, Q5_K: sub-blocks of 32 (low / high nibbles of 32-byte groups, Q5_K: + 16 from qh), mins. */
HT_AI void kb_q4_K_q5_K(const int T, const int NC, const uint8_t *wb, const block_q8_K *const *a, int32_t *isum,
                     int32_t *msum) {
    __m256i acc[4];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_si256();
    const __m256i m4 = mask4();
    const uint8_t *qs = T == HT_Q4_K ? ((const block_q4_K *)wb)->qs : ((const block_q5_K *)wb)->qs;
    const __m128i sm = scales_k4(T == HT_Q4_K ? ((const block_q4_K *)wb)->scales : ((const block_q5_K *)wb)->scales);
    const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
    const __m256i mins = _mm256_cvtepu8_epi16(
        _mm_shuffle_epi8(sm, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15)));
    const __m256i qh = T == HT_Q5_K ? ld256(((const block_q5_K *)wb)->qh) : _mm256_setzero_si256();
    HT_UNROLL
    for (int k = 0; k < 4; k++) {
        const __m256i x = ld256(qs + 32 * k);
        __m256i lo = _mm256_and_si256(x, m4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
        if (T == HT_Q5_K) {
            lo = _mm256_or_si256(lo, bit_to(qh, 2 * k, 0x10));
            hi = _mm256_or_si256(hi, bit_to(qh, 2 * k + 1, 0x10));
        }
        const __m256i slo = bcast16(sc, 2 * k), shi = bcast16(sc, 2 * k + 1);
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            acc[c] = dot_us_sc(acc[c], lo, ld256(a[c]->qs + 64 * k), slo);
            acc[c] = dot_us_sc(acc[c], hi, ld256(a[c]->qs + 64 * k + 32), shi);
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) hsum2_i32(acc[c], bsums_madd(a[c], mins), &isum[c], &msum[c]);
}

/* Q6_K: 6-bit quants stored unsigned (offset 32, removed through the bsums), int8 scales per 16. */
HT_AI void kb_q6_K(const int NC, const uint8_t *wb, const block_q8_K *const *a, int32_t *isum, int32_t *msum) {
    __m256i acc[4];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_si256();
    const __m256i m4 = mask4();
    const block_q6_K *b = (const block_q6_K *)wb;
    const __m128i sc8 = ld128(b->scales);
    const scales16 s = scales16_make(sc8);
    const __m256i m2 = _mm256_set1_epi8(0x30);
    HT_UNROLL
    for (int h = 0; h < 2; h++) {
        const __m256i ql0 = ld256(b->ql + 64 * h), ql1 = ld256(b->ql + 64 * h + 32), qh = ld256(b->qh + 32 * h);
        __m256i q[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2));
        q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2));
        HT_UNROLL
        for (int g = 0; g < 4; g++) {
            const __m256i scv = scales16_chunk(s, 4 * h + g);
            HT_UNROLL
            for (int c = 0; c < NC; c++) acc[c] = dot_us_sc(acc[c], q[g], ld256(a[c]->qs + 128 * h + 32 * g), scv);
        }
    }
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    HT_UNROLL
    for (int c = 0; c < NC; c++) {
        int32_t off;
        hsum2_i32(acc[c], bsums_madd(a[c], sc16), &isum[c], &off);
        isum[c] -= 32 * off;
        msum[c] = 0;
    }
}

/* Q2_K (2 bits, 4-bit scale and min per 16) and Q3_K (+ a third bit from hmask, offset 4, 6-bit scales). */
HT_AI void kb_q2_K_q3_K(const int T, const int NC, const uint8_t *wb, const block_q8_K *const *a, int32_t *isum,
                     int32_t *msum) {
    __m256i acc[4];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_si256();
    const uint8_t *qs = T == HT_Q2_K ? ((const block_q2_K *)wb)->qs : ((const block_q3_K *)wb)->qs;
    __m128i sc8, mn8 = _mm_setzero_si128();
    if (T == HT_Q2_K) {
        const __m128i raw = ld128(((const block_q2_K *)wb)->scales);
        sc8 = _mm_and_si128(raw, _mm_set1_epi8(0x0F));
        mn8 = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F));
    } else {
        sc8 = scales_q3_K(((const block_q3_K *)wb)->scales);
    }
    const scales16 s = scales16_make(sc8);
    const __m256i hm = T == HT_Q3_K ? ld256(((const block_q3_K *)wb)->hmask) : _mm256_setzero_si256();
    const __m256i m3 = _mm256_set1_epi8(3);
    HT_UNROLL
    for (int h = 0; h < 2; h++) {
        const __m256i x = ld256(qs + 32 * h);
        HT_UNROLL
        for (int g = 0; g < 4; g++) {
            const int k = 4 * h + g;
            __m256i u = _mm256_and_si256(_mm256_srli_epi16(x, 2 * g), m3);
            if (T == HT_Q3_K) u = _mm256_or_si256(u, bit_to(hm, k, 4));
            const __m256i scv = scales16_chunk(s, k);
            HT_UNROLL
            for (int c = 0; c < NC; c++) acc[c] = dot_us_sc(acc[c], u, ld256(a[c]->qs + 32 * k), scv);
        }
    }
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8), mn16 = _mm256_cvtepi8_epi16(mn8);
    HT_UNROLL
    for (int c = 0; c < NC; c++) {
        int32_t other;   /* Q3_K: sum of scale * bsums (the offset 4), Q2_K: the min term */
        hsum2_i32(acc[c], bsums_madd(a[c], T == HT_Q3_K ? sc16 : mn16), &isum[c], &other);
        if (T == HT_Q3_K) isum[c] -= 4 * other;
        msum[c] = T == HT_Q2_K ? other : 0;
    }
}

/* IQ4_XS: IQ4_NL bodies of 32 with 6-bit signed scales. acc[c]: lanes summing to the super-block's isum. */
HT_AI void ka_iq4_xs(const int NC, const uint8_t *wb, const block_q8_K *const *a, __m256i *acc) {
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_si256();
    const __m256i m4 = mask4();
    const block_iq4_xs *b = (const block_iq4_xs *)wb;
    const __m256i sc = _mm256_broadcastsi128_si256(scales_iq4_xs(b));
    const __m256i tab = iq4nl_table();
    HT_UNROLL
    for (int p = 0; p < 4; p++) {
        const __m256i x = ld256(b->qs + 32 * p);
        const __m256i lo = _mm256_and_si256(x, m4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
        const __m256i q0 = _mm256_shuffle_epi8(tab, _mm256_permute2x128_si256(lo, hi, 0x20));
        const __m256i q1 = _mm256_shuffle_epi8(tab, _mm256_permute2x128_si256(lo, hi, 0x31));
        const __m256i s0 = bcast16(sc, 2 * p), s1 = bcast16(sc, 2 * p + 1);
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            acc[c] = dot_ss_sc(acc[c], q0, ld256(a[c]->qs + 64 * p), s0);
            acc[c] = dot_ss_sc(acc[c], q1, ld256(a[c]->qs + 64 * p + 32), s1);
        }
    }
}

/* ---- the low-bit i-quants and TQ2_0: one 32-element chunk at a time ----
 * A chunk is decoded to a byte vector and an int16 scale vector (scale of elements 0..15 in the low 128 bits,
 * 16..31 in the high), quant_ref.c's unpack in registers: the grid types give unsigned magnitudes (grid
 * entries gathered by index, <= 62) and a ±1 sign vector that goes onto the activations (PSIGNB), so the
 * products run on dot_us_sc (PMADDUBSW, then PMADDWD / VPDPWSSD by the scales); IQ1's values 8 * grid ± 1
 * (|q| <= 9) are signed and take dot_ss_sc; TQ1_0's and TQ2_0's are stored + 1 (0..2: TQ1_0's trits taken
 * out of base-3 bytes by multiplying) and the offset comes off through the bsums. Every integer sum is exact,
 * so isum equals the scalar one. */

/* Bit j of bits -> byte j = -1 when set, +1 when clear. */
HT_AI __m256i sign_pm1(uint32_t bits) { return _mm256_or_si256(bits32(bits, (char)0xFF), _mm256_set1_epi8(1)); }

/* int16 scale lo for elements 0..15, hi for 16..31. */
HT_AI __m256i sc_lohi(int lo, int hi) { return _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo)); }

/* Four 7-bit sign indices (ksigns64: 7 bits -> 8 sign bytes) -> the ±1 vector of 32 elements. */
HT_AI __m256i ksigns_pm1(unsigned i0, unsigned i1, unsigned i2, unsigned i3) {
    const __m256i m = _mm256_set_epi64x((long long)ht_ksigns64[i3], (long long)ht_ksigns64[i2], (long long)ht_ksigns64[i1],
                                        (long long)ht_ksigns64[i0]);
    return _mm256_or_si256(m, _mm256_set1_epi8(1));
}

HT_AI __m256i grid64x4(const uint64_t *g, unsigned i0, unsigned i1, unsigned i2, unsigned i3) {
    return _mm256_set_epi64x((long long)g[i3], (long long)g[i2], (long long)g[i1], (long long)g[i0]);
}

/* 8 entries of a 4-byte grid, indices from bytes (IQ3_XXS) or with a ninth bit from h (IQ3_S). */
HT_AI __m256i grid32x8(const uint32_t *g, const uint8_t *idx, int h) {
    const int b = h >= 0;
    return _mm256_setr_epi32((int)g[idx[0] | (b ? (h << 8 & 256) : 0)], (int)g[idx[1] | (b ? (h << 7 & 256) : 0)],
                             (int)g[idx[2] | (b ? (h << 6 & 256) : 0)], (int)g[idx[3] | (b ? (h << 5 & 256) : 0)],
                             (int)g[idx[4] | (b ? (h << 4 & 256) : 0)], (int)g[idx[5] | (b ? (h << 3 & 256) : 0)],
                             (int)g[idx[6] | (b ? (h << 2 & 256) : 0)], (int)g[idx[7] | (b ? (h << 1 & 256) : 0)]);
}

/* IQ1: ternary grid bytes g (-1, 0, 1) and per-byte shift signs dl (±1) -> 8 * g + dl. */
HT_AI __m256i iq1_values(__m256i g, __m256i dl) {
    return _mm256_add_epi8(_mm256_and_si256(_mm256_slli_epi16(g, 3), _mm256_set1_epi8((char)0xF8)), dl);
}

#if HT_X86_AVX512
/* Sign bytes (AVX-512 decode of the grid types): bit j of a chunk's 32-bit mask = element j negative, applied
 * to the activations by a masked subtract instead of PSIGNB by a ±1 vector from the ksigns table. */
/* Bytes holding 7 sign bits -> 8: bit 7 the parity of bits 0..6 (the grids' even sign count, ksigns'
 * rule). The 32-bit shifts carry the next byte's bits only into bits no later step reads. */
HT_AI __m256i even_signs(__m256i y) {
    __m256i p = _mm256_xor_si256(y, _mm256_srli_epi32(y, 4));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 2));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 1));
    return _mm256_or_si256(y, _mm256_slli_epi32(_mm256_and_si256(p, _mm256_set1_epi8(1)), 7));
}

/* The 8 chunks' sign masks of an IQ2_XXS, IQ3_XXS or IQ2_XS super-block (the types with 7-bit sign indices),
 * in one go; IQ2_S and IQ3_S store theirs as plain bits (iq_signmask). */
HT_AI void iq_signmasks(const int T, const uint8_t *wb, uint32_t *m) {
    __m256i y;
    if (T == HT_IQ2_XS) {   /* the top 7 bits of each of the 32 uint16 words, 4 words a chunk */
        y = _mm512_cvtepi16_epi8(_mm512_srli_epi16(_mm512_loadu_si512(((const block_iq2_xs *)wb)->qs), 9));
    } else {   /* four 7-bit fields in the low 28 bits of each chunk's word: one to a byte */
        const __m256i x = T == HT_IQ2_XXS ? _mm512_cvtepi64_epi32(_mm512_srli_epi64(_mm512_loadu_si512(((const block_iq2_xxs *)wb)->qs), 32))
                                          : ld256(((const block_iq3_xxs *)wb)->qs + QK_K / 4);
        const __m256i k = _mm256_set1_epi32(0x7F);
        y = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(x, k), _mm256_and_si256(_mm256_slli_epi32(x, 1), _mm256_slli_epi32(k, 8))),
                            _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi32(x, 2), _mm256_slli_epi32(k, 16)),
                                            _mm256_and_si256(_mm256_slli_epi32(x, 3), _mm256_slli_epi32(k, 24))));
    }
    _mm256_storeu_si256((__m256i *)m, even_signs(y));
}

HT_AI bool iq_sign_index(const int T) { return T == HT_IQ2_XXS || T == HT_IQ3_XXS || T == HT_IQ2_XS; }

/* Chunk ib's sign mask: from m (iq_signmasks) or as stored. */
HT_AI __mmask32 iq_signmask(const int T, const uint8_t *wb, const uint32_t *m, int ib) {
    uint32_t s;
    if (iq_sign_index(T)) return m[ib];
    memcpy(&s, T == HT_IQ2_S ? ((const block_iq2_s *)wb)->qs + QK_K / 8 + 4 * ib : ((const block_iq3_s *)wb)->signs + 4 * ib, 4);
    return s;
}
#endif

/* Chunk ib of a super-block: *q the bytes, *sg the ±1 signs for the activations (grid types), *sc the scales. */
HT_AI void iq_chunk(const int T, const uint8_t *wb, int ib, __m256i *q, __m256i *sg, __m256i *sc) {
    switch (T) {
    case HT_IQ2_XXS: {
        uint32_t w[2];
        memcpy(w, ((const block_iq2_xxs *)wb)->qs + 4 * ib, sizeof w);
        *q = grid64x4(ht_iq2xxs_grid, w[0] & 255, w[0] >> 8 & 255, w[0] >> 16 & 255, w[0] >> 24);
        *sg = ksigns_pm1(w[1] & 127, w[1] >> 7 & 127, w[1] >> 14 & 127, w[1] >> 21 & 127);
        *sc = _mm256_set1_epi16((short)(2 * (w[1] >> 28) + 1));
        break;
    }
    case HT_IQ2_XS: {
        const block_iq2_xs *b = (const block_iq2_xs *)wb;
        uint16_t w[4];
        memcpy(w, b->qs + 4 * ib, sizeof w);
        *q = grid64x4(ht_iq2xs_grid, w[0] & 511, w[1] & 511, w[2] & 511, w[3] & 511);
        *sg = ksigns_pm1(w[0] >> 9, w[1] >> 9, w[2] >> 9, w[3] >> 9);
        *sc = sc_lohi(2 * (b->scales[ib] & 15) + 1, 2 * (b->scales[ib] >> 4) + 1);
        break;
    }
    case HT_IQ2_S: {
        const block_iq2_s *b = (const block_iq2_s *)wb;
        const uint8_t *qs = b->qs + 4 * ib;
        const unsigned h = b->qh[ib];
        *q = grid64x4(ht_iq2s_grid, qs[0] | (h << 8 & 0x300), qs[1] | (h << 6 & 0x300), qs[2] | (h << 4 & 0x300),
                      qs[3] | (h << 2 & 0x300));
        uint32_t s;
        memcpy(&s, b->qs + QK_K / 8 + 4 * ib, 4);
        *sg = sign_pm1(s);
        *sc = sc_lohi(2 * (b->scales[ib] & 15) + 1, 2 * (b->scales[ib] >> 4) + 1);
        break;
    }
    case HT_IQ3_XXS: {
        const block_iq3_xxs *b = (const block_iq3_xxs *)wb;
        uint32_t w;
        memcpy(&w, b->qs + QK_K / 4 + 4 * ib, 4);
        *q = grid32x8(ht_iq3xxs_grid, b->qs + 8 * ib, -1);
        *sg = ksigns_pm1(w & 127, w >> 7 & 127, w >> 14 & 127, w >> 21 & 127);
        *sc = _mm256_set1_epi16((short)(2 * (w >> 28) + 1));
        break;
    }
    case HT_IQ3_S: {
        const block_iq3_s *b = (const block_iq3_s *)wb;
        *q = grid32x8(ht_iq3s_grid, b->qs + 8 * ib, b->qh[ib]);
        uint32_t s;
        memcpy(&s, b->signs + 4 * ib, 4);
        *sg = sign_pm1(s);
        *sc = _mm256_set1_epi16((short)(2 * (b->scales[ib / 2] >> 4 * (ib % 2) & 15) + 1));
        break;
    }
    case HT_IQ1_S: {
        const block_iq1_s *b = (const block_iq1_s *)wb;
        const unsigned h = b->qh[ib];
        const uint8_t *qs = b->qs + 4 * ib;
        const __m256i g = grid64x4(ht_iq1s_grid, qs[0] | (h & 7) << 8, qs[1] | (h >> 3 & 7) << 8,
                                   qs[2] | (h >> 6 & 7) << 8, qs[3] | (h >> 9 & 7) << 8);
        *q = iq1_values(g, _mm256_set1_epi8(h & 0x8000 ? -1 : 1));
        *sc = _mm256_set1_epi16((short)(2 * (h >> 12 & 7) + 1));
        break;
    }
    case HT_IQ1_M: {
        const block_iq1_m *b = (const block_iq1_m *)wb;
        const unsigned h0 = b->qh[2 * ib], h1 = b->qh[2 * ib + 1];
        const uint8_t *qs = b->qs + 4 * ib;
        const __m256i g = grid64x4(ht_iq1s_grid, qs[0] | (h0 & 7) << 8, qs[1] | (h0 >> 4 & 7) << 8,
                                   qs[2] | (h1 & 7) << 8, qs[3] | (h1 >> 4 & 7) << 8);
        const long long P = 0x0101010101010101LL, M = -1LL;   /* +1 / -1 in every byte */
        *q = iq1_values(g, _mm256_set_epi64x(h1 & 0x80 ? M : P, h1 & 0x08 ? M : P, h0 & 0x80 ? M : P, h0 & 0x08 ? M : P));
        uint16_t w;
        memcpy(&w, b->scales + 2 * (ib / 2), 2);
        const int s = w >> 6 * (ib % 2);
        *sc = sc_lohi(2 * (s & 7) + 1, 2 * (s >> 3 & 7) + 1);
        break;
    }
    case HT_TQ1_0: {
        const block_tq1_0 *b = (const block_tq1_0 *)wb;
        __m256i x, m;   /* the bytes holding each element's trit, and the power of 3 that brings it to the top */
        if (ib < 5) {   /* trit ib of qs[0..31] */
            x = ld256(b->qs);
            m = _mm256_set1_epi8((char)(ib == 0 ? 1 : ib == 1 ? 3 : ib == 2 ? 9 : ib == 3 ? 27 : 81));
        } else if (ib < 7) {   /* trits 2 (ib - 5), + 1 of qs[32..47] */
            x = _mm256_broadcastsi128_si256(ld128(b->qs + 32));
            m = ib == 5 ? _mm256_set_m128i(_mm_set1_epi8(3), _mm_set1_epi8(1)) : _mm256_set_m128i(_mm_set1_epi8(27), _mm_set1_epi8(9));
        } else {   /* trit 4 of qs[32..47], then trit k of qh[j] for element 240 + 4k + j */
            uint32_t h;
            memcpy(&h, b->qh, 4);
            const __m128i hx = _mm_shuffle_epi8(_mm_set1_epi32((int)h), _mm_setr_epi8(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3));
            x = _mm256_set_m128i(hx, ld128(b->qs + 32));
            m = _mm256_set_m128i(_mm_setr_epi8(1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27), _mm_set1_epi8(81));
        }
        /* trit = ((byte * 3^k mod 256) * 3) >> 8, in the even and the odd bytes' 16-bit lanes */
        const __m256i lo = _mm256_set1_epi16(0xFF);
        const __m256i qe = _mm256_and_si256(_mm256_mullo_epi16(_mm256_and_si256(x, lo), _mm256_and_si256(m, lo)), lo);
        const __m256i qo = _mm256_and_si256(_mm256_mullo_epi16(_mm256_srli_epi16(x, 8), _mm256_srli_epi16(m, 8)), lo);
        const __m256i three = _mm256_set1_epi16(3);
        *q = _mm256_or_si256(_mm256_srli_epi16(_mm256_mullo_epi16(qe, three), 8),
                             _mm256_slli_epi16(_mm256_srli_epi16(_mm256_mullo_epi16(qo, three), 8), 8));
        *sc = _mm256_set1_epi16(1);
        break;
    }
    default: {   /* TQ2_0: 2-bit values + 1, chunk ib = bits 2 (ib % 4) of the 32 bytes of half ib / 4 */
        const __m256i x = ld256(((const block_tq2_0 *)wb)->qs + 32 * (ib / 4));
        *q = _mm256_and_si256(_mm256_srli_epi16(x, 2 * (ib % 4)), _mm256_set1_epi8(3));
        *sc = _mm256_set1_epi16(1);
        break;
    }
    }
}

HT_AI bool iq_signed(const int T) { return T == HT_IQ1_S || T == HT_IQ1_M; }
HT_AI bool iq_ternary(const int T) { return T == HT_TQ1_0 || T == HT_TQ2_0; }   /* stored + 1 */
HT_AI bool iq_grid(const int T) { return !iq_signed(T) && !iq_ternary(T); }

/* One super-block of a low-bit i-quant or TQ type, NC activation rows: acc[c] lanes summing to the super-block's isum. */
HT_AI void ka_iq(const int T, const int NC, const uint8_t *wb, const block_q8_K *const *a, __m256i *acc) {
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_si256();
#if HT_X86_AVX512
    uint32_t sm[8];   /* decode only: the 4-token tile measured 10% slower with the masks */
    if (NC == 1 && iq_sign_index(T)) iq_signmasks(T, wb, sm);
#endif
    HT_UNROLL
    for (int ib = 0; ib < QK_K / 32; ib++) {
        __m256i q, sg = _mm256_setzero_si256(), sc;
        iq_chunk(T, wb, ib, &q, &sg, &sc);   /* with the masks, sg goes unused (and unloaded) */
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const __m256i av = ld256(a[c]->qs + 32 * ib);
            if (iq_signed(T)) acc[c] = dot_ss_sc(acc[c], q, av, sc);
#if HT_X86_AVX512
            else if (iq_grid(T) && NC == 1)
                acc[c] = dot_us_sc(acc[c], q, _mm256_mask_sub_epi8(av, iq_signmask(T, wb, sm, ib), _mm256_setzero_si256(), av), sc);
#endif
            else if (iq_grid(T)) acc[c] = dot_us_sc(acc[c], q, _mm256_sign_epi8(av, sg), sc);
            else acc[c] = dot_us_sc(acc[c], q, av, sc);
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++)   /* the + 1 of the ternary types' stored values: minus the activations' sum */
        if (iq_ternary(T)) acc[c] = _mm256_sub_epi32(acc[c], bsums_madd(a[c], _mm256_set1_epi16(1)));
}

/* The i-quants (IQ4_XS and the kb_iq types): their super-block sums come as lane accumulators (ka_*). */
HT_AI bool k_lanes(const int T) { return T != HT_Q2_K && T != HT_Q3_K && T != HT_Q4_K && T != HT_Q5_K && T != HT_Q6_K; }

HT_AI void k_acc(const int T, const int NC, const uint8_t *wb, const block_q8_K *const *a, __m256i *acc) {
    if (T == HT_IQ4_XS) ka_iq4_xs(NC, wb, a, acc);
    else ka_iq(T, NC, wb, a, acc);
}

/* One super-block, NC activation rows: isum[c] (scales folded in, offsets removed) and msum[c]. */
HT_AI void kblock(const int T, const int NC, const uint8_t *wb, const block_q8_K *const *a, int32_t *isum,
                  int32_t *msum) {
#if HT_X86_VNNI
    if (T == HT_Q4_K) {
        kblock_q4_K_zmm(NC, (const block_q4_K *)wb, a, isum, msum);
        return;
    }
#endif
    if (T == HT_Q4_K || T == HT_Q5_K) kb_q4_K_q5_K(T, NC, wb, a, isum, msum);
    else if (T == HT_Q6_K) kb_q6_K(NC, wb, a, isum, msum);
    else if (T == HT_Q2_K || T == HT_Q3_K) kb_q2_K_q3_K(T, NC, wb, a, isum, msum);
    else {
        __m256i acc[4];
        k_acc(T, NC, wb, a, acc);
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            isum[c] = hsum_i32(acc[c]);
            msum[c] = 0;
        }
    }
}

#include "quant_tile_k.h"
#include "quant_x86_iqpanel.h"

/* One activation row (decode) of the i-quants: 8 super-blocks at a time, their lane accumulators reduced by
 * one transposing add tree (tree8) instead of 8 horizontal sums, and the 8 products (d * d_a) * (float)isum
 * in one vector; the sum then adds them in super-block order, so every output is tileK's bit for bit. */
HT_AI void tileK1(const int T, int n, const uint8_t *w, size_t ws, int nr, const uint8_t *a, float *y) {
    const size_t ks = k_size(T);
    const block_q8_K *ab = (const block_q8_K *)a;
    const int nb = n / QK_K;
    for (int r = 0; r < nr; r++, w += ws) {
        float sum = 0;
        int i = 0;
        for (; i + 8 <= nb; i += 8) {
            __m256i acc[8];
#pragma GCC unroll 1
            for (int k = 0; k < 8; k++) {   /* not unrolled: 8 copies of a super-block's decode overflow the op cache */
                const uint8_t *wb = w + (size_t)(i + k) * ks;
                const block_q8_K *ak = ab + i + k;
                ht_prefetch(wb, ks);
                k_acc(T, 1, wb, &ak, &acc[k]);
            }
            const uint8_t *w0 = w + (size_t)i * ks;
            const __m256 d = T == HT_IQ1_M ? _mm256_setr_ps(k_d(T, w0), k_d(T, w0 + ks), k_d(T, w0 + 2 * ks), k_d(T, w0 + 3 * ks),
                                                            k_d(T, w0 + 4 * ks), k_d(T, w0 + 5 * ks), k_d(T, w0 + 6 * ks), k_d(T, w0 + 7 * ks))
                                           : halves8(w0 + k_d_off(T), ks);
            const __m256 da = _mm256_setr_ps(ab[i].d, ab[i + 1].d, ab[i + 2].d, ab[i + 3].d, ab[i + 4].d, ab[i + 5].d,
                                             ab[i + 6].d, ab[i + 7].d);
            float t[8];
            _mm256_storeu_ps(t, _mm256_mul_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(tree8(acc))));
            HT_UNROLL
            for (int k = 0; k < 8; k++) sum += t[k];
        }
        for (; i < nb; i++) {
            const uint8_t *wb = w + (size_t)i * ks;
            const block_q8_K *ak = ab + i;
            __m256i acc;
            ht_prefetch(wb, ks);
            k_acc(T, 1, wb, &ak, &acc);
            sum += (k_d(T, wb) * ak->d) * (float)hsum_i32(acc);
        }
        y[r] = ht_iq_post(T) != 1.0f ? ht_iq_post(T) * sum : sum;
    }
}

/* tileK with the i-quants' decode instances on tileK1. */
HT_AI void tileKd(const int T, const int NC, int n, const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                  float *y, size_t ys) {
    if (NC == 1 && k_lanes(T)) tileK1(T, n, w, ws, nr, a, y);
    else tileK(T, NC, n, w, ws, nr, a, as, y, ys);
}

/* ======================= float weights x F32 ======================= */

/* One vector accumulator per output (the tile's rows x columns: 16 of them at 4 x 4, 8 at 4 x 2), one FMA
 * per weight vector and activation vector, so each weight vector is converted once for NC tokens and each
 * activation vector loaded once for 4 rows: the loop is bound by the FMA ports, not by loads. 512-bit on the
 * AVX-512 sets (measured on the Zen 5 dev box: 4x4 tile of F16 weights in L2, 93 -> 169 GFLOP/s a core
 * against the previous 1-row tile with 4 ymm accumulators per output). The leftover n % FV_N elements are
 * added in scalar (mul, then add) after the vector sum, which reduces in a fixed order. */
#if HT_X86_AVX512
#define FV __m512
#define FV_N 16
#define fv_zero _mm512_setzero_ps
#define fv_fmadd _mm512_fmadd_ps
#define fv_loadu _mm512_loadu_ps
#define fv_set1 _mm512_set1_ps
#define fv_storeu _mm512_storeu_ps
HT_AI float fv_hsum(__m512 v) {
    return hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}
/* 16 halves (F16 or BF16) to floats. */
HT_AI __m512 fv_widen(const int T, __m256i h) {
    return T == HT_F16 ? _mm512_cvtph_ps(h) : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
HT_AI __m512 fv_loadw(const int T, const uint8_t *w, int i) {
    if (T == HT_F32) return _mm512_loadu_ps((const float *)w + i);
    return fv_widen(T, ld256((const uint16_t *)w + i));
}
/* fv_loadw of the first m (0..16) elements, the other lanes 0 (nothing past them is read). */
HT_AI __m512 fv_loadw_first(const int T, const uint8_t *w, int i, int m) {
    const __mmask16 k = (__mmask16)(m >= 16 ? 0xFFFF : (1u << (m > 0 ? m : 0)) - 1);
    if (T == HT_F32) return _mm512_maskz_loadu_ps(k, (const float *)w + i);
    return fv_widen(T, _mm256_maskz_loadu_epi16(k, (const uint16_t *)w + i));
}
/* The first m (0..16) floats of a, the other lanes 0. */
HT_AI __m512 fv_loadu_first(const float *a, int m) { return fv_loadw_first(HT_F32, (const uint8_t *)a, 0, m); }
#else
#define FV __m256
#define FV_N 8
#define fv_zero _mm256_setzero_ps
#define fv_fmadd _mm256_fmadd_ps
#define fv_loadu _mm256_loadu_ps
#define fv_set1 _mm256_set1_ps
#define fv_storeu _mm256_storeu_ps
HT_AI float fv_hsum(__m256 v) { return hsum_ps(v); }
HT_AI __m256 fv_loadw(const int T, const uint8_t *w, int i) {
    switch (T) {
    case HT_F32: return _mm256_loadu_ps((const float *)w + i);
    case HT_F16: return _mm256_cvtph_ps(ld128((const uint16_t *)w + i));
    default: return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ld128((const uint16_t *)w + i)), 16));
    }
}
/* fv_loadw of the first m (0..8) elements, the other lanes 0 (through a zeroed buffer: AVX2 has no masked
 * 16-bit load). */
HT_AI __m256 fv_loadw_first(const int T, const uint8_t *w, int i, int m) {
    const size_t e = T == HT_F32 ? 4 : 2;
    uint8_t b[32] = { 0 };
    memcpy(b, w + (size_t)i * e, (size_t)HT_MAX(0, HT_MIN(m, 8)) * e);
    return fv_loadw(T, b, 0);
}
/* The first m (0..8) floats of a, the other lanes 0. */
HT_AI __m256 fv_loadu_first(const float *a, int m) {
    return _mm256_maskload_ps(a, _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}
#endif

HT_AI size_t f_size(const int T) { return T == HT_F32 ? 4 : 2; }

HT_AI float f_scalar(const int T, const uint8_t *w, int i) {
    switch (T) {
    case HT_F32: return ((const float *)w)[i];
    case HT_F16: return _cvtsh_ss(((const uint16_t *)w)[i]);
    default: return bf16_to_f32(((const uint16_t *)w)[i]);
    }
}

/* The line HT_PREFETCH_AHEAD bytes past byte `at` of row r (rows ws bytes apart, len bytes long, read NR at a
 * time): past the row's end, the same distance into row r + NR, the row this lane of the tile reads next. Short
 * rows (softmax·V's V^T rows of a few thousand positions) otherwise began each tile with half a row cold. */
HT_AI const uint8_t *ahead(const uint8_t *w, size_t ws, int r, int NR, size_t at, size_t len) {
    const size_t off = at + HT_PREFETCH_AHEAD;
    return off < len ? w + (size_t)r * ws + off : w + (size_t)(r + NR) * ws + (off - len);
}

/* NR weight rows x NC activation columns. */
HT_AI void rowsF(const int T, const int NR, const int NC, int n, const uint8_t *w, size_t ws, const uint8_t *a,
                 size_t as, float *y, size_t ys) {
    const float *ac[4];
    FV acc[4][4];
    HT_UNROLL
    for (int c = 0; c < NC; c++) ac[c] = (const float *)(a + (size_t)c * as);
    HT_UNROLL
    for (int r = 0; r < NR; r++) {
        HT_UNROLL
        for (int c = 0; c < NC; c++) acc[r][c] = fv_zero();
    }
    const size_t len = (size_t)n * f_size(T);
    int i = 0;
    for (; i + FV_N <= n; i += FV_N) {
        FV wv[4];
        HT_UNROLL
        for (int r = 0; r < NR; r++) {
            if ((size_t)i * f_size(T) % 64 == 0) __builtin_prefetch(ahead(w, ws, r, NR, (size_t)i * f_size(T), len), 0, 3);
            wv[r] = fv_loadw(T, w + (size_t)r * ws, i);
        }
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const FV av = fv_loadu(ac[c] + i);
            HT_UNROLL
            for (int r = 0; r < NR; r++) acc[r][c] = fv_fmadd(wv[r], av, acc[r][c]);
        }
    }
    if (i < n) {   /* the last m < FV_N elements as one more vector step, the lanes past them zero */
        const int m = n - i;
        FV wv[4];
        HT_UNROLL
        for (int r = 0; r < NR; r++) wv[r] = fv_loadw_first(T, w + (size_t)r * ws, i, m);
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const FV av = fv_loadu_first(ac[c] + i, m);
            HT_UNROLL
            for (int r = 0; r < NR; r++) acc[r][c] = fv_fmadd(wv[r], av, acc[r][c]);
        }
    }
    HT_UNROLL
    for (int r = 0; r < NR; r++) {
        HT_UNROLL
        for (int c = 0; c < NC; c++) y[(size_t)c * ys + r] = fv_hsum(acc[r][c]);
    }
}

/* rowsF over up to TF_GROUPS groups of 4 rows (g groups), with the positions taken TF_CHUNK at a time for every
 * group in turn: the NC activation rows' chunk (NC x 2 KB) then stays in L1 for all the groups, where whole rows
 * of a few thousand (softmax·V over V^T rows: 4 heads x 16 KB of probabilities) are re-read from L2 for every 4
 * rows. Each group's accumulators are parked in `acc` between chunks (a store and a load: exact), so every
 * output takes the same FMAs in the same order as in rowsF, and the same tail and sum. */
#define TF_CHUNK 512
#define TF_GROUPS 4
HT_AI void rowsF_chunked(const int T, const int NC, int n, const uint8_t *w, size_t ws, int g, const uint8_t *a,
                         size_t as, float *y, size_t ys) {
    const float *ac[4];
    HT_UNROLL
    for (int c = 0; c < NC; c++) ac[c] = (const float *)(a + (size_t)c * as);
    FV acc[TF_GROUPS][4][4];
    for (int k = 0; k < g; k++) {
        HT_UNROLL
        for (int r = 0; r < 4; r++) {
            HT_UNROLL
            for (int c = 0; c < NC; c++) acc[k][r][c] = fv_zero();
        }
    }
    const size_t len = (size_t)n * f_size(T);
    const int nv = n / FV_N * FV_N;
    for (int i0 = 0; i0 < nv; i0 += TF_CHUNK) {
        const int i1 = HT_MIN(nv, i0 + TF_CHUNK);
        for (int k = 0; k < g; k++) {
            const uint8_t *wk = w + (size_t)(4 * k) * ws;
            FV s[4][4];
            HT_UNROLL
            for (int r = 0; r < 4; r++) {
                HT_UNROLL
                for (int c = 0; c < NC; c++) s[r][c] = acc[k][r][c];
            }
            for (int i = i0; i < i1; i += FV_N) {
                FV wv[4];
                HT_UNROLL
                for (int r = 0; r < 4; r++) {
                    if ((size_t)i * f_size(T) % 64 == 0)
                        __builtin_prefetch(ahead(w, ws, 4 * k + r, 4 * g, (size_t)i * f_size(T), len), 0, 3);
                    wv[r] = fv_loadw(T, wk + (size_t)r * ws, i);
                }
                HT_UNROLL
                for (int c = 0; c < NC; c++) {
                    const FV av = fv_loadu(ac[c] + i);
                    HT_UNROLL
                    for (int r = 0; r < 4; r++) s[r][c] = fv_fmadd(wv[r], av, s[r][c]);
                }
            }
            HT_UNROLL
            for (int r = 0; r < 4; r++) {
                HT_UNROLL
                for (int c = 0; c < NC; c++) acc[k][r][c] = s[r][c];
            }
        }
    }
    for (int k = 0; k < g; k++) {
        if (nv < n) {   /* the last m < FV_N elements as one more vector step, the lanes past them zero */
            const int m = n - nv;
            FV wv[4];
            HT_UNROLL
            for (int r = 0; r < 4; r++) wv[r] = fv_loadw_first(T, w + (size_t)(4 * k + r) * ws, nv, m);
            HT_UNROLL
            for (int c = 0; c < NC; c++) {
                const FV av = fv_loadu_first(ac[c] + nv, m);
                HT_UNROLL
                for (int r = 0; r < 4; r++) acc[k][r][c] = fv_fmadd(wv[r], av, acc[k][r][c]);
            }
        }
        HT_UNROLL
        for (int r = 0; r < 4; r++) {
            HT_UNROLL
            for (int c = 0; c < NC; c++) y[(size_t)c * ys + 4 * k + r] = fv_hsum(acc[k][r][c]);
        }
    }
}

/* Rows by 4 (long rows of halves: up to TF_GROUPS x 4 at a time, chunked; F32 rows measured no faster so), then
 * one at a time. */
HT_AI void tileF(const int T, const int NC, int n, const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                 float *y, size_t ys) {
    int r = 0;
    if (T != HT_F32 && NC > 1 && n > TF_CHUNK)
        for (int g; (g = HT_MIN(TF_GROUPS, (nr - r) / 4)) > 1; r += 4 * g)
            rowsF_chunked(T, NC, n, w + (size_t)r * ws, ws, g, a, as, y + r, ys);
    if (NC > 1)
        for (; r + 4 <= nr; r += 4) rowsF(T, 4, NC, n, w + (size_t)r * ws, ws, a, as, y + r, ys);
    for (; r < nr; r++) rowsF(T, 1, NC, n, w + (size_t)r * ws, ws, a, as, y + r, ys);
}

/* Transposed products (ht_dot_t_fn): blocks of DT_V vectors of positions times NC columns, an accumulator
 * per vector and column (16 of the 32 AVX-512 registers, 8 of AVX2's 16); row d of the block is loaded (and
 * widened) once for all columns. The last, partial block reads each row with masked loads (AVX-512) or
 * through a zeroed buffer (AVX2), the lanes past it zero: every output takes the same instructions. A short
 * context's scores are all such a block: the buffer's copy and reload (a failed store forward per row) took
 * half of this kernel's time in qwen3-0.6b's decode. */
#define DT_V (HT_X86_AVX512 ? 4 : 2)
HT_AI void dot_t_block(const int T, const int NC, int k, const uint8_t *w, size_t wsb, int m, const float *a, size_t as,
                       float *y, size_t ys) {
    FV acc[4][DT_V];
    HT_UNROLL
    for (int c = 0; c < NC; c++) {
        HT_UNROLL
        for (int v = 0; v < DT_V; v++) acc[c][v] = fv_zero();
    }
#if !HT_X86_AVX512
    uint8_t part[DT_V * FV_N * 4];
    if (m < DT_V * FV_N) memset(part, 0, sizeof part);   /* only the first m elements are ever written */
#endif
    for (int d = 0; d < k; d++) {
        const uint8_t *row = w + (size_t)d * wsb;
        ht_prefetch(row, (size_t)m * f_size(T));
        FV wv[DT_V];
#if HT_X86_AVX512
        if (m < DT_V * FV_N) {
            HT_UNROLL
            for (int v = 0; v < DT_V; v++) wv[v] = fv_loadw_first(T, row, v * FV_N, m - v * FV_N);
        } else {
            HT_UNROLL
            for (int v = 0; v < DT_V; v++) wv[v] = fv_loadw(T, row, v * FV_N);
        }
#else
        if (m < DT_V * FV_N) {
            memcpy(part, row, (size_t)m * f_size(T));
            row = part;
        }
        HT_UNROLL
        for (int v = 0; v < DT_V; v++) wv[v] = fv_loadw(T, row, v * FV_N);
#endif
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const FV ad = fv_set1(a[(size_t)c * as + (size_t)d]);
            HT_UNROLL
            for (int v = 0; v < DT_V; v++) acc[c][v] = fv_fmadd(wv[v], ad, acc[c][v]);
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) {
        float *yc = y + (size_t)c * ys;
        if (m == DT_V * FV_N) {
            HT_UNROLL
            for (int v = 0; v < DT_V; v++) fv_storeu(yc + v * FV_N, acc[c][v]);
        } else {
            float o[DT_V * FV_N];
            HT_UNROLL
            for (int v = 0; v < DT_V; v++) fv_storeu(o + v * FV_N, acc[c][v]);
            memcpy(yc, o, (size_t)m * sizeof(float));
        }
    }
}

HT_AI void dot_t_x86(const int T, int k, const void *w, size_t ws, int n, const float *a, size_t as, int nc, float *y,
                     size_t ys) {
    const size_t wsb = ws * f_size(T);
    for (int t0 = 0; t0 < n; t0 += DT_V * FV_N) {
        const uint8_t *wb = (const uint8_t *)w + (size_t)t0 * f_size(T);
        const int m = HT_MIN(DT_V * FV_N, n - t0);
        for (int c = 0; c < nc; c += 4) {
            const float *ac = a + (size_t)c * as;
            float *yc = y + (size_t)c * ys + t0;
            switch (HT_MIN(4, nc - c)) {
            case 4: dot_t_block(T, 4, k, wb, wsb, m, ac, as, yc, ys); break;
            case 3: dot_t_block(T, 3, k, wb, wsb, m, ac, as, yc, ys); break;
            case 2: dot_t_block(T, 2, k, wb, wsb, m, ac, as, yc, ys); break;
            default: dot_t_block(T, 1, k, wb, wsb, m, ac, as, yc, ys); break;
            }
        }
    }
}
static void dot_t_f32(int k, const void *w, size_t ws, int n, const float *a, size_t as, int nc, float *y, size_t ys) {
    dot_t_x86(HT_F32, k, w, ws, n, a, as, nc, y, ys);
}
static void dot_t_f16(int k, const void *w, size_t ws, int n, const float *a, size_t as, int nc, float *y, size_t ys) {
    dot_t_x86(HT_F16, k, w, ws, n, a, as, nc, y, ys);
}

/* ======================= activation quantizers ======================= */

HT_AI __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

HT_AI float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* roundf (half away from zero): trunc, plus sign(t) when the dropped fraction (exact) is >= 0.5. */
HT_AI __m256i roundf_epi32(__m256 t) {
    const __m256 r = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = abs_ps(_mm256_sub_ps(t, r));
    const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(t, _mm256_set1_ps(-0.0f)));
    const __m256 adj = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one);
    return _mm256_cvttps_epi32(_mm256_add_ps(r, adj));
}

/* 32 int32 (4 vectors of 8, in order) -> 32 int8 with saturation, in order. */
HT_AI __m256i pack32(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* One Q8_0 / Q8_1 block: d = amax / 127 (returned), q = roundf(x / d); *sum = sum(q). */
HT_AI float q8_block(const float *x, ht_half *dh, int8_t *qs, int *sum) {
    __m256 v[4], amax = _mm256_setzero_ps();
    HT_UNROLL
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(amax, abs_ps(v[k]));
    }
    const float d = hmax_ps(amax) / ((1 << 7) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    *dh = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    __m256i q[4];
    HT_UNROLL
    for (int k = 0; k < 4; k++) q[k] = roundf_epi32(_mm256_mul_ps(v[k], _mm256_set1_ps(id)));
    _mm256_storeu_si256((__m256i *)qs, pack32(q[0], q[1], q[2], q[3]));
    *sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    return d;
}

/* F16 from floats with F16C: round to nearest even, as the reference (the tail too: one instruction family). */
static void f16_from_float(const float *x, void *vy, int64_t n) {
    uint16_t *h = vy;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) h[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

static void q8_0_from_float(const float *x, void *vy, int64_t n) {
    block_q8_0 *y = vy;
    int sum;
    for (int64_t i = 0; i < n / QK8_0; i++) q8_block(x + i * QK8_0, &y[i].d, y[i].qs, &sum);
}

/* As ggml: s = fp16(sum(q) * d) with the unrounded float d. */
static void q8_1_from_float(const float *x, void *vy, int64_t n) {
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        int sum;
        const float d = q8_block(x + i * QK8_1, &y[i].d, y[i].qs, &sum);
        y[i].s = _cvtss_sh((float)sum * d, _MM_FROUND_TO_NEAREST_INT);
    }
}

/* ggml's Q8_K: max = the first element of largest magnitude, iscale = -127 / max,
 * q = min(127, nearest_int(iscale * x)), bsums = sums of 16. */
static void q8_K_from_float(const float *x, void *vy, int64_t n) {
    block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m256 am = _mm256_setzero_ps();
        HT_UNROLL
        for (int k = 0; k < QK_K / 8; k++) am = _mm256_max_ps(am, abs_ps(_mm256_loadu_ps(x + 8 * k)));
        const float amax = hmax_ps(am);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int first = 0;
        HT_UNROLL
        for (int k = 0; k < QK_K / 8; k++) {
            const int m = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + 8 * k)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (m) {
                first = 8 * k + __builtin_ctz((unsigned)m);
                break;
            }
        }
        const float iscale = -127.f / x[first];
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i q127 = _mm256_set1_epi32(127);
        HT_UNROLL
        for (int k = 0; k < QK_K / 32; k++) {
            __m256i q[4];
            HT_UNROLL
            for (int j = 0; j < 4; j++)
                q[j] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + 32 * k + 8 * j))), q127);
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * k), pack32(q[0], q[1], q[2], q[3]));
        }
        HT_UNROLL
        for (int j = 0; j < QK_K / 16; j++) {
            const __m256i s16 = _mm256_cvtepi8_epi16(ld128(y[i].qs + 16 * j));
            y[i].bsums[j] = (int16_t)hsum_i32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
        }
        y[i].d = 1 / iscale;
    }
}

/* ======================= 32-element blocks, 512-bit (VNNI set) ======================= */

#if HT_X86_VNNI
/* Two blocks a vector: one VPDPBUSD leaves 8 int32 lanes per block (4 products a lane), and instead of
 * reducing them to a block sum (tile32's add tree), every lane is converted and scaled on its own:
 * acc += float(lane) * (d_w * d_a), plus m_w * s_a in the first lane of each block for Q4_1 / Q5_1. The
 * unsigned operand of VPDPBUSD is the weights as stored (IQ4_NL's, MXFP4's table values + 128), an offset
 * (Q4_0 8, Q5_0 16, IQ4_NL and MXFP4 128) coming off the lanes as off * (sum of the lane's 4 activations); for Q8_0's signed
 * weights it is the activations + 128, one VPDPBUSD of the weights per pair taking 128 * (sum of the lane's weights) off
 * again (measured: the cheaper of the two ways for each). Integer lanes exact either way. What depends on
 * the activations alone (their bytes side by side, offset terms, the scales as lane vectors) is prepared
 * once per segment of Z_SEG block pairs for up to Z_ROWS rows. Per output the lanes add their terms in block order and are reduced in a fixed order, the
 * odd last block (n/32 odd) added with block1 after them, so a tile output equals vec_dot's. */
#define Z_SEG(NC) (128 / (NC))   /* block pairs prepared at a time: a whole row of up to 8192 in decode */
#define Z_ROWS 32   /* rows sharing one preparation: their accumulators wait in 8 KB between segments */

typedef struct { __m512i a, no; __m512 da, sa; } zact;   /* one column's block pair, prepared */

HT_AI int z_off(const int T) { return T == HT_Q4_0 ? 8 : T == HT_Q5_0 ? 16 : T == HT_IQ4_NL || T == HT_MXFP4 ? 128 : 0; }

HT_AI size_t z_qs(const int T) {   /* offset of the weight bytes in a block */
    switch (T) {
    case HT_Q4_1: return offsetof(block_q4_1, qs);
    case HT_Q5_0: return offsetof(block_q5_0, qs);
    case HT_Q5_1: return offsetof(block_q5_1, qs);
    case HT_MXFP4: return offsetof(block_mxfp4, qs);
    default: return 2;   /* Q4_0, Q8_0, IQ4_NL: after d */
    }
}

HT_AI float z_hsum(__m512 v) {
    return hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

/* Halves at p0 and p1 as 8 + 8 float lanes. */
HT_AI __m512 z_halves2(const uint8_t *p0, const uint8_t *p1) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)ldh(p0))),
                                                   _mm_set1_epi16((short)ldh(p1)), 1));
}

/* The weight scales of blocks wb and wb + WS as 8 + 8 float lanes (halves, or MXFP4's E8M0 bytes). */
HT_AI __m512 z_wscales2(const int T, const uint8_t *wb) {
    const size_t WS = w_size(T);
    if (T == HT_MXFP4)
        return _mm512_insertf32x8(_mm512_set1_ps(ht_e8m0_half(wb[0])), _mm256_set1_ps(ht_e8m0_half(wb[WS])), 1);
    return z_halves2(wb, wb + WS);
}

/* The 64 weights of blocks wb and wb + WS in element order: signed bytes for Q8_0, else unsigned (Q4_0,
 * Q5_0 and IQ4_NL still offset by 8, 16, 128). */
HT_AI bool z_signed(const int T) { return T == HT_Q8_0; }

HT_AI __m512i z_decode(const int T, const uint8_t *wb) {
    const size_t WS = w_size(T), q = z_qs(T);
    if (T == HT_Q8_0) return _mm512_inserti64x4(_mm512_castsi256_si512(ld256(wb + q)), ld256(wb + WS + q), 1);
    const __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(ld128(wb + q))),
                                         _mm256_broadcastsi128_si256(ld128(wb + WS + q)), 1);
    __m512i u = _mm512_and_si512(_mm512_srlv_epi64(x, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0F));
    if (T == HT_IQ4_NL || T == HT_MXFP4)   /* the table's values + 128 */
        return _mm512_shuffle_epi8(_mm512_xor_si512(_mm512_broadcast_i32x4(ld128(T == HT_MXFP4 ? ht_kvalues_mxfp4 : ht_kvalues_iq4nl)),
                                                    _mm512_set1_epi8((char)0x80)), u);
    if (T == HT_Q5_0 || T == HT_Q5_1) {
        const size_t h = T == HT_Q5_0 ? offsetof(block_q5_0, qh) : offsetof(block_q5_1, qh);
        uint32_t h0, h1;
        memcpy(&h0, wb + h, 4);
        memcpy(&h1, wb + WS + h, 4);
        u = _mm512_mask_blend_epi8((__mmask64)h0 | (__mmask64)h1 << 32, u, _mm512_or_si512(u, _mm512_set1_epi8(0x10)));
    }
    return u;
}

/* One column's block pair from ab (the first block's activations). */
HT_AI void z_prep(const int T, const uint8_t *ab, zact *z) {
    const size_t AS = a_size(T), q = uses_q8_1(T) ? offsetof(block_q8_1, qs) : offsetof(block_q8_0, qs);
    const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(ld256(ab + q)), ld256(ab + AS + q), 1);
    const __m512i zero = _mm512_setzero_si512();
    z->a = z_signed(T) ? _mm512_xor_si512(a, _mm512_set1_epi8((char)0x80)) : a;   /* a + 128 (unsigned) */
    z->no = z_off(T) ? _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8((char)z_off(T)), a)) : zero;
    z->da = z_halves2(ab, ab + AS);
    z->sa = _mm512_setzero_ps();
    if (uses_q8_1(T)) {
        const size_t s = offsetof(block_q8_1, s);
        z->sa = _mm512_mask_broadcastss_ps(_mm512_maskz_broadcastss_ps(0x0001, _mm_set_ss(h2f(ab + s))), 0x0100,
                                           _mm_set_ss(h2f(ab + AS + s)));
    }
}

/* One weight block pair (wb; scales dw, mins mw as lane vectors) into NC accumulators; zc: column 0's prepared
 * pair, the next column's zs further. */
HT_AI void z_pair(const int T, const int NC, const uint8_t *wb, __m512 dw, __m512 mw, const zact *zc, int zs,
                  __m512 *acc) {
    const __m512i w = z_decode(T, wb), zero = _mm512_setzero_si512();
    /* signed weights: sum (a + 128) * w - 128 * sum w = sum a * w, per lane, exactly */
    const __m512i corr = z_signed(T) ? _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8((char)0x80), w)) : zero;
    HT_UNROLL
    for (int c = 0; c < NC; c++) {
        const zact *z = zc + (size_t)c * zs;
        const __m512i i = z_signed(T) ? _mm512_dpbusd_epi32(corr, z->a, w)
                                      : _mm512_dpbusd_epi32(z_off(T) ? z->no : zero, w, z->a);
        const __m512 f = _mm512_cvtepi32_ps(i);
        acc[c] = _mm512_fmadd_ps(f, _mm512_mul_ps(dw, z->da), acc[c]);
        if (uses_q8_1(T)) acc[c] = _mm512_fmadd_ps(mw, z->sa, acc[c]);
    }
}

HT_AI void tile32z(const int T, const int NC, int n, const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                   float *y, size_t ys) {
    const size_t WS = w_size(T), AS = a_size(T);
    const int nb = n / 32, np = nb / 2;
    const uint8_t *ac[4];
    HT_UNROLL
    for (int c = 0; c < NC; c++) ac[c] = a + (size_t)c * as;
    zact z[NC][Z_SEG(NC)];
    __m512 wait[HT_MIN(nr, Z_ROWS)][NC];
    for (int r0 = 0; r0 < nr; r0 += Z_ROWS) {
        const int nrb = HT_MIN(Z_ROWS, nr - r0);
        int p0 = 0;
        do {
            const int m = HT_MIN(Z_SEG(NC), np - p0);
            const bool last = p0 + Z_SEG(NC) >= np;
            HT_UNROLL
            for (int c = 0; c < NC; c++)
                for (int p = 0; p < m; p++) z_prep(T, ac[c] + (size_t)2 * (p0 + p) * AS, &z[c][p]);
            for (int r = 0; r < nrb; r++) {
                const uint8_t *wr = w + (size_t)(r0 + r) * ws;
                __m512 acc[4];
                HT_UNROLL
                for (int c = 0; c < NC; c++) acc[c] = p0 ? wait[r][c] : _mm512_setzero_ps();
                for (int p = 0; p < m;) {
                    const uint8_t *wb = wr + (size_t)2 * (p0 + p) * WS;
                    ht_prefetch(wb, 8 * WS);
                    if (p + 4 <= m) {   /* 4 pairs: their 8 scales in one go, spread to pair vectors */
                        const __m512 dw8 = _mm512_castps256_ps512(w_scales8(T, wb));
                        const __m512 mw8 = uses_q8_1(T) ? _mm512_castps256_ps512(halves8(wb + offsetof(block_q4_1, m), WS)) : dw8;
                        HT_UNROLL
                        for (int k = 0; k < 4; k++) {
                            const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi32(2 * k), _mm256_set1_epi32(2 * k + 1), 1);
                            z_pair(T, NC, wb + (size_t)2 * k * WS, _mm512_permutexvar_ps(idx, dw8),
                                   _mm512_permutexvar_ps(idx, mw8), &z[0][p + k], Z_SEG(NC), acc);
                        }
                        p += 4;
                    } else {
                        const __m512 dw = z_wscales2(T, wb);
                        const __m512 mw = uses_q8_1(T) ? z_halves2(wb + offsetof(block_q4_1, m), wb + WS + offsetof(block_q4_1, m)) : dw;
                        z_pair(T, NC, wb, dw, mw, &z[0][p], Z_SEG(NC), acc);
                        p++;
                    }
                }
                HT_UNROLL
                for (int c = 0; c < NC; c++) {
                    if (!last) {
                        wait[r][c] = acc[c];
                        continue;
                    }
                    float s = z_hsum(acc[c]);
                    for (int b = 2 * np; b < nb; b++) s += block1(T, wr + (size_t)b * WS, ac[c] + (size_t)b * AS);
                    y[(size_t)c * ys + (size_t)(r0 + r)] = s;
                }
            }
            p0 += Z_SEG(NC);
        } while (p0 < np);
    }
}
#define TILE32 tile32z
#else
#define TILE32 tile32
#endif

/* ======================= attention over a Q8_0 row cache ======================= */

/* Scores (ht_kq_fn): 8 rows at a time, so that a score's lane sums are reduced together with 7 others (tree8)
 * instead of by a horizontal sum of its own; per row, the blocks' float terms are then added in block order,
 * (dk * dq) * isum, as the reference vec_dot adds them (the integer sums are exact): bit-identical to it. Rows
 * past nr repeat the last one, and their scores are dropped. */
HT_AI void kq_q8_0_cols(const int NC, int n, const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                        float *y, size_t ys) {
    const size_t WS = sizeof(block_q8_0), Q = offsetof(block_q8_0, qs);
    const int nb = n / QK8_0;
    for (int r0 = 0; r0 < nr; r0 += 8) {
        const uint8_t *row[8];
        HT_UNROLL
        for (int r = 0; r < 8; r++) row[r] = w + (size_t)HT_MIN(r0 + r, nr - 1) * ws;
        __m256 s[4];
        HT_UNROLL
        for (int c = 0; c < NC; c++) s[c] = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const size_t o = (size_t)b * WS;
            __m256i q[8], u[8];
            HT_UNROLL
            for (int r = 0; r < 8; r++) q[r] = ld256(row[r] + o + Q), u[r] = _mm256_sign_epi8(q[r], q[r]);
            const __m256 dk = _mm256_cvtph_ps(_mm_setr_epi16((short)ldh(row[0] + o), (short)ldh(row[1] + o),
                                                             (short)ldh(row[2] + o), (short)ldh(row[3] + o),
                                                             (short)ldh(row[4] + o), (short)ldh(row[5] + o),
                                                             (short)ldh(row[6] + o), (short)ldh(row[7] + o)));
            HT_UNROLL
            for (int c = 0; c < NC; c++) {
                const uint8_t *ab = a + (size_t)c * as + o;
                const __m256i x = ld256(ab + Q);
                __m256i t[8];
                HT_UNROLL
                for (int r = 0; r < 8; r++) t[r] = dot_us(_mm256_setzero_si256(), u[r], _mm256_sign_epi8(x, q[r]));
                const __m256 f = _mm256_mul_ps(_mm256_mul_ps(dk, _mm256_set1_ps(h2f(ab))), _mm256_cvtepi32_ps(tree8(t)));
                s[c] = _mm256_add_ps(s[c], f);
            }
        }
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            float *yc = y + (size_t)c * ys + (size_t)r0;
            if (r0 + 8 <= nr) {
                _mm256_storeu_ps(yc, s[c]);
            } else {
                float tmp[8];
                _mm256_storeu_ps(tmp, s[c]);
                memcpy(yc, tmp, (size_t)(nr - r0) * sizeof(float));
            }
        }
    }
}

#if HT_X86_VNNI && HT_X86_AVX512
/* The VNNI set's scores: 16 positions at a time, their rows' int8 values turned by a 16 x 16 dword transpose into
 * 16 vectors whose lane r holds 4 bytes of position r (one vector per 4 dims of a pair of blocks), made unsigned
 * (k + 128) once for all the columns; each column then adds 512-bit VPDPBUSD of those against its query dword
 * broadcast, 8 of them per block, and the lane sums are already the positions' block sums: no reduction.
 * sum (k + 128) * q = sum k * q + 128 * sum q, so subtracting the query block's 128 * sum (once per call) leaves
 * the exact isum, and each block's float term (dk * dq) * isum is added in block order as in the reference.
 * Rows past nr repeat the last one, and their scores are dropped. Heads up to KQZ_MAXB blocks. */
#define KQZ_MAXB 32

/* R[i] = 16 dwords of row i -> R[j] = dword j of the 16 rows (lane i: row i). */
HT_AI void transpose16(__m512i *R) {
    __m512i t[16], u[16];
    HT_UNROLL
    for (int i = 0; i < 8; i++)
        t[2 * i] = _mm512_unpacklo_epi32(R[2 * i], R[2 * i + 1]), t[2 * i + 1] = _mm512_unpackhi_epi32(R[2 * i], R[2 * i + 1]);
    HT_UNROLL
    for (int g = 0; g < 4; g++) {   /* u[4g + k], 128-bit lane L: rows 4g..4g+3 of dword 4L + k */
        u[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
        u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
        u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
    }
    HT_UNROLL
    for (int k = 0; k < 4; k++) {
        const __m512i ab0 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x44), ab1 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xEE);
        const __m512i cd0 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x44), cd1 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xEE);
        R[k] = _mm512_shuffle_i32x4(ab0, cd0, 0x88), R[4 + k] = _mm512_shuffle_i32x4(ab0, cd0, 0xDD);
        R[8 + k] = _mm512_shuffle_i32x4(ab1, cd1, 0x88), R[12 + k] = _mm512_shuffle_i32x4(ab1, cd1, 0xDD);
    }
}

/* NC columns of a 16-position group whose pairs of blocks are transposed in Rt (block scales dk), each column's
 * block scales dq and 128 * block sums off; scores kept where keep says. */
HT_AI void kqz_cols(const int NC, int nb, const __m512i (*Rt)[16], const __m512 *dk, const float (*dq)[KQZ_MAXB],
                    const int (*off)[KQZ_MAXB], const uint8_t *a, size_t as, float *y, size_t ys, __mmask16 keep) {
    const size_t WS = sizeof(block_q8_0), Q = offsetof(block_q8_0, qs);
    __m512 s[4];
    HT_UNROLL
    for (int c = 0; c < NC; c++) s[c] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b += 2) {   /* blocks b and b + 1 (if any) */
        const bool two = b + 1 < nb;
        const __m512i *R = Rt[b / 2];
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const uint8_t *qb = a + (size_t)c * as + (size_t)b * WS + Q;
            __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
            HT_UNROLL
            for (int j = 0; j < 8; j++) {
                int32_t x0, x1;
                memcpy(&x0, qb + 4 * j, 4);
                acc0 = _mm512_dpbusd_epi32(acc0, R[j], _mm512_set1_epi32(x0));
                if (two) {
                    memcpy(&x1, qb + WS + 4 * j, 4);
                    acc1 = _mm512_dpbusd_epi32(acc1, R[8 + j], _mm512_set1_epi32(x1));
                }
            }
            const __m512 f0 = _mm512_mul_ps(_mm512_mul_ps(dk[b], _mm512_set1_ps(dq[c][b])),
                                            _mm512_cvtepi32_ps(_mm512_sub_epi32(acc0, _mm512_set1_epi32(off[c][b]))));
            s[c] = _mm512_add_ps(s[c], f0);
            if (two) {
                const __m512 f1 = _mm512_mul_ps(_mm512_mul_ps(dk[b + 1], _mm512_set1_ps(dq[c][b + 1])),
                                                _mm512_cvtepi32_ps(_mm512_sub_epi32(acc1, _mm512_set1_epi32(off[c][b + 1]))));
                s[c] = _mm512_add_ps(s[c], f1);
            }
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) _mm512_mask_storeu_ps(y + (size_t)c * ys, keep, s[c]);
}

/* Up to KQZ_MAXC columns at a time: each 16-position group is loaded and transposed once for all of them (a
 * prefill's block of tokens brings 32 columns; transposing per 4 of them cost 8 transposes a group). */
#define KQZ_MAXC 32
static void kqz(int n, const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nc, float *y, size_t ys) {
    const size_t WS = sizeof(block_q8_0), Q = offsetof(block_q8_0, qs);
    const int nb = n / QK8_0;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    float dq[KQZ_MAXC][KQZ_MAXB];
    int off[KQZ_MAXC][KQZ_MAXB];   /* 128 * sum of the query block */
    __m512i Rt[KQZ_MAXB / 2][16];
    __m512 dk[KQZ_MAXB];
    const __m512i (*RT)[16] = (const __m512i (*)[16])Rt;
    const float (*DQ)[KQZ_MAXB] = (const float (*)[KQZ_MAXB])dq;
    const int (*OFF)[KQZ_MAXB] = (const int (*)[KQZ_MAXB])off;
    for (int c0 = 0; c0 < nc; c0 += KQZ_MAXC) {
        const int cn = HT_MIN(KQZ_MAXC, nc - c0);
        const uint8_t *ac = a + (size_t)c0 * as;
        float *yc = y + (size_t)c0 * ys;
        for (int c = 0; c < cn; c++)
            for (int b = 0; b < nb; b++) {
                const uint8_t *ab = ac + (size_t)c * as + (size_t)b * WS;
                int sum = 0;
                for (int i = 0; i < QK8_0; i++) sum += (int8_t)ab[Q + i];
                dq[c][b] = h2f(ab), off[c][b] = 128 * sum;
            }
        for (int r0 = 0; r0 < nr; r0 += 16) {
            const uint8_t *row[16];
            ht_prefetch(w + (size_t)r0 * ws, 16 * ws);   /* a head's rows follow each other: ~60 positions ahead */
            HT_UNROLL
            for (int r = 0; r < 16; r++) row[r] = w + (size_t)HT_MIN(r0 + r, nr - 1) * ws;
            for (int b = 0; b < nb; b += 2) {
                const bool two = b + 1 < nb;
                const size_t o = (size_t)b * WS;
                __m512i *R = Rt[b / 2];
                HT_UNROLL
                for (int r = 0; r < 16; r++) {
                    const __m256i lo = ld256(row[r] + o + Q), hi = two ? ld256(row[r] + o + WS + Q) : _mm256_setzero_si256();
                    R[r] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), flip);
                }
                transpose16(R);
                dk[b] = halves16(row, o);
                if (two) dk[b + 1] = halves16(row, o + WS);
            }
            const __mmask16 keep = (__mmask16)(nr - r0 >= 16 ? 0xFFFF : (1u << (nr - r0)) - 1);
#define KQZ_COLS(NC) kqz_cols(NC, nb, RT, dk, DQ + c, OFF + c, ac + (size_t)c * as, as, yc + (size_t)c * ys + r0, ys, keep)
            int c = 0;
            for (; c + 4 <= cn; c += 4) KQZ_COLS(4);
            for (; c + 2 <= cn; c += 2) KQZ_COLS(2);
            if (c < cn) KQZ_COLS(1);
#undef KQZ_COLS
        }
    }
}
#endif

static void kq_q8_0(int n, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *y, size_t ys) {
    int c = 0;
#if HT_X86_VNNI && HT_X86_AVX512
    if (n <= KQZ_MAXB * QK8_0) {
        kqz(n, w, ws, nr, a, as, nc, y, ys);
        return;
    }
#endif
    for (; c + 4 <= nc; c += 4) kq_q8_0_cols(4, n, w, ws, nr, (const uint8_t *)a + (size_t)c * as, as, y + (size_t)c * ys, ys);
    for (; c + 2 <= nc; c += 2) kq_q8_0_cols(2, n, w, ws, nr, (const uint8_t *)a + (size_t)c * as, as, y + (size_t)c * ys, ys);
    if (c < nc) kq_q8_0_cols(1, n, w, ws, nr, (const uint8_t *)a + (size_t)c * as, as, y + (size_t)c * ys, ys);
}

/* softmax·V (ht_pv_fn): a chunk of the outputs' dims (PV_NV vectors: 64 dims with AVX-512, 16 with AVX2's 16
 * registers) of up to 4 columns stays in registers while the rows go by once; each row's int8 values are
 * converted to float once for all those columns, and each column adds fma(p * d, q, o) per value, as the
 * reference. */
#if HT_X86_AVX512
typedef __m512 pv_vf;
#define PV_LANES 16
#define PV_NV 4
HT_AI pv_vf pv_load(const uint8_t *q) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(ld128(q))); }
#define pv_set1 _mm512_set1_ps
#define pv_fma _mm512_fmadd_ps
#define pv_zero _mm512_setzero_ps
#define pv_store _mm512_storeu_ps
#define pv_loadf _mm512_loadu_ps
#else
typedef __m256 pv_vf;
#define PV_LANES 8
#define PV_NV 2
HT_AI pv_vf pv_load(const uint8_t *q) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q))); }
#define pv_set1 _mm256_set1_ps
#define pv_fma _mm256_fmadd_ps
#define pv_zero _mm256_setzero_ps
#define pv_store _mm256_storeu_ps
#define pv_loadf _mm256_loadu_ps
#endif

#if HT_X86_AVX512
/* NC columns (outputs oc[c]), NV vectors of dims from d0 (in at most PV_NB blocks). Positions go 16 at a time:
 * their block scales are converted together and multiplied by each column's 16 probabilities in one vector
 * product (pd = p * d, the reference's factor), so that the per-position work is the int8 conversion shared
 * by the columns and one FMA per vector and column, its factor broadcast from memory (embedded broadcast).
 * With AVX2 (16 dims a chunk, no masked loads) this measured 1.45x slower than the per-position scalar
 * factors below, which it keeps. */
#define PV_NB ((PV_NV * PV_LANES + QK8_0 - 1) / QK8_0)
HT_AI void pv_q8_0_chunk(const int NC, const int NV, int d0, const uint8_t *v, size_t vs, int cap, int lo, int m,
                         const float *p, size_t ld, float *const *oc, bool add) {
    const size_t WS = sizeof(block_q8_0), Q = offsetof(block_q8_0, qs);
    const int b0 = d0 / QK8_0, nbk = (d0 + NV * PV_LANES - 1) / QK8_0 - b0 + 1;
    pv_vf acc[4][PV_NV];
    HT_UNROLL
    for (int c = 0; c < NC; c++)
        HT_UNROLL
        for (int k = 0; k < NV; k++) acc[c][k] = add ? pv_loadf(oc[c] + d0 + k * PV_LANES) : pv_zero();
    int slot = lo % cap;
    for (int t0 = 0; t0 < m; t0 += 16) {
        const int mt = HT_MIN(16, m - t0);
        const uint8_t *row[16];
        ht_prefetch(v + (size_t)slot * vs, 16 * vs);   /* as the scores' kernel (kqz) */
        for (int t = 0, sl = slot; t < 16; t++) {
            row[t] = v + (size_t)sl * vs;
            if (t + 1 < mt && ++sl == cap) sl = 0;   /* past m: the last row again (its factors unused) */
        }
        float pd[4][PV_NB][16], d[16];
        for (int kb = 0; kb < nbk; kb++) {
            _mm512_storeu_ps(d, halves16(row, (size_t)(b0 + kb) * WS));
            HT_UNROLL
            for (int c = 0; c < NC; c++) {
                const float *pc = p + (size_t)c * ld + (size_t)t0;
                const __mmask16 mk = (__mmask16)(mt == 16 ? 0xFFFF : (1u << mt) - 1);
                _mm512_storeu_ps(pd[c][kb], _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, pc), _mm512_loadu_ps(d)));
            }
        }
        for (int t = 0; t < mt; t++) {
            const uint8_t *r = row[t];
            pv_vf x[PV_NV];
            HT_UNROLL
            for (int k = 0; k < NV; k++) {
                const int e = d0 + k * PV_LANES;   /* the vector's first dim */
                x[k] = pv_load(r + (size_t)(e / QK8_0) * WS + Q + (size_t)(e % QK8_0));
            }
            HT_UNROLL
            for (int c = 0; c < NC; c++)
                HT_UNROLL
                for (int k = 0; k < NV; k++)
                    acc[c][k] = pv_fma(pv_set1(pd[c][(d0 + k * PV_LANES) / QK8_0 - b0][t]), x[k], acc[c][k]);
        }
        slot = (int)(((size_t)slot + (size_t)mt) % (size_t)cap);
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++)
        HT_UNROLL
        for (int k = 0; k < NV; k++) pv_store(oc[c] + d0 + k * PV_LANES, acc[c][k]);
}
#else
/* NC columns (outputs oc[c]), NV vectors of dims from d0. */
HT_AI void pv_q8_0_chunk(const int NC, const int NV, int d0, const uint8_t *v, size_t vs, int cap, int lo, int m,
                         const float *p, size_t ld, float *const *oc, bool add) {
    const size_t WS = sizeof(block_q8_0), Q = offsetof(block_q8_0, qs);
    pv_vf acc[4][PV_NV];
    HT_UNROLL
    for (int c = 0; c < NC; c++)
        HT_UNROLL
        for (int k = 0; k < NV; k++) acc[c][k] = add ? pv_loadf(oc[c] + d0 + k * PV_LANES) : pv_zero();
    int slot = lo % cap;
    for (int t = 0; t < m; t++) {
        const uint8_t *row = v + (size_t)slot * vs;
        if (++slot == cap) slot = 0;
        pv_vf x[PV_NV];
        float d[PV_NV];
        HT_UNROLL
        for (int k = 0; k < NV; k++) {
            const int e = d0 + k * PV_LANES;   /* the vector's first dim */
            x[k] = pv_load(row + (size_t)(e / QK8_0) * WS + Q + (size_t)(e % QK8_0));
            d[k] = h2f(row + (size_t)(e / QK8_0) * WS);
        }
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const float pt = p[(size_t)c * ld + (size_t)t];
            HT_UNROLL
            for (int k = 0; k < NV; k++) acc[c][k] = pv_fma(pv_set1(pt * d[k]), x[k], acc[c][k]);
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++)
        HT_UNROLL
        for (int k = 0; k < NV; k++) pv_store(oc[c] + d0 + k * PV_LANES, acc[c][k]);
}
#endif

/* add: the outputs carry the sums of the positions before lo (the accumulators start from them). */
HT_AI void pv_q8_0_cols(const int NC, int n, const uint8_t *v, size_t vs, int cap, int lo, int m, const float *p,
                        size_t ld, float *const *oc, bool add) {
    int d0 = 0;
    for (; d0 + PV_NV * PV_LANES <= n; d0 += PV_NV * PV_LANES) pv_q8_0_chunk(NC, PV_NV, d0, v, vs, cap, lo, m, p, ld, oc, add);
    if (d0 < n) pv_q8_0_chunk(NC, 2, d0, v, vs, cap, lo, m, p, ld, oc, add);   /* AVX-512: the 32 dims left */
}

/* More than 4 columns (a prefill block's tokens and heads) take the positions PV_SPAN at a time, every column
 * group over one span before the next, so a span's rows are read from memory once and then from L1; each output
 * still adds its positions in order (its sum goes through memory between spans, exactly). */
#define PV_SPAN 128

static void pv_q8_0(int n, const void *v, size_t vs, int cap, int lo, int m, const float *p, size_t ld, int nc,
                    float *o, size_t os, int per) {
    const int span = nc > 4 ? PV_SPAN : HT_MAX(m, 1);
    for (int t0 = 0; t0 < m || t0 == 0; t0 += span) {
        const int mt = HT_MIN(span, m - t0);
        for (int c0 = 0; c0 < nc;) {
            const int g = nc - c0 >= 4 ? 4 : nc - c0 >= 2 ? 2 : 1;
            float *oc[4];
            for (int c = 0; c < g; c++) oc[c] = o + (size_t)((c0 + c) / per) * os + (size_t)((c0 + c) % per) * n;
            const float *pc = p + (size_t)c0 * ld + (size_t)t0;
            if (g == 4) pv_q8_0_cols(4, n, v, vs, cap, lo + t0, mt, pc, ld, oc, t0 > 0);
            else if (g == 2) pv_q8_0_cols(2, n, v, vs, cap, lo + t0, mt, pc, ld, oc, t0 > 0);
            else pv_q8_0_cols(1, n, v, vs, cap, lo + t0, mt, pc, ld, oc, t0 > 0);
            c0 += g;
        }
    }
}

/* ======================= the kernel entries ======================= */

/* vec_dot is TILE's nr = nc = 1 instance; the tile runs its nc = 4 / 2 / 1 instances (HT_TILE_BODY). */
#define HT_X86_KERNELS(name, T, TILE, MAXC)                                                                 \
    static float vec_dot_##name(int n, const void *w, const void *a) {                                     \
        float y;                                                                                           \
        TILE(T, 1, n, w, 0, 1, a, 0, &y, 0);                                                               \
        return y;                                                                                          \
    }                                                                                                      \
    static void cols_##name(int n, const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nc, \
                            float *y, size_t ys) {                                                         \
        if ((MAXC) >= 4 && nc == 4) TILE(T, 4, n, w, ws, nr, a, as, y, ys);                                \
        else if (nc == 2) TILE(T, 2, n, w, ws, nr, a, as, y, ys);                                          \
        else TILE(T, 1, n, w, ws, nr, a, as, y, ys);                                                       \
    }                                                                                                      \
    static void tile_##name(int n, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *y, \
                            size_t ys) {                                                                   \
        HT_TILE_BODY(cols_##name, MAXC)                                                                    \
    }

/* Float tiles keep an accumulator per output: 4 x 4 fit the 32 registers of AVX-512, 4 x 2 the 16 of AVX2. */
#define F_MAXC (HT_X86_AVX512 ? 4 : 2)

HT_X86_KERNELS(q4_0, HT_Q4_0, TILE32, 4)
HT_X86_KERNELS(q4_1, HT_Q4_1, TILE32, 4)
HT_X86_KERNELS(q5_0, HT_Q5_0, TILE32, 4)
HT_X86_KERNELS(q5_1, HT_Q5_1, TILE32, 4)
HT_X86_KERNELS(q8_0, HT_Q8_0, TILE32, 4)
HT_X86_KERNELS(iq4_nl, HT_IQ4_NL, TILE32, 4)
HT_X86_KERNELS(q2_K, HT_Q2_K, tileK, 4)
HT_X86_KERNELS(q3_K, HT_Q3_K, tileK, 4)
HT_X86_KERNELS(q4_K, HT_Q4_K, tileK, 4)
HT_X86_KERNELS(q5_K, HT_Q5_K, tileK, 4)
HT_X86_KERNELS(q6_K, HT_Q6_K, tileK, 4)
HT_X86_KERNELS(iq4_xs, HT_IQ4_XS, tileKd, 4)
HT_X86_KERNELS(iq2_xxs, HT_IQ2_XXS, tileKd, 4)
HT_X86_KERNELS(iq2_xs, HT_IQ2_XS, tileKd, 4)
HT_X86_KERNELS(iq2_s, HT_IQ2_S, tileKd, 4)
HT_X86_KERNELS(iq3_xxs, HT_IQ3_XXS, tileKd, 4)
HT_X86_KERNELS(iq3_s, HT_IQ3_S, tileKd, 4)
HT_X86_KERNELS(iq1_s, HT_IQ1_S, tileKd, 4)
HT_X86_KERNELS(iq1_m, HT_IQ1_M, tileKd, 4)
HT_X86_KERNELS(tq1_0, HT_TQ1_0, tileKd, 4)
HT_X86_KERNELS(tq2_0, HT_TQ2_0, tileKd, 4)
HT_X86_KERNELS(mxfp4, HT_MXFP4, TILE32, 4)
HT_X86_KERNELS(f32, HT_F32, tileF, F_MAXC)
HT_X86_KERNELS(f16, HT_F16, tileF, F_MAXC)
HT_X86_KERNELS(bf16, HT_BF16, tileF, F_MAXC)

#include "quant_x86_packed.h"
#include "quant_x86_iqpack.h"

static void set_dot(ht_traits *t, ht_vec_dot_fn dot, ht_vec_dot_tile_fn tile) {
    t->vec_dot = dot;
    t->vec_dot_tile = tile;
}

static void x86_install(ht_traits t[HT_NTYPES]) {
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
    set_dot(&t[HT_F32], vec_dot_f32, tile_f32);
    set_dot(&t[HT_F16], vec_dot_f16, tile_f16);
    set_dot(&t[HT_BF16], vec_dot_bf16, tile_bf16);
    t[HT_Q8_0].from_float = q8_0_from_float;
    t[HT_F16].from_float = f16_from_float;
    t[HT_F32].dot_t = dot_t_f32;
    t[HT_F16].dot_t = dot_t_f16;
    t[HT_Q8_0].kq = kq_q8_0;
    t[HT_Q8_0].pv = pv_q8_0;
#if HT_X86_AVX512
    t[HT_F16].pack = &pk_f16_i16x32;
    t[HT_BF16].pack = &pk_bf16_i16x32;
#else
    t[HT_F32].pack = &pk_f32_x32a;
    t[HT_F16].pack = &pk_f16_i16;
    t[HT_BF16].pack = &pk_bf16_i16;
#endif
#if HT_X86_VNNI
    t[HT_Q4_0].pack = &pk_q4_0_x16;
    t[HT_Q5_0].pack = &pk_q5_0_x16;
    t[HT_IQ4_NL].pack = &pk_iq4_nl_x16;
    t[HT_MXFP4].pack = &pk_mxfp4_x16;
    t[HT_Q8_0].pack = &pk_q8_0_x16;
    t[HT_Q4_K].pack = &pk_q4_K_x16;
    t[HT_Q6_K].pack = &pk_q6_K_x16;
    t[HT_IQ4_XS].pack = &pk_iq4_xs_x16;
    if (ht_cpu_x86_avx512bf16()) t[HT_BF16].pack = &pk_bf16_x32;
    if (ht_cpu_x86_avx512vbmi()) {   /* the grid packs' byte permutes */
        grid_codes_init_all();
        t[HT_IQ2_XXS].pack = &pk_iq2_xxs_x16;
        t[HT_IQ2_XS].pack = &pk_iq2_xs_x16;
        t[HT_IQ2_S].pack = &pk_iq2_s_x16;
        t[HT_IQ1_S].pack = &pk_iq1_s_x16;
        t[HT_IQ1_M].pack = &pk_iq1_m_x16;
        t[HT_IQ3_S].pack = &pk_iq3_s_x16;
        t[HT_IQ3_XXS].pack = &pk_iq3_xxs_x16;
    }
#else
    t[HT_Q4_0].pack = &pk_q4_0_x8;
    t[HT_Q5_0].pack = &pk_q5_0_x8;
    t[HT_IQ4_NL].pack = &pk_iq4_nl_x8;
    t[HT_MXFP4].pack = &pk_mxfp4_x8;
    t[HT_Q8_0].pack = &pk_q8_0_x8;
    t[HT_Q4_K].pack = &pk_q4_K_x8;
    t[HT_Q6_K].pack = &pk_q6_K_x8;
    t[HT_IQ4_XS].pack = &pk_iq4_xs_x8;
#endif
    t[HT_Q8_1].from_float = q8_1_from_float;
    t[HT_Q8_K].from_float = q8_K_from_float;
    iqp_install(t);
}

/* ---- multiply-add peaks (ht_kernel_set.mac_peak): the instruction the type's prefill tile multiplies with,
 * at the set's full width ---- */
#include "quant_peak.h"

#if HT_X86_AVX512
#define PEAK_KEEP(v) __asm__ volatile("" : "+v"(v))
#define PEAK_I(s) _mm512_set1_epi8((char)(s))
#define PEAK_F(s) _mm512_set1_ps(0.5f * (float)(s))
#define PEAK_FMA(v, k) _mm512_fmadd_ps(v, k, k)   /* v = v / 2 + 1/2 (k = 1/2): stays near 1, no denormals */
PEAK_LOOP(peak_fma, __m512, PEAK_F, PEAK_FMA, PEAK_KEEP)
#if HT_X86_VNNI
#define PEAK_DPBUSD(v, k) _mm512_dpbusd_epi32(v, k, k)
#define PEAK_DPWSSD(v, k) _mm512_dpwssd_epi32(v, k, k)
PEAK_LOOP(peak_int8, __m512i, PEAK_I, PEAK_DPBUSD, PEAK_KEEP)
PEAK_LOOP(peak_int16, __m512i, PEAK_I, PEAK_DPWSSD, PEAK_KEEP)
#define PEAK_INT8 "VPDPBUSD zmm"
#define PEAK_INT16 "VPDPWSSD zmm"
#else
PEAK_LOOP(peak_int8, __m512i, PEAK_I, _mm512_maddubs_epi16, PEAK_KEEP)
PEAK_LOOP(peak_int16, __m512i, PEAK_I, _mm512_madd_epi16, PEAK_KEEP)
#define PEAK_INT8 "VPMADDUBSW zmm"
#define PEAK_INT16 "VPMADDWD zmm"
#endif

/* F16 and BF16 tiles run on 14-bit integers (pk_f16_i16x32) */
static ht_mac_peak x86_mac_peak(uint32_t type, double seconds) {
    if (type == HT_F32) return (ht_mac_peak){ "VFMADD231PS zmm", 16 * peak_fma(seconds) };
    if (type == HT_F16 || type == HT_BF16) return (ht_mac_peak){ PEAK_INT16, 32 * peak_int16(seconds) };
    return (ht_mac_peak){ PEAK_INT8, 64 * peak_int8(seconds) };
}
#else
#define PEAK_KEEP(v) __asm__ volatile("" : "+x"(v))
#define PEAK_I(s) _mm256_set1_epi8((char)(s))
#define PEAK_F(s) _mm256_set1_ps(0.5f * (float)(s))
#define PEAK_FMA(v, k) _mm256_fmadd_ps(v, k, k)   /* v = v / 2 + 1/2 (k = 1/2): stays near 1, no denormals */
PEAK_LOOP(peak_fma, __m256, PEAK_F, PEAK_FMA, PEAK_KEEP)
PEAK_LOOP(peak_int8, __m256i, PEAK_I, _mm256_maddubs_epi16, PEAK_KEEP)
PEAK_LOOP(peak_int16, __m256i, PEAK_I, _mm256_madd_epi16, PEAK_KEEP)

/* F16 and BF16 tiles run on 14-bit integers (pk_f16_i16): PMADDWD */
static ht_mac_peak x86_mac_peak(uint32_t type, double seconds) {
    if (type == HT_F32) return (ht_mac_peak){ "VFMADD231PS ymm", 8 * peak_fma(seconds) };
    if (type == HT_F16 || type == HT_BF16) return (ht_mac_peak){ "VPMADDWD ymm", 16 * peak_int16(seconds) };
    return (ht_mac_peak){ "VPMADDUBSW ymm", 32 * peak_int8(seconds) };
}
#endif
