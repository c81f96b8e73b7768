/* test_kv_restore.c — hearth_kv_read / hearth_kv_write (the server's prompt cache stores prefixes with them): a
 * prefix read from one sequence and written into another continues bit for bit like the sequence that computed
 * it, for F16, F32 and Q8_0 caches, K and V of different types and layouts, and the latent rows of DeepSeek's attention; bad arguments and sliding-window models are refused. */
#include <string.h>

#include "hearth.h"
#include "testutil.h"

static void restore_kv(const char *name, hearth_cache_type type, hearth_cache_type tk, hearth_cache_type tv) {
    hearth_model *m = tu_load_model(name);
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    hearth_ctx_params p = hearth_ctx_default_params();
    p.n_ctx = 128, p.n_seq = 2, p.n_threads = 2, p.cache_type = type, p.cache_type_k = tk, p.cache_type_v = tv;
    hearth_ctx *c;
    hearth_err err;
    REQUIRE(!hearth_ctx_new(m, &p, &c, &err), "%s: %s", name, err.msg);
    enum { N = 40, K = 32 };
    hearth_token t[N];
    for (int i = 0; i < N; i++) t[i] = (hearth_token)((i * 37 + 11) % info.n_vocab);
    hearth_batch b = { .n = N, .tokens = t };   /* sequence 0: all at once */
    REQUIRE(!hearth_decode(c, &b, &err), "%s", err.msg);
    float *want = malloc((size_t)info.n_vocab * sizeof *want);
    memcpy(want, hearth_logits(c, N - 1), (size_t)info.n_vocab * sizeof *want);
    size_t tb = hearth_kv_token_bytes(c);
    uint8_t *buf = malloc(tb * K);
    CHECK(!hearth_kv_read(c, 0, 0, K, buf), "%s: read", name);
    CHECK(hearth_kv_read(c, 0, 0, N + 1, buf) < 0, "%s: reading past the cached positions is refused", name);
    CHECK(hearth_kv_write(c, 1, 5, K, buf) < 0, "%s: writing where the sequence does not end is refused", name);
    CHECK(!hearth_kv_write(c, 1, 0, K, buf) && hearth_seq_len(c, 1) == K, "%s: write", name);
    int32_t seq1[N - K], pos[N - K];
    for (int i = 0; i < N - K; i++) seq1[i] = 1, pos[i] = K + i;
    hearth_batch rest = { .n = N - K, .tokens = t + K, .seq = seq1, .pos = pos };
    REQUIRE(!hearth_decode(c, &rest, &err), "%s", err.msg);
    CHECK(!memcmp(want, hearth_logits(c, N - K - 1), (size_t)info.n_vocab * sizeof *want),
          "%s (cache types %d, K %d, V %d): restored prefix + 8 tokens gives different logits", name, type, tk, tv);
    free(buf);
    free(want);
    hearth_ctx_free(c);
    hearth_model_free(m);
}

static void restore(const char *name, hearth_cache_type type) {
    restore_kv(name, type, HEARTH_CACHE_AS_BOTH, HEARTH_CACHE_AS_BOTH);
}

int main(void) {
    restore("llama", HEARTH_CACHE_F16);
    restore_kv("llama", HEARTH_CACHE_F16, HEARTH_CACHE_F16, HEARTH_CACHE_Q4_0);   /* K transposed, V rows */
    restore_kv("llama", HEARTH_CACHE_F16, HEARTH_CACHE_BF16, HEARTH_CACHE_F32);   /* K rows, V transposed */
    restore("llama-Q4_0", HEARTH_CACHE_F32);
    restore("qwen3-Q8_0", HEARTH_CACHE_Q8_0);
    restore("qwen3moe-Q8_0", HEARTH_CACHE_F16);
    restore("deepseek2", HEARTH_CACHE_F16);   /* latent attention: one row per token and layer */
    restore("deepseek2-v3", HEARTH_CACHE_F32);
    hearth_model *g = tu_load_model("gemma3");   /* sliding-window layers: rings cannot be restored */
    hearth_ctx_params p = hearth_ctx_default_params();
    p.n_ctx = 4096, p.n_threads = 1;
    hearth_ctx *c;
    hearth_err err;
    REQUIRE(!hearth_ctx_new(g, &p, &c, &err), "%s", err.msg);
    char buf[16];
    CHECK(hearth_kv_write(c, 0, 0, 0, buf) < 0, "gemma3: a ring cache is refused");
    hearth_ctx_free(c);
    hearth_model_free(g);
    TEST_DONE();
}
