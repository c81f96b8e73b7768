/* test_kv_cache.c — the KV cache types. A Q8_0 (and the default F16) cache gives bit-identical logits in one
 * batch, token by token, in micro-batches of 7 (through Gemma 3's and gpt-oss's ring caches, well past their
 * 8-token windows) and with 1 or 2 threads (the mixture-of-experts fixtures and gpt-oss's attention sinks too);
 * a Q8_0 cache stays close to the reference's F32-cache goldens: its mean KL is at most a quarter of what the
 * reference loses on the Q8_0-quantized weights (measured: llama 8.4e-6 vs 1.4e-4, gemma3 7.7e-5 vs 5.4e-4),
 * the argmax agrees at >= 97% of positions; it takes 34/32 bytes per cached value; a model whose head size is not
 * a multiple of 32 is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/context.h"
#include "golden_check.h"
#include "testutil.h"

enum { N_TOK = 100, N_CTX = 128 };

static hearth_ctx *new_ctx(hearth_model *m, hearth_cache_type ct, int n_batch, int threads) {
    hearth_err err;
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = N_CTX;
    cp.n_batch = n_batch;
    cp.n_threads = threads;
    cp.cache_type = ct;
    hearth_ctx *c;
    REQUIRE(!hearth_ctx_new(m, &cp, &c, &err), "ctx: %s", err.msg);
    return c;
}

/* Logits of every position of t[0..n) (n * n_vocab floats into out), in one hearth_decode call (cut into
 * micro-batches of n_batch) or one token per call. Returns whether some layer's cache is a ring. */
static bool eval(hearth_model *m, hearth_cache_type ct, int n_batch, int threads, bool by_token, const hearth_token *t,
                 int n, int n_vocab, float *out) {
    hearth_ctx *c = new_ctx(m, ct, n_batch, threads);
    hearth_err err;
    int8_t want[N_TOK];
    memset(want, 1, sizeof want);
    for (int i0 = 0, step = by_token ? 1 : n; i0 < n; i0 += step) {
        hearth_batch b = { .n = step, .tokens = t + i0, .want_logits = want };
        REQUIRE(!hearth_decode(c, &b, &err), "decode: %s", err.msg);
        for (int i = 0; i < step; i++) memcpy(out + (size_t)(i0 + i) * n_vocab, hearth_logits(c, i), (size_t)n_vocab * sizeof(float));
    }
    bool ring = false;
    for (int il = 0; il < m->hp.n_layer; il++) ring |= c->kv[il].ring;
    hearth_ctx_free(c);
    return ring;
}

/* Positions whose logits differ in any bit. */
static int rows_differ(const float *a, const float *b, int n, int n_vocab) {
    int bad = 0;
    for (int i = 0; i < n; i++) bad += memcmp(a + (size_t)i * n_vocab, b + (size_t)i * n_vocab, (size_t)n_vocab * sizeof(float)) != 0;
    return bad;
}

/* One batch == token by token == micro-batches of 7, with 2 threads and with 1, bit for bit. */
static void test_exact(const char *name, hearth_cache_type ct, bool want_ring) {
    hearth_model *m = tu_load_model(name);
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    const char *tn = ct == HEARTH_CACHE_Q8_0 ? "q8_0" : "f16";
    int V = info.n_vocab;
    hearth_token t[N_TOK];
    uint32_t s = 2024;
    for (int i = 0; i < N_TOK; i++) { s = s * 1664525u + 1013904223u; t[i] = (hearth_token)((s >> 8) % (uint32_t)V); }
    float *ref = malloc((size_t)N_TOK * V * sizeof(float)), *got = malloc((size_t)N_TOK * V * sizeof(float));
    REQUIRE(ref && got, "out of memory");
    eval(m, ct, 512, 2, false, t, N_TOK, V, ref);
    static const struct { int n_batch, threads; bool by_token; const char *what; } RUNS[] = {
        { 512, 2, true, "token by token" }, { 7, 2, false, "micro-batches of 7" }, { 7, 2, true, "token by token, n_batch 7" },
        { 512, 1, false, "one batch, 1 thread" }, { 7, 1, false, "micro-batches of 7, 1 thread" },
    };
    for (size_t r = 0; r < sizeof RUNS / sizeof RUNS[0]; r++) {
        bool ring = eval(m, ct, RUNS[r].n_batch, RUNS[r].threads, RUNS[r].by_token, t, N_TOK, V, got);
        if (want_ring && RUNS[r].n_batch == 7) CHECK(ring, "%s: n_batch 7 should give the sliding layers ring caches", name);
        int bad = rows_differ(got, ref, N_TOK, V);
        CHECK(bad == 0, "%s (%s cache): %s differs from one batch at %d of %d positions", name, tn, RUNS[r].what, bad, N_TOK);
    }
    printf("%-8s %s cache: %d positions bit-identical in one batch, token by token, micro-batches of 7, 1 and 2 threads%s\n",
           name, tn, N_TOK, want_ring ? " (ring caches wrapped)" : "");
    free(ref);
    free(got);
    hearth_model_free(m);
}

/* Mean KL(reference F32-cache logits || ours) and argmax agreement with each cache type; the Q8_0 cache's KL
 * against a quarter of KL(reference || reference on the model's Q8_0-quantized weights). */
static void test_accuracy(const char *name) {
    char path[256];
    hearth_err err;
    golden_file ref, ref_q8;
    snprintf(path, sizeof path, "data/golden/%s.golden", name);
    REQUIRE(!golden_read(path, &ref, &err), "%s", err.msg);
    snprintf(path, sizeof path, "data/golden/%s-Q8_0.golden", name);
    REQUIRE(!golden_read(path, &ref_q8, &err), "%s", err.msg);
    double max_kl = 0.25 * gc_mean_kl(&ref, &ref_q8);
    hearth_model *m = tu_load_model(name);
    static const hearth_cache_type TYPES[3] = { HEARTH_CACHE_F32, HEARTH_CACHE_F16, HEARTH_CACHE_Q8_0 };
    static const char *const NAMES[3] = { "f32", "f16", "q8_0" };
    double kl[3];
    for (int ti = 0; ti < 3; ti++) {
        golden_file ours = { 0 };
        gc_eval_file(m, &ref, false, TYPES[ti], 0, &ours);
        int agree = 0, total = 0;
        double worst = gc_worst_rel(&ours, &ref, &agree, &total);
        kl[ti] = gc_mean_kl(&ref, &ours);
        printf("%-8s %-4s cache vs reference: mean KL %.3e, argmax %d/%d, max rel diff %.2e\n", name, NAMES[ti], kl[ti],
               agree, total, worst);
        if (TYPES[ti] == HEARTH_CACHE_Q8_0) {
            printf("%-8s q8_0 cache: bar %.3e (a quarter of the reference's KL on Q8_0 weights)\n", name, max_kl);
            CHECK(kl[ti] <= max_kl, "%s: q8_0 cache mean KL %.3g > %.3g", name, kl[ti], max_kl);
            CHECK(agree >= 0.97 * total, "%s: q8_0 cache argmax agrees at %d/%d", name, agree, total);
        }
        golden_free(&ours);
    }
    CHECK(kl[2] > kl[0], "%s: q8_0 cache KL %.3g not above f32's %.3g: is it quantizing at all?", name, kl[2], kl[0]);
    golden_free(&ref);
    golden_free(&ref_q8);
    hearth_model_free(m);
}

/* Latent attention over a Q8_0 cache (deepseek2-r48: the deepseek2 fixture cut to a latent of 48, so a cache row
 * of 48 + 16 values is two whole blocks; the reference has no golden for it): 68 bytes a token and layer, 17/32 of
 * F16's; next to the F32 cache's logits a mean KL of at most 2e-4 (measured 5.7e-5; MoE routing amplifies what
 * the rows lose), argmax >= 97%, and above 0. */
static void test_mla_q8(void) {
    hearth_model *m = tu_load_model("deepseek2-r48");
    const ht_hparams *hp = &m->hp;
    REQUIRE(hp->kv_lora_rank == 48 && hp->head_dim == 64, "deepseek2-r48: latent %d, row %d", hp->kv_lora_rank, hp->head_dim);
    hearth_ctx *q8 = new_ctx(m, HEARTH_CACHE_Q8_0, 16, 1), *f16 = new_ctx(m, HEARTH_CACHE_F16, 16, 1);
    CHECK(hearth_kv_token_bytes(q8) == (size_t)hp->n_layer * 2 * sizeof(block_q8_0) &&
              ctx_kv_bytes(q8, -1) * 32 == ctx_kv_bytes(f16, -1) * 17,
          "deepseek2-r48: q8_0 cache %zu bytes a token, %zu in all (f16 %zu)", hearth_kv_token_bytes(q8), ctx_kv_bytes(q8, -1),
          ctx_kv_bytes(f16, -1));
    hearth_ctx_free(q8);
    hearth_ctx_free(f16);
    const int V = hp->n_vocab;
    hearth_token t[N_TOK];
    uint32_t s = 77;
    for (int i = 0; i < N_TOK; i++) { s = s * 1664525u + 1013904223u; t[i] = (hearth_token)((s >> 8) % (uint32_t)V); }
    float *a = malloc((size_t)N_TOK * V * sizeof(float)), *b = malloc((size_t)N_TOK * V * sizeof(float));
    REQUIRE(a && b, "out of memory");
    eval(m, HEARTH_CACHE_F32, 512, 2, false, t, N_TOK, V, a);
    eval(m, HEARTH_CACHE_Q8_0, 512, 2, false, t, N_TOK, V, b);
    double kl = 0;
    int agree = 0;
    for (int i = 0; i < N_TOK; i++) {
        const float *x = a + (size_t)i * V, *y = b + (size_t)i * V;
        kl += gc_kl_row(x, y, V) / N_TOK;
        int ax = 0, ay = 0;
        for (int k = 1; k < V; k++) ax = x[k] > x[ax] ? k : ax, ay = y[k] > y[ay] ? k : ay;
        agree += ax == ay;
    }
    printf("deepseek2-r48 q8_0 latent cache vs f32: mean KL %.2e, argmax %d/%d\n", kl, agree, N_TOK);
    CHECK(kl > 0 && kl <= 2e-4, "deepseek2-r48: q8_0 latent cache mean KL %.3g (bar 2e-4, and above 0)", kl);
    CHECK(agree >= 0.97 * N_TOK, "deepseek2-r48: q8_0 latent cache argmax agrees at %d/%d", agree, N_TOK);
    free(a);
    free(b);
    hearth_model_free(m);
}

/* 34 bytes per 32 cached values (K and V), about 53% of F16. */
static void test_memory(void) {
    hearth_model *m = tu_load_model("gemma3");
    const ht_hparams *hp = &m->hp;
    hearth_ctx *q8 = new_ctx(m, HEARTH_CACHE_Q8_0, 16, 1), *f16 = new_ctx(m, HEARTH_CACHE_F16, 16, 1);
    size_t row = (size_t)hp->n_head_kv * (hp->head_dim + hp->head_dim_v) / QK8_0 * sizeof(block_q8_0);
    for (int il = 0; il < hp->n_layer; il++) {
        size_t want = (size_t)q8->kv[il].cap * row;
        CHECK(ctx_kv_bytes(q8, il) == want, "layer %d: q8_0 cache %zu bytes, expected %zu", il, ctx_kv_bytes(q8, il), want);
        CHECK(q8->kv[il].cap == f16->kv[il].cap, "layer %d: cache sizes differ with the type", il);
    }
    size_t a = ctx_kv_bytes(q8, -1), b = ctx_kv_bytes(f16, -1);
    CHECK(a * 32 == b * 17, "q8_0 cache %zu bytes, f16 %zu: expected 17/32 of it", a, b);
    printf("gemma3 KV cache at n_ctx %d: f16 %zu bytes, q8_0 %zu bytes\n", N_CTX, b, a);
    hearth_ctx_free(q8);
    hearth_ctx_free(f16);
    hearth_model_free(m);
}

/* Bytes of [p, p + n) that are resident, by mincore over the pages it spans. */
static size_t resident_range(const void *p, size_t n) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = (uintptr_t)p / pg * pg, end = ((uintptr_t)p + n + pg - 1) / pg * pg;
    const size_t pages = (end - a) / pg;
    unsigned char *vec = malloc(pages);
    REQUIRE(vec && mincore((void *)a, end - a, vec) == 0, "mincore over %zu pages", pages);
    size_t res = 0;
    for (size_t i = 0; i < pages; i++) res += (vec[i] & 1) * pg;
    free(vec);
    return res;
}

/* Resident bytes of the context's KV buffers themselves (K and V of every layer). */
static size_t kv_resident(const hearth_ctx *c) {
    const ht_hparams *hp = &c->m->hp;
    size_t res = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const ht_kv_layer *L = &c->kv[il];
        const size_t slots = (size_t)c->n_seq * L->cap * hp->n_head_kv;
        res += resident_range(L->k, slots * ht_row_size(c->k_type, hp->head_dim));
        res += resident_range(L->v, slots * ht_row_size(c->v_type, hp->head_dim_v));
    }
    return res;
}

/* Anonymous memory the process holds (RssAnon: heap and private mappings, not the model file's pages). */
static long anon_resident(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

/* A cache costs memory only where positions are stored, even after a large block was freed (glibc then
 * serves blocks of up to that size from its heap and zeroes them by hand): a 16384- and a 131072-position
 * context with 8 decoded tokens leave their KV buffers untouched but for the pages those positions are in
 * (mincore over the buffers themselves: the process's RSS also grows by the model file's pages the first
 * decode reads, ~5 MB here, and by the scratch sized by the micro-batch, ~2 MB). The scratch sized by the
 * context (attention scores, per-row bookkeeping) is paid for as it is used too, and the 131072-position
 * context's anonymous memory grows by less than a 16th of its KV bytes. */
static void test_lazy(void) {
    if (anon_resident() < 0) { printf("no RssAnon in /proc/self/status: the lazy cache is not checked\n"); return; }
    hearth_model *m = tu_load_model("llama");
    hearth_ctx_free(new_ctx(m, HEARTH_CACHE_F16, 16, 1));   /* the weights packed before the count */
    /* glibc's mmap threshold rises to a freed mapped block's size (up to 32 MiB); the next block below it comes
     * from the heap, which keeps it when freed: blocks carved from there are zeroed by hand */
    for (size_t mib = 30; mib >= 20; mib -= 10) {
        char *p = malloc(mib << 20);
        REQUIRE(p, "malloc");
        memset(p, 1, mib << 20);
        free(p);
    }
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    for (int n_ctx = 16384; n_ctx <= 131072; n_ctx *= 8) {
        hearth_ctx_params cp = hearth_ctx_default_params();
        cp.n_ctx = n_ctx;
        cp.n_threads = 1;
        hearth_ctx *c;
        hearth_err err;
        const long r0 = anon_resident();
        REQUIRE(!hearth_ctx_new(m, &cp, &c, &err), "ctx: %s", err.msg);
        hearth_token t[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
        for (int j = 0; j < 8; j++)
            REQUIRE(!hearth_decode(c, &(hearth_batch){ .n = 1, .tokens = &t[j] }, &err), "decode: %s", err.msg);
        const long grown = anon_resident() - r0;
        const size_t kv = ctx_kv_bytes(c, -1), res = kv_resident(c);
        /* 8 positions: a 64-slot K block and the first V rows per head and layer, a few pages each */
        const size_t bound = (size_t)m->hp.n_layer * m->hp.n_head_kv * 2 * 4 * pg;
        CHECK(res <= bound, "n_ctx %d: %zu of the %zu KV bytes resident after 8 tokens (at most %zu expected)", n_ctx,
              res, kv, bound);
        const struct { const char *name; const void *p; size_t n; } scratch[] = {
            { "attention scores", c->att_scores, c->att_stride * sizeof(float) },
            { "row outputs", c->row_out, (size_t)c->max_rows * sizeof(int) },
            { "row positions", c->b_pos, (size_t)c->max_rows * sizeof(int32_t) },
            { "row sequences", c->b_seq, (size_t)c->max_rows * sizeof(int32_t) },
        };
        for (size_t i = 0; i < sizeof scratch / sizeof scratch[0]; i++) {
            const size_t r = resident_range(scratch[i].p, scratch[i].n);
            CHECK(r <= 16 * pg, "n_ctx %d: %zu of the %zu bytes of %s resident after 8 tokens", n_ctx, r, scratch[i].n,
                  scratch[i].name);
        }
        if (n_ctx > 16384)   /* (at 16384, ASan's own allocations are near a 16th of the cache: 0.9 MB) */
            CHECK(grown >= 0 && (size_t)grown < kv / 16, "n_ctx %d: the context took %ld bytes of anonymous memory (KV %zu)",
                  n_ctx, grown, kv);
        printf("llama at n_ctx %d: KV cache %zu bytes, %zu of them resident after 8 tokens; anonymous memory +%ld\n",
               n_ctx, kv, res, grown);
        hearth_ctx_free(c);
    }
    hearth_model_free(m);
}

/* stories260K's heads are 8 wide: no whole Q8_0 block per head. */
static void test_reject(void) {
    hearth_model *m = tu_load_model("stories260K");
    REQUIRE(m->hp.head_dim % QK8_0 != 0, "stories260K's head size is %d", m->hp.head_dim);
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.cache_type = HEARTH_CACHE_Q8_0;
    hearth_ctx *c = NULL;
    hearth_err err = { 0 };
    CHECK(hearth_ctx_new(m, &cp, &c, &err) != 0 && !c, "a Q8_0 cache with heads of %d was accepted", m->hp.head_dim);
    CHECK(strstr(err.msg, "multiples of 32") && !strchr(err.msg, '\n'), "message: '%s'", err.msg);
    cp.cache_type = (hearth_cache_type)3;
    CHECK(hearth_ctx_new(m, &cp, &c, &err) != 0 && strstr(err.msg, "unsupported K cache type"), "cache type 3: '%s'", err.msg);
    hearth_model_free(m);
}

int main(void) {
    test_exact("llama", HEARTH_CACHE_Q8_0, false);
    test_exact("llama3", HEARTH_CACHE_Q8_0, false);   /* one kv head: its 4 q heads split between the threads */
    test_exact("gemma3", HEARTH_CACHE_Q8_0, true);
    test_exact("llama", HEARTH_CACHE_F16, false);
    test_exact("gemma3", HEARTH_CACHE_F16, true);
    test_exact("qwen3moe-Q8_0", HEARTH_CACHE_F16, false);   /* experts: their rows regrouped by every batch */
    test_exact("mixtral-Q4_K_M", HEARTH_CACHE_F16, false);
    test_exact("deepseek2", HEARTH_CACHE_F16, false);   /* latent attention: its own cache rows and kernel */
    test_exact("deepseek2-v3", HEARTH_CACHE_F16, false);   /* + sigmoid routing over expert groups */
    test_exact("deepseek2-r48", HEARTH_CACHE_Q8_0, false);   /* latent rows of whole Q8_0 blocks */
    test_exact("gpt-oss", HEARTH_CACHE_Q8_0, true);   /* attention sinks, in rings, alternate layers */
    test_exact("gpt-oss", HEARTH_CACHE_F16, true);
    test_exact("gpt-oss-MXFP4", HEARTH_CACHE_F16, true);   /* MXFP4 experts with biases */
    test_accuracy("llama");
    test_accuracy("gemma3");   /* (qwen3's random logits are nearly flat: KL ~1e-14 whatever the cache) */
    test_memory();
    test_mla_q8();
    test_lazy();
    test_reject();
    TEST_DONE();
}
