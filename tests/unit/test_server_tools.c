/* test_server_tools.c — tool calling's pieces without a model: the
 * output reader (app/server/tool_parse.c) and the request side
 * (tools.c, through tr_srv_gen_parse).
 *
 * Reader: every text is fed whole and in every split into two pieces and
 * in random small pieces; the events, joined, must be the same each time
 * and equal the expected content, calls (name, arguments) and counts.
 * Request side: the grammar built for each tool_choice accepts the
 * outputs it should and refuses the others (compiled with the grammar
 * library, the same text the engine compiles), the history renders
 * tool_calls and tool results as text, and bad input is refused naming
 * the field.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"

#include "app/server/tool_parse.h"
#include "app/server/validate_internal.h"
#include "grammar/grammar.h"

typedef struct got {
    char content[4096];
    char names[8][64];
    char args[8][512];
    int32_t n_start;
    int32_t order_bad; /* args before its call's start */
} got;

static void cat(char *dst, size_t cap, const char *p, size_t n) {
    size_t l = strlen(dst);
    assert_true(l + n < cap);
    memcpy(dst + l, p, n);
    dst[l + n] = 0;
}

static void on_content(void *u, const char *p, size_t n) {
    got *g = u;
    cat(g->content, sizeof g->content, p, n);
}

static void on_start(void *u, int32_t k, const char *name, size_t n) {
    got *g = u;
    assert_int_equal(k, g->n_start);
    assert_true(k < 8 && n < 64);
    memcpy(g->names[k], name, n);
    g->names[k][n] = 0;
    g->n_start++;
}

static void on_args(void *u, int32_t k, const char *p, size_t n) {
    got *g = u;
    if (k >= g->n_start) g->order_bad++;
    cat(g->args[k], sizeof g->args[k], p, n);
}

/* Feeds text in the pieces cuts[] gives (sorted offsets). */
static int32_t run(const char *text, bool start_only, const size_t *cuts, int n_cuts, got *g,
                   bool *unfinished) {
    memset(g, 0, sizeof *g);
    tr_tp_sink sink = {on_content, on_start, on_args, g};
    tr_tp *t = tr_tp_new(start_only, &sink);
    assert_non_null(t);
    size_t at = 0, len = strlen(text);
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : len;
        assert_int_equal(tr_tp_feed(t, text + at, to - at), 0);
        at = to;
    }
    int32_t done = tr_tp_finish(t, unfinished);
    tr_tp_free(t);
    return done;
}

static void check(const char *text, bool start_only, const char *content, int32_t calls,
                  int32_t done, bool unfinished, const char *const *names,
                  const char *const *args) {
    size_t len = strlen(text);
    uint64_t rng = 7;
    for (size_t split = 0; split <= len + 40; split++) {
        got g;
        bool unf;
        size_t cuts[64];
        int nc = 0;
        if (split <= len) {
            cuts[nc++] = split;
        } else { /* random pieces of 1..4 bytes */
            for (size_t at = 0; nc < 64;) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                at += 1 + (rng >> 60) % 4;
                if (at >= len) break;
                cuts[nc++] = at;
            }
        }
        int32_t d = run(text, start_only, cuts, nc, &g, &unf);
        if (strcmp(g.content, content) != 0)
            fail_msg("split %zu: content '%s', want '%s'", split, g.content, content);
        assert_int_equal(g.n_start, calls);
        assert_int_equal(d, done);
        assert_int_equal(unf, unfinished);
        assert_int_equal(g.order_bad, 0);
        for (int32_t k = 0; k < calls; k++) {
            assert_string_equal(g.names[k], names[k]);
            assert_string_equal(g.args[k], args[k]);
        }
    }
}

static void test_reader(void **state) {
    (void)state;
    check("Just text, no calls.", false, "Just text, no calls.", 0, 0, false, NULL, NULL);
    check("a < b and <tool nothing", false, "a < b and <tool nothing", 0, 0, false, NULL, NULL);
    check("ends with <tool_ca", false, "ends with <tool_ca", 0, 0, false, NULL, NULL);
    const char *n2[] = {"get_weather", "time"};
    const char *a2[] = {"{\"city\": \"Paris \\\"}\", \"u\": [1, {\"x\": 2}]}", "{}"};
    check("Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
          "{\"city\": \"Paris \\\"}\", \"u\": [1, {\"x\": 2}]}}\n</tool_call>\n<tool_call>\n"
          "{\"name\":\"time\",\"arguments\":{}}\n</tool_call>",
          false, "Let me look.\n", 2, 2, false, n2, a2);
    /* arguments written before the name: reported after it */
    const char *n1[] = {"f"};
    const char *a1[] = {"{\"a\":1}"};
    check("<tool_call>{\"arguments\":{\"a\":1},\"name\":\"f\"}</tool_call>", false, "", 1, 1,
          false, n1, a1);
    /* cut short inside the arguments: started, unfinished */
    const char *a3[] = {"{\"a\":[1,"};
    check("<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":[1,", false, "", 1, 0, true, n1, a3);
    /* at the start only: later triggers are content */
    check("{\"x\": \"<tool_call>\"}", true, "{\"x\": \"<tool_call>\"}", 0, 0, false, NULL, NULL);
    check("<tool_call>\n{\"name\":\"f\",\"arguments\":{\"a\":1}}\n</tool_call>", true, "", 1, 1,
          false, n1, a1);
    /* not a call after the trigger: the text stays */
    check("x<tool_call> oops", false, "x<tool_call> oops", 0, 0, false, NULL, NULL);
}

/* ---- the request side ---- */

static tr_srv_gen G;

static int parse(const char *body, tr_srv_error *e) {
    tr_srv_gen_free(&G);
    tr_srv_limits lim;
    tr_srv_limits_default(&lim);
    return tr_srv_gen_parse(TR_API_CHAT, body, strlen(body), &lim, &G, e);
}

static grammar *tool_grammar(void) {
    assert_int_equal(G.con, TR_CON_EBNF);
    grammar *g = NULL;
    tr_diag d;
    tr_status st = tr_grammar_compile_ebnf_json(G.con_text, G.con_len, NULL, NULL, &g, &d);
    if (st) fail_msg("%s\n%s", d.message, G.con_text);
    return g;
}

static bool m(const grammar *g, const char *s) { return tr_grammar_matches(g, s, strlen(s)); }

#define TOOLS                                                                              \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"w\",\"parameters\":"       \
    "{\"type\":\"object\",\"properties\":{\"c\":{\"type\":\"string\"}},\"required\":"       \
    "[\"c\"],\"additionalProperties\":false}}},{\"type\":\"function\",\"function\":"        \
    "{\"name\":\"t\",\"parameters\":{\"$defs\":{\"z\":{\"enum\":[\"utc\",\"cet\"]}},"      \
    "\"type\":\"object\",\"properties\":{\"z\":{\"$ref\":\"#/$defs/z\"}},\"required\":"   \
    "[\"z\"]}}}]"
#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"
#define CALL_W "<tool_call>\n{\"name\":\"w\",\"arguments\":{\"c\":\"Oslo\"}}\n</tool_call>"
#define CALL_T "<tool_call>\n{\"name\":\"t\",\"arguments\":{\"z\":\"utc\"}}\n</tool_call>"

static void test_grammars(void **state) {
    (void)state;
    tr_srv_error e;
    assert_int_equal(parse("{" MSG "," TOOLS ",\"tool_choice\":\"required\",\"whitespace\":"
                           "\"compact\"}", &e), 0);
    grammar *g = tool_grammar();
    assert_true(m(g, CALL_W));
    assert_true(m(g, CALL_W "\n" CALL_T));
    assert_false(m(g, "hello"));
    assert_false(m(g, "<tool_call>\n{\"name\":\"w\",\"arguments\":{\"c\":1}}\n</tool_call>"));
    assert_false(m(g, "<tool_call>\n{\"name\":\"t\",\"arguments\":{\"z\":\"pst\"}}\n</tool_call>"));
    assert_false(m(g, "<tool_call>\n{\"name\":\"x\",\"arguments\":{}}\n</tool_call>"));
    /* t says nothing of other arguments: none are taken */
    assert_false(m(g, "<tool_call>\n{\"name\":\"t\",\"arguments\":{\"z\":\"utc\","
                      "\"x\":1}}\n</tool_call>"));
    tr_grammar_free(g);
    /* the tools are described in a system message put first */
    assert_string_equal(G.messages[0].role, "system");
    assert_non_null(strstr(G.messages[0].content, "<tools>"));
    assert_int_equal(G.n_messages, 2);

    assert_int_equal(parse("{" MSG "," TOOLS ",\"parallel_tool_calls\":false,"
                           "\"whitespace\":\"compact\"}", &e), 0);
    g = tool_grammar(); /* auto: text, or text then calls */
    assert_true(m(g, "Plain answer <b>with</b> tags and <tool_c."));
    assert_true(m(g, ""));
    assert_true(m(g, "Calling.\n" CALL_T));
    assert_false(m(g, CALL_W "\n" CALL_T)); /* parallel_tool_calls false */
    assert_false(m(g, "text <tool_call> that is not a call"));
    tr_grammar_free(g);

    assert_int_equal(parse("{" MSG "," TOOLS ",\"tool_choice\":{\"type\":\"function\","
                           "\"function\":{\"name\":\"t\"}},\"whitespace\":\"compact\"}", &e), 0);
    g = tool_grammar();
    assert_true(m(g, CALL_T));
    assert_false(m(g, CALL_W));
    tr_grammar_free(g);

    assert_int_equal(parse("{" MSG "," TOOLS ",\"response_format\":{\"type\":\"json_object\"},"
                           "\"whitespace\":\"compact\"}", &e), 0);
    g = tool_grammar();
    assert_true(G.tools.format_first);
    assert_true(m(g, "{\"answer\":1}"));
    assert_true(m(g, CALL_W));
    assert_false(m(g, "free text"));
    tr_grammar_free(g);

    assert_int_equal(parse("{" MSG "," TOOLS ",\"tool_choice\":\"none\"}", &e), 0);
    assert_int_equal(G.con, TR_CON_NONE);
    assert_false(G.tools.active);
    assert_int_equal(G.n_messages, 1);
}

static void test_history(void **state) {
    (void)state;
    tr_srv_error e;
    assert_int_equal(
        parse("{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"},"
              "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"a\",\"type\":"
              "\"function\",\"function\":{\"name\":\"w\",\"arguments\":\"{\\\"c\\\": \\\"Oslo\\\"}\"}},"
              "{\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":\"w\",\"arguments\":"
              "\"{\\\"c\\\":\\\"Rome\\\"}\"}}]},"
              "{\"role\":\"tool\",\"tool_call_id\":\"a\",\"content\":\"3 C\"},"
              "{\"role\":\"tool\",\"tool_call_id\":\"b\",\"content\":\"20 C\"}]}",
              &e),
        0);
    assert_int_equal(G.n_messages, 3); /* the two results are one user turn */
    assert_string_equal(G.messages[1].role, "assistant");
    assert_string_equal(G.messages[1].content,
                        "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\":\"Oslo\"}}\n"
                        "</tool_call>\n<tool_call>\n{\"name\": \"w\", \"arguments\": "
                        "{\"c\":\"Rome\"}}\n</tool_call>");
    assert_string_equal(G.messages[2].role, "user");
    assert_string_equal(G.messages[2].content, "<tool_response>\n3 C\n</tool_response>\n"
                                               "<tool_response>\n20 C\n</tool_response>");
}

static void refused(const char *body, const char *param, const char *needle) {
    tr_srv_error e;
    memset(&e, 0, sizeof e);
    if (parse(body, &e) != -1 || strcmp(e.param, param) != 0 || !strstr(e.message, needle))
        fail_msg("want 400 on '%s' with '%s'; got param '%s': %s\n  body: %s", param, needle,
                 e.param, e.message, body);
    assert_int_equal(e.status, 400);
}

static void test_refusals(void **state) {
    (void)state;
    refused("{" MSG ",\"tools\":{}}", "tools", "must be an array");
    refused("{" MSG ",\"tools\":[{\"type\":\"retrieval\"}]}", "tools[0]", "type");
    refused("{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}",
            "tools[0]", "1 to 64 characters");
    refused("{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},"
            "{\"type\":\"function\",\"function\":{\"name\":\"a\"}}]}",
            "tools[1]", "also the name of tools[0]");
    refused("{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\","
            "\"parameters\":{\"type\":\"string\"}}}]}", "tools[0]", "of an object");
    refused("{" MSG "," TOOLS ",\"tool_choice\":\"sometimes\"}", "tool_choice", "sometimes");
    refused("{" MSG "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":"
            "{\"name\":\"nope\"}}}", "tool_choice", "not one of the tools");
    refused("{" MSG ",\"tool_choice\":\"required\"}", "tool_choice", "needs 'tools'");
    refused("{" MSG "," TOOLS ",\"parallel_tool_calls\":1}", "parallel_tool_calls", "true or false");
    refused("{" MSG "," TOOLS ",\"regex\":\"a+\"}", "tools", "combine with");
    refused("{" MSG ",\"functions\":[{\"name\":\"a\"}]}", "functions", "send them as 'tools'");
    refused("{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[]},"
            "{\"role\":\"user\",\"content\":\"y\",\"tool_calls\":[{}]}]}",
            "messages[1]", "assistant messages only");
    refused("{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\"}]}]}",
            "messages[0].tool_calls[0]", "must be");
    tr_srv_gen_free(&G);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reader),
        cmocka_unit_test(test_grammars),
        cmocka_unit_test(test_history),
        cmocka_unit_test(test_refusals),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    tr_srv_gen_free(&G);
    return rc;
}
