/* test_hf_gptoss.c — a gpt-oss Hugging Face directory (GptOssForCausalLM), written here from the MXFP4 GGUF fixture
 * the way the published checkpoint stores it: each layer's experts as whole stacks, MXFP4 as uint8
 * mlp.experts.*_blocks [experts, rows, blocks, 16] (element 2j in the low nibble of byte j) + *_scales [experts,
 * rows, blocks] (E8M0), gate and up rows interleaved in gate_up_proj (and its bias), self_attn.sinks, the router as
 * mlp.router, YaRN in config.json's rope_scaling and the alternating layer_types; and from the F32 fixture the
 * unquantized form ([experts, in, out] gate_up_proj / down_proj). Each directory must give its GGUF's logits bit for
 * bit (the same weight bits) and the golden's argmax; directories with a scales tensor
 * missing, scales of the wrong dtype or shape, or a layer_types pattern the model cannot run are refused in one line. */
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

enum { OK, NO_SCALES, F32_SCALES, SHORT_SCALES, BAD_LAYER_TYPES };

static const gguf_tensor *need(const gguf_file *g, const char *name) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    REQUIRE(t, "fixture has no %s", name);
    return t;
}

/* An F32 fixture tensor under its HF name, in its own shape (a 2-D GGUF tensor [ne0, ne1] is HF [ne1, ne0]). */
static void put_f32(st_out *o, const gguf_file *g, const char *gguf_name, const char *hf) {
    const gguf_tensor *t = need(g, gguf_name);
    REQUIRE(t->type == HT_F32, "%s: F32 expected", gguf_name);
    const int64_t shape[2] = { (int64_t)t->ne[1], (int64_t)t->ne[0] };
    if (t->n_dims == 1) st_add_shape(o, hf, 1, shape + 1, t->data);
    else st_add_shape(o, hf, 2, shape, t->data);
}

/* Expert rows of the GGUF's MXFP4 stacks as HF's blocks + scales: with two stacks (gate, up) their rows alternate.
 * flaw changes the scales as the refusal cases want. */
static void put_mxfp4(st_out *o, const gguf_tensor *const *stacks, int n_stacks, const char *hf_base, int flaw) {
    const gguf_tensor *t0 = stacks[0];
    REQUIRE(t0->type == HT_MXFP4, "%s: MXFP4 expected", t0->name);
    const int64_t NE = (int64_t)t0->ne[2], rows = (int64_t)t0->ne[1], nb = (int64_t)t0->ne[0] / QK_MXFP4, R = rows * n_stacks;
    uint8_t *q = malloc((size_t)(NE * R * nb * 16)), *sc = malloc((size_t)(NE * R * nb));
    REQUIRE(q && sc, "out of memory");
    for (int64_t e = 0; e < NE; e++)
        for (int64_t r = 0; r < R; r++) {
            const block_mxfp4 *b = (const block_mxfp4 *)stacks[r % n_stacks]->data + (e * rows + r / n_stacks) * nb;
            for (int64_t k = 0; k < nb; k++) {
                uint8_t *x = q + ((e * R + r) * nb + k) * 16, v[32];
                for (int j = 0; j < 16; j++) v[j] = b[k].qs[j] & 15, v[j + 16] = b[k].qs[j] >> 4;
                for (int j = 0; j < 16; j++) x[j] = (uint8_t)(v[2 * j] | v[2 * j + 1] << 4);
                sc[(e * R + r) * nb + k] = b[k].e;
            }
        }
    char name[256];
    const int64_t bshape[4] = { NE, R, nb, 16 }, sshape[3] = { NE, R, flaw == SHORT_SCALES ? nb - 1 : nb };
    snprintf(name, sizeof name, "%s_blocks", hf_base);
    st_add_raw(o, name, "U8", 1, 4, bshape, q);
    snprintf(name, sizeof name, "%s_scales", hf_base);
    if (flaw == F32_SCALES) {
        float *f = malloc((size_t)(NE * R * nb) * sizeof(float));
        REQUIRE(f, "out of memory");
        for (int64_t i = 0; i < NE * R * nb; i++) f[i] = sc[i];
        st_add_raw(o, name, "F32", 4, 3, sshape, f);
        free(f);
    } else if (flaw != NO_SCALES) {
        st_add_raw(o, name, "U8", 1, 3, sshape, sc);
    }
    free(q);
    free(sc);
}

/* Unquantized expert stacks (F32) as HF's [experts, in, out]: the GGUF's rows become columns; with two stacks
 * (gate, up) their rows alternate. */
static void put_dense(st_out *o, const gguf_tensor *const *stacks, int n_stacks, const char *hf) {
    const gguf_tensor *t0 = stacks[0];
    REQUIRE(t0->type == HT_F32, "%s: F32 expected", t0->name);
    const int64_t in = (int64_t)t0->ne[0], rows = (int64_t)t0->ne[1], NE = (int64_t)t0->ne[2], R = rows * n_stacks;
    float *x = malloc((size_t)(NE * in * R) * sizeof(float));
    REQUIRE(x, "out of memory");
    for (int64_t e = 0; e < NE; e++)
        for (int64_t r = 0; r < R; r++)
            for (int64_t i = 0; i < in; i++)
                x[(e * in + i) * R + r] = ((const float *)stacks[r % n_stacks]->data)[(e * rows + r / n_stacks) * in + i];
    const int64_t shape[3] = { NE, in, R };
    st_add_shape(o, hf, 3, shape, x);
    free(x);
}

/* The expert biases [experts, rows] (gate and up interleaved into one [experts, 2 * rows]). */
static void put_bias(st_out *o, const gguf_tensor *const *stacks, int n_stacks, const char *hf) {
    const int64_t rows = (int64_t)stacks[0]->ne[0], NE = (int64_t)stacks[0]->ne[1], R = rows * n_stacks;
    float *x = malloc((size_t)(NE * R) * sizeof(float));
    REQUIRE(x, "out of memory");
    for (int64_t e = 0; e < NE; e++)
        for (int64_t r = 0; r < R; r++) x[e * R + r] = ((const float *)stacks[r % n_stacks]->data)[e * rows + r / n_stacks];
    const int64_t shape[2] = { NE, R };
    st_add_shape(o, hf, 2, shape, x);
    free(x);
}

/* Writes dir/config.json and dir/model.safetensors from the fixture; flaw (in layer 1's experts or the config)
 * makes the refusal cases. */
static void write_hf(const char *gguf_path, const char *dir, int flaw) {
    hearth_err err;
    gguf_file *g;
    REQUIRE(!gguf_open(gguf_path, &g, &err), "%s", err.msg);
    const char *a = "gpt-oss";
    const uint32_t L = fixture_u32(g, a, "block_count");
    float eps, theta, factor;
    REQUIRE(gguf_get_f32(g, "gpt-oss.attention.layer_norm_rms_epsilon", &eps) && gguf_get_f32(g, "gpt-oss.rope.freq_base", &theta) &&
                gguf_get_f32(g, "gpt-oss.rope.scaling.factor", &factor), "fixture metadata");
    char path[512], name[256], key[128];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *cf = fopen(path, "w");
    REQUIRE(cf, "cannot write %s", path);
    fprintf(cf, "{\"architectures\": [\"GptOssForCausalLM\"], \"model_type\": \"gpt_oss\", \"hidden_size\": %u,"
                " \"num_hidden_layers\": %u, \"num_attention_heads\": %u, \"num_key_value_heads\": %u, \"head_dim\": %u,\n"
                " \"intermediate_size\": %u, \"max_position_embeddings\": %u, \"rms_norm_eps\": %g, \"rope_theta\": %g,"
                " \"num_local_experts\": %u, \"experts_per_token\": %u, \"sliding_window\": %u, \"attention_bias\": true,\n"
                " \"swiglu_limit\": 7.0, \"tie_word_embeddings\": false, \"quantization_config\": {\"quant_method\": \"mxfp4\"},\n"
                " \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": %g, \"beta_fast\": 32.0, \"beta_slow\": 1.0,"
                " \"original_max_position_embeddings\": %u, \"truncate\": false},\n \"layer_types\": [",
            fixture_u32(g, a, "embedding_length"), L, fixture_u32(g, a, "attention.head_count"),
            fixture_u32(g, a, "attention.head_count_kv"), fixture_u32(g, a, "attention.key_length"),
            fixture_u32(g, a, "expert_feed_forward_length"), fixture_u32(g, a, "context_length"), (double)eps, (double)theta,
            fixture_u32(g, a, "expert_count"), fixture_u32(g, a, "expert_used_count"), fixture_u32(g, a, "attention.sliding_window"),
            (double)factor, fixture_u32(g, a, "rope.scaling.original_context_length"));
    for (uint32_t il = 0; il < L; il++)
        fprintf(cf, "%s\"%s\"", il ? ", " : "", (il % 2 == 1) != (flaw == BAD_LAYER_TYPES && il == 1) ? "full_attention" : "sliding_attention");
    fprintf(cf, "]}\n");
    fclose(cf);

    st_out o;
    st_begin(&o);
    put_f32(&o, g, "token_embd.weight", "model.embed_tokens.weight");
    put_f32(&o, g, "output_norm.weight", "model.norm.weight");
    put_f32(&o, g, "output.weight", "lm_head.weight");
    static const char *const plain[][2] = {
        { "attn_norm.weight", "input_layernorm.weight" }, { "attn_q.weight", "self_attn.q_proj.weight" },
        { "attn_q.bias", "self_attn.q_proj.bias" }, { "attn_k.weight", "self_attn.k_proj.weight" },
        { "attn_k.bias", "self_attn.k_proj.bias" }, { "attn_v.weight", "self_attn.v_proj.weight" },
        { "attn_v.bias", "self_attn.v_proj.bias" }, { "attn_output.weight", "self_attn.o_proj.weight" },
        { "attn_output.bias", "self_attn.o_proj.bias" }, { "attn_sinks.weight", "self_attn.sinks" },
        { "post_attention_norm.weight", "post_attention_layernorm.weight" }, { "ffn_gate_inp.weight", "mlp.router.weight" },
        { "ffn_gate_inp.bias", "mlp.router.bias" }, { "ffn_down_exps.bias", "mlp.experts.down_proj_bias" } };
    for (uint32_t il = 0; il < L; il++) {
        for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
            snprintf(key, sizeof key, "blk.%u.%s", il, plain[i][0]);
            snprintf(name, sizeof name, "model.layers.%u.%s", il, plain[i][1]);
            put_f32(&o, g, key, name);
        }
        const gguf_tensor *gu[2], *gub[2], *down;
        snprintf(key, sizeof key, "blk.%u.ffn_gate_exps.weight", il), gu[0] = need(g, key);
        snprintf(key, sizeof key, "blk.%u.ffn_up_exps.weight", il), gu[1] = need(g, key);
        snprintf(key, sizeof key, "blk.%u.ffn_gate_exps.bias", il), gub[0] = need(g, key);
        snprintf(key, sizeof key, "blk.%u.ffn_up_exps.bias", il), gub[1] = need(g, key);
        snprintf(key, sizeof key, "blk.%u.ffn_down_exps.weight", il), down = need(g, key);
        snprintf(name, sizeof name, "model.layers.%u.mlp.experts.gate_up_proj", il);
        if (gu[0]->type == HT_F32) put_dense(&o, gu, 2, name);
        else put_mxfp4(&o, gu, 2, name, il == 1 && flaw != BAD_LAYER_TYPES ? flaw : OK);
        snprintf(name, sizeof name, "model.layers.%u.mlp.experts.gate_up_proj_bias", il);
        put_bias(&o, gub, 2, name);
        snprintf(name, sizeof name, "model.layers.%u.mlp.experts.down_proj", il);
        if (down->type == HT_F32) put_dense(&o, &down, 1, name);
        else put_mxfp4(&o, &down, 1, name, OK);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_finish(&o, path);
    gguf_close(g);
}

/* A flawed directory: refused, in one line containing want. */
static void check_refused(const char *tmp, const char *gguf, int flaw, const char *want) {
    char dir[256];
    hearth_model *m;
    hearth_err err;
    snprintf(dir, sizeof dir, "%s/flaw%d", tmp, flaw);
    REQUIRE(!mkdir(dir, 0755), "mkdir %s", dir);
    write_hf(gguf, dir, flaw);
    REQUIRE(hearth_model_load(dir, &m, &err), "%s loaded despite flaw %d", dir, flaw);
    printf("flaw %d: %s\n", flaw, err.msg);
    CHECK(strstr(err.msg, want) && !strchr(err.msg, '\n'), "flaw %d: '%s' should say '%s'", flaw, err.msg, want);
}

/* The directory written from fixture gives its logits bit for bit and the golden's argmax. */
static void check(const char *tmp, const char *fixture) {
    char gguf[256], golden[256], dir[300];
    snprintf(gguf, sizeof gguf, "data/models/%s.gguf", fixture);
    snprintf(golden, sizeof golden, "data/golden/%s.golden", fixture);
    snprintf(dir, sizeof dir, "%s/%s-hf", tmp, fixture);
    REQUIRE(!mkdir(dir, 0755), "mkdir %s", dir);
    write_hf(gguf, dir, OK);

    /* (the MXFP4 file's rel diff is the quantized rule's business, which test_golden applies to the GGUF) */
    hearth_model_free(hf_check_logits(dir, gguf, golden, fixture, 0, strstr(fixture, "MXFP4") ? 0 : 5e-3));
}

int main(void) {
    char tmp[] = "/tmp/hearth-hf-gptoss-XXXXXX", cmd[300];
    const char *gguf = "data/models/gpt-oss-MXFP4.gguf";
    REQUIRE(mkdtemp(tmp), "mkdtemp");
    check(tmp, "gpt-oss-MXFP4");
    check(tmp, "gpt-oss");   /* unquantized experts, as bf16 checkpoints store them */
    check_refused(tmp, gguf, NO_SCALES, "gate_up_proj_scales' missing");
    check_refused(tmp, gguf, F32_SCALES, "dtype F32, U8 expected");
    check_refused(tmp, gguf, SHORT_SCALES, "shape should be");
    check_refused(tmp, gguf, BAD_LAYER_TYPES, "layer_types[1]");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0, "%s", cmd);
    TEST_DONE();
}
