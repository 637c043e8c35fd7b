/* arena_internal.h — a bump allocator for memory freed all at once: a script's
 * tokens, AST and string literals live in one arena and go with it.
 *
 * Layering: frontend, internal; libc only.
 * Invariants: blocks are chained newest first; every allocation is
 * aligned to 16 bytes and zero-filled; nothing is freed individually.
 * A byte budget (set at init) bounds the whole arena: an allocation past
 * it fails like out-of-memory, so an adversarial script cannot make the
 * parser take unbounded memory.
 * Threads: one thread at a time while it grows; once the owner stops
 * allocating (a parsed script), any number of threads may read what it
 * holds.
 */
#ifndef TR_FRONTEND_ARENA_H
#define TR_FRONTEND_ARENA_H

#include <stddef.h>

typedef struct tr_dsl_arena_block tr_dsl_arena_block;

typedef struct tr_dsl_arena {
    tr_dsl_arena_block *head;
    size_t used;   /* bytes handed out plus block overheads */
    size_t budget; /* 0: unlimited */
} tr_dsl_arena;

void tr_dsl_arena_init(tr_dsl_arena *a, size_t budget);
void tr_dsl_arena_deinit(tr_dsl_arena *a);

/* n zeroed bytes, 16-aligned; NULL when out of memory or over budget. */
void *tr_dsl_arena_alloc(tr_dsl_arena *a, size_t n);
/* An array of n elements of size sz (overflow-checked), zeroed. */
void *tr_dsl_arena_array(tr_dsl_arena *a, size_t n, size_t sz);
/* A NUL-terminated copy of s[0..n). */
char *tr_dsl_arena_strndup(tr_dsl_arena *a, const char *s, size_t n);

#endif
