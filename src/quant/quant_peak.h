/* quant_peak.h — the loop behind a kernel set's mac_peak (quant.h): one multiply-add instruction issued back
 * to back on PEAK_CHAINS independent registers (enough chains to hide its latency on every CPU seen: 3-5
 * cycles at 1-2 a cycle), no memory access, timed in thread CPU time (the host is shared: wall time would
 * count other jobs), best of the repeats that fit in the given seconds. Included by a kernel set's file
 * after its intrinsics, which then defines a loop per instruction with PEAK_LOOP. */
#include <time.h>

#define PEAK_CHAINS 12
#define PEAK_ITERS 16384

static double peak_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* static double name(double seconds): instructions a second of v = STEP(v, k) (vector type VT, the
 * operand k = INIT(1) and the chains' start INIT(i) from an opaque integer, so nothing folds at compile time);
 * KEEP(v) keeps each chain in a register and every instruction alive. */
#define PEAK_LOOP(name, VT, INIT, STEP, KEEP)                                                               \
    static double name(double seconds) {                                                                    \
        static volatile int seed = 1;                                                                       \
        const VT k = INIT(seed);                                                                            \
        VT v[PEAK_CHAINS];                                                                                  \
        HT_UNROLL                                                                                           \
        for (int i = 0; i < PEAK_CHAINS; i++) v[i] = INIT(seed + i);                                        \
        double best = 0;                                                                                    \
        const double end = peak_now() + seconds;                                                            \
        do {                                                                                                \
            const double t0 = peak_now();                                                                   \
            for (int it = 0; it < PEAK_ITERS; it++) {                                                       \
                HT_UNROLL                                                                                   \
                for (int i = 0; i < PEAK_CHAINS; i++) {                                                     \
                    v[i] = STEP(v[i], k);                                                                   \
                    KEEP(v[i]);                                                                             \
                }                                                                                           \
            }                                                                                               \
            const double dt = peak_now() - t0;                                                              \
            if (dt > 0 && (double)PEAK_ITERS * PEAK_CHAINS / dt > best) best = (double)PEAK_ITERS * PEAK_CHAINS / dt; \
        } while (peak_now() < end);                                                                         \
        return best;                                                                                        \
    }
