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
    const uint8_t *qa;      /* quantized activations (or x itself for F32 formats) */
    size_t qa_row;          /* bytes per quantized activation row */
    uint8_t *qa_w;
    int chunk_rows;         /* a multiple of HT_TILE_MAX */
    atomic_int next_chunk;  /* the next chunk no thread has claimed */
} mm_job;

size_t matmul_act_row_bytes(int64_t n) { return (size_t)n / QK_K * sizeof(block_q8_K) + sizeof(block_q8_K) + (size_t)n * 2 + 64; }

static void quantize_job(void *arg, int ith, int nth) {
    mm_job *j = arg;
    int64_t n = j->W->ne[0];
    for (int t = ith; t < j->n_tok; t += nth)
        ht_quantize_row((uint32_t)j->tr->vec_dot_type, j->x + (size_t)t * n, j->qa_w + (size_t)t * j->qa_row, n);
}

/* Packed weights (ht_pack): activations in the pack's format, chunks of whole groups. */
static void pack_act_job(void *arg, int ith, int nth) {
    mm_job *j = arg;
    int64_t n = j->W->ne[0];
    for (int t = ith; t < j->n_tok; t += nth) j->W->pack->act_prep(j->x + (size_t)t * n, j->qa_w + (size_t)t * j->qa_row, n);
}

static void pack_dot_job(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    mm_job *j = arg;
    const ht_pack *pk = j->W->pack;
    const int n = (int)j->W->ne[0], rows = (int)j->W->ne[1], R = pk->rows;
    const int cr = j->chunk_rows, n_chunks = (rows + cr - 1) / cr;
    const size_t gb = pk->group_bytes(n);
    for (int ch; (ch = atomic_fetch_add_explicit(&j->next_chunk, 1, memory_order_relaxed)) < n_chunks;) {
        const int r0 = ch * cr, r1 = HT_MIN(rows, r0 + cr);
        for (int t = 0; t < j->n_tok; t += pk->max_nc) {
            const int nc = HT_MIN(pk->max_nc, j->n_tok - t);
            const uint8_t *a = j->qa + (size_t)t * j->qa_row;
            float *yt = j->y + (size_t)t * rows;
            for (int g0 = r0; g0 < r1; g0 += R)
                pk->tile(n, j->W->packed + (size_t)(g0 / R) * gb, HT_MIN(R, rows - g0), a, j->qa_row, nc, yt + g0, (size_t)rows);
        }
    }
}

static void dot_job(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    mm_job *j = arg;
    int n = (int)j->W->ne[0], rows = (int)j->W->ne[1];
    const int cr = j->chunk_rows;
    int n_chunks = (rows + cr - 1) / cr;
    const uint8_t *w = j->W->data;
    size_t rb = j->W->row_bytes;
    for (int ch; (ch = atomic_fetch_add_explicit(&j->next_chunk, 1, memory_order_relaxed)) < n_chunks;) {
        int r0 = ch * cr, r1 = HT_MIN(rows, r0 + cr);
        for (int t = 0; t < j->n_tok; t += HT_TILE_MAX) {
            const int nc = HT_MIN(HT_TILE_MAX, j->n_tok - t);
            const uint8_t *a = j->qa + (size_t)t * j->qa_row;
            float *yt = j->y + (size_t)t * rows;
            ht_vec_dot_tile(j->tr, n, w + (size_t)r0 * rb, rb, r1 - r0, a, j->qa_row, nc, yt + r0, (size_t)rows);
        }
    }
}

void matmul(hearth_ctx *c, const ht_tensor *W, const float *x, int n_tok, float *y) {
    mm_job j = { .W = W, .tr = ht_get_traits(W->type), .x = x, .y = y, .n_tok = n_tok };
    const int rows = (int)W->ne[1], nth = pool_size(c->pool);
    if (W->packed) {
        const int R = W->pack->rows;
        if (W->pack->act_prep) {
            j.qa_w = c->qact;
            j.qa = c->qact;
            j.qa_row = W->pack->act_bytes(W->ne[0]);
            pool_run(c->pool, pack_act_job, &j);
        } else {   /* float weights: the activations as they are */
            j.qa = (const uint8_t *)x;
            j.qa_row = (size_t)W->ne[0] * sizeof(float);
        }
        int groups = (int)(MM_CHUNK_BYTES / W->pack->group_bytes(W->ne[0]));
        groups = HT_MIN(groups, MM_MAX_CHUNK_ROWS / R);
        groups = HT_MIN(groups, (rows + R - 1) / R / (MM_MIN_CHUNKS * HT_MAX(nth, 1)));
        j.chunk_rows = HT_MAX(groups, 1) * R;
        atomic_init(&j.next_chunk, 0);
        pool_run(c->pool, pack_dot_job, &j);
        return;
    }
    if (j.tr->vec_dot_type == HT_F32) {
        j.qa = (const uint8_t *)x;
        j.qa_row = (size_t)W->ne[0] * sizeof(float);
    } else {
        j.qa_w = c->qact;
        j.qa = c->qact;
        j.qa_row = ht_row_size((uint32_t)j.tr->vec_dot_type, W->ne[0]);
        pool_run(c->pool, quantize_job, &j);
    }
    int cr = (int)(MM_CHUNK_BYTES / (W->row_bytes ? W->row_bytes : 1));
    cr = HT_MIN(cr, MM_MAX_CHUNK_ROWS);
    cr = HT_MIN(cr, rows / (MM_MIN_CHUNKS * HT_MAX(nth, 1)));
    cr = cr / HT_TILE_MAX * HT_TILE_MAX;
    j.chunk_rows = HT_MAX(cr, MM_CHUNK_ROWS);
    atomic_init(&j.next_chunk, 0);
    pool_run(c->pool, dot_job, &j);
}

void matmul_bias(hearth_ctx *c, const ht_tensor *W, const ht_tensor *b, const float *x, int n_tok, float *y) {
    matmul(c, W, x, n_tok, y);
    if (!b->data) return;
    int rows = (int)W->ne[1];
    for (int t = 0; t < n_tok; t++)
        for (int r = 0; r < rows; r++) y[(size_t)t * rows + r] += ((const float *)b->data)[r];
}
