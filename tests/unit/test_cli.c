/* test_cli.c — the CLI's parts that need no model: the text checks and
 * the JSON writers (valid JSON for any bytes: token pieces that are not
 * valid UTF-8 as byte arrays, completion text repaired, non-finite
 * numbers as null). The flag parser every command shares is tested in
 * test_app_args.c; the commands themselves run end to end in
 * tests/e2e/test_cli.py; the writers are also fuzzed
 * (tests/fuzz/fuzz_cli_json.c).
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
#include "app/cli/cli.h"
#include "app/cli/cli_json_internal.h"
#include "trellis.h"

static void test_check_text(void **state) {
    (void)state;
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    dup2(fileno(tmp), 2);
    bool a = tr_cli_check_text("test", "-p", "caf\xc3\xa9", 5);
    bool b = tr_cli_check_text("test", "-p", "ab\xff", 3);
    bool c = tr_cli_check_text("test", "-f", "ab\0c", 4);
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
    char *s = tr_cli_json_tokenize(ids, 6, piece, NULL);
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
    char *s = tr_cli_json_sample(&js, piece, NULL);
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
        cmocka_unit_test(test_check_text),
        cmocka_unit_test(test_thread_limit_is_the_pools),
        cmocka_unit_test(test_json_tokenize),
        cmocka_unit_test(test_json_sample),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
