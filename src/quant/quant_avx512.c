/* quant_avx512.c — the "avx512" kernel set (AVX-512 F/BW/VL/DQ, no VNNI): the kernels of quant_x86_kernels.h
 * built with AVX-512 flags (EVEX encodings, 32 vector registers, hence 4-column float tiles); the integer
 * dots stay on PMADDUBSW/PMADDWD. For AVX-512 CPUs without VNNI (Skylake-X). */
#define HT_X86_VNNI 0
#define HT_X86_AVX512 1
#include "quant_x86_kernels.h"

const ht_kernel_set quant_kernels_avx512 = {"avx512", ht_cpu_x86_avx512, x86_install, x86_mac_peak};
