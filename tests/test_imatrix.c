/* test_imatrix.c — `hearth imatrix` against llama-imatrix: the same model, text, context and chunk count must give
 * the same entries, counts and metadata, and sums of squared activations within float tolerance (the two engines'
 * activations differ by rounding only). data/imatrix/NAME-c128x8.gguf were written by llama.cpp's llama-imatrix
 * (-c 128 --chunks 8 --no-ppl, with --process-output for llama; llama, mixtral, deepseek2) over data/text/stories-sampled.txt. Also: the file
 * reads back through imatrix_load with llama-quantize's weights (sum / count), and bad files are refused. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "io/gguf.h"
#include "model/imatrix.h"
#include "testutil.h"

#define TEXT "data/text/stories-sampled.txt"

static const char *hearth_cli(void) {
    const char *h = getenv("HEARTH");
    REQUIRE(h, "HEARTH is not set");
    return h;
}

static void run(const char *model, const char *out, const char *extra) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s imatrix -m data/models/%s.gguf -f " TEXT " -o %s -c 128 --chunks 8 %s 2>/dev/null",
             hearth_cli(), model, out, extra);
    REQUIRE(system(cmd) == 0, "%s failed", cmd);
}

static double f32_at(const gguf_tensor *t, uint64_t i) {
    float v;
    memcpy(&v, (const uint8_t *)t->data + 4 * i, 4);
    return v;
}

/* Every tensor of ref in ours, same shape, in the same (sorted) order; counts equal; sums within rel_tol of the
 * largest sum of their row (a column never squared anything large enough to matter gets the row's scale). */
static void compare(const char *ours_path, const char *ref_path, double rel_tol) {
    gguf_file *a, *b;
    hearth_err err;
    REQUIRE(!gguf_open(ours_path, &a, &err), "%s: %s", ours_path, err.msg);
    REQUIRE(!gguf_open(ref_path, &b, &err), "%s: %s", ref_path, err.msg);
    CHECK(a->n_tensors == b->n_tensors, "%s: %llu tensors, llama-imatrix %llu", ours_path, (unsigned long long)a->n_tensors,
          (unsigned long long)b->n_tensors);
    uint32_t ua, ub;
    CHECK(gguf_get_u32(a, "imatrix.chunk_count", &ua) && gguf_get_u32(b, "imatrix.chunk_count", &ub) && ua == ub && ua == 8,
          "chunk_count %u vs %u", ua, ub);
    CHECK(gguf_get_u32(a, "imatrix.chunk_size", &ua) && gguf_get_u32(b, "imatrix.chunk_size", &ub) && ua == ub && ua == 128,
          "chunk_size %u vs %u", ua, ub);
    gguf_str s;
    CHECK(gguf_get_str(a, "general.type", &s) && s.n == 7 && !memcmp(s.p, "imatrix", 7), "general.type");
    const gguf_kv *ds = gguf_find(a, "imatrix.datasets");
    CHECK(ds && ds->type == GGUF_ARR && ds->arr_n == 1 && gguf_arr_str(ds, 0).n == strlen(TEXT), "imatrix.datasets");
    double worst = 0;
    for (uint64_t i = 0; i < b->n_tensors && i < a->n_tensors; i++) {
        const gguf_tensor *tb = &b->tensors[i], *ta = &a->tensors[i];
        CHECK(!strcmp(ta->name, tb->name), "tensor %llu: %s, llama-imatrix %s", (unsigned long long)i, ta->name, tb->name);
        if (strcmp(ta->name, tb->name)) continue;
        CHECK(ta->n_dims == tb->n_dims && ta->ne[0] == tb->ne[0] && ta->ne[1] == tb->ne[1], "%s: shape", ta->name);
        if (ta->nelem != tb->nelem) continue;
        const bool counts = strstr(ta->name, ".counts") != NULL;
        for (uint64_t r = 0; r < (uint64_t)tb->ne[1]; r++) {
            double scale = 0;
            for (int64_t j = 0; j < tb->ne[0]; j++) scale = fmax(scale, fabs(f32_at(tb, r * tb->ne[0] + j)));
            for (int64_t j = 0; j < tb->ne[0]; j++) {
                double x = f32_at(ta, r * tb->ne[0] + j), y = f32_at(tb, r * tb->ne[0] + j);
                if (counts) {
                    CHECK(x == y, "%s[%llu]: count %g, llama-imatrix %g", ta->name, (unsigned long long)r, x, y);
                    continue;
                }
                double rel = fabs(x - y) / fmax(fabs(y), 1e-3 * scale + 1e-30);
                worst = fmax(worst, rel);
                CHECK(rel <= rel_tol, "%s[%llu][%lld]: %.9g, llama-imatrix %.9g", ta->name, (unsigned long long)r, (long long)j, x, y);
            }
        }
    }
    printf("%s: %llu tensors, largest relative difference of a sum %.3g\n", ours_path, (unsigned long long)a->n_tensors, worst);
    gguf_close(a);
    gguf_close(b);
}

int main(void) {
    char dir[] = "/tmp/hearth_imatrix_XXXXXX", p1[128], p2[128], p3[128];
    REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(p1, sizeof p1, "%s/llama.gguf", dir);
    snprintf(p2, sizeof p2, "%s/mixtral.gguf", dir);
    snprintf(p3, sizeof p3, "%s/deepseek2.gguf", dir);
    run("llama", p1, "--process-output");
    compare(p1, "data/imatrix/llama-c128x8.gguf", 1e-4);
    run("mixtral", p2, "");   /* experts: per-expert sums and counts from the routing */
    compare(p2, "data/imatrix/mixtral-c128x8.gguf", 1e-4);
    run("deepseek2", p3, "");   /* MLA's per-head matrices: one row of sums per 3-D weight, one count */
    compare(p3, "data/imatrix/deepseek2-c128x8.gguf", 1e-4);

    /* read back: llama-quantize's weights are sum / count */
    ht_imatrix *im;
    hearth_err err;
    REQUIRE(!imatrix_load(p2, &im, &err), "%s", err.msg);
    CHECK(imatrix_chunk_count(im) == 8 && imatrix_dataset(im) && !strcmp(imatrix_dataset(im), TEXT), "metadata");
    gguf_file *f;
    REQUIRE(!gguf_open(p2, &f, &err), "%s", err.msg);
    const gguf_tensor *ts = gguf_find_tensor(f, "blk.0.ffn_down_exps.weight.in_sum2");
    const gguf_tensor *tc = gguf_find_tensor(f, "blk.0.ffn_down_exps.weight.counts");
    int64_t n = 0;
    const float *w = imatrix_weights(im, "blk.0.ffn_down_exps.weight", &n);
    REQUIRE(ts && tc && w && n == (int64_t)ts->nelem, "blk.0.ffn_down_exps.weight");
    CHECK(tc->nelem == 4, "one count per expert: %llu", (unsigned long long)tc->nelem);
    for (int64_t i = 0; i < n; i++) {
        double cnt = f32_at(tc, (uint64_t)(i / ts->ne[0]));
        CHECK(cnt > 0 && w[i] == (float)(f32_at(ts, (uint64_t)i) / (float)cnt), "weight %lld", (long long)i);
    }
    CHECK(!imatrix_weights(im, "blk.0.no_such.weight", &n), "unknown tensor");
    gguf_close(f);
    imatrix_free(im);

    /* a model is not an imatrix */
    CHECK(imatrix_load("data/models/llama.gguf", &im, &err) && strstr(err.msg, "not a GGUF imatrix"), "model refused: %s", err.msg);

    /* too short a text is refused with one line */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s imatrix -m data/models/llama.gguf -f " TEXT " -o %s/x.gguf -c 8192 2>/dev/null", hearth_cli(), dir);
    CHECK(system(cmd) != 0, "a text shorter than two chunks");
    CHECK(access(p1, F_OK) == 0, "output written");
    remove(p1);
    remove(p2);
    remove(p3);
    rmdir(dir);
    TEST_DONE();
}
