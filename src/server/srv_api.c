/* srv_api.c — the OpenAI API surface of the server: request bodies (chat completions, completions,
 * embeddings) checked field by field and turned into engine tasks, and the JSON / SSE bodies sent back.
 * Unknown fields are ignored; a known field of the wrong type or out of range is a 400 naming it. */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "generate/grammar.h"
#include "server/srv_internal.h"
#include "generate/speculative.h"

/* ---- building JSON when memory may run out ----
 * cJSON's adders leave a NULL parent or a failed key copy unnoticed, so the tree would print with parts
 * missing: its allocations go through json_alloc, which notes a failure for this thread, and api_print then
 * answers NULL (the caller's 500) instead of an incomplete document. */
static _Thread_local bool json_oom;

static void *json_alloc(size_t n) {
    void *p = malloc(n);
    if (!p) json_oom = true;
    return p;
}

void api_json_init(void) { cJSON_InitHooks(&(cJSON_Hooks){ json_alloc, free }); }

bool api_json_oom(void) { return json_oom; }
void api_json_lost(void) { json_oom = true; }

bool json_put(cJSON *o, const char *key, cJSON *item) {
    if (o && item && cJSON_AddItemToObject(o, key, item)) return true;
    cJSON_Delete(item);
    json_oom = true;
    return false;
}

bool json_push(cJSON *a, cJSON *item) {
    if (a && item && cJSON_AddItemToArray(a, item)) return true;
    cJSON_Delete(item);
    json_oom = true;
    return false;
}

/* ---- small helpers ---- */
static const cJSON *field(const cJSON *o, const char *k) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNull(j) ? NULL : j;
}

static int get_num(const cJSON *o, const char *k, double lo, double hi, double *out, hearth_err *err) {
    const cJSON *j = field(o, k);
    if (!j) return 0;
    if (!cJSON_IsNumber(j)) return herr(err, "'%s' must be a number", k);
    if (!(j->valuedouble >= lo && j->valuedouble <= hi)) return herr(err, "'%s' must be between %g and %g", k, lo, hi);
    *out = j->valuedouble;
    return 0;
}

static int get_int(const cJSON *o, const char *k, double lo, double hi, long long *out, hearth_err *err) {
    const cJSON *j = field(o, k);
    if (!j) return 0;
    if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble)) return herr(err, "'%s' must be an integer", k);
    if (!(j->valuedouble >= lo && j->valuedouble <= hi)) return herr(err, "'%s' must be between %.0f and %.0f", k, lo, hi);
    *out = (long long)j->valuedouble;
    return 0;
}

static int get_bool(const cJSON *o, const char *k, bool *out, hearth_err *err) {
    const cJSON *j = field(o, k);
    if (!j) return 0;
    if (!cJSON_IsBool(j)) return herr(err, "'%s' must be a boolean", k);
    *out = cJSON_IsTrue(j);
    return 0;
}

static bool is_token_array(const cJSON *a, int n_vocab) {
    if (!cJSON_IsArray(a) || !cJSON_GetArraySize(a)) return false;
    const cJSON *x;
    cJSON_ArrayForEach(x, a)
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 || x->valuedouble >= n_vocab)
            return false;
    return true;
}

static int tokens_from_array(const cJSON *a, hearth_token **out, int *n) {
    *n = cJSON_GetArraySize(a);
    *out = malloc((size_t)HT_MAX(*n, 1) * sizeof **out);
    if (!*out) return -1;
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) (*out)[i++] = (hearth_token)x->valuedouble;
    return 0;
}

static int tokenize_text(const srv_api *a, const char *s, bool add_bos, bool parse_special, hearth_token **out, int *n,
                         hearth_err *err) {
    size_t len = strlen(s);
    int cap = (int)HT_MIN(len + 8, (size_t)1 << 26);
    for (;;) {
        *out = malloc((size_t)cap * sizeof **out);
        if (!*out) return herr(err, "out of memory");
        *n = hearth_tokenize(a->m, s, len, add_bos, parse_special, *out, cap, err);
        if (*n < 0) { free(*out); *out = NULL; return -1; }
        if (*n <= cap) return 0;
        free(*out);
        cap = *n;
    }
}

static void make_id(api_req *r, const char *prefix) {
    static atomic_ullong counter;
    unsigned long long c = atomic_fetch_add(&counter, 1) + 1;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r->created = (long)ts.tv_sec;
    snprintf(r->id, sizeof r->id, "%s%08llx%06llx", prefix, (unsigned long long)ts.tv_nsec ^ ((unsigned long long)ts.tv_sec << 20),
             c & 0xffffff);
}

void api_random_id(char id[40], const char *prefix) {
    static const char A[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static atomic_ullong counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long x = ((unsigned long long)ts.tv_sec << 30 ^ (unsigned long long)ts.tv_nsec) * 0x9E3779B97F4A7C15ull ^
                           (atomic_fetch_add(&counter, 1) + 1) * 0xBF58476D1CE4E5B9ull;
    int n = snprintf(id, 40, "%.15s", prefix);
    for (int i = 0; i < 24; i++, n++) { x ^= x >> 31; x *= 0x94D049BB133111EBull; x ^= x >> 29; id[n] = A[x % 62]; }
    id[n] = 0;
}

/* ---- sampling and stopping parameters shared by both generation endpoints ---- */

/* "speculative": {"mode": "draft"|"ngram"|"off", "n_max", "n_min", "p_min"}; what is left out is the server's. */
static int parse_speculative(const cJSON *s, srv_task *t, hearth_err *err) {
    if (!s || cJSON_IsNull(s)) return 0;
    if (!cJSON_IsObject(s)) return herr(err, "'speculative' must be an object");
    const cJSON *mode = field(s, "mode");
    if (mode && !cJSON_IsNull(mode)) {
        const char *m = cJSON_IsString(mode) ? mode->valuestring : "";
        t->spec_mode = !strcmp(m, "off") ? 0 : !strcmp(m, "draft") ? 1 : !strcmp(m, "ngram") ? 2 : -2;
        if (t->spec_mode < -1) return herr(err, "'speculative.mode' must be \"draft\", \"ngram\" or \"off\"");
    }
    long long n_max = t->spec_n_max, n_min = t->spec_n_min;
    double p_min = t->spec_p_min;
    if (get_int(s, "n_max", 0, SPEC_MAX_DRAFT, &n_max, err) || get_int(s, "n_min", 0, SPEC_MAX_DRAFT, &n_min, err) ||
        get_num(s, "p_min", 0, 1, &p_min, err))
        return -1;
    t->spec_n_max = (int)n_max, t->spec_n_min = (int)n_min, t->spec_p_min = (float)p_min;
    return 0;
}
static int parse_sampling(const cJSON *o, srv_task *t, hearth_err *err) {
    hearth_sampler_params *sp = &t->sp;
    double temp = sp->temperature, top_p = sp->top_p, min_p = sp->min_p, typ = sp->typical_p;
    double fp = 0, pp = 0, rp = sp->repeat_penalty;
    long long top_k = sp->top_k, rln = sp->repeat_last_n, seed = -1;
    if (get_num(o, "temperature", 0, 2, &temp, err) || get_num(o, "top_p", 0, 1, &top_p, err) ||
        get_num(o, "min_p", 0, 1, &min_p, err) || get_num(o, "typical_p", 0, 1, &typ, err) ||
        get_num(o, "frequency_penalty", -2, 2, &fp, err) || get_num(o, "presence_penalty", -2, 2, &pp, err) ||
        get_num(o, "repeat_penalty", 0, 10, &rp, err) || get_int(o, "top_k", 0, 1e9, &top_k, err) ||
        get_int(o, "repeat_last_n", -1, 1e9, &rln, err) || get_int(o, "seed", -9.2e18, 9.2e18, &seed, err) ||
        get_bool(o, "ignore_eos", &t->ignore_eos, err) || parse_speculative(field(o, "speculative"), t, err))
        return -1;
    sp->temperature = (float)temp; sp->top_p = (float)top_p; sp->min_p = (float)min_p; sp->typical_p = (float)typ;
    sp->frequency_penalty = (float)fp; sp->presence_penalty = (float)pp; sp->repeat_penalty = (float)rp;
    sp->top_k = (int)top_k; sp->repeat_last_n = (int)rln;
    if (field(o, "seed")) sp->seed = (uint64_t)seed;
    else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        sp->seed = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)t;
    }
    return 0;
}

static int add_stop(srv_task *t, const cJSON *s, hearth_err *err) {
    if (!cJSON_IsString(s)) return herr(err, "'stop' must be a string or an array of strings");
    if (!*s->valuestring) return 0;
    if (t->n_stop == SRV_MAX_STOP) return herr(err, "'stop' may hold at most %d strings", SRV_MAX_STOP);
    if (strlen(s->valuestring) > 512) return herr(err, "'stop' strings must be at most 512 bytes");
    if (!(t->stop[t->n_stop] = strdup(s->valuestring))) return herr(err, "out of memory");
    t->n_stop++;
    return 0;
}

static int parse_limits(const cJSON *o, srv_task *t, api_req *r, hearth_err *err) {
    long long max_tokens = -1, n = 1;
    if (get_int(o, "max_tokens", 1, 1e9, &max_tokens, err) || get_int(o, "max_completion_tokens", 1, 1e9, &max_tokens, err) ||
        get_int(o, "n", -1e9, 1e9, &n, err) || get_bool(o, "stream", &r->stream, err) ||
        get_bool(o, "return_progress", &r->progress, err))
        return -1;
    if (n != 1) return herr(err, "'n' must be 1 (only one choice per request is supported)");
    t->max_tokens = (int)max_tokens;
    const cJSON *so = field(o, "stream_options");
    if (so && !cJSON_IsObject(so)) return herr(err, "'stream_options' must be an object");
    if (so && get_bool(so, "include_usage", &r->include_usage, err)) return -1;
    const cJSON *stop = field(o, "stop");
    if (cJSON_IsArray(stop)) {
        const cJSON *s;
        cJSON_ArrayForEach(s, stop) if (add_stop(t, s, err)) return -1;
    } else if (stop && add_stop(t, stop, err)) return -1;
    return 0;
}

/* chat: logprobs (bool) + top_logprobs; completions: logprobs (integer count). */
static int parse_logprobs(const cJSON *o, api_kind kind, srv_task *t, hearth_err *err) {
    const cJSON *lp = field(o, "logprobs");
    long long top = 0;
    if (kind == API_CHAT) {
        bool on = false;
        if (get_bool(o, "logprobs", &on, err) || get_int(o, "top_logprobs", 0, SRV_MAX_TOP, &top, err)) return -1;
        if (field(o, "top_logprobs") && !on) return herr(err, "'top_logprobs' requires 'logprobs': true");
        t->n_probs = on ? (int)top : -1;
        return 0;
    }
    if (cJSON_IsBool(lp)) { t->n_probs = cJSON_IsTrue(lp) ? 0 : -1; return 0; }
    if (lp && get_int(o, "logprobs", 0, SRV_MAX_TOP, &top, err)) return -1;
    if (lp) t->n_probs = (int)top;
    return 0;
}

/* ---- prompts ---- */
static int chat_extra(const cJSON *o, bool with_tools, cJSON **extra, hearth_err *err) {
    *extra = NULL;
    const cJSON *tools = with_tools ? field(o, "tools") : NULL, *kw = field(o, "chat_template_kwargs"),
                *effort = field(o, "reasoning_effort");   /* OpenAI's; gpt-oss's template reads it */
    if (kw && !cJSON_IsObject(kw)) return herr(err, "'chat_template_kwargs' must be an object");
    if (effort && cJSON_IsNull(effort)) effort = NULL;
    if (effort && !cJSON_IsString(effort)) return herr(err, "'reasoning_effort' must be a string (low, medium or high)");
    if (!tools && !kw && !effort) return 0;
    *extra = kw ? cJSON_Duplicate(kw, true) : cJSON_CreateObject();
    if (*extra && tools && !cJSON_GetObjectItemCaseSensitive(*extra, "tools"))
        json_put(*extra, "tools", cJSON_Duplicate(tools, true));
    if (*extra && effort && !cJSON_GetObjectItemCaseSensitive(*extra, "reasoning_effort"))
        json_put(*extra, "reasoning_effort", cJSON_CreateString(effort->valuestring));
    return *extra ? 0 : herr(err, "out of memory");
}

/* Assistant tool_calls carry their arguments as JSON text (OpenAI); templates index them as objects. */
static void arguments_as_objects(cJSON *msgs) {
    cJSON *m, *c;
    cJSON_ArrayForEach(m, msgs) cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(m, "tool_calls")) {
        cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function"), *a = f ? cJSON_GetObjectItemCaseSensitive(f, "arguments") : NULL;
        cJSON *parsed = cJSON_IsString(a) ? cJSON_Parse(a->valuestring) : NULL;
        if (parsed && !cJSON_ReplaceItemInObjectCaseSensitive(f, "arguments", parsed)) {
            cJSON_Delete(parsed);   /* no memory for the key: chat_prompt fails the request */
            json_oom = true;
        }
    }
}

/* Earlier turns' reasoning, as OpenAI-style clients send it back (reasoning_content), also under the name other
 * templates read (gpt-oss's: thinking). */
static void reasoning_as_thinking(cJSON *msgs) {
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *rc = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        if (cJSON_IsString(rc) && !cJSON_GetObjectItemCaseSensitive(m, "thinking") &&
            !cJSON_AddStringToObject(m, "thinking", rc->valuestring))
            json_oom = true;
    }
}

/* How the reply's reasoning is split off: the server's format, unless the request says "reasoning_format": "none";
 * and whether the prompt's end leaves the model inside a reasoning block. */
static int reasoning_setup(const srv_api *a, const cJSON *o, srv_task *t, api_req *r, hearth_err *err) {
    const cJSON *f = field(o, "reasoning_format");
    r->rfmt = a->rfmt;
    if (f && !cJSON_IsNull(f)) {
        if (!cJSON_IsString(f) || (strcmp(f->valuestring, "none") && strcmp(f->valuestring, "auto") && strcmp(f->valuestring, "deepseek")))
            return herr(err, "'reasoning_format' must be \"none\" or \"auto\"");
        if (!strcmp(f->valuestring, "none")) r->rfmt = RF_NONE;
    }
    char tail[96];
    size_t n = 0;
    for (int i = HT_MAX(0, t->n_prompt - 6); i < t->n_prompt; i++) {
        char piece[64];
        int k = hearth_token_text(a->m, t->prompt[i], piece, sizeof piece);
        if (k < 0 || k > (int)sizeof piece || n + (size_t)k > sizeof tail) { n = 0; continue; }
        memcpy(tail + n, piece, (size_t)k);
        n += (size_t)k;
    }
    r->r_open = reasoning_prompt_opens(r->rfmt, tail, n);
    return 0;
}

/* grammar: the request's own reply grammar (GBNF) in, the reply's (with tools, or after reasoning) out. */
static int chat_prompt(const srv_api *a, const cJSON *o, srv_task *t, api_req *r, char **grammar, hearth_err *err) {
    const cJSON *msgs = field(o, "messages");
    if (!msgs) return herr(err, "'messages' is required");
    cJSON *norm = chat_messages_normalize(msgs, err), *extra = NULL;
    if (!norm) return -1;
    char *gbnf = NULL;
    int rc = tools_prepare(a, o, norm, &r->tools, &gbnf, &t->tool_params, err);
    if (!rc && gbnf && *grammar) rc = herr(err, "'response_format' (or 'grammar') together with 'tools' is not supported");
    if (gbnf && !rc) *grammar = gbnf, gbnf = NULL;
    free(gbnf);
    arguments_as_objects(norm);
    reasoning_as_thinking(norm);
    if (!rc) rc = chat_extra(o, r->tools.mode != TOOLS_OFF && r->tools.fmt != TF_GENERIC, &extra, err);
    if (!rc && json_oom) rc = herr(err, "out of memory");   /* a message, a tool or a call lost a part */
    if (!rc) rc = chat_fmt_tokenize(a->fmt, norm, true, extra, &t->prompt, &t->n_prompt, err);
    if (!rc) rc = reasoning_setup(a, o, t, r, err);
    if (!rc && *grammar && r->r_open) {   /* the constrained reply comes after the reasoning the prompt opened */
        char *g = tools_after_reasoning(*grammar, reasoning_close(r->rfmt));
        free(*grammar);
        *grammar = g;
        if (!g) rc = herr(err, "out of memory");
    }
    cJSON_Delete(norm);
    cJSON_Delete(extra);
    return rc;
}

static int completion_prompt(const srv_api *a, const cJSON *o, srv_task *t, hearth_err *err) {
    const cJSON *p = field(o, "prompt");
    if (!p) return herr(err, "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && !cJSON_IsNumber(p->child)) p = p->child;
    if (cJSON_IsString(p)) return tokenize_text(a, p->valuestring, true, true, &t->prompt, &t->n_prompt, err);
    if (is_token_array(p, a->n_vocab))
        return tokens_from_array(p, &t->prompt, &t->n_prompt) ? herr(err, "out of memory") : 0;
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 1) return herr(err, "'prompt' must be one prompt (only one choice per request is supported)");
    return herr(err, "'prompt' must be a string, an array of one string or an array of token ids below %d", a->n_vocab);
}

/* ---- embeddings ---- */
static int embed_input(const srv_api *a, const cJSON *x, srv_task *t, int i, hearth_err *err) {
    if (cJSON_IsString(x)) {
        if (tokenize_text(a, x->valuestring, true, false, &t->in[i], &t->n_in[i], err)) return -1;
    } else if (is_token_array(x, a->n_vocab)) {
        if (tokens_from_array(x, &t->in[i], &t->n_in[i])) return herr(err, "out of memory");
    } else return herr(err, "'input' must be a string, an array of strings or token ids (below %d)", a->n_vocab);
    t->n_inputs = i + 1;
    int lim = engine_embed_n_ctx(a->eng);
    if (!t->n_in[i]) return herr(err, "input %d is empty", i);
    if (t->n_in[i] > lim) return herr(err, "input %d is %d tokens, but the context is %d tokens", i, t->n_in[i], lim);
    return 0;
}

static int parse_embed(const srv_api *a, const cJSON *o, api_req *r, srv_task *t, hearth_err *err) {
    const cJSON *in = field(o, "input"), *fmt = field(o, "encoding_format");
    if (!in) return herr(err, "'input' is required");
    if (fmt && (!cJSON_IsString(fmt) || (strcmp(fmt->valuestring, "float") && strcmp(fmt->valuestring, "base64"))))
        return herr(err, "'encoding_format' must be \"float\" or \"base64\"");
    r->b64 = fmt && !strcmp(fmt->valuestring, "base64");
    bool many = cJSON_IsArray(in) && !is_token_array(in, a->n_vocab);
    int n = many ? cJSON_GetArraySize(in) : 1;
    if (n < 1 || n > 2048) return herr(err, "'input' must hold 1 to 2048 items");
    t->in = calloc((size_t)n, sizeof *t->in);
    t->n_in = calloc((size_t)n, sizeof *t->n_in);
    if (!t->in || !t->n_in) return herr(err, "out of memory");
    if (!many) return embed_input(a, in, t, 0, err);
    int i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, in) if (embed_input(a, x, t, i++, err)) return -1;
    return 0;
}

/* ---- entry ---- */
/* One logit_bias entry: a token id (a number, or a decimal string as OpenAI's object keys) and a bias in
 * -100..100, or false (llama-server: the token is banned). */
static int add_bias(const srv_api *a, srv_task *t, const char *id_s, const cJSON *id_n, const cJSON *v, hearth_err *err) {
    double id = -1;
    char *end = NULL;
    if (id_n && cJSON_IsNumber(id_n)) id = id_n->valuedouble;
    else if (id_s && *id_s) { id = strtod(id_s, &end); if (*end) id = -1; }
    if (!(id >= 0 && id < a->n_vocab && id == floor(id)))
        return herr(err, "'logit_bias': token %s is not an id below %d", id_s ? id_s : "?", a->n_vocab);
    float b;
    if (cJSON_IsFalse(v)) b = -INFINITY;
    else if (cJSON_IsNumber(v) && v->valuedouble >= -100 && v->valuedouble <= 100) b = (float)v->valuedouble;
    else return herr(err, "'logit_bias': the bias of token %d must be a number in -100..100 (or false)", (int)id);
    if (t->n_bias >= SRV_MAX_BIAS) return herr(err, "'logit_bias': at most %d tokens", SRV_MAX_BIAS);
    t->bias_id[t->n_bias] = (hearth_token)id;
    t->bias[t->n_bias++] = b;
    return 0;
}

/* logit_bias: OpenAI's object {"id": bias}, or llama-server's list [[id, bias], ...]. */
static int parse_bias(const srv_api *a, const cJSON *o, srv_task *t, hearth_err *err) {
    const cJSON *lb = field(o, "logit_bias"), *e;
    if (!lb || cJSON_IsNull(lb)) return 0;
    if (cJSON_IsObject(lb)) {
        cJSON_ArrayForEach(e, lb) if (add_bias(a, t, e->string, NULL, e, err)) return -1;
        return 0;
    }
    if (!cJSON_IsArray(lb)) return herr(err, "'logit_bias' must be an object of token id -> bias, or a list of [id, bias]");
    cJSON_ArrayForEach(e, lb) {
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2 || !cJSON_IsNumber(cJSON_GetArrayItem(e, 0)))
            return herr(err, "'logit_bias' list entries must be [token id, bias]");
        if (add_bias(a, t, NULL, cJSON_GetArrayItem(e, 0), cJSON_GetArrayItem(e, 1), err)) return -1;
    }
    return 0;
}

/* The reply's grammar: OpenAI's response_format ({type: text | json_object | json_schema, json_schema: {schema}}),
 * or llama-server's "grammar" (GBNF) and "json_schema" fields; at most one. As GBNF text (*out, malloc'd; NULL
 * when the reply is free); what the schema says that is not enforced (unknown formats) in *warning. A schema
 * keyword that cannot be enforced is a 400 naming it. */
static int parse_grammar(const cJSON *o, char **out, char **warning, hearth_err *err) {
    const cJSON *rf = field(o, "response_format"), *gbnf = field(o, "grammar"), *js = field(o, "json_schema");
    if (cJSON_IsNull(rf)) rf = NULL;
    if (cJSON_IsNull(gbnf)) gbnf = NULL;
    if (cJSON_IsNull(js)) js = NULL;
    const cJSON *schema = NULL;
    bool any_object = false;
    if (rf) {
        const cJSON *type = cJSON_IsObject(rf) ? field(rf, "type") : NULL;
        if (!cJSON_IsString(type)) return herr(err, "'response_format' must be an object with a 'type'");
        if (!strcmp(type->valuestring, "json_object")) any_object = true;
        else if (!strcmp(type->valuestring, "json_schema")) {
            const cJSON *w = field(rf, "json_schema");
            schema = cJSON_IsObject(w) ? field(w, "schema") : NULL;
            if (!schema) schema = field(rf, "schema");   /* llama-server's flat form */
            if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
                return herr(err, "'response_format.json_schema.schema' must be a JSON Schema object");
        } else if (strcmp(type->valuestring, "text"))
            return herr(err, "'response_format.type' must be text, json_object or json_schema");
    }
    if (!!gbnf + !!js + (schema || any_object) > 1)
        return herr(err, "give one of 'response_format', 'grammar' and 'json_schema'");
    if (gbnf && !cJSON_IsString(gbnf)) return herr(err, "'grammar' must be a string (GBNF)");
    if (js) schema = js;
    if (!gbnf && !schema && !any_object) return 0;
    char *text = NULL;
    if (gbnf) text = strdup(gbnf->valuestring);
    else {
        char *s = any_object ? strdup("{\"type\":\"object\"}") : cJSON_PrintUnformatted(schema);
        if (!s) return herr(err, "out of memory");
        text = json_schema_gbnf(s, "root", warning, err);
        free(s);
        if (!text) return -1;
    }
    if (!text) return herr(err, "out of memory");
    *out = text;
    return 0;
}

#define MERGED "the adapters are merged into the weights (serve --lora-merge): their scales are fixed"

/* [{"id": N, "scale": S}, ...] into scales (n adapters); -1 with err on anything else. */
static int parse_lora_list(const cJSON *l, float *scales, int n, hearth_err *err) {
    if (!cJSON_IsArray(l)) return herr(err, "'lora' must be an array of {\"id\", \"scale\"}");
    const cJSON *it;
    cJSON_ArrayForEach(it, l) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id"), *sc = cJSON_GetObjectItemCaseSensitive(it, "scale");
        if (!cJSON_IsNumber(id) || id->valuedouble != floor(id->valuedouble) || id->valuedouble < 0 || id->valuedouble >= n)
            return herr(err, "'lora': id must be an adapter's number, 0 to %d (GET /lora-adapters lists them)", n - 1);
        if (!cJSON_IsNumber(sc) || !isfinite(sc->valuedouble) || fabs(sc->valuedouble) > 1e6)
            return herr(err, "'lora': scale must be a finite number");
        scales[(int)id->valuedouble] = (float)sc->valuedouble;
    }
    return 0;
}

char *api_lora_adapters(const srv_api *a, const char *body, size_t n, bool post, int *status, char *msg, size_t cap) {
    const int k = engine_n_lora(a->eng);
    float sc[HEARTH_MAX_LORA];
    engine_lora_scales(a->eng, sc);
    *status = 200;
    if (post) {
        hearth_err err;
        const char *end = NULL;
        cJSON *o = ht_utf8_valid(body, n) && !memchr(body, 0, n) ? cJSON_ParseWithLengthOpts(body, n, &end, false) : NULL;
        while (o && end < body + n && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
        if (o && end != body + n) cJSON_Delete(o), o = NULL;
        if (!o) snprintf(err.msg, sizeof err.msg, "the body must be a JSON array of {\"id\", \"scale\"}");
        else if (engine_lora_merged(a->eng)) cJSON_Delete(o), o = NULL, snprintf(err.msg, sizeof err.msg, "%s", MERGED);
        if (!o || parse_lora_list(o, sc, k, &err)) {
            cJSON_Delete(o);
            *status = 400;
            snprintf(msg, cap, "%s", err.msg);
            return NULL;
        }
        cJSON_Delete(o);
        engine_set_lora_scales(a->eng, sc);
    }
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; arr && i < k; i++) {
        cJSON *e = cJSON_CreateObject();
        if (!json_push(arr, e) || !json_put(e, "id", cJSON_CreateNumber(i)) ||
            !json_put(e, "path", cJSON_CreateString(engine_lora_path(a->eng, i))) || !json_put(e, "scale", cJSON_CreateNumber(sc[i])))
            break;
    }
    return api_print(arr);
}

static int parse_generate(const srv_api *a, api_kind kind, const cJSON *o, api_req *r, srv_task *t, hearth_err *err) {
    if (a->encoder) return herr(err, "model %s is an encoder: it serves only /v1/embeddings", a->model_id);
    bool echo = false, cache_prompt = true;
    char *grammar = NULL;
    if (parse_sampling(o, t, err) || parse_limits(o, t, r, err) || parse_logprobs(o, kind, t, err) ||
        get_bool(o, "echo", &echo, err) || get_bool(o, "cache_prompt", &cache_prompt, err) || parse_bias(a, o, t, err) ||
        parse_grammar(o, &grammar, &t->warning, err))
        return -1;
    t->no_cache = !cache_prompt;
    if (echo) { free(grammar); return herr(err, "'echo' is not supported"); }
    const cJSON *lora = cJSON_GetObjectItemCaseSensitive(o, "lora");
    engine_lora_scales(a->eng, t->lora);   /* the global scales, then the request's own */
    if (lora && !cJSON_IsNull(lora)) {
        int rc = !engine_n_lora(a->eng) ? herr(err, "'lora': the server has no adapters (hearth serve --lora FILE)")
               : engine_lora_merged(a->eng) ? herr(err, "'lora': %s", MERGED)
                                        : parse_lora_list(lora, t->lora, engine_n_lora(a->eng), err);
        if (rc) { free(grammar); return -1; }
    }
    r->n_probs = t->n_probs;
    int rc = kind == API_CHAT ? chat_prompt(a, o, t, r, &grammar, err) : completion_prompt(a, o, t, err);
    if (!rc && grammar && !(t->grammar = hearth_grammar_new(a->m, grammar, err))) rc = -1;
    if (t->grammar) t->grammar_src = grammar;
    else free(grammar);
    if (rc) return -1;
    int n_ctx = engine_n_ctx(a->eng);
    if (t->n_prompt == 0) return herr(err, "the prompt is empty (and the model has no BOS token)");
    if (t->n_prompt >= n_ctx)
        return herr(err, "the prompt is %d tokens, but the context is %d tokens (per slot)", t->n_prompt, n_ctx);
    if (t->grammar) {   /* a constrained reply ends complete within its budget, so the budget must allow one */
        int need = hearth_grammar_min_tokens(t->grammar), room = n_ctx - t->n_prompt;
        if (t->max_tokens >= 0 && t->max_tokens < room) room = t->max_tokens;
        if (need < 0) return herr(err, "the grammar (or schema) has no finite document the model can write");
        if (need > room)
            return herr(err, "max_tokens is too small for a complete %s: %d tokens %s, and the shortest takes up to %d",
                        r->tools.mode != TOOLS_OFF ? "tool call" : "document of the schema (or grammar)", room,
                        room == t->max_tokens ? "asked" : "left in the context", need);
    }
    return 0;
}

/* Strict: the whole body is one JSON object in valid UTF-8, with nothing but whitespace after it. NULL with err set
 * otherwise. */
cJSON *api_parse_body(const char *body, size_t n, hearth_err *err) {
    const char *end = NULL;
    const bool nul = memchr(body, 0, n) != NULL, utf8 = ht_utf8_valid(body, n);
    errno = 0;
    json_oom = false;
    cJSON *o = nul || !utf8 ? NULL : cJSON_ParseWithLengthOpts(body, n, &end, false);
    const bool oom = !o && errno == ENOMEM;   /* cJSON says NULL for both; malloc leaves ENOMEM */
    while (o && end < body + n && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
    const bool trailing = o && end != body + n;
    if (oom) herr(err, "out of memory parsing the request body");
    else if (nul) herr(err, "the request body contains a NUL byte");
    else if (!utf8) herr(err, "the request body is not valid UTF-8");
    else if (trailing) herr(err, "the request body has data after its JSON value");
    else if (!o) herr(err, "the request body is not valid JSON");
    else if (!cJSON_IsObject(o)) herr(err, "the request body must be a JSON object");
    else return o;
    cJSON_Delete(o);
    return NULL;
}

int api_parse(const srv_api *a, api_kind kind, const char *body, size_t n, api_req *r, srv_task **out, int *status,
              char *msg, size_t cap) {
    *out = NULL;
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->n_probs = -1;
    make_id(r, kind == API_CHAT ? "chatcmpl-" : kind == API_COMPLETION ? "cmpl-" : "embd-");
    hearth_err err = { "" };
    *status = 400;
    cJSON *o = api_parse_body(body, n, &err);
    srv_task *t = o ? task_new(kind == API_EMBED ? TASK_EMBED : TASK_GENERATE) : NULL;
    int rc = -1;
    if (!o) {}
    else if (!t) { herr(&err, "out of memory"); *status = 500; }
    else {
        t->sp = hearth_sampler_default_params();
        rc = kind == API_EMBED ? parse_embed(a, o, r, t, &err) : parse_generate(a, kind, o, r, t, &err);
    }
    cJSON_Delete(o);
    if (rc) {
        if (strstr(err.msg, "out of memory")) *status = 500;
        snprintf(msg, cap, "%s", err.msg);
        task_release(t);
        return -1;
    }
    *out = t;
    return 0;
}

/* ---- output ---- */
/* s[0..n) with invalid UTF-8 bytes replaced by U+FFFD, NUL-terminated (malloc'd). */
char *api_utf8_clean(const char *s, size_t n) {
    char *o = malloc(n * 3 + 1);
    if (!o) return NULL;
    size_t w = 0;
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t l = c < 0x80 ? 1 : (c >= 0xC2 && c < 0xE0) ? 2 : (c >= 0xE0 && c < 0xF0) ? 3 : (c >= 0xF0 && c < 0xF5) ? 4 : 0;
        bool ok = l && i + l <= n;
        for (size_t k = 1; ok && k < l; k++) ok = (u[i + k] & 0xC0) == 0x80;
        if (ok && l == 3) ok = !(c == 0xE0 && u[i + 1] < 0xA0) && !(c == 0xED && u[i + 1] >= 0xA0);
        if (ok && l == 4) ok = !(c == 0xF0 && u[i + 1] < 0x90) && !(c == 0xF4 && u[i + 1] >= 0x90);
        if (ok && c) { memcpy(o + w, s + i, l); w += l; i += l; }
        else { memcpy(o + w, "\xEF\xBF\xBD", 3); w += 3; i++; }
    }
    o[w] = 0;
    return o;
}

cJSON *api_add_text(cJSON *obj, const char *key, const char *s, size_t n) {
    char *c = api_utf8_clean(s, n);
    cJSON *j = c ? cJSON_AddStringToObject(obj, key, c) : NULL;
    if (!c) json_oom = true;
    free(c);
    return j;
}

/* A token's text (invalid UTF-8 replaced) as a JSON string; its raw bytes into *bytes when asked. */
static cJSON *piece_json(const srv_api *a, hearth_token id, cJSON **bytes) {
    char buf[256];
    int n = HT_MAX(0, HT_MIN(hearth_token_piece(a->m, id, buf, sizeof buf), (int)sizeof buf));
    if (bytes) {
        *bytes = cJSON_CreateArray();
        for (int i = 0; *bytes && i < n; i++) json_push(*bytes, cJSON_CreateNumber((unsigned char)buf[i]));
    }
    char *c = api_utf8_clean(buf, (size_t)n);
    cJSON *s = c ? cJSON_CreateString(c) : NULL;
    if (!c) json_oom = true;
    free(c);
    return s;
}

static cJSON *chat_logprob_entry(const srv_api *a, hearth_token id, float lp) {
    cJSON *e = cJSON_CreateObject(), *bytes = NULL;
    if (!e) return NULL;
    json_put(e, "token", piece_json(a, id, &bytes));
    cJSON_AddNumberToObject(e, "logprob", lp);
    json_put(e, "bytes", bytes);
    return e;
}

static cJSON *chat_logprobs(const srv_api *a, const srv_tok *toks, int n) {
    cJSON *lp = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(lp, "content");
    for (int i = 0; content && i < n; i++) {
        cJSON *e = chat_logprob_entry(a, toks[i].id, toks[i].logprob), *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int k = 0; top && k < toks[i].n_top; k++) json_push(top, chat_logprob_entry(a, toks[i].top_id[k], toks[i].top_lp[k]));
        json_push(content, e);
    }
    return lp;
}

/* text_offset: where each token's text starts in the reply; toks[0]'s is start (a stream's chunk starts mid-reply) */
static cJSON *completion_logprobs(const srv_api *a, const srv_tok *toks, int n, size_t start) {
    cJSON *lp = cJSON_CreateObject();
    cJSON *tk = cJSON_AddArrayToObject(lp, "tokens"), *tl = cJSON_AddArrayToObject(lp, "token_logprobs");
    cJSON *top = cJSON_AddArrayToObject(lp, "top_logprobs"), *off = cJSON_AddArrayToObject(lp, "text_offset");
    if (!tk || !tl || !top || !off) return lp;
    for (int i = 0; i < n; i++) {
        json_push(tk, piece_json(a, toks[i].id, NULL));
        json_push(tl, cJSON_CreateNumber(toks[i].logprob));
        cJSON *alt = cJSON_CreateObject();
        for (int k = 0; alt && k < toks[i].n_top; k++) {
            char buf[256];
            int m = HT_MAX(0, HT_MIN(hearth_token_piece(a->m, toks[i].top_id[k], buf, sizeof buf), (int)sizeof buf));
            char *c = api_utf8_clean(buf, (size_t)m);
            if (!c) json_oom = true;
            else if (!cJSON_GetObjectItemCaseSensitive(alt, c)) cJSON_AddNumberToObject(alt, c, toks[i].top_lp[k]);
            free(c);
        }
        json_push(top, alt);
        json_push(off, cJSON_CreateNumber((double)(i ? toks[i - 1].text_end : start)));
    }
    return lp;
}

static cJSON *response_head(const srv_api *a, const api_req *r, const char *object) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", a->model_id);
    return o;
}

static void add_usage(cJSON *o, int prompt, int completion) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", completion);
    cJSON_AddNumberToObject(u, "total_tokens", prompt + completion);
}

static void add_timings(cJSON *o, const srv_task *t) {
    cJSON *tm = cJSON_AddObjectToObject(o, "timings");
    double first = t->t_first > 0 ? t->t_first : t->t_done;
    cJSON_AddNumberToObject(tm, "cache_n", t->n_cached);
    cJSON_AddNumberToObject(tm, "prompt_n", t->n_prompt - t->n_cached);
    cJSON_AddNumberToObject(tm, "prompt_ms", first - t->t_submit);
    cJSON_AddNumberToObject(tm, "predicted_n", t->n_gen);
    cJSON_AddNumberToObject(tm, "predicted_ms", t->t_done - first);
}

char *api_print(cJSON *o) {
    char *s = o && !json_oom ? cJSON_PrintUnformatted(o) : NULL;
    if (json_oom) { free(s); s = NULL; }
    json_oom = false;
    cJSON_Delete(o);
    return s;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64(const unsigned char *p, size_t n) {
    char *o = malloc((n + 2) / 3 * 4 + 1), *w = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *w++ = B64[v >> 18 & 63];
        *w++ = B64[v >> 12 & 63];
        *w++ = i + 1 < n ? B64[v >> 6 & 63] : '=';
        *w++ = i + 2 < n ? B64[v & 63] : '=';
    }
    *w = 0;
    return o;
}

static char *embed_response(const srv_api *a, const api_req *r, const srv_task *t) {
    cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data");
    cJSON_AddStringToObject(o, "object", "list");
    int total = 0;
    for (int i = 0; data && i < t->n_inputs; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "object", "embedding");
        cJSON_AddNumberToObject(e, "index", i);
        const float *v = t->emb + (size_t)i * t->dim;
        if (r->b64) {
            char *b = base64((const unsigned char *)v, (size_t)t->dim * sizeof(float));   /* little-endian host */
            cJSON_AddStringToObject(e, "embedding", b ? b : "");
            free(b);
        } else json_put(e, "embedding", cJSON_CreateFloatArray(v, t->dim));
        json_push(data, e);
        total += t->n_in[i];
    }
    cJSON_AddStringToObject(o, "model", a->model_id);
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", total);
    cJSON_AddNumberToObject(u, "total_tokens", total);
    return api_print(o);
}

bool api_reply_split(const api_req *r, const srv_task *t, api_reply *out) {
    memset(out, 0, sizeof *out);
    reasoning_init(&out->rp, r->rfmt, r->r_open);
    reasoning_feed(&out->rp, t->text ? t->text : "", t->len);
    reasoning_finish(&out->rp);
    out->content = out->rp.content.p ? out->rp.content.p : "";
    out->n_content = out->rp.content.n;
    bool ok = !out->rp.content.oom && !out->rp.reasoning.oom;
    if (ok && r->tools.mode != TOOLS_OFF) {
        /* harmony's calls are messages of their own, which the answer leaves out: they are read from the whole reply */
        bool whole = r->tools.fmt == TF_HARMONY;
        out->calls = tools_parse(&r->tools, t->tool_params, whole ? t->text : out->content, whole ? t->len : out->n_content,
                                 &out->tool_text);
        ok = out->calls != NULL;
        if (!whole) {
            out->content = out->tool_text;
            out->n_content = out->tool_text ? strlen(out->tool_text) : 0;
        }
    }
    if (!ok) api_json_lost();
    return ok;
}

void api_reply_free(api_reply *p) {
    reasoning_free(&p->rp);
    free(p->tool_text);
    cJSON_Delete(p->calls);
}

char *api_response(const srv_api *a, const api_req *r, srv_task *t) {
    if (r->kind == API_EMBED) return embed_response(a, r, t);
    bool chat = r->kind == API_CHAT;
    cJSON *o = response_head(a, r, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    const char *finish = t->finish ? t->finish : "stop";
    if (chat) {   /* reasoning, text and calls, split */
        api_reply rp;
        api_reply_split(r, t, &rp);
        cJSON *msg = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(msg, "role", "assistant");
        if (r->tools.mode != TOOLS_OFF && !rp.n_content) cJSON_AddNullToObject(msg, "content");
        else api_add_text(msg, "content", rp.content ? rp.content : "", rp.n_content);
        if (rp.rp.reasoning.n) api_add_text(msg, "reasoning_content", rp.rp.reasoning.p, rp.rp.reasoning.n);
        if (rp.calls && cJSON_GetArraySize(rp.calls)) {
            json_put(msg, "tool_calls", rp.calls);
            rp.calls = NULL;
            finish = "tool_calls";
        }
        api_reply_free(&rp);
    } else api_add_text(c, "text", t->text ? t->text : "", t->len);
    if (r->n_probs < 0) cJSON_AddNullToObject(c, "logprobs");
    else json_put(c, "logprobs", chat ? chat_logprobs(a, t->toks, t->n_toks) : completion_logprobs(a, t->toks, t->n_toks, 0));
    cJSON_AddStringToObject(c, "finish_reason", finish);
    json_push(choices, c);
    add_usage(o, t->n_prompt, t->n_gen);
    add_timings(o, t);
    if (t->warning) json_push(cJSON_AddArrayToObject(o, "warnings"), cJSON_CreateString(t->warning));
    return api_print(o);
}


static char *sse(cJSON *o) {
    char *j = api_print(o);
    if (!j) return NULL;
    size_t n = strlen(j);
    char *s = malloc(n + 9);
    if (s) { memcpy(s, "data: ", 6); memcpy(s + 6, j, n); memcpy(s + 6 + n, "\n\n", 3); }
    free(j);
    return s;
}

static cJSON *chunk_delta(const srv_api *a, const api_req *r, const char *text, size_t n, const srv_tok *toks, int n_toks,
                          size_t toks_start, const char *finish, bool first) {
    bool chat = r->kind == API_CHAT;
    cJSON *o = response_head(a, r, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (first) cJSON_AddStringToObject(d, "role", "assistant");
        if (first || n) api_add_text(d, "content", text ? text : "", n);
    } else api_add_text(c, "text", text ? text : "", n);
    if (r->n_probs < 0 || !n_toks) cJSON_AddNullToObject(c, "logprobs");
    else json_put(c, "logprobs", chat ? chat_logprobs(a, toks, n_toks) : completion_logprobs(a, toks, n_toks, toks_start));
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    json_push(choices, c);
    return o;
}

char *api_chunk_delta(const srv_api *a, const api_req *r, const char *text, size_t n, const srv_tok *toks, int n_toks,
                      size_t toks_start, const char *finish, bool first) {
    return sse(chunk_delta(a, r, text, n, toks, n_toks, toks_start, finish, first));
}

/* A stream's last chunk, with finish_reason, and the "warnings" a whole reply carries (what the schema said that
 * was not enforced). */
char *api_chunk_finish(const srv_api *a, const api_req *r, const srv_task *t, const char *finish) {
    cJSON *o = chunk_delta(a, r, "", 0, NULL, 0, 0, finish, false);
    if (o && t->warning) json_push(cJSON_AddArrayToObject(o, "warnings"), cJSON_CreateString(t->warning));
    return sse(o);
}

char *api_chunk_reasoning(const srv_api *a, const api_req *r, const char *text, size_t n) {
    cJSON *o = response_head(a, r, "chat.completion.chunk");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    api_add_text(cJSON_AddObjectToObject(c, "delta"), "reasoning_content", text, n);
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
    json_push(choices, c);
    return sse(o);
}

char *api_chunk_usage(const srv_api *a, const api_req *r, const srv_task *t) {
    cJSON *o = response_head(a, r, r->kind == API_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddArrayToObject(o, "choices");
    add_usage(o, t->n_prompt, t->n_gen);
    add_timings(o, t);
    return sse(o);
}

char *api_chunk_progress(const srv_api *a, const api_req *r, const srv_task *t) {
    cJSON *o = response_head(a, r, r->kind == API_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddArrayToObject(o, "choices");
    cJSON *p = cJSON_AddObjectToObject(o, "prompt_progress");
    cJSON_AddNumberToObject(p, "total", t->n_prompt);
    cJSON_AddNumberToObject(p, "cache", t->n_cached);
    cJSON_AddNumberToObject(p, "processed", t->n_done);
    cJSON_AddNumberToObject(p, "time_ms", t->t_start ? srv_now_ms() - t->t_start : 0);
    return sse(o);
}

/* The end of a streamed chat reply with tools: its text as one delta, each call as a delta.tool_calls chunk,
 * then the finish chunk ("tool_calls" when there are calls). malloc'd SSE events, concatenated. */
char *api_chunk_tools(const srv_api *a, const api_req *r, const srv_task *t) {
    api_reply rp;
    ht_str out = { 0 };
    if (!api_reply_split(r, t, &rp)) { api_reply_free(&rp); return NULL; }
    const cJSON *calls = rp.calls, *call;
    if (rp.rp.reasoning.n) ht_str_take(&out, api_chunk_reasoning(a, r, rp.rp.reasoning.p, rp.rp.reasoning.n));
    if (rp.n_content) ht_str_take(&out, api_chunk_delta(a, r, rp.content, rp.n_content, NULL, 0, 0, NULL, false));
    int i = 0;
    cJSON_ArrayForEach(call, calls) {
        cJSON *o = response_head(a, r, "chat.completion.chunk"), *ch = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "index", 0);
        cJSON *d = cJSON_AddObjectToObject(c, "delta"), *tc = cJSON_AddArrayToObject(d, "tool_calls"), *e = cJSON_Duplicate(call, true);
        json_put(e, "index", cJSON_CreateNumber(i++));
        json_push(tc, e);
        cJSON_AddNullToObject(c, "logprobs");
        cJSON_AddNullToObject(c, "finish_reason");
        json_push(ch, c);
        ht_str_take(&out, sse(o));
    }
    ht_str_take(&out, api_chunk_finish(a, r, t, i ? "tool_calls" : t->finish ? t->finish : "stop"));
    api_reply_free(&rp);
    if (out.oom) { free(out.p); return NULL; }
    return out.p;
}

char *api_error_body(int status, const char *msg) {
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    const char *type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error"
                     : status >= 500 ? "server_error" : "invalid_request_error";
    api_add_text(e, "message", msg, strlen(msg));
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNullToObject(e, "param");
    if (status == 401) cJSON_AddStringToObject(e, "code", "invalid_api_key");
    else cJSON_AddNullToObject(e, "code");
    return api_print(o);
}

char *api_models(const srv_api *a) {
    hearth_model_info info;
    hearth_model_get_info(a->m, &info);
    cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddStringToObject(m, "id", a->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "hearth");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddStringToObject(meta, "arch", info.arch);
    cJSON_AddNumberToObject(meta, "n_vocab", info.n_vocab);
    cJSON_AddNumberToObject(meta, "n_embd", info.n_embd);
    cJSON_AddNumberToObject(meta, "n_ctx", engine_n_ctx(a->eng));
    cJSON_AddNumberToObject(meta, "n_params", (double)info.n_params);
    cJSON_AddBoolToObject(meta, "encoder", info.is_encoder);
    cJSON_AddBoolToObject(meta, "chat_template", chat_fmt_has_template(a->fmt));
    json_push(data, m);
    return api_print(o);
}

char *api_health(const srv_api *a) {
    int idle, busy, queued;
    engine_slots(a->eng, &idle, &busy, &queued);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    cJSON_AddNumberToObject(o, "slots_idle", idle);
    cJSON_AddNumberToObject(o, "slots_processing", busy);
    cJSON_AddNumberToObject(o, "queued", queued);
    srv_counters k;
    engine_counters(a->eng, &k);
    cJSON_AddNumberToObject(o, "decode_steps", (double)k.steps);
    cJSON_AddNumberToObject(o, "tokens_sampled", (double)k.sampled);
    cJSON_AddNumberToObject(o, "decode_ms", round(k.decode_ms * 10) / 10);
    cJSON_AddNumberToObject(o, "step_ms", round(k.step_ms * 10) / 10);
    return api_print(o);
}

/* ---- /tokenize, /detokenize (llama-server's shapes) ---- */
char *api_tokenize(const srv_api *a, const char *body, size_t n, int *status, char *msg, size_t cap) {
    hearth_err err = { "" };
    cJSON *o = api_parse_body(body, n, &err), *out = NULL;
    const cJSON *content = o ? field(o, "content") : NULL;
    bool add_special = false, parse_special = true, with_pieces = false;
    hearth_token *ids = NULL;
    int n_ids = 0;
    *status = 400;
    if (!o) {}
    else if (!cJSON_IsString(content)) herr(&err, "'content' must be a string");
    else if (get_bool(o, "add_special", &add_special, &err) || get_bool(o, "parse_special", &parse_special, &err) ||
             get_bool(o, "with_pieces", &with_pieces, &err)) {}
    else if (!a->has_vocab) herr(&err, "the model has no tokenizer");
    else if (!tokenize_text(a, content->valuestring, add_special, parse_special, &ids, &n_ids, &err)) {
        out = cJSON_CreateObject();
        cJSON *arr = out ? cJSON_AddArrayToObject(out, "tokens") : NULL;
        for (int i = 0; arr && i < n_ids; i++) {
            if (!with_pieces) { json_push(arr, cJSON_CreateNumber(ids[i])); continue; }
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "id", ids[i]);
            json_put(e, "piece", piece_json(a, ids[i], NULL));
            json_push(arr, e);
        }
        if (!arr) herr(&err, "out of memory");
    }
    free(ids);
    cJSON_Delete(o);
    if (!out) {
        if (strstr(err.msg, "out of memory")) *status = 500;
        snprintf(msg, cap, "%s", err.msg);
        return NULL;
    }
    return api_print(out);
}

char *api_detokenize(const srv_api *a, const char *body, size_t n, int *status, char *msg, size_t cap) {
    hearth_err err = { "" };
    cJSON *o = api_parse_body(body, n, &err), *out = NULL;
    const cJSON *toks = o ? field(o, "tokens") : NULL;
    *status = 400;
    if (!o) {}
    else if (!cJSON_IsArray(toks) || (cJSON_GetArraySize(toks) && !is_token_array(toks, a->n_vocab)))
        herr(&err, "'tokens' must be an array of token ids below %d", a->n_vocab);
    else if (!a->has_vocab) herr(&err, "the model has no tokenizer");
    else {
        size_t len = 0, cap_t = 256;
        char *text = malloc(cap_t);
        const cJSON *x;
        cJSON_ArrayForEach(x, toks) {
            char buf[256];
            int k = HT_MAX(0, HT_MIN(hearth_token_piece(a->m, (hearth_token)x->valuedouble, buf, sizeof buf), (int)sizeof buf));
            if (text && len + (size_t)k + 1 > cap_t) {
                char *t2 = realloc(text, cap_t = (len + (size_t)k + 1) * 2);
                if (!t2) { free(text); text = NULL; }
                else text = t2;
            }
            if (text) { memcpy(text + len, buf, (size_t)k); len += (size_t)k; }
        }
        if (text && (out = cJSON_CreateObject()) && !api_add_text(out, "content", text, len)) { cJSON_Delete(out); out = NULL; }
        free(text);
        if (!out) herr(&err, "out of memory");
    }
    cJSON_Delete(o);
    if (!out) {
        if (strstr(err.msg, "out of memory")) *status = 500;
        snprintf(msg, cap, "%s", err.msg);
        return NULL;
    }
    return api_print(out);
}

/* ---- /metrics: Prometheus text exposition ---- */
char *api_metrics(const srv_api *a, const srv_stats *st) {
    int idle, busy, queued;
    srv_counters k;
    engine_slots(a->eng, &idle, &busy, &queued);
    engine_counters(a->eng, &k);
    char *out = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&out, &n);
    if (!f) return NULL;
    static const char *const HELP[][3] = {
        { "hearth_requests_total", "counter", "HTTP requests answered (any route, any status)" },
        { "hearth_requests_in_flight", "gauge", "HTTP requests being answered now" },
        { "hearth_prompt_tokens_total", "counter", "prompt tokens of finished generation requests" },
        { "hearth_prompt_tokens_cached_total", "counter", "prompt tokens reused from a slot's KV cache instead of evaluated" },
        { "hearth_tokens_generated_total", "counter", "tokens generated" },
        { "hearth_decode_steps_total", "counter", "engine steps (one batched decode each)" },
        { "hearth_tokens_sampled_total", "counter", "tokens sampled by the engine (sampled / steps = mean generating batch)" },
        { "hearth_decode_seconds_total", "counter", "time in hearth_decode" },
        { "hearth_step_seconds_total", "counter", "time in whole engine steps (decode, sampling, handing out text)" },
        { "hearth_slots_idle", "gauge", "slots with no request" },
        { "hearth_slots_processing", "gauge", "slots serving a request" },
        { "hearth_requests_queued", "gauge", "requests waiting for a slot" },
        { "hearth_prompt_cache_hits_total", "counter", "requests that started from the shared prompt cache" },
        { "hearth_prompt_cache_misses_total", "counter", "requests whose prompt had whole blocks the shared cache did not hold" },
        { "hearth_prompt_cache_restored_tokens_total", "counter", "prompt tokens restored from the shared prompt cache" },
        { "hearth_prompt_cache_blocks", "gauge", "blocks of 64 tokens held by the shared prompt cache in RAM" },
        { "hearth_draft_tokens_total", "counter", "tokens proposed by speculative decoding (draft model or n-gram lookup)" },
        { "hearth_draft_tokens_accepted_total", "counter", "proposed tokens the model sampled too (accepted / drafted = acceptance)" },
    };
    const double v[] = { (double)st->requests, (double)st->in_flight, (double)k.prompt_tokens, (double)k.cached_tokens,
                         (double)k.generated_tokens, (double)k.steps, (double)k.sampled, k.decode_ms / 1e3, k.step_ms / 1e3,
                         idle, busy, queued, (double)k.pc_hits, (double)k.pc_misses, (double)k.pc_tokens, (double)k.pc_entries,
                         (double)k.drafted, (double)k.accepted };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", HELP[i][0], HELP[i][2], HELP[i][0], HELP[i][1], HELP[i][0], v[i]);
    fprintf(f, "# HELP hearth_http_requests_total HTTP requests answered, by route and status\n"
               "# TYPE hearth_http_requests_total counter\n");
    for (int r = 0; r < SRV_N_ROUTES; r++)
        for (int k = 0; k <= SRV_N_STATUS; k++) {
            if (!st->by_route[r][k] || !st->route_names[r]) continue;
            if (k < SRV_N_STATUS) fprintf(f, "hearth_http_requests_total{route=\"%s\",status=\"%d\"} %lld\n", st->route_names[r],
                                          SRV_STATUS_CODES[k], st->by_route[r][k]);
            else fprintf(f, "hearth_http_requests_total{route=\"%s\",status=\"other\"} %lld\n", st->route_names[r], st->by_route[r][k]);
        }
    fprintf(f, "# HELP hearth_connections_closed_late_total connections closed for a request head or body not in by its "
               "deadline, or to make room at the connection limit\n# TYPE hearth_connections_closed_late_total counter\n"
               "hearth_connections_closed_late_total %lld\n", st->closed_late);
    srv_latency l;
    engine_latency(a->eng, &l);
    static const struct { const char *name, *help; } H[] = {
        { "hearth_time_to_first_token_seconds", "from a generation request's arrival to its first token" },
        { "hearth_time_per_output_token_seconds", "mean time between a request's tokens after the first" },
    };
    for (int h = 0; h < 2; h++) {
        const long long *b = h ? l.tpot : l.ttft;
        const double *bounds = h ? SRV_TPOT_BUCKETS : SRV_TTFT_BUCKETS;
        fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", H[h].name, H[h].help, H[h].name);
        for (int i = 0; i < SRV_N_BUCKETS; i++) fprintf(f, "%s_bucket{le=\"%g\"} %lld\n", H[h].name, bounds[i], b[i]);
        fprintf(f, "%s_bucket{le=\"+Inf\"} %lld\n%s_sum %.9g\n%s_count %lld\n", H[h].name, b[SRV_N_BUCKETS], H[h].name,
                h ? l.tpot_sum : l.ttft_sum, H[h].name, h ? l.n_tpot : l.n_ttft);
    }
    fprintf(f, "# HELP hearth_model_info the model served (value 1)\n# TYPE hearth_model_info gauge\n");
    fprintf(f, "hearth_model_info{model=\"");
    for (const char *p = a->model_id; *p; p++) fprintf(f, *p == '"' || *p == '\\' ? "\\%c" : *p == '\n' ? "\\n" : "%c", *p);
    fprintf(f, "\"} 1\n");
    if (fclose(f)) { free(out); return NULL; }
    return out;
}
