/* grammar_cache_internal.h — grammar handles (trellis_grammar) and the engine's
 * compile cache: a constraint is compiled once, shared by reference, and
 * kept with its warm mask memo for the next request, under a byte budget.
 *
 * Layering: runtime/engine, over grammar/ (compilers, matcher, memo
 * sizes) and jansson (choice lists). grammar_cache.c implements the
 * "Grammars" section of include/trellis.h on top of this header;
 * grammar_compile.c holds the one switch from a kind to its compiler;
 * grammar_constraint.c the constraint ops over a handle that every
 * grammar-constrained sample runs on.
 *
 * The handle. struct trellis_grammar is immutable once made except for its
 * reference count: the kind, the compiled grammar (one reference), the
 * vocabulary it was compiled against (one reference, the engine's) and the
 * warnings. It points at neither the cache nor the engine, so it lives on
 * after eviction and even after trellis_engine_free (releasing it then is
 * safe: it frees only what it holds). What it cannot do is constrain
 * another engine's request: trellis_submit refuses a handle compiled
 * against another vocabulary object.
 *
 *   cache ──table──► entry(kind, options, text) ──ref──► handle ──ref──► grammar
 *     └──LRU list (ready entries, most recent first)        │             (automaton,
 *   request sample ──► constraint state ──ref──► handle ─────┘              mask memo)
 *                         └── matcher (one per sample) ──ref──► grammar, vocabulary
 *
 * The key is (kind, the options the kind reads, text): options a kind does
 * not read are zeroed first, so a regex compiled with any options hits the
 * same entry. Failed compiles are not cached.
 *
 * Budget. An entry weighs its automaton (grammar_stats.bytes) plus its
 * memo (tr_grammar_get_memo_stats) plus its key. Memos grow while requests
 * run, without the cache hearing of it, so the cache re-measures every
 * ready entry when it inserts one and in tr_gcache_get_stats, then evicts
 * from the LRU end until the total is within the budget (an entry alone
 * over budget is evicted right after it is handed out; it still serves
 * its handles). Each grammar's own memo is capped at min(64 MiB, budget)
 * (grammar_limits.mask_cache_bytes), past which masks are recomputed.
 *
 * Concurrency design.
 *   - `mu` (one mutex per cache) guards the hash table, the LRU list,
 *     every entry's fields and the hit/miss/compile/failure/eviction
 *     counters. It is never held while compiling: a compile takes from
 *     microseconds to the 2 s time budget, and holding the lock would
 *     serialize every compile and stall every lookup (trellis_submit on
 *     all threads) behind it.
 *   - Single flight: a miss inserts the entry in state COMPILING and
 *     compiles with mu released; a lookup of the same key that finds it
 *     COMPILING waits on `cond` (counted in entry.waiters) until it is
 *     READY (then shares its handle) or FAILED (then returns the same
 *     error and message). So N concurrent compiles of one key compile it
 *     once. A FAILED entry leaves the table at once and is freed by the
 *     last of its waiters; eviction skips entries that have waiters.
 *   - Handles are shared read-only; their count is atomic. The cache's
 *     references are dropped outside mu (freeing a grammar and its memo
 *     takes a while).
 *   - The mask memo of a grammar is written by whichever thread fills a
 *     mask first (the engine thread, for requests; any matcher thread in
 *     general): one slot per automaton state, published by compare-and-
 *     swap with release order and read lock-free with acquire loads
 *     (grammar/mask/mask.c); two threads racing on a cold state both compute
 *     and the loser frees its copy. The cache only reads the memo's size
 *     (under the grammar's own lock, which is taken after mu, never
 *     before: no lock cycle).
 *   - The mask counters (computed / reused) are atomics bumped by the
 *     engine thread through the constraint states and read by any thread.
 *
 * Threads: everything here may be called from any thread, concurrently,
 * except tr_gcache_free (no other call on the cache in progress).
 */
#ifndef TR_ENGINE_GRAMMAR_CACHE_H
#define TR_ENGINE_GRAMMAR_CACHE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "grammar/grammar.h"
#include "trellis.h"

struct trellis_grammar {
    atomic_uint refs;
    trellis_grammar_kind kind;
    grammar *g;          /* one reference */
    grammar_vocab *v;    /* one reference: what it was compiled against */
    char *warnings;      /* "" when none; owned */
};

typedef struct gcache gcache;

/* The masks filled for an engine's requests: computed by a vocabulary walk
 * or copied from a grammar's memo. */
typedef struct gcache_mask_counters {
    atomic_uint_fast64_t computed, reused;
} gcache_mask_counters;

/* A cache of grammars compiled against v (a reference is taken), holding
 * at most budget_bytes (>= 1). */
tr_status tr_gcache_new(grammar_vocab *v, uint64_t budget_bytes, gcache **out);
/* Drops the cache's references (handles in use live on). NULL is a no-op. */
void tr_gcache_free(gcache *c);
/* The budgets later compiles run under (default: tr_grammar_limits_default,
 * the memo capped at the cache's budget). Tests; before any compile. */
void tr_gcache_set_limits(gcache *c, const grammar_limits *lim);

/* Finds (kind, options, text[0..len)) or compiles it (see trellis.h,
 * trellis_grammar_compile: len 0 means strlen, options NULL the defaults).
 * On success *out holds a new reference. On failure *out is untouched and
 * err (may be NULL) says what is wrong, where and why, starting with what
 * was being compiled ("bad regex: ...", "bad choices: ..."). */
tr_status tr_gcache_compile(gcache *c, trellis_grammar_kind kind, const char *text,
                            size_t len, const trellis_grammar_options *options,
                            trellis_grammar **out, char *err, size_t err_cap);

/* Counters, entries and bytes now (re-measures the memos, evicting what
 * exceeds the budget). */
void tr_gcache_get_stats(gcache *c, trellis_grammar_cache_stats *out);
gcache_mask_counters *tr_gcache_counters(gcache *c);
/* Validates the table, the LRU list and the byte total (tests).
 * TR_ERR_INTERNAL (details on stderr) if broken. */
tr_status tr_gcache_check(gcache *c);

/* ---- grammar_compile.c: the kinds ---- */

/* Compiles text[0..len) as `kind` under lim (the one switch from a kind
 * to its compiler; options already checked). *warnings gets a malloc'd
 * string ("" when none). Errors as in trellis.h, with diag's message
 * saying what and where; *out untouched on failure. */
tr_status tr_engine_grammar_compile(trellis_grammar_kind kind, const char *text,
                                    size_t len, const trellis_grammar_options *o,
                                    const grammar_limits *lim, grammar **out,
                                    char **warnings, tr_diag *diag);
/* Copies the options `kind` reads into *out, the rest zeroed (the cache
 * key); TR_ERR_INVALID_ARG (diag says which) when one is out of range. */
tr_status tr_engine_grammar_kind_options(trellis_grammar_kind kind,
                                         const trellis_grammar_options *in,
                                         trellis_grammar_options *out, tr_diag *diag);
/* "regex", "choices", "JSON Schema", "JSON object", "EBNF grammar", or
 * NULL for a value that is no kind. */
const char *tr_engine_grammar_kind_name(trellis_grammar_kind kind);
/* Whether the end-of-span rule is on by default for this kind (trellis.h,
 * trellis_request.end_span): regex and choices. */
bool tr_engine_grammar_kind_ends_spans(trellis_grammar_kind kind);

/* ---- grammar_constraint.c: a sample constrained by a handle ---- */

/* Constraint ops whose state is one sample's matcher over a handle: every
 * op of trellis_constraint_ops (clone makes a fresh state on the same
 * handle; jump-forward through forced_bytes and rollback). fill_mask adds
 * to the counters given at creation whether the mask was computed or came
 * from the memo. */
extern const trellis_constraint_ops tr_gconstraint_ops;
/* A state at the grammar's start (references h); NULL when out of memory.
 * ctr (borrowed, may be NULL) must outlive the state. */
void *tr_gconstraint_new(trellis_grammar *h, gcache_mask_counters *ctr);

#endif
