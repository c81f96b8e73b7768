/* test_sampler.c — unit tests for the sampler chain (src/sampler.c): every stage on a hand-made 8-token vocabulary
 * with exact survivors and probabilities, the stage order, the picks (greedy, least-likely, seeded random), a
 * chi-square check of the sampling distribution, the chain against a full-sort reference on a 32000-token
 * vocabulary, log-probabilities, and the words-starting constraint. Needs no model or data files. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hearth.h"
#include "testutil.h"

#define NV 8
/* Sorted by (logit desc, id): 3, 1, 5, 4, 0, 7, 6, 2 — ids 1 and 5 tie. */
static const float L8[NV] = {0.5f, 2.0f, -1.0f, 3.0f, 1.0f, 2.0f, -0.5f, 0.0f};

/* Every stage off, temperature 1. */
static hearth_sampler_params params_off(void) {
    hearth_sampler_params p = hearth_sampler_default_params();
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.typical_p = 1.0f;
    p.repeat_penalty = 1.0f;
    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.0f;
    p.repeat_last_n = 64;
    p.least_likely = false;
    p.seed = 1;
    return p;
}

/* Checks the survivors of s on logits are exactly ids[0..n) in that order (most probable first) with
 * probabilities probs[0..n) to 1e-6. */
static void expect_survivors(const char *what, hearth_sampler *s, const float *logits, const hearth_token *hist,
                             int n_hist, const hearth_token *ids, const double *probs, int n) {
    hearth_token got[NV];
    float gp[NV];
    int m = hearth_sampler_candidates(s, logits, hist, n_hist, got, gp, NV);
    CHECK(m == n, "%s: %d survivors, want %d", what, m, n);
    for (int i = 0; i < n && i < m; i++) {
        CHECK(got[i] == ids[i], "%s: survivor %d is id %d, want %d", what, i, got[i], ids[i]);
        CHECK(fabs(gp[i] - probs[i]) < 1e-6, "%s: p(id %d) = %.8f, want %.8f", what, got[i], gp[i], probs[i]);
    }
}

/* The same, for a fresh sampler with params p. */
static void expect_with(const char *what, hearth_sampler_params p, const float *logits, const hearth_token *hist,
                        int n_hist, const hearth_token *ids, const double *probs, int n) {
    hearth_sampler *s = hearth_sampler_new(&p, NV);
    REQUIRE(s, "sampler_new");
    expect_survivors(what, s, logits, hist, n_hist, ids, probs, n);
    hearth_sampler_free(s);
}

/* Probability by id of every token from candidates (0 for tokens that did not survive). */
static int probs_by_id(hearth_sampler *s, const float *logits, const hearth_token *hist, int n_hist, double *out) {
    hearth_token ids[NV];
    float p[NV];
    int m = hearth_sampler_candidates(s, logits, hist, n_hist, ids, p, NV);
    for (int i = 0; i < NV; i++) out[i] = 0;
    for (int i = 0; i < m && i < NV; i++) out[ids[i]] = p[i];
    return m;
}

/* Softmax of hand-computed logits in double. */
static void ref_softmax(const double *l, int n, double *p) {
    double mx = l[0], sum = 0;
    for (int i = 1; i < n; i++) if (l[i] > mx) mx = l[i];
    for (int i = 0; i < n; i++) sum += (p[i] = exp(l[i] - mx));
    for (int i = 0; i < n; i++) p[i] /= sum;
}

static void expect_probs(const char *what, hearth_sampler_params p, const float *logits, const hearth_token *hist,
                         int n_hist, const double *want_logits) {
    hearth_sampler *s = hearth_sampler_new(&p, NV);
    REQUIRE(s, "sampler_new");
    double got[NV], want[NV];
    int m = probs_by_id(s, logits, hist, n_hist, got);
    ref_softmax(want_logits, NV, want);
    CHECK(m == NV, "%s: %d survivors", what, m);
    for (int i = 0; i < NV; i++)
        CHECK(fabs(got[i] - want[i]) < 1e-6, "%s: p(%d) = %.8f, want %.8f", what, i, got[i], want[i]);
    hearth_sampler_free(s);
}

static hearth_token sample_once(hearth_sampler_params p, const float *logits, int n_vocab) {
    hearth_sampler *s = hearth_sampler_new(&p, n_vocab);
    REQUIRE(s, "sampler_new");
    hearth_token t = hearth_sample(s, logits, NULL, 0);
    hearth_sampler_free(s);
    return t;
}

/* ---- truncation stages ---- */

static void test_no_stages(void) {
    double l[NV];
    for (int i = 0; i < NV; i++) l[i] = L8[i];
    expect_probs("all off", params_off(), L8, NULL, 0, l);
}

static void test_top_k(void) {
    hearth_sampler_params p = params_off();
    p.top_k = 2;
    expect_with("top-k 2", p, L8, NULL, 0, (hearth_token[]){3, 1}, (double[]){0.7310585786, 0.2689414214}, 2);
    p.top_k = 3;
    expect_with("top-k 3", p, L8, NULL, 0, (hearth_token[]){3, 1, 5},
                (double[]){0.5761168848, 0.2119415576, 0.2119415576}, 3);
    p.top_k = 100;
    hearth_sampler *s = hearth_sampler_new(&p, NV);
    double got[NV];
    CHECK(probs_by_id(s, L8, NULL, 0, got) == NV, "top-k larger than the vocabulary keeps everything");
    hearth_sampler_free(s);
}

static void test_top_p(void) {
    hearth_sampler_params p = params_off();
    p.top_p = 0.8f;   /* cumulative: 3 .487, 1 .667, 5 .846 */
    expect_with("top-p 0.8", p, L8, NULL, 0, (hearth_token[]){3, 1, 5},
                (double[]){0.5761168848, 0.2119415576, 0.2119415576}, 3);
    p.top_p = 0.6f;   /* the tie between 1 and 5 goes to the lower id */
    expect_with("top-p 0.6", p, L8, NULL, 0, (hearth_token[]){3, 1}, (double[]){0.7310585786, 0.2689414214}, 2);
    p.top_p = 0.1f;
    expect_with("top-p 0.1", p, L8, NULL, 0, (hearth_token[]){3}, (double[]){1.0}, 1);
    const float flat[NV] = {0};   /* p = 1/8 each, exactly: the mass is reached (>=) at exactly 4 tokens */
    p.top_p = 0.5f;
    expect_with("top-p 0.5 flat", p, flat, NULL, 0, (hearth_token[]){0, 1, 2, 3}, (double[]){0.25, 0.25, 0.25, 0.25}, 4);
}

static void test_min_p(void) {
    hearth_sampler_params p = params_off();
    p.min_p = 0.3f;   /* keep exp(l - 3) >= 0.3, i.e. l >= 1.796 */
    expect_with("min-p 0.3", p, L8, NULL, 0, (hearth_token[]){3, 1, 5},
                (double[]){0.5761168848, 0.2119415576, 0.2119415576}, 3);
    p.min_p = 0.1f;   /* l >= 0.697 */
    expect_with("min-p 0.1", p, L8, NULL, 0, (hearth_token[]){3, 1, 5, 4},
                (double[]){0.5344466454, 0.1966119332, 0.1966119332, 0.0723294881}, 4);
}

static void test_typical(void) {
    /* Entropy 1.4692; |surprisal - entropy|: ids 1,5 0.249, 3 0.751, 4 1.249, ... */
    hearth_sampler_params p = params_off();
    p.typical_p = 0.3f;
    expect_with("typical 0.3", p, L8, NULL, 0, (hearth_token[]){1, 5}, (double[]){0.5, 0.5}, 2);
    p.typical_p = 0.7f;
    expect_with("typical 0.7", p, L8, NULL, 0, (hearth_token[]){3, 1, 5},
                (double[]){0.5761168848, 0.2119415576, 0.2119415576}, 3);
    p.typical_p = 0.9f;
    expect_with("typical 0.9", p, L8, NULL, 0, (hearth_token[]){3, 1, 5, 4},
                (double[]){0.5344466454, 0.1966119332, 0.1966119332, 0.0723294881}, 4);
}

static void test_temperature(void) {
    hearth_sampler_params p = params_off();
    p.temperature = 0.5f;
    double l[NV];
    for (int i = 0; i < NV; i++) l[i] = L8[i] / 0.5;
    expect_probs("temperature 0.5", p, L8, NULL, 0, l);
    p.top_k = 2;   /* spot values: softmax(6, 4) */
    expect_with("temperature 0.5, top-k 2", p, L8, NULL, 0, (hearth_token[]){3, 1},
                (double[]){0.8807970780, 0.1192029220}, 2);
}

/* ---- bias, constraints, penalties ---- */

static void test_penalties(void) {
    hearth_sampler_params p = params_off();
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.25f;
    p.presence_penalty = 0.5f;
    p.repeat_last_n = 3;
    const hearth_token hist[] = {1, 3, 6, 3};
    /* window {3, 6, 3}: id 3 (x2): 3/2 - 2*.25 - .5 = .5; id 6 (x1): -.5*2 - .25 - .5 = -1.75; id 1 untouched */
    double want[NV] = {0.5, 2.0, -1.0, 0.5, 1.0, 2.0, -1.75, 0.0};
    expect_probs("penalties, last 3", p, L8, hist, 4, want);
    /* the same call again: the counts must not leak from one call to the next */
    expect_probs("penalties, again", p, L8, hist, 4, want);

    p.repeat_last_n = 1;   /* window {3}: 3/2 - .25 - .5 = .75 */
    double want1[NV] = {0.5, 2.0, -1.0, 0.75, 1.0, 2.0, -0.5, 0.0};
    expect_probs("penalties, last 1", p, L8, hist, 4, want1);

    p.repeat_last_n = -1;  /* whole history: id 1 (x1): 2/2 - .25 - .5 = .25 */
    double wantall[NV] = {0.5, 0.25, -1.0, 0.5, 1.0, 2.0, -1.75, 0.0};
    expect_probs("penalties, all history", p, L8, hist, 4, wantall);

    p.repeat_last_n = 0;   /* off */
    double none[NV];
    for (int i = 0; i < NV; i++) none[i] = L8[i];
    expect_probs("penalties, window 0", p, L8, hist, 4, none);

    p.repeat_last_n = 64;  /* out-of-range history ids are ignored */
    const hearth_token junk[] = {-5, 99, 2};
    double wantj[NV] = {0.5, 2.0, -1.0 * 2 - 0.25 - 0.5, 3.0, 1.0, 2.0, -0.5, 0.0};
    expect_probs("penalties, junk history", p, L8, junk, 3, wantj);
}

static void test_bias(void) {
    hearth_sampler_params p = params_off();
    p.temperature = 0;
    hearth_sampler *s = hearth_sampler_new(&p, NV);
    CHECK(hearth_sample(s, L8, NULL, 0) == 3, "greedy before bias");
    CHECK(hearth_sampler_set_bias(s, 2, 5.0f) == 0, "set_bias");
    CHECK(hearth_sample(s, L8, NULL, 0) == 2, "bias +5 on id 2 makes it the argmax");
    CHECK(hearth_sampler_set_bias(s, 2, 0.0f) == 0, "set_bias 0");
    CHECK(hearth_sample(s, L8, NULL, 0) == 3, "bias 0 clears");
    CHECK(hearth_sampler_set_bias(s, 3, -INFINITY) == 0, "ban");
    CHECK(hearth_sample(s, L8, NULL, 0) == 1, "banned argmax: next best, lower id of the tie");
    CHECK(hearth_sampler_set_bias(s, NV, 1.0f) == -1, "id out of range");
    CHECK(hearth_sampler_set_bias(s, -1, 1.0f) == -1, "negative id");
    CHECK(hearth_sampler_set_bias(s, 0, NAN) == -1, "NaN bias");
    CHECK(hearth_sampler_set_bias(s, 0, INFINITY) == -1, "+inf bias");
    double got[NV];
    CHECK(probs_by_id(s, L8, NULL, 0, got) == NV - 1, "a banned token is masked out");
    CHECK(got[3] == 0, "banned token has no probability");
    hearth_sampler_free(s);

    /* bias_text: every piece containing the needle, case-sensitive; repeated calls add up */
    static const char *const pieces[NV] = {" bard", "bar", "bard", " hard", "xbardy", NULL, "", "Bard"};
    const float zero[NV] = {0};
    s = hearth_sampler_new(&p, NV);
    CHECK(hearth_sampler_bias_text(s, pieces, NV, "bard", 3.0f) == 3, "bias_text count");
    CHECK(hearth_sampler_bias_text(s, pieces, NV, "xb", 1.0f) == 1, "bias_text count 2");
    CHECK(hearth_sampler_bias_text(s, pieces, NV, "", 1.0f) == -1, "empty needle");
    CHECK(hearth_sampler_bias_text(s, pieces, NV, "bard", NAN) == -1, "NaN bias");
    probs_by_id(s, zero, NULL, 0, got);
    double want[NV], l[NV] = {3, 0, 3, 0, 4, 0, 0, 0};
    ref_softmax(l, NV, want);
    for (int i = 0; i < NV; i++) CHECK(fabs(got[i] - want[i]) < 1e-6, "bias_text p(%d) %.8f want %.8f", i, got[i], want[i]);
    CHECK(hearth_sample(s, zero, NULL, 0) == 4, "bias_text: the doubly biased piece wins");
    hearth_sampler_free(s);
}

static bool allow_even(void *user, hearth_token t) {
    (*(int *)user)++;
    return t % 2 == 0;
}
static bool allow_none(void *user, hearth_token t) { (void)user; (void)t; return false; }
static bool allow_not_2(void *user, hearth_token t) { (void)user; return t != 2; }

static void test_allow(void) {
    hearth_sampler_params p = params_off();
    hearth_sampler *s = hearth_sampler_new(&p, NV);
    int calls = 0;
    hearth_sampler_set_allow(s, allow_even, &calls);
    expect_survivors("allow even", s, L8, NULL, 0, (hearth_token[]){4, 0, 6, 2},
                     (double[]){0.5089068617, 0.3086676145, 0.1135524695, 0.0688730543}, 4);
    CHECK(calls == NV, "allow called once per token (%d)", calls);
    hearth_sampler_set_bias(s, 4, -INFINITY);
    calls = 0;
    hearth_sampler_candidates(s, L8, NULL, 0, NULL, NULL, 0);
    CHECK(calls == NV - 1, "allow not called for an already masked token (%d)", calls);
    hearth_sampler_set_allow(s, allow_none, NULL);
    CHECK(hearth_sample(s, L8, NULL, 0) == -1, "everything masked: -1");
    CHECK(hearth_sampler_candidates(s, L8, NULL, 0, NULL, NULL, 0) == 0, "everything masked: no candidates");
    hearth_sampler_set_allow(s, NULL, NULL);
    CHECK(hearth_sampler_candidates(s, L8, NULL, 0, NULL, NULL, 0) == NV - 1, "callback removed");
    hearth_sampler_free(s);
}

/* Stages 1-4 in order: (l + bias) penalised, then divided by temperature. */
static void test_stage_order(void) {
    hearth_sampler_params p = params_off();
    p.repeat_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.temperature = 0.5f;
    hearth_sampler *s = hearth_sampler_new(&p, NV);
    hearth_sampler_set_bias(s, 3, 1.0f);
    const hearth_token hist[] = {3};
    double got[NV], want[NV], l[NV];
    for (int i = 0; i < NV; i++) l[i] = L8[i] / 0.5;
    l[3] = ((3.0 + 1.0) / 2.0 - 0.5) / 0.5;
    probs_by_id(s, L8, hist, 1, got);
    ref_softmax(l, NV, want);
    for (int i = 0; i < NV; i++) CHECK(fabs(got[i] - want[i]) < 1e-6, "order p(%d) %.8f want %.8f", i, got[i], want[i]);
    hearth_sampler_free(s);

    /* top-k before top-p: k=4 leaves {3,1,5,4}; top-p 0.7 of those is {3,1} (0.534 + 0.197) */
    p = params_off();
    p.top_k = 4;
    p.top_p = 0.7f;
    expect_with("top-k then top-p", p, L8, NULL, 0, (hearth_token[]){3, 1}, (double[]){0.7310585786, 0.2689414214}, 2);
    /* min-p after top-p: top-p 0.9 keeps {3,1,5,4,0}; min-p 0.3 of those keeps {3,1,5} */
    p = params_off();
    p.top_p = 0.9f;
    p.min_p = 0.3f;
    expect_with("top-p then min-p", p, L8, NULL, 0, (hearth_token[]){3, 1, 5},
                (double[]){0.5761168848, 0.2119415576, 0.2119415576}, 3);
    /* typical last: top-k 3 then typical 0.3 over {3,1,5} (entropy 0.9753; |surprisal - H| 3: .4239, 1,5: .5761) */
    p = params_off();
    p.top_k = 3;
    p.typical_p = 0.3f;
    expect_with("top-k then typical", p, L8, NULL, 0, (hearth_token[]){3}, (double[]){1.0}, 1);
}

/* ---- picks ---- */

static void test_greedy(void) {
    hearth_sampler_params p = params_off();
    p.temperature = 0;
    CHECK(sample_once(p, L8, NV) == 3, "greedy picks the argmax");
    p.temperature = -1;
    CHECK(sample_once(p, L8, NV) == 3, "negative temperature is greedy");
    const float tie[4] = {1, 5, 5, 2};
    CHECK(sample_once(p, tie, 4) == 1, "greedy tie goes to the lowest id");
    p.top_k = 1;
    CHECK(sample_once(p, tie, 4) == 1, "top-k 1 tie goes to the lowest id");
    p.top_k = 0;
    p.typical_p = 0.3f;   /* typical drops the argmax: survivors {1,5} */
    CHECK(sample_once(p, L8, NV) == 1, "greedy after typical picks the best survivor");
    p = params_off();
    p.top_k = 1;
    for (uint64_t seed = 0; seed < 20; seed++) {
        p.seed = seed;
        CHECK(sample_once(p, L8, NV) == 3, "top-k 1 is greedy for any seed");
    }
}

static void test_least_likely(void) {
    hearth_sampler_params p = params_off();
    p.least_likely = true;
    CHECK(sample_once(p, L8, NV) == 2, "least likely of all");
    p.top_k = 4;
    CHECK(sample_once(p, L8, NV) == 4, "least likely of the top-k survivors");
    p.top_k = 3;
    CHECK(sample_once(p, L8, NV) == 1, "least likely tie goes to the lowest id");
    p.top_k = 0;
    p.temperature = 0;
    CHECK(sample_once(p, L8, NV) == 2, "least likely overrides greedy");
    float masked[NV];
    memcpy(masked, L8, sizeof masked);
    masked[2] = -INFINITY;
    masked[6] = NAN;
    CHECK(sample_once(p, masked, NV) == 7, "masked (-inf, NaN) tokens are never least likely");
    hearth_sampler *s = hearth_sampler_new(&p, NV);
    hearth_sampler_set_allow(s, allow_not_2, NULL);
    CHECK(hearth_sample(s, L8, NULL, 0) == 6, "disallowed token is never least likely");
    hearth_sampler_free(s);
}

/* Varying logits per step from a simple generator. */
static void step_logits(float *l, int n, int step) {
    for (int i = 0; i < n; i++) l[i] = (float)sin(0.7 * i + 1.3 * step) * 3.0f;
}

static void test_seeded(void) {
    hearth_sampler_params p = params_off();
    p.seed = 1234;
    p.top_k = 20;
    p.temperature = 1.5f;
    enum { N = 64, STEPS = 500 };
    float l[N];
    hearth_sampler *a = hearth_sampler_new(&p, N), *b = hearth_sampler_new(&p, N);
    p.seed = 1235;
    hearth_sampler *c = hearth_sampler_new(&p, N);
    hearth_token seq[STEPS];
    int same_ab = 0, same_ac = 0;
    for (int t = 0; t < STEPS; t++) {
        step_logits(l, N, t);
        hearth_token x = hearth_sample(a, l, seq, t), y = hearth_sample(b, l, seq, t), z = hearth_sample(c, l, seq, t);
        seq[t] = x;
        same_ab += x == y;
        same_ac += x == z;
    }
    CHECK(same_ab == STEPS, "same seed, same picks (%d/%d)", same_ab, STEPS);
    CHECK(same_ac < STEPS - 50, "another seed gives other picks (%d/%d same)", same_ac, STEPS);
    hearth_sampler_free(a);
    hearth_sampler_free(b);
    hearth_sampler_free(c);

    /* a new sampler with the same seed replays the sequence */
    p.seed = 1234;
    a = hearth_sampler_new(&p, N);
    int replay = 0;
    for (int t = 0; t < STEPS; t++) {
        step_logits(l, N, t);
        replay += hearth_sample(a, l, seq, t) == seq[t];
    }
    CHECK(replay == STEPS, "replay with the same seed (%d/%d)", replay, STEPS);
    hearth_sampler_free(a);
}

/* Chi-square of 20000 seeded draws against the candidate probabilities. */
static double chi_square(hearth_sampler_params p, const float *logits, int n, int draws, int *outside) {
    hearth_sampler *s = hearth_sampler_new(&p, n);
    hearth_token ids[16];
    float probs[16];
    int m = hearth_sampler_candidates(s, logits, NULL, 0, ids, probs, 16);
    long count[16] = {0};
    *outside = 0;
    for (int d = 0; d < draws; d++) {
        hearth_token t = hearth_sample(s, logits, NULL, 0);
        int j = 0;
        while (j < m && ids[j] != t) j++;
        if (j == m) (*outside)++;
        else count[j]++;
    }
    double chi = 0;
    for (int j = 0; j < m; j++) {
        double e = draws * (double)probs[j];
        chi += (count[j] - e) * (count[j] - e) / e;
    }
    hearth_sampler_free(s);
    return chi;
}

static void test_distribution(void) {
    const float l[6] = {0.0f, 1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
    hearth_sampler_params p = params_off();
    p.seed = 42;
    int outside;
    double chi = chi_square(p, l, 6, 20000, &outside);
    CHECK(chi < 20.52 && outside == 0, "6 tokens: chi-square %.2f (df 5, p=0.001 bound 20.52), %d outside", chi, outside);
    p.temperature = 0.7f;
    p.top_k = 3;
    p.seed = 7;
    chi = chi_square(p, l, 6, 20000, &outside);
    CHECK(chi < 13.82 && outside == 0, "top-k 3: chi-square %.2f (df 2, bound 13.82), %d outside", chi, outside);
}

/* ---- the chain against a full-sort reference on a large vocabulary ---- */

typedef struct { int id; double l, p, key; } ref_cand;

static int by_logit(const void *a, const void *b) {
    const ref_cand *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return x->id - y->id;
}
static int by_key(const void *a, const void *b) {
    const ref_cand *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->id - y->id;
}
static void ref_norm(ref_cand *c, int n) {
    double mx = c[0].l, sum = 0;
    for (int i = 1; i < n; i++) if (c[i].l > mx) mx = c[i].l;
    for (int i = 0; i < n; i++) sum += (c[i].p = exp(c[i].l - mx));
    for (int i = 0; i < n; i++) c[i].p /= sum;
}
static int ref_mass(ref_cand *c, int n, double mass) {
    double cum = 0;
    for (int i = 0; i < n; i++) if ((cum += c[i].p) >= mass) return i + 1;
    return n;
}

/* The chain's truncation stages done the obvious way: sort everything. */
static int ref_chain(const float *logits, int n, hearth_sampler_params p, ref_cand *c) {
    for (int i = 0; i < n; i++) c[i] = (ref_cand){i, logits[i] / (p.temperature > 0 ? p.temperature : 1), 0, 0};
    qsort(c, (size_t)n, sizeof *c, by_logit);
    if (p.top_k > 0 && p.top_k < n) n = p.top_k;
    if (p.top_p < 1) { ref_norm(c, n); n = ref_mass(c, n, p.top_p); }
    if (p.min_p > 0) {
        int k = 0;
        for (int i = 0; i < n; i++) if (exp(c[i].l - c[0].l) >= p.min_p) c[k++] = c[i];
        n = k;
    }
    if (p.typical_p < 1) {
        ref_norm(c, n);
        double h = 0;
        for (int i = 0; i < n; i++) h -= c[i].p * log(c[i].p);
        for (int i = 0; i < n; i++) c[i].key = fabs(-log(c[i].p) - h);
        qsort(c, (size_t)n, sizeof *c, by_key);
        n = ref_mass(c, n, p.typical_p);
        qsort(c, (size_t)n, sizeof *c, by_logit);
    }
    ref_norm(c, n);
    return n;
}

static uint64_t lcg_state = 88172645463325252ull;
static double rnd(void) {
    lcg_state ^= lcg_state << 13; lcg_state ^= lcg_state >> 7; lcg_state ^= lcg_state << 17;
    return (double)(lcg_state >> 11) * 0x1.0p-53;
}
static void random_logits(float *l, int n, double scale) {
    for (int i = 0; i < n; i++) {
        double g = rnd() + rnd() + rnd() + rnd() - 2.0;   /* roughly normal */
        l[i] = (float)(g * scale + (rnd() < 0.001 ? 8.0 : 0.0));
    }
}

static void compare_with_reference(const char *what, hearth_sampler_params p, const float *logits, int n) {
    ref_cand *ref = malloc((size_t)n * sizeof *ref);
    hearth_token *ids = malloc((size_t)n * sizeof *ids);
    float *probs = malloc((size_t)n * sizeof *probs);
    REQUIRE(ref && ids && probs, "oom");
    hearth_sampler *s = hearth_sampler_new(&p, n);
    int want = ref_chain(logits, n, p, ref);
    int got = hearth_sampler_candidates(s, logits, NULL, 0, ids, probs, n);
    CHECK(got == want, "%s: %d survivors, reference %d", what, got, want);
    int bad = 0;
    for (int i = 0; i < got && i < want; i++)
        if (ids[i] != ref[i].id || fabs(probs[i] - ref[i].p) > 1e-6) bad++;
    CHECK(bad == 0, "%s: %d survivors differ from the reference", what, bad);
    if (p.temperature <= 0 && want > 0) {
        /* greedy must pick the best survivor */
        CHECK(hearth_sample(s, logits, NULL, 0) == ref[0].id, "%s: greedy pick", what);
    }
    hearth_sampler_free(s);
    free(ref);
    free(ids);
    free(probs);
}

static void test_large_vocab(void) {
    enum { N = 32000 };
    float *l = malloc(N * sizeof *l);
    REQUIRE(l, "oom");
    for (int round = 0; round < 3; round++) {
        random_logits(l, N, round == 0 ? 1.0 : round == 1 ? 3.0 : 0.3);
        hearth_sampler_params p = params_off();
        p.top_k = 40;
        compare_with_reference("top-k 40", p, l, N);
        p.top_k = 1000;
        compare_with_reference("top-k 1000", p, l, N);
        p.top_k = 20000;
        compare_with_reference("top-k 20000", p, l, N);
        p = params_off();
        p.top_p = 0.9f;
        compare_with_reference("top-p 0.9", p, l, N);
        p.top_p = 0.3f;
        compare_with_reference("top-p 0.3", p, l, N);
        p = params_off();
        p.min_p = 0.05f;
        compare_with_reference("min-p 0.05", p, l, N);
        p = params_off();
        p.typical_p = 0.9f;
        compare_with_reference("typical 0.9", p, l, N);
        p = hearth_sampler_default_params();
        compare_with_reference("defaults", p, l, N);
        p.top_k = 1000;
        p.top_p = 0.98f;
        p.min_p = 0.01f;
        p.typical_p = 0.95f;
        p.temperature = 0.7f;
        compare_with_reference("everything", p, l, N);
        p.temperature = 0;
        compare_with_reference("everything, greedy", p, l, N);
    }
    /* exact mass boundaries past the small-range path: 1024 equal logits, p = 1/1024 each, sums exact */
    enum { F = 1024 };
    for (int i = 0; i < F; i++) l[i] = 0.0f;
    hearth_sampler_params p = params_off();
    int wrong = 0;
    for (int j = 1; j < F; j++) {   /* top-p j/1024 keeps exactly j */
        p.top_p = (float)j / F;
        hearth_sampler *s = hearth_sampler_new(&p, F);
        wrong += hearth_sampler_candidates(s, l, NULL, 0, NULL, NULL, 0) != j;
        hearth_sampler_free(s);
    }
    CHECK(wrong == 0, "flat 1024: top-p j/1024 keeps j tokens (%d wrong)", wrong);
    p.top_p = 0.75f;
    compare_with_reference("top-p 0.75 flat", p, l, F);
    p = params_off();
    p.typical_p = 0.25f;
    compare_with_reference("typical 0.25 flat", p, l, F);
    free(l);
}

/* ---- log-probabilities ---- */

static void test_logprobs_small(void) {
    const float l[5] = {0.0f, 0.0f, (float)M_LN2, -INFINITY, NAN};   /* p = 1/4, 1/4, 1/2, 0, 0 */
    float chosen, top[5];
    hearth_token ids[5];
    CHECK(hearth_logprobs(l, 5, 1, 3, &chosen, ids, top) == 3, "count");
    CHECK(fabs(chosen - log(0.25)) < 1e-6, "chosen logprob %f", chosen);
    CHECK(ids[0] == 2 && ids[1] == 0 && ids[2] == 1, "top ids %d %d %d", ids[0], ids[1], ids[2]);
    CHECK(fabs(top[0] - log(0.5)) < 1e-6 && fabs(top[1] - log(0.25)) < 1e-6 && fabs(top[2] - log(0.25)) < 1e-6,
          "top logprobs %f %f %f", top[0], top[1], top[2]);
    CHECK(hearth_logprobs(l, 5, 0, 10, NULL, ids, top) == 5, "top_k beyond the vocabulary");
    CHECK(ids[3] == 3 && ids[4] == 4 && top[3] == -INFINITY && top[4] == -INFINITY, "masked last, by id");
    CHECK(hearth_logprobs(l, 5, 3, 0, &chosen, NULL, NULL) == 0 && chosen == -INFINITY, "-inf logit: -inf logprob");
    CHECK(hearth_logprobs(l, 5, 5, 0, &chosen, NULL, NULL) == -1, "chosen out of range");
    CHECK(hearth_logprobs(l, 5, 0, 2, NULL, NULL, top) == -1, "missing output");
    const float dead[2] = {-INFINITY, NAN};
    CHECK(hearth_logprobs(dead, 2, 0, 1, &chosen, ids, top) == -1, "nothing finite");
    const float big[3] = {1000.0f, 999.0f, -1000.0f};   /* stability: no overflow */
    CHECK(hearth_logprobs(big, 3, 1, 0, &chosen, NULL, NULL) == 0, "large logits");
    CHECK(fabs(chosen - (-1.0 - log1p(exp(-1.0)))) < 1e-5, "large logits: %f", chosen);
}

static void test_logprobs_large(void) {
    enum { N = 32000 };
    float *l = malloc(N * sizeof *l), *top = malloc(N * sizeof *top);
    hearth_token *ids = malloc(N * sizeof *ids);
    REQUIRE(l && top && ids, "oom");
    random_logits(l, N, 4.0);
    CHECK(hearth_logprobs(l, N, 0, N, NULL, ids, top) == N, "full top list");
    double sum = 0;
    int unsorted = 0;
    for (int i = 0; i < N; i++) {
        sum += exp((double)top[i]);
        if (i > 0 && top[i] > top[i - 1]) unsorted++;
    }
    CHECK(fabs(sum - 1.0) < 1e-4, "exp(logprobs) sums to %.8f", sum);
    CHECK(unsorted == 0, "%d entries out of order", unsorted);
    float chosen, top5[5];
    hearth_token ids5[5];
    hearth_token pick = ids[17];
    CHECK(hearth_logprobs(l, N, pick, 5, &chosen, ids5, top5) == 5, "top 5");
    CHECK(chosen == top[17], "chosen logprob matches its entry in the full list");
    for (int i = 0; i < 5; i++) CHECK(ids5[i] == ids[i] && top5[i] == top[i], "top-5 entry %d matches", i);
    free(l);
    free(top);
    free(ids);
}

/* ---- the words-starting constraint ---- */

static void test_words_predicate(void) {
    const char *bw = "BW";
    struct { bool in_word; const char *piece; bool want; } cases[] = {
        {false, " big", true}, {false, " Big", true}, {false, "big", true}, {false, " wolf", true},
        {false, " cat", false}, {false, " big wolf", true}, {false, " big cat", false}, {false, "s", false},
        {false, ", ", true}, {false, ".", true}, {false, "", true}, {false, "\n", true}, {false, " ", true},
        {false, "!?\n\n", true}, {false, "\"Bob", true}, {false, "\"Cat", false}, {false, "'bob", true},
        {false, "'cat", false}, {false, "42", false}, {false, " wolf.\nBig", true}, {false, " wolf.\nCat", false},
        {true, "s", true}, {true, "ing", true}, {true, "s wolf", true}, {true, "s cat", false},
        {true, " cat", false}, {true, " bat", true}, {true, "'t", true}, {true, "-cat", false},
        {true, "-wolf", true}, {true, ".", true}, {true, "\ncat", false},
        {false, " \xc3\xbc" "ber", false},          /* über: not an allowed letter */
        {true, "\xc3\xa9", true},                   /* é continuing a word */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(hearth_words_starting_allow(bw, cases[i].in_word, cases[i].piece) == cases[i].want,
              "letters BW, in_word %d, piece \"%s\": want %d", cases[i].in_word, cases[i].piece, cases[i].want);
    CHECK(hearth_words_starting_allow("B4", false, "42"), "digits count as letters when listed");
    CHECK(hearth_words_starting_allow("b", false, " Bob"), "case-insensitive letters");
    CHECK(hearth_words_starting_allow("B\xc3\xa9", false, " \xc3\xa9lan"), "non-ASCII allowed letter");
    CHECK(hearth_words_starting_allow("B\xc3\xa9", false, "\xc3"), "first byte of an allowed character");
    CHECK(!hearth_words_starting_allow("BW", false, "\xc3"), "first byte of a character not allowed");
    CHECK(!hearth_words_starting_allow("B\xc3\xa9", false, " \xc3\xa8"), "è is not é");
    CHECK(hearth_words_starting_allow("BW", false, NULL), "NULL piece (control token) is allowed");
    CHECK(hearth_words_starting_allow(NULL, false, " cat"), "NULL letters: no constraint");

    CHECK(hearth_words_ends_in_word(false, " big"), "ends in word");
    CHECK(!hearth_words_ends_in_word(true, " "), "space ends the word");
    CHECK(!hearth_words_ends_in_word(true, "big."), "punctuation ends the word");
    CHECK(!hearth_words_ends_in_word(true, "big-"), "hyphen ends the word");
    CHECK(hearth_words_ends_in_word(true, "'"), "apostrophe keeps the word");
    CHECK(!hearth_words_ends_in_word(false, "'"), "apostrophe starts no word");
    CHECK(!hearth_words_ends_in_word(false, ""), "empty keeps false");
    CHECK(hearth_words_ends_in_word(true, ""), "empty keeps true");
    CHECK(hearth_words_ends_in_word(false, "Caf\xc3\xa9"), "UTF-8 word");
}

static void test_words_constraint(void) {
    static const char *const pieces[NV] = {"", " big", " cat", "s", " wolf", ".", " Bob", NULL};
    const float l[NV] = {0, 1, 5, 4, 2, 0.5f, 1.5f, 0};
    hearth_words_constraint wc;
    hearth_words_constraint_init(&wc, "BW", pieces, NV);
    hearth_sampler_params p = params_off();
    p.temperature = 0;
    hearth_sampler *s = hearth_sampler_new(&p, NV);
    hearth_sampler_set_allow(s, hearth_words_constraint_allow, &wc);
    hearth_sampler_set_accept_hook(s, hearth_words_constraint_accept, &wc);

    double got[NV];
    CHECK(probs_by_id(s, l, NULL, 0, got) == 6, "start of reply: 6 allowed tokens");
    CHECK(got[2] == 0 && got[3] == 0, "start: ' cat' and 's' masked");
    hearth_token t = hearth_sample(s, l, NULL, 0);
    CHECK(t == 4, "start: ' wolf' (%d)", t);
    hearth_sampler_accept(s, t);
    CHECK(wc.in_word, "inside 'wolf'");
    CHECK(probs_by_id(s, l, NULL, 0, got) == 7 && got[3] > 0 && got[2] == 0, "after ' wolf': 's' allowed, ' cat' not");
    t = hearth_sample(s, l, NULL, 0);
    CHECK(t == 3, "continues the word with 's' (%d)", t);
    hearth_sampler_accept(s, t);
    hearth_sampler_accept(s, 5);   /* "." */
    CHECK(!wc.in_word, "after '.'");
    CHECK(hearth_sample(s, l, NULL, 0) == 4, "after '.': 's' masked again");
    hearth_sampler_accept(s, 7);   /* control token: no change */
    CHECK(!wc.in_word, "control token leaves the state");
    hearth_sampler_free(s);
}

/* ---- API edges ---- */

static void test_api(void) {
    hearth_sampler_params d = hearth_sampler_default_params();
    CHECK(d.temperature == 0.8f && d.top_k == 40 && d.top_p == 0.95f && d.min_p == 0.05f && d.typical_p == 1.0f &&
          d.repeat_penalty == 1.0f && d.frequency_penalty == 0 && d.presence_penalty == 0 && d.repeat_last_n == 64 &&
          !d.least_likely && d.seed == 0, "defaults");
    CHECK(hearth_sampler_new(&d, 0) == NULL, "empty vocabulary");
    hearth_sampler *s = hearth_sampler_new(NULL, NV);
    CHECK(s != NULL, "NULL params: defaults");
    hearth_token ids[2];
    float probs[2];
    hearth_sampler_params p = params_off();
    hearth_sampler_free(s);
    s = hearth_sampler_new(&p, NV);
    CHECK(hearth_sampler_candidates(s, L8, NULL, 0, ids, probs, 2) == NV, "count beyond cap");
    CHECK(ids[0] == 3 && ids[1] == 1, "cap keeps the most probable");
    CHECK(hearth_sampler_candidates(s, L8, NULL, 0, NULL, NULL, 2) == -1, "cap without buffers");
    CHECK(hearth_sample(s, NULL, NULL, 0) == -1, "NULL logits");
    hearth_sampler_accept(s, 3);   /* no hook: nothing happens */
    hearth_sampler_free(s);
    hearth_sampler_free(NULL);
}

int main(void) {
    test_no_stages();
    test_top_k();
    test_top_p();
    test_min_p();
    test_typical();
    test_temperature();
    test_penalties();
    test_bias();
    test_allow();
    test_stage_order();
    test_greedy();
    test_least_likely();
    test_seeded();
    test_distribution();
    test_large_vocab();
    test_logprobs_small();
    test_logprobs_large();
    test_words_predicate();
    test_words_constraint();
    test_api();
    TEST_DONE();
}
