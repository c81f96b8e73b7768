/* cmd_serve.c — `hearth serve`: flags, model and template loading, signals; the server is src/server.c. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "server/server.h"
#include "generate/speculative.h"

static atomic_int g_stop;   /* lock-free: safe in a signal handler, and read by every server thread */
static void on_stop(int sig) {
    (void)sig;
    int saved = errno;
    atomic_store(&g_stop, 1);
    errno = saved;
}

static void serve_usage(void) {
    printf("usage: hearth serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [--parallel N] [-c CTX] [-t THREADS]\n"
           "                    [--api-key KEY] [--chat-template FILE] [--alias NAME] [-ctk T] [-ctv T]\n"
           "                    [--cache-ram MIB] [--prompt-cache DIR] [--cors-origin ORIGIN]\n"
           "                    [--timeout-idle S] [--timeout-headers S] [--reasoning-format auto|none]\n"
           "An OpenAI-compatible HTTP server: GET /health, GET /v1/models, POST /v1/chat/completions,\n"
           "POST /v1/completions, POST /v1/embeddings (streaming with \"stream\": true; \"return_progress\": true\n"
           "adds prompt_progress chunks {total, cache, processed, time_ms} before the first token).\n"
           "  --host ADDR          address to listen on (default 127.0.0.1: this machine only)\n"
           "  --port P             TCP port (default 8080; 0 picks a free one, printed at start)\n"
           "  --parallel N         requests generated at the same time, batched together (default 4)\n"
           "  --model-draft FILE   speculative decoding: a small model with the same vocabulary proposes tokens for\n"
           "                       every slot (its own KV cache per slot); the replies stay token for token the same\n"
           "  --spec MODE          draft (the default with --model-draft), ngram (look the last tokens up in the\n"
           "                       prompt and reply), or off; a request's \"speculative\": {\"mode\", \"n_max\",\n"
           "                       \"n_min\", \"p_min\"} overrides it\n"
           "  --draft-max N  --draft-min N  --draft-p-min P   proposals per step (default 8), fewest verified (0),\n"
           "                       the drafter's stopping probability (0)\n"
           "  -c CTX               context tokens per request slot (default: the model's, at most 4096)\n"
           "  -t THREADS           compute threads (default: all cores; one for a model too small to split)\n"
           "  --cache-type T       KV cache type of K and V: f16 (default), bf16, q8_0, q4_0 or f32 (q8_0 and\n"
           "                       q4_0 need head sizes that are multiples of 32)\n"
           "  -ctk, --cache-type-k T   the K cache's type alone; -ctv, --cache-type-v T: the V cache's\n"
           "  --api-key KEY        require \"Authorization: Bearer KEY\" (all but /health)\n"
           "  --chat-template F    a Jinja chat template to use instead of the model's\n"
           "  --alias NAME         the model name /v1/models reports (default: the file name)\n"
           "  --cache-ram MIB      the shared prompt cache: KV prefixes any slot can start from (default 1024 MiB;\n"
           "                       0 = off, each slot keeps only its own last prompt)\n"
           "  --prompt-cache DIR   also keep the prompt cache in DIR, so a restarted server starts warm\n"
           "  --cors-origin O      which web pages may call the server from a browser: * (default: any; the API\n"
           "                       key guards it), one origin such as https://app.example, or none\n"
           "  --timeout-idle S     close a connection that sends nothing for S seconds between requests or in the\n"
           "                       middle of one (default 10); a request being answered is never idle, however\n"
           "                       long its prompt takes (SSE streams get a \": keepalive\" comment meanwhile)\n"
           "  --timeout-headers S  a request's headers must all arrive within S seconds of the connection opening\n"
           "                       or of the previous answer, and its body within S more plus 1 s per 500 bytes\n"
           "                       (default 20); near the connection limit the connection waiting longest for its\n"
           "                       request is closed to make room\n"
           "  --lora FILE[,FILE]   LoRA adapters (GGUF or PEFT directory) at scale 1, --lora-scaled FILE:SCALE[,...]\n"
           "                       at SCALE: the global scales (GET/POST /lora-adapters reads / sets them), which a\n"
           "                       request's \"lora\": [{\"id\": N, \"scale\": S}] overrides for itself; requests with\n"
           "                       different adapters share the batch, and the prompt cache keeps them apart\n"
           "  --lora-merge         merge the adapters into the weights at load, at their --lora-scaled scales\n"
           "                       (requantized to each weight's type: a quantized base's logits differ slightly\n"
           "                       from the unmerged path's); the scales are then fixed: POST /lora-adapters and\n"
           "                       a request's \"lora\" are refused\n"
           "  --reasoning-format F auto (default): a model that reasons in its template's markup (<think>, gpt-oss's\n"
           "                       analysis channel, Gemma 4's thought channel) has it returned apart, as\n"
           "                       reasoning_content (OpenAI), thinking blocks (Anthropic), \"thinking\" (Ollama);\n"
           "                       none: the reply whole, markup included (a request's \"reasoning_format\" also)\n"
           "Under mpirun (README: MPI): -np N with --tp K or --split A,B,... spreads the model over the N ranks;\n"
           "  --dp R               R replicas, each on N / R consecutive ranks (one: the whole model; more: spread by\n"
           "                       --tp / --split / pipeline stages inside the replica); rank 0 answers HTTP and routes\n"
           "                       each request to one (mpirun -np 4 hearth serve --dp 2 --tp 2: 2 replicas of 2 ranks)\n"
           "Stops on Ctrl-C or SIGTERM. One line per request on stderr.\n");
}

static bool known(const char *a) {
    static const char *const OPTS[] = { "-m", "--host", "--port", "--parallel", "-np", "-c", "-t", "--api-key",
                                        "--chat-template", "--alias", "--cache-type", "--cache-type-k", "-ctk", "--cache-type-v", "-ctv",
                                        "--cache-ram", "--prompt-cache", "--cors-origin", "--timeout-idle", "--timeout-headers",
                                        "--lora", "--lora-scaled", "--reasoning-format", "--model-draft", "--spec", "--draft-max",
                                        "--draft-min", "--draft-p-min" };
    for (size_t i = 0; i < sizeof OPTS / sizeof OPTS[0]; i++) if (!strcmp(a, OPTS[i])) return true;
    return false;
}

static int parse_opts(int argc, char **argv, server_params *p, const char **model, const char **tmpl, cli_lora *lora,
                      const char **draft) {
    long port = 8080, parallel = 4, n_ctx = 0, threads = 0, cache_ram = 1024, idle = 10, head = 20, dmax = 8, dmin = 0;
    double pmin = 0;
    const char *spec = NULL;
    for (int i = 1; i < argc; i += 2) {   /* every option but --lora-merge takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { serve_usage(); return 0; }
        if (!strcmp(a, "--lora-merge")) { lora->merge = true; i--; continue; }   /* (the one switch) */
        if (!known(a)) { cli_fail("unknown option '%s' for serve (see hearth serve --help)", a); return 1; }
        if (!v) { cli_fail("missing value for %s", a); return 1; }
        if (!strcmp(a, "-m")) *model = v;
        else if (!strcmp(a, "--host")) p->host = v;
        else if (!strcmp(a, "--port")) ok = cli_int(a, v, 0, 65535, &port);
        else if (!strcmp(a, "--parallel") || !strcmp(a, "-np")) ok = cli_int(a, v, 1, 256, &parallel);
        else if (!strcmp(a, "-c")) ok = cli_int(a, v, 1, 1 << 22, &n_ctx);
        else if (!strcmp(a, "-t")) ok = cli_int(a, v, 1, 256, &threads);
        else if (!strcmp(a, "--api-key")) p->api_key = v;
        else if (!strcmp(a, "--chat-template")) *tmpl = v;
        else if (!strcmp(a, "--alias")) p->model_id = v;
        else if (cli_is_cache_flag(a)) ok = cli_cache_types(a, v, p->cache_type);
        else if (!strcmp(a, "--cache-ram")) ok = cli_int(a, v, 0, 1L << 30, &cache_ram);
        else if (!strcmp(a, "--prompt-cache")) p->prompt_cache = v;
        else if (!strcmp(a, "--cors-origin")) p->cors_origin = v;
        else if (!strcmp(a, "--timeout-idle")) ok = cli_int(a, v, 1, 86400, &idle);
        else if (!strcmp(a, "--timeout-headers")) ok = cli_int(a, v, 1, 86400, &head);
        else if (!strcmp(a, "--lora") || !strcmp(a, "--lora-scaled")) ok = cli_lora_arg(a, v, lora);
        else if (!strcmp(a, "--model-draft")) *draft = v;
        else if (!strcmp(a, "--draft-max")) ok = cli_int(a, v, 1, SPEC_MAX_DRAFT, &dmax);
        else if (!strcmp(a, "--draft-min")) ok = cli_int(a, v, 0, SPEC_MAX_DRAFT, &dmin);
        else if (!strcmp(a, "--draft-p-min")) {
            ok = cli_float(a, v, &pmin);
            if (ok && !(pmin >= 0 && pmin <= 1)) ok = !cli_fail("bad value for --draft-p-min: '%s' (expected a number from 0 to 1)", v);
        } else if (!strcmp(a, "--spec")) {
            spec = v;
            if (strcmp(v, "draft") && strcmp(v, "ngram") && strcmp(v, "off"))
                ok = !cli_fail("bad value for --spec: '%s' (expected draft, ngram or off)", v);
        }
        else if (!strcmp(a, "--reasoning-format")) {
            if (!strcmp(v, "none")) p->reasoning_none = true;
            else if (strcmp(v, "auto") && strcmp(v, "deepseek")) ok = !cli_fail("--reasoning-format must be none or auto, not '%s'", v);
        } else { cli_fail("unknown option '%s' for serve (see hearth serve --help)", a); return 1; }
        if (!ok) return 1;
    }
    p->port = (int)port; p->parallel = (int)parallel; p->n_ctx = (int)n_ctx; p->n_threads = (int)threads;
    p->cache_ram = (size_t)cache_ram << 20;
    p->timeout_idle = (int)idle; p->timeout_headers = (int)head;
    if (spec && !strcmp(spec, "draft") && !*draft) { cli_fail("--spec draft needs --model-draft FILE"); return 1; }
    p->spec_mode = spec && !strcmp(spec, "off") ? 0 : spec && !strcmp(spec, "ngram") ? 2 : *draft ? 1 : 0;
    p->draft_max = (int)dmax, p->draft_min = (int)dmin, p->draft_p_min = (float)pmin;
    return -1;
}

int cmd_serve(int argc, char **argv) {
    server_params p = { .host = "127.0.0.1", .cache_type = { HEARTH_CACHE_F16, HEARTH_CACHE_F16 } };
    const char *model = NULL, *tmpl_path = NULL, *draft = NULL;
    cli_lora lora = { 0 };
    int rc = parse_opts(argc, argv, &p, &model, &tmpl_path, &lora, &draft);
    if (rc >= 0) { cli_lora_free(&lora); return rc; }
    if (!model) model = cli_default_model();
    if (!p.model_id && model == cli_default_model()) p.model_id = "stories260K";
    if (!p.model_id) { const char *sl = strrchr(model, '/'); p.model_id = sl ? sl + 1 : model; }
    char *tmpl = NULL;
    if (tmpl_path && !(tmpl = cli_read_file(tmpl_path, NULL))) return 1;
    p.chat_template = tmpl;
    hearth_model *m = cli_load_model(model);
    if (m && draft && !(p.draft_model = cli_load_model(draft))) { hearth_model_free(m); m = NULL; }
    if (!m || cli_lora_load(m, &lora)) { free(tmpl); cli_lora_free(&lora); hearth_model_free(m); hearth_model_free(p.draft_model); return 1; }
    p.lora = lora.a, p.lora_scale = lora.scale, p.n_lora = lora.n, p.lora_path = (const char *const *)lora.path;
    p.lora_merged = lora.merge;
    struct sigaction sa = { .sa_handler = on_stop };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    hearth_err err;
    rc = server_run(m, &p, &g_stop, &err) ? cli_fail("%s", err.msg) : 0;
    cli_lora_free(&lora);
    hearth_model_free(m);
    hearth_model_free(p.draft_model);
    free(tmpl);
    return rc;
}
