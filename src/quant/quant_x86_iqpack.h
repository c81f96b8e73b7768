/* quant_x86_iqpack.h — row-interleaved packs of the i-quants for decode (ht_pack in quant.h): IQ4_XS x 16
 * (AVX-512 VNNI) and x 8 (AVX2, and AVX-512 without VNNI), the grid types IQ1_S .. IQ3_S x 16 (AVX-512 VNNI with
 * VBMI). Included by quant_x86_kernels.h after quant_x86_packed.h (the activations are its Q4_K pack's: Q8_K
 * values, d, sub-block sums).
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
                                      pk_k_act_bytes, pk_k_act_prep, pk_iq4_xs_x16_tile, 0, NULL, NULL, NULL, NULL, 0};

/* ---- The grid types x 16 (AVX-512 VNNI): the grid entries of 16 rows gathered at once (VPGATHERDQ /
 * VPGATHERDD from the file's grid tables, in L1), their signs applied as a 64-bit mask ----
 * VPDPBUSD takes the activations' magnitudes as its unsigned factor and the grid magnitudes (below 64) as the
 * signed one, negated where the weight's sign and the activation's differ (one masked subtract): exact for an
 * activation of -128 too. A lane's super-block sum is quant_ref.c's isum (sum over 32-blocks of scale * dot,
 * below 2^31), and each output adds (d * d_a) * (float)isum in super-block order, times post at the end, with
 * separate multiplies and adds: bit-identical to the scalar vec_dot, as the IQ4_XS pack. */
HT_AI uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* w * x for activations x (as bytes): |x| times w negated where sign mask s and x's sign differ. */
HT_AI __m512i sdot(__m512i acc, __m512i x, __m512i w, __mmask64 s) {
    const __mmask64 neg = _kxor_mask64(s, _mm512_movepi8_mask(x));
    return _mm512_dpbusd_epi32(acc, _mm512_abs_epi8(x), _mm512_mask_sub_epi8(w, neg, _mm512_setzero_si512(), w));
}

/* The odd 32-block scales 2 s + 1 of 16 rows from the nibbles (row r's byte r, 32-block ib's nibble ib % 2). */
HT_AI __m512i nib_scales(const uint8_t *sc, int ib) {
    const __m512i v = _mm512_cvtepu8_epi32(ld128(sc));
    const __m512i s = _mm512_and_si512(ib % 2 ? _mm512_srli_epi32(v, 4) : v, _mm512_set1_epi32(15));
    return _mm512_or_si512(_mm512_slli_epi32(s, 1), _mm512_set1_epi32(1));
}

/* ---- The grid types x 16 without gathers (AVX-512 VNNI + VBMI, tested at install) ----
 * A grid's bytes take a few values (the 8-byte grids of IQ2_XXS, IQ2_XS, IQ2_S three: 8, 25, 43; IQ1's -1, 0,
 * 1; the 4-byte ones of IQ3_S and IQ3_XXS eight), so an entry is a row of 2- or 3-bit codes, 16 or 12 bits,
 * kept as two byte planes (grid_codes). A vector of 64 index bytes (16 rows' indices, stored by the pack in
 * VPUNPCK's order) looks both planes up with VPERMI2B, 128 entries each, one level of blends per index bit
 * above 7 (bit 7 from the index byte, the higher ones from the pack's masks); VPUNPCK[LH]BW interleaves the
 * planes into code words, VPMULTISHIFTQB gives each row's qword (dword) its codes and VPERMB maps code ->
 * value. The gathers this replaced (one VPGATHERDQ a row octet's 8 weights) held decode at ~11 GB/s. */
#define HT_VBMI __attribute__((target("avx512vbmi")))
#define HT_VBMI_AI static inline __attribute__((always_inline, target("avx512vbmi")))
typedef struct {
    _Alignas(64) uint8_t lo[2048], hi[2048], val[64];   /* the code planes of the entries; code -> value */
} grid_codes;
static grid_codes gc_iq2xxs, gc_iq2xs, gc_iq2s, gc_iq3s, gc_iq3xxs, gc_iq1s;

/* The codes of a grid of n entries of w bytes: each byte's rank among the grid's distinct values (IQ1's
 * grid, iq1: its values -1, 0, 1 as 8 g + 1, the shift's minus applied later). */
static void grid_codes_init(grid_codes *c, const void *grid, int n, int w, bool iq1) {
    const uint8_t *g = grid;
    uint8_t lv[8], rank[256];
    bool seen[256] = {false};
    int nl = 0;
    for (int e = 0; e < n * w; e++) seen[g[e]] = true;
    for (int v = 0; v < 256; v++)
        if (seen[v] && nl < 8) rank[v] = (uint8_t)nl, lv[nl++] = (uint8_t)v;
    const int bits = nl <= 4 ? 2 : 3;
    for (int e = 0; e < n; e++) {
        unsigned code = 0;
        for (int j = 0; j < w; j++) code |= (unsigned)rank[g[e * w + j]] << bits * j;   /* byte j: element j */
        c->lo[e] = (uint8_t)code, c->hi[e] = (uint8_t)(code >> 8);
    }
    for (int i = 0; i < 64; i++) c->val[i] = iq1 ? (uint8_t)(8 * (int8_t)lv[i % 4 % nl] + 1) : lv[i % (1 << bits) % nl];
}
static void grid_codes_init_all(void) {
    grid_codes_init(&gc_iq2xxs, ht_iq2xxs_grid, 256, 8, false);
    grid_codes_init(&gc_iq2xs, ht_iq2xs_grid, 512, 8, false);
    grid_codes_init(&gc_iq2s, ht_iq2s_grid, 1024, 8, false);
    grid_codes_init(&gc_iq3s, ht_iq3s_grid, 512, 4, false);
    grid_codes_init(&gc_iq3xxs, ht_iq3xxs_grid, 256, 4, false);
    grid_codes_init(&gc_iq1s, ht_iq1s_grid, 2048, 8, true);
}

/* One byte plane of the codes of 64 indices I: tab has n = 256 .. 2048 entries, bits 8.. of the indices in
 * the masks h[]: a tree of blends, one level an index bit. */
HT_VBMI_AI __m512i code_plane(const int n, const uint8_t *tab, __m512i I, const __mmask64 *h) {
    const __mmask64 h7 = _mm512_movepi8_mask(I);
    __m512i r[8];
    HT_UNROLL
    for (int k = 0; k < n / 256; k++)
        r[k] = _mm512_mask_blend_epi8(h7, _mm512_permutex2var_epi8(_mm512_load_si512(tab + 256 * k), I, _mm512_load_si512(tab + 256 * k + 64)),
                                      _mm512_permutex2var_epi8(_mm512_load_si512(tab + 256 * k + 128), I, _mm512_load_si512(tab + 256 * k + 192)));
    HT_UNROLL
    for (int lv = 0, m = n / 256; m > 1; lv++, m /= 2)
        HT_UNROLL
        for (int k = 0; k < m / 2; k++) r[k] = _mm512_mask_blend_epi8(h[lv], r[2 * k], r[2 * k + 1]);
    return r[0];
}
/* The code words of 64 indices at ix, interleaved: u[0] = bytes 0-7 of each 128-bit lane, u[1] = bytes 8-15. */
HT_VBMI_AI void code_words(const int n, const grid_codes *c, const uint8_t *ix, const __mmask64 *h, __m512i u[2]) {
    const __m512i I = _mm512_loadu_si512(ix);
    const __m512i lo = code_plane(n, c->lo, I, h), hi = code_plane(n, c->hi, I, h);
    u[0] = _mm512_unpacklo_epi8(lo, hi), u[1] = _mm512_unpackhi_epi8(lo, hi);
}

/* IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M x 16: super-block i of a group (G8_SB(T) bytes at G8_SB(T) i) is the
 * (low) index bytes of 32-block ib as a 64-byte vector at 64 ib (128-bit lane k, byte p: row 2k + p / 4 for
 * p < 8, 8 + 2k + (p - 8) / 4 after, element group 4 ib + p % 4), then the index bits past 8 (IQ2_XS 1, IQ2_S
 * 2, IQ1 3) of those as u64 masks a 32-block, the sign bytes sg[b][r] (b = 4 ib + l for the 8 elements
 * 32 ib + 8 l..; IQ2_XXS and IQ2_XS from ksigns_iq2xs of their 7-bit fields, 512; IQ1, whose grid is signed,
 * instead a u16 a group with bit r where row r's shift is -1/8, 64), the scales (IQ2_XXS: the 32-blocks' nibbles
 * sc[ib / 2][r], 64; the others a byte sc[ib][r], a nibble per 16, 128), the halves d[r] (32). Missing rows
 * are zeros (d 0). 70 bytes a row for IQ2_XXS (the file's 66), 78 for IQ2_XS (74), 82 for IQ2_S (82), 58 for
 * IQ1 (50 and 56). */
HT_AI bool g8_iq1(const uint32_t T) { return T == HT_IQ1_S || T == HT_IQ1_M; }
#define G8_HB(T) ((T) == HT_IQ2_XS ? 1 : (T) == HT_IQ2_S ? 2 : g8_iq1(T) ? 3 : 0)   /* index bits past 8 */
#define G8_SG(T) (512 + 64 * G8_HB(T))
#define G8_SC(T) (G8_SG(T) + (g8_iq1(T) ? 64 : 512))
#define G8_D(T) (G8_SC(T) + ((T) == HT_IQ2_XXS ? 64 : 128))
#define G8_SB(T) (G8_D(T) + 32)
HT_AI void pack_grid8(const uint32_t T, const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) {
    const int64_t nsb = n / 256;
    memset(dst, 0, (size_t)nsb * G8_SB(T));
    for (int64_t i = 0; i < nsb; i++) {
        uint8_t *q = dst + i * G8_SB(T), *sg = q + G8_SG(T), *sc = q + G8_SC(T);
        uint64_t hb[24] = {0};
        uint16_t dm[32] = {0};
        ht_half *d = (ht_half *)(q + G8_D(T));
        for (int r = 0; r < nr; r++) {
            const uint8_t *blk = src + (size_t)r * rb;
            const int p0 = 16 * (r % 8 / 2) + 8 * (r / 8) + 4 * (r % 2);
            for (int ib = 0; ib < 8; ib++)
                for (int l = 0; l < 4; l++) {
                    const int g = 4 * ib + l;   /* the 8-element group */
                    unsigned idx, sign;
                    if (T == HT_IQ2_XXS) {
                        const block_iq2_xxs *b = (const block_iq2_xxs *)blk + i;
                        uint32_t w[2];
                        memcpy(w, b->qs + 4 * ib, sizeof w);
                        idx = w[0] >> 8 * l & 255, sign = ht_ksigns_iq2xs[w[1] >> 7 * l & 127];
                        if (l == 0) sc[ib / 2 * 16 + r] |= (uint8_t)((w[1] >> 28) << 4 * (ib % 2));
                    } else if (T == HT_IQ2_XS) {
                        const block_iq2_xs *b = (const block_iq2_xs *)blk + i;
                        idx = b->qs[g] & 511, sign = ht_ksigns_iq2xs[b->qs[g] >> 9];
                        if (l == 0) sc[ib * 16 + r] = b->scales[ib];
                    } else if (T == HT_IQ2_S) {
                        const block_iq2_s *b = (const block_iq2_s *)blk + i;
                        idx = b->qs[g] | (b->qh[ib] << (8 - 2 * l) & 0x300), sign = b->qs[QK_K / 8 + g];
                        if (l == 0) sc[ib * 16 + r] = b->scales[ib];
                    } else if (T == HT_IQ1_S) {
                        const block_iq1_s *b = (const block_iq1_s *)blk + i;
                        idx = b->qs[g] | (b->qh[ib] >> 3 * l & 7) << 8, sign = b->qh[ib] >> 15;
                        if (l == 0) sc[ib * 16 + r] = (uint8_t)((b->qh[ib] >> 12 & 7) * 0x11);
                    } else {
                        const block_iq1_m *b = (const block_iq1_m *)blk + i;
                        const unsigned nib = b->qh[g / 2] >> 4 * (g % 2) & 15;
                        uint16_t w[4];
                        memcpy(w, b->scales, sizeof w);
                        idx = b->qs[g] | (nib & 7) << 8, sign = nib >> 3;
                        if (l == 0) sc[ib * 16 + r] = (uint8_t)((w[ib / 2] >> 6 * (ib % 2) & 7) | (w[ib / 2] >> (6 * (ib % 2) + 3) & 7) << 4);
                    }
                    q[64 * ib + p0 + l] = (uint8_t)idx;
                    for (int h = 0; h < G8_HB(T); h++) hb[G8_HB(T) * ib + h] |= (uint64_t)(idx >> (8 + h) & 1) << (p0 + l);
                    if (g8_iq1(T)) dm[g] |= (uint16_t)(sign << r);
                    else sg[g * 16 + r] = (uint8_t)sign;
                }
            d[r] = T == HT_IQ2_XXS ? ((const block_iq2_xxs *)blk + i)->d
                   : T == HT_IQ2_XS ? ((const block_iq2_xs *)blk + i)->d
                   : T == HT_IQ2_S ? ((const block_iq2_s *)blk + i)->d
                   : T == HT_IQ1_S ? ((const block_iq1_s *)blk + i)->d : ht_iq1_m_d((const block_iq1_m *)blk + i);
        }
        if (G8_HB(T)) memcpy(q + 512, hb, (size_t)64 * G8_HB(T));
        if (g8_iq1(T)) memcpy(sg, dm, sizeof dm);
    }
}

/* The grid values of 32-block ib of 16 rows: w[l][h] = element group 4 ib + l, rows 8h..8h + 7, a qword per
 * row (unsigned; IQ1's 8 g + 1 signed, minus 2 where the row's shift is -1/8). */
HT_VBMI_AI void grid8_values(const uint32_t T, const uint8_t *q, int ib, __m512i w[4][2]) {
    const grid_codes *c = T == HT_IQ2_XXS ? &gc_iq2xxs : T == HT_IQ2_XS ? &gc_iq2xs : T == HT_IQ2_S ? &gc_iq2s : &gc_iq1s;
    __mmask64 h[3];
    for (int k = 0; k < G8_HB(T); k++) h[k] = _cvtu64_mask64(ld64(q + 512 + 8 * (G8_HB(T) * ib + k)));
    __m512i u[2];
    code_words(256 << G8_HB(T), c, q + 64 * ib, h, u);
    const __m512i val = _mm512_load_si512(c->val);
    HT_UNROLL
    for (int l = 0; l < 4; l++) {
        const __m512i ctl = _mm512_set1_epi64((long long)(0x0e0c0a0806040200ull + 0x1010101010101010ull * (unsigned)l));
        HT_UNROLL
        for (int h = 0; h < 2; h++) {
            w[l][h] = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(ctl, u[h]), val);
            if (g8_iq1(T)) {   /* the shift's sign bits of 8 rows -> their bytes */
                const uint16_t dm = (uint16_t)(q[G8_SG(T) + 2 * (4 * ib + l)] | q[G8_SG(T) + 2 * (4 * ib + l) + 1] << 8);
                const __mmask64 neg = _mm512_movepi8_mask(_mm512_movm_epi64((__mmask8)(dm >> 8 * h)));
                w[l][h] = _mm512_mask_sub_epi8(w[l][h], neg, w[l][h], _mm512_set1_epi8(2));
            }
        }
    }
}
/* Row r's signs of element group b, rows 8h..: a byte a row (IQ1: none, its values carry them). */
HT_AI __mmask64 grid8_signs(const uint32_t T, const uint8_t *q, int b, int h) {
    return g8_iq1(T) ? 0 : _cvtu64_mask64(ld64(q + G8_SG(T) + 16 * b + 8 * h));
}

/* The scales of 32-block ib's two 16-element halves, a lane per row (IQ2_XXS: one scale for both). */
HT_AI void grid8_scales(const uint32_t T, const uint8_t *q, int ib, __m512i *s0, __m512i *s1) {
    if (T == HT_IQ2_XXS) {
        *s0 = *s1 = nib_scales(q + G8_SC(T) + ib / 2 * 16, ib);
        return;
    }
    /* a byte per row, a nibble per half (IQ1_S's byte holds its 32-block scale twice) */
    const __m512i v = _mm512_cvtepu8_epi32(ld128(q + G8_SC(T) + 16 * ib)), m = _mm512_set1_epi32(15), one = _mm512_set1_epi32(1);
    *s0 = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(v, m), 1), one);
    *s1 = _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(v, 4), 1), one);
}

/* Rows 0-7 and 8-15 as 8-byte grid entries: dword lanes 2r, 2r + 1 of a VPDPBUSD chain are row r's, added
 * into one lane per row (two permutes) at the end of each 16-element half (IQ2_XXS: of each 32-block). */
#define PK_GRID_NC 4
HT_VBMI_AI void grid8x16_tile(const uint32_t T, const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    const int nsb = n / 256, halves = T == HT_IQ2_XXS || T == HT_IQ1_S ? 1 : 2;
    const __m512i pe = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i po = _mm512_add_epi32(pe, _mm512_set1_epi32(1));
    __m512 acc[PK_GRID_NC];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int i = 0; i < nsb; i++) {
        const uint8_t *q = g + (size_t)i * G8_SB(T);
        ht_prefetch(q, G8_SB(T));
        __m512i isum[PK_GRID_NC];
        HT_UNROLL
        for (int c = 0; c < NC; c++) isum[c] = _mm512_setzero_si512();
        for (int ib = 0; ib < 8; ib++) {
            __m512i w[4][2], lo[2][PK_GRID_NC], hi[2][PK_GRID_NC], s[2];
            grid8_values(T, q, ib, w);
            grid8_scales(T, q, ib, &s[0], &s[1]);
            HT_UNROLL
            for (int l = 0; l < 4; l++) {
                const int b = 4 * ib + l, k = halves == 2 && l >= 2, first = halves == 2 ? l % 2 == 0 : l == 0;
                const __mmask64 sl = grid8_signs(T, q, b, 0), sh = grid8_signs(T, q, b, 1);
                HT_UNROLL
                for (int c = 0; c < NC; c++) {
                    const __m512i x = _mm512_set1_epi64((long long)ld64(a + (size_t)c * as + (size_t)i * 256 + 8 * b));
                    lo[k][c] = sdot(first ? _mm512_setzero_si512() : lo[k][c], x, w[l][0], sl);
                    hi[k][c] = sdot(first ? _mm512_setzero_si512() : hi[k][c], x, w[l][1], sh);
                }
            }
            HT_UNROLL
            for (int k = 0; k < halves; k++)
                HT_UNROLL
                for (int c = 0; c < NC; c++) {
                    const __m512i dot = _mm512_add_epi32(_mm512_permutex2var_epi32(lo[k][c], pe, hi[k][c]),
                                                         _mm512_permutex2var_epi32(lo[k][c], po, hi[k][c]));
                    isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(dot, s[k]));
                }
        }
        const __m512 dw = _mm512_cvtph_ps(ld256(q + G8_D(T)));
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const __m512 da = _mm512_set1_ps(((const float *)(a + (size_t)c * as + n))[i]);
            acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(isum[c])));
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++) store16(y + (size_t)c * ys, nr, _mm512_mul_ps(_mm512_set1_ps(0.125f), acc[c]));
}

/* Prefill from the pack: super-block i decoded straight into slot s of the panel gemm's panel
 * (quant_x86_iqpanel.h: 4 elements of 16 rows a vector), the signed grid values + 64, the 16-element scales
 * in its three forms, d as floats. */
HT_AI void iqp_scales16(iqp_panel *p, int s, int ib, __m512i s0, __m512i s1) {
    _mm512_store_si512(p->sc[s][2 * ib], s0);
    _mm512_store_si512(p->sc[s][2 * ib + 1], s1);
    _mm512_store_si512(p->sc2[s][ib], _mm512_or_si512(s0, _mm512_slli_epi32(s1, 16)));
}
HT_AI __m512i iqp_signed64(__m512i w, __mmask64 sg) {
    return _mm512_add_epi8(_mm512_mask_sub_epi8(w, sg, _mm512_setzero_si512(), w), _mm512_set1_epi8(64));
}
HT_VBMI_AI void dec_grid8(const uint32_t T, const uint8_t *g, size_t i, iqp_panel *p, int s) {
    const uint8_t *q = g + i * G8_SB(T);
    const __m512i pe = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i po = _mm512_add_epi32(pe, _mm512_set1_epi32(1));
    for (int ib = 0; ib < 8; ib++) {
        __m512i w[4][2], s0, s1;
        grid8_values(T, q, ib, w);
        HT_UNROLL
        for (int l = 0; l < 4; l++) {   /* elements 8b.. of the 16 rows: dwords 2b, 2b + 1 of the panel */
            const int b = 4 * ib + l;
            const __m512i gl = iqp_signed64(w[l][0], grid8_signs(T, q, b, 0));
            const __m512i gh = iqp_signed64(w[l][1], grid8_signs(T, q, b, 1));
            _mm512_store_si512(p->q[s][2 * b], _mm512_permutex2var_epi32(gl, pe, gh));
            _mm512_store_si512(p->q[s][2 * b + 1], _mm512_permutex2var_epi32(gl, po, gh));
        }
        grid8_scales(T, q, ib, &s0, &s1);
        iqp_scales16(p, s, ib, s0, s1);
    }
    _mm512_store_ps(p->d[s], _mm512_cvtph_ps(ld256(q + G8_D(T))));
}

/* The ht_pack of a grid type from its pack, tile and panel decoder (G is grid8 or grid4). */
#define GRID_PACK(name, T, NAME, G, SB)                                                                            \
    static size_t pk_##name##_x16_bytes(int64_t n) { return (size_t)(n / 256) * (SB); }                            \
    static void pk_##name##_x16_pack(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) {              \
        pack_##G(T, src, rb, nr, n, dst);                                                                        \
    }                                                                                                            \
    HT_VBMI_AI void name##x16_tile(const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) { \
        G##x16_tile(T, NC, n, g, nr, a, as, y, ys);                                                              \
    }                                                                                                            \
    PK_TILE_A(HT_VBMI, pk_##name##_x16_tile, name##x16_tile, 4)                                                  \
    HT_VBMI static void dec_##name##_x16(const uint8_t *g, size_t i, iqp_panel *p, int s) { dec_##G(T, g, i, p, s); } \
    static void pk_##name##_x16_gemm(int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, int nc, float *y, \
                                     size_t ys) {                                                                \
        iqp_gemm(T, n, g, 0, nr, a, as, nc, y, ys, dec_##name##_x16);                                                 \
    }                                                                                                            \
    static const ht_pack pk_##name##_x16 = {NAME, 16, PK_GRID_NC, pk_##name##_x16_bytes, pk_##name##_x16_pack,     \
                                           pk_k_act_bytes, pk_k_act_prep, pk_##name##_x16_tile, 0, NULL, NULL,       \
                                           pk_##name##_x16_gemm, NULL, 0};

GRID_PACK(iq2_xxs, HT_IQ2_XXS, "IQ2_XXSx16", grid8, G8_SB(HT_IQ2_XXS))
GRID_PACK(iq2_xs, HT_IQ2_XS, "IQ2_XSx16", grid8, G8_SB(HT_IQ2_XS))
GRID_PACK(iq2_s, HT_IQ2_S, "IQ2_Sx16", grid8, G8_SB(HT_IQ2_S))
GRID_PACK(iq1_s, HT_IQ1_S, "IQ1_Sx16", grid8, G8_SB(HT_IQ1_S))
GRID_PACK(iq1_m, HT_IQ1_M, "IQ1_Mx16", grid8, G8_SB(HT_IQ1_M))

/* IQ3_S and IQ3_XXS x 16, the 4-byte grids, without gathers as IQ2_XXS: an entry's 4 bytes take 8 values (IQ3_S
 * 1, 3 .. 15; IQ3_XXS 4, 12 .. 62), so it is four 3-bit codes, 12 bits, kept as two byte planes of 256 (IQ3_XXS)
 * or 512 (IQ3_S: a ninth index bit, a third level of blends) entries. A vector of 64 indices is 4 element groups
 * (4 weights) of 16 rows; after VPUNPCK a qword holds the code words of 2 rows x 2 groups, and VPMULTISHIFTQB
 * gives each row's dword its 4 codes.
 * Super-block i of a group (16 * 110 bytes for IQ3_S, 16 * 102 for IQ3_XXS): the (low) index bytes of element
 * groups 8 ib + 4 v .. + 3 as a 64-byte vector at 64 (2 ib + v) (128-bit lane k, byte p: row 2 j + (p % 4) / 2
 * with j = 2 k + p % 8 / 4, group 8 ib + 4 v + 2 (p / 8) + p % 2), for IQ3_S their ninth bits as a u64 a vector
 * (128), the sign nibbles as one u64 per group b = 8 ib + k (row r's in bits 4r.., 512; IQ3_XXS's from ksigns_iq2xs
 * of its 7-bit fields), the scale nibbles sc[ib / 2][r] (64), the halves d[r] (32). IQ3_XXS's is 4 bytes a row
 * more than the file's 98. Missing rows: zeros. */
#define G4_SG(T) ((T) == HT_IQ3_S ? 1152 : 1024)
#define G4_SC(T) (G4_SG(T) + 512)
#define G4_D(T) (G4_SC(T) + 64)
#define G4_SB(T) (G4_D(T) + 32)
HT_AI void pack_grid4(const uint32_t T, const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst) {
    const int64_t nsb = n / 256;
    memset(dst, 0, (size_t)nsb * G4_SB(T));
    for (int64_t i = 0; i < nsb; i++) {
        uint8_t *q = dst + i * G4_SB(T), *sc = q + G4_SC(T);
        uint64_t sg[64] = {0}, top[16] = {0};
        ht_half *d = (ht_half *)(q + G4_D(T));
        for (int r = 0; r < nr; r++) {
            const uint8_t *blk = src + (size_t)r * rb;
            for (int ib = 0; ib < 8; ib++) {
                uint32_t w = 0;
                if (T == HT_IQ3_XXS) memcpy(&w, ((const block_iq3_xxs *)blk + i)->qs + 64 + 4 * ib, sizeof w);
                for (int k = 0; k < 8; k++) {
                    const int v = k / 4, kk = k % 4, j = r / 2, p = 16 * (j / 2) + 8 * (kk / 2) + 4 * (j % 2) + 2 * (r % 2) + kk % 2;
                    const int at = 64 * (2 * ib + v) + p;
                    if (T == HT_IQ3_S) {
                        const block_iq3_s *b = (const block_iq3_s *)blk + i;
                        q[at] = b->qs[8 * ib + k];
                        top[2 * ib + v] |= (uint64_t)(b->qh[ib] >> k & 1) << p;
                        sg[8 * ib + k] |= (uint64_t)(b->signs[4 * ib + k / 2] >> 4 * (k % 2) & 15) << 4 * r;
                    } else {
                        q[at] = ((const block_iq3_xxs *)blk + i)->qs[8 * ib + k];
                        sg[8 * ib + k] |= (uint64_t)(ht_ksigns_iq2xs[w >> 7 * (k / 2) & 127] >> 4 * (k % 2) & 15) << 4 * r;
                    }
                }
                if (T == HT_IQ3_S) sc[ib / 2 * 16 + r] = ((const block_iq3_s *)blk + i)->scales[ib / 2];
                else sc[ib / 2 * 16 + r] |= (uint8_t)((w >> 28) << 4 * (ib % 2));
            }
            d[r] = T == HT_IQ3_S ? ((const block_iq3_s *)blk + i)->d : ((const block_iq3_xxs *)blk + i)->d;
        }
        if (T == HT_IQ3_S) memcpy(q + 1024, top, sizeof top);
        memcpy(q + G4_SG(T), sg, sizeof sg);
    }
}

/* The unsigned grid values of element groups 8 ib + 4 v + k (k < 4) of 16 rows, w[k], a dword per row. */
HT_VBMI_AI void grid4_values(const uint32_t T, const uint8_t *q, int ib, int v, __m512i w[4]) {
    const grid_codes *c = T == HT_IQ3_S ? &gc_iq3s : &gc_iq3xxs;
    const __m512i val = _mm512_load_si512(c->val);
    __m512i u[2];
    const __mmask64 h8 = T == HT_IQ3_S ? _cvtu64_mask64(ld64(q + 1024 + 8 * (2 * ib + v))) : 0;
    code_words(T == HT_IQ3_S ? 512 : 256, c, q + 64 * (2 * ib + v), &h8, u);
    HT_UNROLL
    for (int k = 0; k < 4; k++) {   /* row 2j: word k % 2 of qword j; row 2j + 1: word 2 + k % 2 */
        const unsigned e = 16u * (unsigned)(k % 2);
        const __m512i ctl = _mm512_set1_epi64((long long)(0x2926232009060300ull + 0x0101010101010101ull * e));
        w[k] = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(ctl, u[k / 2]), val);
    }
}

/* Super-block i of a group into slot s of the panel gemm's panel, as dec_iq2_xxs_x16. */
HT_VBMI_AI void dec_grid4(const uint32_t T, const uint8_t *g, size_t i, iqp_panel *p, int s) {
    const uint8_t *q = g + i * G4_SB(T);
    for (int ib = 0; ib < 8; ib++) {
        for (int v = 0; v < 2; v++) {
            __m512i w[4];
            grid4_values(T, q, ib, v, w);
            HT_UNROLL
            for (int k = 0; k < 4; k++) {
                const int b = 8 * ib + 4 * v + k;
                _mm512_store_si512(p->q[s][b], iqp_signed64(w[k], _cvtu64_mask64(ld64(q + G4_SG(T) + 8 * b))));
            }
        }
        const __m512i sc = nib_scales(q + G4_SC(T) + ib / 2 * 16, ib);
        iqp_scales16(p, s, ib, sc, sc);
    }
    _mm512_store_ps(p->d[s], _mm512_cvtph_ps(ld256(q + G4_D(T))));
}

/* 4 elements of 16 rows a vector, a dword lane per row; two VPDPBUSD chains (k even, odd) per 32-block. */
HT_VBMI_AI void grid4x16_tile(const uint32_t T, const int NC, int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, float *y, size_t ys) {
    const int nsb = n / 256;
    __m512 acc[PK_GRID_NC];
    HT_UNROLL
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int i = 0; i < nsb; i++) {
        const uint8_t *q = g + (size_t)i * G4_SB(T);
        ht_prefetch(q, G4_SB(T));
        __m512i isum[PK_GRID_NC];
        HT_UNROLL
        for (int c = 0; c < NC; c++) isum[c] = _mm512_setzero_si512();
        for (int ib = 0; ib < 8; ib++) {
            __m512i ev[PK_GRID_NC], od[PK_GRID_NC];
            HT_UNROLL
            for (int v = 0; v < 2; v++) {
                __m512i w[4];
                grid4_values(T, q, ib, v, w);
                HT_UNROLL
                for (int k = 4 * v; k < 4 * v + 4; k++) {
                    const int b = 8 * ib + k;
                    const __mmask64 sm = _cvtu64_mask64(ld64(q + G4_SG(T) + 8 * b));
                    HT_UNROLL
                    for (int c = 0; c < NC; c++) {
                        const __m512i x = _mm512_set1_epi32(ld32(a + (size_t)c * as + (size_t)i * 256 + 4 * b));
                        if (k % 2) od[c] = sdot(k > 1 ? od[c] : _mm512_setzero_si512(), x, w[k % 4], sm);
                        else ev[c] = sdot(k ? ev[c] : _mm512_setzero_si512(), x, w[k % 4], sm);
                    }
                }
            }
            const __m512i s = nib_scales(q + G4_SC(T) + ib / 2 * 16, ib);
            HT_UNROLL
            for (int c = 0; c < NC; c++) isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(_mm512_add_epi32(ev[c], od[c]), s));
        }
        const __m512 dw = _mm512_cvtph_ps(ld256(q + G4_D(T)));
        HT_UNROLL
        for (int c = 0; c < NC; c++) {
            const __m512 da = _mm512_set1_ps(((const float *)(a + (size_t)c * as + n))[i]);
            acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(isum[c])));
        }
    }
    HT_UNROLL
    for (int c = 0; c < NC; c++)
        store16(y + (size_t)c * ys, nr, ht_iq_post(T) != 1.0f ? _mm512_mul_ps(_mm512_set1_ps(ht_iq_post(T)), acc[c]) : acc[c]);
}

GRID_PACK(iq3_s, HT_IQ3_S, "IQ3_Sx16", grid4, G4_SB(HT_IQ3_S))
GRID_PACK(iq3_xxs, HT_IQ3_XXS, "IQ3_XXSx16", grid4, G4_SB(HT_IQ3_XXS))
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
                                     pk_k_act_prep, pk_iq4_xs_x8_tile, 0, NULL, NULL, NULL, NULL, 0};
#endif
