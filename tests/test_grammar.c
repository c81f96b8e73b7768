/* test_grammar.c — the grammar engine (src/generate/grammar.c) and JSON Schema conversion (json_schema.c):
 * GBNF accept/reject tables, errors, schemas against instances that must and must not match, refused keywords,
 * and, on the stories260K vocabulary, the token masks: at every step of a sampled reply the mask equals the
 * whole-string check of every token, and the finished reply is a sentence of the grammar. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "generate/grammar.h"
#include "hearth.h"
#include "testutil.h"

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"   /* the tables leave trailing fields out */

static void gbnf_tables(void) {
    static const struct { const char *g, *s; int complete, prefix; } T[] = {
        { "root ::= \"a\" [b-d]* (\"x\" | \"yz\")?", "abbbyz", 1, 1 },
        { "root ::= \"a\" [b-d]* (\"x\" | \"yz\")?", "ay", 0, 1 },
        { "root ::= \"a\" [b-d]* (\"x\" | \"yz\")?", "ae", 0, 0 },
        { "root ::= \"a\" [b-d]* (\"x\" | \"yz\")?", "", 0, 1 },
        { "root ::= [^a]+ \"\xc3\xa9\"", "b\xc3\xa9", 1, 1 },
        { "root ::= [^a]+ \"\xc3\xa9\"", "a\xc3\xa9", 0, 0 },
        { "root ::= [^a]+ \"\xc3\xa9\"", "\xc3\xa9\xc3\xa9", 1, 1 },
        { "root ::= [^a]+ \"\xc3\xa9\"", "\xc3", 0, 1 },          /* half a character is a prefix */
        { "root ::= [^a]+", "\xed\xa0\x80", 0, 0 },               /* a surrogate is not a character */
        { "root ::= [^a]+", "\xf4\x8f\xbf\xbf", 1, 1 },           /* U+10FFFF is */
        { "root ::= .", "\xf0\x9f\x98\x80", 1, 1 },
        { "root ::= x{2,3}\nx ::= \"ab\"", "ab", 0, 1 },
        { "root ::= x{2,3}\nx ::= \"ab\"", "ababab", 1, 1 },
        { "root ::= x{2,3}\nx ::= \"ab\"", "abababab", 0, 0 },
        { "root ::= x{2,}\nx ::= \"ab\"", "abababababab", 1, 1 },
        { "root ::= [0-9]{0,2} \"!\"", "12!", 1, 1 },
        { "root ::= [0-9]{0,2} \"!\"", "123!", 0, 0 },
        { "root ::= x | y\n  | \"z\"  # comment\nx ::= \"x\" (\n  \"1\" |\n  \"2\")\ny ::= \"y\"", "x2", 1, 1 },
        { "root ::= x | y\n  | \"z\"  # comment\nx ::= \"x\" (\n  \"1\" |\n  \"2\")\ny ::= \"y\"", "z", 1, 1 },
        { "root ::= \"\\x41\\u00e9\\n\\\"\"", "A\xc3\xa9\n\"", 1, 1 },
        { "root ::= [\\]\\-] +", "]-]", 1, 1 },
        { "root ::= (\"a\" root \"b\")?", "aaabbb", 1, 1 },       /* recursion (balanced) */
        { "root ::= (\"a\" root \"b\")?", "aaabb", 0, 1 },
        { "root ::= (\"a\" root \"b\")?", "aabbb", 0, 0 },
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        hearth_err err;
        gram *g = gram_parse(T[i].g, &err);
        REQUIRE(g, "grammar %zu: %s", i, err.msg);
        size_t n = strlen(T[i].s);
        CHECK(gram_matches(g, T[i].s, n, true) == (bool)T[i].complete, "case %zu '%s': complete", i, T[i].s);
        CHECK(gram_matches(g, T[i].s, n, false) == (bool)T[i].prefix, "case %zu '%s': prefix", i, T[i].s);
        gram_free(g);
    }
}

static void gbnf_errors(void) {
    static const struct { const char *g, *msg; } E[] = {
        { "root ::= root \"a\"", "left recursion" },
        { "root ::= (\"a\"?)*", "left recursion" },
        { "root ::= \"a\" b", "'b' is used but not defined" },
        { "root ::= [z-a]", "out of order" },
        { "root ::= \"abc", "unterminated string" },
        { "root ::= [abc", "unterminated character class" },
        { "x ::= \"a\"", "no 'root' rule" },
        { "root ::= \"a\"\nroot ::= \"b\"", "defined twice" },
        { "root ::= \"a\"{3,2}", "max below min" },
        { "root ::= \"a\"{99999}", "above" },
        { "root := \"a\"", "expected '::='" },
        { "root ::= (\"a\"", "expected ')'" },
        { "root ::= \"\\xZZ\"", "bad \\x escape" },
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) {
        hearth_err err = { "" };
        gram *g = gram_parse(E[i].g, &err);
        CHECK(!g && strstr(err.msg, E[i].msg), "error %zu: got '%s', want '%s'", i, g ? "(accepted)" : err.msg, E[i].msg);
        CHECK(!strchr(err.msg, '\n'), "error %zu: one line", i);
        gram_free(g);
    }
}

/* Each schema with instances that must match (+) and must not (-), or a refusal naming a keyword. */
static const struct { const char *schema; const char *yes[6], *no[6]; const char *refused; } S[] = {
    { "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
      "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}},\"required\":[\"name\",\"age\"],"
      "\"additionalProperties\":false}",
      { "{\"name\":\"bob\",\"age\":42}", "{ \"name\": \"\", \"age\": 150 }", "{\"name\":\"\\u00e9\",\"age\":0}" },
      { "{\"name\":\"bob\",\"age\":151}", "{\"name\":\"bobbby\",\"age\":1}", "{\"age\":1,\"name\":\"x\"}",
        "{\"name\":\"bob\"}", "{\"name\":\"bob\",\"age\":1,\"x\":1}", "{\"name\":\"bob\",\"age\":-1}" } },
    { "{\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"null\"},\"c\":{\"enum\":[\"x\",2,[1]]}}}",
      { "{}", "{\"b\":null}", "{\"a\":true,\"c\":[1]}", "{\"c\":2}" },
      { "{\"c\":3}", "{\"b\":null,\"a\":true}", "{,}", "{\"a\":1}" } },
    { "{\"type\":\"array\",\"items\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":2},\"minItems\":1,\"maxItems\":3}",
      { "[1]", "[0.5, 2, 1.25]", "[2]" },
      { "[]", "[0]", "[2.5]", "[1,1,1,1]", "[-1]", "[1e3]" } },
    { "{\"type\":\"integer\",\"minimum\":-12,\"exclusiveMaximum\":1000}",
      { "-12", "-1", "0", "7", "999" }, { "-13", "1000", "-0", "01", "1.5" } },
    { "{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3,4}$\"}",
      { "\"AB-123\"", "\"ZZ-0000\"" }, { "\"AB-12\"", "\"ab-123\"", "\"AB-12345\"" } },
    { "{\"type\":\"string\",\"pattern\":\"b+\"}",   /* unanchored: contains */
      { "\"abba\"", "\"b\"" }, { "\"aaa\"", "\"\"" } },
    { "{\"type\":\"string\",\"format\":\"date\"}", { "\"2024-02-28\"" }, { "\"2024-13-01\"", "\"2024-1-01\"" } },
    { "{\"type\":\"string\",\"format\":\"uuid\"}", { "\"123e4567-e89b-12d3-a456-426614174000\"" }, { "\"123\"" } },
    { "{\"type\":\"string\",\"format\":\"ipv4\"}", { "\"192.168.0.255\"" }, { "\"256.1.1.1\"", "\"1.2.3\"" } },
    { "{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", { "\"a\"", "3" }, { "3.5", "null" } },
    { "{\"anyOf\":[{\"$ref\":\"#/definitions/p\"},{\"type\":\"null\"}],\"definitions\":{\"p\":{\"type\":\"object\","
      "\"properties\":{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"]}}}",
      { "null", "{\"x\":1}" }, { "{}", "{\"x\":\"1\"}" } },
    { "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}},"
      "\"required\":[\"k\"]}},\"$ref\":\"#/$defs/n\"}",
      { "{\"k\":[]}", "{\"k\":[{\"k\":[{\"k\":[]}]}]}" }, { "{\"k\":[{}]}" } },
    { "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]},"
      "{\"properties\":{\"b\":{\"type\":\"integer\"}},\"required\":[\"b\"]}]}",
      { "{\"a\":\"x\",\"b\":1}" }, { "{\"a\":\"x\"}", "{\"b\":1}" } },
    { "{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"uniqueItems\":true}", { "[]", "[\"a\"]" }, { "[\"a\",\"b\"]" } },
    { "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"},\"maxProperties\":2}",
      { "{}", "{\"a\":1,\"b\":2}" }, { "{\"a\":\"x\"}", "{\"a\":1,\"b\":2,\"c\":3}" } },
    { "{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}}", { 0 }, { 0 }, "\"not\"" },   /* nothing matches */
    { "{\"type\":\"number\",\"multipleOf\":0.5}", { "0", "1.5", "-2", "3.5" }, { "1.25", "0.3", "1.50" } },
    { "{\"type\":\"number\",\"multipleOf\":0.25,\"minimum\":0,\"maximum\":2000}",   /* fraction endings, whole-part bounds */
      { "0.75", "1999.25", "2000", "0" }, { "0.3", "-0.25", "2000.5", "0.125" } },
    { "{\"type\":\"number\",\"multipleOf\":2.5}", { "0", "2.5", "-7.5", "10", "12.5", "100" }, { "1", "2.25", "3.5", "5.5", "-2" } },
    { "{\"type\":\"number\",\"multipleOf\":0.3,\"exclusiveMinimum\":0}", { "0.3", "0.9", "1.2", "3", "300.3" },
      { "0", "0.4", "-0.3", "1.3", "0.30" } },
    { "{\"type\":\"number\",\"multipleOf\":0.05,\"minimum\":0.1,\"exclusiveMaximum\":0.3}",   /* few: listed */
      { "0.1", "0.15", "0.25" }, { "0.05", "0.3", "0.12", "0.35" } },
    { "{\"type\":\"number\",\"multipleOf\":1.5,\"minimum\":3,\"maximum\":100000}", { 0 }, { 0 }, "multipleOf" },
    { "{\"type\":\"integer\",\"multipleOf\":2.5}", { "5", "-10", "0" }, { "2.5", "3" } },
    { "{\"type\":\"number\",\"multipleOf\":1e-12}", { 0 }, { 0 }, "multipleOf" },
    { "{\"type\":\"number\",\"exclusiveMinimum\":1e15}", { 0 }, { 0 }, "minimum" },   /* was a grammar that did not parse */
    { "{\"type\":\"number\",\"multipleOf\":1}", { "0", "-3", "12" }, { "1.5", "0.1", "1e3" } },   /* 1.5 was written */
    /* a required key without its own schema: written, with additionalProperties' (it used to be left out) */
    { "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"b\"],\"additionalProperties\":{\"type\":\"string\"}}",
      { "{\"b\":\"x\"}", "{\"a\":1,\"b\":\"x\"}" }, { "{}", "{\"a\":1}", "{\"b\":1}" } },
    { "{\"type\":\"object\",\"required\":[\"id\"]}", { "{\"id\":1}", "{\"id\":[]}" }, { "{}" } },
    { "{\"type\":\"object\",\"patternProperties\":{\"^x\":{\"type\":\"integer\"}},\"required\":[\"xid\"],\"additionalProperties\":false}",
      { "{\"xid\":1}" }, { "{}", "{\"xid\":\"1\"}" } },
    { "{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"],\"additionalProperties\":false}", { 0 }, { 0 }, "'b'" },
    { "{\"type\":\"number\",\"exclusiveMaximum\":0}", { "-0.5", "-3", "-0.01" }, { "-0", "-0.0", "0", "0.5" } },   /* -0 is 0 */
    { "{\"type\":\"integer\",\"multipleOf\":7}", { "0", "14", "-21", "700" }, { "15", "-1", "0014", "7.0" } },
    { "{\"type\":\"integer\",\"multipleOf\":5,\"exclusiveMinimum\":0}", { "5", "1000" }, { "0", "-5", "4" } },
    { "{\"type\":\"integer\",\"multipleOf\":15,\"minimum\":0,\"maximum\":60}", { "0", "45", "60" }, { "50", "75", "-15" } },
    { "{\"type\":\"number\",\"multipleOf\":0.01,\"minimum\":0}", { "1.25", "3", "0.5" }, { "1.255", "-1" } },
    { "{\"type\":\"integer\",\"multipleOf\":3,\"minimum\":10}", { 0 }, { 0 }, "multipleOf" },
    { "{\"type\":\"integer\",\"multipleOf\":3,\"maximum\":12}", { 0 }, { 0 }, "multipleOf" },   /* 15 was written */
    { "{\"type\":\"integer\",\"multipleOf\":3,\"minimum\":-30}", { 0 }, { 0 }, "multipleOf" },
    { "{\"type\":\"integer\",\"multipleOf\":4,\"maximum\":-4}", { "-4", "-400" }, { "0", "-2", "4" } },
    { "{\"type\":\"integer\",\"minimum\":-9223372036854775808,\"maximum\":9223372036854775807}",
      { "5", "-999999999999999" }, { "1.5" } },
    { "{\"properties\":{\"a\":{},\"b\":{},\"c\":{}},\"minProperties\":2}", { "{\"a\":1,\"b\":2}" }, { "{\"a\":1}", "{}" } },
    { "{\"type\":\"string\",\"format\":\"regex\"}", { 0 }, { 0 }, "'regex'" },
    { "{\"oneOf\":[{\"type\":\"object\"},{\"type\":\"object\",\"properties\":{\"b\":{}}}]}", { 0 }, { 0 }, "oneOf" },
    /* oneOf made exclusive: a key only one allows (made required, so {} - which both match - is never written) */
    { "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"additionalProperties\":false},"
      "{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"integer\"}},\"additionalProperties\":false}]}",
      { "{\"a\":\"x\"}", "{\"b\":1}" }, { "{}", "{\"a\":\"x\",\"b\":1}", "{\"b\":\"x\"}" } },
    /* a discriminating const, not required by the schema: required in the grammar */
    { "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}}},"
      "{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"b\"},\"y\":{\"type\":\"string\"}}}]}",
      { "{\"kind\":\"a\",\"x\":1}", "{\"kind\":\"b\"}", "{\"kind\":\"b\",\"y\":\"s\"}" },
      { "{}", "{\"x\":1}", "{\"y\":\"s\"}", "{\"kind\":\"c\"}" } },
    /* alternatives without "type" through $ref (they would also match any string: written as objects only) */
    { "{\"$defs\":{\"c\":{\"properties\":{\"t\":{\"const\":\"c\"},\"r\":{\"type\":\"number\"}},\"required\":[\"t\"]},"
      "\"s\":{\"properties\":{\"t\":{\"enum\":[\"s\",\"q\"]}},\"required\":[\"t\"]}},\"oneOf\":[{\"$ref\":\"#/$defs/c\"},{\"$ref\":\"#/$defs/s\"}]}",
      { "{\"t\":\"c\",\"r\":1}", "{\"t\":\"q\"}" }, { "\"abc\"", "{\"t\":\"x\"}", "{}" } },
    /* the outer keywords apply to every alternative; the discriminator is in the alternatives */
    { "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},\"required\":[\"id\"],\"oneOf\":["
      "{\"properties\":{\"kind\":{\"const\":\"a\"}},\"required\":[\"kind\"]},{\"properties\":{\"kind\":{\"const\":\"b\"},\"n\":{}}}]}",
      { "{\"id\":1,\"kind\":\"a\"}", "{\"id\":1,\"kind\":\"b\",\"n\":null}", "{\"id\":1}" },   /* only the second allows no kind */
      { "{\"id\":1,\"kind\":\"c\"}", "{\"kind\":\"a\"}" } },
    { "{\"oneOf\":[{\"enum\":[\"a\",\"b\"]},{\"enum\":[\"c\",1]}]}", { "\"a\"", "1" }, { "\"d\"" } },
    { "{\"oneOf\":[{\"enum\":[\"a\",\"b\"]},{\"enum\":[\"b\",\"c\"]}]}", { 0 }, { 0 }, "oneOf" },   /* "b" matches both */
    /* integer vs number: a whole number matches both, so only numbers with a fraction are valid */
    { "{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}", { "1.5", "-0.25", "3.01", "0.5" },
      { "1", "1.0", "0", "-2", "1e2", "-0.0" } },
    { "{\"oneOf\":[{\"type\":\"number\",\"minimum\":-1,\"maximum\":2},{\"type\":\"integer\"}]}",   /* integers past the bounds */
      { 0 }, { 0 }, "oneOf" },
    { "{\"oneOf\":[{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":2},{\"type\":\"integer\",\"minimum\":5},{\"type\":\"number\"}]}",
      { 0 }, { 0 }, "oneOf" },
    { "{\"type\":[\"number\",\"string\"],\"oneOf\":[{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":2},{\"type\":\"integer\"}]}",
      { 0 }, { 0 }, "oneOf" },
    { "{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"number\",\"multipleOf\":0.5},{\"type\":\"integer\"}]}",
      { "1.5", "-0.5", "\"x\"" }, { "1", "0.25", "2.0", "0" } },
    { "{\"oneOf\":[{\"type\":\"number\",\"multipleOf\":0.25,\"minimum\":0,\"maximum\":1},{\"type\":\"integer\"}]}",
      { 0 }, { 0 }, "oneOf" },   /* 0 and 1 match both, 2 only the second */
    { "{\"oneOf\":[{\"type\":\"number\",\"multipleOf\":1},{\"type\":\"integer\"}]}", { 0 }, { 0 }, "oneOf" },
    /* numbers apart by their bounds */
    { "{\"oneOf\":[{\"type\":\"integer\",\"maximum\":0},{\"type\":\"integer\",\"minimum\":1}]}", { "0", "-3", "1", "7" }, { "0.5", "\"1\"" } },
    { "{\"oneOf\":[{\"type\":\"number\",\"exclusiveMaximum\":0},{\"type\":\"integer\",\"minimum\":0}]}",
      { "-0.5", "0", "3" }, { "0.5", "-0" } },
    { "{\"oneOf\":[{\"type\":\"number\",\"maximum\":0},{\"type\":\"integer\",\"minimum\":0}]}", { 0 }, { 0 }, "oneOf" },   /* 0 */
    { "{\"oneOf\":[{\"type\":\"integer\"},{\"enum\":[1.0,\"x\"]}]}", { 0 }, { 0 }, "oneOf" },
    /* a required key the other one allows through patternProperties: both match {"xa":1} */
    { "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"xa\":{\"type\":\"integer\"}},\"required\":[\"xa\"]},"
      "{\"type\":\"object\",\"patternProperties\":{\"^x\":{}},\"additionalProperties\":false}]}", { 0 }, { 0 }, "oneOf" },
    /* no type on the other side: a string matches both ("properties" constrains objects only) */
    { "{\"oneOf\":[{\"type\":\"string\"},{\"properties\":{\"a\":{}}}]}", { 0 }, { 0 }, "oneOf" },
    { "{\"type\":\"string\",\"pattern\":\"(?=a)\"}", { 0 }, { 0 }, "lookaround" },
    { "{\"$ref\":\"http://example.com/s.json\"}", { 0 }, { 0 }, "local" },
    { "{\"type\":\"object\",\"patternProperties\":{\"^x\":{\"type\":\"integer\"}}}",
      { "{}", "{\"x\":1}", "{\"xa\":1,\"xb\":2}" }, { "{\"a\":1}", "{\"x\":\"1\"}" } },
    { "{\"properties\":{\"x_a\":{\"type\":\"number\"},\"b\":{}},\"patternProperties\":{\"^x_\":{\"minimum\":0,\"type\":\"integer\"}}}",
      { "{\"x_a\":3}", "{\"b\":1}" }, { "{\"x_a\":-1}", "{\"x_a\":1.5}" } },
    { "{\"type\":\"object\",\"propertyNames\":{\"pattern\":\"^[a-z]{1,8}$\"},\"additionalProperties\":{\"type\":\"boolean\"}}",
      { "{\"abc\":true}", "{}" }, { "{\"ABC\":true}", "{\"abcdefghi\":true}", "{\"a\":1}" } },
    { "{\"properties\":{\"Bad\":{},\"ok\":{}},\"propertyNames\":{\"maxLength\":2}}", { "{\"ok\":1}" }, { "{\"Bad\":1}" } },
    { "{\"properties\":{\"Bad\":{}},\"required\":[\"Bad\"],\"propertyNames\":{\"maxLength\":2}}", { 0 }, { 0 }, "propertyNames" },
    { "{\"properties\":{\"card\":{},\"bill\":{}},\"dependentRequired\":{\"card\":[\"bill\"]}}",
      { "{\"card\":1,\"bill\":2}", "{\"bill\":2}" }, { "{\"card\":1}" } },
    { "{\"properties\":{\"card\":{},\"bill\":{}},\"dependencies\":{\"card\":{\"required\":[\"bill\"]}}}",
      { "{\"card\":1,\"bill\":2}" }, { "{\"card\":1}" } },
    { "{\"properties\":{\"card\":{},\"bill\":{}},\"dependentSchemas\":{\"card\":{\"properties\":{\"bill\":{\"type\":\"string\"}}}}}",
      { "{\"card\":1,\"bill\":\"x\"}", "{\"card\":1}" }, { "{\"card\":1,\"bill\":2}" } },
    { "{\"properties\":{\"a\":{},\"b\":{}},\"required\":[\"a\"],\"not\":{\"required\":[\"a\",\"b\"]}}",
      { "{\"a\":1}" }, { "{\"a\":1,\"b\":2}" } },
    { "{\"type\":[\"string\",\"null\"],\"not\":{\"type\":\"null\"}}", { "\"x\"" }, { "null" } },
    { "{\"enum\":[\"a\",\"b\"],\"not\":{\"enum\":[\"b\"]}}", { "\"a\"" }, { "\"b\"" } },
    /* a true alternative beside other keywords is those keywords (it was written as any value) */
    { "{\"type\":\"integer\",\"anyOf\":[true,{\"minimum\":5}]}", { "1", "7" }, { "\"a\"", "1.5", "null" } },
    /* not beside anyOf: applied within each alternative (one of two keys, never both) */
    { "{\"type\":\"object\",\"properties\":{\"card\":{},\"iban\":{}},\"not\":{\"required\":[\"card\",\"iban\"]},"
      "\"anyOf\":[{\"required\":[\"card\"]},{\"required\":[\"iban\"]}]}",
      { "{\"card\":1}", "{\"iban\":2}" }, { "{}", "{\"card\":1,\"iban\":2}" } },
    /* not of one numeric bound: the opposite bound on numbers (no "type": numbers only, stricter) */
    { "{\"not\":{\"minimum\":3}}", { "2", "-1", "2.99" }, { "3", "4", "3.0" } },
    { "{\"type\":\"integer\",\"minimum\":0,\"not\":{\"exclusiveMaximum\":5}}", { "5", "99" }, { "4", "0", "-5" } },
    { "{\"type\":[\"number\",\"string\"],\"maximum\":10,\"not\":{\"maximum\":2}}", { "2.5", "10", "\"x\"" }, { "2", "1", "10.5" } },
    { "{\"type\":\"number\",\"not\":{\"exclusiveMinimum\":-1}}", { "-1", "-7.5" }, { "0", "-0.5" } },
    { "{\"type\":\"number\",\"maximum\":5,\"exclusiveMaximum\":true,\"not\":{\"minimum\":1}}", { 0 }, { 0 }, "draft-04" },
    { "{\"type\":\"string\",\"not\":{\"minLength\":3}}", { "\"\"", "\"ab\"" }, { "\"abc\"", "\"abcd\"" } },
    { "{\"type\":[\"string\",\"null\"],\"maxLength\":6,\"not\":{\"maxLength\":3}}", { "\"abcd\"", "null" }, { "\"abc\"", "\"abcdefg\"" } },
    { "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"not\":{\"maxItems\":1}}", { "[1,2]", "[1,2,3]" }, { "[]", "[1]" } },
    { "{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"not\":{\"maxProperties\":0}}", { "{\"a\":1}", "{\"a\":1,\"b\":2}" }, { "{}" } },
    { "{\"type\":\"string\",\"not\":{\"minLength\":0}}", { 0 }, { 0 }, "\"not\"" },
    /* found by checking random schemas' grammars against a validator: */
    { "{\"type\":\"object\",\"oneOf\":[{\"const\":2},{\"type\":\"object\",\"minProperties\":1}]}",   /* const beside a type */
      { "{\"a\":1}" }, { "2", "{}" } },
    { "{\"type\":\"integer\",\"enum\":[1,5,\"x\",2.5],\"minimum\":3}", { "5" }, { "1", "\"x\"", "2.5" } },
    { "{\"type\":\"string\",\"enum\":[\"ab\",\"abcd\"],\"maxLength\":3,\"pattern\":\"^a\"}", { "\"ab\"" }, { "\"abcd\"" } },
    { "{\"const\":1,\"enum\":[2,3]}", { 0 }, { 0 }, "const" },
    { "{\"type\":\"object\",\"properties\":{},\"not\":{\"required\":[\"a\"]}}", { 0 }, { 0 }, "\"not\"" },   /* a map */
    { "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{}},\"if\":{\"required\":[\"a\"]},\"then\":{},"
      "\"else\":{\"properties\":{\"a\":{\"enum\":[\"y\"]}}}}",   /* the else's a was declared again */
      { "{\"a\":true}", "{\"b\":1}" }, { "{\"a\":\"y\"}" } },
    { "{\"properties\":{\"kind\":{\"enum\":[null]}},\"not\":{\"required\":[\"kind\"]}}", { "{}" }, { "{\"kind\":\"x\"}", "{\"kind\":null}" } },
    /* a required key without a schema is written: a "not" of it cannot count it as never there */
    { "{\"properties\":{\"a\":{\"enum\":[\"x\",true]}},\"type\":\"object\",\"required\":[\"a\",\"kind\"],\"not\":{\"required\":[\"kind\"]}}",
      { 0 }, { 0 }, "\"not\"" },
    { "{\"properties\":{\"c\":{}},\"required\":[\"a\"],\"not\":{\"properties\":{\"a\":{\"const\":2}},\"required\":[\"a\"]}}",
      { "{\"a\":1}", "{\"c\":1,\"a\":\"x\"}" }, { "{\"a\":2}", "{\"c\":1}" } },
    /* not const/enum on a type without a value list */
    { "{\"type\":\"string\",\"not\":{\"const\":\"\"}}", { "\"a\"", "\"ab c\"" }, { "\"\"" } },
    { "{\"type\":\"string\",\"not\":{\"enum\":[\"admin\",\"root\",\"ad\"]}}",
      { "\"a\"", "\"adm\"", "\"admins\"", "\"roo\"", "\"\"", "\"x\"" }, { "\"admin\"", "\"root\"", "\"ad\"" } },
    { "{\"type\":\"string\",\"maxLength\":3,\"not\":{\"const\":\"x\"}}", { 0 }, { 0 }, "\"not\"" },
    { "{\"type\":\"string\",\"not\":{\"const\":\"a\\\"b\"}}", { 0 }, { 0 }, "\"not\"" },
    { "{\"type\":\"integer\",\"minimum\":0,\"maximum\":10,\"not\":{\"enum\":[0,5,10,11,2.5]}}",
      { "1", "4", "6", "9" }, { "0", "5", "10", "11", "-1" } },
    { "{\"type\":\"integer\",\"not\":{\"const\":0}}", { "1", "-1", "100" }, { "0", "-0" } },
    { "{\"type\":\"number\",\"not\":{\"enum\":[0.2,0.4]},\"exclusiveMinimum\":-5}", { "0", "-3", "1.5" }, { "0.2", "0.4", "0.3", "-5", "-6" } },
    /* within one whole unit of a bound: no fraction that could pass the other (0.9 > 0.5 was written) */
    { "{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":0.5}", { 0 }, { 0 }, "bounds" },
    { "{\"type\":\"number\",\"exclusiveMinimum\":-0.5,\"exclusiveMaximum\":0}", { 0 }, { 0 }, "bounds" },
    { "{\"type\":\"number\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":1.5}", { "0.5", "1", "0.99" }, { "0", "1.5", "1.7" } },
    { "{\"type\":\"number\",\"not\":{\"const\":0}}", { "0.5", "-0.5", "3" }, { "0", "-0", "0.0", "-0.00" } },
    { "{\"type\":[\"string\",\"null\"],\"not\":{\"const\":\"none\"}}", { "null", "\"non\"", "\"nonee\"" }, { "\"none\"" } },
    { "{\"type\":[\"integer\",\"null\"],\"not\":{\"const\":null}}", { "1" }, { "null" } },
    { "{\"type\":\"boolean\",\"not\":{\"const\":false}}", { "true" }, { "false" } },
    { "{\"type\":\"boolean\",\"not\":{\"enum\":[false,true]}}", { 0 }, { 0 }, "\"not\"" },
    /* not {properties: {k: S}}: k's value not in S (and there, without required) */
    { "{\"type\":\"object\",\"properties\":{\"role\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}},"
      "\"not\":{\"properties\":{\"role\":{\"const\":\"admin\"}},\"required\":[\"role\"]}}",
      { "{}", "{\"n\":1}", "{\"role\":\"user\"}" }, { "{\"role\":\"admin\"}", "{\"role\":\"admin\",\"n\":1}" } },
    { "{\"type\":\"object\",\"properties\":{\"kind\":{\"enum\":[\"a\",\"b\"]}},\"not\":{\"properties\":{\"kind\":{\"const\":\"a\"}}}}",
      { "{\"kind\":\"b\"}" }, { "{}", "{\"kind\":\"a\"}" } },
    /* if on required keys, on a type, on a property's schema that "not" reads */
    { "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"integer\"}},\"if\":{\"required\":[\"a\"]},"
      "\"then\":{\"required\":[\"b\"]}}", { "{\"a\":\"x\",\"b\":1}", "{}", "{\"b\":2}" }, { "{\"a\":\"x\"}" } },
    { "{\"type\":[\"string\",\"integer\"],\"if\":{\"type\":\"string\"},\"then\":{\"maxLength\":3},\"else\":{\"minimum\":0}}",
      { "\"abc\"", "0", "7" }, { "\"abcd\"", "-1", "1.5" } },
    { "{\"type\":\"object\",\"properties\":{\"unit\":{\"type\":\"string\"},\"v\":{\"type\":\"number\"}},\"required\":[\"unit\"],"
      "\"if\":{\"properties\":{\"unit\":{\"enum\":[\"pct\",\"ratio\"]}}},\"then\":{\"properties\":{\"v\":{\"maximum\":100}}},\"else\":{\"required\":[\"v\"]}}",
      { "{\"unit\":\"pct\",\"v\":50}", "{\"unit\":\"pct\"}", "{\"unit\":\"kg\",\"v\":500}" },
      { "{\"unit\":\"pct\",\"v\":500}", "{\"unit\":\"kg\"}" } },
    { "{\"properties\":{\"a\":{}},\"if\":{\"properties\":{\"a\":{\"minimum\":3}}},\"then\":{\"required\":[\"a\"]}}",
      { "{\"a\":5}", "{\"a\":1}" }, { "{}" } },
    { "{\"type\":\"object\",\"properties\":{\"age\":{\"type\":\"integer\"},\"guardian\":{\"type\":\"string\"}},"
      "\"required\":[\"age\"],\"if\":{\"properties\":{\"age\":{\"maximum\":17}}},\"then\":{\"required\":[\"guardian\"]}}",
      { "{\"age\":30}", "{\"age\":10,\"guardian\":\"x\"}", "{\"age\":18}" }, { "{\"age\":17}", "{\"age\":-3}" } },
    { "{\"$defs\":{\"b\":{\"properties\":{\"id\":{\"type\":\"integer\"}},\"required\":[\"id\"]},\"n\":{\"allOf\":[{\"$ref\":\"#/$defs/b\"},"
      "{\"properties\":{\"nm\":{\"type\":\"string\"}},\"required\":[\"nm\"]}]}},\"allOf\":[{\"$ref\":\"#/$defs/n\"}],\"type\":\"object\"}",
      { "{\"id\":1,\"nm\":\"x\"}" }, { "{\"id\":1}", "{\"nm\":\"x\"}" } },
    { "{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"maxLength\":5}", { "\"abcde\"" }, { "\"abcdef\"", "\"\"" } },
    { "{\"type\":\"string\",\"format\":\"email\",\"maxLength\":20}", { "\"ab@cd.ef\"" }, { "\"abcdefgh@cdefghij.kl\"" } },
    { "{\"type\":\"string\",\"format\":\"feed-onestop-id\",\"maxLength\":3}", { "\"abc\"" }, { "\"abcd\"" } },
    { "{\"type\":\"string\",\"pattern\":\"^(ab|c)+$\",\"maxLength\":3}", { "\"ab\"", "\"c\"" },
      { "\"abab\"", "\"\"", "\"ccca\"", "\"cc\"" } },   /* repetitions capped alike until the longest fits (stricter) */
    { "{\"type\":\"string\",\"pattern\":\"^[0-9]+\\\\.[0-9]+\\\\.[0-9]+(-[a-z]+)?$\",\"maxLength\":8}",
      { "\"1.2.3\"", "\"0.9.7\"", "\"1.2.3-a\"" }, { "\"12.34.567\"", "\"1.2\"", "\"1.2.3-\"", "\"1.2.3-abcd\"" } },
    { "{\"type\":\"string\",\"pattern\":\"^(a|bbbbbbbbbb)$\",\"maxLength\":5}", { 0 }, { 0 }, "pattern" },
    { "{\"if\":{\"minimum\":3},\"then\":{\"maximum\":10}}", { "4", "1", "2.5", "-7", "10" }, { "11", "12.5" } },
    { "{\"if\":{\"minimum\":3,\"maximum\":5},\"then\":{}}", { 0 }, { 0 }, "\"if\"" },
    /* contains: the first minContains items match it (and items); under maxContains the rest do not */
    { "{\"type\":\"array\",\"contains\":{\"type\":\"integer\"}}", { "[1]", "[3, \"a\", null]", "[-2,2.5]" },
      { "[]", "[\"a\"]", "[1.5]", "[1.5,2]" } },
    { "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":5},\"contains\":{\"const\":\"admin\"},\"maxItems\":3}",
      { "[\"admin\"]", "[\"admin\",\"x\"]", "[\"admin\",\"admin\",\"\"]" },
      { "[]", "[\"x\"]", "[\"admin\",\"a\",\"b\",\"c\"]", "[\"adminx\"]", "[\"admin\",\"xxxxxx\"]" } },
    { "{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"contains\":{\"const\":\"a\"},\"maxContains\":1}",
      { "[\"a\"]", "[\"a\",\"b\",\"c\"]" }, { "[\"a\",\"a\"]", "[\"b\"]", "[\"a\",\"d\"]", "[\"a\",\"c\",\"a\"]" } },
    { "{\"type\":\"array\",\"items\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":100},\"contains\":{\"minimum\":50},\"minContains\":2}",
      { "[50,99]", "[60,70,3]" }, { "[50]", "[50,49]", "[50,101]", "[50,60,-1]" } },
    { "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"contains\":{\"minimum\":5},\"minContains\":0,\"maxContains\":0}",
      { "[]", "[4,-1]" }, { "[5]", "[1,7]" } },
    { "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"contains\":{\"type\":\"integer\"}}", { 0 }, { 0 }, "contains" },
    { "{\"type\":\"array\",\"contains\":{\"type\":\"integer\"},\"minContains\":3,\"maxItems\":2}", { 0 }, { 0 }, "minContains" },
    { "{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"contains\":{\"type\":\"integer\"}}", { 0 }, { 0 }, "contains" },
    { "{\"properties\":{\"a\":{},\"b\":{},\"c\":{}},\"required\":[\"c\"]}",   /* optional ones before a required one */
      { "{\"c\":1}", "{\"a\":1,\"c\":1}", "{\"b\":1,\"c\":1}" }, { "{}", "{\"a\":1}", "{\"a\":1,\"b\":1}" } },
    { "{\"type\":\"object\",\"properties\":{\"country\":{\"enum\":[\"US\",\"FR\"]},\"zip\":{\"type\":\"string\"},\"post\":{\"type\":\"string\"}},"
      "\"required\":[\"country\"],\"if\":{\"properties\":{\"country\":{\"const\":\"US\"}}},\"then\":{\"required\":[\"zip\"]},"
      "\"else\":{\"required\":[\"post\"]}}",
      { "{\"country\":\"US\",\"zip\":\"1\"}", "{\"country\":\"FR\",\"post\":\"x\"}" },
      { "{\"country\":\"US\"}", "{\"country\":\"FR\"}", "{\"country\":\"FR\",\"zip\":\"1\"}" } },
    { "{\"properties\":{\"flag\":{\"type\":\"boolean\"},\"a\":{\"type\":\"integer\"}},\"if\":{\"properties\":{\"flag\":{\"const\":true}}},"
      "\"then\":{\"required\":[\"a\"]}}",
      { "{\"flag\":true,\"a\":1}", "{\"flag\":false}", "{\"a\":1}" }, { "{\"flag\":true}", "{}" } },
};

static void schemas(void) {
    for (size_t i = 0; i < sizeof S / sizeof S[0]; i++) {
        hearth_err err = { "" };
        char *text = hearth_json_schema_to_grammar(S[i].schema, &err);
        if (S[i].refused) {
            CHECK(!text && strstr(err.msg, S[i].refused), "schema %zu: got '%s', want a refusal naming %s", i,
                  text ? "(accepted)" : err.msg, S[i].refused);
            free(text);
            continue;
        }
        REQUIRE(text, "schema %zu: %s", i, err.msg);
        gram *g = gram_parse(text, &err);
        REQUIRE(g, "schema %zu: its grammar does not parse: %s\n%s", i, err.msg, text);
        for (int k = 0; k < 6 && S[i].yes[k]; k++)
            CHECK(gram_matches(g, S[i].yes[k], strlen(S[i].yes[k]), true), "schema %zu should accept %s\n%s", i,
                  S[i].yes[k], text);
        for (int k = 0; k < 6 && S[i].no[k]; k++)
            CHECK(!gram_matches(g, S[i].no[k], strlen(S[i].no[k]), true), "schema %zu should reject %s\n%s", i,
                  S[i].no[k], text);
        gram_free(g);
        free(text);
    }
}

/* Token masks on a real vocabulary: sampled replies (random logits, several seeds), checking at every step
 * that the mask is exactly the set of tokens whose piece extends the text within the grammar. */
static void token_masks(hearth_model *m, const char *gbnf, int seeds) {
    hearth_err err;
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    int nv = info.n_vocab;
    hearth_grammar *G = hearth_grammar_new(m, gbnf, &err);
    REQUIRE(G, "%s", err.msg);
    gram *ref = gram_parse(gbnf, &err);
    REQUIRE(ref, "%s", err.msg);
    float *logits = malloc((size_t)nv * sizeof *logits);
    char text[4096], piece[256];
    for (int seed = 1; seed <= seeds; seed++) {
        hearth_sampler_params sp = hearth_sampler_default_params();
        sp.seed = (uint64_t)seed;
        sp.top_k = 0, sp.top_p = 1, sp.min_p = 0, sp.temperature = 1;
        hearth_sampler *smp = hearth_sampler_new(&sp, nv);
        hearth_grammar_reset(G);
        hearth_sampler_set_grammar(smp, G);
        size_t n = 0;
        uint64_t rng = (uint64_t)seed * 0x9e3779b97f4a7c15ull;
        bool ended = false;
        for (int step = 0; step < 200 && !ended; step++) {
            int bad = 0;
            for (int t = 0; t < nv; t++) {
                int k = hearth_token_piece(m, t, piece, sizeof piece);
                bool want;
                if (hearth_token_is_eog(m, t)) want = gram_matches(ref, text, n, true);
                else if (k <= 0 || n + (size_t)k >= sizeof text) want = false;
                else {
                    memcpy(text + n, piece, (size_t)k);
                    want = gram_matches(ref, text, n + (size_t)k, false);
                }
                if (hearth_grammar_allows(G, t) != want && bad < 3) fprintf(stderr, "  token %d piece [%.*s] mask %d want %d\n", t, k > 0 ? k : 0, piece, !want, want);
                bad += hearth_grammar_allows(G, t) != want;
            }
            CHECK(!bad, "seed %d step %d: %d tokens where the mask and the whole-string check differ", seed, step, bad);
            for (int t = 0; t < nv; t++) {   /* logits favouring EOS late, so replies end */
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                logits[t] = (float)(rng % 1000) / 250.0f;
            }
            int eos = hearth_token_eos(m);
            if (eos >= 0) logits[eos] = step > 40 ? 50.0f : 0.0f;
            hearth_token t = hearth_sample(smp, logits, NULL, 0);
            REQUIRE(t >= 0, "seed %d step %d: no token allowed", seed, step);
            hearth_sampler_accept(smp, t);
            if (hearth_token_is_eog(m, t)) { ended = true; break; }
            int k = hearth_token_piece(m, t, piece, sizeof piece);
            REQUIRE(n + (size_t)k < sizeof text, "reply too long");
            memcpy(text + n, piece, (size_t)k);
            n += (size_t)k;
        }
        CHECK(ended && gram_matches(ref, text, n, true), "seed %d: reply '%.*s' is not a whole sentence", seed, (int)n, text);
        hearth_sampler_free(smp);
    }
    free(logits);
    gram_free(ref);
    hearth_grammar_free(G);
}

/* One reply under a budget of `budget` tokens (< 0: none), with random logits that keep the end of text
 * unlikely (so replies run long unless the budget stops them); the text in out, the tokens it took in *n_tok.
 * True when it ended complete: an end-of-generation token, or a grammar that may end when the budget ran out. */
static bool budget_reply(hearth_model *m, hearth_grammar *G, int budget, int seed, char *out, size_t cap, size_t *n_out,
                         int *n_tok) {
    hearth_model_info info;
    hearth_model_get_info(m, &info);
    int nv = info.n_vocab;
    float *logits = malloc((size_t)nv * sizeof *logits);
    hearth_sampler_params sp = hearth_sampler_default_params();
    sp.seed = (uint64_t)seed;
    sp.top_k = 0, sp.top_p = 1, sp.min_p = 0, sp.temperature = 1;
    hearth_sampler *smp = hearth_sampler_new(&sp, nv);
    hearth_grammar_reset(G);
    hearth_grammar_set_budget(G, -1);
    hearth_sampler_set_grammar(smp, G);
    uint64_t rng = (uint64_t)seed * 0x9e3779b97f4a7c15ull;
    size_t n = 0;
    int gen = 0, limit = budget >= 0 ? budget : 400;
    bool ended = false;
    char piece[256];
    while (!ended && gen < limit) {
        if (budget >= 0) hearth_grammar_set_budget(G, budget - gen);
        for (int t = 0; t < nv; t++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            logits[t] = (float)(rng % 1000) / 100.0f;
            if (hearth_token_is_eog(m, t)) logits[t] = -5.0f;
        }
        hearth_token t = hearth_sample(smp, logits, NULL, 0);
        if (t < 0) break;
        hearth_sampler_accept(smp, t);
        if (hearth_token_is_eog(m, t)) { ended = true; break; }
        int k = hearth_token_piece(m, t, piece, sizeof piece);
        if (k < 0 || n + (size_t)k >= cap) break;
        memcpy(out + n, piece, (size_t)k);
        n += (size_t)k;
        gen++;
        ended = hearth_grammar_done(G);
    }
    if (!ended && gen == limit) ended = hearth_grammar_can_end(G);
    *n_out = n, *n_tok = gen;
    hearth_sampler_free(smp);
    free(logits);
    return ended;
}

/* The budget rule: with the budget at the grammar's min_tokens and a little above, every reply ends complete
 * within it; without a budget the same replies run past it (so the rule is what makes them end). */
static void budget_rule(hearth_model *m, const char *gbnf, int extra_max) {
    hearth_err err;
    hearth_grammar *G = hearth_grammar_new(m, gbnf, &err);
    REQUIRE(G, "%s", err.msg);
    gram *ref = gram_parse(gbnf, &err);
    REQUIRE(ref, "%s", err.msg);
    int need = hearth_grammar_min_tokens(G);
    REQUIRE(need > 0, "min_tokens %d for a grammar that cannot be empty", need);
    char text[8192];
    size_t n;
    int gen, unbounded_over = 0;
    for (int extra = 0; extra <= extra_max; extra += extra_max / 4 > 0 ? extra_max / 4 : 1)
        for (int seed = 1; seed <= 3; seed++) {
            bool ok = budget_reply(m, G, need + extra, seed, text, sizeof text, &n, &gen);
            CHECK(ok && gen <= need + extra && gram_matches(ref, text, n, true),
                  "budget %d seed %d: %d tokens, '%.*s' is not a whole sentence", need + extra, seed, gen, (int)n, text);
            bool free_ok = budget_reply(m, G, -1, seed, text, sizeof text, &n, &gen);
            unbounded_over += !free_ok || gen > need + extra;
        }
    CHECK(unbounded_over > 0, "no reply without a budget ran past it: the test shows nothing");
    gram_free(ref);
    hearth_grammar_free(G);
}

/* multipleOf against arithmetic: every decimal i/1000 in [-30, 30] (written shortest) is accepted exactly when it
 * is a multiple of k = km / 1000 (i % km == 0) and within the bounds. */
static void multiples_exact(void) {
    static const struct { int km; const char *schema; double lo, hi; } M[] = {
        { 250, "{\"type\":\"number\",\"multipleOf\":0.25}", -1e9, 1e9 },
        { 500, "{\"type\":\"number\",\"multipleOf\":0.5}", -1e9, 1e9 },
        { 50, "{\"type\":\"number\",\"multipleOf\":0.05}", -1e9, 1e9 },
        { 2500, "{\"type\":\"number\",\"multipleOf\":2.5}", -1e9, 1e9 },
        { 300, "{\"type\":\"number\",\"multipleOf\":0.3}", -1e9, 1e9 },
        { 1500, "{\"type\":\"number\",\"multipleOf\":1.5,\"minimum\":0}", 0, 1e9 },
        { 70, "{\"type\":\"number\",\"multipleOf\":0.07,\"maximum\":0}", -1e9, 0 },
        { 125, "{\"type\":\"number\",\"multipleOf\":0.125}", -1e9, 1e9 },
        { 750, "{\"type\":\"number\",\"multipleOf\":0.75,\"minimum\":-4.5,\"maximum\":12}", -4.5, 12 },
        { 120, "{\"type\":\"number\",\"multipleOf\":0.12,\"exclusiveMinimum\":-1,\"exclusiveMaximum\":7.2}", -0.9999, 7.1999 },
        { 250, "{\"type\":\"number\",\"multipleOf\":0.25,\"exclusiveMaximum\":0}", -1e9, -0.0001 },
    };
    for (size_t m = 0; m < sizeof M / sizeof *M; m++) {
        hearth_err err = { "" };
        char *text = hearth_json_schema_to_grammar(M[m].schema, &err);
        REQUIRE(text, "multipleOf %s: %s", M[m].schema, err.msg);
        gram *g = gram_parse(text, &err);
        REQUIRE(g, "multipleOf grammar: %s", err.msg);
        int wrong = 0;
        for (int i = -30000; i <= 30000 && wrong < 3; i++) {
            char t[32];
            int n = snprintf(t, sizeof t, "%s%d", i < 0 ? "-" : "", abs(i) / 1000);
            if (abs(i) % 1000) {
                n += snprintf(t + n, sizeof t - (size_t)n, ".%03d", abs(i) % 1000);
                while (t[n - 1] == '0') t[--n] = 0;
            }
            double v = i / 1000.0;
            bool want = i % M[m].km == 0 && v >= M[m].lo && v <= M[m].hi;
            bool got = gram_matches(g, t, (size_t)n, true);
            if (got != want) wrong++;
            CHECK(got == want, "%s: %s %s, should %s", M[m].schema, t, got ? "accepted" : "rejected", want ? "match" : "not");
        }
        gram_free(g);
        free(text);
    }
}

int main(void) {
    gbnf_tables();
    gbnf_errors();
    schemas();
    multiples_exact();
    hearth_model *m = tu_load_model("stories260K");
    token_masks(m, "root ::= \"The \" [a-z]+ (\" \" [a-z]+){0,3} \".\"", 4);
    hearth_err err;
    char *json = hearth_json_schema_to_grammar(S[0].schema, &err);
    REQUIRE(json, "%s", err.msg);
    token_masks(m, json, 4);
    budget_rule(m, json, 12);
    free(json);
    budget_rule(m, "root ::= \"<\" [a-z]+ (\",\" [a-z]+)* \">\"", 8);
    const char *deep = "{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\",\"minItems\":2,"
        "\"items\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\","
        "\"items\":{\"type\":\"string\"}}},\"required\":[\"id\",\"tags\"]}},\"note\":{\"type\":\"string\"}},"
        "\"required\":[\"items\",\"note\"]}";
    json = hearth_json_schema_to_grammar(deep, &err);
    REQUIRE(json, "%s", err.msg);
    budget_rule(m, json, 40);
    free(json);
    hearth_model_free(m);
    TEST_DONE();
}
