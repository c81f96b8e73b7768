/* sampler.c — the sampler chain: turns one row of logits into a token (see the "sampling" section of hearth.h
 * for the stage order and semantics), plus log-probabilities and the words-starting constraint.
 *
 * How it works: one pass over the vocabulary applies bias, the allow callback, the penalties and temperature,
 * and gathers the unmasked tokens into a candidate array allocated once in hearth_sampler_new. The truncation
 * stages then shrink that array in place without sorting the whole vocabulary: top-k is a heap selection or a
 * quickselect (O(n)); top-p and typical-p find their cut with a quickselect on probability mass (partition,
 * sum the better side, continue in the half holding the cut), sorting nothing but the last few candidates;
 * min-p needs only the max. Every comparison breaks ties by lower token id, so which tokens survive never
 * depends on the order of the scratch array. Random picks come from xoshiro256** seeded through splitmix64. */
#include "common.h"
#include "generate/grammar.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

/* One candidate token. `key` orders candidates for the current selection: lower key = better. */
typedef struct {
    hearth_token id;
    float logit;
    float p;
    float key;
} cand;

struct hearth_sampler {
    hearth_sampler_params par;
    int n_vocab;
    cand *c;                 /* n_vocab candidates (scratch) */
    float *bias;             /* n_vocab logit biases, 0 = none */
    bool has_bias;
    int32_t *count;          /* n_vocab; all zero between calls: occurrences in the penalty window */
    hearth_allow_fn allow;
    void *allow_user;
    hearth_accept_fn on_accept;
    void *accept_user;
    hearth_grammar *grammar;
    uint64_t rng[4];         /* xoshiro256** state */
};

/* ---- PRNG: xoshiro256**, seeded by splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(uint64_t st[4], uint64_t seed) {
    for (int i = 0; i < 4; i++) st[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t st[4]) {
    uint64_t r = rotl(st[1] * 5, 7) * 9, t = st[1] << 17;
    st[2] ^= st[0]; st[3] ^= st[1]; st[1] ^= st[2]; st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl(st[3], 45);
    return r;
}

/* Uniform double in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t st[4]) { return (double)(rng_next(st) >> 11) * 0x1.0p-53; }

/* ---- ordering and partial sorting of candidates ---- */

static bool better(const cand *a, const cand *b) { return a->key < b->key || (a->key == b->key && a->id < b->id); }

static void swap_cand(cand *a, cand *b) { cand t = *a; *a = *b; *b = t; }

/* Restores a heap whose root is its worst element, from node i down. */
static void sift_down_worst(cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(&h[w], &h[l])) w = l;
        if (r < n && better(&h[w], &h[r])) w = r;
        if (w == i) return;
        swap_cand(&h[i], &h[w]);
        i = w;
    }
}

/* Moves the k best of c[0..n) into c[0..k), arranged as a worst-at-root heap. 0 < k <= n. */
static void heap_select(cand *c, int n, int k) {
    for (int i = k / 2 - 1; i >= 0; i--) sift_down_worst(c, k, i);
    for (int i = k; i < n; i++)
        if (better(&c[i], &c[0])) { swap_cand(&c[0], &c[i]); sift_down_worst(c, k, 0); }
}

/* Sorts c[0..k) best-first (heapsort: no recursion, no allocation). */
static void sort_best_first(cand *c, int k) {
    for (int i = k / 2 - 1; i >= 0; i--) sift_down_worst(c, k, i);
    for (int end = k - 1; end > 0; end--) { swap_cand(&c[0], &c[end]); sift_down_worst(c, end, 0); }
}

/* Lomuto partition of c[lo..hi) around the median of three; returns the pivot's final index: everything
 * before it is better, everything after worse (keys never tie, thanks to the id). */
static int partition(cand *c, int lo, int hi) {
    int mid = lo + (hi - lo) / 2, last = hi - 1;
    if (better(&c[mid], &c[lo])) swap_cand(&c[mid], &c[lo]);
    if (better(&c[last], &c[lo])) swap_cand(&c[last], &c[lo]);
    if (better(&c[last], &c[mid])) swap_cand(&c[last], &c[mid]);
    swap_cand(&c[mid], &c[last]);                 /* the median is the pivot, parked at the end */
    int store = lo;
    for (int i = lo; i < last; i++)
        if (better(&c[i], &c[last])) swap_cand(&c[i], &c[store++]);
    swap_cand(&c[store], &c[last]);
    return store;
}

/* Moves the k best of c[0..n) into c[0..k), in no particular order: a heap selection for small k (one
 * comparison for most candidates), else quickselect, falling back to the heap if the pivots keep going bad. */
static void select_best(cand *c, int n, int k) {
    if (k <= 0 || k >= n) return;
    if (k <= 256) { heap_select(c, n, k); return; }
    int lo = 0, hi = n, budget = 64;
    while (hi - lo > 16 && budget-- > 0) {
        int p = partition(c, lo, hi);
        if (p == k || p + 1 == k) return;
        if (p > k) hi = p;
        else lo = p + 1;
    }
    heap_select(c + lo, hi - lo, k - lo);
}

/* Puts the k best of c[0..n) into c[0..k), sorted best-first. */
static void select_sorted(cand *c, int n, int k) {
    select_best(c, n, k);
    sort_best_first(c, HT_MIN(k, n));
}

static void key_by_logit(cand *c, int n) { for (int i = 0; i < n; i++) c[i].key = -c[i].logit; }

/* Reorders c so that c[0..m) are the m best candidates (by key), m being the fewest whose probabilities sum to
 * >= mass (all n if they never do; at least 1). A quickselect on mass: each partition sums the better side and
 * goes on in the half holding the cut, so nothing is fully sorted (expected O(n)); the last few are sorted. */
static int prefix_by_mass(cand *c, int n, double mass) {
    int lo = 0, hi = n, budget = 64;
    double need = mass;                 /* mass still needed from c[lo..) */
    while (hi - lo > 16 && budget-- > 0) {
        int p = partition(c, lo, hi);
        double better_mass = 0;
        for (int i = lo; i < p; i++) better_mass += c[i].p;
        if (better_mass >= need) { hi = p; continue; }
        need -= better_mass;
        if (c[p].p >= need) return p + 1;
        need -= c[p].p;
        lo = p + 1;
    }
    sort_best_first(c + lo, hi - lo);
    double cum = 0;
    for (int i = lo; i < hi; i++)
        if ((cum += c[i].p) >= need) return i + 1;
    return hi;
}

/* ---- stages ---- */

static float clamp_finite(double v) { return v > FLT_MAX ? FLT_MAX : v < -FLT_MAX ? -FLT_MAX : (float)v; }

static bool penalties_on(const hearth_sampler_params *p) {
    return p->repeat_last_n != 0 &&
           (p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f);
}

/* The window of history the penalties look at: its first token. */
static int window_start(const hearth_sampler_params *p, int n_history) {
    if (p->repeat_last_n < 0 || p->repeat_last_n >= n_history) return 0;
    return n_history - p->repeat_last_n;
}

/* Counts the window's in-range tokens into s->count before a pass; clear_window sets them back to 0 after it. */
static void count_window(hearth_sampler *s, const hearth_token *h, int from, int to) {
    for (int i = from; i < to; i++)
        if (h[i] >= 0 && h[i] < s->n_vocab) s->count[h[i]]++;
}

static void clear_window(hearth_sampler *s, const hearth_token *h, int from, int to) {
    for (int i = from; i < to; i++)
        if (h[i] >= 0 && h[i] < s->n_vocab) s->count[h[i]] = 0;
}

static double apply_penalty(const hearth_sampler_params *p, double l, int count) {
    l = l > 0 ? l / p->repeat_penalty : l * p->repeat_penalty;
    return l - (double)count * p->frequency_penalty - p->presence_penalty;
}

/* Stages 1-4 in one pass: writes the unmasked tokens with their adjusted logits to s->c and returns how many. */
static int gather(hearth_sampler *s, const float *logits, const hearth_token *history, int n_history) {
    const hearth_sampler_params *p = &s->par;
    bool pen = penalties_on(p) && history && n_history > 0;
    int from = pen ? window_start(p, n_history) : 0;
    if (pen) count_window(s, history, from, n_history);
    float temp = p->temperature > 0 ? p->temperature : 1.0f;
    const uint64_t *gmask = s->grammar ? grammar_mask(s->grammar) : NULL;
    if (s->grammar && !gmask) return 0;
    int n = 0;
    for (int i = 0; i < s->n_vocab; i++) {
        double l = logits[i];
        if (s->has_bias) l += s->bias[i];
        if (!(l > -INFINITY)) continue;                              /* -inf or NaN: masked */
        if (gmask && !(gmask[i >> 6] >> (i & 63) & 1)) continue;
        if (s->allow && !s->allow(s->allow_user, i)) continue;
        if (pen && s->count[i] > 0) l = apply_penalty(p, l, s->count[i]);
        if (temp != 1.0f) l /= temp;
        s->c[n].id = i;
        s->c[n].logit = clamp_finite(l);
        n++;
    }
    if (pen) clear_window(s, history, from, n_history);
    return n;
}

/* Softmax over the candidates' logits (max-subtracted, summed in double) into their p. */
static void normalize(cand *c, int n) {
    float mx = c[0].logit;
    for (int i = 1; i < n; i++) if (c[i].logit > mx) mx = c[i].logit;
    double sum = 0;
    for (int i = 0; i < n; i++) { double e = exp((double)c[i].logit - mx); c[i].p = (float)e; sum += e; }
    for (int i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
}

static int stage_top_k(cand *c, int n, int k) {
    if (k <= 0 || k >= n) return n;
    key_by_logit(c, n);
    select_best(c, n, k);
    return k;
}

static int stage_top_p(cand *c, int n, float top_p) {
    if (top_p >= 1.0f || n <= 1) return n;
    normalize(c, n);
    key_by_logit(c, n);
    return prefix_by_mass(c, n, top_p);
}

/* p_i >= min_p * p_max  <=>  l_i >= l_max + ln(min_p). Keeps the order of the survivors. */
static int stage_min_p(cand *c, int n, float min_p) {
    if (min_p <= 0.0f || n <= 1) return n;
    float mx = c[0].logit;
    for (int i = 1; i < n; i++) if (c[i].logit > mx) mx = c[i].logit;
    double threshold = mx + log(min_p);
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (c[i].logit >= threshold) c[kept++] = c[i];
    return kept;
}

/* Locally typical sampling: keys are |surprisal - entropy|, smallest first, until the mass reaches typical_p. */
static int stage_typical(cand *c, int n, float typical_p) {
    if (typical_p >= 1.0f || n <= 1) return n;
    normalize(c, n);
    double entropy = 0;
    for (int i = 0; i < n; i++) if (c[i].p > 0) entropy -= c[i].p * log(c[i].p);
    for (int i = 0; i < n; i++)
        c[i].key = c[i].p > 0 ? (float)fabs(-log(c[i].p) - entropy) : INFINITY;
    return prefix_by_mass(c, n, typical_p);
}

/* Stages 1-8; returns the number of survivors left in s->c (0: everything masked). */
static int run_chain(hearth_sampler *s, const float *logits, const hearth_token *history, int n_history) {
    const hearth_sampler_params *p = &s->par;
    int n = gather(s, logits, history, n_history);
    if (n == 0) return 0;
    n = stage_top_k(s->c, n, p->top_k);
    n = stage_top_p(s->c, n, p->top_p);
    n = stage_min_p(s->c, n, p->min_p);
    n = stage_typical(s->c, n, p->typical_p);
    return n;
}

/* ---- pick ---- */

static hearth_token pick_most_likely(const cand *c, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (c[i].logit > c[b].logit || (c[i].logit == c[b].logit && c[i].id < c[b].id)) b = i;
    return c[b].id;
}

static hearth_token pick_least_likely(const cand *c, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (c[i].logit < c[b].logit || (c[i].logit == c[b].logit && c[i].id < c[b].id)) b = i;
    return c[b].id;
}

static hearth_token pick_random(hearth_sampler *s, cand *c, int n) {
    normalize(c, n);
    double total = 0;
    for (int i = 0; i < n; i++) total += c[i].p;
    double u = rng_uniform(s->rng) * total, cum = 0;
    for (int i = 0; i < n; i++) {
        cum += c[i].p;
        if (u < cum) return c[i].id;
    }
    for (int i = n - 1; i > 0; i--) if (c[i].p > 0) return c[i].id;   /* rounding left u at the very end */
    return c[0].id;
}

/* ---- public API ---- */

hearth_sampler_params hearth_sampler_default_params(void) {
    return (hearth_sampler_params){
        .temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .typical_p = 1.0f,
        .repeat_penalty = 1.0f, .frequency_penalty = 0.0f, .presence_penalty = 0.0f, .repeat_last_n = 64,
        .least_likely = false, .seed = 0,
    };
}

hearth_sampler *hearth_sampler_new(const hearth_sampler_params *p, int n_vocab) {
    if (n_vocab <= 0) return NULL;
    hearth_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->par = p ? *p : hearth_sampler_default_params();
    s->n_vocab = n_vocab;
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->bias = calloc((size_t)n_vocab, sizeof *s->bias);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    if (!s->c || !s->bias || !s->count) { hearth_sampler_free(s); return NULL; }
    rng_seed(s->rng, s->par.seed);
    return s;
}

void hearth_sampler_free(hearth_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->bias);
    free(s->count);
    free(s);
}

/* Greedy without typical-p is the argmax of stages 1-4: top-k/p and min-p always keep it. */
static bool greedy_shortcut(const hearth_sampler_params *p) {
    return p->temperature <= 0 && !p->least_likely && p->typical_p >= 1.0f;
}

hearth_token hearth_sample(hearth_sampler *s, const float *logits, const hearth_token *history, int n_history) {
    if (!s || !logits) return -1;
    if (greedy_shortcut(&s->par)) {
        int n = gather(s, logits, history, n_history);
        return n ? pick_most_likely(s->c, n) : -1;
    }
    int n = run_chain(s, logits, history, n_history);
    if (n == 0) return -1;
    if (s->par.least_likely) return pick_least_likely(s->c, n);
    if (s->par.temperature <= 0) return pick_most_likely(s->c, n);
    return pick_random(s, s->c, n);
}

void hearth_sampler_accept(hearth_sampler *s, hearth_token t) {
    if (s && s->grammar) hearth_grammar_accept(s->grammar, t);
    if (s && s->on_accept) s->on_accept(s->accept_user, t);
}

int hearth_sampler_candidates(hearth_sampler *s, const float *logits, const hearth_token *history, int n_history,
                              hearth_token *ids, float *probs, int cap) {
    if (!s || !logits || cap < 0 || (cap > 0 && (!ids || !probs))) return -1;
    int n = run_chain(s, logits, history, n_history);
    if (n == 0) return 0;
    normalize(s->c, n);
    int k = HT_MIN(n, cap);
    key_by_logit(s->c, n);
    select_sorted(s->c, n, k);
    for (int i = 0; i < k; i++) { ids[i] = s->c[i].id; probs[i] = s->c[i].p; }
    return n;
}

int hearth_sampler_set_bias(hearth_sampler *s, hearth_token id, float bias) {
    if (!s || id < 0 || id >= s->n_vocab || isnan(bias) || bias == INFINITY) return -1;
    s->bias[id] = bias;
    if (bias != 0) s->has_bias = true;
    return 0;
}

int hearth_sampler_bias_text(hearth_sampler *s, const char *const *pieces, int n_vocab, const char *needle,
                             float bias) {
    if (!s || !pieces || !needle || !*needle || isnan(bias) || bias == INFINITY) return -1;
    int n = 0, lim = HT_MIN(n_vocab, s->n_vocab);
    for (int i = 0; i < lim; i++) {
        if (!pieces[i] || !strstr(pieces[i], needle)) continue;
        s->bias[i] += bias;
        n++;
    }
    if (n > 0 && bias != 0) s->has_bias = true;
    return n;
}

void hearth_sampler_set_grammar(hearth_sampler *s, hearth_grammar *g) {
    if (s) s->grammar = g;
}

void hearth_sampler_set_allow(hearth_sampler *s, hearth_allow_fn allow, void *user) {
    if (!s) return;
    s->allow = allow;
    s->allow_user = user;
}

void hearth_sampler_set_accept_hook(hearth_sampler *s, hearth_accept_fn on_accept, void *user) {
    if (!s) return;
    s->on_accept = on_accept;
    s->accept_user = user;
}

/* ---- log-probabilities ---- */

static float finite_or_neg_inf(float v) { return isnan(v) ? -INFINITY : v; }

static bool lp_better(float va, hearth_token ia, float vb, hearth_token ib) {
    return va > vb || (va == vb && ia < ib);
}

/* Worst-at-root heap over the parallel arrays ids/v. */
static void lp_sift_down(hearth_token *ids, float *v, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && lp_better(v[w], ids[w], v[l], ids[l])) w = l;
        if (r < n && lp_better(v[w], ids[w], v[r], ids[r])) w = r;
        if (w == i) return;
        hearth_token ti = ids[i]; ids[i] = ids[w]; ids[w] = ti;
        float tv = v[i]; v[i] = v[w]; v[w] = tv;
        i = w;
    }
}

/* The k best logits into ids/v, sorted best-first, without a scratch buffer. */
static void lp_top_k(const float *logits, int n_vocab, int k, hearth_token *ids, float *v) {
    for (int i = 0; i < k; i++) { ids[i] = i; v[i] = finite_or_neg_inf(logits[i]); }
    for (int i = k / 2 - 1; i >= 0; i--) lp_sift_down(ids, v, k, i);
    for (int i = k; i < n_vocab; i++) {
        float l = finite_or_neg_inf(logits[i]);
        if (lp_better(l, i, v[0], ids[0])) { ids[0] = i; v[0] = l; lp_sift_down(ids, v, k, 0); }
    }
    for (int end = k - 1; end > 0; end--) {
        hearth_token ti = ids[0]; ids[0] = ids[end]; ids[end] = ti;
        float tv = v[0]; v[0] = v[end]; v[end] = tv;
        lp_sift_down(ids, v, end, 0);
    }
}

/* log(sum(exp(logits))), stable; -inf if every logit is -inf or NaN. */
static double log_sum_exp(const float *logits, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) if (logits[i] > mx) mx = logits[i];
    if (mx == -INFINITY) return -INFINITY;
    if (mx == INFINITY) return INFINITY;
    double sum = 0;
    for (int i = 0; i < n; i++) if (logits[i] > -INFINITY) sum += exp((double)logits[i] - mx);
    return mx + log(sum);
}

static float logprob_of(float logit, double lse) {
    logit = finite_or_neg_inf(logit);
    return logit == -INFINITY ? -INFINITY : (float)((double)logit - lse);
}

int hearth_logprobs(const float *logits, int n_vocab, hearth_token chosen, int top_k, float *chosen_logprob,
                    hearth_token *top_ids, float *top_logprobs) {
    if (!logits || n_vocab <= 0 || top_k < 0) return -1;
    if (chosen_logprob && (chosen < 0 || chosen >= n_vocab)) return -1;
    if (top_k > 0 && (!top_ids || !top_logprobs)) return -1;
    double lse = log_sum_exp(logits, n_vocab);
    if (!isfinite(lse)) return -1;
    if (chosen_logprob) *chosen_logprob = logprob_of(logits[chosen], lse);
    int k = HT_MIN(top_k, n_vocab);
    if (k > 0) {
        lp_top_k(logits, n_vocab, k, top_ids, top_logprobs);
        for (int i = 0; i < k; i++) top_logprobs[i] = logprob_of(top_logprobs[i], lse);
    }
    return k;
}

/* ---- the words-starting constraint ---- */

static unsigned char ascii_lower(unsigned char b) { return b >= 'A' && b <= 'Z' ? (unsigned char)(b + 32) : b; }

static bool is_word_byte(unsigned char b) {
    unsigned char l = ascii_lower(b);
    return b >= 0x80 || (b >= '0' && b <= '9') || (l >= 'a' && l <= 'z');
}

/* Length of the UTF-8 character that lead byte b starts (1 for ASCII and stray bytes). */
static int utf8_len(unsigned char b) { return b < 0xc0 ? 1 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : b < 0xf8 ? 4 : 1; }

/* Bytes of the character at s that are present: its UTF-8 length, or fewer if the text stops first. */
static int char_bytes(const unsigned char *s) {
    int len = utf8_len(s[0]), n = 1;
    while (n < len && (s[n] & 0xc0) == 0x80) n++;
    return n;
}

/* Whether a word starting at s starts with one of `letters`. */
static bool starts_allowed(const char *letters, const unsigned char *s) {
    const unsigned char *l = (const unsigned char *)letters;
    if (s[0] < 0x80) {
        for (; *l; l++)
            if (*l < 0x80 && ascii_lower(*l) == ascii_lower(s[0])) return true;
        return false;
    }
    int n = char_bytes(s);
    while (*l) {
        int ln = char_bytes(l);
        if (ln >= n && memcmp(l, s, (size_t)n) == 0) return true;
        l += ln;
    }
    return false;
}

/* Walks text, updating *in_word. With letters, stops and returns false at a word start not in letters. */
static bool scan_words(const char *letters, bool *in_word, const char *text) {
    const unsigned char *p = (const unsigned char *)text;
    while (*p) {
        if (!is_word_byte(*p)) {
            if (*p != '\'') *in_word = false;   /* an apostrophe neither starts nor ends a word */
            p++;
            continue;
        }
        if (!*in_word && letters && !starts_allowed(letters, p)) return false;
        *in_word = true;
        p += *p >= 0x80 ? char_bytes(p) : 1;
    }
    return true;
}

bool hearth_words_starting_allow(const char *letters, bool in_word, const char *piece) {
    if (!piece || !letters) return true;
    return scan_words(letters, &in_word, piece);
}

bool hearth_words_ends_in_word(bool in_word, const char *text) {
    if (text) scan_words(NULL, &in_word, text);
    return in_word;
}

void hearth_words_constraint_init(hearth_words_constraint *wc, const char *letters, const char *const *pieces,
                                  int n_vocab) {
    wc->letters = letters;
    wc->pieces = pieces;
    wc->n_vocab = n_vocab;
    wc->in_word = false;
}

/* The piece of token t, or NULL if it has none (out of range, or a control token). */
static const char *wc_piece(const hearth_words_constraint *wc, hearth_token t) {
    return wc->pieces && t >= 0 && t < wc->n_vocab ? wc->pieces[t] : NULL;
}

bool hearth_words_constraint_allow(void *user, hearth_token t) {
    const hearth_words_constraint *wc = user;
    return hearth_words_starting_allow(wc->letters, wc->in_word, wc_piece(wc, t));
}

void hearth_words_constraint_accept(void *user, hearth_token t) {
    hearth_words_constraint *wc = user;
    wc->in_word = hearth_words_ends_in_word(wc->in_word, wc_piece(wc, t));
}
