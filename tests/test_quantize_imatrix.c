/* test_quantize_imatrix.c — `hearth quantize --imatrix` against llama-quantize --imatrix: the same model and
 * importance matrix (data/imatrix/llama-c128x8.gguf, llama-imatrix's) must give byte-identical matrices.
 * data/imatrix/llama-TYPE-imatrix.gguf were written by llama-quantize --pure --imatrix that file
 * --token-embedding-type q8_0 (llama.cpp has no importance for token_embd and will not make it IQ2_XXS without
 * one; hearth then uses uniform weights, so token_embd is left out of the comparison). The types: every i-quant
 * (IQ1_S and IQ1_M included), the K-quants and the legacy Q4_0 / Q4_1 / Q5_0 / Q5_1, which all weigh their
 * fits by the imatrix when given one. Also: the types that need an importance matrix are refused without one,
 * and an imatrix whose sizes do not fit the model is refused. */
#include <string.h>
#include <unistd.h>

#include "golden_check.h"
#include "io/gguf.h"
#include "testutil.h"

static const char *hearth_cli(void) {
    const char *h = getenv("HEARTH");
    REQUIRE(h, "HEARTH is not set");
    return h;
}

static int quantize(const char *extra, const char *model, const char *out, const char *type) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s quantize --pure %s data/models/%s.gguf %s %s 2>/dev/null", hearth_cli(), extra, model, out, type);
    return system(cmd);
}

static void compare(const char *ours_path, const char *ref_path) {
    gguf_file *a, *b;
    hearth_err err;
    REQUIRE(!gguf_open(ours_path, &a, &err), "%s: %s", ours_path, err.msg);
    REQUIRE(!gguf_open(ref_path, &b, &err), "%s: %s", ref_path, err.msg);
    int same = 0, compared = 0;
    for (uint64_t i = 0; i < b->n_tensors; i++) {
        const gguf_tensor *tb = &b->tensors[i], *ta = gguf_find_tensor(a, tb->name);
        CHECK(ta, "%s: no tensor %s", ours_path, tb->name);
        if (!ta || !strcmp(tb->name, "token_embd.weight")) continue;
        compared++;
        CHECK(ta->type == tb->type, "%s: type %u, llama-quantize %u", tb->name, ta->type, tb->type);
        if (ta->type != tb->type || ta->nbytes != tb->nbytes) continue;
        bool eq = !memcmp(ta->data, tb->data, (size_t)tb->nbytes);
        same += eq;
        CHECK(eq, "%s: bytes differ from llama-quantize's", tb->name);
    }
    printf("%s: %d of %d tensors byte-identical to llama-quantize's\n", ref_path, same, compared);
    gguf_close(a);
    gguf_close(b);
}

/* The fixture README's bar for a quantized file: our file's KL from the F32 golden at most 1.1 x the reference's
 * on its own file of that type (made with a 79-chunk imatrix; ours with the 8-chunk one) + 1e-5. */
static void check_kl(const char *ours_path, const char *type) {
    golden_file f32, ref, out;
    hearth_err err;
    char ref_path[128];
    snprintf(ref_path, sizeof ref_path, "data/golden/llama-%s.golden", type);
    REQUIRE(!golden_read("data/golden/llama.golden", &f32, &err) && !golden_read(ref_path, &ref, &err), "%s", err.msg);
    hearth_model *m;
    REQUIRE(!hearth_model_load(ours_path, &m, &err), "%s: %s", ours_path, err.msg);
    gc_eval_file(m, &ref, false, HEARTH_CACHE_F32, 0, &out);
    const double kl = gc_mean_kl(&f32, &out), kl_ref = gc_mean_kl(&f32, &ref);
    printf("%s: KL from F32 %.6f, the reference's on its file %.6f\n", type, kl, kl_ref);
    CHECK(kl <= 1.1 * kl_ref + 1e-5, "%s: KL %.6f > 1.1 x the reference's %.6f", type, kl, kl_ref);
    hearth_model_free(m);
    golden_free(&out);
    golden_free(&ref);
    golden_free(&f32);
}

int main(void) {
    char dir[] = "/tmp/hearth_qimatrix_XXXXXX", out[128];
    REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(out, sizeof out, "%s/q.gguf", dir);
    static const char *const TYPES[] = { "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS", "IQ4_NL", "Q6_K", "Q4_K", "Q5_K",
                                         "IQ1_S", "IQ1_M", "Q2_K", "Q3_K", "Q4_0", "Q4_1", "Q5_0", "Q5_1" };
    for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++) {
        char ref[128];
        snprintf(ref, sizeof ref, "data/imatrix/llama-%s-imatrix.gguf", TYPES[t]);
        REQUIRE(quantize("--imatrix data/imatrix/llama-c128x8.gguf", "llama", out, TYPES[t]) == 0, "quantize %s", TYPES[t]);
        compare(out, ref);
        if (!strncmp(TYPES[t], "IQ1_", 4)) check_kl(out, TYPES[t]);
        remove(out);
    }
    /* the same bytes whatever the thread count (the grid tables are built once, shared by the threads) */
    REQUIRE(quantize("-t 3 --imatrix data/imatrix/llama-c128x8.gguf", "llama", out, "IQ1_S") == 0, "quantize -t 3 IQ1_S");
    compare(out, "data/imatrix/llama-IQ1_S-imatrix.gguf");
    remove(out);
    /* the types that need an importance matrix are refused without one, or with one of another model, and
     * write nothing */
    static const char *const NEED[] = { "IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M" };
    for (size_t t = 0; t < sizeof NEED / sizeof NEED[0]; t++)
        CHECK(quantize("", "llama", out, NEED[t]) != 0 && access(out, F_OK) != 0, "%s without an imatrix", NEED[t]);
    CHECK(quantize("--imatrix data/imatrix/mixtral-c128x8.gguf", "llama", out, "IQ2_XXS") != 0 && access(out, F_OK) != 0,
          "an imatrix without the model's matrices");
    CHECK(quantize("--imatrix data/models/llama.gguf", "llama", out, "IQ2_XXS") != 0, "a model as imatrix");
    rmdir(dir);
    TEST_DONE();
}
