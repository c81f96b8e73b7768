/* tok_internal.h — the tokenizer layer's private structures, shared by vocab.c (loading, special tokens,
 * dispatch, pieces), spm.c, bpe.c, wpm.c, pipeline.c (normalizers / pre-tokenizers) and tokjson.c.
 *
 * A vocabulary keeps every token's text in one buffer with an open-addressing hash map text -> id, the
 * per-token score and type, the special ids, and the kind-specific tables (BPE merges as an
 * (id, id) -> (rank, id) map, WordPiece affixes). Text goes through a pipeline (normalizer steps, then
 * pre-tokenizer steps that cut it into pieces) before the model (SPM / BPE / WordPiece) runs on each piece. */
#ifndef HEARTH_TOK_INTERNAL_H
#define HEARTH_TOK_INTERNAL_H

#include "tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* ---- growable buffers ---- */
typedef struct { int32_t *v; size_t n, cap; } ht_ivec;
typedef struct { char *p; size_t n, cap; } ht_sbuf;
bool ivec_push(ht_ivec *a, int32_t x);
bool sbuf_put(ht_sbuf *b, const void *p, size_t n);
bool sbuf_reserve(ht_sbuf *b, size_t extra);

/* ---- hashing ---- */
static inline uint64_t tok_hash(const void *data, size_t n) {
    const uint8_t *s = data;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ ((uint64_t)n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w; memcpy(&w, s, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull; h ^= h >> 31;
        s += 8; n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++) w |= (uint64_t)s[i] << (8 * i);
    h = (h ^ w) * 0x94d049bb133111ebull; h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull; h ^= h >> 32;
    return h;
}

static inline uint64_t pair_hash(uint64_t x) {   /* splitmix64 finalizer */
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* ---- UTF-8 ---- */
/* Decodes one character: returns its byte length (>= 1) and the code point, or 0xFFFD for an invalid byte. */
static inline int utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    int l = utf8_valid_len(s, n);
    switch (l) {
    case 1: *cp = s[0]; return 1;
    case 2: *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F); return 2;
    case 3: *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F); return 3;
    case 4: *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
                  (s[3] & 0x3F); return 4;
    default: *cp = 0xFFFD; return 1;
    }
}
static inline int utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

/* GPT-2 byte <-> unicode map (bytes_to_unicode). */
uint32_t bytelevel_cp(uint8_t b);
int bytelevel_byte(uint32_t cp);   /* -1 if cp is not in the map */

/* ---- the text -> id map ---- */
typedef struct { uint32_t tag, id1, off, len; } ht_strslot;   /* id1 = id + 1, 0 = empty slot */
typedef struct {
    ht_strslot *slots;
    uint64_t mask;
} ht_strmap;

/* ---- (id, id) -> (rank, merged id) map for BPE ---- */
typedef struct { uint64_t key; int32_t rank, merged; } ht_pairslot;   /* key (uint64)left << 32 | right; UINT64_MAX = empty */
typedef struct {
    ht_pairslot *slots;
    uint64_t mask;
} ht_pairmap;

/* ---- special tokens: found in text before the model runs, via a byte trie (first-child / next-sibling) ---- */
typedef struct { int32_t child, sibling, id; uint8_t byte; } ht_trie_node;
typedef struct {
    ht_trie_node *nodes;
    int32_t n_nodes, cap_nodes;
    int32_t root[256];   /* node of each first byte, -1 if none */
    int n;               /* tokens in the trie */
} ht_special;

/* ---- pipeline ---- */
enum ht_norm_type { NS_NFC = 1, NS_NFD, NS_NFKC, NS_NFKD, NS_LOWER, NS_STRIP_ACCENTS, NS_REPLACE, NS_PREPEND,
                    NS_STRIP, NS_BERT };
typedef struct {
    int type;
    char *a, *b;          /* REPLACE: pattern (literal) and content; PREPEND: a */
    size_t alen, blen;
    pcre2_code *re;       /* REPLACE with a regex pattern */
    bool clean, chinese, strip_accents, lower;   /* BERT */
    bool left, right;     /* STRIP */
} ht_norm;

enum ht_split_behavior { SB_REMOVED = 0, SB_ISOLATED, SB_MERGED_PREV, SB_MERGED_NEXT, SB_CONTIGUOUS };
enum ht_pre_type { PS_SPLIT = 1, PS_BYTELEVEL, PS_METASPACE, PS_BERT, PS_WHITESPACE, PS_WSSPLIT, PS_DIGITS, PS_PUNCT };
enum { MS_ALWAYS = 0, MS_FIRST, MS_NEVER };
typedef struct {
    int type;
    pcre2_code *re;       /* SPLIT (regex or escaped literal), BYTELEVEL with use_regex */
    int behavior;
    bool invert;
    bool add_prefix_space;   /* BYTELEVEL */
    char repl[8]; int repl_len; int prepend_scheme; bool split;   /* METASPACE */
    bool individual;      /* DIGITS */
} ht_pre;

typedef struct {
    ht_norm *norm; int n_norm;
    ht_pre *pre; int n_pre;
} ht_pipeline;

/* Decoder behaviour of tok_piece for NORMAL tokens. */
enum { DEC_SPM = 1, DEC_BYTELEVEL, DEC_WPM_GGUF, DEC_WPM_HF, DEC_METASPACE, DEC_RAW };

/* token flags */
enum { TF_LSTRIP = 1, TF_RSTRIP = 2 };

struct ht_vocab {
    int kind;
    int n;
    char *tbuf;                /* all texts, each NUL-terminated */
    uint32_t *toff, *tlen;
    float *score;
    uint8_t *type;
    uint8_t *flags;
    ht_strmap map;
    int max_len;
    int32_t bos, eos, unk, sep, pad, mask, eot, eom;
    bool add_bos, add_eos, add_sep, add_space_prefix;
    int32_t *eog; int n_eog;
    int32_t byte_id[256];      /* byte-level: token of the mapped char; otherwise <0xNN>; -1 if absent */
    uint8_t bl[256][3];        /* byte-level: UTF-8 of each byte's char (length, bytes) */
    ht_special sp_all, sp_user;
    ht_pipeline pipe;
    int dec;
    /* SPM: no mergeable token has "▁" after another character, so text can be cut before such a "▁" */
    bool spm_word_split;
    /* BPE */
    ht_pairmap merges;
    bool byte_level, byte_fallback, ignore_merges, fuse_unk;
    bool newline_runs_whole;   /* Gemma 4: a piece of newlines only that is a token is that token */
    char *cont_prefix, *word_suffix; size_t cont_len, suffix_len;
    /* WordPiece */
    const char *wpm_start, *wpm_cont;   /* affix for word-initial / continuation lookups */
    int wpm_max_chars;
    char pre_name[64];
};

/* vocab.c */
ht_vocab *vocab_alloc(void);
int  vocab_set_tokens(ht_vocab *v, int n, const gguf_str *texts, hearth_err *err);   /* builds texts + map */
int32_t vocab_lookup(const ht_vocab *v, const char *s, size_t n);
int32_t vocab_lookup_h(const ht_vocab *v, const char *s, size_t n, uint64_t h);   /* h = tok_hash(s, n) */
int  vocab_finish(ht_vocab *v, hearth_err *err);    /* special sets, byte ids, eog: after types are known */
bool vocab_add_eog(ht_vocab *v, int32_t id);
static inline const char *vtext(const ht_vocab *v, int32_t id) { return v->tbuf + v->toff[id]; }

/* ---- per-encode scratch space ---- */
typedef struct { size_t off, len; } ht_span;   /* a piece: a byte range of a buffer */
typedef struct { ht_span *v; size_t n, cap; } ht_spans;
bool spans_push(ht_spans *a, size_t off, size_t len);
typedef struct { pcre2_match_data *md; pcre2_match_context *mc; pcre2_jit_stack *js; } rx_ctx;
void rx_free(rx_ctx *rx);
typedef struct { int32_t id, prev, next; } bpe_sym;
typedef struct {
    uint64_t *slots;   /* 0 = empty, else hash tag << 32 | entry + 1 */
    uint64_t mask;
    uint32_t *ent;     /* per entry: text offset, text length, ids offset, ids count */
    size_t n_ent, cap_ent;
    ht_sbuf text;
    ht_ivec ids;
} bpe_cache;
typedef struct {
    rx_ctx rx;
    ht_sbuf buf, buf2, tmp;
    ht_spans spans, spans2;
    bpe_sym *sym; size_t cap_sym;
    uint64_t *heap; size_t n_heap, cap_heap;   /* BPE candidate merges: rank << 32 | left symbol */
    bpe_cache cache;
} tok_ws;
void ws_free(tok_ws *ws);

/* pipeline.c */
/* Normalizes s through p's normalizers into ws->buf. */
/* Runs the normalizers over s into ws->buf: 0, -1 out of memory, -2 when they grow the text past
 * NORM_MAX_GROWTH times its length (+ 4 KiB). */
#define NORM_MAX_GROWTH 64
int  pipe_normalize(const ht_pipeline *p, const char *s, size_t n, tok_ws *ws);
/* Runs the pre-tokenizer steps on ws->buf (which a step may rewrite) producing pieces in ws->spans;
 * is_first: the fragment starts the input (Metaspace prepend_scheme "first"). */
int  pipe_pretokenize(const ht_pipeline *p, bool is_first, tok_ws *ws, hearth_err *err);
int  pre_bytelevel(ht_pre *st, bool add_prefix_space, bool use_regex, hearth_err *err);
void pipe_free(ht_pipeline *p);
/* Compiles a regex (PCRE2, UTF + UCP, JIT; invalid UTF-8 in the subject never matches). */
pcre2_code *regex_compile(const char *pat, size_t len, hearth_err *err);
pcre2_code *regex_compile_literal(const char *s, size_t len, hearth_err *err);
/* Appends the split of [off, off+len) of buf by re with behavior (HF Split semantics) to out. */
int  regex_split(const pcre2_code *re, const char *buf, size_t off, size_t len, int behavior, bool invert,
                 rx_ctx *rx, ht_spans *out);
/* Unicode helpers */
bool uc_is_whitespace(uint32_t cp);     /* White_Space property */
bool uc_is_punct(uint32_t cp);          /* P* */
bool uc_is_bert_punct(uint32_t cp);     /* ASCII punctuation or P* */
int  uc_lower(uint32_t cp, uint32_t out[3]);   /* full lowercase mapping, returns count */

/* spm.c / bpe.c / wpm.c: encode one piece of text, appending ids. */
int spm_encode(const ht_vocab *v, const char *s, size_t n, tok_ws *ws, ht_ivec *out);
int bpe_encode_piece(const ht_vocab *v, const char *s, size_t n, tok_ws *ws, ht_ivec *out);
int wpm_encode_word(const ht_vocab *v, const char *s, size_t n, ht_ivec *out);
int wpm_encode_piece(const ht_vocab *v, const char *s, size_t n, tok_ws *ws, ht_ivec *out);   /* cached */
/* bpe.c: per-call cache of short pieces -> ids (get appends to out and returns true on a hit). */
bool piece_cache_get(tok_ws *w, const char *s, size_t n, ht_ivec *out);
void piece_cache_put(tok_ws *w, const char *s, size_t n, const int32_t *ids, size_t k);
#define CACHE_MAX_PIECE 64
/* bpe.c: GGUF pre-tokenizer name -> pipeline steps and flags. */
int bpe_setup_pre(ht_vocab *v, const char *pre, size_t pre_len, hearth_err *err);
int pairmap_init(ht_pairmap *m, size_t n);
void pairmap_put(ht_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged);
static inline bool pairmap_get(const ht_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *merged) {
    if (!m->slots) return false;
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t i = pair_hash(key) & m->mask;
    for (;;) {
        const ht_pairslot *s = &m->slots[i];
        if (s->key == key) { *rank = s->rank; *merged = s->merged; return true; }
        if (s->key == UINT64_MAX) return false;
        i = (i + 1) & m->mask;
    }
}
/* Adds merges in rank order (rank = index); a merge whose parts or result are not tokens is skipped.
 * Lookups are batched with prefetches: loading is bound by memory latency. */
typedef struct { const char *a, *b; size_t al, bl; } bpe_merge_in;
int  bpe_add_merges(ht_vocab *v, const bpe_merge_in *in, size_t n);

#endif
