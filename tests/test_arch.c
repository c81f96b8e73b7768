/* test_arch.c — architecture behaviour the goldens do not show: Gemma 3's and gpt-oss's sliding-window layers are
 * the reference's and keep a ring cache whose size does not grow with the context, and truncation that the ring
 * cannot honour clears the sequence; GPT-2 refuses to pass its learned positions; encoders see whole sequences;
 * hearth_embed pools as the model says; latent attention (DeepSeek-V2/V3) caches only the normed latent and
 * the rope key, and its sequences stay apart through mixed batches and truncation. */
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

/* The cache of a latent-attention model holds per token and layer [RMSNorm(latent) | rope key], nothing else:
 * kv_lora_rank + n_rot values (80 here, not the 2 x 4 heads x 48 / 32 of the uncompressed keys and values),
 * and layer 0's row for the first token is exactly that, computed here from the weights in double. */
static void test_mla_cache(const char *name) {
    hearth_model *m = tu_load_model(name);
    const ht_hparams *hp = &m->hp;
    const int R = hp->kv_lora_rank, D = R + hp->n_rot, E = hp->n_embd;
    REQUIRE(R > 0 && hp->head_dim == D, "%s: kv_lora_rank %d, cache row %d", name, R, hp->head_dim);
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = 64, cp.n_threads = 2, cp.cache_type = HEARTH_CACHE_F32;
    hearth_ctx *c;
    hearth_err err;
    REQUIRE(!hearth_ctx_new(m, &cp, &c, &err), "ctx: %s", err.msg);
    CHECK(hearth_kv_token_bytes(c) == (size_t)hp->n_layer * D * sizeof(float), "%s: %zu bytes a token, expected %d layers x %d floats",
          name, hearth_kv_token_bytes(c), hp->n_layer, D);
    CHECK(ctx_kv_bytes(c, -1) == (size_t)64 * hearth_kv_token_bytes(c), "%s: whole cache %zu bytes", name, ctx_kv_bytes(c, -1));
    hearth_token t = 7;
    hearth_batch b = { .n = 1, .tokens = &t };
    REQUIRE(!hearth_decode(c, &b, &err), "decode: %s", err.msg);
    float *row = malloc(hearth_kv_token_bytes(c));
    REQUIRE(row && !hearth_kv_read(c, 0, 0, 1, row), "%s: kv read", name);
    const ht_layer *L = &m->layers[0];
    const float *x = (const float *)m->tok_embd.data + (size_t)t * E, *an = L->attn_norm.data, *kn = L->kv_a_norm.data;
    REQUIRE(m->tok_embd.type == HT_F32 && L->wkv_a.type == HT_F32, "%s: F32 weights expected", name);
    double ss = 0, kv[1024], ks = 0, worst = 0;
    for (int i = 0; i < E; i++) ss += (double)x[i] * x[i];
    const double r = 1 / sqrt(ss / E + hp->norm_eps);
    for (int o = 0; o < D; o++) {
        const float *w = (const float *)L->wkv_a.data + (size_t)o * E;
        kv[o] = 0;
        for (int i = 0; i < E; i++) kv[o] += (double)w[i] * x[i] * r * an[i];
    }
    for (int i = 0; i < R; i++) ks += kv[i] * kv[i];
    for (int i = 0; i < D; i++) {   /* position 0: the rope key is not rotated */
        const double want = i < R ? kv[i] / sqrt(ks / R + hp->norm_eps) * kn[i] : kv[i];
        worst = fmax(worst, fabs(row[i] - want) / (fabs(want) + 1e-3));
    }
    CHECK(worst < 1e-4, "%s: layer 0's cached row differs from [norm(latent) | rope key] by %.3g", name, worst);
    printf("%s: latent cache %zu bytes a token (F32), layer 0 row = [norm(latent) | key] within %.1e\n", name,
           hearth_kv_token_bytes(c), worst);
    free(row);
    hearth_ctx_free(c);
    cp.cache_type = HEARTH_CACHE_Q8_0;   /* 80-value rows are not whole Q8_0 blocks */
    c = NULL;
    CHECK(hearth_ctx_new(m, &cp, &c, &err) != 0 && !c && strstr(err.msg, "multiples of 32") && !strchr(err.msg, '\n'),
          "%s: a Q8_0 cache of 80-value rows: '%s'", name, err.msg);
    hearth_model_free(m);
}

/* Two sequences decoded in one interleaved batch give each one's logits alone, bit for bit; after truncating
 * either (part way, or to nothing) and decoding the rest again, too. */
static void test_mla_sequences(const char *name) {
    hearth_model *m = tu_load_model(name);
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    const size_t V = (size_t)info.n_vocab;
    enum { NA = 40, NB = 30, CUT = 25 };
    hearth_token t[NA + NB], rows[NA + NB];
    int32_t seq[NA + NB];
    int8_t want[NA + NB] = { 0 };
    fill_tokens(t, NA + NB, info.n_vocab);
    hearth_err err;
    float *alone = malloc(2 * V * sizeof(float));
    hearth_ctx *c = new_ctx(m, 128, 512);
    for (int s = 0; s < 2; s++) {
        hearth_batch b = { .n = s ? NB : NA, .tokens = s ? t + NA : t };
        hearth_seq_truncate(c, 0, 0);
        REQUIRE(!hearth_decode(c, &b, &err), "decode: %s", err.msg);
        memcpy(alone + s * V, hearth_logits(c, b.n - 1), V * sizeof(float));
    }
    hearth_ctx_free(c);
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = 128, cp.n_seq = 2, cp.n_threads = 2;
    REQUIRE(!hearth_ctx_new(m, &cp, &c, &err), "ctx: %s", err.msg);
    int n = 0, last[2] = { 0 };
    for (int i = 0; i < NA || i < NB; i++)   /* A0 B0 A1 B1 ... */
        for (int s = 0; s < 2; s++)
            if (i < (s ? NB : NA)) rows[n] = t[s * NA + i], seq[n] = s, last[s] = n++;
    want[last[0]] = want[last[1]] = 1;
    hearth_batch mixed = { .n = n, .tokens = rows, .seq = seq, .want_logits = want };
    REQUIRE(!hearth_decode(c, &mixed, &err), "decode: %s", err.msg);
    for (int s = 0; s < 2; s++)
        CHECK(!memcmp(hearth_logits(c, last[s]), alone + s * V, V * sizeof(float)), "%s: sequence %d in a mixed batch differs", name, s);
    hearth_seq_truncate(c, 0, CUT);
    hearth_seq_truncate(c, 1, 0);
    CHECK(hearth_seq_len(c, 0) == CUT && hearth_seq_len(c, 1) == 0, "%s: truncation kept %d / %d", name, hearth_seq_len(c, 0),
          hearth_seq_len(c, 1));
    int32_t s0[NA - CUT], s1[NB];
    for (int i = 0; i < NA - CUT; i++) s0[i] = 0;
    for (int i = 0; i < NB; i++) s1[i] = 1;
    hearth_batch ra = { .n = NA - CUT, .tokens = t + CUT, .seq = s0 }, rb = { .n = NB, .tokens = t + NA, .seq = s1 };
    REQUIRE(!hearth_decode(c, &ra, &err), "decode: %s", err.msg);
    CHECK(!memcmp(hearth_logits(c, NA - CUT - 1), alone, V * sizeof(float)), "%s: truncated to %d and re-decoded: differs", name, CUT);
    REQUIRE(!hearth_decode(c, &rb, &err), "decode: %s", err.msg);
    CHECK(!memcmp(hearth_logits(c, NB - 1), alone + V, V * sizeof(float)), "%s: cleared and re-decoded: differs", name);
    free(alone);
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

/* Gemma 4: each layer's cache has its own geometry (sliding: 1 kv head of 32, a ring of window + n_batch rows; global:
 * 2 kv heads of 64, growing with the context) and the KV-sharing layers 3-5 hold none; the logits of two sequences
 * decoded together, interleaved token by token, with 1 and 2 threads and micro-batches of 5, equal each sequence's
 * own batched pass bit for bit (the shared layers read rings another layer fills). */
static void test_gemma4_cache(void) {
    hearth_model *m = tu_load_model("gemma4");
    enum { N = 30 };
    hearth_ctx *c = new_ctx(m, 256, 64);
    const size_t swa_row = 1 * (32 + 32) * 2, glob_row = 2 * (64 + 64) * 2;   /* F16 */
    for (int il = 0; il < 6; il++) {
        const size_t want = il >= 3 ? 0 : il == 2 ? 256 * glob_row : (size_t)(8 + 64) * swa_row;
        CHECK(ctx_kv_bytes(c, il) == want, "gemma4 layer %d: %zu bytes of cache, expected %zu", il, ctx_kv_bytes(c, il), want);
    }
    CHECK(hearth_kv_token_bytes(c) == 2 * swa_row + glob_row, "gemma4: %zu bytes a token", hearth_kv_token_bytes(c));
    hearth_ctx_free(c);
    hearth_token t[2][N];
    fill_tokens(t[0], N, 768);
    fill_tokens(t[1], N, 700);
    static float ref[2][N][768];
    for (int s = 0; s < 2; s++) {
        hearth_ctx *one = new_ctx(m, 64, 64);
        int8_t want[N];
        memset(want, 1, sizeof want);
        hearth_batch b = { .n = N, .tokens = t[s], .want_logits = want };
        hearth_err err;
        REQUIRE(!hearth_decode(one, &b, &err), "decode: %s", err.msg);
        for (int i = 0; i < N; i++) memcpy(ref[s][i], hearth_logits(one, i), sizeof ref[s][i]);
        hearth_ctx_free(one);
    }
    for (int threads = 1; threads <= 2; threads++) {
        hearth_err err;
        hearth_ctx_params cp = hearth_ctx_default_params();
        cp.n_ctx = 64, cp.n_seq = 2, cp.n_batch = 5, cp.n_threads = threads;
        hearth_ctx *two;
        REQUIRE(!hearth_ctx_new(m, &cp, &two, &err), "ctx: %s", err.msg);
        hearth_token bt[2 * N];
        int32_t seq[2 * N];
        int8_t want[2 * N];
        for (int i = 0; i < 2 * N; i++) bt[i] = t[i % 2][i / 2], seq[i] = i % 2, want[i] = 1;
        hearth_batch b = { .n = 2 * N, .tokens = bt, .seq = seq, .want_logits = want };
        REQUIRE(!hearth_decode(two, &b, &err), "decode: %s", err.msg);
        int bad = 0;
        for (int i = 0; i < 2 * N; i++) bad += memcmp(hearth_logits(two, i), ref[i % 2][i / 2], sizeof ref[0][0]) != 0;
        CHECK(bad == 0, "gemma4, %d threads: %d of %d rows of two interleaved sequences differ from their own pass", threads,
              bad, 2 * N);
        hearth_ctx_free(two);
    }
    hearth_model_free(m);
}

int main(void) {
    test_gemma4_cache();
    test_swa_memory("gemma3", "SSSSSG");
    test_swa_memory("gpt-oss", "SGSG");
    test_swa_truncate();
    test_gpt2_positions();
    test_encoder();
    test_decoder_embed();
    test_mla_cache("deepseek2");
    test_mla_cache("deepseek2-v3");
    test_mla_sequences("deepseek2");
    test_mla_sequences("deepseek2-v3");
    TEST_DONE();
}
