/* cmd_imatrix.c — `hearth imatrix`: an importance matrix of a model over a text, by llama-imatrix's method, in
 * its GGUF format (read by `hearth quantize --imatrix` and llama-quantize).
 *
 * The text is tokenized once with BOS and cut into chunks of -c tokens (at least two chunks' worth needed, as
 * llama-imatrix asks); each chunk is evaluated alone on a cleared sequence with its first token replaced by BOS,
 * and every weight product's input rows are summed squared per column (model/imatrix.c). */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model/imatrix.h"

static void imatrix_usage(void) {
    printf("usage: hearth imatrix [-m MODEL] -f TEXT [-o OUT.gguf] [-c N_CTX] [--chunks N] [-t THREADS] [--process-output]\n"
           "Collects an importance matrix as llama-imatrix does: the text is tokenized with BOS and cut into chunks\n"
           "of N_CTX tokens (it must hold at least two), each evaluated alone with its first token replaced by BOS;\n"
           "for every matrix blk.* the squared inputs of its products are summed per column (expert stacks per\n"
           "expert, over the rows routed to it) and counted. Writes llama.cpp's GGUF imatrix format (imatrix.datasets,\n"
           "imatrix.chunk_count, imatrix.chunk_size, NAME.in_sum2, NAME.counts). Defaults: -o imatrix.gguf, -c 512,\n"
           "every whole chunk, all cores.\n"
           "  --chunks N          use at most N chunks\n"
           "  --process-output    collect output.weight too\n");
}

int cmd_imatrix(int argc, char **argv) {
    const char *model = NULL, *text_path = NULL, *out = "imatrix.gguf";
    long n_ctx = 512, chunks = -1, threads = 0;
    bool process_output = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { imatrix_usage(); return 0; }
        if (!strcmp(a, "--process-output")) { process_output = true; continue; }
        if (!v) return cli_fail("missing value for %s", a);
        i++;
        if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "-f")) text_path = v;
        else if (!strcmp(a, "-o")) out = v;
        else if (!strcmp(a, "-c")) ok = cli_int(a, v, 16, 1 << 20, &n_ctx);
        else if (!strcmp(a, "--chunks")) ok = cli_int(a, v, 1, 1 << 30, &chunks);
        else if (!strcmp(a, "-t")) ok = cli_int(a, v, 1, 256, &threads);
        else return cli_fail("unknown option '%s' for imatrix (see hearth imatrix --help)", a);
        if (!ok) return 1;
    }
    if (!text_path) return cli_fail("imatrix needs -f TEXT (see hearth imatrix --help)");

    hearth_model *m = cli_load_model(model ? model : cli_default_model());
    if (!m) return 1;
    hearth_ctx *ctx = NULL;
    ht_imatrix *im = NULL;
    hearth_token *toks = NULL, *scratch = NULL;
    int rc = 1;
    size_t len;
    char *text = cli_read_file(text_path, &len);
    if (!text) goto out;
    int n_tok = cli_tokenize(m, text, len, true, false, &toks);
    free(text);
    if (n_tok < 0) goto out;
    if (n_tok < 2 * n_ctx) {
        cli_fail("%s is %d tokens: a context of %ld needs at least %ld", text_path, n_tok, n_ctx, 2 * n_ctx);
        goto out;
    }
    int n_chunks = (int)(n_tok / n_ctx);
    if (chunks > 0 && chunks < n_chunks) n_chunks = (int)chunks;
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    if (info.is_encoder) { cli_fail("%s is an encoder (%s): imatrix runs causal models", model, info.arch); goto out; }
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = (int)n_ctx;
    cp.n_batch = (int)n_ctx;
    cp.n_threads = (int)threads;
    hearth_err err;
    if (hearth_ctx_new(m, &cp, &ctx, &err)) { cli_fail("%s", err.msg); goto out; }
    if (hearth_ctx_n_ctx(ctx) < n_ctx) { cli_fail("the model allows a context of %d, not -c %ld", hearth_ctx_n_ctx(ctx), n_ctx); goto out; }
    if (!(im = imatrix_new(process_output)) || !(scratch = malloc((size_t)n_ctx * sizeof *scratch))) { cli_fail("out of memory"); goto out; }
    int8_t *want = NULL;
    if (process_output && !(want = malloc((size_t)n_ctx))) { cli_fail("out of memory"); goto out; }
    if (want) memset(want, 1, (size_t)n_ctx);   /* output.weight sees every row, as llama-imatrix asks for all logits */
    const hearth_token bos = cli_chunk_bos(m);
    fprintf(stderr, "imatrix: %d tokens, %d chunks of %ld\n", n_tok, n_chunks, n_ctx);
    imatrix_attach(im, ctx);
    for (int c = 0; c < n_chunks; c++) {
        memcpy(scratch, toks + (size_t)c * n_ctx, (size_t)n_ctx * sizeof *scratch);
        if (bos >= 0) scratch[0] = bos;
        hearth_seq_truncate(ctx, 0, 0);
        hearth_batch b = { .n = (int)n_ctx, .tokens = scratch, .want_logits = want };
        if (hearth_decode(ctx, &b, &err)) { free(want); cli_fail("%s", err.msg); goto out; }
        fprintf(stderr, "\r[%d/%d]", c + 1, n_chunks);
    }
    fprintf(stderr, "\n");
    free(want);
    imatrix_attach(NULL, ctx);
    const char *ds[1] = { text_path };
    if (imatrix_write(im, out, ds, 1, (int)n_ctx, &err)) { cli_fail("%s", err.msg); goto out; }
    fprintf(stderr, "imatrix: %d entries written to %s\n", imatrix_entries(im), out);
    rc = 0;
out:
    imatrix_free(im);
    free(scratch);
    free(toks);
    hearth_ctx_free(ctx);
    hearth_model_free(m);
    return rc;
}
