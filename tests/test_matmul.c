/* test_matmul.c — matmul's determinism with the tile kernels: for every weight type and every kernel set this
 * CPU runs, y = W x over a batch of 11 tokens (tiles of 4, 4, 2 + 1 tokens, or one call of the set's batch
 * product where the type has one, ht_gemm; 37 rows: chunks of 16 and partial row tiles or panels) must be bit-identical to 11 single-token products, with 1 and with 3 threads, and
 * equal to the set's vec_dot on every element. Weights and activations are random (Gaussian, quantized by
 * the reference quantizers). Where the set has a packed layout for the type (ht_pack), the same holds for
 * the packed matrix (37 rows: the last group partial), and for each tile shape of its tile entries (1 to max_nc
 * tokens, with and without prefetches; the decode and small-batch entries over runs of groups); its outputs are within rounding
 * of vec_dot's, or for the i-quants' packs equal to them. matmul_glu (gate and up in one job, SiLU(gate) * up
 * chunk by chunk) gives, for the batch with 1 and 3 threads, op_silu_mul of the single-token products bit for
 * bit, plain and packed. Rows are 512 long, and 300 for the float types too. */
#include <math.h>
#include <stdlib.h>

#include "compute/ops.h"
#include "model/matmul.h"
#include "testutil.h"

#define ROWS 37
#define COLS 512
#define NTOK 11
/* Columns of the matrix under test: COLS, and for the float types also a length with a partial block of 32 and of
 * 256 (their packs take rows of any length). */
static int n_cols = COLS;

static uint64_t rng_state = 12345;
static double gauss(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const double u = ((double)(z >> 11) + 0.5) * 0x1.0p-53, v = (double)((z * 2654435761u) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

static const uint32_t types[] = {HT_F32, HT_F16, HT_BF16, HT_Q4_0, HT_Q4_1, HT_Q5_0, HT_Q5_1, HT_Q8_0,
                                 HT_IQ4_NL, HT_Q2_K, HT_Q3_K, HT_Q4_K, HT_Q5_K, HT_Q6_K, HT_IQ4_XS, HT_MXFP4,
                                 HT_IQ2_XXS, HT_IQ2_XS, HT_IQ2_S, HT_IQ3_XXS, HT_IQ3_S, HT_IQ1_S, HT_IQ1_M, HT_TQ1_0, HT_TQ2_0};
static const uint32_t float_types[] = {HT_F32, HT_F16, HT_BF16};   /* rows of any length */

/* y = W x with a context of n_threads (only the pool and the activation scratch are used). */
static void run(const ht_tensor *W, const float *x, int n_tok, float *y, int n_threads) {
    hearth_ctx c;
    memset(&c, 0, sizeof c);
    c.pool = pool_new(n_threads);
    c.qact = malloc(matmul_act_row_bytes(COLS) * NTOK);
    REQUIRE(c.pool && c.qact, "out of memory");
    matmul(&c, W, x, n_tok, y);
    free(c.qact);
    pool_free(c.pool);
}

/* matmul_glu(W, W) over the batch with 1 and 3 threads against op_silu_mul(y1, y1) of the single-token products
 * y1 (and its up output against y1). Returns the number of outputs that differ. */
static int check_glu(const ht_tensor *W, const float *x, const float *y1, const char *set, const char *name) {
    static float ref[NTOK * ROWS], g[NTOK * ROWS], u[NTOK * ROWS];
    memcpy(ref, y1, sizeof ref);
    op_silu_mul(ref, y1, NTOK * ROWS);
    int bad = 0;
    for (int n_threads = 1; n_threads <= 3; n_threads += 2) {
        hearth_ctx c;
        memset(&c, 0, sizeof c);
        c.pool = pool_new(n_threads);
        c.qact = malloc(matmul_act_row_bytes(COLS) * NTOK);
        REQUIRE(c.pool && c.qact, "out of memory");
        REQUIRE(matmul_glu(&c, W, W, x, NTOK, g, u, op_silu_mul), "matmul_glu declined two equal matrices");
        free(c.qact);
        pool_free(c.pool);
        for (int i = 0; i < NTOK * ROWS; i++) bad += memcmp(&g[i], &ref[i], sizeof(float)) || memcmp(&u[i], &y1[i], sizeof(float));
    }
    CHECK(bad == 0, "%s %s: %d outputs of matmul_glu differ from op_silu_mul of the products", set, name, bad);
    return bad;
}

/* Every tile shape of the pack straight from its entries: tile and tile_cached with nc = 1 .. max_nc tokens on
 * the first group (rows of n_cols) must give the single-token products y1 bit for bit (matmul reaches only the
 * token counts its batch splits into). Returns the number of outputs that differ. */
static int check_tile_shapes(const ht_pack *pk, const uint8_t *g, const float *x, const float *y1) {
    const size_t as = pk->act_prep ? pk->act_bytes(n_cols) : (size_t)n_cols * sizeof(float);
    uint8_t *a = malloc(as * NTOK);
    float *y = malloc(sizeof(float) * (size_t)NTOK * ROWS);
    REQUIRE(a && y, "out of memory");
    for (int t = 0; t < NTOK; t++) {
        if (pk->act_prep) pk->act_prep(x + (size_t)t * n_cols, a + (size_t)t * as, n_cols);
        else memcpy(a + (size_t)t * as, x + (size_t)t * n_cols, (size_t)n_cols * sizeof(float));
    }
    const int nr = ROWS < pk->rows ? ROWS : pk->rows;
    int bad = 0;
    for (int cached = 0; cached < 2; cached++)
        for (int nc = 1; nc <= pk->max_nc && nc <= NTOK; nc++) {
            memset(y, 0xff, sizeof(float) * (size_t)NTOK * ROWS);
            (cached && pk->tile_cached ? pk->tile_cached : pk->tile)(n_cols, g, nr, a, as, nc, y, ROWS);
            for (int t = 0; t < nc; t++)
                for (int r = 0; r < nr; r++) bad += memcmp(&y[t * ROWS + r], &y1[t * ROWS + r], sizeof(float)) != 0;
        }
    free(a);
    free(y);
    return bad;
}

/* The super-block i-quants' packs (IQ4_XS's and the grid types') add the same integer sums and float terms in the
 * same order as the scalar reference vec_dot (quant_ref.c): their outputs must be its own, bit for bit. */
static bool exact_pack(uint32_t type) {
    return type == HT_IQ4_XS || type == HT_IQ2_XXS || type == HT_IQ2_XS || type == HT_IQ2_S || type == HT_IQ3_S ||
           type == HT_IQ3_XXS || type == HT_IQ1_S || type == HT_IQ1_M;
}

/* Outputs of the packed matrix that differ from the reference vec_dot's on the same activations. */
static int off_ref(const ht_tensor *W, const float *x, const float *y) {
    const ht_traits *ref = ht_get_traits_ref(W->type);
    static uint8_t qa[COLS * 4];
    int bad = 0;
    for (int t = 0; t < NTOK; t++) {
        ht_quantize_row((uint32_t)ref->vec_dot_type, x + (size_t)t * n_cols, qa, n_cols);
        for (int r = 0; r < ROWS; r++) {
            const float d = ref->vec_dot(n_cols, (const uint8_t *)W->data + (size_t)r * W->row_bytes, qa);
            bad += memcmp(&d, &y[t * ROWS + r], sizeof d) != 0;
        }
    }
    return bad;
}

/* The pack's decode entry (one token, several groups a call) against its one-token tile: every run of 1 to DG
 * groups from every start in DG copies of the matrix's groups side by side (so runs of 4 and more and partial
 * groups meet), the last one's rows nr = rows and nr = 5, bit for bit; outputs past the run's rows untouched.
 * Returns the number of outputs that differ. */
#define DG 7
static int check_decode(const ht_pack *pk, const uint8_t *buf, int groups, const float *x) {
    if (!pk->decode) return 0;
    const int R = pk->rows;
    const size_t gb = pk->group_bytes(n_cols), as = pk->act_prep ? pk->act_bytes(n_cols) : (size_t)n_cols * sizeof(float);
    uint8_t *g = malloc(DG * gb), *a = malloc(as);
    float *want = malloc(sizeof(float) * DG * R), *y = malloc(sizeof(float) * (DG * R + 1));
    REQUIRE(g && a && want && y, "out of memory");
    if (pk->act_prep) pk->act_prep(x, a, n_cols);
    else memcpy(a, x, as);
    for (int i = 0; i < DG; i++) {
        memcpy(g + i * gb, buf + (size_t)(i % groups) * gb, gb);
        pk->tile(n_cols, g + i * gb, R, a, as, 1, want + i * R, 0);
    }
    int bad = 0;
    for (int s = 0; s < DG; s++)
        for (int ng = 1; s + ng <= DG; ng++)
            for (int nr = R; nr >= 5; nr = nr == 5 ? 0 : 5) {
                const int n_out = (ng - 1) * R + nr;
                memset(y, 0xff, sizeof(float) * (DG * R + 1));
                pk->decode(n_cols, g + s * gb, ng, nr, a, y);
                bad += memcmp(y, want + s * R, sizeof(float) * n_out) != 0;
                bad += ((const uint32_t *)y)[n_out] != 0xffffffffu;
            }
    free(g);
    free(a);
    free(want);
    free(y);
    return bad;
}

/* The pack's small-batch entry (tiles: 2 to max_nc tokens, several groups a call) against its one-token tile, as
 * check_decode: every run of groups from every start, nr = rows and 5, every token count, bit for bit; outputs
 * past the run's rows untouched. Returns the number of (run, token) outputs that differ. */
static int check_tiles(const ht_pack *pk, const uint8_t *buf, int groups, const float *x) {
    if (!pk->tiles) return 0;
    const int R = pk->rows, ys = DG * R + 1;
    const size_t gb = pk->group_bytes(n_cols), as = pk->act_prep ? pk->act_bytes(n_cols) : (size_t)n_cols * sizeof(float);
    uint8_t *g = malloc(DG * gb), *a = malloc(as * NTOK);
    float *want = malloc(sizeof(float) * NTOK * DG * R), *y = malloc(sizeof(float) * NTOK * ys);
    REQUIRE(g && a && want && y, "out of memory");
    for (int t = 0; t < NTOK; t++) {
        if (pk->act_prep) pk->act_prep(x + (size_t)t * n_cols, a + t * as, n_cols);
        else memcpy(a + t * as, x + (size_t)t * n_cols, (size_t)n_cols * sizeof(float));
    }
    for (int i = 0; i < DG; i++) {
        memcpy(g + i * gb, buf + (size_t)(i % groups) * gb, gb);
        for (int t = 0; t < NTOK; t++) pk->tile(n_cols, g + i * gb, R, a + t * as, as, 1, want + (size_t)t * DG * R + i * R, 0);
    }
    int bad = 0;
    for (int nc = 2; nc <= (pk->tiles_max_nc ? pk->tiles_max_nc : pk->max_nc) && nc <= NTOK; nc++)
        for (int s = 0; s < DG; s++)
            for (int ng = 1; s + ng <= DG; ng++)
                for (int nr = R; nr >= 5; nr = nr == 5 ? 0 : 5) {
                    const int n_out = (ng - 1) * R + nr;
                    memset(y, 0xff, sizeof(float) * NTOK * ys);
                    pk->tiles(n_cols, g + s * gb, ng, nr, a, as, nc, y, (size_t)ys);
                    for (int t = 0; t < nc; t++) {
                        bad += memcmp(y + (size_t)t * ys, want + (size_t)t * DG * R + s * R, sizeof(float) * n_out) != 0;
                        bad += ((const uint32_t *)y)[(size_t)t * ys + n_out] != 0xffffffffu;
                    }
                }
    free(g);
    free(a);
    free(want);
    free(y);
    return bad;
}

/* The packed layout of W: single tokens == batch == 3 threads bit for bit (NTOK is past every pack's max_nc, so
 * the batch's later token tiles take the pack's tile_cached where it has one), and close to vec_dot's y_dot: within
 * rounding of float adds, or for a pack that rounds weights and activations itself (round_rel), within the
 * worst case of that rounding: sum over k of |dw_k| |x_k| + |w_k| |dx_k| + |dw_k dx_k|. */
static int check_packed(const ht_tensor *W, const float *wf, const float *x, const float *y_dot, const char *set) {
    const ht_pack *pk = ht_get_traits(W->type)->pack;
    if (!pk) return 0;
    static float y1[NTOK * ROWS], yb[NTOK * ROWS], yt[NTOK * ROWS];
    const int groups = (ROWS + pk->rows - 1) / pk->rows;
    const size_t gb = pk->group_bytes(n_cols);
    uint8_t *buf = malloc(groups * gb);
    REQUIRE(buf, "out of memory");
    for (int g = 0; g < groups; g++)
        pk->pack((const uint8_t *)W->data + (size_t)g * pk->rows * W->row_bytes, W->row_bytes,
                 ROWS - g * pk->rows < pk->rows ? ROWS - g * pk->rows : pk->rows, n_cols, buf + g * gb);
    ht_tensor P = *W;
    P.pack = pk;
    P.packed = buf;
    for (int t = 0; t < NTOK; t++) run(&P, x + t * n_cols, 1, y1 + t * ROWS, 1);
    run(&P, x, NTOK, yb, 1);
    run(&P, x, NTOK, yt, 3);
    const int bad_shape = check_tile_shapes(pk, buf, x, y1), bad_decode = check_decode(pk, buf, groups, x),
              bad_tiles = check_tiles(pk, buf, groups, x);
    int bad_batch = 0, bad_threads = 0, far = 0;
    double worst = 0;
    for (int i = 0; i < NTOK * ROWS; i++) {
        bad_batch += memcmp(&yb[i], &y1[i], sizeof(float)) != 0;
        bad_threads += memcmp(&yt[i], &y1[i], sizeof(float)) != 0;
        const double e = fabs((double)y1[i] - y_dot[i]);
        worst = e > worst ? e : worst;
        double tol = 1e-4 * (1 + fabs(y_dot[i]));   /* the same integer sums, float terms added in another order */
        if (pk->round_rel > 0) {
            const float *w = wf + (size_t)(i % ROWS) * n_cols, *xt = x + (size_t)(i / ROWS) * n_cols;
            double wmax = 0, xmax = 0, sw = 0, sx = 0;
            for (int k = 0; k < n_cols; k++) {
                wmax = fmax(wmax, fabs(w[k])), xmax = fmax(xmax, fabs(xt[k]));
                sw += fabs(w[k]), sx += fabs(xt[k]);
            }
            const double dw = pk->round_rel * wmax, dx = pk->round_rel * xmax;
            tol += dw * sx + dx * sw + dw * dx * n_cols;
        }
        far += e > tol;
    }
    if (exact_pack(W->type)) far = off_ref(W, x, y1);
    CHECK(bad_shape == 0, "%s %s: %d outputs of tiles of 1-%d tokens differ from single-token products", set, pk->name,
          bad_shape, pk->max_nc);
    CHECK(bad_decode == 0, "%s %s: %d runs of the decode entry differ from the one-token tile", set, pk->name, bad_decode);
    CHECK(bad_tiles == 0, "%s %s: %d runs of the small-batch entry differ from the one-token tile", set, pk->name, bad_tiles);
    CHECK(bad_batch == 0, "%s %s: %d outputs of the batch differ from single-token products", set, pk->name, bad_batch);
    CHECK(bad_threads == 0, "%s %s: %d outputs differ with 3 threads", set, pk->name, bad_threads);
    CHECK(far == 0, "%s %s: %d outputs off vec_dot's (worst %g%s)", set, pk->name, far, worst,
          exact_pack(W->type) ? "; the reference's bit for bit" : "");
    if (exact_pack(W->type))
        printf("%-11s %-8s packed: tiles of 1-%d tokens,%s batch, 1 and 3 threads bit-identical to the reference vec_dot\n",
               set, pk->name, pk->max_nc, pk->decode ? " decode runs of 1-7 groups," : "");
    else
        printf("%-11s %-8s packed: tiles of 1-%d tokens,%s batch, 1 and 3 threads bit-identical; within %.1e of vec_dot\n",
               set, pk->name, pk->max_nc, pk->decode ? " decode runs of 1-7 groups," : "", worst);
    const int bad_glu = check_glu(&P, x, y1, set, pk->name);
    free(buf);
    return bad_shape + bad_decode + bad_batch + bad_threads + far + bad_glu;
}

/* The reference quantizer, or for the i-quants without one random block bytes with a sane fp16 d (at the
 * block's start; IQ1_M's in the top nibbles of its four scale words). */
static void quantize_weights(uint32_t type, const float *x, uint8_t *q, int64_t n) {
    const ht_traits *tr = ht_get_traits_ref(type);
    if (tr->from_float) {
        tr->from_float(x, q, n);
        return;
    }
    for (int64_t b = 0; b < n / tr->blck; b++) {
        uint8_t *blk = q + (size_t)b * tr->type_size;
        for (size_t i = 0; i < tr->type_size; i++) blk[i] = (uint8_t)(int)(gauss() * 1000);   /* int first: defined wrap */
        const ht_half d = f32_to_fp16((float)(0.5 + fabs(gauss())) * 0.01f);
        uint8_t *sc = blk + offsetof(block_iq1_m, scales);
        if (type == HT_IQ1_M)
            for (int k = 0; k < 4; k++) sc[2 * k + 1] = (uint8_t)((sc[2 * k + 1] & 0x0F) | (d >> 4 * k & 0xF) << 4);
        else
            memcpy(blk, &d, sizeof d);
    }
}

static int check_type(uint32_t type, const char *set) {
    const ht_traits *tr = ht_get_traits(type);
    static float wf[ROWS * COLS], x[NTOK * COLS], y1[NTOK * ROWS], yb[NTOK * ROWS], yt[NTOK * ROWS];
    static uint8_t wq[ROWS * COLS * 4], qa[COLS * 4];
    for (int i = 0; i < ROWS * n_cols; i++) wf[i] = (float)gauss();
    for (int i = 0; i < NTOK * n_cols; i++) x[i] = (float)gauss();
    quantize_weights(type, wf, wq, ROWS * n_cols);
    const ht_tensor W = {.name = "w", .type = type, .n_dims = 2, .ne = {n_cols, ROWS, 1, 1}, .data = wq,
                         .row_bytes = ht_row_size(type, n_cols), .nbytes = ht_row_size(type, n_cols) * ROWS};
    for (int t = 0; t < NTOK; t++) run(&W, x + t * n_cols, 1, y1 + t * ROWS, 1);
    run(&W, x, NTOK, yb, 1);
    run(&W, x, NTOK, yt, 3);
    int bad_batch = 0, bad_threads = 0, bad_dot = 0;
    for (int t = 0; t < NTOK; t++) {
        ht_quantize_row((uint32_t)tr->vec_dot_type, x + t * n_cols, qa, n_cols);
        for (int r = 0; r < ROWS; r++) {
            const float d = tr->vec_dot(n_cols, wq + (size_t)r * W.row_bytes, tr->vec_dot_type == HT_F32 ? (const void *)(x + t * n_cols) : qa);
            bad_dot += memcmp(&d, &y1[t * ROWS + r], sizeof d) != 0;
        }
    }
    for (int i = 0; i < NTOK * ROWS; i++) {
        bad_batch += memcmp(&yb[i], &y1[i], sizeof(float)) != 0;
        bad_threads += memcmp(&yt[i], &y1[i], sizeof(float)) != 0;
    }
    CHECK(bad_dot == 0, "%s %s: %d single-token outputs differ from vec_dot", set, tr->name, bad_dot);
    CHECK(bad_batch == 0, "%s %s: %d outputs of the %d-token batch differ from single-token products", set, tr->name,
          bad_batch, NTOK);
    CHECK(bad_threads == 0, "%s %s: %d outputs differ with 3 threads", set, tr->name, bad_threads);
    return bad_dot + bad_batch + bad_threads + check_glu(&W, x, y1, set, tr->name) + check_packed(&W, wf, x, y1, set);
}

int main(void) {
    quant_init();
    const char *chosen = quant_backend();
    int n_sets = 0;
    for (int k = 0; quant_backend_name(k); k++) {
        const char *set = quant_backend_name(k);
        if (!quant_set_backend(set) || !tu_set_wanted(set)) continue;
        n_sets++;
        int bad = 0;
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) bad += check_type(types[t], set);
        n_cols = 300;
        for (size_t t = 0; t < sizeof float_types / sizeof float_types[0]; t++) bad += check_type(float_types[t], set);
        n_cols = COLS;
        printf("%-11s %zu types: batch of %d, 1 and 3 threads, bit-identical to single-token vec_dot%s\n", set,
               sizeof types / sizeof types[0], NTOK, bad ? " — FAILED" : "");
    }
    REQUIRE(quant_set_backend(chosen), "cannot restore %s", chosen);
    REQUIRE(n_sets > 0, "no kernel set tested (HEARTH_TEST_SETS names none this CPU runs)");
    TEST_DONE();
}
