/* qwen35.c — Qwen3.5 / 3.6, dense (qwen35) and mixture of experts (qwen35moe), and Qwen3-Next (qwen3next: the
 * same blocks, V heads in grouped order, beta/alpha in one ssm_beta_alpha and, in older files, q/k/v/z in one
 * ssm_in, both per k-head; model/recurrent.c splits them): a hybrid decoder whose layers
 * are Gated DeltaNet (recurrent, model/recurrent.c) except every full_attention_interval-th (or as
 * attention.recurrent_layers says), which is gated attention: attn_q rows per head [q | gate], q/k RMSNorm,
 * NEOX rope on the first rope.dimension_count dims (the M-RoPE sections all carry the text position), output
 * times sigmoid(gate). post_attention_norm is the pre-FFN norm; the FFN is SwiGLU, or routed experts (softmax
 * top-k, renormalized) plus a shared expert gated by sigmoid(ffn_gate_inp_shexp . x). */
#include "model/layers.h"
#include "model/recurrent.h"

#include <stdio.h>

static int qwen35_hparams(hearth_model *m, hearth_err *err) {
    if (model_common_hparams(m, err)) return -1;
    ht_hparams *hp = &m->hp;
    hp->rope_type = ROPE_NEOX;
    hp->attn_gate = true;
    int inner;
    if (model_meta_int(m, "ssm.conv_kernel", 1, 16, 0, &hp->ssm_conv, err) ||
        model_meta_int(m, "ssm.state_size", 1, 512, 0, &hp->ssm_state, err) ||
        model_meta_int(m, "ssm.group_count", 1, 1 << 12, 0, &hp->ssm_k_heads, err) ||
        model_meta_int(m, "ssm.time_step_rank", 1, 1 << 12, 0, &hp->ssm_v_heads, err) ||
        model_meta_int(m, "ssm.inner_size", 1, 1 << 20, 0, &inner, err) ||
        model_meta_int(m, "expert_shared_feed_forward_length", 0, 1 << 24, 0, &hp->n_ff_shexp, err))
        return -1;
    if (!hp->ssm_conv || !hp->ssm_state || !hp->ssm_k_heads || !hp->ssm_v_heads)
        return herr(err, "metadata %s.ssm.* (conv_kernel, state_size, group_count, time_step_rank) missing", m->arch->name);
    if (hp->ssm_v_heads % hp->ssm_k_heads || inner != hp->ssm_v_heads * hp->ssm_state)
        return herr(err, "%s: %d v-heads of %d (inner size %d) do not fit %d k-heads", m->arch->name, hp->ssm_v_heads,
                    hp->ssm_state, inner, hp->ssm_k_heads);
    if (hp->n_ff_shexp > hp->n_ff) hp->n_ff = hp->n_ff_shexp;   /* the scratch holds the shared expert's rows */
    return 0;
}

/* The layer pattern: attention.recurrent_layers, else every full_attention_interval-th layer is attention. */
static int qwen35_pattern(hearth_model *m, hearth_err *err) {
    ht_hparams *hp = &m->hp;
    char key[256];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", m->arch->name);
    const gguf_kv *kv = gguf_find(m->gguf, key);
    int interval;
    if (model_meta_int(m, "full_attention_interval", 1, 1 << 16, 4, &interval, err)) return -1;
    if (kv && (kv->type != GGUF_ARR || kv->arr_n != (uint64_t)hp->n_layer))
        return herr(err, "metadata %s: an array of %d flags expected", key, hp->n_layer);
    hp->n_recurrent = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        int64_t f = 0;
        if (kv && !gguf_arr_int(kv, (uint64_t)il, 0, 1, &f)) return herr(err, "metadata %s[%d]: not a flag", key, il);
        m->layers[il].recurrent = kv ? f != 0 : (il + 1) % interval != 0;
        hp->n_recurrent += m->layers[il].recurrent;
    }
    return 0;
}

static int qwen35_bind(hearth_model *m, hearth_err *err) {
    ht_hparams *hp = &m->hp;
    const int E = hp->n_embd, QD = hp->n_head * hp->head_dim, KD = hp->n_head_kv * hp->head_dim;
    const int kdim = hp->ssm_k_heads * hp->ssm_state, vdim = hp->ssm_v_heads * hp->ssm_state, Hv = hp->ssm_v_heads;
    if (qwen35_pattern(m, err) || model_bind(m, &m->tok_embd, true, err, E, -1, "token_embd.weight")) return -1;
    hp->n_vocab = (int)m->tok_embd.ne[1];
    if (model_bind(m, &m->output_norm, true, err, E, 1, "output_norm.weight") ||
        model_bind(m, &m->output, false, err, E, hp->n_vocab, "output.weight"))
        return -1;
    for (int il = 0; il < hp->n_layer; il++) {
        ht_layer *L = &m->layers[il];
        if (model_bind(m, &L->attn_norm, true, err, E, 1, "blk.%d.attn_norm.weight", il) ||
            model_bind(m, &L->ffn_norm, true, err, E, 1, "blk.%d.post_attention_norm.weight", il))
            return -1;
        if (L->recurrent) {
            const bool next = !strcmp(m->arch->name, "qwen3next");
            if (next && model_bind(m, &L->ssm_in, false, err, E, 2 * kdim + 2 * vdim, "blk.%d.ssm_in.weight", il)) return -1;
            if (!L->ssm_in.data && (model_bind(m, &L->ssm_qkv, true, err, E, 2 * kdim + vdim, "blk.%d.attn_qkv.weight", il) ||
                                    model_bind(m, &L->ssm_z, true, err, E, vdim, "blk.%d.attn_gate.weight", il)))
                return -1;
            if (next ? model_bind(m, &L->ssm_ba, true, err, E, 2 * Hv, "blk.%d.ssm_ba.weight", il)
                     : model_bind(m, &L->ssm_beta, true, err, E, Hv, "blk.%d.ssm_beta.weight", il) ||
                       model_bind(m, &L->ssm_alpha, true, err, E, Hv, "blk.%d.ssm_alpha.weight", il))
                return -1;
            if (model_bind(m, &L->ssm_conv1d, true, err, hp->ssm_conv, 2 * kdim + vdim, "blk.%d.ssm_conv1d.weight", il) ||
                model_bind(m, &L->ssm_dt, true, err, Hv, 1, "blk.%d.ssm_dt.bias", il) ||
                model_bind(m, &L->ssm_a, true, err, Hv, 1, "blk.%d.ssm_a", il) ||
                model_bind(m, &L->ssm_norm, true, err, hp->ssm_state, 1, "blk.%d.ssm_norm.weight", il) ||
                model_bind(m, &L->ssm_out, true, err, vdim, E, "blk.%d.ssm_out.weight", il))
                return -1;
            const ht_tensor *f32[] = { &L->ssm_conv1d, &L->ssm_dt, &L->ssm_a, &L->ssm_norm };
            for (size_t i = 0; i < sizeof f32 / sizeof f32[0]; i++)
                if (f32[i]->type != HT_F32) return herr(err, "tensor %s: type %s, F32 expected", f32[i]->name, ht_get_traits(f32[i]->type)->name);
        } else if (model_bind(m, &L->wq, true, err, E, 2 * QD, "blk.%d.attn_q.weight", il) ||
                   model_bind(m, &L->wk, true, err, E, KD, "blk.%d.attn_k.weight", il) ||
                   model_bind(m, &L->wv, true, err, E, hp->n_head_kv * hp->head_dim_v, "blk.%d.attn_v.weight", il) ||
                   model_bind(m, &L->wo, true, err, hp->n_head * hp->head_dim_v, E, "blk.%d.attn_output.weight", il) ||
                   model_bind(m, &L->q_norm, true, err, hp->head_dim, 1, "blk.%d.attn_q_norm.weight", il) ||
                   model_bind(m, &L->k_norm, true, err, hp->head_dim, 1, "blk.%d.attn_k_norm.weight", il))
            return -1;
        if (!hp->n_expert) {
            if (model_bind(m, &L->ffn_gate, true, err, E, hp->n_ff, "blk.%d.ffn_gate.weight", il) ||
                model_bind(m, &L->ffn_up, true, err, E, hp->n_ff, "blk.%d.ffn_up.weight", il) ||
                model_bind(m, &L->ffn_down, true, err, hp->n_ff, E, "blk.%d.ffn_down.weight", il))
                return -1;
            continue;
        }
        const int F = hp->n_ff_exp, FS = hp->n_ff_shexp;
        if (model_bind(m, &L->ffn_gate_inp, true, err, E, hp->n_expert, "blk.%d.ffn_gate_inp.weight", il) ||
            model_bind_experts(m, &L->ffn_gate_exps, err, E, F, "blk.%d.ffn_gate_exps.weight", il) ||
            model_bind_experts(m, &L->ffn_up_exps, err, E, F, "blk.%d.ffn_up_exps.weight", il) ||
            model_bind_experts(m, &L->ffn_down_exps, err, F, E, "blk.%d.ffn_down_exps.weight", il))
            return -1;
        if (FS && (model_bind(m, &L->ffn_gate_inp_shexp, true, err, E, 1, "blk.%d.ffn_gate_inp_shexp.weight", il) ||
                   model_bind(m, &L->ffn_gate_shexp, true, err, E, FS, "blk.%d.ffn_gate_shexp.weight", il) ||
                   model_bind(m, &L->ffn_up_shexp, true, err, E, FS, "blk.%d.ffn_up_shexp.weight", il) ||
                   model_bind(m, &L->ffn_down_shexp, true, err, FS, E, "blk.%d.ffn_down_shexp.weight", il)))
            return -1;
    }
    return 0;
}

/* x += mixer(norm(x)) (Gated DeltaNet or gated attention); x += ffn(post_attention_norm(x)). */
static void qwen35_layer(hearth_ctx *c, const ht_ubatch *ub, int il) {
    const ht_hparams *hp = &c->m->hp;
    const ht_layer *L = &c->m->layers[il];
    const int E = hp->n_embd;
    layer_norm_rows(c, ub, c->xb, c->x, &L->attn_norm, NULL, E, hp->norm_eps, NORM_RMS);
    if (L->recurrent) layer_gated_deltanet(c, ub, il, c->xb, c->xb2);
    else layer_attention(c, ub, il, c->xb, c->xb2, hp->rope_base, 0);
    layer_residual(c, ub, c->x, c->xb2, E);
    layer_norm_rows(c, ub, c->xb, c->x, &L->ffn_norm, NULL, E, hp->norm_eps, NORM_RMS);
    if (L->ffn_gate_inp.data) layer_ffn_moe(c, ub, L, c->xb, c->xb2, ACT_SILU);
    else layer_ffn_gated(c, ub, L, c->xb, c->xb2, ACT_SILU);
    layer_residual(c, ub, c->x, c->xb2, E);
}

static int qwen35moe_hparams(hearth_model *m, hearth_err *err) {
    if (qwen35_hparams(m, err)) return -1;
    return m->hp.n_expert ? 0 : herr(err, "metadata %s.expert_count missing: a %s model needs experts", m->arch->name, m->arch->name);
}

static int qwen3next_hparams(hearth_model *m, hearth_err *err) {
    m->hp.ssm_v_grouped = true;   /* V head h reads q/k head h / (v/k heads), as in HF (the converter keeps that order) */
    return qwen35moe_hparams(m, err);
}

const ht_arch ht_arch_qwen35 = { "qwen35", false, qwen35_hparams, qwen35_bind, llama_embed, qwen35_layer, llama_head };
const ht_arch ht_arch_qwen35moe = { "qwen35moe", false, qwen35moe_hparams, qwen35_bind, llama_embed, qwen35_layer, llama_head };
const ht_arch ht_arch_qwen3next = { "qwen3next", false, qwen3next_hparams, qwen35_bind, llama_embed, qwen35_layer, llama_head };
