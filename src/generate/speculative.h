/* speculative.h — speculative decoding's building blocks, shared by the CLI commands and the server.
 *
 * A drafter (a small model with the target's vocabulary, its own KV cache per sequence) or n-gram lookup in the
 * prompt and history proposes tokens; the target decodes the pending token and the k proposals in one batch, and
 * the caller samples each row in turn with its own sampler, exactly as plain decoding would (one sample per
 * emitted token, none for rows past the first mismatch). A proposal is kept only while it equals the token the
 * target sampled. The target's logits are bit-identical whatever the batch size, so the output is token for token
 * that of plain decoding, for greedy and seeded sampling alike: speculation changes only the speed.
 *
 * Per sequence, with toks[0..n) the tokens so far whose last one (the pending token) is not yet decoded:
 *   spec_begin(&s, ctx, seq, drafter, params, toks, n, k_max, grammar, &err);   -> s.tok[0..s.n) to decode
 *   decode s.tok with logits for every row; then row = s.row: sample t from it, emit it, and
 *   if (!spec_take(&s, t)) start again with spec_begin (t is now the pending token). */
#ifndef HEARTH_SPECULATIVE_H
#define HEARTH_SPECULATIVE_H

#include "hearth.h"

#define SPEC_MAX_DRAFT 64

typedef struct {
    int n_max;            /* most tokens proposed per step (<= SPEC_MAX_DRAFT); 0 = speculation off */
    int n_min;            /* fewer proposals than this are not verified */
    float p_min;          /* the drafter stops when its top token's probability is below this */
    bool draft;           /* use the drafter (when there is one) */
    bool ngram;           /* n-gram lookup: alone, or when the drafter proposes fewer than n_min (or none) */
    int ngram_min, ngram_max;   /* the history's last ngram_min tokens looked up earlier in it, matches compared back over up to ngram_max */
} spec_params;
/* n_max 8, n_min 0, p_min 0, draft on, ngram off, n-grams of 2..4 tokens. */
spec_params spec_default_params(void);

/* Whether the draft model's vocabulary is the target's (tokenizer type, size, special tokens, every token's text):
 * 0, or -1 with a one-line error naming the first token that differs. */
int spec_vocab_check(const hearth_model *target, const hearth_model *draft, hearth_err *err);

/* A draft model with its own context of n_seq sequences of n_ctx tokens (n_threads as the target's). The vocabulary
 * is checked against the target's. NULL with a one-line error. */
typedef struct spec_drafter spec_drafter;
spec_drafter *spec_drafter_new(const hearth_model *target, hearth_model *draft, int n_ctx, int n_seq, int n_threads,
                               hearth_err *err);
void spec_drafter_free(spec_drafter *d);
/* The drafter's memory: its weights and its KV cache (all sequences). */
size_t spec_drafter_bytes(const spec_drafter *d);
/* Forget what sequence seq of the drafter holds (a new request on a server slot). */
void spec_drafter_reset(spec_drafter *d, int seq);

/* Proposes up to k_max tokens to follow toks[0..n): the drafter's greedy continuation (stopping below p_min, or at
 * an end-of-generation token), else the n-gram lookup; with a grammar, only the prefix it allows. Returns the count
 * (0 when fewer than n_min), or -1 with err (the drafter's decode failed). */
int spec_propose(spec_drafter *d, int seq, const spec_params *p, const hearth_token *toks, int n, int k_max,
                 hearth_grammar *g, hearth_token *out, hearth_err *err);
/* The n-gram lookup alone: the tokens that followed an earlier occurrence of toks' last ngram_min tokens, matched
 * back over up to ngram_max (the occurrence that matches longest, the latest of equals), k_max of them: past the history's end the copy
 * continues through the proposals, so a repeating stretch is drafted in full. */
int spec_ngram(const spec_params *p, const hearth_token *toks, int n, int k_max, hearth_token *out);

/* One sequence's verification batch. */
typedef struct {
    hearth_token tok[SPEC_MAX_DRAFT + 1];   /* the pending token, then the proposals */
    int n;                 /* rows to decode */
    int row;               /* the row whose logits give the next token */
    long drafted, accepted;
} spec_seq;
/* Cuts sequence seq of ctx back to n - 1 tokens (dropping rejected proposals) and fills s with the pending token
 * toks[n - 1] and up to k_max proposals (0 with p == NULL or n_max 0: plain decoding), no more than the sequence
 * can take and still be cut back (hearth_seq_cut_room: a recurrent model drafts only within its state's chunk of
 * 64 positions, and decodes the chunk's last two plainly). 0, or -1 with err. */
int spec_begin(spec_seq *s, hearth_ctx *ctx, int seq, spec_drafter *d, const spec_params *p, const hearth_token *toks,
               int n, int k_max, hearth_grammar *g, hearth_err *err);
/* t was sampled from row s->row and emitted: true when it is the next row's token (whose logits are then next). */
bool spec_take(spec_seq *s, hearth_token t);

#endif
