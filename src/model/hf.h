/* hf.h — loading a Hugging Face checkpoint directory (config.json + safetensors + tokenizer) into a
 * hearth_model, mapped onto the same weights and hyperparameters the GGUF path produces. */
#ifndef HEARTH_HF_H
#define HEARTH_HF_H

#include "model/model.h"

/* Fills m (zeroed by the caller) from directory dir. On error the caller frees m. */
int hf_load(hearth_model *m, const char *dir, hearth_err *err);

/* Loads dir's tokenizer.json, or vocab.txt (lowercased unless tokenizer_config.json says do_lower_case false),
 * into m->vocab; neither is not an error (m->vocab stays NULL). */
int hf_load_tokenizer(hearth_model *m, const char *dir, hearth_err *err);

#endif
