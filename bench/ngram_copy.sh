#!/usr/bin/env bash
# bench/ngram_copy.sh — n-gram lookup on a reply that copies its prompt (issue #42: >= 2x plain decode), in
# `hearth serve` and, when given, llama-server's n-gram speculation (`--spec-type ngram-simple`) on the same
# file and token ids. The prompt is the model's own greedy continuation of "Once upon a time" (N tokens, as
# token ids: a `synth --layer-scale` model's successor orbits are not the tokenizer's canonical split of their
# text, so the passage goes in as ids), between two copies of "Once upon a time": the reply retells the
# passage. Per round: plain and n-gram decode of N tokens (greedy; hearth's replies checked identical), then
# the same on llama-server without and with its lookup. Not a test: its numbers mean something side by side.
#   bench/ngram_copy.sh MODEL.gguf [LLAMA_SERVER] [ROUNDS]    (HEARTH: default build/hearth; N: default 128)
set -euo pipefail
model=${1:?usage: bench/ngram_copy.sh MODEL.gguf [LLAMA_SERVER] [ROUNDS]} ls=${2:-} rounds=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
hearth=${HEARTH:-$here/../build/hearth} n=${N:-128} port=${PORT:-18741}
tmp=$(mktemp -d); pid=; trap '[[ -n $pid ]] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT

"$hearth" run -m "$model" -p "Once upon a time" -n "$n" --temp 0 -t 2 --json 2>/dev/null |
    jq -c 'select(.token != null) | .token' >"$tmp/passage"
start=$("$hearth" tokenize -m "$model" "Once upon a time")
again=$("$hearth" tokenize -m "$model" --no-bos "Once upon a time")
ids=$( (printf '%s\n' $start; cat "$tmp/passage"; printf '%s\n' $again) | jq -s -c '.')
echo "prompt: $(jq length <<<"$ids") token ids (a passage of $(wc -l <"$tmp/passage") between two \"Once upon a time\")"

serve() {   # serve ARGS...: starts a server on $port and waits until it answers
    "$@" >"$tmp/server.log" 2>&1 & pid=$!
    for _ in $(seq 600); do curl -sf "localhost:$port/health" >/dev/null && return 0; sleep 0.2; done
    cat "$tmp/server.log"; exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
hearth_req() {   # hearth_req MODE: decode tokens/s, accepted/drafted; the reply's text into $tmp/text.MODE
    local r
    r=$(curl -sf "localhost:$port/v1/completions" -H 'Content-Type: application/json' -d "{\"prompt\": $ids,
        \"max_tokens\": $n, \"temperature\": 0, \"speculative\": {\"mode\": \"$1\"}}")
    jq -r '.choices[0].text' <<<"$r" >"$tmp/text.$1"
    jq -r '"\(.timings.predicted_n * 1000 / .timings.predicted_ms)"' <<<"$r"
}
llama_req() {   # decode tokens/s and accepted/drafted of llama-server's /completion
    curl -sf "localhost:$port/completion" -H 'Content-Type: application/json' -d "{\"prompt\": $ids,
        \"n_predict\": $n, \"temperature\": 0, \"top_k\": 1, \"cache_prompt\": false}" |
        jq -r '"\(.timings.predicted_per_second) \(.timings.draft_n_accepted // 0)/\(.timings.draft_n // 0)"'
}
metric() { curl -sf "localhost:$port/metrics" | awk -v k="$1" '$1 == k {print $2}'; }
for r in $(seq "$rounds"); do
    serve "$hearth" serve -m "$model" -t 2 --port "$port"
    hearth_req off >/dev/null   # warm-up (and the prompt in its cache for both modes)
    off=$(hearth_req off)
    d0=$(metric hearth_draft_tokens_total) a0=$(metric hearth_draft_tokens_accepted_total)
    ng=$(hearth_req ngram)
    d1=$(metric hearth_draft_tokens_total) a1=$(metric hearth_draft_tokens_accepted_total)
    stop
    cmp -s "$tmp/text.off" "$tmp/text.ngram" || { echo "FAIL: the n-gram reply differs from plain decoding"; exit 1; }
    line="round $r: hearth plain $(printf %.1f "$off") t/s, ngram $(printf %.1f "$ng") t/s"
    line+=" ($(awk -v a="$a1" -v b="$a0" 'BEGIN {print a - b}')/$(awk -v a="$d1" -v b="$d0" 'BEGIN {print a - b}') accepted)"
    line+=", $(awk -v a="$ng" -v b="$off" 'BEGIN {printf "%.2f", a / b}')x"
    if [[ -n $ls ]]; then
        serve "$ls" -m "$model" -t 2 -c 4096 --port "$port"
        llama_req >/dev/null; read -r lo _ < <(llama_req); stop
        serve "$ls" -m "$model" -t 2 -c 4096 --port "$port" --spec-type ngram-simple
        llama_req >/dev/null; read -r lg lacc < <(llama_req); stop
        line+="; llama-server plain $(printf %.1f "$lo"), ngram-simple $(printf %.1f "$lg") ($lacc accepted)"
        line+=", $(awk -v a="$lg" -v b="$lo" 'BEGIN {printf "%.2f", a / b}')x; hearth ngram / llama ngram"
        line+=" $(awk -v a="$ng" -v b="$lg" 'BEGIN {printf "%.2f", a / b}')"
    fi
    echo "$line"
done
