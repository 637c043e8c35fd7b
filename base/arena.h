/* arena.h — a bump allocator under a byte budget, for memory freed all at
 * once: a DSL script's tokens, AST and string literals (frontend/), a
 * grammar compilation's scratch (grammar/regex/context.c).
 *
 * Layering: base (status.h for its error codes); libc only.
 * Invariants: blocks are chained newest first and allocations come from
 * the newest one; every allocation is aligned to 16 bytes and
 * zero-filled; nothing is freed individually. Blocks start at block_min
 * bytes and double up to block_max; a request larger than the next block
 * gets a block of its own size (what was left of the previous block stays
 * unused).
 * Budget: every block (its bytes plus a 16-byte header) is charged to an
 * account, the arena's own or one its owner shares with other memory it
 * charges itself (the grammar compiler's heap tables); a block that would
 * take the account past the budget is refused like out-of-memory, so an
 * adversarial script or schema cannot make a parser take unbounded memory.
 * Threads: one thread at a time while it grows; once the owner stops
 * allocating (a parsed script), any number of threads may read what it
 * holds.
 */
#ifndef TR_BASE_ARENA_H
#define TR_BASE_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct tr_arena_block tr_arena_block;

typedef struct tr_arena {
    tr_arena_block *blocks; /* newest first */
    unsigned char *cur;     /* the free part of the newest block */
    size_t left;
    size_t block_min, block_max;
    uint64_t budget;        /* the account never exceeds it; UINT64_MAX: none */
    uint64_t used;          /* the arena's own account: bytes of its blocks */
    uint64_t *account;      /* a shared account, or NULL: `used` */
    tr_status err;          /* why the last refused allocation failed:
                               TR_ERR_LIMIT (over the budget),
                               TR_ERR_OVERFLOW (the size overflows),
                               TR_ERR_NOMEM */
} tr_arena;

/* An empty arena (allocates nothing yet); 0 < block_min <= block_max. */
void tr_arena_init(tr_arena *a, size_t block_min, size_t block_max, uint64_t budget);
/* Charges the arena's blocks to *account (which the owner also charges
 * for its other memory) instead of its own count; call before the first
 * allocation. */
void tr_arena_share_account(tr_arena *a, uint64_t *account);
/* Frees every block; the arena is empty and usable again, its own
 * account at zero (a shared account is its owner's to settle). */
void tr_arena_deinit(tr_arena *a);

/* n zeroed bytes, 16-aligned; NULL (a->err says why) when out of memory,
 * over budget or when n overflows. */
void *tr_arena_alloc(tr_arena *a, size_t n);
/* An array of n elements of size sz (overflow-checked), zeroed. */
void *tr_arena_array(tr_arena *a, size_t n, size_t sz);
/* A NUL-terminated copy of s[0..n). */
char *tr_arena_strndup(tr_arena *a, const char *s, size_t n);

#endif
