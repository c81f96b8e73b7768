/* vocab.c — the shared vocabulary: loading from GGUF metadata (tokenizer.ggml.*), the text -> id hash map,
 * special-token handling, and the encode / piece entry points that dispatch to SPM, BPE or WordPiece.
 *
 * Encoding first cuts the input at special-token text (leftmost-longest, as Hugging Face's added-token
 * matcher does; which tokens count is the caller's choice, see tok_encode_mode), then runs each text
 * fragment through the kind's model: SPM on the whole fragment (with the leading-space rule of llama.cpp),
 * BPE / WordPiece after the normalizer and pre-tokenizer pipeline. Defaults (BOS/EOS ids, add_bos, EOG
 * tokens found by text) follow llama.cpp's llama-vocab.cpp so GGUF files behave as the reference engine. */
#include "tok_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

/* ---------------- growable buffers ---------------- */

bool ivec_push(ht_ivec *a, int32_t x) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *p = realloc(a->v, nc * sizeof *p);
        if (!p) return false;
        a->v = p; a->cap = nc;
    }
    a->v[a->n++] = x;
    return true;
}

bool sbuf_reserve(ht_sbuf *b, size_t extra) {
    if (b->n + extra + 1 <= b->cap) return true;
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->n + extra + 1) {
        if (nc > SIZE_MAX / 2) return false;
        nc *= 2;
    }
    char *p = realloc(b->p, nc);
    if (!p) return false;
    b->p = p; b->cap = nc;
    return true;
}

bool sbuf_put(ht_sbuf *b, const void *p, size_t n) {
    if (!sbuf_reserve(b, n)) return false;
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

/* ---------------- GPT-2 byte <-> unicode ---------------- */

/* Bytes 33..126, 161..172 and 174..255 stand for themselves; the other 68 (0..32, 127..160, 173) are
 * numbered in order from U+0100. */
uint32_t bytelevel_cp(uint8_t b) {
    if (b <= 32) return 256u + b;
    if (b >= 127 && b <= 160) return 256u + 33 + (b - 127u);
    if (b == 173) return 256u + 67;
    return b;
}

int bytelevel_byte(uint32_t cp) {
    if (cp < 256) return (cp <= 32 || (cp >= 127 && cp <= 160) || cp == 173) ? -1 : (int)cp;
    uint32_t k = cp - 256;
    if (k < 33) return (int)k;
    if (k < 67) return (int)(127 + k - 33);
    return k == 67 ? 173 : -1;
}

/* ---------------- text -> id map ---------------- */

static int strmap_build(ht_vocab *v) {
    uint64_t cap = 16;
    while (cap < (uint64_t)v->n * 2) cap <<= 1;
    v->map.slots = calloc(cap, sizeof *v->map.slots);
    uint64_t *hs = malloc(((size_t)v->n + 1) * sizeof *hs);
    if (!v->map.slots || !hs) { free(hs); return -1; }
    v->map.mask = cap - 1;
    for (int id = 0; id < v->n; id++) hs[id] = tok_hash(vtext(v, id), v->tlen[id]);
    enum { AHEAD = 16 };
    for (int id = 0; id < v->n; id++) {
        if (id + AHEAD < v->n) __builtin_prefetch(&v->map.slots[hs[id + AHEAD] & v->map.mask], 1);
        const char *t = vtext(v, id);
        uint32_t n = v->tlen[id];
        uint64_t h = hs[id], i = h & v->map.mask;
        uint32_t tag = (uint32_t)(h >> 32);
        for (;;) {
            ht_strslot *s = &v->map.slots[i];
            if (!s->id1) { *s = (ht_strslot){ tag, (uint32_t)id + 1, v->toff[id], n }; break; }
            if (s->tag == tag && s->len == n && !memcmp(v->tbuf + s->off, t, n)) break;   /* duplicate: keep the first */
            i = (i + 1) & v->map.mask;
        }
    }
    free(hs);
    return 0;
}

int32_t vocab_lookup(const ht_vocab *v, const char *s, size_t n) { return vocab_lookup_h(v, s, n, tok_hash(s, n)); }

int32_t vocab_lookup_h(const ht_vocab *v, const char *s, size_t n, uint64_t h) {
    if (!v->map.slots) return -1;
    uint64_t i = h & v->map.mask;
    uint32_t tag = (uint32_t)(h >> 32);
    for (;;) {
        const ht_strslot *e = &v->map.slots[i];
        if (!e->id1) return -1;
        if (e->tag == tag && e->len == n && !memcmp(v->tbuf + e->off, s, n)) return (int32_t)e->id1 - 1;
        i = (i + 1) & v->map.mask;
    }
}

int32_t vocab_find(const ht_vocab *v, const char *text, size_t len) { return vocab_lookup(v, text, len); }

/* ---------------- construction ---------------- */

ht_vocab *vocab_alloc(void) {
    ht_vocab *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->bos = v->eos = v->unk = v->sep = v->pad = v->mask = v->eot = v->eom = -1;
    for (int i = 0; i < 256; i++) v->byte_id[i] = -1;
    v->wpm_max_chars = 100;
    return v;
}

int vocab_set_tokens(ht_vocab *v, int n, const gguf_str *texts, hearth_err *err) {
    uint64_t total = 0;
    for (int i = 0; i < n; i++) total += (texts[i].n ? texts[i].n : 24) + 1;
    if (total > UINT32_MAX) return herr(err, "vocabulary text too large");
    v->n = n;
    v->tbuf = malloc(total ? total : 1);
    v->toff = malloc(((size_t)n + 1) * sizeof(uint32_t));
    v->tlen = malloc(((size_t)n + 1) * sizeof(uint32_t));
    v->score = calloc((size_t)n + 1, sizeof(float));
    v->type = malloc((size_t)n + 1);
    v->flags = calloc((size_t)n + 1, 1);
    if (!v->tbuf || !v->toff || !v->tlen || !v->score || !v->type || !v->flags) return herr(err, "out of memory");
    uint32_t off = 0;
    for (int i = 0; i < n; i++) {
        v->toff[i] = off;
        if (texts[i].n) {
            memcpy(v->tbuf + off, texts[i].p, texts[i].n);
            v->tlen[i] = (uint32_t)texts[i].n;
        } else {   /* as llama.cpp: an empty token gets a placeholder name so it never matches text */
            v->tlen[i] = (uint32_t)snprintf(v->tbuf + off, 24, "[EMPTY_%d]", i);
        }
        off += v->tlen[i];
        v->tbuf[off++] = 0;
        if ((int)v->tlen[i] > v->max_len) v->max_len = (int)v->tlen[i];
        v->type[i] = TT_NORMAL;
    }
    if (strmap_build(v)) return herr(err, "out of memory");
    return 0;
}

bool vocab_add_eog(ht_vocab *v, int32_t id) {
    if (id < 0 || id >= v->n) return false;
    for (int i = 0; i < v->n_eog; i++) if (v->eog[i] == id) return true;
    int32_t *p = realloc(v->eog, (size_t)(v->n_eog + 1) * sizeof *p);
    if (!p) return false;
    v->eog = p;
    v->eog[v->n_eog++] = id;
    return true;
}

static bool vocab_eog_named(const ht_vocab *v, const char *text) {
    int32_t id = vocab_lookup(v, text, strlen(text));
    return id >= 0 && vocab_is_eog(v, id);
}

static void vocab_drop_eog(ht_vocab *v, int32_t id) {
    for (int i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) { v->eog[i] = v->eog[--v->n_eog]; return; }
}

/* Special-token matcher over the ids whose type is in the mask. */
static int32_t trie_node(ht_special *s, uint8_t byte) {
    if (s->n_nodes == s->cap_nodes) {
        int32_t nc = s->cap_nodes ? s->cap_nodes * 2 : 256;
        ht_trie_node *p = realloc(s->nodes, (size_t)nc * sizeof *p);
        if (!p) return -1;
        s->nodes = p; s->cap_nodes = nc;
    }
    s->nodes[s->n_nodes] = (ht_trie_node){ -1, -1, -1, byte };
    return s->n_nodes++;
}

static int special_build(const ht_vocab *v, ht_special *s, unsigned type_mask) {
    memset(s, 0, sizeof *s);
    for (int b = 0; b < 256; b++) s->root[b] = -1;
    for (int id = 0; id < v->n; id++) {
        if (!((type_mask >> v->type[id]) & 1)) continue;
        const uint8_t *t = (const uint8_t *)vtext(v, id);
        uint32_t n = v->tlen[id];
        int32_t node = s->root[t[0]];
        if (node < 0) { if ((node = trie_node(s, t[0])) < 0) return -1; s->root[t[0]] = node; }
        for (uint32_t i = 1; i < n; i++) {
            int32_t c = s->nodes[node].child;
            while (c >= 0 && s->nodes[c].byte != t[i]) c = s->nodes[c].sibling;
            if (c < 0) {
                if ((c = trie_node(s, t[i])) < 0) return -1;
                s->nodes[c].sibling = s->nodes[node].child;
                s->nodes[node].child = c;
            }
            node = c;
        }
        if (s->nodes[node].id < 0) { s->nodes[node].id = id; s->n++; }   /* duplicate text: the first id */
    }
    return 0;
}

/* The longest special token starting at s (n bytes left), or -1. */
static int32_t special_match(const ht_special *sp, const uint8_t *s, size_t n) {
    int32_t node = sp->root[s[0]], best = -1;
    for (size_t i = 1; node >= 0; i++) {
        if (sp->nodes[node].id >= 0) best = sp->nodes[node].id;
        if (i == n) break;
        int32_t c = sp->nodes[node].child;
        while (c >= 0 && sp->nodes[c].byte != s[i]) c = sp->nodes[c].sibling;
        node = c;
    }
    return best;
}

int vocab_finish(ht_vocab *v, hearth_err *err) {
    /* byte tokens */
    for (int b = 0; b < 256; b++) {
        char t[8];
        int32_t id = -1;
        if (v->byte_level) {
            int l = utf8_encode(bytelevel_cp((uint8_t)b), t);
            id = vocab_lookup(v, t, (size_t)l);
        } else {
            snprintf(t, sizeof t, "<0x%02X>", b);
            id = vocab_lookup(v, t, 6);
            if (id < 0 && v->kind == TOK_SPM && b < 0x80) { t[0] = (char)b; id = vocab_lookup(v, t, 1); }
        }
        v->byte_id[b] = id;
        char u[4];
        v->bl[b][0] = (uint8_t)utf8_encode(bytelevel_cp((uint8_t)b), u);
        memcpy(&v->bl[b][1], u, 2);
    }
    /* end-of-generation tokens, found by text as llama.cpp does; they become control tokens */
#define DEEPSEEK_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"   /* <｜end▁of▁sentence｜> */
    static const char *const eot_names[] = { "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
        "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", DEEPSEEK_EOS, "<end_of_utterance>", NULL };
    static const char *const eog_names[] = { "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
        "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]",
        "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<|EOT|>", "<eos>", DEEPSEEK_EOS, "</s>", "<turn|>",
        "<|tool_response>", "[e~[", "<|fim_pad|>", "<|fim_repo|>", "<|repo_name|>", "<|file_sep|>", NULL };
    if (v->eot < 0)
        for (int i = 0; eot_names[i] && v->eot < 0; i++) v->eot = vocab_lookup(v, eot_names[i], strlen(eot_names[i]));
    if (v->eom < 0) v->eom = vocab_lookup(v, "<|eom_id|>", 10);
    for (int i = 0; eog_names[i]; i++) {
        int32_t id = vocab_lookup(v, eog_names[i], strlen(eog_names[i]));
        if (id >= 0) {
            if (!vocab_add_eog(v, id)) return herr(err, "out of memory");
            if (v->type[id] != TT_CONTROL && v->type[id] != TT_UNKNOWN) v->type[id] = TT_CONTROL;
        }
    }
    int32_t extra[3] = { v->eos, v->eot, v->eom };
    for (int i = 0; i < 3; i++) if (extra[i] >= 0 && !vocab_add_eog(v, extra[i])) return herr(err, "out of memory");
    /* Harmony (gpt-oss) and Solar Open: a reply's messages are separated by <|end|>, so it ends a message, not the
     * reply (that is <|return|> or <|call|>), and the message framing is text a reply parser reads (llama.cpp
     * makes the same exceptions). Gemma 4: </s> is ordinary text there. */
    int32_t end = vocab_lookup(v, "<|end|>", 7);
    if (end >= 0 && vocab_is_eog(v, end) &&
        ((vocab_eog_named(v, "<|return|>") && vocab_eog_named(v, "<|call|>")) ||
         (vocab_eog_named(v, "<|calls|>") && vocab_eog_named(v, "<|flush|>")))) {
        vocab_drop_eog(v, end);
        v->type[end] = TT_USER_DEFINED;
        static const char *const shown[] = { "<|channel|>", "<|message|>", "<|start|>", "<|constrain|>" };
        for (int i = 0; i < 4; i++) {
            int32_t id = vocab_lookup(v, shown[i], strlen(shown[i]));
            if (id >= 0) v->type[id] = TT_USER_DEFINED;
        }
    }
    int32_t s_end = vocab_lookup(v, "</s>", 4);
    if (s_end >= 0 && vocab_is_eog(v, s_end) && vocab_eog_named(v, "<|tool_response>")) {
        vocab_drop_eog(v, s_end);
        v->type[s_end] = TT_NORMAL;
    }
    /* SPM: may text be cut before a "▁" that follows another character? Not if a token that merges can produce
     * contains such a "▁". */
    v->spm_word_split = v->kind == TOK_SPM;
    for (int id = 0; id < v->n && v->spm_word_split; id++) {
        if (v->type[id] == TT_CONTROL || v->type[id] == TT_UNKNOWN || v->type[id] == TT_BYTE) continue;
        const char *t = vtext(v, id);
        for (uint32_t i = 1; i + 3 <= v->tlen[id] && v->spm_word_split; i++)
            if (!memcmp(t + i, "\xe2\x96\x81", 3) && !(i >= 3 && !memcmp(t + i - 3, "\xe2\x96\x81", 3)))
                v->spm_word_split = false;
    }
    /* special text matchers: all specials (TOK_SPECIAL_ALL) / user-defined only (TOK_SPECIAL_USER) */
    unsigned all = 1u << TT_CONTROL | 1u << TT_USER_DEFINED | 1u << TT_UNKNOWN;
    if (special_build(v, &v->sp_all, all) || special_build(v, &v->sp_user, 1u << TT_USER_DEFINED))
        return herr(err, "out of memory");
    return 0;
}

void vocab_free(ht_vocab *v) {
    if (!v) return;
    free(v->tbuf); free(v->toff); free(v->tlen); free(v->score); free(v->type); free(v->flags);
    free(v->map.slots); free(v->eog);
    free(v->sp_all.nodes); free(v->sp_user.nodes);
    free(v->merges.slots);
    free(v->cont_prefix); free(v->word_suffix);
    pipe_free(&v->pipe);
    free(v);
}

/* ---------------- loading from GGUF ---------------- */

static uint64_t le64(const uint8_t *p) {
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = x << 8 | p[i];
    return x;
}

static bool gstr_eq(gguf_str s, const char *lit) { return s.n == strlen(lit) && !memcmp(s.p, lit, s.n); }

static void get_id(const gguf_file *f, const char *key, int32_t *id, int n) {
    int64_t x;
    if (gguf_get_i64(f, key, &x) && x >= 0 && x < n) *id = (int32_t)x;
    if (*id >= n) *id = -1;
}

/* Gemma 4's tokenizer (GGUF model "gemma4", as llama.cpp reads it): BPE over raw UTF-8 with <0xNN> byte
 * fallback, spaces replaced by "▁" first (no prefix space), the text cut only into runs of newlines and runs of
 * anything else; a run of newlines that is a token stays whole. Always a BOS. */
static int gemma4_setup(ht_vocab *v, hearth_err *err) {
    v->byte_fallback = true;
    v->newline_runs_whole = true;
    v->dec = DEC_SPM;
    v->add_bos = true;
    v->add_space_prefix = false;
    v->pipe.norm = calloc(1, sizeof(ht_norm));
    v->pipe.pre = calloc(1, sizeof(ht_pre));
    if (!v->pipe.norm || !v->pipe.pre) return herr(err, "out of memory");
    ht_norm *nm = &v->pipe.norm[0];
    v->pipe.n_norm = 1;
    *nm = (ht_norm){ .type = NS_REPLACE, .a = strdup(" "), .b = strdup("\xe2\x96\x81"), .alen = 1, .blen = 3 };
    if (!nm->a || !nm->b) return herr(err, "out of memory");
    static const char re[] = "[^\\n]+|[\\n]+";
    v->pipe.pre[0] = (ht_pre){ .type = PS_SPLIT, .behavior = SB_ISOLATED };
    if (!(v->pipe.pre[0].re = regex_compile(re, strlen(re), err))) return -1;
    v->pipe.n_pre = 1;
    return 0;
}

int vocab_from_gguf(const gguf_file *f, ht_vocab **out, hearth_err *err) {
    *out = NULL;
    gguf_str model;
    if (!gguf_get_str(f, "tokenizer.ggml.model", &model))
        return herr(err, "no tokenizer in model (tokenizer.ggml.model missing)");
    int kind;
    if (gstr_eq(model, "llama")) kind = TOK_SPM;
    else if (gstr_eq(model, "gpt2")) kind = TOK_BPE;
    else if (gstr_eq(model, "bert")) kind = TOK_WPM;
    else if (gstr_eq(model, "gemma4")) kind = TOK_BPE;   /* SentencePiece-style BPE: set up below */
    else return herr(err, "unsupported tokenizer model '%.*s'", (int)HT_MIN(model.n, 64), model.p);

    const gguf_kv *tk = gguf_find(f, "tokenizer.ggml.tokens");
    if (!tk || tk->type != GGUF_ARR || tk->arr_type != GGUF_STR)
        return herr(err, "tokenizer.ggml.tokens missing or not a string array");
    if (tk->arr_n == 0 || tk->arr_n > INT32_MAX / 2)
        return herr(err, "bad vocabulary size %llu", (unsigned long long)tk->arr_n);
    int n = (int)tk->arr_n;

    ht_vocab *v = vocab_alloc();
    gguf_str *texts = malloc((size_t)n * sizeof *texts);
    if (!v || !texts) { free(texts); vocab_free(v); return herr(err, "out of memory"); }
    v->kind = kind;
    gguf_arr_strs(tk, texts);
    int rc = vocab_set_tokens(v, n, texts, err);
    free(texts);
    if (rc) { vocab_free(v); return -1; }

    const gguf_kv *sc = gguf_find(f, "tokenizer.ggml.scores");
    if (sc && sc->type == GGUF_ARR && sc->arr_n >= (uint64_t)n) {
        if (sc->arr_type == GGUF_F32) memcpy(v->score, sc->arr_data, (size_t)n * sizeof(float));
        else if (sc->arr_type == GGUF_I32 || sc->arr_type == GGUF_F64 || sc->arr_type == GGUF_I64)
            for (int i = 0; i < n; i++) {   /* a double beyond float's range would be undefined to convert */
                const double x = gguf_arr_num(sc, (uint64_t)i);
                v->score[i] = x != x ? 0.0f : (float)(x > 3e38 ? 3e38 : x < -3e38 ? -3e38 : x);
            }
    }
    const gguf_kv *ty = gguf_find(f, "tokenizer.ggml.token_type");
    if (ty && ty->type == GGUF_ARR && ty->arr_n >= (uint64_t)n && ty->arr_type != GGUF_STR && ty->arr_type != GGUF_ARR) {
        for (int i = 0; i < n; i++) {
            int64_t t;
            if (ty->arr_type == GGUF_I32) { int32_t x; memcpy(&x, ty->arr_data + 4 * (size_t)i, 4); t = x; }
            else if (!gguf_arr_int(ty, (uint64_t)i, INT32_MIN, INT32_MAX, &t)) t = TT_NORMAL;
            v->type[i] = (t >= TT_NORMAL && t <= TT_BYTE) ? (uint8_t)t : TT_NORMAL;
        }
    }

    gguf_str pre = { "", 0 };
    gguf_get_str(f, "tokenizer.ggml.pre", &pre);
    snprintf(v->pre_name, sizeof v->pre_name, "%.*s", (int)HT_MIN(pre.n, 63), pre.p);

    if (kind == TOK_SPM) {
        v->bos = 1; v->eos = 2; v->unk = 0;
        v->add_bos = true; v->add_space_prefix = true;
        v->dec = DEC_SPM;
    } else if (kind == TOK_WPM) {
        v->bos = 101; v->unk = 100; v->sep = 102; v->pad = 0; v->mask = 103;
        v->add_bos = true; v->add_sep = true;
        v->dec = DEC_WPM_GGUF;
        v->wpm_start = "\xe2\x96\x81"; v->wpm_cont = "";
        get_id(f, "tokenizer.ggml.cls_token_id", &v->bos, n);
        bool lower = true, strip;
        gguf_get_bool(f, "tokenizer.ggml.normalizer.lowercase", &lower);
        strip = lower;
        gguf_get_bool(f, "tokenizer.ggml.normalizer.strip_accents", &strip);
        v->pipe.norm = calloc(1, sizeof(ht_norm));
        v->pipe.pre = calloc(1, sizeof(ht_pre));
        if (!v->pipe.norm || !v->pipe.pre) { vocab_free(v); return herr(err, "out of memory"); }
        v->pipe.norm[0] = (ht_norm){ .type = NS_BERT, .clean = true, .chinese = true, .strip_accents = strip, .lower = lower };
        v->pipe.n_norm = 1;
        v->pipe.pre[0] = (ht_pre){ .type = PS_BERT };
        v->pipe.n_pre = 1;
    } else {
        if (gstr_eq(model, "gemma4") ? gemma4_setup(v, err) : (v->byte_level = true, v->dec = DEC_BYTELEVEL,
                                                               bpe_setup_pre(v, pre.p, pre.n, err))) {
            vocab_free(v);
            return -1;
        }
        const gguf_kv *mk = gguf_find(f, "tokenizer.ggml.merges");
        if (!mk || mk->type != GGUF_ARR || mk->arr_type != GGUF_STR) {
            vocab_free(v);
            return herr(err, "tokenizer.ggml.merges missing or not a string array");
        }
        if (mk->arr_n > INT32_MAX / 2) { vocab_free(v); return herr(err, "too many merges"); }
        bpe_merge_in *in = malloc((mk->arr_n ? mk->arr_n : 1) * sizeof *in);
        if (!in || pairmap_init(&v->merges, mk->arr_n)) { free(in); vocab_free(v); return herr(err, "out of memory"); }
        const uint8_t *q = mk->arr_data;   /* u64 length + bytes, validated by gguf_open */
        for (uint64_t i = 0; i < mk->arr_n; i++) {
            const char *s = (const char *)q + 8;
            size_t len = (size_t)le64(q), sp = 1;
            q += 8 + len;
            while (sp < len && s[sp] != ' ') sp++;   /* as llama.cpp: the first space after position 0 */
            if (sp >= len) in[i] = (bpe_merge_in){ "", "", 0, 0 };   /* malformed: never matches */
            else in[i] = (bpe_merge_in){ s, s + sp + 1, sp, len - sp - 1 };
        }
        rc = bpe_add_merges(v, in, mk->arr_n);
        free(in);
        if (rc) { vocab_free(v); return herr(err, "out of memory"); }
    }
    get_id(f, "tokenizer.ggml.bos_token_id", &v->bos, n);
    get_id(f, "tokenizer.ggml.eos_token_id", &v->eos, n);
    get_id(f, "tokenizer.ggml.eot_token_id", &v->eot, n);
    get_id(f, "tokenizer.ggml.eom_token_id", &v->eom, n);
    get_id(f, "tokenizer.ggml.unknown_token_id", &v->unk, n);
    get_id(f, "tokenizer.ggml.seperator_token_id", &v->sep, n);
    get_id(f, "tokenizer.ggml.padding_token_id", &v->pad, n);
    get_id(f, "tokenizer.ggml.mask_token_id", &v->mask, n);
    gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &v->add_bos);
    gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &v->add_eos);
    gguf_get_bool(f, "tokenizer.ggml.add_sep_token", &v->add_sep);
    gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix);
    if (gstr_eq(model, "gemma4")) v->add_bos = true;   /* as llama.cpp, whatever add_bos_token says */
    if (v->add_bos && v->bos < 0) v->add_bos = false;
    if (v->add_eos && v->eos < 0) v->add_eos = false;
    int32_t fim[3] = { -1, -1, -1 };
    get_id(f, "tokenizer.ggml.fim_pad_token_id", &fim[0], n);
    get_id(f, "tokenizer.ggml.fim_rep_token_id", &fim[1], n);
    get_id(f, "tokenizer.ggml.fim_sep_token_id", &fim[2], n);
    for (int i = 0; i < 3; i++) if (fim[i] >= 0) vocab_add_eog(v, fim[i]);

    if (vocab_finish(v, err)) { vocab_free(v); return -1; }

    /* per-model token attributes llama.cpp sets by name */
    gguf_str name = { "", 0 };
    gguf_get_str(f, "general.name", &name);
    char lname[128];
    size_t ln = HT_MIN(name.n, sizeof lname - 1);
    for (size_t i = 0; i < ln; i++) lname[i] = (char)tolower((unsigned char)name.p[i]);
    lname[ln] = 0;
    if (strstr(v->pre_name, "jina-v2-de") || strstr(v->pre_name, "jina-v2-es") || strstr(v->pre_name, "jina-v2-code")) {
        int32_t m = vocab_lookup(v, "<mask>", 6);
        if (m >= 0) v->flags[m] |= TF_LSTRIP;
    } else if (strstr(lname, "phi-3") || strstr(lname, "phi3")) {
        for (int id = 0; id < n; id++)
            if (v->type[id] == TT_CONTROL || v->type[id] == TT_USER_DEFINED || v->type[id] == TT_UNKNOWN)
                v->flags[id] |= TF_RSTRIP;
        int32_t s = vocab_lookup(v, "</s>", 4);
        if (s >= 0) v->flags[s] |= TF_RSTRIP;
        static const char *const keep[] = { "<unk>", "<s>", "<|endoftext|>" };
        for (int i = 0; i < 3; i++) {
            int32_t k = vocab_lookup(v, keep[i], strlen(keep[i]));
            if (k >= 0) v->flags[k] &= (uint8_t)~TF_RSTRIP;
        }
    }
    *out = v;
    return 0;
}

/* ---------------- accessors ---------------- */

int vocab_size(const ht_vocab *v) { return v->n; }
int vocab_kind(const ht_vocab *v) { return v->kind; }
int32_t vocab_bos(const ht_vocab *v) { return v->bos; }
int32_t vocab_eos(const ht_vocab *v) { return v->eos; }
int32_t vocab_unk(const ht_vocab *v) { return v->unk; }
int32_t vocab_sep(const ht_vocab *v) { return v->sep; }
int32_t vocab_pad(const ht_vocab *v) { return v->pad; }
int32_t vocab_mask(const ht_vocab *v) { return v->mask; }
int32_t vocab_eot(const ht_vocab *v) { return v->eot; }
bool vocab_add_bos(const ht_vocab *v) { return v->add_bos; }
bool vocab_add_eos(const ht_vocab *v) { return v->add_eos; }
bool vocab_is_eog(const ht_vocab *v, int32_t id) {
    for (int i = 0; i < v->n_eog; i++) if (v->eog[i] == id) return true;
    return false;
}
int vocab_token_type(const ht_vocab *v, int32_t id) { return (id >= 0 && id < v->n) ? v->type[id] : 0; }
float vocab_score(const ht_vocab *v, int32_t id) { return (id >= 0 && id < v->n) ? v->score[id] : 0.0f; }
gguf_str vocab_text(const ht_vocab *v, int32_t id) {
    gguf_str s = { "", 0 };
    if (id >= 0 && id < v->n) { s.p = vtext(v, id); s.n = v->tlen[id]; }
    return s;
}
const char *vocab_pre_name(const ht_vocab *v) { return v->pre_name; }

/* ---------------- encoding ---------------- */

typedef struct { int32_t id; size_t off, len; } frag;   /* id >= 0: special token; else text [off, off+len) */
typedef struct { frag *v; size_t n, cap; } frags;

static bool frag_push(frags *a, int32_t id, size_t off, size_t len) {
    if (id < 0 && len == 0) return true;
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 16;
        frag *p = realloc(a->v, nc * sizeof *p);
        if (!p) return false;
        a->v = p; a->cap = nc;
    }
    a->v[a->n++] = (frag){ id, off, len };
    return true;
}

static bool is_space_byte(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Cuts text at special-token text: leftmost match, longest token first at a position. */
static int partition(const ht_vocab *v, const char *text, size_t len, int special, frags *out) {
    const ht_special *sp = special == TOK_SPECIAL_ALL ? &v->sp_all : &v->sp_user;
    const uint8_t *s = (const uint8_t *)text;
    size_t start = 0, i = 0;
    if (sp->n == 0 || special == TOK_SPECIAL_NONE) return frag_push(out, -1, 0, len) ? 0 : -1;
    while (i < len) {
        int32_t id = special_match(sp, s + i, len - i);
        if (id < 0) { i++; continue; }
        size_t l = i - start;
        if (v->flags[id] & TF_LSTRIP) while (l > 0 && is_space_byte(s[start + l - 1])) l--;
        if (!frag_push(out, -1, start, l) || !frag_push(out, id, i, v->tlen[id])) return -1;
        i += v->tlen[id];
        if (v->flags[id] & TF_RSTRIP) while (i < len && is_space_byte(s[i])) i++;
        start = i;
    }
    return frag_push(out, -1, start, len - start) ? 0 : -1;
}

/* SPM: the fragment gets a leading space when it follows BOS/a special token (llama.cpp), spaces -> U+2581. */
static int encode_spm_fragment(const ht_vocab *v, const char *s, size_t n, bool prefix_space, tok_ws *ws, ht_ivec *out) {
    ht_sbuf *tmp = &ws->buf;
    tmp->n = 0;
    if (!sbuf_reserve(tmp, n * 3 + 3)) return -1;
    char *w = tmp->p;
    if (prefix_space) { memcpy(w, "\xe2\x96\x81", 3); w += 3; }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') { memcpy(w, "\xe2\x96\x81", 3); w += 3; }
        else *w++ = s[i];
    }
    tmp->n = (size_t)(w - tmp->p);
    return spm_encode(v, tmp->p, tmp->n, ws, out);
}

static int encode_piped_fragment(const ht_vocab *v, const char *s, size_t n, bool is_first, tok_ws *ws,
                                 ht_ivec *out, hearth_err *err) {
    int rc = pipe_normalize(&v->pipe, s, n, ws);
    if (rc == -2) return herr(err, "the tokenizer's normalizers grow the text more than %dx (a malformed tokenizer.json?)",
                              NORM_MAX_GROWTH);
    if (rc) return herr(err, "out of memory");
    if (pipe_pretokenize(&v->pipe, is_first, ws, err)) return -1;
    for (size_t i = 0; i < ws->spans.n; i++) {
        const char *p = ws->buf.p + ws->spans.v[i].off;
        size_t l = ws->spans.v[i].len;
        if (!l) continue;
        int rc = v->kind == TOK_WPM ? wpm_encode_piece(v, p, l, ws, out) : bpe_encode_piece(v, p, l, ws, out);
        if (rc) return herr(err, "out of memory");
    }
    return 0;
}

int tok_encode(const ht_vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
               int32_t **out, int *n_out, hearth_err *err) {
    return tok_encode_mode(v, text, len, add_special, parse_special ? TOK_SPECIAL_ALL : TOK_SPECIAL_USER, out, n_out, err);
}

int tok_encode_mode(const ht_vocab *v, const char *text, size_t len, bool add_special, int special,
                    int32_t **out, int *n_out, hearth_err *err) {
    *out = NULL; *n_out = 0;
    if (!text) len = 0;
    if (len > (size_t)INT32_MAX) return herr(err, "text too long to tokenize (%zu bytes)", len);
    ht_ivec ids = {0};
    frags fr = {0};
    tok_ws ws = {0};
    int rc = 0;
    if (add_special) {
        if ((v->kind == TOK_WPM ? v->bos >= 0 : (v->add_bos && v->bos >= 0)) && !ivec_push(&ids, v->bos))
            rc = herr(err, "out of memory");
    }
    if (len && !rc && partition(v, text, len, special, &fr)) rc = herr(err, "out of memory");
    bool prev_special = true;
    for (size_t i = 0; i < fr.n && !rc; i++) {
        const frag *f = &fr.v[i];
        if (f->id >= 0) {
            if (!ivec_push(&ids, f->id)) rc = herr(err, "out of memory");
            prev_special = true;
            continue;
        }
        if (v->kind == TOK_SPM) {
            if (encode_spm_fragment(v, text + f->off, f->len, v->add_space_prefix && prev_special, &ws, &ids))
                rc = herr(err, "out of memory");
        } else {
            rc = encode_piped_fragment(v, text + f->off, f->len, f->off == 0, &ws, &ids, err);
        }
        prev_special = false;
    }
    if (add_special && !rc) {
        if (v->kind == TOK_WPM) { if (v->sep >= 0) rc |= !ivec_push(&ids, v->sep); }
        else if (v->add_eos && v->eos >= 0) rc |= !ivec_push(&ids, v->eos);
        if (rc) herr(err, "out of memory");
    }
    free(fr.v);
    ws_free(&ws);
    if (rc) { free(ids.v); return -1; }
    if (ids.n > (size_t)INT32_MAX) { free(ids.v); return herr(err, "too many tokens"); }
    if (!ids.v) { ids.v = malloc(sizeof(int32_t)); if (!ids.v) return herr(err, "out of memory"); }
    *out = ids.v;
    *n_out = (int)ids.n;
    return 0;
}

/* ---------------- pieces ---------------- */

static int put(char *buf, int cap, int at, const void *p, size_t n) {
    if (at < cap) memcpy(buf + at, p, (size_t)HT_MIN((size_t)(cap - at), n));
    return at + (int)n;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* "<0xNN>" -> byte value, or -1. */
static int byte_token_value(const char *t, uint32_t n) {
    if (n != 6 || memcmp(t, "<0x", 3) || t[5] != '>') return -1;
    int h = hexval(t[3]), l = hexval(t[4]);
    return (h < 0 || l < 0) ? -1 : h * 16 + l;
}

/* Copies text with every U+2581 turned into a space. */
static int put_unescaped(char *buf, int cap, int at, const char *t, size_t n) {
    size_t i = 0, run = 0;
    while (i < n) {
        if (i + 3 <= n && !memcmp(t + i, "\xe2\x96\x81", 3)) {
            at = put(buf, cap, at, t + run, i - run);
            at = put(buf, cap, at, " ", 1);
            i += 3; run = i;
        } else i++;
    }
    return put(buf, cap, at, t + run, n - run);
}

int tok_piece(const ht_vocab *v, int32_t id, bool show_special, char *buf, int cap) {
    if (id < 0 || id >= v->n) return 0;
    if (cap < 0) cap = 0;
    const char *t = vtext(v, id);
    uint32_t n = v->tlen[id];
    int ty = v->type[id];
    if (ty == TT_CONTROL || ty == TT_UNKNOWN) return show_special ? put(buf, cap, 0, t, n) : 0;
    if (ty == TT_USER_DEFINED) return put(buf, cap, 0, t, n);
    if (ty == TT_BYTE) {
        int b = byte_token_value(t, n);
        if (b >= 0) { char c = (char)b; return put(buf, cap, 0, &c, 1); }
        return put(buf, cap, 0, t, n);
    }
    if (ty == TT_UNUSED) return 0;
    switch (v->dec) {
    case DEC_SPM: case DEC_WPM_GGUF: case DEC_METASPACE: {
        int b = v->byte_fallback ? byte_token_value(t, n) : -1;
        if (b >= 0) { char c = (char)b; return put(buf, cap, 0, &c, 1); }
        return put_unescaped(buf, cap, 0, t, n);
    }
    case DEC_BYTELEVEL: {
        int at = 0;
        const uint8_t *s = (const uint8_t *)t;
        for (uint32_t i = 0; i < n;) {
            uint32_t cp;
            int l = utf8_decode(s + i, n - i, &cp);
            int b = bytelevel_byte(cp);
            if (b >= 0) { char c = (char)b; at = put(buf, cap, at, &c, 1); }
            else at = put(buf, cap, at, t + i, (size_t)l);
            i += (uint32_t)l;
        }
        return at;
    }
    case DEC_WPM_HF: {
        /* a WordPiece decoder over another model (fuzzing found one) has no model prefix: HF's default */
        const char *cont = v->wpm_cont ? v->wpm_cont : "##";
        size_t cl = strlen(cont);
        if (cl && n >= cl && !memcmp(t, cont, cl)) return put(buf, cap, 0, t + cl, n - cl);
        int at = put(buf, cap, 0, " ", 1);
        return put(buf, cap, at, t, n);
    }
    default:
        return put(buf, cap, 0, t, n);
    }
}
