/* bench_tokenizer.c — tokenizer speed: vocabulary load time and tokenize time for ~1 MB of English text.
 *
 * Usage: bench_tokenizer [vocab.gguf | tokenizer.json] [text-file] [megabytes]
 * Defaults: tests/data/tokenizer/ggml-vocab-llama-bpe.gguf, tests/data/text/stories-sampled.txt, 1.
 * The text is grown to the target size by appending its lines in a seeded shuffled order (so the BPE
 * cache sees realistic repetition, not one paragraph again and again). Load and tokenize are each run
 * several times; the best and median wall times are printed. A second measurement tokenizes a copy whose
 * letters are randomly altered (one in three), so nearly every word is new: the cost without the cache.
 * Besides wall time, the best process CPU time is shown: on a machine shared with other jobs it is the
 * steadier figure. */
#define _GNU_SOURCE
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef HEARTH_SOURCE_DIR
#define HEARTH_SOURCE_DIR "."
#endif

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* CPU time of this process: less disturbed than wall time when other jobs share the cores. */
static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static int load(const char *path, ht_vocab **v, hearth_err *err) {
    if (ends_with(path, ".json")) return vocab_from_tokenizer_json(path, v, err);
    gguf_file *f;
    if (gguf_open(path, &f, err)) return -1;
    int rc = vocab_from_gguf(f, v, err);
    gguf_close(f);
    return rc;
}

int main(int argc, char **argv) {
    const char *vocab_path = argc > 1 ? argv[1] : HEARTH_SOURCE_DIR "/tests/data/tokenizer/ggml-vocab-llama-bpe.gguf";
    const char *text_path = argc > 2 ? argv[2] : HEARTH_SOURCE_DIR "/tests/data/text/stories-sampled.txt";
    double mb = argc > 3 ? atof(argv[3]) : 1.0;
    size_t target = (size_t)(mb * 1024 * 1024);

    size_t src_len;
    hearth_err err;
    char *src = ht_read_file(text_path, &src_len, &err);
    if (!src || !src_len) { fprintf(stderr, "error: %s\n", src ? "empty text" : err.msg); return 1; }
    /* split into lines, then append them in shuffled order until the target size */
    size_t n_lines = 0, cap_lines = 1024;
    char **lines = malloc(cap_lines * sizeof *lines);
    for (char *p = src; *p;) {
        char *nl = strchr(p, '\n');
        if (n_lines == cap_lines) lines = realloc(lines, (cap_lines *= 2) * sizeof *lines);
        lines[n_lines++] = p;
        if (!nl) break;
        *nl = 0;
        p = nl + 1;
    }
    char *text = malloc(target + 4096);
    size_t len = 0;
    uint64_t rng = 42;
    while (len < target) {
        for (size_t i = n_lines; i > 1; i--) {   /* Fisher-Yates with xorshift */
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            size_t j = rng % i;
            char *t = lines[i - 1]; lines[i - 1] = lines[j]; lines[j] = t;
        }
        for (size_t i = 0; i < n_lines && len < target; i++) {
            size_t l = strlen(lines[i]);
            if (len + l + 1 > target + 4096) break;
            memcpy(text + len, lines[i], l);
            len += l;
            text[len++] = '\n';
        }
    }

    char *scrambled = malloc(len + 1);
    memcpy(scrambled, text, len);
    for (size_t i = 0; i < len; i++) {
        char c = scrambled[i];
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        if (((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) && rng % 3 == 0) scrambled[i] = (char)('a' + (rng >> 8) % 26);
    }

    enum { RUNS = 5 };
    double tl[RUNS], tt[RUNS], ts[RUNS], cl = 1e30, ct = 1e30, cs = 1e30;
    ht_vocab *v = NULL;
    for (int r = 0; r < RUNS; r++) {
        double t0 = now_ms(), c0 = cpu_ms();
        if (load(vocab_path, &v, &err)) { fprintf(stderr, "error: %s\n", err.msg); return 1; }
        tl[r] = now_ms() - t0;
        if (cpu_ms() - c0 < cl) cl = cpu_ms() - c0;
        if (r < RUNS - 1) vocab_free(v);
    }
    int n_tok = 0, n_scr = 0;
    for (int r = 0; r < RUNS; r++) {
        int32_t *ids;
        double t0 = now_ms(), c0 = cpu_ms();
        if (tok_encode(v, text, len, true, false, &ids, &n_tok, &err)) { fprintf(stderr, "error: %s\n", err.msg); return 1; }
        tt[r] = now_ms() - t0;
        if (cpu_ms() - c0 < ct) ct = cpu_ms() - c0;
        free(ids);
        t0 = now_ms(); c0 = cpu_ms();
        if (tok_encode(v, scrambled, len, true, false, &ids, &n_scr, &err)) { fprintf(stderr, "error: %s\n", err.msg); return 1; }
        ts[r] = now_ms() - t0;
        if (cpu_ms() - c0 < cs) cs = cpu_ms() - c0;
        free(ids);
    }
    qsort(tl, RUNS, sizeof(double), cmp_double);
    qsort(tt, RUNS, sizeof(double), cmp_double);
    qsort(ts, RUNS, sizeof(double), cmp_double);
    printf("vocab      %s (%d tokens)\n", vocab_path, vocab_size(v));
    printf("text       %.2f MB -> %d tokens\n", len / 1048576.0, n_tok);
    printf("load       best %.1f ms, median %.1f ms wall; best %.1f ms CPU\n", tl[0], tl[RUNS / 2], cl);
    printf("tokenize   best %.1f ms, median %.1f ms wall; best %.1f ms CPU (%.1f MB/s)\n", tt[0], tt[RUNS / 2], ct,
           len / 1048576.0 / (tt[0] / 1e3));
    printf("scrambled  best %.1f ms, median %.1f ms wall; best %.1f ms CPU (%.1f MB/s, %d tokens: nearly every word new)\n",
           ts[0], ts[RUNS / 2], cs, len / 1048576.0 / (ts[0] / 1e3), n_scr);
    vocab_free(v);
    free(text); free(scrambled); free(lines); free(src);
    return 0;
}
