/* test_arch.c — architecture behaviour the goldens do not show: Gemma 3's and gpt-oss's sliding-window layers are
 * the reference's and keep a ring cache whose size does not grow with the context, and truncation that the ring
 * cannot honour clears the sequence; GPT-2 refuses to pass its learned positions; encoders see whole sequences;
 * hearth_embed pools as the model says. */
#include <math.h>
#include <string.h>

#include "model/context.h"
#include "testutil.h"

static hearth_ctx *new_ctx(hearth_model *m, int n_ctx, int n_batch) {
    hearth_err err;
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.n_threads = 2;
    hearth_ctx *c;
    REQUIRE(!hearth_ctx_new(m, &cp, &c, &err), "ctx: %s", err.msg);
    return c;
}

/* The layers are sliding or global as the reference has them (pattern: S or G per layer: Gemma 3's every 6th
 * global, gpt-oss's alternating from a sliding layer 0); sliding layers cost window + n_batch rows whatever the
 * context; global layers grow with it. */
static void test_swa_memory(const char *name, const char *pattern) {
    hearth_model *m = tu_load_model(name);
    const ht_hparams *hp = &m->hp;
    REQUIRE(hp->sliding_window > 0, "%s fixture has no sliding window", name);
    REQUIRE((int)strlen(pattern) == hp->n_layer, "%s: %d layers, pattern %s", name, hp->n_layer, pattern);
    hearth_ctx *small = new_ctx(m, 256, 64), *big = new_ctx(m, 4096, 64);
    size_t row = (size_t)hp->n_head_kv * (hp->head_dim + hp->head_dim_v) * 2;   /* F16 cache */
    int n_swa = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        size_t a = ctx_kv_bytes(small, il), b = ctx_kv_bytes(big, il);
        CHECK(ctx_layer_is_swa(m, il) == (pattern[il] == 'S'), "%s layer %d: %s, the reference's is %s", name, il,
              ctx_layer_is_swa(m, il) ? "sliding" : "global", pattern[il] == 'S' ? "sliding" : "global");
        if (ctx_layer_is_swa(m, il)) {
            n_swa++;
            CHECK(a == b, "layer %d: sliding-window cache grows with the context (%zu -> %zu bytes)", il, a, b);
            CHECK(b == (size_t)(hp->sliding_window + 64) * row, "layer %d: %zu bytes, expected window + n_batch rows", il, b);
        } else {
            CHECK(a == 256 * row && b == 4096 * row, "layer %d (global): %zu / %zu bytes", il, a, b);
        }
    }
    CHECK(n_swa > 0 && n_swa < hp->n_layer, "expected both sliding and global layers, got %d sliding", n_swa);
    printf("%s KV cache (%s): n_ctx 256 %zu bytes, n_ctx 4096 %zu bytes (sliding layers %zu bytes each)\n", name, pattern,
           ctx_kv_bytes(small, -1), ctx_kv_bytes(big, -1), ctx_kv_bytes(big, 0));
    hearth_ctx_free(small);
    hearth_ctx_free(big);
    hearth_model_free(m);
}

static void fill_tokens(hearth_token *t, int n, int n_vocab) {
    uint32_t s = 12345;
    for (int i = 0; i < n; i++) { s = s * 1664525u + 1013904223u; t[i] = (hearth_token)(s >> 8) % n_vocab; }
}

/* Re-decoding after a short truncation matches; a truncation past the ring's reach clears the sequence. */
static void test_swa_truncate(void) {
    hearth_model *m = tu_load_model("gemma3");
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    hearth_ctx *c = new_ctx(m, 512, 16);   /* rings of window + 16 rows */
    hearth_err err;
    enum { N = 100, BACK = 10 };
    hearth_token t[N];
    fill_tokens(t, N, info.n_vocab);
    hearth_batch b = { .n = N, .tokens = t };
    REQUIRE(!hearth_decode(c, &b, &err), "decode: %s", err.msg);
    float *first = malloc((size_t)info.n_vocab * sizeof(float));
    memcpy(first, hearth_logits(c, N - 1), (size_t)info.n_vocab * sizeof(float));
    hearth_seq_truncate(c, 0, N - BACK);
    CHECK(hearth_seq_len(c, 0) == N - BACK, "short truncation kept %d positions", hearth_seq_len(c, 0));
    b = (hearth_batch){ .n = BACK, .tokens = t + N - BACK };
    REQUIRE(!hearth_decode(c, &b, &err), "decode: %s", err.msg);
    double d = 0;
    for (int i = 0; i < info.n_vocab; i++) d = fmax(d, fabs(first[i] - hearth_logits(c, BACK - 1)[i]));
    CHECK(d == 0, "logits after truncate + re-decode differ by %g", d);
    hearth_seq_truncate(c, 0, N / 2);
    CHECK(hearth_seq_len(c, 0) == 0, "truncating past the ring kept %d positions (the window before them is gone)",
          hearth_seq_len(c, 0));
    free(first);
    hearth_ctx_free(c);
    hearth_model_free(m);
}

static void test_gpt2_positions(void) {
    hearth_model *m = tu_load_model("gpt2");
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    hearth_ctx *c = new_ctx(m, 1 << 20, 64);
    CHECK(hearth_ctx_n_ctx(c) == info.n_ctx_train, "context %d not clamped to the %d learned positions", hearth_ctx_n_ctx(c),
          info.n_ctx_train);
    int n = hearth_ctx_n_ctx(c) + 1;
    hearth_token *t = calloc((size_t)n, sizeof *t);
    hearth_err err;
    hearth_batch b = { .n = n - 1, .tokens = t };
    REQUIRE(!hearth_decode(c, &b, &err), "decode of a full context: %s", err.msg);
    b = (hearth_batch){ .n = 1, .tokens = t };
    CHECK(hearth_decode(c, &b, &err) && strstr(err.msg, "learned positions"), "passing the context: '%s'", err.msg);
    free(t);
    hearth_ctx_free(c);
    hearth_model_free(m);
}

/* An encoder sees a whole sequence per decode; hearth_embed pools as the model says. */
static void test_encoder(void) {
    hearth_model *m = tu_load_model("bert");
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    CHECK(info.is_encoder, "bert is not marked as an encoder");
    hearth_ctx *c = new_ctx(m, 64, 16);
    hearth_err err;
    hearth_token t[20];
    fill_tokens(t, 20, info.n_vocab);
    hearth_batch b = { .n = 20, .tokens = t };
    CHECK(hearth_decode(c, &b, &err), "an encoder batch larger than n_batch was accepted");
    b.n = 10;
    REQUIRE(!hearth_decode(c, &b, &err), "decode: %s", err.msg);
    CHECK(!hearth_logits(c, 9), "an encoder produced logits");
    CHECK(hearth_decode(c, &b, &err), "an encoder continued a sequence");
    float pooled[4096], mean[4096] = { 0 };
    REQUIRE(info.n_embd <= 4096, "n_embd %d", info.n_embd);
    CHECK(hearth_embed_rows(c, 10) == 1, "bert fixture pools (mean)");
    REQUIRE(hearth_embed(c, t, 10, pooled, &err) == 1, "embed: %s", err.msg);
    b = (hearth_batch){ .n = 10, .tokens = t, .want_logits = (const int8_t[10]){ 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 } };
    hearth_seq_truncate(c, 0, 0);
    REQUIRE(!hearth_decode(c, &b, &err), "decode: %s", err.msg);
    for (int i = 0; i < 10; i++) for (int k = 0; k < info.n_embd; k++) mean[k] += hearth_hidden(c, i)[k] / 10;
    double d = 0;
    for (int k = 0; k < info.n_embd; k++) d = fmax(d, fabs(mean[k] - pooled[k]));
    CHECK(d < 1e-5, "mean pooling differs from the mean of the hidden states by %g", d);
    hearth_ctx_free(c);
    hearth_model_free(m);
}

/* A decoder mean-pools its last hidden state, over any number of micro-batches. */
static void test_decoder_embed(void) {
    hearth_model *m = tu_load_model("qwen3");
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    hearth_ctx *c = new_ctx(m, 64, 8);
    hearth_err err;
    hearth_token t[30];
    fill_tokens(t, 30, info.n_vocab);
    float pooled[4096], mean[4096] = { 0 };
    REQUIRE(info.n_embd <= 4096, "n_embd %d", info.n_embd);
    CHECK(hearth_embed_rows(c, 30) == 1, "decoders pool");
    REQUIRE(hearth_embed(c, t, 30, pooled, &err) == 1, "embed: %s", err.msg);
    for (int i = 0; i < 30; i++) {
        hearth_batch b = { .n = 1, .tokens = t + i };
        if (!i) hearth_seq_truncate(c, 0, 0);
        REQUIRE(!hearth_decode(c, &b, &err), "decode: %s", err.msg);
        for (int k = 0; k < info.n_embd; k++) mean[k] += hearth_hidden(c, 0)[k] / 30;
    }
    double d = 0;
    for (int k = 0; k < info.n_embd; k++) d = fmax(d, fabs(mean[k] - pooled[k]));
    CHECK(d < 1e-4, "decoder embedding differs from the mean of the last hidden states by %g", d);
    hearth_ctx_free(c);
    hearth_model_free(m);
}

int main(void) {
    test_swa_memory("gemma3", "SSSSSG");
    test_swa_memory("gpt-oss", "SGSG");
    test_swa_truncate();
    test_gpt2_positions();
    test_encoder();
    test_decoder_embed();
    TEST_DONE();
}
