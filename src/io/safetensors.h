/* safetensors.h — read-only reader for Hugging Face safetensors checkpoints over mmap, for untrusted files.
 *
 * A safetensors file is: u64 little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}, ..., "__metadata__": {..}}
 * then the data section; offsets are relative to the first byte after the header.
 * A checkpoint directory holds either model.safetensors or model.safetensors.index.json, whose
 * "weight_map" {tensor name: shard file} names the shards (each shard is mapped once).
 *
 * Opening validates everything handed out: header length against the file and a cap, JSON structure,
 * dtype names, shapes (non-negative integers, element count without overflow), that shape × dtype size
 * equals the byte range, that ranges lie in the data section and do not overlap, that names are unique
 * across shards, and that the index names only plain files in the directory and matches the shards.
 * After a successful open every pointer and size may be used without further checks.
 *
 * Dtypes: F32, F16 and BF16 are usable. Other known dtypes (I64, U8, BOOL, F8_E4M3, ...) are validated
 * and listed with type ST_UNSUPPORTED, so a checkpoint carrying e.g. an I64 `position_ids` buffer still
 * opens; st_get() reports them when a caller actually asks for one. Unknown dtype names fail the open.
 *
 * Data is NOT necessarily aligned (offsets are arbitrary bytes): read through st_read_f32() or memcpy,
 * or check `aligned` before casting the pointer. Another process truncating a mapped file can still
 * raise SIGBUS; that is a property of mmap, not something a reader can check. */
#ifndef HEARTH_SAFETENSORS_H
#define HEARTH_SAFETENSORS_H

#include <cjson/cJSON.h>

#include "common.h"

#define ST_MAX_DIMS 8                 /* more dims than this fail the open */
#define ST_UNSUPPORTED (-1)           /* st_tensor.type for known but unusable dtypes */

typedef struct {
    char *name;                 /* NUL-terminated copy */
    int type;                   /* HT_F32, HT_F16, HT_BF16 (quant/quant.h), or ST_UNSUPPORTED */
    const char *dtype;          /* the safetensors dtype name: "F32", "BF16", "I64", ... (static string) */
    int n_dims;                 /* 0 = scalar */
    int64_t shape[ST_MAX_DIMS]; /* safetensors / PyTorch order: shape[n_dims-1] is contiguous */
    int64_t ne[ST_MAX_DIMS];    /* GGUF order: ne[0] = shape[n_dims-1]; unused entries are 1 */
    uint64_t nelem;
    const void *data;           /* inside the shard's mapping */
    uint64_t nbytes;
    bool aligned;               /* data is aligned to the element size */
    int shard;                  /* index into st_set.shards */
} st_tensor;

typedef struct {
    char *path;
    void *map;                  /* NULL for st_open_memory */
    const uint8_t *base;        /* start of the file bytes */
    uint64_t size;
} st_shard;

typedef struct st_set {
    int n_shards;
    st_shard *shards;
    uint64_t n_tensors;
    st_tensor *tensors;         /* sorted by name; iterate tensors[0 .. n_tensors) */
} st_set;

/* Opens a checkpoint directory: model.safetensors.index.json + its shards if present, else model.safetensors. */
int  st_open_dir(const char *dir, st_set **out, hearth_err *err);
/* Opens one .safetensors file. */
int  st_open_file(const char *path, st_set **out, hearth_err *err);
/* Same checks over a buffer the caller owns and keeps alive while the set is used; label names it in errors. */
int  st_open_memory(const void *buf, uint64_t size, const char *label, st_set **out, hearth_err *err);
void st_close(st_set *s);

/* The tensor called name, or NULL. Its type may be ST_UNSUPPORTED. */
const st_tensor *st_find(const st_set *s, const char *name);
/* The tensor called name, failing with a message if it is missing or its dtype is not usable. */
int  st_get(const st_set *s, const char *name, const st_tensor **out, hearth_err *err);
/* Path of the shard holding t (for messages). */
const char *st_shard_path(const st_set *s, const st_tensor *t);

/* Converts elements [first, first + n) of t (in storage order) to float; safe for unaligned data. */
int  st_read_f32(const st_tensor *t, uint64_t first, uint64_t n, float *dst, hearth_err *err);

/* Reads and parses a small JSON file (config.json, tokenizer_config.json, ...); at most ST_JSON_MAX bytes.
 * Returns the tree (free with cJSON_Delete) or NULL with a message. */
#define ST_JSON_MAX (64u << 20)
cJSON *st_read_json(const char *path, hearth_err *err);

#endif
