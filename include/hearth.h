/* hearth.h — the public C API of hearth, a CPU inference engine for GGUF language models.
 *
 * Usage in brief:
 *   hearth_err err;
 *   hearth_model *m;  hearth_model_load("model.gguf", &m, &err)
 *   hearth_ctx *c;    hearth_ctx_new(m, &params, &c, &err)
 *   tokens = hearth_tokenize(...); hearth_decode(c, &batch, &err); logits = hearth_logits(c, i)
 *   hearth_sample(...), hearth_token_piece(...)
 * Every function that can fail returns 0 on success and -1 on failure with a one-line message in err. */
#ifndef HEARTH_H
#define HEARTH_H

/* Every function of the API, and nothing else, is exported from the shared library (libhearth.so). */
#if defined(__GNUC__)
#define HEARTH_API __attribute__((visibility("default")))
#else
#define HEARTH_API
#endif

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t hearth_token;
typedef struct hearth_model hearth_model;
typedef struct hearth_ctx hearth_ctx;
typedef struct { char msg[512]; } hearth_err;

/* ---- model ---- */
HEARTH_API int  hearth_model_load(const char *path, hearth_model **out, hearth_err *err);
/* Loads a GGUF image held in memory (buf must stay valid and unchanged until hearth_model_free); name is
 * what messages call it. Weights are used in place, as from a mapped file. */
HEARTH_API int  hearth_model_load_memory(const void *buf, size_t size, const char *name, hearth_model **out, hearth_err *err);
HEARTH_API void hearth_model_free(hearth_model *m);
/* Loads only a tokenizer, no weights: a tokenizer.json file, a directory holding tokenizer.json or vocab.txt
 * (with its tokenizer_config.json), or a GGUF's tokenizer.ggml.* metadata. The result works with the tokenizer
 * functions (hearth_tokenize, hearth_token_piece, BOS/EOS/EOG), hearth_model_meta_str, hearth_model_get_info
 * (arch "none", n_vocab set) and hearth_model_free; hearth_ctx_new refuses it. */
HEARTH_API int  hearth_tokenizer_load(const char *path, hearth_model **out, hearth_err *err);

typedef struct {
    const char *arch;          /* "llama", "qwen2", ... */
    const char *name;          /* general.name, or "" */
    int n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    bool is_encoder;           /* BERT-style: no causal generation */
    uint64_t n_params;         /* elements across all weight tensors */
    uint64_t weight_bytes;     /* bytes of tensor data */
    uint64_t file_bytes;
    int n_expert, n_expert_used, n_ff_exp;   /* mixture of experts: experts per layer, chosen per token, their FFN width (0 if dense) */
    uint64_t n_params_active;  /* n_params with each expert stack counted at n_expert_used / n_expert */
    uint64_t active_bytes;     /* weight_bytes counted the same way: what one token's pass can read */
} hearth_model_info;
HEARTH_API void hearth_model_get_info(const hearth_model *m, hearth_model_info *out);
/* A string metadata value, e.g. "tokenizer.chat_template" (the model's Jinja chat template) or "general.name":
 * copies it NUL-terminated into buf (at most cap - 1 bytes; buf may be NULL when cap is 0) and returns its full
 * length, or -1 if the key is missing or not a string. */
HEARTH_API int hearth_model_meta_str(const hearth_model *m, const char *key, char *buf, size_t cap);

/* The CPU kernel set in use: "avx512vnni", "avx512", "avx2", "neon" or "scalar". */
HEARTH_API const char *hearth_kernels(void);
/* Use the kernel set of that name instead (as hearth --cpu does): false, leaving the set in use, if it is not
 * built in or this CPU cannot run it. Call it before loading models: weights repacked at load follow the set of
 * that moment. */
HEARTH_API bool hearth_set_kernels(const char *name);

/* ---- tokenizer ---- */
/* False for a model loaded without tokenizer data (it then evaluates token ids only). */
HEARTH_API bool hearth_model_has_tokenizer(const hearth_model *m);
/* Tokenize text into out (capacity cap). Returns the number of tokens, or -1 on error. If the result would
 * not fit, returns the needed count without writing past cap; call again with a larger buffer. */
HEARTH_API int hearth_tokenize(const hearth_model *m, const char *text, size_t len, bool add_bos, bool parse_special,
                    hearth_token *out, int cap, hearth_err *err);
/* The bytes a token stands for when detokenized (may be part of a UTF-8 character). Returns the byte
 * count (possibly > cap, in which case nothing past cap is written). */
HEARTH_API int hearth_token_piece(const hearth_model *m, hearth_token t, char *buf, int cap);
/* The same, but control tokens show their text (e.g. "<|im_start|>") instead of nothing. */
HEARTH_API int hearth_token_text(const hearth_model *m, hearth_token t, char *buf, int cap);
HEARTH_API hearth_token hearth_token_bos(const hearth_model *m);   /* -1 if none */
HEARTH_API hearth_token hearth_token_eos(const hearth_model *m);
HEARTH_API bool hearth_token_is_eog(const hearth_model *m, hearth_token t);  /* end of generation (EOS, EOT, ...) */

/* Streaming detokenizer: feeds token pieces and emits only whole UTF-8 characters. */
typedef struct { char pend[8]; int n_pend; } hearth_detok;
/* Appends the printable bytes for token t to buf (cap >= 64 + longest piece); returns the count. */
HEARTH_API int hearth_detok_push(const hearth_model *m, hearth_detok *d, hearth_token t, char *buf, int cap);
/* Flushes bytes still held (an incomplete character at end of stream, emitted as-is). */
HEARTH_API int hearth_detok_flush(hearth_detok *d, char *buf, int cap);

/* ---- context: KV cache, scratch, threads ---- */
/* KV cache element types (ggml's type ids). F32 and F16 caches are kept transposed; BF16, Q8_0 and Q4_0 as rows
 * (Q8_0 and Q4_0 need head sizes that are multiples of 32). HEARTH_CACHE_AS_BOTH: take cache_type. */
typedef enum {
    HEARTH_CACHE_AS_BOTH = -1, HEARTH_CACHE_F32 = 0, HEARTH_CACHE_F16 = 1, HEARTH_CACHE_Q4_0 = 2, HEARTH_CACHE_Q8_0 = 8,
    HEARTH_CACHE_BF16 = 30
} hearth_cache_type;
typedef struct {
    int n_ctx;          /* tokens of KV cache per sequence; 0 = min(model's n_ctx_train, 4096) */
    int n_seq;          /* independent sequences (server slots); default 1 */
    int n_batch;        /* most tokens per decode call; default 512 */
    int n_threads;      /* 0 = all cores (passes of a model too small to split on one) */
    hearth_cache_type cache_type;   /* K and V cache type: F16 (default), F32, BF16, Q8_0 or Q4_0 */
    hearth_cache_type cache_type_k; /* K alone (llama.cpp's -ctk); HEARTH_CACHE_AS_BOTH (the default) = cache_type */
    hearth_cache_type cache_type_v; /* V alone (-ctv); HEARTH_CACHE_AS_BOTH (the default) = cache_type; both 0 (a
                                     * struct zeroed rather than made by hearth_ctx_default_params) = cache_type too */
} hearth_ctx_params;
HEARTH_API hearth_ctx_params hearth_ctx_default_params(void);
HEARTH_API int  hearth_ctx_new(hearth_model *m, const hearth_ctx_params *p, hearth_ctx **out, hearth_err *err);
HEARTH_API void hearth_ctx_free(hearth_ctx *c);
HEARTH_API int  hearth_ctx_n_ctx(const hearth_ctx *c);
HEARTH_API void hearth_ctx_cache_types(const hearth_ctx *c, hearth_cache_type *k, hearth_cache_type *v);   /* as resolved */
HEARTH_API hearth_model *hearth_ctx_model(const hearth_ctx *c);

/* A batch: n tokens, each with its position and sequence; logits are produced for rows with want_logits
 * set (NULL = last row only). Sequence s must be filled in order: pos of a new token = tokens already
 * cached for s (hearth_seq_len). */
typedef struct {
    int n;
    const hearth_token *tokens;
    const int32_t *pos;        /* NULL = continue each sequence */
    const int32_t *seq;        /* NULL = all sequence 0 */
    const int8_t *want_logits; /* NULL = last row only */
} hearth_batch;
HEARTH_API int hearth_decode(hearth_ctx *c, const hearth_batch *b, hearth_err *err);
/* Logits of batch row i of the last decode (n_vocab floats), or NULL if that row had none. */
HEARTH_API const float *hearth_logits(const hearth_ctx *c, int i);
/* Encoder / embedding output: hidden state of row i of the last decode (n_embd floats). */
HEARTH_API const float *hearth_hidden(const hearth_ctx *c, int i);
HEARTH_API int  hearth_seq_len(const hearth_ctx *c, int seq);
/* Forget cached positions >= pos of sequence seq (pos 0 clears it). A model with sliding-window layers
 * keeps only the last window + n_batch positions of those layers: going back more than n_batch tokens
 * clears the sequence instead (hearth_seq_len tells). */
HEARTH_API void hearth_seq_truncate(hearth_ctx *c, int seq, int pos);
/* How many more positions sequence seq can take and still be cut back to its current length exactly: a model
 * with recurrent layers (Gated DeltaNet) keeps its state at the start of the current chunk of 64 positions, and
 * the position that completes the chunk makes the positions before it final; a sliding-window ring overwrites
 * what is further back than its slack. INT_MAX when nothing limits it (speculative drafts stay within it). */
HEARTH_API int  hearth_seq_cut_room(const hearth_ctx *c, int seq);
/* A sequence's KV cache as bytes, to keep a prompt's prefix and restore it later (prompt caches): each position
 * takes hearth_kv_token_bytes(c). hearth_kv_read copies positions [pos0, pos0 + n) of seq (they must be cached)
 * into buf; hearth_kv_write appends them to seq, whose length must be pos0, and the sequence is then as if it
 * had decoded those tokens (bit for bit: same logits after). Both return -1 on bad arguments, or for a model
 * with sliding-window layers (their ring caches cannot be restored this way). For hybrid models see below. */
HEARTH_API size_t hearth_kv_token_bytes(const hearth_ctx *c);
HEARTH_API int hearth_kv_read(const hearth_ctx *c, int seq, int pos0, int n, void *buf);
HEARTH_API int hearth_kv_write(hearth_ctx *c, int seq, int pos0, int n, const void *buf);
/* A hybrid model's recurrent layers (Qwen3.5's Gated DeltaNet) keep a fixed-size state per sequence instead of
 * per-position KV: hearth_kv_* move only the attention layers' KV, and the state is checkpointed at multiples of
 * 64 positions. hearth_state_bytes is a checkpoint's size (0: the model has no recurrent layers, or it is split
 * over MPI ranks). hearth_state_read copies seq's state after its first pos positions, where pos is its length
 * rounded down to a multiple of 64 (the only one kept); hearth_state_write restores it to a sequence of length
 * pos (a multiple of 64). After hearth_kv_write on such a model the sequence cannot be decoded until its state
 * is written: KV blocks, then the state at their end, gives the sequence exactly as computed. -1 on bad
 * arguments. */
HEARTH_API size_t hearth_state_bytes(const hearth_ctx *c);
HEARTH_API int hearth_state_read(const hearth_ctx *c, int seq, int pos, void *buf);
HEARTH_API int hearth_state_write(hearth_ctx *c, int seq, int pos, const void *buf);

/* Embedding of a token sequence: clears sequence 0, evaluates the n tokens on it and pools the final hidden
 * states as the model says: encoders by their pooling type (mean, CLS = first token, last token, or none);
 * decoders by the mean of the last hidden state (after the final norm). Writes n_embd floats to out, or with
 * pooling none one row per token (n * n_embd floats). Returns the number of rows written, -1 on error. */
HEARTH_API int hearth_embed(hearth_ctx *c, const hearth_token *tokens, int n, float *out, hearth_err *err);
/* Rows hearth_embed writes for n tokens: 1, or n when the model's pooling is none. */
HEARTH_API int hearth_embed_rows(const hearth_ctx *c, int n);

/* ---- LoRA adapters ---- */
/* An adapter in llama.cpp's GGUF form (general.type "adapter", adapter.type "lora", adapter.lora.alpha, pairs
 * NAME.lora_a / NAME.lora_b for the model's weights NAME), checked against m: its architecture and every pair's
 * shapes must fit, else -1 with one line naming the tensor. It reads its file in place and must be freed after
 * the contexts that use it. */
typedef struct hearth_lora hearth_lora;
#define HEARTH_MAX_LORA 16
HEARTH_API int hearth_lora_load(hearth_model *m, const char *path, hearth_lora **out, hearth_err *err);
HEARTH_API void hearth_lora_free(hearth_lora *a);
HEARTH_API int hearth_lora_count(const hearth_lora *a);   /* adapted weights */
HEARTH_API int hearth_lora_rank(const hearth_lora *a);    /* the largest rank among them */
HEARTH_API float hearth_lora_alpha(const hearth_lora *a);
/* The adapters applied from the next decode on, to every sequence of c (n = 0: none): each adapted weight W
 * gives W x + sum of scale * alpha / rank * B (A x), computed beside the unchanged base weights (a quantized
 * base stays quantized). At most HEARTH_MAX_LORA; -1 with err on a bad adapter or scale. */
HEARTH_API int hearth_ctx_set_lora(hearth_ctx *c, hearth_lora *const *a, const float *scales, int n, hearth_err *err);
/* Sequence seq's own scales of the adapters set on c (n of them, in hearth_ctx_set_lora's order; 0 = not
 * applied): sequences with different adapters share a batch, and each row gets exactly the logits it would get
 * alone. -1 with err when c has no adapters. */
HEARTH_API int hearth_seq_set_lora(hearth_ctx *c, int seq, const float *scales, hearth_err *err);
/* An identity of the adapters and scales applied to seq (0: none), for caches of computed KV to key on;
 * hearth_ctx_lora_id is sequence 0's. */
HEARTH_API uint64_t hearth_seq_lora_id(const hearth_ctx *c, int seq);
HEARTH_API uint64_t hearth_ctx_lora_id(const hearth_ctx *c);
/* Merges adapters into m's weights for good (W' = W + sum of scale * alpha / rank * B A, row by row on n_threads):
 * each adapted matrix is dequantized, added to and requantized to its own type with hearth's reference
 * quantizer (F32 / F16 / BF16 stay in their type), in a copy the model owns; untouched matrices stay mapped.
 * A quantized base is rounded again, so logits differ slightly from the unmerged path's. Only before m's first
 * context, and not for a model split over MPI ranks or a token embedding; *bytes (may be NULL) gets the bytes
 * copied. The adapters are then merged: hearth_ctx_set_lora refuses them. -1 with err (m unchanged). */
HEARTH_API int hearth_lora_merge(hearth_model *m, hearth_lora *const *a, const float *scales, int n, int n_threads,
                                 size_t *bytes, hearth_err *err);
/* ---- sampling ---- */
/* The sampler chain. hearth_sample runs these stages, in this order, over the n_vocab logits of one row:
 *   1. logit bias   logit += bias[id]          (hearth_sampler_set_bias, hearth_sampler_bias_text)
 *   2. constraints  tokens the grammar does not allow (hearth_sampler_set_grammar) and tokens the allow
 *                   callback rejects (hearth_sampler_set_allow) are masked out; so are tokens whose logit is
 *                   now -inf or NaN. Only unmasked tokens are candidates.
 *   3. penalties    a token seen c > 0 times in the last repeat_last_n history tokens gets
 *                   logit = logit > 0 ? logit / repeat_penalty : logit * repeat_penalty, then
 *                   logit -= c * frequency_penalty + presence_penalty        (llama.cpp semantics)
 *   4. temperature  logit /= temperature (skipped when temperature <= 0)
 *   5. top-k        keep the top_k highest logits
 *   6. top-p        keep the most likely tokens, best first, until their probability sum reaches >= top_p
 *   7. min-p        keep tokens with p >= min_p * p(most likely token)
 *   8. typical-p    keep the tokens whose surprisal -ln p is closest to the entropy of the candidates,
 *                   closest first, until their probability sum reaches >= typical_p
 *   9. pick         least_likely: the least probable survivor; else temperature <= 0: the most probable
 *                   survivor (greedy); else a random draw by probability from a xoshiro256** stream seeded
 *                   by `seed`.
 * Probabilities in stages 6-9 are the softmax over the survivors of the stage before. Every stage keeps at
 * least one candidate. Equal logits are ordered by lower token id, so all choices are deterministic: the same
 * seed, parameters and inputs give the same sequence of picks, and greedy picks the argmax with ties going to
 * the lowest id (top-k/p and min-p always keep that token, so only typical-p can change a greedy pick).
 * hearth_sample does no allocation; a sampler is used by one thread at a time. */
typedef struct {
    float temperature;       /* <= 0: greedy */
    int top_k;               /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float typical_p;         /* >= 1: off */
    float repeat_penalty;    /* 1: off */
    float frequency_penalty; /* 0: off */
    float presence_penalty;  /* 0: off */
    int repeat_last_n;       /* history tokens looked back for the penalties; 0: none, -1: all */
    bool least_likely;       /* pick the least probable surviving token (overrides greedy and random) */
    uint64_t seed;           /* PRNG seed for random picks */
} hearth_sampler_params;
/* temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_last_n 64, seed 0, every other stage off. */
HEARTH_API hearth_sampler_params hearth_sampler_default_params(void);
/* The model's own sampling defaults: hearth_sampler_default_params() with what the model declares laid over it
 * (a Hugging Face directory's generation_config.json: temperature, top_p, top_k, min_p, typical_p,
 * repetition_penalty; do_sample false = greedy), kept as hearth.generation.* metadata so a GGUF written by
 * hearth quantize has them too. The CLI starts from these and applies the user's flags on top. */
HEARTH_API hearth_sampler_params hearth_model_sampler_defaults(const hearth_model *m);
typedef struct hearth_sampler hearth_sampler;
/* NULL if n_vocab <= 0 or out of memory. p == NULL means the defaults. Buffers for n_vocab candidates are
 * allocated here once. */
HEARTH_API hearth_sampler *hearth_sampler_new(const hearth_sampler_params *p, int n_vocab);
HEARTH_API void hearth_sampler_free(hearth_sampler *s);
/* Picks a token from logits (n_vocab floats); `history` (the tokens so far, may be NULL) feeds the penalties.
 * Returns -1 if every token is masked out. */
HEARTH_API hearth_token hearth_sample(hearth_sampler *s, const float *logits, const hearth_token *history, int n_history);
/* Tells the sampler a token was accepted; it calls the accept hook, if any. Call it once per generated token
 * (not for prompt tokens). */
HEARTH_API void hearth_sampler_accept(hearth_sampler *s, hearth_token t);
/* Runs stages 1-8 (not the pick) and writes the survivors, most probable first (ties: lower id), with their
 * probabilities normalized over all survivors, into ids/probs (at most cap entries). Returns the number of
 * survivors (may exceed cap), or -1 on bad arguments. With temperature <= 0 the probabilities are those at
 * temperature 1. For tests and diagnostics: it sorts the returned prefix. */
HEARTH_API int hearth_sampler_candidates(hearth_sampler *s, const float *logits, const hearth_token *history, int n_history,
                              hearth_token *ids, float *probs, int cap);

/* Stage 1: sets token id's logit bias (replacing an earlier one; 0 clears, -INFINITY bans the token).
 * Returns -1 if id is out of range or bias is NaN or +inf. */
HEARTH_API int hearth_sampler_set_bias(hearth_sampler *s, hearth_token id, float bias);
/* Adds `bias` to every token whose piece contains `needle` (byte-wise, case-sensitive), e.g. the CLI's
 * "--bias-text bard=+3". pieces[id] is token id's text (NUL-terminated, NULL = skip), n_vocab of them.
 * Returns the number of tokens biased, or -1 on bad arguments (empty needle, NaN or +inf bias). */
HEARTH_API int hearth_sampler_bias_text(hearth_sampler *s, const char *const *pieces, int n_vocab, const char *needle,
                             float bias);

/* Stage 2: a token is a candidate only if allow(user, t) returns true. NULL removes the callback. The callback
 * is called for every token not already masked, once per hearth_sample. */
typedef bool (*hearth_allow_fn)(void *user, hearth_token t);
HEARTH_API void hearth_sampler_set_allow(hearth_sampler *s, hearth_allow_fn allow, void *user);
/* Called by hearth_sampler_accept with each accepted token, so a stateful allow callback can follow the text. */
typedef void (*hearth_accept_fn)(void *user, hearth_token t);
HEARTH_API void hearth_sampler_set_accept_hook(hearth_sampler *s, hearth_accept_fn on_accept, void *user);

/* Stage 2 with a grammar: only tokens the grammar allows are candidates, and end-of-generation tokens only
 * where the grammar may end. hearth_sampler_accept advances it. NULL removes it; g must outlive its use. */
typedef struct hearth_grammar hearth_grammar;
HEARTH_API void hearth_sampler_set_grammar(hearth_sampler *s, hearth_grammar *g);

/* ---- grammars: constrained output ---- */
/* A grammar in GBNF, llama.cpp's grammar format (rules `name ::= ...`, "literals", [classes], [^negated], ., ( ),
 * | , * + ? {m} {m,} {m,n}, # comments; the start rule is `root`), bound to a model's vocabulary. It matches
 * the bytes of the reply; a token is allowed when all its bytes can come next. NULL with a one-line error
 * (naming the line) for a bad grammar. One grammar follows one reply: reset it to start again. */
HEARTH_API hearth_grammar *hearth_grammar_new(hearth_model *m, const char *gbnf, hearth_err *err);
HEARTH_API void hearth_grammar_free(hearth_grammar *g);
HEARTH_API void hearth_grammar_reset(hearth_grammar *g);
HEARTH_API bool hearth_grammar_allows(hearth_grammar *g, hearth_token t);
HEARTH_API void hearth_grammar_accept(hearth_grammar *g, hearth_token t);
/* The text so far is a whole sentence of the grammar (can_end); and nothing more may follow it (done). */
HEARTH_API bool hearth_grammar_can_end(const hearth_grammar *g);
HEARTH_API bool hearth_grammar_done(const hearth_grammar *g);
/* Memory ran out while following the text: the grammar allows nothing from then on (sampling says -1), and the
 * reply should end with an error rather than as if complete. */
HEARTH_API bool hearth_grammar_failed(const hearth_grammar *g);
/* The token budget: with n_tokens (>= 0) left for the reply, only tokens after which the grammar can still end
 * within the rest are allowed, so a constrained reply ends complete at or before the budget (set it before each
 * token; < 0: no budget). min_tokens: tokens that surely finish the grammar from here, along its cheapest
 * completion (-1: no token sequence can), e.g. to refuse a max_tokens too small before generating. */
HEARTH_API void hearth_grammar_set_budget(hearth_grammar *g, int n_tokens);
HEARTH_API int hearth_grammar_min_tokens(const hearth_grammar *g);
/* A JSON Schema (text) as GBNF, malloc'd: NULL with a one-line error naming the keyword or construct that
 * cannot be enforced; a schema is never loosened. "{}" or "true" mean any JSON value; see the README for the
 * keywords supported. */
HEARTH_API char *hearth_json_schema_to_grammar(const char *schema, hearth_err *err);

/* The "only words starting with these letters" constraint (the CLI's --only-words-starting BW).
 * Words are runs of word characters: ASCII letters and digits and every byte >= 0x80 (UTF-8 text); an
 * apostrophe inside a word ("don't") does not end it. Anything else (spaces, newlines, punctuation, hyphens)
 * ends a word. A word's first character must be one of `letters` (NULL: no constraint): ASCII compared
 * case-insensitively, other characters by their UTF-8 bytes (a piece holding only the first bytes of a
 * character passes if they begin an allowed one). hearth_words_starting_allow says whether `piece` may follow
 * text that ends inside a word (in_word) or not: a piece continuing the current word is free, each word it
 * starts must be allowed, pieces of only spaces and punctuation are allowed. The reply's first word is a new
 * word (start with in_word = false). */
HEARTH_API bool hearth_words_starting_allow(const char *letters, bool in_word, const char *piece);
/* Whether text that ended inside a word (in_word) still ends inside a word after `text` is appended. */
HEARTH_API bool hearth_words_ends_in_word(bool in_word, const char *text);
/* The constraint as sampler callbacks. The CLI wires it as:
 *   hearth_words_constraint wc; hearth_words_constraint_init(&wc, "BW", pieces, n_vocab);
 *   hearth_sampler_set_allow(s, hearth_words_constraint_allow, &wc);
 *   hearth_sampler_set_accept_hook(s, hearth_words_constraint_accept, &wc);
 *   per step: t = hearth_sample(s, ...); hearth_sampler_accept(s, t);
 * pieces[id] is token id's text from hearth_token_piece, NUL-terminated; give control tokens (EOS, EOT, ...)
 * NULL or "", which are always allowed, so the reply can end. wc, letters and pieces must outlive the sampler's
 * use of them. */
typedef struct {
    const char *letters;          /* allowed first characters, e.g. "BW" */
    const char *const *pieces;    /* n_vocab token texts */
    int n_vocab;
    bool in_word;                 /* the reply so far ends inside a word */
} hearth_words_constraint;
HEARTH_API void hearth_words_constraint_init(hearth_words_constraint *wc, const char *letters, const char *const *pieces,
                                  int n_vocab);
HEARTH_API bool hearth_words_constraint_allow(void *wc, hearth_token t);   /* a hearth_allow_fn */
HEARTH_API void hearth_words_constraint_accept(void *wc, hearth_token t);  /* a hearth_accept_fn */

/* Log-probabilities: log-softmax of the raw logits (n_vocab floats; NaN counts as -inf). Writes the chosen
 * token's log-probability to *chosen_logprob (if not NULL) and the top_k most likely tokens, most likely first
 * (ties: lower id), to top_ids/top_logprobs. Returns the number of top entries written (min(top_k, n_vocab)),
 * or -1 on bad arguments or if no logit is finite (all -inf/NaN, or one is +inf). Allocates nothing. */
HEARTH_API int hearth_logprobs(const float *logits, int n_vocab, hearth_token chosen, int top_k, float *chosen_logprob,
                    hearth_token *top_ids, float *top_logprobs);

/* ---- one model over several processes (MPI) ---- */
/* How a rank loads the model rank 0 names: hearth_model_load, or the program's own (e.g. one that knows a name
 * for a model embedded in the binary). */
typedef int (*hearth_model_loader)(const char *path, hearth_model **out, hearth_err *err);
/* Call first in main(). Started by mpirun with 2+ ranks (in a build with MPI), the model of each context rank 0
 * makes is split by layers over the ranks: on rank 0 this returns 0 and the program runs as usual; the other
 * ranks serve rank 0 and do not return (they exit when it ends). Takes "--split N,N,..." (layers per rank)
 * out of argv. Outside a job it returns 0 and nothing changes. -1 with err set: bad --split, or MPI failed. */
HEARTH_API int hearth_mpi_init(int *argc, char ***argv, hearth_model_loader load, hearth_err *err);
HEARTH_API int hearth_mpi_rank(void);   /* 0 outside a job */
HEARTH_API int hearth_mpi_size(void);   /* 1 outside a job */

#ifdef __cplusplus
}
#endif
#endif
