/* test_hf_gemma4.c — Gemma 4 Hugging Face directories written here from the gemma4 (E2B shape: per-layer embeddings,
 * KV-sharing double-wide layers, global layers with their own head size and kv heads, partial rope) and gemma4-moe
 * fixtures, in the published Gemma4ForConditionalGeneration form: the text tower under model.language_model. with
 * its config in text_config (layer_types, head_dim / global_head_dim, num_global_key_value_heads, per-kind
 * rope_parameters with the global layers' partial_rotary_factor, num_kv_shared_layers, use_double_wide_mlp,
 * hidden_size_per_layer_input), layer_scalar, the router (proj, scale, per_expert_scale) and whole expert stacks.
 * rope_freqs is not in the directory: it must come from partial_rotary_factor. Each directory gives its GGUF
 * twin's logits bit for bit (the same F32 weights), meets the golden's F32 rule (gemma4's own bar, see
 * test_golden) and quantizes back to an F32 GGUF whose tensors (rope_freqs included) are the fixture's byte for
 * byte; layer_types of the wrong length is refused in one line. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/gguf.h"
#include "quant/quant.h"
#include "golden_check.h"
#include "hf_check.h"
#include "hearth.h"
#include "convert/quantize.h"
#include "st_write.h"
#include "testutil.h"

typedef struct { const char *gguf, *hf; } rename_t;

static const rename_t LAYER[] = {
    { "attn_norm.weight", "input_layernorm.weight" }, { "attn_q.weight", "self_attn.q_proj.weight" },
    { "attn_k.weight", "self_attn.k_proj.weight" }, { "attn_v.weight", "self_attn.v_proj.weight" },
    { "attn_output.weight", "self_attn.o_proj.weight" }, { "attn_q_norm.weight", "self_attn.q_norm.weight" },
    { "attn_k_norm.weight", "self_attn.k_norm.weight" }, { "post_attention_norm.weight", "post_attention_layernorm.weight" },
    { "ffn_norm.weight", "pre_feedforward_layernorm.weight" }, { "post_ffw_norm.weight", "post_feedforward_layernorm.weight" },
    { "ffn_gate.weight", "mlp.gate_proj.weight" }, { "ffn_up.weight", "mlp.up_proj.weight" },
    { "ffn_down.weight", "mlp.down_proj.weight" }, { "inp_gate.weight", "per_layer_input_gate.weight" },
    { "proj.weight", "per_layer_projection.weight" }, { "post_norm.weight", "post_per_layer_input_norm.weight" },
    { "layer_output_scale.weight", "layer_scalar" }, { "pre_ffw_norm_2.weight", "pre_feedforward_layernorm_2.weight" },
    { "post_ffw_norm_1.weight", "post_feedforward_layernorm_1.weight" },
    { "post_ffw_norm_2.weight", "post_feedforward_layernorm_2.weight" }, { "ffn_gate_inp.weight", "router.proj.weight" },
    { "ffn_gate_inp.scale", "router.scale" }, { "ffn_down_exps.scale", "router.per_expert_scale" },
    { "ffn_gate_up_exps.weight", "experts.gate_up_proj" }, { "ffn_down_exps.weight", "experts.down_proj" } };

static const rename_t GLOBALS[] = {
    { "token_embd.weight", "embed_tokens.weight" }, { "output_norm.weight", "norm.weight" },
    { "per_layer_token_embd.weight", "embed_tokens_per_layer.weight" },
    { "per_layer_model_proj.weight", "per_layer_model_projection.weight" },
    { "per_layer_proj_norm.weight", "per_layer_projection_norm.weight" } };

/* An F32 fixture tensor under its HF name, in its own shape (GGUF ne reversed). */
static void put(st_out *o, const gguf_tensor *t, const char *name) {
    REQUIRE(t->type == HT_F32, "%s: the fixture should be F32", t->name);
    int64_t shape[3];
    for (uint32_t d = 0; d < t->n_dims; d++) shape[d] = (int64_t)t->ne[t->n_dims - 1 - d];
    st_add_shape(o, name, (int)t->n_dims, shape, t->data);
}

/* The fixture's per-layer value il of key (an array, or one value for all). */
static int64_t layer_int(const gguf_file *g, const char *key, uint32_t il) {
    const gguf_kv *kv = gguf_find(g, key);
    int64_t v;
    REQUIRE(kv, "fixture has no %s", key);
    if (kv->type == GGUF_ARR) REQUIRE(gguf_arr_int(kv, il, 0, 1 << 30, &v), "%s[%u]", key, il);
    else {
        uint32_t u;
        REQUIRE(gguf_get_u32(g, key, &u), "%s", key);
        v = u;
    }
    return v;
}

static float f32_or(const gguf_file *g, const char *key, float dflt) {
    float v = dflt;
    gguf_get_f32(g, key, &v);
    return v;
}

static void write_hf(const char *gguf_path, const char *dir, bool bad_layer_types) {
    hearth_err err;
    gguf_file *g;
    REQUIRE(!gguf_open(gguf_path, &g, &err), "%s", err.msg);
    const char *a = "gemma4";
    const uint32_t L = fixture_u32(g, a, "block_count"), hd = fixture_u32(g, a, "attention.key_length");
    const uint32_t hd_swa = fixture_u32(g, a, "attention.key_length_swa");
    uint32_t shared = 0, ple = 0, ne = 0, nu = 0, fexp = 0;
    gguf_get_u32(g, "gemma4.attention.shared_kv_layers", &shared);
    gguf_get_u32(g, "gemma4.embedding_length_per_layer_input", &ple);
    gguf_get_u32(g, "gemma4.expert_count", &ne);
    gguf_get_u32(g, "gemma4.expert_used_count", &nu);
    gguf_get_u32(g, "gemma4.expert_feed_forward_length", &fexp);
    const gguf_kv *pat = gguf_find(g, "gemma4.attention.sliding_window_pattern");
    REQUIRE(pat && pat->type == GGUF_ARR && pat->arr_n == L, "fixture sliding_window_pattern");
    int64_t kv_swa = 0, kv_full = 0, ff_first = layer_int(g, "gemma4.feed_forward_length", 0), ff_last = layer_int(g, "gemma4.feed_forward_length", L - 1);
    for (uint32_t il = 0; il < L; il++) *(pat->arr_data[il] ? &kv_swa : &kv_full) = layer_int(g, "gemma4.attention.head_count_kv", il);
    /* rope_freqs: the global layers' rotated pairs are the ones at 1 */
    const gguf_tensor *rf = gguf_find_tensor(g, "rope_freqs.weight");
    REQUIRE(rf && rf->type == HT_F32 && rf->ne[0] == hd / 2, "fixture rope_freqs");
    int rot = 0;
    for (uint32_t i = 0; i < hd / 2; i++) rot += ((const float *)rf->data)[i] == 1.0f;

    char path[512], name[256], key[128];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *cf = fopen(path, "w");
    REQUIRE(cf, "cannot write %s", path);
    fprintf(cf, "{\"architectures\": [\"Gemma4ForConditionalGeneration\"], \"model_type\": \"gemma4\", \"vision_config\": {},\n"
                " \"text_config\": {\"model_type\": \"gemma4_text\", \"hidden_size\": %u, \"num_hidden_layers\": %u,"
                " \"num_attention_heads\": %u, \"num_key_value_heads\": %lld, \"num_global_key_value_heads\": %lld,\n"
                "  \"head_dim\": %u, \"global_head_dim\": %u, \"intermediate_size\": %lld, \"use_double_wide_mlp\": %s,"
                " \"num_kv_shared_layers\": %u, \"hidden_size_per_layer_input\": %u, \"max_position_embeddings\": %u,\n"
                "  \"rms_norm_eps\": %.9g, \"sliding_window\": %u, \"final_logit_softcapping\": %.9g, \"tie_word_embeddings\": true,\n",
            fixture_u32(g, a, "embedding_length"), L, fixture_u32(g, a, "attention.head_count"), (long long)kv_swa,
            (long long)kv_full, hd_swa, hd, (long long)ff_first, ff_last != ff_first ? "true" : "false", shared, ple,
            fixture_u32(g, a, "context_length"), (double)f32_or(g, "gemma4.attention.layer_norm_rms_epsilon", 1e-6f),
            fixture_u32(g, a, "attention.sliding_window"), (double)f32_or(g, "gemma4.final_logit_softcapping", 0));
    if (ne)
        fprintf(cf, "  \"enable_moe_block\": true, \"num_experts\": %u, \"top_k_experts\": %u, \"moe_intermediate_size\": %u,\n", ne, nu, fexp);
    fprintf(cf, "  \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"proportional\", \"rope_theta\": %.9g,"
                " \"partial_rotary_factor\": %.9g}, \"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": %.9g}},\n"
                "  \"layer_types\": [",
            (double)f32_or(g, "gemma4.rope.freq_base", 1e6f), 2.0 * rot / hd, (double)f32_or(g, "gemma4.rope.freq_base_swa", 1e4f));
    for (uint32_t il = 0; il < L - bad_layer_types; il++)
        fprintf(cf, "%s\"%s\"", il ? ", " : "", pat->arr_data[il] ? "sliding_attention" : "full_attention");
    fprintf(cf, "]}}\n");
    fclose(cf);

    st_out o;
    st_begin(&o);
    const float junk[3] = { 1, 2, 3 };
    const int64_t jshape[1] = { 3 };
    st_add_shape(&o, "model.vision_tower.encoder.layers.0.input_layernorm.weight", 1, jshape, junk);   /* left unread */
    for (size_t i = 0; i < sizeof GLOBALS / sizeof GLOBALS[0]; i++) {
        const gguf_tensor *t = gguf_find_tensor(g, GLOBALS[i].gguf);
        if (!t) continue;   /* no per-layer embeddings */
        snprintf(name, sizeof name, "model.language_model.%s", GLOBALS[i].hf);
        put(&o, t, name);
    }
    const gguf_tensor *out = gguf_find_tensor(g, "output.weight");
    if (out) put(&o, out, "lm_head.weight");
    for (uint32_t il = 0; il < L; il++)
        for (size_t i = 0; i < sizeof LAYER / sizeof LAYER[0]; i++) {
            snprintf(key, sizeof key, "blk.%u.%s", il, LAYER[i].gguf);
            const gguf_tensor *t = gguf_find_tensor(g, key);
            if (!t) continue;
            snprintf(name, sizeof name, "model.language_model.layers.%u.%s", il, LAYER[i].hf);
            put(&o, t, name);
        }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_finish(&o, path);
    gguf_close(g);
}

static void check(const char *tmp, const char *fixture, double bar) {
    char gguf[256], golden[256], dir[300];
    snprintf(gguf, sizeof gguf, "data/models/%s.gguf", fixture);
    snprintf(golden, sizeof golden, "data/golden/%s.golden", fixture);
    snprintf(dir, sizeof dir, "%s/%s-hf", tmp, fixture);
    REQUIRE(!mkdir(dir, 0755), "mkdir %s", dir);
    write_hf(gguf, dir, false);
    hearth_model *hf = hf_check_logits(dir, gguf, golden, fixture, 0, bar);
    /* back to GGUF: every tensor of the fixture comes out byte for byte (stacks, rope_freqs) */
    hf_check_to_gguf(hf, gguf, tmp, fixture);
}

int main(void) {
    char tmp[] = "/tmp/hearth-hf-gemma4-XXXXXX", dir[300], cmd[300];
    hearth_model *m;
    hearth_err err;
    REQUIRE(mkdtemp(tmp), "mkdtemp");
    check(tmp, "gemma4", 1.5e-2);   /* test_golden's bar for this fixture (the reference's F16 GELU table) */
    check(tmp, "gemma4-moe", 5e-3);
    snprintf(dir, sizeof dir, "%s/bad", tmp);
    REQUIRE(!mkdir(dir, 0755), "mkdir %s", dir);
    write_hf("data/models/gemma4.gguf", dir, true);
    REQUIRE(hearth_model_load(dir, &m, &err), "%s loaded with a short layer_types", dir);
    printf("short layer_types: %s\n", err.msg);
    CHECK(strstr(err.msg, "layer_types") && !strchr(err.msg, '\n'), "short layer_types: '%s'", err.msg);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0, "%s", cmd);
    TEST_DONE();
}
