/* common.h — small helpers shared by every module: error values, overflow-checked size
 * arithmetic, half-precision conversions. Internal; not part of the public API. */
#ifndef HEARTH_COMMON_H
#define HEARTH_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hearth.h"

/* Fill err with a one-line message and return -1, so call sites read `return herr(err, ...)`. */
int herr(hearth_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The whole of a file (read to its end, so pipes work too) with a NUL after it; *len (if len) its size.
 * NULL with err set when it cannot be opened or read. The caller frees it. */
char *ht_read_file(const char *path, size_t *len, hearth_err *err);

/* Writing a file so that its name never holds a half-written file: the data goes to a temp file beside the
 * target (same directory, so the rename cannot cross file systems), which ht_afile_commit syncs and renames
 * into place; ht_afile_abort (or any failure) removes it. A target that exists and is not a regular file (a
 * device, a FIFO) is written in place (tmp NULL); a symlink's target file is the one replaced. The temp names of open files are kept where a
 * signal handler can remove them (ht_afile_unlink_all), so Ctrl-C leaves neither a half file nor litter. */
typedef struct { char *path, *tmp; int fd; } ht_afile;
int ht_afile_open(ht_afile *f, const char *path, hearth_err *err);
int ht_afile_commit(ht_afile *f, hearth_err *err);
void ht_afile_abort(ht_afile *f);
void ht_afile_unlink_all(void);   /* async-signal-safe */
/* True when the two paths name one file (same device and inode: hard links and symlinks included). */
bool ht_same_file(const char *a, const char *b);

/* A growable NUL-terminated string. After a failed allocation `oom` stays set and nothing more is added; p is
 * NULL only if nothing was ever added. The owner frees p. */
typedef struct { char *p; size_t n, cap; bool oom; } ht_str;
void ht_str_add(ht_str *b, const char *s, size_t n);
void ht_str_puts(ht_str *b, const char *s);
void ht_str_printf(ht_str *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ht_str_take(ht_str *b, char *s);   /* appends malloc'd s and frees it; NULL (a failed allocation) sets oom */

/* Overflow-checked arithmetic: return false on overflow, leaving *out unspecified. */
static inline bool add_ok(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }
static inline bool mul_ok(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }

/* IEEE half and bfloat16 <-> float. */
static inline float fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else { /* subnormal: renormalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            man &= 0x3ff;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);
    else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    float f; memcpy(&f, &bits, 4); return f;
}
static inline uint16_t f32_to_fp16(float f) {   /* round to nearest even */
    uint32_t x; memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);            /* overflow -> inf */
    if (ax < 0x38800000u) {                                               /* subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign;
        uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000, shift = 126 - e;
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((ax >> 13) - ((127 - 15) << 10)), rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}
static inline float bf16_to_f32(uint16_t h) { uint32_t b = (uint32_t)h << 16; float f; memcpy(&f, &b, 4); return f; }
static inline uint16_t f32_to_bf16(float f) {
    uint32_t x; memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64); /* quiet NaN */
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

/* Length of the valid UTF-8 character at s (n bytes available), or 0 if the bytes there are not one. */
static inline int utf8_valid_len(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) return (n >= 2 && (s[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0;          /* overlong */
        if (c == 0xED && s[1] >= 0xA0) return 0;         /* surrogate */
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0;
        if (c == 0xF4 && s[1] >= 0x90) return 0;
        return 4;
    }
    return 0;
}
/* True when the n bytes at s are all whole, valid UTF-8 characters. */
static inline bool ht_utf8_valid(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        const int l = utf8_valid_len((const uint8_t *)s + i, n - i);
        if (!l) return false;
        i += (size_t)l;
    }
    return true;
}

#define HT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define HT_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
