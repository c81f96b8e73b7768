/* test_fill_mask.c — `hearth fill-mask` on the random-weight DistilBertForMaskedLM fixture: k lines per mask,
 * probabilities descending and summing to <= 1, and the top-1 of each mask equal to the argmax of the masked-LM
 * logits the library computes for the same tokens; plus the one-line errors (no -m, no MLM head). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "hearth.h"
#include "testutil.h"

#define DIR "data/hf/distilbert-hf"
#define TEXT "the [MASK] of the [MASK] ."

/* Runs a shell command, returning its stdout (malloc'd) and exit status. */
static char *run(const char *cmd, int *status) {
    FILE *p = popen(cmd, "r");
    REQUIRE(p, "popen %s", cmd);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t r; (r = fread(buf + n, 1, cap - 1 - n, p)) > 0;) n += r;
    buf[n] = 0;
    *status = pclose(p);
    return buf;
}

/* Argmax of the library's logits at each [MASK] of TEXT (103 = [MASK]); returns the mask count. */
static int library_argmax(hearth_token *best, int cap) {
    hearth_err err;
    hearth_model *m;
    REQUIRE(!hearth_model_load(DIR, &m, &err), "%s", err.msg);
    hearth_token ids[64];
    int n = hearth_tokenize(m, TEXT, strlen(TEXT), true, true, ids, 64, &err);
    REQUIRE(n > 2 && n <= 64, "tokenize: %d", n);
    int8_t want[64];
    for (int i = 0; i < n; i++) want[i] = 1;
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = cp.n_batch = n;
    cp.cache_type = HEARTH_CACHE_F32;
    hearth_ctx *ctx;
    REQUIRE(!hearth_ctx_new(m, &cp, &ctx, &err), "%s", err.msg);
    hearth_batch b = { .n = n, .tokens = ids, .want_logits = want };
    REQUIRE(!hearth_decode(ctx, &b, &err), "%s", err.msg);
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    int k = 0;
    for (int i = 0; i < n && k < cap; i++) {
        if (ids[i] != 103) continue;
        const float *lg = hearth_logits(ctx, i);
        REQUIRE(lg, "no logits at %d", i);
        int a = 0;
        for (int t = 1; t < info.n_vocab; t++) if (lg[t] > lg[a]) a = t;
        best[k++] = a;
    }
    hearth_ctx_free(ctx);
    hearth_model_free(m);
    return k;
}

/* Checks the text output: K lines per mask, blank line between masks, probabilities descending, sum <= 1. */
static void check_text(const char *hearth) {
    char cmd[1024];
    int st;
    snprintf(cmd, sizeof cmd, "'%s' fill-mask -m " DIR " -k 4 '" TEXT "'", hearth);
    char *out = run(cmd, &st);
    CHECK(st == 0, "exit status %d", st);
    int lines = 0, masks = 1;
    double prev = 2, sum = 0;
    for (char *save = NULL, *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        double p;
        CHECK(sscanf(l, "%lf", &p) == 1 && strstr(l, "  "), "bad line '%s'", l);
        if (p > prev) { masks++; CHECK(lines % 4 == 0, "mask %d has %d lines", masks - 1, lines % 4); sum = 0; }
        CHECK(p >= 0 && p <= 1, "probability %g", p);
        sum += p;
        CHECK(sum <= 1.0 + 1e-3, "probabilities sum to %g", sum);
        prev = p;
        lines++;
    }
    CHECK(lines == 8, "%d lines for 2 masks x 4", lines);
    free(out);
}

/* Checks --json: one array per mask, top-1 ids equal to the library's argmax. */
static void check_json(const char *hearth) {
    hearth_token best[8];
    int nb = library_argmax(best, 8);
    CHECK(nb == 2, "%d masks", nb);
    char cmd[1024];
    int st;
    snprintf(cmd, sizeof cmd, "'%s' fill-mask -m " DIR " -k 3 --json '" TEXT "'", hearth);
    char *out = run(cmd, &st);
    CHECK(st == 0, "exit status %d", st);
    int k = 0;
    for (char *save = NULL, *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save), k++) {
        int id = -1;
        CHECK(sscanf(l, "[{\"token\":%d,", &id) == 1, "bad JSON line '%s'", l);
        CHECK(k < nb && id == best[k], "mask %d: CLI top-1 %d, library argmax %d", k, id, k < nb ? best[k] : -1);
        int entries = 0;
        for (const char *p = l; (p = strstr(p, "\"prob\":")); p++) entries++;
        CHECK(entries == 3, "%d entries", entries);
    }
    CHECK(k == nb, "%d JSON lines", k);
    free(out);
}

/* Exit 1 with exactly one line starting "error: ". */
static void check_error(const char *hearth, const char *args) {
    char cmd[1024];
    int st;
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1 >/dev/null", hearth, args);
    char *err = run(cmd, &st);
    size_t len = strlen(err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && !strncmp(err, "error: ", 7) && len && strchr(err, '\n') == err + len - 1,
          "%s: status %d, stderr '%s'", args, st, err);
    free(err);
}

int main(void) {
    const char *hearth = getenv("HEARTH");
    REQUIRE(hearth, "HEARTH not set");
    check_text(hearth);
    check_json(hearth);
    check_error(hearth, "fill-mask 'the [MASK]'");
    check_error(hearth, "fill-mask -m data/hf/bert-hf 'the [MASK]'");
    check_error(hearth, "fill-mask -m data/models/llama.gguf 'the [MASK]'");
    check_error(hearth, "fill-mask -m " DIR " 'no mask here'");
    TEST_DONE();
}
