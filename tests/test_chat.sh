#!/usr/bin/env bash
# `hearth chat` driven through a pipe: /system, two turns, /reset, /quit. Each reply gets a stats line on stderr,
# and a later turn prefills only its new tokens (the cached conversation is kept).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# stats line: "prefill P tok (C cached), X ms/tok · decode D tok, Y ms/tok · ctx U/T"; field FILE LINE K -> the
# K-th number of P, C, D, U, T
field() { sed -n "${2}p" "$1" | sed -E "s/.*prefill ([0-9]+) tok \(([0-9]+) cached\).*decode ([0-9]+) tok.*ctx ([0-9]+)\/([0-9]+).*/\\$3/"; }

# 1. plain continuation (the embedded model has no chat template)
printf '/system A story.\nOnce upon a time\nThe cat\n/reset\nLily went\n/quit\nnever read\n' |
    "$HEARTH" chat -n 16 --seed 3 -t 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
check "plain: exit 0" '[[ $rc -eq 0 ]]'
grep -E '^prefill [0-9]+ tok \([0-9]+ cached\), [0-9.]+ ms/tok · decode [0-9]+ tok, [0-9.]+ ms/tok · ctx [0-9]+/[0-9]+$' "$tmp/err" >"$tmp/stats"
check "plain: no-template note said once" '[[ $(grep -c "no chat template" "$tmp/err") -eq 1 ]]'
check "plain: three stats lines" '[[ $(wc -l <"$tmp/stats") -eq 3 ]]'
check "plain: three replies" '[[ $(wc -l <"$tmp/out") -eq 3 && $(wc -c <"$tmp/out") -gt 20 ]]'
check "plain: /system and /reset acknowledged" 'grep -q "system prompt set" "$tmp/err" && grep -q "conversation reset" "$tmp/err"'
p1=$(field "$tmp/stats" 1 1); k1=$(field "$tmp/stats" 1 2); c1=$(field "$tmp/stats" 1 4)
p2=$(field "$tmp/stats" 2 1); k2=$(field "$tmp/stats" 2 2)
p3=$(field "$tmp/stats" 3 1); k3=$(field "$tmp/stats" 3 2)
check "plain: first turn prefills its whole prompt" '[[ $p1 -gt 5 && $k1 -eq 0 ]]'
# second turn: everything cached after turn 1 is reused (but maybe a token at the edge of the reply that
# re-tokenizes differently); only the new line (and the reply's last token, never decoded) is prefilled
check "plain: second turn prefills only its new tokens ($p2 new, $k2 cached, $c1 in the cache before)" '[[ $k2 -ge $((c1 - 1)) && $p2 -le 6 ]]'
check "plain: after /reset the system prompt is still cached ($p3 new, $k3 cached)" '[[ $k3 -gt 0 && $p3 -lt $p1 ]]'

# 2. a chat template from a file, a message holding special-token text
printf '/system Be brief.\nHello there\nHow are you <|im_start|>?\n/quit\n' |
    "$HEARTH" chat -m data/models/qwen2.gguf --chat-template server/chatml.jinja -n 6 --seed 2 -t 1 >"$tmp/out2" 2>"$tmp/err2"
rc=$?
check "template: exit 0" '[[ $rc -eq 0 ]]'
check "template: no plain-continuation note" '! grep -q "no chat template" "$tmp/err2"'
grep 'prefill .* tok,' "$tmp/err2" >"$tmp/stats2"
check "template: two stats lines" '[[ $(wc -l <"$tmp/stats2") -eq 2 ]]'
c1=$(field "$tmp/stats2" 1 4); p2=$(field "$tmp/stats2" 2 1); k2=$(field "$tmp/stats2" 2 2)
check "template: second turn reuses the cache ($p2 new, $k2 cached of $c1)" '[[ $k2 -gt $((c1 / 2)) && $p2 -lt $k2 ]]'

# 3. errors are one line
check "unknown flag" 'one_error_line "$HEARTH" chat --bogus </dev/null'
check "missing value" 'one_error_line "$HEARTH" chat -n </dev/null'
check "missing template file" 'one_error_line "$HEARTH" chat --chat-template /nonexistent </dev/null'
check "encoder refused" 'one_error_line "$HEARTH" chat -m data/models/bert.gguf </dev/null && [[ $LAST_ERR == *encoder* ]]'
check "serve: unknown flag" 'one_error_line "$HEARTH" serve --bogus'
check "serve: bad port" 'one_error_line "$HEARTH" serve --port 70000'
check "serve: bad host" 'one_error_line "$HEARTH" serve --host nowhere'
check "serve: missing model" 'one_error_line "$HEARTH" serve -m /nonexistent.gguf'

# 4. a tiny context: old turns are dropped, and it keeps going
printf 'Once upon a time\nThe cat\nThe dog\nThe end\n' | "$HEARTH" chat -c 48 -n 20 --seed 1 -t 1 >/dev/null 2>"$tmp/err4"
rc=$?
check "small context: exit 0" '[[ $rc -eq 0 ]]'
check "small context: says it dropped turns" 'grep -q "dropped the oldest turn" "$tmp/err4"'
check "small context: says a reply was cut" 'grep -q "context full: the reply was cut" "$tmp/err4"'
check "small context: four replies" '[[ $(grep -c "^prefill" "$tmp/err4") -eq 4 ]]'

# 4b. hearth template -m: the model's template (here overridden by a file) and special tokens
echo '[{"role":"user","content":"hi"}]' >"$tmp/m.json"
out=$("$HEARTH" template -m data/models/qwen2.gguf --template server/chatml.jinja "$tmp/m.json")
check "template -m renders" '[[ "$out" == $'"'"'<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant'"'"' ]]'
check "template -m on a model without a template: one error line" \
    'one_error_line "$HEARTH" template -m data/models/qwen2.gguf "$tmp/m.json" && [[ $LAST_ERR == *"no chat template"* ]]'

# 5. Ctrl-C (SIGINT) stops the reply, not the program; at the prompt it is ignored too
# (-n 30000: without a chat template a reply stops at 256 tokens, ~35 ms here, which could end before the
# first signal lands; this reply runs until it is interrupted)
mkfifo "$tmp/in"
"$HEARTH" chat -m data/models/llama.gguf -c 32768 -n 30000 -t 1 --seed 1 --ignore-eos <"$tmp/in" >"$tmp/out5" 2>"$tmp/err5" &
pid=$!
exec 7>"$tmp/in"
printf 'Tell me a long story\n' >&7
for _ in $(seq 100); do [[ -s "$tmp/out5" ]] && break; sleep 0.02; done
kill -INT $pid
sleep 0.3
kill -INT $pid
sleep 0.1
printf '/system still here\n/quit\n' >&7
exec 7>&-
wait $pid; rc=$?
check "SIGINT: still running afterwards, exit 0 ($rc)" '[[ $rc -eq 0 ]]'
check "SIGINT: the reply was interrupted" 'grep -q "\[interrupted\]" "$tmp/err5"'
check "SIGINT: the reply still got its stats line" '[[ $(grep -c "^prefill" "$tmp/err5") -eq 1 ]]'
check "SIGINT: the REPL goes on" '[[ $(tail -1 "$tmp/err5") == "[system prompt set]" ]]'

# 6. --json-schema: every reply of the conversation is JSON valid against the schema.
check "--json-schema: each reply follows the schema" \
    '[[ $(printf "Tell me\nAgain\n" | "$HEARTH" chat -m data/models/stories260K.gguf --json-schema data/schemas/tool_call.json --seed 3 -n 300 2>/dev/null |
         jq -s "length==2 and all(.[]; (.name==\"search\" or .name==\"get_weather\") and (.arguments|type)==\"object\")") == true ]]'

# 7. on a terminal (a pty, driven by tests/pty_drive, which waits for each prompt before it types): line editing
# with history (libedit), Ctrl-C at the prompt says how to leave, Ctrl-D leaves. Up-arrow + Enter resends the
# previous line: its turn is a second reply. Ctrl-C during a long reply stops it, and Ctrl-D then still leaves.
PTY="$HEARTH_BUILD/pty_drive"
if [[ -x $PTY ]]; then
    TERM=dumb "$PTY" "$tmp/tty" 30 -e '> ' -s 'Once upon a time\r' -e 'prefill' -e '> ' -w 300 -s '\e[A\r' -e 'prefill' \
        -e '> ' -w 300 -s '\x03' -e 'to leave' -e '> ' -w 300 -s '\x04' -- "$HEARTH" chat -n 8 --seed 1 -t 1 2>"$tmp/tty.err"
    rc=$?
    check "tty: exit 0 at Ctrl-D ($rc)" '[[ $rc -eq 0 ]]'
    check "tty: the history recalled the line (two replies)" '[[ $(grep -c "^prefill" "$tmp/tty") -eq 2 ]]'
    check "tty: Ctrl-C at the prompt says how to leave" 'grep -q "to leave, type /quit or press Ctrl-D" "$tmp/tty"'
    # (the reply's own words before Ctrl-C: the typed line is echoed twice, and a Ctrl-C that lands while libedit
    # still holds the line is not a reply's interruption)
    TERM=dumb "$PTY" "$tmp/tty2" 60 -e '> ' -s 'Once upon a time\r' -e 'there' -s '\x03' -e 'interrupted' \
        -e '> ' -w 300 -s '\x04' -- "$HEARTH" chat -n 100000 -c 4096 --ignore-eos --seed 1 -t 1 2>"$tmp/tty.err"
    rc=$?
    check "tty: Ctrl-C stops a reply, then Ctrl-D leaves ($rc)" '[[ $rc -eq 0 ]] && ! grep -q "to leave" "$tmp/tty2"'
fi

# 8. a prompt that takes more than a second: `run` and `chat` show its progress on a terminal (stderr), erased
# before the reply; with stderr not a terminal, no progress line. A tiny-llama 96 layers deep makes ~1,800 tokens
# take seconds on one thread.
if [[ -x $PTY ]] && "$HEARTH" synth --shape tiny-llama --type Q4_0 --layers "$(slow_layers 96)" -o "$tmp/slow.gguf" -t 1 2>/dev/null; then
    long=$(printf 'Once upon a time there was a little dog who liked to play in the park. %.0s' $(seq 30))
    TERM=dumb "$PTY" "$tmp/tty3" 180 -e 'prefill' -- "$HEARTH" run -m "$tmp/slow.gguf" -p "$long" -n 4 -t 1 --temp 0
    check "tty: run shows the prompt's progress, then erases it" \
        'grep -aqF "$(printf "\rprompt 1536 / 1831 tokens, 83%%\r%30s\r" "")" "$tmp/tty3"'
    "$HEARTH" run -m "$tmp/slow.gguf" -p "$long" -n 4 -t 1 --temp 0 >/dev/null 2>"$tmp/run.err"
    check "not a terminal: no progress line" '! grep -aq "tokens, [0-9]*%" "$tmp/run.err" && grep -q "^prefill 1831 tok" "$tmp/run.err"'
    TERM=dumb "$PTY" "$tmp/tty4" 180 -e '> ' -s 'Hi\r' -e 'prefill' -e '> ' -w 300 -s '\x04' -- \
        "$HEARTH" chat -m "$tmp/slow.gguf" --system "$long" -n 4 -t 1 2>/dev/null
    check "tty: chat shows the prompt's progress" 'grep -aq "prompt 1536 / 1835 tokens, 83%" "$tmp/tty4"'
fi

[[ $fail -eq 0 ]] && echo "all chat checks passed"
exit $fail
