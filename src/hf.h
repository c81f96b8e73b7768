/* hf.h — loading a Hugging Face checkpoint directory (config.json + safetensors + tokenizer) into a
 * hearth_model, mapped onto the same weights and hyperparameters the GGUF path produces. */
#ifndef HEARTH_HF_H
#define HEARTH_HF_H

#include "model.h"

/* Fills m (zeroed by the caller) from directory dir. On error the caller frees m. */
int hf_load(hearth_model *m, const char *dir, hearth_err *err);

/* Loads dir's tokenizer.json, or vocab.txt (lowercased unless tokenizer_config.json says do_lower_case false),
 * into m->vocab; neither is not an error (m->vocab stays NULL). */
int hf_load_tokenizer(hearth_model *m, const char *dir, hearth_err *err);

/* hf_meta.c: adds the metadata of dir's tokenizer_config.json (tokenizer.chat_template) and
 * generation_config.json (hearth.generation.temperature, top_p, top_k, min_p, typical_p, repetition_penalty,
 * eos_token_ids); absent files add nothing, unreadable ones are an error. */
int hf_put_extra_metadata(gguf_writer *w, const char *dir, hearth_err *err);
/* Marks hearth.generation.eos_token_ids (if any) as end-of-generation tokens of m's vocabulary. */
void model_apply_generation_eog(hearth_model *m);

#endif
