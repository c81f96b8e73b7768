/* cmd_bench.c — `hearth bench -m MODEL [-t T] [-p 512] [-n 128] [-r REPS]`: llama-bench's measurements and
 * table (pp = one batch of p tokens from an empty cache, tg = n tokens decoded one at a time from an empty
 * cache, t/s as mean ± sd over REPS after one warm-up), plus load time, resident memory, prefill GFLOP/s as a
 * share of the multiply-add instruction's measured peak (quant_mac_peak), and decode speed as a share of the
 * limit that the measured memory read bandwidth puts on it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "model/context.h"
#include "compute/threads.h"
#include "generate/speculative.h"

#define BW_BYTES (1ull << 30)     /* streamed buffer: far larger than any last-level cache */
#define BW_PASSES 10
#define PEAK_SECONDS 0.2   /* each thread's multiply-add peak loop */
#define MIB (1024.0 * 1024.0)

typedef struct {
    const char *path;
    const char *draft_path;   /* --model-draft: speculative decoding measured after the table */
    long draft_max;
    long threads, n_prompt, n_gen, reps, n_ctx, depth;   /* n_prompt, n_gen: the largest of their lists */
    long pp[16], tg[16];
    int n_pp, n_tg;
    int fmt;                  /* OUT_MD, OUT_CSV, OUT_JSON */
    bool bandwidth;
    hearth_cache_type cache_type[2];   /* K, V */
    cli_lora lora;            /* --lora / --lora-scaled: paths and scales (loaded with each model) */
} bench_args;

typedef struct { double mean, sd; } stat2;

enum { OUT_MD, OUT_CSV, OUT_JSON };

/* "128,512" -> {128, 512} (each in 0..65536, at most 16); false with the one-line error printed. */
static bool parse_list(const char *flag, const char *v, long *out, int *n, long *max) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    *n = 0;
    *max = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == 16) { cli_fail("bad value for %s: at most 16 values", flag); return false; }
        if (!cli_int(flag, t, 0, 1 << 16, &out[*n])) return false;
        if (out[*n] > *max) *max = out[*n];
        (*n)++;
    }
    if (!*n) { cli_fail("bad value for %s: '%s'", flag, v); return false; }
    return true;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void bench_usage(void) {
    printf("usage: hearth bench -m MODEL [-t THREADS] [-p N_PROMPT] [-n N_GEN] [-r REPS] [-d DEPTH] [-c CTX] [-ctk T] [-ctv T] [--no-bw]\n"
           "                    [--lora FILE[,FILE]] [--lora-scaled FILE:SCALE[,...]] [--lora-merge]\n"
           "                    [--model-draft FILE [--draft-max N]]\n"
           "                    [-o md|csv|json]  (-p and -n take lists too: -p 128,512)\n"
           "                    [--cpu avx512vnni|avx512|avx2|neon|scalar]\n"
           "Prints llama-bench's table (pp: one batch of N_PROMPT tokens from an empty cache; tg: N_GEN tokens one at\n"
           "a time from an empty cache, or with -d DEPTH tokens already in it, as llama-bench -d; t/s as mean ± sd\n"
           "over REPS runs after a warm-up), then load time, resident memory, prefill GFLOP/s against the measured\n"
           "peak of the instruction the kernels multiply with, and decode speed against the limit the measured read\n"
           "bandwidth sets (--no-bw skips it).\n"
           "Defaults: -t all cores (one for a model too small to split), -p 512, -n 128, -r 3, -c max(2048, p + n).\n"
           "-ctk / --cache-type-k and -ctv / --cache-type-v: the K and V caches' types, f16 (default), bf16, q8_0,\n"
           "q4_0 or f32 (q8_0 and q4_0 need head sizes that are multiples of 32); --cache-type sets both; the memory\n"
           "lines name them.\n"
           "--cpu runs a lower kernel set than the CPU's best (e.g. avx2 on an AVX-512 machine), to measure it.\n");
}

static int parse_args(int argc, char **argv, bench_args *a) {
    *a = (bench_args){ .n_prompt = 512, .n_gen = 128, .pp = {512}, .tg = {128}, .n_pp = 1, .n_tg = 1, .reps = 3, .draft_max = 8,
                       .bandwidth = true, .cache_type = { HEARTH_CACHE_F16, HEARTH_CACHE_F16 } };
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) { bench_usage(); return 0; }
        if (!strcmp(f, "--no-bw")) { a->bandwidth = false; continue; }
        if (!strcmp(f, "--lora-merge")) { a->lora.merge = true; continue; }
        if (!v) { cli_fail("missing value for %s", f); return -1; }
        if (!strcmp(f, "-m")) a->path = v;
        else if (!strcmp(f, "-t")) ok = cli_int(f, v, 1, 256, &a->threads);
        else if (!strcmp(f, "-p")) ok = parse_list(f, v, a->pp, &a->n_pp, &a->n_prompt);
        else if (!strcmp(f, "-n")) ok = parse_list(f, v, a->tg, &a->n_tg, &a->n_gen);
        else if (!strcmp(f, "-o")) {
            a->fmt = !strcmp(v, "md") ? OUT_MD : !strcmp(v, "csv") ? OUT_CSV : !strcmp(v, "json") ? OUT_JSON : -1;
            if (a->fmt < 0) { cli_fail("bad value for -o: '%s' (expected md, csv or json)", v); return -1; }
        }
        else if (!strcmp(f, "--model-draft")) a->draft_path = v;
        else if (!strcmp(f, "--draft-max")) ok = cli_int(f, v, 1, SPEC_MAX_DRAFT, &a->draft_max);
        else if (!strcmp(f, "-r")) ok = cli_int(f, v, 1, 1000, &a->reps);
        else if (!strcmp(f, "-c")) ok = cli_int(f, v, 1, 1 << 22, &a->n_ctx);
        else if (!strcmp(f, "-d") || !strcmp(f, "--depth")) ok = cli_int(f, v, 0, 1 << 20, &a->depth);
        else if (cli_is_cache_flag(f)) ok = cli_cache_types(f, v, a->cache_type);
        else if (!strcmp(f, "--lora") || !strcmp(f, "--lora-scaled")) ok = cli_lora_arg(f, v, &a->lora);
        else if (!strcmp(f, "--cpu")) {
            if (!quant_set_backend(v)) { cli_fail("kernel set '%s' is not built in or this CPU cannot run it", v); return -1; }
        }
        else { cli_fail("unknown option '%s' for bench (see hearth bench --help)", f); return -1; }
        if (!ok) return -1;
        i++;
    }
    if (!a->path) a->path = cli_default_model();
    if (a->n_prompt + a->n_gen == 0) { cli_fail("nothing to measure: -p and -n are both 0"); return -1; }
    return 1;
}

/* ---- model description, as llama-bench prints it ---- */

static const char *ftype_name(uint32_t ft) {
    switch (ft) {
    case 0: return "all F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K - Medium";
    case 11: return "Q3_K - Small";
    case 12: return "Q3_K - Medium";
    case 14: return "Q4_K - Small";
    case 15: return "Q4_K - Medium";
    case 16: return "Q5_K - Small";
    case 17: return "Q5_K - Medium";
    case 18: return "Q6_K";
    case 19: return "IQ2_XXS - 2.0625 bpw";
    case 20: return "IQ2_XS - 2.3125 bpw";
    case 23: return "IQ3_XXS - 3.0625 bpw";
    case 24: return "IQ1_S - 1.5625 bpw";
    case 25: return "IQ4_NL - 4.5 bpw";
    case 26: return "IQ3_S - 3.4375 bpw";
    case 28: return "IQ2_S - 2.5 bpw";
    case 29: return "IQ2_M - 2.7 bpw";
    case 30: return "IQ4_XS - 4.25 bpw";
    case 31: return "IQ1_M - 1.75 bpw";
    case 32: return "BF16";
    case 36: return "TQ1_0 - 1.69 bpw ternary";
    case 37: return "TQ2_0 - 2.06 bpw ternary";
    case 38: return "MXFP4 MoE";
    default: return "?";
    }
}

static void fmt_count(char *buf, size_t cap, double n) {
    if (n >= 1e9) snprintf(buf, cap, "%.2f B", n / 1e9);
    else if (n >= 1e6) snprintf(buf, cap, "%.2f M", n / 1e6);
    else snprintf(buf, cap, "%.2f K", n / 1e3);
}

/* "1B", "124M", "293K": general.size_label, or the parameter count rounded. */
static void size_label(const hearth_model *m, const hearth_model_info *in, char *buf, size_t cap) {
    gguf_str sl;
    double n = (double)in->n_params;
    if (gguf_get_str(m->gguf, "general.size_label", &sl) && sl.n) snprintf(buf, cap, "%.*s", (int)HT_MIN(sl.n, 16), sl.p);
    else if (n >= 1e9) snprintf(buf, cap, "%.1fB", n / 1e9);
    else if (n >= 1e6) snprintf(buf, cap, "%.0fM", n / 1e6);
    else snprintf(buf, cap, "%.0fK", n / 1e3);
}

/* general.file_type's name, or (as llama.cpp does without it) the most common matrix type, "guessed". */
static void ftype_label(const hearth_model *m, char *buf, size_t cap) {
    uint32_t ft;
    if (gguf_get_u32(m->gguf, "general.file_type", &ft)) { snprintf(buf, cap, "%s", ftype_name(ft)); return; }
    int count[HT_NTYPES] = { 0 }, best = HT_F32;
    for (int i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].n_dims >= 2 && m->tensors[i].type < HT_NTYPES) count[m->tensors[i].type]++;
    for (int t = 0; t < HT_NTYPES; t++) if (count[t] > count[best]) best = t;
    snprintf(buf, cap, "%s%s (guessed)", best == HT_F32 ? "all " : "", ht_get_traits((uint32_t)best)->name);
}

static void model_desc(const hearth_model *m, const hearth_model_info *in, char *buf, size_t cap) {
    char sl[24], ft[40];
    size_label(m, in, sl, sizeof sl);
    ftype_label(m, ft, sizeof ft);
    snprintf(buf, cap, "%s %s %s", in->arch, sl, ft);
}

/* ---- measurements ---- */

static stat2 stats(const double *x, int n) {
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++) s += x[i];
    double mean = s / n;
    for (int i = 0; i < n; i++) ss += (x[i] - mean) * (x[i] - mean);
    return (stat2){ mean, n > 1 ? sqrt(ss / (n - 1)) : 0 };
}

/* One pp run: a single batch of n tokens into an empty cache. Returns ms, or -1. */
/* Tokens already in the cache when a test starts (-d): filled once, kept by every run. */
static int g_depth;

static double run_pp(hearth_ctx *c, const hearth_token *toks, int n, hearth_err *err) {
    hearth_seq_truncate(c, 0, g_depth);
    hearth_batch b = { .n = n, .tokens = toks };
    double t0 = now_ms();
    if (hearth_decode(c, &b, err)) return -1;
    return now_ms() - t0;
}

/* One tg run: n single-token decodes from an empty cache. Returns ms, or -1. */
static double run_tg(hearth_ctx *c, hearth_token tok, int n, hearth_err *err) {
    hearth_seq_truncate(c, 0, g_depth);
    hearth_batch b = { .n = 1, .tokens = &tok };
    double t0 = now_ms();
    for (int i = 0; i < n; i++)
        if (hearth_decode(c, &b, err)) return -1;
    return now_ms() - t0;
}

/* Runs a test reps times after a warm-up and returns tokens/second statistics. */
static int measure(hearth_ctx *c, bool pp, const hearth_token *toks, int n, int reps, stat2 *out, hearth_err *err) {
    double *tps = malloc((size_t)reps * sizeof *tps);
    if (!tps) return herr(err, "out of memory");
    int rc = 0;
    for (int r = -1; r < reps && !rc; r++) {
        double ms = pp ? run_pp(c, toks, n, err) : run_tg(c, toks[0], r < 0 ? 1 : n, err);
        if (ms < 0) rc = -1;
        else if (r >= 0) tps[r] = n / (ms / 1e3);
    }
    if (!rc) *out = stats(tps, reps);
    free(tps);
    return rc;
}

/* CPU seconds this process has used (all threads). */
static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Resident set size in bytes (VmRSS), 0 if unknown. */
static uint64_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024;
}

typedef struct { const uint64_t *buf; size_t n; uint64_t sums[64]; } bw_job;

/* Four vector sums in registers, one 64-byte line per step: a loop of uint64_t s[8] kept its sums on the stack
 * (a store and a reload per 16 bytes) and read 14 GB/s where vector loads read 19-21 (Zen 3, 2026-11-27). */
typedef uint64_t bw_vec __attribute__((vector_size(16)));
static void bw_read(void *arg, int ith, int nth) {
    bw_job *j = arg;
    size_t per = j->n / (size_t)nth / 8 * 8, lo = per * (size_t)ith, hi = ith == nth - 1 ? j->n : lo + per;
    bw_vec s0 = { 0 }, s1 = { 0 }, s2 = { 0 }, s3 = { 0 };
    for (size_t i = lo; i + 8 <= hi; i += 8) {
        const bw_vec *v = (const bw_vec *)(j->buf + i);
        s0 += v[0], s1 += v[1], s2 += v[2], s3 += v[3];
    }
    const bw_vec s = s0 + s1 + s2 + s3;
    j->sums[ith & 63] = s[0] + s[1];
}

/* Best of a few multi-threaded streaming reads of a buffer >> LLC, in bytes/second; 0 on failure. The buffer is
 * in transparent huge pages where the kernel gives them, as the packed weights are (model/pack.c): read
 * through 4 KiB pages it measured less than what decode then streamed (a TLB miss per 4 KiB). */
static double read_bandwidth(int threads) {
    uint64_t *buf = NULL;
    if (posix_memalign((void **)&buf, (size_t)2 << 20, BW_BYTES)) buf = NULL;
#ifdef MADV_HUGEPAGE
    if (buf) madvise(buf, BW_BYTES, MADV_HUGEPAGE);
#endif
    ht_pool *pool = buf ? pool_new(threads) : NULL;
    double best = 0;
    if (pool) {
        memset(buf, 1, BW_BYTES);   /* fault every page in before timing */
        bw_job j = { .buf = buf, .n = BW_BYTES / sizeof *buf };
        for (int pass = 0; pass < BW_PASSES; pass++) {
            double t0 = now_ms();
            pool_run(pool, bw_read, &j);
            double bps = BW_BYTES / ((now_ms() - t0) / 1e3);
            if (bps > best) best = bps;
        }
        if (j.sums[0] == 42) fputc(' ', stderr);   /* keep the reads observable */
        pool_free(pool);
    }
    free(buf);
    return best;
}

/* The type of most of the layer matrices' elements: the one whose tiles prefill runs on. */
static uint32_t main_type(const hearth_model *m) {
    double elems[HT_NTYPES] = { 0 };
    uint32_t best = HT_F32;
    for (int i = 0; i < m->n_tensors; i++) {
        const ht_tensor *t = &m->tensors[i];
        if (strncmp(t->name, "blk.", 4) || t->n_dims < 2 || t->type >= HT_NTYPES) continue;
        elems[t->type] += (double)t->ne[0] * (double)t->ne[1] * (double)(t->n_dims > 2 ? t->ne[2] : 1);
        if (elems[t->type] > elems[best]) best = t->type;
    }
    return best;
}

typedef struct { uint32_t type; ht_mac_peak p[64]; } peak_job;

static void peak_share(void *arg, int ith, int nth) {
    (void)nth;
    peak_job *j = arg;
    j->p[ith & 63] = quant_mac_peak(j->type, PEAK_SECONDS);
}

/* Every thread's multiply-add peak for the type's instruction, measured at once, summed: multiply-adds a second
 * (past 64 threads, 64 are measured and their sum scaled). */
static ht_mac_peak mac_peak(uint32_t type, int threads) {
    peak_job j = { .type = type };
    ht_pool *pool = pool_new(HT_MIN(threads, 64));
    ht_mac_peak sum = { NULL, 0 };
    if (!pool) return sum;
    pool_run(pool, peak_share, &j);
    for (int i = 0; i < pool_size(pool); i++) sum.insn = j.p[i].insn, sum.macs += j.p[i].macs;
    sum.macs *= (double)threads / pool_size(pool);
    pool_free(pool);
    return sum;
}

/* Weight bytes one decoded token reads: everything but the embedding rows not looked up (a tied output
 * head reads the whole token embedding). */
static uint64_t bytes_per_token(const hearth_model *m, const hearth_model_info *in) {
    uint64_t b = in->active_bytes;   /* a mixture of experts reads only the chosen experts' slabs */
    if (m->output.data && m->tok_embd.data) b -= m->tok_embd.nbytes - m->tok_embd.row_bytes;
    if (m->pos_embd.data) b -= m->pos_embd.nbytes - m->pos_embd.row_bytes;
    if (m->ple_tok_embd.data) b -= m->ple_tok_embd.nbytes - m->ple_tok_embd.row_bytes;   /* Gemma 3n / 4: a row a token */
    return b;
}

/* ---- output ---- */

/* Table rows as llama-bench prints them (-o md), or CSV / a JSON array of objects on stdout; with csv and
 * json the other lines (load, memory, bandwidth) go to stderr, so stdout is the data alone. */
static int g_fmt, g_rows;
#define INFO(...) fprintf(g_fmt == OUT_MD ? stdout : stderr, __VA_ARGS__)

static void print_header(void) {
    if (g_fmt == OUT_CSV) printf("model,size_bytes,params,backend,threads,test,t_s,stddev\n");
    if (g_fmt == OUT_JSON) printf("[");
    if (g_fmt != OUT_MD) return;
    printf("| %-30s | %10s | %10s | %-10s | %7s | %13s | %20s |\n", "model", "size", "params", "backend", "threads", "test", "t/s");
    printf("| %s | %s: | %s: | %s | %s: | %s: | %s: |\n", "------------------------------", "---------",
           "---------", "----------", "------", "------------", "-------------------");
}

static void print_footer(void) {
    if (g_fmt == OUT_JSON) printf("\n]\n");
}

static void print_row(const char *desc, const hearth_model_info *in, int threads, const char *test, stat2 s) {
    char size[32], params[32], tps[48];
    if (g_fmt == OUT_CSV) {
        printf("\"%s\",%llu,%llu,%s,%d,%s,%.3f,%.3f\n", desc, (unsigned long long)in->weight_bytes,
               (unsigned long long)in->n_params, quant_backend(), threads, test, s.mean, s.sd);
        return;
    }
    if (g_fmt == OUT_JSON) {
        printf("%s\n  {\"model\": \"%s\", \"size_bytes\": %llu, \"params\": %llu, \"backend\": \"%s\", \"threads\": %d, "
               "\"test\": \"%s\", \"t_s\": %.3f, \"stddev\": %.3f}", g_rows++ ? "," : "", desc,
               (unsigned long long)in->weight_bytes, (unsigned long long)in->n_params, quant_backend(), threads, test,
               s.mean, s.sd);
        return;
    }
    if (in->weight_bytes >= (1ull << 30)) snprintf(size, sizeof size, "%.2f GiB", in->weight_bytes / (MIB * 1024));
    else snprintf(size, sizeof size, "%.2f MiB", in->weight_bytes / MIB);
    fmt_count(params, sizeof params, (double)in->n_params);
    snprintf(tps, sizeof tps, "%.2f ± %.2f", s.mean, s.sd);
    printf("| %-30s | %10s | %10s | %-10s | %7d | %13s | %20s |\n", desc, size, params, quant_backend(), threads, test, tps);
}

/* Resident memory against the budget: the mapped file (pages count only once touched), the KV cache and 64 MiB
 * for the rest. After the tests the scratch of a full n_batch micro-batch (~90 MiB for a 1B at 512) is in too. */
static void print_rss(const char *when, const hearth_model_info *in, const hearth_ctx *c, bool check) {
    double rss = rss_bytes() / MIB, file = in->file_bytes / MIB, kv = ctx_kv_bytes(c, -1) / MIB;
    double limit = file + kv + 64;
    INFO("rss %s: %.1f MiB (file %.1f MiB, KV K %s V %s %.1f MiB", when, rss, file, ht_get_traits(c->k_type)->name,
         ht_get_traits(c->v_type)->name, kv);
    if (check) INFO("; limit file + KV + 64 MiB = %.1f MiB: %s)\n", limit, rss <= limit ? "ok" : "EXCEEDED");
    else INFO("; with every weight page and the %d-token batch scratch touched)\n", c->n_batch);
}

/* ---- speculative decoding (--model-draft) ---- */

/* Greedy decoding of n tokens after toks[0..np) (toks has room for np + n), with speculation when d is not NULL:
 * ms the time taken, *draft_ms the part spent proposing. The tokens are left in toks. -1 with err. */
static double spec_greedy(hearth_ctx *c, spec_drafter *d, const spec_params *sp, hearth_token *toks, int np, int n,
                          spec_seq *ss, double *draft_ms, hearth_err *err) {
    static int8_t want_all[SPEC_MAX_DRAFT + 1];
    memset(want_all, 1, sizeof want_all);
    hearth_seq_truncate(c, 0, 0);
    spec_drafter_reset(d, 0);
    const int n_vocab = c->m->hp.n_vocab;
    double t0 = now_ms();
    hearth_batch b = { .n = np - 1, .tokens = toks };
    if (np > 1 && hearth_decode(c, &b, err)) return -1;
    int len = np, row = 0;
    *ss = (spec_seq){ 0 };
    *draft_ms = 0;
    for (int i = 0; i < n; i++) {
        if (!i || !spec_take(ss, toks[len - 1])) {
            double t1 = now_ms();
            if (spec_begin(ss, c, 0, d, sp, toks, len, hearth_ctx_n_ctx(c) - len, NULL, err)) return -1;
            *draft_ms += now_ms() - t1;
            hearth_batch v = { .n = ss->n, .tokens = ss->tok, .want_logits = want_all };
            if (hearth_decode(c, &v, err)) return -1;
        }
        row = ss->row;
        const float *l = hearth_logits(c, row);
        int best = 0;
        for (int t = 1; t < n_vocab; t++) if (l[t] > l[best]) best = t;
        toks[len++] = best;
    }
    return now_ms() - t0;
}

/* The cost of verifying k tokens in one batch relative to one decode step (k = 1..16, at depth 64), and greedy
 * decode of n tokens with and without the drafter, side by side. */
static int bench_spec(const bench_args *a, hearth_ctx *c, hearth_err *err) {
    hearth_model *dm;
    if (cli_model_load(a->draft_path, &dm, err)) return -1;
    spec_drafter *d = spec_drafter_new(c->m, dm, hearth_ctx_n_ctx(c), 1, (int)a->threads, err);
    if (!d) { hearth_model_free(dm); return -1; }
    int n = (int)HT_MAX(a->n_gen, 16), depth = 64, cap = depth + n + SPEC_MAX_DRAFT + 2;
    hearth_token *toks = malloc((size_t)cap * sizeof *toks), *plain = malloc((size_t)cap * sizeof *plain);
    int8_t want[16];
    memset(want, 1, sizeof want);
    int rc = toks && plain ? 0 : herr(err, "out of memory");
    uint64_t r = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < depth && !rc; i++) { r = r * 6364136223846793005ull + 1442695040888963407ull; toks[i] = (hearth_token)((r >> 33) % (uint64_t)c->m->hp.n_vocab); }
    hearth_seq_truncate(c, 0, 0);
    hearth_batch b = { .n = depth, .tokens = toks };
    if (!rc) rc = hearth_decode(c, &b, err);
    double t_k[2][17] = { { 0 } };   /* logits for every row (verification), for the last row only (a prompt) */
    for (int rep = -1; rep < (int)a->reps && !rc; rep++)
        for (int k = 1; k <= 16 && !rc; k++)
            for (int all = 0; all < 2 && !rc; all++) {
                hearth_batch v = { .n = k, .tokens = toks + 1, .want_logits = all ? want : NULL };
                double t0 = now_ms();
                rc = hearth_decode(c, &v, err);
                if (rep >= 0) t_k[all][k] += now_ms() - t0;
                hearth_seq_truncate(c, 0, depth);
            }
    for (int all = 1; all >= 0 && !rc; all--) {
        INFO("%s: k tokens in one batch / one decode step (depth %d):", all ? "verify" : "batch, last row's logits", depth);
        for (int k = 1; k <= 16; k++) INFO(" k%d %.2f", k, t_k[all][k] / t_k[0][1]);
        INFO("\n");
    }
    spec_params sp = spec_default_params();
    sp.n_max = (int)a->draft_max;
    spec_seq ss0, ss;
    double dms0, dms, ms0 = 0, ms = 0;
    bool same = true;
    for (int rep = 0; rep < (int)a->reps && !rc; rep++) {   /* alternated, so both see the same load */
        toks[0] = hearth_token_bos(c->m) >= 0 ? hearth_token_bos(c->m) : toks[0];
        double t = spec_greedy(c, NULL, NULL, toks, 1, n, &ss0, &dms0, err);
        memcpy(plain, toks, (size_t)(n + 1) * sizeof *toks);
        double u = t < 0 ? -1 : spec_greedy(c, d, &sp, toks, 1, n, &ss, &dms, err);
        if (t < 0 || u < 0) rc = -1;
        ms0 += t, ms += u;
        same = same && !memcmp(plain, toks, (size_t)(n + 1) * sizeof *toks);
    }
    if (!rc) {
        double per = ms / a->reps, per0 = ms0 / a->reps;
        INFO("speculative: greedy tg%d %.2f t/s vs %.2f t/s plain = %.2fx · accepted %ld/%ld drafted (%.0f%%), "
             "draft-max %d · drafter %.2f ms per drafted token (%.2f of a plain step) · tokens %s\n",
             n, n / (per / 1e3), n / (per0 / 1e3), per0 / per, ss.accepted, ss.drafted,
             ss.drafted ? 100.0 * ss.accepted / ss.drafted : 0.0, sp.n_max, ss.drafted ? dms / ss.drafted : 0.0,
             ss.drafted ? dms / ss.drafted / (per0 / n) : 0.0, same ? "identical" : "DIFFERENT");
        if (!same) rc = herr(err, "speculative decoding changed the greedy tokens");
    }
    free(toks);
    free(plain);
    spec_drafter_free(d);
    hearth_model_free(dm);
    return rc;
}

/* ---- the command ---- */

typedef struct { hearth_model *m; hearth_ctx *c; double ms; hearth_lora *a[HEARTH_MAX_LORA]; } loaded;

static void unload(loaded *l) {
    hearth_ctx_free(l->c);
    for (int i = 0; i < HEARTH_MAX_LORA; i++) hearth_lora_free(l->a[i]);
    hearth_model_free(l->m);
    memset(l, 0, sizeof *l);
}

static int load(const bench_args *a, loaded *l, hearth_err *err) {
    memset(l, 0, sizeof *l);
    double t0 = now_ms();
    if (cli_model_load(a->path, &l->m, err)) return -1;
    hearth_model_info in;
    hearth_model_get_info(l->m, &in);
    if (in.is_encoder) { hearth_model_free(l->m); return herr(err, "%s is an encoder: bench measures generation", a->path); }
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_threads = (int)a->threads;
    cp.n_ctx = (int)(a->n_ctx ? a->n_ctx : HT_MAX(2048, a->depth + a->n_prompt + a->n_gen));
    cp.n_batch = (int)HT_MAX(a->draft_path ? SPEC_MAX_DRAFT + 1 : 1, a->n_prompt);   /* verification batches whole */
    cp.n_batch = (int)HT_MAX(cp.n_batch, HT_MIN(a->depth, 512));                      /* and -d's fill (run_tests) */
    cp.cache_type = a->cache_type[0], cp.cache_type_k = a->cache_type[0], cp.cache_type_v = a->cache_type[1];
    for (int i = 0; i < a->lora.n; i++) {
        hearth_err e2;
        if (hearth_lora_load(l->m, a->lora.path[i], &l->a[i], &e2)) { herr(err, "%s", e2.msg); unload(l); return -1; }
    }
    size_t merged = 0;   /* --lora-merge: before the first context */
    if (a->lora.merge && !a->lora.n) { unload(l); return herr(err, "--lora-merge needs adapters (--lora FILE or --lora-scaled FILE:SCALE)"); }
    if (a->lora.merge && hearth_lora_merge(l->m, l->a, a->lora.scale, a->lora.n, a->threads > 0 ? (int)a->threads : (int)sysconf(_SC_NPROCESSORS_ONLN), &merged, err)) { unload(l); return -1; }
    if (a->lora.merge) fprintf(stderr, "lora: merged into the weights (%.1f MiB of merged matrices)\n", (double)merged / 1048576.0);
    if (hearth_ctx_new(l->m, &cp, &l->c, err)) { unload(l); return -1; }
    if (!a->lora.merge && hearth_ctx_set_lora(l->c, l->a, a->lora.scale, a->lora.n, err)) { unload(l); return -1; }
    l->ms = now_ms() - t0;
    return 0;
}

static int run_tests(const bench_args *a, loaded *l, const hearth_model_info *in, hearth_err *err, stat2 *tg, stat2 *pp,
                     long *pp_n) {
    /* -d fills the cache in batches of the prompt's size, or of up to 512 with -p 0 (one token at a time took
     * minutes at depth 16384; decode through the cache gives the batch's logits, so the fill's shape changes nothing) */
    int n = (int)HT_MAX(a->n_prompt, 1), fill = a->depth ? (int)HT_MAX(n, HT_MIN(a->depth, 512)) : n;
    hearth_token *toks = malloc((size_t)fill * sizeof *toks);
    if (!toks) return herr(err, "out of memory");
    uint64_t r = 0x853c49e6748fea9bull;
    for (int i = 0; i < fill; i++) { r = r * 6364136223846793005ull + 1442695040888963407ull; toks[i] = (hearth_token)((r >> 33) % (uint64_t)in->n_vocab); }
    hearth_token bos = hearth_token_bos(l->m);
    char desc[128], test[32];
    model_desc(l->m, in, desc, sizeof desc);
    int threads = pool_size(l->c->pool), rc = 0;
    stat2 s = { 0, 0 };
    /* -d: the cache filled once with depth tokens, then kept by each run */
    hearth_seq_truncate(l->c, 0, 0);
    for (int d = 0; d < a->depth && !rc; d += fill) {
        hearth_batch b = { .n = (int)HT_MIN(fill, a->depth - d), .tokens = toks };
        rc = hearth_decode(l->c, &b, err);
    }
    if (rc) { free(toks); return -1; }
    g_depth = (int)a->depth;
    char at[32] = "";
    if (a->depth) snprintf(at, sizeof at, " @ d%ld", a->depth);
    print_header();
    for (int k = 0; k < a->n_pp && !rc; k++)
        if (a->pp[k] > 0 && !(rc = measure(l->c, true, toks, (int)a->pp[k], (int)a->reps, &s, err))) {
            snprintf(test, sizeof test, "pp%ld%s", a->pp[k], at);
            print_row(desc, in, threads, test, s);
            *pp = s;
            *pp_n = a->pp[k];
        }
    toks[0] = bos >= 0 ? bos : toks[0];
    for (int k = 0; k < a->n_tg && !rc; k++)
        if (a->tg[k] > 0 && !(rc = measure(l->c, false, toks, (int)a->tg[k], (int)a->reps, tg, err))) {
            snprintf(test, sizeof test, "tg%ld%s", a->tg[k], at);
            print_row(desc, in, threads, test, *tg);
        }
    print_footer();
    fflush(stdout);
    free(toks);
    return rc;
}

/* Multiply-adds per prompt token: every layer matrix (a mixture of experts: the chosen experts' share of the
 * stacks) once, and attention's q·k and p·v over the positions before it (depth d, a prompt of n from there:
 * (d + (n + 1) / 2) on average); the head meets only the last token. */
static double prefill_flops_per_token(const hearth_model *m, long depth, long n) {
    const ht_hparams *hp = &m->hp;
    double macs = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const ht_tensor *t = &m->tensors[i];
        if (strncmp(t->name, "blk.", 4) || t->n_dims < 2) continue;
        double e = (double)t->ne[0] * (double)t->ne[1];
        if (t->n_dims > 2 && t->ne[2] > 1) e *= (double)hp->n_expert_used;
        macs += e;
    }
    const int heads = m->tp_size > 1 ? m->tp_n_head : hp->n_head;   /* (under --tp, rank 0's hp counts its own) */
    macs += (double)hp->n_layer * heads * (double)(hp->head_dim + hp->head_dim_v) * ((double)depth + (double)(n + 1) / 2);
    return 2 * macs;
}

/* bw: the best of the read bandwidths measured before and after the tests (the machine's other load comes
 * and goes). */
static void print_decode_limit(const hearth_model *m, const hearth_model_info *in, stat2 tg, int threads, double bw) {
    bw = HT_MAX(bw, read_bandwidth(threads));
    uint64_t bpt = bytes_per_token(m, in);
    if (bw <= 0 || !bpt) { INFO("decode: bandwidth not measured\n"); return; }
    double limit = bw / (double)bpt;
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    INFO("decode: %.2f t/s = %.1f%% of the %.2f t/s bandwidth limit (%.1f GB/s measured, %.1f MiB read per token%s)\n",
           tg.mean, 100.0 * tg.mean / limit, limit, bw / 1e9, bpt / MIB,
           llc > 0 && bpt < (uint64_t)llc ? "; the weights fit in the last-level cache, so DRAM does not bound it" : "");
}

int cmd_bench(int argc, char **argv) {
    bench_args a;
    int pr = parse_args(argc, argv, &a);
    if (pr <= 0) return pr < 0 ? 1 : 0;
    g_fmt = a.fmt;
    hearth_err err;
    loaded l;
    if (load(&a, &l, &err)) return cli_fail("%s: %s", a.path, err.msg);
    hearth_model_info in;
    hearth_model_get_info(l.m, &in);
    print_rss("after load", &in, l.c, true);   /* a fresh process: what loading costs */
    unload(&l);
    if (load(&a, &l, &err)) return cli_fail("%s: %s", a.path, err.msg);   /* timed warm: file in page cache */
    hearth_model_get_info(l.m, &in);
    stat2 tg = { 0, 0 }, pp = { 0, 0 };
    long pp_n = 0;
    int threads = pool_size(l.c->pool);
    double bw0 = a.bandwidth && a.n_gen > 0 ? read_bandwidth(threads) : 0;
    double cpu0 = cpu_seconds(), wall0 = now_ms();
    if (run_tests(&a, &l, &in, &err, &tg, &pp, &pp_n)) { unload(&l); return cli_fail("%s", err.msg); }
    double cpu_share = (cpu_seconds() - cpu0) / ((now_ms() - wall0) / 1e3 * threads);
    INFO("load: %.0f ms (model + context of %d tokens, file in page cache)\n", l.ms, hearth_ctx_n_ctx(l.c));
    INFO("cpu: the tests got %.0f%% of %d threads' wall time (less means other load on the machine)\n",
           100.0 * cpu_share, threads);
    if (l.c->serial_below > 1)
        INFO("cpu: passes of fewer than %d tokens ran on one thread (a model this small: waking the others costs more; -t N keeps N)\n",
             l.c->serial_below);
    print_rss("after bench", &in, l.c, false);
    if (pp_n) {
        const double flop = prefill_flops_per_token(l.m, a.depth, pp_n), gflops = pp.mean * flop / 1e9;
        INFO("prefill: %.2f t/s = %.1f GFLOP/s (pp%ld: %.2f GFLOP per token, every layer matrix and the attention)\n",
             pp.mean, gflops, pp_n, flop / 1e9);
        const ht_mac_peak pk = mac_peak(main_type(l.m), threads);
        if (pk.macs > 0)   /* a multiply-add is 2 operations, as in the GFLOP/s */
            INFO("prefill: %.0f%% of the %s peak of %d thread%s (%.0f GOP/s: the instruction alone on registers, %s)\n",
                 100.0 * gflops / (2 * pk.macs / 1e9), pk.insn, threads, threads == 1 ? "" : "s", 2 * pk.macs / 1e9,
                 quant_backend());
    }
    if (a.draft_path && bench_spec(&a, l.c, &err)) { unload(&l); return cli_fail("%s: %s", a.draft_path, err.msg); }
    hearth_ctx_free(l.c);
    l.c = NULL;
    if (a.bandwidth && a.n_gen > 0) print_decode_limit(l.m, &in, tg, threads, bw0);
    unload(&l);
    cli_lora_free(&a.lora);
    return 0;
}
