/* model.c — loading a model: open the GGUF, pick the architecture by general.architecture, read the
 * hyperparameters, index the tensors (views into the mapping), bind the weights, load the vocabulary.
 * Also the public model / tokenizer entry points of hearth.h. */
#include "model/model.h"

#include "model/hf.h"
#include "generate/grammar.h"
#include "io/hf_meta.h"
#include "io/safetensors.h"
#include "tokenizer/tok_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static const ht_arch *const ARCHS[] = { &ht_arch_llama, &ht_arch_mistral3, &ht_arch_qwen2, &ht_arch_qwen3, &ht_arch_qwen3moe, &ht_arch_qwen35,
                                         &ht_arch_qwen35moe, &ht_arch_qwen3next, &ht_arch_gemma3, &ht_arch_gemma3n, &ht_arch_gemma4, &ht_arch_gpt2, &ht_arch_bert,
                                         &ht_arch_smollm3, &ht_arch_phi3, &ht_arch_deepseek2, &ht_arch_gptoss };

const ht_arch *ht_find_arch(const char *name) {
    for (size_t i = 0; i < sizeof ARCHS / sizeof ARCHS[0]; i++)
        if (!strcmp(ARCHS[i]->name, name)) return ARCHS[i];
    return NULL;
}

int model_own(hearth_model *m, void *p, hearth_err *err) {
    void **o = realloc(m->owned, sizeof(void *) * (size_t)(m->n_owned + 1));
    if (!o) { free(p); return herr(err, "out of memory"); }
    m->owned = o;
    m->owned[m->n_owned++] = p;
    return 0;
}

static bool meta_key(const hearth_model *m, const char *suffix, char *key, size_t cap) {
    return snprintf(key, cap, "%s.%s", m->arch->name, suffix) < (int)cap;
}

bool model_meta_u32(const hearth_model *m, const char *suffix, uint32_t *out) {
    char key[256];
    return meta_key(m, suffix, key, sizeof key) && gguf_get_u32(m->gguf, key, out);
}

bool model_meta_f32(const hearth_model *m, const char *suffix, float *out) {
    char key[256];
    return meta_key(m, suffix, key, sizeof key) && gguf_get_f32(m->gguf, key, out);
}

static const ht_tensor *find_tensor(const hearth_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    return NULL;
}

/* model_bind and model_bind_experts: ne2 is 1 for a matrix or vector, n_expert for an expert stack. */
static int bind_named(hearth_model *m, ht_tensor *dst, bool required, hearth_err *err, int64_t ne0, int64_t ne1,
                      int64_t ne2, const char *name) {
    const ht_tensor *t = find_tensor(m, name);
    if (!t) {
        memset(dst, 0, sizeof *dst);
        return required ? herr(err, "missing tensor '%s'", name) : 0;
    }
    if ((ne0 >= 0 && t->ne[0] != ne0) || (ne1 >= 0 && t->ne[1] != ne1))
        return herr(err, "tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]", name, (long long)t->ne[0],
                    (long long)t->ne[1], (long long)ne0, (long long)ne1);
    const ht_traits *tr = ht_get_traits(t->type);
    if (t->ne[2] != ne2 || t->ne[3] != 1 || (ne1 == 1 && t->ne[1] != 1))
        return herr(err, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected %s", name, (long long)t->ne[0],
                    (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                    ne2 > 1 ? "a stack of one matrix per expert" : ne1 == 1 ? "a vector" : "a matrix");
    if (ne1 != 1 && (!tr->vec_dot || t->ne[1] > (1 << 26)))   /* Q8_1 / Q8_K: activation formats, no kernel */
        return herr(err, "tensor '%s': %s", name, !tr->vec_dot ? "its type holds activations, not weights (no kernel multiplies it)"
                                                              : "too many rows");
    *dst = *t;
    if (ne1 == 1 && t->type != HT_F32) {
        /* norms and biases are used as float vectors: convert the (small) vector once, whatever its rank */
        float *f = malloc((size_t)t->ne[0] * sizeof(float));
        if (!f) return herr(err, "out of memory converting '%s'", name);
        tr->to_float(t->data, f, t->ne[0]);
        if (model_own(m, f, err)) return -1;
        dst->data = f;
        dst->type = HT_F32;
        dst->row_bytes = dst->nbytes = (size_t)t->ne[0] * sizeof(float);
    }
    return 0;
}

int model_bind(hearth_model *m, ht_tensor *dst, bool required, hearth_err *err, int64_t ne0, int64_t ne1,
               const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    return bind_named(m, dst, required, err, ne0, ne1, 1, name);
}

bool model_has_tensor(const hearth_model *m, const char *fmt, int il) {
    char name[256];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(name, sizeof name, fmt, il);
#pragma GCC diagnostic pop
    return find_tensor(m, name) != NULL;
}

int model_bind_experts(hearth_model *m, ht_tensor *dst, hearth_err *err, int64_t ne0, int64_t ne1, const char *fmt, int il) {
    char name[256];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(name, sizeof name, fmt, il);
#pragma GCC diagnostic pop
    return bind_named(m, dst, true, err, ne0, ne1, m->hp.n_expert, name);
}

int model_bind_stack(hearth_model *m, ht_tensor *dst, hearth_err *err, int64_t ne0, int64_t ne1, int64_t ne2, const char *fmt,
                     int il) {
    char name[256];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(name, sizeof name, fmt, il);
#pragma GCC diagnostic pop
    return bind_named(m, dst, true, err, ne0, ne1, ne2, name);
}

int model_bind_norm_wb(hearth_model *m, ht_tensor *w, ht_tensor *b, hearth_err *err, int64_t n, const char *prefix, int il) {
    char name[200];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(name, sizeof name, prefix, il);
#pragma GCC diagnostic pop
    return model_bind(m, w, true, err, n, 1, "%s.weight", name) || model_bind(m, b, true, err, n, 1, "%s.bias", name) ? -1 : 0;
}

int model_meta_int(const hearth_model *m, const char *suffix, int lo, int hi, int def, int *out, hearth_err *err) {
    char key[256];
    const gguf_kv *kv = meta_key(m, suffix, key, sizeof key) ? gguf_find(m->gguf, key) : NULL;
    if (!kv) { *out = def; return 0; }
    int64_t v;
    if (!gguf_get_i64(m->gguf, key, &v) || v < lo || v > hi)
        return herr(err, "metadata %s is not an integer in %d..%d", key, lo, hi);
    *out = (int)v;
    return 0;
}

int model_meta_layer_ints(const hearth_model *m, const char *suffix, int lo, int hi, int def, int *out, int *max,
                          hearth_err *err) {
    char key[256];
    const gguf_kv *kv = meta_key(m, suffix, key, sizeof key) ? gguf_find(m->gguf, key) : NULL;
    const int n = m->hp.n_layer;
    *max = INT32_MIN;
    if (kv && kv->type == GGUF_ARR) {
        if (kv->arr_n != (uint64_t)n) return herr(err, "metadata %s: an array of %d values expected", key, n);
        for (int il = 0; il < n; il++) {
            int64_t v;
            if (!gguf_arr_int(kv, (uint64_t)il, lo, hi, &v))
                return herr(err, "metadata %s[%d] is not an integer in %d..%d", key, il, lo, hi);
            out[il] = (int)v;
        }
    } else {
        int v;
        if (model_meta_int(m, suffix, lo, hi, def, &v, err)) return -1;
        for (int il = 0; il < n; il++) out[il] = v;
    }
    for (int il = 0; il < n; il++) *max = HT_MAX(*max, out[il]);
    return 0;
}

/* A per-layer count's largest value (scalar or array): what buffers are sized by; the architecture reads the
 * values per layer when it has them. */
static int meta_int_max(hearth_model *m, const char *suffix, int lo, int hi, int def, int *out, hearth_err *err) {
    int *v = malloc((size_t)m->hp.n_layer * sizeof *v);
    if (!v) return herr(err, "out of memory");
    int rc = model_meta_layer_ints(m, suffix, lo, hi, def, v, out, err);
    free(v);
    return rc;
}

void model_layer_defaults(hearth_model *m) {
    const ht_hparams *hp = &m->hp;
    for (int il = 0; il < hp->n_layer; il++) {
        ht_layer *L = &m->layers[il];
        if (!L->head_dim) L->head_dim = hp->head_dim;
        if (!L->head_dim_v) L->head_dim_v = hp->head_dim_v;
        if (!L->n_head_kv) L->n_head_kv = hp->n_head_kv;
        if (!L->n_rot) L->n_rot = hp->n_rot;
        if (!L->kv_shared) L->kv_src = il;
    }
}

int model_swa_pattern(hearth_model *m, int def_period, hearth_err *err) {
    const int NL = m->hp.n_layer;
    char key[256];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", m->arch->name);
    const gguf_kv *kv = gguf_find(m->gguf, key);
    int period = def_period;
    if (kv && kv->type != GGUF_ARR && model_meta_int(m, "attention.sliding_window_pattern", 1, NL, def_period, &period, err))
        return -1;
    if (kv && kv->type == GGUF_ARR && kv->arr_n != (uint64_t)NL)
        return herr(err, "metadata %s: %llu flags for %d layers", key, (unsigned long long)kv->arr_n, NL);
    if (!kv && !def_period) return herr(err, "metadata %s: an array of %d flags expected", key, NL);
    for (int il = 0; il < NL; il++) {
        int64_t f = (il + 1) % (period ? period : 1) != 0;
        if (kv && kv->type == GGUF_ARR && !gguf_arr_int(kv, (uint64_t)il, 0, 1, &f))
            return herr(err, "metadata %s[%d]: not a flag", key, il);
        m->layers[il].swa = f != 0;
    }
    return 0;
}

int model_share_kv(hearth_model *m, int n_shared, hearth_err *err) {
    const int NL = m->hp.n_layer;
    for (int il = NL - n_shared; il < NL; il++) {
        ht_layer *L = &m->layers[il];
        const int src = NL - n_shared - (L->swa ? 2 : 1);
        if (src < 0 || m->layers[src].swa != L->swa)
            return herr(err, "layer %d shares the KV cache of layer %d, which is not a %s layer", il, src,
                        L->swa ? "sliding" : "global");
        if (L->n_head_kv != m->layers[src].n_head_kv)
            return herr(err, "layer %d: %d kv heads, but the cache it shares (layer %d) has %d", il, L->n_head_kv, src,
                        m->layers[src].n_head_kv);
        L->kv_shared = true;
        L->kv_src = src;
    }
    return 0;
}

int model_common_hparams(hearth_model *m, hearth_err *err) {
    ht_hparams *hp = &m->hp;
    const char *need[] = { "embedding_length", "block_count", "attention.head_count" };
    char key[256];
    for (int i = 0; i < 3; i++)
        if (!meta_key(m, need[i], key, sizeof key) || !gguf_find(m->gguf, key))
            return herr(err, "metadata %s.%s missing", m->arch->name, need[i]);
    /* every size bounded, and every product of them checked in 64 bits below, before any is used */
    if (model_meta_int(m, "embedding_length", 1, 1 << 20, 0, &hp->n_embd, err) ||
        model_meta_int(m, "block_count", 1, 1 << 16, 0, &hp->n_layer, err) ||
        model_meta_int(m, "attention.head_count", 1, 1 << 16, 0, &hp->n_head, err) ||
        meta_int_max(m, "attention.head_count_kv", 1, hp->n_head, hp->n_head, &hp->n_head_kv, err) ||
        meta_int_max(m, "feed_forward_length", 1, 1 << 24, (int)HT_MIN(4ll * hp->n_embd, 1 << 24), &hp->n_ff, err) ||
        model_meta_int(m, "context_length", 1, 1 << 30, 2048, &hp->n_ctx_train, err) ||
        model_meta_int(m, "attention.key_length", 1, 4096, HT_MAX(hp->n_embd / hp->n_head, 1), &hp->head_dim, err) ||
        model_meta_int(m, "attention.value_length", 1, 4096, hp->head_dim, &hp->head_dim_v, err))
        return -1;
    /* mixture of experts (Mixtral: arch llama with experts; qwen3moe): the expert FFN width defaults to n_ff */
    if (model_meta_int(m, "expert_count", 0, HT_MAX_EXPERTS, 0, &hp->n_expert, err) ||
        model_meta_int(m, "expert_used_count", hp->n_expert ? 1 : 0, hp->n_expert, hp->n_expert ? 2 : 0, &hp->n_expert_used, err) ||
        model_meta_int(m, "expert_feed_forward_length", 1, 1 << 24, hp->n_ff, &hp->n_ff_exp, err))
        return -1;
    if (hp->n_expert == 1) return herr(err, "metadata %s.expert_count 1: a mixture needs at least 2 experts", m->arch->name);
    char nk[256];
    bool nw = true;
    hp->expert_norm_w = !meta_key(m, "expert_weights_norm", nk, sizeof nk) || !gguf_get_bool(m->gguf, nk, &nw) || nw;
    if (hp->n_head % hp->n_head_kv)
        return herr(err, "head_count_kv %d does not divide head_count %d", hp->n_head_kv, hp->n_head);
    if ((int64_t)hp->n_head * HT_MAX(hp->head_dim, hp->head_dim_v) > (1 << 24))
        return herr(err, "implausible attention size: %d heads of %d", hp->n_head, HT_MAX(hp->head_dim, hp->head_dim_v));
    if (!model_meta_f32(m, "attention.layer_norm_rms_epsilon", &hp->norm_eps) &&
        !model_meta_f32(m, "attention.layer_norm_epsilon", &hp->norm_eps))
        hp->norm_eps = 1e-5f;
    if (!model_meta_f32(m, "rope.freq_base", &hp->rope_base)) hp->rope_base = 10000.0f;
    if (!(hp->norm_eps >= 0 && hp->norm_eps < 1) || !(hp->rope_base > 0 && hp->rope_base < 1e30f))
        return herr(err, "implausible norm epsilon %g or rope base %g", hp->norm_eps, hp->rope_base);
    if (!model_meta_f32(m, "rope.freq_base_swa", &hp->rope_base_swa)) hp->rope_base_swa = hp->rope_base;
    hp->rope_scale = 1.0f;
    float f;
    if (model_meta_f32(m, "rope.scaling.factor", &f) && f > 0) {
        gguf_str st;
        char key[256];
        snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch->name);
        const bool got = gguf_get_str(m->gguf, key, &st);
        hp->rope_yarn = got && st.n == 4 && !memcmp(st.p, "yarn", 4);
        if (hp->rope_yarn || (got && st.n == 6 && !memcmp(st.p, "linear", 6))) hp->rope_scale = f;
        hp->yarn_beta_fast = 32.0f;   /* the reference's values (its loaders ignore rope.scaling.yarn_beta_* but */
        hp->yarn_beta_slow = 1.0f;    /* for Grok's and Mistral 3's; gpt-oss's config says 32 and 1 too) */
        if (hp->rope_yarn) model_meta_f32(m, "rope.scaling.yarn_log_multiplier", &hp->yarn_log_mul);
    }
    if (model_meta_f32(m, "attention.temperature_scale", &hp->attn_temp_scale) && !(fabsf(hp->attn_temp_scale) < 1e6f))
        return herr(err, "implausible attention.temperature_scale %g", hp->attn_temp_scale);
    hp->rope_scale_swa = hp->rope_scale;
    hp->rope_attn_factor = 1.0f;
    if (model_meta_int(m, "rope.scaling.original_context_length", 1, 1 << 30, hp->n_ctx_train, &hp->n_ctx_orig, err) ||
        model_meta_int(m, "rope.dimension_count", 0, hp->head_dim, hp->head_dim, &hp->n_rot, err) ||
        model_meta_int(m, "attention.sliding_window", 0, 1 << 30, 0, &hp->sliding_window, err))
        return -1;
    if (hp->n_rot % 2) return herr(err, "rope dimension %d invalid for head_dim %d", hp->n_rot, hp->head_dim);
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->embd_scale = 1.0f;
    hp->causal = true;
    hp->logits = true;
    return 0;
}

/* Builds the name -> view index over the GGUF's tensors. */
static int index_tensors(hearth_model *m, hearth_err *err) {
    gguf_file *g = m->gguf;
    m->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *m->tensors);
    if (!m->tensors) return herr(err, "out of memory");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *gt = &g->tensors[i];
        ht_tensor *t = &m->tensors[i];
        t->name = gt->name;
        t->type = gt->type;
        t->n_dims = (int)gt->n_dims;
        for (int d = 0; d < 4; d++) t->ne[d] = gt->ne[d];
        t->data = gt->data;
        t->nbytes = gt->nbytes;
        t->row_bytes = ht_row_size(gt->type, gt->ne[0]);
    }
    m->n_tensors = (int)g->n_tensors;
    return 0;
}

/* The model of an open GGUF (m->gguf). */
static int load_from_gguf(hearth_model *m, hearth_err *err) {
    if (m->gguf->n_tensors == 0 && gguf_find(m->gguf, "tokenizer.ggml.model")) {
        /* a vocabulary-only GGUF (as llama.cpp ships them): a tokenizer, no weights */
        if (vocab_from_gguf(m->gguf, &m->vocab, err)) return -1;
        m->hp.n_vocab = vocab_size(m->vocab);
        return 0;
    }
    gguf_str arch;
    if (!gguf_get_str(m->gguf, "general.architecture", &arch)) return herr(err, "no general.architecture key");
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)HT_MIN(arch.n, 63), arch.p);
    m->arch = ht_find_arch(name);
    if (!m->arch && strstr(name, "moe"))
        return herr(err, "mixture-of-experts architecture '%s' is not supported yet", name);
    if (!m->arch) return herr(err, "unsupported architecture '%s'", name);
    gguf_str gn;
    if (gguf_get_str(m->gguf, "general.name", &gn)) snprintf(m->name, sizeof m->name, "%.*s", (int)HT_MIN(gn.n, 127), gn.p);
    if (index_tensors(m, err) || m->arch->load_hparams(m, err)) return -1;
    m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    if (!m->layers) return herr(err, "out of memory");
    m->layer_hi = m->hp.n_layer;
    if (m->arch->bind(m, err)) return -1;
    model_layer_defaults(m);
    if (!gguf_find(m->gguf, "tokenizer.ggml.model")) return 0;   /* no tokenizer: ids only */
    if (vocab_from_gguf(m->gguf, &m->vocab, err)) return -1;
    if (vocab_size(m->vocab) < m->hp.n_vocab) return herr(err, "vocabulary has %d tokens, embeddings have %d", vocab_size(m->vocab), m->hp.n_vocab);
    model_apply_generation_eog(m);   /* EOG ids a hearth-written GGUF carries from generation_config.json */
    return 0;
}

static int load_gguf(hearth_model *m, const char *path, hearth_err *err) {
    if (gguf_open(path, &m->gguf, err)) return -1;
    struct stat st;
    if (!stat(path, &st)) m->file_bytes = (uint64_t)st.st_size;
    return load_from_gguf(m, err);
}

int hearth_model_load_memory(const void *buf, size_t size, const char *name, hearth_model **out, hearth_err *err) {
    *out = NULL;
    quant_init();
    hearth_model *m = calloc(1, sizeof *m);
    if (!m) return herr(err, "out of memory");
    m->path = strdup(name ? name : "(memory)");
    m->file_bytes = size;
    if (!m->path || gguf_open_memory(buf, size, &m->gguf, err) || load_from_gguf(m, err)) {
        if (!m->path) herr(err, "out of memory");
        hearth_model_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

int hearth_model_load(const char *path, hearth_model **out, hearth_err *err) {
    *out = NULL;
    quant_init();
    hearth_model *m = calloc(1, sizeof *m);
    if (!m) return herr(err, "out of memory");
    struct stat st;
    bool is_dir = !stat(path, &st) && S_ISDIR(st.st_mode);
    m->path = strdup(path);
    if (!m->path) { free(m); return herr(err, "out of memory"); }
    if (is_dir ? hf_load(m, path, err) : load_gguf(m, path, err)) { hearth_model_free(m); return -1; }
    *out = m;
    return 0;
}

void hearth_model_free(hearth_model *m) {
    if (!m) return;
    if (m->vocab) vocab_free(m->vocab);
    gram_vocab_free(m->gvocab);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->tensors);
    free(m->arch_data);
    if (m->gguf) gguf_close(m->gguf);
    if (m->st) st_close(m->st);
    free(m->path);
    free(m);
}

void hearth_model_get_info(const hearth_model *m, hearth_model_info *o) {
    const ht_hparams *hp = &m->hp;
    memset(o, 0, sizeof *o);
    o->arch = m->arch ? m->arch->name : "none";
    o->name = m->name;
    o->n_vocab = hp->n_vocab; o->n_ctx_train = hp->n_ctx_train; o->n_embd = hp->n_embd; o->n_layer = hp->n_layer;
    o->n_head = hp->n_head; o->n_head_kv = hp->n_head_kv; o->head_dim = hp->head_dim; o->n_ff = hp->n_ff;
    if (m->tp_size > 1) { o->n_head = m->tp_n_head; o->n_head_kv = m->tp_n_head_kv; }   /* the model's, not this rank's */
    o->is_encoder = m->arch && m->arch->encoder;
    if (!m->arch && m->vocab) o->n_vocab = vocab_size(m->vocab);   /* a tokenizer only */
    for (int i = 0; i < m->n_tensors; i++) {
        const ht_tensor *t = &m->tensors[i];
        const uint64_t n = (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        const bool stack = hp->n_expert > 1 && t->n_dims == 3 && t->ne[2] == hp->n_expert;
        o->n_params += n;
        o->weight_bytes += t->nbytes;
        o->n_params_active += stack ? n / (uint64_t)hp->n_expert * (uint64_t)hp->n_expert_used : n;
        o->active_bytes += stack ? t->nbytes / (size_t)hp->n_expert * (size_t)hp->n_expert_used : t->nbytes;
    }
    o->n_expert = hp->n_expert; o->n_expert_used = hp->n_expert_used; o->n_ff_exp = hp->n_expert ? hp->n_ff_exp : 0;
    o->file_bytes = m->file_bytes;
}

int hearth_model_meta_str(const hearth_model *m, const char *key, char *buf, size_t cap) {
    gguf_str s;
    if (!m->gguf || !key || !gguf_get_str(m->gguf, key, &s) || s.n > INT32_MAX) return -1;
    if (buf && cap) {
        size_t n = HT_MIN((size_t)s.n, cap - 1);
        memcpy(buf, s.p, n);
        buf[n] = 0;
    }
    return (int)s.n;
}

int model_need_vocab(const hearth_model *m, hearth_err *err) {
    if (m->vocab) return 0;
    struct stat st;
    const char *p = m->path ? m->path : "the model";
    if (m->path && !stat(m->path, &st) && S_ISDIR(st.st_mode))
        return herr(err, "%s has no tokenizer: the directory holds no tokenizer.json or vocab.txt", p);
    return herr(err, "%s has no tokenizer: the file holds no tokenizer.ggml.* metadata", p);
}

bool hearth_model_has_tokenizer(const hearth_model *m) { return m && m->vocab; }

const char *hearth_kernels(void) {
    quant_init();
    return quant_backend();
}

bool hearth_set_kernels(const char *name) { return name && quant_set_backend(name); }

/* ---- tokenizer entry points ---- */
int hearth_tokenize(const hearth_model *m, const char *text, size_t len, bool add_bos, bool parse_special,
                    hearth_token *out, int cap, hearth_err *err) {
    int32_t *ids = NULL;
    int n = 0;
    if (model_need_vocab(m, err)) return -1;
    if (tok_encode(m->vocab, text, len, add_bos, parse_special, &ids, &n, err)) return -1;
    if (n <= cap) memcpy(out, ids, (size_t)n * sizeof *ids);
    free(ids);
    return n;
}

int hearth_token_piece(const hearth_model *m, hearth_token t, char *buf, int cap) {
    if (!m->vocab || t < 0 || t >= vocab_size(m->vocab)) return 0;
    return tok_piece(m->vocab, t, false, buf, cap);
}

int hearth_token_text(const hearth_model *m, hearth_token t, char *buf, int cap) {
    if (!m->vocab || t < 0 || t >= vocab_size(m->vocab)) return 0;
    return tok_piece(m->vocab, t, true, buf, cap);
}

hearth_token hearth_token_bos(const hearth_model *m) { return m->vocab ? vocab_bos(m->vocab) : -1; }
hearth_token hearth_token_eos(const hearth_model *m) { return m->vocab ? vocab_eos(m->vocab) : -1; }
bool hearth_token_is_eog(const hearth_model *m, hearth_token t) { return m->vocab && vocab_is_eog(m->vocab, t); }

/* Length of the UTF-8 sequence a lead byte announces (1 for stray continuation / invalid bytes). */
static int utf8_len(unsigned char c) {
    if (c >= 0xf0 && c < 0xf8) return 4;
    if (c >= 0xe0) return c < 0xf0 ? 3 : 1;
    if (c >= 0xc0) return 2;
    return 1;
}

int hearth_detok_push(const hearth_model *m, hearth_detok *d, hearth_token t, char *buf, int cap) {
    char piece[256];
    int n = hearth_token_piece(m, t, piece, sizeof piece);
    if (n > (int)sizeof piece) n = (int)sizeof piece;
    int o = 0;
    for (int i = 0; i < n; i++) {
        unsigned char c = (unsigned char)piece[i];
        if (d->n_pend > 0 && (c & 0xc0) != 0x80) {   /* broken sequence: emit what we held as-is */
            for (int k = 0; k < d->n_pend && o < cap; k++) buf[o++] = d->pend[k];
            d->n_pend = 0;
        }
        if (d->n_pend == 0 && utf8_len(c) == 1) { if (o < cap) buf[o++] = (char)c; continue; }
        d->pend[d->n_pend++] = (char)c;
        if (d->n_pend == utf8_len((unsigned char)d->pend[0])) {
            for (int k = 0; k < d->n_pend && o < cap; k++) buf[o++] = d->pend[k];
            d->n_pend = 0;
        }
    }
    return o;
}

int hearth_detok_flush(hearth_detok *d, char *buf, int cap) {
    int o = 0;
    for (int k = 0; k < d->n_pend && o < cap; k++) buf[o++] = d->pend[k];
    d->n_pend = 0;
    return o;
}

/* ---- what HF directories (and GGUFs written from them) say about generation; tokenizer-only models ---- */
void model_apply_generation_eog(hearth_model *m) {
    const gguf_kv *kv = m->gguf && m->vocab ? gguf_find(m->gguf, GEN_KEY "eos_token_ids") : NULL;
    if (!kv || kv->type != GGUF_ARR) return;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        int64_t id;
        if (gguf_arr_int(kv, i, 0, vocab_size(m->vocab) - 1, &id)) vocab_add_eog(m->vocab, (int32_t)id);
    }
}

hearth_sampler_params hearth_model_sampler_defaults(const hearth_model *m) {
    hearth_sampler_params p = hearth_sampler_default_params();
    const gguf_file *g = m ? m->gguf : NULL;
    uint32_t k;
    if (!g) return p;
    gguf_get_f32(g, GEN_KEY "temperature", &p.temperature);
    gguf_get_f32(g, GEN_KEY "top_p", &p.top_p);
    gguf_get_f32(g, GEN_KEY "min_p", &p.min_p);
    gguf_get_f32(g, GEN_KEY "typical_p", &p.typical_p);
    gguf_get_f32(g, GEN_KEY "repetition_penalty", &p.repeat_penalty);
    if (gguf_get_u32(g, GEN_KEY "top_k", &k)) p.top_k = (int)k;
    return p;
}

/* ---- tokenizer-only models ---- */
static int load_tokenizer_only(hearth_model *m, const char *path, hearth_err *err) {
    struct stat st;
    size_t n = strlen(path);
    if (stat(path, &st)) return herr(err, "cannot open %s", path);
    if (S_ISDIR(st.st_mode)) {
        if (hf_load_tokenizer(m, path, err)) return -1;
        return m->vocab ? 0 : herr(err, "%s holds no tokenizer.json or vocab.txt", path);
    }
    if (n >= 5 && !strcmp(path + n - 5, ".json")) return vocab_from_tokenizer_json(path, &m->vocab, err);
    if (gguf_open(path, &m->gguf, err)) return -1;
    return vocab_from_gguf(m->gguf, &m->vocab, err);
}

int hearth_tokenizer_load(const char *path, hearth_model **out, hearth_err *err) {
    *out = NULL;
    hearth_model *m = calloc(1, sizeof *m);
    if (!m) return herr(err, "out of memory");
    if (load_tokenizer_only(m, path, err)) { hearth_model_free(m); return -1; }
    m->hp.n_vocab = vocab_size(m->vocab);
    *out = m;
    return 0;
}
