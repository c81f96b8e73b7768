/* speculative.c — speculative decoding (see speculative.h): the drafter with its own KV cache per sequence, n-gram
 * lookup, the vocabulary check, and the bookkeeping of one sequence's verification batch. The drafter proposes its
 * greedy continuation; the target's sampling decides, so proposals only change how many tokens one decode yields. */
#include "generate/speculative.h"

#include "common.h"
#include "generate/grammar.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

spec_params spec_default_params(void) {
    return (spec_params){ .n_max = 8, .n_min = 0, .p_min = 0, .draft = true, .ngram = false, .ngram_min = 2, .ngram_max = 4 };
}

/* ---- vocabulary ---- */

static void quoted(const hearth_model *m, hearth_token t, char *out, int cap) {
    char piece[64];
    int n = hearth_token_text(m, t, piece, sizeof piece);
    if (n > (int)sizeof piece) n = (int)sizeof piece;
    int w = 0;
    for (int i = 0; i < n && w < cap - 5; i++) {
        unsigned char c = (unsigned char)piece[i];
        w += c < 0x20 || c == 0x7f ? snprintf(out + w, (size_t)(cap - w), "\\x%02x", c) : (out[w] = (char)c, 1);
    }
    out[w] = 0;
}

int spec_vocab_check(const hearth_model *target, const hearth_model *draft, hearth_err *err) {
    if (!hearth_model_has_tokenizer(target) || !hearth_model_has_tokenizer(draft))
        return herr(err, "speculative decoding needs both models' tokenizers");
    hearth_model_info ti, di;
    hearth_model_get_info(target, &ti);
    hearth_model_get_info(draft, &di);
    int n = ti.n_vocab < di.n_vocab ? ti.n_vocab : di.n_vocab;
    for (int t = 0; t < n; t++) {
        char a[256], b[256];
        int la = hearth_token_text(target, t, a, sizeof a), lb = hearth_token_text(draft, t, b, sizeof b);
        if (la != lb || memcmp(a, b, (size_t)(la < (int)sizeof a ? la : (int)sizeof a))) {
            char qa[96], qb[96];
            quoted(target, t, qa, sizeof qa);
            quoted(draft, t, qb, sizeof qb);
            return herr(err, "the draft model's vocabulary differs from the target's at token %d: '%s' vs '%s'", t, qb, qa);
        }
    }
    char ta[64], da[64];
    int tl = hearth_model_meta_str(target, "tokenizer.ggml.model", ta, sizeof ta);
    int dl = hearth_model_meta_str(draft, "tokenizer.ggml.model", da, sizeof da);
    if (tl >= 0 && dl >= 0 && strcmp(ta, da))
        return herr(err, "the draft model's tokenizer is '%s', the target's '%s': their vocabularies differ", da, ta);
    if (ti.n_vocab != di.n_vocab)
        return herr(err, "the draft model's vocabulary has %d tokens, the target's %d", di.n_vocab, ti.n_vocab);
    if (hearth_token_bos(target) != hearth_token_bos(draft) || hearth_token_eos(target) != hearth_token_eos(draft))
        return herr(err, "the draft model's BOS/EOS tokens (%d/%d) are not the target's (%d/%d)", hearth_token_bos(draft),
                    hearth_token_eos(draft), hearth_token_bos(target), hearth_token_eos(target));
    return 0;
}

/* ---- drafter ---- */

struct spec_drafter {
    hearth_model *m;
    hearth_ctx *c;
    int n_seq, n_ctx, n_vocab;
    hearth_token **held;   /* per sequence: the tokens its KV cache holds */
    int *n_held;
    int last_row;          /* the row of the last decode that holds logits */
};

void spec_drafter_free(spec_drafter *d) {
    if (!d) return;
    for (int s = 0; d->held && s < d->n_seq; s++) free(d->held[s]);
    free(d->held);
    free(d->n_held);
    hearth_ctx_free(d->c);
    free(d);
}

spec_drafter *spec_drafter_new(const hearth_model *target, hearth_model *draft, int n_ctx, int n_seq, int n_threads,
                               hearth_err *err) {
    if (spec_vocab_check(target, draft, err)) return NULL;
    hearth_model_info di;
    hearth_model_get_info(draft, &di);
    if (di.is_encoder) return herr(err, "the draft model is an encoder (%s): it cannot draft", di.arch), NULL;
    spec_drafter *d = calloc(1, sizeof *d);
    if (!d) return herr(err, "out of memory"), NULL;
    d->m = draft, d->n_seq = n_seq, d->n_vocab = di.n_vocab;
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = n_ctx, cp.n_seq = n_seq, cp.n_threads = n_threads;
    if (hearth_ctx_new(draft, &cp, &d->c, err)) { spec_drafter_free(d); return NULL; }
    d->n_ctx = hearth_ctx_n_ctx(d->c);
    d->held = calloc((size_t)n_seq, sizeof *d->held);
    d->n_held = calloc((size_t)n_seq, sizeof *d->n_held);
    for (int s = 0; d->held && s < n_seq; s++)
        if (!(d->held[s] = malloc((size_t)d->n_ctx * sizeof **d->held))) break;
    if (!d->held || !d->n_held || !d->held[n_seq - 1]) { spec_drafter_free(d); return herr(err, "out of memory"), NULL; }
    return d;
}

size_t spec_drafter_bytes(const spec_drafter *d) {
    hearth_model_info di;
    hearth_model_get_info(d->m, &di);
    return (size_t)di.weight_bytes + hearth_kv_token_bytes(d->c) * (size_t)d->n_ctx * (size_t)d->n_seq;
}

void spec_drafter_reset(spec_drafter *d, int seq) {
    if (!d || seq < 0 || seq >= d->n_seq) return;
    hearth_seq_truncate(d->c, seq, 0);
    d->n_held[seq] = 0;
}

/* The most likely token (ties: lower id) and its probability. */
static hearth_token top_token(const float *l, int n, float *p) {
    int best = 0;
    for (int i = 1; i < n; i++) if (l[i] > l[best]) best = i;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += isnan(l[i]) ? 0 : exp((double)l[i] - l[best]);
    *p = sum > 0 ? (float)(1 / sum) : 0;
    return best;
}

/* Decodes toks[0..n) into seq after what it holds, keeping the record of held tokens. -1 with err. */
static int drafter_feed(spec_drafter *d, int seq, const hearth_token *toks, int n, hearth_err *err) {
    while (n > 0) {
        int k = n < 512 ? n : 512;
        hearth_batch b = { .n = k, .tokens = toks, .seq = NULL };
        int32_t seqs[512];
        if (seq) {
            for (int i = 0; i < k; i++) seqs[i] = seq;
            b.seq = seqs;
        }
        if (hearth_decode(d->c, &b, err)) return -1;
        d->last_row = k - 1;
        memcpy(d->held[seq] + d->n_held[seq], toks, (size_t)k * sizeof *toks);
        d->n_held[seq] += k;
        toks += k, n -= k;
    }
    return 0;
}

/* The drafter's greedy continuation of toks[0..n), at most k_max tokens, stopping below p_min or at the end of
 * generation. Its cache keeps the longest prefix it shares with toks. */
static int drafter_propose(spec_drafter *d, int seq, const spec_params *p, const hearth_token *toks, int n, int k_max,
                           hearth_token *out, hearth_err *err) {
    if (n + k_max > d->n_ctx) k_max = d->n_ctx - n;
    if (k_max <= 0 || n <= 0) return 0;
    int keep = 0, held = d->n_held[seq];
    while (keep < held && keep < n - 1 && d->held[seq][keep] == toks[keep]) keep++;   /* the last one is fed again */
    hearth_seq_truncate(d->c, seq, keep);
    keep = hearth_seq_len(d->c, seq);   /* a sliding-window drafter may have cleared the sequence */
    d->n_held[seq] = keep;
    if (drafter_feed(d, seq, toks + keep, n - keep, err)) return -1;
    int k = 0;
    for (;;) {
        float pr;
        hearth_token t = top_token(hearth_logits(d->c, d->last_row), d->n_vocab, &pr);
        if (pr < p->p_min) break;
        out[k++] = t;
        if (k == k_max || hearth_token_is_eog(d->m, t)) break;
        if (drafter_feed(d, seq, &t, 1, err)) return -1;
    }
    return k;
}

/* ---- n-gram lookup ---- */

int spec_ngram(const spec_params *p, const hearth_token *toks, int n, int k_max, hearth_token *out) {
    const int lo = p->ngram_min > 1 ? p->ngram_min : 1, hi = p->ngram_max > lo ? p->ngram_max : lo;
    if (n <= lo) return 0;
    /* Every earlier occurrence of the last lo tokens, scored by how far back it keeps matching (up to hi tokens):
     * the longest match wins, the latest of equals. */
    int at = -1, best = 0;
    for (int j = n - lo - 1; j >= 0; j--) {
        if (toks[j] != toks[n - lo] || memcmp(toks + j, toks + n - lo, (size_t)lo * sizeof *toks)) continue;
        int m = lo;
        while (m < hi && m <= j + lo - 1 && toks[j + lo - 1 - m] == toks[n - 1 - m]) m++;
        if (m > best) best = m, at = j + lo;
        if (best == hi) break;
    }
    if (at < 0) return 0;
    /* The tokens that followed it; past the history's end the copy goes on through the proposals themselves (a
     * repeating stretch is drafted for as long as it repeats). */
    int k = 0;
    for (int i = at; k < k_max; i++) out[k] = i < n ? toks[i] : out[i - n], k++;
    return k;
}

int spec_propose(spec_drafter *d, int seq, const spec_params *p, const hearth_token *toks, int n, int k_max,
                 hearth_grammar *g, hearth_token *out, hearth_err *err) {
    if (k_max > p->n_max) k_max = p->n_max;
    if (k_max > SPEC_MAX_DRAFT) k_max = SPEC_MAX_DRAFT;
    if (k_max <= 0) return 0;
    int k = 0;
    if (d && p->draft && (k = drafter_propose(d, seq, p, toks, n, k_max, out, err)) < 0) return -1;
    int floor = p->n_min > 1 ? p->n_min : 1;
    if (k < floor && p->ngram) {   /* the lookup's proposals when it has more */
        hearth_token alt[SPEC_MAX_DRAFT];
        int k2 = spec_ngram(p, toks, n, k_max, alt);
        if (k2 > k) memcpy(out, alt, (size_t)k2 * sizeof *alt), k = k2;
    }
    k = grammar_allowed_prefix(g, out, k);
    return k < p->n_min ? 0 : k;
}

/* ---- one sequence's verification ---- */

int spec_begin(spec_seq *s, hearth_ctx *ctx, int seq, spec_drafter *d, const spec_params *p, const hearth_token *toks,
               int n, int k_max, hearth_grammar *g, hearth_err *err) {
    hearth_seq_truncate(ctx, seq, n - 1);
    if (hearth_seq_len(ctx, seq) != n - 1)
        return herr(err, "speculative decoding: sequence %d holds %d tokens, expected %d", seq, hearth_seq_len(ctx, seq), n - 1);
    s->tok[0] = toks[n - 1];
    s->row = 0;
    const int room = hearth_seq_cut_room(ctx, seq) - 1;   /* rows past the pending one that can still be cut off */
    if (k_max > room) k_max = room;
    int k = p && p->n_max > 0 ? spec_propose(d, seq, p, toks, n, k_max, g, s->tok + 1, err) : 0;
    if (k < 0) return -1;
    s->n = 1 + k;
    s->drafted += k;
    return 0;
}

bool spec_take(spec_seq *s, hearth_token t) {
    if (s->row + 1 >= s->n || s->tok[s->row + 1] != t) return false;
    s->row++;
    s->accepted++;
    return true;
}
