/* srv_dp.c — data parallelism for hearth serve (mpirun -np R hearth serve --dp R): every replica holds the whole
 * model and runs its own engine (a continuous batch). A replica is one rank, or under mpirun -np R*N a block of
 * N ranks that dist.c spreads the model over (--tp, --split, pipeline stages): the block's first rank, its
 * leader, runs the engine and is the replica here. Rank 0 also answers HTTP and routes each generation
 * request to the replica with the fewest active sequences, preferring one it recently sent a request with the
 * same prefix (its prompt cache likely holds it). A request travels as a task description (prompt, sampling,
 * stops, biases, the grammar's GBNF: what the engine reads); the replica's progress (text, tokens, counts, the
 * end) comes back into rank 0's task, which the HTTP thread streams as from a local slot. Embeddings run on
 * rank 0. One thread per leader makes every MPI call on the leaders' communicator: on rank 0 a thread started
 * here, on the others the main thread (dp_replica). With N > 1 the leader's engine thread makes dist.c's calls
 * on the replica's own communicator meanwhile (dist.c then requires MPI_THREAD_MULTIPLE, which allows it). A
 * replica sends a heartbeat with its counters twice a second; rank 0 ends the job naming a replica it has not
 * heard from in HEARTH_MPI_TIMEOUT seconds (default 600). */
#include "server/srv_internal.h"

#include "dist/dist.h"

#ifndef HEARTH_MPI
bool dp_on(void) { return false; }
int dp_start(srv_engine *local, const server_params *p, hearth_err *err) { (void)local; (void)p; (void)err; return 0; }
void dp_stop(void) {}
int dp_submit(srv_task *t) { (void)t; return -1; }
char *dp_metrics(void) { return NULL; }
void dp_replica(srv_engine *e, hearth_model *m) { (void)e; (void)m; }
#else
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { TAG_TASK = 101, TAG_CANCEL, TAG_PROG, TAG_BEAT, TAG_QUIT };
#define PREFIX_KEEP 8       /* prompts remembered per replica */
#define PREFIX_TOKENS 256   /* ... their first tokens */
#define PREFIX_MIN 32       /* a shared prefix this long makes a replica preferred */
static const char *const FINISH[] = { NULL, "stop", "stop_string", "length" };

typedef struct {   /* the fixed part of a task description */
    int32_t id, n_prompt, max_tokens, n_probs, ignore_eos, no_cache, spec_mode, spec_n_max, spec_n_min, n_stop, n_bias,
        n_grammar;
    float spec_p_min;
    float lora[HEARTH_MAX_LORA];
    hearth_sampler_params sp;
} task_hdr;

typedef struct {   /* the fixed part of a progress message; then text bytes, srv_toks, nothing else. Only text
                    * that can no longer change travels: up to the task's `stable` (a stop string may still cut
                    * what follows), all of it once done; and only the tokens that end before it */
    int32_t id, done, finish, stop_hit, status, n_gen, n_cached, n_done, started, n_text, n_toks;
    char err[256];
} prog_hdr;

typedef struct { srv_task *t; int replica; int id; bool sent, cancel_sent; } route;
typedef struct { MPI_Request req; void *buf; } outgoing;   /* rank 0 never blocks on a send: a replica may be
                                                            * blocked sending to it */

static struct {
    bool on;
    int rank, size;
    MPI_Comm comm;
    double timeout;
    /* rank 0 */
    srv_engine *local;
    int parallel;
    pthread_t thread;
    atomic_int quit;
    pthread_mutex_t mu;   /* routes, counts, prefixes, beats */
    route *routes; int n_routes, cap_routes;
    int next_id;
    int *active;          /* [size] sequences routed there and not finished */
    long long *routed;    /* [size] requests routed there */
    hearth_token (*prefix)[PREFIX_KEEP][PREFIX_TOKENS]; int (*prefix_n)[PREFIX_KEEP]; int *prefix_at;
    srv_counters *beat;   /* [size] each replica's last counters */
    double *heard;        /* [size] MPI_Wtime of its last message */
    outgoing *out; int n_out, cap_out;
    int quits;            /* replicas that answered the end */
} P = { .mu = PTHREAD_MUTEX_INITIALIZER };

bool dp_on(void) { return P.on; }

static void nap(void) { nanosleep(&(struct timespec){ 0, 500 * 1000 }, NULL); }

static void die(const char *fmt, int r) {
    fprintf(stderr, fmt, r, P.size, P.timeout);
    fflush(stderr);
    MPI_Abort(P.comm, 1);
}

static int setup(hearth_err *err) {
    int rank, n = dist_dp(&rank);
    if (n < 2) return 0;
    P.on = true;
    P.rank = rank;
    P.size = n;
    MPI_Comm_dup(dist_dp_comm(), &P.comm);   /* the replicas' leaders (each replica's other ranks serve it in dist.c) */
    const char *t = getenv("HEARTH_MPI_TIMEOUT");
    P.timeout = t && atof(t) > 0 ? atof(t) : 600;
    (void)err;
    return 0;
}

/* ---- rank 0 ---- */
static void post(void *buf, int n, int to, int tag) {   /* takes buf (malloc'd) */
    if (P.n_out == P.cap_out) {
        int cap = P.cap_out ? P.cap_out * 2 : 16;
        outgoing *q = realloc(P.out, (size_t)cap * sizeof *q);
        if (!q) { fprintf(stderr, "error: rank 0: out of memory\n"); MPI_Abort(P.comm, 1); }
        P.out = q, P.cap_out = cap;
    }
    outgoing *o = &P.out[P.n_out++];
    o->buf = buf;
    MPI_Isend(buf, n, MPI_BYTE, to, tag, P.comm, &o->req);
}

static void reap(void) {
    for (int i = 0; i < P.n_out; i++) {
        int done;
        MPI_Test(&P.out[i].req, &done, MPI_STATUS_IGNORE);
        if (done) free(P.out[i].buf), P.out[i--] = P.out[--P.n_out];
    }
}

static void send_task(route *r) {
    const srv_task *t = r->t;
    task_hdr h = { .id = r->id, .n_prompt = t->n_prompt, .max_tokens = t->max_tokens, .n_probs = t->n_probs,
                   .ignore_eos = t->ignore_eos, .no_cache = t->no_cache, .spec_mode = t->spec_mode,
                   .spec_n_max = t->spec_n_max, .spec_n_min = t->spec_n_min, .n_stop = t->n_stop, .n_bias = t->n_bias,
                   .n_grammar = t->grammar_src ? (int32_t)strlen(t->grammar_src) : -1, .spec_p_min = t->spec_p_min,
                   .sp = t->sp };
    memcpy(h.lora, t->lora, sizeof h.lora);
    size_t n = sizeof h + (size_t)t->n_prompt * sizeof(hearth_token) + (size_t)t->n_bias * (sizeof(hearth_token) + sizeof(float)) +
               (h.n_grammar > 0 ? (size_t)h.n_grammar : 0);
    for (int i = 0; i < t->n_stop; i++) n += strlen(t->stop[i]) + 1;
    char *b = malloc(n), *p = b;
    if (!b) { fprintf(stderr, "error: rank 0: out of memory\n"); MPI_Abort(P.comm, 1); }
    memcpy(p, &h, sizeof h), p += sizeof h;
    memcpy(p, t->prompt, (size_t)t->n_prompt * sizeof(hearth_token)), p += (size_t)t->n_prompt * sizeof(hearth_token);
    memcpy(p, t->bias_id, (size_t)t->n_bias * sizeof(hearth_token)), p += (size_t)t->n_bias * sizeof(hearth_token);
    memcpy(p, t->bias, (size_t)t->n_bias * sizeof(float)), p += (size_t)t->n_bias * sizeof(float);
    for (int i = 0; i < t->n_stop; i++) p = stpcpy(p, t->stop[i]) + 1;
    if (h.n_grammar > 0) memcpy(p, t->grammar_src, (size_t)h.n_grammar);
    post(b, (int)n, r->replica, TAG_TASK);
}

/* A replica's progress into the task it belongs to. A message that does not add up ends the job: dropped, it
 * could be the end of a request, whose client would then wait forever. */
static void take_progress(const char *b, int n, int from) {
    prog_hdr h = { 0 };
    if (n >= (int)sizeof h) memcpy(&h, b, sizeof h);
    if (n < (int)sizeof h || h.n_text < 0 || h.n_toks < 0 ||
        (size_t)n != sizeof h + (size_t)h.n_text + (size_t)h.n_toks * sizeof(srv_tok)) {
        fprintf(stderr, "error: rank 0: a malformed progress message (%d bytes) from replica rank %d: ending the job\n", n, from);
        fflush(stderr);
        MPI_Abort(P.comm, 1);
    }
    pthread_mutex_lock(&P.mu);
    srv_task *t = NULL;
    for (int i = 0; i < P.n_routes; i++)
        if (P.routes[i].id == h.id) t = P.routes[i].t;
    pthread_mutex_unlock(&P.mu);   /* the route (and its reference) is only dropped on this thread */
    if (!t) return;
    const char *text = b + sizeof h;
    const srv_tok *toks = (const srv_tok *)(text + h.n_text);
    pthread_mutex_lock(&t->mu);
    bool ok = true;
    if (h.n_text) {
        if (t->len + (size_t)h.n_text + 1 > t->cap) {
            size_t cap = (t->len + (size_t)h.n_text + 1) * 2;
            char *p = realloc(t->text, cap);
            if (p) t->text = p, t->cap = cap;
            else ok = false;
        }
        if (ok) memcpy(t->text + t->len, text, (size_t)h.n_text), t->len += (size_t)h.n_text, t->text[t->len] = 0;
    }
    if (ok && h.n_toks) {
        if (t->n_toks + h.n_toks > t->cap_toks) {
            int cap = (t->n_toks + h.n_toks) * 2;
            srv_tok *p = realloc(t->toks, (size_t)cap * sizeof *p);
            if (p) t->toks = p, t->cap_toks = cap;
            else ok = false;
        }
        if (ok) memcpy(t->toks + t->n_toks, toks, (size_t)h.n_toks * sizeof *toks), t->n_toks += h.n_toks;
    }
    double now = srv_now_ms();
    if (h.started && !t->t_start) t->t_start = now;
    if (h.n_gen && !t->n_gen) t->t_first = now;
    t->n_gen = h.n_gen;
    t->n_cached = h.n_cached;
    t->n_done = h.n_done;
    t->stable = t->len;   /* (the replica sends only text no stop string can cut) */
    if (!ok && !t->done) {
        t->status = 500;
        snprintf(t->err, sizeof t->err, "out of memory");
        t->done = true;
        t->t_done = now;
    } else if (h.done && !t->done) {
        t->finish = h.finish >= 0 && h.finish < 4 ? FINISH[h.finish] : NULL;
        t->stop_hit = h.stop_hit >= 0 && h.stop_hit < t->n_stop ? t->stop[h.stop_hit] : NULL;
        t->status = h.status;
        snprintf(t->err, sizeof t->err, "%s", h.err);
        t->stable = t->len;
        t->done = true;
        t->t_done = now;
    }
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static int drain(char **buf, int *cap);

/* Rank 0's MPI thread: tasks and cancellations out, progress and heartbeats in, silent replicas noticed. */
static void *router_main(void *arg) {
    (void)arg;
    char *buf = NULL;
    int cap = 0;
    while (!atomic_load(&P.quit)) {
        bool busy = false;
        /* new tasks out, cancellations out, finished routes dropped */
        pthread_mutex_lock(&P.mu);
        for (int i = 0; i < P.n_routes; i++) {
            route *r = &P.routes[i];
            if (r->replica && !r->sent) r->sent = busy = true, send_task(r);
            pthread_mutex_lock(&r->t->mu);
            bool done = r->t->done, cancelled = r->t->cancelled;
            pthread_mutex_unlock(&r->t->mu);
            if (r->replica && cancelled && !r->cancel_sent && !done) {
                r->cancel_sent = true;
                int32_t *b = malloc(sizeof *b);
                if (!b) { fprintf(stderr, "error: rank 0: out of memory\n"); MPI_Abort(P.comm, 1); }
                *b = r->id;
                post(b, sizeof *b, r->replica, TAG_CANCEL);
            }
            if (done) {
                P.active[r->replica]--;
                task_release(r->t);
                P.routes[i--] = P.routes[--P.n_routes];
            }
        }
        pthread_mutex_unlock(&P.mu);
        reap();
        busy |= drain(&buf, &cap) > 0;
        double now = MPI_Wtime();
        for (int r = 1; r < P.size; r++)
            if (now - P.heard[r] > P.timeout)
                die("error: replica rank %d/%d did not answer within %.0f s (HEARTH_MPI_TIMEOUT): ending the job\n", r);
        if (!busy) nap();
    }
    /* the end: what was posted goes out, then each replica is told to stop and answers (its last sends drained) */
    double t0 = MPI_Wtime();
    for (int r = 1; r < P.size; r++) post(NULL, 0, r, TAG_QUIT);
    while ((P.quits < P.size - 1 || P.n_out) && MPI_Wtime() - t0 < 10) {
        reap();
        if (!drain(&buf, &cap)) nap();
    }
    free(buf);
    free(P.out);
    return NULL;
}

/* Receives what the replicas sent: progress into its task, heartbeats, quit answers. Returns the messages. */
static int drain(char **buf, int *cap) {
    int got = 0;
    for (int flag = 1; flag;) {
        MPI_Status s;
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, P.comm, &flag, &s);
        if (!flag) break;
        int n;
        MPI_Get_count(&s, MPI_BYTE, &n);
        if (n > *cap) {
            char *p = realloc(*buf, (size_t)n);
            if (!p) { fprintf(stderr, "error: rank 0: out of memory\n"); MPI_Abort(P.comm, 1); }
            *buf = p, *cap = n;
        }
        MPI_Recv(*buf, n, MPI_BYTE, s.MPI_SOURCE, s.MPI_TAG, P.comm, MPI_STATUS_IGNORE);
        got++;
        pthread_mutex_lock(&P.mu);
        P.heard[s.MPI_SOURCE] = MPI_Wtime();
        if (s.MPI_TAG == TAG_BEAT && n == (int)sizeof(srv_counters)) memcpy(&P.beat[s.MPI_SOURCE], *buf, (size_t)n);
        if (s.MPI_TAG == TAG_QUIT) P.quits++;
        pthread_mutex_unlock(&P.mu);
        if (s.MPI_TAG == TAG_PROG) take_progress(*buf, n, s.MPI_SOURCE);
    }
    return got;
}

int dp_start(srv_engine *local, const server_params *p, hearth_err *err) {
    if (setup(err)) return -1;
    if (!P.on) return 0;
    P.local = local;
    P.parallel = p->parallel > 0 ? p->parallel : 1;
    P.active = calloc((size_t)P.size, sizeof *P.active);
    P.routed = calloc((size_t)P.size, sizeof *P.routed);
    P.prefix = calloc((size_t)P.size, sizeof *P.prefix);
    P.prefix_n = calloc((size_t)P.size, sizeof *P.prefix_n);
    P.prefix_at = calloc((size_t)P.size, sizeof *P.prefix_at);
    P.beat = calloc((size_t)P.size, sizeof *P.beat);
    P.heard = calloc((size_t)P.size, sizeof *P.heard);
    if (!P.active || !P.routed || !P.prefix || !P.prefix_n || !P.prefix_at || !P.beat || !P.heard) return herr(err, "out of memory");
    for (int r = 0; r < P.size; r++) P.heard[r] = MPI_Wtime();
    if (pthread_create(&P.thread, NULL, router_main, NULL)) return herr(err, "cannot start the MPI thread");
    if (hearth_mpi_size() > 1) fprintf(stderr, "data parallel: %d replicas of %d ranks each (rank 0 answers HTTP)\n", P.size, hearth_mpi_size());
    else fprintf(stderr, "data parallel: %d replicas (rank 0 answers HTTP)\n", P.size);
    return 0;
}

void dp_stop(void) {
    if (!P.on || P.rank) return;
    atomic_store(&P.quit, 1);
    pthread_join(P.thread, NULL);
    for (int i = 0; i < P.n_routes; i++) task_release(P.routes[i].t);
    free(P.routes); free(P.active); free(P.routed); free(P.prefix); free(P.prefix_n); free(P.prefix_at); free(P.beat); free(P.heard);
}

static int prefix_len(int r, const srv_task *t) {
    int best = 0;
    for (int k = 0; k < PREFIX_KEEP; k++) {
        int n = HT_MIN(P.prefix_n[r][k], t->n_prompt), i = 0;
        while (i < n && P.prefix[r][k][i] == t->prompt[i]) i++;
        best = HT_MAX(best, i);
    }
    return best;
}

int dp_submit(srv_task *t) {
    if (t->kind != TASK_GENERATE) return engine_submit(P.local, t);
    pthread_mutex_lock(&P.mu);
    /* the fewest active sequences (ties taken in turn); a replica with a free slot whose recent prompts share
     * PREFIX_MIN tokens or more with this one is preferred, the longest shared prefix first */
    int first = P.next_id % P.size, pick = first, best_prefix = PREFIX_MIN - 1;
    for (int k = 1; k < P.size; k++) {
        int r = (first + k) % P.size;
        if (P.active[r] < P.active[pick]) pick = r;
    }
    for (int r = 0; r < P.size; r++) {
        int n = P.active[r] < P.parallel ? prefix_len(r, t) : 0;
        if (n > best_prefix) best_prefix = n, pick = r;
    }
    route *rt = NULL;
    if (P.n_routes == P.cap_routes) {
        int cap = P.cap_routes ? P.cap_routes * 2 : 64;
        route *p = realloc(P.routes, (size_t)cap * sizeof *p);
        if (p) P.routes = p, P.cap_routes = cap;
    }
    if (P.n_routes < P.cap_routes && (pick > 0 || !engine_submit(P.local, t))) {
        rt = &P.routes[P.n_routes++];
        *rt = (route){ .t = t, .replica = pick, .id = ++P.next_id };
        pthread_mutex_lock(&t->mu);
        t->refs++;
        pthread_mutex_unlock(&t->mu);
        P.active[pick]++;
        P.routed[pick]++;
        int k = P.prefix_at[pick]++ % PREFIX_KEEP, n = HT_MIN(t->n_prompt, PREFIX_TOKENS);
        memcpy(P.prefix[pick][k], t->prompt, (size_t)n * sizeof(hearth_token));
        P.prefix_n[pick][k] = n;
    }
    pthread_mutex_unlock(&P.mu);
    return rt ? 0 : -1;
}

char *dp_metrics(void) {
    if (!P.on) return NULL;
    char *out = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&out, &n);
    if (!f) return NULL;
    srv_counters local;
    engine_counters(P.local, &local);
    pthread_mutex_lock(&P.mu);
    fprintf(f, "# HELP hearth_replica_requests_total generation requests routed to each replica (serve --dp)\n"
               "# TYPE hearth_replica_requests_total counter\n");
    for (int r = 0; r < P.size; r++) fprintf(f, "hearth_replica_requests_total{replica=\"%d\"} %lld\n", r, P.routed[r]);
    fprintf(f, "# HELP hearth_replica_active sequences routed to each replica and not finished\n# TYPE hearth_replica_active gauge\n");
    for (int r = 0; r < P.size; r++) fprintf(f, "hearth_replica_active{replica=\"%d\"} %d\n", r, P.active[r]);
    fprintf(f, "# HELP hearth_replica_tokens_generated_total tokens each replica generated (its last heartbeat)\n"
               "# TYPE hearth_replica_tokens_generated_total counter\n");
    for (int r = 0; r < P.size; r++)
        fprintf(f, "hearth_replica_tokens_generated_total{replica=\"%d\"} %lld\n", r, r ? P.beat[r].generated_tokens : local.generated_tokens);
    fprintf(f, "# HELP hearth_replica_prompt_tokens_cached_total prompt tokens each replica reused from its caches\n"
               "# TYPE hearth_replica_prompt_tokens_cached_total counter\n");
    for (int r = 0; r < P.size; r++)
        fprintf(f, "hearth_replica_prompt_tokens_cached_total{replica=\"%d\"} %lld\n", r, r ? P.beat[r].cached_tokens : local.cached_tokens);
    pthread_mutex_unlock(&P.mu);
    if (fclose(f)) { free(out); return NULL; }
    return out;
}

/* ---- the other ranks ---- */
typedef struct { srv_task *t; int id; size_t sent; int sent_toks; int sent_gen, sent_done; bool started, ended; } running;

static srv_task *read_task(const char *b, int n, int *id) {
    task_hdr h;
    if (n < (int)sizeof h) return NULL;
    memcpy(&h, b, sizeof h);
    const char *p = b + sizeof h, *end = b + n;
    if (h.n_prompt < 1 || h.n_bias < 0 || h.n_bias > SRV_MAX_BIAS || h.n_stop < 0 || h.n_stop > SRV_MAX_STOP ||
        (size_t)(end - p) < (size_t)h.n_prompt * sizeof(hearth_token) + (size_t)h.n_bias * (sizeof(hearth_token) + sizeof(float)))
        return NULL;
    srv_task *t = task_new(TASK_GENERATE);
    if (!t) return NULL;
    *id = h.id;
    t->n_prompt = h.n_prompt, t->max_tokens = h.max_tokens, t->n_probs = h.n_probs, t->ignore_eos = h.ignore_eos;
    t->no_cache = h.no_cache, t->spec_mode = h.spec_mode, t->spec_n_max = h.spec_n_max, t->spec_n_min = h.spec_n_min;
    t->spec_p_min = h.spec_p_min, t->sp = h.sp, t->n_bias = h.n_bias;
    memcpy(t->lora, h.lora, sizeof t->lora);
    t->prompt = malloc((size_t)h.n_prompt * sizeof(hearth_token));
    if (!t->prompt) { task_release(t); return NULL; }
    memcpy(t->prompt, p, (size_t)h.n_prompt * sizeof(hearth_token)), p += (size_t)h.n_prompt * sizeof(hearth_token);
    memcpy(t->bias_id, p, (size_t)h.n_bias * sizeof(hearth_token)), p += (size_t)h.n_bias * sizeof(hearth_token);
    memcpy(t->bias, p, (size_t)h.n_bias * sizeof(float)), p += (size_t)h.n_bias * sizeof(float);
    for (; t->n_stop < h.n_stop; t->n_stop++) {
        const char *z = memchr(p, 0, (size_t)(end - p));
        if (!z || !(t->stop[t->n_stop] = strdup(p))) { task_release(t); return NULL; }
        p = z + 1;
    }
    if (h.n_grammar >= 0) {
        if (end - p != h.n_grammar || !(t->grammar_src = strndup(p, (size_t)h.n_grammar))) { task_release(t); return NULL; }
    }
    return t;
}

/* What is new in r's task since the last message goes to rank 0. Text past t->stable is held back: a stop
 * string completed later cuts the text where it starts (and drops the tokens after), so bytes sent early
 * could be taken back. t->stable never decreases and a cut never reaches below it; a token that ends
 * before it is neither dropped nor changed. Once done, stable is the whole text. */
static void send_progress(running *r) {
    srv_task *t = r->t;
    pthread_mutex_lock(&t->mu);
    size_t end = t->done ? t->len : t->stable;
    int nt = t->n_toks;
    if (!t->done)
        while (nt > r->sent_toks && t->toks[nt - 1].text_end >= end) nt--;
    bool news = end > r->sent || nt > r->sent_toks || t->done || t->n_done != r->sent_done ||
                t->n_gen != r->sent_gen || (t->t_start && !r->started);
    if (!news) { pthread_mutex_unlock(&t->mu); return; }
    prog_hdr h = { .id = r->id, .done = t->done, .finish = 0, .stop_hit = -1, .status = t->status, .n_gen = t->n_gen,
                   .n_cached = t->n_cached, .n_done = t->n_done, .started = t->t_start > 0,
                   .n_text = (int32_t)(end - r->sent), .n_toks = nt - r->sent_toks };
    for (int i = 1; i < 4; i++)
        if (t->finish && !strcmp(t->finish, FINISH[i])) h.finish = i;
    for (int i = 0; i < t->n_stop; i++)
        if (t->stop_hit == t->stop[i]) h.stop_hit = i;
    snprintf(h.err, sizeof h.err, "%s", t->err);
    size_t n = sizeof h + (size_t)h.n_text + (size_t)h.n_toks * sizeof(srv_tok);
    char *b = malloc(n);
    if (!b) { fprintf(stderr, "error: rank %d: out of memory\n", P.rank); MPI_Abort(P.comm, 1); }
    memcpy(b, &h, sizeof h);
    if (h.n_text) memcpy(b + sizeof h, t->text + r->sent, (size_t)h.n_text);
    if (h.n_toks) memcpy(b + sizeof h + h.n_text, t->toks + r->sent_toks, (size_t)h.n_toks * sizeof(srv_tok));
    r->sent = end, r->sent_toks = nt, r->sent_gen = t->n_gen, r->sent_done = t->n_done, r->started = h.started;
    r->ended = h.done;
    pthread_mutex_unlock(&t->mu);
    MPI_Send(b, (int)n, MPI_BYTE, 0, TAG_PROG, P.comm);
    free(b);
}

void dp_replica(srv_engine *e, hearth_model *m) {
    hearth_err err = { "" };
    if (setup(&err) || !P.on) return;
    running *run = NULL;
    int n_run = 0, cap_run = 0, cap = 0;
    char *buf = NULL;
    double beat = 0;
    for (bool quit = false; !quit;) {
        bool busy = false;
        for (int flag = 1; flag;) {
            MPI_Status s;
            MPI_Iprobe(0, MPI_ANY_TAG, P.comm, &flag, &s);
            if (!flag) break;
            int n;
            MPI_Get_count(&s, MPI_BYTE, &n);
            if (n > cap) {
                char *q = realloc(buf, (size_t)n);
                if (!q) { fprintf(stderr, "error: rank %d: out of memory\n", P.rank); MPI_Abort(P.comm, 1); }
                buf = q, cap = n;
            }
            MPI_Recv(buf, n, MPI_BYTE, 0, s.MPI_TAG, P.comm, MPI_STATUS_IGNORE);
            busy = true;
            if (s.MPI_TAG == TAG_QUIT) {
                quit = true;
                MPI_Send(NULL, 0, MPI_BYTE, 0, TAG_QUIT, P.comm);
                break;
            }
            if (s.MPI_TAG == TAG_CANCEL && n == 4) {
                int32_t id;
                memcpy(&id, buf, 4);
                for (int i = 0; i < n_run; i++)
                    if (run[i].id == id) {
                        task_cancel(run[i].t);
                        fprintf(stderr, "replica %d: request %d cancelled (its client left)\n", P.rank, id);
                    }
                continue;
            }
            if (s.MPI_TAG != TAG_TASK) continue;
            int id = 0;
            srv_task *t = read_task(buf, n, &id);
            if (!t) { fprintf(stderr, "error: rank %d: a task it cannot read from rank 0\n", P.rank); MPI_Abort(P.comm, 1); }
            if (t->grammar_src && !(t->grammar = hearth_grammar_new(m, t->grammar_src, &err))) {
                t->status = 400, t->done = true;
                snprintf(t->err, sizeof t->err, "%s", err.msg);
            } else if (engine_submit(e, t)) {
                t->status = 503, t->done = true;
                snprintf(t->err, sizeof t->err, "the server is busy (request queue full)");
            }
            if (n_run == cap_run) {
                cap_run = cap_run ? cap_run * 2 : 16;
                running *q = realloc(run, (size_t)cap_run * sizeof *q);
                if (!q) { fprintf(stderr, "error: rank %d: out of memory\n", P.rank); MPI_Abort(P.comm, 1); }
                run = q;
            }
            run[n_run++] = (running){ .t = t, .id = id };
        }
        for (int i = 0; i < n_run; i++) {
            if (quit) break;
            send_progress(&run[i]);
            if (run[i].ended) {   /* its last state went out */
                task_release(run[i].t);
                run[i--] = run[--n_run];
            }
        }
        double now = MPI_Wtime();
        if (!quit && now - beat > 0.5) {
            srv_counters k;
            engine_counters(e, &k);
            MPI_Send(&k, sizeof k, MPI_BYTE, 0, TAG_BEAT, P.comm);
            beat = now;
        }
        if (!busy) nap();
    }
    for (int i = 0; i < n_run; i++) task_cancel(run[i].t), task_release(run[i].t);
    free(run);
    free(buf);
}
#endif
