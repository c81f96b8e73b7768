/* srv_ollama.c — Ollama's API on the same engine: /api/generate, /api/chat and /api/embed are translated into
 * the OpenAI-shaped requests api_parse already checks (Ollama's options onto the sampling fields), and the
 * answers are written in Ollama's shapes: NDJSON lines while streaming (Ollama's default), one object otherwise,
 * durations in nanoseconds. /api/tags, /api/ps, /api/show and /api/version describe the one model served, which
 * answers to its id with or without a ":tag". "format" ("json" or a JSON Schema) becomes response_format.
 * Ollama features hearth does not have yet ("tools", images, "suffix", a custom "template", "context") are
 * refused with a 400 naming them, never ignored. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "model/model.h"
#include "server/srv_internal.h"

/* ---- requests ---- */
static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* Ollama's options -> the OpenAI request's fields (same checks follow in api_parse). */
static int map_options(const cJSON *opts, cJSON *req, hearth_err *err) {
    static const char *const SAME[][2] = {
        { "temperature", "temperature" }, { "top_k", "top_k" }, { "top_p", "top_p" }, { "min_p", "min_p" },
        { "typical_p", "typical_p" }, { "repeat_penalty", "repeat_penalty" }, { "repeat_last_n", "repeat_last_n" },
        { "presence_penalty", "presence_penalty" }, { "frequency_penalty", "frequency_penalty" }, { "seed", "seed" },
        { "stop", "stop" },
    };
    if (!opts || cJSON_IsNull(opts)) return 0;
    if (!cJSON_IsObject(opts)) return herr(err, "'options' must be an object");
    for (size_t i = 0; i < sizeof SAME / sizeof SAME[0]; i++) {
        const cJSON *v = item(opts, SAME[i][0]);
        if (v) json_put(req, SAME[i][1], cJSON_Duplicate(v, true));
    }
    const cJSON *np = item(opts, "num_predict");
    if (np && !cJSON_IsNumber(np)) return herr(err, "'options.num_predict' must be a number");
    if (np && np->valuedouble > 0) cJSON_AddNumberToObject(req, "max_tokens", np->valuedouble);   /* -1, -2: no limit */
    return 0;
}

/* "format": "json" (any JSON object) or a JSON Schema, as OpenAI's response_format. */
static int map_format(const cJSON *f, cJSON *req, hearth_err *err) {
    if (!f || cJSON_IsNull(f) || (cJSON_IsString(f) && !*f->valuestring)) return 0;
    cJSON *rf = cJSON_AddObjectToObject(req, "response_format");
    if (!rf) return herr(err, "out of memory");
    if (cJSON_IsString(f) && !strcmp(f->valuestring, "json")) cJSON_AddStringToObject(rf, "type", "json_object");
    else if (cJSON_IsObject(f)) {
        cJSON_AddStringToObject(rf, "type", "json_schema");
        cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
        if (js) json_put(js, "schema", cJSON_Duplicate(f, true));
    } else return herr(err, "'format' must be \"json\" or a JSON Schema object");
    return 0;
}

/* "think": true / false (or gpt-oss's "low" / "medium" / "high") -> the template's switches. */
static int map_think(const cJSON *t, cJSON *req, hearth_err *err) {
    if (!t || cJSON_IsNull(t)) return 0;
    cJSON *kw = cJSON_AddObjectToObject(req, "chat_template_kwargs");
    if (!kw) return herr(err, "out of memory");
    if (cJSON_IsBool(t)) cJSON_AddBoolToObject(kw, "enable_thinking", cJSON_IsTrue(t));
    else if (cJSON_IsString(t) && (!strcmp(t->valuestring, "low") || !strcmp(t->valuestring, "medium") || !strcmp(t->valuestring, "high"))) {
        cJSON_AddBoolToObject(kw, "enable_thinking", true);
        cJSON_AddStringToObject(req, "reasoning_effort", t->valuestring);
    } else return herr(err, "'think' must be true, false, \"low\", \"medium\" or \"high\"");
    return 0;
}

static int refuse_unsupported(const cJSON *o, hearth_err *err) {
    static const char *const NO[] = { "tools", "images", "suffix", "template", "context" };
    for (size_t i = 0; i < sizeof NO / sizeof NO[0]; i++) {
        const cJSON *v = item(o, NO[i]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !*v->valuestring) && !(cJSON_IsArray(v) && !cJSON_GetArraySize(v)))
            return herr(err, "'%s' is not supported by this server", NO[i]);
    }
    const cJSON *msgs = item(o, "messages"), *m;
    if (cJSON_IsArray(msgs)) cJSON_ArrayForEach(m, msgs) {
        const cJSON *im = cJSON_IsObject(m) ? item(m, "images") : NULL;
        if (im && !cJSON_IsNull(im) && !(cJSON_IsArray(im) && !cJSON_GetArraySize(im)))
            return herr(err, "'images' is not supported by this server");
    }
    return 0;
}

char *ollama_translate(const srv_api *a, ollama_op op, const char *body, size_t n, api_kind *kind, char *msg, size_t cap) {
    hearth_err err = { "" };
    cJSON *o = api_parse_body(body, n, &err), *req = o ? cJSON_CreateObject() : NULL;
    int rc = o ? 0 : -1;
    if (o && !req) rc = herr(&err, "out of memory");
    if (!rc && op == OLLAMA_EMBED) {
        const cJSON *in = item(o, "input");
        if (!in) in = item(o, "prompt");   /* the older /api/embeddings takes one prompt */
        if (!in) rc = herr(&err, "'input' is required");
        else json_put(req, "input", cJSON_Duplicate(in, true));
        *kind = API_EMBED;
    } else if (!rc) {
        const cJSON *st = item(o, "stream"), *raw = item(o, "raw");
        if (st && !cJSON_IsBool(st)) rc = herr(&err, "'stream' must be a boolean");
        else if (raw && !cJSON_IsBool(raw)) rc = herr(&err, "'raw' must be a boolean");
        else rc = refuse_unsupported(o, &err) || map_options(item(o, "options"), req, &err) ||
                  map_format(item(o, "format"), req, &err) || map_think(item(o, "think"), req, &err) ? -1 : 0;
        cJSON_AddBoolToObject(req, "stream", !st || cJSON_IsTrue(st));
        if (!rc && op == OLLAMA_CHAT) {
            const cJSON *m = item(o, "messages");
            if (!m) rc = herr(&err, "'messages' is required");
            else json_put(req, "messages", cJSON_Duplicate(m, true));
            *kind = API_CHAT;
        } else if (!rc) {
            /* /api/generate: the prompt goes through the chat template as a user turn (with the system prompt),
             * unless raw or the model has none */
            const cJSON *p = item(o, "prompt"), *sys = item(o, "system");
            if (p && !cJSON_IsString(p)) rc = herr(&err, "'prompt' must be a string");
            else if (sys && !cJSON_IsString(sys) && !cJSON_IsNull(sys)) rc = herr(&err, "'system' must be a string");
            else if (cJSON_IsTrue(raw) || !chat_fmt_has_template(a->fmt)) {
                cJSON_AddStringToObject(req, "prompt", p ? p->valuestring : "");
                *kind = API_COMPLETION;
            } else {
                cJSON *msgs = cJSON_AddArrayToObject(req, "messages"), *mm;
                if (cJSON_IsString(sys) && *sys->valuestring) {
                    mm = cJSON_CreateObject();
                    cJSON_AddStringToObject(mm, "role", "system");
                    cJSON_AddStringToObject(mm, "content", sys->valuestring);
                    json_push(msgs, mm);
                }
                mm = cJSON_CreateObject();
                cJSON_AddStringToObject(mm, "role", "user");
                cJSON_AddStringToObject(mm, "content", p ? p->valuestring : "");
                json_push(msgs, mm);
                *kind = API_CHAT;
            }
        }
    }
    char *out = NULL;
    if (!rc) out = api_print(req), req = NULL;   /* api_print deletes it */
    if (!rc && !out) herr(&err, "out of memory");
    if (!out) snprintf(msg, cap, "%s", err.msg);
    cJSON_Delete(o);
    cJSON_Delete(req);
    return out;
}

/* ---- answers ---- */
static char *print_line(cJSON *o) {   /* one NDJSON line */
    char *j = api_print(o);
    if (!j) return NULL;
    size_t n = strlen(j);
    char *s = realloc(j, n + 2);
    if (!s) { free(j); return NULL; }
    s[n] = '\n';
    s[n + 1] = 0;
    return s;
}

static void add_time(cJSON *o) {
    char buf[40];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t k = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + k, sizeof buf - k, ".%09ldZ", ts.tv_nsec);
    cJSON_AddStringToObject(o, "created_at", buf);
}

/* Ollama lists models as name:tag. */
static void model_name(const srv_api *a, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s", a->model_id, strchr(a->model_id, ':') ? "" : ":latest");
}

static cJSON *head(const srv_api *a) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    char name[192];
    model_name(a, name, sizeof name);
    cJSON_AddStringToObject(o, "model", name);
    add_time(o);
    return o;
}

/* The text of a generate / chat answer (invalid UTF-8 replaced) under "response" or message.content, and its
 * reasoning (if any) under "thinking" beside it. */
static void add_answer(cJSON *o, const api_req *r, const char *text, size_t n, const char *thinking, size_t n_thinking) {
    cJSON *at = o;
    if (r->kind == API_CHAT && !r->ollama_generate) {
        at = cJSON_AddObjectToObject(o, "message");
        cJSON_AddStringToObject(at, "role", "assistant");
        api_add_text(at, "content", text ? text : "", n);
    } else api_add_text(o, "response", text ? text : "", n);
    if (n_thinking) api_add_text(at, "thinking", thinking, n_thinking);
}

/* done: the closing fields, durations in nanoseconds as Ollama gives them. */
static void add_done(cJSON *o, const srv_task *t) {
    double first = t->t_first > 0 ? t->t_first : t->t_done;
    cJSON_AddBoolToObject(o, "done", true);
    cJSON_AddStringToObject(o, "done_reason", t->finish ? t->finish : "stop");
    cJSON_AddNumberToObject(o, "total_duration", round((t->t_done - t->t_submit) * 1e6));
    cJSON_AddNumberToObject(o, "load_duration", 0);
    cJSON_AddNumberToObject(o, "prompt_eval_count", t->n_prompt - t->n_cached);
    cJSON_AddNumberToObject(o, "prompt_eval_duration", round((first - t->t_submit) * 1e6));
    cJSON_AddNumberToObject(o, "eval_count", t->n_gen);
    cJSON_AddNumberToObject(o, "eval_duration", round((t->t_done - first) * 1e6));
}

char *ollama_chunk(const srv_api *a, const api_req *r, const char *text, size_t n, const char *thinking, size_t n_thinking,
                   const srv_task *done) {
    cJSON *o = head(a);
    if (!o) return NULL;
    add_answer(o, r, done ? "" : text, done ? 0 : n, thinking, done ? 0 : n_thinking);
    if (done) add_done(o, done);
    else cJSON_AddBoolToObject(o, "done", false);
    return print_line(o);
}

char *ollama_error_line(const char *msg) {
    cJSON *o = cJSON_CreateObject();
    if (o) cJSON_AddStringToObject(o, "error", msg);
    return print_line(o);
}

char *ollama_response(const srv_api *a, const api_req *r, const srv_task *t) {
    cJSON *o = head(a);
    if (!o) return NULL;
    if (r->kind == API_EMBED) {
        cJSON *e = cJSON_AddArrayToObject(o, "embeddings");
        int total = 0;
        for (int i = 0; e && i < t->n_inputs; i++) {
            json_push(e, cJSON_CreateFloatArray(t->emb + (size_t)i * t->dim, t->dim));
            total += t->n_in[i];
        }
        cJSON_AddNumberToObject(o, "total_duration", round((t->t_done - t->t_submit) * 1e6));
        cJSON_AddNumberToObject(o, "prompt_eval_count", total);
    } else {
        api_reply rp;   /* a completion's (raw) is its text, unsplit */
        if (api_reply_split(r, t, &rp)) add_answer(o, r, rp.content, rp.n_content, rp.rp.reasoning.p, rp.rp.reasoning.n);
        api_reply_free(&rp);
        add_done(o, t);
    }
    return api_print(o);
}

char *ollama_error_body(const char *msg) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "error", msg);
    return api_print(o);
}

/* ---- the model's description ---- */
static void size_label(char *buf, size_t cap, double n) {
    if (n >= 1e9) snprintf(buf, cap, "%.1fB", n / 1e9);
    else if (n >= 1e6) snprintf(buf, cap, "%.1fM", n / 1e6);
    else snprintf(buf, cap, "%.0fK", n / 1e3);
}

/* The most common matrix type ("Q4_0"), as Ollama's quantization_level names it. */
static const char *quant_level(const hearth_model *m) {
    int count[HT_NTYPES] = { 0 }, best = HT_F32;
    for (int i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].n_dims >= 2 && m->tensors[i].type < HT_NTYPES) count[m->tensors[i].type]++;
    for (int t = 0; t < HT_NTYPES; t++) if (count[t] > count[best]) best = t;
    return ht_get_traits((uint32_t)best)->name;
}

static cJSON *details(const srv_api *a) {
    hearth_model_info in;
    hearth_model_get_info(a->m, &in);
    char ps[32];
    size_label(ps, sizeof ps, (double)in.n_params);
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "parent_model", "");
    cJSON_AddStringToObject(d, "format", "gguf");
    cJSON_AddStringToObject(d, "family", in.arch);
    json_put(d, "families", cJSON_CreateStringArray(&in.arch, 1));
    cJSON_AddStringToObject(d, "parameter_size", ps);
    cJSON_AddStringToObject(d, "quantization_level", quant_level(a->m));
    return d;
}

/* An identifier for the model (not a content hash: that would read the whole file): FNV-1a over its name and sizes. */
static void digest(const srv_api *a, char *buf) {
    hearth_model_info in;
    hearth_model_get_info(a->m, &in);
    uint64_t h = 1469598103934665603ull;
    char seed[256];
    snprintf(seed, sizeof seed, "%s|%llu|%llu", a->model_id, (unsigned long long)in.file_bytes, (unsigned long long)in.n_params);
    for (int round = 0; round < 4; round++) {
        for (const char *p = seed; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
        snprintf(buf + 16 * round, 17, "%016llx", (unsigned long long)h);
    }
}

static cJSON *model_entry(const srv_api *a, bool running) {
    hearth_model_info in;
    hearth_model_get_info(a->m, &in);
    char name[192], dg[65];
    model_name(a, name, sizeof name);
    digest(a, dg);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "name", name);
    cJSON_AddStringToObject(m, "model", name);
    if (!running) add_time(m), json_put(m, "modified_at", cJSON_DetachItemFromObject(m, "created_at"));
    cJSON_AddNumberToObject(m, "size", (double)in.file_bytes);
    cJSON_AddStringToObject(m, "digest", dg);
    json_put(m, "details", details(a));
    if (running) {
        cJSON_AddStringToObject(m, "expires_at", "2318-01-01T00:00:00Z");   /* held until the server stops */
        cJSON_AddNumberToObject(m, "size_vram", 0);
    }
    return m;
}

char *ollama_models(const srv_api *a, bool running) {
    cJSON *o = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(o, "models");
    json_push(list, model_entry(a, running));
    return api_print(o);
}

char *ollama_show(const srv_api *a) {
    hearth_model_info in;
    hearth_model_get_info(a->m, &in);
    cJSON *o = cJSON_CreateObject(), *mi;
    int tl = hearth_model_meta_str(a->m, "tokenizer.chat_template", NULL, 0);
    char *tmpl = tl >= 0 ? malloc((size_t)tl + 1) : NULL;
    if (tmpl) hearth_model_meta_str(a->m, "tokenizer.chat_template", tmpl, (size_t)tl + 1);
    cJSON_AddStringToObject(o, "license", "");
    cJSON_AddStringToObject(o, "modelfile", "");
    cJSON_AddStringToObject(o, "parameters", "");
    cJSON_AddStringToObject(o, "template", tmpl ? tmpl : "");
    free(tmpl);
    json_put(o, "details", details(a));
    mi = cJSON_AddObjectToObject(o, "model_info");
    char key[96];
    cJSON_AddStringToObject(mi, "general.architecture", in.arch);
    cJSON_AddNumberToObject(mi, "general.parameter_count", (double)in.n_params);
    const struct { const char *k; int v; } F[] = { { "context_length", in.n_ctx_train }, { "embedding_length", in.n_embd },
                                                   { "block_count", in.n_layer }, { "attention.head_count", in.n_head },
                                                   { "attention.head_count_kv", in.n_head_kv }, { "feed_forward_length", in.n_ff },
                                                   { "expert_count", in.n_expert }, { "expert_used_count", in.n_expert_used } };
    for (size_t i = 0; i < sizeof F / sizeof F[0]; i++)
        if (F[i].v > 0) snprintf(key, sizeof key, "%s.%s", in.arch, F[i].k), cJSON_AddNumberToObject(mi, key, F[i].v);
    cJSON *caps = cJSON_AddArrayToObject(o, "capabilities");
    json_push(caps, cJSON_CreateString(in.is_encoder ? "embedding" : "completion"));
    return api_print(o);
}

char *ollama_version(void) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "version", HEARTH_VERSION);
    return api_print(o);
}
