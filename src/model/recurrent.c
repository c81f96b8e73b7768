/* recurrent.c — the Gated DeltaNet layer and its per-sequence state (Qwen3.5 / 3.6).
 *
 * Per v-head h (q/k head h mod n_k_heads in GGUF files, h / (v-heads per k-head) in HF's order) the layer keeps
 * a state matrix S (value dims x key dims) and runs the gated delta rule over the sequence:  S_t = e^{g_t} S_{t-1} + b_t (v_t - e^{g_t} S_{t-1} k_t) k_t^T,  o_t = S_t q_t.
 *
 * It is evaluated in chunks of REC_CHUNK positions fixed by position (0-63, 64-127, ...). With S0 the state
 * before the chunk and G_j the chunk's cumulative log decay up to row j, the rule unrolls to
 *   u_j = b_j (v_j - e^{G_j} S0 k_j - sum_{m<j} e^{G_j - G_m} (k_j.k_m) u_m)
 *   o_j = e^{G_j} S0 q_j + sum_{m<=j} e^{G_j - G_m} (k_m.q_j) u_m
 *   S   = e^{G_last} S0 + sum_m e^{G_last - G_m} u_m k_m^T                   (once, at the chunk's end)
 * so S is read twice and written once per 64 positions instead of updated at every one, and the rest is small
 * products within the chunk (the forward substitution of the chunked form's triangular system). A row's
 * arithmetic depends only on S0 and the chunk's earlier rows, so a prompt evaluated in one batch, in any
 * micro-batches or token by token gives the same bits. One pool job does all but the products: a task per
 * (sequence, k-head) runs the conv of its channels, the delta rule of the v-heads reading that k-head and their
 * gated output norm, so a layer is three dispatches (in-projections, this, out-projection).
 *
 * A sequence's state: S at the start of its current chunk, the chunk's keys, u and G, and the raw conv inputs of
 * the chunk and the conv_kernel - 1 positions before it, so the sequence can be cut back to any position in
 * its current chunk (rec_cut_floor) — not further: the state before the chunk is gone. */
#include "model/recurrent.h"

#include "compute/ops.h"
#include "model/matmul.h"

#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#define REC_MAX_STATE 512   /* ssm.state_size bound (Qwen3.5: 128): per-task rows on the stack */

typedef struct {
    float *S;     /* [n_seq][Hv][Sk][Sv]: the state before the current chunk, transposed (row c = key dim c) */
    float *raw;   /* [n_seq][CHUNK + K - 1][conv_dim]: conv inputs of positions cs - (K - 1) ... len - 1 */
    float *kr;    /* [n_seq][CHUNK][Hk][Sk]: the chunk's L2-normed keys */
    float *ur;    /* [n_seq][CHUNK][Hv][Sv]: the chunk's corrected values u */
    float *gr;    /* [n_seq][CHUNK][Hv]: the chunk's cumulative log decay G */
} rec_layer;

struct ht_rec {
    rec_layer *layer;         /* [n_layer], zero for attention layers */
    /* scratch for one micro-batch of n_batch rows */
    float *qkv;               /* [n][conv_dim]: the in-projection, conv inputs */
    float *z;                 /* [n][v_dim]: the output gate's projection */
    float *beta, *alpha;      /* [n][Hv] */
    float *conv;              /* [n][conv_dim]: conv + SiLU, then q, k L2-normed (q scaled) */
    float *o;                 /* [n][v_dim] */
    float *fin, *fba;         /* [n][2 k_dim + 2 v_dim], [n][2 Hv]: fused in-projections before their split (or NULL) */
    bool *pending;            /* [n_seq]: KV written back (hearth_kv_write), the state not yet (hearth_state_write) */
    int *order;               /* the micro-batch's rows by sequence, positions ascending */
    int *first;               /* [n_seq + 1]: each sequence's run in order */
};

/* Sizes of one layer's state and of the rows. */
typedef struct { int K, Sk, Hk, Hv, conv_dim, v_dim, k_dim; size_t s_n, raw_n, kr_n, ur_n, gr_n; } rec_dims;

static rec_dims dims(const ht_hparams *hp) {
    rec_dims d;
    d.K = hp->ssm_conv, d.Sk = hp->ssm_state, d.Hk = hp->ssm_k_heads, d.Hv = hp->ssm_v_heads;
    d.k_dim = d.Hk * d.Sk, d.v_dim = d.Hv * d.Sk, d.conv_dim = 2 * d.k_dim + d.v_dim;
    d.s_n = (size_t)d.Hv * d.Sk * d.Sk;
    d.raw_n = (size_t)(REC_CHUNK + d.K - 1) * d.conv_dim;
    d.kr_n = (size_t)REC_CHUNK * d.k_dim;
    d.ur_n = (size_t)REC_CHUNK * d.v_dim;
    d.gr_n = (size_t)REC_CHUNK * d.Hv;
    return d;
}

int rec_ctx_new(hearth_ctx *c) {
    const ht_hparams *hp = &c->m->hp;
    if (!hp->n_recurrent) return 0;
    const rec_dims d = dims(hp);
    bool fail = false;
    ht_rec *r = c->rec = ctx_buf_calloc(1, sizeof *r, &fail);
    if (!r) return -1;
    r->layer = ctx_buf_calloc((size_t)hp->n_layer, sizeof *r->layer, &fail);
    for (int il = 0; !fail && il < hp->n_layer; il++) {
        if (!c->m->layers[il].recurrent || il < c->m->layer_lo || il >= c->m->layer_hi) continue;
        rec_layer *L = &r->layer[il];
        const size_t ns = (size_t)c->n_seq;
        L->S = ctx_buf_calloc(ns * d.s_n, sizeof(float), &fail);
        L->raw = ctx_buf_calloc(ns * d.raw_n, sizeof(float), &fail);
        L->kr = ctx_buf_calloc(ns * d.kr_n, sizeof(float), &fail);
        L->ur = ctx_buf_calloc(ns * d.ur_n, sizeof(float), &fail);
        L->gr = ctx_buf_calloc(ns * d.gr_n, sizeof(float), &fail);
    }
    const size_t B = (size_t)c->n_batch;
    r->qkv = ctx_buf_calloc(B * d.conv_dim, sizeof(float), &fail);
    r->conv = ctx_buf_calloc(B * d.conv_dim, sizeof(float), &fail);
    r->z = ctx_buf_calloc(B * d.v_dim, sizeof(float), &fail);
    r->o = ctx_buf_calloc(B * d.v_dim, sizeof(float), &fail);
    r->beta = ctx_buf_calloc(B * d.Hv, sizeof(float), &fail);
    r->alpha = ctx_buf_calloc(B * d.Hv, sizeof(float), &fail);
    for (int il = 0; il < hp->n_layer; il++) {
        const ht_layer *W = &c->m->layers[il];
        if (W->ssm_in.data && !r->fin) r->fin = ctx_buf_calloc(B * (2 * d.k_dim + 2 * d.v_dim), sizeof(float), &fail);
        if (W->ssm_ba.data && !r->fba) r->fba = ctx_buf_calloc(B * 2 * d.Hv, sizeof(float), &fail);
    }
    r->order = ctx_buf_calloc(B, sizeof(int), &fail);
    r->first = ctx_buf_calloc((size_t)c->n_seq + 1, sizeof(int), &fail);
    r->pending = ctx_buf_calloc((size_t)c->n_seq, sizeof(bool), &fail);
    return fail ? -1 : 0;
}

void rec_ctx_free(hearth_ctx *c) {
    ht_rec *r = c->rec;
    if (!r) return;
    for (int il = 0; r->layer && il < c->m->hp.n_layer; il++) {
        rec_layer *L = &r->layer[il];
        void *bufs[] = { L->S, L->raw, L->kr, L->ur, L->gr };
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ctx_buf_free(bufs[i]);
    }
    void *bufs[] = { r->layer, r->qkv, r->conv, r->z, r->o, r->beta, r->alpha, r->fin, r->fba, r->order, r->first, r->pending };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ctx_buf_free(bufs[i]);
    ctx_buf_free(r);
    c->rec = NULL;
}

size_t rec_state_bytes(const hearth_ctx *c) {
    const ht_hparams *hp = &c->m->hp;
    if (!hp->n_recurrent) return 0;
    const rec_dims d = dims(hp);
    return (size_t)hp->n_recurrent * (d.s_n + d.raw_n + d.kr_n + d.ur_n + d.gr_n) * sizeof(float);
}

int rec_cut_floor(const hearth_ctx *c, int seq) {
    if (!c->rec) return 0;
    return c->rec->pending[seq] ? c->seq_len[seq] + 1 : c->seq_len[seq] / REC_CHUNK * REC_CHUNK;
}

int rec_cut_room(const hearth_ctx *c, int seq) {
    if (!c->m->hp.n_recurrent) return INT_MAX;
    if (c->rec && c->rec->pending[seq]) return 0;
    return REC_CHUNK - 1 - c->seq_len[seq] % REC_CHUNK;
}

void rec_set_pending(hearth_ctx *c, int seq, bool pending) {
    if (c->rec) c->rec->pending[seq] = pending;
}

bool rec_pending(const hearth_ctx *c, int seq) { return c->rec && c->rec->pending[seq]; }

/* ---- checkpoints: the state at a chunk boundary, for prompt caches ----
 * Per recurrent layer: S (transposed, as kept) and the conv inputs of the K - 1 positions before it. */
size_t hearth_state_bytes(const hearth_ctx *c) {
    const ht_hparams *hp = &c->m->hp;
    if (!c->rec || c->dist_id >= 0) return 0;
    const rec_dims d = dims(hp);
    return (size_t)hp->n_recurrent * (d.s_n + (size_t)(d.K - 1) * d.conv_dim) * sizeof(float);
}

static int state_copy(hearth_ctx *c, int seq, int pos, uint8_t *buf, bool out) {
    const ht_hparams *hp = &c->m->hp;
    if (!hearth_state_bytes(c) || seq < 0 || seq >= c->n_seq || pos % REC_CHUNK) return -1;
    if (out ? c->rec->pending[seq] || pos != c->seq_len[seq] / REC_CHUNK * REC_CHUNK : pos != c->seq_len[seq]) return -1;
    const rec_dims d = dims(hp);
    const size_t sb = d.s_n * sizeof(float), rb = (size_t)(d.K - 1) * d.conv_dim * sizeof(float);
    for (int il = 0; il < hp->n_layer; il++) {
        if (!c->m->layers[il].recurrent) continue;
        rec_layer *L = &c->rec->layer[il];
        uint8_t *S = (uint8_t *)(L->S + (size_t)seq * d.s_n), *raw = (uint8_t *)(L->raw + (size_t)seq * d.raw_n);
        if (out) memcpy(buf, S, sb), memcpy(buf + sb, raw, rb);
        else memcpy(S, buf, sb), memcpy(raw, buf + sb, rb);
        buf += sb + rb;
    }
    if (!out) c->rec->pending[seq] = false;
    return 0;
}

int hearth_state_read(const hearth_ctx *c, int seq, int pos, void *buf) {
    return state_copy((hearth_ctx *)c, seq, pos, buf, true);
}

int hearth_state_write(hearth_ctx *c, int seq, int pos, const void *buf) {
    return state_copy(c, seq, pos, (uint8_t *)buf, false);
}

/* ---- the micro-batch's rows by sequence ---- */
/* order[first[s] ... first[s + 1]) are sequence s's rows, positions ascending (a batch fills each in order). */
static void sort_rows(hearth_ctx *c, const ht_ubatch *ub) {
    int *first = c->rec->first, *order = c->rec->order;
    memset(first, 0, ((size_t)c->n_seq + 1) * sizeof *first);
    for (int i = 0; i < ub->n; i++) first[ub->seq[i] + 1]++;
    for (int s = 0; s < c->n_seq; s++) first[s + 1] += first[s];
    int fill[256];
    memcpy(fill, first, (size_t)c->n_seq * sizeof *fill);
    for (int i = 0; i < ub->n; i++) order[fill[ub->seq[i]]++] = i;
}

/* ---- one job for the rest: per (sequence, k-head) task, conv1d + SiLU, q/k normalization, beta and the decay of
 * its channels, the delta rule of its v-heads, their gated RMSNorm ---- */
typedef struct {
    hearth_ctx *c; const ht_ubatch *ub; const ht_layer *W; rec_layer *L; rec_dims d;
    int n_tasks; atomic_int next; const int *tasks;
} delta_job;

/* The conv input of position p of sequence s: its micro-batch row's projection, or kept from before the batch. */
static const float *conv_in(const delta_job *j, int s, int p) {
    const rec_dims *d = &j->d;
    const int p0 = j->c->seq_len[s];
    if (p >= p0) {
        const ht_rec *r = j->c->rec;
        return r->qkv + (size_t)r->order[r->first[s] + (p - p0)] * d->conv_dim;
    }
    const int base = p0 / REC_CHUNK * REC_CHUNK - (d->K - 1);
    return j->L->raw + (size_t)s * d->raw_n + (size_t)(p - base) * d->conv_dim;
}

/* x / sqrt(sum x^2 + eps), as the reference's L2 norm (an RMSNorm with eps / n, times 1 / sqrt(n)). */
static void l2norm(float *x, int n, float eps, float scale) {
    const float ss = op_dot_lanes(x, x, n);
    const float k = scale / sqrtf(ss + eps);
    for (int i = 0; i < n; i++) x[i] *= k;
}

/* y[ch] = SiLU(sum over the taps of x[t][ch] w[ch][t]) for ch in [c0, c1) (x[t] NULL: a position before 0). */
static void conv_span(const float *const *x, int K, const float *w, float *y, int c0, int c1) {
    for (int ch = c0; ch < c1; ch++) {
        float acc = 0;
        for (int t = 0; t < K; t++)
            if (x[t]) acc += x[t][ch] * w[(size_t)ch * K + t];
        y[ch] = acc;
    }
    op_silu(y + c0, c1 - c0);
}

/* The k-head whose q and k v-head h reads. */
static int k_head(const delta_job *j, int h) {
    return j->c->m->hp.ssm_v_grouped ? h / (j->d.Hv / j->d.Hk) : h % j->d.Hk;
}

/* Sequence s's rows, k-head g: the conv of q and k head g and of the v-heads reading them, q and k L2-normed (q
 * scaled), those v-heads' beta and log decay g (in place of their projections). */
static void conv_group(const delta_job *j, int s, int g) {
    const rec_dims *d = &j->d;
    const ht_hparams *hp = &j->c->m->hp;
    const ht_rec *r = j->c->rec;
    const float *w = j->W->ssm_conv1d.data;   /* [conv_dim][K] */
    const float *a = j->W->ssm_a.data, *dt = j->W->ssm_dt.data;
    const int Sk = d->Sk;
    for (int e = r->first[s]; e < r->first[s + 1]; e++) {
        const int i = r->order[e], p = j->ub->pos[i];
        const float *x[16];
        for (int t = 0; t < d->K; t++) x[t] = p - (d->K - 1) + t >= 0 ? conv_in(j, s, p - (d->K - 1) + t) : NULL;
        float *y = r->conv + (size_t)i * d->conv_dim, *q = y + (size_t)g * Sk, *k = y + d->k_dim + (size_t)g * Sk;
        conv_span(x, d->K, w, y, g * Sk, (g + 1) * Sk);
        conv_span(x, d->K, w, y, d->k_dim + g * Sk, d->k_dim + (g + 1) * Sk);
        l2norm(q, Sk, hp->norm_eps, 1.0f / sqrtf((float)Sk));
        l2norm(k, Sk, hp->norm_eps, 1.0f);
        float *be = r->beta + (size_t)i * d->Hv, *al = r->alpha + (size_t)i * d->Hv;
        for (int h = 0; h < d->Hv; h++) {
            if (k_head(j, h) != g) continue;
            conv_span(x, d->K, w, y, 2 * d->k_dim + h * Sk, 2 * d->k_dim + (h + 1) * Sk);
            be[h] = 1.0f / (1.0f + expf(-be[h]));
            const float x1 = al[h] + dt[h];
            al[h] = a[h] * (x1 > 20.0f ? x1 : log1pf(expf(x1)));   /* the log decay g: a = -exp(A_log) */
        }
    }
}

/* Key of chunk row m of sequence s (k-head kh): from the micro-batch when its position is in it, else stored. */
static const float *chunk_key(const delta_job *j, int s, int cs, int m, int kh) {
    const rec_dims *d = &j->d;
    const ht_rec *r = j->c->rec;
    const int p0 = j->c->seq_len[s], p = cs + m;
    if (p >= p0) return r->conv + (size_t)r->order[r->first[s] + (p - p0)] * d->conv_dim + d->k_dim + (size_t)kh * d->Sk;
    return j->L->kr + (size_t)s * d->kr_n + (size_t)m * d->k_dim + (size_t)kh * d->Sk;
}

static void delta_pair(const delta_job *j, int s, int h) {
    const rec_dims *d = &j->d;
    const ht_rec *r = j->c->rec;
    const int Sk = d->Sk, kh = k_head(j, h), p0 = j->c->seq_len[s];
    int cs = p0 / REC_CHUNK * REC_CHUNK;
    float *ST = j->L->S + (size_t)s * d->s_n + (size_t)h * Sk * Sk;   /* S transposed: row c = key dim c */
    float *U = j->L->ur + (size_t)s * d->ur_n + (size_t)h * Sk;        /* row m at U + m * v_dim */
    float *G = j->L->gr + (size_t)s * d->gr_n + h;                     /* row m at G[m * Hv] */
    if (p0 == 0) memset(ST, 0, (size_t)Sk * Sk * sizeof(float));   /* (a restored state is never at 0) */
    float a[REC_MAX_STATE], b[REC_MAX_STATE], ck[REC_CHUNK], cq[REC_CHUNK];
    for (int e = r->first[s]; e < r->first[s + 1]; e++) {
        const int i = r->order[e], jr = j->ub->pos[i] - cs;
        const float *row = r->conv + (size_t)i * d->conv_dim;
        const float *q = row + (size_t)kh * Sk, *k = row + d->k_dim + (size_t)kh * Sk, *v = row + 2 * d->k_dim + (size_t)h * Sk;
        const float beta = r->beta[(size_t)i * d->Hv + h];
        const float Gj = (jr ? G[(size_t)(jr - 1) * d->Hv] : 0.0f) + r->alpha[(size_t)i * d->Hv + h];
        G[(size_t)jr * d->Hv] = Gj;
        const float eG = expf(Gj);
        op_matvec2_t(a, b, ST, k, q, Sk, Sk);   /* a = S0 k, b = S0 q */
        for (int m = 0; m < jr; m++) {
            const float *km = chunk_key(j, s, cs, m, kh), w = expf(Gj - G[(size_t)m * d->Hv]);
            ck[m] = w * op_dot_lanes(k, km, Sk);
            cq[m] = w * op_dot_lanes(q, km, Sk);
        }
        float *u = U + (size_t)jr * d->v_dim, *o = r->o + (size_t)i * d->v_dim + (size_t)h * Sk;
        memcpy(u, v, (size_t)Sk * sizeof(float));
        op_axpy(u, -eG, a, Sk);
        for (int m = 0; m < jr; m++) op_axpy(u, -ck[m], U + (size_t)m * d->v_dim, Sk);
        op_scale(u, beta, Sk);
        memset(o, 0, (size_t)Sk * sizeof(float));
        op_axpy(o, eG, b, Sk);
        for (int m = 0; m < jr; m++) op_axpy(o, cq[m], U + (size_t)m * d->v_dim, Sk);
        op_axpy(o, op_dot_lanes(q, k, Sk), u, Sk);
        if (jr == REC_CHUNK - 1) {   /* the chunk is complete: S0 becomes the state after it */
            float W[REC_CHUNK][REC_MAX_STATE];   /* row m: e^{G_last - G_m} u_m */
            for (int m = 0; m <= jr; m++) {
                memset(W[m], 0, (size_t)Sk * sizeof(float));
                op_axpy(W[m], expf(Gj - G[(size_t)m * d->Hv]), U + (size_t)m * d->v_dim, Sk);
            }
            float KT[REC_MAX_STATE][REC_CHUNK];   /* KT[c][m]: key dim c of chunk row m */
            for (int m = 0; m <= jr; m++) {
                const float *km = chunk_key(j, s, cs, m, kh);
                for (int c2 = 0; c2 < Sk; c2++) KT[c2][m] = km[c2];
            }
            /* row c of S: e^{G_last} S0 + KT[c][0] W[0] + KT[c][1] W[1] + ... in that order, the row in registers */
            op_scale(ST, eG, Sk * Sk);
            for (int c2 = 0; c2 < Sk; c2++) op_axpy_m(ST + (size_t)c2 * Sk, KT[c2], W[0], REC_MAX_STATE, jr + 1, Sk);
            cs += REC_CHUNK;
        }
    }
}

/* The output of v-head h for sequence s's rows: RMSNorm(o) * SiLU(z). */
static void gate_pair(const delta_job *j, int s, int h) {
    const ht_rec *r = j->c->rec;
    const int Sk = j->d.Sk;
    for (int e = r->first[s]; e < r->first[s + 1]; e++) {
        const size_t at = (size_t)r->order[e] * j->d.v_dim + (size_t)h * Sk;
        float *o = r->o + at, *z = r->z + at;
        op_rmsnorm(o, o, j->W->ssm_norm.data, Sk, j->c->m->hp.norm_eps);
        op_silu(z, Sk);
        for (int i = 0; i < Sk; i++) o[i] *= z[i];
    }
}

static void delta_tasks(void *arg, int ith, int nth) {
    delta_job *j = arg;
    (void)ith, (void)nth;
    for (int t; (t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_tasks;) {
        const int s = j->tasks[t / j->d.Hk], g = t % j->d.Hk;
        conv_group(j, s, g);
        for (int h = 0; h < j->d.Hv; h++)
            if (k_head(j, h) == g) delta_pair(j, s, h), gate_pair(j, s, h);
    }
}

/* After the batch: each sequence's raw conv inputs from its current chunk's start - (K - 1), and the chunk's keys. */
static void keep_rows(hearth_ctx *c, const rec_layer *L, const rec_dims *d) {
    const ht_rec *r = c->rec;
    for (int s = 0; s < c->n_seq; s++) {
        const int n = r->first[s + 1] - r->first[s];
        if (!n) continue;
        const int p0 = c->seq_len[s], p1 = p0 + n, cs0 = p0 / REC_CHUNK * REC_CHUNK, cs1 = p1 / REC_CHUNK * REC_CHUNK;
        float *raw = L->raw + (size_t)s * d->raw_n;
        for (int p = HT_MAX(cs1 - (d->K - 1), 0); p < p1; p++) {   /* new index <= old index: ascending is safe */
            float *dst = raw + (size_t)(p - (cs1 - (d->K - 1))) * d->conv_dim;
            const float *src = p >= p0 ? r->qkv + (size_t)r->order[r->first[s] + (p - p0)] * d->conv_dim
                                       : raw + (size_t)(p - (cs0 - (d->K - 1))) * d->conv_dim;
            if (dst != src) memmove(dst, src, (size_t)d->conv_dim * sizeof(float));
        }
        for (int p = HT_MAX(cs1, p0); p < p1; p++)
            memcpy(L->kr + (size_t)s * d->kr_n + (size_t)(p - cs1) * d->k_dim,
                   r->conv + (size_t)r->order[r->first[s] + (p - p0)] * d->conv_dim + d->k_dim, (size_t)d->k_dim * sizeof(float));
    }
}

/* Qwen3-Next's fused projections, split per k-head into the layouts the layer reads. */
typedef struct { const ht_rec *r; const ht_layer *W; rec_dims d; } split_job;

static void split_rows(const void *arg, int r0, int r1) {
    const split_job *j = arg;
    const ht_rec *r = j->r;
    const int Hk = j->d.Hk, per = j->d.Hv / Hk, hk = j->d.k_dim / Hk, hv = j->d.v_dim / j->d.Hv;
    const size_t qkvz = 2 * (size_t)j->d.k_dim + 2 * (size_t)j->d.v_dim;
    for (int i = r0; i < r1; i++)
        for (int g = 0; g < Hk; g++) {
            if (j->W->ssm_in.data) {
                const float *s = r->fin + i * qkvz + (size_t)g * (2 * hk + 2 * per * hv);
                float *qkv = r->qkv + (size_t)i * j->d.conv_dim;
                memcpy(qkv + (size_t)g * hk, s, (size_t)hk * sizeof(float));
                memcpy(qkv + j->d.k_dim + (size_t)g * hk, s + hk, (size_t)hk * sizeof(float));
                memcpy(qkv + 2 * (size_t)j->d.k_dim + (size_t)g * per * hv, s + 2 * hk, (size_t)per * hv * sizeof(float));
                memcpy(r->z + (size_t)i * j->d.v_dim + (size_t)g * per * hv, s + 2 * hk + per * hv, (size_t)per * hv * sizeof(float));
            }
            if (j->W->ssm_ba.data) {
                const float *s = r->fba + (size_t)i * 2 * j->d.Hv + (size_t)g * 2 * per;
                memcpy(r->beta + (size_t)i * j->d.Hv + (size_t)g * per, s, (size_t)per * sizeof(float));
                memcpy(r->alpha + (size_t)i * j->d.Hv + (size_t)g * per, s + per, (size_t)per * sizeof(float));
            }
        }
}

void layer_gated_deltanet(hearth_ctx *c, const ht_ubatch *ub, int il, const float *in, float *out) {
    const ht_layer *W = &c->m->layers[il];
    ht_rec *r = c->rec;
    rec_layer *L = &r->layer[il];
    const rec_dims d = dims(&c->m->hp);
    const ht_tensor *Ws[4];
    float *Y[4];
    int nw = 0;
    if (W->ssm_in.data) Ws[nw] = &W->ssm_in, Y[nw++] = r->fin;
    else Ws[nw] = &W->ssm_qkv, Y[nw++] = r->qkv, Ws[nw] = &W->ssm_z, Y[nw++] = r->z;
    if (W->ssm_ba.data) Ws[nw] = &W->ssm_ba, Y[nw++] = r->fba;
    else Ws[nw] = &W->ssm_beta, Y[nw++] = r->beta, Ws[nw] = &W->ssm_alpha, Y[nw++] = r->alpha;
    matmul_multi(c, Ws, Y, nw, in, ub->n);
    if (W->ssm_in.data || W->ssm_ba.data) {
        split_job sj = { r, W, d };
        pool_share(c->pool, ub->n, split_rows, &sj);
    }
    sort_rows(c, ub);
    int tasks[256], n_seqs = 0;
    for (int s = 0; s < c->n_seq; s++)
        if (r->first[s + 1] > r->first[s]) tasks[n_seqs++] = s;
    delta_job dj = { .c = c, .ub = ub, .W = W, .L = L, .d = d, .n_tasks = n_seqs * d.Hk, .tasks = tasks };
    atomic_init(&dj.next, 0);
    pool_run(c->pool, delta_tasks, &dj);
    keep_rows(c, L, &d);
    matmul(c, &W->ssm_out, r->o, ub->n, out);
}
