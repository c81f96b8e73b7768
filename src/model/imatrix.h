/* imatrix.h — importance matrices (llama.cpp's tools/imatrix): per weight matrix, the sum over the tokens of
 * the squared input activations of each input column, and how many rows were summed; collected during a
 * forward pass through the context's input hook, written and read in llama.cpp's GGUF imatrix format. */
#ifndef HEARTH_IMATRIX_H
#define HEARTH_IMATRIX_H

#include "hearth.h"
#include "common.h"

typedef struct ht_imatrix ht_imatrix;

ht_imatrix *imatrix_new(bool process_output);
void imatrix_free(ht_imatrix *im);
/* Collects from every weight product c computes from now on (NULL: stops). As llama.cpp: the matrices named
 * blk.* (and output.weight with process_output); products of fewer than 16 rows are skipped except for expert
 * stacks, whose experts each sum the rows routed to them. */
void imatrix_attach(ht_imatrix *im, hearth_ctx *c);
/* The GGUF imatrix file: general.type "imatrix", imatrix.datasets, imatrix.chunk_count (the largest count /
 * chunk_size), imatrix.chunk_size; per matrix NAME (sorted) NAME.in_sum2 F32 [ne0, n_mat] and NAME.counts
 * F32 [1, n_mat]. Atomic (temp file renamed into place). */
int imatrix_write(const ht_imatrix *im, const char *path, const char *const *datasets, int n_datasets, int chunk_size,
                  hearth_err *err);
/* Reads a GGUF imatrix (sums and counts must pair up, F32, counts dividing sums). */
int imatrix_load(const char *path, ht_imatrix **out, hearth_err *err);
/* The importance of tensor `name`'s columns as llama-quantize derives it: in_sum2 / count per matrix (1 for a
 * matrix with count 0), n_mat * ne0 values; NULL when the file has no entry of that name. *n gets the size. */
const float *imatrix_weights(ht_imatrix *im, const char *name, int64_t *n);
int imatrix_entries(const ht_imatrix *im);
int imatrix_chunk_count(const ht_imatrix *im);
/* The first dataset named in the file, or NULL. */
const char *imatrix_dataset(const ht_imatrix *im);

#endif
