/* quantize.h — writing a loaded model out as a GGUF of another tensor type (hearth quantize), and the
 * per-tensor type recipe shared with the synthetic-model writer. */
#ifndef HEARTH_QUANTIZE_H
#define HEARTH_QUANTIZE_H

#include "model/imatrix.h"
#include "model/model.h"

enum { QMIX_PURE = 0, QMIX_DEFAULT = 1, QMIX_K_M = 2 };   /* --pure, llama-quantize's default, _M mixes */

/* "Q4_K_M" -> base Q4_K, mix K_M, llama_ftype 15; plain types get QMIX_DEFAULT, or QMIX_PURE with pure.
 * Returns -1 for an unknown name. */
int quant_parse_type(const char *name, bool pure, uint32_t *base, int *mix, uint32_t *ftype);
/* The accepted type names, space-separated. */
const char *quant_type_list(void);
/* The type tensor `name` gets under (base, mix): F32 for vectors and norms, llama.cpp's recipe for the
 * _M mixes, a fitting fallback when ne0 is not a multiple of the block size. */
uint32_t quant_tensor_type(const char *name, int n_dims, int64_t ne0, uint32_t base, int mix, int n_layer,
                           bool has_output);

/* Refuses (-1, err set) an output path that names the input model: the GGUF file itself, or any file of an
 * HF directory, through any name (hard links and symlinks included). Checked before anything is written. */
int quant_check_paths(const char *in, const char *out, hearth_err *err);

/* quantize --lora: merges the adapters into m's weights (lora_merge) for writing m as type_name (pure): a
 * matrix the recipe keeps in its type is merged in that type (then copied as it is: the bits --lora-merge
 * gives), any other in F32 (one rounding, to the recipe's type, when written). */
int quant_merge_lora(hearth_model *m, hearth_lora *const *a, const float *scales, int n, const char *type_name, bool pure,
                     int n_threads, size_t *bytes, hearth_err *err);

typedef void (*quant_progress_fn)(void *user, int done, int total, const char *tensor);
/* Writes m to `out` with every tensor converted per the recipe for type_name (pure: no mix); atomically:
 * a temp file beside `out` is renamed into place only when complete. */
int model_quantize(const hearth_model *m, const char *out, const char *type_name, bool pure, int n_threads,
                   quant_progress_fn progress, void *user, hearth_err *err);
/* Same, the matrices weighted by an importance matrix as llama-quantize --imatrix does (im NULL: none). The types
 * that need one (IQ2_XXS, ...) are refused without it, except for token_embd and output, which then get uniform
 * weights; a type whose weighted quantizer hearth lacks is refused with an imatrix. */
int model_quantize_imatrix(const hearth_model *m, const char *out, const char *type_name, bool pure, ht_imatrix *im,
                           int n_threads, quant_progress_fn progress, void *user, hearth_err *err);

#endif
