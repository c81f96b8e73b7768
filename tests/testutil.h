/* testutil.h — tiny assertion helpers for hearth's C tests. A test prints what failed and exits 1. */
#ifndef HEARTH_TESTUTIL_H
#define HEARTH_TESTUTIL_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static int tu_failures;
#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); tu_failures++; } } while (0)
#define REQUIRE(cond, ...) do { if (!(cond)) { fprintf(stderr, "%s:%d: REQUIRE(%s) failed: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)
#define TEST_DONE() do { if (tu_failures) { fprintf(stderr, "%d check(s) failed\n", tu_failures); return 1; } \
    printf("ok\n"); return 0; } while (0)

/* The whole of a test data file, NUL-terminated (*len its size if len), or exit 1. */
static inline char *tu_read_file(const char *path, size_t *len) {
    hearth_err err;
    char *p = ht_read_file(path, len, &err);
    REQUIRE(p, "%s", err.msg);
    return p;
}

/* A fixture model, data/models/NAME.gguf (tests run in tests/), or exit 1. */
static inline hearth_model *tu_load_model(const char *name) {
    char path[256];
    hearth_err err;
    hearth_model *m;
    snprintf(path, sizeof path, "data/models/%s.gguf", name);
    REQUIRE(!hearth_model_load(path, &m, &err), "%s: %s", path, err.msg);
    return m;
}

/* Whether a test that loops over the kernel sets runs SET: HEARTH_TEST_SETS=a,b names the ones to run (all when
 * unset). The qemu scripts give each emulated CPU only the sets that none of their other runs covers. */
static inline int tu_set_wanted(const char *set) {
    const char *p = getenv("HEARTH_TEST_SETS");
    if (!p || !*p) return 1;
    for (const size_t n = strlen(set); *p;) {
        const size_t len = strcspn(p, ",");
        if (len == n && !strncmp(p, set, n)) return 1;
        p += len + (p[len] == ',');
    }
    return 0;
}
#endif
