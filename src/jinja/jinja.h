/* jinja.h — a Jinja2 interpreter for chat templates, rendering them the way Hugging Face's apply_chat_template
 * does: a sandboxed Jinja2 environment with trim_blocks and lstrip_blocks on, the loopcontrols extension
 * (break/continue), the globals raise_exception(msg) and strftime_now(fmt), and a tojson filter that keeps
 * non-ASCII text as is (json.dumps with ensure_ascii=False, indent, separators, sort_keys).
 *
 * The language is Jinja2's: whitespace control, if/elif/else, for (tuple targets, "if" filter, else, loop.*),
 * set (plain, ns.attr, block form), namespace(), macros with defaults and call blocks, filter blocks, with,
 * raw, the builtin filters and tests templates use, Python str/dict/list methods and operators, slices,
 * undefined values that print as "" and fail only when used. Values follow Python: str() and repr() output,
 * float formatting, floor division, and the quirks templates rely on (map/select/... results are always true
 * and have no length, as Jinja2's generators). Hugging Face's {% generation %} blocks render their body.
 * Lenient where Jinja2's sandbox refuses: list.append/pop/insert/extend and {% do %} work. Not supported:
 * include/import/extends/block, recursive loops, *args and **kwargs in calls, ints beyond 64 bits (an error).
 *
 * Templates and messages are untrusted: rendering never crashes, and nesting, work, memory and output are
 * bounded (limits below); going past one is an error. Errors are one line, with the template line and
 * column where there is one ("template:LINE:COL: message"); raise_exception(msg) fails with exactly msg, so
 * it can be shown to whoever sent the conversation. Rendering is thread-safe (no shared state).
 *
 * JSON numbers with an integral value (up to 2^53) become Python ints, others floats: cJSON does not keep
 * the difference between 1 and 1.0. strftime_now uses the local time, or midnight of HEARTH_FIXED_DATE
 * (YYYY-MM-DD) when that is set, for reproducible output. */
#ifndef HEARTH_JINJA_H
#define HEARTH_JINJA_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "hearth.h"

#define JINJA_MAX_DEPTH 256                      /* nesting of the template, of values and of macro calls */
#define JINJA_MAX_STEPS 50000000u                /* evaluations and loop iterations per render */
#define JINJA_MAX_MEMORY ((size_t)512 << 20)     /* bytes allocated per render (nothing is freed before the end) */
#define JINJA_MAX_OUTPUT ((size_t)256 << 20)     /* bytes of output (and of any captured block) */
#define JINJA_MAX_RANGE 100000                   /* items range() may make, as in Jinja2's sandbox */

/* Per-render limits; a zero field means the default above. */
typedef struct { unsigned long long max_steps; size_t max_memory, max_output; } jinja_limits;

/* Renders template source tmpl with the variables of the JSON object context (may be NULL). On success
 * *out is a NUL-terminated malloc'd string (free() it) and *out_len (if not NULL) its length. Returns 0,
 * or -1 with err filled. */
int jinja_render(const char *tmpl, const cJSON *context, char **out, size_t *out_len, hearth_err *err);
/* The same with limits of the caller's choosing (lim may be NULL). */
int jinja_render_ex(const char *tmpl, const cJSON *context, const jinja_limits *lim, char **out, size_t *out_len,
                    hearth_err *err);

/* Renders a chat template over a conversation as apply_chat_template does: the variables are messages
 * (a JSON array), bos_token and eos_token (left undefined when NULL), add_generation_prompt, tools=None
 * and documents=None (Hugging Face passes both, as None when absent), then every member of the JSON object
 * extra (may be NULL), which override them: "tools", "enable_thinking", "date_string", ... Same contract as
 * jinja_render. */
int chat_render(const char *tmpl, const cJSON *messages, const char *bos, const char *eos,
                bool add_generation_prompt, const cJSON *extra, char **out, hearth_err *err);
/* The same with limits of the caller's choosing (lim may be NULL). */
int chat_render_ex(const char *tmpl, const cJSON *messages, const char *bos, const char *eos,
                   bool add_generation_prompt, const cJSON *extra, const jinja_limits *lim, char **out, hearth_err *err);

#endif
