/* test_hf_hybrid.c — Qwen3.5 Hugging Face directories (Qwen3_5ForConditionalGeneration and its MoE), written here
 * from the GGUF fixtures the way Hugging Face stores them: the text tower under model.language_model. with its
 * config in text_config, a vision tower beside it (never read), norms as w for (1 + w) but the DeltaNet's gated
 * norm, A_log for -exp(A_log), the conv kernel as [channels, 1, 4], dt_bias, and the V heads in HF's grouped
 * order (the GGUF converter retiles them: v-head j of k-head g at j * k_heads + g there, g * (v/k) + j here) in
 * in_proj_qkv's V rows, in_proj_z, in_proj_b/a, A_log, dt_bias, the conv's V channels and out_proj's columns.
 * Each directory loads, gives its GGUF twin's logits and meets the golden's F32 rule; quantized back to an F32
 * GGUF (V heads retiled as the converter does) it gives them again. Qwen3-Next (Qwen3NextForCausalLM, a flat
 * config, model.layers.) likewise from a synthesized tiny-qwen3next: its GGUF keeps HF's grouped V order, and
 * HF's in_proj_qkvz / in_proj_ba hold per k-head [q | k | v | z] and [b | a], which GGUF splits into attn_qkv +
 * attn_gate (and keeps as ssm_ba). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/gguf.h"
#include "quant/quant.h"
#include "golden_check.h"
#include "hearth.h"
#include "convert/quantize.h"
#include "convert/synth.h"
#include "st_write.h"
#include "testutil.h"

typedef struct { int Hk, Hv, S, kd, vd; bool grouped; } dn;   /* the DeltaNet's heads and widths; GGUF order grouped */

/* The GGUF row block of HF's v-head hf (blocks of `blk` rows): tiled t = j * Hk + g for hf = g * r + j. */
static int64_t tiled(const dn *d, int64_t hf) {
    const int r = d->Hv / d->Hk;
    if (d->grouped) return hf;
    return (hf % r) * d->Hk + hf / r;
}

/* out = the fixture tensor's rows with the v-head blocks (rows v0.. of blk rows each) in HF's order. */
static float *rows_grouped(const gguf_tensor *t, const dn *d, int64_t v0, int64_t blk) {
    const int64_t cols = t->ne[0], rows = t->n_dims == 1 ? 1 : t->ne[1];
    const float *src = t->data;
    float *x = malloc((size_t)(rows * cols) * sizeof(float));
    REQUIRE(x && t->type == HT_F32, "%s", t->name);
    memcpy(x, src, (size_t)(rows * cols) * sizeof(float));
    if (t->n_dims == 1) {   /* a vector of v-heads (blk 1) */
        for (int64_t h = 0; h < d->Hv; h++) x[h] = src[tiled(d, h)];
        return x;
    }
    for (int64_t h = 0; h < d->Hv; h++)
        memcpy(x + (v0 + h * blk) * cols, src + (v0 + tiled(d, h) * blk) * cols, (size_t)(blk * cols) * sizeof(float));
    return x;
}

static const gguf_tensor *need(const gguf_file *g, const char *fmt, int il) {
    char name[128];
    snprintf(name, sizeof name, fmt, il);
    const gguf_tensor *t = gguf_find_tensor(g, name);
    REQUIRE(t, "fixture has no %s", name);
    return t;
}

/* The tensor as HF stores it under name (layer il's prefix when il >= 0), with f applied element-wise. */
static const char *g_layers = "model.language_model.layers.";   /* the layers' prefix in the directory being written */

static void put(st_out *o, const gguf_tensor *t, int il, const char *hf, float (*f)(float), const float *data) {
    char name[256];
    if (il >= 0) snprintf(name, sizeof name, "%s%d.%s", g_layers, il, hf);
    else snprintf(name, sizeof name, "%s", hf);
    const int64_t cols = t->ne[0], rows = t->n_dims == 1 ? 0 : t->ne[1], n = HT_MAX(rows, 1) * cols;
    float *x = malloc((size_t)n * sizeof(float));
    REQUIRE(x, "out of memory");
    memcpy(x, data ? data : (const float *)t->data, (size_t)n * sizeof(float));
    if (f) for (int64_t i = 0; i < n; i++) x[i] = f(x[i]);
    st_add(o, name, rows, cols, x);
    free(x);
}

static float minus_one(float x) { return x - 1.0f; }
static float a_log(float x) { return logf(-x); }

static void write_hf(const char *arch, const char *gguf_path, const char *dir) {
    hearth_err err;
    gguf_file *g;
    REQUIRE(!gguf_open(gguf_path, &g, &err), "%s", err.msg);
    const bool next = !strcmp(arch, "qwen3next"), moe = next || !strcmp(arch, "qwen35moe");
    g_layers = next ? "model.layers." : "model.language_model.layers.";
    const uint32_t L = fixture_u32(g, arch, "block_count"), E = fixture_u32(g, arch, "embedding_length"), HD = fixture_u32(g, arch, "attention.key_length");
    dn d = { (int)fixture_u32(g, arch, "ssm.group_count"), (int)fixture_u32(g, arch, "ssm.time_step_rank"),
             (int)fixture_u32(g, arch, "ssm.state_size"), 0, 0, next };
    d.kd = d.Hk * d.S, d.vd = d.Hv * d.S;
    const bool untied = gguf_find_tensor(g, "output.weight") != NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *cf = fopen(path, "w");
    REQUIRE(cf, "cannot write %s", path);
    if (next)   /* a flat config */
        fprintf(cf, "{\"architectures\": [\"Qwen3NextForCausalLM\"], \"model_type\": \"qwen3_next\", \"intermediate_size\": %u,\n ",
                fixture_u32(g, arch, "feed_forward_length"));
    else
        fprintf(cf, "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"vision_config\": {\"depth\": 1},\n \"text_config\": {",
                moe ? "Qwen3_5MoeForConditionalGeneration" : "Qwen3_5ForConditionalGeneration", moe ? "qwen3_5_moe" : "qwen3_5");
    fprintf(cf, "\"hidden_size\": %u, \"num_hidden_layers\": %u, \"num_attention_heads\": %u, \"num_key_value_heads\": %u,\n"
                "  \"head_dim\": %u, \"rms_norm_eps\": 1e-06, \"vocab_size\": %u, \"max_position_embeddings\": 262144,\n"
                "  \"tie_word_embeddings\": %s, \"full_attention_interval\": 4, \"linear_conv_kernel_dim\": %u,\n"
                "  \"linear_key_head_dim\": %d, \"linear_value_head_dim\": %d, \"linear_num_key_heads\": %d, \"linear_num_value_heads\": %d,\n"
                "  \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000000, \"partial_rotary_factor\": %g,"
                " \"mrope_section\": [11, 11, 10], \"mrope_interleaved\": true},\n  \"layer_types\": [",
            E, L, fixture_u32(g, arch, "attention.head_count"), fixture_u32(g, arch, "attention.head_count_kv"), HD,
            (unsigned)need(g, "token_embd.weight", 0)->ne[1], untied ? "false" : "true", fixture_u32(g, arch, "ssm.conv_kernel"),
            d.S, d.S, d.Hk, d.Hv, (double)fixture_u32(g, arch, "rope.dimension_count") / HD);
    for (uint32_t il = 0; il < L; il++) fprintf(cf, "%s\"%s\"", il ? ", " : "", (il + 1) % 4 ? "linear_attention" : "full_attention");
    if (moe)
        fprintf(cf, "],\n  \"num_experts\": %u, \"num_experts_per_tok\": %u, \"moe_intermediate_size\": %u,"
                    " \"shared_expert_intermediate_size\": %u, \"norm_topk_prob\": true}%s\n",
                fixture_u32(g, arch, "expert_count"), fixture_u32(g, arch, "expert_used_count"), fixture_u32(g, arch, "expert_feed_forward_length"),
                fixture_u32(g, arch, "expert_shared_feed_forward_length"), next ? "" : "}");
    else fprintf(cf, "],\n  \"intermediate_size\": %u}}\n", fixture_u32(g, arch, "feed_forward_length"));
    fclose(cf);

    st_out o;
    st_begin(&o);
    const float vis[4] = { 1, 2, 3, 4 };
    if (!next) st_add(&o, "model.visual.blocks.0.attn.qkv.weight", 2, 2, vis);   /* a vision tower: left unread */
    put(&o, need(g, "token_embd.weight", 0), -1, next ? "model.embed_tokens.weight" : "model.language_model.embed_tokens.weight", NULL, NULL);
    put(&o, need(g, "output_norm.weight", 0), -1, next ? "model.norm.weight" : "model.language_model.norm.weight", minus_one, NULL);
    if (untied) put(&o, need(g, "output.weight", 0), -1, "lm_head.weight", NULL, NULL);
    for (int il = 0; il < (int)L; il++) {
        put(&o, need(g, "blk.%d.attn_norm.weight", il), il, "input_layernorm.weight", minus_one, NULL);
        put(&o, need(g, "blk.%d.post_attention_norm.weight", il), il, "post_attention_layernorm.weight", minus_one, NULL);
        if ((il + 1) % 4) {
            const struct { const char *gguf, *hf; int64_t v0, blk; } mats[] = {
                { "blk.%d.attn_qkv.weight", "linear_attn.in_proj_qkv.weight", 2 * d.kd, d.S },
                { "blk.%d.attn_gate.weight", "linear_attn.in_proj_z.weight", 0, d.S },
                { "blk.%d.ssm_beta.weight", "linear_attn.in_proj_b.weight", 0, 1 },
                { "blk.%d.ssm_alpha.weight", "linear_attn.in_proj_a.weight", 0, 1 },
                { "blk.%d.ssm_dt.bias", "linear_attn.dt_bias", 0, 1 },
            };
            if (next) {   /* in_proj_qkvz: per k-head [q | k | v | z]; in_proj_ba as GGUF keeps it */
                const gguf_tensor *qkv = need(g, "blk.%d.attn_qkv.weight", il), *z = need(g, "blk.%d.attn_gate.weight", il);
                const int64_t E = qkv->ne[0], per = d.Hv / d.Hk * d.S;
                float *x = malloc((size_t)((2 * d.kd + 2 * d.vd) * E) * sizeof(float)), *w = x;
                REQUIRE(x, "out of memory");
                const float *q = qkv->data, *vz[2] = { (const float *)qkv->data + 2 * d.kd * E, z->data };
                for (int gk = 0; gk < d.Hk; gk++) {
                    memcpy(w, q + (int64_t)gk * d.S * E, (size_t)(d.S * E) * sizeof(float)), w += d.S * E;
                    memcpy(w, q + (d.kd + (int64_t)gk * d.S) * E, (size_t)(d.S * E) * sizeof(float)), w += d.S * E;
                    for (int k = 0; k < 2; k++) memcpy(w, vz[k] + gk * per * E, (size_t)(per * E) * sizeof(float)), w += per * E;
                }
                char name[256];
                snprintf(name, sizeof name, "model.layers.%d.linear_attn.in_proj_qkvz.weight", il);
                st_add(&o, name, 2 * d.kd + 2 * d.vd, E, x);
                free(x);
                put(&o, need(g, "blk.%d.ssm_ba.weight", il), il, "linear_attn.in_proj_ba.weight", NULL, NULL);
                put(&o, need(g, "blk.%d.ssm_dt.bias", il), il, "linear_attn.dt_bias", NULL, NULL);
            }
            for (size_t i = 0; !next && i < sizeof mats / sizeof mats[0]; i++) {
                const gguf_tensor *t = need(g, mats[i].gguf, il);
                float *x = rows_grouped(t, &d, mats[i].v0, mats[i].blk);
                put(&o, t, il, mats[i].hf, NULL, x);
                free(x);
            }
            const gguf_tensor *a = need(g, "blk.%d.ssm_a", il), *cv = need(g, "blk.%d.ssm_conv1d.weight", il);
            float *x = rows_grouped(a, &d, 0, 1);
            put(&o, a, il, "linear_attn.A_log", a_log, x);
            free(x);
            x = rows_grouped(cv, &d, 2 * d.kd, d.S);   /* [channels][4] -> HF [channels, 1, 4] */
            char name[256];
            snprintf(name, sizeof name, "%s%d.linear_attn.conv1d.weight", g_layers, il);
            const int64_t shape[3] = { cv->ne[1], 1, cv->ne[0] };
            st_add_shape(&o, name, 3, shape, x);
            free(x);
            put(&o, need(g, "blk.%d.ssm_norm.weight", il), il, "linear_attn.norm.weight", NULL, NULL);
            const gguf_tensor *out = need(g, "blk.%d.ssm_out.weight", il);   /* its columns are the v-heads */
            float *y = malloc((size_t)(out->ne[0] * out->ne[1]) * sizeof(float));
            REQUIRE(y, "out of memory");
            for (int64_t r = 0; r < out->ne[1]; r++)
                for (int64_t h = 0; h < d.Hv; h++)
                    memcpy(y + r * out->ne[0] + h * d.S, (const float *)out->data + r * out->ne[0] + tiled(&d, h) * d.S,
                           (size_t)d.S * sizeof(float));
            put(&o, out, il, "linear_attn.out_proj.weight", NULL, y);
            free(y);
        } else {
            put(&o, need(g, "blk.%d.attn_q.weight", il), il, "self_attn.q_proj.weight", NULL, NULL);
            put(&o, need(g, "blk.%d.attn_k.weight", il), il, "self_attn.k_proj.weight", NULL, NULL);
            put(&o, need(g, "blk.%d.attn_v.weight", il), il, "self_attn.v_proj.weight", NULL, NULL);
            put(&o, need(g, "blk.%d.attn_output.weight", il), il, "self_attn.o_proj.weight", NULL, NULL);
            put(&o, need(g, "blk.%d.attn_q_norm.weight", il), il, "self_attn.q_norm.weight", minus_one, NULL);
            put(&o, need(g, "blk.%d.attn_k_norm.weight", il), il, "self_attn.k_norm.weight", minus_one, NULL);
        }
        if (!moe) {
            put(&o, need(g, "blk.%d.ffn_gate.weight", il), il, "mlp.gate_proj.weight", NULL, NULL);
            put(&o, need(g, "blk.%d.ffn_up.weight", il), il, "mlp.up_proj.weight", NULL, NULL);
            put(&o, need(g, "blk.%d.ffn_down.weight", il), il, "mlp.down_proj.weight", NULL, NULL);
            continue;
        }
        put(&o, need(g, "blk.%d.ffn_gate_inp.weight", il), il, "mlp.gate.weight", NULL, NULL);
        const gguf_tensor *sg = need(g, "blk.%d.ffn_gate_inp_shexp.weight", il);
        char name[256];
        snprintf(name, sizeof name, "%s%d.mlp.shared_expert_gate.weight", g_layers, il);
        st_add(&o, name, 1, sg->ne[0], sg->data);   /* nn.Linear(hidden, 1): [1, hidden] */
        put(&o, need(g, "blk.%d.ffn_gate_shexp.weight", il), il, "mlp.shared_expert.gate_proj.weight", NULL, NULL);
        put(&o, need(g, "blk.%d.ffn_up_shexp.weight", il), il, "mlp.shared_expert.up_proj.weight", NULL, NULL);
        put(&o, need(g, "blk.%d.ffn_down_shexp.weight", il), il, "mlp.shared_expert.down_proj.weight", NULL, NULL);
        const char *kinds[3][2] = { { "blk.%d.ffn_gate_exps.weight", "gate_proj" }, { "blk.%d.ffn_up_exps.weight", "up_proj" },
                                    { "blk.%d.ffn_down_exps.weight", "down_proj" } };
        for (int k = 0; k < 3; k++) {
            const gguf_tensor *t = need(g, kinds[k][0], il);
            for (int64_t e = 0; e < t->ne[2]; e++) {
                snprintf(name, sizeof name, "%s%d.mlp.experts.%lld.%s.weight", g_layers, il, (long long)e, kinds[k][1]);
                st_add(&o, name, t->ne[1], t->ne[0], (const float *)t->data + e * t->ne[0] * t->ne[1]);
            }
        }
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_finish(&o, path);
    gguf_close(g);
}

static void check(const char *arch, const char *tmp) {
    char gguf[256], dir[256], golden[256];
    hearth_err err;
    snprintf(gguf, sizeof gguf, "data/models/%s.gguf", arch);
    if (!strcmp(arch, "qwen3next")) {   /* synthesized: the file the golden came from */
        synth_ftype ft;
        synth_opts so = { .seed = 0 };
        snprintf(gguf, sizeof gguf, "%s/qwen3next.gguf", tmp);
        REQUIRE(!synth_parse_ftype("F32", false, &ft, &err) && !synth_write(synth_find_shape("tiny-qwen3next"), &ft, gguf, &so, &err),
                "synth: %s", err.msg);
    }
    snprintf(golden, sizeof golden, "data/golden/%s.golden", arch);
    snprintf(dir, sizeof dir, "%s/%s-hf", tmp, arch);
    REQUIRE(!mkdir(dir, 0755), "mkdir %s", dir);
    write_hf(arch, gguf, dir);
    hearth_model *hf, *twin;
    REQUIRE(!hearth_model_load(dir, &hf, &err), "%s: %s", dir, err.msg);
    REQUIRE(!hearth_model_load(gguf, &twin, &err), "%s: %s", gguf, err.msg);
    hearth_model_info in;
    hearth_model_get_info(hf, &in);
    CHECK(!strcmp(in.arch, arch), "%s: loaded as %s", dir, in.arch);
    golden_file ref, a, b;
    REQUIRE(!golden_read(golden, &ref, &err), "%s", err.msg);
    gc_eval_file(hf, &ref, false, HEARTH_CACHE_F32, 0, &a);
    gc_eval_file(twin, &ref, false, HEARTH_CACHE_F32, 0, &b);
    double twin_diff = 0;
    for (uint32_t c = 0; c < ref.n_cases; c++) {
        double x = gc_rel_diff(&a.cases[c], &b.cases[c]);
        if (!(x <= twin_diff)) twin_diff = x;
    }
    int agree = 0, total = 0;
    const double worst = gc_worst_rel(&a, &ref, &agree, &total);
    printf("%s HF dir: vs its GGUF twin %.2e, vs golden %.2e, argmax %d/%d\n", arch, twin_diff, worst, agree, total);
    CHECK(twin_diff <= 1e-4, "%s: the HF directory's logits differ from the GGUF's by %.3g", arch, twin_diff);
    CHECK(worst <= 5e-3 && agree >= 0.99 * total, "%s HF: rel diff %.3g, argmax %d/%d", arch, worst, agree, total);
    /* back to GGUF: the same logits from the file, which is in GGUF's order (not the same bits: ssm_out sums its
     * columns in the other order when the heads are retiled) */
    char out[300];
    snprintf(out, sizeof out, "%s/%s-from-hf.gguf", tmp, arch);
    REQUIRE(!model_quantize(hf, out, "F32", true, 2, NULL, NULL, &err), "%s", err.msg);
    hearth_model *back;
    REQUIRE(!hearth_model_load(out, &back, &err), "%s: %s", out, err.msg);
    golden_file c;
    gc_eval_file(back, &ref, false, HEARTH_CACHE_F32, 0, &c);
    double back_diff = 0;
    for (uint32_t k = 0; k < ref.n_cases; k++) {
        double x = gc_rel_diff(&c.cases[k], &a.cases[k]);
        if (!(x <= back_diff)) back_diff = x;
    }
    printf("%s HF dir -> GGUF F32: vs the HF dir %.2e\n", arch, back_diff);
    CHECK(back_diff <= 1e-4, "%s: the GGUF written from the HF directory gives other logits (%.3g)", arch, back_diff);
    golden_free(&c);
    hearth_model_free(back);
    golden_free(&a);
    golden_free(&b);
    golden_free(&ref);
    hearth_model_free(twin);
    hearth_model_free(hf);
}

int main(void) {
    char tmp[] = "/tmp/hearth-hf-hybrid-XXXXXX";
    REQUIRE(mkdtemp(tmp), "mkdtemp");
    check("qwen35", tmp);
    check("qwen35moe", tmp);
    check("qwen3next", tmp);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmp);
    TEST_DONE();
}
