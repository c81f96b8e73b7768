# lib.sh — helpers shared by the shell tests (sourced, not run): `check NAME EXPR` records a failure
# without stopping, `one_error_line CMD...` requires exit 1 with exactly one stderr line "error: ..."
# (the message is left in LAST_ERR), `slow_layers N` sizes a slow test model; `sanitized_build` makes the clang ASan + UBSan build (below).
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; fi; }
# `cmd | matches PATTERN`: grep -q that reads all of its input. Under pipefail `cmd | grep -q` fails (or, after
# `!`, passes) at random: grep exits at the first match and cmd's next write dies of SIGPIPE.
matches() { grep "$@" > /dev/null; }
# slow_layers N: the depth of the "slow" synthesized tiny-llama a test uses to make a prompt take seconds: N, or
# a sixth of it in the ASan + UBSan build (test_sanitizers sets ASAN_OPTIONS), whose prefill of that model runs
# ~6x slower (pp512 at 48 layers, one thread: 376 t/s, and at 24 layers 118 t/s sanitized, Zen 5); the same
# seconds either way, not minutes.
slow_layers() { if sanitized; then echo $((($1 + 5) / 6)); else echo "$1"; fi; }
# sanitized: true in the ASan + UBSan rerun of the suite, where a test may sample fewer seeds of the same paths
sanitized() { [[ -n ${ASAN_OPTIONS:-} ]]; }
one_error_line() {
    local err; err=$("$@" 2>&1 >/dev/null); local rc=$?
    [[ $rc -eq 1 && $(printf '%s\n' "$err" | wc -l) -eq 1 && $err == error:* ]] || { echo "  rc=$rc out=[$err]"; return 1; }
    LAST_ERR=$err
}

# sanitized_build: configures and builds SAN_BUILD ($HEARTH_BUILD-fuzz), the clang build with ASan + UBSan (and
# libFuzzer's coverage) of the programs the tests run (target test_programs: no benchmarks, and no libraries to
# install, as test_install skips there): test_sanitizers runs the suite there, test_fuzz the fuzz targets. One
# build serves both (under CTest its own step makes it first, and HEARTH_SAN_READY tells the two not to build
# again while the other runs; a script run alone builds). On failure the log's tail is printed and 1 returned.
sanitized_build() {
    SAN_BUILD="${HEARTH_BUILD:?}-fuzz"
    [[ -n ${HEARTH_SAN_READY:-} ]] && return 0   # built by CTest's sanitized_build step before the tests using it
    command -v clang >/dev/null || { echo "FAIL: clang not found (apt-get install -y clang libclang-rt-14-dev)"; return 1; }
    local B=$SAN_BUILD src; src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    mkdir -p "$B"   # the build log lives in the build directory, not beside it in the source tree
    CC=clang cmake -S "$src" -B "$B" -DHEARTH_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$B/build.log" 2>&1 &&
        cmake --build "$B" -j"$(nproc)" --target test_programs >> "$B/build.log" 2>&1 || { tail -30 "$B/build.log"; return 1; }
}

# start_server NAME ARGS...: `hearth serve` on a free local port with ARGS, its output in $tmp/NAME.log (the
# caller's temp dir); appends its pid to the caller's `pids` array and sets URL once it listens. A server that
# exits or never listens fails the script with its log. SERVE_VIA, when set, is a launcher the server runs under
# (e.g. "timeout 120 mpirun --oversubscribe -np 2").
start_server() {
    local name=$1; shift
    ${SERVE_VIA:-} "$HEARTH" serve --host 127.0.0.1 --port 0 "$@" >"$tmp/$name.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 300); do
        URL=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$tmp/$name.log" | head -1)
        [[ -n $URL ]] && return 0
        kill -0 "${pids[-1]}" 2>/dev/null || break
        sleep 0.05
    done
    echo "FAIL: $name server did not start:"; cat "$tmp/$name.log"; exit 1
}

# need_mpi: skips the script (exit 0 with a reason) when hearth is built without MPI or mpirun is missing, else
# lets mpirun run as root in a container; HEARTH becomes an absolute path (mpirun starts ranks elsewhere).
need_mpi() {
    if ! command -v mpirun >/dev/null || ! grep -q '^HEARTH_MPI:BOOL=ON' "$HEARTH_BUILD/CMakeCache.txt" 2>/dev/null; then
        echo "skipped: hearth built without MPI or mpirun missing (apt-get install openmpi-bin libopenmpi-dev)"
        exit 0
    fi
    HEARTH=$(realpath "$HEARTH")
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
}
