#!/usr/bin/env bash
# `hearth run`'s sampling flags on stories260K: --only-words-starting holds over 200 tokens, --least-likely picks
# the minimum, --logprobs/--json are well-formed and sum to 1, --logit-bias and --bias-text steer the greedy
# pick, seeded runs with every stage on are the same with 1 and 2 threads, grammars and JSON Schemas hold, and
# bad values give one error line.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
M=data/models/stories260K.gguf
run() { "$HEARTH" run -m "$M" "$@" 2>/dev/null; }

# Words as the constraint defines them: runs of ASCII letters, digits, bytes >= 0x80 and apostrophes, where an
# apostrophe does not start a word. Prints the words that do not start with b/B/w/W.
bad_words() { LC_ALL=C grep -aoE "[A-Za-z0-9'"$'\x80'"-"$'\xff'"]+" | LC_ALL=C sed "s/^'*//" | LC_ALL=C grep -av '^$' | LC_ALL=C grep -av '^[bBwW]'; }
count_words() { LC_ALL=C grep -aoE "[A-Za-z0-9"$'\x80'"-"$'\xff'"]+" | wc -l; }

for seed in 1 2 3 4; do
    bw=$(run -n 200 --only-words-starting BW --seed $seed -t 1)
    bad=$(printf '%s' "$bw" | bad_words | head -5 | tr '\n' ' ')
    check "B/W constraint, seed $seed (bad words: $bad)" '[[ -z $bad ]]'
    check "B/W constraint, seed $seed, produced text" '[[ $(printf "%s" "$bw" | count_words) -ge 20 ]]'
done
check "the word check catches a bad word" '[[ -n $(printf "Bob went home" | bad_words) ]]'
check "the word check passes apostrophes" '[[ -z $(printf "Bob'"'"'s '"'"'wow won'"'"'t" | bad_words) ]]'

# Least-likely with no truncation: the chosen token's log-probability is the minimum over the whole vocabulary.
ll=$(run -n 8 --seed 1 --least-likely --top-k 0 --top-p 1 --min-p 0 --logprobs 512 --json)
check "least-likely emits JSON lines" '[[ $(printf "%s\n" "$ll" | grep -c "^{") -ge 1 ]]'
check "least-likely picks the minimum" '[[ $(printf "%s\n" "$ll" | jq -s "all(.[]; .logprob <= ([.top[].logprob] | min))") == true ]]'
# With top-k 40: the least likely of the 40 survivors, i.e. the 40th entry of the top list.
ll40=$(run -n 8 --seed 1 --least-likely --top-k 40 --top-p 1 --min-p 0 --logprobs 40 --json)
check "least-likely after top-k 40 picks the 40th" '[[ $(printf "%s\n" "$ll40" | jq -s "all(.[]; .token == .top[39].token)") == true ]]'

# Log-probabilities: every line valid JSON, the full distribution sums to 1, the chosen token is in it.
lp=$(run -n 20 --seed 5 --logprobs 512 --json)
check "logprobs: 20 JSON lines" '[[ $(printf "%s\n" "$lp" | jq -c . | wc -l) -eq 20 ]]'
check "logprobs sum to 1" '[[ $(printf "%s\n" "$lp" | jq -s "all(.[]; ([.top[].logprob | exp] | add) - 1 | fabs < 1e-4)") == true ]]'
check "chosen logprob matches its entry" '[[ $(printf "%s\n" "$lp" | jq -s "all(.[]; . as \$o | any(.top[]; .token == \$o.token and .logprob == \$o.logprob))") == true ]]'
txt=$(run -n 20 --seed 5)
pieces=$(printf "%s\n" "$lp" | jq -j .piece)
check "JSON pieces spell the text" '[[ "$pieces" == "$txt" ]]'
human=$("$HEARTH" run -m "$M" -n 3 --seed 5 --logprobs 2 2>&1 >/dev/null | grep -c "^logprob ")
check "--logprobs without --json: a line per token on stderr" '[[ $human -eq 3 ]]'

# --logit-bias and --bias-text against the greedy pick (" Once" = 403 from BOS).
first() { run -n 1 --temp 0 --json "$@" | jq .token; }
check "greedy first token" '[[ $(first) -eq 403 ]]'
check "--logit-bias ID-inf bans it" '[[ $(first --logit-bias 403-inf) -ne 403 ]]'
check "--logit-bias ID+100 forces a token" '[[ $(first --logit-bias 385+100) -eq 385 ]]'
check "--logit-bias ID-100 on top of +100 (last wins)" '[[ $(first --logit-bias 385+100 --logit-bias 385-100) -eq 403 ]]'
g=$(run -n 40 --temp 0 --bias-text "Once=-inf")
check "--bias-text TEXT=-inf: no token with the text" '[[ -n $g && $g != *Once* ]]'
check "--bias-text TEXT=+20 picks a token with the text" '[[ $(run -n 1 --temp 0 --json --bias-text " do=+20" | jq -r .piece) == *" do"* ]]'

# Seeded sampling with every stage on: 1 and 2 threads give the same text.
flags=(-n 60 --seed 9 --temp 1.1 --typical-p 0.9 --repeat-penalty 1.1 --frequency-penalty 0.3 --presence-penalty 0.2 --repeat-last-n 32)
a=$(run "${flags[@]}" -t 1); b=$(run "${flags[@]}" -t 2)
check "same seed, same text with 1 and 2 threads" '[[ -n $a && "$a" == "$b" ]]'
a=$(run -n 60 --seed 9 --only-words-starting BW --bias-text "Wh=-2" -t 1); b=$(run -n 60 --seed 9 --only-words-starting BW --bias-text "Wh=-2" -t 2)
check "same seed with constraint and bias, 1 vs 2 threads" '[[ -n $a && "$a" == "$b" ]]'

# Everything masked: one error line.
ban=(); for i in $(seq 0 511); do ban+=(--logit-bias "$i-inf"); done
check "every token banned" 'one_error_line "$HEARTH" run -m "$M" -n 5 "${ban[@]}"'
check "bad --logit-bias (no sign)" 'one_error_line "$HEARTH" run -m "$M" --logit-bias 12'
check "bad --logit-bias (+inf)" 'one_error_line "$HEARTH" run -m "$M" --logit-bias 12+inf'
check "bad --logit-bias (out of range)" 'one_error_line "$HEARTH" run -m "$M" --logit-bias 100000+1'
check "bad --bias-text (no value)" 'one_error_line "$HEARTH" run -m "$M" --bias-text bard'
check "bad --bias-text (empty text)" 'one_error_line "$HEARTH" run -m "$M" --bias-text =+3'
check "bad --logprobs" 'one_error_line "$HEARTH" run -m "$M" --logprobs x'
check "empty --only-words-starting" 'one_error_line "$HEARTH" run -m "$M" --only-words-starting ""'
check "missing value" 'one_error_line "$HEARTH" run -m "$M" --typical-p'
check "help lists the flags" '"$HEARTH" run --help | matches -- "--only-words-starting"'

# Grammars: --json-schema replies are JSON with the required keys and bounds (several seeds), --json-object a
# whole object within -n (and -n too small an error), --grammar-file text from the grammar and nothing after it; bad grammars and schemas: one error line.
S=data/schemas/tool_call.json
for seed in 1 2 3; do
    check "--json-schema seed $seed: valid JSON with the required keys" \
        'run -p "Once upon a time" --json-schema "$S" --seed $seed -n 384 | jq -e "(.name==\"search\" or .name==\"get_weather\") and (.arguments|type)==\"object\" and (keys|length)==2" >/dev/null'
done
check "--json-object with -n 20: a whole object within the 20 tokens (the grammar's budget)" 'run -p "Hi" --json-object --seed 1 -n 20 | jq -e "type==\"object\"" >/dev/null'
check "--json-schema with -n too small for any document: one error line saying so" 'one_error_line "$HEARTH" run -m "$M" --json-schema "$S" -n 3 && [[ $LAST_ERR == *"too few"* ]]'
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf 'root ::= " the " ("cat" | "dog") " sat."\n' >"$tmp/g.gbnf"
check "--grammar-file: the reply is a sentence of the grammar" '[[ $(run -p "Once" --grammar-file "$tmp/g.gbnf" --seed 4 -n 50) =~ ^\ the\ (cat|dog)\ sat\.$ ]]'
printf 'root ::= "a" b\n' >"$tmp/bad.gbnf"
check "bad grammar: one error line naming the line" 'one_error_line "$HEARTH" run -m "$M" --grammar-file "$tmp/bad.gbnf" && [[ $LAST_ERR == *"line 1"* ]]'
check "unenforceable schema keyword: one error line naming it" 'one_error_line "$HEARTH" run -m "$M" --json-schema data/schemas/unsupported_not_pattern.json && [[ $LAST_ERR == *\"not\"* ]]'
check "two grammars at once: refused" 'one_error_line "$HEARTH" run -m "$M" --json-object --grammar-file "$tmp/g.gbnf"'

# --prompt-cache: the second run starts from the stored prefix, and the text is the uncached run's.
P=$(printf 'Once upon a time there was a little dog who liked to play in the park with his friends. %.0s' $(seq 20))
plain=$(run -p "$P" -n 12 --temp 0)
first=$(run -p "$P" -n 12 --temp 0 --prompt-cache "$tmp/pc")
second_err=$("$HEARTH" run -m "$M" -p "$P" -n 12 --temp 0 --prompt-cache "$tmp/pc" 2>&1 >"$tmp/second")
check "--prompt-cache: the second run restores the prefix" '[[ $second_err == *"512 from the prompt cache"* ]]'
check "--prompt-cache: the same text cached, restored and uncached" '[[ $first == "$plain" && $(cat "$tmp/second") == "$plain" ]]'

[[ $fail -eq 0 ]] && echo "all sampling CLI checks passed"
exit $fail
