/* quant_avx2.c — the "avx2" kernel set (AVX2 + FMA + F16C): every dot product and the activation quantizers
 * of quant_x86_kernels.h, with PMADDUBSW/PMADDWD integer dots and 256-bit float kernels. Built with
 * -mavx2 -mfma -mf16c (cmake/simd.cmake); installed only when quant_cpu.c says the CPU and OS support it. */
#define HT_X86_VNNI 0
#define HT_X86_AVX512 0
#include "quant_x86_kernels.h"

const ht_kernel_set quant_kernels_avx2 = {"avx2", ht_cpu_x86_avx2, x86_install, x86_mac_peak};
