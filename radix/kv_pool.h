/* kv_pool.h — the paged KV page pool: hands out page ids of the engine's
 * KV buffer, counts references, and keeps the free / locked / cached
 * accounting the scheduler budgets with.
 *
 * Layering: radix/ (bottom half). Knows nothing about models, tensors or
 * devices: a page is an int32 id in [0, n_pages). The memory behind page p
 * is the engine's business (kernels/backend.h, tr_kv_layout: page p holds K
 * and V of page_size consecutive positions of every layer). Depends only on
 * base.
 *
 * Page states (every page is in exactly one):
 *
 *   free    ref == 0; on the free list, ready for tr_kv_pool_alloc.
 *   cached  held only by the radix tree (radix_tree.h) and not locked: the
 *           tree may evict it at any time to make room.
 *   locked  held by a running sequence: a private page it allocated, a tree
 *           page of a node it locked, or any page someone took an extra
 *           reference on with tr_kv_pool_ref.
 *
 *   n_free + n_locked + n_cached == n_pages, always (tr_kv_pool_check).
 *
 * References. tr_kv_pool_alloc returns pages with one reference each, owned by
 * the caller; tr_kv_pool_ref adds one, tr_kv_pool_unref drops one and the page
 * returns to the free list when the last goes. The radix tree holds exactly
 * one reference on each page it stores: it takes it over from the caller in
 * tr_radix_tree_insert and drops it on eviction. A tree node that is locked
 * additionally "pins" its pages (a flag, not a count: a page belongs to one
 * node). So a page is cached iff it is in the tree, not pinned, and the
 * tree's is its only reference.
 *
 * Cost: alloc and free are O(1) per page (a stack of free page ids); the
 * state counters are updated incrementally, so kv_pool_stats is O(1) and
 * tr_kv_pool_check is O(n_pages).
 *
 * Threads: none inside. A pool is used by one thread at a time (the engine
 * thread owns the pool and the tree).
 */
#ifndef TR_RADIX_KV_POOL_H
#define TR_RADIX_KV_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"

/* The allocator used for the pool's and the tree's own bookkeeping memory
 * (never for KV memory). Injectable so that tests can fail the k-th
 * allocation and check that every operation leaves things intact.
 * alloc returns NULL on failure; free accepts NULL. */
typedef struct radix_allocator {
    void *(*alloc)(void *user, size_t size);
    void (*free)(void *user, void *ptr);
    void *user;
} radix_allocator;

/* malloc/free. */
extern const radix_allocator tr_radix_allocator_libc;

typedef struct kv_pool kv_pool;

typedef enum kv_page_state {
    KV_PAGE_FREE = 0,
    KV_PAGE_CACHED = 1,
    KV_PAGE_LOCKED = 2,
    KV_PAGE_INVALID = -1, /* not a page id of this pool */
} kv_page_state;

typedef struct kv_pool_stats {
    int32_t n_pages;
    int32_t page_size;
    int32_t n_free;
    int32_t n_locked;
    int32_t n_cached;
    int32_t min_free;        /* low-water mark of n_free since creation */
    uint64_t pages_allocated; /* cumulative, pages handed out by alloc */
    uint64_t pages_freed;     /* cumulative, pages returned to the free list */
    uint64_t alloc_full;      /* alloc calls refused with TR_ERR_FULL */
} kv_pool_stats;

/* Creates a pool of n_pages pages (>= 1) of page_size tokens (>= 1), all
 * free. alloc may be NULL (libc). On success *out owns the pool (free with
 * tr_kv_pool_free); on failure *out is untouched. Errors: TR_ERR_INVALID_ARG,
 * TR_ERR_OVERFLOW, TR_ERR_NOMEM. */
tr_status tr_kv_pool_new(int32_t n_pages, int32_t page_size,
                      const radix_allocator *alloc, kv_pool **out);

/* Frees the pool's bookkeeping (p may be NULL). Free any radix tree built on
 * the pool first. */
void tr_kv_pool_free(kv_pool *p);

int32_t tr_kv_pool_n_pages(const kv_pool *p);
int32_t tr_kv_pool_page_size(const kv_pool *p);
int32_t tr_kv_pool_n_free(const kv_pool *p);

/* Allocates n pages (n >= 0), all or nothing, writing their ids to
 * out[0..n). Each comes with one reference owned by the caller (state
 * locked). TR_ERR_FULL when fewer than n pages are free: nothing is
 * allocated and the pool is unchanged (evict from the radix tree and retry).
 * The most recently freed pages are handed out first. */
tr_status tr_kv_pool_alloc(kv_pool *p, int32_t n, int32_t *out);

/* Adds a reference to an allocated page (e.g. to keep a tree page alive
 * outside the tree's locking). TR_ERR_INVALID_ARG for a bad id,
 * TR_ERR_STATE for a free page, TR_ERR_OVERFLOW at the count's limit. */
tr_status tr_kv_pool_ref(kv_pool *p, int32_t page);

/* Drops one reference the caller owns; the page is free when none remain.
 * TR_ERR_INVALID_ARG for a bad id; TR_ERR_STATE when the caller cannot own
 * one: the page is free, or the only reference left is the radix tree's.
 * Unchanged on error. */
tr_status tr_kv_pool_unref(kv_pool *p, int32_t page);

/* tr_kv_pool_unref of pages[0..n), validated first: either every reference is
 * dropped or (on error) none. A page may appear several times if the caller
 * owns that many references. */
tr_status tr_kv_pool_unref_n(kv_pool *p, const int32_t *pages, int32_t n);

/* State / reference count / tree membership of one page; KV_PAGE_INVALID,
 * -1 and false for an id outside the pool. */
kv_page_state tr_kv_pool_page_state(const kv_pool *p, int32_t page);
int64_t tr_kv_pool_refcount(const kv_pool *p, int32_t page);
bool tr_kv_pool_page_in_tree(const kv_pool *p, int32_t page);

void tr_kv_pool_stats_get(const kv_pool *p, kv_pool_stats *out);

/* Validates every invariant: the three state counts add up to n_pages and
 * match a recount; the free list holds each free page exactly once and
 * nothing else; flags are consistent (pinned implies in tree, in tree
 * implies referenced). TR_OK or TR_ERR_INTERNAL (with a line on stderr
 * naming the broken invariant). Does not change the pool. */
tr_status tr_kv_pool_check(const kv_pool *p);

/* Prints counters, every non-free page (id, refs, flags) and the free list
 * in order. Deterministic: equal dumps mean equal pool states. */
void tr_kv_pool_dump(const kv_pool *p, FILE *f);

#endif
