/* cmd_run.c — `hearth run`: prefill the prompt (512 tokens a call, a progress line on a terminal when it takes over
 * a second), then sample and stream tokens, with the sampler chain's flags (bias, word constraint, penalties,
 * least-likely) and optional per-token log-probabilities. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "server/srv_internal.h"   /* the prompt-cache store (srv_cache.c) */
#include "generate/speculative.h"

typedef struct { long id; float bias; } id_bias;
typedef struct { const char *text; int len; float bias; } text_bias;   /* text[0..len) of an argv string */

typedef struct {
    const char *model_path, *prompt, *prompt_file, *only_words, *prompt_cache, *draft_path, *spec_mode;
    char *prompt_buf;         /* the prompt read from -f FILE or stdin (owned) */
    long n_predict, threads, n_ctx, top_k, seed, repeat_last_n, n_logprobs;
    long draft_max, draft_min, ngram_min, ngram_max;
    double draft_p_min;
    double temp, top_p, min_p, typical_p, rep, freq, pres;
    bool least_likely, json;
    cli_grammar_opts grammar;
    hearth_cache_type cache_type[2];   /* K, V */
    id_bias *logit_bias;
    text_bias *bias_text;
    int n_logit_bias, n_bias_text;
    cli_lora lora;            /* --lora / --lora-scaled */
} run_opts;

/* Token texts for --bias-text and --only-words-starting: NUL-terminated, control and end-of-text tokens "". */
typedef struct { char *buf; const char **ptr; } piece_table;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void run_usage(void) {
    printf("usage: hearth run [-m MODEL] [-p PROMPT | -f FILE] [-n N] [--seed S] [-t THREADS] [-c CTX] [-ctk T] [-ctv T]\n"
           "                  [sampling options]\n"
           "Prints the prompt's continuation as it is generated, then a stats line on stderr (with the seed).\n"
           "The prompt comes from -p, from -f FILE (- = stdin), or from stdin when it is piped and -p is absent.\n"
           "--seed -1 (the default) picks a random seed.\n"
           "Defaults: the embedded stories260K model, empty prompt (BOS only), -n 128, temp 0.8, top-k 40,\n"
           "top-p 0.95, min-p 0.05, random seed; penalties off (a model's generation_config.json overrides the\n"
           "sampling defaults; flags override both). -n -1 runs until end of text or context.\n"
           "  --cache-type T               KV cache type of K and V: f16 (default), bf16, q8_0, q4_0 or f32 (q8_0\n"
           "                               and q4_0 need head sizes that are multiples of 32)\n"
           "  -ctk, --cache-type-k T       the K cache's type alone; -ctv, --cache-type-v T: the V cache's\n"
           "  --prompt-cache DIR           start from the longest prefix of the prompt kept in DIR, and keep this\n"
           "                               prompt there (the store hearth serve --prompt-cache uses)\n"
           "  --lora FILE[,FILE]           apply LoRA adapters (GGUF, llama.cpp's format) at scale 1 (repeatable)\n"
           "  --lora-scaled FILE:S[,...]   apply LoRA adapters at scale S (repeatable)\n"
           "  --lora-merge                 merge them into the weights at load (W + S B A, requantized to each\n"
           "                               weight's type: a quantized base's logits differ slightly from the\n"
           "                               unmerged path's; F32 / F16 / BF16 weights stay in their type)\n"
           "Speculative decoding (the output is the same token for token; only the speed changes):\n"
           "  --model-draft FILE           a small model with the same vocabulary proposes tokens (GGUF or HF dir)\n"
           "  --spec MODE                  draft (the default with --model-draft), ngram (look the last tokens up\n"
           "                               in the prompt and reply; with --model-draft, when the drafter is\n"
           "                               unsure), or off\n"
           "  --draft-max N  --draft-min N most tokens proposed per step (default 8, at most 64); fewer than\n"
           "                               --draft-min are not verified (default 0)\n"
           "  --draft-p-min P              the drafter stops where its top token is less likely than P (default 0)\n"
           "  --ngram-min N  --ngram-max N the last N tokens looked up earlier; the match reaching furthest\n"
           "                               back, up to --ngram-max tokens, drafts (default 2, 4)\n"
           "Sampling (applied in this order; see hearth.h):\n"
           "  --logit-bias ID+V | ID-V     add V to token ID's logit (repeatable; a later one for the same ID\n"
           "                               replaces an earlier one); ID-inf bans the token\n"
           "  --bias-text TEXT=V           add V to every token whose text contains TEXT, e.g. \"bard=+3\"\n"
           "                               (repeatable; biases add up)\n"
           "  --only-words-starting L      every word of the reply starts with one of the letters L (e.g. BW,\n"
           "                               case-insensitive); words are runs of letters, digits and non-ASCII\n"
           "  --grammar-file F             the reply follows the GBNF grammar in F (llama.cpp's format; rule root)\n"
           "  --json-schema F              the reply is JSON valid against the JSON Schema in F\n"
           "  --json-object                the reply is a JSON object\n"
           "                               (with a grammar, generation ends where the grammar is complete)\n"
           "  --repeat-penalty R           penalize tokens seen in the last --repeat-last-n tokens (1 = off)\n"
           "  --frequency-penalty F        subtract F x (times seen) from their logits (0 = off)\n"
           "  --presence-penalty F         subtract F from the logits of tokens seen at all (0 = off)\n"
           "  --repeat-last-n N            tokens looked back for the penalties (default 64, -1 = all, 0 = none)\n"
           "  --temp T                     temperature (<= 0: greedy)\n"
           "  --top-k K  --top-p P  --min-p P  --typical-p P    truncation (0, 1, 0, 1 = off)\n"
           "  --least-likely               pick the least probable token that survives the truncation\n"
           "Output:\n"
           "  --logprobs K                 per generated token, its log-probability and the K most likely tokens\n"
           "                               (log-softmax of the model's raw logits, before bias, penalties and\n"
           "                               temperature): one line per token on stderr\n"
           "  --json                       instead of the text, print one JSON object per generated token per line\n"
           "                               on stdout: {\"token\":ID,\"piece\":\"...\",\"logprob\":X,\"top\":[{\"token\":ID,\n"
           "                               \"piece\":\"...\",\"logprob\":Y},...]} (top has --logprobs K entries). A piece\n"
           "                               that is not valid UTF-8 shows its bad bytes as U+FFFD and also gets\n"
           "                               \"bytes\":[...] with its raw bytes. The end-of-text token is not listed.\n");
}

/* ---- option parsing ---- */

/* "15043+1.5", "15043-1.5", "15043-inf": token id, then a signed bias (+inf and NaN refused). */
static bool parse_logit_bias(const char *v, id_bias *out) {
    char *end;
    errno = 0;
    long id = strtol(v, &end, 10);
    bool ok = end != v && *v >= '0' && *v <= '9' && !errno && id <= 0x7fffffffL && (*end == '+' || *end == '-');
    double b = 0;
    if (ok) {
        const char *s = end;
        b = strtod(s, &end);
        ok = end != s && !*end && !isnan(b) && (float)b != INFINITY;
    }
    if (!ok) { cli_fail("bad value for --logit-bias: '%s' (expected ID+VALUE or ID-VALUE, e.g. 15043+1.5 or 15043-inf)", v); return false; }
    *out = (id_bias){ id, (float)b };
    return true;
}

/* "TEXT=VALUE", split at the last '=': TEXT non-empty, VALUE a number (+inf and NaN refused). */
static bool parse_bias_text(const char *v, text_bias *out) {
    const char *eq = strrchr(v, '=');
    char *end = NULL;
    double b = eq ? strtod(eq + 1, &end) : 0;
    if (!eq || eq == v || end == eq + 1 || *end || isnan(b) || (float)b == INFINITY) {
        cli_fail("bad value for --bias-text: '%s' (expected TEXT=VALUE, e.g. bard=+3)", v);
        return false;
    }
    *out = (text_bias){ v, (int)(eq - v), (float)b };
    return true;
}

static void opts_free(run_opts *o) { free(o->logit_bias); free(o->bias_text); free(o->prompt_buf); cli_lora_free(&o->lora); }

/* Flags without a value; returns false if a is not one. */
static bool parse_switch(run_opts *o, const char *a) {
    if (!strcmp(a, "--least-likely")) o->least_likely = true;
    else if (!strcmp(a, "--json")) o->json = true;
    else if (!strcmp(a, "--json-object")) o->grammar.json_object = true;
    else if (!strcmp(a, "--lora-merge")) o->lora.merge = true;
    else return false;
    return true;
}

static const char *const VALUED_FLAGS[] = {
    "-m", "-p", "-f", "-n", "--temp", "--top-k", "--top-p", "--min-p", "--typical-p", "--repeat-penalty",
    "--frequency-penalty", "--presence-penalty", "--repeat-last-n", "--seed", "-t", "-c", "--logprobs",
    "--logit-bias", "--bias-text", "--only-words-starting", "--cache-type", "--cache-type-k", "-ctk", "--cache-type-v",
    "-ctv", "--grammar-file", "--json-schema", "--prompt-cache", "--lora", "--lora-scaled", "--model-draft", "--spec",
    "--draft-max", "--draft-min", "--draft-p-min", "--ngram-min", "--ngram-max", NULL,
};

static bool takes_value(const char *a) {
    for (int i = 0; VALUED_FLAGS[i]; i++) if (!strcmp(a, VALUED_FLAGS[i])) return true;
    return false;
}

/* A probability flag: a number in 0..1, as the server requires. */
static bool cli_prob(const char *flag, const char *v, double *out) {
    if (!cli_float(flag, v, out)) return false;
    if (*out >= 0 && *out <= 1) return true;
    cli_fail("bad value for %s: '%s' (expected a number from 0 to 1)", flag, v);
    return false;
}

/* A flag of VALUED_FLAGS with value v; false if the value is bad (message printed). */
static bool parse_valued(run_opts *o, const char *a, const char *v) {
    if (!strcmp(a, "-m")) o->model_path = v;
    else if (!strcmp(a, "-p")) o->prompt = v;
    else if (!strcmp(a, "-f")) o->prompt_file = v;
    else if (!strcmp(a, "-n")) return cli_int(a, v, -1, 1 << 30, &o->n_predict);
    else if (!strcmp(a, "--temp")) return cli_float(a, v, &o->temp);
    else if (!strcmp(a, "--top-k")) return cli_int(a, v, 0, 1 << 30, &o->top_k);
    else if (!strcmp(a, "--top-p")) return cli_prob(a, v, &o->top_p);
    else if (!strcmp(a, "--min-p")) return cli_prob(a, v, &o->min_p);
    else if (!strcmp(a, "--typical-p")) return cli_prob(a, v, &o->typical_p);
    else if (!strcmp(a, "--repeat-penalty")) return cli_float(a, v, &o->rep);
    else if (!strcmp(a, "--frequency-penalty")) return cli_float(a, v, &o->freq);
    else if (!strcmp(a, "--presence-penalty")) return cli_float(a, v, &o->pres);
    else if (!strcmp(a, "--repeat-last-n")) return cli_int(a, v, -1, 1 << 30, &o->repeat_last_n);
    else if (!strcmp(a, "--seed")) return cli_int(a, v, -1, 0x7fffffffL, &o->seed);
    else if (!strcmp(a, "-t")) return cli_int(a, v, 1, 256, &o->threads);
    else if (!strcmp(a, "-c")) return cli_int(a, v, 1, 1 << 22, &o->n_ctx);
    else if (!strcmp(a, "--logprobs")) return cli_int(a, v, 0, 1 << 20, &o->n_logprobs);
    else if (!strcmp(a, "--logit-bias")) return parse_logit_bias(v, &o->logit_bias[o->n_logit_bias++]);
    else if (!strcmp(a, "--bias-text")) return parse_bias_text(v, &o->bias_text[o->n_bias_text++]);
    else if (cli_is_cache_flag(a)) return cli_cache_types(a, v, o->cache_type);
    else if (!strcmp(a, "--grammar-file")) o->grammar.gbnf_file = v;
    else if (!strcmp(a, "--prompt-cache")) o->prompt_cache = v;
    else if (!strcmp(a, "--lora") || !strcmp(a, "--lora-scaled")) return cli_lora_arg(a, v, &o->lora);
    else if (!strcmp(a, "--json-schema")) o->grammar.schema_file = v;
    else if (!strcmp(a, "--model-draft")) o->draft_path = v;
    else if (!strcmp(a, "--draft-max")) return cli_int(a, v, 0, SPEC_MAX_DRAFT, &o->draft_max);
    else if (!strcmp(a, "--draft-min")) return cli_int(a, v, 0, SPEC_MAX_DRAFT, &o->draft_min);
    else if (!strcmp(a, "--draft-p-min")) return cli_prob(a, v, &o->draft_p_min);
    else if (!strcmp(a, "--ngram-min")) return cli_int(a, v, 1, 64, &o->ngram_min);
    else if (!strcmp(a, "--ngram-max")) return cli_int(a, v, 1, 64, &o->ngram_max);
    else if (!strcmp(a, "--spec")) {
        if (strcmp(v, "draft") && strcmp(v, "ngram") && strcmp(v, "off")) {
            cli_fail("bad value for --spec: '%s' (expected draft, ngram or off)", v);
            return false;
        }
        o->spec_mode = v;
    }
    else if (!*v) { cli_fail("bad value for --only-words-starting: '' (expected letters, e.g. BW)"); return false; }
    else o->only_words = v;
    return true;
}

/* Returns -1 when parsed (go on), else the exit code (0 after --help). */
static int parse_opts(int argc, char **argv, run_opts *o) {
    /* NAN / -1: not given, the model's defaults apply (hearth_model_sampler_defaults) */
    *o = (run_opts){ .prompt = "", .n_predict = 128, .top_k = -1, .seed = -1, .repeat_last_n = 64, .n_logprobs = -1,
                     .temp = NAN, .top_p = NAN, .min_p = NAN, .typical_p = NAN, .rep = NAN,
                     .cache_type = { HEARTH_CACHE_F16, HEARTH_CACHE_F16 }, .draft_max = 8, .ngram_min = 2, .ngram_max = 4 };
    o->logit_bias = malloc((size_t)argc * sizeof *o->logit_bias);
    o->bias_text = malloc((size_t)argc * sizeof *o->bias_text);
    if (!o->logit_bias || !o->bias_text) return cli_fail("out of memory");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { run_usage(); return 0; }
        if (parse_switch(o, a)) continue;
        if (!takes_value(a)) return cli_fail("unknown option '%s' for run (see hearth run --help)", a);
        if (!v) return cli_fail("missing value for %s", a);
        if (!parse_valued(o, a, v)) return 1;
        i++;
    }
    if (o->prompt_file && *o->prompt) return cli_fail("give the prompt with -p or -f, not both");
    if (o->spec_mode && !strcmp(o->spec_mode, "draft") && !o->draft_path) return cli_fail("--spec draft needs --model-draft FILE");
    if (o->ngram_min > o->ngram_max) return cli_fail("--ngram-min %ld is above --ngram-max %ld", o->ngram_min, o->ngram_max);
    const char *from = o->prompt_file ? o->prompt_file : !*o->prompt && !isatty(0) ? "/dev/stdin" : NULL;
    if (from) {
        if (!strcmp(from, "-")) from = "/dev/stdin";
        if (!(o->prompt_buf = cli_read_file(from, NULL))) return 1;
        o->prompt = o->prompt_buf;
    }
    if (o->seed < 0) o->seed = (long)(((uint64_t)time(NULL) ^ (uint64_t)clock() * 2654435761u) & 0x7fffffff);
    return -1;
}

/* ---- pieces ---- */

static void pieces_free(piece_table *p) { free(p->buf); free(p->ptr); }

static int pieces_build(hearth_model *m, int n_vocab, piece_table *p) {
    char tmp[256];
    size_t total = 0;
    for (int t = 0; t < n_vocab; t++) {
        int k = hearth_token_is_eog(m, t) ? 0 : hearth_token_piece(m, t, tmp, sizeof tmp);
        total += (size_t)(k < (int)sizeof tmp ? k : (int)sizeof tmp) + 1;
    }
    p->buf = malloc(total);
    p->ptr = malloc((size_t)n_vocab * sizeof *p->ptr);
    if (!p->buf || !p->ptr) return cli_fail("out of memory");
    char *w = p->buf;
    for (int t = 0; t < n_vocab; t++) {
        int k = hearth_token_is_eog(m, t) ? 0 : hearth_token_piece(m, t, tmp, sizeof tmp);
        if (k > (int)sizeof tmp) k = (int)sizeof tmp;
        memcpy(w, tmp, (size_t)k);
        w[k] = 0;
        p->ptr[t] = w;
        w += k + 1;
    }
    return 0;
}

/* ---- sampler setup ---- */

/* The model's defaults (generation_config.json of an HF directory), overridden by the flags given. */
static hearth_sampler *make_sampler(const run_opts *o, const hearth_model *m, int n_vocab) {
    hearth_sampler_params sp = hearth_model_sampler_defaults(m);
    if (!isnan(o->temp)) sp.temperature = (float)o->temp;
    if (o->top_k >= 0) sp.top_k = (int)o->top_k;
    if (!isnan(o->top_p)) sp.top_p = (float)o->top_p;
    if (!isnan(o->min_p)) sp.min_p = (float)o->min_p;
    if (!isnan(o->typical_p)) sp.typical_p = (float)o->typical_p;
    if (!isnan(o->rep)) sp.repeat_penalty = (float)o->rep;
    sp.frequency_penalty = (float)o->freq; sp.presence_penalty = (float)o->pres;
    sp.repeat_last_n = (int)o->repeat_last_n; sp.least_likely = o->least_likely;
    sp.seed = (uint64_t)o->seed;
    hearth_sampler *s = hearth_sampler_new(&sp, n_vocab);
    if (!s) cli_fail("out of memory");
    return s;
}

static int apply_biases(hearth_sampler *s, const run_opts *o, const piece_table *p, int n_vocab) {
    for (int i = 0; i < o->n_logit_bias; i++)
        if (o->logit_bias[i].id >= n_vocab || hearth_sampler_set_bias(s, (hearth_token)o->logit_bias[i].id, o->logit_bias[i].bias))
            return cli_fail("--logit-bias: token %ld is out of range (the vocabulary has %d tokens)", o->logit_bias[i].id, n_vocab);
    for (int i = 0; i < o->n_bias_text; i++) {
        const text_bias *tb = &o->bias_text[i];
        char *needle = malloc((size_t)tb->len + 1);
        if (!needle) return cli_fail("out of memory");
        memcpy(needle, tb->text, (size_t)tb->len);
        needle[tb->len] = 0;
        int n = hearth_sampler_bias_text(s, p->ptr, n_vocab, needle, tb->bias);
        if (n == 0) fprintf(stderr, "warning: --bias-text: no token contains '%s'\n", needle);
        free(needle);
        if (n < 0) return cli_fail("--bias-text: cannot apply '%.*s'", tb->len, tb->text);
    }
    return 0;
}

/* ---- log-probability output ---- */

/* Writes a piece as a JSON string; returns false if it was not valid UTF-8 (bad bytes written as U+FFFD). */
static bool json_piece(FILE *f, const char *piece, int n) {
    const unsigned char *s = (const unsigned char *)piece;
    bool valid = true;
    fputc('"', f);
    for (int i = 0; i < n;) {
        int len = utf8_valid_len(s + i, (size_t)(n - i));
        if (len == 0) { fputs("\\ufffd", f); valid = false; i++; continue; }
        if (s[i] == '"' || s[i] == '\\') fprintf(f, "\\%c", s[i]);
        else if (s[i] == '\n') fputs("\\n", f);
        else if (s[i] == '\t') fputs("\\t", f);
        else if (s[i] == '\r') fputs("\\r", f);
        else if (s[i] < 0x20) fprintf(f, "\\u%04x", s[i]);
        else fwrite(s + i, 1, (size_t)len, f);
        i += len;
    }
    fputc('"', f);
    return valid;
}

static void json_number(FILE *f, float v) {
    if (isfinite(v)) fprintf(f, "%.6g", v);
    else fputs("null", f);
}

/* {"token":ID,"piece":"...","logprob":X} without the closing brace. */
static void json_token(FILE *f, const hearth_model *m, hearth_token t, float lp) {
    char piece[256];
    int n = hearth_token_piece(m, t, piece, sizeof piece);
    if (n > (int)sizeof piece) n = (int)sizeof piece;
    fprintf(f, "{\"token\":%d,\"piece\":", (int)t);
    if (!json_piece(f, piece, n)) {
        fputs(",\"bytes\":[", f);
        for (int i = 0; i < n; i++) fprintf(f, i ? ",%u" : "%u", (unsigned char)piece[i]);
        fputc(']', f);
    }
    fputs(",\"logprob\":", f);
    json_number(f, lp);
}

/* A piece in single quotes with C escapes for anything not printable ASCII. */
static void text_piece(FILE *f, const hearth_model *m, hearth_token t) {
    char piece[256];
    int n = hearth_token_piece(m, t, piece, sizeof piece);
    if (n > (int)sizeof piece) n = (int)sizeof piece;
    fputc('\'', f);
    for (int i = 0; i < n; i++) {
        unsigned char c = (unsigned char)piece[i];
        if (c == '\n') fputs("\\n", f);
        else if (c == '\\' || c == '\'') fprintf(f, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
    fputc('\'', f);
}

typedef struct { int k; hearth_token *ids; float *lps; } lp_buf;

/* Prints token t's log-probability and the top k (as JSON on stdout, or a line on stderr). */
static int report_logprobs(const hearth_model *m, const float *logits, int n_vocab, hearth_token t, lp_buf *b, bool json) {
    float lp;
    int k = hearth_logprobs(logits, n_vocab, t, b->k, &lp, b->ids, b->lps);
    if (k < 0) return cli_fail("the model's logits are not finite: no log-probabilities");
    FILE *f = json ? stdout : stderr;
    if (json) {
        json_token(f, m, t, lp);
        fputs(",\"top\":[", f);
        for (int i = 0; i < k; i++) { if (i) fputc(',', f); json_token(f, m, b->ids[i], b->lps[i]); fputc('}', f); }
        fputs("]}\n", f);
    } else {
        fprintf(f, "logprob %9.4f ", lp);
        text_piece(f, m, t);
        if (k) fputs("  top:", f);
        for (int i = 0; i < k; i++) { fputs(i ? ", " : " ", f); text_piece(f, m, b->ids[i]); fprintf(f, " %.4f", b->lps[i]); }
        fputc('\n', f);
    }
    fflush(f);
    return 0;
}

/* ---- generation ---- */

typedef struct {
    hearth_model *m;
    hearth_ctx *ctx;
    hearth_sampler *smp;
    hearth_token *toks;
    int n, cap, n_vocab;
    piece_table pieces;
    hearth_words_constraint wc;
    hearth_grammar *grammar;
    int n_cached;             /* prompt tokens restored from --prompt-cache */
    int last_row;             /* the prompt's last token's logits row in its last decode */
    lp_buf lp;
    hearth_model *draft_m;    /* --model-draft */
    spec_drafter *drafter;
    spec_params sp;           /* n_max 0: no speculation */
    spec_seq ss;
} run_state;

/* Creates the context and evaluates the prompt; *ms is the time the evaluation took. */
static int prefill_prompt(run_state *r, const run_opts *o, double *ms) {
    hearth_err err;
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = (int)o->n_ctx;
    cp.n_threads = (int)o->threads;
    cp.cache_type = o->cache_type[0], cp.cache_type_k = o->cache_type[0], cp.cache_type_v = o->cache_type[1];
    hearth_model_info mi;
    hearth_model_get_info(r->m, &mi);
    if (o->n_ctx > mi.n_ctx_train && mi.n_ctx_train > 0)
        fprintf(stderr, "warning: -c %ld is beyond the %d tokens the model was trained on; expect nonsense past them\n",
                o->n_ctx, mi.n_ctx_train);
    if (hearth_ctx_new(r->m, &cp, &r->ctx, &err)) return cli_fail("%s", err.msg);
    if (cli_lora_set(r->ctx, &o->lora)) return 1;
    r->cap = hearth_ctx_n_ctx(r->ctx);
    if (!(r->toks = malloc((size_t)r->cap * sizeof *r->toks))) return cli_fail("out of memory");
    int n = hearth_tokenize(r->m, o->prompt, strlen(o->prompt), true, false, r->toks, r->cap, &err);
    if (n < 0) return cli_fail("%s", err.msg);
    if (n == 0) {
        hearth_token bos = hearth_token_bos(r->m);
        if (bos < 0) return cli_fail("empty prompt and the model has no BOS token");
        r->toks[n++] = bos;
    }
    if (n >= r->cap) return cli_fail("prompt is %d tokens, context is %d", n, r->cap);
    r->n = n;
    double t0 = now_ms();
    int from = 0;
    srv_cache *pc = NULL;
    if (o->prompt_cache) {   /* the prefix from the store (keyed on the adapters too), then the rest */
        err.msg[0] = 0;
        if (!(pc = pcache_new(r->ctx, (size_t)1 << 40, o->prompt_cache, &err)) && err.msg[0]) return cli_fail("%s", err.msg);
        if (!pc)
            fprintf(stderr, "note: --prompt-cache unused: %s\n", hearth_mpi_size() > 1 ? "the KV cache is spread over the MPI ranks"
                                                                   : "this model's sliding-window KV cache cannot be saved");
        from = pcache_restore(pc, r->ctx, 0, r->toks, n, 0, hearth_seq_lora_id(r->ctx, 0));
        r->n_cached = from;
    }
    r->last_row = cli_prefill(r->ctx, r->toks + from, n - from, from, &err);   /* a progress line on a terminal */
    int rc = r->last_row < 0;
    if (!rc) pcache_store(pc, r->ctx, 0, r->toks, n, hearth_seq_lora_id(r->ctx, 0));
    pcache_free(pc);
    if (rc) return cli_fail("%s", err.msg);
    *ms = now_ms() - t0;
    return 0;
}

static int setup_sampling(run_state *r, const run_opts *o) {
    if (!(r->smp = make_sampler(o, r->m, r->n_vocab))) return 1;
    if ((o->n_bias_text || o->only_words) && pieces_build(r->m, r->n_vocab, &r->pieces)) return 1;
    if (apply_biases(r->smp, o, &r->pieces, r->n_vocab)) return 1;
    if (cli_grammar(r->m, &o->grammar, &r->grammar)) return 1;
    hearth_sampler_set_grammar(r->smp, r->grammar);
    if (o->only_words) {
        hearth_words_constraint_init(&r->wc, o->only_words, r->pieces.ptr, r->n_vocab);
        hearth_sampler_set_allow(r->smp, hearth_words_constraint_allow, &r->wc);
        hearth_sampler_set_accept_hook(r->smp, hearth_words_constraint_accept, &r->wc);
    }
    r->lp.k = (int)(o->n_logprobs > r->n_vocab ? r->n_vocab : o->n_logprobs < 0 ? 0 : o->n_logprobs);
    r->lp.ids = malloc((size_t)(r->lp.k + 1) * sizeof *r->lp.ids);
    r->lp.lps = malloc((size_t)(r->lp.k + 1) * sizeof *r->lp.lps);
    if (!r->lp.ids || !r->lp.lps) return cli_fail("out of memory");
    return 0;
}

/* Samples and streams up to n_predict tokens; returns the count generated, or -1 after printing an error. */
static int generate(run_state *r, const run_opts *o, int last_row) {
    bool want_lp = o->json || o->n_logprobs >= 0;
    int n_gen = 0;
    int8_t want_all[SPEC_MAX_DRAFT + 1];
    memset(want_all, 1, sizeof want_all);
    hearth_detok dt = { 0 };
    hearth_err err;
    char buf[512];
    while (o->n_predict < 0 || n_gen < o->n_predict) {
        const float *logits = hearth_logits(r->ctx, last_row);
        if (r->grammar) {   /* the reply must end complete within -n and the context */
            int left = r->cap - r->n;
            if (o->n_predict >= 0 && o->n_predict - n_gen < left) left = o->n_predict - n_gen;
            if (!n_gen && hearth_grammar_min_tokens(r->grammar) > left)
                return cli_fail("-n (or the context) leaves %d tokens, too few for a complete reply of the grammar "
                                "(it needs up to %d)", left, hearth_grammar_min_tokens(r->grammar)), -1;
            hearth_grammar_set_budget(r->grammar, left);
        }
        hearth_token t = hearth_sample(r->smp, logits, r->toks, r->n);
        if (t < 0) {
            if (!o->json) printf("\n");
            fflush(stdout);
            if (hearth_grammar_failed(r->grammar)) cli_fail("out of memory following the grammar");
            else cli_fail("no token can be sampled: every token is masked out (by --logit-bias, --bias-text, "
                          "--only-words-starting or the grammar)");
            return -1;
        }
        hearth_sampler_accept(r->smp, t);
        if (hearth_token_is_eog(r->m, t)) break;
        bool grammar_done = r->grammar && hearth_grammar_done(r->grammar);
        if (want_lp && report_logprobs(r->m, logits, r->n_vocab, t, &r->lp, o->json)) return -1;
        if (!o->json) {
            int k = hearth_detok_push(r->m, &dt, t, buf, sizeof buf);
            fwrite(buf, 1, (size_t)k, stdout);
            fflush(stdout);
        }
        r->toks[r->n++] = t;
        n_gen++;
        if (grammar_done) break;   /* nothing may follow: the end of text would be the only choice */
        if (r->n >= r->cap) { fflush(stdout); fprintf(stderr, "\n[context full at %d tokens]\n", r->cap); break; }
        if (r->sp.n_max > 0) {   /* the next logits are in the batch already, or decode t and new proposals */
            if (spec_take(&r->ss, t)) { last_row = r->ss.row; continue; }
            if (spec_begin(&r->ss, r->ctx, 0, r->drafter, &r->sp, r->toks, r->n, r->cap - r->n, r->grammar, &err)) {
                cli_fail("%s", err.msg);
                return -1;
            }
            hearth_batch b = { .n = r->ss.n, .tokens = r->ss.tok, .want_logits = want_all };
            if (hearth_decode(r->ctx, &b, &err)) { cli_fail("%s", err.msg); return -1; }
            last_row = 0;
            continue;
        }
        hearth_batch b = { .n = 1, .tokens = &r->toks[r->n - 1] };
        if (hearth_decode(r->ctx, &b, &err)) { cli_fail("%s", err.msg); return -1; }
        last_row = 0;
    }
    if (!o->json) {
        int k = hearth_detok_flush(&dt, buf, sizeof buf);
        fwrite(buf, 1, (size_t)k, stdout);
        printf("\n");
    }
    if (r->grammar && !hearth_grammar_can_end(r->grammar) && !hearth_grammar_done(r->grammar))
        fprintf(stderr, "warning: the reply stopped before its grammar was complete (raise -n)\n");
    return n_gen;
}

static void run_free(run_state *r) {
    free(r->lp.ids);
    free(r->lp.lps);
    pieces_free(&r->pieces);
    free(r->toks);
    hearth_sampler_free(r->smp);
    hearth_grammar_free(r->grammar);
    spec_drafter_free(r->drafter);
    hearth_ctx_free(r->ctx);
    hearth_model_free(r->m);
    hearth_model_free(r->draft_m);
}

/* --model-draft and --spec: the drafter (its memory reported) and the parameters; n_max stays 0 when off. */
static int setup_spec(run_state *r, const run_opts *o) {
    bool off = o->spec_mode && !strcmp(o->spec_mode, "off");
    bool ngram = o->spec_mode && !strcmp(o->spec_mode, "ngram");
    if (off || (!o->draft_path && !ngram)) return 0;
    r->sp = spec_default_params();
    r->sp.n_max = (int)o->draft_max, r->sp.n_min = (int)o->draft_min, r->sp.p_min = (float)o->draft_p_min;
    r->sp.ngram = ngram, r->sp.ngram_min = (int)o->ngram_min, r->sp.ngram_max = (int)o->ngram_max;
    if (!o->draft_path) return 0;
    if (!(r->draft_m = cli_load_model(o->draft_path))) return 1;
    hearth_err err;
    if (!(r->drafter = spec_drafter_new(r->m, r->draft_m, r->cap, 1, (int)o->threads, &err)))
        return cli_fail("%s: %s", o->draft_path, err.msg);
    fprintf(stderr, "draft model %s: %.1f MiB (weights and KV cache)\n", o->draft_path,
            spec_drafter_bytes(r->drafter) / 1048576.0);
    return 0;
}

static int run_model(run_state *r, const run_opts *o) {
    hearth_model_info info;
    hearth_model_get_info(r->m, &info);
    r->n_vocab = info.n_vocab;
    if (info.is_encoder)
        return cli_fail("%s is an encoder (%s): it embeds text, it does not generate; use hearth embed", o->model_path, info.arch);
    double prefill_ms = 0;
    if (prefill_prompt(r, o, &prefill_ms) || setup_sampling(r, o) || setup_spec(r, o)) return 1;
    double t1 = now_ms();
    int n_prompt = r->n, n_gen = generate(r, o, r->last_row);
    if (n_gen < 0) return 1;
    double t2 = now_ms();
    fflush(stdout);   /* the text (ending in a newline) before the stats, on a terminal showing both */
    char cached[48] = "";
    if (r->n_cached) snprintf(cached, sizeof cached, " (%d from the prompt cache)", r->n_cached);
    char spec[80] = "";
    if (r->sp.n_max > 0)
        snprintf(spec, sizeof spec, " · accepted %ld/%ld drafted (%.0f%%)", r->ss.accepted, r->ss.drafted,
                 r->ss.drafted ? 100.0 * r->ss.accepted / r->ss.drafted : 0.0);
    fprintf(stderr, "prefill %d tok%s, %.2f ms/tok · decode %d tok, %.2f ms/tok%s · ctx %d/%d · seed %ld\n", n_prompt,
            cached, prefill_ms / n_prompt, n_gen, n_gen ? (t2 - t1) / n_gen : 0.0, spec, r->n, r->cap, o->seed);
    return 0;
}

int cmd_run(int argc, char **argv) {
    run_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc < 0) {
        run_state r = { 0 };
        r.m = cli_load_model(o.model_path ? o.model_path : cli_default_model());
        rc = !r.m || cli_lora_load(r.m, &o.lora) ? 1 : run_model(&r, &o);
        run_free(&r);
    }
    opts_free(&o);
    return rc;
}
