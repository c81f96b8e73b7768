#!/usr/bin/env bash
# LoRA adapters from the command line: `hearth run` and `hearth serve` with --lora-scaled give the same greedy
# text (the server applies the adapters to every request and its prompt cache keys on them), which differs from
# the base model's; a bad --lora / --lora-scaled value, a missing file and an adapter for another model are one
# error line each. With --lora-merge, run and serve give the same text, and the server refuses scale changes.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d); pid=
trap '[[ -n $pid ]] && kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
fail=0
m=data/models/llama.gguf
ad="data/models/llama-lora-a.gguf:0.5,data/models/llama-lora-b.gguf:0.7"
p="Once upon a time"
ascii() { LC_ALL=C tr -cd '\40-\176'; }   # (a random model's text holds broken UTF-8: the server sends U+FFFD there)
base=$("$HEARTH" run -m $m -p "$p" -n 24 --temp 0 2>/dev/null)
ours=$("$HEARTH" run -m $m -p "$p" -n 24 --temp 0 --lora-scaled "$ad" 2>/dev/null | ascii)
base=$(printf '%s' "$base" | ascii)
check "run: the adapters change the text [$ours]" '[[ -n $ours && $ours != "$base" ]]'

"$HEARTH" serve -m $m --port 0 -t 1 --lora-scaled "$ad" 2>"$tmp/log" & pid=$!
for _ in $(seq 100); do url=$(grep -o 'http://[0-9.:]*' "$tmp/log" | head -1); [[ -n $url ]] && break; sleep 0.1; done
for i in 1 2; do   # the second time from the prompt cache
    got=$(curl -s "$url/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\": \"$p\", \"max_tokens\": 24, \"temperature\": 0}" | jq -r '.choices[0].text' | ascii)
    check "serve --lora-scaled, request $i: the text of run --lora-scaled [$got]" '[[ -n $got && $got == "$ours" ]]'
done
kill $pid; wait $pid 2>/dev/null; pid=

# per request: the server holds both adapters at global scale 0; requests choose theirs, several at once
A=data/models/llama-lora-a.gguf B=data/models/llama-lora-b.gguf
only_a=$("$HEARTH" run -m $m -p "$p" -n 24 --temp 0 --lora $A 2>/dev/null | ascii)
both=$("$HEARTH" run -m $m -p "$p" -n 24 --temp 0 --lora-scaled "$A:0.5,$B:0.7" 2>/dev/null | ascii)
"$HEARTH" serve -m $m --port 0 -t 1 --parallel 3 --lora-scaled "$A:0,$B:0" 2>"$tmp/log" & pid=$!
for _ in $(seq 100); do url=$(grep -o 'http://[0-9.:]*' "$tmp/log" | head -1); [[ -n $url ]] && break; sleep 0.1; done
req() { curl -s "$url/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"$p\", \"max_tokens\": 24, \"temperature\": 0$1}" | jq -r '.choices[0].text' | ascii; }
for round in 1 2; do   # three requests with different adapters in the batch at once, twice (then from the cache)
    req ', "lora": [{"id": 0, "scale": 1}]' >"$tmp/a" & r1=$!
    req '' >"$tmp/none" & r2=$!
    req ', "lora": [{"id": 0, "scale": 0.5}, {"id": 1, "scale": 0.7}]' >"$tmp/both"
    wait $r1 $r2
    check "round $round: lora-a alone, as run --lora [$(cat "$tmp/a")]" '[[ $(cat "$tmp/a") == "$only_a" ]]'
    check "round $round: no adapter (global scales 0), as the base [$(cat "$tmp/none")]" '[[ $(cat "$tmp/none") == "$base" ]]'
    check "round $round: both, as run --lora-scaled [$(cat "$tmp/both")]" '[[ $(cat "$tmp/both") == "$both" ]]'
done
list=$(curl -s "$url/lora-adapters")
check "GET /lora-adapters lists both at scale 0 [$list]" '[[ $(jq -c "[.[] | [.id, .scale]]" <<<"$list") == "[[0,0],[1,0]]" && $list == *llama-lora-b.gguf* ]]'
curl -s "$url/lora-adapters" -H 'Content-Type: application/json' -d '[{"id": 0, "scale": 1}]' >/dev/null
check "POST /lora-adapters sets the global scales: a plain request now gets lora-a" '[[ $(req "") == "$only_a" ]]'
code=$(curl -s -o /dev/null -w '%{http_code}' "$url/v1/completions" -d '{"prompt": "x", "lora": [{"id": 7, "scale": 1}]}')
check "an unknown adapter id is a 400 [$code]" '[[ $code == 400 ]]'
kill $pid; wait $pid 2>/dev/null; pid=

# --lora-merge: the adapters in the weights; the server lists them, refuses to change their scales, and answers as run
merged=$("$HEARTH" run -m $m -p "$p" -n 24 --temp 0 --lora-scaled "$ad" --lora-merge 2>/dev/null | ascii)
check "run --lora-merge: the adapters change the text [$merged]" '[[ -n $merged && $merged != "$base" ]]'
"$HEARTH" serve -m $m --port 0 -t 1 --lora-scaled "$ad" --lora-merge 2>"$tmp/log" & pid=$!
for _ in $(seq 100); do url=$(grep -o 'http://[0-9.:]*' "$tmp/log" | head -1); [[ -n $url ]] && break; sleep 0.1; done
check "serve --lora-merge: the text of run --lora-merge" '[[ $(req "") == "$merged" ]]'
check "serve --lora-merge lists the adapters [$(curl -s "$url/lora-adapters")]" \
    '[[ $(curl -s "$url/lora-adapters" | jq -c "[.[] | [.id, (.scale * 10 | round)]]") == "[[0,5],[1,7]]" ]]'
code=$(curl -s -o "$tmp/r" -w '%{http_code}' "$url/v1/completions" -d '{"prompt": "x", "lora": [{"id": 0, "scale": 1}]}')
check "serve --lora-merge: a request's lora is a 400 [$code $(cat "$tmp/r")]" '[[ $code == 400 ]] && grep -q "merged" "$tmp/r"'
code=$(curl -s -o "$tmp/r" -w '%{http_code}' "$url/lora-adapters" -d '[{"id": 0, "scale": 1}]')
check "serve --lora-merge: POST /lora-adapters is a 400 [$code]" '[[ $code == 400 ]] && grep -q "merged" "$tmp/r"'
kill $pid; wait $pid 2>/dev/null; pid=
check "--lora-merge without adapters" 'one_error_line "$HEARTH" run -m $m --lora-merge'

check "--lora-scaled without a scale" 'one_error_line "$HEARTH" run -m $m --lora-scaled data/models/llama-lora-a.gguf'
check "--lora with a missing file" 'one_error_line "$HEARTH" run -m $m --lora "$tmp/none.gguf"'
check "an adapter for another architecture" 'one_error_line "$HEARTH" golden -m $m -i data/golden/llama.golden -o "$tmp/x" --lora data/models/qwen3-lora.gguf'
check "info lists the adapters" '"$HEARTH" info -m $m --lora-scaled data/models/llama-lora-b.gguf:0.7 | matches "lora .*llama-lora-b.gguf: 4 weights, rank 4, alpha 4, scale 0.7"'
check "serve with an adapter for another model" 'one_error_line "$HEARTH" serve -m data/models/llama3.gguf --port 0 --lora data/models/llama-lora-a.gguf'
[[ $fail == 0 ]] && echo "all LoRA CLI checks passed"
exit $fail
