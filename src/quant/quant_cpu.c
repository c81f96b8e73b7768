/* quant_cpu.c — CPU feature tests for the SIMD kernel sets (declared in quant_simd.h).
 *
 * Compiled with the baseline flags of the build, never with -mavx2 & co., so calling a test on any CPU is
 * safe. x86: CPUID for the instruction sets, and XGETBV for the OS side — AVX needs the XMM and YMM state
 * enabled in XCR0 (bits 1, 2), AVX-512 also the opmask and ZMM state (bits 5, 6, 7); a CPU may support
 * AVX-512 while the OS (or hypervisor) leaves it off. aarch64: NEON is part of the base ISA; the dot-product
 * extension is reported by getauxval(AT_HWCAP) & HWCAP_ASIMDDP (Linux). */
#include "quant_simd.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

typedef struct { bool avx2, avx512, vnni, vbmi, bf16; } x86_features;

static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

static x86_features x86_detect(void) {
    x86_features f = {false, false, false, false, false};
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool fma = c >> 12 & 1, osxsave = c >> 27 & 1, avx = c >> 28 & 1, f16c = c >> 29 & 1;
    if (!(osxsave && avx && fma && f16c) || (xcr0() & 0x6) != 0x6) return f;
    if (__get_cpuid_max(0, NULL) < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = b >> 5 & 1;
    const bool avx512 = (b >> 16 & 1) && (b >> 17 & 1) && (b >> 30 & 1) && (b >> 31 & 1);   /* F DQ BW VL */
    f.avx512 = f.avx2 && avx512 && (xcr0() & 0xe6) == 0xe6;
    f.vnni = f.avx512 && (c >> 11 & 1);
    f.vbmi = f.avx512 && (c >> 1 & 1);
    if (f.avx512 && a >= 1) {   /* leaf 7's subleaf count; subleaf 1: EAX bit 5 AVX512_BF16 */
        __cpuid_count(7, 1, a, b, c, d);
        f.bf16 = a >> 5 & 1;
    }
    return f;
}

bool ht_cpu_x86_avx2(void) { return x86_detect().avx2; }
bool ht_cpu_x86_avx512(void) { return x86_detect().avx512; }
bool ht_cpu_x86_avx512vnni(void) { return x86_detect().vnni; }
bool ht_cpu_x86_avx512vbmi(void) { return x86_detect().vbmi; }
bool ht_cpu_x86_avx512bf16(void) { return x86_detect().bf16; }
#endif

#if defined(__aarch64__)
#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
bool ht_cpu_arm_dotprod(void) { return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0; }
#else
bool ht_cpu_arm_dotprod(void) { return false; }
#endif
bool ht_cpu_arm_neon(void) { return true; }
#endif
