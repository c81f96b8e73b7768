/* cmd_template.c — `hearth template`: renders a chat template over a conversation, as Hugging Face's
 * apply_chat_template would, and prints the prompt exactly (no newline added).
 *
 *   hearth template --template FILE [--bos TEXT] [--eos TEXT] [--no-generation-prompt] MESSAGES.json
 *   hearth template -m MODEL [--template FILE] [--no-generation-prompt] MESSAGES.json
 *
 * MESSAGES.json ("-" for stdin) holds a JSON array of messages, or an object with "messages" plus any
 * other template variables ("tools", "enable_thinking", "date_string", ...). bos_token and eos_token are
 * "" unless given; with -m MODEL the template is the model's own (tokenizer.chat_template, unless --template
 * overrides it) and bos_token / eos_token are the model's. Errors print one line "error: ..." on stderr and exit 1. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "generate/chat.h"
#include "cli.h"
#include "jinja/jinja.h"

static const char usage[] =
    "usage: hearth template --template FILE [--bos TEXT] [--eos TEXT] [--no-generation-prompt] MESSAGES.json\n"
    "       hearth template -m MODEL [--template FILE] [--no-generation-prompt] MESSAGES.json\n"
    "  Renders the chat template FILE over the conversation in MESSAGES.json (a JSON array of messages, or an\n"
    "  object with \"messages\" and other template variables such as \"tools\"; \"-\" reads stdin) and prints\n"
    "  the prompt exactly, with no newline added. With -m the template is the model's own (GGUF\n"
    "  tokenizer.chat_template; --template overrides it) and bos_token / eos_token are the model's.\n";

/* Reads all of stdin into a NUL-terminated buffer, or prints the error and returns NULL. */
static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, stdin)) > 0;) {
        n += r;
        if (n == cap) {
            char *bigger = realloc(buf, cap * 2 + 1);
            if (!bigger) { free(buf); buf = NULL; break; }
            buf = bigger;
            cap *= 2;
        }
    }
    if (!buf || ferror(stdin)) { free(buf); cli_fail("cannot read stdin"); return NULL; }
    buf[n] = 0;
    *len = n;
    return buf;
}

typedef struct {
    const char *template_path, *messages_path, *bos, *eos, *model_path;
    bool generation_prompt;
} template_args;

/* Returns -1 when parsing went fine, else the exit code (0 after --help, 1 on an error). */
static int parse_args(int argc, char **argv, template_args *a) {
    *a = (template_args){ .bos = "", .eos = "", .generation_prompt = true };
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        bool takes_value = !strcmp(arg, "--template") || !strcmp(arg, "--bos") || !strcmp(arg, "--eos") || !strcmp(arg, "-m");
        if (takes_value && i + 1 >= argc) return cli_fail("%s needs a value", arg);
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) { fputs(usage, stdout); return 0; }
        else if (!strcmp(arg, "--template")) a->template_path = argv[++i];
        else if (!strcmp(arg, "-m")) a->model_path = argv[++i];
        else if (!strcmp(arg, "--bos")) a->bos = argv[++i];
        else if (!strcmp(arg, "--eos")) a->eos = argv[++i];
        else if (!strcmp(arg, "--no-generation-prompt")) a->generation_prompt = false;
        else if (arg[0] == '-' && arg[1]) return cli_fail("unknown option: %s", arg);
        else if (a->messages_path) return cli_fail("unexpected argument: %s (one MESSAGES.json only)", arg);
        else a->messages_path = arg;
    }
    if (!a->template_path && !a->model_path) return cli_fail("missing --template FILE or -m MODEL (see hearth template --help)");
    if (!a->messages_path) return cli_fail("missing MESSAGES.json (see hearth template --help)");
    return -1;
}

/* Splits the parsed file into the messages array and the other variables (a new object, or NULL). */
static int split_conversation(cJSON *doc, const char *path, cJSON **messages, cJSON **extra) {
    *extra = NULL;
    if (cJSON_IsArray(doc)) { *messages = doc; return 0; }
    *messages = cJSON_GetObjectItemCaseSensitive(doc, "messages");
    if (!cJSON_IsObject(doc) || !cJSON_IsArray(*messages))
        return cli_fail("%s: expected a JSON array of messages, or an object with a \"messages\" array", path);
    *extra = cJSON_Duplicate(doc, true);
    if (!*extra) return cli_fail("out of memory");
    cJSON_DeleteItemFromObjectCaseSensitive(*extra, "messages");
    return 0;
}

/* -m MODEL: the model's template (or tmpl), bos_token and eos_token. err->msg stays "" when the failure was
 * already reported. */
static int render_model(const char *tmpl, const cJSON *messages, const cJSON *extra, const template_args *a, char **out,
                        hearth_err *err) {
    err->msg[0] = 0;
    hearth_model *m = cli_load_model(a->model_path);
    if (!m) return -1;
    chat_fmt *f = NULL;
    int rc = chat_fmt_new(m, tmpl, &f, err);
    if (!rc && !chat_fmt_has_template(f)) {
        snprintf(err->msg, sizeof err->msg, "%s has no chat template (tokenizer.chat_template): give --template FILE",
                 a->model_path);
        rc = -1;
    }
    if (!rc) rc = chat_fmt_render(f, messages, a->generation_prompt, extra, out, err);
    chat_fmt_free(f);
    hearth_model_free(m);
    return rc;
}

static int render_and_print(const char *tmpl, const cJSON *messages, const cJSON *extra, const template_args *a) {
    char *out = NULL;
    hearth_err err = {{0}};
    if (a->model_path ? render_model(tmpl, messages, extra, a, &out, &err)
                      : chat_render(tmpl, messages, a->bos, a->eos, a->generation_prompt, extra, &out, &err)) {
        if (!err.msg[0]) return 1;   /* already reported */
        return cli_fail("%s", err.msg);
    }
    size_t n = strlen(out);
    bool ok = fwrite(out, 1, n, stdout) == n && fflush(stdout) == 0;
    free(out);
    return ok ? 0 : cli_fail("cannot write the output: %s", strerror(errno));
}

int cmd_template(int argc, char **argv) {
    template_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    size_t tlen, mlen;
    char *tmpl = a.template_path ? cli_read_file(a.template_path, &tlen) : NULL;
    if (a.template_path && !tmpl) return 1;
    char *json = strcmp(a.messages_path, "-") ? cli_read_file(a.messages_path, &mlen) : read_stdin(&mlen);
    if (!json) { free(tmpl); return 1; }
    cJSON *doc = cJSON_ParseWithLength(json, mlen), *messages = NULL, *extra = NULL;
    if (!doc) rc = cli_fail("%s: not valid JSON", a.messages_path);
    else if (split_conversation(doc, a.messages_path, &messages, &extra) == 0) rc = render_and_print(tmpl, messages, extra, &a);
    else rc = 1;
    cJSON_Delete(extra);
    cJSON_Delete(doc);
    free(json);
    free(tmpl);
    return rc;
}
