/* phi3.c — Phi-3 / Phi-3.5 / Phi-4-mini: the pre-norm decoder with a fused attn_qkv (rows q, k, v), a fused
 * ffn_up whose rows are [gate | up] (bound as two views, so the SwiGLU block is the shared one), NEOX rope on
 * the first rope.dimension_count dims with LongRoPE: per-pair frequency divisors rope_factors_short, or
 * rope_factors_long for a context past rope.scaling.original_context_length, and cos/sin times
 * rope.scaling.attn_factor. Tied or separate output. */
#include "model/layers.h"

static int phi3_hparams(hearth_model *m, hearth_err *err) {
    if (model_common_hparams(m, err)) return -1;
    ht_hparams *hp = &m->hp;
    hp->rope_type = ROPE_NEOX;
    if (!model_meta_f32(m, "rope.scaling.attn_factor", &hp->rope_attn_factor)) hp->rope_attn_factor = 1.0f;
    if (!(hp->rope_attn_factor > 0 && hp->rope_attn_factor < 100))
        return herr(err, "metadata phi3.rope.scaling.attn_factor %g is implausible", hp->rope_attn_factor);
    return 0;   /* n_ctx_orig: rope.scaling.original_context_length, read with the common hyperparameters */
}

static int phi3_bind(hearth_model *m, hearth_err *err) {
    ht_hparams *hp = &m->hp;
    const int E = hp->n_embd, QD = hp->n_head * hp->head_dim, KD = hp->n_head_kv * hp->head_dim;
    const int VD = hp->n_head_kv * hp->head_dim_v, F = hp->n_ff;
    if (model_bind(m, &m->tok_embd, true, err, E, -1, "token_embd.weight")) return -1;
    hp->n_vocab = (int)m->tok_embd.ne[1];
    if (model_bind(m, &m->output_norm, true, err, E, 1, "output_norm.weight") ||
        model_bind(m, &m->output, false, err, E, hp->n_vocab, "output.weight") ||
        model_bind(m, &m->rope_freqs, false, err, hp->n_rot / 2, 1, "rope_factors_short.weight") ||
        model_bind(m, &m->rope_freqs_long, false, err, hp->n_rot / 2, 1, "rope_factors_long.weight"))
        return -1;
    for (int il = 0; il < hp->n_layer; il++) {
        ht_layer *L = &m->layers[il];
        ht_tensor up;
        if (model_bind(m, &L->attn_norm, true, err, E, 1, "blk.%d.attn_norm.weight", il) ||
            model_bind(m, &L->wqkv, true, err, E, QD + KD + VD, "blk.%d.attn_qkv.weight", il) ||
            model_bind(m, &L->wo, true, err, hp->n_head * hp->head_dim_v, E, "blk.%d.attn_output.weight", il) ||
            model_bind(m, &L->ffn_norm, true, err, E, 1, "blk.%d.ffn_norm.weight", il) ||
            model_bind(m, &up, true, err, E, 2 * F, "blk.%d.ffn_up.weight", il) ||
            model_bind(m, &L->ffn_down, true, err, F, E, "blk.%d.ffn_down.weight", il))
            return -1;
        L->ffn_gate = ht_rows(&up, 0, F);
        L->ffn_up = ht_rows(&up, F, F);
    }
    return 0;
}

const ht_arch ht_arch_phi3 = { "phi3", false, phi3_hparams, phi3_bind, llama_embed, llama_layer, llama_head };
