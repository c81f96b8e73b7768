/* cli.h — the hearth command-line tool: one cmd_*.c file per subcommand, dispatched from hearth.c.
 * Each command takes the arguments after its name (argv[0] is the command name) and returns the exit code. */
#ifndef HEARTH_CLI_H
#define HEARTH_CLI_H

#include <stdbool.h>
#include <stdio.h>
#include "hearth.h"

int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_golden(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_imatrix(int argc, char **argv);
int cmd_fill_mask(int argc, char **argv);

/* Shared helpers (cli_util.c). */
/* The name -m defaults to: the embedded stories260K.gguf (cli_load_model loads it from memory). */
const char *cli_default_model(void);
const void *cli_default_model_data(size_t *size);   /* default_model.c */
/* hearth_model_load, or the embedded model for cli_default_model()'s name. */
int cli_model_load(const char *path, hearth_model **m, hearth_err *err);
/* Parses an integer / float flag value; on failure prints "error: bad value for FLAG: VAL" and returns false. */
bool cli_int(const char *flag, const char *val, long lo, long hi, long *out);
bool cli_float(const char *flag, const char *val, double *out);
/* The KV cache flags: --cache-type T (K and V), --cache-type-k / -ctk T, --cache-type-v / -ctv T (llama.cpp's). */
bool cli_is_cache_flag(const char *flag);
/* Parses one of them into kv[0] (K) and / or kv[1] (V): f16, bf16, q8_0, q4_0 or f32; on failure prints the
 * one-line error and returns false. */
bool cli_cache_types(const char *flag, const char *val, hearth_cache_type kv[2]);
/* LoRA adapters as llama.cpp spells them: --lora FILE[,FILE...] (scale 1) and --lora-scaled FILE:SCALE[,...],
 * both repeatable. cli_lora_arg collects a flag's value (false after printing the error); cli_lora_load loads
 * them for m (once), cli_lora_set sets them on ctx (each 1 after printing the error, naming the file);
 * cli_lora_free frees them, after the contexts that use them. With merge (--lora-merge), cli_lora_load merges
 * them into m's weights (so before m's first context) and cli_lora_set does nothing. */
typedef struct {
    int n;
    bool merge, merged;
    char *path[HEARTH_MAX_LORA];
    float scale[HEARTH_MAX_LORA];
    hearth_lora *a[HEARTH_MAX_LORA];
} cli_lora;
bool cli_lora_arg(const char *flag, const char *val, cli_lora *l);
int cli_lora_load(hearth_model *m, cli_lora *l);
int cli_lora_set(hearth_ctx *ctx, const cli_lora *l);
void cli_lora_free(cli_lora *l);
/* Prints "error: MSG" as one line to stderr and returns 1. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Loads a model (or exits 1 with one line). */
hearth_model *cli_load_model(const char *path);
/* From now on SIGINT / SIGTERM / SIGHUP remove the temp files of writes in progress before the process ends,
 * so an interrupted quantize or synth leaves nothing behind (the target name never held a half file). */
void cli_unlink_temps_on_signal(void);
/* Reads a whole file; NULL + message on failure. */
char *cli_read_file(const char *path, size_t *len);
/* text[0..len) tokenized into *out (malloc'd, grown to what the tokenizer needs: byte fallback can give more tokens
 * than bytes); the count, or -1 after printing an error. */
int cli_tokenize(hearth_model *m, const char *text, size_t len, bool add_bos, bool special, hearth_token **out);
/* The BOS a chunk of a text starts with (perplexity, imatrix): the model's, if its tokenizer adds one; else -1. */
hearth_token cli_chunk_bos(hearth_model *m);
/* The grammar the reply must follow: --grammar-file F (GBNF), --json-schema F, or --json-object (any JSON
 * object); at most one. *g stays NULL when none is asked for. Returns 0, or 1 after printing the error. */
typedef struct { const char *gbnf_file, *schema_file; bool json_object; } cli_grammar_opts;
int cli_grammar(hearth_model *m, const cli_grammar_opts *o, hearth_grammar **g);
/* Decodes toks[0..n) into sequence 0 after what it holds (`cached` prompt tokens before them), 512 tokens a
 * call. On a terminal, once the prompt has taken more than a second, a progress line on stderr ("prompt 1024 /
 * 1830 tokens, 56%, 3 cached"), erased when done. Returns the row of the last token's logits in the last
 * decode, or -1 with err set (what was decoded stays in the cache). */
int cli_prefill(hearth_ctx *ctx, const hearth_token *toks, int n, int cached, hearth_err *err);

#endif
