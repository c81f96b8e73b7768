/* jinja.c — the public entry points of the Jinja2 interpreter (see jinja.h): sets up a render context,
 * catches errors unwound from anywhere inside (setjmp here, longjmp in jfail), lexes, parses, fills the
 * global scope (builtins) and the template's variables, runs the template, and hands back the output as
 * a malloc'd string. Everything else the render allocated is freed with its arena. */
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_internal.h"

typedef void (*fill_vars_fn)(jctx *c, jdict *vars, const void *arg);

static jscope *make_scope(jctx *c, jscope *parent) {
    jscope *s = ja_alloc(c, sizeof *s);
    s->parent = parent;
    return s;
}

static void fill_from_object(jctx *c, jdict *vars, const cJSON *obj) {
    if (!obj) return;
    if (!cJSON_IsObject(obj)) jfail(c, JPOS_NONE, "template variables must be a JSON object");
    for (const cJSON *e = obj->child; e; e = e->next)
        if (e->string) jd_set_s(c, vars, e->string, jv_from_cjson(c, e));
}

static void fill_context(jctx *c, jdict *vars, const void *arg) { fill_from_object(c, vars, arg); }

/* Runs template src with variables set by fill(arg); the result goes to *out (malloc'd). */
static int render(const char *src, fill_vars_fn fill, const void *arg, const jinja_limits *lim, char **out,
                  size_t *out_len, hearth_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!src) return herr(err, "template: no template given");
    jctx *c = calloc(1, sizeof *c);
    if (!c) return herr(err, "template: out of memory");
    c->err = err;
    c->max_steps = lim && lim->max_steps ? lim->max_steps : JINJA_MAX_STEPS;
    c->max_memory = lim && lim->max_memory ? lim->max_memory : JINJA_MAX_MEMORY;
    c->max_output = lim && lim->max_output ? lim->max_output : JINJA_MAX_OUTPUT;
    if (setjmp(c->jmp)) {
        ja_free_all(c);
        free(c);
        return -1;
    }
    jinja_lex(c, src, strlen(src));
    jnode *root = jinja_parse(c);
    c->globals = make_scope(c, NULL);
    jb_add_globals(c, &c->globals->vars);
    c->root = make_scope(c, c->globals);
    fill(c, &c->root->vars, arg);
    jbuf result = {0};
    c->out = &result;
    jinja_exec_template(c, root);
    char *text = malloc(result.n + 1);
    if (text) {
        if (result.n) memcpy(text, result.p, result.n);
        text[result.n] = 0;
        *out = text;
        if (out_len) *out_len = result.n;
    }
    ja_free_all(c);
    free(c);
    return text ? 0 : herr(err, "template: out of memory");
}

int jinja_render(const char *tmpl, const cJSON *context, char **out, size_t *out_len, hearth_err *err) {
    return render(tmpl, fill_context, context, NULL, out, out_len, err);
}

int jinja_render_ex(const char *tmpl, const cJSON *context, const jinja_limits *lim, char **out, size_t *out_len,
                    hearth_err *err) {
    return render(tmpl, fill_context, context, lim, out, out_len, err);
}

typedef struct {
    const cJSON *messages, *extra;
    const char *bos, *eos;
    bool add_generation_prompt;
} chat_args;

/* What apply_chat_template passes: messages, the special tokens, add_generation_prompt, tools and
 * documents (None unless given), then the caller's extra variables. */
static void fill_chat(jctx *c, jdict *vars, const void *arg) {
    const chat_args *a = arg;
    if (a->messages && !cJSON_IsArray(a->messages)) jfail(c, JPOS_NONE, "messages must be a JSON array");
    jd_set_s(c, vars, "messages", a->messages ? jv_from_cjson(c, a->messages) : jv_list(c, 0));
    if (a->bos) jd_set_s(c, vars, "bos_token", jv_cstr(c, a->bos));
    if (a->eos) jd_set_s(c, vars, "eos_token", jv_cstr(c, a->eos));
    jd_set_s(c, vars, "add_generation_prompt", jv_bool(a->add_generation_prompt));
    jd_set_s(c, vars, "tools", jv_none());
    jd_set_s(c, vars, "documents", jv_none());
    fill_from_object(c, vars, a->extra);
}

int chat_render_ex(const char *tmpl, const cJSON *messages, const char *bos, const char *eos, bool add_generation_prompt,
                   const cJSON *extra, const jinja_limits *lim, char **out, hearth_err *err) {
    chat_args a = { .messages = messages, .extra = extra, .bos = bos, .eos = eos, .add_generation_prompt = add_generation_prompt };
    return render(tmpl, fill_chat, &a, lim, out, NULL, err);
}

int chat_render(const char *tmpl, const cJSON *messages, const char *bos, const char *eos, bool add_generation_prompt,
                const cJSON *extra, char **out, hearth_err *err) {
    return chat_render_ex(tmpl, messages, bos, eos, add_generation_prompt, extra, NULL, out, err);
}
