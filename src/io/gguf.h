/* gguf.h — read-only GGUF v2/v3 reader over mmap, and a small writer.
 *
 * gguf_open() maps the file and validates everything it will ever hand out: every count, string length,
 * array size, tensor dimension and data range is checked against the file size with overflow-safe
 * arithmetic. After a successful open, callers may use every pointer and size without further checks.
 * Strings point into the mapping (not NUL-terminated); tensor names are copied and NUL-terminated.
 * Rejected: versions other than 2 and 3, unknown value or tensor types, arrays nested more than 8 deep,
 * duplicate keys or tensor names, general.alignment that is not a u32 nonzero power of two, n_dims outside
 * 1..4, dimensions < 1, element counts or byte sizes that overflow, rows not a whole number of blocks,
 * offsets not a multiple of the alignment, tensor data not 4-byte aligned in the file or past its end. */
#ifndef HEARTH_GGUF_H
#define HEARTH_GGUF_H

#include "common.h"

enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5, GGUF_F32 = 6,
    GGUF_BOOL = 7, GGUF_STR = 8, GGUF_ARR = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12, GGUF_NTYPES
};

typedef struct { const char *p; uint64_t n; } gguf_str;

typedef struct {
    gguf_str key;
    uint32_t type;          /* enum gguf_vtype */
    const uint8_t *val;     /* raw little-endian value in the mapping (for STR: the u64 length prefix) */
    /* arrays only: */
    uint32_t arr_type;
    uint64_t arr_n;
    const uint8_t *arr_data;   /* first element (for string arrays: first length prefix) */
} gguf_kv;

#define GGUF_MAX_DIMS 4
typedef struct {
    char *name;
    uint32_t type;          /* ggml type id (see quant.h), validated as known */
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];  /* ne[0] is the contiguous dimension; unused dims are 1 */
    uint64_t offset;        /* relative to the data section */
    const void *data;       /* inside the mapping, checked to lie within the file */
    uint64_t nbytes;
    uint64_t nelem;
} gguf_tensor;

typedef struct gguf_file {
    void *map;
    uint64_t size;
    uint32_t version;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset;   /* start of tensor data (the file size for a tensorless file that ends unpadded) */
} gguf_file;

/* Messages do not name the file: callers prefix the path ("PATH: tensor 'x': unknown type 99"). */
int  gguf_open(const char *path, gguf_file **out, hearth_err *err);
/* Same checks over a buffer the caller owns (kept alive while the gguf_file is used). */
int  gguf_open_memory(const void *buf, uint64_t size, gguf_file **out, hearth_err *err);
void gguf_close(gguf_file *f);
/* True when f maps a file (gguf_open), false over a caller's buffer (gguf_open_memory). */
bool gguf_mapped(const gguf_file *f);

const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);
/* Typed getters: return false when the key is missing or of an incompatible type / out of range.
 * Integer getters accept any integer type whose value fits. */
bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
bool gguf_get_f32(const gguf_file *f, const char *key, float *out);   /* F32 or F64 */
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
/* Array element access (bounds already validated at open; i must be < arr_n). */
gguf_str gguf_arr_str(const gguf_kv *kv, uint64_t i);  /* O(i) for string arrays: use gguf_arr_strs for all */
/* Fills out[0..arr_n) with the strings of a string array (caller allocates arr_n entries). */
void gguf_arr_strs(const gguf_kv *kv, gguf_str *out);
double gguf_arr_num(const gguf_kv *kv, uint64_t i);    /* numeric arrays, any element type */
/* Element i as an integer in [lo, hi] (|lo|, |hi| <= 2^53); false for NaN, infinities, fractions or values
 * outside the range: a float is never converted to an integer it cannot be. */
bool gguf_arr_int(const gguf_kv *kv, uint64_t i, int64_t lo, int64_t hi, int64_t *out);
/* Human-readable name of a value type. */
const char *gguf_type_name(uint32_t t);

/* ---- writer: builds a GGUF v3 file in memory order, then writes it ----
 * Keys are written in the order first added; setting a key again replaces its value in place. A u32
 * general.alignment sets the data alignment (default 32; must be a power of two >= 4). The adders cannot
 * fail visibly: a mistake (bad tensor shape/type/size, duplicate tensor name, bad alignment, out of memory)
 * is remembered and gguf_writer_write reports the first one, so a writer never produces a file gguf_open
 * would reject. A NULL writer (gguf_writer_new out of memory) is accepted everywhere and makes the write fail. */
typedef struct gguf_writer gguf_writer;
gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_w_f32(gguf_writer *w, const char *key, float v);
void gguf_w_bool(gguf_writer *w, const char *key, bool v);
void gguf_w_str(gguf_writer *w, const char *key, const char *v);
void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n);   /* NULL entries = "" */
void gguf_w_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n);
void gguf_w_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
/* Any fixed-size type (all but GGUF_STR and GGUF_ARR): one value at v, or an array of n values (BOOL = bytes). */
void gguf_w_val(gguf_writer *w, const char *key, uint32_t type, const void *v);
void gguf_w_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *v, uint64_t n);
/* Copies an existing key/value (any type, including nested arrays) from an open reader (the bytes are copied;
 * the reader may be closed afterwards). */
void gguf_w_copy_kv(gguf_writer *w, const gguf_kv *kv);
/* Adds a tensor (n_dims 1..4, ne[0] contiguous). Ownership: data is NOT copied: the writer keeps the pointer
 * and streams the bytes to the file in gguf_writer_write, so data must stay valid and unchanged until the
 * last gguf_writer_write that should include it has returned (the caller frees it; the writer never does).
 * data == NULL writes zeros. nbytes must equal the size its type and shape need. Tensors are written in the
 * order added, each at an offset aligned to the alignment. The name is copied. */
void gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne,
                   const void *data, uint64_t nbytes);
/* Like gguf_w_tensor, but the bytes are produced at write time, one tensor at a time (so a huge model needs
 * memory for its largest tensor only): fill(ctx, buf, nbytes) fills buf and returns 0, or -1 to fail the write. */
typedef int (*gguf_fill_fn)(void *ctx, void *buf, uint64_t nbytes);
void gguf_w_tensor_fill(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *ne,
                        uint64_t nbytes, gguf_fill_fn fill, void *ctx);
/* Writes the file atomically: a temp file beside path, renamed into place only when complete. */
int  gguf_writer_write(gguf_writer *w, const char *path, hearth_err *err);
/* Writes the file from offset 0 of an open descriptor (path only names it in messages). */
int  gguf_writer_write_fd(gguf_writer *w, int fd, const char *path, hearth_err *err);

#endif
