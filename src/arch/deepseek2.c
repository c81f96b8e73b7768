/* deepseek2.c — DeepSeek-V2 / V2-Lite / V3 / R1, Kimi-K2, GLM-4.7-Flash (GGUF `deepseek2`): the pre-norm
 * decoder with multi-head latent attention (model/mla.c: q directly or through a LoRA, one cached latent +
 * shared rope key per token), NORM rope on the rope dims with YaRN frequencies, and an attention scale of
 * mscale^2 / sqrt(key_length_mla), mscale = 1 + yarn_log_multiplier * ln(factor). The first
 * leading_dense_block_count layers have a SwiGLU FFN; the others route to experts (softmax, or sigmoid with
 * exp_probs_b and expert groups, weights optionally renormalized and scaled) beside ungated shared experts. */
#include "model/layers.h"
#include "compute/ops.h"
#include "model/mla.h"

#include <math.h>
#include <stdio.h>

static bool meta_str_is(const hearth_model *m, const char *suffix, const char *want) {
    char key[256];
    gguf_str st;
    snprintf(key, sizeof key, "%s.%s", m->arch->name, suffix);
    return gguf_get_str(m->gguf, key, &st) && st.n == strlen(want) && !memcmp(st.p, want, st.n);
}

/* YaRN as the reference runs DeepSeek: frequencies blended between the original and the divided ones by the
 * correction dims (beta_fast 32, beta_slow 1 unless given), cos/sin unscaled when yarn_log_multiplier is set
 * (the reference's attn_factor cancels its own 1 + 0.1 ln factor), and q.k scaled by mscale^2. */
static int deepseek2_rope(hearth_model *m, hearth_err *err) {
    ht_hparams *hp = &m->hp;
    float f = 1, logm = 0, bfast = 32, bslow = 1, ext = 1;
    hp->rope_scale = 1;
    hp->rope_attn_factor = 1;
    if (!model_meta_f32(m, "rope.scaling.factor", &f) || f <= 1 || meta_str_is(m, "rope.scaling.type", "none")) f = 1;
    else if (!meta_str_is(m, "rope.scaling.type", "yarn"))
        return herr(err, "%s: only YaRN rope scaling is supported", m->arch->name);
    model_meta_f32(m, "rope.scaling.yarn_log_multiplier", &logm);
    model_meta_f32(m, "rope.scaling.yarn_beta_fast", &bfast);
    model_meta_f32(m, "rope.scaling.yarn_beta_slow", &bslow);
    model_meta_f32(m, "rope.scaling.yarn_ext_factor", &ext);
    if (!(f < 1e6f) || !(logm >= 0 && logm < 10) || !(bfast > 0) || !(bslow > 0) || !(ext >= 0 && ext <= 1))
        return herr(err, "%s: implausible YaRN parameters (factor %g, log multiplier %g)", m->arch->name, f, logm);
    float mscale = 1;
    if (f > 1) {
        int orig;
        if (model_meta_int(m, "rope.scaling.original_context_length", 1, 1 << 30, hp->n_ctx_train, &orig, err)) return -1;
        hp->rope_scale = f;
        hp->rope_yarn_ext = ext;
        op_rope_yarn_dims(hp->n_rot, orig, hp->rope_base, bfast, bslow, hp->rope_yarn_corr);
        if (logm == 0) hp->rope_attn_factor = 1 + 0.1f * logf(f);   /* no multiplier: YaRN's own magnitude */
        mscale = hp->rope_attn_factor * (1 + logm * logf(f));
    }
    hp->attn_scale = mscale * mscale / sqrtf((float)hp->head_dim_mla);
    return 0;
}

static int deepseek2_hparams(hearth_model *m, hearth_err *err) {
    if (model_common_hparams(m, err)) return -1;
    ht_hparams *hp = &m->hp;
    int gating = 0, n_shared = 0;
    if (model_meta_int(m, "attention.kv_lora_rank", 0, 1 << 16, 0, &hp->kv_lora_rank, err) ||
        model_meta_int(m, "attention.q_lora_rank", 0, 1 << 16, 0, &hp->q_lora_rank, err) ||
        model_meta_int(m, "attention.key_length_mla", 0, 1 << 12, 0, &hp->head_dim_mla, err) ||
        model_meta_int(m, "attention.value_length_mla", 0, 1 << 12, 0, &hp->head_dim_v_mla, err) ||
        model_meta_int(m, "leading_dense_block_count", 0, hp->n_layer, 0, &hp->n_dense_lead, err) ||
        model_meta_int(m, "expert_shared_count", 0, 64, 0, &n_shared, err) ||
        model_meta_int(m, "expert_gating_func", 0, 3, 0, &gating, err) ||
        model_meta_int(m, "expert_group_count", 0, HT_MAX(hp->n_expert, 1), 0, &hp->n_expert_groups, err) ||
        model_meta_int(m, "expert_group_used_count", 0, HT_MAX(hp->n_expert_groups, 1), 0, &hp->n_group_used, err))
        return -1;
    if (!hp->kv_lora_rank || !hp->head_dim_mla || !hp->head_dim_v_mla)
        return herr(err, "%s: no key_length_mla / value_length_mla / kv_lora_rank: a GGUF with the unsplit attn_kv_b "
                         "(converted before latent attention) is not supported; convert it again", m->arch->name);
    /* the cache row is [latent | rope key], V the latent: n_head_kv 1, key_length and value_length say so */
    if (hp->n_head_kv != 1 || hp->head_dim != hp->kv_lora_rank + hp->n_rot || hp->head_dim_v != hp->kv_lora_rank ||
        hp->head_dim_mla <= hp->n_rot || hp->head_dim_mla > hp->head_dim || hp->head_dim_v_mla > hp->head_dim ||
        hp->q_lora_rank > hp->n_head * hp->head_dim || hp->head_dim_mla - hp->n_rot > hp->n_head * hp->kv_lora_rank)
        return herr(err, "%s: inconsistent latent attention sizes (kv heads %d, key %d, value %d, rope %d, kv rank %d, "
                         "per-head q %d, v %d)", m->arch->name, hp->n_head_kv, hp->head_dim, hp->head_dim_v, hp->n_rot,
                    hp->kv_lora_rank, hp->head_dim_mla, hp->head_dim_v_mla);
    if (gating == 3) return herr(err, "%s: expert_gating_func 3 is not supported", m->arch->name);
    hp->expert_sigmoid = gating == 2;
    char key[256];
    bool nw = false;
    snprintf(key, sizeof key, "%s.expert_weights_norm", m->arch->name);
    hp->expert_norm_w = gguf_get_bool(m->gguf, key, &nw) && nw;   /* absent: not renormalized */
    if (!model_meta_f32(m, "expert_weights_scale", &hp->expert_w_scale)) hp->expert_w_scale = 1;
    if (hp->n_expert_groups > 1 && (hp->n_expert % hp->n_expert_groups || hp->n_group_used < 1 ||
                                    (int64_t)hp->n_group_used * (hp->n_expert / hp->n_expert_groups) < hp->n_expert_used))
        return herr(err, "%s: %d expert groups (%d used) cannot give %d of %d experts", m->arch->name, hp->n_expert_groups,
                    hp->n_group_used, hp->n_expert_used, hp->n_expert);
    if (hp->n_dense_lead < hp->n_layer && !hp->n_expert) return herr(err, "%s: MoE layers without experts", m->arch->name);
    hp->rope_type = ROPE_NORM;
    hp->n_ff_shexp = hp->n_ff_exp * n_shared;
    /* the FFN scratch (hb, hb2) also holds the shared experts' rows and latent attention's per-head rows */
    hp->n_ff = HT_MAX(HT_MAX(hp->n_ff, hp->n_ff_shexp), hp->kv_lora_rank);
    return deepseek2_rope(m, err);
}

static int deepseek2_bind_attention(hearth_model *m, ht_layer *L, int il, hearth_err *err) {
    const ht_hparams *hp = &m->hp;
    const int E = hp->n_embd, H = hp->n_head, R = hp->kv_lora_rank, QL = hp->q_lora_rank, dq = hp->head_dim_mla;
    if (QL ? model_bind(m, &L->wq_a, true, err, E, QL, "blk.%d.attn_q_a.weight", il) ||
                 model_bind(m, &L->q_a_norm, true, err, QL, 1, "blk.%d.attn_q_a_norm.weight", il) ||
                 model_bind(m, &L->wq_b, true, err, QL, H * dq, "blk.%d.attn_q_b.weight", il)
           : model_bind(m, &L->wq, true, err, E, H * dq, "blk.%d.attn_q.weight", il))
        return -1;
    return model_bind(m, &L->attn_norm, true, err, E, 1, "blk.%d.attn_norm.weight", il) ||
                   model_bind(m, &L->wkv_a, true, err, E, R + hp->n_rot, "blk.%d.attn_kv_a_mqa.weight", il) ||
                   model_bind(m, &L->kv_a_norm, true, err, R, 1, "blk.%d.attn_kv_a_norm.weight", il) ||
                   model_bind_stack(m, &L->wk_b, err, dq - hp->n_rot, R, H, "blk.%d.attn_k_b.weight", il) ||
                   model_bind_stack(m, &L->wv_b, err, R, hp->head_dim_v_mla, H, "blk.%d.attn_v_b.weight", il) ||
                   model_bind(m, &L->wo, true, err, H * hp->head_dim_v_mla, E, "blk.%d.attn_output.weight", il)
               ? -1 : 0;
}

static int deepseek2_bind_ffn(hearth_model *m, ht_layer *L, int il, hearth_err *err) {
    const ht_hparams *hp = &m->hp;
    const int E = hp->n_embd, F = hp->n_ff_exp, FS = hp->n_ff_shexp;
    if (model_bind(m, &L->ffn_norm, true, err, E, 1, "blk.%d.ffn_norm.weight", il)) return -1;
    if (il < hp->n_dense_lead) {   /* its width is feed_forward_length, hp.n_ff or less */
        if (model_bind(m, &L->ffn_gate, true, err, E, -1, "blk.%d.ffn_gate.weight", il)) return -1;
        const int64_t ff = L->ffn_gate.ne[1];
        if (ff > hp->n_ff) return herr(err, "tensor %s: %lld rows, more than feed_forward_length", L->ffn_gate.name, (long long)ff);
        return model_bind(m, &L->ffn_up, true, err, E, ff, "blk.%d.ffn_up.weight", il) ||
                       model_bind(m, &L->ffn_down, true, err, ff, E, "blk.%d.ffn_down.weight", il)
                   ? -1 : 0;
    }
    if (model_bind(m, &L->ffn_gate_inp, true, err, E, hp->n_expert, "blk.%d.ffn_gate_inp.weight", il) ||
        model_bind(m, &L->exp_probs_b, false, err, hp->n_expert, 1, "blk.%d.exp_probs_b.bias", il) ||
        model_bind_experts(m, &L->ffn_gate_exps, err, E, F, "blk.%d.ffn_gate_exps.weight", il) ||
        model_bind_experts(m, &L->ffn_up_exps, err, E, F, "blk.%d.ffn_up_exps.weight", il) ||
        model_bind_experts(m, &L->ffn_down_exps, err, F, E, "blk.%d.ffn_down_exps.weight", il))
        return -1;
    return FS && (model_bind(m, &L->ffn_gate_shexp, true, err, E, FS, "blk.%d.ffn_gate_shexp.weight", il) ||
                  model_bind(m, &L->ffn_up_shexp, true, err, E, FS, "blk.%d.ffn_up_shexp.weight", il) ||
                  model_bind(m, &L->ffn_down_shexp, true, err, FS, E, "blk.%d.ffn_down_shexp.weight", il))
               ? -1 : 0;
}

static int deepseek2_bind(hearth_model *m, hearth_err *err) {
    ht_hparams *hp = &m->hp;
    if (model_bind(m, &m->tok_embd, true, err, hp->n_embd, -1, "token_embd.weight")) return -1;
    hp->n_vocab = (int)m->tok_embd.ne[1];
    if (model_bind(m, &m->output_norm, true, err, hp->n_embd, 1, "output_norm.weight") ||
        model_bind(m, &m->output, false, err, hp->n_embd, hp->n_vocab, "output.weight"))
        return -1;
    for (int il = 0; il < hp->n_layer; il++)
        if (deepseek2_bind_attention(m, &m->layers[il], il, err) || deepseek2_bind_ffn(m, &m->layers[il], il, err)) return -1;
    return 0;
}

/* x += mla(norm(x)); x += ffn(norm(x)), the FFN dense or routed + shared experts. */
static void deepseek2_layer(hearth_ctx *c, const ht_ubatch *ub, int il) {
    const ht_hparams *hp = &c->m->hp;
    const ht_layer *L = &c->m->layers[il];
    const int E = hp->n_embd;
    layer_norm_rows(c, ub, c->xb, c->x, &L->attn_norm, NULL, E, hp->norm_eps, NORM_RMS);
    layer_mla_attention(c, ub, il, c->xb, c->xb2);
    layer_residual(c, ub, c->x, c->xb2, E);
    layer_norm_rows(c, ub, c->xb, c->x, &L->ffn_norm, NULL, E, hp->norm_eps, NORM_RMS);
    if (L->ffn_gate_inp.data) layer_ffn_moe(c, ub, L, c->xb, c->xb2, ACT_SILU);
    else layer_ffn_gated(c, ub, L, c->xb, c->xb2, ACT_SILU);
    layer_residual(c, ub, c->x, c->xb2, E);
}

const ht_arch ht_arch_deepseek2 = { "deepseek2", false, deepseek2_hparams, deepseek2_bind, llama_embed, deepseek2_layer,
                                    llama_head };
