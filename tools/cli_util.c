/* cli_util.c — helpers shared by the CLI commands: flag parsing, one-line errors, model loading. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"

#define EMBEDDED_NAME "stories260K (embedded)"

const char *cli_default_model(void) { return EMBEDDED_NAME; }

int cli_model_load(const char *path, hearth_model **m, hearth_err *err) {
    if (strcmp(path, EMBEDDED_NAME)) return hearth_model_load(path, m, err);
    size_t n;
    const void *p = cli_default_model_data(&n);
    return hearth_model_load_memory(p, n, EMBEDDED_NAME, m, err);
}

int cli_fail(const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* one write: under mpirun, a line written in three pieces was once split by mpirun's own banner */
    fprintf(stderr, "error: %s\n", msg);
    return 1;
}

bool cli_int(const char *flag, const char *val, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = val ? strtol(val, &end, 10) : 0;
    if (!val || !*val || *end || errno || v < lo || v > hi) {
        cli_fail("bad value for %s: '%s' (expected an integer in %ld..%ld)", flag, val ? val : "", lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_float(const char *flag, const char *val, double *out) {
    char *end;
    errno = 0;
    double v = val ? strtod(val, &end) : 0;
    if (!val || !*val || *end || errno || v != v) {
        cli_fail("bad value for %s: '%s' (expected a number)", flag, val ? val : "");
        return false;
    }
    *out = v;
    return true;
}

static const struct { const char *name; hearth_cache_type type; } CACHE_TYPES[] = {
    { "f32", HEARTH_CACHE_F32 }, { "f16", HEARTH_CACHE_F16 }, { "bf16", HEARTH_CACHE_BF16 },
    { "q8_0", HEARTH_CACHE_Q8_0 }, { "q4_0", HEARTH_CACHE_Q4_0 },
};

bool cli_is_cache_flag(const char *flag) {
    return !strcmp(flag, "--cache-type") || !strcmp(flag, "--cache-type-k") || !strcmp(flag, "-ctk") ||
           !strcmp(flag, "--cache-type-v") || !strcmp(flag, "-ctv");
}

bool cli_cache_types(const char *flag, const char *val, hearth_cache_type kv[2]) {
    const bool k = strcmp(flag, "--cache-type-v") && strcmp(flag, "-ctv"), v = strcmp(flag, "--cache-type-k") && strcmp(flag, "-ctk");
    for (size_t i = 0; val && i < sizeof CACHE_TYPES / sizeof CACHE_TYPES[0]; i++)
        if (!strcmp(val, CACHE_TYPES[i].name)) {
            if (k) kv[0] = CACHE_TYPES[i].type;
            if (v) kv[1] = CACHE_TYPES[i].type;
            return true;
        }
    cli_fail("bad value for %s: '%s' (expected f16, bf16, q8_0, q4_0 or f32)", flag, val ? val : "");
    return false;
}

bool cli_lora_arg(const char *flag, const char *val, cli_lora *l) {
    const bool scaled = !strcmp(flag, "--lora-scaled");
    char *buf = strdup(val ? val : "");
    if (!buf) { cli_fail("out of memory"); return false; }
    bool ok = *buf != 0;
    for (char *save = NULL, *item = strtok_r(buf, ",", &save); ok && item; item = strtok_r(NULL, ",", &save)) {
        float scale = 1.0f;
        char *colon = scaled ? strrchr(item, ':') : NULL;
        if (scaled) {
            char *end;
            ok = colon && colon[1] && (scale = strtof(colon + 1, &end), *end == 0) && isfinite(scale);
            if (!ok) break;
            *colon = 0;
        }
        if (!*item) { ok = false; break; }
        if (l->n == HEARTH_MAX_LORA) { free(buf); cli_fail("%s: at most %d adapters", flag, HEARTH_MAX_LORA); return false; }
        if (!(l->path[l->n] = strdup(item))) { ok = false; break; }
        l->scale[l->n++] = scale;
    }
    free(buf);
    if (!ok) cli_fail("bad value for %s: '%s' (expected %s)", flag, val ? val : "", scaled ? "FILE:SCALE[,FILE:SCALE...]" : "FILE[,FILE...]");
    return ok;
}

int cli_lora_load(hearth_model *m, cli_lora *l) {
    hearth_err err;
    if (l->merge && !l->n) return cli_fail("--lora-merge needs adapters (--lora FILE or --lora-scaled FILE:SCALE)");
    for (int i = 0; i < l->n; i++)
        if (!l->a[i] && hearth_lora_load(m, l->path[i], &l->a[i], &err)) return cli_fail("%s", err.msg);
    if (l->merge && !l->merged) {
        const long nc = sysconf(_SC_NPROCESSORS_ONLN);
        size_t bytes;
        if (hearth_lora_merge(m, l->a, l->scale, l->n, nc > 0 ? (int)nc : 1, &bytes, &err)) return cli_fail("--lora-merge: %s", err.msg);
        l->merged = true;
        fprintf(stderr, "lora: %d adapter%s merged into the weights (%.1f MiB of merged matrices)\n", l->n, l->n > 1 ? "s" : "",
                (double)bytes / 1048576.0);
    }
    return 0;
}

int cli_lora_set(hearth_ctx *ctx, const cli_lora *l) {
    hearth_err err;
    if (l->n && !l->merge && hearth_ctx_set_lora(ctx, l->a, l->scale, l->n, &err)) return cli_fail("%s", err.msg);
    return 0;
}

void cli_lora_free(cli_lora *l) {
    for (int i = 0; i < l->n; i++) { hearth_lora_free(l->a[i]); free(l->path[i]); }
    l->n = 0;
}

hearth_model *cli_load_model(const char *path) {
    hearth_err err;
    hearth_model *m;
    if (cli_model_load(path, &m, &err)) {
        cli_fail("%s: %s", path, err.msg);
        return NULL;
    }
    return m;
}

char *cli_read_file(const char *path, size_t *len) {
    hearth_err err;
    char *p = ht_read_file(path, len, &err);
    if (!p) cli_fail("%s", err.msg);
    return p;
}

int cli_grammar(hearth_model *m, const cli_grammar_opts *o, hearth_grammar **g) {
    *g = NULL;
    if (!!o->gbnf_file + !!o->schema_file + o->json_object > 1)
        return cli_fail("give one of --grammar-file, --json-schema and --json-object");
    char *text = NULL;
    hearth_err err;
    if (o->gbnf_file && !(text = cli_read_file(o->gbnf_file, NULL))) return 1;
    if (o->schema_file || o->json_object) {
        char *schema = o->json_object ? strdup("{\"type\":\"object\"}") : cli_read_file(o->schema_file, NULL);
        if (!schema) return o->json_object ? cli_fail("out of memory") : 1;
        text = hearth_json_schema_to_grammar(schema, &err);
        free(schema);
        if (!text) return cli_fail("%s: %s", o->schema_file ? o->schema_file : "--json-object", err.msg);
    }
    if (!text) return 0;
    *g = hearth_grammar_new(m, text, &err);
    free(text);
    if (!*g) return cli_fail("%s: %s", o->gbnf_file ? o->gbnf_file : o->schema_file ? o->schema_file : "--json-object",
                             err.msg);
    return 0;
}

static void unlink_temps(int sig) {
    ht_afile_unlink_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

void cli_unlink_temps_on_signal(void) {
    signal(SIGINT, unlink_temps);
    signal(SIGTERM, unlink_temps);
    signal(SIGHUP, unlink_temps);
}

static double mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#define CLI_PREFILL_CHUNK 512   /* the context's default batch: the same work as one call, cut where it cuts */

int cli_prefill(hearth_ctx *ctx, const hearth_token *toks, int n, int cached, hearth_err *err) {
    bool tty = isatty(STDERR_FILENO);
    int shown = 0;   /* width of the progress line on screen */
    double t0 = mono_ms();
    int row = -1;
    for (int done = 0; done < n;) {
        hearth_batch b = { .n = HT_MIN(CLI_PREFILL_CHUNK, n - done), .tokens = toks + done };
        if (hearth_decode(ctx, &b, err)) { row = -1; break; }
        done += b.n;
        row = b.n - 1;
        if (tty && done < n && mono_ms() - t0 > 1000) {
            char line[96];
            int k = snprintf(line, sizeof line, "prompt %d / %d tokens, %d%%", cached + done, cached + n,
                             (int)(100.0 * (cached + done) / (cached + n)));
            if (cached) k += snprintf(line + k, sizeof line - (size_t)k, ", %d cached", cached);
            fprintf(stderr, "\r%s", line);
            fflush(stderr);
            shown = k;
        }
    }
    if (shown) fprintf(stderr, "\r%*s\r", shown, "");   /* erased: the reply starts where the line was */
    return row;
}

int cli_tokenize(hearth_model *m, const char *text, size_t len, bool add_bos, bool special, hearth_token **out) {
    hearth_err err;
    int cap = (int)(len + 16 > 0x7fffffff ? 0x7fffffff : len + 16), n = -1;
    hearth_token *ids = NULL;
    for (int tries = 0; tries < 2; tries++) {   /* the second time with the count the first one needed */
        hearth_token *p = realloc(ids, (size_t)cap * sizeof *ids);
        if (!p) { free(ids); cli_fail("out of memory"); return -1; }
        ids = p;
        n = hearth_tokenize(m, text, len, add_bos, special, ids, cap, &err);
        if (n < 0) { free(ids); cli_fail("%s", err.msg); return -1; }
        if (n <= cap) { *out = ids; return n; }
        cap = n;
    }
    free(ids);
    cli_fail("the tokenizer gave two different counts for one text");
    return -1;
}

hearth_token cli_chunk_bos(hearth_model *m) {
    hearth_token t[4];
    hearth_err err;
    hearth_token bos = hearth_token_bos(m);
    int n = hearth_tokenize(m, "", 0, true, false, t, 4, &err);
    return bos >= 0 && n >= 1 && t[0] == bos ? bos : -1;
}
