/* test_lora_merge.c — LoRA adapters merged into the weights (hearth_lora_merge, --lora-merge, quantize --lora),
 * on the llama fixture with its two adapters (an F32 rank-8 at scale 1 and an F16 rank-4 at 0.7):
 * - F32 base: the merged logits are the unmerged path's within 1e-5 of the logits' spread, and the reference's
 *   golden within its bar; they do not depend on the merge's threads, the batch or the context's threads;
 * - Q4_0 and F16 bases are merged in their own type: logits close to the unmerged path's, and for Q4_0 not
 *   equal (the merged matrix is rounded again);
 * - `hearth quantize --lora-scaled` writes a file (no temp file left) whose adapted tensors keep their types
 *   and the rest their bytes, and whose logits are `golden --lora-merge`'s bit for bit (same type), or the
 *   unmerged path's within 1e-5 (F32);
 * - merging after the model's first context, and setting a merged adapter on a context, are refused in one line. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "golden_check.h"
#include "hearth.h"
#include "io/gguf.h"
#include "testutil.h"

static const char *GOLDEN = "data/golden/llama+lora-a+b.golden";
static const char *ADAPTERS[2] = { "data/models/llama-lora-a.gguf", "data/models/llama-lora-b.gguf" };
static const float SCALES[2] = { 1.0f, 0.7f };

static hearth_ctx *new_ctx(hearth_model *m, int threads) {
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = 128;
    cp.n_threads = threads;
    cp.cache_type = HEARTH_CACHE_F32;
    hearth_ctx *c;
    hearth_err err;
    REQUIRE(!hearth_ctx_new(m, &cp, &c, &err), "ctx: %s", err.msg);
    return c;
}

static double worst(const golden_file *a, const golden_file *b) {
    double w = 0;
    for (uint32_t c = 0; c < a->n_cases; c++) { const double d = gc_rel_diff(&a->cases[c], &b->cases[c]); if (!(d <= w)) w = d; }
    return w;
}

/* A model with the two adapters loaded (and merged with merge_threads > 0). */
static hearth_model *load(const char *path, hearth_lora *a[2], int merge_threads, size_t *bytes) {
    hearth_err err;
    hearth_model *m;
    REQUIRE(!hearth_model_load(path, &m, &err), "%s: %s", path, err.msg);
    for (int i = 0; i < 2; i++) REQUIRE(!hearth_lora_load(m, ADAPTERS[i], &a[i], &err), "%s: %s", ADAPTERS[i], err.msg);
    if (merge_threads > 0) REQUIRE(!hearth_lora_merge(m, a, SCALES, 2, merge_threads, bytes, &err), "merge: %s", err.msg);
    return m;
}

static void unload(hearth_model *m, hearth_lora *a[2]) {
    hearth_lora_free(a[0]);
    hearth_lora_free(a[1]);
    hearth_model_free(m);
}

/* The unmerged path's logits of base over ref. */
static void unmerged(const char *base, const golden_file *ref, golden_file *out) {
    hearth_lora *a[2];
    hearth_model *m = load(base, a, 0, NULL);
    hearth_ctx *c = new_ctx(m, 2);
    hearth_err err;
    REQUIRE(!hearth_ctx_set_lora(c, a, SCALES, 2, &err), "%s", err.msg);
    gc_eval_ctx(c, ref, false, out);
    hearth_ctx_free(c);
    unload(m, a);
}

/* The bytes of a model file's tensors: the layers' matrices only (linears), or all. */
static size_t bytes_of(const char *path, bool linears) {
    hearth_err err;
    gguf_file *g;
    REQUIRE(!gguf_open(path, &g, &err), "%s", err.msg);
    size_t n = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (!linears || (!strncmp(g->tensors[i].name, "blk.", 4) && g->tensors[i].n_dims == 2)) n += g->tensors[i].nbytes;
    gguf_close(g);
    return n;
}

static void check_f32(const golden_file *ref, const golden_file *un) {
    hearth_lora *a[2], *a3[2];
    size_t bytes = 0, bytes3 = 0;
    hearth_model *m = load("data/models/llama.gguf", a, 1, &bytes), *m3 = load("data/models/llama.gguf", a3, 3, &bytes3);
    golden_file mg = { 0 }, tok = { 0 }, two = { 0 }, mg3 = { 0 };
    hearth_ctx *c1 = new_ctx(m, 1), *c2 = new_ctx(m, 2), *c3 = new_ctx(m3, 1);
    gc_eval_ctx(c1, ref, false, &mg);
    gc_eval_ctx(c1, ref, true, &tok);
    gc_eval_ctx(c2, ref, false, &two);
    gc_eval_ctx(c3, ref, false, &mg3);
    int agree = 0, total = 0;
    const double vs_ref = gc_worst_rel(&mg, ref, &agree, &total), vs_un = worst(&mg, un);
    printf("F32 merged: vs unmerged %.2e, vs reference %.2e (argmax %d/%d), %zu bytes merged\n", vs_un, vs_ref, agree, total, bytes);
    CHECK(vs_un <= 1e-5, "F32 merged vs unmerged: %.3g", vs_un);
    CHECK(vs_ref <= 5e-3 && agree >= 0.99 * total, "F32 merged vs reference: %.3g, argmax %d/%d", vs_ref, agree, total);
    CHECK(worst(&mg, &tok) == 0 && worst(&mg, &two) == 0, "merged: token by token or 2 threads differ");
    CHECK(worst(&mg, &mg3) == 0 && bytes == bytes3, "merged on 3 threads differs from 1");
    /* copies of the adapted matrices only: lora-a adapts the 14 linears (the rest stays mapped) */
    CHECK(bytes == bytes_of("data/models/llama.gguf", true), "merged bytes %zu", bytes);
    hearth_err err;
    CHECK(hearth_ctx_set_lora(c1, a, SCALES, 2, &err) && strstr(err.msg, "merged") && !strchr(err.msg, '\n'),
          "a merged adapter set on a context: '%s'", err.msg);
    hearth_lora *b[2];
    for (int i = 0; i < 2; i++) REQUIRE(!hearth_lora_load(m, ADAPTERS[i], &b[i], &err), "%s", err.msg);
    CHECK(hearth_lora_merge(m, b, SCALES, 2, 1, NULL, &err) && strstr(err.msg, "first context") && !strchr(err.msg, '\n'),
          "merging after a context: '%s'", err.msg);
    printf("refused: %s\n", err.msg);
    hearth_lora_free(b[0]);
    hearth_lora_free(b[1]);
    golden_file *all[] = { &mg, &tok, &two, &mg3 };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) golden_free(all[i]);
    hearth_ctx_free(c1);
    hearth_ctx_free(c2);
    hearth_ctx_free(c3);
    unload(m, a);
    unload(m3, a3);
}

/* A quantized or F16 base merged in its type: the merged matrices are rounded to the type again, so the
 * merged logits are about as far from the F32 model's (the unmerged path's on the F32 base, f32) as the
 * unmerged path's on this base are (mean KL within 2x + 1e-6), and for a quantized type not equal to them. */
static void check_typed(const char *base, const golden_file *ref, const golden_file *f32, bool differ) {
    golden_file un = { 0 }, mg = { 0 };
    unmerged(base, ref, &un);
    hearth_lora *a[2];
    size_t bytes;
    hearth_model *m = load(base, a, 2, &bytes);
    hearth_ctx *c = new_ctx(m, 2);
    gc_eval_ctx(c, ref, false, &mg);
    const double kl_un = gc_mean_kl(f32, &un), kl_mg = gc_mean_kl(f32, &mg), w = worst(&mg, &un);
    printf("%s: merged vs unmerged %.2e; mean KL from F32: unmerged %.2e, merged %.2e; %zu bytes merged\n", base, w, kl_un,
           kl_mg, bytes);
    CHECK(kl_mg <= 2 * kl_un + 1e-6, "%s: merged mean KL %.3g, unmerged %.3g", base, kl_mg, kl_un);
    CHECK(!differ || w > 0, "%s: merged logits equal the unmerged path's: the merge did not requantize", base);
    golden_free(&un);
    golden_free(&mg);
    hearth_ctx_free(c);
    unload(m, a);
}

/* `hearth quantize --pure --lora-scaled A:1,B:0.7 base out type` (the fixtures are pure): one file in an empty directory; its tensors keep the
 * base's types (same type asked) and the unadapted ones their bytes. */
static void quantize(const char *hearth, const char *base, const char *dir, const char *type, char *out, size_t cap) {
    char cmd[1024];
    snprintf(out, cap, "%s/merged-%s.gguf", dir, type);
    snprintf(cmd, sizeof cmd, "'%s' quantize --pure --lora-scaled %s:%g,%s:%g %s %s %s 2>/dev/null", hearth, ADAPTERS[0], SCALES[0],
             ADAPTERS[1], SCALES[1], base, out, type);
    REQUIRE(system(cmd) == 0, "%s", cmd);
}

static void check_files(const char *base, const char *out) {
    hearth_err err;
    gguf_file *gi, *go;
    REQUIRE(!gguf_open(base, &gi, &err) && !gguf_open(out, &go, &err), "%s", err.msg);
    int changed = 0, kept = 0;
    bool types = gi->n_tensors == go->n_tensors;
    for (uint64_t i = 0; types && i < gi->n_tensors; i++) {
        const gguf_tensor *t = &gi->tensors[i], *u = gguf_find_tensor(go, t->name);
        types = u && u->type == t->type && u->nbytes == t->nbytes;
        if (types && memcmp(t->data, u->data, t->nbytes)) changed++;
        else if (types) kept++;
    }
    printf("%s: %d tensors merged, %d as they were\n", out, changed, kept);
    CHECK(types, "%s: the tensors' types differ from %s's", out, base);
    CHECK(changed == 14 && kept == 7, "%s: %d tensors changed, %d kept (lora-a adapts the 14 linears)", out, changed, kept);
    gguf_close(gi);
    gguf_close(go);
}

static void golden_cli(const char *hearth, const char *model, const char *extra, const char *out) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' golden -m %s -i %s -o %s %s 2>/dev/null", hearth, model, GOLDEN, out, extra);
    REQUIRE(system(cmd) == 0, "%s", cmd);
}

static void check_quantize(const char *hearth, const golden_file *un) {
    char dir[] = "/tmp/hearth-merge-XXXXXX", q4[512], f32[512], g1[600], g2[600], merge[600];
    REQUIRE(mkdtemp(dir), "mkdtemp");
    hearth_err err;
    /* Q4_0 base to Q4_0: the bits of --lora-merge */
    quantize(hearth, "data/models/llama-Q4_0.gguf", dir, "Q4_0", q4, sizeof q4);
    check_files("data/models/llama-Q4_0.gguf", q4);
    snprintf(g1, sizeof g1, "%s/file.golden", dir);
    snprintf(g2, sizeof g2, "%s/merge.golden", dir);
    snprintf(merge, sizeof merge, "--lora-merge --lora-scaled %s:%g,%s:%g", ADAPTERS[0], SCALES[0], ADAPTERS[1], SCALES[1]);
    golden_cli(hearth, q4, "", g1);
    golden_cli(hearth, "data/models/llama-Q4_0.gguf", merge, g2);
    golden_file a, b;
    REQUIRE(!golden_read(g1, &a, &err) && !golden_read(g2, &b, &err), "%s", err.msg);
    CHECK(worst(&a, &b) == 0, "quantize --lora Q4_0 differs from golden --lora-merge: %.3g", worst(&a, &b));
    golden_free(&a);
    golden_free(&b);
    /* F32 base to F32: the unmerged path's logits within 1e-5 */
    quantize(hearth, "data/models/llama.gguf", dir, "F32", f32, sizeof f32);
    check_files("data/models/llama.gguf", f32);
    golden_cli(hearth, f32, "", g1);
    REQUIRE(!golden_read(g1, &a, &err), "%s", err.msg);
    printf("quantize --lora F32 vs unmerged: %.2e\n", worst(&a, un));
    CHECK(worst(&a, un) <= 1e-5, "quantize --lora F32 vs unmerged: %.3g", worst(&a, un));
    golden_free(&a);
    int files = 0;   /* written atomically: nothing but the two models and goldens */
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) files += e->d_name[0] != '.';
    if (d) closedir(d);
    CHECK(files == 4, "%d files in %s (a temp file left?)", files, dir);
    unlink(q4), unlink(f32), unlink(g1), unlink(g2);
    rmdir(dir);
}

int main(void) {
    hearth_err err;
    golden_file ref, un = { 0 };
    REQUIRE(!golden_read(GOLDEN, &ref, &err), "%s", err.msg);
    unmerged("data/models/llama.gguf", &ref, &un);
    check_f32(&ref, &un);
    check_typed("data/models/llama-Q4_0.gguf", &ref, &un, true);
    check_typed("data/models/llama-F16.gguf", &ref, &un, false);
    const char *hearth = getenv("HEARTH");
    if (hearth) check_quantize(hearth, &un);
    else printf("HEARTH not set: quantize --lora not checked\n");
    golden_free(&ref);
    golden_free(&un);
    TEST_DONE();
}
