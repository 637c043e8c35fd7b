/* test_dsl_interp.c — the DSL's interpreter (frontend/) on a fake backend
 * (dsl_fake.h): values and builtins, the prompts each construct sends,
 * gen/select options, futures and concurrency (fork branches and spawned
 * calls in flight together), joins, batches in order, every run-time
 * error with its location, and the limits. No model. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "frontend/dsl.h"
#include "tests/unit/dsl_fake.h"

typedef struct env {
    tr_dsl_script *script;
    fake_backend *fake;
    tr_dsl_session *sess;
} env;

static void env_open(env *e, const char *src, int delay_ms, const tr_dsl_session_options *o) {
    memset(e, 0, sizeof *e);
    tr_dsl_error err;
    tr_status st = tr_dsl_script_parse("t.tr", TRELLIS_SOURCE_DIR "/tests/data/dsl", src,
                                       strlen(src), o ? &o->limits : NULL, &e->script, &err);
    if (st != TR_OK) fprintf(stderr, "parse: %d:%d: %s\n", err.line, err.column, err.message);
    assert_int_equal(st, TR_OK);
    e->fake = fake_new(delay_ms);
    st = tr_dsl_session_new(e->script, &e->fake->base, o, &e->sess, &err);
    if (st != TR_OK) fprintf(stderr, "session: %s\n", err.message);
    assert_int_equal(st, TR_OK);
}

static void env_close(env *e) {
    tr_dsl_session_free(e->sess);
    tr_dsl_backend_free(&e->fake->base);
    tr_dsl_script_free(e->script);
}

/* Runs fn with args (JSON text or NULL) and returns the result. */
static tr_dsl_result run_ok(env *e, const char *fn, const char *args) {
    json_t *a = args ? json_loads(args, 0, NULL) : NULL;
    tr_dsl_result r;
    tr_dsl_error err;
    tr_status st = tr_dsl_session_run(e->sess, fn, a, &r, &err);
    if (st != TR_OK) {
        char buf[2048];
        fprintf(stderr, "%s", tr_dsl_error_format(e->script, &err, buf, sizeof buf));
    }
    assert_int_equal(st, TR_OK);
    json_decref(a);
    return r;
}

static tr_dsl_error run_err(env *e, const char *fn, const char *args) {
    json_t *a = args ? json_loads(args, 0, NULL) : NULL;
    tr_dsl_result r;
    tr_dsl_error err;
    tr_status st = tr_dsl_session_run(e->sess, fn, a, &r, &err);
    assert_int_not_equal(st, TR_OK);
    assert_int_equal(st, err.code);
    json_decref(a);
    return err;
}

static void expect_json(json_t *got, const char *want) {
    json_t *w = json_loads(want, JSON_DECODE_ANY, NULL);
    assert_non_null(w);
    if (!json_equal(got, w)) {
        char *g = json_dumps(got, JSON_ENCODE_ANY | JSON_COMPACT);
        fprintf(stderr, "got  %s\nwant %s\n", g, want);
        free(g);
    }
    assert_true(json_equal(got, w));
    json_decref(w);
}

/* ---- values ---- */

static void test_values_and_builtins(void **state) {
    (void)state;
    env e;
    env_open(&e,
             "let base = 10\n"
             "fn sq(x) { return x * x }\n"
             "fn main() {\n"
             "  let xs = [3, 1, 2]\n"
             "  let o = {a: 1, \"b c\": [true, null]}\n"
             "  let t = \"  Hello, World  \"\n"
             "  let out = []\n"
             "  for i, x in xs { out = out + [i * 10 + x] }\n"
             "  let ks = []\n"
             "  for k, v in o { ks = ks + [k] }\n"
             "  return [1 + 2 * 3, 7 / 2, 7 % 3, -2 - 3, 2.5 * 2, \"a\" + \"b\",\n"
             "          xs[0], xs[-1], o.a, o[\"b c\"][0], \"héllo\"[1], len(\"héllo\"),\n"
             "          len(xs), len(o), str(12), str(1.5), json(o), parse_json(\"[1,{{\\\"x\\\":2}}]\"),\n"
             "          range(3), range(2, 4), trim(t), lower(\"AbC\"), upper(\"abc\"),\n"
             "          split(\"a,b,,c\", \",\"), join([1, \"x\", true], \"-\"),\n"
             "          replace(\"aXbX\", \"X\", \"yy\"), starts_with(\"abc\", \"ab\"),\n"
             "          ends_with(\"abc\", \"bc\"), int(\" 42 \"), int(3.9), float(\"2.5\"),\n"
             "          keys(o), min(xs), max(xs), sum(xs), argmax(xs), sq(base),\n"
             "          1 == 1.0, [1, 2] == [1, 2], \"b\" > \"a\", 2 in xs, \"ell\" in \"hello\",\n"
             "          \"a\" in o, 5 not in xs, not 0, 0 or \"x\", 1 and 2, out, ks,\n"
             "          \"{xs} {o.a} {1.5} {true} {null}|\"]\n"
             "}\n",
             0, NULL);
    tr_dsl_result r = run_ok(&e, "main", NULL);
    expect_json(r.ret,
                "[7, 3.5, 1, -5, 5.0, \"ab\", 3, 2, 1, true, \"é\", 5, 3, 2, \"12\", \"1.5\","
                " \"{\\\"a\\\":1,\\\"b c\\\":[true,null]}\", [1,{\"x\":2}], [0,1,2], [2,3],"
                " \"Hello, World\", \"abc\", \"ABC\", [\"a\",\"b\",\"\",\"c\"], \"1-x-true\","
                " \"ayybyy\", true, true, 42, 3, 2.5, [\"a\",\"b c\"], 1, 3, 6, 0, 100,"
                " true, true, true, true, true, true, true, true, \"x\", 2, [3, 11, 22],"
                " [\"a\", \"b c\"], \"[3,1,2] 1 1.5 true |\"]");
    assert_int_equal(e.fake->n, 0); /* nothing generated */
    assert_int_equal(r.stats.gens, 0);
    tr_dsl_result_deinit(&r);
    env_close(&e);
}

/* ---- prompts ---- */

static void test_plain_prompt_and_options(void **state) {
    (void)state;
    env e;
    env_open(&e,
             "fn main(q) {\n"
             "  \"Q: {q}\\nA:\"\n"
             "  gen a(max_tokens=3, stop=[\"\\n\", \".\"], temperature=0.7, top_p=0.9,\n"
             "        top_k=5, min_p=0.05, seed=11, ignore_eos=true)\n"
             "  \"\\nQ2:\"\n"
             "  gen b(regex=r\"[0-9]+\")\n"
             "  \" end\"\n"
             "}\n",
             0, NULL);
    tr_dsl_result r = run_ok(&e, "main", "{\"q\": \"2+2?\"}");
    fake_backend *f = e.fake;
    assert_int_equal(f->n, 2);
    assert_string_equal(f->prompts[0], "Q: 2+2?\nA:");
    assert_int_equal(f->reqs[0].max_tokens, 3);
    assert_int_equal(f->reqs[0].n_stop, 2);
    assert_string_equal(f->stop0[0], "\n");
    assert_true(f->reqs[0].temperature > 0.69f && f->reqs[0].temperature < 0.71f);
    assert_true(f->reqs[0].top_p > 0.89f && f->reqs[0].top_p < 0.91f);
    assert_int_equal(f->reqs[0].top_k, 5);
    assert_true(f->reqs[0].has_seed);
    assert_int_equal(f->reqs[0].seed, 11);
    assert_true(f->reqs[0].ignore_eos);
    assert_int_equal(f->reqs[0].constraint, TR_DSL_CONSTRAINT_NONE);
    /* the second prompt holds the first generation's text */
    assert_string_equal(f->prompts[1], "Q: 2+2?\nA:A0\nQ2:");
    assert_int_equal(f->reqs[1].constraint, TR_DSL_CONSTRAINT_REGEX);
    assert_string_equal(f->ctext[1], "[0-9]+");
    assert_true(f->reqs[1].temperature == 0.0f); /* greedy by default */
    assert_int_equal(f->reqs[1].max_tokens, 128);
    expect_json(r.vars, "{\"a\": \"A0\", \"b\": \"42\"}");
    assert_string_equal(r.text, "Q: 2+2?\nA:A0\nQ2:42 end");
    assert_true(json_is_null(r.ret));
    assert_int_equal(r.stats.gens, 2);
    tr_dsl_result_deinit(&r);
    env_close(&e);
}

static void test_chat_prompt(void **state) {
    (void)state;
    env e;
    env_open(&e,
             "fn main() {\n"
             "  system { \"Be brief.\" }\n"
             "  user { \"Hi\" }\n"
             "  assistant { \"Answer: \" gen a \" and \" gen b }\n"
             "  user { \"More: {a}\" }\n"
             "  assistant { gen c }\n"
             "}\n",
             0, NULL);
    tr_dsl_result r = run_ok(&e, "main", NULL);
    fake_backend *f = e.fake;
    assert_int_equal(f->n, 3);
    const char *head = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                       "<|im_start|>assistant\n";
    char want[512];
    snprintf(want, sizeof want, "%sAnswer: ", head);
    assert_string_equal(f->prompts[0], want);
    snprintf(want, sizeof want, "%sAnswer: A0 and ", head);
    assert_string_equal(f->prompts[1], want);
    snprintf(want, sizeof want,
             "%sAnswer: A0 and A1<|im_end|>\n<|im_start|>user\nMore: A0<|im_end|>\n"
             "<|im_start|>assistant\n",
             head);
    assert_string_equal(f->prompts[2], want);
    snprintf(want, sizeof want,
             "%sAnswer: A0 and A1<|im_end|>\n<|im_start|>user\nMore: A0<|im_end|>\n"
             "<|im_start|>assistant\nA2<|im_end|>\n",
             head);
    assert_string_equal(r.text, want);
    tr_dsl_result_deinit(&r);
    env_close(&e);
}

static void test_select_and_json(void **state) {
    (void)state;
    env e;
    env_open(&e,
             "fn main() {\n"
             "  user { \"Pick\" }\n"
             "  assistant { select label from [\"positive\", \"negative\", \"a.b|c\"] }\n"
             "  assistant { gen yn(choices=[\"yes\", \"no\"], max_tokens=9) }\n"
             "  assistant { gen p(json_schema={type: \"object\", properties: {name: {type: \"string\"}}}) }\n"
             "  assistant { gen q(json_schema=\"{{\\\"type\\\": \\\"object\\\"}}\") }\n"
             "  assistant { gen any(json=true) }\n"
             "  return {label: label, yn: yn, name: p.name, age: p.age + 1, q: q, any: any.name}\n"
             "}\n",
             0, NULL);
    e.fake->pick = 1;
    tr_dsl_result r = run_ok(&e, "main", NULL);
    fake_backend *f = e.fake;
    assert_int_equal(f->reqs[0].constraint, TR_DSL_CONSTRAINT_CHOICES);
    assert_string_equal(f->choices[0], "positive|negative|a.b|c");
    assert_int_equal(f->reqs[0].max_tokens, 9); /* longest option + 1 */
    assert_true(f->reqs[0].temperature == 0.0f);
    assert_int_equal(f->reqs[1].max_tokens, 9);
    assert_int_equal(f->reqs[2].constraint, TR_DSL_CONSTRAINT_JSON_SCHEMA);
    assert_string_equal(f->ctext[2],
                        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"}}}");
    assert_string_equal(f->ctext[3], "{\"type\":\"object\"}");
    assert_int_equal(f->reqs[4].constraint, TR_DSL_CONSTRAINT_JSON);
    expect_json(r.ret, "{\"label\": \"negative\", \"yn\": \"no\", \"name\": \"Ada\", \"age\": 37,"
                       " \"q\": {\"name\": \"Ada\", \"age\": 36}, \"any\": \"Ada\"}");
    /* the prompt holds the JSON text as generated */
    assert_non_null(strstr(f->prompts[4], "{\"name\": \"Ada\", \"age\": 36}"));
    tr_dsl_result_deinit(&r);
    env_close(&e);
}

/* select ... by logprob: the prompt prefilled alone (its token count),
 * then every option at once, prefill only, with the prompt's log-probs
 * from its last token on; the best mean wins (ties: the first), is bound
 * and goes into the prompt; `by constrained` is the choice grammar; a
 * backend without log-probs and options on the statement are errors. */
static double favour_no(const char *prompt) {
    size_t n = strlen(prompt);
    return n >= 3 && strcmp(prompt + n - 3, " no") == 0 ? -0.25 : -2.0;
}

static void test_select_by_logprob(void **state) {
    (void)state;
    env e;
    env_open(&e,
             "fn main() {\n"
             "  \"Q: is the sky green? A:\"\n"
             "  select a from [\" yes\", \" no\", \" maybe\"] by logprob\n"
             "  \" Then\" select b from [\"x\", \"y\"] by logprob\n"
             "  \" And\" select c from [\"p\", \"q\"] by constrained\n"
             "  gen d\n"
             "  return [a, b, c]\n"
             "}\n",
             0, NULL);
    e.fake->score = favour_no;
    e.fake->pick = 1;
    tr_dsl_result r = run_ok(&e, "main", NULL);
    fake_backend *f = e.fake;
    const char *q = "Q: is the sky green? A:";
    int32_t plen = (int32_t)strlen(q);
    assert_int_equal(f->n, 1 + 3 + 1 + 2 + 1 + 1);
    assert_string_equal(f->prompts[0], q);
    assert_int_equal(f->reqs[0].max_tokens, 0);
    assert_false(f->reqs[0].prompt_logprobs);
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(f->reqs[i].max_tokens, 0);
        assert_true(f->reqs[i].prompt_logprobs);
        assert_int_equal(f->reqs[i].prompt_logprobs_start, plen - 1);
        assert_int_equal(f->reqs[i].constraint, TR_DSL_CONSTRAINT_NONE);
        assert_int_equal(strncmp(f->prompts[i], q, (size_t)plen), 0);
    }
    assert_string_equal(f->prompts[2], "Q: is the sky green? A: no");
    /* b: equal scores, the first option */
    assert_string_equal(f->prompts[4], "Q: is the sky green? A: no Then");
    assert_int_equal(f->reqs[7].constraint, TR_DSL_CONSTRAINT_CHOICES);
    assert_string_equal(f->prompts[8], "Q: is the sky green? A: no Thenx Andq");
    expect_json(r.ret, "[\" no\", \"x\", \"q\"]");
    expect_json(json_object_get(r.vars, "a"), "\" no\"");
    tr_dsl_result_deinit(&r);
    env_close(&e);

    env_open(&e, "fn main() {\n  \"Q\" select a from [\"x\", \"y\"] by logprob\n}\n", 0,
             NULL);
    e.fake->no_plp = true;
    tr_dsl_error err = run_err(&e, "main", NULL);
    assert_non_null(strstr(err.message, "without log-probs"));
    assert_int_equal(err.line, 2);
    env_close(&e);
    env_open(&e,
             "fn main() {\n  \"Q\" select a(temperature=0) from [\"x\"] by logprob\n}\n",
             0, NULL);
    err = run_err(&e, "main", NULL);
    assert_non_null(strstr(err.message, "takes no options"));
    env_close(&e);
    env_open(&e, "fn main() {\n  \"Q\" select a from [\"x\", \"x\"] by logprob\n}\n", 0,
             NULL);
    err = run_err(&e, "main", NULL);
    assert_non_null(strstr(err.message, "are the same"));
    env_close(&e);
    env_open(&e, "fn main() {\n  \"Q\" select a from [\"x\", \"y\"] by logprob\n}\n", 0,
             NULL);
    e.fake->fail_done = "boom";
    err = run_err(&e, "main", NULL);
    assert_non_null(strstr(err.message, "boom"));
    env_close(&e);
}

/* ---- concurrency ---- */

static void test_fork_concurrent_and_joined(void **state) {
    (void)state;
    env e;
    env_open(&e,
             "fn main() {\n"
             "  user { \"Ideas\" }\n"
             "  fork 4 {\n"
             "    assistant { gen idea(max_tokens=5) }\n"
             "    let n = len(idea)\n"
             "  }\n"
             "  fork i, w in [\"x\", \"y\"] { let tag = \"{i}:{w}\" }\n"
             "  assistant { gen after }\n"
             "  return {idea: idea, n: n, tag: tag}\n"
             "}\n",
             100, NULL);
    tr_dsl_result r = run_ok(&e, "main", NULL);
    fake_backend *f = e.fake;
    /* a warm-up of the shared prompt, then the 4 branches at once, then
     * the warm-up of the second fork and the gen after it */
    assert_int_equal(f->reqs[0].max_tokens, 1);
    assert_string_equal(f->prompts[0], "<|im_start|>user\nIdeas<|im_end|>\n");
    assert_int_equal(f->done_before[1], 1); /* branches start after the warm-up */
    for (int i = 1; i <= 4; i++) {
        assert_int_equal(f->reqs[i].max_tokens, 5);
        assert_int_equal(f->done_before[i], 1);
    }
    assert_int_equal(f->max_inflight, 4);
    /* the parent's prompt does not hold the branches' text */
    assert_string_equal(f->prompts[f->n - 1],
                        "<|im_start|>user\nIdeas<|im_end|>\n<|im_start|>assistant\n");
    json_t *ideas = json_object_get(r.ret, "idea");
    assert_int_equal(json_array_size(ideas), 4);
    for (size_t i = 0; i < 4; i++) {
        const char *s = json_string_value(json_array_get(ideas, i));
        assert_true(s && s[0] == 'A');
    }
    expect_json(json_object_get(r.ret, "n"), "[2, 2, 2, 2]");
    expect_json(json_object_get(r.ret, "tag"), "[\"0:x\", \"1:y\"]");
    /* captured variables: the joined list of a gen is one */
    assert_non_null(json_object_get(r.vars, "idea"));
    assert_null(json_object_get(r.vars, "tag"));
    /* distinct seeds, so that sampled branches differ */
    assert_true(f->reqs[1].seed != f->reqs[2].seed);
    assert_true(r.stats.tasks >= 7);
    tr_dsl_result_deinit(&r);
    env_close(&e);
}

static void test_parallel(void **state) {
    (void)state;
    env e;
    env_open(&e,
             "fn main() {\n"
             "  user { \"Topic\" }\n"
             "  let keep = 1\n"
             "  parallel {\n"
             "    branch { assistant { gen pros } }\n"
             "    branch { assistant { gen cons } }\n"
             "    branch { let extra = keep + 1 }\n"
             "  }\n"
             "  return [pros, cons, extra, keep]\n"
             "}\n"
             "fn clash() {\n"
             "  \"x\"\n"
             "  parallel {\n"
             "    branch { let v = 1 }\n"
             "    branch { let v = 2 }\n"
             "  }\n"
             "}\n",
             80, NULL);
    tr_dsl_result r = run_ok(&e, "main", NULL);
    assert_int_equal(e.fake->max_inflight, 2);
    json_t *ret = r.ret;
    assert_int_equal(json_array_size(ret), 4);
    assert_int_equal(json_integer_value(json_array_get(ret, 2)), 2);
    assert_int_equal(json_integer_value(json_array_get(ret, 3)), 1);
    tr_dsl_result_deinit(&r);
    tr_dsl_error err = run_err(&e, "clash", NULL);
    assert_non_null(strstr(err.message, "'v' is set by this branch and by the one at 14:5"));
    assert_int_equal(err.line, 15);
    env_close(&e);
}

static void test_spawned_calls_overlap(void **state) {
    (void)state;
    env e;
    env_open(&e,
             "fn summarize(doc) {\n"
             "  user { \"Summarize: {doc}\" }\n"
             "  assistant { gen s }\n"
             "  return s\n"
             "}\n"
             "fn extract(doc) {\n"
             "  \"Doc: {doc}\\nKeywords:\"\n"
             "  gen k\n"
             "}\n"
             "fn main() {\n"
             "  \"Intro:\" gen intro\n"
             "  let a = summarize(\"one\")\n"
             "  let b = summarize(\"two\")\n"
             "  let c = extract(\"three\")\n"
             "  let chained = summarize(a)\n"
             "  return {a: a, b: b, k: c.k, chained: chained}\n"
             "}\n",
             150, NULL);
    tr_dsl_result r = run_ok(&e, "main", NULL);
    fake_backend *f = e.fake;
    assert_int_equal(f->n, 5);
    /* intro, a, b and c were all in flight at once; `chained` waited for a */
    assert_int_equal(f->max_inflight, 4);
    for (int i = 0; i < 4; i++) assert_int_equal(f->done_before[i], 0);
    assert_true(f->done_before[4] >= 1);
    assert_int_equal(json_string_value(json_object_get(r.ret, "k"))[0], 'A');
    assert_non_null(strstr(f->prompts[4], "Summarize: A"));
    tr_dsl_result_deinit(&r);
    env_close(&e);
}

/* ---- errors ---- */

typedef struct runtime_case {
    const char *body; /* the body of main */
    int line, column; /* in the whole script: main starts on line 1 */
    const char *message;
    tr_status code;
} runtime_case;

static const runtime_case RUNTIME_ERRORS[] = {
    {"  return nope\n", 2, 10, "undefined variable 'nope'", TR_ERR_NOT_FOUND},
    {"  return 1 + \"a\"\n", 2, 12, "cannot add a number and a string", TR_ERR_INVALID_ARG},
    {"  return [1][5]\n", 2, 13, "index 5 is out of range", TR_ERR_NOT_FOUND},
    {"  return {a: 1}.b\n", 2, 16, "no field 'b'", TR_ERR_NOT_FOUND},
    {"  return 1 / 0\n", 2, 12, "division by zero", TR_ERR_INVALID_ARG},
    {"  x = 1\n", 2, 3, "not defined", TR_ERR_NOT_FOUND},
    {"  g = 1\n", 2, 3, "cannot assign to top-level 'g'", TR_ERR_STATE},
    {"  user { \"a\" }\n  \"b\"\n", 3, 3, "text outside a role block", TR_ERR_STATE},
    {"  \"a\"\n  user { \"b\" }\n", 3, 3, "after text outside role blocks", TR_ERR_STATE},
    {"  user { assistant { \"a\" } }\n", 2, 10, "role blocks do not nest", TR_ERR_STATE},
    {"  user { \"a\" }\n  gen x\n", 3, 3, "gen outside a role block", TR_ERR_STATE},
    {"  gen x\n", 2, 3, "empty prompt", TR_ERR_INVALID_ARG},
    {"  \"a\" gen x(max_tokens=0)\n", 2, 13, "max_tokens is 0", TR_ERR_INVALID_ARG},
    {"  \"a\" gen x(temperature=\"hot\")\n", 2, 13, "temperature must be a number",
     TR_ERR_INVALID_ARG},
    {"  \"a\" gen x(regex=\"a\", json=true)\n", 2, 24, "together with another constraint",
     TR_ERR_INVALID_ARG},
    {"  \"a\" gen x(json_schema=\"{{nope\")\n", 2, 13, "json_schema is not JSON",
     TR_ERR_FORMAT},
    {"  \"a\" select x from []\n", 2, 21, "non-empty list", TR_ERR_INVALID_ARG},
    {"  \"a\" select x from [\"\"]\n", 2, 21, "empty", TR_ERR_INVALID_ARG},
    {"  \"a\" gen x(stop=[1])\n", 2, 13, "stop must be", TR_ERR_INVALID_ARG},
    {"  for x in 3 { }\n", 2, 12, "for loops go over a list", TR_ERR_INVALID_ARG},
    {"  fork \"x\" { }\n", 2, 8, "fork N needs an integer", TR_ERR_INVALID_ARG},
    {"  fork 0 { }\n", 2, 8, "a fork of 0 branches", TR_ERR_LIMIT},
    {"  fork 65 { }\n", 2, 8, "max_fork_width", TR_ERR_LIMIT},
    {"  return rec(1)\n", 8, 20, "max_call_depth", TR_ERR_LIMIT},
    {"  for i in range(200001) { }\n", 2, 12, "over the limit", TR_ERR_LIMIT},
    {"  let s = \"x\"\n  for i in range(30) { s = s + s }\n", 3, 30, "max_string_bytes",
     TR_ERR_LIMIT},
    {"  return load(\"missing.json\")\n", 2, 10, "cannot open", TR_ERR_IO},
    {"  return int(\"x1\")\n", 2, 10, "is not an integer", TR_ERR_FORMAT},
    {"  fork 2 { let v = 1 / 0 }\n", 2, 22, "division by zero", TR_ERR_INVALID_ARG},
    {"  return bad_helper()\n", 9, 26, "undefined variable 'zzz'", TR_ERR_NOT_FOUND},
};

static void test_runtime_errors(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof RUNTIME_ERRORS / sizeof RUNTIME_ERRORS[0]; i++) {
        const runtime_case *c = &RUNTIME_ERRORS[i];
        /* pad so that rec and bad_helper sit on lines 8 and 9 whatever the body */
        int body_lines = 0;
        for (const char *p = c->body; *p; p++) body_lines += *p == '\n';
        char padded[2200];
        char *w = padded;
        w += sprintf(w, "fn main() {\n%s}\nlet g = 1\n", c->body);
        for (int k = body_lines; k < 4; k++) w += sprintf(w, "\n");
        w += sprintf(w, "fn rec(n) { return rec(n + 1) }\nfn bad_helper() { return zzz }\n");
        env e;
        env_open(&e, padded, 0, NULL);
        tr_dsl_error err = run_err(&e, "main", NULL);
        if (err.code != c->code || err.line != c->line || err.column != c->column ||
            !strstr(err.message, c->message))
            fprintf(stderr, "case %zu: got %d at %d:%d: %s\n", i, err.code, err.line,
                    err.column, err.message);
        assert_int_equal(err.code, c->code);
        assert_true(err.has_location);
        assert_int_equal(err.line, c->line);
        assert_int_equal(err.column, c->column);
        assert_non_null(strstr(err.message, c->message));
        env_close(&e);
    }
}

static void test_error_trace(void **state) {
    (void)state;
    env e;
    env_open(&e,
             "fn inner(x) {\n"
             "  return x.missing\n"
             "}\n"
             "fn outer() {\n"
             "  return inner({})\n"
             "}\n"
             "fn main() {\n"
             "  return outer()\n"
             "}\n",
             0, NULL);
    tr_dsl_error err = run_err(&e, "main", NULL);
    assert_int_equal(err.line, 2);
    assert_non_null(strstr(err.trace, "in inner, called from outer at 5:10"));
    assert_non_null(strstr(err.trace, "in outer, called from main at 8:10"));
    assert_non_null(strstr(err.trace, "in main"));
    char buf[2048];
    tr_dsl_error_format(e.script, &err, buf, sizeof buf);
    assert_non_null(strstr(buf, "t.tr:2:11: error: the object has no field 'missing'"));
    assert_non_null(strstr(buf, "    2 |   return x.missing\n      |           ^\n"));
    env_close(&e);
}

static void test_backend_failures(void **state) {
    (void)state;
    env e;
    env_open(&e, "fn main() {\n  \"a\"\n  gen answer\n  return 1\n}\n", 30, NULL);
    e.fake->fail_done = "the engine ran out of pages";
    tr_dsl_error err = run_err(&e, "main", NULL);
    /* the gen is never read, yet its failure is the run's */
    assert_int_equal(err.line, 3);
    assert_int_equal(err.column, 3);
    assert_non_null(strstr(err.message, "gen answer failed: the engine ran out of pages"));
    e.fake->fail_done = NULL;
    e.fake->fail_submit = "server unreachable";
    err = run_err(&e, "main", NULL);
    assert_int_equal(err.line, 3);
    assert_non_null(strstr(err.message, "server unreachable"));
    e.fake->fail_submit = NULL;
    /* a constrained gen cut by max_tokens */
    e.fake->finish = "length";
    env f;
    env_open(&f, "fn main() {\n  \"a\" gen n(regex=r\"[0-9]+\", max_tokens=2)\n}\n", 0, NULL);
    f.fake->finish = "length";
    err = run_err(&f, "main", NULL);
    assert_non_null(strstr(err.message, "stopped at max_tokens=2"));
    env_close(&f);
    /* the output of a JSON gen that is not JSON */
    env_open(&f, "fn main() {\n  \"a\" gen j(json=true)\n  return j.x\n}\n", 0, NULL);
    f.fake->json_answer = "{\"x\": ";
    err = run_err(&f, "main", NULL);
    assert_int_equal(err.line, 2);
    assert_non_null(strstr(err.message, "not valid JSON"));
    env_close(&f);
    env_close(&e);
}

static void test_arguments(void **state) {
    (void)state;
    env e;
    env_open(&e, "fn main(a, b = a + 1) { return [a, b] }\n", 0, NULL);
    tr_dsl_result r = run_ok(&e, "main", "{\"a\": 1}");
    expect_json(r.ret, "[1, 2]");
    tr_dsl_result_deinit(&r);
    tr_dsl_error err = run_err(&e, "main", "{}");
    assert_false(err.has_location);
    assert_non_null(strstr(err.message, "needs the argument 'a'"));
    err = run_err(&e, "main", "{\"a\": 1, \"c\": 2}");
    assert_non_null(strstr(err.message, "no parameter 'c' (it takes: a b)"));
    err = run_err(&e, "nothere", NULL);
    assert_int_equal(err.code, TR_ERR_NOT_FOUND);
    env_close(&e);
}

/* A function without return gives its captures; a template call runs
 * inline in the caller's prompt. */
static void test_calls_and_captures(void **state) {
    (void)state;
    env e;
    env_open(&e,
             "fn shot(ex) { user { ex.q } assistant { ex.a } }\n"
             "fn ask(q) { user { q } assistant { gen ans } let ignored = 1 }\n"
             "fn main() {\n"
             "  system { \"S\" }\n"
             "  for ex in [{q: \"1+1\", a: \"2\"}, {q: \"2+2\", a: \"4\"}] { shot(ex) }\n"
             "  user { \"3+3\" }\n"
             "  assistant { gen x }\n"
             "  let r = ask(\"why\")\n"
             "  return r\n"
             "}\n",
             0, NULL);
    tr_dsl_result r = run_ok(&e, "main", NULL);
    fake_backend *f = e.fake;
    assert_string_equal(f->prompts[0],
                        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n1+1<|im_end|>\n"
                        "<|im_start|>assistant\n2<|im_end|>\n<|im_start|>user\n2+2<|im_end|>\n"
                        "<|im_start|>assistant\n4<|im_end|>\n<|im_start|>user\n3+3<|im_end|>\n"
                        "<|im_start|>assistant\n");
    /* ask ran in a fresh prompt */
    assert_string_equal(f->prompts[1], "<|im_start|>user\nwhy<|im_end|>\n<|im_start|>assistant\n");
    expect_json(r.ret, "{\"ans\": \"A1\"}");
    expect_json(r.vars, "{\"x\": \"A0\"}");
    tr_dsl_result_deinit(&r);
    env_close(&e);
}

static void test_globals_load(void **state) {
    (void)state;
    env e;
    env_open(&e,
             "let shots = load(\"shots.jsonl\")\n"
             "let schema = load(\"person.schema.json\")\n"
             "let note = load(\"note.txt\")\n"
             "fn main() { return [len(shots), shots[1].label, schema.type, trim(note)] }\n",
             0, NULL);
    tr_dsl_result r = run_ok(&e, "main", NULL);
    expect_json(r.ret, "[3, \"negative\", \"object\", \"a plain text file\"]");
    tr_dsl_result_deinit(&r);
    env_close(&e);
    /* a bad global fails the session with its location */
    tr_dsl_script *s;
    tr_dsl_error err;
    const char *src = "let a = 1\nlet b = load(\"bad.jsonl\")\nfn main() {}\n";
    assert_int_equal(tr_dsl_script_parse("t.tr", TRELLIS_SOURCE_DIR "/tests/data/dsl", src,
                                         strlen(src), NULL, &s, &err),
                     TR_OK);
    fake_backend *fb = fake_new(0);
    tr_dsl_session *sess;
    assert_int_equal(tr_dsl_session_new(s, &fb->base, NULL, &sess, &err), TR_ERR_FORMAT);
    assert_int_equal(err.line, 2);
    assert_non_null(strstr(err.message, "bad.jsonl line 2 is not JSON"));
    tr_dsl_backend_free(&fb->base);
    tr_dsl_script_free(s);
}

/* A session whose global load()s the file named in src from dir; returns
 * the status of tr_dsl_session_new and fills err. */
static tr_status session_with_load(const char *dir, const tr_dsl_session_options *o,
                                   tr_dsl_error *err) {
    const char *src = "let big = load(\"big.txt\")\nfn main() { return len(big) }\n";
    tr_dsl_script *s;
    assert_int_equal(tr_dsl_script_parse("t.tr", dir, src, strlen(src), NULL, &s, err), TR_OK);
    fake_backend *fb = fake_new(0);
    tr_dsl_session *sess = NULL;
    tr_status st = tr_dsl_session_new(s, &fb->base, o, &sess, err);
    if (st == TR_OK) tr_dsl_session_free(sess);
    tr_dsl_backend_free(&fb->base);
    tr_dsl_script_free(s);
    return st;
}

/* load() reads at most max_file_bytes (64 MiB by default): one byte more
 * is an error naming the file and the limit, at the load's line. */
static void test_load_file_limit(void **state) {
    (void)state;
    char dir[] = "/tmp/trellis-dsl-load-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[sizeof dir + 16];
    snprintf(path, sizeof path, "%s/big.txt", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(ftruncate(fileno(f), ((off_t)64 << 20) + 1), 0); /* sparse */
    fclose(f);
    tr_dsl_error err;
    assert_int_equal(session_with_load(dir, NULL, &err), TR_ERR_LIMIT);
    assert_int_equal(err.line, 1);
    assert_non_null(strstr(err.message, "big.txt is larger than max_file_bytes (67108864)"));
    /* exactly at a (smaller) limit loads; one byte over does not */
    tr_dsl_session_options o;
    tr_dsl_session_options_default(&o);
    o.limits.max_file_bytes = 4096;
    f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i < 4096; i++) fputc('x', f);
    fclose(f);
    assert_int_equal(session_with_load(dir, &o, &err), TR_OK);
    f = fopen(path, "ab");
    assert_non_null(f);
    fputc('x', f);
    fclose(f);
    assert_int_equal(session_with_load(dir, &o, &err), TR_ERR_LIMIT);
    assert_non_null(strstr(err.message, "larger than max_file_bytes (4096)"));
    /* 0 disables load() */
    o.limits.max_file_bytes = 0;
    assert_int_equal(session_with_load(dir, &o, &err), TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "reading files is disabled"));
    unlink(path);
    rmdir(dir);
}

static void test_limits_runtime(void **state) {
    (void)state;
    tr_dsl_session_options o;
    tr_dsl_session_options_default(&o);
    o.limits.max_steps = 1000;
    o.limits.max_prompt_bytes = 64;
    o.limits.max_tasks = 3;
    env e;
    env_open(&e,
             "fn spin() { for i in range(5000) { let x = i } }\n"
             "fn big() { for i in range(10) { \"0123456789\" } }\n"
             "fn wide() { \"x\" fork 5 { gen y } }\n"
             "fn nested() { \"x\" fork 2 { fork 2 { let z = 1 } } }\n",
             0, &o);
    tr_dsl_error err = run_err(&e, "spin", NULL);
    assert_non_null(strstr(err.message, "max_steps"));
    err = run_err(&e, "big", NULL);
    assert_non_null(strstr(err.message, "max_prompt_bytes"));
    err = run_err(&e, "wide", NULL);
    assert_non_null(strstr(err.message, "max_tasks"));
    err = run_err(&e, "nested", NULL);
    assert_non_null(strstr(err.message, "max_tasks"));
    assert_non_null(strstr(err.trace, "in branch"));
    env_close(&e);
}

typedef struct seen {
    char text[256];
    int calls;
} seen;

static void stream_cb(void *user, int32_t task, const char *name, const char *text,
                      size_t len) {
    seen *s = user;
    size_t used = strlen(s->text);
    if (s->calls == 0) used += (size_t)snprintf(s->text + used, sizeof s->text - used, "%s=", name);
    snprintf(s->text + used, sizeof s->text - used, "%.*s", (int)len, text);
    s->calls++;
    if (s->calls == 2) strcat(s->text, ";");
    assert_int_equal(task, 0);
}

static void test_streaming(void **state) {
    (void)state;
    seen s = {{0}, 0};
    tr_dsl_stream st = {stream_cb, &s};
    tr_dsl_session_options o;
    tr_dsl_session_options_default(&o);
    o.stream = &st;
    env e;
    env_open(&e, "fn main() { \"a\" gen word }\n", 10, &o);
    tr_dsl_result r = run_ok(&e, "main", NULL);
    assert_true(e.fake->reqs[0].stream);
    assert_string_equal(s.text, "word=A0;");
    assert_int_equal(s.calls, 2);
    tr_dsl_result_deinit(&r);
    env_close(&e);
}

/* ---- batches ---- */

typedef struct lines {
    char *text[64];
    size_t index[64];
    int n;
} lines;

static void collect(void *user, size_t index, json_t *line) {
    lines *l = user;
    l->text[l->n] = json_dumps(line, JSON_COMPACT | JSON_SORT_KEYS);
    l->index[l->n++] = index;
}

static void test_batch_in_order(void **state) {
    (void)state;
    env e;
    env_open(&e,
             "let shared = \"Instructions shared by every input.\\n\"\n"
             "fn main(x) {\n"
             "  \"{shared}Input: {x}\\n\"\n"
             "  gen y\n"
             "  if x == \"boom\" { return 1 / 0 }\n"
             "  return \"{x}->{y}\"\n"
             "}\n",
             40, NULL);
    const char *raw[] = {"{\"x\": \"a\"}", "{\"x\": \"b\"}", NULL, "{\"x\": \"boom\"}",
                         "{\"x\": \"c\"}", "{\"x\": \"d\"}", "{\"x\": \"e\"}", "{\"y\": 1}"};
    size_t n = sizeof raw / sizeof raw[0];
    json_t *inputs[8];
    const char *errs[8] = {0};
    for (size_t i = 0; i < n; i++) inputs[i] = raw[i] ? json_loads(raw[i], 0, NULL) : NULL;
    errs[2] = "line 3 is not JSON";
    tr_dsl_batch_options bo;
    tr_dsl_batch_options_default(&bo);
    bo.parallel = 3;
    lines l = {0};
    tr_dsl_batch_stats st;
    tr_dsl_error err;
    assert_int_equal(tr_dsl_batch_run(e.sess, "main", inputs, errs, n, &bo, collect, &l, &st, &err),
                     TR_OK);
    assert_int_equal(l.n, (int)n);
    for (int i = 0; i < l.n; i++) assert_int_equal(l.index[i], i);
    assert_non_null(strstr(l.text[0], "\"return\":\"a->A0\""));
    assert_non_null(strstr(l.text[2], "line 3 is not JSON"));
    assert_non_null(strstr(l.text[3], "division by zero"));
    assert_non_null(strstr(l.text[3], "\"line\":5"));
    assert_non_null(strstr(l.text[7], "no parameter 'y'"));
    assert_int_equal(st.ok, 5);
    assert_int_equal(st.failed, 3);
    /* the warm-up: input 0's generation finished before any other began */
    fake_backend *f = e.fake;
    assert_non_null(strstr(f->prompts[0], "Input: a"));
    for (int i = 1; i < f->n; i++) assert_int_equal(f->done_before[i] >= 1, 1);
    assert_true(f->max_inflight >= 2 && f->max_inflight <= 3);
    for (int i = 0; i < l.n; i++) free(l.text[i]);
    for (size_t i = 0; i < n; i++) json_decref(inputs[i]);
    env_close(&e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_and_builtins),
        cmocka_unit_test(test_plain_prompt_and_options),
        cmocka_unit_test(test_chat_prompt),
        cmocka_unit_test(test_select_and_json),
        cmocka_unit_test(test_select_by_logprob),
        cmocka_unit_test(test_fork_concurrent_and_joined),
        cmocka_unit_test(test_parallel),
        cmocka_unit_test(test_spawned_calls_overlap),
        cmocka_unit_test(test_runtime_errors),
        cmocka_unit_test(test_error_trace),
        cmocka_unit_test(test_backend_failures),
        cmocka_unit_test(test_arguments),
        cmocka_unit_test(test_calls_and_captures),
        cmocka_unit_test(test_globals_load),
        cmocka_unit_test(test_load_file_limit),
        cmocka_unit_test(test_limits_runtime),
        cmocka_unit_test(test_streaming),
        cmocka_unit_test(test_batch_in_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
