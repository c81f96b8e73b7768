/* test_quant_simd.c — every SIMD kernel set this CPU runs, against the scalar reference (quant_ref.c).
 *
 * For each built-in set (quant_backend_name / quant_set_backend), on fixed-seed random data:
 * 1. Activation quantizers (Q8_0, Q8_1, Q8_K from_float) and F16's (the KV cache's): byte-identical to the
 *    scalar ones, on several distributions, rounding ties and subnormal halves included.
 * 2. Exact dot products: random block bytes (every quant and sub-scale bit pattern) with all float scales
 *    set to 1 and activations with d = 1, so every partial sum is an integer below 2^24 and the result must
 *    equal the scalar one exactly — whatever the accumulation order. Lengths leave partial block groups.
 * 3. Realistic dot products: quantized Gaussian data, real scales: within 1e-5 of sum |w_i a_i|.
 * 4. Tiles: vec_dot_tile for every nr in 1..9, nc in 1..4 is bit-identical to vec_dot on each output, on short rows
 *    and on rows of several HT_TILE_CHUNKs (the scalar set checks ht_vec_dot_tile's fallback loop).
 * 4b. Batch products (a type's ht_gemm, where the set has one): every output of nr rows x nc tokens, nr and nc
 *    below and past the kernel's groups, short rows and long ones, and random blocks against activations at
 *    +-127 (the int16 saturation bound of AVX2's PMADDUBSW), bit-identical to vec_dot.
 * 4c. Exact packs (the i-quants' ht_pack: IQ4_XS and the grid types IQ1_S .. IQ3_S): every row count 1..rows of a group and
 *    several groups, every tile width 1..max_nc and, where the pack has its own batch product (ht_pack.gemm, for
 *    batches past max_nc), max_nc + 1..11 tokens, quantized and random blocks against Gaussian activations and
 *    extremes (all +127, all -127, +-127 at random), bit-identical to the reference vec_dot.
 * 5. Transposed products (dot_t, F32 and F16): within 1e-5 of sum |w_i a_i| of the scalar ones, and each
 *    output bit-identical whatever n (a prefix of the positions) and nc.
 * 6. Multiply-add peaks (quant_mac_peak): every SIMD set names an instruction and measures a rate a CPU can
 *    have (a loop the compiler dropped would read a rate past any), the scalar set none.
 * 7. Attention over a Q8_0 row cache (kq, pv): scores bit-identical to the reference vec_dot for any number of
 *    positions and columns; softmax·V bit-identical to the scalar pv (ring wraps, head sizes 32..256), and each
 *    output the same whatever the other columns and whether its trailing zero-probability positions are given.
 * Self-contained (quant layer only), so tests/test_neon_qemu.sh also builds it for aarch64.
 * HEARTH_TEST_QUICK=1 (test_x86_dispatch_qemu.sh's emulated CPUs, where this program runs 10-50x slower and the
 * same sets have had the full checks natively): every type, kernel and boundary still, but the tiles and batch
 * products on short rows only (not on rows of several chunks) and the Q8_0 attention at 1, 5, 33 and 37
 * columns instead of every odd count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quant_simd.h"
#include "testutil.h"

static uint64_t rng_state;
static uint64_t rng_next(void) {   /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_uniform(void) { return (double)(rng_next() >> 11) * 0x1.0p-53; }
static double rng_gauss(void) { return sqrt(-2.0 * log(1.0 - rng_uniform())) * cos(2.0 * M_PI * rng_uniform()); }
static int rng_int(int lo, int hi) { return lo + (int)(rng_next() % (uint64_t)(hi - lo + 1)); }
static int quick;   /* HEARTH_TEST_QUICK (above) */

static const uint32_t weight_types[] = {HT_F32, HT_F16, HT_BF16, HT_Q4_0, HT_Q4_1, HT_Q5_0, HT_Q5_1, HT_Q8_0,
                                        HT_IQ4_NL, HT_Q2_K, HT_Q3_K, HT_Q4_K, HT_Q5_K, HT_Q6_K, HT_IQ4_XS,
                                        HT_MXFP4, HT_IQ2_XXS, HT_IQ2_XS, HT_IQ2_S, HT_IQ3_XXS, HT_IQ3_S, HT_IQ1_S,
                                        HT_IQ1_M, HT_TQ1_0, HT_TQ2_0};
#define N_WTYPES (sizeof weight_types / sizeof weight_types[0])
#define NMAX 4096
#define ROWS 18   /* tile rows: 1..18 covers groups of 4 (chunked four at a time for long rows of halves) and leftovers */

static const ht_half HALF_ONE = 0x3C00;

/* ---- data ---- */
enum { D_GAUSS, D_OUTLIERS, D_ZEROS, D_SPARSE, D_TIES, D_TINY, N_DIST };
static const char *const dist_name[N_DIST] = {"gauss", "outliers", "zeros", "sparse", "ties", "tiny"};

static void fill(float *x, int n, int dist, uint64_t seed) {
    rng_state = seed * 7919u + (uint64_t)dist;
    for (int i = 0; i < n; i++) {
        double v = rng_gauss();
        if (dist == D_OUTLIERS && rng_uniform() < 0.01) v *= 40;
        if (dist == D_ZEROS) v = 0;
        if (dist == D_SPARSE && rng_uniform() < 0.9) v = 0;
        /* ties: blocks whose largest magnitude is 127 (scale 1) and whose other values end in .5 */
        if (dist == D_TIES) v = i % 32 == 5 ? (i & 64 ? -127.0 : 127.0) : rng_int(-120, 120) + 0.5;
        if (dist == D_TINY) v *= 1e-30;
        x[i] = (float)v;
    }
}

/* Random bytes in every weight block; the float scale fields 1 (exact) or in [0.5, 1.5). Float types get
 * small integers (exact) or Gaussian values. */
static void random_weights(uint32_t type, void *dst, int n, bool exact) {
    const ht_traits *tr = ht_get_traits_ref(type);
    uint8_t *p = dst;
    const int nb = n / tr->blck;
    for (size_t i = 0; i < (size_t)nb * tr->type_size; i++) p[i] = (uint8_t)rng_next();
    for (int i = 0; i < nb; i++) {
        const float g = exact ? (float)rng_int(-8, 8) : (float)rng_gauss();
        const ht_half s = exact ? HALF_ONE : f32_to_fp16((float)(0.5 + rng_uniform()));
        const ht_half s2 = exact ? HALF_ONE : f32_to_fp16((float)(0.5 + rng_uniform()));
        switch (type) {
        case HT_F32: ((float *)dst)[i] = g; break;
        case HT_F16: ((uint16_t *)dst)[i] = f32_to_fp16(g); break;
        case HT_BF16: ((uint16_t *)dst)[i] = f32_to_bf16(g); break;
        case HT_Q4_0: ((block_q4_0 *)dst)[i].d = s; break;
        case HT_Q4_1: ((block_q4_1 *)dst)[i].d = s; ((block_q4_1 *)dst)[i].m = s2; break;
        case HT_Q5_0: ((block_q5_0 *)dst)[i].d = s; break;
        case HT_Q5_1: ((block_q5_1 *)dst)[i].d = s; ((block_q5_1 *)dst)[i].m = s2; break;
        case HT_Q8_0: ((block_q8_0 *)dst)[i].d = s; break;
        case HT_IQ4_NL: ((block_iq4_nl *)dst)[i].d = s; break;
        case HT_Q2_K: ((block_q2_K *)dst)[i].d = s; ((block_q2_K *)dst)[i].dmin = s2; break;
        case HT_Q3_K: ((block_q3_K *)dst)[i].d = s; break;
        case HT_Q4_K: ((block_q4_K *)dst)[i].d = s; ((block_q4_K *)dst)[i].dmin = s2; break;
        case HT_Q5_K: ((block_q5_K *)dst)[i].d = s; ((block_q5_K *)dst)[i].dmin = s2; break;
        case HT_Q6_K: ((block_q6_K *)dst)[i].d = s; break;
        case HT_IQ4_XS: ((block_iq4_xs *)dst)[i].d = s; break;
        case HT_IQ2_XXS: ((block_iq2_xxs *)dst)[i].d = s; break;
        case HT_IQ2_XS: ((block_iq2_xs *)dst)[i].d = s; break;
        case HT_IQ2_S: ((block_iq2_s *)dst)[i].d = s; break;
        case HT_IQ3_XXS: ((block_iq3_xxs *)dst)[i].d = s; break;
        case HT_IQ3_S: ((block_iq3_s *)dst)[i].d = s; break;
        case HT_IQ1_S: ((block_iq1_s *)dst)[i].d = s; break;
        case HT_IQ1_M:   /* d in the top nibbles of the four scale words */
            for (int k = 0; k < 4; k++) {
                uint8_t *hi = &((block_iq1_m *)dst)[i].scales[2 * k + 1];
                *hi = (uint8_t)((*hi & 0x0F) | ((s >> 4 * k) & 0xF) << 4);
            }
            break;
        case HT_TQ1_0: ((block_tq1_0 *)dst)[i].d = s; break;
        case HT_TQ2_0: ((block_tq2_0 *)dst)[i].d = s; break;
        case HT_MXFP4: ((block_mxfp4 *)dst)[i].e = exact ? 128 : (uint8_t)rng_int(127, 128); break;   /* 1; 0.5 or 1 */
        default: REQUIRE(0, "no layout for type %u", type);
        }
    }
}

/* Realistic weights: x quantized, or for a type without a quantizer (most i-quants) random blocks with real
 * scales. */
static void weights_from(uint32_t type, const float *x, void *dst, int n) {
    const ht_traits *tr = ht_get_traits_ref(type);
    if (tr->from_float) tr->from_float(x, dst, n);
    else random_weights(type, dst, n, false);
}

/* Activation bytes in [-127, 127] (a quarter at +-127), consistent bsums, scales 1 (exact) or random. */
static int8_t act_byte(void) { return rng_uniform() < 0.25 ? (rng_next() & 1 ? 127 : -127) : (int8_t)rng_int(-127, 127); }

static void random_acts(uint32_t type, void *dst, int n, bool exact) {
    const float d = exact ? 1.0f : (float)(0.01 + rng_uniform());
    if (type == HT_F32) {
        for (int i = 0; i < n; i++) ((float *)dst)[i] = exact ? (float)rng_int(-8, 8) : (float)rng_gauss();
    } else if (type == HT_Q8_0) {
        block_q8_0 *b = dst;
        for (int i = 0; i < n / QK8_0; i++) {
            b[i].d = f32_to_fp16(d);
            for (int j = 0; j < QK8_0; j++) b[i].qs[j] = act_byte();
        }
    } else if (type == HT_Q8_1) {
        block_q8_1 *b = dst;
        for (int i = 0; i < n / QK8_1; i++) {
            int sum = 0;
            for (int j = 0; j < QK8_1; j++) sum += b[i].qs[j] = act_byte();
            b[i].d = f32_to_fp16(d);
            b[i].s = exact ? HALF_ONE : f32_to_fp16(d * (float)sum);
        }
    } else {
        block_q8_K *b = dst;
        for (int i = 0; i < n / QK_K; i++) {
            b[i].d = d;
            for (int j = 0; j < QK_K / 16; j++) {
                int sum = 0;
                for (int k = 0; k < 16; k++) sum += b[i].qs[16 * j + k] = act_byte();
                b[i].bsums[j] = (int16_t)sum;
            }
        }
    }
}

/* The n of a test: exact ones stay at most 1024 elements (32 blocks of 32: every partial sum < 2^24),
 * odd lengths leave partial groups of blocks and vector tails. */
static int pick_n(uint32_t type, int variant) {
    const int blck = ht_get_traits_ref(type)->blck;
    static const int n32[] = {1024, 32, 416, 224}, nk[] = {1024, 256, 768, 512}, nf[] = {1024, 1, 1000, 77};
    return blck == 1 ? nf[variant] : blck == 32 ? n32[variant] : nk[variant];
}

/* ---- 1. activation quantizers ---- */
static void test_from_float(const char *set) {
    static float x[NMAX];
    static uint8_t want[NMAX * 2], got[NMAX * 2];
    const uint32_t types[] = {HT_Q8_0, HT_Q8_1, HT_Q8_K, HT_F16};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        const ht_traits *ref = ht_get_traits_ref(types[t]), *act = ht_get_traits(types[t]);
        for (int dist = 0; dist < N_DIST; dist++) {
            fill(x, NMAX, dist, 11 + t);
            memset(want, 0x5A, sizeof want);
            memset(got, 0xA5, sizeof got);
            ref->from_float(x, want, NMAX);
            act->from_float(x, got, NMAX);
            const size_t bytes = ht_row_size(types[t], NMAX);
            size_t first = bytes;
            for (size_t i = 0; i < bytes && first == bytes; i++)
                if (want[i] != got[i]) first = i;
            CHECK(first == bytes, "%s: %s from_float on %s differs from scalar (block %zu)", set, ref->name,
                  dist_name[dist], first / ref->type_size);
        }
    }
}

/* ---- 2 and 3. dot products ---- */
static double abs_dot(uint32_t type, const void *w, const void *a, int n) {
    static float wf[NMAX], af[NMAX];
    const ht_traits *tw = ht_get_traits_ref(type), *ta = ht_get_traits_ref((uint32_t)tw->vec_dot_type);
    const bool q8_1 = tw->vec_dot_type == HT_Q8_1;
    tw->to_float(w, wf, n);
    ta->to_float(a, af, n);
    double s = 0;
    for (int i = 0; i < n; i++) s += fabs((double)wf[i] * af[i]);
    if (q8_1)   /* the m * s terms */
        for (int i = 0; i < n / QK8_1; i++) s += 2 * fabs((double)fp16_to_f32(((const block_q8_1 *)a)[i].s));
    return s;
}

static int test_dots(const char *set, bool exact) {
    static uint8_t w[NMAX * 4], a[NMAX * 4];
    static float wf[NMAX], af[NMAX];
    int checked = 0;
    for (size_t t = 0; t < N_WTYPES; t++) {
        const ht_traits *ref = ht_get_traits_ref(weight_types[t]), *act = ht_get_traits(weight_types[t]);
        const uint32_t at = (uint32_t)ref->vec_dot_type;
        for (int v = 0; v < 4; v++) {
            const int n = exact ? pick_n(weight_types[t], v) : v < 3 ? NMAX : ref->blck == 1 ? NMAX - 5 : NMAX - 4 * ref->blck;
            rng_state = 1000 * t + (uint64_t)v + (exact ? 0 : 500);
            if (exact) {
                random_weights(weight_types[t], w, n, true);
                random_acts(at, a, n, true);
            } else {
                fill(wf, n, v == 1 ? D_OUTLIERS : D_GAUSS, 20 + t);
                fill(af, n, v == 2 ? D_SPARSE : D_GAUSS, 40 + t);
                weights_from(weight_types[t], wf, w, n);
                ht_get_traits_ref(at)->from_float(af, a, n);
            }
            const float want = ref->vec_dot(n, w, a), got = act->vec_dot(n, w, a);
            if (exact || ref->blck == QK_K) {   /* super-block types: the scalar float order, bit for bit */
                CHECK(got == want, "%s: %s %svec_dot n=%d: %.9g, scalar %.9g", set, ref->name, exact ? "exact " : "", n,
                      got, want);
            } else {
                const double tol = 1e-5 * abs_dot(weight_types[t], w, a, n) + 1e-30;
                CHECK(fabs((double)got - want) <= tol, "%s: %s vec_dot n=%d: %.9g, scalar %.9g (|diff| %.3g > %.3g)",
                      set, ref->name, n, got, want, fabs((double)got - want), tol);
            }
            checked++;
        }
    }
    return checked;
}

/* ---- 4. tiles ---- */
#define NTILE 9216   /* > 2 chunks of HT_TILE_CHUNK (4096): rows are processed chunk by chunk */

/* Short rows (partial block groups, vector tails) and long ones (several chunks plus a remainder). */
static int tile_n(int blck, int big) {
    if (!big) return blck == 1 ? 1000 : blck == 32 ? 416 : 768;
    return blck == 1 ? 9001 : blck == 32 ? 9088 : NTILE;
}

static int test_tiles(const char *set) {
    static uint8_t w[ROWS][NTILE * 4], a[HT_TILE_MAX][NTILE * 4];
    static float wf[NTILE], af[NTILE];
    int checked = 0;
    for (size_t t = 0; t < N_WTYPES; t++)
        for (int big = 0; big < 2 - quick; big++) {
            const ht_traits *act = ht_get_traits(weight_types[t]);
            const ht_traits *ta = ht_get_traits_ref((uint32_t)act->vec_dot_type);
            const int n = tile_n(act->blck, big);
            for (int r = 0; r < ROWS; r++) {
                fill(wf, n, D_GAUSS, 60 + 10 * t + (uint64_t)r);
                weights_from(weight_types[t], wf, w[r], n);
            }
            for (int c = 0; c < HT_TILE_MAX; c++) {
                fill(af, n, c == 3 ? D_OUTLIERS : D_GAUSS, 90 + 10 * t + (uint64_t)c);
                ta->from_float(af, a[c], n);
            }
            float one[HT_TILE_MAX][ROWS];
            for (int c = 0; c < HT_TILE_MAX; c++)
                for (int r = 0; r < ROWS; r++) one[c][r] = act->vec_dot(n, w[r], a[c]);
            for (int nr = 1; nr <= ROWS; nr++)
                for (int nc = 1; nc <= HT_TILE_MAX; nc++) {
                    float y[HT_TILE_MAX][ROWS + 3];
                    memset(y, 0xFF, sizeof y);
                    ht_vec_dot_tile(act, n, w[0], sizeof w[0], nr, a[0], sizeof a[0], nc, &y[0][0], ROWS + 3);
                    int bad = 0;
                    for (int c = 0; c < nc; c++)
                        for (int r = 0; r < nr; r++) bad += memcmp(&y[c][r], &one[c][r], sizeof(float)) != 0;
                    CHECK(bad == 0, "%s: %s tile %dx%d, n=%d: %d outputs differ from vec_dot", set, act->name, nr, nc, n,
                          bad);
                    checked++;
                }
        }
    return checked;
}

/* ---- 4b. batch products (ht_gemm: the i-quants' panel GEMM of the x86 sets) ----
 * Every output of gemm->run over nr rows x nc tokens is bit-identical to vec_dot's, for row counts below, at and
 * past the panel's rows, token counts below and past its token groups, rows of a few super-blocks and of many
 * (several panels of super-blocks), and on extremes (random blocks against activations all +127 or all -127);
 * outputs past nr are left alone. Returns the calls checked. */
/* Activations of Q8_K blocks all at q (+-127, with their bsums) and d = 1: against random weight blocks (every
 * grid index, sign and scale, the largest included) the worst case of an int8 product's intermediate sums — a
 * PMADDUBSW pair of two large same-sign products saturates int16 unless the panel's offsets keep it below. */
static void extreme_acts(void *dst, int n, int q) {
    block_q8_K *b = dst;
    for (int i = 0; i < n / QK_K; i++) {
        b[i].d = 1.0f;
        memset(b[i].qs, (int8_t)q, sizeof b[i].qs);
        for (int j = 0; j < QK_K / 16; j++) b[i].bsums[j] = (int16_t)(16 * q);
    }
}

#define G_ROWS 35
#define G_TOK 37
static int test_gemm(const char *set) {
    static uint8_t w[G_ROWS][NTILE * 4], a[G_TOK][NTILE * 4];
    static float wf[NTILE], af[NTILE], one[G_TOK][G_ROWS], y[G_TOK][G_ROWS + 3];
    static const int nrs[] = {1, 5, 15, 16, 17, 35}, ncs[] = {1, 3, 4, 8, 9, 37};
    int checked = 0;
    for (size_t t = 0; t < N_WTYPES; t++) {
        const ht_traits *act = ht_get_traits(weight_types[t]);
        if (!act->gemm) continue;
        const ht_traits *ta = ht_get_traits_ref((uint32_t)act->vec_dot_type);
        for (int v = 0; v < 3; v++) {   /* short rows, long rows, extremes */
            if (quick && v == 1) continue;
            const int n = tile_n(act->blck, v == 1);
            rng_state = 150 + t;
            for (int r = 0; r < G_ROWS; r++) {
                fill(wf, n, D_GAUSS, 160 + 10 * t + (uint64_t)r);
                if (v == 2) random_weights(weight_types[t], w[r], n, true);
                else weights_from(weight_types[t], wf, w[r], n);
            }
            for (int c = 0; c < G_TOK; c++) {
                fill(af, n, c % 5 == 3 ? D_OUTLIERS : c % 7 == 6 ? D_SPARSE : D_GAUSS, 190 + 10 * t + (uint64_t)c);
                ta->from_float(af, a[c], n);
                if (v == 2 && c % 3 < 2) extreme_acts(a[c], n, c % 3 ? -127 : 127);
                else if (v == 2) random_acts(act->vec_dot_type, a[c], n, true);
            }
            for (int c = 0; c < G_TOK; c++)
                for (int r = 0; r < G_ROWS; r++) one[c][r] = act->vec_dot(n, w[r], a[c]);
            for (size_t i = 0; i < sizeof nrs / sizeof *nrs; i++)
                for (size_t k = 0; k < sizeof ncs / sizeof *ncs; k++) {
                    const int nr = nrs[i], nc = ncs[k];
                    memset(y, 0xFF, sizeof y);
                    act->gemm->run(n, w[0], sizeof w[0], nr, a[0], sizeof a[0], nc, &y[0][0], G_ROWS + 3);
                    int bad = 0, touched = 0;
                    for (int c = 0; c < nc; c++) {
                        for (int r = 0; r < nr; r++) bad += memcmp(&y[c][r], &one[c][r], sizeof(float)) != 0;
                        for (int r = nr; r < G_ROWS + 3; r++) touched += ((const uint32_t *)y[c])[r] != 0xFFFFFFFFu;
                    }
                    CHECK(bad == 0 && touched == 0, "%s: %s %s %dx%d, n=%d: %d outputs differ from vec_dot, %d written past nr",
                          set, act->name, act->gemm->name, nr, nc, n, bad, touched);
                    checked++;
                }
        }
    }
    return checked;
}

#define PK_ROWS 40
#define PK_TOK 11
static int test_packs(const char *set) {
    static const uint32_t exact[] = {HT_IQ4_XS, HT_IQ2_XXS, HT_IQ2_XS, HT_IQ2_S, HT_IQ3_S, HT_IQ3_XXS, HT_IQ1_S, HT_IQ1_M};
    static uint8_t w[PK_ROWS][NTILE * 4];
    static float wf[NTILE], x[PK_TOK][NTILE], one[PK_TOK][PK_ROWS], y[PK_TOK][PK_ROWS];
    int checked = 0;
    for (size_t t = 0; t < sizeof exact / sizeof *exact; t++) {
        const ht_pack *pk = ht_get_traits(exact[t])->pack;
        if (!pk) continue;
        const ht_traits *ref = ht_get_traits_ref(exact[t]), *ta = ht_get_traits_ref((uint32_t)ref->vec_dot_type);
        CHECK(pk->round_rel == 0 && pk->max_nc <= PK_TOK && pk->rows <= PK_ROWS, "%s: %s pack shape", set, pk->name);
        for (int v = 0; v < 2; v++) {   /* quantized Gaussian rows, random blocks */
            const int n = tile_n(ref->blck, v == 1);
            rng_state = 500 + 10 * t + (uint64_t)v;
            for (int r = 0; r < PK_ROWS; r++) {
                fill(wf, n, D_GAUSS, 510 + 10 * t + (uint64_t)r);
                if (v) random_weights(exact[t], w[r], n, false);
                else weights_from(exact[t], wf, w[r], n);
            }
            for (int c = 0; c < PK_TOK; c++) {   /* Gaussian, all -127, all +127, +-127 */
                fill(x[c], n, D_GAUSS, 530 + 10 * t + (uint64_t)c);
                for (int e = 0; e < n && c % 4; e++) x[c][e] = c % 4 == 1 ? 1.0f : c % 4 == 2 ? -1.0f : rng_next() & 1 ? 1.0f : -1.0f;
            }
            const size_t as = pk->act_bytes(n), gb = pk->group_bytes(n);
            const size_t qs = ht_row_size((uint32_t)ref->vec_dot_type, n);
            uint8_t *a = malloc(as * PK_TOK), *g = malloc(gb * (PK_ROWS / pk->rows + 1)), *qa = malloc(qs * PK_TOK);
            for (int c = 0; c < PK_TOK; c++) {
                pk->act_prep(x[c], a + c * as, n);
                ta->from_float(x[c], qa + c * qs, n);
                for (int r = 0; r < PK_ROWS; r++) one[c][r] = ref->vec_dot(n, w[r], qa + c * qs);
            }
            /* nr = 1..rows rows in one group; then all PK_ROWS in consecutive groups, the last partial */
            for (int nr = 1; nr <= pk->rows + 1; nr++) {
                const int rows = nr <= pk->rows ? nr : PK_ROWS, ng = (rows + pk->rows - 1) / pk->rows;
                for (int k = 0; k < ng; k++) {
                    const int m = rows - k * pk->rows < pk->rows ? rows - k * pk->rows : pk->rows;
                    pk->pack(w[k * pk->rows], sizeof w[0], m, n, g + k * gb);
                }
                /* tiles up to max_nc tokens; past it the pack's own batch product (prefill), from the vec_dot
                 * format's activations */
                for (int nc = 1; nc <= (pk->gemm ? PK_TOK : pk->max_nc); nc++) {
                    const bool tile = nc <= pk->max_nc;
                    memset(y, 0xFF, sizeof y);
                    for (int k = 0; k < ng; k++) {
                        const int m = rows - k * pk->rows < pk->rows ? rows - k * pk->rows : pk->rows;
                        (tile ? pk->tile : pk->gemm)(n, g + k * gb, m, tile ? a : qa, tile ? as : qs, nc, &y[0][k * pk->rows], PK_ROWS);
                    }
                    int bad = 0;
                    for (int c = 0; c < nc; c++)
                        for (int r = 0; r < rows; r++) bad += memcmp(&y[c][r], &one[c][r], sizeof(float)) != 0;
                    CHECK(bad == 0, "%s: %s %s %d rows x %d tokens, n=%d: %d outputs differ from vec_dot", set, pk->name,
                          tile ? "tile" : "gemm", rows, nc, n, bad);
                    checked++;
                }
            }
            free(a);
            free(g);
            free(qa);
        }
    }
    return checked;
}

/* dot_t of F32 / F16 (head sizes 64, 80, 256; positions around the block widths) against the scalar table;
 * then the first m positions alone and each column alone give the same bits. Returns products checked. */
static int test_dot_t(const char *set) {
    static const int ks[] = {64, 80, 256}, ns[] = {1, 7, 16, 31, 32, 33, 100};
    static float w32[256 * 128], a[4 * 256], y[4 * 128], yr[4 * 128], y1[128];
    static uint16_t w16[256 * 128];
    int checked = 0;
    for (int ti = 0; ti < 2; ti++) {
        const uint32_t type = ti ? HT_F16 : HT_F32;
        const ht_traits *tr = ht_get_traits(type), *ref = ht_get_traits_ref(type);
        REQUIRE(tr->dot_t && ref->dot_t, "%s: no dot_t for %s", set, tr->name);
        for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++)
            for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
                const int k = ks[ki], n = ns[ni];
                const size_t ws = 128;   /* the cache's capacity: rows longer than n */
                for (size_t i = 0; i < (size_t)k * ws; i++) {
                    w32[i] = (float)rng_gauss();
                    w16[i] = f32_to_fp16(w32[i]);
                }
                for (int i = 0; i < 4 * k; i++) a[i] = (float)rng_gauss();
                const void *w = ti ? (const void *)w16 : (const void *)w32;
                for (int nc = 1; nc <= 4; nc++) {
                    tr->dot_t(k, w, ws, n, a, (size_t)k, nc, y, 128);
                    ref->dot_t(k, w, ws, n, a, (size_t)k, nc, yr, 128);
                    for (int c = 0; c < nc; c++)
                        for (int t = 0; t < n; t++) {
                            double mag = 0;
                            for (int d = 0; d < k; d++)
                                mag += fabs(a[c * k + d] * (ti ? fp16_to_f32(w16[(size_t)d * ws + t]) : w32[(size_t)d * ws + t]));
                            CHECK(fabs(y[c * 128 + t] - yr[c * 128 + t]) <= 1e-5 * mag, "%s dot_t %s k=%d n=%d nc=%d [%d][%d]: %g vs %g",
                                  set, tr->name, k, n, nc, c, t, y[c * 128 + t], yr[c * 128 + t]);
                            checked++;
                        }
                    for (int c = 0; c < nc; c++) {   /* column c alone, over the first m positions */
                        const int m = c % 2 ? n : (n + 1) / 2;
                        tr->dot_t(k, w, ws, m, a + c * k, (size_t)k, 1, y1, 128);
                        CHECK(memcmp(y1, y + c * 128, (size_t)m * sizeof(float)) == 0,
                              "%s dot_t %s k=%d: column %d over %d of %d positions differs", set, tr->name, k, c, m, n);
                    }
                }
            }
    }
    return checked;
}

/* kq / pv of Q8_0 on rows of cached heads (interleaved with 2 other heads: rows 3 heads apart). Returns
 * outputs checked. */
static int test_att_q8_0(const char *set) {
    /* past 128 positions and 4 columns, pv takes positions 128 at a time; past 32 columns, kq takes them 32 at a time */
    static const int hds[] = {32, 64, 96, 128, 256}, ns[] = {1, 7, 8, 9, 15, 16, 17, 23, 33, 64, 130, 300};
    enum { CAP = 320, HEADS = 3, NCMAX = 37 };
    static block_q8_0 kv[CAP * HEADS * 8];
    static uint8_t q[NCMAX * 8 * sizeof(block_q8_0)];
    static float x[256], y[NCMAX * CAP], p[NCMAX * CAP], o1[256];
    const ht_traits *tr = ht_get_traits(HT_Q8_0), *ref = ht_get_traits_ref(HT_Q8_0);
    REQUIRE(tr->kq && tr->pv && ref->kq && ref->pv, "%s: no kq / pv for Q8_0", set);
    int checked = 0;
    for (size_t hi = 0; hi < sizeof hds / sizeof *hds; hi++) {
        const int hd = hds[hi], nb = hd / QK8_0;
        const size_t rs = (size_t)nb * sizeof(block_q8_0), ws = HEADS * rs;
        for (int r = 0; r < CAP * HEADS; r++) {
            for (int i = 0; i < hd; i++) x[i] = (float)rng_gauss() * (r % 5 ? 1.0f : 30.0f);
            ref->from_float(x, (uint8_t *)kv + (size_t)r * rs, hd);
        }
        for (int c = 0; c < NCMAX; c++) {
            for (int i = 0; i < hd; i++) x[i] = (float)rng_gauss();
            ref->from_float(x, q + (size_t)c * rs, hd);
            for (int t = 0; t < CAP; t++) p[c * CAP + t] = (float)rng_uniform() * (t % 3 ? 1.0f : 1e-3f);
        }
        const uint8_t *k1 = (const uint8_t *)kv + rs;   /* head 1 of each position */
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
            for (int nc = 1; nc <= NCMAX; nc += !quick ? 2 : nc == 5 ? 28 : 4) {   /* quick: 1 5 33 37 */
                const int n = ns[ni], lo = (int)(ni * 13 + (size_t)nc) % CAP;   /* a wrap for some */
                const int n0 = HT_MIN(n, CAP - lo);
                tr->kq(hd, k1 + (size_t)lo * ws, ws, n0, q, rs, nc, y, CAP);
                if (n0 < n) tr->kq(hd, k1, ws, n - n0, q, rs, nc, y + n0, CAP);
                for (int c = 0; c < nc; c++)
                    for (int t = 0; t < n; t++, checked++) {
                        const float e = ht_ref_vec_dot_q8_0_q8_0(hd, k1 + (size_t)((lo + t) % CAP) * ws, q + (size_t)c * rs);
                        CHECK(!memcmp(&e, y + c * CAP + t, sizeof e), "%s kq hd=%d n=%d nc=%d [%d][%d]: %.9g vs reference %.9g",
                              set, hd, n, nc, c, t, y[c * CAP + t], e);
                    }
                /* two tokens of nc heads each (per = nc): outputs 2 x nc x hd, tokens os apart */
                const size_t os = (size_t)NCMAX * 256;
                static float ob[2 * NCMAX * 256], obr[2 * NCMAX * 256];
                const int ncols = 2 * nc > NCMAX ? nc : 2 * nc;
                tr->pv(hd, k1, ws, CAP, lo, n, p, CAP, ncols, ob, os, nc);
                ref->pv(hd, k1, ws, CAP, lo, n, p, CAP, ncols, obr, os, nc);
                for (int c = 0; c < ncols; c++, checked++) {
                    const float *a = ob + (size_t)(c / nc) * os + (size_t)(c % nc) * hd, *b = obr + (size_t)(c / nc) * os + (size_t)(c % nc) * hd;
                    CHECK(!memcmp(a, b, (size_t)hd * sizeof(float)), "%s pv hd=%d n=%d nc=%d: column %d differs from the scalar one",
                          set, hd, n, ncols, c);
                    /* alone, over its positions and 5 more of probability 0 */
                    float pz[CAP + 5];
                    memcpy(pz, p + (size_t)c * CAP, (size_t)n * sizeof(float));
                    memset(pz + n, 0, 5 * sizeof(float));
                    tr->pv(hd, k1, ws, CAP, lo, n + 5, pz, CAP + 5, 1, o1, 0, 1);
                    CHECK(!memcmp(a, o1, (size_t)hd * sizeof(float)), "%s pv hd=%d n=%d: column %d alone differs", set, hd, n, c);
                }
            }
    }
    return checked;
}

/* Rates in multiply-adds a second a thread: above 1e7 (qemu-user included), below 4e12 (64 a vector
 * instruction, 4 a cycle, 6 GHz, with room): a loop that ran no instructions reads far past it. */
static int test_peak(const char *set) {
    static const uint32_t types[] = {HT_F32, HT_F16, HT_Q4_0, HT_Q6_K};
    int checked = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++, checked++) {
        const ht_mac_peak p = quant_mac_peak(types[i], 0.01);
        if (!strcmp(set, "scalar")) {
            CHECK(p.macs == 0 && !p.insn, "scalar: a peak measured for %s (%g)", ht_get_traits(types[i])->name, p.macs);
            continue;
        }
        CHECK(p.insn && p.macs > 1e7 && p.macs < 4e12, "%s: %s peak of %s: %g multiply-adds/s", set,
              ht_get_traits(types[i])->name, p.insn ? p.insn : "(none)", p.macs);
    }
    return checked;
}

int main(void) {
    quick = getenv("HEARTH_TEST_QUICK") && atoi(getenv("HEARTH_TEST_QUICK"));
    quant_init();
    const char *chosen = quant_backend();
    printf("quant_init chose: %s\n", chosen);
#if defined(__aarch64__)
    printf("aarch64 dot-product instructions: %s\n", ht_cpu_arm_dotprod() ? "yes" : "no");
#endif
    int n_sets = 0;
    for (int k = 0; quant_backend_name(k); k++) {
        const char *set = quant_backend_name(k);
        if (!quant_set_backend(set)) {
            printf("%-11s not supported by this CPU: skipped\n", set);
            continue;
        }
        if (!tu_set_wanted(set)) {
            printf("%-11s not in HEARTH_TEST_SETS: skipped\n", set);
            continue;
        }
        test_from_float(set);
        const int ne = test_dots(set, true), nt = test_dots(set, false), ntl = test_tiles(set), ndt = test_dot_t(set);
        const int npk = test_peak(set), ngm = test_gemm(set), nat = test_att_q8_0(set), npc = test_packs(set);
        printf("%-11s from_float, %d exact + %d realistic dot products, %d tiles, %d batch products, %d pack tiles, "
               "%d transposed products, %d Q8_0 attention outputs, %d peaks checked\n", set, ne, nt, ntl, ngm, npc, ndt, nat, npk);
        n_sets++;
    }
    REQUIRE(quant_set_backend(chosen), "cannot restore %s", chosen);
    REQUIRE(n_sets > 0, "no kernel set tested (HEARTH_TEST_SETS names none this CPU runs)");
    printf("%d kernel set(s) tested\n", n_sets);
    TEST_DONE();
}
