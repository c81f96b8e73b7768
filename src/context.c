/* context.c — inference contexts: the KV cache, scratch buffers sized once, the thread pool, and
 * hearth_decode(), which validates a batch, cuts it into micro-batches and runs the architecture's
 * forward pass. Also the shared attention over the cache and the output head used by every family. */
#include "context.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "matmul.h"
#include "ops.h"

hearth_ctx_params hearth_ctx_default_params(void) {
    return (hearth_ctx_params){ .n_ctx = 0, .n_seq = 1, .n_batch = 512, .n_threads = 0, .cache_type = HEARTH_CACHE_F16 };
}

static void *xcalloc(size_t n, size_t sz, bool *fail) {
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) *fail = true;
    return p;
}

bool ctx_layer_is_swa(const hearth_model *m, int il) {
    const ht_hparams *hp = &m->hp;
    return hp->sliding_window > 0 && hp->swa_period > 0 && (il + 1) % hp->swa_period != 0;
}

int hearth_ctx_new(hearth_model *m, const hearth_ctx_params *pp, hearth_ctx **out, hearth_err *err) {
    *out = NULL;
    if (!m->arch) return herr(err, "this is a tokenizer only (hearth_tokenizer_load): it has no weights to evaluate");
    hearth_ctx_params p = pp ? *pp : hearth_ctx_default_params();
    const ht_hparams *hp = &m->hp;
    if (p.n_ctx <= 0) p.n_ctx = HT_MIN(hp->n_ctx_train > 0 ? hp->n_ctx_train : 4096, 4096);
    if (m->pos_embd.data && p.n_ctx > m->pos_embd.ne[1]) p.n_ctx = (int)m->pos_embd.ne[1];
    if (p.n_ctx > (1 << 22)) return herr(err, "context size %d too large", p.n_ctx);
    if (p.n_seq <= 0) p.n_seq = 1;
    if (p.n_seq > 256) return herr(err, "too many sequences (%d, max 256)", p.n_seq);
    if (p.n_batch <= 0) p.n_batch = 512;
    p.n_batch = HT_MIN(p.n_batch, p.n_ctx * p.n_seq);
    if (p.n_threads <= 0) { long nc = sysconf(_SC_NPROCESSORS_ONLN); p.n_threads = nc > 0 ? (int)HT_MIN(nc, 64) : 1; }
    if (p.cache_type != HEARTH_CACHE_F32 && p.cache_type != HEARTH_CACHE_F16)
        return herr(err, "unsupported KV cache type %d (f32 or f16)", (int)p.cache_type);

    hearth_ctx *c = calloc(1, sizeof *c);
    if (!c) return herr(err, "out of memory");
    c->m = m;
    c->n_ctx = p.n_ctx; c->n_seq = p.n_seq; c->n_batch = p.n_batch; c->n_threads = p.n_threads;
    c->kv_type = p.cache_type == HEARTH_CACHE_F32 ? HT_F32 : HT_F16;
    bool fail = false;
    size_t B = (size_t)c->n_batch, E = (size_t)hp->n_embd;
    size_t QD = (size_t)hp->n_head * hp->head_dim, KD = (size_t)hp->n_head_kv * hp->head_dim;
    size_t VD = (size_t)hp->n_head * hp->head_dim_v, KVD = (size_t)hp->n_head_kv * hp->head_dim_v;
    size_t wide = HT_MAX(HT_MAX(E, QD + 2 * KD), HT_MAX(VD, (size_t)hp->n_ff));
    c->x = xcalloc(B * E, sizeof(float), &fail);
    c->xb = xcalloc(B * wide, sizeof(float), &fail);
    c->xb2 = xcalloc(B * wide, sizeof(float), &fail);
    c->q = xcalloc(B * (QD + 2 * KD), sizeof(float), &fail);   /* room for fused QKV output */
    c->k = xcalloc(B * KD, sizeof(float), &fail);
    c->v = xcalloc(B * KVD, sizeof(float), &fail);
    c->att = xcalloc(B * VD, sizeof(float), &fail);
    c->hb = xcalloc(B * HT_MAX((size_t)hp->n_ff, QD + 2 * KD), sizeof(float), &fail);
    c->hb2 = xcalloc(B * (size_t)hp->n_ff, sizeof(float), &fail);
    c->qact_row_cap = matmul_act_row_bytes((int64_t)wide);
    c->qact = xcalloc(B, c->qact_row_cap, &fail);
    c->att_scores = xcalloc((size_t)c->n_threads * 2 * (size_t)c->n_ctx, sizeof(float), &fail);   /* scores + gather */
    c->rope_cos = xcalloc(B * (size_t)(hp->head_dim / 2 + 1) * 2, sizeof(float), &fail);
    c->rope_sin = xcalloc(B * (size_t)(hp->head_dim / 2 + 1) * 2, sizeof(float), &fail);
    c->max_rows = c->n_ctx * c->n_seq;
    c->row_out = xcalloc((size_t)c->max_rows, sizeof(int), &fail);
    c->b_pos = xcalloc((size_t)c->max_rows, sizeof(int32_t), &fail);
    c->b_seq = xcalloc((size_t)c->max_rows, sizeof(int32_t), &fail);
    c->b_want = xcalloc((size_t)c->max_rows, 1, &fail);
    c->seq_next = xcalloc((size_t)c->n_seq, sizeof(int), &fail);
    c->seq_len = xcalloc((size_t)c->n_seq, sizeof(int), &fail);
    c->kv = xcalloc((size_t)hp->n_layer, sizeof *c->kv, &fail);
    size_t esz = c->kv_type == HT_F32 ? 4 : 2;
    for (int il = 0; !fail && il < hp->n_layer; il++) {
        ht_kv_layer *L = &c->kv[il];
        L->cap = c->n_ctx;
        if (ctx_layer_is_swa(m, il) && hp->sliding_window + c->n_batch < c->n_ctx) {
            L->cap = hp->sliding_window + c->n_batch;   /* ring: a window plus one micro-batch of new rows */
            L->ring = true;
        }
        L->k = xcalloc((size_t)c->n_seq * L->cap * KD, esz, &fail);
        L->v = xcalloc((size_t)c->n_seq * L->cap * KVD, esz, &fail);
    }
    if (!fail) c->pool = pool_new(c->n_threads);
    if (fail || !c->pool) { hearth_ctx_free(c); return herr(err, "out of memory allocating a context of %d tokens", p.n_ctx); }
    *out = c;
    return 0;
}

void hearth_ctx_free(hearth_ctx *c) {
    if (!c) return;
    if (c->pool) pool_free(c->pool);
    if (c->kv) for (int il = 0; il < c->m->hp.n_layer; il++) { free(c->kv[il].k); free(c->kv[il].v); }
    free(c->kv);
    void *bufs[] = { c->x, c->xb, c->xb2, c->q, c->k, c->v, c->att, c->hb, c->hb2, c->qact, c->att_scores,
                     c->rope_cos, c->rope_sin, c->row_out, c->seq_len, c->b_pos, c->b_seq, c->b_want, c->seq_next, c->out_logits, c->out_hidden };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(c);
}

int hearth_ctx_n_ctx(const hearth_ctx *c) { return c->n_ctx; }
hearth_model *hearth_ctx_model(const hearth_ctx *c) { return c->m; }
int hearth_seq_len(const hearth_ctx *c, int seq) { return seq >= 0 && seq < c->n_seq ? c->seq_len[seq] : 0; }
/* How far back a sequence can be truncated and still continue: a ring (sliding-window layer) holds only the
 * last cap positions, and the next token must see the `window` before it. INT_MAX without rings. */
static int ring_slack(const hearth_ctx *c) {
    int slack = INT_MAX;
    for (int il = 0; il < c->m->hp.n_layer; il++)
        if (c->kv[il].ring) slack = HT_MIN(slack, c->kv[il].cap - c->m->hp.sliding_window);
    return slack;
}

void hearth_seq_truncate(hearth_ctx *c, int seq, int pos) {
    if (seq < 0 || seq >= c->n_seq || pos < 0 || pos >= c->seq_len[seq]) return;
    if (pos > 0 && c->seq_len[seq] - pos > ring_slack(c)) pos = 0;   /* the window before pos is overwritten */
    c->seq_len[seq] = pos;
}

size_t ctx_kv_bytes(const hearth_ctx *c, int il) {
    if (il < 0) {
        size_t sum = 0;
        for (int i = 0; i < c->m->hp.n_layer; i++) sum += ctx_kv_bytes(c, i);
        return sum;
    }
    const ht_hparams *hp = &c->m->hp;
    size_t esz = c->kv_type == HT_F32 ? 4 : 2;
    size_t row = (size_t)hp->n_head_kv * (size_t)(hp->head_dim + hp->head_dim_v) * esz;
    return (size_t)c->n_seq * (size_t)c->kv[il].cap * row;
}

const float *hearth_logits(const hearth_ctx *c, int i) {
    if (i < 0 || i >= c->n_rows || c->row_out[i] < 0 || !c->out_logits) return NULL;
    return c->out_logits + (size_t)c->row_out[i] * c->m->hp.n_vocab;
}

const float *hearth_hidden(const hearth_ctx *c, int i) {
    if (i < 0 || i >= c->n_rows || c->row_out[i] < 0 || !c->out_hidden) return NULL;
    return c->out_hidden + (size_t)c->row_out[i] * c->m->hp.n_embd;
}

/* ---- token embeddings ---- */
void ctx_embed_tokens(hearth_ctx *c, const ht_ubatch *ub, float *x) {
    const ht_tensor *E = &c->m->tok_embd;
    const ht_traits *tr = ht_get_traits(E->type);
    int n = (int)E->ne[0];
    for (int i = 0; i < ub->n; i++)
        tr->to_float((const uint8_t *)E->data + (size_t)ub->tokens[i] * E->row_bytes, x + (size_t)i * n, n);
    if (c->m->hp.embd_scale != 1.0f) op_scale(x, c->m->hp.embd_scale, ub->n * n);
}

void ctx_embed_rows(const ht_ubatch *ub, const ht_tensor *T, const int32_t *ids, float *x) {
    const ht_traits *tr = ht_get_traits(T->type);
    int n = (int)T->ne[0];
    for (int i = 0; i < ub->n; i++)
        tr->to_float((const uint8_t *)T->data + (size_t)(ids ? ids[i] : 0) * T->row_bytes, x + (size_t)i * n, n);
}

/* ---- rope ---- */
void ctx_rope_tables(hearth_ctx *c, const ht_ubatch *ub, float base, float scale) {
    const ht_hparams *hp = &c->m->hp;
    const float *ff = c->m->rope_freqs.data;
    int h = hp->n_rot / 2;
    for (int i = 0; i < ub->n; i++)
        op_rope_table(c->rope_cos + (size_t)i * h, c->rope_sin + (size_t)i * h, ub->pos[i], hp->n_rot, base,
                      scale, ff);
}

void ctx_rope(hearth_ctx *c, const ht_ubatch *ub, float *x, int n_heads) {
    const ht_hparams *hp = &c->m->hp;
    int h = hp->n_rot / 2;
    for (int i = 0; i < ub->n; i++)
        op_rope(x + (size_t)i * n_heads * hp->head_dim, n_heads, hp->head_dim, hp->n_rot, c->rope_cos + (size_t)i * h,
                c->rope_sin + (size_t)i * h, hp->rope_type == ROPE_NEOX);
}

/* ---- attention over the KV cache ---- */
typedef struct {
    hearth_ctx *c;
    const ht_ubatch *ub;
    const ht_kv_layer *L;
    const float *q;
    float *out;
    float scale;
    int window;
    bool causal;
    const int *seq_end;      /* per sequence: cached length after this micro-batch */
} att_job;

/* Attention's two products go through the tensor-type kernels: q·k is the F16 (or F32) weight dot with
 * F32 activations, and V is cached transposed ([seq][kv head][dim][position]) so that softmax·V is, per
 * output dimension, a dot product over contiguous positions. A ring buffer's range may wrap: then the
 * positions are two contiguous segments. */
static float dot_range(ht_vec_dot_fn dot, const uint8_t *row, size_t esz, int cap, int lo, int n, const float *p,
                       uint8_t *tmp) {
    int s0 = lo % cap, n0 = HT_MIN(n, cap - s0);
    if (n0 == n) return dot(n, row + (size_t)s0 * esz, p);
    /* wrapped: gather in position order so the sum does not depend on where the ring wrapped */
    memcpy(tmp, row + (size_t)s0 * esz, (size_t)n0 * esz);
    memcpy(tmp + (size_t)n0 * esz, row, (size_t)(n - n0) * esz);
    return dot(n, tmp, p);
}

static void attention_job(void *arg, int ith, int nth) {
    att_job *j = arg;
    hearth_ctx *c = j->c;
    const ht_hparams *hp = &c->m->hp;
    int hd = hp->head_dim, hdv = hp->head_dim_v, group = hp->n_head / hp->n_head_kv, cap = j->L->cap;
    size_t esz = c->kv_type == HT_F32 ? 4 : 2;
    size_t KD = (size_t)hp->n_head_kv * hd;
    ht_vec_dot_fn dot = ht_get_traits(c->kv_type)->vec_dot;
    float *sc = c->att_scores + (size_t)ith * 2 * c->n_ctx;
    uint8_t *tmp = (uint8_t *)(sc + c->n_ctx);
    int total = j->ub->n * hp->n_head;
    for (int task = ith; task < total; task += nth) {
        int i = task / hp->n_head, h = task % hp->n_head, kvh = h / group;
        int s = j->ub->seq[i], p = j->ub->pos[i];
        int hi = j->causal ? p : j->seq_end[s] - 1;
        int lo = j->window > 0 ? HT_MAX(0, p - j->window + 1) : 0;
        const float *q = j->q + ((size_t)i * hp->n_head + h) * hd;
        const uint8_t *kbase = (const uint8_t *)j->L->k + ((size_t)s * cap * KD + (size_t)kvh * hd) * esz;
        const uint8_t *vbase = (const uint8_t *)j->L->v + (((size_t)s * hp->n_head_kv + kvh) * hdv) * cap * esz;
        int n = hi - lo + 1;
        float mx = -INFINITY;
        for (int t = 0; t < n; t++) {
            sc[t] = dot(hd, kbase + (size_t)((lo + t) % cap) * KD * esz, q) * j->scale;
            if (sc[t] > mx) mx = sc[t];
        }
        double sum = 0;
        for (int t = 0; t < n; t++) { sc[t] = expf(sc[t] - mx); sum += sc[t]; }
        float inv = (float)(1.0 / sum);
        for (int t = 0; t < n; t++) sc[t] *= inv;
        float *o = j->out + ((size_t)i * hp->n_head + h) * hdv;
        for (int d = 0; d < hdv; d++) o[d] = dot_range(dot, vbase + (size_t)d * cap * esz, esz, cap, lo, n, sc, tmp);
    }
}

static void kv_store(void *dst, uint32_t type, const float *src, int n) {
    if (type == HT_F32) memcpy(dst, src, (size_t)n * sizeof(float));
    else { uint16_t *h = dst; for (int i = 0; i < n; i++) h[i] = f32_to_fp16(src[i]); }
}

/* V^T[s][kvh][d][slot] = v[kvh * hdv + d] */
static void kv_store_v(ht_kv_layer *L, uint32_t type, int s, int slot, const float *v, int n_kv, int hdv) {
    size_t base = (size_t)s * n_kv * hdv * L->cap + (size_t)slot;
    if (type == HT_F32) { float *V = L->v; for (int e = 0; e < n_kv * hdv; e++) V[base + (size_t)e * L->cap] = v[e]; }
    else { uint16_t *V = L->v; for (int e = 0; e < n_kv * hdv; e++) V[base + (size_t)e * L->cap] = f32_to_fp16(v[e]); }
}

void ctx_attention(hearth_ctx *c, int il, const ht_ubatch *ub, const float *q, const float *k, const float *v,
                   float *out, float scale, int window) {
    const ht_hparams *hp = &c->m->hp;
    ht_kv_layer *L = &c->kv[il];
    size_t esz = c->kv_type == HT_F32 ? 4 : 2;
    int KD = hp->n_head_kv * hp->head_dim, VD = hp->n_head_kv * hp->head_dim_v;
    int seq_end[256] = { 0 };
    for (int i = 0; i < ub->n; i++) {
        int s = ub->seq[i], slot = ub->pos[i] % L->cap;
        kv_store((uint8_t *)L->k + ((size_t)s * L->cap + slot) * KD * esz, c->kv_type, k + (size_t)i * KD, KD);
        kv_store_v(L, c->kv_type, s, slot, v + (size_t)i * VD, hp->n_head_kv, hp->head_dim_v);
        if (ub->pos[i] + 1 > seq_end[s]) seq_end[s] = ub->pos[i] + 1;
    }
    att_job j = { .c = c, .ub = ub, .L = L, .q = q, .out = out, .scale = scale, .window = window,
                  .causal = c->m->hp.causal, .seq_end = seq_end };
    pool_run(c->pool, attention_job, &j);
}

/* ---- output head ---- */
/* Packs the rows of src ([ub->n][E]) the batch wants into dst, in order; returns their count. */
static int gather_wanted(const ht_ubatch *ub, const float *src, float *dst, int E) {
    int n = 0;
    for (int i = 0; i < ub->n; i++)
        if (ub->want[i]) memmove(dst + (size_t)n++ * E, src + (size_t)i * E, (size_t)E * sizeof(float));
    return n;
}

void ctx_output_head(hearth_ctx *c, const ht_ubatch *ub, const float *hidden, const float *head) {
    hearth_model *m = c->m;
    int E = m->hp.n_embd, first = -1;
    for (int i = 0; i < ub->n && first < 0; i++)
        if (ub->want[i]) first = c->row_out[ub->row0 + i];
    if (first < 0) return;
    int n = gather_wanted(ub, hidden, c->out_hidden + (size_t)first * E, E);
    if (!m->hp.logits || !head) return;
    gather_wanted(ub, head, c->xb2, E);
    const ht_tensor *W = m->output.data ? &m->output : &m->tok_embd;
    matmul_bias(c, W, &m->output_b, c->xb2, n, c->out_logits + (size_t)first * m->hp.n_vocab);
}

void ctx_output(hearth_ctx *c, const ht_ubatch *ub, const float *x) { ctx_output_head(c, ub, x, x); }

/* ---- decode ---- */
static int ensure_outputs(hearth_ctx *c, int n_out, hearth_err *err) {
    if (n_out <= c->n_out_cap) return 0;
    int cap = HT_MAX(n_out, 8);
    const ht_hparams *hp = &c->m->hp;
    float *lg = hp->logits ? realloc(c->out_logits, (size_t)cap * hp->n_vocab * sizeof(float)) : NULL;
    if (hp->logits && !lg) return herr(err, "out of memory for %d rows of logits", n_out);
    if (lg) c->out_logits = lg;
    float *hd = realloc(c->out_hidden, (size_t)cap * hp->n_embd * sizeof(float));
    if (!hd) return herr(err, "out of memory for %d output rows", n_out);
    c->out_hidden = hd;
    c->n_out_cap = cap;
    return 0;
}

int hearth_decode(hearth_ctx *c, const hearth_batch *b, hearth_err *err) {
    const ht_hparams *hp = &c->m->hp;
    if (!b || b->n <= 0 || !b->tokens) return herr(err, "empty batch");
    if (b->n > c->max_rows) {
        if (c->m->pos_embd.data && c->n_seq == 1 && b->n > c->m->pos_embd.ne[1])
            return herr(err, "sequence of %d tokens passes the model's context length (%lld learned positions)", b->n,
                        (long long)c->m->pos_embd.ne[1]);
        return herr(err, "batch of %d tokens exceeds the context (%d)", b->n, c->max_rows);
    }
    if (!hp->causal && b->n > c->n_batch)   /* bidirectional: every token must see the whole sequence at once */
        return herr(err, "batch of %d tokens exceeds n_batch %d: an encoder sees its whole batch at once (raise n_batch)",
                    b->n, c->n_batch);
    int32_t *pos = c->b_pos, *seq = c->b_seq;
    int8_t *want = c->b_want;
    int *next = c->seq_next;
    memcpy(next, c->seq_len, (size_t)c->n_seq * sizeof *next);
    int n_out = 0;
    for (int i = 0; i < b->n; i++) {
        int s = b->seq ? b->seq[i] : 0;
        if (s < 0 || s >= c->n_seq) return herr(err, "batch row %d: sequence %d out of range (0..%d)", i, s, c->n_seq - 1);
        if (b->tokens[i] < 0 || b->tokens[i] >= hp->n_vocab)
            return herr(err, "batch row %d: token %d out of range (vocabulary of %d)", i, b->tokens[i], hp->n_vocab);
        if (!hp->causal && c->seq_len[s] > 0)
            return herr(err, "sequence %d already holds %d tokens: an encoder evaluates whole sequences (clear it with hearth_seq_truncate)",
                        s, c->seq_len[s]);
        int p = b->pos ? b->pos[i] : next[s];
        if (p != next[s]) return herr(err, "batch row %d: position %d, but sequence %d continues at %d", i, p, s, next[s]);
        if (p >= c->n_ctx) {
            if (c->m->pos_embd.data && p >= c->m->pos_embd.ne[1])
                return herr(err, "sequence of %d tokens passes the model's context length (%lld learned positions)",
                            p + 1, (long long)c->m->pos_embd.ne[1]);
            return herr(err, "context full: sequence %d would reach %d tokens, context is %d", s, p + 1, c->n_ctx);
        }
        next[s] = p + 1;
        pos[i] = p;
        seq[i] = s;
        want[i] = b->want_logits ? (b->want_logits[i] != 0) : (i == b->n - 1);
        n_out += want[i];
    }
    if (ensure_outputs(c, n_out, err)) return -1;
    for (int i = 0, o = 0; i < b->n; i++) c->row_out[i] = want[i] ? o++ : -1;
    c->n_rows = b->n;
    c->n_out = n_out;
    for (int i0 = 0; i0 < b->n; i0 += c->n_batch) {
        ht_ubatch ub = { .n = HT_MIN(c->n_batch, b->n - i0), .tokens = b->tokens + i0, .pos = pos + i0,
                         .seq = seq + i0, .want = want + i0, .row0 = i0 };
        c->m->arch->forward(c, &ub);
        for (int i = 0; i < ub.n; i++)
            if (ub.pos[i] + 1 > c->seq_len[ub.seq[i]]) c->seq_len[ub.seq[i]] = ub.pos[i] + 1;
    }
    return 0;
}

/* ---- embeddings ---- */
static int embed_pooling(const hearth_model *m) { return m->arch->encoder ? m->hp.pooling : POOL_MEAN; }

int hearth_embed_rows(const hearth_ctx *c, int n) { return embed_pooling(c->m) == POOL_NONE ? n : 1; }

/* out = mean of the n hidden rows (accumulated in double). */
static void pool_mean(const hearth_ctx *c, int n, float *out) {
    int E = c->m->hp.n_embd;
    for (int k = 0; k < E; k++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += hearth_hidden(c, i)[k];
        out[k] = (float)(s / n);
    }
}

int hearth_embed(hearth_ctx *c, const hearth_token *tokens, int n, float *out, hearth_err *err) {
    if (n <= 0 || !tokens) return herr(err, "nothing to embed");
    int pool = embed_pooling(c->m), E = c->m->hp.n_embd;
    int8_t *want = calloc((size_t)n, 1);
    if (!want) return herr(err, "out of memory");
    if (pool == POOL_MEAN || pool == POOL_NONE) memset(want, 1, (size_t)n);
    else want[pool == POOL_CLS ? 0 : n - 1] = 1;
    hearth_seq_truncate(c, 0, 0);
    hearth_batch b = { .n = n, .tokens = tokens, .want_logits = want };
    int rc = hearth_decode(c, &b, err);
    free(want);
    if (rc) return -1;
    if (pool == POOL_MEAN) pool_mean(c, n, out);
    else if (pool == POOL_NONE)
        for (int i = 0; i < n; i++) memcpy(out + (size_t)i * E, hearth_hidden(c, i), (size_t)E * sizeof(float));
    else memcpy(out, hearth_hidden(c, pool == POOL_CLS ? 0 : n - 1), (size_t)E * sizeof(float));
    return pool == POOL_NONE ? n : 1;
}
