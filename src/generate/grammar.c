/* grammar.c — grammar-constrained sampling: GBNF (llama.cpp's grammar format) parsed and compiled to byte-level
 * rules, and a matcher that says which tokens may come next.
 *
 * Byte level: every character class is compiled to UTF-8 byte sequences (a code-point range becomes a few runs
 * of byte ranges, as regex engines do), so the matcher advances one byte at a time and a token that holds part
 * of a character (byte-fallback tokens) needs no special case. A parse state is a set of stacks of positions
 * in the rules; the top of every stack is a byte set to match. Alternatives fork stacks, a finished rule pops
 * to its return position, a rule reference in tail position is not pushed (so repetitions do not grow stacks).
 *
 * Token masks: the vocabulary's pieces are sorted once per model (gram_vocab, shared by every grammar on the
 * model), so a walk in that order is a walk of the vocabulary's byte trie: the state after each prefix is
 * kept per depth and reused by the next token, and a prefix the grammar rejects skips every token under it.
 * Masks are cached by parse state (a JSON string, an array, whitespace come back to the same state again and
 * again), so most steps cost one lookup. EOS and the other end-of-generation tokens are allowed exactly where
 * the grammar may end; other control tokens (empty pieces) never. */
#include "generate/grammar.h"
#include "model/model.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { GE_END, GE_ALT, GE_BYTES, GE_REF };
typedef struct { uint32_t type : 2, val : 30; } gel;

#define GR_MAX_DEPTH 512       /* positions in one stack; deeper nesting is refused (never loosened) */
#define GR_MAX_STACKS 16384    /* stacks in one state */
#define GR_MAX_REPEAT 10000    /* x{m,n}: largest count */
#define GR_CACHE 64            /* masks kept per grammar */

struct gram {
    gel *el;                   /* every rule's alternatives, flattened; each ends with GE_ALT or GE_END */
    uint32_t *alts, *alt_at;   /* alternatives of rule r: alts[alt_at[r] .. alt_at[r + 1]) (element indices) */
    uint8_t (*sets)[32];       /* byte sets of the GE_BYTES elements */
    uint32_t root, n_rules, n_el;
};

/* ---- parsing ---- */

typedef struct { gel *v; uint32_t n, cap; } gvec;

typedef struct {
    const char *p;
    int line;
    gvec *rules;
    char **names;              /* NULL for rules made by the parser (groups, repetitions, classes) */
    bool *defined;
    int *line_of;              /* where each rule was first named, for "used but not defined" */
    int n_rules, cap_rules;
    uint8_t (*sets)[32];
    uint32_t n_sets, cap_sets;
    hearth_err *err;
    bool failed;
    int depth;                 /* of nested groups */
} parser;

static bool fail(parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(parser *ps, const char *fmt, ...) {
    if (ps->failed) return false;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    herr(ps->err, "grammar, line %d: %s", ps->line, msg);
    ps->failed = true;
    return false;
}

static bool push(parser *ps, gvec *v, int type, uint32_t val) {
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 16;
        gel *nv = realloc(v->v, cap * sizeof *nv);
        if (!nv) return fail(ps, "out of memory");
        v->v = nv, v->cap = cap;
    }
    v->v[v->n++] = (gel){ (uint32_t)type, val };
    return true;
}

static int add_rule(parser *ps, const char *name, size_t len) {
    if (ps->n_rules == ps->cap_rules) {
        int cap = ps->cap_rules ? ps->cap_rules * 2 : 32;
        gvec *r = realloc(ps->rules, (size_t)cap * sizeof *r);
        if (r) ps->rules = r;
        char **nm = realloc(ps->names, (size_t)cap * sizeof *nm);
        if (nm) ps->names = nm;
        bool *d = realloc(ps->defined, (size_t)cap * sizeof *d);
        if (d) ps->defined = d;
        int *ln = realloc(ps->line_of, (size_t)cap * sizeof *ln);
        if (ln) ps->line_of = ln;
        if (!r || !nm || !d || !ln || cap > (1 << 24)) return fail(ps, "out of memory"), -1;
        ps->cap_rules = cap;
    }
    int id = ps->n_rules++;
    ps->rules[id] = (gvec){ 0 };
    ps->names[id] = name ? strndup(name, len) : NULL;
    ps->defined[id] = name == NULL;
    ps->line_of[id] = ps->line;
    if (name && !ps->names[id]) return fail(ps, "out of memory"), -1;
    return id;
}

static int rule_named(parser *ps, const char *name, size_t len) {
    for (int i = 0; i < ps->n_rules; i++)
        if (ps->names[i] && strlen(ps->names[i]) == len && !memcmp(ps->names[i], name, len)) return i;
    return add_rule(ps, name, len);
}

static uint32_t set_id(parser *ps, const uint8_t set[32]) {
    for (uint32_t i = 0; i < ps->n_sets; i++) if (!memcmp(ps->sets[i], set, 32)) return i;
    if (ps->n_sets == ps->cap_sets) {
        uint32_t cap = ps->cap_sets ? ps->cap_sets * 2 : 64;
        uint8_t (*s)[32] = realloc(ps->sets, cap * sizeof *s);
        if (!s) return fail(ps, "out of memory"), 0;
        ps->sets = s, ps->cap_sets = cap;
    }
    memcpy(ps->sets[ps->n_sets], set, 32);
    return ps->n_sets++;
}

static bool push_byte_range(parser *ps, gvec *v, unsigned lo, unsigned hi) {
    uint8_t set[32] = { 0 };
    for (unsigned b = lo; b <= hi; b++) set[b >> 3] |= (uint8_t)(1u << (b & 7));
    return push(ps, v, GE_BYTES, set_id(ps, set));
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips spaces and # comments; newlines too when newline_ok. */
static void skip_space(parser *ps, bool newline_ok) {
    for (;;) {
        char c = *ps->p;
        if (c == ' ' || c == '\t') ps->p++;
        else if (c == '#') while (*ps->p && *ps->p != '\n' && *ps->p != '\r') ps->p++;
        else if (newline_ok && (c == '\n' || c == '\r')) { if (c == '\n') ps->line++; ps->p++; }
        else return;
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class: an escape or a UTF-8 sequence; -1 on error. */
static long parse_char(parser *ps) {
    const unsigned char *s = (const unsigned char *)ps->p;
    if (!*s) return fail(ps, "unexpected end of input"), -1;
    if (*s == '\\') {
        char e = (char)s[1];
        int nhex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (nhex) {
            long v = 0;
            for (int i = 0; i < nhex; i++) {
                int h = hexval((char)s[2 + i]);
                if (h < 0) return fail(ps, "bad \\%c escape", e), -1;
                v = v * 16 + h;
            }
            ps->p += 2 + nhex;
            if (v > 0x10FFFF) return fail(ps, "escape beyond U+10FFFF"), -1;
            return v;
        }
        if (!e) return fail(ps, "unexpected end of input"), -1;
        ps->p += 2;
        switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '0': return 0;
        default: return (unsigned char)e;   /* \\ \" \[ \] \- ... stand for themselves */
        }
    }
    int n = *s < 0x80 ? 1 : (*s >> 5) == 6 ? 2 : (*s >> 4) == 14 ? 3 : (*s >> 3) == 30 ? 4 : 0;
    if (!n) return fail(ps, "invalid UTF-8 in the grammar"), -1;
    long v = n == 1 ? *s : *s & (0x7f >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return fail(ps, "invalid UTF-8 in the grammar"), -1;
        v = v << 6 | (s[i] & 0x3f);
    }
    ps->p += n;
    return v;
}

static int utf8_encode(unsigned long c, unsigned char *o) {
    if (c < 0x80) { o[0] = (unsigned char)c; return 1; }
    if (c < 0x800) { o[0] = (unsigned char)(0xc0 | c >> 6); o[1] = (unsigned char)(0x80 | (c & 0x3f)); return 2; }
    if (c < 0x10000) {
        o[0] = (unsigned char)(0xe0 | c >> 12); o[1] = (unsigned char)(0x80 | (c >> 6 & 0x3f));
        o[2] = (unsigned char)(0x80 | (c & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | c >> 18); o[1] = (unsigned char)(0x80 | (c >> 12 & 0x3f));
    o[2] = (unsigned char)(0x80 | (c >> 6 & 0x3f)); o[3] = (unsigned char)(0x80 | (c & 0x3f));
    return 4;
}

/* A character class as UTF-8: single bytes gather in `one`; longer sequences become alternatives of `multi`. */
typedef struct { uint8_t one[32]; gvec multi; parser *ps; } utf8_class;

static void utf8_split(utf8_class *k, unsigned long lo, unsigned long hi) {
    if (lo > hi || k->ps->failed) return;
    static const unsigned long max_of_len[] = { 0x7F, 0x7FF, 0xFFFF };
    for (int i = 0; i < 3; i++)
        if (lo <= max_of_len[i] && hi > max_of_len[i]) {
            utf8_split(k, lo, max_of_len[i]);
            utf8_split(k, max_of_len[i] + 1, hi);
            return;
        }
    if (hi < 0x80) {
        for (unsigned long b = lo; b <= hi; b++) k->one[b >> 3] |= (uint8_t)(1u << (b & 7));
        return;
    }
    unsigned char a[4], b[4];
    int n = utf8_encode(lo, a);
    for (int i = 1; i < n; i++) {
        unsigned long m = (1ul << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) { utf8_split(k, lo, lo | m); utf8_split(k, (lo | m) + 1, hi); return; }
            if ((hi & m) != m) { utf8_split(k, lo, (hi & ~m) - 1); utf8_split(k, hi & ~m, hi); return; }
        }
    }
    utf8_encode(hi, b);
    if (k->multi.n) push(k->ps, &k->multi, GE_ALT, 0);
    for (int i = 0; i < n; i++) push_byte_range(k->ps, &k->multi, a[i], b[i]);
}

static void add_codepoints(utf8_class *k, unsigned long lo, unsigned long hi) {   /* surrogates left out */
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo < 0xD800) utf8_split(k, lo, hi < 0xD7FF ? hi : 0xD7FF);
    if (hi > 0xDFFF) utf8_split(k, lo > 0xE000 ? lo : 0xE000, hi);
}

typedef struct { unsigned long lo, hi; } cprange;

static int cmp_range(const void *a, const void *b) {
    const cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Appends a class of code points (ranges, maybe negated) to v: one byte-set element when every member is
 * ASCII, else a reference to a rule of byte sequences. Surrogates are never members. */
static bool push_class(parser *ps, gvec *v, cprange *r, int n, bool negate) {
    qsort(r, (size_t)n, sizeof *r, cmp_range);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi + 1) { if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi; }
        else r[m++] = r[i];
    }
    utf8_class k = { .ps = ps };
    if (negate) {
        unsigned long next = 0;
        for (int i = 0; i < m; i++) {
            if (r[i].lo > next) add_codepoints(&k, next, r[i].lo - 1);
            next = r[i].hi + 1;
        }
        add_codepoints(&k, next, 0x10FFFF);
    } else
        for (int i = 0; i < m; i++) add_codepoints(&k, r[i].lo, r[i].hi);
    bool any_one = false;
    for (int i = 0; i < 32; i++) any_one |= k.one[i] != 0;
    if (!k.multi.n) {
        if (!any_one) { free(k.multi.v); return fail(ps, "empty character class"); }
        return push(ps, v, GE_BYTES, set_id(ps, k.one));
    }
    int id = add_rule(ps, NULL, 0);
    if (id < 0) { free(k.multi.v); return false; }
    if (any_one) {
        gvec *rv = &ps->rules[id];
        push(ps, rv, GE_BYTES, set_id(ps, k.one));
        push(ps, rv, GE_ALT, 0);
    }
    for (uint32_t i = 0; i < k.multi.n; i++) push(ps, &ps->rules[id], (int)k.multi.v[i].type, k.multi.v[i].val);
    push(ps, &ps->rules[id], GE_END, 0);
    free(k.multi.v);
    return push(ps, v, GE_REF, (uint32_t)id);
}

static bool parse_alternates(parser *ps, gvec *out, bool nested);

/* x{min,max} (max < 0: unbounded) for the symbol out[start..n): min copies, then a tail of optional ones. */
static bool repeat(parser *ps, gvec *out, uint32_t start, long min, long max) {
    if (start == out->n) return fail(ps, "repetition with nothing to repeat");
    if (min > GR_MAX_REPEAT || max > GR_MAX_REPEAT) return fail(ps, "repetition count above %d", GR_MAX_REPEAT);
    if (max >= 0 && max < min) return fail(ps, "repetition {%ld,%ld}: max below min", min, max);
    uint32_t n = out->n - start;
    gel *sym = malloc(n * sizeof *sym);
    if (!sym) return fail(ps, "out of memory");
    memcpy(sym, out->v + start, n * sizeof *sym);
    out->n = start;
    for (long i = 0; i < min; i++) for (uint32_t j = 0; j < n; j++) push(ps, out, (int)sym[j].type, sym[j].val);
    int prev = -1;
    for (long i = 0; max < 0 ? i < 1 : i < max - min; i++) {   /* R ::= sym R | (empty), or nested optionals */
        int id = add_rule(ps, NULL, 0);
        if (id < 0) break;
        for (uint32_t j = 0; j < n; j++) push(ps, &ps->rules[id], (int)sym[j].type, sym[j].val);
        if (max < 0) push(ps, &ps->rules[id], GE_REF, (uint32_t)id);
        else if (prev >= 0) push(ps, &ps->rules[id], GE_REF, (uint32_t)prev);
        push(ps, &ps->rules[id], GE_ALT, 0);
        push(ps, &ps->rules[id], GE_END, 0);
        prev = id;
    }
    free(sym);
    if (prev >= 0) push(ps, out, GE_REF, (uint32_t)prev);
    return !ps->failed;
}

static long parse_int(parser *ps) {
    if (*ps->p < '0' || *ps->p > '9') return fail(ps, "expected a number in {m,n}"), -1;
    long v = 0;
    while (*ps->p >= '0' && *ps->p <= '9') {
        v = v * 10 + (*ps->p++ - '0');
        if (v > GR_MAX_REPEAT) return fail(ps, "repetition count above %d", GR_MAX_REPEAT), -1;
    }
    return v;
}

/* A [class] or '.', appended to out. Its own frame, so the ranges do not sit on every nested group's stack. */
static __attribute__((noinline)) bool parse_class(parser *ps, gvec *out, char c) {
    cprange r[1024];
    int n = 0;
    bool negate = false;
    if (c == '.') r[n++] = (cprange){ 0, 0x10FFFF };
    else {
        ps->p++;
        if (*ps->p == '^') negate = true, ps->p++;
        while (*ps->p != ']') {
            if (!*ps->p || *ps->p == '\n') return fail(ps, "unterminated character class");
            if (n == (int)(sizeof r / sizeof r[0])) return fail(ps, "character class too long");
            long lo = parse_char(ps), hi = lo;
            if (lo < 0) return false;
            if (ps->p[0] == '-' && ps->p[1] != ']' && ps->p[1]) {
                ps->p++;
                if ((hi = parse_char(ps)) < 0) return false;
                if (hi < lo) return fail(ps, "character range out of order");
            }
            r[n++] = (cprange){ (unsigned long)lo, (unsigned long)hi };
        }
    }
    ps->p++;
    return push_class(ps, out, r, n, negate);
}

static bool parse_sequence(parser *ps, gvec *out, bool nested) {
    uint32_t last = out->n;
    bool have_last = false;
    while (!ps->failed) {
        skip_space(ps, nested);
        char c = *ps->p;
        if (c == '"') {
            ps->p++;
            last = out->n, have_last = true;
            while (*ps->p != '"') {
                if (!*ps->p || *ps->p == '\n') return fail(ps, "unterminated string literal");
                long cp = parse_char(ps);
                if (cp < 0) return false;
                unsigned char b[4];
                int nb = utf8_encode((unsigned long)cp, b);
                for (int i = 0; i < nb; i++) push_byte_range(ps, out, b[i], b[i]);
            }
            ps->p++;
        } else if (c == '[' || c == '.') {
            last = out->n, have_last = true;
            if (!parse_class(ps, out, c)) return false;
        } else if (is_name_char(c)) {
            const char *s = ps->p;
            while (is_name_char(*ps->p)) ps->p++;
            int id = rule_named(ps, s, (size_t)(ps->p - s));
            if (id < 0) return false;
            last = out->n, have_last = true;
            push(ps, out, GE_REF, (uint32_t)id);
        } else if (c == '(') {
            if (++ps->depth > 256) return fail(ps, "groups nested more than 256 deep");
            ps->p++;
            int id = add_rule(ps, NULL, 0);
            if (id < 0) return false;
            gvec sub = { 0 };
            skip_space(ps, true);
            bool ok = parse_alternates(ps, &sub, true);
            if (ok && *ps->p != ')') ok = fail(ps, "expected ')'");
            if (ok) ps->p++;
            ps->depth--;
            push(ps, &sub, GE_END, 0);
            ps->rules[id] = sub;
            if (!ok) return false;
            last = out->n, have_last = true;
            push(ps, out, GE_REF, (uint32_t)id);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (!have_last) return fail(ps, "'%c' with nothing before it", c);
            long min = c == '+' ? 1 : 0, max = c == '?' ? 1 : -1;
            ps->p++;
            if (c == '{') {
                skip_space(ps, false);
                if ((min = parse_int(ps)) < 0) return false;
                skip_space(ps, false);
                max = min;
                if (*ps->p == ',') {
                    ps->p++;
                    skip_space(ps, false);
                    max = *ps->p == '}' ? -1 : parse_int(ps);
                    if (ps->failed) return false;
                    skip_space(ps, false);
                }
                if (*ps->p != '}') return fail(ps, "expected '}'");
                ps->p++;
            }
            if (!repeat(ps, out, last, min, max)) return false;
            have_last = false;
        } else break;
    }
    return !ps->failed;
}

/* A newline, then (after blank or comment lines) a '|': the rule goes on with another alternative. */
static bool continues(parser *ps) {
    const char *p = ps->p;
    int line = ps->line;
    for (;;) {
        if (*p == ' ' || *p == '\t' || *p == '\r') p++;
        else if (*p == '\n') p++, line++;
        else if (*p == '#') while (*p && *p != '\n') p++;
        else break;
    }
    if (*p != '|') return false;
    ps->p = p, ps->line = line;
    return true;
}

static bool parse_alternates(parser *ps, gvec *out, bool nested) {
    if (!parse_sequence(ps, out, nested)) return false;
    while (*ps->p == '|' || (!nested && continues(ps))) {
        ps->p++;
        push(ps, out, GE_ALT, 0);
        skip_space(ps, true);
        if (!parse_sequence(ps, out, nested)) return false;
    }
    return !ps->failed;
}

/* ---- checks and flattening ---- */

static bool nullable_fixpoint(const gram *g, int n_rules, bool *nullable) {
    memset(nullable, 0, (size_t)n_rules);
    for (bool changed = true; changed;) {
        changed = false;
        for (int r = 0; r < n_rules; r++) {
            if (nullable[r]) continue;
            for (uint32_t a = g->alt_at[r]; a < g->alt_at[r + 1] && !nullable[r]; a++) {
                const gel *e = g->el + g->alts[a];
                while (e->type == GE_REF && nullable[e->val]) e++;
                if (e->type == GE_ALT || e->type == GE_END) nullable[r] = changed = true;
            }
        }
    }
    return true;
}

/* Rule r can reach itself without consuming a byte: the matcher would loop. 0 ok, 1 found, state 1 = on path. */
static int left_recursive(const gram *g, int r, const bool *nullable, uint8_t *mark) {
    if (mark[r] == 1) return 1;
    if (mark[r] == 2) return 0;
    mark[r] = 1;
    for (uint32_t a = g->alt_at[r]; a < g->alt_at[r + 1]; a++)
        for (const gel *e = g->el + g->alts[a]; e->type == GE_REF; e++) {
            if (left_recursive(g, (int)e->val, nullable, mark)) return 1;
            if (!nullable[e->val]) break;
        }
    mark[r] = 2;
    return 0;
}

void gram_free(gram *g) {
    if (!g) return;
    free(g->el);
    free(g->alts);
    free(g->alt_at);
    free(g->sets);
    free(g);
}

gram *gram_parse(const char *text, hearth_err *err) {
    parser ps = { .p = text ? text : "", .line = 1, .err = err };
    gram *g = NULL;
    for (;;) {
        skip_space(&ps, true);
        if (!*ps.p || ps.failed) break;
        const char *name = ps.p;
        while (is_name_char(*ps.p)) ps.p++;
        size_t len = (size_t)(ps.p - name);
        if (!len) { fail(&ps, "expected a rule name, found '%c'", *ps.p); break; }
        skip_space(&ps, false);
        if (strncmp(ps.p, "::=", 3)) { fail(&ps, "expected '::=' after '%.*s'", (int)len, name); break; }
        ps.p += 3;
        int id = rule_named(&ps, name, len);
        if (id < 0) break;
        if (ps.defined[id]) { fail(&ps, "rule '%s' is defined twice", ps.names[id]); break; }
        ps.defined[id] = true;
        skip_space(&ps, true);
        gvec body = { 0 };
        parse_alternates(&ps, &body, false);
        push(&ps, &body, GE_END, 0);
        ps.rules[id] = body;
        if (*ps.p && *ps.p != '\n' && *ps.p != '\r' && !ps.failed) fail(&ps, "unexpected '%c'", *ps.p);
    }
    int root = -1;
    for (int i = 0; i < ps.n_rules && !ps.failed; i++) {
        if (!ps.defined[i]) ps.line = ps.line_of[i], fail(&ps, "rule '%s' is used but not defined", ps.names[i]);
        if (ps.names[i] && !strcmp(ps.names[i], "root")) root = i;
    }
    if (!ps.failed && root < 0) { herr(err, "grammar: no 'root' rule"); ps.failed = true; }
    if (!ps.failed && !(g = calloc(1, sizeof *g))) fail(&ps, "out of memory");
    if (!ps.failed) {   /* flatten */
        uint32_t n_el = 0, n_alts = 0;
        for (int i = 0; i < ps.n_rules; i++) {
            n_el += ps.rules[i].n;
            for (uint32_t j = 0; j < ps.rules[i].n; j++) n_alts += ps.rules[i].v[j].type <= GE_ALT;
        }
        g->el = malloc(n_el * sizeof *g->el);
        g->alts = malloc(n_alts * sizeof *g->alts);
        g->alt_at = malloc(((size_t)ps.n_rules + 1) * sizeof *g->alt_at);
        if (!g->el || !g->alts || !g->alt_at) fail(&ps, "out of memory");
        uint32_t *base = malloc(((size_t)ps.n_rules + 1) * sizeof *base);
        if (!base) fail(&ps, "out of memory");
        for (int i = 0, at = 0; i < ps.n_rules && !ps.failed; i++) base[i] = (uint32_t)at, at += (int)ps.rules[i].n;
        uint32_t k = 0;
        for (int i = 0; i < ps.n_rules && !ps.failed; i++) {
            memcpy(g->el + base[i], ps.rules[i].v, ps.rules[i].n * sizeof *g->el);
            g->alt_at[i] = k;
            g->alts[k++] = base[i];
            for (uint32_t j = 0; j + 1 < ps.rules[i].n; j++)
                if (ps.rules[i].v[j].type == GE_ALT) g->alts[k++] = base[i] + j + 1;
        }
        if (!ps.failed) g->alt_at[ps.n_rules] = k;
        free(base);
        g->root = (uint32_t)root;
        g->n_rules = (uint32_t)ps.n_rules, g->n_el = n_el;
        g->sets = ps.sets, ps.sets = NULL;
    }
    if (!ps.failed) {
        bool *nullable = malloc((size_t)ps.n_rules);
        uint8_t *mark = calloc((size_t)ps.n_rules, 1);
        if (!nullable || !mark) fail(&ps, "out of memory");
        else {
            nullable_fixpoint(g, ps.n_rules, nullable);
            for (int r = 0; r < ps.n_rules && !ps.failed; r++)
                if (left_recursive(g, r, nullable, mark)) {
                    if (ps.names[r]) herr(err, "grammar: rule '%s' can reach itself before matching anything "
                                               "(left recursion)", ps.names[r]);
                    else herr(err, "grammar: a group or repetition can repeat without matching anything "
                                   "(left recursion, e.g. (x?)*)");
                    ps.failed = true;
                }
        }
        free(nullable);
        free(mark);
    }
    for (int i = 0; i < ps.n_rules; i++) { free(ps.rules[i].v); free(ps.names[i]); }
    free(ps.rules);
    free(ps.names);
    free(ps.defined);
    free(ps.line_of);
    free(ps.sets);
    if (ps.failed) { gram_free(g); return NULL; }
    return g;
}

/* ---- parse states ---- */

/* A set of stacks, flat: [len, pos0 .. pos(len-1)]..., the top last; a hash table dedups them. can_end: the
 * grammar may end here (some stack emptied). */
typedef struct {
    uint32_t *d;
    size_t n, cap;
    uint32_t *ht;              /* offsets + 1 into d; 0 = empty slot */
    uint32_t ht_cap, n_stacks;
    bool can_end, oom;
} gstate;

static uint64_t stack_hash(const uint32_t *s, uint32_t len) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ len;
    for (uint32_t i = 0; i < len; i++) h = (h ^ s[i]) * 0x100000001b3ull, h ^= h >> 29;
    return h;
}

static void state_clear(gstate *st) {
    st->n = 0, st->n_stacks = 0, st->can_end = false, st->oom = false;
    if (st->ht) memset(st->ht, 0, st->ht_cap * sizeof *st->ht);
}

static void state_free(gstate *st) { free(st->d); free(st->ht); memset(st, 0, sizeof *st); }

static bool state_find(const gstate *st, const uint32_t *s, uint32_t len, uint64_t h, uint32_t *slot) {
    uint32_t mask = st->ht_cap - 1, i = (uint32_t)h & mask;
    for (; st->ht[i]; i = (i + 1) & mask) {
        const uint32_t *o = st->d + st->ht[i] - 1;
        if (o[0] == len && !memcmp(o + 1, s, len * sizeof *s)) return true;
    }
    *slot = i;
    return false;
}

static bool state_rehash(gstate *st, uint32_t cap) {
    uint32_t *ht = calloc(cap, sizeof *ht);
    if (!ht) return false;
    free(st->ht);
    st->ht = ht, st->ht_cap = cap;
    for (size_t o = 0; o < st->n; o += st->d[o] + 1) {
        uint32_t slot;
        state_find(st, st->d + o + 1, st->d[o], stack_hash(st->d + o + 1, st->d[o]), &slot);
        st->ht[slot] = (uint32_t)o + 1;
    }
    return true;
}

static void state_add(gstate *st, const uint32_t *s, uint32_t len) {
    if (st->oom || st->n_stacks >= GR_MAX_STACKS) return;
    if ((st->n_stacks + 1) * 2 > st->ht_cap && !state_rehash(st, st->ht_cap ? st->ht_cap * 2 : 16)) {
        st->oom = true;
        return;
    }
    uint32_t slot;
    if (state_find(st, s, len, stack_hash(s, len), &slot)) return;
    if (st->n + len + 1 > st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 256;
        while (cap < st->n + len + 1) cap *= 2;
        uint32_t *d = realloc(st->d, cap * sizeof *d);
        if (!d) { st->oom = true; return; }
        st->d = d, st->cap = cap;
    }
    if (st->n + 1 > UINT32_MAX - 1) { st->oom = true; return; }
    st->ht[slot] = (uint32_t)st->n + 1;
    st->d[st->n] = len;
    memcpy(st->d + st->n + 1, s, len * sizeof *s);
    st->n += len + 1;
    st->n_stacks++;
}

static bool state_copy(gstate *dst, const gstate *src) {
    state_clear(dst);
    for (size_t o = 0; o < src->n; o += src->d[o] + 1) state_add(dst, src->d + o + 1, src->d[o]);
    dst->can_end = src->can_end;
    return !dst->oom;
}

/* Brings stack s (len entries, top last) to positions where a byte must match, adding each result to out.
 * Every alternative but a rule's last is a recursive call; the last goes on in this frame. Paths that nest
 * deeper than GR_MAX_NEST calls (thousands of empty repetitions) are dropped: stricter, never looser. */
#define GR_MAX_NEST 1000
static void expand_at(const gram *g, const uint32_t *s, uint32_t len, gstate *out, int nest) {
    uint32_t buf[GR_MAX_DEPTH];
    memcpy(buf, s, len * sizeof *buf);
    for (;;) {
        if (!len) { out->can_end = true; return; }
        uint32_t p = buf[len - 1];
        gel e = g->el[p];
        if (e.type == GE_END || e.type == GE_ALT) { len--; continue; }
        if (e.type == GE_BYTES) { state_add(out, buf, len); return; }
        gel next = g->el[p + 1];
        if (next.type == GE_END || next.type == GE_ALT) len--;   /* a tail call returns nowhere */
        else buf[len - 1] = p + 1;
        if (len + 1 > GR_MAX_DEPTH) return;
        uint32_t first = g->alt_at[e.val], last = g->alt_at[e.val + 1] - 1;
        for (uint32_t a = first; a < last; a++) {
            if (nest >= GR_MAX_NEST) return;
            buf[len] = g->alts[a];
            expand_at(g, buf, len + 1, out, nest + 1);
        }
        buf[len++] = g->alts[last];
    }
}

static void expand(const gram *g, const uint32_t *s, uint32_t len, gstate *out) { expand_at(g, s, len, out, 0); }

static void state_start(const gram *g, gstate *out) {
    state_clear(out);
    for (uint32_t a = g->alt_at[g->root]; a < g->alt_at[g->root + 1]; a++) expand(g, &g->alts[a], 1, out);
}

static void state_advance(const gram *g, const gstate *in, unsigned char b, gstate *out) {
    state_clear(out);
    uint32_t buf[GR_MAX_DEPTH];
    for (size_t o = 0; o < in->n; o += in->d[o] + 1) {
        uint32_t len = in->d[o];
        const uint32_t *s = in->d + o + 1;
        const uint8_t *set = g->sets[g->el[s[len - 1]].val];
        if (!(set[b >> 3] >> (b & 7) & 1)) continue;
        memcpy(buf, s, len * sizeof *buf);
        buf[len - 1]++;
        expand(g, buf, len, out);
    }
}

bool gram_matches(const gram *g, const char *s, size_t n, bool complete) {
    gstate a = { 0 }, b = { 0 };
    state_start(g, &a);
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        state_advance(g, &a, (unsigned char)s[i], &b);
        gstate t = a; a = b; b = t;
        ok = a.n_stacks > 0 || (i + 1 == n && a.can_end);
    }
    ok = ok && (complete ? a.can_end : (a.n_stacks > 0 || a.can_end));
    state_free(&a);
    state_free(&b);
    return ok;
}

/* ---- the model's vocabulary, sorted by bytes (built once per model) ---- */

struct gram_vocab {
    int n;
    char *bytes;               /* every piece, concatenated */
    uint32_t *off, *len;       /* per token */
    int32_t *order;            /* tokens sorted by their bytes (pieces of length 0 left out) */
    uint32_t *lcp;             /* bytes order[i] shares with order[i - 1] */
    int n_order;
    uint8_t *eog;
    uint8_t one[32];           /* bytes that some token is exactly (one token per byte: the budget's unit) */
    int32_t *ph;               /* open addressing over the pieces' hashes: token id + 1, 0 = empty */
    uint32_t ph_cap;
};

static uint64_t piece_hash(const unsigned char *b, uint32_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint32_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Whether some (non-control) token's piece is exactly b[0..n). */
static bool is_piece(const struct gram_vocab *v, const unsigned char *b, uint32_t n) {
    for (uint32_t k = (uint32_t)piece_hash(b, n) & (v->ph_cap - 1); v->ph[k]; k = (k + 1) & (v->ph_cap - 1)) {
        int32_t t = v->ph[k] - 1;
        if (v->len[t] == n && !memcmp(v->bytes + v->off[t], b, n)) return true;
    }
    return false;
}

static const struct gram_vocab *sort_ctx;
static int cmp_piece(const void *a, const void *b) {
    const struct gram_vocab *v = sort_ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], lx < ly ? lx : ly);
    if (c) return c;
    return lx != ly ? (lx < ly ? -1 : 1) : (x < y ? -1 : x > y);
}

void gram_vocab_free(struct gram_vocab *v) {
    if (!v) return;
    free(v->bytes); free(v->off); free(v->len); free(v->order); free(v->lcp); free(v->eog); free(v->ph);
    free(v);
}

static pthread_mutex_t vocab_lock = PTHREAD_MUTEX_INITIALIZER;

static const struct gram_vocab *model_vocab(hearth_model *m, hearth_err *err) {
    pthread_mutex_lock(&vocab_lock);
    struct gram_vocab *v = m->gvocab;
    if (v) { pthread_mutex_unlock(&vocab_lock); return v; }
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    int n = info.n_vocab;
    v = calloc(1, sizeof *v);
    size_t cap = 1 << 20, used = 0;
    if (v) {
        v->n = n;
        v->off = malloc((size_t)n * sizeof *v->off);
        v->len = malloc((size_t)n * sizeof *v->len);
        v->order = malloc((size_t)n * sizeof *v->order);
        v->lcp = malloc((size_t)n * sizeof *v->lcp);
        v->eog = malloc((size_t)n);
        v->bytes = malloc(cap);
    }
    bool ok = v && v->off && v->len && v->order && v->lcp && v->eog && v->bytes;
    char piece[1024];
    for (int t = 0; ok && t < n; t++) {
        int k = hearth_token_piece(m, t, piece, sizeof piece);
        if (k > (int)sizeof piece) k = 0;   /* no real token is this long: never allowed */
        v->eog[t] = hearth_token_is_eog(m, t);
        if (used + (size_t)k > cap) {
            char *nb = realloc(v->bytes, cap * 2);
            if (!nb) { ok = false; break; }
            v->bytes = nb, cap *= 2;
        }
        memcpy(v->bytes + used, piece, (size_t)k);
        v->off[t] = (uint32_t)used, v->len[t] = (uint32_t)k;
        used += (size_t)k;
        if (k && !v->eog[t]) v->order[v->n_order++] = t;
        if (k == 1 && !v->eog[t]) v->one[(unsigned char)piece[0] >> 3] |= (uint8_t)(1u << (piece[0] & 7));
    }
    if (ok) {
        for (v->ph_cap = 1024; v->ph_cap < 2u * (uint32_t)n; v->ph_cap *= 2) {}
        ok = (v->ph = calloc(v->ph_cap, sizeof *v->ph)) != NULL;
        for (int i = 0; ok && i < v->n_order; i++) {
            int32_t t = v->order[i];
            uint32_t k = (uint32_t)piece_hash((const unsigned char *)v->bytes + v->off[t], v->len[t]) & (v->ph_cap - 1);
            while (v->ph[k]) k = (k + 1) & (v->ph_cap - 1);
            v->ph[k] = t + 1;
        }
    }
    if (ok) {
        sort_ctx = v;   /* under vocab_lock */
        qsort(v->order, (size_t)v->n_order, sizeof *v->order, cmp_piece);
        for (int i = 0; i < v->n_order; i++) {
            uint32_t l = 0;
            if (i) {
                int32_t x = v->order[i - 1], y = v->order[i];
                const char *a = v->bytes + v->off[x], *b = v->bytes + v->off[y];
                while (l < v->len[x] && l < v->len[y] && a[l] == b[l]) l++;
            }
            v->lcp[i] = l;
        }
        m->gvocab = v;
    } else {
        gram_vocab_free(v);
        v = NULL;
        herr(err, "out of memory");
    }
    pthread_mutex_unlock(&vocab_lock);
    return v;
}

/* ---- the matcher ---- */

/* Parse states are interned: each distinct state gets an id, and the state it becomes after each byte is
 * remembered (next[256], filled on first use), so walks and accepts are mostly table lookups. The table is
 * emptied between tokens when it grows past GR_MAX_STATES. */
#define GR_MAX_STATES 8192

typedef struct { gstate s; uint64_t hash; int32_t *next; uint32_t dist; } istate;

/* ---- the token budget ----
 * dist(state): tokens enough to reach a state where the grammar may end, along a completion the matcher allows
 * token by token: a literal's bytes spelled by the fewest tokens that lie within it, any other byte by a token
 * that is that byte alone. From per-element suffix costs, suf[p] = the tokens from element p to the end of its
 * alternative, by a fixpoint over the rules' minimums; a stack's cost is the sum of its positions' suffixes, and
 * each token of such a completion lowers it by exactly one, so a state within budget always has an allowed
 * token that keeps it within. Where the fixpoint is cut short the values are still costs of real completions
 * (upper bounds), so the rule stays sound. */
#define GR_INF (UINT32_MAX / 4)

static uint32_t sat_add(uint32_t a, uint32_t b) { return a >= GR_INF || b >= GR_INF || a + b >= GR_INF ? GR_INF : a + b; }

static uint32_t el_cost(const gram *g, const uint32_t *minlen, const uint8_t one[32], gel e) {
    if (e.type == GE_REF) return minlen[e.val];
    const uint8_t *set = g->sets[e.val];
    for (int i = 0; i < 32; i++) if (set[i] & one[i]) return 1;
    return GR_INF;
}

/* The byte element p stands for when its set holds exactly one byte (a literal's character), else -1. */
static int literal_byte(const gram *g, uint32_t p) {
    if (g->el[p].type != GE_BYTES) return -1;
    const uint8_t *set = g->sets[g->el[p].val];
    int b = -1;
    for (int i = 0; i < 256; i++)
        if (set[i >> 3] >> (i & 7) & 1) { if (b >= 0) return -1; b = i; }
    return b;
}

#define GR_MAX_PIECE 63
/* Per element: bit l-1 set when the literal bytes from p on (within one alternative) begin with a token of l
 * bytes; 0 for elements that are not literal bytes. */
static uint64_t *literal_tokens(const gram *g, const struct gram_vocab *v) {
    uint64_t *tl = calloc((size_t)g->n_el + 1, sizeof *tl);
    int16_t *lb = malloc(((size_t)g->n_el + 1) * sizeof *lb);
    if (!tl || !lb) { free(tl); free(lb); return NULL; }
    for (uint32_t p = 0; p < g->n_el; p++) lb[p] = (int16_t)literal_byte(g, p);
    lb[g->n_el] = -1;
    unsigned char run[GR_MAX_PIECE];
    for (uint32_t p = 0; p < g->n_el; p++) {
        uint32_t n = 0;
        for (; n < GR_MAX_PIECE && lb[p + n] >= 0; n++) run[n] = (unsigned char)lb[p + n];
        for (uint32_t l = 1; l <= n; l++) if (is_piece(v, run, l)) tl[p] |= 1ull << (l - 1);
    }
    free(lb);
    return tl;
}

/* suf[p] for the elements of the alternative starting at a, from its end back: a literal's bytes cost the fewest
 * tokens that spell them (each token within the literal), other byte sets one token, a reference its rule's
 * minimum. Returns the alternative's cost. */
static uint32_t alt_suffix(const gram *g, const uint32_t *minlen, const uint8_t one[32], const uint64_t *tl,
                           uint32_t a, uint32_t *suf) {
    uint32_t end = a;
    while (g->el[end].type > GE_ALT) end++;
    suf[end] = 0;
    for (uint32_t p = end; p-- > a;) {
        uint32_t best = sat_add(el_cost(g, minlen, one, g->el[p]), suf[p + 1]);
        for (uint64_t m = tl[p]; m; m &= m - 1) {
            uint32_t l = (uint32_t)__builtin_ctzll(m) + 1, c = sat_add(1, suf[p + l]);
            if (c < best) best = c;
        }
        suf[p] = best;
    }
    return suf[a];
}

/* suf (g->n_el + 1 entries) for vocabulary v. False when out of memory. */
static bool suffix_lengths(const gram *g, const struct gram_vocab *v, uint32_t *suf) {
    uint32_t *minlen = malloc((g->n_rules + 1) * sizeof *minlen);
    uint64_t *tl = literal_tokens(g, v);
    if (!minlen || !tl) { free(minlen); free(tl); return false; }
    for (uint32_t r = 0; r < g->n_rules; r++) minlen[r] = GR_INF;
    bool changed = true;
    uint64_t work = 0;
    for (int pass = 0; changed && work < 20000000u; pass++) {   /* alternate directions: chains settle fast */
        changed = false;
        for (uint32_t i = 0; i < g->n_rules; i++) {
            uint32_t r = pass & 1 ? g->n_rules - 1 - i : i, best = GR_INF;
            for (uint32_t a = g->alt_at[r]; a < g->alt_at[r + 1]; a++) {
                uint32_t c = alt_suffix(g, minlen, v->one, tl, g->alts[a], suf);
                if (c < best) best = c;
            }
            work += g->alt_at[r + 1] - g->alt_at[r] + 1;
            if (best < minlen[r]) minlen[r] = best, changed = true;
        }
    }
    for (uint32_t r = 0; r < g->n_rules; r++)   /* the final suffixes, all from the same minimums */
        for (uint32_t a = g->alt_at[r]; a < g->alt_at[r + 1]; a++) alt_suffix(g, minlen, v->one, tl, g->alts[a], suf);
    free(minlen);
    free(tl);
    return true;
}

struct hearth_grammar {
    gram *g;
    const struct gram_vocab *v;
    istate *st;
    int n_st, cap_st;
    int32_t *ht;               /* open addressing over state hashes: id + 1, 0 = empty */
    uint32_t ht_cap;
    int cur;                   /* the state after the text accepted so far */
    int32_t *lv;               /* the walk's state id after each prefix length */
    uint32_t n_lv;
    gstate tmp;
    uint64_t *masks[GR_CACHE];
    int mask_of[GR_CACHE];     /* the state id each cached mask belongs to, -1 none */
    uint64_t used[GR_CACHE], tick;
    int mask;                  /* cache slot of cur's mask, -1 not computed */
    uint32_t limit_of[GR_CACHE];  /* the budget limit each cached mask was made under, GR_INF none */
    uint32_t dmax[GR_CACHE];   /* for masks without a limit: the largest dist after an allowed token */
    uint32_t *suf;             /* per element, see suffix_lengths */
    long budget;               /* tokens left for the reply, < 0 unlimited */
    bool oom;
};

static uint32_t state_dist(const hearth_grammar *G, const gstate *st) {
    if (st->can_end) return 0;
    uint32_t best = GR_INF;
    for (size_t o = 0; o < st->n; o += st->d[o] + 1) {
        uint32_t sum = 0;
        for (uint32_t i = 0; i < st->d[o] && sum < best; i++) sum = sat_add(sum, G->suf[st->d[o + 1 + i]]);
        if (sum < best) best = sum;
    }
    return best;
}

static uint64_t state_hash(const gstate *st) {   /* independent of the stacks' order */
    uint64_t h = st->can_end ? 0x51ed27 : 0;
    for (size_t o = 0; o < st->n; o += st->d[o] + 1) h += stack_hash(st->d + o + 1, st->d[o]);
    return h;
}

static bool state_equal(const gstate *a, const gstate *b) {
    if (a->n_stacks != b->n_stacks || a->can_end != b->can_end || a->n != b->n) return false;
    for (size_t o = 0; o < a->n; o += a->d[o] + 1) {
        uint32_t slot;
        if (!state_find(b, a->d + o + 1, a->d[o], stack_hash(a->d + o + 1, a->d[o]), &slot)) return false;
    }
    return true;
}

static void states_clear(hearth_grammar *G) {
    for (int i = 0; i < G->n_st; i++) { state_free(&G->st[i].s); free(G->st[i].next); }
    G->n_st = 0;
    if (G->ht) memset(G->ht, 0, G->ht_cap * sizeof *G->ht);
    for (int i = 0; i < GR_CACHE; i++) G->mask_of[i] = -1;
    G->mask = -1;
}

/* The id of state s (copied in when new); -1 when out of memory. */
static int intern(hearth_grammar *G, const gstate *s) {
    if (s->oom) return -1;
    uint64_t h = state_hash(s);
    if ((uint32_t)(G->n_st + 1) * 2 > G->ht_cap) {
        uint32_t cap = G->ht_cap ? G->ht_cap * 2 : 1024;
        int32_t *ht = calloc(cap, sizeof *ht);
        if (!ht) return -1;
        for (int i = 0; i < G->n_st; i++) {
            uint32_t k = (uint32_t)G->st[i].hash & (cap - 1);
            while (ht[k]) k = (k + 1) & (cap - 1);
            ht[k] = i + 1;
        }
        free(G->ht);
        G->ht = ht, G->ht_cap = cap;
    }
    uint32_t k = (uint32_t)h & (G->ht_cap - 1);
    for (; G->ht[k]; k = (k + 1) & (G->ht_cap - 1)) {
        istate *x = &G->st[G->ht[k] - 1];
        if (x->hash == h && state_equal(&x->s, s)) return G->ht[k] - 1;
    }
    if (G->n_st == G->cap_st) {
        int cap = G->cap_st ? G->cap_st * 2 : 256;
        istate *st = realloc(G->st, (size_t)cap * sizeof *st);
        if (!st) return -1;
        G->st = st, G->cap_st = cap;
    }
    istate *x = &G->st[G->n_st];
    memset(x, 0, sizeof *x);
    if (!state_copy(&x->s, s)) { state_free(&x->s); return -1; }
    x->hash = h;
    x->dist = state_dist(G, s);
    G->ht[k] = ++G->n_st;
    return G->n_st - 1;
}

/* The state after byte b from state id; -1 out of memory. */
static int step(hearth_grammar *G, int id, unsigned char b) {
    istate *x = &G->st[id];
    if (!x->next) {
        if (!(x->next = malloc(256 * sizeof *x->next))) return -1;
        for (int i = 0; i < 256; i++) x->next[i] = -2;
    }
    if (x->next[b] != -2) return x->next[b];
    state_advance(G->g, &G->st[id].s, b, &G->tmp);
    int n = intern(G, &G->tmp);
    G->st[id].next[b] = n;   /* G->st may have moved */
    return n;
}

static bool live(const hearth_grammar *G, int id) { return G->st[id].s.n_stacks > 0; }

/* The walk of the sorted vocabulary described at the top of the file, keeping only tokens after which the
 * grammar can end within `limit` more tokens (GR_INF: any); *dmax gets the largest such dist. False when out of
 * memory. */
static bool compute_mask(hearth_grammar *G, uint64_t *mask, uint32_t limit, uint32_t *dmax) {
    const struct gram_vocab *v = G->v;
    memset(mask, 0, (size_t)(v->n + 63) / 64 * 8);
    if (G->st[G->cur].s.can_end)
        for (int t = 0; t < v->n; t++) if (v->eog[t]) mask[t >> 6] |= 1ull << (t & 63);
    *dmax = 0;
    if (!live(G, G->cur)) return true;
    uint32_t valid = 0, dead_at = UINT32_MAX;
    bool dead_alive = false;   /* a token of exactly dead_at bytes (a duplicate piece) is allowed */
    if (!G->n_lv && !(G->lv = malloc(256 * sizeof *G->lv))) return false;
    if (!G->n_lv) G->n_lv = 256;
    G->lv[0] = G->cur;
    for (int i = 0; i < v->n_order; i++) {
        int32_t t = v->order[i];
        uint32_t len = v->len[t], common = v->lcp[i];
        if (dead_at != UINT32_MAX && common >= dead_at) {
            if (len == dead_at && dead_alive) mask[t >> 6] |= 1ull << (t & 63);
            continue;
        }
        dead_at = UINT32_MAX;
        uint32_t d = common < valid ? common : valid;
        const unsigned char *b = (const unsigned char *)v->bytes + v->off[t];
        if (len + 1 > G->n_lv) {
            int32_t *lv = realloc(G->lv, (len + 1) * sizeof *lv);
            if (!lv) return false;
            G->lv = lv, G->n_lv = len + 1;
        }
        bool alive = true;
        while (d < len) {
            int nx = step(G, G->lv[d], b[d]);
            if (nx < 0) return false;
            G->lv[++d] = nx;
            if (!live(G, nx)) {   /* nothing may follow this prefix */
                dead_at = d;
                alive = dead_alive = d == len && G->st[nx].s.can_end;
                break;
            }
        }
        valid = d;
        if (alive && d == len) {
            uint32_t dist = G->st[G->lv[d]].dist;
            if (dist > limit) continue;
            if (dist > *dmax) *dmax = dist;
            mask[t >> 6] |= 1ull << (t & 63);
        }
    }
    return true;
}

/* The cache slot of cur's mask under limit, computed when missing; -1 when out of memory. */
static int mask_slot(hearth_grammar *G, uint32_t limit) {
    int victim = 0;
    for (int i = 0; i < GR_CACHE; i++) {
        if (G->mask_of[i] == G->cur && G->limit_of[i] == limit) { G->used[i] = ++G->tick; return i; }
        if (G->used[i] < G->used[victim]) victim = i;
    }
    if (!G->masks[victim] && !(G->masks[victim] = malloc((size_t)(G->v->n + 63) / 64 * 8))) return -1;
    G->mask_of[victim] = -1;
    if (!compute_mask(G, G->masks[victim], limit, &G->dmax[victim])) return -1;
    G->mask_of[victim] = G->cur;
    G->limit_of[victim] = limit;
    G->used[victim] = ++G->tick;
    return victim;
}

/* The plain mask, unless some token it allows would leave more to finish than the budget has: then the mask
 * under the budget's limit (one token of the budget is the one being chosen). */
const uint64_t *grammar_mask(hearth_grammar *G) {
    if (G->oom) return NULL;
    if (G->mask >= 0) return G->masks[G->mask];
    int i = mask_slot(G, GR_INF);
    if (i >= 0 && G->budget >= 0 && G->dmax[i] + 1 > (uint64_t)G->budget)
        i = mask_slot(G, G->budget > 0 ? (uint32_t)(G->budget - 1) : 0);
    if (i < 0) { G->oom = true; return NULL; }
    if (G->budget == 0) {   /* nothing more may be generated: only the end */
        uint64_t *m = G->masks[i];
        for (int t = 0; t < G->v->n; t++) if (!G->v->eog[t]) m[t >> 6] &= ~(1ull << (t & 63));
        G->mask_of[i] = -1;   /* not reusable as the cache entry it was */
    }
    G->mask = i;
    return G->masks[i];
}

void hearth_grammar_set_budget(hearth_grammar *G, int n_tokens) {
    if (!G || (long)(n_tokens < 0 ? -1 : n_tokens) == G->budget) return;
    G->budget = n_tokens < 0 ? -1 : n_tokens;
    G->mask = -1;
}

int hearth_grammar_min_tokens(const hearth_grammar *G) {
    if (!G || G->oom) return -1;
    uint32_t d = G->st[G->cur].dist;
    return d >= GR_INF ? -1 : (int)d;
}

hearth_grammar *hearth_grammar_new(hearth_model *m, const char *gbnf, hearth_err *err) {
    if (!m || !hearth_model_has_tokenizer(m)) return herr(err, "a grammar needs a model with a tokenizer"), NULL;
    gram *g = gram_parse(gbnf, err);
    if (!g) return NULL;
    const struct gram_vocab *v = model_vocab(m, err);
    hearth_grammar *G = v ? calloc(1, sizeof *G) : NULL;
    if (!G) {
        if (v) herr(err, "out of memory");
        gram_free(g);
        return NULL;
    }
    G->g = g, G->v = v;
    G->budget = -1;
    if (!(G->suf = malloc(((size_t)g->n_el + 1) * sizeof *G->suf)) || !suffix_lengths(g, v, G->suf)) {
        hearth_grammar_free(G);
        herr(err, "out of memory");
        return NULL;
    }
    hearth_grammar_reset(G);
    if (G->oom) { hearth_grammar_free(G); herr(err, "out of memory"); return NULL; }
    return G;
}

void hearth_grammar_reset(hearth_grammar *G) {
    if (!G) return;
    states_clear(G);
    state_start(G->g, &G->tmp);
    G->cur = intern(G, &G->tmp);
    G->oom = G->cur < 0;
}

void hearth_grammar_free(hearth_grammar *G) {
    if (!G) return;
    states_clear(G);
    free(G->st);
    free(G->ht);
    free(G->lv);
    free(G->suf);
    state_free(&G->tmp);
    for (int i = 0; i < GR_CACHE; i++) free(G->masks[i]);
    gram_free(G->g);
    free(G);
}

bool hearth_grammar_allows(hearth_grammar *G, hearth_token t) {
    if (!G || t < 0 || t >= G->v->n) return false;
    const uint64_t *m = grammar_mask(G);
    return m && (m[t >> 6] >> (t & 63) & 1);
}

void hearth_grammar_accept(hearth_grammar *G, hearth_token t) {
    if (!G || G->oom || t < 0 || t >= G->v->n) return;
    G->mask = -1;
    if (G->n_st > GR_MAX_STATES) {   /* keep only the current state */
        gstate keep = { 0 };
        bool ok = state_copy(&keep, &G->st[G->cur].s);
        states_clear(G);
        G->cur = ok ? intern(G, &keep) : -1;
        state_free(&keep);
        if (G->cur < 0) { G->oom = true; return; }
    }
    if (G->v->eog[t]) {   /* the end: nothing may follow */
        state_clear(&G->tmp);
        G->cur = intern(G, &G->tmp);
        G->oom = G->cur < 0;
        return;
    }
    const unsigned char *b = (const unsigned char *)G->v->bytes + G->v->off[t];
    for (uint32_t i = 0; i < G->v->len[t] && !G->oom; i++) {
        G->cur = step(G, G->cur, b[i]);
        G->oom = G->cur < 0;
    }
}

bool hearth_grammar_done(const hearth_grammar *G) {
    return G && !G->oom && G->st[G->cur].s.can_end && !G->st[G->cur].s.n_stacks;
}
bool hearth_grammar_can_end(const hearth_grammar *G) { return G && !G->oom && G->st[G->cur].s.can_end; }
bool hearth_grammar_failed(const hearth_grammar *G) { return G && G->oom; }

/* Follows t[0..n) from the current state without accepting them, as the mask would allow them one by one (a piece
 * of bytes each leading to a live state, the last one possibly to a complete sentence; an end-of-generation token
 * where the text may end, and nothing after it). */
int grammar_allowed_prefix(hearth_grammar *G, const hearth_token *t, int n) {
    if (!G) return n;
    if (G->oom) return 0;
    int id = G->cur, k = 0;
    for (; k < n; k++) {
        if (t[k] < 0 || t[k] >= G->v->n) break;
        if (G->v->eog[t[k]]) { k += G->st[id].s.can_end; break; }
        uint32_t len = G->v->len[t[k]];
        if (!len || !live(G, id)) break;
        const unsigned char *b = (const unsigned char *)G->v->bytes + G->v->off[t[k]];
        bool ok = true;
        for (uint32_t i = 0; i < len && ok; i++) {
            int nx = step(G, id, b[i]);
            ok = nx >= 0 && (live(G, nx) || (i + 1 == len && G->st[nx].s.can_end));
            id = nx;
        }
        if (!ok) break;
    }
    return k;
}
