/* test_model_lies.c — models whose metadata or tensors lie are refused at load with one line, or evaluated
 * safely, never read out of bounds or turned into undefined behaviour (the sanitizer rerun of the suite
 * checks that part). Each case rewrites the llama fixture with one lie:
 *  - a weight matrix in a type that only activations use (Q8_1, Q8_K: no kernel multiplies it);
 *  - norms stored as 2-D F16 tensors [n, 1] (must be converted whatever their rank: same logits as the file),
 *    or with a shape that is not a vector;
 *  - hyper-parameters that overflow int or whose products do (heads x head size);
 *  - NaN in the token-type array and in the eos id list (float-to-int conversions);
 *  - NaN weights: decoding says the model produced NaN, instead of handing NaNs to a sampler;
 *  - expert counts that lie: a dense file that claims experts (refused naming the missing router), counts
 *    past the limit, one expert, more experts used per token than there are;
 *  - latent attention (deepseek2.gguf) whose sizes disagree: a cache row that is not latent + rope key, a
 *    per-head q wider than the row, no latent rank at all (a file from before the split attn_k_b / attn_v_b),
 *    expert groups that do not divide the experts, a gating function hearth does not know;
 *  - Gemma 4 (gemma4.gguf) whose per-layer metadata disagrees: pattern or kv-head arrays of the wrong length, kv
 *    heads that do not divide the heads, KV-sharing layers whose source is of the other kind, rope divisors of
 *    another size;
 *  - Gemma 3n (a tiny-gemma3n synthesized here) whose AltUp stream count, active stream, sparsity array or per-layer
 *    width disagree with its tensors or bounds. */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "convert/synth.h"
#include "model/model.h"
#include "testutil.h"

static const char *SRC = "data/models/llama.gguf";   /* the file the lies rewrite (deepseek2.gguf at the end) */
static char g_dir[64];

typedef struct {
    const char *kv_key;       /* replace (or, with kv_type 0xff, drop) this key */
    uint32_t kv_type;
    const void *kv_val;
    uint64_t kv_n;            /* > 0: an array of kv_n values */
    const char *t_name;       /* change this tensor */
    uint32_t t_type;
    int t_dims;
    int64_t t_ne[4];
    const void *t_data;
} lie;

/* The fixture with one lie, written to a temp file; returns its path. */
static const char *write_lie(const lie *l, const char *tag) {
    static char path[128];
    snprintf(path, sizeof path, "%s/%s.gguf", g_dir, tag);
    hearth_err err;
    gguf_file *g;
    REQUIRE(!gguf_open(SRC, &g, &err), "%s", err.msg);
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const gguf_kv *kv = &g->kv[i];
        if (l->kv_key && kv->key.n == strlen(l->kv_key) && !memcmp(kv->key.p, l->kv_key, kv->key.n)) continue;
        gguf_w_copy_kv(w, kv);
    }
    if (l->kv_key && l->kv_type != 0xff) {
        if (l->kv_n) gguf_w_arr(w, l->kv_key, l->kv_type, l->kv_val, l->kv_n);
        else gguf_w_val(w, l->kv_key, l->kv_type, l->kv_val);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        if (l->t_name && !strcmp(t->name, l->t_name)) {
            uint64_t ne = 1;
            for (int d = 0; d < l->t_dims; d++) ne *= (uint64_t)l->t_ne[d];
            const ht_traits *tr = ht_get_traits(l->t_type);
            gguf_w_tensor(w, t->name, l->t_type, l->t_dims, l->t_ne, l->t_data, ne / (uint64_t)tr->blck * tr->type_size);
        } else {
            gguf_w_tensor(w, t->name, t->type, (int)t->n_dims, t->ne, t->data, t->nbytes);
        }
    }
    REQUIRE(!gguf_writer_write(w, path, &err), "%s: %s", tag, err.msg);
    gguf_writer_free(w);
    gguf_close(g);
    return path;
}

static bool one_line(const char *s) { return s[0] && !strchr(s, '\n'); }

/* Loading must fail with one line containing want. */
static void expect_refused(const lie *l, const char *tag, const char *want) {
    hearth_err err = {{0}};
    hearth_model *m = NULL;
    const char *path = write_lie(l, tag);
    int rc = hearth_model_load(path, &m, &err);
    CHECK(rc == -1 && one_line(err.msg) && strstr(err.msg, want), "%s: expected a refusal mentioning '%s', got rc %d '%s'",
          tag, want, rc, err.msg);
    hearth_model_free(m);
    unlink(path);
}

/* Logits of the 4-token prompt {1, 2, 3, 4}, last row, into out (n_vocab floats); returns decode's rc. */
static int last_logits(hearth_model *m, float *out, hearth_err *err) {
    hearth_ctx *c;
    hearth_ctx_params p = hearth_ctx_default_params();
    p.n_ctx = 64;
    if (hearth_ctx_new(m, &p, &c, err)) return -1;
    hearth_token toks[4] = {1, 2, 3, 4};
    hearth_batch b = {.n = 4, .tokens = toks};
    int rc = hearth_decode(c, &b, err);
    if (!rc) memcpy(out, hearth_logits(c, 3), (size_t)m->hp.n_vocab * sizeof(float));
    hearth_ctx_free(c);
    return rc;
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/hearth-lies-XXXXXX");
    REQUIRE(mkdtemp(g_dir), "mkdtemp");
    hearth_model *ref = tu_load_model("llama");
    const int E = ref->hp.n_embd, V = ref->hp.n_vocab;
    float *want = malloc((size_t)V * 4), *got = malloc((size_t)V * 4);
    hearth_err err;
    REQUIRE(!last_logits(ref, want, &err), "%s", err.msg);

    /* a weight matrix in an activation-only type */
    const int64_t QD = (int64_t)ref->hp.n_head * ref->hp.head_dim;
    uint8_t *junk = calloc((size_t)QD * E, 4);
    lie l = {.t_name = "blk.0.attn_q.weight", .t_type = HT_Q8_1, .t_dims = 2, .t_ne = {E, QD, 1, 1}, .t_data = junk};
    expect_refused(&l, "q8_1-weight", "holds activations");
    l.t_type = HT_Q8_K;
    if (E % 256 == 0) expect_refused(&l, "q8_k-weight", "holds activations");
    /* a matrix given a third dimension */
    l = (lie){.t_name = "blk.0.attn_q.weight", .t_type = HT_F32, .t_dims = 3, .t_ne = {E, QD / 2, 2, 1}, .t_data = junk};
    expect_refused(&l, "3d-matrix", "expected");

    /* a norm as a 2-D F16 tensor [E, 1]: converted like a 1-D one, same logits as the F32 file within F16 */
    uint16_t *h = malloc((size_t)E * 2);
    const float *nw = ref->layers[0].attn_norm.data;
    for (int i = 0; i < E; i++) h[i] = f32_to_fp16(nw[i]);
    l = (lie){.t_name = "blk.0.attn_norm.weight", .t_type = HT_F16, .t_dims = 2, .t_ne = {E, 1, 1, 1}, .t_data = h};
    const char *path = write_lie(&l, "norm-2d-f16");
    hearth_model *m;
    REQUIRE(!hearth_model_load(path, &m, &err), "norm [E,1] F16: %s", err.msg);
    CHECK(m->layers[0].attn_norm.type == HT_F32, "the 2-D F16 norm was not converted");
    REQUIRE(!last_logits(m, got, &err), "%s", err.msg);
    double md = 0;
    for (int i = 0; i < V; i++) md = fmax(md, fabs((double)got[i] - want[i]));
    CHECK(md < 0.05, "2-D F16 norm: logits off by %g", md);
    hearth_model_free(m);
    unlink(path);
    /* ... and as [E/2, 2]: not a vector */
    l.t_ne[0] = E / 2;
    l.t_ne[1] = 2;
    expect_refused(&l, "norm-not-vector", "has shape");

    /* hyper-parameters past int, and products of them */
    const uint32_t big = 0xFFFFFFFFu, heads = 65536, hd = 4096;
    const int32_t neg = -4;
    expect_refused(&(lie){.kv_key = "llama.attention.head_count", .kv_type = GGUF_U32, .kv_val = &big}, "heads-u32max", "head_count");
    expect_refused(&(lie){.kv_key = "llama.feed_forward_length", .kv_type = GGUF_U32, .kv_val = &big}, "ff-u32max", "feed_forward_length");
    expect_refused(&(lie){.kv_key = "llama.context_length", .kv_type = GGUF_U32, .kv_val = &big}, "ctx-u32max", "context_length");
    expect_refused(&(lie){.kv_key = "llama.rope.dimension_count", .kv_type = GGUF_I32, .kv_val = &neg}, "rope-neg", "dimension_count");
    expect_refused(&(lie){.kv_key = "llama.attention.head_count", .kv_type = GGUF_U32, .kv_val = &heads}, "heads-64k", "");
    expect_refused(&(lie){.kv_key = "llama.attention.key_length", .kv_type = GGUF_U32, .kv_val = &hd}, "keylen-4096", "");
    const uint32_t experts = 4, one = 1, many = 1u << 20;
    expect_refused(&(lie){.kv_key = "llama.expert_count", .kv_type = GGUF_U32, .kv_val = &experts}, "dense-claims-experts",
                   "blk.0.ffn_gate_inp.weight");
    expect_refused(&(lie){.kv_key = "llama.expert_count", .kv_type = GGUF_U32, .kv_val = &many}, "experts-1M", "expert_count");
    expect_refused(&(lie){.kv_key = "llama.expert_count", .kv_type = GGUF_U32, .kv_val = &one}, "experts-1", "expert_count");
    expect_refused(&(lie){.kv_key = "llama.expert_used_count", .kv_type = GGUF_U32, .kv_val = &experts}, "used-without-experts",
                   "expert_used_count");
    const float nan_f = NAN;
    expect_refused(&(lie){.kv_key = "llama.rope.freq_base", .kv_type = GGUF_F32, .kv_val = &nan_f}, "rope-nan", "rope base");

    /* NaN where the loader wants integers: token types and eos ids (UBSan watches the conversions) */
    float *tt = malloc((size_t)V * 4);
    for (int i = 0; i < V; i++) tt[i] = i % 7 == 3 ? NAN : i % 11 == 5 ? 1e30f : 1.0f;
    l = (lie){.kv_key = "tokenizer.ggml.token_type", .kv_type = GGUF_F32, .kv_val = tt, .kv_n = (uint64_t)V};
    path = write_lie(&l, "tokentype-nan");
    CHECK(!hearth_model_load(path, &m, &err), "NaN token types: %s", err.msg);
    if (m) {
        hearth_token ids[64];
        CHECK(hearth_tokenize(m, "hello world", 11, true, false, ids, 64, &err) > 0, "tokenize: %s", err.msg);
        hearth_model_free(m);
    }
    unlink(path);
    const float eos[3] = {NAN, -1e30f, 2.5f};
    l = (lie){.kv_key = "hearth.generation.eos_token_ids", .kv_type = GGUF_F32, .kv_val = eos, .kv_n = 3};
    path = write_lie(&l, "eos-nan");
    CHECK(!hearth_model_load(path, &m, &err), "NaN eos ids: %s", err.msg);
    hearth_model_free(m);
    unlink(path);

    /* NaN weights: decoding reports it */
    float *nn = malloc((size_t)E * 4);
    for (int i = 0; i < E; i++) nn[i] = NAN;
    l = (lie){.t_name = "output_norm.weight", .t_type = HT_F32, .t_dims = 1, .t_ne = {E, 1, 1, 1}, .t_data = nn};
    path = write_lie(&l, "nan-weights");
    REQUIRE(!hearth_model_load(path, &m, &err), "%s", err.msg);
    err.msg[0] = 0;
    CHECK(last_logits(m, got, &err) == -1 && strstr(err.msg, "NaN"), "NaN weights: decode said '%s'", err.msg);
    hearth_model_free(m);
    unlink(path);

    /* latent attention's sizes: rows, q and groups that do not fit together */
    SRC = "data/models/deepseek2.gguf";
    const uint32_t k96 = 96, mla81 = 81, groups3 = 3, gating3 = 3;
    expect_refused(&(lie){.kv_key = "deepseek2.attention.key_length", .kv_type = GGUF_U32, .kv_val = &k96}, "mla-row",
                   "inconsistent latent attention");
    expect_refused(&(lie){.kv_key = "deepseek2.attention.key_length_mla", .kv_type = GGUF_U32, .kv_val = &mla81}, "mla-q-wide",
                   "inconsistent latent attention");
    expect_refused(&(lie){.kv_key = "deepseek2.attention.kv_lora_rank", .kv_type = 0xff}, "mla-no-rank", "attn_kv_b");
    expect_refused(&(lie){.kv_key = "deepseek2.expert_group_count", .kv_type = GGUF_U32, .kv_val = &groups3}, "groups-3",
                   "expert groups");
    expect_refused(&(lie){.kv_key = "deepseek2.expert_gating_func", .kv_type = GGUF_U32, .kv_val = &gating3}, "gating-3",
                   "expert_gating_func 3");

    /* Gemma 4's per-layer metadata: a sliding pattern or kv-head array of the wrong length, kv heads that do not
     * divide the heads, KV-sharing layers whose source is a layer of the other kind, rope divisors of another size */
    SRC = "data/models/gemma4.gguf";
    const uint8_t pat5[5] = { 1, 1, 0, 1, 1 };
    const int32_t kv3[6] = { 1, 3, 2, 1, 1, 2 }, kv5[5] = { 1, 1, 2, 1, 1 };
    const uint32_t shared2 = 2;
    static const float freqs[16] = { 1 };
    expect_refused(&(lie){.kv_key = "gemma4.attention.sliding_window_pattern", .kv_type = GGUF_BOOL, .kv_val = pat5, .kv_n = 5},
                   "g4-pattern-5", "sliding_window_pattern");
    expect_refused(&(lie){.kv_key = "gemma4.attention.head_count_kv", .kv_type = GGUF_I32, .kv_val = kv5, .kv_n = 5},
                   "g4-kv-5", "head_count_kv");
    expect_refused(&(lie){.kv_key = "gemma4.attention.head_count_kv", .kv_type = GGUF_I32, .kv_val = kv3, .kv_n = 6},
                   "g4-kv-3", "does not divide");
    expect_refused(&(lie){.kv_key = "gemma4.attention.shared_kv_layers", .kv_type = GGUF_U32, .kv_val = &shared2},
                   "g4-shared-2", "not a");
    expect_refused(&(lie){.t_name = "rope_freqs.weight", .t_type = HT_F32, .t_dims = 1, .t_ne = {16, 1, 1, 1}, .t_data = freqs},
                   "g4-freqs-16", "rope_freqs");

    /* Gemma 3n (a tiny-gemma3n made here): AltUp stream counts out of range or disagreeing with the stacks, an
     * active stream past them, a sparsity array of the wrong length, a per-layer width the tables do not have */
    char g3n[96];
    snprintf(g3n, sizeof g3n, "%s/g3n-src.gguf", g_dir);
    synth_ftype ft;
    synth_opts so = { .seed = 0 };
    hearth_err serr;
    REQUIRE(!synth_parse_ftype("Q8_0", false, &ft, &serr) && !synth_write(synth_find_shape("tiny-gemma3n"), &ft, g3n, &so, &serr),
            "synth: %s", serr.msg);
    SRC = g3n;
    const uint32_t alt9 = 9, alt3 = 3, act4 = 4, ple128 = 128;
    static const float sp5[5] = { 1.6f, 1.6f, 1.6f, 1.6f, 1.6f };
    expect_refused(&(lie){.kv_key = "gemma3n.altup.num_inputs", .kv_type = GGUF_U32, .kv_val = &alt9}, "g3n-alt-9", "altup.num_inputs");
    expect_refused(&(lie){.kv_key = "gemma3n.altup.num_inputs", .kv_type = GGUF_U32, .kv_val = &alt3}, "g3n-alt-3", "altup_proj");
    expect_refused(&(lie){.kv_key = "gemma3n.altup.active_idx", .kv_type = GGUF_U32, .kv_val = &act4}, "g3n-act-4", "active_idx");
    expect_refused(&(lie){.kv_key = "gemma3n.activation_sparsity_scale", .kv_type = GGUF_F32, .kv_val = sp5, .kv_n = 5},
                   "g3n-sparse-5", "activation_sparsity_scale");
    expect_refused(&(lie){.kv_key = "gemma3n.embedding_length_per_layer_input", .kv_type = GGUF_U32, .kv_val = &ple128},
                   "g3n-ple-128", "per_layer");
    unlink(g3n);

    free(nn); free(tt); free(h); free(junk); free(want); free(got);
    hearth_model_free(ref);
    rmdir(g_dir);
    TEST_DONE();
}
