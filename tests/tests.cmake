# Every tests/test_*.c is one test program and every tests/test_*.sh one script; both run from tests/
# (so data is at data/...), with HEARTH set to the CLI's path and HEARTH_BUILD to the build directory.
file(GLOB HEARTH_C_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_*.c)
foreach(src ${HEARTH_C_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE hearth_core)
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests)
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "HEARTH=$<TARGET_FILE:hearth>;HEARTH_BUILD=${CMAKE_BINARY_DIR}")
  list(APPEND HEARTH_TEST_PROGRAMS ${name})
endforeach()
file(GLOB HEARTH_SH_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_*.sh)
foreach(src ${HEARTH_SH_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_test(NAME ${name} COMMAND bash ${src} WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests)
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "HEARTH=$<TARGET_FILE:hearth>;HEARTH_BUILD=${CMAKE_BINARY_DIR}")
endforeach()
# pty_drive: plays a terminal user's keystrokes against a command (test_chat's line-editing checks)
add_executable(pty_drive ${CMAKE_SOURCE_DIR}/tests/pty_drive.c)
target_link_libraries(pty_drive PRIVATE util)
# test_programs: what the tests run (the CLI, the C tests, pty_drive, the fuzz targets of a HEARTH_FUZZ build),
# without the benchmarks and the installed libraries: all that lib.sh's sanitized_build makes
add_custom_target(test_programs)
add_dependencies(test_programs hearth pty_drive ${HEARTH_TEST_PROGRAMS} ${HEARTH_FUZZ_TARGETS})
# test_sanitizers and test_fuzz share one sanitized build directory (tests/lib.sh), built once first by
# sanitized_build; then they run side by side
add_test(NAME sanitized_build COMMAND bash -c "source ./lib.sh && sanitized_build" WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}/tests)
set_tests_properties(sanitized_build PROPERTIES FIXTURES_SETUP sanitized ENVIRONMENT "HEARTH_BUILD=${CMAKE_BINARY_DIR}")
set_tests_properties(test_sanitizers test_fuzz PROPERTIES FIXTURES_REQUIRED sanitized)
set_property(TEST test_sanitizers test_fuzz APPEND PROPERTY ENVIRONMENT "HEARTH_SAN_READY=1")
# the README runs the suite with -j2: the MPI jobs start up to four ranks (test_dp: two replicas and servers) on their own
set_tests_properties(test_mpi test_dp PROPERTIES RUN_SERIAL TRUE)
# Start order where CTest has no timings yet (a fresh clone: CI): it starts sanitized_build first (a fixture
# setup: the head of the longest chain, the build and then the suite's rerun in it); the longest scripts go next
# on the other slot, the short tests fill in; the serial MPI jobs wait for an idle moment, the end.
set_tests_properties(test_neon_qemu PROPERTIES COST 500)
set_tests_properties(test_server PROPERTIES COST 400)
