/* jinja_eval.c — runs the syntax tree: expressions with Python semantics (int/float arithmetic with
 * floor division and overflow checks, str/list + and *, str % args, chained comparisons, in, and/or
 * returning an operand), attribute and item lookup as Jinja2's sandbox does it (dict methods first for
 * a.b, items first for a[b], undefined rather than an error for what is missing, an error only when an
 * undefined value is itself used), slices, calls of builtins, macros and call-block callers, and the
 * statements.
 *
 * Scoping follows Jinja2: each for-loop iteration, macro call, call-block body, with, filter block and
 * block set runs in a child scope, so "set" inside them does not leak out (namespace() is the way out);
 * if/elif does not open a scope. Statements return a flow code so break/continue reach their loop. */
#define _GNU_SOURCE   /* memmem */
#include <math.h>
#include <string.h>

#include "jinja/jinja_internal.h"

enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE };

static jv eval(jctx *c, const jnode *n);
static int exec_body(jctx *c, jnode *const *kids, size_t nk);

/* ---------------- scopes ---------------- */

static jscope *new_scope(jctx *c, jscope *parent) {
    jscope *s = ja_alloc(c, sizeof *s);
    s->parent = parent;
    return s;
}

static bool lookup(jctx *c, const char *name, jv *out) {
    for (jscope *s = c->scope; s; s = s->parent) if (jd_get_s(&s->vars, name, out)) return true;
    return false;
}

static void set_var(jctx *c, const char *name, jv v) { jd_set_s(c, &c->scope->vars, name, v); }

/* ---------------- output ---------------- */

static void check_output(jctx *c) {
    if (c->out->n > c->max_output) jfail(c, JPOS_NONE, "output too large (more than %zu bytes)", c->max_output);
}

static void emit_value(jctx *c, jv v) {
    jv_write_str(c, c->out, v);
    check_output(c);
}

/* Runs a body into a fresh buffer in the given scope; *flow gets its break/continue, if any. */
static jv capture(jctx *c, jnode *const *kids, size_t nk, jscope *scope, int *flow) {
    jbuf *saved_out = c->out;
    jscope *saved_scope = c->scope;
    jbuf b = {0};
    c->out = &b;
    c->scope = scope;
    int f = exec_body(c, kids, nk);
    if (flow) *flow = f;
    c->out = saved_out;
    c->scope = saved_scope;
    return jv_buf(c, &b);
}

/* ---------------- iteration ---------------- */

jlist *jeval_iter_list(jctx *c, size_t pos, jv v) {
    jv out = jv_list(c, 0);
    switch (v.k) {
    case JV_UNDEF: break;
    case JV_LIST:
        if (v.l->n) {
            out.l->v = ja_alloc(c, v.l->n * sizeof(jv));
            memcpy(out.l->v, v.l->v, v.l->n * sizeof(jv));
            out.l->n = out.l->cap = v.l->n;
        }
        break;
    case JV_DICT:
        for (size_t i = 0; i < v.d->n; i++) jl_push(c, out.l, v.d->keys[i]);
        break;
    case JV_STR:
        for (size_t i = 0; i < v.s->len;) {
            int32_t cp;
            int n = utf8_next(v.s->s + i, v.s->len - i, &cp);
            jl_push(c, out.l, jv_str(c, v.s->s + i, (size_t)n));
            i += (size_t)n;
        }
        break;
    default: jfail(c, pos, "'%s' object is not iterable", jv_type_name(v));
    }
    return out.l;
}

void jcheck_defined(jctx *c, size_t pos, jv v) {
    if (v.k == JV_UNDEF) jfail(c, pos, "%s", jv_undef_msg(c, v));
}

/* ---------------- attributes and items ---------------- */

static bool loop_attr(jctx *c, jv obj, const char *name, jv *out) {
    const jloop *lp = obj.lp;
    size_t n = lp->items->n, i = lp->i;
    if (!strcmp(name, "index")) *out = jv_int((int64_t)i + 1);
    else if (!strcmp(name, "index0")) *out = jv_int((int64_t)i);
    else if (!strcmp(name, "revindex")) *out = jv_int((int64_t)(n - i));
    else if (!strcmp(name, "revindex0")) *out = jv_int((int64_t)(n - i) - 1);
    else if (!strcmp(name, "first")) *out = jv_bool(i == 0);
    else if (!strcmp(name, "last")) *out = jv_bool(i + 1 == n);
    else if (!strcmp(name, "length")) *out = jv_int((int64_t)n);
    else if (!strcmp(name, "depth")) *out = jv_int(lp->depth);
    else if (!strcmp(name, "depth0")) *out = jv_int(lp->depth - 1);
    else if (!strcmp(name, "previtem")) *out = i > 0 ? lp->items->v[i - 1] : jv_undef_hint(c, "there is no previous item");
    else if (!strcmp(name, "nextitem")) *out = i + 1 < n ? lp->items->v[i + 1] : jv_undef_hint(c, "there is no next item");
    else return false;
    return true;
}

/* Attribute lookup only (methods, namespace and loop attributes): Jinja2's getattr(obj, name). */
bool jeval_attr_only(jctx *c, jv obj, const char *name, jv *out) {
    if (name[0] == '_') return false;   /* the sandbox hides private and dunder attributes */
    if (obj.k == JV_NS) return jd_get_s(obj.d, name, out);
    if (obj.k == JV_LOOP && loop_attr(c, obj, name, out)) return true;
    const jbuiltin *m = jb_find_method(obj, name);
    if (!m) return false;
    *out = jv_func(c, JF_BUILTIN, m->name, obj, m, NULL, NULL);
    return true;
}

jv jeval_getattr(jctx *c, size_t pos, jv obj, const char *name) {
    jcheck_defined(c, pos, obj);
    jv out;
    if (jeval_attr_only(c, obj, name, &out)) return out;
    if (obj.k == JV_DICT && jd_get_s(obj.d, name, &out)) return out;
    return jv_undef_attr(c, obj, name);
}

static bool hashable(jctx *c, jv v) {
    if (v.k == JV_DICT) return false;
    if (v.k != JV_LIST) return true;
    if (!v.l->tuple) return false;
    jenter(c, JPOS_NONE);
    bool ok = true;
    for (size_t i = 0; i < v.l->n && ok; i++) ok = hashable(c, v.l->v[i]);
    jleave(c);
    return ok;
}

static bool int_index(jv key, size_t n, size_t *out) {
    if (key.k != JV_INT && key.k != JV_BOOL) return false;
    int64_t i = key.k == JV_BOOL ? key.b : key.i;
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n) return false;
    *out = (size_t)i;
    return true;
}

jv jeval_getitem(jctx *c, size_t pos, jv obj, jv key) {
    jcheck_defined(c, pos, obj);
    jv out;
    size_t i;
    if (obj.k == JV_DICT && hashable(c, key) && jd_get(c, obj.d, key, &out)) return out;
    if (jv_is_plain_list(obj) && int_index(key, obj.l->n, &i)) return obj.l->v[i];
    if (obj.k == JV_STR && int_index(key, jstr_ncp(obj.s), &i)) {
        size_t off = utf8_offset(obj.s->s, obj.s->len, i);
        int32_t cp;
        return jv_str(c, obj.s->s + off, (size_t)utf8_next(obj.s->s + off, obj.s->len - off, &cp));
    }
    if (key.k == JV_STR && jeval_attr_only(c, obj, key.s->s, &out)) return out;
    return jv_undef_item(c, obj, key);
}

/* ---------------- slices ---------------- */

static bool slice_arg(jctx *c, const jnode *n, int64_t *out) {
    if (!n) return false;
    jv v = eval(c, n);
    if (v.k == JV_NONE) return false;
    if (v.k == JV_INT) { *out = v.i; return true; }
    if (v.k == JV_BOOL) { *out = v.b; return true; }
    jcheck_defined(c, n->pos, v);
    jfail(c, n->pos, "slice indices must be integers or None");
}

static int64_t slice_clamp(int64_t v, int64_t len, int64_t step) {
    if (v < 0) { v += len; if (v < 0) v = step < 0 ? -1 : 0; }
    else if (v >= len) v = step < 0 ? len - 1 : len;
    return v;
}

/* Python's slice.indices: start, step and the number of items selected. */
static int64_t slice_indices(jctx *c, const jnode *s, int64_t len, int64_t *start, int64_t *step) {
    int64_t a, b;
    *step = 1;
    slice_arg(c, s->c, step);
    if (*step == 0) jfail(c, s->pos, "slice step cannot be zero");
    if (*step == INT64_MIN) *step = -INT64_MAX;
    bool has_a = slice_arg(c, s->a, &a), has_b = slice_arg(c, s->b, &b);
    a = has_a ? slice_clamp(a, len, *step) : (*step < 0 ? len - 1 : 0);
    b = has_b ? slice_clamp(b, len, *step) : (*step < 0 ? -1 : len);
    *start = a;
    if (*step > 0) return b > a ? (b - a - 1) / *step + 1 : 0;
    return a > b ? (a - b - 1) / -*step + 1 : 0;
}

static jv slice_str(jctx *c, const jnode *s, const jstr *str) {
    int64_t start, step, count = slice_indices(c, s, (int64_t)jstr_ncp(str), &start, &step);
    if (step == 1) {
        size_t from = utf8_offset(str->s, str->len, (size_t)start);
        size_t to = from + utf8_offset(str->s + from, str->len - from, (size_t)count);
        return jv_str(c, str->s + from, to - from);
    }
    size_t *offs = ja_alloc(c, (jstr_ncp(str) + 1) * sizeof *offs);
    size_t k = 0;
    for (size_t i = 0; i < str->len; k++) { int32_t cp; offs[k] = i; i += (size_t)utf8_next(str->s + i, str->len - i, &cp); }
    offs[k] = str->len;
    jbuf b = {0};
    for (int64_t j = 0, idx = start; j < count; j++, idx += step)
        jb_put(c, &b, str->s + offs[idx], offs[idx + 1] - offs[idx]);
    return jv_buf(c, &b);
}

static jv eval_slice(jctx *c, const jnode *s, jv obj) {
    jcheck_defined(c, s->pos, obj);
    if (obj.k == JV_STR) return slice_str(c, s, obj.s);
    if (obj.k == JV_DICT) jfail(c, s->pos, "unhashable type: 'slice'");
    if (!jv_is_plain_list(obj)) jfail(c, s->pos, "'%s' object is not subscriptable", jv_type_name(obj));
    int64_t start, step, count = slice_indices(c, s, (int64_t)obj.l->n, &start, &step);
    jv out = jv_list(c, (size_t)count);
    out.l->tuple = obj.l->tuple;
    for (int64_t j = 0, idx = start; j < count; j++, idx += step) jl_push(c, out.l, obj.l->v[idx]);
    return out;
}

/* ---------------- arithmetic ---------------- */

static _Noreturn void fail_operands(jctx *c, size_t pos, const char *op, jv a, jv b) {
    jfail(c, pos, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

static int64_t int_of(jv v) { return v.k == JV_BOOL ? v.b : v.i; }
static bool both_int(jv a, jv b) { return (a.k == JV_INT || a.k == JV_BOOL) && (b.k == JV_INT || b.k == JV_BOOL); }

static int64_t iadd(jctx *c, size_t pos, int64_t x, int64_t y) {
    int64_t r;
    if (__builtin_add_overflow(x, y, &r)) jfail(c, pos, "integer overflow");
    return r;
}

static int64_t isub(jctx *c, size_t pos, int64_t x, int64_t y) {
    int64_t r;
    if (__builtin_sub_overflow(x, y, &r)) jfail(c, pos, "integer overflow");
    return r;
}

static int64_t imul(jctx *c, size_t pos, int64_t x, int64_t y) {
    int64_t r;
    if (__builtin_mul_overflow(x, y, &r)) jfail(c, pos, "integer overflow");
    return r;
}

static jv repeat(jctx *c, size_t pos, jv seq, int64_t times) {
    if (times < 0) times = 0;
    size_t unit = seq.k == JV_STR ? seq.s->len : seq.l->n * sizeof(jv);
    uint64_t total;
    if (!mul_ok(unit, (uint64_t)times, &total) || total > c->max_memory)
        jfail(c, pos, "result of * is too large");
    if (seq.k == JV_STR) {
        jbuf b = {0};
        for (int64_t i = 0; i < times; i++) jb_put(c, &b, seq.s->s, seq.s->len);
        return jv_buf(c, &b);
    }
    jv out = jv_list(c, (size_t)(total / sizeof(jv)));
    out.l->tuple = seq.l->tuple;
    for (int64_t i = 0; i < times; i++)
        for (size_t j = 0; j < seq.l->n; j++) jl_push(c, out.l, seq.l->v[j]);
    return out;
}

static jv concat_lists(jctx *c, jv a, jv b) {
    jv out = jv_list(c, a.l->n + b.l->n);
    out.l->tuple = a.l->tuple;
    for (size_t i = 0; i < a.l->n; i++) jl_push(c, out.l, a.l->v[i]);
    for (size_t i = 0; i < b.l->n; i++) jl_push(c, out.l, b.l->v[i]);
    return out;
}

static jv op_add(jctx *c, size_t pos, jv a, jv b) {
    if (both_int(a, b)) return jv_int(iadd(c, pos, int_of(a), int_of(b)));
    if (jv_is_num(a) && jv_is_num(b)) return jv_float(jv_num(a) + jv_num(b));
    if (a.k == JV_STR && b.k == JV_STR) {
        jbuf buf = {0};
        jb_put(c, &buf, a.s->s, a.s->len);
        jb_put(c, &buf, b.s->s, b.s->len);
        return jv_buf(c, &buf);
    }
    if (jv_is_plain_list(a) && jv_is_plain_list(b) && a.l->tuple == b.l->tuple) return concat_lists(c, a, b);
    if (a.k == JV_STR) jfail(c, pos, "can only concatenate str (not \"%s\") to str", jv_type_name(b));
    fail_operands(c, pos, "+", a, b);
}

static jv op_mul(jctx *c, size_t pos, jv a, jv b) {
    if (both_int(a, b)) return jv_int(imul(c, pos, int_of(a), int_of(b)));
    if (jv_is_num(a) && jv_is_num(b)) return jv_float(jv_num(a) * jv_num(b));
    if ((a.k == JV_STR || jv_is_plain_list(a)) && (b.k == JV_INT || b.k == JV_BOOL)) return repeat(c, pos, a, int_of(b));
    if ((b.k == JV_STR || jv_is_plain_list(b)) && (a.k == JV_INT || a.k == JV_BOOL)) return repeat(c, pos, b, int_of(a));
    fail_operands(c, pos, "*", a, b);
}

/* Python's float floor division and modulo (divmod). */
static void float_divmod(double x, double y, double *div, double *mod) {
    double m = fmod(x, y), d = (x - m) / y;
    if (m != 0) { if ((y < 0) != (m < 0)) { m += y; d -= 1.0; } }
    else m = copysign(0.0, y);
    if (d != 0) { double f = floor(d); if (d - f > 0.5) f += 1.0; d = f; }
    else d = copysign(0.0, x / y);
    *div = d;
    *mod = m;
}

static jv op_divmod(jctx *c, size_t pos, int op, jv a, jv b) {
    const char *name = op == OP_DIV ? "/" : op == OP_FLOORDIV ? "//" : "%";
    if (!jv_is_num(a) || !jv_is_num(b)) fail_operands(c, pos, name, a, b);
    if (jv_num(b) == 0) jfail(c, pos, op == OP_DIV || !both_int(a, b) ? "division by zero" : "integer division or modulo by zero");
    if (op == OP_DIV) return jv_float(jv_num(a) / jv_num(b));
    if (both_int(a, b)) {
        int64_t x = int_of(a), y = int_of(b);
        if (x == INT64_MIN && y == -1) {
            if (op == OP_MOD) return jv_int(0);
            jfail(c, pos, "integer overflow");
        }
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; }
        return jv_int(op == OP_FLOORDIV ? q : m);
    }
    double d, m;
    float_divmod(jv_num(a), jv_num(b), &d, &m);
    return jv_float(op == OP_FLOORDIV ? d : m);
}

static jv op_pow(jctx *c, size_t pos, jv a, jv b) {
    if (!jv_is_num(a) || !jv_is_num(b)) fail_operands(c, pos, "**", a, b);
    if (both_int(a, b) && int_of(b) >= 0) {
        int64_t base = int_of(a), e = int_of(b), r = 1;
        while (e) {
            if (e & 1) r = imul(c, pos, r, base);
            e >>= 1;
            if (e) base = imul(c, pos, base, base);
        }
        return jv_int(r);
    }
    double x = jv_num(a), y = jv_num(b);
    if (x == 0 && y < 0) jfail(c, pos, "0.0 cannot be raised to a negative power");
    if (x < 0 && y != floor(y)) jfail(c, pos, "negative number cannot be raised to a fractional power");
    return jv_float(pow(x, y));
}

jv jeval_binop(jctx *c, size_t pos, int op, jv a, jv b) {
    if (op == OP_TILDE) {
        jbuf buf = {0};
        jv_write_str(c, &buf, a);
        jv_write_str(c, &buf, b);
        return jv_buf(c, &buf);
    }
    jcheck_defined(c, pos, a);
    if (op == OP_MOD && a.k == JV_STR) return jb_percent_format(c, pos, a.s, b);   /* b may be undefined */
    jcheck_defined(c, pos, b);
    switch (op) {
    case OP_ADD: return op_add(c, pos, a, b);
    case OP_SUB:
        if (both_int(a, b)) return jv_int(isub(c, pos, int_of(a), int_of(b)));
        if (jv_is_num(a) && jv_is_num(b)) return jv_float(jv_num(a) - jv_num(b));
        fail_operands(c, pos, "-", a, b);
    case OP_MUL: return op_mul(c, pos, a, b);
    case OP_DIV: case OP_FLOORDIV: case OP_MOD: return op_divmod(c, pos, op, a, b);
    case OP_POW: return op_pow(c, pos, a, b);
    default: jfail(c, pos, "unknown operator");
    }
}

static jv negate(jctx *c, size_t pos, jv v, bool neg) {
    jcheck_defined(c, pos, v);
    if (v.k == JV_FLOAT) return jv_float(neg ? -v.f : v.f);
    if (v.k == JV_INT || v.k == JV_BOOL) {
        int64_t i = int_of(v);
        if (neg && i == INT64_MIN) jfail(c, pos, "integer overflow");
        return jv_int(neg ? -i : i);
    }
    jfail(c, pos, "bad operand type for unary %c: '%s'", neg ? '-' : '+', jv_type_name(v));
}

/* ---------------- comparisons ---------------- */

static bool contains(jctx *c, size_t pos, jv item, jv seq) {
    switch (seq.k) {
    case JV_UNDEF: return false;
    case JV_STR:
        if (item.k != JV_STR) {
            jcheck_defined(c, pos, item);
            jfail(c, pos, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        }
        if (!item.s->len) return true;
        return item.s->len <= seq.s->len && memmem(seq.s->s, seq.s->len, item.s->s, item.s->len) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < seq.l->n; i++) if (jv_eq(c, seq.l->v[i], item)) return true;
        return false;
    case JV_DICT:
        if (!hashable(c, item)) jfail(c, pos, "unhashable type: '%s'", jv_type_name(item));
        return jd_get(c, seq.d, item, NULL);
    default: jfail(c, pos, "argument of type '%s' is not iterable", jv_type_name(seq));
    }
}

static bool compare(jctx *c, size_t pos, int op, jv a, jv b) {
    switch (op) {
    case OP_EQ: return jv_eq(c, a, b);
    case OP_NE: return !jv_eq(c, a, b);
    case OP_LT: return jv_cmp(c, pos, a, b, "<") < 0;
    case OP_LTEQ: return jv_cmp(c, pos, a, b, "<=") <= 0;
    case OP_GT: return jv_cmp(c, pos, a, b, ">") > 0;
    case OP_GTEQ: return jv_cmp(c, pos, a, b, ">=") >= 0;
    case OP_IN: return contains(c, pos, a, b);
    case OP_NOTIN: return !contains(c, pos, a, b);
    }
    return false;
}

static jv eval_compare(jctx *c, const jnode *n) {
    jv left = eval(c, n->a);
    for (size_t i = 0; i < n->nk; i++) {
        jv right = eval(c, n->kids[i]);
        if (!compare(c, n->kids[i]->pos, n->ops[i], left, right)) return jv_bool(false);
        left = right;
    }
    return jv_bool(true);
}

/* ---------------- calls ---------------- */

static jcall eval_args(jctx *c, const jnode *n, const char *extra_kw, jv extra_val) {
    size_t nkw = n->nkw + (extra_kw != NULL);
    jv *pos = n->nk ? ja_alloc(c, n->nk * sizeof *pos) : NULL;
    const char **kwn = nkw ? ja_alloc(c, nkw * sizeof *kwn) : NULL;
    jv *kwv = nkw ? ja_alloc(c, nkw * sizeof *kwv) : NULL;
    for (size_t i = 0; i < n->nk; i++) pos[i] = eval(c, n->kids[i]);
    for (size_t i = 0; i < n->nkw; i++) { kwn[i] = n->kwn[i]; kwv[i] = eval(c, n->kwv[i]); }
    if (extra_kw) { kwn[n->nkw] = extra_kw; kwv[n->nkw] = extra_val; }
    return (jcall){ .pos = pos, .npos = n->nk, .kwn = kwn, .kwv = kwv, .nkw = nkw };
}

static long param_index(const jnode *m, const char *name) {
    for (size_t i = 0; i < m->nkw; i++) if (!strcmp(m->kwn[i], name)) return (long)i;
    return -1;
}

/* Binds a macro's (or caller's) arguments in scope s: parameters, then varargs, kwargs and caller. */
static void bind_macro_args(jctx *c, const jnode *at, const jfunc *f, const jcall *call, jscope *s) {
    const jnode *m = f->node;
    bool *given = ja_alloc(c, m->nkw + 1);
    jv varargs = jv_list(c, 0), kwargs = jv_dict(c);
    varargs.l->tuple = true;
    for (size_t i = 0; i < call->npos; i++) {
        if (i < m->nkw) { jd_set_s(c, &s->vars, m->kwn[i], call->pos[i]); given[i] = true; }
        else jl_push(c, varargs.l, call->pos[i]);
    }
    for (size_t i = 0; i < call->nkw; i++) {
        long j = param_index(m, call->kwn[i]);
        if (j >= 0) {
            if (given[j]) jfail(c, at->pos, "macro '%s' got multiple values for argument '%s'", f->name, call->kwn[i]);
            jd_set_s(c, &s->vars, call->kwn[i], call->kwv[i]);
            given[j] = true;
        } else if (!strcmp(call->kwn[i], "caller")) {
            jd_set_s(c, &s->vars, "caller", call->kwv[i]);
        } else {
            jd_set_s(c, kwargs.d, call->kwn[i], call->kwv[i]);
        }
    }
    for (size_t j = 0; j < m->nkw; j++) {
        if (given[j]) continue;
        jv v;
        if (m->kwv[j]) v = eval(c, m->kwv[j]);   /* defaults see the parameters bound so far */
        else {
            jbuf b = {0};
            jb_printf(c, &b, "parameter '%s' was not provided", m->kwn[j]);
            v = jv_undef_hint(c, b.p);
        }
        jd_set_s(c, &s->vars, m->kwn[j], v);
    }
    jd_set_s(c, &s->vars, "varargs", varargs);
    jd_set_s(c, &s->vars, "kwargs", kwargs);
}

static jv call_macro(jctx *c, const jnode *at, const jfunc *f, const jcall *call) {
    jenter(c, at->pos);
    jscope *saved = c->scope;
    jscope *s = new_scope(c, f->closure);
    c->scope = s;
    bind_macro_args(c, at, f, call, s);
    c->scope = saved;
    jv out = capture(c, f->node->kids, f->node->nk, s, NULL);
    jleave(c);
    return out;
}

jv jeval_call(jctx *c, const jnode *at, jv fn, const jcall *call) {
    jcheck_defined(c, at->pos, fn);
    if (fn.k != JV_FUNC) jfail(c, at->pos, "'%s' object is not callable", jv_type_name(fn));
    if (fn.fn->kind == JF_BUILTIN) return jb_run(c, at, fn.fn->def, fn.fn->self, call);
    return call_macro(c, at, fn.fn, call);
}

static jv eval_call(jctx *c, const jnode *n, const char *extra_kw, jv extra_val) {
    jv fn = eval(c, n->a);
    jcall call = eval_args(c, n, extra_kw, extra_val);
    return jeval_call(c, n, fn, &call);
}

static jv eval_filter(jctx *c, const jnode *n) {
    jv input = n->a ? eval(c, n->a) : c->pipe_in;
    if (!n->fn) jfail(c, n->pos, "filter '%s' is not supported", n->name);
    jcall call = eval_args(c, n, NULL, jv_none());
    return jb_run(c, n, n->fn, input, &call);
}

static jv eval_test(jctx *c, const jnode *n) {
    jv v = eval(c, n->a);
    if (!n->fn) jfail(c, n->pos, "test '%s' is not supported", n->name);
    jcall call = eval_args(c, n, NULL, jv_none());
    return jv_bool(jv_truthy(jb_run(c, n, n->fn, v, &call)));
}

/* ---------------- expressions ---------------- */

static jv eval_list(jctx *c, const jnode *n, bool tuple) {
    jv out = jv_list(c, n->nk);
    out.l->tuple = tuple;
    for (size_t i = 0; i < n->nk; i++) jl_push(c, out.l, eval(c, n->kids[i]));
    return out;
}

static jv eval_dict(jctx *c, const jnode *n) {
    jv out = jv_dict(c);
    for (size_t i = 0; i + 1 < n->nk; i += 2) {
        jv k = eval(c, n->kids[i]);
        if (!hashable(c, k)) jfail(c, n->kids[i]->pos, "unhashable type: '%s'", jv_type_name(k));
        jd_set(c, out.d, k, eval(c, n->kids[i + 1]));
    }
    return out;
}

static jv eval_getitem(jctx *c, const jnode *n) {
    jv obj = eval(c, n->a);
    if (n->b->k == N_SLICE) return eval_slice(c, n->b, obj);
    return jeval_getitem(c, n->pos, obj, eval(c, n->b));
}

static jv eval_inner(jctx *c, const jnode *n) {
    jv v;
    switch (n->k) {
    case N_CONST: return n->val;
    case N_NAME: return lookup(c, n->name, &v) ? v : jv_undef_name(c, n->name);
    case N_LIST: return eval_list(c, n, false);
    case N_TUPLE: return eval_list(c, n, true);
    case N_DICT: return eval_dict(c, n);
    case N_GETATTR: return jeval_getattr(c, n->pos, eval(c, n->a), n->name);
    case N_GETITEM: return eval_getitem(c, n);
    case N_CALL: return eval_call(c, n, NULL, jv_none());
    case N_FILTER: return eval_filter(c, n);
    case N_TEST: return eval_test(c, n);
    case N_NOT: return jv_bool(!jv_truthy(eval(c, n->a)));
    case N_NEG: case N_POS: return negate(c, n->pos, eval(c, n->a), n->k == N_NEG);
    case N_BINOP: { jv a = eval(c, n->a); return jeval_binop(c, n->pos, n->op, a, eval(c, n->b)); }
    case N_AND: v = eval(c, n->a); return jv_truthy(v) ? eval(c, n->b) : v;
    case N_OR: v = eval(c, n->a); return jv_truthy(v) ? v : eval(c, n->b);
    case N_COMPARE: return eval_compare(c, n);
    case N_COND:
        if (jv_truthy(eval(c, n->a))) return eval(c, n->b);
        if (n->c) return eval(c, n->c);
        return jv_undef_hint(c, "the inline if-expression evaluated to false and no else section was defined");
    default: jfail(c, n->pos, "not an expression");
    }
}

static jv eval(jctx *c, const jnode *n) {
    jenter(c, n->pos);
    jv v = eval_inner(c, n);
    jleave(c);
    return v;
}

/* ---------------- statements ---------------- */

static void assign(jctx *c, const jnode *t, jv v) {
    if (t->k == N_NAME) { jd_set(c, &c->scope->vars, t->val, v); return; }
    if (t->k == N_NSREF) {
        jv ns;
        if (!lookup(c, t->name, &ns) || ns.k != JV_NS) jfail(c, t->pos, "cannot assign attribute on non-namespace object");
        jd_set(c, ns.d, t->val, v);
        return;
    }
    jlist *items = jeval_iter_list(c, t->pos, v);
    if (items->n < t->nk) jfail(c, t->pos, "not enough values to unpack (expected %zu, got %zu)", t->nk, items->n);
    if (items->n > t->nk) jfail(c, t->pos, "too many values to unpack (expected %zu)", t->nk);
    for (size_t i = 0; i < t->nk; i++) assign(c, t->kids[i], items->v[i]);
}

/* The loop's items, after the "if" filter; each test sees the loop variables in a scratch scope. */
static jlist *for_items(jctx *c, const jnode *n) {
    jv seq = eval(c, n->b);
    jlist *items = seq.k == JV_LIST && !n->c ? seq.l : jeval_iter_list(c, n->b->pos, seq);
    if (!n->c) return items;
    jscope *saved = c->scope, *s = new_scope(c, saved);
    jv kept = jv_list(c, 0);
    c->scope = s;
    for (size_t i = 0; i < items->n; i++) {
        jstep(c, n->pos);
        jd_clear(&s->vars);
        assign(c, n->a, items->v[i]);
        if (jv_truthy(eval(c, n->c))) jl_push(c, kept.l, items->v[i]);
    }
    c->scope = saved;
    return kept.l;
}

/* Each iteration starts from an empty scope (reused, so a long loop does not accumulate scopes). */
static int exec_for(jctx *c, const jnode *n) {
    jlist *items = for_items(c, n);
    jscope *saved = c->scope, *s = new_scope(c, saved);
    c->scope = s;
    if (!items->n) {
        int flow = exec_body(c, n->kids2, n->nk2);
        c->scope = saved;
        return flow;
    }
    jv loop = { .k = JV_LOOP };
    loop.lp = ja_alloc(c, sizeof *loop.lp);
    loop.lp->items = items;
    loop.lp->depth = 1;
    if (c->loop_key.k != JV_STR) c->loop_key = jv_cstr(c, "loop");
    for (size_t i = 0, n0 = items->n; i < n0 && i < items->n; i++) {   /* items appended meanwhile are not visited */
        jstep(c, n->pos);
        loop.lp->i = i;
        jd_clear(&s->vars);
        c->scope = s;
        assign(c, n->a, items->v[i]);
        jd_set(c, &s->vars, c->loop_key, loop);
        if (exec_body(c, n->kids, n->nk) == FLOW_BREAK) break;
    }
    c->scope = saved;
    return FLOW_NORMAL;
}

static int exec_if(jctx *c, const jnode *n) {
    for (;;) {
        if (jv_truthy(eval(c, n->a))) return exec_body(c, n->kids, n->nk);
        if (n->nk2 == 1 && n->kids2[0]->k == N_IF && n->kids2[0]->op == 1) { n = n->kids2[0]; continue; }
        return exec_body(c, n->kids2, n->nk2);
    }
}

static int exec_setblock(jctx *c, const jnode *n) {
    int flow;
    jv v = capture(c, n->kids, n->nk, new_scope(c, c->scope), &flow);
    if (n->b) { jv saved = c->pipe_in; c->pipe_in = v; v = eval(c, n->b); c->pipe_in = saved; }
    assign(c, n->a, v);
    return flow;
}

static int exec_filterblock(jctx *c, const jnode *n) {
    int flow;
    jv saved = c->pipe_in;
    c->pipe_in = capture(c, n->kids, n->nk, new_scope(c, c->scope), &flow);
    emit_value(c, eval(c, n->b));
    c->pipe_in = saved;
    return flow;
}

static int exec_with(jctx *c, const jnode *n) {
    jscope *saved = c->scope, *s = new_scope(c, saved);
    for (size_t i = 0; i < n->nkw; i++) jd_set_s(c, &s->vars, n->kwn[i], eval(c, n->kwv[i]));
    c->scope = s;
    int flow = exec_body(c, n->kids, n->nk);
    c->scope = saved;
    return flow;
}

static int exec_scope(jctx *c, const jnode *n) {
    jscope *saved = c->scope;
    c->scope = new_scope(c, saved);
    int flow = exec_body(c, n->kids, n->nk);
    c->scope = saved;
    return flow;
}

static int exec_inner(jctx *c, const jnode *n) {
    switch (n->k) {
    case N_TEXT: jb_put(c, c->out, n->val.s->s, n->val.s->len); check_output(c); return FLOW_NORMAL;
    case N_OUTPUT: emit_value(c, eval(c, n->a)); return FLOW_NORMAL;
    case N_IF: return exec_if(c, n);
    case N_FOR: return exec_for(c, n);
    case N_SET: assign(c, n->a, eval(c, n->b)); return FLOW_NORMAL;
    case N_SETBLOCK: return exec_setblock(c, n);
    case N_MACRO: set_var(c, n->name, jv_func(c, JF_MACRO, n->name, jv_none(), NULL, n, c->scope)); return FLOW_NORMAL;
    case N_CALLBLOCK:
        emit_value(c, eval_call(c, n->a, "caller", jv_func(c, JF_CALLER, "caller", jv_none(), NULL, n, c->scope)));
        return FLOW_NORMAL;
    case N_FILTERBLOCK: return exec_filterblock(c, n);
    case N_WITH: return exec_with(c, n);
    case N_BREAK: return FLOW_BREAK;
    case N_CONTINUE: return FLOW_CONTINUE;
    case N_DO: eval(c, n->a); return FLOW_NORMAL;
    case N_SCOPE: return exec_scope(c, n);
    case N_BODY: return exec_body(c, n->kids, n->nk);
    default: jfail(c, n->pos, "not a statement");
    }
}

static int exec_body(jctx *c, jnode *const *kids, size_t nk) {
    for (size_t i = 0; i < nk; i++) {
        jenter(c, kids[i]->pos);
        int flow = exec_inner(c, kids[i]);
        jleave(c);
        if (flow != FLOW_NORMAL) return flow;
    }
    return FLOW_NORMAL;
}

void jinja_exec_template(jctx *c, const jnode *body) {
    c->scope = c->root;
    exec_body(c, body->kids, body->nk);
}
