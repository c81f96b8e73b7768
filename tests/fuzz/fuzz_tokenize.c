/* fuzz_tokenize.c — arbitrary bytes (any UTF-8 or not) through every tokenizer kind: SentencePiece (llama-spm),
 * byte-level BPE with two pre-tokenizer regexes (llama-bpe, qwen2), WordPiece (bert-bge), with and without
 * special-token parsing; each result detokenized piece by piece. The vocabularies are the test fixtures
 * (data/tokenizer/, the fuzzer runs from tests/), loaded once. */
#include <stdio.h>

#include "fuzz.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

static const char *const VOCABS[] = {"llama-spm", "llama-bpe", "qwen2", "bert-bge"};
#define NV (sizeof VOCABS / sizeof VOCABS[0])
static ht_vocab *vocab[NV];
static gguf_file *files[NV];   /* a vocabulary keeps pointers into its file: both live until exit */

static void free_all(void) {
    for (size_t i = 0; i < NV; i++) { vocab_free(vocab[i]); gguf_close(files[i]); }
}

static void load_all(void) {
    for (size_t i = 0; i < NV; i++) {
        char path[256];
        hearth_err err;
        snprintf(path, sizeof path, "data/tokenizer/ggml-vocab-%s.gguf", VOCABS[i]);
        if (gguf_open(path, &files[i], &err) || vocab_from_gguf(files[i], &vocab[i], &err)) {
            fprintf(stderr, "fuzz_tokenize: %s: %s (run from tests/)\n", path, err.msg);
            abort();
        }
    }
    atexit(free_all);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int loaded;
    if (!loaded) { load_all(); loaded = 1; }
    char *txt = fuzz_text(data, size);
    if (!txt) return 0;
    for (size_t i = 0; i < NV; i++)
        for (int special = 0; special < 2; special++) {
            int32_t *ids = NULL;
            int n = 0;
            hearth_err err;
            if (!tok_encode(vocab[i], txt, size, special, special, &ids, &n, &err)) {
                char piece[256];
                for (int k = 0; k < n; k++) tok_piece(vocab[i], ids[k], special, piece, sizeof piece);
            }
            free(ids);
        }
    free(txt);
    return 0;
}
