/* jinja_value.c — the values templates compute with and their Python behaviour: constructors, lists and
 * insertion-ordered dicts (hash-indexed once they grow), truthiness, ==, ordering, hashing, str() and
 * repr() (Python's formats, including the shortest float repr), JSON output as json.dumps writes it, and
 * conversion from cJSON.
 *
 * Recursive walks (==, <, hash, repr, JSON) go through jenter so a value nested past JINJA_MAX_DEPTH (which
 * a template can build with list.append) is an error, not a stack overflow. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "jinja/jinja_internal.h"

/* ---------------- undefined ---------------- */

jv jv_undef_name(jctx *c, const char *name) {
    jv v = { .k = JV_UNDEF };
    v.u = ja_alloc(c, sizeof *v.u);
    v.u->name = name;
    return v;
}

jv jv_undef_attr(jctx *c, jv obj, const char *name) {
    jv v = jv_undef_name(c, name);
    v.u->obj = obj.k;
    v.u->has_obj = true;
    v.u->obj_is_tuple = obj.k == JV_LIST && obj.l->tuple;
    return v;
}

jv jv_undef_item(jctx *c, jv obj, jv key) {
    if (key.k == JV_STR) return jv_undef_attr(c, obj, key.s->s);
    jbuf b = {0};
    jv_write_repr(c, &b, key);
    jv v = jv_undef_attr(c, obj, b.p ? b.p : "");
    v.u->non_str_key = true;
    return v;
}

jv jv_undef_hint(jctx *c, const char *hint) {
    jv v = jv_undef_name(c, NULL);
    v.u->hint = hint;
    return v;
}

/* Jinja2's object_type_repr: "dict object", "list object", "None", ... */
static void write_object_type(jctx *c, jbuf *b, const jundef *u) {
    switch (u->obj) {
    case JV_NONE: jb_puts(c, b, "None"); return;
    case JV_LIST: jb_puts(c, b, u->obj_is_tuple ? "tuple object" : "list object"); return;
    case JV_NS: jb_puts(c, b, "jinja2.utils.Namespace object"); return;
    case JV_LOOP: jb_puts(c, b, "jinja2.runtime.LoopContext object"); return;
    default: {
        jv tmp = { .k = u->obj };
        jb_printf(c, b, "%s object", jv_type_name(tmp));
        return;
    }
    }
}

const char *jv_undef_msg(jctx *c, jv v) {
    const jundef *u = v.k == JV_UNDEF ? v.u : NULL;
    if (!u) return "value is undefined";
    if (u->hint) return u->hint;
    jbuf b = {0};
    if (!u->has_obj) {
        jv_write_repr(c, &b, jv_cstr(c, u->name ? u->name : ""));
        jb_puts(c, &b, " is undefined");
    } else if (u->non_str_key) {
        write_object_type(c, &b, u);
        jb_printf(c, &b, " has no element %s", u->name);
    } else {
        jb_putc(c, &b, '\'');
        write_object_type(c, &b, u);
        jb_puts(c, &b, "' has no attribute ");
        jv_write_repr(c, &b, jv_cstr(c, u->name ? u->name : ""));
    }
    return b.p;
}

/* ---------------- strings, lists, dicts, functions ---------------- */

jv jv_str(jctx *c, const char *s, size_t n) {
    jv v = { .k = JV_STR };
    v.s = ja_alloc(c, sizeof(jstr) + n + 1);
    if (n) memcpy(v.s->s, s, n);
    v.s->len = n;
    v.s->ncp_ = JSTR_UNCOUNTED;
    return v;
}

jv jv_cstr(jctx *c, const char *s) { return jv_str(c, s, strlen(s)); }
jv jv_buf(jctx *c, const jbuf *b) { return jv_str(c, b->p ? b->p : "", b->n); }

jv jv_list(jctx *c, size_t cap) {
    jv v = { .k = JV_LIST };
    v.l = ja_alloc(c, sizeof *v.l);
    if (cap) { v.l->v = ja_alloc(c, cap * sizeof(jv)); v.l->cap = cap; }
    return v;
}

void jl_push(jctx *c, jlist *l, jv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        l->v = ja_grow(c, l->v, l->cap * sizeof(jv), cap * sizeof(jv));
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

jv jv_tuple2(jctx *c, jv a, jv b) {
    jv t = jv_list(c, 2);
    t.l->tuple = true;
    jl_push(c, t.l, a);
    jl_push(c, t.l, b);
    return t;
}

jv jv_dict(jctx *c) {
    jv v = { .k = JV_DICT };
    v.d = ja_alloc(c, sizeof *v.d);
    return v;
}

jv jv_ns(jctx *c) {
    jv v = jv_dict(c);
    v.k = JV_NS;
    return v;
}

jv jv_func(jctx *c, int kind, const char *name, jv self, const jbuiltin *def, const jnode *node, jscope *closure) {
    jv v = { .k = JV_FUNC };
    v.fn = ja_alloc(c, sizeof *v.fn);
    *v.fn = (jfunc){ .kind = kind, .name = name, .self = self, .def = def, .node = node, .closure = closure };
    return v;
}

void jd_init(jdict *d) { memset(d, 0, sizeof *d); }

void jd_clear(jdict *d) {
    d->n = 0;
    if (d->idx) memset(d->idx, 0xff, d->idx_cap * sizeof *d->idx);
}

static uint64_t str_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}

/* Equal values hash equally: 1, 1.0 and True are one key, as in Python. */
uint64_t jv_hash(jctx *c, size_t pos, jv v) {
    switch (v.k) {
    case JV_UNDEF: return 0x5bd1e995u;
    case JV_NONE: return 0x9e3779b9u;
    case JV_BOOL: return mix64((uint64_t)v.b);
    case JV_INT: return mix64((uint64_t)v.i);
    case JV_FLOAT:
        if (v.f == floor(v.f) && fabs(v.f) < 9.2e18) return mix64((uint64_t)(int64_t)v.f);
        { uint64_t bits; memcpy(&bits, &v.f, 8); return mix64(bits); }
    case JV_STR: return str_hash(v.s->s, v.s->len);
    case JV_LIST: {
        if (!v.l->tuple) jfail(c, pos, "unhashable type: '%s'", jv_type_name(v));
        jenter(c, pos);
        uint64_t h = 0x345678;
        for (size_t i = 0; i < v.l->n; i++) h = mix64(h ^ jv_hash(c, pos, v.l->v[i])) + i;
        jleave(c);
        return h;
    }
    case JV_DICT: jfail(c, pos, "unhashable type: 'dict'");
    case JV_NS: case JV_FUNC: case JV_LOOP: return mix64((uint64_t)(uintptr_t)v.d);
    }
    return 0;
}

static void dict_reindex(jctx *c, jdict *d) {
    size_t cap = 16;
    while (cap < d->n * 2 + 2) cap *= 2;
    d->idx = ja_grow(c, d->idx, d->idx_cap * sizeof(int32_t), cap * sizeof(int32_t));
    d->idx_cap = cap;
    memset(d->idx, 0xff, cap * sizeof(int32_t));
    for (size_t i = 0; i < d->n; i++) {
        size_t h = (size_t)jv_hash(c, JPOS_NONE, d->keys[i]) & (cap - 1);
        while (d->idx[h] >= 0) h = (h + 1) & (cap - 1);
        d->idx[h] = (int32_t)i;
    }
}

/* Index of key in d, or -1. */
static long dict_find(jctx *c, const jdict *d, jv key) {
    if (!d->idx) {
        for (size_t i = 0; i < d->n; i++) if (jv_eq(c, d->keys[i], key)) return (long)i;
        return -1;
    }
    size_t h = (size_t)jv_hash(c, JPOS_NONE, key) & (d->idx_cap - 1);
    for (; d->idx[h] >= 0; h = (h + 1) & (d->idx_cap - 1))
        if (jv_eq(c, d->keys[d->idx[h]], key)) return d->idx[h];
    return -1;
}

bool jd_get(jctx *c, const jdict *d, jv key, jv *out) {
    jv_hash(c, JPOS_NONE, key);   /* unhashable keys fail here, as in Python */
    long i = dict_find(c, d, key);
    if (i < 0) return false;
    if (out) *out = d->vals[i];
    return true;
}

bool jd_get_s(const jdict *d, const char *key, jv *out) {
    size_t n = strlen(key);
    if (d->idx) {
        size_t h = (size_t)str_hash(key, n) & (d->idx_cap - 1);
        for (; d->idx[h] >= 0; h = (h + 1) & (d->idx_cap - 1)) {
            jv k = d->keys[d->idx[h]];
            if (k.k == JV_STR && k.s->len == n && !memcmp(k.s->s, key, n)) { if (out) *out = d->vals[d->idx[h]]; return true; }
        }
        return false;
    }
    for (size_t i = 0; i < d->n; i++) {
        jv k = d->keys[i];
        if (k.k == JV_STR && k.s->len == n && !memcmp(k.s->s, key, n)) { if (out) *out = d->vals[i]; return true; }
    }
    return false;
}

void jd_set(jctx *c, jdict *d, jv key, jv val) {
    jv_hash(c, JPOS_NONE, key);
    long i = dict_find(c, d, key);
    if (i >= 0) { d->vals[i] = val; return; }
    if (d->n >= (size_t)INT32_MAX - 1) jfail(c, JPOS_NONE, "dict too large");
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        d->keys = ja_grow(c, d->keys, d->cap * sizeof(jv), cap * sizeof(jv));
        d->vals = ja_grow(c, d->vals, d->cap * sizeof(jv), cap * sizeof(jv));
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    if (d->idx && d->n * 2 + 2 <= d->idx_cap) {
        size_t h = (size_t)jv_hash(c, JPOS_NONE, key) & (d->idx_cap - 1);
        while (d->idx[h] >= 0) h = (h + 1) & (d->idx_cap - 1);
        d->idx[h] = (int32_t)(d->n - 1);
    } else if (d->n > 8) {
        dict_reindex(c, d);
    }
}

void jd_set_s(jctx *c, jdict *d, const char *key, jv val) { jd_set(c, d, jv_cstr(c, key), val); }

/* ---------------- types, truth, equality, order ---------------- */

const char *jv_type_name(jv v) {
    switch (v.k) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST:
        if (!v.l) return "list";
        switch (v.l->kind) {
        case JL_GEN: return "generator";
        case JL_ITEMS: return "dict_items";
        case JL_KEYS: return "dict_keys";
        case JL_VALUES: return "dict_values";
        default: return v.l->tuple ? "tuple" : "list";
        }
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC: return "function";
    case JV_LOOP: return "LoopContext";
    }
    return "object";
}

double jv_num(jv v) {
    switch (v.k) {
    case JV_BOOL: return v.b;
    case JV_INT: return (double)v.i;
    case JV_FLOAT: return v.f;
    default: return 0;
    }
}

bool jv_truthy(jv v) {
    switch (v.k) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0;
    case JV_STR: return v.s->len != 0;
    case JV_LIST: return v.l->kind == JL_GEN || v.l->n != 0;
    case JV_DICT: return v.d->n != 0;
    default: return true;
    }
}

static bool is_intlike(jv v) { return v.k == JV_INT || v.k == JV_BOOL; }
static int64_t intlike(jv v) { return v.k == JV_BOOL ? v.b : v.i; }

static bool dict_eq(jctx *c, const jdict *a, const jdict *b) {
    if (a->n != b->n) return false;
    for (size_t i = 0; i < a->n; i++) {
        jv other;
        if (!jd_get(c, b, a->keys[i], &other) || !jv_eq(c, a->vals[i], other)) return false;
    }
    return true;
}

bool jv_eq(jctx *c, jv a, jv b) {
    if (jv_is_num(a) && jv_is_num(b)) {
        if (is_intlike(a) && is_intlike(b)) return intlike(a) == intlike(b);
        return jv_num(a) == jv_num(b);
    }
    if (a.k != b.k) return false;
    switch (a.k) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.s->len == b.s->len && !memcmp(a.s->s, b.s->s, a.s->len);
    case JV_LIST: {
        if (a.l == b.l) return true;
        if (a.l->kind != JL_LIST || b.l->kind != JL_LIST) return false;
        if (a.l->tuple != b.l->tuple || a.l->n != b.l->n) return false;
        jenter(c, JPOS_NONE);
        bool eq = true;
        for (size_t i = 0; i < a.l->n && eq; i++) eq = jv_eq(c, a.l->v[i], b.l->v[i]);
        jleave(c);
        return eq;
    }
    case JV_DICT: {
        if (a.d == b.d) return true;
        jenter(c, JPOS_NONE);
        bool eq = dict_eq(c, a.d, b.d);
        jleave(c);
        return eq;
    }
    default: return a.d == b.d;   /* identity for namespaces, functions, loops */
    }
}

static int cmp3(double x, double y) { return (x > y) - (x < y); }

int jv_cmp(jctx *c, size_t pos, jv a, jv b, const char *op) {
    if (a.k == JV_UNDEF) jfail(c, pos, "%s", jv_undef_msg(c, a));
    if (b.k == JV_UNDEF) jfail(c, pos, "%s", jv_undef_msg(c, b));
    if (jv_is_num(a) && jv_is_num(b)) {
        if (is_intlike(a) && is_intlike(b)) return (intlike(a) > intlike(b)) - (intlike(a) < intlike(b));
        return cmp3(jv_num(a), jv_num(b));
    }
    if (a.k == JV_STR && b.k == JV_STR) {
        size_t n = HT_MIN(a.s->len, b.s->len);
        int r = memcmp(a.s->s, b.s->s, n);
        if (r) return r < 0 ? -1 : 1;
        return (a.s->len > b.s->len) - (a.s->len < b.s->len);
    }
    if (jv_is_plain_list(a) && jv_is_plain_list(b) && a.l->tuple == b.l->tuple) {
        jenter(c, pos);
        int r = 0;
        size_t i = 0;
        while (i < a.l->n && i < b.l->n && jv_eq(c, a.l->v[i], b.l->v[i])) i++;
        if (i < a.l->n && i < b.l->n) r = jv_cmp(c, pos, a.l->v[i], b.l->v[i], op);
        else r = (a.l->n > b.l->n) - (a.l->n < b.l->n);
        jleave(c);
        return r;
    }
    jfail(c, pos, "'%s' not supported between instances of '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

/* ---------------- str() and repr() ---------------- */

void py_float_repr(double f, char out[40]) {
    if (isnan(f)) { strcpy(out, "nan"); return; }
    if (isinf(f)) { strcpy(out, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { strcpy(out, signbit(f) ? "-0.0" : "0.0"); return; }
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* buf = [-]d[.ddd]e[+-]XX: split into sign, digits and decimal exponent */
    char digits[24];
    int nd = 0, exp10 = 0;
    const char *p = buf;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++) if (*p != '.' && nd < 20) digits[nd++] = *p;
    if (*p == 'e') exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *o = out;
    if (neg) *o++ = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++) *o++ = i < nd ? digits[i] : '0';
            *o++ = '.';
            if (nd > exp10 + 1) for (int i = exp10 + 1; i < nd; i++) *o++ = digits[i];
            else *o++ = '0';
        } else {
            *o++ = '0'; *o++ = '.';
            for (int i = 0; i < -exp10 - 1; i++) *o++ = '0';
            for (int i = 0; i < nd; i++) *o++ = digits[i];
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) { *o++ = '.'; for (int i = 1; i < nd; i++) *o++ = digits[i]; }
        int e = exp10 < 0 ? -exp10 : exp10;
        *o++ = 'e';
        *o++ = exp10 < 0 ? '-' : '+';
        if (e >= 100) *o++ = (char)('0' + e / 100);
        *o++ = (char)('0' + e / 10 % 10);
        *o++ = (char)('0' + e % 10);
        *o = 0;
    }
}

static bool repr_printable(int32_t cp) {
    if (cp < 0x20 || cp == 0x7f) return false;
    if (cp < 0x7f) return true;
    if (cp >= 0xDC80 && cp <= 0xDCFF) return false;
    utf8proc_category_t k = utf8proc_category(cp);
    if (cp == ' ') return true;
    return !(k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
             k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CN || k == UTF8PROC_CATEGORY_ZL ||
             k == UTF8PROC_CATEGORY_ZP || k == UTF8PROC_CATEGORY_ZS);
}

static void write_str_repr(jctx *c, jbuf *b, const jstr *s) {
    bool has_sq = memchr(s->s, '\'', s->len) != NULL, has_dq = memchr(s->s, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jb_putc(c, b, q);
    for (size_t i = 0; i < s->len;) {
        int32_t cp;
        int n = utf8_next(s->s + i, s->len - i, &cp);
        if (cp == q || cp == '\\') { jb_putc(c, b, '\\'); jb_putc(c, b, (char)cp); }
        else if (cp == '\n') jb_puts(c, b, "\\n");
        else if (cp == '\r') jb_puts(c, b, "\\r");
        else if (cp == '\t') jb_puts(c, b, "\\t");
        else if (repr_printable(cp)) jb_put(c, b, s->s + i, (size_t)n);
        else if (cp >= 0xDC80 && cp <= 0xDCFF) jb_printf(c, b, "\\udc%02x", (unsigned)(cp & 0xFF));
        else if (cp < 0x100) jb_printf(c, b, "\\x%02x", (unsigned)cp);
        else if (cp < 0x10000) jb_printf(c, b, "\\u%04x", (unsigned)cp);
        else jb_printf(c, b, "\\U%08x", (unsigned)cp);
        i += (size_t)n;
    }
    jb_putc(c, b, q);
}

static void write_dict_body(jctx *c, jbuf *b, const jdict *d) {
    jb_putc(c, b, '{');
    for (size_t i = 0; i < d->n; i++) {
        if (i) jb_puts(c, b, ", ");
        jv_write_repr(c, b, d->keys[i]);
        jb_puts(c, b, ": ");
        jv_write_repr(c, b, d->vals[i]);
    }
    jb_putc(c, b, '}');
}

void jv_write_repr(jctx *c, jbuf *b, jv v) {
    char num[40];
    switch (v.k) {
    case JV_UNDEF: jb_puts(c, b, "Undefined"); return;
    case JV_STR: write_str_repr(c, b, v.s); return;
    case JV_LIST:
        if (v.l->kind == JL_GEN) { jb_puts(c, b, "<generator object>"); return; }
        if (v.l->kind != JL_LIST) jb_printf(c, b, "%s(", jv_type_name(v));
        jenter(c, JPOS_NONE);
        jb_putc(c, b, v.l->tuple ? '(' : '[');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) jb_puts(c, b, ", ");
            jv_write_repr(c, b, v.l->v[i]);
        }
        if (v.l->tuple && v.l->n == 1) jb_putc(c, b, ',');
        jb_putc(c, b, v.l->tuple ? ')' : ']');
        if (v.l->kind != JL_LIST) jb_putc(c, b, ')');
        jleave(c);
        return;
    case JV_DICT:
        jenter(c, JPOS_NONE);
        write_dict_body(c, b, v.d);
        jleave(c);
        return;
    case JV_NS:
        jenter(c, JPOS_NONE);
        jb_puts(c, b, "<Namespace ");
        write_dict_body(c, b, v.d);
        jb_putc(c, b, '>');
        jleave(c);
        return;
    case JV_FUNC:
        if (v.fn->kind == JF_MACRO) jb_printf(c, b, "<Macro '%s'>", v.fn->name);
        else jb_printf(c, b, "<built-in method %s>", v.fn->name);
        return;
    case JV_LOOP:
        jb_printf(c, b, "<LoopContext %zu/%zu>", v.lp->i + 1, v.lp->items->n);
        return;
    case JV_FLOAT: py_float_repr(v.f, num); jb_puts(c, b, num); return;
    default: jv_write_str(c, b, v); return;
    }
}

void jv_write_str(jctx *c, jbuf *b, jv v) {
    char num[40];
    switch (v.k) {
    case JV_UNDEF: return;
    case JV_NONE: jb_puts(c, b, "None"); return;
    case JV_BOOL: jb_puts(c, b, v.b ? "True" : "False"); return;
    case JV_INT: jb_printf(c, b, "%lld", (long long)v.i); return;
    case JV_FLOAT: py_float_repr(v.f, num); jb_puts(c, b, num); return;
    case JV_STR: jb_put(c, b, v.s->s, v.s->len); return;
    default: jv_write_repr(c, b, v); return;
    }
}

jstr *jv_to_str(jctx *c, jv v) {
    if (v.k == JV_STR) return v.s;
    jbuf b = {0};
    jv_write_str(c, &b, v);
    return jv_buf(c, &b).s;
}

/* ---------------- JSON out (json.dumps) ---------------- */

static void json_string(jctx *c, jbuf *b, const char *s, size_t n, bool ascii) {
    jb_putc(c, b, '"');
    size_t run = 0;   /* start of bytes copied unchanged */
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        const char *esc = NULL;
        char tmp[16];
        size_t len = 1;
        if (ch == '"') esc = "\\\"";
        else if (ch == '\\') esc = "\\\\";
        else if (ch == '\n') esc = "\\n";
        else if (ch == '\r') esc = "\\r";
        else if (ch == '\t') esc = "\\t";
        else if (ch == '\b') esc = "\\b";
        else if (ch == '\f') esc = "\\f";
        else if (ch < 0x20 || (ascii && ch == 0x7f)) { snprintf(tmp, sizeof tmp, "\\u%04x", ch); esc = tmp; }
        else if (ascii && ch >= 0x80) {
            int32_t cp;
            len = (size_t)utf8_next(s + i, n - i, &cp);
            if (cp >= 0x10000) {
                int32_t v = cp - 0x10000;
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", (unsigned)(0xD800 + (v >> 10)), (unsigned)(0xDC00 + (v & 0x3FF)));
            } else snprintf(tmp, sizeof tmp, "\\u%04x", (unsigned)cp);
            esc = tmp;
        }
        if (esc) {
            jb_put(c, b, s + run, i - run);
            jb_puts(c, b, esc);
            run = i + len;
        }
        i += len;
    }
    jb_put(c, b, s + run, n - run);
    jb_putc(c, b, '"');
}

static void json_newline(jctx *c, jbuf *b, const jjson_opts *o, int level) {
    jb_putc(c, b, '\n');
    for (int i = 0; i < level; i++) jb_puts(c, b, o->indent);
}

static void json_key(jctx *c, size_t pos, jbuf *b, jv k, const jjson_opts *o) {
    char num[40];
    switch (k.k) {
    case JV_STR: json_string(c, b, k.s->s, k.s->len, o->ensure_ascii); return;
    case JV_INT: jb_printf(c, b, "\"%lld\"", (long long)k.i); return;
    case JV_BOOL: jb_puts(c, b, k.b ? "\"true\"" : "\"false\""); return;
    case JV_NONE: jb_puts(c, b, "\"null\""); return;
    case JV_FLOAT:
        if (isnan(k.f)) strcpy(num, "NaN");
        else if (isinf(k.f)) strcpy(num, k.f < 0 ? "-Infinity" : "Infinity");
        else py_float_repr(k.f, num);
        jb_printf(c, b, "\"%s\"", num);
        return;
    default: jfail(c, pos, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

/* Entry order for a dict: as inserted, or sorted by key (sort_keys). */
static size_t *json_dict_order(jctx *c, size_t pos, const jdict *d, bool sort) {
    size_t *ord = ja_alloc(c, (d->n + 1) * sizeof *ord);
    for (size_t i = 0; i < d->n; i++) ord[i] = i;
    if (!sort) return ord;
    for (size_t i = 1; i < d->n; i++) {   /* insertion sort: stable, and the comparison may fail */
        size_t t = ord[i], j = i;
        while (j > 0 && jv_cmp(c, pos, d->keys[ord[j - 1]], d->keys[t], "<") > 0) { ord[j] = ord[j - 1]; j--; }
        ord[j] = t;
    }
    return ord;
}

static void json_value(jctx *c, size_t pos, jbuf *b, jv v, const jjson_opts *o, int level);

static void json_list(jctx *c, size_t pos, jbuf *b, const jlist *l, const jjson_opts *o, int level) {
    if (!l->n) { jb_puts(c, b, "[]"); return; }
    jb_putc(c, b, '[');
    for (size_t i = 0; i < l->n; i++) {
        if (i) jb_puts(c, b, o->item_sep);
        if (o->indent) json_newline(c, b, o, level + 1);
        json_value(c, pos, b, l->v[i], o, level + 1);
    }
    if (o->indent) json_newline(c, b, o, level);
    jb_putc(c, b, ']');
}

static void json_dict(jctx *c, size_t pos, jbuf *b, const jdict *d, const jjson_opts *o, int level) {
    if (!d->n) { jb_puts(c, b, "{}"); return; }
    size_t *ord = json_dict_order(c, pos, d, o->sort_keys);
    jb_putc(c, b, '{');
    for (size_t i = 0; i < d->n; i++) {
        if (i) jb_puts(c, b, o->item_sep);
        if (o->indent) json_newline(c, b, o, level + 1);
        json_key(c, pos, b, d->keys[ord[i]], o);
        jb_puts(c, b, o->key_sep);
        json_value(c, pos, b, d->vals[ord[i]], o, level + 1);
    }
    if (o->indent) json_newline(c, b, o, level);
    jb_putc(c, b, '}');
}

static void json_value(jctx *c, size_t pos, jbuf *b, jv v, const jjson_opts *o, int level) {
    switch (v.k) {
    case JV_NONE: jb_puts(c, b, "null"); return;
    case JV_BOOL: jb_puts(c, b, v.b ? "true" : "false"); return;
    case JV_INT: jb_printf(c, b, "%lld", (long long)v.i); return;
    case JV_FLOAT:
        if (isnan(v.f)) jb_puts(c, b, "NaN");
        else if (isinf(v.f)) jb_puts(c, b, v.f < 0 ? "-Infinity" : "Infinity");
        else { char num[40]; py_float_repr(v.f, num); jb_puts(c, b, num); }
        return;
    case JV_STR: json_string(c, b, v.s->s, v.s->len, o->ensure_ascii); return;
    case JV_LIST:
        if (v.l->kind != JL_LIST) break;
        jenter(c, pos);
        json_list(c, pos, b, v.l, o, level);
        jleave(c);
        return;
    case JV_DICT: jenter(c, pos); json_dict(c, pos, b, v.d, o, level); jleave(c); return;
    default: break;
    }
    jfail(c, pos, "Object of type %s is not JSON serializable", jv_type_name(v));
}

void jv_write_json(jctx *c, size_t pos, jbuf *b, jv v, const jjson_opts *o) { json_value(c, pos, b, v, o, 0); }

/* ---------------- JSON in (cJSON) ---------------- */

jv jv_from_cjson(jctx *c, const cJSON *j) {
    if (!j) return jv_none();
    if (cJSON_IsBool(j)) return jv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNull(j)) return jv_none();
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) <= 9007199254740992.0) return jv_int((int64_t)d);
        return jv_float(d);
    }
    if (cJSON_IsString(j) || cJSON_IsRaw(j)) return jv_cstr(c, j->valuestring ? j->valuestring : "");
    jenter(c, JPOS_NONE);
    jv out;
    if (cJSON_IsArray(j)) {
        out = jv_list(c, 0);
        for (const cJSON *e = j->child; e; e = e->next) jl_push(c, out.l, jv_from_cjson(c, e));
    } else if (cJSON_IsObject(j)) {
        out = jv_dict(c);
        for (const cJSON *e = j->child; e; e = e->next)
            jd_set(c, out.d, jv_cstr(c, e->string ? e->string : ""), jv_from_cjson(c, e));
    } else {
        out = jv_none();
    }
    jleave(c);
    return out;
}
