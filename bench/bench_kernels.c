/* bench_kernels.c — single-thread speed of the dot-product kernels, per weight type and kernel set.
 *
 * For each type: a ROWS x COLS weight matrix (default 2048 rows of 8192 elements; random block bytes with
 * sane scales — speed does not depend on the values) and one activation row in the type's vec_dot format.
 * "matvec" times y = W x (a decode step) and reports weight GB/s; "tile4" times the 4-token product and
 * reports weight bytes x 4 tokens per second, i.e. GB/s of matvec-equivalent work. Both go through
 * vec_dot_tile 64 rows a call, as matmul.c hands its chunks over. Where a kernel set packs the type (ht_pack),
 * the packed layout is timed too: one token, and a full tile of max_nc tokens, whose GOP/s (2 per multiply-add)
 * are set against the peak of the instruction it multiplies with (quant_mac_peak). Best of several runs,
 * timed in thread CPU time: the machine is shared, and wall time would count the time other jobs run.
 * -a HD,POS instead times one decode token's attention over an F16 cache, as model/context.c lays it out and
 * reads it: 4 q heads a kv head of head size HD, POS positions; q·K through dot_t over K^T blocks of 64
 * positions ([HD][64], one after another), softmax·V through the tiles over V^T rows (16 a call, rows POS + 64
 * apart), each kv head's K and V of a 128 MiB cache in turn (cold, as between decode's layers). Per pass: ms
 * and GB/s of K and of V, best and median of the runs (-s: the one kernel set to time).
 * Usage: bench_kernels [-r ROWS] [-n COLS] [-s set[,set...]] [-a HD,POS] [TYPE...]   (e.g. bench_kernels Q4_0 Q4_K) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "quant/quant.h"

static const uint32_t all_types[] = {HT_Q4_0, HT_Q4_K, HT_Q6_K, HT_Q8_0, HT_F16, HT_Q4_1, HT_Q5_0, HT_Q5_1,
                                     HT_IQ4_NL, HT_Q2_K, HT_Q3_K, HT_Q5_K, HT_IQ4_XS, HT_BF16, HT_F32, HT_MXFP4,
                                     HT_IQ2_XXS, HT_IQ2_XS, HT_IQ2_S, HT_IQ3_XXS, HT_IQ3_S, HT_IQ1_S, HT_IQ1_M,
                                     HT_TQ1_0, HT_TQ2_0};
#define N_ALL (sizeof all_types / sizeof all_types[0])
#define MAX_SETS 8
#define TOK 4
#define CHUNK 64   /* rows per tile call, as matmul.c's chunks */
#define HT_TILE_PACK_MAX 16   /* activation rows prepared for the packed tiles (>= every pack's max_nc) */

static uint64_t rng = 0x1234567;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static bool in_list(const char *list, const char *name) {   /* name is an item of comma-separated list */
    const size_t len = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += len)
        if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == 0)) return true;
    return false;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Random bytes, then every fp16 field that is a scale set to ~1 (offsets per block layout). */
static void fill_weights(uint32_t type, uint8_t *w, size_t bytes, size_t nblocks, size_t bsize) {
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
    if (type == HT_F32) {
        for (size_t i = 0; i < bytes / 4; i++) ((float *)w)[i] = (float)((int)(rnd() % 200) - 100) * 0.01f;
        return;
    }
    if (type == HT_F16 || type == HT_BF16) {
        for (size_t i = 0; i < bytes / 2; i++) ((uint16_t *)w)[i] = type == HT_F16 ? 0x3C00 : 0x3F80;
        return;
    }
    size_t off[2] = {0, 2};
    int nf = 1;
    switch (type) {
    case HT_Q4_1: case HT_Q5_1: case HT_Q4_K: case HT_Q5_K: nf = 2; break;
    case HT_Q2_K: off[0] = offsetof(block_q2_K, d); off[1] = offsetof(block_q2_K, dmin); nf = 2; break;
    case HT_Q3_K: off[0] = offsetof(block_q3_K, d); break;
    case HT_Q6_K: off[0] = offsetof(block_q6_K, d); break;
    case HT_TQ1_0: off[0] = offsetof(block_tq1_0, d); break;
    case HT_TQ2_0: off[0] = offsetof(block_tq2_0, d); break;
    case HT_MXFP4:   /* E8M0 scale 1 */
        for (size_t b = 0; b < nblocks; b++) w[b * bsize] = 127;
        return;
    case HT_IQ1_M: nf = 0; break;   /* its d is spread over the scale words; any value times the same */
    default: break;
    }
    for (size_t b = 0; b < nblocks; b++)
        for (int f = 0; f < nf; f++) {
            const uint16_t one = 0x3C00;
            memcpy(w + b * bsize + off[f], &one, 2);
        }
}

typedef struct { double matvec, tile; } result;

static volatile float sink;

static result run(const ht_traits *tr, const uint8_t *w, size_t rb, int rows, int n, const uint8_t *a, size_t ab,
                  float *y) {
    result best = {0, 0};
    const double bytes = (double)rb * rows;
    for (int rep = 0; rep < 5; rep++) {
        int iters = 0;
        double t0 = now(), t;
        do {
            for (int r = 0; r < rows; r += CHUNK) ht_vec_dot_tile(tr, n, w + (size_t)r * rb, rb, CHUNK, a, ab, 1, y + r, (size_t)rows);
            iters++;
        } while ((t = now() - t0) < 0.15);
        sink = y[rows / 2];
        if (bytes * iters / t / 1e9 > best.matvec) best.matvec = bytes * iters / t / 1e9;
        iters = 0;
        t0 = now();
        do {
            for (int r = 0; r < rows; r += CHUNK) ht_vec_dot_tile(tr, n, w + (size_t)r * rb, rb, CHUNK, a, ab, TOK, y + r, (size_t)rows);
            iters++;
        } while ((t = now() - t0) < 0.15);
        sink = y[rows / 2];
        if (bytes * TOK * iters / t / 1e9 > best.tile) best.tile = bytes * TOK * iters / t / 1e9;
    }
    return best;
}

/* The set's packed layout of the type (ht_pack), when it has one: one token, and max_nc tokens a tile call. */
static result run_packed(const ht_pack *pk, const uint8_t *w, size_t rb, int rows, int n, const float *xf, float *y) {
    result best = {0, 0};
    const int R = pk->rows, groups = (rows + R - 1) / R;
    const size_t gb = pk->group_bytes(n), ab = pk->act_prep ? pk->act_bytes(n) : (size_t)n * sizeof(float);
    uint8_t *g = aligned_alloc(64, ((size_t)groups * gb + 63) / 64 * 64), *a = malloc(ab * (size_t)pk->max_nc);
    if (!g || !a) { free(g); free(a); return best; }
    for (int k = 0; k < groups; k++) pk->pack(w + (size_t)k * R * rb, rb, HT_MIN(R, rows - k * R), n, g + (size_t)k * gb);
    for (int c = 0; c < pk->max_nc; c++)
        if (pk->act_prep) pk->act_prep(xf + (size_t)c * n, a + (size_t)c * ab, n);
        else memcpy(a + (size_t)c * ab, xf + (size_t)c * n, (size_t)n * sizeof(float));
    const double bytes = (double)rb * rows;
    for (int rep = 0; rep < 5; rep++)
        for (int pass = 0; pass < 2; pass++) {
            const int nc = pass ? pk->max_nc : 1;
            int iters = 0;
            double t0 = now(), t;
            do {
                if (nc == 1 && pk->decode)   /* 4 groups a call, as matmul's decode chunks (whole groups) */
                    for (int k = 0, ng; k < groups; k += ng) {
                        ng = HT_MIN(4, groups - k);
                        pk->decode(n, g + (size_t)k * gb, ng, HT_MIN(R, rows - (k + ng - 1) * R), a, y + (size_t)k * R);
                    }
                else
                    for (int k = 0; k < groups; k++)
                        pk->tile(n, g + (size_t)k * gb, HT_MIN(R, rows - k * R), a, ab, nc, y + (size_t)k * R, (size_t)rows);
                iters++;
            } while ((t = now() - t0) < 0.15);
            sink = y[rows / 2];
            double gbs = bytes * nc * iters / t / 1e9;
            if (pass && gbs > best.tile) best.tile = gbs;
            if (!pass && gbs > best.matvec) best.matvec = gbs;
        }
    free(g);
    free(a);
    return best;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define ATT_HEADS 4    /* q heads a kv head */
#define ATT_KT 64      /* K^T block (context.c's KT_BLOCK) */
#define ATT_VROWS 16   /* V^T rows a tile call (context.c's ATT_PV_ROWS) */
#define ATT_RUNS 15

/* The -a mode: see the top of the file. */
static int run_attention(int hd, int pos) {
    quant_init();
    const ht_traits *tr = ht_get_traits(HT_F16);
    const int span = pos + ATT_KT;
    const size_t kb = (size_t)hd * pos * 2, vb = (size_t)hd * span * 2;
    const int heads = (int)HT_MAX(1, ((size_t)128 << 20) / (kb + vb));
    uint16_t *k = malloc(kb * heads), *v = malloc(vb * heads);
    float *q = malloc(sizeof(float) * ATT_HEADS * hd), *sc = malloc(sizeof(float) * ATT_HEADS * pos);
    float *o = malloc(sizeof(float) * ATT_HEADS * hd);
    if (!k || !v || !q || !sc || !o || !tr->dot_t) return 1;
    for (size_t i = 0; i < kb / 2 * heads; i++) k[i] = (uint16_t)(0x3000 + rnd() % 0x0C00);
    for (size_t i = 0; i < vb / 2 * heads; i++) v[i] = (uint16_t)(0x3000 + rnd() % 0x0C00);
    for (int i = 0; i < ATT_HEADS * hd; i++) q[i] = (float)((int)(rnd() % 2001) - 1000) * 1e-3f;
    for (int i = 0; i < ATT_HEADS * pos; i++) sc[i] = 1.0f / (float)pos;
    double tk[ATT_RUNS], tv[ATT_RUNS];
    for (int run = 0; run < ATT_RUNS; run++) {
        double t0 = now();
        for (int h = 0; h < heads; h++) {
            const uint8_t *kh = (const uint8_t *)k + kb * h;
            for (int p = 0; p < pos; p += ATT_KT) {
                const int len = HT_MIN(ATT_KT, pos - p);
                tr->dot_t(hd, kh + (size_t)p * hd * 2, (size_t)len, len, q, (size_t)hd, ATT_HEADS, sc + p, (size_t)pos);
            }
        }
        double t1 = now();
        sink = sc[pos / 2];
        for (int i = 0; i < ATT_HEADS * pos; i++) sc[i] = 1.0f / (float)pos;
        double t2 = now();
        for (int h = 0; h < heads; h++) {
            const uint8_t *vh = (const uint8_t *)v + vb * h;
            for (int d = 0; d < hd; d += ATT_VROWS)
                ht_vec_dot_tile(tr, pos, vh + (size_t)d * span * 2, (size_t)span * 2, HT_MIN(ATT_VROWS, hd - d),
                                sc, (size_t)pos * sizeof(float), ATT_HEADS, o + d, (size_t)hd);
        }
        tv[run] = (now() - t2) / heads, tk[run] = (t1 - t0) / heads;
        sink = o[hd / 2];
    }
    qsort(tk, ATT_RUNS, sizeof tk[0], cmp_double);
    qsort(tv, ATT_RUNS, sizeof tv[0], cmp_double);
    const double kbytes = (double)kb, vbytes = (double)hd * pos * 2;
    printf("attention, F16 cache, head size %d, %d positions, %d q heads a kv head, %d kv heads in turn (%s)\n", hd, pos,
           ATT_HEADS, heads, quant_backend());
    printf("K (dot_t):  best %.4f ms a kv head (%.1f GB/s), median %.4f ms (%.1f GB/s)\n", tk[0] * 1e3, kbytes / tk[0] / 1e9,
           tk[ATT_RUNS / 2] * 1e3, kbytes / tk[ATT_RUNS / 2] / 1e9);
    printf("V (tiles):  best %.4f ms a kv head (%.1f GB/s), median %.4f ms (%.1f GB/s)\n", tv[0] * 1e3, vbytes / tv[0] / 1e9,
           tv[ATT_RUNS / 2] * 1e3, vbytes / tv[ATT_RUNS / 2] / 1e9);
    free(k), free(v), free(q), free(sc), free(o);
    return 0;
}

int main(int argc, char **argv) {
    int rows = 2048, n = 8192, att_hd = 0, att_pos = 0;
    const char *sets_arg = NULL;
    uint32_t types[N_ALL];
    int n_types = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-r") && i + 1 < argc) rows = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) sets_arg = argv[++i];
        else if (!strcmp(argv[i], "-a") && i + 1 < argc && sscanf(argv[++i], "%d,%d", &att_hd, &att_pos) == 2) {
            if (att_hd < 1 || att_pos < 1) return 1;
        } else {
            int found = 0;
            for (size_t t = 0; t < N_ALL && n_types < (int)N_ALL; t++)
                if (!strcmp(ht_get_traits_ref(all_types[t])->name, argv[i])) types[n_types++] = all_types[t], found = 1;
            if (!found) {
                fprintf(stderr, "usage: bench_kernels [-r ROWS] [-n COLS] [-s set,...] [-a HD,POS] [TYPE...]  (unknown: %s)\n", argv[i]);
                return 1;
            }
        }
    }
    if (att_hd) return sets_arg && !quant_set_backend(sets_arg) ? 1 : run_attention(att_hd, att_pos);
    if (!n_types)
        for (size_t t = 0; t < N_ALL; t++) types[n_types++] = all_types[t];
    rows = (rows + CHUNK - 1) / CHUNK * CHUNK;
    n = (n + QK_K - 1) / QK_K * QK_K;

    const char *sets[MAX_SETS];
    int n_sets = 0;
    for (int k = 0; quant_backend_name(k) && n_sets < MAX_SETS; k++) {
        const char *s = quant_backend_name(k);
        if (sets_arg && !in_list(sets_arg, s)) continue;
        if (quant_set_backend(s)) sets[n_sets++] = s;
    }
    printf("single thread, %d x %d weights; GB/s of weight data: matvec = 1 token, tile4 = %d tokens, "
           "%d rows a vec_dot_tile call (bytes x tokens / s)\n%-7s", rows, n, TOK, CHUNK, "");
    for (int s = 0; s < n_sets; s++) printf(" | %-13s", sets[s]);
    printf("\n%-7s", "type");
    for (int s = 0; s < n_sets; s++) printf(" | matvec  tile4");
    printf("\n");

    float *xf = malloc((size_t)n * HT_TILE_PACK_MAX * sizeof(float));
    float *y = malloc((size_t)rows * HT_TILE_PACK_MAX * sizeof(float));
    for (int i = 0; i < n * HT_TILE_PACK_MAX; i++) xf[i] = (float)((int)(rnd() % 2001) - 1000) * 1e-3f;
    for (int t = 0; t < n_types; t++) {
        const ht_traits *ref = ht_get_traits_ref(types[t]);
        const size_t rb = ht_row_size(types[t], n), ab = ht_row_size((uint32_t)ref->vec_dot_type, n);
        uint8_t *w = malloc(rb * (size_t)rows), *a = malloc(ab * TOK);
        if (!w || !a || !xf || !y) return 1;
        fill_weights(types[t], w, rb * (size_t)rows, (size_t)rows * (size_t)n / (size_t)ref->blck, ref->type_size);
        printf("%-7s", ref->name);
        for (int s = 0; s < n_sets; s++) {
            quant_set_backend(sets[s]);
            const ht_traits *tr = ht_get_traits(types[t]);
            for (int k = 0; k < TOK; k++) ht_quantize_row((uint32_t)tr->vec_dot_type, xf + (size_t)k * n, a + k * ab, n);
            const result r = run(tr, w, rb, rows, n, a, ab, y);
            printf(" | %6.2f %6.2f", r.matvec, r.tile);
            fflush(stdout);
        }
        printf("\n");
        for (int s = 0; s < n_sets; s++) {   /* the packed layouts: 1 token, and a full tile (max_nc tokens) */
            quant_set_backend(sets[s]);
            const ht_pack *pk = ht_get_traits(types[t])->pack;
            if (!pk) continue;
            const result r = run_packed(pk, w, rb, rows, n, xf, y);
            const ht_mac_peak peak = quant_mac_peak(types[t], 0.1);
            const double gops = 2 * r.tile * 1e9 / (double)rb * n / 1e9;   /* the full tile's multiply-adds, x 2 */
            printf("  packed %-10s (%s): 1 token %6.2f, %d tokens %6.2f = %.1f GOP/s, %.0f%% of the %s peak (%.1f)\n",
                   pk->name, sets[s], r.matvec, pk->max_nc, r.tile, gops, 100 * gops / (2 * peak.macs / 1e9), peak.insn,
                   2 * peak.macs / 1e9);
        }
        free(w);
        free(a);
    }
    free(xf);
    free(y);
    return 0;
}
