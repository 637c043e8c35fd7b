/* test_engine_window.c — the engine with windowed units (engine_internal.h,
 * "Pages of a sequence"; window_pages.c) on the fake model, whose windowed
 * units hold their own copy of every token and check, on every row, that
 * each window reads the right tokens through the page table: a windowed
 * page let go too early, or reused while some window still reads it,
 * fails the fake's check (fake.bad).
 *
 * Checks: a sequence longer than full pages would fit runs in a pool
 * sized by tr_win_pages_for, with the tokens of a roomy single-unit run;
 * the pool bound of trellis_submit follows the windowed count; a prompt's
 * windowed pages stay cached after its request ends (a longer prompt then
 * reuses all of it) and are stripped under pressure rather than forcing
 * a preemption; every invariant holds between steps throughout.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/unit/harness.h"
#include <uv.h>

#include "runtime/engine/engine_compute_internal.h"
#include "trellis.h"
#include "tests/unit/engine_fake.h"
#include "tests/unit/test_env.h"

enum { PS = 8, WIN = 24, UNITS = 4, CHUNK = 32 };

static fake_cfg windowed(int32_t n_pages) {
    fake_cfg c = fake_default();
    c.page_size = PS;
    c.chunk = CHUNK;
    c.max_batch = 64;
    c.units = UNITS;
    c.unit_window = WIN;
    c.n_pages = n_pages;
    return c;
}

/* What window_pages.c's tr_win_pages_for counts for one sequence. */
static int32_t ids_for(int32_t tokens) {
    int32_t slots = (tokens + PS - 1) / PS, reach = (WIN + CHUNK) / PS + 2;
    return slots + (UNITS - 1) * (reach < slots ? reach : slots);
}

static void request(trellis_request *q, int32_t *prompt, int32_t n, int32_t max_tokens) {
    trellis_request_default(q);
    q->tokens = prompt;
    q->n_tokens = n;
    q->max_tokens = max_tokens;
    q->ignore_eos = true;
    q->temperature = 0.7f;
    q->seed = 77;
}

static void test_long_sequence_small_pool(void **state) {
    (void)state;
    int32_t prompt[400];
    rand_tokens(5, prompt, 400);
    trellis_request q;
    request(&q, prompt, 400, 120);
    fake_cfg roomy = fake_default();
    roomy.page_size = PS;
    fake *f;
    trellis_engine *e = fake_engine(&roomy, &f);
    result ref;
    run1(e, &q, &ref);
    trellis_engine_free(e);

    /* full pages would need 65 slots x 4 units = 260 pages */
    int32_t need = ids_for(520);
    assert_true(need < 65 * UNITS / 2);
    fake_cfg c = windowed(need);
    e = fake_engine(&c, &f);
    result got;
    submit_ok(e, &q, &got);
    drain_checked(e, &got, 1, 3);
    assert_int_equal(f->bad, 0);
    same_tokens(&ref, &got, 0);
    assert_int_equal(got.s[0].m.preemptions, 0);
    trellis_engine_info info;
    trellis_engine_get_info(e, &info);
    assert_int_equal(info.kv_units, UNITS);
    expect_clean(e);
    expect_all_free(e);
    trellis_engine_free(e);

    /* one page fewer: refused at submit, naming the count */
    c = windowed(need - 1);
    e = fake_engine(&c, &f);
    char err[512];
    uint64_t id;
    assert_int_equal(trellis_submit(e, &q, &id, err, sizeof err), TRELLIS_ERR_LIMIT);
    assert_non_null(strstr(err, "KV pages"));
    trellis_engine_free(e);
    result_free(&ref);
    result_free(&got);
}

static void test_cached_then_stripped(void **state) {
    (void)state;
    int32_t a[300], b[340];
    rand_tokens(11, a, 300);
    memcpy(b, a, sizeof a);
    rand_tokens(12, b + 300, 40);
    trellis_request qa, qb;
    request(&qa, a, 300, 8);
    request(&qb, b, 340, 8);

    /* room to spare: b reuses every full page of a's prompt, its windowed
     * pages included (they stayed cached after a ended) */
    fake_cfg c = windowed(1000);
    fake *f;
    trellis_engine *e = fake_engine(&c, &f);
    result ra, rb;
    run1(e, &qa, &ra);
    run1(e, &qb, &rb);
    /* 37 full slots of the 300 shared tokens; the window before slot 37
     * reaches back to slot 34, whose windowed pages a let go */
    assert_int_equal(rb.s[0].m.cached_tokens, 296);
    assert_int_equal(f->bad, 0);
    expect_clean(e);
    trellis_engine_free(e);
    result_free(&ra);
    result_free(&rb);

    /* a long sequence runs (its prompt's windowed pages cached behind its
     * window, its node locked) while a second one arrives that fits only
     * once those are stripped: nobody is preempted, both outputs are the
     * roomy run's */
    int32_t l[400], s[200];
    rand_tokens(21, l, 400);
    rand_tokens(22, s, 200);
    trellis_request ql, qs;
    request(&ql, l, 400, 60);
    request(&qs, s, 200, 60);
    fake_cfg roomy = fake_default();
    roomy.page_size = PS;
    e = fake_engine(&roomy, &f);
    result refl, refs;
    run1(e, &ql, &refl);
    run1(e, &qs, &refs);
    trellis_engine_free(e);

    int32_t pool = ids_for(460) + ids_for(260);
    assert_true(pool < (58 + 33) * UNITS); /* far below full pages */
    c = windowed(pool);
    e = fake_engine(&c, &f);
    result got[2];
    atomic_store(&f->hold, true);
    submit_ok(e, &ql, &got[0]);
    submit_ok(e, &qs, &got[1]);
    atomic_store(&f->hold, false);
    drain_checked(e, got, 2, 2);
    assert_int_equal(f->bad, 0);
    same_tokens(&refl, &got[0], 0);
    same_tokens(&refs, &got[1], 0);
    assert_int_equal(got[0].s[0].m.preemptions + got[1].s[0].m.preemptions, 0);
    trellis_stats st;
    trellis_get_stats(e, &st);
    printf("windowed pages: %llu released, %llu stripped\n",
           (unsigned long long)st.kv_window_released, (unsigned long long)st.kv_window_stripped);
    assert_true(st.kv_window_stripped > 0);
    assert_true(st.kv_window_released > 0);
    expect_clean(e);
    expect_all_free(e);
    trellis_engine_free(e);
    result_free(&refl);
    result_free(&refs);
    result_free(&got[0]);
    result_free(&got[1]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_sequence_small_pool),
        cmocka_unit_test(test_cached_then_stripped),
    };
    tr_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
