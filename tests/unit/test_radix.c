/* test_radix.c — the radix-tree prefix cache (radix/radix_tree.h) on the KV
 * page pool.
 *
 * Checks:
 *  1. Differential: >= 100,000 random operations (start a sequence by
 *     match + lock + alloc, insert after "prefill", extend by "decode",
 *     finish, abort, plain queries, evict, flush) over small token
 *     alphabets so prefixes collide, at page sizes 1, 4 and 16, against a
 *     naive reference (a flat list of cached (namespace, page-aligned
 *     prefix) -> page id). Every match returns exactly the reference's
 *     longest prefix and page ids; every insert returns the reference's page
 *     ids and releases exactly the duplicate pages; after evictions the
 *     reference stays prefix-closed and every locked prefix survives; the
 *     pool's free count equals n_pages - tree pages - private pages; and
 *     tr_radix_tree_check + tr_kv_pool_check pass after every operation. Some
 *     inserts first run the allocation-failure loop of check 2.
 *  2. Allocation failure: each allocation inside insert fails once in turn
 *     (k = 0, 1, ... until the insert succeeds), for a new namespace, a
 *     split, inline->hash children, hash growth and namespace-table growth;
 *     after each failure the dumps of tree and pool, the stats and the
 *     caller's page array are unchanged and check passes.
 *  3. No leak: when every sequence has ended and the tree is flushed, every
 *     page is free, the tree holds no node and no byte, and after freeing
 *     both, the counting allocator has no live block.
 *  4. Sharing: two sequences with a common 1,000-token prefix hold the same
 *     physical pages for its 62 full pages; a third that computed the prefix
 *     on its own gets its 62 duplicates released and its table rewritten.
 *  5. Namespaces isolate; LRU order; locks protect from evict and flush;
 *     partial pages are never cached; bad arguments change nothing;
 *     high-fanout nodes (hash tables) survive removals in random order.
 *
 * Op counts scale down under AddressSanitizer; RADIX_TEST_OPS overrides the
 * per-configuration count of check 1.
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

#include "base/hash.h"
#include "radix/radix.h"
#include "tests/unit/radix_test_util.h"

#define OK(expr) assert_int_equal((expr), TR_OK)

#if defined(__SANITIZE_ADDRESS__)
#define RADIX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RADIX_ASAN 1
#endif
#endif
#ifndef RADIX_ASAN
#define RADIX_ASAN 0
#endif

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


static void check_all(const radix_tree *t) {
    OK(tr_radix_tree_check(t));
    OK(tr_kv_pool_check(tr_radix_tree_pool(t)));
}

/* Inserts through the failure loop: the k-th allocation of the insert
 * fails, for k = 0, 1, ... until it succeeds; each failure must leave
 * everything unchanged. Returns the insert's final status and the number
 * of failures seen. */
static tr_status insert_with_failures(radix_tree *t, test_alloc *ta,
                                      uint64_t ns, const int32_t *tokens,
                                      int32_t *pages, int32_t n,
                                      radix_node **node, int *n_failures) {
    char *before = snapshot(t);
    int32_t n_pages = n / tr_radix_tree_page_size(t);
    int32_t *pages_before = malloc(sizeof(int32_t) * (size_t)(n_pages + 1));
    assert_non_null(pages_before);
    memcpy(pages_before, pages, sizeof(int32_t) * (size_t)n_pages);
    tr_status st;
    int failures = 0;
    for (int64_t k = 0;; k++) {
        ta->fail_at = ta->calls + k;
        st = tr_radix_tree_insert(t, ns, tokens, pages, n, node);
        ta->fail_at = -1;
        if (st != TR_ERR_NOMEM) break;
        failures++;
        char *after = snapshot(t);
        assert_string_equal(before, after);
        free(after);
        assert_memory_equal(pages, pages_before, sizeof(int32_t) * (size_t)n_pages);
        check_all(t);
        assert_true(k < 3); /* insert needs at most 3 allocations */
    }
    free(before);
    free(pages_before);
    if (n_failures) *n_failures = failures;
    return st;
}

/* ---- the reference model ---- */

#define MAX_LEN 192
#define MAX_SEQS 8
#define MAX_ENTRIES 512

typedef struct ref_entry {
    uint64_t ns;
    int32_t k; /* prefix length in pages */
    uint64_t h;
    int32_t page;
    int32_t tokens[MAX_LEN];
} ref_entry;

typedef struct ref_model {
    int32_t ps;
    int32_t n;
    ref_entry *e; /* [MAX_ENTRIES] */
} ref_model;

static uint64_t ref_hash_step(uint64_t h, const int32_t *page, int32_t ps) {
    for (int32_t i = 0; i < ps; i++) h = tr_fnv1a_word(h, (uint32_t)page[i]);
    return h ^ (h >> 29);
}

/* The hash of the first k pages of tokens in namespace ns. */
static uint64_t ref_hash(uint64_t ns, const int32_t *tokens, int32_t k, int32_t ps) {
    uint64_t h = TR_FNV1A_BASIS ^ ns;
    for (int32_t j = 0; j < k; j++) h = ref_hash_step(h, tokens + j * ps, ps);
    return h;
}

static int ref_find(const ref_model *r, uint64_t ns, const int32_t *tokens,
                    int32_t k, uint64_t h) {
    for (int i = 0; i < r->n; i++) {
        const ref_entry *e = &r->e[i];
        if (e->h == h && e->ns == ns && e->k == k &&
            memcmp(e->tokens, tokens, sizeof(int32_t) * (size_t)(k * r->ps)) == 0)
            return i;
    }
    return -1;
}

/* Longest cached prefix: fills pages, returns its length in pages. */
static int32_t ref_match(const ref_model *r, uint64_t ns, const int32_t *tokens,
                         int32_t n, int32_t *pages) {
    uint64_t h = TR_FNV1A_BASIS ^ ns;
    int32_t k = 0;
    for (; k < n / r->ps; k++) {
        h = ref_hash_step(h, tokens + k * r->ps, r->ps);
        int i = ref_find(r, ns, tokens, k + 1, h);
        if (i < 0) break;
        pages[k] = r->e[i].page;
    }
    return k;
}

static void ref_add(ref_model *r, uint64_t ns, const int32_t *tokens, int32_t k,
                    int32_t page) {
    assert_true(r->n < MAX_ENTRIES);
    ref_entry *e = &r->e[r->n++];
    e->ns = ns;
    e->k = k;
    e->page = page;
    memcpy(e->tokens, tokens, sizeof(int32_t) * (size_t)(k * r->ps));
    e->h = ref_hash(ns, tokens, k, r->ps);
}

/* Drops the entries whose page left the tree, then checks the model is
 * still prefix-closed (eviction took whole subtrees from the leaves). */
static void ref_sync(ref_model *r, const kv_pool *pool) {
    int w = 0;
    for (int i = 0; i < r->n; i++)
        if (tr_kv_pool_page_in_tree(pool, r->e[i].page)) r->e[w++] = r->e[i];
    r->n = w;
    for (int i = 0; i < r->n; i++) {
        const ref_entry *e = &r->e[i];
        if (e->k == 1) continue;
        uint64_t h = ref_hash(e->ns, e->tokens, e->k - 1, r->ps);
        assert_true(ref_find(r, e->ns, e->tokens, e->k - 1, h) >= 0);
    }
}

/* ---- simulated sequences ---- */

typedef struct seq {
    bool live;
    uint64_t ns;
    int32_t n;                 /* tokens */
    int32_t tokens[MAX_LEN];
    int32_t pages[MAX_LEN];    /* page table, ceil(n / ps) entries */
    bool priv[MAX_LEN];        /* the sequence owns a reference on pages[i] */
    radix_node *handle;        /* locked node, or NULL */
    int32_t locked_pages;      /* pages[0..locked_pages) are tree pages it locks */
} seq;

typedef struct sim {
    int32_t ps;
    int32_t n_pages;
    int alphabet;
    int max_len;
    uint64_t rng;
    test_alloc ta;
    kv_pool *pool;
    radix_tree *t;
    ref_model ref;
    seq seqs[MAX_SEQS];
    int32_t base[6][MAX_LEN]; /* shared "templates" so prefixes collide */
    uint64_t ns_choices[3];
    int64_t n_failure_loops, n_failures, n_evict_short;
} sim;

static int32_t pages_for(const sim *s, int32_t n) {
    return (n + s->ps - 1) / s->ps;
}

/* A token string made of a template's prefix and a random tail. */
static int32_t gen_tokens(sim *s, int32_t *out) {
    int32_t len = 1 + (int32_t)rng_below(&s->rng, (uint32_t)s->max_len);
    /* Mostly long template prefixes, so that hits are common. */
    int32_t cut = rng_below(&s->rng, 4)
                      ? len - (int32_t)rng_below(&s->rng, (uint32_t)len / 2 + 1)
                      : (int32_t)rng_below(&s->rng, (uint32_t)len + 1);
    const int32_t *b = s->base[rng_below(&s->rng, 6)];
    for (int32_t i = 0; i < len; i++)
        out[i] = i < cut ? b[i] : (int32_t)rng_below(&s->rng, (uint32_t)s->alphabet);
    return len;
}

static void verify_match(sim *s, uint64_t ns, const int32_t *tokens, int32_t n,
                         bool want_pages, radix_match *m, int32_t *got) {
    int32_t expect[MAX_LEN];
    int32_t k = ref_match(&s->ref, ns, tokens, n, expect);
    OK(tr_radix_tree_match(s->t, ns, tokens, n, want_pages ? got : NULL, m));
    assert_int_equal(m->n_pages, k);
    assert_int_equal(m->n_tokens, k * s->ps);
    assert_true((m->node == NULL) == (k == 0));
    if (want_pages && k) assert_memory_equal(got, expect, sizeof(int32_t) * (size_t)k);
    if (m->node) assert_true(tr_radix_node_n_pages(m->node) >= 1);
}

static int32_t count_private(const sim *s) {
    int32_t c = 0;
    for (int i = 0; i < MAX_SEQS; i++) {
        const seq *q = &s->seqs[i];
        if (!q->live) continue;
        for (int32_t j = 0; j < pages_for(s, q->n); j++) c += q->priv[j];
    }
    return c;
}

/* Every live sequence's locked prefix is still cached with its pages. */
static void verify_locked_prefixes(sim *s) {
    for (int i = 0; i < MAX_SEQS; i++) {
        const seq *q = &s->seqs[i];
        if (!q->live || q->locked_pages == 0) continue;
        int32_t expect[MAX_LEN];
        int32_t k = ref_match(&s->ref, q->ns, q->tokens, q->n, expect);
        assert_true(k >= q->locked_pages);
        assert_memory_equal(expect, q->pages, sizeof(int32_t) * (size_t)q->locked_pages);
        assert_true(tr_radix_node_lock_count(q->handle) >= 1);
    }
}

static void do_evict(sim *s, int32_t want) {
    int32_t free_before = tr_kv_pool_n_free(s->pool);
    int32_t got = tr_radix_tree_evict(s->t, want);
    assert_int_equal(tr_kv_pool_n_free(s->pool), free_before + got);
    if (got < want) {
        /* Stopped early: nothing evictable is left. */
        radix_tree_stats st;
        tr_radix_tree_stats_get(s->t, &st);
        assert_int_equal(st.pages_cached, 0);
        s->n_evict_short++;
    }
    ref_sync(&s->ref, s->pool);
    verify_locked_prefixes(s);
}

/* Allocates n pages, evicting on shortage. */
static bool alloc_pages(sim *s, int32_t n, int32_t *out) {
    tr_status st = tr_kv_pool_alloc(s->pool, n, out);
    if (st == TR_ERR_FULL) {
        do_evict(s, n - tr_kv_pool_n_free(s->pool));
        st = tr_kv_pool_alloc(s->pool, n, out);
    }
    if (st == TR_ERR_FULL) return false;
    OK(st);
    return true;
}

static void op_start(sim *s) {
    seq *q = NULL;
    for (int i = 0; i < MAX_SEQS; i++)
        if (!s->seqs[i].live) q = &s->seqs[i];
    if (!q) return;
    memset(q, 0, sizeof *q);
    q->ns = s->ns_choices[rng_below(&s->rng, 3)];
    q->n = gen_tokens(s, q->tokens);
    radix_match m;
    verify_match(s, q->ns, q->tokens, q->n, true, &m, q->pages);
    OK(tr_radix_tree_lock(s->t, m.node));
    int32_t total = pages_for(s, q->n);
    if (!alloc_pages(s, total - m.n_pages, q->pages + m.n_pages)) {
        OK(tr_radix_tree_unlock(s->t, m.node));
        return;
    }
    for (int32_t j = m.n_pages; j < total; j++) q->priv[j] = true;
    q->handle = m.node;
    q->locked_pages = m.n_pages;
    q->live = true;
}

/* Inserts q's first k tokens and checks the outcome against the model.
 * keep_lock: lock the new node and drop the old lock (still running);
 * otherwise drop the old lock only (finished). */
static void insert_seq(sim *s, seq *q, int32_t k, bool keep_lock) {
    const int32_t ps = s->ps, F = k / ps;
    int32_t expect[MAX_LEN];
    int32_t k_cached = ref_match(&s->ref, q->ns, q->tokens, k, expect);
    int32_t n_dup = 0;
    for (int32_t i = 0; i < F; i++) {
        if (i >= k_cached) expect[i] = q->pages[i];
        else if (expect[i] != q->pages[i]) {
            assert_true(q->priv[i]); /* only private pages can differ */
            n_dup++;
        }
    }
    int32_t free_before = tr_kv_pool_n_free(s->pool);
    radix_tree_stats st0;
    tr_radix_tree_stats_get(s->t, &st0);
    radix_node *node = (radix_node *)0x1;
    if (rng_below(&s->rng, 20) == 0) {
        int fails = 0;
        OK(insert_with_failures(s->t, &s->ta, q->ns, q->tokens, q->pages, k,
                                &node, &fails));
        s->n_failure_loops++;
        s->n_failures += fails;
    } else {
        OK(tr_radix_tree_insert(s->t, q->ns, q->tokens, q->pages, k, &node));
    }
    assert_memory_equal(q->pages, expect, sizeof(int32_t) * (size_t)F);
    assert_int_equal(tr_kv_pool_n_free(s->pool), free_before + n_dup);
    radix_tree_stats st1;
    tr_radix_tree_stats_get(s->t, &st1);
    assert_int_equal(st1.duplicate_pages - st0.duplicate_pages, n_dup);
    assert_int_equal(st1.inserted_pages - st0.inserted_pages, F - k_cached);
    assert_true((node == NULL) == (F == 0));
    for (int32_t i = k_cached; i < F; i++) ref_add(&s->ref, q->ns, q->tokens, i + 1, q->pages[i]);
    for (int32_t i = 0; i < F; i++) q->priv[i] = false;
    if (keep_lock) {
        OK(tr_radix_tree_lock(s->t, node));
        OK(tr_radix_tree_unlock(s->t, q->handle));
        q->handle = node;
        q->locked_pages = F;
    } else {
        OK(tr_radix_tree_unlock(s->t, q->handle));
        q->handle = NULL;
        q->locked_pages = 0;
    }
}

static seq *pick_live(sim *s) {
    int start = (int)rng_below(&s->rng, MAX_SEQS);
    for (int i = 0; i < MAX_SEQS; i++) {
        seq *q = &s->seqs[(start + i) % MAX_SEQS];
        if (q->live) return q;
    }
    return NULL;
}

static void release_private(sim *s, seq *q) {
    for (int32_t j = 0; j < pages_for(s, q->n); j++) {
        if (!q->priv[j]) continue;
        OK(tr_kv_pool_unref(s->pool, q->pages[j]));
        q->priv[j] = false;
    }
}

static void op_insert(sim *s) {
    seq *q = pick_live(s);
    if (!q) return;
    int32_t lo = q->locked_pages * s->ps;
    int32_t k = lo + (int32_t)rng_below(&s->rng, (uint32_t)(q->n - lo + 1));
    insert_seq(s, q, k, true);
}

static void op_extend(sim *s) {
    seq *q = pick_live(s);
    if (!q) return;
    int32_t r = 1 + (int32_t)rng_below(&s->rng, 2 * (uint32_t)s->ps + 2);
    if (q->n + r > s->max_len) return;
    int32_t old_total = pages_for(s, q->n), new_total = pages_for(s, q->n + r);
    if (!alloc_pages(s, new_total - old_total, q->pages + old_total)) return;
    for (int32_t j = old_total; j < new_total; j++) q->priv[j] = true;
    /* Continue one of the templates half of the time (collisions). */
    const int32_t *b = s->base[rng_below(&s->rng, 6)];
    bool follow = rng_below(&s->rng, 2);
    for (int32_t i = q->n; i < q->n + r; i++)
        q->tokens[i] = follow ? b[i] : (int32_t)rng_below(&s->rng, (uint32_t)s->alphabet);
    q->n += r;
}

static void op_finish(sim *s) {
    seq *q = pick_live(s);
    if (!q) return;
    insert_seq(s, q, q->n, false);
    release_private(s, q);
    q->live = false;
}

static void op_abort(sim *s) {
    seq *q = pick_live(s);
    if (!q) return;
    OK(tr_radix_tree_unlock(s->t, q->handle));
    release_private(s, q);
    q->live = false;
}

static void op_query(sim *s) {
    int32_t tokens[MAX_LEN], got[MAX_LEN];
    int32_t n = gen_tokens(s, tokens);
    radix_match m;
    verify_match(s, s->ns_choices[rng_below(&s->rng, 3)], tokens, n,
                 rng_below(&s->rng, 4) != 0, &m, got);
}

static void op_flush(sim *s) {
    int32_t free_before = tr_kv_pool_n_free(s->pool);
    int32_t got = tr_radix_tree_flush(s->t);
    assert_int_equal(tr_kv_pool_n_free(s->pool), free_before + got);
    ref_sync(&s->ref, s->pool);
    verify_locked_prefixes(s);
    radix_tree_stats st;
    tr_radix_tree_stats_get(s->t, &st);
    assert_int_equal(st.pages_cached, 0); /* what is left is locked */
}

static void verify_accounting(sim *s) {
    radix_tree_stats st;
    tr_radix_tree_stats_get(s->t, &st);
    assert_int_equal(st.n_tree_pages, s->ref.n);
    assert_int_equal(st.n_tree_tokens, (int64_t)s->ref.n * s->ps);
    int32_t priv = count_private(s);
    assert_int_equal(tr_kv_pool_n_free(s->pool), s->n_pages - s->ref.n - priv);
    assert_int_equal(st.pages_free + st.pages_locked + st.pages_cached, s->n_pages);
    /* Private pages are locked, so at least that many are. */
    assert_true(st.pages_locked >= priv);
}

static int64_t ops_per_config(int64_t dflt) {
    const char *env = getenv("RADIX_TEST_OPS");
    if (env && *env) return atoll(env);
    return RADIX_ASAN ? dflt / 4 : dflt;
}

static void run_differential(int32_t ps, int alphabet, int32_t n_pages,
                             int max_len, int64_t n_ops, uint64_t seed) {
    sim *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->ps = ps;
    s->n_pages = n_pages;
    s->alphabet = alphabet;
    s->max_len = max_len;
    s->rng = seed;
    s->ta.fail_at = -1;
    s->ref.ps = ps;
    s->ref.e = calloc(MAX_ENTRIES, sizeof(ref_entry));
    assert_non_null(s->ref.e);
    s->ns_choices[0] = 0;
    s->ns_choices[1] = 1;
    s->ns_choices[2] = 0xdeadbeefcafef00dull;
    /* Templates branch off each other at random points (a tree of them). */
    for (int b = 0; b < 6; b++) {
        int from = b ? (int)rng_below(&s->rng, (uint32_t)b) : 0;
        int shared = b ? (int)rng_below(&s->rng, (uint32_t)max_len) : 0;
        for (int i = 0; i < MAX_LEN; i++)
            s->base[b][i] = i < shared ? s->base[from][i]
                                       : (int32_t)rng_below(&s->rng, (uint32_t)alphabet);
    }
    radix_allocator a = {ta_alloc, ta_free, &s->ta};
    OK(tr_kv_pool_new(n_pages, ps, &a, &s->pool));
    OK(tr_radix_tree_new(s->pool, &a, &s->t));

    int64_t counts[8] = {0}, tree_pages_sum = 0;
    for (int64_t op = 0; op < n_ops; op++) {
        uint32_t r = rng_below(&s->rng, 100);
        int kind;
        if (r < 16) kind = 0, op_start(s);
        else if (r < 32) kind = 1, op_insert(s);
        else if (r < 50) kind = 2, op_extend(s);
        else if (r < 62) kind = 3, op_finish(s);
        else if (r < 65) kind = 4, op_abort(s);
        else if (r < 93) kind = 5, op_query(s);
        else if (r < 99) kind = 6, do_evict(s, 1 + (int32_t)rng_below(&s->rng, (uint32_t)n_pages / 8));
        else kind = 7, op_flush(s);
        counts[kind]++;
        check_all(s->t);
        verify_accounting(s);
        tree_pages_sum += s->ref.n;
    }

    /* Every sequence ends; then nothing may remain. */
    for (int i = 0; i < MAX_SEQS; i++) {
        seq *q = &s->seqs[i];
        if (!q->live) continue;
        insert_seq(s, q, q->n, false);
        release_private(s, q);
        q->live = false;
        check_all(s->t);
    }
    op_flush(s);
    check_all(s->t);
    radix_tree_stats st;
    tr_radix_tree_stats_get(s->t, &st);
    assert_int_equal(tr_kv_pool_n_free(s->pool), n_pages);
    assert_int_equal(st.pages_free, n_pages);
    assert_int_equal(st.n_nodes, 0);
    assert_int_equal(st.n_namespaces, 0);
    assert_int_equal(st.n_tree_pages, 0);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(s->ref.n, 0);
    print_message("  ps=%d alphabet=%d pages=%d: %lld ops (start %lld insert %lld "
                  "extend %lld finish %lld abort %lld query %lld evict %lld "
                  "flush %lld), hit rate %.3f, mean tree pages %.1f, %lld "
                  "evictions, %lld short, %lld failure loops / %lld injected "
                  "failures\n",
                  ps, alphabet, n_pages, (long long)n_ops, (long long)counts[0],
                  (long long)counts[1], (long long)counts[2], (long long)counts[3],
                  (long long)counts[4], (long long)counts[5], (long long)counts[6],
                  (long long)counts[7], st.hit_rate,
                  n_ops ? (double)tree_pages_sum / (double)n_ops : 0.0,
                  (long long)st.evicted_nodes,
                  (long long)s->n_evict_short, (long long)s->n_failure_loops,
                  (long long)s->n_failures);
    /* The run must have exercised what it claims to. */
    assert_true(st.hit_tokens > 0 && st.duplicate_pages > 0 && st.evicted_nodes > 0);
    assert_true(s->n_failures > 0);
    tr_radix_tree_free(s->t);
    tr_kv_pool_free(s->pool);
    assert_int_equal(s->ta.live, 0);
    free(s->ref.e);
    free(s);
}

static void test_differential_ps1(void **state) {
    (void)state;
    int64_t n = ops_per_config(60000);
    run_differential(1, 3, 160, 24, n, 1);
    run_differential(1, 10, 160, 24, n, 2); /* wide fanout: hash children */
}

static void test_differential_ps4(void **state) {
    (void)state;
    run_differential(4, 2, 160, 64, ops_per_config(60000), 3);
}

static void test_differential_ps16(void **state) {
    (void)state;
    run_differential(16, 2, 96, 160, ops_per_config(50000), 4);
}

/* ---- targeted tests ---- */

typedef struct env {
    test_alloc ta;
    radix_allocator a;
    kv_pool *pool;
    radix_tree *t;
} env;

static env *env_new(int32_t n_pages, int32_t ps) {
    env *e = calloc(1, sizeof *e);
    assert_non_null(e);
    e->ta.fail_at = -1;
    e->a = (radix_allocator){ta_alloc, ta_free, &e->ta};
    OK(tr_kv_pool_new(n_pages, ps, &e->a, &e->pool));
    OK(tr_radix_tree_new(e->pool, &e->a, &e->t));
    return e;
}

static void env_free(env *e) {
    tr_radix_tree_free(e->t);
    tr_kv_pool_free(e->pool);
    assert_int_equal(e->ta.live, 0);
    free(e);
}

/* Allocates fresh pages for tokens[0..n) and inserts them; returns node. */
static radix_node *put(env *e, uint64_t ns, const int32_t *tokens, int32_t n,
                       int32_t *pages) {
    int32_t ps = tr_kv_pool_page_size(e->pool);
    OK(tr_kv_pool_alloc(e->pool, n / ps, pages));
    radix_node *x;
    OK(tr_radix_tree_insert(e->t, ns, tokens, pages, n, &x));
    check_all(e->t);
    return x;
}

static int32_t match_n(env *e, uint64_t ns, const int32_t *tokens, int32_t n,
                       int32_t *pages) {
    radix_match m;
    OK(tr_radix_tree_match(e->t, ns, tokens, n, pages, &m));
    return m.n_tokens;
}

static void test_split_and_duplicates(void **state) {
    (void)state;
    /* The header's drawing: "Tran|slat|e:  " then "Tran|slat|ion:". */
    env *e = env_new(32, 4);
    int32_t a[12] = {'T', 'r', 'a', 'n', 's', 'l', 'a', 't', 'e', ':', ' ', ' '};
    int32_t b[12] = {'T', 'r', 'a', 'n', 's', 'l', 'a', 't', 'i', 'o', 'n', ':'};
    int32_t pa[3], pb[3], got[3];
    put(e, 7, a, 12, pa);
    assert_int_equal(tr_kv_pool_page_state(e->pool, pa[0]), KV_PAGE_CACHED);
    OK(tr_kv_pool_alloc(e->pool, 3, pb));
    int32_t pb_orig[3] = {pb[0], pb[1], pb[2]};
    radix_node *x;
    OK(tr_radix_tree_insert(e->t, 7, b, pb, 12, &x));
    check_all(e->t);
    /* Duplicates released and the table rewritten. */
    assert_int_equal(pb[0], pa[0]);
    assert_int_equal(pb[1], pa[1]);
    assert_int_equal(pb[2], pb_orig[2]);
    assert_int_equal(tr_kv_pool_page_state(e->pool, pb_orig[0]), KV_PAGE_FREE);
    assert_int_equal(tr_kv_pool_page_state(e->pool, pb_orig[1]), KV_PAGE_FREE);
    radix_tree_stats st;
    tr_radix_tree_stats_get(e->t, &st);
    assert_int_equal(st.n_nodes, 3); /* "Tran|slat", "e:  ", "ion:" */
    assert_int_equal(st.n_tree_pages, 4);
    assert_int_equal(st.duplicate_pages, 2);
    assert_int_equal(tr_radix_node_n_pages(x), 1);
    /* Both still match in full, with their own last page. */
    assert_int_equal(match_n(e, 7, a, 12, got), 12);
    assert_memory_equal(got, pa, sizeof pa);
    assert_int_equal(match_n(e, 7, b, 12, got), 12);
    assert_memory_equal(got, pb, sizeof pb);
    /* Divergence inside a page shares nothing of that page. */
    int32_t c[8] = {'T', 'r', 'a', 'n', 's', 'l', 'o', 't'};
    assert_int_equal(match_n(e, 7, c, 8, got), 4);
    /* A prefix of an edge matches up to the page border. */
    assert_int_equal(match_n(e, 7, a, 7, got), 4);
    assert_int_equal(match_n(e, 7, a, 3, got), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tr_radix_tree_dump(e->t, f);
    fclose(f);
    assert_non_null(strstr(buf, "[2 pages] lock=0 tokens: 84 114 97 110 | 115 108 97 116"));
    free(buf);
    tr_radix_tree_flush(e->t);
    assert_int_equal(tr_kv_pool_n_free(e->pool), 32);
    env_free(e);
}

static void test_partial_pages_not_cached(void **state) {
    (void)state;
    env *e = env_new(16, 4);
    int32_t tok[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    int32_t pages[3], got[3];
    OK(tr_kv_pool_alloc(e->pool, 3, pages)); /* 2 full pages + 1 partial */
    radix_node *x;
    OK(tr_radix_tree_insert(e->t, 0, tok, pages, 10, &x));
    check_all(e->t);
    assert_int_equal(tr_radix_node_n_pages(x), 2);
    /* The partial page stays the caller's. */
    assert_false(tr_kv_pool_page_in_tree(e->pool, pages[2]));
    assert_int_equal(tr_kv_pool_page_state(e->pool, pages[2]), KV_PAGE_LOCKED);
    assert_int_equal(match_n(e, 0, tok, 10, got), 8);
    /* Keys shorter than a page insert nothing. */
    OK(tr_radix_tree_insert(e->t, 5, tok, pages + 2, 3, &x));
    assert_null(x);
    radix_tree_stats st;
    tr_radix_tree_stats_get(e->t, &st);
    assert_int_equal(st.n_namespaces, 1);
    OK(tr_kv_pool_unref(e->pool, pages[2]));
    tr_radix_tree_flush(e->t);
    assert_int_equal(tr_kv_pool_n_free(e->pool), 16);
    env_free(e);
}

static void test_page_size_one(void **state) {
    (void)state;
    env *e = env_new(64, 1);
    int32_t a[5] = {1, 2, 3, 4, 5}, b[5] = {1, 2, 9, 9, 9}, c[2] = {1, 7};
    int32_t pa[5], pb[5], pc[2], got[5];
    put(e, 0, a, 5, pa);
    put(e, 0, b, 5, pb);
    put(e, 0, c, 2, pc);
    assert_int_equal(pb[0], pa[0]);
    assert_int_equal(pb[1], pa[1]);
    assert_int_equal(pc[0], pa[0]);
    assert_int_equal(match_n(e, 0, a, 5, got), 5);
    assert_memory_equal(got, pa, sizeof pa);
    int32_t q[4] = {1, 2, 3, 8};
    assert_int_equal(match_n(e, 0, q, 4, got), 3);
    radix_tree_stats st;
    tr_radix_tree_stats_get(e->t, &st);
    /* [1] -> {[2] -> {[3 4 5], [9 9 9]}, [7]} */
    assert_int_equal(st.n_nodes, 5);
    assert_int_equal(st.n_tree_pages, 5 + 3 + 1);
    assert_int_equal(tr_radix_tree_flush(e->t), 9);
    env_free(e);
}

static void test_sharing_long_prefix(void **state) {
    (void)state;
    enum { PS = 16, NP = 512 };
    env *e = env_new(NP, PS);
    static int32_t ta[1200], tb[1300], tc[1100];
    static int32_t pa[80], pb[90], pc[80], got[90];
    uint64_t rng = 42;
    for (int i = 0; i < 1000; i++) ta[i] = tb[i] = tc[i] = (int32_t)rng_below(&rng, 49152);
    for (int i = 1000; i < 1300; i++) {
        if (i < 1200) ta[i] = (int32_t)rng_below(&rng, 49152);
        tb[i] = (int32_t)rng_below(&rng, 49152);
        if (i < 1100) tc[i] = (int32_t)rng_below(&rng, 49152);
    }
    /* C starts before anyone cached the prefix: it computes its own. */
    OK(tr_kv_pool_alloc(e->pool, 69, pc)); /* ceil(1100 / 16) */

    /* A: miss, compute, insert, keep running. */
    radix_match m;
    OK(tr_radix_tree_match(e->t, 1, ta, 1200, got, &m));
    assert_int_equal(m.n_tokens, 0);
    OK(tr_kv_pool_alloc(e->pool, 75, pa));
    radix_node *xa;
    OK(tr_radix_tree_insert(e->t, 1, ta, pa, 1200, &xa));
    OK(tr_radix_tree_lock(e->t, xa));

    /* B: hits the 62 full pages of the common prefix (992 tokens). */
    OK(tr_radix_tree_match(e->t, 1, tb, 1300, pb, &m));
    assert_int_equal(m.n_tokens, 992);
    assert_int_equal(m.n_pages, 62);
    assert_memory_equal(pb, pa, 62 * sizeof(int32_t));
    OK(tr_radix_tree_lock(e->t, m.node));
    OK(tr_kv_pool_alloc(e->pool, 82 - 62, pb + 62));
    radix_node *xb;
    OK(tr_radix_tree_insert(e->t, 1, tb, pb, 1300, &xb));
    OK(tr_radix_tree_lock(e->t, xb));
    OK(tr_radix_tree_unlock(e->t, m.node));
    check_all(e->t);
    for (int i = 0; i < 62; i++) {
        assert_int_equal(pb[i], pa[i]); /* same physical pages */
        assert_int_equal(tr_kv_pool_page_state(e->pool, pa[i]), KV_PAGE_LOCKED);
    }
    assert_true(pb[62] != pa[62]);

    /* C inserts its own copy: its 62 duplicates go back to the pool. */
    int32_t free_before = tr_kv_pool_n_free(e->pool);
    int32_t pc_orig[62];
    memcpy(pc_orig, pc, sizeof pc_orig);
    radix_node *xc;
    OK(tr_radix_tree_insert(e->t, 1, tc, pc, 1100, &xc));
    check_all(e->t);
    assert_int_equal(tr_kv_pool_n_free(e->pool), free_before + 62);
    assert_memory_equal(pc, pa, 62 * sizeof(int32_t));
    for (int i = 0; i < 62; i++)
        assert_int_equal(tr_kv_pool_page_state(e->pool, pc_orig[i]), KV_PAGE_FREE);
    radix_tree_stats st;
    tr_radix_tree_stats_get(e->t, &st);
    assert_int_equal(st.duplicate_pages, 62); /* B's matched pages are not */

    /* Every sequence ends: no page may stay allocated. */
    OK(tr_radix_tree_unlock(e->t, xa));
    OK(tr_radix_tree_unlock(e->t, xb));
    OK(tr_kv_pool_unref(e->pool, pb[81])); /* B's partial page: 1300 % 16 */
    OK(tr_kv_pool_unref(e->pool, pc[68]));
    tr_radix_tree_flush(e->t);
    check_all(e->t);
    assert_int_equal(tr_kv_pool_n_free(e->pool), NP);
    env_free(e);
}

static void test_namespaces_isolate(void **state) {
    (void)state;
    env *e = env_new(64, 2);
    int32_t tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int32_t p1[4], p2[4], got[4];
    put(e, 1, tok, 8, p1);
    assert_int_equal(match_n(e, 2, tok, 8, got), 0);
    assert_int_equal(match_n(e, 1, tok, 8, got), 8);
    OK(tr_kv_pool_alloc(e->pool, 4, p2));
    int32_t p2_orig[4];
    memcpy(p2_orig, p2, sizeof p2);
    OK(tr_radix_tree_insert(e->t, 2, tok, p2, 8, NULL));
    check_all(e->t);
    /* Namespace 2 took its own pages, nothing was deduplicated. */
    assert_memory_equal(p2, p2_orig, sizeof p2);
    for (int i = 0; i < 4; i++) assert_true(p2[i] != p1[i]);
    assert_int_equal(match_n(e, 2, tok, 8, got), 8);
    assert_memory_equal(got, p2, sizeof p2);
    assert_int_equal(match_n(e, 1, tok, 8, got), 8);
    assert_memory_equal(got, p1, sizeof p1);
    /* Many namespaces (table growth), each isolated. */
    for (uint64_t ns = 100; ns < 140; ns++) {
        int32_t p[4];
        put(e, ns * 0x9e3779b97f4a7c15ull, tok, 2, p);
    }
    radix_tree_stats st;
    tr_radix_tree_stats_get(e->t, &st);
    assert_int_equal(st.n_namespaces, 42);
    assert_int_equal(match_n(e, 3, tok, 8, got), 0);
    assert_int_equal(match_n(e, 120 * 0x9e3779b97f4a7c15ull, tok, 8, got), 2);
    tr_radix_tree_flush(e->t);
    tr_radix_tree_stats_get(e->t, &st);
    assert_int_equal(st.n_namespaces, 0);
    assert_int_equal(tr_kv_pool_n_free(e->pool), 64);
    env_free(e);
}

static void test_lru_order(void **state) {
    (void)state;
    env *e = env_new(64, 1);
    int32_t a[3] = {1, 1, 1}, b[3] = {2, 2, 2}, c[3] = {3, 3, 3};
    int32_t pa[3], pb[3], pc[3], got[3];
    put(e, 0, a, 3, pa);
    put(e, 0, b, 3, pb);
    put(e, 0, c, 3, pc);
    assert_int_equal(match_n(e, 0, a, 3, got), 3); /* A is now the newest */
    /* One page needed: the least recently used leaf, B, goes whole. */
    assert_int_equal(tr_radix_tree_evict(e->t, 1), 3);
    check_all(e->t);
    assert_int_equal(match_n(e, 0, b, 3, got), 0);
    assert_int_equal(match_n(e, 0, a, 3, got), 3);
    assert_int_equal(match_n(e, 0, c, 3, got), 3); /* C newest, A next */
    assert_int_equal(tr_radix_tree_evict(e->t, 2), 3);
    assert_int_equal(match_n(e, 0, a, 3, got), 0);
    assert_int_equal(match_n(e, 0, c, 3, got), 3);
    tr_radix_tree_flush(e->t);

    /* A parent whose children went becomes a leaf and waits its turn. */
    int32_t x[4] = {5, 5, 6, 6}, y[4] = {5, 5, 7, 7}, z[2] = {8, 8};
    int32_t px[4], py[4], pz[2];
    put(e, 0, x, 4, px);
    put(e, 0, y, 4, py); /* splits into [5 5] -> {[6 6], [7 7]} */
    put(e, 0, z, 2, pz);
    assert_int_equal(match_n(e, 0, z, 2, got), 2);
    assert_int_equal(tr_radix_tree_evict(e->t, 1), 2); /* [6 6] */
    assert_int_equal(match_n(e, 0, x, 4, got), 2);
    assert_int_equal(match_n(e, 0, z, 2, got), 2);  /* z newest again */
    assert_int_equal(tr_radix_tree_evict(e->t, 1), 2); /* [7 7] */
    assert_int_equal(match_n(e, 0, y, 4, got), 2);
    /* [5 5] was touched by that match: now z is the oldest. */
    assert_int_equal(tr_radix_tree_evict(e->t, 1), 2);
    assert_int_equal(match_n(e, 0, z, 2, got), 0);
    assert_int_equal(match_n(e, 0, x, 2, got), 2);
    assert_int_equal(tr_radix_tree_evict(e->t, 1), 2); /* [5 5] itself */
    assert_int_equal(match_n(e, 0, x, 2, got), 0);
    check_all(e->t);
    assert_int_equal(tr_radix_tree_evict(e->t, 1), 0); /* nothing left */
    radix_tree_stats st;
    tr_radix_tree_stats_get(e->t, &st);
    assert_int_equal(st.n_namespaces, 0);
    env_free(e);
}

static void test_locks_protect(void **state) {
    (void)state;
    env *e = env_new(32, 2);
    int32_t x[6] = {1, 1, 2, 2, 3, 3}, y[6] = {1, 1, 2, 2, 4, 4};
    int32_t px[3], py[3], got[3];
    put(e, 0, x, 6, px);
    radix_node *ny = put(e, 0, y, 6, py); /* [1 1 2 2] -> {[3 3], [4 4]} */
    radix_match m;
    OK(tr_radix_tree_match(e->t, 0, x, 5, got, &m)); /* 5 tokens: 2 full pages */
    assert_int_equal(m.n_pages, 2);
    OK(tr_radix_tree_lock(e->t, ny));
    OK(tr_radix_tree_lock(e->t, ny)); /* twice */
    assert_int_equal(tr_radix_node_lock_count(ny), 2);
    kv_pool_stats ps;
    tr_kv_pool_stats_get(e->pool, &ps);
    assert_int_equal(ps.n_locked, 3); /* [1 1 2 2] and [4 4] pinned */
    assert_int_equal(ps.n_cached, 1); /* [3 3] */
    assert_int_equal(tr_radix_tree_flush(e->t), 1);
    check_all(e->t);
    assert_int_equal(match_n(e, 0, y, 6, got), 6);
    assert_int_equal(tr_radix_tree_evict(e->t, 100), 0);
    OK(tr_radix_tree_unlock(e->t, ny));
    assert_int_equal(tr_radix_tree_flush(e->t), 0); /* still one lock */
    OK(tr_radix_tree_unlock(e->t, ny));
    assert_int_equal(tr_radix_tree_unlock(e->t, ny), TR_ERR_STATE);
    check_all(e->t);
    tr_kv_pool_stats_get(e->pool, &ps);
    assert_int_equal(ps.n_cached, 3);
    assert_int_equal(ps.n_locked, 0);
    /* The pool refuses to drop the tree's own reference. */
    assert_int_equal(tr_kv_pool_unref(e->pool, py[0]), TR_ERR_STATE);
    /* An extra reference outlives eviction. */
    OK(tr_kv_pool_ref(e->pool, py[2]));
    assert_int_equal(tr_kv_pool_page_state(e->pool, py[2]), KV_PAGE_LOCKED);
    assert_int_equal(tr_radix_tree_flush(e->t), 2);
    assert_int_equal(tr_kv_pool_page_state(e->pool, py[2]), KV_PAGE_LOCKED);
    assert_false(tr_kv_pool_page_in_tree(e->pool, py[2]));
    OK(tr_kv_pool_unref(e->pool, py[2]));
    assert_int_equal(tr_kv_pool_n_free(e->pool), 32);
    /* Lock/unlock of NULL are no-ops. */
    OK(tr_radix_tree_lock(e->t, NULL));
    OK(tr_radix_tree_unlock(e->t, NULL));
    env_free(e);
}

static void test_bad_arguments_change_nothing(void **state) {
    (void)state;
    env *e = env_new(16, 2);
    int32_t tok[6] = {1, 2, 3, 4, 5, 6};
    int32_t p[3];
    put(e, 0, tok, 4, p); /* pages p[0], p[1] in the tree */
    int32_t priv[2];
    OK(tr_kv_pool_alloc(e->pool, 2, priv));
    char *before = snapshot(e->t);
    struct {
        int32_t pages[3];
    } cases[] = {
        {{p[0], p[1], p[0]}},     /* a tree page at another position */
        {{p[0], p[1], 15}},       /* a free page (nobody owns it) */
        {{p[0], p[1], 16}},       /* out of range */
        {{p[0], p[1], -1}},
        {{priv[0], p[1], priv[0]}}, /* same private page twice */
        {{p[1], p[0], priv[0]}},  /* tree pages swapped */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t pages[3];
        memcpy(pages, cases[i].pages, sizeof pages);
        assert_int_equal(tr_radix_tree_insert(e->t, 0, tok, pages, 6, NULL),
                         TR_ERR_INVALID_ARG);
        assert_memory_equal(pages, cases[i].pages, sizeof pages);
        char *after = snapshot(e->t);
        assert_string_equal(before, after);
        free(after);
        check_all(e->t);
    }
    free(before);
    radix_match m;
    assert_int_equal(tr_radix_tree_match(e->t, 0, tok, -1, NULL, &m), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_radix_tree_match(e->t, 0, NULL, 4, NULL, &m), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_radix_tree_insert(e->t, 0, tok, NULL, 4, NULL), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_radix_tree_insert(e->t, 0, tok, p, -2, NULL), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_radix_tree_new(NULL, NULL, &e->t), TR_ERR_INVALID_ARG);
    /* A valid insert with a private third page still works. */
    int32_t good[3] = {p[0], p[1], priv[0]};
    OK(tr_radix_tree_insert(e->t, 0, tok, good, 6, NULL));
    check_all(e->t);
    OK(tr_kv_pool_unref(e->pool, priv[1]));
    tr_radix_tree_flush(e->t);
    assert_int_equal(tr_kv_pool_n_free(e->pool), 16);
    env_free(e);
}

/* Pool and tree constructors: the k-th allocation fails for every k:
 * TR_ERR_NOMEM, *out untouched, no block left. */
static void test_constructors_allocation_failure(void **state) {
    (void)state;
    test_alloc ta = {.fail_at = -1};
    radix_allocator a = {ta_alloc, ta_free, &ta};
    int64_t k = 0;
    for (;; k++) {
        ta = (test_alloc){.fail_at = k};
        kv_pool *pool = (kv_pool *)&ta; /* a sentinel */
        radix_tree *t = (radix_tree *)&ta;
        tr_status st = tr_kv_pool_new(64, 4, &a, &pool);
        if (st == TR_OK) {
            st = tr_radix_tree_new(pool, &a, &t);
            if (st == TR_OK) {
                check_all(t);
                tr_radix_tree_free(t);
            } else {
                assert_int_equal(st, TR_ERR_NOMEM);
                assert_ptr_equal(t, (radix_tree *)&ta);
            }
            tr_kv_pool_free(pool);
        } else {
            assert_int_equal(st, TR_ERR_NOMEM);
            assert_ptr_equal(pool, (kv_pool *)&ta);
        }
        assert_int_equal(ta.live, 0);
        if (ta.calls <= k) break; /* nothing failed: every index was tried */
    }
    assert_true(k >= 2); /* pool and tree each allocate */
}

/* Each scenario: an insert whose k-th allocation fails for every k. */
static void test_allocation_failure_injection(void **state) {
    (void)state;
    env *e = env_new(256, 2);
    int32_t tok[64], pages[32];
    radix_node *x;
    int fails;
    for (int i = 0; i < 64; i++) tok[i] = i;

    /* New namespace: root, ns table, leaf. */
    OK(tr_kv_pool_alloc(e->pool, 3, pages));
    OK(insert_with_failures(e->t, &e->ta, 9, tok, pages, 6, &x, &fails));
    assert_int_equal(fails, 3);

    /* Split: upper half and leaf. */
    int32_t t2[6] = {0, 1, 2, 3, 99, 99};
    OK(tr_kv_pool_alloc(e->pool, 3, pages));
    OK(insert_with_failures(e->t, &e->ta, 9, t2, pages, 6, &x, &fails));
    assert_int_equal(fails, 2);

    /* Nothing new: no allocation at all. */
    OK(insert_with_failures(e->t, &e->ta, 9, t2, pages, 4, &x, &fails));
    assert_int_equal(fails, 0);

    /* Children of the namespace root: 1 so far; the 5th child switches to a
     * hash table (leaf + table), the 9th grows it (leaf + table). */
    for (int c = 2; c <= 12; c++) {
        int32_t tc[2] = {1000 + c, 7};
        int32_t pc[1];
        OK(tr_kv_pool_alloc(e->pool, 1, pc));
        OK(insert_with_failures(e->t, &e->ta, 9, tc, pc, 2, &x, &fails));
        assert_int_equal(fails, (c == 5 || c == 9) ? 2 : 1);
        check_all(e->t);
    }

    /* Namespace table growth at the 5th namespace (8 slots, load 1/2). */
    for (uint64_t ns = 20; ns < 24; ns++) {
        int32_t pn[1];
        OK(tr_kv_pool_alloc(e->pool, 1, pn));
        OK(insert_with_failures(e->t, &e->ta, ns, tok, pn, 2, &x, &fails));
        assert_int_equal(fails, ns == 23 ? 3 : 2);
    }

    /* And in a random tree with locks held: see the differential test. */
    tr_radix_tree_flush(e->t);
    assert_int_equal(tr_kv_pool_n_free(e->pool), 256);
    env_free(e);
}

static void test_high_fanout_removals(void **state) {
    (void)state;
    enum { N = 300 };
    env *e = env_new(4 * N, 1);
    uint64_t rng = 7;
    int32_t pages[4], got[4];
    /* N children of the root (first token i) and N under [5000 5000]. */
    for (int i = 0; i < N; i++) {
        int32_t t1[2] = {i, 1};
        put(e, 0, t1, 2, pages);
        int32_t t2[3] = {5000, 5000, i};
        int32_t pp[3];
        OK(tr_kv_pool_alloc(e->pool, 3, pp));
        OK(tr_radix_tree_insert(e->t, 0, t2, pp, 3, NULL));
    }
    check_all(e->t);
    /* Touch in random order, then evict one leaf at a time. */
    for (int r = 0; r < 3 * N; r++) {
        int i = (int)rng_below(&rng, N);
        int32_t t1[2] = {i, 1}, t2[3] = {5000, 5000, i};
        if (rng_below(&rng, 2)) match_n(e, 0, t1, 1 + (int32_t)rng_below(&rng, 2), got);
        else match_n(e, 0, t2, 1 + (int32_t)rng_below(&rng, 3), got);
    }
    int left = 2 * N;
    while (left > 0) {
        int32_t got_pages = tr_radix_tree_evict(e->t, 1);
        assert_true(got_pages >= 1);
        check_all(e->t);
        left--;
        /* Every survivor is still found by its key. */
        if (left % 50 == 0) {
            int found = 0;
            for (int i = 0; i < N; i++) {
                int32_t t1[2] = {i, 1}, t2[3] = {5000, 5000, i};
                found += match_n(e, 0, t1, 2, got) == 2;
                found += match_n(e, 0, t2, 3, got) == 3;
            }
            /* Survivors: `left` leaves, plus one if [5000 5000] went. */
            assert_true(found >= left && found <= left + 1);
        }
    }
    tr_radix_tree_flush(e->t);
    check_all(e->t);
    assert_int_equal(tr_kv_pool_n_free(e->pool), 4 * N);
    env_free(e);
}

static void test_free_with_locks_held(void **state) {
    (void)state;
    /* Freeing a tree with locks held returns every tree page. */
    env *e = env_new(16, 2);
    int32_t tok[6] = {1, 2, 3, 4, 5, 6}, p[3];
    radix_node *x = put(e, 3, tok, 6, p);
    OK(tr_radix_tree_lock(e->t, x));
    tr_radix_tree_free(e->t);
    OK(tr_kv_pool_check(e->pool));
    assert_int_equal(tr_kv_pool_n_free(e->pool), 16);
    OK(tr_radix_tree_new(e->pool, &e->a, &e->t));
    env_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_and_duplicates),
        cmocka_unit_test(test_partial_pages_not_cached),
        cmocka_unit_test(test_page_size_one),
        cmocka_unit_test(test_sharing_long_prefix),
        cmocka_unit_test(test_namespaces_isolate),
        cmocka_unit_test(test_lru_order),
        cmocka_unit_test(test_locks_protect),
        cmocka_unit_test(test_bad_arguments_change_nothing),
        cmocka_unit_test(test_allocation_failure_injection),
        cmocka_unit_test(test_constructors_allocation_failure),
        cmocka_unit_test(test_high_fanout_removals),
        cmocka_unit_test(test_free_with_locks_held),
        cmocka_unit_test(test_differential_ps1),
        cmocka_unit_test(test_differential_ps4),
        cmocka_unit_test(test_differential_ps16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
