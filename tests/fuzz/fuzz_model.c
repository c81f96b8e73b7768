/* fuzz_model.c — whole model load from arbitrary bytes (hearth_model_load_memory: metadata, architecture,
 * weight binding, tokenizer), then, when it loads, a context and a few decode steps: prompt of 3 tokens,
 * then 2 single-token steps; tokenizing a short text when the model has a tokenizer. */
#include "fuzz.h"
#include "hearth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = fuzz_hold(data, size);
    hearth_model *m;
    hearth_err err;
    if (buf && !hearth_model_load_memory(buf, size, "fuzz", &m, &err)) {
        hearth_model_info in;
        hearth_model_get_info(m, &in);
        hearth_token ids[32];
        if (hearth_model_has_tokenizer(m)) hearth_tokenize(m, "Hello, <s> world!", 17, true, true, ids, 32, &err);
        hearth_ctx_params p = hearth_ctx_default_params();
        p.n_ctx = 8;
        p.n_threads = 1;
        hearth_ctx *c;
        if (in.n_vocab > 0 && !hearth_ctx_new(m, &p, &c, &err)) {
            hearth_token t[3] = {0, 1 % in.n_vocab, 2 % in.n_vocab};
            hearth_batch b = {.n = 3, .tokens = t};
            for (int step = 0; step < 3 && !hearth_decode(c, &b, &err); step++) {
                b.n = 1;
                b.tokens = &t[step];
            }
            hearth_ctx_free(c);
        }
        hearth_model_free(m);
    }
    fuzz_release();
    return 0;
}
