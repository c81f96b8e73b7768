/* server.h — `hearth serve`: an OpenAI-compatible HTTP server (libmicrohttpd) over one model. One engine
 * thread owns the context and decodes every active request (slot) together, one batch per step; HTTP
 * connection threads parse requests, queue them and stream the tokens back. See server.c. */
#ifndef HEARTH_SERVER_H
#define HEARTH_SERVER_H

#include <stdatomic.h>
#include <stddef.h>

#include "hearth.h"

typedef struct {
    const char *host;           /* address to bind; "127.0.0.1" by default */
    int port;                   /* 0 = any free port (the chosen one is printed) */
    int parallel;               /* slots: requests generated at the same time */
    int n_ctx;                  /* tokens of context per slot; 0 = the model's, at most 4096 */
    int n_threads;              /* 0 = all cores */
    hearth_cache_type cache_type[2];   /* K and V cache types (hearth_ctx_default_params': HEARTH_CACHE_F16) */
    const char *api_key;        /* NULL = no authentication */
    const char *chat_template;  /* Jinja source overriding the model's, or NULL */
    const char *model_id;       /* the name /v1/models reports */
    size_t max_body;            /* largest request body accepted (bytes); 0 = 8 MiB */
    size_t cache_ram;           /* bytes of shared prompt cache (KV prefixes for every slot); 0 = none */
    const char *prompt_cache;   /* directory keeping the prompt cache across restarts, or NULL */
    const char *cors_origin;    /* Access-Control-Allow-Origin: NULL = "*", "none" = no CORS headers */
    int timeout_idle;           /* seconds a connection may send nothing (between requests, or mid-head); 0 = 10 */
    int timeout_headers;        /* seconds for a whole request head (and the grace of its body); 0 = 20 */
    hearth_lora *const *lora;   /* LoRA adapters: each request's (its "lora" field over these global scales) */
    const float *lora_scale;
    const char *const *lora_path;   /* their files, as /lora-adapters lists them */
    int n_lora;
    bool lora_merged;           /* merged into the weights (--lora-merge): listed, their scales fixed */
    bool reasoning_none;        /* --reasoning-format none: replies whole, reasoning markup and all */
    hearth_model *draft_model;  /* --model-draft: proposes tokens for every slot (its own KV cache per slot), or NULL */
    int spec_mode;              /* speculation by default: 0 off, 1 draft model, 2 n-gram lookup (see srv_task) */
    int draft_max, draft_min;   /* proposals per step, and the fewest worth verifying */
    float draft_p_min;          /* the drafter stops below this probability */
} server_params;

/* Serves until *stop becomes nonzero (e.g. set by a SIGINT handler: a lock-free atomic is safe to store to
 * there, and every thread may read it). Prints "listening on http://H:P" to stderr once ready. Returns 0
 * after a clean stop, -1 if the server could not start. */
int server_run(hearth_model *m, const server_params *p, atomic_int *stop, hearth_err *err);

#endif
