/* synth_vocab.h — synthetic but valid tokenizers for synthetic models (synth.c): a byte-level BPE vocabulary
 * (256 byte tokens + generated merge tokens, with a consistent merge list, + the model's special tokens) or a
 * SentencePiece vocabulary (control tokens, <0xNN> byte tokens, scored pieces). The token strings depend
 * only on the layout, never on the weight seed. */
#ifndef HEARTH_SYNTH_VOCAB_H
#define HEARTH_SYNTH_VOCAB_H

#include "common.h"

typedef enum { SV_BPE_LLAMA3, SV_BPE_QWEN, SV_BPE_GPT2, SV_SPM_GEMMA, SV_BPE_HARMONY } synth_vocab_kind;

typedef struct {
    synth_vocab_kind kind;
    int n_vocab;       /* total tokens (= the embedding's rows) */
    int n_text;        /* BPE: byte + merge tokens before the special ones (the rest is specials and padding) */
} synth_vocab_layout;

typedef struct {
    int n;
    char **tokens;          /* n NUL-terminated strings (pointing into arena) */
    int32_t *types;         /* GGUF token types (1 normal, 3 control, 4 user-defined, 5 unused, 6 byte, 2 unknown) */
    float *scores;          /* SPM only, else NULL */
    int n_merges;
    char **merges;          /* BPE only: "left right", rank order */
    int32_t bos, eos, eot, pad, unk;   /* -1 when the vocabulary has none */
    char *arena;            /* all strings */
    size_t arena_n, arena_cap;
} synth_vocab;

int  synth_vocab_build(const synth_vocab_layout *l, synth_vocab *v, hearth_err *err);
void synth_vocab_free(synth_vocab *v);

#endif
