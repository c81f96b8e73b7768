/* matmul.c — quantized matrix × activation-batch products over the thread pool.
 *
 * Two steps per product: (1) the activation rows are prepared once in the weights' format (the pack's, or the
 * traits' vec_dot format) into the context's scratch, on the pool unless they are few (decode); (2) output rows
 * are cut into chunks that threads claim one at a time from a shared counter (a thread slowed by other load on
 * the machine then holds up only the chunk it is on, not a fixed share of the matrix). Inside a chunk the loop
 * runs token-outer, row-inner, so a chunk of weights stays in cache while every token of the batch passes over
 * it; each group of tokens meets the chunk's rows in one tile call, which computes every output exactly as a
 * single-token call would (quant.h), so the result does not depend on the batch size, the tiling or the thread
 * count. Where the type has a batch product (ht_gemm: the i-quants' panel GEMM) a prefill batch goes to it whole
 * instead, each weight block decoded once for all its tokens (bit-identical too). Matrices that share an input
 * and a format (q, k, v) are one job; so are a gated FFN's gate and up with their activation (matmul_glu), and
 * all the chosen experts of a mixture-of-experts layer (matmul_experts), whose items are (expert, chunk) pairs. */
#include "model/matmul.h"

#include <stdatomic.h>

/* Rows per chunk: about MM_CHUNK_BYTES of weights. In prefill they stay in L2 while every token of the batch
 * passes over them: the activations then stream from L3 once per chunk, so the bigger the chunk the less
 * activation traffic per weight byte (float activations of F16 weights are 4 bytes an element). In decode a
 * long contiguous run keeps the weight stream fast: with chunks of 16 rows (18 KB of Q4_0), the claims, the
 * per-call setup and the prefetches running past each chunk's end held Q4_0 1B decode to 37 t/s against 50+
 * at 128-512 rows. Chunks stay at least MM_MIN_CHUNKS per thread for balance, and at least MM_CHUNK_ROWS. */
#define MM_CHUNK_ROWS 16
#define MM_CHUNK_BYTES (384 * 1024)
#define MM_MAX_CHUNK_ROWS 256
#define MM_MIN_CHUNKS 4
/* Packs with a decode entry (one token, several groups' chains in flight) get whole fours of groups a chunk in
 * decode, however big the group (F16 x16 rows of 8192: 256 KiB). */
#define MM_DECODE_GROUPS 4
/* Activations of at most this many elements are prepared by the calling thread: in decode a pool job for a
 * row or eight (a few microseconds of work) costs about what it saves. */
#define MM_SERIAL_PREP 32768

#define MM_MAX_MATS 4

/* One job: up to MM_MAX_MATS matrices of one activation format times the same n_tok input rows. Items are
 * (matrix, chunk of rows), claimed one at a time. */
typedef struct {
    const ht_tensor *W[MM_MAX_MATS];
    float *y[MM_MAX_MATS];
    int n_mat;
    const ht_traits *tr;
    bool pk;                /* through the matrices' pack (use_pack) */
    const float *x;
    int n_tok;
    const uint8_t *qa;      /* prepared activations (or x itself when the kernels take floats) */
    size_t qa_row;          /* bytes per prepared activation row */
    uint8_t *qa_w;
    int chunk_rows[MM_MAX_MATS];   /* each a multiple of the kernel's rows per call */
    int chunk0[MM_MAX_MATS + 1];   /* first item of each matrix */
    ht_product_fuse fuse;   /* the product hook's work in this job (its pre items come before the chunks) */
    void (*glu)(float *g, const float *u, int n);   /* matmul_glu: an item is a chunk of both matrices, then this */
    atomic_int next_chunk;  /* the next item no thread has claimed */
    atomic_int pre_done;    /* fuse's pre items finished */
} mm_job;

size_t matmul_act_row_bytes(int64_t n) { return (size_t)n / QK_K * sizeof(block_q8_K) + sizeof(block_q8_K) + (size_t)n * 2 + 64; }

/* Whether a batch of n_tok tokens goes through W's pack tiles (pk below): always where it has a pack, but
 * batches of more tokens than a tile takes where the pack has its own gemm (ht_pack.gemm, with the vec_dot
 * format's activations: the grid i-quants' panel decodes each weight once, where every 4-token tile pass
 * gathers the grid again; pp5 and pp7 of the 1B IQ3_S file 1.19-1.21x the tiles', pp4 0.73x). */
static bool use_pack(const ht_tensor *W, int n_tok) {
    return W->packed && !(W->pack->gemm && n_tok > W->pack->max_nc);
}

/* The kernels of W take the activations as floats: packed float weights, or a vec_dot over F32 rows. */
static bool act_is_float(const ht_tensor *W, const ht_traits *tr, bool pk) {
    return pk ? !W->pack->act_prep : tr->vec_dot_type == HT_F32;
}

static size_t act_bytes(const ht_tensor *W, const ht_traits *tr, bool pk) {
    if (act_is_float(W, tr, pk)) return (size_t)W->ne[0] * sizeof(float);
    return pk ? W->pack->act_bytes(W->ne[0]) : ht_row_size((uint32_t)tr->vec_dot_type, W->ne[0]);
}

/* One activation row prepared for W's kernels: its pack's format, its vec_dot format, or a float copy. */
static void act_prep(const ht_tensor *W, const ht_traits *tr, bool pk, const float *x, uint8_t *dst) {
    if (act_is_float(W, tr, pk)) memcpy(dst, x, (size_t)W->ne[0] * sizeof(float));
    else if (pk) W->pack->act_prep(x, dst, W->ne[0]);
    else ht_quantize_row((uint32_t)tr->vec_dot_type, x, dst, W->ne[0]);
}

/* Rows [r0, r1) of the matrix W (r0 a multiple of the kernel's rows per call) times n_tok prepared
 * activation rows (a, stride as) into y[t * ys + r]: token groups outer, so the rows stay in cache. After each
 * token group, fuse's post (when given) on its outputs, still in L1, as matrix m of the job. */
static void mm_rows(const ht_tensor *W, const ht_traits *tr, bool pk, int r0, int r1, const uint8_t *a, size_t as, int n_tok,
                    float *y, size_t ys, const ht_product_fuse *fuse, int m) {
    const int n = (int)W->ne[0], rows = (int)W->ne[1];
    if (pk) {
        const ht_pack *P = W->pack;
        const int R = P->rows;
        const size_t gb = P->group_bytes(n);
        if (n_tok == 1 && P->decode) {   /* one token: the chunk's groups in one call */
            P->decode(n, W->packed + (size_t)(r0 / R) * gb, (r1 - r0 + R - 1) / R, r1 - (r1 - r0 - 1) / R * R - r0, a, y + r0);
            if (fuse) fuse->post(fuse->arg, m, r0, r1, 0, 1);
            return;
        }
        if (P->tiles && n_tok <= (P->tiles_max_nc ? P->tiles_max_nc : P->max_nc)) {   /* a small batch: the chunk's groups in one call */
            P->tiles(n, W->packed + (size_t)(r0 / R) * gb, (r1 - r0 + R - 1) / R, r1 - (r1 - r0 - 1) / R * R - r0, a, as,
                     n_tok, y + r0, ys);
            if (fuse) fuse->post(fuse->arg, m, r0, r1, 0, n_tok);
            return;
        }
        for (int t = 0; t < n_tok; t += P->max_nc) {
            const int nc = HT_MIN(P->max_nc, n_tok - t);
            /* the first token tile brings the chunk's weights in; the next ones find them in L2 */
            void (*const tile)(int, const uint8_t *, int, const uint8_t *, size_t, int, float *, size_t) =
                t > 0 && P->tile_cached ? P->tile_cached : P->tile;
            for (int g0 = r0; g0 < r1; g0 += R)
                tile(n, W->packed + (size_t)(g0 / R) * gb, HT_MIN(R, rows - g0), a + (size_t)t * as, as, nc,
                     y + (size_t)t * ys + g0, ys);
            if (fuse) fuse->post(fuse->arg, m, r0, r1, t, t + nc);
        }
        return;
    }
    if (W->packed || (tr->gemm && n_tok >= tr->gemm->min_nc)) {   /* each weight block decoded once for the batch */
        if (W->packed) {   /* the pack's gemm (use_pack), group by group (chunks are whole groups) */
            const ht_pack *P = W->pack;
            for (int g0 = r0; g0 < r1; g0 += P->rows)
                P->gemm(n, W->packed + (size_t)(g0 / P->rows) * P->group_bytes(n), HT_MIN(P->rows, r1 - g0), a, as,
                        n_tok, y + g0, ys);
        } else tr->gemm->run(n, (const uint8_t *)W->data + (size_t)r0 * W->row_bytes, W->row_bytes, r1 - r0, a, as, n_tok, y + r0, ys);
        if (fuse) fuse->post(fuse->arg, m, r0, r1, 0, n_tok);
        return;
    }
    for (int t = 0; t < n_tok; t += HT_TILE_MAX) {
        const int nc = HT_MIN(HT_TILE_MAX, n_tok - t);
        ht_vec_dot_tile(tr, n, (const uint8_t *)W->data + (size_t)r0 * W->row_bytes, W->row_bytes, r1 - r0,
                        a + (size_t)t * as, as, nc, y + (size_t)t * ys + r0, ys);
        if (fuse) fuse->post(fuse->arg, m, r0, r1, t, t + nc);
    }
}

/* Rows per chunk of W: about MM_CHUNK_BYTES, at most MM_MAX_CHUNK_ROWS, and small enough that the
 * balance_rows of the whole job make MM_MIN_CHUNKS per thread; whole packed groups, whole panels of the
 * type's gemm when a batch of n_tok takes it, or whole tiles. */
static int chunk_rows(const ht_tensor *W, const ht_traits *tr, bool pk, int n_tok, int64_t balance_rows, int nth) {
    const bool gemm = !W->packed && tr->gemm && n_tok >= tr->gemm->min_nc;
    const int unit = W->packed ? W->pack->rows : gemm ? HT_MAX(tr->gemm->rows, HT_TILE_MAX) : HT_TILE_MAX;
    const size_t unit_bytes = W->packed ? W->pack->group_bytes(W->ne[0]) : W->row_bytes * (size_t)unit;
    int64_t units = (int64_t)(MM_CHUNK_BYTES / (unit_bytes ? unit_bytes : 1));
    units = HT_MIN(units, MM_MAX_CHUNK_ROWS / unit);
    if (pk && W->pack->decode && n_tok == 1) units = HT_MAX(units, MM_DECODE_GROUPS) / MM_DECODE_GROUPS * MM_DECODE_GROUPS;
    units = HT_MIN(units, balance_rows / unit / (MM_MIN_CHUNKS * HT_MAX(nth, 1)));
    return (int)HT_MAX(units, W->packed || gemm ? 1 : MM_CHUNK_ROWS / HT_TILE_MAX) * unit;
}

static void prep_job(void *arg, int ith, int nth) {
    mm_job *j = arg;
    int64_t n = j->W[0]->ne[0];
    for (int t = ith; t < j->n_tok; t += nth) act_prep(j->W[0], j->tr, j->pk, j->x + (size_t)t * n, j->qa_w + (size_t)t * j->qa_row);
}

/* Items: the fused pre items, then the chunks (a chunk with a post waits for the pre items, all claimed by then). */
static void dot_job(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    mm_job *j = arg;
    const int n_pre = j->fuse.n_pre;
    for (int i, m = 0; (i = atomic_fetch_add_explicit(&j->next_chunk, 1, memory_order_relaxed)) < n_pre + j->chunk0[j->n_mat];) {
        if (i < n_pre) {
            j->fuse.pre(j->fuse.arg, i);
            atomic_fetch_add_explicit(&j->pre_done, 1, memory_order_release);
            continue;
        }
        i -= n_pre;
        if (j->glu) {   /* the same rows of both matrices, then y[0] = glu(y[0], y[1]) on them */
            const int rows = (int)j->W[0]->ne[1], r0 = i * j->chunk_rows[0], r1 = HT_MIN(rows, r0 + j->chunk_rows[0]);
            for (int k = 0; k < 2; k++) mm_rows(j->W[k], j->tr, j->pk, r0, r1, j->qa, j->qa_row, j->n_tok, j->y[k], (size_t)rows, NULL, k);
            for (int t = 0; t < j->n_tok; t++) j->glu(j->y[0] + (size_t)t * rows + r0, j->y[1] + (size_t)t * rows + r0, r1 - r0);
            continue;
        }
        while (i >= j->chunk0[m + 1]) m++;   /* items are claimed in increasing order */
        const int rows = (int)j->W[m]->ne[1], r0 = (i - j->chunk0[m]) * j->chunk_rows[m], r1 = HT_MIN(rows, r0 + j->chunk_rows[m]);
        if (j->fuse.post) pool_wait_count(&j->pre_done, n_pre);
        mm_rows(j->W[m], j->tr, j->pk, r0, r1, j->qa, j->qa_row, j->n_tok, j->y[m], (size_t)rows, j->fuse.post ? &j->fuse : NULL, m);
    }
}

/* y[m] = W[m] x for matrices that take the same activation format (same type, pack and width); with glu (two
 * matrices of one shape), y[0] = glu(y[0], y[1]) too, chunk by chunk. */
static void matmul_same(hearth_ctx *c, const ht_tensor *const *W, float *const *y, int n_mat, const float *x, int n_tok,
                        void (*glu)(float *, const float *, int)) {
    if (c->input_hook)
        for (int m = 0; m < n_mat; m++) c->input_hook(c->input_hook_user, W[m], -1, x, NULL, n_tok, NULL);
    mm_job j = { .n_mat = n_mat, .tr = ht_get_traits(W[0]->type), .x = x, .n_tok = n_tok, .glu = glu };
    int64_t all_rows = 0;
    for (int m = 0; m < n_mat; m++) {
        j.W[m] = W[m];
        j.y[m] = y[m];
        all_rows += W[m]->ne[1];
    }
    j.pk = use_pack(W[0], n_tok);
    j.qa_row = act_bytes(W[0], j.tr, j.pk);
    if (act_is_float(W[0], j.tr, j.pk)) {
        j.qa = (const uint8_t *)x;
    } else {
        j.qa = j.qa_w = c->qact;
        if ((int64_t)n_tok * W[0]->ne[0] <= MM_SERIAL_PREP) prep_job(&j, 0, 1);
        else pool_run(c->pool, prep_job, &j);
    }
    for (int m = 0; m < n_mat; m++) {
        j.chunk_rows[m] = chunk_rows(W[m], j.tr, j.pk, n_tok, all_rows, pool_size(c->pool));
        j.chunk0[m + 1] = j.chunk0[m] + (int)((W[m]->ne[1] + j.chunk_rows[m] - 1) / j.chunk_rows[m]);
    }
    if (glu) j.chunk0[2] = j.chunk0[1];   /* the items are the first matrix's chunks */
    /* LoRA adapters add their terms: in this job, or after it (never with glu: matmul_glu declines then) */
    const bool fused = c->product_hook && c->product_hook(c, W, y, n_mat, x, n_tok, &j.fuse);
    atomic_init(&j.next_chunk, 0);
    atomic_init(&j.pre_done, 0);
    pool_run(c->pool, dot_job, &j);
    if (c->product_hook && !fused) c->product_hook(c, W, y, n_mat, x, n_tok, NULL);
}

void matmul(hearth_ctx *c, const ht_tensor *W, const float *x, int n_tok, float *y) { matmul_same(c, &W, &y, 1, x, n_tok, NULL); }

bool matmul_glu(hearth_ctx *c, const ht_tensor *G, const ht_tensor *U, const float *x, int n_tok, float *yg, float *yu,
                void (*glu)(float *g, const float *u, int n)) {
    if (c->product_hook || G->type != U->type || G->pack != U->pack || G->ne[0] != U->ne[0] || G->ne[1] != U->ne[1])
        return false;
    const ht_tensor *W[2] = { G, U };
    float *Y[2] = { yg, yu };
    matmul_same(c, W, Y, 2, x, n_tok, glu);
    return true;
}

void matmul_one(hearth_ctx *c, const ht_tensor *W, int e, const float *x, int n_tok, float *y) {
    const ht_tensor v = ht_expert(W, e);
    void (*hook)(void *, const ht_tensor *, int, const float *, const int *, int, const int *) = c->input_hook;
    if (hook) hook(c->input_hook_user, W, e, x, NULL, n_tok, NULL);
    c->input_hook = NULL;   /* the view is not a matrix of the file: reported above as matrix e of W */
    matmul(c, &v, x, n_tok, y);
    c->input_hook = hook;
}

void matmul_multi(hearth_ctx *c, const ht_tensor *const *W, float *const *y, int n_mat, const float *x, int n_tok) {
    for (int m0 = 0, m1; m0 < n_mat; m0 = m1) {   /* runs of matrices that share a format, one job each */
        for (m1 = m0 + 1; m1 < n_mat && m1 - m0 < MM_MAX_MATS && W[m1]->type == W[m0]->type && W[m1]->pack == W[m0]->pack &&
                          W[m1]->ne[0] == W[m0]->ne[0]; m1++) {}
        matmul_same(c, W + m0, y + m0, m1 - m0, x, n_tok, NULL);
    }
}

/* ---- expert stacks ---- */
typedef struct {
    const ht_tensor *W[2];  /* stacks sharing one activation format; W[1] may be absent */
    const float *b[2];      /* their biases, [n_expert][rows] (NULL: none) */
    float *y[2];
    int n_mat;
    const ht_traits *tr;
    const float *x;
    const int *src;         /* prepared row r reads x row src[r] (NULL: row r) */
    int n_rows;
    const int *cnt;         /* rows per expert, expert-ordered */
    const int *active;      /* the experts with rows, in order */
    int n_active;
    int *first;             /* [n_expert] first row of each expert */
    uint8_t *qa;
    size_t qa_row;
    int chunk_rows, n_chunks;   /* per expert matrix */
    void (*glu)(float *g, const float *u, int n);   /* fused: y[0] = glu(y[0], y[1]) on each item's rows */
    atomic_int next;
} mx_job;

static void mx_prep_job(void *arg, int ith, int nth) {
    mx_job *j = arg;
    int64_t n = j->W[0]->ne[0];
    for (int r = ith; r < j->n_rows; r += nth)
        act_prep(j->W[0], j->tr, j->W[0]->packed != NULL, j->x + (size_t)(j->src ? j->src[r] : r) * n, j->qa + (size_t)r * j->qa_row);
}

/* Items (active expert, chunk of rows) claimed one at a time: all the experts' products share one job. An item
 * computes its rows of every matrix (gate and up), then the fused activation on them. */
static void mx_dot_job(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    mx_job *j = arg;
    const int total = j->n_active * j->n_chunks;
    for (int i; (i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < total;) {
        const int e = j->active[i / j->n_chunks], ch = i % j->n_chunks, rows = (int)j->W[0]->ne[1];
        const int r0 = ch * j->chunk_rows, r1 = HT_MIN(rows, r0 + j->chunk_rows), n = j->cnt[e];
        const uint8_t *a = j->qa + (size_t)j->first[e] * j->qa_row;
        for (int m = 0; m < j->n_mat; m++) {
            const ht_tensor W = ht_expert(j->W[m], e);
            float *y = j->y[m] + (size_t)j->first[e] * rows;
            mm_rows(&W, j->tr, W.packed != NULL, r0, r1, a, j->qa_row, n, y, (size_t)rows, NULL, 0);
            if (j->b[m])
                for (int t = 0; t < n; t++)
                    for (int r = r0; r < r1; r++) y[(size_t)t * rows + r] += j->b[m][(size_t)e * rows + r];
        }
        if (j->glu)
            for (int t = j->first[e]; t < j->first[e] + n; t++)
                j->glu(j->y[0] + (size_t)t * rows + r0, j->y[1] + (size_t)t * rows + r0, r1 - r0);
    }
}

static void glu_pass(hearth_ctx *c, float *y, const float *y2, int n, void (*glu)(float *, const float *, int));

void matmul_experts(hearth_ctx *c, const ht_tensor *W, const ht_tensor *B, const ht_tensor *W2, const ht_tensor *B2,
                    const float *x, const int *src, int n_rows, const int *cnt, float *y, float *y2,
                    void (*glu)(float *g, const float *u, int n)) {
    if (W2 && (W2->type != W->type || W2->pack != W->pack || W2->ne[0] != W->ne[0] || W2->ne[1] != W->ne[1])) {
        /* different activation formats: one at a time */
        matmul_experts(c, W, B, NULL, NULL, x, src, n_rows, cnt, y, NULL, NULL);
        matmul_experts(c, W2, B2, NULL, NULL, x, src, n_rows, cnt, y2, NULL, NULL);
        if (glu) glu_pass(c, y, y2, n_rows * (int)W->ne[1], glu);
        return;
    }
    if (c->input_hook) {
        c->input_hook(c->input_hook_user, W, -1, x, src, n_rows, cnt);
        if (W2) c->input_hook(c->input_hook_user, W2, -1, x, src, n_rows, cnt);
    }
    mx_job j = { .W = { W, W2 }, .b = { B && B->data ? B->data : NULL, W2 && B2 && B2->data ? B2->data : NULL },
                 .y = { y, y2 }, .n_mat = W2 ? 2 : 1, .tr = ht_get_traits(W->type), .x = x, .src = src,
                 .n_rows = n_rows, .cnt = cnt, .active = c->moe_active, .first = c->moe_first, .qa = c->moe_qact,
                 .glu = W2 ? glu : NULL };
    j.qa_row = act_bytes(W, j.tr, W->packed != NULL);
    for (int e = 0, r = 0; e < (int)W->ne[2]; r += cnt[e++]) {
        j.first[e] = r;
        if (cnt[e]) c->moe_active[j.n_active++] = e;
    }
    if ((int64_t)n_rows * W->ne[0] <= MM_SERIAL_PREP) mx_prep_job(&j, 0, 1);
    else pool_run(c->pool, mx_prep_job, &j);
    j.chunk_rows = chunk_rows(W, j.tr, W->packed != NULL, n_rows, (int64_t)j.n_active * W->ne[1], pool_size(c->pool));
    j.n_chunks = (int)((W->ne[1] + j.chunk_rows - 1) / j.chunk_rows);
    atomic_init(&j.next, 0);
    pool_run(c->pool, mx_dot_job, &j);
}

/* y = glu(y, y2) over n elements, each thread a contiguous share (elementwise: the split changes nothing). */
typedef struct { float *y; const float *y2; void (*glu)(float *, const float *, int); } glu_job_t;

static void glu_range(const void *arg, int i0, int i1) {
    const glu_job_t *j = arg;
    j->glu(j->y + i0, j->y2 + i0, i1 - i0);
}

static void glu_pass(hearth_ctx *c, float *y, const float *y2, int n, void (*glu)(float *, const float *, int)) {
    glu_job_t j = { y, y2, glu };
    pool_share(c->pool, n, glu_range, &j);
}

void matmul_add_bias(const ht_tensor *b, float *y, int n_tok, int rows) {
    if (!b->data) return;
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < rows; r++) y[(size_t)t * rows + r] += ((const float *)b->data)[r];
}

void matmul_bias(hearth_ctx *c, const ht_tensor *W, const ht_tensor *b, const float *x, int n_tok, float *y) {
    matmul(c, W, x, n_tok, y);
    matmul_add_bias(b, y, n_tok, (int)W->ne[1]);
}
