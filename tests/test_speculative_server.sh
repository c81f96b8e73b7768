#!/usr/bin/env bash
# `hearth serve` with speculative decoding: with concurrent requests in one batch (some speculative with the draft
# model, some with n-gram lookup, some not), every reply's text and token list equal the one the same request gets
# alone without speculation, for greedy and seeded sampling with every sampler field; /metrics counts drafted and
# accepted tokens; a hybrid (recurrent) target likewise; a drafter with another vocabulary and a bad "speculative"
# field are refused.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

start() { start_server "$@"; }   # start NAME ARGS...: sets URL
# req URL BODY MODE OUT: a completion with "speculative": {"mode": MODE} (none: the server's), text and tokens to OUT
req() {
    local body; body=$(jq -c --arg m "$3" 'if $m == "" then . else . + {speculative: {mode: $m}} end + {logprobs: 1}' <<<"$2")
    curl -s "$1/v1/completions" -H 'Content-Type: application/json' -d "$body" | jq -c '[.choices[0].text, .choices[0].logprobs.tokens, .choices[0].finish_reason]' >"$4"
}
metric() { curl -s "$1/metrics" | sed -n "s/^$2 //p"; }

BODIES=(
    '{"prompt":"Once upon","max_tokens":60,"temperature":0}'
    '{"prompt":"The dog","max_tokens":60,"seed":1,"temperature":0.8}'
    '{"prompt":"Lily","max_tokens":60,"seed":2,"temperature":1.2,"top_k":0,"top_p":0.9}'
    '{"prompt":"A cat","max_tokens":60,"seed":3,"temperature":0.7,"min_p":0.2,"typical_p":0.9}'
    '{"prompt":"One day","max_tokens":60,"seed":4,"repeat_penalty":1.3,"frequency_penalty":0.5,"presence_penalty":0.3,"repeat_last_n":16}'
    '{"prompt":"Tom","max_tokens":60,"seed":5,"logit_bias":{"300":4,"301":-100}}'
    '{"prompt":"She","max_tokens":80,"seed":6,"stop":["e t","!"]}'
    '{"prompt":"Ben","max_tokens":120,"seed":7,"response_format":{"type":"json_object"}}'
)
MODES=(draft ngram "" off draft "" ngram draft)

start draft -m data/models/llama-F16.gguf --model-draft data/models/llama-Q4_0.gguf --parallel 4 -c 512 -t 2
check "the drafter's memory is reported" 'grep -q "draft model: .* MiB" "$tmp/draft.log"'
for i in "${!BODIES[@]}"; do req "$URL" "${BODIES[$i]}" off "$tmp/alone.$i"; done
d0=$(metric "$URL" hearth_draft_tokens_total) a0=$(metric "$URL" hearth_draft_tokens_accepted_total)
for round in 1 2; do
    for i in "${!BODIES[@]}"; do req "$URL" "${BODIES[$i]}" "${MODES[$(( (i + round) % 8 ))]}" "$tmp/conc.$i" & done
    wait $(jobs -p | grep -v "^${pids[0]}$") 2>/dev/null
    for i in "${!BODIES[@]}"; do
        check "request $i, round $round (${MODES[$(( (i + round) % 8 ))]:-default}): same text and tokens" \
            '[[ $(jq -r ".[1] | length" "$tmp/alone.$i") -gt 0 ]] && cmp -s "$tmp/alone.$i" "$tmp/conc.$i"'
    done
done
d1=$(metric "$URL" hearth_draft_tokens_total) a1=$(metric "$URL" hearth_draft_tokens_accepted_total)
check "metrics: drafted ($d0 -> $d1) and accepted ($a0 -> $a1) move" '(( ${d1%.*} > ${d0%.*} && ${a1%.*} > ${a0%.*} && ${a1%.*} <= ${d1%.*} ))'
check "a bad speculative mode: 400" '[[ $(curl -s -o /dev/null -w "%{http_code}" "$URL/v1/completions" -d "{\"prompt\":\"x\",\"speculative\":{\"mode\":\"maybe\"}}") == 400 ]]'

# n-gram lookup by default on stories260K, a prompt the story repeats; one request opts out.
P="Once upon a time there was a little girl named Lily. She loved to play in the park with her dog. One day Lily went to the park"
start ngram -m data/models/stories260K.gguf --spec ngram --parallel 3 -c 512 -t 2
for s in 1 2 3; do req "$URL" "{\"prompt\":\"$P\",\"max_tokens\":120,\"seed\":$s}" off "$tmp/nalone.$s"; done
for s in 1 2 3; do req "$URL" "{\"prompt\":\"$P\",\"max_tokens\":120,\"seed\":$s}" "$([[ $s == 2 ]] && echo off)" "$tmp/nconc.$s" & done
wait $(jobs -p | grep -v -e "^${pids[0]}$" -e "^${pids[1]}$") 2>/dev/null
for s in 1 2 3; do check "ngram server, seed $s: same text and tokens" '[[ -s $tmp/nalone.$s ]] && cmp -s "$tmp/nalone.$s" "$tmp/nconc.$s"'; done
check "ngram server: accepted tokens" '(( $(metric "$URL" hearth_draft_tokens_accepted_total | cut -d. -f1) > 0 ))'
check "draft mode without a drafter: 400" '[[ $(curl -s -o /dev/null -w "%{http_code}" "$URL/v1/completions" -d "{\"prompt\":\"x\",\"speculative\":{\"mode\":\"draft\"}}") == 400 ]]'

# A hybrid (recurrent) target: drafting slots and plain ones in one batch, each reply as alone without speculation.
start hybrid -m data/models/qwen35.gguf --model-draft data/models/qwen35.gguf --parallel 3 -c 1024 -t 2
for s in 1 2 3; do req "$URL" "{\"prompt\":\"$P\",\"max_tokens\":150,\"seed\":$s,\"temperature\":0.6}" off "$tmp/halone.$s"; done
for s in 1 2 3; do req "$URL" "{\"prompt\":\"$P\",\"max_tokens\":150,\"seed\":$s,\"temperature\":0.6}" "$([[ $s == 2 ]] && echo off)" "$tmp/hconc.$s" & done
wait $(jobs -p | grep -v -e "^${pids[0]}$" -e "^${pids[1]}$" -e "^${pids[2]}$") 2>/dev/null
for s in 1 2 3; do check "hybrid server, seed $s: same text and tokens" '[[ -s $tmp/halone.$s ]] && cmp -s "$tmp/halone.$s" "$tmp/hconc.$s"'; done
check "hybrid server: accepted tokens" '(( $(metric "$URL" hearth_draft_tokens_accepted_total | cut -d. -f1) > 0 ))'

check "another vocabulary: one line" 'one_error_line "$HEARTH" serve --port 0 -m data/models/llama-F16.gguf --model-draft data/models/qwen2.gguf'
exit $fail
