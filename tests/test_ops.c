/* test_ops.c — the vectorized activations (silu, gelu_tanh, with and without the gated product, gpt-oss's clamped
 * SwiGLU) and the softmax (with and without an attention sink) against the formulas in double precision, and their
 * vector loop against their scalar tail: an element's value must not depend on where in a row it falls (thread
 * shares split rows at arbitrary points); every vector width the CPU runs gives the same bits; and YaRN's rope
 * table keeps the fast pairs' angles and interpolates the slow ones'. The KV cache's row kernels: Q8_0, Q4_0 and
 * BF16 rows to float give the scalar reference to_float's bits, and softmax·V's accumulation gives the same bits
 * in every vector width and however its rows are grouped into calls, within 1e-6 of the sum in double. LoRA's
 * op_axpy_m gives the bits of op_axpy term after term; Gemma's logit softcap is within 4 ulp of cap tanh(x / cap); op_matvec2_t (the Gated DeltaNet state's read) those of
 * its rows' products summed one row after another. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/ops.h"
#include "quant/quant.h"
#include "testutil.h"

#define N 4099   /* not a multiple of any vector width: every loop has a tail */

/* The argument of the exp each takes, against which the formula is evaluated in double (gelu_tanh's
 * 0.5 x (1 + tanh(u)) as x sigmoid(2u), which does not cancel). The argument's own rounding bounds the
 * relative error: about |arg| ulp for silu, 4 |arg| ulp for gelu's cubic (four roundings). */
static double silu_arg(double x) { return x; }
static double gelu_arg(double x) { return 1.5957691216057308 * (x + 0.044715 * x * x * x); }

/* Values from -20 to 20 on a fine grid plus a few far out, zero and the smallest normals. Where the exp
 * argument passes 88 it is clamped: results below 1e-36 in magnitude count as exact. */
static void inputs(float *x, float *u) {
    for (int i = 0; i < N; i++) {
        x[i] = -20.0f + 40.0f * (float)i / (N - 1);
        u[i] = 0.5f + (float)(i % 7) * 0.25f;
    }
    x[0] = 0.0f; x[1] = -0.0f; x[2] = 1e-38f; x[3] = -1e-38f; x[4] = 1e-20f;
    x[5] = 90.0f; x[6] = -90.0f; x[7] = 1e30f; x[8] = -1e30f; x[9] = 1e-7f;
}

typedef void (*act_fn)(float *, int);
typedef void (*glu_fn)(float *, const float *, int);

static void check(const char *name, act_fn act, glu_fn glu, double (*arg)(double), double k) {
    static float x[N], u[N], y[N], one[N];
    inputs(x, u);
    memcpy(y, x, sizeof y);
    if (act) act(y, N);
    else glu(y, u, N);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        /* the scalar tail: the same element alone */
        one[i] = x[i];
        if (act) act(one + i, 1);
        else glu(one + i, u + i, 1);
        CHECK(memcmp(&one[i], &y[i], sizeof(float)) == 0, "%s(%g): %.9g in the vector loop, %.9g alone", name, x[i], y[i], one[i]);
        const double a = arg(x[i]), r = x[i] / (1.0 + exp(-a)) * (act ? 1.0 : u[i]);
        const double err = fabs(y[i] - r) / fmax(fabs(r), 1e-30);
        if (fabs(r) > 1e-30 && err / (4 + k * fabs(a)) > worst) worst = err / (4 + k * fabs(a));
        CHECK(fabs(y[i] - r) <= 1.2e-7 * (4 + k * fmin(fabs(a), 88)) * fabs(r) + 1e-36, "%s(%g) = %.9g, want %.9g", name, x[i], y[i], r);
    }
    /* NaN stays NaN (a broken model is reported, not hidden) */
    float nan_in[3] = {NAN, 1.0f, NAN}, uu[3] = {1, 1, 1};
    if (act) act(nan_in, 3);
    else glu(nan_in, uu, 3);
    CHECK(isnan(nan_in[0]) && isnan(nan_in[2]) && !isnan(nan_in[1]), "%s: NaN not propagated", name);
    printf("%-14s %d values: vector loop == scalar tail; worst relative error %.2e x (4 + %g |exp argument|)\n", name, N, worst, k);
}

/* softmax(scale * x) against double precision, for lengths around the 16 lanes and the 256-element blocks
 * of its sums; a -inf score gets exactly 0. */
static void check_softmax(void) {
    static float x[N];
    static const int lens[] = {1, 2, 15, 16, 17, 255, 256, 257, 1000, N};
    double worst = 0;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
        const int n = lens[li];
        const float scale = 0.125f;
        for (int i = 0; i < n; i++) x[i] = 40.0f * sinf(0.37f * (float)i + (float)n);
        if (n > 3) x[3] = -INFINITY;
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < n; i++) mx = fmax(mx, (double)(x[i] * scale));
        static double ref[N];
        for (int i = 0; i < n; i++) sum += ref[i] = exp((double)(x[i] * scale) - mx);
        op_softmax(x, n, scale);
        double total = 0;
        for (int i = 0; i < n; i++) {
            ref[i] /= sum;
            total += x[i];
            const double err = fabs(x[i] - ref[i]);
            if (ref[i] > 1e-30 && err / ref[i] > worst) worst = err / ref[i];
            CHECK(err <= 2e-6 * ref[i] + 1e-37, "softmax n=%d [%d] = %.9g, want %.9g", n, i, x[i], ref[i]);
        }
        CHECK(n <= 3 || x[3] == 0.0f, "softmax n=%d: a -inf score gave %g", n, x[3]);
        CHECK(fabs(total - 1.0) < 1e-5, "softmax n=%d sums to %.9g", n, total);
    }
    printf("%-14s lengths 1..%d: worst relative error %.2e, -inf -> 0\n", "softmax", N, worst);
}

/* With a sink, p_i = e^(s x_i) / (sum_j e^(s x_j) + e^sink): against double, and a sink of -inf changes no bit. */
static void check_softmax_sink(void) {
    static float x[N], y[N];
    static const int lens[] = {1, 15, 16, 17, 257, N};
    static const float sinks[] = {-3.0f, 0.0f, 2.5f, 40.0f};
    double worst = 0;
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
        for (size_t si = 0; si < sizeof sinks / sizeof *sinks; si++) {
            const int n = lens[li];
            const float scale = 0.125f, sink = sinks[si];
            for (int i = 0; i < n; i++) x[i] = 40.0f * sinf(0.37f * (float)i + (float)n);
            double mx = sink, sum = 0, total = 0;
            for (int i = 0; i < n; i++) mx = fmax(mx, (double)(x[i] * scale));
            for (int i = 0; i < n; i++) sum += exp((double)(x[i] * scale) - mx);
            sum += exp((double)sink - mx);
            memcpy(y, x, (size_t)n * sizeof(float));
            op_softmax_sink(y, n, scale, sink);
            for (int i = 0; i < n; i++) {
                /* exp's argument's rounding: about |arg| ulp, as for the activations */
                const double arg = (double)(x[i] * scale) - mx, r = exp(arg) / sum, err = fabs(y[i] - r);
                total += y[i];
                if (r > 1e-30 && err / r / (4 + fabs(arg)) > worst) worst = err / r / (4 + fabs(arg));
                CHECK(err <= 1.2e-7 * (4 + fabs(arg)) * r + 1e-37, "softmax_sink n=%d sink %g [%d] = %.9g, want %.9g", n, sink, i, y[i], r);
            }
            const double want = 1.0 - exp((double)sink - mx) / sum;
            CHECK(fabs(total - want) < 1e-5, "softmax_sink n=%d sink %g sums to %.9g, want %.9g", n, sink, total, want);
            memcpy(y, x, (size_t)n * sizeof(float));
            op_softmax_sink(y, n, scale, -INFINITY);
            float plain[N];
            memcpy(plain, x, (size_t)n * sizeof(float));
            op_softmax(plain, n, scale);
            CHECK(!memcmp(y, plain, (size_t)n * sizeof(float)), "softmax_sink n=%d: a sink of -inf changed the softmax", n);
        }
    printf("%-14s sinks -3..40: worst relative error %.2e x (4 + |exp argument|); a sink of -inf == softmax\n", "softmax_sink",
           worst);
}

/* g = min(gate, 7), u = clamp(up, -7, 7), g sigmoid(1.702 g) (u + 1): against double over gates and ups that pass the
 * clamps; vector loop == scalar tail; past the clamps the output no longer moves. */
static void check_swiglu_oai(void) {
    static float g[N], u[N], y[N];
    double worst = 0;
    for (int i = 0; i < N; i++) {
        g[i] = -20.0f + 40.0f * (float)i / (N - 1);
        u[i] = -12.0f + 24.0f * (float)((i * 7) % N) / (N - 1);
    }
    memcpy(y, g, sizeof y);
    op_swiglu_oai(y, u, N);
    for (int i = 0; i < N; i++) {
        float one = g[i];
        op_swiglu_oai(&one, u + i, 1);
        CHECK(!memcmp(&one, &y[i], sizeof one), "swiglu_oai(%g, %g): %.9g in the vector loop, %.9g alone", g[i], u[i], y[i], one);
        const double gc = fmin(g[i], 7.0), uc = fmax(-7.0, fmin(u[i], 7.0));
        const double r = gc / (1.0 + exp(-1.702 * gc)) * (uc + 1.0), a = 1.702 * fabs(gc);
        const double err = fabs(y[i] - r);
        if (fabs(r) > 1e-30 && err / fabs(r) / (4 + a) > worst) worst = err / fabs(r) / (4 + a);
        CHECK(err <= 1.2e-7 * (4 + fmin(a, 88)) * fabs(r) + 1e-36, "swiglu_oai(%g, %g) = %.9g, want %.9g", g[i], u[i], y[i], r);
    }
    float gg[4] = {7.0f, 9.5f, 3.0f, 3.0f}, uu[4] = {2.0f, 2.0f, 7.0f, 30.0f};
    op_swiglu_oai(gg, uu, 4);
    CHECK(gg[0] == gg[1], "swiglu_oai: a gate past 7 gave %.9g, at 7 %.9g", gg[1], gg[0]);
    CHECK(gg[2] == gg[3], "swiglu_oai: an up past 7 gave %.9g, at 7 %.9g", gg[3], gg[2]);
    printf("%-14s %d values: vector loop == scalar tail; worst relative error %.2e x (4 + |exp argument|); clamps hold\n",
           "swiglu_oai", N, worst);
}

/* YaRN (gpt-oss: 32 rope dims, base 1.5e5, factor 32, 4096 original positions): the correction range is the pairs
 * whose rotation makes 32 / 1 turns over the original context ([4, 9]); pairs up to its start keep the unscaled
 * angle, pairs from its end take the interpolated one, bit for bit; the angles between lie strictly between. */
static void check_rope_yarn(void) {
    const int n_rot = 32, pos = 1234;
    const float base = 150000.0f, scale = 32.0f;
    float dims[3] = { 0, 0, 1 }, cy[16], sy[16], c1[16], s1[16], cs[16], ss[16];   /* (ext weight 1) */
    op_rope_yarn_dims(n_rot, 4096, base, 32.0f, 1.0f, dims);
    const double lo = n_rot * log(4096 / (32 * 2 * M_PI)) / (2 * log(base)), hi = n_rot * log(4096 / (2 * M_PI)) / (2 * log(base));
    CHECK(dims[0] == (float)floor(lo) && dims[1] == (float)ceil(hi), "yarn dims [%g, %g], want [%g, %g]", dims[0], dims[1],
          floor(lo), ceil(hi));
    op_rope_table(cy, sy, pos, n_rot, base, scale, NULL, dims);
    op_rope_table(c1, s1, pos, n_rot, base, 1.0f, NULL, NULL);
    op_rope_table(cs, ss, pos, n_rot, base, scale, NULL, NULL);
    for (int i = 0; i < n_rot / 2; i++) {
        if (i <= dims[0]) CHECK(cy[i] == c1[i] && sy[i] == s1[i], "yarn pair %d: not the unscaled angle", i);
        else if (i >= dims[1]) CHECK(cy[i] == cs[i] && sy[i] == ss[i], "yarn pair %d: not the interpolated angle", i);
        else {
            const double t = pos * pow(base, -2.0 * i / n_rot), a = atan2(sy[i], cy[i]);
            const double k = 1.0 - (i - dims[0]) / (dims[1] - dims[0]), want = t / scale * (1 - k) + t * k;
            CHECK(fabs(remainder(a - want, 2 * M_PI)) < 1e-5, "yarn pair %d: angle %.9g, want %.9g (mod 2 pi)", i, a, want);
        }
    }
    printf("%-14s correction pairs [%g, %g]: unscaled below, interpolated above, the ramp between\n", "rope_yarn", dims[0], dims[1]);
}

/* The vector widths of ops.c (ops_set_isa: what `--cpu` picks): ISA[k] for the k this CPU runs. */
static const char *const ISA[] = {"scalar", "avx2", "avx512"};
static bool isa_runs(int k) {
#if defined(__x86_64__)
    return k == 0 || (k == 1 && __builtin_cpu_supports("avx2")) || (k == 2 && __builtin_cpu_supports("avx512f"));
#else
    return k == 0;   /* one width elsewhere */
#endif
}

/* Back to the default choice: the widest the machine has. */
static void isa_default(void) {
    ops_set_isa("avx512vnni");   /* clamps below on a machine without it */
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx512f")) ops_set_isa(__builtin_cpu_supports("avx2") ? "avx2" : "scalar");
#endif
}

/* Each vector width the CPU runs (ops_set_isa: what `--cpu` picks) gives the same bits for every op. */
static void check_widths(void) {
    static float x[N], u[N], ref[9][N], got[N];
    int n_run = 0;
    for (int k = 0; k < 3; k++) {
        if (!isa_runs(k)) continue;
        ops_set_isa(ISA[k]);
        for (int op = 0; op < 9; op++) {
            inputs(x, u);
            memcpy(got, x, sizeof got);
            switch (op) {
            case 0: op_silu(got, N); break;
            case 1: op_silu_mul(got, u, N); break;
            case 2: op_gelu_tanh(got, N); break;
            case 3: op_gelu_tanh_mul(got, u, N); break;
            case 4: op_softmax(got, N, 0.125f); break;
            case 6: op_swiglu_oai(got, u, N); break;
            case 7: op_softmax_sink(got, N, 0.125f, 1.5f); break;
            case 8: op_softcap(got, N, 30.0f); break;
            default: op_rmsnorm(got, u, x, N, 1e-6f); break;
            }
            if (!n_run) memcpy(ref[op], got, sizeof got);
            else CHECK(!memcmp(ref[op], got, sizeof got), "op %d: %s gives other bits than %s", op, ISA[k], ISA[0]);
        }
        n_run++;
    }
    isa_default();
    printf("%-14s the same bits in each of %d vector widths (silu, gelu_tanh, gated forms, swiglu_oai, softmax ± sink, rmsnorm, softcap)\n",
           "widths", n_run);
}

/* The KV row kernels in each vector width: dequantized rows against the reference to_float; the accumulation of
 * 7 rows (a call of 4 then one of 3, and seven calls of 1) into 6 outputs of 2 tokens x 3 heads. (Not vectorized:
 * Debian's aarch64-linux-gnu-gcc 12 stops with an internal error vectorizing its sum in double.) */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize")))
#endif
static void check_kv_rows(void) {
    enum { D = 96, M = 7, NC = 6 };
    static const uint32_t types[] = {HT_Q8_0, HT_Q4_0, HT_BF16};
    float x[M * D], y[M * D], want[M * D], p[NC * M], o[NC * D], o1[NC * D], ref[NC * D];
    uint8_t q[M * D * 2];
    int n_run = 0;
    for (int i = 0; i < M * D; i++) x[i] = (float)sin(0.37 * i) * (i % 13 == 0 ? 9.0f : 1.0f);
    for (int i = 0; i < NC * M; i++) p[i] = (float)(0.5 + 0.5 * cos(1.3 * i)) / M;
    for (int k = 0; k < 3; k++) {
        if (!isa_runs(k)) continue;
        ops_set_isa(ISA[k]);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            const ht_traits *tr = ht_get_traits_ref(types[ti]);
            const size_t rs = ht_row_size(types[ti], D);
            const uint8_t *rows[M];
            for (int r = 0; r < M; r++) {
                tr->from_float(x + r * D, q + r * rs, D);
                tr->to_float(q + r * rs, want + r * D, D);
                rows[r] = q + r * rs;
            }
            op_kv_rows_to_float(types[ti], rows, M, y, D);
            CHECK(!memcmp(y, want, sizeof y), "%s rows to float (%s) differ from the reference to_float", tr->name, ISA[k]);
        }
        memset(o, 0, sizeof o), memset(o1, 0, sizeof o1);
        op_pv_add(o, 3 * D, 3, NC, x, 4, D, p, M);
        op_pv_add(o, 3 * D, 3, NC, x + 4 * D, 3, D, p + 4, M);
        for (int r = 0; r < M; r++) op_pv_add(o1, 3 * D, 3, NC, x + r * D, 1, D, p + r, M);
        CHECK(!memcmp(o, o1, sizeof o), "pv_add (%s): rows 4 + 3 and 7 x 1 give other bits", ISA[k]);
        double worst = 0;
        for (int c = 0; c < NC; c++)
            for (int d = 0; d < D; d++) {
                double s = 0;
                for (int r = 0; r < M; r++) s += (double)p[c * M + r] * x[r * D + d];
                worst = fmax(worst, fabs(o[c * D + d] - s));
            }
        CHECK(worst <= 1e-6, "pv_add (%s): %.3g from the sum in double", ISA[k], worst);
        if (!n_run) memcpy(ref, o, sizeof o);
        else CHECK(!memcmp(ref, o, sizeof o), "pv_add: %s gives other bits than %s", ISA[k], ISA[0]);
        n_run++;
    }
    isa_default();
    printf("%-14s Q8_0, Q4_0, BF16 rows as the reference to_float; pv_add the same bits in %d widths and groupings\n",
           "kv rows", n_run);
}

/* op_axpy_m (LoRA's terms: y in registers across the m terms, four vectors at a time) gives the bits of m op_axpy
 * calls in turn, at every vector width and every length (the 64-float loop, the 16-float loop, the scalar tail). */
static void check_axpy_m(void) {
    enum { M = 20, W = 300 };
    static float a[M], b[M * W], y0[W], y[W], ref[W];
    uint32_t seed = 7;
    for (int i = 0; i < M * W; i++) b[i] = (float)((seed = seed * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < W; i++) y0[i] = (float)((seed = seed * 1664525u + 1013904223u) >> 8) / 4194304.0f - 2.0f;
    for (int k = 0; k < M; k++) a[k] = (float)((seed = seed * 1664525u + 1013904223u) >> 8) / 16777216.0f * 0.1f;
    const int ns[] = { 1, 15, 16, 17, 63, 64, 65, 130, 256, 271, W };
    for (int w = 0; w < 3; w++) {
        if (!isa_runs(w)) continue;
        ops_set_isa(ISA[w]);
        for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++)
            for (int m = 1; m <= M; m += 19) {
                const int n = ns[t];
                memcpy(ref, y0, sizeof ref);
                for (int k = 0; k < m; k++) op_axpy(ref, a[k], b + (size_t)k * W, n);
                memcpy(y, y0, sizeof y);
                op_axpy_m(y, a, b, W, m, n);
                CHECK(!memcmp(y, ref, sizeof y), "op_axpy_m (%s, n=%d, m=%d) differs from op_axpy in turn", ISA[w], n, m);
            }
    }
    isa_default();
}

/* op_matvec2_t (64 columns at a time in registers, M prefetched ahead) gives the bits of a = 0; a += x[r] * M[r]
 * row after row (and b with y), at every vector width and for widths with and without a tail. */
static void check_matvec2_t(void) {
    enum { R = 150, W = 200 };
    static float M[R * W], x[R], y[R], a[W], b[W], ra[W], rb[W];
    uint32_t seed = 11;
    for (int i = 0; i < R * W; i++) M[i] = (float)((seed = seed * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    for (int r = 0; r < R; r++) {
        x[r] = (float)((seed = seed * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
        y[r] = (float)((seed = seed * 1664525u + 1013904223u) >> 8) / 4194304.0f - 2.0f;
    }
    const int ns[] = { 1, 17, 64, 65, 128, 130, W }, rs[] = { 1, 16, 17, 128, R };
    for (int w = 0; w < 3; w++) {
        if (!isa_runs(w)) continue;
        ops_set_isa(ISA[w]);
        for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++)
            for (size_t u = 0; u < sizeof rs / sizeof rs[0]; u++) {
                const int n = ns[t], rows = rs[u];
                for (int i = 0; i < n; i++) {
                    volatile float sa = 0, sb = 0;   /* one rounding per product and per sum, as the definition */
                    for (int r = 0; r < rows; r++) {
                        volatile float pa = x[r] * M[(size_t)r * n + i], pb = y[r] * M[(size_t)r * n + i];
                        sa = sa + pa, sb = sb + pb;
                    }
                    ra[i] = sa, rb[i] = sb;
                }
                op_matvec2_t(a, b, M, x, y, rows, n);
                CHECK(!memcmp(a, ra, (size_t)n * sizeof *a) && !memcmp(b, rb, (size_t)n * sizeof *b),
                      "op_matvec2_t (%s, %d rows of %d) differs from the row-by-row sums", ISA[w], rows, n);
            }
    }
    isa_default();
}

/* Gemma's logit softcap cap tanh(x / cap) against double: within 3 ulp of the value (4 near 0.625 cap, where the
 * polynomial hands over), the vector loop giving the scalar tail's bits, odd, and NaN kept. */
static void check_softcap(void) {
    static float x[N], u[N], y[N], one[N];
    const float cap = 30.0f;
    inputs(x, u);
    for (int i = 10; i < 200; i++) x[i] = (float)(i - 105) * 0.37f;   /* around the hand-over at |x| 18.75 */
    memcpy(y, x, sizeof y);
    op_softcap(y, N, cap);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        one[i] = x[i];
        op_softcap(one + i, 1, cap);
        CHECK(!memcmp(&one[i], &y[i], sizeof(float)), "softcap(%g): %.9g in the vector loop, %.9g alone", x[i], y[i], one[i]);
        const double r = cap * tanh((double)x[i] / cap), err = fabs(y[i] - r) / fmax(fabs(r), 1e-30);
        if (fabs(r) > 1e-30 && err > worst) worst = err;
        CHECK(fabs(y[i] - r) <= 4 * 1.2e-7 * fabs(r) + 1e-36, "softcap(%g) = %.9g, want %.9g", x[i], y[i], r);
        float m = -x[i];
        op_softcap(&m, 1, cap);
        CHECK(m == -y[i], "softcap(-%g) = %.9g, not -%.9g", x[i], m, y[i]);
    }
    float nan_in[3] = {NAN, 1.0f, NAN};
    op_softcap(nan_in, 3, cap);
    CHECK(isnan(nan_in[0]) && isnan(nan_in[2]) && !isnan(nan_in[1]), "softcap: NaN not propagated");
    printf("%-14s %d values: vector loop == scalar tail, odd; worst relative error %.2e\n", "softcap", N, worst);
}

int main(void) {
    check_softcap();
    check_axpy_m();
    check_matvec2_t();
    check_widths();
    check_kv_rows();
    check_softmax();
    check_softmax_sink();
    check_swiglu_oai();
    check_rope_yarn();
    check("silu", op_silu, NULL, silu_arg, 1);
    check("silu_mul", NULL, op_silu_mul, silu_arg, 1);
    check("gelu_tanh", op_gelu_tanh, NULL, gelu_arg, 4);
    check("gelu_tanh_mul", NULL, op_gelu_tanh_mul, gelu_arg, 4);
    TEST_DONE();
}
