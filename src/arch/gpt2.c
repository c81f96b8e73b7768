/* gpt2.c — GPT-2: learned position embeddings (the context cannot pass their count), pre-LayerNorm
 * blocks with biases, fused QKV projection with bias, no rope, GELU (tanh form) FFN with biases, final
 * LayerNorm, output tied to the token embeddings unless output.weight is present. */
#include "model/layers.h"

static int gpt2_hparams(hearth_model *m, hearth_err *err) {
    if (model_common_hparams(m, err)) return -1;
    if (m->hp.n_head_kv != m->hp.n_head) return herr(err, "gpt2 has %d kv heads for %d heads (expected equal)", m->hp.n_head_kv, m->hp.n_head);
    return 0;
}

static int gpt2_bind(hearth_model *m, hearth_err *err) {
    ht_hparams *hp = &m->hp;
    int E = hp->n_embd, QKV = (hp->n_head + 2 * hp->n_head_kv) * hp->head_dim, OD = hp->n_head * hp->head_dim_v;
    if (hp->head_dim != hp->head_dim_v) return herr(err, "gpt2 needs equal key and value head sizes");
    if (model_bind(m, &m->tok_embd, true, err, E, -1, "token_embd.weight") ||
        model_bind(m, &m->pos_embd, true, err, E, -1, "position_embd.weight") ||
        model_bind_norm_wb(m, &m->output_norm, &m->output_norm_b, err, E, "output_norm", 0))
        return -1;
    hp->n_vocab = (int)m->tok_embd.ne[1];
    if (model_bind(m, &m->output, false, err, E, hp->n_vocab, "output.weight")) return -1;
    for (int il = 0; il < hp->n_layer; il++) {
        ht_layer *L = &m->layers[il];
        if (model_bind_norm_wb(m, &L->attn_norm, &L->attn_norm_b, err, E, "blk.%d.attn_norm", il) ||
            model_bind(m, &L->wqkv, true, err, E, QKV, "blk.%d.attn_qkv.weight", il) ||
            model_bind(m, &L->bqkv, true, err, QKV, 1, "blk.%d.attn_qkv.bias", il) ||
            model_bind(m, &L->wo, true, err, OD, E, "blk.%d.attn_output.weight", il) ||
            model_bind(m, &L->bo, true, err, E, 1, "blk.%d.attn_output.bias", il) ||
            model_bind_norm_wb(m, &L->ffn_norm, &L->ffn_norm_b, err, E, "blk.%d.ffn_norm", il) ||
            model_bind(m, &L->ffn_up, true, err, E, hp->n_ff, "blk.%d.ffn_up.weight", il) ||
            model_bind(m, &L->ffn_up_b, true, err, hp->n_ff, 1, "blk.%d.ffn_up.bias", il) ||
            model_bind(m, &L->ffn_down, true, err, hp->n_ff, E, "blk.%d.ffn_down.weight", il) ||
            model_bind(m, &L->ffn_down_b, true, err, E, 1, "blk.%d.ffn_down.bias", il))
            return -1;
    }
    return 0;
}

/* x = tok + pos; x += attn(LN(x)); x += ffn(LN(x)); logits = output(LN(x)). */
static void gpt2_embed(hearth_ctx *c, const ht_ubatch *ub) {
    ctx_embed_tokens(c, ub, c->x);
    ctx_embed_rows(ub, &c->m->pos_embd, ub->pos, c->xb);
    layer_residual(c, ub, c->x, c->xb, c->m->hp.n_embd);
}

static void gpt2_layer(hearth_ctx *c, const ht_ubatch *ub, int il) {
    const ht_hparams *hp = &c->m->hp;
    const ht_layer *L = &c->m->layers[il];
    int E = hp->n_embd;
    float eps = hp->norm_eps;
    layer_norm_rows(c, ub, c->xb, c->x, &L->attn_norm, &L->attn_norm_b, E, eps, NORM_LAYER);
    layer_attention(c, ub, il, c->xb, c->xb2, 0, 0);
    layer_residual(c, ub, c->x, c->xb2, E);
    layer_norm_rows(c, ub, c->xb, c->x, &L->ffn_norm, &L->ffn_norm_b, E, eps, NORM_LAYER);
    layer_ffn_plain(c, ub, L, c->xb, c->xb2, ACT_GELU_TANH);
    layer_residual(c, ub, c->x, c->xb2, E);
}

static void gpt2_head(hearth_ctx *c, const ht_ubatch *ub) {
    const hearth_model *m = c->m;
    layer_norm_rows(c, ub, c->xb, c->x, &m->output_norm, &m->output_norm_b, m->hp.n_embd, m->hp.norm_eps, NORM_LAYER);
    ctx_output(c, ub, c->xb);
}

const ht_arch ht_arch_gpt2 = { "gpt2", false, gpt2_hparams, gpt2_bind, gpt2_embed, gpt2_layer, gpt2_head };
