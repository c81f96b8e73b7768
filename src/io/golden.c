/* golden.c — reading and writing golden files, every count checked against the file size. */
#include "io/golden.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static bool rd(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

int golden_read(const char *path, golden_file *out, hearth_err *err) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return herr(err, "cannot open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char magic[4];
    uint32_t version, n;
    if (!rd(f, magic, 4) || memcmp(magic, "HGLD", 4) || !rd(f, &version, 4) || version != 1 || !rd(f, &n, 4)) {
        fclose(f);
        return herr(err, "%s: not a version-1 golden file", path);
    }
    if ((uint64_t)n * 12 > (uint64_t)size) { fclose(f); return herr(err, "%s: %u cases cannot fit in the file", path, n); }
    out->cases = calloc(n ? n : 1, sizeof *out->cases);
    if (!out->cases) { fclose(f); return herr(err, "out of memory"); }
    out->n_cases = n;
    for (uint32_t i = 0; i < n; i++) {
        golden_case *c = &out->cases[i];
        uint32_t hdr[3];
        if (!rd(f, hdr, sizeof hdr)) goto trunc;
        c->n_tokens = hdr[0]; c->n_out = hdr[1]; c->kind = hdr[2];
        if (c->kind > 2) { fclose(f); golden_free(out); return herr(err, "%s: case %u has unknown kind %u", path, i, c->kind); }
        uint64_t rows = golden_rows(c), nv = rows * (uint64_t)c->n_out;
        if ((uint64_t)c->n_tokens * 4 + nv * 4 > (uint64_t)size) goto trunc;
        c->tokens = malloc((size_t)c->n_tokens * 4 + 4);
        c->values = malloc((size_t)nv * 4 + 4);
        if (!c->tokens || !c->values) { fclose(f); golden_free(out); return herr(err, "out of memory"); }
        if (!rd(f, c->tokens, (size_t)c->n_tokens * 4) || !rd(f, c->values, (size_t)nv * 4)) goto trunc;
    }
    fclose(f);
    return 0;
trunc:
    fclose(f);
    golden_free(out);
    return herr(err, "%s: truncated", path);
}

int golden_write(const char *path, const golden_file *g, hearth_err *err) {
    FILE *f = fopen(path, "wb");
    if (!f) return herr(err, "cannot create %s: %s", path, strerror(errno));
    uint32_t version = 1;
    bool ok = fwrite("HGLD", 1, 4, f) == 4 && fwrite(&version, 4, 1, f) == 1 && fwrite(&g->n_cases, 4, 1, f) == 1;
    for (uint32_t i = 0; ok && i < g->n_cases; i++) {
        const golden_case *c = &g->cases[i];
        uint32_t hdr[3] = { c->n_tokens, c->n_out, c->kind };
        size_t nv = (size_t)golden_rows(c) * c->n_out;
        ok = fwrite(hdr, 4, 3, f) == 3 && fwrite(c->tokens, 4, c->n_tokens, f) == c->n_tokens &&
             fwrite(c->values, 4, nv, f) == nv;
    }
    if (fclose(f) || !ok) return herr(err, "cannot write %s", path);
    return 0;
}

void golden_free(golden_file *g) {
    for (uint32_t i = 0; i < g->n_cases; i++) { free(g->cases[i].tokens); free(g->cases[i].values); }
    free(g->cases);
    memset(g, 0, sizeof *g);
}

/* Rows of logits (kind 0) or hidden states (kinds 1, 2) for every position of ref, batched or token by token. */
static int eval_rows(hearth_ctx *ctx, const golden_case *ref, bool token_by_token, int width, float *values, hearth_err *err) {
    int n = (int)ref->n_tokens;
    int8_t *want = malloc((size_t)n);
    if (!want) return herr(err, "out of memory");
    memset(want, 1, (size_t)n);
    hearth_seq_truncate(ctx, 0, 0);
    int step = token_by_token ? 1 : n;
    for (int i0 = 0; i0 < n; i0 += step) {
        int m = HT_MIN(step, n - i0);
        hearth_batch b = { .n = m, .tokens = ref->tokens + i0, .want_logits = want };
        if (hearth_decode(ctx, &b, err)) { free(want); return -1; }
        for (int i = 0; i < m; i++) {
            const float *row = ref->kind == GOLDEN_LOGITS ? hearth_logits(ctx, i) : hearth_hidden(ctx, i);
            if (!row) {
                free(want);
                return ref->kind == GOLDEN_LOGITS ? herr(err, "no logits for row %d (an encoder without a language-model head?)", i0 + i)
                                                  : herr(err, "no output for row %d", i0 + i);
            }
            memcpy(values + (size_t)(i0 + i) * width, row, (size_t)width * sizeof(float));
        }
    }
    free(want);
    return 0;
}

/* Mean over positions into row 0: a decoder's pooling, for the token-by-token path. */
static void mean_rows(float *values, int n, int width) {
    for (int k = 0; k < width; k++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += values[(size_t)i * width + k];
        values[k] = (float)(s / n);
    }
}

int golden_eval(hearth_ctx *ctx, const golden_case *ref, bool token_by_token, golden_case *out, hearth_err *err) {
    hearth_model_info info;
    memset(out, 0, sizeof *out);
    hearth_model_get_info(hearth_ctx_model(ctx), &info);
    int n = (int)ref->n_tokens, width = ref->kind == GOLDEN_LOGITS ? info.n_vocab : info.n_embd;
    if (n <= 0) return herr(err, "golden case has no tokens");
    if (info.is_encoder && token_by_token)
        return herr(err, "%s is an encoder: it sees whole sequences, so token-by-token evaluation does not apply", info.arch);
    out->n_tokens = ref->n_tokens;
    out->kind = ref->kind;
    out->n_out = (uint32_t)width;
    out->tokens = malloc((size_t)n * sizeof(int32_t));
    out->values = calloc((size_t)n * width, sizeof(float));
    if (!out->tokens || !out->values) return herr(err, "out of memory");
    memcpy(out->tokens, ref->tokens, (size_t)n * sizeof(int32_t));
    if (ref->kind != GOLDEN_POOLED) return eval_rows(ctx, ref, token_by_token, width, out->values, err);
    if (token_by_token) {   /* decoders pool by the mean of their last hidden state, which needs every row */
        if (eval_rows(ctx, ref, true, width, out->values, err)) return -1;
        mean_rows(out->values, n, width);
        return 0;
    }
    if (hearth_embed_rows(ctx, n) != 1) return herr(err, "the model does not pool (pooling type none)");
    return hearth_embed(ctx, ref->tokens, n, out->values, err) < 0 ? -1 : 0;
}
