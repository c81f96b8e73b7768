/* bench_prompt_cache.c — the shared prompt cache's lookup cost: fills the store with N_BLOCKS blocks of the
 * stories260K model (distinct prefixes of 16 blocks each), then times pcache_restore for a 1900-token prompt
 * whose prefix is held (30 blocks: lookups and KV copies) and for one that is not (one lookup per block until the
 * first miss). Usage: bench_prompt_cache [MODEL.gguf] [N_BLOCKS=10000] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "hearth.h"
#include "server/srv_internal.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : HEARTH_SOURCE_DIR "/models/stories260K.gguf";
    int n_blocks = argc > 2 ? atoi(argv[2]) : 10000;
    hearth_err err;
    hearth_model *m;
    if (hearth_model_load(path, &m, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    hearth_ctx_params p = hearth_ctx_default_params();
    p.n_ctx = 2048, p.n_threads = 1;
    hearth_ctx *c;
    if (hearth_ctx_new(m, &p, &c, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    srv_cache *pc = pcache_new(c, (size_t)8 << 30, NULL, &err);
    if (!pc) { fprintf(stderr, "no cache: %s\n", err.msg); return 1; }
    enum { SEQ = 1024, PROMPT = 1900 };
    hearth_token t[PROMPT];
    unsigned x = 1;
    double t0 = now();
    for (int filled = 0, s = 0; filled < n_blocks; s++) {   /* a sequence of 16 blocks with its own first token */
        for (int i = 0; i < SEQ; i++) x = x * 1103515245u + 12345u, t[i] = (hearth_token)((x >> 8) % (unsigned)info.n_vocab);
        t[0] = (hearth_token)(s % info.n_vocab), t[1] = (hearth_token)(s / info.n_vocab);
        hearth_seq_truncate(c, 0, 0);
        hearth_batch b = { .n = SEQ, .tokens = t };
        if (hearth_decode(c, &b, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        pcache_store(pc, c, 0, t, SEQ, 0);
        filled += SEQ / 64;
    }
    long long h, mi, tok, entries;
    pcache_stats(pc, &h, &mi, &tok, &entries);
    printf("filled %lld blocks in %.1f s\n", entries, (now() - t0) / 1e3);
    /* a held prompt: the last sequence stored, extended to PROMPT tokens */
    hearth_seq_truncate(c, 0, 0);
    hearth_batch b = { .n = PROMPT, .tokens = t };
    for (int i = SEQ; i < PROMPT; i++) t[i] = (hearth_token)(i % info.n_vocab);
    if (hearth_decode(c, &b, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    pcache_store(pc, c, 0, t, PROMPT, 0);
    int reps = 200;
    double hit = 0, miss = 0;
    int got = 0;
    for (int r = 0; r < reps; r++) {
        hearth_seq_truncate(c, 0, 0);
        double a = now();
        got = pcache_restore(pc, c, 0, t, PROMPT, 0, 0);
        hit += now() - a;
    }
    hearth_token u[PROMPT];
    for (int i = 0; i < PROMPT; i++) u[i] = t[i];
    u[0] = (hearth_token)(info.n_vocab - 1), u[1] = (hearth_token)(info.n_vocab - 1);   /* a prefix never stored */
    for (int r = 0; r < reps; r++) {
        hearth_seq_truncate(c, 0, 0);
        double a = now();
        pcache_restore(pc, c, 0, u, PROMPT, 0, 0);
        miss += now() - a;
    }
    printf("%lld blocks held, %zu bytes of KV per token: a %d-token prompt held -> %d tokens restored in %.3f ms "
           "(lookups + KV copy); not held -> %.4f ms\n", entries, hearth_kv_token_bytes(c), PROMPT, got, hit / reps, miss / reps);
    pcache_free(pc);
    hearth_ctx_free(c);
    hearth_model_free(m);
    return 0;
}
