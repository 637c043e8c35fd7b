/* fuzz_radix.c — libFuzzer target for the radix-tree prefix cache: the
 * input is a program of operations on a small tree and pool.
 *
 * Layout: byte 0 picks the page size (bits 0-1: 1, 2, 4 or 16) and the
 * units (radix_tree.h, "Units"): bits 2-3 give W = 1 + (bits % 3), bits 4-5
 * the global unit g = bits % W. Byte 1 picks the pool size: 4..67 pages
 * per unit. With W > 1, W - 1 more bytes give the windows of the units
 * other than g, in unit order (byte % 13 tokens: 1..12, or 0 for one more
 * global unit). Then each op is one byte (op = b % 10) and a sequence byte
 * (sequence = b % 4; bit 2 set: that sequence first lets go of its
 * windowed ids that no window reads any more), followed by the op's
 * arguments. Tokens are bytes % 4, so prefixes collide constantly. Up to 4
 * sequences run at once, using the engine's protocol (match, lock, take a
 * reference on the windowed ids in the window, alloc with eviction on
 * shortage, insert + relock, let go of windowed ids that left the window,
 * finish, abort: runtime/engine/window_pages.c and sched.c). W == 1 (byte 0
 * bits 2-3 clear, or both set) reads no extra byte and has nothing to let
 * go: such inputs run exactly as before units existed.
 *
 * Checked after every op: tr_radix_tree_check and tr_kv_pool_check; every
 * page's reference count is exactly the tree's one (if in the tree) plus
 * one per sequence slot that holds it (private slots: every id; shared
 * slots: windowed ids); every locked prefix is cached with the ids its
 * sequence holds. Every match is page-aligned, ends in a node that holds
 * its last slot with those ids, returns global ids in the tree and no hole
 * within a window before its end. After an insert, only private slots'
 * ids were rewritten (a windowed id stays -1 or stays an id), and matching
 * the inserted key returns at least the slots the window rule allows for
 * the ids the caller now holds (all F with W == 1), with those ids; a
 * failed insert (an injected allocation failure) leaves tree, pool, stats
 * and the caller's page table unchanged. An eviction that falls short
 * leaves nothing evictable (no cached page, no unlocked node). At the end
 * every sequence finishes, the tree is flushed, and every page must be
 * free and every allocation returned. A violation aborts.
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

enum {
    FZ_SEQS = 4,
    FZ_MAX_LEN = 96,
    FZ_MAX_W = 3,
    FZ_MAX_IDS = FZ_MAX_LEN * FZ_MAX_W, /* page ids of a sequence (ps 1) */
    FZ_MAX_POOL = 67 * FZ_MAX_W,
};

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

/* Slot j of a sequence has ids pages[j * W + u]. Slots [0, locked_pages)
 * are shared (the tree's, under the lock on handle): the sequence holds a
 * reference on their windowed ids only (-1 once let go). The others are
 * private (priv): the sequence holds a reference on every id. */
typedef struct fz_seq {
    bool live;
    uint64_t ns;
    int32_t n; /* tokens computed: the next one is at position n */
    int32_t tokens[FZ_MAX_LEN];
    int32_t pages[FZ_MAX_IDS];
    bool priv[FZ_MAX_LEN];
    radix_node *handle;
    int32_t locked_pages;
} fz_seq;

typedef struct fz {
    const uint8_t *p, *end;
    int32_t ps, W, n_pages;
    int32_t win[FZ_MAX_W]; /* tokens; 0 = a global unit */
    fz_alloc alloc;
    kv_pool *pool;
    radix_tree *t;
    fz_seq seqs[FZ_SEQS];
} fz;

static bool more(const fz *z) { return z->p < z->end; }
static uint8_t next(fz *z) { return z->p < z->end ? *z->p++ : 0; }
static int32_t n_pages_for(const fz *z, int32_t n) { return (n + z->ps - 1) / z->ps; }

/* The first slot unit u must hold for the token at position pos (the
 * engine's tr_win_lo; 0 for a global unit). */
static int32_t win_lo(const fz *z, int32_t u, int32_t pos) {
    if (z->win[u] == 0) return 0;
    int32_t first = pos - z->win[u] + 1;
    return first <= 0 ? 0 : first / z->ps;
}

/* Whether a match of L slots with these ids keeps the window rule: every
 * windowed unit holds an id in each slot of its window before the end. */
static bool window_fits(const fz *z, const int32_t *ids, int32_t L) {
    for (int32_t u = 0; u < z->W; u++)
        for (int32_t j = win_lo(z, u, L * z->ps); z->win[u] > 0 && j < L; j++)
            if (ids[j * z->W + u] < 0) return false;
    return true;
}

static char *snapshot(const fz *z) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    FZ_CHECK(f);
    tr_radix_tree_dump(z->t, f);
    tr_kv_pool_dump(z->pool, f);
    radix_tree_stats s;
    tr_radix_tree_stats_get(z->t, &s);
    fprintf(f, "%llu %llu %llu %llu %llu %llu %llu %llu %llu %lld\n",
            (unsigned long long)s.hit_tokens, (unsigned long long)s.miss_tokens,
            (unsigned long long)s.inserts, (unsigned long long)s.inserted_pages,
            (unsigned long long)s.duplicate_pages,
            (unsigned long long)s.evicted_nodes, (unsigned long long)s.bytes,
            (unsigned long long)s.evicted_pages, (unsigned long long)s.stripped_pages,
            (long long)s.n_tree_pages);
    fclose(f);
    return buf;
}

/* A match, checked: page-aligned; its node holds its last slot and has
 * the returned ids for the matched slots it holds; global ids are tree
 * pages; windowed ids are -1 or tree pages, never -1 within a window
 * before the end. */
static void match_checked(fz *z, uint64_t ns, const int32_t *tok, int32_t n, int32_t *got,
                          radix_match *m) {
    FZ_CHECK(tr_radix_tree_match(z->t, ns, tok, n, got, m) == TR_OK);
    const int32_t L = m->n_pages, W = z->W;
    FZ_CHECK(L >= 0 && m->n_tokens == L * z->ps && m->n_tokens <= n);
    FZ_CHECK((m->node == NULL) == (L == 0));
    if (!m->node) return;
    int32_t pre[FZ_MAX_LEN];
    int32_t len = tr_radix_node_prefix(z->t, m->node, pre, FZ_MAX_LEN);
    int32_t node_slots = tr_radix_node_n_pages(m->node);
    FZ_CHECK(len >= L * z->ps && len % z->ps == 0);
    FZ_CHECK(node_slots > 0 && len - node_slots * z->ps < L * z->ps);
    FZ_CHECK(memcmp(pre, tok, sizeof(int32_t) * (size_t)(L * z->ps)) == 0);
    int32_t first = len / z->ps - node_slots; /* the node's first slot */
    FZ_CHECK(memcmp(tr_radix_node_pages(m->node), got + (size_t)first * (size_t)W,
                    sizeof(int32_t) * (size_t)((L - first) * W)) == 0);
    for (int32_t j = 0; j < L; j++)
        for (int32_t u = 0; u < W; u++) {
            int32_t id = got[j * W + u];
            FZ_CHECK(id >= -1);
            if (z->win[u] == 0 || j >= win_lo(z, u, L * z->ps)) FZ_CHECK(id >= 0);
            if (id >= 0) FZ_CHECK(tr_kv_pool_page_in_tree(z->pool, id));
        }
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

/* The engine's tr_win_unref_all over slots [0, slots): every id of a
 * private slot, the windowed ids of the shared ones. */
static void release_refs(fz *z, fz_seq *q, int32_t slots) {
    for (int32_t j = 0; j < slots; j++) {
        for (int32_t u = 0; u < z->W; u++) {
            int32_t *id = &q->pages[j * z->W + u];
            if (*id < 0 || !(q->priv[j] || z->win[u] > 0)) continue;
            FZ_CHECK(tr_kv_pool_unref(z->pool, *id) == TR_OK);
            *id = -1;
        }
        q->priv[j] = false;
    }
}

/* The engine's tr_win_take_match for a match of L slots: a reference on
 * each windowed id the next token (at L * ps) reads, -1 for the others. */
static void take_match(fz *z, fz_seq *q, int32_t L) {
    for (int32_t u = 0; u < z->W; u++) {
        if (z->win[u] == 0) continue;
        int32_t lo = win_lo(z, u, L * z->ps);
        for (int32_t j = 0; j < L; j++) {
            int32_t *id = &q->pages[j * z->W + u];
            if (j < lo) {
                *id = -1;
                continue;
            }
            FZ_CHECK(*id >= 0); /* a match ends before any hole */
            FZ_CHECK(tr_kv_pool_ref(z->pool, *id) == TR_OK);
        }
    }
}

/* The engine's tr_win_let_go: windowed ids of slots no token from q->n on
 * reads are unreferenced and forgotten. */
static void let_go(fz *z, fz_seq *q) {
    int32_t total = n_pages_for(z, q->n);
    for (int32_t u = 0; u < z->W; u++) {
        if (z->win[u] == 0) continue;
        int32_t lo = win_lo(z, u, q->n);
        for (int32_t j = 0; j < lo && j < total; j++) {
            int32_t *id = &q->pages[j * z->W + u];
            if (*id < 0) continue;
            FZ_CHECK(tr_kv_pool_unref(z->pool, *id) == TR_OK);
            *id = -1;
        }
    }
}

/* Inserts q's first k tokens; on an injected failure checks that nothing
 * changed and retries without it. */
static void insert_seq(fz *z, fz_seq *q, int32_t k, bool keep_lock) {
    const int32_t F = k / z->ps, W = z->W;
    char *before = z->alloc.fail_at >= 0 ? snapshot(z) : NULL;
    int32_t saved[FZ_MAX_IDS];
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
    FZ_CHECK(memcmp(saved + F * W, q->pages + F * W,
                    sizeof(int32_t) * (size_t)(FZ_MAX_IDS - F * W)) == 0);
    /* Only private slots' ids may have been replaced; a windowed id stays
     * a hole or stays an id. */
    for (int32_t i = 0; i < F; i++) {
        for (int32_t u = 0; u < W; u++) {
            int32_t was = saved[i * W + u], now = q->pages[i * W + u];
            if (now != was) FZ_CHECK(q->priv[i]);
            if (z->win[u] > 0 && was < 0) FZ_CHECK(now == -1);
            if (z->win[u] == 0 || was >= 0)
                FZ_CHECK(now >= 0 && tr_kv_pool_page_in_tree(z->pool, now));
        }
        q->priv[i] = false;
    }
    /* The node covers slot F - 1. */
    if (node) {
        int32_t pre[FZ_MAX_LEN];
        int32_t len = tr_radix_node_prefix(z->t, node, pre, FZ_MAX_LEN);
        FZ_CHECK(len >= F * z->ps && len - tr_radix_node_n_pages(node) * z->ps < F * z->ps);
        FZ_CHECK(memcmp(pre, q->tokens, sizeof(int32_t) * (size_t)(F * z->ps)) == 0);
    }
    /* The key is now cached, with exactly the caller's (rewritten) ids:
     * matching it returns at least the slots whose windows the caller's
     * ids fill (all F with W == 1); global ids are the caller's, and so is
     * each windowed id the caller holds. */
    int32_t want = F;
    while (want > 0 && !window_fits(z, q->pages, want)) want--;
    int32_t got[FZ_MAX_IDS];
    radix_match m;
    match_checked(z, q->ns, q->tokens, k, got, &m);
    FZ_CHECK(m.n_pages >= want && m.n_pages <= F);
    for (int32_t j = 0; j < m.n_pages; j++)
        for (int32_t u = 0; u < W; u++) {
            int32_t mine = q->pages[j * W + u];
            if (z->win[u] == 0 || mine >= 0) FZ_CHECK(got[j * W + u] == mine);
        }
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
    match_checked(z, q->ns, q->tokens, q->n, q->pages, &m);
    FZ_CHECK(tr_radix_tree_lock(z->t, m.node) == TR_OK);
    take_match(z, q, m.n_pages);
    int32_t total = n_pages_for(z, q->n);
    if (!alloc_pages(z, (total - m.n_pages) * z->W, q->pages + m.n_pages * z->W)) {
        release_refs(z, q, m.n_pages); /* the windowed references taken */
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
    if (!alloc_pages(z, (new_total - old_total) * z->W, q->pages + old_total * z->W)) return;
    for (int32_t j = old_total; j < new_total; j++) q->priv[j] = true;
    memcpy(q->tokens + q->n, add, sizeof(int32_t) * (size_t)r);
    q->n += r;
}

/* After an eviction of `need` that freed `got` (stripped of them): an
 * eviction that fell short, or that stripped, left no unlocked node; one
 * that fell short left no cached page either (nothing evictable). */
static void check_evict(fz *z, int32_t need, int32_t got, uint64_t stripped) {
    if (got >= need && stripped == 0) return;
    radix_tree_stats s0, s1;
    tr_radix_tree_stats_get(z->t, &s0);
    FZ_CHECK(tr_radix_tree_flush(z->t) == 0);
    tr_radix_tree_stats_get(z->t, &s1);
    FZ_CHECK(s1.n_nodes == s0.n_nodes && s1.n_namespaces == s0.n_namespaces);
    if (got < need) FZ_CHECK(s1.pages_cached == 0);
    if (stripped > 0) FZ_CHECK(got <= need); /* each strip frees one page */
}

/* Exact references: the tree's one on each page it holds, and one per
 * sequence slot holding the id (private: every unit; shared: windowed
 * units). Shared slots are the locked prefix, cached with the global ids
 * the sequence uses and the windowed ids it holds. */
static void check_refs(fz *z) {
    int32_t want[FZ_MAX_POOL];
    for (int32_t p = 0; p < z->n_pages; p++) want[p] = tr_kv_pool_page_in_tree(z->pool, p);
    for (int i = 0; i < FZ_SEQS; i++) {
        const fz_seq *s = &z->seqs[i];
        if (!s->live) continue;
        FZ_CHECK((s->handle != NULL) == (s->locked_pages > 0));
        for (int32_t j = 0; j < n_pages_for(z, s->n); j++) {
            FZ_CHECK(s->priv[j] == (j >= s->locked_pages));
            for (int32_t u = 0; u < z->W; u++) {
                int32_t id = s->pages[j * z->W + u];
                if (z->win[u] == 0) FZ_CHECK(id >= 0);
                if (id < 0) continue;
                FZ_CHECK(id < z->n_pages);
                FZ_CHECK(tr_kv_pool_page_in_tree(z->pool, id) == !s->priv[j]);
                if (s->priv[j] || z->win[u] > 0) want[id]++;
            }
        }
    }
    for (int32_t p = 0; p < z->n_pages; p++) FZ_CHECK(tr_kv_pool_refcount(z->pool, p) == want[p]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const int32_t page_sizes[4] = {1, 2, 4, 16};
    if (size < 2) return 0;
    fz *z = calloc(1, sizeof *z);
    FZ_CHECK(z);
    z->p = data;
    z->end = data + size;
    uint8_t shape = next(z);
    z->ps = page_sizes[shape & 3];
    z->W = 1 + ((shape >> 2) & 3) % 3;
    int32_t n_pages = 4 + next(z) % 64;
    z->alloc.fail_at = -1;
    radix_allocator a = {fz_malloc, fz_free, &z->alloc};
    if (z->W > 1) {
        int32_t g = ((shape >> 4) & 3) % z->W;
        for (int32_t u = 0; u < z->W; u++) z->win[u] = u == g ? 0 : next(z) % 13;
        n_pages *= z->W;
    }
    z->n_pages = n_pages;
    FZ_CHECK(tr_kv_pool_new(n_pages, z->ps, &a, &z->pool) == TR_OK);
    if (z->W == 1) FZ_CHECK(tr_radix_tree_new(z->pool, &a, &z->t) == TR_OK);
    else FZ_CHECK(tr_radix_tree_new_units(z->pool, &a, z->W, z->win, &z->t) == TR_OK);
    FZ_CHECK(tr_radix_tree_units(z->t) == z->W);

    for (int steps = 0; more(z) && steps < 4096; steps++) {
        uint8_t op = next(z) % 10;
        uint8_t sel = next(z);
        fz_seq *q = &z->seqs[sel % FZ_SEQS];
        if ((sel & 4) && q->live) let_go(z, q); /* a no-op with W == 1 */
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
                release_refs(z, q, n_pages_for(z, q->n));
                q->live = false;
            }
            break;
        case 4: /* abort */
            if (q->live) {
                FZ_CHECK(tr_radix_tree_unlock(z->t, q->handle) == TR_OK);
                q->handle = NULL;
                q->locked_pages = 0;
                release_refs(z, q, n_pages_for(z, q->n));
                q->live = false;
            }
            break;
        case 5: { /* query */
            int32_t tok[FZ_MAX_LEN], got[FZ_MAX_IDS];
            int32_t n = read_tokens(z, tok, FZ_MAX_LEN);
            radix_match m;
            match_checked(z, next(z) & 1, tok, n, got, &m);
            break;
        }
        case 6: {
            int32_t before = tr_kv_pool_n_free(z->pool), need = next(z) % 16;
            radix_tree_stats s0, s1;
            tr_radix_tree_stats_get(z->t, &s0);
            int32_t got = tr_radix_tree_evict(z->t, need);
            tr_radix_tree_stats_get(z->t, &s1);
            FZ_CHECK(tr_kv_pool_n_free(z->pool) == before + got);
            check_evict(z, need, got, s1.stripped_pages - s0.stripped_pages);
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
                radix_tree_stats s0, s1;
                FZ_CHECK(tr_radix_tree_lock(z->t, q->handle) == TR_OK);
                tr_radix_tree_stats_get(z->t, &s0);
                int32_t got = tr_radix_tree_evict(z->t, n_pages);
                tr_radix_tree_stats_get(z->t, &s1);
                check_evict(z, n_pages, got, s1.stripped_pages - s0.stripped_pages);
                FZ_CHECK(tr_radix_node_lock_count(q->handle) >= 2);
                FZ_CHECK(tr_radix_tree_unlock(z->t, q->handle) == TR_OK);
            }
            break;
        }
        FZ_CHECK(tr_radix_tree_check(z->t) == TR_OK);
        FZ_CHECK(tr_kv_pool_check(z->pool) == TR_OK);
        check_refs(z);
    }

    z->alloc.fail_at = -1;
    for (int i = 0; i < FZ_SEQS; i++) {
        fz_seq *q = &z->seqs[i];
        if (!q->live) continue;
        insert_seq(z, q, q->n, false);
        release_refs(z, q, n_pages_for(z, q->n));
        q->live = false;
        FZ_CHECK(tr_radix_tree_check(z->t) == TR_OK);
        check_refs(z);
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
