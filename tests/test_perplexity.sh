#!/usr/bin/env bash
# `hearth perplexity`: stories260K on the fixture text agrees within 0.5% with the reference engine's figures
# (data/README.md, text/), the log-prob file round-trips into --kl-divergence (a model against itself: KL 0 and
# 100% same top token; Q8_0 against F32: small KL, >= 90% same top; a Q8_0 KV cache: less KL than Q8_0 weights),
# and mismatched runs give one error line.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
within() { awk -v a="$1" -v b="$2" -v tol="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= tol) }'; }
final_ppl() { sed -n 's/^Final estimate: PPL = \([0-9.]*\) +\/- [0-9.]*$/\1/p'; }
field() { awk -v k="$1" 'index($0, k) == 1 { sub(/^[^:]*: */, ""); print $1; exit }'; }   # "Name : value ..."

TEXT=data/text/stories-sampled.txt
S=data/models/stories260K.gguf

out=$("$HEARTH" perplexity -m "$S" -f "$TEXT" -c 128 -t 1 2>/dev/null)
p=$(printf '%s\n' "$out" | final_ppl)
echo "n_ctx 128: PPL $p (reference 218.57)"
check "PPL at n_ctx 128 within 0.5% of 218.57" 'within "$p" 218.57 1.0929'
check "79 chunks at n_ctx 128, running estimates printed" '[[ $out == *"[1]"*",[79]"* && $out != *"[80]"* ]]'
check "uncertainty printed" '[[ $(printf "%s\n" "$out" | grep -c "^Final estimate: PPL = [0-9.]* +/- [0-9.]*$") -eq 1 ]]'

out=$("$HEARTH" perplexity -m "$S" -f "$TEXT" -c 256 -b 100 -t 1 2>/dev/null)
p=$(printf '%s\n' "$out" | final_ppl)
echo "n_ctx 256 (micro-batches of 100): PPL $p (reference 208.57)"
check "PPL at n_ctx 256 within 0.5% of 208.57" 'within "$p" 208.57 1.0429'

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
head -c 3000 "$TEXT" > "$tmp/short.txt"
L=data/models/llama.gguf
base_out=$("$HEARTH" perplexity -m "$L" -f "$tmp/short.txt" -c 64 -t 1 --save-logits "$tmp/base.logits" 2>/dev/null)
check "save run succeeds" '[[ -s $tmp/base.logits && $(printf "%s\n" "$base_out" | final_ppl) != "" ]]'
# header 20 bytes + tokens + f32 rows: 22 chunks of 64 (1441 tokens), 31 scored positions each, 512 vocab
check "log-prob file size" '[[ $(stat -c %s "$tmp/base.logits") -eq $((20 + 22*64*4 + 22*31*512*4)) ]]'

self=$("$HEARTH" perplexity -m "$L" -f "$tmp/short.txt" -c 64 -t 1 --kl-divergence "$tmp/base.logits" 2>/dev/null)
echo "llama vs itself: KLD $(printf '%s\n' "$self" | field "Mean KLD"), same top $(printf '%s\n' "$self" | field "Same top token")%"
check "self: KL 0" 'within "$(printf "%s\n" "$self" | field "Mean KLD")" 0 1e-6'
check "self: 100% same top" 'within "$(printf "%s\n" "$self" | field "Same top token")" 100 1e-9'
check "self: PPL(base) == PPL(Q)" '[[ -n $(printf "%s\n" "$self" | field "Mean PPL(Q)") && $(printf "%s\n" "$self" | field "Mean PPL(base)") == $(printf "%s\n" "$self" | field "Mean PPL(Q)") ]]'
check "self: PPL(base) is the saving run's" '[[ $(printf "%s\n" "$self" | field "Mean PPL(base)") == $(printf "%s\n" "$base_out" | final_ppl) ]]'

q8=$("$HEARTH" perplexity -m data/models/llama-Q8_0.gguf --kl-divergence "$tmp/base.logits" -b 16 -t 2 2>/dev/null)
kl=$(printf '%s\n' "$q8" | field "Mean KLD"); top=$(printf '%s\n' "$q8" | field "Same top token")
echo "llama-Q8_0 vs llama: KLD $kl, same top $top% (tokens from the file, micro-batches of 16, 2 threads)"
check "Q8_0: KL small" 'awk -v k="$kl" "BEGIN { exit !(k != \"\" && k > 0 && k < 0.01) }"'
check "Q8_0: >= 90% same top" 'awk -v t="$top" "BEGIN { exit !(t != \"\" && t >= 90) }"'
q4=$("$HEARTH" perplexity -m data/models/llama-Q4_0.gguf --kl-divergence "$tmp/base.logits" -t 1 2>/dev/null | field "Mean KLD")
check "Q4_0 diverges more than Q8_0" 'awk -v a="$q4" -v b="$kl" "BEGIN { exit !(a > b) }"'
kc=$("$HEARTH" perplexity -m "$L" --kl-divergence "$tmp/base.logits" --cache-type q8_0 -t 2 2>/dev/null | field "Mean KLD")
echo "llama with a q8_0 KV cache vs the f16 cache: KLD $kc"
check "q8_0 KV cache: KL above 0, below the Q8_0 weights' KL" 'awk -v c="$kc" -v w="$kl" "BEGIN { exit !(c != \"\" && c > 0 && c < w) }"'

check "KL: other n_ctx" 'one_error_line "$HEARTH" perplexity -m "$L" -f "$tmp/short.txt" -c 32 --kl-divergence "$tmp/base.logits"'
head -c 2900 "$TEXT" > "$tmp/other.txt"
check "KL: other text" 'one_error_line "$HEARTH" perplexity -m "$L" -f "$tmp/other.txt" -c 64 --kl-divergence "$tmp/base.logits"'
check "KL: other vocabulary" 'one_error_line "$HEARTH" perplexity -m data/models/gpt2.gguf --kl-divergence "$tmp/base.logits"'
check "KL: not a log-prob file" 'one_error_line "$HEARTH" perplexity -m "$L" --kl-divergence "$TEXT"'
head -c 100000 "$tmp/base.logits" > "$tmp/trunc.logits"
check "KL: truncated file" 'one_error_line "$HEARTH" perplexity -m "$L" --kl-divergence "$tmp/trunc.logits"'
check "KL: save over the base" 'one_error_line "$HEARTH" perplexity -m "$L" --kl-divergence "$tmp/base.logits" --save-logits "$tmp/base.logits"'
check "no text" 'one_error_line "$HEARTH" perplexity -m "$L"'
check "text shorter than a chunk" 'one_error_line "$HEARTH" perplexity -m "$L" -f "$tmp/short.txt" -c 4096'
check "bad -c" 'one_error_line "$HEARTH" perplexity -m "$L" -f "$tmp/short.txt" -c 2'
check "unknown flag" 'one_error_line "$HEARTH" perplexity --bogus 1'
check "help" '"$HEARTH" perplexity --help | matches -- "--kl-divergence"'

[[ $fail -eq 0 ]] && echo "all perplexity checks passed"
exit $fail
