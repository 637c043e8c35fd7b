/* test_grammar_ebnf_json.c — EBNF with embedded JSON Schemas (`%json`,
 * grammar.h: tr_grammar_compile_ebnf_json).
 *
 * Checks: an embedded schema accepts exactly its JSON texts in context
 * (tags around it, alternatives, repetition); two schemas whose own rule
 * names would collide stay apart; $ref/$defs inside a schema resolve;
 * `%json` inside literals, classes, regexes and comments is text; the
 * options (whitespace) reach the schema; bad input is refused with the
 * position of the `%json` (not JSON, not an object, a schema the
 * translator refuses, a user rule with the reserved prefix).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"

#include "grammar/grammar.h"

static grammar *compile_ws(const char *text, grammar_json_ws ws) {
    grammar_json_options o;
    tr_grammar_json_options_default(&o);
    o.whitespace = ws;
    grammar *g = NULL;
    tr_diag d;
    tr_status st = tr_grammar_compile_ebnf_json(text, strlen(text), &o, NULL, &g, &d);
    if (st) fail_msg("compile failed (%s): %s\n  grammar: %s", tr_status_name(st), d.message, text);
    return g;
}

static grammar *compile(const char *text) { return compile_ws(text, GRAMMAR_JSON_WS_COMPACT); }

static bool m(const grammar *g, const char *s) { return tr_grammar_matches(g, s, strlen(s)); }

static void test_embedded_in_context(void **state) {
    (void)state;
    grammar *g = compile("root ::= \"<call>\" %json {\"type\":\"object\",\"properties\":"
                         "{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"],"
                         "\"additionalProperties\":false} \"</call>\"\n");
    assert_true(m(g, "<call>{\"n\":3}</call>"));
    assert_true(m(g, "<call>{\"n\":-12}</call>"));
    assert_false(m(g, "<call>{\"n\":\"3\"}</call>"));
    assert_false(m(g, "<call>{}</call>"));
    assert_false(m(g, "<call>{\"n\":3,\"m\":1}</call>"));
    assert_false(m(g, "{\"n\":3}"));
    tr_grammar_free(g);
}

static void test_two_schemas_apart(void **state) {
    (void)state;
    /* both schemas' translators name their rules alike (root, root-...) */
    grammar *g = compile("root ::= a | b\n"
                         "a ::= \"A:\" %json {\"type\":\"object\",\"properties\":{\"x\":"
                         "{\"type\":\"string\"}},\"required\":[\"x\"]}\n"
                         "b ::= \"B:\" %json {\"type\":\"object\",\"properties\":{\"x\":"
                         "{\"type\":\"boolean\"}},\"required\":[\"x\"]}\n");
    assert_true(m(g, "A:{\"x\":\"s\"}"));
    assert_true(m(g, "B:{\"x\":true}"));
    assert_false(m(g, "A:{\"x\":true}"));
    assert_false(m(g, "B:{\"x\":\"s\"}"));
    tr_grammar_free(g);
}

static void test_repetition_and_refs(void **state) {
    (void)state;
    grammar *g = compile("root ::= item (\"\\n\" item)*\n"
                         "item ::= %json {\"$defs\":{\"p\":{\"type\":\"object\",\"properties\":"
                         "{\"v\":{\"enum\":[1,2]}},\"required\":[\"v\"],"
                         "\"additionalProperties\":false}},\"$ref\":\"#/$defs/p\"}\n");
    assert_true(m(g, "{\"v\":1}"));
    assert_true(m(g, "{\"v\":1}\n{\"v\":2}\n{\"v\":2}"));
    assert_false(m(g, "{\"v\":3}"));
    assert_false(m(g, "{\"v\":1}\n"));
    tr_grammar_free(g);
}

static void test_inert_places(void **state) {
    (void)state;
    grammar *g = compile("# a comment with %json {\"type\":\"string\"}\n"
                         "root ::= \"%json {}\" [%j] /%json/ x\n"
                         "x ::= %json {\"type\":\"boolean\"}\n");
    assert_true(m(g, "%json {}%%jsontrue"));
    assert_true(m(g, "%json {}j%jsonfalse"));
    assert_false(m(g, "%json {}%%json{}"));
    tr_grammar_free(g);
}

static void test_options_reach_the_schema(void **state) {
    (void)state;
    const char *t = "root ::= %json {\"type\":\"object\",\"properties\":{\"a\":"
                    "{\"type\":\"integer\"}},\"required\":[\"a\"]}\n";
    grammar *c = compile_ws(t, GRAMMAR_JSON_WS_COMPACT);
    grammar *f = compile_ws(t, GRAMMAR_JSON_WS_FLEXIBLE);
    assert_true(m(c, "{\"a\":1}"));
    assert_false(m(c, "{ \"a\": 1 }"));
    assert_true(m(f, "{ \"a\": 1 }"));
    tr_grammar_free(c);
    tr_grammar_free(f);
}

static void expect_error(const char *text, tr_status want, const char *needle) {
    grammar *g = NULL;
    tr_diag d;
    tr_status st = tr_grammar_compile_ebnf_json(text, strlen(text), NULL, NULL, &g, &d);
    if (st != want || !strstr(d.message, needle))
        fail_msg("want %s with '%s', got %s: %s\n  grammar: %s", tr_status_name(want), needle,
                 tr_status_name(st), d.message, text);
    assert_null(g);
}

static void test_errors(void **state) {
    (void)state;
    expect_error("root ::= \"a\"\n  %json {\"type\": }\n", TR_ERR_FORMAT, "2:3: %json: the schema is not JSON");
    expect_error("root ::= %json true\n", TR_ERR_FORMAT, "1:10: %json must be followed by a JSON Schema object");
    expect_error("root ::= %json", TR_ERR_FORMAT, "must be followed");
    expect_error("root ::= %json {\"type\":\"nosuch\"}\n", TR_ERR_FORMAT, "1:10: %json:");
    expect_error("root ::= json0-x\njson0-x ::= \"a\"\n", TR_ERR_FORMAT, "reserved");
    /* the expanded grammar's own errors still come through */
    expect_error("root ::= %json {\"type\":\"string\"} undefined-rule\n", TR_ERR_FORMAT,
                 "undefined-rule");
}

static void test_expand_text(void **state) {
    (void)state;
    char *x = NULL;
    size_t n = 0;
    tr_diag d;
    const char *t = "root ::= \"<\" %json {\"type\":\"boolean\"} \">\"\n";
    assert_int_equal(tr_grammar_ebnf_expand_json(t, strlen(t), NULL, NULL, &x, &n, &d), TR_OK);
    assert_int_equal(strlen(x), n);
    assert_non_null(strstr(x, "json0-root"));
    assert_null(strstr(x, "%json"));
    free(x);
    /* no %json: the text unchanged */
    t = "root ::= \"a\"\n";
    assert_int_equal(tr_grammar_ebnf_expand_json(t, strlen(t), NULL, NULL, &x, &n, &d), TR_OK);
    assert_string_equal(x, t);
    free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_embedded_in_context),
        cmocka_unit_test(test_two_schemas_apart),
        cmocka_unit_test(test_repetition_and_refs),
        cmocka_unit_test(test_inert_places),
        cmocka_unit_test(test_options_reach_the_schema),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_expand_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
