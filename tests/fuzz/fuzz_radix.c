/* fuzz_radix.c — libFuzzer target for the radix-tree prefix cache: the
 * input is a program of operations on a small tree and pool.
 *
 * Layout: byte 0 picks the page size (1, 2, 4 or 16), byte 1 the pool size
 * (4..67 pages); then each op is one byte (op = b % 10) followed by its
 * arguments. Tokens are bytes % 4, so prefixes collide constantly. Up to 4
 * sequences run at once, using the engine's protocol (match, lock, alloc
 * with eviction on shortage, insert + relock, finish, abort).
 *
 * Checked after every op: tr_radix_tree_check and tr_kv_pool_check; after an
 * insert, matching the inserted key returns at least its full pages, with
 * the ids the caller now holds; a failed insert (an injected allocation
 * failure) leaves tree, pool, stats and the caller's page table unchanged.
 * At the end every sequence finishes, the tree is flushed, and every page
 * must be free and every allocation returned. A violation aborts.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "radix/radix.h"

#define FZ_CHECK(cond)                                                     \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "fuzz_radix: check failed: %s (line %d)\n",    \
                    #cond, __LINE__);                                      \
            abort();                                                       \
        }                                                                  \
    } while (0)

enum { FZ_SEQS = 4, FZ_MAX_LEN = 96 };

typedef struct fz_alloc {
    int64_t calls, fail_at, live;
} fz_alloc;

static void *fz_malloc(void *user, size_t size) {
    fz_alloc *a = user;
    if (a->calls++ == a->fail_at) return NULL;
    void *p = malloc(size);
    if (p) a->live++;
    return p;
}
static void fz_free(void *user, void *ptr) {
    fz_alloc *a = user;
    if (ptr) a->live--;
    free(ptr);
}

typedef struct fz_seq {
    bool live;
    uint64_t ns;
    int32_t n;
    int32_t tokens[FZ_MAX_LEN];
    int32_t pages[FZ_MAX_LEN];
    bool priv[FZ_MAX_LEN];
    radix_node *handle;
    int32_t locked_pages;
} fz_seq;

typedef struct fz {
    const uint8_t *p, *end;
    int32_t ps;
    fz_alloc alloc;
    kv_pool *pool;
    radix_tree *t;
    fz_seq seqs[FZ_SEQS];
} fz;

static bool more(const fz *z) { return z->p < z->end; }
static uint8_t next(fz *z) { return z->p < z->end ? *z->p++ : 0; }
static int32_t n_pages_for(const fz *z, int32_t n) { return (n + z->ps - 1) / z->ps; }

static char *snapshot(const fz *z) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    FZ_CHECK(f);
    tr_radix_tree_dump(z->t, f);
    tr_kv_pool_dump(z->pool, f);
    radix_tree_stats s;
    tr_radix_tree_stats_get(z->t, &s);
    fprintf(f, "%llu %llu %llu %llu %llu %llu %llu\n",
            (unsigned long long)s.hit_tokens, (unsigned long long)s.miss_tokens,
            (unsigned long long)s.inserts, (unsigned long long)s.inserted_pages,
            (unsigned long long)s.duplicate_pages,
            (unsigned long long)s.evicted_nodes, (unsigned long long)s.bytes);
    fclose(f);
    return buf;
}

static bool alloc_pages(fz *z, int32_t n, int32_t *out) {
    tr_status st = tr_kv_pool_alloc(z->pool, n, out);
    if (st == TR_ERR_FULL) {
        tr_radix_tree_evict(z->t, n - tr_kv_pool_n_free(z->pool));
        st = tr_kv_pool_alloc(z->pool, n, out);
    }
    FZ_CHECK(st == TR_OK || st == TR_ERR_FULL);
    return st == TR_OK;
}

static void release_private(fz *z, fz_seq *q) {
    for (int32_t j = 0; j < n_pages_for(z, q->n); j++)
        if (q->priv[j]) {
            FZ_CHECK(tr_kv_pool_unref(z->pool, q->pages[j]) == TR_OK);
            q->priv[j] = false;
        }
}

/* Inserts q's first k tokens; on an injected failure checks that nothing
 * changed and retries without it. */
static void insert_seq(fz *z, fz_seq *q, int32_t k, bool keep_lock) {
    const int32_t F = k / z->ps;
    char *before = z->alloc.fail_at >= 0 ? snapshot(z) : NULL;
    int32_t saved[FZ_MAX_LEN];
    memcpy(saved, q->pages, sizeof saved);
    radix_node *node = NULL;
    tr_status st = tr_radix_tree_insert(z->t, q->ns, q->tokens, q->pages, k, &node);
    if (st == TR_ERR_NOMEM) {
        FZ_CHECK(before);
        char *after = snapshot(z);
        FZ_CHECK(strcmp(before, after) == 0);
        free(after);
        FZ_CHECK(memcmp(saved, q->pages, sizeof saved) == 0);
        FZ_CHECK(tr_radix_tree_check(z->t) == TR_OK);
        z->alloc.fail_at = -1;
        st = tr_radix_tree_insert(z->t, q->ns, q->tokens, q->pages, k, &node);
    }
    free(before);
    z->alloc.fail_at = -1; /* an unused injection expires */
    FZ_CHECK(st == TR_OK);
    FZ_CHECK((node == NULL) == (F == 0));
    /* Only private pages may have been replaced. */
    for (int32_t i = 0; i < F; i++) {
        if (q->pages[i] != saved[i]) FZ_CHECK(q->priv[i]);
        q->priv[i] = false;
        FZ_CHECK(tr_kv_pool_page_in_tree(z->pool, q->pages[i]));
    }
    /* The key is now cached, with exactly the caller's (rewritten) ids. */
    int32_t got[FZ_MAX_LEN];
    radix_match m;
    FZ_CHECK(tr_radix_tree_match(z->t, q->ns, q->tokens, k, got, &m) == TR_OK);
    FZ_CHECK(m.n_pages == F);
    FZ_CHECK(memcmp(got, q->pages, sizeof(int32_t) * (size_t)F) == 0);
    if (keep_lock) {
        FZ_CHECK(tr_radix_tree_lock(z->t, node) == TR_OK);
        FZ_CHECK(tr_radix_tree_unlock(z->t, q->handle) == TR_OK);
        q->handle = node;
        q->locked_pages = F;
    } else {
        FZ_CHECK(tr_radix_tree_unlock(z->t, q->handle) == TR_OK);
        q->handle = NULL;
        q->locked_pages = 0;
    }
}

static int32_t read_tokens(fz *z, int32_t *out, int32_t max) {
    int32_t len = (int32_t)(next(z) % (uint32_t)(max + 1));
    for (int32_t i = 0; i < len; i++) out[i] = next(z) % 4;
    return len;
}

static void op_start(fz *z, fz_seq *q) {
    if (q->live) return;
    memset(q, 0, sizeof *q);
    q->ns = next(z) & 1;
    q->n = read_tokens(z, q->tokens, FZ_MAX_LEN / 2);
    radix_match m;
    FZ_CHECK(tr_radix_tree_match(z->t, q->ns, q->tokens, q->n, q->pages, &m) == TR_OK);
    FZ_CHECK(m.n_tokens % z->ps == 0 && m.n_tokens <= q->n);
    FZ_CHECK(tr_radix_tree_lock(z->t, m.node) == TR_OK);
    int32_t total = n_pages_for(z, q->n);
    if (!alloc_pages(z, total - m.n_pages, q->pages + m.n_pages)) {
        FZ_CHECK(tr_radix_tree_unlock(z->t, m.node) == TR_OK);
        return;
    }
    for (int32_t j = m.n_pages; j < total; j++) q->priv[j] = true;
    q->handle = m.node;
    q->locked_pages = m.n_pages;
    q->live = true;
}

static void op_extend(fz *z, fz_seq *q) {
    int32_t add[FZ_MAX_LEN];
    int32_t r = read_tokens(z, add, 8);
    if (!q->live || q->n + r > FZ_MAX_LEN) return;
    int32_t old_total = n_pages_for(z, q->n), new_total = n_pages_for(z, q->n + r);
    if (!alloc_pages(z, new_total - old_total, q->pages + old_total)) return;
    for (int32_t j = old_total; j < new_total; j++) q->priv[j] = true;
    memcpy(q->tokens + q->n, add, sizeof(int32_t) * (size_t)r);
    q->n += r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const int32_t page_sizes[4] = {1, 2, 4, 16};
    if (size < 2) return 0;
    fz *z = calloc(1, sizeof *z);
    FZ_CHECK(z);
    z->p = data;
    z->end = data + size;
    z->ps = page_sizes[next(z) & 3];
    int32_t n_pages = 4 + next(z) % 64;
    z->alloc.fail_at = -1;
    radix_allocator a = {fz_malloc, fz_free, &z->alloc};
    FZ_CHECK(tr_kv_pool_new(n_pages, z->ps, &a, &z->pool) == TR_OK);
    FZ_CHECK(tr_radix_tree_new(z->pool, &a, &z->t) == TR_OK);

    for (int steps = 0; more(z) && steps < 4096; steps++) {
        uint8_t op = next(z) % 10;
        fz_seq *q = &z->seqs[next(z) % FZ_SEQS];
        switch (op) {
        case 0:
            op_start(z, q);
            break;
        case 1: /* insert some prefix beyond what it holds locked */
            if (q->live) {
                int32_t lo = q->locked_pages * z->ps;
                insert_seq(z, q, lo + next(z) % (uint32_t)(q->n - lo + 1), true);
            }
            break;
        case 2:
            op_extend(z, q);
            break;
        case 3: /* finish */
            if (q->live) {
                insert_seq(z, q, q->n, false);
                release_private(z, q);
                q->live = false;
            }
            break;
        case 4: /* abort */
            if (q->live) {
                FZ_CHECK(tr_radix_tree_unlock(z->t, q->handle) == TR_OK);
                release_private(z, q);
                q->live = false;
            }
            break;
        case 5: { /* query */
            int32_t tok[FZ_MAX_LEN], got[FZ_MAX_LEN];
            int32_t n = read_tokens(z, tok, FZ_MAX_LEN);
            radix_match m;
            FZ_CHECK(tr_radix_tree_match(z->t, next(z) & 1, tok, n, got, &m) == TR_OK);
            FZ_CHECK(m.n_tokens % z->ps == 0 && m.n_tokens <= n);
            break;
        }
        case 6: {
            int32_t before = tr_kv_pool_n_free(z->pool);
            int32_t got = tr_radix_tree_evict(z->t, next(z) % 16);
            FZ_CHECK(tr_kv_pool_n_free(z->pool) == before + got);
            break;
        }
        case 7:
            tr_radix_tree_flush(z->t);
            break;
        case 8: /* fail one of the next few allocations */
            z->alloc.fail_at = z->alloc.calls + next(z) % 4;
            break;
        default: /* an extra lock held and released around an eviction */
            if (q->live && q->handle) {
                FZ_CHECK(tr_radix_tree_lock(z->t, q->handle) == TR_OK);
                tr_radix_tree_evict(z->t, n_pages);
                FZ_CHECK(tr_radix_node_lock_count(q->handle) >= 2);
                FZ_CHECK(tr_radix_tree_unlock(z->t, q->handle) == TR_OK);
            }
            break;
        }
        FZ_CHECK(tr_radix_tree_check(z->t) == TR_OK);
        FZ_CHECK(tr_kv_pool_check(z->pool) == TR_OK);
        /* Locked prefixes are still cached. */
        for (int i = 0; i < FZ_SEQS; i++) {
            fz_seq *s = &z->seqs[i];
            if (!s->live || !s->locked_pages) continue;
            for (int32_t j = 0; j < s->locked_pages; j++)
                FZ_CHECK(tr_kv_pool_page_in_tree(z->pool, s->pages[j]));
        }
    }

    z->alloc.fail_at = -1;
    for (int i = 0; i < FZ_SEQS; i++) {
        fz_seq *q = &z->seqs[i];
        if (!q->live) continue;
        insert_seq(z, q, q->n, false);
        release_private(z, q);
    }
    tr_radix_tree_flush(z->t);
    FZ_CHECK(tr_radix_tree_check(z->t) == TR_OK);
    FZ_CHECK(tr_kv_pool_n_free(z->pool) == n_pages);
    radix_tree_stats st;
    tr_radix_tree_stats_get(z->t, &st);
    FZ_CHECK(st.n_nodes == 0 && st.bytes == 0 && st.n_tree_pages == 0);
    tr_radix_tree_free(z->t);
    tr_kv_pool_free(z->pool);
    FZ_CHECK(z->alloc.live == 0);
    free(z);
    return 0;
}
