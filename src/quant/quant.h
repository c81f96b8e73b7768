/* quant.h — tensor types: block layouts (identical to ggml's, so GGUF data is used in place) and the
 * traits table that describes each type: block size, bytes per block, to-float, quantize (from-float),
 * the activation format its dot product takes, and the dot product itself.
 *
 * Adding a type = one traits row + its kernels. Call sites never switch on the type.
 * The scalar kernels (quant_ref.c) are the reference; SIMD kernels (quant_avx2.c, quant_avx512.c,
 * quant_neon.c) are chosen at run time by quant_init() and tested against them. */
#ifndef HEARTH_QUANT_H
#define HEARTH_QUANT_H

#include "common.h"

enum ht_type {
    HT_F32 = 0, HT_F16 = 1, HT_Q4_0 = 2, HT_Q4_1 = 3, HT_Q5_0 = 6, HT_Q5_1 = 7, HT_Q8_0 = 8, HT_Q8_1 = 9,
    HT_Q2_K = 10, HT_Q3_K = 11, HT_Q4_K = 12, HT_Q5_K = 13, HT_Q6_K = 14, HT_Q8_K = 15,
    HT_IQ2_XXS = 16, HT_IQ2_XS = 17, HT_IQ3_XXS = 18, HT_IQ1_S = 19, HT_IQ4_NL = 20, HT_IQ3_S = 21, HT_IQ2_S = 22,
    HT_IQ4_XS = 23, HT_IQ1_M = 29, HT_BF16 = 30, HT_TQ1_0 = 34, HT_TQ2_0 = 35, HT_MXFP4 = 39, HT_NTYPES = 40
};

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK4_NL 32
#define QK_MXFP4 32
#define QK_K 256
#define K_SCALE_SIZE 12

typedef uint16_t ht_half;
typedef struct { ht_half d; uint8_t qs[QK4_0 / 2]; } block_q4_0;
typedef struct { ht_half d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;
typedef struct { ht_half d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0;
typedef struct { ht_half d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1;
typedef struct { ht_half d; int8_t qs[QK8_0]; } block_q8_0;
typedef struct { ht_half d, s; int8_t qs[QK8_1]; } block_q8_1;   /* s = d * sum(qs) */
typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; ht_half d, dmin; } block_q2_K;
typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; ht_half d; } block_q3_K;
typedef struct { ht_half d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; } block_q4_K;
typedef struct { ht_half d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_K;
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; ht_half d; } block_q6_K;
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K;
typedef struct { ht_half d; uint8_t qs[QK4_NL / 2]; } block_iq4_nl;
typedef struct { ht_half d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; } block_iq4_xs;
/* The low-bit i-quants: 8-element groups are indices into a grid of magnitudes (quant_grids.c) with sign bits
 * (IQ2/IQ3) or into a ternary grid with a +-1/8 shift (IQ1); the layouts are ggml's, described at each
 * unpack function of quant_ref.c. */
typedef struct { ht_half d; uint16_t qs[QK_K / 8]; } block_iq2_xxs;
typedef struct { ht_half d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; } block_iq2_xs;
typedef struct { ht_half d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t scales[QK_K / 32]; } block_iq2_s;
typedef struct { ht_half d; uint8_t qs[3 * QK_K / 8]; } block_iq3_xxs;
typedef struct {
    ht_half d;
    uint8_t qs[QK_K / 4], qh[QK_K / 32], signs[QK_K / 8], scales[QK_K / 64];
} block_iq3_s;
typedef struct { ht_half d; uint8_t qs[QK_K / 8]; uint16_t qh[QK_K / 32]; } block_iq1_s;
/* IQ1_M has no d field: its fp16 scale is spread over the top nibbles of the four 16-bit words of scales. */
typedef struct { uint8_t qs[QK_K / 8]; uint8_t qh[QK_K / 16]; uint8_t scales[QK_K / 32]; } block_iq1_m;
/* Ternary: TQ1_0 packs 5 trits a byte (base 3, scaled to 0..255), TQ2_0 2 bits a value; value - 1 in {-1,0,1}. */
typedef struct { uint8_t qs[(QK_K - 4 * QK_K / 64) / 5]; uint8_t qh[QK_K / 64]; ht_half d; } block_tq1_0;
typedef struct { uint8_t qs[QK_K / 4]; ht_half d; } block_tq2_0;
/* MXFP4 (OCP microscaling): a power-of-two scale e (E8M0) and 32 FP4 (E2M1) values as nibbles. */
typedef struct { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; } block_mxfp4;

_Static_assert(sizeof(block_q4_0) == 18, "q4_0");
_Static_assert(sizeof(block_q4_1) == 20, "q4_1");
_Static_assert(sizeof(block_q5_0) == 22, "q5_0");
_Static_assert(sizeof(block_q5_1) == 24, "q5_1");
_Static_assert(sizeof(block_q8_0) == 34, "q8_0");
_Static_assert(sizeof(block_q8_1) == 36, "q8_1");
_Static_assert(sizeof(block_q2_K) == 84, "q2_K");
_Static_assert(sizeof(block_q3_K) == 110, "q3_K");
_Static_assert(sizeof(block_q4_K) == 144, "q4_K");
_Static_assert(sizeof(block_q5_K) == 176, "q5_K");
_Static_assert(sizeof(block_q6_K) == 210, "q6_K");
_Static_assert(sizeof(block_q8_K) == 292, "q8_K");
_Static_assert(sizeof(block_iq4_nl) == 18, "iq4_nl");
_Static_assert(sizeof(block_iq4_xs) == 136, "iq4_xs");
_Static_assert(sizeof(block_iq2_xxs) == 66, "iq2_xxs");
_Static_assert(sizeof(block_iq2_xs) == 74, "iq2_xs");
_Static_assert(sizeof(block_iq2_s) == 82, "iq2_s");
_Static_assert(sizeof(block_iq3_xxs) == 98, "iq3_xxs");
_Static_assert(sizeof(block_iq3_s) == 110, "iq3_s");
_Static_assert(sizeof(block_iq1_s) == 50, "iq1_s");
_Static_assert(sizeof(block_iq1_m) == 56, "iq1_m");
_Static_assert(sizeof(block_tq1_0) == 54, "tq1_0");
_Static_assert(sizeof(block_tq2_0) == 66, "tq2_0");
_Static_assert(sizeof(block_mxfp4) == 17, "mxfp4");

/* n is always a multiple of the type's block size. */
typedef void (*ht_to_float_fn)(const void *src, float *dst, int64_t n);
typedef void (*ht_from_float_fn)(const float *src, void *dst, int64_t n);
/* Dot product of n elements: w in this type, a in the type's vec_dot_type. */
typedef float (*ht_vec_dot_fn)(int n, const void *w, const void *a);
/* A tile of dot products: nr weight rows (w, w + ws, ... bytes apart) times nc activation rows (a, a + as,
 * ...), nr >= 1 (any number: what depends on the activations alone is prepared once for all rows),
 * 1 <= nc <= HT_TILE_MAX:  y[c * ys + r] = vec_dot(n, w + r * ws, a + c * as).
 * Each weight block is decoded once for all nc columns, yet every output is computed with the same
 * operations in the same order as the table's vec_dot, so it is bit-identical to the 1x1 call: results do
 * not depend on how a matmul groups rows and tokens into tiles. */
typedef void (*ht_vec_dot_tile_fn)(int n, const void *w, size_t ws, int nr, const void *a, size_t as, int nc,
                                   float *y, size_t ys);
#define HT_TILE_MAX 4

/* A row-interleaved layout a kernel set multiplies faster than the file's (quant_x86_packed.h): the rows of a
 * matrix are repacked once at load into groups of `rows`, each group one contiguous stream holding block b of
 * all its rows side by side, so a tile meets every row of the group with one broadcast of the activations
 * and its lanes are the outputs. Activations are prepared in the pack's own format (act_prep). */
typedef struct ht_pack {
    const char *name;                         /* "Q4_0x16" */
    int rows;                                 /* rows per group */
    int max_nc;                               /* tokens a tile call takes at most */
    size_t (*group_bytes)(int64_t n);         /* bytes of one group of rows of n elements */
    /* Repacks nr <= rows rows of the file's layout (src, src + rb, ...) into one group; missing rows are 0. */
    void (*pack)(const uint8_t *src, size_t rb, int nr, int64_t n, uint8_t *dst);
    size_t (*act_bytes)(int64_t n);           /* bytes of one prepared activation row */
    void (*act_prep)(const float *x, uint8_t *dst, int64_t n);   /* NULL: the float rows as they are */
    /* y[c * ys + r] = row r of the group (r < nr) times activation row c (a + c * as), for c < nc <= max_nc;
     * each output is computed by the same operations whatever nc (bit-identical to nc = 1). */
    void (*tile)(int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, int nc, float *y, size_t ys);
    /* 0: the file's weights and the vec_dot format's activations, products as vec_dot's up to the order of
     * float adds. Else the pack rounds both itself: each weight and activation is within round_rel x the
     * largest magnitude of its row (of its activation row) of the value vec_dot would use. */
    float round_rel;
    /* Optional: the same tile without software prefetches, for groups already in cache (matmul's token tiles
     * after a chunk's first). NULL: tile. */
    void (*tile_cached)(int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, int nc, float *y, size_t ys);
    /* Optional: one token (decode) against ng >= 1 consecutive groups (g, g + group_bytes(n), ...; the last one's
     * rows nr) into y[0 .. (ng - 1) * rows + nr), each output bit-identical to tile's with nc = 1: several groups
     * at once, for the latency of the tile's few chains of adds. NULL: tile per group. */
    void (*decode)(int n, const uint8_t *g, int ng, int nr, const uint8_t *a, float *y);
    /* Optional, for a decode pack whose tiles lose to the type's gemm in prefill: a batch of nc > max_nc tokens
     * (matmul sends it every such batch), activations in the vec_dot format (as ht_gemm.run's), against one group,
     * every output bit-identical to vec_dot's. */
    void (*gemm)(int n, const uint8_t *g, int nr, const uint8_t *a, size_t as, int nc, float *y, size_t ys);
    /* Optional: 2 <= nc <= max_nc tokens (a small batch: a draft's verification) against ng >= 1 consecutive
     * groups, the last one's rows nr, each output bit-identical to tile's: several groups' streams and chains of
     * adds in flight, as decode's. NULL: tile per group. */
    void (*tiles)(int n, const uint8_t *g, int ng, int nr, const uint8_t *a, size_t as, int nc, float *y, size_t ys);
    /* The most tokens tiles takes (0: max_nc): a pack whose tile holds fewer tokens than a draft's verification
     * batch still runs one up to this size in one pass over the weights. */
    int tiles_max_nc;
} ht_pack;

/* A whole batch against the file's layout (no repacking), for prefill: the tile of ht_vec_dot_tile_fn with any
 * nc >= 1 (not bounded by HT_TILE_MAX), meant for nc >= min_nc, where decoding each weight block once for the
 * whole batch (into a small per-call panel of `rows` rows) pays. Every output is bit-identical to vec_dot's,
 * as the tile's. */
typedef struct ht_gemm {
    const char *name;         /* "iq3_s_p16" */
    int rows;                 /* rows decoded together: matmul cuts row chunks in multiples of it */
    int min_nc;               /* matmul calls run for batches of at least this many tokens */
    ht_vec_dot_tile_fn run;
} ht_gemm;

/* Products against a transposed matrix, for attention scores from a position-minor K cache (F32, F16):
 * y[c * ys + t] = sum over d < k of a[c * as + d] * w[d * ws + t] for t < n, c < nc <= HT_TILE_MAX (ws, as
 * in elements). Each output adds its k terms in order of d with the same operations wherever t falls and
 * whatever n or nc: a score does not depend on how many are computed with it. */
typedef void (*ht_dot_t_fn)(int k, const void *w, size_t ws, int n, const float *a, size_t as, int nc, float *y, size_t ys);

/* Attention over a row cache of this type (Q8_0), with rows taken in place (row r at w + r * ws bytes):
 * kq: scores y[c * ys + r] = vec_dot(n, w + r * ws, a + c * as) for r < nr, c < nc (any nc), a in vec_dot_type,
 * each bit-identical to the reference vec_dot (integer block sums, then the blocks' float terms in order), for
 * short rows (a head) and many of them: several rows' sums are reduced at once instead of one per score.
 * pv: softmax·V, o_c[d] = sum over t < m in order of p[c * ld + t] * v_t[d] for the rows v_t at slot (lo + t) % cap,
 * column c's n outputs at o + (c / per) * os + (c % per) * n; each position adds fma(p * d_block, q, o) (o from 0),
 * the same operations whatever nc or m, so an output does not depend on what is computed with it. */
typedef void (*ht_kq_fn)(int n, const void *w, size_t ws, int nr, const void *a, size_t as, int nc, float *y, size_t ys);
typedef void (*ht_pv_fn)(int n, const void *v, size_t vs, int cap, int lo, int m, const float *p, size_t ld, int nc,
                         float *o, size_t os, int per);

typedef struct {
    const char *name;         /* "Q4_K", as ggml names it */
    int blck;                 /* elements per block */
    size_t type_size;         /* bytes per block */
    bool is_quant;
    ht_to_float_fn to_float;
    ht_from_float_fn from_float;   /* reference round-to-nearest quantizer */
    int vec_dot_type;         /* the format activations are converted to for vec_dot */
    ht_vec_dot_fn vec_dot;
    ht_vec_dot_tile_fn vec_dot_tile;   /* optional (NULL: loop of vec_dot); call through ht_vec_dot_tile() */
    const ht_pack *pack;      /* optional: the faster row-interleaved layout of the active kernel set */
    ht_dot_t_fn dot_t;        /* F32 and F16 only (the cache types that are kept transposed) */
    ht_kq_fn kq;              /* optional: row caches' scores and softmax·V (Q8_0); NULL: vec_dot tiles and */
    ht_pv_fn pv;              /* rows dequantized to float */
    const ht_gemm *gemm;      /* optional: the active kernel set's batch product over the file's layout */
} ht_traits;

/* The tile of ht_vec_dot_tile_fn with tr's kernels: its vec_dot_tile, or the loop of vec_dot without one. */
static inline void ht_vec_dot_tile(const ht_traits *tr, int n, const void *w, size_t ws, int nr, const void *a,
                                   size_t as, int nc, float *y, size_t ys) {
    if (tr->vec_dot_tile) {
        tr->vec_dot_tile(n, w, ws, nr, a, as, nc, y, ys);
        return;
    }
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++)
            y[(size_t)c * ys + (size_t)r] = tr->vec_dot(n, (const uint8_t *)w + (size_t)r * ws, (const uint8_t *)a + (size_t)c * as);
}

/* NULL for unknown / unsupported type ids. The active table: scalar until quant_init() picks SIMD kernels. */
const ht_traits *ht_get_traits(uint32_t type);
/* The scalar reference table (quant_ref.c), whatever the active backend: tests compare against it, and
 * file writers (quantize) use its from_float, which is bit-identical to ggml's reference quantizers
 * (a SIMD from_float for an activation format may round ties differently). */
const ht_traits *ht_get_traits_ref(uint32_t type);
/* Bytes of a row of n elements; 0 for an unknown type or n not a multiple of the block size. */
size_t ht_row_size(uint32_t type, int64_t n);
/* Converts a row of n activations to vec_dot_type (a traits' vec_dot_type) with the active from_float:
 * a copy for F32, Q8_0 / Q8_1 / Q8_K blocks otherwise. dst holds ht_row_size(vec_dot_type, n) bytes. */
void ht_quantize_row(uint32_t vec_dot_type, const float *x, void *dst, int64_t n);
/* Pick the fastest kernels this CPU supports (idempotent; thread-safe to call once at start). */
void quant_init(void);
/* The kernel level in use: "avx512vnni", "avx512", "avx2", "neon" or "scalar" ("neon" uses the dot-product
 * instructions when getauxval reports them). */
const char *quant_backend(void);
/* Force a level for tests ("scalar", ...); returns false if it is not built in or this CPU can't run it.
 * Swaps the active table: call only while no kernel is running. */
bool quant_set_backend(const char *name);
/* Name of the i-th built-in kernel set, best first ("scalar" last); NULL past the end. */
const char *quant_backend_name(int i);

/* The multiply-add peak of the active kernel set for a weight type's products: the instruction its tiles
 * multiply with (VPDPBUSD, VPMADDUBSW, VPMADDWD, an FMA, SDOT, ...), issued back to back on registers with no
 * memory access, by the calling thread for about `seconds`. macs: multiply-adds a second (0: not measured,
 * as for the scalar set). No kernel on that instruction can pass it: a prefill's share of it says how close
 * to the arithmetic's roofline it runs. */
typedef struct { const char *insn; double macs; } ht_mac_peak;
ht_mac_peak quant_mac_peak(uint32_t type, double seconds);

/* How a SIMD kernel file plugs in. quant_avx2.c (say) defines
 *     const ht_kernel_set quant_kernels_avx2 = { "avx2", cpu_has_avx2, install_avx2, mac_peak_avx2 };
 * where install_avx2(t) overwrites entries of t (indexed by type id, already a copy of the scalar table):
 * typically t[HT_Q4_0].vec_dot, t[HT_Q8_0].from_float, ... — any entry it does not touch stays scalar, and
 * it may first call a lower set's install (avx512 over avx2). The build defines HEARTH_QUANT_AVX2 (and
 * _AVX512, _AVX512VNNI, _NEON) for quant.c when it compiles the file with its target flags; quant.c then
 * lists the set. Overrides must give the same per-block integer sums and float formula as quant_ref.c.
 * mac_peak (quant_mac_peak above) is measurement only: nothing on a compute path calls it. */
typedef struct {
    const char *name;                       /* as quant_backend() reports it */
    bool (*cpu_ok)(void);                   /* can this CPU run the kernels? (NULL: always) */
    void (*install)(ht_traits t[HT_NTYPES]); /* NULL: nothing to override */
    ht_mac_peak (*mac_peak)(uint32_t type, double seconds);   /* NULL: not measured */
} ht_kernel_set;

#endif
