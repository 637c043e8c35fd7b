/* kv_pool_internal.h — the pool's layout and the hooks the radix tree uses
 * to take over, pin and drop page references. Only radix/ includes this.
 *
 * Per page p:
 *   ref[p]    references: the caller's (from alloc/ref) plus one for the
 *             tree when IN_TREE is set. 0 iff the page is on the free list.
 *   flags[p]  KV_FLAG_IN_TREE  the tree holds one of the references;
 *             KV_FLAG_PINNED   the tree node holding it is locked;
 *             KV_FLAG_MARK     scratch bit of tr_radix_tree_insert's argument
 *                              validation (never set between calls);
 *             KV_FLAG_CHECK    scratch bit of tr_kv_pool_check.
 * The state counters n_cached / n_locked are updated on every change by
 * classifying the page before and after it (kv_pool_classify_).
 */
#ifndef TR_RADIX_KV_POOL_INTERNAL_H
#define TR_RADIX_KV_POOL_INTERNAL_H

#include "radix/kv_pool.h"

#define KV_FLAG_IN_TREE 0x1u
#define KV_FLAG_PINNED 0x2u
#define KV_FLAG_MARK 0x4u
#define KV_FLAG_CHECK 0x8u

/* tr_kv_pool_ref refuses beyond this, so that the tree's own reference can
 * never overflow. */
#define KV_REF_MAX (UINT32_MAX - 4u)

struct kv_pool {
    int32_t n_pages;
    int32_t page_size;
    uint32_t *ref;       /* [n_pages] */
    uint8_t *flags;      /* [n_pages] */
    int32_t *free_stack; /* [n_pages], the top n_free entries are free ids */
    int32_t n_free;
    int32_t n_cached;
    int32_t n_locked;
    int32_t min_free;
    uint64_t pages_allocated;
    uint64_t pages_freed;
    uint64_t alloc_full;
    radix_allocator a;
};

static inline bool kv_pool_valid_id_(const kv_pool *p, int32_t page) {
    return page >= 0 && page < p->n_pages;
}

static inline kv_page_state kv_pool_classify_(uint32_t ref, uint8_t flags) {
    if (ref == 0) return KV_PAGE_FREE;
    if ((flags & (KV_FLAG_IN_TREE | KV_FLAG_PINNED)) == KV_FLAG_IN_TREE &&
        ref == 1)
        return KV_PAGE_CACHED;
    return KV_PAGE_LOCKED;
}

/* Moves page's contribution from state `before` to its current state. */
static inline void kv_pool_recount_(kv_pool *p, int32_t page,
                                    kv_page_state before) {
    kv_page_state after = kv_pool_classify_(p->ref[page], p->flags[page]);
    if (after == before) return;
    if (before == KV_PAGE_CACHED) p->n_cached--;
    else if (before == KV_PAGE_LOCKED) p->n_locked--;
    if (after == KV_PAGE_CACHED) p->n_cached++;
    else if (after == KV_PAGE_LOCKED) p->n_locked++;
}

/* The tree takes over one reference the caller owns (ref >= 1, not in the
 * tree: the caller has validated both). */
static inline void kv_pool_tree_adopt_(kv_pool *p, int32_t page) {
    kv_page_state before = kv_pool_classify_(p->ref[page], p->flags[page]);
    p->flags[page] |= KV_FLAG_IN_TREE;
    kv_pool_recount_(p, page, before);
}

/* Pins or unpins a tree page (its node's lock count left or reached 0). */
static inline void kv_pool_set_pinned_(kv_pool *p, int32_t page, bool on) {
    kv_page_state before = kv_pool_classify_(p->ref[page], p->flags[page]);
    if (on) p->flags[page] |= KV_FLAG_PINNED;
    else p->flags[page] &= (uint8_t)~KV_FLAG_PINNED;
    kv_pool_recount_(p, page, before);
}

/* Drops one reference without the caller-ownership test of tr_kv_pool_unref;
 * frees the page when it was the last. Returns true if it was freed.
 * ref >= 1 is the caller's invariant. */
bool tr_kv_pool_release_(kv_pool *p, int32_t page);

/* The tree lets go of a page: clears IN_TREE and PINNED and drops the
 * tree's reference. Returns true if the page became free. */
static inline bool kv_pool_tree_drop_(kv_pool *p, int32_t page) {
    kv_page_state before = kv_pool_classify_(p->ref[page], p->flags[page]);
    p->flags[page] &= (uint8_t)~(KV_FLAG_IN_TREE | KV_FLAG_PINNED);
    kv_pool_recount_(p, page, before);
    return tr_kv_pool_release_(p, page);
}

#endif
