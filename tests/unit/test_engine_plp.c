/* test_engine_plp.c — prompt log-probs (trellis_request.prompt_logprobs)
 * on the fake model (engine_fake.h): no model file needed. The real
 * model's check (prompt log-probs equal the log-probs greedy generation
 * gave the same tokens) is in test_engine_model.c.
 *
 * The fake's logits of a position are a function of the tokens up to it,
 * read back through the page table, so a reference computed from the
 * token list alone (plp_ref) checks every entry: a wrong row, a row of a
 * cached position never recomputed, or a page mix-up changes numbers.
 * Checks: entries equal the reference (logprob and alternatives) for
 * every start position kind (0: NaN first, middle, last); the same
 * numbers whatever the chunk size (rows spanning chunks), with more rows
 * than one step takes (64), with the prefix already cached, with a pool
 * small enough to preempt, with radix off, overlap off, in a crowd; they
 * come once, in sample 0's first event (streamed or not, n > 1, max_tokens
 * 0); bad options are refused at submit with a message naming them.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/unit/harness.h"
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/util.h"
#include "runtime/engine/engine_compute_internal.h"
#include "trellis.h"
#include "tests/unit/engine_fake.h"

/* The fake's logits at position p of tokens (fake_forward's formula). */
static void fake_logits_ref(const int32_t *tokens, int32_t p, int32_t n_vocab, float *l) {
    uint64_t h = 0x12345;
    for (int32_t i = 0; i <= p; i++) h = mix(h ^ (uint64_t)tokens[i]);
    memset(l, 0, (size_t)n_vocab * sizeof *l);
    for (int k = 0; k < 8; k++) {
        int32_t id = 100 + (int32_t)(mix(h + (uint64_t)k) % (uint64_t)(n_vocab - 200));
        l[id] = 12.0f + 0.5f * (float)k;
    }
}

/* Checks entries[0..n) of prompt positions start.. against the fake's
 * log_softmax (double precision; the engine's exp is an approximation). */
static void plp_check_ref(const int32_t *tokens, int32_t start, int32_t n,
                          const trellis_logprob *lp, int32_t top) {
    const int32_t nv = 49152;
    float *l = malloc((size_t)nv * sizeof *l);
    assert_non_null(l);
    for (int32_t i = 0; i < n; i++) {
        int32_t pos = start + i;
        assert_int_equal(lp[i].token, tokens[pos]);
        if (pos == 0) {
            assert_true(isnan(lp[i].logprob));
            assert_int_equal(lp[i].n_top, 0);
            continue;
        }
        fake_logits_ref(tokens, pos - 1, nv, l);
        double mx = 0, z = 0;
        for (int32_t t = 0; t < nv; t++) mx = l[t] > mx ? l[t] : mx;
        for (int32_t t = 0; t < nv; t++) z += exp((double)l[t] - mx);
        double want = (double)l[tokens[pos]] - mx - log(z);
        if (fabs(want - (double)lp[i].logprob) > 1e-4) {
            fprintf(stderr, "position %d: logprob %.6f, expected %.6f\n", pos,
                    (double)lp[i].logprob, want);
            fail();
        }
        assert_int_equal(lp[i].n_top, top);
        for (int32_t k = 0; k < lp[i].n_top; k++) {
            int32_t t = lp[i].top[k].token;
            assert_true(fabs((double)l[t] - mx - log(z) - (double)lp[i].top[k].logprob) < 1e-4);
            if (k > 0) assert_true(lp[i].top[k].logprob <= lp[i].top[k - 1].logprob);
        }
        if (top > 0) assert_true(lp[i].top[0].logprob >= lp[i].logprob);
    }
    free(l);
}

/* One request's events, prompt log-probs included. */
typedef struct plp_out {
    result r;
    trellis_logprob *plp;
    int32_t n_plp, start;
    int events_with_plp;
    int plp_index, plp_kind;
} plp_out;

static void plp_out_free(plp_out *o) {
    result_free(&o->r);
    free(o->plp);
}

static void plp_take(plp_out *o, const trellis_event *ev) {
    if (ev->prompt_logprobs) {
        o->events_with_plp++;
        o->plp_index = ev->index;
        o->plp_kind = ev->kind;
        o->n_plp = ev->n_prompt_logprobs;
        o->start = ev->prompt_logprobs_start;
        free(o->plp);
        o->plp = malloc((size_t)o->n_plp * sizeof *o->plp);
        assert_non_null(o->plp);
        memcpy(o->plp, ev->prompt_logprobs, (size_t)o->n_plp * sizeof *o->plp);
    } else {
        assert_int_equal(ev->n_prompt_logprobs, 0);
    }
}

/* Runs requests q[0..n) at once and collects everything. */
static void plp_run(trellis_engine *e, const trellis_request *q, plp_out *o, int n) {
    for (int i = 0; i < n; i++) {
        memset(&o[i], 0, sizeof o[i]);
        submit_ok(e, &q[i], &o[i].r);
    }
    int left = n;
    while (left > 0) {
        trellis_event *ev;
        assert_int_equal(trellis_wait(e, 900000, &ev), 1);
        int k = -1;
        for (int i = 0; i < n; i++)
            if (o[i].r.id == ev->request_id) k = i;
        assert_true(k >= 0);
        plp_take(&o[k], ev);
        collect(&o[k].r, ev);
        if (ev->kind == TRELLIS_EVENT_DONE && ev->request_done) left--;
        trellis_event_free(ev);
    }
}

static trellis_request plp_request(const int32_t *prompt, int32_t n, int32_t start,
                                   int32_t top, int32_t max_tokens) {
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = n;
    q.temperature = 0;
    q.max_tokens = max_tokens;
    q.prompt_logprobs = true;
    q.prompt_logprobs_start = start;
    q.prompt_top_logprobs = top;
    return q;
}

static void expect_same_plp(const plp_out *a, const plp_out *b) {
    assert_int_equal(a->n_plp, b->n_plp);
    assert_int_equal(a->start, b->start);
    for (int32_t i = 0; i < a->n_plp; i++) {
        const trellis_logprob *x = &a->plp[i], *y = &b->plp[i];
        assert_int_equal(x->token, y->token);
        assert_int_equal(x->n_top, y->n_top);
        if (isnan(x->logprob)) assert_true(isnan(y->logprob));
        else assert_memory_equal(&x->logprob, &y->logprob, sizeof x->logprob);
        assert_memory_equal(x->top, y->top, (size_t)x->n_top * sizeof x->top[0]);
    }
}

/* Entries equal the reference for start 0, middle and last; prefill only
 * and generating; once, in the first event of sample 0. */
static void test_plp_reference(void **state) {
    (void)state;
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    int32_t prompt[150];
    rand_tokens(7, prompt, 150);
    const int32_t starts[] = {0, 1, 37, 149};
    for (size_t k = 0; k < sizeof starts / sizeof *starts; k++) {
        for (int gen = 0; gen < 2; gen++) {
            trellis_request q = plp_request(prompt, 150, starts[k], 5, gen ? 6 : 0);
            q.stream = gen;
            q.n = gen ? 3 : 1;
            plp_out o;
            plp_run(e, &q, &o, 1);
            assert_int_equal(o.events_with_plp, 1);
            assert_int_equal(o.plp_index, 0);
            /* the first event of sample 0: DONE (prefill only) or its
             * first DELTA */
            assert_int_equal(o.plp_kind, gen ? TRELLIS_EVENT_DELTA : TRELLIS_EVENT_DONE);
            assert_int_equal(o.start, starts[k]);
            assert_int_equal(o.n_plp, 150 - starts[k]);
            plp_check_ref(prompt, starts[k], o.n_plp, o.plp, 5);
            for (int i = 0; i < q.n; i++)
                assert_int_equal(o.r.s[i].finish, TRELLIS_FINISH_LENGTH);
            plp_out_free(&o);
        }
    }
    assert_int_equal(f->bad, 0);
    expect_clean(e);
    trellis_engine_free(e);
}

/* The same numbers whatever the chunks (rows spanning them, and more rows
 * than one step takes), the cache, the pool, radix and overlap. */
static void test_plp_invariance(void **state) {
    (void)state;
    int32_t prompt[300];
    rand_tokens(11, prompt, 300);
    trellis_request q = plp_request(prompt, 300, 0, 3, 4);
    plp_out ref;
    {
        fake_cfg c = fake_default();
        c.chunk = 256;
        c.max_batch = 512;
        trellis_engine *e = fake_engine(&c, NULL);
        plp_run(e, &q, &ref, 1);
        trellis_engine_free(e);
    }
    plp_check_ref(prompt, 0, ref.n_plp, ref.plp, 3);
    const struct {
        int32_t chunk, max_batch, n_pages;
        bool no_radix, no_overlap;
    } cfgs[] = {{7, 256, 4096, false, false},   {64, 64, 4096, false, true},
                {256, 512, 4096, true, false},  {33, 100, 4096, false, false},
                {16, 48, 4096, false, true}};
    for (size_t k = 0; k < sizeof cfgs / sizeof *cfgs; k++) {
        fake_cfg c = fake_default();
        c.chunk = cfgs[k].chunk;
        c.max_batch = cfgs[k].max_batch;
        c.n_pages = cfgs[k].n_pages;
        c.no_radix = cfgs[k].no_radix;
        c.no_overlap = cfgs[k].no_overlap;
        fake *f;
        trellis_engine *e = fake_engine(&c, &f);
        plp_out o;
        plp_run(e, &q, &o, 1);
        expect_same_plp(&ref, &o);
        same_tokens(&ref.r, &o.r, 0);
        plp_out_free(&o);
        /* again, with the whole prompt cached by the first run: the
         * cached part is recomputed, the numbers are the same */
        plp_run(e, &q, &o, 1);
        expect_same_plp(&ref, &o);
        same_tokens(&ref.r, &o.r, 0);
        plp_out_free(&o);
        assert_int_equal(f->bad, 0);
        expect_clean(e);
        trellis_engine_free(e);
    }
    plp_out_free(&ref);
}

/* A cached prefix is used up to the position before the start and no
 * further; a later start reuses more. */
static void test_plp_cache(void **state) {
    (void)state;
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    int32_t prompt[120];
    rand_tokens(13, prompt, 120);
    trellis_request warm;
    trellis_request_default(&warm);
    warm.tokens = prompt;
    warm.n_tokens = 120;
    warm.max_tokens = 0;
    result r;
    run1(e, &warm, &r); /* caches 7 full pages */
    result_free(&r);
    const int32_t starts[] = {0, 1, 40, 100, 119};
    for (size_t k = 0; k < sizeof starts / sizeof *starts; k++) {
        trellis_request q = plp_request(prompt, 120, starts[k], 2, 3);
        plp_out o;
        plp_run(e, &q, &o, 1);
        int32_t limit = (starts[k] > 0 ? starts[k] - 1 : 0) / 16 * 16;
        assert_int_equal(o.r.s[0].m.cached_tokens, limit);
        plp_check_ref(prompt, starts[k], o.n_plp, o.plp, 2);
        plp_out_free(&o);
    }
    /* samples 1.. of a request share what sample 0 computes */
    trellis_request q = plp_request(prompt, 120, 0, 0, 2);
    q.n = 4;
    plp_out o;
    plp_run(e, &q, &o, 1);
    assert_int_equal(o.events_with_plp, 1);
    plp_check_ref(prompt, 0, o.n_plp, o.plp, 0);
    for (int i = 1; i < 4; i++) assert_true(o.r.s[i].m.cached_tokens >= 112);
    plp_out_free(&o);
    assert_int_equal(f->bad, 0);
    expect_clean(e);
    trellis_engine_free(e);
}

/* In a crowd, under a pool small enough to preempt: every request's
 * entries still equal the reference. */
static void test_plp_crowd(void **state) {
    (void)state;
    fake *f;
    fake_cfg c = fake_default();
    c.n_pages = 48; /* 768 tokens for 12 requests of ~200 */
    c.chunk = 40;
    c.max_batch = 128;
    trellis_engine *e = fake_engine(&c, &f);
    enum { N = 12 };
    int32_t prompts[N][180];
    trellis_request q[N];
    for (int i = 0; i < N; i++) {
        rand_tokens(100 + (uint64_t)i, prompts[i], 180);
        if (i % 3 == 0) memcpy(prompts[i], prompts[0], 90 * sizeof(int32_t));
        q[i] = plp_request(prompts[i], 180, (i * 17) % 180, i % 4, 8 + i);
        q[i].prompt_logprobs = i % 4 != 3; /* some without */
        if (!q[i].prompt_logprobs) q[i].prompt_logprobs_start = q[i].prompt_top_logprobs = 0;
        q[i].stream = i % 2;
    }
    plp_out o[N];
    plp_run(e, q, o, N);
    trellis_stats st;
    stats_now(e, &st);
    for (int i = 0; i < N; i++) {
        if (!q[i].prompt_logprobs) {
            assert_int_equal(o[i].events_with_plp, 0);
        } else {
            assert_int_equal(o[i].events_with_plp, 1);
            plp_check_ref(prompts[i], q[i].prompt_logprobs_start, o[i].n_plp, o[i].plp,
                          q[i].prompt_top_logprobs);
        }
        assert_int_equal(o[i].r.s[0].n_tokens, 8 + i);
        plp_out_free(&o[i]);
    }
    assert_true(st.preemptions > 0); /* the pool did force some */
    assert_int_equal(f->bad, 0);
    expect_clean(e);
    trellis_engine_free(e);
}

static void expect_refused(trellis_engine *e, const trellis_request *q, int code,
                           const char *words) {
    char err[512] = "";
    uint64_t id = 0;
    assert_int_equal(trellis_submit(e, q, &id, err, sizeof err), code);
    if (!strstr(err, words)) {
        fprintf(stderr, "error '%s' lacks '%s'\n", err, words);
        fail();
    }
}

static void test_plp_rejections(void **state) {
    (void)state;
    trellis_engine *e = fake_engine(&(fake_cfg){.n_pages = 256, .page_size = 16,
                                                .max_batch = 256, .max_running = 8,
                                                .chunk = 64, .ctx = 2048, .lpm = 128},
                                    NULL);
    int32_t prompt[20];
    rand_tokens(3, prompt, 20);
    trellis_request q = plp_request(prompt, 20, 20, 0, 1);
    expect_refused(e, &q, TRELLIS_ERR_INVALID_ARG,
                   "prompt_logprobs_start is 20, but the prompt has 20 tokens");
    q.prompt_logprobs_start = -21;
    expect_refused(e, &q, TRELLIS_ERR_INVALID_ARG, "expected 0..19, or -20..-1");
    q.prompt_logprobs_start = 0;
    q.prompt_top_logprobs = 21;
    expect_refused(e, &q, TRELLIS_ERR_INVALID_ARG, "prompt_top_logprobs is 21");
    q.prompt_top_logprobs = -1;
    expect_refused(e, &q, TRELLIS_ERR_INVALID_ARG, "prompt_top_logprobs is -1");
    q.prompt_top_logprobs = 2;
    q.prompt_logprobs = false;
    expect_refused(e, &q, TRELLIS_ERR_INVALID_ARG, "need prompt_logprobs");
    /* from the end: -1 is the last token alone, -20 the whole prompt */
    q = plp_request(prompt, 20, -1, 1, 0);
    plp_out o;
    plp_run(e, &q, &o, 1);
    assert_int_equal(o.start, 19);
    assert_int_equal(o.n_plp, 1);
    plp_check_ref(prompt, 19, 1, o.plp, 1);
    plp_out_free(&o);
    q.prompt_logprobs_start = -20;
    plp_run(e, &q, &o, 1);
    assert_int_equal(o.start, 0);
    assert_int_equal(o.n_plp, 20);
    plp_check_ref(prompt, 0, 20, o.plp, 1);
    plp_out_free(&o);
    /* a one-token prompt: only the NaN of position 0 */
    q = plp_request(prompt, 1, 0, 3, 0);
    plp_run(e, &q, &o, 1);
    assert_int_equal(o.n_plp, 1);
    assert_true(isnan(o.plp[0].logprob));
    assert_int_equal(o.plp[0].token, prompt[0]);
    plp_out_free(&o);
    /* cancelled before its prompt is computed: no entries, no leak */
    int32_t big[1500];
    rand_tokens(4, big, 1500);
    q = plp_request(big, 1500, 0, 20, 1);
    result r;
    submit_ok(e, &q, &r);
    assert_int_equal(trellis_cancel(e, r.id), 0);
    drain(e, &r, 1);
    result_free(&r);
    expect_clean(e);
    trellis_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plp_reference),
        cmocka_unit_test(test_plp_invariance),
        cmocka_unit_test(test_plp_cache),
        cmocka_unit_test(test_plp_crowd),
        cmocka_unit_test(test_plp_rejections),
    };
    tr_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
