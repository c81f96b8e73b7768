/* golden.h — the "HGLD" golden-output file format (see tests/data/README.md): cases of token sequences
 * with reference logits (kind 0), hidden states (kind 1) or pooled embeddings (kind 2). */
#ifndef HEARTH_GOLDEN_H
#define HEARTH_GOLDEN_H

#include "common.h"

enum { GOLDEN_LOGITS = 0, GOLDEN_HIDDEN = 1, GOLDEN_POOLED = 2 };

typedef struct {
    uint32_t n_tokens, n_out, kind;
    int32_t *tokens;
    float *values;      /* rows * n_out; rows = n_tokens, or 1 for kind 2 */
} golden_case;

typedef struct { uint32_t n_cases; golden_case *cases; } golden_file;

int  golden_read(const char *path, golden_file *out, hearth_err *err);
int  golden_write(const char *path, const golden_file *g, hearth_err *err);
void golden_free(golden_file *g);
static inline uint32_t golden_rows(const golden_case *c) { return c->kind == GOLDEN_POOLED ? 1 : c->n_tokens; }

/* Evaluates ref's tokens on a fresh sequence 0 of ctx (batched in one decode, or one token per decode
 * through the KV cache) and fills out with the same kind and shape as ref. Kind 2 pools as the model says
 * (hearth_embed). Encoders have no logits and no token-by-token evaluation. */
int golden_eval(hearth_ctx *ctx, const golden_case *ref, bool token_by_token, golden_case *out, hearth_err *err);

#endif
