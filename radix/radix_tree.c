/* radix_tree.c — the radix-tree prefix cache. Contract, drawings and the
 * page-ownership rules are in radix_tree.h; this file is the mechanics.
 *
 * Node memory: one block per node, header then tokens then page ids:
 *
 *   +-------------+---------------------------+----------------+
 *   | radix_node  | tokens[cap_pages * ps]    | pages[cap_pages * W] |
 *   +-------------+---------------------------+----------------+
 *
 * (W = the tree's units: page slot j of a node holds ids pages[j*W ..
 * j*W + W), one per unit; a windowed unit's id may be -1, a hole.)
 *                 ^ tokens may start later:   ^ pages likewise
 *
 * A split copies the upper part of a node into a new block and advances the
 * old node's tokens/pages pointers past it, so the old node keeps its
 * identity (handles, children, LRU position stay valid) and the span always
 * ends at its block's end. The skipped head of the old block is dead until
 * the node is freed (bounded by the node's original size; counted in
 * stats.bytes).
 *
 * Children: up to RADIX_INLINE inline (keys and pointers side by side, so a
 * lookup in a small node touches one cache line of keys), otherwise an
 * open-addressing table of (key, node) with linear probing, load <= 1/2,
 * backward-shift deletion (no tombstones) and no shrinking. The key is a
 * hash of the child's first page; a hit is confirmed with memcmp of that
 * page, so equal hashes of different pages are harmless.
 *
 * Failure atomicity: tr_radix_tree_insert walks and validates read-only, then
 * allocates everything, then mutates with operations that cannot fail.
 * Removal (evict, flush) never allocates, which is also why a node left
 * with a single child after an eviction is not merged with it (merging
 * needs a new block); a match then just visits one more node.
 *
 * Engine thread only.
 */
#include "radix/radix_tree.h"

#include <inttypes.h>
#include <string.h>

#include "radix/kv_pool_internal.h"
#include "base/util.h"

#define RADIX_INLINE 4
#define RADIX_HASH_MIN 16 /* first table size when a node outgrows inline */

#define MARK_REACHED 0x1u /* tr_radix_tree_check scratch: found by the walk */
#define MARK_IN_LRU 0x2u  /* tr_radix_tree_check scratch: seen on the list */

typedef struct radix_slot {
    uint32_t key;
    radix_node *node; /* NULL: empty slot */
} radix_slot;

struct radix_node {
    int32_t *tokens;      /* [n_pages * page_size], inside this block */
    int32_t *pages;       /* [n_pages * W], inside this block */
    radix_node *parent;   /* NULL for a namespace root */
    radix_node *lru_prev; /* toward the head (more recent) */
    radix_node *lru_next; /* toward the tail (less recent) */
    uint64_t ns;          /* namespace (meaningful on roots) */
    int32_t n_pages;      /* 0 for a namespace root, >= 1 otherwise */
    int32_t cap_pages;    /* pages the block was allocated for */
    int32_t lock;         /* locks on this node and its descendants */
    uint32_t key;         /* page_key of the first page (0 on roots) */
    uint32_t n_children;
    uint32_t hash_cap;    /* 0: children inline; else a power of two */
    uint8_t mark;         /* tr_radix_tree_check scratch, 0 between calls */
    union {
        struct {
            uint32_t key[RADIX_INLINE];
            radix_node *node[RADIX_INLINE];
        } small;
        radix_slot *slots; /* [hash_cap] */
    } kids;
};

struct radix_tree {
    kv_pool *pool; /* borrowed */
    int32_t ps;    /* page size, tokens */
    int32_t W;     /* units: page ids per page slot */
    int32_t *win;  /* [W] each unit's window in tokens, 0 = every position */
    bool windowed; /* some unit has a window */
    size_t page_bytes;
    radix_allocator a;
    radix_node **ns_slots; /* [ns_cap] open addressing by ns_hash */
    uint32_t ns_cap;
    uint32_t ns_count;
    radix_node *lru_head; /* most recent */
    radix_node *lru_tail; /* least recent: always an unlocked leaf */
    int64_t n_nodes;      /* excluding namespace roots */
    int64_t n_tree_pages;  /* page ids held (holes not counted) */
    int64_t n_tree_slots;  /* page slots of all nodes */
    uint64_t bytes;
    uint64_t hit_tokens, miss_tokens;
    uint64_t inserts, inserted_pages, duplicate_pages;
    uint64_t evicted_nodes, evicted_pages, stripped_pages;
    radix_evict_hook hook; /* tr_radix_tree_set_evict_hook */
    void *hook_user;
};

/* ---- hashing ---- */

static inline uint32_t fmix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

static inline uint32_t page_key(const int32_t *tok, int32_t ps) {
    uint32_t h = 0x9e3779b9u;
    for (int32_t i = 0; i < ps; i++) {
        h ^= (uint32_t)tok[i];
        h = (h << 13 | h >> 19) * 0x01000193u;
    }
    return fmix32(h);
}

static inline uint32_t ns_hash(uint64_t ns) {
    ns ^= ns >> 33;
    ns *= 0xff51afd7ed558ccdull;
    ns ^= ns >> 33;
    ns *= 0xc4ceb9fe1a85ec53ull;
    ns ^= ns >> 33;
    return (uint32_t)ns;
}

/* Number of leading full pages equal in a and b, looking at lim pages.
 * The whole-span memcmp is the common case (a hit on the whole edge). */
static int32_t common_pages(const int32_t *a, const int32_t *b, int32_t lim,
                            int32_t ps) {
    size_t n = (size_t)lim * (size_t)ps;
    if (memcmp(a, b, n * sizeof(int32_t)) == 0) return lim;
    size_t i = 0;
    /* Locate the differing 64-token block with memcmp, then the token. */
    while (n - i > 64 && memcmp(a + i, b + i, 64 * sizeof(int32_t)) == 0)
        i += 64;
    while (i < n && a[i] == b[i]) i++;
    return (int32_t)(i / (size_t)ps);
}

/* ---- memory ---- */

static size_t node_block_bytes(const radix_tree *t, int32_t cap_pages) {
    /* Overflow was ruled out when the block was allocated. */
    return sizeof(radix_node) +
           (size_t)cap_pages * (t->page_bytes + (size_t)t->W * sizeof(int32_t));
}

static void *tree_alloc(radix_tree *t, size_t size) {
    void *p = t->a.alloc(t->a.user, size);
    if (p) t->bytes += size;
    return p;
}

static void tree_free_mem(radix_tree *t, void *p, size_t size) {
    if (!p) return;
    t->bytes -= size;
    t->a.free(t->a.user, p);
}

static radix_node *node_alloc(radix_tree *t, int32_t n_pages) {
    size_t per_page, body, size;
    if (tr_add_overflow_size(t->page_bytes, (size_t)t->W * sizeof(int32_t), &per_page) ||
        tr_mul_overflow_size((size_t)n_pages, per_page, &body) ||
        tr_add_overflow_size(body, sizeof(radix_node), &size))
        return NULL;
    radix_node *x = tree_alloc(t, size);
    if (!x) return NULL;
    memset(x, 0, sizeof *x);
    x->tokens = (int32_t *)(void *)(x + 1);
    x->pages = x->tokens + (size_t)n_pages * (size_t)t->ps;
    x->cap_pages = n_pages;
    x->n_pages = n_pages;
    return x;
}

static void node_free(radix_tree *t, radix_node *x) {
    if (x->hash_cap)
        tree_free_mem(t, x->kids.slots, (size_t)x->hash_cap * sizeof(radix_slot));
    tree_free_mem(t, x, node_block_bytes(t, x->cap_pages));
}

/* ---- children ---- */

static inline radix_node *child_find(const radix_tree *t, const radix_node *x,
                                     const int32_t *tok, uint32_t key) {
    if (x->hash_cap == 0) {
        for (uint32_t i = 0; i < x->n_children; i++)
            if (x->kids.small.key[i] == key &&
                memcmp(x->kids.small.node[i]->tokens, tok, t->page_bytes) == 0)
                return x->kids.small.node[i];
        return NULL;
    }
    uint32_t mask = x->hash_cap - 1;
    for (uint32_t i = key & mask;; i = (i + 1) & mask) {
        const radix_slot *s = &x->kids.slots[i];
        if (!s->node) return NULL;
        if (s->key == key && memcmp(s->node->tokens, tok, t->page_bytes) == 0)
            return s->node;
    }
}

static uint32_t child_slot_count(const radix_node *x) {
    return x->hash_cap ? x->hash_cap : x->n_children;
}

static radix_node *child_at(const radix_node *x, uint32_t i) {
    return x->hash_cap ? x->kids.slots[i].node : x->kids.small.node[i];
}

/* The next child at slot >= *i (advancing *i past it), or NULL. */
static radix_node *child_next(const radix_node *x, uint32_t *i) {
    uint32_t n = child_slot_count(x);
    for (; *i < n; (*i)++) {
        radix_node *c = child_at(x, *i);
        if (c) {
            (*i)++;
            return c;
        }
    }
    return NULL;
}

/* Slot index of child c in x, UINT32_MAX if absent (only check() sees
 * that). */
static uint32_t child_slot_of(const radix_node *x, const radix_node *c) {
    if (x->hash_cap == 0) {
        for (uint32_t i = 0; i < x->n_children; i++)
            if (x->kids.small.node[i] == c) return i;
        return UINT32_MAX;
    }
    uint32_t mask = x->hash_cap - 1;
    for (uint32_t i = c->key & mask, probes = 0; probes <= mask;
         i = (i + 1) & mask, probes++) {
        if (x->kids.slots[i].node == c) return i;
        if (!x->kids.slots[i].node) break;
    }
    return UINT32_MAX;
}

static bool child_needs_grow(const radix_node *x) {
    if (x->hash_cap == 0) return x->n_children == RADIX_INLINE;
    return ((uint64_t)x->n_children + 1) * 2 > x->hash_cap;
}

static uint32_t child_grown_cap(const radix_node *x) {
    return x->hash_cap == 0 ? RADIX_HASH_MIN : x->hash_cap * 2;
}

static void slot_put(radix_slot *slots, uint32_t cap, uint32_t key,
                     radix_node *c) {
    uint32_t mask = cap - 1, i = key & mask;
    while (slots[i].node) i = (i + 1) & mask;
    slots[i].key = key;
    slots[i].node = c;
}

/* Adds c (whose key is set) to x, which has room. */
static void child_add(radix_node *x, radix_node *c) {
    if (x->hash_cap == 0) {
        TR_ASSERT(x->n_children < RADIX_INLINE);
        x->kids.small.key[x->n_children] = c->key;
        x->kids.small.node[x->n_children] = c;
    } else {
        TR_ASSERT(((uint64_t)x->n_children + 1) * 2 <= x->hash_cap);
        slot_put(x->kids.slots, x->hash_cap, c->key, c);
    }
    x->n_children++;
}

/* Moves x's children into the new table mem[cap] (zeroed here). */
static void child_grow_commit(radix_tree *t, radix_node *x, radix_slot *mem,
                              uint32_t cap) {
    memset(mem, 0, (size_t)cap * sizeof(radix_slot));
    if (x->hash_cap == 0) {
        for (uint32_t i = 0; i < x->n_children; i++)
            slot_put(mem, cap, x->kids.small.key[i], x->kids.small.node[i]);
    } else {
        for (uint32_t i = 0; i < x->hash_cap; i++)
            if (x->kids.slots[i].node)
                slot_put(mem, cap, x->kids.slots[i].key, x->kids.slots[i].node);
        tree_free_mem(t, x->kids.slots, (size_t)x->hash_cap * sizeof(radix_slot));
    }
    x->kids.slots = mem;
    x->hash_cap = cap;
}

/* Replaces child old by nw, which has the same key (a split's upper half). */
static void child_replace(radix_node *x, radix_node *old, radix_node *nw) {
    uint32_t i = child_slot_of(x, old);
    TR_ASSERT(i != UINT32_MAX);
    if (x->hash_cap == 0) x->kids.small.node[i] = nw;
    else x->kids.slots[i].node = nw;
}

static void child_remove(radix_node *x, radix_node *c) {
    uint32_t i = child_slot_of(x, c);
    TR_ASSERT(i != UINT32_MAX);
    x->n_children--;
    if (x->hash_cap == 0) {
        /* Shift down to keep insertion order (dumps stay readable). */
        for (; i < x->n_children; i++) {
            x->kids.small.key[i] = x->kids.small.key[i + 1];
            x->kids.small.node[i] = x->kids.small.node[i + 1];
        }
        x->kids.small.node[x->n_children] = NULL;
        return;
    }
    /* Backward-shift deletion: pull later entries of the probe run into
     * the hole unless their home slot lies cyclically in (hole, j]. */
    radix_slot *s = x->kids.slots;
    uint32_t mask = x->hash_cap - 1;
    s[i].node = NULL;
    for (uint32_t j = (i + 1) & mask; s[j].node; j = (j + 1) & mask) {
        uint32_t home = s[j].key & mask;
        bool stays = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (stays) continue;
        s[i] = s[j];
        s[j].node = NULL;
        i = j;
    }
}

/* ---- namespace table ---- */

static radix_node *ns_find(const radix_tree *t, uint64_t ns) {
    if (t->ns_cap == 0) return NULL;
    uint32_t mask = t->ns_cap - 1;
    for (uint32_t i = ns_hash(ns) & mask;; i = (i + 1) & mask) {
        radix_node *r = t->ns_slots[i];
        if (!r) return NULL;
        if (r->ns == ns) return r;
    }
}

static bool ns_needs_grow(const radix_tree *t) {
    return ((uint64_t)t->ns_count + 1) * 2 > t->ns_cap;
}

static void ns_put(radix_node **slots, uint32_t cap, radix_node *r) {
    uint32_t mask = cap - 1, i = ns_hash(r->ns) & mask;
    while (slots[i]) i = (i + 1) & mask;
    slots[i] = r;
}

static void ns_grow_commit(radix_tree *t, radix_node **mem, uint32_t cap) {
    memset(mem, 0, (size_t)cap * sizeof *mem);
    for (uint32_t i = 0; i < t->ns_cap; i++)
        if (t->ns_slots[i]) ns_put(mem, cap, t->ns_slots[i]);
    tree_free_mem(t, t->ns_slots, (size_t)t->ns_cap * sizeof *t->ns_slots);
    t->ns_slots = mem;
    t->ns_cap = cap;
}

static void ns_remove(radix_tree *t, radix_node *r) {
    uint32_t mask = t->ns_cap - 1, i = ns_hash(r->ns) & mask;
    while (t->ns_slots[i] != r) {
        TR_ASSERT(t->ns_slots[i]);
        i = (i + 1) & mask;
    }
    t->ns_slots[i] = NULL;
    for (uint32_t j = (i + 1) & mask; t->ns_slots[j]; j = (j + 1) & mask) {
        uint32_t home = ns_hash(t->ns_slots[j]->ns) & mask;
        bool stays = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (stays) continue;
        t->ns_slots[i] = t->ns_slots[j];
        t->ns_slots[j] = NULL;
        i = j;
    }
    /* An empty tree holds no memory (a freshly flushed cache is at zero). */
    if (--t->ns_count == 0) {
        tree_free_mem(t, t->ns_slots, (size_t)t->ns_cap * sizeof *t->ns_slots);
        t->ns_slots = NULL;
        t->ns_cap = 0;
    }
}

/* ---- LRU list (unlocked nodes only) ---- */

static void lru_remove(radix_tree *t, radix_node *x) {
    if (x->lru_prev) x->lru_prev->lru_next = x->lru_next;
    else t->lru_head = x->lru_next;
    if (x->lru_next) x->lru_next->lru_prev = x->lru_prev;
    else t->lru_tail = x->lru_prev;
    x->lru_prev = x->lru_next = NULL;
}

static void lru_push_front(radix_tree *t, radix_node *x) {
    x->lru_prev = NULL;
    x->lru_next = t->lru_head;
    if (t->lru_head) t->lru_head->lru_prev = x;
    else t->lru_tail = x;
    t->lru_head = x;
}

static void lru_insert_before(radix_tree *t, radix_node *pos, radix_node *x) {
    x->lru_next = pos;
    x->lru_prev = pos->lru_prev;
    if (pos->lru_prev) pos->lru_prev->lru_next = x;
    else t->lru_head = x;
    pos->lru_prev = x;
}

/* Marks x and its ancestors most recently used, deepest first, so that each
 * ends up ahead of its descendants. Locked nodes are not on the list. */
static void lru_touch_path(radix_tree *t, radix_node *x) {
    for (; x; x = x->parent) {
        if (x->lock != 0 || t->lru_head == x) continue;
        lru_remove(t, x);
        lru_push_front(t, x);
    }
}

/* ---- lifetime ---- */

tr_status tr_radix_tree_new(kv_pool *pool, const radix_allocator *alloc,
                         radix_tree **out) {
    return tr_radix_tree_new_units(pool, alloc, 1, NULL, out);
}

tr_status tr_radix_tree_new_units(kv_pool *pool, const radix_allocator *alloc,
                               int32_t n_units, const int32_t *window,
                               radix_tree **out) {
    if (!pool || !out || n_units < 1 || n_units > TR_RADIX_MAX_UNITS ||
        (n_units > 1 && !window))
        return TR_ERR_INVALID_ARG;
    bool any_global = false;
    for (int32_t u = 0; u < n_units; u++) {
        int32_t w = window ? window[u] : 0;
        if (w < 0) return TR_ERR_INVALID_ARG;
        any_global |= (w == 0);
    }
    if (!any_global) return TR_ERR_INVALID_ARG; /* a slot needs a pinned id */
    if (!alloc) alloc = &tr_radix_allocator_libc;
    if (!alloc->alloc || !alloc->free) return TR_ERR_INVALID_ARG;
    radix_tree *t = alloc->alloc(alloc->user, sizeof *t);
    if (!t) return TR_ERR_NOMEM;
    memset(t, 0, sizeof *t);
    t->a = *alloc;
    t->win = alloc->alloc(alloc->user, (size_t)n_units * sizeof(int32_t));
    if (!t->win) {
        alloc->free(alloc->user, t);
        return TR_ERR_NOMEM;
    }
    for (int32_t u = 0; u < n_units; u++) {
        t->win[u] = window ? window[u] : 0;
        t->windowed |= (t->win[u] > 0);
    }
    t->W = n_units;
    t->pool = pool;
    t->ps = tr_kv_pool_page_size(pool);
    t->page_bytes = (size_t)t->ps * sizeof(int32_t);
    *out = t;
    return TR_OK;
}

/* Drops the tree's ids of a node's slots; returns the pages freed. */
static int32_t drop_node_pages(radix_tree *t, radix_node *x) {
    int32_t freed = 0;
    int64_t n = (int64_t)x->n_pages * t->W;
    for (int64_t k = 0; k < n; k++) {
        if (x->pages[k] < 0) continue;
        freed += kv_pool_tree_drop_(t->pool, x->pages[k]) ? 1 : 0;
        t->n_tree_pages--;
    }
    t->n_tree_slots -= x->n_pages;
    return freed;
}

/* Frees the subtree of r (r included) without regard to locks or the LRU
 * list, dropping the tree's page references. */
static void destroy_subtree(radix_tree *t, radix_node *r) {
    radix_node *x = r;
    for (;;) {
        uint32_t i = 0;
        radix_node *c = child_next(x, &i);
        if (c) {
            x = c;
            continue;
        }
        radix_node *p = x->parent;
        drop_node_pages(t, x);
        if (x != r) {
            child_remove(p, x);
            t->n_nodes--;
        }
        bool done = (x == r);
        node_free(t, x);
        if (done) return;
        x = p;
    }
}

void tr_radix_tree_free(radix_tree *t) {
    if (!t) return;
    for (uint32_t i = 0; i < t->ns_cap; i++)
        if (t->ns_slots[i]) destroy_subtree(t, t->ns_slots[i]);
    tree_free_mem(t, t->ns_slots, (size_t)t->ns_cap * sizeof *t->ns_slots);
    radix_allocator a = t->a;
    a.free(a.user, t->win);
    a.free(a.user, t);
}

int32_t tr_radix_tree_page_size(const radix_tree *t) { return t->ps; }
int32_t tr_radix_tree_units(const radix_tree *t) { return t->W; }
kv_pool *tr_radix_tree_pool(const radix_tree *t) { return t->pool; }
int32_t tr_radix_node_n_pages(const radix_node *x) { return x ? x->n_pages : 0; }
int32_t tr_radix_node_lock_count(const radix_node *x) { return x ? x->lock : 0; }

/* ---- match ---- */

int32_t tr_radix_tree_window_lo(const radix_tree *t, int32_t u, int64_t pos) {
    if (t->win[u] == 0) return 0;
    int64_t first = pos - t->win[u] + 1; /* later tokens read fewer old ones */
    return first <= 0 ? 0 : (int32_t)(first / t->ps);
}

/* The first page slot unit u must hold to go on from `slots` cached ones. */
static int32_t unit_lo(const radix_tree *t, int32_t u, int32_t slots) {
    return tr_radix_tree_window_lo(t, u, (int64_t)slots * t->ps);
}

/* The longest prefix of a match of `end` slots (its last node x matched
 * for its first cnt slots) that holds every windowed unit's id over that
 * unit's window before its end. Scans the slots backward from the end,
 * lowering the answer to each hole it meets inside a window. */
static int32_t window_fit(const radix_tree *t, const radix_node *x, int32_t cnt,
                          int32_t end) {
    int32_t keep = end;
    while (x && x->parent && end > 0 && keep > 0) {
        for (int32_t j = cnt - 1; j >= 0 && keep > 0; j--) {
            int32_t slot = end - cnt + j, lowest = keep;
            if (slot >= keep) continue;
            const int32_t *ids = x->pages + (size_t)j * (size_t)t->W;
            for (int32_t u = 0; u < t->W; u++) {
                if (t->win[u] == 0) continue;
                int32_t lo = unit_lo(t, u, keep);
                if (lo < lowest) lowest = lo;
                if (ids[u] < 0 && slot >= lo) {
                    keep = slot;
                    break;
                }
            }
            if (slot < lowest) return keep;
        }
        end -= cnt;
        x = x->parent;
        cnt = x ? x->n_pages : 0;
    }
    return keep;
}

/* The node holding slot keep - 1 of a match of `end` slots ending in x
 * (matched for its first cnt slots); NULL when keep is 0. */
static radix_node *node_of_slot(radix_node *x, int32_t cnt, int32_t end,
                                int32_t keep) {
    if (keep <= 0) return NULL;
    while (x && end - cnt > keep - 1) {
        end -= cnt;
        x = x->parent;
        cnt = x ? x->n_pages : 0;
    }
    return x;
}

tr_status tr_radix_tree_match(radix_tree *t, uint64_t ns, const int32_t *tokens,
                           int32_t n, int32_t *pages_out, radix_match *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!t || !out || n < 0 || (n > 0 && !tokens)) return TR_ERR_INVALID_ARG;
    const int32_t ps = t->ps;
    const int32_t F = n / ps;
    radix_node *deepest = NULL;
    int32_t matched = 0, deepest_m = 0; /* page slots */
    radix_node *x = F > 0 ? ns_find(t, ns) : NULL;
    while (x && matched < F) {
        const int32_t *tok = tokens + (size_t)matched * (size_t)ps;
        radix_node *c = child_find(t, x, tok, page_key(tok, ps));
        if (!c) break;
        int32_t lim = TR_MIN(c->n_pages, F - matched);
        int32_t m = common_pages(c->tokens, tok, lim, ps);
        if (pages_out)
            memcpy(pages_out + (size_t)matched * (size_t)t->W, c->pages,
                   (size_t)m * (size_t)t->W * sizeof(int32_t));
        matched += m;
        deepest = c;
        deepest_m = m;
        if (m < c->n_pages) break;
        x = c;
    }
    if (deepest && t->windowed) {
        int32_t keep = window_fit(t, deepest, deepest_m, matched);
        deepest = node_of_slot(deepest, deepest_m, matched, keep);
        matched = keep;
    }
    if (deepest) lru_touch_path(t, deepest);
    out->node = deepest;
    out->n_pages = matched;
    out->n_tokens = matched * ps;
    t->hit_tokens += (uint64_t)out->n_tokens;
    t->miss_tokens += (uint64_t)(n - out->n_tokens);
    return TR_OK;
}

/* ---- lock ---- */

/* A lock pins the ids of the units without a window only: a windowed
 * unit's ids are held by the references of the sequences whose window
 * covers them (radix_tree.h, "Units"). */
static void pin_pages(radix_tree *t, radix_node *x, bool on) {
    for (int32_t j = 0; j < x->n_pages; j++)
        for (int32_t u = 0; u < t->W; u++)
            if (t->win[u] == 0)
                kv_pool_set_pinned_(t->pool, x->pages[(size_t)j * t->W + u], on);
}

tr_status tr_radix_tree_lock(radix_tree *t, radix_node *x) {
    if (!t) return TR_ERR_INVALID_ARG;
    if (!x) return TR_OK;
    /* Counts grow toward the root, so the root's bounds them all. */
    radix_node *top = x;
    while (top->parent) top = top->parent;
    if (top->lock == INT32_MAX) return TR_ERR_OVERFLOW;
    for (; x; x = x->parent) {
        if (x->lock++ == 0) {
            lru_remove(t, x);
            pin_pages(t, x, true);
        }
    }
    return TR_OK;
}

tr_status tr_radix_tree_unlock(radix_tree *t, radix_node *x) {
    if (!t) return TR_ERR_INVALID_ARG;
    if (!x) return TR_OK;
    if (x->lock <= 0) return TR_ERR_STATE;
    /* Deepest first: each node reaching 0 goes to the front, its ancestors
     * in front of it. */
    for (; x; x = x->parent) {
        TR_ASSERT(x->lock > 0);
        if (--x->lock == 0) {
            pin_pages(t, x, false);
            lru_push_front(t, x);
        }
    }
    return TR_OK;
}

/* ---- insert ---- */

/* Splits x after its first m pages (0 < m < n_pages) using the block `top`
 * (m pages): top takes x's place under x's parent, x keeps the rest. */
static void split_node(radix_tree *t, radix_node *x, int32_t m,
                       radix_node *top) {
    const size_t head = (size_t)m * (size_t)t->ps;
    memcpy(top->tokens, x->tokens, head * sizeof(int32_t));
    memcpy(top->pages, x->pages, (size_t)m * (size_t)t->W * sizeof(int32_t));
    top->parent = x->parent;
    top->ns = x->ns;
    top->lock = x->lock; /* every lock through x passes through top */
    top->key = x->key;   /* same first page */
    child_replace(x->parent, x, top);
    x->tokens += head;
    x->pages += (size_t)m * (size_t)t->W;
    x->n_pages -= m;
    x->key = page_key(x->tokens, t->ps);
    x->parent = top;
    child_add(top, x);
    /* Pinned flags are per page and unchanged: top is locked iff x is. */
    if (x->lock == 0) lru_insert_before(t, x, top);
    t->n_nodes++;
}

/* A page the tree will take over or drop: a valid id, owned by the caller,
 * not in the tree, not listed before. Marks it. */
static bool claim_page(kv_pool *pool, int32_t page) {
    if (!kv_pool_valid_id_(pool, page)) return false;
    uint8_t f = pool->flags[page];
    if (pool->ref[page] == 0 || (f & (KV_FLAG_IN_TREE | KV_FLAG_MARK)))
        return false;
    pool->flags[page] = (uint8_t)(f | KV_FLAG_MARK);
    return true;
}

/* Unmarks the caller ids of page slots [0, upto) validated so far. */
static void unmark_pages(const radix_tree *t, const int32_t *pages, int32_t upto) {
    kv_pool *pool = t->pool;
    for (int64_t i = 0; i < (int64_t)upto * t->W; i++)
        if (kv_pool_valid_id_(pool, pages[i]))
            pool->flags[pages[i]] &= (uint8_t)~KV_FLAG_MARK;
}

/* Validates the caller's ids of one page slot against the tree's (tree
 * NULL: a slot the tree does not have): an id of a unit without a window
 * that differs from the tree's, and any other id of a windowed unit that
 * differs, is claimed; a windowed unit may pass -1 (it holds nothing). */
static bool claim_slot(const radix_tree *t, const int32_t *mine, const int32_t *tree) {
    for (int32_t u = 0; u < t->W; u++) {
        int32_t have = tree ? tree[u] : -1;
        if (mine[u] == have && tree) continue;
        if (t->win[u] > 0 && mine[u] == -1) continue;
        if (!claim_page(t->pool, mine[u])) return false;
    }
    return true;
}

/* The tree takes page id of unit u: a global id with the caller's
 * reference, a windowed one with a reference of its own (the caller keeps
 * its). */
static void adopt_id(radix_tree *t, int32_t u, int32_t id) {
    if (t->win[u] > 0) t->pool->ref[id]++;
    kv_pool_tree_adopt_(t->pool, id);
    t->n_tree_pages++;
    t->inserted_pages++;
}

/* Settles one matched page slot: a duplicate of a unit without a window is
 * dropped and replaced by the tree's id; a windowed unit's duplicate is
 * dropped and the caller's reference moves to the tree's id; a windowed id
 * the tree lacks fills the hole (the tree takes a reference of its own).
 * Returns the duplicates. */
static int32_t settle_slot(radix_tree *t, int32_t *mine, int32_t *tree) {
    kv_pool *pool = t->pool;
    int32_t dup = 0;
    for (int32_t u = 0; u < t->W; u++) {
        if (mine[u] == tree[u] || mine[u] < 0) continue;
        if (tree[u] < 0) { /* fill the hole */
            adopt_id(t, u, mine[u]);
            tree[u] = mine[u];
            continue;
        }
        tr_kv_pool_release_(pool, mine[u]);
        if (t->win[u] > 0) {
            tr_status st = tr_kv_pool_ref(pool, tree[u]);
            TR_ASSERT(st == TR_OK);
            (void)st;
        }
        mine[u] = tree[u];
        dup++;
    }
    return dup;
}


tr_status tr_radix_tree_insert(radix_tree *t, uint64_t ns, const int32_t *tokens,
                            int32_t *pages, int32_t n, radix_node **out_node) {
    if (!t || n < 0 || (n > 0 && (!tokens || !pages))) return TR_ERR_INVALID_ARG;
    const int32_t ps = t->ps;
    const size_t W = (size_t)t->W;
    const int32_t F = n / ps;
    if (F == 0) {
        if (out_node) *out_node = NULL;
        return TR_OK;
    }

    /* 1. Walk without changing anything (the pool's scratch MARK bits,
     *    which catch a page listed twice, are cleared before going on),
     *    validating the caller's pages against the tree's as we go.
     *    Afterwards: `parent` is the last fully matched node (the
     *    namespace root if none); `edge`, if set, was matched for its first
     *    edge_m pages only. */
    radix_node *root = ns_find(t, ns);
    radix_node *parent = root, *edge = NULL;
    int32_t edge_m = 0, matched = 0;
    bool ok = true;
    while (parent && matched < F) {
        const int32_t *tok = tokens + (size_t)matched * (size_t)ps;
        radix_node *c = child_find(t, parent, tok, page_key(tok, ps));
        if (!c) break;
        int32_t lim = TR_MIN(c->n_pages, F - matched);
        int32_t m = common_pages(c->tokens, tok, lim, ps);
        for (int32_t j = 0; j < m && ok; j++)
            ok = claim_slot(t, pages + (size_t)(matched + j) * W,
                            c->pages + (size_t)j * W);
        if (!ok) {
            unmark_pages(t, pages, matched + m);
            return TR_ERR_INVALID_ARG;
        }
        matched += m;
        if (m < c->n_pages) {
            edge = c;
            edge_m = m;
            break;
        }
        parent = c;
    }
    for (int32_t i = matched; i < F; i++) {
        if (!claim_slot(t, pages + (size_t)i * W, NULL)) {
            unmark_pages(t, pages, i + 1);
            return TR_ERR_INVALID_ARG;
        }
    }
    unmark_pages(t, pages, F);

    /* 2. Allocate everything the change needs. */
    const bool new_leaf = matched < F;
    const bool need_root = (root == NULL);
    const bool need_split = new_leaf && edge != NULL;
    radix_node *new_root = NULL, *top = NULL, *leaf = NULL;
    radix_node **ns_mem = NULL;
    radix_slot *kid_mem = NULL;
    uint32_t ns_newcap = 0, kid_newcap = 0;
    size_t ns_mem_bytes = 0, kid_mem_bytes = 0;
    if (new_leaf) {
        bool fail = false;
        if (need_root) {
            fail = !(new_root = node_alloc(t, 0));
            if (!fail && ns_needs_grow(t)) {
                ns_newcap = t->ns_cap ? t->ns_cap * 2 : 8;
                ns_mem_bytes = (size_t)ns_newcap * sizeof *ns_mem;
                fail = !(ns_mem = tree_alloc(t, ns_mem_bytes));
            }
        }
        if (!fail && need_split) fail = !(top = node_alloc(t, edge_m));
        if (!fail) fail = !(leaf = node_alloc(t, F - matched));
        if (!fail && !need_split && !need_root && child_needs_grow(parent)) {
            kid_newcap = child_grown_cap(parent);
            kid_mem_bytes = (size_t)kid_newcap * sizeof(radix_slot);
            fail = !(kid_mem = tree_alloc(t, kid_mem_bytes));
        }
        if (fail) {
            if (new_root) node_free(t, new_root);
            tree_free_mem(t, ns_mem, ns_mem_bytes);
            if (top) node_free(t, top);
            if (leaf) node_free(t, leaf);
            tree_free_mem(t, kid_mem, kid_mem_bytes);
            return TR_ERR_NOMEM;
        }
    }

    /* 3. Mutate; nothing below can fail. */
    if (need_root) {
        new_root->ns = ns;
        if (ns_mem) ns_grow_commit(t, ns_mem, ns_newcap);
        ns_put(t->ns_slots, t->ns_cap, new_root);
        t->ns_count++;
        lru_push_front(t, new_root);
        parent = root = new_root;
    }
    if (need_split) {
        split_node(t, edge, edge_m, top);
        parent = top;
        edge = NULL;
    }

    /* Duplicates: walk the matched path bottom-up, positions [0, matched). */
    radix_node *d = edge ? edge : parent;
    int32_t cnt = edge ? edge_m : d->n_pages;
    int32_t dup = 0;
    for (int32_t end = matched; end > 0;) {
        TR_ASSERT(d && cnt <= end);
        int32_t start = end - cnt;
        for (int32_t j = 0; j < cnt; j++)
            dup += settle_slot(t, pages + (size_t)(start + j) * W, d->pages + (size_t)j * W);
        end = start;
        d = d->parent;
        cnt = d ? d->n_pages : 0;
    }

    radix_node *result;
    if (new_leaf) {
        const int32_t np = F - matched;
        memcpy(leaf->tokens, tokens + (size_t)matched * (size_t)ps,
               (size_t)np * t->page_bytes);
        memcpy(leaf->pages, pages + (size_t)matched * W, (size_t)np * W * sizeof(int32_t));
        leaf->key = page_key(leaf->tokens, ps);
        leaf->parent = parent;
        leaf->ns = ns;
        for (size_t k = 0; k < (size_t)np * W; k++)
            if (leaf->pages[k] >= 0) adopt_id(t, (int32_t)(k % W), leaf->pages[k]);
        if (kid_mem) child_grow_commit(t, parent, kid_mem, kid_newcap);
        child_add(parent, leaf);
        lru_push_front(t, leaf);
        t->n_nodes++;
        t->n_tree_slots += np;
        result = leaf;
    } else {
        result = edge ? edge : parent;
    }
    lru_touch_path(t, result);
    t->duplicate_pages += (uint64_t)dup;
    t->inserts++;
    if (out_node) *out_node = result;
    return TR_OK;
}

/* ---- eviction ---- */

static radix_node *dfs_next(const radix_node *x, const radix_node *r);

/* Removes an unlocked leaf (or childless namespace root); returns the
 * pages that went back to the free list. */
static int32_t remove_leaf(radix_tree *t, radix_node *x) {
    TR_ASSERT(x->n_children == 0 && x->lock == 0);
    lru_remove(t, x);
    if (x->parent) {
        child_remove(x->parent, x);
        t->n_nodes--;
        t->evicted_nodes++;
    } else {
        ns_remove(t, x);
    }
    int32_t freed = drop_node_pages(t, x);
    t->evicted_pages += (uint64_t)freed;
    node_free(t, x);
    return freed;
}

/* Frees windowed units' ids that only the tree holds (no sequence's
 * window covers them), in nodes that are locked (the unlocked ones went
 * first, whole), until `need` pages are free. Leaves holes: a later match
 * stops before a window that would need one. */
static int32_t strip_windows(radix_tree *t, int32_t need) {
    int32_t freed = 0;
    kv_pool *pool = t->pool;
    for (uint32_t i = 0; i < t->ns_cap && freed < need; i++) {
        radix_node *r = t->ns_slots[i];
        if (!r) continue;
        for (radix_node *x = r; x && freed < need; x = dfs_next(x, r)) {
            int64_t n = (int64_t)x->n_pages * t->W;
            for (int64_t k = 0; k < n && freed < need; k++) {
                int32_t id = x->pages[k];
                if (id < 0 || t->win[k % t->W] == 0 || pool->ref[id] != 1) continue;
                x->pages[k] = -1;
                freed += kv_pool_tree_drop_(pool, id) ? 1 : 0;
                t->n_tree_pages--;
                t->stripped_pages++;
            }
        }
    }
    return freed;
}

int32_t tr_radix_tree_evict(radix_tree *t, int32_t n_pages_needed) {
    int32_t freed = 0;
    if (!t) return 0;
    while (freed < n_pages_needed && t->lru_tail) {
        radix_node *x = t->lru_tail;
        if (t->hook && x->n_pages > 0) {
            const radix_node *r = x;
            while (r->parent) r = r->parent;
            t->hook(t->hook_user, r->ns, x);
        }
        freed += remove_leaf(t, x);
    }
    if (freed < n_pages_needed && t->windowed)
        freed += strip_windows(t, n_pages_needed - freed);
    return freed;
}

void tr_radix_tree_set_evict_hook(radix_tree *t, radix_evict_hook fn, void *user) {
    t->hook = fn;
    t->hook_user = fn ? user : NULL;
}

int32_t tr_radix_node_prefix(const radix_tree *t, const radix_node *x, int32_t *out,
                             int32_t cap) {
    int64_t n = 0;
    for (const radix_node *y = x; y && y->parent; y = y->parent)
        n += (int64_t)y->n_pages * t->ps;
    if (n > cap || n > INT32_MAX) return -1;
    int64_t end = n;
    for (const radix_node *y = x; y && y->parent; y = y->parent) {
        int64_t len = (int64_t)y->n_pages * t->ps;
        end -= len;
        memcpy(out + end, y->tokens, (size_t)len * sizeof *out);
    }
    return (int32_t)n;
}

const int32_t *tr_radix_node_pages(const radix_node *x) { return x ? x->pages : NULL; }

int32_t tr_radix_tree_flush(radix_tree *t) {
    int32_t freed = 0;
    if (!t) return 0;
    while (t->lru_tail) freed += remove_leaf(t, t->lru_tail);
    return freed;
}

/* ---- stats, check, dump ---- */

void tr_radix_tree_stats_get(const radix_tree *t, radix_tree_stats *s) {
    memset(s, 0, sizeof *s);
    s->hit_tokens = t->hit_tokens;
    s->miss_tokens = t->miss_tokens;
    uint64_t total = t->hit_tokens + t->miss_tokens;
    s->hit_rate = total ? (double)t->hit_tokens / (double)total : 0.0;
    s->inserts = t->inserts;
    s->inserted_pages = t->inserted_pages;
    s->duplicate_pages = t->duplicate_pages;
    s->evicted_nodes = t->evicted_nodes;
    s->evicted_pages = t->evicted_pages;
    s->n_nodes = t->n_nodes;
    s->n_namespaces = t->ns_count;
    s->n_tree_pages = t->n_tree_pages;
    s->n_tree_tokens = t->n_tree_slots * t->ps;
    s->stripped_pages = t->stripped_pages;
    s->bytes = t->bytes;
    kv_pool_stats ps;
    tr_kv_pool_stats_get(t->pool, &ps);
    s->pages_free = ps.n_free;
    s->pages_locked = ps.n_locked;
    s->pages_cached = ps.n_cached;
}

/* Pre-order successor of x within the subtree of r; NULL after the last. */
static radix_node *dfs_next(const radix_node *x, const radix_node *r) {
    uint32_t i = 0;
    radix_node *c = child_next(x, &i);
    if (c) return c;
    while (x != r) {
        const radix_node *p = x->parent;
        uint32_t j = child_slot_of(p, x);
        if (j == UINT32_MAX) return NULL; /* only on a corrupt tree */
        j++;
        c = child_next(p, &j);
        if (c) return c;
        x = p;
    }
    return NULL;
}

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (!(cond)) {                                                    \
            fprintf(stderr, "radix_tree_check: " __VA_ARGS__);            \
            fputc('\n', stderr);                                          \
            st = TR_ERR_INTERNAL;                                         \
            goto done;                                                    \
        }                                                                 \
    } while (0)

/* Checks one node and its child table; accumulates counts. */
static tr_status check_node(const radix_tree *t, const radix_node *x, int64_t *slots,
                            int64_t *pages, int64_t *pinned, uint64_t *bytes) {
    tr_status st = TR_OK;
    const kv_pool *pool = t->pool;
    const int32_t ps = t->ps;
    const bool is_root = (x->parent == NULL);
    *bytes += node_block_bytes(t, x->cap_pages);
    if (is_root) {
        CHECK(x->n_pages == 0 && x->cap_pages == 0, "root with pages");
        CHECK(ns_find(t, x->ns) == x, "root of ns %" PRIx64 " not in table",
              x->ns);
    } else {
        CHECK(x->n_pages >= 1 && x->n_pages <= x->cap_pages,
              "node with %d pages, capacity %d", x->n_pages, x->cap_pages);
        const int32_t *block_tokens = (const int32_t *)(const void *)(x + 1);
        const int32_t *block_pages =
            block_tokens + (size_t)x->cap_pages * (size_t)ps;
        CHECK(x->tokens + (size_t)x->n_pages * (size_t)ps == block_pages &&
                  x->pages + (size_t)x->n_pages * t->W ==
                      block_pages + (size_t)x->cap_pages * t->W,
              "span does not end at its block's end");
        CHECK(x->key == page_key(x->tokens, ps), "stale key");
        CHECK(x->ns == x->parent->ns, "namespace differs from parent's");
    }
    CHECK(x->lock >= 0, "negative lock %d", x->lock);
    /* Children. */
    if (x->hash_cap == 0) {
        CHECK(x->n_children <= RADIX_INLINE, "%u inline children",
              x->n_children);
    } else {
        CHECK(x->hash_cap >= RADIX_HASH_MIN &&
                  (x->hash_cap & (x->hash_cap - 1)) == 0 &&
                  (uint64_t)x->n_children * 2 <= x->hash_cap,
              "child table cap %u for %u children", x->hash_cap,
              x->n_children);
        *bytes += (uint64_t)x->hash_cap * sizeof(radix_slot);
    }
    uint32_t found = 0;
    int64_t child_locks = 0;
    for (uint32_t i = 0; i < child_slot_count(x); i++) {
        const radix_node *c = child_at(x, i);
        if (!c) {
            CHECK(x->hash_cap != 0, "inline child %u is NULL", i);
            continue;
        }
        found++;
        CHECK(c->parent == x, "child's parent pointer is wrong");
        CHECK(c->n_pages >= 1, "child without pages");
        uint32_t slot_key = x->hash_cap ? x->kids.slots[i].key : x->kids.small.key[i];
        CHECK(slot_key == c->key, "slot key differs from child key");
        /* Finding each child by its own first page proves the first pages
         * are distinct (a duplicate would shadow one of them). */
        CHECK(child_find(t, x, c->tokens, page_key(c->tokens, ps)) == c,
              "child not found by its first page (duplicate first page?)");
        child_locks += c->lock;
    }
    CHECK(found == x->n_children, "child count %u, found %u", x->n_children,
          found);
    CHECK(child_locks <= x->lock, "lock %d below children's sum %" PRId64,
          x->lock, child_locks);
    /* Pages: a unit without a window has an id in every slot, pinned iff
     * the node is locked; a windowed unit's ids are never pinned and may
     * be holes. */
    for (int64_t k = 0; k < (int64_t)x->n_pages * t->W; k++) {
        int32_t p = x->pages[k];
        bool windowed = t->win[k % t->W] > 0;
        if (windowed && p == -1) continue;
        CHECK(kv_pool_valid_id_(pool, p), "bad page id %d", p);
        uint8_t f = pool->flags[p];
        bool want_pin = !windowed && x->lock > 0;
        CHECK(f & KV_FLAG_IN_TREE, "page %d not flagged in tree", p);
        CHECK(((f & KV_FLAG_PINNED) != 0) == want_pin,
              "page %d pinned=%d but node lock %d (unit %d)", p,
              (f & KV_FLAG_PINNED) != 0, x->lock, (int)(k % t->W));
        CHECK(pool->ref[p] >= 1, "tree page %d has no reference", p);
        (*pages)++;
        if (want_pin) (*pinned)++;
    }
    *slots += x->n_pages;
done:
    return st;
}

tr_status tr_radix_tree_check(const radix_tree *t) {
    tr_status st = TR_OK;
    if (!t) return TR_ERR_INVALID_ARG;
    const kv_pool *pool = t->pool;
    int64_t n_nodes = 0, n_roots = 0, n_unlocked = 0, pages = 0, pinned = 0, slots = 0;
    int64_t limit = t->n_nodes + t->ns_count; /* guards against cycles */
    uint64_t bytes = sizeof(radix_node *) * (uint64_t)t->ns_cap;

    st = tr_kv_pool_check(pool);
    if (st != TR_OK) return st;

    CHECK(t->ns_cap == 0 || (t->ns_cap & (t->ns_cap - 1)) == 0,
          "ns table cap %u", t->ns_cap);
    CHECK((uint64_t)t->ns_count * 2 <= t->ns_cap, "ns table overfull");
    /* Walk every namespace, marking nodes as reached. */
    for (uint32_t i = 0; i < t->ns_cap; i++) {
        radix_node *r = t->ns_slots[i];
        if (!r) continue;
        n_roots++;
        for (radix_node *x = r; x; x = dfs_next(x, r)) {
            CHECK(n_nodes + n_roots <= limit, "more nodes than counted");
            CHECK(!(x->mark & MARK_REACHED), "node reached twice");
            st = check_node(t, x, &slots, &pages, &pinned, &bytes);
            if (st != TR_OK) goto done;
            x->mark |= MARK_REACHED;
            if (x != r) n_nodes++;
            if (x->lock == 0) n_unlocked++;
        }
    }
    CHECK(n_roots == t->ns_count, "ns count %u, found %" PRId64, t->ns_count,
          n_roots);
    CHECK(n_nodes == t->n_nodes, "node count %" PRId64 ", found %" PRId64,
          t->n_nodes, n_nodes);
    CHECK(pages == t->n_tree_pages, "page count %" PRId64 ", found %" PRId64,
          t->n_tree_pages, pages);
    CHECK(slots == t->n_tree_slots, "slot count %" PRId64 ", found %" PRId64,
          t->n_tree_slots, slots);
    CHECK(bytes == t->bytes, "bytes %" PRIu64 ", recount %" PRIu64, t->bytes,
          bytes);
    /* The pool agrees: exactly these pages are in the tree / pinned. Each
     * tree page carries IN_TREE (checked above), so equal counts also mean
     * no page sits in two places of the tree. */
    int64_t pool_in_tree = 0, pool_pinned = 0;
    for (int32_t p = 0; p < pool->n_pages; p++) {
        pool_in_tree += (pool->flags[p] & KV_FLAG_IN_TREE) != 0;
        pool_pinned += (pool->flags[p] & KV_FLAG_PINNED) != 0;
    }
    CHECK(pool_in_tree == pages, "pool has %" PRId64 " tree pages, tree %" PRId64,
          pool_in_tree, pages);
    CHECK(pool_pinned == pinned, "pool has %" PRId64 " pinned pages, tree %" PRId64,
          pool_pinned, pinned);
    /* LRU: exactly the unlocked nodes, linked both ways, parents first. */
    {
        int64_t len = 0;
        const radix_node *prev = NULL;
        for (radix_node *x = t->lru_head; x; prev = x, x = x->lru_next) {
            CHECK(++len <= n_unlocked, "LRU list longer than unlocked nodes");
            CHECK(x->lru_prev == prev, "LRU back link broken");
            CHECK(x->mark & MARK_REACHED, "LRU node not in the tree");
            CHECK(!(x->mark & MARK_IN_LRU), "LRU node listed twice");
            CHECK(x->lock == 0, "locked node on the LRU list");
            CHECK(!x->parent || x->parent->lock > 0 ||
                      (x->parent->mark & MARK_IN_LRU),
                  "LRU node ahead of its parent");
            x->mark |= MARK_IN_LRU;
        }
        CHECK(t->lru_tail == prev, "LRU tail pointer wrong");
        CHECK(len == n_unlocked, "LRU has %" PRId64 " nodes, %" PRId64 " unlocked",
              len, n_unlocked);
        CHECK(!t->lru_tail || t->lru_tail->n_children == 0, "LRU tail not a leaf");
    }
done:
    /* Clear the scratch marks (bounded walk, in case the tree is corrupt). */
    for (uint32_t i = 0; i < t->ns_cap; i++) {
        radix_node *r = t->ns_slots[i];
        if (!r) continue;
        int64_t steps = 0;
        for (radix_node *x = r; x && steps <= limit; x = dfs_next(x, r), steps++)
            x->mark = 0;
    }
    return st;
}

static void dump_node(const radix_tree *t, const radix_node *x, FILE *f) {
    int depth = 0;
    for (const radix_node *p = x->parent; p; p = p->parent) depth++;
    fprintf(f, "%*s[%d page%s] lock=%d tokens:", 2 * depth, "", x->n_pages,
            x->n_pages == 1 ? "" : "s", x->lock);
    const int64_t n_tok = (int64_t)x->n_pages * t->ps;
    for (int64_t i = 0; i < n_tok && i < 64; i++)
        fprintf(f, "%s%d", (i > 0 && i % t->ps == 0) ? " | " : " ", x->tokens[i]);
    if (n_tok > 64) fprintf(f, " ...(+%" PRId64 ")", n_tok - 64);
    fprintf(f, "  pages:");
    for (int64_t k = 0; k < (int64_t)x->n_pages * t->W; k++)
        fprintf(f, "%s%d", k % t->W ? "/" : " ", x->pages[k]);
    fputc('\n', f);
}

void tr_radix_tree_dump(const radix_tree *t, FILE *f) {
    fprintf(f,
            "radix_tree page_size=%d namespaces=%u nodes=%" PRId64
            " pages=%" PRId64 " bytes=%" PRIu64 "\n",
            t->ps, t->ns_count, t->n_nodes, t->n_tree_pages, t->bytes);
    for (uint32_t i = 0; i < t->ns_cap; i++) {
        radix_node *r = t->ns_slots[i];
        if (!r) continue;
        fprintf(f, "ns %016" PRIx64 " lock=%d children=%u\n", r->ns, r->lock,
                r->n_children);
        for (radix_node *x = dfs_next(r, r); x; x = dfs_next(x, r))
            dump_node(t, x, f);
    }
    fprintf(f, "lru (most recent first):");
    for (const radix_node *x = t->lru_head; x; x = x->lru_next) {
        if (x->parent) fprintf(f, " p%d", x->pages[0]);
        else fprintf(f, " ns:%" PRIx64, x->ns);
    }
    fputc('\n', f);
}
