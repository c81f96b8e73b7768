/* gguf.c — GGUF v2/v3 reader (over mmap or a caller's buffer) and a v3 writer.
 *
 * Reader: the file is untrusted. It is parsed once, front to back, by a bounds-checked cursor: every read
 * first checks that its bytes exist, every count (keys, tensors, array elements) is checked against the bytes
 * left before anything is allocated or walked, and all offset arithmetic goes through add_ok/mul_ok. Arrays
 * grow as entries are actually parsed, so a lying count costs nothing. The resulting index (gguf_kv,
 * gguf_tensor) points into the mapping; arrays of pointers sorted by key / tensor name give binary-search
 * lookups and expose duplicates. Error messages are one line naming the problem and where it is.
 *
 * Writer: each key/value is serialized into its own byte blob when added (so copying a kv from a reader is a
 * byte copy, nested arrays included); tensors keep a pointer to the caller's data (or a callback producing
 * it), which is streamed to the file by gguf_writer_write, never copied whole. The adders return void: their
 * first failure is remembered and reported by the write, which refuses to produce a file the reader would
 * reject. */
#include "io/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant/quant.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "GGUF data is used in place: little-endian hosts only");

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_NEST 8            /* arrays of arrays deeper than this are rejected */
#define MIN_KV_BYTES 13            /* key length (8) + type (4) + smallest value (1) */
#define MIN_TENSOR_BYTES 32        /* name length (8) + n_dims (4) + one dim (8) + type (4) + offset (8) */

typedef unsigned long long ull;

/* ---------------------------------------------------------------------------------------------------------
 * Value types */

/* Bytes of a fixed-size value, 0 for STR and ARR (and unknown types). */
static uint64_t fixed_size(uint32_t t) {
    static const uint8_t sz[GGUF_NTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < GGUF_NTYPES ? sz[t] : 0;
}

/* Smallest encoding of one array element of type t (a string is at least its length, an array its header). */
static uint64_t min_elem_size(uint32_t t) {
    return t == GGUF_STR ? 8 : t == GGUF_ARR ? 12 : fixed_size(t);
}

const char *gguf_type_name(uint32_t t) {
    static const char *const names[GGUF_NTYPES] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                                   "bool", "str", "arr", "u64", "i64", "f64"};
    return t < GGUF_NTYPES ? names[t] : "unknown";
}

static uint16_t le16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t le32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t le64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* A file string shown in a message: printable ASCII only, cut at 64 characters. */
static const char *shown(gguf_str s, char buf[80]) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < s.n && n < 64; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        buf[n++] = (ch >= 0x20 && ch < 0x7f && ch != '\'') ? (char)ch : '?';
    }
    if (s.n > 64) { memcpy(buf + n, "...", 3); n += 3; }
    buf[n] = 0;
    return buf;
}

/* ---------------------------------------------------------------------------------------------------------
 * Bounds-checked cursor */

typedef struct {
    const uint8_t *base;
    uint64_t size, pos;        /* invariant: pos <= size */
    hearth_err *err;
    char where[160];           /* what is being read, for messages: "header", "metadata key 3 'x'", ... */
} cursor;

static int need(cursor *c, uint64_t n) {
    if (n > c->size - c->pos)
        return herr(c->err, "file truncated in %s at byte %llu (file has %llu bytes)", c->where, (ull)c->pos,
                    (ull)c->size);
    return 0;
}

static int skip(cursor *c, uint64_t n) {
    if (need(c, n)) return -1;
    c->pos += n;
    return 0;
}

static int rd_u32(cursor *c, uint32_t *v) {
    if (need(c, 4)) return -1;
    *v = le32(c->base + c->pos);
    c->pos += 4;
    return 0;
}

static int rd_u64(cursor *c, uint64_t *v) {
    if (need(c, 8)) return -1;
    *v = le64(c->base + c->pos);
    c->pos += 8;
    return 0;
}

static int rd_str(cursor *c, gguf_str *s) {
    uint64_t n;
    if (rd_u64(c, &n)) return -1;
    if (n > c->size - c->pos)
        return herr(c->err, "%s: string length %llu runs past end of file (%llu bytes left)", c->where, (ull)n,
                    (ull)(c->size - c->pos));
    s->p = (const char *)c->base + c->pos;
    s->n = n;
    c->pos += n;
    return 0;
}

/* Checks that n elements of at least min bytes each can fit in what is left. */
static int check_count(cursor *c, uint64_t n, uint64_t min, const char *what) {
    uint64_t bytes;
    if (!mul_ok(n, min, &bytes) || bytes > c->size - c->pos)
        return herr(c->err, "%s: %s %llu runs past end of file (%llu bytes left)", c->where, what, (ull)n,
                    (ull)(c->size - c->pos));
    return 0;
}

/* Reads an array header (element type, count) and skips its elements; depth counts array levels (1 = top). */
static int skip_array(cursor *c, int depth, uint32_t *etype_out, uint64_t *n_out) {
    uint32_t et;
    uint64_t n;
    if (depth > GGUF_MAX_NEST) return herr(c->err, "%s: arrays nested more than %d deep", c->where, GGUF_MAX_NEST);
    if (rd_u32(c, &et) || rd_u64(c, &n)) return -1;
    if (et >= GGUF_NTYPES) return herr(c->err, "%s: array of unknown value type %u", c->where, et);
    if (check_count(c, n, min_elem_size(et), "array length")) return -1;
    if (etype_out) *etype_out = et;
    if (n_out) *n_out = n;
    if (fixed_size(et)) return skip(c, n * fixed_size(et));   /* product checked just above */
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s;
        if (et == GGUF_STR ? rd_str(c, &s) : skip_array(c, depth + 1, NULL, NULL)) return -1;
    }
    return 0;
}

/* Skips one value of type t (already known to be valid). */
static int skip_value(cursor *c, uint32_t t) {
    gguf_str s;
    if (t == GGUF_STR) return rd_str(c, &s);
    if (t == GGUF_ARR) return skip_array(c, 1, NULL, NULL);
    return skip(c, fixed_size(t));
}

/* ---------------------------------------------------------------------------------------------------------
 * Reader */

typedef struct {
    gguf_file f;               /* the public part; must stay first */
    bool mapped;               /* f.map is our mmap (else the caller's buffer) */
    const gguf_kv **kv_sorted;         /* by key */
    const gguf_tensor **t_sorted;      /* by name */
} gguf_impl;

static int parse_header(cursor *c, gguf_file *f) {
    snprintf(c->where, sizeof c->where, "header");
    if (c->size < 4 || memcmp(c->base, GGUF_MAGIC, 4) != 0) return herr(c->err, "bad magic (not a GGUF file)");
    c->pos = 4;
    if (rd_u32(c, &f->version)) return -1;
    if (f->version != 2 && f->version != 3) {
        bool swapped = f->version == 0x02000000u || f->version == 0x03000000u;
        return herr(c->err, "unsupported GGUF version %u%s", f->version, swapped ? " (big-endian file)" : "");
    }
    if (rd_u64(c, &f->n_tensors) || rd_u64(c, &f->n_kv)) return -1;
    if (f->n_kv > (c->size - c->pos) / MIN_KV_BYTES)
        return herr(c->err, "metadata key count %llu too large for file size %llu", (ull)f->n_kv, (ull)c->size);
    if (f->n_tensors > (c->size - c->pos) / MIN_TENSOR_BYTES)
        return herr(c->err, "tensor count %llu too large for file size %llu", (ull)f->n_tensors, (ull)c->size);
    return 0;
}

/* Grows *arr (of elem-size entries) so that index i fits; the capacity never exceeds max. */
static int grow(void **arr, uint64_t *cap, uint64_t i, uint64_t max, size_t elem, hearth_err *err) {
    if (i < *cap) return 0;
    uint64_t ncap = *cap ? *cap * 2 : 16, bytes;
    if (ncap > max) ncap = max;
    if (!mul_ok(ncap, elem, &bytes) || bytes > SIZE_MAX) return herr(err, "out of memory");
    void *p = realloc(*arr, (size_t)bytes);
    if (!p) return herr(err, "out of memory (%llu bytes for the index)", (ull)bytes);
    *arr = p;
    *cap = ncap;
    return 0;
}

static int parse_kv(cursor *c, uint64_t i, gguf_kv *kv) {
    char sb[80];
    memset(kv, 0, sizeof *kv);
    snprintf(c->where, sizeof c->where, "metadata key %llu", (ull)i);
    if (rd_str(c, &kv->key)) return -1;
    snprintf(c->where, sizeof c->where, "metadata key '%s'", shown(kv->key, sb));
    if (rd_u32(c, &kv->type)) return -1;
    if (kv->type >= GGUF_NTYPES) return herr(c->err, "%s: unknown value type %u", c->where, kv->type);
    kv->val = c->base + c->pos;
    if (kv->type != GGUF_ARR) return skip_value(c, kv->type);
    if (skip_array(c, 1, &kv->arr_type, &kv->arr_n)) return -1;
    kv->arr_data = kv->val + 12;
    return 0;
}

static int parse_kvs(cursor *c, gguf_file *f) {
    uint64_t cap = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        if (grow((void **)&f->kv, &cap, i, f->n_kv, sizeof *f->kv, c->err)) return -1;
        if (parse_kv(c, i, &f->kv[i])) { f->n_kv = i; return -1; }
    }
    return 0;
}

static int cmp_str(gguf_str a, gguf_str b) {
    int r = memcmp(a.p, b.p, a.n < b.n ? a.n : b.n);
    return r ? r : (a.n > b.n) - (a.n < b.n);
}

static int cmp_kv_ptr(const void *a, const void *b) {
    return cmp_str((*(const gguf_kv *const *)a)->key, (*(const gguf_kv *const *)b)->key);
}

static int cmp_tensor_ptr(const void *a, const void *b) {
    return strcmp((*(const gguf_tensor *const *)a)->name, (*(const gguf_tensor *const *)b)->name);
}

/* Sorts pointers to n elements of arr (elem bytes each) with cmp; NULL + message on allocation failure. */
static const void **sorted_ptrs(const void *arr, uint64_t n, size_t elem, int (*cmp)(const void *, const void *),
                                hearth_err *err) {
    uint64_t bytes;
    if (!mul_ok(n ? n : 1, sizeof(void *), &bytes) || bytes > SIZE_MAX) { herr(err, "out of memory"); return NULL; }
    const void **p = malloc((size_t)bytes);
    if (!p) { herr(err, "out of memory"); return NULL; }
    for (uint64_t i = 0; i < n; i++) p[i] = (const char *)arr + i * elem;
    if (n > 1) qsort(p, (size_t)n, sizeof *p, cmp);
    return p;
}

static int index_kvs(gguf_impl *g, hearth_err *err) {
    char sb[80];
    g->kv_sorted = (const gguf_kv **)sorted_ptrs(g->f.kv, g->f.n_kv, sizeof(gguf_kv), cmp_kv_ptr, err);
    if (!g->kv_sorted) return -1;
    for (uint64_t i = 1; i < g->f.n_kv; i++)
        if (cmp_kv_ptr(&g->kv_sorted[i - 1], &g->kv_sorted[i]) == 0)
            return herr(err, "duplicate metadata key '%s'", shown(g->kv_sorted[i]->key, sb));
    return 0;
}

static int read_alignment(const gguf_file *f, uint64_t *out, hearth_err *err) {
    const gguf_kv *kv = gguf_find(f, "general.alignment");
    *out = GGUF_DEFAULT_ALIGNMENT;
    if (!kv) return 0;
    if (kv->type != GGUF_U32)
        return herr(err, "general.alignment has type %s, expected u32", gguf_type_name(kv->type));
    uint32_t a = le32(kv->val);
    if (a == 0 || (a & (a - 1)) != 0)
        return herr(err, "general.alignment %u is not a nonzero power of two", a);
    *out = a;
    return 0;
}

/* A tensor name as shown in a message. */
static const char *tname(const char *name, char buf[80]) {
    gguf_str s = {name, strlen(name)};
    return shown(s, buf);
}

/* Checks shape and type and computes nelem and nbytes. */
static int check_tensor_shape(gguf_tensor *t, hearth_err *err) {
    char sb[80];
    const char *name = tname(t->name, sb);
    uint64_t nelem = 1, rows, row_bytes;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (t->ne[d] < 1)
            return herr(err, "tensor '%s': dimension %u is %lld (must be at least 1)", name, d, (long long)t->ne[d]);
        if (!mul_ok(nelem, (uint64_t)t->ne[d], &nelem) || nelem > INT64_MAX)
            return herr(err, "tensor '%s': element count overflows (%lld x %lld x %lld x %lld)", name,
                        (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
    }
    const ht_traits *tr = ht_get_traits(t->type);
    if (!tr) return herr(err, "tensor '%s': unknown type %u", name, t->type);
    if (t->ne[0] % tr->blck != 0)
        return herr(err, "tensor '%s': row length %lld is not a multiple of the %s block size %d", name,
                    (long long)t->ne[0], tr->name, tr->blck);
    rows = nelem / (uint64_t)t->ne[0];
    if (!mul_ok((uint64_t)(t->ne[0] / tr->blck), tr->type_size, &row_bytes) || row_bytes > SIZE_MAX ||
        !mul_ok(row_bytes, rows, &t->nbytes))
        return herr(err, "tensor '%s': byte size overflows", name);
    if (ht_row_size(t->type, t->ne[0]) != row_bytes)
        return herr(err, "tensor '%s': inconsistent row size for type %s", name, tr->name);
    t->nelem = nelem;
    return 0;
}

static int parse_tensor_info(cursor *c, uint64_t i, gguf_tensor *t) {
    char sb[80];
    gguf_str name;
    memset(t, 0, sizeof *t);
    snprintf(c->where, sizeof c->where, "tensor index (tensor %llu)", (ull)i);
    if (rd_str(c, &name)) return -1;
    snprintf(c->where, sizeof c->where, "tensor index (tensor '%s')", shown(name, sb));
    if (memchr(name.p, 0, name.n)) return herr(c->err, "tensor %llu '%s': name contains a NUL byte", (ull)i, sb);
    t->name = malloc(name.n + 1);
    if (!t->name) return herr(c->err, "out of memory");
    memcpy(t->name, name.p, name.n);
    t->name[name.n] = 0;
    if (rd_u32(c, &t->n_dims)) return -1;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return herr(c->err, "tensor '%s': n_dims %u out of range 1..%d", sb, t->n_dims, GGUF_MAX_DIMS);
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t v;
        if (rd_u64(c, &v)) return -1;
        if (v > INT64_MAX) return herr(c->err, "tensor '%s': dimension %u is %llu (too large)", sb, d, (ull)v);
        t->ne[d] = (int64_t)v;
    }
    if (rd_u32(c, &t->type) || rd_u64(c, &t->offset)) return -1;
    return check_tensor_shape(t, c->err);
}

static int parse_tensor_index(cursor *c, gguf_file *f) {
    uint64_t cap = 0;
    if (f->n_tensors > (c->size - c->pos) / MIN_TENSOR_BYTES)
        return herr(c->err, "tensor count %llu too large for the %llu bytes after the metadata", (ull)f->n_tensors,
                    (ull)(c->size - c->pos));
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        if (grow((void **)&f->tensors, &cap, i, f->n_tensors, sizeof *f->tensors, c->err)) {
            f->n_tensors = i;
            return -1;
        }
        if (parse_tensor_info(c, i, &f->tensors[i])) { f->n_tensors = i + 1; return -1; }
    }
    return 0;
}

/* Places the data section after the index and checks every tensor's byte range. */
static int place_tensor_data(const cursor *c, gguf_file *f) {
    uint64_t end = c->pos, start;
    if (!add_ok(end, f->alignment - 1, &start)) return herr(c->err, "data section offset overflows");
    start -= start % f->alignment;
    if (start > f->size) {
        if (f->n_tensors > 0)
            return herr(c->err, "file truncated before tensor data (data starts at byte %llu, file has %llu bytes)",
                        (ull)start, (ull)f->size);
        start = f->size;   /* a file without tensors may end right after its index, without padding */
    }
    f->data_offset = start;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        char sb[80];
        const char *name = tname(t->name, sb);
        uint64_t pos, tend;
        if (t->offset % f->alignment != 0)
            return herr(c->err, "tensor '%s': offset %llu not aligned to %llu", name, (ull)t->offset,
                        (ull)f->alignment);
        if (!add_ok(start, t->offset, &pos) || !add_ok(pos, t->nbytes, &tend))
            return herr(c->err, "tensor '%s': offset %llu runs past end of file (%llu)", name, (ull)t->offset,
                        (ull)f->size);
        if (tend > f->size)
            return herr(c->err, "tensor '%s': data ends at byte %llu, past end of file (%llu)", name, (ull)tend,
                        (ull)f->size);
        if (pos % 4 != 0)   /* in-place use casts to float / block structs */
            return herr(c->err, "tensor '%s': data at byte %llu is not 4-byte aligned", name, (ull)pos);
        t->data = c->base + pos;
    }
    return 0;
}

static int index_tensors(gguf_impl *g, hearth_err *err) {
    char sb[80];
    g->t_sorted = (const gguf_tensor **)sorted_ptrs(g->f.tensors, g->f.n_tensors, sizeof(gguf_tensor),
                                                    cmp_tensor_ptr, err);
    if (!g->t_sorted) return -1;
    for (uint64_t i = 1; i < g->f.n_tensors; i++)
        if (strcmp(g->t_sorted[i - 1]->name, g->t_sorted[i]->name) == 0)
            return herr(err, "duplicate tensor name '%s'", tname(g->t_sorted[i]->name, sb));
    return 0;
}

static int parse(gguf_impl *g, hearth_err *err) {
    gguf_file *f = &g->f;
    cursor c = {.base = f->map, .size = f->size, .pos = 0, .err = err};
    if (parse_header(&c, f) || parse_kvs(&c, f) || index_kvs(g, err)) return -1;
    if (read_alignment(f, &f->alignment, err)) return -1;
    if (parse_tensor_index(&c, f) || place_tensor_data(&c, f)) return -1;
    return index_tensors(g, err);
}

static int open_over(void *map, uint64_t size, bool mapped, gguf_file **out, hearth_err *err) {
    gguf_impl *g = calloc(1, sizeof *g);
    *out = NULL;
    if (!g) {
        if (mapped) munmap(map, (size_t)size);
        return herr(err, "out of memory");
    }
    g->f.map = map;
    g->f.size = size;
    g->mapped = mapped;
    if (parse(g, err)) {
        gguf_close(&g->f);
        return -1;
    }
    *out = &g->f;
    return 0;
}

int gguf_open_memory(const void *buf, uint64_t size, gguf_file **out, hearth_err *err) {
    if (!buf && size) { *out = NULL; return herr(err, "no buffer"); }
    return open_over((void *)buf, size, false, out, err);
}

int gguf_open(const char *path, gguf_file **out, hearth_err *err) {
    struct stat st;
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return herr(err, "cannot open: %s", strerror(errno));
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return herr(err, "cannot open: %s", strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return herr(err, "not a regular file");
    }
    if (st.st_size == 0) {   /* mmap cannot map nothing */
        close(fd);
        return herr(err, "empty file (not a GGUF file)");
    }
    if ((uint64_t)st.st_size > SIZE_MAX) { close(fd); return herr(err, "file too large to map"); }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return herr(err, "cannot map: %s", strerror(errno));
    return open_over(map, (uint64_t)st.st_size, true, out, err);
}

bool gguf_mapped(const gguf_file *f) { return ((const gguf_impl *)f)->mapped; }

void gguf_close(gguf_file *f) {
    if (!f) return;
    gguf_impl *g = (gguf_impl *)f;
    for (uint64_t i = 0; f->tensors && i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    free(f->kv);
    free(g->kv_sorted);
    free(g->t_sorted);
    if (g->mapped) munmap(f->map, (size_t)f->size);
    free(g);
}

/* ---------------------------------------------------------------------------------------------------------
 * Lookups and getters */

static int cmp_key_kvptr(const void *key, const void *elem) {
    return cmp_str(*(const gguf_str *)key, (*(const gguf_kv *const *)elem)->key);
}

static int cmp_name_tptr(const void *name, const void *elem) {
    return strcmp((const char *)name, (*(const gguf_tensor *const *)elem)->name);
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    const gguf_impl *g = (const gguf_impl *)f;
    gguf_str k = {key, strlen(key)};
    if (!f->n_kv) return NULL;
    const gguf_kv *const *hit = bsearch(&k, g->kv_sorted, (size_t)f->n_kv, sizeof *g->kv_sorted, cmp_key_kvptr);
    return hit ? *hit : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    const gguf_impl *g = (const gguf_impl *)f;
    if (!f->n_tensors) return NULL;
    const gguf_tensor *const *hit =
        bsearch(name, g->t_sorted, (size_t)f->n_tensors, sizeof *g->t_sorted, cmp_name_tptr);
    return hit ? *hit : NULL;
}

/* Reads an integer value of type t at p as a sign flag and a value: *neg set => *s is valid, else *u. */
static bool int_value(uint32_t t, const uint8_t *p, bool *neg, int64_t *s, uint64_t *u) {
    *s = 0;
    *u = 0;
    switch (t) {
    case GGUF_U8:  *u = p[0]; break;
    case GGUF_U16: *u = le16(p); break;
    case GGUF_U32: *u = le32(p); break;
    case GGUF_U64: *u = le64(p); break;
    case GGUF_I8:  *s = (int8_t)p[0]; break;
    case GGUF_I16: *s = (int16_t)le16(p); break;
    case GGUF_I32: *s = (int32_t)le32(p); break;
    case GGUF_I64: *s = (int64_t)le64(p); break;
    default: return false;
    }
    bool is_signed = t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64;
    *neg = is_signed && *s < 0;
    if (is_signed && !*neg) *u = (uint64_t)*s;
    return true;
}

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    const gguf_kv *kv = gguf_find(f, key);
    bool neg;
    int64_t s;
    uint64_t u;
    if (!kv || !int_value(kv->type, kv->val, &neg, &s, &u) || neg || u > UINT32_MAX) return false;
    *out = (uint32_t)u;
    return true;
}

bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
    const gguf_kv *kv = gguf_find(f, key);
    bool neg;
    int64_t s;
    uint64_t u;
    if (!kv || !int_value(kv->type, kv->val, &neg, &s, &u)) return false;
    if (neg) { *out = s; return true; }
    if (u > INT64_MAX) return false;
    *out = (int64_t)u;
    return true;
}

static double f32_at(const uint8_t *p) { float v; memcpy(&v, p, 4); return v; }
static double f64_at(const uint8_t *p) { double v; memcpy(&v, p, 8); return v; }

bool gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || (kv->type != GGUF_F32 && kv->type != GGUF_F64)) return false;
    const double v = kv->type == GGUF_F32 ? f32_at(kv->val) : f64_at(kv->val);
    if (v > 3.4028234663852886e38 || v < -3.4028234663852886e38) return false;   /* not a float (NaN passes) */
    *out = (float)v;
    return true;
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_BOOL) return false;
    *out = kv->val[0] != 0;
    return true;
}

bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_STR) return false;
    out->n = le64(kv->val);
    out->p = (const char *)kv->val + 8;
    return true;
}

gguf_str gguf_arr_str(const gguf_kv *kv, uint64_t i) {
    gguf_str s = {"", 0};
    if (kv->type != GGUF_ARR || kv->arr_type != GGUF_STR || i >= kv->arr_n) return s;
    const uint8_t *p = kv->arr_data;
    for (uint64_t j = 0; j < i; j++) p += 8 + le64(p);
    s.n = le64(p);
    s.p = (const char *)p + 8;
    return s;
}

void gguf_arr_strs(const gguf_kv *kv, gguf_str *out) {
    if (kv->type != GGUF_ARR || kv->arr_type != GGUF_STR) return;
    const uint8_t *p = kv->arr_data;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        out[i].n = le64(p);
        out[i].p = (const char *)p + 8;
        p += 8 + out[i].n;
    }
}

double gguf_arr_num(const gguf_kv *kv, uint64_t i) {
    uint64_t sz = fixed_size(kv->arr_type);
    if (kv->type != GGUF_ARR || !sz || i >= kv->arr_n) return 0;
    const uint8_t *p = kv->arr_data + i * sz;
    bool neg;
    int64_t s;
    uint64_t u;
    if (kv->arr_type == GGUF_F32) return f32_at(p);
    if (kv->arr_type == GGUF_F64) return f64_at(p);
    if (kv->arr_type == GGUF_BOOL) return p[0] != 0;
    int_value(kv->arr_type, p, &neg, &s, &u);
    return neg ? (double)s : (double)u;
}

bool gguf_arr_int(const gguf_kv *kv, uint64_t i, int64_t lo, int64_t hi, int64_t *out) {
    const double v = gguf_arr_num(kv, i);   /* exact for every integer type up to 2^53, NaN stays NaN */
    if (!(v >= (double)lo && v <= (double)hi) || v != (double)(int64_t)v) return false;
    *out = (int64_t)v;
    return true;
}

/* ---------------------------------------------------------------------------------------------------------
 * Writer */

typedef struct { uint8_t *p; uint64_t n, cap; bool oom; } wbuf;

static void wb_put(wbuf *b, const void *data, uint64_t n) {
    uint64_t need_n;
    if (b->oom) return;
    if (!add_ok(b->n, n, &need_n) || need_n > SIZE_MAX / 2) { b->oom = true; return; }
    if (need_n > b->cap) {
        uint64_t ncap = b->cap ? b->cap : 64;
        while (ncap < need_n) ncap *= 2;
        uint8_t *p = realloc(b->p, (size_t)ncap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = ncap;
    }
    if (n) memcpy(b->p + b->n, data, (size_t)n);
    b->n = need_n;
}
static void wb_u32(wbuf *b, uint32_t v) { wb_put(b, &v, 4); }
static void wb_u64(wbuf *b, uint64_t v) { wb_put(b, &v, 8); }
static void wb_str(wbuf *b, const char *s, uint64_t n) { wb_u64(b, n); wb_put(b, s, n); }

typedef struct {
    wbuf blob;                 /* the whole serialized entry: key string, type, value */
    uint64_t key_len;          /* the key is blob.p[8 .. 8 + key_len) */
} wkv;

typedef struct {
    char *name;
    uint32_t type, n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    const void *data;          /* the caller's; NULL (and no fill) = zeros */
    gguf_fill_fn fill;         /* or: produces the bytes at write time */
    void *fill_ctx;
    uint64_t nbytes, offset;
} wtensor;

struct gguf_writer {
    wkv *kv;
    uint64_t n_kv, cap_kv;
    wtensor *t;
    uint64_t n_t, cap_t;
    uint32_t alignment;
    bool failed;
    hearth_err err;            /* the first failure of an adder */
};

/* Records the first adder failure (later ones are consequences or noise). */
static void w_fail(gguf_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void w_fail(gguf_writer *w, const char *fmt, ...) {
    if (w->failed) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err.msg, sizeof w->err.msg, fmt, ap);
    va_end(ap);
    for (char *p = w->err.msg; *p; p++) if (*p == '\n' || *p == '\r') *p = ' ';
    w->failed = true;
}

gguf_writer *gguf_writer_new(void) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (w) w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->kv[i].blob.p);
    for (uint64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* Starts an entry: key string then type; the caller appends the value and calls w_commit. */
static wbuf w_begin(const char *key, uint64_t key_len, uint32_t type) {
    wbuf b = {0};
    wb_str(&b, key, key_len);
    wb_u32(&b, type);
    return b;
}

static bool key_is(const wkv *e, const char *key, uint64_t key_len) {
    return e->key_len == key_len && memcmp(e->blob.p + 8, key, key_len) == 0;
}

/* Remembers general.alignment when it is set, and refuses values the reader would reject. */
static void w_note_alignment(gguf_writer *w, const wbuf *b, uint64_t key_len) {
    static const char ak[] = "general.alignment";
    if (key_len != sizeof ak - 1 || memcmp(b->p + 8, ak, key_len) != 0) return;
    uint32_t type = le32(b->p + 8 + key_len), a = 0;
    if (type == GGUF_U32) a = le32(b->p + 12 + key_len);
    if (type != GGUF_U32 || a < 4 || (a & (a - 1)) != 0) {   /* < 4 could leave float data misaligned */
        w_fail(w, "general.alignment must be a u32 power of two, at least 4");
        return;
    }
    w->alignment = a;
}

/* Installs a finished entry, replacing an earlier value of the same key in place. Takes ownership of b. */
static void w_commit(gguf_writer *w, wbuf *b, uint64_t key_len) {
    if (!w || w->failed || b->oom) {
        if (w && b->oom) w_fail(w, "gguf writer: out of memory");
        free(b->p);
        return;
    }
    const char *key = (const char *)b->p + 8;
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (key_is(&w->kv[i], key, key_len)) {
            free(w->kv[i].blob.p);
            w->kv[i].blob = *b;
            w_note_alignment(w, b, key_len);
            return;
        }
    if (w->n_kv == w->cap_kv) {
        uint64_t ncap = w->cap_kv ? w->cap_kv * 2 : 32;
        wkv *p = ncap < SIZE_MAX / sizeof *p ? realloc(w->kv, (size_t)ncap * sizeof *p) : NULL;
        if (!p) { w_fail(w, "gguf writer: out of memory"); free(b->p); return; }
        w->kv = p;
        w->cap_kv = ncap;
    }
    w->kv[w->n_kv++] = (wkv){*b, key_len};
    w_note_alignment(w, b, key_len);
}

void gguf_w_val(gguf_writer *w, const char *key, uint32_t type, const void *v) {
    if (!w) return;
    if (!fixed_size(type)) {
        w_fail(w, "metadata key '%.64s': gguf_w_val takes fixed-size types, not %s", key, gguf_type_name(type));
        return;
    }
    wbuf b = w_begin(key, strlen(key), type);
    wb_put(&b, v, fixed_size(type));
    w_commit(w, &b, strlen(key));
}

void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v) { gguf_w_val(w, key, GGUF_U32, &v); }
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v) { gguf_w_val(w, key, GGUF_I32, &v); }
void gguf_w_f32(gguf_writer *w, const char *key, float v) { gguf_w_val(w, key, GGUF_F32, &v); }
void gguf_w_bool(gguf_writer *w, const char *key, bool v) { uint8_t b = v; gguf_w_val(w, key, GGUF_BOOL, &b); }

void gguf_w_str(gguf_writer *w, const char *key, const char *v) {
    if (!w) return;
    wbuf b = w_begin(key, strlen(key), GGUF_STR);
    wb_str(&b, v, strlen(v));
    w_commit(w, &b, strlen(key));
}

void gguf_w_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *v, uint64_t n) {
    uint64_t bytes;
    if (!w) return;
    if (!fixed_size(elem_type)) {
        w_fail(w, "metadata key '%.64s': gguf_w_arr takes fixed-size types, not %s", key, gguf_type_name(elem_type));
        return;
    }
    if (!mul_ok(n, fixed_size(elem_type), &bytes)) { w_fail(w, "metadata key '%.64s': array too large", key); return; }
    wbuf b = w_begin(key, strlen(key), GGUF_ARR);
    wb_u32(&b, elem_type);
    wb_u64(&b, n);
    wb_put(&b, v, bytes);
    w_commit(w, &b, strlen(key));
}

void gguf_w_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n) {
    gguf_w_arr(w, key, GGUF_F32, v, n);
}
void gguf_w_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n) {
    gguf_w_arr(w, key, GGUF_I32, v, n);
}

void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n) {
    if (!w) return;
    wbuf b = w_begin(key, strlen(key), GGUF_ARR);
    wb_u32(&b, GGUF_STR);
    wb_u64(&b, n);
    for (uint64_t i = 0; i < n && !b.oom; i++) wb_str(&b, v[i] ? v[i] : "", v[i] ? strlen(v[i]) : 0);
    w_commit(w, &b, strlen(key));
}

void gguf_w_copy_kv(gguf_writer *w, const gguf_kv *kv) {
    if (!w) return;
    /* The kv was validated when its file was opened, so its value can be walked without a size bound. */
    cursor c = {.base = kv->val, .size = UINT64_MAX, .pos = 0, .err = NULL};
    snprintf(c.where, sizeof c.where, "copied key");
    if (skip_value(&c, kv->type)) { w_fail(w, "gguf_w_copy_kv: invalid key/value"); return; }
    wbuf b = w_begin(kv->key.p, kv->key.n, kv->type);
    wb_put(&b, kv->val, c.pos);
    w_commit(w, &b, kv->key.n);
}

/* Checks a tensor the way the reader will, so the written file reopens. */
static bool w_tensor_ok(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne,
                        uint64_t nbytes) {
    gguf_tensor t = {.name = (char *)name, .type = type, .n_dims = (uint32_t)n_dims};
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
        w_fail(w, "tensor '%.64s': n_dims %d out of range 1..%d", name, n_dims, GGUF_MAX_DIMS);
        return false;
    }
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t.ne[d] = d < n_dims ? ne[d] : 1;
    if (check_tensor_shape(&t, &w->err)) { w->failed = true; return false; }
    if (t.nbytes != nbytes) {
        w_fail(w, "tensor '%.64s': %llu bytes given, its type and shape need %llu", name, (ull)nbytes, (ull)t.nbytes);
        return false;
    }
    return true;
}

/* Appends a checked tensor without data; NULL if the writer has failed. */
static wtensor *w_add_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne,
                             uint64_t nbytes) {
    if (!w || w->failed || !w_tensor_ok(w, name, type, n_dims, ne, nbytes)) return NULL;
    if (w->n_t == w->cap_t) {
        uint64_t ncap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *p = ncap < SIZE_MAX / sizeof *p ? realloc(w->t, (size_t)ncap * sizeof *p) : NULL;
        if (!p) { w_fail(w, "gguf writer: out of memory"); return NULL; }
        w->t = p;
        w->cap_t = ncap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) { w_fail(w, "gguf writer: out of memory"); return NULL; }
    t->type = type;
    t->n_dims = (uint32_t)n_dims;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->nbytes = nbytes;
    w->n_t++;
    return t;
}

void gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne,
                   const void *data, uint64_t nbytes) {
    wtensor *t = w_add_tensor(w, name, type, n_dims, ne, nbytes);
    if (t) t->data = data;
}

void gguf_w_tensor_fill(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne,
                        uint64_t nbytes, gguf_fill_fn fill, void *ctx) {
    wtensor *t = w_add_tensor(w, name, type, n_dims, ne, nbytes);
    if (t) { t->fill = fill; t->fill_ctx = ctx; }
}

static int cmp_wtensor_name(const void *a, const void *b) {
    return strcmp((*(const wtensor *const *)a)->name, (*(const wtensor *const *)b)->name);
}

/* Rejects duplicate tensor names and assigns each tensor its aligned offset in the data section. */
static int w_layout(gguf_writer *w, hearth_err *err) {
    const wtensor **s = (const wtensor **)sorted_ptrs(w->t, w->n_t, sizeof *w->t, cmp_wtensor_name, err);
    if (!s) return -1;
    for (uint64_t i = 1; i < w->n_t; i++)
        if (strcmp(s[i - 1]->name, s[i]->name) == 0) {
            int r = herr(err, "duplicate tensor name '%.64s'", s[i]->name);
            free(s);
            return r;
        }
    free(s);
    uint64_t off = 0, a = w->alignment;
    for (uint64_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        if (!add_ok(off, w->t[i].nbytes, &off) || !add_ok(off, a - 1, &off)) return herr(err, "tensor data too large");
        off -= off % a;
    }
    return 0;
}

typedef struct {
    FILE *fp;
    uint64_t pos;
    int error;                 /* errno of the first failure */
    const char *fill_failed;   /* the tensor whose fill callback failed */
} wfile;

static void wf_put(wfile *f, const void *p, uint64_t n) {
    if (f->error || n == 0) return;
    errno = 0;
    if (fwrite(p, 1, (size_t)n, f->fp) != (size_t)n) f->error = errno ? errno : EIO;
    f->pos += n;
}

static void wf_zeros(wfile *f, uint64_t n) {
    static const uint8_t zeros[4096];
    while (n > 0 && !f->error) {
        uint64_t k = n < sizeof zeros ? n : sizeof zeros;
        wf_put(f, zeros, k);
        n -= k;
    }
}

static void wf_pad(wfile *f, uint64_t alignment) { wf_zeros(f, (alignment - f->pos % alignment) % alignment); }

/* Writes a tensor produced by its fill callback, through a buffer of its size. */
static void wf_filled(wfile *f, const wtensor *t) {
    void *buf = t->nbytes <= SIZE_MAX ? malloc((size_t)t->nbytes) : NULL;
    if (!buf) { f->error = ENOMEM; return; }
    if (t->fill(t->fill_ctx, buf, t->nbytes) != 0) {
        f->error = ECANCELED;
        f->fill_failed = t->name;
    } else {
        wf_put(f, buf, t->nbytes);
    }
    free(buf);
}

static void wf_tensor(wfile *f, const wtensor *t) {
    if (t->fill) wf_filled(f, t);
    else if (t->data) wf_put(f, t->data, t->nbytes);
    else wf_zeros(f, t->nbytes);
}

static void w_emit(const gguf_writer *w, wfile *f) {
    wbuf h = {0};
    wb_put(&h, GGUF_MAGIC, 4);
    wb_u32(&h, 3);
    wb_u64(&h, w->n_t);
    wb_u64(&h, w->n_kv);
    for (uint64_t i = 0; i < w->n_kv; i++) wb_put(&h, w->kv[i].blob.p, w->kv[i].blob.n);
    for (uint64_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        wb_str(&h, t->name, strlen(t->name));
        wb_u32(&h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) wb_u64(&h, (uint64_t)t->ne[d]);
        wb_u32(&h, t->type);
        wb_u64(&h, t->offset);
    }
    if (h.oom) f->error = ENOMEM;
    else wf_put(f, h.p, h.n);
    free(h.p);
    if (w->n_t) wf_pad(f, w->alignment);   /* a file without tensors has no data section to align */
    for (uint64_t i = 0; i < w->n_t && !f->error; i++) {
        wf_tensor(f, &w->t[i]);
        wf_pad(f, w->alignment);
    }
}

int gguf_writer_write_fd(gguf_writer *w, int fd, const char *path, hearth_err *err) {
    if (!w) return herr(err, "gguf writer: out of memory");
    if (w->failed) return herr(err, "%s", w->err.msg);
    if (w_layout(w, err)) return -1;
    int fd2 = dup(fd);
    wfile f = {fd2 >= 0 ? fdopen(fd2, "wb") : NULL, 0, 0, NULL};
    if (!f.fp) {
        int e = errno;
        if (fd2 >= 0) close(fd2);
        return herr(err, "cannot write %s: %s", path, strerror(e));
    }
    w_emit(w, &f);
    errno = 0;
    if (fflush(f.fp) != 0 && !f.error) f.error = errno ? errno : EIO;
    if (fclose(f.fp) != 0 && !f.error) f.error = errno ? errno : EIO;
    if (f.fill_failed)
        return herr(err, "cannot write %s: producing the data of tensor '%.64s' failed", path, f.fill_failed);
    if (f.error) return herr(err, "cannot write %s: %s", path, strerror(f.error));
    return 0;
}

int gguf_writer_write(gguf_writer *w, const char *path, hearth_err *err) {
    if (!w) return herr(err, "gguf writer: out of memory");
    if (w->failed) return herr(err, "%s", w->err.msg);
    ht_afile f;
    if (ht_afile_open(&f, path, err)) return -1;
    if (gguf_writer_write_fd(w, f.fd, path, err)) { ht_afile_abort(&f); return -1; }
    return ht_afile_commit(&f, err);
}
