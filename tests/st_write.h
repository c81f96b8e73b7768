/* st_write.h — for the tests that write Hugging Face directories from the GGUF fixtures: a safetensors file built
 * in memory (a JSON header of F32 (or raw U8, ...) entries and the data after it), and the fixtures' integer metadata. */
#ifndef HEARTH_ST_WRITE_H
#define HEARTH_ST_WRITE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/gguf.h"
#include "testutil.h"

/* The fixture's "<arch>.<suffix>" (it must be there). */
static inline uint32_t fixture_u32(const gguf_file *g, const char *arch, const char *suffix) {
    char key[128];
    uint32_t v = 0;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    REQUIRE(gguf_get_u32(g, key, &v), "fixture has no %s", key);
    return v;
}

typedef struct {
    char *hdr;
    size_t hlen, hcap;
    uint8_t *data;
    size_t dlen, dcap;      /* grown geometrically: ASan's realloc copies every time (a 53 MB model took 500 s) */
} st_out;

static inline void st_begin(st_out *o) {
    memset(o, 0, sizeof *o);
    o->hdr = malloc(o->hcap = 4096);
    REQUIRE(o->hdr, "out of memory");
    o->hdr[0] = '{';
    o->hlen = 1;
}

/* A tensor of the given dtype and HF shape (outermost first), n_dims 1 to 4; x holds its bytes. */
static inline void st_add_raw(st_out *o, const char *name, const char *dtype, size_t elem_bytes, int n_dims,
                              const int64_t *shape, const void *x) {
    size_t n = 1;
    char entry[512], dims[96] = "";
    for (int d = 0; d < n_dims; d++) {
        n *= (size_t)shape[d];
        snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lld", d ? "," : "", (long long)shape[d]);
    }
    const size_t bytes = n * elem_bytes;
    int len = snprintf(entry, sizeof entry, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}",
                       o->hlen > 1 ? "," : "", name, dtype, dims, o->dlen, o->dlen + bytes);
    if (o->hlen + (size_t)len + 64 > o->hcap) o->hdr = realloc(o->hdr, o->hcap = (o->hcap + (size_t)len) * 2 + 4096);
    REQUIRE(o->hdr, "out of memory");
    memcpy(o->hdr + o->hlen, entry, (size_t)len + 1);
    o->hlen += (size_t)len;
    if (o->dlen + bytes > o->dcap) {
        o->dcap = HT_MAX(o->dlen + bytes, 2 * o->dcap);
        o->data = realloc(o->data, o->dcap);
        REQUIRE(o->data, "out of memory");
    }
    memcpy(o->data + o->dlen, x, bytes);
    o->dlen += bytes;
}

/* An F32 tensor of the given HF shape (outermost first), n_dims 1 to 3. */
static inline void st_add_shape(st_out *o, const char *name, int n_dims, const int64_t *shape, const float *x) {
    st_add_raw(o, name, "F32", sizeof(float), n_dims, shape, x);
}

/* rows 0: a vector of cols */
static inline void st_add(st_out *o, const char *name, int64_t rows, int64_t cols, const float *x) {
    const int64_t shape[2] = { rows, cols };
    if (rows) st_add_shape(o, name, 2, shape, x);
    else st_add_shape(o, name, 1, shape + 1, x);
}

/* Closes the header and writes the file; frees the buffers. */
static inline void st_finish(st_out *o, const char *path) {
    o->hdr[o->hlen++] = '}';
    while (o->hlen % 8) o->hdr[o->hlen++] = ' ';
    FILE *sf = fopen(path, "wb");
    REQUIRE(sf, "cannot write %s", path);
    uint64_t hl = o->hlen;
    REQUIRE(fwrite(&hl, 8, 1, sf) == 1 && fwrite(o->hdr, 1, o->hlen, sf) == o->hlen && fwrite(o->data, 1, o->dlen, sf) == o->dlen &&
                !fclose(sf), "writing %s", path);
    free(o->hdr);
    free(o->data);
}

#endif
