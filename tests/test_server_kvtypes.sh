#!/usr/bin/env bash
# test_server_kvtypes.sh — hearth serve with quantized K and V caches (-ctk q4_0 -ctv q4_0, and q8_0 K over a bf16 V):
# a prompt another request computed is restored from the shared prompt cache (cache_n > 0) with the same greedy
# text as without it (cache_prompt: false), a restarted server starts warm from its --prompt-cache directory, and
# a server with other cache types does not take those entries (same bytes a token is not the same layout).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
command -v curl >/dev/null && command -v jq >/dev/null || { echo "FAIL: curl and jq needed"; exit 1; }
tmp=$(mktemp -d)
pid=""
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

start() {   # start ARGS...: hearth serve on a free port with the llama fixture; sets URL
    pids=(); start_server srv -m data/models/llama.gguf --parallel 2 -c 1024 -t 1 "$@"; pid=${pids[0]}
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null; pid=""; }
complete() {   # complete PROMPT [CACHE_PROMPT]: prints "cache_n<TAB>text"
    curl -s "$URL/v1/completions" -H 'Content-Type: application/json' \
        -d "$(jq -n --arg p "$1" --argjson c "${2:-true}" '{prompt: $p, max_tokens: 12, temperature: 0, cache_prompt: $c}')" |
        jq -r '"\(.timings.cache_n)\t\(.choices[0].text)"'
}
P=$(printf 'Once upon a time there was a little dog who liked to play in the park with his friends. %.0s' $(seq 12))

for kv in "q4_0 q4_0" "q8_0 bf16"; do
    set -- $kv
    rm -rf "$tmp/pc"
    start -ctk "$1" -ctv "$2" --prompt-cache "$tmp/pc"
    cold=$(complete "$P Then")
    warm=$(complete "$P The dog")
    plain=$(complete "$P The dog" false)
    check "K $1 V $2: cold request evaluates everything ($cold)" '[[ ${cold%%	*} == 0 && -n ${cold#*	} ]]'
    check "K $1 V $2: the next one starts from the cached prefix ($warm)" '[[ ${warm%%	*} -gt 100 ]]'
    check "K $1 V $2: restored and uncached give the same text" '[[ -n ${plain#*	} && ${warm#*	} == "${plain#*	}" && ${plain%%	*} == 0 ]]'
    stop
    start -ctk "$1" -ctv "$2" --prompt-cache "$tmp/pc"
    again=$(complete "$P The dog")
    check "K $1 V $2: a restarted server starts warm, same text ($again)" '[[ ${again%%	*} -gt 100 && ${again#*	} == "${plain#*	}" ]]'
    stop
done
start -ctk bf16 -ctv q8_0 --prompt-cache "$tmp/pc"   # the last entries are K q8_0 V bf16: same size, other layout
other=$(complete "$P The dog")
check "other cache types do not restore those entries ($other)" '[[ ${other%%	*} == 0 ]]'
stop
exit $fail
