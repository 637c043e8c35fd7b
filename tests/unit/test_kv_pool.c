/* test_kv_pool.c — the KV page pool (radix/kv_pool.h): allocation, reference
 * counts, free/locked/cached accounting, exhaustion, argument errors and
 * allocation failure of the pool's own bookkeeping. tr_kv_pool_check runs
 * after every mutating call. The tree-facing states (cached, pinned) are
 * exercised through the radix tree in test_radix.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "radix/radix.h"

#define OK(expr) assert_int_equal((expr), TR_OK)

static void expect_counts(const kv_pool *p, int32_t n_free, int32_t n_locked,
                          int32_t n_cached) {
    kv_pool_stats s;
    tr_kv_pool_stats_get(p, &s);
    assert_int_equal(s.n_free, n_free);
    assert_int_equal(s.n_locked, n_locked);
    assert_int_equal(s.n_cached, n_cached);
    assert_int_equal(s.n_free + s.n_locked + s.n_cached, s.n_pages);
    assert_int_equal(tr_kv_pool_n_free(p), n_free);
    OK(tr_kv_pool_check(p));
}

static void test_new_rejects_bad_args(void **state) {
    (void)state;
    kv_pool *p = (kv_pool *)0x1;
    assert_int_equal(tr_kv_pool_new(0, 16, NULL, &p), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_kv_pool_new(-5, 16, NULL, &p), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_kv_pool_new(8, 0, NULL, &p), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_kv_pool_new(8, 16, NULL, NULL), TR_ERR_INVALID_ARG);
    radix_allocator half = {NULL, tr_radix_allocator_libc.free, NULL};
    assert_int_equal(tr_kv_pool_new(8, 16, &half, &p), TR_ERR_INVALID_ARG);
    assert_ptr_equal(p, (kv_pool *)0x1); /* untouched on failure */
}

static void test_alloc_free_accounting(void **state) {
    (void)state;
    kv_pool *p;
    OK(tr_kv_pool_new(10, 16, NULL, &p));
    assert_int_equal(tr_kv_pool_n_pages(p), 10);
    assert_int_equal(tr_kv_pool_page_size(p), 16);
    expect_counts(p, 10, 0, 0);

    int32_t a[4];
    OK(tr_kv_pool_alloc(p, 4, a));
    /* A fresh pool hands out 0, 1, 2, ... */
    for (int i = 0; i < 4; i++) {
        assert_int_equal(a[i], i);
        assert_int_equal(tr_kv_pool_refcount(p, a[i]), 1);
        assert_int_equal(tr_kv_pool_page_state(p, a[i]), KV_PAGE_LOCKED);
        assert_false(tr_kv_pool_page_in_tree(p, a[i]));
    }
    expect_counts(p, 6, 4, 0);
    assert_int_equal(tr_kv_pool_page_state(p, 9), KV_PAGE_FREE);

    OK(tr_kv_pool_alloc(p, 0, NULL)); /* zero pages is fine */
    expect_counts(p, 6, 4, 0);

    OK(tr_kv_pool_unref(p, a[1]));
    expect_counts(p, 7, 3, 0);
    assert_int_equal(tr_kv_pool_refcount(p, a[1]), 0);
    assert_int_equal(tr_kv_pool_page_state(p, a[1]), KV_PAGE_FREE);

    /* LIFO: the page just freed comes back first. */
    int32_t b;
    OK(tr_kv_pool_alloc(p, 1, &b));
    assert_int_equal(b, a[1]);
    expect_counts(p, 6, 4, 0);

    int32_t all[4] = {a[0], b, a[2], a[3]};
    OK(tr_kv_pool_unref_n(p, all, 4));
    expect_counts(p, 10, 0, 0);

    kv_pool_stats s;
    tr_kv_pool_stats_get(p, &s);
    assert_int_equal(s.pages_allocated, 5);
    assert_int_equal(s.pages_freed, 5);
    assert_int_equal(s.min_free, 6);
    tr_kv_pool_free(p);
}

static void test_refcounts(void **state) {
    (void)state;
    kv_pool *p;
    OK(tr_kv_pool_new(4, 1, NULL, &p)); /* page size 1 is valid */
    int32_t x;
    OK(tr_kv_pool_alloc(p, 1, &x));
    OK(tr_kv_pool_ref(p, x));
    OK(tr_kv_pool_ref(p, x));
    assert_int_equal(tr_kv_pool_refcount(p, x), 3);
    expect_counts(p, 3, 1, 0);
    OK(tr_kv_pool_unref(p, x));
    OK(tr_kv_pool_unref(p, x));
    assert_int_equal(tr_kv_pool_refcount(p, x), 1);
    expect_counts(p, 3, 1, 0); /* still held */
    OK(tr_kv_pool_unref(p, x));
    expect_counts(p, 4, 0, 0);

    /* A dropped page can be neither unreferenced nor referenced again. */
    assert_int_equal(tr_kv_pool_unref(p, x), TR_ERR_STATE);
    assert_int_equal(tr_kv_pool_ref(p, x), TR_ERR_STATE);
    expect_counts(p, 4, 0, 0);

    /* Ids outside the pool. */
    assert_int_equal(tr_kv_pool_ref(p, -1), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_kv_pool_ref(p, 4), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_kv_pool_unref(p, 4), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_kv_pool_page_state(p, 4), KV_PAGE_INVALID);
    assert_int_equal(tr_kv_pool_refcount(p, -3), -1);
    assert_false(tr_kv_pool_page_in_tree(p, 99));
    tr_kv_pool_free(p);
}

static void test_unref_n_all_or_nothing(void **state) {
    (void)state;
    kv_pool *p;
    OK(tr_kv_pool_new(8, 4, NULL, &p));
    int32_t a[3];
    OK(tr_kv_pool_alloc(p, 3, a));
    OK(tr_kv_pool_ref(p, a[0])); /* a[0] has 2 refs */

    /* a[1] listed twice but owned once: nothing is dropped. */
    int32_t bad[3] = {a[0], a[1], a[1]};
    assert_int_equal(tr_kv_pool_unref_n(p, bad, 3), TR_ERR_STATE);
    assert_int_equal(tr_kv_pool_refcount(p, a[0]), 2);
    assert_int_equal(tr_kv_pool_refcount(p, a[1]), 1);
    expect_counts(p, 5, 3, 0);

    int32_t bad_id[2] = {a[2], 8};
    assert_int_equal(tr_kv_pool_unref_n(p, bad_id, 2), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_kv_pool_refcount(p, a[2]), 1);
    expect_counts(p, 5, 3, 0);

    /* a[0] listed twice and owned twice: fine. */
    int32_t good[4] = {a[0], a[1], a[0], a[2]};
    OK(tr_kv_pool_unref_n(p, good, 4));
    expect_counts(p, 8, 0, 0);
    assert_int_equal(tr_kv_pool_unref_n(p, NULL, 1), TR_ERR_INVALID_ARG);
    OK(tr_kv_pool_unref_n(p, NULL, 0));
    tr_kv_pool_free(p);
}

static void test_exhaustion_is_clean(void **state) {
    (void)state;
    kv_pool *p;
    OK(tr_kv_pool_new(5, 16, NULL, &p));
    int32_t a[6];
    /* More than the pool holds: refused, nothing taken. */
    assert_int_equal(tr_kv_pool_alloc(p, 6, a), TR_ERR_FULL);
    expect_counts(p, 5, 0, 0);
    OK(tr_kv_pool_alloc(p, 3, a));
    /* 3 of 5 taken; 3 more do not fit: all or nothing. */
    assert_int_equal(tr_kv_pool_alloc(p, 3, a + 3), TR_ERR_FULL);
    expect_counts(p, 2, 3, 0);
    OK(tr_kv_pool_alloc(p, 2, a + 3));
    expect_counts(p, 0, 5, 0);
    int32_t extra = -7;
    assert_int_equal(tr_kv_pool_alloc(p, 1, &extra), TR_ERR_FULL);
    assert_int_equal(extra, -7);
    expect_counts(p, 0, 5, 0);
    kv_pool_stats s;
    tr_kv_pool_stats_get(p, &s);
    assert_int_equal(s.alloc_full, 3);
    assert_int_equal(s.min_free, 0);
    /* Every id handed out is distinct and in range. */
    int seen[5] = {0};
    for (int i = 0; i < 5; i++) {
        assert_true(a[i] >= 0 && a[i] < 5);
        assert_int_equal(seen[a[i]]++, 0);
    }
    /* Freeing one makes exactly one available again. */
    OK(tr_kv_pool_unref(p, a[2]));
    OK(tr_kv_pool_alloc(p, 1, &extra));
    assert_int_equal(extra, a[2]);
    assert_int_equal(tr_kv_pool_alloc(p, -1, &extra), TR_ERR_INVALID_ARG);
    OK(tr_kv_pool_unref_n(p, a, 5));
    expect_counts(p, 5, 0, 0);
    tr_kv_pool_free(p);
}

/* An allocator that fails the k-th call (0-based) and counts live blocks. */
typedef struct failing_alloc {
    int calls;
    int fail_at;
    int live;
} failing_alloc;

static void *fa_alloc(void *user, size_t size) {
    failing_alloc *fa = user;
    if (fa->calls++ == fa->fail_at) return NULL;
    void *p = malloc(size);
    if (p) fa->live++;
    return p;
}
static void fa_free(void *user, void *ptr) {
    failing_alloc *fa = user;
    if (ptr) fa->live--;
    free(ptr);
}

static void test_new_allocation_failure(void **state) {
    (void)state;
    int failures = 0;
    for (int k = 0;; k++) {
        failing_alloc fa = {0, k, 0};
        radix_allocator a = {fa_alloc, fa_free, &fa};
        kv_pool *p = NULL;
        tr_status st = tr_kv_pool_new(64, 16, &a, &p);
        if (st == TR_ERR_NOMEM) {
            assert_null(p);
            assert_int_equal(fa.live, 0); /* nothing leaked */
            failures++;
            continue;
        }
        OK(st);
        expect_counts(p, 64, 0, 0);
        tr_kv_pool_free(p);
        assert_int_equal(fa.live, 0);
        break;
    }
    assert_true(failures >= 1);
}

static void test_random_against_model(void **state) {
    (void)state;
    /* Random alloc/ref/unref checked against a plain array of counts. */
    enum { N = 37 };
    kv_pool *p;
    OK(tr_kv_pool_new(N, 8, NULL, &p));
    int64_t model[N] = {0};
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int step = 0; step < 20000; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(rng >> 33);
        int32_t page = (int32_t)(r % N);
        switch ((r >> 8) % 3) {
        case 0: {
            int32_t want = (int32_t)((r >> 12) % 5), got[5];
            int32_t n_free = 0;
            for (int i = 0; i < N; i++) n_free += model[i] == 0;
            tr_status st = tr_kv_pool_alloc(p, want, got);
            if (want > n_free) {
                assert_int_equal(st, TR_ERR_FULL);
            } else {
                OK(st);
                for (int i = 0; i < want; i++) {
                    assert_int_equal(model[got[i]], 0);
                    model[got[i]] = 1;
                }
            }
            break;
        }
        case 1:
            assert_int_equal(tr_kv_pool_ref(p, page),
                             model[page] ? TR_OK : TR_ERR_STATE);
            if (model[page]) model[page]++;
            break;
        default:
            assert_int_equal(tr_kv_pool_unref(p, page),
                             model[page] ? TR_OK : TR_ERR_STATE);
            if (model[page]) model[page]--;
            break;
        }
        int32_t n_free = 0;
        for (int i = 0; i < N; i++) {
            assert_int_equal(tr_kv_pool_refcount(p, i), model[i]);
            n_free += model[i] == 0;
        }
        expect_counts(p, n_free, N - n_free, 0);
    }
    for (int i = 0; i < N; i++)
        while (model[i]--) OK(tr_kv_pool_unref(p, i));
    expect_counts(p, N, 0, 0);
    tr_kv_pool_free(p);
}

static void test_dump(void **state) {
    (void)state;
    kv_pool *p;
    OK(tr_kv_pool_new(3, 2, NULL, &p));
    int32_t a;
    OK(tr_kv_pool_alloc(p, 1, &a));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    tr_kv_pool_dump(p, f);
    fclose(f);
    assert_non_null(strstr(buf, "page 0 ref=1"));
    assert_non_null(strstr(buf, "free list (top last): 2 1"));
    free(buf);
    tr_kv_pool_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_rejects_bad_args),
        cmocka_unit_test(test_alloc_free_accounting),
        cmocka_unit_test(test_refcounts),
        cmocka_unit_test(test_unref_n_all_or_nothing),
        cmocka_unit_test(test_exhaustion_is_clean),
        cmocka_unit_test(test_new_allocation_failure),
        cmocka_unit_test(test_random_against_model),
        cmocka_unit_test(test_dump),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
