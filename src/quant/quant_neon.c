/* quant_neon.c — the "neon" kernel set for aarch64: quant_neon_kernels.h built for the base ISA (NEON is
 * always there), and, when getauxval reports the dot-product extension (HWCAP_ASIMDDP), the integer dot
 * products of quant_neon_dotprod.c (SDOT) installed over it. The float kernels and the activation
 * quantizers are the same in both. */
#define HT_NEON_DOTPROD 0
#include "quant_neon_kernels.h"

static void install_neon(ht_traits t[HT_NTYPES]) {
    neon_install(t, true);
    if (ht_cpu_arm_dotprod()) ht_neon_dotprod_install(t);
}

const ht_kernel_set quant_kernels_neon = {"neon", ht_cpu_arm_neon, install_neon};
