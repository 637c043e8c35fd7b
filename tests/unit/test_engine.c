/* test_engine.c — the async engine (runtime/engine, include/trellis.h) on
 * a fake model (engine_fake.h) with a synthetic 49,152-token vocabulary
 * (tiny_vocab.h): no model file needed. The real model's part is
 * test_engine_model.c.
 *
 * The fake stores each token it is fed in its KV "page" slot, and
 * computes the logits of a row from the sequence's whole history READ
 * BACK THROUGH THE PAGE TABLE (checking every slot holds the position it
 * should). So a page shared by mistake, a wrong page table after
 * preemption, or a cached prefix whose pages hold other tokens changes
 * the output, and the tests compare outputs across configurations that
 * must not change it: alone vs in a crowd, big pool vs tiny pool
 * (preemption), radix on vs off, chunk sizes, overlap on vs off.
 *
 * A differential test runs a random request mix under 24 random engine
 * configurations and compares every sample's tokens with a roomy
 * reference configuration.
 *
 * Jump-forward: chunks cut at max_tokens, stop strings inside forced
 * text, logprobs and counters of forced tokens, the same tokens when
 * chunks are split and sequences preempted, half a jump-forward refused
 * at submit.
 *
 * Checks: every accepted request ends with exactly one DONE event per
 * sample; concatenated DELTA + DONE text equals the detokenized tokens;
 * stop strings spanning token boundaries are never emitted (not even
 * partly, in any delta); stop tokens; max_tokens; logprobs; regex
 * constraints; impossible requests are rejected at submit with the right
 * code and a message; 10,000 requests (500 with TRELLIS_TEST_SCALE=small,
 * for AddressSanitizer runs) with random cancellations under a pool small
 * enough to preempt end with every page free and every invariant
 * (tr_engine_debug_check: tree, pool, per-sequence pages) holding.
 *
 * An event-loop test drains the engine from a libuv loop woken by the
 * engine's wake callback (uv_async_send), with cancellations from a timer.
 *
 * TRELLIS_TEST_FILTER=<glob> runs only the matching tests, and
 * TRELLIS_TEST_SKIP=<glob> skips some; TRELLIS_TEST_CONFIGS=N sets the
 * differential test's configurations.
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
#include <pthread.h>
#include <uv.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "grammar/grammar.h"
#include "base/paths.h"
#include "base/util.h"
#include "runtime/engine/engine_compute_internal.h"
#include "runtime/gguf/gguf.h"
#include "runtime/tokenizer/tokenizer.h"
#include "trellis.h"
#include "tests/unit/engine_fake.h"
#include "tests/unit/test_env.h"

/* ------------------------------------------------------------------ */
/* Fake-model tests                                                    */
/* ------------------------------------------------------------------ */

static void test_basic_and_stream(void **state) {
    (void)state;
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    int32_t prompt[40];
    rand_tokens(1, prompt, 40);
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 40;
    q.max_tokens = 30;
    q.seed = 7;
    q.stream = true;
    result r;
    run1(e, &q, &r);
    assert_int_equal(f->bad, 0);
    assert_int_equal(r.s[0].finish, TRELLIS_FINISH_LENGTH);
    assert_int_equal(r.s[0].n_tokens, 30);
    assert_int_equal(r.s[0].m.completion_tokens, 30);
    assert_int_equal(r.s[0].m.prompt_tokens, 40);
    assert_true(r.s[0].n_deltas >= 10); /* streamed as it went */
    assert_true(r.s[0].m.ttft_ms >= r.s[0].m.queue_ms);
    assert_true(r.s[0].m.e2e_ms >= r.s[0].m.ttft_ms);
    /* concatenated deltas == detokenized tokens */
    char *dec = NULL;
    size_t dlen = 0;
    trellis_engine_info info;
    trellis_engine_get_info(e, &info);
    assert_int_equal(info.n_vocab, 49152);
    {
        /* decode through a private tokenizer (the engine's is internal) */
        tokenizer *tok = tv_tokenizer();
        assert_non_null(tok);
        assert_int_equal(tr_tokenizer_decode(tok, r.s[0].tokens, (size_t)r.s[0].n_tokens,
                                          false, &dec, &dlen), TR_OK);
        tr_tokenizer_free(tok);
    }
    /* the stream replaces invalid UTF-8 with U+FFFD where decode keeps raw
     * bytes; compare only when the decode is valid UTF-8 */
    bool valid = true;
    for (size_t i = 0; i < dlen; i++)
        if ((unsigned char)dec[i] >= 0x80) valid = false;
    if (valid) {
        assert_int_equal(r.s[0].text_len, dlen);
        assert_memory_equal(r.s[0].text, dec, dlen);
    }
    free(dec);

    /* same request, not streamed: one DONE event with everything */
    q.stream = false;
    result r2;
    run1(e, &q, &r2);
    assert_int_equal(r2.s[0].n_deltas, 0);
    same_tokens(&r, &r2, 0);
    assert_string_equal(r.s[0].text, r2.s[0].text);
    /* the second one found the first's pages in the cache */
    assert_true(r2.s[0].m.cached_tokens >= 32);
    expect_clean(e);
    result_free(&r);
    result_free(&r2);
    trellis_engine_free(e);
}

/* Runs k requests (index 0 is the probe) together; returns the probe. */
static void run_crowd(const fake_cfg *c, int k, const trellis_request *probe,
                      result *out, int32_t *max_batch_seen) {
    fake *f;
    trellis_engine *e = fake_engine(c, &f);
    result *rs = calloc((size_t)k, sizeof *rs);
    int32_t prompts[64][80];
    for (int i = 0; i < k; i++) {
        trellis_request q;
        if (i == 0) {
            q = *probe;
        } else {
            trellis_request_default(&q);
            int n = 10 + (int)(mix((uint64_t)i) % 70);
            rand_tokens(1000 + (uint64_t)i, prompts[i % 64], n);
            q.tokens = prompts[i % 64];
            q.n_tokens = n;
            q.max_tokens = 5 + (int)(mix((uint64_t)i * 7) % 40);
            q.seed = (uint64_t)i;
            q.temperature = 0.9f;
        }
        submit_ok(e, &q, &rs[i]);
    }
    drain(e, rs, k);
    assert_int_equal(f->bad, 0);
    *max_batch_seen = f->max_batch_seen;
    expect_clean(e);
    *out = rs[0];
    for (int i = 1; i < k; i++) result_free(&rs[i]);
    free(rs);
    trellis_engine_free(e);
}

static void test_invariance_fake(void **state) {
    (void)state;
    int32_t prompt[300];
    rand_tokens(99, prompt, 300);
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 300;
    q.max_tokens = 40;
    q.seed = 1234;
    q.temperature = 0.8f;
    q.top_p = 0.95f;
    int32_t mb;
    fake_cfg c = fake_default();
    result alone, crowd, tiny, noradix, nooverlap;
    run_crowd(&c, 1, &q, &alone, &mb);
    run_crowd(&c, 32, &q, &crowd, &mb);
    assert_true(mb > 32); /* really batched with others */
    same_tokens(&alone, &crowd, 0);
    /* tiny pool (preemption), small chunks and batches */
    fake_cfg t = c;
    t.n_pages = 60;
    t.page_size = 8;
    t.chunk = 24;
    t.max_batch = 48;
    run_crowd(&t, 32, &q, &tiny, &mb);
    same_tokens(&alone, &tiny, 0);
    fake_cfg nr = c;
    nr.no_radix = true;
    run_crowd(&nr, 32, &q, &noradix, &mb);
    same_tokens(&alone, &noradix, 0);
    fake_cfg no = c;
    no.no_overlap = true;
    run_crowd(&no, 8, &q, &nooverlap, &mb);
    same_tokens(&alone, &nooverlap, 0);
    /* page size 1 under a tight pool; one sequence at a time, FCFS; one
     * token per step (max_batch 1: no prefill chunk beyond one token) */
    fake_cfg p1 = c;
    p1.page_size = 1;
    p1.n_pages = 700;
    p1.chunk = 50;
    p1.lpm = 0;
    result r1, r2, r3;
    run_crowd(&p1, 16, &q, &r1, &mb);
    same_tokens(&alone, &r1, 0);
    fake_cfg one = c;
    one.max_running = 1;
    run_crowd(&one, 6, &q, &r2, &mb);
    same_tokens(&alone, &r2, 0);
    fake_cfg tok1 = c;
    tok1.max_batch = 1;
    tok1.max_running = 1;
    run_crowd(&tok1, 3, &q, &r3, &mb);
    assert_int_equal(mb, 1);
    same_tokens(&alone, &r3, 0);
    result_free(&r1);
    result_free(&r2);
    result_free(&r3);
    result_free(&alone);
    result_free(&crowd);
    result_free(&tiny);
    result_free(&noradix);
    result_free(&nooverlap);
}

/* Differential test of the scheduler: random engine configurations (page
 * size, pool size down to what one request needs, chunk, batch budget,
 * max_running, LPM on/off, radix on/off, overlap on/off) run the same
 * random request mix (shared prefixes, n > 1, temperatures) as a roomy
 * reference configuration; every sample's tokens must be identical. */
static void test_random_configs(void **state) {
    (void)state;
    enum { NR = 14 };
    int n_cfg = small_scale() ? 4 : 24;
    if (getenv("TRELLIS_TEST_CONFIGS")) n_cfg = atoi(getenv("TRELLIS_TEST_CONFIGS"));
    int32_t prompts[NR][160];
    trellis_request qs[NR];
    uint64_t rng = 2024;
    int32_t need_max = 0;
    int32_t base[120];
    rand_tokens(31337, base, 120);
    for (int i = 0; i < NR; i++) {
        rng = mix(rng);
        int shared = (int)(rng % 120), tail = 1 + (int)((rng >> 8) % 40);
        memcpy(prompts[i], base, (size_t)shared * sizeof(int32_t));
        rand_tokens(rng, prompts[i] + shared, tail);
        trellis_request_default(&qs[i]);
        qs[i].tokens = prompts[i];
        qs[i].n_tokens = shared + tail;
        qs[i].max_tokens = 1 + (int)((rng >> 16) % 30);
        qs[i].n = 1 + (int)((rng >> 24) % 3);
        qs[i].seed = rng;
        qs[i].temperature = (float)((rng >> 32) % 4) * 0.4f;
        qs[i].stream = (rng >> 40) & 1;
        qs[i].ignore_eos = true;
        int32_t need = qs[i].n_tokens + qs[i].max_tokens;
        if (need > need_max) need_max = need;
    }
    result ref[NR];
    fake_cfg rc = fake_default();
    fake *f;
    trellis_engine *e = fake_engine(&rc, &f);
    for (int i = 0; i < NR; i++) run1(e, &qs[i], &ref[i]);
    trellis_engine_free(e);
    for (int k = 0; k < n_cfg; k++) {
        rng = mix(rng + (uint64_t)k);
        fake_cfg c = fake_default();
        static const int32_t sizes[] = {1, 2, 4, 8, 16};
        c.page_size = sizes[rng % 5];
        int32_t min_pages = (need_max + c.page_size - 1) / c.page_size;
        c.n_pages = min_pages + (int32_t)((rng >> 8) % (uint64_t)(3 * min_pages));
        c.chunk = 1 + (int32_t)((rng >> 20) % 64);
        c.max_batch = c.chunk + (int32_t)((rng >> 28) % 200);
        c.max_running = 1 + (int32_t)((rng >> 36) % 32);
        c.lpm = (rng >> 42) & 1 ? 128 : 0;
        c.no_radix = ((rng >> 44) & 3) == 0;
        c.no_overlap = (rng >> 46) & 1;
        if ((rng >> 48) & 1) { /* windowed units: what a long sequence holds */
            c.units = 2 + (int32_t)((rng >> 50) % 3);
            c.unit_window = 1 + (int32_t)((rng >> 53) % 48);
            int64_t slots = min_pages, reach = (c.unit_window + c.chunk) / c.page_size + 2;
            min_pages = (int32_t)(slots + (c.units - 1) * (reach < slots ? reach : slots));
            c.n_pages = min_pages + (int32_t)((rng >> 8) % (uint64_t)(3 * min_pages));
        }
        e = fake_engine(&c, &f);
        result got[NR];
        for (int i = 0; i < NR; i++) submit_ok(e, &qs[i], &got[i]);
        drain_checked(e, got, NR, 7);
        if (f->bad) fprintf(stderr, "config %d: fake page check %d\n", k, f->bad);
        assert_int_equal(f->bad, 0);
        for (int i = 0; i < NR; i++) {
            for (int j = 0; j < qs[i].n; j++) {
                if (got[i].s[j].n_tokens != ref[i].s[j].n_tokens ||
                    memcmp(got[i].s[j].tokens, ref[i].s[j].tokens,
                           (size_t)ref[i].s[j].n_tokens * sizeof(int32_t)))
                    fprintf(stderr, "config %d (ps %d pages %d chunk %d batch %d "
                                    "running %d lpm %d noradix %d units %d window %d): "
                                    "request %d sample %d differs\n",
                            k, c.page_size, c.n_pages, c.chunk, c.max_batch,
                            c.max_running, c.lpm, c.no_radix, c.units, c.unit_window, i, j);
                same_tokens(&ref[i], &got[i], j);
            }
            result_free(&got[i]);
        }
        expect_clean(e);
        expect_all_free(e);
        trellis_engine_free(e);
    }
    for (int i = 0; i < NR; i++) result_free(&ref[i]);
}

static void test_preemption_fake(void **state) {
    (void)state;
    /* 12 requests of up to 200 prompt + 60 tokens on a pool of 48 pages of
     * 8 tokens (384 tokens): at most one or two fit at once */
    fake_cfg big = fake_default();
    fake_cfg tiny = big;
    tiny.n_pages = 48;
    tiny.page_size = 8;
    int32_t prompts[12][200];
    trellis_request qs[12];
    for (int i = 0; i < 12; i++) {
        int n = 100 + 8 * i;
        rand_tokens(500 + (uint64_t)i, prompts[i], n);
        /* half share a 64-token prefix */
        if (i % 2) memcpy(prompts[i], prompts[1], 64 * sizeof(int32_t));
        trellis_request_default(&qs[i]);
        qs[i].tokens = prompts[i];
        qs[i].n_tokens = n;
        qs[i].max_tokens = 60;
        qs[i].ignore_eos = true;
        qs[i].seed = (uint64_t)i;
        qs[i].temperature = 0.7f;
    }
    result ref[12], got[12];
    fake *f;
    trellis_engine *e = fake_engine(&big, &f);
    for (int i = 0; i < 12; i++) run1(e, &qs[i], &ref[i]);
    trellis_engine_free(e);
    e = fake_engine(&tiny, &f);
    for (int i = 0; i < 12; i++) submit_ok(e, &qs[i], &got[i]);
    drain(e, got, 12);
    assert_int_equal(f->bad, 0);
    trellis_stats st;
    stats_now(e, &st);
    assert_true(st.preemptions > 0);
    int32_t preempted = 0;
    for (int i = 0; i < 12; i++) {
        same_tokens(&ref[i], &got[i], 0);
        assert_int_equal(got[i].s[0].n_tokens, 60);
        preempted += got[i].s[0].m.preemptions;
    }
    assert_true(preempted > 0);
    expect_clean(e);
    expect_all_free(e);
    for (int i = 0; i < 12; i++) {
        result_free(&ref[i]);
        result_free(&got[i]);
    }
    trellis_engine_free(e);
}

/* trellis_flush_cache returns after the stats show the freed pages: a
 * caller that reads them next (the server's /flush_cache, then
 * /server_info) must not see the cached pages of before. */
static void test_flush_publishes_stats(void **state) {
    (void)state;
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    int32_t prompt[200];
    rand_tokens(3, prompt, 200);
    for (int round = 0; round < 20; round++) {
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompt;
        q.n_tokens = 200;
        q.max_tokens = 4;
        result r;
        run1(e, &q, &r);
        result_free(&r);
        trellis_stats st;
        stats_now(e, &st);
        assert_true(st.pages_cached > 0);
        assert_int_equal(trellis_flush_cache(e), 0);
        trellis_get_stats(e, &st); /* no round trip in between */
        assert_int_equal(st.pages_cached, 0);
        assert_int_equal(st.pages_free, st.pages_total);
    }
    trellis_engine_free(e);
}

static void test_prefix_sharing(void **state) {
    (void)state;
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    /* 16 requests sharing a 400-token prefix, submitted at once: the prefix
     * is computed once (in-flight dedup), not 16 times */
    enum { N = 16, P = 400 };
    int32_t prompts[N][P + 20];
    result rs[N];
    for (int i = 0; i < N; i++) {
        rand_tokens(7, prompts[i], P);
        rand_tokens(100 + (uint64_t)i, prompts[i] + P, 20);
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompts[i];
        q.n_tokens = P + 20;
        q.max_tokens = 8;
        q.seed = (uint64_t)i;
        submit_ok(e, &q, &rs[i]);
    }
    drain(e, rs, N);
    assert_int_equal(f->bad, 0);
    trellis_stats st;
    stats_now(e, &st);
    /* without sharing: 16 * 420 = 6720 prefill tokens */
    assert_true(st.prefill_tokens < P + N * (20 + 16 + 1));
    int cached = 0;
    for (int i = 0; i < N; i++) cached += rs[i].s[0].m.cached_tokens >= 384;
    assert_true(cached >= N - 1);
    assert_true(st.cache_hit_rate > 0.8);
    for (int i = 0; i < N; i++) result_free(&rs[i]);
    trellis_engine_free(e);

    /* --no-radix: nothing shared across requests */
    c.no_radix = true;
    e = fake_engine(&c, &f);
    for (int i = 0; i < 4; i++) {
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompts[i];
        q.n_tokens = P + 20;
        q.max_tokens = 4;
        submit_ok(e, &q, &rs[i]);
    }
    drain(e, rs, 4);
    stats_now(e, &st);
    assert_int_equal(st.prefill_tokens, 4 * (P + 20));
    assert_int_equal(st.cached_prompt_tokens, 0);
    for (int i = 0; i < 4; i++) result_free(&rs[i]);
    expect_all_free(e);
    trellis_engine_free(e);
}

static void test_fork_n(void **state) {
    (void)state;
    for (int radix = 0; radix < 2; radix++) {
        fake *f;
        fake_cfg c = fake_default();
        c.no_radix = !radix;
        trellis_engine *e = fake_engine(&c, &f);
        int32_t prompt[203];
        rand_tokens(3, prompt, 203);
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompt;
        q.n_tokens = 203;
        q.max_tokens = 12;
        q.n = 6;
        q.seed = 50;
        q.stream = true;
        result r;
        run1(e, &q, &r);
        assert_int_equal(f->bad, 0);
        trellis_stats st;
        stats_now(e, &st);
        /* the prompt's 12 full pages once; each fork recomputes only its
         * partial last page (203 - 192 = 11 tokens) */
        assert_int_equal(st.prefill_tokens, 203 + 5 * 11);
        int distinct = 0;
        for (int i = 0; i < 6; i++) {
            assert_true(r.s[i].done);
            assert_int_equal(r.s[i].n_tokens, 12);
            if (i > 0 && memcmp(r.s[i].tokens, r.s[0].tokens, 12 * sizeof(int32_t)))
                distinct++;
            if (i > 0) assert_int_equal(r.s[i].m.cached_tokens, 192);
        }
        assert_true(distinct >= 4); /* seeds differ per sample */
        /* sample i == a single request with seed + i */
        q.n = 1;
        q.seed = 53;
        result one;
        run1(e, &q, &one);
        assert_int_equal(one.s[0].n_tokens, 12);
        assert_memory_equal(one.s[0].tokens, r.s[3].tokens, 12 * sizeof(int32_t));
        result_free(&r);
        result_free(&one);
        expect_all_free(e);
        trellis_engine_free(e);
    }
}

/* Stop strings: take a reference output, pick a substring spanning a
 * token boundary, and run again with it as a stop string. */
static void test_stops(void **state) {
    (void)state;
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    int32_t prompt[30];
    int tested = 0;
    for (uint64_t seed = 1; seed < 40 && tested < 8; seed++) {
        rand_tokens(seed, prompt, 30);
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompt;
        q.n_tokens = 30;
        q.max_tokens = 24;
        q.seed = seed;
        q.stream = true;
        result ref;
        run1(e, &q, &ref);
        const char *t = ref.s[0].text;
        size_t n = ref.s[0].text_len;
        /* per-token text lengths */
        size_t off[32] = {0}, at = 0;
        bool ascii = true;
        for (int i = 0; i < ref.s[0].n_tokens; i++) {
            size_t l;
            const char *b = trellis_token_text(e, ref.s[0].tokens[i], &l);
            for (size_t k = 0; k < l; k++)
                if ((unsigned char)b[k] >= 0x80 || b[k] == 0) ascii = false;
            at += l;
            off[i + 1] = at;
        }
        if (!ascii || at != n || ref.s[0].n_tokens < 12) {
            result_free(&ref);
            continue;
        }
        /* a stop string from the last 2 bytes of token 5 to the first 2 of
         * token 7 (so it spans 2 boundaries) */
        size_t a = off[6] >= 2 ? off[6] - 2 : 0, b2 = TR_MIN(off[7] + 2, n);
        if (off[6] - off[5] < 2 || off[8] - off[7] < 2 || b2 <= a) {
            result_free(&ref);
            continue;
        }
        char stop[64];
        size_t sl = TR_MIN(b2 - a, sizeof stop - 1);
        memcpy(stop, t + a, sl);
        stop[sl] = 0;
        const char *first = strstr(t, stop);
        size_t expect_len = (size_t)(first - t);
        const char *stops[2] = {"\x01never", stop};
        q.stop = stops;
        q.n_stop = 2;
        result got;
        run1(e, &q, &got);
        assert_int_equal(got.s[0].finish, TRELLIS_FINISH_STOP);
        assert_int_equal(got.s[0].stop_index, 1);
        assert_int_equal(got.s[0].text_len, expect_len);
        assert_memory_equal(got.s[0].text, t, expect_len);
        assert_null(strstr(got.s[0].text, stop));
        /* the tokens up to the one that completed the stop string */
        assert_true(got.s[0].n_tokens <= 8);
        result_free(&got);

        /* stop token: the 6th generated token ends the sample before it
         * (unless it appeared earlier) */
        int32_t stok = ref.s[0].tokens[5];
        int first_at = 5;
        for (int i = 0; i < 5; i++)
            if (ref.s[0].tokens[i] == stok) {
                first_at = i;
                break;
            }
        q.stop = NULL;
        q.n_stop = 0;
        q.stop_tokens = &stok;
        q.n_stop_tokens = 1;
        run1(e, &q, &got);
        assert_int_equal(got.s[0].finish, TRELLIS_FINISH_STOP);
        assert_int_equal(got.s[0].stop_token, stok);
        assert_int_equal(got.s[0].n_tokens, first_at);
        assert_int_equal(got.s[0].m.completion_tokens, first_at + 1);
        result_free(&got);
        result_free(&ref);
        tested++;
    }
    assert_true(tested >= 3);
    expect_clean(e);
    trellis_engine_free(e);
}

/* max_tokens 0: prefill only. No token, finish LENGTH, the prompt's
 * full pages cached for the next request; with n = 2 and streaming too. */
static void test_prefill_only(void **state) {
    (void)state;
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    int32_t prompt[40];
    rand_tokens(21, prompt, 40);
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 40;
    q.max_tokens = 0;
    q.n = 2;
    q.stream = true;
    q.logprobs = true;
    result r;
    run1(e, &q, &r);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(r.s[i].finish, TRELLIS_FINISH_LENGTH);
        assert_int_equal(r.s[i].n_tokens, 0);
        assert_int_equal(r.s[i].text_len, 0);
        assert_int_equal(r.s[i].n_deltas, 0);
        assert_int_equal(r.s[i].m.completion_tokens, 0);
        assert_int_equal(r.s[i].m.prompt_tokens, 40);
    }
    result_free(&r);
    trellis_stats st;
    stats_now(e, &st);
    assert_int_equal(st.generated_tokens, 0);
    assert_true(st.pages_cached >= 2); /* 40 tokens: two full pages of 16 */
    /* the next request with that prompt finds them */
    q.n = 1;
    q.max_tokens = 5;
    q.stream = false;
    run1(e, &q, &r);
    assert_int_equal(r.s[0].n_tokens, 5);
    assert_true(r.s[0].m.cached_tokens >= 32);
    result_free(&r);
    assert_int_equal(f->bad, 0);
    expect_clean(e);
    trellis_engine_free(e);
}

/* min_tokens: a favoured end-of-generation token, stop token or stop
 * string cannot end the sample before it has min_tokens tokens. */
static void test_min_tokens(void **state) {
    (void)state;
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    trellis_engine_info info;
    trellis_engine_get_info(e, &info);
    assert_true(info.eos >= 0);
    int32_t prompt[20];
    rand_tokens(31, prompt, 20);
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 20;
    q.max_tokens = 12;
    q.temperature = 0;
    q.logprobs = true;
    /* EOS made the greedy choice: it ends the sample at once... */
    trellis_logit_bias eos_bias = {info.eos, 50.0f};
    q.logit_bias = &eos_bias;
    q.n_logit_bias = 1;
    result r;
    run1(e, &q, &r);
    assert_int_equal(r.s[0].finish, TRELLIS_FINISH_STOP);
    assert_int_equal(r.s[0].stop_token, info.eos);
    assert_int_equal(r.s[0].n_tokens, 0);
    result_free(&r);
    /* ...but not before min_tokens: masked until then, taken right after */
    q.min_tokens = 5;
    run1(e, &q, &r);
    assert_int_equal(r.s[0].finish, TRELLIS_FINISH_STOP);
    assert_int_equal(r.s[0].stop_token, info.eos);
    assert_int_equal(r.s[0].n_tokens, 5);
    for (int i = 0; i < 5; i++) assert_int_not_equal(r.s[0].tokens[i], info.eos);
    assert_int_equal(r.s[0].m.completion_tokens, 6);
    result_free(&r);
    /* ignore_eos: EOS is an ordinary token, not masked */
    q.ignore_eos = true;
    run1(e, &q, &r);
    assert_int_equal(r.s[0].finish, TRELLIS_FINISH_LENGTH);
    assert_int_equal(r.s[0].tokens[0], info.eos);
    result_free(&r);
    q.ignore_eos = false;
    /* a favoured stop token id: the same */
    int32_t stok = 1000;
    trellis_logit_bias stok_bias = {stok, 50.0f};
    q.logit_bias = &stok_bias;
    q.stop_tokens = &stok;
    q.n_stop_tokens = 1;
    q.min_tokens = 3;
    run1(e, &q, &r);
    assert_int_equal(r.s[0].finish, TRELLIS_FINISH_STOP);
    assert_int_equal(r.s[0].stop_token, stok);
    assert_int_equal(r.s[0].n_tokens, 3);
    result_free(&r);
    q.logit_bias = NULL;
    q.n_logit_bias = 0;
    q.stop_tokens = NULL;
    q.n_stop_tokens = 0;
    q.logprobs = false;
    /* a stop string that occurs once, in the 2nd token: it stops there
     * without min_tokens; with min_tokens = max_tokens it is text */
    int tested = 0;
    for (uint64_t seed = 1; seed < 60 && tested < 3; seed++) {
        q.min_tokens = 0;
        q.seed = seed;
        q.temperature = 1;
        rand_tokens(seed + 100, prompt, 20);
        result ref;
        run1(e, &q, &ref);
        size_t l0 = 0, l1 = 0;
        const char *t0 = trellis_token_text(e, ref.s[0].tokens[0], &l0);
        const char *t1 = trellis_token_text(e, ref.s[0].tokens[1], &l1);
        char stop[64];
        bool ok = ref.s[0].n_tokens == 12 && l1 >= 2 && l1 < sizeof stop &&
                  ref.s[0].text_len >= l0 + l1 && memcmp(ref.s[0].text, t0, l0) == 0;
        if (ok) {
            memcpy(stop, t1, l1);
            stop[l1] = 0;
            const char *at = strstr(ref.s[0].text, stop);
            ok = at == ref.s[0].text + l0 && !strstr(at + 1, stop) && !memchr(stop, 0, l1);
            for (size_t k = 0; ok && k < ref.s[0].text_len; k++)
                ok = (unsigned char)ref.s[0].text[k] < 0x80;
        }
        if (!ok) {
            result_free(&ref);
            continue;
        }
        const char *stops[1] = {stop};
        q.stop = stops;
        q.n_stop = 1;
        q.stream = true;
        run1(e, &q, &r);
        assert_int_equal(r.s[0].finish, TRELLIS_FINISH_STOP);
        assert_int_equal(r.s[0].stop_index, 0);
        assert_int_equal(r.s[0].text_len, l0);
        result_free(&r);
        q.min_tokens = 12;
        run1(e, &q, &r);
        assert_int_equal(r.s[0].finish, TRELLIS_FINISH_LENGTH);
        assert_int_equal(r.s[0].stop_index, -1);
        assert_int_equal(r.s[0].text_len, ref.s[0].text_len);
        assert_memory_equal(r.s[0].text, ref.s[0].text, ref.s[0].text_len);
        result_free(&r);
        result_free(&ref);
        q.stop = NULL;
        q.n_stop = 0;
        q.stream = false;
        tested++;
    }
    assert_true(tested >= 1);
    assert_int_equal(f->bad, 0);
    expect_clean(e);
    trellis_engine_free(e);
}

static void test_logprobs_and_greedy(void **state) {
    (void)state;
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    int32_t prompt[20];
    rand_tokens(11, prompt, 20);
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 20;
    q.max_tokens = 10;
    q.temperature = 0;
    q.logprobs = true;
    q.top_logprobs = 5;
    q.stream = true;
    result r;
    run1(e, &q, &r);
    assert_non_null(r.s[0].lp);
    for (int i = 0; i < r.s[0].n_tokens; i++) {
        const trellis_logprob *l = &r.s[0].lp[i];
        assert_int_equal(l->token, r.s[0].tokens[i]);
        assert_int_equal(l->n_top, 5);
        assert_true(l->logprob <= 0.0f);
        /* greedy: the chosen token is the most likely one */
        assert_int_equal(l->top[0].token, l->token);
        assert_true(fabsf(l->top[0].logprob - l->logprob) < 1e-6f);
        for (int k = 1; k < 5; k++) assert_true(l->top[k].logprob <= l->top[k - 1].logprob);
    }
    result_free(&r);
    trellis_engine_free(e);
}

static void test_regex_constraint(void **state) {
    (void)state;
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    int32_t prompt[10];
    rand_tokens(5, prompt, 10);
    const char *rx = "[0-9]{3}-[a-z]{2,4}";
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 10;
    q.max_tokens = 40;
    q.regex = rx;
    q.n = 3;
    q.temperature = 1.0f;
    q.seed = 9;
    result r;
    run1(e, &q, &r);
    /* the engine told the forward which logits it reads (the fake poisons
     * the others, so a sample outside the regex would show it) */
    assert_true(f->masked_rows > 0);
    grammar *g;
    assert_int_equal(tr_grammar_compile_regex(rx, strlen(rx), NULL, &g, NULL), TR_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r.s[i].finish, TRELLIS_FINISH_STOP);
        assert_true(tr_grammar_matches(g, r.s[i].text, r.s[i].text_len));
    }
    tr_grammar_free(g);
    result_free(&r);
    /* a bad regex is rejected at submit */
    q.regex = "(ab";
    char err[256];
    assert_int_equal(trellis_submit(e, &q, NULL, err, sizeof err), TRELLIS_ERR_FORMAT);
    assert_true(strstr(err, "regex") != NULL);
    trellis_engine_free(e);
}

/* A constraint with forced_bytes but no rollback: half a jump-forward. */
static int half_fill(void *st, uint64_t *m, size_t n) {
    (void)st;
    memset(m, 0xff, n * sizeof *m);
    return 0;
}
static int half_accept(void *st, int32_t t) { (void)st, (void)t; return 0; }
static void half_free(void *st) { (void)st; }
static int half_forced(void *st, uint8_t *b, size_t cap, size_t *len) {
    (void)st, (void)b, (void)cap;
    *len = 0;
    return 0;
}

/* Jump-forward through the scheduler, on the fake model: a regex whose
 * long literal is forced after one sampled digit. Checks that the chunk
 * is cut at max_tokens (finish "length", the text a live prefix of the
 * language), that a stop string inside the forced text ends the sample
 * there, that forced tokens report logprob 0 and are counted, that the
 * forward passes drop, and that chunks split by a tiny chunk size and by
 * preemption under a tiny pool give the same tokens as a roomy engine. */
static void test_jump_forward_fake(void **state) {
    (void)state;
    const char *rx = "[0-9]: the quick brown fox jumps over the lazy dog, "
                     "and then [a-z]{2,6} again[.!]";
    grammar *g;
    assert_int_equal(tr_grammar_compile_regex(rx, strlen(rx), NULL, &g, NULL), TR_OK);
    fake *f;
    fake_cfg c = fake_default();
    trellis_engine *e = fake_engine(&c, &f);
    int32_t prompt[12];
    rand_tokens(77, prompt, 12);
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 12;
    q.regex = rx;
    q.temperature = 0.8f;
    q.seed = 3;
    q.logprobs = true;
    q.top_logprobs = 2;
    q.max_tokens = 64;
    trellis_stats s0, s1;
    stats_now(e, &s0);
    uint64_t fw0 = f->forwards;
    result full;
    run1(e, &q, &full);
    stats_now(e, &s1);
    uint64_t fw_jf = f->forwards - fw0;
    assert_int_equal(full.s[0].finish, TRELLIS_FINISH_STOP);
    assert_true(pcre_full_match(rx, full.s[0].text, full.s[0].text_len));
    int32_t forced = full.s[0].m.forced_tokens;
    assert_true(forced >= 8); /* the literal is ~10 tokens */
    assert_int_equal(s1.forced_tokens - s0.forced_tokens, (uint64_t)forced);
    assert_true(s1.jump_forwards > s0.jump_forwards);
    assert_true(s1.forward_passes_saved - s0.forward_passes_saved >= (uint64_t)forced - 1);
    assert_int_equal(full.s[0].m.completion_tokens, full.s[0].n_tokens);
    int zero_lp = 0;
    for (int i = 0; i < full.s[0].n_tokens; i++) {
        const trellis_logprob *l = &full.s[0].lp[i];
        assert_int_equal(l->token, full.s[0].tokens[i]);
        if (l->n_top == 0) {
            assert_true(l->logprob == 0.0f);
            zero_lp++;
        } else {
            /* sampled: alternatives among the allowed tokens (one when
             * the mask allows one) */
            assert_true(l->n_top >= 1 && l->n_top <= 2);
        }
    }
    assert_true(zero_lp >= forced);
    fprintf(stderr, "fake jump-forward: %d tokens (%d forced), %llu forwards\n",
            full.s[0].n_tokens, forced, (unsigned long long)fw_jf);

    /* without jump-forward: every token sampled, one forward each */
    q.no_jump_forward = true;
    fw0 = f->forwards;
    result nojf;
    run1(e, &q, &nojf);
    assert_true(pcre_full_match(rx, nojf.s[0].text, nojf.s[0].text_len));
    assert_int_equal(nojf.s[0].m.forced_tokens, 0);
    assert_true(f->forwards - fw0 >= fw_jf + (uint64_t)forced / 2);
    for (int i = 0; i < nojf.s[0].n_tokens; i++) assert_true(nojf.s[0].lp[i].n_top >= 1);
    result_free(&nojf);
    q.no_jump_forward = false;

    /* max_tokens in the middle of the forced run: cut there */
    for (int mt = 1; mt <= 6; mt++) {
        q.max_tokens = mt;
        result r;
        run1(e, &q, &r);
        assert_int_equal(r.s[0].finish, TRELLIS_FINISH_LENGTH);
        assert_int_equal(r.s[0].n_tokens, mt);
        assert_int_equal(r.s[0].m.completion_tokens, mt);
        /* the cut text can still be completed */
        assert_true(pcre_live_prefix(rx, r.s[0].text, r.s[0].text_len));
        /* one sampled digit, the rest forced */
        assert_int_equal(r.s[0].m.forced_tokens, mt - 1);
        result_free(&r);
    }
    q.max_tokens = 64;

    /* a stop string inside the forced text */
    const char *stop[] = {"brown"};
    q.stop = stop;
    q.n_stop = 1;
    result st;
    run1(e, &q, &st);
    assert_int_equal(st.s[0].finish, TRELLIS_FINISH_STOP);
    assert_int_equal(st.s[0].stop_index, 0);
    assert_int_equal(st.s[0].text_len, 13); /* "D: the quick " */
    assert_memory_equal(st.s[0].text + 1, ": the quick ", 12);
    assert_null(strstr(st.s[0].text, "brown"));
    assert_null(strstr(st.s[0].text, "bro"));
    result_free(&st);
    q.stop = NULL;
    q.n_stop = 0;
    expect_clean(e);
    trellis_engine_free(e);

    /* the same tokens when chunks are split and sequences preempted */
    enum { NJ = 10 };
    trellis_request qs[NJ];
    result ref[NJ], got[NJ];
    int32_t jprompts[NJ][12];
    for (int i = 0; i < NJ; i++) {
        qs[i] = q;
        rand_tokens(500 + (uint64_t)i, jprompts[i], 12);
        qs[i].tokens = jprompts[i];
        qs[i].logprobs = false;
        qs[i].top_logprobs = 0;
        qs[i].seed = 100 + (uint64_t)i;
        qs[i].n = 1 + i % 3;
    }
    e = fake_engine(&c, &f);
    for (int i = 0; i < NJ; i++) run1(e, &qs[i], &ref[i]);
    trellis_engine_free(e);
    fake_cfg tiny = c;
    tiny.page_size = 4;
    tiny.n_pages = (12 + 64 + 3) / 4; /* what one request needs */
    tiny.chunk = 3;
    tiny.max_batch = 16;
    e = fake_engine(&tiny, &f);
    for (int i = 0; i < NJ; i++) submit_ok(e, &qs[i], &got[i]);
    drain(e, got, NJ);
    assert_int_equal(f->bad, 0);
    trellis_stats ts;
    stats_now(e, &ts);
    fprintf(stderr, "fake jump-forward, tiny pool: %llu preemptions\n",
            (unsigned long long)ts.preemptions);
    assert_true(ts.preemptions > 0);
    for (int i = 0; i < NJ; i++) {
        for (int j = 0; j < qs[i].n; j++) {
            same_tokens(&ref[i], &got[i], j);
            assert_true(pcre_full_match(rx, got[i].s[j].text, got[i].s[j].text_len));
        }
        result_free(&ref[i]);
        result_free(&got[i]);
    }
    expect_clean(e);
    expect_all_free(e);

    /* half a jump-forward is refused at submit */
    static const trellis_constraint_ops half = {
        .fill_mask = half_fill, .accept = half_accept, .free = half_free,
        .forced_bytes = half_forced};
    trellis_request hq;
    trellis_request_default(&hq);
    hq.tokens = prompt;
    hq.n_tokens = 12;
    hq.constraint = &half;
    char err[256];
    assert_int_equal(trellis_submit(e, &hq, NULL, err, sizeof err),
                     TRELLIS_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "rollback"));
    trellis_engine_free(e);
    result_free(&full);
    tr_grammar_free(g);
}

static void test_rejections(void **state) {
    (void)state;
    fake *f;
    fake_cfg c = fake_default();
    c.n_pages = 20; /* 320 tokens */
    trellis_engine *e = fake_engine(&c, &f);
    char err[512];
    int32_t prompt[400];
    rand_tokens(1, prompt, 400);
    trellis_request q;
#define REJECT(code, frag)                                                  \
    do {                                                                    \
        err[0] = 0;                                                         \
        assert_int_equal(trellis_submit(e, &q, NULL, err, sizeof err), code); \
        if (!strstr(err, frag)) fprintf(stderr, "message: %s\n", err);      \
        assert_non_null(strstr(err, frag));                                 \
    } while (0)
    trellis_request_default(&q);
    q.prompt = "";
    REJECT(TRELLIS_ERR_INVALID_ARG, "empty");
    q.prompt = NULL;
    q.tokens = prompt;
    q.n_tokens = 0;
    REJECT(TRELLIS_ERR_INVALID_ARG, "empty");
    q.n_tokens = -3;
    REJECT(TRELLIS_ERR_INVALID_ARG, "token array");
    q.n_tokens = 10;
    q.max_tokens = -2;
    REJECT(TRELLIS_ERR_INVALID_ARG, "max_tokens is -2");
    q.max_tokens = 4;
    q.min_tokens = 5;
    REJECT(TRELLIS_ERR_INVALID_ARG, "min_tokens is 5");
    q.n_tokens = 300;
    q.max_tokens = -1; /* resolves to the 20 tokens the pool has left */
    q.min_tokens = 30;
    REJECT(TRELLIS_ERR_TOO_LONG, "min_tokens is 30");
    q.n_tokens = 10;
    q.min_tokens = 0;
    q.max_tokens = 5000; /* above the context (2048) */
    REJECT(TRELLIS_ERR_TOO_LONG, "context");
    q.max_tokens = 400;  /* fits the context, not the pool of 320 tokens */
    REJECT(TRELLIS_ERR_LIMIT, "KV pages");
    q.n_tokens = 330;
    q.max_tokens = -1;   /* as many as fit: none */
    REJECT(TRELLIS_ERR_TOO_LONG, "no room");
    q.n_tokens = 10;
    q.max_tokens = 10;
    q.n = 0;
    REJECT(TRELLIS_ERR_INVALID_ARG, "n is 0");
    q.n = 1;
    q.temperature = -1;
    REJECT(TRELLIS_ERR_INVALID_ARG, "temperature");
    q.temperature = 1;
    const char *bad_stop[1] = {""};
    q.stop = bad_stop;
    q.n_stop = 1;
    REJECT(TRELLIS_ERR_INVALID_ARG, "empty");
    const char *bad_utf8[1] = {"\xff"};
    q.stop = bad_utf8;
    REJECT(TRELLIS_ERR_INVALID_ARG, "UTF-8");
    q.stop = NULL;
    q.n_stop = 0;
    int32_t bad_tok = 49152;
    q.stop_tokens = &bad_tok;
    q.n_stop_tokens = 1;
    REJECT(TRELLIS_ERR_INVALID_ARG, "vocabulary");
    q.stop_tokens = NULL;
    q.n_stop_tokens = 0;
    prompt[3] = -5;
    REJECT(TRELLIS_ERR_INVALID_ARG, "vocabulary");
    prompt[3] = 100;
    q.prompt = "hello";
    REJECT(TRELLIS_ERR_INVALID_ARG, "exactly one");
    q.tokens = NULL;
    q.n_tokens = 0;
    q.prompt = "\xc3\x28";
    REJECT(TRELLIS_ERR_INVALID_ARG, "UTF-8");
    q.prompt = "hello";
    q.top_logprobs = 3;
    REJECT(TRELLIS_ERR_INVALID_ARG, "logprobs");
#undef REJECT
    /* the engine still works after all that */
    q.top_logprobs = 0;
    q.max_tokens = 5;
    result r;
    run1(e, &q, &r);
    assert_int_equal(r.s[0].n_tokens + (r.s[0].finish == TRELLIS_FINISH_STOP), 5);
    result_free(&r);
    /* a request using the whole pool exactly is fine */
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 300;
    q.max_tokens = 20;
    q.ignore_eos = true;
    run1(e, &q, &r);
    assert_int_equal(r.s[0].n_tokens, 20);
    result_free(&r);
    expect_all_free(e);
    trellis_engine_free(e);
}

/* Cancellation storm: many requests, random cancellations at random
 * times, a pool small enough to preempt; afterwards everything is free. */
static void test_cancel_storm(void **state) {
    (void)state;
    const int N = small_scale() ? 500 : 10000;
    fake *f;
    fake_cfg c = fake_default();
    c.n_pages = 64; /* 512 tokens: a handful of sequences at a time */
    c.page_size = 8;
    c.max_running = 24;
    c.max_batch = 128;
    c.chunk = 32;
    trellis_engine *e = fake_engine(&c, &f);
    result *rs = calloc((size_t)N, sizeof *rs);
    int32_t prefixes[4][96];
    for (int p = 0; p < 4; p++) rand_tokens(77 + (uint64_t)p, prefixes[p], 96);
    uint64_t rng = 42;
    int finished = 0, cancelled_events = 0, submitted = 0;
    int64_t outstanding = 0;
    for (int i = 0; i < N; i++) {
        rng = mix(rng);
        int32_t prompt[160];
        int pre = (int)(rng % 4), plen = 8 + (int)((rng >> 8) % 88);
        memcpy(prompt, prefixes[pre], (size_t)plen * sizeof(int32_t));
        int tail = 1 + (int)((rng >> 20) % 40);
        rand_tokens(rng, prompt + plen, tail);
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompt;
        q.n_tokens = plen + tail;
        q.max_tokens = 1 + (int)((rng >> 30) % 40);
        q.n = (rng >> 40) % 10 == 0 ? 3 : 1;
        q.stream = (rng >> 44) & 1;
        q.seed = rng;
        if ((rng >> 50) % 5 == 0) {
            static const char *stops[1] = {"e"};
            q.stop = stops;
            q.n_stop = 1;
        }
        submit_ok(e, &q, &rs[i]);
        submitted++;
        outstanding++;
        /* cancel a random recent request 30% of the time */
        rng = mix(rng);
        if (rng % 10 < 3) {
            int k = i - (int)((rng >> 10) % 50);
            if (k >= 0) trellis_cancel(e, rs[k].id);
        }
        if (rng % 97 == 0) trellis_cancel(e, 987654321ull); /* unknown id */
        /* keep the backlog bounded: drain what is there */
        for (;;) {
            trellis_event *ev;
            int got = outstanding > 200 ? trellis_wait(e, 60000, &ev)
                                        : trellis_poll(e, &ev);
            if (!got) {
                assert_true(outstanding <= 200); /* else: stuck */
                break;
            }
            uint64_t id = ev->request_id;
            int k = (int)(id - rs[0].id);
            assert_true(k >= 0 && k <= i && rs[k].id == id);
            if (ev->kind == TRELLIS_EVENT_DONE && ev->finish == TRELLIS_FINISH_CANCELLED)
                cancelled_events++;
            bool was = rs[k].request_done;
            collect(&rs[k], ev);
            if (!was && rs[k].request_done) {
                finished++;
                outstanding--;
            }
            trellis_event_free(ev);
        }
    }
    /* the rest */
    while (finished < submitted) {
        trellis_event *ev;
        assert_int_equal(trellis_wait(e, 120000, &ev), 1);
        int k = (int)(ev->request_id - rs[0].id);
        assert_true(k >= 0 && k < N);
        if (ev->kind == TRELLIS_EVENT_DONE && ev->finish == TRELLIS_FINISH_CANCELLED)
            cancelled_events++;
        bool was = rs[k].request_done;
        collect(&rs[k], ev);
        if (!was && rs[k].request_done) finished++;
        trellis_event_free(ev);
    }
    assert_int_equal(f->bad, 0);
    for (int i = 0; i < N; i++) {
        assert_true(rs[i].request_done);
        for (int j = 0; j < rs[i].n; j++) {
            assert_true(rs[i].s[j].done);
            assert_true(rs[i].s[j].finish == TRELLIS_FINISH_STOP ||
                        rs[i].s[j].finish == TRELLIS_FINISH_LENGTH ||
                        rs[i].s[j].finish == TRELLIS_FINISH_CANCELLED);
        }
        result_free(&rs[i]);
    }
    free(rs);
    assert_true(cancelled_events > N / 20);
    trellis_stats st;
    stats_now(e, &st);
    fprintf(stderr, "storm: %d requests, %d cancelled samples, %llu preemptions, "
                    "%llu steps, %llu admitted during a forward pass\n",
            N, cancelled_events, (unsigned long long)st.preemptions,
            (unsigned long long)st.steps, (unsigned long long)st.admitted_ahead);
    assert_true(st.preemptions > 0);
    /* with a queue this long, most admissions happen a step early, while
     * the previous forward pass runs (tr_sched_admit_ahead) */
    assert_true(st.admitted_ahead > 0);
    expect_clean(e);
    expect_all_free(e);
    trellis_engine_free(e);
}

/* Cancelling a long request frees its pages at the next step, and
 * trellis_engine_free with requests in flight leaks nothing. */
/* The event-loop contract of trellis.h: wake runs on the engine thread
 * (never the loop's) and only pokes a libuv loop (uv_async_send); the loop
 * thread drains with trellis_poll, only in the async callback, and cancels
 * from a timer. Every sample still gets exactly one DONE (collect checks
 * the order), only cancelled requests end CANCELLED, the loop ran no more
 * callbacks than there were sends, and the engine, freed from inside a
 * loop callback before the async handle closes, leaves every page free. */
typedef struct uv_run_ctx {
    uv_async_t async;
    uv_timer_t timer;
    trellis_engine *e;
    result *rs;
    bool *cancelled;
    int n, left;
    uint64_t rng;
    pthread_t loop_thread;
    uint64_t wakes, drains;   /* wakes: engine thread, atomically */
    int wake_on_loop_thread;  /* must stay 0 */
    int cancels;
} uv_run_ctx;

static void uvt_wake(void *user) {
    uv_run_ctx *c = user;
    if (pthread_equal(pthread_self(), c->loop_thread))
        __atomic_store_n(&c->wake_on_loop_thread, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&c->wakes, 1, __ATOMIC_RELAXED);
    uv_async_send(&c->async);
}

static void uvt_on_async(uv_async_t *h) {
    uv_run_ctx *c = h->data;
    c->drains++;
    trellis_event *ev;
    while (c->e && trellis_poll(c->e, &ev) == 1) {
        int k = (int)(ev->request_id - c->rs[0].id);
        assert_true(k >= 0 && k < c->n && c->rs[k].id == ev->request_id);
        if (ev->kind == TRELLIS_EVENT_DONE && ev->finish == TRELLIS_FINISH_CANCELLED)
            assert_true(c->cancelled[k]);
        bool was = c->rs[k].request_done;
        collect(&c->rs[k], ev);
        if (!was && c->rs[k].request_done) c->left--;
        trellis_event_free(ev);
    }
    if (c->e && c->left == 0) {
        expect_all_free(c->e);
        trellis_engine_free(c->e); /* joins the engine thread: no wake after */
        c->e = NULL;
        uv_close((uv_handle_t *)&c->async, NULL);
        uv_close((uv_handle_t *)&c->timer, NULL);
    }
}

static void uvt_on_timer(uv_timer_t *t) {
    uv_run_ctx *c = t->data;
    if (!c->e) return;
    c->rng = mix(c->rng);
    int k = (int)(c->rng % (uint64_t)c->n);
    if ((c->rng >> 32) % 3 == 0 && !c->rs[k].request_done) {
        c->cancelled[k] = true;
        c->cancels++;
        assert_int_equal(trellis_cancel(c->e, c->rs[k].id), 0);
    }
    if ((c->rng >> 40) % 16 == 0) trellis_cancel(c->e, 987654321ull); /* unknown: ignored */
}

static void test_uv_loop_fake(void **state) {
    (void)state;
    const int N = small_scale() ? 60 : 300;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    uv_run_ctx c = {.n = N, .left = N, .rng = 99, .loop_thread = pthread_self()};
    c.rs = calloc((size_t)N, sizeof *c.rs);
    c.cancelled = calloc((size_t)N, sizeof *c.cancelled);
    assert_non_null(c.rs);
    assert_non_null(c.cancelled);
    assert_int_equal(uv_async_init(&loop, &c.async, uvt_on_async), 0);
    assert_int_equal(uv_timer_init(&loop, &c.timer), 0);
    c.async.data = c.timer.data = &c;
    fake *f;
    fake_cfg cfg = fake_default();
    cfg.max_running = 16;
    cfg.wake = uvt_wake;
    cfg.wake_user = &c;
    c.e = fake_engine(&cfg, &f);
    f->delay_us = 300; /* requests last long enough to be cancelled */
    uint64_t rng = 5;
    for (int i = 0; i < N; i++) {
        rng = mix(rng);
        int32_t prompt[64];
        int plen = 4 + (int)(rng % 56);
        rand_tokens(rng, prompt, plen);
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompt;
        q.n_tokens = plen;
        q.max_tokens = 1 + (int)((rng >> 16) % 48);
        q.n = (rng >> 24) % 8 == 0 ? 3 : 1;
        q.stream = (rng >> 32) & 1;
        q.seed = rng;
        submit_ok(c.e, &q, &c.rs[i]);
        assert_int_equal(c.rs[i].id, c.rs[0].id + (uint64_t)i);
    }
    assert_int_equal(uv_timer_start(&c.timer, uvt_on_timer, 1, 1), 0);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0); /* ends: handles closed */
    assert_null(c.e);
    assert_int_equal(c.left, 0);
    for (int i = 0; i < N; i++) {
        assert_true(c.rs[i].request_done);
        assert_int_equal(c.rs[i].done, c.rs[i].n);
    }
    assert_int_equal(c.wake_on_loop_thread, 0);
    assert_true(c.drains >= 1);
    assert_true(c.drains <= c.wakes); /* a callback only after a send */
    assert_true(c.cancels > 0);
    fprintf(stderr, "uv: %d requests, %d cancels, %llu wakes, %llu drains\n", N, c.cancels,
            (unsigned long long)c.wakes, (unsigned long long)c.drains);
    assert_int_equal(uv_loop_close(&loop), 0);
    for (int i = 0; i < N; i++) result_free(&c.rs[i]);
    free(c.rs);
    free(c.cancelled);
}

static void test_cancel_running_and_shutdown(void **state) {
    (void)state;
    fake *f;
    fake_cfg c = fake_default();
    c.chunk = 8;
    c.max_batch = 16; /* a 1,000-token prompt takes many steps */
    trellis_engine *e = fake_engine(&c, &f);
    f->delay_us = 1000; /* ~600 steps: still running when cancelled */
    int32_t prompt[1000];
    rand_tokens(8, prompt, 1000);
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 1000;
    q.max_tokens = 500;
    q.ignore_eos = true;
    result r;
    submit_ok(e, &q, &r);
    for (int i = 0; i < 200; i++) {
        trellis_stats st;
        trellis_get_stats(e, &st);
        if (st.pages_used > 0) break;
        usleep(1000);
    }
    assert_int_equal(trellis_cancel(e, r.id), 0);
    drain(e, &r, 1);
    assert_int_equal(r.s[0].finish, TRELLIS_FINISH_CANCELLED);
    assert_int_equal(tr_engine_debug_check(e), TR_OK);
    result_free(&r);
    /* leave requests running and free the engine: ASan sees no leak */
    for (int i = 0; i < 5; i++) submit_ok(e, &q, &r);
    trellis_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_and_stream),
        cmocka_unit_test(test_invariance_fake),
        cmocka_unit_test(test_random_configs),
        cmocka_unit_test(test_preemption_fake),
        cmocka_unit_test(test_prefix_sharing),
        cmocka_unit_test(test_flush_publishes_stats),
        cmocka_unit_test(test_fork_n),
        cmocka_unit_test(test_stops),
        cmocka_unit_test(test_logprobs_and_greedy),
        cmocka_unit_test(test_prefill_only),
        cmocka_unit_test(test_min_tokens),
        cmocka_unit_test(test_regex_constraint),
        cmocka_unit_test(test_jump_forward_fake),
        cmocka_unit_test(test_rejections),
        cmocka_unit_test(test_cancel_storm),
        cmocka_unit_test(test_cancel_running_and_shutdown),
        cmocka_unit_test(test_uv_loop_fake),
    };
    tr_test_filter_from_env(); /* TRELLIS_TEST_FILTER, TRELLIS_TEST_SKIP */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
