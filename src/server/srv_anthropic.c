/* srv_anthropic.c — Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) on the same engine:
 * a request is translated into the OpenAI-shaped chat request api_parse checks (system and content blocks onto
 * messages, tool_use / tool_result onto tool_calls / tool messages, tools' input_schema onto parameters,
 * tool_choice auto/any/tool/none onto auto/required/named/none, stop_sequences onto stop), and the answer is
 * written in Anthropic's shapes: a message with text and tool_use content blocks, stop_reason end_turn /
 * max_tokens / stop_sequence / tool_use, usage in input/output tokens; streamed as Anthropic's event sequence
 * (message_start, content_block_start/delta/stop, message_delta, message_stop); errors as
 * {"type":"error","error":{"type":...,"message":...}}. Features it does not have (images, documents, server
 * tools, extended thinking) are refused with a 400 naming them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "server/srv_internal.h"

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* A content value (string or blocks) as text; tool_use / tool_result blocks go to *uses / *results. */
static int blocks(const cJSON *content, const char *role, char **text, cJSON *uses, cJSON *results, hearth_err *err) {
    *text = NULL;
    if (cJSON_IsString(content)) return (*text = strdup(content->valuestring)) ? 0 : herr(err, "out of memory");
    if (!cJSON_IsArray(content)) return herr(err, "messages: content must be a string or an array of content blocks");
    size_t n = 0;
    char *acc = strdup("");
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        const cJSON *type = item(b, "type");
        if (!cJSON_IsString(type)) { free(acc); return herr(err, "messages: every content block needs a type"); }
        const char *t = type->valuestring;
        if (!strcmp(t, "text")) {
            const cJSON *x = item(b, "text");
            if (!cJSON_IsString(x)) { free(acc); return herr(err, "messages: a text block needs text"); }
            size_t k = strlen(x->valuestring);
            char *p = realloc(acc, n + k + 2);
            if (!p) { free(acc); return herr(err, "out of memory"); }
            acc = p;
            if (n) acc[n++] = '\n';
            memcpy(acc + n, x->valuestring, k + 1);
            n += k;
        } else if (!strcmp(t, "tool_use") && !strcmp(role, "assistant")) {
            const cJSON *id = item(b, "id"), *name = item(b, "name"), *input = item(b, "input");
            if (!cJSON_IsString(id) || !cJSON_IsString(name)) { free(acc); return herr(err, "messages: a tool_use block needs id and name"); }
            cJSON *c = cJSON_CreateObject(), *f;
            cJSON_AddStringToObject(c, "id", id->valuestring);
            cJSON_AddStringToObject(c, "type", "function");
            f = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(f, "name", name->valuestring);
            char *args = input ? cJSON_PrintUnformatted(input) : strdup("{}");
            cJSON_AddStringToObject(f, "arguments", args ? args : "{}");
            free(args);
            json_push(uses, c);
        } else if (!strcmp(t, "tool_result") && !strcmp(role, "user")) {
            const cJSON *id = item(b, "tool_use_id"), *rc = item(b, "content");
            if (!cJSON_IsString(id)) { free(acc); return herr(err, "messages: a tool_result block needs tool_use_id"); }
            char *rtext = NULL;
            if (rc && blocks(rc, "result", &rtext, NULL, NULL, err)) { free(acc); return -1; }
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "tool");
            cJSON_AddStringToObject(m, "tool_call_id", id->valuestring);
            cJSON_AddStringToObject(m, "content", rtext ? rtext : "");
            free(rtext);
            json_push(results, m);
        } else if (!strcmp(t, "thinking") || !strcmp(t, "redacted_thinking")) {
            /* earlier turns' reasoning: not shown to a model without it */
        } else {
            free(acc);
            return herr(err, "messages: '%s' content blocks are not supported by this server", t);
        }
    }
    *text = acc;
    return 0;
}

char *anthropic_translate(const srv_api *a, const char *body, size_t n, bool count_only, char *msg, size_t cap) {
    (void)a;
    hearth_err err = { "" };
    cJSON *o = api_parse_body(body, n, &err), *req = o ? cJSON_CreateObject() : NULL, *msgs = NULL;
    int rc = o ? 0 : -1;
    if (o && !req) rc = herr(&err, "out of memory");
    static const char *const NO[] = { "mcp_servers", "container" };
    for (size_t i = 0; !rc && i < sizeof NO / sizeof NO[0]; i++) {
        const cJSON *v = item(o, NO[i]);
        bool off = v && cJSON_IsObject(v) && cJSON_IsString(item(v, "type")) && !strcmp(item(v, "type")->valuestring, "disabled");
        if (v && !cJSON_IsNull(v) && !off) rc = herr(&err, "'%s' is not supported by this server", NO[i]);
    }
    const cJSON *th = o ? item(o, "thinking") : NULL, *tt = th ? item(th, "type") : NULL;   /* extended thinking */
    if (!rc && th && !cJSON_IsNull(th)) {
        if (!cJSON_IsObject(th) || !cJSON_IsString(tt) || (strcmp(tt->valuestring, "enabled") && strcmp(tt->valuestring, "disabled")))
            rc = herr(&err, "thinking: must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}");
        else {
            cJSON *kw = cJSON_AddObjectToObject(req, "chat_template_kwargs");
            if (!kw) rc = herr(&err, "out of memory");
            else cJSON_AddBoolToObject(kw, "enable_thinking", !strcmp(tt->valuestring, "enabled"));
        }
    }
    const cJSON *mt = o ? item(o, "max_tokens") : NULL;
    if (!rc && !count_only && !mt) rc = herr(&err, "max_tokens: field required");
    if (!rc && mt) {
        if (!cJSON_IsNumber(mt) || mt->valuedouble < 1 || mt->valuedouble > 1e9 || mt->valuedouble != (double)(long long)mt->valuedouble)
            rc = herr(&err, "max_tokens: must be a positive integer");
        else cJSON_AddNumberToObject(req, "max_tokens", mt->valuedouble);
    }
    if (!rc) msgs = cJSON_AddArrayToObject(req, "messages");
    const cJSON *sys = o ? item(o, "system") : NULL;
    if (!rc && sys && !cJSON_IsNull(sys)) {
        char *text = NULL;
        if (!blocks(sys, "system", &text, NULL, NULL, &err) && text && *text) {
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "system");
            cJSON_AddStringToObject(m, "content", text);
            json_push(msgs, m);
        } else if (err.msg[0]) rc = -1;
        free(text);
    }
    const cJSON *in = o ? item(o, "messages") : NULL, *m;
    if (!rc && !cJSON_IsArray(in)) rc = herr(&err, "messages: field required (an array)");
    if (!rc && !cJSON_GetArraySize(in)) rc = herr(&err, "messages: at least one message is required");
    int i = 0;
    if (!rc) cJSON_ArrayForEach(m, in) {
        const cJSON *role = item(m, "role");
        if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant"))) {
            rc = herr(&err, "messages[%d].role must be user or assistant", i);
            break;
        }
        cJSON *uses = cJSON_CreateArray(), *results = cJSON_CreateArray();
        char *text = NULL;
        if (blocks(item(m, "content"), role->valuestring, &text, uses, results, &err)) {
            cJSON_Delete(uses); cJSON_Delete(results);
            rc = -1;
            break;
        }
        cJSON *r, *next;
        for (r = results ? results->child : NULL; r; r = next) { next = r->next; json_push(msgs, cJSON_DetachItemViaPointer(results, r)); }
        if (cJSON_GetArraySize(uses) || (text && *text) || !cJSON_GetArraySize(results)) {
            cJSON *om = cJSON_CreateObject();
            cJSON_AddStringToObject(om, "role", role->valuestring);
            if (text && *text) cJSON_AddStringToObject(om, "content", text);
            else if (cJSON_GetArraySize(uses)) cJSON_AddNullToObject(om, "content");
            else cJSON_AddStringToObject(om, "content", "");
            if (cJSON_GetArraySize(uses)) json_put(om, "tool_calls", uses), uses = NULL;
            json_push(msgs, om);
        }
        cJSON_Delete(uses);
        cJSON_Delete(results);
        free(text);
        i++;
    }
    /* tools and tool_choice */
    const cJSON *tools = o ? item(o, "tools") : NULL, *t;
    if (!rc && tools && !cJSON_IsNull(tools)) {
        if (!cJSON_IsArray(tools)) rc = herr(&err, "tools: must be an array");
        cJSON *ot = rc ? NULL : cJSON_AddArrayToObject(req, "tools");
        i = 0;
        if (!rc) cJSON_ArrayForEach(t, tools) {
            const cJSON *name = item(t, "name"), *schema = item(t, "input_schema"), *type = item(t, "type");
            if (cJSON_IsString(type) && strcmp(type->valuestring, "custom")) {
                rc = herr(&err, "tools[%d]: server tool '%s' is not supported by this server", i, type->valuestring);
                break;
            }
            if (!cJSON_IsString(name) || !cJSON_IsObject(schema)) { rc = herr(&err, "tools[%d]: name and input_schema are required", i); break; }
            cJSON *w = cJSON_CreateObject(), *f;
            cJSON_AddStringToObject(w, "type", "function");
            f = cJSON_AddObjectToObject(w, "function");
            cJSON_AddStringToObject(f, "name", name->valuestring);
            if (cJSON_IsString(item(t, "description"))) cJSON_AddStringToObject(f, "description", item(t, "description")->valuestring);
            json_put(f, "parameters", cJSON_Duplicate(schema, true));
            json_push(ot, w);
            i++;
        }
    }
    const cJSON *tc = o ? item(o, "tool_choice") : NULL;
    if (!rc && tc && !cJSON_IsNull(tc)) {
        const cJSON *type = item(tc, "type");
        const char *ty = cJSON_IsString(type) ? type->valuestring : "";
        if (!strcmp(ty, "auto")) cJSON_AddStringToObject(req, "tool_choice", "auto");
        else if (!strcmp(ty, "any")) cJSON_AddStringToObject(req, "tool_choice", "required");
        else if (!strcmp(ty, "none")) cJSON_AddStringToObject(req, "tool_choice", "none");
        else if (!strcmp(ty, "tool") && cJSON_IsString(item(tc, "name"))) {
            cJSON *c = cJSON_AddObjectToObject(req, "tool_choice"), *f;
            cJSON_AddStringToObject(c, "type", "function");
            f = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(f, "name", item(tc, "name")->valuestring);
        } else rc = herr(&err, "tool_choice: type must be auto, any, tool (with a name) or none");
        if (!rc && cJSON_IsTrue(item(tc, "disable_parallel_tool_use"))) cJSON_AddFalseToObject(req, "parallel_tool_calls");
    }
    /* sampling and the rest */
    static const char *const SAME[] = { "temperature", "top_p", "top_k", "stream" };
    for (size_t k = 0; !rc && k < sizeof SAME / sizeof SAME[0]; k++)
        if (item(o, SAME[k])) json_put(req, SAME[k], cJSON_Duplicate(item(o, SAME[k]), true));
    const cJSON *ss = o ? item(o, "stop_sequences") : NULL;
    if (!rc && ss && !cJSON_IsNull(ss)) {
        if (!cJSON_IsArray(ss)) rc = herr(&err, "stop_sequences: must be an array of strings");
        else json_put(req, "stop", cJSON_Duplicate(ss, true));
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

/* stop_reason and stop_sequence of a finished task, given whether it made tool calls. */
static const char *stop_reason(const srv_task *t, bool calls, const char **seq) {
    *seq = NULL;
    if (calls) return "tool_use";
    if (t->finish && !strcmp(t->finish, "length")) return "max_tokens";
    if (t->stop_hit) { *seq = t->stop_hit; return "stop_sequence"; }
    return "end_turn";
}

/* The reply's content blocks: thinking (if any), text (if any), then one tool_use per call. */
static cJSON *content_blocks(const api_req *r, const srv_task *t, bool *has_calls) {
    cJSON *content = cJSON_CreateArray(), *c;
    api_reply rp;
    *has_calls = false;
    if (!api_reply_split(r, t, &rp)) { api_reply_free(&rp); return content; }
    const char *txt = rp.content;
    size_t n = rp.n_content;
    if (rp.rp.reasoning.n) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "thinking");
        api_add_text(b, "thinking", rp.rp.reasoning.p, rp.rp.reasoning.n);
        cJSON_AddStringToObject(b, "signature", "");   /* nothing to verify: the reasoning is the server's own */
        json_push(content, b);
    }
    if (n) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "text");
        api_add_text(b, "text", txt, n);
        json_push(content, b);
    }
    cJSON_ArrayForEach(c, rp.calls) {
        const cJSON *f = item(c, "function");
        cJSON *b = cJSON_CreateObject(), *input = cJSON_Parse(item(f, "arguments")->valuestring);
        char id[40];
        snprintf(id, sizeof id, "toolu_%s", item(c, "id")->valuestring + 5);
        cJSON_AddStringToObject(b, "type", "tool_use");
        cJSON_AddStringToObject(b, "id", id);
        cJSON_AddStringToObject(b, "name", item(f, "name")->valuestring);
        json_put(b, "input", input ? input : cJSON_CreateObject());
        json_push(content, b);
        *has_calls = true;
    }
    api_reply_free(&rp);
    return content;
}

static cJSON *message_head(const srv_api *a, const api_req *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "type", "message");
    cJSON_AddStringToObject(o, "role", "assistant");
    cJSON_AddStringToObject(o, "model", a->model_id);
    return o;
}

char *anthropic_response(const srv_api *a, const api_req *r, const srv_task *t) {
    cJSON *o = message_head(a, r);
    bool calls;
    json_put(o, "content", content_blocks(r, t, &calls));
    const char *seq, *why = stop_reason(t, calls, &seq);
    cJSON_AddStringToObject(o, "stop_reason", why);
    if (seq) cJSON_AddStringToObject(o, "stop_sequence", seq);
    else cJSON_AddNullToObject(o, "stop_sequence");
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "input_tokens", t->n_prompt);
    cJSON_AddNumberToObject(u, "output_tokens", t->n_gen);
    return api_print(o);
}

char *anthropic_count(const srv_task *t) {
    char buf[64];
    snprintf(buf, sizeof buf, "{\"input_tokens\":%d}", t->n_prompt);
    return strdup(buf);
}

char *anthropic_error_body(int status, const char *msg) {
    const char *type = status == 401 ? "authentication_error" : status == 403 ? "permission_error"
                     : status == 404 ? "not_found_error" : status == 413 ? "request_too_large"
                     : status == 503 ? "overloaded_error" : status >= 500 ? "api_error" : "invalid_request_error";
    cJSON *o = cJSON_CreateObject(), *e;
    cJSON_AddStringToObject(o, "type", "error");
    e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "type", type);
    char *clean = api_utf8_clean(msg, strlen(msg));
    cJSON_AddStringToObject(e, "message", clean ? clean : "");
    free(clean);
    return api_print(o);
}

/* "event: TYPE\ndata: JSON\n\n" (takes o). */
static char *event(const char *type, cJSON *o) {
    cJSON *w = cJSON_CreateObject();   /* "type" first, as Anthropic writes it */
    cJSON_AddStringToObject(w, "type", type);
    while (o && o->child) {
        cJSON *x = cJSON_DetachItemViaPointer(o, o->child);
        json_put(w, x->string, x);
    }
    cJSON_Delete(o);
    char *j = api_print(w);
    if (!j) return NULL;
    size_t n = strlen(j) + strlen(type) + 32;
    char *s = malloc(n);
    if (s) snprintf(s, n, "event: %s\ndata: %s\n\n", type, j);
    free(j);
    return s;
}

char *anthropic_event_start(const srv_api *a, const api_req *r, const srv_task *t) {
    cJSON *o = cJSON_CreateObject(), *m = message_head(a, r), *u;
    cJSON_AddArrayToObject(m, "content");
    cJSON_AddNullToObject(m, "stop_reason");
    cJSON_AddNullToObject(m, "stop_sequence");
    u = cJSON_AddObjectToObject(m, "usage");
    cJSON_AddNumberToObject(u, "input_tokens", t->n_prompt);
    cJSON_AddNumberToObject(u, "output_tokens", 0);
    json_put(o, "message", m);
    return event("message_start", o);
}

char *anthropic_event_text_start(int index) {
    cJSON *o = cJSON_CreateObject(), *b;
    cJSON_AddNumberToObject(o, "index", index);
    b = cJSON_AddObjectToObject(o, "content_block");
    cJSON_AddStringToObject(b, "type", "text");
    cJSON_AddStringToObject(b, "text", "");
    return event("content_block_start", o);
}

char *anthropic_event_thinking_start(int index) {
    cJSON *o = cJSON_CreateObject(), *b;
    cJSON_AddNumberToObject(o, "index", index);
    b = cJSON_AddObjectToObject(o, "content_block");
    cJSON_AddStringToObject(b, "type", "thinking");
    cJSON_AddStringToObject(b, "thinking", "");
    cJSON_AddStringToObject(b, "signature", "");
    return event("content_block_start", o);
}

char *anthropic_event_thinking(int index, const char *text, size_t n) {
    cJSON *o = cJSON_CreateObject(), *d;
    cJSON_AddNumberToObject(o, "index", index);
    d = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(d, "type", "thinking_delta");
    if (!api_add_text(d, "thinking", text, n)) api_json_lost();
    return event("content_block_delta", o);
}

char *anthropic_event_text(int index, const char *text, size_t n) {
    cJSON *o = cJSON_CreateObject(), *d;
    cJSON_AddNumberToObject(o, "index", index);
    d = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(d, "type", "text_delta");
    char *clean = api_utf8_clean(text, n);
    if (clean) cJSON_AddStringToObject(d, "text", clean);
    else api_json_lost();   /* the event is not made: the stream ends with an error */
    free(clean);
    return event("content_block_delta", o);
}

char *anthropic_event_block_stop(int index) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", index);
    return event("content_block_stop", o);
}

/* The end of a stream: the streamed block closed, or (for a reply with tools) all its blocks (thinking, text,
 * tool_use with its input as one input_json_delta); then message_delta and message_stop. */
char *anthropic_event_end(const api_req *r, const srv_task *t, int open) {
    size_t cap = 4096, n = 0;
    char *out = malloc(cap);
    if (!out) return NULL;
    out[0] = 0;
    bool calls = false;
    int index = 0;
    cJSON *blocks_ = NULL;
    char *parts[256];
    int np = 0;
    if (open >= 0) parts[np++] = anthropic_event_block_stop(open);
    else {
        blocks_ = content_blocks(r, t, &calls);
        if (api_json_oom()) {   /* a block lost a part: the stream ends as lost (api_print clears the note) */
            free(api_print(blocks_));
            free(out);
            return NULL;
        }
        cJSON *b;
        cJSON_ArrayForEach(b, blocks_) {
            if (np + 3 > 250) break;
            const char *type = item(b, "type")->valuestring;
            cJSON *o = cJSON_CreateObject(), *cb;
            cJSON_AddNumberToObject(o, "index", index);
            if (!strcmp(type, "text")) {
                parts[np++] = anthropic_event_text_start(index);
                const char *s = item(b, "text")->valuestring;
                parts[np++] = anthropic_event_text(index, s, strlen(s));
                cJSON_Delete(o);
            } else if (!strcmp(type, "thinking")) {
                parts[np++] = anthropic_event_thinking_start(index);
                const char *s = item(b, "thinking")->valuestring;
                parts[np++] = anthropic_event_thinking(index, s, strlen(s));
                cJSON_Delete(o);
            } else {
                cb = cJSON_AddObjectToObject(o, "content_block");
                cJSON_AddStringToObject(cb, "type", "tool_use");
                cJSON_AddStringToObject(cb, "id", item(b, "id")->valuestring);
                cJSON_AddStringToObject(cb, "name", item(b, "name")->valuestring);
                cJSON_AddObjectToObject(cb, "input");
                parts[np++] = event("content_block_start", o);
                cJSON *d = cJSON_CreateObject(), *dd;
                cJSON_AddNumberToObject(d, "index", index);
                dd = cJSON_AddObjectToObject(d, "delta");
                cJSON_AddStringToObject(dd, "type", "input_json_delta");
                char *j = cJSON_PrintUnformatted(item(b, "input"));
                cJSON_AddStringToObject(dd, "partial_json", j ? j : "{}");
                free(j);
                parts[np++] = event("content_block_delta", d);
            }
            parts[np++] = anthropic_event_block_stop(index++);
        }
    }
    const char *seq, *why = stop_reason(t, calls, &seq);
    cJSON *md = cJSON_CreateObject(), *d = cJSON_AddObjectToObject(md, "delta"), *u;
    cJSON_AddStringToObject(d, "stop_reason", why);
    if (seq) cJSON_AddStringToObject(d, "stop_sequence", seq);
    else cJSON_AddNullToObject(d, "stop_sequence");
    u = cJSON_AddObjectToObject(md, "usage");
    cJSON_AddNumberToObject(u, "output_tokens", t->n_gen);
    parts[np++] = event("message_delta", md);
    parts[np++] = event("message_stop", cJSON_CreateObject());
    bool whole = true;   /* a part lost to memory loses the whole end: the stream then ends as lost, not short */
    for (int k = 0; k < np; k++) {
        size_t l = parts[k] ? strlen(parts[k]) : 0;
        if (!parts[k]) whole = false;
        else if (whole && n + l + 1 > cap) {
            while (n + l + 1 > cap) cap *= 2;
            char *p = realloc(out, cap);
            if (p) out = p;
            else whole = false;
        }
        if (whole) { memcpy(out + n, parts[k], l + 1); n += l; }
        free(parts[k]);
    }
    cJSON_Delete(blocks_);
    if (!whole) { free(out); return NULL; }
    return out;
}

char *anthropic_event_error(int status, const char *msg) {
    char *body = anthropic_error_body(status, msg);
    if (!body) return NULL;
    size_t n = strlen(body) + 32;
    char *s = malloc(n);
    if (s) snprintf(s, n, "event: error\ndata: %s\n\n", body);
    free(body);
    return s;
}
