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
 * and save forward passes; requests that may not speculate (constraint,
 * log-probs, min_tokens) draft nothing; pages all come back.
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

/* A prompt that repeats a 24-token phrase three times (copying pays). */
static void phrase_prompt(uint64_t seed, int32_t *out, int n) {
    int32_t phrase[24];
    rand_tokens(seed, phrase, 24);
    for (int i = 0; i < n; i++) out[i] = phrase[i % 24];
}

typedef struct job {
    trellis_request q;
    int32_t prompt[96];
    const char *stop[1];
} job;

static void make_job(job *j, int k) {
    trellis_request_default(&j->q);
    phrase_prompt((uint64_t)(k % 5) + 1, j->prompt, 72 + k % 20);
    j->q.tokens = j->prompt;
    j->q.n_tokens = 72 + k % 20;
    j->q.max_tokens = 20 + (k * 7) % 60;
    j->q.temperature = (k % 3 == 0) ? 0.0f : (k % 3 == 1 ? 0.7f : 1.3f);
    j->q.seed = (uint64_t)k * 31u;
    j->q.n = 1 + k % 3;
    if (k % 4 == 3) { /* a stop string: some token's text in the phrase */
        j->stop[0] = "a";
        j->q.stop = j->stop;
        j->q.n_stop = 1;
    }
}

/* Runs jobs [0, n) concurrently on an engine of config c; results out. */
static void run_jobs(const fake_cfg *c, job *jobs, int n, result *out, trellis_stats *st,
                     uint64_t *forwards) {
    fake *f;
    trellis_engine *e = fake_engine(c, &f);
    for (int k = 0; k < n; k++) submit_ok(e, &jobs[k].q, &out[k]);
    drain(e, out, n);
    if (st) stats_now(e, st);
    if (forwards) *forwards = f->forwards;
    assert_int_equal(f->bad, 0);
    expect_all_free(e);
    trellis_engine_free(e);
}

static void same_result(const result *a, const result *b) {
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        same_tokens(a, b, i);
        assert_int_equal(a->s[i].text_len, b->s[i].text_len);
        assert_memory_equal(a->s[i].text, b->s[i].text, a->s[i].text_len);
        assert_int_equal(a->s[i].stop_index, b->s[i].stop_index);
        assert_int_equal(a->s[i].stop_token, b->s[i].stop_token);
    }
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
            same_result(&ref[k], &got[k]);
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
    same_result(&a, &b);
    assert_int_equal(fa - fb, (uint64_t)sb.spec_accepted_tokens);
    assert_true(sb.spec_accepted_tokens >= 20); /* the copy model is mostly right */
    assert_int_equal(b.s[0].m.spec_accepted_tokens, (int32_t)sb.spec_accepted_tokens);
    assert_int_equal(a.s[0].m.spec_accepted_tokens, 0);
    result_free(&a);
    result_free(&b);
}

/* Requests that may not speculate draft nothing, and are unchanged. */
static void test_not_eligible(void **state) {
    (void)state;
    job j[3];
    for (int k = 0; k < 3; k++) {
        make_job(&j[k], 3 * k);
        j[k].q.n = 1;
    }
    j[0].q.logprobs = true;
    j[1].q.min_tokens = 5;
    j[2].q.regex = "[a-z ]{1,40}";
    result a[3], b[3];
    fake_cfg c = fake_default();
    c.copy = true;
    run_jobs(&c, j, 3, a, NULL, NULL);
    c.spec_ngram = 8;
    trellis_stats st;
    run_jobs(&c, j, 3, b, &st, NULL);
    for (int k = 0; k < 3; k++) {
        same_result(&a[k], &b[k]);
        result_free(&a[k]);
        result_free(&b[k]);
    }
    assert_int_equal(st.spec_drafted_tokens, 0);
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
        cmocka_unit_test(test_not_eligible),
        cmocka_unit_test(test_option_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
