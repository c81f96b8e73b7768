/* jinja_strings.c — Python's str methods as templates call them (split, strip, startswith, replace, find,
 * join, title, splitlines, ...), and Python's two formatting languages: "%" (printf style, used by the
 * format filter and str % args) and str.format with its format-spec mini-language.
 *
 * Strings are UTF-8; indices, lengths and widths count code points as Python does. Methods are called
 * through the builtin table at the end (self is the string). */
#define _GNU_SOURCE   /* memmem */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_internal.h"

#define FMT_MAX_WIDTH 100000

static const jstr *S(jv v) { return v.s; }

/* ---------------- helpers ---------------- */

static jv substr(jctx *c, const jstr *s, size_t from, size_t to) { return jv_str(c, s->s + from, to - from); }

/* Byte range of the code-point slice s[start:end] (Python slice clamping; absent bounds are open). */
static void cp_range(jctx *c, const jnode *at, const jstr *s, const jv *a, const bool *has, int first, size_t *from, size_t *to) {
    int64_t n = (int64_t)jstr_ncp(s), lo = 0, hi = n;
    if (has[first] && a[first].k != JV_NONE) { lo = jb_int(c, at, a[first], "start"); if (lo < 0) lo = HT_MAX(lo + n, 0); if (lo > n) lo = n; }
    if (has[first + 1] && a[first + 1].k != JV_NONE) { hi = jb_int(c, at, a[first + 1], "end"); if (hi < 0) hi = HT_MAX(hi + n, 0); if (hi > n) hi = n; }
    *from = utf8_offset(s->s, s->len, (size_t)lo);
    *to = hi <= lo ? *from : *from + utf8_offset(s->s + *from, s->len - *from, (size_t)(hi - lo));
    if (hi < lo) *to = *from;
}

typedef bool (*cp_pred)(int32_t cp, const jstr *set);

static bool in_set(int32_t cp, const jstr *set) {
    for (size_t i = 0; i < set->len;) {
        int32_t x;
        i += (size_t)utf8_next(set->s + i, set->len - i, &x);
        if (x == cp) return true;
    }
    return false;
}

static bool is_space_pred(int32_t cp, const jstr *set) { (void)set; return py_isspace(cp); }

jv jb_str_strip(jctx *c, const jstr *s, const jstr *chars, bool left, bool right) {
    cp_pred pred = chars ? in_set : is_space_pred;
    size_t from = 0, to = s->len;
    if (left) {
        while (from < to) {
            int32_t cp;
            int k = utf8_next(s->s + from, to - from, &cp);
            if (!pred(cp, chars)) break;
            from += (size_t)k;
        }
    }
    if (right) {
        size_t end = from;
        for (size_t i = from; i < to;) {
            int32_t cp;
            i += (size_t)utf8_next(s->s + i, to - i, &cp);
            if (!pred(cp, chars)) end = i;
        }
        to = end;
    }
    return substr(c, s, from, to);
}

static jv map_cps(jctx *c, const jstr *s, int32_t (*f)(int32_t)) {
    jbuf b = {0};
    for (size_t i = 0; i < s->len;) {
        int32_t cp;
        i += (size_t)utf8_next(s->s + i, s->len - i, &cp);
        jb_put_cp(c, &b, f(cp));
    }
    return jv_buf(c, &b);
}

/* Case changes, with the full (one-to-many) mappings Python applies to German sharp s and dotted I. */
jv jb_str_lower(jctx *c, const jstr *s) {
    if (!memchr(s->s, 0xC4, s->len)) return map_cps(c, s, cp_lower);
    jbuf b = {0};
    for (size_t i = 0; i < s->len;) {
        int32_t cp;
        i += (size_t)utf8_next(s->s + i, s->len - i, &cp);
        if (cp == 0x130) { jb_putc(c, &b, 'i'); jb_put_cp(c, &b, 0x307); }
        else jb_put_cp(c, &b, cp_lower(cp));
    }
    return jv_buf(c, &b);
}

jv jb_str_upper(jctx *c, const jstr *s) {
    if (!memchr(s->s, 0xC3, s->len)) return map_cps(c, s, cp_upper);
    jbuf b = {0};
    for (size_t i = 0; i < s->len;) {
        int32_t cp;
        i += (size_t)utf8_next(s->s + i, s->len - i, &cp);
        if (cp == 0xDF) jb_puts(c, &b, "SS");
        else jb_put_cp(c, &b, cp_upper(cp));
    }
    return jv_buf(c, &b);
}

static const jstr *opt_str(jctx *c, const jnode *at, const jv *a, const bool *has, int i, const char *what) {
    if (!has[i] || a[i].k == JV_NONE) return NULL;
    return jb_str_arg(c, at, a[i], what);
}

/* ---------------- case ---------------- */

JBUILTIN(m_upper) { return jb_str_upper(c, S(self)); }
JBUILTIN(m_lower) { return jb_str_lower(c, S(self)); }

static int32_t swap_case(int32_t cp) { return cp_is_upper(cp) ? cp_lower(cp) : cp_is_lower(cp) ? cp_upper(cp) : cp; }
JBUILTIN(m_swapcase) { return map_cps(c, S(self), swap_case); }

/* str.capitalize: first character title case, the rest lower case. */
JBUILTIN(m_capitalize) {
    const jstr *s = S(self);
    jbuf b = {0};
    for (size_t i = 0; i < s->len;) {
        int32_t cp;
        i += (size_t)utf8_next(s->s + i, s->len - i, &cp);
        jb_put_cp(c, &b, b.n == 0 ? cp_title(cp) : cp_lower(cp));
    }
    return jv_buf(c, &b);
}

/* str.title: the first cased character after an uncased one goes title case, others lower case. */
JBUILTIN(m_title) {
    const jstr *s = S(self);
    jbuf b = {0};
    bool prev_cased = false;
    for (size_t i = 0; i < s->len;) {
        int32_t cp;
        i += (size_t)utf8_next(s->s + i, s->len - i, &cp);
        bool cased = cp_is_cased(cp);
        jb_put_cp(c, &b, !cased ? cp : prev_cased ? cp_lower(cp) : cp_title(cp));
        prev_cased = cased;
    }
    return jv_buf(c, &b);
}

/* ---------------- predicates ---------------- */

static bool all_cps(const jstr *s, bool (*f)(int32_t)) {
    if (!s->len) return false;
    for (size_t i = 0; i < s->len;) {
        int32_t cp;
        i += (size_t)utf8_next(s->s + i, s->len - i, &cp);
        if (!f(cp)) return false;
    }
    return true;
}

static bool cp_digit(int32_t cp) { return (cp >= '0' && cp <= '9') || (cp >= 0x80 && cp_is_decimal(cp)); }
static bool cp_alpha(int32_t cp) { return py_isalnum(cp) && !(cp >= '0' && cp <= '9'); }
JBUILTIN(m_isdigit) { return jv_bool(all_cps(S(self), cp_digit)); }
JBUILTIN(m_isalpha) { return jv_bool(all_cps(S(self), cp_alpha)); }
JBUILTIN(m_isalnum) { return jv_bool(all_cps(S(self), py_isalnum)); }
JBUILTIN(m_isspace) { return jv_bool(all_cps(S(self), py_isspace)); }

/* islower/isupper: at least one cased character, and none of the other case. */
static jv case_test(const jstr *s, bool upper) {
    bool cased = false;
    for (size_t i = 0; i < s->len;) {
        int32_t cp;
        i += (size_t)utf8_next(s->s + i, s->len - i, &cp);
        if (upper ? cp_is_lower(cp) : (cp_is_upper(cp) || (cp_is_cased(cp) && !cp_is_lower(cp)))) return jv_bool(false);
        if (cp_is_cased(cp)) cased = true;
    }
    return jv_bool(cased);
}
JBUILTIN(m_islower) { return case_test(S(self), false); }
JBUILTIN(m_isupper) { return case_test(S(self), true); }

/* ---------------- strip, split, join ---------------- */

JBUILTIN(m_strip) { return jb_str_strip(c, S(self), opt_str(c, at, a, has, 0, "chars"), true, true); }
JBUILTIN(m_lstrip) { return jb_str_strip(c, S(self), opt_str(c, at, a, has, 0, "chars"), true, false); }
JBUILTIN(m_rstrip) { return jb_str_strip(c, S(self), opt_str(c, at, a, has, 0, "chars"), false, true); }

/* Whitespace split: words as (start, end) byte pairs, then maxsplit merges the leftover end. */
static jv split_ws(jctx *c, const jstr *s, int64_t max, bool right) {
    size_t *w = ja_alloc(c, (s->len + 2) * sizeof *w), nw = 0;
    for (size_t i = 0; i < s->len;) {
        int k = py_space_len(s->s + i, s->len - i);
        if (k) { i += (size_t)k; continue; }
        w[2 * nw] = i;
        while (i < s->len && !py_space_len(s->s + i, s->len - i)) { int32_t cp; i += (size_t)utf8_next(s->s + i, s->len - i, &cp); }
        w[2 * nw + 1] = i;
        nw++;
    }
    jv out = jv_list(c, nw);
    size_t keep = max >= 0 && (uint64_t)max < nw ? (size_t)max : nw;   /* words split off */
    if (keep == nw) { for (size_t i = 0; i < nw; i++) jl_push(c, out.l, substr(c, s, w[2 * i], w[2 * i + 1])); return out; }
    if (!right) {
        for (size_t i = 0; i < keep; i++) jl_push(c, out.l, substr(c, s, w[2 * i], w[2 * i + 1]));
        jl_push(c, out.l, substr(c, s, w[2 * keep], s->len));
    } else {
        size_t rest = nw - keep;
        jl_push(c, out.l, substr(c, s, 0, w[2 * (rest - 1) + 1]));
        for (size_t i = rest; i < nw; i++) jl_push(c, out.l, substr(c, s, w[2 * i], w[2 * i + 1]));
    }
    return out;
}

static const char *rfind_bytes(const char *hay, size_t n, const char *needle, size_t m) {
    if (m > n) return NULL;
    for (size_t i = n - m + 1; i-- > 0;) if (!memcmp(hay + i, needle, m)) return hay + i;
    return NULL;
}

static jv split_sep(jctx *c, const jstr *s, const jstr *sep, int64_t max, bool right) {
    jv out = jv_list(c, 0);
    if (!right) {
        size_t i = 0;
        for (int64_t k = 0; max < 0 || k < max; k++) {
            const char *hit = memmem(s->s + i, s->len - i, sep->s, sep->len);
            if (!hit) break;
            size_t h = (size_t)(hit - s->s);
            jl_push(c, out.l, substr(c, s, i, h));
            i = h + sep->len;
        }
        jl_push(c, out.l, substr(c, s, i, s->len));
        return out;
    }
    size_t end = s->len;
    for (int64_t k = 0; max < 0 || k < max; k++) {
        const char *hit = rfind_bytes(s->s, end, sep->s, sep->len);
        if (!hit) break;
        size_t h = (size_t)(hit - s->s);
        jl_push(c, out.l, substr(c, s, h + sep->len, end));
        end = h;
    }
    jl_push(c, out.l, substr(c, s, 0, end));
    for (size_t i = 0, j = out.l->n - 1; i < j; i++, j--) { jv t = out.l->v[i]; out.l->v[i] = out.l->v[j]; out.l->v[j] = t; }
    return out;
}

static jv do_split(jctx *c, const jnode *at, jv self, const jv *a, const bool *has, bool right) {
    const jstr *sep = opt_str(c, at, a, has, 0, "sep");
    int64_t max = has[1] ? jb_int(c, at, a[1], "maxsplit") : -1;
    if (sep && !sep->len) jfail(c, at->pos, "empty separator");
    return sep ? split_sep(c, S(self), sep, max, right) : split_ws(c, S(self), max, right);
}
JBUILTIN(m_split) { return do_split(c, at, self, a, has, false); }
JBUILTIN(m_rsplit) { return do_split(c, at, self, a, has, true); }

/* Line boundaries of str.splitlines: \n \r \r\n \v \f \x1c \x1d \x1e \x85 U+2028 U+2029. */
static bool line_break(int32_t cp) {
    return cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) || cp == 0x85 ||
           cp == 0x2028 || cp == 0x2029;
}

static jv splitlines(jctx *c, const jstr *s, bool keepends) {
    jv out = jv_list(c, 0);
    size_t start = 0;
    for (size_t i = 0; i < s->len;) {
        int32_t cp;
        size_t k = (size_t)utf8_next(s->s + i, s->len - i, &cp);
        if (!line_break(cp)) { i += k; continue; }
        size_t end = i;
        i += k;
        if (cp == '\r' && i < s->len && s->s[i] == '\n') i++;
        jl_push(c, out.l, substr(c, s, start, keepends ? i : end));
        start = i;
    }
    if (start < s->len) jl_push(c, out.l, substr(c, s, start, s->len));
    return out;
}
JBUILTIN(m_splitlines) { return splitlines(c, S(self), has[0] && jv_truthy(a[0])); }

JBUILTIN(m_join) {
    jlist *items = jeval_iter_list(c, at->pos, a[0]);
    jbuf b = {0};
    for (size_t i = 0; i < items->n; i++) {
        if (items->v[i].k != JV_STR)
            jfail(c, at->pos, "sequence item %zu: expected str instance, %s found", i, jv_type_name(items->v[i]));
        if (i) jb_put(c, &b, S(self)->s, S(self)->len);
        jb_put(c, &b, items->v[i].s->s, items->v[i].s->len);
    }
    return jv_buf(c, &b);
}

/* ---------------- search and replace ---------------- */

/* prefix/suffix tests accept a str or a tuple of str */
static jv affix_test(jctx *c, const jnode *at, jv self, const jv *a, const bool *has, bool suffix) {
    const jstr *s = S(self);
    size_t from, to;
    cp_range(c, at, s, a, has, 1, &from, &to);
    jv set = a[0];
    size_t n = set.k == JV_LIST && set.l->tuple ? set.l->n : 1;
    for (size_t i = 0; i < n; i++) {
        jv p = set.k == JV_LIST && set.l->tuple ? set.l->v[i] : set;
        const jstr *ps = jb_str_arg(c, at, p, suffix ? "suffix" : "prefix");
        if (ps->len > to - from) continue;
        if (!memcmp(s->s + (suffix ? to - ps->len : from), ps->s, ps->len)) return jv_bool(true);
    }
    return jv_bool(false);
}
JBUILTIN(m_startswith) { return affix_test(c, at, self, a, has, false); }
JBUILTIN(m_endswith) { return affix_test(c, at, self, a, has, true); }

/* Code-point index of the first (or last) occurrence of sub in s[start:end], or -1. */
static int64_t find_sub(jctx *c, const jnode *at, jv self, const jv *a, const bool *has, bool last) {
    const jstr *s = S(self), *sub = jb_str_arg(c, at, a[0], "sub");
    size_t from, to;
    cp_range(c, at, s, a, has, 1, &from, &to);
    if (sub->len > to - from) return -1;
    const char *hit = last ? rfind_bytes(s->s + from, to - from, sub->s, sub->len)
                           : sub->len ? memmem(s->s + from, to - from, sub->s, sub->len) : s->s + from;
    if (!hit) return -1;
    return (int64_t)utf8_count(s->s, (size_t)(hit - s->s));
}
JBUILTIN(m_find) { return jv_int(find_sub(c, at, self, a, has, false)); }
JBUILTIN(m_rfind) { return jv_int(find_sub(c, at, self, a, has, true)); }
JBUILTIN(m_index) {
    int64_t i = find_sub(c, at, self, a, has, false);
    if (i < 0) jfail(c, at->pos, "substring not found");
    return jv_int(i);
}
JBUILTIN(m_rindex) {
    int64_t i = find_sub(c, at, self, a, has, true);
    if (i < 0) jfail(c, at->pos, "substring not found");
    return jv_int(i);
}

JBUILTIN(m_count) {
    const jstr *s = S(self), *sub = jb_str_arg(c, at, a[0], "sub");
    size_t from, to;
    cp_range(c, at, s, a, has, 1, &from, &to);
    if (!sub->len) return jv_int((int64_t)utf8_count(s->s + from, to - from) + 1);
    int64_t n = 0;
    for (const char *p = s->s + from, *end = s->s + to; (p = memmem(p, (size_t)(end - p), sub->s, sub->len)); p += sub->len) n++;
    return jv_int(n);
}

static jv str_replace(jctx *c, const jstr *s, const jstr *old, const jstr *new_, int64_t count) {
    jbuf b = {0};
    size_t i = 0;
    if (!old->len) {   /* inserts new_ around every character */
        for (int64_t k = 0; i <= s->len && (count < 0 || k < count); k++) {
            jb_put(c, &b, new_->s, new_->len);
            if (i == s->len) { i++; break; }
            int32_t cp;
            size_t n = (size_t)utf8_next(s->s + i, s->len - i, &cp);
            jb_put(c, &b, s->s + i, n);
            i += n;
        }
        if (i < s->len) jb_put(c, &b, s->s + i, s->len - i);
        return jv_buf(c, &b);
    }
    for (int64_t k = 0; count < 0 || k < count; k++) {
        const char *hit = memmem(s->s + i, s->len - i, old->s, old->len);
        if (!hit) break;
        size_t h = (size_t)(hit - s->s);
        jb_put(c, &b, s->s + i, h - i);
        jb_put(c, &b, new_->s, new_->len);
        i = h + old->len;
    }
    jb_put(c, &b, s->s + i, s->len - i);
    return jv_buf(c, &b);
}

jv jb_str_replace(jctx *c, const jstr *s, const jstr *old, const jstr *new_, int64_t count) {
    return str_replace(c, s, old, new_, count);
}

JBUILTIN(m_replace) {
    int64_t count = has[2] ? jb_int(c, at, a[2], "count") : -1;
    return str_replace(c, S(self), jb_str_arg(c, at, a[0], "old"), jb_str_arg(c, at, a[1], "new"), count);
}

JBUILTIN(m_removeprefix) {
    const jstr *s = S(self), *p = jb_str_arg(c, at, a[0], "prefix");
    if (p->len <= s->len && !memcmp(s->s, p->s, p->len)) return substr(c, s, p->len, s->len);
    return self;
}

JBUILTIN(m_removesuffix) {
    const jstr *s = S(self), *p = jb_str_arg(c, at, a[0], "suffix");
    if (p->len && p->len <= s->len && !memcmp(s->s + s->len - p->len, p->s, p->len)) return substr(c, s, 0, s->len - p->len);
    return self;
}

static jv partition(jctx *c, const jnode *at, jv self, jv sepv, bool last) {
    const jstr *s = S(self), *sep = jb_str_arg(c, at, sepv, "sep");
    if (!sep->len) jfail(c, at->pos, "empty separator");
    const char *hit = last ? rfind_bytes(s->s, s->len, sep->s, sep->len) : memmem(s->s, s->len, sep->s, sep->len);
    jv out = jv_list(c, 3);
    out.l->tuple = true;
    jv empty = jv_str(c, "", 0);
    if (!hit) {
        jl_push(c, out.l, last ? empty : self);
        jl_push(c, out.l, empty);
        jl_push(c, out.l, last ? self : empty);
        return out;
    }
    size_t h = (size_t)(hit - s->s);
    jl_push(c, out.l, substr(c, s, 0, h));
    jl_push(c, out.l, sepv);
    jl_push(c, out.l, substr(c, s, h + sep->len, s->len));
    return out;
}
JBUILTIN(m_partition) { return partition(c, at, self, a[0], false); }
JBUILTIN(m_rpartition) { return partition(c, at, self, a[0], true); }

/* ---------------- padding ---------------- */

static int32_t fill_char(jctx *c, const jnode *at, const jv *a, const bool *has, int i) {
    if (!has[i]) return ' ';
    const jstr *f = jb_str_arg(c, at, a[i], "fillchar");
    if (jstr_ncp(f) != 1) jfail(c, at->pos, "The fill character must be exactly one character long");
    int32_t cp;
    utf8_next(f->s, f->len, &cp);
    return cp;
}

static void put_fill(jctx *c, jbuf *b, int32_t fill, size_t n) { while (n--) jb_put_cp(c, b, fill); }

static int64_t width_arg(jctx *c, const jnode *at, jv v) {
    int64_t w = jb_int(c, at, v, "width");
    if (w > FMT_MAX_WIDTH) jfail(c, at->pos, "width too large");
    return w;
}

/* align: '<' ljust, '>' rjust, '^' center (Python's str.center puts the odd pad left when width is odd) */
static jv pad_str(jctx *c, const jstr *s, int64_t width, int32_t fill, char align) {
    if (width <= (int64_t)jstr_ncp(s)) return jv_str(c, s->s, s->len);
    size_t pad = (size_t)width - jstr_ncp(s), left = align == '<' ? 0 : align == '>' ? pad : pad / 2 + (pad & (size_t)width & 1);
    jbuf b = {0};
    put_fill(c, &b, fill, left);
    jb_put(c, &b, s->s, s->len);
    put_fill(c, &b, fill, pad - left);
    return jv_buf(c, &b);
}

jv jb_str_center(jctx *c, const jstr *s, int64_t width) { return pad_str(c, s, width, ' ', '^'); }

JBUILTIN(m_center) { return pad_str(c, S(self), width_arg(c, at, a[0]), fill_char(c, at, a, has, 1), '^'); }
JBUILTIN(m_ljust) { return pad_str(c, S(self), width_arg(c, at, a[0]), fill_char(c, at, a, has, 1), '<'); }
JBUILTIN(m_rjust) { return pad_str(c, S(self), width_arg(c, at, a[0]), fill_char(c, at, a, has, 1), '>'); }

JBUILTIN(m_zfill) {
    const jstr *s = S(self);
    int64_t width = width_arg(c, at, a[0]);
    if (width <= (int64_t)jstr_ncp(s)) return self;
    jbuf b = {0};
    size_t sign = s->len && (s->s[0] == '+' || s->s[0] == '-');
    jb_put(c, &b, s->s, sign);
    put_fill(c, &b, '0', (size_t)width - jstr_ncp(s));
    jb_put(c, &b, s->s + sign, s->len - sign);
    return jv_buf(c, &b);
}

/* ---------------- formatting core ---------------- */

typedef struct { int32_t fill; char align, sign, group, type; bool alt, zero; int64_t width, prec; } fspec;

/* Writes prefix (sign, 0x) and body padded to the spec's width. */
static void put_padded(jctx *c, jbuf *out, const char *prefix, const char *body, size_t blen, const fspec *s, char def_align) {
    size_t plen = strlen(prefix), ncp = plen + utf8_count(body, blen);
    char align = s->align ? s->align : def_align;
    int32_t fill = s->fill ? s->fill : ' ';
    if (s->zero && !s->align) { fill = '0'; align = '='; }
    size_t pad = s->width > (int64_t)ncp ? (size_t)s->width - ncp : 0, left = 0;
    if (align == '>') left = pad;
    else if (align == '^') left = pad / 2;
    if (align != '=') put_fill(c, out, fill, left);
    jb_puts(c, out, prefix);
    if (align == '=') put_fill(c, out, fill, pad);
    jb_put(c, out, body, blen);
    if (align == '<' || align == '^') put_fill(c, out, fill, pad - left);
}

static void group_digits(jctx *c, jbuf *out, const char *d, size_t n, char sep, int every) {
    for (size_t i = 0; i < n; i++) {
        jb_putc(c, out, d[i]);
        size_t left = n - i - 1;
        if (sep && left && left % (size_t)every == 0) jb_putc(c, out, sep);
    }
}

static void format_int(jctx *c, const jnode *at, jbuf *out, int64_t v, const fspec *s);

static void format_float(jctx *c, const jnode *at, jbuf *out, double v, const fspec *s) {
    char type = s->type, body[400];
    int prec = s->prec < 0 ? 6 : (int)s->prec;
    bool neg = signbit(v) && !isnan(v);
    double m = fabs(v);
    if (isnan(m) || isinf(m)) {
        bool up = type == 'F' || type == 'E' || type == 'G';
        snprintf(body, sizeof body, "%s", isnan(m) ? (up ? "NAN" : "nan") : (up ? "INF" : "inf"));
        if (type == '%') strcat(body, "%");
    } else if (!type && s->prec < 0) {
        py_float_repr(m, body);
    } else if (!type || type == 'g' || type == 'G' || type == 'n') {
        snprintf(body, sizeof body, s->alt ? "%#.*g" : "%.*g", prec ? prec : 1, m);
        if (type == 'G') for (char *p = body; *p; p++) if (*p == 'e') *p = 'E';
        if (!type && !strpbrk(body, ".e")) strcat(body, ".0");
    } else if (type == 'f' || type == 'F' || type == '%') {
        snprintf(body, sizeof body, s->alt ? "%#.*f" : "%.*f", prec, type == '%' ? m * 100 : m);
        if (type == '%') strcat(body, "%");
    } else if (type == 'e' || type == 'E') {
        snprintf(body, sizeof body, type == 'e' ? (s->alt ? "%#.*e" : "%.*e") : (s->alt ? "%#.*E" : "%.*E"), prec, m);
    } else {
        jfail(c, at->pos, "unknown format code '%c' for object of type 'float'", type);
    }
    const char *prefix = neg ? "-" : s->sign == '+' ? "+" : s->sign == ' ' ? " " : "";
    if (!s->group) { put_padded(c, out, prefix, body, strlen(body), s, '>'); return; }
    size_t ilen = strspn(body, "0123456789");
    jbuf g = {0};
    group_digits(c, &g, body, ilen, s->group, 3);
    jb_puts(c, &g, body + ilen);
    put_padded(c, out, prefix, g.p, g.n, s, '>');
}

static void format_int(jctx *c, const jnode *at, jbuf *out, int64_t v, const fspec *s) {
    char type = s->type ? s->type : 'd';
    if (strchr("eEfFgG%", type)) { format_float(c, at, out, (double)v, s); return; }
    if (type == 'c') {
        if (v < 0 || v > 0x10FFFF) jfail(c, at->pos, "%%c arg not in range(0x110000)");
        jbuf b = {0};
        jb_put_cp(c, &b, (int32_t)v);
        put_padded(c, out, "", b.p, b.n, s, '<');
        return;
    }
    int base = type == 'b' ? 2 : type == 'o' ? 8 : (type == 'x' || type == 'X') ? 16 : 10;
    if (base == 10 && type != 'd' && type != 'n') jfail(c, at->pos, "unknown format code '%c' for object of type 'int'", type);
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    char digits[72];
    size_t n = 0;
    const char *set = type == 'X' ? "0123456789ABCDEF" : "0123456789abcdef";
    do { digits[n++] = set[mag % (uint64_t)base]; mag /= (uint64_t)base; } while (mag);
    for (size_t i = 0; i < n / 2; i++) { char t = digits[i]; digits[i] = digits[n - 1 - i]; digits[n - 1 - i] = t; }
    char prefix[8] = "";
    strcat(prefix, v < 0 ? "-" : s->sign == '+' ? "+" : s->sign == ' ' ? " " : "");
    if (s->alt && base != 10) strcat(prefix, base == 2 ? "0b" : base == 8 ? "0o" : type == 'X' ? "0X" : "0x");
    jbuf g = {0};
    group_digits(c, &g, digits, n, s->group, base == 10 ? 3 : 4);
    put_padded(c, out, prefix, g.p, g.n, s, '>');
}

static void format_text(jctx *c, const jnode *at, jbuf *out, const jstr *t, const fspec *s, char def_align) {
    if (s->type && s->type != 's') jfail(c, at->pos, "unknown format code '%c' for object of type 'str'", s->type);
    size_t len = s->prec >= 0 && (uint64_t)s->prec < jstr_ncp(t) ? utf8_offset(t->s, t->len, (size_t)s->prec) : t->len;
    put_padded(c, out, "", t->s, len, s, def_align);
}

/* ---------------- str.format ---------------- */

static bool is_align(int32_t ch) { return ch == '<' || ch == '>' || ch == '^' || ch == '='; }

static int64_t spec_number(jctx *c, const jnode *at, const char *p, size_t n, size_t *i) {
    int64_t v = 0;
    while (*i < n && p[*i] >= '0' && p[*i] <= '9') {
        v = v * 10 + (p[(*i)++] - '0');
        if (v > FMT_MAX_WIDTH) jfail(c, at->pos, "format width or precision too large");
    }
    return v;
}

/* [[fill]align][sign][z][#][0][width][,|_][.precision][type] */
static fspec parse_spec(jctx *c, const jnode *at, const char *p, size_t n) {
    fspec s = { .prec = -1 };
    size_t i = 0;
    int32_t cp0 = 0, cp1 = 0;
    int k0 = n ? utf8_next(p, n, &cp0) : 0;
    if (k0 && (size_t)k0 < n) utf8_next(p + k0, n - (size_t)k0, &cp1);
    if (k0 && (size_t)k0 < n && is_align(cp1)) { s.fill = cp0; s.align = (char)cp1; i = (size_t)k0 + 1; }
    else if (n && is_align(cp0)) { s.align = (char)cp0; i = 1; }
    if (i < n && (p[i] == '+' || p[i] == '-' || p[i] == ' ')) s.sign = p[i++];
    if (i < n && p[i] == 'z') i++;
    if (i < n && p[i] == '#') { s.alt = true; i++; }
    if (i < n && p[i] == '0') { s.zero = true; i++; }
    s.width = spec_number(c, at, p, n, &i);
    if (i < n && (p[i] == ',' || p[i] == '_')) s.group = p[i++];
    if (i < n && p[i] == '.') {
        i++;
        if (i >= n || p[i] < '0' || p[i] > '9') jfail(c, at->pos, "format specifier missing precision");
        s.prec = spec_number(c, at, p, n, &i);
    }
    if (i < n && strchr("bcdeEfFgGnosxX%", p[i])) s.type = p[i++];
    if (i != n) jfail(c, at->pos, "invalid format specifier '%.*s'", (int)n, p);
    return s;
}

static void format_value(jctx *c, const jnode *at, jbuf *out, jv v, const fspec *s, char str_align) {
    if ((v.k == JV_INT || v.k == JV_BOOL) && !(v.k == JV_BOOL && !s->type && !s->width)) {
        if (s->type == 's') jfail(c, at->pos, "unknown format code 's' for object of type 'int'");
        format_int(c, at, out, v.k == JV_BOOL ? v.b : v.i, s);
    } else if (v.k == JV_FLOAT) {
        if (s->type == 's') jfail(c, at->pos, "unknown format code 's' for object of type 'float'");
        format_float(c, at, out, v.f, s);
    } else {
        format_text(c, at, out, jv_to_str(c, v), s, str_align);
    }
}

/* One replacement field's value: name or index, then .attr and [key] parts. */
static jv format_field_value(jctx *c, const jnode *at, const char *f, size_t n, const jcall *call, size_t *auto_idx) {
    size_t i = 0;
    while (i < n && f[i] != '.' && f[i] != '[') i++;
    jv v;
    if (i == 0) {
        if (*auto_idx >= call->npos) jfail(c, at->pos, "Replacement index %zu out of range for positional args tuple", *auto_idx);
        v = call->pos[(*auto_idx)++];
    } else if (f[0] >= '0' && f[0] <= '9') {
        size_t idx = 0;
        for (size_t k = 0; k < i; k++) idx = idx * 10 + (size_t)(f[k] - '0');
        if (idx >= call->npos) jfail(c, at->pos, "Replacement index %zu out of range for positional args tuple", idx);
        v = call->pos[idx];
    } else {
        size_t k = 0;
        while (k < call->nkw && (strlen(call->kwn[k]) != i || memcmp(call->kwn[k], f, i))) k++;
        if (k == call->nkw) jfail(c, at->pos, "KeyError: '%.*s'", (int)i, f);
        v = call->kwv[k];
    }
    while (i < n) {
        size_t j = i + 1;
        if (f[i] == '.') {
            while (j < n && f[j] != '.' && f[j] != '[') j++;
            v = jeval_getattr(c, at->pos, v, ja_strndup(c, f + i + 1, j - i - 1));
            i = j;
        } else {
            while (j < n && f[j] != ']') j++;
            if (j >= n) jfail(c, at->pos, "missing ']' in format string");
            bool digits = j > i + 1 && strspn(f + i + 1, "0123456789") >= j - i - 1;
            jv key = digits ? jv_int(strtoll(f + i + 1, NULL, 10)) : jv_str(c, f + i + 1, j - i - 1);
            v = jeval_getitem(c, at->pos, v, key);
            i = j + 1;
        }
    }
    return v;
}

/* The field at fmt[i] (just after '{'): returns the index after its '}'. */
static size_t format_field(jctx *c, const jnode *at, jbuf *out, const jstr *fmt, size_t i, const jcall *call, size_t *auto_idx) {
    size_t start = i, depth = 1;
    for (; i < fmt->len; i++) {
        if (fmt->s[i] == '{') depth++;
        else if (fmt->s[i] == '}' && --depth == 0) break;
    }
    if (i >= fmt->len) jfail(c, at->pos, "expected '}' before end of string");
    const char *f = fmt->s + start;
    size_t n = i - start, name_end = 0;
    while (name_end < n && f[name_end] != '!' && f[name_end] != ':') name_end++;
    if (memchr(f, '{', n)) jfail(c, at->pos, "nested replacement fields are not supported");
    jv v = format_field_value(c, at, f, name_end, call, auto_idx);
    size_t p = name_end;
    if (p < n && f[p] == '!') {
        if (p + 1 >= n || !strchr("rsa", f[p + 1])) jfail(c, at->pos, "unknown conversion specifier in format string");
        if (f[p + 1] != 's') { jbuf b = {0}; jv_write_repr(c, &b, v); v = jv_buf(c, &b); }
        else v = (jv){ .k = JV_STR, .s = jv_to_str(c, v) };
        p += 2;
    }
    fspec s = { .prec = -1 };
    if (p < n && f[p] == ':') s = parse_spec(c, at, f + p + 1, n - p - 1);
    else if (p != n) jfail(c, at->pos, "expected ':' after conversion specifier");
    format_value(c, at, out, v, &s, '<');
    return i + 1;
}

jv jb_format_method(jctx *c, const jnode *at, const jstr *fmt, const jcall *call) {
    jbuf out = {0};
    size_t auto_idx = 0;
    for (size_t i = 0; i < fmt->len;) {
        char ch = fmt->s[i];
        if (ch == '{' && i + 1 < fmt->len && fmt->s[i + 1] == '{') { jb_putc(c, &out, '{'); i += 2; }
        else if (ch == '}' && i + 1 < fmt->len && fmt->s[i + 1] == '}') { jb_putc(c, &out, '}'); i += 2; }
        else if (ch == '}') jfail(c, at->pos, "single '}' encountered in format string");
        else if (ch == '{') i = format_field(c, at, &out, fmt, i + 1, call, &auto_idx);
        else { const char *brace = strpbrk(fmt->s + i, "{}"); size_t e = brace ? (size_t)(brace - fmt->s) : fmt->len; jb_put(c, &out, fmt->s + i, e - i); i = e; }
    }
    return jv_buf(c, &out);
}

JBUILTIN(m_format) { return jb_format_method(c, at, S(self), call); }

/* ---------------- printf-style % ---------------- */

typedef struct { const jv *items; size_t n, next; jv mapping; bool used_mapping; } pargs;

static jv next_arg(jctx *c, size_t pos, pargs *pa) {
    if (pa->next >= pa->n) jfail(c, pos, "not enough arguments for format string");
    return pa->items[pa->next++];
}

static jv percent_convert(jctx *c, const jnode *at, jv v, char conv, fspec *s) {
    s->type = 0;
    switch (conv) {
    case 'd': case 'i': case 'u':
        if (v.k == JV_FLOAT) {
            if (!isfinite(v.f)) jfail(c, at->pos, "cannot convert float to integer");
            if (!(fabs(v.f) < 9.2e18)) jfail(c, at->pos, "%%%c format: %g is too large for a 64-bit integer", conv, v.f);
            return jv_int((int64_t)v.f);
        }
        if (v.k != JV_INT && v.k != JV_BOOL) jfail(c, at->pos, "%%%c format: a real number is required, not %s", conv, jv_type_name(v));
        s->type = 'd';
        return v;
    case 'x': case 'X': case 'o':
        if (v.k != JV_INT && v.k != JV_BOOL) jfail(c, at->pos, "%%%c format: an integer is required, not %s", conv, jv_type_name(v));
        s->type = conv;
        return v;
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G':
        if (!jv_is_num(v)) jfail(c, at->pos, "must be real number, not %s", jv_type_name(v));
        s->type = conv;
        return jv_float(jv_num(v));
    case 'c':
        if (v.k == JV_STR && jstr_ncp(v.s) == 1) return v;
        if (v.k != JV_INT) jfail(c, at->pos, "%%c requires int or char");
        s->type = 'c';
        return v;
    case 'r': case 'a': { jbuf b = {0}; jv_write_repr(c, &b, v); return jv_buf(c, &b); }
    case 's': return (jv){ .k = JV_STR, .s = jv_to_str(c, v) };
    default: jfail(c, at->pos, "unsupported format character '%c'", conv);
    }
}

/* One conversion after '%' at fmt[i]; returns the index after it. */
static size_t percent_one(jctx *c, const jnode *at, jbuf *out, const jstr *fmt, size_t i, pargs *pa) {
    const char *f = fmt->s;
    size_t n = fmt->len;
    jv v = { .k = JV_UNDEF };
    bool have = false;
    if (i < n && f[i] == '(') {
        size_t depth = 1, start = ++i;
        for (; i < n && depth; i++) depth += f[i] == '(' ? 1 : f[i] == ')' ? -1 : 0;
        if (depth) jfail(c, at->pos, "incomplete format key");
        if (pa->mapping.k != JV_DICT) jfail(c, at->pos, "format requires a mapping");
        jv key = jv_str(c, f + start, i - 1 - start);
        if (!jd_get(c, pa->mapping.d, key, &v)) jfail(c, at->pos, "KeyError: '%s'", key.s->s);
        have = pa->used_mapping = true;
    }
    fspec s = { .prec = -1 };
    for (; i < n && strchr("-+ #0", f[i]); i++) {
        if (f[i] == '-') s.align = '<';
        else if (f[i] == '+') s.sign = '+';
        else if (f[i] == ' ' && s.sign != '+') s.sign = ' ';
        else if (f[i] == '#') s.alt = true;
        else s.zero = true;
    }
    if (i < n && f[i] == '*') { s.width = jb_int(c, at, next_arg(c, at->pos, pa), "*"); i++; }
    else s.width = spec_number(c, at, f, n, &i);
    if (s.width < 0) { s.align = '<'; s.width = -s.width; }
    if (s.width > FMT_MAX_WIDTH) jfail(c, at->pos, "width too large");
    if (i < n && f[i] == '.') {
        i++;
        if (i < n && f[i] == '*') { s.prec = jb_int(c, at, next_arg(c, at->pos, pa), "*"); i++; }
        else s.prec = spec_number(c, at, f, n, &i);
    }
    while (i < n && strchr("hlL", f[i])) i++;
    if (i >= n) jfail(c, at->pos, "incomplete format");
    char conv = f[i++];
    if (conv == '%') { jb_putc(c, out, '%'); return i; }
    if (!have) v = next_arg(c, at->pos, pa);
    if (s.align == '<') s.zero = false;
    v = percent_convert(c, at, v, conv, &s);
    if (v.k == JV_STR) s.zero = false;
    format_value(c, at, out, v, &s, '>');
    return i;
}

jv jb_percent_format(jctx *c, size_t pos, const jstr *fmt, jv args) {
    jnode at = { .pos = pos };
    pargs pa = { .mapping = args };
    if (args.k == JV_LIST && args.l->tuple) { pa.items = args.l->v; pa.n = args.l->n; }
    else { pa.items = &args; pa.n = 1; }
    jbuf out = {0};
    for (size_t i = 0; i < fmt->len;) {
        const char *pct = memchr(fmt->s + i, '%', fmt->len - i);
        size_t e = pct ? (size_t)(pct - fmt->s) : fmt->len;
        jb_put(c, &out, fmt->s + i, e - i);
        if (e >= fmt->len) break;
        i = percent_one(c, &at, &out, fmt, e + 1, &pa);
    }
    /* Python skips this check when the argument looks like a mapping (anything indexable but a tuple or str) */
    bool mapping_like = args.k == JV_DICT || args.k == JV_UNDEF || (args.k == JV_LIST && !args.l->tuple);
    if (pa.next < pa.n && !mapping_like && !pa.used_mapping)
        jfail(c, pos, "not all arguments converted during string formatting");
    return jv_buf(c, &out);
}

/* ---------------- the method table ---------------- */

static const jbuiltin str_methods[] = {
    B("capitalize", m_capitalize, 0, NULL),
    B("center", m_center, 1, "width", "fillchar"),
    B("count", m_count, 1, "sub", "start", "end"),
    B("endswith", m_endswith, 1, "suffix", "start", "end"),
    B("find", m_find, 1, "sub", "start", "end"),
    RAW("format", m_format),
    B("index", m_index, 1, "sub", "start", "end"),
    B("isalnum", m_isalnum, 0, NULL),
    B("isalpha", m_isalpha, 0, NULL),
    B("isdigit", m_isdigit, 0, NULL),
    B("islower", m_islower, 0, NULL),
    B("isspace", m_isspace, 0, NULL),
    B("isupper", m_isupper, 0, NULL),
    B("join", m_join, 1, "iterable"),
    B("ljust", m_ljust, 1, "width", "fillchar"),
    B("lower", m_lower, 0, NULL),
    B("lstrip", m_lstrip, 0, "chars"),
    B("partition", m_partition, 1, "sep"),
    B("removeprefix", m_removeprefix, 1, "prefix"),
    B("removesuffix", m_removesuffix, 1, "suffix"),
    B("replace", m_replace, 2, "old", "new", "count"),
    B("rfind", m_rfind, 1, "sub", "start", "end"),
    B("rindex", m_rindex, 1, "sub", "start", "end"),
    B("rjust", m_rjust, 1, "width", "fillchar"),
    B("rpartition", m_rpartition, 1, "sep"),
    B("rsplit", m_rsplit, 0, "sep", "maxsplit"),
    B("rstrip", m_rstrip, 0, "chars"),
    B("split", m_split, 0, "sep", "maxsplit"),
    B("splitlines", m_splitlines, 0, "keepends"),
    B("startswith", m_startswith, 1, "prefix", "start", "end"),
    B("strip", m_strip, 0, "chars"),
    B("swapcase", m_swapcase, 0, NULL),
    B("title", m_title, 0, NULL),
    B("upper", m_upper, 0, NULL),
    B("zfill", m_zfill, 1, "width"),
};

const jbuiltin *jb_find_str_method(const char *name) {
    for (size_t i = 0; i < sizeof str_methods / sizeof str_methods[0]; i++)
        if (!strcmp(str_methods[i].name, name)) return &str_methods[i];
    return NULL;
}
