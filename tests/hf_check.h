/* hf_check.h — the checks the Hugging Face directory tests share: a directory's logits against its GGUF twin's and
 * the golden's, and the directory written back to an F32 GGUF, tensor for tensor. */
#ifndef HEARTH_HF_CHECK_H
#define HEARTH_HF_CHECK_H

#include <string.h>
#include <unistd.h>

#include "convert/quantize.h"
#include "golden_check.h"
#include "io/gguf.h"

/* Loads DIR and its twin GGUF and evaluates the golden's cases on both. The directory's logits must be the twin's bit
 * for bit (twin_tol 0) or within twin_tol (max |a - b| / std); against the golden the argmax must agree on 99% of
 * rows and, when bar > 0, every case lie within bar. Returns the directory's model (for hf_check_to_gguf). */
static inline hearth_model *hf_check_logits(const char *dir, const char *gguf, const char *golden, const char *label,
                                            double twin_tol, double bar) {
    hearth_err err;
    hearth_model *hf, *twin;
    REQUIRE(!hearth_model_load(dir, &hf, &err), "%s: %s", dir, err.msg);
    REQUIRE(!hearth_model_load(gguf, &twin, &err), "%s: %s", gguf, err.msg);
    golden_file ref, a, b;
    REQUIRE(!golden_read(golden, &ref, &err), "%s", err.msg);
    gc_eval_file(hf, &ref, false, HEARTH_CACHE_F32, 0, &a);
    gc_eval_file(twin, &ref, false, HEARTH_CACHE_F32, 0, &b);
    int same = 0;
    double twin_diff = 0;
    for (uint32_t c = 0; c < ref.n_cases; c++) {
        same += !memcmp(a.cases[c].values, b.cases[c].values, (size_t)golden_rows(&b.cases[c]) * b.cases[c].n_out * sizeof(float));
        double d = gc_rel_diff(&a.cases[c], &b.cases[c]);
        if (!(d <= twin_diff)) twin_diff = d;
    }
    int agree = 0, total = 0;
    double worst = gc_worst_rel(&a, &ref, &agree, &total);
    printf("%s HF dir: %d of %u cases bit-identical to the GGUF's (max diff %.2e); vs golden %.2e, argmax %d/%d\n", label, same,
           ref.n_cases, twin_diff, worst, agree, total);
    if (twin_tol == 0)
        CHECK(same == (int)ref.n_cases, "%s: the HF directory's logits differ from the GGUF's in %u cases", label, ref.n_cases - (unsigned)same);
    else
        CHECK(twin_diff <= twin_tol, "%s: the HF directory's logits differ from the GGUF's by %.3g", label, twin_diff);
    CHECK(agree >= 0.99 * total, "%s HF: argmax agrees with the golden's on %d of %d rows", label, agree, total);
    if (bar > 0) CHECK(worst <= bar, "%s HF: rel diff %.3g from the golden", label, worst);
    golden_free(&a);
    golden_free(&b);
    golden_free(&ref);
    hearth_model_free(twin);
    return hf;
}

/* The directory's model written as an F32 GGUF (in tmp) holds every tensor of the fixture GGUF byte for byte;
 * frees hf. */
static inline void hf_check_to_gguf(hearth_model *hf, const char *gguf, const char *tmp, const char *label) {
    hearth_err err;
    char out[512];
    snprintf(out, sizeof out, "%s/%s-from-hf.gguf", tmp, label);
    REQUIRE(!model_quantize(hf, out, "F32", true, 2, NULL, NULL, &err), "%s", err.msg);
    hearth_model_free(hf);
    gguf_file *x, *y;
    REQUIRE(!gguf_open(out, &x, &err) && !gguf_open(gguf, &y, &err), "%s", err.msg);
    int identical = 0;
    for (uint64_t i = 0; i < y->n_tensors; i++) {
        const gguf_tensor *t = &y->tensors[i], *u = gguf_find_tensor(x, t->name);
        bool ok = u && u->type == t->type && u->n_dims == t->n_dims && u->nbytes == t->nbytes && !memcmp(u->data, t->data, t->nbytes);
        CHECK(ok, "%s: tensor %s differs after HF -> GGUF", label, t->name);
        identical += ok;
    }
    printf("%s HF dir -> GGUF F32: %d of %llu tensors identical to the fixture's\n", label, identical, (unsigned long long)y->n_tensors);
    gguf_close(x);
    gguf_close(y);
    unlink(out);
}

#endif
