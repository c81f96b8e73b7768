/* test_ops.c — the vectorized activations (silu, gelu_tanh, with and without the gated product) and the
 * softmax against the formulas in double precision, and their vector loop against their scalar tail: an element's value
 * must not depend on where in a row it falls (thread shares split rows at arbitrary points); and every vector
 * width the CPU runs gives the same bits. */
#include <math.h>
#include <string.h>

#include "compute/ops.h"
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

/* Each vector width the CPU runs (ops_set_isa: what `--cpu` picks) gives the same bits for every op. */
static void check_widths(void) {
    static const char *const isa[] = {"scalar", "avx2", "avx512"};
    static float x[N], u[N], ref[6][N], got[N];
    int n_run = 0;
    for (int k = 0; k < 3; k++) {
#if defined(__x86_64__)
        if ((k == 1 && !__builtin_cpu_supports("avx2")) || (k == 2 && !__builtin_cpu_supports("avx512f"))) continue;
#else
        if (k) continue;   /* one width elsewhere */
#endif
        ops_set_isa(isa[k]);
        for (int op = 0; op < 6; op++) {
            inputs(x, u);
            memcpy(got, x, sizeof got);
            switch (op) {
            case 0: op_silu(got, N); break;
            case 1: op_silu_mul(got, u, N); break;
            case 2: op_gelu_tanh(got, N); break;
            case 3: op_gelu_tanh_mul(got, u, N); break;
            case 4: op_softmax(got, N, 0.125f); break;
            default: op_rmsnorm(got, u, x, N, 1e-6f); break;
            }
            if (!n_run) memcpy(ref[op], got, sizeof got);
            else CHECK(!memcmp(ref[op], got, sizeof got), "op %d: %s gives other bits than %s", op, isa[k], isa[0]);
        }
        n_run++;
    }
    ops_set_isa("avx512vnni");   /* back to the default choice on a machine that has it (else clamps below) */
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx512f")) ops_set_isa(__builtin_cpu_supports("avx2") ? "avx2" : "scalar");
#endif
    printf("%-14s the same bits in each of %d vector widths (silu, gelu_tanh, their gated forms, softmax, rmsnorm)\n",
           "widths", n_run);
}

int main(void) {
    check_widths();
    check_softmax();
    check("silu", op_silu, NULL, silu_arg, 1);
    check("silu_mul", NULL, op_silu_mul, silu_arg, 1);
    check("gelu_tanh", op_gelu_tanh, NULL, gelu_arg, 4);
    check("gelu_tanh_mul", NULL, op_gelu_tanh_mul, gelu_arg, 4);
    TEST_DONE();
}
