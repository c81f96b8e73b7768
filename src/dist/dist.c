/* dist.c — pipeline and tensor parallelism over MPI (see dist.h): the layer plan, the tensor split, rank 0's
 * side of each context, and the worker loop the other ranks run.
 *
 * Messages travel one way down the chain of stages, leader to leader, and from each leader to the other ranks
 * of its group, so every rank sees rank 0's commands in the order they were given: a command's meta message
 * (int32s: command, context id, arguments), then for a decode the micro-batch's residual stream ([n][n_embd]
 * floats). The last stage's leader sends the rows whose output is wanted straight back to rank 0, which
 * posted their receives before sending the micro-batch on (so the chain cannot deadlock) and runs the output
 * head once they are all in.
 *
 * The tensor split (--tp K) is chosen so that no float sum is ever cut in pieces: a sum of partial dot
 * products added across ranks would round differently from one process's dot product (its kernels sum each
 * row in their own blocking), so only all-gathers cross the ranks. Each rank holds its kv heads (n_head_kv / K
 * of them, with their q heads; when K does not divide them, some ranks hold one more) of wq / wk / wv and the
 * same heads of the KV cache; the heads' attention outputs are gathered and each rank multiplies them by its
 * share of wo's n_embd output rows; those outputs are gathered (the residual stream is whole on every rank). The FFN's gate / up are cut by intermediate rows,
 * their product gathered, and ffn_down cut by its n_embd output rows, gathered again. A rank receives per
 * layer and token (K - 1) / K of (n_head * head_dim_v + n_ff + 2 n_embd) floats, against 2 n_embd for an
 * all-reduce of partial sums, which is not exact; the difference is a few tens of KB per token, small next to
 * the weights a rank reads. A prompt is cut into micro-batches so that all ranks
 * work at once. Every row is computed by the same kernels in the same order as in one process, whatever the
 * micro-batch, so the outputs are identical bit for bit. Rank 0 waits for another rank at most
 * HEARTH_MPI_TIMEOUT seconds (default 600), then ends the job naming it; mpirun ends the job when a rank dies. */
#include "dist/dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/context.h"
#include "model/matmul.h"

/* An integer flag FLAG N in [1, max] (removed from argv; *v stays 0 when absent); what it means is in msg. */
static int parse_count(int *argc, char ***argv, const char *flag, int max, int *v, const char *msg, hearth_err *err) {
    char **av = *argv;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(av[i], flag)) continue;
        char *end = NULL;
        long x = i + 1 < *argc ? strtol(av[i + 1], &end, 10) : 0;
        if (!end || end == av[i + 1] || *end || x < 1 || x > max)
            return herr(err, "%s needs a value from 1 to %d: %s", flag, max, msg);
        *v = (int)x;
        memmove(av + i, av + i + 2, (size_t)(*argc - i - 1) * sizeof *av);
        *argc -= 2;
        i--;
    }
    return 0;
}

/* --tp K: the ranks of each tensor group. */
static int parse_tp(int *argc, char ***argv, int *tp, hearth_err *err) {
    return parse_count(argc, argv, "--tp", 64, tp, "the ranks that share each layer, e.g. --tp 2", err);
}

/* --dp R: R replicas of the whole model, each serving its own requests. */
static int parse_dp(int *argc, char ***argv, int *dp, hearth_err *err) {
    if (parse_count(argc, argv, "--dp", 1024, dp, "the replicas of the model, e.g. --dp 2", err)) return -1;
    if (*dp > 1 && (*argc < 2 || strcmp((*argv)[1], "serve")))
        return herr(err, "--dp: only hearth serve runs replicas (mpirun -np R hearth serve --dp R)");
    return 0;
}

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
    int *split = NULL, n = 0, tp = 0, dp = 0;
    if (parse_split(argc, argv, &split, &n, err) || parse_tp(argc, argv, &tp, err) || parse_dp(argc, argv, &dp, err)) { free(split); return -1; }
    free(split);
    if (n || tp > 1 || dp > 1)
        return herr(err, "%s: this hearth was built without MPI (install libopenmpi-dev and rebuild)", n ? "--split" : tp > 1 ? "--tp" : "--dp");
    return 0;
}
int hearth_mpi_rank(void) { return 0; }
int hearth_mpi_size(void) { return 1; }
int dist_dp(int *rank) { *rank = 0; return 1; }
#else
#include <mpi.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

enum { CMD_CTX_NEW = 1, CMD_CTX_FREE, CMD_TRUNCATE, CMD_DECODE, CMD_QUIT, CMD_HEAD };
enum { TAG_META = 1, TAG_X, TAG_ROWS, TAG_STATUS, TAG_TP, TAG_HEAD };
#define HEAD_ROWS 16      /* rows of the output head per exchange under --tp (bounds its buffers) */
#define MAX_CTX 16
#define CTX_NEW_FIXED 8   /* cmd, id, n_ctx, n_seq, n_batch, n_threads, K and V cache types; then the bounds and the path */

static struct {
    bool on;                    /* a job of 2+ ranks */
    int rank, size;
    int tp, stages;             /* --tp: ranks per group (1: pipeline only); size / tp pipeline stages */
    int dp, dp_rank;            /* --dp: replicas (each a block of size / dp consecutive ranks), this rank's */
    MPI_Comm comm, tp_comm;     /* the job (under --dp: the replica's ranks); tp_comm: this rank's group, 0..tp-1 */
    MPI_Comm dp_comm;           /* --dp: the replicas' leaders (their first ranks), ranked by replica */
    char who[32];               /* "replica R: " before a rank's messages under --dp, else "" */
    hearth_model_loader load;
    int *split, n_split;        /* --split: layers per stage */
    double timeout;             /* seconds rank 0 waits for another rank */
    char host[256];
    hearth_model *model;        /* ranks but 0: the model they hold their layers of */
    int *bounds;                /* [stages + 1]: stage s runs layers [bounds[s], bounds[s + 1]) */
    hearth_ctx *ctxs[MAX_CTX];  /* rank 0: contexts by id; the others: their part of each */
    bool pending[MAX_CTX];      /* rank 0: the ranks' answers to a context's opening not read yet */
    int32_t *meta;              /* message buffer */
    int meta_cap;
    int8_t *ones;               /* rank 0: n_batch wanted-row flags for the head */
    int ones_cap;
    MPI_Request *reqs;          /* rank 0: one receive of rows per micro-batch */
    int reqs_cap;
    float *head_buf;            /* --tp: [HEAD_ROWS][n_vocab] logits of the group's shares of the head */
    int head_cap;
} D;

/* The chain: a group's leader is its first rank; commands reach a leader from the previous stage's leader,
 * and the other ranks of a group from their leader. */
static bool is_leader(void) { return D.rank % D.tp == 0; }
static int prev_rank(void) { return is_leader() ? D.rank - D.tp : D.rank - D.rank % D.tp; }
static int last_leader(void) { return D.size - D.tp; }

int hearth_mpi_rank(void) { return D.on ? D.rank : 0; }
int hearth_mpi_size(void) { return D.on ? D.size : 1; }
int dist_dp(int *rank) { *rank = D.dp > 1 ? D.dp_rank : 0; return D.dp > 1 ? D.dp : 1; }
MPI_Comm dist_dp_comm(void) { return D.dp_comm; }
static void dp_finish(void) { MPI_Finalize(); }

/* Between two polls of a wait that began at t0: spin while the wait is young (in a generation a rank waits
 * one step of the others, a few ms to a few hundred: a sleeping rank would add its wake-up to every hop),
 * yielding to any process that shares the core, then nap (an idle server burns no core). */
static void pause_briefly(double t0) {
    if (MPI_Wtime() - t0 < 0.5) sched_yield();   /* gives the core away only if another process wants it */
    else nanosleep(&(struct timespec){ 0, 200 * 1000 }, NULL);
}

/* Completes the n requests r or ends the job after D.timeout seconds, naming the rank it waited for. */
static void wait_all(int n, MPI_Request *r, int peer, const char *what) {
    double t0 = MPI_Wtime();
    for (int done = 0;;) {
        MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE);
        if (done) return;
        if (MPI_Wtime() - t0 > D.timeout) {
            fprintf(stderr, "error: %srank %d/%d did not %s within %.0f s (HEARTH_MPI_TIMEOUT): ending the job\n", D.who,
                    peer, D.size, what, D.timeout);
            fflush(stderr);
            MPI_Abort(D.comm, 1);
        }
        pause_briefly(t0);
    }
}

static void wait_for(MPI_Request *r, int peer, const char *what) { wait_all(1, r, peer, what); }

static void send_to(const void *buf, int count, MPI_Datatype type, int to, int tag, const char *what) {
    MPI_Request r;
    MPI_Isend(buf, count, type, to, tag, D.comm, &r);
    wait_for(&r, to, what);
}

/* A command on to the ranks that hear it from this one: the group's other ranks (from its leader), and with
 * next the next stage's leader. */
static void pass_on(const void *buf, int count, MPI_Datatype type, int tag, bool next, const char *what) {
    for (int r = D.rank + 1; is_leader() && r < D.rank + D.tp; r++) send_to(buf, count, type, r, tag, what);
    if (next && is_leader() && D.rank + D.tp < D.size) send_to(buf, count, type, D.rank + D.tp, tag, what);
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

/* Cuts the layers into D.stages contiguous ranges of about equal weight bytes (each at least one layer). */
static void plan_by_bytes(const uint64_t *b, int n_layer, int *bounds) {
    const int S = D.stages;
    uint64_t total = 0, sum = 0;
    for (int il = 0; il < n_layer; il++) total += b[il];
    bounds[0] = 0;
    for (int r = 1, il = 0; r < S; r++) {
        uint64_t target = total * (uint64_t)r / (uint64_t)S;
        while (il < n_layer - (S - r) && (il < bounds[r - 1] + 1 || sum + b[il] / 2 < target)) sum += b[il++];
        bounds[r] = il;
    }
    bounds[S] = n_layer;
}

/* Under --tp: the bytes of layer L's matrices that the split leaves to other ranks. */
static uint64_t tp_others_bytes(const hearth_model *m, const ht_layer *L) {
    const ht_hparams *hp = &m->hp;
    const int full[10] = { m->tp_n_head * hp->head_dim, m->tp_n_head_kv * hp->head_dim, m->tp_n_head_kv * hp->head_dim_v,
                           hp->n_embd, hp->n_ff, hp->n_ff, hp->n_embd, hp->n_ff_exp, hp->n_ff_exp, hp->n_embd };
    const ht_tensor *ts[10] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up, &L->ffn_down,
                                &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps };
    uint64_t sum = 0;
    for (int i = 0; i < 10; i++)
        if (ts[i]->data) sum += (uint64_t)(full[i] - ts[i]->ne[1]) * ts[i]->row_bytes * (uint64_t)HT_MAX(ts[i]->ne[2], 1);
    return sum;
}

static void log_rank(const hearth_model *m, int lo, int hi) {
    uint64_t other, sum = 0, *b = layer_bytes(m, &other);
    for (int il = lo; b && il < hi; il++) sum += b[il] - (m->tp_size > 1 ? tp_others_bytes(m, &m->layers[il]) : 0);
    if (lo == 0 && m->tp_size > 1) {   /* the head: each rank of the group its rows of it */
        const ht_tensor *h = &m->output;
        bool tied = h->data && m->tok_embd.data && (const uint8_t *)h->data >= (const uint8_t *)m->tok_embd.data &&
                    (const uint8_t *)h->data < (const uint8_t *)m->tok_embd.data + m->tok_embd.nbytes;
        uint64_t full = h->data && !tied ? (uint64_t)m->hp.n_vocab * h->row_bytes : 0;
        sum += (m->tp_rank == 0 ? other - full : 0) + (h->data && (!tied || m->tp_rank) ? h->nbytes : 0);
    } else if (lo == 0) sum += other;
    free(b);
    char part[64] = "";
    if (m->tp_size > 1) snprintf(part, sizeof part, ", tensor part %d/%d", m->tp_rank + 1, m->tp_size);
    fprintf(stderr, "%srank %d/%d on %s: layers %d-%d%s (%.0f MiB of weights)\n", D.who, D.rank, D.size, D.host, lo, hi - 1, part,
            (double)sum / (1 << 20));
}

/* ---- the tensor split ---- */
/* Part r of K of total values cut in whole units (unit 0: runs of 32 rows, whole packed groups, where the
 * width allows): [*lo, *hi). */
static void tp_range(int total, int unit, int r, int K, int *lo, int *hi) {
    if (!unit) unit = total % 32 == 0 && total / 32 >= K ? 32 : 1;
    int units = total / unit;
    *lo = (int)((int64_t)units * r / K) * unit;
    *hi = r + 1 == K ? total : (int)((int64_t)units * (r + 1) / K) * unit;
}

/* A bias vector's values [lo, hi), when there is one (F32, as the binders check). */
static void cut_vector(ht_tensor *t, int lo, int hi) {
    if (!t->data) return;
    t->data = (const float *)t->data + lo;
    t->ne[0] = hi - lo;
    t->row_bytes = t->nbytes = (size_t)(hi - lo) * sizeof(float);
}

static void cut_rows(ht_tensor *t, int lo, int hi) {
    if (t->data) *t = ht_rows(t, lo, hi - lo);
}

/* Rows [lo, hi) of every expert of a stack: the experts' parts lie apart, so the view lists them (slabs). */
static int cut_stack(hearth_model *m, ht_tensor *t, int lo, int hi, hearth_err *err) {
    const void **sl = calloc((size_t)t->ne[2], sizeof *sl);
    if (!sl || model_own(m, (void *)sl, err)) return herr(err, "out of memory");
    for (int e = 0; e < t->ne[2]; e++) sl[e] = ht_row(t, (int64_t)e * t->ne[1] + lo);
    t->slabs = sl;
    t->ne[1] = hi - lo;
    t->nbytes = (size_t)t->ne[2] * (size_t)(hi - lo) * t->row_bytes;
    return 0;
}

/* Makes m this rank's part r of K of every layer (see the top of this file). */
static int tp_split(hearth_model *m, int r, int K, hearth_err *err) {
    ht_hparams *hp = &m->hp;
    const char *a = m->arch->name;
    if (strcmp(a, "llama") && strcmp(a, "qwen3") && strcmp(a, "qwen3moe") && strcmp(a, "gemma3"))
        return herr(err, "--tp: the %s architecture cannot be split over ranks yet (llama, qwen3, qwen3moe, gemma3 can)", a);
    if (hp->n_head_kv < K)   /* (a count that does not divide gives some ranks one kv head more) */
        return herr(err, "--tp %d: the model has %d kv heads, and each rank needs at least one: --tp %d at most", K,
                    hp->n_head_kv, hp->n_head_kv);
    if (hp->n_embd < K) return herr(err, "--tp %d: the model's layers are too narrow for %d parts", K, K);
    const int E = hp->n_embd, F = hp->n_ff, FX = hp->n_ff_exp, group = hp->n_head / hp->n_head_kv, hd = hp->head_dim,
              hdv = hp->head_dim_v;
    int kv_lo, kv_hi, e_lo, e_hi, f_lo, f_hi, x_lo = 0, x_hi = 0;
    tp_range(hp->n_head_kv, 1, r, K, &kv_lo, &kv_hi);
    tp_range(E, 0, r, K, &e_lo, &e_hi);
    tp_range(F, 0, r, K, &f_lo, &f_hi);
    if (hp->n_expert) tp_range(FX, 0, r, K, &x_lo, &x_hi);
    for (int il = 0; il < hp->n_layer; il++) {
        const ht_layer *L = &m->layers[il];
        bool moe = L->ffn_gate_inp.data, ok = !L->wqkv.data && L->wq.data;
        if (moe)   /* (expert biases and shared experts are other architectures') */
            ok = ok && FX >= K && L->ffn_gate_exps.ne[1] == FX && L->ffn_up_exps.ne[1] == FX && L->ffn_down_exps.ne[1] == E &&
                 !L->ffn_gate_exps_b.data && !L->ffn_up_exps_b.data && !L->ffn_down_exps_b.data && !L->ffn_gate_shexp.data;
        else ok = ok && F >= K && L->ffn_gate.data && L->ffn_down.ne[1] == E && L->ffn_up.ne[1] == F;
        if (!ok) return herr(err, "--tp: layer %d of this model does not have the shape the split needs", il);
    }
    for (int il = 0; il < hp->n_layer; il++) {
        ht_layer *L = &m->layers[il];
        L->n_head_kv = kv_hi - kv_lo;   /* the layer's own count (the cache and attention read it) */
        cut_rows(&L->wq, kv_lo * group * hd, kv_hi * group * hd);
        cut_vector(&L->bq, kv_lo * group * hd, kv_hi * group * hd);
        cut_rows(&L->wk, kv_lo * hd, kv_hi * hd);
        cut_vector(&L->bk, kv_lo * hd, kv_hi * hd);
        cut_rows(&L->wv, kv_lo * hdv, kv_hi * hdv);
        cut_vector(&L->bv, kv_lo * hdv, kv_hi * hdv);
        cut_rows(&L->wo, e_lo, e_hi);
        cut_vector(&L->bo, e_lo, e_hi);
        cut_rows(&L->ffn_gate, f_lo, f_hi);
        cut_rows(&L->ffn_up, f_lo, f_hi);
        cut_rows(&L->ffn_down, e_lo, e_hi);
        cut_vector(&L->ffn_down_b, e_lo, e_hi);
        /* experts: each rank the same share of every expert's rows (balanced whatever the router picks) */
        if (L->ffn_gate_inp.data && (cut_stack(m, &L->ffn_gate_exps, x_lo, x_hi, err) ||
                                     cut_stack(m, &L->ffn_up_exps, x_lo, x_hi, err) ||
                                     cut_stack(m, &L->ffn_down_exps, e_lo, e_hi, err)))
            return -1;
    }
    /* the output head (the token embedding when tied: its rows stay whole for the lookups) by vocabulary rows */
    const ht_tensor *head = m->output.data ? &m->output : hp->logits ? &m->tok_embd : NULL;
    if (head) {
        int v_lo, v_hi;
        tp_range(hp->n_vocab, 0, r, K, &v_lo, &v_hi);
        m->output = ht_rows(head, v_lo, v_hi - v_lo);
        cut_vector(&m->output_b, v_lo, v_hi);
    }
    m->tp_n_head = hp->n_head;
    m->tp_n_head_kv = hp->n_head_kv;
    hp->n_head = (kv_hi - kv_lo) * group;
    hp->n_head_kv = kv_hi - kv_lo;
    m->tp_rank = r;
    m->tp_size = K;
    return 0;
}

static float *head_room(int rows, int V) {
    if (rows * V > D.head_cap) {
        float *p = realloc(D.head_buf, (size_t)rows * V * sizeof *p);
        if (!p) { fprintf(stderr, "error: rank %d: out of memory\n", D.rank); MPI_Abort(D.comm, 1); }
        D.head_buf = p;
        D.head_cap = rows * V;
    }
    return D.head_buf;
}

void dist_tp_head(hearth_ctx *c, const ht_tensor *W, const ht_tensor *b, const float *x, int n, float *out) {
    const int K = D.tp, V = c->m->hp.n_vocab, E = c->m->hp.n_embd, rows = HT_MIN(HEAD_ROWS, c->n_batch);
    float *buf = head_room(rows, V);
    int lo[65], hi;
    for (int q = 0; q < K; q++) tp_range(V, 0, q, K, &lo[q], &hi);
    lo[K] = V;
    MPI_Request rq[64];
    for (int i0 = 0; i0 < n; i0 += rows) {
        const int k = HT_MIN(rows, n - i0);
        int32_t mt[3] = { CMD_HEAD, c->dist_id, k };
        pass_on(mt, 3, MPI_INT32_T, TAG_META, false, "take rows for the head");
        pass_on(x + (size_t)i0 * E, k * E, MPI_FLOAT, TAG_X, false, "take rows for the head");
        for (int q = 1; q < K; q++)
            MPI_Irecv(buf + (size_t)k * lo[q], k * (lo[q + 1] - lo[q]), MPI_FLOAT, q, TAG_HEAD, D.tp_comm, &rq[q - 1]);
        matmul_bias(c, W, b, x + (size_t)i0 * E, k, buf);
        wait_all(K - 1, rq, 1, "send its part of the output head");
        for (int q = 0; q < K; q++) {
            const int w = lo[q + 1] - lo[q];
            for (int t = 0; t < k; t++)
                memcpy(out + (size_t)(i0 + t) * V + lo[q], buf + (size_t)k * lo[q] + (size_t)t * w, (size_t)w * sizeof(float));
        }
    }
}

/* A rank of rank 0's group: its share of the head for the rows rank 0 sends (dist_tp_head). */
static void worker_head(const int32_t *mt) {
    hearth_ctx *c = mt[1] >= 0 && mt[1] < MAX_CTX ? D.ctxs[mt[1]] : NULL;
    const int k = mt[2];
    if (!c || k <= 0 || k > c->n_batch || !c->m->output.data) {
        fprintf(stderr, "error: rank %d: rows for a head it does not hold\n", D.rank);
        MPI_Abort(D.comm, 1);
    }
    const ht_tensor *W = &c->m->output;
    MPI_Recv(c->x, k * c->m->hp.n_embd, MPI_FLOAT, 0, TAG_X, D.comm, MPI_STATUS_IGNORE);
    float *buf = head_room(k, (int)W->ne[1]);
    matmul_bias(c, W, &c->m->output_b, c->x, k, buf);
    MPI_Send(buf, k * (int)W->ne[1], MPI_FLOAT, 0, TAG_HEAD, D.tp_comm);
}

void dist_tp_gather(hearth_ctx *c, const float *part, int n, int total, int unit, float *out) {
    const int K = D.tp, me = D.rank % K;
    MPI_Request rq[2 * 64];
    int lo[65], hi, nr = 0;
    for (int q = 0; q < K; q++) tp_range(total, unit, q, K, &lo[q], &hi);
    lo[K] = total;
    const int mine = lo[me + 1] - lo[me];
    for (int q = 0; q < K; q++) {
        if (q == me) continue;
        MPI_Irecv(c->tp_gather + (size_t)n * lo[q], n * (lo[q + 1] - lo[q]), MPI_FLOAT, q, TAG_TP, D.tp_comm, &rq[nr++]);
        MPI_Isend(part, n * mine, MPI_FLOAT, q, TAG_TP, D.tp_comm, &rq[nr++]);
    }
    wait_all(nr, rq, me ? D.rank - me : D.rank + 1, "send its part of a layer");
    for (int q = 0; q < K; q++) {
        const int w = lo[q + 1] - lo[q];
        const float *src = q == me ? part : c->tp_gather + (size_t)n * lo[q];
        for (int t = 0; t < n; t++) memcpy(out + (size_t)t * total + lo[q], src + (size_t)t * w, (size_t)w * sizeof(float));
    }
}

int dist_plan(hearth_model *m, hearth_err *err) {
    if (!D.on || D.rank != 0 || m->layer_hi < m->hp.n_layer || m->tp_size > 1) return 0;   /* planned already */
    for (int i = 0; i < MAX_CTX; i++)
        if (D.ctxs[i] && D.ctxs[i]->m != m)
            return herr(err, "under MPI the contexts open at once must share one model");
    int n_layer = m->hp.n_layer;
    if (m->hp.n_altup && D.stages > 1)
        return herr(err, "%d pipeline stages: %s's %d residual streams a token do not pass between ranks yet (run it in one "
                    "process, or as --dp replicas)", D.stages, m->arch->name, m->hp.n_altup);
    if (n_layer < D.stages)
        return herr(err, "%d %s for a model of %d layers: each %s needs at least one layer", D.stages,
                    D.tp > 1 ? "pipeline stages" : "ranks", n_layer, D.tp > 1 ? "stage" : "rank");
    int *bounds = calloc((size_t)D.stages + 1, sizeof *bounds);
    uint64_t other, *b = layer_bytes(m, &other);
    if (!bounds || !b) { free(bounds); free(b); return herr(err, "out of memory"); }
    if (D.split) {
        int sum = 0;
        for (int r = 0; r < D.n_split; r++) { bounds[r] = sum; sum += D.split[r]; }
        bounds[D.stages] = sum;
        if (D.n_split != D.stages || sum != n_layer) {
            free(bounds);
            free(b);
            return herr(err, "--split gives %d %s %d layers; this job has %d %s and the model %d layers", D.n_split,
                        D.tp > 1 ? "stages" : "ranks", sum, D.stages, D.tp > 1 ? "stages" : "ranks", n_layer);
        }
    } else plan_by_bytes(b, n_layer, bounds);
    free(b);
    if (D.tp > 1 && tp_split(m, 0, D.tp, err)) { free(bounds); return -1; }
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
    int plen = (int)strlen(path), n = CTX_NEW_FIXED + D.stages + 1 + 1 + (plen + 4) / 4;
    int32_t *mt = meta_room(n);
    int32_t fixed[CTX_NEW_FIXED] = { CMD_CTX_NEW, id, c->n_ctx, c->n_seq, c->n_batch, c->n_threads, (int32_t)c->k_type,
                                         (int32_t)c->v_type };
    memcpy(mt, fixed, sizeof fixed);
    memcpy(mt + CTX_NEW_FIXED, D.bounds, (size_t)(D.stages + 1) * sizeof *mt);
    mt[CTX_NEW_FIXED + D.stages + 1] = plen;
    memset(mt + CTX_NEW_FIXED + D.stages + 2, 0, (size_t)(plen + 4) / 4 * 4);
    memcpy(mt + CTX_NEW_FIXED + D.stages + 2, path, (size_t)plen);
    pass_on(mt, n, MPI_INT32_T, TAG_META, true, "take a new context");
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
    if (bad >= 0) return herr(err, "%srank %d/%d: %.*s", D.who, bad, D.size, (int)sizeof first.msg - 1, first.msg);
    return 0;
}

void dist_ctx_close(hearth_ctx *c) {
    if (c->dist_id < 0) return;
    hearth_err ignored;
    dist_ctx_ready(c, &ignored);   /* a context that failed on this rank: the others' answers are still due */
    int32_t mt[2] = { CMD_CTX_FREE, c->dist_id };
    pass_on(mt, 2, MPI_INT32_T, TAG_META, true, "close a context");
    D.ctxs[c->dist_id] = NULL;
    c->dist_id = -1;
}

void dist_truncate(hearth_ctx *c, int seq, int pos) {
    if (c->dist_id < 0) return;
    int32_t mt[4] = { CMD_TRUNCATE, c->dist_id, seq, pos };
    pass_on(mt, 4, MPI_INT32_T, TAG_META, true, "take a cache cut");
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
    if (!c->m->hp.causal || D.stages == 1) return HT_MIN(c->n_batch, n);
    int mb = (n + 4 * D.stages - 1) / (4 * D.stages);
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
        if (D.tp > 1) {   /* the group's other ranks run the stage's layers with this one */
            pass_on(decode_meta(&ub, c->dist_id), 3 + 3 * ub.n, MPI_INT32_T, TAG_META, false, "take a micro-batch");
            pass_on(c->x, ub.n * E, MPI_FLOAT, TAG_X, false, "take a micro-batch");
        }
        ctx_layers(c, &ub);
        if (D.stages == 1) {   /* one stage: the rows are here */
            for (int i = 0; i < ub.n; i++)
                if (ub.want[i]) memcpy(c->dist_rows + (size_t)o++ * E, c->x + (size_t)i * E, (size_t)E * sizeof(float));
            continue;
        }
        int nw = 0;
        for (int i = 0; i < ub.n; i++) nw += ub.want[i] != 0;
        if (nw) MPI_Irecv(c->dist_rows + (size_t)o * E, nw * E, MPI_FLOAT, last_leader(), TAG_ROWS, D.comm, &D.reqs[n_req++]);
        o += nw;
        send_to(decode_meta(&ub, c->dist_id), 3 + 3 * ub.n, MPI_INT32_T, D.tp, TAG_META, "take a micro-batch");
        send_to(c->x, ub.n * E, MPI_FLOAT, D.tp, TAG_X, "take a micro-batch");
    }
    for (int k = 0; k < n_req; k++) wait_for(&D.reqs[k], last_leader(), "send its output rows");

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
    for (int flag = 0; !flag; pause_briefly(t0)) MPI_Iprobe(prev_rank(), TAG_META, D.comm, &flag, &s);
    int n;
    MPI_Get_count(&s, MPI_INT32_T, &n);
    MPI_Recv(meta_room(HT_MAX(n, 1)), n, MPI_INT32_T, prev_rank(), TAG_META, D.comm, MPI_STATUS_IGNORE);
    return n;
}

static void report(int ok, const hearth_err *err) {
    status_msg st = { ok, "" };
    if (!ok) snprintf(st.msg, sizeof st.msg, "%s", err->msg);
    MPI_Send(&st, sizeof st, MPI_BYTE, 0, TAG_STATUS, D.comm);
}

static void worker_ctx_new(const int32_t *mt, int n) {
    hearth_err err = { "" };
    const int at = CTX_NEW_FIXED + D.stages + 2;   /* where the path's bytes start */
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
        const int st = D.rank / D.tp;
        D.model->layer_lo = bounds[st];
        D.model->layer_hi = bounds[st + 1];
        bool bad = D.model->layer_lo < 0 || D.model->layer_hi > D.model->hp.n_layer || D.model->layer_lo >= D.model->layer_hi;
        if (bad) herr(&err, "%s on %s: the plan's layers %d-%d are not this model's", path, D.host, bounds[st], bounds[st + 1] - 1);
        else if (D.tp > 1 && tp_split(D.model, D.rank % D.tp, D.tp, &err)) {
            char msg[sizeof err.msg];
            snprintf(msg, sizeof msg, "%s", err.msg);
            herr(&err, "%s on %s: %s", path, D.host, msg);
            bad = true;
        }
        if (bad) {
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
    MPI_Recv(c->x, n * E, MPI_FLOAT, prev_rank(), TAG_X, D.comm, MPI_STATUS_IGNORE);
    pass_on(mt, 3 + 3 * n, MPI_INT32_T, TAG_META, false, "take a micro-batch");   /* a leader's group */
    pass_on(c->x, n * E, MPI_FLOAT, TAG_X, false, "take a micro-batch");
    for (int i = 0; i < n; i++) c->b_want[i] = (int8_t)mt[3 + 2 * n + i];
    ht_ubatch ub = { .n = n, .pos = mt + 3, .seq = mt + 3 + n, .want = c->b_want };
    ctx_layers(c, &ub);
    if (!is_leader()) return;
    if (D.rank + D.tp < D.size) {
        MPI_Send(mt, 3 + 3 * n, MPI_INT32_T, D.rank + D.tp, TAG_META, D.comm);
        MPI_Send(c->x, n * E, MPI_FLOAT, D.rank + D.tp, TAG_X, D.comm);
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
        if (cmd != CMD_DECODE && cmd != CMD_HEAD) pass_on(mt, n, MPI_INT32_T, TAG_META, true, "take a command");
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
        case CMD_HEAD:
            if (n == 3 && D.rank < D.tp) { worker_head(mt); break; }
            /* fall through */
        case CMD_DECODE:
            if (cmd == CMD_DECODE && n >= 3 && n == 3 + 3 * mt[2]) { worker_decode(mt); break; }
            /* fall through */
        default:
            fprintf(stderr, "error: rank %d: a message it cannot read from rank %d\n", D.rank, prev_rank());
            MPI_Abort(D.comm, 1);
        }
    }
}

static void finish(void) {
    if (D.rank == 0) {
        int32_t mt[2] = { CMD_QUIT, -1 };
        pass_on(mt, 2, MPI_INT32_T, TAG_META, true, "end");
    }
    MPI_Finalize();
}

/* A job that cannot run, seen alike by every rank: world rank 0 says why (its caller fails the job), the others
 * leave quietly (a rank failing first could end the job unsaid). */
static int refuse(int wrank, int code) {
    MPI_Finalize();
    if (wrank) exit(code);
    return -1;
}

int hearth_mpi_init(int *argc, char ***argv, hearth_model_loader load, hearth_err *err) {
    if (parse_split(argc, argv, &D.split, &D.n_split, err) || parse_tp(argc, argv, &D.tp, err) ||
        parse_dp(argc, argv, &D.dp, err))
        return -1;
    /* only a process mpirun started joins a job: MPI_Init alone would make a job of one, slowly */
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_SIZE") && !getenv("PMIX_RANK")) {
        if (D.dp > 1 && (D.split || D.tp > 1))
            return herr(err, "--dp %d: start hearth with mpirun -np %dN (N ranks per replica)", D.dp, D.dp);
        if (D.dp > 1) return herr(err, "--dp %d: start hearth with mpirun -np %d (one rank per replica)", D.dp, D.dp);
        if (D.split) return herr(err, "--split: start hearth with mpirun -np N (one rank per range of layers)");
        if (D.tp > 1) return herr(err, "--tp: start hearth with mpirun -np N (N a multiple of --tp)");
        return 0;
    }
    if (D.tp < 1) D.tp = 1;
    /* --dp with replicas of several ranks: a replica's leader makes MPI calls from two threads at once (srv_dp.c's
     * on the leaders' communicator, its engine's on the replica's), which only MPI_THREAD_MULTIPLE allows */
    int provided, wrank, wsize;
    if (MPI_Init_thread(argc, argv, D.dp > 1 ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return herr(err, "MPI failed to start");
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    if (provided < MPI_THREAD_SERIALIZED) {
        if (!wrank) herr(err, "this MPI library cannot be called from more than one thread");
        return refuse(wrank, 1);
    }
    if (D.dp > 1) {   /* data parallel: R blocks of N consecutive ranks, each a replica (srv_dp.c joins their leaders) */
        const int N = wsize / D.dp;
        if (wsize % D.dp) {
            if (!wrank) herr(err, "--dp %d: the job has %d ranks, not a multiple of %d (mpirun -np %dN: N ranks per replica)", D.dp,
                             wsize, D.dp, D.dp);
            return refuse(wrank, 0);
        }
        if (N % D.tp) {
            if (!wrank) herr(err, "--dp %d --tp %d: each replica has %d rank%s (%d / %d), not a multiple of %d", D.dp, D.tp, N,
                             N == 1 ? "" : "s", wsize, D.dp, D.tp);
            return refuse(wrank, 0);
        }
        if (N == 1 && D.split) {
            if (!wrank) herr(err, "--dp %d --split: each replica has one rank (%d / %d); start it with mpirun -np %d (the ranges' count times %d)",
                             D.dp, wsize, D.dp, D.dp * D.n_split, D.dp);
            return refuse(wrank, 0);
        }
        if (N > 1 && provided < MPI_THREAD_MULTIPLE) {
            if (!wrank) herr(err, "--dp %d with %d ranks per replica: this MPI library cannot be called from two threads at once (MPI_THREAD_MULTIPLE)",
                             D.dp, N);
            return refuse(wrank, 1);
        }
        D.dp_rank = wrank / N;
        MPI_Comm_split(MPI_COMM_WORLD, wrank % N ? MPI_UNDEFINED : 0, wrank, &D.dp_comm);   /* the leaders, by replica */
        if (N == 1) {   /* whole models: every rank runs the command on its own; the hooks stay off */
            atexit(dp_finish);
            return 0;
        }
        MPI_Comm_split(MPI_COMM_WORLD, D.dp_rank, wrank, &D.comm);   /* the replica's ranks: a job of their own */
        snprintf(D.who, sizeof D.who, "replica %d: ", D.dp_rank);
    } else MPI_Comm_dup(MPI_COMM_WORLD, &D.comm);
    MPI_Comm_rank(D.comm, &D.rank);
    MPI_Comm_size(D.comm, &D.size);
    if (D.size < 2) {
        MPI_Finalize();
        if (D.tp > 1) return herr(err, "--tp %d: this job has one rank; start it with mpirun -np %d", D.tp, D.tp);
        return D.split ? herr(err, "--split: this job has one rank; start it with mpirun -np N") : 0;
    }
    D.stages = D.size / D.tp;
    if (D.size % D.tp) {
        if (!wrank) herr(err, "--tp %d: the job's %d ranks are not a multiple of %d", D.tp, D.size, D.tp);
        return refuse(wrank, 0);
    }
    if (D.split && D.n_split != D.stages) {
        if (!wrank) herr(err, "--split gives %d ranges of layers for %d %s%s", D.n_split, D.stages, D.tp > 1 ? "stages" : "ranks",
                         D.dp > 1 ? " per replica" : "");
        return refuse(wrank, 1);
    }
    D.on = true;
    MPI_Comm_split(D.comm, D.rank / D.tp, D.rank, &D.tp_comm);
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
    free(D.head_buf);
    MPI_Finalize();
    exit(0);
}
#endif
