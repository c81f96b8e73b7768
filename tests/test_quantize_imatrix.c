/* test_quantize_imatrix.c — `hearth quantize --imatrix` against llama-quantize --imatrix: the same model and
 * importance matrix (data/imatrix/llama-c128x8.gguf, llama-imatrix's) must give byte-identical matrices.
 * data/imatrix/llama-TYPE-imatrix.gguf were written by llama-quantize --pure --imatrix that file
 * --token-embedding-type q8_0 (llama.cpp has no importance for token_embd and will not make it IQ2_XXS without
 * one; hearth then uses uniform weights, so token_embd is left out of the comparison). Also: the types that need
 * an importance matrix are refused without one, and an imatrix whose sizes do not fit the model is refused. */
#include <string.h>
#include <unistd.h>

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

int main(void) {
    char dir[] = "/tmp/hearth_qimatrix_XXXXXX", out[128];
    REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(out, sizeof out, "%s/q.gguf", dir);
    static const char *const TYPES[] = { "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS", "IQ4_NL", "Q6_K", "Q4_K", "Q5_K" };
    for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++) {
        char ref[128];
        snprintf(ref, sizeof ref, "data/imatrix/llama-%s-imatrix.gguf", TYPES[t]);
        REQUIRE(quantize("--imatrix data/imatrix/llama-c128x8.gguf", "llama", out, TYPES[t]) == 0, "quantize %s", TYPES[t]);
        compare(out, ref);
        remove(out);
    }
    /* IQ2_XXS without an importance matrix, or with one of another model, is refused and writes nothing */
    CHECK(quantize("", "llama", out, "IQ2_XXS") != 0 && access(out, F_OK) != 0, "IQ2_XXS without an imatrix");
    CHECK(quantize("--imatrix data/imatrix/mixtral-c128x8.gguf", "llama", out, "IQ2_XXS") != 0 && access(out, F_OK) != 0,
          "an imatrix without the model's matrices");
    CHECK(quantize("--imatrix data/models/llama.gguf", "llama", out, "IQ2_XXS") != 0, "a model as imatrix");
    rmdir(dir);
    TEST_DONE();
}
