/* test_server.c — the server's pure parts, without a model or a socket:
 * request validation (every API's fields and limits, each error naming
 * its field), the JSON string writer, metrics histograms and their
 * Prometheus text, and API-key checks. The HTTP layer and the engine
 * bridge are covered end to end by tests/e2e/server and fuzz_http. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "app/server/metrics_internal.h"
#include "app/server/sbuf_internal.h"
#include "app/server/server_internal.h"
#include "app/server/validate_internal.h"

static tr_srv_limits lim(void) {
    tr_srv_limits l;
    tr_srv_limits_default(&l);
    return l;
}

/* parses body for api; returns the status (0 = ok) and leaves param/msg */
static int parse(tr_srv_api api, const char *body, tr_srv_gen *g, tr_srv_error *e) {
    tr_srv_limits l = lim();
    l.max_messages = 4;
    memset(e, 0, sizeof *e);
    int rc = tr_srv_gen_parse(api, body, strlen(body), &l, g, e);
    return rc == 0 ? 0 : e->status;
}

static void expect_error(tr_srv_api api, const char *body, const char *param,
                         const char *in_message) {
    tr_srv_gen g;
    tr_srv_error e;
    int st = parse(api, body, &g, &e);
    if (st != 400) fail_msg("%s: expected 400, got %d", body, st);
    if (param) assert_string_equal(e.param, param);
    if (in_message && !strstr(e.message, in_message))
        fail_msg("%s: message '%s' lacks '%s'", body, e.message, in_message);
    assert_true(e.message[0] != 0);
    tr_srv_gen_free(&g);
}

static void test_chat_fields(void **state) {
    (void)state;
    tr_srv_gen g;
    tr_srv_error e;
    assert_int_equal(parse(TR_API_CHAT,
                           "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"s\"},"
                           "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                           "{\"type\":\"text\",\"text\":\"b\"}]}],\"max_tokens\":7,"
                           "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":-1,\"min_p\":0.05,"
                           "\"n\":3,\"seed\":-1,\"stop\":\"x\",\"logprobs\":true,\"top_logprobs\":2,"
                           "\"stream\":true,\"stream_options\":{\"include_usage\":true},"
                           "\"logit_bias\":{\"5\":-100,\"6\":2.5},\"presence_penalty\":1,"
                           "\"frequency_penalty\":-1,\"ignore_eos\":true,\"unknown_field\":[1]}",
                           &g, &e),
                     0);
    assert_int_equal(g.req.n_messages, 2);
    assert_string_equal(g.messages[0].role, "system");
    assert_string_equal(g.messages[1].content, "a\nb");
    assert_int_equal(g.req.max_tokens, 7);
    assert_true(fabsf(g.req.temperature - 0.5f) < 1e-6f);
    assert_int_equal(g.req.top_k, 0);
    assert_int_equal(g.req.n, 3);
    assert_true(g.req.seed == UINT64_MAX);
    assert_int_equal(g.req.n_stop, 1);
    assert_string_equal(g.req.stop[0], "x");
    assert_true(g.req.logprobs && g.req.top_logprobs == 2);
    assert_true(g.stream && g.include_usage && g.req.stream && g.req.ignore_eos);
    assert_int_equal(g.req.n_logit_bias, 2);
    assert_true(isinf(g.req.logit_bias[0].bias) || isinf(g.req.logit_bias[1].bias));
    assert_string_equal(g.model, "m");
    tr_srv_gen_free(&g);
    /* OpenAI's default: as many tokens as the context allows */
    assert_int_equal(parse(TR_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                           &g, &e),
                     0);
    assert_int_equal(g.req.max_tokens, -1);
    tr_srv_gen_free(&g);
    /* max_completion_tokens wins over max_tokens */
    assert_int_equal(parse(TR_API_CHAT,
                           "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
                           "\"max_tokens\":9,\"max_completion_tokens\":4}",
                           &g, &e),
                     0);
    assert_int_equal(g.req.max_tokens, 4);
    tr_srv_gen_free(&g);
}

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"

/* max_tokens 0 (prefill only) where the API allows it, min_tokens,
 * stop_regex (asking for nothing, or patterns), and how a chat ends: a final
 * assistant message is continued unless a new turn is asked for. */
static void test_prefill_min_tokens_chat_end(void **state) {
    (void)state;
    tr_srv_gen g;
    tr_srv_error e;
    assert_int_equal(parse(TR_API_GENERATE,
                           "{\"text\":\"a\",\"sampling_params\":{\"max_new_tokens\":0,"
                           "\"stop_regex\":null,\"min_new_tokens\":0}}",
                           &g, &e),
                     0);
    assert_int_equal(g.req.max_tokens, 0);
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_COMPLETION,
                           "{\"prompt\":\"a\",\"max_tokens\":0,\"stop_regex\":[]}", &g, &e),
                     0);
    assert_int_equal(g.req.max_tokens, 0);
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_CHAT, "{" MSG ",\"max_tokens\":9,\"min_tokens\":9}", &g, &e),
                     0);
    assert_int_equal(g.req.min_tokens, 9);
    assert_false(g.req.continue_final_message);
    assert_false(g.req.no_generation_prompt);
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_GENERATE,
                           "{\"text\":\"a\",\"sampling_params\":{\"min_new_tokens\":4}}",
                           &g, &e),
                     0);
    assert_int_equal(g.req.min_tokens, 4);
    tr_srv_gen_free(&g);
#define PREFILL "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"}," \
                "{\"role\":\"assistant\",\"content\":\"The\"}]"
    struct {
        const char *extra;
        bool cont, no_gen;
    } cases[] = {
        {"}", true, false},
        {",\"continue_final_message\":true,\"add_generation_prompt\":false}", true, true},
        {",\"continue_final_message\":false}", false, false},
        {",\"add_generation_prompt\":true}", false, false},
        {",\"add_generation_prompt\":false}", true, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char body[512];
        snprintf(body, sizeof body, "%s%s", PREFILL, cases[i].extra);
        assert_int_equal(parse(TR_API_CHAT, body, &g, &e), 0);
        if (g.req.continue_final_message != cases[i].cont ||
            g.req.no_generation_prompt != cases[i].no_gen)
            fail_msg("%s: continue %d, no_generation_prompt %d", body,
                     g.req.continue_final_message, g.req.no_generation_prompt);
        tr_srv_gen_free(&g);
    }
#undef PREFILL
}

static void test_chat_errors(void **state) {
    (void)state;
    expect_error(TR_API_CHAT, "{\"messages\":", NULL, "not valid JSON");
    expect_error(TR_API_CHAT, "[1]", NULL, "JSON object");
    expect_error(TR_API_CHAT, "{}", "messages", "required");
    expect_error(TR_API_CHAT, "{\"messages\":[]}", "messages", "non-empty");
    expect_error(TR_API_CHAT,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"1\"},{\"role\":\"user\","
                 "\"content\":\"2\"},{\"role\":\"user\",\"content\":\"3\"},{\"role\":\"user\","
                 "\"content\":\"4\"},{\"role\":\"user\",\"content\":\"5\"}]}",
                 "messages", "at most 4");
    expect_error(TR_API_CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}",
                 "messages[0]", "role");
    expect_error(TR_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":7}]}",
                 "messages[0].content", NULL);
    expect_error(TR_API_CHAT,
                 "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
                 "messages[0].content", "text part");
    expect_error(TR_API_CHAT, "{" MSG ",\"temperature\":\"hot\"}", "temperature", "number");
    expect_error(TR_API_CHAT, "{" MSG ",\"temperature\":-1}", "temperature", NULL);
    expect_error(TR_API_CHAT, "{" MSG ",\"top_p\":0}", "top_p", "> 0");
    expect_error(TR_API_CHAT, "{" MSG ",\"max_tokens\":0}", "max_tokens", NULL);
    expect_error(TR_API_CHAT, "{" MSG ",\"max_tokens\":1.5}", "max_tokens", "integer");
    /* integers beyond 64 bits: refused by name where the field is smaller */
    expect_error(TR_API_CHAT, "{" MSG ",\"seed\":18446744073709551616}", "seed",
                 "'seed' is 18446744073709551616, expected -9223372036854775808..");
    expect_error(TR_API_CHAT, "{" MSG ",\"max_tokens\":-99999999999999999999}", "max_tokens",
                 "-99999999999999999999");
    expect_error(TR_API_CHAT, "{" MSG ",\"n\":65}", "n", NULL);
    expect_error(TR_API_CHAT, "{" MSG ",\"stop\":[\"\"]}", "stop", "empty");
    expect_error(TR_API_CHAT, "{" MSG ",\"stop\":[1]}", "stop", NULL);
    expect_error(TR_API_CHAT,
                 "{" MSG ",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\","
                 "\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
                 "stop", "at most 16");
    expect_error(TR_API_CHAT, "{" MSG ",\"top_logprobs\":3}", "top_logprobs", "logprobs");
    expect_error(TR_API_CHAT, "{" MSG ",\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs",
                 NULL);
    expect_error(TR_API_CHAT, "{" MSG ",\"logit_bias\":{\"x\":1}}", "logit_bias", "token id");
    expect_error(TR_API_CHAT, "{" MSG ",\"logit_bias\":{\"3\":101}}", "logit_bias", NULL);
    expect_error(TR_API_CHAT, "{" MSG ",\"stream\":1}", "stream", "true or false");
    expect_error(TR_API_CHAT, "{" MSG ",\"stream_options\":{\"include_usage\":\"y\"}}",
                 "stream_options.include_usage", NULL);
    expect_error(TR_API_CHAT, "{" MSG ",\"model\":5}", "model", NULL);
    expect_error(TR_API_CHAT, "{" MSG ",\"tools\":[{}]}", "tools[0]", "function");
    expect_error(TR_API_CHAT, "{" MSG ",\"max_tokens\":2,\"min_tokens\":3}", "min_tokens",
                 "more than the 2");
    expect_error(TR_API_CHAT, "{" MSG ",\"max_tokens\":0}", "max_tokens", NULL);
    expect_error(TR_API_CHAT, "{" MSG ",\"continue_final_message\":true}",
                 "continue_final_message", "role is 'user'");
    expect_error(TR_API_CHAT,
                 "{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\"}],"
                 "\"continue_final_message\":true,\"add_generation_prompt\":true}",
                 "continue_final_message", "both");
    {
        tr_srv_gen g;
        tr_srv_error e;
        /* stop_regex: a string or strings, passed to the engine (which
         * compiles them at submit); shapes refused here name the field */
        assert_int_equal(parse(TR_API_COMPLETION, "{\"prompt\":\"a\",\"stop_regex\":\"x+\"}", &g,
                               &e),
                         0);
        assert_int_equal(g.req.n_stop_regex, 1);
        assert_string_equal(g.req.stop_regex[0], "x+");
        tr_srv_gen_free(&g);
        assert_int_equal(parse(TR_API_GENERATE,
                               "{\"text\":\"a\",\"sampling_params\":{\"stop_regex\":[\"x\",\"y\"],"
                               "\"stop\":\"z\"}}",
                               &g, &e),
                         0);
        assert_int_equal(g.req.n_stop_regex, 2);
        assert_int_equal(g.req.n_stop, 1);
        tr_srv_gen_free(&g);
        expect_error(TR_API_GENERATE,
                     "{\"text\":\"a\",\"sampling_params\":{\"stop_regex\":[\"x\",3]}}",
                     "sampling_params.stop_regex", "must be a string");
        expect_error(TR_API_COMPLETION, "{\"prompt\":\"a\",\"stop_regex\":{}}", "stop_regex",
                     "string or an array");
    }
    expect_error(TR_API_GENERATE,
                 "{\"text\":\"a\",\"sampling_params\":{\"max_new_tokens\":1,"
                 "\"min_new_tokens\":2}}",
                 "sampling_params.min_new_tokens", "more than the 1");
    expect_error(TR_API_CHAT, "{" MSG ",\"best_of\":3}", "best_of", NULL);
    expect_error(TR_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}",
                 "messages[0].content", "NUL");
}

/* Every count and length limit of a request body at its edge: the limit
 * itself passes, one past it is a 400 naming the field (docs/reliability.md,
 * "Limits"). */
static void test_limits_at_the_edge(void **state) {
    (void)state;
    char *body = malloc(1 << 16);
    assert_non_null(body);
    tr_srv_gen g;
    tr_srv_error e;
    for (int n = TRELLIS_MAX_STOP; n <= TRELLIS_MAX_STOP + 1; n++) { /* stop count */
        int k = snprintf(body, 1 << 16, "{" MSG ",\"stop\":[");
        for (int i = 0; i < n; i++) k += snprintf(body + k, 64, "%s\"s%d\"", i ? "," : "", i);
        snprintf(body + k, 8, "]}");
        if (n == TRELLIS_MAX_STOP) {
            assert_int_equal(parse(TR_API_CHAT, body, &g, &e), 0);
            tr_srv_gen_free(&g);
        } else {
            expect_error(TR_API_CHAT, body, "stop", "at most");
        }
    }
    for (int len = TRELLIS_MAX_STOP_LEN; len <= TRELLIS_MAX_STOP_LEN + 1; len++) {
        int k = snprintf(body, 1 << 16, "{" MSG ",\"stop\":\"");
        memset(body + k, 'a', (size_t)len);
        snprintf(body + k + len, 8, "\"}");
        if (len == TRELLIS_MAX_STOP_LEN) {
            assert_int_equal(parse(TR_API_CHAT, body, &g, &e), 0);
            tr_srv_gen_free(&g);
        } else {
            expect_error(TR_API_CHAT, body, "stop", NULL);
        }
    }
    /* prompts per batch (default 64) */
    tr_srv_limits l = lim();
    int k = snprintf(body, 1 << 16, "{\"prompt\":[");
    for (int i = 0; i <= l.max_prompts; i++) k += snprintf(body + k, 16, "%s\"p\"", i ? "," : "");
    snprintf(body + k, 8, "]}");
    expect_error(TR_API_COMPLETION, body, "prompt", NULL);
    /* n (default 64) and top_logprobs (20) at their edges */
    assert_int_equal(parse(TR_API_CHAT, "{" MSG ",\"n\":64}", &g, &e), 0);
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_CHAT, "{" MSG ",\"logprobs\":true,\"top_logprobs\":20}", &g, &e), 0);
    tr_srv_gen_free(&g);
    /* max_tokens over --max-tokens-limit */
    l.max_tokens = 100;
    memset(&e, 0, sizeof e);
    const char *mt = "{" MSG ",\"max_tokens\":101}";
    assert_int_equal(tr_srv_gen_parse(TR_API_CHAT, mt, strlen(mt), &l, &g, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "max_tokens");
    tr_srv_gen_free(&g);
    free(body);
}

static void test_constraints(void **state) {
    (void)state;
    tr_srv_gen g;
    tr_srv_error e;
    assert_int_equal(parse(TR_API_CHAT, "{" MSG ",\"regex\":\"[0-9]+\"}", &g, &e), 0);
    assert_int_equal(g.con, TR_CON_REGEX);
    assert_string_equal(g.con_text, "[0-9]+");
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_CHAT, "{" MSG ",\"choices\":[\"a\",\"b c\"]}", &g, &e), 0);
    assert_int_equal(g.con, TR_CON_CHOICE);
    assert_int_equal(g.n_choices, 2);
    assert_string_equal(g.choices[1], "b c");
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_CHAT,
                           "{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                           "{\"name\":\"p\",\"strict\":true,\"schema\":{\"type\":\"object\"}}}}",
                           &g, &e),
                     0);
    assert_int_equal(g.con, TR_CON_JSON_SCHEMA);
    assert_string_equal(g.con_text, "{\"type\":\"object\"}");
    assert_true(g.con_strict);
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_CHAT, "{" MSG ",\"response_format\":{\"type\":\"json_object\"}}",
                           &g, &e),
                     0);
    assert_int_equal(g.con, TR_CON_JSON_OBJECT);
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_CHAT, "{" MSG ",\"response_format\":{\"type\":\"text\"}}", &g, &e),
                     0);
    assert_int_equal(g.con, TR_CON_NONE);
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_GENERATE,
                           "{\"text\":\"x\",\"sampling_params\":{\"json_schema\":\"{\\\"type\\\":"
                           "\\\"string\\\"}\",\"max_new_tokens\":3}}",
                           &g, &e),
                     0);
    assert_int_equal(g.con, TR_CON_JSON_SCHEMA);
    assert_string_equal(g.con_text, "{\"type\":\"string\"}");
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_GENERATE, "{\"text\":\"x\",\"sampling_params\":{\"ebnf\":\"root ::= \\\"a\\\"\"}}",
                           &g, &e),
                     0);
    assert_int_equal(g.con, TR_CON_EBNF);
    tr_srv_gen_free(&g);
    expect_error(TR_API_CHAT, "{" MSG ",\"regex\":\"a\",\"ebnf\":\"b\"}", "ebnf", "at most one");
    expect_error(TR_API_CHAT, "{" MSG ",\"regex\":\"\"}", "regex", "empty");
    expect_error(TR_API_CHAT, "{" MSG ",\"choices\":[]}", "choices", NULL);
    expect_error(TR_API_CHAT, "{" MSG ",\"choices\":[\"\"]}", "choices", NULL);
    expect_error(TR_API_CHAT, "{" MSG ",\"response_format\":{\"type\":\"xml\"}}",
                 "response_format.type", NULL);
    expect_error(TR_API_CHAT,
                 "{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}}",
                 "response_format.json_schema.schema", "missing");
    expect_error(TR_API_CHAT,
                 "{" MSG ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                 "{\"schema\":5}}}",
                 "response_format.json_schema.schema", NULL);
}

static void test_completions_and_generate(void **state) {
    (void)state;
    tr_srv_gen g;
    tr_srv_error e;
    assert_int_equal(parse(TR_API_COMPLETION, "{\"prompt\":[\"a\",[1,2],\"c\"],\"logprobs\":2}", &g,
                           &e),
                     0);
    assert_int_equal(g.n_prompts, 3);
    assert_int_equal(g.prompts[1].n_tokens, 2);
    assert_int_equal(g.prompts[1].tokens[1], 2);
    assert_int_equal(g.req.max_tokens, 16);
    assert_true(g.logprobs && g.top_logprobs == 2);
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_COMPLETION, "{\"prompt\":[5,6,7]}", &g, &e), 0);
    assert_int_equal(g.n_prompts, 1);
    assert_int_equal(g.prompts[0].n_tokens, 3);
    tr_srv_gen_free(&g);
    expect_error(TR_API_COMPLETION, "{}", "prompt", NULL);
    expect_error(TR_API_COMPLETION, "{\"prompt\":\"\"}", "prompt", "empty");
    expect_error(TR_API_COMPLETION, "{\"prompt\":[[-1]]}", "prompt[0]", "prompt[0][0]");
    /* echo: the prompt's log-probs asked from the engine only with logprobs */
    assert_int_equal(parse(TR_API_COMPLETION, "{\"prompt\":\"a\",\"echo\":true,\"max_tokens\":0}",
                           &g, &e),
                     0);
    assert_true(g.echo && !g.req.prompt_logprobs && g.req.max_tokens == 0);
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_COMPLETION, "{\"prompt\":\"a\",\"echo\":true,\"logprobs\":3}",
                           &g, &e),
                     0);
    assert_true(g.echo && g.req.prompt_logprobs && g.req.prompt_logprobs_start == 0 &&
                g.req.prompt_top_logprobs == 3);
    tr_srv_gen_free(&g);
    expect_error(TR_API_COMPLETION, "{\"prompt\":\"a\",\"echo\":1}", "echo", "true or false");
    expect_error(TR_API_COMPLETION,
                 "{\"prompt\":\"a\",\"echo\":true,\"logprobs\":1,\"stream\":true,\"n\":2}", "echo",
                 "n = 1");
    expect_error(TR_API_COMPLETION, "{\"prompt\":\"a\",\"suffix\":\"b\"}", "suffix", NULL);
    expect_error(TR_API_COMPLETION, "{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\"],\"n\":64,\"max_tokens\":1}",
                 "n", "choices");
    assert_int_equal(parse(TR_API_GENERATE,
                           "{\"text\":[\"a\",\"b\"],\"sampling_params\":{\"max_new_tokens\":5,"
                           "\"stop_token_ids\":[2,3],\"top_k\":4,\"n\":2},\"return_logprob\":true,"
                           "\"top_logprobs_num\":3,\"rid\":\"r1\",\"stream\":true}",
                           &g, &e),
                     0);
    assert_true(g.batch);
    assert_int_equal(g.n_prompts, 2);
    assert_int_equal(g.req.max_tokens, 5);
    assert_int_equal(g.req.n_stop_tokens, 2);
    assert_int_equal(g.req.top_k, 4);
    assert_int_equal(g.req.n, 2);
    assert_true(g.logprobs && g.top_logprobs == 3 && g.stream);
    assert_string_equal(g.rid, "r1");
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_GENERATE, "{\"input_ids\":[1,2,3]}", &g, &e), 0);
    assert_false(g.batch);
    assert_int_equal(g.req.max_tokens, 128);
    assert_false(g.req.no_jump_forward); /* jump-forward is on by default */
    tr_srv_gen_free(&g);
    expect_error(TR_API_GENERATE, "{\"text\":\"a\",\"sampling_params\":{\"jump_forward\":1}}",
                 "sampling_params.jump_forward", "true or false");
    expect_error(TR_API_GENERATE, "{}", "text", "exactly one");
    expect_error(TR_API_GENERATE, "{\"text\":\"a\",\"input_ids\":[1]}", "text", "exactly one");
    expect_error(TR_API_GENERATE, "{\"text\":5}", "text", NULL);
    expect_error(TR_API_GENERATE, "{\"text\":\"a\",\"sampling_params\":[]}", "sampling_params",
                 NULL);
    expect_error(TR_API_GENERATE, "{\"text\":\"a\",\"sampling_params\":{\"temperature\":\"x\"}}",
                 "sampling_params.temperature", NULL);
    expect_error(TR_API_GENERATE, "{\"text\":\"a\",\"sampling_params\":{\"max_new_tokens\":-1}}",
                 "sampling_params.max_new_tokens", NULL);
    expect_error(TR_API_GENERATE, "{\"text\":\"a\",\"top_logprobs_num\":2}", "top_logprobs_num",
                 NULL);
    /* prompt log-probs: from logprob_start_len whenever return_logprob (SGLang) */
    assert_int_equal(parse(TR_API_GENERATE,
                           "{\"text\":\"a\",\"return_logprob\":true,\"logprob_start_len\":3,"
                           "\"top_logprobs_num\":2,\"return_text_in_logprobs\":true}",
                           &g, &e),
                     0);
    assert_true(g.req.prompt_logprobs && g.req.prompt_logprobs_start == 3 &&
                g.req.prompt_top_logprobs == 2 && g.lp_text);
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_GENERATE, "{\"text\":\"a\",\"return_logprob\":true}", &g, &e),
                     0);
    assert_true(g.req.prompt_logprobs && g.req.prompt_logprobs_start == -1); /* last token */
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_GENERATE, "{\"text\":\"a\",\"logprob_start_len\":0}", &g, &e),
                     0);
    assert_false(g.req.prompt_logprobs); /* without return_logprob: nothing */
    tr_srv_gen_free(&g);
    expect_error(TR_API_GENERATE, "{\"text\":\"a\",\"return_logprob\":true,\"logprob_start_len\":-2}",
                 "logprob_start_len", "-1..");
    expect_error(TR_API_GENERATE, "{\"text\":\"a\",\"logprob_start_len\":\"x\"}",
                 "logprob_start_len", "integer");
    expect_error(TR_API_GENERATE, "{\"text\":\"a\",\"return_text_in_logprobs\":2}",
                 "return_text_in_logprobs", NULL);
}

/* Raw text prompts (/generate, /v1/completions) are tokenized with
 * special tokens recognised, as SGLang, llama-server and vLLM do; the
 * per-request jump_forward switch reaches the engine request. */
static void test_special_tokens_and_jump_forward(void **state) {
    (void)state;
    tr_srv_gen g;
    tr_srv_error e;
    assert_int_equal(parse(TR_API_GENERATE, "{\"text\":\"<|im_start|>user\"}", &g, &e), 0);
    assert_true(g.req.parse_special);
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_COMPLETION, "{\"prompt\":\"<|im_start|>user\"}", &g, &e), 0);
    assert_true(g.req.parse_special);
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_GENERATE,
                           "{\"text\":\"x\",\"sampling_params\":{\"jump_forward\":false,"
                           "\"regex\":\"ab+\"}}",
                           &g, &e),
                     0);
    assert_true(g.req.no_jump_forward);
    tr_srv_gen_free(&g);
    assert_int_equal(parse(TR_API_GENERATE,
                           "{\"text\":\"x\",\"sampling_params\":{\"jump_forward\":true}}", &g,
                           &e),
                     0);
    assert_false(g.req.no_jump_forward);
    tr_srv_gen_free(&g);
    /* an extension on the OpenAI routes too, as ignore_eos is */
    assert_int_equal(parse(TR_API_COMPLETION, "{\"prompt\":\"x\",\"jump_forward\":false}", &g,
                           &e),
                     0);
    assert_true(g.req.no_jump_forward);
    tr_srv_gen_free(&g);
}

static void test_sbuf(void **state) {
    (void)state;
    tr_sbuf b = {0};
    assert_int_equal(tr_sbuf_json_str(&b, "a\"b\\c\n\x01\xc3\xa9", 9), 0);
    assert_string_equal(b.data, "a\\\"b\\\\c\\n\\u0001\xc3\xa9");
    tr_sbuf_reset(&b);
    b.limit = 8;
    assert_int_equal(tr_sbuf_puts(&b, "12345678"), 0);
    assert_int_equal(tr_sbuf_puts(&b, "9"), -1); /* unchanged past the limit */
    assert_int_equal(b.len, 8);
    assert_string_equal(b.data, "12345678");
    assert_int_equal(tr_sbuf_json_str(&b, "x", 1), -1);
    assert_string_equal(b.data, "12345678");
    size_t n;
    char *p = tr_sbuf_take(&b, &n);
    assert_int_equal(n, 8);
    assert_null(b.data);
    free(p);
    b.limit = 0;
    assert_int_equal(tr_sbuf_printf(&b, "%0300d", 7), 0); /* longer than the stack buffer */
    assert_int_equal(b.len, 300);
    tr_sbuf_reset(&b);
}

static void test_metrics_text(void **state) {
    (void)state;
    tr_srv_metrics m;
    tr_srv_metrics_init(&m);
    trellis_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = TRELLIS_EVENT_DONE;
    ev.finish = TRELLIS_FINISH_STOP;
    ev.metrics.completion_tokens = 10;
    ev.metrics.ttft_ms = 30;
    ev.metrics.tpot_ms = 4;
    ev.metrics.e2e_ms = 70;
    tr_srv_metrics_sample(&m, &ev);
    ev.metrics.ttft_ms = 2000;
    tr_srv_metrics_sample(&m, &ev);
    tr_srv_metrics_http(&m, 200);
    tr_srv_metrics_http(&m, 418);
    tr_sbuf o = {0};
    tr_srv_gauges g = {.in_flight = 3, .connections = 2, .ready = true};
    assert_int_equal(tr_srv_metrics_write(&m, NULL, &g, &o), 0);
    const char *want[] = {
        "# TYPE trellis_time_to_first_token_seconds histogram\n",
        "trellis_time_to_first_token_seconds_bucket{le=\"0.05\"} 1\n",
        "trellis_time_to_first_token_seconds_bucket{le=\"2.5\"} 2\n",
        "trellis_time_to_first_token_seconds_bucket{le=\"+Inf\"} 2\n",
        "trellis_time_to_first_token_seconds_count 2\n",
        "trellis_time_to_first_token_seconds_sum 2.030000\n",
        "trellis_generation_tokens_total 20\n",
        "trellis_requests_in_flight 3\n",
        "trellis_request_finished_total{reason=\"stop\"} 2\n",
        "trellis_http_responses_total{code=\"200\"} 1\n",
        "trellis_http_responses_total{code=\"other\"} 1\n",
        "trellis_ready 1\n",
        "trellis_kv_pages_used 0\n",
        "trellis_grammar_cache_hits_total 0\n",
        "trellis_jump_forward_tokens_total 0\n",
        "trellis_forward_passes_saved_total 0\n",
        "trellis_spec_draft_tokens_total 0\n",
        "trellis_spec_accepted_tokens_total 0\n",
        "trellis_spec_acceptance_rate 0\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(o.data, want[i])) fail_msg("metrics lack: %s", want[i]);
    /* every sample line is NAME[{labels}] VALUE */
    for (char *line = o.data; *line;) {
        char *end = strchr(line, '\n');
        assert_non_null(end);
        if (line[0] != '#') assert_non_null(memchr(line, ' ', (size_t)(end - line)));
        line = end + 1;
    }
    tr_sbuf_reset(&o);
}

static void test_auth(void **state) {
    (void)state;
    tr_srv *s = calloc(1, sizeof *s);
    assert_true(tr_srv_auth_ok(s, NULL)); /* no key configured */
    s->cfg.api_key = "k3y-value";
    assert_false(tr_srv_auth_ok(s, NULL));
    assert_false(tr_srv_auth_ok(s, ""));
    assert_false(tr_srv_auth_ok(s, "k3y-value"));       /* no scheme */
    assert_false(tr_srv_auth_ok(s, "Bearer k3y-valu"));   /* a prefix */
    assert_false(tr_srv_auth_ok(s, "Bearer k3y-value2")); /* longer */
    assert_false(tr_srv_auth_ok(s, "Basic k3y-value"));
    assert_true(tr_srv_auth_ok(s, "Bearer k3y-value"));
    assert_true(tr_srv_auth_ok(s, "bearer  k3y-value "));
    free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat_fields),
        cmocka_unit_test(test_prefill_min_tokens_chat_end),
        cmocka_unit_test(test_chat_errors),
        cmocka_unit_test(test_limits_at_the_edge),
        cmocka_unit_test(test_constraints),
        cmocka_unit_test(test_completions_and_generate),
        cmocka_unit_test(test_special_tokens_and_jump_forward),
        cmocka_unit_test(test_sbuf),
        cmocka_unit_test(test_metrics_text),
        cmocka_unit_test(test_auth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
