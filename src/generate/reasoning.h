/* reasoning.h — a reply split into its reasoning and its answer, as it streams.
 *
 * Models that think aloud frame the thought in their template's own markup: <think>...</think> (Qwen3 / 3.5,
 * DeepSeek-R1, SmolLM3), Gemma 4's <|channel>thought ... <channel|>, and gpt-oss's harmony messages
 * (<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...). The format is read
 * off the chat template; the parser takes the reply's text in pieces of any size and appends to two outputs,
 * holding back only bytes that may begin a marker, so what it has emitted never changes as more text comes
 * (a stream can send it at once). Harmony messages addressed to a tool (`to=functions.NAME`) go to neither
 * output: the tool-call parser reads them from the whole text. */
#ifndef HEARTH_REASONING_H
#define HEARTH_REASONING_H

#include <stdbool.h>
#include <stddef.h>

#include "common.h"

typedef enum { RF_NONE, RF_THINK, RF_GEMMA4, RF_HARMONY } reasoning_fmt;

/* The format a chat template frames reasoning in (RF_NONE for NULL or a template without one). */
reasoning_fmt reasoning_detect(const char *template_src);
/* Whether a prompt (its last bytes, tail[0..n)) leaves the model inside a reasoning block: the generation
 * prompt opened it (Qwen3.5's "<think>\n"). */
bool reasoning_prompt_opens(reasoning_fmt f, const char *tail, size_t n);
/* The marker that closes a reasoning block (NULL for RF_NONE and RF_HARMONY, whose messages end otherwise). */
const char *reasoning_close(reasoning_fmt f);

typedef struct {
    reasoning_fmt fmt;
    int state;
    char hold[32]; int n_hold;   /* bytes that may begin a marker */
    char head[64]; int n_head;   /* harmony: the channel header being read */
    ht_str reasoning, content;   /* the output so far (.oom set if memory ran out) */
    ht_str ws;                   /* reasoning's trailing white space, held */
} reasoning_parser;

void reasoning_init(reasoning_parser *p, reasoning_fmt f, bool in_reasoning);
void reasoning_feed(reasoning_parser *p, const char *s, size_t n);
/* The reply ended: bytes still held are resolved (an unfinished marker is text). */
void reasoning_finish(reasoning_parser *p);
void reasoning_free(reasoning_parser *p);

#endif
