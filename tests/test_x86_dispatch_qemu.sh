#!/usr/bin/env bash
# test_x86_dispatch_qemu.sh — the x86-64 build runs on older CPUs and picks the right kernel set: the built
# test_quant_simd and test_matmul run under qemu-x86_64 as a Nehalem (no AVX: must choose "scalar") and as a
# Haswell (AVX2, no AVX-512: must choose "avx2", and tests only that set, HEARTH_TEST_SETS=avx2: the
# scalar one ran as the Nehalem), and must pass there. This catches target flags leaking
# into code that runs before the CPU check, and a wrong feature test (qemu emulates AVX2, not AVX-512).
# test_quant_simd runs in its quick mode there (HEARTH_TEST_QUICK: every type and kernel, fewer row lengths and
# column counts): the native run of the suite gives both sets the full checks, and emulated they took 80 s.
# On a non-x86-64 host there is no x86 binary to run, and qemu-user cannot run sanitizer builds: in both
# cases the test says so and passes. A missing qemu-x86_64 is a failure: apt-get install -y qemu-user
set -euo pipefail

case "$(uname -m)" in x86_64|amd64) ;; *) echo "not an x86-64 host: nothing to test"; exit 0 ;; esac
command -v qemu-x86_64 >/dev/null 2>&1 || { echo "FAIL: qemu-x86_64 not found; apt-get install -y qemu-user" >&2; exit 1; }
BUILD=${HEARTH_BUILD:?HEARTH_BUILD must name the build directory}
# ASan reserves terabytes of shadow address space, which qemu-user cannot emulate (the process is killed
# for memory): the sanitizer rerun of the suite (test_sanitizers.sh) leaves this test to the normal run.
if grep -qa __asan_init "$BUILD/test_quant_simd"; then
    echo "sanitizer build: not run under qemu (covered by the non-sanitizer run of this test)"
    exit 0
fi

fail=0
for spec in Nehalem:scalar Haswell:avx2; do
    cpu=${spec%%:*} want=${spec#*:} sets=
    [[ $want == scalar ]] || sets=$want
    for t in test_quant_simd test_matmul; do
        echo "== qemu-x86_64 -cpu $cpu $t"
        # qemu warns about CPU-model features TCG lacks (pcid, rtm, ...): noise, dropped
        if ! log=$(HEARTH_TEST_QUICK=1 HEARTH_TEST_SETS=$sets qemu-x86_64 -cpu "$cpu" "$BUILD/$t" 2>&1 | grep -v "^qemu-x86_64: warning: TCG doesn't support"; exit "${PIPESTATUS[0]}"); then
            echo "$log"
            echo "FAIL: $t under -cpu $cpu"
            fail=1
            continue
        fi
        echo "$log"
        if [ "$t" = test_quant_simd ] && ! grep -q "quant_init chose: $want\$" <<<"$log"; then
            echo "FAIL: a $cpu should get the $want kernels"
            fail=1
        fi
        if ! grep -qE "^$want +(from_float|[0-9]+ types)" <<<"$log"; then
            echo "FAIL: $t under -cpu $cpu did not test the $want kernels"
            fail=1
        fi
    done
done
exit $fail
