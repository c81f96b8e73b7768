# cmake/simd.cmake — the SIMD kernel files of src/quant: which ones this target architecture builds, their
# per-file target flags, and the HEARTH_QUANT_* defines that make quant.c list their kernel sets.
# Included from CMakeLists.txt after HEARTH_SRC (a glob of src/quant/*.c, among others) is made.
#
# Only the kernel files get target flags; everything else (quant_cpu.c's feature tests included) is built
# for the baseline ISA, and quant_init() installs a set only if the CPU runs it: one binary works on an
# AVX2-only x86, an AVX-512 one, and (with the scalar kernels) any other machine.
# x86-64: quant_avx2.c (AVX2+FMA+F16C), quant_avx512.c (+AVX-512 F/BW/VL/DQ), quant_avx512vnni.c (+VNNI).
# aarch64: quant_neon.c (NEON, the base ISA) and quant_neon_dotprod.c (SDOT, -march=armv8.2-a+dotprod,
# used only when getauxval reports HWCAP_ASIMDDP). Elsewhere: none of them.
# -ffp-contract=off: see quant_simd.h (a tile must compute each output exactly as the 1x1 kernel does).
include(CheckCCompilerFlag)

set(_q ${CMAKE_CURRENT_LIST_DIR}/../src/quant)
get_filename_component(_q ${_q} ABSOLUTE)
set(_x86_files ${_q}/quant_avx2.c ${_q}/quant_avx512.c ${_q}/quant_avx512vnni.c)
set(_arm_files ${_q}/quant_neon.c ${_q}/quant_neon_dotprod.c)
set(_quant_defs "")

string(TOLOWER "${CMAKE_SYSTEM_PROCESSOR}" _cpu)
if(_cpu MATCHES "^(x86_64|amd64|x64)$")
  list(REMOVE_ITEM HEARTH_SRC ${_arm_files})
  set(_avx2 -mavx2 -mfma -mf16c)
  set(_avx512 ${_avx2} -mavx512f -mavx512bw -mavx512vl -mavx512dq)
  check_c_compiler_flag("-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni" HEARTH_CC_HAS_AVX512VNNI)
  set_source_files_properties(${_q}/quant_avx2.c PROPERTIES COMPILE_OPTIONS "${_avx2};-ffp-contract=off")
  list(APPEND _quant_defs HEARTH_QUANT_AVX2)
  if(HEARTH_CC_HAS_AVX512VNNI)
    set_source_files_properties(${_q}/quant_avx512.c PROPERTIES COMPILE_OPTIONS "${_avx512};-ffp-contract=off")
    set_source_files_properties(${_q}/quant_avx512vnni.c PROPERTIES
                                COMPILE_OPTIONS "${_avx512};-mavx512vnni;-ffp-contract=off")
    list(APPEND _quant_defs HEARTH_QUANT_AVX512 HEARTH_QUANT_AVX512VNNI)
  else()
    list(REMOVE_ITEM HEARTH_SRC ${_q}/quant_avx512.c ${_q}/quant_avx512vnni.c)
  endif()
elseif(_cpu MATCHES "^(aarch64|arm64)$")
  list(REMOVE_ITEM HEARTH_SRC ${_x86_files})
  set_source_files_properties(${_q}/quant_neon.c PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
  set_source_files_properties(${_q}/quant_neon_dotprod.c PROPERTIES
                              COMPILE_OPTIONS "-march=armv8.2-a+dotprod;-ffp-contract=off")
  list(APPEND _quant_defs HEARTH_QUANT_NEON)
else()
  list(REMOVE_ITEM HEARTH_SRC ${_x86_files} ${_arm_files})
endif()

set_source_files_properties(${_q}/quant.c PROPERTIES COMPILE_DEFINITIONS "${_quant_defs}")
# The kernel files take far longer to compile than any other (the sanitized build: 70-100 s each against 1-4 s):
# listed first, make starts them first, and the rest of the build fills the other cores around them instead of
# waiting for them at the end.
set(_kernel_files ${_x86_files} ${_arm_files})
foreach(f ${_kernel_files})
  list(FIND HEARTH_SRC ${f} _at)
  if(NOT _at EQUAL -1)
    list(REMOVE_AT HEARTH_SRC ${_at})
    list(PREPEND HEARTH_SRC ${f})
  endif()
endforeach()
message(STATUS "hearth: SIMD kernel sets for ${CMAKE_SYSTEM_PROCESSOR}: ${_quant_defs}")
