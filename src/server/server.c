/* server.c — the HTTP side of `hearth serve` on libmicrohttpd, one thread per connection: routing, API key,
 * body size limit, handing requests to the engine (srv_engine.c) and streaming its tokens back as
 * server-sent events. A connection thread waiting for tokens checks every 50 ms whether its client hung up;
 * if so the request is cancelled and the engine frees the slot at its next step. One log line per request.
 * Time limits: a connection that sends nothing for the idle timeout is closed, a request head (and body) must
 * arrive by a deadline, and a request being answered is never timed out, however long its prompt takes. */
#define _GNU_SOURCE
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "dist/dist.h"
#include "server/srv_internal.h"

#define WAIT_SLICE_MS 50
/* Idle and slow clients: a connection is a thread with a small stack, so thousands of idle or slow ones
 * leave room for real clients (the open-file limit is raised to match); see "deadlines" below. */
#define SRV_IDLE_TIMEOUT_S 10     /* --timeout-idle */
#define SRV_HEAD_TIMEOUT_S 20     /* --timeout-headers */
#define SRV_MAX_CONNECTIONS 4000
#define SRV_THREAD_STACK (512 * 1024)

/* A connection's deadline, kept from libmicrohttpd's "connection started" to its "closed" notice. */
typedef struct peer {
    struct peer *prev, *next;   /* server.first .. last: by when they began to wait for a request (oldest first) */
    int fd;
    double deadline;            /* ms (srv_now_ms) by which the request head (and body) must be in; 0: none */
    double t_head;              /* the body phase: when the head was complete (0 before) */
    bool shut;                  /* closed by the server: shutdown(2) done, libmicrohttpd reaps it */
} peer;

typedef struct {
    srv_api api;
    const server_params *p;
    size_t max_body;
    unsigned idle_s;            /* libmicrohttpd's per-connection idle timeout while not answering */
    double head_ms;             /* --timeout-headers, in ms */
    pthread_mutex_t peers_mu;
    peer *first, *last;
    int n_live;                 /* peers not shut */
    long long n_late;           /* closed for missing their deadline or to make room */
    atomic_int *stop;
    atomic_bool running;    /* past startup: libmicrohttpd's own messages (a client gone, ...) are dropped */
    pthread_mutex_t stats_mu;
    srv_stats stats;        /* for /metrics */
    char start_msg[160];    /* before: its first message (a busy port, ...), for the one error line */
} server;

enum { R_PAGE, R_HEALTH, R_MODELS, R_METRICS, R_OL_TAGS, R_OL_PS, R_OL_VERSION, R_CHAT, R_COMPLETION, R_EMBED, R_TOKENIZE,
       R_DETOKENIZE, R_OL_GENERATE, R_OL_CHAT, R_OL_EMBED, R_OL_SHOW, R_AN_MESSAGES, R_AN_COUNT, R_LORA, R_UNKNOWN };
#define IS_OLLAMA(r) (((r) >= R_OL_TAGS && (r) <= R_OL_VERSION) || ((r) >= R_OL_GENERATE && (r) <= R_OL_SHOW))
#define IS_ANTHROPIC(r) ((r) == R_AN_MESSAGES || (r) == R_AN_COUNT)
#define IS_GET(r) ((r) <= R_OL_VERSION)

typedef struct {
    server *s;
    char method[16], url[160];
    int route, fd, status;
    char *body; size_t n, cap;
    bool too_big;
    bool bad_framing;         /* several Content-Length headers, or one with Transfer-Encoding: refused (400) */
    double t0;
    api_req req;
    srv_task *task;
    srv_stream st;            /* a streamed reply's formatted bytes and progress */
    struct MHD_Connection *mc;
    struct peer *peer;        /* its deadline, or NULL */
    size_t n_up;              /* body bytes received (kept or not) */
} conn;

/* ---- routing ---- */
static const struct { const char *path; int route; } ROUTES[] = {   /* a route's first path names it in /metrics */
    { "/", R_PAGE }, { "/health", R_HEALTH }, { "/v1/health", R_HEALTH }, { "/v1/models", R_MODELS }, { "/models", R_MODELS },
    { "/v1/chat/completions", R_CHAT }, { "/chat/completions", R_CHAT }, { "/v1/completions", R_COMPLETION },
    { "/completions", R_COMPLETION }, { "/v1/embeddings", R_EMBED }, { "/embeddings", R_EMBED },
    { "/tokenize", R_TOKENIZE }, { "/detokenize", R_DETOKENIZE }, { "/metrics", R_METRICS },
    { "/api/tags", R_OL_TAGS }, { "/api/ps", R_OL_PS }, { "/api/version", R_OL_VERSION }, { "/api/show", R_OL_SHOW },
    { "/api/generate", R_OL_GENERATE }, { "/api/chat", R_OL_CHAT }, { "/api/embed", R_OL_EMBED },
    { "/api/embeddings", R_OL_EMBED }, { "/v1/messages", R_AN_MESSAGES }, { "/v1/messages/count_tokens", R_AN_COUNT },
    { "/lora-adapters", R_LORA },
};

static int route_of(const char *url) {
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++)
        if (!strcmp(url, ROUTES[i].path)) return ROUTES[i].route;
    return R_UNKNOWN;
}

const int SRV_STATUS_CODES[SRV_N_STATUS] = { 200, 204, 400, 401, 404, 405, 408, 413, 499, 500, 503, 0 };

static void route_names(const char **names) {
    for (size_t i = sizeof ROUTES / sizeof ROUTES[0]; i-- > 0;) names[ROUTES[i].route] = ROUTES[i].path;
    names[R_UNKNOWN] = "unknown";
}

/* Request smuggling behind a proxy starts with a body length two parties read differently. */
typedef struct { int n_cl; bool te; } framing;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind, (void)value;
    framing *f = cls;
    if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) f->n_cl++;
    else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) f->te = true;
    return MHD_YES;
}

static conn *conn_new(server *s, struct MHD_Connection *mc, const char *url, const char *method) {
    conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->s = s;
    snprintf(c->method, sizeof c->method, "%s", method);
    snprintf(c->url, sizeof c->url, "%s", url);
    for (char *q = c->url; *q; q++) if ((unsigned char)*q < 0x20 || *q == 0x7f) *q = '?';   /* one clean log line */
    c->route = route_of(url);
    c->mc = mc;
    c->t0 = srv_now_ms();
    framing f = { 0, false };
    MHD_get_connection_values(mc, MHD_HEADER_KIND, count_framing, &f);
    c->bad_framing = f.n_cl > 1 || (f.n_cl && f.te);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    c->fd = ci ? ci->connect_fd : -1;
    return c;
}

/* ---- replies ---- */
/* By default every answer may be read by a page of any origin (as llama-server and Ollama allow): the API key,
 * when set, is what guards the server. --cors-origin names the one origin allowed, or none. */
static void add_cors(const conn *c, struct MHD_Response *r) {
    const char *o = c->s->p->cors_origin ? c->s->p->cors_origin : "*";
    if (strcmp(o, "none")) MHD_add_response_header(r, "Access-Control-Allow-Origin", o);
    if (strcmp(o, "*") && strcmp(o, "none")) MHD_add_response_header(r, "Vary", "Origin");
}

/* Every answer says how long the connection may then stay idle: a client that reads it (Node's undici does)
 * drops a pooled connection before the server closes it, rather than sending a request into the close. */
static void add_headers(const conn *c, struct MHD_Response *r) {
    add_cors(c, r);
    char ka[32];
    snprintf(ka, sizeof ka, "timeout=%u", c->s->idle_s);
    MHD_add_response_header(r, "Keep-Alive", ka);
}

static enum MHD_Result reply_typed(conn *c, struct MHD_Connection *mc, int status, char *body, const char *type) {
    if (!body) { status = 500; body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}"); }
    if (!body) return MHD_NO;
    c->status = status;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(body); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", type);
    add_headers(c, r);
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (c->bad_framing) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");   /* nothing after it is read */
    enum MHD_Result rc = MHD_queue_response(mc, (unsigned)status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result reply(conn *c, struct MHD_Connection *mc, int status, char *body) {
    return reply_typed(c, mc, status, body, "application/json");
}

/* A CORS preflight: what a cross-origin page may send. Answered before the API key, which browsers never send
 * with a preflight. */
static enum MHD_Result reply_preflight(conn *c, struct MHD_Connection *mc) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    add_headers(c, r);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version");
    MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    c->status = 204;
    enum MHD_Result rc = MHD_queue_response(mc, MHD_HTTP_NO_CONTENT, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result reply_error(conn *c, struct MHD_Connection *mc, int status, const char *msg) {
    return reply(c, mc, status, IS_OLLAMA(c->route) ? ollama_error_body(msg)
                              : IS_ANTHROPIC(c->route) ? anthropic_error_body(status, msg) : api_error_body(status, msg));
}

/* ---- deadlines ----
 * libmicrohttpd's timeout is idle time (no byte for idle_s), so a client sending a header byte a second would
 * never be closed. Each connection also gets a deadline for its request head (head_ms from its start or from
 * the end of its previous answer), then for its body (head_ms more, plus a second for every SRV_MIN_BODY_RATE
 * bytes received), and none while it is answered: then libmicrohttpd's timeout is off too, since a long prompt
 * sends nothing until its first token. The main thread sweeps the deadlines (server_run); a late connection is
 * shut down, which its own thread sees as the client leaving. When the connection table is nearly full, the
 * connection waiting longest for its request is closed to make room, so slow clients cannot lock others out. */
#define SRV_MIN_BODY_RATE 500   /* bytes a second a request body must keep up, past its grace */
#define SRV_SPARE 64            /* connections left free for the ones just accepted */

static peer *peer_of(struct MHD_Connection *mc) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void peer_unlink(server *s, peer *p) {
    if (p->prev) p->prev->next = p->next; else s->first = p->next;
    if (p->next) p->next->prev = p->prev; else s->last = p->prev;
    p->prev = p->next = NULL;
}

static void peer_append(server *s, peer *p) {
    p->prev = s->last;
    p->next = NULL;
    if (s->last) s->last->next = p; else s->first = p;
    s->last = p;
}

static void peer_shut(server *s, peer *p) {   /* peers_mu held; p's socket is open until its "closed" notice */
    if (p->shut) return;
    shutdown(p->fd, SHUT_RDWR);
    p->shut = true;
    s->n_live--;
    s->n_late++;
}

/* A new request head is awaited (a new connection, or one whose answer ended): its deadline, as the newest. */
static void peer_await_head(server *s, peer *p) {
    pthread_mutex_lock(&s->peers_mu);
    peer_unlink(s, p);
    peer_append(s, p);
    p->deadline = srv_now_ms() + s->head_ms;
    p->t_head = 0;
    pthread_mutex_unlock(&s->peers_mu);
}

/* The head is in and n body bytes so far: the body's deadline. */
static void peer_body(server *s, peer *p, size_t n) {
    pthread_mutex_lock(&s->peers_mu);
    if (!p->t_head) p->t_head = srv_now_ms();
    p->deadline = p->t_head + s->head_ms + 1e3 * (double)n / SRV_MIN_BODY_RATE;
    pthread_mutex_unlock(&s->peers_mu);
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context, enum MHD_ConnectionNotificationCode code) {
    server *s = cls;
    peer *p = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (!p) return;
        pthread_mutex_lock(&s->peers_mu);
        peer_unlink(s, p);
        if (!p->shut) s->n_live--;
        pthread_mutex_unlock(&s->peers_mu);
        free(p);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci || !(p = calloc(1, sizeof *p))) return;   /* then only the idle timeout applies to it */
    p->fd = ci->connect_fd;
    p->deadline = srv_now_ms() + s->head_ms;
    pthread_mutex_lock(&s->peers_mu);
    peer_append(s, p);
    if (++s->n_live > SRV_MAX_CONNECTIONS - SRV_SPARE)   /* make room: the oldest still waiting for its request */
        for (peer *q = s->first; q; q = q->next)
            if (q->deadline && !q->shut && q != p) { peer_shut(s, q); break; }
    pthread_mutex_unlock(&s->peers_mu);
    *socket_context = p;
}

/* Closes the connections past their deadline (the main thread, every 100 ms). */
static void sweep_late(server *s) {
    double now = srv_now_ms();
    pthread_mutex_lock(&s->peers_mu);
    for (peer *p = s->first; p; p = p->next)
        if (p->deadline && now > p->deadline) peer_shut(s, p);
    pthread_mutex_unlock(&s->peers_mu);
}

/* The request is in: no deadline until its answer has been sent. */
static void peer_received(server *s, peer *p) {
    pthread_mutex_lock(&s->peers_mu);
    p->deadline = 0;
    pthread_mutex_unlock(&s->peers_mu);
}

/* While the engine works on a request, its connection cannot be idle: no timeout until answered(). */
static void computing(conn *c) { MHD_set_connection_option(c->mc, MHD_CONNECTION_OPTION_TIMEOUT, 0u); }

/* The answer is computed and only has to be sent: a client that stops reading it is idle again. */
static void answered(conn *c) { MHD_set_connection_option(c->mc, MHD_CONNECTION_OPTION_TIMEOUT, c->s->idle_s); }

/* ---- client presence ---- */
static bool hung_up(const conn *c) {
    if (c->fd < 0) return false;
    struct pollfd pf = { .fd = c->fd, .events = POLLRDHUP };
    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Waits on t->cv (t->mu held) for at most one slice. */
static void wait_slice(srv_task *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += WAIT_SLICE_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    pthread_cond_timedwait(&t->cv, &t->mu, &ts);
}

/* Waits (t->mu held) until ready(t) or done; false if the client left or the server stops (task cancelled). */
static bool wait_task(conn *c, bool (*ready)(const conn *, const srv_task *)) {
    srv_task *t = c->task;
    while (!t->done && !ready(c, t)) {
        wait_slice(t);
        if (t->done || ready(c, t)) break;
        if (hung_up(c) || atomic_load(c->s->stop)) {
            t->cancelled = true;
            return false;
        }
    }
    return true;
}

static bool never(const conn *c, const srv_task *t) { (void)c; (void)t; return false; }
static bool has_news(const conn *c, const srv_task *t) { return stream_news(&c->st, t); }

/* ---- streaming (the bytes: srv_stream.c) ---- */
/* Produces the next bytes of the stream into c->st.out; -1 if the client left. */
static int stream_produce(conn *c) {
    c->st.out_n = c->st.out_off = 0;
    if (stream_begin(&c->st, c->task)) return 0;
    srv_task *t = c->task;
    pthread_mutex_lock(&t->mu);
    bool ok = wait_task(c, has_news);
    if (ok) stream_collect(&c->st, t);
    pthread_mutex_unlock(&t->mu);
    if (c->st.finished) answered(c);
    return ok ? 0 : -1;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    conn *c = cls;
    for (;;) {
        srv_stream *st = &c->st;
        if (st->out_off < st->out_n) {
            size_t k = HT_MIN(max, st->out_n - st->out_off);
            memcpy(buf, st->out + st->out_off, k);
            st->out_off += k;
            return (ssize_t)k;
        }
        if (st->lost) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (stream_produce(c)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static enum MHD_Result reply_stream(conn *c, struct MHD_Connection *mc) {
    c->st.api = &c->s->api;
    c->st.req = &c->req;
    c->st.progress_sent = -1;
    c->st.ping_ms = HT_MIN(5000.0, c->s->idle_s * 500.0);   /* twice per idle timeout, at least every 5 s */
    c->st.next_ping = srv_now_ms() + c->st.ping_ms;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, c, NULL);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", c->req.ollama ? "application/x-ndjson" : "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    add_headers(c, r);
    c->status = 200;
    enum MHD_Result rc = MHD_queue_response(mc, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

/* ---- requests ---- */
static enum MHD_Result run_task(conn *c, struct MHD_Connection *mc) {
    static const api_kind KIND[] = { [R_CHAT] = API_CHAT, [R_COMPLETION] = API_COMPLETION, [R_EMBED] = API_EMBED };
    char msg[512];
    int status;
    const char *body = c->body ? c->body : "";
    size_t n = c->n;
    api_kind kind = c->route < R_OL_GENERATE ? KIND[c->route] : API_CHAT;
    char *translated = NULL;
    if (IS_ANTHROPIC(c->route)) {   /* Anthropic: the same, answered in Anthropic's shapes */
        if (!(translated = anthropic_translate(&c->s->api, body, n, c->route == R_AN_COUNT, msg, sizeof msg)))
            return reply_error(c, mc, strstr(msg, "out of memory") ? 500 : 400, msg);
        body = translated;
        n = strlen(translated);
    } else if (c->route >= R_OL_GENERATE) {   /* Ollama: the same request in OpenAI's shape, answered in Ollama's */
        ollama_op op = c->route == R_OL_GENERATE ? OLLAMA_GENERATE : c->route == R_OL_CHAT ? OLLAMA_CHAT : OLLAMA_EMBED;
        if (!(translated = ollama_translate(&c->s->api, op, body, n, &kind, msg, sizeof msg)))
            return reply_error(c, mc, strstr(msg, "out of memory") ? 500 : 400, msg);
        body = translated;
        n = strlen(translated);
    }
    int rc = api_parse(&c->s->api, kind, body, n, &c->req, &c->task, &status, msg, sizeof msg);
    free(translated);
    if (rc) return reply_error(c, mc, status, msg);
    c->req.ollama = IS_OLLAMA(c->route);
    c->req.ollama_generate = c->route == R_OL_GENERATE;
    c->req.anthropic = IS_ANTHROPIC(c->route);
    if (c->req.anthropic) api_random_id(c->req.id, "msg_");
    if (c->route == R_AN_COUNT) return reply(c, mc, 200, anthropic_count(c->task));   /* counted, not run */
    if (dp_on() ? dp_submit(c->task) : engine_submit(c->s->api.eng, c->task)) return reply_error(c, mc, 503, "the server is busy (request queue full)");
    computing(c);
    if (c->req.stream && c->req.kind != API_EMBED) return reply_stream(c, mc);
    srv_task *t = c->task;
    pthread_mutex_lock(&t->mu);
    bool ok = wait_task(c, never);
    pthread_mutex_unlock(&t->mu);
    if (!ok) { c->status = 499; return MHD_NO; }
    answered(c);
    if (t->status) return reply_error(c, mc, t->status, t->err);
    return reply(c, mc, 200, c->req.ollama ? ollama_response(&c->s->api, &c->req, t)
                             : c->req.anthropic ? anthropic_response(&c->s->api, &c->req, t) : api_response(&c->s->api, &c->req, t));
}

/* The key as "Authorization: Bearer KEY" (OpenAI, Ollama) or "x-api-key: KEY" (Anthropic). */
static bool authorized(const server *s, struct MHD_Connection *mc) {
    if (!s->p->api_key || !*s->p->api_key) return true;
    const char *h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *x = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "x-api-key");
    if ((!h || strncmp(h, "Bearer ", 7)) && !x) return false;
    const char *k = h && !strncmp(h, "Bearer ", 7) ? h + 7 : x, *want = s->p->api_key;
    size_t nk = strlen(k), nw = strlen(want);
    unsigned diff = nk != nw;
    for (size_t i = 0; i < nw; i++) diff |= (unsigned)(want[i] ^ (i < nk ? k[i] : 0));   /* constant time */
    return !diff;
}

/* /tokenize and /detokenize: answered on the HTTP thread, no slot needed. */
static enum MHD_Result run_tokens(conn *c, struct MHD_Connection *mc) {
    char msg[512];
    int status;
    const char *b = c->body ? c->body : "";
    char *out = c->route == R_TOKENIZE ? api_tokenize(&c->s->api, b, c->n, &status, msg, sizeof msg)
                                       : api_detokenize(&c->s->api, b, c->n, &status, msg, sizeof msg);
    return out ? reply(c, mc, 200, out) : reply_error(c, mc, status, msg);
}

static enum MHD_Result reply_page(conn *c, struct MHD_Connection *mc) {
    size_t n;
    const char *page = srv_chat_page(&n);
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)page, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Content-Security-Policy", "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    add_headers(c, r);
    c->status = 200;
    enum MHD_Result rc = MHD_queue_response(mc, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result reply_metrics(conn *c, struct MHD_Connection *mc) {
    server *s = c->s;
    pthread_mutex_lock(&s->stats_mu);
    srv_stats st = s->stats;
    pthread_mutex_unlock(&s->stats_mu);
    pthread_mutex_lock(&s->peers_mu);
    st.closed_late = s->n_late;
    pthread_mutex_unlock(&s->peers_mu);
    char *body = api_metrics(&s->api, &st), *more = dp_metrics();
    if (body && more) {   /* serve --dp: the replicas' lines after the server's */
        size_t n = strlen(body), k = strlen(more);
        char *p = realloc(body, n + k + 1);
        if (p) memcpy(p + n, more, k + 1), body = p;
        else free(body), body = NULL;
    }
    free(more);
    if (!body) return reply_error(c, mc, 500, "out of memory");
    return reply_typed(c, mc, 200, body, "text/plain; version=0.0.4; charset=utf-8");
}

static enum MHD_Result dispatch(conn *c, struct MHD_Connection *mc) {
    /* HEAD is GET without the body (libmicrohttpd leaves it out) */
    bool get = !strcmp(c->method, "GET") || !strcmp(c->method, "HEAD"), post = !strcmp(c->method, "POST");
    if (c->bad_framing) return reply_error(c, mc, 400, "conflicting Content-Length / Transfer-Encoding headers");
    if (!strcmp(c->method, "OPTIONS") && c->route != R_UNKNOWN) return reply_preflight(c, mc);
    /* the key first: without it, nothing (not even which paths exist) is told but /health and the chat page
     * (static; it asks for the key and sends it with its requests) */
    if (c->route != R_HEALTH && c->route != R_PAGE && !authorized(c->s, mc)) return reply_error(c, mc, 401, "invalid API key");
    if (c->route == R_UNKNOWN) return reply_error(c, mc, 404, "not found");
    bool want_get = IS_GET(c->route);
    if (c->route == R_LORA ? !get && !post : want_get ? !get : !post)
        return reply_error(c, mc, 405, c->route == R_LORA ? "use GET or POST" : want_get ? "use GET" : "use POST");
    if (c->too_big) return reply_error(c, mc, 413, "request body too large");
    if (c->route == R_PAGE) return reply_page(c, mc);
    if (c->route == R_HEALTH) return reply(c, mc, 200, api_health(&c->s->api));
    if (c->route == R_MODELS) return reply(c, mc, 200, api_models(&c->s->api));
    if (c->route == R_METRICS) return reply_metrics(c, mc);
    if (c->route == R_OL_TAGS || c->route == R_OL_PS) return reply(c, mc, 200, ollama_models(&c->s->api, c->route == R_OL_PS));
    if (c->route == R_OL_VERSION) return reply(c, mc, 200, ollama_version());
    if (c->route == R_OL_SHOW) return reply(c, mc, 200, ollama_show(&c->s->api));
    if (c->route == R_TOKENIZE || c->route == R_DETOKENIZE) return run_tokens(c, mc);
    if (c->route == R_LORA) {
        int status;
        char msg[256];
        char *out = api_lora_adapters(&c->s->api, c->body ? c->body : "", c->n, post, &status, msg, sizeof msg);
        return out ? reply(c, mc, status, out) : reply_error(c, mc, status, msg);
    }
    return run_task(c, mc);
}

static void body_add(conn *c, const char *p, size_t n) {
    if (c->too_big || c->n + n > c->s->max_body) { c->too_big = true; return; }
    if (c->n + n + 1 > c->cap) {
        size_t nc = HT_MIN(HT_MAX(c->cap * 2, c->n + n + 1024), c->s->max_body + 1);
        char *b = realloc(c->body, nc);
        if (!b) { c->too_big = true; return; }
        c->body = b; c->cap = nc;
    }
    memcpy(c->body + c->n, p, n);
    c->n += n;
    c->body[c->n] = 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    server *s = cls;
    conn *c = *con_cls;
    if (!c) {
        if (!(c = conn_new(s, mc, url, method))) return MHD_NO;
        *con_cls = c;
        pthread_mutex_lock(&s->stats_mu);
        s->stats.in_flight++;
        pthread_mutex_unlock(&s->stats_mu);
        const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->max_body) c->too_big = true;   /* read and dropped, then a 413 */
        if ((c->peer = peer_of(mc))) peer_body(s, c->peer, 0);
        return MHD_YES;
    }
    if (*upload_size) {
        c->n_up += *upload_size;
        body_add(c, upload, *upload_size);
        *upload_size = 0;
        if (c->peer) peer_body(s, c->peer, c->n_up);
        return MHD_YES;
    }
    if (c->peer) peer_received(s, c->peer);
    return dispatch(c, mc);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe) {
    server *s = cls;
    conn *c = *con_cls;
    if (!c) return;
    *con_cls = NULL;
    MHD_set_connection_option(mc, MHD_CONNECTION_OPTION_TIMEOUT, s->idle_s);   /* idle until the next request */
    if (c->peer) peer_await_head(s, c->peer);
    pthread_mutex_lock(&s->stats_mu);
    s->stats.in_flight--;
    s->stats.requests++;
    pthread_mutex_unlock(&s->stats_mu);
    bool late = false;
    if (c->peer) {
        pthread_mutex_lock(&s->peers_mu);
        late = c->peer->shut;
        pthread_mutex_unlock(&s->peers_mu);
    }
    int status = c->status ? c->status : late ? 408 : 500;   /* 408: its head or body came too slowly */
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && status == 200) status = 499;   /* client went away */
    int si = SRV_N_STATUS;
    for (int i = 0; i < SRV_N_STATUS; i++) if (SRV_STATUS_CODES[i] == status) si = i;
    pthread_mutex_lock(&s->stats_mu);
    if (c->route < SRV_N_ROUTES) s->stats.by_route[c->route][si]++;
    pthread_mutex_unlock(&s->stats_mu);
    char extra[160] = "";
    if (c->task) {
        pthread_mutex_lock(&c->task->mu);
        if (!c->task->done) c->task->cancelled = true;
        if (c->task->kind == TASK_GENERATE)
            snprintf(extra, sizeof extra, " prompt=%d cached=%d completion=%d%s", c->task->n_prompt, c->task->n_cached,
                     c->task->n_gen, c->task->done ? "" : " (cancelled)");
        size_t k = strlen(extra);
        if (c->task->kind == TASK_GENERATE && !c->task->done && !c->task->t_start)
            snprintf(extra + k, sizeof extra - k, " while queued");
        else if (c->task->kind == TASK_GENERATE && !c->task->done && c->task->n_done < c->task->n_prompt)
            snprintf(extra + k, sizeof extra - k, " in the prompt at %d", c->task->n_done);
        pthread_mutex_unlock(&c->task->mu);
        task_release(c->task);
    }
    fprintf(stderr, "%s %s %d %.1f ms%s\n", c->method, c->url, status, srv_now_ms() - c->t0, extra);
    free(c->body);
    stream_free(&c->st);
    free(c);
}

/* ---- daemon ---- */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    server *s = cls;
    if (s->running || s->start_msg[0]) return;   /* per-connection trouble is already in the request's log line */
    vsnprintf(s->start_msg, sizeof s->start_msg, fmt, ap);
    for (char *q = s->start_msg; *q; q++) if (*q == '\n') *q = ' ';
}

static struct MHD_Daemon *start_daemon(server *s, hearth_err *err) {
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    const server_params *p = s->p;
    const char *host = p->host ? p->host : "127.0.0.1";
    struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons((uint16_t)p->port) };
    struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t)p->port) };
    const struct sockaddr *sa = (const struct sockaddr *)&a4;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ERROR_LOG;   /* poll: no FD_SETSIZE cap */
    if (inet_pton(AF_INET6, host, &a6.sin6_addr) == 1) { sa = (const struct sockaddr *)&a6; flags |= MHD_USE_IPv6; }
    else if (inet_pton(AF_INET, host, &a4.sin_addr) != 1) { herr(err, "bad --host '%s' (an IPv4 or IPv6 address)", host); return NULL; }
    struct MHD_Daemon *d = MHD_start_daemon(flags, (uint16_t)p->port, NULL, NULL, on_request, s,
                                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                                            MHD_OPTION_SOCK_ADDR, sa,
                                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                                            MHD_OPTION_CONNECTION_TIMEOUT, s->idle_s,
                                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)SRV_MAX_CONNECTIONS,
                                            MHD_OPTION_THREAD_STACK_SIZE, (size_t)SRV_THREAD_STACK,
                                            MHD_OPTION_END);
    if (!d) herr(err, "cannot listen on %s port %d: %s", host, p->port, s->start_msg[0] ? s->start_msg : errno ? strerror(errno) : "failed");
    return d;
}

int server_run(hearth_model *m, const server_params *p, atomic_int *stop, hearth_err *err) {
    server s = { .p = p, .stop = stop, .max_body = p->max_body ? p->max_body : (size_t)8 << 20,
                 .idle_s = (unsigned)(p->timeout_idle > 0 ? p->timeout_idle : SRV_IDLE_TIMEOUT_S),
                 .head_ms = 1e3 * (p->timeout_headers > 0 ? p->timeout_headers : SRV_HEAD_TIMEOUT_S),
                 .stats_mu = PTHREAD_MUTEX_INITIALIZER, .peers_mu = PTHREAD_MUTEX_INITIALIZER };
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    route_names(s.stats.route_names);
    s.api = (srv_api){ .m = m, .model_id = p->model_id ? p->model_id : "hearth", .encoder = info.is_encoder,
                       .has_vocab = hearth_model_has_tokenizer(m), .n_vocab = info.n_vocab };
    int dp_rank;
    if (dist_dp(&dp_rank) > 1 && dp_rank > 0) {   /* serve --dp: a replica runs rank 0's requests, no HTTP */
        srv_engine *e;
        if (engine_new(m, p, &e, err)) return -1;
        dp_replica(e, m);
        engine_free(e);
        return 0;
    }
    if (chat_fmt_new(m, p->chat_template, &s.api.fmt, err)) return -1;
    s.api.rfmt = p->reasoning_none ? RF_NONE : reasoning_detect(chat_fmt_source(s.api.fmt));
    if (engine_new(m, p, &s.api.eng, err)) { chat_fmt_free(s.api.fmt); return -1; }
    if (dp_start(s.api.eng, p, err)) { engine_free(s.api.eng); chat_fmt_free(s.api.fmt); return -1; }
    struct MHD_Daemon *d = start_daemon(&s, err);
    if (!d) { dp_stop(); engine_free(s.api.eng); chat_fmt_free(s.api.fmt); return -1; }
    s.running = true;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    if (info.is_encoder)
        fprintf(stderr, "listening on http://%s:%u (embeddings: inputs of up to %d tokens)\n", p->host ? p->host : "127.0.0.1",
                di ? di->port : (unsigned)p->port, engine_embed_n_ctx(s.api.eng));
    else
        fprintf(stderr, "listening on http://%s:%u (%d slots of %d tokens%s)\n", p->host ? p->host : "127.0.0.1",
                di ? di->port : (unsigned)p->port, p->parallel > 0 ? p->parallel : 1, engine_n_ctx(s.api.eng),
                chat_fmt_has_template(s.api.fmt) ? "" : ", no chat template: plain prompts");
    while (!atomic_load(stop)) {
        usleep(100 * 1000);
        sweep_late(&s);
    }
    MHD_stop_daemon(d);
    dp_stop();
    engine_free(s.api.eng);
    chat_fmt_free(s.api.fmt);
    return 0;
}
