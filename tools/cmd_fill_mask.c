/* cmd_fill_mask.c — `hearth fill-mask`: a masked-LM encoder (BERT / DistilBERT with an MLM head) fills each
 * [MASK] of a text: the text is tokenized as [CLS] ... [SEP] with special-token text parsed, the whole
 * sequence is evaluated at once (logits at every position), and for each mask position the top-k tokens of
 * the softmax over the vocabulary are printed, most likely first. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

typedef struct { const char *path, *text; long k, threads; bool json; } fm_opts;

static void fill_mask_usage(void) {
    printf("usage: hearth fill-mask -m MODEL [-k K] [-t THREADS] [--json] \"text with [MASK]\"\n"
           "For each [MASK] in the text, prints the K (default 5) most likely tokens and their probabilities\n"
           "(softmax over the vocabulary), one per line as \"0.1234  paris\"; masks are separated by a blank\n"
           "line. --json prints one JSON array per mask instead: [{\"token\":ID,\"piece\":\"...\",\"prob\":P},...].\n"
           "MODEL is a BERT or DistilBERT checkpoint with a masked-LM head (e.g. DistilBertForMaskedLM).\n");
}

/* Returns -1 when parsed (go on), else the exit code. */
static int fm_parse(int argc, char **argv, fm_opts *o) {
    *o = (fm_opts){ .k = 5 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fill_mask_usage(); return 0; }
        if (!strcmp(a, "--json")) { o->json = true; continue; }
        if (!strcmp(a, "-m") || !strcmp(a, "-k") || !strcmp(a, "-t")) {
            if (!v) return cli_fail("missing value for %s", a);
            i++;
            if (!strcmp(a, "-m")) o->path = v;
            else if (!cli_int(a, v, 1, !strcmp(a, "-k") ? 1 << 20 : 256, !strcmp(a, "-k") ? &o->k : &o->threads)) return 1;
        } else if (a[0] == '-' && a[1]) return cli_fail("unknown option '%s' for fill-mask (see hearth fill-mask --help)", a);
        else if (!o->text) o->text = a;
        else return cli_fail("fill-mask takes one TEXT (quote it)");
    }
    if (!o->path) return cli_fail("fill-mask needs -m MODEL (a BERT/DistilBERT masked-LM)");
    if (!o->text) return cli_fail("fill-mask needs a TEXT containing [MASK]");
    return -1;
}

/* The mask token: the id "[MASK]" tokenizes to on its own (with special tokens parsed), or -1. */
static hearth_token mask_token(const hearth_model *m) {
    hearth_token ids[8];
    hearth_err err;
    int n = hearth_tokenize(m, "[MASK]", 6, false, true, ids, 8, &err);
    return n == 1 ? ids[0] : -1;
}

/* Softmax of logits into probs (double accumulation); top k ids, most likely first, ties by lower id. */
static void top_k_probs(const float *logits, int n_vocab, int k, float *probs, hearth_token *top) {
    float mx = -INFINITY;
    for (int i = 0; i < n_vocab; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    for (int i = 0; i < n_vocab; i++) probs[i] = (float)(exp((double)logits[i] - mx) / sum);
    for (int j = 0; j < k; j++) {   /* k is small: selection */
        int best = -1;
        for (int i = 0; i < n_vocab; i++) {
            bool taken = false;
            for (int q = 0; q < j && !taken; q++) taken = top[q] == i;
            if (!taken && (best < 0 || logits[i] > logits[best])) best = i;
        }
        top[j] = best;
    }
}

/* A token's piece without the leading space a word-initial WordPiece token decodes with. */
static int piece_of(const hearth_model *m, hearth_token t, char *buf, int cap) {
    int n = hearth_token_piece(m, t, buf, cap - 1);
    if (n > cap - 1) n = cap - 1;
    int s = 0;
    while (s < n && buf[s] == ' ') s++;
    memmove(buf, buf + s, (size_t)(n - s));
    buf[n - s] = 0;
    return n - s;
}

static void json_str(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if (*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    }
    putchar('"');
}

/* Prints the top k of one mask position. */
static void print_mask(const hearth_model *m, const float *probs, const hearth_token *top, int k, bool json, bool first) {
    char piece[256];
    if (!json && !first) putchar('\n');
    if (json) putchar('[');
    for (int j = 0; j < k; j++) {
        piece_of(m, top[j], piece, sizeof piece);
        if (!json) { printf("%.4f  %s\n", (double)probs[top[j]], piece); continue; }
        printf("%s{\"token\":%d,\"piece\":", j ? "," : "", (int)top[j]);
        json_str(piece);
        printf(",\"prob\":%.6g}", (double)probs[top[j]]);
    }
    if (json) printf("]\n");
}

/* Tokenizes, evaluates and prints; returns the exit code. */
static int fill_masks(hearth_model *m, const fm_opts *o) {
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    if (!info.is_encoder) return cli_fail("%s is not a masked-LM encoder (%s): fill-mask needs a BERT/DistilBERT masked-LM", o->path, info.arch);
    hearth_token mask = mask_token(m);
    if (mask < 0) return cli_fail("the model's vocabulary has no [MASK] token");
    hearth_err err;
    size_t len = strlen(o->text);
    int cap = (int)(len + 16 > 0x7fffffff ? 0x7fffffff : len + 16), k = (int)(o->k < info.n_vocab ? o->k : info.n_vocab);
    hearth_token *ids = malloc((size_t)cap * sizeof *ids), *top = malloc((size_t)k * sizeof *top);
    int8_t *want = malloc((size_t)cap);
    float *probs = malloc((size_t)info.n_vocab * sizeof *probs);
    hearth_ctx *ctx = NULL;
    int rc = 1, n = -1, n_mask = 0;
    if (!ids || !top || !want || !probs) { cli_fail("out of memory"); goto out; }
    if ((n = hearth_tokenize(m, o->text, len, true, true, ids, cap, &err)) < 0 || n > cap) { cli_fail("%s", n < 0 ? err.msg : "token buffer too small"); goto out; }
    for (int i = 0; i < n; i++) n_mask += (want[i] = ids[i] == mask);
    if (!n_mask) { cli_fail("the text has no [MASK]"); goto out; }
    if (n > info.n_ctx_train) { cli_fail("the text is %d tokens, the model takes at most %d", n, info.n_ctx_train); goto out; }
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = cp.n_batch = n;
    cp.n_threads = (int)o->threads;
    cp.cache_type = HEARTH_CACHE_F32;
    hearth_batch b = { .n = n, .tokens = ids, .want_logits = want };
    if (hearth_ctx_new(m, &cp, &ctx, &err) || hearth_decode(ctx, &b, &err)) { cli_fail("%s", err.msg); goto out; }
    for (int i = 0, first = 1; i < n; i++) {
        if (!want[i]) continue;
        const float *lg = hearth_logits(ctx, i);
        if (!lg) { cli_fail("%s has no masked-LM head (it only embeds): fill-mask needs e.g. DistilBertForMaskedLM", o->path); goto out; }
        top_k_probs(lg, info.n_vocab, k, probs, top);
        print_mask(m, probs, top, k, o->json, first);
        first = 0;
    }
    rc = 0;
out:
    hearth_ctx_free(ctx);
    free(ids); free(top); free(want); free(probs);
    return rc;
}

int cmd_fill_mask(int argc, char **argv) {
    fm_opts o;
    int rc = fm_parse(argc, argv, &o);
    if (rc >= 0) return rc;
    hearth_model *m = cli_load_model(o.path);
    if (!m) return 1;
    rc = fill_masks(m, &o);
    hearth_model_free(m);
    return rc;
}
