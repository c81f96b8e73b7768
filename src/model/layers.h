/* layers.h — transformer blocks shared by the architecture files: norms over a micro-batch, the
 * attention block (projections with optional biases, optional per-head q/k norm, rope, cached attention,
 * output projection) and the feed-forward variants. An architecture's forward pass strings these
 * together in its own order. */
#ifndef HEARTH_LAYERS_H
#define HEARTH_LAYERS_H

#include "model/context.h"

enum { NORM_RMS = 0, NORM_LAYER = 1 };
enum { ACT_SILU = 0, ACT_GELU_TANH = 1, ACT_GELU_ERF = 2, ACT_NONE = 3,
       ACT_SWIGLU_OAI = 4 /* gated only: gpt-oss's clamped SwiGLU, op_swiglu_oai */ };

/* out[i] = norm(in[i]) * w (+ b) for each of the n rows of width `width` (rows split over the pool). */
void layer_norm_rows(hearth_ctx *c, const ht_ubatch *ub, float *out, const float *in, const ht_tensor *w,
                     const ht_tensor *b, int width, float eps, int kind);
/* Full attention block for layer il: in (normed input) -> out ([n][n_embd]). Uses L's wq/wk/wv (or
 * wqkv), biases, q_norm/k_norm when bound; rope with `rope_base` unless it is 0 (scaled by rope_scale, or
 * rope_scale_swa on sliding-window layers); window > 0 on sliding-window layers (their cache is a ring:
 * pass hp.sliding_window exactly when ctx_layer_is_swa). Attention is causal or not per hp.causal. */
void layer_attention(hearth_ctx *c, const ht_ubatch *ub, int il, const float *in, float *out, float rope_base,
                     int window);
/* Gated FFN: out = down(act(gate(in)) * up(in)); with L->ffn_sparse, Gaussian top-k on gate(in) first. */
void layer_ffn_gated(hearth_ctx *c, const ht_ubatch *ub, const ht_layer *L, const float *in, float *out, int act);
/* Mixture of experts (Mixtral, Qwen3-MoE, DeepSeek, gpt-oss): the router ffn_gate_inp (+ its bias when bound)
 * picks n_expert_used experts per token (softmax or sigmoid scores, exp_probs_b and expert groups for the choice
 * when the model has them), out = sum of their gated FFNs down(act(gate(in)) * up(in)) (the ffn_*_exps stacks,
 * each + its bias when bound; act ACT_SILU, ACT_GELU_TANH or ACT_SWIGLU_OAI) weighted by the router, plus the
 * shared expert (ffn_*_shexp; gated by ffn_gate_inp_shexp when bound). */
void layer_ffn_moe(hearth_ctx *c, const ht_ubatch *ub, const ht_layer *L, const float *in, float *out, int act);
/* The same with the router reading router_in (Gemma 4: a normed, scaled copy of the residual) while the experts
 * read in; out may be router_in. Each expert's output is scaled by ffn_down_exps_s when bound. */
void layer_ffn_moe_routed(hearth_ctx *c, const ht_ubatch *ub, const ht_layer *L, const float *router_in, const float *in,
                          float *out, int act);
/* Plain FFN with biases: out = down(act(up(in) + b_up)) + b_down. */
void layer_ffn_plain(hearth_ctx *c, const ht_ubatch *ub, const ht_layer *L, const float *in, float *out, int act);
/* out = act(W·in + b) over the micro-batch (b may be absent): a dense layer, e.g. a head transform. */
void layer_dense(hearth_ctx *c, const ht_ubatch *ub, const ht_tensor *W, const ht_tensor *b, const float *in, float *out,
                 int act);
/* Per-layer embeddings (Gemma 4): c->ple[i][l] = (RMSNorm_{ple_proj_norm}(ple_model_proj . x0[i] / sqrt(n_embd))_l
 * + ple_tok_embd[token i]_l * sqrt(P)) / sqrt(2) for every layer l, x0 the scaled token embeddings; made once per
 * micro-batch, before the first layer. */
void layer_ple_inputs(hearth_ctx *c, const ht_ubatch *ub, const float *x0);
/* out = RMSNorm_{ple_norm}(ple_proj(GELU(ple_gate . in) * c->ple[.][il])): layer il's per-layer embedding (Gemma 4
 * adds it to the residual; Gemma 3n to its AltUp streams). out is not c->hb. */
void layer_ple_out(hearth_ctx *c, const ht_ubatch *ub, int il, const float *in, float *out);
/* x *= s over n rows of width. */
void layer_scale_rows(hearth_ctx *c, const ht_ubatch *ub, float *x, float s, int width);
/* x += y over n rows of width (rows split over the pool). */
void layer_residual(hearth_ctx *c, const ht_ubatch *ub, float *x, const float *y, int width);

#endif
