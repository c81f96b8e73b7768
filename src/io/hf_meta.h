/* hf_meta.h — a Hugging Face directory's tokenizer_config.json and generation_config.json as GGUF metadata. */
#ifndef HEARTH_HF_META_H
#define HEARTH_HF_META_H

#include "io/gguf.h"

#define GEN_KEY "hearth.generation."   /* prefix of the sampling defaults and end-of-generation ids */

/* Adds the metadata of dir's tokenizer_config.json (tokenizer.chat_template) and generation_config.json
 * (hearth.generation.temperature, top_p, top_k, min_p, typical_p, repetition_penalty, eos_token_ids); absent
 * files add nothing, unreadable ones are an error. */
int hf_put_extra_metadata(gguf_writer *w, const char *dir, hearth_err *err);

#endif
