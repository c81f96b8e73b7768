/* ops.c — the shared layers (see ops.h) in plain C that the compiler vectorizes (-O3, no contraction; on
 * x86-64 cloned per vector width). Sums that decide accuracy (norm statistics, softmax) run over 16 fixed
 * float lanes flushed to double, so a row's result depends on its values and length only. */
#include "compute/ops.h"
#include "common.h"
#include "quant/quant.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The loops below that vectorize are compiled once per x86-64 vector width and picked per call: the width of
 * the quant kernel set in use (ops_set_isa), or the CPU's best before one is chosen (the results are the same
 * in each: no contraction, the same operations in every lane). GCC's target_clones would do this, but its
 * dispatchers escape the library's hidden visibility. OPS_SIMD(name, params, args) defines the public name
 * over name##_body, an always-inline function. */
#define OPS_INLINE static inline __attribute__((always_inline))
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
static _Atomic int ops_isa = -1;   /* 2: AVX-512, 1: AVX2, 0: the build's baseline; -1: not chosen yet */

void ops_set_isa(const char *kernel_set) {
    atomic_store_explicit(&ops_isa, strstr(kernel_set, "avx512") ? 2 : !strcmp(kernel_set, "avx2") ? 1 : 0,
                          memory_order_relaxed);
}

static int ops_level(void) {
    const int l = atomic_load_explicit(&ops_isa, memory_order_relaxed);
    return l >= 0 ? l : __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
}

#define OPS_SIMD(name, params, args)                                                                   \
    __attribute__((target("avx512f"))) static void name##_avx512 params { name##_body args; }        \
    __attribute__((target("avx2"))) static void name##_avx2 params { name##_body args; }             \
    void name params {                                                                                 \
        const int l = ops_level();                                                                     \
        if (l == 2) name##_avx512 args;                                                                \
        else if (l == 1) name##_avx2 args;                                                             \
        else name##_body args;                                                                         \
    }
#else
void ops_set_isa(const char *kernel_set) { (void)kernel_set; }
#define OPS_SIMD(name, params, args) void name params { name##_body args; }
#endif

/* 16 float lanes (GCC's vector types: plain C loops with a float sum or a max do not vectorize without
 * reassociation); each target lowers them to what it has. */
typedef float ops_vf __attribute__((vector_size(64)));
typedef float ops_vf8 __attribute__((vector_size(32)));
typedef int32_t ops_vi8 __attribute__((vector_size(32)));

/* Sum of squares, the lanes flushed to double every 256 elements. */
OPS_INLINE double sum_squares(const float *x, int n) {
    double s = 0;
    int i = 0;
    while (i + 16 <= n) {
        ops_vf acc = {0};
        for (int k = 0; k < 16 && i + 16 <= n; k++, i += 16) {
            ops_vf v;
            memcpy(&v, x + i, sizeof v);
            acc += v * v;
        }
        for (int l = 0; l < 16; l++) s += acc[l];
    }
    for (; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

OPS_INLINE void op_rmsnorm_body(float *out, const float *x, const float *w, int n, float eps) {
    const double ss = sum_squares(x, n);
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    if (w) for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
    else for (int i = 0; i < n; i++) out[i] = x[i] * scale;
}
OPS_SIMD(op_rmsnorm, (float *out, const float *x, const float *w, int n, float eps), (out, x, w, n, eps))

void op_layernorm(float *out, const float *x, const float *w, const float *b, int n, float eps) {
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) { double d = x[i] - mean; var += d * d; }
    var /= n;
    float scale = (float)(1.0 / sqrt(var + eps)), fm = (float)mean;
    for (int i = 0; i < n; i++) {
        float y = (x[i] - fm) * scale;
        if (w) y *= w[i];
        if (b) y += b[i];
        out[i] = y;
    }
}

/* YaRN's correction range: the pair index at which a rotation makes n_turns turns over n_ctx_orig positions is
 * n_rot ln(n_ctx_orig / (2 pi n_turns)) / (2 ln base); pairs below the one for beta_fast turns keep their
 * frequency, pairs past the one for beta_slow are interpolated (as the reference's ggml_rope_yarn_corr_dims). */
static float yarn_corr_dim(int n_rot, int n_ctx_orig, float n_turns, float base) {
    return (float)n_rot * logf((float)n_ctx_orig / (n_turns * 2.0f * 3.14159265358979f)) / (2.0f * logf(base));
}

void op_rope_yarn_dims(int n_rot, int n_ctx_orig, float base, float beta_fast, float beta_slow, float dims[2]) {
    dims[0] = fmaxf(0.0f, floorf(yarn_corr_dim(n_rot, n_ctx_orig, beta_fast, base)));
    dims[1] = fminf((float)(n_rot - 1), ceilf(yarn_corr_dim(n_rot, n_ctx_orig, beta_slow, base)));
}

void op_rope_table(float *cosv, float *sinv, int pos, int n_rot, float base, float scale, const float *ff,
                   const float *yarn) {
    for (int i = 0; i < n_rot / 2; i++) {
        double theta = (double)pos / scale * pow((double)base, -2.0 * i / n_rot);
        if (ff) theta /= ff[i];
        if (yarn) {   /* the unscaled angle up to yarn[0], the interpolated one from yarn[1], a ramp (x yarn[2]) between */
            double ext = (double)pos * pow((double)base, -2.0 * i / n_rot);
            if (ff) ext /= ff[i];
            const float y = ((float)i - yarn[0]) / fmaxf(0.001f, yarn[1] - yarn[0]);
            const double keep = (1.0 - fmin(1.0, fmax(0.0, (double)y))) * yarn[2];
            theta = theta * (1.0 - keep) + ext * keep;
        }
        cosv[i] = (float)cos(theta);
        sinv[i] = (float)sin(theta);
    }
}

void op_rope(float *x, int n_heads, int head_dim, int n_rot, const float *cosv, const float *sinv, int neox) {
    int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
            float x0 = v[a], x1 = v[b];
            v[a] = x0 * cosv[i] - x1 * sinv[i];
            v[b] = x0 * sinv[i] + x1 * cosv[i];
        }
    }
}

/* exp(x) for the activations: Cephes' expf (x = k ln 2 + r, a degree-5 polynomial in r, about 1 ulp), in
 * plain float operations so that the loops below vectorize. This file is built with -ffp-contract=off
 * (CMakeLists.txt): the vector body and the scalar tail then round alike, and an element's value does not
 * depend on where a thread's share of a row starts. Below -87 the result is 0 (2^k would not be normal),
 * above 88 infinite (so x sigmoid(x) is 0 for x very negative, not x / e^88). */
OPS_INLINE float exp_act(float x0) {
    float x = x0 >= -87.0f ? x0 : -87.0f;   /* NaN too: computed on -87, returned as NaN */
    x = x > 88.0f ? 88.0f : x;
    const float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;   /* round(x / ln 2) */
    const float r = (x - k * 0.693359375f) + k * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const uint32_t e = (uint32_t)((int32_t)k + 127) << 23;   /* k in [-126, 127] */
    float s;
    memcpy(&s, &e, sizeof s);
    return x0 > 88.0f ? INFINITY : x0 >= -87.0f ? p * s : x0 < -87.0f ? 0.0f : x0;
}

/* silu(x) = x * sigmoid(x); gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3):
 * one exp and one division each, well conditioned everywhere (no 1 + tanh cancellation). */
OPS_INLINE float silu1(float x) { return x / (1.0f + exp_act(-x)); }
OPS_INLINE float gelu_tanh1(float x) {
    const float u2 = 1.5957691216057308f * (x + 0.044715f * x * x * x);   /* 2 sqrt(2/pi) */
    return x / (1.0f + exp_act(-u2));
}

OPS_INLINE void op_silu_body(float *x, int n) { for (int i = 0; i < n; i++) x[i] = silu1(x[i]); }
OPS_INLINE void op_silu_mul_body(float *g, const float *u, int n) { for (int i = 0; i < n; i++) g[i] = silu1(g[i]) * u[i]; }
OPS_INLINE void op_gelu_tanh_mul_body(float *g, const float *u, int n) { for (int i = 0; i < n; i++) g[i] = gelu_tanh1(g[i]) * u[i]; }
OPS_INLINE void op_gelu_tanh_body(float *x, int n) { for (int i = 0; i < n; i++) x[i] = gelu_tanh1(x[i]); }
OPS_SIMD(op_silu, (float *x, int n), (x, n))
OPS_SIMD(op_silu_mul, (float *g, const float *u, int n), (g, u, n))
OPS_SIMD(op_gelu_tanh_mul, (float *g, const float *u, int n), (g, u, n))
OPS_SIMD(op_gelu_tanh, (float *x, int n), (x, n))
/* cap tanh(x / cap) (Gemma's final logit softcap): Cephes' tanhf (an odd polynomial below |y| 0.625, 1 - 2 / (1 +
 * e^2|y|) above, about 2 ulp) on exp_act, so the loop vectorizes; both sides are computed and one kept. */
OPS_INLINE float softcap1(float x, float cap, float inv) {
    const float y = x * inv, a = fabsf(y), z = y * y;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    const float small = y + y * z * p, big = 1.0f - 2.0f / (1.0f + exp_act(2.0f * a));
    return cap * (a < 0.625f ? small : y < 0 ? -big : big);
}
OPS_INLINE void op_softcap_body(float *x, int n, float cap) {
    const float inv = 1.0f / cap;
    for (int i = 0; i < n; i++) x[i] = softcap1(x[i], cap, inv);
}
OPS_SIMD(op_softcap, (float *x, int n, float cap), (x, n, cap))
/* gpt-oss's experts (the reference's swiglu_oai, whose constants are fixed there too): the gate clamped from
 * above, up clamped both ways, g sigmoid(1.702 g) (u + 1). */
#define SWIGLU_OAI_ALPHA 1.702f
#define SWIGLU_OAI_LIMIT 7.0f
OPS_INLINE void op_swiglu_oai_body(float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) {
        const float x = g[i] < SWIGLU_OAI_LIMIT ? g[i] : SWIGLU_OAI_LIMIT;
        float y = u[i] < SWIGLU_OAI_LIMIT ? u[i] : SWIGLU_OAI_LIMIT;
        y = y > -SWIGLU_OAI_LIMIT ? y : -SWIGLU_OAI_LIMIT;
        g[i] = x / (1.0f + exp_act(-SWIGLU_OAI_ALPHA * x)) * (y + 1.0f);
    }
}
OPS_SIMD(op_swiglu_oai, (float *g, const float *u, int n), (g, u, n))
void op_gelu_erf(float *x, int n) { for (int i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f)); }
void op_add(float *y, const float *x, int n) { for (int i = 0; i < n; i++) y[i] += x[i]; }
void op_scale(float *y, float s, int n) { for (int i = 0; i < n; i++) y[i] *= s; }

OPS_INLINE void op_kv_rows_to_float_body(uint32_t type, const uint8_t *const *rows, int m, float *y, int n) {
    for (int r = 0; r < m; r++, y += n) {
        if (type == HT_Q8_0) {
            const block_q8_0 *b = (const block_q8_0 *)rows[r];
            for (int i = 0; i < n / QK8_0; i++) {
                const float d = fp16_to_f32(b[i].d);
                for (int k = 0; k < QK8_0; k++) y[i * QK8_0 + k] = (float)b[i].qs[k] * d;
            }
        } else if (type == HT_Q4_0) {
            const block_q4_0 *b = (const block_q4_0 *)rows[r];
            for (int i = 0; i < n / QK4_0; i++) {
                const float d = fp16_to_f32(b[i].d);
                for (int k = 0; k < QK4_0 / 2; k++) {
                    y[i * QK4_0 + k] = (float)((b[i].qs[k] & 0x0F) - 8) * d;
                    y[i * QK4_0 + QK4_0 / 2 + k] = (float)((b[i].qs[k] >> 4) - 8) * d;
                }
            }
        } else {   /* HT_BF16 */
            const uint16_t *h = (const uint16_t *)rows[r];
            for (int k = 0; k < n; k++) {
                const uint32_t bits = (uint32_t)h[k] << 16;
                memcpy(y + k, &bits, sizeof bits);
            }
        }
    }
}
OPS_SIMD(op_kv_rows_to_float, (uint32_t type, const uint8_t *const *rows, int m, float *y, int n), (type, rows, m, y, n))

OPS_INLINE void op_pv_add_body(float *o, size_t os, int per, int nc, const float *v, int m, int n, const float *p, size_t ld) {
    for (int c = 0; c < nc; c++) {
        float *restrict oc = o + (size_t)(c / per) * os + (size_t)(c % per) * n;
        const float *w = p + (size_t)c * ld;
        int r = 0;
        for (; r + 4 <= m; r += 4) {
            const float w0 = w[r], w1 = w[r + 1], w2 = w[r + 2], w3 = w[r + 3];
            const float *restrict v0 = v + (size_t)r * n, *restrict v1 = v0 + n, *restrict v2 = v1 + n, *restrict v3 = v2 + n;
            for (int k = 0; k < n; k++) oc[k] = oc[k] + w0 * v0[k] + w1 * v1[k] + w2 * v2[k] + w3 * v3[k];
        }
        for (; r < m; r++) {
            const float wr = w[r], *restrict vr = v + (size_t)r * n;
            for (int k = 0; k < n; k++) oc[k] = oc[k] + wr * vr[k];
        }
    }
}
OPS_SIMD(op_pv_add, (float *o, size_t os, int per, int nc, const float *v, int m, int n, const float *p, size_t ld),
         (o, os, per, nc, v, m, n, p, ld))

void op_hadamard(float *x, int n) {
    op_scale(x, 1.0f / sqrtf((float)n), n);
    for (int len = 1; len < n; len <<= 1)
        for (int i = 0; i < n; i += 2 * len)
            for (int j = i; j < i + len; j++) {
                const float u = x[j], v = x[j + len];
                x[j] = u + v;
                x[j + len] = u - v;
            }
}
float op_dot(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* The recurrent layers' vector steps (model/recurrent.c): every lane does the same operations in the same order
 * at every width, so the results do not depend on it. */
OPS_INLINE void op_axpy_body(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}
OPS_SIMD(op_axpy, (float *y, float a, const float *x, int n), (y, a, x, n))

/* Products in 16 lanes (element i in lane i % 16), the lanes then added pairwise: 8, 4, 2, 1. */
OPS_INLINE void op_dot_lanes_to_body(float *out, const float *a, const float *b, int n) {
    ops_vf acc = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        ops_vf x, y;
        memcpy(&x, a + i, sizeof x);
        memcpy(&y, b + i, sizeof y);
        acc += x * y;
    }
    float t[16];
    memcpy(t, &acc, sizeof t);
    for (; i < n; i++) t[i % 16] += a[i] * b[i];
    for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; l++) t[l] += t[l + w];
    *out = t[0];
}
OPS_SIMD(op_dot_lanes_to, (float *out, const float *a, const float *b, int n), (out, a, b, n))
float op_dot_lanes(const float *a, const float *b, int n) {
    float s;
    op_dot_lanes_to(&s, a, b, n);
    return s;
}

/* op_dot_lanes of R rows of x by 4 rows of w, each of the 4R sums with op_dot_lanes's own operations (so its
 * bits); x and w are loaded once for 4 (R) products each. */
OPS_INLINE void dot_lanes_rx4(float *t, size_t ts, const float *x, size_t xs, const float *w, size_t ws, int n, const int R) {
    ops_vf acc[4][4];
    memset(acc, 0, sizeof acc);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        ops_vf xv[4], wv[4];
        for (int r = 0; r < R; r++) memcpy(&xv[r], x + r * xs + i, sizeof xv[r]);
        for (int k = 0; k < 4; k++) memcpy(&wv[k], w + k * ws + i, sizeof wv[k]);
        for (int r = 0; r < R; r++)
            for (int k = 0; k < 4; k++) acc[r][k] += wv[k] * xv[r];
    }
    for (int r = 0; r < R; r++)
        for (int k = 0; k < 4; k++) {
            float l[16];
            memcpy(l, &acc[r][k], sizeof l);
            for (int j = i; j < n; j++) l[j % 16] += w[k * ws + j] * x[r * xs + j];
            for (int v = 8; v >= 1; v /= 2)
                for (int q = 0; q < v; q++) l[q] += l[q + v];
            t[r * ts + k] = l[0];
        }
}
OPS_INLINE void op_dot_lanes_x4_body(float *t, size_t ts, const float *x, size_t xs, int nr, const float *w, size_t ws, int n) {
    switch (nr) {
    case 4: dot_lanes_rx4(t, ts, x, xs, w, ws, n, 4); break;
    case 3: dot_lanes_rx4(t, ts, x, xs, w, ws, n, 3); break;
    case 2: dot_lanes_rx4(t, ts, x, xs, w, ws, n, 2); break;
    default: dot_lanes_rx4(t, ts, x, xs, w, ws, n, 1); break;
    }
}
OPS_SIMD(op_dot_lanes_x4, (float *t, size_t ts, const float *x, size_t xs, int nr, const float *w, size_t ws, int n),
         (t, ts, x, xs, nr, w, ws, n))

/* y[i] += a[0] * b[i], then += a[1] * b[bs + i], ... a[m-1] (op_axpy's operations, in that order), with y in
 * registers across the m terms, four vectors of it at a time (four chains of additions in flight, not one). */
OPS_INLINE void op_axpy_m_body(float *y, const float *a, const float *b, size_t bs, int m, int n) {
    int i = 0;
    for (; i + 64 <= n; i += 64) {   /* (named vectors: arrays of them go through the stack) */
        ops_vf v0, v1, v2, v3;
        memcpy(&v0, y + i, sizeof v0);
        memcpy(&v1, y + i + 16, sizeof v1);
        memcpy(&v2, y + i + 32, sizeof v2);
        memcpy(&v3, y + i + 48, sizeof v3);
        for (int k = 0; k < m; k++) {
            const float *bk = b + k * bs + i;
            ops_vf b0, b1, b2, b3;
            memcpy(&b0, bk, sizeof b0);
            memcpy(&b1, bk + 16, sizeof b1);
            memcpy(&b2, bk + 32, sizeof b2);
            memcpy(&b3, bk + 48, sizeof b3);
            v0 += a[k] * b0;
            v1 += a[k] * b1;
            v2 += a[k] * b2;
            v3 += a[k] * b3;
        }
        memcpy(y + i, &v0, sizeof v0);
        memcpy(y + i + 16, &v1, sizeof v1);
        memcpy(y + i + 32, &v2, sizeof v2);
        memcpy(y + i + 48, &v3, sizeof v3);
    }
    for (; i + 16 <= n; i += 16) {
        ops_vf v, bv;
        memcpy(&v, y + i, sizeof v);
        for (int k = 0; k < m; k++) {
            memcpy(&bv, b + k * bs + i, sizeof bv);
            v += a[k] * bv;
        }
        memcpy(y + i, &v, sizeof v);
    }
    for (; i < n; i++)
        for (int k = 0; k < m; k++) y[i] += a[k] * b[k * bs + i];
}
OPS_SIMD(op_axpy_m, (float *y, const float *a, const float *b, size_t bs, int m, int n), (y, a, b, bs, m, n))

/* Columns 64 at a time with a and b in registers over all the rows (the same products and sums, in the same
 * order, as row by row through memory), and M prefetched MV2_AHEAD rows ahead: M (a Gated DeltaNet state, 64 KB
 * a head) comes from DRAM, and the hardware prefetchers stop at every 4 KB page, eight of its rows. */
#define MV2_AHEAD 16
OPS_INLINE void op_matvec2_t_body(float *a, float *b, const float *M, const float *x, const float *y, int rows, int n) {
    int i = 0;
    for (; i + 64 <= n; i += 64) {   /* (named vectors: arrays of them go through the stack) */
        ops_vf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
        for (int r = 0; r < rows; r++) {
            const float *m = M + (size_t)r * n + i, xr = x[r], yr = y[r];
            if (r + MV2_AHEAD < rows)
                for (int l = 0; l < 64; l += 16) __builtin_prefetch(m + (size_t)MV2_AHEAD * n + l);
            ops_vf m0, m1, m2, m3;
            memcpy(&m0, m, sizeof m0);
            memcpy(&m1, m + 16, sizeof m1);
            memcpy(&m2, m + 32, sizeof m2);
            memcpy(&m3, m + 48, sizeof m3);
            a0 += xr * m0, a1 += xr * m1, a2 += xr * m2, a3 += xr * m3;
            b0 += yr * m0, b1 += yr * m1, b2 += yr * m2, b3 += yr * m3;
        }
        memcpy(a + i, &a0, sizeof a0), memcpy(a + i + 16, &a1, sizeof a1);
        memcpy(a + i + 32, &a2, sizeof a2), memcpy(a + i + 48, &a3, sizeof a3);
        memcpy(b + i, &b0, sizeof b0), memcpy(b + i + 16, &b1, sizeof b1);
        memcpy(b + i + 32, &b2, sizeof b2), memcpy(b + i + 48, &b3, sizeof b3);
    }
    for (int k = i; k < n; k++) a[k] = b[k] = 0;
    for (int r = 0; i < n && r < rows; r++) {
        const float *m = M + (size_t)r * n, xr = x[r], yr = y[r];
        for (int k = i; k < n; k++) {
            a[k] += xr * m[k];
            b[k] += yr * m[k];
        }
    }
}
OPS_SIMD(op_matvec2_t, (float *a, float *b, const float *M, const float *x, const float *y, int rows, int n),
         (a, b, M, x, y, rows, n))

/* The max over the 16 lanes; the sum through float lanes for 256 elements at a time, then double. */
#define SM_LANES 16

/* The running max as a bit select of each lane (the same lane for lane as v > m ? v : m), in two vectors of 8:
 * on 16-lane vectors GCC's AVX2 code went through the stack lane by lane, half of softmax's time. */
OPS_INLINE void max8(ops_vf8 *m, const float *x) {
    ops_vf8 v;
    memcpy(&v, x, sizeof v);
    const ops_vi8 gt = v > *m;
    *m = (ops_vf8)(((ops_vi8)v & gt) | ((ops_vi8)*m & ~gt));
}

/* x = softmax(scale * x), with a sink (has_sink): one more logit counted in the max and the denominator only. */
OPS_INLINE void softmax_row(float *x, int n, float scale, bool has_sink, float sink) {
    ops_vf8 m[2] = {{0}, {0}};
    m[0] -= INFINITY, m[1] -= INFINITY;
    int i = 0;
    for (; i + SM_LANES <= n; i += SM_LANES)
        for (int h = 0; h < 2; h++) {
            ops_vf8 v;
            memcpy(&v, x + i + 8 * h, sizeof v);
            v *= scale;
            memcpy(x + i + 8 * h, &v, sizeof v);
            max8(&m[h], x + i + 8 * h);
        }
    float mx = -INFINITY;
    for (int l = 0; l < SM_LANES; l++) mx = m[l / 8][l % 8] > mx ? m[l / 8][l % 8] : mx;
    for (; i < n; i++) {
        x[i] *= scale;
        mx = x[i] > mx ? x[i] : mx;
    }
    if (has_sink) mx = sink > mx ? sink : mx;
    for (i = 0; i < n; i++) x[i] = exp_act(x[i] - mx);
    double s[SM_LANES] = {0}, sum = 0;
    for (i = 0; i + SM_LANES <= n;) {
        ops_vf acc = {0};
        for (int k = 0; k < 16 && i + SM_LANES <= n; k++, i += SM_LANES) {
            ops_vf v;
            memcpy(&v, x + i, sizeof v);
            acc += v;
        }
        for (int l = 0; l < SM_LANES; l++) s[l] += acc[l];
    }
    for (int l = 0; l < SM_LANES; l++) sum += s[l];
    for (; i < n; i++) sum += x[i];
    if (has_sink) sum += exp_act(sink - mx);
    const float inv = (float)(1.0 / sum);
    for (i = 0; i < n; i++) x[i] *= inv;
}
OPS_INLINE void op_softmax_body(float *x, int n, float scale) { softmax_row(x, n, scale, false, 0.0f); }
OPS_INLINE void op_softmax_sink_body(float *x, int n, float scale, float sink) { softmax_row(x, n, scale, true, sink); }
OPS_SIMD(op_softmax, (float *x, int n, float scale), (x, n, scale))
OPS_SIMD(op_softmax_sink, (float *x, int n, float scale, float sink), (x, n, scale, sink))
