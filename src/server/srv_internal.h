/* srv_internal.h — what the server's parts share: a task (one request's work and its progress, handed
 * from an HTTP thread to the engine thread and read back while it runs), the engine (srv_engine.c: slots,
 * continuous batching) and the OpenAI request/response layer (srv_api.c). */
#ifndef HEARTH_SRV_INTERNAL_H
#define HEARTH_SRV_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "generate/chat.h"
#include "generate/reasoning.h"
#include "hearth.h"
#include "server/server.h"

#define SRV_MAX_TOP 20      /* top_logprobs limit */
#define SRV_MAX_STOP 16     /* stop strings per request */
#define SRV_MAX_BIAS 1024   /* logit_bias entries per request */

typedef struct {
    hearth_token id;
    float logprob;
    int n_top;
    hearth_token top_id[SRV_MAX_TOP];
    float top_lp[SRV_MAX_TOP];
    size_t text_end;        /* the task's text length once this token was added */
} srv_tok;

typedef enum { TASK_GENERATE, TASK_EMBED } srv_kind;

/* Shared by the HTTP thread that made it and the engine; freed when both released it. Fields above `mu`
 * are fixed before engine_submit; the rest are written by the engine under mu (cv signals progress). */
typedef struct srv_task {
    srv_kind kind;
    hearth_token *prompt; int n_prompt;
    int max_tokens;                 /* < 0: until end of text or a full context */
    char *stop[SRV_MAX_STOP]; int n_stop;
    hearth_sampler_params sp;
    int n_probs;                    /* < 0: no logprobs; else top alternatives per token */
    bool ignore_eos;
    bool no_cache;                  /* cache_prompt: false — evaluate the whole prompt, reuse nothing */
    float lora[HEARTH_MAX_LORA];    /* the server's adapters' scales for this request (the global ones, then "lora") */
    hearth_token bias_id[SRV_MAX_BIAS]; float bias[SRV_MAX_BIAS]; int n_bias;   /* logit_bias */
    hearth_grammar *grammar;        /* response_format / grammar / json_schema: the reply follows it */
    char *grammar_src;              /* ... its GBNF text (a replica of serve --dp compiles it again) */
    int spec_mode;                  /* "speculative": {"mode"}: -1 the server's, 0 off, 1 draft, 2 ngram */
    int spec_n_max, spec_n_min;     /* its "n_max", "n_min" (-1: the server's) */
    float spec_p_min;               /* its "p_min" (< 0: the server's) */
    char *tool_params;              /* XML tool calls: {name: parameters schema} of the tools, to type the values */
    char *warning;                  /* what the schema said that is not enforced (unknown formats), or NULL */
    hearth_token **in; int *n_in; int n_inputs;   /* embeddings: one token list per input */

    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *text; size_t len, cap;    /* generated text */
    size_t stable;                  /* text[0..stable) can no longer be cut by a stop string */
    srv_tok *toks; int n_toks, cap_toks;   /* kept only when n_probs >= 0 */
    int n_gen;                      /* tokens generated */
    int n_cached;                   /* prompt tokens reused from the slot's cache */
    int n_done;                     /* prompt tokens in the slot's KV so far (reused + evaluated) */
    double t_start;                 /* ms: the prompt started in a slot (0: still queued) */
    float *emb; int dim;            /* embeddings: n_inputs rows of dim floats */
    bool done, cancelled;
    const char *finish;             /* "stop" or "length" */
    const char *stop_hit;           /* the stop string that ended the text (one of stop[]), or NULL */
    int status; char err[256];      /* status != 0: failed with that HTTP status and message */
    double t_submit, t_first, t_done;   /* ms: queued, first token sampled, finished */
    int refs;
} srv_task;

srv_task *task_new(srv_kind kind);
void task_release(srv_task *t);      /* drops one reference, frees at zero */
void task_cancel(srv_task *t);       /* the client left: the engine drops it at its next step */
double srv_now_ms(void);

/* ---- engine ---- */
typedef struct srv_engine srv_engine;
int  engine_new(hearth_model *m, const server_params *p, srv_engine **out, hearth_err *err);
void engine_free(srv_engine *e);                 /* stops the thread; pending tasks fail */
/* Queues t (taking a reference). Returns -1 (t untouched) when the queue is full. */
int  engine_submit(srv_engine *e, srv_task *t);
int  engine_n_ctx(const srv_engine *e);          /* per slot, for generation */
/* The server's LoRA adapters: how many; their global scales (requests start from them) read or set; a path. */
int  engine_n_lora(const srv_engine *e);
bool engine_lora_merged(const srv_engine *e);   /* --lora-merge: the scales are fixed */
void engine_lora_scales(srv_engine *e, float *out);
void engine_set_lora_scales(srv_engine *e, const float *in);
const char *engine_lora_path(const srv_engine *e, int i);
int  engine_embed_n_ctx(const srv_engine *e);    /* longest embedding input */
void engine_slots(srv_engine *e, int *idle, int *busy, int *queued);
/* Since the start: decode steps, tokens sampled (sampled / steps = mean batch of generating slots), time in
 * hearth_decode and in whole steps (decode + sampling + handing out the text); the prompt (evaluated + reused)
 * and generated tokens of finished generation tasks, counted before their clients see the answers. */
typedef struct { long long steps, sampled; double decode_ms, step_ms; long long prompt_tokens, cached_tokens, generated_tokens;
                 long long pc_hits, pc_misses, pc_tokens, pc_entries; long long drafted, accepted; } srv_counters;
void engine_counters(srv_engine *e, srv_counters *c);

/* ---- data parallel (srv_dp.c): serve --dp R under mpirun, rank 0 answering HTTP ---- */
/* Whether this server is one of R > 1 replicas. */
bool dp_on(void);
/* Rank 0: starts the thread that owns every MPI call (local: rank 0's own engine, replica 0). */
int  dp_start(srv_engine *local, const server_params *p, hearth_err *err);
void dp_stop(void);   /* tells the replicas to end, joins the thread */
/* Rank 0: sends t to the replica with the fewest active sequences (preferring one that saw its prefix) as
 * engine_submit would; its progress comes back into t. -1 when the chosen queue is full. */
int  dp_submit(srv_task *t);
/* /metrics lines per replica (malloc'd Prometheus text, or NULL). */
char *dp_metrics(void);
/* The other ranks: run tasks from rank 0 on e until told to stop. */
void dp_replica(srv_engine *e, hearth_model *m);

/* The web chat page served at GET / (srv_page.c): HTML, *size bytes, not NUL-terminated. */
const char *srv_chat_page(size_t *size);

/* ---- the shared prompt cache (srv_cache.c; engine thread only) ---- */
typedef struct srv_cache srv_cache;
/* NULL (with err empty) when budget is 0 or the model's KV cannot be moved (sliding-window rings). */
srv_cache *pcache_new(const hearth_ctx *ctx, size_t budget, const char *dir, hearth_err *err);
void pcache_free(srv_cache *pc);
/* Writes into seq the longest cached prefix of toks beyond the `have` tokens seq already holds (whole blocks,
 * never the last token); returns the tokens seq now holds. salt: the sequence's adapters (hearth_seq_lora_id; 0
 * none): prefixes computed under other adapters are other keys. */
int  pcache_restore(srv_cache *pc, hearth_ctx *ctx, int seq, const hearth_token *toks, int n, int have, uint64_t salt);
/* Keeps the whole blocks of toks that seq has computed. */
void pcache_store(srv_cache *pc, const hearth_ctx *ctx, int seq, const hearth_token *toks, int n, uint64_t salt);
void pcache_stats(const srv_cache *pc, long long *hits, long long *misses, long long *tokens, long long *entries);

/* ---- OpenAI API layer ---- */
typedef enum { API_CHAT, API_COMPLETION, API_EMBED } api_kind;

typedef struct {
    hearth_model *m;
    srv_engine *eng;
    chat_fmt *fmt;
    const char *model_id;
    bool encoder;
    bool has_vocab;
    int n_vocab;
    reasoning_fmt rfmt;          /* how the template frames reasoning (RF_NONE with --reasoning-format none) */
} srv_api;

/* Tool calling (srv_tools.c): how the request asked for tools and which call format the model's template uses. */
typedef enum { TOOLS_OFF, TOOLS_AUTO, TOOLS_REQUIRED } tools_mode;
typedef enum { TF_GENERIC, TF_HERMES, TF_LLAMA3, TF_HARMONY, TF_XML, TF_GEMMA4 } tools_format;
typedef struct { tools_mode mode; tools_format fmt; bool parallel; } srv_tools;

/* A parsed request: the task plus how to answer. */
typedef struct {
    api_kind kind;
    bool ollama;                       /* answer in Ollama's shapes (srv_ollama.c) */
    bool anthropic;                    /* answer in Anthropic's shapes (srv_anthropic.c) */
    bool ollama_generate;              /* ... of /api/generate ("response"), even when templated as a chat */
    bool stream, include_usage, b64;   /* b64: embeddings as base64 float32 */
    bool progress;                     /* return_progress: prompt progress chunks before the first token */
    srv_tools tools;                   /* tools / tool_choice of a chat request */
    reasoning_fmt rfmt;                /* a chat reply's reasoning is split off (reasoning_content) in this format */
    bool r_open;                       /* ... and the prompt left the model inside a reasoning block */
    int n_probs;
    char id[40];
    long created;
} api_req;

/* Routes cJSON's allocations through a wrapper that notes failures (once, before serving): a response whose
 * tree lost a part to a failed allocation is then not printed (NULL: a 500) rather than sent incomplete. */
void api_json_init(void);
/* cJSON_AddItemToObject / cJSON_AddItemToArray that free the item when it cannot be attached (a NULL parent,
 * or no memory for the key): either way the caller no longer owns it. */
bool json_put(cJSON *o, const char *key, cJSON *item);
bool json_push(cJSON *a, cJSON *item);
/* Whether a cJSON allocation on this thread failed since the request body was parsed (a tree built since then
 * may lack a part). */
bool api_json_oom(void);
/* Notes such a failure for api_print (memory that ran out outside cJSON, for a part of a response). */
void api_json_lost(void);
/* obj[key] = the n bytes at s as a JSON string, invalid UTF-8 replaced (a failed allocation counts for api_print). */
cJSON *api_add_text(cJSON *obj, const char *key, const char *s, size_t n);
/* Prints o unformatted and deletes it; NULL if it could not, or if building it lost a part for want of memory. */
char *api_print(cJSON *o);
/* Parses body and builds the task. On failure returns -1 with *status (400 / 500) and msg set. */
int api_parse(const srv_api *a, api_kind kind, const char *body, size_t n, api_req *r, srv_task **out,
              int *status, char *msg, size_t cap);
/* The whole response of a finished task (JSON text, malloc'd). */
char *api_response(const srv_api *a, const api_req *r, srv_task *t);
/* OpenAI-style error body {"error":{"message":...,"type":...,"param":null,"code":...}} (malloc'd). */
char *api_error_body(int status, const char *msg);
/* One SSE event "data: {...}\n\n" for a stream: the first (role) chunk, a text delta with the tokens in
 * it (toks may be NULL; toks_start: where the first one's text starts in the reply), the final chunk with
 * finish_reason, or the usage chunk. malloc'd. */
char *api_chunk_delta(const srv_api *a, const api_req *r, const char *text, size_t n, const srv_tok *toks, int n_toks,
                      size_t toks_start, const char *finish, bool first);
/* The final chunk (finish_reason) with the reply's "warnings" (unknown formats), as a non-streamed reply has. */
char *api_chunk_finish(const srv_api *a, const api_req *r, const srv_task *t, const char *finish);
/* A chat chunk whose delta is reasoning_content. */
char *api_chunk_reasoning(const srv_api *a, const api_req *r, const char *text, size_t n);
char *api_chunk_usage(const srv_api *a, const api_req *r, const srv_task *t);
/* llama-server's prompt progress chunk: no choices, "prompt_progress": {total, cache, processed, time_ms}. */
char *api_chunk_progress(const srv_api *a, const api_req *r, const srv_task *t);
/* The close of a streamed chat reply with tools: text, delta.tool_calls chunks, the finish chunk. malloc'd. */
char *api_chunk_tools(const srv_api *a, const api_req *r, const srv_task *t);
/* /tokenize ({content, add_special = false, parse_special = true, with_pieces = false} -> {tokens}) and
 * /detokenize ({tokens} -> {content}), as llama-server answers them. NULL with *status and msg on a bad request. */
char *api_tokenize(const srv_api *a, const char *body, size_t n, int *status, char *msg, size_t cap);
char *api_detokenize(const srv_api *a, const char *body, size_t n, int *status, char *msg, size_t cap);
/* What the HTTP side counts, for /metrics: requests answered (counted when libmicrohttpd reports one done,
 * which may be just after its client has the answer) and in flight. */
#define SRV_N_ROUTES 32
#define SRV_N_STATUS 12
#define SRV_N_BUCKETS 14
extern const int SRV_STATUS_CODES[SRV_N_STATUS];            /* the statuses counted one by one; others are "other" */
extern const double SRV_TTFT_BUCKETS[SRV_N_BUCKETS], SRV_TPOT_BUCKETS[SRV_N_BUCKETS];   /* seconds, upper bounds */
typedef struct {
    long long requests; int in_flight;
    long long by_route[SRV_N_ROUTES][SRV_N_STATUS + 1];      /* answered requests by route and status */
    const char *route_names[SRV_N_ROUTES];
    long long closed_late;                                   /* connections closed for a late request head or body */
} srv_stats;
/* Latency histograms of finished generation requests (cumulative bucket counts as Prometheus keeps them). */
typedef struct { long long ttft[SRV_N_BUCKETS + 1], tpot[SRV_N_BUCKETS + 1]; double ttft_sum, tpot_sum; long long n_ttft, n_tpot; } srv_latency;
void engine_latency(srv_engine *e, srv_latency *l);
/* /metrics: Prometheus text format (malloc'd). */
char *api_metrics(const srv_api *a, const srv_stats *st);
/* The strict body parse every endpoint uses: one JSON object, valid UTF-8, nothing after it; NULL with err. */
cJSON *api_parse_body(const char *body, size_t n, hearth_err *err);
/* s[0..n) with invalid UTF-8 replaced by U+FFFD, NUL-terminated (malloc'd). */
char *api_utf8_clean(const char *s, size_t n);
/* prefix (at most 15 bytes) + 24 random letters and digits, as OpenAI's call_... and Anthropic's msg_... ids. */
void api_random_id(char id[40], const char *prefix);
/* /v1/models and /health bodies. */
char *api_models(const srv_api *a);
/* GET /lora-adapters: [{"id", "path", "scale"}]; POST: [{"id", "scale"}] sets the global scales, then the list. */
char *api_lora_adapters(const srv_api *a, const char *body, size_t n, bool post, int *status, char *msg, size_t cap);
char *api_health(const srv_api *a);

/* Reads tools, tool_choice and parallel_tool_calls from a chat request into *tt and, when calls are possible,
 * writes the reply's grammar (*gbnf, malloc'd); for a model whose template has no tool format, adds the tool
 * prompt to `messages`. 0, or -1 with err (a 400). */
int tools_prepare(const srv_api *a, const cJSON *o, cJSON *messages, srv_tools *tt, char **gbnf, char **params, hearth_err *err);
/* A finished reply split into its text (*content, malloc'd or NULL) and its calls (OpenAI tool_calls entries
 * with fresh ids; an empty array when there are none). NULL when out of memory. params: tools_prepare's. */
cJSON *tools_parse(const srv_tools *tt, const char *params, const char *text, size_t n, char **content);
/* A reply grammar for a prompt that leaves the model inside a reasoning block: the block's text, its closing
 * marker `close`, white space, then what gbnf allows (malloc'd; NULL when out of memory). */
char *tools_after_reasoning(const char *gbnf, const char *close);

/* A finished chat reply: its reasoning (empty when none, or with r->rfmt RF_NONE), its answer and, with tools, its
 * calls (as tools_parse). False when memory ran out (noted for api_print). */
typedef struct { reasoning_parser rp; const char *content; size_t n_content; char *tool_text; cJSON *calls; } api_reply;
bool api_reply_split(const api_req *r, const srv_task *t, api_reply *out);
void api_reply_free(api_reply *p);

/* ---- Anthropic's Messages API (srv_anthropic.c) ---- */
/* A /v1/messages (or, count_only, /v1/messages/count_tokens) body as the OpenAI chat body api_parse takes
 * (malloc'd); NULL with msg on a bad or unsupported request (a 400). */
char *anthropic_translate(const srv_api *a, const char *body, size_t n, bool count_only, char *msg, size_t cap);
char *anthropic_response(const srv_api *a, const api_req *r, const srv_task *t);
char *anthropic_count(const srv_task *t);                         /* {"input_tokens": N} */
char *anthropic_error_body(int status, const char *msg);
/* Stream events, each "event: T\ndata: {...}\n\n" (malloc'd): message_start; a text block's start and deltas;
 * the end (the remaining blocks, message_delta, message_stop); an error. */
char *anthropic_event_start(const srv_api *a, const api_req *r, const srv_task *t);
char *anthropic_event_text_start(int index);
char *anthropic_event_text(int index, const char *text, size_t n);
char *anthropic_event_block_stop(int index);
char *anthropic_event_thinking_start(int index);
char *anthropic_event_thinking(int index, const char *text, size_t n);
/* open: the index of the block streamed so far (closed here), or -1: then all the reply's blocks are sent here */
char *anthropic_event_end(const api_req *r, const srv_task *t, int open);
char *anthropic_event_error(int status, const char *msg);

/* ---- Ollama's API (srv_ollama.c) ---- */
typedef enum { OLLAMA_GENERATE, OLLAMA_CHAT, OLLAMA_EMBED } ollama_op;
/* An Ollama request as the OpenAI-shaped body api_parse takes (malloc'd), and which kind to parse it as; NULL with
 * msg on a bad or unsupported request (a 400). */
char *ollama_translate(const srv_api *a, ollama_op op, const char *body, size_t n, api_kind *kind, char *msg, size_t cap);
/* One NDJSON line: a text delta, or (done != NULL) the closing line with its counts and durations. malloc'd. */
char *ollama_chunk(const srv_api *a, const api_req *r, const char *text, size_t n, const char *thinking, size_t n_thinking,
                   const srv_task *done);
char *ollama_error_line(const char *msg);
char *ollama_error_body(const char *msg);                /* {"error": msg} */
char *ollama_response(const srv_api *a, const api_req *r, const srv_task *t);   /* stream: false, and /api/embed */
char *ollama_models(const srv_api *a, bool running);    /* /api/tags, /api/ps */
char *ollama_show(const srv_api *a);                     /* /api/show */
char *ollama_version(void);                              /* /api/version */

/* ---- a streamed reply (srv_stream.c) ---- */
typedef struct {
    const srv_api *api; const api_req *req;
    char *out; size_t out_n, out_off, out_cap;   /* bytes formatted but not yet sent (out is the caller's to free) */
    size_t sent; int sent_toks;                  /* the task's text and tokens already formatted */
    bool started, finished;
    bool lost;        /* memory ran out for a part of the stream: what came before it is sent, then the connection
                       * ends without the stream's end (an error, not a shorter reply) */
    reasoning_parser rp; bool rp_on;             /* a chat reply split into reasoning and answer as it comes */
    size_t r_sent, c_sent;                       /* ... the parts of each already formatted */
    int block; char block_open;                  /* Anthropic: the open block's index and kind ('t'hinking, te'x't;
                                                  * 0 none) */
    int progress_sent;                           /* return_progress: the prompt tokens last reported */
    double ping_ms, next_ping;   /* SSE streams: a comment line when nothing was sent for ping_ms (0: never) */
} srv_stream;
bool stream_tools_pending(const api_req *r);
/* The opening events (OpenAI chat's role chunk, Anthropic's message_start): true if this call added them. */
bool stream_begin(srv_stream *st, srv_task *t);
/* Whether stream_collect has something to send now: text, prompt progress, or a keep-alive comment (t->mu held). */
bool stream_news(const srv_stream *st, const srv_task *t);
/* Formats what t produced since the last call (or a keep-alive comment when due), and its end once t is done
 * (t->mu held). */
void stream_collect(srv_stream *st, srv_task *t);
void stream_free(srv_stream *st);                /* its bytes and parser */

#endif
