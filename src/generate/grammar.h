/* grammar.h — GBNF grammars compiled to byte-level rules, and the matcher that constrains sampling with them
 * (the public side is hearth_grammar_* in hearth.h; this header is for the library and its tests). */
#ifndef HEARTH_GRAMMAR_H
#define HEARTH_GRAMMAR_H

#include "common.h"

typedef struct gram gram;   /* compiled rules; immutable once built */

/* Parses GBNF text (llama.cpp's grammar format; the start rule is `root`). NULL with a one-line error. */
gram *gram_parse(const char *text, hearth_err *err);
void gram_free(gram *g);
/* Whether the whole of s[0..n) is a sentence of the grammar (complete = true) or a prefix of one (false). */
bool gram_matches(const gram *g, const char *s, size_t n, bool complete);

/* hearth_json_schema_to_grammar with the top rule named root_name, to embed in a larger grammar (whose own
 * rule names must not collide: the converter's are root_name-..., ref-..., and the JSON primitives). When
 * warnings is not NULL it gets what the schema said that is not enforced because it is only an annotation
 * (unknown formats), malloc'd, or NULL. */
char *json_schema_gbnf(const char *schema, const char *root_name, char **warnings, hearth_err *err);

/* The tokens the grammar allows next, one bit per token id (n_vocab bits); cached by parse state. NULL when
 * out of memory. Used by the sampler's constraint stage. */
const uint64_t *grammar_mask(hearth_grammar *G);
/* How many of t[0..n), taken in turn from the current state, the grammar allows (nothing is accepted): speculative
 * decoding verifies only proposals the grammar could accept. G NULL: n. */
int grammar_allowed_prefix(hearth_grammar *G, const hearth_token *t, int n);
/* The model's sorted vocabulary, built by the first grammar on it and freed with the model. */
struct gram_vocab;
void gram_vocab_free(struct gram_vocab *v);

#endif
