/* jinja_util.c — plumbing for the Jinja2 interpreter: error unwinding with template positions, the render
 * arena, growable byte buffers, UTF-8 decoding and the Python character classes (whitespace, case,
 * alphanumerics) that string filters and methods need.
 *
 * The arena is a doubly linked list of malloc'd blocks: big allocations get their own block (grown in place
 * for buffers and lists), small ones are carved from 64 KiB chunk blocks. All go at once at the end. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "jinja/jinja_internal.h"

/* ---------------- errors ---------------- */

/* Line and column (in code points) of a byte offset into the normalised source. */
static void pos_line_col(const jctx *c, size_t pos, int *line, int *col) {
    *line = 1; *col = 1;
    if (!c->src || pos > c->src_len) return;
    size_t line_start = 0;
    for (size_t i = 0; i < pos; i++)
        if (c->src[i] == '\n') { (*line)++; line_start = i + 1; }
    *col = 1 + (int)utf8_count(c->src + line_start, pos - line_start);
}

void jfail(jctx *c, size_t pos, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (pos == JPOS_NONE) herr(c->err, "template: %s", msg);
    else {
        int line, col;
        pos_line_col(c, pos, &line, &col);
        herr(c->err, "template:%d:%d: %s", line, col, msg);
    }
    longjmp(c->jmp, 1);
}

void jfail_raw(jctx *c, const char *msg) {
    herr(c->err, "%s", msg);
    longjmp(c->jmp, 1);
}

void jstep(jctx *c, size_t pos) {
    if (++c->steps > c->max_steps) jfail(c, pos, "template takes too long (more than %llu steps)", (unsigned long long)c->max_steps);
}

void jenter(jctx *c, size_t pos) {
    if (++c->depth > JINJA_MAX_DEPTH) jfail(c, pos, "nested too deeply (more than %d levels)", JINJA_MAX_DEPTH);
    jstep(c, pos);
}

/* ---------------- arena ---------------- */

struct jblock { jblock *prev, *next; size_t size, pad_; };

/* Small allocations are carved from 64 KiB chunks (fast to make, fast to free); under AddressSanitizer
 * every allocation gets its own block so out-of-bounds accesses are caught at the object. */
#if defined(__SANITIZE_ADDRESS__)
#define JA_SMALL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define JA_SMALL 0
#endif
#endif
#ifndef JA_SMALL
#define JA_SMALL 1024
#endif
#define JA_CHUNK 65536
static bool is_small(size_t n) { return JA_SMALL > 0 && n + 1 <= (size_t)JA_SMALL; }

static _Noreturn void fail_memory(jctx *c) {
    jfail(c, JPOS_NONE, "template uses too much memory (more than %zu MiB)", c->max_memory >> 20);
}

static void mem_charge(jctx *c, size_t n) {
    if (n > c->max_memory || c->mem > c->max_memory - n) fail_memory(c);
    c->mem += n;
}

static void *block_alloc(jctx *c, size_t n) {
    mem_charge(c, n + sizeof(jblock));
    jblock *b = calloc(1, sizeof *b + n);
    if (!b) jfail(c, JPOS_NONE, "out of memory");
    b->size = n;
    b->next = c->blocks;
    if (c->blocks) c->blocks->prev = b;
    c->blocks = b;
    return b + 1;
}

void *ja_alloc(jctx *c, size_t n) {
    if (!is_small(n)) return block_alloc(c, n);
    size_t need = n < 16 ? 16 : (n + 15) & ~(size_t)15;
    if (need > c->chunk_left) {
        c->chunk = block_alloc(c, JA_CHUNK);
        c->chunk_left = JA_CHUNK;
    }
    void *p = c->chunk;
    c->chunk += need;
    c->chunk_left -= need;
    return p;
}

/* old is the size p was allocated (or last grown) with: it tells a chunk piece from a block. */
void *ja_grow(jctx *c, void *p, size_t old, size_t n) {
    if (!p) return ja_alloc(c, n);
    if (is_small(old)) {
        if (n <= old) return p;
        void *q = ja_alloc(c, n);
        memcpy(q, p, old);
        return q;
    }
    jblock *b = (jblock *)p - 1;
    if (n <= b->size) return p;
    mem_charge(c, n - b->size);
    jblock *nb = realloc(b, sizeof *nb + n);
    if (!nb) jfail(c, JPOS_NONE, "out of memory");
    memset((char *)(nb + 1) + old, 0, n - old);
    nb->size = n;
    if (nb->prev) nb->prev->next = nb; else c->blocks = nb;
    if (nb->next) nb->next->prev = nb;
    return nb + 1;
}

void ja_free_all(jctx *c) {
    for (jblock *b = c->blocks, *next; b; b = next) { next = b->next; free(b); }
    c->blocks = NULL;
    c->mem = 0;
    c->chunk = NULL;
    c->chunk_left = 0;
}

char *ja_strndup(jctx *c, const char *s, size_t n) {
    char *p = ja_alloc(c, n + 1);
    if (n) memcpy(p, s, n);
    return p;
}

/* ---------------- buffers ---------------- */

void jb_put(jctx *c, jbuf *b, const char *s, size_t n) {
    if (!n) return;
    if (n > c->max_memory || b->n + n + 1 > c->max_memory) fail_memory(c);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        b->p = ja_grow(c, b->p, b->cap, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jb_puts(jctx *c, jbuf *b, const char *s) { jb_put(c, b, s, strlen(s)); }
void jb_putc(jctx *c, jbuf *b, char ch) { jb_put(c, b, &ch, 1); }

void jb_printf(jctx *c, jbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) { jb_put(c, b, tmp, (size_t)n); return; }
    char *big = ja_alloc(c, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    jb_put(c, b, big, (size_t)n);
}

/* ---------------- UTF-8 ---------------- */

/* A byte that is not part of valid UTF-8 decodes as U+DC80..U+DCFF (Python's surrogateescape) and is
 * written back as the same byte, so any input survives untouched. */
int utf8_next(const char *s, size_t n, int32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80) { *cp = u[0]; return 1; }
    int len = u[0] >= 0xF0 ? 4 : u[0] >= 0xE0 ? 3 : u[0] >= 0xC2 ? 2 : 0;
    if (len == 0 || u[0] > 0xF4 || (size_t)len > n) goto bad;
    int32_t v = u[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((u[i] & 0xC0) != 0x80) goto bad;
        v = (v << 6) | (u[i] & 0x3F);
    }
    if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)) || (v >= 0xD800 && v <= 0xDFFF))
        goto bad;
    *cp = v;
    return len;
bad:
    *cp = 0xDC00 | u[0];
    return 1;
}

void jb_put_cp(jctx *c, jbuf *b, int32_t cp) {
    char out[4];
    int n;
    if (cp >= 0xDC80 && cp <= 0xDCFF) { out[0] = (char)(cp & 0xFF); n = 1; }
    else if (cp < 0x80) { out[0] = (char)cp; n = 1; }
    else if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        if (cp > 0x10FFFF) cp = 0xFFFD;
        out[0] = (char)(0xF0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F)); n = 4;
    }
    jb_put(c, b, out, (size_t)n);
}

size_t utf8_count(const char *s, size_t n) {
    size_t count = 0, i = 0;
    int32_t cp;
    while (i < n) {
        uint64_t word;
        if (n - i >= 8 && (memcpy(&word, s + i, 8), !(word & 0x8080808080808080ull))) { i += 8; count += 8; continue; }
        i += (size_t)utf8_next(s + i, n - i, &cp);
        count++;
    }
    return count;
}

size_t jstr_ncp(const jstr *s) {
    if (s->ncp_ == JSTR_UNCOUNTED) ((jstr *)s)->ncp_ = utf8_count(s->s, s->len);   /* a cache, not a change */
    return s->ncp_;
}

size_t utf8_offset(const char *s, size_t n, size_t cp_index) {
    size_t i = 0;
    int32_t cp;
    while (cp_index-- > 0 && i < n) i += (size_t)utf8_next(s + i, n - i, &cp);
    return i;
}

/* ---------------- Python character classes ---------------- */

bool py_isspace(int32_t cp) {
    if (cp < 0x80) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

int py_space_len(const char *s, size_t n) {
    if (!n) return 0;
    int32_t cp;
    int len = utf8_next(s, n, &cp);
    return py_isspace(cp) ? len : 0;
}

static bool escaped_byte(int32_t cp) { return cp >= 0xDC80 && cp <= 0xDCFF; }

bool py_isalnum(int32_t cp) {
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z');
    if (escaped_byte(cp)) return false;
    utf8proc_category_t k = utf8proc_category(cp);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

int32_t cp_upper(int32_t cp) { return escaped_byte(cp) ? cp : utf8proc_toupper(cp); }
int32_t cp_lower(int32_t cp) { return escaped_byte(cp) ? cp : utf8proc_tolower(cp); }
int32_t cp_title(int32_t cp) { return escaped_byte(cp) ? cp : utf8proc_totitle(cp); }

bool cp_is_upper(int32_t cp) { return !escaped_byte(cp) && utf8proc_category(cp) == UTF8PROC_CATEGORY_LU; }
bool cp_is_lower(int32_t cp) { return !escaped_byte(cp) && utf8proc_category(cp) == UTF8PROC_CATEGORY_LL; }
bool cp_is_cased(int32_t cp) {
    return cp_is_upper(cp) || cp_is_lower(cp) || (!escaped_byte(cp) && utf8proc_category(cp) == UTF8PROC_CATEGORY_LT);
}

bool cp_is_decimal(int32_t cp) { return !escaped_byte(cp) && utf8proc_category(cp) == UTF8PROC_CATEGORY_ND; }
