/* matmul.c — quantized matrix × activation-batch products over the thread pool.
 *
 * Two pool jobs per product: (1) each thread quantizes a share of the activation rows into the
 * context's qact scratch, in the traits table's vec_dot format; (2) output rows are cut into chunks that
 * threads claim one at a time from a shared counter (a thread slowed by other load on the machine then
 * holds up only the chunk it is on, not a fixed share of the matrix); inside a chunk the loop runs token-outer, row-inner, so a chunk of
 * weights stays in cache while every token of the batch passes over it. Each group of up to HT_TILE_MAX
 * tokens meets the chunk's rows in one ht_vec_dot_tile call, which decodes each weight block once for all
 * the group's tokens (and prepares what depends on the tokens alone once for all the rows); a tile computes every output exactly as vec_dot would (quant.h), so the result does not
 * depend on the batch size, the tiling or the thread count. */
#include "matmul.h"

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

typedef struct {
    const ht_tensor *W;
    const ht_traits *tr;
    const float *x;
    float *y;
    int n_tok;
    const uint8_t *qa;      /* prepared activations (or x itself when the kernels take floats) */
    size_t qa_row;          /* bytes per prepared activation row */
    uint8_t *qa_w;
    int chunk_rows;         /* a multiple of the kernel's rows per call */
    atomic_int next_chunk;  /* the next chunk no thread has claimed */
} mm_job;

size_t matmul_act_row_bytes(int64_t n) { return (size_t)n / QK_K * sizeof(block_q8_K) + sizeof(block_q8_K) + (size_t)n * 2 + 64; }

/* The kernels of W take the activations as floats: packed float weights, or a vec_dot over F32 rows. */
static bool act_is_float(const ht_tensor *W, const ht_traits *tr) {
    return W->packed ? !W->pack->act_prep : tr->vec_dot_type == HT_F32;
}

static size_t act_bytes(const ht_tensor *W, const ht_traits *tr) {
    if (act_is_float(W, tr)) return (size_t)W->ne[0] * sizeof(float);
    return W->packed ? W->pack->act_bytes(W->ne[0]) : ht_row_size((uint32_t)tr->vec_dot_type, W->ne[0]);
}

/* One activation row prepared for W's kernels: its pack's format, its vec_dot format, or a float copy. */
static void act_prep(const ht_tensor *W, const ht_traits *tr, const float *x, uint8_t *dst) {
    if (act_is_float(W, tr)) memcpy(dst, x, (size_t)W->ne[0] * sizeof(float));
    else if (W->packed) W->pack->act_prep(x, dst, W->ne[0]);
    else ht_quantize_row((uint32_t)tr->vec_dot_type, x, dst, W->ne[0]);
}

/* Rows [r0, r1) of the matrix W (r0 a multiple of the kernel's rows per call) times n_tok prepared
 * activation rows (a, stride as) into y[t * ys + r]: token groups outer, so the rows stay in cache. */
static void mm_rows(const ht_tensor *W, const ht_traits *tr, int r0, int r1, const uint8_t *a, size_t as, int n_tok,
                    float *y, size_t ys) {
    const int n = (int)W->ne[0], rows = (int)W->ne[1];
    if (W->packed) {
        const ht_pack *pk = W->pack;
        const int R = pk->rows;
        const size_t gb = pk->group_bytes(n);
        for (int t = 0; t < n_tok; t += pk->max_nc) {
            const int nc = HT_MIN(pk->max_nc, n_tok - t);
            for (int g0 = r0; g0 < r1; g0 += R)
                pk->tile(n, W->packed + (size_t)(g0 / R) * gb, HT_MIN(R, rows - g0), a + (size_t)t * as, as, nc,
                         y + (size_t)t * ys + g0, ys);
        }
        return;
    }
    for (int t = 0; t < n_tok; t += HT_TILE_MAX)
        ht_vec_dot_tile(tr, n, (const uint8_t *)W->data + (size_t)r0 * W->row_bytes, W->row_bytes, r1 - r0,
                        a + (size_t)t * as, as, HT_MIN(HT_TILE_MAX, n_tok - t), y + (size_t)t * ys + r0, ys);
}

/* Rows per chunk of W: about MM_CHUNK_BYTES, at most MM_MAX_CHUNK_ROWS, and small enough that the
 * balance_rows of the whole job make MM_MIN_CHUNKS per thread; whole packed groups, or whole tiles. */
static int chunk_rows(const ht_tensor *W, int64_t balance_rows, int nth) {
    const int unit = W->packed ? W->pack->rows : HT_TILE_MAX;
    const size_t unit_bytes = W->packed ? W->pack->group_bytes(W->ne[0]) : W->row_bytes * HT_TILE_MAX;
    int64_t units = (int64_t)(MM_CHUNK_BYTES / (unit_bytes ? unit_bytes : 1));
    units = HT_MIN(units, MM_MAX_CHUNK_ROWS / unit);
    units = HT_MIN(units, balance_rows / unit / (MM_MIN_CHUNKS * HT_MAX(nth, 1)));
    return (int)HT_MAX(units, W->packed ? 1 : MM_CHUNK_ROWS / HT_TILE_MAX) * unit;
}

static void prep_job(void *arg, int ith, int nth) {
    mm_job *j = arg;
    int64_t n = j->W->ne[0];
    for (int t = ith; t < j->n_tok; t += nth) act_prep(j->W, j->tr, j->x + (size_t)t * n, j->qa_w + (size_t)t * j->qa_row);
}

static void dot_job(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    mm_job *j = arg;
    const int rows = (int)j->W->ne[1], cr = j->chunk_rows, n_chunks = (rows + cr - 1) / cr;
    for (int ch; (ch = atomic_fetch_add_explicit(&j->next_chunk, 1, memory_order_relaxed)) < n_chunks;)
        mm_rows(j->W, j->tr, ch * cr, HT_MIN(rows, ch * cr + cr), j->qa, j->qa_row, j->n_tok, j->y, (size_t)rows);
}

void matmul(hearth_ctx *c, const ht_tensor *W, const float *x, int n_tok, float *y) {
    mm_job j = { .W = W, .tr = ht_get_traits(W->type), .x = x, .y = y, .n_tok = n_tok };
    j.qa_row = act_bytes(W, j.tr);
    if (act_is_float(W, j.tr)) {
        j.qa = (const uint8_t *)x;
    } else {
        j.qa = j.qa_w = c->qact;
        pool_run(c->pool, prep_job, &j);
    }
    j.chunk_rows = chunk_rows(W, W->ne[1], pool_size(c->pool));
    atomic_init(&j.next_chunk, 0);
    pool_run(c->pool, dot_job, &j);
}

/* ---- expert stacks ---- */
typedef struct {
    const ht_tensor *W[2];  /* stacks sharing one activation format; W[1] may be absent */
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
    atomic_int next;
} mx_job;

static void mx_prep_job(void *arg, int ith, int nth) {
    mx_job *j = arg;
    int64_t n = j->W[0]->ne[0];
    for (int r = ith; r < j->n_rows; r += nth)
        act_prep(j->W[0], j->tr, j->x + (size_t)(j->src ? j->src[r] : r) * n, j->qa + (size_t)r * j->qa_row);
}

/* Items (active expert, matrix, chunk of rows) claimed one at a time: all the experts' products share one job. */
static void mx_dot_job(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    mx_job *j = arg;
    const int per = j->n_mat * j->n_chunks, total = j->n_active * per;
    for (int i; (i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < total;) {
        const int e = j->active[i / per], mat = i % per / j->n_chunks, ch = i % j->n_chunks;
        const ht_tensor W = ht_expert(j->W[mat], e);
        const int rows = (int)W.ne[1], r0 = ch * j->chunk_rows;
        mm_rows(&W, j->tr, r0, HT_MIN(rows, r0 + j->chunk_rows), j->qa + (size_t)j->first[e] * j->qa_row, j->qa_row,
                j->cnt[e], j->y[mat] + (size_t)j->first[e] * rows, (size_t)rows);
    }
}

void matmul_experts(hearth_ctx *c, const ht_tensor *W, const ht_tensor *W2, const float *x, const int *src, int n_rows,
                    const int *cnt, float *y, float *y2) {
    if (W2 && (W2->type != W->type || W2->pack != W->pack || W2->ne[0] != W->ne[0] || W2->ne[1] != W->ne[1])) {
        matmul_experts(c, W, NULL, x, src, n_rows, cnt, y, NULL);   /* different activation formats: one at a time */
        matmul_experts(c, W2, NULL, x, src, n_rows, cnt, y2, NULL);
        return;
    }
    mx_job j = { .W = { W, W2 }, .y = { y, y2 }, .n_mat = W2 ? 2 : 1, .tr = ht_get_traits(W->type), .x = x, .src = src,
                 .n_rows = n_rows, .cnt = cnt, .active = c->moe_active, .first = c->moe_first, .qa = c->moe_qact };
    j.qa_row = act_bytes(W, j.tr);
    for (int e = 0, r = 0; e < (int)W->ne[2]; r += cnt[e++]) {
        j.first[e] = r;
        if (cnt[e]) c->moe_active[j.n_active++] = e;
    }
    pool_run(c->pool, mx_prep_job, &j);
    j.chunk_rows = chunk_rows(W, (int64_t)j.n_active * j.n_mat * W->ne[1], pool_size(c->pool));
    j.n_chunks = (int)((W->ne[1] + j.chunk_rows - 1) / j.chunk_rows);
    atomic_init(&j.next, 0);
    pool_run(c->pool, mx_dot_job, &j);
}

void matmul_bias(hearth_ctx *c, const ht_tensor *W, const ht_tensor *b, const float *x, int n_tok, float *y) {
    matmul(c, W, x, n_tok, y);
    if (!b->data) return;
    int rows = (int)W->ne[1];
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < rows; r++) y[(size_t)t * rows + r] += ((const float *)b->data)[r];
}
