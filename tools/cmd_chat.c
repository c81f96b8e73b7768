/* cmd_chat.c — `hearth chat`: an interactive conversation on stdin/stdout (works through a pipe too).
 * Every turn renders the whole conversation through the chat template, keeps the part of the KV cache that
 * matches it and decodes only the rest, so a turn costs only its new tokens. Ctrl-C stops the reply being
 * generated; when the context fills, the oldest turns are dropped (the system prompt stays). */
#include <errno.h>
#include <editline/readline.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "generate/chat.h"
#include "generate/speculative.h"
#include "cli.h"

typedef struct {
    const char *model_path, *system, *template_path, *draft_path, *spec_mode;
    long n_predict, threads, n_ctx, top_k, seed, draft_max, draft_min;
    double draft_p_min;
    double temp, top_p, min_p, rep;
    bool no_shift, ignore_eos;
    cli_grammar_opts grammar;
    hearth_cache_type cache_type[2];   /* K, V */
    cli_lora lora;
} chat_opts;

typedef struct {
    hearth_model *m;
    hearth_ctx *ctx;
    hearth_sampler *smp;
    hearth_grammar *grammar;  /* every reply follows it (--grammar-file, --json-schema, --json) */
    chat_fmt *fmt;
    cJSON *turns;             /* user and assistant messages, oldest first */
    char *system;             /* NULL or "" = none */
    hearth_token *cache;      /* the tokens in the KV cache (sequence 0) */
    int n_cache, n_ctx;
    int last_row;             /* the batch row of the last decode that has logits */
    const chat_opts *o;
    hearth_model *draft_m;    /* --model-draft */
    spec_drafter *drafter;
    spec_params sp;           /* n_max 0: no speculation */
    spec_seq ss;
} chat_state;

static volatile sig_atomic_t g_interrupted;
static int imin(int a, int b) { return a < b ? a : b; }
static void on_sigint(int sig) { (void)sig; g_interrupted = 1; }

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void chat_usage(void) {
    printf("usage: hearth chat [-m MODEL] [--system TEXT] [--chat-template FILE] [-n N] [-c CTX] [-t THREADS]\n"
           "                   [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S]\n"
           "                   [--no-shift] [--ignore-eos] [-ctk T] [-ctv T] [--lora F[,F]] [--lora-scaled F:S[,F:S]] [--lora-merge]\n"
           "                   [--grammar-file F.gbnf | --json-schema F.json | --json]\n"
           "                   [--model-draft F] [--spec draft|ngram|off] [--draft-max N] [--draft-min N] [--draft-p-min P]\n"
           "Reads one message per line from stdin and streams each reply to stdout; after each reply a stats line\n"
           "goes to stderr. Commands: /system TEXT (set or, with no text, clear the system prompt), /reset (forget\n"
           "the conversation), /quit. Ctrl-C stops the current reply. The chat template is the model's own\n"
           "(GGUF tokenizer.chat_template) unless --chat-template gives one; a model without one gets plain\n"
           "continuation: each line is appended to the text and the model continues it.\n"
           "-n: most tokens per reply (default -1: until end of turn or a full context). When the context fills,\n"
           "the oldest turns are dropped (the system prompt stays) and the rest is prefilled again; --no-shift\n"
           "refuses the turn instead. --ignore-eos: replies go on past end-of-turn tokens (until -n, Ctrl-C or\n"
           "a full context). Sampling defaults as in hearth run. --cache-type: the KV cache's type, f16 (default),\n"
           "bf16, q8_0, q4_0 or f32 (q8_0, q4_0: head sizes multiples of 32); -ctk / -ctv set K's and V's alone.\n"
           "--grammar-file (GBNF), --json-schema and --json (any JSON object): every reply follows the grammar\n"
           "and ends where it is complete.\n"
           "Speculative decoding as in hearth run (--model-draft, --spec ngram): the replies stay token for token the same.\n");
}

static bool known(const char *a) {
    static const char *const OPTS[] = { "-m", "--system", "--chat-template", "-n", "--temp", "--top-k", "--top-p",
                                        "--min-p", "--repeat-penalty", "--seed", "-t", "-c", "--cache-type",
                                        "--cache-type-k", "-ctk", "--cache-type-v", "-ctv",
                                        "--grammar-file", "--json-schema", "--lora", "--lora-scaled", "--model-draft",
                                        "--spec", "--draft-max", "--draft-min", "--draft-p-min" };
    for (size_t i = 0; i < sizeof OPTS / sizeof OPTS[0]; i++) if (!strcmp(a, OPTS[i])) return true;
    return false;
}

static int parse_opts(int argc, char **argv, chat_opts *o) {
    *o = (chat_opts){ .n_predict = -1, .top_k = 40, .seed = -1, .temp = 0.8, .top_p = 0.95, .min_p = 0.05, .rep = 1.0,
                      .cache_type = { HEARTH_CACHE_F16, HEARTH_CACHE_F16 }, .draft_max = 8 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { chat_usage(); return 0; }
        if (!strcmp(a, "--no-shift")) { o->no_shift = true; continue; }
        if (!strcmp(a, "--ignore-eos")) { o->ignore_eos = true; continue; }
        if (!strcmp(a, "--lora-merge")) { o->lora.merge = true; continue; }
        if (!strcmp(a, "--json") || !strcmp(a, "--json-object")) { o->grammar.json_object = true; continue; }
        if (!known(a)) { cli_fail("unknown option '%s' for chat (see hearth chat --help)", a); return 1; }
        if (!v) { cli_fail("missing value for %s", a); return 1; }
        if (!strcmp(a, "-m")) o->model_path = v;
        else if (!strcmp(a, "--system")) o->system = v;
        else if (!strcmp(a, "--chat-template")) o->template_path = v;
        else if (!strcmp(a, "-n")) ok = cli_int(a, v, -1, 1 << 30, &o->n_predict);
        else if (!strcmp(a, "--temp")) ok = cli_float(a, v, &o->temp);
        else if (!strcmp(a, "--top-k")) ok = cli_int(a, v, 0, 1 << 30, &o->top_k);
        else if (!strcmp(a, "--top-p")) ok = cli_float(a, v, &o->top_p);
        else if (!strcmp(a, "--min-p")) ok = cli_float(a, v, &o->min_p);
        else if (!strcmp(a, "--repeat-penalty")) ok = cli_float(a, v, &o->rep);
        else if (!strcmp(a, "--seed")) ok = cli_int(a, v, 0, 0x7fffffffL, &o->seed);
        else if (!strcmp(a, "-t")) ok = cli_int(a, v, 1, 256, &o->threads);
        else if (!strcmp(a, "-c")) ok = cli_int(a, v, 1, 1 << 22, &o->n_ctx);
        else if (cli_is_cache_flag(a)) ok = cli_cache_types(a, v, o->cache_type);
        else if (!strcmp(a, "--grammar-file")) o->grammar.gbnf_file = v;
        else if (!strcmp(a, "--json-schema")) o->grammar.schema_file = v;
        else if (!strcmp(a, "--lora") || !strcmp(a, "--lora-scaled")) ok = cli_lora_arg(a, v, &o->lora);
        else if (!strcmp(a, "--model-draft")) o->draft_path = v;
        else if (!strcmp(a, "--draft-max")) ok = cli_int(a, v, 1, SPEC_MAX_DRAFT, &o->draft_max);
        else if (!strcmp(a, "--draft-min")) ok = cli_int(a, v, 0, SPEC_MAX_DRAFT, &o->draft_min);
        else if (!strcmp(a, "--draft-p-min")) {
            ok = cli_float(a, v, &o->draft_p_min);
            if (ok && !(o->draft_p_min >= 0 && o->draft_p_min <= 1)) { cli_fail("bad value for --draft-p-min: '%s' (expected a number from 0 to 1)", v); return 1; }
        } else if (!strcmp(a, "--spec")) {
            if (strcmp(v, "draft") && strcmp(v, "ngram") && strcmp(v, "off")) { cli_fail("bad value for --spec: '%s' (expected draft, ngram or off)", v); return 1; }
            o->spec_mode = v;
        }
        else { cli_fail("unknown option '%s' for chat (see hearth chat --help)", a); return 1; }
        if (!ok) return 1;
        i++;
    }
    return -1;
}

/* ---- the conversation ---- */
static cJSON *message(const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    if (m) { cJSON_AddStringToObject(m, "role", role); cJSON_AddStringToObject(m, "content", content); }
    return m;
}

/* system (if any) + the turns, as one messages array (references, not copies, of the turns). */
static cJSON *conversation(const chat_state *s) {
    cJSON *all = cJSON_CreateArray();
    if (!all) return NULL;
    if (s->system && *s->system) cJSON_AddItemToArray(all, message("system", s->system));
    const cJSON *t;
    cJSON_ArrayForEach(t, s->turns) cJSON_AddItemReferenceToArray(all, (cJSON *)t);
    return all;
}

/* Drops the oldest user turn and the replies after it; false if only the newest message is left. */
static bool drop_oldest_turn(chat_state *s) {
    if (cJSON_GetArraySize(s->turns) <= 1) return false;
    cJSON_DeleteItemFromArray(s->turns, 0);
    while (cJSON_GetArraySize(s->turns) > 1) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(s->turns, 0), "role");
        if (cJSON_IsString(role) && !strcmp(role->valuestring, "user")) break;
        cJSON_DeleteItemFromArray(s->turns, 0);
    }
    return true;
}

/* The prompt tokens for the next reply, dropping old turns while it does not leave room to answer. */
static int build_prompt(chat_state *s, hearth_token **toks, int *n) {
    int room = imin(s->n_ctx / 4, 64);   /* tokens the reply needs at least */
    for (;;) {
        hearth_err err;
        cJSON *msgs = conversation(s);
        int rc = msgs ? chat_fmt_tokenize(s->fmt, msgs, true, NULL, toks, n, &err) : -1;
        cJSON_Delete(msgs);
        if (rc) return cli_fail("%s", msgs ? err.msg : "out of memory");
        if (*n + room <= s->n_ctx) return 0;
        free(*toks);
        *toks = NULL;
        if (s->o->no_shift)
            return cli_fail("context full (%d tokens of %d): /reset to start over", *n, s->n_ctx);
        if (!drop_oldest_turn(s))
            return cli_fail("message too long: %d tokens, the context is %d", *n, s->n_ctx);
        fprintf(stderr, "[context full: dropped the oldest turn; the rest is prefilled again]\n");
    }
}

/* Keeps the cached tokens that start the prompt and decodes the rest; returns how many it decoded. */
static int prefill(chat_state *s, const hearth_token *toks, int n) {
    int k = 0;
    while (k < s->n_cache && k < n && s->cache[k] == toks[k]) k++;
    if (k == n) k--;                              /* the last token is decoded again for its logits */
    hearth_seq_truncate(s->ctx, 0, k);
    s->n_cache = imin(k, hearth_seq_len(s->ctx, 0));
    hearth_err err;
    int n_new = n - s->n_cache, row = cli_prefill(s->ctx, toks + s->n_cache, n_new, s->n_cache, &err);
    if (row < 0) {
        cli_fail("%s", err.msg);
        hearth_seq_truncate(s->ctx, 0, s->n_cache);   /* forget a partly decoded prompt */
        return -1;
    }
    memcpy(s->cache + s->n_cache, toks + s->n_cache, (size_t)n_new * sizeof *toks);
    s->n_cache = n;
    s->last_row = row;
    return n_new;
}

typedef struct { char *p; size_t n, cap; } text_buf;

static void text_add(text_buf *t, const char *p, int n) {
    if (t->n + (size_t)n + 1 > t->cap) {
        size_t nc = t->cap * 2 + (size_t)n + 256;
        char *q = realloc(t->p, nc);
        if (!q) return;
        t->p = q; t->cap = nc;
    }
    memcpy(t->p + t->n, p, (size_t)n);
    t->n += (size_t)n;
    t->p[t->n] = 0;
}

/* Samples and streams the reply after a prefill; returns the generated token count (-1 on error). */
static int generate(chat_state *s, text_buf *reply) {
    hearth_detok dt = { 0 };
    char buf[512];
    int n_gen = 0;
    hearth_err err;
    const char *why = NULL;
    const float *logits = hearth_logits(s->ctx, s->last_row);
    hearth_grammar_reset(s->grammar);
    int8_t want_all[SPEC_MAX_DRAFT + 1];
    memset(want_all, 1, sizeof want_all);
    s->ss.n = 0;
    for (;;) {
        if (g_interrupted) { why = "[interrupted]"; break; }
        hearth_token t = hearth_sample(s->smp, logits, s->cache, s->n_cache);
        if (t < 0) break;
        hearth_sampler_accept(s->smp, t);
        if (hearth_token_is_eog(s->m, t) && !s->o->ignore_eos) break;
        int k = hearth_detok_push(s->m, &dt, t, buf, sizeof buf);
        fwrite(buf, 1, (size_t)k, stdout);
        fflush(stdout);
        text_add(reply, buf, k);
        n_gen++;
        if (s->grammar && hearth_grammar_done(s->grammar)) break;
        if (s->o->n_predict >= 0 && n_gen >= s->o->n_predict) break;
        if (s->n_cache >= s->n_ctx) { why = "[context full: the reply was cut]"; break; }
        if (s->sp.n_max > 0) {   /* t's logits are in the batch already, or decode t and new proposals */
            s->cache[s->n_cache] = t;
            if (!spec_take(&s->ss, t)) {
                if (spec_begin(&s->ss, s->ctx, 0, s->drafter, &s->sp, s->cache, s->n_cache + 1, s->n_ctx - s->n_cache - 1,
                               s->grammar, &err)) {
                    printf("\n");
                    cli_fail("%s", err.msg);
                    return -1;
                }
                hearth_batch b = { .n = s->ss.n, .tokens = s->ss.tok, .want_logits = want_all };
                if (hearth_decode(s->ctx, &b, &err)) {
                    printf("\n");
                    cli_fail("%s", err.msg);
                    return -1;
                }
            }
            s->n_cache++;
            logits = hearth_logits(s->ctx, s->ss.row);
            continue;
        }
        hearth_batch b = { .n = 1, .tokens = &t };
        if (hearth_decode(s->ctx, &b, &err)) {
            printf("\n");
            cli_fail("%s", err.msg);
            return -1;
        }
        s->cache[s->n_cache++] = t;
        logits = hearth_logits(s->ctx, 0);
    }
    int k = hearth_detok_flush(&dt, buf, sizeof buf);
    fwrite(buf, 1, (size_t)k, stdout);
    text_add(reply, buf, k);
    printf("\n");
    fflush(stdout);
    if (why) fprintf(stderr, "%s\n", why);
    return n_gen;
}

/* One user message -> one streamed reply and its stats line. */
static int turn(chat_state *s, const char *line) {
    cJSON_AddItemToArray(s->turns, message("user", line));
    hearth_token *toks = NULL;
    int n = 0;
    if (build_prompt(s, &toks, &n)) { cJSON_DeleteItemFromArray(s->turns, cJSON_GetArraySize(s->turns) - 1); return 1; }
    g_interrupted = 0;
    double t0 = now_ms();
    int n_prefill = prefill(s, toks, n);
    free(toks);
    int n_cached = n - n_prefill;
    if (n_prefill < 0) return 1;
    double t1 = now_ms();
    text_buf reply = { 0 };
    int n_gen = generate(s, &reply);
    double t2 = now_ms();
    cJSON_AddItemToArray(s->turns, message("assistant", reply.p ? reply.p : ""));
    free(reply.p);
    if (n_gen < 0) return 1;
    char spec[80] = "";   /* the conversation's proposals so far */
    if (s->sp.n_max > 0)
        snprintf(spec, sizeof spec, " · accepted %ld/%ld drafted", s->ss.accepted, s->ss.drafted);
    fprintf(stderr, "prefill %d tok (%d cached), %.2f ms/tok · decode %d tok, %.2f ms/tok%s · ctx %d/%d\n", n_prefill,
            n_cached, n_prefill ? (t1 - t0) / n_prefill : 0.0, n_gen, n_gen ? (t2 - t1) / n_gen : 0.0, spec, s->n_cache, s->n_ctx);
    return 0;
}

static void set_system(chat_state *s, const char *text) {
    free(s->system);
    s->system = text && *text ? strdup(text) : NULL;
}

/* A "/..." line; returns 1 to quit. */
static int command(chat_state *s, const char *line) {
    if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) return 1;
    if (!strcmp(line, "/reset")) {
        cJSON_Delete(s->turns);
        s->turns = cJSON_CreateArray();
        fprintf(stderr, "[conversation reset]\n");
    } else if (!strncmp(line, "/system", 7) && (!line[7] || line[7] == ' ')) {
        set_system(s, line[7] ? line + 8 : NULL);
        fprintf(stderr, s->system ? "[system prompt set]\n" : "[system prompt cleared]\n");
    } else fprintf(stderr, "commands: /system TEXT, /reset, /quit\n");
    return 0;
}

/* The next line of input into *line (malloc'd): on a terminal with line editing and history (libedit), else
 * read as it comes. 1 for a line, 0 at the end of input, -1 when Ctrl-C interrupted the prompt. */
static int read_line(bool tty, char **line, size_t *cap) {
    errno = 0;
    g_interrupted = 0;   /* a Ctrl-C that stopped the last reply is spent */
    if (tty) {
        free(*line);
        *line = readline("> ");
        if (!*line) return g_interrupted ? -1 : 0;
        if (**line) add_history(*line);
        return 1;
    }
    ssize_t n = getline(line, cap, stdin);
    if (n < 0) return errno == EINTR && g_interrupted ? -1 : 0;
    while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r')) (*line)[--n] = 0;
    return 1;
}

static int repl(chat_state *s) {
    bool tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    if (tty) rl_catch_signals = 0;   /* Ctrl-C comes to on_sigint, which interrupts the read */
    for (int r; (r = read_line(tty, &line, &cap)) != 0;) {
        if (r < 0) {   /* Ctrl-C at the prompt does not end the chat: say what does */
            g_interrupted = 0;
            clearerr(stdin);
            fprintf(stderr, "\n[to leave, type /quit or press Ctrl-D]\n");
            continue;
        }
        if (!line[0]) continue;
        if (line[0] == '/') { if (command(s, line)) break; continue; }
        rc |= turn(s, line);
    }
    if (tty && !line) printf("\n");   /* Ctrl-D: end the prompt's line */
    free(line);
    return rc;
}

/* ---- setup ---- */
static int chat_setup(chat_state *s, chat_opts *o) {
    hearth_err err;
    hearth_model_info info;
    hearth_model_get_info(s->m, &info);
    if (info.is_encoder) return cli_fail("%s is an encoder (%s): it embeds text, it does not chat", o->model_path, info.arch);
    char *tmpl = NULL;
    if (o->template_path && !(tmpl = cli_read_file(o->template_path, NULL))) return 1;
    int rc = chat_fmt_new(s->m, tmpl, &s->fmt, &err);
    free(tmpl);
    if (rc) return cli_fail("%s", err.msg);
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = (int)o->n_ctx;
    cp.n_threads = (int)o->threads;
    cp.cache_type = o->cache_type[0], cp.cache_type_k = o->cache_type[0], cp.cache_type_v = o->cache_type[1];
    if (cli_lora_load(s->m, &o->lora)) return 1;   /* (--lora-merge: before the first context) */
    if (hearth_ctx_new(s->m, &cp, &s->ctx, &err)) return cli_fail("%s", err.msg);
    if (cli_lora_set(s->ctx, &o->lora)) return 1;
    s->n_ctx = hearth_ctx_n_ctx(s->ctx);
    hearth_sampler_params sp = hearth_sampler_default_params();
    sp.temperature = (float)o->temp; sp.top_k = (int)o->top_k; sp.top_p = (float)o->top_p; sp.min_p = (float)o->min_p;
    sp.repeat_penalty = (float)o->rep;
    sp.seed = o->seed >= 0 ? (uint64_t)o->seed : (uint64_t)time(NULL) ^ (uint64_t)clock();
    s->smp = hearth_sampler_new(&sp, info.n_vocab);
    if (cli_grammar(s->m, &o->grammar, &s->grammar)) return 1;
    hearth_sampler_set_grammar(s->smp, s->grammar);
    s->cache = malloc((size_t)s->n_ctx * sizeof *s->cache);
    bool off = o->spec_mode && !strcmp(o->spec_mode, "off"), ngram = o->spec_mode && !strcmp(o->spec_mode, "ngram");
    if (o->spec_mode && !strcmp(o->spec_mode, "draft") && !o->draft_path) return cli_fail("--spec draft needs --model-draft FILE");
    if (!off && (o->draft_path || ngram)) {
        s->sp = spec_default_params();
        s->sp.n_max = (int)o->draft_max, s->sp.n_min = (int)o->draft_min, s->sp.p_min = (float)o->draft_p_min;
        s->sp.ngram = ngram;
        if (o->draft_path) {
            if (!(s->draft_m = cli_load_model(o->draft_path))) return 1;
            if (!(s->drafter = spec_drafter_new(s->m, s->draft_m, s->n_ctx, 1, (int)o->threads, &err)))
                return cli_fail("%s: %s", o->draft_path, err.msg);
            fprintf(stderr, "draft model %s: %.1f MiB (weights and KV cache)\n", o->draft_path,
                    spec_drafter_bytes(s->drafter) / 1048576.0);
        }
    }
    s->turns = cJSON_CreateArray();
    if (!s->smp || !s->cache || !s->turns) return cli_fail("out of memory");
    set_system(s, o->system);
    if (!chat_fmt_has_template(s->fmt)) {
        /* nothing tells a plain continuation where a reply ends: stop at a sane length unless -n says */
        if (o->n_predict < 0) o->n_predict = 256;
        fprintf(stderr, "note: the model has no chat template: plain continuation (each line is appended to the text), "
                        "replies of at most %ld tokens\n", o->n_predict);
    }
    return 0;
}

int cmd_chat(int argc, char **argv) {
    chat_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc >= 0) return rc;
    if (!o.model_path) o.model_path = cli_default_model();
    chat_state s = { .o = &o };
    if (!(s.m = cli_load_model(o.model_path))) return 1;
    struct sigaction sa = { .sa_handler = on_sigint };   /* no SA_RESTART: a read is interrupted too */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    rc = chat_setup(&s, &o);
    if (!rc) rc = repl(&s);
    cJSON_Delete(s.turns);
    free(s.system);
    free(s.cache);
    hearth_sampler_free(s.smp);
    hearth_grammar_free(s.grammar);
    chat_fmt_free(s.fmt);
    spec_drafter_free(s.drafter);
    hearth_model_free(s.draft_m);
    hearth_ctx_free(s.ctx);
    cli_lora_free(&o.lora);
    hearth_model_free(s.m);
    return rc;
}
