/* cmd_tokenize.c — `hearth tokenize`: token ids of a text, space-separated on one line. -m may also name just a
 * tokenizer (a tokenizer.json, or a directory of tokenizer files without config.json): no weights are loaded. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* A tokenizer.json, or a directory without config.json: load the tokenizer alone. */
static bool tokenizer_only(const char *path) {
    size_t n = strlen(path);
    struct stat st;
    char cfg[4096];
    if (n >= 5 && !strcmp(path + n - 5, ".json")) return true;
    if (stat(path, &st) || !S_ISDIR(st.st_mode)) return false;
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    return access(cfg, F_OK) != 0;
}

static hearth_model *load(const char *path) {
    hearth_err err;
    hearth_model *m;
    if (!tokenizer_only(path)) return cli_load_model(path);
    if (hearth_tokenizer_load(path, &m, &err)) { cli_fail("%s: %s", path, err.msg); return NULL; }
    return m;
}

int cmd_tokenize(int argc, char **argv) {
    const char *path = NULL, *file = NULL, *text = NULL;
    bool bos = true, pieces = false, special = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: hearth tokenize [-m MODEL] [--no-bos] [--special] [--pieces] (-f FILE | TEXT)\n"
                   "--special parses special-token text (e.g. <|im_start|>) as the special token.\n"
                   "MODEL may be a tokenizer.json, or a directory with tokenizer files only (no weights loaded).\n");
            return 0;
        }
        if (!strcmp(a, "-m") && i + 1 < argc) path = argv[++i];
        else if (!strcmp(a, "-f") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(a, "--no-bos")) bos = false;
        else if (!strcmp(a, "--pieces")) pieces = true;
        else if (!strcmp(a, "--special")) special = true;
        else if (a[0] == '-' && a[1]) return cli_fail("unknown option '%s' for tokenize", a);
        else if (!text) text = a;
        else return cli_fail("tokenize takes one TEXT (quote it)");
    }
    if (!!file == !!text) return cli_fail("tokenize needs exactly one of -f FILE or TEXT");
    size_t len = 0;
    char *owned = NULL;
    if (file) { if (!(owned = cli_read_file(file, &len))) return 1; text = owned; }
    else len = strlen(text);
    hearth_model *m = load(path ? path : cli_default_model());
    if (!m) { free(owned); return 1; }
    int rc = 1;
    hearth_token *ids = NULL;
    int n = cli_tokenize(m, text, len, bos, special, &ids);
    if (n >= 0) {
        char piece[256];
        for (int i = 0; i < n; i++) {
            printf(i ? " %d" : "%d", ids[i]);
            if (pieces) {
                int k = hearth_token_text(m, ids[i], piece, sizeof piece);   /* specials by name */
                printf(":'%.*s'", k < (int)sizeof piece ? k : (int)sizeof piece, piece);
            }
        }
        printf("\n");
        rc = 0;
    }
    free(ids);
    free(owned);
    hearth_model_free(m);
    return rc;
}
