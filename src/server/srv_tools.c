/* srv_tools.c — tool calling: the request's tools and tool_choice become a grammar the reply must follow, in
 * the call format the model's chat template was trained on, and the finished reply is split back into text
 * and calls.
 *
 * Formats: Hermes / Qwen (`<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, when the template
 * mentions <tool_call>), Llama 3.x JSON (`{"name": ..., "parameters": {...}}`, when it mentions ipython), and a
 * harmony (gpt-oss: `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}`, one call per
 * reply, after an optional analysis message), Qwen3.5 / Qwen3-Coder's XML (`<tool_call>\n<function=NAME>\n
 * <parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>`, a string value raw, others as JSON), Gemma 4's
 * (`<|tool_call>call:NAME{key:VALUE,...}<tool_call|>`: strings between <|"|> marks, keys bare and sorted, numbers and
 * booleans as JSON), and a generic one for every other model: a system message lists the tools and the reply is one JSON object,
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

/* Rules P0 .. P(L-1) (P the prefix): any text that does not contain `trigger` (ASCII), as the states of its KMP
 * automaton; P0 is the start. */
static void free_text_rules(ht_str *b, const char *pre, const char *trig) {
    int L = (int)strlen(trig), fail[64] = { 0 };
    for (int i = 1, k = 0; i < L; i++) {
        while (k && trig[i] != trig[k]) k = fail[k - 1];
        if (trig[i] == trig[k]) k++;
        fail[i] = k;
    }
    for (int i = 0; i < L; i++) {
        char line[1024];
        snprintf(line, sizeof line, "%s%d ::= (", pre, i);
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
        ht_str_printf(b, "\\x00] %s0", pre);
        first = false;
        for (int c = 1; c < 128; c++) {
            if (target[c] == 0 || target[c] == L) continue;
            snprintf(line, sizeof line, "%s\"\\x%02X\" %s%d", first ? "" : " | ", c, pre, target[c]);
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

/* The converter's error about a tool's schema, said as the tools' (-1). */
static int tools_err(hearth_err *err) {
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return herr(err, "tools: %s", msg);
}

/* Appends GBNF rules "name ::= body" lines to b, skipping a name already defined the same way (the JSON
 * primitives every converted schema brings); a name defined differently is an error. */
static int merge_rules(ht_str *b, const char *rules, hearth_err *err) {
    for (const char *l = rules; *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        const char *def = memchr(l, ':', n);
        bool dup = false;
        if (def && b->p) {
            size_t k = (size_t)(def - l);   /* "name " */
            for (const char *m = b->p; m && *m; m = strchr(m, '\n'), m = m ? m + 1 : NULL) {
                if (strncmp(m, l, k) || m[k] != ':') continue;
                const char *me = strchr(m, '\n');
                size_t mn = me ? (size_t)(me - m) : strlen(m);
                if (mn != n || memcmp(m, l, n)) return herr(err, "tools: two tools' schemas define '%.*s' differently", (int)k - 1, l);
                dup = true;
                break;
            }
        }
        if (!dup) { ht_str_add(b, l, n); ht_str_puts(b, "\n"); }
        l += n + (e != NULL);
    }
    return 0;
}

/* Harmony's reply: an optional analysis message, then the call (or, with "auto", a final message instead). */
static int harmony_grammar(const cJSON *tools, const char *named, tools_mode mode, char **gbnf, hearth_err *err) {
    ht_str b = { 0 }, alt = { 0 };
    const cJSON *t;
    int i = 0, rc = 0;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function"), *nm = cJSON_GetObjectItemCaseSensitive(fn, "name"),
                    *ps = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (named && strcmp(named, nm->valuestring)) { i++; continue; }
        char *stxt = cJSON_IsObject(ps) && ps->child ? cJSON_PrintUnformatted(ps) : strdup("{\"type\":\"object\",\"additionalProperties\":false}");
        char root[32];
        snprintf(root, sizeof root, "tc-a%d", i++);
        char *g = stxt ? json_schema_gbnf(stxt, root, NULL, err) : NULL;
        free(stxt);
        if (!g) {
            rc = tools_err(err);
            break;
        }
        ht_str_puts(&alt, alt.n ? " | " : "");
        tb_lit(&alt, nm->valuestring);
        ht_str_printf(&alt, " \" <|constrain|>json<|message|>\" %s", root);
        rc = merge_rules(&b, g, err);
        free(g);
        if (rc) break;
    }
    if (!rc) {
        ht_str_printf(&b, "tc-call ::= \"<|channel|>commentary to=functions.\" (%s)\n", alt.p ? alt.p : "\"\"");
        ht_str_puts(&b, "tc-analysis ::= \"<|channel|>analysis<|message|>\" tc-f0 \"<|end|><|start|>assistant\"\n");
        free_text_rules(&b, "tc-f", "<|end|>");
        ht_str_puts(&b, mode == TOOLS_AUTO ? "root ::= tc-analysis? (tc-call | \"<|channel|>final<|message|>\" .*)\n"
                                           : "root ::= tc-analysis? tc-call\n");
        if (b.oom || alt.oom) rc = herr(err, "out of memory");
    }
    free(alt.p);
    if (rc) { free(b.p); return rc; }
    *gbnf = b.p;
    return 0;
}

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* Keywords that only annotate a schema. */
static bool annotation(const char *k) {
    static const char *const A[] = { "description", "title", "default", "examples", "$comment", "deprecated", "readOnly" };
    for (size_t i = 0; i < sizeof A / sizeof *A; i++) if (!strcmp(k, A[i])) return true;
    return false;
}

/* A parameter the XML format writes raw: a plain string ('s'), or an enum of strings ('e'); 0 otherwise (JSON). */
static char xml_raw(const cJSON *s) {
    if (!cJSON_IsObject(s)) return 0;
    const cJSON *t = item(s, "type"), *en = item(s, "enum"), *k, *v;
    if (t && !(cJSON_IsString(t) && !strcmp(t->valuestring, "string"))) return 0;
    cJSON_ArrayForEach(k, s) if (strcmp(k->string, "type") && strcmp(k->string, "enum") && !annotation(k->string)) return 0;
    if (!en) return t ? 's' : 0;
    if (!cJSON_IsArray(en) || !cJSON_GetArraySize(en)) return 0;
    cJSON_ArrayForEach(v, en) if (!cJSON_IsString(v) || strstr(v->valuestring, "\n</parameter>")) return 0;
    return 'e';
}

/* The XML format's calls: per tool, its parameters in their declared order, optional ones optional. */
static int xml_grammar(const cJSON *tools, const char *named, tools_mode mode, bool parallel, char **gbnf, char **params,
                       hearth_err *err) {
    ht_str b = { 0 }, alt = { 0 }, rule = { 0 };   /* b: the rules; rule: the tool's own, written after its values' */
    cJSON *map = cJSON_CreateObject();
    const cJSON *t;
    int i = 0, rc = map ? 0 : herr(err, "out of memory");
    cJSON_ArrayForEach(t, tools) {
        if (rc) break;
        const cJSON *fn = item(t, "function"), *nm = item(fn, "name"), *ps = item(fn, "parameters"), *props = item(ps, "properties"),
                    *req = item(ps, "required"), *p, *q;
        if (named && strcmp(named, nm->valuestring)) continue;
        if (strpbrk(nm->valuestring, "<>\n")) { rc = herr(err, "tools: the name '%s' cannot be written in this model's call format", nm->valuestring); break; }
        json_put(map, nm->valuestring, ps ? cJSON_Duplicate(ps, true) : cJSON_CreateObject());
        cJSON_ArrayForEach(q, req)
            if (!cJSON_IsString(q) || !item(props, q->valuestring)) { rc = herr(err, "tools: '%s' requires a parameter with no schema in 'properties'", nm->valuestring); break; }
        rule.n = 0;
        ht_str_printf(&rule, "tc-x%d ::= ", i);
        tb_lit(&rule, "<function=");
        tb_lit(&rule, nm->valuestring);
        tb_lit(&rule, ">\n");
        int j = 0;
        cJSON_ArrayForEach(p, props) {
            if (rc) break;
            bool required = false;
            cJSON_ArrayForEach(q, req) required |= cJSON_IsString(q) && !strcmp(q->valuestring, p->string);
            if (strpbrk(p->string, "<>\n")) { rc = herr(err, "tools: the parameter '%s' cannot be written in this model's call format", p->string); break; }
            ht_str_puts(&rule, required ? " " : " (");
            char open[600];
            snprintf(open, sizeof open, "<parameter=%.500s>\n", p->string);
            tb_lit(&rule, open);
            char kind = xml_raw(p);
            if (kind == 's') ht_str_puts(&rule, " tc-r0 ");
            else if (kind == 'e') {
                const cJSON *v;
                ht_str_puts(&rule, " (");
                cJSON_ArrayForEach(v, item(p, "enum")) { if (v != item(p, "enum")->child) ht_str_puts(&rule, " | "); tb_lit(&rule, v->valuestring); }
                ht_str_puts(&rule, ") ");
            } else {   /* the value as JSON, by the converter */
                char root[48], *stxt = cJSON_PrintUnformatted(p), *g;
                snprintf(root, sizeof root, "tc-x%d-%d", i, j);
                g = stxt ? json_schema_gbnf(stxt, root, NULL, err) : NULL;
                free(stxt);
                if (!g) {
                    rc = tools_err(err);
                    break;
                }
                rc = merge_rules(&b, g, err);
                free(g);
                ht_str_printf(&rule, " %s ", root);
            }
            tb_lit(&rule, "\n</parameter>\n");
            ht_str_puts(&rule, required ? "" : ")?");
            j++;
        }
        tb_lit(&rule, "</function>");
        ht_str_puts(&rule, "\n");
        if (rule.p) ht_str_add(&b, rule.p, rule.n);
        b.oom |= rule.oom;
        ht_str_printf(&alt, "%stc-x%d", alt.n ? " | " : "", i);
        i++;
    }
    if (!rc) {
        ht_str_puts(&b, "tc-block ::= ");
        tb_lit(&b, "<tool_call>\n");
        ht_str_printf(&b, " (%s) ", alt.p ? alt.p : "\"\"");
        tb_lit(&b, "\n</tool_call>");
        ht_str_puts(&b, parallel ? "\ntc-blocks ::= tc-block (\"\\n\" tc-block)*\n" : "\ntc-blocks ::= tc-block\n");
        free_text_rules(&b, "tc-r", "\n</parameter>");
        if (mode == TOOLS_AUTO) {
            ht_str_puts(&b, "root ::= tc-f0 tc-blocks?\n");
            free_text_rules(&b, "tc-f", HERMES_OPEN);
        } else ht_str_puts(&b, "root ::= tc-blocks\n");
        if (b.oom || alt.oom || !(*params = cJSON_PrintUnformatted(map))) rc = herr(err, "out of memory");
    }
    cJSON_Delete(map);
    free(alt.p);
    free(rule.p);
    if (rc) { free(b.p); return rc; }
    *gbnf = b.p;
    return 0;
}

/* ---- Gemma 4's call syntax ---- */
#define G4_Q "<|\"|>"               /* its string quote */
#define G4_QLIT "\"<|\\\"|>\""        /* ... as a GBNF literal */

static int g4_value(ht_str *b, const cJSON *s, const char *name, const char *where, hearth_err *err);

/* A value's rule from the JSON Schema converter (numbers, integers, booleans: the same text in both syntaxes). */
static int g4_json(ht_str *b, const cJSON *s, const char *name, hearth_err *err) {
    char *stxt = cJSON_PrintUnformatted(s), *g = stxt ? json_schema_gbnf(stxt, name, NULL, err) : NULL;
    free(stxt);
    if (!g) return -1;
    int rc = merge_rules(b, g, err);
    free(g);
    return rc;
}

/* An object's members, keys sorted as the template writes them: A_i (members i.. with at least the required,
 * the first without a comma) and B_i (members i.., each after a comma). */
static int g4_object(ht_str *b, const cJSON *s, const char *name, const char *where, hearth_err *err) {
    const cJSON *props = item(s, "properties"), *req = item(s, "required"), *p, *q;
    int n = cJSON_GetArraySize(props), rc = 0;
    if (n > 256) return herr(err, "tools: '%s' has too many properties for Gemma 4's call format", where);
    const cJSON *sorted[256];
    int k = 0;
    cJSON_ArrayForEach(p, props) {   /* insertion sort by key (dictsort) */
        int at = k++;
        while (at && strcmp(sorted[at - 1]->string, p->string) > 0) sorted[at] = sorted[at - 1], at--;
        sorted[at] = p;
    }
    cJSON_ArrayForEach(q, req) if (!cJSON_IsString(q) || !item(props, q->valuestring))
        return herr(err, "tools: '%s' requires a property with no schema in 'properties'", where);
    for (int i = 0; i < n && !rc; i++) {
        char vn[160], path[300];
        snprintf(vn, sizeof vn, "%.100s-%d", name, i);
        snprintf(path, sizeof path, "%.200s.%.90s", where, sorted[i]->string);
        if (strpbrk(sorted[i]->string, ":,{}[]<> \n")) return herr(err, "tools: the key '%s' cannot be written in Gemma 4's call format", path);
        rc = g4_value(b, sorted[i], vn, path, err);
    }
    ht_str_printf(b, "%s-a%d ::= \"\"\n%s-b%d ::= \"\"\n", name, n, name, n);
    for (int i = n - 1; i >= 0 && !rc; i--) {
        bool required = false;
        cJSON_ArrayForEach(q, req) required |= !strcmp(q->valuestring, sorted[i]->string);
        char m[400];   /* member i: its key, then its value */
        snprintf(m, sizeof m, "\"%s:\" %s-%d", sorted[i]->string, name, i);
        if (required) {
            ht_str_printf(b, "%s-b%d ::= \",\" %s %s-b%d\n", name, i, m, name, i + 1);
            ht_str_printf(b, "%s-a%d ::= %s %s-b%d\n", name, i, m, name, i + 1);
        } else {
            ht_str_printf(b, "%s-b%d ::= (\",\" %s)? %s-b%d\n", name, i, m, name, i + 1);
            ht_str_printf(b, "%s-a%d ::= %s %s-b%d | %s-a%d\n", name, i, m, name, i + 1, name, i + 1);
        }
    }
    ht_str_printf(b, "%s ::= \"{\" %s-a0 \"}\"\n", name, name);
    return rc;
}

static int g4_value(ht_str *b, const cJSON *s, const char *name, const char *where, hearth_err *err) {
    if (!cJSON_IsObject(s)) return herr(err, "tools: '%s' must be a schema object", where);
    const cJSON *t = item(s, "type"), *en = item(s, "enum"), *k, *v;
    const char *type = cJSON_IsString(t) ? t->valuestring : NULL;
    static const char *const OK[] = { "type", "enum", "properties", "required", "items", "additionalProperties",
                                      "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minItems" };
    cJSON_ArrayForEach(k, s) {
        bool known = annotation(k->string);
        for (size_t i = 0; !known && i < sizeof OK / sizeof *OK; i++) known = !strcmp(k->string, OK[i]);
        if (!known) return herr(err, "tools: '%s' at '%s' cannot be enforced in Gemma 4's call format", k->string, where);
    }
    if (en) {   /* strings between quote marks, the rest as JSON */
        if (!cJSON_IsArray(en) || !cJSON_GetArraySize(en)) return herr(err, "tools: '%s': enum must be a non-empty array", where);
        ht_str_printf(b, "%s ::= ", name);
        cJSON_ArrayForEach(v, en) {
            if (v != en->child) ht_str_puts(b, " | ");
            if (cJSON_IsString(v)) { ht_str_puts(b, G4_QLIT " "); tb_lit(b, v->valuestring); ht_str_puts(b, " " G4_QLIT); }
            else {
                char *j = cJSON_PrintUnformatted(v);
                if (j) tb_lit(b, j);
                free(j);
            }
        }
        ht_str_puts(b, "\n");
        return 0;
    }
    if (!type) return herr(err, "tools: '%s' needs a 'type' for Gemma 4's call format", where);
    if (!strcmp(type, "string")) { ht_str_printf(b, "%s ::= " G4_QLIT " tc-q0 " G4_QLIT "\n", name); return 0; }
    if (!strcmp(type, "integer") || !strcmp(type, "number") || !strcmp(type, "boolean")) return g4_json(b, s, name, err);
    if (!strcmp(type, "array")) {
        const cJSON *it = item(s, "items"), *mi = item(s, "minItems");
        char in[160], path[300];
        snprintf(in, sizeof in, "%.100s-item", name);
        snprintf(path, sizeof path, "%.200s[]", where);
        if (!it) return herr(err, "tools: '%s' needs 'items' for Gemma 4's call format", where);
        if (g4_value(b, it, in, path, err)) return -1;
        const bool nonempty = cJSON_IsNumber(mi) && mi->valuedouble >= 1;
        ht_str_printf(b, "%s ::= \"[\" %s%s (\",\" %s)*%s \"]\"\n", name, nonempty ? "" : "(", in, in, nonempty ? "" : ")?");
        return 0;
    }
    if (!strcmp(type, "object")) return g4_object(b, s, name, where, err);
    return herr(err, "tools: '%s' has type '%s', which Gemma 4's call format cannot carry", where, type);
}

static int g4_grammar(const cJSON *tools, const char *named, tools_mode mode, bool parallel, char **gbnf, hearth_err *err) {
    ht_str b = { 0 }, alt = { 0 };
    const cJSON *t;
    int i = 0, rc = 0;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = item(t, "function"), *nm = item(fn, "name"), *ps = item(fn, "parameters");
        if (named && strcmp(named, nm->valuestring)) continue;
        if (strpbrk(nm->valuestring, "{}<> \n")) { rc = herr(err, "tools: the name '%s' cannot be written in Gemma 4's call format", nm->valuestring); break; }
        char root[32];
        snprintf(root, sizeof root, "tc-g%d", i++);
        if (cJSON_IsObject(ps) && ps->child) rc = g4_object(&b, ps, root, nm->valuestring, err);
        else ht_str_printf(&b, "%s ::= \"{}\"\n", root);
        if (rc) break;
        ht_str_puts(&alt, alt.n ? " | " : "");
        char lit[200];
        snprintf(lit, sizeof lit, "call:%.150s", nm->valuestring);
        tb_lit(&alt, lit);
        ht_str_printf(&alt, " %s", root);
    }
    if (!rc) {
        ht_str_printf(&b, "tc-block ::= \"<|tool_call>\" (%s) \"<tool_call|>\"\n", alt.p ? alt.p : "\"\"");
        ht_str_puts(&b, parallel ? "tc-blocks ::= tc-block+\n" : "tc-blocks ::= tc-block\n");
        free_text_rules(&b, "tc-q", G4_Q);
        if (mode == TOOLS_AUTO) {
            ht_str_puts(&b, "root ::= tc-f0 tc-blocks?\n");
            free_text_rules(&b, "tc-f", "<|tool_call>");
        } else ht_str_puts(&b, "root ::= tc-blocks\n");
        if (b.oom || alt.oom) rc = herr(err, "out of memory");
    }
    free(alt.p);
    if (rc) { free(b.p); return rc; }
    *gbnf = b.p;
    return 0;
}

char *tools_after_reasoning(const char *gbnf, const char *close) {
    ht_str b = { 0 };
    for (const char *l = gbnf; *l;) {   /* the old root becomes tc-main */
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) + 1 : strlen(l);
        if (!strncmp(l, "root ::=", 8)) ht_str_puts(&b, "tc-main ::="), ht_str_add(&b, l + 8, n - 8);
        else ht_str_add(&b, l, n);
        if (n && l[n - 1] != '\n') ht_str_puts(&b, "\n");
        l += n;
    }
    ht_str_puts(&b, "root ::= tc-think0 ");
    tb_lit(&b, close);
    ht_str_puts(&b, " [ \\t\\n]* tc-main\n");
    free_text_rules(&b, "tc-think", close);
    if (b.oom) { free(b.p); return NULL; }
    return b.p;
}

int tools_prepare(const srv_api *a, const cJSON *o, cJSON *messages, srv_tools *tt, char **gbnf, char **params, hearth_err *err) {
    memset(tt, 0, sizeof *tt);
    *gbnf = NULL;
    *params = NULL;
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
    if (src && strstr(src, "<function=") && strstr(src, "<parameter=")) {
        cJSON_Delete(alts);
        cJSON_Delete(listing);
        tt->fmt = TF_XML;
        return xml_grammar(tools, named, tt->mode, tt->parallel, gbnf, params, err);
    }
    if (src && strstr(src, "<|tool_call>") && strstr(src, "call:")) {
        cJSON_Delete(alts);
        cJSON_Delete(listing);
        tt->fmt = TF_GEMMA4;
        return g4_grammar(tools, named, tt->mode, tt->parallel, gbnf, err);
    }
    if (src && strstr(src, "<|channel|>") && strstr(src, "to=")) {
        cJSON_Delete(alts);
        cJSON_Delete(listing);
        tt->fmt = TF_HARMONY;
        tt->parallel = false;   /* <|call|> ends the reply */
        return harmony_grammar(tools, named, tt->mode, gbnf, err);
    }
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
        return tools_err(err);
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
            free_text_rules(&b, "tc-f", HERMES_OPEN);
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

/* The XML format's call (the text inside <tool_call>...</tool_call>) as {"name", "arguments"}; NULL if malformed. */
static cJSON *xml_call(char *s, const cJSON *params) {
    char *f = strstr(s, "<function="), *fe = f ? strchr(f, '>') : NULL;
    if (!fe || !strstr(fe, "</function>")) return NULL;
    *fe = 0;
    const char *name = f + strlen("<function=");
    cJSON *call = cJSON_CreateObject(), *args = cJSON_CreateObject();
    const cJSON *props = item(item(params, name), "properties");
    bool ok = call && args && cJSON_AddStringToObject(call, "name", name);
    for (char *p = strstr(fe + 1, "<parameter="); ok && p; p = strstr(p, "<parameter=")) {
        char *ke = strchr(p, '>'), *v, *ve;
        if (!ke) break;
        *ke = 0;
        const char *key = p + strlen("<parameter=");
        v = ke + 1 + (ke[1] == '\n');
        ve = strstr(v, "\n</parameter>");
        if (!ve) ve = strstr(v, "</parameter>");
        char save = ve ? *ve : 0;
        if (ve) *ve = 0;
        cJSON *val = xml_raw(item(props, key)) ? NULL : cJSON_Parse(v);   /* JSON unless the schema says a plain string */
        ok = json_put(args, key, val ? val : cJSON_CreateString(v));
        if (ve) *ve = save;
        p = ve ? ve : v + strlen(v);
    }
    if (ok) ok = json_put(call, "arguments", args), args = NULL;
    cJSON_Delete(args);
    if (!ok) { cJSON_Delete(call); return NULL; }
    return call;
}

/* A Gemma 4 value at *p (advanced past it) as JSON; NULL if malformed. */
static cJSON *g4_parse(const char **p, int depth) {
    const char *s = *p;
    while (*s == ' ' || *s == '\n') s++;
    cJSON *v = NULL;
    if (depth > 64) return NULL;
    if (!strncmp(s, G4_Q, strlen(G4_Q))) {
        const char *b = s + strlen(G4_Q), *e = strstr(b, G4_Q);
        if (!e) return NULL;
        char *t = strndup(b, (size_t)(e - b));
        v = t ? cJSON_CreateString(t) : NULL;
        free(t);
        s = e + strlen(G4_Q);
    } else if (*s == '{' || *s == '[') {
        const bool obj = *s == '{';
        v = obj ? cJSON_CreateObject() : cJSON_CreateArray();
        s++;
        while (v && *s != (obj ? '}' : ']')) {
            char *key = NULL;
            if (obj) {
                const char *c = strchr(s, ':');
                if (!c) { cJSON_Delete(v); return NULL; }
                key = strndup(s, (size_t)(c - s));
                s = c + 1;
            }
            cJSON *x = g4_parse(&s, depth + 1);
            if (!x || (obj && !key)) { cJSON_Delete(x); free(key); cJSON_Delete(v); return NULL; }
            const bool ok = obj ? json_put(v, key, x) : json_push(v, x);   /* x is v's now, or gone */
            free(key);
            if (!ok) { cJSON_Delete(v); return NULL; }
            if (*s == ',') s++;
            else if (*s != (obj ? '}' : ']')) { cJSON_Delete(v); return NULL; }
        }
        if (v) s++;
    } else {   /* a number, true, false or null: up to the next delimiter */
        size_t k = strcspn(s, ",}]");
        char *t = strndup(s, k);
        v = t ? cJSON_Parse(t) : NULL;
        free(t);
        s += k;
    }
    *p = s;
    return v;
}

cJSON *tools_parse(const srv_tools *tt, const char *params, const char *text, size_t n, char **content) {
    *content = NULL;
    if (!text) text = "";
    cJSON *calls = cJSON_CreateArray();
    char *buf = strndup(text, n);
    if (!calls || !buf) { cJSON_Delete(calls); free(buf); api_json_lost(); return NULL; }
    bool lost = false;
    if (tt->fmt == TF_HARMONY) {   /* each message (they part at <|start|>) whose header names a function */
        for (char *seg = buf; seg;) {
            char *next = strstr(seg, "<|start|>"), *msg;
            if (next) *next = 0;
            if ((msg = strstr(seg, "<|message|>"))) {
                *msg = 0;
                char *body = msg + strlen("<|message|>"), *end = strstr(body, "<|end|>"), *to = strstr(seg, "to=functions.");
                if (end) *end = 0;
                if (to) {
                    to += strlen("to=functions.");
                    char *name = strndup(to, strcspn(to, " <"));
                    cJSON *j = cJSON_CreateObject(), *args = cJSON_Parse(body), *c = NULL;
                    bool ok = name && j && args && cJSON_AddStringToObject(j, "name", name);
                    if (ok) ok = json_put(j, "arguments", args), args = NULL;   /* j owns it, or it is gone */
                    if (ok) c = openai_call(j, "arguments");
                    if (c) json_push(calls, c);
                    cJSON_Delete(args);
                    cJSON_Delete(j);
                    free(name);
                }
            }
            seg = next ? next + strlen("<|start|>") : NULL;
        }
    } else if (tt->fmt == TF_GEMMA4) {
        static const char *const OPEN = "<|tool_call>call:", *const CLOSE = "<tool_call|>";
        char *open = strstr(buf, OPEN);
        *content = trimmed(buf, open ? (size_t)(open - buf) : n, &lost);
        while (open) {   /* the arguments parsed first: a string in them may hold the closing text */
            char *name = open + strlen(OPEN), *brace = strchr(name, '{');
            if (!brace) break;   /* cut short */
            const char *at = brace;
            char *nm = strndup(name, (size_t)(brace - name));
            cJSON *args = g4_parse(&at, 0), *j = cJSON_CreateObject(), *c = NULL;
            const bool whole = args && !strncmp(at, CLOSE, strlen(CLOSE));
            bool ok = whole && nm && j && cJSON_AddStringToObject(j, "name", nm);
            if (ok) ok = json_put(j, "arguments", args), args = NULL;
            if (ok) c = openai_call(j, "arguments");
            if (c) json_push(calls, c);
            cJSON_Delete(args);
            cJSON_Delete(j);
            free(nm);
            if (!whole) break;
            open = strstr(at + strlen(CLOSE), OPEN);
        }
    } else if (tt->fmt == TF_XML) {
        cJSON *ps = params ? cJSON_Parse(params) : NULL;
        char *open = strstr(buf, HERMES_OPEN);
        *content = trimmed(buf, open ? (size_t)(open - buf) : n, &lost);
        while (open) {
            char *body = open + strlen(HERMES_OPEN), *close = strstr(body, HERMES_CLOSE);
            if (close) *close = 0;
            cJSON *j = close ? xml_call(body, ps) : NULL, *c = j ? openai_call(j, "arguments") : NULL;   /* whole calls only */
            if (c) json_push(calls, c);
            cJSON_Delete(j);
            open = close ? strstr(close + strlen(HERMES_CLOSE), HERMES_OPEN) : NULL;
        }
        cJSON_Delete(ps);
    } else if (tt->fmt == TF_HERMES) {
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
