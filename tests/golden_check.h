/* golden_check.h — the fixture README's bars for comparing our outputs with the reference's:
 * F32 rule (max |ours - ref| / std(ref) per case, argmax agreement) and the quantized KL rule. */
#ifndef HEARTH_GOLDEN_CHECK_H
#define HEARTH_GOLDEN_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "io/golden.h"
#include "hearth.h"
#include "testutil.h"

/* max |a - r| / std(r) over one case's values. */
static inline double gc_rel_diff(const golden_case *ours, const golden_case *ref) {
    size_t n = (size_t)golden_rows(ref) * ref->n_out;
    double mean = 0, var = 0, mx = 0;
    for (size_t i = 0; i < n; i++) mean += ref->values[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++) var += (ref->values[i] - mean) * (ref->values[i] - mean);
    double sd = sqrt(var / (double)n);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)ours->values[i] - ref->values[i]);
        if (!(d <= mx)) mx = d;   /* NaN propagates as a failure */
    }
    return sd > 0 ? mx / sd : mx;
}

static inline int gc_argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (v[i] > v[b]) b = i;
    return b;
}

/* Positions (rows) whose argmax agrees, and total rows. */
static inline void gc_argmax_agree(const golden_case *ours, const golden_case *ref, int *agree, int *total) {
    for (uint32_t r = 0; r < golden_rows(ref); r++) {
        *agree += gc_argmax(ours->values + (size_t)r * ref->n_out, (int)ref->n_out) ==
                  gc_argmax(ref->values + (size_t)r * ref->n_out, (int)ref->n_out);
        (*total)++;
    }
}

/* KL(softmax(p) || softmax(q)) for one row of logits, in double. */
static inline double gc_kl_row(const float *p, const float *q, int n) {
    double mp = -INFINITY, mq = -INFINITY, sp = 0, sq = 0, kl = 0;
    for (int i = 0; i < n; i++) { if (p[i] > mp) mp = p[i]; if (q[i] > mq) mq = q[i]; }
    for (int i = 0; i < n; i++) { sp += exp(p[i] - mp); sq += exp(q[i] - mq); }
    double lsp = log(sp), lsq = log(sq);
    for (int i = 0; i < n; i++) {
        double lp = p[i] - mp - lsp, lq = q[i] - mq - lsq;
        kl += exp(lp) * (lp - lq);
    }
    return kl;
}

/* Mean KL over every position of every case. */
static inline double gc_mean_kl(const golden_file *p, const golden_file *q) {
    double sum = 0;
    long rows = 0;
    for (uint32_t c = 0; c < p->n_cases; c++)
        for (uint32_t r = 0; r < p->cases[c].n_tokens; r++, rows++)
            sum += gc_kl_row(p->cases[c].values + (size_t)r * p->cases[c].n_out,
                             q->cases[c].values + (size_t)r * q->cases[c].n_out, (int)p->cases[c].n_out);
    return rows ? sum / rows : 0;
}

/* Worst per-case max rel diff over a file; per-row argmax agreement is added to *agree / *total. */
static inline double gc_worst_rel(const golden_file *ours, const golden_file *ref, int *agree, int *total) {
    double worst = 0;
    for (uint32_t c = 0; c < ref->n_cases; c++) {
        double d = gc_rel_diff(&ours->cases[c], &ref->cases[c]);
        if (!(d <= worst)) worst = d;   /* NaN propagates as a failure */
        gc_argmax_agree(&ours->cases[c], &ref->cases[c], agree, total);
    }
    return worst;
}

/* Every case of ref evaluated on ctx (batched, or token by token) into out, or exit 1. */
static inline void gc_eval_ctx(hearth_ctx *ctx, const golden_file *ref, bool by_token, golden_file *out) {
    hearth_err err;
    out->n_cases = ref->n_cases;
    out->cases = calloc(ref->n_cases, sizeof *out->cases);
    REQUIRE(out->cases, "out of memory");
    for (uint32_t i = 0; i < ref->n_cases; i++)
        REQUIRE(!golden_eval(ctx, &ref->cases[i], by_token, &out->cases[i], &err), "eval: %s", err.msg);
}

/* Evaluates every case of ref on a fresh context of m (n_batch 0 = default), batched or token by token. */
static inline void gc_eval_file(hearth_model *m, const golden_file *ref, bool by_token, hearth_cache_type ct,
                                int n_batch, golden_file *out) {
    hearth_err err;
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = 128;
    if (n_batch > 0) cp.n_batch = n_batch;
    cp.cache_type = ct;
    hearth_ctx *ctx;
    REQUIRE(!hearth_ctx_new(m, &cp, &ctx, &err), "ctx: %s", err.msg);
    gc_eval_ctx(ctx, ref, by_token, out);
    hearth_ctx_free(ctx);
}

#endif
