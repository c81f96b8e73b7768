#!/usr/bin/env bash
# test_template_cli.sh — end-to-end test of `hearth template`: renders a small chat template (loop, trim,
# tools|tojson, bos/eos, generation prompt, raise_exception) over conversations given as a JSON array, as an
# object with tools, and on stdin, and checks the exact bytes printed (no newline added) and the one-line
# "error: ..." reports with exit code 1. The expected outputs are what Jinja2 3.1 renders for the same input.
set -u
HEARTH=${HEARTH:?set HEARTH to the hearth binary}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passed=0
failed=0

if "$HEARTH" template --help 2>&1 | grep -q "unknown command"; then
    echo "FAIL: $HEARTH has no 'template' command (register cmd_template in tools/hearth.c)" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

ok() { passed=$((passed + 1)); }
bad() { echo "FAIL: $*" >&2; failed=$((failed + 1)); }

cat >"$dir/chat.jinja" <<'EOF'
{%- if messages[0].role == 'system' and messages[0].content is not string %}{{ raise_exception('system content must be text') }}{% endif %}
{{- bos_token }}
{%- if tools %}
<tools>{{ tools | tojson }}</tools>
{% endif %}
{%- for m in messages %}
<|{{ m.role }}|>
{{ m.content | trim }}{{ eos_token }}
{%- endfor %}
{%- if add_generation_prompt %}
<|assistant|>
{% endif %}
EOF

cat >"$dir/plain.json" <<'EOF'
[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "  Ünïcödé 🦙 — what's 2+2?  "}]
EOF
cat >"$dir/plain.expected" <<'EOF'
<|system|>
Be brief.<|user|>
Ünïcödé 🦙 — what's 2+2?<|assistant|>
EOF

cat >"$dir/tools.json" <<'EOF'
{"messages": [{"role": "user", "content": "Add 2 and 3"}], "tools": [{"name": "add", "parameters": {"a": "number", "b": "number"}}]}
EOF
printf '%s' "$(cat <<'EOF'
<s><tools>[{"name": "add", "parameters": {"a": "number", "b": "number"}}]</tools>
<|user|>
Add 2 and 3</s>
EOF
)" >"$dir/tools.expected"

echo '[{"role": "system", "content": ["not", "text"]}]' >"$dir/raise.json"
echo '[{"role": "user", ' >"$dir/broken.json"

# a conversation as a JSON array, default bos/eos (""), generation prompt on
if "$HEARTH" template --template "$dir/chat.jinja" "$dir/plain.json" >"$dir/out" 2>"$dir/err" &&
    cmp -s "$dir/out" "$dir/plain.expected" && [ ! -s "$dir/err" ]; then ok; else bad "plain conversation"; fi

# an object with tools, explicit bos/eos, no generation prompt: the output ends without a newline
if "$HEARTH" template --template "$dir/chat.jinja" --bos '<s>' --eos '</s>' --no-generation-prompt "$dir/tools.json" \
    >"$dir/out" 2>"$dir/err" && cmp -s "$dir/out" "$dir/tools.expected"; then ok; else bad "conversation with tools"; fi

# the conversation on stdin
if "$HEARTH" template --template "$dir/chat.jinja" - <"$dir/plain.json" >"$dir/out" 2>"$dir/err" &&
    cmp -s "$dir/out" "$dir/plain.expected"; then ok; else bad "conversation on stdin"; fi

# expect_error NAME WANT ARGS...: exit code 1, nothing on stdout, one stderr line starting with WANT
expect_error() {
    local name=$1 want=$2
    shift 2
    "$HEARTH" template "$@" >"$dir/out" 2>"$dir/err"
    local rc=$?
    if [ "$rc" -eq 1 ] && [ ! -s "$dir/out" ] && [ "$(wc -l <"$dir/err")" -eq 1 ] &&
        [ "$(head -c ${#want} "$dir/err")" = "$want" ]; then ok; else
        bad "$name (exit $rc, stderr: $(cat "$dir/err"))"
    fi
}
expect_error "raise_exception" "error: system content must be text" --template "$dir/chat.jinja" "$dir/raise.json"
expect_error "invalid JSON" "error: " --template "$dir/chat.jinja" "$dir/broken.json"
expect_error "missing template" "error: cannot open" --template "$dir/none.jinja" "$dir/plain.json"
expect_error "no --template" "error: missing --template" "$dir/plain.json"
expect_error "unknown option" "error: unknown option: --frobnicate" --frobnicate --template "$dir/chat.jinja" "$dir/plain.json"
echo '{{ x | no_such_filter }}' >"$dir/bad.jinja"
expect_error "template syntax" "error: template:1:8: unknown filter 'no_such_filter'" --template "$dir/bad.jinja" "$dir/plain.json"

if "$HEARTH" template --help >"$dir/out" 2>&1 && grep -q "usage: hearth template" "$dir/out"; then ok; else bad "--help"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
