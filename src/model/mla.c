/* mla.c — multi-head latent attention (DeepSeek-V2's MLA), computed in the latent space as the reference's
 * "absorbed" form does, so the cache keeps only what the method compresses to.
 *
 * Per token: q (attn_q, or the LoRA attn_q_a -> attn_q_a_norm -> attn_q_b) is per head [nope | rope];
 * attn_kv_a_mqa gives the latent c (kv_lora_rank, then RMS-normed by attn_kv_a_norm) and one rope key k_r
 * shared by all heads. The cache row of a token is [c | rope(k_r)]: kv_lora_rank + n_rot values per token and
 * layer, in the K cache type (F32, F16, BF16, or Q8_0 / Q4_0 when the row is whole blocks), one row per position
 * ([seq][position][row]; hp.head_dim is that row, as the GGUF's key_length says).
 * Per head h, with W_UK = attn_k_b[h] ([nope -> kv_lora_rank] as stored) and W_UV = attn_v_b[h]:
 *   q_lat = W_UK q_nope;  score_t = (q_lat . c_t + rope(q_r) . k_r,t) * scale;  o_lat = sum_t softmax_t c_t;
 *   o_h = W_UV o_lat;  out = attn_output [o_0 | o_1 | ...].
 * Which is the attention of the uncompressed form, since k_nope,t = W_UK^T c_t and v_t = W_UV c_t.
 * A token's scores and output read the cache rows in position order with the same float operations whatever
 * the micro-batch or the thread that runs it: batched and token-by-token results are identical.
 * Scratch (sized once by hearth_ctx_new): q the raw q, then the heads' outputs; k the new cache rows, then one
 * head's o_h; hb the [q_lat | q_r] rows; hb2 one head's gathered rows; att the latent outputs; the attention
 * scratch of each thread its score rows (MLA_HEADS of n_ctx) and dequantized cache rows. */
#include "model/mla.h"

#include "model/layers.h"
#include "model/matmul.h"
#include "compute/ops.h"

#include <stdatomic.h>

#define MLA_ROWS 16    /* cache rows dequantized at a time (to float) for every head of a task */
#define MLA_HEADS 32   /* heads per task at most: every head reads the same rows, so a task's heads share each pass */

size_t mla_scratch_bytes(const ht_hparams *hp, int n_ctx) {
    if (!hp->kv_lora_rank) return 0;
    return ((size_t)MLA_HEADS * (size_t)n_ctx + (size_t)MLA_ROWS * (size_t)hp->head_dim) * sizeof(float);
}

/* Per token: the latent part of its kv row RMS-normed, the rope key and every head's rope part of q rotated. */
typedef struct { hearth_ctx *c; const ht_layer *L; float *q, *kv; } mla_rope_job;

static void mla_rope_rows(const void *arg, int r0, int r1) {
    const mla_rope_job *j = arg;
    const ht_hparams *hp = &j->c->m->hp;
    const int R = hp->kv_lora_rank, h = hp->n_rot / 2, dq = hp->head_dim_mla, nope = dq - hp->n_rot;
    const bool neox = hp->rope_type == ROPE_NEOX;
    for (int i = r0; i < r1; i++) {
        float *kv = j->kv + (size_t)i * hp->head_dim, *q = j->q + (size_t)i * hp->n_head * dq;
        const float *cs = j->c->rope_cos + (size_t)i * h, *sn = j->c->rope_sin + (size_t)i * h;
        op_rmsnorm(kv, kv, j->L->kv_a_norm.data, R, hp->norm_eps);
        op_rope(kv + R, 1, hp->n_rot, hp->n_rot, cs, sn, neox);
        op_rope(q + nope, hp->n_head, dq, hp->n_rot, cs, sn, neox);
    }
}

/* The micro-batch's rows [n][head_dim] into layer il's cache at (seq, position), in the cache type. */
static void mla_store(hearth_ctx *c, const ht_ubatch *ub, int il, const float *kv) {
    const ht_kv_layer *L = &c->kv[il];
    const int D = c->m->hp.head_dim;
    const size_t rs = ht_row_size(c->k_type, D);
    for (int i = 0; i < ub->n; i++) {
        uint8_t *dst = (uint8_t *)L->k + ((size_t)ub->seq[i] * L->cap + (size_t)(ub->pos[i] % L->cap)) * rs;
        if (c->k_type == HT_F32) memcpy(dst, kv + (size_t)i * D, rs);
        else ht_quantize_row(c->k_type, kv + (size_t)i * D, dst, D);
    }
}

/* dst[i] = src[i * stride + off .. + w] for the n rows: one head's slice of each token, contiguous. */
static void gather_cols(float *dst, const float *src, int n, size_t stride, size_t off, int w) {
    for (int i = 0; i < n; i++) memcpy(dst + (size_t)i * w, src + (size_t)i * stride + off, (size_t)w * sizeof(float));
}

static void scatter_cols(float *dst, const float *src, int n, size_t stride, size_t off, int w) {
    for (int i = 0; i < n; i++) memcpy(dst + (size_t)i * stride + off, src + (size_t)i * w, (size_t)w * sizeof(float));
}

/* ---- attention over the latent cache ---- */
typedef struct {
    hearth_ctx *c;
    const ht_ubatch *ub;
    const ht_kv_layer *L;
    const float *q;          /* [n][n_head][head_dim]: [q_lat | rope(q_r)] */
    float *out;              /* [n][n_head][kv_lora_rank] */
    float scale;
    int heads;               /* heads per task (<= MLA_HEADS) */
    int n_chunks;            /* tasks per token: the heads in chunks of `heads` */
    atomic_int next_task;
} mla_att_job;

/* Rows r0..r0+m-1 of a sequence's cache as floats: in place for an F32 cache, else converted into buf. */
static const float *mla_rows(const hearth_ctx *c, const uint8_t *rows, int r0, int m, float *buf) {
    const int D = c->m->hp.head_dim;
    const size_t rs = ht_row_size(c->k_type, D);
    if (c->k_type == HT_F32) return (const float *)(rows + (size_t)r0 * rs);
    const ht_traits *tr = ht_get_traits(c->k_type);
    for (int r = 0; r < m; r++) tr->to_float(rows + (size_t)(r0 + r) * rs, buf + (size_t)r * D, D);
    return buf;
}

/* Token t, heads h0..h0+nh-1: scores over positions 0..pos, softmax, latent outputs. */
static void mla_token(mla_att_job *j, int t, int h0, int nh, float *sc, float *buf) {
    const hearth_ctx *c = j->c;
    const ht_hparams *hp = &c->m->hp;
    const int D = hp->head_dim, R = hp->kv_lora_rank, n = j->ub->pos[t] + 1;
    const size_t ld = (size_t)c->n_ctx;
    const uint8_t *rows = (const uint8_t *)j->L->k + (size_t)j->ub->seq[t] * j->L->cap * ht_row_size(c->k_type, D);
    const float *q = j->q + ((size_t)t * hp->n_head + h0) * D;
    for (int r0 = 0; r0 < n; r0 += MLA_ROWS) {
        const int m = HT_MIN(MLA_ROWS, n - r0);
        const float *x = mla_rows(c, rows, r0, m, buf);
        for (int r = 0; r < m; r++)
            for (int h = 0; h < nh; h++) sc[(size_t)h * ld + r0 + r] = op_dot(q + (size_t)h * D, x + (size_t)r * D, D);
    }
    for (int h = 0; h < nh; h++) op_softmax(sc + (size_t)h * ld, n, j->scale);
    float *o = j->out + ((size_t)t * hp->n_head + h0) * R;
    memset(o, 0, (size_t)nh * R * sizeof(float));
    for (int r0 = 0; r0 < n; r0 += MLA_ROWS) {
        const int m = HT_MIN(MLA_ROWS, n - r0);
        const float *x = mla_rows(c, rows, r0, m, buf);
        for (int r = 0; r < m; r++)
            for (int h = 0; h < nh; h++) op_axpy(o + (size_t)h * R, sc[(size_t)h * ld + r0 + r], x + (size_t)r * D, R);
    }
}

static void mla_attention_job(void *arg, int ith, int nth) {
    mla_att_job *j = arg;
    hearth_ctx *c = j->c;
    const int G = j->heads, total = j->ub->n * j->n_chunks;
    float *sc = c->att_scores + (size_t)ith * c->att_stride, *buf = sc + (size_t)MLA_HEADS * c->n_ctx;
    (void)nth;
    for (int task; (task = atomic_fetch_add_explicit(&j->next_task, 1, memory_order_relaxed)) < total;) {
        const int t = task / j->n_chunks, h0 = task % j->n_chunks * G;
        mla_token(j, t, h0, HT_MIN(G, c->m->hp.n_head - h0), sc, buf);
    }
}

void layer_mla_attention(hearth_ctx *c, const ht_ubatch *ub, int il, const float *in, float *out) {
    const hearth_model *m = c->m;
    const ht_hparams *hp = &m->hp;
    const ht_layer *L = &m->layers[il];
    const int n = ub->n, H = hp->n_head, D = hp->head_dim, R = hp->kv_lora_rank, dq = hp->head_dim_mla;
    const int nope = dq - hp->n_rot, dv = hp->head_dim_v_mla;
    /* q (or its LoRA's first half) and the kv row from the same input */
    const ht_tensor *W[2] = { L->wq_a.data ? &L->wq_a : &L->wq, &L->wkv_a };
    float *Y[2] = { L->wq_a.data ? c->hb : c->q, c->k };
    matmul_multi(c, W, Y, 2, in, n);
    if (L->wq_a.data) {
        layer_norm_rows(c, ub, c->hb, c->hb, &L->q_a_norm, NULL, hp->q_lora_rank, hp->norm_eps, NORM_RMS);
        matmul(c, &L->wq_b, c->hb, n, c->q);
    }
    ctx_rope_tables(c, ub, hp->rope_base, hp->rope_scale, hp->n_rot, NULL);
    mla_rope_job rj = { c, L, c->q, c->k };
    pool_share(c->pool, n, mla_rope_rows, &rj);
    mla_store(c, ub, il, c->k);
    /* q_lat = W_UK q_nope head by head, beside the head's roped part: hb = [n][H][q_lat | q_r] */
    for (int h = 0; h < H; h++) {
        gather_cols(c->att, c->q, n, (size_t)H * dq, (size_t)h * dq, nope);
        matmul_one(c, &L->wk_b, h, c->att, n, c->hb2);
        scatter_cols(c->hb, c->hb2, n, (size_t)H * D, (size_t)h * D, R);
        for (int i = 0; i < n; i++)
            memcpy(c->hb + ((size_t)i * H + h) * D + R, c->q + ((size_t)i * H + h) * dq + nope, (size_t)hp->n_rot * sizeof(float));
    }
    int heads = HT_MIN(H, MLA_HEADS);   /* split further only to give every thread work */
    while (heads > 1 && (long)n * ((H + heads - 1) / heads) < c->n_threads) heads = (heads + 1) / 2;
    mla_att_job j = { .c = c, .ub = ub, .L = &c->kv[il], .q = c->hb, .out = c->att, .scale = hp->attn_scale,
                      .heads = heads, .n_chunks = (H + heads - 1) / heads };
    atomic_init(&j.next_task, 0);
    pool_run(c->pool, mla_attention_job, &j);
    /* o_h = W_UV o_lat, the heads side by side in q, then the output projection */
    for (int h = 0; h < H; h++) {
        gather_cols(c->hb2, c->att, n, (size_t)H * R, (size_t)h * R, R);
        matmul_one(c, &L->wv_b, h, c->hb2, n, c->k);
        scatter_cols(c->q, c->k, n, (size_t)H * dv, (size_t)h * dv, dv);
    }
    matmul(c, &L->wo, c->q, n, out);
}
