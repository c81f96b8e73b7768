/* vocab_export.h — writing a loaded vocabulary back out as GGUF tokenizer metadata (tokenizer.ggml.*). */
#ifndef HEARTH_VOCAB_EXPORT_H
#define HEARTH_VOCAB_EXPORT_H

#include "tokenizer.h"

/* Adds v as the tokenizer.ggml.* keys llama.cpp's converter writes (model llama / gpt2 / bert, tokens, scores,
 * token_type, merges, pre, special ids, add_* flags). The keys are checked before they are added: a vocabulary
 * loaded back from them must tokenize a set of probe texts exactly as v does. Returns 0 when written, 1 when v
 * has no GGUF equivalent (nothing written, err says why), -1 on error. */
int vocab_to_gguf(const ht_vocab *v, gguf_writer *w, hearth_err *err);

#endif
