/* bert.c — BERT encoders: bidirectional attention (attention.causal, default false), embeddings =
 * token + token-type 0 + learned position, then LayerNorm; post-LayerNorm blocks (x = LN(x + attn(x)),
 * x = LN(x + ffn(x))) with biases everywhere and a GELU FFN in BERT's exact erf form (llama.cpp uses the
 * tanh approximation here; both are well inside the golden's bar); no rope. The output is the hidden state of
 * every position, pooled by hearth_embed per pooling_type (none, mean, CLS, last). With a masked-LM head
 * (mlm.dense, mlm.norm, output.bias: BertForMaskedLM / DistilBertForMaskedLM) it also produces logits:
 * LayerNorm(GELU(dense(x))) through the output matrix, or the tied embeddings, plus the output bias. */
#include <stdio.h>
#include <stdlib.h>

#include "model/layers.h"

typedef struct { ht_tensor dense, dense_b, norm, norm_b; } bert_mlm_head;   /* m->arch_data when present */

static int bert_hparams(hearth_model *m, hearth_err *err) {
    if (model_common_hparams(m, err)) return -1;
    ht_hparams *hp = &m->hp;
    char key[128];
    bool causal = false;
    uint32_t u;
    snprintf(key, sizeof key, "%s.attention.causal", m->arch->name);
    if (gguf_get_bool(m->gguf, key, &causal) && causal) return herr(err, "causal BERT models are not supported");
    hp->causal = false;
    if (model_meta_int(m, "pooling_type", 0, 1 << 16, POOL_NONE, &hp->pooling, err)) return -1;
    if (hp->pooling > POOL_LAST) return herr(err, "unsupported pooling type %d (none, mean, cls or last)", hp->pooling);
    hp->n_token_types = gguf_get_u32(m->gguf, "tokenizer.ggml.token_type_count", &u) && u <= (1u << 16) ? (int)u : 0;
    hp->logits = false;   /* unless bert_bind finds a masked-LM head */
    return 0;
}

/* q, k, v as separate projections or one fused attn_qkv, each with its bias. */
static int bind_qkv(hearth_model *m, ht_layer *L, hearth_err *err, int il) {
    const ht_hparams *hp = &m->hp;
    int E = hp->n_embd, QD = hp->n_head * hp->head_dim, KD = hp->n_head_kv * hp->head_dim, VD = hp->n_head_kv * hp->head_dim_v;
    if (model_bind(m, &L->wqkv, false, err, E, QD + KD + VD, "blk.%d.attn_qkv.weight", il)) return -1;
    if (L->wqkv.data) return model_bind(m, &L->bqkv, true, err, QD + KD + VD, 1, "blk.%d.attn_qkv.bias", il);
    return model_bind(m, &L->wq, true, err, E, QD, "blk.%d.attn_q.weight", il) ||
           model_bind(m, &L->bq, true, err, QD, 1, "blk.%d.attn_q.bias", il) ||
           model_bind(m, &L->wk, true, err, E, KD, "blk.%d.attn_k.weight", il) ||
           model_bind(m, &L->bk, true, err, KD, 1, "blk.%d.attn_k.bias", il) ||
           model_bind(m, &L->wv, true, err, E, VD, "blk.%d.attn_v.weight", il) ||
           model_bind(m, &L->bv, true, err, VD, 1, "blk.%d.attn_v.bias", il) ? -1 : 0;
}

/* The optional masked-LM head; binds it into m->arch_data and turns logits on. */
static int bind_mlm_head(hearth_model *m, hearth_err *err) {
    ht_hparams *hp = &m->hp;
    int E = hp->n_embd;
    bert_mlm_head h;
    if (model_bind(m, &h.dense, false, err, E, E, "mlm.dense.weight")) return -1;
    if (!h.dense.data) return 0;
    if (model_bind(m, &h.dense_b, true, err, E, 1, "mlm.dense.bias") ||
        model_bind_norm_wb(m, &h.norm, &h.norm_b, err, E, "mlm.norm", 0) ||
        model_bind(m, &m->output, false, err, E, hp->n_vocab, "output.weight") ||
        model_bind(m, &m->output_b, false, err, hp->n_vocab, 1, "output.bias"))
        return -1;
    if (!(m->arch_data = malloc(sizeof h))) return herr(err, "out of memory");
    memcpy(m->arch_data, &h, sizeof h);
    hp->logits = true;
    return 0;
}

static int bert_bind(hearth_model *m, hearth_err *err) {
    ht_hparams *hp = &m->hp;
    int E = hp->n_embd, OD = hp->n_head * hp->head_dim_v;
    if (model_bind(m, &m->tok_embd, true, err, E, -1, "token_embd.weight") ||
        model_bind(m, &m->type_embd, false, err, E, -1, "token_types.weight") ||
        model_bind(m, &m->pos_embd, true, err, E, -1, "position_embd.weight") ||
        model_bind_norm_wb(m, &m->tok_embd_norm, &m->tok_embd_norm_b, err, E, "token_embd_norm", 0))
        return -1;
    hp->n_vocab = (int)m->tok_embd.ne[1];
    for (int il = 0; il < hp->n_layer; il++) {
        ht_layer *L = &m->layers[il];
        if (bind_qkv(m, L, err, il) ||
            model_bind(m, &L->wo, true, err, OD, E, "blk.%d.attn_output.weight", il) ||
            model_bind(m, &L->bo, true, err, E, 1, "blk.%d.attn_output.bias", il) ||
            model_bind_norm_wb(m, &L->attn_post_norm, &L->attn_post_norm_b, err, E, "blk.%d.attn_output_norm", il) ||
            model_bind(m, &L->ffn_up, true, err, E, hp->n_ff, "blk.%d.ffn_up.weight", il) ||
            model_bind(m, &L->ffn_up_b, true, err, hp->n_ff, 1, "blk.%d.ffn_up.bias", il) ||
            model_bind(m, &L->ffn_down, true, err, hp->n_ff, E, "blk.%d.ffn_down.weight", il) ||
            model_bind(m, &L->ffn_down_b, true, err, E, 1, "blk.%d.ffn_down.bias", il) ||
            model_bind_norm_wb(m, &L->ffn_post_norm, &L->ffn_post_norm_b, err, E, "blk.%d.layer_output_norm", il))
            return -1;
    }
    return bind_mlm_head(m, err);
}

/* x = LN(tok + type0 + pos); per layer x = LN(x + attn(x)); x = LN(x + ffn(x)); output = x. */
static void bert_embed(hearth_ctx *c, const ht_ubatch *ub) {
    const hearth_model *m = c->m;
    int E = m->hp.n_embd;
    ctx_embed_tokens(c, ub, c->x);
    if (m->type_embd.data) {
        ctx_embed_rows(ub, &m->type_embd, NULL, c->xb);   /* token type 0 ("sentence A") for every token */
        layer_residual(c, ub, c->x, c->xb, E);
    }
    ctx_embed_rows(ub, &m->pos_embd, ub->pos, c->xb);
    layer_residual(c, ub, c->x, c->xb, E);
    layer_norm_rows(c, ub, c->x, c->x, &m->tok_embd_norm, &m->tok_embd_norm_b, E, m->hp.norm_eps, NORM_LAYER);
}

static void bert_layer(hearth_ctx *c, const ht_ubatch *ub, int il) {
    const ht_hparams *hp = &c->m->hp;
    const ht_layer *L = &c->m->layers[il];
    int E = hp->n_embd;
    float eps = hp->norm_eps;
    layer_attention(c, ub, il, c->x, c->xb2, 0, 0);
    layer_residual(c, ub, c->x, c->xb2, E);
    layer_norm_rows(c, ub, c->x, c->x, &L->attn_post_norm, &L->attn_post_norm_b, E, eps, NORM_LAYER);
    layer_ffn_plain(c, ub, L, c->x, c->xb2, ACT_GELU_ERF);
    layer_residual(c, ub, c->x, c->xb2, E);
    layer_norm_rows(c, ub, c->x, c->x, &L->ffn_post_norm, &L->ffn_post_norm_b, E, eps, NORM_LAYER);
}

static void bert_head(hearth_ctx *c, const ht_ubatch *ub) {
    const bert_mlm_head *h = c->m->arch_data;
    if (h) {
        int E = c->m->hp.n_embd;
        layer_dense(c, ub, &h->dense, &h->dense_b, c->x, c->xb, ACT_GELU_ERF);
        layer_norm_rows(c, ub, c->xb, c->xb, &h->norm, &h->norm_b, E, c->m->hp.norm_eps, NORM_LAYER);
    }
    ctx_output_head(c, ub, c->x, h ? c->xb : NULL);
}

const ht_arch ht_arch_bert = { "bert", true, bert_hparams, bert_bind, bert_embed, bert_layer, bert_head };
