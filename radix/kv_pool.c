/* kv_pool.c — the KV page pool: a stack of free page ids, per-page reference
 * counts and flags, and incrementally maintained state counters.
 * Contract in kv_pool.h; layout and tree hooks in kv_pool_internal.h.
 * Engine thread only.
 */
#include "radix/kv_pool_internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

static void *libc_alloc(void *user, size_t size) {
    (void)user;
    return malloc(size);
}
static void libc_free(void *user, void *ptr) {
    (void)user;
    free(ptr);
}
const radix_allocator tr_radix_allocator_libc = {libc_alloc, libc_free, NULL};

tr_status tr_kv_pool_new(int32_t n_pages, int32_t page_size,
                      const radix_allocator *alloc, kv_pool **out) {
    if (!out || n_pages < 1 || page_size < 1) return TR_ERR_INVALID_ARG;
    if (!alloc) alloc = &tr_radix_allocator_libc;
    if (!alloc->alloc || !alloc->free) return TR_ERR_INVALID_ARG;
    size_t b_ref, b_stack;
    if (tr_mul_overflow_size((size_t)n_pages, sizeof(uint32_t), &b_ref) ||
        tr_mul_overflow_size((size_t)n_pages, sizeof(int32_t), &b_stack))
        return TR_ERR_OVERFLOW;
    kv_pool *p = alloc->alloc(alloc->user, sizeof *p);
    if (!p) return TR_ERR_NOMEM;
    memset(p, 0, sizeof *p);
    p->a = *alloc;
    p->ref = alloc->alloc(alloc->user, b_ref);
    p->flags = alloc->alloc(alloc->user, (size_t)n_pages);
    p->free_stack = alloc->alloc(alloc->user, b_stack);
    if (!p->ref || !p->flags || !p->free_stack) {
        alloc->free(alloc->user, p->ref);
        alloc->free(alloc->user, p->flags);
        alloc->free(alloc->user, p->free_stack);
        alloc->free(alloc->user, p);
        return TR_ERR_NOMEM;
    }
    memset(p->ref, 0, b_ref);
    memset(p->flags, 0, (size_t)n_pages);
    /* Pushed in reverse so that a fresh pool hands out 0, 1, 2, ... */
    for (int32_t i = 0; i < n_pages; i++) p->free_stack[i] = n_pages - 1 - i;
    p->n_pages = n_pages;
    p->page_size = page_size;
    p->n_free = n_pages;
    p->min_free = n_pages;
    *out = p;
    return TR_OK;
}

void tr_kv_pool_free(kv_pool *p) {
    if (!p) return;
    radix_allocator a = p->a;
    a.free(a.user, p->ref);
    a.free(a.user, p->flags);
    a.free(a.user, p->free_stack);
    a.free(a.user, p);
}

int32_t tr_kv_pool_n_pages(const kv_pool *p) { return p->n_pages; }
int32_t tr_kv_pool_page_size(const kv_pool *p) { return p->page_size; }
int32_t tr_kv_pool_n_free(const kv_pool *p) { return p->n_free; }

tr_status tr_kv_pool_alloc(kv_pool *p, int32_t n, int32_t *out) {
    if (!p || n < 0 || (n > 0 && !out)) return TR_ERR_INVALID_ARG;
    if (n > p->n_free) {
        p->alloc_full++;
        return TR_ERR_FULL;
    }
    for (int32_t i = 0; i < n; i++) {
        int32_t page = p->free_stack[--p->n_free];
        p->ref[page] = 1; /* flags are 0 on every free page */
        out[i] = page;
    }
    p->n_locked += n;
    p->pages_allocated += (uint64_t)n;
    if (p->n_free < p->min_free) p->min_free = p->n_free;
    return TR_OK;
}

tr_status tr_kv_pool_ref(kv_pool *p, int32_t page) {
    if (!p || !kv_pool_valid_id_(p, page)) return TR_ERR_INVALID_ARG;
    if (p->ref[page] == 0) return TR_ERR_STATE;
    if (p->ref[page] >= KV_REF_MAX) return TR_ERR_OVERFLOW;
    kv_page_state before = kv_pool_classify_(p->ref[page], p->flags[page]);
    p->ref[page]++;
    kv_pool_recount_(p, page, before);
    return TR_OK;
}

bool tr_kv_pool_release_(kv_pool *p, int32_t page) {
    kv_page_state before = kv_pool_classify_(p->ref[page], p->flags[page]);
    if (--p->ref[page] != 0) {
        kv_pool_recount_(p, page, before);
        return false;
    }
    kv_pool_recount_(p, page, before); /* -> free: leaves both counters */
    p->flags[page] = 0;
    p->free_stack[p->n_free++] = page;
    p->pages_freed++;
    return true;
}

/* References the caller may drop: all but the tree's. */
static uint32_t caller_refs(const kv_pool *p, int32_t page) {
    return p->ref[page] - ((p->flags[page] & KV_FLAG_IN_TREE) ? 1u : 0u);
}

tr_status tr_kv_pool_unref(kv_pool *p, int32_t page) {
    if (!p || !kv_pool_valid_id_(p, page)) return TR_ERR_INVALID_ARG;
    if (p->ref[page] == 0 || caller_refs(p, page) == 0) return TR_ERR_STATE;
    tr_kv_pool_release_(p, page);
    return TR_OK;
}

tr_status tr_kv_pool_unref_n(kv_pool *p, const int32_t *pages, int32_t n) {
    if (!p || n < 0 || (n > 0 && !pages)) return TR_ERR_INVALID_ARG;
    /* Validate first, counting repeats by temporarily lowering the counts
     * (restored below), so that a page listed k times needs k references. */
    tr_status st = TR_OK;
    int32_t i = 0;
    for (; i < n; i++) {
        int32_t page = pages[i];
        if (!kv_pool_valid_id_(p, page)) {
            st = TR_ERR_INVALID_ARG;
            break;
        }
        if (p->ref[page] == 0 || caller_refs(p, page) == 0) {
            st = TR_ERR_STATE;
            break;
        }
        p->ref[page]--;
    }
    for (int32_t j = 0; j < i; j++) p->ref[pages[j]]++;
    if (st != TR_OK) return st;
    for (i = 0; i < n; i++) tr_kv_pool_release_(p, pages[i]);
    return TR_OK;
}

kv_page_state tr_kv_pool_page_state(const kv_pool *p, int32_t page) {
    if (!p || !kv_pool_valid_id_(p, page)) return KV_PAGE_INVALID;
    return kv_pool_classify_(p->ref[page], p->flags[page]);
}

int64_t tr_kv_pool_refcount(const kv_pool *p, int32_t page) {
    if (!p || !kv_pool_valid_id_(p, page)) return -1;
    return p->ref[page];
}

bool tr_kv_pool_page_in_tree(const kv_pool *p, int32_t page) {
    if (!p || !kv_pool_valid_id_(p, page)) return false;
    return (p->flags[page] & KV_FLAG_IN_TREE) != 0;
}

void tr_kv_pool_stats_get(const kv_pool *p, kv_pool_stats *out) {
    memset(out, 0, sizeof *out);
    out->n_pages = p->n_pages;
    out->page_size = p->page_size;
    out->n_free = p->n_free;
    out->n_locked = p->n_locked;
    out->n_cached = p->n_cached;
    out->min_free = p->min_free;
    out->pages_allocated = p->pages_allocated;
    out->pages_freed = p->pages_freed;
    out->alloc_full = p->alloc_full;
}

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "kv_pool_check: " __VA_ARGS__);               \
            fputc('\n', stderr);                                          \
            st = TR_ERR_INTERNAL;                                         \
            goto done;                                                    \
        }                                                                 \
    } while (0)

tr_status tr_kv_pool_check(const kv_pool *p) {
    tr_status st = TR_OK;
    int32_t n_marked = 0;
    if (!p) return TR_ERR_INVALID_ARG;
    CHECK(p->n_pages >= 1 && p->page_size >= 1, "bad geometry");
    CHECK(p->n_free >= 0 && p->n_free <= p->n_pages, "n_free %d out of range",
          p->n_free);
    CHECK(p->n_free + p->n_locked + p->n_cached == p->n_pages,
          "free %d + locked %d + cached %d != %d pages", p->n_free,
          p->n_locked, p->n_cached, p->n_pages);
    CHECK(p->min_free <= p->n_free, "min_free above n_free");
    int32_t cnt[3] = {0, 0, 0};
    for (int32_t i = 0; i < p->n_pages; i++) {
        uint32_t r = p->ref[i];
        uint8_t f = p->flags[i];
        CHECK((f & (KV_FLAG_MARK | KV_FLAG_CHECK)) == 0 && f <= 0xf,
              "page %d: stray flags 0x%x", i, f);
        CHECK(!(f & KV_FLAG_PINNED) || (f & KV_FLAG_IN_TREE),
              "page %d: pinned but not in the tree", i);
        CHECK(r != 0 || f == 0, "page %d: free but flags 0x%x", i, f);
        cnt[kv_pool_classify_(r, f)]++;
    }
    CHECK(cnt[KV_PAGE_FREE] == p->n_free && cnt[KV_PAGE_CACHED] == p->n_cached &&
              cnt[KV_PAGE_LOCKED] == p->n_locked,
          "recount free/cached/locked %d/%d/%d != counters %d/%d/%d",
          cnt[KV_PAGE_FREE], cnt[KV_PAGE_CACHED], cnt[KV_PAGE_LOCKED],
          p->n_free, p->n_cached, p->n_locked);
    /* Each free-list entry is a distinct free page; with the recount above
     * (as many free pages as entries) the list holds every free page. The
     * scratch CHECK bit lives in the flag array, which `const` does not
     * cover; it is cleared again before returning. */
    for (; n_marked < p->n_free; n_marked++) {
        int32_t page = p->free_stack[n_marked];
        CHECK(kv_pool_valid_id_(p, page), "free list entry %d: bad id %d",
              n_marked, page);
        CHECK(p->ref[page] == 0, "free list holds page %d with %u refs", page,
              p->ref[page]);
        CHECK(!(p->flags[page] & KV_FLAG_CHECK),
              "free list holds page %d twice", page);
        p->flags[page] |= KV_FLAG_CHECK;
    }
done:
    for (int32_t i = 0; i < n_marked; i++)
        p->flags[p->free_stack[i]] &= (uint8_t)~KV_FLAG_CHECK;
    return st;
}

void tr_kv_pool_dump(const kv_pool *p, FILE *f) {
    fprintf(f,
            "kv_pool: pages=%d page_size=%d free=%d locked=%d cached=%d "
            "min_free=%d allocated=%llu freed=%llu full=%llu\n",
            p->n_pages, p->page_size, p->n_free, p->n_locked, p->n_cached,
            p->min_free, (unsigned long long)p->pages_allocated,
            (unsigned long long)p->pages_freed,
            (unsigned long long)p->alloc_full);
    for (int32_t i = 0; i < p->n_pages; i++) {
        if (p->ref[i] == 0) continue;
        fprintf(f, "  page %d ref=%u%s%s\n", i, p->ref[i],
                (p->flags[i] & KV_FLAG_IN_TREE) ? " tree" : "",
                (p->flags[i] & KV_FLAG_PINNED) ? " pinned" : "");
    }
    fprintf(f, "  free list (top last):");
    for (int32_t i = 0; i < p->n_free; i++) fprintf(f, " %d", p->free_stack[i]);
    fputc('\n', f);
}
