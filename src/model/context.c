/* context.c — inference contexts: the KV cache (F16, F32 or Q8_0), scratch buffers sized once, the thread
 * pool, and hearth_decode(), which validates a batch, cuts it into micro-batches and runs the architecture's
 * forward pass. Also the shared attention over the cache and the output head used by every family. */
#include "model/context.h"

#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/matmul.h"
#include "model/mla.h"
#include "model/pack.h"
#include "model/lora.h"
#include "model/recurrent.h"
#include "compute/ops.h"
#include "dist/dist.h"

hearth_ctx_params hearth_ctx_default_params(void) {
    return (hearth_ctx_params){ .n_ctx = 0, .n_seq = 1, .n_batch = 512, .n_threads = 0, .cache_type = HEARTH_CACHE_F16,
                                .cache_type_k = HEARTH_CACHE_AS_BOTH, .cache_type_v = HEARTH_CACHE_AS_BOTH };
}

/* Context buffers (the KV cache above all) are zero pages that the kernel fills on first touch: a position
 * range never stored costs no memory. calloc gives that only while glibc serves a block by mmap; once a freed
 * large block has raised its mmap threshold (an earlier context of the process: hearth bench's timed second
 * load, a server that reopens one), it carves blocks of up to 32 MiB from the heap and zeroes them by hand,
 * and the whole cache is resident before a token is stored (qwen3-0.6b, 2048 positions: 648 MiB instead of
 * 447 after 16 decoded tokens). So blocks of CTX_MAP_MIN bytes or more are mapped here; a 64-byte header
 * keeps the mapping's length (0: from calloc), for ctx_buf_free. 64 KiB: the scratch sized by the micro-batch
 * (~2 MB for a 1B model) and the per-row bookkeeping sized by the context are paid for as used, too. The
 * mappings opt out of transparent huge pages: with THP "always" a few stored positions made a 2 MiB page of
 * every head resident (a 16384-position cache of 16 MiB: 4 MiB after 8 tokens instead of 64 KiB). */
#define CTX_MAP_MIN ((size_t)1 << 16)
#define CTX_BUF_HDR 64
void *ctx_buf_calloc(size_t n, size_t sz, bool *fail) {
    n = n ? n : 1, sz = sz ? sz : 1;
    if (n > (SIZE_MAX - CTX_BUF_HDR) / sz) { *fail = true; return NULL; }
    size_t bytes = n * sz + CTX_BUF_HDR;
    uint8_t *p;
    if (bytes >= CTX_MAP_MIN) {
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) p = NULL;
        else madvise(p, bytes, MADV_NOHUGEPAGE);   /* 4 KiB granularity also where THP is "always" */
    } else {
        p = calloc(1, bytes);
        bytes = 0;
    }
    if (!p) { *fail = true; return NULL; }
    memcpy(p, &bytes, sizeof bytes);
    return p + CTX_BUF_HDR;
}

void ctx_buf_free(void *q) {
    if (!q) return;
    uint8_t *p = (uint8_t *)q - CTX_BUF_HDR;
    size_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    if (bytes) munmap(p, bytes);
    else free(p);
}

static size_t att_scratch_floats(const hearth_ctx *c);
static int kv_rotation(uint32_t type, int hd, bool is_k);

bool ctx_layer_is_swa(const hearth_model *m, int il) {
    const ht_hparams *hp = &m->hp;
    if (hp->sliding_window <= 0) return false;
    return hp->swa_per_layer ? m->layers[il].swa : hp->swa_period > 0 && (il + 1) % hp->swa_period != 0;
}

int hearth_ctx_new(hearth_model *m, const hearth_ctx_params *pp, hearth_ctx **out, hearth_err *err) {
    *out = NULL;
    if (!m->arch)
        return herr(err, "%s is a tokenizer only, with no weights to evaluate", m->path ? m->path : "this model");
    hearth_ctx_params p = pp ? *pp : hearth_ctx_default_params();
    const ht_hparams *hp = &m->hp;
    if (p.n_ctx <= 0) p.n_ctx = HT_MIN(hp->n_ctx_train > 0 ? hp->n_ctx_train : 4096, 4096);
    if (m->pos_embd.data && p.n_ctx > m->pos_embd.ne[1]) p.n_ctx = (int)m->pos_embd.ne[1];
    if (p.n_ctx > (1 << 22)) return herr(err, "context size %d too large", p.n_ctx);
    if (p.n_seq <= 0) p.n_seq = 1;
    if (p.n_seq > 256) return herr(err, "too many sequences (%d, max 256)", p.n_seq);
    if (p.n_batch <= 0) p.n_batch = 512;
    p.n_batch = HT_MIN(p.n_batch, p.n_ctx * p.n_seq);
    /* The layers index a micro-batch's activations with int: a scratch buffer (a token's widest row times the
     * micro-batch) holds fewer than 2^31 values. A smaller micro-batch changes no result, only the speed. */
    const size_t E = (size_t)hp->n_embd;
    const size_t QD = (size_t)hp->n_head * hp->head_dim, KD = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t VD = (size_t)hp->n_head * hp->head_dim_v, KVD = (size_t)hp->n_head_kv * hp->head_dim_v;
    const size_t QG = hp->attn_gate ? 2 * QD : QD;   /* gated attention: q rows carry the gates too */
    const size_t wide = HT_MAX(HT_MAX(HT_MAX(E, QG + 2 * KD), HT_MAX(VD, (size_t)hp->n_ff)),
                               (size_t)hp->ssm_v_heads * hp->ssm_state);
    size_t widest = wide;
    if (hp->n_expert)
        widest = HT_MAX(widest, (size_t)hp->n_expert_used * HT_MAX(HT_MAX(E, (size_t)hp->n_ff_exp), (size_t)hp->n_expert));
    if (widest > INT_MAX) return herr(err, "this model's layers are too wide for one token (%zu values)", widest);
    p.n_batch = (int)HT_MIN((size_t)p.n_batch, INT_MAX / widest);
    const bool auto_threads = p.n_threads <= 0;
    if (p.n_threads <= 0) { long nc = sysconf(_SC_NPROCESSORS_ONLN); p.n_threads = nc > 0 ? (int)HT_MIN(nc, 64) : 1; }
    if (p.cache_type_k == HEARTH_CACHE_F32 && p.cache_type_v == HEARTH_CACHE_F32)   /* zeroed, not from the defaults */
        p.cache_type_k = p.cache_type_v = HEARTH_CACHE_AS_BOTH;
    const hearth_cache_type ct[2] = { p.cache_type_k == HEARTH_CACHE_AS_BOTH ? p.cache_type : p.cache_type_k,
                                      p.cache_type_v == HEARTH_CACHE_AS_BOTH ? p.cache_type : p.cache_type_v };
    for (int w = 0; w < 2; w++) {
        const char *kv = w ? "V" : "K";
        if (ct[w] != HEARTH_CACHE_F32 && ct[w] != HEARTH_CACHE_F16 && ct[w] != HEARTH_CACHE_BF16 && ct[w] != HEARTH_CACHE_Q8_0 &&
            ct[w] != HEARTH_CACHE_Q4_0)
            return herr(err, "unsupported %s cache type %d (f32, f16, bf16, q8_0 or q4_0)", kv, (int)ct[w]);
        for (int il = 0; il < hp->n_layer && (!w || !hp->kv_lora_rank); il++) {   /* each layer's head size */
            const int hd = w ? m->layers[il].head_dim_v : m->layers[il].head_dim;
            if (!ht_row_size((uint32_t)ct[w], hd))
                return herr(err, "a %s %s cache needs head sizes that are multiples of %d (this model's %s heads: %d): use f16 or bf16",
                            ht_get_traits((uint32_t)ct[w])->name, kv, ht_get_traits((uint32_t)ct[w])->blck, kv, hd);
        }
    }

    if (dist_plan(m, err)) return -1;   /* under MPI: this rank's layers, before their cache is sized */
    for (int il = m->layer_lo; il < m->layer_hi; il++)
        if (m->layers[il].kv_src < m->layer_lo)
            return herr(err, "layer %d attends layer %d's KV cache, which another process holds: split the layers elsewhere",
                        il, m->layers[il].kv_src);
    hearth_ctx *c = calloc(1, sizeof *c);
    if (!c) return herr(err, "out of memory");
    c->m = m;
    c->dist_id = -1;
    c->n_ctx = p.n_ctx; c->n_seq = p.n_seq; c->n_batch = p.n_batch; c->n_threads = p.n_threads;
    c->k_type = (uint32_t)ct[0];
    c->v_type = (uint32_t)ct[1];
    bool fail = false;
    size_t B = (size_t)c->n_batch;
    c->x = ctx_buf_calloc(B * E, sizeof(float), &fail);
    c->xb = ctx_buf_calloc(B * wide, sizeof(float), &fail);
    c->xb2 = ctx_buf_calloc(B * wide, sizeof(float), &fail);
    c->q = ctx_buf_calloc(B * (QG + 2 * KD), sizeof(float), &fail);   /* room for fused QKV output */
    c->k = ctx_buf_calloc(B * KD, sizeof(float), &fail);
    c->v = ctx_buf_calloc(B * KVD, sizeof(float), &fail);
    c->att = ctx_buf_calloc(B * VD, sizeof(float), &fail);
    c->hb = ctx_buf_calloc(B * HT_MAX(HT_MAX((size_t)hp->n_ff, QD + 2 * KD), HT_MAX(E, (size_t)hp->n_embd_per_layer)),
                           sizeof(float), &fail);
    c->hb2 = ctx_buf_calloc(B * HT_MAX((size_t)hp->n_ff, E), sizeof(float), &fail);   /* E: per-layer embeddings */
    c->qact_row_cap = matmul_act_row_bytes((int64_t)wide);
    c->qact = ctx_buf_calloc(B, c->qact_row_cap, &fail);
    c->att_stride = att_scratch_floats(c);
    c->att_scores = ctx_buf_calloc((size_t)c->n_threads * c->att_stride, sizeof(float), &fail);
    c->rope_cos = ctx_buf_calloc(B * (size_t)(hp->head_dim / 2 + 1) * 2, sizeof(float), &fail);
    c->rope_sin = ctx_buf_calloc(B * (size_t)(hp->head_dim / 2 + 1) * 2, sizeof(float), &fail);
    c->rope_pos = ctx_buf_calloc(B, sizeof(int32_t), &fail);
    c->head_seq = ctx_buf_calloc(B, sizeof(int32_t), &fail);
    if (hp->n_embd_per_layer) {
        const size_t P = (size_t)hp->n_layer * hp->n_embd_per_layer;
        c->ple = ctx_buf_calloc(B * P, sizeof(float), &fail);
        c->ple_row = ctx_buf_calloc(P, sizeof(float), &fail);
    }
    if (hp->n_altup) c->altup = ctx_buf_calloc((size_t)(hp->n_altup + 1) * B * E, sizeof(float), &fail);
    if (hp->n_expert) {
        size_t S = B * (size_t)hp->n_expert_used, NE = (size_t)hp->n_expert, F = (size_t)hp->n_ff_exp, W = HT_MAX(E, F);
        c->moe_logits = ctx_buf_calloc(B * NE, sizeof(float), &fail);
        c->moe_sel = ctx_buf_calloc(S, sizeof(int), &fail);
        c->moe_w = ctx_buf_calloc(S, sizeof(float), &fail);
        c->moe_row = ctx_buf_calloc(S, sizeof(int), &fail);
        c->moe_src = ctx_buf_calloc(S, sizeof(int), &fail);
        c->moe_cnt = ctx_buf_calloc(NE, sizeof(int), &fail);
        c->moe_first = ctx_buf_calloc(NE, sizeof(int), &fail);
        c->moe_active = ctx_buf_calloc(NE, sizeof(int), &fail);
        c->moe_g = ctx_buf_calloc(S * F, sizeof(float), &fail);
        c->moe_u = ctx_buf_calloc(S * F, sizeof(float), &fail);
        c->moe_y = ctx_buf_calloc(S * E, sizeof(float), &fail);
        c->moe_qact_row = HT_MAX(matmul_act_row_bytes((int64_t)W), W * sizeof(float));
        c->moe_qact = ctx_buf_calloc(S, c->moe_qact_row, &fail);
    }
    c->max_rows = c->n_ctx * c->n_seq;
    if (m->tp_size > 1) {   /* whole rows gathered from the ranks' parts (dist_tp_gather) */
        const size_t K = (size_t)HT_MAX(hp->n_expert_used, 1);   /* experts: K rows a token */
        size_t in = HT_MAX(HT_MAX((size_t)m->tp_n_head * hp->head_dim_v, (size_t)hp->n_ff), K * hp->n_ff_exp);
        c->tp_in = ctx_buf_calloc(B * in, sizeof(float), &fail);
        c->tp_out = ctx_buf_calloc(B * K * E, sizeof(float), &fail);
        c->tp_gather = ctx_buf_calloc(B * HT_MAX(in, K * E), sizeof(float), &fail);
    }
    c->row_out = ctx_buf_calloc((size_t)c->max_rows, sizeof(int), &fail);
    c->b_pos = ctx_buf_calloc((size_t)c->max_rows, sizeof(int32_t), &fail);
    c->b_seq = ctx_buf_calloc((size_t)c->max_rows, sizeof(int32_t), &fail);
    c->b_want = ctx_buf_calloc((size_t)c->max_rows, 1, &fail);
    c->seq_next = ctx_buf_calloc((size_t)c->n_seq, sizeof(int), &fail);
    c->seq_len = ctx_buf_calloc((size_t)c->n_seq, sizeof(int), &fail);
    c->kv = ctx_buf_calloc((size_t)hp->n_layer, sizeof *c->kv, &fail);
    for (int il = 0; !fail && il < hp->n_layer; il++) {
        ht_kv_layer *L = &c->kv[il];
        const ht_layer *ML = &m->layers[il];
        if (ML->kv_shared) continue;   /* it reads layer kv_src's cache */
        const size_t krow = ht_row_size(c->k_type, ML->head_dim), vrow = ht_row_size(c->v_type, ML->head_dim_v);
        L->n_kv = ML->n_head_kv, L->hd = ML->head_dim, L->hdv = ML->head_dim_v;
        L->cap = c->n_ctx;
        if (ctx_layer_is_swa(m, il) && hp->sliding_window + c->n_batch < c->n_ctx) {
            L->cap = hp->sliding_window + c->n_batch;   /* ring: a window plus one micro-batch of new rows */
            L->ring = true;
        }
        if (il < m->layer_lo || il >= m->layer_hi || m->layers[il].recurrent) continue;   /* another rank's (MPI) */
        L->k = ctx_buf_calloc((size_t)c->n_seq * L->cap * L->n_kv, krow, &fail);
        if (hp->kv_lora_rank) continue;   /* latent attention: V is part of the K row (model/mla.c) */
        L->v = ctx_buf_calloc((size_t)c->n_seq * L->cap * L->n_kv, vrow, &fail);
        L->span = ctx_buf_calloc((size_t)c->n_seq, sizeof(int), &fail);
    }
    if (!fail && rec_ctx_new(c)) fail = true;
    if (!fail) c->pool = pool_new(c->n_threads);
    if (auto_threads) c->serial_below = ctx_serial_below(m, c->n_threads);
    if (fail || !c->pool) { hearth_ctx_free(c); return herr(err, "out of memory allocating a context of %d tokens", p.n_ctx); }
    if (dist_ctx_open(c, err) || model_pack_weights(m, c->pool, err) || dist_ctx_ready(c, err)) {
        hearth_ctx_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

void hearth_ctx_free(hearth_ctx *c) {
    if (!c) return;
    dist_ctx_close(c);
    if (c->pool) pool_free(c->pool);
    if (c->kv)
        for (int il = 0; il < c->m->hp.n_layer; il++) {
            ctx_buf_free(c->kv[il].k);
            ctx_buf_free(c->kv[il].v);
            ctx_buf_free(c->kv[il].span);
        }
    ctx_buf_free(c->kv);
    rec_ctx_free(c);
    lora_ctx_free(c);
    void *bufs[] = { c->x, c->xb, c->xb2, c->q, c->k, c->v, c->att, c->hb, c->hb2, c->qact, c->att_scores,
                     c->rope_cos, c->rope_sin, c->rope_pos, c->head_seq, c->row_out, c->seq_len, c->b_pos, c->b_seq, c->b_want,
                     c->seq_next, c->ple, c->ple_row, c->altup, c->moe_logits, c->moe_sel, c->moe_w, c->moe_row, c->moe_src, c->moe_cnt,
                     c->moe_first, c->moe_active, c->moe_g, c->moe_u, c->moe_y, c->moe_qact, c->tp_in, c->tp_out, c->tp_gather };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ctx_buf_free(bufs[i]);
    free(c->out_logits);   /* grown by realloc (ensure_outputs) */
    free(c->out_hidden);
    free(c->dist_rows);
    free(c);
}

int hearth_ctx_n_ctx(const hearth_ctx *c) { return c->n_ctx; }
void hearth_ctx_cache_types(const hearth_ctx *c, hearth_cache_type *k, hearth_cache_type *v) {
    *k = (hearth_cache_type)c->k_type, *v = (hearth_cache_type)c->v_type;
}
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

int hearth_seq_cut_room(const hearth_ctx *c, int seq) {
    if (seq < 0 || seq >= c->n_seq) return 0;
    return HT_MIN(ring_slack(c), rec_cut_room(c, seq));
}

void hearth_seq_truncate(hearth_ctx *c, int seq, int pos) {
    if (seq < 0 || seq >= c->n_seq || pos < 0 || pos >= c->seq_len[seq]) return;
    if (pos > 0 && c->seq_len[seq] - pos > ring_slack(c)) pos = 0;   /* the window before pos is overwritten */
    if (pos < rec_cut_floor(c, seq)) pos = 0;   /* a recurrent state before its current chunk is gone */
    if (pos == 0) rec_set_pending(c, seq, false);
    c->seq_len[seq] = pos;
    if (pos == 0)   /* nothing left to keep: the next tokens start short rows again */
        for (int il = 0; il < c->m->hp.n_layer; il++) if (c->kv[il].span) c->kv[il].span[seq] = 0;
    dist_truncate(c, seq, pos);
}

/* ---- layout of the caches ----
 * BF16, Q8_0 and Q4_0 caches keep one row per position and kv head, the positions of one kv head contiguous
 * ([seq][kv head][slot][row]): attention reads one kv head's rows as one stream, whole cache lines of them (with
 * the heads of a position side by side, a head's 68-byte Q8_0 rows lay n_kv rows apart and mostly straddled two
 * lines). Latent (MLA) rows are one per position (model/mla.c). Prompt caches move rows position by position,
 * head after head, whatever the layout. F32 and F16 caches are transposed:
 * K^T: each KV head's cap slots in blocks of KT_BLOCK, a block [head_dim][KT_BLOCK] (the last one, when cap
 * is not a multiple, [head_dim][what is left]): one run of memory that a block's scores read front to back.
 * V^T: rows of span[seq] positions ([head_dim_v][span]), read one row at a time by softmax·V. With rows cap
 * positions apart, each row of a short context began a new page, and decode at a few hundred positions went
 * through one TLB miss and one cold stream per row. span starts at 64 and doubles (up to cap) when a
 * position past it is stored; the rows are then moved apart, last first (about one more copy of V over a
 * sequence's life). Only the layout moves: every kernel reads the same values in the same order. */
#define KT_BLOCK 64

/* Whether a cache of this type keeps rows (one per position) rather than the transposed layout. */
static inline bool kv_rows(uint32_t type) { return type != HT_F32 && type != HT_F16; }

/* Slots in the K^T block that holds slot `slot` of a cache of cap slots (its row length). */
static inline int kt_width(int cap, int slot) { return HT_MIN(KT_BLOCK, cap - slot / KT_BLOCK * KT_BLOCK); }

/* Element index of (dim d, slot) of KV head kvh of sequence seq in a K^T cache of cap slots a head. */
static inline size_t kt_cell(int n_kv, int hd, int cap, int seq, int kvh, int d, int slot) {
    const int b0 = slot / KT_BLOCK * KT_BLOCK;
    return (((size_t)seq * n_kv + kvh) * cap + (size_t)b0) * hd + (size_t)d * kt_width(cap, slot) + (size_t)(slot - b0);
}

/* Element index of (value e of a token's ne, slot) of sequence seq in a V^T cache whose rows hold span slots. */
static inline size_t vt_cell(int ne, int cap, int span, int seq, int e, int slot) {
    return (size_t)seq * ne * cap + (size_t)e * span + (size_t)slot;
}

/* Byte offset of (sequence seq, kv head kvh, slot) in a row cache of rows rs bytes. */
static inline size_t kv_row_off(const ht_kv_layer *L, size_t rs, int seq, int kvh, int slot) {
    return (((size_t)seq * L->n_kv + kvh) * L->cap + (size_t)slot) * rs;
}

static void kv_widen(hearth_ctx *c, ht_kv_layer *L, int seq, int need) {
    if (kv_rows(c->v_type) || !L->v || HT_MIN(need, L->cap) <= L->span[seq]) return;
    int old = L->span[seq], span = 64;
    while (span < need && span < L->cap) span *= 2;
    span = HT_MIN(span, L->cap);
    const size_t esz = ht_row_size(c->v_type, 1);
    const int ne = L->n_kv * L->hdv;
    uint8_t *x = (uint8_t *)L->v + vt_cell(ne, L->cap, 0, seq, 0, 0) * esz;
    for (int r = ne - 1; r > 0 && old > 0; r--) memmove(x + (size_t)r * span * esz, x + (size_t)r * old * esz, (size_t)old * esz);
    L->span[seq] = span;
}

/* ---- a sequence's KV cache out and back in (prompt caches) ----
 * Per position range, layer by layer: K as [n][n_head_kv * head_dim] values, then V as [n][n_head_kv * head_dim_v]
 * (F32 / F16 caches are kept transposed; they are gathered and scattered), or rows as stored (BF16, Q8_0, Q4_0). */
static bool kv_portable(const hearth_ctx *c) {
    if (c->dist_id >= 0) return false;   /* the layers' caches are spread over the ranks */
    for (int il = 0; il < c->m->hp.n_layer; il++) if (c->kv[il].ring) return false;
    return true;
}

/* Bytes layer il caches per token: K and V rows, or the latent row alone (latent attention); none for a recurrent
 * layer or one that reads another's cache. */
static size_t kv_layer_token_bytes(const hearth_ctx *c, int il) {
    const ht_hparams *hp = &c->m->hp;
    const ht_layer *L = &c->m->layers[il];
    if (L->recurrent || L->kv_shared) return 0;
    return (size_t)L->n_head_kv *
           (ht_row_size(c->k_type, L->head_dim) + (hp->kv_lora_rank ? 0 : ht_row_size(c->v_type, L->head_dim_v)));
}

size_t hearth_kv_token_bytes(const hearth_ctx *c) {
    size_t sum = 0;
    for (int il = 0; il < c->m->hp.n_layer; il++) sum += kv_layer_token_bytes(c, il);
    return sum;
}

/* Positions pos0.. pos0 + n - 1 of one cache (K or V) of sequence seq to buf (out) or back: rows as stored
 * (BF16, Q8_0, Q4_0), or gathered from / scattered to the transposed layouts (below). */
static uint8_t *kv_copy_rows(const hearth_ctx *c, const ht_kv_layer *L, bool is_k, int seq, int pos0, int n,
                             uint8_t *buf, bool out) {
    const int n_kv = L->n_kv, hd = is_k ? L->hd : L->hdv, ne = n_kv * hd;
    uint8_t *X = is_k ? L->k : L->v;
    const uint32_t type = is_k ? c->k_type : c->v_type;
    if (c->m->hp.kv_lora_rank) {   /* latent rows as stored (model/mla.c) */
        const size_t row = ht_row_size(type, hd) * n_kv;
        uint8_t *x = X + ((size_t)seq * L->cap + pos0) * row;
        if (out) memcpy(buf, x, (size_t)n * row);
        else memcpy(x, buf, (size_t)n * row);
        return buf + (size_t)n * row;
    }
    if (kv_rows(type)) {   /* position after position, each position's heads in order */
        const size_t rs = ht_row_size(type, hd);
        for (int t = 0; t < n; t++)
            for (int h = 0; h < n_kv; h++, buf += rs) {
                uint8_t *x = X + kv_row_off(L, rs, seq, h, pos0 + t);
                if (out) memcpy(buf, x, rs);
                else memcpy(x, buf, rs);
            }
        return buf;
    }
    const size_t esz = ht_row_size(type, 1);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < n_kv; h++)
            for (int d = 0; d < hd; d++) {
                size_t idx = is_k ? kt_cell(n_kv, hd, L->cap, seq, h, d, pos0 + t)
                                  : vt_cell(ne, L->cap, L->span[seq], seq, h * hd + d, pos0 + t);
                if (out) memcpy(buf, X + idx * esz, esz);
                else memcpy(X + idx * esz, buf, esz);
                buf += esz;
            }
    return buf;
}

static int kv_copy(hearth_ctx *c, int seq, int pos0, int n, uint8_t *buf, bool out) {
    if (!kv_portable(c) || seq < 0 || seq >= c->n_seq || pos0 < 0 || n < 0 || pos0 + n > c->n_ctx) return -1;
    for (int il = 0; il < c->m->hp.n_layer; il++) {
        ht_kv_layer *L = &c->kv[il];
        if (c->m->layers[il].recurrent || c->m->layers[il].kv_shared) continue;
        if (!out) kv_widen(c, L, seq, pos0 + n);
        buf = kv_copy_rows(c, L, true, seq, pos0, n, buf, out);
        if (L->v) buf = kv_copy_rows(c, L, false, seq, pos0, n, buf, out);
    }
    return 0;
}

int hearth_kv_read(const hearth_ctx *c, int seq, int pos0, int n, void *buf) {
    if (seq < 0 || seq >= c->n_seq || pos0 + n > c->seq_len[seq] || rec_pending(c, seq)) return -1;
    return kv_copy((hearth_ctx *)c, seq, pos0, n, buf, true);
}

int hearth_kv_write(hearth_ctx *c, int seq, int pos0, int n, const void *buf) {
    if (seq < 0 || seq >= c->n_seq || pos0 != c->seq_len[seq]) return -1;
    if (kv_copy(c, seq, pos0, n, (uint8_t *)buf, false)) return -1;
    c->seq_len[seq] = pos0 + n;
    rec_set_pending(c, seq, n > 0 || rec_pending(c, seq));   /* until hearth_state_write gives the state */
    return 0;
}

size_t ctx_kv_bytes(const hearth_ctx *c, int il) {
    if (il < 0) {
        size_t sum = 0;
        for (int i = 0; i < c->m->hp.n_layer; i++) sum += ctx_kv_bytes(c, i);
        return sum;
    }
    if (!c->kv[il].k) return 0;   /* another rank's layer */
    return (size_t)c->n_seq * (size_t)c->kv[il].cap * kv_layer_token_bytes(c, il);
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
/* Computed once for a micro-batch's positions and kept while the layers that follow share base and scale
 * (each table entry costs a pow and a sincos in double). */
void ctx_rope_tables(hearth_ctx *c, const ht_ubatch *ub, float base, float scale, int n_rot, const float *ff) {
    const ht_hparams *hp = &c->m->hp;
    const hearth_model *m = c->m;
    if (!ff) ff = m->rope_freqs_long.data && c->n_ctx > hp->n_ctx_orig ? m->rope_freqs_long.data : m->rope_freqs.data;
    if (c->rope_n == ub->n && c->rope_key[0] == base && c->rope_key[1] == scale && c->rope_key_rot == n_rot &&
        c->rope_key_ff == ff && !memcmp(c->rope_pos, ub->pos, (size_t)ub->n * sizeof *ub->pos))
        return;
    int h = n_rot / 2;
    float yarn[3] = { 0, 0, 1 }, mscale = hp->rope_attn_factor;
    const bool use_yarn = hp->rope_yarn || hp->rope_yarn_ext != 0;
    if (hp->rope_yarn_ext != 0) {   /* deepseek2: its correction range and weight; the magnitude rope_attn_factor */
        yarn[0] = hp->rope_yarn_corr[0], yarn[1] = hp->rope_yarn_corr[1], yarn[2] = hp->rope_yarn_ext;
    } else if (hp->rope_yarn) {   /* the ramp's pairs for this base; an interpolated rope's magnitude */
        op_rope_yarn_dims(n_rot, hp->n_ctx_orig, base, hp->yarn_beta_fast, hp->yarn_beta_slow, yarn);
        if (scale > 1.0f) mscale *= (1.0f + 0.1f * logf(scale)) / (hp->yarn_log_mul ? 1.0f + 0.1f * hp->yarn_log_mul * logf(scale) : 1.0f);
    }
    for (int i = 0; i < ub->n; i++) {
        float *cs = c->rope_cos + (size_t)i * h, *sn = c->rope_sin + (size_t)i * h;
        op_rope_table(cs, sn, ub->pos[i], n_rot, base, scale, ff, use_yarn ? yarn : NULL);
        if (mscale != 1.0f)
            for (int k = 0; k < h; k++) cs[k] *= mscale, sn[k] *= mscale;
    }
    memcpy(c->rope_pos, ub->pos, (size_t)ub->n * sizeof *ub->pos);
    c->rope_n = ub->n;
    c->rope_key[0] = base;
    c->rope_key[1] = scale;
    c->rope_key_rot = n_rot;
    c->rope_key_ff = ff;
}

/* ---- attention over the KV cache ----
 * A task is a block of up to ATT_QB tokens and one KV head with up to HT_TILE_MAX of the q heads that share it
 * (all of the group unless there are fewer tasks than threads), so each K and V element loaded serves every
 * head of the task, and (F32 / F16 caches) every token of the block from L1 or L2.
 * K and V each have their own type and layout. F32 / F16: cached transposed ([seq][kv head][dim][position]).
 * q·k is the type's dot_t: for each dim, one K^T row segment (a vector lane per position) times each head's
 * q value, so no score ends in a horizontal sum; softmax·V takes V^T rows (one per output dim) through the
 * type's dot-product tiles against the heads' probability rows. BF16 / Q8_0 / Q4_0: rows (a kv head's positions
 * one after another) as stored, computed on in place: q is converted to the K type's vec_dot type (Q8_0 blocks
 * for Q8_0 and Q4_0 keys: int8 dot products, as ggml's flash attention over a quantized cache does) and scored with the
 * type's kq kernel (Q8_0: the reference vec_dot's scores, several positions reduced at once) or its dot-product
 * tiles; V rows go through the type's pv kernel (Q8_0: the outputs held in registers while the rows go by,
 * each row converted once) or are dequantized PV_ROWS at a time, and are accumulated into the outputs in
 * position order (V cannot be quantized along positions, which arrive one by one). No copy of the cache is
 * made whatever the window: a thread's scratch is its score rows and a few rows. A tile computes each output
 * exactly as vec_dot does, and each position adds the same terms in the same order whatever the batching, so
 * results do not depend on the micro-batch, the thread count or the head grouping. */
#define PV_ROWS 4        /* V rows (row caches) dequantized and applied together */
#define ATT_QB 8         /* micro-batch tokens per task (F32 / F16 caches share each K and V load among them) */
#define ATT_PV_ROWS 16   /* V^T rows every token of a task takes in turn */

typedef struct {
    hearth_ctx *c;
    const ht_ubatch *ub;
    const ht_kv_layer *L;
    const float *q;
    float *out;
    float scale;
    const float *sinks;      /* [n_head] attention sinks (gpt-oss), or NULL */
    int window;
    bool causal;
    int heads;               /* q heads per task (<= HT_TILE_MAX) */
    int n_chunks;            /* tasks per (token, kv head): the group's heads in chunks of `heads` */
    const int *seq_end;      /* per sequence: cached length after this micro-batch */
    atomic_int next_task;    /* tasks are claimed one at a time, as matmul's chunks are */
} att_job;

/* Floats of per-thread scratch: ATT_QB x HT_TILE_MAX score rows of n_ctx, then room for the largest
 * of: the task's q vectors (K^T), or its q rows in K's vec_dot type (K rows); HT_TILE_MAX V^T rows of a wrapped
 * ring gathered, or PV_ROWS dequantized V rows; rounded up to a cache line. */
static size_t att_scratch_floats(const hearth_ctx *c) {
    const ht_hparams *hp = &c->m->hp;
    size_t heads = 1, hd = 1, hdv = 1, n = (size_t)c->n_ctx;   /* the most any layer needs */
    for (int il = 0; il < hp->n_layer; il++) {
        const ht_layer *L = &c->m->layers[il];
        heads = HT_MAX(heads, (size_t)HT_MIN(hp->n_head / L->n_head_kv, HT_TILE_MAX));
        hd = HT_MAX(hd, (size_t)L->head_dim), hdv = HT_MAX(hdv, (size_t)L->head_dim_v);
    }
    size_t extra = ATT_QB * heads * (kv_rows(c->k_type) ? ht_row_size(ht_get_traits(c->k_type)->vec_dot_type, (int64_t)hd)
                                                     : hd * sizeof(float));
    extra = HT_MAX(extra, kv_rows(c->v_type) ? PV_ROWS * hdv * sizeof(float)
                                             : HT_TILE_MAX * n * ht_row_size(c->v_type, 1));
    extra = HT_MAX(extra, mla_scratch_bytes(hp, c->n_ctx));
    return (ATT_QB * heads * n + (extra + sizeof(float) - 1) / sizeof(float) + 15) / 16 * 16;
}

/* y[c * ys + r] = vec_dot(n, w + r * ws, a + c * as) for r < nr, c < nc: all rows in one tile call per group of
 * at most HT_TILE_MAX columns. */
static void dot_tiles(const ht_traits *tr, int n, const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                      int nc, float *y, size_t ys) {
    for (int k = 0; k < nc; k += HT_TILE_MAX)
        ht_vec_dot_tile(tr, n, w, ws, nr, a + (size_t)k * as, as, HT_MIN(HT_TILE_MAX, nc - k), y + (size_t)k * ys, ys);
}

/* Softmax of each of nh rows of n scores (row stride ld), after scaling: normalized probabilities in place; with
 * sinks (one per row's head), each sink joins its row's denominator. */
static void att_softmax(float *sc, size_t ld, int nh, int n, float scale, const float *sinks) {
    for (int h = 0; h < nh; h++)
        if (sinks) op_softmax_sink(sc + (size_t)h * ld, n, scale, sinks[h]);
        else op_softmax(sc + (size_t)h * ld, n, scale);
}

/* softmax·V from the transposed cache: o[h * hdv + d] = V^T row d (positions lo..lo+n-1) · probabilities of
 * head h. A wrapped ring's rows are gathered in position order (HT_TILE_MAX at a time into tmp) so the sum
 * does not depend on where the ring wrapped. */
static void att_pv_transposed(const ht_traits *tr, size_t esz, const uint8_t *vt, int cap, int span, int hdv, int lo,
                              int n, const float *p, size_t ld, int nh, float *o, uint8_t *tmp) {
    int s0 = lo % cap, n0 = HT_MIN(n, cap - s0);
    size_t rs = (size_t)span * esz;
    if (n0 == n) {
        dot_tiles(tr, n, vt + (size_t)s0 * esz, rs, hdv, (const uint8_t *)p, ld * sizeof(float), nh, o, (size_t)hdv);
        return;
    }
    for (int d = 0; d < hdv; d += HT_TILE_MAX) {
        int nr = HT_MIN(HT_TILE_MAX, hdv - d);
        for (int r = 0; r < nr; r++) {
            const uint8_t *row = vt + (size_t)(d + r) * rs;
            uint8_t *g = tmp + (size_t)r * n * esz;
            memcpy(g, row + (size_t)s0 * esz, (size_t)n0 * esz);
            memcpy(g + (size_t)n0 * esz, row, (size_t)(n - n0) * esz);
        }
        ht_vec_dot_tile(tr, n, tmp, (size_t)n * esz, nr, p, ld * sizeof(float), nh, o + d, (size_t)hdv);
    }
}

/* softmax·V from V rows for nt tokens of nh heads each: o[tt * os + h * hdv + d] = sum over positions, in order,
 * of p_(tt,h)[t] * v_t[d] (probability rows ld apart, token after token). Rows are dequantized PV_ROWS at a time
 * into vrow, once for all the task's tokens and heads; every output still adds its terms one position after
 * another, so the grouping does not change a bit, and a position outside a token's range (probability 0) adds
 * an exact 0. vb: kv head kvh's row at slot 0, rs bytes apart. */
static void att_pv_rows(uint32_t type, const uint8_t *vb, size_t rs, int cap, int hdv, int lo, int n, const float *p,
                        size_t ld, int nt, int nh, float *o, size_t os, float *vrow) {
    const ht_traits *tr = ht_get_traits(type);
    if (tr->pv) {   /* the type's own kernel: rows in place, the outputs in registers over all positions */
        tr->pv(hdv, vb, rs, cap, lo, n, p, ld, nt * nh, o, os, nh);
        return;
    }
    for (int tt = 0; tt < nt; tt++) memset(o + (size_t)tt * os, 0, (size_t)nh * hdv * sizeof(float));
    for (int t = 0; t < n; t += PV_ROWS) {
        const int m = HT_MIN(PV_ROWS, n - t);
        const uint8_t *rows[PV_ROWS];
        for (int r = 0; r < m; r++) rows[r] = vb + (size_t)((lo + t + r) % cap) * rs;
        op_kv_rows_to_float(type, rows, m, vrow, hdv);
        op_pv_add(o, os, nh, nt * nh, vrow, m, hdv, p + t, ld);
    }
}

/* The positions micro-batch token t attends to: lo..lo+n-1 (causal, windowed, or its whole sequence). */
static int att_range(const att_job *j, int t, int *lo) {
    const int p = j->ub->pos[t], hi = j->causal ? p : j->seq_end[j->ub->seq[t]] - 1;
    *lo = j->window > 0 ? HT_MAX(0, p - j->window + 1) : 0;
    return hi - *lo + 1;
}

/* Tokens a..b-1 of the micro-batch (one sequence), kv head kvh, q heads h0..h0+nh-1: the cache is read once per
 * task instead of once per token. Transposed K: each run of K^T slots (at most a 64-slot block, in L1) is one
 * dot_t call for every (token, head); K rows: every (token, head)'s q in the K type's vec_dot type against the
 * block's rows in place (both sides of a ring's wrap), a tile of columns at a time. Transposed V: softmax·V walks
 * V^T ATT_PV_ROWS rows at a time for every token (those rows stay in L2); V rows: att_pv_rows for all the block's
 * tokens. Each score and output is still the same lane or call, and adds the same terms, as for one token. */
static void att_tokens(att_job *j, int a, int b, int kvh, int h0, int nh, float *sc, uint8_t *tmp) {
    hearth_ctx *c = j->c;
    const ht_hparams *hp = &c->m->hp;
    const int hd = j->L->hd, hdv = j->L->hdv, n_kv = j->L->n_kv, cap = j->L->cap, s = j->ub->seq[a];
    int lo[ATT_QB], n[ATT_QB], LO = INT32_MAX, HI = -1;
    for (int t = a; t < b; t++) {
        n[t - a] = att_range(j, t, &lo[t - a]);
        LO = HT_MIN(LO, lo[t - a]), HI = HT_MAX(HI, lo[t - a] + n[t - a] - 1);
    }
    const size_t ls = (size_t)HI - LO + 1;   /* score rows of the block: positions LO..HI */
    const ht_traits *trk = ht_get_traits(c->k_type);
    if (kv_rows(c->k_type)) {   /* scores past a token's own range are computed and ignored, as below */
        const uint32_t qt = (uint32_t)trk->vec_dot_type;
        const size_t krs = ht_row_size(c->k_type, hd), qrs = ht_row_size(qt, hd);
        const uint8_t *kb = (const uint8_t *)j->L->k + kv_row_off(j->L, krs, s, kvh, 0);
        for (int t = a; t < b; t++)
            for (int h = 0; h < nh; h++)
                ht_quantize_row(qt, j->q + ((size_t)t * hp->n_head + h0 + h) * hd, tmp + ((size_t)(t - a) * nh + h) * qrs, hd);
        const int n_all = (int)ls, s0 = LO % cap, n0 = HT_MIN(n_all, cap - s0);
        if (trk->kq) {   /* the same scores as the tiles', several positions reduced at once */
            trk->kq(hd, kb + (size_t)s0 * krs, krs, n0, tmp, qrs, (b - a) * nh, sc, ls);
            if (n0 < n_all) trk->kq(hd, kb, krs, n_all - n0, tmp, qrs, (b - a) * nh, sc + n0, ls);
        } else {
            dot_tiles(trk, hd, kb + (size_t)s0 * krs, krs, n0, tmp, qrs, (b - a) * nh, sc, ls);
            if (n0 < n_all) dot_tiles(trk, hd, kb, krs, n_all - n0, tmp, qrs, (b - a) * nh, sc + n0, ls);
        }
    } else {
        /* q of every (token, head) of the block side by side, so each run of slots is one dot_t call for all of
         * them (its accumulator chains then fill the FMA pipes); scores past a token's own range are computed
         * and ignored (each score is one lane, independent of the others) */
        const int nc = (b - a) * nh;
        const size_t esz = ht_row_size(c->k_type, 1);
        float *qs = (float *)tmp;
        for (int t = a; t < b; t++)
            memcpy(qs + (size_t)(t - a) * nh * hd, j->q + ((size_t)t * hp->n_head + h0) * hd, (size_t)nh * hd * sizeof(float));
        for (int pos = LO; pos <= HI;) {   /* runs of slots inside one K^T block (and one side of a ring's wrap) */
            const int slot = pos % cap, w = kt_width(cap, slot), len = HT_MIN(HI + 1 - pos, w - slot % KT_BLOCK);
            trk->dot_t(hd, (const uint8_t *)j->L->k + kt_cell(n_kv, hd, cap, s, kvh, 0, slot) * esz, (size_t)w, len, qs,
                       (size_t)hd, nc, sc + (pos - LO), ls);
            pos += len;
        }
    }
    bool wraps = false;
    for (int t = a; t < b; t++) {
        float *p = sc + (size_t)(t - a) * nh * ls + (lo[t - a] - LO);
        att_softmax(p, ls, nh, n[t - a], j->scale, j->sinks ? j->sinks + h0 : NULL);
        wraps |= lo[t - a] % cap + n[t - a] > cap;
    }
    if (kv_rows(c->v_type)) {   /* each token's probabilities 0 outside its range, then the block's rows at once */
        for (int t = a; t < b; t++)
            for (int h = 0; h < nh; h++) {
                float *p = sc + ((size_t)(t - a) * nh + h) * ls;
                memset(p, 0, (size_t)(lo[t - a] - LO) * sizeof(float));
                memset(p + (lo[t - a] - LO) + n[t - a], 0, (ls - (size_t)(lo[t - a] - LO) - (size_t)n[t - a]) * sizeof(float));
            }
        const size_t vrs = ht_row_size(c->v_type, hdv);
        const uint8_t *vb = (const uint8_t *)j->L->v + kv_row_off(j->L, vrs, s, kvh, 0);
        att_pv_rows(c->v_type, vb, vrs, cap, hdv, LO, (int)ls, sc, ls, b - a, nh,
                    j->out + ((size_t)a * hp->n_head + h0) * hdv, (size_t)hp->n_head * hdv, (float *)tmp);
        return;
    }
    const ht_traits *trv = ht_get_traits(c->v_type);
    const size_t esz = ht_row_size(c->v_type, 1);
    const int span = j->L->span[s];
    const size_t rs = (size_t)span * esz;
    const uint8_t *vt = (const uint8_t *)j->L->v + vt_cell(n_kv * hdv, cap, span, s, kvh * hdv, 0) * esz;
    for (int d = 0; d < hdv; d += wraps ? hdv : ATT_PV_ROWS)
        for (int t = a; t < b; t++) {
            const float *p = sc + (size_t)(t - a) * nh * ls + (lo[t - a] - LO);
            float *o = j->out + ((size_t)t * hp->n_head + h0) * hdv;
            if (wraps) att_pv_transposed(trv, esz, vt, cap, span, hdv, lo[t - a], n[t - a], p, ls, nh, o, tmp);
            else dot_tiles(trv, n[t - a], vt + (size_t)d * rs + (size_t)(lo[t - a] % cap) * esz, rs,
                           HT_MIN(ATT_PV_ROWS, hdv - d), (const uint8_t *)p, ls * sizeof(float), nh, o + d, (size_t)hdv);
        }
}

/* Tasks: (block of ATT_QB micro-batch tokens, kv head, chunk of its q heads); a block's tokens go together
 * by runs of one sequence. */
static void attention_job(void *arg, int ith, int nth) {
    att_job *j = arg;
    hearth_ctx *c = j->c;
    const int n_kv = j->L->n_kv, group = c->m->hp.n_head / n_kv;
    float *sc = c->att_scores + (size_t)ith * c->att_stride;
    uint8_t *tmp = (uint8_t *)(sc + (size_t)ATT_QB * j->heads * c->n_ctx);   /* q, gathered or dequantized rows */
    const int per_block = n_kv * j->n_chunks, total = (j->ub->n + ATT_QB - 1) / ATT_QB * per_block;
    (void)nth;
    for (int task; (task = atomic_fetch_add_explicit(&j->next_task, 1, memory_order_relaxed)) < total;) {
        const int i0 = task / per_block * ATT_QB, i1 = HT_MIN(j->ub->n, i0 + ATT_QB);
        const int kvh = task % per_block / j->n_chunks, h0 = kvh * group + task % j->n_chunks * j->heads;
        const int nh = HT_MIN(j->heads, (kvh + 1) * group - h0);
        for (int a = i0, b; a < i1; a = b) {
            for (b = a + 1; b < i1 && j->ub->seq[b] == j->ub->seq[a];) b++;
            att_tokens(j, a, b, kvh, h0, nh, sc, tmp);
        }
    }
}

/* The micro-batch's K and V (ne = n_kv heads x hd values per token, rows of x[0] and x[1]) into the caches
 * X[0] and X[1], over the pool: F32 / F16 caches are transposed (K^T blocks, V^T span-long rows: the layout
 * above; a score or an output then takes one vector lane per position), written 16 values of every token at
 * a time so that each of those values' rows is written along its slots; a row cache (BF16, Q8_0, Q4_0) stores
 * each token's row converted (blocks never straddle heads: head sizes are whole blocks). */
typedef struct {
    void *X[2];
    const float *x[2];
    int ne[2], cap, n_kv, hd;
    const int *span;
    const ht_kv_layer *L;
    uint32_t type[2];
    const ht_ubatch *ub;
} kv_store_job;

/* Units of K (w = 0) or V: a 16-value block of every token (transposed), or one token's row. */
static int kv_store_units_of(const kv_store_job *j, int w) { return kv_rows(j->type[w]) ? j->ub->n : (j->ne[w] + 15) / 16; }

/* Unit u of the store: K's units, then V's. Units write disjoint rows, so threads may take any share of them. */
static void kv_store_unit(const kv_store_job *j, int u) {
    const ht_ubatch *ub = j->ub;
    const int cap = j->cap, nk = kv_store_units_of(j, 0), w = u >= nk, ne = j->ne[w];
    if (w) u -= nk;
    if (kv_rows(j->type[w])) {   /* each head's row to its own run of slots */
        const int hd = ne / j->n_kv;
        const size_t rs = ht_row_size(j->type[w], hd);
        for (int h = 0; h < j->n_kv; h++)
            ht_quantize_row(j->type[w], j->x[w] + (size_t)u * ne + (size_t)h * hd,
                            (uint8_t *)j->X[w] + kv_row_off(j->L, rs, ub->seq[u], h, ub->pos[u] % cap), hd);
        return;
    }
    const int e0 = u * 16, m = HT_MIN(16, ne - e0);
    const ht_traits *f16 = ht_get_traits(HT_F16);
    size_t idx[16];
    for (int i = 0; i < ub->n; i++) {
        const int seq = ub->seq[i], slot = ub->pos[i] % cap;
        for (int e = 0, h = e0 / j->hd, d = e0 % j->hd; e < m; e++) {   /* K^T: a unit may straddle two heads */
            idx[e] = w ? vt_cell(ne, cap, j->span[seq], seq, e0 + e, slot) : kt_cell(j->n_kv, j->hd, cap, seq, h, d, slot);
            if (++d == j->hd) d = 0, h++;
        }
        const float *xi = j->x[w] + (size_t)i * ne + e0;
        if (j->type[w] == HT_F32) {
            for (int e = 0; e < m; e++) ((float *)j->X[w])[idx[e]] = xi[e];
        } else {
            uint16_t h[16];
            f16->from_float(xi, h, m);   /* the kernel set's (vectorized) conversion */
            for (int e = 0; e < m; e++) ((uint16_t *)j->X[w])[idx[e]] = h[e];
        }
    }
}

static int kv_store_units(const kv_store_job *j) { return kv_store_units_of(j, 0) + kv_store_units_of(j, 1); }

static void kv_store_range(const void *arg, int u0, int u1) {
    for (int u = u0; u < u1; u++) kv_store_unit(arg, u);
}

typedef struct { float *x; int n; } rot_job;

static void rot_range(const void *arg, int lo, int hi) {
    const rot_job *j = arg;
    for (int i = lo; i < hi; i++) op_hadamard(j->x + (size_t)i * j->n, j->n);
}

/* Rows of nv values (n of them) rotated in place, each of its runs of `size`. */
static void rotate(hearth_ctx *c, float *x, int n, int nv, int size) {
    rot_job j = { x, size };
    pool_share(c->pool, n * (nv / size), rot_range, &j);
}

/* llama.cpp rotates what goes into a quantized cache (llama-kv-cache.cpp, attn_rot_k / attn_rot_v): the outliers of
 * a head are spread over all of its values before they are rounded to blocks. A quantized K (head size a multiple of
 * 64): q and k by the Walsh-Hadamard matrix of the largest power of two that divides the head, which leaves q·k
 * as it was; a quantized V (head size a multiple of 64): v by runs of 64, and the attention output back by the same
 * (its own inverse). Its goldens are made so; a quantized cache loses less with it. 0: no rotation. */
static int kv_rotation(uint32_t type, int hd, bool is_k) {
    if (!ht_get_traits(type)->is_quant || hd % 64) return 0;
    int n = 64;
    while (is_k && hd % (2 * n) == 0) n *= 2;
    return n;
}

void ctx_attention(hearth_ctx *c, int il, const ht_ubatch *ub, float *q, float *k, float *v,
                   float *out, float scale, int window) {
    const ht_hparams *hp = &c->m->hp;
    const bool shared = c->m->layers[il].kv_shared;   /* reads (and stores nothing in) an earlier layer's cache */
    ht_kv_layer *L = &c->kv[c->m->layers[il].kv_src];
    /* a quantized cache's rotation, by the layer's head sizes (none for latent attention: model/mla.c) */
    const int rot_k = hp->kv_lora_rank ? 0 : kv_rotation(c->k_type, L->hd, true),
              rot_v = hp->kv_lora_rank ? 0 : kv_rotation(c->v_type, L->hdv, false);
    if (rot_k) {
        rotate(c, q, ub->n, hp->n_head * L->hd, rot_k);
        if (!shared) rotate(c, k, ub->n, L->n_kv * L->hd, rot_k);
    }
    if (rot_v && !shared) rotate(c, v, ub->n, L->n_kv * L->hdv, rot_v);
    int KD = L->n_kv * L->hd, VD = L->n_kv * L->hdv;
    int seq_end[256] = { 0 };
    for (int i = 0; i < ub->n; i++) seq_end[ub->seq[i]] = HT_MAX(seq_end[ub->seq[i]], ub->pos[i] + 1);
    if (!shared) {
        for (int s = 0; s < c->n_seq; s++) if (seq_end[s]) kv_widen(c, L, s, seq_end[s]);
        kv_store_job sj = { { L->k, L->v }, { k, v }, { KD, VD }, L->cap, L->n_kv, L->hd, L->span, L, { c->k_type, c->v_type }, ub };
        pool_share(c->pool, kv_store_units(&sj), kv_store_range, &sj);
    }
    /* the whole group per task (at most a tile's width), split further only to give every thread work */
    int group = hp->n_head / L->n_kv, heads = HT_MIN(group, HT_TILE_MAX);
    while (heads > 1 && (long)(ub->n + ATT_QB - 1) / ATT_QB * L->n_kv * ((group + heads - 1) / heads) < c->n_threads)
        heads = (heads + 1) / 2;
    att_job j = { .c = c, .ub = ub, .L = L, .q = q, .out = out, .scale = scale, .sinks = c->m->layers[il].attn_sinks.data,
                  .window = window, .causal = c->m->hp.causal, .heads = heads, .n_chunks = (group + heads - 1) / heads,
                  .seq_end = seq_end };
    atomic_init(&j.next_task, 0);
    pool_run(c->pool, attention_job, &j);
    if (rot_v) rotate(c, out, ub->n, hp->n_head * L->hdv, rot_v);
}

/* ---- output head ---- */
/* Packs the rows of src ([ub->n][E]) the batch wants into dst, in order; returns their count. */
static int gather_wanted(const ht_ubatch *ub, const float *src, float *dst, int E) {
    int n = 0;
    for (int i = 0; i < ub->n; i++)
        if (ub->want[i]) memmove(dst + (size_t)n++ * E, src + (size_t)i * E, (size_t)E * sizeof(float));
    return n;
}

#define SOFTCAP_PIECE 16384
typedef struct { float *x; size_t n; float cap; } softcap_job;

static void softcap_pieces(const void *arg, int p0, int p1) {
    const softcap_job *j = arg;
    const size_t a = (size_t)p0 * SOFTCAP_PIECE, b = HT_MIN((size_t)p1 * SOFTCAP_PIECE, j->n);
    op_softcap(j->x + a, (int)(b - a), j->cap);
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
    for (int i = 0, k = 0; i < ub->n; i++)   /* the gathered rows' sequences, for adapters of the head */
        if (ub->want[i]) c->head_seq[k++] = ub->seq[i];
    c->row_seq = c->head_seq;
    float *lg = c->out_logits + (size_t)first * m->hp.n_vocab;
    if (m->tp_size > 1 && c->dist_id >= 0) dist_tp_head(c, W, &m->output_b, c->xb2, n, lg);
    else matmul_bias(c, W, &m->output_b, c->xb2, n, lg);
    c->row_seq = ub->seq;
    if (m->hp.logit_softcap > 0) {   /* a vocabulary of 262144 a row: in pieces over the pool */
        softcap_job j = { lg, (size_t)n * m->hp.n_vocab, m->hp.logit_softcap };
        pool_share(c->pool, (int)((j.n + SOFTCAP_PIECE - 1) / SOFTCAP_PIECE), softcap_pieces, &j);
    }
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
    if (c->dist_id >= 0) {
        float *dr = realloc(c->dist_rows, (size_t)cap * hp->n_embd * sizeof(float));
        if (!dr) return herr(err, "out of memory for %d output rows", n_out);
        c->dist_rows = dr;
    }
    c->n_out_cap = cap;
    return 0;
}

/* With n_threads automatic, a pass of fewer tokens than this runs on one thread: below CTX_SERIAL_WORK
 * multiply-adds (active parameters x tokens) waking the workers costs more than they do. Measured on Zen 5,
 * 2 threads against 1: stories260K (0.29 M parameters) decodes at 12.0k against 36.3k t/s and prefills 64
 * tokens at 72k against 87k; the 1.4 M-parameter llama fixture 23.5k against 57.5k, pp64 even; gpt2-124m
 * decodes 1.56x faster on 2. */
#define CTX_SERIAL_WORK (32.0 * 1024 * 1024)
int ctx_serial_below(const hearth_model *m, int n_threads) {
    if (n_threads < 2) return 0;
    hearth_model_info in = { 0 };
    hearth_model_get_info(m, &in);
    return in.n_params_active ? (int)HT_MIN(CTX_SERIAL_WORK / (double)in.n_params_active, (double)INT_MAX) : 0;
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
        if (rec_pending(c, s))
            return herr(err, "batch row %d: sequence %d's recurrent state was not restored (hearth_state_write after hearth_kv_write)", i, s);
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
    if (c->dist_id >= 0) {
        if (dist_decode(c, b->tokens, b->n, err)) return -1;
    } else
        for (int i0 = 0; i0 < b->n; i0 += c->n_batch) {
            ht_ubatch ub = { .n = HT_MIN(c->n_batch, b->n - i0), .tokens = b->tokens + i0, .pos = pos + i0,
                             .seq = seq + i0, .want = want + i0, .row0 = i0 };
            c->row_seq = ub.seq;
            pool_serial(c->pool, ub.n < c->serial_below);
            c->m->arch->embed(c, &ub);
            ctx_layers(c, &ub);
            c->m->arch->head(c, &ub);
            pool_serial(c->pool, false);
        }
    /* broken weights or metadata show here first: say so, rather than let a sampler pick from NaNs */
    const float *o = hp->logits ? c->out_logits : c->out_hidden;
    const size_t len = (size_t)n_out * (size_t)(hp->logits ? hp->n_vocab : hp->n_embd);
    float probe = 0;
    for (size_t i = 0; i < len; i++) probe += o[i] * 0.0f;   /* NaN as soon as one output is NaN or infinite */
    if (probe != 0) return herr(err, "the model produced NaN or infinite %s: its weights or metadata are broken",
                                hp->logits ? "logits" : "hidden states");
    return 0;
}

void ctx_layers(hearth_ctx *c, const ht_ubatch *ub) {
    for (int il = c->m->layer_lo; il < c->m->layer_hi; il++) c->m->arch->layer(c, ub, il);
    for (int i = 0; i < ub->n; i++)
        if (ub->pos[i] + 1 > c->seq_len[ub->seq[i]]) c->seq_len[ub->seq[i]] = ub->pos[i] + 1;
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
