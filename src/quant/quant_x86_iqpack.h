/* quant_x86_iqpack.h — row-interleaved packs of the i-quants for decode (ht_pack in quant.h): IQ4_XS x 16
 * (AVX-512 VNNI) and x 8 (AVX2, and AVX-512 without VNNI). Included by quant_x86_kernels.h after
 * quant_x86_packed.h (the activations are its Q4_K pack's: Q8_K values, d, sub-block sums).
 *
 * Why: the row-by-row IQ4_XS kernel (ka_iq4_xs) spends per super-block and row a scale unpack, two lane
 * permutes per 64 weights, PMADDUBSW + PMADDWD per 32, and a share of a horizontal reduction: about 110 vector
 * instructions per 256 weights by its source, compute-bound below the memory roof (the 1B file read at ~26 GB/s
 * where Q4_0's pack reads ~35). With 16 rows side by side four bytes at a time, a 64-byte load holds 16 rows'
 * 8 weights: two PSHUFB (levels + 128, unsigned) and two VPDPBUSD with the broadcast activations make 256
 * products, about 19 instructions per 256 weights, and the lanes are the outputs.
 *
 * Bit-identity: each lane's super-block sum is quant_ref.c's integer isum exactly (sum_s scale_s * dot_s, the
 * +128 of the levels removed as 128 * sum_s scale_s * asum_s; a sub-block's sum is below 32 * 241 * 128, the
 * super-block's below 2^28), and each output adds (d * d_a) * (float)isum in super-block order with separate
 * multiplies and adds, as the scalar vec_dot does: every output equals vec_dot's bit for bit, whatever the
 * tile's token count. */

/* IQ4_XS x R (16 in 512 bits, 8 in 256): super-block i of a group (138 R bytes at 138 R i) is quants[s][j][r] =
 * row r's qs[16 s + 4 j .. + 3] (s < 8, j < 4: low nibbles are elements 4j.. of sub-block s, high ones
 * 16 + 4j..; 4 R bytes per (s, j)), then the signed scales ls - 32 as int8 pairs [k][r][2] (sub-blocks 2k,
 * 2k + 1), then the halves d[r]. Missing rows are zeros (scale 0, d 0). */
HT_AI void pack_iq4_xs(const int R, const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) {
    const int64_t nsb = n / 256;
    const size_t SB = (size_t)138 * R;
    memset(dst, 0, (size_t)nsb * SB);
    for (int64_t i = 0; i < nsb; i++) {
        uint8_t *q = dst + i * SB;
        int8_t *sc = (int8_t *)(q + 128 * R);
        ht_half *d = (ht_half *)(q + 136 * R);
        for (int r = 0; r < nr; r++) {
            const block_iq4_xs *b = (const block_iq4_xs *)(src + (size_t)r * rb) + i;
            for (int s = 0; s < 8; s++) {
                for (int j = 0; j < 4; j++) memcpy(q + ((size_t)s * 4 + j) * 4 * R + r * 4, b->qs + 16 * s + 4 * j, 4);
                const int ls = ((b->scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | ((b->scales_h >> (2 * s)) & 3) << 4;
                sc[((s / 2) * R + r) * 2 + s % 2] = (int8_t)(ls - 32);
            }
            d[r] = b->d;
        }
    }
}

#if HT_X86_VNNI
#define PK_IQ4XS_SB (138 * 16)
static size_t pk_iq4_xs_x16_bytes(int64_t n) { return (size_t)(n / 256) * PK_IQ4XS_SB; }
static void pk_iq4_xs_x16_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) { pack_iq4_xs(16, src, rb, nr, n, dst); }

/* One token keeps two VPDPBUSD chains per sub-block (low and high nibbles) for the latency; several share
 * each unpacked vector and keep one chain each. */
#define PK_IQ4XS_NC 8
HT_AI void iq4_xsx16_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    const int nsb = n / 256;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i tab = _mm512_broadcast_i32x4(_mm_xor_si128(ld128(ht_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
    __m512 acc[PK_IQ4XS_NC];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int i = 0; i < nsb; i++) {
        const uint8_t *q = g + (size_t)i * PK_IQ4XS_SB, *sc = q + 128 * 16;
        ht_prefetch(q, PK_IQ4XS_SB);
        __m512i isum[PK_IQ4XS_NC];
        HT_UNROLL
        for (int c = 0; c < NC; c++) isum[c] = _mm512_setzero_si512();
        HT_UNROLL
        for (int k = 0; k < 4; k++) {
            const __m512i scp = _mm512_cvtepi8_epi16(ld256(sc + 32 * k));   /* lanes: (scale 2k, 2k + 1) as int16 */
            const __m512i sl = _mm512_srai_epi32(_mm512_slli_epi32(scp, 16), 16), sh = _mm512_srai_epi32(scp, 16);
            HT_UNROLL
            for (int h = 0; h < 2; h++) {   /* sub-block s = 2k + h */
                const int s = 2 * k + h;
                __m512i lo[PK_IQ4XS_NC], hi[PK_IQ4XS_NC];
                HT_UNROLL
                for (int j = 0; j < 4; j++) {
                    const __m512i v = _mm512_loadu_si512(q + ((size_t)s * 4 + j) * 64);
                    const __m512i wl = _mm512_shuffle_epi8(tab, _mm512_and_si512(v, m4));
                    const __m512i wh = _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
                    HT_UNROLL
                    for (int c = 0; c < NC; c++) {
                        const uint8_t *aq = a + (size_t)c * as + (size_t)i * 256 + 32 * s;
                        const __m512i xl = _mm512_set1_epi32(ld32(aq + 4 * j)), xh = _mm512_set1_epi32(ld32(aq + 16 + 4 * j));
                        lo[c] = _mm512_dpbusd_epi32(j ? lo[c] : _mm512_setzero_si512(), wl, xl);
                        if (NC == 1) hi[c] = _mm512_dpbusd_epi32(j ? hi[c] : _mm512_setzero_si512(), wh, xh);
                        else lo[c] = _mm512_dpbusd_epi32(lo[c], wh, xh);
                    }
                }
                HT_UNROLL
                for (int c = 0; c < NC; c++) {
                    const __m512i dot = NC == 1 ? _mm512_add_epi32(lo[c], hi[c]) : lo[c];
                    isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(dot, h ? sh : sl));
                }
            }
            const __m512i scm = _mm512_slli_epi16(scp, 7);   /* the +128 of the levels: -(-128 scale) * asum */
            HT_UNROLL
            for (int c = 0; c < NC; c++) {
                const int16_t *asum = (const int16_t *)(a + (size_t)c * as + n + (size_t)nsb * 4) + (size_t)i * 8;
                isum[c] = _mm512_sub_epi32(isum[c], _mm512_madd_epi16(scm, _mm512_set1_epi32(ld32((const uint8_t *)(asum + 2 * k)))));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(ld256(q + 136 * 16));
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const __m512 da = _mm512_set1_ps(((const float *)(a + (size_t)c * as + n))[i]);
            acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(isum[c])));
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) store16(y + (size_t)c * ys, nr, acc[c]);
}

PK_TILE(pk_iq4_xs_x16_tile, iq4_xsx16_tile, 8)

static const ht_pack pk_iq4_xs_x16 = {"IQ4_XSx16", 16, PK_IQ4XS_NC, pk_iq4_xs_x16_bytes, pk_iq4_xs_x16_pack,
                                      pk_k_act_bytes, pk_k_act_prep, pk_iq4_xs_x16_tile, 0, NULL, NULL};
#endif

#if !HT_X86_VNNI
/* ---- IQ4_XS x 8, 256-bit (AVX2, and the AVX-512 set without VNNI) ----
 * PMADDUBSW needs an unsigned factor: the activations' magnitudes, the levels carrying their signs (PSIGNB on
 * the levels, never -128, where an activation of Q8_K can be -128); a pair adds to at most 2 * 128 * 127 in
 * int16, and PMADDWD by the lane's scale (in both halves) widens and scales it. */
static size_t pk_iq4_xs_x8_bytes(int64_t n) { return (size_t)(n / 256) * 138 * 8; }
static void pk_iq4_xs_x8_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) { pack_iq4_xs(8, src, rb, nr, n, dst); }

HT_AI void iq4_xsx8_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    const int nsb = n / 256;
    const __m256i m4 = _mm256_set1_epi8(0x0f), tab = iq4nl_table(), lo16 = _mm256_set1_epi32(0xFFFF);
    __m256 acc[PK8_NC];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_ps();
    for (int i = 0; i < nsb; i++) {
        const uint8_t *q = g + (size_t)i * 138 * 8, *sc = q + 128 * 8;
        ht_prefetch_l2(q, 138 * 8);
        __m256i isum[PK8_NC];
        HT_UNROLL
        for (int c = 0; c < NC; c++) isum[c] = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            const __m256i scp = _mm256_cvtepi8_epi16(ld128(sc + 16 * k));   /* lanes: (scale 2k, 2k + 1) as int16 */
            HT_UNROLL
            for (int h = 0; h < 2; h++) {   /* sub-block s = 2k + h; the lane's scale in both int16 halves */
                const int s = 2 * k + h;
                const __m256i sd = h ? _mm256_or_si256(_mm256_srli_epi32(scp, 16), _mm256_andnot_si256(lo16, scp))
                                     : _mm256_or_si256(_mm256_and_si256(scp, lo16), _mm256_slli_epi32(scp, 16));
                HT_UNROLL
                for (int j = 0; j < 4; j++) {
                    const __m256i v = ld256(q + ((size_t)s * 4 + j) * 32);
                    const __m256i wl = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4));
                    const __m256i wh = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
                    HT_UNROLL
                    for (int c = 0; c < NC; c++) {
                        const uint8_t *aq = a + (size_t)c * as + (size_t)i * 256 + 32 * s;
                        const __m256i xl = _mm256_set1_epi32(ld32(aq + 4 * j)), xh = _mm256_set1_epi32(ld32(aq + 16 + 4 * j));
                        const __m256i pl = _mm256_maddubs_epi16(_mm256_abs_epi8(xl), _mm256_sign_epi8(wl, xl));
                        const __m256i ph = _mm256_maddubs_epi16(_mm256_abs_epi8(xh), _mm256_sign_epi8(wh, xh));
                        isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(_mm256_madd_epi16(pl, sd), _mm256_madd_epi16(ph, sd)));
                        HT_KEEP(isum[c]);
                    }
                }
            }
        }
        const __m256 dw = _mm256_cvtph_ps(ld128(q + 136 * 8));
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const __m256 da = _mm256_set1_ps(((const float *)(a + (size_t)c * as + n))[i]);
            acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(isum[c])));
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) store8(y + (size_t)c * ys, nr, acc[c]);
}

PK_TILE(pk_iq4_xs_x8_tile, iq4_xsx8_tile, 4)

static const ht_pack pk_iq4_xs_x8 = {"IQ4_XSx8", 8, PK8_NC, pk_iq4_xs_x8_bytes, pk_iq4_xs_x8_pack, pk_k_act_bytes,
                                     pk_k_act_prep, pk_iq4_xs_x8_tile, 0, NULL, NULL};
#endif
