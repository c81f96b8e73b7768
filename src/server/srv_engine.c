/* srv_engine.c — the server's engine thread: it alone owns the model's contexts. Requests wait in a queue
 * for a free slot (one sequence of the context each, whose KV cache is kept after a request ends so a later
 * prompt that starts the same way reuses it). Every step builds ONE batch: the last sampled token of every
 * generating slot plus chunks of the prompts being prefilled, decodes it, and samples each slot's next token
 * (continuous batching). Embedding requests run between steps on a context of their own. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/model.h"          /* the context's thread pool, used to sample slots in parallel */
#include "server/srv_internal.h"
#include "generate/speculative.h"

#define QUEUE_MAX 4096

typedef struct {
    int seq;
    srv_task *task;              /* NULL: idle */
    hearth_token *cache;         /* the tokens in this sequence's KV cache */
    int n_cache;
    hearth_sampler *smp;
    hearth_detok dt;
    bool generating;             /* prompt done; `next` is fed at the next step */
    hearth_token next;
    int row, n_feed;             /* this step: logits row (-1 none), tokens put in the batch */
    uint64_t lora_id;            /* the adapters the cached tokens were computed with (hearth_seq_lora_id) */
    srv_tok pick;                /* this step's sampled token */
    spec_params sp;              /* the request's speculation (n_max 0: none) */
    spec_seq ss;                 /* this step's verification rows: `next`, then the proposals */
} slot;

struct srv_engine {
    hearth_model *m;
    hearth_ctx *ctx;             /* generation: one sequence per slot (NULL for an encoder) */
    hearth_ctx *ectx;            /* embeddings (made on first use for a decoder) */
    int n_ctx, e_n_ctx, n_slots, n_batch, n_vocab, n_threads;
    hearth_cache_type cache_type[2];   /* K, V */
    hearth_lora *const *lora;   /* the server's adapters (server_params), for the embeddings context too */
    const char *const *lora_path;
    float lora_scale[HEARTH_MAX_LORA];   /* the global scales (guarded by mu): a request starts from them */
    int n_lora;
    bool lora_merged;            /* --lora-merge: in the weights, so no context gets them */
    bool encoder;
    slot *slots;
    slot **picked;               /* this step's slots with logits */
    pthread_t th;
    bool started, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_task **q; int nq, capq;
    atomic_int n_busy;           /* slots with a task (written by the engine thread only) */
    atomic_llong n_steps, n_generated;   /* decode steps, tokens sampled: their ratio shows the batching */
    atomic_llong decode_us, step_us;     /* time in hearth_decode, and in whole steps (decode + sampling) */
    atomic_llong prompt_toks, cached_toks, gen_toks;   /* of finished generation tasks */
    hearth_token *b_tok; int32_t *b_pos, *b_seq; int8_t *b_want;
    srv_cache *pc;               /* the shared prompt cache, or NULL */
    pthread_mutex_t lat_mu;
    srv_latency lat;             /* time to first token, time per output token */
    atomic_llong pc_hits, pc_misses, pc_tokens, pc_entries;   /* its counters, for /metrics */
    spec_drafter *drafter;       /* --model-draft: one drafter sequence per slot, or NULL */
    spec_params spec;            /* the server's speculation (n_max 0: off) */
    atomic_llong drafted, accepted;
};

double srv_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- tasks ---- */
srv_task *task_new(srv_kind kind) {
    srv_task *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->kind = kind;
    t->max_tokens = -1;
    t->n_probs = -1;
    t->spec_mode = t->spec_n_max = t->spec_n_min = -1;
    t->spec_p_min = -1;
    t->refs = 1;
    t->t_submit = srv_now_ms();
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    return t;
}

static void task_free(srv_task *t) {
    free(t->prompt);
    for (int i = 0; i < t->n_stop; i++) free(t->stop[i]);
    for (int i = 0; i < t->n_inputs; i++) free(t->in[i]);
    free(t->in); free(t->n_in);
    free(t->text); free(t->toks); free(t->emb);
    hearth_grammar_free(t->grammar);
    free(t->grammar_src);
    free(t->tool_params);
    free(t->warning);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

void task_release(srv_task *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    int left = --t->refs;
    pthread_mutex_unlock(&t->mu);
    if (!left) task_free(t);
}

void task_cancel(srv_task *t) {
    pthread_mutex_lock(&t->mu);
    t->cancelled = true;
    pthread_mutex_unlock(&t->mu);
}

static bool task_cancelled(srv_task *t) {
    pthread_mutex_lock(&t->mu);
    bool c = t->cancelled;
    pthread_mutex_unlock(&t->mu);
    return c;
}

const double SRV_TTFT_BUCKETS[SRV_N_BUCKETS] = { .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120 };
const double SRV_TPOT_BUCKETS[SRV_N_BUCKETS] = { .001, .0025, .005, .01, .015, .02, .03, .05, .075, .1, .15, .25, .5, 1 };

static void observe(long long *b, const double *bounds, double v) {
    for (int i = 0; i < SRV_N_BUCKETS; i++) if (v <= bounds[i]) b[i]++;
    b[SRV_N_BUCKETS]++;   /* +Inf */
}

static void observe_latency(srv_engine *e, const srv_task *t, double now) {
    pthread_mutex_lock(&e->lat_mu);
    double ttft = (t->t_first - t->t_submit) / 1e3;
    observe(e->lat.ttft, SRV_TTFT_BUCKETS, ttft);
    e->lat.ttft_sum += ttft, e->lat.n_ttft++;
    if (t->n_gen > 1) {
        double tpot = (now - t->t_first) / 1e3 / (t->n_gen - 1);
        observe(e->lat.tpot, SRV_TPOT_BUCKETS, tpot);
        e->lat.tpot_sum += tpot, e->lat.n_tpot++;
    }
    pthread_mutex_unlock(&e->lat_mu);
}

void engine_latency(srv_engine *e, srv_latency *l) {
    pthread_mutex_lock(&e->lat_mu);
    *l = e->lat;
    pthread_mutex_unlock(&e->lat_mu);
}

static void pcache_publish(srv_engine *e) {
    long long h, m, tk, n;
    pcache_stats(e->pc, &h, &m, &tk, &n);
    atomic_store(&e->pc_hits, h), atomic_store(&e->pc_misses, m), atomic_store(&e->pc_tokens, tk), atomic_store(&e->pc_entries, n);
}

/* Marks t finished (status 0 = success) and wakes its reader. */
static void task_finish(srv_task *t, const char *reason, int status, const char *msg) {
    pthread_mutex_lock(&t->mu);
    t->stable = t->len;
    t->finish = reason;
    t->status = status;
    if (msg) snprintf(t->err, sizeof t->err, "%s", msg);
    t->done = true;
    t->t_done = srv_now_ms();
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

/* ---- generated text and stop strings (called with t->mu held) ---- */
static bool text_reserve(srv_task *t, size_t extra) {
    if (t->len + extra + 1 <= t->cap) return true;
    size_t nc = HT_MAX(t->cap * 2, t->len + extra + 256);
    char *p = realloc(t->text, nc);
    if (!p) return false;
    t->text = p; t->cap = nc;
    return true;
}

/* Where the earliest stop string in text starts, searching only matches that end after `from`. */
static long stop_find(const srv_task *t, size_t from) {
    long best = -1;
    for (int i = 0; i < t->n_stop; i++) {
        size_t sl = strlen(t->stop[i]);
        size_t s0 = from >= sl ? from - sl + 1 : 0;
        for (size_t p = s0; p + sl <= t->len; p++)
            if (!memcmp(t->text + p, t->stop[i], sl)) { if (best < 0 || (long)p < best) best = (long)p; break; }
    }
    return best;
}

/* Bytes at the end of text that could still grow into a stop string. */
static size_t stop_holdback(const srv_task *t) {
    size_t hold = 0;
    for (int i = 0; i < t->n_stop; i++) {
        size_t sl = strlen(t->stop[i]);
        for (size_t k = HT_MIN(sl - 1, t->len); k > hold; k--)
            if (!memcmp(t->text + t->len - k, t->stop[i], k)) { hold = k; break; }
    }
    return hold;
}

/* Appends generated bytes; returns true if a stop string now matched (the text is cut where it starts). */
static bool text_append(srv_task *t, const char *p, size_t n, bool *oom) {
    if (!text_reserve(t, n)) { *oom = true; return false; }
    size_t old = t->len;
    memcpy(t->text + t->len, p, n);
    t->len += n;
    t->text[t->len] = 0;
    long at = t->n_stop ? stop_find(t, old) : -1;
    if (at >= 0) {
        for (int i = 0; i < t->n_stop; i++)   /* which one matched there */
            if (!strncmp(t->text + at, t->stop[i], strlen(t->stop[i]))) { t->stop_hit = t->stop[i]; break; }
        t->len = (size_t)at;
        t->text[t->len] = 0;
        while (t->n_toks > 0 && (t->n_toks == 1 ? 0 : t->toks[t->n_toks - 2].text_end) >= t->len) t->n_toks--;
        if (t->n_toks > 0) t->toks[t->n_toks - 1].text_end = t->len;
        t->stable = t->len;
        return true;
    }
    t->stable = t->len - stop_holdback(t);
    return false;
}

static bool tok_push(srv_task *t, const srv_tok *e) {
    if (t->n_toks == t->cap_toks) {
        int nc = t->cap_toks ? t->cap_toks * 2 : 64;
        srv_tok *p = realloc(t->toks, (size_t)nc * sizeof *p);
        if (!p) return false;
        t->toks = p; t->cap_toks = nc;
    }
    t->toks[t->n_toks++] = *e;
    return true;
}

/* ---- slots ---- */
static void slot_end(srv_engine *e, slot *s, const char *reason, int status, const char *msg) {
    if (!status && reason) {
        char buf[16];
        int k = hearth_detok_flush(&s->dt, buf, sizeof buf);
        pthread_mutex_lock(&s->task->mu);
        bool oom = false;
        if (k > 0 && strcmp(reason, "stop_string")) text_append(s->task, buf, (size_t)k, &oom);
        pthread_mutex_unlock(&s->task->mu);
    }
    if (reason && !strcmp(reason, "stop_string")) reason = "stop";
    srv_task *t = s->task;
    hearth_sampler_free(s->smp);
    s->smp = NULL;
    s->task = NULL;
    s->generating = false;
    s->row = -1; s->n_feed = 0;
    e->n_busy--;                     /* before the client can see the answer (and ask /health or /metrics) */
    atomic_fetch_add(&e->prompt_toks, t->n_prompt);
    atomic_fetch_add(&e->cached_toks, t->n_cached);
    atomic_fetch_add(&e->gen_toks, t->n_gen);
    if (!status && t->n_gen > 0) observe_latency(e, t, srv_now_ms());
    task_finish(t, reason, status, msg);
    task_release(t);
}

static int common_prefix(const hearth_token *a, int na, const hearth_token *b, int nb) {
    int k = 0;
    while (k < na && k < nb && a[k] == b[k]) k++;
    return k;
}

/* The idle slot whose cache shares the longest prefix with the prompt (ties: the emptiest), or NULL. */
static slot *pick_slot(srv_engine *e, const srv_task *t) {
    slot *best = NULL;
    int best_k = -1;
    for (int i = 0; i < e->n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->task) continue;
        int k = common_prefix(s->cache, s->n_cache, t->prompt, t->n_prompt);
        if (k > best_k || (k == best_k && s->n_cache < best->n_cache)) { best = s; best_k = k; }
    }
    return best;
}

/* The request's speculation: the server's, with what its "speculative" field sets laid over it. */
static void slot_spec(srv_engine *e, slot *s, const srv_task *t) {
    s->sp = e->spec;
    s->ss = (spec_seq){ 0 };
    if (t->spec_mode == 0) s->sp.n_max = 0;
    else if (t->spec_mode > 0) {
        s->sp.draft = t->spec_mode == 1, s->sp.ngram = t->spec_mode == 2;
        if (!s->sp.n_max) s->sp.n_max = spec_default_params().n_max;
    }
    if (t->spec_n_max >= 0) s->sp.n_max = t->spec_n_max;
    if (t->spec_n_min >= 0) s->sp.n_min = t->spec_n_min;
    if (t->spec_p_min >= 0) s->sp.p_min = t->spec_p_min;
    if (!s->sp.n_max) return;
    if (s->sp.draft && !s->sp.ngram && !e->drafter) slot_end(e, s, NULL, 400, "speculative mode \"draft\" needs a server started with --model-draft");
}

static void slot_start(srv_engine *e, slot *s, srv_task *t) {
    uint64_t lora_id = 0;
    if (e->n_lora && !e->lora_merged) {   /* the request's adapters on its sequence; a cache computed under others is not reused */
        hearth_err err;
        hearth_seq_set_lora(e->ctx, s->seq, t->lora, &err);   /* (scales checked when parsed) */
        lora_id = hearth_seq_lora_id(e->ctx, s->seq);
    }
    int k = t->no_cache || lora_id != s->lora_id ? 0 : common_prefix(s->cache, s->n_cache, t->prompt, t->n_prompt);
    s->lora_id = lora_id;
    if (k >= t->n_prompt) k = t->n_prompt - 1;     /* the last prompt token is decoded for its logits */
    hearth_seq_truncate(e->ctx, s->seq, k);
    s->n_cache = HT_MIN(k, hearth_seq_len(e->ctx, s->seq));
    if (!t->no_cache && e->pc) {   /* a longer prefix from the shared cache (any slot's, or from disk) */
        s->n_cache = pcache_restore(e->pc, e->ctx, s->seq, t->prompt, t->n_prompt, s->n_cache, lora_id);
        memcpy(s->cache, t->prompt, (size_t)s->n_cache * sizeof *s->cache);
        pcache_publish(e);
    }
    s->task = t;
    s->generating = false;
    s->row = -1; s->n_feed = 0;
    memset(&s->dt, 0, sizeof s->dt);
    e->n_busy++;
    pthread_mutex_lock(&t->mu);
    t->n_cached = t->n_done = s->n_cache;
    t->t_start = srv_now_ms();
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    s->smp = hearth_sampler_new(&t->sp, e->n_vocab);
    if (!s->smp) { slot_end(e, s, NULL, 500, "out of memory"); return; }
    for (int i = 0; i < t->n_bias; i++) hearth_sampler_set_bias(s->smp, t->bias_id[i], t->bias[i]);   /* checked at parse */
    hearth_sampler_set_grammar(s->smp, t->grammar);
    slot_spec(e, s, t);
}

/* ---- embeddings ---- */
static int embed_ctx(srv_engine *e, hearth_err *err) {
    if (e->ectx) return 0;
    hearth_ctx_params cp = hearth_ctx_default_params();   /* a decoder: causal, so any n_batch will do */
    cp.n_ctx = e->n_ctx;
    cp.n_threads = e->n_threads;
    cp.cache_type = e->cache_type[0], cp.cache_type_k = e->cache_type[0], cp.cache_type_v = e->cache_type[1];
    float sc[HEARTH_MAX_LORA];
    engine_lora_scales(e, sc);   /* under the lock: POST /lora-adapters may be setting them */
    return hearth_ctx_new(e->m, &cp, &e->ectx, err) || hearth_ctx_set_lora(e->ectx, e->lora, sc, e->lora_merged ? 0 : e->n_lora, err);
}

static void l2_normalize(float *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)v[i] * v[i];
    if (s <= 0) return;
    float inv = (float)(1.0 / sqrt(s));
    for (int i = 0; i < n; i++) v[i] *= inv;
}

/* One input's pooled, normalized vector into out (dim floats). */
static int embed_one(srv_engine *e, const hearth_token *toks, int n, float *out, int dim, hearth_err *err) {
    int rows = hearth_embed_rows(e->ectx, n);
    float *tmp = malloc((size_t)rows * (size_t)dim * sizeof *tmp);
    if (!tmp) return herr(err, "out of memory");
    int r = hearth_embed(e->ectx, toks, n, tmp, err);
    if (r > 0) {
        for (int k = 0; k < dim; k++) {
            double s = 0;
            for (int i = 0; i < r; i++) s += tmp[(size_t)i * dim + k];
            out[k] = (float)(s / r);
        }
        l2_normalize(out, dim);
    }
    free(tmp);
    return r > 0 ? 0 : -1;
}

static void run_embed(srv_engine *e, srv_task *t) {
    hearth_err err;
    hearth_model_info info;
    hearth_model_get_info(e->m, &info);
    if (embed_ctx(e, &err)) { task_finish(t, NULL, 500, err.msg); return; }
    float *emb = malloc((size_t)HT_MAX(t->n_inputs, 1) * (size_t)info.n_embd * sizeof *emb);
    if (!emb) { task_finish(t, NULL, 500, "out of memory"); return; }
    for (int i = 0; i < t->n_inputs; i++) {
        if (task_cancelled(t)) { free(emb); task_finish(t, NULL, 499, "cancelled"); return; }
        if (embed_one(e, t->in[i], t->n_in[i], emb + (size_t)i * info.n_embd, info.n_embd, &err)) {
            free(emb);
            task_finish(t, NULL, 500, err.msg);
            return;
        }
    }
    pthread_mutex_lock(&t->mu);
    t->emb = emb;
    t->dim = info.n_embd;
    pthread_mutex_unlock(&t->mu);
    task_finish(t, "stop", 0, NULL);
}

/* ---- one decode step ---- */
static int batch_push(srv_engine *e, int n, hearth_token tok, int pos, int seq, bool want) {
    e->b_tok[n] = tok; e->b_pos[n] = pos; e->b_seq[n] = seq; e->b_want[n] = want;
    return n + 1;
}

static int build_batch(srv_engine *e) {
    int n = 0;
    for (int i = 0; i < e->n_slots; i++) {
        slot *s = &e->slots[i];
        s->row = -1; s->n_feed = 0;
        if (!s->task || !s->generating) continue;
        s->row = n;
        s->n_feed = 1;
        if (s->sp.n_max > 0) {   /* `next` and the proposals after it, each with its logits */
            hearth_err err;
            int k_max = HT_MIN(e->n_ctx - s->n_cache - 1, (e->n_batch - e->n_slots) / e->n_slots);
            s->cache[s->n_cache] = s->next;
            if (spec_begin(&s->ss, e->ctx, s->seq, e->drafter, &s->sp, s->cache, s->n_cache + 1, k_max, s->task->grammar, &err))
                s->ss.n = 1, s->ss.tok[0] = s->next, s->ss.row = 0;   /* the drafter failed: no proposals this step */
            atomic_fetch_add(&e->drafted, s->ss.n - 1);
            s->n_feed = s->ss.n;
            for (int j = 0; j < s->ss.n; j++) n = batch_push(e, n, s->ss.tok[j], s->n_cache + j, s->seq, true);
            continue;
        }
        n = batch_push(e, n, s->next, s->n_cache, s->seq, true);
    }
    int budget = HT_MAX(e->n_batch - n, 1);
    for (int i = 0; i < e->n_slots && budget > 0; i++) {
        slot *s = &e->slots[i];
        if (!s->task || s->generating) continue;
        int take = HT_MIN(budget, s->task->n_prompt - s->n_cache);
        for (int j = 0; j < take; j++) {
            bool last = s->n_cache + j + 1 == s->task->n_prompt;
            if (last) s->row = n;
            n = batch_push(e, n, s->task->prompt[s->n_cache + j], s->n_cache + j, s->seq, last);
        }
        s->n_feed = take;
        budget -= take;
    }
    return n;
}

/* Picks slot s's next token from its logits (and its log-probabilities); touches only the slot's own state,
 * so slots are picked in parallel. */
static void slot_pick(srv_engine *e, slot *s) {
    const float *logits = hearth_logits(e->ctx, s->row);
    if (s->task->grammar) {   /* what is left of max_tokens and of the context: the reply must end within it */
        int left = e->n_ctx - s->n_cache;
        if (s->task->max_tokens >= 0) left = HT_MIN(left, s->task->max_tokens - s->task->n_gen);
        hearth_grammar_set_budget(s->task->grammar, HT_MAX(left, 0));
    }
    s->pick = (srv_tok){ .id = hearth_sample(s->smp, logits, s->cache, s->n_cache) };
    if (s->pick.id >= 0 && s->task->n_probs >= 0)
        s->pick.n_top = HT_MAX(0, hearth_logprobs(logits, e->n_vocab, s->pick.id, s->task->n_probs, &s->pick.logprob,
                                                  s->pick.top_id, s->pick.top_lp));
}

typedef struct { srv_engine *e; slot **s; int n; } pick_job;

static void pick_run(void *arg, int ith, int nth) {
    pick_job *j = arg;
    for (int i = ith; i < j->n; i += nth) slot_pick(j->e, j->s[i]);
}

/* Hands the picked token's text to the reader and decides whether the slot goes on. */
static void slot_take(srv_engine *e, slot *s) {
    srv_task *t = s->task;
    hearth_token tok = s->pick.id;
    if (!s->generating && !t->no_cache && e->pc) {   /* the prompt is in: share its blocks, whatever comes next */
        pcache_store(e->pc, e->ctx, s->seq, t->prompt, t->n_prompt, s->lora_id);
        pcache_publish(e);
    }
    if (tok < 0 && hearth_grammar_failed(t->grammar)) { slot_end(e, s, NULL, 500, "out of memory"); return; }
    if (tok < 0) { slot_end(e, s, "stop", 0, NULL); return; }
    hearth_sampler_accept(s->smp, tok);
    if (hearth_token_is_eog(e->m, tok) && (!t->ignore_eos || t->grammar)) { slot_end(e, s, "stop", 0, NULL); return; }
    char buf[512];
    int k = hearth_detok_push(e->m, &s->dt, tok, buf, sizeof buf);
    bool oom = false, stopped;
    pthread_mutex_lock(&t->mu);
    if (!t->n_gen) t->t_first = srv_now_ms();
    t->n_gen++;
    stopped = text_append(t, buf, (size_t)k, &oom);
    if (t->n_probs >= 0 && !stopped) { s->pick.text_end = t->len; oom |= !tok_push(t, &s->pick); }
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    if (oom) slot_end(e, s, NULL, 500, "out of memory");
    else if (stopped) slot_end(e, s, "stop_string", 0, NULL);
    else if (t->grammar && hearth_grammar_done(t->grammar)) slot_end(e, s, "stop", 0, NULL);   /* nothing may follow */
    else if (t->grammar && hearth_grammar_can_end(t->grammar) &&
             ((t->max_tokens >= 0 && t->n_gen >= t->max_tokens) || s->n_cache >= e->n_ctx))
        slot_end(e, s, "stop", 0, NULL);   /* the budget is spent on a complete document */
    else if (t->max_tokens >= 0 && t->n_gen >= t->max_tokens) slot_end(e, s, "length", 0, NULL);
    else if (s->n_cache >= e->n_ctx) slot_end(e, s, "length", 0, NULL);
    else { s->next = tok; s->generating = true; }
}

static void step_failed(srv_engine *e, const char *msg) {
    for (int i = 0; i < e->n_slots; i++) {
        slot *s = &e->slots[i];
        if (!s->task || !s->n_feed) continue;
        hearth_seq_truncate(e->ctx, s->seq, 0);
        s->n_cache = 0;
        slot_end(e, s, NULL, 500, msg);
    }
}

static void step(srv_engine *e) {
    int n = build_batch(e);
    if (!n) return;
    hearth_batch b = { .n = n, .tokens = e->b_tok, .pos = e->b_pos, .seq = e->b_seq, .want_logits = e->b_want };
    hearth_err err;
    double t0 = srv_now_ms();
    if (hearth_decode(e->ctx, &b, &err)) { step_failed(e, err.msg); return; }
    double t1 = srv_now_ms();
    pick_job j = { .e = e, .s = e->picked };
    for (int i = 0; i < e->n_slots; i++) {
        slot *s = &e->slots[i];
        if (!s->task || !s->n_feed) continue;
        const hearth_token *src = s->generating ? (s->sp.n_max > 0 ? s->ss.tok : &s->next) : s->task->prompt + s->n_cache;
        memcpy(s->cache + s->n_cache, src, (size_t)s->n_feed * sizeof *src);
        s->n_cache += s->generating && s->sp.n_max > 0 ? 1 : s->n_feed;   /* proposals count once accepted */
        if (s->row >= 0) j.s[j.n++] = s;
        if (!s->generating) {   /* prompt progress, told before the first token's text */
            pthread_mutex_lock(&s->task->mu);
            s->task->n_done = s->n_cache;
            pthread_cond_broadcast(&s->task->cv);
            pthread_mutex_unlock(&s->task->mu);
        }
    }
    atomic_fetch_add(&e->n_steps, 1);
    atomic_fetch_add(&e->n_generated, j.n);
    if (j.n > 1) pool_run(e->ctx->pool, pick_run, &j);   /* the context's workers are idle between decodes */
    else if (j.n) slot_pick(e, j.s[0]);
    for (int i = 0; i < j.n; i++) {
        slot *s = j.s[i];
        bool spec = s->generating && s->sp.n_max > 0 && s->n_feed > 0;
        slot_take(e, s);
        if (!spec) continue;
        /* while the token taken is the next row's proposal, that row's logits give the one after it */
        while (s->task && s->generating && spec_take(&s->ss, s->next)) {
            atomic_fetch_add(&e->accepted, 1);
            atomic_fetch_add(&e->n_generated, 1);
            s->n_cache++;
            s->row++;
            slot_pick(e, s);
            slot_take(e, s);
        }
        hearth_seq_truncate(e->ctx, s->seq, s->n_cache);   /* rejected proposals leave the cache */
    }
    atomic_fetch_add(&e->decode_us, (long long)((t1 - t0) * 1e3));
    atomic_fetch_add(&e->step_us, (long long)((srv_now_ms() - t0) * 1e3));
}

/* ---- the thread ---- */
static void drop_cancelled(srv_engine *e) {
    for (int i = 0; i < e->n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->task && task_cancelled(s->task)) slot_end(e, s, NULL, 499, "client disconnected");
    }
}

/* Moves queued tasks into free slots (and embedding tasks to *emb); called with e->mu held. */
static int take_queued(srv_engine *e, srv_task **emb, int cap_emb) {
    int n_emb = 0, w = 0;
    for (int i = 0; i < e->nq; i++) {
        srv_task *t = e->q[i];
        if (task_cancelled(t)) { task_finish(t, NULL, 499, "client disconnected"); task_release(t); continue; }
        if (t->kind == TASK_EMBED && n_emb < cap_emb) { emb[n_emb++] = t; continue; }
        slot *s = t->kind == TASK_GENERATE && e->ctx ? pick_slot(e, t) : NULL;
        if (s) { slot_start(e, s, t); continue; }
        e->q[w++] = t;
    }
    e->nq = w;
    return n_emb;
}

static void *engine_main(void *arg) {
    srv_engine *e = arg;
    srv_task *emb[16];
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->stop && !e->nq && !e->n_busy) pthread_cond_wait(&e->cv, &e->mu);
        if (e->stop) break;
        int n_emb = take_queued(e, emb, 16);
        pthread_mutex_unlock(&e->mu);
        for (int i = 0; i < n_emb; i++) { run_embed(e, emb[i]); task_release(emb[i]); }
        drop_cancelled(e);
        if (e->n_busy) step(e);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- public ---- */
static int engine_alloc(srv_engine *e, hearth_err *err) {
    e->slots = calloc((size_t)HT_MAX(e->n_slots, 1), sizeof *e->slots);
    e->picked = calloc((size_t)HT_MAX(e->n_slots, 1), sizeof *e->picked);
    int cap = e->n_batch + e->n_slots;
    e->b_tok = malloc((size_t)cap * sizeof *e->b_tok);
    e->b_pos = malloc((size_t)cap * sizeof *e->b_pos);
    e->b_seq = malloc((size_t)cap * sizeof *e->b_seq);
    e->b_want = malloc((size_t)cap);
    if (!e->slots || !e->picked || !e->b_tok || !e->b_pos || !e->b_seq || !e->b_want) return herr(err, "out of memory");
    for (int i = 0; i < e->n_slots; i++) {
        e->slots[i].seq = i;
        e->slots[i].cache = malloc((size_t)e->n_ctx * sizeof(hearth_token));
        if (!e->slots[i].cache) return herr(err, "out of memory");
    }
    return 0;
}

static int engine_contexts(srv_engine *e, const server_params *p, hearth_err *err) {
    hearth_ctx_params cp = hearth_ctx_default_params();
    cp.n_ctx = p->n_ctx;
    cp.n_threads = p->n_threads;
    cp.cache_type = p->cache_type[0], cp.cache_type_k = p->cache_type[0], cp.cache_type_v = p->cache_type[1];
    if (e->encoder) {
        cp.n_batch = 1 << 22;            /* an encoder sees a whole input at once */
        if (hearth_ctx_new(e->m, &cp, &e->ectx, err) || hearth_ctx_set_lora(e->ectx, p->lora, p->lora_scale, p->lora_merged ? 0 : p->n_lora, err))
            return -1;
        e->n_ctx = e->e_n_ctx = hearth_ctx_n_ctx(e->ectx);
        e->n_slots = 0;
        return 0;
    }
    cp.n_seq = e->n_slots;
    if (hearth_ctx_new(e->m, &cp, &e->ctx, err) || hearth_ctx_set_lora(e->ctx, p->lora, p->lora_scale, p->lora_merged ? 0 : p->n_lora, err))
        return -1;
    e->n_ctx = e->e_n_ctx = hearth_ctx_n_ctx(e->ctx);
    e->n_batch = 512;
    return 0;
}

/* The server's speculation (--spec, --model-draft and the --draft-* flags) and its drafter. */
static int engine_spec(srv_engine *e, const server_params *p, hearth_err *err) {
    e->spec = spec_default_params();
    e->spec.n_max = 0;
    if (!e->ctx || (!p->spec_mode && !p->draft_model)) return 0;
    if (p->draft_model) {
        if (!(e->drafter = spec_drafter_new(e->m, p->draft_model, e->n_ctx, e->n_slots, p->n_threads, err))) return -1;
        fprintf(stderr, "draft model: %.1f MiB (weights and KV cache for %d slots)\n", spec_drafter_bytes(e->drafter) / 1048576.0,
                e->n_slots);
    }
    e->spec.n_max = p->spec_mode ? p->draft_max : 0;
    e->spec.n_min = p->draft_min, e->spec.p_min = p->draft_p_min;
    e->spec.draft = e->drafter != NULL, e->spec.ngram = p->spec_mode == 2;
    return 0;
}

int engine_new(hearth_model *m, const server_params *p, srv_engine **out, hearth_err *err) {
    *out = NULL;
    api_json_init();   /* before any request thread runs */
    srv_engine *e = calloc(1, sizeof *e);
    if (!e) return herr(err, "out of memory");
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    e->m = m;
    e->encoder = info.is_encoder;
    e->n_vocab = info.n_vocab;
    e->n_threads = p->n_threads;
    e->cache_type[0] = p->cache_type[0], e->cache_type[1] = p->cache_type[1];
    e->lora = p->lora, e->lora_path = p->lora_path, e->n_lora = p->n_lora, e->lora_merged = p->lora_merged;
    if (p->n_lora) memcpy(e->lora_scale, p->lora_scale, (size_t)p->n_lora * sizeof(float));
    e->n_slots = p->parallel > 0 ? p->parallel : 1;
    e->n_batch = 512;
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->lat_mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (engine_contexts(e, p, err) || engine_alloc(e, err) || engine_spec(e, p, err)) { engine_free(e); return -1; }
    if (e->ctx && p->cache_ram) {
        err->msg[0] = 0;
        e->pc = pcache_new(e->ctx, p->cache_ram, p->prompt_cache, err);
        if (!e->pc && err->msg[0]) { engine_free(e); return -1; }
        if (!e->pc)
            fprintf(stderr, "note: no shared prompt cache: %s\n",
                    hearth_mpi_size() > 1 ? "the KV cache is spread over the MPI ranks"
                                          : "this model's sliding-window KV cannot be moved between slots");
    }
    if (pthread_create(&e->th, NULL, engine_main, e)) { engine_free(e); return herr(err, "cannot start the engine thread"); }
    e->started = true;
    *out = e;
    return 0;
}

void engine_free(srv_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->started) pthread_join(e->th, NULL);
    for (int i = 0; i < e->nq; i++) { task_finish(e->q[i], NULL, 503, "server shutting down"); task_release(e->q[i]); }
    for (int i = 0; e->slots && i < e->n_slots; i++) {
        if (e->slots[i].task) slot_end(e, &e->slots[i], NULL, 503, "server shutting down");
        free(e->slots[i].cache);
    }
    free(e->q); free(e->slots); free(e->picked);
    free(e->b_tok); free(e->b_pos); free(e->b_seq); free(e->b_want);
    pcache_free(e->pc);
    spec_drafter_free(e->drafter);
    hearth_ctx_free(e->ctx);
    hearth_ctx_free(e->ectx);
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->lat_mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

int engine_submit(srv_engine *e, srv_task *t) {
    pthread_mutex_lock(&e->mu);
    if (e->stop || e->nq >= QUEUE_MAX) { pthread_mutex_unlock(&e->mu); return -1; }
    if (e->nq == e->capq) {
        int nc = e->capq ? e->capq * 2 : 64;
        srv_task **q = realloc(e->q, (size_t)nc * sizeof *q);
        if (!q) { pthread_mutex_unlock(&e->mu); return -1; }
        e->q = q; e->capq = nc;
    }
    pthread_mutex_lock(&t->mu);
    t->refs++;
    pthread_mutex_unlock(&t->mu);
    e->q[e->nq++] = t;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

int engine_n_ctx(const srv_engine *e) { return e->n_ctx; }
int engine_n_lora(const srv_engine *e) { return e->n_lora; }
bool engine_lora_merged(const srv_engine *e) { return e->lora_merged; }
const char *engine_lora_path(const srv_engine *e, int i) { return i >= 0 && i < e->n_lora ? e->lora_path[i] : ""; }

void engine_lora_scales(srv_engine *e, float *out) {
    pthread_mutex_lock(&e->mu);
    memcpy(out, e->lora_scale, (size_t)e->n_lora * sizeof(float));
    pthread_mutex_unlock(&e->mu);
}

void engine_set_lora_scales(srv_engine *e, const float *in) {
    pthread_mutex_lock(&e->mu);
    memcpy(e->lora_scale, in, (size_t)e->n_lora * sizeof(float));
    pthread_mutex_unlock(&e->mu);
}
int engine_embed_n_ctx(const srv_engine *e) { return e->e_n_ctx; }

void engine_counters(srv_engine *e, srv_counters *c) {
    c->steps = atomic_load(&e->n_steps);
    c->sampled = atomic_load(&e->n_generated);
    c->drafted = atomic_load(&e->drafted);
    c->accepted = atomic_load(&e->accepted);
    c->decode_ms = (double)atomic_load(&e->decode_us) / 1e3;
    c->pc_hits = atomic_load(&e->pc_hits), c->pc_misses = atomic_load(&e->pc_misses);
    c->pc_tokens = atomic_load(&e->pc_tokens), c->pc_entries = atomic_load(&e->pc_entries);
    c->step_ms = (double)atomic_load(&e->step_us) / 1e3;
    c->prompt_tokens = atomic_load(&e->prompt_toks);
    c->cached_tokens = atomic_load(&e->cached_toks);
    c->generated_tokens = atomic_load(&e->gen_toks);
}

void engine_slots(srv_engine *e, int *idle, int *busy, int *queued) {
    pthread_mutex_lock(&e->mu);
    *queued = e->nq;
    pthread_mutex_unlock(&e->mu);
    int b = atomic_load(&e->n_busy);
    *busy = b;
    *idle = e->n_slots - b;
}
