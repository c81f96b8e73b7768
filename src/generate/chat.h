/* chat.h — chat prompts: a conversation (OpenAI-style JSON messages) rendered through the model's chat
 * template, or as plain continuation when the model has none, and tokenized so that only the template's
 * own special-token text becomes special tokens. Text that came from a message (any string in the
 * messages or in `extra`) never does: "<|im_start|>" typed by a user stays ordinary text.
 *
 * How: before rendering, every place in a message string where a control token's text starts gets a
 * private-use marker character after its first character (so it no longer matches), and strings that
 * begin with the tail or end with the head of a control token get a second marker at that edge (so no
 * match can span the template text and the message). The markers are picked so that they occur nowhere in
 * the template, the messages or the vocabulary. In the rendered text, every control-token match is then
 * the template's own; the text between those matches has its markers removed and is tokenized with
 * special parsing off. When no marker was needed (the usual case) the rendered text is tokenized in one
 * call with special parsing on, exactly as the tokenizer does it. */
#ifndef HEARTH_CHAT_H
#define HEARTH_CHAT_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "hearth.h"

typedef struct chat_fmt chat_fmt;

/* tmpl: Jinja source overriding the model's own (tokenizer.chat_template); NULL = the model's. A model
 * with neither gets the plain format: contents joined, user and system turns on a new line, the assistant's
 * text continuing where the conversation ends (see chat_fmt_has_template). */
int  chat_fmt_new(const hearth_model *m, const char *tmpl, chat_fmt **out, hearth_err *err);
void chat_fmt_free(chat_fmt *f);
bool chat_fmt_has_template(const chat_fmt *f);
const char *chat_fmt_source(const chat_fmt *f);   /* the Jinja source in use, or NULL (plain format) */

/* The text the model sees (message text verbatim); *out is malloc'd. extra may be NULL (see chat_render). */
int chat_fmt_render(const chat_fmt *f, const cJSON *messages, bool add_generation_prompt, const cJSON *extra,
                    char **out, hearth_err *err);
/* Renders and tokenizes as described above; BOS is prepended when the vocabulary adds one and the
 * rendered text does not already start with it. *out is malloc'd (free it), *n_out its length. */
int chat_fmt_tokenize(const chat_fmt *f, const cJSON *messages, bool add_generation_prompt, const cJSON *extra,
                      hearth_token **out, int *n_out, hearth_err *err);

/* Checks an OpenAI messages array and returns a normalized copy: each message an object with a string
 * role and content a string (text parts of a content array joined with "\n"; null stays null). Other
 * members are kept. NULL with err on a bad shape. */
cJSON *chat_messages_normalize(const cJSON *messages, hearth_err *err);

#endif
