#!/usr/bin/env bash
# run.sh — a fuzzing campaign: builds the libFuzzer targets (clang, ASan + UBSan) in build-fuzz/, writes the
# seed corpora, then runs every target for SECONDS (default 600) on all cores in turn, keeping each target's
# grown corpus in build-fuzz/corpus/. A crash is copied to tests/fuzz/regressions/<target>/, which CTest
# (test_fuzz.sh) replays through the harness and the CLI from then on.
# Usage: tests/fuzz/run.sh [SECONDS] [TARGET...]      (from anywhere)
set -euo pipefail
secs=${1:-600}; shift || true
root=$(cd "$(dirname "$0")/../.." && pwd)
B=${HEARTH_FUZZ_BUILD:-$root/build-fuzz}
CC=clang cmake -S "$root" -B "$B" -DHEARTH_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(fuzz_gguf fuzz_model fuzz_safetensors fuzz_tokenizer_json fuzz_tokenize fuzz_jinja fuzz_request fuzz_grammar)
cmake --build "$B" -j"$(nproc)" --target "${targets[@]}" >/dev/null
cd "$root/tests"
[[ -d $B/corpus ]] || node fuzz/seeds.mjs "$B/corpus" >/dev/null
for t in "${targets[@]}"; do
    mkdir -p "$B/corpus/$t" "$B/crashes/$t" "fuzz/regressions/$t"
    echo "== $t: $secs s"
    "$B/$t" "$B/corpus/$t" -max_total_time="$secs" -jobs="$(nproc)" -workers="$(nproc)" -rss_limit_mb=4096 \
        -artifact_prefix="$B/crashes/$t/" -print_final_stats=1 > "$B/$t.log" 2>&1 || true
    grep -h "stat::number_of_executed_units" fuzz-*.log 2>/dev/null | awk -v t="$t" '{n += $2} END {print t ": " n " executions"}'
    rm -f fuzz-*.log
    for c in "$B/crashes/$t"/*; do [[ -e $c ]] && cp "$c" "fuzz/regressions/$t/" && echo "  crash kept: fuzz/regressions/$t/$(basename "$c")"; done
done
