#!/usr/bin/env bash
# Writers never lose data: `quantize` refuses an output that names its input (by any path: ./name, a hard
# link, a symlink, a file of an HF directory) and leaves the input untouched; quantize and synth write a temp
# file and rename it into place, so a failed write (disk full) or an interrupt leaves neither a half file
# under the name nor a temp file beside it; a model without a tokenizer gets one error line naming it.
set -uo pipefail
source "$(dirname "$0")/lib.sh"

tmp=$(mktemp -d); trap 'umount -q "$tmp/small" 2>/dev/null; rm -rf "$tmp"' EXIT
cp data/models/stories260K.gguf "$tmp/same.gguf"
sum=$(sha256sum < "$tmp/same.gguf")
ln "$tmp/same.gguf" "$tmp/hard.gguf"
ln -s same.gguf "$tmp/sym.gguf"
for out in "$tmp/same.gguf" "$tmp/./same.gguf" "$tmp/hard.gguf" "$tmp/sym.gguf"; do
    check "quantize refuses $(basename "$out") as output of same.gguf" \
        'one_error_line "$HEARTH" quantize "$tmp/same.gguf" "$out" Q8_0 && [[ $LAST_ERR == *"is the input model"* ]]'
done
(cd "$tmp" && one_error_line "$HEARTH" quantize same.gguf ./same.gguf Q8_0) || { echo "FAIL: relative ./same.gguf"; fail=1; }
check "the input is unchanged" '[[ $(sha256sum < "$tmp/same.gguf") == "$sum" ]]'

cp -r data/hf/llama-hf "$tmp/hf"
shard=$(ls "$tmp/hf"/*.safetensors | head -1)
hsum=$(sha256sum < "$shard")
check "quantize refuses a file of the HF directory it reads" 'one_error_line "$HEARTH" quantize "$tmp/hf" "$shard" Q8_0'
check "the shard is unchanged" '[[ $(sha256sum < "$shard") == "$hsum" ]]'
check "quantize refuses a directory as output" 'one_error_line "$HEARTH" quantize "$tmp/same.gguf" "$tmp" Q8_0'

# an existing output is replaced whole, by rename (a reader holding the old file keeps it intact)
echo old > "$tmp/out.gguf"
"$HEARTH" quantize "$tmp/same.gguf" "$tmp/out.gguf" Q8_0 2>/dev/null
check "quantize replaces an existing output" '"$HEARTH" info -m "$tmp/out.gguf" | matches Q8_0'
check "no temp file left after a write" '[[ -z $(ls "$tmp" | grep -F .tmp-) ]]'

# disk full: a 256 KiB tmpfs cannot hold the 1.1 MiB model
mkdir -p "$tmp/small"
if mount -t tmpfs -o size=256k tmpfs "$tmp/small" 2>/dev/null; then
    check "quantize to a full disk: one error line" 'one_error_line "$HEARTH" quantize "$tmp/same.gguf" "$tmp/small/q.gguf" F32'
    check "synth to a full disk: one error line" 'one_error_line "$HEARTH" synth --shape tiny-llama --type F32 -o "$tmp/small/s.gguf"'
    check "a full disk leaves no file behind" '[[ -z $(ls -A "$tmp/small") ]]'
    umount "$tmp/small"
else
    echo "note: cannot mount a tmpfs here (not root?): disk-full cases skipped"
fi
check "quantize into a missing directory: one error line" 'one_error_line "$HEARTH" quantize "$tmp/same.gguf" "$tmp/no/q.gguf" Q8_0'
if [[ -w /dev/full ]]; then
    check "quantize to /dev/full: one error line" 'one_error_line "$HEARTH" quantize "$tmp/same.gguf" /dev/full Q8_0'
    check "a device is written in place, never replaced" '[[ -c /dev/full ]]'
fi
# through a symlink, the file it points to is replaced and the link stays a link
echo old > "$tmp/target.gguf"; ln -s target.gguf "$tmp/link.gguf"
"$HEARTH" quantize "$tmp/same.gguf" "$tmp/link.gguf" Q8_0 2>/dev/null
check "a symlinked output replaces its target" '[[ -L "$tmp/link.gguf" ]] && "$HEARTH" info -m "$tmp/target.gguf" | matches Q8_0'

# interrupted: the name never holds a half file, and the temp file is removed
for sig in INT TERM; do
    "$HEARTH" synth --shape llama-3.2-1b --type F16 -o "$tmp/big.gguf" 2>/dev/null &
    pid=$!
    for _ in $(seq 50); do [[ -n $(ls "$tmp" | grep -F big.gguf.tmp-) ]] && break; sleep 0.1; done
    sleep 0.3
    kill -$sig $pid; wait $pid 2>/dev/null
    check "SIG$sig during synth: no file under the name" '[[ ! -e "$tmp/big.gguf" ]]'
    check "SIG$sig during synth: no temp file left" '[[ -z $(ls "$tmp" | grep -F .tmp-) ]]'
done

# models without a tokenizer: one line naming the model and what is missing, on every command
echo '[{"role":"user","content":"hi"}]' > "$tmp/m.json"
for cmd in "chat" "serve --port 0" "template $tmp/m.json" "run -p hi" "tokenize hi" "perplexity -f data/README.md" \
           "embed hi"; do
    check "no tokenizer: $cmd" 'one_error_line "$HEARTH" $cmd -m data/hf/llama-hf < /dev/null &&
        [[ $LAST_ERR == *"llama-hf has no tokenizer"*"tokenizer.json or vocab.txt"* ]]'
done
"$HEARTH" quantize data/hf/llama-hf "$tmp/nt.gguf" Q8_0 2> "$tmp/warn"
check "quantize warns that the output takes token ids only" 'grep -q "has no tokenizer" "$tmp/warn"'
check "no tokenizer (GGUF): run names the file" 'one_error_line "$HEARTH" run -m "$tmp/nt.gguf" -p hi &&
    [[ $LAST_ERR == *"nt.gguf has no tokenizer"*"tokenizer.ggml"* ]]'

# a vocabulary-only GGUF (as llama.cpp ships them) tokenizes and shows its info
v=data/tokenizer/ggml-vocab-llama-bpe.gguf
check "tokenize a vocab-only GGUF" '[[ $("$HEARTH" tokenize -m $v --no-bos "Hello world") == "9906 1917" ]]'
check "info on a vocab-only GGUF" '"$HEARTH" info -m $v | matches "vocabulary only"'
check "run on a vocab-only GGUF: one line" 'one_error_line "$HEARTH" run -m $v -p hi && [[ $LAST_ERR == *"tokenizer only"* ]]'

[[ $fail -eq 0 ]] && echo "all writer checks passed"
exit $fail
