/* jinja_parse.c — the Jinja2 parser: tokens to a syntax tree, a recursive descent that mirrors
 * jinja2/parser.py function for function, so precedence and quirks match (filters and tests bind tighter
 * than arithmetic, "not" looser than comparisons, "x is test arg" takes one bare argument, "a if b" with no
 * else is undefined when b is false).
 *
 * Statements: if/elif/else, for (tuple targets, "if" filter, else), set (=, ns.attr, block form with
 * filters), macro, call (with caller args), filter blocks, with, break/continue (loopcontrols), do, print,
 * raw (in the lexer) and Hugging Face's generation blocks. Filters and tests are looked up here, so an
 * unknown one fails before anything renders, as in Jinja2. Nesting is bounded by JINJA_MAX_DEPTH. */
#include <string.h>

#include "jinja/jinja_internal.h"

typedef struct { jnode **v; size_t n, cap; } nvec;
typedef struct { const char **names; jnode **vals; size_t n, cap; } kvec;

static void nv_push(jctx *c, nvec *v, jnode *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        v->v = ja_grow(c, v->v, v->cap * sizeof *v->v, cap * sizeof *v->v);
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

static void kv_push(jctx *c, kvec *v, const char *name, jnode *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        v->names = ja_grow(c, v->names, v->cap * sizeof *v->names, cap * sizeof *v->names);
        v->vals = ja_grow(c, v->vals, v->cap * sizeof *v->vals, cap * sizeof *v->vals);
        v->cap = cap;
    }
    v->names[v->n] = name;
    v->vals[v->n++] = x;
}

/* ---------------- token stream ---------------- */

static jtok *cur(jctx *c) { return &c->toks[c->tp]; }
static jtok *peek(jctx *c, size_t k) { return &c->toks[c->tp + k < c->ntok ? c->tp + k : c->ntok - 1]; }
static void adv(jctx *c) { if (c->tp + 1 < c->ntok) c->tp++; }
static bool is_name(const jtok *t, const char *s) { return t->k == T_NAME && !strcmp(t->s, s); }
static bool is_op(const jtok *t, int op) { return t->k == T_OP && t->op == op; }

static const char *describe(jctx *c, const jtok *t) {
    jbuf b = {0};
    switch (t->k) {
    case T_EOF: return "end of template";
    case T_DATA: return "template data";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "end of print statement";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "end of statement block";
    case T_STRING: return "string";
    case T_INT: return "integer";
    case T_FLOAT: return "float";
    case T_NAME: jb_printf(c, &b, "'%.60s'", t->s); return b.p;
    case T_OP: jb_printf(c, &b, "'%s'", jinja_op_text(t->op)); return b.p;
    }
    return "token";
}

static void expect_op(jctx *c, int op) {
    if (!is_op(cur(c), op)) jfail(c, cur(c)->pos, "expected '%s', got %s", jinja_op_text(op), describe(c, cur(c)));
    adv(c);
}

static void expect_kind(jctx *c, jtkind k, const char *what) {
    if (cur(c)->k != k) jfail(c, cur(c)->pos, "expected %s, got %s", what, describe(c, cur(c)));
    adv(c);
}

static const char *expect_name(jctx *c) {
    jtok *t = cur(c);
    if (t->k != T_NAME) jfail(c, t->pos, "expected a name, got %s", describe(c, t));
    adv(c);
    return t->s;
}

static void expect_name_is(jctx *c, const char *name) {
    if (!is_name(cur(c), name)) jfail(c, cur(c)->pos, "expected '%s', got %s", name, describe(c, cur(c)));
    adv(c);
}

static jnode *nn(jctx *c, jnkind k, size_t pos) {
    jnode *n = ja_alloc(c, sizeof *n);
    n->k = k;
    n->pos = pos;
    return n;
}

static jnode *nn2(jctx *c, jnkind k, size_t pos, jnode *a, jnode *b) {
    jnode *n = nn(c, k, pos);
    n->a = a;
    n->b = b;
    return n;
}

/* ---------------- expressions ---------------- */

static jnode *parse_expression(jctx *c, bool with_condexpr);
static jnode *parse_tuple(jctx *c, bool simplified, bool with_condexpr, const char *extra_end, bool explicit_parens,
                          bool with_ns);
static jnode *parse_unary(jctx *c, bool with_filter);
static jnode *parse_postfix(jctx *c, jnode *node);

static jnode *parse_list(jctx *c) {
    jnode *n = nn(c, N_LIST, cur(c)->pos);
    nvec items = {0};
    expect_op(c, OP_LBRACKET);
    while (!is_op(cur(c), OP_RBRACKET)) {
        if (items.n) expect_op(c, OP_COMMA);
        if (is_op(cur(c), OP_RBRACKET)) break;
        nv_push(c, &items, parse_expression(c, true));
    }
    expect_op(c, OP_RBRACKET);
    n->kids = items.v;
    n->nk = items.n;
    return n;
}

static jnode *parse_dict(jctx *c) {
    jnode *n = nn(c, N_DICT, cur(c)->pos);
    nvec items = {0};
    expect_op(c, OP_LBRACE);
    while (!is_op(cur(c), OP_RBRACE)) {
        if (items.n) expect_op(c, OP_COMMA);
        if (is_op(cur(c), OP_RBRACE)) break;
        nv_push(c, &items, parse_expression(c, true));
        expect_op(c, OP_COLON);
        nv_push(c, &items, parse_expression(c, true));
    }
    expect_op(c, OP_RBRACE);
    n->kids = items.v;
    n->nk = items.n;
    return n;
}

static jnode *parse_const(jctx *c, size_t pos, jv v) {
    jnode *n = nn(c, N_CONST, pos);
    n->val = v;
    return n;
}

static jnode *parse_strings(jctx *c) {
    size_t pos = cur(c)->pos;
    jbuf b = {0};
    while (cur(c)->k == T_STRING) { jb_put(c, &b, cur(c)->s, cur(c)->n); adv(c); }
    return parse_const(c, pos, jv_buf(c, &b));
}

static jnode *parse_primary(jctx *c, bool with_ns) {
    jtok *t = cur(c);
    switch (t->k) {
    case T_NAME:
        adv(c);
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) return parse_const(c, t->pos, jv_bool(true));
        if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) return parse_const(c, t->pos, jv_bool(false));
        if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) return parse_const(c, t->pos, jv_none());
        if (with_ns && is_op(cur(c), OP_DOT)) {
            adv(c);
            jnode *n = nn(c, N_NSREF, t->pos);
            n->name = t->s;
            n->name2 = expect_name(c);
            n->val = jv_cstr(c, n->name2);   /* the attribute's key, made once */
            return n;
        } else {
            jnode *n = nn(c, N_NAME, t->pos);
            n->name = t->s;
            n->val = jv_str(c, t->s, t->n);   /* the variable's key, made once */
            return n;
        }
    case T_STRING: return parse_strings(c);
    case T_INT: adv(c); return parse_const(c, t->pos, jv_int(t->i));
    case T_FLOAT: adv(c); return parse_const(c, t->pos, jv_float(t->f));
    case T_OP:
        if (t->op == OP_LPAREN) {
            adv(c);
            jnode *n = parse_tuple(c, false, true, NULL, true, false);
            expect_op(c, OP_RPAREN);
            return n;
        }
        if (t->op == OP_LBRACKET) return parse_list(c);
        if (t->op == OP_LBRACE) return parse_dict(c);
        break;
    default: break;
    }
    jfail(c, t->pos, "unexpected %s", describe(c, t));
}

static bool is_tuple_end(jctx *c, const char *extra_end) {
    jtok *t = cur(c);
    if (t->k == T_VAR_END || t->k == T_BLOCK_END || is_op(t, OP_RPAREN)) return true;
    return extra_end && is_name(t, extra_end);
}

/* Comma-separated expressions: one alone is itself, several (or a trailing comma) a tuple. */
static jnode *parse_tuple(jctx *c, bool simplified, bool with_condexpr, const char *extra_end, bool explicit_parens,
                          bool with_ns) {
    size_t pos = cur(c)->pos;
    nvec args = {0};
    bool is_tuple = false;
    for (;;) {
        if (args.n) expect_op(c, OP_COMMA);
        if (is_tuple_end(c, extra_end)) break;
        nv_push(c, &args, simplified ? parse_primary(c, with_ns) : parse_expression(c, with_condexpr));
        if (is_op(cur(c), OP_COMMA)) is_tuple = true;
        else break;
    }
    if (!is_tuple) {
        if (args.n) return args.v[0];
        if (!explicit_parens) jfail(c, cur(c)->pos, "expected an expression, got %s", describe(c, cur(c)));
    }
    jnode *n = nn(c, N_TUPLE, pos);
    n->kids = args.v;
    n->nk = args.n;
    return n;
}

static void parse_call_args(jctx *c, jnode *n) {
    nvec args = {0};
    kvec kw = {0};
    expect_op(c, OP_LPAREN);
    bool require_comma = false;
    while (!is_op(cur(c), OP_RPAREN)) {
        if (require_comma) {
            expect_op(c, OP_COMMA);
            if (is_op(cur(c), OP_RPAREN)) break;
        }
        jtok *t = cur(c);
        if (is_op(t, OP_MUL) || is_op(t, OP_POW)) jfail(c, t->pos, "*args and **kwargs in calls are not supported");
        if (t->k == T_NAME && is_op(peek(c, 1), OP_ASSIGN)) {
            adv(c);
            adv(c);
            for (size_t i = 0; i < kw.n; i++)
                if (!strcmp(kw.names[i], t->s)) jfail(c, t->pos, "keyword argument repeated: %s", t->s);
            kv_push(c, &kw, t->s, parse_expression(c, true));
        } else {
            if (kw.n) jfail(c, t->pos, "positional argument follows keyword argument");
            nv_push(c, &args, parse_expression(c, true));
        }
        require_comma = true;
    }
    expect_op(c, OP_RPAREN);
    n->kids = args.v;
    n->nk = args.n;
    n->kwn = kw.names;
    n->kwv = kw.vals;
    n->nkw = kw.n;
}

static jnode *parse_call(jctx *c, jnode *callee) {
    jnode *n = nn(c, N_CALL, cur(c)->pos);
    n->a = callee;
    parse_call_args(c, n);
    return n;
}

static const char *parse_dotted_name(jctx *c) {
    const char *name = expect_name(c);
    while (is_op(cur(c), OP_DOT)) {
        adv(c);
        jbuf b = {0};
        jb_printf(c, &b, "%s.%s", name, expect_name(c));
        name = b.p;
    }
    return name;
}

static jnode *parse_filter(jctx *c, jnode *node, bool start_inline) {
    while (is_op(cur(c), OP_PIPE) || start_inline) {
        if (!start_inline) adv(c);
        size_t pos = cur(c)->pos;
        jnode *n = nn(c, N_FILTER, pos);
        n->a = node;
        n->name = parse_dotted_name(c);
        bool known;
        n->fn = jb_find_filter(n->name, &known);
        if (!known) jfail(c, pos, "unknown filter '%s'", n->name);
        if (is_op(cur(c), OP_LPAREN)) parse_call_args(c, n);
        node = n;
        start_inline = false;
    }
    return node;
}

static bool starts_test_arg(jctx *c) {
    jtok *t = cur(c);
    if (t->k == T_NAME) return !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and");
    return t->k == T_STRING || t->k == T_INT || t->k == T_FLOAT || is_op(t, OP_LPAREN) || is_op(t, OP_LBRACKET) ||
           is_op(t, OP_LBRACE);
}

static jnode *parse_test(jctx *c, jnode *node) {
    size_t pos = cur(c)->pos;
    adv(c);   /* "is" */
    bool negated = is_name(cur(c), "not");
    if (negated) adv(c);
    jnode *n = nn(c, N_TEST, cur(c)->pos);
    n->a = node;
    n->name = parse_dotted_name(c);
    bool known;
    n->fn = jb_find_test(n->name, &known);
    if (!known) jfail(c, n->pos, "unknown test '%s'", n->name);
    if (is_op(cur(c), OP_LPAREN)) parse_call_args(c, n);
    else if (starts_test_arg(c)) {
        if (is_name(cur(c), "is")) jfail(c, cur(c)->pos, "you cannot chain multiple tests with is");
        n->kids = ja_alloc(c, sizeof *n->kids);
        n->kids[0] = parse_postfix(c, parse_primary(c, false));
        n->nk = 1;
    }
    return negated ? nn2(c, N_NOT, pos, n, NULL) : n;
}

static jnode *parse_subscribed(jctx *c) {
    size_t pos = cur(c)->pos;
    jnode *start = NULL, *stop = NULL, *step = NULL;
    if (is_op(cur(c), OP_COLON)) adv(c);
    else {
        jnode *e = parse_expression(c, true);
        if (!is_op(cur(c), OP_COLON)) return e;
        adv(c);
        start = e;
    }
    if (!is_op(cur(c), OP_COLON) && !is_op(cur(c), OP_RBRACKET) && !is_op(cur(c), OP_COMMA))
        stop = parse_expression(c, true);
    if (is_op(cur(c), OP_COLON)) {
        adv(c);
        if (!is_op(cur(c), OP_RBRACKET) && !is_op(cur(c), OP_COMMA)) step = parse_expression(c, true);
    }
    jnode *n = nn2(c, N_SLICE, pos, start, stop);
    n->c = step;
    return n;
}

static jnode *parse_subscript(jctx *c, jnode *node) {
    jtok *t = cur(c);
    adv(c);
    if (t->op == OP_DOT) {
        jtok *a = cur(c);
        adv(c);
        if (a->k == T_NAME) {
            jnode *n = nn2(c, N_GETATTR, t->pos, node, NULL);
            n->name = a->s;
            return n;
        }
        if (a->k != T_INT) jfail(c, a->pos, "expected name or number");
        return nn2(c, N_GETITEM, t->pos, node, parse_const(c, a->pos, jv_int(a->i)));
    }
    nvec args = {0};
    while (!is_op(cur(c), OP_RBRACKET)) {
        if (args.n) expect_op(c, OP_COMMA);
        nv_push(c, &args, parse_subscribed(c));
    }
    expect_op(c, OP_RBRACKET);
    if (args.n == 1) return nn2(c, N_GETITEM, t->pos, node, args.v[0]);
    jnode *tuple = nn(c, N_TUPLE, t->pos);
    tuple->kids = args.v;
    tuple->nk = args.n;
    return nn2(c, N_GETITEM, t->pos, node, tuple);
}

static jnode *parse_postfix(jctx *c, jnode *node) {
    for (;;) {
        if (is_op(cur(c), OP_DOT) || is_op(cur(c), OP_LBRACKET)) node = parse_subscript(c, node);
        else if (is_op(cur(c), OP_LPAREN)) node = parse_call(c, node);
        else return node;
    }
}

static jnode *parse_filter_expr(jctx *c, jnode *node) {
    for (;;) {
        if (is_op(cur(c), OP_PIPE)) node = parse_filter(c, node, false);
        else if (is_name(cur(c), "is")) node = parse_test(c, node);
        else if (is_op(cur(c), OP_LPAREN)) node = parse_call(c, node);
        else return node;
    }
}

static jnode *parse_unary(jctx *c, bool with_filter) {
    jtok *t = cur(c);
    jenter(c, t->pos);
    jnode *node;
    if (is_op(t, OP_SUB) || is_op(t, OP_ADD)) {
        adv(c);
        node = nn2(c, t->op == OP_SUB ? N_NEG : N_POS, t->pos, parse_unary(c, false), NULL);
    } else {
        node = parse_primary(c, false);
    }
    node = parse_postfix(c, node);
    if (with_filter) node = parse_filter_expr(c, node);
    jleave(c);
    return node;
}

static jnode *binop(jctx *c, int op, size_t pos, jnode *a, jnode *b) {
    jnode *n = nn2(c, N_BINOP, pos, a, b);
    n->op = op;
    return n;
}

static jnode *parse_pow(jctx *c) {
    jnode *left = parse_unary(c, true);
    while (is_op(cur(c), OP_POW)) {
        size_t pos = cur(c)->pos;
        adv(c);
        left = binop(c, OP_POW, pos, left, parse_unary(c, true));
    }
    return left;
}

static jnode *parse_math2(jctx *c) {
    jnode *left = parse_pow(c);
    for (jtok *t = cur(c); is_op(t, OP_MUL) || is_op(t, OP_DIV) || is_op(t, OP_FLOORDIV) || is_op(t, OP_MOD); t = cur(c)) {
        adv(c);
        left = binop(c, t->op, t->pos, left, parse_pow(c));
    }
    return left;
}

static jnode *parse_concat(jctx *c) {
    jnode *left = parse_math2(c);
    while (is_op(cur(c), OP_TILDE)) {
        size_t pos = cur(c)->pos;
        adv(c);
        left = binop(c, OP_TILDE, pos, left, parse_math2(c));
    }
    return left;
}

static jnode *parse_math1(jctx *c) {
    jnode *left = parse_concat(c);
    for (jtok *t = cur(c); is_op(t, OP_ADD) || is_op(t, OP_SUB); t = cur(c)) {
        adv(c);
        left = binop(c, t->op, t->pos, left, parse_concat(c));
    }
    return left;
}

static int compare_op(jctx *c) {
    jtok *t = cur(c);
    if (t->k == T_OP && (t->op == OP_EQ || t->op == OP_NE || t->op == OP_LT || t->op == OP_LTEQ || t->op == OP_GT ||
                         t->op == OP_GTEQ)) { adv(c); return t->op; }
    if (is_name(t, "in")) { adv(c); return OP_IN; }
    if (is_name(t, "not") && is_name(peek(c, 1), "in")) { adv(c); adv(c); return OP_NOTIN; }
    return 0;
}

static jnode *parse_compare(jctx *c) {
    size_t pos = cur(c)->pos;
    jnode *expr = parse_math1(c);
    nvec operands = {0};
    int *ops = NULL;
    size_t ops_cap = 0;
    for (int op; (op = compare_op(c));) {
        if (operands.n == ops_cap) {
            size_t cap = ops_cap ? ops_cap * 2 : 4;
            ops = ja_grow(c, ops, ops_cap * sizeof *ops, cap * sizeof *ops);
            ops_cap = cap;
        }
        ops[operands.n] = op;
        nv_push(c, &operands, parse_math1(c));
    }
    if (!operands.n) return expr;
    jnode *n = nn2(c, N_COMPARE, pos, expr, NULL);
    n->kids = operands.v;
    n->nk = operands.n;
    n->ops = ops;
    return n;
}

static jnode *parse_not(jctx *c) {
    if (!is_name(cur(c), "not")) return parse_compare(c);
    size_t pos = cur(c)->pos;
    adv(c);
    jenter(c, pos);
    jnode *n = nn2(c, N_NOT, pos, parse_not(c), NULL);
    jleave(c);
    return n;
}

static jnode *parse_and(jctx *c) {
    jnode *left = parse_not(c);
    while (is_name(cur(c), "and")) {
        size_t pos = cur(c)->pos;
        adv(c);
        left = nn2(c, N_AND, pos, left, parse_not(c));
    }
    return left;
}

static jnode *parse_or(jctx *c) {
    jnode *left = parse_and(c);
    while (is_name(cur(c), "or")) {
        size_t pos = cur(c)->pos;
        adv(c);
        left = nn2(c, N_OR, pos, left, parse_and(c));
    }
    return left;
}

static jnode *parse_condexpr(jctx *c) {
    jenter(c, cur(c)->pos);
    jnode *expr1 = parse_or(c);
    while (is_name(cur(c), "if")) {
        size_t pos = cur(c)->pos;
        adv(c);
        jnode *n = nn2(c, N_COND, pos, parse_or(c), expr1);
        if (is_name(cur(c), "else")) { adv(c); n->c = parse_condexpr(c); }
        expr1 = n;
    }
    jleave(c);
    return expr1;
}

static jnode *parse_expression(jctx *c, bool with_condexpr) {
    jenter(c, cur(c)->pos);
    jnode *n = with_condexpr ? parse_condexpr(c) : parse_or(c);
    jleave(c);
    return n;
}

/* ---------------- statements ---------------- */

static bool can_assign(const jnode *n) {
    if (n->k == N_NAME || n->k == N_NSREF) return true;
    if (n->k != N_TUPLE) return false;
    for (size_t i = 0; i < n->nk; i++) if (!can_assign(n->kids[i])) return false;
    return true;
}

static jnode *parse_assign_target(jctx *c, const char *extra_end, bool with_ns) {
    size_t pos = cur(c)->pos;
    jnode *t = parse_tuple(c, true, true, extra_end, false, with_ns);
    if (!can_assign(t)) jfail(c, pos, "can't assign to this expression");
    return t;
}

static const char *subparse(jctx *c, const char *const *ends, const char *tag, size_t tagpos, nvec *body);

static bool in_ends(const jtok *t, const char *const *ends) {
    if (!ends || t->k != T_NAME) return false;
    for (size_t i = 0; ends[i]; i++) if (!strcmp(t->s, ends[i])) return true;
    return false;
}

/* A statement's body up to one of its end tags; the stream is left on that tag's name. */
static const char *parse_body(jctx *c, const char *const *ends, const char *tag, size_t tagpos, jnode ***kids, size_t *nk) {
    if (is_op(cur(c), OP_COLON)) adv(c);
    expect_kind(c, T_BLOCK_END, "end of statement block");
    nvec body = {0};
    const char *end = subparse(c, ends, tag, tagpos, &body);
    *kids = body.v;
    *nk = body.n;
    return end;
}

static void parse_signature(jctx *c, jnode *n) {
    kvec params = {0};
    bool defaults = false;
    expect_op(c, OP_LPAREN);
    while (!is_op(cur(c), OP_RPAREN)) {
        if (params.n) expect_op(c, OP_COMMA);
        jtok *t = cur(c);
        const char *name = expect_name(c);
        jnode *dflt = NULL;
        if (is_op(cur(c), OP_ASSIGN)) { adv(c); dflt = parse_expression(c, true); defaults = true; }
        else if (defaults) jfail(c, t->pos, "non-default argument follows default argument");
        kv_push(c, &params, name, dflt);
    }
    expect_op(c, OP_RPAREN);
    n->kwn = params.names;
    n->kwv = params.vals;
    n->nkw = params.n;
}

static jnode *parse_for(jctx *c, size_t pos) {
    static const char *const ends[] = { "endfor", "else", NULL }, *const ends2[] = { "endfor", NULL };
    jnode *n = nn(c, N_FOR, pos);
    n->a = parse_assign_target(c, "in", false);
    expect_name_is(c, "in");
    n->b = parse_tuple(c, false, false, "recursive", false, false);
    if (is_name(cur(c), "if")) { adv(c); n->c = parse_expression(c, true); }
    if (is_name(cur(c), "recursive")) jfail(c, cur(c)->pos, "recursive for loops are not supported");
    c->loop_depth++;
    const char *end = parse_body(c, ends, "for", pos, &n->kids, &n->nk);
    c->loop_depth--;
    adv(c);
    if (!strcmp(end, "else")) { parse_body(c, ends2, "for", pos, &n->kids2, &n->nk2); adv(c); }
    return n;
}

static jnode *parse_if(jctx *c, size_t pos) {
    static const char *const ends[] = { "endif", "elif", "else", NULL }, *const ends2[] = { "endif", NULL };
    jnode *result = nn(c, N_IF, pos), *node = result;
    for (;;) {
        node->a = parse_tuple(c, false, false, NULL, false, false);
        const char *end = parse_body(c, ends, "if", pos, &node->kids, &node->nk);
        size_t end_pos = cur(c)->pos;
        adv(c);
        if (!strcmp(end, "elif")) {
            jnode *elif = nn(c, N_IF, end_pos);
            elif->op = 1;
            node->kids2 = ja_alloc(c, sizeof *node->kids2);
            node->kids2[0] = elif;
            node->nk2 = 1;
            node = elif;
            continue;
        }
        if (!strcmp(end, "else")) { parse_body(c, ends2, "if", pos, &node->kids2, &node->nk2); adv(c); }
        return result;
    }
}

static jnode *parse_set(jctx *c, size_t pos) {
    static const char *const ends[] = { "endset", NULL };
    jnode *target = parse_assign_target(c, NULL, true);
    if (is_op(cur(c), OP_ASSIGN)) {
        adv(c);
        return nn2(c, N_SET, pos, target, parse_tuple(c, false, true, NULL, false, false));
    }
    jnode *n = nn2(c, N_SETBLOCK, pos, target, parse_filter(c, NULL, false));
    parse_body(c, ends, "set", pos, &n->kids, &n->nk);
    adv(c);
    return n;
}

/* Bodies that run as functions (macros, call blocks): break/continue cannot reach an outer loop. */
static void parse_function_body(jctx *c, jnode *n, const char *const *ends, const char *tag, size_t pos) {
    int saved = c->loop_depth;
    c->loop_depth = 0;
    parse_body(c, ends, tag, pos, &n->kids, &n->nk);
    c->loop_depth = saved;
    adv(c);
}

static jnode *parse_macro(jctx *c, size_t pos) {
    static const char *const ends[] = { "endmacro", NULL };
    jnode *n = nn(c, N_MACRO, pos);
    n->name = expect_name(c);
    parse_signature(c, n);
    parse_function_body(c, n, ends, "macro", pos);
    return n;
}

static jnode *parse_call_block(jctx *c, size_t pos) {
    static const char *const ends[] = { "endcall", NULL };
    jnode *n = nn(c, N_CALLBLOCK, pos);
    if (is_op(cur(c), OP_LPAREN)) parse_signature(c, n);
    n->a = parse_expression(c, true);
    if (n->a->k != N_CALL) jfail(c, n->a->pos, "expected call");
    parse_function_body(c, n, ends, "call", pos);
    return n;
}

static jnode *parse_filter_block(jctx *c, size_t pos) {
    static const char *const ends[] = { "endfilter", NULL };
    jnode *n = nn(c, N_FILTERBLOCK, pos);
    n->b = parse_filter(c, NULL, true);
    parse_body(c, ends, "filter", pos, &n->kids, &n->nk);
    adv(c);
    return n;
}

static jnode *parse_with(jctx *c, size_t pos) {
    static const char *const ends[] = { "endwith", NULL };
    jnode *n = nn(c, N_WITH, pos);
    kvec kv = {0};
    while (cur(c)->k != T_BLOCK_END) {
        if (kv.n) expect_op(c, OP_COMMA);
        const char *name = expect_name(c);
        expect_op(c, OP_ASSIGN);
        kv_push(c, &kv, name, parse_expression(c, true));
    }
    n->kwn = kv.names;
    n->kwv = kv.vals;
    n->nkw = kv.n;
    parse_body(c, ends, "with", pos, &n->kids, &n->nk);
    adv(c);
    return n;
}

static jnode *parse_print(jctx *c, size_t pos) {
    jnode *n = nn(c, N_BODY, pos);
    nvec outs = {0};
    while (cur(c)->k != T_BLOCK_END) {
        if (outs.n) expect_op(c, OP_COMMA);
        nv_push(c, &outs, nn2(c, N_OUTPUT, cur(c)->pos, parse_expression(c, true), NULL));
    }
    n->kids = outs.v;
    n->nk = outs.n;
    return n;
}

static jnode *parse_generation(jctx *c, size_t pos) {
    static const char *const ends[] = { "endgeneration", NULL };
    jnode *n = nn(c, N_SCOPE, pos);
    parse_body(c, ends, "generation", pos, &n->kids, &n->nk);
    adv(c);
    return n;
}

static jnode *parse_loop_control(jctx *c, jtok *t) {
    if (!c->loop_depth) jfail(c, t->pos, "'%s' outside of a for loop", t->s);
    return nn(c, !strcmp(t->s, "break") ? N_BREAK : N_CONTINUE, t->pos);
}

static _Noreturn void fail_unknown_tag(jctx *c, const jtok *t) {
    static const char *const unsupported[] = { "block", "extends", "include", "import", "from", "autoescape", NULL };
    for (size_t i = 0; unsupported[i]; i++)
        if (!strcmp(t->s, unsupported[i])) jfail(c, t->pos, "'%s' tags are not supported", t->s);
    if (c->ends) jfail(c, t->pos, "unexpected tag '%s' (expected '%s')", t->s, c->ends[0]);
    jfail(c, t->pos, "unknown tag '%s'", t->s);
}

static jnode *parse_statement(jctx *c) {
    jtok *t = cur(c);
    if (t->k != T_NAME) jfail(c, t->pos, "expected a tag name, got %s", describe(c, t));
    jenter(c, t->pos);
    adv(c);
    jnode *n;
    const char *s = t->s;
    if (!strcmp(s, "for")) n = parse_for(c, t->pos);
    else if (!strcmp(s, "if")) n = parse_if(c, t->pos);
    else if (!strcmp(s, "set")) n = parse_set(c, t->pos);
    else if (!strcmp(s, "macro")) n = parse_macro(c, t->pos);
    else if (!strcmp(s, "call")) n = parse_call_block(c, t->pos);
    else if (!strcmp(s, "filter")) n = parse_filter_block(c, t->pos);
    else if (!strcmp(s, "with")) n = parse_with(c, t->pos);
    else if (!strcmp(s, "print")) n = parse_print(c, t->pos);
    else if (!strcmp(s, "generation")) n = parse_generation(c, t->pos);
    else if (!strcmp(s, "do")) n = nn2(c, N_DO, t->pos, parse_tuple(c, false, true, NULL, false, false), NULL);
    else if (!strcmp(s, "break") || !strcmp(s, "continue")) n = parse_loop_control(c, t);
    else fail_unknown_tag(c, t);
    jleave(c);
    return n;
}

static jnode *text_node(jctx *c, const jtok *t) {
    jnode *n = nn(c, N_TEXT, t->pos);
    n->val = jv_str(c, t->s, t->n);
    return n;
}

static const char *subparse(jctx *c, const char *const *ends, const char *tag, size_t tagpos, nvec *body) {
    const char *const *saved = c->ends;
    c->ends = ends;
    for (;;) {
        jtok *t = cur(c);
        if (t->k == T_DATA) {
            nv_push(c, body, text_node(c, t));
            adv(c);
        } else if (t->k == T_VAR_BEGIN) {
            adv(c);
            nv_push(c, body, nn2(c, N_OUTPUT, t->pos, parse_tuple(c, false, true, NULL, false, false), NULL));
            expect_kind(c, T_VAR_END, "'}}'");
        } else if (t->k == T_BLOCK_BEGIN) {
            adv(c);
            if (in_ends(cur(c), ends)) { c->ends = saved; return cur(c)->s; }
            nv_push(c, body, parse_statement(c));
            expect_kind(c, T_BLOCK_END, "end of statement block");
        } else if (t->k == T_EOF) {
            if (ends) jfail(c, tagpos, "'%s' is never closed (expected '%s' before the end of the template)", tag, ends[0]);
            c->ends = saved;
            return NULL;
        } else {
            jfail(c, t->pos, "unexpected %s", describe(c, t));
        }
    }
}

jnode *jinja_parse(jctx *c) {
    c->tp = 0;
    jnode *root = nn(c, N_BODY, 0);
    nvec body = {0};
    subparse(c, NULL, NULL, 0, &body);
    root->kids = body.v;
    root->nk = body.n;
    return root;
}
