/* synth_vocab.c — synthetic tokenizers (see synth_vocab.h).
 *
 * Merge tokens are grown the way BPE grows a vocabulary: each new token is an existing token (a word start
 * or word piece) followed by a letter or a piece that does not start a word, so every token is reachable by
 * the merges listed before it, and word-start markers (byte-level "Ġ", SentencePiece "▁") only ever begin a
 * token. Choices come from a fixed-seed splitmix64 stream, so the vocabulary of a layout never changes. */
#include "convert/synth_vocab.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX_PIECE_BYTES 16
#define SPACE_BPE "\xc4\xa0"          /* U+0120 'Ġ': byte 0x20 in GPT-2's byte-to-unicode map */
#define SPACE_SPM "\xe2\x96\x81"      /* U+2581 '▁' */
#define TT_NORMAL 1
#define TT_UNKNOWN 2
#define TT_CONTROL 3
#define TT_USER 4
#define TT_UNUSED 5
#define TT_BYTE 6

typedef struct {
    char *a; size_t an, acap;                 /* string arena */
    size_t *off; uint32_t *len; int32_t *type; float *score; int n, cap;
    bool *word_start;                         /* token begins with the word-start marker */
    size_t *moff; int n_merges, cap_m;
    uint32_t *slots; size_t mask;             /* hash set of token ids + 1 */
    bool oom;
    uint64_t rng;
} vbuild;

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n), biased towards small indices (earlier, shorter tokens) by squaring. */
static int pick_early(vbuild *b, int n) {
    double u = (double)(splitmix64(&b->rng) >> 11) * (1.0 / 9007199254740992.0);
    int i = (int)(u * u * n);
    return i < n ? i : n - 1;
}

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* Appends bytes (plus a NUL) to the arena; returns their offset. */
static size_t arena_put(vbuild *b, const char *s, size_t n) {
    if (b->an + n + 1 > b->acap) {
        size_t nc = b->acap ? b->acap : 1 << 16;
        while (nc < b->an + n + 1) nc *= 2;
        char *p = realloc(b->a, nc);
        if (!p) { b->oom = true; return 0; }
        b->a = p; b->acap = nc;
    }
    size_t o = b->an;
    memcpy(b->a + o, s, n);
    b->a[o + n] = 0;
    b->an += n + 1;
    return o;
}

static int32_t vb_find(const vbuild *b, const char *s, size_t n) {
    for (size_t i = fnv1a(s, n) & b->mask;; i = (i + 1) & b->mask) {
        uint32_t id = b->slots[i];
        if (!id) return -1;
        if (b->len[id - 1] == n && !memcmp(b->a + b->off[id - 1], s, n)) return (int32_t)id - 1;
    }
}

/* Adds a token; returns its id, or -1 if that text is already a token (or on out of memory). */
static int32_t vb_add(vbuild *b, const char *s, size_t n, int type, bool word_start) {
    if (b->oom || b->n >= b->cap || vb_find(b, s, n) >= 0) return -1;
    int32_t id = b->n++;
    b->off[id] = arena_put(b, s, n);
    b->len[id] = (uint32_t)n;
    b->type[id] = type;
    b->word_start[id] = word_start;
    size_t i = fnv1a(s, n) & b->mask;
    while (b->slots[i]) i = (i + 1) & b->mask;
    b->slots[i] = (uint32_t)id + 1;
    return id;
}

static void vb_add_merge(vbuild *b, int32_t l, int32_t r) {
    if (b->n_merges == b->cap_m) {
        int nc = b->cap_m ? b->cap_m * 2 : 1024;
        size_t *p = realloc(b->moff, (size_t)nc * sizeof *p);
        if (!p) { b->oom = true; return; }
        b->moff = p; b->cap_m = nc;
    }
    char tmp[2 * MAX_PIECE_BYTES + 2];
    int k = snprintf(tmp, sizeof tmp, "%s %s", b->a + b->off[l], b->a + b->off[r]);
    b->moff[b->n_merges++] = arena_put(b, tmp, (size_t)k);
}

static int vb_init(vbuild *b, int n_vocab, uint64_t seed) {
    memset(b, 0, sizeof *b);
    b->cap = n_vocab;
    size_t slots = 16;
    while (slots < (size_t)n_vocab * 2) slots <<= 1;
    b->mask = slots - 1;
    b->off = malloc((size_t)n_vocab * sizeof *b->off);
    b->len = malloc((size_t)n_vocab * sizeof *b->len);
    b->type = malloc((size_t)n_vocab * sizeof *b->type);
    b->score = calloc((size_t)n_vocab, sizeof *b->score);
    b->word_start = calloc((size_t)n_vocab, 1);
    b->slots = calloc(slots, sizeof *b->slots);
    b->rng = seed;
    b->oom = !b->off || !b->len || !b->type || !b->score || !b->word_start || !b->slots;
    return b->oom ? -1 : 0;
}

static void vb_free(vbuild *b) {
    free(b->a); free(b->off); free(b->len); free(b->type); free(b->score); free(b->word_start);
    free(b->moff); free(b->slots);
}

/* UTF-8 of a code point < 0x800. */
static size_t utf8_2(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    o[0] = (char)(0xc0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

static bool byte_direct(unsigned c) { return (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174; }

/* The 256 byte tokens in GPT-2's order: bytes mapped to themselves first, then the others as U+0100.. */
static void add_byte_tokens(vbuild *b) {
    char u[4];
    for (unsigned c = 0; c < 256; c++)
        if (byte_direct(c)) vb_add(b, u, utf8_2(c, u), TT_NORMAL, false);
    unsigned k = 0;
    for (unsigned c = 0; c < 256; c++)
        if (!byte_direct(c)) vb_add(b, u, utf8_2(256 + k++, u), TT_NORMAL, c == ' ');
}

/* Grows merge tokens until the vocabulary holds `until` tokens. `pool` starts with the word starters and
 * letters (ids), `letters` are the single-letter ids. Records merges when `merges`, scores when `scored`. */
static int grow_pieces(vbuild *b, int until, const int32_t *letters, int n_letters, int32_t *pool, int n_pool,
                       int32_t *cont, int n_cont, bool merges, bool scored, hearth_err *err) {
    long attempts = 0, max_attempts = 200L * until + 100000;
    char tmp[2 * MAX_PIECE_BYTES];
    while (b->n < until && !b->oom) {
        if (++attempts > max_attempts) return herr(err, "synthetic vocabulary: cannot generate %d distinct tokens", until);
        int32_t l = pool[pick_early(b, n_pool)];
        int32_t r = (splitmix64(&b->rng) & 3) ? letters[splitmix64(&b->rng) % (uint64_t)n_letters] : cont[pick_early(b, n_cont)];
        size_t ln = b->len[l], rn = b->len[r];
        if (ln + rn > MAX_PIECE_BYTES) continue;
        memcpy(tmp, b->a + b->off[l], ln);
        memcpy(tmp + ln, b->a + b->off[r], rn);
        int32_t id = vb_add(b, tmp, ln + rn, TT_NORMAL, b->word_start[l]);
        if (id < 0) continue;
        if (merges) vb_add_merge(b, l, r);
        if (scored) b->score[id] = -(float)id;
        pool[n_pool++] = id;
        if (!b->word_start[id]) cont[n_cont++] = id;
    }
    return b->oom ? herr(err, "out of memory") : 0;
}

/* Letter ids (a-z, A-Z) as single-character tokens already in the vocabulary. */
static int letter_ids(const vbuild *b, int32_t *out) {
    int n = 0;
    for (int c = 0; c < 52; c++) {
        char ch = (char)(c < 26 ? 'a' + c : 'A' + c - 26);
        int32_t id = vb_find(b, &ch, 1);
        if (id >= 0) out[n++] = id;
    }
    return n;
}

static int grow_from_letters(vbuild *b, int until, const char *space, bool merges, bool scored, hearth_err *err) {
    int32_t letters[52];
    int nl = letter_ids(b, letters);
    int32_t *pool = malloc((size_t)b->cap * sizeof *pool), *cont = malloc((size_t)b->cap * sizeof *cont);
    if (!pool || !cont || !nl) { free(pool); free(cont); return herr(err, "out of memory"); }
    memcpy(pool, letters, (size_t)nl * sizeof *pool);
    memcpy(cont, letters, (size_t)nl * sizeof *cont);
    pool[nl] = vb_find(b, space, strlen(space));
    int rc = grow_pieces(b, until, letters, nl, pool, nl + 1, cont, nl, merges, scored, err);
    free(pool);
    free(cont);
    return rc;
}

/* ---- special tokens per family ---- */

static void add_llama3_specials(vbuild *b, synth_vocab *v) {
    static const char *const named[] = { "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
        "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
        "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>" };
    int first = b->n;
    char tmp[64];
    for (int k = 0; b->n < b->cap; k++) {
        if (k < 11) vb_add(b, named[k], strlen(named[k]), TT_CONTROL, false);
        else vb_add(b, tmp, (size_t)snprintf(tmp, sizeof tmp, "<|reserved_special_token_%d|>", k - 8), TT_CONTROL, false);
    }
    v->bos = first;
    v->eos = first + 1;
    v->eot = first + 9 < b->n ? first + 9 : -1;
}

static void add_qwen_specials(vbuild *b, synth_vocab *v) {
    static const char *const named[] = { "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
        "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
        "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
        "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
        "<tool_response>", "</tool_response>", "<think>", "</think>" };
    int first = b->n;
    char tmp[64];
    for (int k = 0; b->n < b->cap; k++) {
        if (k < 26) vb_add(b, named[k], strlen(named[k]), named[k][1] == '|' ? TT_CONTROL : TT_USER, false);
        else vb_add(b, tmp, (size_t)snprintf(tmp, sizeof tmp, "[PAD%d]", b->n), TT_UNUSED, false);
    }
    v->bos = first;
    v->pad = first;
    v->eos = first + 2 < b->n ? first + 2 : first;
}

/* o200k_harmony's (gpt-oss): its named tokens at their offsets from <|startoftext|>, the rest reserved */
static void add_harmony_specials(vbuild *b, synth_vocab *v) {
    static const char *const named[] = { "<|startoftext|>", "<|endoftext|>", NULL, NULL, "<|return|>", "<|constrain|>",
        NULL, "<|channel|>", "<|start|>", "<|end|>", "<|message|>", NULL, NULL, NULL, "<|call|>" };
    const int first = b->n, n_named = (int)(sizeof named / sizeof named[0]);
    char tmp[64];
    for (int k = 0; b->n < b->cap; k++) {
        if (k < n_named && named[k]) vb_add(b, named[k], strlen(named[k]), TT_CONTROL, false);
        else vb_add(b, tmp, (size_t)snprintf(tmp, sizeof tmp, "<|reserved_%d|>", b->n), TT_CONTROL, false);
    }
    v->bos = first;
    v->pad = first + 1;
    v->eos = first + 4;      /* <|return|> */
    v->eot = first + 9;      /* <|end|> */
}

static void add_gemma_specials(vbuild *b, synth_vocab *v) {
    static const char *const named[] = { "<pad>", "<eos>", "<bos>", "<unk>", "<mask>" };
    char tmp[32];
    for (int k = 0; k < 5; k++) vb_add(b, named[k], strlen(named[k]), k == 3 ? TT_UNKNOWN : TT_CONTROL, false);
    for (int k = 0; k < 100; k++) vb_add(b, tmp, (size_t)snprintf(tmp, sizeof tmp, "<unused%d>", k), TT_CONTROL, false);
    vb_add(b, "<start_of_turn>", 15, TT_CONTROL, false);
    vb_add(b, "<end_of_turn>", 13, TT_CONTROL, false);
    for (int c = 0; c < 256; c++) vb_add(b, tmp, (size_t)snprintf(tmp, sizeof tmp, "<0x%02X>", c), TT_BYTE, false);
    vb_add(b, SPACE_SPM, 3, TT_NORMAL, true);
    for (char c = 33; c < 127; c++) vb_add(b, &c, 1, TT_NORMAL, false);
    v->pad = 0; v->eos = 1; v->bos = 2; v->unk = 3; v->eot = 106;
}

#define GEMMA_FIXED (107 + 256 + 1 + 94)

static int build_tokens(const synth_vocab_layout *l, vbuild *b, synth_vocab *v, hearth_err *err) {
    if (l->kind == SV_SPM_GEMMA) {
        if (l->n_vocab < GEMMA_FIXED + 64) return herr(err, "synthetic vocabulary of %d tokens too small", l->n_vocab);
        add_gemma_specials(b, v);
        for (int i = 107 + 256; i < b->n; i++) b->score[i] = -(float)i;
        return grow_from_letters(b, l->n_vocab, SPACE_SPM, false, true, err);
    }
    int n_special = l->n_vocab - l->n_text;
    if (l->n_text < 256 + 64 || n_special < 1 || (l->kind == SV_BPE_LLAMA3 && n_special < 11) ||
        (l->kind == SV_BPE_HARMONY && n_special < 15))
        return herr(err, "synthetic vocabulary layout %d/%d invalid", l->n_text, l->n_vocab);
    add_byte_tokens(b);
    if (grow_from_letters(b, l->n_text, SPACE_BPE, true, false, err)) return -1;
    if (l->kind == SV_BPE_LLAMA3) add_llama3_specials(b, v);
    else if (l->kind == SV_BPE_QWEN) add_qwen_specials(b, v);
    else if (l->kind == SV_BPE_HARMONY) add_harmony_specials(b, v);
    else {
        vb_add(b, "<|endoftext|>", 13, TT_CONTROL, false);
        v->bos = v->eos = v->unk = l->n_text;
    }
    return b->n == l->n_vocab ? 0 : herr(err, "synthetic vocabulary: %d tokens made, %d wanted", b->n, l->n_vocab);
}

/* Moves the builder's arrays into v (pointers into the final arena). */
static int export_vocab(vbuild *b, synth_vocab *v, bool scored, hearth_err *err) {
    v->n = b->n;
    v->tokens = malloc((size_t)b->n * sizeof *v->tokens);
    v->merges = malloc((size_t)(b->n_merges ? b->n_merges : 1) * sizeof *v->merges);
    if (!v->tokens || !v->merges) return herr(err, "out of memory");
    for (int i = 0; i < b->n; i++) v->tokens[i] = b->a + b->off[i];
    for (int i = 0; i < b->n_merges; i++) v->merges[i] = b->a + b->moff[i];
    v->n_merges = b->n_merges;
    v->types = b->type; b->type = NULL;
    if (scored) { v->scores = b->score; b->score = NULL; }
    v->arena = b->a; b->a = NULL;
    return 0;
}

int synth_vocab_build(const synth_vocab_layout *l, synth_vocab *v, hearth_err *err) {
    memset(v, 0, sizeof *v);
    v->bos = v->eos = v->eot = v->pad = v->unk = -1;
    vbuild b;
    if (vb_init(&b, l->n_vocab, 0x5eed0000u + (uint64_t)l->kind)) { vb_free(&b); return herr(err, "out of memory"); }
    int rc = build_tokens(l, &b, v, err);
    if (!rc) rc = export_vocab(&b, v, l->kind == SV_SPM_GEMMA, err);
    vb_free(&b);
    if (rc) synth_vocab_free(v);
    return rc;
}

void synth_vocab_free(synth_vocab *v) {
    free(v->tokens); free(v->types); free(v->scores); free(v->merges); free(v->arena);
    memset(v, 0, sizeof *v);
}
