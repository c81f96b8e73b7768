/* test_sampling_e2e.c — the sampler on a real model's logits (stories260K): least-likely picks the argmin
 * (and the least likely of the top-k when truncating), biasing by text shifts the log-probability of exactly
 * the matching tokens by the bias, log-probabilities sum to 1, the words constraint holds over a long
 * generation, and seeded sampling gives the same tokens with 1 and 2 threads. */
#include <math.h>
#include <string.h>

#include "hearth.h"
#include "testutil.h"

#define MODEL "data/models/stories260K.gguf"
#define NV 512

/* A sampler with every truncation stage off, temperature 1, penalties off. */
static hearth_sampler_params plain_params(void) {
    hearth_sampler_params p = hearth_sampler_default_params();
    p.temperature = 1; p.top_k = 0; p.top_p = 1; p.min_p = 0; p.typical_p = 1; p.repeat_penalty = 1;
    return p;
}

static hearth_ctx *new_ctx(hearth_model *m, int threads) {
    hearth_err err;
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = 256;
    cp.n_threads = threads;
    hearth_ctx *ctx;
    REQUIRE(!hearth_ctx_new(m, &cp, &ctx, &err), "%s", err.msg);
    return ctx;
}

/* Evaluates the prompt on a cleared context; returns its last row of logits. */
static const float *prompt_logits(hearth_ctx *ctx, hearth_model *m, const char *prompt, hearth_token *toks, int *n) {
    hearth_err err;
    *n = hearth_tokenize(m, prompt, strlen(prompt), true, false, toks, 64, &err);
    REQUIRE(*n > 0 && *n <= 64, "tokenize: %d", *n);
    hearth_seq_truncate(ctx, 0, 0);
    hearth_batch b = { .n = *n, .tokens = toks };
    REQUIRE(!hearth_decode(ctx, &b, &err), "%s", err.msg);
    return hearth_logits(ctx, *n - 1);
}

static hearth_token argmin(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (l[i] < l[b]) b = i;
    return b;
}

/* Least-likely, no truncation: the argmin of the logits, at every step of a generation. */
static void test_least_likely(hearth_model *m, hearth_ctx *ctx) {
    hearth_token toks[256];
    int n;
    const float *l = prompt_logits(ctx, m, "Once upon a time", toks, &n);
    hearth_sampler_params p = plain_params();
    p.least_likely = true;
    hearth_sampler *s = hearth_sampler_new(&p, NV);
    hearth_err err;
    for (int step = 0; step < 30; step++) {
        hearth_token t = hearth_sample(s, l, toks, n), want = argmin(l, NV);
        CHECK(t == want, "step %d: least-likely picked %d (logit %g), argmin is %d (logit %g)", step, t, l[t], want, l[want]);
        toks[n++] = t;
        hearth_batch b = { .n = 1, .tokens = &toks[n - 1] };
        REQUIRE(!hearth_decode(ctx, &b, &err), "%s", err.msg);
        l = hearth_logits(ctx, 0);
    }
    hearth_sampler_free(s);
}

/* Least-likely after top-k 40: the 40th most likely token. */
static void test_least_likely_top_k(hearth_model *m, hearth_ctx *ctx) {
    hearth_token toks[64], ids[NV];
    float probs[NV];
    int n;
    const float *l = prompt_logits(ctx, m, "The little dog", toks, &n);
    hearth_sampler_params p = plain_params();
    hearth_sampler *all = hearth_sampler_new(&p, NV);
    REQUIRE(hearth_sampler_candidates(all, l, toks, n, ids, probs, NV) == NV, "all tokens are candidates");
    p.top_k = 40;
    p.least_likely = true;
    hearth_sampler *s = hearth_sampler_new(&p, NV);
    hearth_token t = hearth_sample(s, l, toks, n);
    CHECK(t == ids[39], "least-likely of top-40 picked %d, the 40th most likely is %d", t, ids[39]);
    hearth_sampler_free(all);
    hearth_sampler_free(s);
}

/* Pieces as the CLI builds them: end-of-generation and control tokens "". */
static void build_pieces(hearth_model *m, char (*buf)[64], const char **pieces) {
    for (int t = 0; t < NV; t++) {
        int k = hearth_token_is_eog(m, t) ? 0 : hearth_token_piece(m, t, buf[t], 63);
        buf[t][k < 63 ? k : 63] = 0;
        pieces[t] = buf[t];
    }
}

/* Probabilities by token id from hearth_sampler_candidates (every token survives). */
static void probs_by_id(hearth_sampler *s, const float *l, const hearth_token *h, int n, double *out) {
    hearth_token ids[NV];
    float probs[NV];
    REQUIRE(hearth_sampler_candidates(s, l, h, n, ids, probs, NV) == NV, "all tokens are candidates");
    for (int i = 0; i < NV; i++) out[ids[i]] = probs[i];
}

/* bias_text("the", +3): log p shifts by exactly 3 more for matching tokens than for the others. */
static void test_bias_text(hearth_model *m, hearth_ctx *ctx) {
    static char buf[NV][64];
    const char *pieces[NV];
    build_pieces(m, buf, pieces);
    hearth_token toks[64];
    int n;
    const float *l = prompt_logits(ctx, m, "Once upon a time", toks, &n);
    hearth_sampler_params p = plain_params();
    hearth_sampler *s0 = hearth_sampler_new(&p, NV), *s1 = hearth_sampler_new(&p, NV);
    int n_match = hearth_sampler_bias_text(s1, pieces, NV, "the", 3.0f);
    CHECK(n_match > 1 && n_match < NV / 2, "tokens containing 'the': %d", n_match);
    static double p0[NV], p1[NV];
    probs_by_id(s0, l, toks, n, p0);
    probs_by_id(s1, l, toks, n, p1);
    double base = NAN, worst = 0;
    for (int t = 0; t < NV; t++)
        if (!strstr(pieces[t], "the")) { base = log(p1[t]) - log(p0[t]); break; }
    int counted = 0;
    for (int t = 0; t < NV; t++) {
        bool match = strstr(pieces[t], "the") != NULL;
        double shift = log(p1[t]) - log(p0[t]) - base - (match ? 3.0 : 0.0);
        if (fabs(shift) > worst) worst = fabs(shift);
        counted += match;
    }
    CHECK(counted == n_match, "bias_text counted %d, pieces with 'the' %d", n_match, counted);
    CHECK(worst < 1e-4, "log-prob shift off by %g", worst);
    hearth_sampler_free(s0);
    hearth_sampler_free(s1);
}

/* Log-probabilities of every token sum to 1; the chosen token's matches its entry. */
static void test_logprobs_sum(hearth_model *m, hearth_ctx *ctx) {
    hearth_token toks[64], ids[NV];
    float lps[NV], chosen;
    int n;
    const float *l = prompt_logits(ctx, m, "Lily went to the park", toks, &n);
    CHECK(hearth_logprobs(l, NV, 42, NV, &chosen, ids, lps) == NV, "all entries");
    double sum = 0;
    for (int i = 0; i < NV; i++) {
        sum += exp((double)lps[i]);
        if (ids[i] == 42) CHECK(lps[i] == chosen, "chosen %g vs list %g", chosen, lps[i]);
        if (i) CHECK(lps[i] <= lps[i - 1], "sorted at %d", i);
    }
    CHECK(fabs(sum - 1) < 1e-4, "sum of probabilities %.8f", sum);
}

/* Generates n_gen tokens from BOS with the sampler; writes the ids to out. */
static void generate(hearth_model *m, hearth_ctx *ctx, hearth_sampler *s, int n_gen, hearth_token *out) {
    hearth_err err;
    hearth_token h[256];
    int n = 0;
    h[n++] = hearth_token_bos(m);
    hearth_seq_truncate(ctx, 0, 0);
    for (int i = 0; i < n_gen; i++) {
        hearth_batch b = { .n = 1, .tokens = &h[n - 1] };
        REQUIRE(!hearth_decode(ctx, &b, &err), "%s", err.msg);
        hearth_token t = hearth_sample(s, hearth_logits(ctx, 0), h, n);
        REQUIRE(t >= 0, "step %d: nothing to sample", i);
        hearth_sampler_accept(s, t);
        out[i] = h[n++] = t;
    }
}

/* Every word of the text starts with b or w (words as hearth_words_starting_allow defines them). */
static bool only_bw_words(const char *text) {
    bool in_word = false;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        bool word = *p >= 0x80 || (*p >= '0' && *p <= '9') || ((*p | 32) >= 'a' && (*p | 32) <= 'z');
        if (!word) { if (*p != '\'') in_word = false; continue; }
        if (!in_word && (*p | 32) != 'b' && (*p | 32) != 'w') return false;
        in_word = true;
    }
    return true;
}

static void test_words_constraint(hearth_model *m, hearth_ctx *ctx) {
    static char buf[NV][64];
    const char *pieces[NV];
    build_pieces(m, buf, pieces);
    hearth_sampler_params p = hearth_sampler_default_params();
    p.seed = 11;
    hearth_sampler *s = hearth_sampler_new(&p, NV);
    hearth_words_constraint wc;
    hearth_words_constraint_init(&wc, "BW", pieces, NV);
    hearth_sampler_set_allow(s, hearth_words_constraint_allow, &wc);
    hearth_sampler_set_accept_hook(s, hearth_words_constraint_accept, &wc);
    hearth_token out[200];
    generate(m, ctx, s, 200, out);
    static char text[200 * 64];
    size_t len = 0;
    for (int i = 0; i < 200; i++) { strcpy(text + len, pieces[out[i]]); len += strlen(pieces[out[i]]); }
    CHECK(only_bw_words(text), "a word does not start with B/W: %.300s", text);
    hearth_sampler_free(s);
}

/* The same seed gives the same tokens with 1 and 2 threads, with every stage of the chain on. */
static void test_threads(hearth_model *m) {
    hearth_token out[2][100];
    for (int k = 0; k < 2; k++) {
        hearth_ctx *ctx = new_ctx(m, k + 1);
        hearth_sampler_params p = hearth_sampler_default_params();
        p.seed = 1234; p.temperature = 1.1f; p.typical_p = 0.95f; p.repeat_penalty = 1.1f;
        p.frequency_penalty = 0.2f; p.presence_penalty = 0.1f;
        hearth_sampler *s = hearth_sampler_new(&p, NV);
        generate(m, ctx, s, 100, out[k]);
        hearth_sampler_free(s);
        hearth_ctx_free(ctx);
    }
    CHECK(!memcmp(out[0], out[1], sizeof out[0]), "1 and 2 threads sample differently");
}

int main(void) {
    hearth_err err;
    hearth_model *m;
    REQUIRE(!hearth_model_load(MODEL, &m, &err), "%s", err.msg);
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    REQUIRE(info.n_vocab == NV, "n_vocab %d", info.n_vocab);
    hearth_ctx *ctx = new_ctx(m, 1);
    test_least_likely(m, ctx);
    test_least_likely_top_k(m, ctx);
    test_bias_text(m, ctx);
    test_logprobs_sum(m, ctx);
    test_words_constraint(m, ctx);
    test_threads(m);
    hearth_ctx_free(ctx);
    hearth_model_free(m);
    TEST_DONE();
}
