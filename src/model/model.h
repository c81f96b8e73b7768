/* model.h — internal model, context and architecture interfaces.
 *
 * A model is hyperparameters + named tensor views (pointing into the mmap'd file, never copied unless a
 * layout must change) + a vocabulary + an architecture. An architecture (src/arch/<name>.c) is one row
 * of ht_arch: it reads its hyperparameters, binds its weights by GGUF name, and runs the forward pass
 * over a micro-batch using the shared layers in ops.h / matmul.h / attention in context.c. */
#ifndef HEARTH_MODEL_H
#define HEARTH_MODEL_H

#include "common.h"
#include "io/gguf.h"
#include "quant/quant.h"
#include "compute/threads.h"
#include "tokenizer/tokenizer.h"

/* A tensor view: type, shape (ne[0] contiguous) and data. A matrix of n_out rows × n_in columns has
 * ne[0] = n_in, ne[1] = n_out. data == NULL means "absent" for optional weights. */
typedef struct {
    const char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[4];
    const void *data;
    size_t row_bytes;     /* bytes of one ne[0]-row */
    size_t nbytes;
    const ht_pack *pack;  /* when repacked for the kernels (model_pack_weights): the layout, and */
    const uint8_t *packed;   /* the groups of pack->rows rows, pack->group_bytes(ne[0]) bytes each */
    const void *const *slabs;   /* an expert stack (ne[2] experts of ne[1] rows) whose experts lie apart (HF
                                 * directories: one tensor per expert): slab e's rows; NULL when contiguous */
} ht_tensor;

/* Expert e of a 3-D expert stack, as a matrix: its slab of the mapping (one expert = ne[1] rows), and of the
 * packed copy when packed (each expert's rows pack into whole groups of their own). */
static inline ht_tensor ht_expert(const ht_tensor *t, int e) {
    ht_tensor v = *t;
    v.n_dims = 2;
    v.ne[2] = 1;
    v.slabs = NULL;
    v.nbytes = (size_t)t->ne[1] * t->row_bytes;
    v.data = t->slabs ? t->slabs[e] : (const uint8_t *)t->data + (size_t)e * v.nbytes;
    if (t->packed)
        v.packed = t->packed + (size_t)e * (size_t)((t->ne[1] + t->pack->rows - 1) / t->pack->rows) * t->pack->group_bytes(t->ne[0]);
    return v;
}

/* Rows [r0, r0 + n) of a 2-D matrix as a matrix of its own (a fused tensor's parts: Phi-3's [gate | up]). */
static inline ht_tensor ht_rows(const ht_tensor *t, int64_t r0, int64_t n) {
    ht_tensor v = *t;
    v.ne[1] = n;
    v.nbytes = (size_t)n * t->row_bytes;
    v.data = (const uint8_t *)t->data + (size_t)r0 * t->row_bytes;
    return v;
}

/* Row r of a matrix or of a stack read as ne[1] * ne[2] rows, in the file's layout. */
static inline const uint8_t *ht_row(const ht_tensor *t, int64_t r) {
    if (t->slabs) return (const uint8_t *)t->slabs[r / t->ne[1]] + (size_t)(r % t->ne[1]) * t->row_bytes;
    return (const uint8_t *)t->data + (size_t)r * t->row_bytes;
}

enum { ROPE_NORM = 0, ROPE_NEOX = 2 };
#define HT_MAX_EXPERTS 512
enum { POOL_NONE = 0, POOL_MEAN = 1, POOL_CLS = 2, POOL_LAST = 3 };

typedef struct {
    int n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, head_dim, head_dim_v, n_ff;
    float norm_eps;
    float rope_base, rope_base_swa, rope_scale;   /* rope_scale: linear position scaling factor (1 = none) */
    float rope_scale_swa;     /* rope_scale of sliding-window layers (Gemma 3: 1) */
    float rope_attn_factor;   /* multiplies rope's cos and sin (LongRoPE's attention factor; 1 = none) */
    float yarn_log_mul;       /* YaRN's mscale_all_dim (rope.scaling.yarn_log_multiplier): the magnitude is then
                               * (1 + 0.1 ln s) / (1 + 0.1 m ln s) (0: 1 + 0.1 ln s) */
    float attn_temp_scale;    /* Llama 4 / Mistral 3 attention temperature: q x 1 + this x ln(floor(pos / n_ctx_orig) + 1) */
    int n_ctx_orig;           /* the context trained before scaling: LongRoPE past it takes rope_freqs_long; YaRN's ramp */
    bool rope_yarn;           /* YaRN (rope.scaling.type yarn): rope_scale interpolates only the slow pairs (ramp between
                               * yarn_beta_fast and yarn_beta_slow turns), and cos/sin grow by 1 + 0.1 ln rope_scale */
    float yarn_beta_fast, yarn_beta_slow;
    int rope_type, n_rot;
    int sliding_window;       /* 0 = none */
    int swa_period;           /* layer il is global when (il + 1) % swa_period == 0; 0 = all global */
    bool swa_per_layer;       /* the pattern is ht_layer.swa instead (Gemma 4's sliding_window_pattern array) */
    float attn_scale;         /* multiplies q·k; default 1/sqrt(head_dim) */
    float embd_scale;         /* multiplies token embeddings; default 1 */
    float logit_softcap;      /* logits = cap * tanh(logits / cap) when > 0 (Gemma 4) */
    bool v_norm;              /* V rows RMS-normed per head without a weight (Gemma 4) */
    int n_embd_per_layer;     /* per-layer embeddings (Gemma 4 E2B / E4B): each layer's input width, 0 = none */
    /* AltUp (Gemma 3n): n_altup residual streams a token (0: the one usual stream); each layer computes on a
     * prediction of stream altup_act and corrects all of them (arch/gemma3n.c) */
    int n_altup, altup_act;
    bool causal;
    bool logits;              /* produces logits: decoders, and encoders with a language-model head */
    int pooling;
    int n_token_types;
    int n_expert, n_expert_used, n_ff_exp;   /* mixture of experts (0 experts: dense FFN); expert FFN width */
    bool expert_norm_w;       /* the chosen experts' softmax weights renormalised to sum to 1 (the same as a softmax over
                               * the chosen experts' logits alone: gpt-oss) */
    int n_ff_shexp;           /* a shared expert beside the routed ones (Qwen3.5-MoE): its FFN width, 0 = none */
    bool attn_gate;           /* attn_q rows per head are [q | gate]: the output is gated by sigmoid(gate) */
    /* Gated DeltaNet layers (Qwen3.5, Qwen3-Next): n_recurrent of the n_layer (ht_layer.recurrent) */
    int n_recurrent;
    int ssm_conv;             /* causal conv1d kernel width */
    int ssm_state;            /* head size of q, k and v (the state of a v-head is ssm_state x ssm_state) */
    int ssm_k_heads, ssm_v_heads;   /* q/k heads (ssm.group_count), v heads (ssm.time_step_rank) */
    bool ssm_v_grouped;       /* v-head h reads q/k head h / (v/k heads) (HF order), else h % k heads (GGUF) */
    /* YaRN rope (DeepSeek-V2/V3): rope_scale is the factor; dims below corr[0] keep their frequency, dims past
     * corr[1] are divided by it, a linear ramp between (ext: the ramp's weight, 0 = plain scaling) */
    float rope_yarn_ext, rope_yarn_corr[2];
    /* Multi-head latent attention (model/mla.c; kv_lora_rank > 0): K and V come from one cached latent row of
     * head_dim = kv_lora_rank + n_rot values per token (n_head_kv 1, head_dim_v = kv_lora_rank); per head q is
     * [head_dim_mla - n_rot | n_rot] and the output head_dim_v_mla wide */
    int kv_lora_rank, q_lora_rank, head_dim_mla, head_dim_v_mla;
    /* routing options (moe_route): sigmoid scores instead of softmax; the choice among n_expert_groups groups
     * limited to the n_group_used with the best top-2 sums; chosen weights times expert_w_scale; the first
     * n_dense_lead layers dense */
    bool expert_sigmoid;
    int n_expert_groups, n_group_used, n_dense_lead;
    float expert_w_scale;
} ht_hparams;

/* Per-layer weights; each architecture binds the ones it uses. */
typedef struct {
    ht_tensor attn_norm, attn_norm_b;
    ht_tensor wq, wk, wv, wqkv, wo;
    ht_tensor bq, bk, bv, bqkv, bo;
    ht_tensor q_norm, k_norm;
    /* attention geometry of this layer: the model's (hp) unless the architecture sets it per layer (Gemma 4's
     * sliding and global layers differ in head size, kv heads and rope dims; model_layer_defaults fills it) */
    int head_dim, head_dim_v, n_head_kv, n_rot;
    bool swa;                                     /* sliding window, when hp.swa_per_layer */
    bool kv_shared;                               /* attends the KV cache of layer kv_src < il, stores none and
                                                   * computes no K / V (Gemma 4's last shared_kv_layers) */
    int kv_src;                                   /* whose cache it attends: il unless kv_shared */
    ht_tensor rope_freqs;                         /* this layer's rope frequency divisors (else the model's) */
    ht_tensor out_scale;                          /* [1]: multiplies the layer's output (Gemma 4) */
    ht_tensor ple_gate, ple_proj, ple_norm;       /* per-layer embeddings: inp_gate, proj, post_norm (Gemma 4) */
    ht_tensor attn_sinks;                         /* [n_head] a logit per head in the softmax's denominator (gpt-oss) */
    /* Gemma 3n: AltUp's router and its norm, prediction [n_altup -> n_altup^2] and correction [n_altup -> n_altup]
     * coefficients, corrected output scale; LAuReL's low-rank residual (laurel_l, laurel_r) and its norm */
    ht_tensor altup_router, altup_router_norm, altup_predict_coef, altup_correct_coef, altup_correct_scale;
    ht_tensor laurel_l, laurel_r, laurel_post_norm;
    bool ffn_sparse;                              /* Gaussian top-k on the FFN gate: values below mean + */
    float ffn_sparse_std;                         /* ffn_sparse_std x std (over the row) zeroed (Gemma 3n) */
    ht_tensor attn_post_norm, attn_post_norm_b;   /* gemma3 post-attention norm; bert attention-output LayerNorm */
    ht_tensor ffn_norm, ffn_norm_b;
    ht_tensor ffn_gate, ffn_up, ffn_down;
    ht_tensor ffn_up_b, ffn_down_b;
    ht_tensor ffn_post_norm, ffn_post_norm_b;     /* gemma3 post-FFN norm; bert layer-output LayerNorm */
    ht_tensor ffn_gate_inp, ffn_gate_inp_b;       /* MoE router [n_embd -> n_expert], its bias (gpt-oss) */
    ht_tensor ffn_gate_exps, ffn_up_exps, ffn_down_exps;   /* MoE expert stacks, 3-D [.., .., n_expert] */
    ht_tensor ffn_gate_exps_b, ffn_up_exps_b, ffn_down_exps_b;   /* their biases (gpt-oss): [rows, n_expert] */
    ht_tensor ffn_gate_inp_shexp, ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp;   /* shared expert and its gate */
    ht_tensor exp_probs_b;                        /* per-expert bias added to the scores for the choice only */
    ht_tensor ffn_gate_up_exps;                   /* fused [gate | up] rows per expert; gate / up_exps are views of it */
    ht_tensor ffn_gate_inp_s;                     /* [n_embd]: scales the router's input (Gemma 4) */
    ht_tensor ffn_down_exps_s;                    /* [n_expert]: scales each expert's output (Gemma 4) */
    ht_tensor ffn_pre_norm_2, ffn_post_norm_1, ffn_post_norm_2;   /* Gemma 4: dense MLP and experts side by side */
    /* latent attention (model/mla.c): q directly (wq) or through a LoRA (wq_a, q_a_norm, wq_b); attn_kv_a_mqa to
     * the latent + shared rope key, its norm; per-head stacks k_b [nope, kv_lora_rank], v_b [kv_lora_rank, v] */
    ht_tensor wq_a, q_a_norm, wq_b, wkv_a, kv_a_norm, wk_b, wv_b;
    /* Gated DeltaNet (recurrent layers): in-projections attn_qkv (q, k, v before the conv) and attn_gate (z),
     * ssm_conv1d [conv x channels], ssm_dt (bias), ssm_a (-exp(A_log)), ssm_beta, ssm_alpha, ssm_norm, ssm_out */
    bool recurrent;
    ht_tensor ssm_qkv, ssm_z, ssm_conv1d, ssm_dt, ssm_a, ssm_beta, ssm_alpha, ssm_norm, ssm_out;
    /* Qwen3-Next's fused forms, per k-head: ssm_in rows [q | k | v (v/k heads) | z (v/k heads)] (older files,
     * instead of ssm_qkv and ssm_z) and ssm_ba rows [beta (v/k) | alpha (v/k)] (instead of ssm_beta, ssm_alpha) */
    ht_tensor ssm_in, ssm_ba;
} ht_layer;

typedef struct hearth_ctx hearth_ctx;
typedef struct ht_arch ht_arch;

struct hearth_model {
    const ht_arch *arch;
    gguf_file *gguf;          /* metadata source (a real file, or metadata built in memory for HF dirs) */
    struct st_set *st;        /* safetensors shards of an HF directory, or NULL */
    ht_hparams hp;
    ht_vocab *vocab;
    ht_tensor *tensors;       /* every tensor by (GGUF) name */
    int n_tensors;
    ht_tensor tok_embd, pos_embd, type_embd, tok_embd_norm, tok_embd_norm_b, output_norm, output_norm_b, output,
              output_b, rope_freqs, rope_freqs_long;
    ht_tensor ple_tok_embd, ple_model_proj, ple_proj_norm;   /* per-layer embeddings' tables (Gemma 4) */
    ht_tensor altup_proj, altup_unembd;           /* AltUp (Gemma 3n): stacks of n_altup - 1 [n_embd, n_embd] */
    ht_layer *layers;
    void **owned;             /* buffers the model owns (converted tensors, HF metadata image, ...) */
    int n_owned;
    void *arch_data;
    bool qk_rotate_half;      /* HF Llama layout: q/k rows in rotate-half order (run with NEOX rope) */
    bool hf_rope_freqs;       /* rope_freqs computed from config.json rather than stored as a tensor */
    uint64_t file_bytes;
    char name[128];
    char *path;               /* what it was loaded from, for messages */
    bool weights_packed;      /* model_pack_weights has run */
    uint64_t lora_merged;     /* an identity of the LoRA adapters merged into the weights (lora.c), 0: none */
    /* The layers this process evaluates, [layer_lo, layer_hi): all of them, unless an MPI job gives each rank
     * a range (src/dist); the process with layer 0 also embeds the tokens and runs the output head. */
    int layer_lo, layer_hi;
    /* Tensor parallel (--tp, src/dist): this process is part tp_rank of tp_size of every layer it runs. Its
     * attention matrices are views of its heads' rows and hp.n_head / n_head_kv count only those heads (the
     * model's full counts in tp_n_head / tp_n_head_kv); its FFN gate/up (and every expert's) are views of its
     * share of the intermediate rows, its wo / ffn_down of its share of the n_embd output rows, and output of
     * its share of the vocabulary (dist.c's tp_split). */
    int tp_rank, tp_size;
    int tp_n_head, tp_n_head_kv;
    struct gram_vocab *gvocab; /* the vocabulary sorted for grammars (generate/grammar.c), built on first use */
};

/* A micro-batch as the forward pass sees it: at most ctx->n_batch tokens. */
typedef struct {
    int n;
    const int32_t *tokens;
    const int32_t *pos;
    const int32_t *seq;
    const int8_t *want;       /* rows whose output (logits / hidden) is needed */
    int row0;                 /* index of the first row in the whole batch */
} ht_ubatch;

struct ht_arch {
    const char *name;
    bool encoder;                                             /* bidirectional: no generation */
    int (*load_hparams)(hearth_model *m, hearth_err *err);    /* from m->gguf metadata */
    int (*bind)(hearth_model *m, hearth_err *err);            /* weights by name, shapes checked */
    /* The forward pass in three parts, so that a process can run a range of layers (MPI pipeline stages):
     * embed fills c->x ([n][n_embd], the residual stream) from the tokens, layer il updates c->x in place,
     * head fills the c->out_logits / c->out_hidden rows the batch wants from c->x. */
    void (*embed)(hearth_ctx *c, const ht_ubatch *ub);
    void (*layer)(hearth_ctx *c, const ht_ubatch *ub, int il);
    void (*head)(hearth_ctx *c, const ht_ubatch *ub);
};

/* Registered architectures (one file each under src/arch). */
extern const ht_arch ht_arch_llama, ht_arch_mistral3, ht_arch_qwen2, ht_arch_qwen3, ht_arch_qwen3moe, ht_arch_qwen35, ht_arch_qwen35moe,
    ht_arch_qwen3next, ht_arch_gemma3, ht_arch_gemma3n, ht_arch_gemma4, ht_arch_gpt2, ht_arch_bert, ht_arch_smollm3, ht_arch_phi3, ht_arch_deepseek2,
    ht_arch_gptoss;
/* The Llama pieces other decoders reuse (arch/llama.c): weight binding of the Llama shape (optional output
 * -> tied) and the pre-norm SwiGLU forward pass. */
int llama_bind_common(hearth_model *m, hearth_err *err);
void llama_embed(hearth_ctx *c, const ht_ubatch *ub);
void llama_layer(hearth_ctx *c, const ht_ubatch *ub, int il);
void llama_head(hearth_ctx *c, const ht_ubatch *ub);
/* What Gemma 3n and 4 share (arch/gemma4.c): NEOX rope, per-layer sliding flags with unscaled rope there, scale-1
 * attention, V RMS-normed, embeddings times sqrt(n_embd), final_logit_softcapping when the file has one. */
void gemma_hparams(hearth_model *m);
const ht_arch *ht_find_arch(const char *name);

/* ---- helpers for architecture files ---- */
/* Metadata "<arch>.<suffix>" getters. */
bool model_meta_u32(const hearth_model *m, const char *suffix, uint32_t *out);
bool model_meta_f32(const hearth_model *m, const char *suffix, float *out);
/* Looks a tensor up by name; with required, a missing one is an error. Checks the shape: ne[i] must equal
 * the expected dims (pass -1 to accept any). Returns 0, or -1 with err set. */
int model_bind(hearth_model *m, ht_tensor *dst, bool required, hearth_err *err, int64_t ne0, int64_t ne1,
               const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* True when the model has the tensor named by fmt (taking il). */
bool model_has_tensor(const hearth_model *m, const char *fmt, int il);
/* Binds an expert stack: ne[0] = ne0, ne[1] = ne1, ne[2] = the model's n_expert (a 3-D tensor). */
int model_bind_experts(hearth_model *m, ht_tensor *dst, hearth_err *err, int64_t ne0, int64_t ne1, const char *fmt, int il);
/* Binds a stack of ne2 matrices [ne0, ne1] that is not a set of experts (latent attention's per-head attn_k_b). */
int model_bind_stack(hearth_model *m, ht_tensor *dst, hearth_err *err, int64_t ne0, int64_t ne1, int64_t ne2, const char *fmt,
                     int il);
/* Binds the vector pair "<prefix>.weight" and "<prefix>.bias" (a LayerNorm, both required), n floats each;
 * prefix is a printf format taking il (e.g. "blk.%d.attn_norm"), or a plain name. */
int model_bind_norm_wb(hearth_model *m, ht_tensor *w, ht_tensor *b, hearth_err *err, int64_t n, const char *prefix, int il);
/* Integer metadata "<arch>.<suffix>" in [lo, hi] into *out (def when the key is absent); -1 with err set
 * when present but not an integer in range. */
int model_meta_int(const hearth_model *m, const char *suffix, int lo, int hi, int def, int *out, hearth_err *err);
/* Per-layer integer metadata "<arch>.<suffix>": a scalar for every layer or an array of n_layer values, each in
 * [lo, hi] (def when absent) into out[n_layer]; *max gets the largest. -1 with err set otherwise. */
int model_meta_layer_ints(const hearth_model *m, const char *suffix, int lo, int hi, int def, int *out, int *max,
                          hearth_err *err);
/* After binding: every layer's attention geometry not set by the architecture is the model's, and its KV cache
 * its own. */
void model_layer_defaults(hearth_model *m);
/* Each layer's swa flag from <arch>.attention.sliding_window_pattern: an array of n_layer flags, or a period (a
 * global layer every period layers, the rest sliding), def_period when absent (0: the array is required). */
int model_swa_pattern(hearth_model *m, int def_period, hearth_err *err);
/* The last n_shared layers attend the cache of layer n_kv - 2 (sliding) or n_kv - 1 (global), n_kv = the layers
 * that keep one, and compute no K / V (Gemma 3n / 4; llama.cpp's rule); their swa flags (and per-layer kv heads,
 * if any) set first. -1 with err set when that layer is not of the same kind. */
int model_share_kv(hearth_model *m, int n_shared, hearth_err *err);
/* Reads the hyperparameters common to decoder families (n_embd, n_layer, heads, ff, context, eps, rope). */
int model_common_hparams(hearth_model *m, hearth_err *err);
/* 0 when the model has a tokenizer; otherwise -1 with a message naming the model and what it lacks. */
int model_need_vocab(const hearth_model *m, hearth_err *err);
/* Marks hearth.generation.eos_token_ids (if any) as end-of-generation tokens of m's vocabulary. */
void model_apply_generation_eog(hearth_model *m);
/* Records a buffer for the model to free; on failure frees it and returns -1 with err set. */
int model_own(hearth_model *m, void *p, hearth_err *err);

/* ---- context ---- */
typedef struct ht_rec ht_rec;   /* the recurrent layers' per-sequence states and scratch (model/recurrent.c) */

typedef struct {
    int cap;                  /* cached positions per sequence (ring size for sliding-window layers) */
    bool ring;                /* positions stored at pos % cap */
    void *k;                  /* F32 / F16: [n_seq][n_head_kv] blocks of 64 slots, each [head_dim][64] (the
                               * last [head_dim][cap % 64]); Q8_0: [n_seq][cap][n_head_kv] rows of head_dim */
    void *v;                  /* F32 / F16: [n_seq][n_head_kv][head_dim_v][span[seq]] at the start of each
                               * sequence's room for cap positions; Q8_0: as K, rows of head_dim_v */
    int *span;                /* F32 / F16 per sequence: positions a V^T row holds now (<= cap) */
    int n_kv, hd, hdv;        /* the layer's kv heads and K / V head sizes */
                              /* latent attention (model/mla.c): k holds [n_seq][cap] rows of head_dim values in
                               * the cache type (latent | rope key), v and span are NULL */
} ht_kv_layer;

/* Work a product hook fuses into a product's job (matmul.c): n_pre items pre(arg, i) claimed first, by any
 * thread, in any order; then post(arg, m, r0, r1, t0, t1) as soon as outputs [r0, r1) of the product y[m] are
 * final for batch rows [t0, t1) (every pre item done by then), by the thread that computed them. */
typedef struct {
    int n_pre;
    void (*pre)(const void *arg, int i);
    void (*post)(const void *arg, int m, int r0, int r1, int t0, int t1);
    const void *arg;
} ht_product_fuse;

struct hearth_ctx {
    hearth_model *m;
    ht_pool *pool;
    int n_ctx, n_seq, n_batch, n_threads;
    int serial_below;         /* with n_threads automatic: passes of fewer tokens run on the caller alone (ctx_serial_below) */
    uint32_t k_type, v_type;  /* KV cache types: HT_F32, HT_F16 (transposed), HT_BF16, HT_Q8_0, HT_Q4_0 (rows) */
    ht_kv_layer *kv;          /* recurrent layers have none (k, v NULL): their state is in rec */
    ht_rec *rec;              /* recurrent layers' per-sequence states; NULL for a model without such layers */
    struct ht_lora_set *lora; /* the LoRA adapters applied (model/lora.c), or NULL */
    /* lora_add while adapters are set, or NULL: called before the weight products y[m] = W[m] x of n rows with
     * fuse set, it may plan work into the products' job there and return true; otherwise it is called again
     * after them with fuse NULL, to add its terms itself */
    bool (*product_hook)(hearth_ctx *c, const ht_tensor *const *W, float *const *y, int n_mat, const float *x, int n,
                         ht_product_fuse *fuse);
    /* called with the input of each weight product before it is computed (model/imatrix.c collects from it), or
     * NULL: a matrix's n rows x (e < 0; src, cnt NULL); matrix e of the stack W used alone (MLA's per-head
     * products; src, cnt NULL); or a mixture's products, n rows ordered by expert, cnt[e] of them for expert e,
     * row r being x[src[r]] (x[r] when src is NULL; e < 0). Runs on the calling thread. */
    void (*input_hook)(void *user, const ht_tensor *W, int e, const float *x, const int *src, int n, const int *cnt);
    void *input_hook_user;
    const int32_t *row_seq;   /* the sequence of each row of the product being computed (NULL: sequence 0) */
    int32_t *head_seq;        /* [n_batch]: the output head's rows' sequences (the wanted rows, gathered) */
    int *seq_len;             /* tokens cached per sequence */

    /* scratch, sized once at creation for n_batch tokens */
    float *x, *xb, *xb2, *q, *k, *v, *att, *hb, *hb2;
    void *qact;               /* activations quantized for vec_dot (largest row format × n_batch) */
    size_t qact_row_cap;
    float *att_scores;        /* [n_threads][att_stride]: attention scores and gather space (hearth_ctx_new) */
    size_t att_stride;        /* floats per thread in att_scores */
    float *rope_cos, *rope_sin;   /* [n_batch][head_dim/2] */
    int32_t *rope_pos;        /* [n_batch]: the positions the tables hold (rope_n of them, for rope_key) */
    int rope_n;
    float rope_key[2];        /* base and scale of the tables: layers that share them reuse them */
    int rope_key_rot;         /* and their rope dims */
    const float *rope_key_ff; /* and frequency divisors */
    float *ple;               /* per-layer embeddings: [n_batch][n_layer][n_embd_per_layer], made by the first layer */
    float *ple_row;           /* [n_layer * n_embd_per_layer]: a token's row of the table, dequantized */
    float *altup;             /* AltUp: [n_altup + 1][n_batch][n_embd], the streams and LAuReL's output (Gemma 3n) */
    /* mixture of experts (n_expert > 0): a micro-batch's n_batch × n_expert_used choices ("slots") */
    float *moe_logits;        /* [n_batch][n_expert] router outputs */
    int *moe_sel;             /* [slot] the chosen expert, best first per token */
    float *moe_w;             /* [slot] its weight */
    int *moe_row;             /* [slot] its row in the expert-ordered batch */
    int *moe_src;             /* [expert-ordered row] the token it carries */
    int *moe_cnt;             /* [n_expert] expert-ordered rows of each expert */
    int *moe_first, *moe_active;   /* [n_expert] an expert's first row; the experts with rows (matmul_experts) */
    float *moe_g, *moe_u;     /* [expert-ordered row][n_ff_exp] gate and up products */
    float *moe_y;             /* [expert-ordered row][n_embd] down products */
    void *moe_qact;           /* [expert-ordered row] prepared activations, moe_qact_row bytes each */
    size_t moe_qact_row;

    /* per-batch bookkeeping, sized for the largest batch (n_ctx * n_seq rows) */
    int max_rows;
    int32_t *b_pos, *b_seq;
    int8_t *b_want;
    int *seq_next;

    /* outputs of the last decode */
    int n_rows;               /* rows of the last batch */
    int *row_out;             /* batch row -> output slot, or -1 */
    float *out_logits;        /* [n_out_cap][n_vocab] */
    float *out_hidden;        /* [n_out_cap][n_embd] */
    int n_out_cap;
    int n_out;
    int dist_id;              /* >= 0: the context's number in an MPI job (src/dist), else -1 */
    float *dist_rows;         /* [n_out_cap][n_embd]: the wanted rows' residuals back from the last rank */
    float *tp_in, *tp_out, *tp_gather;   /* tensor parallel: [n_batch][widest] gathered inputs, own output rows,
                                          * the ranks' parts as received */
};

#endif
