/* test_engine_spec.c — speculative decoding (trellis_engine_options.
 * spec_ngram, runtime/engine/speculate.c) on the fake model: no model file.
 *
 * The fake in copy mode makes the token after the latest earlier
 * occurrence of the current one the likeliest (not certain), so n-gram
 * drafts are often right and sometimes wrong, at temperature 0 and above.
 * Checks: every request gives exactly the tokens, text and finish it gives
 * without speculation (greedy and sampled, several seeds, n > 1, stop
 * strings and stop tokens inside drafts, max_tokens and the context
 * reached inside drafts, many at once under a small step budget, a pool
 * small enough to preempt, radix and overlap off); drafts are accepted
 * and save forward passes; constrained requests (drafts cut by the
 * grammar, masks down the drafts), log-probs and min_tokens give the same
 * tokens and log-probs too; pages all come back.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"

#include "tests/unit/engine_fake.h"
#include "tests/unit/spec_jobs.h"

/* Runs jobs [0, n) concurrently on an engine of config c; results out. */
static void run_jobs(const fake_cfg *c, job *jobs, int n, result *out, trellis_stats *st,
                     uint64_t *forwards) {
    fake *f;
    trellis_engine *e = fake_engine(c, &f);
    /* the first pass waits for every submission: passes are then counted
     * on the same steps in every run (test_same_output compares them) */
    atomic_store_explicit(&f->hold, true, memory_order_release);
    for (int k = 0; k < n; k++) submit_ok(e, &jobs[k].q, &out[k]);
    atomic_store_explicit(&f->hold, false, memory_order_release);
    drain(e, out, n);
    if (st) stats_now(e, st);
    if (forwards) *forwards = f->forwards;
    assert_int_equal(f->bad, 0);
    expect_all_free(e);
    trellis_engine_free(e);
}

enum { NJOBS = 24 };

/* The same output with and without speculation, in several engine
 * shapes; drafts are accepted and save passes. */
static void test_same_output(void **state) {
    (void)state;
    static job jobs[NJOBS];
    for (int k = 0; k < NJOBS; k++) make_job(&jobs[k], k);
    static result ref[NJOBS], got[NJOBS];
    fake_cfg base = fake_default();
    base.copy = true;
    trellis_stats st0;
    uint64_t fw0;
    run_jobs(&base, jobs, NJOBS, ref, &st0, &fw0);
    assert_int_equal(st0.spec_drafted_tokens, 0);
    const struct {
        int32_t spec, max_batch, n_pages, chunk;
        bool no_radix, no_overlap;
    } cfgs[] = {{8, 256, 4096, 64, false, false}, {32, 256, 4096, 64, false, true},
                {3, 40, 4096, 16, true, false},  {8, 512, 60, 64, false, false},
                {1, 256, 4096, 64, false, false}};
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        fake_cfg fc = base;
        fc.spec_ngram = cfgs[c].spec;
        fc.max_batch = cfgs[c].max_batch;
        fc.n_pages = cfgs[c].n_pages;
        fc.chunk = cfgs[c].chunk;
        fc.no_radix = cfgs[c].no_radix;
        fc.no_overlap = cfgs[c].no_overlap;
        trellis_stats st;
        uint64_t fw;
        run_jobs(&fc, jobs, NJOBS, got, &st, &fw);
        for (int k = 0; k < NJOBS; k++) {
            same_result(&ref[k], &got[k], false);
            result_free(&got[k]);
        }
        assert_true(st.spec_drafted_tokens > 0);
        assert_true(st.spec_accepted_tokens > 0);
        assert_true(st.spec_accepted_tokens <= st.spec_drafted_tokens);
        assert_int_equal(st.generated_tokens, st0.generated_tokens);
        if (c == 0) assert_true(fw < fw0); /* fewer passes for the same tokens */
    }
    for (int k = 0; k < NJOBS; k++) result_free(&ref[k]);
}

/* One greedy request alone: the steps it saves are its accepted drafts. */
static void test_alone_greedy(void **state) {
    (void)state;
    job j;
    make_job(&j, 0);
    j.q.n = 1;
    j.q.max_tokens = 80;
    result a, b;
    fake_cfg c = fake_default();
    c.copy = true;
    uint64_t fa, fb;
    trellis_stats sb;
    run_jobs(&c, &j, 1, &a, NULL, &fa);
    c.spec_ngram = 8;
    run_jobs(&c, &j, 1, &b, &sb, &fb);
    same_result(&a, &b, false);
    assert_int_equal(fa - fb, (uint64_t)sb.spec_accepted_tokens);
    assert_true(sb.spec_accepted_tokens >= 20); /* the copy model is mostly right */
    assert_int_equal(b.s[0].m.spec_accepted_tokens, (int32_t)sb.spec_accepted_tokens);
    assert_int_equal(a.s[0].m.spec_accepted_tokens, 0);
    result_free(&a);
    result_free(&b);
}

/* Constraints (regexes, a choice), log-probs and min_tokens speculate
 * too, with the same output, masks and log-probs, jump-forward on (as
 * without speculation) and off (forced bytes are then drafts). */
static void test_constrained_logprobs(void **state) {
    (void)state;
    enum { NJ = 8 };
    static job j[NJ];
    static const char *const choices[] = {"apple pie", "apple tart", "banana split"};
    for (int k = 0; k < NJ; k++) {
        make_job(&j[k], k);
        j[k].q.n = 1 + k % 2;
        j[k].q.stop = NULL;
        j[k].q.n_stop = 0;
    }
    j[0].q.logprobs = true;
    j[0].q.top_logprobs = 3;
    j[1].q.min_tokens = 12;
    j[2].q.regex = "([a-z]+ ){2,30}";
    j[3].q.regex = "[a-z ]{1,40}";
    j[3].q.logprobs = true;
    j[4].q.regex = "(ab|cd|ef)+x";
    j[5].q.min_tokens = 30;
    j[5].q.logprobs = true;
    j[6].q.regex = "([0-9]{1,3}, ){1,20}";
    j[7].q.regex = "apple pie|apple tart|banana split";
    (void)choices;
    result a[NJ], b[NJ];
    trellis_stats st;
    /* with jump-forward (as without speculation), and without (forced
     * bytes are then drafts, verified) */
    for (int nojf = 0; nojf < 2; nojf++) {
    fake_cfg c = fake_default();
    c.copy = true;
    for (int k = 0; k < NJ; k++) j[k].q.no_jump_forward = nojf;
    run_jobs(&c, j, NJ, a, NULL, NULL);
    c.spec_ngram = 8;
    run_jobs(&c, j, NJ, b, &st, NULL);
    if (nojf) assert_int_equal(st.jump_forwards, 0);
    for (int k = 0; k < NJ; k++) {
        same_result(&a[k], &b[k], false);
        for (int i = 0; i < a[k].n; i++) {
            if (!j[k].q.logprobs) continue;
            assert_non_null(b[k].s[i].lp);
            assert_memory_equal(a[k].s[i].lp, b[k].s[i].lp,
                                (size_t)a[k].s[i].n_tokens * sizeof(trellis_logprob));
        }
        result_free(&a[k]);
        result_free(&b[k]);
    }
    assert_true(st.spec_drafted_tokens > 0);
    }
}

static void test_custom_constraint(void **state) {
    (void)state;
    enum { NJ = 6 };
    static job j[NJ];
    result a[NJ], b[NJ];
    trellis_stats st;
    for (int pass = 0; pass < 2; pass++) {
        fake_cfg c = fake_default();
        c.copy = true;
        c.spec_ngram = pass ? 8 : 0;
        for (int k = 0; k < NJ; k++) {
            make_job(&j[k], k);
            j[k].q.stop = NULL;
            j[k].q.n_stop = 0;
            j[k].q.max_tokens = 70;
            ban7 *cs = malloc(sizeof *cs);
            assert_non_null(cs);
            *cs = (ban7){0, 20 + 9 * k, 49152};
            j[k].q.constraint = &k_ban7;
            j[k].q.n = 1 + k % 2; /* clone copies a state that accepted nothing */
            j[k].q.constraint_state = cs;
            j[k].q.logprobs = k % 2;
        }
        run_jobs(&c, j, NJ, pass ? b : a, pass ? &st : NULL, NULL);
    }
    for (int k = 0; k < NJ; k++) {
        same_result(&a[k], &b[k], false);
        for (int i = 0; i < a[k].n; i++) {
            assert_int_equal(b[k].s[i].finish, TRELLIS_FINISH_STOP); /* the constraint ended */
            for (int32_t t = 0; t < b[k].s[i].n_tokens; t++)
                assert_true(b[k].s[i].tokens[t] % 7 != 0);
            if (j[k].q.logprobs)
                assert_memory_equal(a[k].s[i].lp, b[k].s[i].lp,
                                    (size_t)a[k].s[i].n_tokens * sizeof(trellis_logprob));
        }
        result_free(&a[k]);
        result_free(&b[k]);
    }
    assert_true(st.spec_accepted_tokens > 0);
}

/* The request's own spec_ngram wins over the engine's: on on an engine
 * without it, off on an engine with it; out of range refused. */
static void test_per_request(void **state) {
    (void)state;
    job j;
    make_job(&j, 0);
    j.q.n = 1;
    j.q.max_tokens = 60;
    result a, b, c;
    trellis_stats sa, sb, sc;
    fake_cfg cfg = fake_default();
    cfg.copy = true;
    run_jobs(&cfg, &j, 1, &a, &sa, NULL); /* engine off, request default */
    j.q.spec_ngram = 6;
    run_jobs(&cfg, &j, 1, &b, &sb, NULL); /* engine off, request on */
    cfg.spec_ngram = 8;
    j.q.spec_ngram = 0;
    run_jobs(&cfg, &j, 1, &c, &sc, NULL); /* engine on, request off */
    same_result(&a, &b, false);
    same_result(&a, &c, false);
    assert_int_equal(sa.spec_drafted_tokens, 0);
    assert_true(sb.spec_accepted_tokens > 0);
    assert_int_equal(sc.spec_drafted_tokens, 0);
    result_free(&a);
    result_free(&b);
    result_free(&c);
    trellis_engine *e = fake_engine(&cfg, NULL);
    char err[256];
    for (int bad = 0; bad < 2; bad++) {
        j.q.spec_ngram = bad ? 33 : -2;
        assert_int_equal(trellis_submit(e, &j.q, NULL, err, sizeof err), TR_ERR_INVALID_ARG);
        assert_non_null(strstr(err, "spec_ngram"));
    }
    trellis_engine_free(e);
}

/* The option's bounds. */
static void test_option_bounds(void **state) {
    (void)state;
    const trellis_engine_option_desc *d = trellis_engine_option_find("spec_ngram");
    assert_non_null(d);
    assert_int_equal(d->def, 0);
    assert_int_equal(d->min, 0);
    assert_int_equal(d->max, 32);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_output),
        cmocka_unit_test(test_alone_greedy),
        cmocka_unit_test(test_constrained_logprobs),
        cmocka_unit_test(test_custom_constraint),
        cmocka_unit_test(test_per_request),
        cmocka_unit_test(test_option_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
