/* test_gguf.c — tests of the GGUF reader and writer (src/gguf.c).
 *
 * 1. Every GGUF under data/models and data/tokenizer opens, with spot checks of keys and tensors.
 * 2. The writer round-trips every value type (nested arrays via gguf_w_copy_kv from a hand-built file) and
 *    tensors of several types; a model copied key by key and tensor by tensor comes back byte-identical;
 *    writer mistakes and write failures come back as errors.
 * 3. A malformed-file corpus built here (from a writer-made file, stories260K.gguf and hand-built files):
 *    truncations, bad magic/version, huge counts and lengths, bad tensor shapes/types/offsets, bad alignment,
 *    duplicates, nesting bombs. Each must fail with a one-line message; random byte flips must never crash.
 *    Buffers are exact-size heap copies, so a sanitizer build catches any read past the end.
 * 4. With HEARTH set, a sample of the malformed files is fed to `$HEARTH info -m FILE`, which must exit 1
 *    printing exactly one line that starts with "error: ".
 * Test-side parsing (layout_of) is independent of gguf.c and only ever walks valid files. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/gguf.h"
#include "quant/quant.h"
#include "testutil.h"

typedef unsigned long long ull;

static char g_tmpdir[64];
static const char *g_hearth;      /* CLI to check, or NULL */
static int g_rejected, g_cli_runs;
static const char *g_want;        /* a fragment the next rejection messages must contain (NULL: any) */
#define MAX_CLI_RUNS 150

/* ---------------------------------------------------------------------------------------------------------
 * Small helpers */

static void write_all(const char *path, const void *b, uint64_t n) {
    FILE *fp = fopen(path, "wb");
    REQUIRE(fp && fwrite(b, 1, (size_t)n, fp) == (size_t)n && fclose(fp) == 0, "cannot write %s", path);
}

static uint8_t *dup_buf(const uint8_t *b, uint64_t n) {
    uint8_t *p = malloc(n ? (size_t)n : 1);
    REQUIRE(p, "out of memory");
    if (n) memcpy(p, b, (size_t)n);
    return p;
}

static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static bool one_line(const char *s) { return s[0] && !strchr(s, '\n') && !strchr(s, '\r'); }

static bool str_is(gguf_str s, const char *c) { return s.n == strlen(c) && memcmp(s.p, c, s.n) == 0; }

/* A growable byte buffer for hand-built files. */
typedef struct { uint8_t *p; size_t n, cap; } bytes;
static void b_put(bytes *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        REQUIRE(b->p, "out of memory");
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void b_u32(bytes *b, uint32_t v) { b_put(b, &v, 4); }
static void b_u64(bytes *b, uint64_t v) { b_put(b, &v, 8); }
static void b_str(bytes *b, const char *s) { b_u64(b, strlen(s)); b_put(b, s, strlen(s)); }
static void b_header(bytes *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b_put(b, "GGUF", 4);
    b_u32(b, version);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}

/* ---------------------------------------------------------------------------------------------------------
 * Test-side layout of a valid file: where each field sits, for targeted corruption */

typedef struct {
    uint64_t key_pos, key_len, type_pos, val_pos;   /* key_pos: the key's length field */
    uint32_t type, arr_type;
    uint64_t arr_n, first_str_pos, last_str_pos;    /* string arrays: length fields of first/last element */
} lkv;

typedef struct {
    uint64_t name_pos, name_len, ndims_pos, dims_pos, type_pos, offset_pos;
    uint32_t n_dims, type;
    uint64_t ne[4], offset, nbytes;
} ltensor;

typedef struct {
    uint64_t n_kv, n_t, index_end, data_offset, data_end, alignment, alignment_kv;  /* alignment_kv: index+1 */
    lkv *kv;
    ltensor *t;
} layout;

static uint64_t fixed_sz(uint32_t t) {
    static const uint8_t sz[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return sz[t];
}

static uint64_t skip_val(const uint8_t *b, uint64_t p, uint32_t t) {
    if (t == GGUF_STR) return p + 8 + get64(b + p);
    if (t != GGUF_ARR) return p + fixed_sz(t);
    uint32_t et = get32(b + p);
    uint64_t n = get64(b + p + 4);
    p += 12;
    if (fixed_sz(et)) return p + n * fixed_sz(et);
    for (uint64_t i = 0; i < n; i++) p = skip_val(b, p, et);
    return p;
}

static layout layout_of(const uint8_t *b) {
    layout L = {0};
    uint64_t p = 24;
    L.n_t = get64(b + 8);
    L.n_kv = get64(b + 16);
    L.kv = calloc(L.n_kv + 1, sizeof *L.kv);
    L.t = calloc(L.n_t + 1, sizeof *L.t);
    L.alignment = 32;
    for (uint64_t i = 0; i < L.n_kv; i++) {
        lkv *k = &L.kv[i];
        k->key_pos = p;
        k->key_len = get64(b + p);
        k->type_pos = p + 8 + k->key_len;
        k->type = get32(b + k->type_pos);
        k->val_pos = k->type_pos + 4;
        if (k->key_len == 17 && !memcmp(b + p + 8, "general.alignment", 17)) {
            L.alignment = get32(b + k->val_pos);
            L.alignment_kv = i + 1;
        }
        if (k->type == GGUF_ARR) {
            k->arr_type = get32(b + k->val_pos);
            k->arr_n = get64(b + k->val_pos + 4);
            if (k->arr_type == GGUF_STR && k->arr_n) {
                uint64_t q = k->val_pos + 12;
                k->first_str_pos = q;
                for (uint64_t j = 0; j + 1 < k->arr_n; j++) q += 8 + get64(b + q);
                k->last_str_pos = q;
            }
        }
        p = skip_val(b, k->val_pos, k->type);
    }
    for (uint64_t i = 0; i < L.n_t; i++) {
        ltensor *t = &L.t[i];
        t->name_pos = p;
        t->name_len = get64(b + p);
        t->ndims_pos = p + 8 + t->name_len;
        t->n_dims = get32(b + t->ndims_pos);
        t->dims_pos = t->ndims_pos + 4;
        for (int d = 0; d < 4; d++) t->ne[d] = d < (int)t->n_dims ? get64(b + t->dims_pos + 8 * d) : 1;
        t->type_pos = t->dims_pos + 8 * t->n_dims;
        t->type = get32(b + t->type_pos);
        t->offset_pos = t->type_pos + 4;
        t->offset = get64(b + t->offset_pos);
        const ht_traits *tr = ht_get_traits(t->type);
        t->nbytes = t->ne[0] / tr->blck * tr->type_size * t->ne[1] * t->ne[2] * t->ne[3];
        p = t->offset_pos + 8;
    }
    L.index_end = p;
    L.data_offset = (p + L.alignment - 1) / L.alignment * L.alignment;
    for (uint64_t i = 0; i < L.n_t; i++)
        if (L.data_offset + L.t[i].offset + L.t[i].nbytes > L.data_end)
            L.data_end = L.data_offset + L.t[i].offset + L.t[i].nbytes;
    return L;
}

static void layout_free(layout *L) { free(L->kv); free(L->t); }

/* ---------------------------------------------------------------------------------------------------------
 * CLI contract */

static void run_cli(const char *what, const uint8_t *buf, uint64_t size) {
    char path[128], out[4096];
    int fds[2];
    snprintf(path, sizeof path, "%s/case%03d.gguf", g_tmpdir, g_cli_runs++);
    write_all(path, buf, size);
    REQUIRE(pipe(fds) == 0, "pipe");
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0) dup2(devnull, 0);
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        alarm(60);   /* survives exec: a hanging CLI dies by SIGALRM and fails the check below */
        execl(g_hearth, g_hearth, "info", "-m", path, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    for (;;) {
        char tmp[4096];
        ssize_t r = read(fds[0], tmp, sizeof tmp);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        size_t k = HT_MIN((size_t)r, sizeof out - 1 - n);
        memcpy(out + n, tmp, k);
        n += k;
    }
    out[n] = 0;
    close(fds[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1, "%s: `hearth info` should exit 1, got %s %d; output: %s", what,
          WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), out);
    const char *nl = strchr(out, '\n');
    CHECK(strncmp(out, "error: ", 7) == 0 && nl && nl[1] == 0 && nl - out > 7,
          "%s: `hearth info` should print one line starting with \"error: \", got: %s", what, out);
    unlink(path);
}

/* ---------------------------------------------------------------------------------------------------------
 * Malformed-corpus checks */

/* buf must be an exact-size heap block (so ASan sees reads past its end). */
static void expect_reject(const char *what, const uint8_t *buf, uint64_t size, bool cli) {
    hearth_err err = {{0}};
    gguf_file *f = (gguf_file *)1;
    int rc = gguf_open_memory(buf, size, &f, &err);
    CHECK(rc == -1, "%s: malformed file was accepted", what);
    if (rc == 0) gguf_close(f);
    else CHECK(f == NULL, "%s: *out not cleared", what);
    CHECK(one_line(err.msg), "%s: message must be one non-empty line, got '%s'", what, err.msg);
    CHECK(!g_want || strstr(err.msg, g_want), "%s: message should mention '%s', got '%s'", what, g_want, err.msg);
    g_rejected++;
    if (cli && g_hearth && g_cli_runs < MAX_CLI_RUNS) run_cli(what, buf, size);
}

static void reject_truncated(const char *what, const uint8_t *base, uint64_t len, bool cli) {
    char name[128];
    snprintf(name, sizeof name, "%s truncated to %llu bytes", what, (ull)len);
    uint8_t *b = dup_buf(base, len);
    expect_reject(name, b, len, cli);
    free(b);
}

static void reject_patch(const char *what, const uint8_t *base, uint64_t size, uint64_t pos, const void *v,
                         size_t n, bool cli) {
    REQUIRE(pos + n <= size, "%s: patch outside the file", what);
    uint8_t *b = dup_buf(base, size);
    memcpy(b + pos, v, n);
    expect_reject(what, b, size, cli);
    free(b);
}

static void reject_u32(const char *what, const uint8_t *base, uint64_t size, uint64_t pos, uint32_t v, bool cli) {
    char name[200];
    snprintf(name, sizeof name, "%s = %u", what, v);
    reject_patch(name, base, size, pos, &v, 4, cli);
}

static void reject_u64(const char *what, const uint8_t *base, uint64_t size, uint64_t pos, uint64_t v, bool cli) {
    char name[200];
    snprintf(name, sizeof name, "%s = %llu", what, (ull)v);
    reject_patch(name, base, size, pos, &v, 8, cli);
}

static const uint64_t huge[] = {UINT64_MAX, 1ull << 63, 1ull << 62, 1ull << 61, 1ull << 32, (1ull << 32) - 1};
#define N_HUGE (sizeof huge / sizeof huge[0])

static void corrupt_counts(const char *tag, const uint8_t *b, uint64_t size) {
    char what[160];
    for (size_t i = 0; i < N_HUGE; i++) {
        snprintf(what, sizeof what, "%s: n_tensors", tag);
        g_want = "tensor count";
        reject_u64(what, b, size, 8, huge[i], i < 3);
        snprintf(what, sizeof what, "%s: n_kv", tag);
        g_want = "metadata key count";
        reject_u64(what, b, size, 16, huge[i], i < 3);
    }
    g_want = NULL;
}

static void corrupt_header(const char *tag, const uint8_t *b, uint64_t size) {
    char what[160];
    static const char *const magics[] = {"GGUX", "GGML", "ggjt", "\0\0\0\0", "FUGG"};
    g_want = "bad magic";
    for (size_t i = 0; i < sizeof magics / sizeof magics[0]; i++) {
        snprintf(what, sizeof what, "%s: magic %zu", tag, i);
        reject_patch(what, b, size, 0, magics[i], 4, i < 2);
    }
    static const uint32_t versions[] = {0, 1, 4, 0x03000000u, UINT32_MAX};
    g_want = "unsupported GGUF version";
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        snprintf(what, sizeof what, "%s: version", tag);
        reject_u32(what, b, size, 4, versions[i], true);
    }
    g_want = NULL;
}

static void corrupt_strings(const char *tag, const uint8_t *b, uint64_t size, const layout *L) {
    char what[160];
    uint64_t sites[8];
    const char *names[8];
    int n = 0;
    sites[n] = L->kv[0].key_pos, names[n++] = "first key length";
    sites[n] = L->kv[L->n_kv - 1].key_pos, names[n++] = "last key length";
    for (uint64_t i = 0; i < L->n_kv; i++)
        if (L->kv[i].type == GGUF_STR) { sites[n] = L->kv[i].val_pos, names[n++] = "string value length"; break; }
    for (uint64_t i = 0; i < L->n_kv; i++)
        if (L->kv[i].type == GGUF_ARR && L->kv[i].arr_type == GGUF_STR && L->kv[i].arr_n) {
            sites[n] = L->kv[i].first_str_pos, names[n++] = "first string in array length";
            sites[n] = L->kv[i].last_str_pos, names[n++] = "last string in array length";
            break;
        }
    if (L->n_t) {
        sites[n] = L->t[0].name_pos, names[n++] = "first tensor name length";
        sites[n] = L->t[L->n_t - 1].name_pos, names[n++] = "last tensor name length";
    }
    g_want = "string length";
    for (int s = 0; s < n; s++)
        for (size_t i = 0; i < N_HUGE; i++) {
            snprintf(what, sizeof what, "%s: %s", tag, names[s]);
            reject_u64(what, b, size, sites[s], huge[i], i == 0);
        }
    g_want = NULL;
}

static void corrupt_values(const char *tag, const uint8_t *b, uint64_t size, const layout *L) {
    char what[160];
    bool first_arr = true;
    for (uint64_t k = 0; k < L->n_kv; k++) {
        const lkv *kv = &L->kv[k];
        snprintf(what, sizeof what, "%s: key %llu value type", tag, (ull)k);
        g_want = "unknown value type";
        reject_u32(what, b, size, kv->type_pos, 13, k == 0);
        reject_u32(what, b, size, kv->type_pos, UINT32_MAX, false);
        if (kv->type != GGUF_ARR) continue;
        snprintf(what, sizeof what, "%s: key %llu array element type", tag, (ull)k);
        reject_u32(what, b, size, kv->val_pos, 13, first_arr);
        reject_u32(what, b, size, kv->val_pos, 0x80000000u, false);
        snprintf(what, sizeof what, "%s: key %llu array count", tag, (ull)k);
        g_want = "array length";
        for (size_t i = 0; i < N_HUGE; i++) reject_u64(what, b, size, kv->val_pos + 4, huge[i], first_arr && i < 3);
        first_arr = false;
    }
    g_want = "duplicate metadata key";
    /* duplicate key: give a later key the text of an earlier one of the same length */
    for (uint64_t i = 0; i < L->n_kv; i++)
        for (uint64_t j = i + 1; j < L->n_kv; j++)
            if (L->kv[i].key_len == L->kv[j].key_len) {
                snprintf(what, sizeof what, "%s: duplicate key", tag);
                reject_patch(what, b, size, L->kv[j].key_pos + 8, b + L->kv[i].key_pos + 8, L->kv[i].key_len, true);
                g_want = NULL;
                return;
            }
}

static void corrupt_alignment(const char *tag, const uint8_t *b, uint64_t size, const layout *L) {
    char what[160];
    if (!L->alignment_kv) return;
    const lkv *kv = &L->kv[L->alignment_kv - 1];
    static const uint32_t bad[] = {0, 3, 48, 96, UINT32_MAX, 0x80000000u};   /* the last is valid but pushes data out */
    snprintf(what, sizeof what, "%s: general.alignment", tag);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        g_want = i == 5 ? "before tensor data" : "general.alignment";
        reject_u32(what, b, size, kv->val_pos, bad[i], i < 3 || i == 5);
    }
    if (L->index_end % 4) {   /* alignment 1 puts the data section right after the index, not 4-byte aligned */
        snprintf(what, sizeof what, "%s: general.alignment", tag);
        g_want = "4-byte aligned";
        reject_u32(what, b, size, kv->val_pos, 1, true);
    }
    snprintf(what, sizeof what, "%s: general.alignment type", tag);
    g_want = "general.alignment has type";
    reject_u32(what, b, size, kv->type_pos, GGUF_I32, true);
    reject_u32(what, b, size, kv->type_pos, GGUF_F32, false);
    g_want = NULL;
}

static const ltensor *first_2d(const layout *L) {
    for (uint64_t i = 0; i < L->n_t; i++)
        if (L->t[i].n_dims >= 2) return &L->t[i];
    return NULL;
}

static void corrupt_tensors(const char *tag, const uint8_t *b, uint64_t size, const layout *L) {
    char what[160];
    const ltensor *t0 = &L->t[0], *tl = &L->t[L->n_t - 1], *t2 = first_2d(L);
    snprintf(what, sizeof what, "%s: n_dims", tag);
    g_want = "n_dims";
    reject_u32(what, b, size, t0->ndims_pos, 5, true);
    reject_u32(what, b, size, t0->ndims_pos, 0, true);
    reject_u32(what, b, size, tl->ndims_pos, UINT32_MAX, false);
    static const uint32_t types[] = {4, 5, 40, 99, UINT32_MAX};
    snprintf(what, sizeof what, "%s: tensor type", tag);
    g_want = "unknown type";
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) reject_u32(what, b, size, t0->type_pos, types[i], i == 3);
    reject_u32(what, b, size, tl->type_pos, 99, false);
    snprintf(what, sizeof what, "%s: dim 0", tag);
    g_want = "dimension 0 is";
    reject_u64(what, b, size, t0->dims_pos, 0, true);
    snprintf(what, sizeof what, "%s: dim 2^63", tag);
    reject_u64(what, b, size, t0->dims_pos, 1ull << 63, true);
    reject_u64(what, b, size, t0->dims_pos, UINT64_MAX, false);
    snprintf(what, sizeof what, "%s: F32 ne0 2^62 (element count or byte size overflows)", tag);
    g_want = "overflows";
    reject_u64(what, b, size, t0->dims_pos, 1ull << 62, false);
    if (t2) {
        uint64_t d[2] = {1ull << 32, 1ull << 32};
        snprintf(what, sizeof what, "%s: dims 2^32 x 2^32 (element count overflows)", tag);
        g_want = "element count overflows";
        reject_patch(what, b, size, t2->dims_pos, d, 16, true);
        d[0] = 1ull << 62, d[1] = 2;
        snprintf(what, sizeof what, "%s: dims 2^62 x 2 (element count > INT64_MAX)", tag);
        reject_patch(what, b, size, t2->dims_pos, d, 16, true);
        d[0] = 1ull << 61, d[1] = 2;
        snprintf(what, sizeof what, "%s: dims 2^61 x 2 (byte size overflows)", tag);
        g_want = "byte size overflows";
        reject_patch(what, b, size, t2->dims_pos, d, 16, false);
        snprintf(what, sizeof what, "%s: ne1 x 1000 (data past end)", tag);
        g_want = "past end of file";
        reject_u64(what, b, size, t2->dims_pos + 8, t2->ne[1] * 1000, true);
    }
    for (uint64_t i = 0; i < L->n_t; i++) {   /* a row that is not a whole number of blocks */
        const ht_traits *tr = ht_get_traits(L->t[i].type);
        if (tr->blck == 1) continue;
        snprintf(what, sizeof what, "%s: %s row of %d elements", tag, tr->name, tr->blck + tr->blck / 2);
        g_want = "block size";
        reject_u64(what, b, size, L->t[i].dims_pos, (uint64_t)(tr->blck + tr->blck / 2), true);
        break;
    }
    snprintf(what, sizeof what, "%s: misaligned offset", tag);
    g_want = "not aligned to";
    reject_u64(what, b, size, tl->offset_pos, tl->offset + 1, true);
    reject_u64(what, b, size, t0->offset_pos, t0->offset + L->alignment / 2, false);
    uint64_t past = (size - L->data_offset + L->alignment) / L->alignment * L->alignment;
    snprintf(what, sizeof what, "%s: offset past end", tag);
    g_want = "past end of file";
    reject_u64(what, b, size, tl->offset_pos, past, true);
    reject_u64(what, b, size, t0->offset_pos, past, false);
    snprintf(what, sizeof what, "%s: offset overflows", tag);
    g_want = "runs past end of file";
    reject_u64(what, b, size, tl->offset_pos, UINT64_MAX - L->alignment + 1, true);
    g_want = "not aligned to";
    reject_u64(what, b, size, t0->offset_pos, UINT64_MAX, false);
    snprintf(what, sizeof what, "%s: NUL in tensor name", tag);
    g_want = "NUL byte";
    reject_patch(what, b, size, t0->name_pos + 8, "", 1, true);
    for (uint64_t i = 0; i < L->n_t; i++)   /* duplicate tensor name */
        for (uint64_t j = i + 1; j < L->n_t; j++)
            if (L->t[i].name_len == L->t[j].name_len) {
                snprintf(what, sizeof what, "%s: duplicate tensor name", tag);
                g_want = "duplicate tensor name";
                reject_patch(what, b, size, L->t[j].name_pos + 8, b + L->t[i].name_pos + 8, L->t[i].name_len, true);
                g_want = NULL;
                return;
            }
    g_want = NULL;
    CHECK(0, "%s: no two tensor names of equal length to duplicate", tag);
}

static void corrupt_truncations(const char *tag, const uint8_t *b, uint64_t size, const layout *L) {
    /* every length through the header, metadata, tensor index and padding; a sample of the data region */
    uint64_t cli_step = L->data_offset / 8 + 1;
    for (uint64_t len = 0; len < L->data_offset; len++) reject_truncated(tag, b, len, len % cli_step == 0);
    uint64_t span = L->data_end - L->data_offset;
    for (uint64_t k = 0; k < 64; k++) {
        uint64_t len = L->data_offset + span * k / 64;
        reject_truncated(tag, b, len, k % 32 == 0);
    }
    reject_truncated(tag, b, L->data_end - 1, true);
    (void)size;
}

static void corrupt_all(const char *tag, const uint8_t *b, uint64_t size) {
    layout L = layout_of(b);
    REQUIRE(L.n_kv > 0 && L.n_t > 0 && L.data_end <= size, "%s: unexpected layout", tag);
    corrupt_header(tag, b, size);
    corrupt_counts(tag, b, size);
    corrupt_strings(tag, b, size, &L);
    corrupt_values(tag, b, size, &L);
    corrupt_alignment(tag, b, size, &L);
    corrupt_tensors(tag, b, size, &L);
    corrupt_truncations(tag, b, size, &L);
    layout_free(&L);
}

/* Arrays nested `depth` deep (the innermost holds two u8), as the only key of a tensorless file. */
static bytes nested_file(int depth) {
    bytes b = {0};
    b_header(&b, 3, 0, 1);
    b_str(&b, "nest");
    b_u32(&b, GGUF_ARR);
    for (int i = 1; i < depth; i++) { b_u32(&b, GGUF_ARR); b_u64(&b, 1); }
    b_u32(&b, GGUF_U8);
    b_u64(&b, 2);
    b_put(&b, "\x07\x09", 2);
    return b;
}

static void check_nesting(void) {
    int ok_depths[] = {1, 2, 8}, bad_depths[] = {9, 10, 100000};
    for (int i = 0; i < 3; i++) {
        bytes b = nested_file(ok_depths[i]);
        gguf_file *f;
        hearth_err err = {{0}};
        CHECK(gguf_open_memory(b.p, b.n, &f, &err) == 0, "nesting %d should open: %s", ok_depths[i], err.msg);
        if (f) gguf_close(f);
        free(b.p);
    }
    for (int i = 0; i < 3; i++) {
        char what[64];
        bytes b = nested_file(bad_depths[i]);
        uint8_t *exact = dup_buf(b.p, b.n);
        snprintf(what, sizeof what, "arrays nested %d deep", bad_depths[i]);
        g_want = "nested more than 8 deep";
        expect_reject(what, exact, b.n, i != 1);
        g_want = NULL;
        free(exact);
        free(b.p);
    }
    /* an array of 2^40 empty arrays, and of 2^60 strings, in a tiny file */
    bytes b = {0};
    b_header(&b, 3, 0, 1);
    b_str(&b, "wide");
    b_u32(&b, GGUF_ARR);
    b_u32(&b, GGUF_ARR);
    b_u64(&b, 1ull << 40);
    b_u32(&b, GGUF_U8);
    b_u64(&b, 0);
    uint8_t *exact = dup_buf(b.p, b.n);
    g_want = "array length";
    expect_reject("array of 2^40 arrays", exact, b.n, true);
    uint64_t n = 1ull << 60;
    memcpy(exact + 24 + 12 + 4, &(uint32_t){GGUF_STR}, 4);   /* header, key "wide", kv type, then the array */
    memcpy(exact + 24 + 12 + 8, &n, 8);
    expect_reject("array of 2^60 strings", exact, b.n, false);
    g_want = NULL;
    free(exact);
    free(b.p);
}

/* Random byte damage in the metadata/index region: must never crash; a file that still opens must be usable. */
static void fuzz(const char *tag, const uint8_t *base, uint64_t size, int iters, uint64_t seed) {
    layout L = layout_of(base);
    uint8_t *b = dup_buf(base, size);
    uint64_t s = seed;
    int opened = 0;
    for (int it = 0; it < iters; it++) {
        uint64_t pos[4];
        uint8_t old[4][8];
        int n = 1 + (int)(s % 4);
        for (int k = 0; k < n; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            pos[k] = (s >> 33) % (L.index_end - 8);
            memcpy(old[k], b + pos[k], 8);
            uint64_t r = s >> 11;
            if ((s >> 60) < 8) b[pos[k]] ^= (uint8_t)(1u << (r % 8));            /* bit flip */
            else if ((s >> 60) < 12) b[pos[k]] = (uint8_t)r;                    /* random byte */
            else memcpy(b + pos[k], &huge[r % N_HUGE], 8);                       /* huge u64 */
        }
        gguf_file *f;
        hearth_err err = {{0}};
        if (gguf_open_memory(b, size, &f, &err) == 0) {
            opened++;
            for (uint64_t i = 0; i < f->n_kv; i++) {
                const gguf_kv *kv = &f->kv[i];
                if (kv->type == GGUF_ARR && kv->arr_type == GGUF_STR && kv->arr_n) {
                    gguf_str *v = malloc(kv->arr_n * sizeof *v);
                    REQUIRE(v, "out of memory");
                    gguf_arr_strs(kv, v);
                    CHECK((const uint8_t *)v[kv->arr_n - 1].p + v[kv->arr_n - 1].n <= b + size, "string out of file");
                    free(v);
                }
            }
            for (uint64_t i = 0; i < f->n_tensors; i++) {
                const gguf_tensor *t = &f->tensors[i];
                CHECK((const uint8_t *)t->data >= b && (const uint8_t *)t->data + t->nbytes <= b + size,
                      "%s: tensor data out of file", tag);
            }
            gguf_close(f);
        } else {
            CHECK(one_line(err.msg), "%s fuzz: bad message '%s'", tag, err.msg);
        }
        for (int k = n - 1; k >= 0; k--) memcpy(b + pos[k], old[k], 8);
    }
    printf("fuzz %s: %d of %d damaged files still opened\n", tag, opened, iters);
    free(b);
    layout_free(&L);
}

/* ---------------------------------------------------------------------------------------------------------
 * 1. The shipped GGUF files */

static void check_file_sane(const char *path, const gguf_file *f) {
    CHECK(f->version == 2 || f->version == 3, "%s: version %u", path, f->version);
    CHECK(f->data_offset <= f->size && (f->data_offset % f->alignment == 0 || f->n_tensors == 0), "%s: data_offset", path);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)HT_MIN(kv->key.n, 255), kv->key.p);
        CHECK(gguf_find(f, key) == kv, "%s: gguf_find('%s')", path, key);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        CHECK(gguf_find_tensor(f, t->name) == t, "%s: gguf_find_tensor('%s')", path, t->name);
        const uint8_t *base = f->map;
        CHECK((const uint8_t *)t->data == base + f->data_offset + t->offset, "%s: %s data pointer", path, t->name);
        CHECK(t->offset + f->data_offset + t->nbytes <= f->size, "%s: %s past end", path, t->name);
        CHECK(t->nbytes == ht_row_size(t->type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]),
              "%s: %s nbytes", path, t->name);
        CHECK(t->nelem == (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]), "%s: %s nelem", path, t->name);
    }
    CHECK(gguf_find(f, "no.such.key") == NULL && gguf_find_tensor(f, "no.such.tensor") == NULL, "%s: phantom", path);
}

static void test_shipped_files(void) {
    const char *patterns[] = {"data/models/*.gguf", "data/tokenizer/*.gguf"};
    int n_files = 0;
    for (int p = 0; p < 2; p++) {
        glob_t g;
        REQUIRE(glob(patterns[p], 0, NULL, &g) == 0, "no files match %s (run from tests/)", patterns[p]);
        for (size_t i = 0; i < g.gl_pathc; i++) {
            gguf_file *f;
            hearth_err err = {{0}};
            int rc = gguf_open(g.gl_pathv[i], &f, &err);
            CHECK(rc == 0, "%s: %s", g.gl_pathv[i], err.msg);
            if (rc) continue;
            n_files++;
            check_file_sane(g.gl_pathv[i], f);
            gguf_str type;
            if (p == 0 && gguf_get_str(f, "general.type", &type) && type.n == 7 && !memcmp(type.p, "adapter", 7)) {
                CHECK(f->n_tensors > 0, "%s: an adapter without tensors", g.gl_pathv[i]);   /* LoRA: no vocabulary */
                gguf_close(f);
                continue;
            }
            const gguf_kv *tok = gguf_find(f, "tokenizer.ggml.tokens");
            CHECK(tok && tok->type == GGUF_ARR && tok->arr_type == GGUF_STR && tok->arr_n >= 100, "%s: tokens",
                  g.gl_pathv[i]);
            if (p == 1) CHECK(f->n_tensors == 0, "%s: vocab file with tensors", g.gl_pathv[i]);
            if (p == 0) {
                gguf_str arch;
                CHECK(gguf_get_str(f, "general.architecture", &arch) && arch.n > 0, "%s: no architecture",
                      g.gl_pathv[i]);
                CHECK(f->n_tensors > 0 && gguf_find_tensor(f, "token_embd.weight"), "%s: no token_embd", g.gl_pathv[i]);
            }
            gguf_close(f);
        }
        globfree(&g);
    }
    CHECK(n_files >= 30, "only %d files opened", n_files);

    gguf_file *f;
    hearth_err err = {{0}};
    REQUIRE(gguf_open("data/models/llama.gguf", &f, &err) == 0, "llama.gguf: %s", err.msg);
    gguf_str s;
    uint32_t u;
    float x;
    CHECK(gguf_get_str(f, "general.architecture", &s) && str_is(s, "llama"), "llama arch");
    CHECK(gguf_get_str(f, "general.name", &s) && str_is(s, "random-llama"), "llama name");
    CHECK(gguf_get_u32(f, "llama.embedding_length", &u) && u == 256, "n_embd");
    CHECK(gguf_get_u32(f, "llama.attention.head_count_kv", &u) && u == 2, "n_head_kv");
    CHECK(gguf_get_f32(f, "llama.rope.freq_base", &x) && x == 10000.0f, "rope base");
    CHECK(!gguf_get_u32(f, "general.architecture", &u) && !gguf_get_str(f, "llama.vocab_size", &s), "type mismatch");
    const gguf_kv *tok = gguf_find(f, "tokenizer.ggml.tokens");
    REQUIRE(tok && tok->arr_type == GGUF_STR && tok->arr_n == 512, "tokens array");
    gguf_str *v = malloc(512 * sizeof *v);
    gguf_arr_strs(tok, v);
    CHECK(str_is(v[0], "<unk>") && str_is(v[1], "<s>") && str_is(v[2], "</s>") && str_is(v[3], "<0x00>"), "tokens 0-3");
    for (int i = 0; i < 512; i += 37)
        CHECK(gguf_arr_str(tok, (uint64_t)i).p == v[i].p && gguf_arr_str(tok, (uint64_t)i).n == v[i].n, "arr_str %d", i);
    free(v);
    const gguf_kv *tt = gguf_find(f, "tokenizer.ggml.token_type");
    CHECK(tt && tt->arr_n == 512 && gguf_arr_num(tt, 0) == 2 && gguf_arr_num(tt, 1) == 3 && gguf_arr_num(tt, 3) == 6,
          "token types");
    const gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    CHECK(t && t->type == HT_F32 && t->n_dims == 2 && t->ne[0] == 256 && t->ne[1] == 512 && t->ne[2] == 1 &&
          t->nbytes == 256 * 512 * 4 && t->offset == 0, "token_embd.weight");
    t = gguf_find_tensor(f, "blk.1.ffn_down.weight");
    CHECK(t && t->ne[0] == 512 && t->ne[1] == 256 && t->offset == 5248000, "blk.1.ffn_down.weight");
    CHECK(f->n_tensors == 21 && f->alignment == 32 && f->data_offset == 12608, "llama counts");
    gguf_close(f);

    REQUIRE(gguf_open("data/models/llama-Q4_K_M.gguf", &f, &err) == 0, "Q4_K_M: %s", err.msg);
    t = gguf_find_tensor(f, "blk.0.attn_q.weight");
    CHECK(t && t->type == HT_Q4_K && t->nbytes == 256 / 256 * 144 * 256, "Q4_K tensor");
    gguf_close(f);
}

static void test_open_errors(void) {
    gguf_file *f;
    hearth_err err = {{0}};
    char path[128];
    CHECK(gguf_open("data/no-such-file.gguf", &f, &err) == -1 && f == NULL && one_line(err.msg) &&
          strstr(err.msg, "No such file"), "missing file: %s", err.msg);
    CHECK(gguf_open("data", &f, &err) == -1 && one_line(err.msg), "directory: %s", err.msg);
    snprintf(path, sizeof path, "%s/empty.gguf", g_tmpdir);
    write_all(path, "", 0);
    CHECK(gguf_open(path, &f, &err) == -1 && one_line(err.msg) && strstr(err.msg, "empty"), "empty file: %s", err.msg);
    write_all(path, "GGUF\x03\0\0\0\0", 9);
    CHECK(gguf_open(path, &f, &err) == -1 && strstr(err.msg, "truncated in header"), "9 bytes: %s", err.msg);
    write_all(path, "GGUF\x01\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 24);
    CHECK(gguf_open(path, &f, &err) == -1 && strstr(err.msg, "unsupported GGUF version 1"), "v1: %s", err.msg);
    unlink(path);
    CHECK(gguf_open_memory("GGUF", 4, &f, &err) == -1 && one_line(err.msg), "4 bytes: %s", err.msg);
}

/* ---------------------------------------------------------------------------------------------------------
 * 2. Writer round trip */

/* A tensorless file holding nested arrays, read back to feed gguf_w_copy_kv. */
static bytes nested_source(void) {
    bytes b = {0};
    b_header(&b, 2, 0, 3);                        /* version 2 on purpose */
    b_str(&b, "nest.i32");                        /* [[1, 2], [3], []] */
    b_u32(&b, GGUF_ARR); b_u32(&b, GGUF_ARR); b_u64(&b, 3);
    b_u32(&b, GGUF_I32); b_u64(&b, 2); b_u32(&b, 1); b_u32(&b, 2);
    b_u32(&b, GGUF_I32); b_u64(&b, 1); b_u32(&b, 3);
    b_u32(&b, GGUF_I32); b_u64(&b, 0);
    b_str(&b, "nest.str");                        /* [["x", "yy"], ["zzz"]] */
    b_u32(&b, GGUF_ARR); b_u32(&b, GGUF_ARR); b_u64(&b, 2);
    b_u32(&b, GGUF_STR); b_u64(&b, 2); b_str(&b, "x"); b_str(&b, "yy");
    b_u32(&b, GGUF_STR); b_u64(&b, 1); b_str(&b, "zzz");
    b_str(&b, "nest.deep");                       /* 8 levels, innermost [7, 9] */
    b_u32(&b, GGUF_ARR);
    for (int i = 1; i < 8; i++) { b_u32(&b, GGUF_ARR); b_u64(&b, 1); }
    b_u32(&b, GGUF_U8); b_u64(&b, 2); b_put(&b, "\x07\x09", 2);
    return b;
}

typedef struct { const char *name; uint32_t type; int n_dims; int64_t ne[4]; uint8_t *data; uint64_t nbytes; } src_tensor;

static void fill_random(uint8_t *p, uint64_t n, uint64_t seed) {
    for (uint64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (uint8_t)(seed >> 56);
    }
}

#define N_SRC_T 6
static void make_tensors(src_tensor *t) {
    src_tensor init[N_SRC_T] = {
        {"t.f32", HT_F32, 2, {8, 3, 1, 1}, 0, 0},   {"t.f16", HT_F16, 1, {16, 1, 1, 1}, 0, 0},
        {"t.q4_0", HT_Q4_0, 2, {64, 2, 1, 1}, 0, 0}, {"t.q8_0", HT_Q8_0, 3, {32, 2, 2, 1}, 0, 0},
        {"t.q4_k", HT_Q4_K, 4, {256, 1, 1, 2}, 0, 0}, {"t.zero", HT_BF16, 1, {6, 1, 1, 1}, 0, 0},
    };
    for (int i = 0; i < N_SRC_T; i++) {
        t[i] = init[i];
        t[i].nbytes = ht_row_size(t[i].type, t[i].ne[0]) * (uint64_t)(t[i].ne[1] * t[i].ne[2] * t[i].ne[3]);
        if (i == N_SRC_T - 1) continue;   /* written from NULL: zeros */
        t[i].data = malloc(t[i].nbytes);
        fill_random(t[i].data, t[i].nbytes, (uint64_t)i + 1);
    }
}

static const uint8_t  A_U8[] = {0, 1, 255};
static const int8_t   A_I8[] = {-128, 0, 127};
static const uint16_t A_U16[] = {0, 65535};
static const int16_t  A_I16[] = {-32768, 32767, -1};
static const uint32_t A_U32[] = {0, 4000000000u};
static const int32_t  A_I32[] = {-2147483647 - 1, 2147483647, 5};
static const float    A_F32[] = {1.5f, -0.25f, 3e38f};
static const uint8_t  A_BOOL[] = {1, 0, 1};
static const uint64_t A_U64[] = {UINT64_MAX, 0};
static const int64_t  A_I64[] = {INT64_MIN, INT64_MAX};
static const double   A_F64[] = {1e300, -2.5};
static const char *const A_STR[] = {"a", "", "three", "\xc3\xbcnic\xc3\xb6\144e"};   /* ..., "ünicöde" */

/* A gguf_fill_fn that copies a src_tensor's bytes. */
static int fill_from_src(void *ctx, void *buf, uint64_t nbytes) {
    const src_tensor *t = ctx;
    if (nbytes != t->nbytes) return -1;
    memcpy(buf, t->data, nbytes);
    return 0;
}

static int fill_fails(void *ctx, void *buf, uint64_t nbytes) {
    (void)ctx, (void)buf, (void)nbytes;
    return -1;
}

/* Writes the round-trip file: every value type, nested arrays copied from src, the tensors (one of them
 * through a fill callback). */
static void write_full(const char *path, const gguf_file *nest, const src_tensor *t, uint32_t alignment) {
    gguf_writer *w = gguf_writer_new();
    REQUIRE(w, "writer");
    gguf_w_str(w, "general.architecture", "test");
    if (alignment) gguf_w_u32(w, "general.alignment", alignment);
    uint8_t u8 = 200; int8_t i8 = -5; uint16_t u16 = 60000; int16_t i16 = -30000;
    uint64_t u64 = (1ull << 63) + 5; int64_t i64 = -(1ll << 62) - 7; double f64 = -1.25e-300;
    gguf_w_val(w, "v.u8", GGUF_U8, &u8);
    gguf_w_val(w, "v.i8", GGUF_I8, &i8);
    gguf_w_val(w, "v.u16", GGUF_U16, &u16);
    gguf_w_val(w, "v.i16", GGUF_I16, &i16);
    gguf_w_u32(w, "v.u32", 4000000000u);
    gguf_w_i32(w, "v.i32", -2000000000);
    gguf_w_f32(w, "v.f32", 3.25f);
    gguf_w_bool(w, "v.bool", true);
    gguf_w_str(w, "v.str", "hello, w\xc3\xb6rld");
    gguf_w_val(w, "v.u64", GGUF_U64, &u64);
    gguf_w_val(w, "v.i64", GGUF_I64, &i64);
    gguf_w_val(w, "v.f64", GGUF_F64, &f64);
    gguf_w_arr(w, "a.u8", GGUF_U8, A_U8, 3);
    gguf_w_arr(w, "a.i8", GGUF_I8, A_I8, 3);
    gguf_w_arr(w, "a.u16", GGUF_U16, A_U16, 2);
    gguf_w_arr(w, "a.i16", GGUF_I16, A_I16, 3);
    gguf_w_arr(w, "a.u32", GGUF_U32, A_U32, 2);
    gguf_w_arr_i32(w, "a.i32", A_I32, 3);
    gguf_w_arr_f32(w, "a.f32", A_F32, 3);
    gguf_w_arr(w, "a.bool", GGUF_BOOL, A_BOOL, 3);
    gguf_w_arr(w, "a.u64", GGUF_U64, A_U64, 2);
    gguf_w_arr(w, "a.i64", GGUF_I64, A_I64, 2);
    gguf_w_arr(w, "a.f64", GGUF_F64, A_F64, 2);
    gguf_w_arr_str(w, "a.str", A_STR, 4);
    gguf_w_arr_f32(w, "a.empty", NULL, 0);
    gguf_w_str(w, "v.replaced", "first");
    for (uint64_t i = 0; i < nest->n_kv; i++) gguf_w_copy_kv(w, &nest->kv[i]);
    gguf_w_str(w, "v.replaced", "second");
    for (int i = 0; i < N_SRC_T; i++) {
        if (i == 3) gguf_w_tensor_fill(w, t[i].name, t[i].type, t[i].n_dims, t[i].ne, t[i].nbytes, fill_from_src,
                                       (void *)&t[i]);
        else gguf_w_tensor(w, t[i].name, t[i].type, t[i].n_dims, t[i].ne, t[i].data, t[i].nbytes);
    }
    hearth_err err = {{0}};
    CHECK(gguf_writer_write(w, path, &err) == 0, "write %s: %s", path, err.msg);
    gguf_writer_free(w);
}

static bool kv_bytes_equal(const gguf_kv *a, const gguf_kv *b, uint64_t n) {
    return a->type == b->type && memcmp(a->val, b->val, n) == 0;
}

static void check_full(const char *path, const gguf_file *nest, const src_tensor *t, uint32_t alignment) {
    gguf_file *f;
    hearth_err err = {{0}};
    REQUIRE(gguf_open(path, &f, &err) == 0, "reopen %s: %s", path, err.msg);
    uint64_t a = alignment ? alignment : 32;
    CHECK(f->version == 3 && f->alignment == a && f->data_offset % a == 0, "header: v%u align %llu", f->version,
          (ull)f->alignment);
    CHECK(f->n_kv == 30 + (alignment != 0), "n_kv %llu", (ull)f->n_kv);
    CHECK(strcmp(gguf_type_name(f->kv[0].type), "str") == 0 && str_is(f->kv[0].key, "general.architecture"), "key order");

    uint32_t u32; int64_t i64; float f32; bool bl; gguf_str s;
    CHECK(gguf_get_u32(f, "v.u8", &u32) && u32 == 200, "u8");
    CHECK(!gguf_get_u32(f, "v.i8", &u32) && gguf_get_i64(f, "v.i8", &i64) && i64 == -5, "i8");
    CHECK(gguf_get_u32(f, "v.u16", &u32) && u32 == 60000, "u16");
    CHECK(gguf_get_i64(f, "v.i16", &i64) && i64 == -30000, "i16");
    CHECK(gguf_get_u32(f, "v.u32", &u32) && u32 == 4000000000u && gguf_get_i64(f, "v.u32", &i64) && i64 == 4000000000ll, "u32");
    CHECK(gguf_get_i64(f, "v.i32", &i64) && i64 == -2000000000, "i32");
    CHECK(gguf_get_f32(f, "v.f32", &f32) && f32 == 3.25f && !gguf_get_u32(f, "v.f32", &u32), "f32");
    CHECK(gguf_get_bool(f, "v.bool", &bl) && bl && !gguf_get_bool(f, "v.u8", &bl), "bool");
    CHECK(gguf_get_str(f, "v.str", &s) && str_is(s, "hello, w\xc3\xb6rld") && !gguf_get_str(f, "v.u32", &s), "str");
    CHECK(!gguf_get_u32(f, "v.u64", &u32) && !gguf_get_i64(f, "v.u64", &i64), "u64 out of range");
    CHECK(get64(gguf_find(f, "v.u64")->val) == (1ull << 63) + 5, "u64 value");
    CHECK(gguf_get_i64(f, "v.i64", &i64) && i64 == -(1ll << 62) - 7 && !gguf_get_u32(f, "v.i64", &u32), "i64");
    CHECK(gguf_get_f32(f, "v.f64", &f32) && f32 == (float)-1.25e-300, "f64 as f32");
    CHECK(!gguf_get_u32(f, "missing", &u32) && !gguf_get_str(f, "missing", &s), "missing key");
    CHECK(gguf_get_str(f, "v.replaced", &s) && str_is(s, "second"), "replaced key");

    struct { const char *key; uint32_t et; const void *v; uint64_t n; } arrs[] = {
        {"a.u8", GGUF_U8, A_U8, 3}, {"a.i8", GGUF_I8, A_I8, 3}, {"a.u16", GGUF_U16, A_U16, 2},
        {"a.i16", GGUF_I16, A_I16, 3}, {"a.u32", GGUF_U32, A_U32, 2}, {"a.i32", GGUF_I32, A_I32, 3},
        {"a.f32", GGUF_F32, A_F32, 3}, {"a.bool", GGUF_BOOL, A_BOOL, 3}, {"a.u64", GGUF_U64, A_U64, 2},
        {"a.i64", GGUF_I64, A_I64, 2}, {"a.f64", GGUF_F64, A_F64, 2}, {"a.empty", GGUF_F32, NULL, 0},
    };
    static const uint8_t esz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) {
        const gguf_kv *kv = gguf_find(f, arrs[i].key);
        CHECK(kv && kv->type == GGUF_ARR && kv->arr_type == arrs[i].et && kv->arr_n == arrs[i].n, "%s", arrs[i].key);
        if (kv && arrs[i].n) CHECK(memcmp(kv->arr_data, arrs[i].v, arrs[i].n * esz[arrs[i].et]) == 0, "%s data", arrs[i].key);
    }
    const gguf_kv *kv = gguf_find(f, "a.i8");
    CHECK(gguf_arr_num(kv, 0) == -128 && gguf_arr_num(kv, 2) == 127, "arr_num i8");
    kv = gguf_find(f, "a.u64");
    CHECK(gguf_arr_num(kv, 0) == (double)UINT64_MAX, "arr_num u64");
    kv = gguf_find(f, "a.i64");
    CHECK(gguf_arr_num(kv, 0) == (double)INT64_MIN, "arr_num i64");
    kv = gguf_find(f, "a.f32");
    CHECK(gguf_arr_num(kv, 1) == -0.25 && gguf_arr_num(kv, 3) == 0, "arr_num f32");
    kv = gguf_find(f, "a.f64");
    CHECK(gguf_arr_num(kv, 0) == 1e300, "arr_num f64");
    kv = gguf_find(f, "a.bool");
    CHECK(gguf_arr_num(kv, 0) == 1 && gguf_arr_num(kv, 1) == 0, "arr_num bool");
    kv = gguf_find(f, "a.str");
    REQUIRE(kv && kv->arr_type == GGUF_STR && kv->arr_n == 4, "a.str");
    gguf_str sv[4];
    gguf_arr_strs(kv, sv);
    for (int i = 0; i < 4; i++) CHECK(str_is(sv[i], A_STR[i]) && str_is(gguf_arr_str(kv, (uint64_t)i), A_STR[i]), "a.str[%d]", i);

    static const uint64_t nest_bytes[] = {12 + 12 + 8 + 12 + 4 + 12, 12 + 12 + 9 + 10 + 12 + 11, 12 * 8 + 2};
    for (uint64_t i = 0; i < nest->n_kv; i++) {
        char key[32];
        snprintf(key, sizeof key, "%.*s", (int)nest->kv[i].key.n, nest->kv[i].key.p);
        kv = gguf_find(f, key);
        CHECK(kv && kv->arr_type == GGUF_ARR && kv->arr_n == nest->kv[i].arr_n &&
              kv_bytes_equal(kv, &nest->kv[i], nest_bytes[i]), "nested %s", key);
    }

    CHECK(f->n_tensors == N_SRC_T, "n_tensors");
    for (int i = 0; i < N_SRC_T && (uint64_t)i < f->n_tensors; i++) {
        const gguf_tensor *g = &f->tensors[i];
        CHECK(strcmp(g->name, t[i].name) == 0 && g->type == t[i].type && g->n_dims == (uint32_t)t[i].n_dims &&
              !memcmp(g->ne, t[i].ne, sizeof g->ne) && g->nbytes == t[i].nbytes && g->offset % a == 0,
              "tensor %s header", t[i].name);
        if (t[i].data) CHECK(memcmp(g->data, t[i].data, t[i].nbytes) == 0, "tensor %s data", t[i].name);
        else {
            bool zero = true;
            for (uint64_t k = 0; k < g->nbytes; k++) zero &= ((const uint8_t *)g->data)[k] == 0;
            CHECK(zero, "tensor %s zeros", t[i].name);
        }
    }
    CHECK(f->size % a == 0, "file padded to alignment");
    gguf_close(f);
}

/* Copies a model key by key and tensor by tensor (data by reference): must come back byte-identical. */
static void check_copy(const char *path) {
    char out[128];
    gguf_file *f;
    hearth_err err = {{0}};
    snprintf(out, sizeof out, "%s/copy.gguf", g_tmpdir);
    REQUIRE(gguf_open(path, &f, &err) == 0, "%s: %s", path, err.msg);
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < f->n_kv; i++) gguf_w_copy_kv(w, &f->kv[i]);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        gguf_w_tensor(w, t->name, t->type, (int)t->n_dims, t->ne, t->data, t->nbytes);
    }
    CHECK(gguf_writer_write(w, out, &err) == 0, "copy %s: %s", path, err.msg);
    gguf_writer_free(w);
    size_t n1, n2;
    uint8_t *a = (uint8_t *)tu_read_file(path, &n1), *b = (uint8_t *)tu_read_file(out, &n2);
    CHECK(n1 == n2 && memcmp(a, b, n1) == 0, "%s: copy differs (%llu vs %llu bytes)", path, (ull)n1, (ull)n2);
    free(a);
    free(b);
    gguf_close(f);
    unlink(out);
}

static void expect_write_error(gguf_writer *w, const char *path, const char *needle, const char *what) {
    hearth_err err = {{0}};
    CHECK(gguf_writer_write(w, path, &err) == -1 && one_line(err.msg) && strstr(err.msg, needle),
          "%s: expected an error mentioning '%s', got '%s'", what, needle, err.msg);
    gguf_writer_free(w);
}

static void test_writer_errors(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/err.gguf", g_tmpdir);
    int64_t ne[2] = {32, 2};
    uint8_t data[4 * 64] = {0};
    gguf_writer *w = gguf_writer_new();
    gguf_w_tensor(w, "x", 99, 2, ne, data, 64);
    expect_write_error(w, path, "unknown type 99", "unknown type");
    w = gguf_writer_new();
    gguf_w_tensor(w, "x", HT_F32, 2, ne, data, 100);
    expect_write_error(w, path, "need 256", "nbytes mismatch");
    w = gguf_writer_new();
    gguf_w_tensor(w, "x", HT_F32, 5, ne, data, 256);
    expect_write_error(w, path, "n_dims 5", "n_dims");
    w = gguf_writer_new();
    ne[0] = 48;
    gguf_w_tensor(w, "x", HT_Q4_0, 1, ne, data, 27);
    expect_write_error(w, path, "block size", "partial block");
    w = gguf_writer_new();
    ne[0] = 32;
    gguf_w_tensor(w, "x", HT_F32, 2, ne, data, 256);
    gguf_w_tensor(w, "y", HT_F32, 2, ne, data, 256);
    gguf_w_tensor(w, "x", HT_F32, 2, ne, data, 256);
    expect_write_error(w, path, "duplicate tensor name 'x'", "duplicate tensor");
    w = gguf_writer_new();
    gguf_w_u32(w, "general.alignment", 24);
    expect_write_error(w, path, "general.alignment", "bad alignment");
    w = gguf_writer_new();
    gguf_w_u32(w, "general.alignment", 2);
    expect_write_error(w, path, "general.alignment", "alignment 2");
    w = gguf_writer_new();
    gguf_w_i32(w, "general.alignment", 32);
    expect_write_error(w, path, "general.alignment", "alignment type");
    w = gguf_writer_new();
    gguf_w_val(w, "k", GGUF_STR, "x");
    expect_write_error(w, path, "fixed-size", "w_val str");
    w = gguf_writer_new();
    gguf_w_tensor(w, "x", HT_F32, 2, ne, data, 256);
    gguf_w_tensor_fill(w, "y", HT_F32, 2, ne, 256, fill_fails, NULL);
    expect_write_error(w, path, "tensor 'y' failed", "fill fails");
    w = gguf_writer_new();
    expect_write_error(w, "/nonexistent-dir/x.gguf", "cannot create", "bad path");
    if (access("/dev/full", W_OK) == 0) {
        w = gguf_writer_new();
        gguf_w_tensor(w, "x", HT_F32, 2, ne, NULL, 256);
        expect_write_error(w, "/dev/full", "cannot write", "disk full");
    }
    hearth_err err = {{0}};
    CHECK(gguf_writer_write(NULL, path, &err) == -1 && one_line(err.msg), "NULL writer");
    unlink(path);

    /* alignment 64 honoured; an empty writer makes a valid file */
    w = gguf_writer_new();
    CHECK(gguf_writer_write(w, path, &err) == 0, "empty writer: %s", err.msg);
    gguf_writer_free(w);
    gguf_file *f;
    CHECK(gguf_open(path, &f, &err) == 0 && f->n_kv == 0 && f->n_tensors == 0, "empty file: %s", err.msg);
    if (f) gguf_close(f);
    unlink(path);
}

static void test_writer(void) {
    bytes nb = nested_source();
    gguf_file *nest;
    hearth_err err = {{0}};
    REQUIRE(gguf_open_memory(nb.p, nb.n, &nest, &err) == 0, "nested source: %s", err.msg);
    CHECK(nest->version == 2, "v2 file");
    src_tensor t[N_SRC_T];
    make_tensors(t);
    char path[128];
    uint32_t aligns[] = {0, 64, 4096};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/full%d.gguf", g_tmpdir, i);
        write_full(path, nest, t, aligns[i]);
        check_full(path, nest, t, aligns[i]);
        unlink(path);
    }
    for (int i = 0; i < N_SRC_T; i++) free(t[i].data);
    gguf_close(nest);   /* copied kvs must not depend on it */
    free(nb.p);
    check_copy("data/models/llama.gguf");
    check_copy("data/models/llama-Q4_K_M.gguf");
    check_copy("data/models/stories260K.gguf");
    check_copy("data/tokenizer/ggml-vocab-gpt-2.gguf");
    test_writer_errors();
}

/* ---------------------------------------------------------------------------------------------------------
 * 3. The malformed corpus */

static void test_malformed(void) {
    char path[128];
    uint64_t size;
    gguf_file *nest;
    hearth_err err = {{0}};
    bytes nb = nested_source();
    REQUIRE(gguf_open_memory(nb.p, nb.n, &nest, &err) == 0, "nested source: %s", err.msg);
    src_tensor t[N_SRC_T];
    make_tensors(t);
    snprintf(path, sizeof path, "%s/base.gguf", g_tmpdir);
    write_full(path, nest, t, 64);
    for (int i = 0; i < N_SRC_T; i++) free(t[i].data);
    gguf_close(nest);
    free(nb.p);
    uint8_t *w = (uint8_t *)tu_read_file(path, &size);
    unlink(path);

    /* the same file as version 2 is fine */
    uint8_t *v2 = dup_buf(w, size);
    v2[4] = 2;
    gguf_file *f;
    CHECK(gguf_open_memory(v2, size, &f, &err) == 0, "v2: %s", err.msg);
    if (f) gguf_close(f);
    free(v2);

    corrupt_all("writer file", w, size);
    fuzz("writer file", w, size, 20000, 1);
    free(w);

    uint8_t *s = (uint8_t *)tu_read_file("data/models/stories260K.gguf", &size);
    corrupt_all("stories260K", s, size);
    fuzz("stories260K", s, size, 3000, 2);
    free(s);

    check_nesting();
    printf("malformed: %d cases rejected, %d checked through `hearth info`\n", g_rejected, g_cli_runs);
}

/* Removes the temp directory and whatever a failed check left in it (runs on every exit). */
static void remove_tmpdir(void) {
    DIR *d = opendir(g_tmpdir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        char p[sizeof g_tmpdir + 260];
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", g_tmpdir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(g_tmpdir);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/hearth-gguf-XXXXXX");
    REQUIRE(mkdtemp(g_tmpdir), "mkdtemp: %s", strerror(errno));
    atexit(remove_tmpdir);
    g_hearth = getenv("HEARTH");
    if (g_hearth && !*g_hearth) g_hearth = NULL;
    if (g_hearth && access(g_hearth, X_OK) != 0) {
        CHECK(0, "HEARTH=%s is not executable", g_hearth);
        g_hearth = NULL;
    }
    test_shipped_files();
    test_open_errors();
    test_writer();
    test_malformed();
    TEST_DONE();
}
