/* quant_simd.h — what the SIMD kernel files (quant_avx2.c, quant_avx512*.c, quant_neon*.c) share: the CPU
 * feature tests of quant_cpu.c (compiled without target flags, so a cpu_ok() can never itself execute an
 * instruction the CPU lacks), always_inline, and the tile driver every set builds its vec_dot_tile from.
 *
 * Kernel bodies are written once as always_inline functions of a compile-time type id T and column count
 * NC (activation rows sharing one decode of each weight block), the tile's weight rows one after the other
 * (interleaving them block by block was measured slower: it breaks the weight stream into short runs); a
 * set's vec_dot is the instance for one row and NC = 1, and its tile runs the NC = 4 / 2 / 1 instances, so
 * every output of a tile is computed by exactly the operations of the 1x1 call. Float arithmetic in these files must not be contracted into FMAs
 * behind the code's back (an FMA that appears in one instance and not in another would break that
 * identity): the pragma below, like -ffp-contract=off in cmake/simd.cmake, forbids it; FMAs are written
 * explicitly where wanted. */
#ifndef HEARTH_QUANT_SIMD_H
#define HEARTH_QUANT_SIMD_H

#include "quant.h"
#include "quant_ref.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#define HT_AI static inline __attribute__((always_inline))
/* Weight rows are read once, front to back: the kernels prefetch HT_PREFETCH_AHEAD bytes ahead of the block
 * they decode (measured: the hardware prefetchers alone leave the K-quant kernels 1.3-1.6x slower on rows
 * that come from L3 or DRAM). Prefetching past the end of the matrix is harmless. */
#ifndef HT_PREFETCH_AHEAD
#define HT_PREFETCH_AHEAD 4096
#endif
HT_AI void ht_prefetch(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + HT_PREFETCH_AHEAD + o, 0, 3);
}
/* Twice as far ahead, into L2 only: the Q6_K x16 decode kernel, whose unpacking takes longer per byte, kept
 * too few lines in flight with ht_prefetch (the 1B Q6_K file's decode +16-23%, medians of 2 x 6 runs); so
 * did the 256-bit Q4_0 / Q5_0, Q4_K and Q6_K x8 kernels (1-thread decode +16%, +28-45%, and Q6_K's
 * streaming rate +40%). Q4_0 and Q8_0 x16 read slower with it. */
HT_AI void ht_prefetch_l2(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + 2 * HT_PREFETCH_AHEAD + o, 0, 2);
}
/* A quarter as far ahead, into L1: the 256-bit Q8_0 and F16 kernels' one-token (decode) instances, which read
 * the most bytes per instruction; the lines the hardware prefetcher brings to L2 then need only the short hop. */
HT_AI void ht_prefetch_near(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + HT_PREFETCH_AHEAD / 4 + o, 0, 3);
}
/* Before a loop of a small constant count (columns, sub-blocks): unroll it fully, so its vectors stay in
 * registers instead of going through arrays on the stack. */
#define HT_UNROLL _Pragma("GCC unroll 16")

/* Block layouts by compile-time type id, shared by every kernel set. */
HT_AI bool uses_q8_1(const int T) { return T == HT_Q4_1 || T == HT_Q5_1; }   /* else Q8_0 activations */

HT_AI size_t w_size(const int T) {   /* a 32-element weight block */
    switch (T) {
    case HT_Q4_0: return sizeof(block_q4_0);
    case HT_Q4_1: return sizeof(block_q4_1);
    case HT_Q5_0: return sizeof(block_q5_0);
    case HT_Q5_1: return sizeof(block_q5_1);
    case HT_Q8_0: return sizeof(block_q8_0);
    case HT_MXFP4: return sizeof(block_mxfp4);
    default: return sizeof(block_iq4_nl);
    }
}

HT_AI size_t a_size(const int T) { return uses_q8_1(T) ? sizeof(block_q8_1) : sizeof(block_q8_0); }

HT_AI size_t k_size(const int T) {   /* a 256-element super-block */
    switch (T) {
    case HT_Q2_K: return sizeof(block_q2_K);
    case HT_Q3_K: return sizeof(block_q3_K);
    case HT_Q4_K: return sizeof(block_q4_K);
    case HT_Q5_K: return sizeof(block_q5_K);
    case HT_Q6_K: return sizeof(block_q6_K);
    case HT_IQ2_XXS: return sizeof(block_iq2_xxs);
    case HT_IQ2_XS: return sizeof(block_iq2_xs);
    case HT_IQ2_S: return sizeof(block_iq2_s);
    case HT_IQ3_XXS: return sizeof(block_iq3_xxs);
    case HT_IQ3_S: return sizeof(block_iq3_s);
    case HT_IQ1_S: return sizeof(block_iq1_s);
    case HT_IQ1_M: return sizeof(block_iq1_m);
    case HT_TQ1_0: return sizeof(block_tq1_0);
    case HT_TQ2_0: return sizeof(block_tq2_0);
    default: return sizeof(block_iq4_xs);
    }
}

HT_AI size_t k_d_off(const int T) {   /* where a super-block's d is */
    switch (T) {
    case HT_Q2_K: return offsetof(block_q2_K, d);
    case HT_Q3_K: return offsetof(block_q3_K, d);
    case HT_Q4_K: return offsetof(block_q4_K, d);
    case HT_Q5_K: return offsetof(block_q5_K, d);
    case HT_Q6_K: return offsetof(block_q6_K, d);
    case HT_TQ1_0: return offsetof(block_tq1_0, d);
    case HT_TQ2_0: return offsetof(block_tq2_0, d);
    default: return 0;   /* IQ4_XS and the i-quants but IQ1_M (no d field: see tileK) */
    }
}

HT_AI bool k_has_min(const int T) { return T == HT_Q2_K || T == HT_Q4_K || T == HT_Q5_K; }

HT_AI size_t k_dmin_off(const int T) {   /* and its dmin (k_has_min types) */
    switch (T) {
    case HT_Q2_K: return offsetof(block_q2_K, dmin);
    case HT_Q4_K: return offsetof(block_q4_K, dmin);
    default: return offsetof(block_q5_K, dmin);
    }
}

/* quant_cpu.c: can this CPU (and OS, for the vector register state) run the set? */
bool ht_cpu_x86_avx2(void);        /* AVX2 + FMA + F16C, ymm state enabled */
bool ht_cpu_x86_avx512(void);      /* AVX-512 F/BW/VL/DQ + the above, zmm state enabled */
bool ht_cpu_x86_avx512vnni(void);  /* the above + AVX512_VNNI */
bool ht_cpu_x86_avx512vbmi(void);  /* AVX-512 + AVX512_VBMI (byte permutes; tested per kernel at install) */
bool ht_cpu_x86_avx512bf16(void);  /* AVX-512 + AVX512_BF16 (VDPBF16PS; tested per kernel at install) */
bool ht_cpu_arm_neon(void);        /* always true on aarch64 */
bool ht_cpu_arm_dotprod(void);     /* SDOT/UDOT (HWCAP_ASIMDDP) */

/* quant_neon_dotprod.c: overrides the baseline NEON entries with SDOT kernels (aarch64 only). */
void ht_neon_dotprod_install(ht_traits t[HT_NTYPES]);
double ht_neon_sdot_rate(double seconds);   /* SDOT instructions a second (quant_peak.h) */

/* The body of a vec_dot_tile (parameters as ht_vec_dot_tile_fn), given COLS(n, w, ws, nr, a, as, nc, y, ys),
 * which dispatches nc to kernel instances built for a compile-time column count: columns go in groups of
 * 4, 2 and 1, MAXC (2 or 4) being the largest group the kernel is built for. */
#define HT_TILE_BODY(COLS, MAXC)                                                                            \
    const uint8_t *a_ = a;                                                                                 \
    int c_ = 0;                                                                                            \
    if ((MAXC) >= 4)                                                                                       \
        for (; c_ + 4 <= nc; c_ += 4) COLS(n, w, ws, nr, a_ + (size_t)c_ * as, as, 4, y + (size_t)c_ * ys, ys); \
    for (; c_ + 2 <= nc; c_ += 2) COLS(n, w, ws, nr, a_ + (size_t)c_ * as, as, 2, y + (size_t)c_ * ys, ys);   \
    if (c_ < nc) COLS(n, w, ws, nr, a_ + (size_t)c_ * as, as, 1, y + (size_t)c_ * ys, ys);

#endif
