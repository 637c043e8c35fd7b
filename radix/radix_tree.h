/* radix_tree.h — the radix-tree prefix cache (RadixAttention): maps token
 * sequences to the KV pages that hold them, so that requests sharing a
 * prefix (system prompt, few-shot template, earlier chat turns, fork
 * branches) compute and store it once.
 *
 * Layering: radix/ (top half), on kv_pool.h. Token ids and page ids only:
 * no models, tensors, HTTP or CUDA. Used by runtime/engine.
 *
 * The tree, with page_size 4 (one letter = one token id, | = page border).
 * Each namespace (a uint64 hash of model / adapter / cache salt) has its own
 * root; pages are never shared across namespaces. Every node's span is a
 * whole number of pages, and the node keeps the page id of each:
 *
 *   ns 0x51d0 root
 *    |
 *    +-- "You |are |kind"            pages [7 2 9]   lock=2
 *    |     |
 *    |     +-- "Q:  "                pages [4]       lock=2
 *    |           +-- "2+2?"          pages [11]      lock=1  <- seq A
 *    |           +-- "Why?"          pages [3]       lock=1  <- seq B
 *    |
 *    +-- "Tran|slat|e:  "            pages [8 0 6]   lock=0  (evictable)
 *
 * Children are keyed by their first page of tokens (a hash of it, then a
 * memcmp): with page_size 1 that is the first token. A node holds up to 4
 * children inline and switches to an open-addressing hash table beyond.
 *
 * Split. Inserting "Tran|slat|ion:" (pages 1 12 10) into the tree above
 * walks "Tran|slat|" — 2 full pages equal — and diverges in the third. The
 * edge is cut at that page border; the old node keeps its identity (locks
 * and handles to it stay valid) as the lower half:
 *
 *   before                               after
 *   +-- "Tran|slat|e:  " [8 0 6]         +-- "Tran|slat" [8 0]       (new)
 *                                              +-- "e:  " [6]        (old node)
 *                                              +-- "ion:" [10]       (new leaf)
 *
 * The caller's pages 1 and 12 duplicate the tree's 8 and 0: the tree
 * returns them to the pool and rewrites the caller's page table to 8 0 10.
 * A divergence inside a page shares nothing of that page: inserting
 * "Tran|slot" would share only "Tran", since edges are cut at page borders
 * and "slot" is a different page from "slat".
 *
 * Full pages only. The tree stores only full pages: insert truncates its
 * key to a multiple of page_size, and a sequence's partly filled last page
 * stays private to it. Hence every page in the tree is full and its K/V is
 * final, and no one ever writes to a shared page: a sequence that matched
 * L tokens (a multiple of page_size) writes its next K/V at position L,
 * which is the first slot of a page it allocated itself. That is why no
 * copy-on-write is ever needed. The price: up to page_size - 1 tokens of a
 * matching prefix are recomputed. (To get logits for the last prompt
 * token, match at most n - 1 tokens, so that it is always recomputed into
 * a private page.)
 *
 * Locks. tr_radix_tree_lock(node) adds one to the lock count of node and of
 * every ancestor; a node's count is the number of locks held on it or on
 * its descendants. Locked nodes are never evicted and their pages are
 * "pinned" (kv_pool: state locked). A lock covers the whole node, including
 * pages past a match that ended inside it.
 *
 * LRU. Unlocked nodes sit on one recency list (most recent first). match
 * and insert move the nodes of their path to the front, deepest first, and
 * unlock puts a node whose count reached 0 at the front; so each node is
 * always ahead of its descendants and the list's tail is always an unlocked
 * leaf. Eviction takes the tail: O(1) per node, no heap. A parent whose
 * children all went becomes a leaf and waits its own turn.
 *
 * Typical use by the engine for one sequence:
 *
 *   radix_match m;
 *   tr_radix_tree_match(t, ns, prompt, n - 1, pages, &m);   // pages[0..m.n_pages)
 *   tr_radix_tree_lock(t, m.node);
 *   tr_kv_pool_alloc(pool, need - m.n_pages, pages + m.n_pages)
 *       // on TR_ERR_FULL: tr_radix_tree_evict(t, shortfall), retry
 *   ... prefill positions m.n_tokens .. n-1 ...
 *   radix_node *x;
 *   tr_radix_tree_insert(t, ns, prompt, pages, n, &x);      // rewrites pages[]
 *   tr_radix_tree_lock(t, x); tr_radix_tree_unlock(t, m.node); // keep what it uses
 *   ... decode ...
 *   on finish: tr_radix_tree_insert(t, ns, all, pages, n_kv, &y);
 *              tr_radix_tree_unlock(t, x);
 *              tr_kv_pool_unref_n(pool, private pages left: past n_kv / ps);
 *
 * Units (windowed KV). A model whose layers attend over different ranges
 * (Gemma 3: most layers see the last 512 positions, every sixth sees all)
 * keeps each page_size run of tokens in W pages, one per unit (a group of
 * layers with one window). Every page-id array of this interface then has
 * W ids per page slot: ids[slot * W + u]. Counts (n_pages, matches) stay in
 * page slots. A unit without a window ("global") behaves as described
 * above. A windowed unit differs in three ways:
 *   - its ids are never pinned by locks: a sequence holds its own pool
 *     reference on each windowed id inside its window, so the ids no window
 *     covers are cached (evictable) even in a locked node;
 *   - an id may be -1, a hole (its K/V was freed: the sequence let it go
 *     when it left the window, or the tree's eviction stripped it);
 *   - a match ends where going on would need a hole: it is shortened to the
 *     longest prefix whose last `window` positions are held by every
 *     windowed unit (positions older than a window are never read again).
 * Eviction takes unlocked nodes in LRU order first; when that is not
 * enough, it strips windowed ids that only the tree holds from locked
 * nodes. With W == 1 (tr_radix_tree_new) nothing of this applies.
 *
 * Threads: none inside; one thread (the engine's) uses a tree and its pool.
 */
#ifndef TR_RADIX_RADIX_TREE_H
#define TR_RADIX_RADIX_TREE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "radix/kv_pool.h"
#include "base/status.h"

typedef struct radix_tree radix_tree;

/* A node handle. Valid while the node is locked; an unlocked handle is
 * valid until the next tr_radix_tree_evict / tr_radix_tree_flush /
 * tr_radix_tree_free (insert never frees or moves nodes: a split keeps the
 * node's identity as the lower half). Lock it right after getting it. */
typedef struct radix_node radix_node;

typedef struct radix_match {
    radix_node *node; /* deepest node reached; NULL when nothing matched */
    int32_t n_tokens; /* matched tokens, a multiple of page_size */
    int32_t n_pages;  /* n_tokens / page_size page slots written (W ids each) */
} radix_match;

typedef struct radix_tree_stats {
    uint64_t hit_tokens;     /* sum of matched tokens over match calls */
    uint64_t miss_tokens;    /* sum of (n - matched) over match calls */
    double hit_rate;         /* hit / (hit + miss); 0 before any match */
    uint64_t inserts;        /* successful insert calls */
    uint64_t inserted_pages; /* pages the tree took over */
    uint64_t duplicate_pages; /* caller pages returned (tree had its own) */
    uint64_t evicted_nodes;
    uint64_t evicted_pages;  /* pages freed by evict and flush */
    uint64_t stripped_pages; /* windowed ids freed from locked nodes */
    int64_t n_nodes;         /* excluding namespace roots */
    int64_t n_namespaces;
    int64_t n_tree_pages;    /* page ids held by the tree (holes not counted) */
    int64_t n_tree_tokens;   /* tokens of all nodes (page slots * page_size) */
    uint64_t bytes;          /* bookkeeping memory of the tree (nodes, token
                              * copies, child tables), allocator-visible */
    int32_t pages_free, pages_locked, pages_cached; /* from the pool */
} radix_tree_stats;

/* Creates an empty tree over pool (borrowed: it must outlive the tree; one
 * tree per pool). alloc NULL = libc. On failure *out is untouched. */
tr_status tr_radix_tree_new(kv_pool *pool, const radix_allocator *alloc,
                         radix_tree **out);

/* The most units a tree takes. */
#define TR_RADIX_MAX_UNITS 64

/* A tree with n_units ids per page slot; window[u] is unit u's window in
 * tokens (0 = every position; at least one unit has 0). n_units 1 with
 * window NULL is tr_radix_tree_new. TR_ERR_INVALID_ARG otherwise. */
tr_status tr_radix_tree_new_units(kv_pool *pool, const radix_allocator *alloc,
                               int32_t n_units, const int32_t *window,
                               radix_tree **out);

/* W, the ids per page slot. */
int32_t tr_radix_tree_units(const radix_tree *t);

/* The first page slot unit u's window reads from a token at position pos
 * on (0 for a unit without a window): a sequence whose next position is
 * pos needs unit u's ids of the slots from there, no older ones. */
int32_t tr_radix_tree_window_lo(const radix_tree *t, int32_t u, int64_t pos);

/* Frees every node, locked or not, dropping the tree's page references
 * (pages also referenced elsewhere stay allocated). t may be NULL. Every
 * handle becomes invalid. */
void tr_radix_tree_free(radix_tree *t);

/* Longest cached prefix of tokens[0..n) in namespace ns, page-aligned.
 * Writes its page ids to pages_out[0..out->n_pages * W) (pages_out may be
 * NULL; otherwise it needs room for n / page_size * W ids, and the ids past
 * the match, when windows shortened it, are unspecified). out->node is the handle
 * to lock; pages in it are protected only once it is locked. Moves the
 * path to the front of the LRU list and counts hit/miss tokens. Nothing is
 * allocated; TR_ERR_INVALID_ARG for bad arguments (n < 0, NULL tokens with
 * n > 0, NULL out), with *out zeroed. */
tr_status tr_radix_tree_match(radix_tree *t, uint64_t ns, const int32_t *tokens,
                           int32_t n, int32_t *pages_out, radix_match *out);

/* Adds one lock on node and each ancestor (node NULL: no-op). Pins the
 * pages of nodes whose count leaves 0. TR_ERR_OVERFLOW if a count would
 * pass INT32_MAX (nothing changed). */
tr_status tr_radix_tree_lock(radix_tree *t, radix_node *node);

/* Removes one lock from node and each ancestor (NULL: no-op). Nodes whose
 * count reaches 0 become evictable (most recently used). TR_ERR_STATE if
 * node is not locked (nothing changed). */
tr_status tr_radix_tree_unlock(radix_tree *t, radix_node *node);

/* Caches tokens[0..n) of namespace ns, whose K/V are in pages[0..n/ps).
 * Only the first F = n / page_size full pages are considered; tokens past
 * F * page_size and pages[F..) are not looked at.
 *
 * Ownership, for each i < F and unit without a window (each i < F when
 * W == 1), where T is the tree's page for the prefix tokens[0..(i+1)*ps)
 * if it has one:
 *   - T exists and pages[i] == T: nothing changes hands (the caller holds
 *     that page through a lock on a node it matched or inserted).
 *   - T exists and pages[i] != T: pages[i] is a duplicate (the same prefix
 *     was computed twice). The caller must own a reference on it; the tree
 *     drops that reference (the page goes back to the pool unless someone
 *     else holds it) and sets pages[i] = T. The K/V are equal, so the caller
 *     just continues with T.
 *   - no T: the tree takes over the caller's reference on pages[i] (the
 *     caller no longer owns it: it must lock *out_node to keep using it).
 * A windowed unit's id p (caller) against the tree's T: p == -1 or p == T:
 * nothing changes; T is a hole: the tree takes a reference of its own on p
 * (the hole is filled); otherwise p is a duplicate: the caller's reference
 * on p is dropped and the caller gets one on T, and pages[] says T. So the
 * caller holds exactly one reference on each windowed id it passes, before
 * and after.
 * After success the global ids of pages[0..F) are exactly the tree's.
 * *out_node (if out_node is not NULL) receives the node covering the whole
 * F-page prefix, unlocked (NULL when F == 0): lock it while the sequence
 * runs. The path moves to the front of the LRU list.
 *
 * Every page the tree takes or drops must be a valid id, owned by the
 * caller (ref >= 1), not in the tree, and listed once; otherwise
 * TR_ERR_INVALID_ARG. Needs at most three allocations (a new namespace:
 * root, namespace table growth, leaf; otherwise a split's upper node or a
 * child table growth, and the leaf), all made before the tree or the pool
 * is touched; a key already cached needs none. On any error (TR_ERR_NOMEM,
 * TR_ERR_INVALID_ARG) the tree, the pool, pages[] and the stats are
 * unchanged. */
tr_status tr_radix_tree_insert(radix_tree *t, uint64_t ns, const int32_t *tokens,
                            int32_t *pages, int32_t n, radix_node **out_node);

/* Evicts least-recently-used unlocked leaves until n_pages_needed pages
 * were returned to the pool or nothing is evictable; then, with windowed
 * units, strips windowed ids that only the tree holds (see Units). Returns
 * the number of pages returned (pages referenced outside the tree leave it
 * but are not counted). Never allocates. */
int32_t tr_radix_tree_evict(radix_tree *t, int32_t n_pages_needed);

/* Drops every unlocked node; returns the number of pages freed. */
int32_t tr_radix_tree_flush(radix_tree *t);

/* Eviction hook (the disk tier's): fn(user, ns, node) is called by
 * tr_radix_tree_evict for each node it is about to remove, while the
 * node's pages still hold its K/V (not by flush: a flush forgets). The
 * hook must not change the tree. NULL fn removes it. */
typedef void (*radix_evict_hook)(void *user, uint64_t ns, const radix_node *node);
void tr_radix_tree_set_evict_hook(radix_tree *t, radix_evict_hook fn, void *user);

/* The tokens from the namespace root to the end of node, into out[0..cap):
 * their count (a multiple of page_size), or -1 when cap is too small. */
int32_t tr_radix_node_prefix(const radix_tree *t, const radix_node *node, int32_t *out,
                             int32_t cap);
/* The node's page ids (tr_radix_node_n_pages page slots of W ids), the
 * last pages of its prefix. */
const int32_t *tr_radix_node_pages(const radix_node *node);

int32_t tr_radix_tree_page_size(const radix_tree *t);
kv_pool *tr_radix_tree_pool(const radix_tree *t);
/* The page count of a handle's node and its lock count (tests, debug). */
int32_t tr_radix_node_n_pages(const radix_node *node);
int32_t tr_radix_node_lock_count(const radix_node *node);

void tr_radix_tree_stats_get(const radix_tree *t, radix_tree_stats *out);

/* Validates every invariant: spans are whole pages and lie within their
 * node's block; children are keyed by distinct first pages and point back
 * to their parent; each lock count is >= the sum of its children's; the
 * namespace table finds every root; every tree page is valid, in the tree
 * in the pool's flags, pinned iff its node is locked, and the pool's
 * in-tree/pinned page counts equal the tree's; the LRU list holds exactly
 * the unlocked nodes, correctly linked, each ahead of its descendants;
 * node/page/byte counters match a recount. Also runs tr_kv_pool_check.
 * TR_OK or TR_ERR_INTERNAL (a line on stderr says what broke). The tree is
 * not changed (scratch marks are set and cleared). */
tr_status tr_radix_tree_check(const radix_tree *t);

/* Prints the tree (indentation = depth; tokens, page ids, lock counts)
 * and the LRU order (by first page id; namespace roots as ns:<hex>).
 * Deterministic: equal dumps mean equal trees. */
void tr_radix_tree_dump(const radix_tree *t, FILE *f);

#endif
