/* test_hf_moe.c — Hugging Face directories of the mixture-of-experts families, written here from the GGUF
 * fixtures the way Hugging Face stores them: one tensor per expert under the HF names (Qwen3-MoE's
 * mlp.experts.E.{gate,up,down}_proj, Mixtral's block_sparse_moe.experts.E.w1/w3/w2 and their routers), the
 * experts of a layer interleaved in the file so that no stack is contiguous, and Mixtral's q/k rows
 * un-permuted to HF's rotate-half order (the inverse of the GGUF converter's permutation). Each directory
 * loads, gives its GGUF twin's logits, meets the golden's F32 rule, and quantizes back to F32 GGUF tensors
 * identical to the fixture's (stacks written row for row). A directory with an expert missing is refused. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/gguf.h"
#include "golden_check.h"
#include "hf_check.h"
#include "hearth.h"
#include "convert/quantize.h"
#include "st_write.h"
#include "testutil.h"

typedef struct { const char *gguf, *hf; } rename_t;

static const rename_t GLOBALS[] = { { "token_embd.weight", "model.embed_tokens.weight" },
                                    { "output_norm.weight", "model.norm.weight" }, { "output.weight", "lm_head.weight" } };
static const rename_t LAYER[] = {
    { "attn_norm.weight", "input_layernorm.weight" }, { "attn_q.weight", "self_attn.q_proj.weight" },
    { "attn_k.weight", "self_attn.k_proj.weight" }, { "attn_v.weight", "self_attn.v_proj.weight" },
    { "attn_output.weight", "self_attn.o_proj.weight" }, { "attn_q_norm.weight", "self_attn.q_norm.weight" },
    { "attn_k_norm.weight", "self_attn.k_norm.weight" }, { "ffn_norm.weight", "post_attention_layernorm.weight" } };

typedef struct {
    const char *arch, *hf_arch, *router;   /* router: the HF name of ffn_gate_inp after the layer prefix */
    const char *experts, *gate, *up, *down;
    bool permute_qk;
} family;

static const family QWEN3MOE = { "qwen3moe", "Qwen3MoeForCausalLM", "mlp.gate.weight", "mlp.experts",
                                 "gate_proj", "up_proj", "down_proj", false };
static const family MIXTRAL = { "llama", "MixtralForCausalLM", "block_sparse_moe.gate.weight", "block_sparse_moe.experts",
                                "w1", "w3", "w2", true };

/* A GGUF tensor's rows [r0, r0 + rows) as an HF tensor (F32 fixtures: the data is the floats). With heads > 0,
 * rows in GGUF's interleaved rope order go back to HF's rotate-half order. */
static void put(st_out *o, const gguf_tensor *t, const char *name, int64_t r0, int64_t rows, int heads) {
    REQUIRE(t->type == HT_F32, "%s: the fixture should be F32", t->name);
    const int64_t cols = (int64_t)t->ne[0];
    const float *src = (const float *)t->data + r0 * cols;
    float *x = malloc((size_t)(rows * cols) * sizeof(float));
    REQUIRE(x, "out of memory");
    for (int64_t r = 0; r < rows; r++) {
        int64_t dst = r;
        if (heads > 0) {
            int64_t hd = rows / heads, h = r / hd, i = r % hd;
            dst = h * hd + (i % 2) * (hd / 2) + i / 2;
        }
        memcpy(x + dst * cols, src + r * cols, (size_t)cols * sizeof(float));
    }
    st_add(o, name, t->n_dims == 1 ? 0 : rows, cols, x);
    free(x);
}

static const gguf_tensor *need(const gguf_file *g, const char *name) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    REQUIRE(t, "fixture has no %s", name);
    return t;
}

/* Writes dir/config.json and dir/model.safetensors from the GGUF fixture; drop_expert >= 0 leaves that expert
 * of layer 0's gate stack out. */
static void write_hf(const family *f, const char *gguf_path, const char *dir, int drop_expert) {
    hearth_err err;
    gguf_file *g;
    REQUIRE(!gguf_open(gguf_path, &g, &err), "%s", err.msg);
    const char *a = f->arch;
    uint32_t L = fixture_u32(g, a, "block_count"), NE = fixture_u32(g, a, "expert_count"), H = fixture_u32(g, a, "attention.head_count");
    uint32_t HKV = fixture_u32(g, a, "attention.head_count_kv");
    float eps, theta;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a);
    REQUIRE(gguf_get_f32(g, key, &eps), "no %s", key);
    snprintf(key, sizeof key, "%s.rope.freq_base", a);
    REQUIRE(gguf_get_f32(g, key, &theta), "no %s", key);
    const gguf_tensor *emb = need(g, "token_embd.weight");

    char path[512], name[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *cf = fopen(path, "w");
    REQUIRE(cf, "cannot write %s", path);
    fprintf(cf, "{\"architectures\": [\"%s\"], \"hidden_size\": %u, \"num_hidden_layers\": %u, \"num_attention_heads\": %u,\n"
                " \"num_key_value_heads\": %u, \"intermediate_size\": %u, \"max_position_embeddings\": %u, \"rms_norm_eps\": %g,\n"
                " \"rope_theta\": %g, \"vocab_size\": %llu, \"num_experts_per_tok\": %u, \"tie_word_embeddings\": false",
            f->hf_arch, fixture_u32(g, a, "embedding_length"), L, H, HKV, fixture_u32(g, a, "feed_forward_length"), fixture_u32(g, a, "context_length"),
            (double)eps, (double)theta, (unsigned long long)emb->ne[1], fixture_u32(g, a, "expert_used_count"));
    if (!strcmp(a, "qwen3moe"))
        fprintf(cf, ", \"num_experts\": %u, \"moe_intermediate_size\": %u, \"head_dim\": %u, \"norm_topk_prob\": true,"
                    " \"decoder_sparse_step\": 1, \"mlp_only_layers\": []}\n",
                NE, fixture_u32(g, a, "expert_feed_forward_length"), fixture_u32(g, a, "attention.key_length"));
    else
        fprintf(cf, ", \"num_local_experts\": %u}\n", NE);
    fclose(cf);

    st_out o;
    st_begin(&o);
    for (size_t i = 0; i < sizeof GLOBALS / sizeof GLOBALS[0]; i++) {
        const gguf_tensor *t = need(g, GLOBALS[i].gguf);
        put(&o, t, GLOBALS[i].hf, 0, (int64_t)t->ne[1], 0);
    }
    for (uint32_t il = 0; il < L; il++) {
        for (size_t i = 0; i < sizeof LAYER / sizeof LAYER[0]; i++) {
            snprintf(key, sizeof key, "blk.%u.%s", il, LAYER[i].gguf);
            const gguf_tensor *t = gguf_find_tensor(g, key);
            if (!t) continue;   /* q/k norms: Qwen3-MoE only */
            int heads = !f->permute_qk ? 0 : strstr(key, "attn_q.") ? (int)H : strstr(key, "attn_k.") ? (int)HKV : 0;
            snprintf(name, sizeof name, "model.layers.%u.%s", il, LAYER[i].hf);
            put(&o, t, name, 0, (int64_t)t->ne[1], heads);
        }
        snprintf(key, sizeof key, "blk.%u.ffn_gate_inp.weight", il);
        snprintf(name, sizeof name, "model.layers.%u.%s", il, f->router);
        put(&o, need(g, key), name, 0, NE, 0);
        /* expert by expert, each one's three matrices together: no stack is contiguous in the file */
        const char *kinds[3][2] = { { "ffn_gate_exps", f->gate }, { "ffn_up_exps", f->up }, { "ffn_down_exps", f->down } };
        for (uint32_t e = 0; e < NE; e++)
            for (int k = 0; k < 3; k++) {
                if (il == 0 && k == 0 && (int)e == drop_expert) continue;
                snprintf(key, sizeof key, "blk.%u.%s.weight", il, kinds[k][0]);
                const gguf_tensor *t = need(g, key);
                snprintf(name, sizeof name, "model.layers.%u.%s.%u.%s.weight", il, f->experts, e, kinds[k][1]);
                put(&o, t, name, (int64_t)e * (int64_t)t->ne[1], (int64_t)t->ne[1], 0);
            }
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_finish(&o, path);
    gguf_close(g);
}

static void check_family(const family *f, const char *fixture, const char *tmp) {
    char gguf[256], dir[256], golden[256];
    hearth_err err;
    snprintf(gguf, sizeof gguf, "data/models/%s.gguf", fixture);
    snprintf(golden, sizeof golden, "data/golden/%s.golden", fixture);
    snprintf(dir, sizeof dir, "%s/%s-hf", tmp, fixture);
    REQUIRE(!mkdir(dir, 0755), "mkdir %s", dir);
    write_hf(f, gguf, dir, -1);

    hearth_model *hf = hf_check_logits(dir, gguf, golden, fixture, 1e-5, 5e-3);
    /* back to GGUF: the stacks are rebuilt row for row (and Mixtral's q/k permuted back) */
    hf_check_to_gguf(hf, gguf, tmp, fixture);

    /* an expert missing from a stack: one line naming it */
    snprintf(dir, sizeof dir, "%s/%s-hf-gap", tmp, fixture);
    REQUIRE(!mkdir(dir, 0755), "mkdir %s", dir);
    write_hf(f, gguf, dir, 1);
    REQUIRE(hearth_model_load(dir, &hf, &err), "%s loaded without expert 1", dir);
    CHECK(strstr(err.msg, "expert 1 missing") && !strchr(err.msg, '\n'), "missing expert: '%s'", err.msg);
}

int main(void) {
    char tmp[] = "/tmp/hearth-hf-moe-XXXXXX", cmd[300];
    REQUIRE(mkdtemp(tmp), "mkdtemp");
    check_family(&QWEN3MOE, "qwen3moe", tmp);
    check_family(&MIXTRAL, "mixtral", tmp);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0, "%s", cmd);
    TEST_DONE();
}
