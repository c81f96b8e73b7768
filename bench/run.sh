#!/usr/bin/env bash
# bench/run.sh — the speed benchmark: synthesizes llama-3.2-1b (Q4_0, Q4_K_M, Q8_0, F16; random weights, real
# shapes) once into a cache directory, then runs `hearth bench` on them and on stories260K, and prints one
# llama-bench-style table followed by each model's load time, memory and bandwidth-limit lines.
# Not a test (not in CTest): it takes minutes and needs ~5 GB of disk for the models.
#
#   bench/run.sh [-t THREADS] [-r REPS] [-d MODEL_DIR] [-b BUILD_DIR] [TYPE...]
# Defaults: -t 2, -r 3, -d bench/models (gitignored), -b build, types Q4_0 Q4_K_M Q8_0 F16.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
threads=2 reps=3 dir="$here/models" build="$root/build"
while getopts "t:r:d:b:h" opt; do
    case $opt in
        t) threads=$OPTARG ;; r) reps=$OPTARG ;; d) dir=$OPTARG ;; b) build=$OPTARG ;;
        *) sed -n '2,9p' "$0"; exit 1 ;;
    esac
done
shift $((OPTIND - 1))
types=("$@"); [[ ${#types[@]} -gt 0 ]] || types=(Q4_0 Q4_K_M Q8_0 F16)
hearth="$build/hearth"
[[ -x $hearth ]] || { echo "error: $hearth not built (cmake -S $root -B $build && cmake --build $build -j2)" >&2; exit 1; }
mkdir -p "$dir"

models=()
for t in "${types[@]}"; do
    f="$dir/llama-3.2-1b-$t.gguf"
    if [[ ! -s $f ]]; then
        "$hearth" synth --shape llama-3.2-1b --type "$t" -o "$f.tmp" -t "$threads" && mv "$f.tmp" "$f"
    fi
    models+=("$f")
done
models+=("$root/models/stories260K.gguf")

out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
for i in "${!models[@]}"; do
    echo "bench: ${models[$i]}" >&2
    "$hearth" bench -m "${models[$i]}" -t "$threads" -r "$reps" > "$out/$i.txt"
done

grep -h '^| model\|^| ---' "$out/0.txt"
for i in "${!models[@]}"; do grep -v '^| model\|^| ---' "$out/$i.txt" | grep '^|' || true; done
echo
for i in "${!models[@]}"; do
    echo "$(basename "${models[$i]}"):"
    grep -v '^|' "$out/$i.txt" | sed 's/^/  /'
done
