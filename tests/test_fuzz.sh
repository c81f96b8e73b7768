#!/usr/bin/env bash
# The fuzz targets of tests/fuzz, as CI runs them: built with clang (libFuzzer, ASan, UBSan) in the sibling
# build directory that test_sanitizers uses too (lib.sh), every file of tests/fuzz/regressions/<target>/
# replayed through its harness (and the model files through the hearth CLI: exit 0, or 1 with one error line),
# then each target run over its seed corpus (tests/fuzz/seeds.mjs, from the fixtures) plus a fixed number of
# mutations from a fixed seed (a smoke run, about 3 s each here; the corpus and the regressions, which carry
# what the campaigns found, are replayed in full): the same run every time, so CI cannot fail on a lucky find
# that a rerun misses (HEARTH_FUZZ_SECONDS=N fuzzes N seconds per target with a random seed instead).
# Longer campaigns: tests/fuzz/run.sh, whose finds go to tests/fuzz/regressions/.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
if grep -qa __asan_init "$HEARTH"; then echo "sanitizer build: the fuzz targets have their own (covered by the normal run)"; exit 0; fi
command -v node >/dev/null || { echo "FAIL: node not found (the seed corpora are written by tests/fuzz/seeds.mjs)"; exit 1; }
targets=(fuzz_gguf fuzz_model fuzz_safetensors fuzz_tokenizer_json fuzz_tokenize fuzz_jinja fuzz_request fuzz_grammar)
declare -A runs=([fuzz_gguf]=20000 [fuzz_model]=700 [fuzz_safetensors]=100000 [fuzz_tokenizer_json]=33000
                 [fuzz_tokenize]=2700 [fuzz_jinja]=10000 [fuzz_request]=67000
                 [fuzz_grammar]=20000)
sanitized_build || { echo "FAIL: building the fuzz targets"; exit 1; }
B=$SAN_BUILD
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
node "$here/fuzz/seeds.mjs" "$tmp/corpus" > /dev/null || { echo "FAIL: seeds"; exit 1; }
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in "${targets[@]}"; do
    reg=("$here/fuzz/regressions/$t"/*)
    if [[ -e ${reg[0]} ]]; then
        check "$t: ${#reg[@]} regression files replayed" '"$B/$t" "${reg[@]}" > "$tmp/$t.replay" 2>&1 || { tail -20 "$tmp/$t.replay"; false; }'
        if [[ $t == fuzz_gguf || $t == fuzz_model ]]; then
            for f in "${reg[@]}"; do
                for cmd in "info -m $f" "run -m $f -n 2 -p hi"; do
                    err=$("$HEARTH" $cmd 2>&1 >/dev/null); rc=$?
                    check "$t: hearth $(basename "$f") ${cmd%% *}: exit 0, or 1 with one line (rc $rc)" \
                        '[[ $rc -eq 0 || ( $rc -eq 1 && $(printf "%s\n" "$err" | wc -l) -eq 1 ) ]]'
                done
            done
        fi
    fi
    mkdir -p "$tmp/run/$t" "$tmp/crash/$t"
    how=(-seed=1 -runs="${runs[$t]}"); [[ -n ${HEARTH_FUZZ_SECONDS:-} ]] && how=(-max_total_time="$HEARTH_FUZZ_SECONDS")
    t0=$SECONDS
    "$B/$t" "$tmp/run/$t" "$tmp/corpus/$t" "${how[@]}" -rss_limit_mb=4096 -artifact_prefix="$tmp/crash/$t/" \
        -print_final_stats=1 > "$tmp/$t.log" 2>&1
    rc=$?
    n=$(grep -o "stat::number_of_executed_units: [0-9]*" "$tmp/$t.log" | awk '{print $2}')
    check "$t: ${n:-0} executions, no crash" '[[ $rc -eq 0 ]] || { grep -E "ERROR|SUMMARY|runtime error" "$tmp/$t.log" | head -5; ls "$tmp/crash/$t"; false; }'
    echo "$t: ${n:-0} executions in $((SECONDS - t0)) s"
done
[[ $fail -eq 0 ]] && echo "all fuzz checks passed"
exit $fail
