/* cmd_run.c — `hearth run`: prefill the prompt in one batch, then sample and stream tokens. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void run_usage(void) {
    printf("usage: hearth run [-m MODEL] [-p PROMPT] [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P]\n"
           "                  [--repeat-penalty R] [--seed S] [-t THREADS] [-c CTX]\n"
           "Prints the prompt's continuation as it is generated, then a stats line on stderr.\n"
           "Defaults: the embedded stories260K model, empty prompt (BOS only), -n 128, temp 0.8, top-k 40,\n"
           "top-p 0.95, min-p 0.05, repeat-penalty 1.0, random seed. -n -1 runs until end of text or context.\n");
}

int cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = "";
    long n_predict = 128, threads = 0, n_ctx = 0, top_k = 40, seed = -1;
    double temp = 0.8, top_p = 0.95, min_p = 0.05, rep = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { run_usage(); return 0; }
        else if (!v) return cli_fail("missing value for %s", a);
        else if (!strcmp(a, "-m")) model_path = v;
        else if (!strcmp(a, "-p")) prompt = v;
        else if (!strcmp(a, "-n")) ok = cli_int(a, v, -1, 1 << 30, &n_predict);
        else if (!strcmp(a, "--temp")) ok = cli_float(a, v, &temp);
        else if (!strcmp(a, "--top-k")) ok = cli_int(a, v, 0, 1 << 30, &top_k);
        else if (!strcmp(a, "--top-p")) ok = cli_float(a, v, &top_p);
        else if (!strcmp(a, "--min-p")) ok = cli_float(a, v, &min_p);
        else if (!strcmp(a, "--repeat-penalty")) ok = cli_float(a, v, &rep);
        else if (!strcmp(a, "--seed")) ok = cli_int(a, v, 0, 0x7fffffffL, &seed);
        else if (!strcmp(a, "-t")) ok = cli_int(a, v, 1, 256, &threads);
        else if (!strcmp(a, "-c")) ok = cli_int(a, v, 1, 1 << 22, &n_ctx);
        else return cli_fail("unknown option '%s' for run (see hearth run --help)", a);
        if (!ok) return 1;
        i++;
    }
    hearth_model *m = cli_load_model(model_path ? model_path : cli_default_model());
    if (!m) return 1;
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    int rc = 1;
    hearth_ctx *ctx = NULL;
    hearth_sampler *smp = NULL;
    hearth_token *toks = NULL;
    hearth_err err;
    if (info.is_encoder) { cli_fail("%s is an encoder (%s): it embeds text, it does not generate; use hearth embed", model_path, info.arch); goto out; }
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = (int)n_ctx;
    cp.n_threads = (int)threads;
    if (hearth_ctx_new(m, &cp, &ctx, &err)) { cli_fail("%s", err.msg); goto out; }
    int cap = hearth_ctx_n_ctx(ctx);
    toks = malloc((size_t)cap * sizeof *toks);
    if (!toks) { cli_fail("out of memory"); goto out; }
    int n = hearth_tokenize(m, prompt, strlen(prompt), true, false, toks, cap, &err);
    if (n < 0) { cli_fail("%s", err.msg); goto out; }
    if (n == 0) { hearth_token bos = hearth_token_bos(m); if (bos < 0) { cli_fail("empty prompt and the model has no BOS token"); goto out; } toks[n++] = bos; }
    if (n >= cap) { cli_fail("prompt is %d tokens, context is %d", n, cap); goto out; }

    hearth_sampler_params sp = hearth_sampler_default_params();
    sp.temperature = (float)temp; sp.top_k = (int)top_k; sp.top_p = (float)top_p; sp.min_p = (float)min_p;
    sp.repeat_penalty = (float)rep;
    sp.seed = seed >= 0 ? (uint64_t)seed : (uint64_t)time(NULL) ^ (uint64_t)clock();
    smp = hearth_sampler_new(&sp, info.n_vocab);
    if (!smp) { cli_fail("out of memory"); goto out; }

    double t0 = now_ms();
    hearth_batch b = { .n = n, .tokens = toks };
    if (hearth_decode(ctx, &b, &err)) { cli_fail("%s", err.msg); goto out; }
    double t1 = now_ms();
    int n_prompt = n, n_gen = 0;
    hearth_detok dt = { 0 };
    char buf[512];
    while (n_predict < 0 || n_gen < n_predict) {
        hearth_token t = hearth_sample(smp, hearth_logits(ctx, b.n - 1), toks, n);
        hearth_sampler_accept(smp, t);
        if (hearth_token_is_eog(m, t)) break;
        int k = hearth_detok_push(m, &dt, t, buf, sizeof buf);
        fwrite(buf, 1, (size_t)k, stdout);
        fflush(stdout);
        toks[n++] = t;
        n_gen++;
        if (n >= cap) { fprintf(stderr, "\n[context full at %d tokens]", cap); break; }
        b = (hearth_batch){ .n = 1, .tokens = &toks[n - 1] };
        if (hearth_decode(ctx, &b, &err)) { cli_fail("%s", err.msg); goto out; }
    }
    int k = hearth_detok_flush(&dt, buf, sizeof buf);
    fwrite(buf, 1, (size_t)k, stdout);
    printf("\n");
    double t2 = now_ms();
    fprintf(stderr, "prefill %d tok, %.2f ms/tok · decode %d tok, %.2f ms/tok · ctx %d/%d\n", n_prompt,
            (t1 - t0) / n_prompt, n_gen, n_gen ? (t2 - t1) / n_gen : 0.0, n, cap);
    rc = 0;
out:
    free(toks);
    hearth_sampler_free(smp);
    hearth_ctx_free(ctx);
    hearth_model_free(m);
    return rc;
}
