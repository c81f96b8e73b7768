/* quant_neon_dotprod.c — the integer dot products of quant_neon_kernels.h with SDOT (vdotq_s32), built with
 * -march=armv8.2-a+dotprod (cmake/simd.cmake). Nothing here runs unless quant_neon.c's install found
 * HWCAP_ASIMDDP; it then overrides the baseline NEON entries of the quantized types. */
#define HT_NEON_DOTPROD 1
#include "quant_neon_kernels.h"

void ht_neon_dotprod_install(ht_traits t[HT_NTYPES]) { neon_install(t, false); }

#include "quant_peak.h"
#define PEAK_KEEP(v) __asm__ volatile("" : "+w"(v))
#define PEAK_I(s) vdupq_n_s8((int8_t)(s))
#define PEAK_SDOT(v, k) vreinterpretq_s8_s32(vdotq_s32(vreinterpretq_s32_s8(v), k, k))
PEAK_LOOP(peak_sdot, int8x16_t, PEAK_I, PEAK_SDOT, PEAK_KEEP)
double ht_neon_sdot_rate(double seconds) { return peak_sdot(seconds); }
