/* pack.c — weight matrices repacked once into the row-interleaved layout the active kernel set multiplies
 * fastest (ht_pack, quant.h).
 *
 * Done when the model's first context is made (commands that only read the file, such as quantize or info,
 * never pay for it), on that context's thread pool. The packed copy replaces the mapped pages: each matrix's
 * range of the file mapping is released with MADV_DONTNEED once packed, so resident memory stays about the
 * file's size (the pages come back from the page cache if anything reads the file's layout again, as
 * quantize would). A tied token embedding is packed as the output head; its rows are still looked up in the
 * file's layout, whose pages come back one by one as tokens need them. */
#include "model/pack.h"
#include "io/safetensors.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
    const ht_tensor *t;
    uint8_t *dst;
    int groups;
} pk_job_t;

typedef struct {
    pk_job_t *jobs;
    int n_jobs;
} pk_all;

static void pack_job(void *arg, int ith, int nth) {
    const pk_all *a = arg;
    int g = 0;
    for (int i = 0; i < a->n_jobs; i++) {
        const pk_job_t *j = &a->jobs[i];
        const ht_pack *pk = j->t->pack;
        const int R = pk->rows, rows = (int)j->t->ne[1], per = (rows + R - 1) / R;   /* groups per matrix (expert) */
        const size_t gb = pk->group_bytes(j->t->ne[0]);
        for (int k = 0; k < j->groups; k++, g++)
            if (g % nth == ith)
                pk->pack(ht_row(j->t, (int64_t)(k / per) * rows + (int64_t)(k % per) * R), j->t->row_bytes,
                         HT_MIN(R, rows - k % per * R), j->t->ne[0], j->dst + (size_t)k * gb);
    }
}

/* Whole pages of [p, p + n) handed back, when [p, p + n) lies in the file mapping [base, base + size). */
static void release_in(const void *base, uint64_t size, const void *p, size_t n) {
    const uint8_t *b = base, *q = p;
    if (!b || q < b || q + n > b + size) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)q + page - 1) & ~(page - 1), hi = ((uintptr_t)q + n) & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* Only pages of a mapped file come back (MADV_DONTNEED would zero a buffer's): the GGUF's, or the safetensors
 * shards' of an HF directory. */
static void release_mapped(const hearth_model *m, const void *p, size_t n) {
    if (m->st)
        for (int i = 0; i < m->st->n_shards; i++) release_in(m->st->shards[i].map, m->st->shards[i].size, p, n);
    else if (m->gguf && gguf_mapped(m->gguf)) release_in(m->gguf->map, m->gguf->size, p, n);
}

/* The matrices a forward pass multiplies through matmul(), the output head last (output.weight, or the token
 * embedding when it is tied: lookups of single rows then read the file's pages back one by one). The head
 * meets one token a step in decode and one per stream when a server batches several: every packed layout
 * is at least as fast as the file's for one token and much faster for several. */
int model_matrices(hearth_model *m, ht_tensor **out) {
    int n = 0;
    for (int il = m->layer_lo; il < m->layer_hi; il++) {   /* this process's layers only (MPI) */
        ht_layer *L = &m->layers[il];
        ht_tensor *ts[LAYER_MATRICES] = {&L->wq, &L->wk, &L->wv, &L->wqkv, &L->wo, &L->ffn_gate, &L->ffn_up, &L->ffn_down,
                                         &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps,
                                         &L->ffn_gate_shexp, &L->ffn_up_shexp, &L->ffn_down_shexp,
                                         &L->ssm_qkv, &L->ssm_z, &L->ssm_beta, &L->ssm_alpha, &L->ssm_out, &L->ssm_in, &L->ssm_ba,
                                         &L->ffn_gate_inp_shexp, &L->wq_a, &L->wq_b, &L->wkv_a, &L->wk_b, &L->wv_b,
                                         &L->ple_gate, &L->ple_proj, &L->laurel_l, &L->laurel_r};
        for (int i = 0; i < LAYER_MATRICES; i++) out[n++] = ts[i];
    }
    ht_tensor *head = m->output.data ? &m->output : m->hp.logits ? &m->tok_embd : NULL;
    if (head && m->layer_lo == 0) out[n++] = head;   /* (under --tp, this rank's rows of it) */
    return n;
}

/* The packed copies live in one arena, in transparent huge pages where the kernel gives them (madvise mode):
 * decode streams every weight once per token, and with 4 KiB pages that is a TLB miss per 4 KiB; the faults of
 * the first touch (packing) are 512 times fewer too. One arena wastes at most one partial huge page, so a small
 * one (a test model, under 16 MiB) stays in ordinary pages: rounded up to 2 MiB it would be mostly waste. */
static void *alloc_arena(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    void *p = NULL;
    if (bytes < 8 * huge) return posix_memalign(&p, 64, bytes ? bytes : 64) ? NULL : p;
    bytes = (bytes + huge - 1) / huge * huge;
    if (posix_memalign(&p, huge, bytes)) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

static pthread_mutex_t pack_mu = PTHREAD_MUTEX_INITIALIZER;

int model_pack_weights(hearth_model *m, ht_pool *pool, hearth_err *err) {
    pthread_mutex_lock(&pack_mu);
    if (m->weights_packed || !m->layers) { pthread_mutex_unlock(&pack_mu); return 0; }
    int n = MODEL_MATRICES(m), rc = 0;
    size_t arena_bytes = 0;
    ht_tensor **ts = malloc((size_t)n * sizeof *ts);
    pk_job_t *jobs = calloc((size_t)n, sizeof *jobs);
    pk_all all = { jobs, 0 };
    if (!ts || !jobs) { rc = herr(err, "out of memory"); goto out; }
    n = model_matrices(m, ts);
    for (int i = 0; i < n; i++) {
        ht_tensor *t = ts[i];
        const ht_traits *tr = t->data ? ht_get_traits(t->type) : NULL;
        if (!tr || !tr->pack || t->pack) continue;
        const ht_pack *pk = tr->pack;
        const int groups = (int)((t->ne[1] + pk->rows - 1) / pk->rows * t->ne[2]);   /* an expert's rows: its own groups */
        t->pack = pk;
        jobs[all.n_jobs++] = (pk_job_t){ t, (uint8_t *)(uintptr_t)arena_bytes, groups };   /* an offset, for now */
        arena_bytes += ((size_t)groups * pk->group_bytes(t->ne[0]) + 63) / 64 * 64;
    }
    uint8_t *arena = all.n_jobs ? alloc_arena(arena_bytes) : NULL;
    if (all.n_jobs && (!arena || model_own(m, arena, err))) { rc = herr(err, "out of memory packing the weights"); goto out; }
    for (int i = 0; i < all.n_jobs; i++) jobs[i].dst = arena + (uintptr_t)jobs[i].dst;
    pool_run(pool, pack_job, &all);
    for (int i = 0; i < all.n_jobs; i++) {
        ht_tensor *t = (ht_tensor *)jobs[i].t;
        t->packed = jobs[i].dst;
        if (t->slabs)
            for (int e = 0; e < t->ne[2]; e++) release_mapped(m, t->slabs[e], (size_t)t->ne[1] * t->row_bytes);
        else release_mapped(m, t->data, t->nbytes);
    }
    m->weights_packed = true;
out:
    if (rc) for (int i = 0; i < all.n_jobs; i++) ((ht_tensor *)jobs[i].t)->pack = NULL;
    free(ts);
    free(jobs);
    pthread_mutex_unlock(&pack_mu);
    return rc;
}
