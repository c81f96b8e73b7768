/* demo.c — what a user's program does with the installed library: load a model, tokenize a prompt, decode,
 * pick tokens greedily, print the text. Built by test_install.sh with cc $(pkg-config --cflags --libs hearth).
 * Usage: demo MODEL.gguf PROMPT N */
#include <hearth.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: demo MODEL PROMPT N\n"); return 2; }
    hearth_err err;
    hearth_model *m;
    hearth_ctx *c;
    if (hearth_model_load(argv[1], &m, &err) || hearth_ctx_new(m, NULL, &c, &err)) {
        fprintf(stderr, "error: %s\n", err.msg);
        return 1;
    }
    hearth_token toks[256];
    int n = hearth_tokenize(m, argv[2], strlen(argv[2]), true, false, toks, 256, &err);
    if (n < 0 || n > 128) { fprintf(stderr, "error: tokenize\n"); return 1; }
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    char piece[256];
    for (int i = 0, want = atoi(argv[3]); i < want; i++) {
        hearth_batch b = { .n = i ? 1 : n, .tokens = i ? &toks[n - 1] : toks };
        if (hearth_decode(c, &b, &err)) { fprintf(stderr, "error: %s\n", err.msg); return 1; }
        const float *lg = hearth_logits(c, b.n - 1);
        hearth_token best = 0;
        for (int t = 1; t < info.n_vocab; t++) if (lg[t] > lg[best]) best = t;
        if (hearth_token_is_eog(m, best)) break;
        int k = hearth_token_piece(m, best, piece, sizeof piece);
        fwrite(piece, 1, (size_t)(k < (int)sizeof piece ? k : (int)sizeof piece), stdout);
        toks[n++] = best;
    }
    printf("\n");
    hearth_ctx_free(c);
    hearth_model_free(m);
    return 0;
}
