/* cmd_perplexity.c — `hearth perplexity`: a model's perplexity on a text by llama.cpp's method, saving the scored
 * log-probabilities of a base run, and judging another model (e.g. a quantization) against it by KL divergence.
 *
 * Method: the text is tokenized once with BOS and cut into chunks of n_ctx tokens (text after the last whole
 * chunk is unused). Each chunk is evaluated on its own (empty KV cache) with its first token replaced by BOS, in
 * micro-batches of -b tokens; the logits at positions n_ctx/2 .. n_ctx-2 are scored against the token that
 * follows. PPL = exp(mean NLL), and its uncertainty PPL * sqrt(var(NLL) / (N - 1)) as llama.cpp gives it.
 *
 * Log-prob file (--save-logits, read by --kl-divergence), little-endian:
 *   char[4] "HLPB"; u32 version = 1; u32 n_vocab; u32 n_ctx; u32 n_chunks
 *   i32 tokens[n_chunks * n_ctx]                 the text's tokens as tokenized (BOS first, before replacement)
 *   f32 logprobs[n_chunks][n_ctx - 1 - n_ctx/2][n_vocab]   log-softmax of the logits at each scored position
 * Full f32 rows (not llama.cpp's 16-bit ones) so a model compared with itself gives KL = 0 exactly. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define LPB_MAGIC "HLPB"
#define LPB_VERSION 1u

typedef struct {
    const char *model, *text, *kl_base, *save;
    long n_ctx, n_batch, threads;
    hearth_cache_type cache_type[2];   /* K, V */
    cli_lora lora;
} ppl_opts;

/* Running sum of a quantity, for its mean and the uncertainty of the mean. */
typedef struct { double sum, sum2; long n; } stat_acc;

static void stat_add(stat_acc *s, double v) { s->sum += v; s->sum2 += v * v; s->n++; }
static double stat_mean(const stat_acc *s) { return s->n ? s->sum / s->n : 0; }
static double stat_unc(const stat_acc *s) {
    if (s->n < 2) return 0;
    double m = stat_mean(s), var = s->sum2 / s->n - m * m;
    return var > 0 ? sqrt(var / (s->n - 1)) : 0;
}

/* What the base file says about its run: header, tokens, and the stream positioned at the first row. */
typedef struct {
    FILE *f;
    uint32_t n_vocab, n_ctx, n_chunks;
    hearth_token *tokens;
} lpb_file;

/* The comparison against a base run. */
typedef struct { stat_acc nll_base, kld; long same_top; } kl_acc;

static void ppl_usage(void) {
    printf("usage: hearth perplexity [-m MODEL] -f TEXT [-c N_CTX] [-b BATCH] [-t THREADS] [-ctk T] [-ctv T] [--lora F]\n"
           "                         [--save-logits OUT.logits] [--kl-divergence BASE.logits]\n"
           "Perplexity by llama.cpp's method: the text is tokenized with BOS and cut into chunks of N_CTX tokens\n"
           "(the rest is unused); each chunk is evaluated alone with its first token replaced by BOS, and positions\n"
           "N_CTX/2 .. N_CTX-2 are scored against the next token. Prints the running estimate per chunk\n"
           "([1]x,[2]y,...) and \"Final estimate: PPL = X +/- Y\". Defaults: -c 512, -b min(N_CTX, 512), all cores.\n"
           "  -b BATCH                  tokens per decode call (micro-batch)\n"
           "  --cache-type T            KV cache type of K and V: f16 (default), bf16, q8_0, q4_0 or f32 (q8_0 and\n"
           "                            q4_0 need head sizes that are multiples of 32)\n"
           "  -ctk, --cache-type-k T    the K cache's type alone; -ctv, --cache-type-v T: the V cache's\n"
           "  --lora FILE[,FILE]        apply LoRA adapters at scale 1; --lora-scaled FILE:SCALE[,...] at SCALE\n"
           "  --lora-merge              merge them into the weights at load (requantized to each weight's type: a\n"
           "                            quantized base's logits differ slightly from the unmerged path's)\n"
           "  --save-logits OUT         write the scored positions' log-probabilities: header \"HLPB\", u32 version 1,\n"
           "                            u32 n_vocab, n_ctx, n_chunks; i32 tokens[n_chunks*n_ctx]; then f32\n"
           "                            log-softmax rows [n_chunks][n_ctx-1-n_ctx/2][n_vocab] (little-endian)\n"
           "  --kl-divergence BASE      compare this model with a saved base run on the same tokens: PPL of both,\n"
           "                            mean KL(base || this) and top-1 agreement, with uncertainties. -f is\n"
           "                            optional (the file holds the tokens); -c, if given, must match the file.\n");
}

static int parse_opts(int argc, char **argv, ppl_opts *o) {
    *o = (ppl_opts){ .n_ctx = 0, .n_batch = 0, .threads = 0, .cache_type = { HEARTH_CACHE_F16, HEARTH_CACHE_F16 } };
    for (int i = 1; i < argc; i += 2) {   /* every option but --help and --lora-merge takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { ppl_usage(); return 0; }
        else if (!strcmp(a, "--lora-merge")) { o->lora.merge = true; i--; continue; }   /* (the one switch) */
        else if (!v) return cli_fail("missing value for %s", a);
        else if (!strcmp(a, "-m")) o->model = v;
        else if (!strcmp(a, "-f")) o->text = v;
        else if (!strcmp(a, "-c")) ok = cli_int(a, v, 4, 1 << 20, &o->n_ctx);
        else if (!strcmp(a, "-b")) ok = cli_int(a, v, 1, 1 << 20, &o->n_batch);
        else if (!strcmp(a, "-t")) ok = cli_int(a, v, 1, 256, &o->threads);
        else if (!strcmp(a, "--kl-divergence")) o->kl_base = v;
        else if (!strcmp(a, "--save-logits")) o->save = v;
        else if (cli_is_cache_flag(a)) ok = cli_cache_types(a, v, o->cache_type);
        else if (!strcmp(a, "--lora") || !strcmp(a, "--lora-scaled")) ok = cli_lora_arg(a, v, &o->lora);
        else return cli_fail("unknown option '%s' for perplexity (see hearth perplexity --help)", a);
        if (!ok) return 1;
    }
    if (!o->text && !o->kl_base) return cli_fail("perplexity needs -f TEXT (see hearth perplexity --help)");
    if (o->save && o->kl_base && !strcmp(o->save, o->kl_base)) return cli_fail("--save-logits would overwrite the --kl-divergence base file");
    return -1;   /* parsed: go on */
}

/* ---- the base log-prob file ---- */

static bool rd(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

static int lpb_open(const char *path, lpb_file *b) {
    memset(b, 0, sizeof *b);
    b->f = fopen(path, "rb");
    if (!b->f) return cli_fail("cannot open %s: %s", path, strerror(errno));
    char magic[4];
    uint32_t hdr[4];
    if (!rd(b->f, magic, 4) || memcmp(magic, LPB_MAGIC, 4) || !rd(b->f, hdr, sizeof hdr) || hdr[0] != LPB_VERSION)
        return cli_fail("%s: not a version-%u hearth log-prob file (write one with --save-logits)", path, LPB_VERSION);
    b->n_vocab = hdr[1]; b->n_ctx = hdr[2]; b->n_chunks = hdr[3];
    if (b->n_vocab == 0 || b->n_vocab > (1u << 24) || b->n_ctx < 4 || b->n_ctx > (1u << 20) || b->n_chunks == 0 ||
        (uint64_t)b->n_ctx * b->n_chunks > 0x7fffffffu)
        return cli_fail("%s: bad header (n_vocab %u, n_ctx %u, n_chunks %u)", path, b->n_vocab, b->n_ctx, b->n_chunks);
    uint64_t n_tok = (uint64_t)b->n_ctx * b->n_chunks, rows = (uint64_t)(b->n_ctx - 1 - b->n_ctx / 2) * b->n_chunks;
    uint64_t want = 20 + n_tok * 4 + rows * b->n_vocab * 4;
    fseek(b->f, 0, SEEK_END);
    long size = ftell(b->f);
    if (size < 0 || (uint64_t)size != want)
        return cli_fail("%s: %ld bytes, the header says %llu (truncated or not a log-prob file)", path, size, (unsigned long long)want);
    fseek(b->f, 20, SEEK_SET);
    b->tokens = malloc((size_t)n_tok * sizeof *b->tokens);
    if (!b->tokens) return cli_fail("out of memory");
    if (!rd(b->f, b->tokens, (size_t)n_tok * 4)) return cli_fail("%s: cannot read its tokens", path);
    for (uint64_t i = 0; i < n_tok; i++)
        if (b->tokens[i] < 0 || (uint32_t)b->tokens[i] >= b->n_vocab) return cli_fail("%s: token %d out of range", path, b->tokens[i]);
    return 0;
}

static void lpb_close(lpb_file *b) {
    if (b->f) fclose(b->f);
    free(b->tokens);
    memset(b, 0, sizeof *b);
}

static int lpb_write_header(FILE *f, const char *path, int n_vocab, int n_ctx, int n_chunks, const hearth_token *tokens) {
    uint32_t hdr[4] = { LPB_VERSION, (uint32_t)n_vocab, (uint32_t)n_ctx, (uint32_t)n_chunks };
    size_t n_tok = (size_t)n_ctx * n_chunks;
    if (fwrite(LPB_MAGIC, 1, 4, f) != 4 || fwrite(hdr, 4, 4, f) != 4 || fwrite(tokens, 4, n_tok, f) != n_tok)
        return cli_fail("cannot write %s", path);
    return 0;
}

/* ---- evaluation and scoring ---- */

/* The text's tokens, tokenized once with the model's BOS. */
static hearth_token *tokenize_text(hearth_model *m, const char *path, int *n_out) {
    size_t len;
    char *text = cli_read_file(path, &len);
    if (!text) return NULL;
    hearth_token *toks = NULL;
    int n = cli_tokenize(m, text, len, true, false, &toks);
    free(text);
    if (n < 0) return NULL;
    *n_out = n;
    return toks;
}

/* Evaluates one chunk on a cleared sequence in micro-batches of n_batch, first token replaced by bos (if >= 0);
 * copies the logits of positions first .. n_ctx-2 to rows. */
static int eval_chunk(hearth_ctx *ctx, const hearth_token *chunk, int n_ctx, int n_batch, hearth_token bos,
                      int8_t *want, hearth_token *scratch, float *rows, int n_vocab) {
    int first = n_ctx / 2;
    hearth_err err;
    memcpy(scratch, chunk, (size_t)n_ctx * sizeof *scratch);
    if (bos >= 0) scratch[0] = bos;
    for (int j = 0; j < n_ctx; j++) want[j] = j >= first && j <= n_ctx - 2;
    hearth_seq_truncate(ctx, 0, 0);
    for (int j0 = 0; j0 < n_ctx; j0 += n_batch) {
        int m = n_ctx - j0 < n_batch ? n_ctx - j0 : n_batch;
        hearth_batch b = { .n = m, .tokens = scratch + j0, .want_logits = want + j0 };
        if (hearth_decode(ctx, &b, &err)) return cli_fail("%s", err.msg);
        for (int i = 0; i < m; i++) {
            if (!want[j0 + i]) continue;
            const float *l = hearth_logits(ctx, i);
            if (!l) return cli_fail("no logits for position %d", j0 + i);
            memcpy(rows + (size_t)(j0 + i - first) * n_vocab, l, (size_t)n_vocab * sizeof *l);
        }
    }
    return 0;
}

/* Log-softmax of a row in place (computed in double, stored as f32). */
static void log_softmax(float *row, int n) {
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < n; i++) if (row[i] > mx) mx = row[i];
    for (int i = 0; i < n; i++) s += exp((double)row[i] - mx);
    double lse = mx + log(s);
    for (int i = 0; i < n; i++) row[i] = (float)((double)row[i] - lse);
}

static int argmax(const float *row, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) if (row[i] > row[best]) best = i;
    return best;
}

/* KL(base || ours) of one position, both rows log-probabilities. */
static double kl_row(const float *base, const float *ours, int n) {
    double s = 0;
    for (int i = 0; i < n; i++)
        if (base[i] > -INFINITY) s += exp((double)base[i]) * ((double)base[i] - ours[i]);
    return s;
}

static void kl_score(kl_acc *k, const float *base, const float *ours, int n_vocab, hearth_token next) {
    stat_add(&k->nll_base, -(double)base[next]);
    stat_add(&k->kld, kl_row(base, ours, n_vocab));
    k->same_top += argmax(base, n_vocab) == argmax(ours, n_vocab);
}

static void print_ppl(const char *label, const stat_acc *nll) {
    double ppl = exp(stat_mean(nll));
    printf("%s%.4f +/- %.5f\n", label, ppl, ppl * stat_unc(nll));
}

static void print_kl(const char *base_path, const stat_acc *nll, const kl_acc *k) {
    long n = k->kld.n;
    double top = n ? (double)k->same_top / n : 0, top_unc = n > 1 ? sqrt(top * (1 - top) / (n - 1)) : 0;
    printf("\n====== compared with %s (%ld positions) ======\n", base_path, n);
    print_ppl("Mean PPL(base)  : ", &k->nll_base);
    print_ppl("Mean PPL(Q)     : ", nll);
    printf("Mean KLD        : %.8f +/- %.8f\n", stat_mean(&k->kld), stat_unc(&k->kld));
    printf("Same top token  : %.3f +/- %.3f %%\n", 100 * top, 100 * top_unc);
}

/* ---- the command ---- */

typedef struct {
    hearth_model *m;
    hearth_ctx *ctx;
    hearth_token *tokens;    /* n_chunks * n_ctx used */
    int n_tokens, n_ctx, n_batch, n_chunks, n_vocab;
    hearth_token bos;        /* put first in each chunk, or -1 */
    lpb_file base;
    FILE *save;
} ppl_run;

/* The tokens to evaluate and n_ctx: from the text, the base file, or both (then they must agree). */
static int setup_tokens(ppl_run *r, const ppl_opts *o) {
    if (o->kl_base && lpb_open(o->kl_base, &r->base)) return 1;
    r->n_ctx = (int)(o->n_ctx ? o->n_ctx : o->kl_base ? (long)r->base.n_ctx : 512);
    if (o->kl_base && (uint32_t)r->n_ctx != r->base.n_ctx)
        return cli_fail("%s was computed with -c %u, not %d", o->kl_base, r->base.n_ctx, r->n_ctx);
    if (o->kl_base && r->base.n_vocab != (uint32_t)r->n_vocab)
        return cli_fail("%s has a vocabulary of %u tokens, the model %d", o->kl_base, r->base.n_vocab, r->n_vocab);
    if (o->text) {
        if (!(r->tokens = tokenize_text(r->m, o->text, &r->n_tokens))) return 1;
    } else {
        r->n_tokens = (int)(r->base.n_ctx * r->base.n_chunks);
        if (!(r->tokens = malloc((size_t)r->n_tokens * sizeof *r->tokens))) return cli_fail("out of memory");
        memcpy(r->tokens, r->base.tokens, (size_t)r->n_tokens * sizeof *r->tokens);
    }
    r->n_chunks = r->n_tokens / r->n_ctx;
    if (r->n_chunks < 1) return cli_fail("%s is %d tokens, fewer than one chunk of -c %d", o->text, r->n_tokens, r->n_ctx);
    if (o->kl_base && ((uint32_t)r->n_chunks != r->base.n_chunks ||
                       memcmp(r->tokens, r->base.tokens, (size_t)r->n_chunks * r->n_ctx * sizeof *r->tokens)))
        return cli_fail("%s was computed on other tokens (%u chunks; this text gives %d): not the same text or tokenizer",
                        o->kl_base, r->base.n_chunks, r->n_chunks);
    return 0;
}

static int setup(ppl_run *r, ppl_opts *o) {
    hearth_model_info info;
    if (!(r->m = cli_load_model(o->model ? o->model : cli_default_model()))) return 1;
    hearth_model_get_info(r->m, &info);
    if (info.is_encoder) return cli_fail("%s is an encoder (%s): it has no next-token logits", o->model, info.arch);
    r->n_vocab = info.n_vocab;
    r->bos = cli_chunk_bos(r->m);
    if (setup_tokens(r, o)) return 1;
    r->n_batch = (int)(o->n_batch ? o->n_batch : 512);
    if (r->n_batch > r->n_ctx) r->n_batch = r->n_ctx;
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = r->n_ctx; cp.n_batch = r->n_batch; cp.n_threads = (int)o->threads;
    cp.cache_type = o->cache_type[0], cp.cache_type_k = o->cache_type[0], cp.cache_type_v = o->cache_type[1];
    hearth_err err;
    if (cli_lora_load(r->m, &o->lora)) return 1;   /* (--lora-merge: before the first context) */
    if (hearth_ctx_new(r->m, &cp, &r->ctx, &err)) return cli_fail("%s", err.msg);
    if (cli_lora_set(r->ctx, &o->lora)) return 1;
    if (hearth_ctx_n_ctx(r->ctx) < r->n_ctx) return cli_fail("the model allows a context of %d, not -c %d", hearth_ctx_n_ctx(r->ctx), r->n_ctx);
    if (o->save) {
        if (!(r->save = fopen(o->save, "wb"))) return cli_fail("cannot create %s: %s", o->save, strerror(errno));
        if (lpb_write_header(r->save, o->save, r->n_vocab, r->n_ctx, r->n_chunks, r->tokens)) return 1;
    }
    return 0;
}

/* Scores a chunk's rows (turned into log-probs in place) against the following tokens. */
static int score_chunk(ppl_run *r, const ppl_opts *o, int c, float *rows, float *base_rows, stat_acc *nll, kl_acc *k) {
    int first = r->n_ctx / 2, n_score = r->n_ctx - 1 - first;
    const hearth_token *next = r->tokens + (size_t)c * r->n_ctx + first + 1;
    size_t n_vals = (size_t)n_score * r->n_vocab;
    if (base_rows && !rd(r->base.f, base_rows, n_vals * sizeof *base_rows)) return cli_fail("%s: cannot read chunk %d", o->kl_base, c + 1);
    for (int j = 0; j < n_score; j++) {
        float *row = rows + (size_t)j * r->n_vocab;
        log_softmax(row, r->n_vocab);
        stat_add(nll, -(double)row[next[j]]);
        if (base_rows) kl_score(k, base_rows + (size_t)j * r->n_vocab, row, r->n_vocab, next[j]);
    }
    if (r->save && fwrite(rows, sizeof *rows, n_vals, r->save) != n_vals) return cli_fail("cannot write %s", o->save);
    return 0;
}

static int run_chunks(ppl_run *r, const ppl_opts *o) {
    int first = r->n_ctx / 2, n_score = r->n_ctx - 1 - first;
    size_t n_vals = (size_t)n_score * r->n_vocab;
    float *rows = malloc(n_vals * sizeof *rows), *base_rows = o->kl_base ? malloc(n_vals * sizeof *base_rows) : NULL;
    int8_t *want = malloc((size_t)r->n_ctx);
    hearth_token *scratch = malloc((size_t)r->n_ctx * sizeof *scratch);
    stat_acc nll = { 0 };
    kl_acc k = { 0 };
    int rc = 1;
    if (!rows || !want || !scratch || (o->kl_base && !base_rows)) { cli_fail("out of memory"); goto out; }
    fprintf(stderr, "perplexity: %d tokens, %d chunks of %d, scoring %d positions each, batch %d\n", r->n_tokens,
            r->n_chunks, r->n_ctx, n_score, r->n_batch);
    for (int c = 0; c < r->n_chunks; c++) {
        if (eval_chunk(r->ctx, r->tokens + (size_t)c * r->n_ctx, r->n_ctx, r->n_batch, r->bos, want, scratch, rows, r->n_vocab) ||
            score_chunk(r, o, c, rows, base_rows, &nll, &k))
            goto out;
        printf("[%d]%.4f,", c + 1, exp(stat_mean(&nll)));
        fflush(stdout);
    }
    printf("\n");
    print_ppl("Final estimate: PPL = ", &nll);
    if (o->kl_base) print_kl(o->kl_base, &nll, &k);
    rc = 0;
out:
    free(rows); free(base_rows); free(want); free(scratch);
    return rc;
}

int cmd_perplexity(int argc, char **argv) {
    ppl_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc >= 0) { cli_lora_free(&o.lora); return rc; }
    ppl_run r = { 0 };
    rc = setup(&r, &o) || run_chunks(&r, &o) ? 1 : 0;
    if (r.save && fclose(r.save) && !rc) rc = cli_fail("cannot write %s", o.save);
    if (rc && r.save) remove(o.save);
    lpb_close(&r.base);
    free(r.tokens);
    hearth_ctx_free(r.ctx);
    cli_lora_free(&o.lora);
    hearth_model_free(r.m);
    return rc;
}
