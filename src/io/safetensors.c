/* safetensors.c — safetensors reader over mmap (see safetensors.h for the format and guarantees).
 *
 * How it works: each shard is mapped read-only; its JSON header is parsed with cJSON (length-bounded, so
 * the mapping need not be NUL-terminated) and every entry is validated into an st_tensor whose name is
 * copied and whose data pointer points into the mapping. Per shard, non-empty byte ranges are sorted by
 * start to find overlaps. When all shards are in, tensors are sorted by name, which both finds duplicate
 * names (within or across shards) and gives st_find a binary search. For a sharded checkpoint the index's
 * weight_map is then checked against what the shards actually hold.
 *
 * All sizes are u64 and every product or sum that comes from the file goes through mul_ok/add_ok. JSON
 * numbers are doubles in cJSON: integers are accepted only below 2^53, where doubles are exact, and a
 * text scan rejects fraction/exponent forms ("1.0", "1e3") that a value check alone would let through. */
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant/quant.h"

#define ST_HEADER_MAX (100ull << 20)   /* largest JSON header accepted */
#define ST_INT_LIMIT (1ull << 53)      /* JSON integers must be below this (exact as doubles) */
#define NAME_FMT "%.128s"              /* untrusted names are clipped in messages */

/* ---- dtypes ---- */

typedef struct { const char *name; unsigned bits; int type; } st_dtype;

static const st_dtype st_dtypes[] = {
    {"F32", 32, HT_F32}, {"F16", 16, HT_F16}, {"BF16", 16, HT_BF16},
    {"F64", 64, ST_UNSUPPORTED}, {"I64", 64, ST_UNSUPPORTED}, {"U64", 64, ST_UNSUPPORTED},
    {"I32", 32, ST_UNSUPPORTED}, {"U32", 32, ST_UNSUPPORTED}, {"I16", 16, ST_UNSUPPORTED},
    {"U16", 16, ST_UNSUPPORTED}, {"I8", 8, ST_UNSUPPORTED}, {"U8", 8, ST_UNSUPPORTED},
    {"BOOL", 8, ST_UNSUPPORTED}, {"F8_E4M3", 8, ST_UNSUPPORTED}, {"F8_E5M2", 8, ST_UNSUPPORTED},
    {"F8_E8M0", 8, ST_UNSUPPORTED}, {"F6_E2M3", 6, ST_UNSUPPORTED}, {"F6_E3M2", 6, ST_UNSUPPORTED},
    {"F4", 4, ST_UNSUPPORTED}, {"C64", 64, ST_UNSUPPORTED},
};

static const st_dtype *dtype_lookup(const char *name) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(st_dtypes[i].name, name) == 0) return &st_dtypes[i];
    return NULL;
}

/* ---- small helpers ---- */

static uint64_t read_u64_le(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* A JSON number that is an integer in [0, 2^53). */
static bool json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0.0) || d >= (double)ST_INT_LIMIT || d != (double)(uint64_t)d) return false;
    *out = (uint64_t)d;
    return true;
}

static bool is_json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Parses exactly n bytes of JSON text (only whitespace may follow the value). */
static cJSON *parse_json_text(const char *text, size_t n, const char *label, hearth_err *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &end, 0);
    if (!root) {
        size_t at = end && end >= text && end <= text + n ? (size_t)(end - text) : 0;
        herr(err, "%s: not valid JSON (error near byte %zu)", label, at);
        return NULL;
    }
    while (end < text + n && is_json_space(*end)) end++;
    if (end != text + n) {
        herr(err, "%s: unexpected data after the JSON value at byte %zu", label, (size_t)(end - text));
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* Finds a number written with a sign, fraction or exponent outside strings ("-0", "2.0", "1e3" pass a
 * value check); returns it (and its length) or NULL. Run only on text cJSON has accepted. */
static const char *find_non_plain_integer(const char *p, size_t n, size_t *len) {
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i;
            bool plain = true;
            while (j < n && (p[j] == '-' || p[j] == '+' || p[j] == '.' || p[j] == 'e' || p[j] == 'E' ||
                             (p[j] >= '0' && p[j] <= '9'))) {
                if (p[j] < '0' || p[j] > '9') plain = false;
                j++;
            }
            if (!plain) { *len = j - i; return p + i; }
            i = j - 1;
        }
    }
    return NULL;
}

static void format_shape(const int64_t *shape, int n_dims, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n_dims && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

static char *path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Opens path read-only, refusing anything but a regular file (O_NONBLOCK: a FIFO must not hang us). */
static int open_regular(const char *path, uint64_t *size, hearth_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return herr(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return herr(err, "%s: not a regular file", path);
    }
    *size = (uint64_t)st.st_size;
    if (*size > SIZE_MAX) { close(fd); return herr(err, "%s: file too large for this platform", path); }
    return fd;
}

/* ---- set building ---- */

static int add_shard(st_set *s, const char *path, hearth_err *err) {
    st_shard *sh = realloc(s->shards, ((size_t)s->n_shards + 1) * sizeof *sh);
    if (!sh) return herr(err, "%s: out of memory", path);
    s->shards = sh;
    sh = &s->shards[s->n_shards];
    memset(sh, 0, sizeof *sh);
    sh->path = strdup(path);
    if (!sh->path) return herr(err, "%s: out of memory", path);
    s->n_shards++;
    return 0;
}

static int map_shard(st_shard *sh, hearth_err *err) {
    uint64_t size;
    int fd = open_regular(sh->path, &size, err);
    if (fd < 0) return -1;
    if (size > 0) {
        void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return herr(err, "%s: mmap failed: %s", sh->path, strerror(e));
        }
        sh->map = m;
        sh->base = m;
    }
    close(fd);
    sh->size = size;
    return 0;
}

static int check_metadata(const cJSON *md, const char *label, hearth_err *err) {
    if (!cJSON_IsObject(md)) return herr(err, "%s: \"__metadata__\" is not an object", label);
    const cJSON *kv;
    cJSON_ArrayForEach(kv, md)
        if (!cJSON_IsString(kv))
            return herr(err, "%s: \"__metadata__\" value of '" NAME_FMT "' is not a string", label, kv->string);
    return 0;
}

/* Validates one header entry and fills t (name not yet set). data_size: bytes after the header. */
static int parse_entry(const cJSON *e, const char *label, const uint8_t *data, uint64_t data_size,
                       st_tensor *t, hearth_err *err) {
    const char *name = e->string;
    if (!cJSON_IsObject(e)) return herr(err, "%s: tensor '" NAME_FMT "': entry is not an object", label, name);

    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(jd))
        return herr(err, "%s: tensor '" NAME_FMT "': missing or non-string \"dtype\"", label, name);
    const st_dtype *dt = dtype_lookup(jd->valuestring);
    if (!dt) return herr(err, "%s: tensor '" NAME_FMT "': unknown dtype '%.32s'", label, name, jd->valuestring);

    const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsArray(js))
        return herr(err, "%s: tensor '" NAME_FMT "': missing or non-array \"shape\"", label, name);
    int n_dims = 0;
    uint64_t nelem = 1;
    const cJSON *jdim;
    cJSON_ArrayForEach(jdim, js) {
        uint64_t d;
        if (n_dims == ST_MAX_DIMS)
            return herr(err, "%s: tensor '" NAME_FMT "': more than %d dims", label, name, ST_MAX_DIMS);
        if (!json_uint(jdim, &d))
            return herr(err, "%s: tensor '" NAME_FMT "': shape dim %d is not an integer in [0, 2^53)", label, name,
                        n_dims);
        if (!mul_ok(nelem, d, &nelem))
            return herr(err, "%s: tensor '" NAME_FMT "': element count of the shape overflows", label, name);
        t->shape[n_dims++] = (int64_t)d;
    }
    uint64_t bits;
    if (!mul_ok(nelem, dt->bits, &bits))
        return herr(err, "%s: tensor '" NAME_FMT "': byte size of the shape overflows", label, name);
    if (bits % 8 != 0)
        return herr(err, "%s: tensor '" NAME_FMT "': %" PRIu64 " elements of %s are not a whole number of bytes",
                    label, name, nelem, dt->name);

    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    uint64_t begin, end;
    if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 || !json_uint(jo->child, &begin) ||
        !json_uint(jo->child->next, &end))
        return herr(err, "%s: tensor '" NAME_FMT "': \"data_offsets\" is not [begin, end] with integers in [0, 2^53)",
                    label, name);
    if (begin > end)
        return herr(err, "%s: tensor '" NAME_FMT "': data_offsets begin %" PRIu64 " > end %" PRIu64, label, name,
                    begin, end);
    if (end > data_size)
        return herr(err, "%s: tensor '" NAME_FMT "': data_offsets end %" PRIu64 " is past the data section (%" PRIu64
                    " bytes; file truncated?)", label, name, end, data_size);
    if (end - begin != bits / 8) {
        char sh[160];
        format_shape(t->shape, n_dims, sh, sizeof sh);
        return herr(err, "%s: tensor '" NAME_FMT "': shape %s of %s is %" PRIu64 " bytes but data_offsets span %" PRIu64,
                    label, name, sh, dt->name, bits / 8, end - begin);
    }

    t->type = dt->type;
    t->dtype = dt->name;
    t->n_dims = n_dims;
    for (int i = 0; i < ST_MAX_DIMS; i++) t->ne[i] = i < n_dims ? t->shape[n_dims - 1 - i] : 1;
    for (int i = n_dims; i < ST_MAX_DIMS; i++) t->shape[i] = 1;
    t->nelem = nelem;
    t->nbytes = end - begin;
    t->data = data + begin;
    unsigned esize = dt->bits >= 8 ? dt->bits / 8 : 1;
    t->aligned = (uintptr_t)t->data % esize == 0;
    return 0;
}

static int cmp_by_begin(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    uintptr_t p = (uintptr_t)x->data, q = (uintptr_t)y->data;
    return p < q ? -1 : p > q;
}

/* Tensors [from, to) of one shard: no two non-empty byte ranges may share a byte. */
static int check_overlaps(st_set *s, uint64_t from, uint64_t to, const char *label, hearth_err *err) {
    if (to - from < 2) return 0;
    const st_tensor **v = malloc((size_t)(to - from) * sizeof *v);
    if (!v) return herr(err, "%s: out of memory", label);
    size_t n = 0;
    for (uint64_t i = from; i < to; i++)
        if (s->tensors[i].nbytes) v[n++] = &s->tensors[i];
    qsort(v, n, sizeof *v, cmp_by_begin);
    for (size_t i = 1; i < n; i++) {
        const uint8_t *prev_end = (const uint8_t *)v[i - 1]->data + v[i - 1]->nbytes;
        if ((const uint8_t *)v[i]->data < prev_end) {
            herr(err, "%s: tensors '" NAME_FMT "' and '" NAME_FMT "' have overlapping data_offsets", label,
                 v[i - 1]->name, v[i]->name);
            free(v);
            return -1;
        }
    }
    free(v);
    return 0;
}

/* Checks the 8-byte length against the file and the cap; sets the header text and its length. */
static int locate_header(const st_shard *sh, const char **text, uint64_t *hlen, hearth_err *err) {
    if (sh->size < 8)
        return herr(err, "%s: %" PRIu64 " bytes is too small for a safetensors file", sh->path, sh->size);
    uint64_t n = read_u64_le(sh->base);
    if (n > sh->size - 8)
        return herr(err, "%s: header length %" PRIu64 " runs past the end of the file (%" PRIu64 " bytes)", sh->path,
                    n, sh->size);
    if (n > ST_HEADER_MAX)
        return herr(err, "%s: header length %" PRIu64 " exceeds the %llu-byte limit", sh->path, n, ST_HEADER_MAX);
    *text = (const char *)sh->base + 8;
    if (n == 0 || (*text)[0] != '{') return herr(err, "%s: header does not start with '{'", sh->path);
    *hlen = n;
    return 0;
}

/* Validates every entry of a parsed header and appends the tensors of shard idx. */
static int add_entries(st_set *s, int idx, const cJSON *root, uint64_t hlen, hearth_err *err) {
    const st_shard *sh = &s->shards[idx];
    const uint8_t *data = sh->base + 8 + hlen;
    uint64_t data_size = sh->size - 8 - hlen;
    int n_entries = cJSON_GetArraySize(root);
    st_tensor *grown = realloc(s->tensors, (size_t)(s->n_tensors + (uint64_t)n_entries + 1) * sizeof *grown);
    if (!grown) return herr(err, "%s: out of memory", sh->path);
    s->tensors = grown;

    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (check_metadata(e, sh->path, err) != 0) return -1;
            continue;
        }
        st_tensor *t = &s->tensors[s->n_tensors];
        memset(t, 0, sizeof *t);
        if (parse_entry(e, sh->path, data, data_size, t, err) != 0) return -1;
        t->shard = idx;
        t->name = strdup(e->string);
        if (!t->name) return herr(err, "%s: out of memory", sh->path);
        s->n_tensors++;
    }
    return 0;
}

/* Parses and validates the header of shard idx (already mapped or given), appending its tensors. */
static int parse_shard(st_set *s, int idx, hearth_err *err) {
    const char *label = s->shards[idx].path, *text = NULL;
    uint64_t hlen = 0, first = s->n_tensors;
    if (locate_header(&s->shards[idx], &text, &hlen, err) != 0) return -1;

    char hlabel[400];
    snprintf(hlabel, sizeof hlabel, "%.380s: header", label);
    cJSON *root = parse_json_text(text, (size_t)hlen, hlabel, err);
    if (!root) return -1;
    int rc = add_entries(s, idx, root, hlen, err);
    cJSON_Delete(root);
    if (rc != 0) return -1;

    size_t lit_len = 0;
    const char *lit = find_non_plain_integer(text, (size_t)hlen, &lit_len);
    if (lit) return herr(err, "%s: number '%.*s' is not a non-negative integer", hlabel, (int)HT_MIN(lit_len, 32), lit);
    return check_overlaps(s, first, s->n_tensors, label, err);
}

static int cmp_by_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

/* Sorts tensors by name and rejects duplicates (within or across shards). */
static int finish_set(st_set *s, hearth_err *err) {
    if (s->n_tensors > 1) qsort(s->tensors, (size_t)s->n_tensors, sizeof *s->tensors, cmp_by_name);
    for (uint64_t i = 1; i < s->n_tensors; i++) {
        const st_tensor *a = &s->tensors[i - 1], *b = &s->tensors[i];
        if (strcmp(a->name, b->name) != 0) continue;
        if (a->shard == b->shard)
            return herr(err, "%s: tensor '" NAME_FMT "' appears twice", s->shards[a->shard].path, a->name);
        return herr(err, "tensor '" NAME_FMT "' appears twice (in %s and %s)", a->name, s->shards[a->shard].path,
                    s->shards[b->shard].path);
    }
    return 0;
}

static st_set *new_set(hearth_err *err) {
    st_set *s = calloc(1, sizeof *s);
    if (!s) herr(err, "out of memory");
    return s;
}

/* ---- public: open / close ---- */

void st_close(st_set *s) {
    if (!s) return;
    for (uint64_t i = 0; i < s->n_tensors; i++) free(s->tensors[i].name);
    free(s->tensors);
    for (int i = 0; i < s->n_shards; i++) {
        if (s->shards[i].map) munmap(s->shards[i].map, (size_t)s->shards[i].size);
        free(s->shards[i].path);
    }
    free(s->shards);
    free(s);
}

int st_open_memory(const void *buf, uint64_t size, const char *label, st_set **out, hearth_err *err) {
    *out = NULL;
    st_set *s = new_set(err);
    if (!s) return -1;
    if (add_shard(s, label ? label : "<memory>", err) != 0) { st_close(s); return -1; }
    s->shards[0].base = buf;
    s->shards[0].size = size;
    if (parse_shard(s, 0, err) != 0 || finish_set(s, err) != 0) { st_close(s); return -1; }
    *out = s;
    return 0;
}

int st_open_file(const char *path, st_set **out, hearth_err *err) {
    *out = NULL;
    st_set *s = new_set(err);
    if (!s) return -1;
    if (add_shard(s, path, err) != 0 || map_shard(&s->shards[0], err) != 0 || parse_shard(s, 0, err) != 0 ||
        finish_set(s, err) != 0) {
        st_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

/* A shard name from an index must be a plain file name inside the directory. */
static bool is_plain_file_name(const char *n) {
    return n[0] != '\0' && !strchr(n, '/') && !strchr(n, '\\') && !strstr(n, "..") && strcmp(n, ".") != 0;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Shard names of weight_map, validated, sorted and deduplicated (pointers into the tree). */
static int list_shards(const cJSON *wm, const char *label, const char ***names, int *n, hearth_err *err) {
    int total = cJSON_GetArraySize(wm);
    if (total == 0) return herr(err, "%s: \"weight_map\" is empty", label);
    const char **v = malloc((size_t)total * sizeof *v);
    if (!v) return herr(err, "%s: out of memory", label);
    int k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e)) {
            free(v);
            return herr(err, "%s: weight_map entry for '" NAME_FMT "' is not a string", label, e->string);
        }
        if (!is_plain_file_name(e->valuestring)) {
            free(v);
            return herr(err, "%s: tensor '" NAME_FMT "' maps to '%.128s', not a plain file name in the directory",
                        label, e->string, e->valuestring);
        }
        v[k++] = e->valuestring;
    }
    qsort(v, (size_t)k, sizeof *v, cmp_str_ptr);
    int u = 0;
    for (int i = 0; i < k; i++)
        if (u == 0 || strcmp(v[u - 1], v[i]) != 0) v[u++] = v[i];
    *names = v;
    *n = u;
    return 0;
}

/* Every tensor the index names must be in the shard it names. */
static int check_weight_map(const st_set *s, const cJSON *wm, const char **shard_names, const char *label,
                            hearth_err *err) {
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        const st_tensor *t = st_find(s, e->string);
        if (!t || strcmp(shard_names[t->shard], e->valuestring) != 0)
            return herr(err, "%s: tensor '" NAME_FMT "' is not in shard '%.128s'", label, e->string, e->valuestring);
    }
    return 0;
}

static int open_index(const char *dir, const char *index_path, st_set **out, hearth_err *err) {
    cJSON *root = st_read_json(index_path, err);
    if (!root) return -1;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    const char **names = NULL;
    int n_names = 0;
    st_set *s = NULL;
    int rc = -1;
    if (!cJSON_IsObject(wm)) {
        herr(err, "%s: missing or non-object \"weight_map\"", index_path);
        goto done;
    }
    if (list_shards(wm, index_path, &names, &n_names, err) != 0 || !(s = new_set(err))) goto done;
    for (int i = 0; i < n_names; i++) {
        char *p = path_join(dir, names[i]);
        if (!p) { herr(err, "%s: out of memory", index_path); goto done; }
        int r = add_shard(s, p, err);
        free(p);
        if (r != 0 || map_shard(&s->shards[i], err) != 0 || parse_shard(s, i, err) != 0) goto done;
    }
    if (finish_set(s, err) != 0 || check_weight_map(s, wm, names, index_path, err) != 0) goto done;
    *out = s;
    s = NULL;
    rc = 0;
done:
    st_close(s);
    free(names);
    cJSON_Delete(root);
    return rc;
}

int st_open_dir(const char *dir, st_set **out, hearth_err *err) {
    *out = NULL;
    char *single = path_join(dir, "model.safetensors");
    char *index = path_join(dir, "model.safetensors.index.json");
    int rc;
    if (!single || !index) rc = herr(err, "%s: out of memory", dir);
    else if (is_file(single)) rc = st_open_file(single, out, err);
    else if (is_file(index)) rc = open_index(dir, index, out, err);
    else rc = herr(err, "%s: neither model.safetensors nor model.safetensors.index.json found", dir);
    free(single);
    free(index);
    return rc;
}

/* ---- public: lookup and reading ---- */

const st_tensor *st_find(const st_set *s, const char *name) {
    uint64_t lo = 0, hi = s->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, s->tensors[mid].name);
        if (c == 0) return &s->tensors[mid];
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

int st_get(const st_set *s, const char *name, const st_tensor **out, hearth_err *err) {
    const st_tensor *t = st_find(s, name);
    *out = NULL;
    if (!t) return herr(err, "tensor '" NAME_FMT "' not found", name);
    if (t->type == ST_UNSUPPORTED)
        return herr(err, "tensor '" NAME_FMT "': dtype %s not supported (F32, F16, BF16 only)", name, t->dtype);
    *out = t;
    return 0;
}

const char *st_shard_path(const st_set *s, const st_tensor *t) { return s->shards[t->shard].path; }

int st_read_f32(const st_tensor *t, uint64_t first, uint64_t n, float *dst, hearth_err *err) {
    uint64_t last;
    if (t->type == ST_UNSUPPORTED)
        return herr(err, "tensor '" NAME_FMT "': dtype %s not supported (F32, F16, BF16 only)", t->name, t->dtype);
    if (!add_ok(first, n, &last) || last > t->nelem)
        return herr(err, "tensor '" NAME_FMT "': elements [%" PRIu64 ", +%" PRIu64 ") out of range (%" PRIu64 ")",
                    t->name, first, n, t->nelem);
    const uint8_t *p = t->data;
    if (t->type == HT_F32) {
        memcpy(dst, p + first * 4, (size_t)n * 4);
        return 0;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + (first + i) * 2, 2);
        dst[i] = t->type == HT_F16 ? fp16_to_f32(h) : bf16_to_f32(h);
    }
    return 0;
}

/* ---- public: small JSON files ---- */

cJSON *st_read_json(const char *path, hearth_err *err) {
    uint64_t size;
    int fd = open_regular(path, &size, err);
    if (fd < 0) return NULL;
    if (size > ST_JSON_MAX) {
        close(fd);
        herr(err, "%s: %" PRIu64 " bytes exceeds the %u-byte limit for JSON files", path, size, ST_JSON_MAX);
        return NULL;
    }
    char *buf = malloc((size_t)size + 1);
    if (!buf) { close(fd); herr(err, "%s: out of memory", path); return NULL; }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, (size_t)size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != size) {
        free(buf);
        herr(err, "%s: short read (%zu of %" PRIu64 " bytes)", path, got, size);
        return NULL;
    }
    buf[got] = '\0';
    cJSON *root = parse_json_text(buf, got, path, err);
    free(buf);
    return root;
}
