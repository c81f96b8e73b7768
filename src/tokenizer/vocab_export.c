/* vocab_export.c — a loaded vocabulary (from GGUF, tokenizer.json or vocab.txt) written back as GGUF
 * tokenizer.ggml.* metadata, the way llama.cpp's converter writes it:
 *   byte-level BPE            -> "gpt2": tokens, token_type, merges in rank order, and a `pre` name
 *   SentencePiece, or BPE with byte fallback (HF Llama tokenizer.json) -> "llama": tokens, scores, token_type
 *   WordPiece                 -> "bert": tokens in GGUF's convention ("▁" word starts, bare continuations)
 * A tokenizer.json keeps its pre-tokenizer as regexes, which GGUF names instead (tokenizer.ggml.pre); the name
 * is found the way llama.cpp's converter finds it, by tokenizing probe texts: every candidate is written to an
 * in-memory GGUF, loaded back, and the first whose ids equal the source's on all probes is kept. The same
 * check guards every export, so a written tokenizer always tokenizes the probes exactly as the source. */
#define _GNU_SOURCE
#include "vocab_export.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tok_internal.h"

/* GGUF pre-tokenizer names tried for a tokenizer.json BPE, most common first. */
static const char *const PRE_CANDIDATES[] = {
    "gpt-2", "qwen2", "llama-bpe", "qwen35", "stablelm2", "deepseek-coder", "deepseek-llm", "deepseek-v3", "starcoder",
    "falcon", "dbrx", "gpt-4o", "tekken", "bloom", "viking", "seed-coder", "default", NULL,
};

static const char *const PROBES[] = {
    "Hello world! It's a test: don't, I'll, we've... 12345 67 8.9 $100 <tag> a_b-c",
    "  leading spaces\n\nnew lines\ttabs   and    runs\r\n",
    "Caf\xc3\xa9 na\xc3\xafve e\xcc\x81t\xc3\xa9 \xc3\x85ngstr\xc3\xb6m M\xc3\xbcnchen \xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82",
    "\xe4\xb8\xad\xe6\x96\x87\xe6\xb5\x8b\xe8\xaf\x95 \xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf "
    "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 \xf0\x9f\x98\x80\xf0\x9f\x91\x8d \xe2\x80\x94 \xc2\xbd",
    "def f(x):\n    return x**2 + 1  # comment\nif (a&&b) { c = d[0]; }",
    "UPPER lower MiXeD 1,000,000 3.14159 2024-01-01",
    NULL,
};

/* ---- token texts ---- */

/* Text of token id as GGUF stores it (malloc'd): WordPiece in Hugging Face's "##" convention is rewritten as
 * llama.cpp's converter does ("##x" -> "x", other normal tokens "x" -> "▁x", "[...]" kept). */
static char *gguf_text(const ht_vocab *v, int32_t id) {
    const char *t = vtext(v, id);
    size_t n = v->tlen[id], cl = v->kind == TOK_WPM && v->wpm_cont ? strlen(v->wpm_cont) : 0;
    bool phantom = cl && v->wpm_start && !*v->wpm_start;
    char *s = malloc(n + 4);
    if (!s) return NULL;
    if (!phantom || (n >= 2 && t[0] == '[' && t[n - 1] == ']') || v->type[id] == TT_CONTROL) memcpy(s, t, n + 1);
    else if (n >= cl && !memcmp(t, v->wpm_cont, cl)) memcpy(s, t + cl, n - cl + 1);
    else { memcpy(s, "\xe2\x96\x81", 3); memcpy(s + 3, t, n + 1); }
    return s;
}

static void free_strs(char **s, size_t n) {
    for (size_t i = 0; s && i < n; i++) free(s[i]);
    free(s);
}

static int put_tokens(const ht_vocab *v, gguf_writer *w, hearth_err *err) {
    char **t = calloc((size_t)v->n, sizeof *t);
    if (!t) return herr(err, "out of memory");
    for (int i = 0; i < v->n; i++)
        if (!(t[i] = gguf_text(v, i))) { free_strs(t, (size_t)v->n); return herr(err, "out of memory"); }
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)t, (uint64_t)v->n);
    free_strs(t, (size_t)v->n);
    int32_t *ty = malloc((size_t)v->n * sizeof *ty);
    if (!ty) return herr(err, "out of memory");
    for (int i = 0; i < v->n; i++) ty[i] = v->type[i] ? v->type[i] : TT_NORMAL;
    gguf_w_arr_i32(w, "tokenizer.ggml.token_type", ty, (uint64_t)v->n);
    free(ty);
    return 0;
}

/* ---- BPE merges ---- */
typedef struct { int32_t rank, a, b, merged; } merge_ent;

static int by_rank(const void *x, const void *y) {
    const merge_ent *p = x, *q = y;
    return (p->rank > q->rank) - (p->rank < q->rank);
}

/* The merges in rank order (*n of them, malloc'd). */
static merge_ent *collect_merges(const ht_vocab *v, size_t *n) {
    size_t cap = v->merges.slots ? (size_t)v->merges.mask + 1 : 0, k = 0;
    merge_ent *e = malloc((cap ? cap : 1) * sizeof *e);
    if (!e) return NULL;
    for (size_t i = 0; i < cap; i++) {
        const ht_pairslot *s = &v->merges.slots[i];
        if (s->key == UINT64_MAX) continue;
        e[k++] = (merge_ent){ s->rank, (int32_t)(s->key >> 32), (int32_t)(uint32_t)s->key, s->merged };
    }
    qsort(e, k, sizeof *e, by_rank);
    *n = k;
    return e;
}

static int put_merges(const ht_vocab *v, gguf_writer *w, hearth_err *err) {
    size_t n;
    merge_ent *e = collect_merges(v, &n);
    char **s = e ? calloc(n ? n : 1, sizeof *s) : NULL;
    if (!s) { free(e); return herr(err, "out of memory"); }
    for (size_t i = 0; i < n; i++) {
        size_t la = v->tlen[e[i].a], lb = v->tlen[e[i].b];
        if (!(s[i] = malloc(la + lb + 2))) { free(e); free_strs(s, n); return herr(err, "out of memory"); }
        memcpy(s[i], vtext(v, e[i].a), la);
        s[i][la] = ' ';
        memcpy(s[i] + la + 1, vtext(v, e[i].b), lb + 1);
    }
    gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)s, n);
    free(e);
    free_strs(s, n);
    return 0;
}

/* SentencePiece scores: the vocabulary's own, or for BPE with byte fallback -(rank of the merge making it). */
static int put_scores(const ht_vocab *v, gguf_writer *w, hearth_err *err) {
    float *sc = malloc((size_t)v->n * sizeof *sc);
    if (!sc) return herr(err, "out of memory");
    memcpy(sc, v->score, (size_t)v->n * sizeof *sc);
    if (v->kind == TOK_BPE) {
        size_t n;
        merge_ent *e = collect_merges(v, &n);
        if (!e) { free(sc); return herr(err, "out of memory"); }
        for (int i = 0; i < v->n; i++) sc[i] = v->type[i] == TT_NORMAL ? -1e9f : 0.0f;
        for (size_t i = n; i-- > 0;) sc[e[i].merged] = -(float)e[i].rank;
        free(e);
    }
    gguf_w_arr_f32(w, "tokenizer.ggml.scores", sc, (uint64_t)v->n);
    free(sc);
    return 0;
}

/* ---- special ids, flags, normalizer ---- */
static void put_id(gguf_writer *w, const char *key, int32_t id) {
    if (id >= 0) gguf_w_u32(w, key, (uint32_t)id);
}

static void put_specials(const ht_vocab *v, gguf_writer *w) {
    put_id(w, "tokenizer.ggml.bos_token_id", v->bos);
    put_id(w, "tokenizer.ggml.eos_token_id", v->eos);
    put_id(w, "tokenizer.ggml.unknown_token_id", v->unk);
    put_id(w, "tokenizer.ggml.seperator_token_id", v->sep);   /* sic: llama.cpp's key */
    put_id(w, "tokenizer.ggml.padding_token_id", v->pad);
    put_id(w, "tokenizer.ggml.mask_token_id", v->mask);
    put_id(w, "tokenizer.ggml.eot_token_id", v->eot);
    put_id(w, "tokenizer.ggml.eom_token_id", v->eom);
    if (v->kind == TOK_WPM) put_id(w, "tokenizer.ggml.cls_token_id", v->bos);
    gguf_w_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos);
    gguf_w_bool(w, "tokenizer.ggml.add_eos_token", v->add_eos);
    if (v->kind == TOK_WPM) gguf_w_bool(w, "tokenizer.ggml.add_sep_token", v->add_sep);
    if (v->kind == TOK_SPM || v->byte_fallback) gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", v->add_space_prefix);
}

/* WordPiece normalization: lowercase / strip accents as the source pipeline does. */
static void put_wpm_normalizer(const ht_vocab *v, gguf_writer *w) {
    bool lower = false, strip = false;
    for (int i = 0; i < v->pipe.n_norm; i++) {
        const ht_norm *n = &v->pipe.norm[i];
        if (n->type == NS_BERT) { lower |= n->lower; strip |= n->strip_accents; }
        lower |= n->type == NS_LOWER;
        strip |= n->type == NS_STRIP_ACCENTS;
    }
    gguf_w_bool(w, "tokenizer.ggml.normalizer.lowercase", lower);
    gguf_w_bool(w, "tokenizer.ggml.normalizer.strip_accents", strip);
}

static int put_all(const ht_vocab *v, gguf_writer *w, const char *model, const char *pre, hearth_err *err) {
    gguf_w_str(w, "tokenizer.ggml.model", model);
    if (pre) gguf_w_str(w, "tokenizer.ggml.pre", pre);
    if (put_tokens(v, w, err)) return -1;
    if (!strcmp(model, "gpt2") && put_merges(v, w, err)) return -1;
    if (!strcmp(model, "llama") && put_scores(v, w, err)) return -1;
    if (!strcmp(model, "bert")) put_wpm_normalizer(v, w);
    put_specials(v, w);
    return 0;
}

/* ---- verification ---- */
static bool same_ids(const ht_vocab *a, const ht_vocab *b, const char *text, bool special) {
    int32_t *x = NULL, *y = NULL;
    int nx = 0, ny = 0;
    hearth_err e;
    bool ok = !tok_encode(a, text, strlen(text), true, special, &x, &nx, &e) &&
              !tok_encode(b, text, strlen(text), true, special, &y, &ny, &e) && nx == ny &&
              !memcmp(x, y, (size_t)nx * sizeof *x);
    free(x);
    free(y);
    return ok;
}

/* The probes, plus every special token's text between words, parsed as special. */
static bool probes_match(const ht_vocab *v, const ht_vocab *u) {
    if (vocab_size(v) != vocab_size(u) || vocab_bos(v) != vocab_bos(u) || vocab_eos(v) != vocab_eos(u)) return false;
    for (int i = 0; PROBES[i]; i++)
        if (!same_ids(v, u, PROBES[i], false) || !same_ids(v, u, PROBES[i], true)) return false;
    char buf[512];
    for (int id = 0; id < v->n; id++) {
        if (v->type[id] != TT_CONTROL && v->type[id] != TT_USER_DEFINED) continue;
        snprintf(buf, sizeof buf, "a %.400s b", vtext(v, id));
        if (!same_ids(v, u, buf, true)) return false;
    }
    return true;
}

/* Writes the candidate keys to an in-memory GGUF, loads them back and compares; 1 = equivalent. */
static int try_candidate(const ht_vocab *v, const char *model, const char *pre, hearth_err *err) {
    gguf_writer *w = gguf_writer_new();
    int fd = memfd_create("hearth-vocab-export", 0), rc = -1;
    char path[64];
    gguf_file *g = NULL;
    ht_vocab *u = NULL;
    hearth_err e2;
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    if (fd < 0) herr(err, "memfd_create failed");
    else if (!put_all(v, w, model, pre, err) && !gguf_writer_write_fd(w, fd, "the tokenizer metadata", err) && !gguf_open(path, &g, err))
        rc = !vocab_from_gguf(g, &u, &e2) && probes_match(v, u);
    if (u) vocab_free(u);
    if (g) gguf_close(g);
    if (fd >= 0) close(fd);
    gguf_writer_free(w);
    return rc;
}

int vocab_to_gguf(const ht_vocab *v, gguf_writer *w, hearth_err *err) {
    const char *model = v->kind == TOK_WPM ? "bert" : v->kind == TOK_SPM || !v->byte_level ? "llama" : "gpt2";
    if (v->kind == TOK_BPE && !v->byte_level && !v->byte_fallback)
        return herr(err, "a BPE tokenizer that is neither byte-level nor byte-fallback has no GGUF form"), 1;
    bool named = v->pre_name[0] && strcmp(v->pre_name, "tokenizer.json");
    const char *one[2] = { named ? v->pre_name : NULL, NULL };
    const char *const *cands = !strcmp(model, "gpt2") && !named ? PRE_CANDIDATES : one;
    for (int i = 0; i == 0 || cands[i]; i++) {
        int rc = try_candidate(v, model, cands[i], err);
        if (rc < 0) return -1;
        if (rc) return put_all(v, w, model, cands[i], err);
    }
    return herr(err, "no GGUF tokenizer (model '%s') reproduces this vocabulary's tokenization", model), 1;
}
