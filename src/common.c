/* common.c — the error-value helper and whole-file reading. */
#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int herr(hearth_err *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        for (char *p = err->msg; *p; p++) if (*p == '\n' || *p == '\r') *p = ' ';
    }
    return -1;
}

char *ht_read_file(const char *path, size_t *len, hearth_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) { herr(err, "cannot open %s: %s", path, strerror(errno)); return NULL; }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += r;
        if (n == cap) {
            char *nb = cap <= SIZE_MAX / 4 ? realloc(buf, cap * 2 + 1) : NULL;
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
            cap *= 2;
        }
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf || bad) { free(buf); herr(err, "cannot read %s", path); return NULL; }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}
