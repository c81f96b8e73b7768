#!/usr/bin/env bash
# bench/compare.sh — hearth side by side with the reference engines, as the speed goals are read: for each
# file, `llama-bench` and `hearth bench` alternate (ROUNDS rounds of -r 2 each, the median kept), same
# threads, pp512 + tg128, and the table gives both engines' t/s and their ratio. The references are the
# llama-bench binaries named by LLAMA_BENCH (llama.cpp) and IK_LLAMA_BENCH (ik_llama.cpp, run with -rtr 1);
# either may be left out. CPU=avx2 runs hearth's AVX2 kernels (the references must then be AVX2 builds too).
# Files default to the bench/run.sh models (bench/models/llama-3.2-1b-*.gguf).
#
#   LLAMA_BENCH=... [IK_LLAMA_BENCH=...] [CPU=avx2] [DEPTH=4096] bench/compare.sh [-t THREADS] [-b BUILD] [FILE...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
threads=2 build="$here/../build" rounds=${ROUNDS:-2}
while getopts "t:b:h" opt; do
    case $opt in t) threads=$OPTARG ;; b) build=$OPTARG ;; *) sed -n '2,10p' "$0"; exit 1 ;; esac
done
shift $((OPTIND - 1))
files=("$@"); [[ ${#files[@]} -gt 0 ]] || files=("$here"/models/llama-3.2-1b-*.gguf)
hearth=("$build/hearth" bench); [[ -n ${CPU:-} ]] && hearth+=(--cpu "$CPU")
depth=(); ng=128; [[ -n ${DEPTH:-} ]] && { depth=(-d "$DEPTH"); ng=32; }
common=(-t "$threads" -p 512 -n "$ng" -r 2 "${depth[@]}")

# t/s of pp512 and tg$ng from a llama-bench style table on stdin (its rows only: hearth's lines after the
# table name pp512 too): "PP TG"
parse() { awk -F'|' -v ng="tg$ng" '/^\|/ && /pp512/ {pp = $(NF-1)} /^\|/ && $0 ~ ng {tg = $(NF-1)} END {split(pp, a, " "); split(tg, b, " "); print a[1] + 0, b[1] + 0}'; }
median() { sort -g | awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

engines=(hearth); [[ -n ${LLAMA_BENCH:-} ]] && engines+=(llama.cpp); [[ -n ${IK_LLAMA_BENCH:-} ]] && engines+=(ik_llama.cpp)
run() {
    case $1 in
        hearth) "${hearth[@]}" -m "$2" "${common[@]}" --no-bw 2>/dev/null | parse ;;
        llama.cpp) "$LLAMA_BENCH" -m "$2" -o md "${common[@]}" 2>/dev/null | parse ;;
        ik_llama.cpp) "$IK_LLAMA_BENCH" -m "$2" -o md -rtr 1 "${common[@]}" 2>/dev/null | parse ;;
    esac
}

echo "$(lscpu | sed -n 's/^Model name: *//p'), $(date -u +%F), $threads threads${CPU:+, --cpu $CPU}${DEPTH:+, depth $DEPTH}"
hdr="| file | pp512 t/s: ${engines[*]} | tg$ng t/s: ${engines[*]} |"
for e in "${engines[@]:1}"; do hdr+=" hearth / $e pp, tg |"; done
echo "$hdr"
echo "|$(printf -- '---|%.0s' $(seq $((3 + ${#engines[@]} - 1))))"
bw_lines=() pk_lines=()
for f in "${files[@]}"; do
    declare -A pp=() tg=()
    for ((r = 0; r < rounds; r++)); do
        for e in "${engines[@]}"; do read -r p t < <(run "$e" "$f"); pp[$e]+="$p "; tg[$e]+="$t "; done
    done
    line="| $(basename "$f") |"; ppl="" tgl=""
    declare -A mp=() mt=()
    for e in "${engines[@]}"; do
        mp[$e]=$(tr ' ' '\n' <<< "${pp[$e]}" | grep . | median); mt[$e]=$(tr ' ' '\n' <<< "${tg[$e]}" | grep . | median)
        ppl+="${ppl:+ / }${mp[$e]}"; tgl+="${tgl:+ / }${mt[$e]}"
    done
    line+=" $ppl | $tgl |"
    for e in "${engines[@]:1}"; do
        line+=" $(awk -v a="${mp[hearth]}" -v b="${mp[$e]}" -v c="${mt[hearth]}" -v d="${mt[$e]}" 'BEGIN {printf "%.2f, %.2f", b ? a / b : 0, d ? c / d : 0}') |"
    done
    echo "$line"
    # the machine's read bandwidth now (hearth bench's meter, best of its passes before and after a short
    # decode) and the weight bytes a token reads: each engine's decode as a share of that limit; the work of a
    # prompt token and the peak of hearth's multiply-add instruction: each engine's prefill as a share of it
    out=$("${hearth[@]}" -m "$f" -t "$threads" -p 512 -n 16 -r 1 "${depth[@]}" 2>&1) || true
    gbs="" mib="" gflop="" insn="" peak=""
    read -r gbs mib < <(sed -n 's/.*(\([0-9.]*\) GB\/s measured, \([0-9.]*\) MiB read per token.*/\1 \2/p' <<< "$out") || true
    read -r gflop < <(sed -n 's/.*pp512: \([0-9.]*\) GFLOP per token.*/\1/p' <<< "$out") || true
    IFS='|' read -r insn peak < <(sed -n 's/.*% of the \(.*\) peak of .* (\([0-9.]*\) GOP\/s.*/\1|\2/p' <<< "$out") || true
    if [[ -n $gflop && -n $peak ]]; then
        share=" a prompt token is $gflop GFLOP, the $insn peak of $threads threads $peak GOP/s; prefill at"
        for e in "${engines[@]}"; do
            share+=" $e $(awk -v t="${mp[$e]}" -v f="$gflop" -v p="$peak" 'BEGIN {printf "%.0f%%", 100 * t * f / p}')"
        done
        pk_lines+=("$(basename "$f"):${share}")
    fi
    if [[ -n $gbs ]]; then
        share=" the machine read $gbs GB/s, a token reads $mib MiB of weights; decode at"
        for e in "${engines[@]}"; do
            share+=" $e $(awk -v t="${mt[$e]}" -v m="$mib" -v g="$gbs" 'BEGIN {printf "%.0f%%", 100 * t * m * 1048576 / (g * 1e9)}')"
        done
        bw_lines+=("$(basename "$f"):${share}")
    fi
    unset pp tg mp mt
done
echo
echo "Decode as a share of the read bandwidth measured in this run:"
printf '%s\n' "${bw_lines[@]}"
if [[ ${#pk_lines[@]} -gt 0 ]]; then
    echo
    echo "Prefill as a share of the multiply-add peak measured in this run (the instruction alone on registers):"
    printf '%s\n' "${pk_lines[@]}"
fi
