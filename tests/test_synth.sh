#!/usr/bin/env bash
# `hearth synth` on the tiny shapes (the real shapes' structure, small dimensions): the file is the same bytes
# for a seed whatever the thread count and different for another seed, `hearth info` loads it with the expected
# tensor types, and `hearth run` generates from it. Bad arguments give one "error:" line.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# shape, type, a tensor type `info` must list (Q4_0: llama-quantize's default keeps the tied embedding in Q6_K;
# gemma3's 384-wide rows take Q4_K's fallback, Q5_0)
# (tiny-qwen3moe: expert stacks, an F32 router, an untied output in Q6_K; tiny-qwen35*: the hybrid layer pattern;
# tiny-gemma4*: the sliding / global pattern and per-layer geometry; tiny-gpt-oss: experts in MXFP4 whatever the type;
# tiny-gemma3n: AltUp, LAuReL and the sparse layers as the reference assumes them)
for spec in "tiny-llama Q4_K_M Q6_K" "tiny-qwen3 Q8_0 Q8_0" "tiny-gemma3 Q4_K_M Q5_0" "tiny-gpt2 F16 F16" "tiny-llama Q4_0 Q6_K" \
            "tiny-qwen3moe Q4_0 experts      8, 2 used per token" "tiny-qwen35 Q4_K_M 3 of 4 layers Gated DeltaNet" \
            "tiny-qwen35moe Q4_0 v-heads of 32); a shared expert" \
            "tiny-gemma4 Q4_K_M layers SSGSSG; sliding: kv 1, head dim 64" "tiny-gemma4moe Q4_0 experts      8, 2 used" \
            "tiny-gpt-oss Q4_0 Q6_K×1 MXFP4×6" "tiny-gemma3n Q4_0 altup        4 residual streams (layers compute on stream 0), LAuReL rank 64, sparse FFN gate in 10 layers"; do
    read -r shape type want <<<"$spec"
    want=${spec#"$shape $type "}
    f="$tmp/$shape-$type.gguf"
    check "$shape $type: synth" '"$HEARTH" synth --shape $shape --type $type -o "$f" --seed 7 2>/dev/null'
    "$HEARTH" synth --shape "$shape" --type "$type" -o "$tmp/same.gguf" --seed 7 -t 1 2>/dev/null
    "$HEARTH" synth --shape "$shape" --type "$type" -o "$tmp/other.gguf" --seed 8 2>/dev/null
    check "$shape $type: same seed, same bytes (1 vs 2 threads)" 'cmp -s "$f" "$tmp/same.gguf"'
    check "$shape $type: other seed, other bytes" '! cmp -s "$f" "$tmp/other.gguf"'
    info=$("$HEARTH" info -m "$f" 2>&1)
    arch=${shape#tiny-}; arch=${arch%3}; arch=${arch/gemma4moe/gemma4}
    check "$shape $type: info loads it [$info]" '[[ $info == *"architecture $arch"* && $info == *"$want"* ]]'
    out=$("$HEARTH" run -m "$f" -p "hello world" -n 4 --seed 1 2>&1 >/dev/null)
    check "$shape $type: run generates 4 tokens [$out]" '[[ $out == *"decode 4 tok"* ]]'
done

# every type synth offers writes a file that loads and runs (the i-quants that need an importance matrix are
# weighted by a uniform one: IQ2_XXS crashed here when it had no plain quantizer)
for type in $("$HEARTH" synth --help 2>&1 | sed -n 's/^types: *//p'); do
    out=$("$HEARTH" synth --shape tiny-llama --type "$type" --pure -o "$tmp/t.gguf" 2>&1 >/dev/null &&
          "$HEARTH" run -m "$tmp/t.gguf" -p "hello world" -n 2 --seed 1 2>&1 >/dev/null)
    check "tiny-llama --pure $type: synth, then run [${out##*$'\n'}]" '[[ $out == *"decode 2 tok"* ]]'
done

# Gemma 3n to an i-quant that needs an importance matrix: its per-layer embedding table is a token embedding to
# llama-quantize (with a tied output, the output's type: Q6_K here), so it needs none
"$HEARTH" synth --shape tiny-gemma3n --type F32 -o "$tmp/g3n.gguf" 2>/dev/null
"$HEARTH" imatrix -m "$tmp/g3n.gguf" -f data/text/stories-sampled.txt -o "$tmp/g3n-imat.gguf" -c 64 --chunks 2 >/dev/null 2>&1
out=$("$HEARTH" quantize "$tmp/g3n.gguf" "$tmp/g3n-iq2.gguf" IQ2_XXS --imatrix "$tmp/g3n-imat.gguf" 2>&1 >/dev/null &&
      "$HEARTH" info -m "$tmp/g3n-iq2.gguf" 2>&1 && "$HEARTH" run -m "$tmp/g3n-iq2.gguf" -p "hello world" -n 2 2>&1 >/dev/null)
check "tiny-gemma3n: imatrix, quantize IQ2_XXS, run [${out##*$'\n'}]" '[[ $out == *"Q6_K×1 IQ2_XXS×"* && $out == *"decode 2 tok"* ]]'

"$HEARTH" synth --shape tiny-llama --type Q4_0 --pure -o "$tmp/pure.gguf" 2>/dev/null
info=$("$HEARTH" info -m "$tmp/pure.gguf" 2>&1)
check "--pure: every matrix Q4_0 [$info]" '[[ $info == *"Q4_0×15"* && $info != *Q6_K* ]]'

check "unknown shape" 'one_error_line "$HEARTH" synth --shape nope --type Q4_0 -o "$tmp/x.gguf"'
check "unknown type" 'one_error_line "$HEARTH" synth --shape tiny-llama --type Q9_9 -o "$tmp/x.gguf"'
check "missing -o" 'one_error_line "$HEARTH" synth --shape tiny-llama --type Q4_0'
check "unwritable path" 'one_error_line "$HEARTH" synth --shape tiny-llama --type Q4_0 -o /nonexistent/dir/x.gguf'

b=$("$HEARTH" bench -m "$tmp/tiny-llama-Q4_0.gguf" -p 16 -n 4 -r 2 -t 1 --no-bw 2>&1)
check "bench prints pp and tg rows [$b]" '[[ $b == *" pp16 |"* && $b == *" tg4 |"* && $b == *"load: "* && $b == *"rss after load"* ]]'
# prefill against the peak of the kernels' multiply-add instruction: a share in 0-100% (the instruction
# alone on registers bounds every kernel built on it), and no such line for the scalar kernels
if ! grep -q "| scalar " <<< "$b"; then
    pk=$(sed -n 's/^prefill: \([0-9]*\)% of the .* peak of 1 thread (\([0-9]*\) GOP\/s.*/\1 \2/p' <<< "$b")
    check "bench: prefill's share of the multiply-add peak [$pk]" '[[ -n $pk ]] && (( ${pk% *} <= 100 && ${pk#* } > 0 ))'
fi
bs=$("$HEARTH" bench -m "$tmp/tiny-llama-Q4_0.gguf" -p 16 -n 0 -r 1 -t 1 --no-bw --cpu scalar 2>&1)
check "bench --cpu scalar: no peak measured [$bs]" '[[ $bs == *"prefill: "*"GFLOP/s"* && $bs != *"peak"* ]]'

[[ $fail -eq 0 ]] && echo "all synth checks passed"
exit $fail
