/* tokjson.c — loaders for Hugging Face tokenizer files: tokenizer.json (via cJSON) and BERT's vocab.txt.
 *
 * tokenizer.json: the model's vocab (token -> id) and added_tokens (special ones become control tokens,
 * the others user-defined, both with lstrip/rstrip) form the id space; BPE merges ("a b" strings or
 * [a, b] pairs) become the (id, id) -> (rank, id) map; the normalizer and pre_tokenizer trees (Sequence
 * flattened) become pipeline steps; the decoder picks how tok_piece renders a token. Special ids and
 * add_bos/add_eos come from a tokenizer_config.json next to the file when present, else from the
 * post_processor (TemplateProcessing / BertProcessing / RobertaProcessing).
 * Supported models: BPE (byte-level or not, byte_fallback, ignore_merges, affixes, unk/fuse_unk) and
 * WordPiece; anything else is an error. */
#include "tok_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static const char *jstr(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(x) ? x->valuestring : NULL;
}

static bool jbool(const cJSON *o, const char *key, bool dflt) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(x) ? cJSON_IsTrue(x) : dflt;
}

/* A special-token field of tokenizer_config.json: "text" or {"content": "text"}. */
static const char *jtoken(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsString(x)) return x->valuestring;
    if (cJSON_IsObject(x)) return jstr(x, "content");
    return NULL;
}

static int32_t lookup_cstr(const ht_vocab *v, const char *s) { return s ? vocab_lookup(v, s, strlen(s)) : -1; }

static int behavior_of(const char *b) {
    if (!b) return SB_ISOLATED;
    if (!strcmp(b, "Removed")) return SB_REMOVED;
    if (!strcmp(b, "MergedWithPrevious")) return SB_MERGED_PREV;
    if (!strcmp(b, "MergedWithNext")) return SB_MERGED_NEXT;
    if (!strcmp(b, "Contiguous")) return SB_CONTIGUOUS;
    return SB_ISOLATED;
}

/* {"String": s} or {"Regex": r} -> compiled regex. */
static pcre2_code *pattern_of(const cJSON *pat, hearth_err *err) {
    const char *s = jstr(pat, "String"), *r = jstr(pat, "Regex");
    if (s) return regex_compile_literal(s, strlen(s), err);
    if (r) return regex_compile(r, strlen(r), err);
    herr(err, "tokenizer.json: pattern without String or Regex");
    return NULL;
}

/* ---------------- normalizers ---------------- */

static ht_norm *add_norm(ht_pipeline *p) {
    ht_norm *n = realloc(p->norm, (size_t)(p->n_norm + 1) * sizeof *n);
    if (!n) return NULL;
    p->norm = n;
    memset(&n[p->n_norm], 0, sizeof *n);
    return &n[p->n_norm++];
}

static char *dup_str(const char *s, size_t *len) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    *len = n;
    return d;
}

static int parse_normalizer(const cJSON *j, ht_vocab *v, hearth_err *err) {
    if (!j || cJSON_IsNull(j)) return 0;
    const char *type = jstr(j, "type");
    if (!type) return herr(err, "tokenizer.json: normalizer without type");
    if (!strcmp(type, "Sequence")) {
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(j, "normalizers"))
            if (parse_normalizer(x, v, err)) return -1;
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) { v->byte_level = true; return 0; }
    ht_norm *n = add_norm(&v->pipe);
    if (!n) return herr(err, "out of memory");
    if (!strcmp(type, "NFC")) n->type = NS_NFC;
    else if (!strcmp(type, "NFD")) n->type = NS_NFD;
    else if (!strcmp(type, "NFKC") || !strcmp(type, "Precompiled")) n->type = NS_NFKC;   /* Precompiled: NFKC approximation */
    else if (!strcmp(type, "NFKD")) n->type = NS_NFKD;
    else if (!strcmp(type, "Lowercase")) n->type = NS_LOWER;
    else if (!strcmp(type, "StripAccents")) n->type = NS_STRIP_ACCENTS;
    else if (!strcmp(type, "Strip")) {
        n->type = NS_STRIP;
        n->left = jbool(j, "strip_left", true);
        n->right = jbool(j, "strip_right", true);
    } else if (!strcmp(type, "Prepend")) {
        const char *s = jstr(j, "prepend");
        n->type = NS_PREPEND;
        if (!(n->a = dup_str(s ? s : "", &n->alen))) return herr(err, "out of memory");
    } else if (!strcmp(type, "Replace")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        const char *content = jstr(j, "content"), *lit = jstr(pat, "String"), *re = jstr(pat, "Regex");
        n->type = NS_REPLACE;
        if (!(n->b = dup_str(content ? content : "", &n->blen))) return herr(err, "out of memory");
        if (lit) { if (!(n->a = dup_str(lit, &n->alen))) return herr(err, "out of memory"); }
        else if (re) { if (!(n->re = regex_compile(re, strlen(re), err))) return -1; }
        else return herr(err, "tokenizer.json: Replace normalizer without pattern");
    } else if (!strcmp(type, "BertNormalizer")) {
        n->type = NS_BERT;
        n->clean = jbool(j, "clean_text", true);
        n->chinese = jbool(j, "handle_chinese_chars", true);
        n->lower = jbool(j, "lowercase", true);
        n->strip_accents = jbool(j, "strip_accents", n->lower);
    } else return herr(err, "tokenizer.json: unsupported normalizer '%s'", type);
    return 0;
}

/* ---------------- pre-tokenizers ---------------- */

static ht_pre *add_pre(ht_pipeline *p) {
    ht_pre *n = realloc(p->pre, (size_t)(p->n_pre + 1) * sizeof *n);
    if (!n) return NULL;
    p->pre = n;
    memset(&n[p->n_pre], 0, sizeof *n);
    return &n[p->n_pre++];
}

static int parse_pretokenizer(const cJSON *j, ht_vocab *v, hearth_err *err) {
    if (!j || cJSON_IsNull(j)) return 0;
    const char *type = jstr(j, "type");
    if (!type) return herr(err, "tokenizer.json: pre_tokenizer without type");
    if (!strcmp(type, "Sequence")) {
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(j, "pretokenizers"))
            if (parse_pretokenizer(x, v, err)) return -1;
        return 0;
    }
    ht_pre *p = add_pre(&v->pipe);
    if (!p) return herr(err, "out of memory");
    if (!strcmp(type, "Split")) {
        p->type = PS_SPLIT;
        p->behavior = behavior_of(jstr(j, "behavior"));
        p->invert = jbool(j, "invert", false);
        if (!(p->re = pattern_of(cJSON_GetObjectItemCaseSensitive(j, "pattern"), err))) return -1;
    } else if (!strcmp(type, "ByteLevel")) {
        v->byte_level = true;
        if (pre_bytelevel(p, jbool(j, "add_prefix_space", true), jbool(j, "use_regex", true), err)) return -1;
    } else if (!strcmp(type, "Metaspace")) {
        const char *r = jstr(j, "replacement"), *scheme = jstr(j, "prepend_scheme");
        p->type = PS_METASPACE;
        if (!r || strlen(r) > 4) r = "\xe2\x96\x81";
        p->repl_len = (int)strlen(r);
        memcpy(p->repl, r, (size_t)p->repl_len);
        if (scheme) p->prepend_scheme = !strcmp(scheme, "first") ? MS_FIRST : !strcmp(scheme, "never") ? MS_NEVER : MS_ALWAYS;
        else p->prepend_scheme = jbool(j, "add_prefix_space", true) ? MS_ALWAYS : MS_NEVER;
        p->split = jbool(j, "split", true);
    } else if (!strcmp(type, "BertPreTokenizer")) p->type = PS_BERT;
    else if (!strcmp(type, "WhitespaceSplit")) p->type = PS_WSSPLIT;
    else if (!strcmp(type, "Whitespace")) {
        p->type = PS_WHITESPACE;
        /* \w+|[^\w\s]+ with Oniguruma's Unicode \w (letters, marks, decimal digits, connectors) */
        static const char W[] = "[\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}]+|[^\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\s]+";
        if (!(p->re = regex_compile(W, sizeof W - 1, err))) return -1;
    } else if (!strcmp(type, "Digits")) {
        p->type = PS_DIGITS;
        p->individual = jbool(j, "individual_digits", false);
    } else if (!strcmp(type, "Punctuation")) {
        p->type = PS_PUNCT;
        p->behavior = behavior_of(jstr(j, "behavior"));
    } else if (!strcmp(type, "CharDelimiterSplit")) {
        const char *d = jstr(j, "delimiter");
        p->type = PS_SPLIT;
        p->behavior = SB_REMOVED;
        if (!d) return herr(err, "tokenizer.json: CharDelimiterSplit without delimiter");
        if (!(p->re = regex_compile_literal(d, strlen(d), err))) return -1;
    } else return herr(err, "tokenizer.json: unsupported pre_tokenizer '%s'", type);
    return 0;
}

/* ---------------- decoder ---------------- */

static void parse_decoder(const cJSON *j, ht_vocab *v) {
    if (!j || cJSON_IsNull(j)) return;
    const char *type = jstr(j, "type");
    if (!type) return;
    if (!strcmp(type, "Sequence")) {
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(j, "decoders")) parse_decoder(x, v);
    } else if (!strcmp(type, "ByteLevel")) v->dec = DEC_BYTELEVEL;
    else if (!strcmp(type, "WordPiece")) v->dec = DEC_WPM_HF;
    else if (!strcmp(type, "Metaspace")) v->dec = DEC_METASPACE;
    else if (!strcmp(type, "Replace")) {
        const char *c = jstr(j, "content"), *s = jstr(cJSON_GetObjectItemCaseSensitive(j, "pattern"), "String");
        if (s && c && !strcmp(s, "\xe2\x96\x81") && !strcmp(c, " ")) v->dec = DEC_METASPACE;
    }
}

/* ---------------- special ids ---------------- */

static void special_from_postprocessor(const cJSON *pp, ht_vocab *v) {
    const char *type = jstr(pp, "type");
    if (!type) return;
    if (!strcmp(type, "Sequence")) {
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(pp, "processors")) special_from_postprocessor(x, v);
    } else if (!strcmp(type, "TemplateProcessing")) {
        bool seen_a = false;
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(pp, "single")) {
            const cJSON *st = cJSON_GetObjectItemCaseSensitive(x, "SpecialToken");
            if (cJSON_GetObjectItemCaseSensitive(x, "Sequence")) { seen_a = true; continue; }
            int32_t id = lookup_cstr(v, jstr(st, "id"));
            if (id < 0) continue;
            if (!seen_a) { v->bos = id; v->add_bos = true; }
            else { v->eos = id; v->add_eos = true; }
        }
    } else if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        const cJSON *cls = cJSON_GetObjectItemCaseSensitive(pp, "cls"), *sep = cJSON_GetObjectItemCaseSensitive(pp, "sep");
        const cJSON *c0 = cJSON_GetArrayItem(cls, 0), *s0 = cJSON_GetArrayItem(sep, 0);   /* ["[CLS]", 101] */
        if (cJSON_IsString(c0)) v->bos = lookup_cstr(v, c0->valuestring);
        if (cJSON_IsString(s0)) v->sep = lookup_cstr(v, s0->valuestring);
        v->add_bos = v->bos >= 0;
        v->add_sep = v->sep >= 0;
    }
}

/* tokenizer_config.json in the same directory, if any. */
static void special_from_config(const char *json_path, ht_vocab *v) {
    const char *slash = strrchr(json_path, '/');
    size_t dl = slash ? (size_t)(slash - json_path + 1) : 0;
    char *path = malloc(dl + 32);
    if (!path) return;
    memcpy(path, json_path, dl);
    strcpy(path + dl, "tokenizer_config.json");
    size_t len;
    hearth_err e2;
    char *txt = ht_read_file(path, &len, &e2);
    free(path);
    if (!txt) return;
    cJSON *c = cJSON_ParseWithLength(txt, len);
    free(txt);
    if (!c) return;
    const char *bos = jtoken(c, "bos_token"), *eos = jtoken(c, "eos_token");
    int32_t id;
    if ((id = lookup_cstr(v, bos)) >= 0) v->bos = id;
    if ((id = lookup_cstr(v, eos)) >= 0) v->eos = id;
    if ((id = lookup_cstr(v, jtoken(c, "unk_token"))) >= 0) v->unk = id;
    if ((id = lookup_cstr(v, jtoken(c, "pad_token"))) >= 0) v->pad = id;
    if ((id = lookup_cstr(v, jtoken(c, "sep_token"))) >= 0) v->sep = id;
    if ((id = lookup_cstr(v, jtoken(c, "mask_token"))) >= 0) v->mask = id;
    if (v->kind == TOK_WPM && (id = lookup_cstr(v, jtoken(c, "cls_token"))) >= 0) v->bos = id;
    const cJSON *ab = cJSON_GetObjectItemCaseSensitive(c, "add_bos_token");
    if (cJSON_IsBool(ab)) v->add_bos = cJSON_IsTrue(ab);
    else if (v->kind != TOK_WPM && !v->add_bos) v->add_bos = v->bos >= 0 && v->bos != v->eos;
    const cJSON *ae = cJSON_GetObjectItemCaseSensitive(c, "add_eos_token");
    if (cJSON_IsBool(ae)) v->add_eos = cJSON_IsTrue(ae);
    cJSON_Delete(c);
}

/* ---------------- tokenizer.json ---------------- */

static int build_from_json(const cJSON *root, const char *path, ht_vocab *v, hearth_err *err) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return herr(err, "tokenizer.json: no model");
    const char *mtype = jstr(model, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!mtype) mtype = merges ? "BPE" : "WordPiece";
    if (!strcmp(mtype, "BPE")) v->kind = TOK_BPE;
    else if (!strcmp(mtype, "WordPiece")) v->kind = TOK_WPM;
    else return herr(err, "tokenizer.json: unsupported model type '%s'", mtype);
    if (!cJSON_IsObject(vocab)) return herr(err, "tokenizer.json: model.vocab is not an object");

    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    int64_t n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, vocab) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble >= INT32_MAX / 2)
            return herr(err, "tokenizer.json: bad id for token");
        if ((int64_t)x->valuedouble + 1 > n) n = (int64_t)x->valuedouble + 1;
    }
    cJSON_ArrayForEach(x, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(x, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= INT32_MAX / 2 || !jstr(x, "content"))
            return herr(err, "tokenizer.json: bad added token");
        if ((int64_t)id->valuedouble + 1 > n) n = (int64_t)id->valuedouble + 1;
    }
    if (n == 0) return herr(err, "tokenizer.json: empty vocabulary");
    int64_t entries = cJSON_GetArraySize(vocab) + cJSON_GetArraySize(added);
    if (n > 2 * entries + 1024) return herr(err, "tokenizer.json: token ids are too sparse (largest %lld)", (long long)n - 1);
    gguf_str *texts = calloc((size_t)n, sizeof *texts);
    uint8_t *types = malloc((size_t)n), *flags = calloc((size_t)n, 1);
    if (!texts || !types || !flags) { free(texts); free(types); free(flags); return herr(err, "out of memory"); }
    memset(types, TT_UNUSED, (size_t)n);   /* holes in the id space */
    cJSON_ArrayForEach(x, vocab) {
        int32_t id = (int32_t)x->valuedouble;
        texts[id] = (gguf_str){ x->string, strlen(x->string) };
        types[id] = TT_NORMAL;
    }
    cJSON_ArrayForEach(x, added) {
        int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(x, "id")->valuedouble;
        const char *c = jstr(x, "content");
        texts[id] = (gguf_str){ c, strlen(c) };
        types[id] = jbool(x, "special", false) ? TT_CONTROL : TT_USER_DEFINED;
        flags[id] = (uint8_t)((jbool(x, "lstrip", false) ? TF_LSTRIP : 0) | (jbool(x, "rstrip", false) ? TF_RSTRIP : 0));
    }
    int rc = vocab_set_tokens(v, (int)n, texts, err);
    free(texts);
    if (!rc) { memcpy(v->type, types, (size_t)n); memcpy(v->flags, flags, (size_t)n); }
    free(types); free(flags);
    if (rc) return -1;

    if (parse_normalizer(cJSON_GetObjectItemCaseSensitive(root, "normalizer"), v, err)) return -1;
    if (parse_pretokenizer(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), v, err)) return -1;
    parse_decoder(cJSON_GetObjectItemCaseSensitive(root, "decoder"), v);

    const char *unk = jstr(model, "unk_token");
    v->unk = lookup_cstr(v, unk);
    if (v->kind == TOK_BPE) {
        v->byte_fallback = jbool(model, "byte_fallback", false);
        v->ignore_merges = jbool(model, "ignore_merges", false);
        v->fuse_unk = jbool(model, "fuse_unk", false);
        const char *pre = jstr(model, "continuing_subword_prefix"), *suf = jstr(model, "end_of_word_suffix");
        if (pre && *pre && !(v->cont_prefix = dup_str(pre, &v->cont_len))) return herr(err, "out of memory");
        if (suf && *suf && !(v->word_suffix = dup_str(suf, &v->suffix_len))) return herr(err, "out of memory");
        if (v->byte_fallback)
            for (int i = 0; i < v->n; i++)
                if (v->tlen[i] == 6 && !memcmp(vtext(v, i), "<0x", 3) && v->type[i] == TT_NORMAL) v->type[i] = TT_BYTE;
        int n_merges = cJSON_GetArraySize(merges);
        bpe_merge_in *in = malloc((size_t)(n_merges > 0 ? n_merges : 1) * sizeof *in);
        if (!in || pairmap_init(&v->merges, (size_t)(n_merges > 0 ? n_merges : 1))) {
            free(in);
            return herr(err, "out of memory");
        }
        size_t k = 0;
        cJSON_ArrayForEach(x, merges) {
            bpe_merge_in m = { "", "", 0, 0 };   /* malformed entries keep their rank but never match */
            if (cJSON_IsString(x)) {
                const char *s = x->valuestring, *sp = strchr(s + (s[0] ? 1 : 0), ' ');
                if (sp) m = (bpe_merge_in){ s, sp + 1, (size_t)(sp - s), strlen(sp + 1) };
            } else if (cJSON_IsArray(x) && cJSON_GetArraySize(x) == 2) {
                const cJSON *a = cJSON_GetArrayItem(x, 0), *b = cJSON_GetArrayItem(x, 1);
                if (cJSON_IsString(a) && cJSON_IsString(b))
                    m = (bpe_merge_in){ a->valuestring, b->valuestring, strlen(a->valuestring), strlen(b->valuestring) };
            }
            if (k < (size_t)n_merges) in[k++] = m;
        }
        rc = bpe_add_merges(v, in, k);
        free(in);
        if (rc) return herr(err, "out of memory");
        if (!v->dec) v->dec = v->byte_level ? DEC_BYTELEVEL : DEC_RAW;
    } else {
        const char *pre = jstr(model, "continuing_subword_prefix");
        const cJSON *mx = cJSON_GetObjectItemCaseSensitive(model, "max_input_chars_per_word");
        if (!(v->cont_prefix = dup_str(pre ? pre : "##", &v->cont_len))) return herr(err, "out of memory");
        v->wpm_start = "";
        v->wpm_cont = v->cont_prefix;
        if (cJSON_IsNumber(mx) && mx->valuedouble >= 1 && mx->valuedouble < 1e9) v->wpm_max_chars = (int)mx->valuedouble;
        v->dec = DEC_WPM_HF;
        if (v->unk < 0) v->unk = lookup_cstr(v, "[UNK]");
        v->bos = lookup_cstr(v, "[CLS]");
        v->sep = lookup_cstr(v, "[SEP]");
        v->pad = lookup_cstr(v, "[PAD]");
        v->mask = lookup_cstr(v, "[MASK]");
        v->add_bos = v->add_sep = true;
    }
    special_from_postprocessor(cJSON_GetObjectItemCaseSensitive(root, "post_processor"), v);
    special_from_config(path, v);
    if (v->add_bos && v->bos < 0) v->add_bos = false;
    if (v->add_eos && v->eos < 0) v->add_eos = false;
    if (vocab_finish(v, err)) return -1;
    if (v->eos < 0) v->eos = v->eot;   /* no declared EOS: the end-of-turn token found by its text */
    return 0;
}

int vocab_from_tokenizer_json(const char *path, ht_vocab **out, hearth_err *err) {
    *out = NULL;
    size_t len;
    char *txt = ht_read_file(path, &len, err);
    if (!txt) return -1;
    int rc = vocab_from_tokenizer_json_text(txt, len, path, out, err);
    free(txt);
    return rc;
}

int vocab_from_tokenizer_json_text(const char *txt, size_t len, const char *path, ht_vocab **out, hearth_err *err) {
    *out = NULL;
    cJSON *root = cJSON_ParseWithLength(txt, len);
    if (!root) return herr(err, "%s: invalid JSON", path);
    ht_vocab *v = vocab_alloc();
    if (!v) { cJSON_Delete(root); return herr(err, "out of memory"); }
    int rc = build_from_json(root, path, v, err);
    cJSON_Delete(root);
    if (rc) { vocab_free(v); return -1; }
    snprintf(v->pre_name, sizeof v->pre_name, "tokenizer.json");
    *out = v;
    return 0;
}

/* ---------------- vocab.txt ---------------- */

int vocab_from_wordpiece_txt(const char *path, bool lowercase, ht_vocab **out, hearth_err *err) {
    *out = NULL;
    struct stat st;
    char *file = NULL;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        size_t pl = strlen(path);
        if (!(file = malloc(pl + 16))) return herr(err, "out of memory");
        snprintf(file, pl + 16, "%s/vocab.txt", path);
    }
    size_t len;
    char *txt = ht_read_file(file ? file : path, &len, err);
    free(file);
    if (!txt) return -1;
    size_t cap = 1024, n = 0;
    gguf_str *texts = malloc(cap * sizeof *texts);
    if (!texts) { free(txt); return herr(err, "out of memory"); }
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && txt[j] != '\n') j++;
        size_t e = j;
        if (e > i && txt[e - 1] == '\r') e--;
        if (n == cap) {
            gguf_str *p = realloc(texts, cap * 2 * sizeof *p);
            if (!p) { free(texts); free(txt); return herr(err, "out of memory"); }
            texts = p; cap *= 2;
        }
        texts[n++] = (gguf_str){ txt + i, e - i };
        i = j + 1;
        if (n >= INT32_MAX / 2) break;
    }
    if (!n) { free(texts); free(txt); return herr(err, "%s: empty vocabulary", path); }
    ht_vocab *v = vocab_alloc();
    if (!v) { free(texts); free(txt); return herr(err, "out of memory"); }
    v->kind = TOK_WPM;
    int rc = vocab_set_tokens(v, (int)n, texts, err);
    free(texts); free(txt);
    if (rc) { vocab_free(v); return -1; }
    static const char *const specials[] = { "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]" };
    for (int i = 0; i < 5; i++) {
        int32_t id = lookup_cstr(v, specials[i]);
        if (id >= 0) v->type[id] = TT_CONTROL;
    }
    v->pipe.norm = calloc(1, sizeof(ht_norm));
    v->pipe.pre = calloc(1, sizeof(ht_pre));
    if (!v->pipe.norm || !v->pipe.pre) { vocab_free(v); return herr(err, "out of memory"); }
    v->pipe.norm[0] = (ht_norm){ .type = NS_BERT, .clean = true, .chinese = true, .strip_accents = lowercase,
                                 .lower = lowercase };
    v->pipe.n_norm = 1;
    v->pipe.pre[0] = (ht_pre){ .type = PS_BERT };
    v->pipe.n_pre = 1;
    /* Hugging Face vocab.txt marks continuations with "##"; a vocab.txt written from a GGUF file marks word
     * starts with "▁" instead. Take whichever convention the file uses more. */
    int n_hash = 0, n_space = 0;
    for (int id = 0; id < v->n; id++) {
        const char *t = vtext(v, id);
        if (v->tlen[id] > 2 && t[0] == '#' && t[1] == '#') n_hash++;
        if (v->tlen[id] > 3 && !memcmp(t, "\xe2\x96\x81", 3)) n_space++;
    }
    bool gguf_style = n_space > n_hash;
    v->wpm_start = gguf_style ? "\xe2\x96\x81" : "";
    v->wpm_cont = gguf_style ? "" : "##";
    v->dec = gguf_style ? DEC_WPM_GGUF : DEC_WPM_HF;
    v->pad = lookup_cstr(v, "[PAD]");
    v->unk = lookup_cstr(v, "[UNK]");
    v->bos = lookup_cstr(v, "[CLS]");
    v->sep = lookup_cstr(v, "[SEP]");
    v->mask = lookup_cstr(v, "[MASK]");
    v->add_bos = v->add_sep = true;
    snprintf(v->pre_name, sizeof v->pre_name, "vocab.txt");
    if (vocab_finish(v, err)) { vocab_free(v); return -1; }
    *out = v;
    return 0;
}
