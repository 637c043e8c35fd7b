/* test_radix_units.c — the radix tree's units for windowed KV
 * (radix/radix_tree.h, "Units (windowed KV)"): W page ids per page slot,
 * ids[slot * W + u]; unit u with window 0 is global (pinned by locks,
 * never -1), with window > 0 windowed (never pinned, a sequence holds its
 * own reference on each windowed id in its window, -1 = a hole).
 *
 * Checks:
 *  1. tr_radix_tree_new_units rejects bad shapes (no unit, too many, no
 *     global unit, a negative window, no windows for W > 1).
 *  2. Ownership after insert and lock: global ids pinned while locked,
 *     windowed ids held by tree + caller and never pinned (cached once
 *     the caller lets go, even in a locked node).
 *  3. Holes: a match is shortened to the longest L whose windows hold no
 *     hole, ending in the right node (mid-node, an ancestor, or nothing);
 *     windows that are not multiples of the page size, by hand.
 *  4. Filling holes and windowed duplicates on a second insert.
 *  5. Bad ids (a global -1, windowed ids in the tree elsewhere, listed
 *     twice, free, below -1) are refused with nothing changed.
 *  6. Eviction: unlocked nodes first, then windowed ids only the tree
 *     holds are stripped from locked nodes (never a global id, never an id
 *     a caller holds); matches shrink accordingly.
 *  7. Splits with W = 3 keep every slot's ids.
 *  8. Random operations (start = match + lock + reference the windowed ids
 *     in the window, prefill, insert, extend, let windowed ids that left
 *     the window go, finish, abort, query, evict, flush) at page sizes 2, 3
 *     and 4 with windows {0, 4, 8}, against a naive model (cached prefix ->
 *     its slot's W ids): every match (length, ids, node), every insert
 *     (rewritten ids, inserted / duplicate counts) and the exact reference
 *     count and tree membership of every page after every operation; at
 *     the end, with every sequence gone and the tree flushed, every page is
 *     free and no block is left.
 * tr_radix_tree_check runs after every mutation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "radix/radix.h"
#include "tests/unit/radix_test_util.h"

#define OK(expr) assert_int_equal((expr), TR_OK)

/* ---- helpers ---- */

static uint64_t rng_next(uint64_t *s) {
    /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint32_t rng_below(uint64_t *s, uint32_t n) {
    return (uint32_t)(rng_next(s) % n);
}


static char *tree_dump(const radix_tree *t) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    tr_radix_tree_dump(t, f);
    fclose(f);
    return buf;
}

static void check_all(const radix_tree *t) {
    OK(tr_radix_tree_check(t));
    OK(tr_kv_pool_check(tr_radix_tree_pool(t)));
}

static radix_tree_stats stats(const radix_tree *t) {
    radix_tree_stats s;
    tr_radix_tree_stats_get(t, &s);
    return s;
}

typedef struct env {
    test_alloc ta;
    radix_allocator a;
    kv_pool *pool;
    radix_tree *t;
    int32_t ps, W;
} env;

static env *env_new(int32_t n_pages, int32_t ps, int32_t W, const int32_t *win) {
    env *e = calloc(1, sizeof *e);
    assert_non_null(e);
    e->ta.fail_at = -1;
    e->a = (radix_allocator){ta_alloc, ta_free, &e->ta};
    OK(tr_kv_pool_new(n_pages, ps, &e->a, &e->pool));
    OK(tr_radix_tree_new_units(e->pool, &e->a, W, win, &e->t));
    assert_int_equal(tr_radix_tree_units(e->t), W);
    e->ps = ps;
    e->W = W;
    check_all(e->t);
    return e;
}

/* Everything went back: every page free, no node, no tree byte, no block. */
static void env_free_all_free(env *e) {
    check_all(e->t);
    radix_tree_stats s = stats(e->t);
    assert_int_equal(s.n_nodes, 0);
    assert_int_equal(s.n_namespaces, 0);
    assert_int_equal(s.n_tree_pages, 0);
    assert_int_equal(s.bytes, 0);
    assert_int_equal(tr_kv_pool_n_free(e->pool), tr_kv_pool_n_pages(e->pool));
    tr_radix_tree_free(e->t);
    tr_kv_pool_free(e->pool);
    assert_int_equal(e->ta.live, 0);
    free(e);
}

/* The caller lets windowed id *id go (it left the window): one unref and
 * the array says -1. */
static void let_go(env *e, int32_t *id) {
    OK(tr_kv_pool_unref(e->pool, *id));
    *id = -1;
}

/* One match, checked: n_pages == want (and n_tokens), the returned node
 * (want_node, or NULL when want == 0), hit/miss counters, and the page ids
 * of the first want slots against want_ids (may be NULL). Returns the
 * node. */
static radix_node *expect_match(env *e, uint64_t ns, const int32_t *tok, int32_t n,
                                int32_t want, const radix_node *want_node,
                                const int32_t *want_ids) {
    radix_tree_stats s0 = stats(e->t);
    int32_t got[256];
    for (int i = 0; i < 256; i++) got[i] = -7;
    radix_match m;
    OK(tr_radix_tree_match(e->t, ns, tok, n, got, &m));
    check_all(e->t);
    assert_int_equal(m.n_pages, want);
    assert_int_equal(m.n_tokens, want * e->ps);
    if (want == 0) assert_null(m.node);
    else if (want_node) assert_ptr_equal(m.node, want_node);
    else assert_non_null(m.node);
    if (want_ids && want > 0)
        assert_memory_equal(got, want_ids, sizeof(int32_t) * (size_t)(want * e->W));
    radix_tree_stats s1 = stats(e->t);
    assert_int_equal(s1.hit_tokens - s0.hit_tokens, (uint64_t)(want * e->ps));
    assert_int_equal(s1.miss_tokens - s0.miss_tokens, (uint64_t)(n - want * e->ps));
    return m.node;
}

/* The node's tokens from its namespace root: the length, checked against
 * tok[0..len). */
static int32_t node_prefix_len(env *e, const radix_node *x, const int32_t *tok) {
    int32_t buf[256];
    int32_t len = tr_radix_node_prefix(e->t, x, buf, 256);
    assert_true(len >= 0);
    if (tok) assert_memory_equal(buf, tok, sizeof(int32_t) * (size_t)len);
    return len;
}

/* ---- 1. constructor ---- */

static void test_new_units_arguments(void **state) {
    (void)state;
    kv_pool *pool;
    OK(tr_kv_pool_new(8, 4, NULL, &pool));
    radix_tree *sentinel = (radix_tree *)(uintptr_t)0x1234;
    radix_tree *t = sentinel;
    const int32_t w_ok[2] = {0, 8}, w_noglobal[2] = {8, 4}, w_neg[2] = {0, -1},
                  w_neg_first[3] = {-4, 0, 8};
    int32_t w_big[TR_RADIX_MAX_UNITS + 1];
    for (int i = 0; i <= TR_RADIX_MAX_UNITS; i++) w_big[i] = i % 2 ? 16 : 0;

    assert_int_equal(tr_radix_tree_new_units(pool, NULL, 0, w_ok, &t), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_radix_tree_new_units(pool, NULL, -1, w_ok, &t), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_radix_tree_new_units(pool, NULL, TR_RADIX_MAX_UNITS + 1, w_big, &t),
                     TR_ERR_INVALID_ARG);
    assert_int_equal(tr_radix_tree_new_units(pool, NULL, 2, w_noglobal, &t), TR_ERR_INVALID_ARG);
    const int32_t w_one_windowed[1] = {8};
    assert_int_equal(tr_radix_tree_new_units(pool, NULL, 1, w_one_windowed, &t),
                     TR_ERR_INVALID_ARG);
    assert_int_equal(tr_radix_tree_new_units(pool, NULL, 2, w_neg, &t), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_radix_tree_new_units(pool, NULL, 3, w_neg_first, &t),
                     TR_ERR_INVALID_ARG);
    assert_int_equal(tr_radix_tree_new_units(pool, NULL, 2, NULL, &t), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_radix_tree_new_units(NULL, NULL, 2, w_ok, &t), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_radix_tree_new_units(pool, NULL, 2, w_ok, NULL), TR_ERR_INVALID_ARG);
    assert_ptr_equal(t, sentinel); /* untouched by every failure */

    /* The valid shapes. */
    OK(tr_radix_tree_new_units(pool, NULL, 1, NULL, &t));
    assert_int_equal(tr_radix_tree_units(t), 1);
    OK(tr_radix_tree_check(t));
    tr_radix_tree_free(t);
    OK(tr_radix_tree_new_units(pool, NULL, 2, w_ok, &t));
    assert_int_equal(tr_radix_tree_units(t), 2);
    OK(tr_radix_tree_check(t));
    tr_radix_tree_free(t);
    OK(tr_radix_tree_new_units(pool, NULL, TR_RADIX_MAX_UNITS, w_big, &t));
    assert_int_equal(tr_radix_tree_units(t), TR_RADIX_MAX_UNITS);
    OK(tr_radix_tree_check(t));
    tr_radix_tree_free(t);
    tr_kv_pool_free(pool);
}

/* ---- 2. ownership after insert and lock ---- */

static void test_insert_lock_ownership(void **state) {
    (void)state;
    const int32_t win[2] = {0, 8};
    env *e = env_new(16, 4, 2, win);
    int32_t tok[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    int32_t p[6];
    OK(tr_kv_pool_alloc(e->pool, 6, p));
    for (int32_t i = 0; i < 6; i++) assert_int_equal(p[i], i); /* fresh pool: 0, 1, ... */
    radix_node *x;
    OK(tr_radix_tree_insert(e->t, 0, tok, p, 12, &x));
    check_all(e->t);
    const int32_t want_p[6] = {0, 1, 2, 3, 4, 5};
    assert_memory_equal(p, want_p, sizeof p); /* nothing rewritten */
    assert_non_null(x);
    assert_int_equal(tr_radix_node_n_pages(x), 3);
    assert_int_equal(tr_radix_node_lock_count(x), 0);
    assert_memory_equal(tr_radix_node_pages(x), want_p, sizeof want_p);
    radix_tree_stats s = stats(e->t);
    assert_int_equal(s.inserts, 1);
    assert_int_equal(s.inserted_pages, 6);
    assert_int_equal(s.duplicate_pages, 0);
    assert_int_equal(s.n_nodes, 1);
    assert_int_equal(s.n_tree_pages, 6);
    assert_int_equal(s.n_tree_tokens, 12);
    /* Unlocked: the global ids are the tree's alone (cached); the windowed
     * ones are the tree's and the caller's (locked state, two refs). */
    for (int32_t j = 0; j < 3; j++) {
        int32_t g = p[2 * j], w = p[2 * j + 1];
        assert_true(tr_kv_pool_page_in_tree(e->pool, g));
        assert_int_equal(tr_kv_pool_refcount(e->pool, g), 1);
        assert_int_equal(tr_kv_pool_page_state(e->pool, g), KV_PAGE_CACHED);
        assert_true(tr_kv_pool_page_in_tree(e->pool, w));
        assert_int_equal(tr_kv_pool_refcount(e->pool, w), 2);
        assert_int_equal(tr_kv_pool_page_state(e->pool, w), KV_PAGE_LOCKED);
    }
    assert_int_equal(s.pages_cached, 3);
    assert_int_equal(s.pages_locked, 3);
    assert_int_equal(s.pages_free, 10);
    /* The caller cannot drop the global ids' last (the tree's) reference. */
    assert_int_equal(tr_kv_pool_unref(e->pool, p[0]), TR_ERR_STATE);

    OK(tr_radix_tree_lock(e->t, x));
    check_all(e->t);
    assert_int_equal(tr_radix_node_lock_count(x), 1);
    for (int32_t j = 0; j < 3; j++) {
        assert_int_equal(tr_kv_pool_page_state(e->pool, p[2 * j]), KV_PAGE_LOCKED);
        assert_int_equal(tr_kv_pool_refcount(e->pool, p[2 * j]), 1);
        assert_int_equal(tr_kv_pool_refcount(e->pool, p[2 * j + 1]), 2);
    }
    s = stats(e->t);
    assert_int_equal(s.pages_locked, 6);
    assert_int_equal(s.pages_cached, 0);

    /* The caller lets slot 0's windowed id go: the tree's alone, cached
     * although its node is locked (windowed ids are never pinned). */
    OK(tr_kv_pool_unref(e->pool, p[1]));
    check_all(e->t);
    assert_int_equal(tr_kv_pool_refcount(e->pool, p[1]), 1);
    assert_true(tr_kv_pool_page_in_tree(e->pool, p[1]));
    assert_int_equal(tr_kv_pool_page_state(e->pool, p[1]), KV_PAGE_CACHED);
    assert_int_equal(tr_kv_pool_unref(e->pool, p[1]), TR_ERR_STATE); /* the tree's */
    s = stats(e->t);
    assert_int_equal(s.pages_locked, 5);
    assert_int_equal(s.pages_cached, 1);
    assert_int_equal(tr_kv_pool_page_state(e->pool, p[0]), KV_PAGE_LOCKED);

    OK(tr_radix_tree_unlock(e->t, x));
    check_all(e->t);
    assert_int_equal(tr_radix_node_lock_count(x), 0);
    for (int32_t j = 0; j < 3; j++)
        assert_int_equal(tr_kv_pool_page_state(e->pool, p[2 * j]), KV_PAGE_CACHED);
    assert_int_equal(tr_kv_pool_page_state(e->pool, p[3]), KV_PAGE_LOCKED); /* caller's */
    assert_int_equal(tr_kv_pool_page_state(e->pool, p[5]), KV_PAGE_LOCKED);
    assert_int_equal(tr_radix_tree_unlock(e->t, x), TR_ERR_STATE);
    OK(tr_kv_pool_unref(e->pool, p[3]));
    OK(tr_kv_pool_unref(e->pool, p[5]));
    check_all(e->t);
    s = stats(e->t);
    assert_int_equal(s.pages_cached, 6);
    assert_int_equal(s.pages_locked, 0);

    /* Nothing of this touched the tree's ids. */
    expect_match(e, 0, tok, 12, 3, x, want_p);
    assert_int_equal(tr_radix_tree_flush(e->t), 6);
    env_free_all_free(e);
}

/* ---- 3. holes shorten matches ---- */

/* Window 8 with page size 4: a match of L >= 2 slots needs the windowed
 * ids of slots L-2 and L-1, a match of 1 slot needs slot 0. */
static void test_holes_shorten_match(void **state) {
    (void)state;
    const int32_t win[2] = {0, 8};
    env *e = env_new(64, 4, 2, win);
    int32_t A[24], B[20], D[20];
    for (int32_t i = 0; i < 24; i++) A[i] = 100 + i;
    for (int32_t i = 0; i < 20; i++) B[i] = i < 12 ? A[i] : 200 + i;
    for (int32_t i = 0; i < 20; i++) D[i] = 300 + i;

    /* A: 6 slots; the caller let slot 1's and slot 4's windowed ids go. */
    int32_t pa[12];
    OK(tr_kv_pool_alloc(e->pool, 12, pa));
    let_go(e, &pa[3]);
    let_go(e, &pa[9]);
    const int32_t ta[12] = {0, 1, 2, -1, 4, 5, 6, 7, 8, -1, 10, 11};
    assert_memory_equal(pa, ta, sizeof ta);
    radix_node *xa;
    OK(tr_radix_tree_insert(e->t, 1, A, pa, 24, &xa));
    check_all(e->t);
    assert_memory_equal(pa, ta, sizeof ta);
    assert_int_equal(tr_radix_node_n_pages(xa), 6);
    radix_tree_stats s = stats(e->t);
    assert_int_equal(s.n_tree_pages, 10); /* holes not counted */
    assert_int_equal(s.n_tree_tokens, 24);
    assert_int_equal(s.inserted_pages, 10);

    /* B: A's first 3 slots, then 2 of its own. It passes fresh global ids
     * for the shared slots (duplicates), -1 for their windowed ids, a hole
     * at slot 3 and a windowed id at slot 4. */
    int32_t fresh[6];
    OK(tr_kv_pool_alloc(e->pool, 6, fresh));
    int32_t pb[10] = {fresh[0], -1, fresh[1], -1, fresh[2], -1,
                      fresh[3], -1, fresh[4], fresh[5]};
    radix_node *xb;
    OK(tr_radix_tree_insert(e->t, 1, B, pb, 20, &xb));
    check_all(e->t);
    const int32_t tb[10] = {0, -1, 2, -1, 4, -1, fresh[3], -1, fresh[4], fresh[5]};
    assert_memory_equal(pb, tb, sizeof tb); /* globals of slots 0-2 are A's */
    for (int i = 0; i < 3; i++)
        assert_int_equal(tr_kv_pool_page_state(e->pool, fresh[i]), KV_PAGE_FREE);
    s = stats(e->t);
    assert_int_equal(s.duplicate_pages, 3);
    assert_int_equal(s.n_nodes, 3); /* split: top [0..3), xa [3..6), xb [3..5) */
    assert_int_equal(tr_radix_node_n_pages(xa), 3);
    assert_int_equal(tr_radix_node_n_pages(xb), 2);
    assert_memory_equal(tr_radix_node_pages(xa), ta + 6, sizeof(int32_t) * 6);
    const int32_t xb_ids[4] = {fresh[3], -1, fresh[4], fresh[5]};
    assert_memory_equal(tr_radix_node_pages(xb), xb_ids, sizeof xb_ids);

    /* A in full: L=6 needs slots 4,5 (4 is a hole) -> L=4 needs 2,3: ok.
     * Ends in xa's first slot (mid-node). */
    expect_match(e, 1, A, 24, 4, xa, ta);
    expect_match(e, 1, A, 23, 4, xa, ta); /* 5 full slots: L=5 needs 3,4 */
    expect_match(e, 1, A, 20, 4, xa, ta);
    expect_match(e, 1, A, 16, 4, xa, ta);
    /* 3 slots: L=3 needs 1,2 (1 a hole) -> L=2 needs 0,1 -> L=1 needs 0. */
    radix_node *top = expect_match(e, 1, A, 12, 1, NULL, ta);
    assert_ptr_not_equal(top, xa);
    assert_ptr_not_equal(top, xb);
    assert_int_equal(tr_radix_node_n_pages(top), 3);
    assert_int_equal(node_prefix_len(e, top, A), 12);
    assert_memory_equal(tr_radix_node_pages(top), ta, sizeof(int32_t) * 6);
    assert_int_equal(node_prefix_len(e, xa, A), 24);
    expect_match(e, 1, A, 15, 1, top, ta);
    expect_match(e, 1, A, 8, 1, top, ta);
    expect_match(e, 1, A, 4, 1, top, ta);
    expect_match(e, 1, A, 3, 0, NULL, NULL);
    /* B in full: L=5 needs 3,4 (3 a hole) -> L=3 needs 1,2 (1 a hole) ->
     * L=1: the walk reached xb and falls back to its ancestor top. */
    expect_match(e, 1, B, 20, 1, top, ta); /* slot 0 is A's */
    expect_match(e, 1, B, 16, 1, top, ta);

    /* D: two nodes, [0..3) and [3..5); holes at slots 0 and 3. */
    int32_t pd[10];
    OK(tr_kv_pool_alloc(e->pool, 10, pd));
    let_go(e, &pd[1]);
    let_go(e, &pd[7]);
    radix_node *x1, *x2;
    OK(tr_radix_tree_insert(e->t, 2, D, pd, 12, &x1));
    check_all(e->t);
    OK(tr_radix_tree_insert(e->t, 2, D, pd, 20, &x2));
    check_all(e->t);
    assert_ptr_not_equal(x1, x2);
    assert_int_equal(tr_radix_node_n_pages(x1), 3);
    assert_int_equal(tr_radix_node_n_pages(x2), 2);
    s = stats(e->t);
    assert_int_equal(s.n_nodes, 5);
    assert_int_equal(s.duplicate_pages, 3); /* the second insert had none */
    /* 5 slots: L=5 needs 3,4 (3 a hole) -> L=3 needs 1,2: ends exactly at
     * x1's end. */
    expect_match(e, 2, D, 20, 3, x1, pd);
    expect_match(e, 2, D, 16, 3, x1, pd); /* L=4 needs 2,3 */
    expect_match(e, 2, D, 12, 3, x1, pd);
    expect_match(e, 2, D, 8, 0, NULL, NULL); /* L=2 needs 0,1; L=1 needs 0 */
    expect_match(e, 2, D, 4, 0, NULL, NULL);
    expect_match(e, 2, D, 0, 0, NULL, NULL);
    /* Not a prefix of anything cached. */
    expect_match(e, 3, D, 20, 0, NULL, NULL);

    /* The callers let the rest go; everything is the tree's, then gone. */
    for (int i = 1; i < 12; i += 2)
        if (pa[i] >= 0) OK(tr_kv_pool_unref(e->pool, pa[i]));
    OK(tr_kv_pool_unref(e->pool, pb[9]));
    for (int i = 1; i < 10; i += 2)
        if (pd[i] >= 0) OK(tr_kv_pool_unref(e->pool, pd[i]));
    check_all(e->t);
    s = stats(e->t);
    assert_int_equal(s.pages_locked, 0);
    assert_int_equal(s.pages_cached, 10 + 3 + 8);
    assert_int_equal(tr_radix_tree_flush(e->t), 21);
    env_free_all_free(e);
}

/* Windows that are not multiples of the page size, worked out by hand
 * (ps 4): a match of L slots needs the slots holding positions
 * [4L - w + 1, 4L). With one hole at slot 1 of 4 cached slots, the match
 * of F = 1..4 full slots is: */
static void test_window_boundaries(void **state) {
    (void)state;
    static const struct {
        int32_t w;
        int32_t want[4]; /* F = 1, 2, 3, 4 */
    } rows[] = {
        {1, {1, 2, 3, 4}},  /* reads nothing cached */
        {2, {1, 1, 3, 4}},  /* slot L-1 */
        {4, {1, 1, 3, 4}},  /* slot L-1 */
        {5, {1, 1, 3, 4}},  /* 4L-4: slot L-1 */
        {6, {1, 1, 1, 4}},  /* 4L-5: slots L-2, L-1 */
        {8, {1, 1, 1, 4}},  /* 4L-7: slots L-2, L-1 */
        {9, {1, 1, 1, 4}},  /* 4L-8: slots L-2, L-1 */
        {10, {1, 1, 1, 1}}, /* 4L-9: slots L-3 .. L-1 */
        {13, {1, 1, 1, 1}}, /* 4L-12: slots L-3 .. L-1 */
        {14, {1, 1, 1, 1}}, /* 4L-13: slots L-4 .. L-1 */
    };
    int32_t tok[16];
    for (int32_t i = 0; i < 16; i++) tok[i] = 5 + i;
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        const int32_t win[2] = {0, rows[r].w};
        env *e = env_new(16, 4, 2, win);
        int32_t p[8];
        OK(tr_kv_pool_alloc(e->pool, 8, p));
        let_go(e, &p[3]);
        radix_node *x;
        OK(tr_radix_tree_insert(e->t, 0, tok, p, 16, &x));
        check_all(e->t);
        for (int32_t f = 1; f <= 4; f++) {
            radix_match m;
            int32_t got[8];
            OK(tr_radix_tree_match(e->t, 0, tok, 4 * f + 3, got, &m));
            check_all(e->t);
            if (m.n_pages != rows[r].want[f - 1])
                fprintf(stderr, "window %d, %d slots: matched %d, want %d\n", rows[r].w, f,
                        m.n_pages, rows[r].want[f - 1]);
            assert_int_equal(m.n_pages, rows[r].want[f - 1]);
            assert_ptr_equal(m.node, x);
            assert_memory_equal(got, p, sizeof(int32_t) * (size_t)(2 * m.n_pages));
        }
        for (int i = 1; i < 8; i += 2)
            if (p[i] >= 0) OK(tr_kv_pool_unref(e->pool, p[i]));
        assert_int_equal(tr_radix_tree_flush(e->t), 7);
        env_free_all_free(e);
    }
    /* Window 1 with holes everywhere but the global unit: still a full
     * match. */
    const int32_t win1[2] = {0, 1};
    env *e = env_new(16, 4, 2, win1);
    int32_t p[8];
    OK(tr_kv_pool_alloc(e->pool, 8, p));
    for (int i = 1; i < 8; i += 2) let_go(e, &p[i]);
    radix_node *x;
    OK(tr_radix_tree_insert(e->t, 0, tok, p, 16, &x));
    check_all(e->t);
    expect_match(e, 0, tok, 16, 4, x, p);
    assert_int_equal(tr_radix_tree_flush(e->t), 4);
    env_free_all_free(e);
}

/* ---- 4. filling holes, windowed duplicates ---- */

static void test_fill_holes_and_duplicates(void **state) {
    (void)state;
    const int32_t win[2] = {0, 8};
    env *e = env_new(32, 4, 2, win);
    int32_t A[24];
    for (int32_t i = 0; i < 24; i++) A[i] = 7 * i + 1;
    int32_t pa[12];
    OK(tr_kv_pool_alloc(e->pool, 12, pa));
    let_go(e, &pa[3]);
    let_go(e, &pa[9]);
    radix_node *xa;
    OK(tr_radix_tree_insert(e->t, 0, A, pa, 24, &xa));
    check_all(e->t);
    OK(tr_radix_tree_lock(e->t, xa)); /* fills also happen in locked nodes */
    check_all(e->t);
    /* A finishes with its windows: the windowed ids are the tree's alone. */
    for (int i = 1; i < 12; i += 2)
        if (pa[i] >= 0) OK(tr_kv_pool_unref(e->pool, pa[i]));
    check_all(e->t);
    const int32_t ta[12] = {0, 1, 2, -1, 4, 5, 6, 7, 8, -1, 10, 11};
    assert_memory_equal(tr_radix_node_pages(xa), ta, sizeof ta);
    expect_match(e, 0, A, 24, 4, xa, ta); /* slot 4's hole */
    radix_tree_stats s0 = stats(e->t);
    assert_int_equal(s0.inserted_pages, 10);
    assert_int_equal(s0.duplicate_pages, 0);

    /* E computed the same 24 tokens on its own: 12 fresh ids. */
    int32_t pe[12], pe0[12];
    OK(tr_kv_pool_alloc(e->pool, 12, pe));
    memcpy(pe0, pe, sizeof pe);
    for (int i = 0; i < 12; i++) assert_false(tr_kv_pool_page_in_tree(e->pool, pe[i]));
    radix_node *xe;
    OK(tr_radix_tree_insert(e->t, 0, A, pe, 24, &xe));
    check_all(e->t);
    assert_ptr_equal(xe, xa);
    /* Globals and windowed duplicates say the tree's ids; the two ids that
     * filled holes are E's. */
    const int32_t want_pe[12] = {0, 1, 2, pe0[3], 4, 5, 6, 7, 8, pe0[9], 10, 11};
    assert_memory_equal(pe, want_pe, sizeof want_pe);
    assert_memory_equal(tr_radix_node_pages(xa), want_pe, sizeof want_pe);
    for (int i = 0; i < 12; i++) {
        if (i == 3 || i == 9) {
            /* adopted: tree + E, in the tree, not pinned (windowed) */
            assert_true(tr_kv_pool_page_in_tree(e->pool, pe0[i]));
            assert_int_equal(tr_kv_pool_refcount(e->pool, pe0[i]), 2);
            assert_int_equal(tr_kv_pool_page_state(e->pool, pe0[i]), KV_PAGE_LOCKED);
        } else {
            /* a duplicate: E's own id went back to the free list */
            assert_int_equal(tr_kv_pool_page_state(e->pool, pe0[i]), KV_PAGE_FREE);
            assert_int_equal(tr_kv_pool_refcount(e->pool, pe0[i]), 0);
        }
    }
    /* The tree's windowed ids gained E's reference; the globals did not. */
    for (int i = 0; i < 12; i += 2) assert_int_equal(tr_kv_pool_refcount(e->pool, ta[i]), 1);
    for (int i = 1; i < 12; i += 2)
        if (ta[i] >= 0) assert_int_equal(tr_kv_pool_refcount(e->pool, ta[i]), 2);
    radix_tree_stats s1 = stats(e->t);
    assert_int_equal(s1.inserts, s0.inserts + 1);
    assert_int_equal(s1.inserted_pages, s0.inserted_pages + 2);
    assert_int_equal(s1.duplicate_pages, s0.duplicate_pages + 6 + 4);
    assert_int_equal(s1.n_tree_pages, 12);
    assert_int_equal(s1.n_nodes, 1);
    assert_int_equal(s1.pages_free, 32 - 12);
    expect_match(e, 0, A, 24, 6, xa, want_pe); /* no hole left */

    /* A third caller passes the tree's ids it holds (p == T) and -1 for
     * those it let go: nothing changes hands. */
    int32_t pf[12];
    memcpy(pf, want_pe, sizeof pf);
    for (int i = 1; i < 12; i += 2) {
        if (i < 8) pf[i] = -1;
        else OK(tr_kv_pool_ref(e->pool, pf[i])); /* its window: slots 4, 5 */
    }
    int32_t pf0[12];
    memcpy(pf0, pf, sizeof pf);
    char *before = snapshot(e->t);
    radix_node *xf;
    OK(tr_radix_tree_insert(e->t, 0, A, pf, 24, &xf));
    check_all(e->t);
    assert_ptr_equal(xf, xa);
    assert_memory_equal(pf, pf0, sizeof pf);
    char *after = snapshot(e->t);
    /* Equal but for the insert counter. */
    radix_tree_stats s2 = stats(e->t);
    assert_int_equal(s2.inserts, s1.inserts + 1);
    assert_int_equal(s2.inserted_pages, s1.inserted_pages);
    assert_int_equal(s2.duplicate_pages, s1.duplicate_pages);
    assert_int_equal(tr_kv_pool_refcount(e->pool, pf[9]), 3);
    assert_int_equal(tr_kv_pool_refcount(e->pool, pf[11]), 3);
    char *cut_b = strstr(before, "stats"), *cut_a = strstr(after, "stats");
    assert_non_null(cut_b);
    assert_non_null(cut_a);
    *cut_b = *cut_a = '\0';
    assert_string_equal(before, after);
    free(before);
    free(after);

    /* Everyone lets go. */
    for (int i = 1; i < 12; i += 2) OK(tr_kv_pool_unref(e->pool, pe[i]));
    OK(tr_kv_pool_unref(e->pool, pf[9]));
    OK(tr_kv_pool_unref(e->pool, pf[11]));
    check_all(e->t);
    for (int i = 1; i < 12; i += 2)
        assert_int_equal(tr_kv_pool_page_state(e->pool, want_pe[i]), KV_PAGE_CACHED);
    OK(tr_radix_tree_unlock(e->t, xa));
    check_all(e->t);
    assert_int_equal(tr_radix_tree_flush(e->t), 12);
    env_free_all_free(e);
}

/* ---- 5. bad ids change nothing ---- */

static void test_bad_ids_change_nothing(void **state) {
    (void)state;
    const int32_t win[2] = {0, 8};
    env *e = env_new(32, 4, 2, win);
    int32_t A[12], X[8];
    for (int32_t i = 0; i < 12; i++) A[i] = 50 + i;
    for (int32_t i = 0; i < 8; i++) X[i] = 90 + i;
    int32_t pa[6];
    OK(tr_kv_pool_alloc(e->pool, 6, pa)); /* 0..5, all kept by the caller */
    radix_node *xa;
    OK(tr_radix_tree_insert(e->t, 1, A, pa, 12, &xa));
    OK(tr_radix_tree_lock(e->t, xa));
    check_all(e->t);
    int32_t pv[4];
    OK(tr_kv_pool_alloc(e->pool, 4, pv)); /* private ids 6..9 */
    int32_t A16[16];
    memcpy(A16, A, sizeof A);
    A16[12] = 70, A16[13] = 71, A16[14] = 72, A16[15] = 73;

    struct {
        uint64_t ns;
        const int32_t *tok;
        int32_t n;
        int32_t pages[8];
    } cases[] = {
        /* a global -1 in a new namespace */
        {2, X, 8, {pv[0], pv[1], -1, pv[2]}},
        /* a global -1 in the first slot */
        {2, X, 8, {-1, pv[1], pv[0], pv[2]}},
        /* a global -1 against the tree's id (a matched slot) */
        {1, A, 12, {pa[0], pa[1], -1, pa[3], pa[4], pa[5]}},
        /* a global -1 in a new slot after a matched prefix */
        {1, A16, 16, {pa[0], pa[1], pa[2], pa[3], pa[4], pa[5], -1, pv[0]}},
        /* a windowed id that is in the tree at another slot */
        {2, X, 8, {pv[0], pa[1], pv[1], pv[2]}},
        {1, A16, 16, {pa[0], pa[1], pa[2], pa[3], pa[4], pa[5], pv[0], pa[3]}},
        /* a windowed id in the tree as a global id */
        {2, X, 8, {pv[0], pa[0], pv[1], pv[2]}},
        /* the same windowed id twice */
        {2, X, 8, {pv[0], pv[1], pv[2], pv[1]}},
        /* a windowed id equal to a global id of the same call */
        {2, X, 8, {pv[0], pv[1], pv[2], pv[0]}},
        /* a free windowed id; one out of range */
        {2, X, 8, {pv[0], 31, pv[1], pv[2]}},
        {2, X, 8, {pv[0], 32, pv[1], pv[2]}},
        /* a windowed id against a different tree id that the caller does
         * not own (in the tree elsewhere) */
        {1, A, 12, {pa[0], pa[3], pa[2], pa[3], pa[4], pa[5]}},
        /* the tree's windowed ids swapped */
        {1, A, 12, {pa[0], pa[3], pa[2], pa[1], pa[4], pa[5]}},
    };
    char *before = snapshot(e->t);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t pages[8];
        memcpy(pages, cases[i].pages, sizeof pages);
        radix_node *sentinel = (radix_node *)(uintptr_t)0x40, *x = sentinel;
        assert_int_equal(tr_radix_tree_insert(e->t, cases[i].ns, cases[i].tok, pages,
                                              cases[i].n, &x),
                         TR_ERR_INVALID_ARG);
        assert_memory_equal(pages, cases[i].pages, sizeof pages);
        char *after = snapshot(e->t);
        assert_string_equal(before, after);
        free(after);
        check_all(e->t);
    }
    free(before);
    /* The valid versions still work. */
    int32_t good[4] = {pv[0], pv[1], pv[2], pv[3]};
    radix_node *xx;
    OK(tr_radix_tree_insert(e->t, 2, X, good, 8, &xx));
    check_all(e->t);
    assert_int_equal(tr_radix_node_n_pages(xx), 2);
    int32_t good2[6] = {pa[0], -1, pa[2], -1, pa[4], -1};
    OK(tr_radix_tree_insert(e->t, 1, A, good2, 12, &xx));
    check_all(e->t);
    assert_ptr_equal(xx, xa);
    OK(tr_radix_tree_unlock(e->t, xa));
    for (int i = 1; i < 6; i += 2) OK(tr_kv_pool_unref(e->pool, pa[i]));
    OK(tr_kv_pool_unref(e->pool, pv[1]));
    OK(tr_kv_pool_unref(e->pool, pv[3]));
    check_all(e->t);
    assert_int_equal(tr_radix_tree_flush(e->t), 10);
    env_free_all_free(e);
}

/* A windowed id below -1 is neither a hole nor a page id: the contract
 * (insert: "every page the tree takes ... must be a valid id ... otherwise
 * TR_ERR_INVALID_ARG"; holes are -1) refuses it. */
static void test_windowed_id_below_minus_one(void **state) {
    (void)state;
    const int32_t win[2] = {0, 8};
    env *e = env_new(16, 4, 2, win);
    int32_t X[8];
    for (int32_t i = 0; i < 8; i++) X[i] = 90 + i;
    int32_t pv[4];
    OK(tr_kv_pool_alloc(e->pool, 4, pv));
    int32_t pages[4] = {pv[0], -2, pv[2], pv[3]};
    OK(tr_kv_pool_unref(e->pool, pv[1]));
    char *before = snapshot(e->t);
    radix_node *x = NULL;
    tr_status st = tr_radix_tree_insert(e->t, 0, X, pages, 8, &x);
    tr_status chk = tr_radix_tree_check(e->t);
    char *after = snapshot(e->t);
    if (st != TR_ERR_INVALID_ARG || chk != TR_OK)
        fprintf(stderr, "insert of windowed id -2: status %d, then check %d; tree:\n%s", (int)st,
                (int)chk, after);
    assert_int_equal(st, TR_ERR_INVALID_ARG);
    assert_int_equal(chk, TR_OK);
    assert_string_equal(before, after);
    free(before);
    free(after);
    OK(tr_kv_pool_unref(e->pool, pv[0]));
    OK(tr_kv_pool_unref(e->pool, pv[2]));
    OK(tr_kv_pool_unref(e->pool, pv[3]));
    env_free_all_free(e);
}

/* ---- 6. eviction ---- */

typedef struct evict_setup {
    int32_t pu[4], pk[8];
    radix_node *xu, *xk;
    int32_t U[8], K[16];
} evict_setup;

/* U: an unlocked node of 2 slots (ns 1), tree-only. K: a locked node of 4
 * slots (ns 2); its caller let slots 0 and 1's windowed ids go and holds
 * slots 2 and 3's (its window). Pool of 16: 4 free. */
static void evict_setup_make(env *e, evict_setup *v) {
    for (int32_t i = 0; i < 8; i++) v->U[i] = 10 + i;
    for (int32_t i = 0; i < 16; i++) v->K[i] = 40 + i;
    OK(tr_kv_pool_alloc(e->pool, 4, v->pu));
    OK(tr_radix_tree_insert(e->t, 1, v->U, v->pu, 8, &v->xu));
    check_all(e->t);
    OK(tr_kv_pool_unref(e->pool, v->pu[1]));
    OK(tr_kv_pool_unref(e->pool, v->pu[3]));
    OK(tr_kv_pool_alloc(e->pool, 8, v->pk));
    OK(tr_radix_tree_insert(e->t, 2, v->K, v->pk, 16, &v->xk));
    check_all(e->t);
    OK(tr_radix_tree_lock(e->t, v->xk));
    OK(tr_kv_pool_unref(e->pool, v->pk[1]));
    OK(tr_kv_pool_unref(e->pool, v->pk[3]));
    check_all(e->t);
    for (int i = 0; i < 4; i++) assert_int_equal(v->pu[i], i);
    for (int i = 0; i < 8; i++) assert_int_equal(v->pk[i], 4 + i);
    assert_int_equal(tr_kv_pool_n_free(e->pool), 4);
    /* Before any stripping K matches in full and at 3 slots. */
    expect_match(e, 2, v->K, 16, 4, v->xk, v->pk);
    expect_match(e, 2, v->K, 12, 3, v->xk, v->pk);
}

static void test_evict_unlocked_then_strip(void **state) {
    (void)state;
    const int32_t win[2] = {0, 8};
    env *e = env_new(16, 4, 2, win);
    evict_setup v;
    evict_setup_make(e, &v);

    /* One page asked: the unlocked node goes whole; nothing is stripped. */
    assert_int_equal(tr_radix_tree_evict(e->t, 1), 4);
    check_all(e->t);
    radix_tree_stats s = stats(e->t);
    assert_int_equal(s.evicted_nodes, 1);
    assert_int_equal(s.evicted_pages, 4);
    assert_int_equal(s.stripped_pages, 0);
    assert_int_equal(s.n_nodes, 1);
    for (int i = 0; i < 4; i++)
        assert_int_equal(tr_kv_pool_page_state(e->pool, v.pu[i]), KV_PAGE_FREE);
    assert_true(tr_kv_pool_page_in_tree(e->pool, v.pk[1]));
    assert_true(tr_kv_pool_page_in_tree(e->pool, v.pk[3]));
    expect_match(e, 1, v.U, 8, 0, NULL, NULL);

    /* Again: the empty namespace root goes (no page), then the first
     * strippable windowed id of K: slot 0's. */
    assert_int_equal(tr_radix_tree_evict(e->t, 1), 1);
    check_all(e->t);
    s = stats(e->t);
    assert_int_equal(s.stripped_pages, 1);
    assert_int_equal(s.evicted_pages, 4); /* stripping is counted apart */
    assert_int_equal(s.n_namespaces, 1);
    assert_int_equal(s.n_tree_pages, 7);
    assert_int_equal(tr_kv_pool_page_state(e->pool, v.pk[1]), KV_PAGE_FREE);
    const int32_t k1[8] = {4, -1, 6, 7, 8, 9, 10, 11};
    assert_memory_equal(tr_radix_node_pages(v.xk), k1, sizeof k1);

    /* As much as possible: slot 1's goes too; slots 2 and 3's are the
     * caller's as well and stay, and no global id is ever stripped. */
    assert_int_equal(tr_radix_tree_evict(e->t, 100), 1);
    check_all(e->t);
    s = stats(e->t);
    assert_int_equal(s.stripped_pages, 2);
    assert_int_equal(s.n_tree_pages, 6);
    assert_int_equal(s.n_nodes, 1);
    const int32_t k2[8] = {4, -1, 6, -1, 8, 9, 10, 11};
    assert_memory_equal(tr_radix_node_pages(v.xk), k2, sizeof k2);
    for (int i = 0; i < 8; i += 2) {
        assert_true(tr_kv_pool_page_in_tree(e->pool, v.pk[i]));
        assert_int_equal(tr_kv_pool_page_state(e->pool, v.pk[i]), KV_PAGE_LOCKED);
    }
    assert_int_equal(tr_kv_pool_refcount(e->pool, v.pk[5]), 2);
    assert_int_equal(tr_kv_pool_refcount(e->pool, v.pk[7]), 2);
    assert_int_equal(tr_kv_pool_n_free(e->pool), 10);
    assert_int_equal(tr_radix_tree_evict(e->t, 100), 0); /* nothing left */
    check_all(e->t);

    /* Matches shrink: 4 slots need 2,3 (held); 3 slots need 1,2 and 2
     * slots need 0,1 (stripped); 1 slot needs 0. */
    expect_match(e, 2, v.K, 16, 4, v.xk, k2);
    expect_match(e, 2, v.K, 12, 0, NULL, NULL);
    expect_match(e, 2, v.K, 8, 0, NULL, NULL);
    expect_match(e, 2, v.K, 4, 0, NULL, NULL);

    /* The caller lets slot 2's go: it is stripped next; 4 slots no longer
     * match (slot 2, then 1, then 0 are holes). */
    OK(tr_kv_pool_unref(e->pool, v.pk[5]));
    check_all(e->t);
    assert_int_equal(tr_kv_pool_page_state(e->pool, v.pk[5]), KV_PAGE_CACHED);
    assert_int_equal(tr_radix_tree_evict(e->t, 1), 1);
    check_all(e->t);
    assert_int_equal(stats(e->t).stripped_pages, 3);
    assert_int_equal(tr_kv_pool_page_state(e->pool, v.pk[5]), KV_PAGE_FREE);
    expect_match(e, 2, v.K, 16, 0, NULL, NULL);

    /* Unlocked, K goes whole; slot 3's windowed id is still the caller's. */
    OK(tr_radix_tree_unlock(e->t, v.xk));
    check_all(e->t);
    assert_int_equal(tr_radix_tree_evict(e->t, 100), 4);
    check_all(e->t);
    s = stats(e->t);
    assert_int_equal(s.n_nodes, 0);
    assert_int_equal(s.evicted_nodes, 2);
    assert_int_equal(s.evicted_pages, 8);
    assert_false(tr_kv_pool_page_in_tree(e->pool, v.pk[7]));
    assert_int_equal(tr_kv_pool_refcount(e->pool, v.pk[7]), 1);
    OK(tr_kv_pool_unref(e->pool, v.pk[7]));
    env_free_all_free(e);
}

static void test_evict_one_call_both_phases(void **state) {
    (void)state;
    const int32_t win[2] = {0, 8};
    env *e = env_new(16, 4, 2, win);
    evict_setup v;
    evict_setup_make(e, &v);
    /* 6 asked: U gives 4, then 2 windowed ids are stripped from K. */
    assert_int_equal(tr_radix_tree_evict(e->t, 6), 6);
    check_all(e->t);
    radix_tree_stats s = stats(e->t);
    assert_int_equal(s.evicted_nodes, 1);
    assert_int_equal(s.evicted_pages, 4);
    assert_int_equal(s.stripped_pages, 2);
    assert_int_equal(s.n_namespaces, 1);
    assert_int_equal(tr_kv_pool_n_free(e->pool), 10);
    const int32_t k2[8] = {4, -1, 6, -1, 8, 9, 10, 11};
    assert_memory_equal(tr_radix_node_pages(v.xk), k2, sizeof k2);
    expect_match(e, 2, v.K, 12, 0, NULL, NULL);
    /* flush leaves locked nodes alone, holes and all */
    assert_int_equal(tr_radix_tree_flush(e->t), 0);
    check_all(e->t);
    assert_memory_equal(tr_radix_node_pages(v.xk), k2, sizeof k2);
    OK(tr_radix_tree_unlock(e->t, v.xk));
    OK(tr_kv_pool_unref(e->pool, v.pk[5]));
    OK(tr_kv_pool_unref(e->pool, v.pk[7]));
    check_all(e->t);
    assert_int_equal(tr_radix_tree_flush(e->t), 6);
    env_free_all_free(e);
}

/* ---- 7. splits with W = 3 ---- */

/* Expects the dump line of a node: depth, page count, lock, tokens, ids. */
static void expect_dump_line(const char *dump, int depth, int32_t ps, int32_t W,
                             int32_t lock, const int32_t *tok, int32_t n_pages,
                             const int32_t *ids) {
    char line[1024];
    int at = snprintf(line, sizeof line, "\n%*s[%d page%s] lock=%d tokens:", 2 * depth,
                      "", n_pages, n_pages == 1 ? "" : "s", lock);
    for (int32_t i = 0; i < n_pages * ps; i++)
        at += snprintf(line + at, sizeof line - (size_t)at, "%s%d",
                       (i > 0 && i % ps == 0) ? " | " : " ", tok[i]);
    at += snprintf(line + at, sizeof line - (size_t)at, "  pages:");
    for (int32_t k = 0; k < n_pages * W; k++)
        at += snprintf(line + at, sizeof line - (size_t)at, "%s%d", k % W ? "/" : " ",
                       ids[k]);
    snprintf(line + at, sizeof line - (size_t)at, "\n");
    if (!strstr(dump, line)) {
        fprintf(stderr, "expected line:%sin dump:\n%s", line, dump);
        fail();
    }
}

static void test_split_w3(void **state) {
    (void)state;
    /* ps 4: window 4 needs slot L-1; window 12 needs slots L-3..L-1. */
    const int32_t win[3] = {0, 4, 12};
    env *e = env_new(64, 4, 3, win);
    int32_t A[16], B[16], C[16];
    for (int32_t i = 0; i < 16; i++) {
        A[i] = 1000 + i;
        B[i] = i < 8 ? A[i] : 2000 + i;
        C[i] = i < 4 ? A[i] : 3000 + i;
    }
    int32_t pa[12];
    OK(tr_kv_pool_alloc(e->pool, 12, pa));
    let_go(e, &pa[1]); /* unit 1, slots 0 and 1 */
    let_go(e, &pa[4]);
    let_go(e, &pa[2]); /* unit 2, slot 0 */
    const int32_t ta[12] = {0, -1, -1, 3, -1, 5, 6, 7, 8, 9, 10, 11};
    assert_memory_equal(pa, ta, sizeof ta);
    radix_node *xa;
    OK(tr_radix_tree_insert(e->t, 0, A, pa, 16, &xa));
    check_all(e->t);
    OK(tr_radix_tree_lock(e->t, xa));
    check_all(e->t);
    expect_match(e, 0, A, 16, 4, xa, ta);
    /* L=3: unit 2 needs slots 0..2 (0 a hole); L=2, L=1: unit 1 needs
     * slot 1, slot 0 (holes). */
    expect_match(e, 0, A, 12, 0, NULL, NULL);
    expect_match(e, 0, A, 8, 0, NULL, NULL);

    /* B shares 2 slots (it passes the tree's globals and no windowed id
     * there), then 2 slots of its own: xa is split after 2 slots. */
    int32_t fb[6];
    OK(tr_kv_pool_alloc(e->pool, 6, fb));
    int32_t pb[12] = {0, -1, -1, 3, -1, -1, fb[0], fb[1], fb[2], fb[3], fb[4], fb[5]};
    radix_node *xb;
    OK(tr_radix_tree_insert(e->t, 0, B, pb, 16, &xb));
    check_all(e->t);
    const int32_t want_pb[12] = {0, -1, -1, 3, -1, -1, fb[0], fb[1], fb[2], fb[3], fb[4], fb[5]};
    assert_memory_equal(pb, want_pb, sizeof want_pb);
    assert_int_equal(tr_radix_node_n_pages(xa), 2);
    assert_int_equal(tr_radix_node_lock_count(xa), 1);
    assert_memory_equal(tr_radix_node_pages(xa), ta + 6, sizeof(int32_t) * 6);
    assert_int_equal(tr_radix_node_n_pages(xb), 2);
    assert_memory_equal(tr_radix_node_pages(xb), fb, sizeof fb);
    radix_tree_stats s = stats(e->t);
    assert_int_equal(s.n_nodes, 3);
    assert_int_equal(s.duplicate_pages, 0);
    assert_int_equal(s.n_tree_pages, 9 + 6);
    char *d = tree_dump(e->t);
    expect_dump_line(d, 1, 4, 3, 1, A, 2, ta);          /* top, locked via xa */
    expect_dump_line(d, 2, 4, 3, 1, A + 8, 2, ta + 6);  /* xa */
    expect_dump_line(d, 2, 4, 3, 0, B + 8, 2, fb);      /* xb */
    free(d);
    /* Both match in full with every id of every slot. */
    expect_match(e, 0, A, 16, 4, xa, ta);
    const int32_t tb[12] = {0, -1, -1, 3, -1, 5, fb[0], fb[1], fb[2], fb[3], fb[4], fb[5]};
    expect_match(e, 0, B, 16, 4, xb, tb);

    /* C shares 1 slot: the upper half is split again. */
    int32_t pc[12];
    OK(tr_kv_pool_alloc(e->pool, 9, pc + 3));
    pc[0] = 0, pc[1] = -1, pc[2] = -1;
    radix_node *xc;
    OK(tr_radix_tree_insert(e->t, 0, C, pc, 16, &xc));
    check_all(e->t);
    assert_int_equal(tr_radix_node_n_pages(xc), 3);
    assert_int_equal(stats(e->t).n_nodes, 5);
    d = tree_dump(e->t);
    expect_dump_line(d, 1, 4, 3, 1, A, 1, ta);              /* [0] */
    expect_dump_line(d, 2, 4, 3, 1, A + 4, 1, ta + 3);      /* [1] */
    expect_dump_line(d, 3, 4, 3, 1, A + 8, 2, ta + 6);      /* xa */
    expect_dump_line(d, 3, 4, 3, 0, B + 8, 2, fb);          /* xb */
    expect_dump_line(d, 2, 4, 3, 0, C + 4, 3, pc + 3);      /* xc */
    free(d);
    expect_match(e, 0, A, 16, 4, xa, ta);
    expect_match(e, 0, B, 16, 4, xb, tb);
    expect_match(e, 0, C, 16, 4, xc, pc);

    OK(tr_radix_tree_unlock(e->t, xa));
    check_all(e->t);
    for (int i = 0; i < 12; i++)
        if (i % 3 && ta[i] >= 0) OK(tr_kv_pool_unref(e->pool, ta[i]));
    for (int i = 0; i < 6; i++)
        if (i % 3) OK(tr_kv_pool_unref(e->pool, fb[i]));
    for (int i = 3; i < 12; i++)
        if (i % 3) OK(tr_kv_pool_unref(e->pool, pc[i]));
    check_all(e->t);
    assert_int_equal(tr_radix_tree_flush(e->t), 9 + 6 + 9);
    env_free_all_free(e);
}

/* ---- 8. random operations against a model ---- */

#define SW 3             /* units */
#define MAXT 32          /* tokens per sequence */
#define MAXS 16          /* page slots per sequence (ps >= 2) */
#define NSEQ 6
#define MAXE 1024        /* model entries */

typedef struct mentry {
    uint64_t ns;
    int32_t k; /* prefix length in slots */
    int32_t tok[MAXT];
    int32_t ids[SW]; /* the tree's ids of slot k - 1 */
} mentry;

typedef struct mseq {
    bool live;
    uint64_t ns;
    int32_t tok[MAXT];
    int32_t n;        /* tokens computed */
    int32_t ids[MAXS * SW];
    int32_t n_alloc;  /* slots with ids */
    int32_t shared;   /* slots whose global ids are the tree's (locked) */
    radix_node *node; /* locked, or NULL */
} mseq;

typedef struct msim {
    int32_t ps, n_pages;
    int32_t win[SW];
    uint64_t rng;
    test_alloc ta;
    kv_pool *pool;
    radix_tree *t;
    mentry *e;
    int32_t n_e;
    mseq q[NSEQ];
    int32_t base[4][MAXT];
    int64_t n_strips, n_short_matches, n_fills, n_win_dups, n_alloc_fail;
} msim;

/* First slot unit u must hold for the token at position pos. */
static int32_t lo_slot(const msim *s, int32_t u, int32_t pos) {
    if (s->win[u] == 0) return 0;
    int32_t first = pos - s->win[u] + 1;
    return first <= 0 ? 0 : first / s->ps;
}

static mentry *m_find(msim *s, uint64_t ns, const int32_t *tok, int32_t k) {
    for (int32_t i = 0; i < s->n_e; i++) {
        mentry *x = &s->e[i];
        if (x->ns == ns && x->k == k &&
            memcmp(x->tok, tok, sizeof(int32_t) * (size_t)(k * s->ps)) == 0)
            return x;
    }
    return NULL;
}

/* The model's match: the longest cached prefix, shortened to the longest L
 * whose windows hold no hole. */
static int32_t m_match(msim *s, uint64_t ns, const int32_t *tok, int32_t n, int32_t *ids) {
    int32_t F = n / s->ps, M = 0;
    mentry *path[MAXS];
    while (M < F && (path[M] = m_find(s, ns, tok, M + 1))) M++;
    int32_t L = M;
    for (; L > 0; L--) {
        bool fit = true;
        for (int32_t u = 0; u < SW && fit; u++) {
            if (s->win[u] == 0) continue;
            for (int32_t j = lo_slot(s, u, L * s->ps); j < L; j++)
                if (path[j]->ids[u] < 0) fit = false;
        }
        if (fit) break;
    }
    if (L < M) s->n_short_matches++;
    for (int32_t j = 0; j < L; j++) memcpy(ids + j * SW, path[j]->ids, sizeof path[j]->ids);
    return L;
}

/* Exact reference counts: one for the tree on each id it holds, one per
 * sequence for each private global id and each windowed id it holds. */
static void verify_pool(msim *s) {
    int32_t want[512];
    bool in_tree[512];
    assert_true(s->n_pages <= 512);
    memset(want, 0, sizeof want);
    memset(in_tree, 0, sizeof in_tree);
    int64_t tree_ids = 0;
    for (int32_t i = 0; i < s->n_e; i++)
        for (int32_t u = 0; u < SW; u++) {
            int32_t id = s->e[i].ids[u];
            if (s->win[u] == 0) assert_true(id >= 0);
            if (id < 0) continue;
            assert_false(in_tree[id]);
            in_tree[id] = true;
            want[id]++;
            tree_ids++;
        }
    for (int i = 0; i < NSEQ; i++) {
        const mseq *q = &s->q[i];
        if (!q->live) continue;
        for (int32_t j = 0; j < q->n_alloc; j++)
            for (int32_t u = 0; u < SW; u++) {
                int32_t id = q->ids[j * SW + u];
                if (s->win[u] == 0) {
                    assert_true(id >= 0);
                    if (j >= q->shared) want[id]++;
                } else if (id >= 0) {
                    want[id]++;
                }
            }
    }
    int32_t n_free = 0;
    for (int32_t p = 0; p < s->n_pages; p++) {
        if (tr_kv_pool_refcount(s->pool, p) != want[p] ||
            tr_kv_pool_page_in_tree(s->pool, p) != in_tree[p]) {
            fprintf(stderr, "page %d: ref %lld (want %d), in tree %d (want %d)\n", p,
                    (long long)tr_kv_pool_refcount(s->pool, p), want[p],
                    tr_kv_pool_page_in_tree(s->pool, p), in_tree[p]);
            fail();
        }
        n_free += want[p] == 0;
    }
    assert_int_equal(tr_kv_pool_n_free(s->pool), n_free);
    radix_tree_stats st = stats(s->t);
    assert_int_equal(st.n_tree_pages, tree_ids);
    assert_int_equal(st.n_tree_tokens, (int64_t)s->n_e * s->ps);
    /* Every locked sequence's prefix is cached with its global ids. */
    for (int i = 0; i < NSEQ; i++) {
        const mseq *q = &s->q[i];
        if (!q->live) continue;
        assert_true((q->node != NULL) == (q->shared > 0));
        if (q->node) assert_true(tr_radix_node_lock_count(q->node) >= 1);
        for (int32_t j = 0; j < q->shared; j++) {
            mentry *x = m_find(s, q->ns, q->tok, j + 1);
            assert_non_null(x);
            for (int32_t u = 0; u < SW; u++)
                if (s->win[u] == 0) assert_int_equal(x->ids[u], q->ids[j * SW + u]);
        }
    }
}

static void sim_check(msim *s) {
    check_all(s->t);
    verify_pool(s);
}

static void verify_match(msim *s, uint64_t ns, const int32_t *tok, int32_t n, radix_match *m,
                         int32_t *got) {
    int32_t want[MAXS * SW];
    int32_t L = m_match(s, ns, tok, n, want);
    OK(tr_radix_tree_match(s->t, ns, tok, n, got, m));
    assert_int_equal(m->n_pages, L);
    assert_int_equal(m->n_tokens, L * s->ps);
    if (L == 0) {
        assert_null(m->node);
        return;
    }
    assert_non_null(m->node);
    assert_memory_equal(got, want, sizeof(int32_t) * (size_t)(L * SW));
    /* The node holds slot L - 1: its prefix ends at or past L slots and
     * starts before. */
    int32_t pre[MAXT * 2];
    int32_t len = tr_radix_node_prefix(s->t, m->node, pre, MAXT * 2);
    assert_true(len >= L * s->ps);
    assert_true(len - tr_radix_node_n_pages(m->node) * s->ps < L * s->ps);
    assert_memory_equal(pre, tok, sizeof(int32_t) * (size_t)(L * s->ps));
}

/* After evict or flush: entries whose global id left the tree went with
 * their node; windowed ids that left were stripped. Returns the strips. */
static int32_t m_sync(msim *s) {
    int32_t w = 0, strips = 0;
    for (int32_t i = 0; i < s->n_e; i++) {
        mentry *x = &s->e[i];
        if (!tr_kv_pool_page_in_tree(s->pool, x->ids[0])) continue;
        for (int32_t u = 1; u < SW; u++)
            if (x->ids[u] >= 0 && !tr_kv_pool_page_in_tree(s->pool, x->ids[u])) {
                x->ids[u] = -1;
                strips++;
            }
        s->e[w++] = *x;
    }
    s->n_e = w;
    /* Prefix-closed: eviction takes leaves. */
    for (int32_t i = 0; i < s->n_e; i++)
        if (s->e[i].k > 1) assert_non_null(m_find(s, s->e[i].ns, s->e[i].tok, s->e[i].k - 1));
    return strips;
}

/* The windowed ids that sequences hold in their locked prefixes (the
 * tree holds them too). */
static void locked_held(msim *s, int32_t *out, int32_t *n) {
    for (int i = 0; i < NSEQ; i++) {
        const mseq *q = &s->q[i];
        if (!q->live) continue;
        for (int32_t j = 0; j < q->shared; j++)
            for (int32_t u = 0; u < SW; u++) {
                int32_t id = q->ids[j * SW + u];
                if (s->win[u] > 0 && id >= 0) {
                    assert_true(tr_kv_pool_page_in_tree(s->pool, id));
                    out[(*n)++] = id;
                }
            }
    }
}

static void do_evict(msim *s, int32_t need) {
    radix_tree_stats s0 = stats(s->t);
    int32_t free0 = tr_kv_pool_n_free(s->pool);
    int32_t held[NSEQ * MAXS * SW], n_held = 0;
    locked_held(s, held, &n_held);
    int32_t got = tr_radix_tree_evict(s->t, need);
    check_all(s->t);
    assert_int_equal(tr_kv_pool_n_free(s->pool), free0 + got);
    radix_tree_stats s1 = stats(s->t);
    int32_t strips = m_sync(s);
    int32_t stripped = (int32_t)(s1.stripped_pages - s0.stripped_pages);
    assert_int_equal(strips, stripped);
    /* Windowed ids a sequence holds in its locked prefix stay. */
    for (int32_t i = 0; i < n_held; i++)
        assert_true(tr_kv_pool_page_in_tree(s->pool, held[i]));
    if (stripped > 0) {
        s->n_strips += stripped;
        /* Stripping comes after every unlocked node: none is left. */
        int64_t nodes = s1.n_nodes;
        assert_int_equal(tr_radix_tree_flush(s->t), 0);
        assert_int_equal(stats(s->t).n_nodes, nodes);
        assert_int_equal(stats(s->t).n_namespaces, s1.n_namespaces);
        check_all(s->t);
        /* Each strip frees one page, and stripping stops once enough is
         * free: never more than asked. */
        assert_true(got <= need);
    }
    if (got < need) {
        /* Nothing evictable left: no tree-only windowed id, no unlocked
         * node. */
        for (int32_t i = 0; i < s->n_e; i++)
            for (int32_t u = 0; u < SW; u++)
                if (s->win[u] > 0 && s->e[i].ids[u] >= 0)
                    assert_true(tr_kv_pool_refcount(s->pool, s->e[i].ids[u]) >= 2);
        int64_t nodes = s1.n_nodes;
        assert_int_equal(tr_radix_tree_flush(s->t), 0);
        assert_int_equal(stats(s->t).n_nodes, nodes);
        check_all(s->t);
    }
    verify_pool(s); /* includes: every locked prefix is still cached */
}

static bool alloc_ids(msim *s, int32_t n, int32_t *out) {
    tr_status st = tr_kv_pool_alloc(s->pool, n, out);
    if (st == TR_ERR_FULL) {
        do_evict(s, n - tr_kv_pool_n_free(s->pool));
        st = tr_kv_pool_alloc(s->pool, n, out);
    }
    if (st == TR_ERR_FULL) {
        s->n_alloc_fail++;
        return false;
    }
    OK(st);
    return true;
}

/* Gives slots up to ceil(n_new / ps) ids; false when the pool is full. */
static bool seq_grow(msim *s, mseq *q, int32_t n_new) {
    int32_t slots = (n_new + s->ps - 1) / s->ps;
    if (slots > q->n_alloc) {
        if (!alloc_ids(s, (slots - q->n_alloc) * SW, q->ids + q->n_alloc * SW)) return false;
        q->n_alloc = slots;
    }
    q->n = n_new;
    return true;
}

/* The engine's release of windowed ids no later token reads. */
static void seq_let_go(msim *s, mseq *q) {
    for (int32_t u = 0; u < SW; u++) {
        if (s->win[u] == 0) continue;
        int32_t lo = lo_slot(s, u, q->n);
        for (int32_t j = 0; j < lo && j < q->n_alloc; j++) {
            int32_t *id = &q->ids[j * SW + u];
            if (*id < 0) continue;
            OK(tr_kv_pool_unref(s->pool, *id));
            *id = -1;
        }
    }
}

static void seq_release(msim *s, mseq *q) {
    if (q->node) OK(tr_radix_tree_unlock(s->t, q->node));
    for (int32_t j = 0; j < q->n_alloc; j++)
        for (int32_t u = 0; u < SW; u++) {
            int32_t id = q->ids[j * SW + u];
            if (id < 0 || (s->win[u] == 0 && j < q->shared)) continue;
            OK(tr_kv_pool_unref(s->pool, id));
        }
    q->live = false;
}

/* Inserts what q computed, checking every id against the model; then
 * locks the new node and unlocks the old. */
static void seq_insert(msim *s, mseq *q) {
    int32_t F = q->n / s->ps;
    int32_t want[MAXS * SW], model_ids[MAXS * SW];
    bool fresh[MAXS];
    int64_t inserted = 0, dup = 0;
    for (int32_t j = 0; j < F; j++) {
        mentry *x = m_find(s, q->ns, q->tok, j + 1);
        fresh[j] = (x == NULL);
        for (int32_t u = 0; u < SW; u++) {
            int32_t mine = q->ids[j * SW + u];
            int32_t *w = &want[j * SW + u], *mi = &model_ids[j * SW + u];
            if (!x) {
                *w = *mi = mine;
                inserted += mine >= 0;
                continue;
            }
            int32_t T = x->ids[u];
            *w = mine;
            *mi = T;
            if (s->win[u] == 0) {
                if (mine != T) {
                    *w = T;
                    dup++;
                }
            } else if (mine >= 0 && mine != T) {
                if (T < 0) {
                    *mi = mine;
                    inserted++;
                    s->n_fills++;
                } else {
                    *w = T;
                    dup++;
                    s->n_win_dups++;
                }
            }
        }
    }
    radix_tree_stats s0 = stats(s->t);
    radix_node *x = NULL;
    OK(tr_radix_tree_insert(s->t, q->ns, q->tok, q->ids, q->n, &x));
    check_all(s->t);
    radix_tree_stats s1 = stats(s->t);
    assert_int_equal(s1.inserted_pages - s0.inserted_pages, inserted);
    assert_int_equal(s1.duplicate_pages - s0.duplicate_pages, dup);
    assert_memory_equal(q->ids, want, sizeof(int32_t) * (size_t)(F * SW));
    for (int32_t j = 0; j < F; j++) {
        mentry *m = fresh[j] ? NULL : m_find(s, q->ns, q->tok, j + 1);
        if (!m) {
            assert_true(s->n_e < MAXE);
            m = &s->e[s->n_e++];
            m->ns = q->ns;
            m->k = j + 1;
            memcpy(m->tok, q->tok, sizeof(int32_t) * (size_t)((j + 1) * s->ps));
        }
        memcpy(m->ids, model_ids + j * SW, sizeof m->ids);
    }
    if (F == 0) {
        assert_null(x);
    } else {
        assert_non_null(x);
        /* The node covering slot F - 1: its span may run past F (a key
         * that ends inside a node does not split it). */
        int32_t pre[MAXT * 2];
        int32_t len = tr_radix_node_prefix(s->t, x, pre, MAXT * 2);
        assert_true(len >= F * s->ps);
        assert_true(len - tr_radix_node_n_pages(x) * s->ps < F * s->ps);
        assert_memory_equal(pre, q->tok, sizeof(int32_t) * (size_t)(F * s->ps));
        OK(tr_radix_tree_lock(s->t, x));
        if (q->node) OK(tr_radix_tree_unlock(s->t, q->node));
        q->node = x;
        q->shared = F;
    }
    sim_check(s);
}

static void gen_tokens(msim *s, int32_t *out) {
    const int32_t *b = s->base[rng_below(&s->rng, 4)];
    int32_t cut = (int32_t)rng_below(&s->rng, MAXT + 1);
    for (int32_t i = 0; i < MAXT; i++)
        out[i] = i < cut ? b[i] : 1 + (int32_t)rng_below(&s->rng, 3);
}

static void op_start(msim *s) {
    mseq *q = NULL;
    for (int i = 0; i < NSEQ; i++)
        if (!s->q[i].live) q = &s->q[i];
    if (!q) return;
    memset(q, 0, sizeof *q);
    q->live = true;
    q->ns = rng_below(&s->rng, 2);
    gen_tokens(s, q->tok);
    int32_t plen = 1 + (int32_t)rng_below(&s->rng, MAXT);
    radix_match m;
    verify_match(s, q->ns, q->tok, plen - 1, &m, q->ids);
    OK(tr_radix_tree_lock(s->t, m.node));
    int32_t L = m.n_pages;
    q->node = m.node;
    q->shared = q->n_alloc = L;
    q->n = L * s->ps;
    /* Take a reference on the windowed ids the next token reads; forget
     * the others. */
    for (int32_t u = 0; u < SW; u++) {
        if (s->win[u] == 0) continue;
        int32_t lo = lo_slot(s, u, q->n);
        for (int32_t j = 0; j < L; j++) {
            int32_t *id = &q->ids[j * SW + u];
            if (j < lo) *id = -1;
            else {
                assert_true(*id >= 0); /* the match guarantees it */
                OK(tr_kv_pool_ref(s->pool, *id));
            }
        }
    }
    sim_check(s);
    /* Prefill the rest of the prompt. */
    if (!seq_grow(s, q, plen)) {
        seq_release(s, q);
        sim_check(s);
        return;
    }
    if (rng_below(&s->rng, 2)) seq_let_go(s, q);
    sim_check(s);
    seq_insert(s, q);
}

static mseq *pick_live(msim *s) {
    int i0 = (int)rng_below(&s->rng, NSEQ);
    for (int k = 0; k < NSEQ; k++) {
        mseq *q = &s->q[(i0 + k) % NSEQ];
        if (q->live) return q;
    }
    return NULL;
}

static void op_extend(msim *s) {
    mseq *q = pick_live(s);
    if (!q || q->n >= MAXT) return;
    int32_t n_new = q->n + 1 + (int32_t)rng_below(&s->rng, 6);
    if (n_new > MAXT) n_new = MAXT;
    if (!seq_grow(s, q, n_new)) {
        seq_release(s, q); /* out of memory: the sequence is dropped */
        sim_check(s);
        return;
    }
    if (rng_below(&s->rng, 3)) seq_let_go(s, q);
    sim_check(s);
}

static void op_query(msim *s) {
    int32_t tok[MAXT], got[MAXS * SW];
    mseq *q = pick_live(s);
    if (q && rng_below(&s->rng, 2)) memcpy(tok, q->tok, sizeof tok);
    else gen_tokens(s, tok);
    radix_match m;
    verify_match(s, rng_below(&s->rng, 2), tok, (int32_t)rng_below(&s->rng, MAXT + 1), &m,
                 got);
    sim_check(s);
}

static void run_stress(int32_t ps, int32_t n_pages, uint64_t seed, int n_ops) {
    msim *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->e = calloc(MAXE, sizeof *s->e);
    assert_non_null(s->e);
    s->ps = ps;
    s->n_pages = n_pages;
    s->win[0] = 0, s->win[1] = 4, s->win[2] = 8;
    s->rng = seed;
    s->ta.fail_at = -1;
    radix_allocator a = {ta_alloc, ta_free, &s->ta};
    OK(tr_kv_pool_new(n_pages, ps, &a, &s->pool));
    OK(tr_radix_tree_new_units(s->pool, &a, SW, s->win, &s->t));
    for (int b = 0; b < 4; b++)
        for (int32_t i = 0; i < MAXT; i++) s->base[b][i] = 1 + (int32_t)rng_below(&s->rng, 3);
    for (int op = 0; op < n_ops; op++) {
        uint32_t r = rng_below(&s->rng, 100);
        mseq *q;
        if (r < 18) {
            op_start(s);
        } else if (r < 40) {
            op_extend(s);
        } else if (r < 55) {
            if ((q = pick_live(s))) seq_insert(s, q);
        } else if (r < 63) {
            if ((q = pick_live(s))) {
                seq_let_go(s, q);
                sim_check(s);
            }
        } else if (r < 73) {
            if ((q = pick_live(s))) { /* finish */
                seq_insert(s, q);
                seq_release(s, q);
                sim_check(s);
            }
        } else if (r < 77) {
            if ((q = pick_live(s))) { /* abort */
                seq_release(s, q);
                sim_check(s);
            }
        } else if (r < 90) {
            op_query(s);
        } else if (r < 99) {
            do_evict(s, 1 + (int32_t)rng_below(&s->rng, 24));
        } else {
            int32_t free0 = tr_kv_pool_n_free(s->pool);
            int32_t got = tr_radix_tree_flush(s->t);
            check_all(s->t);
            assert_int_equal(tr_kv_pool_n_free(s->pool), free0 + got);
            assert_int_equal(m_sync(s), 0); /* flush never strips */
            verify_pool(s);
        }
    }
    radix_tree_stats fin = stats(s->t);
    print_message("  ps=%d pages=%d: %d ops, hit rate %.3f, %lld evicted nodes, %lld strips, "
                  "%lld shortened matches, %lld holes filled, %lld windowed duplicates, "
                  "%lld allocations refused\n",
                  ps, n_pages, n_ops, fin.hit_rate, (long long)fin.evicted_nodes,
                  (long long)s->n_strips, (long long)s->n_short_matches,
                  (long long)s->n_fills, (long long)s->n_win_dups,
                  (long long)s->n_alloc_fail);
    /* The scenario reached what it is about. */
    assert_true(s->n_strips > 0);
    assert_true(s->n_short_matches > 0);
    assert_true(s->n_fills > 0);
    assert_true(s->n_win_dups > 0);
    /* Release everything: every page free, no node, no byte, no block. */
    for (int i = 0; i < NSEQ; i++)
        if (s->q[i].live) seq_release(s, &s->q[i]);
    sim_check(s);
    tr_radix_tree_flush(s->t);
    assert_int_equal(m_sync(s), 0);
    assert_int_equal(s->n_e, 0);
    check_all(s->t);
    assert_int_equal(tr_kv_pool_n_free(s->pool), n_pages);
    radix_tree_stats st = stats(s->t);
    assert_int_equal(st.n_nodes, 0);
    assert_int_equal(st.n_tree_pages, 0);
    assert_int_equal(st.bytes, 0);
    tr_radix_tree_free(s->t);
    tr_kv_pool_free(s->pool);
    assert_int_equal(s->ta.live, 0);
    free(s->e);
    free(s);
}

static void test_stress_ps2(void **state) {
    (void)state;
    run_stress(2, 150, 0x5eed0002u, 5000);
}

/* Page size 3: the windows 4 and 8 are not multiples of it. */
static void test_stress_ps3(void **state) {
    (void)state;
    run_stress(3, 120, 0x5eed0003u, 5000);
}

static void test_stress_ps4(void **state) {
    (void)state;
    run_stress(4, 90, 0x5eed0004u, 5000);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_units_arguments),
        cmocka_unit_test(test_insert_lock_ownership),
        cmocka_unit_test(test_holes_shorten_match),
        cmocka_unit_test(test_window_boundaries),
        cmocka_unit_test(test_fill_holes_and_duplicates),
        cmocka_unit_test(test_bad_ids_change_nothing),
        cmocka_unit_test(test_windowed_id_below_minus_one),
        cmocka_unit_test(test_evict_unlocked_then_strip),
        cmocka_unit_test(test_evict_one_call_both_phases),
        cmocka_unit_test(test_split_w3),
        cmocka_unit_test(test_stress_ps2),
        cmocka_unit_test(test_stress_ps3),
        cmocka_unit_test(test_stress_ps4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
