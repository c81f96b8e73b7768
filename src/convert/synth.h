/* synth.h — synthetic models: GGUF files with random weights but the exact tensor names, shapes, types and
 * metadata of a named real model (as llama.cpp's converter and llama-quantize write them), plus a synthetic
 * tokenizer of the right size, so benchmarks and tests can run real-sized models without downloading any.
 * Weights depend only on (seed, tensor, row): files are byte-identical for a seed whatever the thread count. */
#ifndef HEARTH_SYNTH_H
#define HEARTH_SYNTH_H

#include "common.h"

typedef enum { SYN_LLAMA, SYN_QWEN3, SYN_GEMMA3, SYN_GPT2, SYN_QWEN3MOE, SYN_QWEN35, SYN_QWEN3NEXT, SYN_GEMMA4,
               SYN_GPTOSS, SYN_GEMMA3N } synth_family;

typedef struct {
    const char *name;          /* "llama-3.2-1b", or a tiny test shape "tiny-llama" */
    const char *label;         /* general.name */
    const char *size_label;    /* general.size_label */
    synth_family family;
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    int n_vocab;               /* embedding rows = tokenizer size */
    int n_text;                /* BPE: byte + merge tokens (the rest: special tokens, padding) */
    int n_ctx;                 /* context_length */
    float rope_base, rope_base_swa, norm_eps;
    int sliding_window;        /* gemma3 */
    float rope_llama3_factor;  /* > 0: write rope_freqs.weight the way llama 3.x's converter computes it */
    int rope_llama3_orig_ctx;
    int n_expert, n_expert_used, n_ff_exp;   /* qwen3moe: expert stacks in place of the dense FFN */
    bool untied;               /* a separate output.weight (the others tie it to the embedding) */
    /* qwen35 (qwen35moe with experts): Gated DeltaNet layers but every 4th; rope on n_rot dims of each head */
    int n_rot, ssm_k_heads, ssm_v_heads, ssm_state, n_ff_shexp;
    /* gemma4: head_dim / n_head_kv are the global layers'; every swa_period-th layer is global; the last
     * n_kv_shared layers read earlier caches (their FFN twice as wide with wide_shared); per-layer embeddings of
     * n_embd_per_layer; k_eq_v: global layers have no attn_v; with experts, a dense MLP of n_ff beside them.
     * gemma3n: swa_period, n_kv_shared and n_embd_per_layer likewise (one head size), 4 AltUp streams, LAuReL of
     * rank 64, activation sparsity on the first 10 layers (the values llama.cpp assumes) */
    int head_dim_swa, n_head_kv_swa, swa_period, n_kv_shared, n_embd_per_layer;
    bool wide_shared, k_eq_v;
    /* gpt-oss: YaRN rope (factor over yarn_orig_ctx positions); experts always MXFP4, as every published file */
    float rope_yarn_factor;
    int rope_yarn_orig_ctx;
} synth_shape;

/* NULL if unknown. synth_shape_at(i) lists them (NULL past the end). */
const synth_shape *synth_find_shape(const char *name);
const synth_shape *synth_shape_at(int i);

/* A TYPE as llama-quantize takes it: "Q4_0", "F16", ... (llama-quantize's default recipe: the output / tied
 * embedding in Q6_K; with pure, the type for every matrix, as --pure) or a mix ("Q4_K_M"). The per-tensor
 * choice is quant_tensor_type() (quantize.h), shared with hearth quantize. */
typedef struct {
    const char *name;          /* as given */
    uint32_t base;             /* the base tensor type (Q4_K for Q4_K_M) */
    int mix;                   /* QMIX_* */
    uint32_t file_type;        /* general.file_type (llama_ftype) */
} synth_ftype;

/* Returns 0, or -1 with err naming the accepted types. */
int synth_parse_ftype(const char *s, bool pure, synth_ftype *out, hearth_err *err);

typedef void (*synth_progress_fn)(void *user, uint64_t done, uint64_t total);
typedef struct {
    uint64_t seed;
    int n_threads;             /* quantization threads; <= 0: 2 */
    float layer_scale;         /* every layer's output projections drawn with this times the usual spread (0: 1) */
    synth_progress_fn progress;   /* called (serialized) as tensor data is written; may be NULL */
    void *user;
} synth_opts;

/* Writes the model to path, streaming: weights are generated, quantized and written a chunk of rows at a
 * time, so memory stays a few MiB per thread whatever the model size. */
int synth_write(const synth_shape *s, const synth_ftype *ft, const char *path, const synth_opts *o, hearth_err *err);

#endif
