/* test_hf_deepseek2.c — DeepSeek Hugging Face directories (DeepseekV2ForCausalLM from deepseek2.gguf: q_proj, softmax
 * routing; DeepseekV3ForCausalLM from deepseek2-v3.gguf: q through q_a_proj / q_a_layernorm / q_b_proj, sigmoid
 * routing with e_score_correction_bias, expert groups, renormalized and scaled weights), written here from the GGUF
 * fixtures the way Hugging Face stores them: kv_b_proj whole ([heads * (nope + v), kv_lora_rank], the inverse of the
 * converter's split into attn_k_b / attn_v_b), one tensor per routed expert, shared_experts, first_k_dense_replace
 * dense layers, a multi-token prediction layer past the last (left unread), and config.json's MLA sizes, routing
 * hparams and YaRN (mscale_all_dim). Each directory gives its GGUF twin's logits bit for bit (the same F32
 * weights), meets the golden's F32 rule and quantizes back to an F32 GGUF whose tensors are the fixture's byte
 * for byte (the split undone exactly); a kv_b_proj of the wrong shape and a missing tensor are refused in one line. */
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

enum { OK, BAD_KV_B, NO_KV_A_NORM };

typedef struct { const char *gguf, *hf; } rename_t;

static const rename_t LAYER[] = {
    { "attn_norm.weight", "input_layernorm.weight" }, { "attn_q.weight", "self_attn.q_proj.weight" },
    { "attn_q_a.weight", "self_attn.q_a_proj.weight" }, { "attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight" },
    { "attn_q_b.weight", "self_attn.q_b_proj.weight" }, { "attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight" },
    { "attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight" }, { "attn_output.weight", "self_attn.o_proj.weight" },
    { "ffn_norm.weight", "post_attention_layernorm.weight" }, { "ffn_gate.weight", "mlp.gate_proj.weight" },
    { "ffn_up.weight", "mlp.up_proj.weight" }, { "ffn_down.weight", "mlp.down_proj.weight" },
    { "ffn_gate_inp.weight", "mlp.gate.weight" }, { "exp_probs_b.bias", "mlp.gate.e_score_correction_bias" },
    { "ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight" },
    { "ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight" },
    { "ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight" } };

static uint32_t u32_or(const gguf_file *g, const char *suffix, uint32_t dflt) {
    char key[128];
    uint32_t v = dflt;
    snprintf(key, sizeof key, "deepseek2.%s", suffix);
    gguf_get_u32(g, key, &v);
    return v;
}

static float f32_of(const gguf_file *g, const char *suffix) {
    char key[128];
    float v;
    snprintf(key, sizeof key, "deepseek2.%s", suffix);
    REQUIRE(gguf_get_f32(g, key, &v), "fixture has no %s", key);
    return v;
}

/* rows [r0, r0 + rows) of an F32 fixture tensor (all of it: r0 0, rows ne[1]) as an HF tensor */
static void put(st_out *o, const gguf_tensor *t, const char *name, int64_t r0, int64_t rows) {
    REQUIRE(t->type == HT_F32, "%s: the fixture should be F32", t->name);
    const int64_t cols = (int64_t)t->ne[0];
    st_add(o, name, t->n_dims == 1 ? 0 : rows, cols, (const float *)t->data + r0 * cols);
}

static void write_hf(const char *gguf_path, const char *dir, const char *hf_arch, int flaw) {
    hearth_err err;
    gguf_file *g;
    REQUIRE(!gguf_open(gguf_path, &g, &err), "%s", err.msg);
    const char *a = "deepseek2";
    const uint32_t L = fixture_u32(g, a, "block_count"), H = fixture_u32(g, a, "attention.head_count");
    const uint32_t rope = fixture_u32(g, a, "rope.dimension_count"), kmla = fixture_u32(g, a, "attention.key_length_mla");
    const uint32_t vmla = fixture_u32(g, a, "attention.value_length_mla"), R = fixture_u32(g, a, "attention.kv_lora_rank");
    const uint32_t NE = fixture_u32(g, a, "expert_count"), ql = u32_or(g, "attention.q_lora_rank", 0);
    bool norm = false;
    gguf_get_bool(g, "deepseek2.expert_weights_norm", &norm);
    float scale = 1, logm = 0;
    gguf_get_f32(g, "deepseek2.expert_weights_scale", &scale);
    gguf_get_f32(g, "deepseek2.rope.scaling.yarn_log_multiplier", &logm);
    char path[512], name[256], key[128], qlora[32] = "null";
    if (ql) snprintf(qlora, sizeof qlora, "%u", ql);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *cf = fopen(path, "w");
    REQUIRE(cf, "cannot write %s", path);
    fprintf(cf, "{\"architectures\": [\"%s\"], \"hidden_size\": %u, \"num_hidden_layers\": %u, \"num_attention_heads\": %u,\n"
                " \"num_key_value_heads\": %u, \"intermediate_size\": %u, \"moe_intermediate_size\": %u, \"max_position_embeddings\": %u,\n"
                " \"rms_norm_eps\": %.9g, \"rope_theta\": %.9g, \"kv_lora_rank\": %u, \"q_lora_rank\": %s, \"qk_rope_head_dim\": %u,\n"
                " \"qk_nope_head_dim\": %u, \"v_head_dim\": %u, \"n_routed_experts\": %u, \"num_experts_per_tok\": %u,\n"
                " \"n_shared_experts\": %u, \"first_k_dense_replace\": %u, \"routed_scaling_factor\": %.9g, \"norm_topk_prob\": %s,\n"
                " \"n_group\": %u, \"topk_group\": %u, \"scoring_func\": \"%s\", \"tie_word_embeddings\": false,\n"
                " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": %.9g, \"original_max_position_embeddings\": %u, \"beta_fast\": 32,"
                " \"beta_slow\": 1, \"mscale\": %.17g, \"mscale_all_dim\": %.17g}}\n",
            hf_arch, fixture_u32(g, a, "embedding_length"), L, H, H, fixture_u32(g, a, "feed_forward_length"),
            fixture_u32(g, a, "expert_feed_forward_length"), fixture_u32(g, a, "context_length"),
            (double)f32_of(g, "attention.layer_norm_rms_epsilon"), (double)f32_of(g, "rope.freq_base"), R, qlora, rope, kmla - rope,
            vmla, NE, fixture_u32(g, a, "expert_used_count"), u32_or(g, "expert_shared_count", 0),
            fixture_u32(g, a, "leading_dense_block_count"), (double)scale, norm ? "true" : "false", u32_or(g, "expert_group_count", 1),
            u32_or(g, "expert_group_used_count", 1), u32_or(g, "expert_gating_func", 1) == 2 ? "sigmoid" : "softmax",
            (double)f32_of(g, "rope.scaling.factor"), fixture_u32(g, a, "rope.scaling.original_context_length"),
            (double)logm / 0.1, (double)logm / 0.1);
    fclose(cf);

    st_out o;
    st_begin(&o);
    const rename_t globals[] = { { "token_embd.weight", "model.embed_tokens.weight" }, { "output_norm.weight", "model.norm.weight" },
                                 { "output.weight", "lm_head.weight" } };
    for (size_t i = 0; i < 3; i++) {
        const gguf_tensor *t = gguf_find_tensor(g, globals[i].gguf);
        REQUIRE(t, "fixture has no %s", globals[i].gguf);
        put(&o, t, globals[i].hf, 0, (int64_t)t->ne[1]);
    }
    for (uint32_t il = 0; il < L; il++) {
        for (size_t i = 0; i < sizeof LAYER / sizeof LAYER[0]; i++) {
            snprintf(key, sizeof key, "blk.%u.%s", il, LAYER[i].gguf);
            const gguf_tensor *t = gguf_find_tensor(g, key);
            if (!t || (flaw == NO_KV_A_NORM && il == 2 && strstr(key, "attn_kv_a_norm"))) continue;
            snprintf(name, sizeof name, "model.layers.%u.%s", il, LAYER[i].hf);
            put(&o, t, name, 0, (int64_t)t->ne[1]);
        }
        /* kv_b_proj: per head nope rows of K (attn_k_b transposed back) then v rows of V */
        snprintf(key, sizeof key, "blk.%u.attn_k_b.weight", il);
        const gguf_tensor *kb = gguf_find_tensor(g, key);
        snprintf(key, sizeof key, "blk.%u.attn_v_b.weight", il);
        const gguf_tensor *vb = gguf_find_tensor(g, key);
        REQUIRE(kb && vb && kb->type == HT_F32 && vb->type == HT_F32, "fixture layer %u: attn_k_b / attn_v_b F32", il);
        const uint32_t nope = kmla - rope, rows = H * (nope + vmla) - (flaw == BAD_KV_B && il == 1);
        float *kv = calloc((size_t)H * (nope + vmla) * R, sizeof(float));
        REQUIRE(kv, "out of memory");
        for (uint32_t h = 0; h < H; h++) {
            float *head = kv + (size_t)h * (nope + vmla) * R;
            const float *k = (const float *)kb->data + (size_t)h * R * nope, *v = (const float *)vb->data + (size_t)h * vmla * R;
            for (uint32_t i = 0; i < nope; i++)
                for (uint32_t r = 0; r < R; r++) head[(size_t)i * R + r] = k[(size_t)r * nope + i];
            memcpy(head + (size_t)nope * R, v, (size_t)vmla * R * sizeof(float));
        }
        snprintf(name, sizeof name, "model.layers.%u.self_attn.kv_b_proj.weight", il);
        st_add(&o, name, rows, R, kv);
        free(kv);
        const char *kinds[3][2] = { { "ffn_gate_exps", "gate_proj" }, { "ffn_up_exps", "up_proj" }, { "ffn_down_exps", "down_proj" } };
        for (uint32_t e = 0; e < NE; e++)
            for (int k = 0; k < 3; k++) {
                snprintf(key, sizeof key, "blk.%u.%s.weight", il, kinds[k][0]);
                const gguf_tensor *t = gguf_find_tensor(g, key);
                if (!t) continue;   /* a dense layer */
                snprintf(name, sizeof name, "model.layers.%u.mlp.experts.%u.%s.weight", il, e, kinds[k][1]);
                put(&o, t, name, (int64_t)e * (int64_t)t->ne[1], (int64_t)t->ne[1]);
            }
    }
    /* a multi-token prediction layer after the last (V3 ships one): not the model's, never read */
    const float junk[2] = { 1, 2 };
    snprintf(name, sizeof name, "model.layers.%u.self_attn.kv_b_proj.weight", L);
    st_add(&o, name, 1, 2, junk);
    snprintf(name, sizeof name, "model.layers.%u.eh_proj.weight", L);
    st_add(&o, name, 1, 2, junk);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_finish(&o, path);
    gguf_close(g);
}

static void check(const char *fixture, const char *hf_arch, const char *tmp) {
    char gguf[256], dir[300], golden[256];
    hearth_err err;
    snprintf(gguf, sizeof gguf, "data/models/%s.gguf", fixture);
    snprintf(golden, sizeof golden, "data/golden/%s.golden", fixture);
    snprintf(dir, sizeof dir, "%s/%s-hf", tmp, fixture);
    REQUIRE(!mkdir(dir, 0755), "mkdir %s", dir);
    write_hf(gguf, dir, hf_arch, OK);

    hearth_model *hf = hf_check_logits(dir, gguf, golden, fixture, 0, 5e-3);
    /* back to GGUF: every tensor of the fixture comes out byte for byte (kv_b_proj split, stacks, rope_freqs) */
    hf_check_to_gguf(hf, gguf, tmp, fixture);

    const struct { int flaw; const char *want; } bad[] = { { BAD_KV_B, "kv_b_proj.weight': shape should be" },
                                                           { NO_KV_A_NORM, "blk.2.attn_kv_a_norm.weight" } };
    for (int i = 0; i < 2; i++) {
        snprintf(dir, sizeof dir, "%s/%s-flaw%d", tmp, fixture, bad[i].flaw);
        REQUIRE(!mkdir(dir, 0755), "mkdir %s", dir);
        write_hf(gguf, dir, hf_arch, bad[i].flaw);
        REQUIRE(hearth_model_load(dir, &hf, &err), "%s loaded despite flaw %d", dir, bad[i].flaw);
        printf("  flaw %d: %s\n", bad[i].flaw, err.msg);
        CHECK(strstr(err.msg, bad[i].want) && !strchr(err.msg, '\n'), "flaw %d: '%s' should say '%s'", bad[i].flaw, err.msg, bad[i].want);
    }
}

int main(void) {
    char tmp[] = "/tmp/hearth-hf-deepseek2-XXXXXX", cmd[300];
    REQUIRE(mkdtemp(tmp), "mkdtemp");
    check("deepseek2", "DeepseekV2ForCausalLM", tmp);
    check("deepseek2-v3", "DeepseekV3ForCausalLM", tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0, "%s", cmd);
    TEST_DONE();
}
