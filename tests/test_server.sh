#!/usr/bin/env bash
# `hearth serve` end to end: starts servers on free loopback ports (the embedded model for generation, the BERT
# encoder for embeddings), runs server/test_server.mjs with the official openai npm client against them,
# server/test_ollama.mjs with the ollama npm client, server/test_structured.mjs (response_format, grammar; replies
# validated with ajv), server/test_tools.mjs (tool calls in the generic, Hermes and Llama 3 formats, on servers with
# Qwen- and Llama-3.1-style templates), server/test_anthropic.mjs with the @anthropic-ai/sdk client, server/test_prompt_cache.mjs (shared and persistent
# prompt cache, on servers it starts itself), server/test_chat_page.mjs (the page at GET / in headless chromium,
# via puppeteer-core; screenshot in the build directory), server/test_endpoints.mjs (tokenize, metrics, CORS, HEAD) with fetch and server/test_hardening.mjs with raw sockets,
# server/test_reasoning.mjs (reasoning_content / thinking blocks / Ollama thinking, harmony tool calls; its own servers on
# the qwen35 and gpt-oss fixtures with their models' templates), server/test_long_prefill.mjs (requests whose prompt outlives a 1 s idle timeout on every API, progress events, a
# client leaving mid-prompt, the header and body deadlines; its own server on a slow synthesized model), then checks
# the servers are still up and stop cleanly. The client is installed into server/node_modules (gitignored).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then echo "FAIL: node/npm not found (apt-get install -y nodejs npm)"; exit 1; fi
if [[ ! -d "$here/server/node_modules/openai" || ! -d "$here/server/node_modules/ollama" || ! -d "$here/server/node_modules/ajv-formats" || ! -d "$here/server/node_modules/@anthropic-ai/sdk" || ! -d "$here/server/node_modules/puppeteer-core" ]]; then
    (cd "$here/server" && npm install --no-audit --no-fund --loglevel=error >/dev/null) || { echo "FAIL: npm install (openai, ollama, @anthropic-ai/sdk, ajv, puppeteer-core)"; exit 1; }
fi
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

# start NAME ARGS...: runs hearth serve on a free port; sets URL to its address
start() { start_server "$@"; }

start gen --parallel 8 -c 1024 -t 1 --api-key sekrit
GEN_URL=$URL
start tools --parallel 2 -c 2048 -t 1 --api-key sekrit --chat-template "$here/server/hermes-tools.jinja"
TOOLS_URL=$URL
start llama3 --parallel 2 -c 2048 -t 1 --api-key sekrit --chat-template "$here/server/llama3-tools.jinja"
LLAMA3_URL=$URL
EMB_URL=""
if "$HEARTH" info -m data/models/bert.gguf 2>/dev/null | matches encoder; then
    start emb -m data/models/bert.gguf -t 1
    EMB_URL=$URL
fi

GEN_URL=$GEN_URL EMB_URL=$EMB_URL API_KEY=sekrit timeout 300 node "$here/server/test_server.mjs" || fail=1
# Ollama's API through its own client
GEN_URL=$GEN_URL EMB_URL=$EMB_URL API_KEY=sekrit timeout 120 node "$here/server/test_ollama.mjs" || fail=1
# /tokenize, /detokenize, /metrics, CORS, HEAD
GEN_URL=$GEN_URL API_KEY=sekrit timeout 300 node "$here/server/test_structured.mjs" || fail=1
GEN_URL=$GEN_URL TOOLS_URL=$TOOLS_URL LLAMA3_URL=$LLAMA3_URL API_KEY=sekrit timeout 300 node "$here/server/test_tools.mjs" || fail=1
GEN_URL=$GEN_URL API_KEY=sekrit timeout 120 node "$here/server/test_anthropic.mjs" || fail=1
HEARTH=$HEARTH timeout 120 node "$here/server/test_prompt_cache.mjs" || fail=1
GEN_URL=$GEN_URL API_KEY=sekrit SHOT="$HEARTH_BUILD/chat-page.png" timeout 120 node "$here/server/test_chat_page.mjs" || fail=1
GEN_URL=$GEN_URL API_KEY=sekrit timeout 120 node "$here/server/test_endpoints.mjs" || fail=1
HEARTH=$HEARTH timeout 120 node "$here/server/test_reasoning.mjs" || fail=1
# prompts that take several idle timeouts: a tiny-llama deep enough that ~1,800 tokens take seconds on one thread
if "$HEARTH" synth --shape tiny-llama --type Q4_0 --layers "$(slow_layers 48)" -o "$tmp/slow.gguf" -t 1 2>/dev/null; then
    HEARTH=$HEARTH SLOW_MODEL=$tmp/slow.gguf timeout 240 node "$here/server/test_long_prefill.mjs" || fail=1
else echo "FAIL: hearth synth (the slow model)"; fail=1; fi
# hostile clients: smuggling shapes, strict JSON, auth before routing, 1100 idle/slow connections
(ulimit -n "$(ulimit -Hn)" 2>/dev/null; GEN_URL=$GEN_URL API_KEY=sekrit timeout 120 node "$here/server/test_hardening.mjs") || fail=1

# --cors-origin: one origin named (and Vary: Origin), or none at all
start cors -t 1 --cors-origin https://app.example
check "--cors-origin names the one origin allowed" '[[ $(curl -si "$URL/health" | tr -d "\r" | grep -i "^access-control-allow-origin:") == *"https://app.example" ]]'
start nocors -t 1 --cors-origin none
check "--cors-origin none: no CORS header" '! curl -si "$URL/health" | matches -i "^access-control"'

check "gen server still running" 'kill -0 ${pids[0]}'
check "health after the tests" '[[ $(curl -s "$GEN_URL/health") == *'"'"'"status":"ok"'"'"'* ]]'
check "one log line per request" 'grep -qE "^POST /v1/chat/completions 200 [0-9.]+ ms prompt=5" "$tmp/gen.log"'
check "a disconnected stream is logged as cancelled" 'grep -qE "^POST /v1/completions 499 .*\(cancelled\)" "$tmp/gen.log"'
check "an encoder says what it serves" '[[ -z $EMB_URL ]] || grep -q "embeddings: inputs of up to" "$tmp/emb.log"'
check "bad requests logged as 400" 'grep -qE "^POST /v1/chat/completions 400 " "$tmp/gen.log"'
kill -INT "${pids[0]}"
for _ in $(seq 100); do kill -0 "${pids[0]}" 2>/dev/null || break; sleep 0.05; done
check "SIGINT stops the server" '! kill -0 ${pids[0]} 2>/dev/null'
wait "${pids[0]}"; rc=$?
check "clean exit status ($rc)" '[[ $rc -eq 0 ]]'
if [[ $fail -ne 0 ]]; then echo "--- gen server log (tail)"; tail -20 "$tmp/gen.log"; fi

[[ $fail -eq 0 ]] && echo "all server checks passed"
exit $fail
