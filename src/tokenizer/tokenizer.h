/* tokenizer.h — text <-> token ids, as each model's own tokenizer does it.
 * One ht_vocab per model, built from GGUF metadata (tokenizer.ggml.*) or from a tokenizer.json.
 * Kinds: SentencePiece (llama), byte-level BPE (gpt2) with pre-tokenizer regexes, WordPiece (bert). */
#ifndef HEARTH_TOKENIZER_H
#define HEARTH_TOKENIZER_H

#include "common.h"
#include "io/gguf.h"

enum ht_tok_kind { TOK_SPM = 1, TOK_BPE = 2, TOK_WPM = 3 };
/* Token types as in GGUF tokenizer.ggml.token_type */
enum ht_tok_type { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

typedef struct ht_vocab ht_vocab;

int  vocab_from_gguf(const gguf_file *f, ht_vocab **out, hearth_err *err);
void vocab_free(ht_vocab *v);

int  vocab_size(const ht_vocab *v);
int  vocab_kind(const ht_vocab *v);
int32_t vocab_bos(const ht_vocab *v);    /* -1 if none */
int32_t vocab_eos(const ht_vocab *v);
bool vocab_add_bos(const ht_vocab *v);   /* tokenizer.ggml.add_bos_token (default per kind) */
bool vocab_is_eog(const ht_vocab *v, int32_t id);
int  vocab_token_type(const ht_vocab *v, int32_t id);
/* Raw vocabulary string of a token (as stored). */
gguf_str vocab_text(const ht_vocab *v, int32_t id);

/* Encodes text; *out is a malloc'd array the caller frees. add_special adds BOS (and for WordPiece
 * [CLS]...[SEP]) as the vocabulary declares; parse_special makes special-token text map to its token.
 * (parse_special = true is TOK_SPECIAL_ALL below; false is TOK_SPECIAL_USER: user-defined added tokens such as
 * <think> still match, as in Hugging Face and llama.cpp, but control tokens never do.) */
int tok_encode(const ht_vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
               int32_t **out, int *n_out, hearth_err *err);
/* Bytes the token decodes to (SPM: '▁' -> ' ', <0xNN> -> byte; BPE: byte-level map reversed).
 * Control tokens decode to "" unless show_special. Returns byte count (may exceed cap; writes at most cap). */
int tok_piece(const ht_vocab *v, int32_t id, bool show_special, char *buf, int cap);

/* ---- additions (tokenizer layer) ---- */
/* Which special-token text tok_encode_mode maps to tokens. TOK_SPECIAL_USER is llama.cpp's
 * parse_special = false (and Hugging Face's treatment of non-special added tokens): user-defined tokens such
 * as Qwen's <think> or DeepSeek-Coder's added "õ" are always matched, control tokens never. */
enum { TOK_SPECIAL_NONE = 0, TOK_SPECIAL_USER = 1, TOK_SPECIAL_ALL = 2 };
int tok_encode_mode(const ht_vocab *v, const char *text, size_t len, bool add_special, int special,
                    int32_t **out, int *n_out, hearth_err *err);
/* Loads a Hugging Face tokenizer.json (BPE — byte-level or with byte_fallback — or WordPiece), with its
 * normalizer, pre_tokenizer, added_tokens and decoder. BOS/EOS and add_bos come from a tokenizer_config.json
 * next to it when present. */
int vocab_from_tokenizer_json(const char *path, ht_vocab **out, hearth_err *err);
/* The same from the file's text (path only names it in messages). */
int vocab_from_tokenizer_json_text(const char *txt, size_t len, const char *path, ht_vocab **out, hearth_err *err);
/* Loads a BERT vocab.txt (one token per line; path is the file or a directory holding vocab.txt) as a
 * WordPiece vocabulary with the BERT normalizer (lowercase and accent stripping when `lowercase`).
 * Both conventions are understood: Hugging Face's "##" continuations and GGUF-style "▁" word starts. */
int vocab_from_wordpiece_txt(const char *path, bool lowercase, ht_vocab **out, hearth_err *err);
int32_t vocab_find(const ht_vocab *v, const char *text, size_t len);   /* exact token text -> id, or -1 */
int32_t vocab_unk(const ht_vocab *v);    /* -1 if none */
int32_t vocab_sep(const ht_vocab *v);
int32_t vocab_pad(const ht_vocab *v);
int32_t vocab_mask(const ht_vocab *v);
int32_t vocab_eot(const ht_vocab *v);
bool vocab_add_eos(const ht_vocab *v);
float vocab_score(const ht_vocab *v, int32_t id);
const char *vocab_pre_name(const ht_vocab *v);   /* tokenizer.ggml.pre, "" if none */

#endif
