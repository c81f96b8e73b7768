/* test_chat_templates.c — tests of the Jinja2 chat-template renderer (src/jinja*.c):
 *  1. every case of data/chat-templates.json (real templates, rendered by Jinja2 set up as Hugging Face's
 *     apply_chat_template does it) must come out byte for byte; so must data/chat-templates-2026.json's (gpt-oss's
 *     harmony, Qwen3.5 and Gemma 4 over tools, tool calls and results, reasoning, the thinking switch and reasoning
 *     effort; made by data/templates/render.py the same way), and data/chat-templates-gemma4.json's (its
 *     thinking switch and tool declarations);
 *  2. language features the fixtures do not reach, against what Jinja2 3.1 rendered for the same input;
 *  3. error paths: syntax errors, unknown filters, raise_exception, misuse of undefined values, and the
 *     limits (nesting, work, memory, output), which must fail with a one-line message, never crash;
 *  4. robustness: randomly mutated fixture templates and oddly typed messages render or fail cleanly
 *     (meant to run under -fsanitize=address,undefined too).
 * HEARTH_FIXED_DATE pins strftime_now to 2026-11-21, the date the fixtures were made with. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja.h"
#include "testutil.h"

/* Prints s[from, to) with control characters escaped. */
static void print_escaped(const char *s, size_t from, size_t to) {
    for (size_t i = from; i < to && s[i]; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\n') fputs("\\n", stderr);
        else if (ch == '\t') fputs("\\t", stderr);
        else if (ch < 0x20) fprintf(stderr, "\\x%02x", ch);
        else fputc(ch, stderr);
    }
}

/* Where got and want first differ, with some context around it. */
static void show_diff(const char *name, const char *got, const char *want) {
    size_t i = 0, line = 1;
    while (got[i] && got[i] == want[i]) { if (got[i] == '\n') line++; i++; }
    size_t from = i > 60 ? i - 60 : 0, glen = strlen(got), wlen = strlen(want);
    fprintf(stderr, "%s: output differs at byte %zu (line %zu); got %zu bytes, want %zu\n  got:  ...", name, i, line, glen, wlen);
    print_escaped(got, from, i + 60);
    fprintf(stderr, "...\n  want: ...");
    print_escaped(want, from, i + 60);
    fprintf(stderr, "...\n");
}

/* ---------------- 1. fixtures ---------------- */

static bool standard_field(const char *k) {
    static const char *const std[] = { "name", "template", "bos_token", "eos_token", "messages", "add_generation_prompt",
                                       "expected", NULL };
    for (size_t i = 0; std[i]; i++) if (!strcmp(k, std[i])) return true;
    return false;
}

/* Fields a case has beyond the standard ones (tools, enable_thinking, ...) become template variables. */
static cJSON *case_extra(const cJSON *c) {
    cJSON *extra = cJSON_CreateObject();
    for (const cJSON *e = c->child; e; e = e->next)
        if (e->string && !standard_field(e->string)) cJSON_AddItemToObject(extra, e->string, cJSON_Duplicate(e, true));
    return extra;
}

static const char *str_field(const cJSON *c, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int render_case(const cJSON *c, const char *tmpl, char **out, hearth_err *err) {
    cJSON *extra = case_extra(c);
    int rc = chat_render(tmpl, cJSON_GetObjectItemCaseSensitive(c, "messages"), str_field(c, "bos_token"),
                         str_field(c, "eos_token"), cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "add_generation_prompt")),
                         extra, out, err);
    cJSON_Delete(extra);
    return rc;
}

static void test_fixtures(const cJSON *cases) {
    int n = 0, passed = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        n++;
        const char *name = str_field(c, "name"), *tmpl = str_field(c, "template"), *want = str_field(c, "expected");
        REQUIRE(name && tmpl && want, "fixture case %d lacks name, template or expected", n);
        char label[128];
        snprintf(label, sizeof label, "fixture %d (%s)", n, name);
        char *out = NULL;
        hearth_err err = {{0}};
        if (render_case(c, tmpl, &out, &err)) { CHECK(false, "%s: %s", label, err.msg); continue; }
        if (strcmp(out, want)) { show_diff(label, out, want); CHECK(false, "%s: wrong output", label); }
        else passed++;
        free(out);
    }
    printf("fixtures: %d/%d passed\n", passed, n);
    CHECK(n > 0 && passed == n, "%d of %d fixture cases failed", n - passed, n);
}

/* ---------------- 2. language features (expected outputs from Jinja2 3.1) ---------------- */

static const char *const unit_context = "{\"xs\": [3, 1, 2], \"d\": {\"b\": 1, \"a\": 2}, \"s\": \"Hello World\", \"u\": \"\303\234n\303\257c\303\266d\303\251 \360\237\246\231\", \"n\": null, \"f\": 2.5, \"msgs\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}], \"words\": [\"b\", \"A\", \"c\", \"a\"]}";
static const struct { const char *tmpl, *want; } unit_cases[] = {
    { "  {% if true %}\n    x\n  {% endif %}\n  y\n",
      "    x\n  y" },
    { "a\n  {%- if true %}\nb\n  {%- endif %}\nc",
      "abc" },
    { "a\n  {%+ if true %}\nb\n{% endif +%}\nc",
      "a\n  b\n\nc" },
    { "{# comment #}\nx\n  {# c2 #}\ny",
      "x\ny" },
    { "a {#- c -#} b",
      "ab" },
    { "{% raw %}{{ x }}{% endraw %}|{%- raw -%}  {{ y }}  {%- endraw -%}  |",
      "{{ x }}|{{ y }}|" },
    { "{{- 'a' -}}\n\n  {{- 'b' }}  \n",
      "ab  " },
    { "x\r\ny\rz\r\n",
      "x\ny\nz" },
    { "{% for i in xs -%}\n  {{ i }}\n{%- endfor %}",
      "312" },
    { "{{ 1 + 2 }}|{{ 1 + 2.0 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7.5 % 2 }}|{{ 2 ** 10 }}|{{ 2 ** -1 }}|{{ 10 / 4 }}|{{ 2 ** 3 ** 2 }}",
      "3|3.0|3|-4|2|1.5|1024|0.5|2.5|64" },
    { "{{ 'a' ~ 1 ~ none ~ true }}|{{ 'ab' * 3 }}|{{ [1, 2] + [3] }}|{{ (1, 2) + (3,) }}|{{ 1 ~ (2 + 3) }}",
      "a1NoneTrue|ababab|[1, 2, 3]|(1, 2, 3)|15" },
    { "{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ 1 == 1.0 }}|{{ true == 1 }}|{{ [1, 2] == [1, 2] }}|{{ (1, 2) == [1, 2] }}",
      "True|False|True|True|True|False" },
    { "{{ 'b' in 'abc' }}|{{ 1 in xs }}|{{ 'a' in d }}|{{ 'z' not in d }}|{{ not 1 == 2 }}|{{ -1|abs }}",
      "True|True|True|True|True|1" },
    { "{{ 'x' if n else 'y' }}|{{ 'x' if n }}|{{ xs and 'yes' }}|{{ n or 'no' }}|{{ not n is none }}",
      "y||yes|no|False" },
    { "{{ xs }}|{{ d }}|{{ n }}|{{ f }}|{{ (1,) }}|{{ () }}|{{ ['a\\'b', \"q\\\"\", '\\n'] }}|{{ 1e16 }}|{{ 0.00001 }}|{{ 0.1 + 0.2 }}",
      "[3, 1, 2]|{'b': 1, 'a': 2}|None|2.5|(1,)|()|[\"a'b\", 'q\"', '\\n']|1e+16|1e-05|0.30000000000000004" },
    { "{{ 'a' 'b' }}|{{ \"\\x41\\u00e9\\t|\" }}|{{ 0x1F }}|{{ 1_000 }}|{{ 1e3 }}|{{ 0b101 }}",
      "ab|A\303\251\t||31|1000|1000.0|5" },
    { "{{ xs[0] }}|{{ xs[-1] }}|{{ xs[5] }}|{{ xs[1:] }}|{{ xs[::-1] }}|{{ xs[:-1] }}|{{ s[::2] }}|{{ u[1:4] }}|{{ u[::-1] }}|{{ u|length }}",
      "3|2||[1, 2]|[2, 1, 3]|[3, 1]|HloWrd|n\303\257c|\360\237\246\231 \303\251d\303\266c\303\257n\303\234|9" },
    { "{{ d.a }}|{{ d['b'] }}|{{ d.zz }}|{{ msgs[1].tool_calls[0].function.name }}|{{ xs.0 }}|{{ none.x }}",
      "2|1||f|3|" },
    { "{{ d.items()|list }}|{{ d.keys()|list }}|{{ d.values()|list }}|{{ d.get('a') }}|{{ d.get('q', 9) }}|{{ d.get('q') }}",
      "[('b', 1), ('a', 2)]|['b', 'a']|[1, 2]|2|9|None" },
    { "{{ s.upper() }}|{{ s.split() }}|{{ s.split('o') }}|{{ s.startswith('He') }}|{{ s.endswith(('x', 'ld')) }}|{{ s.find('o') }}|{{ s.rfind('o') }}|{{ s.count('o') }}|{{ s.replace('o', '0', 1) }}",
      "HELLO WORLD|['Hello', 'World']|['Hell', ' W', 'rld']|True|True|4|7|2|Hell0 World" },
    { "{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  x'.lstrip() }}|{{ 'x  '.rstrip() }}|{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ '-'.join(['a', 'b']) }}|{{ \"they're\".title() }}|{{ 'hELLO'.capitalize() }}",
      "x|a|x|x|['a', 'b', 'c']|a-b|They'Re|Hello" },
    { "{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ '  a b  c '.split(None, 1) }}|{{ 'aaa'.rsplit('aa', 1) }}|{{ u.find('\303\266') }}|{{ '{} {x}'.format(1, x=2) }}|{{ '{:>5.1f}|'.format(3.14159) }}",
      "['a', 'b c']|['a b', 'c']|['a', 'b  c ']|['a', '']|4|1 2|  3.1|" },
    { "{{ '<think>x</think>\\n\\nrest'.split('</think>')[-1].lstrip('\\n') }}|{{ '\303\237'|upper }}|{{ u|upper }}",
      "rest|SS|\303\234N\303\217C\303\226D\303\211 \360\237\246\231" },
    { "{{ xs|sort }}|{{ xs|sort(reverse=true) }}|{{ words|sort }}|{{ words|unique|list }}|{{ words|max }}|{{ xs|sum }}|{{ xs|first }}|{{ xs|last }}|{{ xs|join(',') }}|{{ xs|reverse|list }}",
      "[1, 2, 3]|[3, 2, 1]|['A', 'a', 'b', 'c']|['b', 'A', 'c']|c|6|3|2|3,1,2|[2, 1, 3]" },
    { "{{ msgs|map(attribute='role')|list }}|{{ msgs|selectattr('role', 'equalto', 'user')|list|length }}|{{ msgs|rejectattr('role', 'eq', 'user')|map(attribute='content')|join }}|{{ msgs|selectattr('tool_calls')|list|length }}",
      "['user', 'assistant']|1|yo|1" },
    { "{{ xs|select('odd')|list }}|{{ xs|reject('odd')|list }}|{{ [1, none, 0, 'a']|select|list }}|{{ ['a', 'B']|map('upper')|list }}|{{ d|dictsort }}|{{ d|items|list }}",
      "[3, 1]|[2]|[1, 'a']|['A', 'B']|[('a', 2), ('b', 1)]|[('b', 1), ('a', 2)]" },
    { "{{ '  hi  '|trim }}|{{ 'hello-world (foo)'|title }}|{{ 'hELLO world'|capitalize }}|{{ 'a b c'|wordcount }}|{{ 'x'|center(5) }}|{{ 'hello'|replace('l', 'L') }}",
      "hi|Hello-World (Foo)|Hello world|3|  x  |heLLo" },
    { "{{ 3.7|round }}|{{ 2.5|round }}|{{ 5|round }}|{{ 3.14159|round(2) }}|{{ 3.14159|round(2, 'floor') }}|{{ '42'|int }}|{{ '42.7'|int }}|{{ 'x'|int(5) }}|{{ '3.5'|float }}",
      "4.0|2.0|5|3.14|3.14|42|42|5|3.5" },
    { "{{ none|default('d') }}|{{ undefined_x|default('d') }}|{{ ''|default('d', true) }}|{{ xs|length }}|{{ d|length }}|{{ undefined_x|length }}",
      "None|d|d|3|2|0" },
    { "{{ xs|tojson }}|{{ d|tojson }}|{{ u|tojson }}|{{ 'a\"b\\\\c\\n'|tojson }}|{{ {'a': [1, {'b': none}]}|tojson(indent=2) }}|{{ d|tojson(sort_keys=true) }}|{{ [1.0, 1e20]|tojson }}",
      "[3, 1, 2]|{\"b\": 1, \"a\": 2}|\"\303\234n\303\257c\303\266d\303\251 \360\237\246\231\"|\"a\\\"b\\\\c\\n\"|{\n  \"a\": [\n    1,\n    {\n      \"b\": null\n    }\n  ]\n}|{\"a\": 2, \"b\": 1}|[1.0, 1e+20]" },
    { "{{ 'text\\nmore\\n\\nend'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ xs|batch(2)|list }}|{{ '<a & b>'|e }}|{{ 'long sentence here'|truncate(9) }}|{{ '%s-%d|%05.1f' % ('a', 3, 3.14159) }}",
      "text\n  more\n\n  end|  a\n  b|[[3, 1], [2]]|&lt;a &amp; b&gt;|long...|a-3|003.1" },
    { "{{ xs is defined }}|{{ zz is defined }}|{{ n is none }}|{{ s is string }}|{{ true is number }}|{{ 1 is integer }}|{{ 1.0 is float }}|{{ d is mapping }}|{{ s is iterable }}|{{ 1 is iterable }}|{{ xs is sequence }}",
      "True|False|True|True|True|True|True|True|True|False|True" },
    { "{{ 3 is odd }}|{{ 4 is even }}|{{ 9 is divisibleby 3 }}|{{ 1 is eq 1 }}|{{ true is true }}|{{ false is false }}|{{ range is callable }}|{{ 'ab' is lower }}|{{ 2 is in xs }}|{{ none is sameas none }}",
      "True|True|True|True|True|True|True|True|True|True" },
    { "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}",
      "103TrueFalse31;212FalseFalse332;321FalseTrue31;" },
    { "{% for x in xs if x > 1 %}{{ x }}{{ loop.index }}{{ loop.length }},{% else %}none{% endfor %}|{% for x in [] %}a{% else %}E{% endfor %}",
      "312,222,|E" },
    { "{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}|{% for c in 'ab' %}{{ c }}.{% endfor %}",
      "b=1,a=2,|ba|37|a.b." },
    { "{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}|{% for x in xs %}{{ loop.cycle('a', 'b') }}{% endfor %}",
      "3|aba" },
    { "{% for i in xs %}{% for j in xs %}{% if j == 1 %}{% break %}{% endif %}{{ i }}{{ j }},{% endfor %}{% endfor %}",
      "33,13,23," },
    { "{% set x = 5 %}{{ x }}|{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set ns = namespace(c=0) %}{% for i in xs %}{% set ns.c = ns.c + i %}{% endfor %}{{ ns.c }}|{% set y %}in{{ 1 }}{% endset %}{{ y }}|{% set z | upper %}abc{% endset %}{{ z }}",
      "5|12|6|in1|ABC" },
    { "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}",
      "12121" },
    { "{% for i in [1, 2] %}{% if i == 1 %}{% set y = 'a' %}{% endif %}[{{ y }}]{% endfor %}",
      "[a][]" },
    { "{% if true %}{% set z = 'if-scope' %}{% endif %}{{ z }}",
      "if-scope" },
    { "{% macro m(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }}|{{ m(1, 3) }}|{{ m(b=5, a=4) }}|{{ m(1) + 'x' }}",
      "1-2|1-3|4-5|1-2x" },
    { "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}",
      "1(2, 3){'k': 4}" },
    { "{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}inner{% endcall %}|{% macro w2() %}<{{ caller(5) }}>{% endmacro %}{% call(x) w2() %}[{{ x }}]{% endcall %}",
      "<inner>|<[5]>" },
    { "{% macro m() %}{{ g }}{% endmacro %}{% set g = 'late' %}{{ m() }}",
      "late" },
    { "{% filter upper %}abc{{ s }}{% endfilter %}|{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}",
      "ABCHELLO WORLD|3" },
    { "{{ range(3)|list }}|{{ range(1, 4)|list }}|{{ range(10, 0, -3)|list }}|{{ dict(a=1, b=2) }}|{{ namespace(a=1).a }}|{{ strftime_now('%Y-%m-%d %A') }}",
      "[0, 1, 2]|[1, 2, 3]|[10, 7, 4, 1]|{'a': 1, 'b': 2}|1|2026-11-21 Saturday" },
    { "{% if msgs|selectattr('role', 'eq', 'nobody') %}gen-true{% endif %}|{{ msgs|selectattr('role', 'eq', 'nobody')|list|length }}|{{ d.items() }}|{{ d.keys() }}|{{ xs|map('string') is sequence }}",
      "gen-true|0|dict_items([('b', 1), ('a', 2)])|dict_keys(['b', 'a'])|False" },
    { "[{{ zz }}]|{{ zz|string }}|{{ zz ~ 'x' }}|{% for i in zz %}no{% endfor %}|{{ zz is undefined }}|{{ (zz or 'fallback') }}",
      "[]||x||True|fallback" },
};

static void test_features(void) {
    cJSON *ctx = cJSON_Parse(unit_context);
    REQUIRE(ctx, "bad unit context");
    for (size_t i = 0; i < sizeof unit_cases / sizeof unit_cases[0]; i++) {
        char *out = NULL;
        hearth_err err = {{0}};
        char label[64];
        snprintf(label, sizeof label, "feature case %zu", i);
        if (jinja_render(unit_cases[i].tmpl, ctx, &out, NULL, &err)) {
            CHECK(false, "%s: %s\n  template: %s", label, err.msg, unit_cases[i].tmpl);
            continue;
        }
        if (strcmp(out, unit_cases[i].want)) {
            show_diff(label, out, unit_cases[i].want);
            CHECK(false, "%s: wrong output\n  template: %s", label, unit_cases[i].tmpl);
        }
        free(out);
    }
    cJSON_Delete(ctx);
}

/* ---------------- 3. errors and limits ---------------- */

/* Renders tmpl (with the unit context) and expects failure with `want` in the message. */
static void expect_error(const char *tmpl, const jinja_limits *lim, const char *want) {
    cJSON *ctx = cJSON_Parse(unit_context);
    char *out = NULL;
    hearth_err err = {{0}};
    int rc = jinja_render_ex(tmpl, ctx, lim, &out, NULL, &err);
    cJSON_Delete(ctx);
    CHECK(rc == -1 && !out, "should fail: %.200s", tmpl);
    CHECK(strstr(err.msg, want), "error for %.80s: got \"%s\", want \"%s\"", tmpl, err.msg, want);
    CHECK(!strchr(err.msg, '\n'), "error message is not one line: %s", err.msg);
    free(out);
}

static char *repeat(const char *unit, int n, const char *middle, const char *tail_unit) {
    size_t lu = strlen(unit), lm = strlen(middle), lt = strlen(tail_unit);
    char *s = malloc((size_t)n * (lu + lt) + lm + 1), *p = s;
    for (int i = 0; i < n; i++) { memcpy(p, unit, lu); p += lu; }
    memcpy(p, middle, lm); p += lm;
    for (int i = 0; i < n; i++) { memcpy(p, tail_unit, lt); p += lt; }
    *p = 0;
    return s;
}

/* 100000 nested parentheses around 1 */
static char repeat_parens[2 * 100000 + 2];

static void test_errors(void) {
    for (int i = 0; i < 100000; i++) { repeat_parens[i] = '('; repeat_parens[100001 + i] = ')'; }
    repeat_parens[100000] = '1';
    expect_error("{% if true %}never closed", NULL, "'if' is never closed");
    expect_error("{% for x in xs %}{% if x %}{% endfor %}", NULL, "unexpected tag 'endfor' (expected 'endif')");
    expect_error("{{ 'x' ", NULL, "missing '}}'");
    expect_error("{{ 'unterminated }}", NULL, "unterminated string");
    expect_error("{# never closed", NULL, "missing end of comment");
    expect_error("{{ (1, 2 }}", NULL, "unexpected '}', expected ')'");
    expect_error("{{ s|no_such_filter }}", NULL, "template:1:6: unknown filter 'no_such_filter'");
    expect_error("{% if s is no_such_test %}{% endif %}", NULL, "unknown test 'no_such_test'");
    expect_error("{{ s|groupby('x') }}", NULL, "filter 'groupby' is not supported");
    expect_error("{% break %}", NULL, "'break' outside of a for loop");
    expect_error("{% include 'other.jinja' %}", NULL, "'include' tags are not supported");
    expect_error("{% frobnicate %}", NULL, "unknown tag 'frobnicate'");
    expect_error("{% macro m(a=1, b) %}{% endmacro %}", NULL, "non-default argument follows default argument");
    expect_error("{{ zz.attr }}", NULL, "'zz' is undefined");
    expect_error("{{ msgs[5].role }}", NULL, "list object has no element 5");
    expect_error("{{ d.missing.deeper }}", NULL, "'dict object' has no attribute 'missing'");
    expect_error("{{ zz + 1 }}", NULL, "'zz' is undefined");
    expect_error("{{ 1 / 0 }}", NULL, "division by zero");
    expect_error("{{ 'a' + 1 }}", NULL, "can only concatenate str (not \"int\") to str");
    expect_error("{% for x in 5 %}{% endfor %}", NULL, "'int' object is not iterable");
    expect_error("{% for a, b in xs %}{% endfor %}", NULL, "not iterable");
    expect_error("{{ 'a' < 1 }}", NULL, "'<' not supported between instances of 'str' and 'int'");
    expect_error("{{ s() }}", NULL, "'str' object is not callable");
    expect_error("{{ 9223372036854775807 + 1 }}", NULL, "integer overflow");
    expect_error("{{ range(1000000)|length }}", NULL, "Range too big");
    expect_error("{{ zz|tojson }}", NULL, "Object of type Undefined is not JSON serializable");
    expect_error("{{ s.split('') }}", NULL, "empty separator");

    /* raise_exception fails with exactly its message */
    {
        char *out = NULL;
        hearth_err err = {{0}};
        int rc = jinja_render("a{{ raise_exception('Conversation roles must alternate user/assistant') }}b", NULL,
                              &out, NULL, &err);
        CHECK(rc == -1 && !out, "raise_exception should fail");
        CHECK(!strcmp(err.msg, "Conversation roles must alternate user/assistant"), "raise_exception message: %s", err.msg);
    }

    /* nesting: recursion, brackets, blocks, expression chains, deep data */
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, "nested too deeply");
    char *deep = repeat("{{ (", 1, repeat_parens, " }}");
    expect_error(deep, NULL, "nested too deeply");
    free(deep);
    deep = repeat("{% if true %}", 20000, "x", "{% endif %}");
    expect_error(deep, NULL, "nested too deeply");
    free(deep);
    {   /* a chain a+a+...: the parser loops, the evaluation must stop at the depth limit */
        char *chain = malloc(4 * 50000 + 16), *p = chain;
        p += sprintf(p, "{{ 1");
        for (int i = 0; i < 50000; i++) p += sprintf(p, " + 1");
        strcpy(p, " }}");
        expect_error(chain, NULL, "nested too deeply");
        free(chain);
    }
    {   /* messages nested deeper than the limit */
        cJSON *msgs = cJSON_CreateArray(), *cur = msgs;
        for (int i = 0; i < 400; i++) { cJSON *inner = cJSON_CreateArray(); cJSON_AddItemToArray(cur, inner); cur = inner; }
        char *out = NULL;
        hearth_err err = {{0}};
        CHECK(chat_render("{{ messages|tojson }}", msgs, "", "", true, NULL, &out, &err) == -1, "deep messages should fail");
        CHECK(strstr(err.msg, "nested too deeply"), "deep messages: %s", err.msg);
        cJSON_Delete(msgs);
    }
    expect_error("{% set l = [1] %}{% do l.append(l) %}{{ l|tojson }}", NULL, "nested too deeply");   /* contains itself */
    expect_error("{% set ns = namespace(t=()) %}{% for i in range(1000) %}{% set ns.t = (ns.t,) %}{% endfor %}{{ {ns.t: 1} }}",
                 NULL, "nested too deeply");

    /* work, memory and output limits */
    jinja_limits steps = { .max_steps = 10000 }, mem = { .max_memory = 1 << 20 }, outl = { .max_output = 1000 };
    expect_error("{% for i in range(100000) %}{% endfor %}", &steps, "takes too long");
    expect_error("{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}", &steps, "takes too long");
    expect_error("{{ 'x' * 2000000 }}", &mem, "too large");
    expect_error("{% set ns = namespace(s='') %}{% for i in range(2000) %}{% set ns.s = ns.s ~ 'xxxxxxxxxx' %}{% endfor %}", &mem,
                 "too much memory");
    expect_error("{% for i in range(1000) %}{{ i }} {% endfor %}", &outl, "output too large");
    expect_error("{{ 'x' * 9223372036854775807 }}", NULL, "too large");

    /* chat_render argument checks */
    {
        cJSON *obj = cJSON_CreateObject();
        char *out = NULL;
        hearth_err err = {{0}};
        CHECK(chat_render("x", obj, NULL, NULL, true, NULL, &out, &err) == -1 && strstr(err.msg, "messages must be a JSON array"),
              "non-array messages: %s", err.msg);
        CHECK(chat_render(NULL, NULL, NULL, NULL, true, NULL, &out, &err) == -1, "NULL template should fail");
        cJSON_Delete(obj);
    }
}

/* Gemma 2's template refuses a system message with raise_exception; the message reaches the caller as is. */
static void test_template_raise(const cJSON *cases) {
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *name = str_field(c, "name");
        if (!name || strcmp(name, "gemma2")) continue;
        cJSON *msgs = cJSON_Parse("[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"u\"}]");
        char *out = NULL;
        hearth_err err = {{0}};
        CHECK(chat_render(str_field(c, "template"), msgs, "<bos>", "<eos>", true, NULL, &out, &err) == -1, "gemma2 with system should fail");
        CHECK(!strcmp(err.msg, "System role not supported"), "gemma2 error: %s", err.msg);
        cJSON_Delete(msgs);
        return;
    }
    CHECK(false, "no gemma2 fixture");
}

/* Undefined bos/eos stay undefined; extra variables override the defaults (tools=None, ...). */
static void test_chat_variables(void) {
    cJSON *msgs = cJSON_Parse("[{\"role\": \"user\", \"content\": \"hi\"}]");
    cJSON *extra = cJSON_Parse("{\"tools\": [{\"name\": \"t\"}], \"enable_thinking\": false}");
    char *out = NULL;
    hearth_err err = {{0}};
    int rc = chat_render("{{ bos_token is defined }}|{{ eos_token }}|{{ tools is none }}|{{ documents is none }}|"
                         "{{ add_generation_prompt }}|{{ messages[0].content }}", msgs, NULL, "E", false, NULL, &out, &err);
    CHECK(rc == 0 && !strcmp(out, "False|E|True|True|False|hi"), "chat variables: %s", rc ? err.msg : out);
    free(out);
    rc = chat_render("{{ tools|tojson }}|{{ enable_thinking }}", msgs, "", "", true, extra, &out, &err);
    CHECK(rc == 0 && !strcmp(out, "[{\"name\": \"t\"}]|False"), "extra variables: %s", rc ? err.msg : out);
    free(out);
    cJSON_Delete(msgs);
    cJSON_Delete(extra);
}

/* ---------------- 4. robustness ---------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* One random edit of the template: drop, duplicate or overwrite a span, or insert a Jinja fragment. */
static char *mutate(const char *src) {
    static const char *const bits[] = { "{%", "%}", "{{", "}}", "{#", "#}", "-", "+", "(", ")", "[", "]", "{", "}",
        "'", "\"", "\\", "|", "~", "**", "//", ".", ",", ":", "[::-1]", " if ", " else ", " for x in ", " endfor ",
        " endif ", "{% endif %}", "{% endfor %}", "{% else %}", "loop.", "namespace(", "range(99999)", "|tojson",
        "|join", "|map", " is defined", " not ", "raise_exception(", "caller()", "{% macro m() %}", "{% endmacro %}",
        "messages", "messages[0]", "\n", " ", "\xc3", "\xff", "0", "9223372036854775807", "1e308", "{% set ns.x = 1 %}",
        "{% raw %}", "{% endraw %}", "%s", "{}", "*", "%" };
    size_t n = strlen(src);
    char *out = malloc(2 * n + 64);
    size_t a = n ? (size_t)(rnd() % n) : 0, len = (size_t)(rnd() % 16) + 1;
    if (a + len > n) len = n - a;
    switch (rnd() % 4) {
    case 0: memcpy(out, src, a); memcpy(out + a, src + a + len, n - a - len + 1); break;   /* drop */
    case 1: memcpy(out, src, a + len); memcpy(out + a + len, src + a, n - a + 1); break;    /* duplicate */
    case 2:                                                                                 /* overwrite */
        memcpy(out, src, n + 1);
        for (size_t i = a; i < a + len; i++) out[i] = (char)(rnd() % 255 + 1);
        break;
    default: {                                                                              /* insert */
        const char *b = bits[rnd() % (sizeof bits / sizeof bits[0])];
        size_t lb = strlen(b);
        memcpy(out, src, a);
        memcpy(out + a, b, lb);
        memcpy(out + a + lb, src + a, n - a + 1);
    }
    }
    return out;
}

static void test_fuzz(const cJSON *cases, int per_template) {
    const char *seen[64];
    size_t nseen = 0;
    int renders = 0, ok = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *tmpl = str_field(c, "template");
        bool dup = false;
        for (size_t i = 0; i < nseen; i++) if (!strcmp(seen[i], tmpl)) dup = true;
        if (dup || nseen == 64) continue;
        seen[nseen++] = tmpl;
        for (int k = 0; k < per_template; k++) {
            char *t = strdup(tmpl);
            int edits = 1 + (int)(rnd() % 4);
            for (int e = 0; e < edits; e++) { char *m = mutate(t); free(t); t = m; }
            char *out = NULL;
            hearth_err err = {{0}};
            int rc = render_case(c, t, &out, &err);
            renders++;
            if (rc == 0) { ok++; CHECK(out != NULL, "success without output"); }
            else CHECK(err.msg[0] && !strchr(err.msg, '\n') && !out, "bad failure report: \"%s\"", err.msg);
            free(out);
            free(t);
        }
    }
    printf("fuzz: %d mutated templates, %d rendered, %d failed cleanly\n", renders, ok, renders - ok);
}

/* Messages whose fields have unexpected types: every fixture template must render or fail cleanly. */
static void test_odd_messages(const cJSON *cases) {
    static const char *const odd[] = {
        "[]", "[{}]", "[null]", "[1, \"x\", true]", "[{\"role\": 1, \"content\": 2}]",
        "[{\"role\": \"user\", \"content\": null}]", "[{\"role\": \"user\", \"content\": [1, {\"type\": \"text\"}]}]",
        "[{\"role\": \"assistant\", \"content\": \"x\", \"tool_calls\": \"notalist\"}]",
        "[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": 5, \"arguments\": [1]}}]}]",
        "[{\"role\": \"tool\", \"content\": {\"k\": \"v\"}}, {\"role\": \"tool\", \"content\": \"r\"}]",
        "[{\"role\": \"system\", \"content\": \"s\"}]", "[{\"role\": \"user\", \"content\": \"\\u0000\\u00ff\\ud83e\\udd99\"}]",
    };
    const cJSON *c;
    int n = 0;
    cJSON_ArrayForEach(c, cases) {
        for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
            cJSON *msgs = cJSON_Parse(odd[i]);
            REQUIRE(msgs, "bad odd message %zu", i);
            char *out = NULL;
            hearth_err err = {{0}};
            int rc = chat_render(str_field(c, "template"), msgs, "<s>", "</s>", true, NULL, &out, &err);
            CHECK(rc == 0 ? out != NULL : (err.msg[0] && !out), "odd messages %zu: bad result", i);
            free(out);
            cJSON_Delete(msgs);
            n++;
        }
    }
    printf("odd messages: %d renders\n", n);
}

int main(void) {
    setenv("HEARTH_FIXED_DATE", "2026-11-21", 1);
    char *json = tu_read_file("data/chat-templates.json", NULL);
    cJSON *cases = cJSON_Parse(json);
    REQUIRE(cJSON_IsArray(cases), "data/chat-templates.json is not a JSON array");
    test_fixtures(cases);
    char *json26 = tu_read_file("data/chat-templates-2026.json", NULL);
    cJSON *cases26 = cJSON_Parse(json26);
    REQUIRE(cJSON_IsArray(cases26) && cJSON_GetArraySize(cases26) >= 18, "data/chat-templates-2026.json: not the 18+ cases");
    test_fixtures(cases26);
    cJSON_Delete(cases26);
    free(json26);
    /* Gemma 4's own template (llama.cpp's copy of google/gemma-4-31B-it's), rendered by Jinja2 set up as the fixtures:
     * the enable_thinking switch (<|think|> in the system turn, or an empty thought channel after the prompt) and
     * its tool declarations */
    char *g4json = tu_read_file("data/chat-templates-gemma4.json", NULL);
    cJSON *g4 = cJSON_Parse(g4json);
    REQUIRE(cJSON_IsArray(g4), "data/chat-templates-gemma4.json is not a JSON array");
    test_fixtures(g4);
    cJSON_Delete(g4);
    free(g4json);
    test_features();
    test_errors();
    test_template_raise(cases);
    test_chat_variables();
    const char *iters = getenv("HEARTH_FUZZ_ITERS"), *seed = getenv("HEARTH_FUZZ_SEED");   /* for longer runs by hand */
    if (seed) rng_state = strtoull(seed, NULL, 0) | 1;
    test_fuzz(cases, iters ? atoi(iters) : 300);
    test_odd_messages(cases);
    cJSON_Delete(cases);
    free(json);
    TEST_DONE();
}
