#!/usr/bin/env bash
# `hearth embed` and the encoder contracts of the CLI: one JSON array of n_embd numbers per input (from
# arguments, --ids or stdin lines), --normalize gives unit vectors, decoders embed too; `run` refuses an
# encoder, GPT-2 refuses to pass its learned positions, `golden` writes BERT's kinds 1 and 2.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
count() { tr -d '[]' <<<"$1" | tr ',' '\n' | grep -c .; }

BERT=data/models/bert.gguf
e=$("$HEARTH" embed -m $BERT --ids "101, 1481 161 731 164,102")
check "embed --ids: one array of n_embd numbers" '[[ $e == \[*\] && $(count "$e") -eq 128 && $(wc -l <<<"$e") -eq 1 ]]'
two=$("$HEARTH" embed -m $BERT --ids "101 1481 102" "101 731 164 102")
check "one line per input" '[[ $(wc -l <<<"$two") -eq 2 ]]'
n=$("$HEARTH" embed -m $BERT --normalize --ids "101 1481 102" | tr -d '[]' | tr ',' '\n' | awk '{s += $1 * $1} END {printf "%.4f", s}')
check "--normalize gives a unit vector (|v|^2 = $n)" '[[ $n == 1.0000 || $n == 0.9999 ]]'
s=$(printf '101 1481 102\n101 731 164 102\n' | "$HEARTH" embed -m $BERT --ids)
check "inputs from stdin lines" '[[ "$s" == "$two" ]]'
d=$("$HEARTH" embed -m data/models/qwen3.gguf --ids "768 303 723")
check "a decoder embeds (mean of the last hidden state)" '[[ $(count "$d") -eq 128 ]]'
check "embed --help says decoders mean-pool" '"$HEARTH" embed --help | matches "mean-pools the last hidden state"'

check "run refuses an encoder" 'one_error_line "$HEARTH" run -m $BERT -p hi && [[ $LAST_ERR == *encoder* ]]'
check "bad token id" 'one_error_line "$HEARTH" embed -m $BERT --ids "101 99999"'
check "embed needs a model" 'one_error_line "$HEARTH" embed hello'
check "GPT-2 past its learned positions" \
    'one_error_line "$HEARTH" embed -m data/models/gpt2.gguf --ids "$(seq -s, 1 300)" && [[ $LAST_ERR == *"learned positions"* ]]'

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$HEARTH" golden -m $BERT -i data/golden/bert.golden -o "$tmp/bert.golden"
check "golden writes BERT's hidden and pooled cases" '[[ $(stat -c %s "$tmp/bert.golden") -eq $(stat -c %s data/golden/bert.golden) ]]'
check "no token-by-token evaluation of an encoder" \
    'one_error_line "$HEARTH" golden -m $BERT -i data/golden/bert.golden -o "$tmp/x.golden" --token-by-token'

[[ $fail -eq 0 ]] && echo "all embed checks passed"
exit $fail
