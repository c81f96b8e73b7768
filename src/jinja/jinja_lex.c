/* jinja_lex.c — the Jinja2 lexer, following jinja2/lexer.py rule for rule so whitespace comes out exactly
 * as Jinja2 leaves it with trim_blocks=True and lstrip_blocks=True:
 *  - newlines (\r\n, \r, \n) are normalised to \n and one trailing newline of the template is dropped;
 *  - "{%-", "{{-", "{#-" strip all whitespace before the tag; "-%}", "-}}", "-#}" all whitespace after;
 *  - trim_blocks: one newline right after "%}" or "#}" is dropped ("+%}" keeps it);
 *  - lstrip_blocks: spaces and tabs between the start of a line and "{%" or "{#" are dropped ("{%+" keeps);
 *  - inside tags, an end delimiter only counts while (), [] and {} are balanced;
 *  - {% raw %}...{% endraw %} is data; string literals use Python's unicode-escape rules.
 * The output is an array of tokens in c->toks; text tokens point into the normalised source. */
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_internal.h"

static void emit(jctx *c, size_t *cap, jtok t) {
    if (c->ntok == *cap) {
        size_t ncap = *cap ? *cap * 2 : 64;
        c->toks = ja_grow(c, c->toks, *cap * sizeof(jtok), ncap * sizeof(jtok));
        *cap = ncap;
    }
    c->toks[c->ntok++] = t;
}

static void emit_data(jctx *c, size_t *cap, size_t pos, size_t end) {
    if (end > pos) emit(c, cap, (jtok){ .k = T_DATA, .pos = pos, .s = c->src + pos, .n = end - pos });
}

/* Newline normalisation and the dropped trailing newline (keep_trailing_newline=False). */
static void normalise_source(jctx *c, const char *src, size_t len) {
    char *out = ja_alloc(c, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') { out[n++] = '\n'; if (i + 1 < len && src[i + 1] == '\n') i++; }
        else out[n++] = src[i];
    }
    if (n && out[n - 1] == '\n') n--;
    out[n] = 0;
    c->src = out;
    c->src_len = n;
}

static size_t skip_ws(const jctx *c, size_t p) {
    int k;
    while (p < c->src_len && (k = py_space_len(c->src + p, c->src_len - p)) > 0) p += (size_t)k;
    return p;
}

static bool all_ws(const jctx *c, size_t from, size_t to) {
    if (from >= to) return false;
    return skip_ws(c, from) >= to;
}

/* End of text once trailing whitespace is removed (Python's str.rstrip()). */
static size_t rstrip_end(const jctx *c, size_t from, size_t to) {
    size_t end = from;
    for (size_t p = from; p < to;) {
        int32_t cp;
        p += (size_t)utf8_next(c->src + p, to - p, &cp);
        if (!py_isspace(cp)) end = p;
    }
    return end;
}

static bool at(const jctx *c, size_t p, const char *lit) {
    size_t n = strlen(lit);
    return p + n <= c->src_len && !memcmp(c->src + p, lit, n);
}

/* The data before a tag, after whitespace control: returns where the kept text ends. */
static size_t data_end(const jctx *c, size_t pos, size_t tag, char sign, bool is_var, bool line_starting) {
    if (sign == '-') return rstrip_end(c, pos, tag);
    if (sign == '+' || is_var) return tag;
    size_t l_pos = pos;
    bool has_nl = false;
    for (size_t i = tag; i > pos; i--) if (c->src[i - 1] == '\n') { l_pos = i; has_nl = true; break; }
    if ((has_nl || line_starting) && all_ws(c, l_pos, tag)) return l_pos;
    return tag;
}

/* Where the next "{{", "{%" or "{#" starts, or src_len. */
static size_t find_tag(const jctx *c, size_t p) {
    for (; p + 1 < c->src_len; p++) {
        const char *q = memchr(c->src + p, '{', c->src_len - p - 1);
        if (!q) break;
        p = (size_t)(q - c->src);
        char n = c->src[p + 1];
        if (n == '{' || n == '%' || n == '#') return p;
    }
    return c->src_len;
}

/* Block end at p: "+%}" (keeps newline), "-%}" + whitespace, "%}" + one optional newline. Returns the
 * position after it, or 0 if there is none; *nl says whether the match ended with a newline. */
static size_t match_block_end(const jctx *c, size_t p, char close, bool trim, bool *nl) {
    char end2[3] = { close, '}', 0 };
    *nl = false;
    if (c->src[p] == '+' && trim && at(c, p + 1, end2)) return p + 3;
    if (c->src[p] == '-' && at(c, p + 1, end2)) {
        size_t q = skip_ws(c, p + 3);
        *nl = q > p + 3 && c->src[q - 1] == '\n';
        return q;
    }
    if (at(c, p, end2)) {
        if (trim && p + 2 < c->src_len && c->src[p + 2] == '\n') { *nl = true; return p + 3; }
        return p + 2;
    }
    return 0;
}

/* "{%" sign? ws* "raw" ws* ("-%}" ws* | "%}") at the tag; returns the position after it or 0. */
static size_t match_raw_begin(const jctx *c, size_t p, bool *nl) {
    p = skip_ws(c, p);
    if (!at(c, p, "raw")) return 0;
    p = skip_ws(c, p + 3);
    *nl = false;
    if (at(c, p, "-%}")) { size_t q = skip_ws(c, p + 3); *nl = q > p + 3 && c->src[q - 1] == '\n'; return q; }
    if (at(c, p, "%}")) return p + 2;
    return 0;
}

/* Finds "{%" sign? ws* "endraw" ws* end; emits the raw text and returns the position after it. */
static size_t lex_raw_body(jctx *c, size_t *cap, size_t pos, size_t tagpos, bool *line_starting) {
    for (size_t p = pos; (p = find_tag(c, p)) < c->src_len; p++) {
        if (c->src[p + 1] != '%') continue;
        size_t q = p + 2;
        char sign = 0;
        if (q < c->src_len && (c->src[q] == '-' || c->src[q] == '+')) sign = c->src[q++];
        q = skip_ws(c, q);
        if (!at(c, q, "endraw")) continue;
        q = skip_ws(c, q + 6);
        bool nl;
        size_t end = q < c->src_len ? match_block_end(c, q, '%', true, &nl) : 0;
        if (!end) continue;
        emit_data(c, cap, pos, data_end(c, pos, p, sign, false, *line_starting));
        *line_starting = nl;
        return end;
    }
    jfail(c, tagpos, "missing end of raw directive");
}

static size_t lex_comment(jctx *c, size_t p, size_t tagpos, bool *line_starting) {
    for (; p + 1 < c->src_len; p++) {
        bool nl;
        size_t end = 0;
        if (c->src[p] == '+' && at(c, p + 1, "#}")) end = p + 3, nl = false;
        else if (c->src[p] == '-' || c->src[p] == '#') end = match_block_end(c, p, '#', true, &nl);
        if (end) { *line_starting = nl; return end; }
    }
    jfail(c, tagpos, "missing end of comment tag");
}

/* ---- tokens inside tags ---- */

static size_t scan_digits(const jctx *c, size_t p) {   /* (\d+_)*\d+ ; returns p if none */
    const char *s = c->src;
    size_t n = c->src_len, q = p;
    if (q >= n || s[q] < '0' || s[q] > '9') return p;
    while (q < n) {
        if (s[q] >= '0' && s[q] <= '9') q++;
        else if (s[q] == '_' && q + 1 < n && s[q + 1] >= '0' && s[q + 1] <= '9') q++;
        else break;
    }
    return q;
}

static char *strip_underscores(jctx *c, size_t p, size_t q) {
    char *t = ja_alloc(c, q - p + 1);
    size_t n = 0;
    for (size_t i = p; i < q; i++) if (c->src[i] != '_') t[n++] = c->src[i];
    return t;
}

/* float_re: digits, then (.digits)? e[+-]digits, or .digits; not right after a '.'. */
static size_t match_float(const jctx *c, size_t p) {
    if (p > 0 && c->src[p - 1] == '.') return 0;
    size_t q = scan_digits(c, p);
    if (q == p) return 0;
    size_t frac = 0;
    if (q < c->src_len && c->src[q] == '.') { size_t r = scan_digits(c, q + 1); if (r > q + 1) frac = r; }
    size_t e = frac ? frac : q;
    if (e < c->src_len && (c->src[e] | 0x20) == 'e') {
        size_t r = e + 1;
        if (r < c->src_len && (c->src[r] == '+' || c->src[r] == '-')) r++;
        size_t t = scan_digits(c, r);
        if (t > r) return t;
    }
    return frac;
}

static int digit_value(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    ch |= 0x20;
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    return 99;
}

/* integer_re: 0b/0o/0x with optional single underscores, [1-9](_?\d)*, or 0(_?0)*. */
static size_t match_int(jctx *c, size_t p, int64_t *val) {
    const char *s = c->src;
    size_t n = c->src_len, q = p;
    int base = 10;
    if (s[p] == '0' && p + 1 < n) {
        char k = (char)(s[p + 1] | 0x20);
        base = k == 'b' ? 2 : k == 'o' ? 8 : k == 'x' ? 16 : 10;
    }
    if (base != 10) {
        q = p + 2;
        size_t start = q;
        while (q < n) {
            size_t r = q + (s[q] == '_');
            if (r < n && digit_value(s[r]) < base) q = r + 1; else break;
        }
        if (q == start) base = 10, q = p;
    }
    if (base == 10) {
        if (s[p] < '0' || s[p] > '9') return 0;
        q = p + 1;
        bool zero = s[p] == '0';
        while (q < n) {
            size_t r = q + (s[q] == '_');
            if (r < n && s[r] >= '0' && s[r] <= '9' && (!zero || s[r] == '0')) q = r + 1; else break;
        }
    }
    uint64_t v = 0;
    for (size_t i = p + (base != 10 ? 2 : 0); i < q; i++) {
        if (s[i] == '_') continue;
        uint64_t d = (uint64_t)digit_value(s[i]);
        if (v > (UINT64_MAX - d) / (uint64_t)base || v * (uint64_t)base + d > (uint64_t)INT64_MAX)
            jfail(c, p, "integer literal too large");
        v = v * (uint64_t)base + d;
    }
    *val = (int64_t)v;
    return q;
}

static bool name_start(unsigned char ch) { return ch == '_' || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z') || ch >= 0x80; }
static bool name_char(unsigned char ch) { return name_start(ch) || (ch >= '0' && ch <= '9'); }

static int hexval_run(const char *s, size_t n, int digits, int32_t *out) {
    if ((size_t)digits > n) return 0;
    uint32_t v = 0;   /* 8 digits reach 0xFFFFFFFF: unsigned, then clamped (anything past 0x10FFFF is refused) */
    for (int i = 0; i < digits; i++) {
        int d = digit_value(s[i]);
        if (d > 15) return 0;
        v = v * 16 + (uint32_t)d;
    }
    *out = v > INT32_MAX ? INT32_MAX : (int32_t)v;
    return 1;
}

/* One backslash escape of a string literal at s (just after the backslash); returns bytes consumed. */
static size_t unescape_one(jctx *c, jbuf *b, const char *s, size_t n, size_t pos) {
    static const char simple_from[] = "\\'\"abfnrtv", simple_to[] = "\\'\"\a\b\f\n\r\t\v";
    const char *k = n ? strchr(simple_from, s[0]) : NULL;
    if (k && s[0]) { jb_putc(c, b, simple_to[k - simple_from]); return 1; }
    if (n && s[0] == '\n') return 1;
    if (n && s[0] >= '0' && s[0] <= '7') {
        int32_t v = 0;
        size_t i = 0;
        while (i < 3 && i < n && s[i] >= '0' && s[i] <= '7') v = v * 8 + (s[i++] - '0');
        jb_put_cp(c, b, v);
        return i;
    }
    int digits = n && s[0] == 'x' ? 2 : n && s[0] == 'u' ? 4 : n && s[0] == 'U' ? 8 : 0;
    if (digits) {
        int32_t v;
        if (!hexval_run(s + 1, n - 1, digits, &v)) jfail(c, pos, "truncated \\%c escape in string literal", s[0]);
        if (v < 0 || v > 0x10FFFF) jfail(c, pos, "illegal Unicode character in string literal");
        jb_put_cp(c, b, v);
        return (size_t)digits + 1;
    }
    if (n && s[0] == 'N') jfail(c, pos, "\\N{...} escapes are not supported");
    jb_putc(c, b, '\\');   /* unknown escape: kept as written */
    return 0;
}

static size_t lex_string(jctx *c, size_t p, jtok *t) {
    char q = c->src[p];
    size_t i = p + 1;
    while (i < c->src_len && c->src[i] != q) i += c->src[i] == '\\' ? 2 : 1;
    if (i >= c->src_len) jfail(c, p, "unterminated string literal");
    jbuf b = {0};
    for (size_t j = p + 1; j < i;) {
        const char *bs = memchr(c->src + j, '\\', i - j);
        size_t stop = bs ? (size_t)(bs - c->src) : i;
        jb_put(c, &b, c->src + j, stop - j);
        if (stop >= i) break;
        j = stop + 1 + unescape_one(c, &b, c->src + stop + 1, i - stop - 1, stop);
    }
    t->k = T_STRING;
    t->s = b.p ? b.p : "";
    t->n = b.n;
    return i + 1;
}

static const struct { const char *text; int op; } operators[] = {
    { "//", OP_FLOORDIV }, { "**", OP_POW }, { "==", OP_EQ }, { "!=", OP_NE }, { ">=", OP_GTEQ }, { "<=", OP_LTEQ },
    { "+", OP_ADD }, { "-", OP_SUB }, { "/", OP_DIV }, { "*", OP_MUL }, { "%", OP_MOD }, { "~", OP_TILDE },
    { "[", OP_LBRACKET }, { "]", OP_RBRACKET }, { "(", OP_LPAREN }, { ")", OP_RPAREN }, { "{", OP_LBRACE },
    { "}", OP_RBRACE }, { ">", OP_GT }, { "<", OP_LT }, { "=", OP_ASSIGN }, { ".", OP_DOT }, { ":", OP_COLON },
    { "|", OP_PIPE }, { ",", OP_COMMA }, { ";", OP_SEMICOLON },
};

const char *jinja_op_text(int op) {
    for (size_t i = 0; i < sizeof operators / sizeof operators[0]; i++) if (operators[i].op == op) return operators[i].text;
    return "?";
}

/* Keeps (), [] and {} balanced; end delimiters only count while the stack is empty. */
typedef struct { char want[JINJA_MAX_DEPTH]; int n; } jbalance;

static void balance_op(jctx *c, jbalance *bal, int op, size_t pos) {
    char open = op == OP_LPAREN ? ')' : op == OP_LBRACKET ? ']' : op == OP_LBRACE ? '}' : 0;
    char close = op == OP_RPAREN ? ')' : op == OP_RBRACKET ? ']' : op == OP_RBRACE ? '}' : 0;
    if (open) {
        if (bal->n >= JINJA_MAX_DEPTH) jfail(c, pos, "brackets nested too deeply");
        bal->want[bal->n++] = open;
    } else if (close) {
        if (!bal->n) jfail(c, pos, "unexpected '%c'", close);
        if (bal->want[bal->n - 1] != close) jfail(c, pos, "unexpected '%c', expected '%c'", close, bal->want[bal->n - 1]);
        bal->n--;
    }
}

static size_t lex_operator(jctx *c, size_t p, jtok *t) {
    for (size_t i = 0; i < sizeof operators / sizeof operators[0]; i++) {
        if (at(c, p, operators[i].text)) {
            t->k = T_OP;
            t->op = operators[i].op;
            return p + strlen(operators[i].text);
        }
    }
    int32_t cp;
    utf8_next(c->src + p, c->src_len - p, &cp);
    jfail(c, p, "unexpected character '%.*s'", utf8_next(c->src + p, c->src_len - p, &cp), c->src + p);
}

/* One token inside a tag at p (not whitespace, not the end). */
static size_t lex_token(jctx *c, size_t p, jtok *t) {
    size_t q;
    t->pos = p;
    if ((q = match_float(c, p))) {
        t->k = T_FLOAT;
        t->f = strtod(strip_underscores(c, p, q), NULL);
        return q;
    }
    int64_t iv;
    if ((q = match_int(c, p, &iv))) { t->k = T_INT; t->i = iv; return q; }
    unsigned char ch = (unsigned char)c->src[p];
    if (name_start(ch)) {
        q = p + 1;
        while (q < c->src_len && name_char((unsigned char)c->src[q])) q++;
        t->k = T_NAME;
        t->s = ja_strndup(c, c->src + p, q - p);
        t->n = q - p;
        return q;
    }
    if (ch == '\'' || ch == '"') return lex_string(c, p, t);
    return lex_operator(c, p, t);
}

/* Tokens of a {{ }} or {% %} tag starting at p; returns the position after its end delimiter. */
static size_t lex_tag(jctx *c, size_t *cap, size_t p, size_t tagpos, bool is_var, bool *line_starting) {
    jbalance bal = { .n = 0 };
    for (;;) {
        if (p >= c->src_len) jfail(c, tagpos, "unexpected end of template: missing '%s'", is_var ? "}}" : "%}");
        if (bal.n == 0) {
            bool nl;
            size_t end = match_block_end(c, p, is_var ? '}' : '%', !is_var, &nl);
            if (end) {
                emit(c, cap, (jtok){ .k = is_var ? T_VAR_END : T_BLOCK_END, .pos = p });
                *line_starting = nl;
                return end;
            }
        }
        size_t q = skip_ws(c, p);
        if (q > p) { p = q; continue; }
        jtok t = {0};
        p = lex_token(c, p, &t);
        if (t.k == T_OP) balance_op(c, &bal, t.op, t.pos);
        emit(c, cap, t);
    }
}

void jinja_lex(jctx *c, const char *src, size_t len) {
    normalise_source(c, src, len);
    size_t cap = 0, pos = 0;
    bool line_starting = true;
    while (pos < c->src_len) {
        size_t tag = find_tag(c, pos);
        if (tag >= c->src_len) { emit_data(c, &cap, pos, c->src_len); break; }
        char kind = c->src[tag + 1];
        size_t p = tag + 2;
        char sign = 0;
        if (p < c->src_len && (c->src[p] == '-' || c->src[p] == '+')) sign = c->src[p++];
        bool raw_nl = false;
        size_t raw_end = kind == '%' ? match_raw_begin(c, p, &raw_nl) : 0;
        emit_data(c, &cap, pos, data_end(c, pos, tag, sign, kind == '{', line_starting));
        line_starting = false;
        if (raw_end) {
            line_starting = raw_nl;
            pos = lex_raw_body(c, &cap, raw_end, tag, &line_starting);
        } else if (kind == '#') {
            pos = lex_comment(c, p, tag, &line_starting);
        } else {
            emit(c, &cap, (jtok){ .k = kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, .pos = tag });
            pos = lex_tag(c, &cap, p, tag, kind == '{', &line_starting);
        }
    }
    emit(c, &cap, (jtok){ .k = T_EOF, .pos = c->src_len });
}
