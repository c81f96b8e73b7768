/* spm.c — SentencePiece (BPE-by-score) encoding as llama.cpp's llm_tokenizer_spm does it.
 *
 * The (already ▁-escaped) text is split into UTF-8 characters (an invalid byte is a symbol of its own),
 * kept as a doubly linked list. Every adjacent pair whose concatenation is a vocabulary token goes into a
 * max-heap keyed by that token's score (ties: leftmost first). Popping the best pair merges it, skipping
 * pairs made stale by earlier merges, and offers the two new neighbour pairs: O(n log n). Each final symbol
 * is its token, or, when it is not in the vocabulary, its bytes as <0xNN> tokens (byte fallback), or <unk>.
 * When no mergeable token contains "▁" right after another character (true of SentencePiece vocabularies;
 * checked at load), the text is cut before every such "▁" — exactly, since no merge can span the cut — and
 * the words are encoded separately with a per-call cache. Otherwise the text is one sequence, cut only
 * every 1 MiB (preferably at such a point) so memory stays bounded on pathological input. */
#include "tok_internal.h"

#include <stdlib.h>

typedef struct { uint32_t off, n; int32_t prev, next; } spm_sym;
typedef struct { float score; int32_t left, right; uint32_t size; } spm_bigram;

typedef struct {
    spm_sym *sym; size_t n_sym, cap_sym;
    spm_bigram *heap; size_t n_heap, cap_heap;
} spm_work;

/* heap order: higher score first, then smaller left index */
static bool bg_before(const spm_bigram *a, const spm_bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static bool heap_push(spm_work *w, spm_bigram b) {
    if (w->n_heap == w->cap_heap) {
        size_t nc = w->cap_heap ? w->cap_heap * 2 : 64;
        spm_bigram *p = realloc(w->heap, nc * sizeof *p);
        if (!p) return false;
        w->heap = p; w->cap_heap = nc;
    }
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t par = (i - 1) / 2;
        if (!bg_before(&b, &w->heap[par])) break;
        w->heap[i] = w->heap[par];
        i = par;
    }
    w->heap[i] = b;
    return true;
}

static spm_bigram heap_pop(spm_work *w) {
    spm_bigram top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bg_before(&w->heap[c + 1], &w->heap[c])) c++;
        if (!bg_before(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

/* Tokens that may result from a merge: llama.cpp accepts any token; control/unknown ones are excluded
 * here, as SentencePiece never produces them from text. */
static bool try_bigram(const ht_vocab *v, const char *s, spm_work *w, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return true;
    const spm_sym *l = &w->sym[left], *r = &w->sym[right];
    int32_t id = vocab_lookup(v, s + l->off, l->n + r->n);
    if (id < 0 || v->type[id] == TT_CONTROL || v->type[id] == TT_UNKNOWN) return true;
    return heap_push(w, (spm_bigram){ v->score[id], left, right, l->n + r->n });
}

static bool emit_symbol(const ht_vocab *v, const char *s, size_t n, ht_ivec *out) {
    int32_t id = vocab_lookup(v, s, n);
    if (id >= 0) return ivec_push(out, id);
    for (size_t j = 0; j < n; j++) {
        int32_t b = v->byte_id[(uint8_t)s[j]];
        if (b < 0) b = v->unk;
        if (b >= 0 && !ivec_push(out, b)) return false;
    }
    return true;
}

static int spm_encode_chunk(const ht_vocab *v, const char *s, size_t n, spm_work *w, ht_ivec *out) {
    w->n_sym = 0; w->n_heap = 0;
    if (!n) return 0;
    if (w->cap_sym < n) {
        spm_sym *p = realloc(w->sym, n * sizeof *p);
        if (!p) return -1;
        w->sym = p; w->cap_sym = n;
    }
    for (size_t off = 0; off < n;) {
        int l = utf8_valid_len((const uint8_t *)s + off, n - off);
        if (l == 0) l = 1;
        int32_t idx = (int32_t)w->n_sym;
        w->sym[w->n_sym++] = (spm_sym){ (uint32_t)off, (uint32_t)l, idx - 1, off + (size_t)l == n ? -1 : idx + 1 };
        off += (size_t)l;
    }
    for (size_t i = 1; i < w->n_sym; i++)
        if (!try_bigram(v, s, w, (int32_t)i - 1, (int32_t)i)) return -1;
    while (w->n_heap) {
        spm_bigram b = heap_pop(w);
        spm_sym *l = &w->sym[b.left], *r = &w->sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size || l->next != b.right) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) w->sym[r->next].prev = b.left;
        if (!try_bigram(v, s, w, l->prev, b.left) || !try_bigram(v, s, w, b.left, l->next)) return -1;
    }
    for (int32_t i = 0; i != -1; i = w->sym[i].next)
        if (!emit_symbol(v, s + w->sym[i].off, w->sym[i].n, out)) return -1;
    return 0;
}

#define SPM_CHUNK (1u << 20)
#define SPACE "\xe2\x96\x81"

/* A "▁" at i that follows another character: a point no mergeable token spans when spm_word_split. */
static bool word_start(const char *s, size_t i) {
    return !memcmp(s + i, SPACE, 3) && i >= 1 && !(i >= 3 && !memcmp(s + i - 3, SPACE, 3));
}

static int encode_word(const ht_vocab *v, const char *s, size_t n, spm_work *w, tok_ws *ws, ht_ivec *out) {
    if (n > CACHE_MAX_PIECE) return spm_encode_chunk(v, s, n, w, out);
    if (piece_cache_get(ws, s, n, out)) return 0;
    size_t first = out->n;
    if (spm_encode_chunk(v, s, n, w, out)) return -1;
    if (out->n > first) piece_cache_put(ws, s, n, out->v + first, out->n - first);
    return 0;
}

int spm_encode(const ht_vocab *v, const char *s, size_t n, tok_ws *ws, ht_ivec *out) {
    spm_work w = {0};
    int rc = 0;
    size_t start = 0;
    while (start < n && !rc) {
        size_t end = n;
        if (v->spm_word_split) {   /* exact: cut before every word-initial "▁" (and at most every SPM_CHUNK bytes) */
            size_t lim = HT_MIN(n, start + SPM_CHUNK);
            for (end = start + 1; end + 3 <= lim && !word_start(s, end); end++) {}
            if (end + 3 > lim) end = lim;
        } else if (n - start > SPM_CHUNK) {
            /* cut before a "▁" that follows something else, searching back from the chunk limit */
            size_t lim = start + SPM_CHUNK;
            end = 0;
            for (size_t i = HT_MIN(lim, n - 3); i > start + 3 && !end; i--) if (word_start(s, i)) end = i;
            if (!end) end = lim;
        }
        while (end < n && end > start + 1 && ((uint8_t)s[end] & 0xC0) == 0x80) end--;   /* character boundary */
        rc = encode_word(v, s + start, end - start, &w, ws, out);
        start = end;
    }
    free(w.sym); free(w.heap);
    return rc;
}
