/* test_dsl_model.c — the DSL in-process on the default model (label
 * `model`: without the model this fails, it never skips): every construct
 * through the real engine, constraints holding on real output, forks and
 * batches served from the prefix cache, streaming equal to the result,
 * and engine-side failures reported at the gen's location. Outputs are
 * checked for structure, not wisdom: the model is small. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frontend/dsl.h"
#include "tests/unit/test_env.h"

static trellis_engine *engine;
static tr_dsl_backend *backend;

static int setup(void **state) {
    (void)state;
    if (!model_present()) {
        fprintf(stderr, "test_dsl_model: the default model is missing (scripts/setup.sh "
                        "fetches it)\n");
        return -1;
    }
    trellis_engine_options o;
    trellis_engine_options_default(&o);
    o.threads = 2;
    o.kv_mb = 128;
    o.ctx = 2048;
    char err[512];
    if (trellis_engine_new(NULL, &o, &engine, err, sizeof err) != TRELLIS_OK) {
        fprintf(stderr, "engine: %s\n", err);
        return -1;
    }
    if (tr_dsl_backend_engine_new(engine, &backend, err, sizeof err) != TR_OK) return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tr_dsl_backend_free(backend);
    trellis_engine_free(engine);
    return 0;
}

typedef struct prog {
    tr_dsl_script *script;
    tr_dsl_session *sess;
} prog;

static void prog_open(prog *p, const char *src, const tr_dsl_session_options *o) {
    tr_dsl_error e;
    tr_status st = tr_dsl_script_parse("m.tr", TRELLIS_SOURCE_DIR "/samples/dsl", src,
                                       strlen(src), NULL, &p->script, &e);
    if (st) fprintf(stderr, "parse %d:%d %s\n", e.line, e.column, e.message);
    assert_int_equal(st, TR_OK);
    st = tr_dsl_session_new(p->script, backend, o, &p->sess, &e);
    if (st) fprintf(stderr, "session: %s\n", e.message);
    assert_int_equal(st, TR_OK);
}

static void prog_close(prog *p) {
    tr_dsl_session_free(p->sess);
    tr_dsl_script_free(p->script);
}

static tr_dsl_result run(prog *p, const char *fn, const char *args) {
    json_t *a = args ? json_loads(args, 0, NULL) : NULL;
    tr_dsl_result r;
    tr_dsl_error e;
    tr_status st = tr_dsl_session_run(p->sess, fn, a, &r, &e);
    if (st) {
        char buf[2048];
        fputs(tr_dsl_error_format(p->script, &e, buf, sizeof buf), stderr);
    }
    assert_int_equal(st, TR_OK);
    json_decref(a);
    return r;
}

static bool all_digits(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return false;
    return true;
}

static void test_constructs(void **state) {
    (void)state;
    prog p;
    prog_open(&p,
              "fn main() {\n"
              "  system { \"You answer briefly.\" }\n"
              "  user { \"What is the capital of France?\" }\n"
              "  assistant { gen city(max_tokens=12, stop=[\"\\n\", \".\"]) }\n"
              "  user { \"How many legs does a cat have? Digits only.\" }\n"
              "  assistant { gen legs(regex=r\"[0-9]{1,2}\") }\n"
              "  user { \"Is fire hot?\" }\n"
              "  assistant { select yn from [\"yes\", \"no\"] }\n"
              "  user { \"Pick a colour.\" }\n"
              "  assistant { gen colour(choices=[\"red\", \"green\", \"blue\"]) }\n"
              "  return {city: city, legs: legs, yn: yn, colour: colour}\n"
              "}\n",
              NULL);
    tr_dsl_result r = run(&p, "main", NULL);
    const char *city = json_string_value(json_object_get(r.ret, "city"));
    const char *legs = json_string_value(json_object_get(r.ret, "legs"));
    const char *yn = json_string_value(json_object_get(r.ret, "yn"));
    const char *colour = json_string_value(json_object_get(r.ret, "colour"));
    assert_non_null(city);
    assert_null(strchr(city, '\n')); /* the stop string held */
    assert_true(strlen(legs) >= 1 && strlen(legs) <= 2 && all_digits(legs));
    assert_true(strcmp(yn, "yes") == 0 || strcmp(yn, "no") == 0);
    assert_true(strcmp(colour, "red") == 0 || strcmp(colour, "green") == 0 ||
                strcmp(colour, "blue") == 0);
    /* the final prompt holds every generation, in the template's markers */
    assert_non_null(strstr(r.text, "<|im_start|>assistant\n"));
    assert_non_null(strstr(r.text, legs));
    assert_int_equal(r.stats.gens, 4);
    /* each gen continues the previous one's prompt: cached from the second on */
    assert_true(r.stats.cached_tokens > r.stats.prompt_tokens / 2);
    assert_true(r.stats.interp_ms < r.stats.wall_ms);
    tr_dsl_result_deinit(&r);
    prog_close(&p);
}

/* select by logprob on the real model: the obvious option wins in text and
 * chat prompts (the scores are the engine's prompt log-probs, checked
 * against generation in test_engine_model.c); one prefill of the prompt
 * plus one per option, the options served from the prompt's cache. */
static void test_select_by_logprob_real(void **state) {
    (void)state;
    prog p;
    prog_open(&p,
              "fn main() {\n"
              "  \"The Eiffel Tower, the famous wrought-iron lattice tower that was built \"\n"
              "  \"for the World's Fair of 1889, stands in the capital of France, the city of\"\n"
              "  select city from [\" Banana bread\", \" Paris\", \" the moon\"] by logprob\n"
              "  return city\n"
              "}\n"
              "fn chat() {\n"
              "  user { \"What is the capital of France? Answer with the city only.\" }\n"
              "  assistant { select city from [\"Tokyo\", \"Paris\", \"Lima\"] by logprob }\n"
              "  return city\n"
              "}\n",
              NULL);
    tr_dsl_result r = run(&p, "main", NULL);
    assert_string_equal(json_string_value(r.ret), " Paris");
    assert_int_equal(r.stats.gens, 4);
    assert_true(r.stats.cached_tokens > 0);
    assert_non_null(strstr(r.text, "the city of Paris"));
    tr_dsl_result_deinit(&r);
    r = run(&p, "chat", NULL);
    assert_string_equal(json_string_value(r.ret), "Paris");
    tr_dsl_result_deinit(&r);
    prog_close(&p);
}

static void test_raw_text_and_greedy_repeatable(void **state) {
    (void)state;
    prog p;
    prog_open(&p,
              "fn main() {\n"
              "  \"Paris is the capital and largest city of France. It is known for its museums, \"\n"
              "  \"its architecture and its food. The river that flows through Paris is the\"\n"
              "  gen x(max_tokens=6)\n"
              "  return x\n"
              "}\n",
              NULL);
    tr_dsl_result a = run(&p, "main", NULL), b = run(&p, "main", NULL);
    assert_true(json_string_length(a.ret) > 0);
    assert_string_equal(json_string_value(a.ret), json_string_value(b.ret)); /* greedy */
    /* the second run found the prompt's full pages in the cache */
    assert_true(b.stats.cached_tokens >= 16);
    tr_dsl_result_deinit(&a);
    tr_dsl_result_deinit(&b);
    prog_close(&p);
}

static void test_fork_parallel_spawn(void **state) {
    (void)state;
    prog p;
    prog_open(&p,
              "fn name_one(kind) {\n"
              "  user { \"Name one {kind}. One word.\" }\n"
              "  assistant { gen w(max_tokens=6, stop=\"\\n\") }\n"
              "  return w\n"
              "}\n"
              "fn main() {\n"
              "  system { \"You are a helpful assistant. Answer in one short line.\" }\n"
              "  user { \"Suggest a name for a cat.\" }\n"
              "  fork 3 { assistant { gen idea(max_tokens=8, temperature=0.9, stop=\"\\n\") } }\n"
              "  parallel {\n"
              "    branch { assistant { gen a(max_tokens=4) } }\n"
              "    branch { assistant { gen b(max_tokens=4) } }\n"
              "  }\n"
              "  let f = name_one(\"fruit\")\n"
              "  let c = name_one(\"colour\")\n"
              "  return {idea: idea, a: a, b: b, f: f, c: c}\n"
              "}\n",
              NULL);
    tr_dsl_result r = run(&p, "main", NULL);
    assert_int_equal(json_array_size(json_object_get(r.ret, "idea")), 3);
    assert_true(json_is_string(json_object_get(r.ret, "a")));
    assert_true(json_is_string(json_object_get(r.ret, "f")));
    assert_true(json_is_string(json_object_get(r.ret, "c")));
    /* 3 branches + 2 warm-ups + 2 parallel + 2 calls */
    assert_int_equal(r.stats.gens, 9);
    /* branches found the shared prompt the warm-up left in the cache */
    assert_true(r.stats.cached_tokens * 2 > r.stats.prompt_tokens);
    tr_dsl_result_deinit(&r);
    prog_close(&p);
}

static char streamed[4096];
static void on_text(void *user, int32_t task, const char *name, const char *text, size_t len) {
    (void)user;
    (void)task;
    (void)name;
    strncat(streamed, text, len);
}

static void test_stream(void **state) {
    (void)state;
    tr_dsl_session_options o;
    tr_dsl_session_options_default(&o);
    tr_dsl_stream s = {on_text, NULL};
    o.stream = &s;
    prog p;
    prog_open(&p, "fn main() { user { \"Count to five.\" } assistant { gen c(max_tokens=20) } }\n",
              &o);
    streamed[0] = 0;
    tr_dsl_result r = run(&p, "main", NULL);
    assert_string_equal(streamed, json_string_value(json_object_get(r.vars, "c")));
    tr_dsl_result_deinit(&r);
    prog_close(&p);
}

typedef struct batch_out {
    int n;
    size_t index[16];
    bool ok[16];
} batch_out;

static void collect(void *user, size_t index, json_t *line) {
    batch_out *b = user;
    b->index[b->n] = index;
    b->ok[b->n] = json_object_get(line, "return") != NULL;
    b->n++;
}

static void test_batch_fewshot(void **state) {
    (void)state;
    tr_dsl_script *s;
    tr_dsl_error e;
    assert_int_equal(tr_dsl_script_load(TRELLIS_SOURCE_DIR "/samples/dsl/fewshot_classify.tr",
                                        NULL, &s, &e),
                     TR_OK);
    tr_dsl_session *sess;
    assert_int_equal(tr_dsl_session_new(s, backend, NULL, &sess, &e), TR_OK);
    const char *reviews[] = {"I loved every minute.", "Dreadful and dull.", "It was okay.",
                             "A masterpiece.", "Boring.", "Fine, I guess."};
    json_t *inputs[6];
    for (int i = 0; i < 6; i++) inputs[i] = json_pack("{s:s}", "review", reviews[i]);
    tr_dsl_batch_options bo;
    tr_dsl_batch_options_default(&bo);
    bo.parallel = 4;
    batch_out out = {0};
    tr_dsl_batch_stats st;
    assert_int_equal(tr_dsl_batch_run(sess, "main", inputs, NULL, 6, &bo, collect, &out, &st, &e),
                     TR_OK);
    assert_int_equal(out.n, 6);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(out.index[i], i);
        assert_true(out.ok[i]);
    }
    assert_int_equal(st.ok, 6);
    /* inputs 1..5 found the instructions and the 12 examples in the cache */
    assert_true(st.sum.cached_tokens * 10 > st.sum.prompt_tokens * 7);
    for (int i = 0; i < 6; i++) json_decref(inputs[i]);
    tr_dsl_session_free(sess);
    tr_dsl_script_free(s);
}

/* A JSON Schema constraint through the DSL: the value is the parsed
 * object with the required integer (the engine compiles the schema). */
static void test_json_schema(void **state) {
    (void)state;
    prog p;
    prog_open(&p,
              "fn main() {\n"
              "  user { \"Describe a cat as JSON.\" }\n"
              "  assistant { gen cat(max_tokens=60, json_schema={type: \"object\",\n"
              "    properties: {legs: {type: \"integer\"}}, required: [\"legs\"],\n"
              "    additionalProperties: false}) }\n"
              "  return cat\n"
              "}\n",
              NULL);
    tr_dsl_result r = run(&p, "main", NULL);
    /* NAME is the parsed value */
    json_t *doc = r.ret;
    if (!json_is_object(doc)) {
        char *t = json_dumps(doc, JSON_ENCODE_ANY);
        fprintf(stderr, "not an object: %s\n", t ? t : "(null)");
        free(t);
    }
    assert_true(json_is_object(doc));
    assert_true(json_is_integer(json_object_get(doc, "legs")));
    assert_int_equal(json_object_size(doc), 1);
    tr_dsl_result_deinit(&r);
    prog_close(&p);
}

static void test_engine_errors(void **state) {
    (void)state;
    prog p;
    prog_open(&p,
              "fn long() {\n"
              "  \"word \"\n"
              "  gen x(max_tokens=100000)\n"
              "}\n"
              "fn bad_regex() {\n"
              "  \"x\"\n"
              "  gen y(regex=r\"(unclosed\")\n"
              "}\n"
              "fn schema() {\n"
              "  \"x\"\n"
              "  gen z(json_schema={type: \"frobnicate\"})\n"
              "}\n",
              NULL);
    const char *fns[] = {"long", "bad_regex", "schema"};
    const int lines[] = {3, 7, 11};
    for (int i = 0; i < 3; i++) {
        tr_dsl_result r;
        tr_dsl_error e;
        assert_int_not_equal(tr_dsl_session_run(p.sess, fns[i], NULL, &r, &e), TR_OK);
        assert_int_equal(e.line, lines[i]);
        assert_int_equal(e.column, 3);
        assert_true(strlen(e.message) > 10);
    }
    prog_close(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_constructs),
        cmocka_unit_test(test_select_by_logprob_real),
        cmocka_unit_test(test_raw_text_and_greedy_repeatable),
        cmocka_unit_test(test_fork_parallel_spawn),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_batch_fewshot),
        cmocka_unit_test(test_json_schema),
        cmocka_unit_test(test_engine_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
