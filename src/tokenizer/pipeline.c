/* pipeline.c — text normalizers and pre-tokenizers, modelled on Hugging Face `tokenizers`.
 *
 * A normalizer rewrites a whole text fragment (NFC/NFD/NFKC/NFKD via utf8proc, lowercase, accent
 * stripping, literal or regex Replace, Prepend, Strip, and the BERT normalizer). A pre-tokenizer step maps
 * a list of pieces (byte ranges of a buffer) to a finer list: regex Split with HF's five delimiter
 * behaviours, ByteLevel (optional prefix space and GPT-2 regex; the byte -> char mapping itself happens in
 * the BPE model), Metaspace, BERT, Whitespace, WhitespaceSplit, Digits and Punctuation. Regexes are PCRE2 in
 * UTF + UCP mode with JIT and PCRE2_MATCH_INVALID_UTF, so invalid UTF-8 never matches and simply ends up
 * in the gaps between matches, which are pieces too; no input can make a step fail except running out of
 * memory. Invalid UTF-8 passes through the normalizers unchanged, except BERT's, whose clean-up drops it
 * (as it drops U+FFFD). */
#include "tok_internal.h"

#include <stdlib.h>
#include <utf8proc.h>

/* ---------------- spans ---------------- */

bool spans_push(ht_spans *a, size_t off, size_t len) {
    if (!len) return true;
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        ht_span *p = realloc(a->v, nc * sizeof *p);
        if (!p) return false;
        a->v = p; a->cap = nc;
    }
    a->v[a->n++] = (ht_span){ off, len };
    return true;
}

/* ---------------- Unicode helpers ---------------- */

bool uc_is_whitespace(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool uc_is_punct(uint32_t c) {
    int cat = utf8proc_category((utf8proc_int32_t)c);
    return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

bool uc_is_bert_punct(uint32_t c) {
    if (c < 0x80) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
    return uc_is_punct(c);
}

static bool uc_is_other(uint32_t c) {   /* Cc Cf Cs Co Cn */
    int cat = utf8proc_category((utf8proc_int32_t)c);
    return cat == UTF8PROC_CATEGORY_CN || cat >= UTF8PROC_CATEGORY_CC;
}

static bool uc_is_mn(uint32_t c) { return utf8proc_category((utf8proc_int32_t)c) == UTF8PROC_CATEGORY_MN; }

static bool uc_is_chinese(uint32_t c) {   /* the ranges of HF's BertNormalizer (and llama.cpp) */
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

int uc_lower(uint32_t c, uint32_t out[3]) {
    if (c < 0x80) { out[0] = (c >= 'A' && c <= 'Z') ? c + 32 : c; return 1; }
    if (c == 0x130) { out[0] = 'i'; out[1] = 0x307; return 2; }   /* the one multi-char lowercase mapping */
    out[0] = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
    return 1;
}

/* ---------------- regex ---------------- */

static pcre2_code *compile_raw(const char *pat, size_t len, uint32_t extra, hearth_err *err) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | extra, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        herr(err, "bad tokenizer regex at offset %zu: %s", (size_t)eo, (const char *)msg);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);   /* falls back to the interpreter if JIT is unavailable */
    return re;
}

pcre2_code *regex_compile(const char *pat, size_t len, hearth_err *err) { return compile_raw(pat, len, PCRE2_UCP, err); }

pcre2_code *regex_compile_literal(const char *s, size_t len, hearth_err *err) {
    return compile_raw(s, len, PCRE2_LITERAL, err);
}

typedef struct { size_t off, len; bool match; } seg;
typedef struct { seg *v; size_t n, cap; } segs;

static bool seg_push(segs *a, size_t off, size_t len, bool match) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 32;
        seg *p = realloc(a->v, nc * sizeof *p);
        if (!p) return false;
        a->v = p; a->cap = nc;
    }
    a->v[a->n++] = (seg){ off, len, match };
    return true;
}

/* Runs re over buf[off, off+len): calls back with each match (start, end) relative to buf. Empty matches
 * are skipped (advancing one character), as Oniguruma's find_iter does. A matching error (limits) ends the
 * search; the rest stays one gap. */
typedef bool (*match_fn)(void *ctx, size_t ms, size_t me);

static int rx_ready(rx_ctx *rx) {
    if (rx->md) return 0;
    rx->md = pcre2_match_data_create(1, NULL);
    rx->mc = pcre2_match_context_create(NULL);
    if (!rx->md || !rx->mc) { rx_free(rx); return -1; }
    return 0;
}

/* JIT matching runs on a 32 KiB stack by default; a pattern that needs more (deep group repetition on a long
 * piece) gets an 8 MiB one, created only then. */
static bool rx_grow_stack(rx_ctx *rx) {
    if (rx->js) return false;
    if (!(rx->js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL))) return false;
    pcre2_jit_stack_assign(rx->mc, NULL, rx->js);
    return true;
}

void rx_free(rx_ctx *rx) {
    pcre2_match_data_free(rx->md);
    pcre2_match_context_free(rx->mc);
    pcre2_jit_stack_free(rx->js);
    memset(rx, 0, sizeof *rx);
}

static int regex_each(const pcre2_code *re, const char *buf, size_t off, size_t len, rx_ctx *rx, match_fn fn, void *ctx) {
    if (rx_ready(rx)) return -1;
    const PCRE2_SPTR subj = (PCRE2_SPTR)(buf + off);
    size_t pos = 0;
    while (pos <= len) {
        int r = pcre2_match(re, subj, len, pos, 0, rx->md, rx->mc);
        if (r == PCRE2_ERROR_JIT_STACKLIMIT && rx_grow_stack(rx)) continue;
        if (r < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(rx->md);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) {   /* empty match: step over one character */
            if (ms >= len) break;
            int l = utf8_valid_len((const uint8_t *)subj + ms, len - ms);
            pos = ms + (size_t)(l ? l : 1);
            continue;
        }
        if (!fn(ctx, off + ms, off + me)) return -1;
        pos = me;
    }
    return 0;
}

typedef struct { segs *s; size_t prev; } seg_ctx;
static bool collect_seg(void *ctx, size_t ms, size_t me) {
    seg_ctx *c = ctx;
    if (ms > c->prev && !seg_push(c->s, c->prev, ms - c->prev, false)) return false;
    if (!seg_push(c->s, ms, me - ms, true)) return false;
    c->prev = me;
    return true;
}

/* Applies an HF delimiter behaviour to segments (match flags already inverted if asked). */
static int apply_behavior(segs *sg, int behavior, ht_spans *out) {
    size_t n = sg->n;
    seg *s = sg->v;
    switch (behavior) {
    case SB_REMOVED:
        for (size_t i = 0; i < n; i++) if (!s[i].match && !spans_push(out, s[i].off, s[i].len)) return -1;
        return 0;
    case SB_ISOLATED:
        for (size_t i = 0; i < n; i++) if (!spans_push(out, s[i].off, s[i].len)) return -1;
        return 0;
    case SB_CONTIGUOUS:
    case SB_MERGED_PREV: {
        size_t k = 0;
        bool prev_match = false;
        for (size_t i = 0; i < n; i++) {
            bool join = behavior == SB_CONTIGUOUS ? (s[i].match == prev_match) : (s[i].match && !prev_match);
            if (join && k > 0) s[k - 1].len = s[i].off + s[i].len - s[k - 1].off;
            else s[k++] = s[i];
            prev_match = s[i].match;
        }
        for (size_t i = 0; i < k; i++) if (!spans_push(out, s[i].off, s[i].len)) return -1;
        return 0;
    }
    case SB_MERGED_NEXT: {
        /* walk backwards: a delimiter joins the piece after it */
        size_t k = n;   /* output built from the end at s[k..n) */
        bool prev_match = false;
        for (size_t ii = n; ii-- > 0;) {
            seg cur = s[ii];
            bool join = cur.match && !prev_match;
            if (join && k < n) { s[k].len = s[k].off + s[k].len - cur.off; s[k].off = cur.off; }
            else s[--k] = cur;
            prev_match = cur.match;
        }
        for (size_t i = k; i < n; i++) if (!spans_push(out, s[i].off, s[i].len)) return -1;
        return 0;
    }
    }
    return -1;
}

typedef struct { ht_spans *out; size_t prev; } iso_ctx;
static bool push_isolated(void *ctx, size_t ms, size_t me) {
    iso_ctx *c = ctx;
    if (ms > c->prev && !spans_push(c->out, c->prev, ms - c->prev)) return false;
    if (!spans_push(c->out, ms, me - ms)) return false;
    c->prev = me;
    return true;
}

int regex_split(const pcre2_code *re, const char *buf, size_t off, size_t len, int behavior, bool invert, rx_ctx *rx,
                ht_spans *out) {
    if (!len) return 0;
    if (behavior == SB_ISOLATED) {   /* the common case, straight to the output */
        iso_ctx c = { out, off };
        if (regex_each(re, buf, off, len, rx, push_isolated, &c)) return -1;
        return (c.prev < off + len && !spans_push(out, c.prev, off + len - c.prev)) ? -1 : 0;
    }
    segs sg = {0};
    seg_ctx c = { &sg, off };
    int rc = regex_each(re, buf, off, len, rx, collect_seg, &c);
    if (!rc && c.prev < off + len && !seg_push(&sg, c.prev, off + len - c.prev, false)) rc = -1;
    if (!rc && invert) for (size_t i = 0; i < sg.n; i++) sg.v[i].match = !sg.v[i].match;
    if (!rc) rc = apply_behavior(&sg, behavior, out);
    free(sg.v);
    return rc;
}

/* ---------------- normalizers ---------------- */

/* Applies a utf8proc normalization (NFC/NFD/NFKC/NFKD) to s. ASCII is unchanged by all four and an ASCII
 * character followed by another ASCII character never combines with anything, so only the stretches around
 * non-ASCII text go through utf8proc (each with the ASCII character before it, which a combining mark may
 * attach to). Invalid bytes are copied unchanged and end a stretch. */
static int norm_utf8proc(const char *s, size_t n, int opts, ht_sbuf *out) {
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && u[j] < 0x80 && (j + 1 == n || u[j + 1] < 0x80)) j++;
        if (j > i && !sbuf_put(out, s + i, j - i)) return -1;
        i = j;
        if (i == n) break;
        size_t k = i;
        while (k < n && !(u[k] < 0x80 && (k + 1 == n || u[k + 1] < 0x80))) {
            int l = utf8_valid_len(u + k, n - k);
            if (!l) break;
            k += (size_t)l;
        }
        if (k > i) {
            utf8proc_uint8_t *r = NULL;
            utf8proc_ssize_t rl = utf8proc_map(u + i, (utf8proc_ssize_t)(k - i), &r, (utf8proc_option_t)opts);
            bool ok = rl < 0 ? sbuf_put(out, s + i, k - i) : sbuf_put(out, r, (size_t)rl);
            free(r);
            if (!ok) return -1;
        } else {   /* an invalid byte */
            if (!sbuf_put(out, s + k, 1)) return -1;
            k++;
        }
        i = k;
    }
    return 0;
}

static bool put_cp(ht_sbuf *o, uint32_t cp) { char t[4]; return sbuf_put(o, t, (size_t)utf8_encode(cp, t)); }

/* Per-character rewrite; invalid bytes are copied unchanged. */
static int norm_chars(const ht_norm *nm, const char *s, size_t n, ht_sbuf *out) {
    bool lower = nm->type == NS_LOWER || (nm->type == NS_BERT && nm->lower);
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        if (c < 0x80 && nm->type != NS_STRIP_ACCENTS) {   /* ASCII fast path: the same rules, no lookups */
            i++;
            if (nm->type == NS_BERT && nm->clean) {
                if (c == '\t' || c == '\n' || c == '\r') c = ' ';
                else if (c < 32 || c == 127) continue;   /* NUL and the other controls are dropped */
            }
            if (lower && c >= 'A' && c <= 'Z') c = (uint8_t)(c + 32);
            if (!sbuf_put(out, &c, 1)) return -1;
            continue;
        }
        uint32_t cp;
        int vl = utf8_valid_len((const uint8_t *)s + i, n - i);
        int l = utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (!vl) {   /* invalid byte */
            if (nm->type == NS_BERT) { i++; continue; }   /* BERT's clean_text drops U+FFFD */
            if (!sbuf_put(out, s + i, 1)) return -1;
            i++;
            continue;
        }
        i += (size_t)l;
        if (nm->type == NS_STRIP_ACCENTS) { if (!uc_is_mn(cp) && !put_cp(out, cp)) return -1; continue; }
        if (nm->type == NS_LOWER) {
            uint32_t lc[3];
            int k = uc_lower(cp, lc);
            for (int j = 0; j < k; j++) if (!put_cp(out, lc[j])) return -1;
            continue;
        }
        /* BERT: clean text, pad CJK, (accents were stripped by the caller's NFD pass), lowercase */
        if (nm->clean) {
            bool ws = cp == '\t' || cp == '\n' || cp == '\r' || uc_is_whitespace(cp);
            if (cp == 0 || cp == 0xFFFD || (!(cp == '\t' || cp == '\n' || cp == '\r') && uc_is_other(cp))) continue;
            if (ws) cp = ' ';
        }
        if (nm->strip_accents && uc_is_mn(cp)) continue;
        bool cjk = nm->chinese && uc_is_chinese(cp);
        if (cjk && !sbuf_put(out, " ", 1)) return -1;
        if (nm->lower) {
            uint32_t lc[3];
            int k = uc_lower(cp, lc);
            for (int j = 0; j < k; j++) if (!put_cp(out, lc[j])) return -1;
        } else if (!put_cp(out, cp)) return -1;
        if (cjk && !sbuf_put(out, " ", 1)) return -1;
    }
    return 0;
}

typedef struct { ht_sbuf *out; const char *src; size_t prev; const ht_norm *nm; } repl_ctx;
static bool replace_match(void *ctx, size_t ms, size_t me) {
    repl_ctx *c = ctx;
    if (!sbuf_put(c->out, c->src + c->prev, ms - c->prev) || !sbuf_put(c->out, c->nm->b, c->nm->blen)) return false;
    c->prev = me;
    return true;
}

static int norm_step(const ht_norm *nm, const char *s, size_t n, rx_ctx *rx, ht_sbuf *out) {
    out->n = 0;
    if (!sbuf_reserve(out, n)) return -1;
    out->p[0] = 0;
    switch (nm->type) {
    case NS_NFC: return norm_utf8proc(s, n, UTF8PROC_STABLE | UTF8PROC_COMPOSE, out);
    case NS_NFD: return norm_utf8proc(s, n, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, out);
    case NS_NFKC: return norm_utf8proc(s, n, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, out);
    case NS_NFKD: return norm_utf8proc(s, n, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, out);
    case NS_LOWER: case NS_STRIP_ACCENTS: return norm_chars(nm, s, n, out);
    case NS_BERT:
        if (nm->strip_accents) {   /* NFD first so accents become separate marks */
            ht_sbuf d = {0};
            if (norm_utf8proc(s, n, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, &d)) { free(d.p); return -1; }
            int rc = norm_chars(nm, d.p ? d.p : "", d.n, out);
            free(d.p);
            return rc;
        }
        return norm_chars(nm, s, n, out);
    case NS_PREPEND:
        if (n && !sbuf_put(out, nm->a, nm->alen)) return -1;
        return sbuf_put(out, s, n) ? 0 : -1;
    case NS_STRIP: {
        size_t a = 0, b = n;
        while (nm->left && a < b) {
            uint32_t cp; int l = utf8_decode((const uint8_t *)s + a, b - a, &cp);
            if (!uc_is_whitespace(cp)) break;
            a += (size_t)l;
        }
        while (nm->right && b > a) {
            size_t k = b - 1;
            while (k > a && ((uint8_t)s[k] & 0xC0) == 0x80 && b - k < 4) k--;
            uint32_t cp; int l = utf8_decode((const uint8_t *)s + k, b - k, &cp);
            if ((size_t)l != b - k || !uc_is_whitespace(cp)) break;
            b = k;
        }
        return sbuf_put(out, s + a, b - a) ? 0 : -1;
    }
    case NS_REPLACE:
        if (nm->re) {
            repl_ctx c = { out, s, 0, nm };
            if (regex_each(nm->re, s, 0, n, rx, replace_match, &c)) return -1;
            return sbuf_put(out, s + c.prev, n - c.prev) ? 0 : -1;
        } else {
            size_t i = 0, prev = 0;
            if (!nm->alen) return sbuf_put(out, s, n) ? 0 : -1;
            while (i + nm->alen <= n) {
                if (!memcmp(s + i, nm->a, nm->alen)) {
                    if (!sbuf_put(out, s + prev, i - prev) || !sbuf_put(out, nm->b, nm->blen)) return -1;
                    i += nm->alen; prev = i;
                } else i++;
            }
            return sbuf_put(out, s + prev, n - prev) ? 0 : -1;
        }
    }
    return sbuf_put(out, s, n) ? 0 : -1;
}

int pipe_normalize(const ht_pipeline *p, const char *s, size_t n, tok_ws *ws) {
    ht_sbuf *out = &ws->buf, *tmp = &ws->buf2;
    out->n = 0;
    if (!sbuf_put(out, s, n)) return -1;
    /* Real normalizers grow a text a few times at most; chained Replace rules whose replacement holds what they
     * replace grow it exponentially (a hostile tokenizer.json): refused past this bound. */
    size_t limit = n * NORM_MAX_GROWTH + 4096;
    for (int i = 0; i < p->n_norm; i++) {
        if (norm_step(&p->norm[i], out->p, out->n, &ws->rx, tmp)) return -1;
        ht_sbuf t = *out; *out = *tmp; *tmp = t;
        if (out->n > limit) return -2;
    }
    return 0;
}

/* ---------------- pre-tokenizers ---------------- */

/* The GPT-2 pattern of HF's ByteLevel pre-tokenizer (use_regex). */
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Splits each piece by a per-character class: kind 0 = whitespace removed + BERT punctuation isolated,
 * 1 = whitespace removed, 2 = digits (contiguous or individual), 3 = punctuation with a behaviour. */
static int char_split(const char *buf, const ht_span *in, int kind, const ht_pre *st, ht_spans *out) {
    size_t off = in->off, end = in->off + in->len, start = off;
    if (kind == 2 || kind == 3) {
        segs sg = {0};
        size_t i = off, gap = off;
        int rc = 0;
        while (i < end && !rc) {
            uint32_t cp;
            int l = utf8_decode((const uint8_t *)buf + i, end - i, &cp);
            bool hit = utf8_valid_len((const uint8_t *)buf + i, end - i) &&
                       (kind == 2 ? (utf8proc_category((utf8proc_int32_t)cp) >= UTF8PROC_CATEGORY_ND &&
                                     utf8proc_category((utf8proc_int32_t)cp) <= UTF8PROC_CATEGORY_NO)
                                  : uc_is_bert_punct(cp));
            if (hit) {
                size_t j = i + (size_t)l;
                if (kind == 2 && !st->individual) {   /* a run of digits is one delimiter */
                    while (j < end) {
                        uint32_t c2; int l2 = utf8_decode((const uint8_t *)buf + j, end - j, &c2);
                        int cat = utf8proc_category((utf8proc_int32_t)c2);
                        if (!utf8_valid_len((const uint8_t *)buf + j, end - j) || cat < UTF8PROC_CATEGORY_ND ||
                            cat > UTF8PROC_CATEGORY_NO) break;
                        j += (size_t)l2;
                    }
                }
                if (i > gap && !seg_push(&sg, gap, i - gap, false)) rc = -1;
                if (!rc && !seg_push(&sg, i, j - i, true)) rc = -1;
                i = gap = j;
            } else i += (size_t)l;
        }
        if (!rc && end > gap && !seg_push(&sg, gap, end - gap, false)) rc = -1;
        if (!rc) rc = apply_behavior(&sg, kind == 2 ? SB_ISOLATED : st->behavior, out);
        free(sg.v);
        return rc;
    }
    for (size_t i = off; i < end;) {
        uint32_t cp;
        int l = utf8_decode((const uint8_t *)buf + i, end - i, &cp);
        bool valid = utf8_valid_len((const uint8_t *)buf + i, end - i) != 0;
        if (valid && uc_is_whitespace(cp)) {
            if (!spans_push(out, start, i - start)) return -1;
            i += (size_t)l; start = i;
        } else if (kind == 0 && valid && uc_is_bert_punct(cp)) {
            if (!spans_push(out, start, i - start) || !spans_push(out, i, (size_t)l)) return -1;
            i += (size_t)l; start = i;
        } else i += (size_t)l;
    }
    return spans_push(out, start, end - start) ? 0 : -1;
}

/* Rewrites each piece into a new buffer: ByteLevel prefix space, or Metaspace replacement + prepend. */
static int rewrite_pieces(const ht_pre *st, ht_sbuf *buf, ht_spans *cur, bool is_first, ht_spans *out) {
    ht_sbuf nb = {0};
    out->n = 0;
    for (size_t i = 0; i < cur->n; i++) {
        const char *s = buf->p + cur->v[i].off;
        size_t n = cur->v[i].len, start = nb.n;
        if (st->type == PS_BYTELEVEL) {
            if (st->add_prefix_space && (n == 0 || s[0] != ' ') && !sbuf_put(&nb, " ", 1)) goto oom;
            if (!sbuf_put(&nb, s, n)) goto oom;
        } else {   /* METASPACE */
            bool first = is_first && cur->v[i].off == 0;
            bool pre = st->prepend_scheme == MS_ALWAYS || (st->prepend_scheme == MS_FIRST && first);
            bool starts = (n && s[0] == ' ') || (n >= (size_t)st->repl_len && !memcmp(s, st->repl, (size_t)st->repl_len));
            if (pre && !starts &&
                !sbuf_put(&nb, st->repl, (size_t)st->repl_len)) goto oom;
            for (size_t k = 0; k < n; k++) {
                if (s[k] == ' ') { if (!sbuf_put(&nb, st->repl, (size_t)st->repl_len)) goto oom; }
                else if (!sbuf_put(&nb, s + k, 1)) goto oom;
            }
        }
        if (!spans_push(out, start, nb.n - start)) goto oom;
    }
    free(buf->p);
    *buf = nb;
    return 0;
oom:
    free(nb.p);
    return -1;
}

static int metaspace_split(const ht_pre *st, const char *buf, const ht_span *in, ht_spans *out) {
    segs sg = {0};
    size_t i = in->off, end = in->off + in->len, gap = i, rl = (size_t)st->repl_len;
    int rc = 0;
    while (i < end && !rc) {
        if (rl && i + rl <= end && !memcmp(buf + i, st->repl, rl)) {
            if (i > gap) rc |= !seg_push(&sg, gap, i - gap, false);
            rc |= !seg_push(&sg, i, rl, true);
            i += rl; gap = i;
        } else i++;
    }
    if (!rc && end > gap) rc |= !seg_push(&sg, gap, end - gap, false);
    if (!rc) rc = apply_behavior(&sg, SB_MERGED_NEXT, out);
    free(sg.v);
    return rc ? -1 : 0;
}

int pipe_pretokenize(const ht_pipeline *p, bool is_first, tok_ws *ws, hearth_err *err) {
    ht_sbuf *buf = &ws->buf;
    ht_spans *out = &ws->spans;
    out->n = 0;
    if (!buf->n) return 0;
    if (!spans_push(out, 0, buf->n)) return herr(err, "out of memory");
    ht_spans tmp = ws->spans2;
    int rc = 0;
    for (int s = 0; s < p->n_pre && !rc; s++) {
        const ht_pre *st = &p->pre[s];
        tmp.n = 0;
        if (st->type == PS_BYTELEVEL || st->type == PS_METASPACE) {
            if ((st->type == PS_BYTELEVEL && st->add_prefix_space) || st->type == PS_METASPACE) {
                if (rewrite_pieces(st, buf, out, is_first, &tmp)) { rc = -1; continue; }   /* ends the loop */
                ht_spans t = *out; *out = tmp; tmp = t;
                tmp.n = 0;
            }
            if (st->type == PS_METASPACE && !st->split) continue;
            if (st->type == PS_BYTELEVEL && !st->re) continue;
        }
        for (size_t i = 0; i < out->n && !rc; i++) {
            const ht_span *in = &out->v[i];
            switch (st->type) {
            case PS_SPLIT: case PS_BYTELEVEL:
                rc = regex_split(st->re, buf->p, in->off, in->len, st->type == PS_SPLIT ? st->behavior : SB_ISOLATED,
                                 st->invert, &ws->rx, &tmp);
                break;
            case PS_METASPACE: rc = metaspace_split(st, buf->p, in, &tmp); break;
            case PS_BERT: rc = char_split(buf->p, in, 0, st, &tmp); break;
            case PS_WSSPLIT: rc = char_split(buf->p, in, 1, st, &tmp); break;
            case PS_DIGITS: rc = char_split(buf->p, in, 2, st, &tmp); break;
            case PS_PUNCT: rc = char_split(buf->p, in, 3, st, &tmp); break;
            case PS_WHITESPACE:   /* \w+|[^\w\s]+ kept, the rest removed */
                rc = regex_split(st->re, buf->p, in->off, in->len, SB_REMOVED, true, &ws->rx, &tmp);
                break;
            default: rc = spans_push(&tmp, in->off, in->len) ? 0 : -1;
            }
        }
        ht_spans t = *out; *out = tmp; tmp = t;
    }
    ws->spans2 = tmp;
    return rc ? herr(err, "out of memory") : 0;
}

/* Builds the ByteLevel step (GPT-2 regex when use_regex). */
int pre_bytelevel(ht_pre *st, bool add_prefix_space, bool use_regex, hearth_err *err) {
    *st = (ht_pre){ .type = PS_BYTELEVEL, .add_prefix_space = add_prefix_space };
    if (use_regex && !(st->re = regex_compile(GPT2_PATTERN, sizeof GPT2_PATTERN - 1, err))) return -1;
    return 0;
}

void pipe_free(ht_pipeline *p) {
    for (int i = 0; i < p->n_norm; i++) {
        free(p->norm[i].a); free(p->norm[i].b);
        pcre2_code_free(p->norm[i].re);
    }
    for (int i = 0; i < p->n_pre; i++) pcre2_code_free(p->pre[i].re);
    free(p->norm); free(p->pre);
    memset(p, 0, sizeof *p);
}
