/* llama.c — the Llama family (Llama 2/3, Mistral, TinyLlama, SmolLM, Mixtral): RMSNorm, rope in GGUF's
 * llama layout (adjacent pairs) with optional rope_freqs divisors, GQA/MQA attention, SwiGLU FFN — or, with
 * llama.expert_count > 0, a mixture of SwiGLU experts (layer_ffn_moe) — tied or separate output. Everything
 * is read from metadata. */
#include "model/layers.h"

static int llama_hparams(hearth_model *m, hearth_err *err) {
    if (model_common_hparams(m, err)) return -1;
    m->hp.rope_type = ROPE_NORM;
    return 0;
}

/* A mixture-of-experts FFN in place of the dense one (Mixtral, Qwen3-MoE): the router and the three stacks. */
static int llama_bind_moe(hearth_model *m, ht_layer *L, int il, hearth_err *err) {
    const ht_hparams *hp = &m->hp;
    int E = hp->n_embd, F = hp->n_ff_exp;
    return model_bind(m, &L->ffn_gate_inp, true, err, E, hp->n_expert, "blk.%d.ffn_gate_inp.weight", il) ||
                   model_bind_experts(m, &L->ffn_gate_exps, err, E, F, "blk.%d.ffn_gate_exps.weight", il) ||
                   model_bind_experts(m, &L->ffn_up_exps, err, E, F, "blk.%d.ffn_up_exps.weight", il) ||
                   model_bind_experts(m, &L->ffn_down_exps, err, F, E, "blk.%d.ffn_down_exps.weight", il)
               ? -1 : 0;
}

/* Binds the weights every decoder of the Llama shape has (used by the Qwen files too). */
int llama_bind_common(hearth_model *m, hearth_err *err) {
    ht_hparams *hp = &m->hp;
    int E = hp->n_embd, QD = hp->n_head * hp->head_dim, KD = hp->n_head_kv * hp->head_dim;
    int VD = hp->n_head_kv * hp->head_dim_v, OD = hp->n_head * hp->head_dim_v;
    if (model_bind(m, &m->tok_embd, true, err, E, -1, "token_embd.weight")) return -1;
    hp->n_vocab = (int)m->tok_embd.ne[1];
    if (model_bind(m, &m->output_norm, true, err, E, 1, "output_norm.weight") ||
        model_bind(m, &m->output, false, err, E, hp->n_vocab, "output.weight") ||
        model_bind(m, &m->rope_freqs, false, err, hp->n_rot / 2, 1, "rope_freqs.weight"))
        return -1;
    for (int il = 0; il < hp->n_layer; il++) {
        ht_layer *L = &m->layers[il];
        if (model_bind(m, &L->attn_norm, true, err, E, 1, "blk.%d.attn_norm.weight", il) ||
            model_bind(m, &L->wq, true, err, E, QD, "blk.%d.attn_q.weight", il) ||
            model_bind(m, &L->wk, true, err, E, KD, "blk.%d.attn_k.weight", il) ||
            model_bind(m, &L->wv, true, err, E, VD, "blk.%d.attn_v.weight", il) ||
            model_bind(m, &L->wo, true, err, OD, E, "blk.%d.attn_output.weight", il) ||
            model_bind(m, &L->ffn_norm, true, err, E, 1, "blk.%d.ffn_norm.weight", il))
            return -1;
        if (hp->n_expert ? llama_bind_moe(m, L, il, err)
                         : model_bind(m, &L->ffn_gate, true, err, E, hp->n_ff, "blk.%d.ffn_gate.weight", il) ||
                               model_bind(m, &L->ffn_up, true, err, E, hp->n_ff, "blk.%d.ffn_up.weight", il) ||
                               model_bind(m, &L->ffn_down, true, err, hp->n_ff, E, "blk.%d.ffn_down.weight", il))
            return -1;
    }
    return 0;
}

/* The pre-norm decoder: x = embed(tokens); per layer x += attn(norm(x)); x += ffn(norm(x));
 * logits = output(norm(x)). */
void llama_embed(hearth_ctx *c, const ht_ubatch *ub) { ctx_embed_tokens(c, ub, c->x); }

void llama_layer(hearth_ctx *c, const ht_ubatch *ub, int il) {
    const hearth_model *m = c->m;
    const ht_hparams *hp = &m->hp;
    const ht_layer *L = &m->layers[il];
    int E = hp->n_embd;
    layer_norm_rows(c, ub, c->xb, c->x, &L->attn_norm, NULL, E, hp->norm_eps, NORM_RMS);
    layer_attention(c, ub, il, c->xb, c->xb2, hp->rope_base, 0);
    layer_residual(c, ub, c->x, c->xb2, E);
    layer_norm_rows(c, ub, c->xb, c->x, &L->ffn_norm, NULL, E, hp->norm_eps, NORM_RMS);
    if (L->ffn_gate_inp.data) layer_ffn_moe(c, ub, L, c->xb, c->xb2, ACT_SILU);
    else layer_ffn_gated(c, ub, L, c->xb, c->xb2, ACT_SILU);
    layer_residual(c, ub, c->x, c->xb2, E);
}

void llama_head(hearth_ctx *c, const ht_ubatch *ub) {
    const ht_hparams *hp = &c->m->hp;
    layer_norm_rows(c, ub, c->xb, c->x, &c->m->output_norm, NULL, hp->n_embd, hp->norm_eps, NORM_RMS);
    ctx_output(c, ub, c->xb);
}

const ht_arch ht_arch_llama = { "llama", false, llama_hparams, llama_bind_common, llama_embed, llama_layer, llama_head };
/* Ministral 3 (mistral3): the Llama layers with YaRN (its magnitude from yarn_log_multiplier) and Llama 4's
 * attention temperature beyond the original context (model.c reads both; the layers apply them). */
const ht_arch ht_arch_mistral3 = { "mistral3", false, llama_hparams, llama_bind_common, llama_embed, llama_layer, llama_head };
