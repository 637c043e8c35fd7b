/* test_app_args.c — what every `trellis` command shares (app/common): the
 * flag parser (every value kind, bounds, operands, the one-line errors
 * that name the flag, --help) and the one table of engine flags, whose
 * defaults and bounds must be the engine's own (trellis_engine_option_find)
 * and which every flag takes at its bounds and refuses one past them with
 * the same message. tests/e2e/test_cli.py runs each command with each
 * engine flag at its bounds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "app/common/args.h"
#include "app/common/engine_flags.h"
#include "trellis.h"

/* flag tables give the members a flag needs (args.h); C zeroes the rest */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

/* ---- capture: what the parser prints on stderr (errors) or stdout
 * (--help) ---- */

static char g_out[16384];
static int g_saved = -1, g_fd;
static FILE *g_tmp;

static void capture_begin(int fd) {
    fflush(fd == 1 ? stdout : stderr);
    g_fd = fd;
    g_saved = dup(fd);
    g_tmp = tmpfile();
    assert_non_null(g_tmp);
    dup2(fileno(g_tmp), fd);
}

/* Restores the descriptor and leaves what was written in g_out. */
static void capture_end(void) {
    fflush(g_fd == 1 ? stdout : stderr);
    dup2(g_saved, g_fd);
    close(g_saved);
    rewind(g_tmp);
    size_t got = fread(g_out, 1, sizeof g_out - 1, g_tmp);
    g_out[got] = 0;
    fclose(g_tmp);
}

/* tr_cli_parse of c on the NULL-terminated argument list, its stderr in
 * g_out. */
static bool parse_cmd(const cli_cmd *c, bool *help, ...) {
    char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, help);
    for (char *a; (a = va_arg(ap, char *)) && argc < 32;) argv[argc++] = a;
    va_end(ap);
    capture_begin(2);
    bool ok = tr_cli_parse(c, argc, argv, help);
    capture_end();
    return ok;
}

/* ---- the parser ---- */

typedef struct vals {
    bool flag;
    const char *str;
    int64_t i;
    int32_t i32;
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
        {"a section", NULL, CLI_SECTION},                                              \
        {"--many", NULL, CLI_STRS, &(v).many, 1, 0, "repeatable"},                     \
        {"--more", NULL, CLI_STRS, &(v).many, 1, 0, "the same list"},                  \
        {"--mode", NULL, CLI_ENUM, &(v).e, 1, 0, "one of three", "a",                  \
         .choices = "a|bb|c"},                                                         \
        {"--i32", NULL, CLI_INT32, &(v).i32, 0, 2147483647.0, "an int32", "0"},        \
    };                                                                                 \
    const cli_cmd cmd = {.name = "test", .usage = "[options]", .opts = opts,           \
                         .n_opts = sizeof opts / sizeof opts[0]}

static void test_parse_values(void **state) {
    (void)state;
    vals v = {0};
    bool help;
    OPTS(v);
    assert_true(parse_cmd(&cmd, &help, "-F", "--str", "hello", "-i", "-5", "--x=0.5",
                          "--many", "a", "--more", "b", "--mode", "bb", "--int=10", "--i32",
                          "2147483647", NULL));
    assert_false(help);
    assert_true(v.flag);
    assert_string_equal(v.str, "hello");
    assert_int_equal(v.i, 10);
    assert_true(v.x == 0.5);
    assert_int_equal(v.many.n, 2);
    assert_string_equal(v.many.items[1], "b");
    assert_string_equal(v.many.flags[0], "--many"); /* which flag gave which */
    assert_string_equal(v.many.flags[1], "--more");
    assert_int_equal(v.e, 1);
    assert_int_equal(v.i32, INT32_MAX);
    assert_string_equal(g_out, "");
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
        {{"--i32", "2147483648"},
         "trellis test: --i32: must be between 0 and 2147483647, got 2147483648\n"},
        {{"--i32", "-1"}, "trellis test: --i32: must be between 0 and 2147483647, got -1\n"},
        {{"--x", "0"}, "trellis test: --x: must be in (0, 1], got 0\n"},
        {{"--x", "inf"}, "trellis test: --x: expects a finite number, got 'inf'\n"},
        {{"--x=nan"}, "trellis test: --x: expects a finite number, got 'nan'\n"},
        {{"--mode", "d"}, "trellis test: --mode: unknown value 'd' (a, bb or c)\n"},
        {{"--mode", "b"}, "trellis test: --mode: unknown value 'b' (a, bb or c)\n"},
        {{"--flag=1"}, "trellis test: --flag: takes no value\n"},
        {{"--str"}, "trellis test: --str: needs a value\n"},
        {{"--nope"}, "trellis test: unknown option '--nope' (see trellis test --help)\n"},
        {{"-x"}, "trellis test: unknown option '-x' (see trellis test --help)\n"},
        {{"a section"}, "trellis test: unexpected argument 'a section' (see trellis test "
                        "--help)\n"},
        {{"file.txt"}, "trellis test: unexpected argument 'file.txt' (see trellis test "
                       "--help)\n"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        vals v = {.i = 3, .i32 = 7};
        bool help;
        OPTS(v);
        assert_false(parse_cmd(&cmd, &help, bad[k].args[0], bad[k].args[1], bad[k].args[2],
                               NULL));
        assert_string_equal(g_out, bad[k].msg);
        assert_int_equal(v.i, 3); /* a refused value is not stored */
        assert_int_equal(v.i32, 7);
    }
}

static void test_parse_operands(void **state) {
    (void)state;
    vals v = {0};
    cli_strs ops = {0};
    bool help;
    const cli_opt opts[] = {{"--int", "-i", CLI_INT, &v.i, -5, 10, "an integer", "3"}};
    const cli_cmd cmd = {.name = "test", .usage = "FILE...", .opts = opts, .n_opts = 1,
                         .operands = &ops};
    assert_true(parse_cmd(&cmd, &help, "a.txt", "-i", "4", "-", "b", NULL));
    assert_int_equal(ops.n, 3);
    assert_string_equal(ops.items[0], "a.txt");
    assert_string_equal(ops.items[1], "-"); /* stdin, by convention: not a flag */
    assert_string_equal(ops.items[2], "b");
    assert_null(ops.flags[0]);
    assert_int_equal(v.i, 4);
}

static void test_parse_strs_limit(void **state) {
    (void)state;
    vals v = {0};
    OPTS(v);
    char *argv[2 * CLI_STRS_MAX + 2];
    for (int i = 0; i < CLI_STRS_MAX + 1; i++) {
        argv[2 * i] = i % 2 ? "--more" : "--many";
        argv[2 * i + 1] = "v";
    }
    bool help;
    capture_begin(2);
    bool ok = tr_cli_parse(&cmd, 2 * (CLI_STRS_MAX + 1), argv, &help);
    capture_end();
    assert_false(ok);
    assert_int_equal(v.many.n, CLI_STRS_MAX);
    assert_string_equal(g_out, "trellis test: --many: given more than 64 times\n");
}

static void test_help_lists_defaults(void **state) {
    (void)state;
    vals v = {0};
    OPTS(v);
    bool help = false;
    char *argv[] = {"--int", "4", "--help", "--int", "bad"};
    capture_begin(1);
    bool ok = tr_cli_parse(&cmd, 5, argv, &help);
    capture_end();
    assert_true(ok && help);
    assert_non_null(strstr(g_out, "usage: trellis test [options]"));
    assert_non_null(strstr(g_out, "-h, --help"));
    assert_non_null(strstr(g_out, "-i, --int N"));
    assert_non_null(strstr(g_out, "an integer (default: 3)"));
    assert_non_null(strstr(g_out, "\na section:\n  --many TEXT"));
    assert_non_null(strstr(g_out, "--mode a|bb|c"));
    assert_non_null(strstr(g_out, "repeatable"));
    assert_null(strstr(g_out, "engine options")); /* none attached */
}

/* ---- the engine flags ---- */

/* The flags with an integer value, as --help and errors name them, and
 * the engine option each sets. */
static const struct {
    tr_engine_flag flag;
    const char *name, *option;
    size_t off;
} k_int_flags[] = {
    {TR_EF_THREADS, "--threads", "threads", offsetof(trellis_engine_options, threads)},
    {TR_EF_CTX, "--ctx", "ctx", offsetof(trellis_engine_options, ctx)},
    {TR_EF_KV_MEM, "--kv-mem", "kv_mb", offsetof(trellis_engine_options, kv_mb)},
    {TR_EF_PAGE_SIZE, "--page-size", "page_size", offsetof(trellis_engine_options, page_size)},
    {TR_EF_MAX_RUNNING, "--max-running", "max_running",
     offsetof(trellis_engine_options, max_running)},
    {TR_EF_MAX_BATCH_TOKENS, "--max-batch-tokens", "max_batch_tokens",
     offsetof(trellis_engine_options, max_batch_tokens)},
    {TR_EF_CHUNK_SIZE, "--chunk-size", "chunk_size",
     offsetof(trellis_engine_options, chunk_size)},
};
#define N_INT_FLAGS (sizeof k_int_flags / sizeof k_int_flags[0])

static int32_t member(const trellis_engine_options *o, size_t off) {
    return *(const int32_t *)((const char *)o + off);
}

/* A command with nothing of its own but the engine flags. */
static void engine_cmd(tr_engine_flags *ef, cli_cmd *c) {
    tr_engine_flags_init(ef);
    *c = (cli_cmd){.name = "test", .usage = "[options]"};
    tr_engine_flags_attach(ef, c);
}

/* Bounds and defaults are the engine's: the table copies no number. */
static void test_engine_flags_are_the_engines(void **state) {
    (void)state;
    tr_engine_flags ef;
    cli_cmd c;
    engine_cmd(&ef, &c);
    assert_int_equal(c.n_engine, TR_EF_COUNT);
    trellis_engine_options def;
    trellis_engine_options_default(&def);
    for (size_t k = 0; k < N_INT_FLAGS; k++) {
        const trellis_engine_option_desc *d = trellis_engine_option_find(k_int_flags[k].option);
        assert_non_null(d);
        int32_t lo, hi;
        assert_true(tr_engine_flag_bounds(k_int_flags[k].flag, &lo, &hi));
        assert_int_equal(lo, d->min);
        assert_int_equal(hi, d->max);
        const cli_opt *o = &c.engine[k_int_flags[k].flag];
        assert_string_equal(o->name, k_int_flags[k].name);
        assert_int_equal(o->kind, CLI_INT32);
        assert_true(o->min == d->min && o->max == d->max);
        assert_int_equal(member(&ef.opts, k_int_flags[k].off), d->def);
        assert_int_equal(member(&def, k_int_flags[k].off), d->def);
    }
    /* the public thread bound, not a local one */
    int32_t lo, hi;
    assert_true(tr_engine_flag_bounds(TR_EF_THREADS, &lo, &hi));
    assert_int_equal(hi, TRELLIS_MAX_THREADS);
    assert_false(tr_engine_flag_bounds(TR_EF_LOAD, &lo, &hi)); /* no integer */
    assert_false(tr_engine_flag_bounds(TR_EF_COUNT, &lo, &hi));
    /* --load's values are the engine's modes, in order */
    const trellis_engine_option_desc *load = trellis_engine_option_find("load");
    assert_non_null(load);
    const char *ch = c.engine[TR_EF_LOAD].choices;
    int n = 1;
    for (const char *p = ch; *p; p++) n += *p == '|';
    assert_int_equal(n, load->max - load->min + 1);
    assert_int_equal(load->min, TRELLIS_LOAD_AUTO);
    assert_string_equal(ch, "auto|mmap|read"); /* TRELLIS_LOAD_AUTO, _MMAP, _READ */
    assert_int_equal(TRELLIS_LOAD_MMAP, 1);
    assert_int_equal(TRELLIS_LOAD_READ, 2);
}

/* Every integer flag takes min and max and refuses min - 1 and max + 1,
 * with the message every command prints. */
static void test_engine_flags_at_their_bounds(void **state) {
    (void)state;
    for (size_t k = 0; k < N_INT_FLAGS; k++) {
        const trellis_engine_option_desc *d = trellis_engine_option_find(k_int_flags[k].option);
        long long edge[4] = {d->min, d->max, (long long)d->min - 1, (long long)d->max + 1};
        for (int e = 0; e < 4; e++) {
            tr_engine_flags ef;
            cli_cmd c;
            engine_cmd(&ef, &c);
            char v[32], want[160];
            snprintf(v, sizeof v, "%lld", edge[e]);
            bool help;
            bool ok = parse_cmd(&c, &help, (char *)k_int_flags[k].name, v, NULL);
            if (e < 2) {
                assert_true(ok);
                assert_string_equal(g_out, "");
                assert_int_equal(member(&ef.opts, k_int_flags[k].off), edge[e]);
                assert_true(ef.given[k_int_flags[k].flag]);
                assert_string_equal(tr_engine_flags_first_given(&ef), k_int_flags[k].name);
            } else {
                assert_false(ok);
                snprintf(want, sizeof want,
                         "trellis test: %s: must be between %d and %d, got %lld\n",
                         k_int_flags[k].name, d->min, d->max, edge[e]);
                assert_string_equal(g_out, want);
                assert_int_equal(member(&ef.opts, k_int_flags[k].off), d->def);
            }
        }
    }
}

static void test_engine_flags_other_kinds(void **state) {
    (void)state;
    tr_engine_flags ef;
    cli_cmd c;
    bool help;
    engine_cmd(&ef, &c);
    assert_null(tr_engine_flags_first_given(&ef));
    assert_true(parse_cmd(&c, &help, "-t", "3", "-c", "100", "--load", "read", "--device",
                          "cpu", "--no-radix", "--no-overlap", NULL));
    assert_int_equal(ef.opts.threads, 3);
    assert_int_equal(ef.opts.ctx, 100);
    assert_int_equal(ef.opts.load, TRELLIS_LOAD_READ);
    assert_string_equal(ef.opts.device, "cpu");
    assert_true(ef.opts.no_radix && ef.opts.no_overlap);
    assert_string_equal(tr_engine_flags_first_given(&ef), "--device");
    engine_cmd(&ef, &c);
    assert_false(parse_cmd(&c, &help, "--load", "fast", NULL));
    assert_string_equal(g_out, "trellis test: --load: unknown value 'fast' (auto, mmap or "
                               "read)\n");
    engine_cmd(&ef, &c);
    assert_false(parse_cmd(&c, &help, "--kv-mb", "5", NULL)); /* the one spelling */
    assert_string_equal(g_out, "trellis test: unknown option '--kv-mb' (see trellis test "
                               "--help)\n");
}

/* --speculate settles --spec-ngram and --draft-model after the parse,
 * and a contradiction is an error naming both flags. */
static void test_engine_flags_speculate(void **state) {
    (void)state;
    tr_engine_flags ef;
    cli_cmd c;
    bool help;
    engine_cmd(&ef, &c);
    assert_true(parse_cmd(&c, &help, "--spec-ngram", "5", "--draft-model", "d.gguf", NULL));
    assert_int_equal(ef.opts.spec_ngram, 5); /* auto: as given, both */
    assert_string_equal(ef.opts.draft_model, "d.gguf");
    engine_cmd(&ef, &c);
    assert_true(parse_cmd(&c, &help, "--speculate", "ngram", NULL));
    assert_int_equal(ef.opts.spec_ngram, TR_SPECULATE_NGRAM_DEFAULT);
    engine_cmd(&ef, &c);
    assert_true(parse_cmd(&c, &help, "--spec-ngram", "3", "--speculate", "ngram", NULL));
    assert_int_equal(ef.opts.spec_ngram, 3);
    engine_cmd(&ef, &c);
    ef.opts.spec_ngram = 6; /* a command's own default: off turns it off */
    assert_true(parse_cmd(&c, &help, "--speculate", "off", NULL));
    assert_int_equal(ef.opts.spec_ngram, 0);
    assert_null(ef.opts.draft_model);
    engine_cmd(&ef, &c);
    ef.opts.spec_ngram = 6;
    assert_true(parse_cmd(&c, &help, "--draft-model", "d.gguf", "--speculate", "draft", NULL));
    assert_int_equal(ef.opts.spec_ngram, 0);
    assert_string_equal(ef.opts.draft_model, "d.gguf");
    static const struct {
        const char *a[6];
        const char *err;
    } bad[] = {
        {{"--speculate", "draft", NULL}, "trellis test: --speculate draft: needs --draft-model FILE\n"},
        {{"--speculate", "off", "--spec-ngram", "4", NULL},
         "trellis test: --speculate off contradicts --spec-ngram\n"},
        {{"--speculate", "off", "--draft-model", "d.gguf", NULL},
         "trellis test: --speculate off contradicts --draft-model\n"},
        {{"--spec-ngram", "0", "--speculate", "ngram", NULL},
         "trellis test: --speculate ngram contradicts --spec-ngram 0\n"},
        {{"--speculate", "ngram", "--draft-model", "d.gguf", NULL},
         "trellis test: --speculate ngram contradicts --draft-model (without --speculate both "
         "run, n-gram drafts first)\n"},
        {{"--speculate", "draft", "--draft-model", "d.gguf", "--spec-ngram", NULL},
         NULL}, /* --spec-ngram without its value: the parser's own error */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        engine_cmd(&ef, &c);
        assert_false(parse_cmd(&c, &help, bad[i].a[0], bad[i].a[1], bad[i].a[2], bad[i].a[3],
                               bad[i].a[4], bad[i].a[5], NULL));
        if (bad[i].err) assert_string_equal(g_out, bad[i].err);
    }
    engine_cmd(&ef, &c);
    assert_false(parse_cmd(&c, &help, "--speculate", "draft", "--draft-model", "d.gguf",
                           "--spec-ngram", "2", NULL));
    assert_string_equal(g_out, "trellis test: --speculate draft contradicts --spec-ngram "
                               "(without --speculate both run, n-gram drafts first)\n");
}

/* --help lists every engine flag with its bounds and the command's
 * default. */
static void test_engine_flags_help(void **state) {
    (void)state;
    tr_engine_flags ef;
    tr_engine_flags_init(&ef);
    ef.opts.threads = 2; /* a command's own default */
    ef.shown[TR_EF_MAX_RUNNING] = "max(64, concurrency)";
    bool flag = false;
    const cli_opt opts[] = {{"--own", NULL, CLI_FLAG, &flag, 1, 0, "its own flag", "off"}};
    cli_cmd c = {.name = "test", .usage = "[options]", .opts = opts, .n_opts = 1};
    tr_engine_flags_attach(&ef, &c);
    char *argv[] = {"--help"};
    bool help = false;
    capture_begin(1);
    assert_true(tr_cli_parse(&c, 1, argv, &help));
    capture_end();
    assert_true(help);
    const char *eng = strstr(g_out, "\nengine options");
    assert_non_null(eng);
    assert_true(strstr(g_out, "--own") < eng);
    for (int i = 0; i < TR_EF_COUNT; i++) assert_non_null(strstr(eng, c.engine[i].name));
    char want[96];
    snprintf(want, sizeof want, "0..%d, 0 = one per core (default: 2)", TRELLIS_MAX_THREADS);
    assert_non_null(strstr(eng, want));
    assert_non_null(strstr(eng, "-t, --threads N"));
    assert_non_null(strstr(eng, "-c, --ctx N"));
    assert_non_null(strstr(eng, "--kv-mem MiB"));
    assert_non_null(strstr(eng, "(default: max(64, concurrency))"));
    assert_non_null(strstr(eng, "--load auto|mmap|read"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_values),
        cmocka_unit_test(test_parse_errors_name_the_flag),
        cmocka_unit_test(test_parse_operands),
        cmocka_unit_test(test_parse_strs_limit),
        cmocka_unit_test(test_help_lists_defaults),
        cmocka_unit_test(test_engine_flags_are_the_engines),
        cmocka_unit_test(test_engine_flags_at_their_bounds),
        cmocka_unit_test(test_engine_flags_other_kinds),
        cmocka_unit_test(test_engine_flags_speculate),
        cmocka_unit_test(test_engine_flags_help),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
