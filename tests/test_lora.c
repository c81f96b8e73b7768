/* test_lora.c — LoRA adapters against the reference's goldens (llama.cpp with the adapters applied at the given
 * scales; F32 rule): one adapter, the same at scale 0.5, two together (an F32 rank-8 and an F16 rank-4), and
 * qwen3's. Batched == token by token and 1 == 2 threads, bit for bit; scale 0, or no adapters again, gives the
 * base model's logits exactly; `hearth golden --lora-scaled FILE:SCALE,...` writes the same logits as the API.
 * A PEFT directory written here from a GGUF adapter (HF names, lora_B's q/k rows in Llama's rotate-half order,
 * which the GGUF converter permutes) gives that adapter's logits bit for bit. An adapter for another architecture, or whose shapes do not fit, is refused in
 * one line naming the tensor. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "golden_check.h"
#include "hearth.h"
#include "io/gguf.h"
#include "quant/quant.h"
#include "st_write.h"
#include "testutil.h"

typedef struct { const char *golden, *base, *lora[2]; float scale[2]; } lora_case;

static const lora_case CASES[] = {
    { "llama+lora-a", "llama", { "llama-lora-a", NULL }, { 1.0f, 0 } },
    { "llama+lora-a-0.5", "llama", { "llama-lora-a", NULL }, { 0.5f, 0 } },
    { "llama+lora-a+b", "llama", { "llama-lora-a", "llama-lora-b" }, { 1.0f, 0.7f } },
    { "qwen3+lora", "qwen3", { "qwen3-lora", NULL }, { 1.0f, 0 } },
};

static bool same(const golden_file *a, const golden_file *b) {
    for (uint32_t c = 0; c < a->n_cases; c++)
        if (gc_rel_diff(&a->cases[c], &b->cases[c]) != 0) return false;
    return true;
}

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

static void check_case(const lora_case *k) {
    char path[256];
    hearth_err err;
    snprintf(path, sizeof path, "data/models/%s.gguf", k->base);
    hearth_model *m;
    REQUIRE(!hearth_model_load(path, &m, &err), "%s: %s", path, err.msg);
    hearth_lora *a[2] = { NULL, NULL };
    int n = 0;
    for (; n < 2 && k->lora[n]; n++) {
        snprintf(path, sizeof path, "data/models/%s.gguf", k->lora[n]);
        REQUIRE(!hearth_lora_load(m, path, &a[n], &err), "%s: %s", path, err.msg);
    }
    golden_file ref, base_ref, ours = { 0 }, tok = { 0 }, two = { 0 }, off = { 0 }, zero = { 0 }, plain = { 0 };
    snprintf(path, sizeof path, "data/golden/%s.golden", k->golden);
    REQUIRE(!golden_read(path, &ref, &err), "%s", err.msg);
    snprintf(path, sizeof path, "data/golden/%s.golden", k->base);
    REQUIRE(!golden_read(path, &base_ref, &err), "%s", err.msg);

    hearth_ctx *c1 = new_ctx(m, 1), *c2 = new_ctx(m, 2);
    gc_eval_ctx(c1, &ref, false, &plain);   /* before any adapter */
    REQUIRE(!hearth_ctx_set_lora(c1, a, k->scale, n, &err) && !hearth_ctx_set_lora(c2, a, k->scale, n, &err), "%s", err.msg);
    gc_eval_ctx(c1, &ref, false, &ours);
    gc_eval_ctx(c1, &ref, true, &tok);
    gc_eval_ctx(c2, &ref, false, &two);
    int agree = 0, total = 0;
    const double worst = gc_worst_rel(&ours, &ref, &agree, &total);
    const double moved = gc_worst_rel(&plain, &ref, &agree, &total);   /* how far the adapter moves the logits */
    agree = total = 0;
    gc_worst_rel(&ours, &ref, &agree, &total);
    printf("%-18s vs reference %.2e (the base alone %.2e), argmax %d/%d\n", k->golden, worst, moved, agree, total);
    CHECK(worst <= 5e-3 && agree >= 0.99 * total, "%s: rel diff %.3g, argmax %d/%d", k->golden, worst, agree, total);
    CHECK(moved > 20 * worst, "%s: the adapters barely change the logits (%.3g vs %.3g)", k->golden, moved, worst);
    CHECK(same(&ours, &tok), "%s: token by token differs from batched", k->golden);
    CHECK(same(&ours, &two), "%s: 2 threads differ from 1", k->golden);
    const float zeros[2] = { 0, 0 };
    REQUIRE(!hearth_ctx_set_lora(c1, a, zeros, n, &err), "%s", err.msg);
    gc_eval_ctx(c1, &ref, false, &zero);
    REQUIRE(!hearth_ctx_set_lora(c1, NULL, NULL, 0, &err), "%s", err.msg);
    gc_eval_ctx(c1, &ref, false, &off);
    CHECK(same(&zero, &plain) && same(&off, &plain), "%s: scale 0 / no adapters do not give the base logits", k->golden);
    /* the CLI: hearth golden --lora-scaled FILE:SCALE,... writes the same logits */
    const char *hearth = getenv("HEARTH");
    if (hearth) {
        char cmd[1024], out[] = "/tmp/hearth-lora-XXXXXX";
        int fd = mkstemp(out);
        REQUIRE(fd >= 0, "mkstemp");
        close(fd);
        int len = snprintf(cmd, sizeof cmd, "'%s' golden -m data/models/%s.gguf -i data/golden/%s.golden -o %s --lora-scaled ",
                           hearth, k->base, k->golden, out);
        for (int i = 0; i < n; i++)
            len += snprintf(cmd + len, sizeof cmd - (size_t)len, "%sdata/models/%s.gguf:%g", i ? "," : "", k->lora[i], k->scale[i]);
        golden_file cli;
        CHECK(system(cmd) == 0 && !golden_read(out, &cli, &err), "%s: %s", cmd, err.msg);
        CHECK(same(&cli, &ours), "%s: hearth golden --lora-scaled differs from the API's logits", k->golden);
        golden_free(&cli);
        unlink(out);
    }
    golden_file *all[] = { &ref, &base_ref, &ours, &tok, &two, &off, &zero, &plain };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) golden_free(all[i]);
    hearth_ctx_free(c1);
    hearth_ctx_free(c2);
    for (int i = 0; i < n; i++) hearth_lora_free(a[i]);
    hearth_model_free(m);
}

/* GGUF weight names -> HF module names (Llama and Qwen3 layers). */
static const struct { const char *gguf, *hf; } MODULES[] = {
    { "attn_q", "self_attn.q_proj" }, { "attn_k", "self_attn.k_proj" }, { "attn_v", "self_attn.v_proj" },
    { "attn_output", "self_attn.o_proj" }, { "ffn_gate", "mlp.gate_proj" }, { "ffn_up", "mlp.up_proj" },
    { "ffn_down", "mlp.down_proj" } };

/* dir/adapter_config.json + adapter_model.safetensors from the GGUF adapter; heads[0/1] > 0: lora_B rows of q / k
 * back to rotate-half order. */
static void write_peft(const char *gguf_path, const char *dir, const int heads[2]) {
    hearth_err err;
    gguf_file *g;
    REQUIRE(!gguf_open(gguf_path, &g, &err), "%s", err.msg);
    float alpha = 0;
    REQUIRE(gguf_get_f32(g, "adapter.lora.alpha", &alpha), "no alpha");
    st_out o;
    st_begin(&o);
    int rank = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        int il;
        char mod[32], ab;
        REQUIRE(sscanf(t->name, "blk.%d.%31[a-z_].weight.lora_%c", &il, mod, &ab) == 3 && t->type == HT_F32, "%s", t->name);
        const char *hf = NULL;
        int qk = -1;
        for (size_t k = 0; k < sizeof MODULES / sizeof MODULES[0]; k++)
            if (!strcmp(mod, MODULES[k].gguf)) hf = MODULES[k].hf, qk = k < 2 ? (int)k : -1;
        REQUIRE(hf, "%s", t->name);
        const int64_t cols = t->ne[0], rows = t->ne[1];
        float *x = malloc((size_t)(rows * cols) * sizeof(float));
        REQUIRE(x, "out of memory");
        const float *src = t->data;
        for (int64_t r = 0; r < rows; r++) {
            int64_t dst = r;
            if (ab == 'b' && qk >= 0 && heads[qk] > 0) {   /* GGUF row r came from HF row dst */
                const int64_t hd = rows / heads[qk], h = r / hd, k = r % hd;
                dst = h * hd + (k % 2) * (hd / 2) + k / 2;
            }
            memcpy(x + dst * cols, src + r * cols, (size_t)cols * sizeof(float));
        }
        if (ab == 'a') rank = (int)rows;
        char name[256];
        snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.lora_%c.weight", il, hf, ab == 'a' ? 'A' : 'B');
        st_add(&o, name, rows, cols, x);
        free(x);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    st_finish(&o, path);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    FILE *f = fopen(path, "w");
    REQUIRE(f, "%s", path);
    fprintf(f, "{\"peft_type\": \"LORA\", \"r\": %d, \"lora_alpha\": %g, \"target_modules\": [\"q_proj\", \"k_proj\"],"
               " \"use_rslora\": false, \"rank_pattern\": {}, \"alpha_pattern\": {}}\n", rank, (double)alpha);
    fclose(f);
    gguf_close(g);
}

static void check_peft(const char *base, const char *lora, const int heads[2]) {
    char path[256], dir[] = "/tmp/hearth-peft-XXXXXX";
    hearth_err err;
    REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(path, sizeof path, "data/models/%s.gguf", lora);
    write_peft(path, dir, heads);
    snprintf(path, sizeof path, "data/models/%s.gguf", base);
    hearth_model *m;
    REQUIRE(!hearth_model_load(path, &m, &err), "%s", err.msg);
    hearth_lora *a, *p;
    snprintf(path, sizeof path, "data/models/%s.gguf", lora);
    REQUIRE(!hearth_lora_load(m, path, &a, &err), "%s", err.msg);
    REQUIRE(!hearth_lora_load(m, dir, &p, &err), "%s: %s", dir, err.msg);
    golden_file ref, x = { 0 }, y = { 0 };
    snprintf(path, sizeof path, "data/golden/%s.golden", base);
    REQUIRE(!golden_read(path, &ref, &err), "%s", err.msg);
    hearth_ctx *c = new_ctx(m, 2);
    const float one = 1;
    REQUIRE(!hearth_ctx_set_lora(c, &a, &one, 1, &err), "%s", err.msg);
    gc_eval_ctx(c, &ref, false, &x);
    REQUIRE(!hearth_ctx_set_lora(c, &p, &one, 1, &err), "%s", err.msg);
    gc_eval_ctx(c, &ref, false, &y);
    CHECK(same(&x, &y), "%s: the PEFT directory's logits differ from the GGUF adapter's", lora);
    printf("%s as a PEFT directory: %d weights, the GGUF adapter's logits %s\n", lora, hearth_lora_count(p),
           same(&x, &y) ? "exactly" : "NOT");
    golden_free(&ref), golden_free(&x), golden_free(&y);
    hearth_ctx_free(c);
    hearth_lora_free(a);
    hearth_lora_free(p);
    hearth_model_free(m);
    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    if (system(path)) fprintf(stderr, "could not remove %s\n", dir);
}

/* Two sequences with different adapters in one interleaved batch: each row as it is alone. */
static void check_mixed(void) {
    hearth_err err;
    hearth_model *m;
    REQUIRE(!hearth_model_load("data/models/llama.gguf", &m, &err), "%s", err.msg);
    hearth_lora *a[2];
    REQUIRE(!hearth_lora_load(m, "data/models/llama-lora-a.gguf", &a[0], &err) &&
                !hearth_lora_load(m, "data/models/llama-lora-b.gguf", &a[1], &err), "%s", err.msg);
    hearth_model_info mi;
    hearth_model_get_info(m, &mi);
    const int N = 40, V = mi.n_vocab;
    const float s0[2] = { 1.0f, 0 }, s1[2] = { 0, 0.7f };
    hearth_token t[2 * 40];
    int32_t seq[2 * 40];
    int8_t want[2 * 40];
    for (int i = 0; i < 2 * N; i++) t[i] = (hearth_token)((i / 2 * 31 + (i % 2) * 7 + 1) % V), seq[i] = i % 2, want[i] = 1;
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = 64, cp.n_seq = 2, cp.n_threads = 2;
    hearth_ctx *mix, *alone;
    REQUIRE(!hearth_ctx_new(m, &cp, &mix, &err) && !hearth_ctx_new(m, &cp, &alone, &err), "%s", err.msg);
    REQUIRE(!hearth_ctx_set_lora(mix, a, s0, 2, &err) && !hearth_seq_set_lora(mix, 1, s1, &err), "%s", err.msg);
    REQUIRE(!hearth_decode(mix, &(hearth_batch){ .n = 2 * N, .tokens = t, .seq = seq, .want_logits = want }, &err), "%s", err.msg);
    CHECK(hearth_seq_lora_id(mix, 0) != hearth_seq_lora_id(mix, 1) && hearth_seq_lora_id(mix, 0) != 0,
          "the sequences' adapter identities should differ");
    bool ok = true;
    for (int q = 0; q < 2; q++) {   /* sequence q alone, with only its own adapter set on the context */
        hearth_lora *one = a[q];
        const float sc = q ? 0.7f : 1.0f;
        hearth_token tq[40];
        for (int i = 0; i < N; i++) tq[i] = t[2 * i + q];
        hearth_seq_truncate(alone, 0, 0);
        REQUIRE(!hearth_ctx_set_lora(alone, &one, &sc, 1, &err), "%s", err.msg);
        REQUIRE(!hearth_decode(alone, &(hearth_batch){ .n = N, .tokens = tq, .want_logits = want }, &err), "%s", err.msg);
        for (int i = 0; i < N; i++) ok &= !memcmp(hearth_logits(mix, 2 * i + q), hearth_logits(alone, i), (size_t)V * sizeof(float));
    }
    CHECK(ok, "two sequences with different adapters in one batch differ from each alone");
    printf("two sequences, lora-a and lora-b at 0.7, interleaved in one batch: each row as alone %s\n", ok ? "exactly" : "NOT");
    hearth_ctx_free(mix);
    hearth_ctx_free(alone);
    hearth_lora_free(a[0]);
    hearth_lora_free(a[1]);
    hearth_model_free(m);
}

static void check_refusals(void) {
    hearth_err err;
    hearth_model *llama, *qwen3, *llama3;
    REQUIRE(!hearth_model_load("data/models/llama.gguf", &llama, &err) && !hearth_model_load("data/models/qwen3.gguf", &qwen3, &err) &&
                !hearth_model_load("data/models/llama3.gguf", &llama3, &err), "%s", err.msg);
    hearth_lora *a = NULL;
    CHECK(hearth_lora_load(llama, "data/models/qwen3-lora.gguf", &a, &err) && !a && strstr(err.msg, "architecture 'qwen3'") &&
              !strchr(err.msg, '\n'), "qwen3's adapter on llama: '%s'", err.msg);
    CHECK(hearth_lora_load(llama3, "data/models/llama-lora-a.gguf", &a, &err) && !a && strstr(err.msg, "shapes do not fit") &&
              strstr(err.msg, "blk.0.") && !strchr(err.msg, '\n'), "llama's adapter on llama3: '%s'", err.msg);
    CHECK(hearth_lora_load(llama, "data/models/llama.gguf", &a, &err) && !a && strstr(err.msg, "not a LoRA adapter"),
          "a model as an adapter: '%s'", err.msg);
    printf("refused: %s\n", err.msg);
    hearth_model_free(llama);
    hearth_model_free(qwen3);
    hearth_model_free(llama3);
}

int main(void) {
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) check_case(&CASES[i]);
    const int llama_heads[2] = { 4, 2 }, none[2] = { 0, 0 };   /* llama.gguf: 4 q heads, 2 kv heads */
    check_peft("llama", "llama-lora-a", llama_heads);
    check_peft("qwen3", "qwen3-lora", none);   /* NEOX in GGUF too: no permutation */
    check_mixed();
    check_refusals();
    TEST_DONE();
}
