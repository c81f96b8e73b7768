/* test_quant.c — tests of the tensor-type layer (quant.c, quant_ref.c).
 *
 * 1. Round trip: for every type, from_float then to_float of several fixed-seed distributions stays
 *    within the type's error bound (relative RMS error; all-zero input must come back exactly).
 * 2. Dot products: for every weight type, vec_dot(w, quantize(a)) equals the float64 dot of to_float(w)
 *    and to_float(quantize(a)) within 1e-5 of sum |w_i a_i|, on quantizer output and on random block bytes.
 * 3. Byte-exactness: re-quantizing llama.gguf's F32 weights reproduces llama.cpp's blocks in
 *    llama-<TYPE>.gguf (all types whose file was made by the reference quantizer, Q8_0 and Q4_0 included).
 * 4. Real files: blk.0.attn_q.weight of every llama-<TYPE>.gguf dequantizes close to the F32 original.
 * 5. Plumbing: traits lookups, row sizes, ht_quantize_row, and every built-in kernel set against scalar. */
#include <math.h>
#include <stdlib.h>

#include "io/gguf.h"
#include "quant/quant.h"
#include "testutil.h"

/* ---- deterministic random numbers ---- */
static uint64_t rng_state;
static uint64_t rng_next(void) {   /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_uniform(void) { return (double)(rng_next() >> 11) * 0x1.0p-53; }   /* [0, 1) */
static double rng_gauss(void) {
    const double u = 1.0 - rng_uniform(), v = rng_uniform();
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

enum { DIST_GAUSS, DIST_UNIFORM, DIST_ZEROS, DIST_OUTLIERS, DIST_OFFSET, DIST_SMALL, DIST_SPARSE, N_DIST };
static const char *const dist_names[N_DIST] = {"gauss", "uniform", "zeros", "outliers", "offset", "small", "sparse"};

static void fill(float *x, int64_t n, int dist, uint64_t seed) {
    rng_state = seed * 1000003u + (uint64_t)dist;
    for (int64_t i = 0; i < n; i++) {
        double v = 0;
        switch (dist) {
        case DIST_GAUSS: v = rng_gauss(); break;
        case DIST_UNIFORM: v = 2 * rng_uniform() - 1; break;
        case DIST_ZEROS: v = 0; break;
        case DIST_OUTLIERS:   /* 1% of values at +-20..50 sigma */
            v = rng_gauss();
            if (rng_uniform() < 0.01) v = (rng_uniform() < 0.5 ? -1 : 1) * (20 + 30 * rng_uniform());
            break;
        case DIST_OFFSET: v = 0.5 + 0.2 * rng_gauss(); break;
        case DIST_SMALL: v = 0.02 * rng_gauss(); break;
        case DIST_SPARSE: v = rng_uniform() < 0.1 ? rng_gauss() : 0; break;
        }
        x[i] = (float)v;
    }
}

static double rel_rms(const float *ref, const float *got, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = (double)got[i] - ref[i];
        num += e * e;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ---- the types under test, with their round-trip error bounds ----
 * Relative RMS error bounds, "typical" for gauss / uniform / offset / small inputs and "hard" for the
 * outliers and sparse distributions. F16 and BF16 round to 11 and 8 significant bits (worst relative
 * error 2^-11 and 2^-8). For the block formats the typical bound is the error of the best fixed uniform
 * quantizer with as many levels on a Gaussian (Max 1960: 2 bits 0.345, 3 bits 0.193, 4 bits 0.107,
 * 5 bits 0.059, 6 bits 0.032, 8 bits < 0.01), rounded up: per-block scales must do at least as well
 * (measured over 20 seeds: Q8_0 0.0056, Q8_K 0.0078, Q6_K 0.018, Q5_0 0.044, Q4_0 0.088, Q4_K 0.073,
 * IQ4_NL 0.078, Q3_K 0.154, Q2_K 0.303). The hard bounds are ~1.3x the worst of those 20 seeds: a block
 * holding a 20-50 sigma outlier gets a 10-20x coarser step for its other elements (Q8_K, one scale per
 * 256, suffers most), and mostly-zero blocks waste the levels of the min-offset formats (Q4_1, Q5_1,
 * Q2_K). Both catch real breakage: clipping outliers, a wrong sub-block scale or a misplaced bit gives
 * errors of order 1. */
typedef struct { uint32_t type; double typical, hard; } type_case;
/* MXFP4: one power-of-two scale per 32 and 15 E2M1 levels (0, ±0.5 .. ±6 steps): coarser than 4 uniform bits
 * near the block maximum, and its scale is a power of two, not fitted (measured 0.12 / 0.33 worst). TQ1_0 and
 * TQ2_0 are ternary, made for weights trained ternary: scale = the block's largest magnitude, so most Gaussian
 * values round to 0 (measured 0.80 / 0.98); on ternary data they are exact (test_ternary). */
/* IQ3_S / IQ2_S: grids of odd magnitudes (no zero level), so mostly-zero blocks come back as ±scale: sparse
 * 0.38 / 0.68, outliers 0.30 / 0.66, the others 0.13-0.17 / 0.24-0.27 (3 and 2 bits, as the K-quants).
 * IQ3_XXS (256 grid points for 4 values, one sign by parity) is coarser than 3 uniform bits: 0.22 on Gaussians. */
#define TQ_TYPICAL 0.85
#define TQ_HARD 1.0
#define NO_Q (-1.0)
static const type_case all_types[] = {
    {HT_F32, 0, 0},           {HT_F16, 1e-3, 1e-3},     {HT_BF16, 5e-3, 5e-3},
    {HT_Q8_0, 0.01, 0.016},   {HT_Q8_1, 0.01, 0.016},   {HT_Q8_K, 0.01, 0.035},
    {HT_Q4_0, 0.12, 0.18},    {HT_Q4_1, 0.12, 0.16},    {HT_Q5_0, 0.06, 0.12},    {HT_Q5_1, 0.06, 0.08},
    {HT_Q2_K, 0.35, 0.65},    {HT_Q3_K, 0.2, 0.2},      {HT_Q4_K, 0.12, 0.13},    {HT_Q5_K, 0.06, 0.07},
    {HT_Q6_K, 0.03, 0.045},   {HT_IQ4_NL, 0.12, 0.16},  {HT_IQ4_XS, 0.12, 0.16},
    {HT_MXFP4, 0.16, 0.45},   {HT_TQ1_0, TQ_TYPICAL, TQ_HARD}, {HT_TQ2_0, TQ_TYPICAL, TQ_HARD},
    /* no quantizer (an importance matrix or a grid search): dot products on random blocks, real files only */
    {HT_IQ3_S, 0.2, 0.5},     {HT_IQ3_XXS, 0.25, 0.5},  {HT_IQ2_S, 0.35, 0.85},
    {HT_IQ2_XXS, NO_Q, NO_Q}, {HT_IQ2_XS, NO_Q, NO_Q}, {HT_IQ1_S, NO_Q, NO_Q},  {HT_IQ1_M, NO_Q, NO_Q},
};
#define N_TYPES (sizeof all_types / sizeof all_types[0])

#define N_ELEM 4096   /* a multiple of every block size */

/* ---- 1. round trip ---- */
static void test_round_trip(void) {
    static float x[N_ELEM], y[N_ELEM];
    static uint8_t q[N_ELEM * 4];
    for (size_t t = 0; t < N_TYPES; t++) {
        const ht_traits *tr = ht_get_traits_ref(all_types[t].type);
        REQUIRE(tr, "type %u has no traits", all_types[t].type);
        if (all_types[t].typical == NO_Q) continue;
        double worst = 0;   /* largest error / bound */
        const char *worst_dist = "-";
        for (int dist = 0; dist < N_DIST; dist++) {
            fill(x, N_ELEM, dist, 1);
            memset(q, 0xA5, sizeof q);
            tr->from_float(x, q, N_ELEM);
            tr->to_float(q, y, N_ELEM);
            if (dist == DIST_ZEROS) {
                int nonzero = 0;
                for (int i = 0; i < N_ELEM; i++) nonzero += y[i] != 0;
                CHECK(nonzero == 0, "%s: zeros come back with %d nonzero values", tr->name, nonzero);
                continue;
            }
            const double e = rel_rms(x, y, N_ELEM);
            const bool hard = dist == DIST_OUTLIERS || dist == DIST_SPARSE;
            const double bound = hard ? all_types[t].hard : all_types[t].typical;
            if (e / (bound + 1e-30) > worst) { worst = e / (bound + 1e-30); worst_dist = dist_names[dist]; }
            CHECK(e <= bound, "%s round trip on %s: relative RMS error %.4g > %.4g", tr->name, dist_names[dist], e,
                  bound);
        }
        printf("round trip %-6s error/bound at most %.2f (%s)\n", tr->name, worst, worst_dist);
    }
}

/* TQ1_0 / TQ2_0 on what they are made for: blocks of -s, 0, s (s a half) come back exactly. */
static void test_ternary(void) {
    static float x[N_ELEM], y[N_ELEM];
    static uint8_t q[N_ELEM];
    rng_state = 5;
    for (int i = 0; i < N_ELEM; i++) {
        const float s = fp16_to_f32(f32_to_fp16((float)(0.01 + rng_uniform()) * (float)(1 + i / QK_K)));
        x[i] = (float)((int)(rng_next() % 3) - 1) * s;
        if (i % QK_K == 7) x[i] = s;   /* every block reaches its scale */
    }
    for (int i = 0; i < N_ELEM; i++)   /* one scale per block */
        if (x[i] != 0) x[i] = x[i] > 0 ? x[i / QK_K * QK_K + 7] : -x[i / QK_K * QK_K + 7];
    const uint32_t types[] = {HT_TQ1_0, HT_TQ2_0};
    for (size_t t = 0; t < 2; t++) {
        const ht_traits *tr = ht_get_traits_ref(types[t]);
        tr->from_float(x, q, N_ELEM);
        tr->to_float(q, y, N_ELEM);
        int bad = 0;
        for (int i = 0; i < N_ELEM; i++) bad += x[i] != y[i];
        CHECK(bad == 0, "%s: %d ternary values do not come back exactly", tr->name, bad);
    }
}

/* ---- 2. dot products against the dequantized float64 dot ---- */

/* Reference: sum over i of to_float(w)_i * to_float(a)_i in double. Q8_1 carries s = fp16(d * sum q):
 * the kernel uses that rounded s for the m term, so the reference adds the same rounding explicitly. */
static double ref_dot(const ht_traits *tw, const void *w, const ht_traits *ta, const void *a, int n, double *abs_sum) {
    static float wf[N_ELEM], af[N_ELEM];
    tw->to_float(w, wf, n);
    ta->to_float(a, af, n);
    double s = 0, sa = 0;
    for (int i = 0; i < n; i++) {
        s += (double)wf[i] * af[i];
        sa += fabs((double)wf[i] * af[i]);
    }
    if (ta == ht_get_traits_ref(HT_Q8_1)) {
        const block_q8_1 *b = a;
        for (int i = 0; i < n / QK8_1; i++) {
            const float m = tw == ht_get_traits_ref(HT_Q4_1) ? fp16_to_f32(((const block_q4_1 *)w)[i].m)
                                                            : fp16_to_f32(((const block_q5_1 *)w)[i].m);
            int qsum = 0;
            for (int j = 0; j < QK8_1; j++) qsum += b[i].qs[j];
            s += (double)m * ((double)fp16_to_f32(b[i].s) - (double)fp16_to_f32(b[i].d) * qsum);
            sa += fabs((double)m * fp16_to_f32(b[i].s));
        }
    }
    *abs_sum = sa;
    return s;
}

/* IQ1_M keeps its fp16 d in the top nibbles of its four scale words. */
static void set_iq1_m_d(block_iq1_m *b, ht_half d) {
    for (int k = 0; k < 4; k++) {
        uint16_t w;
        memcpy(&w, b->scales + 2 * k, 2);
        w = (uint16_t)((w & 0x0FFF) | ((d >> 4 * k) & 0xF) << 12);
        memcpy(b->scales + 2 * k, &w, 2);
    }
}

/* Random bytes in every block, with the float scale fields set to sane values (random bytes there could
 * be inf/NaN): exercises every quant and sub-scale bit pattern, not just what the quantizer emits. */
static void random_blocks(uint32_t type, void *dst, int n) {
    const ht_traits *tr = ht_get_traits_ref(type);
    uint8_t *p = dst;
    const size_t bytes = (size_t)(n / tr->blck) * tr->type_size;
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)rng_next();
    const int nb = n / tr->blck;
#define SCALE() f32_to_fp16((float)(0.5 + rng_uniform()))
    for (int i = 0; i < nb; i++) {
        switch (type) {
        case HT_F16: case HT_BF16: case HT_F32: break;   /* filled from floats by the caller */
        case HT_Q4_0: ((block_q4_0 *)dst)[i].d = SCALE(); break;
        case HT_Q4_1: ((block_q4_1 *)dst)[i].d = SCALE(); ((block_q4_1 *)dst)[i].m = SCALE(); break;
        case HT_Q5_0: ((block_q5_0 *)dst)[i].d = SCALE(); break;
        case HT_Q5_1: ((block_q5_1 *)dst)[i].d = SCALE(); ((block_q5_1 *)dst)[i].m = SCALE(); break;
        case HT_Q8_0: ((block_q8_0 *)dst)[i].d = SCALE(); break;
        case HT_Q2_K: ((block_q2_K *)dst)[i].d = SCALE(); ((block_q2_K *)dst)[i].dmin = SCALE(); break;
        case HT_Q3_K: ((block_q3_K *)dst)[i].d = SCALE(); break;
        case HT_Q4_K: ((block_q4_K *)dst)[i].d = SCALE(); ((block_q4_K *)dst)[i].dmin = SCALE(); break;
        case HT_Q5_K: ((block_q5_K *)dst)[i].d = SCALE(); ((block_q5_K *)dst)[i].dmin = SCALE(); break;
        case HT_Q6_K: ((block_q6_K *)dst)[i].d = SCALE(); break;
        case HT_IQ4_NL: ((block_iq4_nl *)dst)[i].d = SCALE(); break;
        case HT_IQ4_XS: ((block_iq4_xs *)dst)[i].d = SCALE(); break;
        case HT_IQ2_XXS: ((block_iq2_xxs *)dst)[i].d = SCALE(); break;
        case HT_IQ2_XS: ((block_iq2_xs *)dst)[i].d = SCALE(); break;
        case HT_IQ2_S: ((block_iq2_s *)dst)[i].d = SCALE(); break;
        case HT_IQ3_XXS: ((block_iq3_xxs *)dst)[i].d = SCALE(); break;
        case HT_IQ3_S: ((block_iq3_s *)dst)[i].d = SCALE(); break;
        case HT_IQ1_S: ((block_iq1_s *)dst)[i].d = SCALE(); break;
        case HT_IQ1_M: set_iq1_m_d(&((block_iq1_m *)dst)[i], SCALE()); break;
        case HT_TQ1_0: ((block_tq1_0 *)dst)[i].d = SCALE(); break;
        case HT_TQ2_0: ((block_tq2_0 *)dst)[i].d = SCALE(); break;
        case HT_MXFP4: ((block_mxfp4 *)dst)[i].e = (uint8_t)(120 + rng_next() % 16); break;
        default: REQUIRE(0, "random_blocks: no layout for type %u", type);
        }
    }
#undef SCALE
}

static void check_dot(const ht_traits *tw, const void *w, const void *a, int n, const char *what) {
    const ht_traits *ta = ht_get_traits_ref((uint32_t)tw->vec_dot_type);
    double abs_sum;
    const double want = ref_dot(tw, w, ta, a, n, &abs_sum);
    const double got = tw->vec_dot(n, w, a);
    const double tol = 1e-5 * abs_sum + 1e-30;
    CHECK(fabs(got - want) <= tol, "%s vec_dot on %s: %.9g, dequantized dot %.9g (|diff| %.3g > %.3g)", tw->name, what,
          got, want, fabs(got - want), tol);
}

static void test_vec_dot(void) {
    static float w[N_ELEM], a[N_ELEM];
    static uint8_t wq[N_ELEM * 4], aq[N_ELEM * 4];
    const int dists[] = {DIST_GAUSS, DIST_OUTLIERS, DIST_OFFSET, DIST_SPARSE};
    int n_checked = 0;
    for (size_t t = 0; t < N_TYPES; t++) {
        const ht_traits *tw = ht_get_traits_ref(all_types[t].type);
        if (!tw->vec_dot) continue;   /* activation-only formats */
        const ht_traits *ta = ht_get_traits_ref((uint32_t)tw->vec_dot_type);
        for (size_t k = 0; tw->from_float && k < sizeof dists / sizeof dists[0]; k++) {
            fill(w, N_ELEM, dists[k], 2);
            fill(a, N_ELEM, dists[(k + 1) % 4], 3);
            tw->from_float(w, wq, N_ELEM);
            ta->from_float(a, aq, N_ELEM);
            check_dot(tw, wq, aq, N_ELEM, dist_names[dists[k]]);
            check_dot(tw, wq, aq, tw->blck, "one block");
            n_checked += 2;
        }
        if (tw->is_quant) {
            rng_state = 77 + t;
            random_blocks(all_types[t].type, wq, N_ELEM);
            fill(a, N_ELEM, DIST_GAUSS, 4);
            ta->from_float(a, aq, N_ELEM);
            check_dot(tw, wq, aq, N_ELEM, "random block bytes");
            n_checked++;
        }
    }
    printf("vec_dot: %d dot products match the dequantized float64 dot\n", n_checked);
}

/* ---- 3 and 4: the llama.cpp-quantized files ---- */
static gguf_file *open_model(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "data/models/%s.gguf", name);
    gguf_file *f = NULL;
    hearth_err err;
    if (gguf_open(path, &f, &err) != 0) {
        CHECK(0, "%s: %s", path, err.msg);
        return NULL;
    }
    return f;
}

/* Re-quantizes every F32 tensor of llama.gguf that the quantized file stores as `type` and compares the
 * blocks byte for byte. Returns the number of tensors compared; counts blocks that differ. */
static int compare_requantized(const gguf_file *f32, const gguf_file *fq, uint32_t type, uint64_t *n_blocks,
                               uint64_t *n_diff) {
    const ht_traits *tr = ht_get_traits_ref(type);
    int n_tensors = 0;
    for (uint64_t i = 0; i < fq->n_tensors; i++) {
        const gguf_tensor *tq = &fq->tensors[i];
        if (tq->type != type) continue;
        const gguf_tensor *tf = gguf_find_tensor(f32, tq->name);
        if (!tf || tf->type != HT_F32) continue;
        CHECK(tf->nelem == tq->nelem && tf->ne[0] == tq->ne[0], "%s: shapes differ", tq->name);
        if (tf->nelem != tq->nelem) continue;
        uint8_t *buf = malloc(tq->nbytes);
        REQUIRE(buf, "out of memory");
        tr->from_float(tf->data, buf, (int64_t)tf->nelem);
        const uint64_t nb = tq->nbytes / tr->type_size;
        uint64_t diff = 0;
        for (uint64_t b = 0; b < nb; b++)
            diff += memcmp(buf + b * tr->type_size, (const uint8_t *)tq->data + b * tr->type_size, tr->type_size) != 0;
        *n_blocks += nb;
        *n_diff += diff;
        free(buf);
        n_tensors++;
    }
    return n_tensors;
}

static void test_byte_exact(const gguf_file *f32) {
    /* Every file below was made by llama-quantize --pure without an importance matrix, which runs the
     * reference quantizers (and for IQ4_NL the 7-step search) that from_float reproduces. */
    static const uint32_t types[] = {HT_F16, HT_BF16, HT_Q8_0, HT_Q4_0, HT_Q4_1, HT_Q5_0, HT_Q5_1, HT_Q2_K,
                                     HT_Q3_K, HT_Q4_K, HT_Q5_K, HT_Q6_K, HT_IQ4_NL, HT_IQ4_XS, HT_MXFP4, HT_TQ2_0,
                                     HT_IQ3_S};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const ht_traits *tr = ht_get_traits_ref(types[t]);
        char name[64];
        snprintf(name, sizeof name, "llama-%s", tr->name);
        gguf_file *fq = open_model(name);
        if (!fq) continue;
        uint64_t n_blocks = 0, n_diff = 0;
        const int n = compare_requantized(f32, fq, types[t], &n_blocks, &n_diff);
        printf("byte-exact %-6s %2d tensors, %7llu blocks, %llu differ\n", tr->name, n, (unsigned long long)n_blocks,
               (unsigned long long)n_diff);
        CHECK(n > 0, "%s: no tensor of type %s to compare", name, tr->name);
        CHECK(n_diff == 0, "%s: %llu of %llu re-quantized blocks differ from llama.cpp's", name,
              (unsigned long long)n_diff, (unsigned long long)n_blocks);
        gguf_close(fq);
    }
}

/* The real files' bound: the round trip's, or for the types without a quantizer about the error of the best
 * uniform quantizer with as many levels (Max 1960, as above: IQ3 ~3 bits 0.193, IQ2 ~2 bits 0.345) with room,
 * and for IQ1 (1.6-1.75 bits) 0.55. Measured on this weight: IQ3_S 0.166, IQ3_XXS 0.183, IQ2_S 0.251, IQ2_XS
 * 0.302, IQ2_XXS 0.346, IQ1_M 0.456, IQ1_S 0.488; a misread grid, sign or scale gives errors of order 1. */
/* llama-IQ2_S.gguf and llama-IQ3_XXS.gguf were made with an importance matrix, so these two quantizers are
 * checked against ggml's own output without one: llama.cpp's quantize_iq2_s / quantize_iq3_xxs with
 * quant_weights = NULL (ggml-quants.c at llama.cpp de3ff815ea7d), run by hand over llama.gguf's 2-D F32
 * tensors in file order, wrote the bytes whose count and FNV-1a 64 hash are below. Re-quantizing the same
 * tensors must give the same bytes. */
static void test_ggml_hash(const gguf_file *f32, uint32_t type, uint64_t want_bytes, uint64_t want_hash) {
    const ht_traits *tr = ht_get_traits_ref(type);
    uint64_t h = 0xcbf29ce484222325ull, bytes = 0;
    for (uint64_t i = 0; i < f32->n_tensors; i++) {
        const gguf_tensor *t = &f32->tensors[i];
        if (t->type != HT_F32 || t->n_dims != 2) continue;
        const size_t nb = ht_row_size(type, (int64_t)t->nelem);
        uint8_t *buf = malloc(nb);
        REQUIRE(buf, "out of memory");
        tr->from_float(t->data, buf, (int64_t)t->nelem);
        for (size_t k = 0; k < nb; k++) h = (h ^ buf[k]) * 0x100000001b3ull;
        bytes += nb;
        free(buf);
    }
    printf("byte-exact %-7s %llu bytes, FNV-1a %016llx (ggml's without importance matrix: %016llx)\n", tr->name,
           (unsigned long long)bytes, (unsigned long long)h, (unsigned long long)want_hash);
    CHECK(bytes == want_bytes && h == want_hash, "%s: re-quantized llama.gguf differs from ggml's blocks", tr->name);
}

static double bound_for(uint32_t type) {
    switch (type) {
    case HT_IQ2_XS: case HT_IQ2_XXS: return 0.4;
    case HT_IQ1_M: case HT_IQ1_S: return 0.55;
    default: break;
    }
    for (size_t t = 0; t < N_TYPES; t++)
        if (all_types[t].type == type) return all_types[t].typical;
    return 0;
}

static void test_real_files(const gguf_file *f32) {
    static const char *const files[] = {"F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K",
                                         "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "Q4_K_M",
                                         "MXFP4", "TQ2_0", "IQ3_S", "IQ3_XXS", "IQ2_S", "IQ2_XS", "IQ2_XXS",
                                         "IQ1_M", "IQ1_S"};
    const char *tname = "blk.0.attn_q.weight";
    const gguf_tensor *tf = gguf_find_tensor(f32, tname);
    REQUIRE(tf && tf->type == HT_F32, "llama.gguf: no F32 %s", tname);
    float *y = malloc(tf->nelem * sizeof(float));
    REQUIRE(y, "out of memory");
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "llama-%s", files[i]);
        gguf_file *fq = open_model(name);
        if (!fq) continue;
        const gguf_tensor *tq = gguf_find_tensor(fq, tname);
        const ht_traits *tr = tq ? ht_get_traits(tq->type) : NULL;
        CHECK(tq && tr && tq->nelem == tf->nelem, "%s: no usable %s", name, tname);
        if (tq && tr && tq->nelem == tf->nelem) {
            tr->to_float(tq->data, y, (int64_t)tq->nelem);
            const double e = rel_rms(tf->data, y, (int64_t)tf->nelem);
            printf("dequantize %-12s %s (%s): relative RMS error %.5f\n", name, tname, tr->name, e);
            CHECK(e <= bound_for(tq->type), "%s: %s dequantizes with relative RMS error %.4g > %.4g", name, tname, e,
                  bound_for(tq->type));
        }
        gguf_close(fq);
    }
    free(y);
}

/* ---- 5. plumbing ---- */
static void test_traits(void) {
    CHECK(ht_get_traits(4) == NULL && ht_get_traits(HT_NTYPES) == NULL && ht_get_traits(1000) == NULL,
          "unknown type ids must have no traits");
    CHECK(ht_row_size(HT_Q4_K, 512) == 2 * 144, "Q4_K row size");
    CHECK(ht_row_size(HT_Q4_K, 100) == 0, "row of a partial block must be rejected");
    CHECK(ht_row_size(HT_F16, 3) == 6 && ht_row_size(HT_Q8_0, 64) == 68, "row sizes");
    CHECK(ht_row_size(77, 32) == 0, "unknown type row size");
    for (size_t t = 0; t < N_TYPES; t++) {
        const ht_traits *tr = ht_get_traits(all_types[t].type);
        CHECK(tr && tr->to_float && (tr->from_float || all_types[t].typical == NO_Q) && ht_get_traits(tr->vec_dot_type),
              "type %u incomplete", all_types[t].type);
    }
    static float x[256], y[256];
    static uint8_t q[512];
    fill(x, 256, DIST_GAUSS, 9);
    ht_quantize_row(HT_F32, x, y, 256);
    CHECK(memcmp(x, y, sizeof x) == 0, "ht_quantize_row(F32) must copy");
    ht_quantize_row(HT_Q8_K, x, q, 256);
    const block_q8_K *b = (const block_q8_K *)q;
    int s = 0;
    for (int i = 0; i < 16; i++) s += b->qs[i];
    CHECK(b->d != 0 && b->bsums[0] == s, "ht_quantize_row(Q8_K) must fill bsums");
}

/* Every built-in kernel set that runs here against the scalar reference: same dot products within a
 * tight tolerance (per-block integer sums are exact; only float accumulation order may differ), and
 * activation quantizers that agree up to tie rounding. */
static void test_kernel_sets(void) {
    static float w[N_ELEM], a[N_ELEM], ar[N_ELEM], as[N_ELEM];
    static uint8_t wq[N_ELEM * 4], aq_ref[N_ELEM * 4], aq[N_ELEM * 4];
    quant_init();
    const char *chosen = quant_backend();
    printf("kernel set chosen by quant_init: %s\n", chosen);
    for (int k = 0; quant_backend_name(k); k++) {
        const char *name = quant_backend_name(k);
        if (!quant_set_backend(name)) {
            printf("kernel set %s: not supported by this CPU, skipped\n", name);
            continue;
        }
        CHECK(strcmp(quant_backend(), name) == 0, "quant_set_backend(%s) not applied", name);
        for (size_t t = 0; t < N_TYPES; t++) {
            const ht_traits *ref = ht_get_traits_ref(all_types[t].type), *act = ht_get_traits(all_types[t].type);
            const ht_traits *ta_ref = ht_get_traits_ref((uint32_t)ref->vec_dot_type);
            const ht_traits *ta = ht_get_traits((uint32_t)ref->vec_dot_type);
            fill(w, N_ELEM, DIST_GAUSS, 5);
            fill(a, N_ELEM, DIST_OUTLIERS, 6);
            /* activation quantizer */
            ta_ref->from_float(a, aq_ref, N_ELEM);
            ta->from_float(a, aq, N_ELEM);
            ta_ref->to_float(aq_ref, ar, N_ELEM);
            ta_ref->to_float(aq, as, N_ELEM);
            const double e = rel_rms(ar, as, N_ELEM);
            CHECK(e <= 3e-3, "%s: %s from_float differs from scalar (relative RMS %.3g)", name, ta->name, e);
            if (!ref->vec_dot) continue;
            if (ref->from_float) ref->from_float(w, wq, N_ELEM);
            else random_blocks(all_types[t].type, wq, N_ELEM);
            const double want = ref->vec_dot(N_ELEM, wq, aq_ref), got = act->vec_dot(N_ELEM, wq, aq_ref);
            CHECK(fabs(got - want) <= 1e-5 * fabs(want) + 1e-6, "%s: %s vec_dot %.9g, scalar %.9g", name, ref->name,
                  got, want);
        }
        printf("kernel set %s: agrees with scalar\n", name);
    }
    CHECK(!quant_set_backend("no-such-set"), "unknown kernel set accepted");
    CHECK(quant_set_backend(chosen), "cannot restore %s", chosen);
}

int main(void) {
    test_traits();
    test_round_trip();
    test_ternary();
    test_vec_dot();
    gguf_file *f32 = open_model("llama");
    if (f32) {
        test_byte_exact(f32);
        test_ggml_hash(f32, HT_IQ2_S, 461824, 0x94af93d492cb595full);
        test_ggml_hash(f32, HT_IQ3_XXS, 551936, 0x68e8b39a49face86ull);
        test_real_files(f32);
        gguf_close(f32);
    }
    test_kernel_sets();
    TEST_DONE();
}
