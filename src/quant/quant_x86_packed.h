/* quant_x86_packed.h — row-interleaved ("packed") kernels for x86 (ht_pack in quant.h): Q4_0, Q5_0, IQ4_NL,
 * Q8_0, MXFP4, Q4_K, Q6_K, F16 and BF16, 16 rows a group in 512 bits, 8 in 256 (F32: 32 in 256). Included by
 * quant_x86_kernels.h after its helpers.
 *
 * Why: the row-by-row kernels spend most of their time per 32-element block (unpacking, converting each
 * block sum to float, scaling) rather than in the dot-product instructions. With R rows interleaved four
 * bytes at a time, one integer lane holds one row: a block costs 8 dot instructions per token for all R
 * rows (the activation's 4 bytes broadcast), then one conversion and one FMA for R outputs. No horizontal
 * sum is ever needed: the lanes are the outputs.
 *   Q4_0 x16 (AVX-512 VNNI): per block 4 x 64 bytes of nibbles + 16 halves. VPDPBUSD takes the nibbles as
 *     unsigned bytes and the activations as signed; the offset 8 comes off as -8 * sum(a), the block's
 *     activation sum, which the activation rows carry.
 *   Q4_0 x8 (AVX2, and the AVX-512 set without VNNI): the same in 256 bits with PMADDUBSW: the 8 products
 *     of a lane pair-sum to at most 8 * 2 * 15 * 127 = 30480, so they add in int16 without saturating.
 *   Q8_0 x16 (AVX-512 VNNI): 8 x 64 bytes of signed weights + 16 halves + 16 int16 row sums; the
 *     activations go unsigned (a + 128) and -128 * sum(w) comes off.
 *   Q4_K, Q6_K: the same per 32-element sub-block, the integer scales applied per lane (VPMULLD), mins and
 *     offsets from the activations' block sums; F32 (AVX2): floats per lane, FMA; F16/BF16: rounded to
 *     14-bit integers at load, PMADDWD (AVX2) or VPDPWSSD (AVX-512) (layouts at each kernel).
 * Each output's block terms are added in block order with the same instructions whatever the number of
 * tokens in the tile: an output does not depend on the tiling, the batch or the thread count.
 *
 * Activation rows of the 32-element packs: int8 q[n] (Q8_0's values, or q + 128 as unsigned for Q8_0
 * weights), then float d[n / 32], then int32 sum[n / 32] of each block's q. */

/* A pack's tile entry (ht_pack.tile) from an always_inline kernel TILE(NC, ...) for a compile-time token count:
 * nc <= MAXNC (4, 6 or 8) tokens as instances for MAXNC, 4, 3, 2 and 1 (a count above MAXNC is never
 * instantiated; 3 tokens in one pass: the IQ3_S pack's pp3 cost as much again as its pp2 as 2 + 1). */
#define PK_TILE(name, TILE, MAXNC) PK_TILE_A(, name, TILE, MAXNC)
#define PK_TILE_A(ATTR, name, TILE, MAXNC)                                                                      \
    ATTR static void name(int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, int nc, float *y, size_t ys) { \
        int c = 0;                                                                                              \
        if ((MAXNC) > 4) for (; c + (MAXNC) <= nc; c += (MAXNC)) TILE((MAXNC) > 4 ? (MAXNC) : 1, n, g, nr, a + (size_t)c * as, as, y + (size_t)c * ys, ys); \
        for (; c + 4 <= nc; c += 4) TILE(4, n, g, nr, a + (size_t)c * as, as, y + (size_t)c * ys, ys);      \
        if (c + 3 == nc) TILE(3, n, g, nr, a + (size_t)c * as, as, y + (size_t)c * ys, ys), c += 3;          \
        for (; c + 2 <= nc; c += 2) TILE(2, n, g, nr, a + (size_t)c * as, as, y + (size_t)c * ys, ys);      \
        if (c < nc) TILE(1, n, g, nr, a + (size_t)c * as, as, y + (size_t)c * ys, ys);                     \
    }


/* The first nr (<= 8) outputs of a 256-bit tile row. */
HT_AI void store8(float *y, int nr, __m256 v) {
    if (nr == 8) _mm256_storeu_ps(y, v);
    else {
        float t[8];
        _mm256_storeu_ps(t, v);
        memcpy(y, t, (size_t)nr * sizeof(float));
    }
}

/* ---- activations ---- */
static size_t pk_act_bytes(int64_t n) { return (size_t)n + (size_t)(n / 32) * 8; }

HT_AI void pk_act_prep(const float *x, uint8_t *dst, int64_t n, bool to_unsigned) {
    const int64_t nb = n / 32;
    float *d = (float *)(dst + n);
    int32_t *s = (int32_t *)(dst + n + nb * 4);
    for (int64_t b = 0; b < nb; b++) {
        block_q8_0 q;
        q8_0_from_float(x + b * 32, &q, 32);   /* the values Q8_0 activations would have, bit for bit */
        const __m256i v = ld256(q.qs);
        const __m256i sum = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), v), _mm256_set1_epi16(1));
        const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        const __m128i h2 = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        s[b] = _mm_cvtsi128_si32(_mm_add_epi32(h2, _mm_shuffle_epi32(h2, 0xb1)));
        d[b] = _cvtsh_ss(q.d);
        _mm256_storeu_si256((__m256i *)(dst + b * 32), to_unsigned ? _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)) : v);
    }
}
static void pk_act_signed(const float *x, uint8_t *dst, int64_t n) { pk_act_prep(x, dst, n, false); }
#if HT_X86_VNNI
static void pk_act_unsigned(const float *x, uint8_t *dst, int64_t n) { pk_act_prep(x, dst, n, true); }
#endif

HT_AI int32_t ld32(const uint8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }

/* ---- packing: rows r < nr of the group, the missing ones zero ---- */

/* Q4_0: block b of the group (18 R bytes at 18 R b) is quants[j][r] = row r's bytes 4j..4j+3 (j < 4; low
 * nibbles: elements 4j.., high: 16 + 4j..), then halves[r]: one stream, scales beside their quants (a
 * separate stream of scales measured 10% slower in decode). R = 8 or 16. */
HT_AI void pack_q4_0(const int R, const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) {
    const int64_t nb = n / 32;
    memset(dst, 0, (size_t)nb * 18 * R);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *q = dst + b * 18 * R;
        ht_half *h = (ht_half *)(q + 16 * R);
        for (int r = 0; r < R; r++) {
            const block_q4_0 *blk = (const block_q4_0 *)(src + (size_t)r * rb) + b;
            for (int j = 0; j < 4; j++)
                if (r < nr) memcpy(q + j * 4 * R + r * 4, blk->qs + 4 * j, 4);
                else memset(q + j * 4 * R + r * 4, 0x88, 4);   /* zero rows: nibbles 8 = weight 0 */
            if (r < nr) h[r] = blk->d;
        }
    }
}
static size_t pk_q4_0_x8_bytes(int64_t n) { return (size_t)(n / 32) * 18 * 8; }
static void pk_q4_0_x8_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) { pack_q4_0(8, src, rb, nr, n, dst); }

/* ---- Q4_0 x 8, 256-bit ---- */
#define PK8_NC 4
/* Q4_0 and Q5_0 (Q5: the fifth bits of pack_q5_0 ORed in at bit 4; weights 0..31, offset 16). Q4_0's 16
 * products per lane add in int16 (at most 16 * 15 * 127); Q5_0's would pass it, so its block halves are
 * summed apart. */
HT_AI void q4q5_0x8_tile(const bool Q5, const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as,
                         float *y, size_t ys) {
    const int nb = n / 32, B = Q5 ? 176 : 144;
    const __m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10), ones = _mm256_set1_epi16(1);
    __m256 acc[PK8_NC];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * B;
        ht_prefetch_l2(q, (size_t)B);
        __m256i s32[PK8_NC];   /* per token, the 8 rows' integer sums */
        if (!Q5) {   /* each unpacked vector feeds every token's int16 sum at once (HT_KEEP: 10% faster) */
            __m256i p[PK8_NC];
            HT_UNROLL
            for (int j = 0; j < 4; j++) {
                const __m256i v = ld256(q + 32 * j), wl = _mm256_and_si256(v, m4), wh = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                HT_UNROLL
                for (int c = 0; c < NC; c++) {
                    const uint8_t *aq = a + (size_t)c * as + (size_t)b * 32;
                    const __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(wl, _mm256_set1_epi32(ld32(aq + 4 * j))),
                                                       _mm256_maddubs_epi16(wh, _mm256_set1_epi32(ld32(aq + 16 + 4 * j))));
                    p[c] = j ? _mm256_add_epi16(p[c], t) : t;
                    HT_KEEP(p[c]);
                }
            }
            HT_UNROLL
            for (int c = 0; c < NC; c++) s32[c] = _mm256_madd_epi16(p[c], ones);
        } else {
            const __m256i hv = ld256(q + 128);
            __m256i w[8];
            HT_UNROLL
            for (int j = 0; j < 4; j++) {
                const __m256i v = ld256(q + 32 * j);
                w[j] = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_slli_epi32(hv, 4 - j), b4));
                w[4 + j] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_and_si256(_mm256_srli_epi32(hv, j), b4));
            }
            HT_UNROLL
            for (int c = 0; c < NC; c++) {
                const uint8_t *aq = a + (size_t)c * as + (size_t)b * 32;
                __m256i lo = _mm256_maddubs_epi16(w[0], _mm256_set1_epi32(ld32(aq)));
                __m256i hi = _mm256_maddubs_epi16(w[4], _mm256_set1_epi32(ld32(aq + 16)));
                HT_UNROLL
                for (int j = 1; j < 4; j++) {
                    lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(w[j], _mm256_set1_epi32(ld32(aq + 4 * j))));
                    hi = _mm256_add_epi16(hi, _mm256_maddubs_epi16(w[4 + j], _mm256_set1_epi32(ld32(aq + 16 + 4 * j))));
                }
                s32[c] = _mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones));
            }
        }
        const __m256 dw = _mm256_cvtph_ps(ld128(q + B - 16));
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const uint8_t *ac = a + (size_t)c * as;
            const float da = ((const float *)(ac + n))[b];
            const int32_t sa = ((const int32_t *)(ac + n + (size_t)nb * 4))[b];
            const __m256i i = _mm256_add_epi32(s32[c], _mm256_set1_epi32((Q5 ? -16 : -8) * sa));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(dw, _mm256_set1_ps(da)), acc[c]);
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) store8(y + (size_t)c * ys, nr, acc[c]);
}
HT_AI void q4_0x8_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    q4q5_0x8_tile(false, NC, n, g, nr, a, as, y, ys);
}

PK_TILE(pk_q4_0_x8_tile, q4_0x8_tile, 4)

static const ht_pack pk_q4_0_x8 = {"Q4_0x8", 8, PK8_NC, pk_q4_0_x8_bytes, pk_q4_0_x8_pack, pk_act_bytes, pk_act_signed,
                                   pk_q4_0_x8_tile, 0, NULL, NULL, NULL, NULL, 0};

/* A block of an x 8 nibble pack (quants[j][r] as Q4_0's) through a 16-entry table: w[j] the low nibbles of
 * dword j, w[4 + j] the high ones (PSHUFB). */
HT_AI void nibbles_x8(const uint8_t *q, __m256i tab, __m256i w[8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    HT_UNROLL
    for (int j = 0; j < 4; j++) {
        const __m256i v = ld256(q + 32 * j);
        w[j] = _mm256_shuffle_epi8(tab, _mm256_and_si256(v, m4));
        w[4 + j] = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
    }
}

/* IQ4_NL x 8: Q4_0's pack, the nibbles through the IQ4_NL table (signed, -127..113) by PSHUFB; PMADDUBSW
 * takes the activations' magnitudes and the weights with the activations' signs (PSIGNB; a weight is never
 * -128), a pair at most 2 * 127 * 127, widened to int32 after each product (PMADDWD by ones). */
HT_AI void iq4_nlx8_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    const int nb = n / 32, B = 144;
    const __m256i ones = _mm256_set1_epi16(1), tab = iq4nl_table();
    __m256 acc[PK8_NC];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * B;
        ht_prefetch_l2(q, (size_t)B);
        __m256i w[8];
        nibbles_x8(q, tab, w);
        const __m256 dw = _mm256_cvtph_ps(ld128(q + B - 16));
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const uint8_t *ac = a + (size_t)c * as, *aq = ac + (size_t)b * 32;
            __m256i s = _mm256_setzero_si256();
            HT_UNROLL
            for (int j = 0; j < 8; j++) {
                const __m256i x = _mm256_set1_epi32(ld32(aq + 4 * (j % 4) + 16 * (j / 4)));
                s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(x), _mm256_sign_epi8(w[j], x)), ones));
            }
            const float da = ((const float *)(ac + n))[b];
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(da)), acc[c]);
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) store8(y + (size_t)c * ys, nr, acc[c]);
}

PK_TILE(pk_iq4_nl_x8_tile, iq4_nlx8_tile, 4)

static const ht_pack pk_iq4_nl_x8 = {"IQ4_NLx8", 8, PK8_NC, pk_q4_0_x8_bytes, pk_q4_0_x8_pack, pk_act_bytes, pk_act_signed,
                                     pk_iq4_nl_x8_tile, 0, NULL, NULL, NULL, NULL, 0};

/* ---- MXFP4 x 8, 256-bit ----
 * Block b (17 R = 136 bytes at 136 b): quants[j][r] as Q4_0's, then the 8 rows' E8M0 bytes (made floats in
 * the kernel). The nibbles become the E2M1 values + 12 (0..24, PSHUFB) for PMADDUBSW; 8 products of a lane add
 * in int16 (at most 8 * 24 * 127), so each block half is summed apart, as Q5_0's; 12 * sum(a) comes off. */
HT_AI void pack_mxfp4(const int R, const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) {
    const int64_t nb = n / 32;
    memset(dst, 0, (size_t)nb * 17 * R);   /* missing rows: nibble 0 is the value 0 */
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *q = dst + b * 17 * R;
        for (int r = 0; r < nr; r++) {
            const block_mxfp4 *blk = (const block_mxfp4 *)(src + (size_t)r * rb) + b;
            for (int j = 0; j < 4; j++) memcpy(q + j * 4 * R + r * 4, blk->qs + 4 * j, 4);
            q[16 * R + r] = blk->e;
        }
    }
}

/* 2^(e - 128) of 8 E8M0 bytes at p (ht_e8m0_half). */
HT_AI __m256 e8m0x8(const uint8_t *p) {
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    const __m256i norm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(norm, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
}

static size_t pk_mxfp4_x8_bytes(int64_t n) { return (size_t)(n / 32) * 17 * 8; }
static void pk_mxfp4_x8_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) { pack_mxfp4(8, src, rb, nr, n, dst); }

HT_AI void mxfp4x8_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    const int nb = n / 32, B = 17 * 8;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_add_epi8(ld128(ht_kvalues_mxfp4), _mm_set1_epi8(12)));
    __m256 acc[PK8_NC];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * B;
        ht_prefetch_l2(q, (size_t)B);
        __m256i w[8];
        nibbles_x8(q, tab, w);
        const __m256 dw = e8m0x8(q + 128);
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const uint8_t *ac = a + (size_t)c * as;
            const uint8_t *aq = ac + (size_t)b * 32;
            __m256i lo = _mm256_maddubs_epi16(w[0], _mm256_set1_epi32(ld32(aq)));
            __m256i hi = _mm256_maddubs_epi16(w[4], _mm256_set1_epi32(ld32(aq + 16)));
            HT_UNROLL
            for (int j = 1; j < 4; j++) {
                lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(w[j], _mm256_set1_epi32(ld32(aq + 4 * j))));
                hi = _mm256_add_epi16(hi, _mm256_maddubs_epi16(w[4 + j], _mm256_set1_epi32(ld32(aq + 16 + 4 * j))));
            }
            const float da = ((const float *)(ac + n))[b];
            const int32_t sa = ((const int32_t *)(ac + n + (size_t)nb * 4))[b];
            const __m256i i = _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones)),
                                               _mm256_set1_epi32(-12 * sa));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(dw, _mm256_set1_ps(da)), acc[c]);
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) store8(y + (size_t)c * ys, nr, acc[c]);
}

PK_TILE(pk_mxfp4_x8_tile, mxfp4x8_tile, 4)

static const ht_pack pk_mxfp4_x8 = {"MXFP4x8", 8, PK8_NC, pk_mxfp4_x8_bytes, pk_mxfp4_x8_pack, pk_act_bytes, pk_act_signed,
                                    pk_mxfp4_x8_tile, 0, NULL, NULL, NULL, NULL, 0};

/* Q5_0: as Q4_0's layout, with the fifth bits between the nibbles and the halves: block b of the group
 * (22 R bytes at 22 R b) is quants[j][r] (16 R bytes, as Q4_0), then H[r] (4 bytes per row: bit j of byte t
 * is the fifth bit of element 4j + t, bit 4 + j that of element 16 + 4j + t), then halves[r]. A shift of
 * H puts the fifth bits of quants[j]'s low (or high) nibbles at bit 4 of each byte: the weights u = q + 16
 * (0..31) are one AND-OR away, and -16 * sum(a) comes off as for Q4_0. Missing rows are zeros (d = 0). */
HT_AI void pack_q5_0(const int R, const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) {
    const int64_t nb = n / 32;
    memset(dst, 0, (size_t)nb * 22 * R);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *q = dst + b * 22 * R, *hb = q + 16 * R;
        ht_half *h = (ht_half *)(hb + 4 * R);
        for (int r = 0; r < nr; r++) {
            const block_q5_0 *blk = (const block_q5_0 *)(src + (size_t)r * rb) + b;
            uint32_t qh;
            memcpy(&qh, blk->qh, 4);
            for (int j = 0; j < 4; j++) {
                memcpy(q + j * 4 * R + r * 4, blk->qs + 4 * j, 4);
                for (int t = 0; t < 4; t++)
                    hb[r * 4 + t] |= (uint8_t)(((qh >> (4 * j + t)) & 1) << j | ((qh >> (16 + 4 * j + t)) & 1) << (4 + j));
            }
            h[r] = blk->d;
        }
    }
}
static size_t pk_q5_0_x8_bytes(int64_t n) { return (size_t)(n / 32) * 22 * 8; }
static void pk_q5_0_x8_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) { pack_q5_0(8, src, rb, nr, n, dst); }

HT_AI void q5_0x8_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    q4q5_0x8_tile(true, NC, n, g, nr, a, as, y, ys);
}

PK_TILE(pk_q5_0_x8_tile, q5_0x8_tile, 4)

static const ht_pack pk_q5_0_x8 = {"Q5_0x8", 8, PK8_NC, pk_q5_0_x8_bytes, pk_q5_0_x8_pack, pk_act_bytes, pk_act_signed,
                                   pk_q5_0_x8_tile, 0, NULL, NULL, NULL, NULL, 0};

/* ---- Q8_0 x 8, 256-bit (AVX2, and the AVX-512 set without VNNI) ----
 * Block b (272 bytes at 272 b): quants[j][r] = row r's bytes 4j..4j+3 (j < 8), then halves[r]. Without
 * VPDPBUSD both factors are signed: PMADDUBSW takes |w| as the unsigned one and the activations with w's
 * sign (PSIGNB: exact, as an activation is never -128), then PMADDWD widens each pair (up to 2 * 128 * 127,
 * too big to add a second one in int16). Four simple operations per 32 products, and no horizontal sums:
 * the row-by-row kernel spends about twice that per block. */
static size_t pk_q8_0_x8_bytes(int64_t n) { return (size_t)(n / 32) * 34 * 8; }

static void pk_q8_0_x8_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) {
    const int64_t nb = n / 32;
    memset(dst, 0, pk_q8_0_x8_bytes(n));
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *q = dst + b * 272;
        ht_half *h = (ht_half *)(q + 256);
        for (int r = 0; r < nr; r++) {
            const block_q8_0 *blk = (const block_q8_0 *)(src + (size_t)r * rb) + b;
            for (int j = 0; j < 8; j++) memcpy(q + j * 32 + r * 4, blk->qs + 4 * j, 4);
            h[r] = blk->d;
        }
    }
}

HT_AI void q8_0x8_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    const int nb = n / 32;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[PK8_NC];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * 272;
        if (NC == 1) ht_prefetch_near(q, 272);
        else ht_prefetch(q, 272);
        __m256i s[PK8_NC];
        HT_UNROLL
        for (int h = 0; h < 2; h++) {   /* half a block at a time: 4 vectors of |w| stay in the 16 registers */
            __m256i u[4];
            HT_UNROLL
            for (int j = 0; j < 4; j++) u[j] = _mm256_abs_epi8(ld256(q + 32 * (4 * h + j)));
            HT_UNROLL
            for (int c = 0; c < NC; c++) {
                const uint8_t *aq = a + (size_t)c * as + (size_t)b * 32 + 16 * h;
                HT_UNROLL
                for (int j = 0; j < 4; j++) {
                    const __m256i x = _mm256_sign_epi8(_mm256_set1_epi32(ld32(aq + 4 * j)), ld256(q + 32 * (4 * h + j)));
                    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u[j], x), ones);
                    s[c] = h || j ? _mm256_add_epi32(s[c], p) : p;
                    HT_KEEP(s[c]);
                }
            }
        }
        const __m256 dw = _mm256_cvtph_ps(ld128(q + 256));
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const float da = ((const float *)(a + (size_t)c * as + n))[b];
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c]), _mm256_mul_ps(dw, _mm256_set1_ps(da)), acc[c]);
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) store8(y + (size_t)c * ys, nr, acc[c]);
}

PK_TILE(pk_q8_0_x8_tile, q8_0x8_tile, 4)

static const ht_pack pk_q8_0_x8 = {"Q8_0x8", 8, PK8_NC, pk_q8_0_x8_bytes, pk_q8_0_x8_pack, pk_act_bytes, pk_act_signed,
                                   pk_q8_0_x8_tile, 0, NULL, NULL, NULL, NULL, 0};

/* ---- Q4_K (and Q6_K below) ----
 * Activations: Q8_K's values q[n], then float d[n / 256], then int16 asum[n / 32] (each 32-element
 * sub-block's sum of q, in pairs (2k, 2k + 1) that one int32 broadcast carries), then int16 bsum[n / 16]
 * (Q8_K's sums of 16).
 * Super-block i of a group (R rows, 148 R bytes at 148 R i): quants[k][j][r] = row r's qs[32k + 4j..+3]
 * (k < 4, j < 8: low nibbles are sub-block 2k, high ones 2k + 1), then scales[s][r] (s < 8, bytes), then
 * mins[k][r][2] (m of sub-blocks 2k, 2k + 1), then halves d[r], then dmin[r]. Per row and super-block:
 * isum = sum_s scale_s * dot_s (dot_s: the sub-block's integer dot product), msum = sum_s m_s * asum_s,
 * and acc += (d * da) * isum, then acc -= (dmin * da) * msum. */
static size_t pk_k_act_bytes(int64_t n) { return (size_t)n + (size_t)(n / 256) * 4 + (size_t)(n / 32) * 2 + (size_t)(n / 16) * 2; }

static void pk_k_act_prep(const float *x, uint8_t *dst, int64_t n) {
    const int64_t nsb = n / 256;
    float *d = (float *)(dst + n);
    int16_t *as = (int16_t *)(dst + n + nsb * 4), *bs = as + n / 32;
    for (int64_t i = 0; i < nsb; i++) {
        block_q8_K q;
        q8_K_from_float(x + i * 256, &q, 256);
        memcpy(dst + i * 256, q.qs, 256);
        d[i] = q.d;
        for (int s = 0; s < 8; s++) as[i * 8 + s] = (int16_t)(q.bsums[2 * s] + q.bsums[2 * s + 1]);
        memcpy(bs + i * 16, q.bsums, 32);
    }
}

HT_AI void pack_q4_K(const int R, const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) {
    const int64_t nsb = n / 256;
    const size_t SB = (size_t)148 * R;
    memset(dst, 0, (size_t)nsb * SB);
    for (int64_t i = 0; i < nsb; i++) {
        uint8_t *q = dst + i * SB, *sc = q + 128 * R, *mn = sc + 8 * R;
        ht_half *d = (ht_half *)(mn + 8 * R), *dm = d + R;
        for (int r = 0; r < nr; r++) {
            const block_q4_K *b = (const block_q4_K *)(src + (size_t)r * rb) + i;
            uint8_t scl[8], mns[8];
            for (int j = 0; j < 8; j++) {   /* ggml's get_scale_min_k4 */
                if (j < 4) { scl[j] = b->scales[j] & 63; mns[j] = b->scales[j + 4] & 63; }
                else {
                    scl[j] = (uint8_t)((b->scales[j + 4] & 0xF) | (b->scales[j - 4] >> 6) << 4);
                    mns[j] = (uint8_t)((b->scales[j + 4] >> 4) | (b->scales[j] >> 6) << 4);
                }
            }
            for (int k = 0; k < 4; k++)
                for (int j = 0; j < 8; j++) memcpy(q + ((size_t)k * 8 + j) * 4 * R + r * 4, b->qs + 32 * k + 4 * j, 4);
            for (int s = 0; s < 8; s++) sc[s * R + r] = scl[s];
            for (int k = 0; k < 4; k++) { mn[(k * R + r) * 2] = mns[2 * k]; mn[(k * R + r) * 2 + 1] = mns[2 * k + 1]; }
            d[r] = b->d;
            dm[r] = b->dmin;
        }
    }
}
static size_t pk_q4_K_x8_bytes(int64_t n) { return (size_t)(n / 256) * 148 * 8; }
static void pk_q4_K_x8_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) { pack_q4_K(8, src, rb, nr, n, dst); }

HT_AI void q4_Kx8_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    const int nsb = n / 256;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    /* the 8 rows' scale bytes (broadcast) to lanes holding each row's scale in both int16 halves: one PMADDWD
     * then adds a lane's pair of int16 sums and scales it (a PMADDWD by ones and a PMULLD before) */
    const __m256i sc_dup = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,
                                            4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
    __m256 acc[PK8_NC];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_ps();
    for (int i = 0; i < nsb; i++) {
        const uint8_t *q = g + (size_t)i * 148 * 8, *sc = q + 128 * 8, *mn = sc + 64;
        ht_prefetch_l2(q, 148 * 8);
        __m256i isum[PK8_NC], msum[PK8_NC];
        HT_UNROLL
        for (int c = 0; c < NC; c++) isum[c] = msum[c] = _mm256_setzero_si256();
        HT_UNROLL
        for (int s = 0; s < 8; s++) {
            const int k = s / 2, sh = (s & 1) * 4;
            int64_t sc8;
            memcpy(&sc8, sc + s * 8, 8);
            const __m256i scale = _mm256_shuffle_epi8(_mm256_set1_epi64x(sc8), sc_dup);
            __m256i p[PK8_NC];
            HT_UNROLL
            for (int j = 0; j < 8; j++) {
                const __m256i w = _mm256_and_si256(_mm256_srli_epi16(ld256(q + ((size_t)k * 8 + j) * 32), sh), m4);
                HT_UNROLL
                for (int c = 0; c < NC; c++) {
                    const __m256i t = _mm256_maddubs_epi16(w, _mm256_set1_epi32(ld32(a + (size_t)c * as + (size_t)i * 256 + 32 * s + 4 * j)));
                    p[c] = j ? _mm256_add_epi16(p[c], t) : t;
                    HT_KEEP(p[c]);
                }
            }
            HT_UNROLL
            for (int c = 0; c < NC; c++) isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p[c], scale));
        }
        const __m256 dw = _mm256_cvtph_ps(ld128(mn + 64)), dmw = _mm256_cvtph_ps(ld128(mn + 80));
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const uint8_t *ac = a + (size_t)c * as;
            const int16_t *asum = (const int16_t *)(ac + n + (size_t)nsb * 4) + (size_t)i * 8;
            HT_UNROLL
            for (int k = 0; k < 4; k++)
                msum[c] = _mm256_add_epi32(msum[c], _mm256_madd_epi16(_mm256_cvtepu8_epi16(ld128(mn + k * 16)),
                                                                      _mm256_set1_epi32(ld32((const uint8_t *)(asum + 2 * k)))));
            const __m256 da = _mm256_set1_ps(((const float *)(ac + n))[i]);
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(dw, da), acc[c]);
            acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[c]), _mm256_mul_ps(dmw, da), acc[c]);
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) store8(y + (size_t)c * ys, nr, acc[c]);
}

PK_TILE(pk_q4_K_x8_tile, q4_Kx8_tile, 4)

static const ht_pack pk_q4_K_x8 = {"Q4_Kx8", 8, PK8_NC, pk_q4_K_x8_bytes, pk_q4_K_x8_pack, pk_k_act_bytes, pk_k_act_prep,
                                   pk_q4_K_x8_tile, 0, NULL, NULL, NULL, NULL, 0};

/* ---- Q6_K packing (x16 and x8) ----
 * Each row's values u = q + 32 (0..63) re-encoded per 32-element chunk s of a super-block: nibbles[j][r]
 * (4 bytes per row: byte t holds u[4j + t] & 15 low, u[16 + 4j + t] & 15 high), then H0[r], H1[r] (4 bytes
 * per row: bit 8t + 2j of H0 is the pair of high bits of u[4j + t], H1 the same for u[16 + 4j + t]); 24 R
 * bytes a chunk. After the 8 chunks: the int8 scales as pairs [s][r][2] (groups 2s, 2s + 1 of 16), then
 * d[r]: 210 R bytes per super-block, as in the file. Per row: isum = sum_g scale_g * dot_g(u, a) -
 * 32 * sum_g scale_g * bsum_g, acc += (d * da) * isum. */
HT_AI void pack_q6_K(const int R, const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) {
    const int64_t nsb = n / 256;
    memset(dst, 0, (size_t)nsb * 210 * R);
    for (int64_t i = 0; i < nsb; i++) {
        uint8_t *o = dst + i * 210 * R;
        int8_t *sc = (int8_t *)(o + 192 * R);
        ht_half *d = (ht_half *)(o + 208 * R);
        for (int r = 0; r < nr; r++) {
            const block_q6_K *b = (const block_q6_K *)(src + (size_t)r * rb) + i;
            uint8_t u[256];
            for (int h = 0; h < 2; h++)   /* ggml's Q6_K element order */
                for (int g = 0; g < 4; g++)
                    for (int l = 0; l < 32; l++)
                        u[128 * h + 32 * g + l] = (uint8_t)(((b->ql[64 * h + 32 * (g % 2) + l] >> (4 * (g / 2))) & 0xF) |
                                                           ((b->qh[32 * h + l] >> (2 * g)) & 3) << 4);
            for (int s = 0; s < 8; s++) {
                uint8_t *c = o + s * 24 * R;
                const uint8_t *v = u + 32 * s;
                for (int j = 0; j < 4; j++)
                    for (int t = 0; t < 4; t++) {
                        c[j * 4 * R + r * 4 + t] = (uint8_t)((v[4 * j + t] & 15) | (v[16 + 4 * j + t] & 15) << 4);
                        c[16 * R + r * 4 + t] |= (uint8_t)((v[4 * j + t] >> 4) << (2 * j));
                        c[20 * R + r * 4 + t] |= (uint8_t)((v[16 + 4 * j + t] >> 4) << (2 * j));
                    }
                sc[(s * R + r) * 2] = b->scales[2 * s];
                sc[(s * R + r) * 2 + 1] = b->scales[2 * s + 1];
            }
            d[r] = b->d;
        }
    }
}
static size_t pk_q6_K_x8_bytes(int64_t n) { return (size_t)(n / 256) * 210 * 8; }
static void pk_q6_K_x8_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) { pack_q6_K(8, src, rb, nr, n, dst); }

/* ---- Q6_K x 8, 256-bit: PMADDUBSW pairs (at most 2 * 63 * 128 each, two of them still fit int16), then
 * PMADDWD by the lane's int16 scale ---- */
HT_AI __m256i q6_hi8(__m256i h, const int j) {
    const __m256i s = j < 2 ? _mm256_slli_epi32(h, 4 - 2 * j) : j == 2 ? h : _mm256_srli_epi32(h, 2);
    return _mm256_and_si256(s, _mm256_set1_epi8(0x30));
}

HT_AI void q6_Kx8_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    const int nsb = n / 256;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[PK8_NC];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm256_setzero_ps();
    for (int i = 0; i < nsb; i++) {
        const uint8_t *o = g + (size_t)i * 210 * 8;
        ht_prefetch_l2(o, 210 * 8);
        __m256i isum[PK8_NC];
        HT_UNROLL
        for (int c = 0; c < NC; c++) isum[c] = _mm256_setzero_si256();
        for (int s = 0; s < 8; s++) {
            const uint8_t *ch = o + s * 24 * 8;
            const __m256i h0 = ld256(ch + 128), h1 = ld256(ch + 160);
            const __m256i scv = _mm256_cvtepi8_epi16(ld128(o + 192 * 8 + s * 16));   /* lanes: (scale 2s, 2s + 1) */
            const __m256i lo16 = _mm256_set1_epi32(0xFFFF);   /* each lane's scale in both of its int16 halves */
            const __m256i sc_lo = _mm256_or_si256(_mm256_and_si256(scv, lo16), _mm256_slli_epi32(scv, 16));
            const __m256i sc_hi = _mm256_or_si256(_mm256_srli_epi32(scv, 16), _mm256_andnot_si256(lo16, scv));
            /* a pair of weight vectors at a time, fed to every token (the sums kept a chain: HT_KEEP) */
            HT_UNROLL
            for (int jp = 0; jp < 2; jp++) {
                __m256i w[4];   /* low nibbles of 2jp, 2jp + 1, then their high nibbles */
                HT_UNROLL
                for (int k = 0; k < 2; k++) {
                    const __m256i v = ld256(ch + 32 * (2 * jp + k));
                    w[k] = _mm256_or_si256(_mm256_and_si256(v, m4), q6_hi8(h0, 2 * jp + k));
                    w[2 + k] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), q6_hi8(h1, 2 * jp + k));
                }
                HT_UNROLL
                for (int c = 0; c < NC; c++) {
                    const uint8_t *aq = a + (size_t)c * as + (size_t)i * 256 + 32 * s + 8 * jp;
                    const __m256i pl = _mm256_add_epi16(_mm256_maddubs_epi16(w[0], _mm256_set1_epi32(ld32(aq))),
                                                        _mm256_maddubs_epi16(w[1], _mm256_set1_epi32(ld32(aq + 4))));
                    const __m256i ph = _mm256_add_epi16(_mm256_maddubs_epi16(w[2], _mm256_set1_epi32(ld32(aq + 16))),
                                                        _mm256_maddubs_epi16(w[3], _mm256_set1_epi32(ld32(aq + 20))));
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(_mm256_madd_epi16(pl, sc_lo), _mm256_madd_epi16(ph, sc_hi)));
                    HT_KEEP(isum[c]);
                }
            }
            const __m256i sc_m32 = _mm256_mullo_epi16(scv, _mm256_set1_epi16(-32));
            HT_UNROLL
            for (int c = 0; c < NC; c++) {
                const int16_t *bs = (const int16_t *)(a + (size_t)c * as + n + (size_t)nsb * 4 + (size_t)(n / 32) * 2) + (size_t)i * 16 + 2 * s;
                isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(sc_m32, _mm256_set1_epi32(ld32((const uint8_t *)bs))));
            }
        }
        const __m256 dw = _mm256_cvtph_ps(ld128(o + 208 * 8));
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const __m256 da = _mm256_set1_ps(((const float *)(a + (size_t)c * as + n))[i]);
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(dw, da), acc[c]);
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) store8(y + (size_t)c * ys, nr, acc[c]);
}

PK_TILE(pk_q6_K_x8_tile, q6_Kx8_tile, 4)

static const ht_pack pk_q6_K_x8 = {"Q6_Kx8", 8, PK8_NC, pk_q6_K_x8_bytes, pk_q6_K_x8_pack, pk_k_act_bytes, pk_k_act_prep,
                                   pk_q6_K_x8_tile, 0, NULL, NULL, NULL, NULL, 0};

#if !HT_X86_AVX512   /* the AVX2 packs below: the AVX-512 sets install their x16 and x32 packs instead */
/* ---- F32 x 32 in 256 bits ----
 * Element k of the group's rows side by side (R elements of E bytes), widened to floats once for every token
 * of the tile; the activations are the float rows themselves (no act_prep). Each output is one chain of FMAs
 * in order of k, its lane of a vector: no horizontal sum, which in the row-major F32 tile cost as much as the
 * products when rows are short (stories260K's 64; the F32 tile read 88.8 GB/s x tokens at n = 64 and 79.1 at
 * n = 2048 where the packed layout read 78.8 and 86.8 on F16's half the bytes, Zen 3). */
HT_AI void pack_rows(const int R, const size_t E, const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) {
    memset(dst, 0, (size_t)n * E * R);
    for (int r = 0; r < nr; r++)
        for (int64_t k = 0; k < n; k++) memcpy(dst + (k * R + r) * E, src + (size_t)r * rb + k * E, E);
}

/* ---- F32 x 32 in 256 bits (AVX2): element k of 32 rows side by side (128 bytes). One token runs four
 * chains of FMAs, one per vector of 8 rows (with 16-row groups its two chains were latency-bound: 27.5 GB/s
 * in L2, and 2-thread decode of the 1B F16 file 13.6-14.1 t/s where the 512-bit kernel read 20.1). Several
 * tokens take the group as two halves of 16 rows, each broadcast activation feeding two FMAs (a 6-token
 * tile: 12 of the 16 registers), in blocks of 64 elements per half so the block stays in L1; the sums go
 * through memory between blocks. Either way each output is one chain of FMAs in order of k. ---- */
#define PK_HALF32A_NC 6
#define PK_HALF32A_KB 64
static size_t pk_f32_x32_bytes(int64_t n) { return (size_t)n * 128; }
static void pk_f32_x32_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) { pack_rows(32, 4, src, rb, nr, n, dst); }

HT_AI void f32x32a_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    const size_t E = 4;
    if (NC == 1) {
        const float *x = (const float *)a;
        __m256 acc[4];
        HT_UNROLL
        for (int v = 0; v < 4; v++) acc[v] = _mm256_setzero_ps();
        for (int k = 0; k < n; k++) {
            const uint8_t *p = g + (size_t)k * 32 * E;
            ht_prefetch(p, 32 * E);
            const __m256 xk = _mm256_set1_ps(x[k]);
            HT_UNROLL
            for (int v = 0; v < 4; v++) acc[v] = _mm256_fmadd_ps(_mm256_loadu_ps((const float *)p + 8 * v), xk, acc[v]);
        }
        float t[32];
        HT_UNROLL
        for (int v = 0; v < 4; v++) _mm256_storeu_ps(t + 8 * v, acc[v]);
        memcpy(y, t, (size_t)nr * sizeof(float));
        return;
    }
    float sums[2][PK_HALF32A_NC][16] __attribute__((aligned(32))) = {{{0}}};
    for (int k0 = 0; k0 < n; k0 += PK_HALF32A_KB) {
        const int k1 = HT_MIN(n, k0 + PK_HALF32A_KB);
#pragma GCC unroll 1
        for (int h = 0; h < 2; h++) {
            __m256 acc[PK_HALF32A_NC][2];   /* [token][rows 0-7, 8-15 of the half] */
            HT_UNROLL
            for (int c = 0; c < NC; c++) acc[c][0] = _mm256_load_ps(sums[h][c]), acc[c][1] = _mm256_load_ps(sums[h][c] + 8);
            for (int k = k0; k < k1; k++) {
                const uint8_t *p = g + (size_t)k * 32 * E + 16 * E * h;
                if (!h) ht_prefetch(p, 32 * E);
                const __m256 w0 = _mm256_loadu_ps((const float *)p), w1 = _mm256_loadu_ps((const float *)p + 8);
                HT_UNROLL
                for (int c = 0; c < NC; c++) {
                    const __m256 x = _mm256_set1_ps(((const float *)(a + (size_t)c * as))[k]);
                    acc[c][0] = _mm256_fmadd_ps(w0, x, acc[c][0]);
                    acc[c][1] = _mm256_fmadd_ps(w1, x, acc[c][1]);
                }
            }
            HT_UNROLL
            for (int c = 0; c < NC; c++) _mm256_store_ps(sums[h][c], acc[c][0]), _mm256_store_ps(sums[h][c] + 8, acc[c][1]);
        }
    }
    for (int c = 0; c < NC; c++) {
        memcpy(y + (size_t)c * ys, sums[0][c], (size_t)HT_MIN(nr, 16) * sizeof(float));
        if (nr > 16) memcpy(y + (size_t)c * ys + 16, sums[1][c], (size_t)(nr - 16) * sizeof(float));
    }
}
PK_TILE(pk_f32_x32a_tile, f32x32a_tile, PK_HALF32A_NC)
static const ht_pack pk_f32_x32a = {"F32x32", 32, PK_HALF32A_NC, pk_f32_x32_bytes, pk_f32_x32_pack, NULL, NULL,
                                    pk_f32_x32a_tile, 0, NULL, NULL, NULL, NULL, 0};

#endif   /* !HT_X86_AVX512 */

/* ---- F16 / BF16 as int16: 8 rows a group in 256 bits (PMADDWD), 16 in 512 (VPDPWSSD) ----
 * Floats per lane are bound by the FMA rate (so is llama.cpp's F16 prefill). PMADDWD does 16 multiply-adds
 * where a 256-bit FMA does 8; VPDPWSSD 32 where a 512-bit FMA does 16, at the same rate (Zen 5: 2.0 G of each a
 * second a core, and of ik_llama.cpp's VDPBF16PS, which needs F16 rounded to BF16's 7-bit mantissas). The
 * weights are rounded once at load to 14-bit integers on a grid per row and 256 elements (d = max |w| / 8191),
 * the activations to 14-bit integers per 32 (act_prep); a 32-element block's 32 products per lane then add
 * exactly in int32 (32 * 8191^2 < 2^31) and reach the float sum with one conversion and one FMA per token. The
 * grid step (2^-13 of the block's largest value) is 4-8 times finer than an F16 ulp at that value, and llama.cpp
 * rounds F16 activations to F16, more coarsely than this: on the F16 golden file the KL divergence stays below
 * the reference's own. Rows of any length: the tail of the last block is zeros on both sides.
 * Group layout (R = 8 or 16 rows): per super-block of 8 blocks (fewer at the end), float d[R] (one per row), then
 * for each block 16 pairs of elements, q[kp][r][2] (row r's elements 2kp, 2kp + 1: 4R bytes = one instruction).
 * Activation rows: int16 q[np] (np = n rounded up to 32), then float d[np / 32]. */
#define I16_QMAX 8191
HT_AI int i16_np(int64_t n) { return (int)((n + 31) / 32 * 32); }
HT_AI size_t i16_bytes(const int R, int64_t n) {
    const size_t nb = (size_t)i16_np(n) / 32;
    return nb * 64 * R + (nb + 7) / 8 * 4 * R;
}

/* max |v| over 32k floats (k = nv / 8 vectors), and the 14-bit grid of that block: d = max / 8191, 1/d (0 for an
 * all-zero or denormal block: no infinite 1/d). */
HT_AI float i16_grid(const float *v, int nv, float *id) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < nv; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(v + j)));
    const float mx = hmax_ps(m);
    *id = mx >= 1e-30f ? I16_QMAX / mx : 0;
    return mx >= 1e-30f ? mx / I16_QMAX : 0;
}

/* 32 floats to int16 round(v * id) (to nearest even), in order. */
HT_AI void i16_quant32(const float *v, float id, int16_t *q) {
    const __m256 s = _mm256_set1_ps(id);
    __m256i i32[4];
    HT_UNROLL
    for (int j = 0; j < 4; j++) i32[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(v + 8 * j), s));
    /* PACKSSDW works within 128-bit halves (0-3 8-11 4-7 12-15): a 64-bit permute puts them back in order */
    _mm256_storeu_si256((__m256i *)q, _mm256_permute4x64_epi64(_mm256_packs_epi32(i32[0], i32[1]), 0xd8));
    _mm256_storeu_si256((__m256i *)(q + 16), _mm256_permute4x64_epi64(_mm256_packs_epi32(i32[2], i32[3]), 0xd8));
}

HT_AI void pack_i16(const int R, const int T, const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) {
    const int nb = i16_np(n) / 32;
    memset(dst, 0, i16_bytes(R, n));
    for (int r = 0; r < nr; r++)   /* each row read front to back (a super-block of every row in turn: 1.4x the time) */
        for (int b0 = 0; b0 < nb; b0 += 8) {
            float *d = (float *)(dst + (size_t)b0 * 64 * R + (size_t)b0 / 8 * 4 * R);
            uint32_t *q = (uint32_t *)(d + R);   /* pairs of int16: [block][pair][row] */
            const int k0 = b0 * 32, len = (int)HT_MIN(n - k0, 256), nv = (len + 31) / 32 * 32;
            const uint8_t *w = src + (size_t)r * rb + (size_t)k0 * 2;
            float v[256], id;
            int k = 0;
            for (; k + FV_N <= len; k += FV_N) fv_storeu(v + k, fv_loadw(T, w, k));
            if (k < len) fv_storeu(v + k, fv_loadw_first(T, w, k, len - k));
            for (k = (len + FV_N - 1) / FV_N * FV_N; k < nv; k++) v[k] = 0;   /* the last block's tail */
            d[r] = i16_grid(v, nv, &id);
            int16_t u[256];
            uint32_t u2[128];
            for (int j = 0; j < nv; j += 32) i16_quant32(v + j, id, u + j);
            memcpy(u2, u, (size_t)nv * 2);
            for (int i = 0; i < nv / 2; i++) q[i * R + r] = u2[i];   /* pair i: block i / 16, pair i % 16 */
        }
}

static size_t pk_i16_act_bytes(int64_t n) { return (size_t)i16_np(n) * 2 + (size_t)i16_np(n) / 32 * 4; }

static void pk_i16_act_prep(const float *x, uint8_t *dst, int64_t n) {
    const int nb = i16_np(n) / 32;
    int16_t *q = (int16_t *)dst;
    float *d = (float *)(dst + (size_t)nb * 64);
    for (int b = 0; b < nb; b++) {
        const float *v = x + (int64_t)b * 32;
        float t[32] = {0}, id;
        if (n - (int64_t)b * 32 < 32) v = memcpy(t, v, (size_t)(n - (int64_t)b * 32) * sizeof(float));   /* the tail, zero-padded */
        d[b] = i16_grid(v, 32, &id);
        i16_quant32(v, id, q + b * 32);
    }
}

#if !HT_X86_AVX512
/* 8 rows (AVX2): a tile of 8 tokens keeps its float sums in memory (8 integer sums, the weights and a broadcast
 * take the registers). */
#define PK_I16_NC 8
static size_t pk_i16_x8_bytes(int64_t n) { return i16_bytes(8, n); }
static void pk_f16_i16_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) { pack_i16(8, HT_F16, src, rb, nr, n, dst); }
static void pk_bf16_i16_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) { pack_i16(8, HT_BF16, src, rb, nr, n, dst); }

HT_AI void i16x8_tile_pf(const bool PF, const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    const int nb = i16_np(n) / 32;
    float accm[PK_I16_NC][8] __attribute__((aligned(32))) = {{0}};
    __m256 dw = _mm256_setzero_ps();
    const uint8_t *p = g;
    for (int b = 0; b < nb; b++) {
        if (b % 8 == 0) dw = _mm256_loadu_ps((const float *)p), p += 32;
        if (PF && NC == 1) ht_prefetch_near(p, 512);
        else if (PF) ht_prefetch(p, 512);
        __m256i s[PK_I16_NC];
        HT_UNROLL
        for (int kp = 0; kp < 16; kp++) {
            const __m256i w = ld256(p + 32 * kp);
            HT_UNROLL
            for (int c = 0; c < NC; c++) {
                const __m256i pr = _mm256_madd_epi16(w, _mm256_set1_epi32(ld32(a + (size_t)c * as + (size_t)b * 64 + 4 * kp)));
                s[c] = kp ? _mm256_add_epi32(s[c], pr) : pr;
                HT_KEEP(s[c]);
            }
        }
        p += 512;
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const float da = ((const float *)(a + (size_t)c * as + (size_t)nb * 64))[b];
            _mm256_store_ps(accm[c], _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c]), _mm256_mul_ps(dw, _mm256_set1_ps(da)), _mm256_load_ps(accm[c])));
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) store8(y + (size_t)c * ys, nr, _mm256_load_ps(accm[c]));
}
/* The tile for groups already in L2 (prefill's token tiles after a chunk's first) leaves the prefetches out:
 * pp512 of the 1B F16 file 1.01-1.09x (bench_ab, Zen 3); with them out of every tile, 8-token batches, which
 * stream the weights from DRAM, ran 0.81x. */
HT_AI void i16x8_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    i16x8_tile_pf(true, NC, n, g, nr, a, as, y, ys);
}
HT_AI void i16x8_tile_cached(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    i16x8_tile_pf(false, NC, n, g, nr, a, as, y, ys);
}
PK_TILE(pk_i16_x8_tile, i16x8_tile, PK_I16_NC)
PK_TILE(pk_i16_x8_tile_cached, i16x8_tile_cached, PK_I16_NC)
static const ht_pack pk_f16_i16 = {"F16i16x8", 8, PK_I16_NC, pk_i16_x8_bytes, pk_f16_i16_pack, pk_i16_act_bytes,
                                   pk_i16_act_prep, pk_i16_x8_tile, 0.5f / I16_QMAX, pk_i16_x8_tile_cached, NULL, NULL, NULL, 0};
static const ht_pack pk_bf16_i16 = {"BF16i16x8", 8, PK_I16_NC, pk_i16_x8_bytes, pk_bf16_i16_pack, pk_i16_act_bytes,
                                    pk_i16_act_prep, pk_i16_x8_tile, 0.5f / I16_QMAX, pk_i16_x8_tile_cached, NULL, NULL, NULL, 0};

#endif   /* !HT_X86_AVX512 */

#if HT_X86_AVX512
HT_AI void store16(float *y, int nr, __m512 v) {
    if (nr == 16) _mm512_storeu_ps(y, v);
    else _mm512_mask_storeu_ps(y, (__mmask16)((1u << nr) - 1), v);
}

/* A tile entry with an instance for every token count up to 8: a verification batch of k = 3, 5, 6 or 7 tokens
 * (a draft of k - 1), or a server's batch of that many decoding slots, is one pass over the weights, not 4 + 2 + 1
 * passes each converting them again (F16: verify k7 cost 1.54-1.92 decode steps where k8 cost 1.02-1.29, hearth
 * bench --model-draft; the 1B Q4_0 file's pp3 / pp5 1.05 / 1.12x with it, bench_ab). The 16-row Q4_0 and Q8_0
 * packs use it too; not the larger Q5_0, MXFP4, Q6_K and IQ4_XS kernels: their instances took the sanitized
 * build's compile of quant_avx512vnni.c from 150 to 278 s, the critical path of the test run. */
#define PK_TILE_EVERY8(name, TILE)                                                                              \
    static void name(int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, int nc, float *y, size_t ys) { \
        for (; nc > 0; nc -= 8, a += 8 * as, y += 8 * ys) switch (nc) {                                         \
            case 1: TILE(1, n, g, nr, a, as, y, ys); break;                                                     \
            case 2: TILE(2, n, g, nr, a, as, y, ys); break;                                                     \
            case 3: TILE(3, n, g, nr, a, as, y, ys); break;                                                     \
            case 4: TILE(4, n, g, nr, a, as, y, ys); break;                                                     \
            case 5: TILE(5, n, g, nr, a, as, y, ys); break;                                                     \
            case 6: TILE(6, n, g, nr, a, as, y, ys); break;                                                     \
            case 7: TILE(7, n, g, nr, a, as, y, ys); break;                                                     \
            default: TILE(8, n, g, nr, a, as, y, ys); break;                                                    \
            }                                                                                                   \
    }
/* 32 rows a group (AVX-512): VPDPWSSD with VNNI, else VPMADDWD + VPADDD. The group is two streams of 16 rows
 * (a block's halves side by side, 64 bytes each per pair of elements), so each broadcast activation feeds two
 * products: with one 16-row stream the tile's 8 broadcasts + 1 load per 8 products ran 4.6 G products/s in L1
 * where two streams run 6.1 (one thread, Zen 5; the model's pp512 1.06x). Six tokens a tile keep the int32 sums
 * and the float sums of both streams in 29 registers (eight spill: pp512 0.97x). A block's int32 sums are exact
 * in any order; the float steps (conversion, scale product, one FMA per block, stream and token, in block order)
 * are the same in the tile, decode and small-batch entries: every output is bit-identical whatever the batch.
 * NC tokens against G consecutive groups: 2G streams and 2G x NC chains in flight, each broadcast shared. PF:
 * prefetch the weights ahead (the decode entry 1.035x with it); the tiles that find a chunk's groups in L2
 * (tile_cached) go without. */
HT_AI __m512i dpwssd16(__m512i s, __m512i w, __m512i x) {
#if HT_X86_VNNI
    return _mm512_dpwssd_epi32(s, w, x);
#else
    return _mm512_add_epi32(s, _mm512_madd_epi16(w, x));
#endif
}
/* Stream t's sums (rows 16t.. of G 32-row groups; the last group's rows: nr) for NC tokens. */
HT_AI void store_stream(const int NC, int t, int G, int nr, const __m512 *acc, float *y, size_t ys) {
    const int m = t / 2 < G - 1 ? 16 : HT_MIN(16, nr - 16 * (t % 2));
    if (m > 0)
        HT_UNROLL
        for (int c = 0; c < NC; c++) store16(y + (size_t)c * ys + 16 * t, m, acc[c]);
}
#define PK_I16X32_NC 6
#define PK_I16X32_TNC 8   /* the small-batch entry's most tokens (a draft of 7) */
#define PK_I16X32_G 2
HT_AI void i16x32_tiles_g(const bool PF, const int G, const int NC, int n, const uint8_t *g, int nr, const uint8_t *a,
                          size_t as, float *y, size_t ys) {
    const int nb = i16_np(n) / 32, S = 2 * G;
    const size_t gb = i16_bytes(32, n);
    __m512 acc[2 * PK_I16X32_G][PK_I16X32_NC], dw[2 * PK_I16X32_G];
    HT_UNROLL
    for (int t = 0; t < S; t++) {
        dw[t] = _mm512_setzero_ps();
        HT_UNROLL
        for (int c = 0; c < NC; c++) acc[t][c] = _mm512_setzero_ps();
    }
    const uint8_t *p = g;   /* the first group's; stream t's at p + (t / 2) * gb + (t % 2) * 64 */
    for (int b = 0; b < nb; b++) {
        if (b % 8 == 0) {
            HT_UNROLL
            for (int t = 0; t < S; t++) dw[t] = _mm512_loadu_ps((const float *)(p + (t / 2) * gb + (t % 2) * 64));
            p += 128;
        }
        if (PF)
            HT_UNROLL
            for (int j = 0; j < G; j++) ht_prefetch(p + j * gb, 2048);
        __m512i s[2 * PK_I16X32_G][PK_I16X32_NC];
        HT_UNROLL
        for (int t = 0; t < S; t++)
            HT_UNROLL
            for (int c = 0; c < NC; c++) s[t][c] = _mm512_setzero_si512();
        HT_UNROLL
        for (int kp = 0; kp < 16; kp++) {
            __m512i w[2 * PK_I16X32_G];
            HT_UNROLL
            for (int t = 0; t < S; t++) w[t] = _mm512_loadu_si512(p + (t / 2) * gb + 128 * kp + (t % 2) * 64);
            HT_UNROLL
            for (int c = 0; c < NC; c++) {
                const __m512i x = _mm512_set1_epi32(ld32(a + (size_t)c * as + (size_t)b * 64 + 4 * kp));
                HT_UNROLL
                for (int t = 0; t < S; t++) s[t][c] = dpwssd16(s[t][c], w[t], x);
            }
        }
        p += 2048;
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const __m512 da = _mm512_set1_ps(((const float *)(a + (size_t)c * as + (size_t)nb * 64))[b]);
            HT_UNROLL
            for (int t = 0; t < S; t++)
                acc[t][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t][c]), _mm512_mul_ps(dw[t], da), acc[t][c]);
        }
    }
    HT_UNROLL
    for (int t = 0; t < S; t++) store_stream(NC, t, G, nr, acc[t], y, ys);
}
HT_AI void i16x32_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    i16x32_tiles_g(true, 1, NC, n, g, nr, a, as, y, ys);
}
HT_AI void i16x32_tile_cached(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    i16x32_tiles_g(false, 1, NC, n, g, nr, a, as, y, ys);
}
PK_TILE(pk_i16x32_tile, i16x32_tile, PK_I16X32_NC)
PK_TILE(pk_i16x32_tile_cached, i16x32_tile_cached, PK_I16X32_NC)
/* Runs of G groups, then the rest one group at a time through the tile entry (its instances: every inlined copy of
 * the kernel costs compile time, and the sanitized build's compile of quant_avx512vnni.c is the test run's critical
 * path). A batch of 7 or 8 tokens (a draft's verification) goes group by group, the tile's 6 + 1 or 6 + 2 passes
 * finding the group in L2: as matmul's token tiles did it, each pass streamed the chunk from memory again (verify
 * k7 1.33, k8 1.62 decode steps against k6 1.15). */
#define I16X32_RUN_G(G, NC)                                                                                      \
    for (; j + G <= ng; j += G) i16x32_tiles_g(true, G, NC, n, g + j * gb, j + G == ng ? nr : 32, a, as, y + 32 * j, ys);
#define I16X32_RUN_REST(NC)                                                                                      \
    for (; j < ng; j++) pk_i16x32_tile(n, g + j * gb, j == ng - 1 ? nr : 32, a, as, NC, y + 32 * j, ys);
static void pk_i16x32_decode(int n, const uint8_t *g, int ng, int nr, const uint8_t *a, float *y) {
    const size_t gb = i16_bytes(32, n), as = 0, ys = 0;
    int j = 0;
    I16X32_RUN_G(2, 1) I16X32_RUN_REST(1)
}
static void pk_i16x32_tiles(int n, const uint8_t *g, int ng, int nr, const uint8_t *a, size_t as, int nc, float *y, size_t ys) {
    const size_t gb = i16_bytes(32, n);
    int j = 0;
    if (nc == 2) I16X32_RUN_G(2, 2)
    if (nc == 5) I16X32_RUN_G(1, 5)   /* one pass: the tile entry's 5 is 4 + 1 (verify k5 1.42 against 1.03-1.10) */
    I16X32_RUN_REST(nc)
}
static size_t pk_i16_x32_bytes(int64_t n) { return i16_bytes(32, n); }
static void pk_f16_i16x32_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) { pack_i16(32, HT_F16, src, rb, nr, n, dst); }
static void pk_bf16_i16x32_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) { pack_i16(32, HT_BF16, src, rb, nr, n, dst); }
static const ht_pack pk_f16_i16x32 = {"F16i16x32", 32, PK_I16X32_NC, pk_i16_x32_bytes, pk_f16_i16x32_pack, pk_i16_act_bytes,
                                      pk_i16_act_prep, pk_i16x32_tile, 0.5f / I16_QMAX, pk_i16x32_tile_cached,
                                      pk_i16x32_decode, NULL, pk_i16x32_tiles, PK_I16X32_TNC};
static const ht_pack pk_bf16_i16x32 = {"BF16i16x32", 32, PK_I16X32_NC, pk_i16_x32_bytes, pk_bf16_i16x32_pack, pk_i16_act_bytes,
                                       pk_i16_act_prep, pk_i16x32_tile, 0.5f / I16_QMAX, pk_i16x32_tile_cached,
                                       pk_i16x32_decode, NULL, pk_i16x32_tiles, PK_I16X32_TNC};

#if HT_X86_VNNI
/* ---- BF16 x 32 with VDPBF16PS (AVX512_BF16, checked at install) ----
 * BF16 weights as they are, the activations rounded to BF16 (to nearest even, as the reference's BF16 vec_dot
 * rounds them): one VDPBF16PS does 32 products into float lanes, so no block sums to convert and scale as the
 * 14-bit pack needs (3 float steps per 16 products). Layout: per pair of elements (2kp, 2kp + 1) the 32 rows'
 * pairs, two streams of 16 rows side by side (64 bytes each); an odd n ends with a zero. Activation rows: BF16
 * pairs (n rounded up to even). Each output is one chain of VDPBF16PS in order of kp, the same in the tile, decode
 * and small-batch entries: bit-identical whatever the batch. Eight tokens x two streams take 16 accumulators.
 * Against the 14-bit pack (bench_ab, Zen 5, 1B BF16, both orders): pp512 1.15-1.17x, decode 1.01-1.04x (one group
 * a call without prefetch; two groups 0.93x, prefetch 0.91x, into L2 0.85x). The golden's KL goes from 7.7e-6
 * to 1.26e-5, the reference's own 1.25e-5 (it rounds the activations the same way). */
#define HT_BF16_AI static inline __attribute__((always_inline, target("avx512bf16")))
#define PK_BF16X32_NC 8
static size_t pk_bf16_x32_bytes(int64_t n) { return (size_t)(n + 1) / 2 * 128; }
static void pk_bf16_x32_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) {
    memset(dst, 0, pk_bf16_x32_bytes(n));
    for (int r = 0; r < nr; r++) {
        const uint8_t *w = src + (size_t)r * rb;
        for (int64_t kp = 0; kp < n / 2; kp++) memcpy(dst + kp * 128 + r * 4, w + kp * 4, 4);
        if (n & 1) memcpy(dst + (n / 2) * 128 + r * 4, w + (n - 1) * 2, 2);
    }
}
static size_t pk_bf16_act_bytes(int64_t n) { return (size_t)(n + 1) / 2 * 4; }
/* f32_to_bf16 (common.h) 16 at a time */
static void pk_bf16_act_prep(const float *x, uint8_t *dst, int64_t n) {
    int64_t k = 0;
    const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    for (; k < n; k += 16) {
        const __mmask16 m = n - k >= 16 ? 0xffff : (__mmask16)((1u << (n - k)) - 1);
        const __m512i u = _mm512_castps_si512(_mm512_maskz_loadu_ps(m, x + k));
        const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                                                             _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)))), 16);
        const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
        const __m512i h = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(64));
        _mm256_mask_storeu_epi16(dst + k * 2, m, _mm512_cvtepi32_epi16(h));
    }
    if (n & 1) memset(dst + n * 2, 0, 2);
}
/* NC tokens against G consecutive groups (2G streams, 2G x NC chains). */
#define BF16X32_PAIRS(K)                                                                                          \
    HT_UNROLL                                                                                                     \
    for (int kp = k0; kp < k0 + (K); kp++) {                                                                      \
        const uint8_t *p = g + (size_t)kp * 128;                                                                  \
        __m512i w[2 * PK_I16X32_G];                                                                               \
        HT_UNROLL                                                                                                 \
        for (int t = 0; t < S; t++) w[t] = _mm512_loadu_si512(p + (t / 2) * gb + (t % 2) * 64);                   \
        HT_UNROLL                                                                                                 \
        for (int c = 0; c < NC; c++) {                                                                            \
            const __m512bh x = (__m512bh)_mm512_set1_epi32(ld32(a + (size_t)c * as + 4 * (size_t)kp));          \
            HT_UNROLL                                                                                             \
            for (int t = 0; t < S; t++) acc[t][c] = _mm512_dpbf16_ps(acc[t][c], (__m512bh)w[t], x);             \
        }                                                                                                         \
    }
HT_BF16_AI void bf16x32_tiles_g(const bool PF, const int G, const int NC, int n, const uint8_t *g, int nr, const uint8_t *a,
                                size_t as, float *y, size_t ys) {
    const int np = (n + 1) / 2, S = 2 * G;
    const size_t gb = pk_bf16_x32_bytes(n);
    __m512 acc[2 * PK_I16X32_G][PK_BF16X32_NC];
    HT_UNROLL
    for (int t = 0; t < S; t++)
        HT_UNROLL
        for (int c = 0; c < NC; c++) acc[t][c] = _mm512_setzero_ps();
    for (int k0 = 0; k0 < np; k0 += 8) {   /* 8 pairs (1 KiB of each group) a step */
        if (PF)
            HT_UNROLL
            for (int j = 0; j < G; j++) ht_prefetch(g + j * gb + (size_t)k0 * 128, 1024);
        if (k0 + 8 <= np) BF16X32_PAIRS(8)
        else BF16X32_PAIRS(np - k0)
    }
    HT_UNROLL
    for (int t = 0; t < S; t++) store_stream(NC, t, G, nr, acc[t], y, ys);
}
HT_BF16_AI void bf16x32_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    bf16x32_tiles_g(true, 1, NC, n, g, nr, a, as, y, ys);
}
HT_BF16_AI void bf16x32_tile_cached(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    bf16x32_tiles_g(false, 1, NC, n, g, nr, a, as, y, ys);
}
PK_TILE_A(__attribute__((target("avx512bf16"))), pk_bf16x32_tile, bf16x32_tile, PK_BF16X32_NC)
PK_TILE_A(__attribute__((target("avx512bf16"))), pk_bf16x32_tile_cached, bf16x32_tile_cached, PK_BF16X32_NC)
/* As the integer pack's: runs of two groups for 2 tokens, the rest group by group through the tile entries. */
__attribute__((target("avx512bf16"))) static void pk_bf16x32_decode(int n, const uint8_t *g, int ng, int nr, const uint8_t *a, float *y) {
    const size_t gb = pk_bf16_x32_bytes(n);
    for (int j = 0; j < ng; j++) pk_bf16x32_tile_cached(n, g + j * gb, j == ng - 1 ? nr : 32, a, 0, 1, y + 32 * j, 0);
}
__attribute__((target("avx512bf16"))) static void pk_bf16x32_tiles(int n, const uint8_t *g, int ng, int nr, const uint8_t *a,
                                                                   size_t as, int nc, float *y, size_t ys) {
    const size_t gb = pk_bf16_x32_bytes(n);
    int j = 0;
    if (nc == 2)
        for (; j + 2 <= ng; j += 2) bf16x32_tiles_g(true, 2, 2, n, g + j * gb, j + 2 == ng ? nr : 32, a, as, y + 32 * j, ys);
    for (; j < ng; j++) pk_bf16x32_tile(n, g + j * gb, j == ng - 1 ? nr : 32, a, as, nc, y + 32 * j, ys);
}
static const ht_pack pk_bf16_x32 = {"BF16x32", 32, PK_BF16X32_NC, pk_bf16_x32_bytes, pk_bf16_x32_pack, pk_bf16_act_bytes,
                                    pk_bf16_act_prep, pk_bf16x32_tile, 1.0f / 512, pk_bf16x32_tile_cached,
                                    pk_bf16x32_decode, NULL, pk_bf16x32_tiles, 0};
#endif

#endif

#if HT_X86_VNNI
/* ---- Q4_0 x 16, 512-bit VNNI ---- */
#define PK16_NC 8
static size_t pk_q4_0_x16_bytes(int64_t n) { return (size_t)(n / 32) * 18 * 16; }
static void pk_q4_0_x16_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) { pack_q4_0(16, src, rb, nr, n, dst); }


/* Q4_0, Q5_0 and IQ4_NL (Q5: the fifth bits of pack_q5_0 ORed in at bit 4, weights 0..31, offset 16; NL: IQ4_NL,
 * whose blocks are Q4_0's layout, the nibbles looked up in its table + 128 by PSHUFB, offset 128). */
HT_AI void q4q5_0x16_tile(const bool Q5, const bool NL, const int NC, int n, const uint8_t *g, int nr, const uint8_t *a,
                          size_t as, float *y, size_t ys) {
    const int nb = n / 32, B = Q5 ? 352 : 288;
    const __m512i m4 = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10);
    const __m512i tab = _mm512_broadcast_i32x4(_mm_xor_si128(ld128(ht_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
    __m512 acc[PK16_NC];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * B;
        ht_prefetch(q, (size_t)B);
        const __m512i hv = Q5 ? _mm512_loadu_si512(q + 256) : _mm512_setzero_si512();
        __m512i w[8];
        HT_UNROLL
        for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_loadu_si512(q + 64 * j);
            w[j] = _mm512_and_si512(v, m4);
            w[4 + j] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
            if (NL) w[j] = _mm512_shuffle_epi8(tab, w[j]), w[4 + j] = _mm512_shuffle_epi8(tab, w[4 + j]);
            if (Q5) {   /* a | (b & c) */
                w[j] = _mm512_ternarylogic_epi32(w[j], _mm512_slli_epi32(hv, 4 - j), b4, 0xf8);
                w[4 + j] = _mm512_ternarylogic_epi32(w[4 + j], _mm512_srli_epi32(hv, j), b4, 0xf8);
            }
        }
        const __m512 dw = _mm512_cvtph_ps(ld256(q + B - 32));
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const uint8_t *ac = a + (size_t)c * as;
            const uint8_t *aq = ac + (size_t)b * 32;
            const int32_t sa = ((const int32_t *)(ac + n + (size_t)nb * 4))[b];
            __m512i lo = _mm512_set1_epi32((NL ? -128 : Q5 ? -16 : -8) * sa), hi = _mm512_setzero_si512();
            HT_UNROLL
            for (int j = 0; j < 4; j++) {
                lo = _mm512_dpbusd_epi32(lo, w[j], _mm512_set1_epi32(ld32(aq + 4 * j)));
                hi = _mm512_dpbusd_epi32(hi, w[4 + j], _mm512_set1_epi32(ld32(aq + 16 + 4 * j)));
            }
            const float da = ((const float *)(ac + n))[b];
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi)), _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[c]);
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) store16(y + (size_t)c * ys, nr, acc[c]);
}
HT_AI void q4_0x16_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    q4q5_0x16_tile(false, false, NC, n, g, nr, a, as, y, ys);
}
HT_AI void q5_0x16_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    q4q5_0x16_tile(true, false, NC, n, g, nr, a, as, y, ys);
}
HT_AI void iq4_nlx16_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    q4q5_0x16_tile(false, true, NC, n, g, nr, a, as, y, ys);
}

/* One token over G 16-row groups at once (ht_pack.decode) for the Q4_0, Q5_0, IQ4_NL, MXFP4 and Q8_0 packs:
 * G weight streams and 2 G chains of VPDPBUSD in flight where the one-token tile had one and two. From L2 it
 * reads only ~5% faster, but from DRAM it keeps more lines coming: 2-thread decode of the Qwen3.5-4B Q4_0 file
 * 1.15x, the 1B Q4_0 1.03x, 1B Q8_0 1.2x, gpt-oss-20b (MXFP4 experts) 1.1-1.3x (Zen 5, bench_ab both ways).
 * Q6_K's tile lost 3-6% with two groups a call: it keeps its tile. Integer sums are exact whatever their
 * order and each output's float operations are the tile's, in its order: bit-identical. */
enum { PK16_Q4_0, PK16_Q5_0, PK16_IQ4_NL, PK16_MXFP4, PK16_Q8_0 };
#define PK16_DG 4
HT_AI void x16_decode_g(const int K, const int G, int n, const uint8_t *g, int nr, const uint8_t *a, float *y) {
    const int nb = n / 32, B = K == PK16_Q5_0 ? 352 : K == PK16_MXFP4 ? 272 : K == PK16_Q8_0 ? 576 : 288;
    const size_t gb = (size_t)nb * B;
    const __m512i m4 = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10);
    const __m512i tab = _mm512_broadcast_i32x4(_mm_xor_si128(ld128(K == PK16_MXFP4 ? ht_kvalues_mxfp4 : ht_kvalues_iq4nl),
                                                             _mm_set1_epi8((char)0x80)));
    const int off = K == PK16_Q4_0 ? -8 : K == PK16_Q5_0 ? -16 : -128;
    const float *da_b = (const float *)(a + n);
    const int32_t *sa_b = (const int32_t *)(a + n + (size_t)nb * 4);
    __m512 acc[PK16_DG];
    HT_UNROLL
    for (int j = 0; j < G; j++) acc[j] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *aq = a + (size_t)b * 32;
        const __m512 da = _mm512_set1_ps(da_b[b]);
        HT_UNROLL
        for (int j = 0; j < G; j++) {
            const uint8_t *q = g + j * gb + (size_t)b * B;
            ht_prefetch(q, (size_t)B);
            __m512i lo, hi = _mm512_setzero_si512();
            __m512 dw;
            if (K == PK16_Q8_0) {   /* unsigned activations: sum((a + 128) * w) - 128 * sum(w) */
                lo = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_cvtepi16_epi32(ld256(q + 544)), 7));
                HT_UNROLL
                for (int i = 0; i < 4; i++) {
                    lo = _mm512_dpbusd_epi32(lo, _mm512_set1_epi32(ld32(aq + 4 * i)), _mm512_loadu_si512(q + 64 * i));
                    hi = _mm512_dpbusd_epi32(hi, _mm512_set1_epi32(ld32(aq + 16 + 4 * i)), _mm512_loadu_si512(q + 256 + 64 * i));
                }
                dw = _mm512_cvtph_ps(ld256(q + 512));
            } else {
                const __m512i hv = K == PK16_Q5_0 ? _mm512_loadu_si512(q + 256) : _mm512_setzero_si512();
                lo = _mm512_set1_epi32(off * sa_b[b]);
                HT_UNROLL
                for (int i = 0; i < 4; i++) {
                    const __m512i v = _mm512_loadu_si512(q + 64 * i);
                    __m512i wl = _mm512_and_si512(v, m4), wh = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                    if (K == PK16_IQ4_NL || K == PK16_MXFP4) wl = _mm512_shuffle_epi8(tab, wl), wh = _mm512_shuffle_epi8(tab, wh);
                    if (K == PK16_Q5_0) {
                        wl = _mm512_ternarylogic_epi32(wl, _mm512_slli_epi32(hv, 4 - i), b4, 0xf8);
                        wh = _mm512_ternarylogic_epi32(wh, _mm512_srli_epi32(hv, i), b4, 0xf8);
                    }
                    lo = _mm512_dpbusd_epi32(lo, wl, _mm512_set1_epi32(ld32(aq + 4 * i)));
                    hi = _mm512_dpbusd_epi32(hi, wh, _mm512_set1_epi32(ld32(aq + 16 + 4 * i)));
                }
                if (K == PK16_MXFP4) {
                    const __m512i e = _mm512_cvtepu8_epi32(ld128(q + 256));
                    const __m512i norm = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
                    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
                    dw = _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), norm, sub));
                } else dw = _mm512_cvtph_ps(ld256(q + B - 32));
            }
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi)), _mm512_mul_ps(dw, da), acc[j]);
        }
    }
    HT_UNROLL
    for (int j = 0; j < G; j++) store16(y + 16 * j, j == G - 1 ? nr : 16, acc[j]);
}
HT_AI void x16_decode(const int K, int n, const uint8_t *g, int ng, int nr, const uint8_t *a, float *y) {
    const size_t gb = (size_t)(n / 32) * (K == PK16_Q5_0 ? 352 : K == PK16_MXFP4 ? 272 : K == PK16_Q8_0 ? 576 : 288);
    int j = 0;
    for (; j + PK16_DG <= ng; j += PK16_DG) x16_decode_g(K, PK16_DG, n, g + j * gb, j + PK16_DG == ng ? nr : 16, a, y + 16 * j);
    if (j + 2 <= ng) x16_decode_g(K, 2, n, g + j * gb, j + 2 == ng ? nr : 16, a, y + 16 * j), j += 2;
    if (j < ng) x16_decode_g(K, 1, n, g + j * gb, nr, a, y + 16 * j);
}
#define PK16_DECODE(name, K) \
    static void name(int n, const uint8_t *g, int ng, int nr, const uint8_t *a, float *y) { x16_decode(K, n, g, ng, nr, a, y); }
PK16_DECODE(pk_q4_0_x16_decode, PK16_Q4_0)
PK16_DECODE(pk_q5_0_x16_decode, PK16_Q5_0)
PK16_DECODE(pk_iq4_nl_x16_decode, PK16_IQ4_NL)
PK16_DECODE(pk_mxfp4_x16_decode, PK16_MXFP4)
PK16_DECODE(pk_q8_0_x16_decode, PK16_Q8_0)

PK_TILE_EVERY8(pk_q4_0_x16_tile, q4_0x16_tile)

static const ht_pack pk_q4_0_x16 = {"Q4_0x16", 16, PK16_NC, pk_q4_0_x16_bytes, pk_q4_0_x16_pack, pk_act_bytes,
                                    pk_act_signed, pk_q4_0_x16_tile, 0, NULL, pk_q4_0_x16_decode, NULL, NULL, 0};

/* IQ4_NL x 16: Q4_0's pack (the same block layout), its nibbles through the IQ4_NL table in the tile. */
PK_TILE(pk_iq4_nl_x16_tile, iq4_nlx16_tile, 8)
static const ht_pack pk_iq4_nl_x16 = {"IQ4_NLx16", 16, PK16_NC, pk_q4_0_x16_bytes, pk_q4_0_x16_pack, pk_act_bytes,
                                      pk_act_signed, pk_iq4_nl_x16_tile, 0, NULL, pk_iq4_nl_x16_decode, NULL, NULL, 0};

/* ---- Q5_0 x 16, 512-bit VNNI (layout at pack_q5_0) ---- */
static size_t pk_q5_0_x16_bytes(int64_t n) { return (size_t)(n / 32) * 22 * 16; }
static void pk_q5_0_x16_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) { pack_q5_0(16, src, rb, nr, n, dst); }

PK_TILE(pk_q5_0_x16_tile, q5_0x16_tile, 8)

static const ht_pack pk_q5_0_x16 = {"Q5_0x16", 16, PK16_NC, pk_q5_0_x16_bytes, pk_q5_0_x16_pack, pk_act_bytes,
                                    pk_act_signed, pk_q5_0_x16_tile, 0, NULL, pk_q5_0_x16_decode, NULL, NULL, 0};

/* ---- MXFP4 x 16, 512-bit VNNI ----
 * Block b (17 R = 272 bytes at 272 b, the file's size): quants[j][r] as Q4_0's (row r's nibble bytes 4j..4j+3),
 * then the 16 rows' E8M0 scale bytes, turned into floats in the kernel (2^(e - 128), ht_e8m0_half). The
 * nibbles become the E2M1 table's values + 128 (PSHUFB), unsigned for VPDPBUSD; 128 * sum(a) comes off. Missing
 * rows are zeros (nibble 0 is the value 0). */
static size_t pk_mxfp4_x16_bytes(int64_t n) { return (size_t)(n / 32) * 17 * 16; }

static void pk_mxfp4_x16_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) {
    const int64_t nb = n / 32;
    memset(dst, 0, (size_t)nb * 17 * 16);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *q = dst + b * 17 * 16;
        for (int r = 0; r < nr; r++) {
            const block_mxfp4 *blk = (const block_mxfp4 *)(src + (size_t)r * rb) + b;
            for (int j = 0; j < 4; j++) memcpy(q + j * 64 + r * 4, blk->qs + 4 * j, 4);
            q[256 + r] = blk->e;
        }
    }
}

HT_AI void mxfp4x16_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    const int nb = n / 32, B = 17 * 16;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i tab = _mm512_broadcast_i32x4(_mm_xor_si128(ld128(ht_kvalues_mxfp4), _mm_set1_epi8((char)0x80)));
    __m512 acc[PK16_NC];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * B;
        ht_prefetch(q, (size_t)B);
        __m512i w[8];
        HT_UNROLL
        for (int j = 0; j < 4; j++) {
            const __m512i v = _mm512_loadu_si512(q + 64 * j);
            w[j] = _mm512_shuffle_epi8(tab, _mm512_and_si512(v, m4));
            w[4 + j] = _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
        }
        const __m512i e = _mm512_cvtepu8_epi32(ld128(q + 256));
        const __m512i norm = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
        const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
        const __m512 dw = _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), norm, sub));
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const uint8_t *ac = a + (size_t)c * as;
            const uint8_t *aq = ac + (size_t)b * 32;
            const int32_t sa = ((const int32_t *)(ac + n + (size_t)nb * 4))[b];
            __m512i lo = _mm512_set1_epi32(-128 * sa), hi = _mm512_setzero_si512();
            HT_UNROLL
            for (int j = 0; j < 4; j++) {
                lo = _mm512_dpbusd_epi32(lo, w[j], _mm512_set1_epi32(ld32(aq + 4 * j)));
                hi = _mm512_dpbusd_epi32(hi, w[4 + j], _mm512_set1_epi32(ld32(aq + 16 + 4 * j)));
            }
            const float da = ((const float *)(ac + n))[b];
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi)), _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[c]);
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) store16(y + (size_t)c * ys, nr, acc[c]);
}

PK_TILE(pk_mxfp4_x16_tile, mxfp4x16_tile, 8)

static const ht_pack pk_mxfp4_x16 = {"MXFP4x16", 16, PK16_NC, pk_mxfp4_x16_bytes, pk_mxfp4_x16_pack, pk_act_bytes,
                                     pk_act_signed, pk_mxfp4_x16_tile, 0, NULL, pk_mxfp4_x16_decode, NULL, NULL, 0};

/* ---- Q8_0 x 16, 512-bit VNNI ----
 * Block b (576 bytes at 576 b): quants[j][r] = row r's bytes 4j..4j+3 (j < 8), then halves[r], then int16
 * sums[r] of the row's block. */
static size_t pk_q8_0_x16_bytes(int64_t n) { return (size_t)(n / 32) * (32 + 4) * 16; }

static void pk_q8_0_x16_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) {
    const int64_t nb = n / 32;
    memset(dst, 0, pk_q8_0_x16_bytes(n));
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *q = dst + b * 576;
        ht_half *h = (ht_half *)(q + 512);
        int16_t *s = (int16_t *)(q + 544);
        for (int r = 0; r < nr; r++) {
            const block_q8_0 *blk = (const block_q8_0 *)(src + (size_t)r * rb) + b;
            int sum = 0;
            for (int i = 0; i < 32; i++) sum += blk->qs[i];
            for (int j = 0; j < 8; j++) memcpy(q + j * 64 + r * 4, blk->qs + 4 * j, 4);
            h[r] = blk->d;
            s[r] = (int16_t)sum;
        }
    }
}

HT_AI void q8_0x16_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    const int nb = n / 32;
    __m512 acc[PK16_NC];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *q = g + (size_t)b * 576;
        ht_prefetch(q, 576);
        __m512i w[8];
        HT_UNROLL
        for (int j = 0; j < 8; j++) w[j] = _mm512_loadu_si512(q + 64 * j);
        const __m512 dw = _mm512_cvtph_ps(ld256(q + 512));
        /* sum((a + 128) * w) - 128 * sum(w) = sum(a * w) */
        const __m512i corr = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_cvtepi16_epi32(ld256(q + 544)), 7));
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const uint8_t *ac = a + (size_t)c * as;
            const uint8_t *aq = ac + (size_t)b * 32;
            __m512i lo = corr, hi = _mm512_setzero_si512();
            HT_UNROLL
            for (int j = 0; j < 4; j++) {
                lo = _mm512_dpbusd_epi32(lo, _mm512_set1_epi32(ld32(aq + 4 * j)), w[j]);
                hi = _mm512_dpbusd_epi32(hi, _mm512_set1_epi32(ld32(aq + 16 + 4 * j)), w[4 + j]);
            }
            const float da = ((const float *)(ac + n))[b];
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(lo, hi)), _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[c]);
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) store16(y + (size_t)c * ys, nr, acc[c]);
}

PK_TILE_EVERY8(pk_q8_0_x16_tile, q8_0x16_tile)

static const ht_pack pk_q8_0_x16 = {"Q8_0x16", 16, PK16_NC, pk_q8_0_x16_bytes, pk_q8_0_x16_pack, pk_act_bytes,
                                    pk_act_unsigned, pk_q8_0_x16_tile, 0, NULL, pk_q8_0_x16_decode, NULL, NULL, 0};

/* ---- Q4_K x 16, 512-bit VNNI (layout and formula as Q4_K x 8) ---- */
static size_t pk_q4_K_x16_bytes(int64_t n) { return (size_t)(n / 256) * 148 * 16; }
static void pk_q4_K_x16_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) { pack_q4_K(16, src, rb, nr, n, dst); }

/* A pair k of sub-blocks at a time: each 64-byte chunk is loaded once, its low nibbles are sub-block 2k and
 * its high ones 2k + 1 (16 vectors for the pair; hence at most 4 tokens a call). */
#define PK_Q4K16_NC 4
HT_AI void q4_Kx16_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    const int nsb = n / 256;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512 acc[PK_Q4K16_NC];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int i = 0; i < nsb; i++) {
        const uint8_t *q = g + (size_t)i * 148 * 16, *sc = q + 128 * 16, *mn = sc + 128;
        ht_prefetch(q, 148 * 16);
        __m512i isum[PK_Q4K16_NC];
        HT_UNROLL
        for (int c = 0; c < NC; c++) isum[c] = _mm512_setzero_si512();
        HT_UNROLL
        for (int k = 0; k < 4; k++) {
            /* each 64-byte chunk unpacked once and fed to every token (16 unpacked vectors held for 4 tokens
             * spilled out of the 32 registers); one token keeps two chains per half, for the latency */
            const int H = NC == 1 ? 2 : 1;
            __m512i l[PK_Q4K16_NC][2], h[PK_Q4K16_NC][2];
            HT_UNROLL
            for (int j = 0; j < 8; j++) {
                const __m512i v = _mm512_loadu_si512(q + ((size_t)k * 8 + j) * 64);
                const __m512i wl = _mm512_and_si512(v, m4), wh = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                const int t = H == 2 ? j >> 2 : 0;
                const bool first = H == 2 ? (j & 3) == 0 : j == 0;
                HT_UNROLL
                for (int c = 0; c < NC; c++) {
                    const uint8_t *aq = a + (size_t)c * as + (size_t)i * 256 + 64 * k;
                    const __m512i xl = _mm512_set1_epi32(ld32(aq + 4 * j)), xh = _mm512_set1_epi32(ld32(aq + 32 + 4 * j));
                    l[c][t] = _mm512_dpbusd_epi32(first ? _mm512_setzero_si512() : l[c][t], wl, xl);
                    h[c][t] = _mm512_dpbusd_epi32(first ? _mm512_setzero_si512() : h[c][t], wh, xh);
                }
            }
            const __m512i sl = _mm512_cvtepu8_epi32(ld128(sc + 2 * k * 16)), sh = _mm512_cvtepu8_epi32(ld128(sc + (2 * k + 1) * 16));
            HT_UNROLL
            for (int c = 0; c < NC; c++) {
                const __m512i lt = H == 2 ? _mm512_add_epi32(l[c][0], l[c][1]) : l[c][0];
                const __m512i ht = H == 2 ? _mm512_add_epi32(h[c][0], h[c][1]) : h[c][0];
                isum[c] = _mm512_add_epi32(isum[c], _mm512_add_epi32(_mm512_mullo_epi32(lt, sl), _mm512_mullo_epi32(ht, sh)));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(ld256(mn + 128)), dmw = _mm512_cvtph_ps(ld256(mn + 160));
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const uint8_t *ac = a + (size_t)c * as;
            const int16_t *asum = (const int16_t *)(ac + n + (size_t)nsb * 4) + (size_t)i * 8;
            __m512i msum = _mm512_setzero_si512();
            HT_UNROLL
            for (int k = 0; k < 4; k++)
                msum = _mm512_dpwssd_epi32(msum, _mm512_cvtepu8_epi16(ld256(mn + k * 32)),
                                           _mm512_set1_epi32(ld32((const uint8_t *)(asum + 2 * k))));
            const __m512 da = _mm512_set1_ps(((const float *)(ac + n))[i]);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(dw, da), acc[c]);
            acc[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmw, da), acc[c]);
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) store16(y + (size_t)c * ys, nr, acc[c]);
}

PK_TILE(pk_q4_K_x16_tile, q4_Kx16_tile, 4)

static const ht_pack pk_q4_K_x16 = {"Q4_Kx16", 16, PK_Q4K16_NC, pk_q4_K_x16_bytes, pk_q4_K_x16_pack, pk_k_act_bytes,
                                    pk_k_act_prep, pk_q4_K_x16_tile, 0, NULL, NULL, NULL, NULL, 0};

/* ---- Q6_K x 16, 512-bit VNNI (layout above; 8 tokens a call: 8 unpacked vectors, 8 integer sums) ---- */
static size_t pk_q6_K_x16_bytes(int64_t n) { return (size_t)(n / 256) * 3360; }
static void pk_q6_K_x16_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) { pack_q6_K(16, src, rb, nr, n, dst); }

/* The high-bit pairs of w[j] (bits 2j of each byte of h), moved to bits 4..5 of each byte. */
HT_AI __m512i q6_hi(__m512i h, const int j) {
    const __m512i s = j < 2 ? _mm512_slli_epi32(h, 4 - 2 * j) : j == 2 ? h : _mm512_srli_epi32(h, 2);
    return _mm512_and_si512(s, _mm512_set1_epi8(0x30));
}

#define PK_Q6_NC 8
HT_AI void q6_Kx16_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    const int nsb = n / 256;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512 acc[PK_Q6_NC];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int i = 0; i < nsb; i++) {
        const uint8_t *o = g + (size_t)i * 3360;
        ht_prefetch_l2(o, 3360);
        __m512i isum[PK_Q6_NC];
        HT_UNROLL
        for (int c = 0; c < NC; c++) isum[c] = _mm512_setzero_si512();
        HT_UNROLL
        for (int s = 0; s < 8; s++) {
            const uint8_t *ch = o + s * 384;
            const __m512i h0 = _mm512_loadu_si512(ch + 256), h1 = _mm512_loadu_si512(ch + 320);
            __m512i w[8];
            HT_UNROLL
            for (int j = 0; j < 4; j++) {
                const __m512i v = _mm512_loadu_si512(ch + 64 * j);
                w[j] = _mm512_or_si512(_mm512_and_si512(v, m4), q6_hi(h0, j));
                w[4 + j] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), q6_hi(h1, j));
            }
            const __m512i scv = _mm512_cvtepi8_epi16(ld256(o + 3072 + s * 32));   /* lanes: (scale 2s, 2s + 1) */
            const __m512i sc_lo = _mm512_srai_epi32(_mm512_slli_epi32(scv, 16), 16), sc_hi = _mm512_srai_epi32(scv, 16);
            const __m512i sc_m32 = _mm512_mullo_epi16(scv, _mm512_set1_epi16(-32));
            HT_UNROLL
            for (int c = 0; c < NC; c++) {
                const uint8_t *ac = a + (size_t)c * as;
                const uint8_t *aq = ac + (size_t)i * 256 + 32 * s;
                const int16_t *bs = (const int16_t *)(ac + n + (size_t)nsb * 4 + (size_t)(n / 32) * 2) + (size_t)i * 16 + 2 * s;
                __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
                HT_UNROLL
                for (int j = 0; j < 4; j++) {
                    lo = _mm512_dpbusd_epi32(lo, w[j], _mm512_set1_epi32(ld32(aq + 4 * j)));
                    hi = _mm512_dpbusd_epi32(hi, w[4 + j], _mm512_set1_epi32(ld32(aq + 16 + 4 * j)));
                }
                isum[c] = _mm512_add_epi32(isum[c], _mm512_add_epi32(_mm512_mullo_epi32(lo, sc_lo), _mm512_mullo_epi32(hi, sc_hi)));
                isum[c] = _mm512_dpwssd_epi32(isum[c], sc_m32, _mm512_set1_epi32(ld32((const uint8_t *)bs)));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(ld256(o + 3328));
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const __m512 da = _mm512_set1_ps(((const float *)(a + (size_t)c * as + n))[i]);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(dw, da), acc[c]);
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) store16(y + (size_t)c * ys, nr, acc[c]);
}

PK_TILE(pk_q6_K_x16_tile, q6_Kx16_tile, 8)

static const ht_pack pk_q6_K_x16 = {"Q6_Kx16", 16, PK_Q6_NC, pk_q6_K_x16_bytes, pk_q6_K_x16_pack, pk_k_act_bytes,
                                    pk_k_act_prep, pk_q6_K_x16_tile, 0, NULL, NULL, NULL, NULL, 0};
#endif
