/* gptoss.c — OpenAI's gpt-oss: a pre-norm mixture-of-experts decoder. Attention alternates sliding-window
 * (layers 0, 2, ...: swa_period 2) and full layers; q/k/v/o projections have biases; each head has a sink
 * (attn_sinks: a logit in the softmax's denominator only); NEOX rope with YaRN scaling (rope.scaling.*,
 * read with the common hyperparameters). post_attention_norm is the pre-FFN norm; the router has a bias and
 * takes the top n_expert_used experts by logit, weighted by a softmax over their logits alone (= the
 * renormalised softmax); the experts have biases and a clamped SwiGLU (op_swiglu_oai). Separate output. */
#include "model/layers.h"

#define GPTOSS_SWA_PERIOD 2   /* the reference's pattern: every other layer sliding, the first one included */

static int gptoss_hparams(hearth_model *m, hearth_err *err) {
    if (model_common_hparams(m, err)) return -1;
    ht_hparams *hp = &m->hp;
    hp->rope_type = ROPE_NEOX;
    if (model_meta_int(m, "attention.sliding_window_pattern", 1, 1 << 16, GPTOSS_SWA_PERIOD, &hp->swa_period, err)) return -1;
    if (!hp->sliding_window) return herr(err, "metadata gpt-oss.attention.sliding_window missing");
    if (!hp->n_expert) return herr(err, "metadata gpt-oss.expert_count missing: gpt-oss is a mixture of experts");
    hp->expert_norm_w = true;
    return 0;
}

/* An expert stack's bias: one row of `rows` floats per expert. */
static int bind_expert_bias(hearth_model *m, ht_tensor *b, int rows, const char *fmt, int il, hearth_err *err) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    if (model_bind(m, b, true, err, rows, m->hp.n_expert, fmt, il)) return -1;
#pragma GCC diagnostic pop
    return b->type == HT_F32 ? 0 : herr(err, "tensor %s: type %s, F32 expected", b->name, ht_get_traits(b->type)->name);
}

static int gptoss_bind(hearth_model *m, hearth_err *err) {
    ht_hparams *hp = &m->hp;
    const int E = hp->n_embd, F = hp->n_ff_exp, NE = hp->n_expert;
    const int QD = hp->n_head * hp->head_dim, KD = hp->n_head_kv * hp->head_dim, VD = hp->n_head_kv * hp->head_dim_v;
    if (model_bind(m, &m->tok_embd, true, err, E, -1, "token_embd.weight")) return -1;
    hp->n_vocab = (int)m->tok_embd.ne[1];
    if (model_bind(m, &m->output_norm, true, err, E, 1, "output_norm.weight") ||
        model_bind(m, &m->output, true, err, E, hp->n_vocab, "output.weight"))
        return -1;
    for (int il = 0; il < hp->n_layer; il++) {
        ht_layer *L = &m->layers[il];
        if (model_bind(m, &L->attn_norm, true, err, E, 1, "blk.%d.attn_norm.weight", il) ||
            model_bind(m, &L->wq, true, err, E, QD, "blk.%d.attn_q.weight", il) ||
            model_bind(m, &L->bq, true, err, QD, 1, "blk.%d.attn_q.bias", il) ||
            model_bind(m, &L->wk, true, err, E, KD, "blk.%d.attn_k.weight", il) ||
            model_bind(m, &L->bk, true, err, KD, 1, "blk.%d.attn_k.bias", il) ||
            model_bind(m, &L->wv, true, err, E, VD, "blk.%d.attn_v.weight", il) ||
            model_bind(m, &L->bv, true, err, VD, 1, "blk.%d.attn_v.bias", il) ||
            model_bind(m, &L->wo, true, err, hp->n_head * hp->head_dim_v, E, "blk.%d.attn_output.weight", il) ||
            model_bind(m, &L->bo, true, err, E, 1, "blk.%d.attn_output.bias", il) ||
            model_bind(m, &L->attn_sinks, true, err, hp->n_head, 1, "blk.%d.attn_sinks.weight", il) ||
            model_bind(m, &L->ffn_norm, true, err, E, 1, "blk.%d.post_attention_norm.weight", il) ||
            model_bind(m, &L->ffn_gate_inp, true, err, E, NE, "blk.%d.ffn_gate_inp.weight", il) ||
            model_bind(m, &L->ffn_gate_inp_b, true, err, NE, 1, "blk.%d.ffn_gate_inp.bias", il) ||
            model_bind_experts(m, &L->ffn_gate_exps, err, E, F, "blk.%d.ffn_gate_exps.weight", il) ||
            model_bind_experts(m, &L->ffn_up_exps, err, E, F, "blk.%d.ffn_up_exps.weight", il) ||
            model_bind_experts(m, &L->ffn_down_exps, err, F, E, "blk.%d.ffn_down_exps.weight", il) ||
            bind_expert_bias(m, &L->ffn_gate_exps_b, F, "blk.%d.ffn_gate_exps.bias", il, err) ||
            bind_expert_bias(m, &L->ffn_up_exps_b, F, "blk.%d.ffn_up_exps.bias", il, err) ||
            bind_expert_bias(m, &L->ffn_down_exps_b, E, "blk.%d.ffn_down_exps.bias", il, err))
            return -1;
    }
    return 0;
}

/* x += attn(norm(x)) (windowed on sliding layers); x += moe(post_attention_norm(x)). */
static void gptoss_layer(hearth_ctx *c, const ht_ubatch *ub, int il) {
    const hearth_model *m = c->m;
    const ht_hparams *hp = &m->hp;
    const ht_layer *L = &m->layers[il];
    const int E = hp->n_embd;
    const bool swa = ctx_layer_is_swa(m, il);
    layer_norm_rows(c, ub, c->xb, c->x, &L->attn_norm, NULL, E, hp->norm_eps, NORM_RMS);
    layer_attention(c, ub, il, c->xb, c->xb2, swa ? hp->rope_base_swa : hp->rope_base, swa ? hp->sliding_window : 0);
    layer_residual(c, ub, c->x, c->xb2, E);
    layer_norm_rows(c, ub, c->xb, c->x, &L->ffn_norm, NULL, E, hp->norm_eps, NORM_RMS);
    layer_ffn_moe(c, ub, L, c->xb, c->xb2, ACT_SWIGLU_OAI);
    layer_residual(c, ub, c->x, c->xb2, E);
}

const ht_arch ht_arch_gptoss = { "gpt-oss", false, gptoss_hparams, gptoss_bind, llama_embed, gptoss_layer, llama_head };
