/* bench_ab.c — two builds of hearth side by side in one process, for before/after measurements on a shared host.
 *
 * Why: this machine's host swings its bandwidth and clock by 10-20% within seconds, so two `hearth bench` runs a
 * minute apart differ by more than most kernel changes. Here both builds' libhearth.so are loaded at once (each
 * in its own link namespace, dlmopen), each with the model and a context of its own, and their prefill and
 * decode runs alternate, A B B A, every run a few seconds: a swing of the host hits both sides alike, and the
 * medians and the median of the paired ratios (B / A of the same round) say which build is faster.
 * Same threads, same tokens, same model file on both sides.
 *
 *   bench_ab [-t THREADS] [-p PROMPT] [-n DECODE] [-d DEPTH] [-r ROUNDS] [-c SET] [-a LORA[,LORA..]] [-b LORA[,LORA..] [-m]] MODEL LIB_A LIB_B
 *   e.g. bench_ab -p 512 -n 64 m.gguf /tmp/before/build/libhearth.so build/libhearth.so
 * -p 0 or -n 0 skips that phase. -d fills DEPTH tokens into each side's cache once, before the rounds; every run
 * then starts from them (the cache cut back to DEPTH), as llama-bench -d. -k sets both sides' K and V cache type
 * (f16, q8_0, ...). -c forces a kernel set on both sides (hearth_set_kernels: "avx2", ...). LIB_A may equal LIB_B
 * (a check of the method: the ratio should come out 1).
 * -a / -b apply a LoRA adapter at scale 1 on side A / B (unmerged; with -m B's is merged into its weights), or
 * several together (F1,F2,...): the same library on both sides with -b gives the adapters' overhead. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hearth.h"

#define MAX_ROUNDS 64

typedef struct {
    const char *lib;
    int (*model_load)(const char *, hearth_model **, hearth_err *);
    hearth_ctx_params (*default_params)(void);
    int (*ctx_new)(hearth_model *, const hearth_ctx_params *, hearth_ctx **, hearth_err *);
    int (*decode)(hearth_ctx *, const hearth_batch *, hearth_err *);
    void (*seq_truncate)(hearth_ctx *, int, int);
    const char *(*kernels)(void);
    const char *lora;   /* an adapter to apply, or NULL */
    int merge;          /* merged into the weights (hearth_lora_merge) rather than applied beside them */
    hearth_ctx *ctx;
    double pp[MAX_ROUNDS], tg[MAX_ROUNDS];
} side;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *sym(void *h, const char *lib, const char *name) {
    void *p = dlsym(h, name);
    if (!p) {
        fprintf(stderr, "bench_ab: %s has no %s\n", lib, name);
        exit(1);
    }
    return p;
}

static int kv_type = -2;   /* -k: both sides' K and V cache type (hearth_cache_type); -2: the default */

static void open_side(side *s, const char *model, int threads, int n_ctx, const char *set) {
    void *h = dlmopen(LM_ID_NEWLM, s->lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "bench_ab: %s\n", dlerror());
        exit(1);
    }
    if (set) {
        bool (*set_kernels)(const char *);
        *(void **)&set_kernels = sym(h, s->lib, "hearth_set_kernels");
        if (!set_kernels(set)) {
            fprintf(stderr, "bench_ab: %s: kernel set '%s' is not built in or this CPU cannot run it\n", s->lib, set);
            exit(1);
        }
    }
    *(void **)&s->model_load = sym(h, s->lib, "hearth_model_load");
    *(void **)&s->default_params = sym(h, s->lib, "hearth_ctx_default_params");
    *(void **)&s->ctx_new = sym(h, s->lib, "hearth_ctx_new");
    *(void **)&s->decode = sym(h, s->lib, "hearth_decode");
    *(void **)&s->seq_truncate = sym(h, s->lib, "hearth_seq_truncate");
    *(void **)&s->kernels = sym(h, s->lib, "hearth_kernels");
    hearth_model *m;
    hearth_err err;
    if (s->model_load(model, &m, &err)) {
        fprintf(stderr, "bench_ab: %s: %s\n", s->lib, err.msg);
        exit(1);
    }
    hearth_lora *a[HEARTH_MAX_LORA];
    float one[HEARTH_MAX_LORA];
    for (int i = 0; i < HEARTH_MAX_LORA; i++) one[i] = 1;
    int n_lora = 0;
    for (const char *f = s->lora; f && *f; f += strcspn(f, ",") + (f[strcspn(f, ",")] == ',')) {   /* F1,F2,... */
        int (*lora_load)(hearth_model *, const char *, hearth_lora **, hearth_err *);
        *(void **)&lora_load = sym(h, s->lib, "hearth_lora_load");
        char path[4096];
        snprintf(path, sizeof path, "%.*s", (int)strcspn(f, ","), f);
        if (n_lora == HEARTH_MAX_LORA) {
            snprintf(err.msg, sizeof err.msg, "at most %d adapters", HEARTH_MAX_LORA);
            goto fail;
        }
        if (lora_load(m, path, &a[n_lora], &err)) goto fail;
        n_lora++;
    }
    if (s->merge) {
        int (*merge)(hearth_model *, hearth_lora *const *, const float *, int, int, size_t *, hearth_err *);
        *(void **)&merge = sym(h, s->lib, "hearth_lora_merge");
        if (merge(m, a, one, n_lora, threads, NULL, &err)) goto fail;
    }
    hearth_ctx_params p = s->default_params();
    p.n_ctx = n_ctx;
    p.n_threads = threads;
    if (kv_type != -2) p.cache_type = (hearth_cache_type)kv_type;
    if (s->ctx_new(m, &p, &s->ctx, &err)) goto fail;
    if (n_lora && !s->merge) {
        int (*set)(hearth_ctx *, hearth_lora *const *, const float *, int, hearth_err *);
        *(void **)&set = sym(h, s->lib, "hearth_ctx_set_lora");
        if (set(s->ctx, a, one, n_lora, &err)) goto fail;
    }
    return;   /* (the model, context and adapter live until the process ends) */
fail:
    fprintf(stderr, "bench_ab: %s: %s\n", s->lib, err.msg);
    exit(1);
}

/* Tokens per second of prefilling n_pp tokens (batches of 512) after the first depth tokens of the cache, or,
 * with n_tg, of decoding n_tg tokens one at a time after one prompt token. */
static double run(side *s, const hearth_token *tok, int depth, int n_pp, int n_tg) {
    hearth_err err;
    s->seq_truncate(s->ctx, 0, depth);
    tok += depth;
    int done = 0;
    if (n_tg) {
        const hearth_batch b = {.n = 1, .tokens = tok};
        if (s->decode(s->ctx, &b, &err)) goto fail;
        done = 1;
    }
    const double t0 = now();
    for (int i = 0; i < n_pp; i += 512) {
        const hearth_batch b = {.n = n_pp - i < 512 ? n_pp - i : 512, .tokens = tok + i};
        if (s->decode(s->ctx, &b, &err)) goto fail;
    }
    for (int i = 0; i < n_tg; i++) {
        const hearth_batch b = {.n = 1, .tokens = tok + done + i};
        if (s->decode(s->ctx, &b, &err)) goto fail;
    }
    return (n_pp + n_tg) / (now() - t0);
fail:
    fprintf(stderr, "bench_ab: %s: %s\n", s->lib, err.msg);
    exit(1);
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double t[MAX_ROUNDS];
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

static void report(const char *what, const double *a, const double *b, int rounds) {
    double ratio[MAX_ROUNDS] = {0};
    int wins = 0;
    for (int r = 0; r < rounds; r++) {
        ratio[r] = b[r] / a[r];
        wins += b[r] > a[r];
    }
    double lo = ratio[0], hi = ratio[0];
    for (int r = 1; r < rounds; r++) lo = ratio[r] < lo ? ratio[r] : lo, hi = ratio[r] > hi ? ratio[r] : hi;
    printf("%-6s A %8.2f t/s   B %8.2f t/s   B/A: median of rounds %.3f (%.3f-%.3f), B faster in %d of %d\n", what,
           median(a, rounds), median(b, rounds), median(ratio, rounds), lo, hi, wins, rounds);
}

int main(int argc, char **argv) {
    int threads = 2, n_pp = 512, n_tg = 64, depth = 0, rounds = 6, opt, merge = 0;
    const char *lora[2] = {NULL, NULL}, *set = NULL;
    while ((opt = getopt(argc, argv, "t:p:n:d:r:c:a:b:mk:")) != -1) {
        switch (opt) {
        case 't': threads = atoi(optarg); break;
        case 'p': n_pp = atoi(optarg); break;
        case 'n': n_tg = atoi(optarg); break;
        case 'd': depth = atoi(optarg); break;
        case 'r': rounds = atoi(optarg); break;
        case 'c': set = optarg; break;
        case 'a': lora[0] = optarg; break;
        case 'b': lora[1] = optarg; break;
        case 'm': merge = 1; break;
        case 'k': {   /* llama.cpp's cache type names */
            static const struct { const char *name; int type; } kt[] = {
                { "f32", HEARTH_CACHE_F32 }, { "f16", HEARTH_CACHE_F16 }, { "bf16", HEARTH_CACHE_BF16 },
                { "q8_0", HEARTH_CACHE_Q8_0 }, { "q4_0", HEARTH_CACHE_Q4_0 } };
            for (size_t i = 0; i < sizeof kt / sizeof kt[0]; i++)
                if (!strcmp(optarg, kt[i].name)) kv_type = kt[i].type;
            if (kv_type == -2) { fprintf(stderr, "bench_ab: -k takes f32, f16, bf16, q8_0 or q4_0\n"); return 1; }
            break;
        }
        default: goto usage;
        }
    }
    if (argc - optind != 3 || threads < 1 || n_pp < 0 || n_tg < 0 || n_pp + n_tg < 1 || depth < 0 || depth + n_pp + n_tg > 65536 ||
        rounds < 1 || rounds > MAX_ROUNDS || (merge && !lora[1]))
        goto usage;
    side s[2] = {{.lib = argv[optind + 1], .lora = lora[0]}, {.lib = argv[optind + 2], .lora = lora[1], .merge = merge}};
    const int n_ctx = depth + (n_pp > n_tg + 1 ? n_pp : n_tg + 1);
    hearth_token *tok = malloc(sizeof *tok * (size_t)(n_ctx + 1));
    if (!tok) return 1;
    for (int i = 0; i <= n_ctx; i++) tok[i] = 1 + (hearth_token)((i * 7919) % 255);   /* ids 1-255: in every vocabulary */
    for (int i = 0; i < 2; i++) {
        open_side(&s[i], argv[optind], threads, n_ctx, set);
        run(&s[i], tok, 0, n_pp < 64 ? n_pp : 64, n_pp ? 0 : 4);   /* touch the weights and scratch once */
        if (depth) run(&s[i], tok, 0, depth, 0);                      /* the cache both sides' runs start from */
    }
    printf("A: %s (%s)%s%s\nB: %s (%s)%s%s%s\n%s, %d threads, %d rounds A B B A of", s[0].lib, s[0].kernels(), lora[0] ? " + LoRA " : "",
           lora[0] ? lora[0] : "", s[1].lib, s[1].kernels(), lora[1] ? " + LoRA " : "", lora[1] ? lora[1] : "",
           merge ? " merged" : "", argv[optind], threads, rounds);
    if (n_pp) printf(" pp%d", n_pp);
    if (n_tg) printf(" tg%d", n_tg);
    if (depth) printf(" @ d%d", depth);
    printf("\n");
    fflush(stdout);
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2; k++) {
            side *x = &s[r % 2 ? 1 - k : k];
            usleep(20000);   /* the other side's pool stops spinning and sleeps */
            if (n_pp) x->pp[r] = run(x, tok, depth, n_pp, 0);
            if (n_tg) x->tg[r] = run(x, tok, depth, 0, n_tg);
        }
    }
    if (n_pp) report("pp", s[0].pp, s[1].pp, rounds);
    if (n_tg) report("tg", s[0].tg, s[1].tg, rounds);
    free(tok);
    return 0;
usage:
    fprintf(stderr, "usage: bench_ab [-t THREADS] [-p PROMPT] [-n DECODE] [-d DEPTH] [-r ROUNDS] [-c SET] [-k CACHE_TYPE] [-a LORA[,LORA..]] [-b LORA[,LORA..] [-m]] MODEL LIB_A LIB_B\n");
    return 2;
}
