/* quant_neon_dotprod.c — the integer dot products of quant_neon_kernels.h with SDOT (vdotq_s32), built with
 * -march=armv8.2-a+dotprod (cmake/simd.cmake). Nothing here runs unless quant_neon.c's install found
 * HWCAP_ASIMDDP; it then overrides the baseline NEON entries of the quantized types. */
#define HT_NEON_DOTPROD 1
#include "quant_neon_kernels.h"

void ht_neon_dotprod_install(ht_traits t[HT_NTYPES]) { neon_install(t, false); }
