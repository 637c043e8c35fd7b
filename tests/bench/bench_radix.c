/* bench_radix.c — speed and memory of the radix-tree prefix cache.
 *
 * Workload: 100,000 sequences of up to 4,096 tokens, each made of one of
 * 100 shared prefixes (128..2,048 tokens, uniform; a whole system prompt
 * or template) and a suffix of random tokens of a 49,152-token vocabulary,
 * the total uniform in [max(256, prefix + 64), 4,096]. Page size 16. With
 * `branchy` as 4th argument, sequences instead keep only the first
 * min(prefix, total - 64) tokens of their prefix, so the prefixes are cut
 * at many points and the paths get deep (a stress case: the cost per node
 * visited, mostly one cache miss, shows). Each sequence runs the
 * engine's protocol: match, lock, allocate the rest (evicting LRU leaves
 * when the pool is short), insert, unlock, free its partial page. The pool
 * (default 2^20 pages = 16M tokens) fills after some 15,000 sequences, so
 * the second part of the run also measures eviction.
 *
 * Then a hit-only phase re-matches the last 10,000 sequences (still cached)
 * to time match on long full hits.
 *
 * Reports ns per token for match (per queried token) and insert (per token
 * of the key), eviction cost per evicted page, hit rate, and the tree's
 * bookkeeping bytes per cached token (nodes, token copies, page ids, child
 * tables; the token copy alone is 4 bytes/token).
 *
 * Usage: bench_radix [n_seqs] [pool_pages] [seed] [branchy]
 * Not run by ctest. Numbers vary with the machine; the targets are match
 * <= 20 ns/token and insert <= 50 ns/token.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "radix/radix.h"
#include "base/util.h"

#define PS 16
#define N_PREFIX 100
#define MIN_LEN 256
#define MAX_LEN 4096
#define VOCAB 49152

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct rng {
    uint64_t s;
} rng;
static inline uint64_t rng_next(rng *r) { return mix64(r->s += 0x9e3779b97f4a7c15ull); }

static int32_t prefix_len[N_PREFIX];
static bool branchy;
static int32_t *prefix_tok[N_PREFIX];

/* Sequence i's tokens (deterministic in i and the seed). */
static int32_t make_seq(uint64_t seed, int64_t i, int32_t *out) {
    rng r = {mix64(seed ^ (uint64_t)i * 0x2545f4914f6cdd1dull)};
    int p = (int)(rng_next(&r) % N_PREFIX);
    int32_t lp = prefix_len[p];
    int32_t lo = branchy ? MIN_LEN : TR_MAX(MIN_LEN, lp + 64);
    int32_t len = lo + (int32_t)(rng_next(&r) % (uint64_t)(MAX_LEN - lo + 1));
    if (branchy) lp = TR_MIN(lp, len - 64);
    memcpy(out, prefix_tok[p], sizeof(int32_t) * (size_t)lp);
    for (int32_t k = lp; k < len; k++) out[k] = (int32_t)(rng_next(&r) % VOCAB);
    return len;
}

/* Thread CPU time: the build machine is shared, so wall-clock per-call
 * times include preemption; both are reported. */
static uint64_t cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct timer {
    uint64_t wall, cpu;
} timer;
static inline void timer_start(timer *t, uint64_t *w0, uint64_t *c0) {
    (void)t;
    *c0 = cpu_ns();
    *w0 = tr_now_ns();
}
static inline void timer_stop(timer *t, uint64_t w0, uint64_t c0) {
    t->wall += tr_now_ns() - w0;
    t->cpu += cpu_ns() - c0;
}

static void die(const char *what, tr_status st) {
    fprintf(stderr, "bench_radix: %s: %s\n", what, tr_status_name(st));
    exit(1);
}

int main(int argc, char **argv) {
    int64_t n_seqs = argc > 1 ? atoll(argv[1]) : 100000;
    int32_t pool_pages = argc > 2 ? (int32_t)atol(argv[2]) : (1 << 20);
    uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 0) : 1;
    branchy = argc > 4 && strcmp(argv[4], "branchy") == 0;
    if (n_seqs < 1 || pool_pages < MAX_LEN / PS + 1) {
        fprintf(stderr, "usage: bench_radix [n_seqs >= 1] [pool_pages >= %d] [seed]\n",
                MAX_LEN / PS + 1);
        return 2;
    }

    rng r = {seed};
    for (int p = 0; p < N_PREFIX; p++) {
        prefix_len[p] = 128 + (int32_t)(rng_next(&r) % (2048 - 128 + 1));
        prefix_tok[p] = malloc(sizeof(int32_t) * (size_t)prefix_len[p]);
        if (!prefix_tok[p]) die("malloc", TR_ERR_NOMEM);
        for (int32_t k = 0; k < prefix_len[p]; k++)
            prefix_tok[p][k] = (int32_t)(rng_next(&r) % VOCAB);
    }

    kv_pool *pool;
    radix_tree *t;
    tr_status st;
    if ((st = tr_kv_pool_new(pool_pages, PS, NULL, &pool))) die("kv_pool_new", st);
    if ((st = tr_radix_tree_new(pool, NULL, &t))) die("radix_tree_new", st);

    int32_t *tokens = malloc(sizeof(int32_t) * MAX_LEN);
    int32_t *pages = malloc(sizeof(int32_t) * (MAX_LEN / PS + 1));
    if (!tokens || !pages) die("malloc", TR_ERR_NOMEM);
    const uint64_t ns = 0x5eed;

    timer tm = {0, 0}, ti = {0, 0}, te = {0, 0}, th = {0, 0};
    uint64_t w0, c0;
    uint64_t match_tok = 0, insert_tok = 0, evicted_pages = 0;
    uint64_t peak_bytes = 0, peak_tokens = 0;
    uint64_t wall0 = tr_now_ns();
    for (int64_t i = 0; i < n_seqs; i++) {
        int32_t n = make_seq(seed, i, tokens);
        radix_match m;
        timer_start(&tm, &w0, &c0);
        st = tr_radix_tree_match(t, ns, tokens, n, pages, &m);
        timer_stop(&tm, w0, c0);
        if (st) die("match", st);
        match_tok += (uint64_t)n;
        if ((st = tr_radix_tree_lock(t, m.node))) die("lock", st);

        int32_t total = (n + PS - 1) / PS, need = total - m.n_pages;
        st = tr_kv_pool_alloc(pool, need, pages + m.n_pages);
        if (st == TR_ERR_FULL) {
            timer_start(&te, &w0, &c0);
            evicted_pages += (uint64_t)tr_radix_tree_evict(t, need - tr_kv_pool_n_free(pool));
            timer_stop(&te, w0, c0);
            st = tr_kv_pool_alloc(pool, need, pages + m.n_pages);
        }
        if (st) die("kv_pool_alloc", st);

        radix_node *x;
        timer_start(&ti, &w0, &c0);
        st = tr_radix_tree_insert(t, ns, tokens, pages, n, &x);
        timer_stop(&ti, w0, c0);
        if (st) die("insert", st);
        insert_tok += (uint64_t)n;

        if ((st = tr_radix_tree_unlock(t, m.node))) die("unlock", st);
        if (n % PS && (st = tr_kv_pool_unref(pool, pages[total - 1]))) die("unref", st);

        if ((i & 1023) == 0) {
            radix_tree_stats s;
            tr_radix_tree_stats_get(t, &s);
            if (s.bytes > peak_bytes) {
                peak_bytes = s.bytes;
                peak_tokens = (uint64_t)s.n_tree_tokens;
            }
        }
    }
    uint64_t wall = tr_now_ns() - wall0;
    radix_tree_stats s;
    tr_radix_tree_stats_get(t, &s);

    /* Hit-only phase: the most recent sequences are still cached whole
     * (all but their partial last page). */
    int64_t n_hit = TR_MIN(n_seqs, 10000);
    uint64_t hit_tok = 0, hit_matched = 0;
    for (int64_t i = n_seqs - n_hit; i < n_seqs; i++) {
        int32_t n = make_seq(seed, i, tokens);
        radix_match m;
        timer_start(&th, &w0, &c0);
        st = tr_radix_tree_match(t, ns, tokens, n, pages, &m);
        timer_stop(&th, w0, c0);
        if (st) die("match", st);
        hit_tok += (uint64_t)n;
        hit_matched += (uint64_t)m.n_tokens;
    }

    if ((st = tr_radix_tree_check(t))) die("radix_tree_check", st);

    printf("bench_radix: %" PRId64 " sequences of %d..%d tokens over %d prefixes%s, "
           "page size %d, pool %d pages (%d tokens)\n",
           n_seqs, MIN_LEN, MAX_LEN, N_PREFIX, branchy ? " (branchy)" : "", PS,
           pool_pages, pool_pages * PS);
    printf("  ns/token (cpu | wall):\n");
    printf("  match   %7.2f | %7.2f  (%" PRIu64 " tokens, hit rate %.3f)\n",
           (double)tm.cpu / (double)match_tok, (double)tm.wall / (double)match_tok,
           match_tok, s.hit_rate);
    printf("  insert  %7.2f | %7.2f  (%" PRIu64 " tokens; %" PRIu64
           " pages taken, %" PRIu64 " duplicates)\n",
           (double)ti.cpu / (double)insert_tok, (double)ti.wall / (double)insert_tok,
           insert_tok, s.inserted_pages, s.duplicate_pages);
    printf("  hit-only match of the last %" PRId64 " sequences: %.2f | %.2f "
           "(%.1f%% of tokens matched)\n",
           n_hit, (double)th.cpu / (double)hit_tok, (double)th.wall / (double)hit_tok,
           100.0 * (double)hit_matched / (double)hit_tok);
    printf("  evict   %7.2f | %7.2f ns/page (%" PRIu64 " pages, %" PRIu64 " nodes)\n",
           evicted_pages ? (double)te.cpu / (double)evicted_pages : 0.0,
           evicted_pages ? (double)te.wall / (double)evicted_pages : 0.0,
           evicted_pages, s.evicted_nodes);
    printf("  tree: %" PRId64 " nodes, %" PRId64 " cached tokens, %.2f bytes/token "
           "(%.2f beyond the 4-byte token copy); peak %.2f bytes/token\n",
           s.n_nodes, s.n_tree_tokens,
           s.n_tree_tokens ? (double)s.bytes / (double)s.n_tree_tokens : 0.0,
           s.n_tree_tokens ? (double)s.bytes / (double)s.n_tree_tokens - 4.0 : 0.0,
           peak_tokens ? (double)peak_bytes / (double)peak_tokens : 0.0);
    printf("  pool: free %d, locked %d, cached %d\n", s.pages_free, s.pages_locked,
           s.pages_cached);
    printf("  wall %.2f s\n", (double)wall * 1e-9);

    tr_radix_tree_free(t);
    tr_kv_pool_free(pool);
    for (int p = 0; p < N_PREFIX; p++) free(prefix_tok[p]);
    free(tokens);
    free(pages);
    return 0;
}
