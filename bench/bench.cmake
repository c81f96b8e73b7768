# bench/bench.cmake — micro-benchmark programs (build targets, not tests), included from CMakeLists.txt.
# Run by hand; each program says at its top what it measures and how to call it. One block per program.

# bench_tokenizer: vocabulary load and tokenize speed (defaults to files under the source tree).
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/bench_tokenizer.c)
  add_executable(bench_tokenizer ${CMAKE_CURRENT_LIST_DIR}/bench_tokenizer.c)
  target_include_directories(bench_tokenizer PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(bench_tokenizer PRIVATE hearth_core)
  target_compile_definitions(bench_tokenizer PRIVATE HEARTH_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
endif()

# bench_kernels: single-thread GB/s of the quant dot-product kernels per type and kernel set.
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/bench_kernels.c)
  add_executable(bench_kernels ${CMAKE_CURRENT_LIST_DIR}/bench_kernels.c)
  target_include_directories(bench_kernels PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(bench_kernels PRIVATE hearth_core)
endif()

# bench_prompt_cache: the server's prompt-cache lookup cost with many blocks held.
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/bench_prompt_cache.c)
  add_executable(bench_prompt_cache ${CMAKE_CURRENT_LIST_DIR}/bench_prompt_cache.c)
  target_include_directories(bench_prompt_cache PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(bench_prompt_cache PRIVATE hearth_core)
  target_compile_definitions(bench_prompt_cache PRIVATE HEARTH_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
endif()

# bench_ab: two builds' libhearth.so in one process, prefill and decode alternating (before/after on a noisy host).
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/bench_ab.c)
  add_executable(bench_ab ${CMAKE_CURRENT_LIST_DIR}/bench_ab.c)
  target_include_directories(bench_ab PRIVATE ${CMAKE_SOURCE_DIR}/include)
  target_link_libraries(bench_ab PRIVATE ${CMAKE_DL_LIBS})
endif()
