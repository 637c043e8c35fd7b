/* test_cli.c — the CLI's parts that need no model: the flag parser (every
 * value kind, bounds, the one-line errors that name the flag) and the
 * JSON writers (valid JSON for any bytes: token pieces that are not valid
 * UTF-8 as byte arrays, completion text repaired, non-finite numbers as
 * null). The commands themselves run end to end in tests/e2e/test_cli.py;
 * the writers are also fuzzed (tests/fuzz/fuzz_cli_json.c).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "kernels/cpu/cpu.h"
#include "app/common/args.h"
#include "app/cli/cli.h"
#include "app/cli/cli_json_internal.h"
#include "trellis.h"

/* flag tables give the members a flag needs (args.h); C zeroes the rest */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

/* ---- stderr capture: the parser's messages ---- */

static char g_err[4096];

/* Runs cli_parse on the NULL-terminated argument list with stderr sent to
 * a file, and leaves what it printed in g_err. */
static bool parse(const cli_opt *opts, size_t n, bool *help, ...) {
    char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, help);
    for (char *a; (a = va_arg(ap, char *)) && argc < 32;) argv[argc++] = a;
    va_end(ap);
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    dup2(fileno(tmp), 2);
    bool ok = cli_parse("test", "[options]", opts, n, argc, argv, help);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t got = fread(g_err, 1, sizeof g_err - 1, tmp);
    g_err[got] = 0;
    fclose(tmp);
    return ok;
}

typedef struct vals {
    bool flag;
    const char *str;
    int64_t i;
    double x;
    cli_strs many;
    int e;
} vals;

#define OPTS(v)                                                                        \
    const cli_opt opts[] = {                                                           \
        {"--flag", "-F", CLI_FLAG, &(v).flag, 1, 0, "a flag", "off"},                  \
        {"--str", "-s", CLI_STR, &(v).str, 1, 0, "a string"},                          \
        {"--int", "-i", CLI_INT, &(v).i, -5, 10, "an integer", "3"},                   \
        {"--x", NULL, CLI_FLOAT, &(v).x, 1e-9, 1, "a number", "1", .range = "(0, 1]"}, \
        {"--many", NULL, CLI_STRS, &(v).many, 1, 0, "repeatable"},                     \
        {"--mode", NULL, CLI_ENUM, &(v).e, 1, 0, "one of three", "a",                  \
         .choices = "a|bb|c"},                                                         \
    }

static void test_parse_values(void **state) {
    (void)state;
    vals v = {0};
    bool help;
    OPTS(v);
    assert_true(parse(opts, 6, &help, "-F", "--str", "hello", "-i", "-5", "--x=0.5",
                      "--many", "a", "--many", "b", "--mode", "bb", "--int=10", NULL));
    assert_false(help);
    assert_true(v.flag);
    assert_string_equal(v.str, "hello");
    assert_int_equal(v.i, 10);
    assert_true(v.x == 0.5);
    assert_int_equal(v.many.n, 2);
    assert_string_equal(v.many.items[1], "b");
    assert_int_equal(v.e, 1);
    assert_string_equal(g_err, "");
}

static void test_parse_errors_name_the_flag(void **state) {
    (void)state;
    static const struct {
        const char *args[3];
        const char *msg;
    } bad[] = {
        {{"-i", "11"}, "trellis test: -i: must be between -5 and 10, got 11\n"},
        {{"--int", "-6"}, "trellis test: --int: must be between -5 and 10, got -6\n"},
        {{"--int", "99999999999999999999"}, "trellis test: --int: must be between -5 and 10, "
                                            "got 99999999999999999999\n"},
        {{"--int", "3x"}, "trellis test: --int: expects an integer, got '3x'\n"},
        {{"--int", ""}, "trellis test: --int: expects an integer, got ''\n"},
        {{"--x", "0"}, "trellis test: --x: must be in (0, 1], got 0\n"},
        {{"--x", "inf"}, "trellis test: --x: expects a finite number, got 'inf'\n"},
        {{"--x=nan"}, "trellis test: --x: expects a finite number, got 'nan'\n"},
        {{"--mode", "d"}, "trellis test: --mode: unknown value 'd' (a, bb or c)\n"},
        {{"--mode", "b"}, "trellis test: --mode: unknown value 'b' (a, bb or c)\n"},
        {{"--flag=1"}, "trellis test: --flag: takes no value\n"},
        {{"--str"}, "trellis test: --str: needs a value\n"},
        {{"--nope"}, "trellis test: unknown option '--nope' (see trellis test --help)\n"},
        {{"-x"}, "trellis test: unknown option '-x' (see trellis test --help)\n"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        vals v = {.i = 3};
        bool help;
        OPTS(v);
        assert_false(parse(opts, 6, &help, bad[k].args[0], bad[k].args[1], bad[k].args[2],
                           NULL));
        assert_string_equal(g_err, bad[k].msg);
        assert_int_equal(v.i, 3); /* a refused value is not stored */
    }
}

static void test_parse_strs_limit(void **state) {
    (void)state;
    vals v = {0};
    OPTS(v);
    char *argv[2 * CLI_STRS_MAX + 2];
    for (int i = 0; i < CLI_STRS_MAX + 1; i++) {
        argv[2 * i] = "--many";
        argv[2 * i + 1] = "v";
    }
    bool help;
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    dup2(fileno(tmp), 2);
    bool ok = cli_parse("test", "", opts, 6, 2 * (CLI_STRS_MAX + 1), argv, &help);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fclose(tmp);
    assert_false(ok);
    assert_int_equal(v.many.n, CLI_STRS_MAX);
}

static void test_help_lists_defaults(void **state) {
    (void)state;
    vals v = {0};
    OPTS(v);
    fflush(stdout);
    int saved = dup(1);
    FILE *tmp = tmpfile();
    dup2(fileno(tmp), 1);
    bool help = false;
    char *argv[] = {"--int", "4", "--help", "--int", "bad"};
    bool ok = cli_parse("test", "[options]", opts, 6, 5, argv, &help);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    rewind(tmp);
    char out[4096];
    out[fread(out, 1, sizeof out - 1, tmp)] = 0;
    fclose(tmp);
    assert_true(ok && help);
    assert_non_null(strstr(out, "usage: trellis test [options]"));
    assert_non_null(strstr(out, "-i, --int N"));
    assert_non_null(strstr(out, "an integer (default: 3)"));
    assert_non_null(strstr(out, "--mode a|bb|c"));
    assert_non_null(strstr(out, "repeatable"));
}

static void test_check_text(void **state) {
    (void)state;
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    dup2(fileno(tmp), 2);
    bool a = cli_check_text("test", "-p", "caf\xc3\xa9", 5);
    bool b = cli_check_text("test", "-p", "ab\xff", 3);
    bool c = cli_check_text("test", "-f", "ab\0c", 4);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    char out[512];
    out[fread(out, 1, sizeof out - 1, tmp)] = 0;
    fclose(tmp);
    assert_true(a);
    assert_false(b);
    assert_false(c);
    assert_string_equal(out, "trellis test: -p: not valid UTF-8 (at byte 2)\n"
                             "trellis test: -f: contains a NUL byte (at byte 2)\n");
}

static void test_thread_limit_is_the_pools(void **state) {
    (void)state;
    /* trellis.h states the CPU backend's limit for applications */
    assert_int_equal(TRELLIS_MAX_THREADS, TR_CPU_MAX_THREADS);
}

/* ---- JSON writers ---- */

static const char *const k_pieces[] = {"Hello", "\xe0\xb9", "", "a\0b", "\xf0\x9f\x98\x80"};
static const size_t k_lens[] = {5, 2, 0, 3, 4};

static const char *piece(const void *ctx, int32_t id, size_t *len) {
    (void)ctx;
    if (id < 0 || id >= 5) return NULL;
    *len = k_lens[id];
    return k_pieces[id];
}

static json_t *load(const char *s) {
    assert_non_null(s);
    json_error_t e;
    json_t *j = json_loads(s, JSON_ALLOW_NUL, &e);
    if (!j) fail_msg("invalid JSON (%s at %d): %s", e.text, e.position, s);
    return j;
}

static void test_json_tokenize(void **state) {
    (void)state;
    int32_t ids[] = {0, 1, 2, 3, 4, 7};
    char *s = cli_json_tokenize(ids, 6, piece, NULL);
    json_t *j = load(s);
    assert_int_equal(json_integer_value(json_object_get(j, "count")), 6);
    json_t *p = json_object_get(j, "pieces");
    assert_string_equal(json_string_value(json_array_get(p, 0)), "Hello");
    json_t *b = json_array_get(p, 1); /* half a Thai character: bytes */
    assert_true(json_is_array(b));
    assert_int_equal(json_array_size(b), 2);
    assert_int_equal(json_integer_value(json_array_get(b, 0)), 0xe0);
    assert_int_equal(json_integer_value(json_array_get(b, 1)), 0xb9);
    assert_string_equal(json_string_value(json_array_get(p, 2)), "");
    assert_int_equal(json_string_length(json_array_get(p, 3)), 3); /* NUL kept */
    assert_string_equal(json_string_value(json_array_get(p, 4)), "\xf0\x9f\x98\x80");
    assert_true(json_is_null(json_array_get(p, 5))); /* unknown id */
    json_decref(j);
    free(s);
}

static void test_json_sample(void **state) {
    (void)state;
    int32_t toks[] = {1, 0};
    trellis_logprob lp[2] = {{.token = 1, .logprob = -0.5f, .n_top = 2},
                             {.token = 0, .logprob = -INFINITY, .n_top = 99}};
    lp[0].top[0] = (trellis_top_logprob){1, -0.5f};
    lp[0].top[1] = (trellis_top_logprob){4, NAN};
    cli_sample_json js = {
        .index = 1, .n_samples = 2, .text = "ok \xe0\xb9 \xff end", .text_len = 12,
        .tokens = toks, .n_tokens = 2, .logprobs = lp, .finish = "stop",
        .stop = "\xff\xfe", .stop_token = 2, .model_load = "mmap",
        .constraint = "regex",
        .metrics = {.prompt_tokens = 10, .ttft_ms = 20, .e2e_ms = 50, .tpot_ms = 10,
                    .completion_tokens = 3, .forced_tokens = 1},
    };
    char *s = cli_json_sample(&js, piece, NULL);
    json_t *j = load(s);
    assert_string_equal(json_string_value(json_object_get(j, "text")),
                        "ok \xef\xbf\xbd \xef\xbf\xbd end");
    assert_string_equal(json_string_value(json_object_get(j, "stop")),
                        "\xef\xbf\xbd\xef\xbf\xbd");
    json_t *l = json_object_get(j, "logprobs");
    assert_int_equal(json_array_size(l), 2);
    json_t *top = json_object_get(json_array_get(l, 0), "top");
    assert_int_equal(json_array_size(top), 2);
    assert_true(json_is_null(json_object_get(json_array_get(top, 1), "logprob")));
    assert_true(json_is_null(json_object_get(json_array_get(l, 1), "logprob")));
    /* n_top beyond the array is clamped */
    assert_int_equal(json_array_size(json_object_get(json_array_get(l, 1), "top")),
                     TRELLIS_MAX_TOP_LOGPROBS);
    assert_true(json_is_array(json_object_get(json_array_get(l, 0), "text")));
    json_t *t = json_object_get(j, "timings");
    assert_true(json_real_value(json_object_get(t, "prefill_tok_per_s")) == 500.0);
    assert_true(json_real_value(json_object_get(t, "decode_tok_per_s")) == 100.0);
    assert_true(json_real_value(json_object_get(t, "decode_ms")) == 30.0);
    json_t *c = json_object_get(j, "constraint");
    assert_false(json_is_true(json_object_get(c, "accepted"))); /* a stop string */
    assert_int_equal(json_integer_value(json_object_get(c, "forward_passes")), 1);
    assert_int_equal(json_integer_value(json_object_get(j, "completion_tokens")), 2);
    json_decref(j);
    free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_values),
        cmocka_unit_test(test_parse_errors_name_the_flag),
        cmocka_unit_test(test_parse_strs_limit),
        cmocka_unit_test(test_help_lists_defaults),
        cmocka_unit_test(test_check_text),
        cmocka_unit_test(test_thread_limit_is_the_pools),
        cmocka_unit_test(test_json_tokenize),
        cmocka_unit_test(test_json_sample),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
