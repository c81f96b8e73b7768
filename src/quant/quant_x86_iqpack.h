/* quant_x86_iqpack.h — row-interleaved packs of the i-quants for decode (ht_pack in quant.h), AVX-512 VNNI:
 * IQ4_XS x 16. Included by quant_x86_kernels.h after quant_x86_packed.h (its activations are Q4_K's pack's).
 *
 * Why: the row-by-row IQ4_XS kernel spends per super-block and row a scale unpack, two lane permutes per 64
 * weights, PMADDUBSW + PMADDWD per 32, and a horizontal reduction: about 110 vector instructions per 256
 * weights, compute-bound below the memory roof. With 16 rows side by side four bytes at a time, a 64-byte load
 * holds 16 rows' 8 weights: two PSHUFB (levels + 128, unsigned) and two VPDPBUSD with the broadcast
 * activations make 256 products, about 19 instructions per 256 weights, and the lanes are the outputs.
 *
 * Bit-identity: each lane's super-block sum is quant_ref.c's integer isum exactly (sum_s scale_s * dot_s, the
 * +128 of the levels removed as 128 * sum_s scale_s * asum_s, all in int32 without overflow), and each output
 * adds (d * d_a) * (float)isum in super-block order with separate multiplies and adds, as the scalar vec_dot
 * does: every output equals vec_dot's bit for bit, whatever the tile's token count. */

#if HT_X86_VNNI
/* IQ4_XS x 16: super-block i of a group (138 R = 2208 bytes at 2208 i) is quants[s][j][r] = row r's
 * qs[16 s + 4 j .. + 3] (s < 8, j < 4: low nibbles are elements 4j.. of sub-block s, high ones 16 + 4j..; 64
 * bytes per (s, j)), then the signed scales ls - 32 as int8 pairs [k][r][2] (sub-blocks 2k, 2k + 1), then the
 * halves d[r]. Missing rows are zeros (scale 0, d 0). */
#define PK_IQ4XS_R 16
#define PK_IQ4XS_SB (138 * PK_IQ4XS_R)
static size_t pk_iq4_xs_x16_bytes(int64_t n) { return (size_t)(n / 256) * PK_IQ4XS_SB; }

static void pk_iq4_xs_x16_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) {
    const int R = PK_IQ4XS_R;
    const int64_t nsb = n / 256;
    memset(dst, 0, (size_t)nsb * PK_IQ4XS_SB);
    for (int64_t i = 0; i < nsb; i++) {
        uint8_t *q = dst + i * PK_IQ4XS_SB;
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
        const uint8_t *q = g + (size_t)i * PK_IQ4XS_SB, *sc = q + 128 * PK_IQ4XS_R;
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
                        if (NC == 1) {
                            lo[c] = _mm512_dpbusd_epi32(j ? lo[c] : _mm512_setzero_si512(), wl, xl);
                            hi[c] = _mm512_dpbusd_epi32(j ? hi[c] : _mm512_setzero_si512(), wh, xh);
                        } else {
                            lo[c] = _mm512_dpbusd_epi32(j ? lo[c] : _mm512_setzero_si512(), wl, xl);
                            lo[c] = _mm512_dpbusd_epi32(lo[c], wh, xh);
                        }
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
        const __m512 dw = _mm512_cvtph_ps(ld256(q + 136 * PK_IQ4XS_R));
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

static const ht_pack pk_iq4_xs_x16 = {"IQ4_XSx16", PK_IQ4XS_R, PK_IQ4XS_NC, pk_iq4_xs_x16_bytes, pk_iq4_xs_x16_pack,
                                      pk_k_act_bytes, pk_k_act_prep, pk_iq4_xs_x16_tile, 0, NULL};
#endif
