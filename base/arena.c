/* arena.c — see arena.h. A block is a 16-byte header (the previous block,
 * the block's size) and its payload; what the newest block has left is
 * kept in the arena (cur, left), so a block needs no bookkeeping of its
 * own. */
#include "base/arena.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

struct tr_arena_block {
    tr_arena_block *prev;
    size_t size; /* payload bytes */
    /* payload follows, 16-byte aligned */
};

#define ARENA_HDR ((sizeof(tr_arena_block) + 15u) & ~(size_t)15u)

void tr_arena_init(tr_arena *a, size_t block_min, size_t block_max, uint64_t budget) {
    memset(a, 0, sizeof *a);
    a->block_min = block_min;
    a->block_max = block_max;
    a->budget = budget;
}

void tr_arena_share_account(tr_arena *a, uint64_t *account) { a->account = account; }

void tr_arena_deinit(tr_arena *a) {
    tr_arena_block *b = a->blocks;
    while (b) {
        tr_arena_block *p = b->prev;
        free(b);
        b = p;
    }
    a->blocks = NULL;
    a->cur = NULL;
    a->left = 0;
    a->used = 0;
}

/* A new newest block for at least need bytes; false (a->err set) if the
 * budget or memory refuses it. */
static bool arena_grow(tr_arena *a, size_t need) {
    size_t size = a->block_min;
    if (a->blocks)
        size = a->blocks->size > a->block_max / 2 ? a->block_max : a->blocks->size * 2;
    if (size < need) size = need;
    size_t total;
    if (tr_add_overflow_size(size, ARENA_HDR, &total)) {
        a->err = TR_ERR_OVERFLOW;
        return false;
    }
    uint64_t *acct = a->account ? a->account : &a->used;
    uint64_t after;
    if (tr_add_overflow_u64(*acct, total, &after) || after > a->budget) {
        a->err = TR_ERR_LIMIT;
        return false;
    }
    tr_arena_block *b = malloc(total);
    if (!b) {
        a->err = TR_ERR_NOMEM;
        return false;
    }
    *acct = after;
    b->prev = a->blocks;
    b->size = size;
    a->blocks = b;
    a->cur = (unsigned char *)b + ARENA_HDR;
    a->left = size;
    return true;
}

void *tr_arena_alloc(tr_arena *a, size_t n) {
    size_t need;
    if (tr_add_overflow_size(n, 15u, &need)) {
        a->err = TR_ERR_OVERFLOW;
        return NULL;
    }
    need &= ~(size_t)15u;
    if (need == 0) need = 16;
    if (need > a->left && !arena_grow(a, need)) return NULL;
    void *p = a->cur;
    a->cur += need;
    a->left -= need;
    memset(p, 0, need);
    return p;
}

void *tr_arena_array(tr_arena *a, size_t n, size_t sz) {
    size_t total;
    if (tr_mul_overflow_size(n, sz, &total)) {
        a->err = TR_ERR_OVERFLOW;
        return NULL;
    }
    return tr_arena_alloc(a, total);
}

char *tr_arena_strndup(tr_arena *a, const char *s, size_t n) {
    if (n == SIZE_MAX) {
        a->err = TR_ERR_OVERFLOW;
        return NULL;
    }
    char *p = tr_arena_alloc(a, n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}
