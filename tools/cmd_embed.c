/* cmd_embed.c — `hearth embed`: the embedding of each input (text, or token ids with --ids) as one JSON
 * array per line, pooled as hearth_embed does (encoders per their pooling type, decoders by the mean of
 * the last hidden state). Inputs come from the command line, or one per line of stdin. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void embed_usage(void) {
    printf("usage: hearth embed -m MODEL [--normalize] [--ids] [-t THREADS] [TEXT...]\n"
           "Prints one JSON array of n_embd numbers per input, in input order. Inputs are the TEXT arguments,\n"
           "or the lines of stdin when there are none. Text is tokenized with the model's special tokens\n"
           "(BOS, or [CLS] ... [SEP] for WordPiece).\n"
           "  --ids        each input is token ids separated by commas or spaces, used as given\n"
           "  --normalize  scale each vector to unit length (L2)\n"
           "Pooling: an encoder (BERT) pools its final hidden states by the model's pooling type (mean, CLS =\n"
           "first token, last token; with pooling 'none' the line is an array of one array per token). On a\n"
           "decoder (Llama, Qwen, Gemma, GPT-2) it mean-pools the last hidden state (after the final norm).\n");
}

/* Parses "1, 2 3" into ids; returns the count, or -1 after printing an error. */
static int parse_ids(const char *s, hearth_token **out) {
    int n = 0, cap = 16;
    hearth_token *ids = malloc((size_t)cap * sizeof *ids);
    while (ids && *s) {
        if (*s == ',' || *s == ' ' || *s == '\t' || *s == '\r' || *s == '\n') { s++; continue; }
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > 0x7fffffffL) { free(ids); cli_fail("bad token id near '%.20s'", s); return -1; }
        if (n == cap) { hearth_token *g = realloc(ids, (size_t)(cap *= 2) * sizeof *ids); if (!g) { free(ids); ids = NULL; break; } ids = g; }
        ids[n++] = (hearth_token)v;
        s = end;
    }
    if (!ids) { cli_fail("out of memory"); return -1; }
    *out = ids;
    return n;
}

/* Tokenizes text with the model's special tokens; returns the count, or -1 after printing an error. */
static int tokenize_text(hearth_model *m, const char *text, hearth_token **out) {
    return cli_tokenize(m, text, strlen(text), true, false, out);
}

static void print_row(const float *v, int n, bool normalize) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)v[i] * v[i];
    double s = normalize && ss > 0 ? 1.0 / sqrt(ss) : 1.0;
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ",%.9g" : "%.9g", (double)v[i] * s);
    putchar(']');
}

/* Embeds one token sequence and prints its line. Returns 0 or 1. */
static int embed_one(hearth_ctx *ctx, const hearth_token *ids, int n, int n_embd, bool normalize) {
    hearth_err err;
    int rows = hearth_embed_rows(ctx, n);
    float *out = malloc((size_t)rows * n_embd * sizeof(float));
    if (!out) return cli_fail("out of memory");
    if (hearth_embed(ctx, ids, n, out, &err) < 0) { free(out); return cli_fail("%s", err.msg); }
    if (rows > 1) putchar('[');
    for (int r = 0; r < rows; r++) {
        if (r) putchar(',');
        print_row(out + (size_t)r * n_embd, n_embd, normalize);
    }
    printf(rows > 1 ? "]\n" : "\n");
    free(out);
    return 0;
}

/* Reads stdin lines (without their newline) into a NULL-terminated array. */
static char **read_lines(int *n_out) {
    char **lines = NULL, *line = NULL;
    size_t cap = 0;
    int n = 0;
    for (ssize_t len; (len = getline(&line, &cap, stdin)) >= 0;) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        char **g = realloc(lines, (size_t)(n + 2) * sizeof *lines);
        char *copy = strdup(line);
        if (!g || !copy) { free(copy); free(g ? g : lines); free(line); return NULL; }
        lines = g;
        lines[n++] = copy;
        lines[n] = NULL;
    }
    free(line);
    *n_out = n;
    return lines ? lines : calloc(1, sizeof *lines);
}

/* Turns every input into token ids; returns the longest sequence, or -1. */
static int prepare(hearth_model *m, char **inputs, int n_in, bool as_ids, hearth_token **ids, int *lens) {
    int max_n = 0;
    for (int i = 0; i < n_in; i++) {
        lens[i] = as_ids ? parse_ids(inputs[i], &ids[i]) : tokenize_text(m, inputs[i], &ids[i]);
        if (lens[i] < 0) return -1;
        if (lens[i] == 0) return cli_fail("input %d has no tokens", i + 1), -1;
        if (lens[i] > max_n) max_n = lens[i];
    }
    return max_n;
}

int cmd_embed(int argc, char **argv) {
    const char *path = NULL;
    bool normalize = false, as_ids = false;
    long threads = 0;
    char **inputs = calloc((size_t)argc + 1, sizeof *inputs), **owned = NULL;
    int n_in = 0;
    if (!inputs) return cli_fail("out of memory");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { embed_usage(); free(inputs); return 0; }
        if (!strcmp(a, "-m") && i + 1 < argc) path = argv[++i];
        else if (!strcmp(a, "-t") && i + 1 < argc) { if (!cli_int(a, argv[++i], 1, 256, &threads)) { free(inputs); return 1; } }
        else if (!strcmp(a, "--normalize")) normalize = true;
        else if (!strcmp(a, "--ids")) as_ids = true;
        else if (!strcmp(a, "--")) { while (++i < argc) inputs[n_in++] = argv[i]; }
        else if (a[0] == '-' && a[1]) { free(inputs); return cli_fail("unknown option '%s' for embed (see hearth embed --help)", a); }
        else inputs[n_in++] = argv[i];
    }
    if (!path) { free(inputs); return cli_fail("embed needs -m MODEL"); }
    if (n_in == 0) {
        free(inputs);
        if (!(inputs = owned = read_lines(&n_in))) return cli_fail("out of memory reading stdin");
        if (n_in == 0) { free(owned); return cli_fail("nothing to embed (give TEXT or lines on stdin)"); }
    }
    hearth_model *m = cli_load_model(path);
    hearth_model_info info;
    hearth_token **ids = calloc((size_t)n_in, sizeof *ids);
    int *lens = calloc((size_t)n_in, sizeof *lens), rc = 1, max_n;
    hearth_ctx *ctx = NULL;
    hearth_err err;
    if (!m || !ids || !lens) { if (m) cli_fail("out of memory"); goto out; }
    hearth_model_get_info(m, &info);
    if ((max_n = prepare(m, inputs, n_in, as_ids, ids, lens)) < 0) goto out;
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = max_n;
    cp.n_batch = max_n;          /* an encoder sees each whole input at once */
    cp.n_threads = (int)threads;
    cp.cache_type = HEARTH_CACHE_F32;
    if (hearth_ctx_new(m, &cp, &ctx, &err)) { cli_fail("%s", err.msg); goto out; }
    rc = 0;
    for (int i = 0; i < n_in && !rc; i++) rc = embed_one(ctx, ids[i], lens[i], info.n_embd, normalize);
out:
    for (int i = 0; ids && i < n_in; i++) free(ids[i]);
    free(ids);
    free(lens);
    for (int i = 0; owned && i < n_in; i++) free(owned[i]);
    free(inputs);
    hearth_ctx_free(ctx);
    hearth_model_free(m);
    return rc;
}
