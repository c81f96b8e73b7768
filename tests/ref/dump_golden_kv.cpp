// dump_golden_kv.cpp — the reference's golden dumper (the anchor's dump_golden.cpp) with the K and V cache types as arguments and flash
// attention on (a quantized V needs it): the reference's goldens golden/NAME-ctk-K-ctv-V.golden of test_kv_types.
// Build against a llama.cpp tree L: g++ -O2 -std=c++17 dump_golden_kv.cpp -IL/include -IL/ggml/include -LL/build/bin
// -lllama -lggml -lggml-base -Wl,-rpath,L/build/bin; then: dump_golden_kv MODEL.gguf OUT.golden TYPE_K TYPE_V
// Format (little-endian): "HGLD" u32 version=1 u32 n_cases; per case: u32 n_tokens u32 n_out
// u32 kind (0 logits per position, 1 hidden state per position, 2 mean-pooled), i32 tokens[n_tokens],
// f32 values[(kind==2 ? 1 : n_tokens) * n_out]
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <random>

static void put_u32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: %s MODEL OUT TYPE_K TYPE_V\n", argv[0]); return 2; }
    bool embed = false;
    auto ty = [](const char *s) { return !strcmp(s, "f16") ? GGML_TYPE_F16 : !strcmp(s, "bf16") ? GGML_TYPE_BF16 : !strcmp(s, "q8_0") ? GGML_TYPE_Q8_0 : !strcmp(s, "q4_0") ? GGML_TYPE_Q4_0 : GGML_TYPE_COUNT; };
    ggml_type tk = ty(argv[3]), tv = ty(argv[4]);
    if (tk == GGML_TYPE_COUNT || tv == GGML_TYPE_COUNT) { fprintf(stderr, "bad cache type\n"); return 2; }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "load failed\n"); return 1; }
    const llama_vocab *vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);
    int n_embd = llama_model_n_embd(model);
    int bos = llama_vocab_bos(vocab);
    std::mt19937 rng(1234);
    std::vector<std::vector<llama_token>> cases;
    for (int len : {8, 40, 1, 100}) {
        std::vector<llama_token> t;
        if (bos >= 0) t.push_back(bos);
        while ((int)t.size() < len) t.push_back(rng() % (n_vocab - 3));
        cases.push_back(t);
    }
    FILE *f = fopen(argv[2], "wb");
    fwrite("HGLD", 1, 4, f); put_u32(f, 1);
    put_u32(f, embed ? 2 * cases.size() : cases.size());
    for (int pass = 0; pass < (embed ? 2 : 1); pass++) {
        for (auto &toks : cases) {
            llama_context_params cp = llama_context_default_params();
            cp.n_ctx = 256; cp.n_batch = 256; cp.n_ubatch = 256; cp.n_threads = 2; cp.n_threads_batch = 2;
            cp.type_k = tk; cp.type_v = tv;
            cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_ENABLED;
            cp.swa_full = true;
            if (embed) { cp.embeddings = true; cp.pooling_type = pass == 0 ? LLAMA_POOLING_TYPE_NONE : LLAMA_POOLING_TYPE_MEAN; }
            llama_context *ctx = llama_init_from_model(model, cp);
            if (!ctx) { fprintf(stderr, "ctx failed\n"); return 1; }
            int n = toks.size();
            llama_batch b = llama_batch_init(n, 0, 1);
            for (int i = 0; i < n; i++) {
                b.token[i] = toks[i]; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1;
            }
            b.n_tokens = n;
            int rc = embed ? llama_encode(ctx, b) : llama_decode(ctx, b);
            if (rc) { fprintf(stderr, "eval failed %d\n", rc); return 1; }
            uint32_t kind = embed ? (pass == 0 ? 1 : 2) : 0;
            uint32_t n_out = embed ? n_embd : n_vocab;
            put_u32(f, n); put_u32(f, n_out); put_u32(f, kind);
            fwrite(toks.data(), 4, n, f);
            if (kind == 0) for (int i = 0; i < n; i++) fwrite(llama_get_logits_ith(ctx, i), 4, n_out, f);
            if (kind == 1) for (int i = 0; i < n; i++) fwrite(llama_get_embeddings_ith(ctx, i), 4, n_out, f);
            if (kind == 2) fwrite(llama_get_embeddings_seq(ctx, 0), 4, n_out, f);
            llama_batch_free(b);
            llama_free(ctx);
        }
    }
    fclose(f);
    llama_model_free(model);
    printf("%s: %zu cases, n_vocab %d n_embd %d\n", argv[2], cases.size(), n_vocab, n_embd);
    return 0;
}
