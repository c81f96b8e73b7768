/* hf.c — Hugging Face checkpoint directories loaded directly: config.json + safetensors (single or
 * sharded) + tokenizer.json / vocab.txt, with no conversion step.
 *
 * How: config.json is translated into the same GGUF metadata keys llama.cpp's converter would write,
 * built as a small in-memory GGUF (a memfd) so every architecture reads its hyperparameters exactly as it
 * does from a .gguf; safetensors names are renamed to GGUF names by one table per family. Weights stay
 * in the safetensors mapping; only what changes layout is copied: GPT-2's Conv1D matrices are stored
 * [in, out] (transposed here), Gemma's norms are stored as w for (1 + w), gpt-oss's MXFP4 experts (repacked
 * once into ggml's blocks, gate and up rows de-interleaved), DeepSeek's kv_b_proj (split per head into
 * attn_k_b / attn_v_b as the converter splits it), and unaligned data. Llama-family q/k weights are in
 * rotate-half order (GGUF's were permuted by its converter), which NEOX rope computes exactly, so instead of
 * permuting we switch the rope mode. */
#define _GNU_SOURCE
#include "model/hf.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/hf_meta.h"
#include "io/safetensors.h"

/* T_F32: an F32 copy (vectors the forward pass reads as floats); T_NEG_EXP: -exp(x) (Qwen3.5's A_log);
 * T_SQUEEZE: a [n, 1, k] conv kernel as the matrix [n, k]; T_STACK: a 3-D expert stack [experts, rows, cols] as stored */
enum { T_PLAIN = 0, T_TRANSPOSE = 1, T_PLUS_ONE = 2, T_F32 = 3, T_NEG_EXP = 4, T_SQUEEZE = 5, T_STACK = 6 };

typedef struct { const char *hf, *gguf; int transform; } name_map;

/* Per-layer names (after the family's layer prefix) and global names. */
static const name_map LLAMA_LAYER[] = {
    { "input_layernorm.weight", "attn_norm.weight", 0 },
    { "self_attn.q_proj.weight", "attn_q.weight", 0 }, { "self_attn.q_proj.bias", "attn_q.bias", 0 },
    { "self_attn.k_proj.weight", "attn_k.weight", 0 }, { "self_attn.k_proj.bias", "attn_k.bias", 0 },
    { "self_attn.v_proj.weight", "attn_v.weight", 0 }, { "self_attn.v_proj.bias", "attn_v.bias", 0 },
    { "self_attn.o_proj.weight", "attn_output.weight", 0 },
    { "self_attn.q_norm.weight", "attn_q_norm.weight", 0 }, { "self_attn.k_norm.weight", "attn_k_norm.weight", 0 },
    { "post_attention_layernorm.weight", "ffn_norm.weight", 0 },
    { "mlp.gate_proj.weight", "ffn_gate.weight", 0 }, { "mlp.up_proj.weight", "ffn_up.weight", 0 },
    { "mlp.down_proj.weight", "ffn_down.weight", 0 },
    { "mlp.gate.weight", "ffn_gate_inp.weight", 0 },                 /* Qwen3-MoE router */
    { "block_sparse_moe.gate.weight", "ffn_gate_inp.weight", 0 },    /* Mixtral router */
    { NULL, NULL, 0 } };
/* One tensor per expert ("<prefix><e>.<name>"), stacked into GGUF's 3-D expert tensors. */
static const char *const EXPERT_PREFIXES[] = { "mlp.experts.", "block_sparse_moe.experts." };
static const name_map EXPERT_LAYER[] = {
    { "gate_proj.weight", "ffn_gate_exps.weight", 0 }, { "up_proj.weight", "ffn_up_exps.weight", 0 },
    { "down_proj.weight", "ffn_down_exps.weight", 0 },
    { "w1.weight", "ffn_gate_exps.weight", 0 }, { "w3.weight", "ffn_up_exps.weight", 0 }, { "w2.weight", "ffn_down_exps.weight", 0 },
    { NULL, NULL, 0 } };
static const name_map LLAMA_GLOBAL[] = {
    { "model.embed_tokens.weight", "token_embd.weight", 0 }, { "model.norm.weight", "output_norm.weight", 0 },
    { "lm_head.weight", "output.weight", 0 }, { NULL, NULL, 0 } };

static const name_map GEMMA3_LAYER[] = {
    { "input_layernorm.weight", "attn_norm.weight", T_PLUS_ONE },
    { "post_attention_layernorm.weight", "post_attention_norm.weight", T_PLUS_ONE },
    { "pre_feedforward_layernorm.weight", "ffn_norm.weight", T_PLUS_ONE },
    { "post_feedforward_layernorm.weight", "post_ffw_norm.weight", T_PLUS_ONE },
    { "self_attn.q_norm.weight", "attn_q_norm.weight", T_PLUS_ONE },
    { "self_attn.k_norm.weight", "attn_k_norm.weight", T_PLUS_ONE },
    { "self_attn.q_proj.weight", "attn_q.weight", 0 }, { "self_attn.k_proj.weight", "attn_k.weight", 0 },
    { "self_attn.v_proj.weight", "attn_v.weight", 0 }, { "self_attn.o_proj.weight", "attn_output.weight", 0 },
    { "mlp.gate_proj.weight", "ffn_gate.weight", 0 }, { "mlp.up_proj.weight", "ffn_up.weight", 0 },
    { "mlp.down_proj.weight", "ffn_down.weight", 0 }, { NULL, NULL, 0 } };
static const name_map GEMMA3_GLOBAL[] = {
    { "model.embed_tokens.weight", "token_embd.weight", 0 },
    { "model.norm.weight", "output_norm.weight", T_PLUS_ONE }, { NULL, NULL, 0 } };

/* Qwen3.5 / 3.6 (the text tower of Qwen3_5(Moe)ForConditionalGeneration): norms stored as w for (1 + w) but the
 * DeltaNet's gated norm; V heads in HF's grouped order, which the layer reads as such (hp.ssm_v_grouped). */
static const name_map QWEN35_LAYER[] = {
    { "input_layernorm.weight", "attn_norm.weight", T_PLUS_ONE },
    { "post_attention_layernorm.weight", "post_attention_norm.weight", T_PLUS_ONE },
    { "self_attn.q_proj.weight", "attn_q.weight", 0 }, { "self_attn.k_proj.weight", "attn_k.weight", 0 },
    { "self_attn.v_proj.weight", "attn_v.weight", 0 }, { "self_attn.o_proj.weight", "attn_output.weight", 0 },
    { "self_attn.q_norm.weight", "attn_q_norm.weight", T_PLUS_ONE },
    { "self_attn.k_norm.weight", "attn_k_norm.weight", T_PLUS_ONE },
    { "linear_attn.in_proj_qkv.weight", "attn_qkv.weight", 0 }, { "linear_attn.in_proj_z.weight", "attn_gate.weight", 0 },
    { "linear_attn.in_proj_b.weight", "ssm_beta.weight", 0 }, { "linear_attn.in_proj_a.weight", "ssm_alpha.weight", 0 },
    { "linear_attn.conv1d.weight", "ssm_conv1d.weight", T_SQUEEZE }, { "linear_attn.dt_bias", "ssm_dt.bias", T_F32 },
    { "linear_attn.A_log", "ssm_a", T_NEG_EXP }, { "linear_attn.norm.weight", "ssm_norm.weight", T_F32 },
    { "linear_attn.out_proj.weight", "ssm_out.weight", 0 },
    { "mlp.gate_proj.weight", "ffn_gate.weight", 0 }, { "mlp.up_proj.weight", "ffn_up.weight", 0 },
    { "mlp.down_proj.weight", "ffn_down.weight", 0 }, { "mlp.gate.weight", "ffn_gate_inp.weight", 0 },
    { "mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight", 0 },
    { "mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight", 0 },
    { "mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight", 0 },
    { "mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight", 0 }, { NULL, NULL, 0 } };
/* Qwen3-Next: as Qwen3.5, but q/k/v/z and b/a each in one projection, per k-head (ssm_in, ssm_ba) */
static const name_map QWEN3NEXT_LAYER[] = {
    { "linear_attn.in_proj_qkvz.weight", "ssm_in.weight", 0 }, { "linear_attn.in_proj_ba.weight", "ssm_ba.weight", 0 },
    { NULL, NULL, 0 } };
static const name_map QWEN35_GLOBAL[] = {
    { "embed_tokens.weight", "token_embd.weight", 0 }, { "norm.weight", "output_norm.weight", T_PLUS_ONE },
    { "lm_head.weight", "output.weight", 0 }, { NULL, NULL, 0 } };

static const name_map GPT2_LAYER[] = {
    { "ln_1.weight", "attn_norm.weight", 0 }, { "ln_1.bias", "attn_norm.bias", 0 },
    { "attn.c_attn.weight", "attn_qkv.weight", T_TRANSPOSE }, { "attn.c_attn.bias", "attn_qkv.bias", 0 },
    { "attn.c_proj.weight", "attn_output.weight", T_TRANSPOSE }, { "attn.c_proj.bias", "attn_output.bias", 0 },
    { "ln_2.weight", "ffn_norm.weight", 0 }, { "ln_2.bias", "ffn_norm.bias", 0 },
    { "mlp.c_fc.weight", "ffn_up.weight", T_TRANSPOSE }, { "mlp.c_fc.bias", "ffn_up.bias", 0 },
    { "mlp.c_proj.weight", "ffn_down.weight", T_TRANSPOSE }, { "mlp.c_proj.bias", "ffn_down.bias", 0 },
    { NULL, NULL, 0 } };
static const name_map GPT2_GLOBAL[] = {
    { "wte.weight", "token_embd.weight", 0 }, { "wpe.weight", "position_embd.weight", 0 },
    { "ln_f.weight", "output_norm.weight", 0 }, { "ln_f.bias", "output_norm.bias", 0 }, { NULL, NULL, 0 } };

static const name_map BERT_LAYER[] = {
    { "attention.self.query.weight", "attn_q.weight", 0 }, { "attention.self.query.bias", "attn_q.bias", 0 },
    { "attention.self.key.weight", "attn_k.weight", 0 }, { "attention.self.key.bias", "attn_k.bias", 0 },
    { "attention.self.value.weight", "attn_v.weight", 0 }, { "attention.self.value.bias", "attn_v.bias", 0 },
    { "attention.output.dense.weight", "attn_output.weight", 0 }, { "attention.output.dense.bias", "attn_output.bias", 0 },
    { "attention.output.LayerNorm.weight", "attn_output_norm.weight", 0 },
    { "attention.output.LayerNorm.bias", "attn_output_norm.bias", 0 },
    { "intermediate.dense.weight", "ffn_up.weight", 0 }, { "intermediate.dense.bias", "ffn_up.bias", 0 },
    { "output.dense.weight", "ffn_down.weight", 0 }, { "output.dense.bias", "ffn_down.bias", 0 },
    { "output.LayerNorm.weight", "layer_output_norm.weight", 0 }, { "output.LayerNorm.bias", "layer_output_norm.bias", 0 },
    { NULL, NULL, 0 } };
static const name_map BERT_GLOBAL[] = {
    { "embeddings.word_embeddings.weight", "token_embd.weight", 0 },
    { "embeddings.position_embeddings.weight", "position_embd.weight", 0 },
    { "embeddings.token_type_embeddings.weight", "token_types.weight", 0 },
    { "embeddings.LayerNorm.weight", "token_embd_norm.weight", 0 }, { "embeddings.LayerNorm.bias", "token_embd_norm.bias", 0 },
    { NULL, NULL, 0 } };

static const name_map DISTILBERT_LAYER[] = {
    { "attention.q_lin.weight", "attn_q.weight", 0 }, { "attention.q_lin.bias", "attn_q.bias", 0 },
    { "attention.k_lin.weight", "attn_k.weight", 0 }, { "attention.k_lin.bias", "attn_k.bias", 0 },
    { "attention.v_lin.weight", "attn_v.weight", 0 }, { "attention.v_lin.bias", "attn_v.bias", 0 },
    { "attention.out_lin.weight", "attn_output.weight", 0 }, { "attention.out_lin.bias", "attn_output.bias", 0 },
    { "sa_layer_norm.weight", "attn_output_norm.weight", 0 }, { "sa_layer_norm.bias", "attn_output_norm.bias", 0 },
    { "ffn.lin1.weight", "ffn_up.weight", 0 }, { "ffn.lin1.bias", "ffn_up.bias", 0 },
    { "ffn.lin2.weight", "ffn_down.weight", 0 }, { "ffn.lin2.bias", "ffn_down.bias", 0 },
    { "output_layer_norm.weight", "layer_output_norm.weight", 0 }, { "output_layer_norm.bias", "layer_output_norm.bias", 0 },
    { NULL, NULL, 0 } };
static const name_map DISTILBERT_GLOBAL[] = {
    { "embeddings.word_embeddings.weight", "token_embd.weight", 0 },
    { "embeddings.position_embeddings.weight", "position_embd.weight", 0 },
    { "embeddings.LayerNorm.weight", "token_embd_norm.weight", 0 }, { "embeddings.LayerNorm.bias", "token_embd_norm.bias", 0 },
    /* masked-LM head: vocab_transform -> GELU -> vocab_layer_norm -> projector tied to the embeddings + bias */
    { "vocab_transform.weight", "mlm.dense.weight", 0 }, { "vocab_transform.bias", "mlm.dense.bias", 0 },
    { "vocab_layer_norm.weight", "mlm.norm.weight", 0 }, { "vocab_layer_norm.bias", "mlm.norm.bias", 0 },
    { "vocab_projector.bias", "output.bias", 0 }, { NULL, NULL, 0 } };

/* gpt-oss: attention with biases and per-head sinks, a router with a bias; each layer's experts as whole stacks
 * (mlp.experts.*): MXFP4 *_blocks + *_scales (or unquantized [experts, in, out]) with the gate/up rows interleaved,
 * read by add_special */
static const name_map GPTOSS_LAYER[] = {
    { "input_layernorm.weight", "attn_norm.weight", 0 },
    { "self_attn.q_proj.weight", "attn_q.weight", 0 }, { "self_attn.q_proj.bias", "attn_q.bias", T_F32 },
    { "self_attn.k_proj.weight", "attn_k.weight", 0 }, { "self_attn.k_proj.bias", "attn_k.bias", T_F32 },
    { "self_attn.v_proj.weight", "attn_v.weight", 0 }, { "self_attn.v_proj.bias", "attn_v.bias", T_F32 },
    { "self_attn.o_proj.weight", "attn_output.weight", 0 }, { "self_attn.o_proj.bias", "attn_output.bias", T_F32 },
    { "self_attn.sinks", "attn_sinks.weight", T_F32 },
    { "post_attention_layernorm.weight", "post_attention_norm.weight", 0 },
    { "mlp.router.weight", "ffn_gate_inp.weight", 0 }, { "mlp.router.bias", "ffn_gate_inp.bias", T_F32 },
    { "mlp.experts.down_proj_bias", "ffn_down_exps.bias", T_F32 }, { NULL, NULL, 0 } };

/* DeepSeek-V2 / V3 (multi-head latent attention): kv_b_proj is split into attn_k_b / attn_v_b by add_kv_b; the
 * routed experts are one tensor each (mlp.experts.E.*), stacked as Qwen3-MoE's */
static const name_map DEEPSEEK2_LAYER[] = {
    { "input_layernorm.weight", "attn_norm.weight", 0 },
    { "self_attn.q_proj.weight", "attn_q.weight", 0 }, { "self_attn.q_a_proj.weight", "attn_q_a.weight", 0 },
    { "self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight", 0 }, { "self_attn.q_b_proj.weight", "attn_q_b.weight", 0 },
    { "self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight", 0 },
    { "self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight", 0 },
    { "self_attn.o_proj.weight", "attn_output.weight", 0 },
    { "post_attention_layernorm.weight", "ffn_norm.weight", 0 },
    { "mlp.gate_proj.weight", "ffn_gate.weight", 0 }, { "mlp.up_proj.weight", "ffn_up.weight", 0 },
    { "mlp.down_proj.weight", "ffn_down.weight", 0 }, { "mlp.gate.weight", "ffn_gate_inp.weight", 0 },
    { "mlp.gate.e_score_correction_bias", "exp_probs_b.bias", T_F32 },
    { "mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight", 0 },
    { "mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight", 0 },
    { "mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight", 0 }, { NULL, NULL, 0 } };

/* Ministral 3 / Mistral Small 3.x text towers (Llama layers; under model.language_model. or, in older
 * transformers, language_model.model.; the vision tower and projector match none and are left unread) */
static const name_map MISTRAL3_GLOBAL[] = {
    { "embed_tokens.weight", "token_embd.weight", 0 }, { "norm.weight", "output_norm.weight", 0 },
    { "lm_head.weight", "output.weight", 0 }, { NULL, NULL, 0 } };
#define MISTRAL3_LAYERS "model.language_model.layers.%d.|language_model.model.layers.%d.|model.layers.%d."
#define MISTRAL3_PREFIXES "model.language_model.|language_model.model.|language_model.|model.|"

/* Gemma 4's text tower: norms used as stored (no 1 + w), per-layer embeddings, the MoE layers' second FFN branch
 * with whole expert stacks ([experts, rows, cols], gate_up rows [gate | up] as GGUF's); rope_freqs comes from
 * config.json (add_gemma4_rope_freqs) */
static const name_map GEMMA4_LAYER[] = {
    { "input_layernorm.weight", "attn_norm.weight", 0 },
    { "self_attn.q_proj.weight", "attn_q.weight", 0 }, { "self_attn.k_proj.weight", "attn_k.weight", 0 },
    { "self_attn.v_proj.weight", "attn_v.weight", 0 }, { "self_attn.o_proj.weight", "attn_output.weight", 0 },
    { "self_attn.q_norm.weight", "attn_q_norm.weight", 0 }, { "self_attn.k_norm.weight", "attn_k_norm.weight", 0 },
    { "post_attention_layernorm.weight", "post_attention_norm.weight", 0 },
    { "pre_feedforward_layernorm.weight", "ffn_norm.weight", 0 },
    { "post_feedforward_layernorm.weight", "post_ffw_norm.weight", 0 },
    { "mlp.gate_proj.weight", "ffn_gate.weight", 0 }, { "mlp.up_proj.weight", "ffn_up.weight", 0 },
    { "mlp.down_proj.weight", "ffn_down.weight", 0 },
    { "per_layer_input_gate.weight", "inp_gate.weight", 0 }, { "per_layer_projection.weight", "proj.weight", 0 },
    { "post_per_layer_input_norm.weight", "post_norm.weight", 0 }, { "layer_scalar", "layer_output_scale.weight", T_F32 },
    { "pre_feedforward_layernorm_2.weight", "pre_ffw_norm_2.weight", 0 },
    { "post_feedforward_layernorm_1.weight", "post_ffw_norm_1.weight", 0 },
    { "post_feedforward_layernorm_2.weight", "post_ffw_norm_2.weight", 0 },
    { "router.proj.weight", "ffn_gate_inp.weight", 0 }, { "router.scale", "ffn_gate_inp.scale", T_F32 },
    { "router.per_expert_scale", "ffn_down_exps.scale", T_F32 },
    { "experts.gate_up_proj", "ffn_gate_up_exps.weight", T_STACK }, { "experts.down_proj", "ffn_down_exps.weight", T_STACK },
    { NULL, NULL, 0 } };
static const name_map GEMMA4_GLOBAL[] = {
    { "embed_tokens.weight", "token_embd.weight", 0 }, { "norm.weight", "output_norm.weight", 0 },
    { "embed_tokens_per_layer.weight", "per_layer_token_embd.weight", 0 },
    { "per_layer_model_projection.weight", "per_layer_model_proj.weight", 0 },
    { "per_layer_projection_norm.weight", "per_layer_proj_norm.weight", 0 },
    { "lm_head.weight", "output.weight", 0 }, { NULL, NULL, 0 } };

/* Gemma 3n's text tower: Gemma 4's names (norms as stored) and AltUp's and LAuReL's; altup_projections.K and
 * altup_unembed_projections.K are stacked into GGUF's 3-D altup_proj / altup_unembd_proj (GLOBAL_STACKS) */
static const name_map GEMMA3N_LAYER[] = {
    { "altup.correct_output_scale", "altup_correct_scale.weight", T_F32 },
    { "altup.correction_coefs.weight", "altup_correct_coef.weight", 0 },
    { "altup.prediction_coefs.weight", "altup_predict_coef.weight", 0 },
    { "altup.modality_router.weight", "altup_router.weight", 0 }, { "altup.router_norm.weight", "altup_router_norm.weight", 0 },
    { "laurel.linear_left.weight", "laurel_l.weight", 0 }, { "laurel.linear_right.weight", "laurel_r.weight", 0 },
    { "laurel.post_laurel_norm.weight", "laurel_post_norm.weight", 0 }, { NULL, NULL, 0 } };
/* Global matrices stored one per index ("<hf prefix><k>.weight"), stacked like experts into one 3-D tensor. */
static const name_map GLOBAL_STACKS[] = {
    { "altup_projections.", "altup_proj.weight", 0 }, { "altup_unembed_projections.", "altup_unembd_proj.weight", 0 },
    { NULL, NULL, 0 } };

typedef struct {
    const char *hf_arch;       /* config.json architectures[0] */
    const char *arch;          /* hearth / GGUF architecture */
    const char *layer_fmt;     /* layer prefixes tried, "%d" = layer index, '|' separated */
    const char *global_prefixes;  /* prefixes stripped before matching globals, '|' separated ("" = none) */
    const name_map *layer, *global;
    bool neox_from_hf;         /* rotate-half q/k: run NEOX rope */
    const name_map *layer_extra;   /* more layer names, tried after `layer` (or NULL) */
} family;

/* the text tower's names; model.visual.* (the vision tower) matches none and is left unread */
#define QWEN35_LAYERS "model.language_model.layers.%d.|model.layers.%d."
#define QWEN35_PREFIXES "model.language_model.|model.|"

static const family FAMILIES[] = {
    { "LlamaForCausalLM", "llama", "model.layers.%d.", "", LLAMA_LAYER, LLAMA_GLOBAL, true, NULL },
    { "MistralForCausalLM", "llama", "model.layers.%d.", "", LLAMA_LAYER, LLAMA_GLOBAL, true, NULL },
    { "MixtralForCausalLM", "llama", "model.layers.%d.", "", LLAMA_LAYER, LLAMA_GLOBAL, true, NULL },
    { "Qwen2ForCausalLM", "qwen2", "model.layers.%d.", "", LLAMA_LAYER, LLAMA_GLOBAL, false, NULL },
    { "Qwen3ForCausalLM", "qwen3", "model.layers.%d.", "", LLAMA_LAYER, LLAMA_GLOBAL, false, NULL },
    { "Qwen3MoeForCausalLM", "qwen3moe", "model.layers.%d.", "", LLAMA_LAYER, LLAMA_GLOBAL, false, NULL },
    { "Gemma3ForCausalLM", "gemma3", "model.layers.%d.", "", GEMMA3_LAYER, GEMMA3_GLOBAL, false, NULL },
    { "Qwen3_5ForConditionalGeneration", "qwen35", QWEN35_LAYERS, QWEN35_PREFIXES, QWEN35_LAYER, QWEN35_GLOBAL, false, NULL },
    { "Qwen3_5ForCausalLM", "qwen35", QWEN35_LAYERS, QWEN35_PREFIXES, QWEN35_LAYER, QWEN35_GLOBAL, false, NULL },
    { "Qwen3_5MoeForConditionalGeneration", "qwen35moe", QWEN35_LAYERS, QWEN35_PREFIXES, QWEN35_LAYER, QWEN35_GLOBAL, false, NULL },
    { "Qwen3_5MoeForCausalLM", "qwen35moe", QWEN35_LAYERS, QWEN35_PREFIXES, QWEN35_LAYER, QWEN35_GLOBAL, false, NULL },
    { "Qwen3NextForCausalLM", "qwen3next", "model.layers.%d.", "model.|", QWEN35_LAYER, QWEN35_GLOBAL, false, QWEN3NEXT_LAYER },
    { "GptOssForCausalLM", "gpt-oss", "model.layers.%d.", "", GPTOSS_LAYER, LLAMA_GLOBAL, false, NULL },
    { "DeepseekV2ForCausalLM", "deepseek2", "model.layers.%d.", "", DEEPSEEK2_LAYER, LLAMA_GLOBAL, false, NULL },
    { "DeepseekV3ForCausalLM", "deepseek2", "model.layers.%d.", "", DEEPSEEK2_LAYER, LLAMA_GLOBAL, false, NULL },
    { "Mistral3ForConditionalGeneration", "mistral3", MISTRAL3_LAYERS, MISTRAL3_PREFIXES, LLAMA_LAYER, MISTRAL3_GLOBAL, true, NULL },
    { "Ministral3ForCausalLM", "mistral3", MISTRAL3_LAYERS, MISTRAL3_PREFIXES, LLAMA_LAYER, MISTRAL3_GLOBAL, true, NULL },
    { "Gemma4ForConditionalGeneration", "gemma4", QWEN35_LAYERS, "model.language_model.|model.|", GEMMA4_LAYER, GEMMA4_GLOBAL, false, NULL },
    { "Gemma4ForCausalLM", "gemma4", QWEN35_LAYERS, "model.language_model.|model.|", GEMMA4_LAYER, GEMMA4_GLOBAL, false, NULL },
    { "Gemma3nForConditionalGeneration", "gemma3n", QWEN35_LAYERS, "model.language_model.|model.|", GEMMA4_LAYER, GEMMA4_GLOBAL, false,
      GEMMA3N_LAYER },
    { "Gemma3nForCausalLM", "gemma3n", QWEN35_LAYERS, "model.language_model.|model.|", GEMMA4_LAYER, GEMMA4_GLOBAL, false,
      GEMMA3N_LAYER },
    { "GPT2LMHeadModel", "gpt2", "transformer.h.%d.|h.%d.", "transformer.|", GPT2_LAYER, GPT2_GLOBAL, false, NULL },
    { "BertModel", "bert", "bert.encoder.layer.%d.|encoder.layer.%d.", "bert.|", BERT_LAYER, BERT_GLOBAL, false, NULL },
    { "DistilBertForMaskedLM", "bert", "distilbert.transformer.layer.%d.|transformer.layer.%d.", "distilbert.|",
      DISTILBERT_LAYER, DISTILBERT_GLOBAL, false, NULL },
};

/* ---- config.json -> GGUF metadata ---- */
static bool cfg_num(const cJSON *cfg, const char *key, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!cJSON_IsNumber(v)) return false;
    *out = v->valuedouble;
    return true;
}

/* Copies an integer config field (first of several names found) to "<arch>.<suffix>". */
static int put_u32(gguf_writer *w, const cJSON *cfg, const char *arch, const char *suffix, bool required,
                   hearth_err *err, const char *names) {
    char key[128], buf[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    snprintf(buf, sizeof buf, "%s", names);
    for (char *save = NULL, *n = strtok_r(buf, "|", &save); n; n = strtok_r(NULL, "|", &save)) {
        double v;
        if (!cfg_num(cfg, n, &v)) continue;
        if (v < 0 || v > 1e9 || v != floor(v)) return herr(err, "config.json: %s = %g is not a valid size", n, v);
        gguf_w_u32(w, key, (uint32_t)v);
        return 0;
    }
    return required ? herr(err, "config.json: missing %s", names) : 0;
}

static void put_f32(gguf_writer *w, const cJSON *cfg, const char *arch, const char *suffix, const char *name, double dflt) {
    char key[128];
    double v = dflt;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    cfg_num(cfg, name, &v);
    gguf_w_f32(w, key, (float)v);
}

/* Gemma 3's layer_types: a global layer every `period` layers, the rest sliding. */
static int gemma3_swa_period(const cJSON *cfg, hearth_err *err, uint32_t *period) {
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(cfg, "layer_types");
    double p;
    if (!cJSON_IsArray(lt)) { *period = cfg_num(cfg, "sliding_window_pattern", &p) && p >= 1 ? (uint32_t)p : 6; return 0; }
    int n = cJSON_GetArraySize(lt), first_global = -1;
    for (int i = 0; i < n && first_global < 0; i++) {
        const cJSON *e = cJSON_GetArrayItem(lt, i);
        if (cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention")) first_global = i;
    }
    *period = first_global < 0 ? (uint32_t)n + 1 : (uint32_t)first_global + 1;
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(lt, i);
        bool global = cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention");
        if (global != ((i + 1) % (int)*period == 0))
            return herr(err, "config.json: layer_types pattern is not 'one global layer every %u'", *period);
    }
    return 0;
}

/* Llama 3.1-style rope scaling: per-dimension frequency divisors, as the GGUF converter computes them. */
static float *llama3_rope_freqs(const cJSON *rs, int n_rot, double base) {
    double factor = 8, lo = 1, hi = 4, old_ctx = 8192;
    cfg_num(rs, "factor", &factor);
    cfg_num(rs, "low_freq_factor", &lo);
    cfg_num(rs, "high_freq_factor", &hi);
    cfg_num(rs, "original_max_position_embeddings", &old_ctx);
    float *ff = malloc((size_t)(n_rot / 2) * sizeof(float));
    if (!ff) return NULL;
    double lo_wav = old_ctx / lo, hi_wav = old_ctx / hi;
    for (int i = 0; i < n_rot / 2; i++) {
        double freq = 1.0 / pow(base, 2.0 * i / n_rot), wav = 2 * M_PI / freq;
        if (wav < hi_wav) ff[i] = 1.0f;
        else if (wav > lo_wav) ff[i] = (float)factor;
        else {
            double smooth = (old_ctx / wav - lo) / (hi - lo);
            ff[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
    return ff;
}

/* Mixtral (num_local_experts, intermediate_size per expert) and Qwen3-MoE (num_experts, moe_intermediate_size,
 * norm_topk_prob; every layer sparse). */
static int put_moe(gguf_writer *w, const cJSON *cfg, const char *a, hearth_err *err) {
    double n = 0, step = 1;
    if (!cfg_num(cfg, "num_local_experts", &n) && !cfg_num(cfg, "num_experts", &n)) return 0;
    const cJSON *dense = cJSON_GetObjectItemCaseSensitive(cfg, "mlp_only_layers");
    if ((cJSON_IsArray(dense) && cJSON_GetArraySize(dense) > 0) || (cfg_num(cfg, "decoder_sparse_step", &step) && step != 1))
        return herr(err, "config.json: dense layers between the sparse ones (mlp_only_layers, decoder_sparse_step) are not supported");
    if (put_u32(w, cfg, a, "expert_count", true, err, "num_local_experts|num_experts") ||
        put_u32(w, cfg, a, "expert_used_count", true, err, "num_experts_per_tok|experts_per_token") ||
        put_u32(w, cfg, a, "expert_feed_forward_length", false, err, "moe_intermediate_size"))
        return -1;
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(cfg, "norm_topk_prob");
    char key[128];
    snprintf(key, sizeof key, "%s.expert_weights_norm", a);
    if (cJSON_IsBool(norm)) gguf_w_bool(w, key, cJSON_IsTrue(norm));
    return 0;
}

/* Qwen3.5's hybrid layout: the DeltaNet sizes, the layer pattern (layer_types) and partial rope. */
static int put_qwen35(gguf_writer *w, const cJSON *cfg, const char *a, hearth_err *err) {
    double hd = 0, dv = 0, nv = 0, fi = 4, prf = 0.25, theta = 10000000.0;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(cfg, "rope_parameters");
    if (!cfg_num(cfg, "partial_rotary_factor", &prf) && cJSON_IsObject(rp)) cfg_num(rp, "partial_rotary_factor", &prf);
    if (!cfg_num(cfg, "rope_theta", &theta) && cJSON_IsObject(rp)) cfg_num(rp, "rope_theta", &theta);
    if (!cfg_num(cfg, "head_dim", &hd) || !cfg_num(cfg, "linear_value_head_dim", &dv) ||
        !cfg_num(cfg, "linear_num_value_heads", &nv) || !(prf > 0 && prf <= 1) || dv * nv > 1e9)
        return herr(err, "config.json: head_dim, linear_value_head_dim, linear_num_value_heads and a partial_rotary_factor "
                         "in (0, 1] are needed");
    if (put_u32(w, cfg, a, "ssm.conv_kernel", true, err, "linear_conv_kernel_dim") ||
        put_u32(w, cfg, a, "ssm.state_size", true, err, "linear_key_head_dim") ||
        put_u32(w, cfg, a, "ssm.group_count", true, err, "linear_num_key_heads") ||
        put_u32(w, cfg, a, "ssm.time_step_rank", true, err, "linear_num_value_heads") ||
        put_u32(w, cfg, a, "expert_shared_feed_forward_length", false, err, "shared_expert_intermediate_size"))
        return -1;
    char key[128];
    snprintf(key, sizeof key, "%s.ssm.inner_size", a);
    gguf_w_u32(w, key, (uint32_t)(dv * nv));
    snprintf(key, sizeof key, "%s.rope.dimension_count", a);
    gguf_w_u32(w, key, (uint32_t)(hd * prf));
    snprintf(key, sizeof key, "%s.rope.freq_base", a);
    gguf_w_f32(w, key, (float)theta);
    cfg_num(cfg, "full_attention_interval", &fi);
    snprintf(key, sizeof key, "%s.full_attention_interval", a);
    gguf_w_u32(w, key, fi >= 1 && fi <= 65536 ? (uint32_t)fi : 4);
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(cfg, "layer_types");
    if (cJSON_IsArray(lt)) {
        int n = cJSON_GetArraySize(lt);
        uint8_t *rec = malloc((size_t)(n ? n : 1));
        if (!rec) return herr(err, "out of memory");
        for (int i = 0; i < n; i++) {
            const cJSON *e = cJSON_GetArrayItem(lt, i);
            rec[i] = cJSON_IsString(e) && !strcmp(e->valuestring, "linear_attention");
        }
        snprintf(key, sizeof key, "%s.attention.recurrent_layers", a);
        gguf_w_arr(w, key, GGUF_BOOL, rec, (uint64_t)n);
        free(rec);
    }
    return 0;
}

/* YaRN (rope_scaling type "yarn"): the keys the converter writes; the scaling itself starts after
 * original_max_position_embeddings positions. */
static int put_yarn(gguf_writer *w, const cJSON *rs, const char *a, hearth_err *err) {
    double f;
    char key[128];
    if (!cfg_num(rs, "factor", &f) || !(f > 0 && f < 1e6)) return herr(err, "config.json: rope_scaling yarn needs a positive factor");
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    gguf_w_str(w, key, "yarn");
    snprintf(key, sizeof key, "%s.rope.scaling.factor", a);
    gguf_w_f32(w, key, (float)f);
    if (put_u32(w, rs, a, "rope.scaling.original_context_length", true, err, "original_max_position_embeddings")) return -1;
    double b;
    snprintf(key, sizeof key, "%s.rope.scaling.yarn_beta_fast", a);
    if (cfg_num(rs, "beta_fast", &b)) gguf_w_f32(w, key, (float)b);
    snprintf(key, sizeof key, "%s.rope.scaling.yarn_beta_slow", a);
    if (cfg_num(rs, "beta_slow", &b)) gguf_w_f32(w, key, (float)b);
    return 0;
}

/* gpt-oss: a sliding window on layers 0, 2, 4, ... (the pattern the model assumes; layer_types must say so). */
static int put_gptoss(gguf_writer *w, const cJSON *cfg, hearth_err *err) {
    if (put_u32(w, cfg, "gpt-oss", "attention.sliding_window", true, err, "sliding_window")) return -1;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(cfg, "layer_types");
    if (!cJSON_IsArray(lt)) return 0;
    for (int i = 0; i < cJSON_GetArraySize(lt); i++) {
        const cJSON *e = cJSON_GetArrayItem(lt, i);
        const char *want = i % 2 ? "full_attention" : "sliding_attention";
        if (!cJSON_IsString(e) || strcmp(e->valuestring, want))
            return herr(err, "config.json: layer_types[%d] should be '%s' (gpt-oss alternates sliding and full layers)", i, want);
    }
    return 0;
}

/* DeepSeek-V2 / V3 as the converter writes them: latent attention as MQA over [latent | rope key] (head_count_kv 1,
 * key_length kv_lora_rank + qk_rope_head_dim, value_length kv_lora_rank), the per-head sizes as *_mla, dense
 * leading layers, shared experts, the routing function and its scaling, YaRN with mscale_all_dim. */
static int put_deepseek2(gguf_writer *w, const cJSON *cfg, hearth_err *err) {
    const char *a = "deepseek2";
    double kv = 512, rope, nope, v, n_layer, x;
    if (!cfg_num(cfg, "qk_rope_head_dim", &rope) || !cfg_num(cfg, "qk_nope_head_dim", &nope) || !cfg_num(cfg, "v_head_dim", &v) ||
        !cfg_num(cfg, "num_hidden_layers", &n_layer))
        return herr(err, "config.json: qk_rope_head_dim, qk_nope_head_dim, v_head_dim and num_hidden_layers are needed");
    cfg_num(cfg, "kv_lora_rank", &kv);
    if (!(kv >= 1 && kv <= 65536 && rope >= 0 && rope <= 4096 && nope >= 0 && nope <= 4096 && v >= 1 && v <= 4096))
        return herr(err, "config.json: implausible latent attention sizes (kv_lora_rank %g, rope %g, nope %g, v %g)", kv, rope, nope, v);
    if (put_u32(w, cfg, a, "embedding_length", true, err, "hidden_size") ||
        put_u32(w, cfg, a, "block_count", true, err, "num_hidden_layers") ||
        put_u32(w, cfg, a, "attention.head_count", true, err, "num_attention_heads") ||
        put_u32(w, cfg, a, "feed_forward_length", true, err, "intermediate_size") ||
        put_u32(w, cfg, a, "context_length", false, err, "max_position_embeddings") ||
        put_u32(w, cfg, a, "expert_feed_forward_length", true, err, "moe_intermediate_size|intermediate_size") ||
        put_u32(w, cfg, a, "expert_count", false, err, "n_routed_experts") ||
        put_u32(w, cfg, a, "expert_used_count", false, err, "num_experts_per_tok") ||
        put_u32(w, cfg, a, "expert_shared_count", false, err, "n_shared_experts") ||
        put_u32(w, cfg, a, "expert_group_count", false, err, "n_group") ||
        put_u32(w, cfg, a, "expert_group_used_count", false, err, "topk_group") ||
        put_u32(w, cfg, a, "rope.dimension_count", true, err, "qk_rope_head_dim"))
        return -1;
    const cJSON *ql = cJSON_GetObjectItemCaseSensitive(cfg, "q_lora_rank");
    if (cJSON_IsNumber(ql) && put_u32(w, cfg, a, "attention.q_lora_rank", false, err, "q_lora_rank")) return -1;
    const bool moe = cfg_num(cfg, "n_routed_experts", &x);
    double dense = moe ? 0 : n_layer;
    cfg_num(cfg, "first_k_dense_replace", &dense);
    if (!(dense >= 0 && dense <= n_layer)) return herr(err, "config.json: first_k_dense_replace %g is not in [0, %g]", dense, n_layer);
    gguf_w_u32(w, "deepseek2.leading_dense_block_count", (uint32_t)dense);
    gguf_w_u32(w, "deepseek2.attention.head_count_kv", 1);
    gguf_w_u32(w, "deepseek2.attention.kv_lora_rank", (uint32_t)kv);
    gguf_w_u32(w, "deepseek2.attention.key_length", (uint32_t)(kv + rope));
    gguf_w_u32(w, "deepseek2.attention.value_length", (uint32_t)kv);
    gguf_w_u32(w, "deepseek2.attention.key_length_mla", (uint32_t)(nope + rope));
    gguf_w_u32(w, "deepseek2.attention.value_length_mla", (uint32_t)v);
    put_f32(w, cfg, a, "attention.layer_norm_rms_epsilon", "rms_norm_eps", 1e-6);
    put_f32(w, cfg, a, "rope.freq_base", "rope_theta", 10000.0);
    if (cfg_num(cfg, "routed_scaling_factor", &x)) gguf_w_f32(w, "deepseek2.expert_weights_scale", (float)x);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "norm_topk_prob"))) gguf_w_bool(w, "deepseek2.expert_weights_norm", true);
    const cJSON *sf = cJSON_GetObjectItemCaseSensitive(cfg, "scoring_func");
    if (cJSON_IsString(sf)) {
        if (strcmp(sf->valuestring, "softmax") && strcmp(sf->valuestring, "sigmoid"))
            return herr(err, "config.json: scoring_func '%s' is not supported (softmax, sigmoid)", sf->valuestring);
        gguf_w_u32(w, "deepseek2.expert_gating_func", strcmp(sf->valuestring, "softmax") ? 2 : 1);
    }
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
    if (cJSON_IsObject(rs)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
        if (!cJSON_IsString(t)) t = cJSON_GetObjectItemCaseSensitive(rs, "type");
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "yarn"))
            return herr(err, "config.json: rope_scaling type '%s' is not supported (yarn)", cJSON_IsString(t) ? t->valuestring : "?");
        if (put_yarn(w, rs, a, err)) return -1;
        if (cfg_num(rs, "mscale_all_dim", &x)) gguf_w_f32(w, "deepseek2.rope.scaling.yarn_log_multiplier", (float)(0.1 * x));
    }
    return 0;
}

/* Ministral 3: rope_parameters (or rope_scaling) holds the base and YaRN, whose magnitude is mscale_all_dim
 * itself (yarn_log_multiplier, unlike DeepSeek's 0.1 x), and Llama 4's attention temperature
 * (llama_4_scaling_beta); Mistral Small 3.x: a plain rope_theta. */
static int put_mistral3(gguf_writer *w, const cJSON *cfg, hearth_err *err) {
    const char *a = "mistral3";
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(cfg, "rope_parameters");
    if (!cJSON_IsObject(rp)) rp = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
    double theta = 10000.0, x;
    if (!cfg_num(cfg, "rope_theta", &theta) && cJSON_IsObject(rp)) cfg_num(rp, "rope_theta", &theta);
    gguf_w_f32(w, "mistral3.rope.freq_base", (float)theta);
    if (!cJSON_IsObject(rp)) return 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
    if (!cJSON_IsString(t)) t = cJSON_GetObjectItemCaseSensitive(rp, "type");
    if (!cJSON_IsString(t) || !strcmp(t->valuestring, "default")) return 0;
    if (strcmp(t->valuestring, "yarn")) return herr(err, "config.json: rope type '%s' is not supported (yarn, default)", t->valuestring);
    if (put_yarn(w, rp, a, err)) return -1;
    if (cfg_num(rp, "mscale_all_dim", &x)) gguf_w_f32(w, "mistral3.rope.scaling.yarn_log_multiplier", (float)x);
    if (cfg_num(rp, "llama_4_scaling_beta", &x)) gguf_w_f32(w, "mistral3.attention.temperature_scale", (float)x);
    return 0;
}

/* A rope_parameters sub-object (Gemma 4's "full_attention" / "sliding_attention"), or NULL. */
static const cJSON *rope_sub(const cJSON *cfg, const char *which) {
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(cfg, "rope_parameters");
    const cJSON *sub = cJSON_IsObject(rp) ? cJSON_GetObjectItemCaseSensitive(rp, which) : NULL;
    return cJSON_IsObject(sub) ? sub : NULL;
}

/* Gemma 4 as the converter writes it: per-layer sliding flags (layer_types), kv heads and FFN widths (arrays where
 * global layers differ or KV-sharing layers are double wide), the global head size (global_head_dim) and the
 * sliding one (head_dim), each kind's rope base, KV sharing, per-layer embeddings, experts, the final softcap. */
static int put_gemma4(gguf_writer *w, const cJSON *cfg, hearth_err *err) {
    const char *a = "gemma4";
    double L, hd_swa, hd, x;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(cfg, "layer_types");
    if (!cfg_num(cfg, "num_hidden_layers", &L) || !(L >= 1 && L <= 65536) || !cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != (int)L)
        return herr(err, "config.json: num_hidden_layers and a layer_types list of that length are needed");
    if (!cfg_num(cfg, "head_dim", &hd_swa) || !cfg_num(cfg, "global_head_dim", &hd) || !(hd >= 2 && hd <= 4096 && hd_swa >= 2 && hd_swa <= 4096))
        return herr(err, "config.json: head_dim and global_head_dim are needed");
    if (put_u32(w, cfg, a, "embedding_length", true, err, "hidden_size") ||
        put_u32(w, cfg, a, "block_count", true, err, "num_hidden_layers") ||
        put_u32(w, cfg, a, "attention.head_count", true, err, "num_attention_heads") ||
        put_u32(w, cfg, a, "context_length", false, err, "max_position_embeddings") ||
        put_u32(w, cfg, a, "attention.sliding_window", true, err, "sliding_window") ||
        put_u32(w, cfg, a, "attention.shared_kv_layers", false, err, "num_kv_shared_layers") ||
        put_u32(w, cfg, a, "expert_count", false, err, "num_experts|num_local_experts") ||
        put_u32(w, cfg, a, "expert_used_count", false, err, "top_k_experts|num_experts_per_tok") ||
        put_u32(w, cfg, a, "expert_feed_forward_length", false, err, "expert_intermediate_size|moe_intermediate_size"))
        return -1;
    const int n = (int)L;
    uint8_t *swa = malloc((size_t)n);
    uint32_t *arr = malloc((size_t)n * sizeof *arr);
    if (!swa || !arr) { free(swa); free(arr); return herr(err, "out of memory"); }
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(lt, i);
        swa[i] = cJSON_IsString(e) && !strcmp(e->valuestring, "sliding_attention");
    }
    gguf_w_arr(w, "gemma4.attention.sliding_window_pattern", GGUF_BOOL, swa, (uint64_t)n);
    double kv = 0, kv_full = 0, ff = 0, shared = 0;
    cfg_num(cfg, "num_key_value_heads", &kv);
    cfg_num(cfg, "intermediate_size", &ff);
    cfg_num(cfg, "num_kv_shared_layers", &shared);
    if (!(kv >= 1 && kv <= 65536 && ff >= 1 && ff <= (1 << 23))) {
        free(swa); free(arr);
        return herr(err, "config.json: num_key_value_heads and intermediate_size are needed");
    }
    if (cfg_num(cfg, "num_global_key_value_heads", &kv_full) && kv_full >= 1 && kv_full <= 65536) {
        for (int i = 0; i < n; i++) arr[i] = (uint32_t)(swa[i] ? kv : kv_full);
        gguf_w_arr(w, "gemma4.attention.head_count_kv", GGUF_U32, arr, (uint64_t)n);
    } else gguf_w_u32(w, "gemma4.attention.head_count_kv", (uint32_t)kv);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "use_double_wide_mlp"))) {
        for (int i = 0; i < n; i++) arr[i] = (uint32_t)(i < n - (int)shared ? ff : 2 * ff);
        gguf_w_arr(w, "gemma4.feed_forward_length", GGUF_U32, arr, (uint64_t)n);
    } else gguf_w_u32(w, "gemma4.feed_forward_length", (uint32_t)ff);
    free(swa);
    free(arr);
    gguf_w_u32(w, "gemma4.attention.key_length", (uint32_t)hd);
    gguf_w_u32(w, "gemma4.attention.value_length", (uint32_t)hd);
    gguf_w_u32(w, "gemma4.attention.key_length_swa", (uint32_t)hd_swa);
    gguf_w_u32(w, "gemma4.attention.value_length_swa", (uint32_t)hd_swa);
    gguf_w_u32(w, "gemma4.rope.dimension_count", (uint32_t)hd);
    double prf_swa = 1, base = 1000000.0, base_swa = 10000.0;
    const cJSON *full = rope_sub(cfg, "full_attention"), *slide = rope_sub(cfg, "sliding_attention");
    if (full) cfg_num(full, "rope_theta", &base);
    if (slide) cfg_num(slide, "rope_theta", &base_swa), cfg_num(slide, "partial_rotary_factor", &prf_swa);
    gguf_w_u32(w, "gemma4.rope.dimension_count_swa", (uint32_t)(hd_swa * prf_swa));
    gguf_w_f32(w, "gemma4.rope.freq_base", (float)base);
    gguf_w_f32(w, "gemma4.rope.freq_base_swa", (float)base_swa);
    put_f32(w, cfg, a, "attention.layer_norm_rms_epsilon", "rms_norm_eps", 1e-6);
    x = 0;
    cfg_num(cfg, "hidden_size_per_layer_input", &x);
    gguf_w_u32(w, "gemma4.embedding_length_per_layer_input", x >= 0 && x <= 65536 ? (uint32_t)x : 0);
    if (cfg_num(cfg, "final_logit_softcapping", &x) && x > 0) gguf_w_f32(w, "gemma4.final_logit_softcapping", (float)x);
    return 0;
}

/* The standard normal's quantile (Acklam's rational approximation, one Halley step on erfc: double precision). */
static double normal_quantile(double p) {
    static const double a[] = { -3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
                                -3.066479806614716e+01, 2.506628277459239e+00 };
    static const double b[] = { -5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
                                -1.328068155288572e+01 };
    static const double c[] = { -7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
                                4.374664141464968e+00, 2.938163982698783e+00 };
    static const double d[] = { 7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00 };
    if (p <= 0) return -INFINITY;
    if (p >= 1) return INFINITY;
    double x;
    if (p < 0.02425 || p > 1 - 0.02425) {
        const double q = sqrt(-2 * log(p < 0.5 ? p : 1 - p));
        x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
        if (p > 0.5) x = -x;
    } else {
        const double q = p - 0.5, r = q * q;
        x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
            (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
    }
    const double e = 0.5 * erfc(-x / sqrt(2)) - p, u = e * sqrt(2 * M_PI) * exp(x * x / 2);
    return x - u / (1 + x * u / 2);
}

/* A config number, or a list of n of them (one per layer): "<arch>.<suffix>" as a u32 or an array. */
static int put_u32_or_list(gguf_writer *w, const cJSON *cfg, const char *arch, const char *suffix, const char *name, int n,
                           hearth_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, name);
    if (!cJSON_IsArray(v)) return put_u32(w, cfg, arch, suffix, true, err, name);
    if (cJSON_GetArraySize(v) != n) return herr(err, "config.json: %s has %d values for %d layers", name, cJSON_GetArraySize(v), n);
    uint32_t *arr = malloc((size_t)n * sizeof *arr);
    if (!arr) return herr(err, "out of memory");
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsNumber(e) || !(e->valuedouble >= 1 && e->valuedouble <= (1 << 24))) {
            free(arr);
            return herr(err, "config.json: %s[%d] is not a valid size", name, i);
        }
        arr[i] = (uint32_t)e->valuedouble;
    }
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    gguf_w_arr(w, key, GGUF_U32, arr, (uint64_t)n);
    free(arr);
    return 0;
}

/* Gemma 3n as its converter writes it: Gemma 3's keys with one head size, layer_types as flags, intermediate_size
 * a number or a per-layer list, AltUp's and the per-layer embeddings' sizes, KV sharing, and each layer's target
 * activation sparsity as the std multiplier the converter stores (its normal quantile: -inf for none). */
static int put_gemma3n(gguf_writer *w, const cJSON *cfg, hearth_err *err) {
    const char *a = "gemma3n";
    double L, x;
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(cfg, "layer_types");
    if (!cfg_num(cfg, "num_hidden_layers", &L) || !(L >= 1 && L <= 65536) || !cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != (int)L)
        return herr(err, "config.json: num_hidden_layers and a layer_types list of that length are needed");
    const int n = (int)L;
    if (put_u32(w, cfg, a, "embedding_length", true, err, "hidden_size") ||
        put_u32(w, cfg, a, "block_count", true, err, "num_hidden_layers") ||
        put_u32(w, cfg, a, "attention.head_count", true, err, "num_attention_heads") ||
        put_u32(w, cfg, a, "attention.head_count_kv", true, err, "num_key_value_heads") ||
        put_u32(w, cfg, a, "context_length", false, err, "max_position_embeddings") ||
        put_u32(w, cfg, a, "attention.key_length", true, err, "head_dim") ||
        put_u32(w, cfg, a, "attention.value_length", true, err, "head_dim") ||
        put_u32(w, cfg, a, "attention.sliding_window", true, err, "sliding_window") ||
        put_u32(w, cfg, a, "attention.shared_kv_layers", false, err, "num_kv_shared_layers") ||
        put_u32(w, cfg, a, "altup.num_inputs", false, err, "altup_num_inputs") ||
        put_u32(w, cfg, a, "altup.active_idx", false, err, "altup_active_idx") ||
        put_u32(w, cfg, a, "embedding_length_per_layer_input", true, err, "hidden_size_per_layer_input") ||
        put_u32_or_list(w, cfg, a, "feed_forward_length", "intermediate_size", n, err))
        return -1;
    uint8_t *swa = malloc((size_t)n);
    float *sp = malloc((size_t)n * sizeof *sp);
    if (!swa || !sp) { free(swa); free(sp); return herr(err, "out of memory"); }
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(lt, i);
        swa[i] = cJSON_IsString(e) && !strcmp(e->valuestring, "sliding_attention");
    }
    gguf_w_arr(w, "gemma3n.attention.sliding_window_pattern", GGUF_BOOL, swa, (uint64_t)n);
    free(swa);
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(cfg, "activation_sparsity_pattern");
    if (cJSON_IsArray(pat)) {
        if (cJSON_GetArraySize(pat) != n) { free(sp); return herr(err, "config.json: activation_sparsity_pattern has %d values for %d layers", cJSON_GetArraySize(pat), n); }
        for (int i = 0; i < n; i++) {
            const cJSON *e = cJSON_GetArrayItem(pat, i);
            if (!cJSON_IsNumber(e) || !(e->valuedouble >= 0 && e->valuedouble < 1)) {
                free(sp);
                return herr(err, "config.json: activation_sparsity_pattern[%d] is not in [0, 1)", i);
            }
            sp[i] = (float)normal_quantile(e->valuedouble);
        }
        gguf_w_arr_f32(w, "gemma3n.activation_sparsity_scale", sp, (uint64_t)n);
    }
    free(sp);
    double base = 1000000.0, base_swa = 10000.0;
    const cJSON *full = rope_sub(cfg, "full_attention"), *slide = rope_sub(cfg, "sliding_attention");
    if (full) cfg_num(full, "rope_theta", &base);
    else cfg_num(cfg, "rope_theta", &base);
    if (slide) cfg_num(slide, "rope_theta", &base_swa);
    else cfg_num(cfg, "rope_local_base_freq", &base_swa);
    gguf_w_f32(w, "gemma3n.rope.freq_base", (float)base);
    gguf_w_f32(w, "gemma3n.rope.freq_base_swa", (float)base_swa);
    put_f32(w, cfg, a, "attention.layer_norm_rms_epsilon", "rms_norm_eps", 1e-6);
    if (cfg_num(cfg, "final_logit_softcapping", &x) && x > 0) gguf_w_f32(w, "gemma3n.final_logit_softcapping", (float)x);
    return 0;
}

/* Gemma 4's global layers rope only partial_rotary_factor of their dims ("proportional"): the converter's
 * rope_freqs, 1 for the rotated pairs and 1e30 (no rotation) for the rest. */
static int add_gemma4_rope_freqs(hearth_model *m, const cJSON *cfg, hearth_err *err) {
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
    if (cJSON_IsObject(text)) cfg = text;
    const cJSON *full = rope_sub(cfg, "full_attention");
    double hd = 0, prf = 1;
    cfg_num(cfg, "global_head_dim", &hd);
    if (full) cfg_num(full, "partial_rotary_factor", &prf);
    if (!(prf > 0 && prf <= 1)) return herr(err, "config.json: partial_rotary_factor %g is not in (0, 1]", prf);
    const int half = (int)hd / 2, rot = (int)(hd * prf / 2);
    if (half < 1) return herr(err, "config.json: global_head_dim is needed");
    float *ff = malloc((size_t)half * sizeof(float));
    char *name = strdup("rope_freqs.weight");
    if (!ff || !name) { free(ff); free(name); return herr(err, "out of memory"); }
    if (model_own(m, name, err)) { free(ff); return -1; }   /* (model_own frees what it cannot keep) */
    if (model_own(m, ff, err)) return -1;
    for (int i = 0; i < half; i++) ff[i] = i < rot ? 1.0f : 1e30f;
    ht_tensor *t = &m->tensors[m->n_tensors++];
    *t = (ht_tensor){ .name = name, .type = HT_F32, .n_dims = 1, .ne = { half, 1, 1, 1 }, .data = ff,
                      .row_bytes = (size_t)half * 4, .nbytes = (size_t)half * 4 };
    return 0;
}

static int build_metadata(gguf_writer *w, const family *fam, const cJSON *cfg, hearth_err *err) {
    const char *a = fam->arch;
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");   /* a multimodal model's text tower */
    if (cJSON_IsObject(text)) cfg = text;
    const bool qwen35 = !strncmp(a, "qwen35", 6) || !strcmp(a, "qwen3next");
    gguf_w_str(w, "general.architecture", a);
    gguf_w_str(w, "general.name", fam->hf_arch);
    if (!strcmp(fam->hf_arch, "GPT2LMHeadModel")) {
        if (put_u32(w, cfg, a, "embedding_length", true, err, "n_embd") ||
            put_u32(w, cfg, a, "block_count", true, err, "n_layer") ||
            put_u32(w, cfg, a, "attention.head_count", true, err, "n_head") ||
            put_u32(w, cfg, a, "context_length", true, err, "n_positions|n_ctx") ||
            put_u32(w, cfg, a, "feed_forward_length", false, err, "n_inner"))
            return -1;
        put_f32(w, cfg, a, "attention.layer_norm_epsilon", "layer_norm_epsilon", 1e-5);
        return 0;
    }
    if (!strcmp(a, "deepseek2")) return put_deepseek2(w, cfg, err);
    if (!strcmp(a, "gemma4")) return put_gemma4(w, cfg, err);
    if (!strcmp(a, "gemma3n")) return put_gemma3n(w, cfg, err);
    if (!strcmp(fam->hf_arch, "DistilBertForMaskedLM")) {
        if (put_u32(w, cfg, a, "embedding_length", true, err, "dim") ||
            put_u32(w, cfg, a, "block_count", true, err, "n_layers") ||
            put_u32(w, cfg, a, "attention.head_count", true, err, "n_heads") ||
            put_u32(w, cfg, a, "feed_forward_length", true, err, "hidden_dim") ||
            put_u32(w, cfg, a, "context_length", true, err, "max_position_embeddings"))
            return -1;
        gguf_w_f32(w, "bert.attention.layer_norm_epsilon", 1e-12f);
        gguf_w_bool(w, "bert.attention.causal", false);
        gguf_w_u32(w, "bert.pooling_type", 1);
        return 0;
    }
    if (put_u32(w, cfg, a, "embedding_length", true, err, "hidden_size") ||
        put_u32(w, cfg, a, "block_count", true, err, "num_hidden_layers") ||
        put_u32(w, cfg, a, "attention.head_count", true, err, "num_attention_heads") ||
        put_u32(w, cfg, a, "attention.head_count_kv", false, err, "num_key_value_heads") ||
        put_u32(w, cfg, a, "feed_forward_length", strcmp(a, "qwen35moe"), err, "intermediate_size") ||
        put_u32(w, cfg, a, "context_length", false, err, "max_position_embeddings") ||
        put_u32(w, cfg, a, "attention.key_length", false, err, "head_dim") ||
        put_u32(w, cfg, a, "attention.value_length", false, err, "head_dim"))
        return -1;
    if (!strcmp(a, "bert")) {
        put_f32(w, cfg, a, "attention.layer_norm_epsilon", "layer_norm_eps", 1e-12);
        gguf_w_bool(w, "bert.attention.causal", false);
        gguf_w_u32(w, "bert.pooling_type", 1);   /* mean, as sentence-transformers pools BERT */
        return 0;
    }
    if (put_moe(w, cfg, a, err)) return -1;
    put_f32(w, cfg, a, "attention.layer_norm_rms_epsilon", "rms_norm_eps", 1e-6);
    if (qwen35) return put_qwen35(w, cfg, a, err);   /* (its rope_parameters carry M-RoPE sections: text positions) */
    if (!strcmp(a, "mistral3")) return put_mistral3(w, cfg, err);
    put_f32(w, cfg, a, "rope.freq_base", "rope_theta", 10000.0);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
    if (cJSON_IsObject(rs)) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
        if (!cJSON_IsString(t)) t = cJSON_GetObjectItemCaseSensitive(rs, "type");
        double f;
        if (cJSON_IsString(t) && !strcmp(t->valuestring, "linear") && cfg_num(rs, "factor", &f)) {
            char key[128];
            snprintf(key, sizeof key, "%s.rope.scaling.type", a);
            gguf_w_str(w, key, "linear");
            snprintf(key, sizeof key, "%s.rope.scaling.factor", a);
            gguf_w_f32(w, key, (float)f);
        } else if (cJSON_IsString(t) && !strcmp(t->valuestring, "yarn") && !strcmp(a, "gpt-oss")) {   /* (the one proven here) */
            if (put_yarn(w, rs, a, err)) return -1;
        } else if (!cJSON_IsString(t) || (strcmp(t->valuestring, "llama3") && strcmp(t->valuestring, "default")))
            return herr(err, "config.json: rope_scaling type '%s' is not supported", cJSON_IsString(t) ? t->valuestring : "?");
    }
    if (!strcmp(a, "gpt-oss")) return put_gptoss(w, cfg, err);
    if (!strcmp(a, "gemma3")) {
        uint32_t period;
        double qs;
        if (gemma3_swa_period(cfg, err, &period)) return -1;
        if (put_u32(w, cfg, a, "attention.sliding_window", false, err, "sliding_window")) return -1;
        gguf_w_u32(w, "gemma3.attention.sliding_window_pattern", period);
        put_f32(w, cfg, a, "rope.freq_base_swa", "rope_local_base_freq", 10000.0);
        if (cfg_num(cfg, "query_pre_attn_scalar", &qs) && qs > 0) gguf_w_f32(w, "gemma3.attention.scale", (float)(1.0 / sqrt(qs)));
    }
    return 0;
}

/* Writes the metadata into an anonymous in-memory file and opens it like any GGUF. */
static int open_metadata(gguf_writer *w, gguf_file **out, hearth_err *err) {
    int fd = memfd_create("hearth-hf-metadata", 0);
    if (fd < 0) return herr(err, "memfd_create failed");
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int rc = gguf_writer_write_fd(w, fd, "the HF metadata", err);
    if (!rc) rc = gguf_open(path, out, err);
    close(fd);
    return rc;
}

/* ---- tensors ---- */
static bool match_prefix(const char *name, const char *prefixes, int *layer, const char **rest) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", prefixes);
    for (char *save = NULL, *p = strtok_r(buf, "|", &save); p; p = strtok_r(NULL, "|", &save)) {
        const char *d = strstr(p, "%d");
        if (!d) continue;
        size_t pre = (size_t)(d - p);
        if (strncmp(name, p, pre)) continue;
        char *end;
        long il = strtol(name + pre, &end, 10);
        if (end == name + pre || il < 0 || il > 100000 || strncmp(end, d + 2, strlen(d + 2))) continue;
        *layer = (int)il;
        *rest = end + strlen(d + 2);
        return true;
    }
    return false;
}

static const name_map *lookup(const name_map *tab, const char *name) {
    for (; tab->hf; tab++) if (!strcmp(tab->hf, name)) return tab;
    return NULL;
}

/* "<expert prefix><e>.<name>": the expert's index and its name in EXPERT_LAYER; NULL for other names. */
static const name_map *expert_name(const char *rest, int *expert) {
    for (size_t i = 0; i < sizeof EXPERT_PREFIXES / sizeof EXPERT_PREFIXES[0]; i++) {
        size_t n = strlen(EXPERT_PREFIXES[i]);
        if (strncmp(rest, EXPERT_PREFIXES[i], n) || rest[n] < '0' || rest[n] > '9') continue;
        char *end;
        long e = strtol(rest + n, &end, 10);
        if (*end != '.' || e > HT_MAX_EXPERTS) return NULL;
        *expert = (int)e;
        return lookup(EXPERT_LAYER, end + 1);
    }
    return NULL;
}

/* Resolves an HF tensor name to its GGUF name and transform; false for tensors the model doesn't use. One
 * expert's matrix gets its stack's name and *expert its index (-1 for every other tensor). */
static bool map_name(const family *fam, const char *name, char *out, size_t cap, int *transform, int *expert) {
    int il;
    const char *rest;
    const name_map *e;
    *expert = -1;
    if (match_prefix(name, fam->layer_fmt, &il, &rest)) {
        if (!(e = lookup(fam->layer, rest)) && !(fam->layer_extra && (e = lookup(fam->layer_extra, rest))) &&
            !(e = expert_name(rest, expert)))
            return false;
        snprintf(out, cap, "blk.%d.%s", il, e->gguf);
        *transform = e->transform;
        return true;
    }
    char buf[128];
    snprintf(buf, sizeof buf, "%s", fam->global_prefixes);
    const char *p = buf;
    for (;;) {   /* each '|'-separated prefix, including the empty one */
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (!strncmp(name, p, n) && (e = lookup(fam->global, name + n))) {
            snprintf(out, cap, "%s", e->gguf);
            *transform = e->transform;
            return true;
        }
        for (const name_map *g = GLOBAL_STACKS; !strncmp(name, p, n) && g->hf; g++) {
            const char *r = name + n;
            const size_t k = strlen(g->hf);
            char *end;
            if (strncmp(r, g->hf, k) || r[k] < '0' || r[k] > '9') continue;
            long i = strtol(r + k, &end, 10);
            if (strcmp(end, ".weight") || i > HT_MAX_EXPERTS) continue;
            snprintf(out, cap, "%s", g->gguf);
            *transform = 0;
            *expert = (int)i;
            return true;
        }
        if (!bar) return false;
        p = bar + 1;
    }
}

bool hf_gguf_name(const char *arch, const char *hf_name, char *out, size_t cap, bool *rotate_half) {
    for (size_t i = 0; i < sizeof FAMILIES / sizeof FAMILIES[0]; i++) {
        if (strcmp(FAMILIES[i].arch, arch)) continue;
        int transform, expert;
        *rotate_half = FAMILIES[i].neox_from_hf;
        return map_name(&FAMILIES[i], hf_name, out, cap, &transform, &expert) && transform == T_PLAIN && expert < 0;
    }
    return false;
}

static int add_tensor(hearth_model *m, const st_tensor *st, const char *gname, int transform, hearth_err *err) {
    if (st->type == ST_UNSUPPORTED) return herr(err, "tensor '%s': dtype %s not supported (F32, F16, BF16 only)", st->name, st->dtype);
    const bool squeeze = transform == T_SQUEEZE && st->n_dims == 3 && st->ne[1] == 1;
    const bool stack = transform == T_STACK;
    if (stack ? st->n_dims != 3 : (st->n_dims < 1 || st->n_dims > 2) && !squeeze)
        return herr(err, "tensor '%s': %d dimensions, expected %s", st->name, st->n_dims, stack ? "3 (experts, rows, cols)" : "1 or 2");
    ht_tensor *t = &m->tensors[m->n_tensors];
    char *name = strdup(gname);
    if (!name || model_own(m, name, err)) return herr(err, "out of memory");
    t->name = name;
    t->type = (uint32_t)st->type;
    t->n_dims = st->n_dims;
    for (int d = 0; d < 4; d++) t->ne[d] = d < st->n_dims ? st->ne[d] : 1;
    if (squeeze) t->n_dims = 2, t->ne[1] = st->ne[2], t->ne[2] = 1;
    t->data = st->data;
    t->nbytes = st->nbytes;
    if ((transform && !stack) || !st->aligned) {
        /* layout change (or unaligned data): an F32 copy */
        int64_t rows = t->ne[1] * t->ne[2], cols = t->ne[0];
        float *f = malloc((size_t)(rows * cols) * sizeof(float));
        if (!f) return herr(err, "out of memory converting '%s'", st->name);
        if (st_read_f32(st, 0, (uint64_t)(rows * cols), f, err)) { free(f); return -1; }
        if (transform == T_TRANSPOSE) {   /* Conv1D [in, out] -> rows of out */
            float *tr = malloc((size_t)(rows * cols) * sizeof(float));
            if (!tr) { free(f); return herr(err, "out of memory converting '%s'", st->name); }
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < cols; c++) tr[c * rows + r] = f[r * cols + c];
            free(f);
            f = tr;
            t->ne[0] = rows;
            t->ne[1] = cols;
        } else if (transform == T_PLUS_ONE) {
            for (int64_t i = 0; i < rows * cols; i++) f[i] += 1.0f;
        } else if (transform == T_NEG_EXP) {
            for (int64_t i = 0; i < rows * cols; i++) f[i] = -expf(f[i]);
        }
        if (model_own(m, f, err)) return -1;
        t->data = f;
        t->type = HT_F32;
        t->nbytes = (size_t)(rows * cols) * sizeof(float);
    }
    t->row_bytes = ht_row_size(t->type, t->ne[0]);
    m->n_tensors++;
    return 0;
}

typedef struct { const st_tensor *st; char name[160]; int expert; } expert_part;

static int by_name_then_expert(const void *a, const void *b) {
    const expert_part *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->expert > y->expert) - (x->expert < y->expert);
}

/* parts[0..n): experts 0..n-1 of one stack, sorted. Their matrices become one 3-D tensor whose slabs are the
 * experts' data in the mapping (an F32 copy of each where one is unaligned or the types differ). */
static int add_stack(hearth_model *m, const expert_part *parts, int n, hearth_err *err) {
    const st_tensor *s0 = parts[0].st;
    bool copy = false;
    for (int e = 0; e < n; e++) {
        const st_tensor *s = parts[e].st;
        if (parts[e].expert != e) return herr(err, "%s: expert %d missing (the experts are numbered 0..%d)", s0->name, e, n - 1);
        if (s->n_dims != 2 || s->ne[0] != s0->ne[0] || s->ne[1] != s0->ne[1])
            return herr(err, "tensor '%s': every expert's matrix must have the shape of expert 0's", s->name);
        if (s->type == ST_UNSUPPORTED) return herr(err, "tensor '%s': dtype %s not supported (F32, F16, BF16 only)", s->name, s->dtype);
        copy |= !s->aligned || s->type != s0->type;
    }
    const void **slabs = calloc((size_t)n, sizeof *slabs);
    char *name = strdup(parts[0].name);
    if (!slabs || !name) { free(slabs); free(name); return herr(err, "out of memory"); }
    if (model_own(m, slabs, err) || model_own(m, name, err)) return -1;
    const uint64_t per = (uint64_t)s0->ne[0] * (uint64_t)s0->ne[1];
    for (int e = 0; e < n; e++) {
        slabs[e] = parts[e].st->data;
        if (!copy) continue;
        float *f = malloc(per * sizeof(float));
        if (!f) return herr(err, "out of memory converting '%s'", parts[e].st->name);
        if (st_read_f32(parts[e].st, 0, per, f, err)) { free(f); return -1; }
        if (model_own(m, f, err)) return -1;
        slabs[e] = f;
    }
    ht_tensor *t = &m->tensors[m->n_tensors++];
    *t = (ht_tensor){ .name = name, .type = copy ? (uint32_t)HT_F32 : (uint32_t)s0->type, .n_dims = 3,
                      .ne = { s0->ne[0], s0->ne[1], n, 1 }, .data = slabs[0], .slabs = slabs };
    t->row_bytes = ht_row_size(t->type, t->ne[0]);
    t->nbytes = (size_t)t->ne[1] * (size_t)n * t->row_bytes;
    return 0;
}

/* A new tensor (data owned by the model) named "blk.<il>.<suffix>". */
static int add_owned(hearth_model *m, int il, const char *suffix, uint32_t type, int n_dims, int64_t ne0, int64_t ne1,
                     int64_t ne2, void *data, hearth_err *err) {
    char buf[160];
    snprintf(buf, sizeof buf, "blk.%d.%s", il, suffix);
    char *name = strdup(buf);
    if (!name || model_own(m, name, err)) { free(data); return herr(err, "out of memory"); }
    if (model_own(m, data, err)) return -1;
    ht_tensor *t = &m->tensors[m->n_tensors++];
    *t = (ht_tensor){ .name = name, .type = type, .n_dims = n_dims, .ne = { ne0, ne1, ne2, 1 }, .data = data };
    t->row_bytes = ht_row_size(type, ne0);
    t->nbytes = (size_t)(ne1 * ne2) * t->row_bytes;
    return 0;
}

static bool is_u8(const st_tensor *t) { return !strcmp(t->dtype, "U8"); }

/* gpt-oss's MXFP4 stack <base>_blocks [experts, rows, nb, 16] + <base>_scales [experts, rows, nb] (uint8: FP4 pairs,
 * element 2j in the low nibble of byte j; E8M0 exponents) repacked once into ggml's blocks (the scale byte, then
 * byte j = element j | element j + 16 << 4: the same bits, as the converter moves them). With up_suffix, rows
 * alternate gate, up (HF's gate_up_proj): even rows make gate_suffix's stack, odd rows up_suffix's. */
static int add_mxfp4_stack(hearth_model *m, const st_set *st, const st_tensor *bl, int il, const char *gate_suffix,
                           const char *up_suffix, hearth_err *err) {
    char sname[300];
    const size_t n = strlen(bl->name) - strlen("_blocks");
    snprintf(sname, sizeof sname, "%.*s_scales", (int)n, bl->name);
    const st_tensor *sc = st_find(st, sname);
    if (!is_u8(bl) || bl->n_dims != 4 || bl->shape[3] != 16 || !bl->nelem)
        return herr(err, "tensor '%s': %s of %d dimensions, U8 [experts, rows, blocks, 16] expected (MXFP4)", bl->name, bl->dtype, bl->n_dims);
    if (!sc) return herr(err, "tensor '%s' missing (the scales of MXFP4 '%s')", sname, bl->name);
    if (!is_u8(sc)) return herr(err, "tensor '%s': dtype %s, U8 expected (MXFP4 E8M0 scales)", sname, sc->dtype);
    if (sc->n_dims != 3 || sc->shape[0] != bl->shape[0] || sc->shape[1] != bl->shape[1] || sc->shape[2] != bl->shape[2])
        return herr(err, "tensor '%s': shape should be [%lld, %lld, %lld], the blocks' first three", sname,
                    (long long)bl->shape[0], (long long)bl->shape[1], (long long)bl->shape[2]);
    const int parts = up_suffix ? 2 : 1;
    const int64_t NE = bl->shape[0], rows = bl->shape[1], nb = bl->shape[2], out_rows = rows / parts;
    if (rows % parts) return herr(err, "tensor '%s': %lld rows, an even number (gate, up) expected", bl->name, (long long)rows);
    const uint8_t *q = bl->data, *e8 = sc->data;
    for (int p = 0; p < parts; p++) {
        block_mxfp4 *dst = malloc((size_t)(NE * out_rows * nb) * sizeof *dst);
        if (!dst) return herr(err, "out of memory repacking '%s'", bl->name);
        for (int64_t e = 0; e < NE; e++)
            for (int64_t r = 0; r < out_rows; r++) {
                const int64_t src_row = e * rows + r * parts + p;
                block_mxfp4 *d = dst + (e * out_rows + r) * nb;
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *x = q + (src_row * nb + b) * 16;
                    uint8_t v[32];
                    for (int j = 0; j < 16; j++) v[2 * j] = x[j] & 15, v[2 * j + 1] = x[j] >> 4;
                    d[b].e = e8[src_row * nb + b];
                    for (int j = 0; j < 16; j++) d[b].qs[j] = (uint8_t)(v[j] | v[j + 16] << 4);
                }
            }
        if (add_owned(m, il, p ? up_suffix : gate_suffix, HT_MXFP4, 3, nb * QK_MXFP4, out_rows, NE, dst, err)) return -1;
    }
    return 0;
}

/* gate_up_proj_bias [experts, 2 * ff], gate and up alternating: two F32 bias stacks [experts][ff]. */
static int add_gate_up_bias(hearth_model *m, const st_tensor *t, int il, hearth_err *err) {
    if (t->type == ST_UNSUPPORTED) return herr(err, "tensor '%s': dtype %s not supported (F32, F16, BF16 only)", t->name, t->dtype);
    if (t->n_dims != 2 || t->shape[1] % 2 || !t->nelem) return herr(err, "tensor '%s': [experts, 2 * ff] expected", t->name);
    const int64_t NE = t->shape[0], F = t->shape[1] / 2;
    float *all = malloc((size_t)t->nelem * sizeof(float)), *g = malloc((size_t)(NE * F) * sizeof(float)),
          *u = malloc((size_t)(NE * F) * sizeof(float));
    if (!all || !g || !u) { free(all); free(g); free(u); return herr(err, "out of memory"); }
    if (st_read_f32(t, 0, t->nelem, all, err)) { free(all); free(g); free(u); return -1; }
    for (int64_t i = 0; i < NE * F; i++) g[i] = all[2 * i], u[i] = all[2 * i + 1];
    free(all);
    if (add_owned(m, il, "ffn_gate_exps.bias", HT_F32, 2, F, NE, 1, g, err)) { free(u); return -1; }
    return add_owned(m, il, "ffn_up_exps.bias", HT_F32, 2, F, NE, 1, u, err);
}

/* gpt-oss's unquantized expert stack [experts, in, out] (gate_up_proj: out = 2 * ff, gate and up alternating) as the
 * converter transposes it: rows of `in`, in its dtype; with up_suffix the rows are split as in add_mxfp4_stack. */
static int add_dense_stack(hearth_model *m, const st_tensor *t, int il, const char *gate_suffix, const char *up_suffix,
                           hearth_err *err) {
    const int parts = up_suffix ? 2 : 1;
    if (t->type == ST_UNSUPPORTED) return herr(err, "tensor '%s': dtype %s not supported (F32, F16, BF16 only)", t->name, t->dtype);
    if (t->n_dims != 3 || t->shape[2] % parts || !t->nelem) return herr(err, "tensor '%s': [experts, in, out] expected", t->name);
    const int64_t NE = t->shape[0], in = t->shape[1], out = t->shape[2] / parts;
    const size_t es = (size_t)(t->nbytes / t->nelem);
    const uint8_t *src = t->data;
    for (int p = 0; p < parts; p++) {
        uint8_t *dst = malloc((size_t)(NE * out * in) * es);
        if (!dst) return herr(err, "out of memory converting '%s'", t->name);
        for (int64_t e = 0; e < NE; e++)
            for (int64_t r = 0; r < out; r++)
                for (int64_t i = 0; i < in; i++)
                    memcpy(dst + (size_t)((e * out + r) * in + i) * es,
                           src + (size_t)((e * in + i) * t->shape[2] + r * parts + p) * es, es);
        if (add_owned(m, il, p ? up_suffix : gate_suffix, (uint32_t)t->type, 3, in, out, NE, dst, err)) return -1;
    }
    return 0;
}

/* DeepSeek's kv_b_proj [heads * (nope + v), kv_lora_rank] split per head as the converter does: K's nope rows
 * transposed into attn_k_b (ggml [nope, rank, heads]), V's rows as attn_v_b ([rank, v, heads]); in its dtype. */
static int add_kv_b(hearth_model *m, const st_tensor *t, int il, hearth_err *err) {
    uint32_t H = 0, kmla = 0, vmla = 0, rope = 0;
    gguf_get_u32(m->gguf, "deepseek2.attention.head_count", &H);
    gguf_get_u32(m->gguf, "deepseek2.attention.key_length_mla", &kmla);
    gguf_get_u32(m->gguf, "deepseek2.attention.value_length_mla", &vmla);
    gguf_get_u32(m->gguf, "deepseek2.rope.dimension_count", &rope);
    const int64_t nope = (int64_t)kmla - rope, v = vmla, R = t->n_dims == 2 ? t->shape[1] : 0;
    if (t->type == ST_UNSUPPORTED) return herr(err, "tensor '%s': dtype %s not supported (F32, F16, BF16 only)", t->name, t->dtype);
    if (t->n_dims != 2 || nope < 1 || !t->nelem || t->shape[0] != (int64_t)H * (nope + v))
        return herr(err, "tensor '%s': shape should be [%lld, kv_lora_rank] (heads x (qk_nope_head_dim + v_head_dim))", t->name,
                    (long long)H * (nope + v));
    const size_t es = (size_t)(t->nbytes / t->nelem);
    uint8_t *kb = malloc((size_t)(H * nope * R) * es), *vb = malloc((size_t)(H * v * R) * es);
    if (!kb || !vb) { free(kb); free(vb); return herr(err, "out of memory"); }
    const uint8_t *src = t->data;
    for (int64_t h = 0; h < H; h++) {
        const uint8_t *head = src + (size_t)(h * (nope + v) * R) * es;
        for (int64_t i = 0; i < nope; i++)
            for (int64_t r = 0; r < R; r++) memcpy(kb + (size_t)((h * R + r) * nope + i) * es, head + (size_t)(i * R + r) * es, es);
        memcpy(vb + (size_t)(h * v * R) * es, head + (size_t)(nope * R) * es, (size_t)(v * R) * es);
    }
    if (add_owned(m, il, "attn_k_b.weight", (uint32_t)t->type, 3, nope, R, H, kb, err)) { free(vb); return -1; }
    return add_owned(m, il, "attn_v_b.weight", (uint32_t)t->type, 3, R, v, H, vb, err);
}

/* The tensors no name table maps (gpt-oss's expert stacks, DeepSeek's kv_b_proj): 1 if t was one of them (added,
 * or *rc -1 on error). */
static int add_special(hearth_model *m, const family *fam, const st_set *st, const st_tensor *t, int *rc, hearth_err *err) {
    int il;
    const char *rest;
    if (!match_prefix(t->name, fam->layer_fmt, &il, &rest)) return 0;
    if (!strcmp(fam->arch, "deepseek2") && !strcmp(rest, "self_attn.kv_b_proj.weight"))
        *rc = add_kv_b(m, t, il, err);
    else if (strcmp(fam->arch, "gpt-oss")) return 0;
    else if (!strcmp(rest, "mlp.experts.gate_up_proj_blocks"))
        *rc = add_mxfp4_stack(m, st, t, il, "ffn_gate_exps.weight", "ffn_up_exps.weight", err);
    else if (!strcmp(rest, "mlp.experts.down_proj_blocks"))
        *rc = add_mxfp4_stack(m, st, t, il, "ffn_down_exps.weight", NULL, err);
    else if (!strcmp(rest, "mlp.experts.gate_up_proj_bias"))
        *rc = add_gate_up_bias(m, t, il, err);
    else if (!strcmp(rest, "mlp.experts.gate_up_proj"))
        *rc = add_dense_stack(m, t, il, "ffn_gate_exps.weight", "ffn_up_exps.weight", err);
    else if (!strcmp(rest, "mlp.experts.down_proj"))
        *rc = add_dense_stack(m, t, il, "ffn_down_exps.weight", NULL, err);
    else return 0;
    return 1;
}

static int map_tensors(hearth_model *m, const family *fam, const st_set *st, hearth_err *err) {
    m->tensors = calloc(2 * st->n_tensors + 2, sizeof *m->tensors);   /* kv_b_proj, gate_up: one makes two; rope_freqs */
    expert_part *parts = calloc(st->n_tensors + 1, sizeof *parts);
    int n_parts = 0, rc = 0;
    if (!m->tensors || !parts) { free(parts); return herr(err, "out of memory"); }
    char key[128];
    uint32_t n_layer = UINT32_MAX;
    snprintf(key, sizeof key, "%s.block_count", fam->arch);
    gguf_get_u32(m->gguf, key, &n_layer);
    for (uint64_t i = 0; i < st->n_tensors && !rc; i++) {
        char gname[160];
        int transform, expert, il;
        const char *rest;
        /* layers past num_hidden_layers (DeepSeek-V3's multi-token prediction layer) are not the model's */
        if (match_prefix(st->tensors[i].name, fam->layer_fmt, &il, &rest) && (uint32_t)il >= n_layer) continue;
        if (add_special(m, fam, st, &st->tensors[i], &rc, err)) continue;
        if (!map_name(fam, st->tensors[i].name, gname, sizeof gname, &transform, &expert)) continue;
        if (expert < 0) { rc = add_tensor(m, &st->tensors[i], gname, transform, err); continue; }
        parts[n_parts].st = &st->tensors[i];
        parts[n_parts].expert = expert;
        snprintf(parts[n_parts++].name, sizeof parts->name, "%s", gname);
    }
    qsort(parts, (size_t)n_parts, sizeof *parts, by_name_then_expert);
    for (int i = 0, j; !rc && i < n_parts; i = j) {
        for (j = i; j < n_parts && !strcmp(parts[j].name, parts[i].name); j++) {}
        rc = add_stack(m, parts + i, j - i, err);
    }
    free(parts);
    return rc;
}

/* rope_freqs.weight for Llama 3.1-style configs (the converter stores it as a tensor). */
static int add_rope_freqs(hearth_model *m, const cJSON *cfg, hearth_err *err) {
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
    const cJSON *t = cJSON_IsObject(rs) ? cJSON_GetObjectItemCaseSensitive(rs, "rope_type") : NULL;
    if (!cJSON_IsString(t) || strcmp(t->valuestring, "llama3")) return 0;
    float *ff = llama3_rope_freqs(rs, m->hp.n_rot, m->hp.rope_base);
    if (!ff || model_own(m, ff, err)) return herr(err, "out of memory");
    m->rope_freqs = (ht_tensor){ .name = "rope_freqs.weight", .type = HT_F32, .n_dims = 1,
                                 .ne = { m->hp.n_rot / 2, 1, 1, 1 }, .data = ff,
                                 .row_bytes = (size_t)(m->hp.n_rot / 2) * 4, .nbytes = (size_t)(m->hp.n_rot / 2) * 4 };
    m->hf_rope_freqs = true;
    return 0;
}

/* ---- tokenizer ---- */
int hf_load_tokenizer(hearth_model *m, const char *dir, hearth_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (access(path, R_OK) == 0) return vocab_from_tokenizer_json(path, &m->vocab, err);
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    if (access(path, R_OK) == 0) {
        bool lower = true;   /* uncased BERT unless tokenizer_config.json says otherwise */
        char cfgp[4096];
        snprintf(cfgp, sizeof cfgp, "%s/tokenizer_config.json", dir);
        if (access(cfgp, R_OK) == 0) {
            cJSON *tc = st_read_json(cfgp, err);
            if (!tc) return -1;
            const cJSON *lc = cJSON_GetObjectItemCaseSensitive(tc, "do_lower_case");
            if (cJSON_IsBool(lc)) lower = cJSON_IsTrue(lc);
            cJSON_Delete(tc);
        }
        return vocab_from_wordpiece_txt(path, lower, &m->vocab, err);
    }
    return 0;   /* no tokenizer: the model still evaluates token ids (hearth golden, --ids) */
}

int hf_load(hearth_model *m, const char *dir, hearth_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *cfg = st_read_json(path, err);
    if (!cfg) return -1;
    st_set *st = NULL;
    gguf_writer *w = NULL;
    int rc = -1;
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(cfg, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    const family *fam = NULL;
    if (!cJSON_IsString(a0)) { herr(err, "%s: no 'architectures' list", path); goto out; }
    for (size_t i = 0; i < sizeof FAMILIES / sizeof FAMILIES[0]; i++)
        if (!strcmp(FAMILIES[i].hf_arch, a0->valuestring)) fam = &FAMILIES[i];
    if (!fam) { herr(err, "%s: architecture '%s' is not supported", path, a0->valuestring); goto out; }
    m->arch = ht_find_arch(fam->arch);
    if (!m->arch) { herr(err, "architecture '%s' is not built in", fam->arch); goto out; }
    w = gguf_writer_new();
    if (build_metadata(w, fam, cfg, err) || hf_put_extra_metadata(w, dir, err) || open_metadata(w, &m->gguf, err)) goto out;
    if (st_open_dir(dir, &st, err) || map_tensors(m, fam, st, err)) goto out;
    if (!strcmp(fam->arch, "gemma4") && add_gemma4_rope_freqs(m, cfg, err)) goto out;
    snprintf(m->name, sizeof m->name, "%s", fam->hf_arch);
    if (m->arch->load_hparams(m, err)) goto out;
    if (fam->neox_from_hf) { m->hp.rope_type = ROPE_NEOX; m->qk_rotate_half = true; }
    m->hp.ssm_v_grouped = true;   /* HF's V-head order (GGUF converters retile it) */
    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) { herr(err, "out of memory"); goto out; }
    m->layer_hi = m->hp.n_layer;
    if (m->arch->bind(m, err) || add_rope_freqs(m, cfg, err) || hf_load_tokenizer(m, dir, err)) goto out;
    model_layer_defaults(m);
    model_apply_generation_eog(m);
    for (int i = 0; i < st->n_shards; i++) m->file_bytes += st->shards[i].size;
    m->st = st;
    st = NULL;
    rc = 0;
out:
    if (st) st_close(st);
    gguf_writer_free(w);
    cJSON_Delete(cfg);
    return rc;
}
