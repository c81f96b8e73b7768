/* fuzz_tokenizer_json.c — a Hugging Face tokenizer.json from arbitrary text (models, normalizers, pre-
 * tokenizers, added tokens, decoders), then, when it loads, a text tokenized and detokenized with it. */
#include "fuzz.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *txt = fuzz_text(data, size);
    ht_vocab *v;
    hearth_err err;
    if (txt && !vocab_from_tokenizer_json_text(txt, size, "fuzz.json", &v, &err)) {
        static const char sample[] = "Hello wörld! 123 <|im_start|> \xe2\x96\x81x\n\t  end";
        int32_t *ids = NULL;
        int n = 0;
        for (int special = 0; special < 2; special++) {
            if (!tok_encode(v, sample, sizeof sample - 1, true, special, &ids, &n, &err)) {
                char piece[256];
                for (int i = 0; i < n; i++) tok_piece(v, ids[i], special, piece, sizeof piece);
            }
            free(ids);
            ids = NULL;
        }
        vocab_free(v);
    }
    free(txt);
    return 0;
}
