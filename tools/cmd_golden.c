/* cmd_golden.c — `hearth golden -m MODEL -i REF.golden -o OUT.golden`: evaluates each case's tokens
 * (one batch per sequence, or --token-by-token through the KV cache) and writes our outputs in the
 * same format, so they can be compared with the reference engine's. --lora / --lora-scaled apply adapters. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "io/golden.h"

int cmd_golden(int argc, char **argv) {
    const char *path = NULL, *in = NULL, *outp = NULL;
    bool seq = false;
    long threads = 0;
    cli_lora lora = { 0 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: hearth golden -m MODEL -i REF.golden -o OUT.golden [--token-by-token] [-t THREADS]\n"
                   "                     [--lora FILE[,FILE]] [--lora-scaled FILE:SCALE[,FILE:SCALE]] [--lora-merge]\n");
            return 0;
        }
        if (!strcmp(a, "-m") && i + 1 < argc) path = argv[++i];
        else if (!strcmp(a, "-i") && i + 1 < argc) in = argv[++i];
        else if (!strcmp(a, "-o") && i + 1 < argc) outp = argv[++i];
        else if (!strcmp(a, "-t") && i + 1 < argc) { if (!cli_int(a, argv[++i], 1, 256, &threads)) return 1; }
        else if (!strcmp(a, "--token-by-token")) seq = true;
        else if (!strcmp(a, "--lora-merge")) lora.merge = true;
        else if ((!strcmp(a, "--lora") || !strcmp(a, "--lora-scaled")) && i + 1 < argc) { if (!cli_lora_arg(a, argv[++i], &lora)) return 1; }
        else return cli_fail("unknown option '%s' for golden", a);
    }
    if (!path || !in || !outp) return cli_fail("golden needs -m MODEL -i REF.golden -o OUT.golden");
    hearth_err err;
    golden_file ref, out = { 0 };
    if (golden_read(in, &ref, &err)) { cli_lora_free(&lora); return cli_fail("%s", err.msg); }
    hearth_model *m = cli_load_model(path);
    if (!m) { golden_free(&ref); cli_lora_free(&lora); return 1; }
    int rc = 1, max_n = 1;
    for (uint32_t i = 0; i < ref.n_cases; i++) max_n = HT_MAX(max_n, (int)ref.cases[i].n_tokens);
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = max_n;
    cp.n_batch = max_n;
    cp.n_threads = (int)threads;
    cp.cache_type = HEARTH_CACHE_F32;
    hearth_ctx *ctx = NULL;
    if (cli_lora_load(m, &lora)) goto done;   /* (--lora-merge: before the first context) */
    if (hearth_ctx_new(m, &cp, &ctx, &err)) { cli_fail("%s", err.msg); goto done; }
    if (cli_lora_set(ctx, &lora)) goto done;
    out.n_cases = ref.n_cases;
    out.cases = calloc(ref.n_cases ? ref.n_cases : 1, sizeof *out.cases);
    if (!out.cases) { cli_fail("out of memory"); goto done; }
    for (uint32_t i = 0; i < ref.n_cases; i++)
        if (golden_eval(ctx, &ref.cases[i], seq, &out.cases[i], &err)) { cli_fail("case %u: %s", i, err.msg); goto done; }
    if (golden_write(outp, &out, &err)) { cli_fail("%s", err.msg); goto done; }
    rc = 0;
done:
    golden_free(&ref);
    golden_free(&out);
    hearth_ctx_free(ctx);
    cli_lora_free(&lora);
    hearth_model_free(m);
    return rc;
}
