#!/usr/bin/env bash
# Runs the rest of the suite in the clang build with AddressSanitizer + UndefinedBehaviorSanitizer that the fuzz
# targets use too (lib.sh's sanitized_build, one build for both), but for the qemu runs (their own cross builds:
# nothing sanitized, half a minute spent again), as many at once as there are cores. Any sanitizer report fails
# the run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
sanitized_build
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$SAN_BUILD" -j"$(nproc)" -E 'test_sanitizers|test_fuzz|sanitized_build|_slow$|_qemu$' -FA sanitized --output-on-failure
