/* quant.c — the tensor-type traits tables and kernel selection.
 *
 * Two tables indexed by ggml type id: the scalar reference (const, quant_ref.c's kernels) and the active
 * one, which starts as a copy of it (static initialisation, so ht_get_traits works before quant_init)
 * and which quant_init / quant_set_backend rebuild as "scalar table, then the chosen kernel set's
 * install() overrides". Kernel sets (SIMD files) are listed best first, each compiled in only when the
 * build defines its HEARTH_QUANT_* macro (see ht_kernel_set in quant.h). */
#include "quant.h"
#include "quant_ref.h"
#include "compute/ops.h"

#include <pthread.h>

/* name, block, bytes per block, is_quant, to_float, from_float (NULL: no quantizer yet; IQ2_XXS, IQ2_XS,
 * IQ1_S and IQ1_M need an importance matrix), vec_dot_type, vec_dot, vec_dot_tile and pack
 * (none in the scalar table: ht_vec_dot_tile loops vec_dot; SIMD sets install theirs), dot_t (F32, F16), kq and pv
 * (Q8_0), gemm (none in the scalar table) */
#define HT_TRAITS_TABLE {                                                                                            \
    [HT_F32]    = {"F32", 1, 4, false, ht_ref_f32_to_float, ht_ref_f32_from_float, HT_F32,                            \
                   ht_ref_vec_dot_f32_f32, NULL, NULL, ht_ref_dot_t_f32},                                                  \
    [HT_F16]    = {"F16", 1, 2, false, ht_ref_f16_to_float, ht_ref_f16_from_float, HT_F32,                            \
                   ht_ref_vec_dot_f16_f32, NULL, NULL, ht_ref_dot_t_f16},                                                  \
    [HT_BF16]   = {"BF16", 1, 2, false, ht_ref_bf16_to_float, ht_ref_bf16_from_float, HT_F32,                        \
                   ht_ref_vec_dot_bf16_f32, NULL, NULL, NULL},                                                                   \
    [HT_Q4_0]   = {"Q4_0", QK4_0, sizeof(block_q4_0), true, ht_ref_q4_0_to_float, ht_ref_q4_0_from_float,            \
                   HT_Q8_0, ht_ref_vec_dot_q4_0_q8_0, NULL, NULL, NULL},                                                         \
    [HT_Q4_1]   = {"Q4_1", QK4_1, sizeof(block_q4_1), true, ht_ref_q4_1_to_float, ht_ref_q4_1_from_float,            \
                   HT_Q8_1, ht_ref_vec_dot_q4_1_q8_1, NULL, NULL, NULL},                                                         \
    [HT_Q5_0]   = {"Q5_0", QK5_0, sizeof(block_q5_0), true, ht_ref_q5_0_to_float, ht_ref_q5_0_from_float,            \
                   HT_Q8_0, ht_ref_vec_dot_q5_0_q8_0, NULL, NULL, NULL},                                                         \
    [HT_Q5_1]   = {"Q5_1", QK5_1, sizeof(block_q5_1), true, ht_ref_q5_1_to_float, ht_ref_q5_1_from_float,            \
                   HT_Q8_1, ht_ref_vec_dot_q5_1_q8_1, NULL, NULL, NULL},                                                         \
    [HT_Q8_0]   = {"Q8_0", QK8_0, sizeof(block_q8_0), true, ht_ref_q8_0_to_float, ht_ref_q8_0_from_float,            \
                   HT_Q8_0, ht_ref_vec_dot_q8_0_q8_0, NULL, NULL, NULL, ht_ref_kq_q8_0, ht_ref_pv_q8_0},             \
    [HT_Q8_1]   = {"Q8_1", QK8_1, sizeof(block_q8_1), true, ht_ref_q8_1_to_float, ht_ref_q8_1_from_float,            \
                   HT_Q8_1, NULL, NULL, NULL, NULL},                                                                             \
    [HT_Q2_K]   = {"Q2_K", QK_K, sizeof(block_q2_K), true, ht_ref_q2_K_to_float, ht_ref_q2_K_from_float,             \
                   HT_Q8_K, ht_ref_vec_dot_q2_K_q8_K, NULL, NULL, NULL},                                                         \
    [HT_Q3_K]   = {"Q3_K", QK_K, sizeof(block_q3_K), true, ht_ref_q3_K_to_float, ht_ref_q3_K_from_float,             \
                   HT_Q8_K, ht_ref_vec_dot_q3_K_q8_K, NULL, NULL, NULL},                                                         \
    [HT_Q4_K]   = {"Q4_K", QK_K, sizeof(block_q4_K), true, ht_ref_q4_K_to_float, ht_ref_q4_K_from_float,             \
                   HT_Q8_K, ht_ref_vec_dot_q4_K_q8_K, NULL, NULL, NULL},                                                         \
    [HT_Q5_K]   = {"Q5_K", QK_K, sizeof(block_q5_K), true, ht_ref_q5_K_to_float, ht_ref_q5_K_from_float,             \
                   HT_Q8_K, ht_ref_vec_dot_q5_K_q8_K, NULL, NULL, NULL},                                                         \
    [HT_Q6_K]   = {"Q6_K", QK_K, sizeof(block_q6_K), true, ht_ref_q6_K_to_float, ht_ref_q6_K_from_float,             \
                   HT_Q8_K, ht_ref_vec_dot_q6_K_q8_K, NULL, NULL, NULL},                                                         \
    [HT_Q8_K]   = {"Q8_K", QK_K, sizeof(block_q8_K), true, ht_ref_q8_K_to_float, ht_ref_q8_K_from_float,             \
                   HT_Q8_K, NULL, NULL, NULL, NULL},                                                                             \
    [HT_IQ4_NL] = {"IQ4_NL", QK4_NL, sizeof(block_iq4_nl), true, ht_ref_iq4_nl_to_float,                             \
                   ht_ref_iq4_nl_from_float, HT_Q8_0, ht_ref_vec_dot_iq4_nl_q8_0, NULL, NULL, NULL},                             \
    [HT_IQ4_XS] = {"IQ4_XS", QK_K, sizeof(block_iq4_xs), true, ht_ref_iq4_xs_to_float,                               \
                   ht_ref_iq4_xs_from_float, HT_Q8_K, ht_ref_vec_dot_iq4_xs_q8_K, NULL, NULL, NULL},                             \
    [HT_IQ2_XXS] = {"IQ2_XXS", QK_K, sizeof(block_iq2_xxs), true, ht_ref_iq2_xxs_to_float, NULL,                     \
                   HT_Q8_K, ht_ref_vec_dot_iq2_xxs_q8_K, NULL, NULL, NULL},                                          \
    [HT_IQ2_XS] = {"IQ2_XS", QK_K, sizeof(block_iq2_xs), true, ht_ref_iq2_xs_to_float, NULL,                         \
                   HT_Q8_K, ht_ref_vec_dot_iq2_xs_q8_K, NULL, NULL, NULL},                                           \
    [HT_IQ2_S] = {"IQ2_S", QK_K, sizeof(block_iq2_s), true, ht_ref_iq2_s_to_float,                                   \
                   ht_ref_iq2_s_from_float, HT_Q8_K, ht_ref_vec_dot_iq2_s_q8_K, NULL, NULL, NULL},                   \
    [HT_IQ3_XXS] = {"IQ3_XXS", QK_K, sizeof(block_iq3_xxs), true, ht_ref_iq3_xxs_to_float,                           \
                   ht_ref_iq3_xxs_from_float, HT_Q8_K, ht_ref_vec_dot_iq3_xxs_q8_K, NULL, NULL, NULL},               \
    [HT_IQ3_S] = {"IQ3_S", QK_K, sizeof(block_iq3_s), true, ht_ref_iq3_s_to_float,                                   \
                   ht_ref_iq3_s_from_float, HT_Q8_K, ht_ref_vec_dot_iq3_s_q8_K, NULL, NULL, NULL},                   \
    [HT_IQ1_S] = {"IQ1_S", QK_K, sizeof(block_iq1_s), true, ht_ref_iq1_s_to_float, NULL,                             \
                   HT_Q8_K, ht_ref_vec_dot_iq1_s_q8_K, NULL, NULL, NULL},                                            \
    [HT_IQ1_M] = {"IQ1_M", QK_K, sizeof(block_iq1_m), true, ht_ref_iq1_m_to_float, NULL,                             \
                   HT_Q8_K, ht_ref_vec_dot_iq1_m_q8_K, NULL, NULL, NULL},                                            \
    [HT_TQ1_0] = {"TQ1_0", QK_K, sizeof(block_tq1_0), true, ht_ref_tq1_0_to_float, ht_ref_tq1_0_from_float,          \
                   HT_Q8_K, ht_ref_vec_dot_tq1_0_q8_K, NULL, NULL, NULL},                                            \
    [HT_TQ2_0] = {"TQ2_0", QK_K, sizeof(block_tq2_0), true, ht_ref_tq2_0_to_float, ht_ref_tq2_0_from_float,          \
                   HT_Q8_K, ht_ref_vec_dot_tq2_0_q8_K, NULL, NULL, NULL},                                            \
    [HT_MXFP4] = {"MXFP4", QK_MXFP4, sizeof(block_mxfp4), true, ht_ref_mxfp4_to_float, ht_ref_mxfp4_from_float,      \
                   HT_Q8_0, ht_ref_vec_dot_mxfp4_q8_0, NULL, NULL, NULL},                                            \
}

static const ht_traits ref_table[HT_NTYPES] = HT_TRAITS_TABLE;
static ht_traits active_table[HT_NTYPES] = HT_TRAITS_TABLE;

/* ---- kernel sets, best first ---- */
#ifdef HEARTH_QUANT_AVX512VNNI
extern const ht_kernel_set quant_kernels_avx512vnni;
#endif
#ifdef HEARTH_QUANT_AVX512
extern const ht_kernel_set quant_kernels_avx512;
#endif
#ifdef HEARTH_QUANT_AVX2
extern const ht_kernel_set quant_kernels_avx2;
#endif
#ifdef HEARTH_QUANT_NEON
extern const ht_kernel_set quant_kernels_neon;
#endif
static const ht_kernel_set scalar_set = {"scalar", NULL, NULL, NULL};

static const ht_kernel_set *const kernel_sets[] = {
#ifdef HEARTH_QUANT_AVX512VNNI
    &quant_kernels_avx512vnni,
#endif
#ifdef HEARTH_QUANT_AVX512
    &quant_kernels_avx512,
#endif
#ifdef HEARTH_QUANT_AVX2
    &quant_kernels_avx2,
#endif
#ifdef HEARTH_QUANT_NEON
    &quant_kernels_neon,
#endif
    &scalar_set,
};
#define N_KERNEL_SETS ((int)(sizeof kernel_sets / sizeof kernel_sets[0]))

static const ht_kernel_set *active_set = &scalar_set;

static bool known_type(uint32_t type) { return type < HT_NTYPES && ref_table[type].name != NULL; }

const ht_traits *ht_get_traits(uint32_t type) { return known_type(type) ? &active_table[type] : NULL; }

const ht_traits *ht_get_traits_ref(uint32_t type) { return known_type(type) ? &ref_table[type] : NULL; }

size_t ht_row_size(uint32_t type, int64_t n) {
    if (!known_type(type) || n < 0 || n % ref_table[type].blck) return 0;
    return (size_t)(n / ref_table[type].blck) * ref_table[type].type_size;
}

void ht_quantize_row(uint32_t vec_dot_type, const float *x, void *dst, int64_t n) {
    if (known_type(vec_dot_type)) active_table[vec_dot_type].from_float(x, dst, n);
}

static bool set_runs_here(const ht_kernel_set *ks) { return !ks->cpu_ok || ks->cpu_ok(); }

static void install_set(const ht_kernel_set *ks) {
    memcpy(active_table, ref_table, sizeof active_table);
    if (ks->install) ks->install(active_table);
    active_set = ks;
    ops_set_isa(ks->name);   /* norms, activations, softmax: the same vector width */
}

static void pick_best_set(void) {
    for (int i = 0; i < N_KERNEL_SETS; i++) {
        if (set_runs_here(kernel_sets[i])) {
            install_set(kernel_sets[i]);
            return;
        }
    }
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

void quant_init(void) { pthread_once(&init_once, pick_best_set); }

const char *quant_backend(void) { return active_set->name; }

ht_mac_peak quant_mac_peak(uint32_t type, double seconds) {
    const ht_kernel_set *ks = active_set;
    return known_type(type) && ks->mac_peak ? ks->mac_peak(type, seconds) : (ht_mac_peak){ NULL, 0 };
}

bool quant_set_backend(const char *name) {
    quant_init();   /* so a later quant_init() cannot undo the choice */
    for (int i = 0; i < N_KERNEL_SETS; i++) {
        if (strcmp(kernel_sets[i]->name, name) == 0) {
            if (!set_runs_here(kernel_sets[i])) return false;
            install_set(kernel_sets[i]);
            return true;
        }
    }
    return false;
}

const char *quant_backend_name(int i) { return i >= 0 && i < N_KERNEL_SETS ? kernel_sets[i]->name : NULL; }
