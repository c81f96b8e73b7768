/* jinja_builtins.c — the filters, tests and globals of Jinja2 (as Hugging Face configures it: tojson keeps
 * non-ASCII and takes indent/separators/sort_keys, raise_exception, strftime_now), and the dict, list and
 * loop methods templates call. Each builtin declares its parameter names; jb_run binds positional and
 * keyword arguments to them, so every builtin sees a[i]/has[i] in declaration order.
 *
 * Sandbox differences from Jinja2's ImmutableSandboxedEnvironment, on the lenient side: list.append,
 * pop, insert and extend work (minja and llama.cpp allow them too); Jinja2 would refuse. Filters Jinja2
 * has but hearth does not (groupby, urlize, ...) fail only when they run. */
#define _GNU_SOURCE   /* memmem */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja/jinja_internal.h"

/* ---------------- argument helpers ---------------- */

int64_t jb_int(jctx *c, const jnode *at, jv v, const char *what) {
    if (v.k == JV_INT) return v.i;
    if (v.k == JV_BOOL) return v.b;
    jcheck_defined(c, at->pos, v);
    jfail(c, at->pos, "'%s' must be an integer, not %s", what, jv_type_name(v));
}

const jstr *jb_str_arg(jctx *c, const jnode *at, jv v, const char *what) {
    if (v.k == JV_STR) return v.s;
    jcheck_defined(c, at->pos, v);
    jfail(c, at->pos, "'%s' must be a string, not %s", what, jv_type_name(v));
}

static int64_t jv_int_value(jv v) { return v.k == JV_BOOL ? v.b : v.i; }
static jv str_v(jctx *c, jv v) { return (jv){ .k = JV_STR, .s = jv_to_str(c, v) }; }
static bool opt_bool(const jv *a, const bool *has, int i) { return has[i] && jv_truthy(a[i]); }
static bool given(const jv *a, const bool *has, int i) { return has[i] && a[i].k != JV_NONE; }

static jv call_str_method(jctx *c, const jnode *at, const char *name, jv s) {
    static const jv none_args[JB_MAXP];
    static const bool no_args[JB_MAXP];
    return jb_find_str_method(name)->fn(c, at, s, none_args, no_args, NULL);
}

/* Jinja2's make_attrgetter: "a.b.0" looks up item a, then b, then index 0 (items first, then attributes). */
static jv attr_path(jctx *c, const jnode *at, jv item, jv attribute) {
    if (attribute.k != JV_STR) return jeval_getitem(c, at->pos, item, attribute);
    const char *p = attribute.s->s, *end = p + attribute.s->len;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t n = dot ? (size_t)(dot - p) : (size_t)(end - p);
        bool digits = n && strspn(p, "0123456789") >= n;
        jv key = digits && n < 18 ? jv_int(strtoll(p, NULL, 10)) : jv_str(c, p, n);
        item = jeval_getitem(c, at->pos, item, key);
        if (!dot) break;
        p = dot + 1;
    }
    return item;
}

/* The key a sort/unique/min/max compares: the attribute if given, lower-cased unless case-sensitive. */
static jv sort_key(jctx *c, const jnode *at, jv item, jv attribute, bool case_sensitive) {
    jv k = attribute.k != JV_NONE && attribute.k != JV_UNDEF ? attr_path(c, at, item, attribute) : item;
    if (!case_sensitive && k.k == JV_STR) k = jb_str_lower(c, k.s);
    return k;
}

/* Stable bottom-up merge sort of idx[] by keys[] (Python's sort; reverse keeps equal items in order). */
static void stable_sort(jctx *c, const jnode *at, const jv *keys, size_t *idx, size_t n, bool reverse) {
    size_t *tmp = ja_alloc(c, (n + 1) * sizeof *tmp);
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = HT_MIN(lo + w, n), hi = HT_MIN(lo + 2 * w, n), l = lo, r = mid, k = lo;
            while (l < mid && r < hi) {
                int cmp = jv_cmp(c, at->pos, keys[idx[r]], keys[idx[l]], "<");
                bool take_right = reverse ? cmp > 0 : cmp < 0;
                tmp[k++] = take_right ? idx[r++] : idx[l++];
            }
            while (l < mid) tmp[k++] = idx[l++];
            while (r < hi) tmp[k++] = idx[r++];
        }
        memcpy(idx, tmp, n * sizeof *idx);
    }
}

static size_t *sorted_order(jctx *c, const jnode *at, const jv *keys, size_t n, bool reverse) {
    size_t *idx = ja_alloc(c, (n + 1) * sizeof *idx);
    for (size_t i = 0; i < n; i++) idx[i] = i;
    stable_sort(c, at, keys, idx, n, reverse);
    return idx;
}

static jlist *iter_of(jctx *c, const jnode *at, jv v) { return jeval_iter_list(c, at->pos, v); }

/* ---------------- filters: strings ---------------- */

static jv f_length(jctx *c, const jnode *at, jv self, const jv *a, const bool *has, const jcall *call);

JBUILTIN(f_string) { return str_v(c, self); }
JBUILTIN(f_safe) { return str_v(c, self); }
JBUILTIN(f_upper) { return jb_str_upper(c, jv_to_str(c, self)); }
JBUILTIN(f_lower) { return jb_str_lower(c, jv_to_str(c, self)); }
JBUILTIN(f_capitalize) { return call_str_method(c, at, "capitalize", str_v(c, self)); }

JBUILTIN(f_trim) {
    const jstr *chars = given(a, has, 0) ? jb_str_arg(c, at, a[0], "chars") : NULL;
    return jb_str_strip(c, jv_to_str(c, self), chars, true, true);
}

/* Jinja2's title: capitalise each part after a run of whitespace or -([{< */
JBUILTIN(f_title) {
    const jstr *s = jv_to_str(c, self);
    jbuf b = {0};
    bool word_start = true;
    for (size_t i = 0; i < s->len;) {
        int32_t cp;
        i += (size_t)utf8_next(s->s + i, s->len - i, &cp);
        bool delim = py_isspace(cp) || (cp < 128 && strchr("-({[<", (int)cp) && cp);
        jb_put_cp(c, &b, delim ? cp : word_start ? cp_upper(cp) : cp_lower(cp));
        word_start = delim;
    }
    return jv_buf(c, &b);
}

JBUILTIN(f_replace) {
    int64_t count = given(a, has, 2) ? jb_int(c, at, a[2], "count") : -1;
    return jb_str_replace(c, jv_to_str(c, self), jv_to_str(c, a[0]), jv_to_str(c, a[1]), count);
}

JBUILTIN(f_center) {
    return jb_str_center(c, jv_to_str(c, self), has[0] ? jb_int(c, at, a[0], "width") : 80);
}

static void html_escape(jctx *c, jbuf *b, const jstr *s) {
    for (size_t i = 0; i < s->len; i++) {
        switch (s->s[i]) {
        case '&': jb_puts(c, b, "&amp;"); break;
        case '<': jb_puts(c, b, "&lt;"); break;
        case '>': jb_puts(c, b, "&gt;"); break;
        case '"': jb_puts(c, b, "&#34;"); break;
        case '\'': jb_puts(c, b, "&#39;"); break;
        default: jb_putc(c, b, s->s[i]);
        }
    }
}

JBUILTIN(f_escape) {
    jbuf b = {0};
    html_escape(c, &b, jv_to_str(c, self));
    return jv_buf(c, &b);
}

/* Jinja2's indent: lines after the first (and the first with first=True) get width spaces (or the string
 * width); blank lines only with blank=True. */
JBUILTIN(f_indent) {
    jcheck_defined(c, at->pos, self);
    if (self.k != JV_STR) jfail(c, at->pos, "indent needs a string, not %s", jv_type_name(self));
    jv ind = has[0] ? a[0] : jv_int(4);
    const jstr *prefix = ind.k == JV_STR ? ind.s : NULL;
    jbuf pb = {0};
    if (!prefix) {
        int64_t w = jb_int(c, at, ind, "width");
        if (w > 100000) jfail(c, at->pos, "indent width too large");
        for (int64_t i = 0; i < w; i++) jb_putc(c, &pb, ' ');
        prefix = jv_buf(c, &pb).s;
    }
    jbuf src = {0};
    jv_write_str(c, &src, self);
    jb_putc(c, &src, '\n');
    jlist *lines = call_str_method(c, at, "splitlines", jv_buf(c, &src)).l;
    jbuf b = {0};
    for (size_t i = 0; i < lines->n; i++) {
        const jstr *line = lines->v[i].s;
        if (i) jb_putc(c, &b, '\n');
        if (i && (line->len || opt_bool(a, has, 2))) jb_put(c, &b, prefix->s, prefix->len);
        jb_put(c, &b, line->s, line->len);
    }
    jv out = jv_buf(c, &b);
    if (!opt_bool(a, has, 1)) return out;
    jbuf f = {0};
    jb_put(c, &f, prefix->s, prefix->len);
    jb_put(c, &f, out.s->s, out.s->len);
    return jv_buf(c, &f);
}

JBUILTIN(f_wordcount) {
    const jstr *s = jv_to_str(c, self);
    int64_t n = 0;
    bool in_word = false;
    for (size_t i = 0; i < s->len;) {
        int32_t cp;
        i += (size_t)utf8_next(s->s + i, s->len - i, &cp);
        bool w = py_isalnum(cp) || cp == '_';
        if (w && !in_word) n++;
        in_word = w;
    }
    return jv_int(n);
}

JBUILTIN(f_truncate) {
    if (self.k != JV_STR) {   /* Jinja2 measures len() first: short sequences come back unchanged */
        int64_t n = jv_int_value(f_length(c, at, self, a, has, call));
        int64_t limit = has[0] ? jb_int(c, at, a[0], "length") : 255;
        if (n <= limit + (given(a, has, 3) ? jb_int(c, at, a[3], "leeway") : 5)) return self;
        jfail(c, at->pos, "truncate needs a string, not %s", jv_type_name(self));
    }
    const jstr *s = self.s;
    int64_t length = has[0] ? jb_int(c, at, a[0], "length") : 255, leeway = given(a, has, 3) ? jb_int(c, at, a[3], "leeway") : 5;
    const jstr *end = has[2] ? jb_str_arg(c, at, a[2], "end") : jv_cstr(c, "...").s;
    if (length < (int64_t)jstr_ncp(end)) jfail(c, at->pos, "expected length >= %zu, got %lld", jstr_ncp(end), (long long)length);
    if (leeway < 0) jfail(c, at->pos, "expected leeway >= 0, got %lld", (long long)leeway);
    if ((int64_t)jstr_ncp(s) <= length + leeway) return str_v(c, self);
    size_t cut = utf8_offset(s->s, s->len, (size_t)(length - (int64_t)jstr_ncp(end)));
    if (!opt_bool(a, has, 1)) {   /* drop the last partial word: rsplit(" ", 1)[0] */
        const char *sp = NULL;
        for (size_t i = cut; i-- > 0;) if (s->s[i] == ' ') { sp = s->s + i; break; }
        if (sp) cut = (size_t)(sp - s->s);
    }
    jbuf b = {0};
    jb_put(c, &b, s->s, cut);
    jb_put(c, &b, end->s, end->len);
    return jv_buf(c, &b);
}

/* str % args, with kwargs as the mapping */
JBUILTIN(f_format) {
    if (call->npos && call->nkw) jfail(c, at->pos, "can't handle positional and keyword arguments at the same time");
    jv args;
    if (call->nkw) {
        args = jv_dict(c);
        for (size_t i = 0; i < call->nkw; i++) jd_set_s(c, args.d, call->kwn[i], call->kwv[i]);
    } else {
        args = jv_list(c, call->npos);
        args.l->tuple = true;
        for (size_t i = 0; i < call->npos; i++) jl_push(c, args.l, call->pos[i]);
    }
    return jb_percent_format(c, at->pos, jv_to_str(c, self), args);
}

/* HF's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
JBUILTIN(f_tojson) {
    jjson_opts o = { .ensure_ascii = opt_bool(a, has, 0), .sort_keys = opt_bool(a, has, 3) };
    if (given(a, has, 1)) {
        if (a[1].k == JV_STR) o.indent = a[1].s->s;
        else {
            int64_t w = jb_int(c, at, a[1], "indent");
            if (w > 1000) jfail(c, at->pos, "indent too large");
            jbuf b = {0};
            jb_put(c, &b, "", 0);
            for (int64_t i = 0; i < w; i++) jb_putc(c, &b, ' ');
            o.indent = b.p ? b.p : "";
        }
    }
    o.item_sep = o.indent ? "," : ", ";
    o.key_sep = ": ";
    if (given(a, has, 2)) {
        jlist *sep = iter_of(c, at, a[2]);
        if (sep->n != 2) jfail(c, at->pos, "separators must be a pair of strings");
        o.item_sep = jb_str_arg(c, at, sep->v[0], "separators")->s;
        o.key_sep = jb_str_arg(c, at, sep->v[1], "separators")->s;
    }
    jbuf b = {0};
    jv_write_json(c, at->pos, &b, self, &o);
    return jv_buf(c, &b);
}

/* ---------------- filters: numbers ---------------- */

JBUILTIN(f_abs) {
    jcheck_defined(c, at->pos, self);
    if (self.k == JV_FLOAT) return jv_float(fabs(self.f));
    if (self.k == JV_BOOL) return jv_int(self.b);
    if (self.k != JV_INT) jfail(c, at->pos, "bad operand type for abs(): '%s'", jv_type_name(self));
    if (self.i == INT64_MIN) jfail(c, at->pos, "integer overflow");
    return jv_int(self.i < 0 ? -self.i : self.i);
}

/* Python's int(text, base): optional sign, optional base prefix, digits with single underscores. */
static bool parse_py_int(const jstr *s, int64_t base, int64_t *out) {
    const char *p = s->s, *end = s->s + s->len;
    while (p < end && isspace((unsigned char)*p)) p++;
    while (end > p && isspace((unsigned char)end[-1])) end--;
    bool neg = false;
    if (p < end && (*p == '+' || *p == '-')) neg = *p++ == '-';
    if (end - p >= 2 && p[0] == '0') {
        char k = (char)(p[1] | 0x20);
        int64_t pb = k == 'x' ? 16 : k == 'o' ? 8 : k == 'b' ? 2 : 0;
        if (pb && (base == pb || base == 0)) { base = pb; p += 2; if (p < end && *p == '_') p++; }
    }
    if (base == 0) base = 10;
    if (base < 2 || base > 36 || p >= end) return false;
    uint64_t v = 0;
    for (const char *q = p; q < end; q++) {
        if (*q == '_' && q > p && q + 1 < end && q[1] != '_') continue;
        int d = isdigit((unsigned char)*q) ? *q - '0' : isalpha((unsigned char)*q) ? (*q | 0x20) - 'a' + 10 : 99;
        if (d >= base) return false;
        if (v > ((uint64_t)INT64_MAX - (uint64_t)d) / (uint64_t)base) return false;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    *out = neg ? -(int64_t)v : (int64_t)v;
    return true;
}

/* Python's float(text): decimal or exponent notation, inf/infinity/nan, single underscores between digits. */
static bool parse_py_float(jctx *c, const jstr *s, double *out) {
    const char *p = s->s, *end = s->s + s->len;
    while (p < end && isspace((unsigned char)*p)) p++;
    while (end > p && isspace((unsigned char)end[-1])) end--;
    if (p >= end) return false;
    char *clean = ja_alloc(c, (size_t)(end - p) + 1), *o = clean;
    for (const char *q = p; q < end; q++) {
        if (*q == '_' && q > p && isdigit((unsigned char)q[-1]) && q + 1 < end && isdigit((unsigned char)q[1])) continue;
        if (!isalnum((unsigned char)*q) && !strchr("+-.", *q)) return false;
        *o++ = *q;
    }
    *o = 0;
    const char *body = clean + (clean[0] == '+' || clean[0] == '-');
    if (!strcasecmp(body, "inf") || !strcasecmp(body, "infinity") || !strcasecmp(body, "nan")) {
        double v = (body[0] | 0x20) == 'n' ? NAN : INFINITY;
        *out = clean[0] == '-' ? -v : v;
        return true;
    }
    if (strpbrk(body, "xXpP") || !strpbrk(body, "0123456789")) return false;
    char *stop;
    *out = strtod(clean, &stop);
    return *stop == 0;
}

JBUILTIN(f_int) {
    jv dflt = has[0] ? a[0] : jv_int(0);
    jcheck_defined(c, at->pos, self);
    if (self.k == JV_INT) return self;
    if (self.k == JV_BOOL) return jv_int(self.b);
    if (self.k == JV_FLOAT) return isfinite(self.f) && fabs(self.f) < 9.2e18 ? jv_int((int64_t)self.f) : dflt;
    if (self.k != JV_STR) return dflt;
    int64_t v;
    double d;
    if (parse_py_int(self.s, has[1] ? jb_int(c, at, a[1], "base") : 10, &v)) return jv_int(v);
    if (parse_py_float(c, self.s, &d) && isfinite(d) && fabs(d) < 9.2e18) return jv_int((int64_t)d);
    return dflt;
}

JBUILTIN(f_float) {
    jv dflt = has[0] ? a[0] : jv_float(0);
    jcheck_defined(c, at->pos, self);
    if (jv_is_num(self)) return jv_float(jv_num(self));
    double d;
    if (self.k == JV_STR && parse_py_float(c, self.s, &d)) return jv_float(d);
    return dflt;
}

static double round_half_even(double v, int64_t prec) {
    if (prec > 300) return v;
    if (prec >= 0) {
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)prec, v);
        return strtod(buf, NULL);
    }
    double p = pow(10.0, (double)-prec);
    return rint(v / p) * p;
}

JBUILTIN(f_round) {
    int64_t prec = has[0] ? jb_int(c, at, a[0], "precision") : 0;
    const char *method = has[1] ? jb_str_arg(c, at, a[1], "method")->s : "common";
    jcheck_defined(c, at->pos, self);
    if (!jv_is_num(self)) jfail(c, at->pos, "type %s doesn't define __round__ method", jv_type_name(self));
    if (prec < -400 || prec > 400) prec = prec < 0 ? -400 : 400;
    if (!strcmp(method, "common")) {
        if (self.k == JV_FLOAT) return jv_float(isfinite(self.f) ? round_half_even(self.f, prec) : self.f);
        int64_t i = self.k == JV_BOOL ? self.b : self.i;
        if (prec >= 0) return jv_int(i);
        return jv_int((int64_t)round_half_even((double)i, prec));
    }
    bool ceil_ = !strcmp(method, "ceil");
    if (!ceil_ && strcmp(method, "floor")) jfail(c, at->pos, "method must be 'common', 'ceil' or 'floor'");
    double p = pow(10.0, (double)prec), v = jv_num(self) * p;
    return jv_float((ceil_ ? ceil(v) : floor(v)) / p);
}

JBUILTIN(f_sum) {
    jlist *items = iter_of(c, at, self);
    jv total = has[1] ? a[1] : jv_int(0);
    for (size_t i = 0; i < items->n; i++)
        total = jeval_binop(c, at->pos, OP_ADD, total, given(a, has, 0) ? attr_path(c, at, items->v[i], a[0]) : items->v[i]);
    return total;
}

/* ---------------- filters: sequences ---------------- */

JBUILTIN(f_length) {
    switch (self.k) {
    case JV_UNDEF: return jv_int(0);
    case JV_STR: return jv_int((int64_t)jstr_ncp(self.s));
    case JV_LIST: if (self.l->kind != JL_GEN) return jv_int((int64_t)self.l->n); break;
    case JV_DICT: return jv_int((int64_t)self.d->n);
    default: break;
    }
    jfail(c, at->pos, "object of type '%s' has no len()", jv_type_name(self));
}

JBUILTIN(f_list) {
    jv out = { .k = JV_LIST };
    out.l = iter_of(c, at, self);
    return out;
}

JBUILTIN(f_first) {
    jlist *items = iter_of(c, at, self);
    return items->n ? items->v[0] : jv_undef_hint(c, "No first item, sequence was empty.");
}

JBUILTIN(f_last) {
    if (self.k == JV_LIST && self.l->kind == JL_GEN) jfail(c, at->pos, "'generator' object is not reversible");
    jlist *items = iter_of(c, at, self);
    return items->n ? items->v[items->n - 1] : jv_undef_hint(c, "No last item, sequence was empty.");
}

JBUILTIN(f_reverse) {
    if (self.k == JV_STR) {
        jlist *chars = iter_of(c, at, self);
        jbuf b = {0};
        for (size_t i = chars->n; i-- > 0;) jb_put(c, &b, chars->v[i].s->s, chars->v[i].s->len);
        return jv_buf(c, &b);
    }
    if (self.k != JV_LIST && self.k != JV_DICT && self.k != JV_UNDEF) jfail(c, at->pos, "argument to reverse filter is not iterable");
    jlist *items = iter_of(c, at, self);
    jv out = jv_list(c, items->n);
    for (size_t i = items->n; i-- > 0;) jl_push(c, out.l, items->v[i]);
    if (self.k != JV_LIST || self.l->kind != JL_GEN) out.l->kind = JL_GEN;   /* reversed(): an iterator */
    return out;
}

/* Filters that are generators in Jinja2 return lists marked JL_GEN (always true, no len()). */
static jv generator(jv list) { list.l->kind = JL_GEN; return list; }

JBUILTIN(f_items) {
    jv out = generator(jv_list(c, 0));
    if (self.k == JV_UNDEF) return out;
    if (self.k != JV_DICT) jfail(c, at->pos, "Can only get item pairs from a mapping.");
    for (size_t i = 0; i < self.d->n; i++) jl_push(c, out.l, jv_tuple2(c, self.d->keys[i], self.d->vals[i]));
    return out;
}

JBUILTIN(f_join) {
    jlist *items = iter_of(c, at, self);
    const jstr *sep = has[0] ? jv_to_str(c, a[0]) : NULL;
    jbuf b = {0};
    for (size_t i = 0; i < items->n; i++) {
        if (i && sep) jb_put(c, &b, sep->s, sep->len);
        jv v = given(a, has, 1) ? attr_path(c, at, items->v[i], a[1]) : items->v[i];
        jv_write_str(c, &b, v);
    }
    return jv_buf(c, &b);
}

JBUILTIN(f_sort) {
    jlist *items = iter_of(c, at, self);
    jv attr = has[2] ? a[2] : jv_none();
    jv *keys = ja_alloc(c, (items->n + 1) * sizeof *keys);
    for (size_t i = 0; i < items->n; i++) keys[i] = sort_key(c, at, items->v[i], attr, opt_bool(a, has, 1));
    size_t *idx = sorted_order(c, at, keys, items->n, opt_bool(a, has, 0));
    jv out = jv_list(c, items->n);
    for (size_t i = 0; i < items->n; i++) jl_push(c, out.l, items->v[idx[i]]);
    return out;
}

JBUILTIN(f_dictsort) {
    if (self.k != JV_DICT) jfail(c, at->pos, "dictsort needs a mapping, not %s", jv_type_name(self));
    const char *by = has[1] ? jb_str_arg(c, at, a[1], "by")->s : "key";
    bool by_value = !strcmp(by, "value");
    if (!by_value && strcmp(by, "key")) jfail(c, at->pos, "You can only sort by either 'key' or 'value'");
    size_t n = self.d->n;
    jv *keys = ja_alloc(c, (n + 1) * sizeof *keys);
    for (size_t i = 0; i < n; i++)
        keys[i] = sort_key(c, at, by_value ? self.d->vals[i] : self.d->keys[i], jv_none(), opt_bool(a, has, 0));
    size_t *idx = sorted_order(c, at, keys, n, opt_bool(a, has, 2));
    jv out = jv_list(c, n);
    for (size_t i = 0; i < n; i++) jl_push(c, out.l, jv_tuple2(c, self.d->keys[idx[i]], self.d->vals[idx[i]]));
    return out;
}

JBUILTIN(f_unique) {
    jlist *items = iter_of(c, at, self);
    jv attr = has[1] ? a[1] : jv_none();
    jv seen = jv_dict(c), out = jv_list(c, 0);
    for (size_t i = 0; i < items->n; i++) {
        jv k = sort_key(c, at, items->v[i], attr, opt_bool(a, has, 0));
        if (jd_get(c, seen.d, k, NULL)) continue;
        jd_set(c, seen.d, k, jv_none());
        jl_push(c, out.l, items->v[i]);
    }
    return generator(out);
}

static jv min_or_max(jctx *c, const jnode *at, jv self, const jv *a, const bool *has, bool want_max) {
    jlist *items = iter_of(c, at, self);
    if (!items->n) return jv_undef_hint(c, "No aggregated item, sequence was empty.");
    jv attr = has[1] ? a[1] : jv_none();
    size_t best = 0;
    jv best_key = sort_key(c, at, items->v[0], attr, opt_bool(a, has, 0));
    for (size_t i = 1; i < items->n; i++) {
        jv k = sort_key(c, at, items->v[i], attr, opt_bool(a, has, 0));
        int cmp = jv_cmp(c, at->pos, k, best_key, want_max ? ">" : "<");
        if (want_max ? cmp > 0 : cmp < 0) { best = i; best_key = k; }
    }
    return items->v[best];
}
JBUILTIN(f_max) { return min_or_max(c, at, self, a, has, true); }
JBUILTIN(f_min) { return min_or_max(c, at, self, a, has, false); }

JBUILTIN(f_batch) {
    int64_t size = jb_int(c, at, a[0], "linecount");
    if (size < 1) jfail(c, at->pos, "batch size must be positive");
    jlist *items = iter_of(c, at, self);
    jv out = jv_list(c, 0), cur = jv_list(c, 0);
    for (size_t i = 0; i < items->n; i++) {
        if ((int64_t)cur.l->n == size) { jl_push(c, out.l, cur); cur = jv_list(c, 0); }
        jl_push(c, cur.l, items->v[i]);
    }
    if (cur.l->n) {
        if (given(a, has, 1)) while ((int64_t)cur.l->n < size) jl_push(c, cur.l, a[1]);
        jl_push(c, out.l, cur);
    }
    return generator(out);
}

JBUILTIN(f_default) {
    jv dflt = has[0] ? a[0] : jv_str(c, "", 0);
    if (self.k == JV_UNDEF || (opt_bool(a, has, 1) && !jv_truthy(self))) return dflt;
    return self;
}

JBUILTIN(f_attr) {
    jv out;
    const jstr *name = jb_str_arg(c, at, a[0], "name");
    jcheck_defined(c, at->pos, self);
    if (jeval_attr_only(c, self, name->s, &out)) return out;
    return jv_undef_attr(c, self, name->s);
}

/* map(attribute='x', default=...) or map('filter', args...) */
JBUILTIN(f_map) {
    jlist *items = iter_of(c, at, self);
    jv out = jv_list(c, items->n);
    long attr = -1, dflt = -1;
    for (size_t i = 0; i < call->nkw; i++) {
        if (!strcmp(call->kwn[i], "attribute")) attr = (long)i;
        else if (!strcmp(call->kwn[i], "default")) dflt = (long)i;
    }
    if (!call->npos && attr >= 0) {
        for (size_t i = 0; i < call->nkw; i++)
            if ((long)i != attr && (long)i != dflt) jfail(c, at->pos, "unexpected keyword argument '%s'", call->kwn[i]);
        for (size_t i = 0; i < items->n; i++) {
            jv v = attr_path(c, at, items->v[i], call->kwv[attr]);
            if (v.k == JV_UNDEF && dflt >= 0 && call->kwv[dflt].k != JV_NONE) v = call->kwv[dflt];
            jl_push(c, out.l, v);
        }
        return generator(out);
    }
    if (!call->npos) jfail(c, at->pos, "map requires a filter argument");
    const char *name = jb_str_arg(c, at, call->pos[0], "filter")->s;
    jcall rest = { .pos = call->pos + 1, .npos = call->npos - 1, .kwn = call->kwn, .kwv = call->kwv, .nkw = call->nkw };
    for (size_t i = 0; i < items->n; i++) jl_push(c, out.l, jb_filter(c, at, name, items->v[i], &rest));
    return generator(out);
}

/* select/reject/selectattr/rejectattr: keep items whose (attribute's) test result is `keep`. */
static jv select_items(jctx *c, const jnode *at, jv self, const jcall *call, bool by_attr, bool keep) {
    jlist *items = iter_of(c, at, self);
    size_t off = by_attr ? 1 : 0;
    if (by_attr && !call->npos) jfail(c, at->pos, "missing parameter for attribute name");
    const char *test = call->npos > off ? jb_str_arg(c, at, call->pos[off], "test")->s : NULL;
    jcall rest = { .pos = call->npos > off ? call->pos + off + 1 : NULL, .npos = call->npos > off ? call->npos - off - 1 : 0, .kwn = call->kwn,
                   .kwv = call->kwv, .nkw = call->nkw };
    jv out = jv_list(c, 0);
    for (size_t i = 0; i < items->n; i++) {
        jv v = by_attr ? attr_path(c, at, items->v[i], call->pos[0]) : items->v[i];
        bool ok = test ? jb_test(c, at, test, v, &rest) : jv_truthy(v);
        if (ok == keep) jl_push(c, out.l, items->v[i]);
    }
    return generator(out);
}
JBUILTIN(f_select) { return select_items(c, at, self, call, false, true); }
JBUILTIN(f_reject) { return select_items(c, at, self, call, false, false); }
JBUILTIN(f_selectattr) { return select_items(c, at, self, call, true, true); }
JBUILTIN(f_rejectattr) { return select_items(c, at, self, call, true, false); }

/* ---------------- tests ---------------- */

JBUILTIN(t_defined) { return jv_bool(self.k != JV_UNDEF); }
JBUILTIN(t_undefined) { return jv_bool(self.k == JV_UNDEF); }
JBUILTIN(t_none) { return jv_bool(self.k == JV_NONE); }
JBUILTIN(t_boolean) { return jv_bool(self.k == JV_BOOL); }
JBUILTIN(t_true) { return jv_bool(self.k == JV_BOOL && self.b); }
JBUILTIN(t_false) { return jv_bool(self.k == JV_BOOL && !self.b); }
JBUILTIN(t_string) { return jv_bool(self.k == JV_STR); }
JBUILTIN(t_number) { return jv_bool(jv_is_num(self)); }
JBUILTIN(t_integer) { return jv_bool(self.k == JV_INT); }
JBUILTIN(t_float) { return jv_bool(self.k == JV_FLOAT); }
JBUILTIN(t_mapping) { return jv_bool(self.k == JV_DICT); }
JBUILTIN(t_iterable) { return jv_bool(self.k == JV_STR || self.k == JV_LIST || self.k == JV_DICT || self.k == JV_UNDEF || self.k == JV_LOOP); }
JBUILTIN(t_sequence) { return jv_bool(self.k == JV_STR || jv_is_plain_list(self) || self.k == JV_DICT || self.k == JV_UNDEF); }
JBUILTIN(t_callable) { return jv_bool(self.k == JV_FUNC); }
JBUILTIN(t_escaped) { return jv_bool(false); }
JBUILTIN(t_eq) { return jv_bool(jv_eq(c, self, a[0])); }
JBUILTIN(t_ne) { return jv_bool(!jv_eq(c, self, a[0])); }
JBUILTIN(t_lt) { return jv_bool(jv_cmp(c, at->pos, self, a[0], "<") < 0); }
JBUILTIN(t_le) { return jv_bool(jv_cmp(c, at->pos, self, a[0], "<=") <= 0); }
JBUILTIN(t_gt) { return jv_bool(jv_cmp(c, at->pos, self, a[0], ">") > 0); }
JBUILTIN(t_ge) { return jv_bool(jv_cmp(c, at->pos, self, a[0], ">=") >= 0); }

JBUILTIN(t_in) {
    jv seq = a[0];
    if (seq.k == JV_STR) {
        const jstr *s = jb_str_arg(c, at, self, "value");
        return jv_bool(!s->len || memmem(seq.s->s, seq.s->len, s->s, s->len));
    }
    if (seq.k == JV_DICT) return jv_bool(jd_get(c, seq.d, self, NULL));
    jlist *items = iter_of(c, at, seq);
    for (size_t i = 0; i < items->n; i++) if (jv_eq(c, items->v[i], self)) return jv_bool(true);
    return jv_bool(false);
}

JBUILTIN(t_sameas) {
    jv o = a[0];
    if (self.k != o.k) return jv_bool(false);
    switch (self.k) {
    case JV_NONE: case JV_UNDEF: return jv_bool(true);
    case JV_BOOL: return jv_bool(self.b == o.b);
    case JV_INT: return jv_bool(self.i == o.i);
    case JV_FLOAT: return jv_bool(self.f == o.f);
    default: return jv_bool(self.d == o.d);
    }
}

/* value % 2 with Python's sign rule: 0 or 1 for ints, possibly fractional for floats */
static double mod2(jctx *c, const jnode *at, jv v) {
    jcheck_defined(c, at->pos, v);
    if (v.k == JV_FLOAT) { double m = fmod(v.f, 2.0); return m < 0 ? m + 2.0 : m; }
    int64_t i = jb_int(c, at, v, "value");
    return (double)(i & 1);
}
JBUILTIN(t_odd) { return jv_bool(mod2(c, at, self) == 1.0); }
JBUILTIN(t_even) { return jv_bool(mod2(c, at, self) == 0.0); }
JBUILTIN(t_divisibleby) {
    jcheck_defined(c, at->pos, self);
    if (!jv_is_num(self) || !jv_is_num(a[0])) jfail(c, at->pos, "divisibleby needs numbers");
    if (jv_num(a[0]) == 0) jfail(c, at->pos, "integer division or modulo by zero");
    if (self.k == JV_FLOAT || a[0].k == JV_FLOAT) return jv_bool(fmod(jv_num(self), jv_num(a[0])) == 0);
    int64_t x = self.k == JV_BOOL ? self.b : self.i, y = a[0].k == JV_BOOL ? a[0].b : a[0].i;
    return jv_bool(y == -1 || x % y == 0);
}

JBUILTIN(t_lower) { return call_str_method(c, at, "islower", str_v(c, self)); }
JBUILTIN(t_upper) { return call_str_method(c, at, "isupper", str_v(c, self)); }

JBUILTIN(t_filter) {
    bool known;
    return jv_bool(self.k == JV_STR && jb_find_filter(self.s->s, &known) != NULL);
}
JBUILTIN(t_test) {
    bool known;
    return jv_bool(self.k == JV_STR && jb_find_test(self.s->s, &known) != NULL);
}

/* ---------------- globals ---------------- */

JBUILTIN(g_range) {
    int64_t v[3] = { 0, 0, 1 };
    if (call->nkw) jfail(c, at->pos, "range() takes no keyword arguments");
    if (call->npos < 1 || call->npos > 3) jfail(c, at->pos, "range expected 1 to 3 arguments, got %zu", call->npos);
    for (size_t i = 0; i < call->npos; i++) {
        jv x = call->pos[i];
        jcheck_defined(c, at->pos, x);
        if (x.k != JV_INT && x.k != JV_BOOL) jfail(c, at->pos, "'%s' object cannot be interpreted as an integer", jv_type_name(x));
        v[call->npos == 1 ? 1 : i] = x.k == JV_BOOL ? x.b : x.i;
    }
    int64_t start = v[0], stop = v[1], step = v[2];
    if (step == 0) jfail(c, at->pos, "range() arg 3 must not be zero");
    double count = step > 0 ? (stop > start ? ceil(((double)stop - (double)start) / (double)step) : 0)
                            : (start > stop ? ceil(((double)start - (double)stop) / -(double)step) : 0);
    if (count > JINJA_MAX_RANGE)
        jfail(c, at->pos, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", JINJA_MAX_RANGE);
    jv out = jv_list(c, (size_t)count);
    for (int64_t i = 0, x = start; i < (int64_t)count; i++, x += step) jl_push(c, out.l, jv_int(x));
    return out;
}

/* dict(mapping or pairs, **kwargs) and namespace(...) share this */
static void fill_dict(jctx *c, const jnode *at, jdict *d, const jcall *call, const char *fname) {
    if (call->npos > 1) jfail(c, at->pos, "%s expected at most 1 argument, got %zu", fname, call->npos);
    if (call->npos) {
        jv src = call->pos[0];
        if (src.k == JV_DICT || src.k == JV_NS) {
            for (size_t i = 0; i < src.d->n; i++) jd_set(c, d, src.d->keys[i], src.d->vals[i]);
        } else {
            jlist *pairs = iter_of(c, at, src);
            for (size_t i = 0; i < pairs->n; i++) {
                jlist *kv = iter_of(c, at, pairs->v[i]);
                if (kv->n != 2) jfail(c, at->pos, "dictionary update sequence element #%zu has length %zu; 2 is required", i, kv->n);
                if (kv->v[0].k == JV_LIST && !kv->v[0].l->tuple) jfail(c, at->pos, "unhashable type: 'list'");
                jd_set(c, d, kv->v[0], kv->v[1]);
            }
        }
    }
    for (size_t i = 0; i < call->nkw; i++) jd_set_s(c, d, call->kwn[i], call->kwv[i]);
}

JBUILTIN(g_dict) {
    jv out = jv_dict(c);
    fill_dict(c, at, out.d, call, "dict");
    return out;
}

JBUILTIN(g_namespace) {
    jv out = jv_ns(c);
    fill_dict(c, at, out.d, call, "namespace");
    return out;
}

JBUILTIN(g_raise_exception) {
    jfail_raw(c, jv_to_str(c, has[0] ? a[0] : jv_str(c, "", 0))->s);
}

/* The date: HEARTH_FIXED_DATE=YYYY-MM-DD (midnight) if set and valid, else the local time now. */
static struct tm now_tm(void) {
    struct tm tm = {0};
    const char *fixed = getenv("HEARTH_FIXED_DATE");
    int y, m, d;
    if (fixed && sscanf(fixed, "%d-%d-%d", &y, &m, &d) == 3 && m >= 1 && m <= 12 && d >= 1 && d <= 31) {
        tm.tm_year = y - 1900;
        tm.tm_mon = m - 1;
        tm.tm_mday = d;
        tm.tm_isdst = -1;
        time_t t = mktime(&tm);
        localtime_r(&t, &tm);
        return tm;
    }
    time_t t = time(NULL);
    localtime_r(&t, &tm);
    return tm;
}

JBUILTIN(g_strftime_now) {
    const jstr *fmt = jb_str_arg(c, at, a[0], "format");
    if (fmt->len > 1000 || memchr(fmt->s, 0, fmt->len)) jfail(c, at->pos, "strftime_now format too long");
    struct tm tm = now_tm();
    for (size_t cap = 256; cap <= 65536; cap *= 4) {
        char *buf = ja_alloc(c, cap);
        size_t n = strftime(buf, cap, fmt->s, &tm);
        if (n || !fmt->len) return jv_str(c, buf, n);
    }
    return jv_str(c, "", 0);
}

/* joiner(sep): a function returning "" the first time and sep after; its state is the bound self. */
JBUILTIN(m_joiner_call) {
    jv used;
    jd_get_s(self.d, "used", &used);
    jd_set_s(c, self.d, "used", jv_bool(true));
    jv sep;
    jd_get_s(self.d, "sep", &sep);
    return jv_truthy(used) ? sep : jv_str(c, "", 0);
}

static const jbuiltin joiner_call = B("joiner", m_joiner_call, 0, NULL);

JBUILTIN(g_joiner) {
    jv state = jv_ns(c);
    jd_set_s(c, state.d, "sep", has[0] ? a[0] : jv_cstr(c, ", "));
    jd_set_s(c, state.d, "used", jv_bool(false));
    return jv_func(c, JF_BUILTIN, "joiner", state, &joiner_call, NULL, NULL);
}

/* ---------------- dict, list and loop methods ---------------- */

JBUILTIN(d_get) {
    jv out;
    if (!has[0]) jfail(c, at->pos, "get expected at least 1 argument, got 0");
    return jd_get(c, self.d, a[0], &out) ? out : has[1] ? a[1] : jv_none();
}

/* dict.items(), keys() and values(): views, listed now (a template cannot change the dict meanwhile) */
static jv dict_view(jctx *c, const jdict *d, int kind) {
    jv out = jv_list(c, d->n);
    out.l->kind = (uint8_t)kind;
    for (size_t i = 0; i < d->n; i++)
        jl_push(c, out.l, kind == JL_ITEMS ? jv_tuple2(c, d->keys[i], d->vals[i]) : kind == JL_KEYS ? d->keys[i] : d->vals[i]);
    return out;
}

JBUILTIN(d_items) { return dict_view(c, self.d, JL_ITEMS); }
JBUILTIN(d_keys) { return dict_view(c, self.d, JL_KEYS); }
JBUILTIN(d_values) { return dict_view(c, self.d, JL_VALUES); }

JBUILTIN(d_copy) {
    jv out = jv_dict(c);
    for (size_t i = 0; i < self.d->n; i++) jd_set(c, out.d, self.d->keys[i], self.d->vals[i]);
    return out;
}

JBUILTIN(l_append) { jl_push(c, self.l, a[0]); return jv_none(); }

JBUILTIN(l_extend) {
    jlist *items = iter_of(c, at, a[0]);
    for (size_t i = 0; i < items->n; i++) jl_push(c, self.l, items->v[i]);
    return jv_none();
}

static size_t list_index_arg(jctx *c, const jnode *at, jlist *l, jv v, bool insert) {
    int64_t i = jb_int(c, at, v, "index"), n = (int64_t)l->n;
    if (i < 0) i += n;
    if (insert) return (size_t)(i < 0 ? 0 : i > n ? n : i);
    if (i < 0 || i >= n) jfail(c, at->pos, n ? "pop index out of range" : "pop from empty list");
    return (size_t)i;
}

JBUILTIN(l_pop) {
    jlist *l = self.l;
    size_t i = list_index_arg(c, at, l, has[0] ? a[0] : jv_int(-1), false);
    jv v = l->v[i];
    memmove(l->v + i, l->v + i + 1, (l->n - i - 1) * sizeof(jv));
    l->n--;
    return v;
}

JBUILTIN(l_insert) {
    jlist *l = self.l;
    size_t i = list_index_arg(c, at, l, a[0], true);
    jl_push(c, l, a[1]);
    memmove(l->v + i + 1, l->v + i, (l->n - 1 - i) * sizeof(jv));
    l->v[i] = a[1];
    return jv_none();
}

JBUILTIN(l_index) {
    for (size_t i = 0; i < self.l->n; i++) if (jv_eq(c, self.l->v[i], a[0])) return jv_int((int64_t)i);
    jfail(c, at->pos, "value is not in list");
}

JBUILTIN(l_count) {
    int64_t n = 0;
    for (size_t i = 0; i < self.l->n; i++) n += jv_eq(c, self.l->v[i], a[0]);
    return jv_int(n);
}

JBUILTIN(l_copy) {
    jv out = jv_list(c, self.l->n);
    for (size_t i = 0; i < self.l->n; i++) jl_push(c, out.l, self.l->v[i]);
    return out;
}

JBUILTIN(lp_cycle) {
    if (!call->npos) jfail(c, at->pos, "no items for cycling given");
    return call->pos[self.lp->i % call->npos];
}

JBUILTIN(lp_changed) {
    jv now = jv_list(c, call->npos);
    for (size_t i = 0; i < call->npos; i++) jl_push(c, now.l, call->pos[i]);
    bool changed = !self.lp->changed_set || !jv_eq(c, now, self.lp->changed_last);
    self.lp->changed_last = now;
    self.lp->changed_set = true;
    return jv_bool(changed);
}

/* ---------------- tables ---------------- */

static const jbuiltin filters[] = {
    B("abs", f_abs, 0, NULL),
    B("attr", f_attr, 1, "name"),
    B("batch", f_batch, 1, "linecount", "fill_with"),
    B("capitalize", f_capitalize, 0, NULL),
    B("center", f_center, 0, "width"),
    B("count", f_length, 0, NULL),
    B("d", f_default, 0, "default_value", "boolean"),
    B("default", f_default, 0, "default_value", "boolean"),
    B("dictsort", f_dictsort, 0, "case_sensitive", "by", "reverse"),
    B("e", f_escape, 0, NULL),
    B("escape", f_escape, 0, NULL),
    B("first", f_first, 0, NULL),
    B("float", f_float, 0, "default"),
    B("forceescape", f_escape, 0, NULL),
    RAW("format", f_format),
    B("indent", f_indent, 0, "width", "first", "blank"),
    B("int", f_int, 0, "default", "base"),
    B("items", f_items, 0, NULL),
    B("join", f_join, 0, "d", "attribute"),
    B("last", f_last, 0, NULL),
    B("length", f_length, 0, NULL),
    B("list", f_list, 0, NULL),
    B("lower", f_lower, 0, NULL),
    RAW("map", f_map),
    B("max", f_max, 0, "case_sensitive", "attribute"),
    B("min", f_min, 0, "case_sensitive", "attribute"),
    RAW("reject", f_reject),
    RAW("rejectattr", f_rejectattr),
    B("replace", f_replace, 2, "old", "new", "count"),
    B("reverse", f_reverse, 0, NULL),
    B("round", f_round, 0, "precision", "method"),
    B("safe", f_safe, 0, NULL),
    RAW("select", f_select),
    RAW("selectattr", f_selectattr),
    B("sort", f_sort, 0, "reverse", "case_sensitive", "attribute"),
    B("string", f_string, 0, NULL),
    B("sum", f_sum, 0, "attribute", "start"),
    B("title", f_title, 0, NULL),
    B("tojson", f_tojson, 0, "ensure_ascii", "indent", "separators", "sort_keys"),
    B("trim", f_trim, 0, "chars"),
    B("truncate", f_truncate, 0, "length", "killwords", "end", "leeway"),
    B("unique", f_unique, 0, "case_sensitive", "attribute"),
    B("upper", f_upper, 0, NULL),
    B("wordcount", f_wordcount, 0, NULL),
};

/* Jinja2 filters hearth does not implement: a template naming them parses, and fails if one runs. */
static const char *const missing_filters[] = { "filesizeformat", "groupby", "pprint", "random", "slice", "striptags",
                                               "urlencode", "urlize", "wordwrap", "xmlattr", NULL };

static const jbuiltin tests[] = {
    B("!=", t_ne, 1, "other"),
    B("<", t_lt, 1, "other"),
    B("<=", t_le, 1, "other"),
    B("==", t_eq, 1, "other"),
    B(">", t_gt, 1, "other"),
    B(">=", t_ge, 1, "other"),
    B("boolean", t_boolean, 0, NULL),
    B("callable", t_callable, 0, NULL),
    B("defined", t_defined, 0, NULL),
    B("divisibleby", t_divisibleby, 1, "num"),
    B("eq", t_eq, 1, "other"),
    B("equalto", t_eq, 1, "other"),
    B("escaped", t_escaped, 0, NULL),
    B("even", t_even, 0, NULL),
    B("false", t_false, 0, NULL),
    B("filter", t_filter, 0, NULL),
    B("float", t_float, 0, NULL),
    B("ge", t_ge, 1, "other"),
    B("greaterthan", t_gt, 1, "other"),
    B("gt", t_gt, 1, "other"),
    B("in", t_in, 1, "seq"),
    B("integer", t_integer, 0, NULL),
    B("iterable", t_iterable, 0, NULL),
    B("le", t_le, 1, "other"),
    B("lessthan", t_lt, 1, "other"),
    B("lower", t_lower, 0, NULL),
    B("lt", t_lt, 1, "other"),
    B("mapping", t_mapping, 0, NULL),
    B("ne", t_ne, 1, "other"),
    B("none", t_none, 0, NULL),
    B("number", t_number, 0, NULL),
    B("odd", t_odd, 0, NULL),
    B("sameas", t_sameas, 1, "other"),
    B("sequence", t_sequence, 0, NULL),
    B("string", t_string, 0, NULL),
    B("test", t_test, 0, NULL),
    B("true", t_true, 0, NULL),
    B("undefined", t_undefined, 0, NULL),
    B("upper", t_upper, 0, NULL),
};

static const jbuiltin globals[] = {
    RAW("dict", g_dict),
    B("joiner", g_joiner, 0, "sep"),
    RAW("namespace", g_namespace),
    B("raise_exception", g_raise_exception, 1, "message"),
    RAW("range", g_range),
    B("strftime_now", g_strftime_now, 1, "format"),
};

static const jbuiltin dict_methods[] = {
    B("copy", d_copy, 0, NULL),
    B("get", d_get, 1, "key", "default"),
    B("items", d_items, 0, NULL),
    B("keys", d_keys, 0, NULL),
    B("values", d_values, 0, NULL),
};

static const jbuiltin list_methods[] = {   /* the first two also exist on tuples */
    B("count", l_count, 1, "value"),
    B("index", l_index, 1, "value"),
    B("append", l_append, 1, "object"),
    B("copy", l_copy, 0, NULL),
    B("extend", l_extend, 1, "iterable"),
    B("insert", l_insert, 2, "index", "object"),
    B("pop", l_pop, 0, "index"),
};

static const jbuiltin loop_methods[] = {
    RAW("changed", lp_changed),
    RAW("cycle", lp_cycle),
};

#define COUNT(a) (sizeof a / sizeof a[0])

static const jbuiltin *find_in(const jbuiltin *t, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++) if (!strcmp(t[i].name, name)) return &t[i];
    return NULL;
}

const jbuiltin *jb_find_filter(const char *name, bool *known) {
    const jbuiltin *b = find_in(filters, COUNT(filters), name);
    *known = b != NULL;
    for (size_t i = 0; !b && missing_filters[i]; i++) if (!strcmp(missing_filters[i], name)) *known = true;
    return b;
}

const jbuiltin *jb_find_test(const char *name, bool *known) {
    const jbuiltin *b = find_in(tests, COUNT(tests), name);
    *known = b != NULL;
    return b;
}

const jbuiltin *jb_find_method(jv obj, const char *name) {
    switch (obj.k) {
    case JV_STR: return jb_find_str_method(name);
    case JV_DICT: return find_in(dict_methods, COUNT(dict_methods), name);
    case JV_LIST:
        if (obj.l->kind != JL_LIST) return NULL;
        return find_in(list_methods, obj.l->tuple ? 2 : COUNT(list_methods), name);
    case JV_LOOP: return find_in(loop_methods, COUNT(loop_methods), name);
    default: return NULL;
    }
}

void jb_add_globals(jctx *c, jdict *g) {
    for (size_t i = 0; i < COUNT(globals); i++)
        jd_set_s(c, g, globals[i].name, jv_func(c, JF_BUILTIN, globals[i].name, jv_none(), &globals[i], NULL, NULL));
}

jv jb_run(jctx *c, const jnode *at, const jbuiltin *b, jv self, const jcall *call) {
    if (b->raw) return b->fn(c, at, self, NULL, NULL, call);
    jv a[JB_MAXP] = {0};
    bool has[JB_MAXP] = {0};
    size_t np = 0;
    while (np < JB_MAXP && b->params[np]) np++;
    if (call->npos > np) jfail(c, at->pos, "%s() takes at most %zu argument(s) (%zu given)", b->name, np, call->npos);
    for (size_t i = 0; i < call->npos; i++) { a[i] = call->pos[i]; has[i] = true; }
    for (size_t i = 0; i < call->nkw; i++) {
        size_t j = 0;
        while (j < np && strcmp(b->params[j], call->kwn[i])) j++;
        if (j == np) jfail(c, at->pos, "%s() got an unexpected keyword argument '%s'", b->name, call->kwn[i]);
        if (has[j]) jfail(c, at->pos, "%s() got multiple values for argument '%s'", b->name, call->kwn[i]);
        a[j] = call->kwv[i];
        has[j] = true;
    }
    for (int j = 0; j < b->nreq; j++)
        if (!has[j]) jfail(c, at->pos, "%s() missing required argument '%s'", b->name, b->params[j]);
    return b->fn(c, at, self, a, has, call);
}

jv jb_filter(jctx *c, const jnode *at, const char *name, jv v, const jcall *call) {
    bool known;
    const jbuiltin *b = jb_find_filter(name, &known);
    if (!b) jfail(c, at->pos, known ? "filter '%s' is not supported" : "no filter named '%s'", name);
    return jb_run(c, at, b, v, call);
}

bool jb_test(jctx *c, const jnode *at, const char *name, jv v, const jcall *call) {
    bool known;
    const jbuiltin *b = jb_find_test(name, &known);
    if (!b) jfail(c, at->pos, "no test named '%s'", name);
    return jv_truthy(jb_run(c, at, b, v, call));
}
