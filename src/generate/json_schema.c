/* json_schema.c — JSON Schema to GBNF: a grammar whose every sentence validates against the schema.
 *
 * The rule is never to loosen: a keyword the grammar cannot enforce is refused with its name, and where exact
 * enforcement is out of reach the grammar is made stricter instead (objects carry only their declared
 * properties; uniqueItems keeps arrays to one item; number bounds are met by whole-number integer parts;
 * dates use days 01-28; strings never hold characters that would need escapes when a pattern applies).
 * Drafts 04 to 2020-12 are read alike: id/$id, definitions/$defs, items as a tuple or prefixItems, boolean or
 * numeric exclusive bounds; $ref is a local JSON pointer ("#", "#/$defs/x", ...), recursion included.
 * Keywords are applied per JSON type, so a schema without "type" keeps every type its keywords allow. */
#include "common.h"
#include "generate/grammar.h"

#include <errno.h>
#include <cjson/cJSON.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct { char *name, *body; } grule;

typedef struct {
    cJSON *root;
    grule *rules;
    int n_rules, cap_rules;
    struct { const cJSON *node; char *name; } *refs;   /* $ref targets already named (recursion) */
    int n_refs, cap_refs;
    hearth_err *err;
    bool failed;
    int depth;
    char path[256];                                      /* where in the schema, for messages */
    const char *root_name;                               /* the top rule's name ("root") */
    ht_str warn;                                         /* what was read as an annotation only, "; "-joined */
} conv;

static char *fail(conv *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *fail(conv *c, const char *fmt, ...) {
    if (c->failed) return NULL;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    herr(c->err, "JSON Schema at #%s: %s", c->path, msg);
    c->failed = true;
    return NULL;
}

static char *xstrdup(conv *c, const char *s) {
    char *d = strdup(s);
    if (!d) fail(c, "out of memory");
    return d;
}

/* Adds rule `hint` (made unique, or reused when an equal body exists) and returns its name. Takes body. */
static char *add_rule(conv *c, const char *hint, char *body) {
    if (!body) return NULL;
    for (int i = 0; i < c->n_rules; i++)
        if (c->rules[i].body && !strcmp(c->rules[i].body, body)) { free(body); return xstrdup(c, c->rules[i].name); }
    char name[96];
    int k = 0;
    for (const char *s = hint; *s && k < 60; s++) {
        char ch = *s;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        name[k++] = ok ? ch : '-';
    }
    if (!k) name[k++] = 'r';
    name[k] = 0;
    char base[96];
    memcpy(base, name, (size_t)k + 1);
    for (int n = 1;; n++) {
        bool taken = !strcmp(name, c->root_name) && strcmp(hint, c->root_name);
        for (int i = 0; i < c->n_rules && !taken; i++) taken = !strcmp(c->rules[i].name, name);
        if (!taken) break;
        snprintf(name, sizeof name, "%.60s-%d", base, n);
    }
    if (c->n_rules == c->cap_rules) {
        int cap = c->cap_rules ? c->cap_rules * 2 : 32;
        grule *r = realloc(c->rules, (size_t)cap * sizeof *r);
        if (!r || cap > 100000) { free(body); return fail(c, "the grammar grows too large"); }
        c->rules = r, c->cap_rules = cap;
    }
    c->rules[c->n_rules].name = strdup(name);
    c->rules[c->n_rules].body = body;
    if (!c->rules[c->n_rules].name) { free(body); return fail(c, "out of memory"); }
    c->n_rules++;
    return xstrdup(c, name);
}

/* Reserves a rule name for a body written later (a $ref that may recurse). */
static char *reserve_rule(conv *c, const char *hint) {
    char *name = add_rule(c, hint, xstrdup(c, "\x01"));
    if (name) for (int i = 0; i < c->n_rules; i++) if (!strcmp(c->rules[i].name, name)) {
        free(c->rules[i].body);
        c->rules[i].body = NULL;
    }
    return name;
}

static void set_rule(conv *c, const char *name, char *body) {
    for (int i = 0; i < c->n_rules; i++)
        if (!strcmp(c->rules[i].name, name)) { free(c->rules[i].body); c->rules[i].body = body; return; }
    free(body);
}

/* The primitives, llama.cpp's json.gbnf shapes with one optional space between tokens. */
static const struct { const char *name, *body; } PRIMS[] = {
    { "space", "\" \"?" },
    { "boolean", "(\"true\" | \"false\") space" },
    { "null", "\"null\" space" },
    { "integral-part", "[0] | [1-9] [0-9]{0,15}" },
    { "decimal-part", "[0-9]{1,16}" },
    { "number", "(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)? space" },
    { "integer", "(\"-\"? integral-part) space" },
    { "char", "[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})" },
    { "string", "\"\\\"\" char* \"\\\"\" space" },
    { "value", "object | array | string | number | boolean | null" },
    { "object", "\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space" },
    { "array", "\"[\" space ( value (\",\" space value)* )? \"]\" space" },
};
static const char *const PRIM_DEPS[][4] = {   /* what each primitive refers to */
    { 0 }, { "space" }, { "space" }, { 0 }, { 0 }, { "integral-part", "decimal-part", "space" },
    { "integral-part", "space" }, { 0 }, { "char", "space" }, { "object", "array", "string", "number" },
    { "string", "space", "value" }, { "value", "space" },
};

static char *prim(conv *c, const char *name) {
    for (size_t i = 0; i < sizeof PRIMS / sizeof PRIMS[0]; i++) {
        if (strcmp(PRIMS[i].name, name)) continue;
        bool have = false;
        for (int r = 0; r < c->n_rules && !have; r++) have = !strcmp(c->rules[r].name, name);
        if (!have) {
            /* registered before its dependencies, under its own name */
            if (c->n_rules == c->cap_rules) {
                int cap = c->cap_rules ? c->cap_rules * 2 : 32;
                grule *r = realloc(c->rules, (size_t)cap * sizeof *r);
                if (!r) return fail(c, "out of memory");
                c->rules = r, c->cap_rules = cap;
            }
            char *n = strdup(name), *body = strdup(PRIMS[i].body);
            if (!n || !body) { free(n); free(body); return fail(c, "out of memory"); }
            c->rules[c->n_rules].name = n;
            c->rules[c->n_rules].body = body;
            c->n_rules++;
            for (int d = 0; d < 4 && PRIM_DEPS[i][d]; d++) free(prim(c, PRIM_DEPS[i][d]));
            if (!strcmp(name, "value")) { free(prim(c, "boolean")); free(prim(c, "null")); }
        }
        return xstrdup(c, name);
    }
    return fail(c, "internal: no primitive '%s'", name);
}

/* A GBNF literal for the bytes s[0..n). */
static void sb_literal(ht_str *b, const char *s, size_t n) {
    ht_str_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') { char e[3] = { '\\', (char)ch, 0 }; ht_str_puts(b, e); }
        else if (ch == '\n') ht_str_puts(b, "\\n");
        else if (ch == '\r') ht_str_puts(b, "\\r");
        else if (ch == '\t') ht_str_puts(b, "\\t");
        else if (ch < 0x20 || ch == 0x7f) ht_str_printf(b, "\\x%02X", ch);
        else ht_str_add(b, (const char *)&ch, 1);
    }
    ht_str_puts(b, "\"");
}

/* The grammar for exactly the JSON text of v (compact), followed by space. */
static char *literal_value(conv *c, const cJSON *v) {
    char *txt = cJSON_PrintUnformatted(v);
    if (!txt) return fail(c, "out of memory");
    ht_str b = { 0 };
    sb_literal(&b, txt, strlen(txt));
    free(txt);
    free(prim(c, "space"));
    ht_str_puts(&b, " space");
    if (b.oom) { free(b.p); return fail(c, "out of memory"); }
    return b.p;
}

/* ---- schema navigation ---- */

static const cJSON *resolve_ref(conv *c, const char *ref) {
    if (ref[0] != '#') return fail(c, "$ref '%s': only local references (#...) are supported", ref), NULL;
    const cJSON *node = c->root;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char key[256];
        size_t k = 0;
        while (*p && *p != '/' && k + 1 < sizeof key) {
            if (p[0] == '~' && p[1] == '0') key[k++] = '~', p += 2;
            else if (p[0] == '~' && p[1] == '1') key[k++] = '/', p += 2;
            else if (p[0] == '%' && p[1] && p[2]) {
                char hx[3] = { p[1], p[2], 0 };
                key[k++] = (char)strtol(hx, NULL, 16), p += 3;
            } else key[k++] = *p++;
        }
        key[k] = 0;
        if (cJSON_IsArray(node)) {
            char *end;
            long i = strtol(key, &end, 10);
            node = *end ? NULL : cJSON_GetArrayItem(node, (int)i);
        } else node = cJSON_GetObjectItemCaseSensitive(node, key);
        if (!node) return fail(c, "$ref '%s' points nowhere", ref), NULL;
    }
    if (*p) return fail(c, "$ref '%s': anchors are not supported, only JSON pointers", ref), NULL;
    return node;
}

enum { T_NULL = 1, T_BOOL = 2, T_OBJECT = 4, T_ARRAY = 8, T_NUMBER = 16, T_INTEGER = 32, T_STRING = 64, T_ALL = 127 };
/* Set by oneOf on a number alternative beside an integer one: only numbers with a non-zero fraction are written
 * ("x-": the other keywords' checks read it as an annotation). */
#define NONINT "x-hearth-non-integer"

static int type_bit(const char *t) {
    static const char *const N[] = { "null", "boolean", "object", "array", "number", "integer", "string" };
    for (int i = 0; i < 7; i++) if (!strcmp(t, N[i])) return 1 << i;
    return 0;
}

/* A count keyword (minItems, maxProperties, ...): absent = dflt; a number 0..1e6 rounded down; else -2. */
static long count_of(const cJSON *v, long dflt) {
    if (!v) return dflt;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 1e6)) return -2;
    return (long)v->valuedouble;
}

static bool has(const cJSON *s, const char *k) { return cJSON_GetObjectItemCaseSensitive(s, k) != NULL; }
static const cJSON *get(const cJSON *s, const char *k) { return cJSON_GetObjectItemCaseSensitive(s, k); }

/* Keywords that only describe (or hold definitions) and constrain nothing. */
static bool annotation(const char *k) {
    static const char *const A[] = { "title", "description", "default", "examples", "example", "$schema", "$id", "id",
                                     "$comment", "deprecated", "readOnly", "writeOnly", "definitions", "$defs",
                                     "contentMediaType", "contentEncoding", "contentSchema", "discriminator",
                                     "xml", "externalDocs", "$anchor", "$dynamicAnchor", "$vocabulary", "strict",
                                     "name", "markdownDescription", "errorMessage", "deprecationMessage" };
    if (!strncmp(k, "x-", 2)) return true;
    for (size_t i = 0; i < sizeof A / sizeof A[0]; i++) if (!strcmp(k, A[i])) return true;
    return false;
}

/* The types a schema's own keywords allow (no "type": what its keywords imply, or all). */
static int types_of(conv *c, const cJSON *s) {
    const cJSON *t = get(s, "type");
    int m = 0;
    if (cJSON_IsString(t)) {
        if (!(m = type_bit(t->valuestring))) return fail(c, "unknown type '%s'", t->valuestring), 0;
    } else if (cJSON_IsArray(t)) {
        const cJSON *x;
        cJSON_ArrayForEach(x, t) {
            int b = cJSON_IsString(x) ? type_bit(x->valuestring) : 0;
            if (!b) return fail(c, "bad entry in \"type\""), 0;
            m |= b;
        }
    } else if (t) return fail(c, "\"type\" must be a string or an array"), 0;
    else {
        static const char *const OBJ[] = { "properties", "required", "additionalProperties", "minProperties",
                                           "maxProperties", "patternProperties", "propertyNames",
                                           "unevaluatedProperties", "dependentRequired", "dependencies",
                                           "dependentSchemas" };
        static const char *const ARR[] = { "items", "prefixItems", "minItems", "maxItems", "uniqueItems",
                                           "additionalItems", "contains", "unevaluatedItems" };
        static const char *const STR[] = { "minLength", "maxLength", "pattern", "format" };
        static const char *const NUM[] = { "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf" };
        for (size_t i = 0; i < sizeof OBJ / sizeof *OBJ; i++) if (has(s, OBJ[i])) m |= T_OBJECT;
        for (size_t i = 0; i < sizeof ARR / sizeof *ARR; i++) if (has(s, ARR[i])) m |= T_ARRAY;
        for (size_t i = 0; i < sizeof STR / sizeof *STR; i++) if (has(s, STR[i])) m |= T_STRING;
        for (size_t i = 0; i < sizeof NUM / sizeof *NUM; i++) if (has(s, NUM[i])) m |= T_NUMBER;
        if (!m) m = T_ALL;
    }
    if (cJSON_IsTrue(get(s, "nullable"))) m |= T_NULL;
    if (m & T_NUMBER) m &= ~T_INTEGER;   /* every integer is a number */
    return m;
}

static char *visit(conv *c, const cJSON *s, const char *hint);
#define EXCEPT_KEY "\x01" "except"   /* internal: the strings a plain string schema must not be (string_rule) */
static char *string_except(conv *c, const cJSON *words, const char *hint);
static int listed_value_ok(conv *c, const cJSON *s, const cJSON *v);

/* ---- strings ---- */

/* A regular expression (the pattern keyword's common subset) as GBNF over the JSON text of the string. Unbounded
 * repetitions (*, +, {m,}) repeat at most RX_MAX_REPEAT more times: a model that knows nothing of the pattern
 * cannot then write digits forever. Stricter, never looser. */
#define RX_MAX_REPEAT 64
typedef struct { const char *p; conv *c; const char *hint; } rx;

static char *rx_alt(rx *r);

/* One class member set as GBNF class body text; chars that JSON escapes are left out (stricter). */
static void rx_class_char(ht_str *b, unsigned ch) {
    if (ch == '"' || ch == '\\' || ch < 0x20 || ch == 0x7f) return;
    if (ch == ']' || ch == '[' || ch == '-' || ch == '^') { char e[3] = { '\\', (char)ch, 0 }; ht_str_puts(b, e); return; }
    char t[2] = { (char)ch, 0 };
    ht_str_puts(b, t);
}

static void rx_class_char_raw(ht_str *b, unsigned ch) {   /* a range's end: escaped if special */
    if (ch == ']' || ch == '[' || ch == '-' || ch == '^') { char e[3] = { '\\', (char)ch, 0 }; ht_str_puts(b, e); return; }
    char t[2] = { (char)ch, 0 };
    ht_str_puts(b, t);
}

static bool rx_escape_class(ht_str *b, char e, bool *negated_shorthand) {
    *negated_shorthand = false;
    switch (e) {
    case 'd': ht_str_puts(b, "0-9"); return true;
    case 'w': ht_str_puts(b, "a-zA-Z0-9_"); return true;
    case 's': ht_str_puts(b, " \\t\\n\\r"); return true;
    case 'D': case 'W': case 'S': *negated_shorthand = true; return true;
    default: return false;
    }
}

static char *rx_atom(rx *r) {
    conv *c = r->c;
    ht_str b = { 0 };
    if (r->p[0] == '\\' && (unsigned char)r->p[1] >= 0x80) r->p++;   /* an escaped non-ASCII character is itself */
    char ch = *r->p;
    if (ch == '(') {
        r->p++;
        if (r->p[0] == '?') {
            if (r->p[1] == ':') r->p += 2;
            else return fail(c, "pattern: lookarounds and named or flagged groups are not supported");
        }
        char *in = rx_alt(r);
        if (!in) return NULL;
        if (*r->p != ')') { free(in); return fail(c, "pattern: unbalanced parenthesis"); }
        r->p++;
        ht_str_printf(&b, "(%s)", in);
        free(in);
    } else if (ch == '[') {   /* members gathered as a set of ASCII characters, then written as ranges */
        r->p++;
        bool neg = *r->p == '^', in[128] = { false }, first = true;
        if (neg) r->p++;
        while (*r->p && (*r->p != ']' || first)) {
            first = false;
            unsigned lo = (unsigned char)*r->p++;
            if (lo == '\\') {
                char e = *r->p;
                if (!e) return fail(c, "pattern: ends with a backslash");
                r->p++;
                if (e == 'd' || e == 'w' || e == 's') {
                    for (unsigned x = 0; x < 128; x++)
                        in[x] |= e == 'd' ? (x >= '0' && x <= '9')
                               : e == 's' ? (x == ' ' || x == '\t' || x == '\n' || x == '\r' || x == '\f' || x == '\v')
                               : ((x >= '0' && x <= '9') || (x >= 'a' && x <= 'z') || (x >= 'A' && x <= 'Z') || x == '_');
                    continue;
                }
                if (e == 'D' || e == 'W' || e == 'S') return fail(c, "pattern: \\D \\W \\S inside a class are not supported");
                lo = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : (unsigned char)e;
            }
            unsigned hi = lo;
            if (r->p[0] == '-' && r->p[1] && r->p[1] != ']') {
                hi = (unsigned char)r->p[1];
                r->p += 2;
                if (hi == '\\') {
                    if (!*r->p) return fail(c, "pattern: ends with a backslash");
                    hi = (unsigned char)*r->p++;
                }
            }
            if (lo >= 0x80 || hi >= 0x80) return fail(c, "pattern: non-ASCII characters in classes are not supported");
            if (hi < lo) return fail(c, "pattern: bad class range");
            for (unsigned x = lo; x <= hi; x++) in[x] = true;
        }
        if (*r->p != ']') return fail(c, "pattern: unterminated class");
        r->p++;
        /* JSON-escaped characters are never written (stricter): out of a class, and excluded from a negated one */
        bool any = false;
        ht_str_puts(&b, neg ? "[^\"\\\\\\x00-\\x1F\\x7F" : "[");
        for (unsigned x = 0x20; x < 0x7f;) {
            bool skip = x == '"' || x == '\\';
            if (!in[x] || skip) { x++; continue; }
            unsigned y = x;
            while (y + 1 < 0x7f && in[y + 1] && y + 1 != '"' && y + 1 != '\\') y++;
            rx_class_char(&b, x);
            if (y > x) { ht_str_puts(&b, "-"); rx_class_char_raw(&b, y); }
            any = true;
            x = y + 1;
        }
        ht_str_puts(&b, "]");
        if (!neg && !any) { free(b.p); return fail(c, "pattern: a class with only characters JSON escapes"); }
    } else if (ch == '.') {
        r->p++;
        ht_str_puts(&b, "[^\"\\\\\\x00-\\x1F\\x7F]");
    } else if (ch == '\\') {
        char e = r->p[1];
        if (!e) return fail(c, "pattern: ends with a backslash");
        r->p += 2;
        bool negs;
        ht_str k = { 0 };
        if (rx_escape_class(&k, e, &negs)) {
            if (negs) ht_str_printf(&b, "[^\"\\\\\\x00-\\x1F\\x7F%s]", e == 'D' ? "0-9" : e == 'W' ? "a-zA-Z0-9_" : " ");
            else ht_str_printf(&b, "[%s]", k.p);
            free(k.p);
        } else if (e == 'b' || e == 'B' || (e >= '1' && e <= '9') || e == 'p' || e == 'P' || e == 'k') {
            return fail(c, "pattern: \\%c is not supported", e);
        } else {
            char lit = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
            if (lit == '"' || lit == '\\') ht_str_puts(&b, lit == '"' ? "\"\\\\\\\"\"" : "\"\\\\\\\\\"");
            else if ((unsigned char)lit < 0x20) { return fail(c, "pattern: control characters are not supported"); }
            else sb_literal(&b, &lit, 1);
        }
    } else if (ch == '"') {
        r->p++;
        ht_str_puts(&b, "\"\\\\\\\"\"");
    } else {
        /* one UTF-8 character, literally */
        int n = (unsigned char)ch < 0x80 ? 1 : ((unsigned char)ch >> 5) == 6 ? 2 : ((unsigned char)ch >> 4) == 14 ? 3 : 4;
        for (int i = 1; i < n; i++) if (!r->p[i]) n = i;
        sb_literal(&b, r->p, (size_t)n);
        r->p += n;
    }
    if (b.oom) { free(b.p); return fail(c, "out of memory"); }
    return b.p;
}

static char *rx_seq(rx *r) {
    ht_str b = { 0 };
    ht_str_puts(&b, "");
    while (*r->p && *r->p != '|' && *r->p != ')') {
        if (*r->p == '^' || *r->p == '$') return free(b.p), fail(r->c, "pattern: '^' or '$' inside the pattern");
        char *a = rx_atom(r);
        if (!a) { free(b.p); return NULL; }
        char q = *r->p;
        if (q == '*' || q == '+') {   /* unbounded: at most RX_MAX_REPEAT (stricter, and a reply always ends) */
            r->p++;
            ht_str_printf(&b, " (%s){%d,%d}", a, q == '+', RX_MAX_REPEAT);
        } else if (q == '?') {
            r->p++;
            ht_str_printf(&b, " (%s)?", a);
        } else if (q == '{') {
            char *end;
            bool digit = r->p[1] >= '0' && r->p[1] <= '9';
            long lo = strtol(r->p + 1, &end, 10), hi = lo;
            bool unbounded = false;
            if (*end == ',') {
                if (end[1] == '}') unbounded = true, hi = -1, end++;
                else if (end[1] >= '0' && end[1] <= '9') hi = strtol(end + 1, &end, 10);
                else digit = false;
            }
            if (!digit || *end != '}' || lo > 1000 || hi > 1000 || (!unbounded && hi < lo)) {
                free(a); free(b.p);
                return fail(r->c, "pattern: bad {m,n}");
            }
            r->p = end + 1;
            if (hi < 0) ht_str_printf(&b, " (%s){%ld,%ld}", a, lo, lo + RX_MAX_REPEAT);
            else ht_str_printf(&b, " (%s){%ld,%ld}", a, lo, hi);
        } else ht_str_printf(&b, " %s", a);
        if (*r->p == '?' && (q == '*' || q == '+' || q == '?' || q == '}')) r->p++;   /* lazy: same language */
        free(a);
    }
    if (b.oom) { free(b.p); return fail(r->c, "out of memory"); }
    return b.p;
}

static char *rx_alt(rx *r) {
    ht_str b = { 0 };
    for (;;) {
        char *s = rx_seq(r);
        if (!s) { free(b.p); return NULL; }
        ht_str_puts(&b, s[0] ? s : " \"\"");
        free(s);
        if (*r->p != '|') break;
        r->p++;
        ht_str_puts(&b, " |");
    }
    if (b.oom) { free(b.p); return fail(r->c, "out of memory"); }
    return b.p;
}

static char *pattern_string(conv *c, const char *pat, const char *hint) {
    size_t n = strlen(pat);
    bool head = n && pat[0] == '^', tail = n > 1 && pat[n - 1] == '$' && pat[n - 2] != '\\';
    char *body = strndup(pat + head, n - head - tail);
    if (!body) return fail(c, "out of memory");
    rx r = { body, c, hint };
    char *g = rx_alt(&r);
    if (g && *r.p) { free(g); g = fail(c, "pattern: unbalanced parenthesis"); }
    free(body);
    if (!g) return NULL;
    free(prim(c, "char"));
    free(prim(c, "space"));
    ht_str b = { 0 };
    ht_str_printf(&b, "\"\\\"\" %s(%s) %s\"\\\"\" space", head ? "" : "char* ", g, tail ? "" : "char* ");
    free(g);
    if (b.oom) { free(b.p); return fail(c, "out of memory"); }
    return add_rule(c, hint, b.p);
}

/* Grammars for the string formats, each stricter than its definition where that is simpler, with the least and
 * most characters they write (for minLength/maxLength beside a format). */
#define URI_BODY "(\"https\" | \"http\") \"://\" [a-z0-9]{1,32} (\".\" [a-z0-9]{1,32}){0,4} (\"/\" [a-zA-Z0-9_-]{1,32}){0,8}"
#define DATE_BODY "[0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8])"
#define TIME_BODY "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"
#define EMAIL_BODY "[a-z0-9]{1,32} (\".\" [a-z0-9]{1,32})? \"@\" [a-z0-9]{1,32} (\".\" [a-z0-9]{1,32})? \".\" [a-z]{2,6}"
#define HOST_BODY "[a-z0-9]{1,32} (\".\" [a-z0-9]{1,32}){0,4}"
/* per: formats whose parts are written {1,32} can be narrowed for a maxLength, each such part taking per more
 * characters of the most for each more character allowed in the parts. */
static const struct { const char *name, *body; int min, max, per; } FORMATS[] = {
    { "date", DATE_BODY, 10, 10, 0 },
    { "time", TIME_BODY, 9, 21, 0 },
    { "iso-time", TIME_BODY, 9, 21, 0 },
    { "date-time", DATE_BODY " \"T\" " TIME_BODY, 20, 32, 0 },
    { "iso-date-time", DATE_BODY " \"T\" " TIME_BODY, 20, 32, 0 },
    { "uuid", "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}", 36, 36, 0 },
    { "email", EMAIL_BODY, 6, 138, 4 },
    { "idn-email", EMAIL_BODY, 6, 138, 4 },
    { "hostname", HOST_BODY, 1, 164, 5 },
    { "idn-hostname", HOST_BODY, 1, 164, 5 },
    { "ipv4", "ipv4-octet \".\" ipv4-octet \".\" ipv4-octet \".\" ipv4-octet", 7, 15, 0 },
    { "ipv6", "[0-9a-f]{1,4} (\":\" [0-9a-f]{1,4}){7}", 15, 39, 0 },
    { "uri", URI_BODY, 8, 436, 13 },
    { "url", URI_BODY, 8, 436, 13 },
    { "iri", URI_BODY, 8, 436, 13 },
    { "uri-reference", URI_BODY, 8, 436, 13 },
    { "iri-reference", URI_BODY, 8, 436, 13 },
    { "duration", "\"P\" ([1-9] [0-9]{0,3} \"D\")? \"T\" [1-9] [0-9]{0,3} \"H\"", 4, 12, 0 },
    { "json-pointer", "(\"/\" ([^\"\\\\~/\\x00-\\x1F\\x7F] | \"~\" [01]){0,32}){0,8}", 0, 520, 0 },
    { "byte", "([A-Za-z0-9+/]{4}){0,64}", 0, 256, 0 },
};
/* Formats with a syntax hearth does not write: refused rather than read as annotations (validators check them). */
static const char *const HARD_FORMATS[] = { "regex", "uri-template", "relative-json-pointer", "json-pointer-uri-fragment" };

/* The fewest and most characters a pattern's grammar (as pattern_string writes it, unbounded repetitions capped)
 * can hold, and for a plain sequence of quantified single characters, where its one variable part is. Only the
 * syntax rx_atom reads; *ok false on anything else. */
typedef struct { long min, max; } rx_len;
static rx_len rx_len_alt(const char **p, bool *ok);

static rx_len rx_len_atom(const char **p, bool *ok, bool *single) {
    const char *q = *p;
    *single = true;
    if (q[0] == '\\' && (unsigned char)q[1] >= 0x80) q++;
    if (*q == '(') {
        q++;
        if (q[0] == '?' && q[1] == ':') q += 2;
        rx_len in = rx_len_alt(&q, ok);
        if (*q != ')') *ok = false; else q++;
        *single = false;
        *p = q;
        return in;
    }
    if (*q == '[') {
        q++;
        if (*q == '^') q++;
        if (*q == ']') q++;
        while (*q && *q != ']') q += q[0] == '\\' && q[1] ? 2 : 1;
        if (!*q) *ok = false; else q++;
    } else if (*q == '\\') {
        if (!q[1]) *ok = false;
        q += q[1] ? 2 : 1;
    } else {
        int n = (unsigned char)*q < 0x80 ? 1 : ((unsigned char)*q >> 5) == 6 ? 2 : ((unsigned char)*q >> 4) == 14 ? 3 : 4;
        for (int i = 0; i < n && *q; i++) q++;
    }
    *p = q;
    return (rx_len){ 1, 1 };
}

/* One quantifier after an atom: its counts (the grammar's: unbounded ones capped), and where it is in the text. */
static bool rx_quant(const char **p, long *lo, long *hi) {
    const char *q = *p;
    *lo = *hi = 1;
    if (*q == '*' || *q == '+') *lo = *q == '+', *hi = RX_MAX_REPEAT, q++;
    else if (*q == '?') *lo = 0, q++;
    else if (*q == '{') {
        char *end;
        *lo = *hi = strtol(q + 1, &end, 10);
        if (*end == ',') {
            if (end[1] == '}') *hi = *lo + RX_MAX_REPEAT, end++;
            else *hi = strtol(end + 1, &end, 10);
        }
        if (*end != '}') return false;
        q = end + 1;
    } else return true;
    if (*q == '?') q++;
    *p = q;
    return true;
}

static rx_len rx_len_seq(const char **p, bool *ok) {
    rx_len t = { 0, 0 };
    while (**p && **p != '|' && **p != ')' && *ok) {
        bool single;
        rx_len a = rx_len_atom(p, ok, &single);
        long lo, hi;
        if (!rx_quant(p, &lo, &hi)) *ok = false;
        t.min += a.min * lo, t.max += a.max * hi;
        if (t.max > 1000000) *ok = false;
    }
    return t;
}

static rx_len rx_len_alt(const char **p, bool *ok) {
    rx_len t = rx_len_seq(p, ok);
    while (**p == '|' && *ok) {
        (*p)++;
        rx_len u = rx_len_seq(p, ok);
        if (u.min < t.min) t.min = u.min;
        if (u.max > t.max) t.max = u.max;
    }
    return t;
}

/* The pattern text at *p (an alternation, up to ')' or its end) copied to o with every variable repetition's most
 * count capped at k (never below its least): the same syntax rx_len reads; *ok false on anything else. */
static void rx_cap_alt(const char **p, ht_str *o, long k, bool *ok);
static void rx_cap_seq(const char **p, ht_str *o, long k, bool *ok) {
    while (**p && **p != '|' && **p != ')' && *ok) {
        const char *st = *p;
        if (**p == '(') {
            (*p)++;
            ht_str_puts(o, "(");
            if ((*p)[0] == '?' && (*p)[1] == ':') *p += 2, ht_str_puts(o, "?:");
            rx_cap_alt(p, o, k, ok);
            if (**p != ')') { *ok = false; return; }
            (*p)++;
            ht_str_puts(o, ")");
        } else {
            bool single;
            rx_len_atom(p, ok, &single);
            ht_str_add(o, st, (size_t)(*p - st));
        }
        const char *q0 = *p;
        long lo, hi;
        if (!rx_quant(p, &lo, &hi)) { *ok = false; return; }
        if (*p == q0) continue;
        if (lo == hi) ht_str_add(o, q0, (size_t)(*p - q0));
        else ht_str_printf(o, "{%ld,%ld}", lo, hi < k ? hi : lo > k ? lo : k);
    }
}
static void rx_cap_alt(const char **p, ht_str *o, long k, bool *ok) {
    rx_cap_seq(p, o, k, ok);
    while (**p == '|' && *ok) {
        (*p)++;
        ht_str_puts(o, "|");
        rx_cap_seq(p, o, k, ok);
    }
}

/* body (an anchored pattern's inside) with its repetitions capped at the largest k that keeps every string its
 * grammar writes within hi characters, and at least lo; NULL when none does. malloc'd. */
static char *pattern_capped(const char *body, long lo, long hi) {
    for (long k = RX_MAX_REPEAT; k >= 1; k--) {
        ht_str o = { 0 };
        const char *p = body;
        bool ok = true;
        ht_str_puts(&o, "^");
        rx_cap_alt(&p, &o, k, &ok);
        ht_str_puts(&o, "$");
        if (!ok || *p || o.oom) { free(o.p); return NULL; }
        const char *q = o.p + 1;
        char *in = strndup(q, strlen(q) - 1);
        const char *r = in;
        rx_len t = in ? rx_len_alt(&r, &ok) : (rx_len){ 0, 0 };
        free(in);
        if (!in || !ok || t.min < lo) { free(o.p); return NULL; }   /* caps never raise the least length */
        if (t.max <= hi) return o.p;
        free(o.p);
    }
    return NULL;
}

/* A pattern within minLength lo .. maxLength hi (hi < 0: none), as a pattern whose grammar keeps to them: itself
 * when every string its grammar writes fits, or, for an anchored sequence of quantified single characters with
 * one variable part, that part's count narrowed, or every variable repetition capped alike (stricter) when that
 * brings the longest within hi. NULL when none (the caller refuses). malloc'd. */
static char *pattern_within(const char *pat, long lo, long hi) {
    size_t n = strlen(pat);
    bool head = n && pat[0] == '^', tail = n > 1 && pat[n - 1] == '$' && pat[n - 2] != '\\';
    if (!head || !tail) return NULL;   /* unanchored: any text around it, of any length */
    char *body = strndup(pat + 1, n - 2);
    if (!body) return NULL;
    const char *p = body;
    bool ok = true;
    rx_len all = rx_len_alt(&p, &ok);
    if (!ok || *p) { free(body); return NULL; }
    if (all.min >= lo && (hi < 0 || all.max <= hi)) { free(body); return strdup(pat); }
    /* one variable single-character item among fixed ones */
    long fixed = 0, vlo = 0, vhi = 0;
    const char *vstart = NULL, *vq = NULL, *vend = NULL;
    for (p = body; *p && ok;) {
        bool single;
        const char *st = p;
        rx_len a = rx_len_atom(&p, &ok, &single);
        const char *q0 = p;
        long qlo, qhi;
        if (!rx_quant(&p, &qlo, &qhi) || *st == '|' || *st == ')') ok = false;
        if (!ok) break;
        if (a.min == a.max && qlo == qhi) fixed += a.min * qlo;
        else if (single && !vstart) vstart = st, vq = q0, vend = p, vlo = qlo, vhi = qhi;
        else ok = false;
    }
    long nlo = lo - fixed > vlo ? lo - fixed : vlo, nhi = hi >= 0 && hi - fixed < vhi ? hi - fixed : vhi;
    if (!ok || !vstart || nlo > nhi || nhi < 0) {
        char *capped = hi >= 0 ? pattern_capped(body, lo, hi) : NULL;
        free(body);
        return capped;
    }
    ht_str o = { 0 };
    ht_str_printf(&o, "^%.*s{%ld,%ld}%s$", (int)(vq - body), body, nlo, nhi, vend);
    free(body);
    return o.oom ? (free(o.p), NULL) : o.p;
}

static char *string_rule(conv *c, const cJSON *s, const char *hint) {
    const cJSON *except = get(s, EXCEPT_KEY);   /* what a "not" of strings left (plain strings only) */
    if (except) return string_except(c, except, hint);
    const cJSON *fmt = get(s, "format"), *pat = get(s, "pattern"), *mn = get(s, "minLength"), *mx = get(s, "maxLength");
    if (pat && !cJSON_IsString(pat)) return fail(c, "\"pattern\" must be a string");
    if ((mn && !cJSON_IsNumber(mn)) || (mx && !cJSON_IsNumber(mx)))
        return fail(c, "\"minLength\"/\"maxLength\" must be numbers");
    double lo = mn ? mn->valuedouble : 0, hi = mx ? mx->valuedouble : -1;
    if (lo < 0 || hi > 1e9 || (mx && hi < 0)) return fail(c, "\"minLength\"/\"maxLength\" must not be negative");
    if (mx && hi < lo) return fail(c, "maxLength %g is below minLength %g: no string fits", hi, lo);
    long ilo = (long)ceil(lo), ihi = mx ? (long)floor(hi) : -1;
    int fi = -1;
    if (fmt && cJSON_IsString(fmt)) {
        const char *f = fmt->valuestring;
        for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++) if (!strcmp(FORMATS[i].name, f)) fi = (int)i;
        for (size_t i = 0; i < sizeof HARD_FORMATS / sizeof HARD_FORMATS[0]; i++)
            if (!strcmp(HARD_FORMATS[i], f)) return fail(c, "string format '%s' is not supported", f);
        if (fi < 0)   /* an unknown format is an annotation (the specification's default): a plain string, said so */
            ht_str_printf(&c->warn, "%sformat '%.60s' at #%s is not checked (an annotation): any string",
                          c->warn.n ? "; " : "", f, c->path);
    }
    if (pat && fi >= 0) return fail(c, "\"pattern\" together with \"format\" is not supported");
    if (pat) {
        char *within = mn || mx ? pattern_within(pat->valuestring, ilo, ihi) : NULL;
        if ((mn || mx) && !within)
            return fail(c, "\"pattern\" with minLength/maxLength that cut into it is not supported (an anchored "
                           "pattern with one variable repetition of a single character is, or one whose repetitions "
                           "can be capped to fit maxLength)");
        char *r = pattern_string(c, within ? within : pat->valuestring, hint);
        free(within);
        return r;
    }
    if (fi >= 0) {
        const char *f = FORMATS[fi].name;
        int k = 32;   /* the parts' longest */
        if (ihi >= 0 && FORMATS[fi].max > ihi && FORMATS[fi].per)
            k = (int)((ihi - (FORMATS[fi].max - 32 * FORMATS[fi].per)) / FORMATS[fi].per);
        int most = FORMATS[fi].max - (32 - k) * FORMATS[fi].per;
        if (k < 1 || FORMATS[fi].min < ilo || (ihi >= 0 && most > ihi))
            return fail(c, "format '%s' writes %d to %d characters; minLength/maxLength that cut into that are not "
                           "supported", f, FORMATS[fi].min, FORMATS[fi].max);
        if (!strcmp(f, "ipv4")) free(add_rule(c, "ipv4-octet", xstrdup(c, "\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]")));
        free(prim(c, "space"));
        ht_str b = { 0 };
        ht_str_puts(&b, "\"\\\"\" ");
        for (const char *q = FORMATS[fi].body; *q;)   /* {1,32} as {1,k} */
            if (!strncmp(q, "{1,32}", 6)) ht_str_printf(&b, "{1,%d}", k), q += 6;
            else ht_str_add(&b, q++, 1);
        ht_str_puts(&b, " \"\\\"\" space");
        char tmp[64];
        snprintf(tmp, sizeof tmp, "%.40s-string%s", f, k < 32 ? "-short" : "");
        return b.oom ? fail(c, "out of memory") : add_rule(c, tmp, b.p);
    }
    if (!mn && !mx) return prim(c, "string");
    if (ilo > 10000 || ihi > 10000) return fail(c, "minLength/maxLength above 10000 are not supported");
    free(prim(c, "char"));
    free(prim(c, "space"));
    ht_str b = { 0 };
    if (mx) ht_str_printf(&b, "\"\\\"\" char{%ld,%ld} \"\\\"\" space", ilo, ihi);
    else ht_str_printf(&b, "\"\\\"\" char{%ld,} \"\\\"\" space", ilo);
    return b.oom ? fail(c, "out of memory") : add_rule(c, hint, b.p);
}

/* ---- numbers ---- */

/* Decimal digit strings of equal length n: the numbers from a to b (digits, not values), as GBNF. */
static void digits_range(ht_str *b, const char *a, const char *z, int n) {
    if (n == 0) return;
    if (a[0] == z[0]) {
        ht_str_printf(b, " \"%c\"", a[0]);
        digits_range(b, a + 1, z + 1, n - 1);
        return;
    }
    bool a_zero = true, z_nine = true;
    for (int i = 1; i < n; i++) a_zero &= a[i] == '0', z_nine &= z[i] == '9';
    char lo = a[0], hi = z[0];
    ht_str_puts(b, " (");
    bool first = true;
    if (!a_zero) {   /* a[0] followed by a[1..] .. 99.. */
        char nines[24];
        memset(nines, '9', (size_t)n - 1);
        ht_str_printf(b, "\"%c\"", a[0]);
        digits_range(b, a + 1, nines, n - 1);
        lo++, first = false;
    }
    char mid_hi = z_nine ? hi : (char)(hi - 1);
    if (lo <= mid_hi) {
        ht_str_printf(b, "%s[%c-%c]", first ? "" : " | ", lo, mid_hi);
        if (n > 1) ht_str_printf(b, " [0-9]{%d}", n - 1);
        first = false;
    }
    if (!z_nine) {
        char zeros[24];
        memset(zeros, '0', (size_t)n - 1);
        ht_str_printf(b, "%s\"%c\"", first ? "" : " | ", z[0]);
        digits_range(b, zeros, z + 1, n - 1);
    }
    ht_str_puts(b, ")");
}

/* Non-negative integers lo..hi (hi < 0: unbounded) without leading zeros, as alternatives. */
static void uint_range(ht_str *b, long long lo, long long hi) {
    bool first = true;
    char a[24], z[24];
    int na = snprintf(a, sizeof a, "%lld", lo);
    for (int n = na; n <= 18; n++) {
        long long top = 1;
        for (int i = 0; i < n; i++) top *= 10;
        top -= 1;
        long long from = n == na ? lo : top / 10 + 1;
        if (hi >= 0 && from > hi) break;
        if (hi < 0 && n > na) {   /* every longer number */
            ht_str_printf(b, "%s[1-9] [0-9]{%d,15}", first ? "" : " | ", n - 1);
            return;
        }
        long long to = hi >= 0 && hi < top ? hi : top;
        snprintf(a, sizeof a, "%0*lld", n, from);
        snprintf(z, sizeof z, "%0*lld", n, to);
        ht_str_puts(b, first ? "(" : " | (");
        digits_range(b, a, z, n);
        ht_str_puts(b, ")");
        first = false;
        if (hi >= 0 && to == hi) return;
    }
}

/* Integers lo..hi (either end may be absent). */
static char *int_rule(conv *c, bool has_lo, long long lo, bool has_hi, long long hi, const char *hint) {
    if (!has_lo && !has_hi) return prim(c, "integer");
    if (has_lo && has_hi && hi < lo) return fail(c, "no integer satisfies the bounds");
    if ((has_lo && llabs(lo) > 999999999999999LL) || (has_hi && llabs(hi) > 999999999999999LL))
        return fail(c, "integer bounds beyond 15 digits are not supported");
    free(prim(c, "space"));
    ht_str b = { 0 };
    ht_str_puts(&b, "(");
    bool any = false;
    if (!has_lo || lo < 0) {   /* negatives: "-" then 1..-lo (or any) down to max(-1, hi) */
        long long nlo = has_hi && hi < 0 ? -hi : 1, nhi = has_lo ? -lo : -1;
        ht_str_puts(&b, "\"-\" (");
        uint_range(&b, nlo, nhi);
        ht_str_puts(&b, ")");
        any = true;
    }
    if (!has_hi || hi >= 0) {
        long long plo = has_lo && lo > 0 ? lo : 0, phi = has_hi ? hi : -1;
        ht_str_puts(&b, any ? " | " : "");
        uint_range(&b, plo, phi);
    }
    ht_str_puts(&b, ") space");
    return b.oom ? fail(c, "out of memory") : add_rule(c, hint, b.p);
}

/* Reads minimum/maximum with either draft's exclusive forms. */
static bool bounds(conv *c, const cJSON *s, bool *has_lo, double *lo, bool *lo_ex, bool *has_hi, double *hi, bool *hi_ex) {
    const cJSON *mn = get(s, "minimum"), *mx = get(s, "maximum"), *emn = get(s, "exclusiveMinimum"),
                *emx = get(s, "exclusiveMaximum");
    *has_lo = *has_hi = *lo_ex = *hi_ex = false;
    if (cJSON_IsNumber(mn)) *has_lo = true, *lo = mn->valuedouble;
    if (cJSON_IsNumber(mx)) *has_hi = true, *hi = mx->valuedouble;
    if (cJSON_IsTrue(emn)) *lo_ex = true;
    if (cJSON_IsTrue(emx)) *hi_ex = true;
    if (cJSON_IsNumber(emn) && (!*has_lo || emn->valuedouble >= *lo)) *has_lo = *lo_ex = true, *lo = emn->valuedouble;
    if (cJSON_IsNumber(emx) && (!*has_hi || emx->valuedouble <= *hi)) *has_hi = *hi_ex = true, *hi = emx->valuedouble;
    if ((mn && !cJSON_IsNumber(mn)) || (mx && !cJSON_IsNumber(mx))) return fail(c, "bad minimum/maximum"), false;
    return true;
}

/* Decimals without exponent (after `prefix`) whose whole part is in [a, top - 1] followed by `fraction` (as a
 * GBNF item: "." and digits, optional or not), or top itself when top_exact; top < 0: no upper bound. Appended as
 * alternatives; *sep becomes " | " once one is written. */
static void magnitudes(ht_str *b, long long a, long long top, bool top_exact, const char **sep, const char *prefix,
                       const char *fraction) {
    if (top < 0) {
        ht_str_printf(b, "%s%s(", *sep, prefix);
        uint_range(b, a, -1);
        ht_str_printf(b, ") %s", fraction);
        *sep = " | ";
        return;
    }
    if (top - 1 >= a) {
        ht_str_printf(b, "%s%s(", *sep, prefix);
        uint_range(b, a, top - 1);
        ht_str_printf(b, ") %s", fraction);
        *sep = " | ";
    }
    if (top_exact && top >= a) {
        ht_str_printf(b, "%s%s\"%lld\"", *sep, prefix, top);
        *sep = " | ";
    }
}

/* Integers that are multiples of k within the bounds: listed when few, else by the remainders of the digits
 * read so far (one rule per remainder) when the bounds only fix the sign. */
static char *multiple_rule(conv *c, long long k, bool has_lo, long long lo, bool has_hi, long long hi, const char *hint) {
    free(prim(c, "space"));
    ht_str b = { 0 };
    if (has_lo && has_hi) {
        long long first = lo >= 0 ? (lo + k - 1) / k : -((-lo) / k), last = hi >= 0 ? hi / k : -((-hi + k - 1) / k);
        if (first > last) return fail(c, "no multiple of %lld lies within the bounds", k);
        if (last - first < 1000) {
            ht_str_puts(&b, "(");
            for (long long i = first; i <= last; i++) ht_str_printf(&b, "%s\"%lld\"", i > first ? " | " : "", i * k);
            ht_str_puts(&b, ") space");
            return b.oom ? fail(c, "out of memory") : add_rule(c, hint, b.p);
        }
    }
    if (k > 1000) return fail(c, "\"multipleOf\" %lld above 1000 with wide bounds is not supported", k);
    /* a bound is read only where it cuts no multiple off: within (-k, k) (then it leaves out a sign) */
    bool neg = !has_lo, zero = (!has_lo || lo <= 0) && (!has_hi || hi >= 0), pos = !has_hi;
    if ((has_lo && (lo <= -k || lo > k)) || (has_hi && (hi >= k || hi < -k)))
        return fail(c, "\"multipleOf\" with bounds inside the numbers is not supported (few multiples, or sign-only bounds are)");
    char name[64];
    for (long long r = 0; r < k; r++) {   /* rule mult-k-r: digits that bring a remainder r to 0 */
        ht_str x = { 0 };
        for (long long t = 0; t < k; t++) {
            char cls[16];
            int n = 0;
            for (int d = 0; d <= 9; d++) if ((r * 10 + d) % k == t) cls[n++] = (char)('0' + d);
            if (!n) continue;
            cls[n] = 0;
            ht_str_printf(&x, "%s[%s] mult-%lld-%lld", x.n ? " | " : "", cls, k, t);
        }
        if (!r && x.p) { char *w = x.p; x = (ht_str){ 0 }; ht_str_printf(&x, "(%s)?", w); free(w); }
        snprintf(name, sizeof name, "mult-%lld-%lld", k, r);
        bool have = false;   /* under exactly this name (rules with equal bodies are not merged: others name it) */
        for (int i = 0; i < c->n_rules && !have; i++) have = !strcmp(c->rules[i].name, name);
        if (!have && !x.oom && c->n_rules == c->cap_rules) {
            int cap = c->cap_rules ? c->cap_rules * 2 : 32;
            grule *nr = cap > 100000 ? NULL : realloc(c->rules, (size_t)cap * sizeof *nr);
            if (nr) c->rules = nr, c->cap_rules = cap;
        }
        if (have) free(x.p);
        else if (x.oom || c->n_rules == c->cap_rules || !(c->rules[c->n_rules].name = strdup(name))) {
            free(x.p);
            fail(c, "out of memory");
            break;
        } else c->rules[c->n_rules++].body = x.p;
    }
    ht_str nz = { 0 };   /* a non-zero magnitude: its first digit, then the rest */
    for (int d = 1; d <= 9; d++) ht_str_printf(&nz, "%s\"%d\" mult-%lld-%lld", d > 1 ? " | " : "", d, k, d % k);
    ht_str_puts(&b, "(");
    const char *sep = "";
    if (zero) ht_str_puts(&b, "\"0\""), sep = " | ";
    if (pos) ht_str_printf(&b, "%s%s", sep, nz.p), sep = " | ";
    if (neg) ht_str_printf(&b, "%s\"-\" (%s)", sep, nz.p);
    ht_str_puts(&b, ") space");
    free(nz.p);
    if (c->failed) { free(b.p); return NULL; }
    return b.oom ? fail(c, "out of memory") : add_rule(c, hint, b.p);
}

/* A rule under exactly `name` (rules that refer to each other by name), unless one is there already. Takes body. */
static void named_rule(conv *c, const char *name, char *body) {
    for (int i = 0; i < c->n_rules; i++) if (!strcmp(c->rules[i].name, name)) { free(body); return; }
    if (c->n_rules == c->cap_rules) {
        int cap = c->cap_rules ? c->cap_rules * 2 : 32;
        grule *nr = cap > 100000 ? NULL : realloc(c->rules, (size_t)cap * sizeof *nr);
        if (nr) c->rules = nr, c->cap_rules = cap;
    }
    if (!body || c->n_rules == c->cap_rules || !(c->rules[c->n_rules].name = strdup(name))) {
        free(body);
        fail(c, "out of memory");
        return;
    }
    c->rules[c->n_rules++].body = body;
}

static long long gcd_ll(long long a, long long b) { while (b) { long long t = a % b; a = b; b = t; } return a; }

/* The decimal V / 10^d (V an integer), trailing fraction zeros dropped. */
static void decimal_text(char *buf, size_t size, long long V, int d) {
    long long p = 1;
    for (int i = 0; i < d; i++) p *= 10;
    unsigned long long a = V < 0 ? 0ULL - (unsigned long long)V : (unsigned long long)V;
    int n = snprintf(buf, size, "%s%llu", V < 0 ? "-" : "", a / (unsigned long long)p);
    unsigned long long f = a % (unsigned long long)p;
    if (f && n > 0 && (size_t)n < size) {
        char fr[24];
        snprintf(fr, sizeof fr, "%0*llu", d, f);
        for (int e = d - 1; e > 0 && fr[e] == '0'; e--) fr[e] = 0;
        snprintf(buf + n, size - (size_t)n, ".%s", fr);
    }
}

/* multipleOf k as the exact decimal m / 10^d it was written as (d <= 9, m <= 1e15; the shortest such that reads
 * back as k), then in lowest terms num / den. False when k is no such decimal. */
static bool decimal_of(double k, int *d, long long *num, long long *den) {
    long long p = 1;
    for (int i = 0; i <= 9; i++, p *= 10) {
        double sc = k * (double)p;
        if (!(sc < 1e15)) return false;
        long long m = llround(sc);
        char buf[48];
        decimal_text(buf, sizeof buf, m, i);
        if (m > 0 && strtod(buf, NULL) == k) {
            long long g = gcd_ll(m, p);
            *d = i, *num = m / g, *den = p / g;
            return true;
        }
    }
    return false;
}

/* The fraction endings of a multiple of num/den written with d digits: F in [0, den) stands for the fraction
 * F * 10^d / den, written without trailing zeros; those with (r * den + F) % num == 0 (r: the whole part's
 * remainder mod num), F = 0 left out. As "." alternatives, or an empty string when there are none. */
static void endings(ht_str *b, long long num, long long den, int d, long long r) {
    long long p = 1;
    for (int i = 0; i < d; i++) p *= 10;
    bool first = true;
    for (long long F = 1; F < den; F++) {
        if ((r * den + F) % num) continue;
        char t[48];
        decimal_text(t, sizeof t, F * (p / den), d);   /* "0.25" */
        ht_str_printf(b, "%s\"%s\"", first ? "\".\" (" : " | ", t + 2);
        first = false;
    }
    if (!first) ht_str_puts(b, ")");
}

/* Non-negative multiples of num/den (den > 1, coprime) with their fractions: rules mofrac-num-den-r read the
 * rest of the whole part from remainder r (mod num), then a fraction that makes the whole a multiple. Writes the
 * alternatives for zero, the positive ones and the negative ones, as allowed. */
static void fraction_multiples(conv *c, ht_str *b, long long num, long long den, int d, bool zero, bool pos, bool neg) {
    char name[96];
    for (long long r = 0; r < num && !c->failed; r++) {
        ht_str x = { 0 };
        for (long long t = 0; t < num; t++) {
            char cls[16];
            int n = 0;
            for (int dg = 0; dg <= 9; dg++) if ((r * 10 + dg) % num == t) cls[n++] = (char)('0' + dg);
            if (!n) continue;
            cls[n] = 0;
            ht_str_printf(&x, "%s[%s] mofrac-%lld-%lld-%lld", x.n ? " | " : "", cls, num, den, t);
        }
        ht_str e = { 0 };
        endings(&e, num, den, d, r);
        if (e.n) ht_str_printf(&x, " | %s", e.p);
        free(e.p);
        if (!r) { char *w = x.p; x = (ht_str){ 0 }; ht_str_printf(&x, "(%s)?", w); free(w); }
        snprintf(name, sizeof name, "mofrac-%lld-%lld-%lld", num, den, r);
        named_rule(c, name, x.oom ? (free(x.p), NULL) : x.p);
    }
    ht_str mag = { 0 };   /* a positive magnitude: 0 and a fraction, or a first digit 1-9 and the rest */
    endings(&mag, num, den, d, 0);
    if (mag.n) { char *w = mag.p; mag = (ht_str){ 0 }; ht_str_printf(&mag, "\"0\" %s", w); free(w); }
    for (int dg = 1; dg <= 9; dg++) ht_str_printf(&mag, "%s\"%d\" mofrac-%lld-%lld-%lld", mag.n ? " | " : "", dg, num, den, dg % num);
    const char *sep = "";
    if (zero) ht_str_puts(b, "\"0\""), sep = " | ";
    if (pos) ht_str_printf(b, "%s%s", sep, mag.p), sep = " | ";
    if (neg) ht_str_printf(b, "%s\"-\" (%s)", sep, mag.p);
    if (mag.oom) b->oom = true;
    free(mag.p);
}

/* Multiples of num/den within [lo, hi] (each end maybe exclusive), listed when at most 1000 of them and
 * written exactly; NULL (without failing) when there are more. */
static char *listed_multiples(conv *c, long long num, long long den, int d, double lo, bool lo_ex, double hi, bool hi_ex,
                              bool nonint, const char *hint) {
    long long p = 1;
    for (int i = 0; i < d; i++) p *= 10;
    long long unit = num * (p / den);   /* a multiple q of num/den is q * unit / 10^d */
    if (fabs(lo) * (double)p > 1e17 || fabs(hi) * (double)p > 1e17) return NULL;
    char t[48];
#define MO_VALUE(q) (decimal_text(t, sizeof t, (q) * unit, d), strtod(t, NULL))
    long long q0 = (long long)floor(lo * (double)p / (double)unit) - 2, q1 = (long long)ceil(hi * (double)p / (double)unit) + 2;
    while (q0 <= q1 && (lo_ex ? MO_VALUE(q0) <= lo : MO_VALUE(q0) < lo)) q0++;
    while (q1 >= q0 && (hi_ex ? MO_VALUE(q1) >= hi : MO_VALUE(q1) > hi)) q1--;
#undef MO_VALUE
    if (q0 > q1) return fail(c, "no multiple of the \"multipleOf\" lies within the bounds");
    if (q1 - q0 >= 1000) return NULL;
    ht_str b = { 0 };
    free(prim(c, "space"));
    ht_str_puts(&b, "(");
    bool any = false;
    for (long long q = q0; q <= q1; q++) {
        if (nonint && q * unit % p == 0) continue;   /* whole: left out */
        decimal_text(t, sizeof t, q * unit, d);
        ht_str_printf(&b, "%s\"%s\"", any ? " | " : "", t);
        any = true;
    }
    ht_str_puts(&b, ") space");
    if (!any) { free(b.p); return fail(c, "no multiple of the \"multipleOf\" with a fraction lies within the bounds"); }
    return b.oom ? fail(c, "out of memory") : add_rule(c, hint, b.p);
}

static char *number_rule(conv *c, const cJSON *s, bool integer, const char *hint) {
    const cJSON *mo = get(s, "multipleOf");
    int frac = 16;   /* fraction digits written */
    double k = 1;
    /* multipleOf k = num / den in lowest terms (den divides 10^md): a multiple v = W + F/den (W whole, 0 <= F <
     * den) is one exactly when (W * den + F) % num == 0. den 1: whole multiples of num; num 1: any whole part and
     * the fraction endings F/den (den 10^md: any md digits); else the whole part's remainder picks the endings. */
    long long num = 1, den = 1;
    int md = 0;
    if (mo) {
        if (!cJSON_IsNumber(mo) || !(mo->valuedouble > 0)) return fail(c, "\"multipleOf\" must be a positive number");
        if (!decimal_of(mo->valuedouble, &md, &num, &den))
            return fail(c, "\"multipleOf\" %g is not supported (decimals of up to 9 fraction digits are)", mo->valuedouble);
        if (integer) k = (double)num, den = 1;   /* an integer n is a multiple exactly when n % num == 0 */
        else if (den == 1) k = (double)num, integer = true;   /* a multiple of a whole number (1 too) is whole */
        else if (num == 1 && den == (long long)pow(10, md)) frac = md;   /* 0.1, 0.01, ...: that many digits */
        else if (den > 1000 || num > 1000)
            return fail(c, "\"multipleOf\" %g is not supported (its fraction has more than 1000 endings)", mo->valuedouble);
    }
    bool endings_only = den > 1 && num == 1 && frac == 16;   /* 0.25, 0.5, 0.05, ...: fraction endings */
    bool nonint = cJSON_IsTrue(get(s, NONINT));   /* a non-zero fraction always */
    if (nonint && (integer || (den > 1 && !endings_only && frac == 16)))
        return fail(c, "oneOf: a number alternative beside an integer one must hold only numbers with a fraction, and "
                    "with this \"multipleOf\" that is not supported");
    char dec[32];
    snprintf(dec, sizeof dec, frac == 16 ? "decimal-part" : "[0-9]{1,%d}", frac);
    bool has_lo, lo_ex, has_hi, hi_ex;
    double lo = 0, hi = 0;
    if (!bounds(c, s, &has_lo, &lo, &lo_ex, &has_hi, &hi, &hi_ex)) return NULL;
    const cJSON *fmt = get(s, "format");
    if (integer && cJSON_IsString(fmt) && !strcmp(fmt->valuestring, "int32")) {
        if (!has_lo || lo < -2147483648.0) has_lo = true, lo = -2147483648.0, lo_ex = false;
        if (!has_hi || hi > 2147483647.0) has_hi = true, hi = 2147483647.0, hi_ex = false;
    }
    /* bounds beyond what is written (15 digits) are narrowed to it: stricter, and the same for any real reply */
    if (has_lo && lo < -999999999999999.0) lo = -999999999999999.0, lo_ex = false;
    if (has_hi && hi > 999999999999999.0) hi = 999999999999999.0, hi_ex = false;
    if ((has_lo && lo >= 999999999999999.0 && (lo_ex || lo > 999999999999999.0)) ||
        (has_hi && hi <= -999999999999999.0 && (hi_ex || hi < -999999999999999.0)) || fabs(lo) > 1e15 || fabs(hi) > 1e15)
        return fail(c, "a minimum from 1e15 up (or a maximum from -1e15 down) is not supported");
    /* integer bounds: the smallest and largest allowed integers */
    long long ilo = 0, ihi = 0;
    if (has_lo) ilo = (long long)ceil(lo), ilo += lo_ex && (double)ilo == lo;
    if (has_hi) ihi = (long long)floor(hi), ihi -= hi_ex && (double)ihi == hi;
    if (integer && k > 1) return multiple_rule(c, (long long)k, has_lo, ilo, has_hi, ihi, hint);
    if (integer) return int_rule(c, has_lo, ilo, has_hi, ihi, hint);
    if (den > 1 && has_lo && has_hi) {   /* few multiples within the bounds: each written */
        char *l = listed_multiples(c, num, den, md, lo, lo_ex, hi, hi_ex, nonint, hint);
        if (l || c->failed) return l;
    }
    ht_str ends = { 0 }, ends_nz = { 0 };   /* the fraction endings (as dec) and the non-zero ones */
    if (endings_only) {
        endings(&ends_nz, 1, den, md, 0);
        ht_str_printf(&ends, "(\"0\" | %s)", ends_nz.p + 4);   /* ends_nz is "\".\" (...)" */
        if (ends.oom || ends_nz.oom) { free(ends.p); free(ends_nz.p); return fail(c, "out of memory"); }
    }
    const char *decp = endings_only ? ends.p : dec;
    if (den > 1 && !endings_only && frac == 16) {   /* by the whole part's remainder: bounds at 0 or inside (-k, k) */
        double kk = mo->valuedouble;
        bool lo_ok = !has_lo || (lo > -kk && lo < kk) || (lo == kk && !lo_ex) || (lo == -kk && lo_ex);
        bool hi_ok = !has_hi || (hi > -kk && hi < kk) || (hi == -kk && !hi_ex) || (hi == kk && hi_ex);
        if (!lo_ok || !hi_ok)
            return fail(c, "\"multipleOf\" %g with bounds that cut through the multiples (more than 1000 of them) is not supported", kk);
        bool zero = (!has_lo || lo < 0 || (lo == 0 && !lo_ex)) && (!has_hi || hi > 0 || (hi == 0 && !hi_ex));
        bool pos = !has_hi, neg = !has_lo;
        if (!zero && !pos && !neg) return fail(c, "no multiple of the \"multipleOf\" lies within the bounds");
        free(prim(c, "space"));
        ht_str b = { 0 };
        ht_str_puts(&b, "(");
        fraction_multiples(c, &b, num, den, md, zero, pos, neg);
        ht_str_puts(&b, ") space");
        if (c->failed) { free(b.p); return NULL; }
        return b.oom ? fail(c, "out of memory") : add_rule(c, hint, b.p);
    }
    ht_str fraction = { 0 };   /* what follows a whole part: optional, or a non-zero one (nonint) */
    if (nonint && endings_only) ht_str_puts(&fraction, ends_nz.p);
    else if (nonint) ht_str_printf(&fraction, "\".\" [0-9]{0,%d} [1-9]", frac - 1);
    else ht_str_printf(&fraction, "(\".\" %s)?", decp);
    if (fraction.oom) { free(ends.p), free(ends_nz.p), free(fraction.p); return fail(c, "out of memory"); }
    if (!has_lo && !has_hi && frac == 16 && !endings_only && !nonint) { free(fraction.p); return prim(c, "number"); }
    if (!has_lo && !has_hi) {
        free(prim(c, "integral-part"));
        free(prim(c, "space"));
        ht_str b = { 0 };
        ht_str_printf(&b, "\"-\"? integral-part %s space", fraction.p);
        free(ends.p), free(ends_nz.p), free(fraction.p);
        return b.oom ? fail(c, "out of memory") : add_rule(c, hint, b.p);
    }
    /* numbers with bounds: no exponent, and bounds met by whole-number parts (stricter than non-integer bounds):
     * v >= 0 and v < 0 are written as magnitudes, each a whole part in [a, top - 1] with any fraction or top itself */
    free(prim(c, "decimal-part"));
    free(prim(c, "space"));
    ht_str b = { 0 };
    const char *sep = "";
    ht_str_puts(&b, "(");
    if (!has_hi || hi > 0 || (hi == 0 && !hi_ex)) {   /* v >= 0 */
        long long a = 0;
        if (has_lo && lo >= 0) a = (long long)ceil(lo) + (lo_ex && floor(lo) == lo);
        if (has_lo && lo_ex && floor(lo) == lo && lo >= 0 && (!has_hi || hi >= lo + 1)) {   /* v > lo: lo.000x too */
            if (endings_only) ht_str_printf(&b, "%s\"%lld\" %s", sep, (long long)lo, ends_nz.p);
            else ht_str_printf(&b, "%s\"%lld.\" [0-9]{0,%d} [1-9]", sep, (long long)lo, frac - 1);
            sep = " | ";
        }
        magnitudes(&b, a, has_hi ? (long long)floor(hi) : -1, !(hi_ex && floor(hi) == hi) && !nonint, &sep, "", fraction.p);
    }
    if (!has_lo || lo < 0) {                            /* v < 0: "-" and a magnitude */
        long long a = has_hi && hi < 0 ? (long long)ceil(-hi) + (hi_ex && floor(hi) == hi) : 0;
        if (has_hi && hi == 0 && hi_ex) {   /* v < 0 strictly: "-0" and "-0.0" are 0 */
            if (!has_lo || lo <= -1) {
                if (endings_only) ht_str_printf(&b, "%s\"-0\" %s", sep, ends_nz.p);
                else ht_str_printf(&b, "%s\"-0.\" [0-9]{0,%d} [1-9]", sep, frac - 1);
                sep = " | ";
            }
            a = 1;
        }
        magnitudes(&b, a, has_lo ? (long long)floor(-lo) : -1, !(lo_ex && floor(lo) == lo) && !nonint, &sep, "\"-\" ",
                   fraction.p);
    }
    ht_str_puts(&b, ") space");
    free(ends.p), free(ends_nz.p), free(fraction.p);
    if (!*sep) { free(b.p); return fail(c, "the bounds leave no number whose whole part hearth can enforce"); }
    return b.oom ? fail(c, "out of memory") : add_rule(c, hint, b.p);
}

/* ---- arrays and objects ---- */

static cJSON *merge(conv *c, const cJSON *a, const cJSON *b);
static bool sdisjoint(conv *c, const cJSON *x, const cJSON *y, int depth);

static char *array_rule(conv *c, const cJSON *s, const char *hint) {
    const cJSON *items = get(s, "items"), *prefix = get(s, "prefixItems"), *mn = get(s, "minItems"),
                *mx = get(s, "maxItems"), *uniq = get(s, "uniqueItems"), *addl = get(s, "additionalItems");
    if (cJSON_IsArray(items)) prefix = items, items = addl;   /* draft-04..07 tuple form */
    long lo = count_of(mn, 0), hi = count_of(mx, -1);
    if (lo < 0 || lo > 1000 || hi < -1 || hi > 1000 || (hi >= 0 && hi < lo)) return fail(c, "bad minItems/maxItems");
    /* contains: the first minContains items match it (and items), the rest match items and, under maxContains,
     * not it; stricter (the matches come first), exact in what it allows */
    const cJSON *has_c = get(s, "contains");
    long min_c = 0, max_c = -1;
    if (has_c) {
        if (prefix) return fail(c, "\"contains\" with \"prefixItems\" (or tuple \"items\") is not supported");
        min_c = count_of(get(s, "minContains"), 1), max_c = count_of(get(s, "maxContains"), -1);
        if (min_c < 0 || min_c > 1000 || max_c < -1 || max_c > 1000 || (max_c >= 0 && max_c < min_c))
            return fail(c, "bad minContains/maxContains");
        if (lo < min_c) lo = min_c;
        if (hi >= 0 && hi < lo) return fail(c, "\"contains\": minContains is above maxItems");
    }
    if (cJSON_IsTrue(uniq)) {   /* at most one item is always unique */
        if (lo > 1) return fail(c, "\"uniqueItems\" with minItems above 1 is not supported");
        if (hi < 0 || hi > 1) hi = 1;
    }
    free(prim(c, "space"));
    char tmp[128];
    int n_prefix = cJSON_IsArray(prefix) ? cJSON_GetArraySize(prefix) : 0;
    if (has_c) n_prefix = (int)min_c;
    char **pre = n_prefix ? calloc((size_t)n_prefix, sizeof *pre) : NULL;
    if (n_prefix && !pre) return fail(c, "out of memory");
    for (int i = 0; i < n_prefix && !c->failed; i++) {
        snprintf(tmp, sizeof tmp, "%.40s-%d", hint, i);
        if (!has_c) pre[i] = visit(c, cJSON_GetArrayItem(prefix, i), tmp);
        else if (i) pre[i] = xstrdup(c, pre[0]);
        else {   /* an item that matches both items and contains */
            snprintf(tmp, sizeof tmp, "%.40s-contains", hint);
            if (items && sdisjoint(c, items, has_c, 0)) { fail(c, "\"contains\" matches no item that \"items\" allows"); break; }
            cJSON *hit = !items || cJSON_IsTrue(items) ? cJSON_Duplicate(has_c, true)
                       : cJSON_IsObject(items) && cJSON_IsObject(has_c) ? merge(c, items, has_c) : NULL;
            if (!hit && !c->failed) fail(c, "\"contains\" must be a schema that can match with \"items\"");
            if (hit) pre[i] = visit(c, hit, tmp);
            cJSON_Delete(hit);
        }
    }
    char *item = NULL;
    bool rest_ok = !(cJSON_IsFalse(items));
    if (rest_ok && !c->failed) {
        snprintf(tmp, sizeof tmp, "%.40s-item", hint);
        if (has_c && max_c >= 0) {   /* the others: items and not contains */
            cJSON *miss = cJSON_CreateObject(), *both = miss ? cJSON_AddArrayToObject(miss, "allOf") : NULL;
            cJSON *no = cJSON_CreateObject(), *nc = cJSON_Duplicate(has_c, true);
            bool ok = both && no && nc && (!cJSON_IsObject(items) || cJSON_AddItemToArray(both, cJSON_Duplicate(items, true)));
            if (ok && cJSON_AddItemToObject(no, "not", nc)) nc = NULL;
            if (ok && !nc && cJSON_AddItemToArray(both, no)) no = NULL;
            if (!ok || no || nc) fail(c, "out of memory");
            else item = visit(c, miss, tmp);
            cJSON_Delete(no), cJSON_Delete(nc), cJSON_Delete(miss);
        } else item = items && !cJSON_IsTrue(items) ? visit(c, items, tmp) : prim(c, "value");
    }
    ht_str b = { 0 };
    if (!c->failed) {
        /* positions 0..: prefix items first, then `item`; counts lo..hi */
        long max = hi;
        if (!rest_ok && (max < 0 || max > n_prefix)) max = n_prefix;
        if (lo > max && max >= 0) fail(c, "minItems cannot be met");
        ht_str_puts(&b, "\"[\" space");
        int open = 0;   /* optional prefix items are nested optionals: ( "," x ( "," y )? )? */
        for (long i = 0; !c->failed && (max < 0 || i < max); i++) {
            if (i >= n_prefix && i >= lo) {   /* the optional tail of `item`s: a repetition, however long */
                if (max < 0) ht_str_printf(&b, i ? " (\",\" space %s)*" : " (%s (\",\" space %s)*)?", item, item);
                else if (i == 0) ht_str_printf(&b, " (%s (\",\" space %s){0,%ld})?", item, item, max - 1);
                else ht_str_printf(&b, " (\",\" space %s){0,%ld}", item, max - i);
                break;
            }
            if (i >= lo) { ht_str_puts(&b, " ("); open++; }
            ht_str_printf(&b, i ? " \",\" space %s" : " %s", i < n_prefix ? pre[i] : item);
        }
        for (int i = 0; i < open; i++) ht_str_puts(&b, ")?");
        ht_str_puts(&b, " \"]\" space");
    }
    for (int i = 0; i < n_prefix; i++) free(pre[i]);
    free(pre);
    free(item);
    if (c->failed) { free(b.p); return NULL; }
    return b.oom ? fail(c, "out of memory") : add_rule(c, hint, b.p);
}

/* A quoted JSON key as a GBNF literal. */
static void sb_key(ht_str *b, const char *k) {
    cJSON *str = cJSON_CreateString(k);
    char *txt = str ? cJSON_PrintUnformatted(str) : NULL;
    if (txt) sb_literal(b, txt, strlen(txt));
    else b->oom = true;
    free(txt);
    cJSON_Delete(str);
}

static bool in_required(const cJSON *req, const char *k) {
    const cJSON *x;
    cJSON_ArrayForEach(x, req) if (cJSON_IsString(x) && !strcmp(x->valuestring, k)) return true;
    return false;
}

/* Makes property k of m never present (its schema false, which a merge keeps): deleting it would let a merge
 * declare it again, or leave a map of any keys when it was the last one. */
static void drop_property(cJSON *m, const char *k) {
    cJSON *props = cJSON_GetObjectItemCaseSensitive(m, "properties");
    if (get(props, k)) cJSON_ReplaceItemInObjectCaseSensitive(props, k, cJSON_CreateFalse());
}

/* "properties" an object, "required" an array of strings: what object_rule reads and merge() unites (the
 * grammar fuzzer found "properties" as an array merged as if it had keys). */
static bool object_shapes_ok(conv *c, const cJSON *s) {
    const cJSON *props = get(s, "properties"), *req = get(s, "required"), *x;
    if (req && !cJSON_IsArray(req)) return fail(c, "\"required\" must be an array"), false;
    if (props && !cJSON_IsObject(props)) return fail(c, "\"properties\" must be an object"), false;
    cJSON_ArrayForEach(x, req) if (!cJSON_IsString(x)) return fail(c, "\"required\" must hold strings"), false;
    return true;
}

/* dependentRequired, dependentSchemas and draft-07 dependencies, made into the object's own keywords, stricter
 * but exact: a trigger property's required ones become required always, its schema applies always (merged), and
 * a trigger whose dependency cannot be met is never written (or, if required, refused). */
static char *dependencies(conv *c, const cJSON *s, const char *hint) {
    cJSON *m = cJSON_Duplicate(s, true);
    if (!m) return fail(c, "out of memory");
    cJSON *dep[3] = { cJSON_DetachItemFromObjectCaseSensitive(m, "dependentRequired"),
                      cJSON_DetachItemFromObjectCaseSensitive(m, "dependencies"),
                      cJSON_DetachItemFromObjectCaseSensitive(m, "dependentSchemas") };
    if (!cJSON_IsObject(get(m, "properties")))
        fail(c, "dependencies on an object without \"properties\" are not supported");
    if (has(m, "type")) cJSON_ReplaceItemInObjectCaseSensitive(m, "type", cJSON_CreateString("object"));
    else cJSON_AddStringToObject(m, "type", "object");
    for (int d = 0; d < 3 && !c->failed; d++) {
        if (dep[d] && !cJSON_IsObject(dep[d])) { fail(c, "dependencies must be an object"); break; }
        for (const cJSON *x = dep[d] ? dep[d]->child : NULL; x && !c->failed; x = x->next) {
            cJSON *props = cJSON_GetObjectItemCaseSensitive(m, "properties");
            if (!get(props, x->string)) continue;   /* never written: the dependency never applies */
            bool a_req = in_required(get(m, "required"), x->string), drop = false;
            if (cJSON_IsArray(x)) {   /* names */
                const cJSON *y;
                cJSON_ArrayForEach(y, x) drop |= !cJSON_IsString(y) || !get(props, y->valuestring);
                if (!drop) {
                    cJSON *req = cJSON_GetObjectItemCaseSensitive(m, "required");
                    if (!req) req = cJSON_AddArrayToObject(m, "required");
                    cJSON_ArrayForEach(y, x) if (!in_required(req, y->valuestring))
                        cJSON_AddItemToArray(req, cJSON_CreateString(y->valuestring));
                }
            } else if (cJSON_IsFalse(x)) drop = true;
            else if (cJSON_IsObject(x)) {
                cJSON *n = merge(c, m, x);
                if (n) { cJSON_Delete(m); m = n; }
            } else if (!cJSON_IsTrue(x)) fail(c, "a dependency must be an array of names or a schema");
            if (drop && a_req) fail(c, "required property '%s' has a dependency that cannot be met", x->string);
            else if (drop) drop_property(m, x->string);
        }
    }
    for (int d = 0; d < 3; d++) cJSON_Delete(dep[d]);
    char *out = c->failed ? NULL : visit(c, m, hint);
    cJSON_Delete(m);
    return out;
}

/* Whether the ECMA-style pattern matches somewhere in key: 1 yes, 0 no, -1 after failing (does not compile). */
static int pattern_matches(conv *c, const char *pat, const char *key) {
    int ec;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &off, NULL);
    if (!re) return fail(c, "pattern '%.80s' does not compile", pat), -1;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = md ? pcre2_match(re, (PCRE2_SPTR)key, strlen(key), 0, 0, md, NULL) : -1;
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    if (!md) return fail(c, "out of memory"), -1;
    return rc >= 0;
}

/* Whether key satisfies the propertyNames schema pn: 1 yes, 0 no, -1 after failing (a keyword not checked here). */
static int key_ok(conv *c, const cJSON *pn, const char *key) {
    if (cJSON_IsBool(pn)) return cJSON_IsTrue(pn);
    if (!cJSON_IsObject(pn)) return fail(c, "\"propertyNames\" must be a schema"), -1;
    const cJSON *ref = get(pn, "$ref");
    if (cJSON_IsString(ref)) { const cJSON *t = resolve_ref(c, ref->valuestring); return t ? key_ok(c, t, key) : -1; }
    for (const cJSON *x = pn->child; x; x = x->next) {
        const char *k = x->string;
        if (annotation(k)) continue;
        if (!strcmp(k, "type")) { if (!(types_of(c, pn) & T_STRING)) return 0; }
        else if (!strcmp(k, "pattern") && cJSON_IsString(x)) { int m = pattern_matches(c, x->valuestring, key); if (m <= 0) return m; }
        else if ((!strcmp(k, "minLength") || !strcmp(k, "maxLength")) && cJSON_IsNumber(x)) {
            double n = 0;
            for (const unsigned char *q = (const unsigned char *)key; *q; q++) n += (*q & 0xc0) != 0x80;
            if (k[1] == 'i' ? n < x->valuedouble : n > x->valuedouble) return 0;
        } else if (!strcmp(k, "const")) { if (!cJSON_IsString(x) || strcmp(x->valuestring, key)) return 0; }
        else if (!strcmp(k, "enum") && cJSON_IsArray(x)) {
            const cJSON *e;
            bool in = false;
            cJSON_ArrayForEach(e, x) in |= cJSON_IsString(e) && !strcmp(e->valuestring, key);
            if (!in) return 0;
        } else return fail(c, "\"propertyNames\" with '%s' cannot be checked against the declared properties", k), -1;
    }
    return 1;
}

/* The schema for the value of declared property k: its own, and every patternProperties schema whose pattern
 * matches k. A new object (caller deletes), or NULL after failing. */
static cJSON *declared_value(conv *c, const cJSON *own, const cJSON *pp, const char *k) {
    cJSON *all = cJSON_CreateObject(), *arr = all ? cJSON_AddArrayToObject(all, "allOf") : NULL;
    if (!arr) { cJSON_Delete(all); return fail(c, "out of memory"), NULL; }
    cJSON_AddItemToArray(arr, cJSON_Duplicate(own, true));
    const cJSON *x;
    cJSON_ArrayForEach(x, pp) {
        int m = pattern_matches(c, x->string, k);
        if (m < 0) { cJSON_Delete(all); return NULL; }
        if (m) cJSON_AddItemToArray(arr, cJSON_Duplicate(x, true));
    }
    if (cJSON_GetArraySize(arr) == 1) {   /* its own schema alone */
        cJSON *one = cJSON_DetachItemFromArray(arr, 0);
        cJSON_Delete(all);
        return one;
    }
    return all;
}

/* Declares m's required keys that have no schema under "properties" (only declared keys are written), with the
 * schemas that apply to them: the matching patternProperties', else additionalProperties'. False after failing. */
static bool declare_required(conv *c, cJSON *m) {
    const cJSON *req = get(m, "required"), *pp = get(m, "patternProperties"), *addl = get(m, "additionalProperties"), *x;
    bool undeclared = false;
    cJSON_ArrayForEach(x, req) undeclared |= cJSON_IsString(x) && !get(get(m, "properties"), x->valuestring);
    if (!undeclared) return true;
    cJSON *mp = cJSON_GetObjectItemCaseSensitive(m, "properties");
    if (!mp) mp = cJSON_AddObjectToObject(m, "properties");
    if (!cJSON_IsObject(mp)) return fail(c, "\"properties\" must be an object"), false;
    cJSON_ArrayForEach(x, req) {
        if (!cJSON_IsString(x) || get(mp, x->valuestring)) continue;
        bool by_pattern = false;
        const cJSON *p;
        cJSON_ArrayForEach(p, pp) if (!by_pattern) {
            int hit = pattern_matches(c, p->string, x->valuestring);
            if (hit < 0) return false;
            by_pattern = hit;
        }
        if (!by_pattern && cJSON_IsFalse(addl))
            return fail(c, "required property '%s' is forbidden by additionalProperties false", x->valuestring), false;
        cJSON_AddItemToObject(mp, x->valuestring, !by_pattern && cJSON_IsObject(addl) ? cJSON_Duplicate(addl, true)
                                                                                     : cJSON_CreateObject());
    }
    return true;
}

static char *object_rule(conv *c, const cJSON *s, const char *hint) {
    const cJSON *props = get(s, "properties"), *req = get(s, "required"), *addl = get(s, "additionalProperties"),
                *mn = get(s, "minProperties"), *mx = get(s, "maxProperties"), *pp = get(s, "patternProperties"),
                *up = get(s, "unevaluatedProperties");
    const cJSON *pn = get(s, "propertyNames");
    if (pp && !cJSON_IsObject(pp)) return fail(c, "\"patternProperties\" must be an object");
    if (pp && !cJSON_GetArraySize(pp)) pp = NULL;
    if (has(s, "dependentRequired") || has(s, "dependencies") || has(s, "dependentSchemas")) return dependencies(c, s, hint);
    if (up && !cJSON_IsBool(up)) return fail(c, "\"unevaluatedProperties\" with a schema is not supported");
    if (!object_shapes_ok(c, s)) return NULL;
    int n_props = cJSON_IsObject(props) ? cJSON_GetArraySize(props) : 0;
    const cJSON *x;
    bool undeclared = false;
    cJSON_ArrayForEach(x, req) undeclared |= !get(props, x->valuestring);
    if (undeclared) {
        cJSON *m = cJSON_Duplicate(s, true);
        char *out = m && declare_required(c, m) ? object_rule(c, m, hint) : (m ? NULL : fail(c, "out of memory"));
        cJSON_Delete(m);
        return out;
    }
    long lo = count_of(mn, 0), hi = count_of(mx, -1);
    if (lo < 0 || hi < -1) return fail(c, "bad minProperties/maxProperties");
    free(prim(c, "space"));
    ht_str b = { 0 };
    ht_str_puts(&b, "\"{\" space");
    if (n_props == 0 && (!cJSON_IsFalse(addl) || pp)) {
        /* a map: keys from patternProperties' patterns (values: all their schemas at once, so a key that matches
         * several is right), else from propertyNames, else any; values per additionalProperties; lo..hi entries */
        char tmp[128];
        snprintf(tmp, sizeof tmp, "%.40s-value", hint);
        char *val = NULL, *str = NULL;
        if (pp && pn && !cJSON_IsTrue(pn)) return fail(c, "\"propertyNames\" together with \"patternProperties\" is not supported");
        if (pp) {
            cJSON *all = cJSON_CreateObject(), *arr = all ? cJSON_AddArrayToObject(all, "allOf") : NULL;
            ht_str keys = { 0 };
            if (!arr) fail(c, "out of memory");
            cJSON_ArrayForEach(x, pp) {
                if (c->failed) break;
                cJSON_AddItemToArray(arr, cJSON_Duplicate(x, true));
                snprintf(tmp, sizeof tmp, "%.40s-key", hint);
                char *k = pattern_string(c, x->string, tmp);
                if (k) ht_str_printf(&keys, "%s%s", keys.n ? " | " : "", k);
                free(k);
            }
            snprintf(tmp, sizeof tmp, "%.40s-value", hint);
            if (!c->failed) val = visit(c, cJSON_GetArraySize(arr) == 1 ? arr->child : all, tmp);
            cJSON_Delete(all);
            snprintf(tmp, sizeof tmp, "%.40s-keys", hint);
            str = c->failed || keys.oom ? (free(keys.p), NULL) : add_rule(c, tmp, keys.p);
        } else {
            val = cJSON_IsObject(addl) ? visit(c, addl, tmp) : prim(c, "value");
            if (pn && !cJSON_IsTrue(pn)) {   /* keys: the propertyNames schema, as a string */
                cJSON *ks = cJSON_IsObject(pn) ? cJSON_Duplicate(pn, true) : NULL;
                if (ks && !has(ks, "type")) cJSON_AddStringToObject(ks, "type", "string");
                snprintf(tmp, sizeof tmp, "%.40s-key", hint);
                if (!ks) fail(c, "\"propertyNames\" false: no key is allowed, so only {} is");
                else if (types_of(c, ks) != T_STRING) fail(c, "\"propertyNames\" must describe strings");
                else str = visit(c, ks, tmp);
                cJSON_Delete(ks);
            } else {
                free(prim(c, "char"));   /* keys of at most 64 characters (stricter than any key) */
                str = add_rule(c, "map-key", xstrdup(c, "\"\\\"\" char{0,64} \"\\\"\" space"));
            }
        }
        if (lo > 100 || (hi >= 0 && hi < lo)) { free(val); free(str); free(b.p); return fail(c, "bad minProperties/maxProperties"); }
        if (!c->failed) {
            if (hi == 0) {}
            else if (lo == 0) {
                if (hi < 0) ht_str_printf(&b, " (%s \":\" space %s (\",\" space %s \":\" space %s)*)?", str, val, str, val);
                else ht_str_printf(&b, " (%s \":\" space %s (\",\" space %s \":\" space %s){0,%ld})?", str, val, str, val, hi - 1);
            } else {
                if (hi < 0) ht_str_printf(&b, " %s \":\" space %s (\",\" space %s \":\" space %s){%ld,}", str, val, str, val, lo - 1);
                else ht_str_printf(&b, " %s \":\" space %s (\",\" space %s \":\" space %s){%ld,%ld}", str, val, str, val, lo - 1, hi - 1);
            }
            if (lo > 1 || hi < 0 || hi > 1) {
                /* several free keys could repeat; JSON with a repeated key is still validated by its last value */
            }
        }
        free(val);
        free(str);
    } else {
        /* declared properties in order: required ones always, optional ones maybe; nothing else (stricter) */
        int n_req = 0, n = 0;
        char **val = calloc((size_t)n_props + 1, sizeof *val);
        bool *isreq = calloc((size_t)n_props + 1, sizeof *isreq);
        const char **key = calloc((size_t)n_props + 1, sizeof *key);
        if (!val || !isreq || !key) fail(c, "out of memory");
        cJSON_ArrayForEach(x, props) {
            if (c->failed) break;
            char tmp[128];
            snprintf(tmp, sizeof tmp, "%.40s-%s", hint, x->string);
            size_t plen = strlen(c->path);
            snprintf(c->path + plen, sizeof c->path - plen, "/properties/%s", x->string);
            bool r = in_required(req, x->string);
            int named = pn ? key_ok(c, pn, x->string) : 1;   /* a key propertyNames forbids is never written */
            if (!named && r) fail(c, "required property '%s' is forbidden by \"propertyNames\"", x->string);
            if (cJSON_IsFalse(x) && named > 0) {   /* nor one whose schema is false */
                named = 0;
                if (r) fail(c, "required property '%s' can never be present (its schema is false)", x->string);
            }
            cJSON *vs = named > 0 && pp ? declared_value(c, x, pp, x->string) : NULL;
            if (named > 0 && !c->failed) {
                key[n] = x->string;
                isreq[n] = r;
                n_req += isreq[n];
                val[n] = visit(c, vs ? vs : x, tmp);
                n++;
            }
            cJSON_Delete(vs);
            c->path[plen] = 0;
        }
        if (!c->failed && lo > n_req) {   /* the first optional ones become required (stricter) */
            if (lo > n) fail(c, "minProperties %ld cannot be met by the declared properties", lo);
            for (int i = 0; i < n && n_req < lo; i++) if (!isreq[i]) isreq[i] = true, n_req++;
        }
        if (!c->failed && hi >= 0 && n_req > hi) fail(c, "maxProperties %ld is below the required count", hi);
        if (!c->failed && hi >= 0 && n > hi) fail(c, "\"maxProperties\" below the number of declared properties is not supported");
        /* rules tail_i_first / tail_i_more: the properties from i on, before or after the first one written */
        char **first = calloc((size_t)n + 1, sizeof *first), **more = calloc((size_t)n + 1, sizeof *more);
        if (!first || !more) fail(c, "out of memory");
        bool later_req = false;   /* a required property comes after i */
        for (int i = n - 1; i >= 0 && !c->failed; i--) {
            ht_str kv = { 0 }, f = { 0 }, m = { 0 };
            sb_key(&kv, key[i]);
            ht_str_printf(&kv, " space \":\" space %s", val[i]);
            const char *nf = first[i + 1], *nm = more[i + 1];
            if (isreq[i]) {   /* F ::= kv M',  M ::= "," kv M' */
                ht_str_printf(&f, "%s%s%s", kv.p, nm ? " " : "", nm ? nm : "");
                ht_str_printf(&m, "\",\" space %s%s%s", kv.p, nm ? " " : "", nm ? nm : "");
            } else {          /* F ::= (kv M' | F')?,  M ::= ("," kv M' | M')?; no "?" when a required one follows */
                const char *opt = later_req ? "" : "?";
                ht_str_printf(&f, "(%s%s%s%s%s)%s", kv.p, nm ? " " : "", nm ? nm : "", nf ? " | " : "", nf ? nf : "", opt);
                ht_str_printf(&m, "(\",\" space %s%s%s%s%s)%s", kv.p, nm ? " " : "", nm ? nm : "", nm ? " | " : "",
                          nm ? nm : "", opt);
            }
            later_req |= isreq[i];
            free(kv.p);
            char tmp[128];
            snprintf(tmp, sizeof tmp, "%.40s-%d-first", hint, i);
            first[i] = f.oom ? fail(c, "out of memory") : add_rule(c, tmp, f.p);
            snprintf(tmp, sizeof tmp, "%.40s-%d-more", hint, i);
            more[i] = m.oom ? fail(c, "out of memory") : add_rule(c, tmp, m.p);
        }
        if (!c->failed && n) ht_str_printf(&b, " %s", first[0]);
        for (int i = 0; i <= n; i++) { free(val ? val[i] : NULL); free(first ? first[i] : NULL); free(more ? more[i] : NULL); }
        free(val); free(isreq); free(key); free(first); free(more);
    }
    ht_str_puts(&b, " \"}\" space");
    if (c->failed) { free(b.p); return NULL; }
    return b.oom ? fail(c, "out of memory") : add_rule(c, hint, b.p);
}

/* ---- combinators ---- */

/* allOf: the subschemas merged into one (objects: properties and required united; bounds tightened). */
static cJSON *merge(conv *c, const cJSON *a, const cJSON *b) {
    if (!object_shapes_ok(c, a) || !object_shapes_ok(c, b)) return NULL;
    cJSON *m = cJSON_Duplicate(a, true);
    if (!m) return fail(c, "out of memory"), NULL;
    const cJSON *x;
    cJSON_ArrayForEach(x, b) {
        const char *k = x->string;
        cJSON *have = cJSON_GetObjectItemCaseSensitive(m, k);
        if (annotation(k) && strcmp(k, "definitions") && strcmp(k, "$defs")) continue;
        if (!have) { cJSON_AddItemToObject(m, k, cJSON_Duplicate(x, true)); continue; }
        if (cJSON_Compare(have, x, true)) continue;
        if (!strcmp(k, "properties")) {
            const cJSON *p;
            cJSON_ArrayForEach(p, x) {
                cJSON *hp = cJSON_GetObjectItemCaseSensitive(have, p->string);
                if (!hp) cJSON_AddItemToObject(have, p->string, cJSON_Duplicate(p, true));
                else if (cJSON_IsFalse(hp) || cJSON_IsFalse(p)) cJSON_ReplaceItemInObjectCaseSensitive(have, p->string, cJSON_CreateFalse());
                else if (!cJSON_Compare(hp, p, true)) {
                    cJSON *both = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(both, "allOf");
                    cJSON_AddItemToArray(arr, cJSON_Duplicate(hp, true));
                    cJSON_AddItemToArray(arr, cJSON_Duplicate(p, true));
                    cJSON_ReplaceItemInObjectCaseSensitive(have, p->string, both);
                }
            }
        } else if (!strcmp(k, "required")) {
            const cJSON *r;
            cJSON_ArrayForEach(r, x) if (cJSON_IsString(r) && !in_required(have, r->valuestring))
                cJSON_AddItemToArray(have, cJSON_CreateString(r->valuestring));
        } else if (!strcmp(k, "type")) {
            int ta = types_of(c, m), tb = types_of(c, b);
            int t = ta & tb;
            if ((ta & T_NUMBER) && (tb & T_INTEGER)) t |= T_INTEGER;
            if ((tb & T_NUMBER) && (ta & T_INTEGER)) t |= T_INTEGER;
            if (!t) { cJSON_Delete(m); return fail(c, "allOf: the types exclude each other"), NULL; }
            cJSON *arr = cJSON_CreateArray();
            static const char *const N[] = { "null", "boolean", "object", "array", "number", "integer", "string" };
            for (int i = 0; i < 7; i++) if (t & (1 << i)) cJSON_AddItemToArray(arr, cJSON_CreateString(N[i]));
            cJSON_ReplaceItemInObjectCaseSensitive(m, "type", arr);
        } else if (cJSON_IsNumber(x) && cJSON_IsNumber(have) && (!strcmp(k, "exclusiveMinimum") || !strcmp(k, "exclusiveMaximum"))) {
            if (k[10] == 'i' ? x->valuedouble > have->valuedouble : x->valuedouble < have->valuedouble)
                cJSON_SetNumberValue(have, x->valuedouble);
        } else if (!strcmp(k, "minimum") || !strcmp(k, "minLength") || !strcmp(k, "minItems") ||
                   !strcmp(k, "minProperties")) {
            if (cJSON_IsNumber(x) && x->valuedouble > have->valuedouble) cJSON_SetNumberValue(have, x->valuedouble);
        } else if (!strcmp(k, "maximum") || !strcmp(k, "maxLength") || !strcmp(k, "maxItems") ||
                   !strcmp(k, "maxProperties")) {
            if (cJSON_IsNumber(x) && x->valuedouble < have->valuedouble) cJSON_SetNumberValue(have, x->valuedouble);
        } else if (!strcmp(k, "additionalProperties") && (cJSON_IsFalse(x) || cJSON_IsFalse(have))) {
            cJSON_ReplaceItemInObjectCaseSensitive(m, k, cJSON_CreateFalse());
        } else {
            cJSON_Delete(m);
            return fail(c, "allOf: both parts set '%s' differently", k), NULL;
        }
    }
    /* additionalProperties false on one side forbids the other side's extra properties */
    for (int side = 0; side < 2; side++) {
        const cJSON *closed = side ? b : a;
        if (!cJSON_IsFalse(get(closed, "additionalProperties"))) continue;
        cJSON *mp = cJSON_GetObjectItemCaseSensitive(m, "properties");
        const cJSON *cp = get(closed, "properties");
        for (cJSON *p = mp ? mp->child : NULL; p;) {
            cJSON *nx = p->next;
            if (!get(cp, p->string)) {
                if (in_required(get(m, "required"), p->string)) {
                    fail(c, "allOf: required property '%s' is forbidden by additionalProperties false", p->string);
                    cJSON_Delete(m);   /* after the message: p belongs to m */
                    return NULL;
                }
                cJSON_DeleteItemFromObjectCaseSensitive(mp, p->string);
            }
            p = nx;
        }
    }
    return m;
}

/* ---- oneOf: alternatives proved exclusive ----
 * A value the grammar writes for alternative a is in S(a'), the set a' (a with the keywords made stricter that are
 * added below) validates; oneOf holds when no such value is in S(b) for another b, the alternative as written. The
 * facts read about S(x) come from x's own top-level keywords only ("type", "const"/"enum", "required",
 * "properties", "additionalProperties" false); any other keyword only narrows S(x), so ignoring it is safe. */

/* x with a "$ref" standing alone followed (depth-limited), else x. */
static const cJSON *deref(conv *c, const cJSON *x) {
    for (int i = 0; i < 16 && cJSON_IsObject(x) && cJSON_IsString(get(x, "$ref")); i++) {
        for (const cJSON *y = x->child; y; y = y->next)
            if (strcmp(y->string, "$ref") && !annotation(y->string)) return x;
        hearth_err scratch, *keep = c->err;   /* one that points nowhere is told when the alternative is visited */
        bool failed = c->failed;
        c->err = &scratch;
        const cJSON *t = resolve_ref(c, get(x, "$ref")->valuestring);
        c->err = keep, c->failed = failed;
        if (!t) return x;
        x = t;
    }
    return x;
}

/* The JSON types a value has (a number: both number and integer). */
static int value_type(const cJSON *v) {
    return cJSON_IsNull(v) ? T_NULL : cJSON_IsBool(v) ? T_BOOL : cJSON_IsObject(v) ? T_OBJECT : cJSON_IsArray(v) ? T_ARRAY
         : cJSON_IsNumber(v) ? T_NUMBER | T_INTEGER : T_STRING;
}

/* A value's kind for stypes: a number is T_INTEGER when whole (1.0 is an integer), else T_NUMBER. */
static int value_kind(const cJSON *v) {
    int t = value_type(v);
    return t & T_NUMBER ? (v->valuedouble == floor(v->valuedouble) ? T_INTEGER : T_NUMBER) : t;
}

/* The kinds of value S(x) may hold, from "type" and "const"/"enum": T_INTEGER stands for whole numbers, T_NUMBER
 * for the others ("number" is both; NONINT, set by oneOf, keeps only the others). */
static int stypes(const cJSON *x) {
    int m = T_ALL;
    const cJSON *t = get(x, "type"), *y;
    if (cJSON_IsString(t) || cJSON_IsArray(t)) {
        m = 0;
        if (cJSON_IsString(t)) m = type_bit(t->valuestring);
        else cJSON_ArrayForEach(y, t) m |= cJSON_IsString(y) ? type_bit(y->valuestring) : T_ALL;
        if (!m) m = T_ALL;   /* unknown names: assume anything */
        if (has(x, "nullable")) m |= T_NULL;
    }
    if (m & T_NUMBER) m |= T_INTEGER;
    if (cJSON_IsTrue(get(x, NONINT))) m &= ~T_INTEGER;
    if (has(x, "const")) m &= value_kind(get(x, "const"));
    else if (cJSON_IsArray(get(x, "enum"))) {
        int e = 0;
        cJSON_ArrayForEach(y, get(x, "enum")) e |= value_kind(y);
        m &= e;
    }
    return m;
}

/* Whether the value v is outside S(y), by y's const/enum or type. */
static bool value_excluded(const cJSON *v, const cJSON *y) {
    if (!(value_kind(v) & stypes(y))) return true;
    const cJSON *cy = get(y, "const"), *ey = get(y, "enum"), *z;
    if (cy) return !cJSON_Compare(v, cy, true);
    if (cJSON_IsArray(ey)) { cJSON_ArrayForEach(z, ey) if (cJSON_Compare(v, z, true)) return false; return true; }
    return false;
}

/* Whether y's objects never hold key k: additionalProperties false, k not declared nor matched by a pattern, or
 * declared false. */
static bool forbids_key(conv *c, const cJSON *y, const char *k) {
    const cJSON *p = get(get(y, "properties"), k), *x;
    if (p) return cJSON_IsFalse(p);
    if (!cJSON_IsFalse(get(y, "additionalProperties"))) return false;
    cJSON_ArrayForEach(x, get(y, "patternProperties")) {
        hearth_err scratch, *keep = c->err;
        bool failed = c->failed;
        c->err = &scratch;
        int m = pattern_matches(c, x->string, k);   /* one that does not compile: assume it matches */
        c->err = keep, c->failed = failed;
        if (m != 0) return false;
    }
    return true;
}

/* Whether S(x) and S(y) have no value in common (false when unsure). */
static bool sdisjoint(conv *c, const cJSON *x, const cJSON *y, int depth) {
    x = deref(c, x), y = deref(c, y);
    if (cJSON_IsFalse(x) || cJSON_IsFalse(y)) return true;
    if (!cJSON_IsObject(x) || !cJSON_IsObject(y) || depth > 8) return false;
    int common = stypes(x) & stypes(y);
    if (!common) return true;
    for (int side = 0; side < 2; side++) {   /* every listed value of one is outside the other */
        const cJSON *p = side ? y : x, *q = side ? x : y, *cv = get(p, "const"), *ev = get(p, "enum"), *v;
        if (cv && value_excluded(cv, q)) return true;
        if (!cv && cJSON_IsArray(ev)) {
            bool all = true;
            cJSON_ArrayForEach(v, ev) all &= value_excluded(v, q);
            if (all) return true;
        }
    }
    if (!(common & ~(T_NUMBER | T_INTEGER))) {   /* numbers only: bounds that leave no number to both */
        bool xl, xle, xh, xhe, yl, yle, yh, yhe, ok;
        double xlo = 0, xhi = 0, ylo = 0, yhi = 0;
        hearth_err scratch, *keep = c->err;
        bool failed = c->failed;
        c->err = &scratch;
        ok = bounds(c, x, &xl, &xlo, &xle, &xh, &xhi, &xhe) && bounds(c, y, &yl, &ylo, &yle, &yh, &yhi, &yhe);
        c->err = keep, c->failed = failed;
        if (ok && xh && yl && (xhi < ylo || (xhi == ylo && (xhe || yle)))) return true;
        if (ok && yh && xl && (yhi < xlo || (yhi == xlo && (yhe || xle)))) return true;
    }
    if (common != T_OBJECT) return false;
    for (int side = 0; side < 2; side++) {   /* a key one requires that the other forbids, or whose values differ */
        const cJSON *p = side ? y : x, *q = side ? x : y, *k;
        cJSON_ArrayForEach(k, get(p, "required")) {
            if (!cJSON_IsString(k)) continue;
            if (forbids_key(c, q, k->valuestring)) return true;
            const cJSON *pv = get(get(p, "properties"), k->valuestring), *qv = get(get(q, "properties"), k->valuestring);
            if (pv && qv && sdisjoint(c, pv, qv, depth + 1)) return true;
        }
    }
    return false;
}

/* g (an alternative as it will be visited) with key k required too: a new object. */
static cJSON *requiring(const cJSON *g, const char *k) {
    cJSON *m = cJSON_Duplicate(g, true), *r = m ? cJSON_GetObjectItemCaseSensitive(m, "required") : NULL;
    if (m && !r) r = cJSON_AddArrayToObject(m, "required");
    if (!r || !cJSON_AddItemToArray(r, cJSON_CreateString(k))) { cJSON_Delete(m); return NULL; }
    return m;
}

/* Whether x is an object schema without combinators or $ref (visited by its own keywords). */
static bool plain_object(const cJSON *x) {
    static const char *const COMB[] = { "$ref", "allOf", "anyOf", "oneOf", "not", "if" };
    bool plain = cJSON_IsObject(x);
    for (size_t i = 0; i < sizeof COMB / sizeof *COMB; i++) plain &= !has(x, COMB[i]);
    return plain;
}

/* Whether x says only which types it allows (every value of them matches); with ints, a multipleOf 1/n is
 * allowed too (every whole number matches). */
static bool only_types(const cJSON *x, bool ints) {
    if (!cJSON_IsObject(x)) return false;
    for (const cJSON *y = x->child; y; y = y->next) {
        if (ints && !strcmp(y->string, "multipleOf") && cJSON_IsNumber(y) && y->valuedouble > 0 && y->valuedouble <= 1) {
            double n = 1 / y->valuedouble;
            if (n == floor(n) && n < 1e9 && 1 / n == y->valuedouble) continue;
        }
        if (strcmp(y->string, "type") && strcmp(y->string, "nullable") && !annotation(y->string)) return false;
    }
    return true;
}

/* Makes the written alternatives g[] exclusive against the alternatives s[] as the schema states them: where a
 * pair may overlap, a key declared in g[a] that tells it from s[b] is made required in g[a] (stricter). */
static void make_exclusive(conv *c, cJSON **g, const cJSON **s, int n) {
    for (int a = 0; a < n && !c->failed; a++) {
        if (!g[a]) continue;
        const cJSON *p = deref(c, g[a]);
        if (cJSON_IsObject(p) && !has(p, "type") && !has(p, "const") && !has(p, "enum")) {
            /* visited by its own keywords' types: write them down, the grammar is the same */
            int t = plain_object(p) ? types_of(c, p) : T_ALL;
            if (t != T_ALL && !c->failed) {
                if (p != g[a]) {   /* a $ref: its target, copied */
                    cJSON *cp = cJSON_Duplicate(p, true);
                    if (!cp) { fail(c, "out of memory"); break; }
                    cJSON_Delete(g[a]);
                    g[a] = cp;
                }
                cJSON *arr = cJSON_AddArrayToObject(g[a], "type");
                static const char *const N[] = { "null", "boolean", "object", "array", "number", "integer", "string" };
                for (int i = 0; i < 7 && arr; i++) if (t & (1 << i)) cJSON_AddItemToArray(arr, cJSON_CreateString(N[i]));
            }
        }
        for (int b = 0; b < n && !c->failed && g[a]; b++) {
            if (b == a || !s[b] || sdisjoint(c, g[a], s[b], 0)) continue;
            bool done = false;
            p = deref(c, g[a]);
            int tp = stypes(p);
            if (only_types(s[b], tp == T_INTEGER) && !(tp & ~stypes(s[b]))) {   /* all it holds matches s[b] too: never valid */
                cJSON_Delete(g[a]);
                g[a] = NULL;
                break;
            }
            if ((tp & T_NUMBER) && plain_object(p) && !has(p, "const") && !has(p, "enum")) {   /* non-integers */
                cJSON *t = cJSON_Duplicate(p, true);
                if (!t || !cJSON_AddTrueToObject(t, NONINT)) { cJSON_Delete(t); fail(c, "out of memory"); break; }
                if (sdisjoint(c, t, s[b], 0)) { cJSON_Delete(g[a]); g[a] = t; continue; }
                cJSON_Delete(t);
            }
            const cJSON *props = cJSON_IsObject(p) ? get(p, "properties") : NULL, *k;
            cJSON_ArrayForEach(k, props) {
                cJSON *t = requiring(p, k->string);
                if (!t) { fail(c, "out of memory"); break; }
                if (sdisjoint(c, t, s[b], 0)) { cJSON_Delete(g[a]); g[a] = t; done = true; break; }
                cJSON_Delete(t);
            }
            if (!done && !c->failed)
                fail(c, "oneOf: alternatives %d and %d may both match and no keyword tells them apart (a property with "
                     "different const/enum values, different types, or a key only one allows): not supported", a < b ? a : b,
                     a < b ? b : a);
        }
    }
}

static char *alternatives(conv *c, const cJSON *s, const char *kw, const char *hint) {
    const cJSON *arr = get(s, kw);
    if (!cJSON_IsArray(arr) || !cJSON_GetArraySize(arr)) return fail(c, "\"%s\" must be a non-empty array", kw);
    cJSON *base = cJSON_Duplicate(s, true);
    if (!base) return fail(c, "out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(base, kw);
    bool siblings = false;
    for (const cJSON *x = base->child; x; x = x->next) siblings |= !annotation(x->string);
    int n = cJSON_GetArraySize(arr);
    cJSON **alt = calloc((size_t)n, sizeof *alt);
    if (!alt) { cJSON_Delete(base); return fail(c, "out of memory"); }
    const cJSON **stated = calloc((size_t)n, sizeof *stated);   /* each as the schema states it, refs resolved */
    if (!stated) { free(alt); cJSON_Delete(base); return fail(c, "out of memory"); }
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) {   /* each alternative with the schema's other keywords applied to it */
        const cJSON *xs = x;
        if (cJSON_IsObject(x) && cJSON_IsString(get(x, "$ref"))) xs = resolve_ref(c, get(x, "$ref")->valuestring);
        if (c->failed) break;
        if (cJSON_IsFalse(xs)) { i++; continue; }
        stated[i] = xs;
        alt[i] = siblings && cJSON_IsObject(xs) ? merge(c, base, xs) : siblings && cJSON_IsTrue(xs) ? cJSON_Duplicate(base, true)
               : cJSON_Duplicate(x, true);
        const cJSON *cv = get(alt[i], "const"), *ev = get(alt[i], "enum"), *v;
        if ((cv || cJSON_IsArray(ev)) && !has(alt[i], "$ref")) {   /* values the rest rules out: it matches nothing */
            bool any = cv && listed_value_ok(c, alt[i], cv) > 0;
            if (!cv) cJSON_ArrayForEach(v, ev) any |= !c->failed && listed_value_ok(c, alt[i], v) > 0;
            if (!any && !c->failed) { cJSON_Delete(alt[i]); alt[i] = NULL; }
        }
        i++;
        if (c->failed) break;
    }
    if (!c->failed && !strcmp(kw, "oneOf")) {
        size_t plen = strlen(c->path);
        snprintf(c->path + plen, sizeof c->path - plen, "/oneOf");
        make_exclusive(c, alt, stated, n);
        if (!c->failed) c->path[plen] = 0;
    }
    free(stated);
    ht_str b = { 0 };
    for (int a = 0; a < n && !c->failed; a++) {
        if (!alt[a]) continue;
        char tmp[128];
        snprintf(tmp, sizeof tmp, "%.40s-%d", hint, a);
        char *g = visit(c, alt[a], tmp);
        if (g) ht_str_printf(&b, "%s%s", b.n ? " | " : "", g);
        free(g);
    }
    for (int a = 0; a < n; a++) cJSON_Delete(alt[a]);
    free(alt);
    cJSON_Delete(base);
    if (c->failed) { free(b.p); return NULL; }
    if (!b.n) { free(b.p); return fail(c, "\"%s\": no alternative can match", kw); }
    return b.oom ? fail(c, "out of memory") : add_rule(c, hint, b.p);
}

/* A part of an allOf with its own $ref and allOf merged in, recursively: a new object without either, or NULL. */
static cJSON *flat(conv *c, const cJSON *x, int depth) {
    if (depth > 16) return fail(c, "allOf: $ref/allOf nested more than 16 deep (recursion) is not supported"), NULL;
    if (cJSON_IsTrue(x)) return cJSON_CreateObject();
    if (!cJSON_IsObject(x)) return fail(c, "allOf holds a schema that matches nothing"), NULL;
    cJSON *m = cJSON_Duplicate(x, true);
    if (!m) return fail(c, "out of memory"), NULL;
    cJSON *ref = cJSON_DetachItemFromObjectCaseSensitive(m, "$ref"), *all = cJSON_DetachItemFromObjectCaseSensitive(m, "allOf");
    if (ref) {
        const cJSON *t = cJSON_IsString(ref) ? resolve_ref(c, ref->valuestring) : (fail(c, "\"$ref\" must be a string"), NULL);
        cJSON *ft = t ? flat(c, t, depth + 1) : NULL, *n = ft ? merge(c, ft, m) : NULL;
        cJSON_Delete(ft);
        cJSON_Delete(m);
        m = n;
    }
    const cJSON *p;
    if (m && all && !cJSON_IsArray(all)) fail(c, "\"allOf\" must be an array");
    if (m && cJSON_IsArray(all)) cJSON_ArrayForEach(p, all) {
        cJSON *fp = flat(c, p, depth + 1), *n = fp ? merge(c, m, fp) : NULL;
        cJSON_Delete(fp);
        cJSON_Delete(m);
        m = n;
        if (!m) break;
    }
    cJSON_Delete(ref);
    cJSON_Delete(all);
    if (c->failed) { cJSON_Delete(m); return NULL; }
    return m;
}

/* Removes from m a property that names lists (one not required), so an object never holds them all. */
static bool not_all_of(conv *c, cJSON *m, const cJSON *names) {
    cJSON *props = cJSON_GetObjectItemCaseSensitive(m, "properties");
    bool closed = cJSON_IsFalse(get(m, "additionalProperties")) && !has(m, "patternProperties");
    if (!closed && (!cJSON_IsObject(props) || !props->child))   /* a map: any key may be written */
        return fail(c, "\"not\" with \"required\" on an object without \"properties\" is not supported"), false;
    const cJSON *y;
    cJSON_ArrayForEach(y, names) {
        if (!cJSON_IsString(y)) return fail(c, "\"required\" must hold strings"), false;
        if (!get(props, y->valuestring)) return true;   /* never written: they are never all there */
    }
    cJSON_ArrayForEach(y, names) if (!in_required(get(m, "required"), y->valuestring)) {
        drop_property(m, y->valuestring);
        return true;
    }
    return fail(c, "\"not\": the properties it forbids together are all required"), false;
}

/* ---- not const/enum on a type without a list of values ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* m (one type, t) without the values in ex (an array): booleans as the other one, integers and numbers as an
 * anyOf of the intervals between them, plain strings through EXCEPT_KEY. False after failing. */
static bool except_values(conv *c, cJSON *m, int t, const cJSON *ex) {
    const cJSON *v;
    if (t == T_BOOL) {
        cJSON *en = cJSON_CreateArray();
        for (int b = 0; b < 2 && en; b++) {
            bool out = false;
            cJSON_ArrayForEach(v, ex) out |= cJSON_IsBool(v) && !cJSON_IsTrue(v) == !b;
            if (!out) cJSON_AddItemToArray(en, cJSON_CreateBool(b));
        }
        if (!en || !cJSON_AddItemToObject(m, "enum", en)) return fail(c, "out of memory"), false;
        if (!cJSON_GetArraySize(en)) return fail(c, "\"not\" excludes every value the schema allows"), false;
        return true;
    }
    if (t == T_NULL) {
        cJSON_ArrayForEach(v, ex) if (cJSON_IsNull(v)) return fail(c, "\"not\" excludes every value the schema allows"), false;
        return true;
    }
    if (t == T_INTEGER || t == T_NUMBER) {
        bool has_lo, lo_ex, has_hi, hi_ex;
        double lo = 0, hi = 0;
        if (!bounds(c, m, &has_lo, &lo, &lo_ex, &has_hi, &hi, &hi_ex)) return false;
        if (has(m, "anyOf") || has(m, "oneOf")) return fail(c, "\"not\" with a value list beside anyOf/oneOf is not supported"), false;
        double e[64];
        int n = 0;
        cJSON_ArrayForEach(v, ex) {
            if (!cJSON_IsNumber(v)) continue;
            double x = v->valuedouble;
            if (t == T_INTEGER && x != floor(x)) continue;   /* never an integer */
            if ((has_lo && (x < lo || (lo_ex && x == lo))) || (has_hi && (x > hi || (hi_ex && x == hi)))) continue;
            if (n == 64) return fail(c, "\"not\" with more than 64 numbers is not supported"), false;
            e[n++] = x;
        }
        if (!n) return true;
        qsort(e, (size_t)n, sizeof *e, cmp_double);
        cJSON *any = cJSON_AddArrayToObject(m, "anyOf");
        if (!any) return fail(c, "out of memory"), false;
        for (int i = 0; i <= n; i++) {   /* the gap below e[i] (above e[i-1]) */
            if (i && i < n && e[i] == e[i - 1]) continue;
            double a = i ? e[i - 1] : 0, b = i < n ? e[i] : 0;
            if (i && i < n && floor(a) + 1 >= b) continue;   /* no whole number between: left out (stricter) */
            cJSON *gap = cJSON_CreateObject();
            if (!gap) return fail(c, "out of memory"), false;
            if (t == T_INTEGER) {
                if (i) cJSON_AddNumberToObject(gap, "minimum", a + 1);
                if (i < n) cJSON_AddNumberToObject(gap, "maximum", b - 1);
            } else {
                if (i) cJSON_AddNumberToObject(gap, "exclusiveMinimum", a);
                if (i < n) cJSON_AddNumberToObject(gap, "exclusiveMaximum", b);
            }
            bool empty = (i == 0 && has_lo && (t == T_INTEGER ? b - 1 < lo : b <= lo)) ||
                         (i == n && has_hi && (t == T_INTEGER ? a + 1 > hi : a >= hi));
            if (empty) cJSON_Delete(gap);
            else cJSON_AddItemToArray(any, gap);
        }
        if (!cJSON_GetArraySize(any)) return fail(c, "\"not\" excludes every value the schema allows"), false;
        return true;
    }
    if (t == T_STRING) {
        for (const cJSON *x = m->child; x; x = x->next)
            if (!annotation(x->string) && strcmp(x->string, "type") && strcmp(x->string, "nullable"))
                return fail(c, "\"not\" with strings beside '%s' is not supported (beside a plain string it is)", x->string), false;
        cJSON *words = cJSON_CreateArray();
        if (!words || !cJSON_AddItemToObject(m, EXCEPT_KEY, words)) { cJSON_Delete(words); return fail(c, "out of memory"), false; }
        size_t total = 0;
        cJSON_ArrayForEach(v, ex) {
            if (!cJSON_IsString(v)) continue;
            for (const unsigned char *q = (const unsigned char *)v->valuestring; *q; q++)
                if (*q < 0x20 || *q >= 0x7f || *q == '"' || *q == '\\')
                    return fail(c, "\"not\" of strings with characters outside printable ASCII, quotes or backslashes is not supported"), false;
            if ((total += strlen(v->valuestring)) > 4000) return fail(c, "\"not\" with too many strings is not supported"), false;
            cJSON_AddItemToArray(words, cJSON_CreateString(v->valuestring));
        }
        return true;
    }
    return fail(c, "\"not\" with values of this type is not supported"), false;
}

/* Plain strings other than the words (printable ASCII), written without escapes (stricter): a trie of the words
 * where leaving it (or going on past a word's end) frees the rest; a rule per prefix (HINT-except...). */
static char *string_except(conv *c, const cJSON *words, const char *hint) {
    free(prim(c, "space"));
    char *free_rest = add_rule(c, "plain-chars", xstrdup(c, "[^\"\\\\\\x7F\\x00-\\x1F]*"));
    if (!free_rest) return NULL;
    char name[160];
    char **pre = NULL;   /* every distinct prefix of a word: a node */
    int np = 0, cap = 0;
    const cJSON *w;
    cJSON_ArrayForEach(w, words) {
        size_t L = strlen(w->valuestring);
        for (size_t l = 0; l <= L; l++) {
            bool seen = false;
            for (int i = 0; i < np && !seen; i++) seen = strlen(pre[i]) == l && !strncmp(pre[i], w->valuestring, l);
            if (seen) continue;
            if (np == cap) {
                cap = cap ? cap * 2 : 16;
                char **np2 = realloc(pre, (size_t)cap * sizeof *pre);
                if (!np2) { fail(c, "out of memory"); break; }
                pre = np2;
            }
            pre[np] = strndup(w->valuestring, l);
            if (!pre[np]) { fail(c, "out of memory"); break; }
            np++;
        }
    }
    char **rule = calloc((size_t)np + 1, sizeof *rule);
    if (!rule && np) fail(c, "out of memory");
    size_t longest = 0;
    for (int i = 0; i < np; i++) if (strlen(pre[i]) > longest) longest = strlen(pre[i]);
    for (size_t len = longest + 1; len-- > 0 && !c->failed;) {   /* longest first: a node's children have rules */
        for (int i = 0; i < np && !c->failed; i++) {
            if (strlen(pre[i]) != len) continue;
            bool word = false;
            cJSON_ArrayForEach(w, words) word |= !strcmp(w->valuestring, pre[i]);
            ht_str b = { 0 }, cls = { 0 };
            if (!word) ht_str_puts(&b, "\"\"");   /* may end here */
            for (int j = 0; j < np; j++) {   /* children: one character longer */
                if (strlen(pre[j]) != len + 1 || strncmp(pre[j], pre[i], len)) continue;
                unsigned char ch = (unsigned char)pre[j][len];
                ht_str_printf(&b, "%s", b.n ? " | " : "");
                sb_literal(&b, (const char *)&ch, 1);
                ht_str_printf(&b, " %s", rule[j]);
                ht_str_printf(&cls, "\\x%02X", ch);
            }
            ht_str_printf(&b, "%s[^\"\\\\\\x7F\\x00-\\x1F%s] %s", b.n ? " | " : "", cls.p ? cls.p : "", free_rest);
            free(cls.p);
            snprintf(name, sizeof name, "%.40s-except", hint);
            rule[i] = b.oom ? fail(c, "out of memory") : add_rule(c, name, b.p);
        }
    }
    char *out = NULL;
    if (!c->failed) {
        int root = -1;
        for (int i = 0; i < np; i++) if (!pre[i][0]) root = i;
        ht_str b = { 0 };
        if (root >= 0) ht_str_printf(&b, "\"\\\"\" %s \"\\\"\" space", rule[root]);
        else ht_str_printf(&b, "\"\\\"\" %s \"\\\"\" space", free_rest);   /* no words */
        out = b.oom ? fail(c, "out of memory") : add_rule(c, hint, b.p);
    }
    for (int i = 0; i < np; i++) { free(pre[i]); if (rule) free(rule[i]); }
    free(pre);
    free(rule);
    free(free_rest);
    return out;
}

/* not {properties: {k: S}} (with required [k] or not): the value is an object (anything else satisfies the
 * inner schema), and k's value is not in S (present when the inner one does not require it). */
static bool not_property(conv *c, cJSON *m, const cJSON *n) {
    const cJSON *ip = get(n, "properties"), *ir = get(n, "required");
    const char *k = ip->child->string;
    bool req = ir != NULL;
    int t = types_of(c, m);
    if (!(t & T_OBJECT)) return fail(c, "\"not\" excludes every value the schema allows"), false;
    cJSON *ty = cJSON_CreateString("object");
    if (has(m, "type")) cJSON_ReplaceItemInObjectCaseSensitive(m, "type", ty);
    else cJSON_AddItemToObject(m, "type", ty);
    cJSON *props = cJSON_GetObjectItemCaseSensitive(m, "properties");
    cJSON *own = props ? cJSON_GetObjectItemCaseSensitive(props, k) : NULL;
    if (!cJSON_IsObject(props) || !cJSON_GetArraySize(props))
        return fail(c, "\"not\" with \"properties\" on an object without \"properties\" is not supported"), false;
    if (!own || cJSON_IsFalse(own)) {   /* never written: objects never hold k */
        if (!req) return fail(c, "\"not\": property '%s' it requires to be there is not declared", k), false;
        return true;
    }
    cJSON *both = cJSON_CreateObject(), *all = both ? cJSON_AddArrayToObject(both, "allOf") : NULL, *neg = cJSON_CreateObject();
    if (!all || !neg) { cJSON_Delete(both); cJSON_Delete(neg); return fail(c, "out of memory"), false; }
    cJSON_AddItemToArray(all, cJSON_Duplicate(own, true));
    cJSON_AddItemToObject(neg, "not", cJSON_Duplicate(ip->child, true));
    cJSON_AddItemToArray(all, neg);
    cJSON_ReplaceItemInObjectCaseSensitive(props, k, both);
    if (!req) {
        cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "required");
        if (!r) r = cJSON_AddArrayToObject(m, "required");
        if (r && !in_required(r, k)) cJSON_AddItemToArray(r, cJSON_CreateString(k));
    }
    return true;
}

/* The bounds "not" turns into their opposites: numbers' four, then minLength/maxLength, minItems/maxItems,
 * minProperties/maxProperties; -1 for other keywords. */
static int bound_index(const char *k) {
    static const char *const B[] = { "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
                                     "maxLength", "minItems", "maxItems", "minProperties", "maxProperties" };
    for (int i = 0; i < 10; i++) if (!strcmp(k, B[i])) return i;
    return -1;
}

/* s without its "not", made stricter so that nothing it allows matches the negated schema. The forms read: not
 * type, not required (and not anyOf of requireds), not enum/const (beside an enum; or on booleans, integers,
 * numbers, plain strings, or the one type of several the values touch), not {properties: {k: S}} (k not in S,
 * with required [k] or without), not of one bound (the opposite bound). A new object, or NULL. */
static cJSON *negated(conv *c, const cJSON *s) {
    const cJSON *n = get(s, "not");
    cJSON *m = cJSON_Duplicate(s, true);
    if (!m) return fail(c, "out of memory"), NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(m, "not");
    if (has(m, "required") && object_shapes_ok(c, m) && !declare_required(c, m)) { cJSON_Delete(m); return NULL; }   /* they are written */
    if (c->failed) { cJSON_Delete(m); return NULL; }
    const char *kw = NULL;
    int n_kw = 0;
    for (const cJSON *x = cJSON_IsObject(n) ? n->child : NULL; x; x = x->next)
        if (!annotation(x->string)) kw = x->string, n_kw++;
    if (cJSON_IsFalse(n)) { /* not false: no constraint */ }
    else if (cJSON_IsTrue(n) || (cJSON_IsObject(n) && !n_kw)) fail(c, "\"not\" of a schema that matches everything: nothing matches");
    else if (n_kw == 1 && !strcmp(kw, "type")) {
        int nt = types_of(c, n), mt = types_of(c, m);
        if (nt & T_NUMBER) nt |= T_INTEGER;
        int r = mt & ~nt;
        if ((mt & T_NUMBER) && (nt & T_INTEGER) && !(nt & T_NUMBER)) r &= ~T_NUMBER;   /* non-integers: none (stricter) */
        if (!r && !c->failed) fail(c, "\"not\" excludes every type the schema allows");
        cJSON *arr = cJSON_CreateArray();
        static const char *const N[] = { "null", "boolean", "object", "array", "number", "integer", "string" };
        for (int i = 0; i < 7; i++) if (r & (1 << i)) cJSON_AddItemToArray(arr, cJSON_CreateString(N[i]));
        if (has(m, "type")) cJSON_ReplaceItemInObjectCaseSensitive(m, "type", arr);
        else cJSON_AddItemToObject(m, "type", arr);
    } else if (n_kw == 1 && !strcmp(kw, "required")) not_all_of(c, m, get(n, "required"));
    else if (n_kw == 1 && (!strcmp(kw, "anyOf") || !strcmp(kw, "oneOf")) && cJSON_IsArray(get(n, kw))) {
        const cJSON *alt;
        cJSON_ArrayForEach(alt, get(n, kw)) {
            int k = 0;
            for (const cJSON *x = cJSON_IsObject(alt) ? alt->child : NULL; x; x = x->next) k += !annotation(x->string);
            if (k != 1 || !has(alt, "required")) { fail(c, "\"not\" of this form is not supported (not type, required, anyOf of required, const/enum, one bound, properties of one key are)"); break; }
            if (!not_all_of(c, m, get(alt, "required"))) break;
        }
    } else if (n_kw == 1 && (!strcmp(kw, "enum") || !strcmp(kw, "const")) && cJSON_IsArray(get(m, "enum"))) {
        cJSON *en = cJSON_GetObjectItemCaseSensitive(m, "enum");
        for (int i = cJSON_GetArraySize(en) - 1; i >= 0; i--) {
            const cJSON *v = cJSON_GetArrayItem(en, i), *y;
            bool out = kw[0] == 'c' && cJSON_Compare(v, get(n, "const"), true);
            if (kw[0] == 'e') cJSON_ArrayForEach(y, get(n, "enum")) out |= cJSON_Compare(v, y, true);
            if (out) cJSON_DeleteItemFromArray(en, i);
        }
        if (!cJSON_GetArraySize(en)) fail(c, "\"not\" excludes every value of the \"enum\"");
    } else if (n_kw == 1 && (!strcmp(kw, "enum") || !strcmp(kw, "const")) && !has(m, "const") &&
               (kw[0] == 'c' || cJSON_IsArray(get(n, "enum")))) {
        cJSON *ex = kw[0] == 'c' ? cJSON_CreateArray() : cJSON_Duplicate(get(n, "enum"), true);
        if (ex && kw[0] == 'c') cJSON_AddItemToArray(ex, cJSON_Duplicate(get(n, "const"), true));
        int t = types_of(c, m), hit = 0;   /* the types some excluded value has */
        const cJSON *v;
        cJSON_ArrayForEach(v, ex) {
            int vt = value_type(v) & t;
            if ((vt & T_INTEGER) && v->valuedouble != floor(v->valuedouble)) vt &= ~T_INTEGER;
            hit |= vt;
        }
        int bits = 0;
        for (int i = 0; i < 7; i++) bits += !!(t & (1 << i));
        static const char *const N[] = { "null", "boolean", "object", "array", "number", "integer", "string" };
        int n_bool = 0;
        cJSON_ArrayForEach(v, ex) n_bool += cJSON_IsTrue(v) ? 1 : cJSON_IsFalse(v) ? 2 : 0;
        if (!ex) fail(c, "out of memory");
        else if (!hit) {}
        else if (bits == 1) except_values(c, m, t, ex);
        else if (hit == T_NULL || (hit == T_BOOL && n_bool == 3)) {   /* that type goes */
            cJSON *arr = cJSON_CreateArray();
            for (int i = 0; i < 7 && arr; i++) if ((t & ~hit) & (1 << i)) cJSON_AddItemToArray(arr, cJSON_CreateString(N[i]));
            if (!arr) fail(c, "out of memory");
            else if (has(m, "type")) cJSON_ReplaceItemInObjectCaseSensitive(m, "type", arr);
            else cJSON_AddItemToObject(m, "type", arr);
            cJSON_DeleteItemFromObjectCaseSensitive(m, "nullable");
        }
        else if (hit == T_BOOL || hit == T_INTEGER || hit == T_NUMBER || hit == T_STRING) {
            if (has(m, "anyOf") || has(m, "oneOf")) fail(c, "\"not\" with a value list beside anyOf/oneOf is not supported");
            else {   /* the one type the values touch, apart: anyOf [that type without them, the other types] */
                cJSON *any = cJSON_AddArrayToObject(m, "anyOf"), *one = cJSON_CreateObject(), *rest = cJSON_CreateObject();
                cJSON *rt = rest ? cJSON_AddArrayToObject(rest, "type") : NULL;
                for (int i = 0; i < 7 && rt; i++) if ((t & ~hit) & (1 << i)) cJSON_AddItemToArray(rt, cJSON_CreateString(N[i]));
                if (one) {
                    for (int i = 0; i < 7; i++) if (hit & (1 << i)) cJSON_AddStringToObject(one, "type", N[i]);
                    cJSON *nn = cJSON_AddObjectToObject(one, "not");
                    if (nn) cJSON_AddItemToObject(nn, kw, cJSON_Duplicate(get(n, kw), true));
                }
                if (!any || !one || !rt) { cJSON_Delete(one); cJSON_Delete(rest); fail(c, "out of memory"); }
                else {
                    cJSON_AddItemToArray(any, one);
                    cJSON_AddItemToArray(any, rest);
                    cJSON_DeleteItemFromObjectCaseSensitive(m, "type");   /* each alternative says its own */
                    cJSON_DeleteItemFromObjectCaseSensitive(m, "nullable");
                }
            }
        } else fail(c, "\"not\" with values of several types is not supported");
        cJSON_Delete(ex);
    } else if (cJSON_IsObject(get(n, "properties")) && cJSON_GetArraySize(get(n, "properties")) == 1 &&
               (n_kw == 1 || (n_kw == 2 && cJSON_IsArray(get(n, "required")) && cJSON_GetArraySize(get(n, "required")) == 1 &&
                              cJSON_IsString(get(n, "required")->child) &&
                              !strcmp(get(n, "required")->child->valuestring, get(n, "properties")->child->string)))) {
        not_property(c, m, n);
    } else if (n_kw == 1 && cJSON_IsNumber(get(n, kw)) && bound_index(kw) >= 0) {
        /* a bound constrains one type only: not it is the opposite bound on that type, the others untouched */
        static const char *const TO[] = { "exclusiveMaximum", "exclusiveMinimum", "maximum", "minimum", "maxLength",
                                          "minLength", "maxItems", "minItems", "maxProperties", "minProperties" };
        int i = bound_index(kw);
        double v = get(n, kw)->valuedouble, to = i < 4 ? v : i % 2 ? v + 1 : v - 1;   /* counts: < n is <= n - 1 */
        cJSON *opp = cJSON_CreateObject(), *r = NULL;
        if (cJSON_IsBool(get(m, "exclusiveMinimum")) || cJSON_IsBool(get(m, "exclusiveMaximum")))
            fail(c, "\"not\" with a bound beside draft-04 boolean exclusive bounds is not supported");
        else if (i >= 4 && (v != floor(v) || to < 0 || to > 1e6))
            fail(c, "\"not\" of %s %g: every value of its type is excluded, or the count is not whole (not supported)", kw, v);
        else if (!opp || !cJSON_AddNumberToObject(opp, TO[i], to)) fail(c, "out of memory");
        else r = merge(c, m, opp);
        cJSON_Delete(opp);
        if (r) { cJSON_Delete(m); m = r; }
    } else fail(c, "\"not\" of this form is not supported (not type, required, anyOf of required, const/enum, one bound, properties of one key are)");
    if (c->failed) { cJSON_Delete(m); return NULL; }
    return m;
}

/* A copy of base whose property k only takes values from vals (an enum array); required too when req. */
static cJSON *with_values(const cJSON *base, const char *k, const cJSON *vals, bool req) {
    cJSON *m = cJSON_Duplicate(base, true), *props = m ? cJSON_GetObjectItemCaseSensitive(m, "properties") : NULL;
    cJSON *own = props ? cJSON_GetObjectItemCaseSensitive(props, k) : NULL, *v = cJSON_CreateArray(), *both = NULL;
    const cJSON *x, *y;
    if (!own || !v) { cJSON_Delete(m); cJSON_Delete(v); return NULL; }
    cJSON_ArrayForEach(x, vals) {   /* the values the property's own enum or const allows too */
        bool ok = true;
        if (get(own, "enum")) { ok = false; cJSON_ArrayForEach(y, get(own, "enum")) ok |= cJSON_Compare(x, y, true); }
        if (get(own, "const")) ok &= cJSON_Compare(x, get(own, "const"), true);
        if (ok) cJSON_AddItemToArray(v, cJSON_Duplicate(x, true));
    }
    if (get(own, "enum") || get(own, "const")) {   /* the listed values replace the property's own */
        both = cJSON_CreateObject();
        cJSON_AddItemToObject(both, "enum", v);
    } else {
        both = cJSON_CreateObject();
        cJSON *arr = cJSON_AddArrayToObject(both, "allOf"), *e = cJSON_CreateObject();
        cJSON_AddItemToObject(e, "enum", v);
        cJSON_AddItemToArray(arr, cJSON_Duplicate(own, true));
        cJSON_AddItemToArray(arr, e);
    }
    if (!cJSON_GetArraySize(get(both, "enum") ? get(both, "enum") : v)) { cJSON_Delete(m); cJSON_Delete(both); return NULL; }
    cJSON_ReplaceItemInObjectCaseSensitive(props, k, both);   /* in place: properties are written in order */
    if (req) {
        cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "required");
        if (!r) r = cJSON_AddArrayToObject(m, "required");
        if (r && !in_required(r, k)) cJSON_AddItemToArray(r, cJSON_CreateString(k));
    }
    return m;
}

/* if/then/else for an "if" whose negation is a "not" form that is read (type, required, const/enum, one
 * property's schema, ...): anyOf [base with the if and then, base with not-if and else]. Takes base. */
static cJSON *conditional_general(conv *c, cJSON *base, const cJSON *I, const cJSON *T, const cJSON *E) {
    hearth_err scratch = { "" }, *keep = c->err;   /* a failure inside is told as the "if"'s */
    c->err = &scratch;
    cJSON *any = cJSON_CreateObject(), *alts = any ? cJSON_AddArrayToObject(any, "anyOf") : NULL;
    if (!alts) fail(c, "out of memory");
    if (!cJSON_IsObject(I) && !cJSON_IsBool(I)) fail(c, "\"if\" must be a schema");
    if (has(base, "not")) fail(c, "\"if\" beside \"not\" is not supported");
    bool then_ok = !cJSON_IsFalse(I) && !cJSON_IsFalse(T);
    const cJSON *ireq = cJSON_IsObject(I) ? get(I, "required") : NULL, *r;
    cJSON_ArrayForEach(r, ireq)   /* a key base never writes: never true */
        if (cJSON_IsString(r) && !get(get(base, "properties"), r->valuestring) && cJSON_IsFalse(get(base, "additionalProperties")))
            then_ok = false;
    if (then_ok && !c->failed) {
        cJSON *t = cJSON_IsObject(I) ? merge(c, base, I) : cJSON_Duplicate(base, true);
        if (t && cJSON_IsObject(T)) { cJSON *tm = merge(c, t, T); cJSON_Delete(t); t = tm; }
        if (t && !c->failed) cJSON_AddItemToArray(alts, t);
        else cJSON_Delete(t);
    }
    if (!cJSON_IsTrue(I) && !cJSON_IsFalse(E) && !c->failed) {
        cJSON *e = cJSON_Duplicate(base, true), *ne = NULL;
        if (e && cJSON_AddItemToObject(e, "not", cJSON_Duplicate(I, true))) ne = negated(c, e);
        else fail(c, "out of memory");
        cJSON_Delete(e);
        if (ne && cJSON_IsObject(E)) { cJSON *em = merge(c, ne, E); cJSON_Delete(ne); ne = em; }
        if (ne && !c->failed) cJSON_AddItemToArray(alts, ne);
        else cJSON_Delete(ne);
    }
    if (!c->failed && !cJSON_GetArraySize(alts)) fail(c, "if/then/else: no value can satisfy it");
    cJSON_Delete(base);
    c->err = keep;
    if (c->failed) {
        const char *why = strstr(scratch.msg, ": ");
        c->failed = false;
        fail(c, "\"if\" of this form is not supported (%s)", why ? why + 2 : scratch.msg);
        cJSON_Delete(any);
        return NULL;
    }
    return any;
}

/* if/then/else in its common form, an "if" on one declared property's const or enum (maybe required): the
 * anyOf of the objects where it holds (with "then") and those where it does not (with "else"), each exact. */
static cJSON *conditional(conv *c, const cJSON *s) {
    const cJSON *I = get(s, "if"), *T = get(s, "then"), *E = get(s, "else");
    cJSON *base = cJSON_Duplicate(s, true);
    if (!base) return fail(c, "out of memory"), NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(base, "if");
    cJSON_DeleteItemFromObjectCaseSensitive(base, "then");
    cJSON_DeleteItemFromObjectCaseSensitive(base, "else");
    const cJSON *ip = cJSON_IsObject(I) ? get(I, "properties") : NULL, *x;
    bool form = cJSON_IsObject(ip) && cJSON_GetArraySize(ip) == 1;
    for (x = cJSON_IsObject(I) ? I->child : NULL; x && form; x = x->next)
        form = annotation(x->string) || !strcmp(x->string, "properties") || !strcmp(x->string, "required");
    const cJSON *cond = form ? ip->child : NULL;
    const char *k = cond ? cond->string : NULL;
    const cJSON *iv = cond ? get(cond, "enum") : NULL, *ic = cond ? get(cond, "const") : NULL;
    form = form && cJSON_IsObject(cond) && cJSON_GetArraySize(cond) == 1 && (cJSON_IsArray(iv) || ic);
    const cJSON *ir = form ? get(I, "required") : NULL;
    form = form && (!ir || (cJSON_GetArraySize(ir) == 1 && cJSON_IsString(ir->child) && !strcmp(ir->child->valuestring, k)));
    const cJSON *own = form ? get(get(base, "properties"), k) : NULL;
    bool listed = own && (get(own, "enum") || get(own, "const") ||
                          (cJSON_IsString(get(own, "type")) && !strcmp(get(own, "type")->valuestring, "boolean")));
    if (!form || !listed) return conditional_general(c, base, I, T, E);   /* the else: through "not" */
    bool if_req = ir != NULL, base_req = in_required(get(base, "required"), k);
    cJSON *ivals = cJSON_CreateArray(), *rest = cJSON_CreateArray(), *any = cJSON_CreateObject();
    cJSON *alts = any ? cJSON_AddArrayToObject(any, "anyOf") : NULL;
    if (ic) cJSON_AddItemToArray(ivals, cJSON_Duplicate(ic, true));
    else cJSON_ArrayForEach(x, iv) cJSON_AddItemToArray(ivals, cJSON_Duplicate(x, true));
    const cJSON *known = get(own, "enum");   /* the property's own values, when listed */
    cJSON *ob = NULL;
    if (!known && cJSON_IsBool(get(own, "const"))) known = NULL;
    if (!known && get(own, "const")) { ob = cJSON_CreateArray(); cJSON_AddItemToArray(ob, cJSON_Duplicate(get(own, "const"), true)); known = ob; }
    if (!known && cJSON_IsString(get(own, "type")) && !strcmp(get(own, "type")->valuestring, "boolean")) {
        ob = cJSON_CreateArray();
        cJSON_AddItemToArray(ob, cJSON_CreateTrue());
        cJSON_AddItemToArray(ob, cJSON_CreateFalse());
        known = ob;
    }
    cJSON_ArrayForEach(x, known) {
        bool in = false;
        const cJSON *y;
        cJSON_ArrayForEach(y, ivals) in |= cJSON_Compare(x, y, true);
        if (!in) cJSON_AddItemToArray(rest, cJSON_Duplicate(x, true));
    }
    /* then: k's value in the if's (present, when the if requires it; absent k also satisfies an if that does not) */
    cJSON *t = with_values(base, k, ivals, if_req || base_req), *tm = t && cJSON_IsObject(T) ? merge(c, t, T) : NULL;
    if (t && cJSON_IsFalse(T)) { cJSON_Delete(t); t = NULL; }
    if (tm) { cJSON_Delete(t); t = tm; }
    if (t && !c->failed) cJSON_AddItemToArray(alts, t); else cJSON_Delete(t);
    /* else: k's value outside the if's (present, unless the if requires k: then absent counts too) */
    cJSON *e = NULL;
    if (known && cJSON_GetArraySize(rest)) e = with_values(base, k, rest, !if_req || base_req);
    else if (if_req && !base_req) {   /* k absent */
        e = cJSON_Duplicate(base, true);
        drop_property(e, k);
    }
    if (e && cJSON_IsFalse(E)) { cJSON_Delete(e); e = NULL; }
    cJSON *em = e && cJSON_IsObject(E) && !c->failed ? merge(c, e, E) : NULL;
    if (em) { cJSON_Delete(e); e = em; }
    if (e && !c->failed) cJSON_AddItemToArray(alts, e); else cJSON_Delete(e);
    cJSON_Delete(ivals); cJSON_Delete(rest); cJSON_Delete(ob); cJSON_Delete(base);
    if (!c->failed && !cJSON_GetArraySize(alts)) fail(c, "if/then/else: no object can satisfy it");
    if (c->failed) { cJSON_Delete(any); return NULL; }
    return any;
}

/* Whether the listed (const/enum) value v satisfies s's other keywords: its type, numeric bounds, string lengths
 * and pattern; a value of a type that another keyword applies to (properties, items, format, multipleOf, ...)
 * is left out (stricter). 1 yes, 0 no, -1 after failing. */
static int listed_value_ok(conv *c, const cJSON *s, const cJSON *v) {
    int vt = value_type(v);
    if (cJSON_IsNumber(v) && v->valuedouble != floor(v->valuedouble)) vt &= ~T_INTEGER;
    if (has(s, "type")) {
        int t = types_of(c, s);
        if (c->failed) return -1;
        if (t & T_NUMBER) t |= T_INTEGER;
        if (!(vt & t)) return 0;
    }
    for (const cJSON *x = s->child; x; x = x->next) {
        const char *k = x->string;
        if (annotation(k) || !strcmp(k, "type") || !strcmp(k, "enum") || !strcmp(k, "const") || !strcmp(k, "nullable")) continue;
        if (cJSON_IsNumber(v) && cJSON_IsNumber(x)) {
            double d = v->valuedouble, b = x->valuedouble;
            if (!strcmp(k, "minimum")) { if (d < b) return 0; continue; }
            if (!strcmp(k, "maximum")) { if (d > b) return 0; continue; }
            if (!strcmp(k, "exclusiveMinimum")) { if (d <= b) return 0; continue; }
            if (!strcmp(k, "exclusiveMaximum")) { if (d >= b) return 0; continue; }
        }
        if (cJSON_IsString(v) && (!strcmp(k, "minLength") || !strcmp(k, "maxLength")) && cJSON_IsNumber(x)) {
            double n = 0;
            for (const unsigned char *q = (const unsigned char *)v->valuestring; *q; q++) n += (*q & 0xc0) != 0x80;
            if (k[1] == 'i' ? n < x->valuedouble : n > x->valuedouble) return 0;
            continue;
        }
        if (!strcmp(k, "format") && cJSON_IsString(x)) {   /* an unknown name is an annotation */
            bool known = false;
            for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++) known |= !strcmp(FORMATS[i].name, x->valuestring);
            for (size_t i = 0; i < sizeof HARD_FORMATS / sizeof HARD_FORMATS[0]; i++) known |= !strcmp(HARD_FORMATS[i], x->valuestring);
            if (!known) continue;
        }
        if (cJSON_IsString(v) && !strcmp(k, "pattern") && cJSON_IsString(x)) {
            int m = pattern_matches(c, x->valuestring, v->valuestring);
            if (m <= 0) return m;
            continue;
        }
        static const char *const NUMK[] = { "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf" };
        static const char *const STRK[] = { "minLength", "maxLength", "pattern", "format" };
        static const char *const ARRK[] = { "items", "prefixItems", "minItems", "maxItems", "uniqueItems", "additionalItems",
                                            "contains", "unevaluatedItems" };
        int applies = 0;   /* the types keyword k constrains; unknown keywords constrain nothing */
        for (size_t i = 0; i < sizeof NUMK / sizeof *NUMK; i++) if (!strcmp(k, NUMK[i])) applies |= T_NUMBER | T_INTEGER;
        for (size_t i = 0; i < sizeof STRK / sizeof *STRK; i++) if (!strcmp(k, STRK[i])) applies |= T_STRING;
        for (size_t i = 0; i < sizeof ARRK / sizeof *ARRK; i++) if (!strcmp(k, ARRK[i])) applies |= T_ARRAY;
        static const char *const OBJK[] = { "properties", "required", "additionalProperties", "minProperties",
                                            "maxProperties", "patternProperties", "propertyNames", "unevaluatedProperties",
                                            "dependentRequired", "dependencies", "dependentSchemas" };
        for (size_t i = 0; i < sizeof OBJK / sizeof *OBJK; i++) if (!strcmp(k, OBJK[i])) applies |= T_OBJECT;
        if (vt & applies) return 0;
    }
    return 1;
}

/* The grammar expression for schema s (a rule name, usually). */
static char *visit(conv *c, const cJSON *s, const char *hint) {
    if (c->failed) return NULL;
    if (++c->depth > 64) { c->depth--; return fail(c, "schema nested too deeply"); }
    char *out = NULL;
    if (cJSON_IsTrue(s) || (cJSON_IsObject(s) && !s->child)) { out = prim(c, "value"); goto done; }
    if (cJSON_IsFalse(s)) { out = fail(c, "the schema false matches nothing"); goto done; }
    if (!cJSON_IsObject(s)) { out = fail(c, "a schema must be an object or a boolean"); goto done; }
    const cJSON *ref = get(s, "$ref");
    if (ref) {
        if (!cJSON_IsString(ref)) { out = fail(c, "\"$ref\" must be a string"); goto done; }
        bool alone = true;
        for (const cJSON *x = s->child; x; x = x->next)
            alone &= !strcmp(x->string, "$ref") || annotation(x->string);
        const cJSON *target = resolve_ref(c, ref->valuestring);
        if (!target) goto done;
        if (!alone) {   /* a $ref with other keywords (2019-09 and later): both apply */
            cJSON *rest = cJSON_Duplicate(s, true);
            cJSON_DeleteItemFromObjectCaseSensitive(rest, "$ref");
            cJSON *m = cJSON_IsObject(target) ? merge(c, target, rest) : NULL;
            if (!m && !c->failed) fail(c, "\"$ref\" beside other keywords needs an object schema");
            if (m) out = visit(c, m, hint);
            cJSON_Delete(m);
            cJSON_Delete(rest);
            goto done;
        }
        for (int i = 0; i < c->n_refs; i++)
            if (c->refs[i].node == target) { out = xstrdup(c, c->refs[i].name); goto done; }
        if (c->n_refs == c->cap_refs) {
            int cap = c->cap_refs ? c->cap_refs * 2 : 16;
            void *r = realloc(c->refs, (size_t)cap * sizeof *c->refs);
            if (!r) { out = fail(c, "out of memory"); goto done; }
            c->refs = r, c->cap_refs = cap;
        }
        const char *slash = strrchr(ref->valuestring, '/');
        char tmp[128];
        snprintf(tmp, sizeof tmp, "ref-%s", slash ? slash + 1 : "root");
        char *name = reserve_rule(c, tmp);
        if (!name) goto done;
        c->refs[c->n_refs].node = target;
        c->refs[c->n_refs].name = name;
        c->n_refs++;
        char *body = visit(c, target, tmp);
        if (body) set_rule(c, name, body);
        out = body ? xstrdup(c, name) : NULL;
        goto done;
    }
    if (has(s, "not") && !has(s, "anyOf") && !has(s, "oneOf")) {   /* beside alternatives: applied in each of them */
        cJSON *m = negated(c, s);
        if (m) out = visit(c, m, hint);
        cJSON_Delete(m);
        goto done;
    }
    if (has(s, "if")) {
        cJSON *m = conditional(c, s);
        if (m) out = visit(c, m, hint);
        cJSON_Delete(m);
        if (c->failed && c->err && strstr(c->err->msg, "\"not\" ") && !strstr(c->err->msg, "\"if\"")) {
            char why[sizeof c->err->msg];   /* a negation made from the if: told as the if's */
            snprintf(why, sizeof why, "%s", c->err->msg);
            c->failed = false;
            const char *w = strstr(why, ": ");
            out = fail(c, "\"if\" of this form is not supported (its negation: %s)", w ? w + 2 : why);
        }
        goto done;
    }
    static const char *const UNSUPPORTED[] = { "then", "else", "unevaluatedItems", "$dynamicRef", "$recursiveRef" };
    for (size_t i = 0; i < sizeof UNSUPPORTED / sizeof *UNSUPPORTED; i++)
        if (has(s, UNSUPPORTED[i])) { out = fail(c, "\"%s\" is not supported", UNSUPPORTED[i]); goto done; }
    if (has(s, "allOf")) {
        const cJSON *all = get(s, "allOf"), *x;
        if (!cJSON_IsArray(all)) { out = fail(c, "\"allOf\" must be an array"); goto done; }
        cJSON *m = cJSON_Duplicate(s, true);
        cJSON_DeleteItemFromObjectCaseSensitive(m, "allOf");
        cJSON_ArrayForEach(x, all) {
            cJSON *xs = flat(c, x, 0);
            if (!xs) break;
            cJSON *n = merge(c, m, xs);
            cJSON_Delete(xs);
            cJSON_Delete(m);
            m = n;
            if (!m) break;
        }
        if (!c->failed && m) out = visit(c, m, hint);
        cJSON_Delete(m);
        goto done;
    }
    if (has(s, "anyOf") || has(s, "oneOf")) {
        if (has(s, "anyOf") && has(s, "oneOf")) { out = fail(c, "anyOf together with oneOf is not supported"); goto done; }
        out = alternatives(c, s, has(s, "anyOf") ? "anyOf" : "oneOf", hint);
        goto done;
    }
    const cJSON *cst = get(s, "const"), *en = get(s, "enum");
    if (en && (!cJSON_IsArray(en) || !cJSON_GetArraySize(en))) { out = fail(c, "\"enum\" must be a non-empty array"); goto done; }
    if (cst || en) {   /* the listed values the schema's other keywords allow */
        ht_str b = { 0 };
        const cJSON *x;
        for (x = cst ? cst : en->child; x && !c->failed; x = cst ? NULL : x->next) {
            int ok = listed_value_ok(c, s, x);
            if (ok > 0 && cst && cJSON_IsArray(en)) {   /* both: the const, if the enum has it */
                const cJSON *y;
                ok = 0;
                cJSON_ArrayForEach(y, en) ok |= cJSON_Compare(x, y, true);
            }
            char *l = ok > 0 ? literal_value(c, x) : NULL;
            if (l) ht_str_printf(&b, "%s%s", b.n ? " | " : "", l);
            free(l);
        }
        if (!c->failed && !b.n) fail(c, "no value of the \"%s\" satisfies the schema's other keywords", cst ? "const" : "enum");
        out = c->failed ? (free(b.p), NULL) : add_rule(c, hint, b.p);
        goto done;
    }
    int types = types_of(c, s);
    if (c->failed) goto done;
    ht_str b = { 0 };
    static const int ORDER[] = { T_OBJECT, T_ARRAY, T_STRING, T_NUMBER, T_INTEGER, T_BOOL, T_NULL };
    int n_types = 0;
    for (size_t i = 0; i < 7; i++) n_types += !!(types & ORDER[i]);
    for (size_t i = 0; i < 7 && !c->failed; i++) {
        if (!(types & ORDER[i])) continue;
        char tmp[128];
        snprintf(tmp, sizeof tmp, "%.40s%s", hint, n_types == 1 ? "" : ORDER[i] == T_OBJECT ? "-obj" : ORDER[i] == T_ARRAY ? "-arr"
                 : ORDER[i] == T_STRING ? "-str" : ORDER[i] == T_NUMBER ? "-num" : ORDER[i] == T_INTEGER ? "-int" : "-lit");
        char *g = ORDER[i] == T_OBJECT ? object_rule(c, s, tmp) : ORDER[i] == T_ARRAY ? array_rule(c, s, tmp)
                : ORDER[i] == T_STRING ? string_rule(c, s, tmp) : ORDER[i] == T_NUMBER ? number_rule(c, s, false, tmp)
                : ORDER[i] == T_INTEGER ? number_rule(c, s, true, tmp) : ORDER[i] == T_BOOL ? prim(c, "boolean")
                : prim(c, "null");
        if (g) ht_str_printf(&b, "%s%s", b.n ? " | " : "", g);
        free(g);
    }
    if (c->failed) { free(b.p); goto done; }
    if (n_types == 1) out = b.p;
    else out = b.oom ? fail(c, "out of memory") : add_rule(c, hint, b.p);
done:
    c->depth--;
    return out;
}

/* Marks the rules body refers to (names outside "literals" and [classes]) as used, recursively. */
static void mark_used(conv *c, int r, bool *used) {
    if (used[r]) return;
    used[r] = true;
    for (const char *p = c->rules[r].body; p && *p;) {
        if (*p == '"' || *p == '[') {
            char end = *p == '"' ? '"' : ']';
            for (p++; *p && *p != end; p++) if (*p == '\\' && p[1]) p++;
            if (*p) p++;
            continue;
        }
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-') {
            const char *s = p;
            while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-') p++;
            for (int i = 0; i < c->n_rules; i++)
                if (strlen(c->rules[i].name) == (size_t)(p - s) && !memcmp(c->rules[i].name, s, (size_t)(p - s)))
                    mark_used(c, i, used);
            continue;
        }
        p++;
    }
}

char *hearth_json_schema_to_grammar(const char *schema, hearth_err *err) {
    return json_schema_gbnf(schema, "root", NULL, err);
}

char *json_schema_gbnf(const char *schema, const char *root_name, char **warnings, hearth_err *err) {
    if (warnings) *warnings = NULL;
    if (!schema || !ht_utf8_valid(schema, strlen(schema))) return herr(err, "JSON Schema: not valid UTF-8"), NULL;
    errno = 0;
    cJSON *root = cJSON_Parse(schema);
    if (!root) return herr(err, errno == ENOMEM ? "out of memory" : "JSON Schema: not valid JSON"), NULL;   /* cJSON says NULL for both */
    conv c = { .root = root, .err = err, .root_name = root_name };
    char *top = visit(&c, root, root_name);
    ht_str out = { 0 };
    bool *used = c.n_rules ? calloc((size_t)c.n_rules, 1) : NULL;
    if (top && !c.failed && c.n_rules && !used) fail(&c, "out of memory");
    if (top && !c.failed) {
        int root = -1;
        for (int i = 0; i < c.n_rules; i++) if (!strcmp(c.rules[i].name, root_name)) root = i;
        if (root < 0) ht_str_printf(&out, "%s ::= %s\n", root_name, top);
        for (int i = 0; i < c.n_rules; i++)   /* what root reaches, written in the order made (leaves first) */
            if (root >= 0 ? i == root : !strcmp(c.rules[i].name, top)) mark_used(&c, i, used);
        if (root < 0)
            for (const char *t = top; *t;) {   /* top may be "a | b": mark each name */
                const char *e = t;
                while (*e && *e != ' ' && *e != '|') e++;
                for (int i = 0; i < c.n_rules; i++)
                    if (strlen(c.rules[i].name) == (size_t)(e - t) && !memcmp(c.rules[i].name, t, (size_t)(e - t)))
                        mark_used(&c, i, used);
                while (*e == ' ' || *e == '|') e++;
                t = e;
            }
        for (int i = 0; i < c.n_rules; i++)
            if (c.rules[i].body && used[i]) ht_str_printf(&out, "%s ::= %s\n", c.rules[i].name, c.rules[i].body);
        if (out.oom) { free(out.p); out.p = NULL; herr(err, "out of memory"); }
        ht_str whole = { 0 };   /* checked as a grammar of its own: a $ref cycle that matches nothing shows here */
        if (strcmp(root_name, "root")) ht_str_printf(&whole, "root ::= %s\n", root_name);
        if (out.p) ht_str_puts(&whole, out.p);
        gram *g = out.p && !whole.oom ? gram_parse(whole.p, err) : NULL;
        free(whole.p);
        if (out.p && !g) {
            if (strstr(err->msg, "left recursion")) herr(err, "JSON Schema: a $ref cycle that reaches itself before matching anything");
            else {
                char why[sizeof err->msg];
                snprintf(why, sizeof why, "%s", err->msg);
                herr(err, "JSON Schema: internal error: the grammar made from it does not parse (%s)", why);
            }
            free(out.p);
            out.p = NULL;
        }
        gram_free(g);
    } else {
        free(out.p);
        out.p = NULL;
    }
    free(top);
    free(used);
    for (int i = 0; i < c.n_rules; i++) { free(c.rules[i].name); free(c.rules[i].body); }
    free(c.rules);
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].name);
    free(c.refs);
    cJSON_Delete(root);
    if (warnings && out.p && c.warn.n && !c.warn.oom) *warnings = c.warn.p, c.warn.p = NULL;
    free(c.warn.p);
    if (errno == ENOMEM) {   /* an allocation failed on the way: whatever was made or said then is not to be trusted */
        free(out.p);
        out.p = NULL;
        herr(err, "out of memory");
    }
    return out.p;
}
