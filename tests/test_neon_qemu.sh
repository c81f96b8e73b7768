#!/usr/bin/env bash
# test_neon_qemu.sh — the aarch64 NEON kernels, cross-compiled and run under qemu-user.
#
# Builds the quant layer (quant.c with HEARTH_QUANT_NEON, quant_ref.c, quant_cpu.c, quant_neon.c, and
# quant_neon_dotprod.c with -march=armv8.2-a+dotprod — the flags of cmake/simd.cmake) plus matmul.c and
# threads.c and ops.c (which quant.c tells the vector width), static, with aarch64-linux-gnu-gcc, links
# test_quant_simd.c, test_matmul.c and test_ops.c (the activations, softmax and norms) against them, and
# runs them under qemu-aarch64: -cpu cortex-a57 (no dot-product extension: the baseline NEON kernels, then the
# scalar set) and -cpu max (HWCAP_ASIMDDP: the neon set with the SDOT kernels installed over it). Each run must
# pass and must report the dot-product detection that CPU implies and a result line of its set, so every path
# is known to have run.
# A missing cross compiler or qemu is a failure, not a skip: install them with
#   apt-get install -y gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
set -euo pipefail

CC=${HEARTH_AARCH64_CC:-aarch64-linux-gnu-gcc}
QEMU=${HEARTH_QEMU_AARCH64:-qemu-aarch64}
need() {
    command -v "$1" >/dev/null 2>&1 && return 0
    echo "FAIL: $1 not found — this test cross-compiles the NEON kernels and runs them under qemu." >&2
    echo "Install: apt-get install -y gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user" >&2
    exit 1
}
need "$CC"
need "$QEMU"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${HEARTH_BUILD:+$HEARTH_BUILD/neon-qemu}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"

FLAGS=(-std=gnu11 -O2 -Wall -Wextra -I"$ROOT/include" -I"$ROOT/src" -I"$ROOT/tests")
SIMD=(-ffp-contract=off -Werror)   # the kernel files must stay warning-free
cc() { "$CC" "${FLAGS[@]}" "$@"; }
Q=$ROOT/src/quant
cc -DHEARTH_QUANT_NEON -c "$Q/quant.c" -o "$OUT/quant.o"
cc -c "$Q/quant_ref.c" -o "$OUT/quant_ref.o"
cc -c "$Q/quant_grids.c" -o "$OUT/quant_grids.o"
cc -c "$Q/quant_iq_search.c" -o "$OUT/quant_iq_search.o"
cc -Werror -c "$Q/quant_cpu.c" -o "$OUT/quant_cpu.o"
cc "${SIMD[@]}" -c "$Q/quant_neon.c" -o "$OUT/quant_neon.o"
cc "${SIMD[@]}" -march=armv8.2-a+dotprod -c "$Q/quant_neon_dotprod.c" -o "$OUT/quant_neon_dotprod.o"
cc -c "$ROOT/src/model/matmul.c" -o "$OUT/matmul.o"
cc -c "$ROOT/src/compute/threads.c" -o "$OUT/threads.o"
cc -O3 -ffp-contract=off -fno-trapping-math -Werror -c "$ROOT/src/compute/ops.c" -o "$OUT/ops.o"   # CMakeLists' flags
QUANT=("$OUT"/quant.o "$OUT"/quant_ref.o "$OUT"/quant_grids.o "$OUT"/quant_iq_search.o "$OUT"/quant_cpu.o "$OUT"/quant_neon.o "$OUT"/quant_neon_dotprod.o "$OUT"/ops.o)
cc -static "$ROOT/tests/test_quant_simd.c" "${QUANT[@]}" -lm -o "$OUT/test_quant_simd"
cc -static "$ROOT/tests/test_matmul.c" "$OUT/matmul.o" "$OUT/threads.o" "${QUANT[@]}" -lm -lpthread -o "$OUT/test_matmul"
cc -static "$ROOT/tests/test_ops.c" "${QUANT[@]}" -lm -o "$OUT/test_ops"   # (the KV row checks use the types' traits)
echo "built aarch64 tests in $OUT"

# The scalar set in test_quant_simd's quick mode (every type and kernel, fewer row lengths): it is the same C
# as on the host, where it runs in full; emulated, its full run took 16 s of the test's ~90.
fail=0
for run in "cortex-a57 neon 0" "cortex-a57 scalar 1" "max neon 0"; do
    read -r cpu sets quick <<<"$run"
    want=no
    [ "$cpu" = max ] && want=yes
    for t in test_quant_simd test_matmul test_ops; do
        echo "== qemu-aarch64 -cpu $cpu $t (HEARTH_TEST_SETS=$sets HEARTH_TEST_QUICK=$quick)"
        if ! log=$(HEARTH_TEST_QUICK=$quick HEARTH_TEST_SETS=$sets "$QEMU" -cpu "$cpu" "$OUT/$t" 2>&1); then
            echo "$log"
            echo "FAIL: $t under -cpu $cpu"
            fail=1
            continue
        fi
        echo "$log"
        if [ "$t" = test_quant_simd ] && ! grep -q "dot-product instructions: $want" <<<"$log"; then
            echo "FAIL: -cpu $cpu should report dot-product instructions: $want"
            fail=1
        fi
        if [ -n "$sets" ] && [ "$t" != test_ops ] && ! grep -qE "^$sets +(from_float|[0-9]+ types)" <<<"$log"; then
            echo "FAIL: $t under -cpu $cpu did not test the $sets kernels"
            fail=1
        fi
    done
done
exit $fail
