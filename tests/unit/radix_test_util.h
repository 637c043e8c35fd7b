/* radix_test_util.h — what the radix tree's unit tests share: an
 * allocator that counts live blocks and can fail a chosen call, and a
 * text snapshot of everything observable about a tree and its pool
 * (equal snapshots: equal states).
 */
#ifndef TR_TESTS_UNIT_RADIX_TEST_UTIL_H
#define TR_TESTS_UNIT_RADIX_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "radix/radix.h"

/* Counts live blocks; fails the call numbered fail_at (-1: never). */
typedef struct test_alloc {
    int64_t calls;
    int64_t fail_at;
    int64_t live;
} test_alloc;

static inline void *ta_alloc(void *user, size_t size) {
    test_alloc *ta = user;
    if (ta->calls++ == ta->fail_at) return NULL;
    void *p = malloc(size);
    if (p) ta->live++;
    return p;
}
static inline void ta_free(void *user, void *ptr) {
    test_alloc *ta = user;
    if (ptr) ta->live--;
    free(ptr);
}

/* Everything observable about tree and pool, as text (free it). */
static inline char *snapshot(const radix_tree *t) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    tr_radix_tree_dump(t, f);
    tr_kv_pool_dump(tr_radix_tree_pool(t), f);
    radix_tree_stats s;
    tr_radix_tree_stats_get(t, &s);
    fprintf(f,
            "stats hit=%llu miss=%llu ins=%llu insp=%llu dup=%llu evn=%llu "
            "evp=%llu strip=%llu nodes=%lld ns=%lld pages=%lld tokens=%lld "
            "bytes=%llu free=%d locked=%d cached=%d\n",
            (unsigned long long)s.hit_tokens, (unsigned long long)s.miss_tokens,
            (unsigned long long)s.inserts, (unsigned long long)s.inserted_pages,
            (unsigned long long)s.duplicate_pages,
            (unsigned long long)s.evicted_nodes,
            (unsigned long long)s.evicted_pages,
            (unsigned long long)s.stripped_pages, (long long)s.n_nodes,
            (long long)s.n_namespaces, (long long)s.n_tree_pages,
            (long long)s.n_tree_tokens, (unsigned long long)s.bytes,
            s.pages_free, s.pages_locked, s.pages_cached);
    fclose(f);
    return buf;
}

#endif
