/* test_quantize.c — `hearth quantize` semantics through the library: quantizing llama.gguf (F32) to Q8_0
 * and Q4_0 gives the reference's blocks byte for byte (the fixtures were made with llama-quantize
 * --pure), every type's output loads and meets the fixtures' KL rule against the reference's own
 * quantized file, Q4_K_M follows llama.cpp's per-tensor recipe, and an HF directory quantizes to a GGUF
 * that reproduces the golden (q/k rows permuted back to GGUF's layout). Mixture-of-experts files too: qwen3moe
 * to Q8_0 gives the reference's blocks, mixtral to Q4_K_M follows the reference's recipe (the router stays F32,
 * ffn_down_exps takes Q6_K where use_more_bits says) and meets the KL rule, and every type's mixtral loads and
 * stays close (expert stacks written row for row, 3-D). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "golden_check.h"
#include "io/gguf.h"
#include "hearth.h"
#include "convert/quantize.h"
#include "testutil.h"

static double eval_kl(const char *path, const golden_file *base) {
    hearth_err err;
    hearth_model *m;
    REQUIRE(!hearth_model_load(path, &m, &err), "%s: %s", path, err.msg);
    golden_file ours;
    gc_eval_file(m, base, false, HEARTH_CACHE_F32, 0, &ours);
    double kl = gc_mean_kl(base, &ours);
    golden_free(&ours);
    hearth_model_free(m);
    return kl;
}

/* Every tensor of a equals the same-named tensor of b: type, shape and bytes. */
static void same_tensors(const char *pa, const char *pb, bool bytes) {
    hearth_err err;
    gguf_file *a, *b;
    REQUIRE(!gguf_open(pa, &a, &err) && !gguf_open(pb, &b, &err), "%s", err.msg);
    CHECK(a->n_tensors == b->n_tensors, "%s: %llu tensors, %s has %llu", pa, (unsigned long long)a->n_tensors, pb,
          (unsigned long long)b->n_tensors);
    for (uint64_t i = 0; i < a->n_tensors; i++) {
        const gguf_tensor *ta = &a->tensors[i], *tb = gguf_find_tensor(b, ta->name);
        if (!tb) { CHECK(0, "%s missing in %s", ta->name, pb); continue; }
        CHECK(ta->type == tb->type, "%s: type %u vs %u", ta->name, ta->type, tb->type);
        if (bytes && ta->nbytes == tb->nbytes)
            CHECK(!memcmp(ta->data, tb->data, ta->nbytes), "%s: blocks differ from the reference's", ta->name);
    }
    gguf_close(a);
    gguf_close(b);
}

/* KL of `model` quantized to `type` against the F32 golden `f32`; same_tensors against `ref` when given. */
static double moe_kl(const char *dir, const char *model, const char *type, const char *f32, const char *ref, bool bytes) {
    hearth_err err;
    hearth_model *m;
    char src[256], out[256], gp[256];
    snprintf(src, sizeof src, "data/models/%s.gguf", model);
    snprintf(out, sizeof out, "%s/%s-%s.gguf", dir, model, type);
    snprintf(gp, sizeof gp, "data/golden/%s.golden", f32);
    REQUIRE(!hearth_model_load(src, &m, &err), "%s: %s", src, err.msg);
    REQUIRE(!model_quantize(m, out, type, !strcmp(type, "Q8_0"), 2, NULL, NULL, &err), "%s %s: %s", model, type, err.msg);
    hearth_model_free(m);
    if (ref) same_tensors(out, ref, bytes);
    golden_file base;
    REQUIRE(!golden_read(gp, &base, &err), "%s", err.msg);
    double kl = eval_kl(out, &base);
    golden_free(&base);
    unlink(out);
    return kl;
}

static void check_moe(const char *dir, const char *const *types, size_t n_types) {
    hearth_err err;
    golden_file base, rq;
    moe_kl(dir, "qwen3moe", "Q8_0", "qwen3moe", "data/models/qwen3moe-Q8_0.gguf", true);
    double kl = moe_kl(dir, "mixtral", "Q4_K_M", "mixtral", "data/models/mixtral-Q4_K_M.gguf", false);
    REQUIRE(!golden_read("data/golden/mixtral.golden", &base, &err) && !golden_read("data/golden/mixtral-Q4_K_M.golden", &rq, &err),
            "%s", err.msg);
    double bar = 1.1 * gc_mean_kl(&base, &rq) + 1e-5;
    printf("mixtral Q4_K_M KL %.3e (bar %.3e)\n", kl, bar);
    CHECK(kl <= bar, "mixtral Q4_K_M: KL %.4g above %.4g", kl, bar);
    golden_free(&base);
    golden_free(&rq);
    for (size_t i = 0; i < n_types; i++) {
        kl = moe_kl(dir, "mixtral", types[i], "mixtral", NULL, false);
        printf("mixtral %-7s KL %.3e\n", types[i], kl);
        CHECK(kl < 0.2, "mixtral %s: KL %.4g", types[i], kl);
    }
}

int main(void) {
    static const char *TYPES[] = { "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K",
                                   "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "Q4_K_M", "MXFP4", "TQ2_0", "IQ3_S", "IQ2_S", "IQ3_XXS" };
    const size_t n_moe_types = 15;   /* the mixtral check: not the ternary type, which only suits ternary weights */
    hearth_err err;
    golden_file base;
    REQUIRE(!golden_read("data/golden/llama.golden", &base, &err), "%s", err.msg);
    hearth_model *m;
    REQUIRE(!hearth_model_load("data/models/llama.gguf", &m, &err), "%s", err.msg);
    char dir[] = "/tmp/hearth-quantize-XXXXXX", out[256], ref[256];
    REQUIRE(mkdtemp(dir), "mkdtemp");
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++) {
        snprintf(out, sizeof out, "%s/llama-%s.gguf", dir, TYPES[i]);
        REQUIRE(!model_quantize(m, out, TYPES[i], true, 2, NULL, NULL, &err), "%s: %s", TYPES[i], err.msg);
        snprintf(ref, sizeof ref, "data/models/llama-%s.gguf", TYPES[i]);
        bool exact = !strcmp(TYPES[i], "Q8_0") || !strcmp(TYPES[i], "Q4_0") || !strcmp(TYPES[i], "MXFP4") ||
                     !strcmp(TYPES[i], "TQ2_0") || !strcmp(TYPES[i], "IQ3_S");
        same_tensors(out, ref, exact);   /* types always (the recipe), bytes for the round-to-nearest types */
        snprintf(ref, sizeof ref, "data/golden/llama-%s.golden", TYPES[i]);
        golden_file rq;
        REQUIRE(!golden_read(ref, &rq, &err), "%s", err.msg);
        /* llama-IQ2_S.gguf and llama-IQ3_XXS.gguf were quantized with an importance matrix, which quantize does
         * not take (its blocks equal ggml's without one, test_quant): the bar is that file's KL with room for
         * the missing matrix (measured without it: IQ2_S 1.13x, IQ3_XXS 1.36x that file's KL). */
        const double room = !strcmp(TYPES[i], "IQ2_S") ? 1.25 : !strcmp(TYPES[i], "IQ3_XXS") ? 1.5 : 1.1;
        double kl_ref = gc_mean_kl(&base, &rq), kl = eval_kl(out, &base), bar = room * kl_ref + 1e-5;
        printf("%-7s KL %.3e (reference's quantization %.3e, bar %.3e)%s\n", TYPES[i], kl, kl_ref, bar, exact ? ", blocks identical" : "");
        CHECK(kl <= bar, "%s: KL %.4g above %.4g", TYPES[i], kl, bar);
        golden_free(&rq);
        unlink(out);
    }
    /* without --pure, as llama-quantize: the output matrix stays in Q6_K, the rest takes the type */
    snprintf(out, sizeof out, "%s/llama-default-Q4_0.gguf", dir);
    REQUIRE(!model_quantize(m, out, "Q4_0", false, 2, NULL, NULL, &err), "%s", err.msg);
    gguf_file *g;
    REQUIRE(!gguf_open(out, &g, &err), "%s", err.msg);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        uint32_t want = t->n_dims == 1 ? HT_F32 : !strcmp(t->name, "output.weight") ? HT_Q6_K : HT_Q4_0;
        CHECK(t->type == want, "default Q4_0: %s is type %u, expected %u", t->name, t->type, want);
    }
    gguf_close(g);
    unlink(out);
    hearth_model_free(m);

    check_moe(dir, TYPES, n_moe_types);

    /* an HF directory (rotate-half q/k) quantized to F32 GGUF must reproduce the golden like the original */
    REQUIRE(!hearth_model_load("data/hf/llama-hf", &m, &err), "%s", err.msg);
    snprintf(out, sizeof out, "%s/llama-hf.gguf", dir);
    REQUIRE(!model_quantize(m, out, "F32", true, 2, NULL, NULL, &err), "%s", err.msg);
    hearth_model_free(m);
    same_tensors(out, "data/models/llama.gguf", true);
    double kl = eval_kl(out, &base);
    printf("llama-hf -> GGUF F32: KL %.3e\n", kl);
    CHECK(kl < 1e-9, "HF -> GGUF changed the model (KL %.3g)", kl);
    unlink(out);
    rmdir(dir);
    golden_free(&base);
    TEST_DONE();
}
