/* test_hf_export.c — Hugging Face directories written as GGUF by model_quantize carry their tokenizer
 * (vocab_to_gguf): the GGUF tokenizes like the directory (byte-level BPE qwen2 / gpt2, WordPiece bert), and its
 * outputs still meet the golden (F32 export: the F32 rule; Q8_0: loads, argmax
 * agrees, max rel diff within 0.1). Also the HF metadata
 * of tokenizer_config.json / generation_config.json: chat template, EOG ids, sampling defaults, kept by export. */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "golden_check.h"
#include "hearth.h"
#include "convert/quantize.h"
#include "testutil.h"

static const char *const TEXTS[] = {
    "Hello world, it's me!", "Caf\xc3\xa9 na\xc3\xafve e\xcc\x81 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 \xd0\x9f\xd1\x80\xd0\xb8",
    "  two  spaces\n\nand 12345 numbers", "<|im_start|>user [CLS] [MASK] <|endoftext|>", "",
};

static void same_tokens(hearth_model *a, hearth_model *b, const char *what) {
    hearth_err err;
    for (size_t i = 0; i < sizeof TEXTS / sizeof TEXTS[0]; i++)
        for (int sp = 0; sp < 2; sp++) {
            hearth_token x[256], y[256];
            int nx = hearth_tokenize(a, TEXTS[i], strlen(TEXTS[i]), true, sp, x, 256, &err);
            int ny = hearth_tokenize(b, TEXTS[i], strlen(TEXTS[i]), true, sp, y, 256, &err);
            CHECK(nx >= 0 && nx == ny && !memcmp(x, y, (size_t)nx * sizeof *x), "%s: '%s' (special %d): %d vs %d tokens",
                  what, TEXTS[i], sp, nx, ny);
        }
}

/* Worst rel diff of m's outputs against the golden; agreement of argmax positions. */
static double golden_diff(hearth_model *m, const char *golden, double *agree_frac) {
    hearth_err err;
    golden_file ref;
    REQUIRE(!golden_read(golden, &ref, &err), "%s", err.msg);
    golden_file out;
    gc_eval_file(m, &ref, false, HEARTH_CACHE_F32, 0, &out);
    int agree = 0, total = 0;
    double worst = gc_worst_rel(&out, &ref, &agree, &total);
    if (ref.cases[0].kind != GOLDEN_LOGITS) agree = total = 0;   /* argmax is a logits property */
    golden_free(&out);
    *agree_frac = total ? (double)agree / total : 1;
    golden_free(&ref);
    return worst;
}

static void check_export(const char *dir, const char *golden, const char *tmp) {
    char src[256], out[256], gpath[256];
    hearth_err err;
    hearth_model *m, *q;
    snprintf(src, sizeof src, "data/hf/%s", dir);
    snprintf(gpath, sizeof gpath, "data/golden/%s.golden", golden);
    REQUIRE(!hearth_model_load(src, &m, &err), "%s", err.msg);
    const char *types[] = { "F32", "Q8_0" };
    for (int t = 0; t < 2; t++) {
        snprintf(out, sizeof out, "%s/%s-%s.gguf", tmp, dir, types[t]);
        REQUIRE(!model_quantize(m, out, types[t], true, 2, NULL, NULL, &err), "%s: %s", out, err.msg);
        if (hearth_model_load(out, &q, &err)) { CHECK(0, "%s: %s", out, err.msg); continue; }
        char pre[64] = "";
        CHECK(hearth_model_meta_str(q, "tokenizer.ggml.model", pre, sizeof pre) > 0, "%s: no tokenizer written", out);
        same_tokens(m, q, out);
        double agree, d = golden_diff(q, gpath, &agree);
        printf("%-14s %-5s tokenizer %-5s golden rel diff %.2e, argmax %.3f\n", dir, types[t], pre, d, agree);
        CHECK(d <= (t ? 0.1 : 5e-3) && agree >= (t ? 0.95 : 0.99), "%s: rel diff %.3g, argmax %.3f", out, d, agree);
        hearth_model_free(q);
        unlink(out);
    }
    hearth_model_free(m);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs(text, f) >= 0 && !fclose(f), "write %s", path);
}

/* qwen2-hf plus tokenizer_config.json (a template list, eos as an object) and generation_config.json. */
static void check_metadata(const char *tmp) {
    char d[256], p[512], cwd[256];
    snprintf(d, sizeof d, "%s/qwen2-meta", tmp);
    REQUIRE(!mkdir(d, 0755) && getcwd(cwd, sizeof cwd), "mkdir %s", d);
    const char *files[] = { "config.json", "model.safetensors", "tokenizer.json" };
    for (int i = 0; i < 3; i++) {
        char target[512];
        snprintf(target, sizeof target, "%s/data/hf/qwen2-hf/%s", cwd, files[i]);
        snprintf(p, sizeof p, "%s/%s", d, files[i]);
        REQUIRE(!symlink(target, p), "symlink %s", p);
    }
    snprintf(p, sizeof p, "%s/tokenizer_config.json", d);
    write_file(p, "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"TOOLS\"},"
                  " {\"name\": \"default\", \"template\": \"{{ bos_token }}DEFAULT\"}],"
                  " \"bos_token\": null, \"eos_token\": {\"content\": \"<|im_end|>\"}}");
    snprintf(p, sizeof p, "%s/generation_config.json", d);
    write_file(p, "{\"temperature\": 0.6, \"top_p\": 0.9, \"top_k\": 20, \"repetition_penalty\": 1.1,"
                  " \"eos_token_id\": [768, 769], \"do_sample\": true}");
    hearth_err err;
    hearth_model *m, *q;
    REQUIRE(!hearth_model_load(d, &m, &err), "%s", err.msg);
    snprintf(p, sizeof p, "%s/qwen2-meta.gguf", tmp);
    REQUIRE(!model_quantize(m, p, "Q8_0", true, 2, NULL, NULL, &err), "%s", err.msg);
    REQUIRE(!hearth_model_load(p, &q, &err), "%s", err.msg);
    hearth_model *ms[2] = { m, q };
    for (int i = 0; i < 2; i++) {
        char buf[64];
        CHECK(hearth_model_meta_str(ms[i], "tokenizer.chat_template", buf, sizeof buf) > 0 &&
              !strcmp(buf, "{{ bos_token }}DEFAULT"), "model %d: chat template '%s'", i, buf);
        hearth_sampler_params sp = hearth_model_sampler_defaults(ms[i]);
        CHECK(fabsf(sp.temperature - 0.6f) < 1e-6f && fabsf(sp.top_p - 0.9f) < 1e-6f && sp.top_k == 20 &&
              fabsf(sp.repeat_penalty - 1.1f) < 1e-6f && fabsf(sp.min_p - 0.05f) < 1e-6f,
              "model %d: defaults %g %g %d %g", i, sp.temperature, sp.top_p, sp.top_k, sp.repeat_penalty);
        CHECK(hearth_token_eos(ms[i]) == 770, "model %d: eos %d", i, hearth_token_eos(ms[i]));
        CHECK(hearth_token_is_eog(ms[i], 768) && hearth_token_is_eog(ms[i], 769) && hearth_token_is_eog(ms[i], 770),
              "model %d: EOG ids", i);
    }
    hearth_model_free(q);
    hearth_model_free(m);
    unlink(p);
    for (int i = 0; i < 5; i++) {
        const char *n[] = { "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json" };
        snprintf(p, sizeof p, "%s/%s", d, n[i]);
        unlink(p);
    }
    rmdir(d);
}

int main(void) {
    char tmp[] = "/tmp/hearth-hf-export-XXXXXX";
    REQUIRE(mkdtemp(tmp), "mkdtemp");
    check_export("qwen2-hf", "qwen2", tmp);
    check_export("gpt2-hf", "gpt2", tmp);
    check_export("bert-hf", "bert", tmp);
    check_metadata(tmp);
    /* a GGUF model without generation metadata keeps the library's defaults */
    hearth_err err;
    hearth_model *m;
    REQUIRE(!hearth_model_load("data/models/llama.gguf", &m, &err), "%s", err.msg);
    hearth_sampler_params a = hearth_model_sampler_defaults(m), b = hearth_sampler_default_params();
    CHECK(a.temperature == b.temperature && a.top_k == b.top_k && a.top_p == b.top_p && a.min_p == b.min_p &&
          a.typical_p == b.typical_p && a.repeat_penalty == b.repeat_penalty, "GGUF defaults changed");
    hearth_model_free(m);
    rmdir(tmp);
    TEST_DONE();
}
