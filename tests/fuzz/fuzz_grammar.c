/* fuzz_grammar.c — the grammar parser and matcher, and the JSON Schema converter, on arbitrary text. The first
 * byte picks the input's kind: even = GBNF, odd = a JSON Schema. A grammar that parses is run over the input's
 * own bytes (whole and prefixes); the converter must never report an internal error (GBNF its own parser
 * refuses), and what it returns must parse. */
#include "fuzz.h"
#include "generate/grammar.h"

static volatile bool sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    char *text = fuzz_text(data + 1, size - 1);
    if (!text) return 0;
    hearth_err err;
    err.msg[0] = 0;
    char *gbnf = (data[0] & 1) ? hearth_json_schema_to_grammar(text, &err) : NULL;
    static const char internal[] = "JSON Schema: internal error";   /* a prefix: other messages may quote the input */
    if (!strncmp(err.msg, internal, sizeof internal - 1)) abort();
    if ((data[0] & 1) && !gbnf) { free(text); return 0; }
    gram *g = gram_parse(gbnf ? gbnf : text, &err);
    if (gbnf && !g) abort();
    if (g) {
        for (size_t n = 0; n <= size - 1 && n < 64; n += 7) sink ^= gram_matches(g, text, n, n & 1);
        sink ^= gram_matches(g, text, size - 1, true);
        gram_free(g);
    }
    free(gbnf);
    free(text);
    return 0;
}
