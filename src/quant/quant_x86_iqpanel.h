/* quant_x86_iqpanel.h — prefill of the super-block i-quants (IQ1_S ... IQ3_S, IQ4_XS, TQ1_0, TQ2_0 x Q8_K) as
 * an int8 panel GEMM (ht_gemm in quant.h), included by quant_x86_kernels.h after iq_chunk and tileK, in all
 * three x86 sets: one int32 lane per row, IQP_R = 16 rows in a zmm (AVX-512 sets) or 8 in a ymm (avx2).
 *
 * tileK decodes each weight super-block (grid gathers, sign tables) once per tile of at most 4 tokens, so a
 * batch of 256 decodes every weight 64 times. Here IQP_R rows of a few super-blocks are decoded ONCE into a
 * panel on the stack (iq_chunk's decoders): the weights as unsigned bytes (value + off: off 64 for the grid,
 * IQ1 and ternary types, whose |values| <= 62, 128 for IQ4_XS's -127..113 on VNNI), 4 consecutive elements of
 * each row side by side so that an int32 lane is a row; the 16-element sub-block scales; d as floats. Then
 * every token of the batch runs over the panel: per 4 elements the panel vector meets 4 bytes of the token's
 * activations broadcast, and the offset comes off per super-block as off * sum_s sc_s * bsums_s (the scale
 * pairs against the Q8_K block's bsums, VPDPWSSD or PMADDWD). Only that int8 product differs between sets:
 *  - VNNI: VPDPBUSD over a sub-block of one scale (16 or 32 elements), then times the scale (VPMULLD).
 *  - AVX2 / AVX-512 without VNNI: PMADDUBSW then PMADDWD by the scale, held as an int16 pair (sc, sc) per
 *    lane. PMADDUBSW saturates the sum of two u8 x s8 products at 32767: with off 64 a weight byte is at most
 *    62 + 64 = 126 and an activation at most 127 in magnitude (every Q8_K quantizer clamps to [-127, 127]),
 *    so |pair| <= 2 * 126 * 127 = 32004: exact (test_quant_simd's extremes, random blocks against
 *    activations all +-127, fail with a larger offset). IQ4_XS + 128 would reach 2 * 241 * 127 = 61214: these
 *    sets leave IQ4_XS on its tiles (a panel of signed values with the sign trick |w| * (a with w's sign)
 *    measured no faster than they: 0.99x, avx2, 1B pp512).
 * Every step is an exact integer (a sub-block's sum is below 32 * 241 * 128, a super-block's isum, offset
 * and all, below 2^31: 256 * 32 * 241 * 128 < 2^31 with IQ4_XS's |sc| <= 32), so each lane holds
 * quant_ref.c's isum of its row; the float part is tileK's, lane by lane: sum += (d * a->d) * (float)isum per
 * super-block in order, then post * sum. Bit-identical to vec_dot (test_quant_simd checks every set's batch
 * products against it). */

#define IQP_SB 4    /* super-blocks decoded at a time (22 KB at 16 rows: it stays in L1 while the batch passes) */
#define IQP_NT 4    /* tokens sharing each load of the panel */
#define IQP_MIN_NC 8

#if HT_X86_AVX512
#define IQP_R 16    /* rows per panel: one int32 lane each */
#define IQP(op) _mm512_##op
typedef __m512i iqp_vi;
typedef __m512 iqp_vf;
typedef __mmask16 iqp_rows;   /* the lanes of the panel's real rows */
HT_AI iqp_vi iqp_zero(void) { return _mm512_setzero_si512(); }
#define IQP_NAME "_p16"
HT_AI iqp_vi iqp_load(const void *p) { return _mm512_load_si512(p); }
HT_AI void iqp_store(void *p, iqp_vi v) { _mm512_store_si512(p, v); }
HT_AI iqp_rows iqp_rows_of(int mr) { return (__mmask16)((1u << mr) - 1); }
HT_AI iqp_vf iqp_loady(const float *y, iqp_rows m) { return _mm512_maskz_loadu_ps(m, y); }
HT_AI void iqp_storey(float *y, iqp_rows m, iqp_vf v) { _mm512_mask_storeu_ps(y, m, v); }
/* dword k of the IQP_R rows of u (rows QK_K bytes apart) side by side */
HT_AI iqp_vi iqp_column(const uint8_t *u, int k) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(QK_K / 4));
    return _mm512_i32gather_epi32(idx, (const int *)u + k, 4);
}
#else
#define IQP_R 8
#define IQP(op) _mm256_##op
typedef __m256i iqp_vi;
typedef __m256 iqp_vf;
typedef __m256i iqp_rows;
HT_AI iqp_vi iqp_zero(void) { return _mm256_setzero_si256(); }
#define IQP_NAME "_p8"
HT_AI iqp_vi iqp_load(const void *p) { return _mm256_load_si256((const __m256i *)p); }
HT_AI void iqp_store(void *p, iqp_vi v) { _mm256_store_si256((__m256i *)p, v); }
HT_AI iqp_rows iqp_rows_of(int mr) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(mr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }
HT_AI iqp_vf iqp_loady(const float *y, iqp_rows m) { return _mm256_maskload_ps(y, m); }
HT_AI void iqp_storey(float *y, iqp_rows m, iqp_vf v) { _mm256_maskstore_ps(y, m, v); }
HT_AI iqp_vi iqp_column(const uint8_t *u, int k) {   /* rows QK_K / 4 = 64 dwords apart */
    return _mm256_i32gather_epi32((const int *)u + k, _mm256_setr_epi32(0, 64, 128, 192, 256, 320, 384, 448), 4);
}
#endif

typedef struct {
    _Alignas(64) uint8_t q[IQP_SB][QK_K / 4][IQP_R][4];   /* value + off: elements 4k..4k+3 of each row */
    _Alignas(64) int32_t sc[IQP_SB][QK_K / 16][IQP_R];    /* each 16-element sub-block's scale (VNNI), or the */
                                                         /* scale as an int16 pair, for PMADDWD */
    _Alignas(64) int16_t sc2[IQP_SB][QK_K / 32][IQP_R][2];   /* the scales of sub-blocks 2j and 2j + 1 */
    _Alignas(64) float d[IQP_SB][IQP_R];
} iqp_panel;

HT_AI int32_t iqp_ld32(const void *p) { int32_t v; memcpy(&v, p, 4); return v; }

/* Elements per scale: 32 where one scale covers a 32-element chunk (one VPMULLD per 8 VPDPBUSD), else 16. */
HT_AI int iqp_sub(const int T) { return T == HT_IQ2_XS || T == HT_IQ2_S || T == HT_IQ1_M ? 16 : 32; }

HT_AI int iqp_off(const int T) { return T == HT_IQ4_XS ? 128 : 64; }

/* One row's super-block wb: its 256 values + off into u (element order), its 16 scales into sc. */
HT_AI void iqp_row(const int T, const uint8_t *wb, uint8_t *u, int16_t *sc) {
    if (T == HT_IQ4_XS) {   /* kb_iq4_xs's decode, the table's values + 128 */
        const block_iq4_xs *b = (const block_iq4_xs *)wb;
        const __m256i tab = _mm256_xor_si256(iq4nl_table(), _mm256_set1_epi8((char)0x80)), m4 = mask4();
        HT_UNROLL
        for (int p = 0; p < 4; p++) {
            const __m256i x = ld256(b->qs + 32 * p);
            const __m256i lo = _mm256_and_si256(x, m4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
            _mm256_storeu_si256((__m256i *)(u + 64 * p), _mm256_shuffle_epi8(tab, _mm256_permute2x128_si256(lo, hi, 0x20)));
            _mm256_storeu_si256((__m256i *)(u + 64 * p + 32), _mm256_shuffle_epi8(tab, _mm256_permute2x128_si256(lo, hi, 0x31)));
        }
        const __m128i s8 = scales_iq4_xs(b);   /* one int16 per 32 elements */
        int16_t s[8];
        _mm_storeu_si128((__m128i *)s, s8);
        for (int j = 0; j < 8; j++) sc[2 * j] = sc[2 * j + 1] = s[j];
        return;
    }
    HT_UNROLL
    for (int ib = 0; ib < QK_K / 32; ib++) {
        __m256i q, sg = _mm256_setzero_si256(), s;
        iq_chunk(T, wb, ib, &q, &sg, &s);
        if (iq_grid(T)) q = _mm256_sign_epi8(q, sg);
        q = _mm256_add_epi8(q, _mm256_set1_epi8((char)(iq_ternary(T) ? 63 : 64)));   /* ternary: stored + 1 */
        _mm256_storeu_si256((__m256i *)(u + 32 * ib), q);
        sc[2 * ib] = (int16_t)_mm256_extract_epi16(s, 0);
        sc[2 * ib + 1] = (int16_t)_mm256_extract_epi16(s, 8);
    }
}

/* Super-block i of rows w, w + ws, ... (nr <= IQP_R; the lanes past nr repeat the last row) into slot s. */
HT_AI void iqp_decode(const int T, const uint8_t *w, size_t ws, int nr, size_t i, iqp_panel *p, int s) {
    _Alignas(64) uint8_t u[IQP_R][QK_K];
    int16_t sc[IQP_R][QK_K / 16];
    for (int r = 0; r < IQP_R; r++) {
        const uint8_t *wb = w + (size_t)HT_MIN(r, nr - 1) * ws + i * k_size(T);
        ht_prefetch(wb, k_size(T));
        iqp_row(T, wb, u[r], sc[r]);
        p->d[s][r] = k_d(T, wb);
        for (int j = 0; j < QK_K / 16; j++)
            p->sc[s][j][r] = HT_X86_VNNI ? sc[r][j] : (int32_t)((uint32_t)(uint16_t)sc[r][j] * 0x10001u);
        for (int j = 0; j < QK_K / 32; j++) {
            p->sc2[s][j][r][0] = sc[r][2 * j];
            p->sc2[s][j][r][1] = sc[r][2 * j + 1];
        }
    }
    /* transpose: dword k of every row side by side */
    for (int k = 0; k < QK_K / 4; k++) iqp_store(p->q[s][k], iqp_column(&u[0][0], k));
}

/* NT tokens (a, a + as, ...: their Q8_K blocks of the panel's super-blocks) over the ns super-blocks of the
 * panel; the running sums of the IQP_R rows (lanes m) come from y (first: 0) and go back to y (last: times
 * post). */
HT_AI void iqp_tokens(const int T, const int NT, const iqp_panel *p, int ns, const uint8_t *a, size_t as, bool first,
                      bool last, float *y, size_t ys, iqp_rows m) {
    iqp_vf acc[IQP_NT];
    HT_UNROLL
    for (int c = 0; c < NT; c++) acc[c] = first ? IQP(setzero_ps)() : iqp_loady(y + (size_t)c * ys, m);
    for (int s = 0; s < ns; s++) {
        const block_q8_K *ab[IQP_NT];
        iqp_vi isum[IQP_NT], off[IQP_NT];
        HT_UNROLL
        for (int c = 0; c < NT; c++) {
            ab[c] = (const block_q8_K *)(a + (size_t)c * as) + s;
            isum[c] = iqp_zero();
            off[c] = iqp_zero();
        }
        const int S = iqp_sub(T);   /* sub-blocks of S elements: S / 4 dwords each */
        HT_UNROLL
        for (int j = 0; j < QK_K / S; j++) {
            const iqp_vi sc = iqp_load(p->sc[s][S / 16 * j]);
#if HT_X86_VNNI
            iqp_vi dot[IQP_NT];
            HT_UNROLL
            for (int c = 0; c < NT; c++) dot[c] = iqp_zero();
            HT_UNROLL
            for (int k = 0; k < S / 4; k++) {
                const iqp_vi wv = iqp_load(p->q[s][S / 4 * j + k]);
                HT_UNROLL
                for (int c = 0; c < NT; c++) dot[c] = IQP(dpbusd_epi32)(dot[c], wv, IQP(set1_epi32)(iqp_ld32(ab[c]->qs + S * j + 4 * k)));
            }
            HT_UNROLL
            for (int c = 0; c < NT; c++) isum[c] = IQP(add_epi32)(isum[c], IQP(mullo_epi32)(dot[c], sc));
#else
            HT_UNROLL
            for (int k = 0; k < S / 4; k++) {
                const iqp_vi wv = iqp_load(p->q[s][S / 4 * j + k]);
                HT_UNROLL
                for (int c = 0; c < NT; c++) {
                    const iqp_vi av = IQP(set1_epi32)(iqp_ld32(ab[c]->qs + S * j + 4 * k));
                    isum[c] = IQP(add_epi32)(isum[c], IQP(madd_epi16)(IQP(maddubs_epi16)(wv, av), sc));
                    HT_KEEP(isum[c]);   /* a chain: as a tree of adds GCC stored every product to the stack */
                }
            }
#endif
        }
        HT_UNROLL
        for (int j = 0; j < QK_K / 32; j++) {
            const iqp_vi sc2 = iqp_load(p->sc2[s][j]);
            HT_UNROLL
            for (int c = 0; c < NT; c++) {
                const iqp_vi bs = IQP(set1_epi32)(iqp_ld32(ab[c]->bsums + 2 * j));
#if HT_X86_VNNI
                off[c] = IQP(dpwssd_epi32)(off[c], sc2, bs);
#else
                off[c] = IQP(add_epi32)(off[c], IQP(madd_epi16)(sc2, bs));
#endif
            }
        }
        const iqp_vf dv = IQP(load_ps)(p->d[s]);
        HT_UNROLL
        for (int c = 0; c < NT; c++) {
            const iqp_vi is = IQP(sub_epi32)(isum[c], IQP(slli_epi32)(off[c], iqp_off(T) == 128 ? 7 : 6));
            acc[c] = IQP(add_ps)(acc[c], IQP(mul_ps)(IQP(mul_ps)(dv, IQP(set1_ps)(ab[c]->d)), IQP(cvtepi32_ps)(is)));
        }
    }
    HT_UNROLL
    for (int c = 0; c < NT; c++) {
        if (last && ht_iq_post(T) != 1.0f) acc[c] = IQP(mul_ps)(IQP(set1_ps)(ht_iq_post(T)), acc[c]);
        iqp_storey(y + (size_t)c * ys, m, acc[c]);
    }
}

/* ht_gemm.run: groups of IQP_R rows, IQP_SB super-blocks at a time decoded once for all nc tokens. With dec,
 * w is instead one group of a decode pack (nr <= IQP_R), whose super-block i dec decodes into slot s of the
 * panel itself (quant_x86_iqpack.h). */
HT_AI void iqp_gemm(const int T, int n, const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as, int nc,
                    float *y, size_t ys, void (*const dec)(const uint8_t *g, size_t i, iqp_panel *p, int s)) {
    iqp_panel p;
    const int nsb = n / QK_K;
    for (int r0 = 0; r0 < nr; r0 += IQP_R) {
        const int mr = HT_MIN(IQP_R, nr - r0);
        const iqp_rows m = iqp_rows_of(mr);
        for (int s0 = 0; s0 < nsb; s0 += IQP_SB) {
            const int ns = HT_MIN(IQP_SB, nsb - s0);
            for (int s = 0; s < ns; s++) {
                if (dec) dec(w, (size_t)(s0 + s), &p, s);
                else iqp_decode(T, w + (size_t)r0 * ws, ws, mr, (size_t)(s0 + s), &p, s);
            }
            const bool first = s0 == 0, last = s0 + ns >= nsb;
            const uint8_t *as0 = a + (size_t)s0 * sizeof(block_q8_K);
            int t = 0;
            for (; t + IQP_NT <= nc; t += IQP_NT)
                iqp_tokens(T, IQP_NT, &p, ns, as0 + (size_t)t * as, as, first, last, y + (size_t)t * ys + r0, ys, m);
            for (; t < nc; t++) iqp_tokens(T, 1, &p, ns, as0 + (size_t)t * as, as, first, last, y + (size_t)t * ys + r0, ys, m);
        }
    }
}

#define IQP_GEMM(name, T)                                                                                   \
    static void iqp_run_##name(int n, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *y, \
                               size_t ys) {                                                                \
        iqp_gemm(T, n, w, ws, nr, a, as, nc, y, ys, NULL);                                                 \
    }                                                                                                      \
    static const ht_gemm gm_##name = {#name IQP_NAME, IQP_R, IQP_MIN_NC, iqp_run_##name};

IQP_GEMM(iq2_xxs, HT_IQ2_XXS)
IQP_GEMM(iq2_xs, HT_IQ2_XS)
IQP_GEMM(iq2_s, HT_IQ2_S)
IQP_GEMM(iq3_xxs, HT_IQ3_XXS)
IQP_GEMM(iq3_s, HT_IQ3_S)
IQP_GEMM(iq1_s, HT_IQ1_S)
IQP_GEMM(iq1_m, HT_IQ1_M)
#if HT_X86_VNNI
IQP_GEMM(iq4_xs, HT_IQ4_XS)
#endif
IQP_GEMM(tq1_0, HT_TQ1_0)
IQP_GEMM(tq2_0, HT_TQ2_0)

static void iqp_install(ht_traits t[HT_NTYPES]) {
    t[HT_IQ2_XXS].gemm = &gm_iq2_xxs;
    t[HT_IQ2_XS].gemm = &gm_iq2_xs;
    t[HT_IQ2_S].gemm = &gm_iq2_s;
    t[HT_IQ3_XXS].gemm = &gm_iq3_xxs;
    t[HT_IQ3_S].gemm = &gm_iq3_s;
    t[HT_IQ1_S].gemm = &gm_iq1_s;
    t[HT_IQ1_M].gemm = &gm_iq1_m;
#if HT_X86_VNNI   /* without VNNI, +128 would saturate (see the top) */
    t[HT_IQ4_XS].gemm = &gm_iq4_xs;
#endif
    t[HT_TQ1_0].gemm = &gm_tq1_0;
    t[HT_TQ2_0].gemm = &gm_tq2_0;
}
