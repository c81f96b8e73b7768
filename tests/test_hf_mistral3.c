/* test_hf_mistral3.c — Ministral 3 Hugging Face directories written here from the mistral3 fixture: the published
 * Mistral3ForConditionalGeneration form (config in text_config with rope_parameters: YaRN, mscale_all_dim,
 * llama_4_scaling_beta; the text tower under model.language_model., lm_head.weight at the top, a vision tower and
 * projector beside it that must be left unread) and the flat Ministral3ForCausalLM form (model.layers.), both
 * with q/k rows in HF's rotate-half order (the inverse of the GGUF converter's permutation). Each gives its GGUF
 * twin's logits and meets the golden's F32 rule; a q_proj of the wrong shape and an unsupported rope type are
 * refused in one line. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/gguf.h"
#include "quant/quant.h"
#include "golden_check.h"
#include "hf_check.h"
#include "hearth.h"
#include "st_write.h"
#include "testutil.h"

enum { OK, SHORT_Q, BAD_ROPE };

typedef struct { const char *gguf, *hf; } rename_t;

static const rename_t LAYER[] = {
    { "attn_norm.weight", "input_layernorm.weight" }, { "attn_q.weight", "self_attn.q_proj.weight" },
    { "attn_k.weight", "self_attn.k_proj.weight" }, { "attn_v.weight", "self_attn.v_proj.weight" },
    { "attn_output.weight", "self_attn.o_proj.weight" }, { "ffn_norm.weight", "post_attention_layernorm.weight" },
    { "ffn_gate.weight", "mlp.gate_proj.weight" }, { "ffn_up.weight", "mlp.up_proj.weight" },
    { "ffn_down.weight", "mlp.down_proj.weight" } };

static float f32_of(const gguf_file *g, const char *key) {
    float v;
    REQUIRE(gguf_get_f32(g, key, &v), "fixture has no %s", key);
    return v;
}

/* A fixture tensor's first `rows` rows as an HF tensor; with heads > 0 each head's rows go from GGUF's interleaved
 * rope order back to HF's rotate-half order. */
static void put(st_out *o, const gguf_tensor *t, const char *name, int64_t rows, int heads) {
    REQUIRE(t->type == HT_F32, "%s: the fixture should be F32", t->name);
    const int64_t cols = (int64_t)t->ne[0];
    const float *src = t->data;
    float *x = malloc((size_t)((int64_t)t->ne[1] * cols) * sizeof(float));
    REQUIRE(x, "out of memory");
    for (int64_t r = 0; r < (int64_t)t->ne[1]; r++) {
        int64_t dst = r;
        if (heads > 0) {
            const int64_t hd = (int64_t)t->ne[1] / heads, h = r / hd, i = r % hd;
            dst = h * hd + (i % 2) * (hd / 2) + i / 2;
        }
        memcpy(x + dst * cols, src + r * cols, (size_t)cols * sizeof(float));
    }
    st_add(o, name, t->n_dims == 1 ? 0 : rows, cols, x);
    free(x);
}

static void write_hf(const char *gguf_path, const char *dir, bool multimodal, int flaw) {
    hearth_err err;
    gguf_file *g;
    REQUIRE(!gguf_open(gguf_path, &g, &err), "%s", err.msg);
    const char *a = "mistral3";
    const uint32_t L = fixture_u32(g, a, "block_count"), H = fixture_u32(g, a, "attention.head_count");
    const uint32_t HKV = fixture_u32(g, a, "attention.head_count_kv");
    const gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
    REQUIRE(emb, "fixture has no token_embd");
    char path[512], name[256], key[128], text[2048];
    snprintf(text, sizeof text,
             "{\"model_type\": \"ministral3\", \"hidden_size\": %u, \"num_hidden_layers\": %u, \"num_attention_heads\": %u,"
             " \"num_key_value_heads\": %u, \"head_dim\": %u, \"intermediate_size\": %u, \"max_position_embeddings\": %u,"
             " \"rms_norm_eps\": %.9g, \"vocab_size\": %llu, \"tie_word_embeddings\": false,"
             " \"rope_parameters\": {\"rope_type\": \"%s\", \"rope_theta\": %.9g, \"factor\": %.9g, \"beta_fast\": 32.0,"
             " \"beta_slow\": 1.0, \"mscale\": 1.0, \"mscale_all_dim\": %.9g, \"original_max_position_embeddings\": %u,"
             " \"llama_4_scaling_beta\": %.9g}}",
             fixture_u32(g, a, "embedding_length"), L, H, HKV, (unsigned)(emb->ne[0] / H),
             fixture_u32(g, a, "feed_forward_length"), fixture_u32(g, a, "context_length"),
             (double)f32_of(g, "mistral3.attention.layer_norm_rms_epsilon"), (unsigned long long)emb->ne[1],
             flaw == BAD_ROPE ? "longrope" : "yarn", (double)f32_of(g, "mistral3.rope.freq_base"),
             (double)f32_of(g, "mistral3.rope.scaling.factor"), (double)f32_of(g, "mistral3.rope.scaling.yarn_log_multiplier"),
             fixture_u32(g, a, "rope.scaling.original_context_length"), (double)f32_of(g, "mistral3.attention.temperature_scale"));
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *cf = fopen(path, "w");
    REQUIRE(cf, "cannot write %s", path);
    if (multimodal)
        fprintf(cf, "{\"architectures\": [\"Mistral3ForConditionalGeneration\"], \"model_type\": \"mistral3\",\n"
                    " \"vision_config\": {\"hidden_size\": 16}, \"text_config\": %s}\n", text);
    else {
        text[strlen(text) - 1] = '\0';
        fprintf(cf, "%s, \"architectures\": [\"Ministral3ForCausalLM\"]}\n", text);
    }
    fclose(cf);

    const char *pre = multimodal ? "model.language_model." : "model.";
    st_out o;
    st_begin(&o);
    if (multimodal) {   /* not the text tower's: must be left unread (their shapes fit nothing) */
        const float junk[3] = { 1, 2, 3 };
        const int64_t shape[1] = { 3 };
        st_add_shape(&o, "model.vision_tower.transformer.layers.0.attention_norm.weight", 1, shape, junk);
        st_add_shape(&o, "model.multi_modal_projector.norm.weight", 1, shape, junk);
    }
    const gguf_tensor *t;
    snprintf(name, sizeof name, "%sembed_tokens.weight", pre);
    put(&o, emb, name, (int64_t)emb->ne[1], 0);
    snprintf(name, sizeof name, "%snorm.weight", pre);
    REQUIRE(t = gguf_find_tensor(g, "output_norm.weight"), "output_norm");
    put(&o, t, name, 1, 0);
    REQUIRE(t = gguf_find_tensor(g, "output.weight"), "output");
    put(&o, t, "lm_head.weight", (int64_t)t->ne[1], 0);
    for (uint32_t il = 0; il < L; il++)
        for (size_t i = 0; i < sizeof LAYER / sizeof LAYER[0]; i++) {
            snprintf(key, sizeof key, "blk.%u.%s", il, LAYER[i].gguf);
            REQUIRE(t = gguf_find_tensor(g, key), "fixture has no %s", key);
            const int heads = strstr(key, "attn_q.") ? (int)H : strstr(key, "attn_k.") ? (int)HKV : 0;
            snprintf(name, sizeof name, "%slayers.%u.%s", pre, il, LAYER[i].hf);
            put(&o, t, name, (int64_t)t->ne[1] - (flaw == SHORT_Q && heads == (int)H && il == 1), heads);
        }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_finish(&o, path);
    gguf_close(g);
}

static void check(const char *tmp, bool multimodal) {
    const char *gguf = "data/models/mistral3.gguf";
    char dir[300];
    snprintf(dir, sizeof dir, "%s/hf-%d", tmp, multimodal);
    REQUIRE(!mkdir(dir, 0755), "mkdir %s", dir);
    write_hf(gguf, dir, multimodal, OK);
    /* rotate-half q/k under NEOX rope: the same products, summed over the head in another order */
    hearth_model_free(hf_check_logits(dir, gguf, "data/golden/mistral3.golden",
                                      multimodal ? "mistral3 (Mistral3ForConditionalGeneration)" : "mistral3 (Ministral3ForCausalLM)", 1e-5, 5e-3));
}

static void check_refused(const char *tmp, int flaw, const char *want) {
    char dir[300];
    hearth_model *m;
    hearth_err err;
    snprintf(dir, sizeof dir, "%s/flaw%d", tmp, flaw);
    REQUIRE(!mkdir(dir, 0755), "mkdir %s", dir);
    write_hf("data/models/mistral3.gguf", dir, true, flaw);
    REQUIRE(hearth_model_load(dir, &m, &err), "%s loaded despite flaw %d", dir, flaw);
    printf("flaw %d: %s\n", flaw, err.msg);
    CHECK(strstr(err.msg, want) && !strchr(err.msg, '\n'), "flaw %d: '%s' should say '%s'", flaw, err.msg, want);
}

int main(void) {
    char tmp[] = "/tmp/hearth-hf-mistral3-XXXXXX", cmd[300];
    REQUIRE(mkdtemp(tmp), "mkdtemp");
    check(tmp, true);
    check(tmp, false);
    check_refused(tmp, SHORT_Q, "blk.1.attn_q.weight");
    check_refused(tmp, BAD_ROPE, "'longrope' is not supported");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0, "%s", cmd);
    TEST_DONE();
}
