#!/usr/bin/env bash
# Hugging Face directories through the CLI: broken ones (safetensors truncated, header past EOF, overlapping
# offsets, bad JSON header, unknown dtype, shape/bytes mismatch, bad or missing config.json, unknown architecture)
# make `hearth info` exit 1 with exactly one "error: " line and no crash; and `hearth tokenize -m` on a
# tokenizer alone (tokenizer.json, or a directory of tokenizer files) gives the same ids as the full model.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# safetensors FILE HEADER_JSON DATA_BYTES [HEADER_LEN]: 8-byte little-endian header length, header, zero data.
safetensors() {
    local len=${4:-${#2}}
    printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x\\x%02x\\x%02x\\x%02x\\x%02x' $((len & 255)) $((len >> 8 & 255)) \
        $((len >> 16 & 255)) $((len >> 24 & 255)) 0 0 0 0)" >"$1"
    printf '%s' "$2" >>"$1"
    head -c "$3" /dev/zero >>"$1"
}
# mkdir_hf NAME: a directory with qwen2-hf's config.json (replaced by the case as needed).
mkdir_hf() { mkdir -p "$tmp/$1"; cp data/hf/qwen2-hf/config.json "$tmp/$1/"; echo "$tmp/$1"; }

d=$(mkdir_hf truncated); head -c 5000 data/hf/qwen2-hf/model.safetensors >"$d/model.safetensors"
check "truncated model.safetensors" 'one_error_line "$HEARTH" info -m "$d"'
d=$(mkdir_hf short); head -c 4 data/hf/qwen2-hf/model.safetensors >"$d/model.safetensors"
check "shorter than the header length" 'one_error_line "$HEARTH" info -m "$d"'
d=$(mkdir_hf hdrlen); safetensors "$d/model.safetensors" '{}' 0 100000
check "header length past EOF" 'one_error_line "$HEARTH" info -m "$d"'
d=$(mkdir_hf overlap)
safetensors "$d/model.safetensors" '{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}' 24
check "overlapping offsets" 'one_error_line "$HEARTH" info -m "$d"'
d=$(mkdir_hf badjson); safetensors "$d/model.safetensors" '{"a":{"dtype":"F32",' 16
check "bad JSON header" 'one_error_line "$HEARTH" info -m "$d"'
d=$(mkdir_hf dtype); safetensors "$d/model.safetensors" '{"model.norm.weight":{"dtype":"Q9","shape":[4],"data_offsets":[0,16]}}' 16
check "unknown dtype" 'one_error_line "$HEARTH" info -m "$d"'
d=$(mkdir_hf shape); safetensors "$d/model.safetensors" '{"model.norm.weight":{"dtype":"F32","shape":[5],"data_offsets":[0,16]}}' 16
check "shape / bytes mismatch" 'one_error_line "$HEARTH" info -m "$d"'
d=$(mkdir_hf past); safetensors "$d/model.safetensors" '{"model.norm.weight":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}' 8
check "data past EOF" 'one_error_line "$HEARTH" info -m "$d"'
d=$(mkdir_hf noweights); safetensors "$d/model.safetensors" '{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}' 16
check "missing tensors" 'one_error_line "$HEARTH" info -m "$d"'
d=$(mkdir_hf badcfg); cp data/hf/qwen2-hf/model.safetensors "$d/"; printf '{"architectures": [' >"$d/config.json"
check "bad config.json" 'one_error_line "$HEARTH" info -m "$d"'
d=$(mkdir_hf nocfg); cp data/hf/qwen2-hf/model.safetensors "$d/"; rm "$d/config.json"
check "missing config.json" 'one_error_line "$HEARTH" info -m "$d"'
d=$(mkdir_hf arch); cp data/hf/qwen2-hf/model.safetensors "$d/"; printf '{"architectures": ["FrobModel"]}' >"$d/config.json"
check "unknown architecture" 'one_error_line "$HEARTH" info -m "$d"'
d=$(mkdir_hf cfgsize); cp data/hf/qwen2-hf/model.safetensors "$d/"
sed 's/"hidden_size": 128/"hidden_size": -3/' data/hf/qwen2-hf/config.json >"$d/config.json"
check "bad size in config.json" 'one_error_line "$HEARTH" info -m "$d"'
d=$(mkdir_hf nost)
check "no safetensors" 'one_error_line "$HEARTH" info -m "$d"'
d=$(mkdir_hf badgen); cp data/hf/qwen2-hf/model.safetensors data/hf/qwen2-hf/tokenizer.json "$d/"; printf '{"temp' >"$d/generation_config.json"
check "bad generation_config.json" 'one_error_line "$HEARTH" info -m "$d"'

# tokenizer alone
mkdir -p "$tmp/tok-bert"; cp data/hf/bert-hf/vocab.txt "$tmp/tok-bert/"
for s in "Hello, the world!" "Caf$(printf '\xc3\xa9') na$(printf '\xc3\xaf')ve $(printf '\xe4\xb8\xad\xe6\x96\x87') 12345"; do
    check "tokenizer.json alone: '$s'" '[[ $("$HEARTH" tokenize -m data/hf/qwen2-hf/tokenizer.json "$s") == $("$HEARTH" tokenize -m data/hf/qwen2-hf "$s") ]]'
    check "vocab.txt directory alone: '$s'" '[[ $("$HEARTH" tokenize -m "$tmp/tok-bert" "$s") == $("$HEARTH" tokenize -m data/hf/bert-hf "$s") ]]'
done
check "tokenizer-only: special tokens" '[[ $("$HEARTH" tokenize --special -m data/hf/qwen2-hf/tokenizer.json "<|im_start|>hi") == "769 "* ]]'
check "tokenizer-only: missing file" 'one_error_line "$HEARTH" tokenize -m "$tmp/none.json" hi'
mkdir -p "$tmp/empty"
check "tokenizer-only: no tokenizer files" 'one_error_line "$HEARTH" tokenize -m "$tmp/empty" hi'

[[ $fail -eq 0 ]] && echo "all HF malformed-input and tokenizer-only checks passed"
exit $fail
