/* harness.h — the unit-test harness: cmocka where it is installed, else
 * (TRELLIS_CORE_ONLY builds: a GPU test machine has a C compiler, CMake and
 * CUDA, nothing else of ours) a small stand-in with the same names for the
 * part of cmocka the model-core tests use.
 *
 * The stand-in runs each test in order; an assertion prints file:line and
 * what failed, and ends that test (longjmp) as cmocka does; skip() ends it
 * as skipped. cmocka_run_group_tests returns the number of failed tests.
 * Only the model-core tests (kernels, gguf, quant, model, backend ops) may
 * use it: they include this header instead of <cmocka.h>, and must stick to
 * the macros defined below. Tests that need cmocka itself include this
 * header too, for the helpers here (skips, kernel sets, test filters).
 *
 * Exit codes, both harnesses: tests/CMakeLists.txt tells ctest that 77
 * means SKIPPED. A test binary that cannot run at all here (a CPU feature
 * it exists for is missing) calls tr_test_skip_all(why) from main.
 */
#ifndef TR_TESTS_UNIT_HARNESS_H
#define TR_TESTS_UNIT_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TR_TEST_EXIT_SKIP 77

static inline void tr_test_skip_all(const char *why) {
    printf("SKIPPED: %s\n", why);
    exit(TR_TEST_EXIT_SKIP);
}

/* Kernel-set variants. ctest runs each test binary whose subject depends
 * on the CPU's kernel sets once per set, with TRELLIS_TEST_KERNELS=<set>
 * (tests/CMakeLists.txt); the binary then tests that set (against the
 * portable reference) and exits SKIPPED when this CPU lacks it, so a
 * missing AVX-512 shows as a skipped test, never as a pass. Without the
 * variable (a developer's run) it tests every set the CPU has. */
static inline const char *tr_test_kernels(void) {
    const char *s = getenv("TRELLIS_TEST_KERNELS");
    return s && *s ? s : NULL;
}
static inline int tr_test_kernels_wanted(const char *set) {
    const char *s = tr_test_kernels();
    return !s || strcmp(s, set) == 0;
}
/* From main: SKIPPED unless the requested set (if any) runs here. */
static inline void tr_test_kernels_require(int (*runs_here)(const char *set)) {
    const char *s = tr_test_kernels();
    if (s && !runs_here(s)) {
        char why[160];
        snprintf(why, sizeof why, "kernel set '%s' does not run on this machine", s);
        tr_test_skip_all(why);
    }
}

#ifdef TRELLIS_HAVE_CMOCKA
#include <cmocka.h>
/* n tests built at run time (.name, .test_func, .initial_state set). */
#define tr_test_run_tests(group, tests, n) \
    _cmocka_run_group_tests((group), (tests), (n), NULL, NULL)

/* Subsets of a test binary, from main before cmocka_run_group_tests:
 * TRELLIS_TEST_FILTER=<glob> runs only the tests whose names match,
 * TRELLIS_TEST_SKIP=<glob> leaves out those that match (cmocka's globs,
 * e.g. test_cancel_* or *_real); neither set: every test. scripts/test.sh
 * runs the threaded tests alone under TSan this way. cmocka only: the
 * stand-in below always runs every test. */
static inline void tr_test_filter_from_env(void) {
    const char *filter = getenv("TRELLIS_TEST_FILTER");
    if (filter) cmocka_set_test_filter(filter);
    const char *skip = getenv("TRELLIS_TEST_SKIP");
    if (skip) cmocka_set_skip_filter(skip);
}
#else

typedef void (*tr_test_fn)(void **state);
struct CMUnitTest {
    const char *name;
    tr_test_fn test_func;
    void *initial_state; /* NULL: the group setup's state */
};
#define cmocka_unit_test(f) {#f, f, NULL}

/* One test runs at a time (the harness is single-threaded, like the tests
 * that use it), so the jump target is file-static. */
static jmp_buf tr_test_jump;
static int tr_test_outcome; /* 0 pass, 1 fail, 2 skip */

static inline void tr_test_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    tr_test_outcome = 1;
    longjmp(tr_test_jump, 1);
}

#define print_message(...) printf(__VA_ARGS__)
#define print_error(...) fprintf(stderr, __VA_ARGS__)
#define fail_msg(...) tr_test_fail(__FILE__, __LINE__, __VA_ARGS__)
#define fail() tr_test_fail(__FILE__, __LINE__, "failed")
#define skip()                             \
    do {                                   \
        tr_test_outcome = 2;               \
        longjmp(tr_test_jump, 1);          \
    } while (0)
#define assert_true(c) \
    do { if (!(c)) tr_test_fail(__FILE__, __LINE__, "%s is false", #c); } while (0)
#define assert_false(c) \
    do { if (c) tr_test_fail(__FILE__, __LINE__, "%s is true", #c); } while (0)
#define assert_non_null(p) \
    do { if (!(p)) tr_test_fail(__FILE__, __LINE__, "%s is NULL", #p); } while (0)
#define assert_null(p) \
    do { if (p) tr_test_fail(__FILE__, __LINE__, "%s is not NULL", #p); } while (0)
#define assert_int_equal(a, b)                                                      \
    do {                                                                            \
        long long tr_a_ = (long long)(a), tr_b_ = (long long)(b);                   \
        if (tr_a_ != tr_b_)                                                         \
            tr_test_fail(__FILE__, __LINE__, "%lld != %lld (%s, %s)", tr_a_, tr_b_, \
                         #a, #b);                                                   \
    } while (0)
#define assert_int_not_equal(a, b)                                                  \
    do {                                                                            \
        long long tr_a_ = (long long)(a), tr_b_ = (long long)(b);                   \
        if (tr_a_ == tr_b_)                                                         \
            tr_test_fail(__FILE__, __LINE__, "%lld == %lld (%s, %s)", tr_a_, tr_b_, \
                         #a, #b);                                                   \
    } while (0)
#define assert_ptr_equal(a, b) \
    do { if ((const void *)(a) != (const void *)(b)) tr_test_fail(__FILE__, __LINE__, "%s != %s", #a, #b); } while (0)
#define assert_ptr_not_equal(a, b) \
    do { if ((const void *)(a) == (const void *)(b)) tr_test_fail(__FILE__, __LINE__, "%s == %s", #a, #b); } while (0)
#define assert_string_equal(a, b)                                                    \
    do {                                                                             \
        const char *tr_a_ = (a), *tr_b_ = (b);                                       \
        if (!tr_a_ || !tr_b_ || strcmp(tr_a_, tr_b_) != 0)                           \
            tr_test_fail(__FILE__, __LINE__, "\"%s\" != \"%s\"", tr_a_ ? tr_a_ : "(null)", \
                         tr_b_ ? tr_b_ : "(null)");                                  \
    } while (0)
#define assert_memory_equal(a, b, n) \
    do { if (memcmp((a), (b), (n)) != 0) tr_test_fail(__FILE__, __LINE__, "%s and %s differ", #a, #b); } while (0)
#define assert_memory_not_equal(a, b, n) \
    do { if (memcmp((a), (b), (n)) == 0) tr_test_fail(__FILE__, __LINE__, "%s and %s are equal", #a, #b); } while (0)
#define assert_float_equal(a, b, eps)                                                \
    do {                                                                             \
        double tr_a_ = (a), tr_b_ = (b), tr_d_ = tr_a_ - tr_b_;                      \
        if (tr_d_ > (eps) || -tr_d_ > (eps))                                         \
            tr_test_fail(__FILE__, __LINE__, "%g != %g (eps %g)", tr_a_, tr_b_, (double)(eps)); \
    } while (0)

typedef int (*tr_test_group_fn)(void **state);

/* As cmocka: the group setup's state is every test's initial state. */
static inline int tr_test_run_group(const char *group, const struct CMUnitTest *t, size_t n,
                                    tr_test_group_fn setup, tr_test_group_fn teardown) {
    volatile int failed = 0, skipped = 0; /* live across longjmp */
    void *group_state = NULL;
    printf("[==========] %s: running %zu test(s).\n", group, n);
    if (setup && setup(&group_state) != 0) {
        printf("[  ERROR   ] %s: group setup failed\n", group);
        return (int)n;
    }
    for (size_t i = 0; i < n; i++) {
        void *state = t[i].initial_state ? t[i].initial_state : group_state;
        tr_test_outcome = 0;
        printf("[ RUN      ] %s\n", t[i].name);
        fflush(stdout);
        if (setjmp(tr_test_jump) == 0) t[i].test_func(&state);
        static const char *const word[] = {"[       OK ]", "[  FAILED  ]", "[  SKIPPED ]"};
        printf("%s %s\n", word[tr_test_outcome], t[i].name);
        failed += tr_test_outcome == 1;
        skipped += tr_test_outcome == 2;
    }
    printf("[==========] %s: %zu test(s) run, %d failed, %d skipped.\n", group, n, failed,
           skipped);
    int result = failed;
    if (teardown && teardown(&group_state) != 0) result++;
    return result;
}
#define cmocka_run_group_tests(tests, setup, teardown) \
    tr_test_run_group(__FILE__, (tests), sizeof(tests) / sizeof((tests)[0]), (setup), (teardown))
#define tr_test_run_tests(group, tests, n) tr_test_run_group((group), (tests), (n), NULL, NULL)

#endif /* TRELLIS_HAVE_CMOCKA */

#endif
