/* lora.c — LoRA adapters in llama.cpp's GGUF form (general.type "adapter", adapter.type "lora",
 * adapter.lora.alpha; for each adapted weight NAME the pair NAME.lora_a [n_in -> rank] and NAME.lora_b
 * [rank -> n_out], any tensor type hearth multiplies), checked against the base model when loaded.
 *
 * Applied without merging: y += s * alpha / rank * B (A x). F32 pairs run inside the weight's product job: the
 * rank products A x (n_tok x rank) first, then B's terms added to each block of outputs as the product finishes
 * it; other types after the product, A x and B (A x) through the same matmul as every weight. Each output is a
 * fixed sequence of operations on its row, so results stay the same whatever the batch or thread count. An
 * adapter's entries are found by the base weight's data pointer (unique per matrix, kept when the weights are
 * packed).
 *
 * Or merged for good before the first context (hearth_lora_merge, --lora-merge, quantize --lora): each adapted
 * matrix is copied as W + s alpha / rank B A, requantized, and every view of it repointed to the copy. */
#include "model/lora.h"

#include "model/hf.h"
#include "model/matmul.h"
#include "model/pack.h"
#include "compute/ops.h"
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <sys/stat.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const void *base;         /* the adapted weight's data in the base model */
    ht_tensor a, b;
    const float *bt;          /* F32 pairs: lora_b transposed by blocks of outputs (transpose_b), else NULL */
} lora_entry;

struct hearth_lora {
    const hearth_model *m;
    gguf_file *g;             /* a GGUF adapter's file, or */
    st_set *st;               /* a PEFT directory's safetensors */
    void **owned;             /* F32 copies (permuted rows, unaligned data) */
    int n_owned;
    float alpha;
    int n, max_rank;
    int64_t max_out;
    lora_entry *e;
    bool merged;              /* merged into the model's weights (hearth_lora_merge): not applied beside them */
};

#define LORA_GROUP 3   /* matrices of one product whose fused terms run as one job (lora_add) */

/* An F32 pair's fused terms on one product (see fused_t_task). */
typedef struct { const float *A, *Bt, *x, *f; float *t, *y; int n_in, n_out, rank, n_tok; } fused_job;

/* The fused terms of one product's matrices (q/k/v, or gate/up: the same x), run inside the product's job
 * (matmul.c's ht_product_fuse): the rank products of every (matrix, adapter) pair as its pre items; then as
 * each block of a matrix's outputs is done for a few rows of the batch (still in L1), its adapters' terms added
 * to them row by row in the registry's order (the order lora_add_one adds them in). */
typedef struct {
    fused_job j[LORA_GROUP * HEARTH_MAX_LORA];
    int n, t0[LORA_GROUP * HEARTH_MAX_LORA + 1];   /* pair p's rank-product tasks start at t0[p] */
    int p0[LORA_GROUP + 1];                        /* matrix m's pairs: p0[m] .. p0[m + 1] - 1 */
} fused_group;

/* The context's adapters: a registry of up to HEARTH_MAX_LORA, each sequence's scale of each (0: not applied),
 * and the scratch (n_batch rows of the widest rank and output, and a factor per row). */
typedef struct ht_lora_set {
    int n, n_seq, max_rank;
    hearth_lora *a[HEARTH_MAX_LORA];
    float *scale;             /* [n_seq][n] */
    float *t, *u, *f;
    fused_group *group;       /* the product in flight's fused terms (lora_add) */
} ht_lora_set;

static ht_tensor view(const gguf_tensor *gt) {
    ht_tensor t = { .name = gt->name, .type = gt->type, .n_dims = (int)gt->n_dims, .data = gt->data, .nbytes = gt->nbytes };
    for (int d = 0; d < 4; d++) t.ne[d] = gt->ne[d];
    t.row_bytes = ht_row_size(gt->type, gt->ne[0]);
    return t;
}

static const ht_tensor *base_tensor(const hearth_model *m, const char *name, size_t n) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strlen(m->tensors[i].name) == n && !memcmp(m->tensors[i].name, name, n)) return &m->tensors[i];
    return NULL;
}

static bool meta_is(const gguf_file *g, const char *key, const char *want) {
    gguf_str s;
    return gguf_get_str(g, key, &s) && s.n == strlen(want) && !memcmp(s.p, want, s.n);
}

static int load_peft(hearth_lora *a, const char *dir, hearth_err *err);
static int transpose_b(hearth_lora *a, hearth_err *err);

int hearth_lora_load(hearth_model *m, const char *path, hearth_lora **out, hearth_err *err) {
    *out = NULL;
    if (!m->arch) return herr(err, "%s: a tokenizer-only model takes no adapter", path);
    hearth_lora *a = calloc(1, sizeof *a);
    if (!a) return herr(err, "out of memory");
    a->m = m;
    struct stat sb;
    if (!stat(path, &sb) && S_ISDIR(sb.st_mode)) {
        if (load_peft(a, path, err)) { hearth_lora_free(a); return -1; }
        *out = a;
        return 0;
    }
    hearth_err e2;
    if (gguf_open(path, &a->g, &e2)) { free(a); return herr(err, "%s: %s", path, e2.msg); }
    gguf_file *g = a->g;
    gguf_str arch;
    if (!meta_is(g, "general.type", "adapter") || !meta_is(g, "adapter.type", "lora")) {
        hearth_lora_free(a);
        return herr(err, "%s: not a LoRA adapter (general.type 'adapter', adapter.type 'lora' expected)", path);
    }
    if (!gguf_get_str(g, "general.architecture", &arch) || arch.n != strlen(m->arch->name) || memcmp(arch.p, m->arch->name, arch.n)) {
        herr(err, "%s: an adapter for architecture '%.*s', the model is '%s'", path, (int)(arch.p ? HT_MIN(arch.n, 64) : 0),
             arch.p ? arch.p : "", m->arch->name);
        hearth_lora_free(a);   /* (after the message: arch points into its file) */
        return -1;
    }
    if (!gguf_get_f32(g, "adapter.lora.alpha", &a->alpha)) a->alpha = 0;   /* 0: alpha = rank, as llama.cpp */
    a->e = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *a->e);
    if (!a->e) { hearth_lora_free(a); return herr(err, "out of memory"); }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *ta = &g->tensors[i];
        const size_t nl = strlen(ta->name);
        if (nl < 7 || strcmp(ta->name + nl - 7, ".lora_b") == 0) continue;
        if (strcmp(ta->name + nl - 7, ".lora_a")) {
            herr(err, "%s: tensor '%s' is not a LoRA pair's", path, ta->name);
            hearth_lora_free(a);
            return -1;
        }
        char bname[512];
        snprintf(bname, sizeof bname, "%.*s.lora_b", (int)(nl - 7), ta->name);
        const gguf_tensor *tb = gguf_find_tensor(g, bname);
        const ht_tensor *W = base_tensor(m, ta->name, nl - 7);
        const char *why = !tb ? "its lora_b is missing" : !W ? "the model has no such weight"
                        : W->n_dims != 2 ? "only matrices can be adapted (not expert stacks or vectors)"
                        : ta->n_dims != 2 || tb->n_dims != 2 || ta->ne[0] != W->ne[0] || tb->ne[1] != W->ne[1] ||
                                  ta->ne[1] != tb->ne[0] || ta->ne[1] < 1 ? "its shapes do not fit the weight"
                        : !ht_get_traits(ta->type) || !ht_get_traits(tb->type) ? "its type is not supported" : NULL;
        if (why) {
            herr(err, "%s: %.*s: %s", path, (int)(nl - 7), ta->name, why);
            hearth_lora_free(a);
            return -1;
        }
        lora_entry *en = &a->e[a->n++];
        en->base = W->data;
        en->a = view(ta);
        en->b = view(tb);
        a->max_rank = (int)HT_MAX(a->max_rank, ta->ne[1]);
        a->max_out = HT_MAX(a->max_out, tb->ne[1]);
    }
    if (!a->n) { hearth_lora_free(a); return herr(err, "%s: the adapter adapts no weight", path); }
    if (transpose_b(a, err)) { hearth_lora_free(a); return -1; }
    *out = a;
    return 0;
}

void hearth_lora_free(hearth_lora *a) {
    if (!a) return;
    if (a->g) gguf_close(a->g);
    if (a->st) st_close(a->st);
    for (int i = 0; i < a->n_owned; i++) free(a->owned[i]);
    free(a->owned);
    free(a->e);
    free(a);
}

/* ---- PEFT directories: adapter_config.json + adapter_model.safetensors ----
 * base_model.model.<the HF weight's name minus .weight>.lora_A.weight [r, in] and .lora_B.weight [out, r] are
 * lora_a and lora_b as they are; where the family's HF q/k rows are in rotate-half order and the base is a
 * GGUF (whose converter permuted them), lora_B's q/k rows are permuted the same way. */
static const float *owned_f32(hearth_lora *a, const st_tensor *t, int permute_heads, hearth_err *err) {
    const int64_t cols = t->ne[0], rows = t->ne[1];
    float *f = malloc((size_t)(rows * cols) * sizeof(float)), *g = permute_heads ? malloc((size_t)(rows * cols) * sizeof(float)) : NULL;
    void **o = realloc(a->owned, (size_t)(a->n_owned + 1) * sizeof *o);
    if (o) a->owned = o;
    if (!f || (permute_heads && !g) || !o) { free(f); free(g); herr(err, "out of memory"); return NULL; }
    if (st_read_f32(t, 0, (uint64_t)(rows * cols), f, err)) { free(f); free(g); return NULL; }
    if (permute_heads) {   /* GGUF row r of a head holds HF row (r % 2) * hd / 2 + r / 2 of it */
        const int64_t hd = rows / permute_heads;
        for (int64_t r = 0; r < rows; r++) {
            const int64_t h = r / hd, i = r % hd;
            memcpy(g + r * cols, f + (h * hd + (i % 2) * (hd / 2) + i / 2) * cols, (size_t)cols * sizeof(float));
        }
        free(f);
        f = g;
    }
    a->owned[a->n_owned++] = f;
    return f;
}

static int load_peft(hearth_lora *a, const char *dir, hearth_err *err) {
    const hearth_model *m = a->m;
    char path[4096];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    cJSON *cfg = st_read_json(path, err);
    if (!cfg) return -1;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(cfg, "peft_type"), *r = cJSON_GetObjectItemCaseSensitive(cfg, "r"),
                *alpha = cJSON_GetObjectItemCaseSensitive(cfg, "lora_alpha"), *rs = cJSON_GetObjectItemCaseSensitive(cfg, "use_rslora"),
                *rp = cJSON_GetObjectItemCaseSensitive(cfg, "rank_pattern"), *ap = cJSON_GetObjectItemCaseSensitive(cfg, "alpha_pattern");
    const char *why = cJSON_IsString(type) && strcmp(type->valuestring, "LORA") ? "not a LORA adapter (peft_type)"
                    : !cJSON_IsNumber(r) || r->valuedouble < 1 || r->valuedouble > 65536 ? "no valid r"
                    : !cJSON_IsNumber(alpha) || !isfinite(alpha->valuedouble) ? "no valid lora_alpha"
                    : (cJSON_IsObject(rp) && rp->child) || (cJSON_IsObject(ap) && ap->child) ? "rank_pattern / alpha_pattern are not supported"
                    : NULL;
    const double rank = cJSON_IsNumber(r) ? r->valuedouble : 1;
    a->alpha = cJSON_IsNumber(alpha) ? (float)(cJSON_IsTrue(rs) ? alpha->valuedouble * sqrt(rank) : alpha->valuedouble) : 0;
    cJSON_Delete(cfg);
    if (why) return herr(err, "%s: %s", path, why);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (st_open_file(path, &a->st, err)) return -1;
    a->e = calloc(a->st->n_tensors + 1, sizeof *a->e);
    if (!a->e) return herr(err, "out of memory");
    for (uint64_t i = 0; i < a->st->n_tensors; i++) {
        const st_tensor *ta = &a->st->tensors[i];
        const char *at = strstr(ta->name, ".lora_A.");
        if (!at) {
            if (strstr(ta->name, ".lora_B.")) continue;
            return herr(err, "%s: tensor '%s' is not a LoRA pair's", path, ta->name);
        }
        char hf[512], bname[512], gname[256];
        const char *nm = strncmp(ta->name, "base_model.model.", 17) ? ta->name : ta->name + 17;
        const int stem = (int)(at - nm);
        snprintf(hf, sizeof hf, "%.*s.weight", stem, nm);
        snprintf(bname, sizeof bname, "%.*s.lora_B.%s", (int)(at - ta->name), ta->name, at + 8);
        const st_tensor *tb = st_find(a->st, bname);
        bool rotate_half = false;
        const ht_tensor *W = NULL;
        if (hf_gguf_name(m->arch->name, hf, gname, sizeof gname, &rotate_half)) W = base_tensor(m, gname, strlen(gname));
        const char *bad = !tb ? "its lora_B is missing" : !W ? "the model has no such weight"
                        : W->n_dims != 2 ? "only matrices can be adapted"
                        : ta->n_dims != 2 || tb->n_dims != 2 || ta->ne[0] != W->ne[0] || tb->ne[1] != W->ne[1] ||
                                  ta->ne[1] != tb->ne[0] ? "its shapes do not fit the weight"
                        : ta->type == ST_UNSUPPORTED || tb->type == ST_UNSUPPORTED ? "its dtype is not supported" : NULL;
        if (bad) return herr(err, "%s: %s: %s", path, hf, bad);
        const bool q = strstr(gname, "attn_q.weight") != NULL, k = strstr(gname, "attn_k.weight") != NULL;
        const int heads = rotate_half && !m->qk_rotate_half && (q || k) ? (q ? m->hp.n_head : m->hp.n_head_kv) : 0;
        lora_entry *en = &a->e[a->n++];
        en->base = W->data;
        const st_tensor *pair[2] = { ta, tb };
        ht_tensor *dst[2] = { &en->a, &en->b };
        for (int j = 0; j < 2; j++) {
            const st_tensor *t = pair[j];
            const bool copy = !t->aligned || (j == 1 && heads);
            const void *data = copy ? owned_f32(a, t, j == 1 ? heads : 0, err) : t->data;
            if (!data) return -1;
            *dst[j] = (ht_tensor){ .name = t->name, .type = copy ? (uint32_t)HT_F32 : (uint32_t)t->type, .n_dims = 2,
                                   .ne = { t->ne[0], t->ne[1], 1, 1 }, .data = data };
            dst[j]->row_bytes = ht_row_size(dst[j]->type, dst[j]->ne[0]);
            dst[j]->nbytes = dst[j]->row_bytes * (size_t)dst[j]->ne[1];
        }
        a->max_rank = (int)HT_MAX(a->max_rank, ta->ne[1]);
        a->max_out = HT_MAX(a->max_out, tb->ne[1]);
    }
    return a->n ? transpose_b(a, err) : herr(err, "%s: the adapter adapts no weight", path);
}

int hearth_lora_count(const hearth_lora *a) { return a ? a->n : 0; }
int hearth_lora_rank(const hearth_lora *a) { return a ? a->max_rank : 0; }
float hearth_lora_alpha(const hearth_lora *a) { return a ? a->alpha : 0; }

void lora_ctx_free(hearth_ctx *c) {
    ht_lora_set *s = c->lora;
    if (!s) return;
    ctx_buf_free(s->t);
    ctx_buf_free(s->u);
    ctx_buf_free(s->f);
    free(s->scale);
    free(s->group);
    free(s);
    c->lora = NULL;
    c->product_hook = NULL;
}

int hearth_ctx_set_lora(hearth_ctx *c, hearth_lora *const *a, const float *scales, int n, hearth_err *err) {
    if (n < 0 || n > HEARTH_MAX_LORA) return herr(err, "%d adapters: at most %d at once", n, HEARTH_MAX_LORA);
    if (c->dist_id >= 0 && n > 0) return herr(err, "LoRA adapters are not supported with the model split over MPI ranks");
    int rank = 0;
    int64_t out = 0;
    for (int i = 0; i < n; i++) {
        if (!a[i] || a[i]->m != c->m) return herr(err, "adapter %d was loaded for another model", i);
        if (a[i]->merged) return herr(err, "adapter %d is merged into the model's weights: its scale is fixed", i);
        if (!isfinite(scales[i])) return herr(err, "adapter %d: scale %g", i, scales[i]);
        rank = HT_MAX(rank, a[i]->max_rank);
        out = HT_MAX(out, a[i]->max_out);
    }
    lora_ctx_free(c);
    if (!n) return 0;
    bool fail = false;
    ht_lora_set *s = calloc(1, sizeof *s);
    if (!s) return herr(err, "out of memory");
    c->lora = s;
    const size_t pairs = (size_t)LORA_GROUP * (size_t)n;   /* lora_add's group: a t and f per (matrix, adapter) */
    s->t = ctx_buf_calloc((size_t)c->n_batch * (size_t)rank * pairs, sizeof(float), &fail);
    s->u = ctx_buf_calloc((size_t)c->n_batch * (size_t)out, sizeof(float), &fail);
    s->f = ctx_buf_calloc((size_t)c->n_batch * pairs, sizeof(float), &fail);
    s->scale = malloc((size_t)c->n_seq * (size_t)n * sizeof(float));
    s->group = malloc(sizeof *s->group);
    if (fail || !s->scale || !s->group) { lora_ctx_free(c); return herr(err, "out of memory for the adapters' scratch"); }
    s->n = n, s->n_seq = c->n_seq, s->max_rank = rank;
    for (int i = 0; i < n; i++) s->a[i] = a[i];
    for (int q = 0; q < c->n_seq; q++) memcpy(s->scale + (size_t)q * n, scales, (size_t)n * sizeof(float));
    c->product_hook = lora_add;
    return 0;
}

int hearth_seq_set_lora(hearth_ctx *c, int seq, const float *scales, hearth_err *err) {
    ht_lora_set *s = c->lora;
    if (!s) return herr(err, "the context has no adapters (hearth_ctx_set_lora)");
    if (seq < 0 || seq >= s->n_seq) return herr(err, "sequence %d out of range", seq);
    for (int i = 0; i < s->n; i++)
        if (!isfinite(scales[i])) return herr(err, "adapter %d: scale %g", i, scales[i]);
    memcpy(s->scale + (size_t)seq * s->n, scales, (size_t)s->n * sizeof(float));
    return 0;
}

typedef struct { float *y; const float *u, *f; int cols; } axpy_job;

static void axpy_rows(const void *arg, int r0, int r1) {
    const axpy_job *j = arg;
    for (int r = r0; r < r1; r++) {
        if (j->f[r] == 0) continue;   /* a row whose sequence does not use this adapter: untouched */
        float *y = j->y + (size_t)r * j->cols;
        const float *u = j->u + (size_t)r * j->cols;
        for (int i = 0; i < j->cols; i++) y[i] += j->f[r] * u[i];
    }
}

#define FUSED_BLOCK 256

/* Every F32 pair's lora_b, transposed (an owned copy) block by block: for each FUSED_BLOCK outputs, [rank][block]
 * (the last block padded), so a block's terms are one contiguous 16 KB at rank 16. (Transposed whole, [rank][out],
 * a block's rank rows lay a power of two apart for most widths and evicted each other from L1.) */
static int transpose_b(hearth_lora *a, hearth_err *err) {
    for (int i = 0; i < a->n; i++) {
        lora_entry *e = &a->e[i];
        if (e->a.type != HT_F32 || e->b.type != HT_F32) continue;
        const int64_t rank = e->b.ne[0], out = e->b.ne[1], nb = (out + FUSED_BLOCK - 1) / FUSED_BLOCK;
        float *t = calloc((size_t)(rank * nb * FUSED_BLOCK), sizeof(float));
        void **o = realloc(a->owned, (size_t)(a->n_owned + 1) * sizeof *o);
        if (o) a->owned = o;
        if (!t || !o) { free(t); return herr(err, "out of memory"); }
        const float *b = e->b.data;
        for (int64_t r = 0; r < out; r++)
            for (int64_t k = 0; k < rank; k++) t[(r / FUSED_BLOCK * rank + k) * FUSED_BLOCK + r % FUSED_BLOCK] = b[r * rank + k];
        a->owned[a->n_owned++] = t;
        e->bt = t;
    }
    return 0;
}

/* F32 pairs, fused (two passes, no matmul set-up): t[r][k] = A_k . x_r (op_dot_lanes), one task per tile of 4
 * rows by 4 of k (the tile's products in registers); then y_r += (f_r t_r[k]) B^T_k for k = 0..rank-1 in turn, by
 * row and block of outputs (y's block in registers across the k). Each value has one formula, whatever the
 * batch, the tiles, the blocks or the threads. */
static void fused_t_task(const fused_job *j, int i) {
    const int nk = (j->rank + 3) / 4, r0 = i / nk * 4, k0 = i % nk * 4;
    int nr = 0;   /* the tile's leading rows that use the adapter */
    while (nr < 4 && r0 + nr < j->n_tok && j->f[r0 + nr] != 0) nr++;
    if (nr > 0 && k0 + 4 <= j->rank)
        op_dot_lanes_x4(j->t + (size_t)r0 * j->rank + k0, (size_t)j->rank, j->x + (size_t)r0 * j->n_in, (size_t)j->n_in, nr,
                        j->A + (size_t)k0 * j->n_in, (size_t)j->n_in, j->n_in);
    else nr = 0;
    for (int r = r0 + nr; r < HT_MIN(r0 + 4, j->n_tok); r++)
        for (int k = k0; k < HT_MIN(k0 + 4, j->rank); k++)
            j->t[(size_t)r * j->rank + k] = j->f[r] == 0 ? 0 : op_dot_lanes(j->A + (size_t)k * j->n_in, j->x + (size_t)r * j->n_in, j->n_in);
}

static int fused_t_tasks(const fused_job *j) { return (j->n_tok + 3) / 4 * ((j->rank + 3) / 4); }
static int fused_y_tasks(const fused_job *j) { return j->n_tok * ((j->n_out + FUSED_BLOCK - 1) / FUSED_BLOCK); }

/* y_r[o0 .. o0 + n) += (f_r t_r[k]) B^T_k[o0 ..] for k = 0..rank-1 in turn; nothing where f_r is 0 (a row whose
 * sequence does not use this adapter). */
static void fused_y_row(const fused_job *j, int r, int o0, int n) {
    if (j->f[r] == 0) return;
    const float *t = j->t + (size_t)r * j->rank;
    float *y = j->y + (size_t)r * j->n_out;
    float a[64];
    for (int k0 = 0; k0 < j->rank; k0 += 64) {
        const int m = HT_MIN(64, j->rank - k0);
        for (int k = 0; k < m; k++) a[k] = j->f[r] * t[k0 + k];
        for (int o = o0, o1; o < o0 + n; o = o1) {   /* by block of Bt */
            const int blk = o / FUSED_BLOCK;
            o1 = HT_MIN(o0 + n, (blk + 1) * FUSED_BLOCK);
            op_axpy_m(y + o, a, j->Bt + ((size_t)blk * (size_t)j->rank + (size_t)k0) * FUSED_BLOCK + o % FUSED_BLOCK,
                      FUSED_BLOCK, m, o1 - o);
        }
    }
}

static void fused_y_task(const fused_job *j, int i) {
    const int nb = (j->n_out + FUSED_BLOCK - 1) / FUSED_BLOCK;
    const int o0 = i % nb * FUSED_BLOCK;
    fused_y_row(j, i / nb, o0, HT_MIN(o0 + FUSED_BLOCK, j->n_out) - o0);
}

static void fused_t(const void *arg, int i0, int i1) { for (int i = i0; i < i1; i++) fused_t_task(arg, i); }
static void fused_y(const void *arg, int i0, int i1) { for (int i = i0; i < i1; i++) fused_y_task(arg, i); }

static void group_pre(const void *arg, int i) {
    const fused_group *g = arg;
    int p = 0;
    while (i >= g->t0[p + 1]) p++;
    fused_t_task(&g->j[p], i - g->t0[p]);
}

static void group_post(const void *arg, int m, int r0, int r1, int t0, int t1) {
    const fused_group *g = arg;
    for (int r = t0; r < t1; r++)
        for (int p = g->p0[m]; p < g->p0[m + 1]; p++) fused_y_row(&g->j[p], r, r0, r1 - r0);
}

static void lora_add_one(hearth_ctx *c, const ht_tensor *W, const float *x, int n_tok, float *y) {
    ht_lora_set *s = c->lora;
    for (int k = 0; k < s->n; k++) {   /* in the registry's order, whatever the other rows use */
        const hearth_lora *a = s->a[k];
        const lora_entry *e = NULL;
        for (int i = 0; i < a->n && !e; i++) if (a->e[i].base == W->data) e = &a->e[i];
        if (!e) continue;
        const int rank = (int)e->a.ne[1];
        const float alpha = a->alpha > 0 ? a->alpha : (float)rank;
        bool any = false;
        for (int r = 0; r < n_tok; r++) {
            const int q = c->row_seq ? c->row_seq[r] : 0;
            any |= (s->f[r] = s->scale[(size_t)q * s->n + k] * alpha / (float)rank) != 0;
        }
        if (!any) continue;
        if (e->bt) {
            fused_job j = { e->a.data, e->bt, x, s->f, s->t, y, (int)e->a.ne[0], (int)e->b.ne[1], rank, n_tok };
            pool_share(c->pool, fused_t_tasks(&j), fused_t, &j);
            pool_share(c->pool, fused_y_tasks(&j), fused_y, &j);
            continue;
        }
        matmul(c, &e->a, x, n_tok, s->t);
        matmul(c, &e->b, s->t, n_tok, s->u);
        axpy_job j = { y, s->u, s->f, (int)W->ne[1] };
        pool_share(c->pool, n_tok, axpy_rows, &j);
    }
}

/* The entry of adapter a for W, or NULL. */
static const lora_entry *entry_for(const hearth_lora *a, const ht_tensor *W) {
    for (int i = 0; i < a->n; i++) if (a->e[i].base == W->data) return &a->e[i];
    return NULL;
}

bool lora_add(hearth_ctx *c, const ht_tensor *const *W, float *const *y, int n_mat, const float *x, int n_tok,
              ht_product_fuse *fuse) {
    ht_lora_set *s = c->lora;
    if (!s) return true;
    if (!fuse) {   /* not fused (lora_add said so before the product): matrix by matrix */
        for (int m = 0; m < n_mat; m++) lora_add_one(c, W[m], x, n_tok, y[m]);
        return true;
    }
    fused_group *g = s->group;
    g->n = 0;
    if (n_mat > LORA_GROUP) return false;   /* every pair in play fused into the product, or none */
    for (int m = 0; m < n_mat; m++) {
        g->p0[m] = g->n;
        for (int k = 0; k < s->n; k++) {
            const hearth_lora *a = s->a[k];
            const lora_entry *e = entry_for(a, W[m]);
            if (!e) continue;
            const int rank = (int)e->a.ne[1];
            const float alpha = a->alpha > 0 ? a->alpha : (float)rank;
            float *f = s->f + (size_t)g->n * (size_t)c->n_batch;
            bool any = false;
            for (int r = 0; r < n_tok; r++) {
                const int q = c->row_seq ? c->row_seq[r] : 0;
                any |= (f[r] = s->scale[(size_t)q * s->n + k] * alpha / (float)rank) != 0;
            }
            if (!any) continue;
            if (!e->bt) return false;
            float *t = s->t + (size_t)g->n * (size_t)c->n_batch * (size_t)s->max_rank;
            g->j[g->n] = (fused_job){ e->a.data, e->bt, x, f, t, y[m], (int)e->a.ne[0], (int)e->b.ne[1], rank, n_tok };
            g->n++;
        }
    }
    if (!g->n) return true;
    g->p0[n_mat] = g->n;
    g->t0[0] = 0;
    for (int p = 0; p < g->n; p++) g->t0[p + 1] = g->t0[p] + fused_t_tasks(&g->j[p]);
    *fuse = (ht_product_fuse){ .n_pre = g->t0[g->n], .pre = group_pre, .post = group_post, .arg = g };
    return true;
}

/* FNV-1a over an adapter at a scale: the scale, alpha, and each pair's first bytes and shapes. */
static uint64_t hash_adapter(uint64_t h, const hearth_lora *a, float sc) {
    const float v[2] = { sc, a->alpha };
    const uint8_t *p = (const uint8_t *)v;
    for (size_t i = 0; i < sizeof v; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    for (int i = 0; i < a->n; i++) {
        const ht_tensor *t[2] = { &a->e[i].a, &a->e[i].b };
        for (int j = 0; j < 2; j++) {
            p = t[j]->data;
            for (size_t b = 0; b < HT_MIN(t[j]->nbytes, (size_t)256); b++) h = (h ^ p[b]) * 0x100000001b3ull;
            h = (h ^ (uint64_t)t[j]->ne[0] ^ ((uint64_t)t[j]->ne[1] << 32)) * 0x100000001b3ull;
        }
    }
    return h;
}

/* The merged adapters' identity (the model's) goes first: a merged model's KV is never another's. */
uint64_t hearth_seq_lora_id(const hearth_ctx *c, int seq) {
    const ht_lora_set *s = c->lora;
    if (!s || seq < 0 || seq >= s->n_seq) return c->m->lora_merged;
    uint64_t h = c->m->lora_merged ? c->m->lora_merged : 0xcbf29ce484222325ull;
    bool any = c->m->lora_merged != 0;
    for (int k = 0; k < s->n; k++) {
        const float sc = s->scale[(size_t)seq * s->n + k];
        if (sc == 0) continue;
        any = true;
        h = hash_adapter(h, s->a[k], sc);
    }
    return any ? h : 0;
}

uint64_t hearth_ctx_lora_id(const hearth_ctx *c) { return hearth_seq_lora_id(c, 0); }

/* ---- merging: W' = W + sum of f B A, row by row ----
 * Output row o of W: its floats, then for each adapter (in the caller's order) and k = 0..rank-1 in turn,
 * w += (f B[o][k]) A[k]; then the merged type's reference quantizer. One formula per row: threads do not
 * change it. */
typedef struct {
    const ht_tensor *W;
    const void *old;          /* W's data before the merge (the slots to repoint) */
    uint32_t type;            /* the merged copy's */
    size_t dst_row;
    uint8_t *dst;
    int n;                    /* adapters adapting W */
    const float *A[HEARTH_MAX_LORA];   /* lora_a as floats, [rank][n_in] */
    const ht_tensor *B[HEARTH_MAX_LORA];
    float f[HEARTH_MAX_LORA];
} merge_job;

typedef struct { merge_job *jobs; int n_jobs, max_rank; bool failed; } merge_all;

static void merge_rows(void *arg, int ith, int nth) {
    merge_all *all = arg;
    int64_t max_in = 0;
    for (int i = 0; i < all->n_jobs; i++) max_in = HT_MAX(max_in, all->jobs[i].W->ne[0]);
    float *w = malloc((size_t)max_in * sizeof(float)), *b = malloc((size_t)all->max_rank * sizeof(float));
    if (!w || !b) { all->failed = true; free(w); free(b); return; }   /* (any thread's true is enough) */
    int64_t g = 0;
    for (int i = 0; i < all->n_jobs; i++) {
        const merge_job *j = &all->jobs[i];
        const int64_t n_in = j->W->ne[0];
        const ht_traits *wt = ht_get_traits(j->W->type), *dt = ht_get_traits_ref(j->type);
        for (int64_t o = 0; o < j->W->ne[1]; o++, g++) {
            if (g % nth != ith) continue;
            wt->to_float(ht_row(j->W, o), w, n_in);
            for (int k = 0; k < j->n; k++) {
                const int64_t rank = j->B[k]->ne[0];
                ht_get_traits(j->B[k]->type)->to_float(ht_row(j->B[k], o), b, rank);
                for (int64_t r = 0; r < rank; r++) op_axpy(w, j->f[k] * b[r], j->A[k] + r * n_in, (int)n_in);
            }
            dt->from_float(w, j->dst + (size_t)o * j->dst_row, n_in);
        }
    }
    free(w);
    free(b);
}

int lora_merge(hearth_model *m, hearth_lora *const *a, const float *scales, int n, int n_threads, lora_type_fn type_of,
               void *user, size_t *bytes, hearth_err *err) {
    if (bytes) *bytes = 0;
    if (n < 0 || n > HEARTH_MAX_LORA) return herr(err, "%d adapters: at most %d at once", n, HEARTH_MAX_LORA);
    if (m->weights_packed) return herr(err, "adapters are merged before the model's first context");
    if (m->tp_size > 1 || m->layer_lo != 0 || m->layer_hi != m->hp.n_layer)
        return herr(err, "merging adapters is not supported with the model split over MPI ranks");
    for (int i = 0; i < n; i++) {
        if (!a[i] || a[i]->m != m) return herr(err, "adapter %d was loaded for another model", i);
        if (a[i]->merged) return herr(err, "adapter %d is merged already", i);
        if (!isfinite(scales[i])) return herr(err, "adapter %d: scale %g", i, scales[i]);
    }
    int n_slots = MODEL_MATRICES(m);
    ht_tensor **slots = malloc((size_t)(n_slots + m->hp.n_layer + 1) * sizeof *slots);
    int *job_of = malloc((size_t)m->n_tensors * sizeof *job_of);
    merge_job *jobs = calloc((size_t)m->n_tensors + 1, sizeof *jobs);
    float **owned = calloc((size_t)n * (size_t)m->n_tensors + 1, sizeof *owned);
    merge_all all = { jobs, 0, 1, false };
    int n_owned = 0, rc = 0;
    if (!slots || !job_of || !jobs || !owned) { rc = herr(err, "out of memory"); goto out; }
    /* every view of a matrix the forward pass may multiply: the packed ones (Gemma 3n / 4's per-layer embedding
     * matrices among them), the routers */
    n_slots = model_matrices(m, slots);
    for (int il = 0; il < m->hp.n_layer; il++) slots[n_slots++] = &m->layers[il].ffn_gate_inp;
    slots[n_slots++] = &m->ple_model_proj;
    for (int i = 0; i < m->n_tensors; i++) job_of[i] = -1;
    for (int k = 0; k < n; k++) {
        if (scales[k] == 0) continue;
        for (int ei = 0; ei < a[k]->n; ei++) {
            const lora_entry *e = &a[k]->e[ei];
            int ti = 0;
            while (ti < m->n_tensors && m->tensors[ti].data != e->base) ti++;
            const ht_tensor *W = ti < m->n_tensors ? &m->tensors[ti] : NULL;
            if (!W) { rc = herr(err, "adapter %d: %s: its weight is not the model's", k, e->a.name); goto out; }
            if (W->data == m->tok_embd.data) { rc = herr(err, "%s: a token embedding is not merged (apply the adapter unmerged)", W->name); goto out; }
            if (job_of[ti] < 0) {
                merge_job *j = &jobs[job_of[ti] = all.n_jobs++];
                j->W = W, j->old = W->data;
                j->type = type_of ? type_of(m, W, user) : W->type;
                const ht_traits *dt = ht_get_traits_ref(j->type);
                j->dst_row = ht_row_size(j->type, W->ne[0]);
                bool used = false;
                for (int si = 0; si < n_slots; si++) used |= slots[si]->data == W->data;
                if (!dt || !dt->from_float || !j->dst_row || !ht_get_traits(W->type) || !ht_get_traits(W->type)->to_float) {
                    rc = herr(err, "%s: hearth cannot requantize type %s (apply the adapter unmerged)", W->name, dt ? dt->name : "?");
                    goto out;
                }
                if (!used) { rc = herr(err, "%s: not a matrix hearth merges (apply the adapter unmerged)", W->name); goto out; }
            }
            merge_job *j = &jobs[job_of[ti]];
            const int rank = (int)e->a.ne[1];
            const float *A = e->a.data;
            if (e->a.type != HT_F32) {   /* lora_a as floats, for this merge only */
                float *f = owned[n_owned++] = malloc((size_t)rank * (size_t)e->a.ne[0] * sizeof(float));
                if (!f) { rc = herr(err, "out of memory"); goto out; }
                for (int r = 0; r < rank; r++) ht_get_traits(e->a.type)->to_float(ht_row(&e->a, r), f + (size_t)r * e->a.ne[0], e->a.ne[0]);
                A = f;
            }
            j->A[j->n] = A, j->B[j->n] = &e->b;
            j->f[j->n++] = scales[k] * (a[k]->alpha > 0 ? a[k]->alpha : (float)rank) / (float)rank;
            all.max_rank = HT_MAX(all.max_rank, rank);
        }
    }
    size_t total = 0;
    for (int i = 0; i < all.n_jobs; i++) {
        merge_job *j = &jobs[i];
        if (!(j->dst = malloc(j->dst_row * (size_t)j->W->ne[1]))) { rc = herr(err, "out of memory for the merged weights"); goto out; }
        total += j->dst_row * (size_t)j->W->ne[1];
    }
    ht_pool *pool = pool_new(n_threads > 0 ? n_threads : 1);
    if (!pool) { rc = herr(err, "out of memory"); goto out; }
    pool_run(pool, merge_rows, &all);
    pool_free(pool);
    if (all.failed) { rc = herr(err, "out of memory merging the adapters"); goto out; }
    for (int i = 0; i < all.n_jobs; i++)   /* owned by the model from here on */
        if (model_own(m, jobs[i].dst, err)) { for (int k = i + 1; k < all.n_jobs; k++) free(jobs[k].dst); all.n_jobs = 0; rc = -1; goto out; }
    /* every view of each merged matrix now reads the copy */
    for (int i = 0; i < all.n_jobs; i++) {
        const merge_job *j = &jobs[i];
        for (int si = 0; si < n_slots + m->n_tensors; si++) {
            ht_tensor *t = si < n_slots ? slots[si] : &m->tensors[si - n_slots];
            if (t->data != j->old) continue;
            t->data = j->dst, t->type = j->type, t->row_bytes = j->dst_row, t->nbytes = j->dst_row * (size_t)t->ne[1];
        }
    }
    uint64_t h = m->lora_merged ? m->lora_merged : 0xcbf29ce484222325ull;
    for (int k = 0; k < n; k++) {
        a[k]->merged = true;
        if (scales[k] != 0) h = hash_adapter(h, a[k], scales[k]);
    }
    if (all.n_jobs) m->lora_merged = h;
    if (bytes) *bytes = total;
    all.n_jobs = 0;   /* (the copies are the model's) */
out:
    for (int i = 0; i < all.n_jobs; i++) free(jobs[i].dst);
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    free(jobs);
    free(job_of);
    free(slots);
    return rc;
}

int hearth_lora_merge(hearth_model *m, hearth_lora *const *a, const float *scales, int n, int n_threads, size_t *bytes,
                      hearth_err *err) {
    return lora_merge(m, a, scales, n, n_threads, NULL, NULL, bytes, err);
}
