/* ops.c — scalar implementations of the shared layers (see ops.h). Sums that decide accuracy (norm
 * statistics) are accumulated in double; the loops are simple enough for the compiler to vectorize. */
#include "compute/ops.h"

#include <math.h>
#include <stddef.h>

void op_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / n + eps));
    if (w) for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
    else for (int i = 0; i < n; i++) out[i] = x[i] * scale;
}

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

void op_rope_table(float *cosv, float *sinv, int pos, int n_rot, float base, float scale, const float *ff) {
    for (int i = 0; i < n_rot / 2; i++) {
        double theta = (double)pos / scale * pow((double)base, -2.0 * i / n_rot);
        if (ff) theta /= ff[i];
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

void op_softmax(float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) { x[i] = expf(x[i] - mx); sum += x[i]; }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void op_silu_mul(float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static inline float gelu_tanh1(float x) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

void op_gelu_tanh_mul(float *g, const float *u, int n) { for (int i = 0; i < n; i++) g[i] = gelu_tanh1(g[i]) * u[i]; }
void op_gelu_tanh(float *x, int n) { for (int i = 0; i < n; i++) x[i] = gelu_tanh1(x[i]); }
void op_gelu_erf(float *x, int n) { for (int i = 0; i < n; i++) x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f)); }
void op_add(float *y, const float *x, int n) { for (int i = 0; i < n; i++) y[i] += x[i]; }
void op_scale(float *y, float s, int n) { for (int i = 0; i < n; i++) y[i] *= s; }
float op_dot(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}
