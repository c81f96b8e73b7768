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

#include "quant_peak.h"
#define PEAK_KEEP(v) __asm__ volatile("" : "+w"(v))
#define PEAK_F(s) vdupq_n_f32(0.5f * (float)(s))
#define PEAK_FMLA(v, k) vfmaq_f32(k, v, k)   /* v = v / 2 + 1/2 (k = 1/2): stays near 1, no denormals */
#define PEAK_H(s) vdupq_n_s16((int16_t)(s))
#define PEAK_SMLAL2(v, k) vmlal_high_s8(v, vreinterpretq_s8_s16(k), vreinterpretq_s8_s16(k))
PEAK_LOOP(peak_fmla, float32x4_t, PEAK_F, PEAK_FMLA, PEAK_KEEP)
PEAK_LOOP(peak_smlal, int16x8_t, PEAK_H, PEAK_SMLAL2, PEAK_KEEP)

/* the float types on FMLA; the integer dots on SDOT with the dot-product extension, else SMULL / SMLAL2 */
static ht_mac_peak neon_mac_peak(uint32_t type, double seconds) {
    if (type == HT_F32 || type == HT_F16 || type == HT_BF16) return (ht_mac_peak){ "FMLA.4S", 4 * peak_fmla(seconds) };
    if (ht_cpu_arm_dotprod()) return (ht_mac_peak){ "SDOT", 16 * ht_neon_sdot_rate(seconds) };
    return (ht_mac_peak){ "SMLAL2.8H", 8 * peak_smlal(seconds) };
}

const ht_kernel_set quant_kernels_neon = {"neon", ht_cpu_arm_neon, install_neon, neon_mac_peak};
