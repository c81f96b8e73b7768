/* test_hf_gemma3n.c — a Gemma 3n Hugging Face directory written here from `synth --shape tiny-gemma3n` (F32), in the
 * published Gemma3nForConditionalGeneration form: the text tower under model.language_model. with its config in
 * text_config (layer_types, intermediate_size as a per-layer list, num_kv_shared_layers, hidden_size_per_layer_input,
 * altup_num_inputs, activation_sparsity_pattern as target sparsities, rope_theta / rope_local_base_freq), AltUp's
 * projections one tensor per stream, correct_output_scale without ".weight", and an audio tower left unread. The
 * directory gives its GGUF twin's logits (to 1e-5: the sparsity's std multiplier is computed here in double, the
 * converter's in float32), meets the golden, and writes back to an F32 GGUF whose tensors (the 3-D AltUp stacks
 * included) are the twin's byte for byte; an activation_sparsity_pattern of the wrong length is refused in one line;
 * a per-layer embedding table of the text rows only (as published) loads and is written back padded with zero rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert/synth.h"
#include "io/gguf.h"
#include "quant/quant.h"
#include "golden_check.h"
#include "hf_check.h"
#include "hearth.h"
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
    { "altup_correct_scale.weight", "altup.correct_output_scale" }, { "altup_correct_coef.weight", "altup.correction_coefs.weight" },
    { "altup_predict_coef.weight", "altup.prediction_coefs.weight" }, { "altup_router.weight", "altup.modality_router.weight" },
    { "altup_router_norm.weight", "altup.router_norm.weight" }, { "laurel_l.weight", "laurel.linear_left.weight" },
    { "laurel_r.weight", "laurel.linear_right.weight" }, { "laurel_post_norm.weight", "laurel.post_laurel_norm.weight" } };

static const rename_t GLOBALS[] = {
    { "token_embd.weight", "embed_tokens.weight" }, { "output_norm.weight", "norm.weight" },
    { "per_layer_token_embd.weight", "embed_tokens_per_layer.weight" },
    { "per_layer_model_proj.weight", "per_layer_model_projection.weight" },
    { "per_layer_proj_norm.weight", "per_layer_projection_norm.weight" } };

/* An F32 tensor's rows under an HF name, in its own shape (GGUF ne reversed; a 3-D stack: matrix k only). */
static void put(st_out *o, const gguf_tensor *t, const char *name, int k) {
    REQUIRE(t->type == HT_F32, "%s: the model should be F32", t->name);
    int64_t shape[2];
    const int nd = t->n_dims == 3 ? 2 : (int)t->n_dims;
    for (int d = 0; d < nd; d++) shape[d] = (int64_t)t->ne[nd - 1 - d];
    st_add_shape(o, name, nd, shape, (const float *)t->data + (k < 0 ? 0 : (size_t)k * t->ne[0] * t->ne[1]));
}

static void write_hf(const char *gguf_path, const char *dir, int short_pattern, int drop_ple_rows) {
    hearth_err err;
    gguf_file *g;
    REQUIRE(!gguf_open(gguf_path, &g, &err), "%s", err.msg);
    const char *a = "gemma3n";
    const uint32_t L = fixture_u32(g, a, "block_count");
    const gguf_kv *pat = gguf_find(g, "gemma3n.attention.sliding_window_pattern"),
                  *sp = gguf_find(g, "gemma3n.activation_sparsity_scale");
    REQUIRE(pat && pat->arr_n == L && sp && sp->arr_n == L, "the model's sliding / sparsity arrays");
    float base = 0, base_swa = 0, eps = 0, cap = 0;
    REQUIRE(gguf_get_f32(g, "gemma3n.rope.freq_base", &base) && gguf_get_f32(g, "gemma3n.rope.freq_base_swa", &base_swa) &&
                gguf_get_f32(g, "gemma3n.attention.layer_norm_rms_epsilon", &eps) &&
                gguf_get_f32(g, "gemma3n.final_logit_softcapping", &cap), "the model's rope / eps / softcap");
    char path[512], name[256], key[128];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *cf = fopen(path, "w");
    REQUIRE(cf, "cannot write %s", path);
    fprintf(cf, "{\"architectures\": [\"Gemma3nForConditionalGeneration\"], \"model_type\": \"gemma3n\", \"audio_config\": {},\n"
                " \"text_config\": {\"model_type\": \"gemma3n_text\", \"hidden_size\": %u, \"num_hidden_layers\": %u,"
                " \"num_attention_heads\": %u, \"num_key_value_heads\": %u, \"head_dim\": %u,\n"
                "  \"num_kv_shared_layers\": %u, \"hidden_size_per_layer_input\": %u, \"max_position_embeddings\": %u,"
                " \"altup_num_inputs\": 4, \"altup_active_idx\": 0, \"laurel_rank\": 64,\n"
                "  \"rms_norm_eps\": %.9g, \"sliding_window\": %u, \"final_logit_softcapping\": %.9g, \"rope_theta\": %.9g,"
                " \"rope_local_base_freq\": %.9g,\n  \"intermediate_size\": [",
            fixture_u32(g, a, "embedding_length"), L, fixture_u32(g, a, "attention.head_count"),
            fixture_u32(g, a, "attention.head_count_kv"), fixture_u32(g, a, "attention.key_length"),
            fixture_u32(g, a, "attention.shared_kv_layers"), fixture_u32(g, a, "embedding_length_per_layer_input"),
            fixture_u32(g, a, "context_length"), (double)eps, fixture_u32(g, a, "attention.sliding_window"), (double)cap,
            (double)base, (double)base_swa);
    for (uint32_t il = 0; il < L; il++) fprintf(cf, "%s%u", il ? ", " : "", fixture_u32(g, a, "feed_forward_length"));
    fprintf(cf, "],\n  \"activation_sparsity_pattern\": [");
    for (uint32_t il = 0; il < L - (uint32_t)short_pattern; il++)
        fprintf(cf, "%s%s", il ? ", " : "", isfinite(gguf_arr_num(sp, il)) ? "0.95" : "0.0");
    fprintf(cf, "],\n  \"layer_types\": [");
    for (uint32_t il = 0; il < L; il++)
        fprintf(cf, "%s\"%s\"", il ? ", " : "", pat->arr_data[il] ? "sliding_attention" : "full_attention");
    fprintf(cf, "]}}\n");
    fclose(cf);

    st_out o;
    st_begin(&o);
    const float junk[3] = { 1, 2, 3 };
    const int64_t jshape[1] = { 3 };
    st_add_shape(&o, "model.audio_tower.conformer.0.norm.weight", 1, jshape, junk);   /* left unread */
    for (size_t i = 0; i < sizeof GLOBALS / sizeof GLOBALS[0]; i++) {
        const gguf_tensor *t = gguf_find_tensor(g, GLOBALS[i].gguf);
        snprintf(name, sizeof name, "model.language_model.%s", GLOBALS[i].hf);
        if (!strcmp(GLOBALS[i].gguf, "per_layer_token_embd.weight") && drop_ple_rows) {   /* HF's text rows only */
            const int64_t shape[2] = { (int64_t)t->ne[1] - drop_ple_rows, (int64_t)t->ne[0] };
            st_add_shape(&o, name, 2, shape, t->data);
        } else put(&o, t, name, -1);
    }
    for (int s = 0; s < 2; s++) {   /* one tensor per stream */
        const gguf_tensor *t = gguf_find_tensor(g, s ? "altup_unembd_proj.weight" : "altup_proj.weight");
        REQUIRE(t && t->n_dims == 3, "the model's AltUp stacks");
        for (int k = 0; k < (int)t->ne[2]; k++) {
            snprintf(name, sizeof name, "model.language_model.%s.%d.weight", s ? "altup_unembed_projections" : "altup_projections", k);
            put(&o, t, name, k);
        }
    }
    for (uint32_t il = 0; il < L; il++)
        for (size_t i = 0; i < sizeof LAYER / sizeof LAYER[0]; i++) {
            snprintf(key, sizeof key, "blk.%u.%s", il, LAYER[i].gguf);
            snprintf(name, sizeof name, "model.language_model.layers.%u.%s", il, LAYER[i].hf);
            put(&o, gguf_find_tensor(g, key), name, -1);
        }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_finish(&o, path);
    gguf_close(g);
}

int main(void) {
    char tmp[] = "/tmp/hearth-hf-gemma3n-XXXXXX", dir[300], gguf[300], cmd[300];
    hearth_model *m;
    hearth_err err;
    REQUIRE(mkdtemp(tmp), "mkdtemp");
    snprintf(gguf, sizeof gguf, "%s/gemma3n.gguf", tmp);   /* the file the golden was dumped from (tests/data/README) */
    synth_ftype ft;
    synth_opts so = { .seed = 0 };
    REQUIRE(!synth_parse_ftype("F32", false, &ft, &err) && !synth_write(synth_find_shape("tiny-gemma3n"), &ft, gguf, &so, &err),
            "synth: %s", err.msg);
    snprintf(dir, sizeof dir, "%s/hf", tmp);
    REQUIRE(!mkdir(dir, 0755), "mkdir %s", dir);
    write_hf(gguf, dir, 0, 0);
    hearth_model *hf = hf_check_logits(dir, gguf, "data/golden/gemma3n.golden", "gemma3n", 1e-5, 5e-3);
    hf_check_to_gguf(hf, gguf, tmp, "gemma3n");
    snprintf(dir, sizeof dir, "%s/bad", tmp);
    REQUIRE(!mkdir(dir, 0755), "mkdir %s", dir);
    write_hf(gguf, dir, 1, 0);
    REQUIRE(hearth_model_load(dir, &m, &err), "%s loaded with a short activation_sparsity_pattern", dir);
    printf("short activation_sparsity_pattern: %s\n", err.msg);
    CHECK(strstr(err.msg, "activation_sparsity_pattern") && !strchr(err.msg, '\n'), "short pattern: '%s'", err.msg);
    /* per-layer embeddings for the text rows only (the published checkpoint: 262144 of 262400): the ids past them get
     * zeros, and the GGUF written back pads the table to the vocabulary with zero rows, as the converter does */
    snprintf(dir, sizeof dir, "%s/short-ple", tmp);
    REQUIRE(!mkdir(dir, 0755), "mkdir %s", dir);
    write_hf(gguf, dir, 0, 24);
    REQUIRE(!hearth_model_load(dir, &m, &err), "%s: %s", dir, err.msg);
    char out[400];
    snprintf(out, sizeof out, "%s/short-ple.gguf", tmp);
    REQUIRE(!model_quantize(m, out, "F32", true, 2, NULL, NULL, &err), "%s", err.msg);
    hearth_model_free(m);
    gguf_file *x, *y;
    REQUIRE(!gguf_open(out, &x, &err) && !gguf_open(gguf, &y, &err), "%s", err.msg);
    const gguf_tensor *a = gguf_find_tensor(x, "per_layer_token_embd.weight"), *b = gguf_find_tensor(y, "per_layer_token_embd.weight");
    REQUIRE(a && b, "per_layer_token_embd");
    const size_t keep = (size_t)(b->ne[1] - 24) * b->ne[0] * sizeof(float);
    bool zeros = true;
    for (size_t i = keep; i < a->nbytes && zeros; i++) zeros = ((const uint8_t *)a->data)[i] == 0;
    CHECK(a->ne[1] == b->ne[1] && a->nbytes == b->nbytes && !memcmp(a->data, b->data, keep) && zeros,
          "text-rows-only per_layer_token_embd: %lld rows written back (want %lld: the rows, then 24 zero rows)",
          (long long)a->ne[1], (long long)b->ne[1]);
    gguf_close(x);
    gguf_close(y);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    CHECK(system(cmd) == 0, "%s", cmd);
    TEST_DONE();
}
