/* synth.c — synthetic models (see synth.h): the named shapes, the tensor plan of each family with
 * llama-quantize's type choices, the GGUF metadata of llama.cpp's converter, and the streaming writer.
 *
 * Writing streams: gguf_writer writes the metadata (a tensorless GGUF), the tensor infos are appended and the
 * file is extended, sparse, to its final size; then worker threads each generate a chunk of rows, quantize it
 * with the reference quantizer and pwrite it into its place. Nothing is written twice and memory stays at a
 * chunk per thread. The finished file is reopened with gguf_open, so it passes every check the reader makes. */
#include "convert/synth.h"
#include "quant/quant_ref.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include "io/gguf.h"
#include "quant/quant.h"
#include "convert/quantize.h"
#include "convert/synth_vocab.h"
#include "compute/threads.h"

#define WEIGHT_STD 0.02f
#define CHUNK_ELEMS (1 << 20)          /* floats generated per work item (4 MiB) */
#define GGUF_QUANT_VERSION 2
#define GGUF_ALIGN 32                  /* the default data alignment (no general.alignment key) */
#define GGUF_COUNT_OFFSET 8            /* the u64 tensor count follows the magic and the version */

/* ---- shapes ---- */

static const synth_shape SHAPES[] = {
    { "llama-3.2-1b", "Llama 3.2 1B", "1B", SYN_LLAMA, 2048, 16, 32, 8, 64, 8192, 128256, 128000, 131072,
      500000.0f, 0, 1e-5f, 0, 32.0f, 8192, 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, false, false, 0, 0 },
    { "qwen3-0.6b", "Qwen3 0.6B", "0.6B", SYN_QWEN3, 1024, 28, 16, 8, 128, 3072, 151936, 151643, 40960,
      1000000.0f, 0, 1e-6f, 0, 0, 0, 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, false, false, 0, 0 },
    { "gemma-3-1b", "Gemma 3 1b", "1B", SYN_GEMMA3, 1152, 26, 4, 1, 256, 6912, 262144, 262144, 32768,
      1000000.0f, 10000.0f, 1e-6f, 512, 0, 0, 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, false, false, 0, 0 },
    { "gpt2-124m", "GPT2", "124M", SYN_GPT2, 768, 12, 12, 12, 64, 3072, 50257, 50256, 1024,
      0, 0, 1e-5f, 0, 0, 0, 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, false, false, 0, 0 },
    { "qwen3-30b-a3b", "Qwen3 30B A3B", "30B-A3B", SYN_QWEN3MOE, 2048, 48, 32, 4, 128, 6144, 151936, 151643, 40960,
      1000000.0f, 0, 1e-6f, 0, 0, 0, 128, 8, 768, true, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, false, false, 0, 0 },
    { "qwen3.5-4b", "Qwen3.5 4B", "4B", SYN_QWEN35, 2560, 32, 16, 4, 256, 9216, 248320, 248044, 262144,
      10000000.0f, 0, 1e-6f, 0, 0, 0, 0, 0, 0, false, 64, 16, 32, 128, 0, 0, 0, 0, 0, 0, false, false, 0, 0 },
    { "qwen3.6-35b-a3b", "Qwen3.6 35B A3B", "35B-A3B", SYN_QWEN35, 2048, 40, 16, 2, 256, 512, 248320, 248044, 262144,
      10000000.0f, 0, 1e-6f, 0, 0, 0, 256, 8, 512, true, 64, 16, 32, 128, 512, 0, 0, 0, 0, 0, false, false, 0, 0 },
    { "qwen3-next-80b-a3b", "Qwen3 Next 80B A3B", "80B-A3B", SYN_QWEN3NEXT, 2048, 48, 16, 2, 256, 5120, 151936, 151643, 262144,
      10000000.0f, 0, 1e-6f, 0, 0, 0, 512, 10, 512, true, 64, 16, 32, 128, 512, 0, 0, 0, 0, 0, false, false, 0, 0 },
    /* Gemma 4 E2B and 26B-A4B, from their config.json (text_config) */
    { .name = "gemma-4-e2b", .label = "Gemma 4 E2B", .size_label = "E2B", .family = SYN_GEMMA4, .n_embd = 1536,
      .n_layer = 35, .n_head = 8, .n_head_kv = 1, .head_dim = 512, .n_ff = 6144, .n_vocab = 262144, .n_text = 262144,
      .n_ctx = 131072, .rope_base = 1000000.0f, .rope_base_swa = 10000.0f, .norm_eps = 1e-6f, .sliding_window = 512,
      .head_dim_swa = 256, .n_head_kv_swa = 1, .swa_period = 5, .n_kv_shared = 20, .n_embd_per_layer = 256,
      .wide_shared = true },
    { .name = "gemma-4-26b-a4b", .label = "Gemma 4 26B A4B", .size_label = "26B-A4B", .family = SYN_GEMMA4,
      .n_embd = 2816, .n_layer = 30, .n_head = 16, .n_head_kv = 2, .head_dim = 512, .n_ff = 2112, .n_vocab = 262144,
      .n_text = 262144, .n_ctx = 262144, .rope_base = 1000000.0f, .rope_base_swa = 10000.0f, .norm_eps = 1e-6f,
      .sliding_window = 1024, .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 704, .head_dim_swa = 256,
      .n_head_kv_swa = 8, .swa_period = 6, .k_eq_v = true },
    /* Gemma 3n E2B and E4B, from their config.json (text_config; 262144 embedding rows: the text vocabulary) */
    { .name = "gemma-3n-e2b", .label = "Gemma 3n E2B", .size_label = "E2B", .family = SYN_GEMMA3N, .n_embd = 2048,
      .n_layer = 30, .n_head = 8, .n_head_kv = 2, .head_dim = 256, .n_ff = 8192, .n_vocab = 262144, .n_text = 262144,
      .n_ctx = 32768, .rope_base = 1000000.0f, .rope_base_swa = 10000.0f, .norm_eps = 1e-6f, .sliding_window = 512,
      .swa_period = 5, .n_kv_shared = 10, .n_embd_per_layer = 256 },
    { .name = "gemma-3n-e4b", .label = "Gemma 3n E4B", .size_label = "E4B", .family = SYN_GEMMA3N, .n_embd = 2048,
      .n_layer = 35, .n_head = 8, .n_head_kv = 2, .head_dim = 256, .n_ff = 16384, .n_vocab = 262144, .n_text = 262144,
      .n_ctx = 32768, .rope_base = 1000000.0f, .rope_base_swa = 10000.0f, .norm_eps = 1e-6f, .sliding_window = 512,
      .swa_period = 5, .n_kv_shared = 15, .n_embd_per_layer = 256 },
    /* gpt-oss-20b, from its config.json: sliding window 128 on every other layer (the first included), sinks,
     * biases, YaRN x32 over 4096 positions; experts in MXFP4 */
    { .name = "gpt-oss-20b", .label = "Gpt Oss 20b", .size_label = "20B", .family = SYN_GPTOSS, .n_embd = 2880,
      .n_layer = 24, .n_head = 64, .n_head_kv = 8, .head_dim = 64, .n_ff = 2880, .n_vocab = 201088, .n_text = 199998,
      .n_ctx = 131072, .rope_base = 150000.0f, .norm_eps = 1e-5f, .sliding_window = 128, .n_expert = 32,
      .n_expert_used = 4, .n_ff_exp = 2880, .untied = true, .rope_yarn_factor = 32.0f, .rope_yarn_orig_ctx = 4096 },
    /* tiny shapes for tests: the same structure (tied output, GQA, q/k norms, sliding window, widths that
     * are not a multiple of 256 where the real model has them) with small dimensions */
    { "tiny-llama", "Tiny Llama", "1M", SYN_LLAMA, 256, 2, 4, 2, 64, 512, 2048, 1792, 2048,
      500000.0f, 0, 1e-5f, 0, 32.0f, 8192, 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, false, false, 0, 0 },
    { "tiny-qwen3", "Tiny Qwen3", "1M", SYN_QWEN3, 256, 2, 4, 2, 128, 512, 1320, 1280, 4096,
      1000000.0f, 0, 1e-6f, 0, 0, 0, 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, false, false, 0, 0 },
    { "tiny-gemma3", "Tiny Gemma 3", "2M", SYN_GEMMA3, 384, 7, 2, 1, 128, 768, 2048, 2048, 2048,
      1000000.0f, 10000.0f, 1e-6f, 16, 0, 0, 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, false, false, 0, 0 },
    { "tiny-gpt2", "Tiny GPT2", "1M", SYN_GPT2, 128, 2, 4, 4, 32, 512, 1025, 1024, 256,
      0, 0, 1e-5f, 0, 0, 0, 0, 0, 0, false, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, false, false, 0, 0 },
    { "tiny-qwen3moe", "Tiny Qwen3 MoE", "8x1M", SYN_QWEN3MOE, 256, 2, 4, 2, 64, 768, 1320, 1280, 4096,
      1000000.0f, 0, 1e-6f, 0, 0, 0, 8, 2, 256, true, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, false, false, 0, 0 },
    { "tiny-qwen35", "Tiny Qwen3.5", "1M", SYN_QWEN35, 256, 4, 4, 2, 64, 512, 1320, 1280, 4096,
      10000000.0f, 0, 1e-6f, 0, 0, 0, 0, 0, 0, false, 16, 2, 4, 32, 0, 0, 0, 0, 0, 0, false, false, 0, 0 },
    { .name = "tiny-gemma4", .label = "Tiny Gemma 4", .size_label = "2M", .family = SYN_GEMMA4, .n_embd = 256,
      .n_layer = 6, .n_head = 4, .n_head_kv = 2, .head_dim = 128, .n_ff = 512, .n_vocab = 2048, .n_text = 2048,
      .n_ctx = 4096, .rope_base = 1000000.0f, .rope_base_swa = 10000.0f, .norm_eps = 1e-6f, .sliding_window = 16,
      .head_dim_swa = 64, .n_head_kv_swa = 1, .swa_period = 3, .n_kv_shared = 3, .n_embd_per_layer = 32,
      .wide_shared = true },
    { .name = "tiny-gemma4moe", .label = "Tiny Gemma 4 MoE", .size_label = "8x1M", .family = SYN_GEMMA4, .n_embd = 256,
      .n_layer = 4, .n_head = 4, .n_head_kv = 1, .head_dim = 128, .n_ff = 256, .n_vocab = 2048, .n_text = 2048,
      .n_ctx = 4096, .rope_base = 1000000.0f, .rope_base_swa = 10000.0f, .norm_eps = 1e-6f, .sliding_window = 16,
      .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 96, .head_dim_swa = 64, .n_head_kv_swa = 2, .swa_period = 4,
      .k_eq_v = true },
    /* 25 layers: llama.cpp takes the first 20 as the ones with a cache (and 10 sparse, LAuReL rank 64, per-layer
     * width 256), whatever the file says */
    { .name = "tiny-gemma3n", .label = "Tiny Gemma 3n", .size_label = "9M", .family = SYN_GEMMA3N, .n_embd = 128,
      .n_layer = 25, .n_head = 2, .n_head_kv = 1, .head_dim = 64, .n_ff = 256, .n_vocab = 1024, .n_text = 1024,
      .n_ctx = 2048, .rope_base = 1000000.0f, .rope_base_swa = 10000.0f, .norm_eps = 1e-6f, .sliding_window = 16,
      .swa_period = 5, .n_kv_shared = 5, .n_embd_per_layer = 256 },
    { .name = "tiny-gpt-oss", .label = "Tiny Gpt Oss", .size_label = "8x1M", .family = SYN_GPTOSS, .n_embd = 256,
      .n_layer = 2, .n_head = 4, .n_head_kv = 2, .head_dim = 64, .n_ff = 128, .n_vocab = 2048, .n_text = 1792,
      .n_ctx = 4096, .rope_base = 150000.0f, .norm_eps = 1e-5f, .sliding_window = 16, .n_expert = 8,
      .n_expert_used = 2, .n_ff_exp = 128, .untied = true, .rope_yarn_factor = 32.0f, .rope_yarn_orig_ctx = 256 },
    { "tiny-qwen35moe", "Tiny Qwen3.5 MoE", "8x1M", SYN_QWEN35, 256, 4, 4, 2, 64, 512, 1320, 1280, 4096,
      10000000.0f, 0, 1e-6f, 0, 0, 0, 8, 2, 128, true, 16, 2, 4, 32, 256, 0, 0, 0, 0, 0, false, false, 0, 0 },
    { "tiny-qwen3next", "Tiny Qwen3 Next", "8x1M", SYN_QWEN3NEXT, 256, 4, 4, 2, 64, 512, 1320, 1280, 4096,
      10000000.0f, 0, 1e-6f, 0, 0, 0, 8, 2, 128, true, 16, 2, 4, 32, 256, 0, 0, 0, 0, 0, false, false, 0, 0 },
};
#define N_SHAPES (int)(sizeof SHAPES / sizeof SHAPES[0])

const synth_shape *synth_shape_at(int i) { return i >= 0 && i < N_SHAPES ? &SHAPES[i] : NULL; }

const synth_shape *synth_find_shape(const char *name) {
    for (int i = 0; i < N_SHAPES; i++) if (!strcmp(SHAPES[i].name, name)) return &SHAPES[i];
    return NULL;
}

/* ---- file types ---- */

int synth_parse_ftype(const char *s, bool pure, synth_ftype *out, hearth_err *err) {
    if (quant_parse_type(s, pure, &out->base, &out->mix, &out->file_type))
        return herr(err, "unknown type '%s' (one of: %s)", s, quant_type_list());
    out->name = s;
    return 0;
}

/* ---- tensor plan ---- */

enum { INIT_WEIGHT, INIT_NORM, INIT_BIAS, INIT_ROPE_LLAMA3, INIT_DECAY, INIT_ROPE_PROP, INIT_QK_GAIN };

typedef struct {
    char name[64];
    int n_dims, init;
    int64_t ne[3];            /* ne[2]: experts of a stack (1 otherwise) */
    uint32_t type;
    uint64_t nbytes, file_off;
} syn_tensor;

typedef struct {
    const synth_shape *s;
    const synth_ftype *ft;
    syn_tensor *t;
    int n, cap;
    bool oom;
} syn_plan;

static syn_tensor *plan_add(syn_plan *p, const char *fmt, int il) {
    if (p->n == p->cap) {
        int nc = p->cap ? p->cap * 2 : 64;
        syn_tensor *t = realloc(p->t, (size_t)nc * sizeof *t);
        if (!t) { p->oom = true; return NULL; }
        p->t = t; p->cap = nc;
    }
    syn_tensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(t->name, sizeof t->name, fmt, il);
#pragma GCC diagnostic pop
    return t;
}

/* A matrix of ne1 rows of ne0, typed as llama-quantize would (every synthetic shape ties its output). */
static void add_mat(syn_plan *p, int64_t ne0, int64_t ne1, const char *fmt, int il) {
    syn_tensor *t = plan_add(p, fmt, il);
    if (!t) return;
    t->n_dims = 2; t->ne[0] = ne0; t->ne[1] = ne1; t->ne[2] = 1; t->init = INIT_WEIGHT;
    t->type = quant_tensor_type(t->name, 2, ne0, p->ft->base, p->ft->mix, p->s->n_layer, p->s->untied);
}

/* An expert stack: n_expert matrices of ne1 rows of ne0, one 3-D tensor. */
static void add_stack(syn_plan *p, int64_t ne0, int64_t ne1, const char *fmt, int il) {
    add_mat(p, ne0, ne1, fmt, il);
    if (p->oom) return;
    syn_tensor *t = &p->t[p->n - 1];
    t->n_dims = 3;
    t->ne[2] = p->s->n_expert;
    if (p->s->family == SYN_GPTOSS) t->type = HT_MXFP4;   /* as published, whatever the file's type */
}

/* A vector of n floats (norms, biases, rope factors: always F32). */
static void add_vec(syn_plan *p, int init, int64_t n, const char *fmt, int il) {
    syn_tensor *t = plan_add(p, fmt, il);
    if (!t) return;
    t->n_dims = 1; t->ne[0] = n; t->ne[1] = 1; t->ne[2] = 1; t->init = init; t->type = HT_F32;
}

static void plan_attention(syn_plan *p, int il, bool qk_norm) {
    const synth_shape *s = p->s;
    int64_t E = s->n_embd, QD = (int64_t)s->n_head * s->head_dim, KD = (int64_t)s->n_head_kv * s->head_dim;
    add_vec(p, INIT_NORM, E, "blk.%d.attn_norm.weight", il);
    add_mat(p, E, QD, "blk.%d.attn_q.weight", il);
    add_mat(p, E, KD, "blk.%d.attn_k.weight", il);
    add_mat(p, E, KD, "blk.%d.attn_v.weight", il);
    if (qk_norm) {
        add_vec(p, INIT_NORM, s->head_dim, "blk.%d.attn_q_norm.weight", il);
        add_vec(p, INIT_NORM, s->head_dim, "blk.%d.attn_k_norm.weight", il);
    }
    add_mat(p, QD, E, "blk.%d.attn_output.weight", il);
}

static void plan_gated_ffn(syn_plan *p, int il) {
    int64_t E = p->s->n_embd, F = p->s->n_ff, FE = p->s->n_ff_exp;
    add_vec(p, INIT_NORM, E, "blk.%d.ffn_norm.weight", il);
    if (p->s->n_expert) {   /* the router (F32, as llama-quantize leaves it) and the expert stacks */
        add_mat(p, E, p->s->n_expert, "blk.%d.ffn_gate_inp.weight", il);
        add_stack(p, E, FE, "blk.%d.ffn_gate_exps.weight", il);
        add_stack(p, E, FE, "blk.%d.ffn_up_exps.weight", il);
        add_stack(p, FE, E, "blk.%d.ffn_down_exps.weight", il);
        return;
    }
    add_mat(p, E, F, "blk.%d.ffn_gate.weight", il);
    add_mat(p, E, F, "blk.%d.ffn_up.weight", il);
    add_mat(p, F, E, "blk.%d.ffn_down.weight", il);
}

/* Llama, Qwen3 (q/k norms) and Gemma 3 (q/k norms, post-attention and post-FFN norms). */
static void plan_llama_like(syn_plan *p) {
    const synth_shape *s = p->s;
    if (s->rope_llama3_factor > 0) add_vec(p, INIT_ROPE_LLAMA3, s->head_dim / 2, "rope_freqs.weight", 0);
    add_mat(p, s->n_embd, s->n_vocab, "token_embd.weight", 0);
    for (int il = 0; il < s->n_layer; il++) {
        plan_attention(p, il, s->family != SYN_LLAMA);
        if (s->family == SYN_GEMMA3) add_vec(p, INIT_NORM, s->n_embd, "blk.%d.post_attention_norm.weight", il);
        plan_gated_ffn(p, il);
        if (s->family == SYN_GEMMA3) add_vec(p, INIT_NORM, s->n_embd, "blk.%d.post_ffw_norm.weight", il);
    }
    add_vec(p, INIT_NORM, s->n_embd, "output_norm.weight", 0);
    if (s->untied) add_mat(p, s->n_embd, s->n_vocab, "output.weight", 0);
}

/* Qwen3.5: Gated DeltaNet layers (in-projections, conv kernel in F32, decay parameters, gated norm, out) and
 * every 4th layer gated attention (attn_q rows per head [q | gate]); post_attention_norm before the FFN, which
 * is SwiGLU or routed experts plus a gated shared expert. Qwen3-Next: the same, with beta and alpha in one
 * ssm_beta_alpha (per k-head [beta x v/k | alpha x v/k]) and V heads in HF's grouped order. */
static void plan_qwen35(syn_plan *p) {
    const synth_shape *s = p->s;
    const int64_t E = s->n_embd, QD = (int64_t)s->n_head * s->head_dim, KD = (int64_t)s->n_head_kv * s->head_dim;
    const int64_t kd = (int64_t)s->ssm_k_heads * s->ssm_state, vd = (int64_t)s->ssm_v_heads * s->ssm_state;
    add_mat(p, E, s->n_vocab, "token_embd.weight", 0);
    for (int il = 0; il < s->n_layer; il++) {
        add_vec(p, INIT_NORM, E, "blk.%d.attn_norm.weight", il);
        if ((il + 1) % 4) {
            add_mat(p, E, 2 * kd + vd, "blk.%d.attn_qkv.weight", il);
            add_mat(p, E, vd, "blk.%d.attn_gate.weight", il);
            add_mat(p, 4, 2 * kd + vd, "blk.%d.ssm_conv1d.weight", il);
            add_vec(p, INIT_BIAS, s->ssm_v_heads, "blk.%d.ssm_dt.bias", il);
            add_vec(p, INIT_DECAY, s->ssm_v_heads, "blk.%d.ssm_a", il);
            if (s->family == SYN_QWEN3NEXT) add_mat(p, E, 2 * s->ssm_v_heads, "blk.%d.ssm_ba.weight", il);
            else {
                add_mat(p, E, s->ssm_v_heads, "blk.%d.ssm_beta.weight", il);
                add_mat(p, E, s->ssm_v_heads, "blk.%d.ssm_alpha.weight", il);
            }
            add_vec(p, INIT_NORM, s->ssm_state, "blk.%d.ssm_norm.weight", il);
            add_mat(p, vd, E, "blk.%d.ssm_out.weight", il);
        } else {
            add_mat(p, E, 2 * QD, "blk.%d.attn_q.weight", il);
            add_mat(p, E, KD, "blk.%d.attn_k.weight", il);
            add_mat(p, E, KD, "blk.%d.attn_v.weight", il);
            add_vec(p, INIT_NORM, s->head_dim, "blk.%d.attn_q_norm.weight", il);
            add_vec(p, INIT_NORM, s->head_dim, "blk.%d.attn_k_norm.weight", il);
            add_mat(p, QD, E, "blk.%d.attn_output.weight", il);
        }
        add_vec(p, INIT_NORM, E, "blk.%d.post_attention_norm.weight", il);
        if (!s->n_expert) {
            add_mat(p, E, s->n_ff, "blk.%d.ffn_gate.weight", il);
            add_mat(p, E, s->n_ff, "blk.%d.ffn_up.weight", il);
            add_mat(p, s->n_ff, E, "blk.%d.ffn_down.weight", il);
            continue;
        }
        add_mat(p, E, s->n_expert, "blk.%d.ffn_gate_inp.weight", il);
        add_stack(p, E, s->n_ff_exp, "blk.%d.ffn_gate_exps.weight", il);
        add_stack(p, E, s->n_ff_exp, "blk.%d.ffn_up_exps.weight", il);
        add_stack(p, s->n_ff_exp, E, "blk.%d.ffn_down_exps.weight", il);
        add_vec(p, INIT_WEIGHT, E, "blk.%d.ffn_gate_inp_shexp.weight", il);
        add_mat(p, E, s->n_ff_shexp, "blk.%d.ffn_gate_shexp.weight", il);
        add_mat(p, E, s->n_ff_shexp, "blk.%d.ffn_up_shexp.weight", il);
        add_mat(p, s->n_ff_shexp, E, "blk.%d.ffn_down_shexp.weight", il);
    }
    add_vec(p, INIT_NORM, E, "output_norm.weight", 0);
    if (s->untied) add_mat(p, E, s->n_vocab, "output.weight", 0);
}

static bool g4_swa(const synth_shape *s, int il) { return (il + 1) % s->swa_period != 0; }

/* Gemma 4 as convert_hf_to_gguf.py writes it: per-layer geometry (sliding / global), the KV-sharing layers
 * without K / V, rope_freqs for the global layers' proportional rope, per-layer embeddings, and in MoE models a
 * dense MLP beside routed experts with fused [gate | up] rows, router input scale and per-expert output scales. */
static void plan_gemma4(syn_plan *p) {
    const synth_shape *s = p->s;
    const int64_t E = s->n_embd, NL = s->n_layer, P = s->n_embd_per_layer, FE = s->n_ff_exp;
    add_mat(p, E, s->n_vocab, "token_embd.weight", 0);
    if (P) {
        add_mat(p, NL * P, s->n_vocab, "per_layer_token_embd.weight", 0);
        add_mat(p, E, NL * P, "per_layer_model_proj.weight", 0);
        add_vec(p, INIT_NORM, P, "per_layer_proj_norm.weight", 0);
    }
    if (NL >= s->swa_period)   /* the global layers' (llama.cpp refuses a file with it and none: --layers 2) */
        add_vec(p, INIT_ROPE_PROP, s->head_dim / 2, "rope_freqs.weight", 0);
    for (int il = 0; il < NL; il++) {
        const bool swa = g4_swa(s, il), shared = il >= NL - s->n_kv_shared;
        const int64_t hd = swa ? s->head_dim_swa : s->head_dim, KD = (swa ? s->n_head_kv_swa : s->n_head_kv) * hd;
        const int64_t QD = s->n_head * hd, F = shared && s->wide_shared ? 2 * s->n_ff : s->n_ff;
        add_vec(p, INIT_NORM, E, "blk.%d.attn_norm.weight", il);
        add_mat(p, E, QD, "blk.%d.attn_q.weight", il);
        add_vec(p, INIT_NORM, hd, "blk.%d.attn_q_norm.weight", il);
        if (!shared) {
            add_mat(p, E, KD, "blk.%d.attn_k.weight", il);
            if (swa || !s->k_eq_v) add_mat(p, E, KD, "blk.%d.attn_v.weight", il);
            add_vec(p, INIT_NORM, hd, "blk.%d.attn_k_norm.weight", il);
        }
        add_mat(p, QD, E, "blk.%d.attn_output.weight", il);
        add_vec(p, INIT_NORM, E, "blk.%d.post_attention_norm.weight", il);
        add_vec(p, INIT_NORM, E, "blk.%d.ffn_norm.weight", il);
        add_mat(p, E, F, "blk.%d.ffn_gate.weight", il);
        add_mat(p, E, F, "blk.%d.ffn_up.weight", il);
        add_mat(p, F, E, "blk.%d.ffn_down.weight", il);
        add_vec(p, INIT_NORM, E, "blk.%d.post_ffw_norm.weight", il);
        if (s->n_expert) {
            add_mat(p, E, s->n_expert, "blk.%d.ffn_gate_inp.weight", il);
            add_vec(p, INIT_NORM, E, "blk.%d.ffn_gate_inp.scale", il);
            add_vec(p, INIT_NORM, E, "blk.%d.pre_ffw_norm_2.weight", il);
            add_vec(p, INIT_NORM, E, "blk.%d.post_ffw_norm_1.weight", il);
            add_vec(p, INIT_NORM, E, "blk.%d.post_ffw_norm_2.weight", il);
            add_stack(p, E, 2 * FE, "blk.%d.ffn_gate_up_exps.weight", il);
            add_stack(p, FE, E, "blk.%d.ffn_down_exps.weight", il);
            add_vec(p, INIT_NORM, s->n_expert, "blk.%d.ffn_down_exps.scale", il);
        }
        if (P) {
            add_mat(p, E, P, "blk.%d.inp_gate.weight", il);
            add_mat(p, P, E, "blk.%d.proj.weight", il);
            add_vec(p, INIT_NORM, E, "blk.%d.post_norm.weight", il);
        }
        add_vec(p, INIT_NORM, 1, "blk.%d.layer_output_scale.weight", il);
    }
    add_vec(p, INIT_NORM, E, "output_norm.weight", 0);
}

#define G3N_ALTUP 4
#define G3N_LAUREL 64
#define G3N_SPARSE 10

/* Gemma 3n as its converter writes it: the per-layer embedding tables, AltUp's projection stacks (3-D), and per
 * layer Gemma 3's attention and FFN (K / V in the sharing layers too: the reference requires them), the per-layer
 * embedding's gate, projection and norm, AltUp's router and coefficients, LAuReL's two matrices and norm. */
static void plan_gemma3n(syn_plan *p) {
    const synth_shape *s = p->s;
    const int64_t E = s->n_embd, NL = s->n_layer, P = s->n_embd_per_layer, N = G3N_ALTUP;
    add_mat(p, E, s->n_vocab, "token_embd.weight", 0);
    add_mat(p, NL * P, s->n_vocab, "per_layer_token_embd.weight", 0);
    add_mat(p, E, NL * P, "per_layer_model_proj.weight", 0);
    add_vec(p, INIT_NORM, P, "per_layer_proj_norm.weight", 0);
    for (int k = 0; k < 2; k++) {
        add_mat(p, E, E, k ? "altup_unembd_proj.weight" : "altup_proj.weight", 0);
        if (p->oom) return;
        p->t[p->n - 1].n_dims = 3;
        p->t[p->n - 1].ne[2] = N - 1;
    }
    for (int il = 0; il < NL; il++) {
        plan_attention(p, il, true);
        for (int k = 1; k <= 2; k++) p->t[p->n - 1 - k].init = INIT_QK_GAIN;
        add_vec(p, INIT_NORM, E, "blk.%d.post_attention_norm.weight", il);
        plan_gated_ffn(p, il);
        add_vec(p, INIT_NORM, E, "blk.%d.post_ffw_norm.weight", il);
        add_mat(p, E, P, "blk.%d.inp_gate.weight", il);
        add_mat(p, P, E, "blk.%d.proj.weight", il);
        add_vec(p, INIT_NORM, E, "blk.%d.post_norm.weight", il);
        add_mat(p, N, N, "blk.%d.altup_correct_coef.weight", il);
        add_vec(p, INIT_NORM, E, "blk.%d.altup_correct_scale.weight", il);
        add_mat(p, N, N * N, "blk.%d.altup_predict_coef.weight", il);
        add_mat(p, E, N, "blk.%d.altup_router.weight", il);
        add_vec(p, INIT_NORM, E, "blk.%d.altup_router_norm.weight", il);
        add_mat(p, E, G3N_LAUREL, "blk.%d.laurel_l.weight", il);
        add_mat(p, G3N_LAUREL, E, "blk.%d.laurel_r.weight", il);
        add_vec(p, INIT_NORM, E, "blk.%d.laurel_post_norm.weight", il);
    }
    add_vec(p, INIT_NORM, E, "output_norm.weight", 0);
}

/* A bias of one row per expert (gpt-oss's expert biases: F32 matrices). */
static void add_bias_rows(syn_plan *p, int64_t n, const char *fmt, int il) {
    add_vec(p, INIT_BIAS, n, fmt, il);
    if (p->oom) return;
    syn_tensor *t = &p->t[p->n - 1];
    t->n_dims = 2;
    t->ne[1] = p->s->n_expert;
}

/* gpt-oss as convert_hf_to_gguf.py writes it: biased q/k/v/o, per-head sinks, post_attention_norm before the
 * experts, a biased router and biased expert stacks (gate_up split into gate and up), a separate output. */
static void plan_gptoss(syn_plan *p) {
    const synth_shape *s = p->s;
    const int64_t E = s->n_embd, QD = (int64_t)s->n_head * s->head_dim, KD = (int64_t)s->n_head_kv * s->head_dim;
    const int64_t FE = s->n_ff_exp;
    add_mat(p, E, s->n_vocab, "token_embd.weight", 0);
    for (int il = 0; il < s->n_layer; il++) {
        add_vec(p, INIT_NORM, E, "blk.%d.attn_norm.weight", il);
        add_mat(p, E, QD, "blk.%d.attn_q.weight", il);
        add_vec(p, INIT_BIAS, QD, "blk.%d.attn_q.bias", il);
        add_mat(p, E, KD, "blk.%d.attn_k.weight", il);
        add_vec(p, INIT_BIAS, KD, "blk.%d.attn_k.bias", il);
        add_mat(p, E, KD, "blk.%d.attn_v.weight", il);
        add_vec(p, INIT_BIAS, KD, "blk.%d.attn_v.bias", il);
        add_mat(p, QD, E, "blk.%d.attn_output.weight", il);
        add_vec(p, INIT_BIAS, E, "blk.%d.attn_output.bias", il);
        add_vec(p, INIT_BIAS, s->n_head, "blk.%d.attn_sinks.weight", il);
        add_vec(p, INIT_NORM, E, "blk.%d.post_attention_norm.weight", il);
        add_mat(p, E, s->n_expert, "blk.%d.ffn_gate_inp.weight", il);
        add_vec(p, INIT_BIAS, s->n_expert, "blk.%d.ffn_gate_inp.bias", il);
        add_stack(p, E, FE, "blk.%d.ffn_gate_exps.weight", il);
        add_bias_rows(p, FE, "blk.%d.ffn_gate_exps.bias", il);
        add_stack(p, E, FE, "blk.%d.ffn_up_exps.weight", il);
        add_bias_rows(p, FE, "blk.%d.ffn_up_exps.bias", il);
        add_stack(p, FE, E, "blk.%d.ffn_down_exps.weight", il);
        add_bias_rows(p, E, "blk.%d.ffn_down_exps.bias", il);
    }
    add_vec(p, INIT_NORM, E, "output_norm.weight", 0);
    add_mat(p, E, s->n_vocab, "output.weight", 0);
}

static void plan_gpt2(syn_plan *p) {
    const synth_shape *s = p->s;
    int64_t E = s->n_embd, F = s->n_ff, QKV = 3 * E;
    add_mat(p, E, s->n_vocab, "token_embd.weight", 0);
    add_mat(p, E, s->n_ctx, "position_embd.weight", 0);
    for (int il = 0; il < s->n_layer; il++) {
        add_vec(p, INIT_NORM, E, "blk.%d.attn_norm.weight", il);
        add_vec(p, INIT_BIAS, E, "blk.%d.attn_norm.bias", il);
        add_mat(p, E, QKV, "blk.%d.attn_qkv.weight", il);
        add_vec(p, INIT_BIAS, QKV, "blk.%d.attn_qkv.bias", il);
        add_mat(p, E, E, "blk.%d.attn_output.weight", il);
        add_vec(p, INIT_BIAS, E, "blk.%d.attn_output.bias", il);
        add_vec(p, INIT_NORM, E, "blk.%d.ffn_norm.weight", il);
        add_vec(p, INIT_BIAS, E, "blk.%d.ffn_norm.bias", il);
        add_mat(p, E, F, "blk.%d.ffn_up.weight", il);
        add_vec(p, INIT_BIAS, F, "blk.%d.ffn_up.bias", il);
        add_mat(p, F, E, "blk.%d.ffn_down.weight", il);
        add_vec(p, INIT_BIAS, E, "blk.%d.ffn_down.bias", il);
    }
    add_vec(p, INIT_NORM, E, "output_norm.weight", 0);
    add_vec(p, INIT_BIAS, E, "output_norm.bias", 0);
}

static int plan_build(syn_plan *p, const synth_shape *s, const synth_ftype *ft, hearth_err *err) {
    memset(p, 0, sizeof *p);
    p->s = s;
    p->ft = ft;
    if (s->family == SYN_GPT2) plan_gpt2(p);
    else if (s->family == SYN_QWEN35 || s->family == SYN_QWEN3NEXT) plan_qwen35(p);
    else if (s->family == SYN_GEMMA4) plan_gemma4(p);
    else if (s->family == SYN_GPTOSS) plan_gptoss(p);
    else if (s->family == SYN_GEMMA3N) plan_gemma3n(p);
    else plan_llama_like(p);
    if (p->oom) return herr(err, "out of memory");
    for (int i = 0; i < p->n; i++)
        p->t[i].nbytes = ht_row_size(p->t[i].type, p->t[i].ne[0]) * (uint64_t)p->t[i].ne[1] * (uint64_t)p->t[i].ne[2];
    return 0;
}

/* ---- metadata ---- */

static const char *arch_name(const synth_shape *s) {
    static const char *const names[] = { "llama", "qwen3", "gemma3", "gpt2", "qwen3moe", "qwen35", "qwen3next", "gemma4",
                                          "gpt-oss", "gemma3n" };
    return s->family == SYN_QWEN35 && s->n_expert ? "qwen35moe" : names[s->family];
}

static void kv_u32(gguf_writer *w, const synth_shape *s, const char *suffix, uint32_t v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch_name(s), suffix);
    gguf_w_u32(w, key, v);
}

static void kv_f32(gguf_writer *w, const synth_shape *s, const char *suffix, float v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch_name(s), suffix);
    gguf_w_f32(w, key, v);
}

/* Gemma 4's per-layer metadata, as its converter writes it (partial rotary factor 0.25 on the global layers:
 * rope_freqs, INIT_ROPE_PROP, leaves the rest of the pairs unrotated). */
static void write_gemma4_hparams(gguf_writer *w, const synth_shape *s) {
    char key[128];
    int32_t *kv = malloc((size_t)s->n_layer * sizeof *kv), *ff = malloc((size_t)s->n_layer * sizeof *ff);
    uint8_t *pat = malloc((size_t)s->n_layer);
    if (!kv || !ff || !pat) { free(kv); free(ff); free(pat); return; }   /* the file then fails to load: no key */
    for (int il = 0; il < s->n_layer; il++) {
        pat[il] = g4_swa(s, il);
        kv[il] = pat[il] ? s->n_head_kv_swa : s->n_head_kv;
        ff[il] = il >= s->n_layer - s->n_kv_shared && s->wide_shared ? 2 * s->n_ff : s->n_ff;
    }
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch_name(s));
    gguf_w_arr_i32(w, key, kv, (uint64_t)s->n_layer);
    if (s->wide_shared) {
        snprintf(key, sizeof key, "%s.feed_forward_length", arch_name(s));
        gguf_w_arr_i32(w, key, ff, (uint64_t)s->n_layer);
    }
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch_name(s));
    gguf_w_arr(w, key, GGUF_BOOL, pat, (uint64_t)s->n_layer);
    kv_u32(w, s, "attention.key_length_swa", (uint32_t)s->head_dim_swa);
    kv_u32(w, s, "attention.value_length_swa", (uint32_t)s->head_dim_swa);
    kv_u32(w, s, "rope.dimension_count", (uint32_t)s->head_dim);
    kv_u32(w, s, "rope.dimension_count_swa", (uint32_t)s->head_dim_swa);
    kv_u32(w, s, "attention.shared_kv_layers", (uint32_t)s->n_kv_shared);
    kv_u32(w, s, "embedding_length_per_layer_input", (uint32_t)s->n_embd_per_layer);
    kv_f32(w, s, "final_logit_softcapping", 30.0f);
    free(kv); free(ff); free(pat);
}

/* Gemma 3n's own keys, as its converter writes them: the sparsity's std multiplier per layer (the normal quantile
 * of 0.95 on the first layers, of 0 (-inf) on the rest), the sliding flags. */
static void write_gemma3n_hparams(gguf_writer *w, const synth_shape *s) {
    char key[128];
    float *sp = malloc((size_t)s->n_layer * sizeof *sp);
    uint8_t *pat = malloc((size_t)s->n_layer);
    if (!sp || !pat) { free(sp); free(pat); return; }   /* the file then fails to load: no key */
    for (int il = 0; il < s->n_layer; il++) {
        sp[il] = il < G3N_SPARSE ? 1.6448533535003662f : -INFINITY;
        pat[il] = g4_swa(s, il);
    }
    snprintf(key, sizeof key, "%s.activation_sparsity_scale", arch_name(s));
    gguf_w_arr_f32(w, key, sp, (uint64_t)s->n_layer);
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch_name(s));
    gguf_w_arr(w, key, GGUF_BOOL, pat, (uint64_t)s->n_layer);
    kv_u32(w, s, "altup.active_idx", 0);
    kv_u32(w, s, "altup.num_inputs", G3N_ALTUP);
    kv_u32(w, s, "embedding_length_per_layer_input", (uint32_t)s->n_embd_per_layer);
    kv_u32(w, s, "attention.shared_kv_layers", (uint32_t)s->n_kv_shared);
    kv_f32(w, s, "final_logit_softcapping", 30.0f);
    free(sp); free(pat);
}

/* The hyperparameters as convert_hf_to_gguf.py writes them for the family. */
static void write_hparams(gguf_writer *w, const synth_shape *s, const synth_ftype *ft) {
    gguf_w_str(w, "general.architecture", arch_name(s));
    gguf_w_str(w, "general.type", "model");
    gguf_w_str(w, "general.name", s->label);
    gguf_w_str(w, "general.size_label", s->size_label);
    kv_u32(w, s, "block_count", (uint32_t)s->n_layer);
    kv_u32(w, s, "context_length", (uint32_t)s->n_ctx);
    kv_u32(w, s, "embedding_length", (uint32_t)s->n_embd);
    if ((s->family != SYN_QWEN35 || !s->n_expert) && !(s->family == SYN_GEMMA4 && s->wide_shared))
        kv_u32(w, s, "feed_forward_length", (uint32_t)s->n_ff);
    kv_u32(w, s, "attention.head_count", (uint32_t)s->n_head);
    if (s->family == SYN_GPT2) {
        kv_f32(w, s, "attention.layer_norm_epsilon", s->norm_eps);
    } else {
        if (s->family != SYN_GEMMA4) kv_u32(w, s, "attention.head_count_kv", (uint32_t)s->n_head_kv);
        kv_f32(w, s, "rope.freq_base", s->rope_base);
        if (s->rope_base_swa > 0) kv_f32(w, s, "rope.freq_base_swa", s->rope_base_swa);
        kv_f32(w, s, "attention.layer_norm_rms_epsilon", s->norm_eps);
        kv_u32(w, s, "attention.key_length", (uint32_t)s->head_dim);
        kv_u32(w, s, "attention.value_length", (uint32_t)s->head_dim);
        if (s->sliding_window) kv_u32(w, s, "attention.sliding_window", (uint32_t)s->sliding_window);
    }
    if (s->n_expert) {
        kv_u32(w, s, "expert_count", (uint32_t)s->n_expert);
        kv_u32(w, s, "expert_used_count", (uint32_t)s->n_expert_used);
        kv_u32(w, s, "expert_feed_forward_length", (uint32_t)s->n_ff_exp);
    }
    if (s->family == SYN_LLAMA) {
        kv_u32(w, s, "vocab_size", (uint32_t)s->n_vocab);
        kv_u32(w, s, "rope.dimension_count", (uint32_t)s->head_dim);
    }
    if (s->family == SYN_QWEN35 || s->family == SYN_QWEN3NEXT) {   /* as the converter writes them */
        char key[128];
        const int32_t sections[4] = { s->n_rot * 11 / 64, s->n_rot * 11 / 64, s->n_rot / 2 - 2 * (s->n_rot * 11 / 64), 0 };
        snprintf(key, sizeof key, "%s.rope.dimension_sections", arch_name(s));
        if (s->family == SYN_QWEN35) gguf_w_arr_i32(w, key, sections, 4);   /* Qwen3.5 (text): M-RoPE sections 11/11/10 */
        kv_u32(w, s, "rope.dimension_count", (uint32_t)s->n_rot);
        kv_u32(w, s, "ssm.conv_kernel", 4);
        kv_u32(w, s, "ssm.state_size", (uint32_t)s->ssm_state);
        kv_u32(w, s, "ssm.group_count", (uint32_t)s->ssm_k_heads);
        kv_u32(w, s, "ssm.time_step_rank", (uint32_t)s->ssm_v_heads);
        kv_u32(w, s, "ssm.inner_size", (uint32_t)(s->ssm_v_heads * s->ssm_state));
        kv_u32(w, s, "full_attention_interval", 4);
        if (s->n_ff_shexp) kv_u32(w, s, "expert_shared_feed_forward_length", (uint32_t)s->n_ff_shexp);
    }
    if (s->family == SYN_GEMMA4) write_gemma4_hparams(w, s);
    if (s->family == SYN_GEMMA3N) write_gemma3n_hparams(w, s);
    if (s->rope_yarn_factor > 0) {   /* config.json's rope_scaling (yarn, beta_fast 32, beta_slow 1) */
        char key[128];
        snprintf(key, sizeof key, "%s.rope.scaling.type", arch_name(s));
        gguf_w_str(w, key, "yarn");
        kv_f32(w, s, "rope.scaling.factor", s->rope_yarn_factor);
        kv_u32(w, s, "rope.scaling.original_context_length", (uint32_t)s->rope_yarn_orig_ctx);
        kv_f32(w, s, "rope.scaling.yarn_beta_fast", 32.0f);
        kv_f32(w, s, "rope.scaling.yarn_beta_slow", 1.0f);
    }
    gguf_w_u32(w, "general.file_type", ft->file_type);
    gguf_w_u32(w, "general.quantization_version", GGUF_QUANT_VERSION);
}

static void write_tokenizer(gguf_writer *w, const synth_shape *s, const synth_vocab *v) {
    static const char *const pre[] = { "llama-bpe", "qwen2", "default", "gpt-2", "qwen2", "qwen2", "qwen2", "default", "gpt-4o",
                                       "default" };
    const bool spm = s->family == SYN_GEMMA3 || s->family == SYN_GEMMA4 || s->family == SYN_GEMMA3N;
    gguf_w_str(w, "tokenizer.ggml.model", spm ? "llama" : "gpt2");
    gguf_w_str(w, "tokenizer.ggml.pre", pre[s->family]);
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, (uint64_t)v->n);
    if (v->scores) gguf_w_arr_f32(w, "tokenizer.ggml.scores", v->scores, (uint64_t)v->n);
    gguf_w_arr_i32(w, "tokenizer.ggml.token_type", v->types, (uint64_t)v->n);
    if (v->n_merges) gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, (uint64_t)v->n_merges);
    if (v->bos >= 0) gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos);
    if (v->eos >= 0) gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos);
    if (v->unk >= 0) gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)v->unk);
    if (v->pad >= 0) gguf_w_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)v->pad);
    if (spm) {
        gguf_w_bool(w, "tokenizer.ggml.add_bos_token", true);
        gguf_w_bool(w, "tokenizer.ggml.add_eos_token", false);
        gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", false);
    } else if (s->family == SYN_QWEN3 || s->family == SYN_QWEN3MOE || s->family == SYN_QWEN35 || s->family == SYN_QWEN3NEXT) {
        gguf_w_bool(w, "tokenizer.ggml.add_bos_token", false);
    }
}

static int build_vocab(const synth_shape *s, synth_vocab *v, hearth_err *err) {
    /* Gemma 4 takes Gemma 3's synthetic SentencePiece vocabulary (of the same 262144 tokens): its own BPE merges are
     * not synthesized */
    static const synth_vocab_kind kinds[] = { SV_BPE_LLAMA3, SV_BPE_QWEN, SV_SPM_GEMMA, SV_BPE_GPT2, SV_BPE_QWEN, SV_BPE_QWEN,
                                              SV_BPE_QWEN, SV_SPM_GEMMA, SV_BPE_HARMONY, SV_SPM_GEMMA };
    synth_vocab_layout l = { kinds[s->family], s->n_vocab, s->n_text };
    return synth_vocab_build(&l, v, err);
}

/* ---- file layout ---- */

static int pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off) {
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return k < 0 ? errno : EIO;
        p += k; n -= (size_t)k; off += (uint64_t)k;
    }
    return 0;
}

typedef struct { uint8_t *p; size_t n, cap; bool oom; } blob;

static void blob_put(blob *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1 << 16;
        while (nc < b->n + n) nc *= 2;
        uint8_t *q = realloc(b->p, nc);
        if (!q) { b->oom = true; return; }
        b->p = q; b->cap = nc;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void blob_le(blob *b, uint64_t v, int bytes) {
    uint8_t le[8];
    for (int i = 0; i < bytes; i++) le[i] = (uint8_t)(v >> (8 * i));
    blob_put(b, le, (size_t)bytes);
}

/* GGUF tensor infos (name, dims, type, offset in the data section), assigning each tensor's data offset. */
static void tensor_infos(syn_plan *p, blob *b, uint64_t *data_bytes) {
    uint64_t off = 0;
    for (int i = 0; i < p->n; i++) {
        const syn_tensor *t = &p->t[i];
        blob_le(b, strlen(t->name), 8);
        blob_put(b, t->name, strlen(t->name));
        blob_le(b, (uint64_t)t->n_dims, 4);
        for (int d = 0; d < t->n_dims; d++) blob_le(b, (uint64_t)t->ne[d], 8);
        blob_le(b, t->type, 4);
        blob_le(b, off, 8);
        p->t[i].file_off = off;
        off = (off + t->nbytes + GGUF_ALIGN - 1) / GGUF_ALIGN * GGUF_ALIGN;
    }
    *data_bytes = off;
}

/* The file without tensor data: gguf_writer writes the metadata (a tensorless GGUF); the tensor infos are
 * appended, the tensor count patched in, and the file extended (sparse) to its full size. Sets file_off. */
static int write_skeleton(syn_plan *p, const synth_vocab *v, int fd, const char *path, hearth_err *err) {
    gguf_writer *w = gguf_writer_new();
    write_hparams(w, p->s, p->ft);
    write_tokenizer(w, p->s, v);
    int rc = gguf_writer_write_fd(w, fd, path, err);
    gguf_writer_free(w);
    if (rc) return -1;
    blob infos = { 0 }, count = { 0 };
    uint64_t data_bytes = 0;
    tensor_infos(p, &infos, &data_bytes);
    blob_le(&count, (uint64_t)p->n, 8);
    off_t end = lseek(fd, 0, SEEK_END);
    uint64_t data_off = ((uint64_t)end + infos.n + GGUF_ALIGN - 1) / GGUF_ALIGN * GGUF_ALIGN;
    int e = infos.oom || count.oom ? ENOMEM : end < 0 ? errno : 0;
    if (!e) e = pwrite_all(fd, count.p, count.n, GGUF_COUNT_OFFSET);
    if (!e) e = pwrite_all(fd, infos.p, infos.n, (uint64_t)end);
    if (!e && ftruncate(fd, (off_t)(data_off + data_bytes))) e = errno;
    free(infos.p);
    free(count.p);
    for (int i = 0; i < p->n; i++) p->t[i].file_off += data_off;
    return e ? herr(err, "cannot write %s: %s", path, strerror(e)) : 0;
}

/* Reopens the finished file with the reader (every check it makes) and confirms the layout. */
static int verify_file(const syn_plan *p, const char *tmp, const char *path, hearth_err *err) {
    gguf_file *g;
    if (gguf_open(tmp, &g, err)) return -1;
    int rc = g->n_tensors == (uint64_t)p->n ? 0 : herr(err, "%s: wrote %d tensors, reader sees %llu", path, p->n, (unsigned long long)g->n_tensors);
    for (int i = 0; !rc && i < p->n; i++)
        if (g->data_offset + g->tensors[i].offset != p->t[i].file_off || g->tensors[i].nbytes != p->t[i].nbytes)
            rc = herr(err, "%s: tensor '%s' is not where it was written", path, p->t[i].name);
    gguf_close(g);
    return rc;
}

/* ---- weights ---- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* 65536 unit-variance bell-shaped values: each the sum of 12 uniforms (Irwin-Hall), in exact arithmetic so
 * the table is the same everywhere. Weights are looked up by 16 random bits (4 per splitmix64 draw). */
static float NOISE[1 << 16];

static void noise_table_init(void) {
    uint64_t st = 0x6e6f697365ull;
    for (int i = 0; i < 1 << 16; i++) {
        int64_t sum = 0;
        for (int k = 0; k < 3; k++) {
            uint64_t r = splitmix64(&st);
            sum += (int64_t)(r & 0xffff) + (int64_t)((r >> 16) & 0xffff) + (int64_t)((r >> 32) & 0xffff) + (int64_t)(r >> 48);
        }
        NOISE[i] = (float)((double)(2 * sum - 12 * 65535) / (2.0 * 65536.0));
    }
}

static void fill_noise(float *x, int64_t n, uint64_t state, float mean, float std) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint64_t r = splitmix64(&state);
        for (int k = 0; k < 4; k++) x[i + k] = mean + std * NOISE[(r >> (16 * k)) & 0xffff];
    }
    for (uint64_t r = splitmix64(&state); i < n; i++, r >>= 16) x[i] = mean + std * NOISE[r & 0xffff];
}

/* llama 3.x rope frequency factors, as convert_hf_to_gguf.py computes them (low 1, high 4). */
static void fill_rope_llama3(float *x, int64_t n, const synth_shape *s) {
    double lo_wav = s->rope_llama3_orig_ctx / 1.0, hi_wav = s->rope_llama3_orig_ctx / 4.0, f = s->rope_llama3_factor;
    for (int64_t i = 0; i < n; i++) {
        double freq = 1.0 / pow(s->rope_base, (double)(2 * i) / (double)(2 * n)), wav = 2 * M_PI / freq;
        if (wav < hi_wav) x[i] = 1.0f;
        else if (wav > lo_wav) x[i] = (float)f;
        else {
            double smooth = (s->rope_llama3_orig_ctx / wav - 1.0) / (4.0 - 1.0);
            x[i] = (float)(1.0 / ((1 - smooth) / f + smooth));
        }
    }
}

/* A layer's output projections (attention output, FFN down, experts' and shared experts' down): what --layer-scale
 * scales. */
static bool is_layer_output(const char *name) { return strstr(name, ".attn_output.") || strstr(name, ".ffn_down"); }

/* ---- the --layer-scale construction: a model whose greedy continuations survive quantization ----
 *
 * Random weights give near-flat logits, and with a tied output the current token's own embedding wins whenever the
 * layers are small (logits are E * h, so a residual stream h ~ e_t scores t highest: the output repeats). So with
 * --layer-scale the weights stay random but carry one planted structure:
 * - R, a random signed permutation of the embedding dims past the first block of SUCC_PAD; the vocabulary is cut
 *   into orbits of SUCC_ORBIT tokens (special tokens alone), token i*L+j has the embedding R^j b_i (b_i random, SUCC_EMB_STD per dim),
 *   so R maps each token's embedding onto the next one's in its orbit; the first SUCC_PAD dims of every embedding
 *   hold one constant (as much energy as the random part), the same for every token, so it moves no logit;
 * - the last layer's FFN computes ~ (SUCC_GAIN * R - I) of its input: 2n of its hidden units (n = n_embd - PAD)
 *   have gate rows reading the constant block (so silu(gate) ~ silu(4), a constant: the unit is linear) and up
 *   rows reading one dim each; ffn_down sends unit k to dim R(k) (the successor) and unit n+k back to dim k with
 *   the opposite sign (cancelling the current token's own embedding). Everything else is the usual noise, the
 *   layers' output projections scaled by X as before.
 * The residual stream leaving the last layer is then ~ SUCC_GAIN times the next token's embedding plus the layers'
 * noise: inside an orbit the successor wins by a wide margin (stable under Q4_0), and at an orbit's end R^L b_i
 * matches no token, so the argmax is a near-tie among random tokens (context-dependent, where quantization flips
 * some): continuations walk an orbit, jump, walk another, never repeating one token. */
#define SUCC_PAD 32            /* one Q4_0 / Q8_0 block: the constant quantizes exactly */
#define SUCC_ORBIT 4
#define SUCC_GAIN 3.0f
#define SUCC_EMB_STD 1.0f
#define SUCC_GATE 4.0f         /* the planted units' gate input */

typedef struct {
    bool on;
    int d, n, L;               /* n_embd, the permuted dims (d - PAD), the orbit length */
    int n_text;                /* the tokens in orbits (the rest are special) */
    int *pw;                   /* pw[j*n + k]: where R^j sends dim k (j < L); sg: its sign */
    int8_t *sg;
    int *inv;                  /* R's inverse permutation */
    float pad, gate, up, down_succ, down_self;
    char gate_name[64], up_name[64], down_name[64];
} syn_succ;

static void succ_free(syn_succ *c) { free(c->pw); free(c->sg); free(c->inv); }

static int succ_init(syn_succ *c, const synth_shape *s, uint64_t seed, hearth_err *err) {
    memset(c, 0, sizeof *c);
    int d = s->n_embd, n = d - SUCC_PAD, L = SUCC_ORBIT;
    if ((s->family != SYN_LLAMA && s->family != SYN_QWEN3) || n < SUCC_PAD || s->n_ff < 2 * n)
        return herr(err, "--layer-scale needs a llama or qwen3 shape (a dense FFN at least twice as wide as the embedding)");
    c->pw = malloc((size_t)L * n * sizeof *c->pw);
    c->sg = malloc((size_t)L * n);
    c->inv = malloc((size_t)n * sizeof *c->inv);
    if (!c->pw || !c->sg || !c->inv) { succ_free(c); return herr(err, "out of memory"); }
    uint64_t st = seed ^ 0x7375636365737372ull;
    int *rho = c->inv;         /* R's permutation (Fisher-Yates), inverted in place below */
    for (int k = 0; k < n; k++) rho[k] = k;
    for (int k = n - 1; k > 0; k--) {
        int r = (int)(splitmix64(&st) % (uint64_t)(k + 1)), t = rho[k];
        rho[k] = rho[r]; rho[r] = t;
    }
    for (int k = 0; k < n; k++) { c->pw[k] = k; c->sg[k] = 1; }
    for (int j = 1; j < L; j++)
        for (int k = 0; k < n; k++) {
            int prev = c->pw[(j - 1) * n + k];
            c->pw[j * n + k] = rho[prev];
            uint64_t h = seed ^ ((uint64_t)prev * 0x9e3779b97f4a7c15ull);   /* R's sign for dim prev */
            c->sg[j * n + k] = (int8_t)(c->sg[(j - 1) * n + k] * (splitmix64(&h) & 1 ? -1 : 1));
        }
    for (int k = 0; k < n; k++) c->inv[c->pw[n + k]] = k;
    /* the input of the last FFN: the constant block's dims at sqrt(d/64) each after the norm (it has half the
     * energy), a random dim at e/rms0 */
    float rms0 = SUCC_EMB_STD * sqrtf(2.0f * n / d), silu = SUCC_GATE / (1 + expf(-SUCC_GATE));
    c->on = true; c->d = d; c->n = n; c->L = L; c->n_text = s->n_text;
    c->pad = SUCC_EMB_STD * sqrtf((float)n / SUCC_PAD);
    c->gate = SUCC_GATE / (SUCC_PAD * sqrtf(d / 64.0f));
    c->up = c->down_self = sqrtf(rms0 / silu);
    c->down_succ = SUCC_GAIN * c->down_self;
    snprintf(c->gate_name, sizeof c->gate_name, "blk.%d.ffn_gate.weight", s->n_layer - 1);
    snprintf(c->up_name, sizeof c->up_name, "blk.%d.ffn_up.weight", s->n_layer - 1);
    snprintf(c->down_name, sizeof c->down_name, "blk.%d.ffn_down.weight", s->n_layer - 1);
    return 0;
}

/* The sign R gives dim k (drawn per dim, the same for every power). */
static int succ_sign(const syn_succ *c, int k) { return c->sg[c->n + k]; }

/* Fills x with the planted part of a row where there is one (returns true), on top of the noise already in x. */
static bool succ_row(const syn_succ *c, const char *name, uint64_t seed, int64_t row, float *x) {
    const int n = c->n, P = SUCC_PAD;
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight")) {
        /* special tokens (BOS, EOS, ...) start orbits of their own: no token leads to one but by chance */
        int64_t orbit = row < c->n_text ? row / c->L : c->n_text + row;
        int j = row < c->n_text ? (int)(row % c->L) : 0;
        float *b = x + c->d;   /* scratch: the writer's row buffer holds CHUNK_ELEMS floats */
        uint64_t st = seed ^ name_hash("token_embd.weight");
        fill_noise(b, n, splitmix64(&st) ^ ((uint64_t)orbit * 0xd1b54a32d192ed03ull), 0.0f, SUCC_EMB_STD);
        for (int k = 0; k < P; k++) x[k] = c->pad;
        for (int k = 0; k < n; k++) x[P + c->pw[j * n + k]] = c->sg[j * n + k] * b[k];
        return true;
    }
    if (!strcmp(name, c->gate_name)) {
        if (row < 2 * n) for (int k = 0; k < P; k++) x[k] += c->gate;
        return true;
    }
    if (!strcmp(name, c->up_name)) {
        if (row < 2 * n) x[P + row % n] += c->up;
        return true;
    }
    if (!strcmp(name, c->down_name)) {
        if (row >= P) {
            int o = (int)row - P, k = c->inv[o];
            x[k] += succ_sign(c, k) * c->down_succ;
            x[n + o] -= c->down_self;
        }
        return true;
    }
    return false;
}

static void fill_row(const syn_tensor *t, const synth_shape *s, uint64_t seed, float layer_scale, const syn_succ *succ,
                     int64_t row, float *x) {
    uint64_t st = seed ^ name_hash(t->name);
    st = splitmix64(&st) ^ ((uint64_t)row * 0xd1b54a32d192ed03ull);
    if (t->init == INIT_ROPE_LLAMA3) fill_rope_llama3(x, t->ne[0], s);
    else if (t->init == INIT_ROPE_PROP)   /* the first quarter of the pairs rotate, the rest not (divisor 1e30) */
        for (int64_t i = 0; i < t->ne[0]; i++) x[i] = i < t->ne[0] / 4 ? 1.0f : 1e30f;
    else if (t->init == INIT_DECAY)   /* ssm_a = -exp(A_log), A_log spread over log 1 .. log 16 as initialized */
        for (int64_t i = 0; i < t->ne[0]; i++) x[i] = -expf(logf(16.0f) * (float)i / (float)HT_MAX(t->ne[0] - 1, 1));
    else if (t->init == INIT_NORM) fill_noise(x, t->ne[0], st, 1.0f, WEIGHT_STD);
    else if (t->init == INIT_QK_GAIN) fill_noise(x, t->ne[0], st, 0.25f, WEIGHT_STD);
    else if (t->init == INIT_WEIGHT && layer_scale != 1 && is_layer_output(t->name))
        fill_noise(x, t->ne[0], st, 0.0f, WEIGHT_STD * layer_scale);
    else fill_noise(x, t->ne[0], st, 0.0f, WEIGHT_STD);
    if (succ->on && t->init == INIT_WEIGHT) succ_row(succ, t->name, seed, row, x);
}

/* ---- streaming writer ---- */

typedef struct { int ti; int64_t r0, r1; } syn_chunk;

typedef struct {
    const syn_plan *p;
    uint64_t seed;
    float layer_scale;
    syn_succ succ;
    int fd;
    syn_chunk *chunks;
    int n_chunks;
    atomic_int next;
    atomic_int error;          /* errno of the first failure */
    pthread_mutex_t mu;
    uint64_t done, total;
    synth_progress_fn progress;
    void *user;
} syn_job;

static int make_chunks(syn_job *j, hearth_err *err) {
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        n = 0;
        for (int ti = 0; ti < j->p->n; ti++) {
            const syn_tensor *t = &j->p->t[ti];
            int64_t rows = HT_MAX(1, CHUNK_ELEMS / t->ne[0]);
            const int64_t all = t->ne[1] * t->ne[2];   /* an expert stack's rows, expert after expert */
            for (int64_t r = 0; r < all; r += rows, n++)
                if (pass) j->chunks[n] = (syn_chunk){ ti, r, HT_MIN(all, r + rows) };
        }
        if (!pass && !(j->chunks = malloc((size_t)(n ? n : 1) * sizeof *j->chunks))) return herr(err, "out of memory");
    }
    j->n_chunks = n;
    return 0;
}

static void report(syn_job *j, uint64_t bytes) {
    pthread_mutex_lock(&j->mu);
    j->done += bytes;
    if (j->progress) j->progress(j->user, j->done, j->total);
    pthread_mutex_unlock(&j->mu);
}

/* Generates, quantizes and writes one chunk of rows; returns 0 or an errno. The types with no plain quantizer
 * (the i-quants that need an importance matrix) are weighted by `ones`, a uniform one, as quantize does for the
 * tensors an imatrix never covers. */
static int write_chunk(syn_job *j, const syn_chunk *c, float *x, uint8_t *q, const float *ones) {
    const syn_tensor *t = &j->p->t[c->ti];
    const ht_traits *tr = ht_get_traits_ref(t->type);
    ht_quantize_weighted_fn wq = tr->from_float ? NULL : ht_ref_quantize_weighted(t->type);
    if (!tr->from_float && !wq) return ENOTSUP;
    size_t rb = ht_row_size(t->type, t->ne[0]);
    for (int64_t r = c->r0; r < c->r1; r++) {
        fill_row(t, j->p->s, j->seed, j->layer_scale, &j->succ, r, x);
        if (wq) wq(x, q + (size_t)(r - c->r0) * rb, t->ne[0], ones);
        else tr->from_float(x, q + (size_t)(r - c->r0) * rb, t->ne[0]);
    }
    size_t bytes = (size_t)(c->r1 - c->r0) * rb;
    int e = pwrite_all(j->fd, q, bytes, t->file_off + (uint64_t)c->r0 * rb);
    if (!e) report(j, bytes);
    return e;
}

static void writer_thread(void *arg, int ith, int nth) {
    (void)ith; (void)nth;
    syn_job *j = arg;
    int64_t max_ne0 = 1;
    for (int i = 0; i < j->p->n; i++) max_ne0 = HT_MAX(max_ne0, j->p->t[i].ne[0]);
    size_t elems = (size_t)HT_MAX(CHUNK_ELEMS, max_ne0);
    float *x = malloc(elems * sizeof(float));
    uint8_t *q = malloc(elems * sizeof(float) + 4096);   /* no format is larger than F32 */
    float *ones = malloc((size_t)max_ne0 * sizeof(float));
    if (!x || !q || !ones) { int z = 0; atomic_compare_exchange_strong(&j->error, &z, ENOMEM); }
    for (int64_t i = 0; ones && i < max_ne0; i++) ones[i] = 1.0f;
    for (int c; x && q && ones && !atomic_load(&j->error) && (c = atomic_fetch_add(&j->next, 1)) < j->n_chunks;) {
        int e = write_chunk(j, &j->chunks[c], x, q, ones);
        if (e) { int z = 0; atomic_compare_exchange_strong(&j->error, &z, e); }
    }
    free(x);
    free(q);
    free(ones);
}

static int write_weights(const syn_plan *p, int fd, const char *path, const synth_opts *o, hearth_err *err) {
    syn_job j = { .p = p, .seed = o->seed, .layer_scale = o->layer_scale > 0 ? o->layer_scale : 1, .progress = o->progress, .user = o->user, .fd = fd };
    for (int i = 0; i < p->n; i++) j.total += p->t[i].nbytes;
    if (o->layer_scale > 0 && succ_init(&j.succ, p->s, o->seed, err)) return -1;
    if (make_chunks(&j, err)) { succ_free(&j.succ); return -1; }
    pthread_mutex_init(&j.mu, NULL);
    ht_pool *pool = pool_new(o->n_threads > 0 ? o->n_threads : 2);
    if (pool) { pool_run(pool, writer_thread, &j); pool_free(pool); }
    pthread_mutex_destroy(&j.mu);
    int e = pool ? atomic_load(&j.error) : ENOMEM;
    free(j.chunks);
    succ_free(&j.succ);
    return e ? herr(err, "cannot write %s: %s", path, strerror(e)) : 0;
}

int synth_write(const synth_shape *s, const synth_ftype *ft, const char *path, const synth_opts *o, hearth_err *err) {
    syn_plan p;
    synth_vocab v;
    if (plan_build(&p, s, ft, err)) { free(p.t); return -1; }
    if (build_vocab(s, &v, err)) { free(p.t); return -1; }
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, noise_table_init);
    /* written under a temp name, renamed into place once complete and read back */
    ht_afile f;
    int rc = ht_afile_open(&f, path, err);
    if (!rc) rc = write_skeleton(&p, &v, f.fd, path, err);
    synth_vocab_free(&v);
    if (!rc) rc = write_weights(&p, f.fd, path, o, err);
    if (!rc) rc = verify_file(&p, f.tmp ? f.tmp : path, path, err);
    if (!rc) rc = ht_afile_commit(&f, err);
    else ht_afile_abort(&f);
    free(p.t);
    return rc;
}
