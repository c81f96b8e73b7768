/* wpm.c — WordPiece: greedy longest-match-first over one pre-tokenized word, as Hugging Face's WordPiece
 * model (and llama.cpp's WPM) does it.
 *
 * A word longer than wpm_max_chars characters (100) is [UNK]. Otherwise, from the start of the word, the
 * longest vocabulary entry matching at the current position is taken — looked up with the word-initial
 * affix at position 0 and the continuation affix elsewhere ("" / "##" for Hugging Face vocabularies,
 * "▁" / "" for GGUF files, which store word-initial pieces with a leading ▁) — and the search resumes
 * after it. If some position has no match the whole word becomes [UNK]. Matches end on character
 * boundaries only and are at most the longest token long, so a word costs O(chars × max token bytes).
 * wpm_encode_piece adds the per-call cache of short words. */
#include "tok_internal.h"

int wpm_encode_word(const ht_vocab *v, const char *s, size_t n, ht_ivec *out) {
    size_t chars = 0;
    for (size_t i = 0; i < n; chars++) {
        int l = utf8_valid_len((const uint8_t *)s + i, n - i);
        i += (size_t)(l ? l : 1);
    }
    if (!n) return 0;
    size_t first = out->n;
    if (chars > (size_t)v->wpm_max_chars) goto unknown;
    size_t sl = strlen(v->wpm_start), cl = strlen(v->wpm_cont);
    char buf[512];
    for (size_t pos = 0; pos < n;) {
        const char *aff = pos ? v->wpm_cont : v->wpm_start;
        size_t al = pos ? cl : sl;
        size_t max_end = HT_MIN(n, pos + (size_t)v->max_len);
        int32_t found = -1;
        size_t end = max_end;
        while (end > pos) {
            if (end < n && ((uint8_t)s[end] & 0xC0) == 0x80 && end > pos + 1) { end--; continue; }   /* not a boundary */
            if (al + end - pos <= sizeof buf) {
                memcpy(buf, aff, al);
                memcpy(buf + al, s + pos, end - pos);
                found = vocab_lookup(v, buf, al + end - pos);
                if (found >= 0) break;
            }
            end--;
        }
        if (found < 0) { out->n = first; goto unknown; }
        if (!ivec_push(out, found)) return -1;
        pos = end;
    }
    return 0;
unknown:
    if (v->unk >= 0 && !ivec_push(out, v->unk)) return -1;
    return 0;
}

int wpm_encode_piece(const ht_vocab *v, const char *s, size_t n, tok_ws *ws, ht_ivec *out) {
    if (n > CACHE_MAX_PIECE) return wpm_encode_word(v, s, n, out);
    if (piece_cache_get(ws, s, n, out)) return 0;
    size_t first = out->n;
    if (wpm_encode_word(v, s, n, out)) return -1;
    if (out->n > first) piece_cache_put(ws, s, n, out->v + first, out->n - first);
    return 0;
}
