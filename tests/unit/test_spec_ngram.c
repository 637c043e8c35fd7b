/* test_spec_ngram.c — runtime/spec/spec.h's n-gram proposer: proposals
 * against a naive search (the most recent earlier occurrence of the
 * longest suffix n-gram, n from max_n down to min_n, then a last token
 * seen exactly once before) on random sequences over small and large
 * alphabets, appended in random pieces and truncated now and then; the draft length's growth and fall; switching off and back on;
 * bad options refused. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"

#include "base/hash.h"
#include "runtime/spec/spec.h"

static int32_t follow(const int32_t *t, int32_t len, int32_t e, int32_t want, int32_t *out) {
    int32_t k = 0;
    for (int32_t p = e + 1; p < len && k < want; p++) out[k++] = t[p];
    return k;
}

/* The contract's proposal, by brute force; *by_unique: made by the
 * unique-token fallback. */
static int32_t naive(const int32_t *t, int32_t len, int32_t min_n, int32_t max_n, bool unique,
                     int32_t want, int32_t *out, bool *by_unique) {
    *by_unique = false;
    for (int32_t n = max_n; n >= min_n; n--) {
        if (len < n + 1) continue;
        for (int32_t e = len - 2; e >= n - 1; e--)
            if (memcmp(t + e - n + 1, t + len - n, (size_t)n * sizeof *t) == 0)
                return follow(t, len, e, want, out);
    }
    if (!unique || min_n == 1 || len < 2) return 0;
    int32_t seen = 0, at = -1;
    for (int32_t e = len - 2; e >= 0; e--)
        if (t[e] == t[len - 1] && seen++ == 0) at = e;
    if (seen != 1) return 0;
    *by_unique = true;
    return follow(t, len, at, want, out);
}

static void test_against_naive(void **state) {
    (void)state;
    uint64_t rng = 7;
    int proposals = 0, unique_ones = 0;
    for (int round = 0; round < 200; round++) {
        tr_ngram_options o;
        tr_ngram_options_default(&o);
        o.min_n = 1 + (int32_t)(tr_splitmix64(rng++) % 3);
        o.max_n = o.min_n + (int32_t)(tr_splitmix64(rng++) % 3);
        o.start = o.max_draft = 6;
        o.off_below = 0; /* never off: every call is compared */
        o.unique_1gram = round % 3 != 2;
        tr_ngram *g;
        tr_diag d = {0};
        assert_int_equal(tr_ngram_new(&o, &g, &d), TR_OK);
        /* large alphabets: tokens seen once */
        int32_t alphabet = 2 + (int32_t)(tr_splitmix64(rng++) % (round % 4 == 3 ? 400 : 6));
        int32_t seq[600];
        int32_t len = 0;
        while (len < 500) {
            int32_t piece[8];
            int32_t k = 1 + (int32_t)(tr_splitmix64(rng++) % 8);
            for (int32_t i = 0; i < k; i++) piece[i] = 100 + (int32_t)(tr_splitmix64(rng++) % (uint64_t)alphabet);
            assert_int_equal(tr_ngram_append(g, piece, k), TR_OK);
            memcpy(seq + len, piece, (size_t)k * sizeof *piece);
            len += k;
            if (tr_splitmix64(rng++) % 10 == 0) { /* a truncation now and then */
                len -= (int32_t)(tr_splitmix64(rng++) % (uint64_t)(len < 5 ? len : 5));
                tr_ngram_truncate(g, len);
            }
            assert_int_equal(tr_ngram_length(g), len);
            int32_t got[8], want[8];
            int32_t ng = tr_ngram_propose(g, got, 8);
            bool by_unique;
            int32_t nw = naive(seq, len, o.min_n, o.max_n, o.unique_1gram, 6, want, &by_unique);
            if (ng != nw || memcmp(got, want, (size_t)ng * sizeof *got) != 0)
                fail_msg("round %d len %d: got %d tokens, want %d", round, len, ng, nw);
            proposals += ng > 0;
            unique_ones += ng > 0 && by_unique;
        }
        tr_ngram_free(g);
    }
    assert_true(proposals > 10000);
    assert_true(unique_ones > 500);
}

static void test_copying_and_lengths(void **state) {
    (void)state;
    tr_ngram *g;
    tr_diag d = {0};
    assert_int_equal(tr_ngram_new(NULL, &g, &d), TR_OK);
    int32_t doc[] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    assert_int_equal(tr_ngram_append(g, doc, 12), TR_OK);
    int32_t out[32];
    assert_int_equal(tr_ngram_propose(g, out, 32), 0); /* nothing repeats yet */
    int32_t copy[] = {7, 8};
    assert_int_equal(tr_ngram_append(g, copy, 2), TR_OK);
    assert_int_equal(tr_ngram_draft_length(g), 4);
    assert_int_equal(tr_ngram_propose(g, out, 32), 4);
    assert_int_equal(out[0], 9);
    assert_int_equal(out[3], 12);
    assert_int_equal(tr_ngram_propose(g, out, 2), 2); /* capped by the caller */
    tr_ngram_feedback(g, 4, 4); /* whole: grows by 2 */
    assert_int_equal(tr_ngram_draft_length(g), 6);
    tr_ngram_feedback(g, 6, 6);
    assert_int_equal(tr_ngram_draft_length(g), 8); /* max_draft */
    tr_ngram_feedback(g, 8, 8);
    assert_int_equal(tr_ngram_draft_length(g), 8);
    tr_ngram_feedback(g, 8, 2); /* falls to accepted + 1 */
    assert_int_equal(tr_ngram_draft_length(g), 3);
    tr_ngram_feedback(g, 3, 4); /* nonsense outcome: ignored */
    assert_int_equal(tr_ngram_draft_length(g), 3);
    tr_ngram_free(g);
}

/* After feedback the copy resumes where it was in the text: the first
 * occurrence at or after the cursor wins over the most recent one. */
static void test_cursor(void **state) {
    (void)state;
    tr_ngram *g;
    tr_diag d = {0};
    assert_int_equal(tr_ngram_new(NULL, &g, &d), TR_OK);
    int32_t text[] = {10, 11, 12, 13, 14, 15, 16, 17, 18, 12, 13, 30, 31, 32, 40, 10, 11};
    assert_int_equal(tr_ngram_append(g, text, 17), TR_OK);
    int32_t out[8];
    assert_int_equal(tr_ngram_propose(g, out, 8), 4); /* (10 11), from position 2 */
    assert_int_equal(out[0], 12);
    tr_ngram_feedback(g, 4, 1); /* 12 kept: the cursor is at 3 */
    int32_t next[] = {12, 88, 12, 13}; /* a departure, then (12 13) again */
    assert_int_equal(tr_ngram_append(g, next, 4), TR_OK);
    assert_int_equal(tr_ngram_propose(g, out, 8), 2); /* draft length: 1 + 1 */
    assert_int_equal(out[0], 14); /* not 30, after the later (12 13) */
    assert_int_equal(out[1], 15);
    /* cutting the sequence forgets the cursor: the most recent again */
    tr_ngram_truncate(g, 20);
    int32_t again = 13;
    assert_int_equal(tr_ngram_append(g, &again, 1), TR_OK);
    assert_int_equal(tr_ngram_propose(g, out, 8), 2);
    assert_int_equal(out[0], 30);
    tr_ngram_free(g);
}

static void test_off_and_back(void **state) {
    (void)state;
    tr_ngram *g;
    tr_diag d = {0};
    assert_int_equal(tr_ngram_new(NULL, &g, &d), TR_OK);
    int32_t rep[] = {1, 2, 1, 2, 1, 2, 1, 2};
    assert_int_equal(tr_ngram_append(g, rep, 8), TR_OK);
    int32_t out[8];
    int calls = 0;
    while (!tr_ngram_is_off(g) && calls < 100) {
        int32_t k = tr_ngram_propose(g, out, 8);
        assert_true(k > 0);
        tr_ngram_feedback(g, k, 0); /* always rejected */
        calls++;
    }
    assert_true(tr_ngram_is_off(g));
    assert_true(calls >= 8); /* not before 8 proposals */
    int off = 0;
    while (tr_ngram_propose(g, out, 8) == 0) off++;
    assert_int_equal(off, 16); /* the first backoff */
    /* rejected again at once: off twice as long */
    for (int i = 0; i < 100 && !tr_ngram_is_off(g); i++) {
        int32_t k = tr_ngram_propose(g, out, 8);
        tr_ngram_feedback(g, k, 0);
    }
    off = 0;
    while (tr_ngram_propose(g, out, 8) == 0 && off < 1000) off++;
    assert_int_equal(off, 32);
    tr_ngram_free(g);
}

static void test_bad_options(void **state) {
    (void)state;
    tr_ngram_options o;
    tr_ngram *g = NULL;
    tr_diag d = {0};
    const struct {
        int field;
        int32_t v;
    } bad[] = {{0, 0}, {1, TR_NGRAM_MAX_N + 1}, {2, 0}, {3, TR_NGRAM_MAX_DRAFT + 1}, {4, -1},
               {5, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tr_ngram_options_default(&o);
        int32_t *f[] = {&o.min_n, &o.max_n, &o.start, &o.max_draft, &o.grow, &o.backoff};
        *f[bad[i].field] = bad[i].v;
        assert_int_equal(tr_ngram_new(&o, &g, &d), TR_ERR_INVALID_ARG);
        assert_null(g);
        assert_true(d.message[0] != 0);
    }
    tr_ngram_options_default(&o);
    o.off_below = 1.5f;
    assert_int_equal(tr_ngram_new(&o, &g, &d), TR_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_naive),
        cmocka_unit_test(test_copying_and_lengths),
        cmocka_unit_test(test_cursor),
        cmocka_unit_test(test_off_and_back),
        cmocka_unit_test(test_bad_options),
    };
    tr_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
