/* hf.h — loading a Hugging Face checkpoint directory (config.json + safetensors + tokenizer) into a
 * hearth_model, mapped onto the same weights and hyperparameters the GGUF path produces. */
#ifndef HEARTH_HF_H
#define HEARTH_HF_H

#include "model.h"

/* Fills m (zeroed by the caller) from directory dir. On error the caller frees m. */
int hf_load(hearth_model *m, const char *dir, hearth_err *err);

#endif
