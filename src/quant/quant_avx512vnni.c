/* quant_avx512vnni.c — the "avx512vnni" kernel set: quant_avx512.c's kernels with the integer dot products on
 * VPDPBUSD (u8 x s8 -> int32) and VPDPWSSD (scaled int16 pairs), in their 256-bit AVX512VL form (a 32-element
 * block fills one ymm; 256-bit integer ops issue on three ports on Ice Lake against two for 512-bit ones)
 * except Q4_K, whose 512-bit kernel measured faster. Built with -mavx512vnni on top of the AVX-512 flags. */
#define HT_X86_VNNI 1
#define HT_X86_AVX512 1
#include "quant_x86_kernels.h"

const ht_kernel_set quant_kernels_avx512vnni = {"avx512vnni", ht_cpu_x86_avx512vnni, x86_install, x86_mac_peak};
