/* srv_tools.c — tool calling: the request's tools and tool_choice become a grammar the reply must follow, in
 * the call format the model's chat template was trained on, and the finished reply is split back into text
 * and calls.
 *
 * Formats: Hermes / Qwen (`<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, when the template
 * mentions <tool_call>), Llama 3.x JSON (`{"name": ..., "parameters": {...}}`, when it mentions ipython), and a
 * generic one for every other model: a system message lists the tools and the reply is one JSON object,
 * {"tool_calls": [{"name", "arguments"}...]} or {"response": "text"}. Each call's JSON is the tool's own
 * parameters schema through the JSON Schema converter, so arguments always parse and validate. With "required"
 * or a named function the reply is only calls; with "auto" (Hermes) it is free text that cannot contain the
 * opening tag, then calls — text until the model opens a call, then the call is constrained. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"
#include "generate/grammar.h"
#include "server/srv_internal.h"

/* A GBNF literal for s. */
static void tb_lit(ht_str *b, const char *s) {
    ht_str_puts(b, "\"");
    for (; *s; s++) {
        char e[8];
        if (*s == '"' || *s == '\\') snprintf(e, sizeof e, "\\%c", *s);
        else if (*s == '\n') snprintf(e, sizeof e, "\\n");
        else snprintf(e, sizeof e, "%c", *s);
        ht_str_puts(b, e);
    }
    ht_str_puts(b, "\"");
}

static const char *const HERMES_OPEN = "<tool_call>", *const HERMES_CLOSE = "</tool_call>";

/* Rules tc-f0 .. tc-f(L-1): any text that does not contain `trigger` (ASCII), as the states of its KMP
 * automaton; tc-f0 is the start. */
static void free_text_rules(ht_str *b, const char *trig) {
    int L = (int)strlen(trig), fail[64] = { 0 };
    for (int i = 1, k = 0; i < L; i++) {
        while (k && trig[i] != trig[k]) k = fail[k - 1];
        if (trig[i] == trig[k]) k++;
        fail[i] = k;
    }
    for (int i = 0; i < L; i++) {
        char line[1024];
        snprintf(line, sizeof line, "tc-f%d ::= (", i);
        ht_str_puts(b, line);
        /* chars leading out of state 0-land: trig[i] advances; chars matching a border go to that state */
        int target[128];
        for (int c = 1; c < 128; c++) {
            int k = i;
            while (k && trig[k] != c) k = fail[k - 1];
            target[c] = trig[k] == c ? k + 1 : 0;
        }
        bool first = true;
        ht_str_puts(b, "[^");   /* to state 0: everything else (all non-ASCII too) */
        for (int c = 1; c < 128; c++)
            if (target[c] != 0) {
                char e[8];
                snprintf(e, sizeof e, "\\x%02X", c);
                ht_str_puts(b, e);
            }
        ht_str_puts(b, "\\x00] tc-f0");
        first = false;
        for (int c = 1; c < 128; c++) {
            if (target[c] == 0 || target[c] == L) continue;
            snprintf(line, sizeof line, "%s\"\\x%02X\" tc-f%d", first ? "" : " | ", c, target[c]);
            ht_str_puts(b, line);
        }
        ht_str_puts(b, ")?\n");
    }
}

/* The JSON Schema of one call to tool fn (an OpenAI "function" object), with the arguments under akey. */
static cJSON *call_schema(const cJSON *fn, const char *akey) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name"), *par = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "type", "object");
    cJSON *props = cJSON_AddObjectToObject(s, "properties"), *n = cJSON_AddObjectToObject(props, "name");
    cJSON_AddStringToObject(n, "const", name->valuestring);
    if (par && cJSON_IsObject(par) && par->child) json_put(props, akey, cJSON_Duplicate(par, true));
    else {
        cJSON *o = cJSON_AddObjectToObject(props, akey);
        cJSON_AddStringToObject(o, "type", "object");
        json_put(o, "additionalProperties", cJSON_CreateFalse());
    }
    cJSON *req = cJSON_AddArrayToObject(s, "required");
    json_push(req, cJSON_CreateString("name"));
    json_push(req, cJSON_CreateString(akey));
    json_put(s, "additionalProperties", cJSON_CreateFalse());
    return s;
}

int tools_prepare(const srv_api *a, const cJSON *o, cJSON *messages, srv_tools *tt, char **gbnf, hearth_err *err) {
    memset(tt, 0, sizeof *tt);
    *gbnf = NULL;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(o, "tools"), *choice = cJSON_GetObjectItemCaseSensitive(o, "tool_choice"),
                *par = cJSON_GetObjectItemCaseSensitive(o, "parallel_tool_calls");
    if (!tools || cJSON_IsNull(tools) || (cJSON_IsArray(tools) && !cJSON_GetArraySize(tools))) {
        if (choice && !cJSON_IsNull(choice) && !(cJSON_IsString(choice) && !strcmp(choice->valuestring, "none")))
            return herr(err, "'tool_choice' needs 'tools'");
        return 0;
    }
    if (!cJSON_IsArray(tools)) return herr(err, "'tools' must be an array");
    if (par && !cJSON_IsBool(par)) return herr(err, "'parallel_tool_calls' must be a boolean");
    tt->parallel = !par || cJSON_IsTrue(par);
    const char *named = NULL;
    tt->mode = TOOLS_AUTO;
    if (cJSON_IsString(choice)) {
        if (!strcmp(choice->valuestring, "none")) tt->mode = TOOLS_OFF;
        else if (!strcmp(choice->valuestring, "required")) tt->mode = TOOLS_REQUIRED;
        else if (strcmp(choice->valuestring, "auto")) return herr(err, "'tool_choice' must be none, auto, required or a function");
    } else if (cJSON_IsObject(choice)) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(choice, "function"), *n = f ? cJSON_GetObjectItemCaseSensitive(f, "name") : NULL;
        if (!cJSON_IsString(n)) return herr(err, "'tool_choice' must name a function: {\"type\":\"function\",\"function\":{\"name\":...}}");
        named = n->valuestring;
        tt->mode = TOOLS_REQUIRED;
    } else if (choice && !cJSON_IsNull(choice)) return herr(err, "'tool_choice' must be a string or an object");
    /* check the tools; the chosen ones become the calls' alternatives */
    cJSON *alts = cJSON_CreateArray(), *listing = cJSON_CreateArray();
    const cJSON *t;
    int i = 0, n_named = 0;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "function") : NULL,
                    *nm = fn ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL,
                    *ps = fn ? cJSON_GetObjectItemCaseSensitive(fn, "parameters") : NULL;
        if (!cJSON_IsString(nm) || !*nm->valuestring) { cJSON_Delete(alts); cJSON_Delete(listing); return herr(err, "tools[%d] must be {\"type\":\"function\",\"function\":{\"name\":...}}", i); }
        if (ps && !cJSON_IsObject(ps) && !cJSON_IsNull(ps)) { cJSON_Delete(alts); cJSON_Delete(listing); return herr(err, "tools[%d].function.parameters must be a JSON Schema object", i); }
        json_push(listing, cJSON_Duplicate(fn, true));
        if (!named || !strcmp(named, nm->valuestring)) json_push(alts, call_schema(fn, "@ARGS@")), n_named++;
        i++;
    }
    if (named && !n_named) { cJSON_Delete(alts); cJSON_Delete(listing); return herr(err, "'tool_choice' names '%s', which is not in 'tools'", named); }
    if (tt->mode == TOOLS_OFF) { cJSON_Delete(alts); cJSON_Delete(listing); return 0; }
    const char *src = chat_fmt_source(a->fmt);
    tt->fmt = src && strstr(src, HERMES_OPEN) ? TF_HERMES : src && strstr(src, "ipython") ? TF_LLAMA3 : TF_GENERIC;
    if (tt->fmt == TF_LLAMA3) tt->parallel = false;   /* one call per reply in that format */
    const char *akey = tt->fmt == TF_LLAMA3 ? "parameters" : "arguments";
    cJSON *call = cJSON_CreateObject(), *x;
    bool oom = false;   /* besides what api_json_oom() notes: the text of the tools' listing */
    /* rename the arguments key now that the format is known */
    cJSON_ArrayForEach(x, alts) {
        cJSON *props = cJSON_GetObjectItemCaseSensitive(x, "properties"), *req = cJSON_GetObjectItemCaseSensitive(x, "required");
        cJSON *args = cJSON_DetachItemFromObjectCaseSensitive(props, "@ARGS@"), *key = cJSON_CreateString(akey);
        json_put(props, akey, args);
        if (!cJSON_ReplaceItemInArray(req, 1, key)) cJSON_Delete(key);   /* req lost an item: memory, already noted */
    }
    json_put(call, "anyOf", alts);
    cJSON *schema = call;
    if (tt->fmt == TF_GENERIC) {   /* {"tool_calls": [call...]} or, with auto, {"response": "..."} */
        cJSON *calls = cJSON_CreateObject();
        cJSON_AddStringToObject(calls, "type", "object");
        cJSON *cp = cJSON_AddObjectToObject(calls, "properties"), *arr = cJSON_AddObjectToObject(cp, "tool_calls");
        cJSON_AddStringToObject(arr, "type", "array");
        json_put(arr, "items", call);
        cJSON_AddNumberToObject(arr, "minItems", 1);
        if (!tt->parallel) cJSON_AddNumberToObject(arr, "maxItems", 1);
        cJSON *rq = cJSON_AddArrayToObject(calls, "required");
        json_push(rq, cJSON_CreateString("tool_calls"));
        json_put(calls, "additionalProperties", cJSON_CreateFalse());
        if (tt->mode == TOOLS_AUTO) {
            schema = cJSON_CreateObject();
            cJSON *any = cJSON_AddArrayToObject(schema, "anyOf"), *resp = cJSON_CreateObject();
            json_push(any, calls);
            cJSON_AddStringToObject(resp, "type", "object");
            cJSON *rp = cJSON_AddObjectToObject(resp, "properties"), *rs = cJSON_AddObjectToObject(rp, "response");
            cJSON_AddStringToObject(rs, "type", "string");
            cJSON *rr = cJSON_AddArrayToObject(resp, "required");
            json_push(rr, cJSON_CreateString("response"));
            json_put(resp, "additionalProperties", cJSON_CreateFalse());
            json_push(any, resp);
        } else schema = calls;
        /* the tools, described to a model whose template does not know them */
        char *list = cJSON_Print(listing);
        ht_str p = { 0 };
        oom = !list;
        ht_str_puts(&p, "You can call tools. They are, with their parameters as JSON Schema:\n");
        ht_str_puts(&p, list ? list : "[]");
        ht_str_puts(&p, tt->mode == TOOLS_AUTO
                       ? "\nReply with one JSON object: {\"tool_calls\": [{\"name\": \"<tool>\", \"arguments\": {...}}]} to "
                         "call tools, or {\"response\": \"<your answer>\"} to answer directly."
                       : "\nReply with one JSON object: {\"tool_calls\": [{\"name\": \"<tool>\", \"arguments\": {...}}]}.");
        free(list);
        cJSON *first = messages ? messages->child : NULL;
        const cJSON *role = first ? cJSON_GetObjectItemCaseSensitive(first, "role") : NULL;
        if (cJSON_IsString(role) && !strcmp(role->valuestring, "system")) {   /* the listing after its text */
            cJSON *c = cJSON_DetachItemFromObjectCaseSensitive(first, "content");
            ht_str q = { 0 };
            if (cJSON_IsString(c) && *c->valuestring) {
                ht_str_puts(&q, c->valuestring);
                ht_str_puts(&q, "\n\n");
            }
            ht_str_puts(&q, p.p ? p.p : "");
            cJSON_Delete(c);
            json_put(first, "content", q.oom ? NULL : cJSON_CreateString(q.p ? q.p : ""));
            oom |= q.oom;
            free(q.p);
        } else if (messages) {
            cJSON *sys = cJSON_CreateObject();
            cJSON_AddStringToObject(sys, "role", "system");
            cJSON_AddStringToObject(sys, "content", p.p ? p.p : "");
            if (!cJSON_InsertItemInArray(messages, 0, sys)) cJSON_Delete(sys), oom = true;
        }
        oom |= p.oom;
        free(p.p);
    }
    cJSON_Delete(listing);
    char *stxt = oom || api_json_oom() ? NULL : cJSON_PrintUnformatted(schema);
    cJSON_Delete(schema);
    if (!stxt) return herr(err, "out of memory");
    char *g = json_schema_gbnf(stxt, tt->fmt == TF_GENERIC ? "root" : "tc-call", NULL, err);
    free(stxt);
    if (!g) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return herr(err, "tools: %s", msg);
    }
    ht_str b = { 0 };
    if (tt->fmt == TF_HERMES) {
        ht_str_puts(&b, "tc-block ::= ");
        tb_lit(&b, "<tool_call>\n");
        ht_str_puts(&b, " tc-call ");
        tb_lit(&b, "\n</tool_call>");
        ht_str_puts(&b, tt->parallel ? "\ntc-blocks ::= tc-block (\"\\n\" tc-block)*\n" : "\ntc-blocks ::= tc-block\n");
        if (tt->mode == TOOLS_AUTO) {
            ht_str_puts(&b, "root ::= tc-f0 tc-blocks?\n");
            free_text_rules(&b, HERMES_OPEN);
        } else ht_str_puts(&b, "root ::= tc-blocks\n");
    } else if (tt->fmt == TF_LLAMA3) {
        ht_str_puts(&b, tt->mode == TOOLS_AUTO ? "root ::= tc-call | ([^{] .*)?\n" : "root ::= tc-call\n");
    }
    ht_str_puts(&b, g);
    free(g);
    if (b.oom) { free(b.p); return herr(err, "out of memory"); }
    *gbnf = b.p;
    return 0;
}

/* ---- the reply, split ---- */

/* One call {name, arguments} (from its JSON) as OpenAI's tool_calls entry, whole; NULL if it is not a call, or
 * (noted for api_print) if memory ran out. */
static cJSON *openai_call(const cJSON *c, const char *akey) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "name"), *args = cJSON_GetObjectItemCaseSensitive(c, akey);
    if (!cJSON_IsString(name)) return NULL;
    cJSON *o = cJSON_CreateObject(), *f;
    char id[40];
    api_random_id(id, "call_");
    char *a = args ? cJSON_PrintUnformatted(args) : strdup("{}");
    bool ok = a && cJSON_AddStringToObject(o, "id", id) && cJSON_AddStringToObject(o, "type", "function") &&
              (f = cJSON_AddObjectToObject(o, "function")) && cJSON_AddStringToObject(f, "name", name->valuestring) &&
              cJSON_AddStringToObject(f, "arguments", a);
    free(a);
    if (!ok) { cJSON_Delete(o); api_json_lost(); return NULL; }
    return o;
}

/* s[0..n) without surrounding white space; NULL if nothing is left (or, with *lost set, no memory). */
static char *trimmed(const char *s, size_t n, bool *lost) {
    while (n && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == '\t')) n--;
    char *t = n ? strndup(s, n) : NULL;
    *lost |= n && !t;
    return t;
}

cJSON *tools_parse(const srv_tools *tt, const char *text, size_t n, char **content) {
    *content = NULL;
    if (!text) text = "";
    cJSON *calls = cJSON_CreateArray();
    char *buf = strndup(text, n);
    if (!calls || !buf) { cJSON_Delete(calls); free(buf); api_json_lost(); return NULL; }
    bool lost = false;
    if (tt->fmt == TF_HERMES) {
        char *open = strstr(buf, HERMES_OPEN);
        *content = trimmed(buf, open ? (size_t)(open - buf) : n, &lost);
        while (open) {
            char *body = open + strlen(HERMES_OPEN), *close = strstr(body, HERMES_CLOSE);
            if (close) *close = 0;
            cJSON *j = cJSON_Parse(body), *c = j ? openai_call(j, "arguments") : NULL;
            if (c) json_push(calls, c);
            cJSON_Delete(j);
            open = close ? strstr(close + strlen(HERMES_CLOSE), HERMES_OPEN) : NULL;
        }
    } else {
        cJSON *j = cJSON_Parse(buf);
        if (tt->fmt == TF_LLAMA3) {
            cJSON *c = j && cJSON_IsObject(j) ? openai_call(j, "parameters") : NULL;
            if (c) json_push(calls, c);
            else *content = trimmed(buf, n, &lost);
        } else {
            const cJSON *tc = cJSON_GetObjectItemCaseSensitive(j, "tool_calls"), *r = cJSON_GetObjectItemCaseSensitive(j, "response"), *x;
            cJSON_ArrayForEach(x, tc) {
                cJSON *c = openai_call(x, "arguments");
                if (c) json_push(calls, c);
            }
            if (cJSON_IsString(r)) lost = !(*content = strdup(r->valuestring));
            else if (!cJSON_IsArray(tc)) *content = trimmed(buf, n, &lost);   /* cut short: the raw text */
        }
        cJSON_Delete(j);
    }
    free(buf);
    if (api_json_oom() || lost) {   /* a part is missing: none of it */
        cJSON_Delete(calls);
        free(*content);
        *content = NULL;
        api_json_lost();
        return NULL;
    }
    return calls;
}
