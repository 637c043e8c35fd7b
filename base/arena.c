/* arena.c — see arena_internal.h. Blocks grow geometrically from 4 KiB up to
 * 1 MiB; a request larger than a block gets a block of its own. */
#include "frontend/arena_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

struct tr_dsl_arena_block {
    tr_dsl_arena_block *next;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
};

void tr_dsl_arena_init(tr_dsl_arena *a, size_t budget) {
    a->head = NULL;
    a->used = 0;
    a->budget = budget;
}

void tr_dsl_arena_deinit(tr_dsl_arena *a) {
    tr_dsl_arena_block *b = a->head;
    while (b) {
        tr_dsl_arena_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
    a->used = 0;
}

void *tr_dsl_arena_alloc(tr_dsl_arena *a, size_t n) {
    size_t need = (n + 15) & ~(size_t)15;
    if (need < n) return NULL;
    if (need == 0) need = 16;
    tr_dsl_arena_block *b = a->head;
    if (!b || b->cap - b->used < need) {
        size_t cap = b ? TR_MIN(b->cap * 2, (size_t)1 << 20) : 4096;
        if (cap < need) cap = need;
        size_t total;
        if (tr_add_overflow_size(cap, sizeof *b, &total)) return NULL;
        if (a->budget && (a->used + total > a->budget || a->used + total < a->used))
            return NULL;
        tr_dsl_arena_block *nb = malloc(total);
        if (!nb) return NULL;
        nb->cap = cap;
        nb->used = 0;
        nb->next = a->head;
        a->head = nb;
        a->used += total;
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += need;
    memset(p, 0, n);
    return p;
}

void *tr_dsl_arena_array(tr_dsl_arena *a, size_t n, size_t sz) {
    size_t total;
    if (tr_mul_overflow_size(n, sz, &total)) return NULL;
    return tr_dsl_arena_alloc(a, total);
}

char *tr_dsl_arena_strndup(tr_dsl_arena *a, const char *s, size_t n) {
    if (n == SIZE_MAX) return NULL;
    char *p = tr_dsl_arena_alloc(a, n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}
