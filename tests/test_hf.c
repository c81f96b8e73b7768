/* test_hf.c — Hugging Face checkpoint directories (config.json + safetensors) loaded directly must
 * reproduce the GGUF goldens, under the rules of the fixtures README's hf/ table. Token-by-token
 * evaluation through the cache must match the batched pass here too. */
#include <string.h>

#include "golden_check.h"
#include "hearth.h"
#include "testutil.h"

typedef struct {
    const char *dir, *golden;
    double max_rel;          /* F32-style rule: max rel diff bar (0 = use the KL rule) */
    const char *kl_ref;      /* KL rule: the reference's own quantized-file golden */
} hf_case;

static const hf_case CASES[] = {
    { "llama-hf", "llama", 5e-3, NULL },
    { "llama-hf-bf16", "llama", 0, "llama-BF16" },
    { "qwen2-hf", "qwen2", 5e-3, NULL },
    { "qwen3-hf-f16", "qwen3", 1e-2, NULL },
    { "gemma3-hf", "gemma3", 5e-3, NULL },
    { "gpt2-hf", "gpt2", 5e-3, NULL },
    { "bert-hf", "bert", 5e-3, NULL },
    { "distilbert-hf", "distilbert-hf", 5e-3, NULL },
};

static void check(const hf_case *c) {
    char path[256];
    hearth_err err;
    hearth_model *m;
    golden_file ref, ours = { 0 };
    snprintf(path, sizeof path, "data/hf/%s", c->dir);
    if (hearth_model_load(path, &m, &err)) { CHECK(0, "%s: %s", path, err.msg); return; }
    snprintf(path, sizeof path, "data/golden/%s.golden", c->golden);
    REQUIRE(!golden_read(path, &ref, &err), "%s", err.msg);
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    gc_eval_file(m, &ref, false, HEARTH_CACHE_F32, 0, &ours);
    if (!info.is_encoder) {
        golden_file seq = { 0 };
        gc_eval_file(m, &ref, true, HEARTH_CACHE_F32, 0, &seq);
        double bs = 0;
        for (uint32_t i = 0; i < ref.n_cases; i++) bs = fmax(bs, gc_rel_diff(&seq.cases[i], &ours.cases[i]));
        CHECK(bs <= 1e-5, "%s: token-by-token differs from batched by %.3g", c->dir, bs);
        golden_free(&seq);
    }
    if (c->max_rel > 0) {
        int agree = 0, total = 0;
        double worst = gc_worst_rel(&ours, &ref, &agree, &total);
        printf("%-14s max rel diff %.2e, argmax %d/%d\n", c->dir, worst, agree, total);
        CHECK(worst <= c->max_rel, "%s: max rel diff %.3g > %.3g", c->dir, worst, c->max_rel);
        if (ref.cases[0].kind == GOLDEN_LOGITS) CHECK(agree >= 0.99 * total, "%s: argmax %d/%d", c->dir, agree, total);
    } else {
        golden_file q;
        snprintf(path, sizeof path, "data/golden/%s.golden", c->kl_ref);
        REQUIRE(!golden_read(path, &q, &err), "%s", err.msg);
        double kl_ref = gc_mean_kl(&ref, &q), kl_ours = gc_mean_kl(&ref, &ours), bar = 1.1 * kl_ref + 1e-5;
        printf("%-14s KL ours %.3e, reference %.3e, bar %.3e\n", c->dir, kl_ours, kl_ref, bar);
        CHECK(kl_ours <= bar, "%s: KL %.4g above bar %.4g", c->dir, kl_ours, bar);
        golden_free(&q);
    }
    golden_free(&ours);
    golden_free(&ref);
    hearth_model_free(m);
}

int main(int argc, char **argv) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
        if (argc < 2 || !strcmp(argv[1], CASES[i].dir)) check(&CASES[i]);
    TEST_DONE();
}
