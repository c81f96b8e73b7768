/* test_greedy.c — stories260K (a real trained model) decoded greedily from BOS for 255 steps must
 * reproduce the reference's documented continuation token for token, and its detokenized text. Run
 * with 1 and 2 threads: output must be identical. */
#include <cjson/cJSON.h>
#include <string.h>

#include "hearth.h"
#include "testutil.h"

char *read_all(const char *path, size_t *len);
char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    REQUIRE(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    REQUIRE(fread(b, 1, (size_t)n, f) == (size_t)n, "read %s", path);
    b[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return b;
}

static void run(hearth_model *m, int threads, const cJSON *ids, const char *text) {
    hearth_err err;
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = 512;
    cp.n_threads = threads;
    hearth_ctx *ctx;
    REQUIRE(!hearth_ctx_new(m, &cp, &ctx, &err), "%s", err.msg);
    hearth_sampler_params sp = hearth_sampler_default_params();
    sp.temperature = 0;
    hearth_sampler *s = hearth_sampler_new(&sp, 512);
    hearth_token hist[300];
    int n = 0;
    hist[n++] = hearth_token_bos(m);
    CHECK(hist[0] == 1, "BOS is %d", hist[0]);
    char out[8192];
    int olen = 0;
    hearth_detok dt = { 0 };
    int steps = cJSON_GetArraySize(ids), bad = -1;
    for (int i = 0; i < steps; i++) {
        hearth_batch b = { .n = 1, .tokens = &hist[n - 1] };
        REQUIRE(!hearth_decode(ctx, &b, &err), "%s", err.msg);
        hearth_token t = hearth_sample(s, hearth_logits(ctx, 0), hist, n);
        hearth_sampler_accept(s, t);
        if (bad < 0 && t != cJSON_GetArrayItem(ids, i)->valueint) bad = i;
        hist[n++] = t;
        olen += hearth_detok_push(m, &dt, t, out + olen, (int)sizeof out - olen);
    }
    olen += hearth_detok_flush(&dt, out + olen, (int)sizeof out - olen);
    out[olen] = 0;
    CHECK(bad < 0, "%d threads: greedy diverges at step %d", threads, bad);
    CHECK(!strcmp(out, text), "%d threads: text differs:\n ours: %.200s\n  ref: %.200s", threads, out, text);
    hearth_sampler_free(s);
    hearth_ctx_free(ctx);
}

int main(void) {
    size_t len;
    char *js = read_all("data/stories260K.greedy.json", &len);
    cJSON *root = cJSON_Parse(js);
    REQUIRE(root, "bad json");
    const cJSON *ids = cJSON_GetObjectItem(root, "greedy_ids"), *text = cJSON_GetObjectItem(root, "text");
    REQUIRE(cJSON_IsArray(ids) && cJSON_IsString(text), "fields");
    hearth_err err;
    hearth_model *m;
    REQUIRE(!hearth_model_load("data/models/stories260K.gguf", &m, &err), "%s", err.msg);
    run(m, 1, ids, text->valuestring);
    run(m, 2, ids, text->valuestring);
    hearth_model_free(m);
    cJSON_Delete(root);
    free(js);
    TEST_DONE();
}
