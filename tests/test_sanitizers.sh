#!/usr/bin/env bash
# Builds the project with AddressSanitizer + UndefinedBehaviorSanitizer in a sibling build directory
# and runs the rest of the suite there, but for the qemu runs (their own cross builds: nothing sanitized,
# half a minute spent again). Any sanitizer report fails the run.
set -euo pipefail
B="${HEARTH_BUILD}-asan"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cmake -S .. -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHEARTH_SANITIZE=ON > "$log" 2>&1 || { cat "$log"; exit 1; }
cmake --build "$B" -j2 >> "$log" 2>&1 || { tail -50 "$log"; exit 1; }
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$B" -E 'test_sanitizers|_slow$|_qemu$' --output-on-failure 
