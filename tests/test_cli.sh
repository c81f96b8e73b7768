#!/usr/bin/env bash
# The CLI's contracts: the demo runs on the embedded model, the same seed gives the same text, bad flags
# and bad files give one "error:" line and exit 1, and `info`/`tokenize` print what they should.
set -uo pipefail
source "$(dirname "$0")/lib.sh"

a=$("$HEARTH" run -p "Once upon a time" -n 40 --seed 7 2>/dev/null)
b=$("$HEARTH" run -p "Once upon a time" -n 40 --seed 7 -t 1 2>/dev/null)
check "run produces text" '[[ ${#a} -gt 40 ]]'
check "same seed, same text (1 vs default threads)" '[[ "$a" == "$b" ]]'
stats=$("$HEARTH" run -n 8 --seed 1 2>&1 >/dev/null)
check "stats line" '[[ $stats == prefill*ms/tok*decode*ms/tok*ctx* ]]'
g=$("$HEARTH" run -p "" -n 20 --temp 0 2>/dev/null)
check "greedy from BOS" '[[ $g == " Once upon a time, there was a little girl named Lily."* ]]'

check "unknown flag" 'one_error_line "$HEARTH" run --bogus 1'
check "bad number" 'one_error_line "$HEARTH" run -n abc'
check "missing model" 'one_error_line "$HEARTH" run -m /nonexistent.gguf'
check "not a gguf" 'one_error_line "$HEARTH" info -m data/README.md'
check "unknown command" 'one_error_line "$HEARTH" frobnicate'

info=$("$HEARTH" info -m data/models/llama-Q4_K_M.gguf)
check "info names the architecture" '[[ $info == *"architecture llama"* ]]'
check "info counts tensor types" '[[ $info == *Q4_K* && $info == *Q6_K* ]]'

ids=$("$HEARTH" tokenize -m data/models/stories260K.gguf "Once upon a time")
check "tokenize with BOS" '[[ $ids == "1 "* ]]'
ids2=$("$HEARTH" tokenize --no-bos -m data/models/stories260K.gguf "Once upon a time")
check "tokenize --no-bos" '[[ "1 $ids2" == "$ids" ]]'

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$HEARTH" golden -m data/models/llama.gguf -i data/golden/llama.golden -o "$tmp/out.golden"
check "golden writes a file of the reference's size" '[[ $(stat -c %s "$tmp/out.golden") -eq $(stat -c %s data/golden/llama.golden) ]]'

"$HEARTH" quantize data/models/stories260K.gguf "$tmp/q8.gguf" Q8_0 2>/dev/null
check "quantize writes a loadable file" '"$HEARTH" info -m "$tmp/q8.gguf" | matches "Q8_0"'
check "quantize: unknown type" 'one_error_line "$HEARTH" quantize data/models/llama.gguf "$tmp/x.gguf" Q9_9'
check "quantize: bad input" 'one_error_line "$HEARTH" quantize data/README.md "$tmp/x.gguf" Q8_0'

# --cache-type (K and V), -ctk / -ctv: every command that makes a generation context takes them; a bad value is one error line
for cmd in run chat serve bench perplexity; do
    check "$cmd --cache-type bad value" 'one_error_line "$HEARTH" $cmd --cache-type q5_0 && [[ $LAST_ERR == *--cache-type*q5_0* ]]'
    check "$cmd -ctv bad value" 'one_error_line "$HEARTH" $cmd -ctv q4 && [[ $LAST_ERR == *-ctv*q4* ]]'
    check "$cmd --help documents --cache-type and -ctk" '"$HEARTH" $cmd --help | matches -- "--cache-type" && "$HEARTH" $cmd --help | matches -- "-ctk"'
done
check "--cache-type without a value" 'one_error_line "$HEARTH" run --cache-type'
check "q8_0 refused for heads of 8 (stories260K)" 'one_error_line "$HEARTH" run --cache-type q8_0 -n 4 && [[ $LAST_ERR == *"multiples of 32"* ]]'
check "q8_0 refused by serve too" 'one_error_line "$HEARTH" serve --cache-type q8_0 --port 0'
g32=$("$HEARTH" run -p "" -n 20 --temp 0 --cache-type f32 2>/dev/null)
check "greedy from BOS with an f32 cache" '[[ $g32 == " Once upon a time, there was a little girl named Lily."* ]]'
L=data/models/llama.gguf
q8a=$("$HEARTH" run -m $L -p "Hello world" -n 24 --temp 0 --cache-type q8_0 -t 1 2>/dev/null); rc=$?
q8b=$("$HEARTH" run -m $L -p "Hello world" -n 24 --temp 0 --cache-type q8_0 -t 2 2>/dev/null)
check "run --cache-type q8_0 generates" '[[ $rc -eq 0 && ${#q8a} -gt 10 ]]'
check "run --cache-type q8_0: same text with 1 and 2 threads" '[[ "$q8a" == "$q8b" ]]'
b8=$("$HEARTH" bench -m $L -p 16 -n 4 -r 1 -c 16384 --no-bw --cache-type q8_0 2>&1)
b16=$("$HEARTH" bench -m $L -p 16 -n 4 -r 1 -c 16384 --no-bw 2>&1)
b40=$("$HEARTH" bench -m $L -p 16 -n 4 -r 1 -c 16384 --no-bw -ctk q4_0 -ctv bf16 2>&1)
kv8=$(printf '%s\n' "$b8" | sed -n 's/^rss after load:.*KV K Q8_0 V Q8_0 \([0-9.]*\) MiB.*/\1/p')
kv16=$(printf '%s\n' "$b16" | sed -n 's/^rss after load:.*KV K F16 V F16 \([0-9.]*\) MiB.*/\1/p')
kv40=$(printf '%s\n' "$b40" | sed -n 's/^rss after load:.*KV K Q4_0 V BF16 \([0-9.]*\) MiB.*/\1/p')
check "bench --cache-type q8_0 names it and its KV is 17/32 of f16's ($kv8 vs $kv16 MiB)" \
    'awk -v a="$kv8" -v b="$kv16" "BEGIN { exit !(a > 0 && b > 0 && a / b > 0.52 && a / b < 0.54) }"'
check "bench -ctk q4_0 -ctv bf16 names them and its KV is 41/64 of f16's ($kv40 vs $kv16 MiB)" \
    'awk -v a="$kv40" -v b="$kv16" "BEGIN { exit !(a > 0 && a / b > 0.635 && a / b < 0.646) }"'
check "bench -ctk f32 -ctv f32 gives an F32 cache (both flags equal to the struct's zero)" \
    '"$HEARTH" bench -m $L -p 8 -n 2 -r 1 --no-bw -ctk f32 -ctv f32 2>&1 | matches "^rss after load:.*KV K F32 V F32 "'
check "bench table keeps its columns with q8_0" '[[ $(printf "%s\n" "$b8" | grep -c "^| llama .* | *pp16 |") -eq 1 ]]'

# the newcomer's paper cuts
check "--version" '[[ $("$HEARTH" --version) == "hearth "[0-9]*.[0-9]*.[0-9]*" (kernels: "* ]]'
check "help CMD is CMD --help" '[[ "$("$HEARTH" help run)" == "$("$HEARTH" run --help)" ]]'
check "help of an unknown command" 'one_error_line "$HEARTH" help frobnicate'
p1=$("$HEARTH" run -p "Once upon a time" -n 16 --seed 3 2>/dev/null)
echo -n "Once upon a time" > "$tmp/prompt.txt"
p2=$("$HEARTH" run -f "$tmp/prompt.txt" -n 16 --seed 3 2>/dev/null)
p3=$(printf "Once upon a time" | "$HEARTH" run -n 16 --seed 3 2>/dev/null)
check "run -f FILE reads the prompt" '[[ -n $p1 && "$p1" == "$p2" ]]'
check "run reads a piped prompt" '[[ "$p1" == "$p3" ]]'
check "-p and -f together refused" 'one_error_line "$HEARTH" run -p x -f "$tmp/prompt.txt"'
stats=$("$HEARTH" run -n 4 --seed -1 2>&1 >/dev/null </dev/null)
check "--seed -1 picks a seed the stats line prints" '[[ $stats == *"seed "[0-9]* ]]'
for f in --top-p --min-p --typical-p; do
    check "$f 1.5 refused" 'one_error_line "$HEARTH" run $f 1.5 && [[ $LAST_ERR == *"0 to 1"* ]]'
    check "$f -0.1 refused" 'one_error_line "$HEARTH" run $f -0.1'
done
warn=$("$HEARTH" run -n 1 -c 4096 --seed 1 2>&1 >/dev/null </dev/null)
check "-c past the trained context warns" '[[ $warn == *"warning: -c 4096 is beyond the"* ]]'
"$HEARTH" serve --host 127.0.0.1 --port 0 2>"$tmp/serve.log" &
spid=$!
for _ in $(seq 100); do port=$(grep -o "127.0.0.1:[0-9]*" "$tmp/serve.log" | head -1 | cut -d: -f2); [[ -n $port ]] && break; sleep 0.05; done
check "a busy port: one error line" 'one_error_line "$HEARTH" serve --host 127.0.0.1 --port "$port" && [[ $LAST_ERR == *"port $port"* ]]'
kill $spid; wait $spid 2>/dev/null

check "tokenize --pieces names special tokens" \
    '[[ $("$HEARTH" tokenize -m data/tokenizer/ggml-vocab-qwen2.gguf --special --no-bos --pieces "<|im_start|>hi") == *":'"'"'<|im_start|>'"'"'"* ]]'
chat_err=$(echo "Once upon a time" | "$HEARTH" chat --seed 1 2>&1 >/dev/null)
check "chat without a template says so and stops at 256 tokens" \
    '[[ $chat_err == *"no chat template"*"at most 256 tokens"* && $chat_err =~ decode\ ([0-9]+)\ tok && ${BASH_REMATCH[1]} -le 256 ]]'

bj=$("$HEARTH" bench -p 8,16 -n 4 -r 1 -o json --no-bw 2>/dev/null)
check "bench -p list -o json: one object per test" '[[ $(grep -c "\"test\": \"pp8\"\|\"test\": \"pp16\"\|\"test\": \"tg4\"" <<< "$bj") -eq 3 && $bj == "["*"]" ]]'
bc=$("$HEARTH" bench -p 8 -n 4 -r 1 -o csv --no-bw 2>/dev/null)
check "bench -o csv: a header and two rows, nothing else on stdout" '[[ $(wc -l <<< "$bc") -eq 3 && $bc == model,size_bytes,* ]]'
check "bench -o xml refused" 'one_error_line "$HEARTH" bench -o xml'

[[ $fail -eq 0 ]] && echo "all CLI checks passed"
exit $fail
