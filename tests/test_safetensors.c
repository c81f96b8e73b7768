/* test_safetensors.c — tests for the safetensors reader (src/safetensors.c).
 *
 * 1. Opens every checkpoint directory under data/hf/ (single-file, sharded, F32/F16/BF16) and checks
 *    invariants on every tensor plus known names, dtypes, shapes and values; if the GGUF reader
 *    (src/gguf.c) is present, llama-hf's embedding is compared with token_embd.weight in llama.gguf.
 * 2. Feeds a malformed corpus built here (and truncations of a real shard) through st_open_memory, each
 *    case copied into an exact-size heap buffer so AddressSanitizer sees any read past the end; every
 *    case must fail with a non-empty one-line message. A seeded byte-flip fuzz loop must never crash.
 * 3. Builds sharded directories in a temp dir to test index.json handling (missing shards, '../' paths,
 *    duplicates across shards, tensors absent from their shard, FIFOs, directories).
 * Run with -v to print every rejection message. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant/quant.h"
#include "io/safetensors.h"
#include "testutil.h"

#if defined(__has_include)
#if __has_include("../src/gguf.c")
#include "io/gguf.h"
#define HAVE_GGUF_READER 1
#endif
#endif

static int verbose;

/* ---- helpers ---- */

static uint8_t *read_whole(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    REQUIRE(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)sz + 1);
    REQUIRE(p && fread(p, 1, (size_t)sz, f) == (size_t)sz, "cannot read %s", path);
    fclose(f);
    *n = (size_t)sz;
    return p;
}

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* A safetensors image: 8-byte length, the header text, then data_len bytes of a counting pattern. */
static uint8_t *make_st(const char *header, size_t data_len, size_t *n) {
    size_t h = strlen(header);
    *n = 8 + h + data_len;
    uint8_t *p = malloc(*n ? *n : 1);
    put_u64(p, h);
    memcpy(p + 8, header, h);
    for (size_t i = 0; i < data_len; i++) p[8 + h + i] = (uint8_t)(i * 7 + 1);
    return p;
}

static void check_err_msg(const char *what, const hearth_err *err) {
    CHECK(err->msg[0] != '\0', "%s: empty error message", what);
    CHECK(!strchr(err->msg, '\n'), "%s: multi-line error message", what);
    if (verbose) printf("  %-34s -> %s\n", what, err->msg);
}

/* Opens an exact-size heap copy of buf[0..n) and expects failure. */
static void expect_fail_buf(const char *what, const uint8_t *buf, size_t n) {
    uint8_t *copy = malloc(n ? n : 1);
    if (n) memcpy(copy, buf, n);
    st_set *s = NULL;
    hearth_err err = {{0}};
    int rc = st_open_memory(copy, n, what, &s, &err);
    CHECK(rc == -1, "%s: expected failure, got rc %d", what, rc);
    CHECK(s == NULL, "%s: out set on failure", what);
    if (rc == 0) st_close(s);
    else check_err_msg(what, &err);
    free(copy);
}

static void expect_fail(const char *what, const char *header, size_t data_len) {
    size_t n;
    uint8_t *p = make_st(header, data_len, &n);
    expect_fail_buf(what, p, n);
    free(p);
}

/* Opens header + data and expects success; the caller closes the set and frees *buf. */
static st_set *expect_ok(const char *what, const char *header, size_t data_len, uint8_t **buf) {
    size_t n;
    *buf = make_st(header, data_len, &n);
    st_set *s = NULL;
    hearth_err err = {{0}};
    int rc = st_open_memory(*buf, n, what, &s, &err);
    CHECK(rc == 0 && s, "%s: expected success: %s", what, err.msg);
    return rc == 0 ? s : NULL;
}

/* Invariants that must hold for every tensor of an opened set. */
static void check_invariants(const char *what, const st_set *s) {
    for (uint64_t i = 0; i < s->n_tensors; i++) {
        const st_tensor *t = &s->tensors[i];
        const st_shard *sh = &s->shards[t->shard];
        CHECK(t->name && t->dtype, "%s: tensor %llu unnamed", what, (unsigned long long)i);
        CHECK(t->n_dims >= 0 && t->n_dims <= ST_MAX_DIMS, "%s: %s n_dims %d", what, t->name, t->n_dims);
        uint64_t ne = 1;
        for (int d = 0; d < t->n_dims; d++) {
            CHECK(t->ne[d] == t->shape[t->n_dims - 1 - d], "%s: %s ne[%d] not the reversed shape", what, t->name, d);
            ne *= (uint64_t)t->shape[d];
        }
        for (int d = t->n_dims; d < ST_MAX_DIMS; d++) CHECK(t->ne[d] == 1, "%s: %s unused ne[%d] != 1", what, t->name, d);
        CHECK(ne == t->nelem, "%s: %s nelem", what, t->name);
        const uint8_t *p = t->data;
        CHECK(p >= sh->base && t->nbytes <= sh->size && p - sh->base <= (ptrdiff_t)(sh->size - t->nbytes),
              "%s: %s data outside its shard", what, t->name);
        if (i) CHECK(strcmp(s->tensors[i - 1].name, t->name) < 0, "%s: tensors not sorted by name", what);
        CHECK(st_find(s, t->name) == t, "%s: st_find(%s)", what, t->name);
    }
}

/* ---- 1. the real checkpoints ---- */

static const st_tensor *need(const st_set *s, const char *name, int type, int n_dims, int64_t d0, int64_t d1) {
    const st_tensor *t = NULL;
    hearth_err err = {{0}};
    CHECK(st_get(s, name, &t, &err) == 0, "%s", err.msg);
    if (!t) return NULL;
    CHECK(t->type == type, "%s: type %d, want %d", name, t->type, type);
    CHECK(t->n_dims == n_dims, "%s: n_dims %d, want %d", name, t->n_dims, n_dims);
    CHECK(t->shape[0] == d0 && (n_dims < 2 || t->shape[1] == d1), "%s: shape [%lld, %lld]", name,
          (long long)t->shape[0], (long long)t->shape[1]);
    CHECK(t->ne[0] == (n_dims == 2 ? d1 : d0), "%s: ne[0] %lld", name, (long long)t->ne[0]);
    return t;
}

static void test_all_hf_dirs(void) {
    DIR *d = opendir("data/hf");
    REQUIRE(d, "cannot open data/hf (run from tests/)");
    int n_dirs = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[512];
        snprintf(path, sizeof path, "data/hf/%s", de->d_name);
        st_set *s = NULL;
        hearth_err err = {{0}};
        int rc = st_open_dir(path, &s, &err);
        CHECK(rc == 0, "%s: %s", path, err.msg);
        if (rc) continue;
        n_dirs++;
        CHECK(s->n_tensors > 0, "%s: no tensors", path);
        check_invariants(path, s);
        for (uint64_t i = 0; i < s->n_tensors; i++)
            CHECK(s->tensors[i].type != ST_UNSUPPORTED, "%s: %s has dtype %s", path, s->tensors[i].name,
                  s->tensors[i].dtype);
        if (verbose) printf("  %-28s %d shard(s), %llu tensors\n", path, s->n_shards, (unsigned long long)s->n_tensors);
        st_close(s);
    }
    closedir(d);
    CHECK(n_dirs == 8, "opened %d hf dirs, expected 8", n_dirs);
}

#ifdef HAVE_GGUF_READER
/* llama-hf's embedding is stored [n_vocab, n_embd] row-major, llama.gguf's token_embd.weight has
 * ne = {n_embd, n_vocab}: the same bytes. (Llama's q/k are permuted for RoPE; the embedding is not.) */
static void compare_with_gguf(const st_tensor *emb) {
    gguf_file *g = NULL;
    hearth_err err = {{0}};
    if (gguf_open("data/models/llama.gguf", &g, &err) != 0) {
        CHECK(0, "gguf_open llama.gguf: %s", err.msg);
        return;
    }
    const gguf_tensor *gt = gguf_find_tensor(g, "token_embd.weight");
    CHECK(gt && gt->type == HT_F32 && gt->ne[0] == emb->ne[0] && gt->ne[1] == emb->ne[1],
          "token_embd.weight missing or shaped differently");
    if (gt && gt->nbytes == emb->nbytes) {
        float a[64], b[64];
        for (uint64_t row = 0; row < (uint64_t)emb->ne[1]; row += 37) {
            uint64_t first = row * (uint64_t)emb->ne[0];
            CHECK(st_read_f32(emb, first, 64, a, &err) == 0, "%s", err.msg);
            memcpy(b, (const float *)gt->data + first, sizeof b);
            CHECK(memcmp(a, b, sizeof a) == 0, "embedding row %llu differs from GGUF", (unsigned long long)row);
        }
    }
    gguf_close(g);
    printf("  compared llama-hf embedding with llama.gguf token_embd.weight\n");
}
#endif

static void test_known_tensors(void) {
    hearth_err err = {{0}};
    st_set *f32 = NULL, *bf16 = NULL, *s = NULL;
    REQUIRE(st_open_dir("data/hf/llama-hf", &f32, &err) == 0, "%s", err.msg);
    CHECK(f32->n_shards == 2 && f32->n_tensors == 21, "llama-hf: %d shards, %llu tensors", f32->n_shards,
          (unsigned long long)f32->n_tensors);
    const st_tensor *e = need(f32, "model.embed_tokens.weight", HT_F32, 2, 512, 256);
    need(f32, "lm_head.weight", HT_F32, 2, 512, 256);
    need(f32, "model.layers.0.mlp.down_proj.weight", HT_F32, 2, 256, 512);
    need(f32, "model.norm.weight", HT_F32, 1, 256, 0);
    CHECK(e && strstr(st_shard_path(f32, e), "model-00002-of-00002.safetensors"), "embed_tokens shard");
    CHECK(st_find(f32, "model.embed_tokens") == NULL, "prefix must not match");
    const st_tensor *t = NULL;
    CHECK(st_get(f32, "no.such.tensor", &t, &err) == -1 && t == NULL && strstr(err.msg, "not found"), "missing");

    /* First values of the embedding, as Python's struct module reads them from the file. */
    float v[4];
    const float want[4] = {0.1790015697f, 0.6549908518f, 0.4252834320f, 0.8476389646f};
    if (e) {
        CHECK(st_read_f32(e, 0, 4, v, &err) == 0, "%s", err.msg);
        for (int i = 0; i < 4; i++) CHECK(v[i] == want[i], "embed[%d] = %.9g, want %.9g", i, v[i], want[i]);
        CHECK(st_read_f32(e, e->nelem - 1, 2, v, &err) == -1, "st_read_f32 past the end must fail");
    }

    /* The BF16 checkpoint holds the same weights rounded to bfloat16. */
    REQUIRE(st_open_dir("data/hf/llama-hf-bf16", &bf16, &err) == 0, "%s", err.msg);
    const st_tensor *eb = need(bf16, "model.embed_tokens.weight", HT_BF16, 2, 512, 256);
    if (e && eb) {
        float *a = malloc(e->nelem * sizeof *a), *b = malloc(eb->nelem * sizeof *b);
        CHECK(st_read_f32(e, 0, e->nelem, a, &err) == 0 && st_read_f32(eb, 0, eb->nelem, b, &err) == 0, "%s", err.msg);
        uint64_t bad = 0;
        for (uint64_t i = 0; i < e->nelem; i++) bad += bf16_to_f32(f32_to_bf16(a[i])) != b[i];
        CHECK(bad == 0, "%llu BF16 values are not the F32 values rounded", (unsigned long long)bad);
        free(a);
        free(b);
    }
    st_close(bf16);

    REQUIRE(st_open_dir("data/hf/qwen3-hf-f16", &s, &err) == 0, "%s", err.msg);
    need(s, "model.embed_tokens.weight", HT_F16, 2, 771, 128);
    need(s, "model.layers.0.self_attn.q_norm.weight", HT_F16, 1, 64, 0);
    st_close(s);
    REQUIRE(st_open_dir("data/hf/gpt2-hf", &s, &err) == 0, "%s", err.msg);
    need(s, "h.0.attn.c_attn.weight", HT_F32, 2, 128, 384);   /* Conv1D: [in, out] */
    need(s, "h.0.attn.c_attn.bias", HT_F32, 1, 384, 0);
    st_close(s);
    REQUIRE(st_open_dir("data/hf/bert-hf", &s, &err) == 0, "%s", err.msg);
    need(s, "embeddings.position_embeddings.weight", HT_F32, 2, 128, 128);
    st_close(s);

    cJSON *cfg = st_read_json("data/hf/llama-hf/config.json", &err);
    CHECK(cfg, "config.json: %s", err.msg);
    const cJSON *hs = cJSON_GetObjectItemCaseSensitive(cfg, "hidden_size");
    CHECK(cJSON_IsNumber(hs) && hs->valueint == 256, "config.json hidden_size");
    cJSON_Delete(cfg);

#ifdef HAVE_GGUF_READER
    if (e) compare_with_gguf(e);
#else
    printf("  (src/gguf.c not present: GGUF comparison skipped)\n");
#endif
    st_close(f32);
}

/* ---- 2. malformed single files ---- */

#define T1 "\"dtype\":\"F32\",\"shape\":[2,2]"
static const char *const bad_headers[][2] = {
    /* name, header (data section is always 64 bytes) */
    {"empty header text", ""},
    {"bad json: lone brace", "{"},
    {"bad json: no value", "{\"a\":}"},
    {"bad json: not json", "{not json}"},
    {"bad json: trailing garbage", "{}}"},
    {"bad json: missing colon", "{\"a\" 1}"},
    {"bad json: unterminated string", "{\"a"},
    {"root is an array", "[1,2]"},
    {"root is a string", "\"x\""},
    {"entry is a number", "{\"a\":1}"},
    {"entry is an array", "{\"a\":[]}"},
    {"entry is a string", "{\"a\":\"x\"}"},
    {"entry is null", "{\"a\":null}"},
    {"missing dtype", "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}"},
    {"dtype not a string", "{\"a\":{\"dtype\":5,\"shape\":[2],\"data_offsets\":[0,8]}}"},
    {"unknown dtype", "{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}"},
    {"lowercase dtype", "{\"a\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}"},
    {"empty dtype", "{\"a\":{\"dtype\":\"\",\"shape\":[2],\"data_offsets\":[0,8]}}"},
    {"missing shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}"},
    {"shape not an array", "{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}"},
    {"missing data_offsets", "{\"a\":{" T1 "}}"},
    {"data_offsets not an array", "{\"a\":{" T1 ",\"data_offsets\":16}}"},
    {"data_offsets one value", "{\"a\":{" T1 ",\"data_offsets\":[16]}}"},
    {"data_offsets three values", "{\"a\":{" T1 ",\"data_offsets\":[0,16,32]}}"},
    {"data_offsets strings", "{\"a\":{" T1 ",\"data_offsets\":[\"0\",\"16\"]}}"},
    {"data_offsets negative", "{\"a\":{" T1 ",\"data_offsets\":[-16,0]}}"},
    {"data_offsets float", "{\"a\":{" T1 ",\"data_offsets\":[0.5,16.5]}}"},
    {"data_offsets 1.0 form", "{\"a\":{" T1 ",\"data_offsets\":[0,16.0]}}"},
    {"data_offsets huge", "{\"a\":{" T1 ",\"data_offsets\":[18446744073709551600,18446744073709551616]}}"},
    {"shape/bytes mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}"},
    {"shape/bytes mismatch (F16)", "{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,16]}}"},
    {"offsets overlapping", "{\"a\":{" T1 ",\"data_offsets\":[0,16]},\"b\":{" T1 ",\"data_offsets\":[8,24]}}"},
    {"offsets identical", "{\"a\":{" T1 ",\"data_offsets\":[0,16]},\"b\":{" T1 ",\"data_offsets\":[0,16]}}"},
    {"offsets nested", "{\"a\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]},\"b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[5,6]}}"},
    {"offsets past EOF", "{\"a\":{\"dtype\":\"F32\",\"shape\":[250],\"data_offsets\":[0,1000]}}"},
    {"end just past EOF", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[64,65]}}"},
    {"begin > end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,8]}}"},
    {"negative dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1,4],\"data_offsets\":[0,16]}}"},
    {"negative zero dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-0,4],\"data_offsets\":[0,0]}}"},
    {"float dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5,4],\"data_offsets\":[0,24]}}"},
    {"dim written 2.0", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0,2],\"data_offsets\":[0,16]}}"},
    {"dim written 2e0", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2e0,2],\"data_offsets\":[0,16]}}"},
    {"dim 1e300", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,16]}}"},
    {"dim 2^53", "{\"a\":{\"dtype\":\"U8\",\"shape\":[9007199254740992],\"data_offsets\":[0,16]}}"},
    {"dim 2^64", "{\"a\":{\"dtype\":\"U8\",\"shape\":[18446744073709551616],\"data_offsets\":[0,16]}}"},
    {"dim string", "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"4\"],\"data_offsets\":[0,16]}}"},
    {"dim null", "{\"a\":{\"dtype\":\"F32\",\"shape\":[null],\"data_offsets\":[0,16]}}"},
    {"dim nested array", "{\"a\":{\"dtype\":\"F32\",\"shape\":[[4]],\"data_offsets\":[0,16]}}"},
    {"dims product overflows", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,16]}}"},
    {"dims product wraps to 0", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}"},
    {"bytes overflow (F64 x 2^62)", "{\"a\":{\"dtype\":\"F64\",\"shape\":[1099511627776,4194304],\"data_offsets\":[0,0]}}"},
    {"bytes wrap (F32 x 2^62)", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2147483648,2147483648],\"data_offsets\":[0,0]}}"},
    {"too many dims", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}"},
    {"sub-byte size", "{\"a\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,1]}}"},
    {"metadata not an object", "{\"__metadata__\":[1]}"},
    {"metadata value not string", "{\"__metadata__\":{\"format\":1}}"},
    {"duplicate tensor name", "{\"a\":{" T1 ",\"data_offsets\":[0,16]},\"a\":{" T1 ",\"data_offsets\":[16,32]}}"},
    {"duplicate via \\u0000", "{\"a\":{" T1 ",\"data_offsets\":[0,16]},\"a\\u0000b\":{" T1 ",\"data_offsets\":[16,32]}}"},
    {"bad later entry", "{\"a\":{" T1 ",\"data_offsets\":[0,16]},\"b\":{\"dtype\":\"F32\"}}"},
};

static void test_malformed_headers(void) {
    for (size_t i = 0; i < sizeof bad_headers / sizeof bad_headers[0]; i++)
        expect_fail(bad_headers[i][0], bad_headers[i][1], 64);

    /* JSON nested far past cJSON's nesting limit must fail cleanly (no stack overflow). */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 16);
    strcpy(deep, "{\"a\":");
    size_t k = strlen(deep);
    for (size_t i = 0; i < depth; i++) deep[k++] = '[';
    for (size_t i = 0; i < depth; i++) deep[k++] = ']';
    strcpy(deep + k, "}");
    expect_fail("deeply nested JSON", deep, 0);
    free(deep);
}

static void test_bad_lengths(void) {
    const char *hdr = "{\"a\":{" T1 ",\"data_offsets\":[0,16]}}";
    size_t n;
    uint8_t *p = make_st(hdr, 16, &n);
    static const struct { const char *what; uint64_t len; } cases[] = {
        {"header length past EOF", 0}, {"header length 2^64-1", UINT64_MAX}, {"header length 2^64-8", UINT64_MAX - 7},
        {"header length 2^63", 1ull << 63}, {"header length 0", 0}, {"header length = file size", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t len = cases[i].len;
        if (i == 0) len = n - 8 + 1;
        if (i == 5) len = n;
        put_u64(p, len);
        expect_fail_buf(cases[i].what, p, n);
    }
    free(p);
    uint8_t tiny[8] = {0};
    expect_fail_buf("empty file", tiny, 0);
    expect_fail_buf("7-byte file", tiny, 7);
    expect_fail_buf("8 zero bytes", tiny, 8);
}

/* Every prefix of a valid file must be rejected (its last tensor ends at the end of the file). */
static void test_truncations(void) {
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F16\",\"shape\":[3,4],\"data_offsets\":[0,24]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}";
    size_t n;
    uint8_t *p = make_st(hdr, 40, &n);
    bool v = verbose;
    verbose = 0;
    for (size_t cut = 0; cut < n; cut++) {
        char what[64];
        snprintf(what, sizeof what, "synthetic truncated at %zu", cut);
        expect_fail_buf(what, p, cut);
    }
    verbose = v;
    st_set *s = NULL;
    hearth_err err = {{0}};
    CHECK(st_open_memory(p, n, "synthetic", &s, &err) == 0, "untruncated synthetic file: %s", err.msg);
    st_close(s);
    free(p);

    /* A real shard: every cut through the header and the first data bytes, then 200 cuts through the data. */
    size_t rn;
    uint8_t *real = read_whole("data/hf/llama-hf/model-00001-of-00002.safetensors", &rn);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | real[i];
    verbose = 0;
    int cuts = 0;
    for (size_t cut = 0; cut < rn; cut = cut < 8 + hlen + 64 ? cut + 1 : cut + (rn - 8 - hlen) / 200 + 1) {
        char what[64];
        snprintf(what, sizeof what, "llama shard truncated at %zu", cut);
        expect_fail_buf(what, real, cut);
        cuts++;
    }
    expect_fail_buf("llama shard minus 1 byte", real, rn - 1);
    verbose = v;
    if (verbose) printf("  %d truncations of a real shard rejected\n", cuts);
    free(real);
}

/* Valid oddities that must open: empty header, scalar, zero-size, unaligned, gaps, padding, I64 buffers. */
static void test_valid_edge_cases(void) {
    uint8_t *buf;
    st_set *s = expect_ok("empty object", "{}", 0, &buf);
    if (s) CHECK(s->n_tensors == 0, "empty object has tensors");
    st_close(s);
    free(buf);

    s = expect_ok("edge cases",
                  "{\"__metadata__\":{\"format\":\"pt\"},"
                  "\"scalar\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                  "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[4,4]},"
                  "\"odd\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[6,14]},"
                  "\"pos\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[16,32]},"
                  "\"half\":{\"dtype\":\"BF16\",\"shape\":[1,1,2],\"data_offsets\":[40,44]}}      ",
                  48, &buf);
    if (s) {
        check_invariants("edge cases", s);
        hearth_err err = {{0}};
        const st_tensor *t = st_find(s, "scalar");
        CHECK(t && t->n_dims == 0 && t->nelem == 1 && t->ne[0] == 1, "scalar");
        t = st_find(s, "empty");
        CHECK(t && t->nelem == 0 && t->nbytes == 0 && t->ne[0] == 4 && t->ne[1] == 0, "empty");
        t = st_find(s, "odd");
        if (t) {
            float f[2];
            uint8_t raw[8];
            memcpy(raw, t->data, 8);
            CHECK(st_read_f32(t, 0, 2, f, &err) == 0 && memcmp(f, raw, 8) == 0, "unaligned read");
            CHECK(t->aligned == ((uintptr_t)t->data % 4 == 0), "aligned flag wrong");
        }
        t = st_find(s, "half");
        CHECK(t && t->type == HT_BF16 && t->ne[0] == 2 && t->ne[1] == 1 && t->ne[2] == 1 && t->ne[3] == 1, "half");
        t = st_find(s, "pos");
        CHECK(t && t->type == ST_UNSUPPORTED && strcmp(t->dtype, "I64") == 0, "pos listed as unsupported I64");
        const st_tensor *got = NULL;
        CHECK(st_get(s, "pos", &got, &err) == -1 && got == NULL, "st_get of I64 must fail");
        CHECK(strcmp(err.msg, "tensor 'pos': dtype I64 not supported (F32, F16, BF16 only)") == 0, "msg: %s", err.msg);
        float f;
        CHECK(t && st_read_f32(t, 0, 1, &f, &err) == -1, "st_read_f32 of I64 must fail");
        CHECK(st_get(s, "half", &got, &err) == 0 && got, "st_get half: %s", err.msg);
    }
    st_close(s);
    free(buf);
}

/* Random byte flips in the header and length of a valid file: any outcome but a crash or a bad set. */
static void test_fuzz(void) {
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F16\",\"shape\":[3,4],\"data_offsets\":[0,24]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[24,40]}}";
    size_t n;
    uint8_t *orig = make_st(hdr, 40, &n);
    uint8_t *p = malloc(n);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int opened = 0, rejected = 0;
    const char alphabet[] = "{}[]\",:-.0123456789eE \\u";
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(p, orig, n);
        int flips = 1 + iter % 4;
        for (int f = 0; f < flips; f++) {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            size_t at = (size_t)(rng % (8 + strlen(hdr)));
            p[at] = (rng >> 32) & 1 ? (uint8_t)(rng >> 40) : (uint8_t)alphabet[(rng >> 40) % (sizeof alphabet - 1)];
        }
        st_set *s = NULL;
        hearth_err err = {{0}};
        if (st_open_memory(p, n, "fuzz", &s, &err) == 0) {
            check_invariants("fuzz", s);
            opened++;
            st_close(s);
        } else {
            CHECK(err.msg[0] && !strchr(err.msg, '\n') && s == NULL, "fuzz: bad failure report");
            rejected++;
        }
    }
    if (verbose) printf("  fuzz: %d opened, %d rejected\n", opened, rejected);
    free(p);
    free(orig);
}

/* ---- 3. directories and index.json ---- */

static char tmpdir[64];

static void write_file(const char *name, const void *data, size_t n) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(data, 1, n, f) == n, "cannot write %s", path);
    fclose(f);
}

static void write_text(const char *name, const char *text) { write_file(name, text, strlen(text)); }

static void write_st(const char *name, const char *header, size_t data_len) {
    size_t n;
    uint8_t *p = make_st(header, data_len, &n);
    write_file(name, p, n);
    free(p);
}

static void remove_file(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    unlink(path);
}

static void expect_dir_fail(const char *what, const char *index_json) {
    write_text("model.safetensors.index.json", index_json);
    st_set *s = NULL;
    hearth_err err = {{0}};
    int rc = st_open_dir(tmpdir, &s, &err);
    CHECK(rc == -1 && s == NULL, "%s: expected failure", what);
    if (rc == 0) st_close(s);
    else check_err_msg(what, &err);
}

static void test_index(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hearth_st_XXXXXX");
    REQUIRE(mkdtemp(tmpdir), "mkdtemp failed");
    st_set *s = NULL;
    hearth_err err = {{0}};

    CHECK(st_open_dir(tmpdir, &s, &err) == -1 && strstr(err.msg, "neither"), "empty dir must fail: %s", err.msg);
    if (verbose) printf("  %-34s -> %s\n", "empty directory", err.msg);

    write_st("s1.safetensors", "{\"a\":{" T1 ",\"data_offsets\":[0,16]},\"b\":{" T1 ",\"data_offsets\":[16,32]}}", 32);
    write_st("s2.safetensors", "{\"c\":{" T1 ",\"data_offsets\":[0,16]}}", 16);
    write_st("dup.safetensors", "{\"a\":{" T1 ",\"data_offsets\":[0,16]}}", 16);
    write_st("bad.safetensors", "{\"z\":{" T1 ",\"data_offsets\":[0,99]}}", 16);
    char path[256];
    snprintf(path, sizeof path, "%s/subdir.safetensors", tmpdir);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/fifo.safetensors", tmpdir);
    int have_fifo = mkfifo(path, 0600) == 0;

    write_text("model.safetensors.index.json",
               "{\"metadata\":{\"total_size\":48},\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s1.safetensors\","
               "\"c\":\"s2.safetensors\"}}");
    CHECK(st_open_dir(tmpdir, &s, &err) == 0, "valid sharded dir: %s", err.msg);
    if (s) {
        CHECK(s->n_shards == 2 && s->n_tensors == 3, "valid sharded dir: %d shards, %llu tensors", s->n_shards,
              (unsigned long long)s->n_tensors);
        check_invariants("sharded", s);
        const st_tensor *c = st_find(s, "c");
        CHECK(c && strstr(st_shard_path(s, c), "s2.safetensors"), "c in s2");
        st_close(s);
        s = NULL;
    }

    expect_dir_fail("index: missing shard", "{\"weight_map\":{\"a\":\"s1.safetensors\",\"x\":\"missing.safetensors\"}}");
    expect_dir_fail("index: ../ path", "{\"weight_map\":{\"a\":\"../s1.safetensors\"}}");
    expect_dir_fail("index: absolute path", "{\"weight_map\":{\"a\":\"/etc/passwd\"}}");
    expect_dir_fail("index: subdir path", "{\"weight_map\":{\"a\":\"x/s1.safetensors\"}}");
    expect_dir_fail("index: '..'", "{\"weight_map\":{\"a\":\"..\"}}");
    expect_dir_fail("index: '.'", "{\"weight_map\":{\"a\":\".\"}}");
    expect_dir_fail("index: empty file name", "{\"weight_map\":{\"a\":\"\"}}");
    expect_dir_fail("index: shard is a directory", "{\"weight_map\":{\"a\":\"subdir.safetensors\"}}");
    if (have_fifo) expect_dir_fail("index: shard is a FIFO", "{\"weight_map\":{\"a\":\"fifo.safetensors\"}}");
    expect_dir_fail("index: non-string shard", "{\"weight_map\":{\"a\":1}}");
    expect_dir_fail("index: no weight_map", "{\"metadata\":{}}");
    expect_dir_fail("index: weight_map array", "{\"weight_map\":[\"s1.safetensors\"]}");
    expect_dir_fail("index: empty weight_map", "{\"weight_map\":{}}");
    expect_dir_fail("index: not JSON", "{\"weight_map\":");
    expect_dir_fail("index: trailing garbage", "{\"weight_map\":{\"a\":\"s1.safetensors\"}} x");
    expect_dir_fail("index: tensor not in shard",
                    "{\"weight_map\":{\"a\":\"s1.safetensors\",\"zz\":\"s1.safetensors\"}}");
    expect_dir_fail("index: tensor in the other shard",
                    "{\"weight_map\":{\"a\":\"s1.safetensors\",\"c\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
    expect_dir_fail("index: duplicate across shards",
                    "{\"weight_map\":{\"a\":\"s1.safetensors\",\"c\":\"dup.safetensors\"}}");
    expect_dir_fail("index: corrupt shard", "{\"weight_map\":{\"a\":\"s1.safetensors\",\"z\":\"bad.safetensors\"}}");

    /* model.safetensors takes precedence over the index; a corrupt one fails. */
    write_st("model.safetensors", "{\"a\":{" T1 ",\"data_offsets\":[0,16]}}", 8);
    CHECK(st_open_dir(tmpdir, &s, &err) == -1 && s == NULL, "truncated model.safetensors must fail");
    if (verbose) printf("  %-34s -> %s\n", "dir: truncated model.safetensors", err.msg);

    /* A header length over the cap in a large sparse file is rejected before anything is read. */
    remove_file("model.safetensors");
    snprintf(path, sizeof path, "%s/model.safetensors", tmpdir);
    FILE *f = fopen(path, "wb");
    uint8_t len[8];
    put_u64(len, (100ull << 20) + 1);
    REQUIRE(f && fwrite(len, 1, 8, f) == 8, "write");
    fclose(f);
    REQUIRE(truncate(path, (110 << 20)) == 0, "truncate");
    CHECK(st_open_dir(tmpdir, &s, &err) == -1 && strstr(err.msg, "limit"), "header over cap: %s", err.msg);
    if (verbose) printf("  %-34s -> %s\n", "header length over 100 MB cap", err.msg);

    /* st_read_json */
    cJSON *j = st_read_json(path, &err);
    CHECK(!j && err.msg[0], "st_read_json of binary must fail");
    remove_file("model.safetensors");
    write_text("c.json", "{\"x\": 1}\n");
    snprintf(path, sizeof path, "%s/c.json", tmpdir);
    j = st_read_json(path, &err);
    CHECK(j && cJSON_GetObjectItem(j, "x"), "st_read_json: %s", err.msg);
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/none.json", tmpdir);
    CHECK(!st_read_json(path, &err) && strstr(err.msg, "none.json"), "st_read_json missing: %s", err.msg);
    if (verbose) printf("  %-34s -> %s\n", "st_read_json missing file", err.msg);

    const char *names[] = {"s1.safetensors", "s2.safetensors", "dup.safetensors", "bad.safetensors",
                           "fifo.safetensors", "model.safetensors.index.json", "c.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) remove_file(names[i]);
    snprintf(path, sizeof path, "%s/subdir.safetensors", tmpdir);
    rmdir(path);
    CHECK(rmdir(tmpdir) == 0, "temp dir %s not empty", tmpdir);
}

int main(int argc, char **argv) {
    verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
    test_all_hf_dirs();
    test_known_tensors();
    test_malformed_headers();
    test_bad_lengths();
    test_truncations();
    test_valid_edge_cases();
    test_fuzz();
    test_index();
    TEST_DONE();
}
