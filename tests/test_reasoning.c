/* test_reasoning.c — replies split into reasoning and answer: the format read off real templates (gpt-oss's
 * harmony, Qwen3.5's <think>, Gemma 4's thought channel), each format's split on replies shaped as the models
 * write them, the same split whatever pieces the text arrives in (a stream), and the harmony vocabulary: <|end|>
 * closes a message, not the reply, and the message framing is shown as text. Also the reply grammar for a prompt
 * that opened a reasoning block (the block, its close, then the constrained reply), and Qwen3.5's XML tool calls
 * read back with their values typed by the tools' schemas. */
#include <string.h>

#include "generate/grammar.h"
#include "generate/reasoning.h"
#include "server/srv_internal.h"
#include "testutil.h"

typedef struct { reasoning_fmt f; bool in; const char *text, *reasoning, *content; } case_t;

static const case_t CASES[] = {
    { RF_THINK, false, "<think>\nLet me add.\n2+2=4.\n</think>\n\nThe answer is 4.", "Let me add.\n2+2=4.", "The answer is 4." },
    { RF_THINK, true, "The user greets.\n</think>\n\nHello!", "The user greets.", "Hello!" },
    { RF_THINK, false, "Hello <think> is a tag", "", "Hello <think> is a tag" },
    { RF_THINK, false, "  <think>unfinished thought  ", "unfinished thought", "" },
    { RF_THINK, false, "<thin", "", "<thin" },   /* an unfinished marker at the end is text */
    { RF_THINK, false, "\n\n<think>\n\n</think>\n\nJust this.", "", "Just this." },
    { RF_GEMMA4, false, "<|channel>thought\nCount the letters.<channel|>There are 3.", "Count the letters.", "There are 3." },
    { RF_HARMONY, false,
      "<|channel|>analysis<|message|>User asks 2+2. Answer 4.<|end|><|start|>assistant<|channel|>final<|message|>4",
      "User asks 2+2. Answer 4.", "4" },
    { RF_HARMONY, false,
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
      "<|constrain|>json<|message|>{\"city\":\"Paris\"}",
      "Need weather.", "" },
    { RF_HARMONY, false,
      "<|channel|>analysis<|message|>First.<|end|><|start|>assistant<|channel|>analysis<|message|>Second.<|end|>"
      "<|start|>assistant<|channel|>commentary<|message|>Checking. <|end|><|start|>assistant<|channel|>final<|message|>Done.",
      "First.\nSecond.", "Checking. Done." },
    { RF_HARMONY, false, "plain text, no channel", "", "plain text, no channel" },
    { RF_NONE, false, "<think>kept</think> as is", "", "<think>kept</think> as is" },
};

static void run(const case_t *c, const size_t *cuts, int n_cuts, const char *how) {
    reasoning_parser p;
    reasoning_init(&p, c->f, c->in);
    size_t n = strlen(c->text), at = 0;
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : n;
        reasoning_feed(&p, c->text + at, to - at);
        at = to;
    }
    reasoning_finish(&p);
    const char *r = p.reasoning.p ? p.reasoning.p : "", *t = p.content.p ? p.content.p : "";
    CHECK(!p.reasoning.oom && !p.content.oom, "oom");
    CHECK(p.reasoning.n == strlen(c->reasoning) && !memcmp(r, c->reasoning, p.reasoning.n),
          "%s: \"%s\": reasoning \"%.*s\", want \"%s\"", how, c->text, (int)p.reasoning.n, r, c->reasoning);
    CHECK(p.content.n == strlen(c->content) && !memcmp(t, c->content, p.content.n),
          "%s: \"%s\": content \"%.*s\", want \"%s\"", how, c->text, (int)p.content.n, t, c->content);
    reasoning_free(&p);
}

/* What a stream sends: after each piece, what has been emitted only grows (a prefix of the final output). */
static void run_prefixes(const case_t *c) {
    reasoning_parser p, whole;
    reasoning_init(&whole, c->f, c->in);
    reasoning_feed(&whole, c->text, strlen(c->text));
    reasoning_finish(&whole);
    reasoning_init(&p, c->f, c->in);
    for (size_t i = 0; c->text[i]; i++) {
        reasoning_feed(&p, c->text + i, 1);
        CHECK(p.reasoning.n <= whole.reasoning.n && (!p.reasoning.n || !memcmp(p.reasoning.p, whole.reasoning.p, p.reasoning.n)),
              "\"%s\" byte %zu: reasoning so far is not a prefix", c->text, i);
        CHECK(p.content.n <= whole.content.n && (!p.content.n || !memcmp(p.content.p, whole.content.p, p.content.n)),
              "\"%s\" byte %zu: content so far is not a prefix", c->text, i);
    }
    reasoning_free(&p);
    reasoning_free(&whole);
}

static void templates(void) {
    static const struct { const char *file; reasoning_fmt f; } T[] = {
        { "data/templates/gpt-oss.jinja", RF_HARMONY }, { "data/templates/qwen3.5.jinja", RF_THINK },
        { "data/templates/gemma4.jinja", RF_GEMMA4 },
    };
    for (size_t i = 0; i < sizeof T / sizeof *T; i++) {
        char *src = tu_read_file(T[i].file, NULL);
        CHECK(reasoning_detect(src) == T[i].f, "%s: format %d, want %d", T[i].file, reasoning_detect(src), T[i].f);
        free(src);
    }
    CHECK(reasoning_detect(NULL) == RF_NONE, "no template");
    CHECK(reasoning_detect("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}") == RF_NONE, "ChatML");
    /* Qwen3.5's generation prompt with thinking on opens the block; with it off the block is closed */
    const char *on = "<|im_start|>assistant\n<think>\n", *off = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    CHECK(reasoning_prompt_opens(RF_THINK, on, strlen(on)), "thinking on");
    CHECK(!reasoning_prompt_opens(RF_THINK, off, strlen(off)), "thinking off");
    const char *g_off = "<|turn>model\n<|channel>thought\n<channel|>";
    CHECK(!reasoning_prompt_opens(RF_GEMMA4, g_off, strlen(g_off)), "gemma 4 thinking off");
}

static void harmony_vocab(void) {
    hearth_model *m = tu_load_model("gpt-oss");
    hearth_token ids[8];
    hearth_err err;
    const char *names[] = { "<|end|>", "<|return|>", "<|call|>", "<|channel|>" };
    for (int i = 0; i < 4; i++) {
        int n = hearth_tokenize(m, names[i], strlen(names[i]), false, true, ids + i, 1, &err);
        REQUIRE(n == 1, "%s is one token", names[i]);
    }
    CHECK(!hearth_token_is_eog(m, ids[0]), "<|end|> ends a message, not the reply");
    CHECK(hearth_token_is_eog(m, ids[1]) && hearth_token_is_eog(m, ids[2]), "<|return|> and <|call|> end the reply");
    char buf[32];
    int k = hearth_token_piece(m, ids[3], buf, sizeof buf);
    CHECK(k == 11 && !memcmp(buf, "<|channel|>", 11), "<|channel|> is shown as text (%d bytes)", k);
    hearth_model_free(m);
}

static void grammar_after_reasoning(void) {
    char *g = tools_after_reasoning("root ::= \"{\" [a-z]* \"}\"\n", "</think>");
    REQUIRE(g, "out of memory");
    hearth_err err;
    gram *gr = gram_parse(g, &err);
    REQUIRE(gr, "%s: %s", g, err.msg);
    static const struct { const char *s; bool ok; } T[] = {
        { "Let me see.\n</think>\n\n{abc}", true }, { "</think>{x}", true }, { "{abc}", false },
        { "a</think>b</think>{a}", false }, { "a</think>\n{a} more", false },
    };
    for (size_t i = 0; i < sizeof T / sizeof *T; i++)
        CHECK(gram_matches(gr, T[i].s, strlen(T[i].s), true) == T[i].ok, "\"%s\" should %smatch", T[i].s, T[i].ok ? "" : "not ");
    CHECK(gram_matches(gr, "thinking <", 10, false), "a prefix inside the block");
    gram_free(gr);
    free(g);
}

static void xml_calls(void) {
    srv_tools tt = { .mode = TOOLS_REQUIRED, .fmt = TF_XML, .parallel = true };
    const char *params = "{\"get_weather\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
                         "\"days\":{\"type\":\"integer\"},\"opts\":{\"type\":\"object\"}}}}";
    const char *text = "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\n21\n</parameter>\n<parameter=days>\n3\n"
                       "</parameter>\n<parameter=opts>\n{\"a\": [1]}\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
                       "<function=get_weather>\n<parameter=city>\nmulti\nline";   /* the second call cut short */
    char *content = NULL;
    cJSON *calls = tools_parse(&tt, params, text, strlen(text), &content);
    REQUIRE(calls, "out of memory");
    CHECK(cJSON_GetArraySize(calls) == 1, "one whole call (the cut one dropped): %d", cJSON_GetArraySize(calls));
    const cJSON *f = cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "function");
    const char *args = cJSON_GetStringValue(cJSON_GetObjectItem(f, "arguments"));
    CHECK(args && !strcmp(args, "{\"city\":\"21\",\"days\":3,\"opts\":{\"a\":[1]}}"), "typed arguments: %s", args ? args : "(none)");
    CHECK(content && !strcmp(content, "Checking."), "the text before the calls: %s", content ? content : "(none)");
    free(content);
    cJSON_Delete(calls);
}

/* Gemma 4's calls: the grammar made from a schema accepts the template's own rendering of a call (keys sorted,
 * strings between <|"|>, nested objects and arrays) and not a call missing a required key; parsed back typed,
 * a string holding the closing text included. */
static void gemma4_calls(void) {
    const char *req = "{\"tool_choice\": \"required\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"plan\", "
                      "\"parameters\": {\"type\": \"object\", \"properties\": {\"zone\": {\"type\": \"string\"}, \"days\": "
                      "{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 9}, \"opts\": {\"type\": \"object\", \"properties\": "
                      "{\"unit\": {\"enum\": [\"C\", \"F\"]}, \"hourly\": {\"type\": \"boolean\"}}, \"required\": [\"unit\"]}, "
                      "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}}, \"required\": [\"zone\", \"days\"]}}}]}";
    hearth_err err;
    hearth_model *m = tu_load_model("llama");
    chat_fmt *fmt;
    char *tmpl = tu_read_file("data/templates/gemma4.jinja", NULL);
    REQUIRE(!chat_fmt_new(m, tmpl, &fmt, &err), "%s", err.msg);
    srv_api a = { .m = m, .fmt = fmt };
    cJSON *o = cJSON_Parse(req), *msgs = cJSON_CreateArray();
    srv_tools tt;
    char *gbnf = NULL, *params = NULL;
    REQUIRE(!tools_prepare(&a, o, msgs, &tt, &gbnf, &params, &err), "%s", err.msg);
    CHECK(tt.fmt == TF_GEMMA4, "format %d", tt.fmt);
    gram *g = gram_parse(gbnf, &err);
    REQUIRE(g, "%s\n%s", err.msg, gbnf);
    const char *ok = "<|tool_call>call:plan{days:3,opts:{hourly:true,unit:<|\"|>C<|\"|>},tags:[<|\"|>a b<|\"|>,<|\"|>c<tool_call|><|\"|>],"
                     "zone:<|\"|>Europe/Paris<|\"|>}<tool_call|>";
    const char *bad[] = { "<|tool_call>call:plan{days:3}<tool_call|>", "<|tool_call>call:plan{zone:<|\"|>x<|\"|>,days:3}<tool_call|>",
                          "<|tool_call>call:plan{days:10,zone:<|\"|>x<|\"|>}<tool_call|>",
                          "<|tool_call>call:plan{days:3,opts:{hourly:true},zone:<|\"|>x<|\"|>}<tool_call|>" };
    CHECK(gram_matches(g, ok, strlen(ok), true), "the template's form of a call: %s\n%s", ok, gbnf);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK(!gram_matches(g, bad[i], strlen(bad[i]), true), "accepted %s", bad[i]);
    char *content = NULL;
    cJSON *calls = tools_parse(&tt, params, ok, strlen(ok), &content);
    REQUIRE(calls && cJSON_GetArraySize(calls) == 1, "one call");
    const char *args = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(calls, 0), "function"), "arguments"));
    CHECK(args && !strcmp(args, "{\"days\":3,\"opts\":{\"hourly\":true,\"unit\":\"C\"},\"tags\":[\"a b\",\"c<tool_call|>\"],\"zone\":\"Europe/Paris\"}"),
          "arguments %s", args ? args : "(none)");
    cJSON_Delete(calls);
    free(content);
    gram_free(g);
    free(gbnf);
    free(params);
    cJSON_Delete(o);
    cJSON_Delete(msgs);
    chat_fmt_free(fmt);
    free(tmpl);
    hearth_model_free(m);
}

int main(void) {
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        const case_t *c = &CASES[i];
        size_t n = strlen(c->text);
        run(c, NULL, 0, "whole");
        for (size_t a = 1; a < n; a++) run(c, &a, 1, "two pieces");
        size_t *every = malloc(n * sizeof *every);
        for (size_t a = 0; a + 1 < n; a++) every[a] = a + 1;
        if (n) run(c, every, (int)n - 1, "byte by byte");
        free(every);
        run_prefixes(c);
    }
    templates();
    harmony_vocab();
    grammar_after_reasoning();
    xml_calls();
    gemma4_calls();
    TEST_DONE();
}
