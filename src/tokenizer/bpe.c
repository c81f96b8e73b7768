/* bpe.c — byte-pair encoding: the merge table, GGUF pre-tokenizer configurations, and per-piece encoding.
 *
 * Merges are held as an open-addressing map (left id, right id) -> (rank, merged id), built once at load,
 * so encoding never touches strings. A piece (one pre-tokenizer output) becomes symbols — for byte-level
 * BPE one per byte via the GPT-2 byte map, otherwise one per UTF-8 character with HF's continuing-subword
 * prefix / end-of-word suffix and <0xNN> byte fallback — in a linked list; a binary min-heap of candidate
 * pairs keyed by (rank, position) applies the lowest-ranked merge first, skipping entries made stale by
 * earlier merges (the pair now at that position has another rank): O(n log n) per piece, as HF's
 * Word::merge_all. With ignore_merges a piece that is
 * itself a token is emitted whole. Results of short pieces are cached for the duration of one encode call.
 * Pieces longer than BPE_CHUNK bytes are encoded in chunks so memory stays bounded on pathological input.
 *
 * The GGUF table maps tokenizer.ggml.pre names to llama.cpp's regex sequences (each regex splits the
 * pieces of the previous one, matches and gaps both kept), using the original Hugging Face patterns where
 * llama.cpp carries a std::regex-friendly rewrite. Qwen vocabularies also get the NFC normalizer their
 * tokenizer.json declares (llama.cpp skips it). */
#include "tok_internal.h"

#include <stdlib.h>

/* ---------------- merge map ---------------- */

int pairmap_init(ht_pairmap *m, size_t n) {
    uint64_t cap = 16;
    while (cap < (uint64_t)n + n / 2) cap <<= 1;   /* load factor <= 2/3 */
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    memset(m->slots, 0xFF, cap * sizeof *m->slots);
    m->mask = cap - 1;
    return 0;
}

void pairmap_put(ht_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint64_t i = pair_hash(key) & m->mask;
    for (;;) {
        ht_pairslot *s = &m->slots[i];
        if (s->key == key) return;   /* duplicate merge: the first (lowest rank) wins */
        if (s->key == UINT64_MAX) { *s = (ht_pairslot){ key, rank, merged }; return; }
        i = (i + 1) & m->mask;
    }
}

#define MERGE_BATCH 32

int bpe_add_merges(ht_vocab *v, const bpe_merge_in *in, size_t n) {
    struct { uint64_t ha, hb, hm; uint32_t moff, ml; int32_t ia, ib, im; uint64_t key; } job[MERGE_BATCH];
    ht_sbuf mbuf = {0};
    for (size_t base = 0; base < n; base += MERGE_BATCH) {
        size_t nb = HT_MIN((size_t)MERGE_BATCH, n - base);
        mbuf.n = 0;
        /* 1: hashes of both parts and of the merged text; prefetch their slots */
        for (size_t k = 0; k < nb; k++) {
            const bpe_merge_in *m = &in[base + k];
            size_t skip = (v->cont_len && m->bl >= v->cont_len && !memcmp(m->b, v->cont_prefix, v->cont_len)) ? v->cont_len : 0;
            job[k].moff = (uint32_t)mbuf.n;
            if (!sbuf_put(&mbuf, m->a, m->al) || !sbuf_put(&mbuf, m->b + skip, m->bl - skip)) { free(mbuf.p); return -1; }
            job[k].ml = (uint32_t)(mbuf.n - job[k].moff);
            job[k].ha = tok_hash(m->a, m->al);
            job[k].hb = tok_hash(m->b, m->bl);
            __builtin_prefetch(&v->map.slots[job[k].ha & v->map.mask]);
            __builtin_prefetch(&v->map.slots[job[k].hb & v->map.mask]);
        }
        for (size_t k = 0; k < nb; k++) {
            job[k].hm = tok_hash(mbuf.p + job[k].moff, job[k].ml);
            __builtin_prefetch(&v->map.slots[job[k].hm & v->map.mask]);
        }
        /* 1b: the slots are arriving; prefetch the token texts they point at */
        for (size_t k = 0; k < nb; k++) {
            const uint64_t hh[3] = { job[k].ha, job[k].hb, job[k].hm };
            for (int q = 0; q < 3; q++) {
                const ht_strslot *sl = &v->map.slots[hh[q] & v->map.mask];
                if (sl->id1) __builtin_prefetch(v->tbuf + sl->off);
            }
        }
        /* 2: resolve ids; prefetch the merge-map slot */
        for (size_t k = 0; k < nb; k++) {
            const bpe_merge_in *m = &in[base + k];
            job[k].ia = vocab_lookup_h(v, m->a, m->al, job[k].ha);
            job[k].ib = job[k].ia < 0 ? -1 : vocab_lookup_h(v, m->b, m->bl, job[k].hb);
            job[k].im = job[k].ib < 0 ? -1 : vocab_lookup_h(v, mbuf.p + job[k].moff, job[k].ml, job[k].hm);
            if (job[k].im >= 0) {
                job[k].key = (uint64_t)(uint32_t)job[k].ia << 32 | (uint32_t)job[k].ib;
                __builtin_prefetch(&v->merges.slots[pair_hash(job[k].key) & v->merges.mask], 1);
            }
        }
        /* 3: insert */
        for (size_t k = 0; k < nb; k++)
            if (job[k].im >= 0) pairmap_put(&v->merges, job[k].ia, job[k].ib, (int32_t)(base + k), job[k].im);
    }
    free(mbuf.p);
    return 0;
}

/* ---------------- GGUF pre-tokenizers ---------------- */

#define CONTRACTIONS "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define RE_LLAMA3 CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN35 CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT4O "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" CONTRACTIONS "?" \
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" CONTRACTIONS "?" \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_TEKKEN "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" \
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" \
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_DEEPSEEK3 "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+" \
    "| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_CJK "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
#define RE_BLOOM " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{0964}\\x{06D4}\\x{060C})]+"

enum { PF_IGNORE_MERGES = 1, PF_ADD_BOS = 2, PF_NFC = 4, PF_NO_BOS = 8 };

typedef struct {
    const char *names;       /* '|'-separated tokenizer.ggml.pre values */
    int flags;
    const char *re[7];
} pre_def;

static const pre_def PRE_DEFS[] = {
    { "default", 0, { "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]" } },
    { "llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano", PF_IGNORE_MERGES | PF_ADD_BOS,
      { RE_LLAMA3 } },
    { "dbrx|smaug-bpe", 0, { RE_LLAMA3 } },
    { "glm4|chatglm-bpe", PF_NO_BOS, { RE_LLAMA3 } },
    { "deepseek-llm", 0, { "[\\r\\n]",
      "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"
      "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"
      "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"
      "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
      "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
      "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-"
      "\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}"
      "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}"
      "\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}"
      "\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}"
      "\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}"
      "\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}"
      "\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}"
      "\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-"
      "\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+",
      "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
      "\\s+$", RE_CJK, "\\p{N}+" } },
    { "deepseek-coder", 0, { "[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_CJK, "\\p{N}" } },
    { "deepseek-v3|hunyuan-dense|joyai-llm|hy_v4", 0,
      { "\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+", RE_DEEPSEEK3 } },
    { "falcon", 0, { "[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]" } },
    { "starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b|mellum2", 0, { "\\p{N}", RE_GPT2 } },
    { "gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|a.x-4.0|mellum|modern-bert|mpt|olmo|jais|trillion|"
      "granite-docling|exaone4|jina-v1-en|jina-v2-en|jina-v2-code|roberta-bpe", 0, { RE_GPT2 } },
    { "qwen2|deepseek-r1-qwen|kormo|f2llmv2|megrez", PF_NFC, { RE_QWEN2 } },
    { "stablelm2|hunyuan|solar-open|grok-2", 0, { RE_QWEN2 } },
    { "qwen35", PF_NFC, { RE_QWEN35 } },
    { "poro-chat|bloom|gpt3-finnish", 0, { RE_BLOOM } },
    { "viking", 0, { RE_BLOOM, "\\p{N}" } },
    { "tekken", PF_IGNORE_MERGES | PF_ADD_BOS, { RE_TEKKEN } },
    { "chameleon", PF_ADD_BOS, { "<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )",
      "\\p{N}", "[\\p{P}!-/:-@\\[-`{-~]", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)" } },
    { "gpt-4o|llama4|kanana2|talkie|minimax-m2", 0, { RE_GPT4O } },
    { "tiny_aya|cohere2moe", 0, { "\\d{1,3}(?=(?:\\d{3})*\\b)", RE_GPT4O } },
    { "bailingmoe|bailingmoe2|llada-moe", 0,
      { "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+" } },
    { "seed-coder", 0, { CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" } },
    { "exaone-moe", 0, { CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?"
      "|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+" } },
    { "minicpm5", PF_IGNORE_MERGES, { "\\p{N}{1,3}", CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
      "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" } },
    { "ufakzeka", 0, { "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" } },
};

static bool name_in(const char *names, const char *s, size_t n) {
    for (const char *p = names; *p;) {
        const char *e = strchr(p, '|');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && !memcmp(p, s, n)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

int bpe_setup_pre(ht_vocab *v, const char *pre, size_t pre_len, hearth_err *err) {
    if (!pre_len) { pre = "default"; pre_len = 7; }
    const pre_def *d = NULL;
    for (size_t i = 0; i < sizeof PRE_DEFS / sizeof PRE_DEFS[0] && !d; i++)
        if (name_in(PRE_DEFS[i].names, pre, pre_len)) d = &PRE_DEFS[i];
    if (!d) return herr(err, "unknown pre-tokenizer type '%.*s'", (int)HT_MIN(pre_len, 64), pre);
    int n_re = 0;
    while (n_re < 7 && d->re[n_re]) n_re++;
    v->pipe.pre = calloc((size_t)n_re, sizeof(ht_pre));
    if (!v->pipe.pre) return herr(err, "out of memory");
    for (int i = 0; i < n_re; i++) {
        ht_pre *st = &v->pipe.pre[v->pipe.n_pre];
        *st = (ht_pre){ .type = PS_SPLIT, .behavior = SB_ISOLATED };
        if (!(st->re = regex_compile(d->re[i], strlen(d->re[i]), err))) return -1;
        v->pipe.n_pre++;
    }
    if (d->flags & PF_NFC) {
        v->pipe.norm = calloc(1, sizeof(ht_norm));
        if (!v->pipe.norm) return herr(err, "out of memory");
        v->pipe.norm[0].type = NS_NFC;
        v->pipe.n_norm = 1;
    }
    v->ignore_merges = d->flags & PF_IGNORE_MERGES;
    if (d->flags & PF_ADD_BOS) v->add_bos = true;
    if (d->flags & PF_NO_BOS) v->bos = -1;
    return 0;
}

/* ---------------- encoding ---------------- */

#define BPE_CHUNK (1u << 20)
#define CACHE_MAX_ENTRIES (1u << 20)

/* The heap holds keys rank << 32 | left symbol: the lowest rank first, then the leftmost position. */
static bool heap_push(tok_ws *w, uint64_t key) {
    if (w->n_heap == w->cap_heap) {
        size_t nc = w->cap_heap ? w->cap_heap * 2 : 256;
        uint64_t *p = realloc(w->heap, nc * sizeof *p);
        if (!p) return false;
        w->heap = p; w->cap_heap = nc;
    }
    size_t i = w->n_heap++;
    while (i > 0) {
        size_t par = (i - 1) / 2;
        if (w->heap[par] <= key) break;
        w->heap[i] = w->heap[par];
        i = par;
    }
    w->heap[i] = key;
    return true;
}

static uint64_t heap_pop(tok_ws *w) {
    uint64_t top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && w->heap[c + 1] < w->heap[c]) c++;
        if (w->heap[c] >= last) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

/* Starts loading the merge-map slot of the pair at (a, b): lookups are bound by memory latency. */
static inline void prefetch_pair(const ht_vocab *v, const tok_ws *w, int32_t a, int32_t b) {
    if (a < 0 || b < 0) return;
    uint64_t key = (uint64_t)(uint32_t)w->sym[a].id << 32 | (uint32_t)w->sym[b].id;
    __builtin_prefetch(&v->merges.slots[pair_hash(key) & v->merges.mask]);
}

static bool try_pair(const ht_vocab *v, tok_ws *w, int32_t a, int32_t b) {
    if (a < 0 || b < 0) return true;
    int32_t la = w->sym[a].id, lb = w->sym[b].id, rank, merged;
    if (la < 0 || lb < 0 || !pairmap_get(&v->merges, la, lb, &rank, &merged)) return true;
    return heap_push(w, (uint64_t)(uint32_t)rank << 32 | (uint32_t)a);
}

static bool sym_reserve(tok_ws *w, size_t n) {
    if (w->cap_sym >= n) return true;
    size_t nc = w->cap_sym ? w->cap_sym : 64;
    while (nc < n) nc *= 2;
    bpe_sym *p = realloc(w->sym, nc * sizeof *p);
    if (!p) return false;
    w->sym = p; w->cap_sym = nc;
    return true;
}

static bool sym_add(tok_ws *w, size_t *m, int32_t id) {
    if (!sym_reserve(w, *m + 1)) return false;
    w->sym[*m] = (bpe_sym){ id, (int32_t)*m - 1, (int32_t)*m + 1 };
    (*m)++;
    return true;
}

/* Symbols of a non-byte-level piece: characters with affixes, byte fallback, or unknown (-1). */
static bool char_symbols(const ht_vocab *v, const char *s, size_t n, tok_ws *w, size_t *m) {
    ht_sbuf *t = &w->tmp;
    for (size_t i = 0; i < n;) {
        int l = utf8_valid_len((const uint8_t *)s + i, n - i);
        if (!l) l = 1;
        bool first = i == 0, last = i + (size_t)l == n;
        t->n = 0;
        if (!first && v->cont_len && !sbuf_put(t, v->cont_prefix, v->cont_len)) return false;
        if (!sbuf_put(t, s + i, (size_t)l)) return false;
        if (last && v->suffix_len && !sbuf_put(t, v->word_suffix, v->suffix_len)) return false;
        int32_t id = vocab_lookup(v, t->p, t->n);
        if (id >= 0) { if (!sym_add(w, m, id)) return false; }
        else {
            bool all = v->byte_fallback;
            for (int k = 0; k < l && all; k++) all = v->byte_id[(uint8_t)s[i + (size_t)k]] >= 0;
            if (all) { for (int k = 0; k < l; k++) if (!sym_add(w, m, v->byte_id[(uint8_t)s[i + (size_t)k]])) return false; }
            else if (!sym_add(w, m, -1)) return false;
        }
        i += (size_t)l;
    }
    return true;
}

static int bpe_chunk(const ht_vocab *v, const char *s, size_t n, tok_ws *w, ht_ivec *out) {
    bool affixes = v->cont_len || v->suffix_len;
    if (v->newline_runs_whole && n && s[0] == '\n') {   /* pieces are all newlines or have none */
        int32_t id = vocab_lookup(v, s, n);
        if (id >= 0) return ivec_push(out, id) ? 0 : -1;
    }
    if (v->ignore_merges || (v->byte_level && affixes)) {
        ht_sbuf *t = &w->tmp;
        t->n = 0;
        if (v->byte_level) {
            if (!sbuf_reserve(t, 2 * n)) return -1;
            for (size_t i = 0; i < n; i++) {
                const uint8_t *b = v->bl[(uint8_t)s[i]];
                memcpy(t->p + t->n, b + 1, b[0]);
                t->n += b[0];
            }
        } else if (!sbuf_put(t, s, n)) return -1;
        if (v->ignore_merges) {
            int32_t id = vocab_lookup(v, t->p, t->n);
            if (id >= 0) return ivec_push(out, id) ? 0 : -1;
        }
    }
    size_t m = 0;
    if (v->byte_level && !affixes) {
        if (!sym_reserve(w, n)) return -1;
        for (size_t i = 0; i < n; i++) w->sym[i] = (bpe_sym){ v->byte_id[(uint8_t)s[i]], (int32_t)i - 1, (int32_t)i + 1 };
        m = n;
    } else if (v->byte_level) {   /* affixes on byte-level text: characters of the mapped text */
        ht_sbuf mapped = w->tmp;
        w->tmp = (ht_sbuf){0};
        bool ok = char_symbols(v, mapped.p, mapped.n, w, &m);
        free(w->tmp.p);
        w->tmp = mapped;
        if (!ok) return -1;
    } else if (!char_symbols(v, s, n, w, &m)) return -1;
    if (!m) return 0;
    w->sym[m - 1].next = -1;
    w->n_heap = 0;
    for (size_t i = 0; i + 1 < m; i++) {
        if (i + 8 + 1 < m) prefetch_pair(v, w, (int32_t)i + 8, (int32_t)i + 9);
        else if (i == 0) for (size_t j = 0; j + 1 < m && j < 8; j++) prefetch_pair(v, w, (int32_t)j, (int32_t)j + 1);
        if (!try_pair(v, w, (int32_t)i, (int32_t)i + 1)) return -1;
    }
    while (w->n_heap) {
        /* an entry is stale when its pair has changed since it was pushed: the pair now at that position
         * has another rank (ranks identify merges), or there is no pair there any more */
        uint64_t key = heap_pop(w);
        int32_t a = (int32_t)(uint32_t)key, rank, merged;
        bpe_sym *L = &w->sym[a];
        if (L->id < 0 || L->next < 0) continue;
        int32_t b = L->next;
        bpe_sym *R = &w->sym[b];
        if (R->id < 0 || !pairmap_get(&v->merges, L->id, R->id, &rank, &merged) || (uint32_t)rank != (uint32_t)(key >> 32))
            continue;
        L->id = merged;
        L->next = R->next;
        if (R->next >= 0) w->sym[R->next].prev = a;
        R->id = -2;
        prefetch_pair(v, w, L->prev, a);
        prefetch_pair(v, w, a, L->next);
        if (!try_pair(v, w, L->prev, a) || !try_pair(v, w, a, L->next)) return -1;
    }
    bool prev_unk = false;
    for (int32_t i = 0; i >= 0; i = w->sym[i].next) {
        int32_t id = w->sym[i].id;
        if (id < 0) {
            if (v->unk < 0 || (v->fuse_unk && prev_unk)) { prev_unk = true; continue; }
            id = v->unk;
            prev_unk = true;
        } else prev_unk = false;
        if (!ivec_push(out, id)) return -1;
    }
    return 0;
}

static int bpe_word(const ht_vocab *v, const char *s, size_t n, tok_ws *w, ht_ivec *out) {
    size_t start = 0;
    while (start < n) {
        size_t end = n;
        if (n - start > BPE_CHUNK) {
            end = start + BPE_CHUNK;
            while (end > start + 1 && ((uint8_t)s[end] & 0xC0) == 0x80) end--;
        }
        if (bpe_chunk(v, s + start, end - start, w, out)) return -1;
        start = end;
    }
    return 0;
}

/* Cache of piece -> ids for one encode call. */
static bool cache_grow(bpe_cache *c) {
    uint64_t cap = c->slots ? (c->mask + 1) * 2 : 4096;
    uint64_t *ns = calloc(cap, sizeof *ns);
    if (!ns) return false;
    for (uint64_t i = 0; c->slots && i <= c->mask; i++) {
        uint64_t e = c->slots[i];
        if (!e) continue;
        uint32_t *en = &c->ent[4 * ((uint32_t)e - 1)];
        uint64_t j = tok_hash(c->text.p + en[0], en[1]) & (cap - 1);
        while (ns[j]) j = (j + 1) & (cap - 1);
        ns[j] = e;
    }
    free(c->slots);
    c->slots = ns;
    c->mask = cap - 1;
    return true;
}

bool piece_cache_get(tok_ws *w, const char *s, size_t n, ht_ivec *out) {
    bpe_cache *c = &w->cache;
    if (!c->slots) return false;
    uint64_t h = tok_hash(s, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (uint64_t i = h & c->mask;; i = (i + 1) & c->mask) {
        uint64_t e = c->slots[i];
        if (!e) return false;
        if ((uint32_t)(e >> 32) != tag) continue;
        const uint32_t *en = &c->ent[4 * ((uint32_t)e - 1)];
        if (en[1] == n && !memcmp(c->text.p + en[0], s, n)) {
            for (uint32_t k = 0; k < en[3]; k++) if (!ivec_push(out, c->ids.v[en[2] + k])) return false;
            return true;
        }
    }
}

/* Best effort: a full cache or a failed allocation just means no caching. */
void piece_cache_put(tok_ws *w, const char *s, size_t n, const int32_t *ids, size_t k) {
    bpe_cache *c = &w->cache;
    if (c->n_ent >= CACHE_MAX_ENTRIES || c->text.n + n > UINT32_MAX / 2 || c->ids.n + k > UINT32_MAX / 2) return;
    if ((!c->slots || (c->n_ent + 1) * 2 > c->mask + 1) && !cache_grow(c)) return;
    if (c->n_ent == c->cap_ent) {
        size_t nc = c->cap_ent ? c->cap_ent * 2 : 1024;
        uint32_t *p = realloc(c->ent, nc * 4 * sizeof *p);
        if (!p) return;
        c->ent = p; c->cap_ent = nc;
    }
    size_t t0 = c->text.n, i0 = c->ids.n;
    if (!sbuf_put(&c->text, s, n)) return;
    for (size_t j = 0; j < k; j++) if (!ivec_push(&c->ids, ids[j])) { c->ids.n = i0; c->text.n = t0; return; }
    uint32_t *en = &c->ent[4 * c->n_ent];
    en[0] = (uint32_t)t0; en[1] = (uint32_t)n; en[2] = (uint32_t)i0; en[3] = (uint32_t)k;
    uint64_t h = tok_hash(s, n), i = h & c->mask;
    while (c->slots[i]) i = (i + 1) & c->mask;
    c->slots[i] = (h >> 32 << 32) | (uint64_t)(++c->n_ent);
}

int bpe_encode_piece(const ht_vocab *v, const char *s, size_t n, tok_ws *w, ht_ivec *out) {
    if (n > CACHE_MAX_PIECE) return bpe_word(v, s, n, w, out);
    if (piece_cache_get(w, s, n, out)) return 0;
    size_t first = out->n;
    if (bpe_word(v, s, n, w, out)) return -1;
    if (out->n > first) piece_cache_put(w, s, n, out->v + first, out->n - first);
    return 0;
}

void ws_free(tok_ws *ws) {
    rx_free(&ws->rx);
    free(ws->buf.p); free(ws->buf2.p); free(ws->tmp.p);
    free(ws->spans.v); free(ws->spans2.v);
    free(ws->sym); free(ws->heap);
    free(ws->cache.slots); free(ws->cache.ent); free(ws->cache.text.p); free(ws->cache.ids.v);
    memset(ws, 0, sizeof *ws);
}
