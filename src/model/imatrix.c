/* imatrix.c — collecting, writing and reading importance matrices as llama.cpp's tools/imatrix does.
 *
 * For each weight matrix the input rows of its products are summed squared per input column, in float and row
 * by row as ggml's collector does, and counted: one count per matrix for a plain product (every row), one per
 * expert for an expert stack (the rows routed to that expert). MLA's per-head matrices are one 3-D weight to
 * ggml (one count, a row of sums per head), and are kept so here. Reading gives llama-quantize's weights:
 * sum / count per matrix, 1 where nothing was counted. */
#include "model/imatrix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "model/model.h"

#define IM_MIN_ROWS 16   /* ggml's collector skips plain products of fewer rows */

typedef struct {
    char *name;
    const char *key;   /* the tensor's name pointer while collecting (a fast first compare) */
    int64_t ne0;
    int n_mat, n_cnt;  /* n_cnt: 1 (one count for all matrices) or n_mat */
    float *sum;        /* [n_mat][ne0] */
    double *cnt;       /* [n_cnt] */
    float *w;          /* the derived weights (imatrix_weights), made on first use */
} im_entry;

struct ht_imatrix {
    bool process_output;
    im_entry *e;
    int n, cap;
    char *dataset;
    int chunk_count, chunk_size;
};

ht_imatrix *imatrix_new(bool process_output) {
    ht_imatrix *im = calloc(1, sizeof *im);
    if (im) im->process_output = process_output;
    return im;
}

void imatrix_free(ht_imatrix *im) {
    if (!im) return;
    for (int i = 0; i < im->n; i++) {
        free(im->e[i].name);
        free(im->e[i].sum);
        free(im->e[i].cnt);
        free(im->e[i].w);
    }
    free(im->e);
    free(im->dataset);
    free(im);
}

static im_entry *find(ht_imatrix *im, const char *name) {
    for (int i = 0; i < im->n; i++)
        if (im->e[i].key == name || !strcmp(im->e[i].name, name)) return &im->e[i];
    return NULL;
}

static im_entry *add(ht_imatrix *im, const char *name, int64_t ne0, int n_mat, int n_cnt) {
    if (im->n == im->cap) {
        int cap = im->cap ? 2 * im->cap : 64;
        im_entry *e = realloc(im->e, (size_t)cap * sizeof *e);
        if (!e) return NULL;
        im->e = e;
        im->cap = cap;
    }
    im_entry *e = &im->e[im->n];
    *e = (im_entry){ .name = strdup(name), .key = name, .ne0 = ne0, .n_mat = n_mat, .n_cnt = n_cnt,
                     .sum = calloc((size_t)(ne0 * n_mat), sizeof(float)), .cnt = calloc((size_t)n_cnt, sizeof(double)) };
    if (!e->name || !e->sum || !e->cnt) {
        free(e->name), free(e->sum), free(e->cnt);
        return NULL;
    }
    im->n++;
    return e;
}

static void add_sq(float *acc, const float *x, int64_t n) {
    for (int64_t j = 0; j < n; j++) acc[j] += x[j] * x[j];
}

static void collect(void *user, const ht_tensor *W, int e, const float *x, const int *src, int n, const int *cnt) {
    ht_imatrix *im = user;
    if (!W->name || !(strncmp(W->name, "blk.", 4) == 0 || (im->process_output && !strcmp(W->name, "output.weight")))) return;
    if (!cnt && n < IM_MIN_ROWS) return;
    const int64_t ne0 = W->ne[0];
    const int n_mat = (int)(W->n_dims > 2 ? W->ne[2] : 1);
    im_entry *en = find(im, W->name);
    if (!en && !(en = add(im, W->name, ne0, n_mat, cnt ? n_mat : 1))) return;   /* out of memory: not collected */
    if (en->ne0 != ne0 || en->n_mat != n_mat) return;   /* one name, one shape: cannot happen for a bound model */
    if (cnt) {   /* a mixture: each expert's rows into its matrix; the counts become per expert */
        if (en->n_cnt == 1 && n_mat > 1) {
            double c0 = en->cnt[0];
            double *c = realloc(en->cnt, (size_t)n_mat * sizeof *c);
            if (!c) return;
            for (int i = 0; i < n_mat; i++) c[i] = c0;
            en->cnt = c;
            en->n_cnt = n_mat;
        }
        for (int k = 0, r = 0; k < n_mat; r += cnt[k++]) {
            for (int i = r; i < r + cnt[k]; i++) add_sq(en->sum + (size_t)k * ne0, x + (size_t)(src ? src[i] : i) * ne0, ne0);
            en->cnt[en->n_cnt > 1 ? k : 0] += cnt[k];
        }
        return;
    }
    float *acc = en->sum + (size_t)(e > 0 ? e : 0) * ne0;
    for (int i = 0; i < n; i++) add_sq(acc, x + (size_t)i * ne0, ne0);
    if (e <= 0)   /* matrix e of a 3-D weight: the rows are counted once for all its matrices, as ggml does */
        for (int i = 0; i < en->n_cnt; i++) en->cnt[i] += n;
}

void imatrix_attach(ht_imatrix *im, hearth_ctx *c) {
    c->input_hook = im ? collect : NULL;
    c->input_hook_user = im;
}

static int cmp_entry(const void *a, const void *b) { return strcmp(((const im_entry *)a)->name, ((const im_entry *)b)->name); }

int imatrix_write(const ht_imatrix *im, const char *path, const char *const *datasets, int n_datasets, int chunk_size,
                  hearth_err *err) {
    im_entry *sorted = malloc((size_t)(im->n ? im->n : 1) * sizeof *sorted);
    float **counts = calloc((size_t)(im->n ? im->n : 1), sizeof *counts);
    gguf_writer *w = gguf_writer_new();
    int rc = -1;
    if (!sorted || !counts || !w) {
        herr(err, "out of memory");
        goto done;
    }
    memcpy(sorted, im->e, (size_t)im->n * sizeof *sorted);
    qsort(sorted, (size_t)im->n, sizeof *sorted, cmp_entry);
    double most = 0;
    for (int i = 0; i < im->n; i++)
        for (int k = 0; k < im->e[i].n_cnt; k++) most = fmax(most, im->e[i].cnt[k]);
    gguf_w_str(w, "general.type", "imatrix");
    gguf_w_arr_str(w, "imatrix.datasets", datasets, (uint64_t)n_datasets);
    gguf_w_u32(w, "imatrix.chunk_count", chunk_size > 0 ? (uint32_t)(most / chunk_size) : 0);
    gguf_w_u32(w, "imatrix.chunk_size", (uint32_t)chunk_size);
    for (int i = 0; i < im->n; i++) {
        const im_entry *e = &sorted[i];
        if (!(counts[i] = malloc((size_t)e->n_cnt * sizeof(float)))) {
            herr(err, "out of memory");
            goto done;
        }
        for (int k = 0; k < e->n_cnt; k++) counts[i][k] = (float)e->cnt[k];
        char name[512];
        /* llama.cpp's shape: a row of sums per count (so MLA's heads, counted once, are one long row) */
        int64_t ne_s[2] = { e->ne0 * e->n_mat / e->n_cnt, e->n_cnt }, ne_c[2] = { 1, e->n_cnt };
        snprintf(name, sizeof name, "%s.in_sum2", e->name);
        /* as ggml writes them: trailing dimensions of 1 dropped */
        gguf_w_tensor(w, name, HT_F32, e->n_cnt > 1 ? 2 : 1, ne_s, e->sum, (uint64_t)(e->ne0 * e->n_mat) * sizeof(float));
        snprintf(name, sizeof name, "%s.counts", e->name);
        gguf_w_tensor(w, name, HT_F32, e->n_cnt > 1 ? 2 : 1, ne_c, counts[i], (uint64_t)e->n_cnt * sizeof(float));
    }
    rc = gguf_writer_write(w, path, err);
done:
    gguf_writer_free(w);
    for (int i = 0; counts && i < im->n; i++) free(counts[i]);
    free(counts);
    free(sorted);
    return rc;
}

static bool ends_with(const char *s, const char *suf, size_t *stem) {
    size_t n = strlen(s), m = strlen(suf);
    if (n <= m || strcmp(s + n - m, suf)) return false;
    *stem = n - m;
    return true;
}

int imatrix_load(const char *path, ht_imatrix **out, hearth_err *err) {
    gguf_file *f;
    *out = NULL;
    if (gguf_open(path, &f, err)) return -1;
    ht_imatrix *im = imatrix_new(false);
    uint32_t u;
    gguf_str s;
    int rc = -1;
    if (!im) {
        herr(err, "out of memory");
        goto done;
    }
    if (!gguf_find(f, "imatrix.chunk_size") && !gguf_find(f, "imatrix.datasets")) {
        herr(err, "%s: not a GGUF imatrix (no imatrix.* metadata)", path);
        goto done;
    }
    if (gguf_get_u32(f, "imatrix.chunk_count", &u)) im->chunk_count = (int)u;
    if (gguf_get_u32(f, "imatrix.chunk_size", &u)) im->chunk_size = (int)u;
    const gguf_kv *ds = gguf_find(f, "imatrix.datasets");
    if (ds && ds->type == GGUF_ARR && ds->arr_type == GGUF_STR && ds->arr_n > 0) {
        s = gguf_arr_str(ds, 0);
        if (!(im->dataset = strndup(s.p, (size_t)s.n))) {
            herr(err, "out of memory");
            goto done;
        }
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        size_t stem;
        if (!ends_with(t->name, ".in_sum2", &stem)) {
            if (!ends_with(t->name, ".counts", &stem)) {
                herr(err, "%s: tensor '%s' is neither NAME.in_sum2 nor NAME.counts", path, t->name);
                goto done;
            }
            continue;
        }
        char name[512], cname[600];
        if (stem >= sizeof name) {
            herr(err, "%s: tensor name too long", path);
            goto done;
        }
        memcpy(name, t->name, stem);
        name[stem] = 0;
        snprintf(cname, sizeof cname, "%s.counts", name);
        const gguf_tensor *c = gguf_find_tensor(f, cname);
        if (!c) {
            herr(err, "%s: '%s' has sums but no counts", path, name);
            goto done;
        }
        if (t->type != HT_F32 || c->type != HT_F32) {
            herr(err, "%s: the sums and counts of '%s' must be F32", path, name);
            goto done;
        }
        if (c->nelem < 1 || t->nelem % c->nelem || t->nelem > INT32_MAX || c->nelem > INT32_MAX) {
            herr(err, "%s: '%s' has %llu sums for %llu counts", path, name, (unsigned long long)t->nelem,
                 (unsigned long long)c->nelem);
            goto done;
        }
        const int n_cnt = (int)c->nelem;
        im_entry *e = add(im, name, (int64_t)t->nelem / n_cnt, n_cnt, n_cnt);
        if (!e) {
            herr(err, "out of memory");
            goto done;
        }
        e->key = NULL;
        memcpy(e->sum, t->data, (size_t)t->nbytes);
        for (int k = 0; k < n_cnt; k++) {
            float v;
            memcpy(&v, (const uint8_t *)c->data + 4 * (size_t)k, 4);
            if (!(v >= 0) || !isfinite(v)) {
                herr(err, "%s: '%s' has a bad count (%g)", path, name, (double)v);
                goto done;
            }
            e->cnt[k] = (double)lroundf(v);
        }
    }
    if (im->n == 0) {
        herr(err, "%s: the imatrix has no entries", path);
        goto done;
    }
    rc = 0;
done:
    gguf_close(f);
    if (rc) imatrix_free(im);
    else *out = im;
    return rc;
}

const float *imatrix_weights(ht_imatrix *im, const char *name, int64_t *n) {
    im_entry *e = find(im, name);
    if (!e) return NULL;
    *n = e->ne0 * e->n_mat;
    if (!e->w && (e->w = malloc((size_t)*n * sizeof(float))))
        for (int k = 0; k < e->n_mat; k++) {
            /* as llama-quantize: the count of the matrix as a float, the sums divided by it in float */
            const float count = (float)e->cnt[e->n_cnt > 1 ? k : 0];
            for (int64_t j = 0; j < e->ne0; j++)
                e->w[k * e->ne0 + j] = count > 0.0f ? e->sum[k * e->ne0 + j] / count : 1.0f;
        }
    return e->w;
}

int imatrix_entries(const ht_imatrix *im) { return im->n; }
int imatrix_chunk_count(const ht_imatrix *im) { return im->chunk_count; }
const char *imatrix_dataset(const ht_imatrix *im) { return im->dataset; }
