/* dist.c — pipeline parallelism over MPI (see dist.h): the layer plan, rank 0's side of each context, and the
 * worker loop the other ranks run.
 *
 * Messages travel one way down the chain, rank r to r + 1, so every rank sees rank 0's commands in the order
 * they were given: a command's meta message (int32s: command, context id, arguments), then for a decode the
 * micro-batch's residual stream ([n][n_embd] floats). The last rank sends the rows whose output is wanted
 * straight back to rank 0, which posted their receives before sending the micro-batch on (so the chain cannot
 * deadlock) and runs the output head once they are all in. A prompt is cut into micro-batches so that all ranks
 * work at once. Every row is computed by the same kernels in the same order as in one process, whatever the
 * micro-batch, so the outputs are identical bit for bit. Rank 0 waits for another rank at most
 * HEARTH_MPI_TIMEOUT seconds (default 600), then ends the job naming it; mpirun ends the job when a rank dies. */
#include "dist/dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/context.h"

static int parse_split(int *argc, char ***argv, int **split, int *n_split, hearth_err *err) {
    char **av = *argv;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(av[i], "--split")) continue;
        if (i + 1 >= *argc) return herr(err, "--split needs a value: layers per rank, e.g. --split 10,6");
        const char *s = av[i + 1];
        int n = 1;
        for (const char *p = s; *p; p++) n += *p == ',';
        int *v = calloc((size_t)n, sizeof *v);
        if (!v) return herr(err, "out of memory");
        for (int k = 0; k < n; k++) {
            char *end;
            long x = strtol(s, &end, 10);
            if (end == s || x < 1 || x > 1 << 16 || (*end && *end != ',')) {
                free(v);
                return herr(err, "bad value for --split: '%s' (layers per rank, each at least 1, e.g. 10,6)", av[i + 1]);
            }
            v[k] = (int)x;
            s = end + (*end == ',');
        }
        free(*split);
        *split = v;
        *n_split = n;
        memmove(av + i, av + i + 2, (size_t)(*argc - i - 1) * sizeof *av);   /* keeps the NULL at argv[argc] */
        *argc -= 2;
        i--;
    }
    return 0;
}

#ifndef HEARTH_MPI
int hearth_mpi_init(int *argc, char ***argv, hearth_model_loader load, hearth_err *err) {
    (void)load;
    int *split = NULL, n = 0;
    if (parse_split(argc, argv, &split, &n, err)) return -1;
    free(split);
    return n ? herr(err, "--split: this hearth was built without MPI (install libopenmpi-dev and rebuild)") : 0;
}
int hearth_mpi_rank(void) { return 0; }
int hearth_mpi_size(void) { return 1; }
#else
#include <mpi.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

enum { CMD_CTX_NEW = 1, CMD_CTX_FREE, CMD_TRUNCATE, CMD_DECODE, CMD_QUIT };
enum { TAG_META = 1, TAG_X, TAG_ROWS, TAG_STATUS };
#define MAX_CTX 16
#define CTX_NEW_FIXED 8   /* cmd, id, n_ctx, n_seq, n_batch, n_threads, K and V cache types; then the bounds and the path */

static struct {
    bool on;                    /* a job of 2+ ranks */
    int rank, size;
    MPI_Comm comm;
    hearth_model_loader load;
    int *split, n_split;        /* --split: layers per rank */
    double timeout;             /* seconds rank 0 waits for another rank */
    char host[256];
    hearth_model *model;        /* ranks but 0: the model they hold their layers of */
    int *bounds;                /* [size + 1]: rank r runs layers [bounds[r], bounds[r + 1]) */
    hearth_ctx *ctxs[MAX_CTX];  /* rank 0: contexts by id; the others: their part of each */
    bool pending[MAX_CTX];      /* rank 0: the ranks' answers to a context's opening not read yet */
    int32_t *meta;              /* message buffer */
    int meta_cap;
    int8_t *ones;               /* rank 0: n_batch wanted-row flags for the head */
    int ones_cap;
    MPI_Request *reqs;          /* rank 0: one receive of rows per micro-batch */
    int reqs_cap;
} D;

int hearth_mpi_rank(void) { return D.on ? D.rank : 0; }
int hearth_mpi_size(void) { return D.on ? D.size : 1; }

/* Between two polls of a wait that began at t0: spin while the wait is young (in a generation a rank waits
 * one step of the others, a few ms to a few hundred: a sleeping rank would add its wake-up to every hop),
 * yielding to any process that shares the core, then nap (an idle server burns no core). */
static void pause_briefly(double t0) {
    if (MPI_Wtime() - t0 < 0.5) sched_yield();   /* gives the core away only if another process wants it */
    else nanosleep(&(struct timespec){ 0, 200 * 1000 }, NULL);
}

/* Rank 0: completes r or ends the job after D.timeout seconds, naming the rank it waited for. */
static void wait_for(MPI_Request *r, int peer, const char *what) {
    double t0 = MPI_Wtime();
    for (int done = 0;;) {
        MPI_Test(r, &done, MPI_STATUS_IGNORE);
        if (done) return;
        if (MPI_Wtime() - t0 > D.timeout) {
            fprintf(stderr, "error: rank %d/%d did not %s within %.0f s (HEARTH_MPI_TIMEOUT): ending the job\n", peer,
                    D.size, what, D.timeout);
            fflush(stderr);
            MPI_Abort(D.comm, 1);
        }
        pause_briefly(t0);
    }
}

static void send_to(const void *buf, int count, MPI_Datatype type, int to, int tag, const char *what) {
    MPI_Request r;
    MPI_Isend(buf, count, type, to, tag, D.comm, &r);
    wait_for(&r, to, what);
}

static int32_t *meta_room(int n) {
    if (n > D.meta_cap) {
        int32_t *p = realloc(D.meta, (size_t)n * sizeof *p);
        if (!p) { fprintf(stderr, "error: rank %d: out of memory\n", D.rank); MPI_Abort(D.comm, 1); }
        D.meta = p;
        D.meta_cap = n;
    }
    return D.meta;
}

/* ---- the plan: which layers each rank runs ---- */
static int layer_of(const char *name) {
    int il;
    return sscanf(name, "blk.%d.", &il) == 1 ? il : -1;
}

/* Bytes of weights each layer holds ([n_layer]), and of the rest (embeddings, head, final norm) in *other. */
static uint64_t *layer_bytes(const hearth_model *m, uint64_t *other) {
    uint64_t *b = calloc((size_t)m->hp.n_layer, sizeof *b);
    *other = 0;
    for (int i = 0; b && i < m->n_tensors; i++) {
        int il = layer_of(m->tensors[i].name);
        if (il >= 0 && il < m->hp.n_layer) b[il] += m->tensors[i].nbytes;
        else *other += m->tensors[i].nbytes;
    }
    return b;
}

/* Cuts the layers into D.size contiguous ranges of about equal weight bytes (each at least one layer). */
static void plan_by_bytes(const uint64_t *b, int n_layer, int *bounds) {
    uint64_t total = 0, sum = 0;
    for (int il = 0; il < n_layer; il++) total += b[il];
    bounds[0] = 0;
    for (int r = 1, il = 0; r < D.size; r++) {
        uint64_t target = total * (uint64_t)r / (uint64_t)D.size;
        while (il < n_layer - (D.size - r) && (il < bounds[r - 1] + 1 || sum + b[il] / 2 < target)) sum += b[il++];
        bounds[r] = il;
    }
    bounds[D.size] = n_layer;
}

static void log_rank(const hearth_model *m, int lo, int hi) {
    uint64_t other, sum = 0, *b = layer_bytes(m, &other);
    for (int il = lo; b && il < hi; il++) sum += b[il];
    if (lo == 0) sum += other;
    free(b);
    fprintf(stderr, "rank %d/%d on %s: layers %d-%d (%.0f MiB of weights)\n", D.rank, D.size, D.host, lo, hi - 1,
            (double)sum / (1 << 20));
}

int dist_plan(hearth_model *m, hearth_err *err) {
    if (!D.on || D.rank != 0 || m->layer_hi < m->hp.n_layer) return 0;   /* planned: rank 0 never has them all */
    for (int i = 0; i < MAX_CTX; i++)
        if (D.ctxs[i] && D.ctxs[i]->m != m)
            return herr(err, "under MPI the contexts open at once must share one model");
    int n_layer = m->hp.n_layer;
    if (n_layer < D.size)
        return herr(err, "%d ranks for a model of %d layers: each rank needs at least one layer", D.size, n_layer);
    int *bounds = calloc((size_t)D.size + 1, sizeof *bounds);
    uint64_t other, *b = layer_bytes(m, &other);
    if (!bounds || !b) { free(bounds); free(b); return herr(err, "out of memory"); }
    if (D.split) {
        int sum = 0;
        for (int r = 0; r < D.n_split; r++) { bounds[r] = sum; sum += D.split[r]; }
        bounds[D.size] = sum;
        if (D.n_split != D.size || sum != n_layer) {
            free(bounds);
            free(b);
            return herr(err, "--split gives %d ranks %d layers; this job has %d ranks and the model %d layers",
                        D.n_split, sum, D.size, n_layer);
        }
    } else plan_by_bytes(b, n_layer, bounds);
    free(b);
    free(D.bounds);
    D.bounds = bounds;
    m->layer_lo = 0;
    m->layer_hi = bounds[1];
    log_rank(m, 0, bounds[1]);
    return 0;
}

/* ---- rank 0's side of a context ---- */
int dist_ctx_open(hearth_ctx *c, hearth_err *err) {
    if (!D.on || D.rank != 0) return 0;
    int id = 0;
    while (id < MAX_CTX && D.ctxs[id]) id++;
    if (id == MAX_CTX) return herr(err, "under MPI at most %d contexts are open at once", MAX_CTX);
    if (c->n_batch > D.ones_cap) {
        int8_t *o = realloc(D.ones, (size_t)c->n_batch);
        if (!o) return herr(err, "out of memory");
        memset(o, 1, (size_t)c->n_batch);
        D.ones = o;
        D.ones_cap = c->n_batch;
    }
    const char *path = c->m->path ? c->m->path : "";
    int plen = (int)strlen(path), n = CTX_NEW_FIXED + D.size + 1 + 1 + (plen + 4) / 4;
    int32_t *mt = meta_room(n);
    int32_t fixed[CTX_NEW_FIXED] = { CMD_CTX_NEW, id, c->n_ctx, c->n_seq, c->n_batch, c->n_threads, (int32_t)c->k_type,
                                         (int32_t)c->v_type };
    memcpy(mt, fixed, sizeof fixed);
    memcpy(mt + CTX_NEW_FIXED, D.bounds, (size_t)(D.size + 1) * sizeof *mt);
    mt[CTX_NEW_FIXED + D.size + 1] = plen;
    memset(mt + CTX_NEW_FIXED + D.size + 2, 0, (size_t)(plen + 4) / 4 * 4);
    memcpy(mt + CTX_NEW_FIXED + D.size + 2, path, (size_t)plen);
    send_to(mt, n, MPI_INT32_T, 1, TAG_META, "take a new context");
    D.ctxs[id] = c;
    D.pending[id] = true;
    c->dist_id = id;
    return 0;
}

/* A status: [ok, message]. */
typedef struct { int32_t ok; char msg[sizeof(hearth_err)]; } status_msg;

int dist_ctx_ready(hearth_ctx *c, hearth_err *err) {
    if (c->dist_id < 0 || !D.pending[c->dist_id]) return 0;
    D.pending[c->dist_id] = false;
    int bad = -1;
    status_msg st, first = { 1, "" };
    for (int r = 1; r < D.size; r++) {
        MPI_Request q;
        MPI_Irecv(&st, sizeof st, MPI_BYTE, r, TAG_STATUS, D.comm, &q);
        wait_for(&q, r, "load its part of the model");
        if (!st.ok && bad < 0) { bad = r; first = st; }
    }
    if (bad >= 0) return herr(err, "rank %d/%d: %.*s", bad, D.size, (int)sizeof first.msg - 1, first.msg);
    return 0;
}

void dist_ctx_close(hearth_ctx *c) {
    if (c->dist_id < 0) return;
    hearth_err ignored;
    dist_ctx_ready(c, &ignored);   /* a context that failed on this rank: the others' answers are still due */
    int32_t mt[2] = { CMD_CTX_FREE, c->dist_id };
    send_to(mt, 2, MPI_INT32_T, 1, TAG_META, "close a context");
    D.ctxs[c->dist_id] = NULL;
    c->dist_id = -1;
}

void dist_truncate(hearth_ctx *c, int seq, int pos) {
    if (c->dist_id < 0) return;
    int32_t mt[4] = { CMD_TRUNCATE, c->dist_id, seq, pos };
    send_to(mt, 4, MPI_INT32_T, 1, TAG_META, "take a cache cut");
}

/* A decode's meta: command, id, n, then pos[n], seq[n], want[n]. */
static int32_t *decode_meta(const ht_ubatch *ub, int id) {
    int32_t *mt = meta_room(3 + 3 * ub->n);
    mt[0] = CMD_DECODE;
    mt[1] = id;
    mt[2] = ub->n;
    memcpy(mt + 3, ub->pos, (size_t)ub->n * sizeof *mt);
    memcpy(mt + 3 + ub->n, ub->seq, (size_t)ub->n * sizeof *mt);
    for (int i = 0; i < ub->n; i++) mt[3 + 2 * ub->n + i] = ub->want[i];
    return mt;
}

/* Micro-batch size: a prompt in about 4 pieces per rank keeps every rank busy most of the time (the pipeline
 * fills and drains once) without making the pieces too small for the matrix kernels; an encoder sees its
 * batch whole. */
static int micro_batch(const hearth_ctx *c, int n) {
    if (!c->m->hp.causal) return n;
    int mb = (n + 4 * D.size - 1) / (4 * D.size);
    return HT_MIN(c->n_batch, HT_MAX(mb, 32));
}

int dist_decode(hearth_ctx *c, const int32_t *tokens, int n, hearth_err *err) {
    const int E = c->m->hp.n_embd, mb = micro_batch(c, n), n_mb = (n + mb - 1) / mb;
    if (n_mb > D.reqs_cap) {
        MPI_Request *r = realloc(D.reqs, (size_t)n_mb * sizeof *r);
        if (!r) return herr(err, "out of memory");
        D.reqs = r;
        D.reqs_cap = n_mb;
    }
    int n_req = 0, o = 0;
    for (int i0 = 0; i0 < n; i0 += mb) {
        ht_ubatch ub = { .n = HT_MIN(mb, n - i0), .tokens = tokens + i0, .pos = c->b_pos + i0, .seq = c->b_seq + i0,
                         .want = c->b_want + i0, .row0 = i0 };
        c->m->arch->embed(c, &ub);
        ctx_layers(c, &ub);
        int nw = 0;
        for (int i = 0; i < ub.n; i++) nw += ub.want[i] != 0;
        if (nw) MPI_Irecv(c->dist_rows + (size_t)o * E, nw * E, MPI_FLOAT, D.size - 1, TAG_ROWS, D.comm, &D.reqs[n_req++]);
        o += nw;
        send_to(decode_meta(&ub, c->dist_id), 3 + 3 * ub.n, MPI_INT32_T, 1, TAG_META, "take a micro-batch");
        send_to(c->x, ub.n * E, MPI_FLOAT, 1, TAG_X, "take a micro-batch");
    }
    for (int k = 0; k < n_req; k++) wait_for(&D.reqs[k], D.size - 1, "send its output rows");

    /* the head, over the wanted rows in order, n_batch at a time */
    for (int o0 = 0, row = 0; o0 < c->n_out; o0 += c->n_batch) {
        int k = HT_MIN(c->n_batch, c->n_out - o0);
        while (c->row_out[row] != o0) row++;
        memcpy(c->x, c->dist_rows + (size_t)o0 * E, (size_t)k * E * sizeof(float));
        ht_ubatch ub = { .n = k, .tokens = tokens + row, .pos = c->b_pos + row, .seq = c->b_seq + row, .want = D.ones,
                         .row0 = row };
        c->m->arch->head(c, &ub);
    }
    return 0;
}

/* ---- the other ranks ---- */
static int recv_meta(void) {
    MPI_Status s;
    double t0 = MPI_Wtime();
    for (int flag = 0; !flag; pause_briefly(t0)) MPI_Iprobe(D.rank - 1, TAG_META, D.comm, &flag, &s);
    int n;
    MPI_Get_count(&s, MPI_INT32_T, &n);
    MPI_Recv(meta_room(HT_MAX(n, 1)), n, MPI_INT32_T, D.rank - 1, TAG_META, D.comm, MPI_STATUS_IGNORE);
    return n;
}

static void report(int ok, const hearth_err *err) {
    status_msg st = { ok, "" };
    if (!ok) snprintf(st.msg, sizeof st.msg, "%s", err->msg);
    MPI_Send(&st, sizeof st, MPI_BYTE, 0, TAG_STATUS, D.comm);
}

static void worker_ctx_new(const int32_t *mt, int n) {
    hearth_err err = { "" };
    const int at = CTX_NEW_FIXED + D.size + 2;   /* where the path's bytes start */
    int id = mt[1], plen = n >= at ? mt[at - 1] : -1;
    if (plen > (n - at) * 4) plen = -1;
    const int32_t *bounds = mt + CTX_NEW_FIXED;
    char *path = plen >= 0 ? calloc((size_t)plen + 1, 1) : NULL;
    if (!path || id < 0 || id >= MAX_CTX || D.ctxs[id]) { free(path); report(0, &(hearth_err){ "bad context message" }); return; }
    memcpy(path, mt + at, (size_t)plen);
    if (D.model && strcmp(D.model->path ? D.model->path : "", path)) { hearth_model_free(D.model); D.model = NULL; }
    if (!D.model) {
        if (D.load(path, &D.model, &err)) {
            char msg[sizeof err.msg];
            snprintf(msg, sizeof msg, "%s", err.msg);
            herr(&err, "%s on %s: %s", path, D.host, msg);
            report(0, &err);
            free(path);
            return;
        }
        D.model->layer_lo = bounds[D.rank];
        D.model->layer_hi = bounds[D.rank + 1];
        if (D.model->layer_lo < 0 || D.model->layer_hi > D.model->hp.n_layer || D.model->layer_lo >= D.model->layer_hi) {
            herr(&err, "%s on %s: the plan's layers %d-%d are not this model's", path, D.host, bounds[D.rank], bounds[D.rank + 1] - 1);
            hearth_model_free(D.model);
            D.model = NULL;
            report(0, &err);
            free(path);
            return;
        }
        log_rank(D.model, D.model->layer_lo, D.model->layer_hi);
    }
    free(path);
    hearth_ctx_params p = { .n_ctx = mt[2], .n_seq = mt[3], .n_batch = mt[4], .n_threads = mt[5],
                            .cache_type = (hearth_cache_type)mt[6], .cache_type_k = (hearth_cache_type)mt[6],
                            .cache_type_v = (hearth_cache_type)mt[7] };
    int rc = hearth_ctx_new(D.model, &p, &D.ctxs[id], &err);
    report(rc == 0, &err);
}

static void worker_decode(const int32_t *mt) {
    hearth_ctx *c = mt[1] >= 0 && mt[1] < MAX_CTX ? D.ctxs[mt[1]] : NULL;
    int n = mt[2];
    if (!c || n <= 0 || n > c->n_batch) {
        fprintf(stderr, "error: rank %d: a micro-batch for a context it does not hold\n", D.rank);
        MPI_Abort(D.comm, 1);
    }
    const int E = c->m->hp.n_embd;
    MPI_Recv(c->x, n * E, MPI_FLOAT, D.rank - 1, TAG_X, D.comm, MPI_STATUS_IGNORE);
    for (int i = 0; i < n; i++) c->b_want[i] = (int8_t)mt[3 + 2 * n + i];
    ht_ubatch ub = { .n = n, .pos = mt + 3, .seq = mt + 3 + n, .want = c->b_want };
    ctx_layers(c, &ub);
    if (D.rank + 1 < D.size) {
        MPI_Send(mt, 3 + 3 * n, MPI_INT32_T, D.rank + 1, TAG_META, D.comm);
        MPI_Send(c->x, n * E, MPI_FLOAT, D.rank + 1, TAG_X, D.comm);
        return;
    }
    int nw = 0;   /* the last rank: the wanted rows, packed, back to rank 0 */
    for (int i = 0; i < n; i++)
        if (ub.want[i]) memmove(c->x + (size_t)nw++ * E, c->x + (size_t)i * E, (size_t)E * sizeof(float));
    if (nw) MPI_Send(c->x, nw * E, MPI_FLOAT, 0, TAG_ROWS, D.comm);
}

static void worker(void) {
    for (;;) {
        int n = recv_meta();
        const int32_t *mt = D.meta;
        int cmd = n >= 2 ? mt[0] : -1, id = n >= 2 ? mt[1] : -1;
        /* every command but a decode goes on down the chain at once (loads then run side by side) */
        if (cmd != CMD_DECODE && D.rank + 1 < D.size) MPI_Send(mt, n, MPI_INT32_T, D.rank + 1, TAG_META, D.comm);
        hearth_ctx *c = id >= 0 && id < MAX_CTX ? D.ctxs[id] : NULL;
        switch (cmd) {
        case CMD_QUIT: return;
        case CMD_CTX_NEW: worker_ctx_new(mt, n); break;
        case CMD_CTX_FREE:
            hearth_ctx_free(c);
            if (c) D.ctxs[id] = NULL;
            break;
        case CMD_TRUNCATE:
            if (c && n >= 4 && mt[2] >= 0 && mt[2] < c->n_seq && mt[3] >= 0 && mt[3] <= c->seq_len[mt[2]]) c->seq_len[mt[2]] = mt[3];
            break;
        case CMD_DECODE:
            if (n >= 3 && n == 3 + 3 * mt[2]) { worker_decode(mt); break; }
            /* fall through */
        default:
            fprintf(stderr, "error: rank %d: a message it cannot read from rank %d\n", D.rank, D.rank - 1);
            MPI_Abort(D.comm, 1);
        }
    }
}

static void finish(void) {
    if (D.rank == 0) {
        int32_t mt[2] = { CMD_QUIT, -1 };
        send_to(mt, 2, MPI_INT32_T, 1, TAG_META, "end");
    }
    MPI_Finalize();
}

int hearth_mpi_init(int *argc, char ***argv, hearth_model_loader load, hearth_err *err) {
    if (parse_split(argc, argv, &D.split, &D.n_split, err)) return -1;
    /* only a process mpirun started joins a job: MPI_Init alone would make a job of one, slowly */
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_SIZE") && !getenv("PMIX_RANK")) {
        if (D.split) return herr(err, "--split: start hearth with mpirun -np N (one rank per range of layers)");
        return 0;
    }
    int provided;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return herr(err, "MPI failed to start");
    MPI_Comm_dup(MPI_COMM_WORLD, &D.comm);
    MPI_Comm_rank(D.comm, &D.rank);
    MPI_Comm_size(D.comm, &D.size);
    if (D.size < 2) {
        MPI_Finalize();
        return D.split ? herr(err, "--split: this job has one rank; start it with mpirun -np N") : 0;
    }
    if (provided < MPI_THREAD_SERIALIZED) {
        if (D.rank == 0) herr(err, "this MPI library cannot be called from more than one thread");
        MPI_Finalize();
        if (D.rank) exit(1);
        return -1;
    }
    if (D.split && D.n_split != D.size) {
        if (D.rank == 0) herr(err, "--split gives %d ranges of layers for %d ranks", D.n_split, D.size);
        MPI_Finalize();
        if (D.rank) exit(1);
        return -1;
    }
    D.on = true;
    D.load = load ? load : hearth_model_load;
    const char *t = getenv("HEARTH_MPI_TIMEOUT");
    D.timeout = t && atof(t) > 0 ? atof(t) : 600;
    if (gethostname(D.host, sizeof D.host - 1)) snprintf(D.host, sizeof D.host, "?");
    if (D.rank == 0) {
        atexit(finish);
        return 0;
    }
    worker();
    for (int i = 0; i < MAX_CTX; i++) hearth_ctx_free(D.ctxs[i]);
    hearth_model_free(D.model);
    MPI_Finalize();
    exit(0);
}
#endif
