/* quant_iq_search.c — the reference quantizers of IQ3_S, IQ3_XXS and IQ2_S: ggml's grid searches without an
 * importance matrix (quantize_row_iq3_s_ref, quantize_row_iq3_xxs_ref, quantize_iq2_s with no weights),
 * reproduced so that hearth writes llama.cpp's blocks.
 *
 * The formats store groups (4 values for IQ3, 8 for IQ2_S) as an index into a grid of allowed level vectors
 * (quant_grids.c) plus a sign bit per value (IQ3_XXS: 7 of 8, the eighth by even parity). Per sub-block (32 /
 * 16 values) the search tries 19 (IQ3_XXS: 31) scales around max/(2 kMaxQ - 1): each value is rounded to a
 * level l (the magnitude 2l + 1), and a group whose levels are not a grid point is replaced by the grid point
 * among its precomputed neighbours that is nearest in the weighted (sqrt(weight)) distance; the scale with the best weighted fit wins, off-grid groups
 * are re-rounded with it, and the sub-block scales become 4-bit multiples of the super-block's fp16 d.
 *
 * The search tables (ggml's iq2xs_init_impl / iq3xs_init_impl) are built once, on first use, into static
 * storage: for every vector of levels its grid index, or the list of grid points at the nwant smallest
 * squared distances (all ties, by distance then index). As quant_ref.c, every float expression is evaluated
 * as ggml writes it and never contracted into FMAs, so the blocks are identical byte for byte. */
#include "quant_ref.h"

#include <float.h>
#include <math.h>
#include <pthread.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* ggml's nearest_int (round half to even through the float adder), as in quant_ref.c. */
static inline int nearest_int(float f) {
    float v = f + 12582912.f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---- search tables ---- */

#define IQ3S_MAP 4096      /* 4 levels of 3 bits */
#define IQ2S_MAP 43692     /* 8 levels of 2 bits, each <= 2: the largest packed vector is 0xAAAA */
/* The neighbour lists' total size, counts included: what the grids give (fixed data). Were it short, build()
 * would leave ok false and the quantizers write zero blocks, which test_quant's round trips catch. */
#define IQ3S_NEIGH 28317
#define IQ3XXS_NEIGH 22825
#define IQ2S_NEIGH 50253
#define IQ2XXS_NEIGH 119462
#define IQ2XS_NEIGH 187770

typedef struct {
    int dims, bits, n_grid, map_size, nwant;
    int32_t *map;          /* >= 0: the grid index of this level vector; < 0: -(offset + 1) of its list in neigh */
    uint16_t *neigh;       /* per off-grid vector: count, then grid indices */
    int neigh_cap;
    int8_t levels[1024][8];   /* each grid point's levels l (magnitude 2l + 1) */
    bool ok;
} iq_search;

static int32_t map3[IQ3S_MAP], map3xxs[IQ3S_MAP], map2[IQ2S_MAP], map2xxs[IQ2S_MAP], map2xs[IQ2S_MAP];
static uint16_t neigh3[IQ3S_NEIGH], neigh3xxs[IQ3XXS_NEIGH], neigh2[IQ2S_NEIGH], neigh2xxs[IQ2XXS_NEIGH], neigh2xs[IQ2XS_NEIGH];
static iq_search search3 = { 4, 3, 512, IQ3S_MAP, 3, map3, neigh3, IQ3S_NEIGH, {{0}}, false };
static iq_search search3xxs = { 4, 3, 256, IQ3S_MAP, 2, map3xxs, neigh3xxs, IQ3XXS_NEIGH, {{0}}, false };
static iq_search search2 = { 8, 2, 1024, IQ2S_MAP, 1, map2, neigh2, IQ2S_NEIGH, {{0}}, false };
static iq_search search2xxs = { 8, 2, 256, IQ2S_MAP, 2, map2xxs, neigh2xxs, IQ2XXS_NEIGH, {{0}}, false };
static iq_search search2xs = { 8, 2, 512, IQ2S_MAP, 2, map2xs, neigh2xs, IQ2XS_NEIGH, {{0}}, false };

static int pack_levels(const iq_search *s, const int8_t *l) {
    int u = 0;
    for (int i = 0; i < s->dims; i++) u |= l[i] << s->bits * i;
    return u;
}

/* Grid point j's levels from the format's grid: IQ3_S bytes are 2l + 1, IQ3_XXS's 4, 12, ..., 52, 62 stand
 * for l = 0 .. 7, IQ2_S's 8, 25, 43 for l = 0, 1, 2. */
static void grid_levels(iq_search *s) {
    for (int j = 0; j < s->n_grid; j++)
        for (int i = 0; i < s->dims; i++) {
            if (s->dims == 8) {
                const uint64_t g = s->n_grid == 256 ? ht_iq2xxs_grid[j] : s->n_grid == 512 ? ht_iq2xs_grid[j] : ht_iq2s_grid[j];
                s->levels[j][i] = (int8_t)(((int)(g >> 8 * i & 0xFF) - 8) / 17);
            } else if (s->n_grid == 512) {
                s->levels[j][i] = (int8_t)(((int)(ht_iq3s_grid[j] >> 8 * i & 0xFF) - 1) / 2);
            } else {
                s->levels[j][i] = (int8_t)(((int)(ht_iq3xxs_grid[j] >> 8 * i & 0xFF) - 4) / 8);
            }
        }
}

/* The neighbour list of level vector u (not a grid point), written at out: the grid points at the nwant
 * smallest distinct squared distances of the magnitudes, ascending, ties by index. Returns its length. */
static int neighbours_of(const iq_search *s, int u, uint16_t *out, int cap) {
    int d2[1024], best[3];
    for (int j = 0; j < s->n_grid; j++) {
        int d = 0;
        for (int i = 0; i < s->dims; i++) {
            const int diff = 2 * (s->levels[j][i] - (u >> s->bits * i & ((1 << s->bits) - 1)));
            d += diff * diff;
        }
        d2[j] = d;
    }
    for (int k = 0; k < s->nwant; k++) {   /* the k-th smallest distinct distance */
        best[k] = INT32_MAX;
        for (int j = 0; j < s->n_grid; j++)
            if (d2[j] < best[k] && (k == 0 || d2[j] > best[k - 1])) best[k] = d2[j];
    }
    int n = 0;
    for (int k = 0; k < s->nwant && best[k] != INT32_MAX; k++)
        for (int j = 0; j < s->n_grid; j++)
            if (d2[j] == best[k]) {
                if (n < cap) out[n] = (uint16_t)j;
                n++;
            }
    return n;
}

static void build(iq_search *s) {
    grid_levels(s);
    for (int u = 0; u < s->map_size; u++) s->map[u] = -1;
    for (int j = 0; j < s->n_grid; j++) s->map[pack_levels(s, s->levels[j])] = j;
    int used = 0;
    for (int u = 0; u < s->map_size; u++) {
        if (s->map[u] >= 0) continue;
        bool valid = true;   /* IQ2_S: vectors with a level 3 are never looked up (levels are clamped to 2) */
        for (int i = 0; i < s->dims; i++) valid &= (u >> s->bits * i & ((1 << s->bits) - 1)) < (s->dims == 4 ? 8 : 3);
        if (!valid) continue;
        const int n = neighbours_of(s, u, s->neigh + used + 1, s->neigh_cap - used - 1);
        if (used + 1 + n > s->neigh_cap) return;   /* s->ok stays false */
        s->neigh[used] = (uint16_t)n;
        s->map[u] = -(used + 1);
        used += 1 + n;
    }
    s->ok = true;
}

static pthread_once_t once3 = PTHREAD_ONCE_INIT, once3xxs = PTHREAD_ONCE_INIT, once2 = PTHREAD_ONCE_INIT,
                      once2xxs = PTHREAD_ONCE_INIT, once2xs = PTHREAD_ONCE_INIT;
static void build3(void) { build(&search3); }
static void build3xxs(void) { build(&search3xxs); }
static void build2(void) { build(&search2); }
static void build2xxs(void) { build(&search2xxs); }
static void build2xs(void) { build(&search2xs); }

/* ggml's iq{2,3}_find_best_neighbour: among u's neighbours the grid point nearest scale * (2l + 1) to xval in
 * the weighted distance (first on ties); its levels go to L. Returns its grid index. */
static int best_neighbour(const iq_search *s, int u, const float *xval, const float *weight, float scale, int8_t *L) {
    const uint16_t *nb = s->neigh - s->map[u] - 1;
    float best_d2 = FLT_MAX;
    int gi = -1;
    for (int j = 1; j <= nb[0]; j++) {
        const int8_t *lv = s->levels[nb[j]];
        float d2 = 0;
        for (int i = 0; i < s->dims; i++) {
            float q = (float)(2 * lv[i] + 1);
            float diff = scale * q - xval[i];
            d2 += weight[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            gi = nb[j];
        }
    }
    for (int i = 0; i < s->dims; i++) L[i] = s->levels[gi][i];
    return gi;
}

/* ---- one sub-block's search (both formats) ---- */

typedef struct {
    const iq_search *s;
    int bs;          /* sub-block size: 32 (IQ3_S) or 16 (IQ2_S) */
    int kmaxq;       /* levels 0 .. kmaxq - 1 */
    int trials;      /* scale trials -trials .. trials: 9, IQ3_XXS 15 */
    float step;      /* their spacing in units of 1/max: 0.2 (IQ3), 0.1 (IQ2_S) */
    bool on_grid0;   /* is_on_grid's initial value (ggml: false for IQ3_S, true for the others) */
    bool skip_on_grid;   /* the re-rounding leaves groups already on the grid alone (not IQ3_S) */
} iq_params;

/* Levels L (bs of them) and the scale of one sub-block of magnitudes xval with weights weight; 0 if all zero. */
static float search_subblock(const iq_params *p, const float *xval, const float *weight, float max, int8_t *L) {
    const iq_search *s = p->s;
    const int ng = p->bs / s->dims;
    float waux[32];
    int8_t Laux[32];
    bool on[8], on_aux[8] = {false};
    for (int i = 0; i < p->bs; i++) waux[i] = sqrtf(weight[i]);
    float best = 0;
    float scale = max / (2 * p->kmaxq - 1);
    for (int k = 0; k < ng; k++) on[k] = p->on_grid0;
    for (int is = -p->trials; is <= p->trials; ++is) {
        float id = (2 * p->kmaxq - 1 + is * p->step) / max;
        float this_scale = 1 / id;
        for (int k = 0; k < ng; k++) {
            for (int i = 0; i < s->dims; i++) {
                int l = nearest_int(0.5f * (id * xval[s->dims * k + i] - 1));
                Laux[s->dims * k + i] = (int8_t)clampi(l, 0, p->kmaxq - 1);
            }
            const int u = pack_levels(s, Laux + s->dims * k);
            on_aux[k] = s->map[u] >= 0;
            if (!on_aux[k]) best_neighbour(s, u, xval + s->dims * k, waux + s->dims * k, this_scale, Laux + s->dims * k);
        }
        float sumqx = 0, sumq2 = 0;
        for (int i = 0; i < p->bs; i++) {
            float w = weight[i];
            float q = 2 * Laux[i] + 1;
            sumqx += w * xval[i] * q;
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(L, Laux, (size_t)p->bs);
            memcpy(on, on_aux, sizeof on);
        }
    }
    int n_off = 0;
    for (int k = 0; k < ng; k++) n_off += !on[k];
    if (n_off > 0 && scale > 0) {
        float id = 1 / scale;
        for (int k = 0; k < ng; k++) {
            if (p->skip_on_grid && on[k]) continue;
            for (int i = 0; i < s->dims; i++) {
                int l = nearest_int(0.5f * (id * xval[s->dims * k + i] - 1));
                L[s->dims * k + i] = (int8_t)clampi(l, 0, p->kmaxq - 1);
            }
            const int u = pack_levels(s, L + s->dims * k);
            if (s->map[u] < 0) best_neighbour(s, u, xval + s->dims * k, waux + s->dims * k, scale, L + s->dims * k);
        }
        float sumqx = 0, sumq2 = 0;
        for (int i = 0; i < p->bs; i++) {
            float w = weight[i];
            float q = 2 * L[i] + 1;
            sumqx += w * xval[i] * q;
            sumq2 += w * q * q;
        }
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    return scale;
}

/* Magnitudes and sign bytes (bit i of byte k: value 8k + i negative) of n values. */
static void split_signs(const float *xb, int n, float *xval, uint8_t *signs) {
    for (int k = 0; k < n / 8; k++) {
        uint8_t sg = 0;
        for (int i = 0; i < 8; i++) {
            if (xb[8 * k + i] >= 0) {
                xval[8 * k + i] = xb[8 * k + i];
            } else {
                xval[8 * k + i] = -xb[8 * k + i];
                sg |= (uint8_t)(1 << i);
            }
        }
        signs[k] = sg;
    }
}

/* ---- IQ3_S ---- */

/* Importance weights of sub-block xb, ggml's way: with an imatrix qw * sqrt(sigma2 + x^2) (sigma2 = twice
 * the super-block's mean square), else x^2 (plus IQ2_S's 0.25 sigma2). */
static void sub_weights(const float *xb, int n, const float *qw, float sigma2, float bias, float *weight) {
    for (int i = 0; i < n; i++) weight[i] = qw ? qw[i] * sqrtf(sigma2 + xb[i] * xb[i]) : bias * sigma2 + xb[i] * xb[i];
}

static float super_sigma2(const float *xbl) {
    float sumx2 = 0;
    for (int i = 0; i < QK_K; i++) sumx2 += xbl[i] * xbl[i];
    return 2 * sumx2 / QK_K;
}

static void iq3_s_quantize(const float *x, void *vy, int64_t n, const float *qw) {
    pthread_once(&once3, build3);
    block_iq3_s *y = vy;
    const iq_params p = { &search3, 32, 8, 9, 0.2f, false, false };
    for (int64_t ibl = 0; ibl < n / QK_K; ibl++) {
        memset(&y[ibl], 0, sizeof y[ibl]);
        if (!search3.ok) continue;   /* cannot happen: the tables' sizes are fixed by the grid (test_quant) */
        const float *xbl = x + QK_K * ibl;
        const float sigma2 = super_sigma2(xbl);
        float scales[QK_K / 32], max_scale = 0;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const float *xb = xbl + 32 * ib;
            float weight[32], xval[32];
            int8_t L[32];
            uint8_t signs[4];
            sub_weights(xb, 32, qw ? qw + QK_K * ibl + 32 * ib : NULL, sigma2, 0, weight);
            split_signs(xb, 32, xval, signs);
            float max = xval[0];
            for (int i = 1; i < 32; i++) max = fmaxf(max, xval[i]);
            memset(L, 0, sizeof L);
            float scale = 0;
            if (max) scale = search_subblock(&p, xval, weight, max, L);
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 4; k++) signs[k] = (uint8_t)~signs[k];
            }
            /* A zero sub-block keeps levels 0 (grid point 0) and no signs at its own place (ggml's loop skips
             * the advance of its qs / signs pointers there, shifting the later sub-blocks: not reproduced). */
            for (int k = 0; k < 8; k++) {
                const int gi = search3.map[pack_levels(&search3, L + 4 * k)];
                y[ibl].qs[8 * ib + k] = (uint8_t)(gi & 255);
                y[ibl].qh[ib] |= (uint8_t)((gi >> 8) << k);
            }
            memcpy(y[ibl].signs + 4 * ib, signs, 4);
            scales[ib] = scale;
            max_scale = fmaxf(max_scale, scale);
        }
        if (!max_scale) continue;
        float d = max_scale / 31;
        y[ibl].d = f32_to_fp16(d * 1.033f);
        float id = 1 / d;
        for (int ib = 0; ib < QK_K / 32; ib += 2) {
            int l1 = clampi(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 15);
            int l2 = clampi(nearest_int(0.5f * (id * scales[ib + 1] - 1)), 0, 15);
            y[ibl].scales[ib / 2] = (uint8_t)(l1 | l2 << 4);
        }
    }
}

void ht_ref_iq3_s_from_float(const float *x, void *vy, int64_t n) { iq3_s_quantize(x, vy, n, NULL); }
static void iq3_s_weighted(const float *x, void *vy, int64_t n, const float *qw) { iq3_s_quantize(x, vy, n, qw); }

/* ---- IQ3_XXS ---- */

/* Magnitudes and 7-bit sign indices of n values, ggml's way: a group of 8 with an odd number of negatives
 * flips the sign of its value of least weight * x^2 (which keeps that value negative in xval). */
static void split_signs_even(const float *xb, const float *weight, float *xval, uint8_t *signs, int n) {
    for (int k = 0; k < n / 8; k++) {
        int nflip = 0;
        uint8_t sg = 0;
        for (int i = 0; i < 8; i++) {
            if (xb[8 * k + i] >= 0) {
                xval[8 * k + i] = xb[8 * k + i];
            } else {
                xval[8 * k + i] = -xb[8 * k + i];
                ++nflip;
                sg |= (uint8_t)(1 << i);
            }
        }
        if (nflip % 2) {
            int imin = 0;
            float min = weight[8 * k] * xb[8 * k] * xb[8 * k];
            for (int i = 1; i < 8; i++) {
                float ax = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                if (ax < min) {
                    min = ax;
                    imin = i;
                }
            }
            xval[8 * k + imin] = -xval[8 * k + imin];
            sg ^= (uint8_t)(1 << imin);
        }
        signs[k] = sg & 127;
    }
}

static void iq3_xxs_quantize(const float *x, void *vy, int64_t n, const float *qw) {
    pthread_once(&once3xxs, build3xxs);
    block_iq3_xxs *y = vy;
    const iq_params p = { &search3xxs, 32, 8, 15, 0.2f, true, true };
    for (int64_t ibl = 0; ibl < n / QK_K; ibl++) {
        memset(&y[ibl], 0, sizeof y[ibl]);
        if (!search3xxs.ok) continue;
        const float *xbl = x + QK_K * ibl;
        const float sigma2 = super_sigma2(xbl);
        float scales[QK_K / 32], max_scale = 0;
        uint32_t sas[QK_K / 32] = {0};   /* scales and signs */
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const float *xb = xbl + 32 * ib;
            float weight[32], xval[32];
            int8_t L[32];
            uint8_t signs[4];
            sub_weights(xb, 32, qw ? qw + QK_K * ibl + 32 * ib : NULL, sigma2, 0, weight);
            split_signs_even(xb, weight, xval, signs, 32);
            float max = xval[0];
            for (int i = 1; i < 32; i++) max = fmaxf(max, xval[i]);
            memset(L, 0, sizeof L);
            if (max < 1e-8f) {   /* ggml's GROUP_MAX_EPS_IQ3_XXS */
                scales[ib] = 0;
                continue;
            }
            float scale = search_subblock(&p, xval, weight, max, L);
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 4; k++) signs[k] = (uint8_t)(~signs[k] & 127);
            }
            for (int k = 0; k < 8; k++)
                y[ibl].qs[8 * ib + k] = (uint8_t)search3xxs.map[pack_levels(&search3xxs, L + 4 * k)];
            sas[ib] = (uint32_t)signs[0] | (uint32_t)signs[1] << 7 | (uint32_t)signs[2] << 14 | (uint32_t)signs[3] << 21;
            scales[ib] = scale;
            max_scale = fmaxf(max_scale, scale);
        }
        if (!max_scale) {
            memset(&y[ibl], 0, sizeof y[ibl]);
            continue;
        }
        float d = max_scale / 31;
        y[ibl].d = f32_to_fp16(d * 1.0125f);
        float id = 1 / d;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            int l = clampi(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 15);
            sas[ib] |= (uint32_t)l << 28;
        }
        memcpy(y[ibl].qs + QK_K / 4, sas, sizeof sas);
    }
}

void ht_ref_iq3_xxs_from_float(const float *x, void *vy, int64_t n) { iq3_xxs_quantize(x, vy, n, NULL); }
static void iq3_xxs_weighted(const float *x, void *vy, int64_t n, const float *qw) { iq3_xxs_quantize(x, vy, n, qw); }

/* ---- IQ2_S ---- */

static void iq2_s_quantize(const float *x, void *vy, int64_t n, const float *qw) {
    pthread_once(&once2, build2);
    block_iq2_s *y = vy;
    const iq_params p = { &search2, 16, 3, 9, 0.1f, true, true };
    for (int64_t ibl = 0; ibl < n / QK_K; ibl++) {
        memset(&y[ibl], 0, sizeof y[ibl]);
        if (!search2.ok) continue;
        const float *xbl = x + QK_K * ibl;
        const float sigma2 = super_sigma2(xbl);
        float scales[QK_K / 16], max_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ib++) {
            const float *xb = xbl + 16 * ib;
            float weight[16], xval[16];
            int8_t L[16];
            uint8_t signs[2];
            sub_weights(xb, 16, qw ? qw + QK_K * ibl + 16 * ib : NULL, sigma2, 0.25f, weight);
            split_signs(xb, 16, xval, signs);
            float max = xval[0];
            for (int i = 1; i < 16; i++) max = fmaxf(max, xval[i]);
            memset(L, 0, sizeof L);
            if (max < 1e-8f) {   /* ggml's GROUP_MAX_EPS_IQ2_S: the sub-block stays all zero */
                scales[ib] = 0;
                continue;
            }
            float scale = search_subblock(&p, xval, weight, max, L);
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 2; k++) signs[k] = (uint8_t)~signs[k];
            }
            for (int k = 0; k < 2; k++) {
                const int gi = search2.map[pack_levels(&search2, L + 8 * k)], i8 = 2 * ib + k;
                y[ibl].qs[i8] = (uint8_t)(gi & 255);
                y[ibl].qh[i8 / 4] |= (uint8_t)((gi >> 8) << 2 * (i8 % 4));
                y[ibl].qs[QK_K / 8 + i8] = signs[k];
            }
            scales[ib] = scale;
            max_scale = fmaxf(max_scale, scale);
        }
        if (!max_scale) continue;
        float d = max_scale / 31;
        y[ibl].d = f32_to_fp16(d * 0.9875f);
        float id = 1 / d;
        for (int ib = 0; ib < QK_K / 16; ib++) {
            int l = clampi(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 15);
            y[ibl].scales[ib / 2] |= (uint8_t)(l << 4 * (ib % 2));
        }
    }
}

void ht_ref_iq2_s_from_float(const float *x, void *vy, int64_t n) { iq2_s_quantize(x, vy, n, NULL); }
static void iq2_s_weighted(const float *x, void *vy, int64_t n, const float *qw) { iq2_s_quantize(x, vy, n, qw); }

/* ---- with an importance matrix ---- */

/* Weighted fit of levels L (magnitudes 2l + 1) to xval: the scale sumqx / sumq2, and sumqx, sumq2. */
static void fit_levels(int n, const float *xval, const float *weight, const int8_t *L, float *sumqx, float *sumq2) {
    float a = 0, b = 0;
    for (int i = 0; i < n; i++) {
        float w = weight[i];
        float q = 2 * L[i] + 1;
        a += w * xval[i] * q;
        b += w * q * q;
    }
    *sumqx = a;
    *sumq2 = b;
}

/* Rounds each group of 8 of xval at 1/id to levels 0..2 (into L), a group off the grid to its best neighbour
 * at scale. */
static void round_groups_iq2(const iq_search *s, const float *xval, const float *waux, float id, float scale, int8_t *L) {
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < 8; i++) L[8 * k + i] = (int8_t)clampi(nearest_int(0.5f * (id * xval[8 * k + i] - 1)), 0, 2);
        const int u = pack_levels(s, L + 8 * k);
        if (s->map[u] < 0) best_neighbour(s, u, xval + 8 * k, waux + 8 * k, scale, L + 8 * k);
    }
}

/* IQ2_XXS (ggml's quantize_row_iq2_xxs_impl): per 32 values weights qw * sqrt(sigma2 + x^2), even sign
 * parity per 8, a first scale by make_qp_quants, then 13 trial scales around it with grid snapping, the best
 * fit re-rounded; 4-bit sub-block scales of the super-block's max / 31. */
void ht_ref_iq2_xxs_quantize(const float *x, void *vy, int64_t n, const float *quant_weights) {
    pthread_once(&once2xxs, build2xxs);
    const iq_search *s = &search2xxs;
    block_iq2_xxs *y = vy;
    const int kMaxQ = 3;
    for (int64_t ibl = 0; ibl < n / QK_K; ibl++) {
        memset(&y[ibl], 0, sizeof y[ibl]);
        if (!s->ok) continue;
        uint32_t q2[2 * (QK_K / 32)] = {0};
        float scales[QK_K / 32], max_scale = 0;
        const float *xbl = x + QK_K * ibl;
        float sumx2 = 0;
        for (int i = 0; i < QK_K; i++) sumx2 += xbl[i] * xbl[i];
        float sigma2 = sumx2 / QK_K;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const float *xb = xbl + 32 * ib, *qw = quant_weights + QK_K * ibl + 32 * ib;
            float weight[32], waux[32], xval[32];
            int8_t L[32], Laux[32];
            uint8_t signs[4];
            for (int i = 0; i < 32; i++) weight[i] = qw[i] * sqrtf(sigma2 + xb[i] * xb[i]);
            for (int i = 0; i < 32; i++) waux[i] = sqrtf(weight[i]);
            split_signs_even(xb, weight, xval, signs, 32);
            float max = xval[0];
            for (int i = 1; i < 32; i++) max = fmaxf(max, xval[i]);
            scales[ib] = 0;
            if (max < 1e-15f) continue;
            float scale = ht_make_qp_quants(32, kMaxQ + 1, xval, (uint8_t *)L, weight);
            float eff_max = scale * kMaxQ;
            if (eff_max <= 0) continue;
            float best = 0, sumqx, sumq2;
            for (int is = -6; is <= 6; ++is) {
                float id = (2 * kMaxQ - 1 + is * 0.1f) / eff_max;
                round_groups_iq2(s, xval, waux, id, 1 / id, Laux);
                fit_levels(32, xval, weight, Laux, &sumqx, &sumq2);
                if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    memcpy(L, Laux, 32);
                }
            }
            if (scale > 0) {
                round_groups_iq2(s, xval, waux, 1 / scale, scale, L);
                fit_levels(32, xval, weight, L, &sumqx, &sumq2);
                if (sumq2 > 0) scale = sumqx / sumq2;
            }
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 4; k++) signs[k] = (uint8_t)(~signs[k] & 127);
            }
            for (int k = 0; k < 4; k++) {
                const int gi = s->map[pack_levels(s, L + 8 * k)];
                q2[2 * ib] |= (uint32_t)gi << 8 * k;
                q2[2 * ib + 1] |= (uint32_t)signs[k] << 7 * k;
            }
            scales[ib] = scale;
            max_scale = fmaxf(max_scale, scale);
        }
        if (!max_scale) continue;
        float d = max_scale / 31;
        y[ibl].d = f32_to_fp16(d);
        float id = 1 / d;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            int l = clampi(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 15);
            q2[2 * ib + 1] |= (uint32_t)l << 28;
        }
        memcpy(y[ibl].qs, q2, sizeof q2);
    }
}

/* IQ2_XS (ggml's quantize_row_iq2_xs_impl): IQ2_S's search over 16 values with the 512-point grid, even sign
 * parity per 8 (7 sign bits beside each 9-bit index), weights qw * sqrt(sigma2 + x^2) with sigma2 the mean square. */
static void iq2_xs_weighted(const float *x, void *vy, int64_t n, const float *quant_weights) {
    pthread_once(&once2xs, build2xs);
    block_iq2_xs *y = vy;
    const iq_params p = { &search2xs, 16, 3, 9, 0.1f, true, true };
    for (int64_t ibl = 0; ibl < n / QK_K; ibl++) {
        memset(&y[ibl], 0, sizeof y[ibl]);
        if (!search2xs.ok) continue;
        const float *xbl = x + QK_K * ibl;
        const float sigma2 = super_sigma2(xbl) / 2;
        float scales[QK_K / 16], max_scale = 0;
        uint16_t q2[2 * (QK_K / 16)] = {0};
        for (int ib = 0; ib < QK_K / 16; ib++) {
            const float *xb = xbl + 16 * ib;
            float weight[16], xval[16];
            int8_t L[16];
            uint8_t signs[2];
            sub_weights(xb, 16, quant_weights + QK_K * ibl + 16 * ib, sigma2, 0, weight);
            split_signs_even(xb, weight, xval, signs, 16);
            float max = xval[0];
            for (int i = 1; i < 16; i++) max = fmaxf(max, xval[i]);
            memset(L, 0, sizeof L);
            scales[ib] = 0;
            if (max < 1e-15f) continue;
            float scale = search_subblock(&p, xval, weight, max, L);
            if (scale < 0) {
                scale = -scale;
                for (int k = 0; k < 2; k++) signs[k] = (uint8_t)(~signs[k] & 127);
            }
            for (int k = 0; k < 2; k++)
                q2[2 * ib + k] = (uint16_t)(search2xs.map[pack_levels(&search2xs, L + 8 * k)] | signs[k] << 9);
            scales[ib] = scale;
            max_scale = fmaxf(max_scale, scale);
        }
        if (!max_scale) continue;
        float d = max_scale / 31;
        y[ibl].d = f32_to_fp16(d);
        float id = 1 / d;
        for (int ib = 0; ib < QK_K / 16; ib++) {
            int l = clampi(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 15);
            y[ibl].scales[ib / 2] |= (uint8_t)(l << 4 * (ib % 2));
        }
        memcpy(y[ibl].qs, q2, sizeof q2);
    }
}

ht_quantize_weighted_fn ht_ref_quantize_weighted(uint32_t type) {
    switch (type) {
    case HT_IQ2_XXS: return ht_ref_iq2_xxs_quantize;
    case HT_IQ2_S: return iq2_s_weighted;
    case HT_IQ2_XS: return iq2_xs_weighted;
    case HT_IQ4_NL: return ht_ref_iq4_nl_weighted;
    case HT_IQ4_XS: return ht_ref_iq4_xs_weighted;
    case HT_Q6_K: return ht_ref_q6_K_weighted;
    case HT_Q5_K: return ht_ref_q5_K_weighted;
    case HT_Q4_K: return ht_ref_q4_K_weighted;
    case HT_IQ3_XXS: return iq3_xxs_weighted;
    case HT_IQ3_S: return iq3_s_weighted;
    default: return NULL;
    }
}

bool ht_ref_requires_imatrix(uint32_t type) {
    return type == HT_IQ2_XXS || type == HT_IQ2_XS || type == HT_IQ1_S || type == HT_IQ1_M;
}
