/* common.c — the error-value helper, whole-file reading and atomic (temp file + rename) writing. */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Temp files being written, for ht_afile_unlink_all; a slot holds a malloc'd name or NULL. */
#define LIVE_MAX 16
static _Atomic(char *) live_tmp[LIVE_MAX];

static void live_set(char *old, char *val) {
    for (int i = 0; i < LIVE_MAX; i++) {
        char *expect = old;
        if (atomic_compare_exchange_strong(&live_tmp[i], &expect, val)) return;
    }
}

void ht_afile_unlink_all(void) {
    for (int i = 0; i < LIVE_MAX; i++) {
        char *p = atomic_load(&live_tmp[i]);
        if (p) unlink(p);
    }
}

int ht_afile_open(ht_afile *f, const char *path, hearth_err *err) {
    f->path = f->tmp = NULL;
    f->fd = -1;
    struct stat st;
    if (!stat(path, &st) && !S_ISREG(st.st_mode)) {
        /* a device or pipe (/dev/stdout, a FIFO) cannot be replaced by a rename: write to it as it is */
        f->fd = open(path, O_WRONLY | O_TRUNC);
        if (f->fd < 0) return herr(err, "cannot create %s: %s", path, strerror(errno));
        return 0;
    }
    /* through a symlink, the file it points to is the one replaced */
    char *real = !lstat(path, &st) && S_ISLNK(st.st_mode) ? realpath(path, NULL) : NULL;
    if (real) path = real;
    size_t n = strlen(path);
    f->path = strdup(path);
    free(real);
    f->tmp = malloc(n + 16);
    if (!f->path || !f->tmp) { ht_afile_abort(f); return herr(err, "out of memory"); }
    snprintf(f->tmp, n + 16, "%s.tmp-XXXXXX", f->path);
    f->fd = mkstemp(f->tmp);
    if (f->fd < 0) {
        int e = errno;
        free(f->tmp);
        f->tmp = NULL;
        ht_afile_abort(f);
        return herr(err, "cannot create %s: %s", path, strerror(e));
    }
    mode_t um = umask(0);   /* mkstemp makes 0600; give the file the mode a plain create would */
    umask(um);
    fchmod(f->fd, 0666 & ~um);
    live_set(NULL, f->tmp);
    return 0;
}

void ht_afile_abort(ht_afile *f) {
    if (f->fd >= 0) close(f->fd);
    if (f->tmp) { live_set(f->tmp, NULL); unlink(f->tmp); }
    free(f->tmp);
    free(f->path);
    f->tmp = f->path = NULL;
    f->fd = -1;
}

int ht_afile_commit(ht_afile *f, hearth_err *err) {
    if (!f->tmp) {   /* written in place (not a regular file) */
        int e = close(f->fd) ? errno : 0;
        f->fd = -1;
        return e ? herr(err, "cannot write: %s", strerror(e)) : 0;
    }
    int e = fsync(f->fd) ? errno : 0;
    if (close(f->fd) && !e) e = errno;
    f->fd = -1;
    if (!e && rename(f->tmp, f->path)) e = errno;
    if (e) {
        herr(err, "cannot write %s: %s", f->path, strerror(e));
        ht_afile_abort(f);
        return -1;
    }
    live_set(f->tmp, NULL);
    free(f->tmp);
    free(f->path);
    f->tmp = f->path = NULL;
    return 0;
}

bool ht_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return !stat(a, &sa) && !stat(b, &sb) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* ---- growable strings ---- */

void ht_str_add(ht_str *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void ht_str_puts(ht_str *b, const char *s) { ht_str_add(b, s, strlen(s)); }

void ht_str_printf(ht_str *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = true; return; }
    if ((size_t)n < sizeof tmp) { ht_str_add(b, tmp, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { b->oom = true; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    ht_str_add(b, big, (size_t)n);
    free(big);
}

void ht_str_take(ht_str *b, char *s) {
    if (!s) { b->oom = true; return; }
    ht_str_puts(b, s);
    free(s);
}
