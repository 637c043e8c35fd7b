/* test_engine_draft.c — speculative decoding with a draft model
 * (trellis_engine_options.draft_model, runtime/engine/draft.c) on fake
 * models: no model file.
 *
 * The target is the copy-mode fake (the token after the latest earlier
 * occurrence of the current one is likeliest); the draft is a second fake
 * that either agrees always (the target's twin) or only where both copy
 * (another salt), so drafts are kept and rejected at every temperature.
 * Both fakes check every page they are given: the draft's page tables
 * (private pages, catch-up after rejections and preemption) are checked
 * like the target's. Checks: every request gives exactly the tokens, text
 * and finish it gives without a draft model (greedy and sampled, n > 1,
 * stop strings, constraints with and without jump-forward, log-probs), in
 * several engine shapes (overlap off, radix off, a small step budget, a
 * target pool small enough to preempt, a draft pool too small for
 * everyone); drafts are kept and save target passes; the draft pool's
 * accounting holds at every step and all its pages come back; a draft
 * that fails costs speed, never output; per-request spec_draft; refusals
 * (vocabulary size, bounds).
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
#include "tests/unit/test_env.h"

/* The spec tests' jobs, some constrained or asking for log-probs. */
static void make_draft_job(job *j, int k) {
    make_job(j, k);
    if (k % 6 == 5) j->q.regex = "([a-z]+ ){2,30}";
    if (k % 6 == 4) {
        j->q.logprobs = true;
        j->q.top_logprobs = 2;
    }
}

typedef struct run_out {
    trellis_stats st;
    uint64_t forwards, draft_forwards;
} run_out;

/* Runs jobs [0, n) concurrently on an engine of config c, checking the
 * engine's invariants (the draft pool's included) every few events. */
static void run_jobs(const fake_cfg *c, job *jobs, int n, result *out, run_out *ro) {
    fake *f, *df;
    trellis_engine *e = fake_engine_draft(c, &f, &df);
    atomic_store_explicit(&f->hold, true, memory_order_release);
    for (int k = 0; k < n; k++) submit_ok(e, &jobs[k].q, &out[k]);
    atomic_store_explicit(&f->hold, false, memory_order_release);
    drain_checked(e, out, n, 7);
    stats_now(e, &ro->st);
    ro->forwards = f->forwards;
    ro->draft_forwards = df ? df->forwards : 0;
    assert_int_equal(f->bad, 0);
    if (df) assert_int_equal(df->bad, 0);
    expect_all_free(e); /* the debug check: every draft page is free too */
    trellis_engine_free(e);
}

enum { NJOBS = 24 };

/* The same output with and without the draft model in several engine
 * shapes; drafts are kept (what that saves is test_twin_alone's: here
 * the step count is the longest request's). */
static void test_same_output(void **state) {
    (void)state;
    static job jobs[NJOBS];
    for (int k = 0; k < NJOBS; k++) make_draft_job(&jobs[k], k);
    static result ref[NJOBS], got[NJOBS];
    fake_cfg base = fake_default();
    base.copy = true;
    run_out r0;
    run_jobs(&base, jobs, NJOBS, ref, &r0);
    assert_int_equal(r0.st.draft_passes, 0);
    const struct {
        int32_t draft, spec, max_batch, n_pages, chunk, draft_pages;
        bool no_radix, no_overlap, ngram;
    } cfgs[] = {
        {2, 4, 256, 4096, 64, 0, false, false, false},
        {1, 8, 256, 4096, 64, 0, false, true, false},
        {2, 16, 40, 4096, 16, 0, true, false, false}, /* catch-up over many passes */
        {2, 4, 512, 24, 64, 0, false, false, false},  /* preemption */
        {2, 6, 256, 4096, 64, 12, false, false, false}, /* draft pool for few */
        {2, 4, 256, 4096, 64, 0, false, false, true},  /* n-gram drafts first */
    };
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        fake_cfg fc = base;
        fc.draft = cfgs[c].draft;
        fc.spec_draft = cfgs[c].spec;
        fc.max_batch = cfgs[c].max_batch;
        fc.n_pages = cfgs[c].n_pages;
        fc.chunk = cfgs[c].chunk;
        fc.draft_pages = cfgs[c].draft_pages;
        fc.no_radix = cfgs[c].no_radix;
        fc.no_overlap = cfgs[c].no_overlap;
        fc.spec_ngram = cfgs[c].ngram ? 8 : 0;
        run_out r;
        run_jobs(&fc, jobs, NJOBS, got, &r);
        for (int k = 0; k < NJOBS; k++) {
            same_result(&ref[k], &got[k], jobs[k].q.logprobs);
            result_free(&got[k]);
        }
        assert_true(r.st.draft_passes > 0);
        assert_int_equal(r.st.draft_passes, r.draft_forwards);
        assert_true(r.st.draft_proposed_tokens > 0);
        assert_true(r.st.spec_accepted_tokens > 0);
        assert_true(r.st.spec_accepted_tokens <= r.st.spec_drafted_tokens);
        assert_int_equal(r.st.generated_tokens, r0.st.generated_tokens);
        if (c == 3) assert_true(r.st.preemptions > 0);
    }
    for (int k = 0; k < NJOBS; k++) result_free(&ref[k]);
}

/* One greedy request with the target's twin as draft: every draft is
 * kept, so the target's passes fall by the drafts kept. */
static void test_twin_alone(void **state) {
    (void)state;
    job j;
    make_job(&j, 0);
    j.q.n = 1;
    j.q.max_tokens = 80;
    result a, b;
    fake_cfg c = fake_default();
    c.copy = true;
    run_out ra, rb;
    run_jobs(&c, &j, 1, &a, &ra);
    c.draft = 1;
    c.spec_draft = 4;
    run_jobs(&c, &j, 1, &b, &rb);
    same_result(&a, &b, false);
    assert_int_equal(rb.st.spec_accepted_tokens, rb.st.spec_drafted_tokens);
    assert_int_equal(ra.forwards - rb.forwards, rb.st.spec_accepted_tokens);
    /* 79 tokens after the first in steps of 1 + 4 */
    assert_true(rb.st.spec_accepted_tokens >= 60);
    assert_int_equal(b.s[0].m.spec_accepted_tokens, (int32_t)rb.st.spec_accepted_tokens);
    result_free(&a);
    result_free(&b);
    /* under a constraint that cuts drafts (no multiples of 7): the twin's
     * drafts it allows are the target's masked choices, so all are kept,
     * unless the draft's K/V still held a cut draft where the sequence
     * went on */
    for (int pass = 0; pass < 2; pass++) {
        ban7 *cs = malloc(sizeof *cs);
        assert_non_null(cs);
        *cs = (ban7){0, 70, 49152};
        j.q.constraint = &k_ban7;
        j.q.constraint_state = cs;
        c.draft = pass;
        run_jobs(&c, &j, 1, pass ? &b : &a, pass ? &rb : &ra);
    }
    same_result(&a, &b, false);
    assert_true(rb.st.draft_proposed_tokens > 0);
    assert_true(rb.st.draft_fed_tokens > rb.st.draft_passes); /* catch-ups after cuts */
    /* the draft that completes the constraint ends the sample: taken, not
     * counted as kept */
    assert_true(rb.st.spec_accepted_tokens + 1 >= rb.st.spec_drafted_tokens);
    result_free(&a);
    result_free(&b);
}

/* A draft model whose passes fail: no drafts, the same output. */
static void test_failing_draft(void **state) {
    (void)state;
    enum { NJ = 6 };
    static job j[NJ];
    for (int k = 0; k < NJ; k++) make_draft_job(&j[k], k);
    static result a[NJ], b[NJ];
    fake_cfg c = fake_default();
    c.copy = true;
    run_out ra, rb;
    run_jobs(&c, j, NJ, a, &ra);
    c.draft = 2;
    c.draft_fail = true;
    run_jobs(&c, j, NJ, b, &rb);
    for (int k = 0; k < NJ; k++) {
        same_result(&a[k], &b[k], j[k].q.logprobs);
        result_free(&a[k]);
        result_free(&b[k]);
    }
    assert_true(rb.st.draft_passes > 0);
    assert_int_equal(rb.st.spec_drafted_tokens, 0);
}

/* The request's spec_draft: 0 turns the draft off, a smaller bound is
 * kept, out of range is refused; an engine without a draft model takes
 * the field and ignores it. */
static void test_per_request(void **state) {
    (void)state;
    job j;
    make_job(&j, 0);
    j.q.n = 1;
    j.q.max_tokens = 60;
    result a, b, c;
    run_out ra, rb, rc;
    fake_cfg cfg = fake_default();
    cfg.copy = true;
    j.q.spec_draft = 5;
    run_jobs(&cfg, &j, 1, &a, &ra); /* no draft model: ignored */
    cfg.draft = 1;
    cfg.spec_draft = 8;
    j.q.spec_draft = 0;
    run_jobs(&cfg, &j, 1, &b, &rb); /* request off */
    j.q.spec_draft = 2;
    run_jobs(&cfg, &j, 1, &c, &rc); /* at most 2 a step */
    same_result(&a, &b, false);
    same_result(&a, &c, false);
    assert_int_equal(ra.st.draft_passes, 0);
    assert_int_equal(rb.st.draft_passes, 0);
    assert_int_equal(rb.st.spec_drafted_tokens, 0);
    assert_true(rc.st.spec_accepted_tokens > 0);
    /* 2 drafts a step: at most 2 kept per pass that verified */
    assert_true(rc.st.spec_accepted_tokens <= 2 * (ra.forwards - rc.forwards + 1));
    assert_true(rc.st.spec_drafted_tokens <= 2 * rc.forwards);
    result_free(&a);
    result_free(&b);
    result_free(&c);
    trellis_engine *e = fake_engine_draft(&cfg, NULL, NULL);
    char err[256];
    for (int bad = 0; bad < 2; bad++) {
        j.q.spec_draft = bad ? 17 : -2;
        assert_int_equal(trellis_submit(e, &j.q, NULL, err, sizeof err), TR_ERR_INVALID_ARG);
        assert_non_null(strstr(err, "spec_draft"));
    }
    trellis_engine_info info;
    trellis_engine_get_info(e, &info);
    assert_string_equal(info.draft_arch, "fake-draft");
    trellis_engine_free(e);
}

/* A draft whose vocabulary size differs is refused with both sizes named;
 * everything handed over is freed (ASan). The option's bounds. */
static void test_refusals(void **state) {
    (void)state;
    gguf_file *file = tv_open();
    tokenizer *tok = tv_tokenizer();
    assert_non_null(file);
    assert_non_null(tok);
    fake *f, *df;
    int32_t nv = tr_tokenizer_n_vocab(tok);
    engine_compute comp = fake_compute(64, 16, 256, nv, &f);
    engine_compute dcomp = fake_compute(64, 16, 256, nv - 1, &df);
    trellis_engine_options o;
    trellis_engine_options_default(&o);
    trellis_engine *e = NULL;
    char err[256] = "";
    tr_status s = tr_engine_new_custom_draft(&o, file, tok, &comp, &dcomp, NULL, &e, err,
                                             sizeof err);
    assert_int_equal(s, TR_ERR_INVALID_ARG);
    assert_null(e);
    assert_non_null(strstr(err, "draft"));
    const trellis_engine_option_desc *d = trellis_engine_option_find("spec_draft");
    assert_non_null(d);
    assert_int_equal(d->def, 4);
    assert_int_equal(d->min, 1);
    assert_int_equal(d->max, 16);
}

/* ---- sampled drafts (options.draft_sampling) ----
 *
 * The output must follow the target's distribution. Four tokens per
 * sample: the first is sampled before any draft, the next ones go through
 * the accept/reject rule when drafted. Samples of plain decoding and of
 * speculative decoding (other seeds: independent draws; sampled drafts,
 * and greedy ones once) are counted per cell
 * (t1,t2), (t2,t3), (t3,t4); a two-sample chi-square per histogram
 * compares them. 100,000 samples a side (10,000 under
 * TRELLIS_TEST_SCALE=small, the sanitizer stages: the same paths, a
 * weaker test). */

enum { CELLS = 1 << 16, PER_REQ = 50 };

static long spec_samples(void) { return small_scale() ? 10000 : 100000; }

typedef struct pair_hist {
    uint64_t key[CELLS]; /* 0: empty */
    long n[CELLS][2];    /* plain, sampled drafts */
    int32_t used;
} pair_hist;

static void hist_add(pair_hist *h, int32_t a, int32_t b, int col) {
    uint64_t k = ((uint64_t)(uint32_t)(a + 1) << 32) | (uint32_t)(b + 1);
    uint32_t i = (uint32_t)mix(k) & (CELLS - 1);
    while (h->key[i] && h->key[i] != k) i = (i + 1) & (CELLS - 1);
    if (!h->key[i]) assert_true(++h->used < CELLS / 2); /* a setting too flat to test */
    h->key[i] = k;
    h->n[i][col]++;
}

/* Two-sample chi-square of equal totals: sum (a - b)^2 / (a + b) over
 * cells with a + b >= 10, the rest pooled into one cell. */
static void expect_same_hist(const pair_hist *h, const char *what) {
    double chi = 0;
    long pa = 0, pb = 0;
    int cells = 0;
    for (int i = 0; i < CELLS; i++) {
        long a = h->n[i][0], b = h->n[i][1];
        if (!h->key[i]) continue;
        if (a + b < 10) {
            pa += a, pb += b;
            continue;
        }
        chi += (double)(a - b) * (double)(a - b) / (double)(a + b);
        cells++;
    }
    if (pa + pb > 0) {
        chi += (double)(pa - pb) * (double)(pa - pb) / (double)(pa + pb);
        cells++;
    }
    int dof = cells - 1;
    double limit = dof + 6 * sqrt(2.0 * dof) + 10;
    if (getenv("SPEC_DEBUG"))
        for (int i = 0; i < CELLS; i++)
            if (h->key[i] && h->n[i][0] + h->n[i][1] > 1000)
                fprintf(stderr, "    %6d %6d: %6ld %6ld\n", (int)(h->key[i] >> 32) - 1,
                        (int)(uint32_t)h->key[i] - 1, h->n[i][0], h->n[i][1]);
    fprintf(stderr, "  %-8s chi-square %7.1f (limit %.1f, dof %d)\n", what, chi, limit, dof);
    assert_true(chi <= limit);
}

/* spec_samples() samples of tmpl (n = PER_REQ, seeds from seed0) on an
 * engine of config c, into column col of the three histograms. */
static void draw_samples(const fake_cfg *c, const trellis_request *tmpl, bool ban, uint64_t seed0,
                         pair_hist *h, int col, trellis_stats *st) {
    enum { WAVE = 20 };
    fake *f, *df;
    trellis_engine *e = fake_engine_draft(c, &f, &df);
    static result rs[WAVE];
    long got = 0;
    for (int w = 0; got < spec_samples(); w++) {
        for (int k = 0; k < WAVE; k++) {
            trellis_request q = *tmpl;
            q.seed = seed0 + (uint64_t)(w * WAVE + k) * TRELLIS_MAX_N; /* + sample index */
            if (ban) {
                ban7 *cs = malloc(sizeof *cs);
                assert_non_null(cs);
                *cs = (ban7){0, 70, 49152};
                q.constraint = &k_ban7;
                q.constraint_state = cs;
            }
            submit_ok(e, &q, &rs[k]);
        }
        drain(e, rs, WAVE);
        for (int k = 0; k < WAVE; k++) {
            for (int i = 0; i < rs[k].n; i++) {
                /* an end-of-generation token (the fake's tail holds them,
                 * rarely drawn) ends a sample early: -1 after it */
                int32_t t[4] = {-1, -1, -1, -1};
                assert_true(rs[k].s[i].n_tokens <= 4);
                for (int j = 0; j < rs[k].s[i].n_tokens; j++) t[j] = rs[k].s[i].tokens[j];
                if (rs[k].s[i].n_tokens < 4)
                    assert_int_equal(rs[k].s[i].finish, TRELLIS_FINISH_STOP);
                if (ban)
                    for (int j = 0; j < rs[k].s[i].n_tokens; j++)
                        assert_true(t[j] >= 100 && t[j] % 7 != 0);
                hist_add(&h[0], t[0], t[1], col);
                hist_add(&h[1], t[1], t[2], col);
                hist_add(&h[2], t[2], t[3], col);
                got++;
            }
            result_free(&rs[k]);
        }
    }
    assert_int_equal(f->bad, 0);
    if (df) assert_int_equal(df->bad, 0);
    stats_now(e, st);
    expect_all_free(e);
    trellis_engine_free(e);
}

static void spec_setting(const char *name, fake_cfg c, const trellis_request *q, bool ban,
                         bool sampled) {
    pair_hist *h = calloc(3, sizeof *h);
    assert_non_null(h);
    trellis_stats s0, s1;
    fake_cfg plain = c;
    plain.draft = 0;
    draw_samples(&plain, q, ban, 1, h, 0, &s0);
    c.draft_sampling = sampled;
    draw_samples(&c, q, ban, UINT64_C(1) << 40, h, 1, &s1);
    fprintf(stderr, "%s: %llu of %llu drafts kept\n", name,
            (unsigned long long)s1.spec_accepted_tokens,
            (unsigned long long)s1.spec_drafted_tokens);
    assert_true((long)s1.spec_drafted_tokens > spec_samples()); /* the rule was exercised */
    expect_same_hist(&h[0], "t1,t2");
    expect_same_hist(&h[1], "t2,t3");
    expect_same_hist(&h[2], "t3,t4");
    free(h);
}

static void test_sampled_drafts_distribution(void **state) {
    (void)state;
    fake_cfg c = fake_default();
    c.max_running = 64;
    c.spec_draft = 3;
    trellis_request q;
    trellis_request_default(&q);
    static int32_t prompt[40];
    phrase_prompt(7, prompt, 40);
    q.tokens = prompt;
    q.n_tokens = 40;
    q.max_tokens = 4;
    q.n = PER_REQ;
    /* the sanitizer stages run only the last setting, which goes through
     * the most code (a constraint's probes, truncation, penalties): the
     * others cost minutes under TSan and add no path */
    if (!small_scale()) {
        /* a draft that disagrees: almost every draft rejected, the residual */
        q.temperature = 1.0f;
        c.draft = 2;
        spec_setting("other draft", c, &q, false, true);
        /* copying target and draft: they agree on the copied token only */
        c.copy = true;
        q.temperature = 0.9f; /* hotter, the fake's flat tail (49k tokens) takes the mass */
        spec_setting("copying", c, &q, false, true);
        /* greedy drafts (the default) on the same pair: other seeds, so a
         * statistical test too, though their tokens are plain decoding's */
        spec_setting("greedy", c, &q, false, false);
    }
    /* the twin under a constraint, truncation and penalties, all applied
     * to both distributions */
    c.copy = false;
    c.draft = 1;
    q.temperature = 0.8f;
    q.top_k = 6;
    q.top_p = 0.95f;
    q.min_p = 0.02f;
    q.repetition_penalty = 1.3f;
    q.presence_penalty = 0.5f;
    spec_setting("twin+mask", c, &q, true, true);
}

/* draft_sampling leaves greedy requests exactly as they were. */
static void test_sampled_drafts_greedy_unchanged(void **state) {
    (void)state;
    static job jobs[NJOBS];
    static result ref[NJOBS], got[NJOBS];
    int n = 0;
    for (int k = 0; k < NJOBS; k++)
        if (k % 3 == 0) make_draft_job(&jobs[n++], k);
    fake_cfg c = fake_default();
    c.copy = true;
    run_out r0, r1;
    run_jobs(&c, jobs, n, ref, &r0);
    c.draft = 2;
    c.draft_sampling = true;
    run_jobs(&c, jobs, n, got, &r1);
    for (int k = 0; k < n; k++) {
        same_result(&ref[k], &got[k], jobs[k].q.logprobs);
        result_free(&ref[k]);
        result_free(&got[k]);
    }
    assert_true(r1.st.spec_accepted_tokens > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_output),
        cmocka_unit_test(test_sampled_drafts_distribution),
        cmocka_unit_test(test_sampled_drafts_greedy_unchanged),
        cmocka_unit_test(test_twin_alone),
        cmocka_unit_test(test_failing_draft),
        cmocka_unit_test(test_per_request),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
