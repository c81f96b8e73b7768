/* quant_tile_k.h — the tile of the 256-element super-block types (K-quants, IQ4_XS, the low-bit i-quants and
 * TQ2_0 x Q8_K), the same for every kernel set: included by a set's kernel header after its h2f (a half to
 * float) and its kblock (one super-block's integer sums, isum and msum, for NC activation rows). */

/* A super-block's d as float (IQ1_M assembles its half from the scale words). */
HT_AI float k_d(const int T, const uint8_t *wb) {
    if (T == HT_IQ1_M) {
        const ht_half h = ht_iq1_m_d((const block_iq1_m *)wb);
        return h2f(&h);
    }
    return h2f(wb + k_d_off(T));
}

/* nr weight rows x NC activation rows of super-blocks; per output the scalar float sum runs in quant_ref.c's
 * order, times the type's power-of-two post factor (the i-quants') at the end. */
HT_AI void tileK(const int T, const int NC, int n, const uint8_t *w, size_t ws, int nr, const uint8_t *a, size_t as,
                 float *y, size_t ys) {
    for (int r = 0; r < nr; r++, w += ws, y++) {
        float sum[4];
        HT_UNROLL
        for (int c = 0; c < NC; c++) sum[c] = 0;
        for (int i = 0; i < n / QK_K; i++) {
            const uint8_t *wb = w + (size_t)i * k_size(T);
            const block_q8_K *ab[4];
            int32_t isum[4], msum[4];
            ht_prefetch(wb, k_size(T));
            HT_UNROLL
            for (int c = 0; c < NC; c++) ab[c] = (const block_q8_K *)(a + (size_t)c * as) + i;
            kblock(T, NC, wb, ab, isum, msum);
            const float d = k_d(T, wb);
            HT_UNROLL
            for (int c = 0; c < NC; c++) {
                if (k_has_min(T))
                    sum[c] += (d * ab[c]->d) * (float)isum[c] - (h2f(wb + k_dmin_off(T)) * ab[c]->d) * (float)msum[c];
                else
                    sum[c] += (d * ab[c]->d) * (float)isum[c];
            }
        }
        HT_UNROLL
        for (int c = 0; c < NC; c++) y[(size_t)c * ys] = ht_iq_post(T) != 1.0f ? ht_iq_post(T) * sum[c] : sum[c];
    }
}
