/* quantize.c — writing a model (GGUF or Hugging Face directory) back out as a GGUF in another tensor type.
 *
 * Each tensor's type comes from quant_tensor_type(), following llama-quantize: a plain quantized type keeps
 * the output matrix (or the tied embedding) in Q6_K, --pure uses the type everywhere (how the fixtures
 * were made; Q8_0/Q4_0 blocks then equal the reference's byte for byte), the _M mixes add more bits for
 * some attn_v and ffn_down layers.
 * Norms, biases and other vectors stay F32. Tensor data is produced at write time, one tensor at a time,
 * rows quantized in parallel with the scalar reference quantizers, so memory stays at one tensor. */
#include "convert/quantize.h"
#include "model/lora.h"
#include "quant/quant_ref.h"
#include "tokenizer/vocab_export.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

typedef struct { const char *name; uint32_t base; int mix; uint32_t ftype; } qtype_name;

/* llama_ftype numbers written to general.file_type, as llama.cpp names them. */
static const qtype_name QTYPES[] = {
    { "F32", HT_F32, QMIX_PURE, 0 }, { "F16", HT_F16, QMIX_PURE, 1 }, { "BF16", HT_BF16, QMIX_PURE, 32 },
    { "Q4_0", HT_Q4_0, QMIX_PURE, 2 }, { "Q4_1", HT_Q4_1, QMIX_PURE, 3 }, { "Q8_0", HT_Q8_0, QMIX_PURE, 7 },
    { "Q5_0", HT_Q5_0, QMIX_PURE, 8 }, { "Q5_1", HT_Q5_1, QMIX_PURE, 9 }, { "Q2_K", HT_Q2_K, QMIX_PURE, 10 },
    { "Q3_K", HT_Q3_K, QMIX_PURE, 12 }, { "Q4_K", HT_Q4_K, QMIX_PURE, 14 }, { "Q5_K", HT_Q5_K, QMIX_PURE, 16 },
    { "Q6_K", HT_Q6_K, QMIX_PURE, 18 }, { "IQ4_NL", HT_IQ4_NL, QMIX_PURE, 25 }, { "IQ4_XS", HT_IQ4_XS, QMIX_PURE, 30 },
    { "Q4_K_M", HT_Q4_K, QMIX_K_M, 15 }, { "Q5_K_M", HT_Q5_K, QMIX_K_M, 17 },
    { "TQ1_0", HT_TQ1_0, QMIX_PURE, 36 }, { "TQ2_0", HT_TQ2_0, QMIX_PURE, 37 }, { "MXFP4", HT_MXFP4, QMIX_PURE, 38 },
    { "IQ3_S", HT_IQ3_S, QMIX_PURE, 26 }, { "IQ3_XXS", HT_IQ3_XXS, QMIX_PURE, 23 },
    { "IQ2_S", HT_IQ2_S, QMIX_PURE, 29 },   /* llama.cpp's IQ2_M is the ftype whose matrices are IQ2_S */
    /* these need an importance matrix */
    { "IQ2_XXS", HT_IQ2_XXS, QMIX_PURE, 19 }, { "IQ2_XS", HT_IQ2_XS, QMIX_PURE, 20 },
    { "IQ1_S", HT_IQ1_S, QMIX_PURE, 24 }, { "IQ1_M", HT_IQ1_M, QMIX_PURE, 31 },
};

int quant_parse_type(const char *name, bool pure, uint32_t *base, int *mix, uint32_t *ftype) {
    for (size_t i = 0; i < sizeof QTYPES / sizeof QTYPES[0]; i++)
        if (!strcasecmp(name, QTYPES[i].name)) {
            *base = QTYPES[i].base;
            *mix = QTYPES[i].mix != QMIX_PURE ? QTYPES[i].mix : pure ? QMIX_PURE : QMIX_DEFAULT;
            if (ftype) *ftype = QTYPES[i].ftype;
            return 0;
        }
    return -1;
}

const char *quant_type_list(void) {
    return "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_NL IQ4_XS Q4_K_M Q5_K_M TQ1_0 TQ2_0 MXFP4 "
           "IQ3_S IQ3_XXS IQ2_S IQ2_XXS IQ2_XS IQ1_S IQ1_M";
}

/* llama.cpp's use_more_bits: the first and last eighth of layers, and every third in between. */
static bool use_more_bits(int il, int n) { return il < n / 8 || il >= 7 * n / 8 || (il - n / 8) % 3 == 2; }

/* A type whose block fits rows of ne0 elements (llama.cpp's fallbacks for K-quants). */
static uint32_t fit_row(uint32_t type, int64_t ne0) {
    if (ne0 % ht_get_traits(type)->blck == 0) return type;
    switch (type) {
    case HT_Q2_K: case HT_Q3_K: case HT_IQ4_XS: case HT_IQ3_S: case HT_IQ3_XXS: case HT_IQ2_S: case HT_IQ2_XXS: case HT_IQ2_XS:
    case HT_IQ1_S: case HT_IQ1_M:
        type = HT_IQ4_NL;
        break;
    case HT_Q4_K: type = HT_Q5_0; break;
    case HT_Q5_K: type = HT_Q5_1; break;
    case HT_Q6_K: type = HT_Q8_0; break;
    case HT_TQ1_0: case HT_TQ2_0: type = HT_Q4_0; break;
    default: break;
    }
    return ne0 % ht_get_traits(type)->blck == 0 ? type : HT_F16;
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

uint32_t quant_tensor_type(const char *name, int n_dims, int64_t ne0, uint32_t base, int mix, int n_layer,
                           bool has_output) {
    /* vectors, norms, and tables llama.cpp never quantizes (the MoE router, a recurrent layer's conv kernel) */
    if (n_dims < 2 || strstr(name, "_norm.weight") || !ends_with(name, ".weight") || strstr(name, "position_embd") ||
        strstr(name, "token_types") || strstr(name, "rope_freqs") || strstr(name, "ffn_gate_inp") ||
        strstr(name, "ssm_conv1d"))
        return HT_F32;
    /* kept as converted (llama-quantize: AltUp's and LAuReL's small matrices, Gemma 3n's per-layer projection) */
    if (strstr(name, "altup") || strstr(name, "laurel") || strstr(name, "per_layer_model_proj"))
        return ht_get_traits(base)->is_quant ? HT_F16 : fit_row(base, ne0);
    uint32_t t = base;
    /* llama-quantize's token-embedding category holds Gemma 3n / 4's per-layer table too: with a tied output both
     * take the output's type */
    bool head = !strcmp(name, "output.weight") ||
                (!has_output && (!strcmp(name, "token_embd.weight") || !strcmp(name, "per_layer_token_embd.weight")));
    if (mix == QMIX_DEFAULT && head && base != HT_Q8_0 && ht_get_traits(base)->is_quant) t = HT_Q6_K;
    if (mix == QMIX_K_M) {
        int il = -1;
        sscanf(name, "blk.%d.", &il);
        if (head) t = HT_Q6_K;
        else if (strstr(name, "attn_v.weight") && il >= 0 && use_more_bits(il, n_layer)) t = HT_Q6_K;
        else if (strstr(name, "ffn_down") && il >= 0 && use_more_bits(il, n_layer)) t = HT_Q6_K;
        else if (strstr(name, "attn_qkv.weight")) t = base == HT_Q4_K ? HT_Q5_K : HT_Q6_K;
    }
    return fit_row(t, ne0);
}

/* ---- streaming one tensor ---- */
typedef struct {
    const ht_tensor *src;
    uint32_t dst_type;
    int64_t rows;
    int64_t src_rows;        /* rows the source has: the rest are written as zeros (a table padded to the vocabulary) */
    size_t dst_row;
    uint8_t *buf;
    int n_threads;
    int permute_heads;       /* > 0: rotate-half q/k rows -> GGUF's interleaved order, for this many heads */
    /* HF's grouped V heads -> GGUF's tiled order (Qwen3.5 from an HF directory): rows from row_v0 on in blocks
     * of row_blk (0: none), or a row's columns in blocks of col_blk (0: none); vk = v-heads per k-head */
    int64_t row_v0, row_blk, col_blk;
    int k_heads, vk;
    ht_quantize_weighted_fn wq;   /* with an importance matrix: the weighted quantizer, and */
    const float *qw;              /* its weights, ne0 per expert (one matrix: one row of them) */
    bool failed;
    int index, total;        /* for progress reports */
    quant_progress_fn progress;
    void *user;
} qjob;

/* Source row index for output row r (the inverse of the HF->GGUF q/k permutation when asked). */
/* The grouped v-head block that lands at tiled block t: t = j * k_heads + g holds v-head j of k-head g. */
static int64_t grouped_block(const qjob *j, int64_t t) { return t % j->k_heads * j->vk + t / j->k_heads; }

static int64_t source_row(const qjob *j, int64_t r) {
    if (j->row_blk > 0 && r >= j->row_v0) {
        const int64_t t = (r - j->row_v0) / j->row_blk;
        return j->row_v0 + grouped_block(j, t) * j->row_blk + (r - j->row_v0) % j->row_blk;
    }
    if (j->permute_heads <= 0) return r;
    int64_t hd = j->rows / j->permute_heads, h = r / hd, i = r % hd;
    return h * hd + (i % 2) * (hd / 2) + i / 2;
}

static void *quantize_rows(void *arg_) {
    void **arg = arg_;
    qjob *j = arg[0];
    int ith = (int)(intptr_t)arg[1];
    int64_t n = j->src->ne[0];
    const ht_traits *st = ht_get_traits(j->src->type), *dt = ht_get_traits_ref(j->dst_type);
    float *f = malloc((size_t)n * sizeof(float)), *g = malloc((size_t)n * sizeof(float));
    if (!f || !g) { free(f); free(g); j->failed = true; return NULL; }
    for (int64_t r = ith; r < j->rows; r += j->n_threads) {
        uint8_t *d = j->buf + (size_t)r * j->dst_row;
        const bool pad = r >= j->src_rows;
        if (pad) memset(f, 0, (size_t)n * sizeof(float));
        else {
            const uint8_t *s = ht_row(j->src, source_row(j, r));
            if (j->src->type == j->dst_type && !j->col_blk) { memcpy(d, s, j->dst_row); continue; }
            st->to_float(s, f, n);
        }
        if (j->col_blk)
            for (int64_t t = 0; t < n / j->col_blk; t++)
                memcpy(g + t * j->col_blk, f + grouped_block(j, t) * j->col_blk, (size_t)j->col_blk * sizeof(float));
        if (j->qw) j->wq(j->col_blk ? g : f, d, n, j->qw + (pad ? 0 : r / j->src->ne[1]) * n);
        else dt->from_float(j->col_blk ? g : f, d, n);
    }
    free(f);
    free(g);
    return NULL;
}

static int fill_tensor(void *ctx, void *buf, uint64_t nbytes) {
    qjob *j = ctx;
    (void)nbytes;
    if (j->progress) j->progress(j->user, j->index, j->total, j->src->name);
    j->buf = buf;
    pthread_t th[16];
    void *args[16][2];
    int started = 0;
    for (int i = 1; i < j->n_threads; i++) {
        args[i][0] = j; args[i][1] = (void *)(intptr_t)i;
        if (pthread_create(&th[i], NULL, quantize_rows, args[i]) == 0) started = i;
        else { j->n_threads = i; break; }
    }
    args[0][0] = j; args[0][1] = (void *)0;
    quantize_rows(args[0]);
    for (int i = 1; i <= started; i++) pthread_join(th[i], NULL);
    return j->failed ? -1 : 0;
}

int quant_check_paths(const char *in, const char *out, hearth_err *err) {
    struct stat si, so;
    if (stat(out, &so)) return 0;                     /* a new file cannot be the input */
    if (S_ISDIR(so.st_mode)) return herr(err, "%s is a directory; name the output file", out);
    if (stat(in, &si)) return 0;                      /* the load reports it */
    bool same = si.st_dev == so.st_dev && si.st_ino == so.st_ino;
    DIR *d = S_ISDIR(si.st_mode) ? opendir(in) : NULL;
    for (struct dirent *e; d && !same && (e = readdir(d));) {
        char p[4096];
        struct stat sf;
        if (snprintf(p, sizeof p, "%s/%s", in, e->d_name) < (int)sizeof p && !stat(p, &sf))
            same = sf.st_dev == so.st_dev && sf.st_ino == so.st_ino;
    }
    if (d) closedir(d);
    return same ? herr(err, "output %s is the input model; choose another name", out) : 0;
}

/* ---- the whole model ---- */
static bool skip_key(const gguf_str *k) {
    static const char *const SKIP[] = { "general.file_type", "general.quantization_version", "general.alignment" };
    for (size_t i = 0; i < sizeof SKIP / sizeof SKIP[0]; i++)
        if (k->n == strlen(SKIP[i]) && !memcmp(k->p, SKIP[i], k->n)) return true;
    return false;
}

/* A DeltaNet tensor of a model read from an HF directory: where its v-heads are, for source_row / the columns. */
static void retile_v_heads(const hearth_model *m, qjob *j) {
    const ht_hparams *hp = &m->hp;
    const int64_t S = hp->ssm_state, kd = (int64_t)hp->ssm_k_heads * S;
    const char *n = j->src->name;
    j->k_heads = hp->ssm_k_heads;
    j->vk = hp->ssm_v_heads / hp->ssm_k_heads;
    if (ends_with(n, "attn_qkv.weight") || ends_with(n, "ssm_conv1d.weight")) j->row_v0 = 2 * kd, j->row_blk = S;
    else if (ends_with(n, "attn_gate.weight")) j->row_blk = S;
    else if (ends_with(n, "ssm_beta.weight") || ends_with(n, "ssm_alpha.weight")) j->row_blk = 1;
    else if (ends_with(n, "ssm_dt.bias") || ends_with(n, "ssm_a")) j->col_blk = 1;
    else if (ends_with(n, "ssm_out.weight")) j->col_blk = S;
}

/* Types ggml quantizes without looking at an importance matrix. */
static bool ignores_imatrix(uint32_t t) {
    return !ht_get_traits(t)->is_quant || t == HT_Q8_0 || t == HT_TQ1_0 || t == HT_TQ2_0 || t == HT_MXFP4;
}

/* The importance weights of tensor t for type dst (into j), as llama-quantize picks them: the imatrix's entry
 * of t's name, which must have ne0 per expert; token_embd and output, which llama.cpp never requires one for,
 * get uniform weights when a type needs some and the file has none. */
static int pick_weights(ht_imatrix *im, const ht_tensor *t, uint32_t dst, qjob *j, float **uniform, hearth_err *err) {
    const ht_traits *tr = ht_get_traits(dst);
    const bool needs = ht_ref_requires_imatrix(dst), head = !strcmp(t->name, "token_embd.weight") || !strcmp(t->name, "output.weight");
    if (t->type == dst || (!im && !needs)) return 0;
    int64_t n = 0;
    const float *w = im ? imatrix_weights(im, t->name, &n) : NULL;
    if (w && n != t->ne[0] * t->ne[2]) {
        if (!head) return herr(err, "the imatrix has %lld values for %s, which has %lld columns x %lld experts", (long long)n,
                               t->name, (long long)t->ne[0], (long long)t->ne[2]);
        w = NULL;
    }
    if (ignores_imatrix(dst)) return 0;
    if (!w && needs && head) {
        if (!*uniform && !(*uniform = malloc((size_t)(t->ne[0] * t->ne[2]) * sizeof(float)))) return herr(err, "out of memory");
        for (int64_t i = 0; i < t->ne[0] * t->ne[2]; i++) (*uniform)[i] = 1.0f;
        w = *uniform;
    }
    if (!w) return needs ? herr(err, "%s as %s needs an importance matrix (hearth imatrix, then quantize --imatrix FILE)%s",
                                t->name, tr->name, im ? ": the file has no entry for it" : "") : 0;
    if (!(j->wq = ht_ref_quantize_weighted(dst)))
        return herr(err, "quantize --imatrix: weighting %s by an importance matrix is not implemented yet", tr->name);
    j->qw = w;
    return 0;
}

int model_quantize(const hearth_model *m, const char *out, const char *type_name, bool pure, int n_threads,
                   quant_progress_fn progress, void *user, hearth_err *err) {
    return model_quantize_imatrix(m, out, type_name, pure, NULL, n_threads, progress, user, err);
}

int model_quantize_imatrix(const hearth_model *m, const char *out, const char *type_name, bool pure, ht_imatrix *im,
                           int n_threads, quant_progress_fn progress, void *user, hearth_err *err) {
    uint32_t base, ftype;
    int mix;
    if (quant_parse_type(type_name, pure, &base, &mix, &ftype)) return herr(err, "unknown type '%s' (one of: %s)", type_name, quant_type_list());
    if (n_threads < 1) n_threads = 1;
    if (n_threads > 16) n_threads = 16;
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < m->gguf->n_kv; i++)
        if (!skip_key(&m->gguf->kv[i].key)) gguf_w_copy_kv(w, &m->gguf->kv[i]);
    /* an HF directory's tokenizer (tokenizer.json / vocab.txt) becomes GGUF tokenizer metadata; one with no
     * GGUF form is left out (the file then evaluates token ids only, as before) */
    if (!gguf_find(m->gguf, "tokenizer.ggml.model") && m->vocab && vocab_to_gguf(m->vocab, w, err) < 0) {
        gguf_writer_free(w);
        return -1;
    }
    gguf_w_u32(w, "general.quantization_version", 2);
    gguf_w_u32(w, "general.file_type", ftype);
    bool has_output = false;
    for (int i = 0; i < m->n_tensors; i++) has_output |= !strcmp(m->tensors[i].name, "output.weight");
    qjob *jobs = calloc((size_t)m->n_tensors + 1, sizeof *jobs);
    float *uniform[2] = { NULL, NULL };   /* token_embd's and output's, when made */
    if (!jobs) { gguf_writer_free(w); return herr(err, "out of memory"); }
    int nj = 0;
    for (int i = 0; i <= m->n_tensors; i++) {
        /* the model's tensors, plus rope_freqs when it was computed from an HF config */
        const ht_tensor *t = i < m->n_tensors ? &m->tensors[i] : (m->hf_rope_freqs ? &m->rope_freqs : NULL);
        if (!t) break;
        qjob *j = &jobs[nj++];
        j->src = t;
        j->dst_type = quant_tensor_type(t->name, t->n_dims, t->ne[0], base, mix, m->hp.n_layer, has_output);
        j->rows = j->src_rows = t->ne[1] * t->ne[2] * t->ne[3];
        j->dst_row = ht_row_size(j->dst_type, t->ne[0]);
        int64_t ne[4] = { t->ne[0], t->ne[1], t->ne[2], t->ne[3] };
        if (!strcmp(t->name, "per_layer_token_embd.weight") && t->n_dims == 2 && ne[1] < m->hp.n_vocab)
            j->rows = ne[1] = m->hp.n_vocab;   /* Gemma 3n from HF: its text rows, zero-padded as the converter pads them */
        if (pick_weights(im, t, j->dst_type, j, &uniform[strcmp(t->name, "output.weight") == 0], err)) {
            gguf_writer_free(w);
            free(jobs);
            free(uniform[0]), free(uniform[1]);
            return -1;
        }
        j->n_threads = n_threads;
        j->index = nj - 1;
        j->progress = progress;
        j->user = user;
        if (m->qk_rotate_half && ends_with(t->name, "attn_q.weight")) j->permute_heads = m->hp.n_head;
        if (m->qk_rotate_half && ends_with(t->name, "attn_k.weight")) j->permute_heads = m->hp.n_head_kv;
        /* Qwen3.5 from HF: GGUF's qwen35 wants V heads tiled (Qwen3-Next keeps HF's grouped order) */
        if (m->hp.ssm_v_grouped && m->hp.ssm_v_heads > m->hp.ssm_k_heads && strcmp(m->arch->name, "qwen3next")) retile_v_heads(m, j);
        gguf_w_tensor_fill(w, t->name, j->dst_type, t->n_dims, ne, (uint64_t)j->rows * j->dst_row, fill_tensor, j);
    }
    for (int i = 0; i < nj; i++) jobs[i].total = nj;
    int rc = gguf_writer_write(w, out, err);
    if (progress && !rc) progress(user, nj, nj, "");
    gguf_writer_free(w);
    free(jobs);
    free(uniform[0]), free(uniform[1]);
    return rc;
}

/* ---- quantize --lora ---- */
typedef struct { uint32_t base; int mix; bool has_output; } merge_recipe;

static uint32_t merged_type(const hearth_model *m, const ht_tensor *W, void *user) {
    const merge_recipe *r = user;
    const uint32_t t = quant_tensor_type(W->name, W->n_dims, W->ne[0], r->base, r->mix, m->hp.n_layer, r->has_output);
    return t == W->type ? t : (uint32_t)HT_F32;
}

int quant_merge_lora(hearth_model *m, hearth_lora *const *a, const float *scales, int n, const char *type_name, bool pure,
                     int n_threads, size_t *bytes, hearth_err *err) {
    merge_recipe r = { 0 };
    uint32_t ftype;
    if (quant_parse_type(type_name, pure, &r.base, &r.mix, &ftype)) return herr(err, "unknown type '%s' (one of: %s)", type_name, quant_type_list());
    for (int i = 0; i < m->n_tensors; i++) r.has_output |= !strcmp(m->tensors[i].name, "output.weight");
    return lora_merge(m, a, scales, n, n_threads, merged_type, &r, bytes, err);
}
