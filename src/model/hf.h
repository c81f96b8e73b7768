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

/* The GGUF name of an HF weight of architecture arch ("model.layers.3.self_attn.q_proj.weight" ->
 * "blk.3.attn_q.weight"), for weights used as stored (no transform, not an expert's); false if none.
 * *rotate_half: the family's HF q/k rows are in rotate-half order (GGUF's converter permutes them). */
bool hf_gguf_name(const char *arch, const char *hf_name, char *out, size_t cap, bool *rotate_half);

#endif
