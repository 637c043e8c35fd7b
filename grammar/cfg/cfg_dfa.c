/* cfg_dfa.c — a grammar's DFA, made state by state as matchers need it.
 *
 * Layering: grammar/cfg (cfg_internal.h; tr_cfg_free, _check, _dump,
 * _failed and _bytes are the façade's, cfg.h); built by
 * tr_grammar_compile_ebnf from the kept rules' NFA, then read by cfg.c,
 * cfg_mask.c and cfg_matcher.c through the gl_* accessors. Shared by every
 * thread using the grammar (below).
 *
 * The idea in two paragraphs. Compiling a grammar eagerly (subset
 * construction of every state, then minimization) cost time in proportion
 * to the whole automaton: ~1.3 ms of CPU for a JSON any-value grammar of
 * 740 raw states, 8 ms for a flat schema of 2,900, while a request reaches
 * a few dozen states. Here compiling stops at the NFA (kept in a compact
 * form: consuming edges as column ranges, epsilon edges, dead states
 * dropped), and a DFA state is a subset of NFA states whose row (next
 * state per byte class, and per call symbol the callee and return state)
 * is computed the first time someone steps from it. States are not
 * minimized; none is dead but state 0, since dead NFA states never enter a
 * subset. The per-state facts the matchers read on hot paths (flags, the
 * one live byte, tail calls, ASCII self-loops for the mask walk's
 * shortcut) are computed with the row.
 *
 * Concurrency. States live in chunks of GL_CH that never move; a chunk
 * pointer and then a state's `ready` flag are published with release
 * stores after everything they guard is written, and read with acquire
 * loads, so a reader that sees a state ready sees its row. Creating and
 * expanding states takes `lock` (once per state, rare after warm-up); the
 * subset keys, their hash table and the expansion scratch are touched
 * only under it. Past max_states (max_lazy_dfa_states) a state cannot be made:
 * the transition leads to the dead state and `failed` is set for good,
 * which every matcher call checks and reports as TR_ERR_LIMIT, so a
 * grammar never silently answers with a truncated automaton.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/cfg/cfg_internal.h"

/* ---- compile time: the NFA in compact form ---- */

/* Byte classes from the byte edges' boundaries. */
static void classes(const gnfa *n, gcfg *c) {
    bool bnd[257] = {false};
    for (uint32_t e = 0; e < n->n_edges; e++)
        if (n->edges[e].kind == GNFA_BYTE) {
            bnd[n->edges[e].lo] = true;
            bnd[n->edges[e].hi + 1] = true;
        }
    uint32_t k = 0;
    for (int b = 0; b < 256; b++) {
        if (b > 0 && bnd[b]) k++;
        c->cls[b] = (uint8_t)k;
        c->cls_size[k]++;
        c->cls_byte[k] = (uint8_t)b;
    }
    c->n_cls = k + 1;
}

/* NFA states that can reach the final state (calls go to productive
 * rules: the analysis pruned the others). */
static tr_status live_states(gcc *cc, const gnfa *n, uint8_t *live) {
    uint32_t N = n->n_states;
    uint32_t *roff = tr_gcc_alloc(cc, ((size_t)N + 1) * sizeof *roff);
    uint32_t *radj = tr_gcc_alloc(cc, ((size_t)n->n_edges + 1) * sizeof *radj);
    uint32_t *q = tr_gcc_alloc(cc, ((size_t)N + 1) * sizeof *q);
    if (!roff || !radj || !q) return cc->err;
    for (uint32_t e = 0; e < n->n_edges; e++) roff[n->edges[e].to + 1]++;
    for (uint32_t s = 0; s < N; s++) roff[s + 1] += roff[s];
    for (uint32_t s = 0; s < N; s++)
        for (uint32_t e = n->head[s]; e != UINT32_MAX; e = n->edges[e].next)
            radj[roff[n->edges[e].to]++] = s;
    for (uint32_t s = N; s > 0; s--) roff[s] = roff[s - 1];
    roff[0] = 0;
    uint32_t qh = 0, qt = 0;
    live[n->final] = 1;
    q[qt++] = n->final;
    while (qh < qt) {
        uint32_t t = q[qh++];
        for (uint32_t j = roff[t]; j < roff[t + 1]; j++)
            if (!live[radj[j]]) live[radj[j]] = 1, q[qt++] = radj[j];
    }
    return TR_OK;
}

static tr_status nfa_tables(gcc *cc, const gnfa *n, gcfg *c) {
    uint32_t N = n->n_states;
    uint8_t *live = tr_gcc_alloc(cc, N);
    if (!live) return cc->err;
    tr_status st = live_states(cc, n, live);
    if (st) return st;
    c->n_nfa = N;
    c->nfa_final = n->final;
    c->c_off = calloc((size_t)N + 1, sizeof *c->c_off);
    c->e_off = calloc((size_t)N + 1, sizeof *c->e_off);
    c->c_edge = malloc(((size_t)n->n_edges + 1) * sizeof *c->c_edge);
    c->e_to = malloc(((size_t)n->n_edges + 1) * sizeof *c->e_to);
    if (!c->c_off || !c->e_off || !c->c_edge || !c->e_to)
        return tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory while compiling");
    uint32_t nc = 0, ne = 0;
    for (uint32_t s = 0; s < N; s++) {
        for (uint32_t e = n->head[s]; live[s] && e != UINT32_MAX; e = n->edges[e].next) {
            const gnfa_edge *x = &n->edges[e];
            if (!live[x->to]) continue;
            if (x->kind == GNFA_BYTE) {
                c->c_edge[nc++] = (gl_edge){x->to, c->cls[x->lo], c->cls[x->hi]};
            } else if (x->kind == GNFA_CALL) {
                uint32_t col = c->n_cls + gnfa_edge_sym(x);
                c->c_edge[nc++] = (gl_edge){x->to, col, col};
            } else {
                c->e_to[ne++] = x->to; /* no anchors in a grammar's NFA */
            }
        }
        c->c_off[s + 1] = nc;
        c->e_off[s + 1] = ne;
    }
    /* the NFA tables are charged like any compile memory */
    if (tr_gcc_charge(cc, ((size_t)N + 1) * 8 + (size_t)n->n_edges * 16)) return cc->err;
    return TR_OK;
}

/* ---- subset keys (under lock, or at compile time) ---- */

static void sort_u32(uint32_t *a, uint32_t n) {
    for (uint32_t i = 1; i < n; i++) { /* sets are small */
        uint32_t v = a[i], j = i;
        while (j > 0 && a[j - 1] > v) a[j] = a[j - 1], j--;
        a[j] = v;
    }
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Epsilon closure of stack[0..n_seeds): key [accept, consuming states
 * sorted] into c->out; returns its length. */
static uint32_t closure(gcfg *c, uint32_t n_seeds) {
    uint32_t gen = ++c->gen, sp = 0, no = 1;
    bool acc = false;
    for (uint32_t i = 0; i < n_seeds; i++) {
        uint32_t q = c->stack[i];
        if (c->mark[q] != gen) c->mark[q] = gen, c->stack[sp++] = q;
    }
    while (sp) {
        uint32_t q = c->stack[--sp];
        if (q == c->nfa_final) acc = true;
        if (c->c_off[q + 1] > c->c_off[q]) c->out[no++] = q;
        for (uint32_t j = c->e_off[q]; j < c->e_off[q + 1]; j++) {
            uint32_t t = c->e_to[j];
            if (c->mark[t] != gen) c->mark[t] = gen, c->stack[sp++] = t;
        }
    }
    c->out[0] = acc;
    if (no - 1 < 32)
        sort_u32(c->out + 1, no - 1);
    else
        qsort(c->out + 1, no - 1, sizeof *c->out, cmp_u32);
    return no;
}

static void set_failed(gcfg *c, tr_status st) {
    int expected = 0;
    atomic_compare_exchange_strong(&c->failed, &expected, (int)st);
}

static bool grow(void **p, uint32_t *cap, size_t es, uint64_t need) {
    if (need <= *cap) return true;
    uint64_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    if (nc > UINT32_MAX / 2) return false;
    void *q = realloc(*p, (size_t)nc * es);
    if (!q) return false;
    *p = q;
    *cap = (uint32_t)nc;
    return true;
}

static bool ht_rehash(gcfg *c, uint32_t cap) {
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t) return false;
    uint32_t n = atomic_load_explicit(&c->n_states, memory_order_relaxed);
    for (uint32_t d = 0; d < n; d++) {
        uint32_t j = (uint32_t)gdfa_key_hash(c->pool + c->koff[d], c->klen[d]) & (cap - 1);
        while (t[j]) j = (j + 1) & (cap - 1);
        t[j] = d + 1;
    }
    free(c->ht);
    c->ht = t;
    c->ht_cap = cap;
    return true;
}

/* The state of key out[0..n), made if new; UINT32_MAX (failed set) when
 * the budget or memory runs out. */
static uint32_t intern(gcfg *c, uint32_t n) {
    const uint32_t *k = c->out;
    uint32_t j = (uint32_t)gdfa_key_hash(k, n) & (c->ht_cap - 1);
    for (uint32_t e; (e = c->ht[j]); j = (j + 1) & (c->ht_cap - 1)) {
        uint32_t d = e - 1;
        if (c->klen[d] == n && memcmp(c->pool + c->koff[d], k, n * sizeof *k) == 0)
            return d;
    }
    uint32_t d = atomic_load_explicit(&c->n_states, memory_order_relaxed);
    if (d >= c->max_states) {
        set_failed(c, TR_ERR_LIMIT);
        return UINT32_MAX;
    }
    if (c->pool_n + n > c->pool_cap) {
        size_t nc = c->pool_cap ? c->pool_cap * 2 : 1024;
        while (nc < c->pool_n + n) nc *= 2;
        uint32_t *p = realloc(c->pool, nc * sizeof *p);
        if (!p) goto nomem;
        c->pool = p;
        c->pool_cap = nc;
    }
    uint32_t kc = c->kcap, kc2 = c->kcap;
    if (!grow((void **)&c->koff, &kc, sizeof *c->koff, (uint64_t)d + 1) ||
        !grow((void **)&c->klen, &kc2, sizeof *c->klen, (uint64_t)d + 1))
        goto nomem;
    c->kcap = kc < kc2 ? kc : kc2;
    gl_chunk *ch = NULL;
    if (d % GL_CH == 0) {
        /* A new chunk, its per-state facts zeroed (nothing ready, no calls,
         * no loops). The rows are left as malloc gave them: expand_locked
         * writes a state's whole row before it is ready. calloc cleared
         * all 256 rows (n_cls * 1 KiB: 40-120 KiB) when a document visits a
         * few dozen states; in MaskBench's forked child every page touched
         * is a fault (~5 us): this saved ~10 faults per compile. */
        size_t bytes = sizeof(gl_chunk) + (size_t)GL_CH * c->n_cls * sizeof(uint32_t) +
                       (size_t)GL_CH * 4 * sizeof(uint64_t); /* the live bytes */
        ch = malloc(bytes);
        if (!ch) goto nomem;
        memset(ch, 0, offsetof(gl_chunk, rows));
        atomic_fetch_add_explicit(&c->bytes, bytes, memory_order_relaxed);
    } else {
        ch = atomic_load_explicit(&c->chunks[d / GL_CH], memory_order_relaxed);
    }
    memcpy(c->pool + c->pool_n, k, n * sizeof *k);
    c->koff[d] = (uint32_t)c->pool_n;
    c->klen[d] = n;
    c->pool_n += n;
    /* the key, its offset and length, ~2 hash slots (amortized growth) */
    atomic_fetch_add_explicit(&c->bytes, (uint64_t)n * sizeof *k + 16, memory_order_relaxed);
    ch->accept[d % GL_CH] = (uint8_t)k[0];
    if (d % GL_CH == 0)
        atomic_store_explicit(&c->chunks[d / GL_CH], ch, memory_order_release);
    atomic_store_explicit(&c->n_states, d + 1, memory_order_release);
    c->ht[j] = d + 1;
    if ((d + 1) * 2 > c->ht_cap && !ht_rehash(c, c->ht_cap * 2)) {
        set_failed(c, TR_ERR_NOMEM); /* the state exists; later lookups fail */
        return UINT32_MAX;
    }
    return d;
nomem:
    set_failed(c, TR_ERR_NOMEM);
    return UINT32_MAX;
}

/* ---- expansion ---- */

/* The targets of key's consuming edges, bucketed by column into
 * c->bucket[c->bo[col - 1] .. c->bo[col]) (bo[-1] = 0). */
static bool bucket_targets(gcfg *c, const uint32_t *key, uint32_t klen) {
    uint32_t k = c->k, *bo = c->bo;
    memset(bo, 0, ((size_t)k + 1) * sizeof *bo);
    uint64_t total = 0;
    for (uint32_t i = 1; i < klen; i++)
        for (uint32_t e = c->c_off[key[i]]; e < c->c_off[key[i] + 1]; e++) {
            const gl_edge *x = &c->c_edge[e];
            for (uint32_t col = x->c0; col <= x->c1; col++) bo[col + 1]++;
            total += x->c1 - x->c0 + 1;
        }
    if (!grow((void **)&c->bucket, &c->bucket_cap, sizeof *c->bucket, total + 1))
        return false;
    for (uint32_t col = 0; col < k; col++) bo[col + 1] += bo[col];
    for (uint32_t i = 1; i < klen; i++)
        for (uint32_t e = c->c_off[key[i]]; e < c->c_off[key[i] + 1]; e++) {
            const gl_edge *x = &c->c_edge[e];
            for (uint32_t col = x->c0; col <= x->c1; col++) c->bucket[bo[col]++] = x->to;
        }
    return true; /* now bo[col] ends bucket col */
}

/* The state reached by the sorted, deduplicated targets seg[0..len):
 * closures of equal target lists are computed once per expansion (all the
 * UTF-8 continuation classes of a state usually share one). */
static uint32_t target(gcfg *c, uint32_t *seg, uint32_t len, uint32_t *n_memo) {
    uint64_t h = gdfa_key_hash(seg, len);
    uint32_t mmask = c->memo_cap - 1, j = (uint32_t)h & mmask;
    for (; c->memo_len[j]; j = (j + 1) & mmask)
        if (c->memo_h[j] == h && c->memo_len[j] == len &&
            memcmp(c->bucket + c->memo_off[j], seg, len * sizeof *seg) == 0)
            return c->memo_t[j];
    memcpy(c->stack, seg, len * sizeof *seg);
    uint32_t t = intern(c, closure(c, len));
    if (t == UINT32_MAX) t = GDFA_DEAD; /* failed is set */
    c->memo_h[j] = h;
    c->memo_off[j] = (uint32_t)(seg - c->bucket);
    c->memo_len[j] = len;
    c->memo_t[j] = t;
    c->memo_used[(*n_memo)++] = j;
    return t;
}

/* Sorts seg[0..len) (len >= 1) and drops repeats; returns the count kept. */
static uint32_t sorted_unique(uint32_t *seg, uint32_t len) {
    uint32_t w = 1;
    sort_u32(seg, len);
    for (uint32_t x = 1; x < len; x++)
        if (seg[x] != seg[w - 1]) seg[w++] = seg[x];
    return w;
}

/* Past this many consuming edges in a subset, its targets are bucketed
 * per column (bucket_targets) instead of per range of columns. */
#define SEG_EDGES 32u
#define SEG_WORDS 8u /* and past 511 columns */

/* Runs of columns with one target: [lo, next run's lo) goes to t. */
typedef struct gl_run {
    uint32_t lo, t;
} gl_run;

/* The targets of every column as runs into c->runs (returns how many)
 * when the subset's edges are few: the edges are ranges of columns, so
 * the columns between two consecutive range bounds share one target
 * list. A schema's states hold ~2 NFA states with 3.6 edges in all over
 * ~72 columns, 8 runs (200 dev schemas); sorting, deduplicating and
 * hashing each column's list was half of an expansion (~1,200 of ~2,300
 * cycles), and expansions a third of a cold mask. Run bounds come from
 * a bitmap and the edges covering a run from a sweep (no sort, no scan
 * of every edge per run); with the facts taken per run too (row_facts),
 * expansions run 40% fewer instructions (callgrind, 40 dev schemas).
 * Returns 0 (nothing done) past SEG_EDGES edges or SEG_WORDS * 64 - 1
 * columns. */
static uint32_t targets_by_range(gcfg *c, const uint32_t *key, uint32_t klen,
                                 uint32_t *n_memo) {
    uint32_t n_e = 0, eidx[SEG_EDGES], k = c->k;
    uint64_t bm[SEG_WORDS] = {0}; /* the runs' first columns */
    if (k >= 64 * SEG_WORDS) return 0;
    for (uint32_t i = 1; i < klen; i++)
        for (uint32_t e = c->c_off[key[i]]; e < c->c_off[key[i] + 1]; e++) {
            if (n_e == SEG_EDGES) return 0;
            /* by first column (insertion: a few edges) */
            uint32_t j = n_e++, c0 = c->c_edge[e].c0;
            while (j > 0 && c->c_edge[eidx[j - 1]].c0 > c0) eidx[j] = eidx[j - 1], j--;
            eidx[j] = e;
        }
    if (!grow((void **)&c->bucket, &c->bucket_cap, sizeof *c->bucket,
              (uint64_t)n_e * (2 * n_e + 1) + 1)) {
        set_failed(c, TR_ERR_NOMEM);
        return 0;
    }
    bm[0] = 1;
    for (uint32_t j = 0; j < n_e; j++) {
        const gl_edge *x = &c->c_edge[eidx[j]];
        bm[x->c0 >> 6] |= 1ull << (x->c0 & 63);
        bm[(x->c1 + 1) >> 6] |= 1ull << ((x->c1 + 1) & 63);
    }
    /* sweep: the edges covering a run are those begun and not ended */
    uint32_t used = 0, n_runs = 0, act[SEG_EDGES], n_act = 0, nx = 0;
    gl_run *runs = c->runs; /* a local: stores could alias c */
    for (uint32_t wd = 0; wd <= k >> 6; wd++)
        for (uint64_t bits = bm[wd]; bits; bits &= bits - 1) {
            uint32_t lo = wd * 64 + (uint32_t)__builtin_ctzll(bits), len = 0;
            if (lo >= k) break;
            uint32_t keep = 0, t = GDFA_DEAD, *seg = c->bucket + used;
            for (uint32_t q = 0; q < n_act; q++)
                if (c->c_edge[act[q]].c1 >= lo) act[keep++] = act[q];
            n_act = keep;
            while (nx < n_e && c->c_edge[eidx[nx]].c0 == lo) act[n_act++] = eidx[nx++];
            for (uint32_t q = 0; q < n_act; q++) seg[len++] = c->c_edge[act[q]].to;
            if (len) {
                uint32_t w = sorted_unique(seg, len);
                used += w;
                t = target(c, seg, w, n_memo);
            }
            runs[n_runs++] = (gl_run){lo, t};
        }
    return n_runs;
}

/* The same by buckets per column (subsets with many edges), one run per
 * column. */
static uint32_t targets_by_column(gcfg *c, const uint32_t *key, uint32_t klen,
                                  uint32_t *n_memo) {
    if (!bucket_targets(c, key, klen)) {
        set_failed(c, TR_ERR_NOMEM);
        return 0;
    }
    uint32_t start = 0;
    for (uint32_t col = 0; col < c->k; col++) {
        uint32_t end = c->bo[col], t = GDFA_DEAD;
        if (end > start) {
            uint32_t *seg = c->bucket + start;
            t = target(c, seg, sorted_unique(seg, end - start), n_memo);
        }
        start = end;
        c->runs[col] = (gl_run){col, t};
    }
    return c->k;
}

/* Bits lo..hi of a word (lo <= hi <= 63). */
static uint64_t span(uint32_t lo, uint32_t hi) { return (~0ull >> (63 - hi)) & (~0ull << lo); }

/* Sets the bits of bytes lo..hi (lo <= hi <= 255) in bits[4]. */
static void byte_range(uint64_t bits[4], uint32_t lo, uint32_t hi) {
    for (uint32_t w = lo >> 6; w <= hi >> 6; w++)
        bits[w] |= span(w == lo >> 6 ? lo & 63 : 0, w == hi >> 6 ? hi & 63 : 63);
}

/* Sets the bits of bytes lo..hi (lo <= hi) below 128 in bits. */
static void ascii_range(uint64_t bits[2], uint32_t lo, uint32_t hi) {
    if (lo > 127) return;
    if (hi > 127) hi = 127;
    if (lo < 64) bits[0] |= span(lo, hi < 64 ? hi : 63);
    if (hi >= 64) bits[1] |= span(lo < 64 ? 0 : lo - 64, hi - 64);
}

/* Whether state s (its row) is a bounded whitespace loop: every blank
 * leads back to it (gcfg.ws_bound). */
static bool ws_loops(const gcfg *c, const uint32_t *row, uint32_t s) {
    return c->ws_bound && row[c->cls[' ']] == s && row[c->cls['\t']] == s &&
           row[c->cls['\n']] == s && row[c->cls['\r']] == s;
}

/* State s's row and facts from its runs (lo < n_cls), per run rather
 * than per column: a class is a range of bytes, so a run of classes is
 * one too. */
static void row_facts(gcfg *c, uint32_t s, const gl_run *runs, uint32_t n_runs,
                      gl_chunk *ch, uint32_t i) {
    uint32_t nc = c->n_cls, live_bytes = 0, *row = ch->rows + (size_t)i * nc;
    int only = -2;
    uint64_t lp[2] = {0, 0}, lv[4] = {0, 0, 0, 0};
    for (uint32_t r = 0; r < n_runs && runs[r].lo < nc; r++) {
        uint32_t lo = runs[r].lo, hi = r + 1 < n_runs ? runs[r + 1].lo : c->k, t = runs[r].t;
        if (hi > nc) hi = nc;
        for (uint32_t col = lo; col < hi; col++) row[col] = t;
        if (t == GDFA_DEAD) continue;
        uint32_t b0 = lo ? c->cls_byte[lo - 1] + 1u : 0, b1 = c->cls_byte[hi - 1];
        live_bytes += b1 - b0 + 1;
        byte_range(lv, b0, b1);
        only = (int)b1;
        if (t == s) ascii_range(lp, b0, b1);
    }
    if (live_bytes != 1) only = live_bytes ? -1 : -2;
    bool wsl = ws_loops(c, row, s);
    if (wsl) /* a mask walk must count these bytes, not take them whole */
        lp[0] &= ~((1ull << ' ') | (1ull << '\t') | (1ull << '\n') | (1ull << '\r'));
    ch->wsl[i] = wsl;
    ch->aloop[i][0] = lp[0];
    ch->aloop[i][1] = lp[1];
    memcpy(gl_chunk_live(ch, nc, i), lv, sizeof lv);
    ch->only[i] = (int16_t)only;
    ch->flags[i] = (uint8_t)(live_bytes ? GCFG_BYTES : 0);
}

/* Row, calls and facts of state s (lock held, s not ready). */
static void expand_locked(gcfg *c, uint32_t s) {
    gl_chunk *ch = atomic_load_explicit(&c->chunks[s / GL_CH], memory_order_relaxed);
    uint32_t i = s % GL_CH, k = c->k, nc = c->n_cls;
    const uint32_t *key = c->pool + c->koff[s];
    uint32_t n_memo = 0, n_calls = 0, n_runs = 0;
    if (s != GDFA_DEAD) {
        if (!c->by_column) n_runs = targets_by_range(c, key, c->klen[s], &n_memo);
        if (!n_runs && !gl_failed(c)) n_runs = targets_by_column(c, key, c->klen[s], &n_memo);
    }
    for (uint32_t x = 0; x < n_memo; x++) c->memo_len[c->memo_used[x]] = 0;
    if (!n_runs) {
        memset(ch->rows + (size_t)i * nc, 0, nc * sizeof(uint32_t));
        memset(gl_chunk_live(ch, nc, i), 0, 4 * sizeof(uint64_t));
        atomic_store_explicit(&ch->ready[i], 1, memory_order_release);
        return;
    }
    row_facts(c, s, c->runs, n_runs, ch, i);
    gl_call calls_tmp[64], *calls = calls_tmp;
    uint32_t calls_cap = 64;
    for (uint32_t r = 0; r < n_runs; r++) {
        uint32_t t = c->runs[r].t, hi = r + 1 < n_runs ? c->runs[r + 1].lo : k;
        if (t == GDFA_DEAD || hi <= nc) continue;
        for (uint32_t col = c->runs[r].lo < nc ? nc : c->runs[r].lo; col < hi; col++) {
            if (n_calls == calls_cap) {
                gl_call *p = malloc(2 * calls_cap * sizeof *p);
                if (!p) {
                    set_failed(c, TR_ERR_NOMEM);
                    r = n_runs;
                    break;
                }
                memcpy(p, calls, n_calls * sizeof *p);
                if (calls != calls_tmp) free(calls);
                calls = p;
                calls_cap *= 2;
            }
            calls[n_calls].start = c->rule_start[col - nc];
            calls[n_calls++].ret = t;
        }
    }
    gl_call *kept = NULL;
    if (n_calls) {
        kept = malloc(n_calls * sizeof *kept);
        if (kept) {
            memcpy(kept, calls, n_calls * sizeof *kept);
            atomic_fetch_add_explicit(&c->bytes, n_calls * sizeof *kept, memory_order_relaxed);
        } else {
            set_failed(c, TR_ERR_NOMEM);
            n_calls = 0;
        }
    }
    if (calls != calls_tmp) free(calls);
    bool live = ch->flags[i] & GCFG_BYTES;
    ch->ncall[i] = n_calls;
    ch->calls[i] = kept;
    ch->flags[i] |= (uint8_t)((n_calls ? GCFG_CALLS : 0) | (ch->accept[i] ? GCFG_ACCEPT : 0));
    ch->tail[i] = ch->accept[i] && !live && !n_calls;
    atomic_store_explicit(&ch->ready[i], 1, memory_order_release);
}

void tr_cfg_expand(gcfg *c, uint32_t s) {
    pthread_mutex_lock(&c->lock);
    gl_chunk *ch = atomic_load_explicit(&c->chunks[s / GL_CH], memory_order_relaxed);
    if (!atomic_load_explicit(&ch->ready[s % GL_CH], memory_order_relaxed))
        expand_locked(c, s);
    pthread_mutex_unlock(&c->lock);
}

/* ---- FOLLOW, on the NFA ---- */

typedef struct fb_ctx {
    const gcfg *c;
    uint64_t (*rule_first)[4]; /* [n_kept] */
    uint8_t *rule_null;        /* [n_kept] */
    const uint32_t *nfa_start; /* [n_kept] */
    uint32_t *stack, *mark, gen;
    uint64_t cmask[256][4];    /* bytes of each class */
} fb_ctx;

/* Bytes the NFA can consume first from q (through epsilons, into callees,
 * past nullable ones) into bits; whether it can reach the final state
 * without a byte. */
static bool first_bytes(fb_ctx *f, uint32_t q, uint64_t bits[4]) {
    const gcfg *c = f->c;
    uint32_t gen = ++f->gen, sp = 0;
    bool fin = false;
    f->stack[sp++] = q;
    f->mark[q] = gen;
    while (sp) {
        uint32_t s = f->stack[--sp];
        if (s == c->nfa_final) fin = true;
        for (uint32_t e = c->c_off[s]; e < c->c_off[s + 1]; e++) {
            const gl_edge *x = &c->c_edge[e];
            if (x->c0 < c->n_cls) {
                for (uint32_t col = x->c0; col <= x->c1; col++)
                    for (int w = 0; w < 4; w++) bits[w] |= f->cmask[col][w];
                continue;
            }
            uint32_t y = x->c0 - c->n_cls;
            for (int w = 0; w < 4; w++) bits[w] |= f->rule_first[y][w];
            if (f->rule_null[y] && f->mark[x->to] != gen)
                f->mark[x->to] = gen, f->stack[sp++] = x->to;
        }
        for (uint32_t j = c->e_off[s]; j < c->e_off[s + 1]; j++)
            if (f->mark[c->e_to[j]] != gen)
                f->mark[c->e_to[j]] = gen, f->stack[sp++] = c->e_to[j];
    }
    return fin;
}

static tr_status follow(gcc *cc, gcfg *c, const uint32_t *nfa_start) {
    fb_ctx f = {.c = c, .nfa_start = nfa_start};
    f.rule_first = tr_gcc_alloc(cc, (size_t)c->n_kept * sizeof *f.rule_first);
    f.rule_null = tr_gcc_alloc(cc, c->n_kept);
    f.stack = tr_gcc_alloc(cc, ((size_t)c->n_nfa + 1) * sizeof *f.stack);
    f.mark = tr_gcc_alloc(cc, ((size_t)c->n_nfa + 1) * sizeof *f.mark);
    if (!f.rule_first || !f.rule_null || !f.stack || !f.mark) return cc->err;
    for (int b = 0; b < 256; b++) f.cmask[c->cls[b]][b >> 6] |= 1ull << (b & 63);
    /* rules' first bytes and nullability: a fixpoint (monotone; the
     * analysis refused left recursion, so it settles quickly) */
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t y = 0; y < c->n_kept; y++) {
            uint64_t bits[4] = {0};
            bool fin = first_bytes(&f, nfa_start[y], bits);
            for (int w = 0; w < 4; w++)
                if (bits[w] & ~f.rule_first[y][w]) f.rule_first[y][w] |= bits[w], changed = true;
            if (fin && !f.rule_null[y]) f.rule_null[y] = 1, changed = true;
        }
        tr_status st = tr_gcc_poll_time(cc);
        if (st) return st;
    }
    memset(c->follow, 0, sizeof c->follow);
    for (uint32_t e = 0; e < c->c_off[c->n_nfa]; e++)
        if (c->c_edge[e].c0 >= c->n_cls) first_bytes(&f, c->c_edge[e].to, c->follow);
    return TR_OK;
}

/* ---- life cycle ---- */

void tr_cfg_free(gcfg *c) {
    if (!c) return;
    for (uint32_t i = 0; c->chunks && i < c->n_slots; i++) {
        gl_chunk *ch = atomic_load_explicit(&c->chunks[i], memory_order_relaxed);
        if (!ch) continue;
        for (uint32_t j = 0; j < GL_CH; j++) free(ch->calls[j]);
        free(ch);
    }
    free((void *)c->chunks);
    if (c->rule_name)
        for (uint32_t i = 0; i < c->n_kept; i++) free(c->rule_name[i]);
    free(c->rule_name);
    free(c->rule_start);
    free(c->c_off), free(c->c_edge), free(c->e_off), free(c->e_to);
    free(c->pool), free(c->koff), free(c->klen), free(c->ht);
    free(c->stack), free(c->mark), free(c->out), free(c->bo), free(c->bucket);
    free(c->runs);
    free(c->memo_t), free(c->memo_used), free(c->memo_h), free(c->memo_off);
    free(c->memo_len);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

tr_status tr_cfg_failed(const gcfg *c) { return gl_failed(c); }

uint64_t tr_cfg_bytes(const gcfg *c) {
    return atomic_load_explicit(&((gcfg *)c)->bytes, memory_order_relaxed);
}

static tr_status scratch(gcc *cc, gcfg *c) {
    size_t N = c->n_nfa;
    c->stack = malloc((2 * N + 2) * sizeof *c->stack);
    c->mark = calloc(N + 1, sizeof *c->mark);
    c->out = malloc((N + 2) * sizeof *c->out);
    c->bo = malloc(((size_t)c->k + 1) * sizeof *c->bo);
    c->runs = malloc(((size_t)c->k + 1) * sizeof *c->runs);
    c->memo_cap = 512;
    while (c->memo_cap < 2 * c->k) c->memo_cap *= 2;
    c->memo_t = malloc(c->memo_cap * sizeof *c->memo_t);
    c->memo_used = malloc(((size_t)c->k + 1) * sizeof *c->memo_used);
    c->memo_h = malloc(c->memo_cap * sizeof *c->memo_h);
    c->memo_off = malloc(c->memo_cap * sizeof *c->memo_off);
    c->memo_len = calloc(c->memo_cap, sizeof *c->memo_len);
    c->n_slots = (c->max_states + GL_CH - 1) / GL_CH;
    c->chunks = calloc(c->n_slots, sizeof *c->chunks);
    c->ht_cap = 256;
    c->ht = calloc(c->ht_cap, sizeof *c->ht);
    if (!c->stack || !c->mark || !c->out || !c->bo || !c->runs || !c->memo_t || !c->memo_used ||
        !c->memo_h || !c->memo_off || !c->memo_len || !c->chunks || !c->ht)
        return tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory while compiling");
    return TR_OK;
}

tr_status tr_cfg_new(gcc *cc, const gnfa *nfa, const uint32_t *starts,
                     const char *const *names, const uint32_t *name_lens,
                     uint32_t n_kept, uint32_t ws_bound, gcfg **out) {
    gcfg *c = calloc(1, sizeof *c);
    if (!c) return tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory while compiling");
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory while compiling");
    }
    c->n_kept = n_kept;
    c->ws_bound = ws_bound;
    c->max_stacks = cc->lim.max_stacks;
    c->max_states = cc->lim.max_lazy_dfa_states < 2 ? 2 : cc->lim.max_lazy_dfa_states;
    classes(nfa, c);
    c->n_sym = n_kept;
    c->k = c->n_cls + n_kept;
    c->rule_start = calloc(n_kept, sizeof *c->rule_start);
    c->rule_name = calloc(n_kept, sizeof *c->rule_name);
    tr_status st = (!c->rule_start || !c->rule_name)
                       ? tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory while compiling")
                       : nfa_tables(cc, nfa, c);
    if (!st) st = scratch(cc, c);
    for (uint32_t i = 0; !st && i < n_kept; i++) {
        c->rule_name[i] = malloc(name_lens[i] + 1);
        if (!c->rule_name[i]) {
            st = tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory while compiling");
            break;
        }
        memcpy(c->rule_name[i], names[i], name_lens[i]);
        c->rule_name[i][name_lens[i]] = 0;
    }
    if (!st) { /* state 0: the empty subset, dead */
        c->out[0] = 0;
        if (intern(c, 1) != GDFA_DEAD) st = tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory");
        else tr_cfg_expand(c, GDFA_DEAD);
    }
    for (uint32_t i = 0; !st && i < n_kept; i++) {
        c->stack[0] = starts[i];
        uint32_t s = intern(c, closure(c, 1));
        if (s == UINT32_MAX || s == GDFA_DEAD)
            st = tr_gcc_fail(cc, s == GDFA_DEAD ? TR_ERR_INTERNAL : TR_ERR_LIMIT, 0,
                             s == GDFA_DEAD ? "a kept rule compiled to nothing"
                                            : "DFA larger than max_lazy_dfa_states = %u",
                             c->max_states);
        else
            c->rule_start[i] = s;
    }
    if (!st) st = follow(cc, c, starts);
    if (st) {
        tr_cfg_free(c);
        return st;
    }
    *out = c;
    return TR_OK;
}

/* ---- check and dump ---- */

/* Under the lock: the state of column col (a byte class or a call) from s,
 * recomputed from the subsets (UINT32_MAX if that subset is not a state). */
static uint32_t recompute(gcfg *c, uint32_t s, uint32_t col) {
    const uint32_t *key = c->pool + c->koff[s];
    uint32_t n = 0;
    for (uint32_t i = 1; i < c->klen[s]; i++)
        for (uint32_t e = c->c_off[key[i]]; e < c->c_off[key[i] + 1]; e++)
            if (c->c_edge[e].c0 <= col && col <= c->c_edge[e].c1)
                c->stack[n++] = c->c_edge[e].to;
    if (n == 0) return GDFA_DEAD;
    uint32_t len = closure(c, n);
    uint32_t j = (uint32_t)gdfa_key_hash(c->out, len) & (c->ht_cap - 1);
    for (uint32_t e; (e = c->ht[j]); j = (j + 1) & (c->ht_cap - 1))
        if (c->klen[e - 1] == len && memcmp(c->pool + c->koff[e - 1], c->out, len * 4) == 0)
            return e - 1;
    return UINT32_MAX;
}

static tr_status check_state(gcfg *c, uint32_t s, uint32_t ns) {
    gl_chunk *ch = atomic_load_explicit(&c->chunks[s / GL_CH], memory_order_relaxed);
    uint32_t i = s % GL_CH;
    if (ch->accept[i] != c->pool[c->koff[s]]) return TR_ERR_INTERNAL;
    if (s != GDFA_DEAD && c->klen[s] < 2 && !ch->accept[i]) return TR_ERR_INTERNAL;
    if (!atomic_load_explicit(&ch->ready[i], memory_order_relaxed)) return TR_OK;
    const uint32_t *row = ch->rows + (size_t)i * c->n_cls;
    if (s == GDFA_DEAD) { /* no transition, no fact */
        for (uint32_t col = 0; col < c->n_cls; col++)
            if (row[col] != GDFA_DEAD) return TR_ERR_INTERNAL;
        return ch->flags[i] || ch->ncall[i] ? TR_ERR_INTERNAL : TR_OK;
    }
    uint32_t live = 0;
    for (int b = 0; b < 256; b++) {
        uint32_t t = row[c->cls[b]];
        if (t >= ns) return TR_ERR_INTERNAL;
        if (!gl_failed(c) && recompute(c, s, c->cls[b]) != t)
            return TR_ERR_INTERNAL;
        live += t != GDFA_DEAD;
        if (((gl_chunk_live(ch, c->n_cls, i)[b >> 6] >> (b & 63)) & 1) != (t != GDFA_DEAD))
            return TR_ERR_INTERNAL;
        bool loop = b < 128 && ((ch->aloop[i][b >> 6] >> (b & 63)) & 1);
        bool counted = ch->wsl[i] && tr_is_json_ws((uint8_t)b);
        if (b < 128 && loop != (t == s && !counted)) return TR_ERR_INTERNAL;
    }
    if (ch->wsl[i] != ws_loops(c, row, s)) return TR_ERR_INTERNAL;
    int only = live == 1 ? -3 : live ? -1 : -2;
    for (int b = 0; b < 256 && only == -3; b++)
        if (row[c->cls[b]] != GDFA_DEAD) only = b;
    uint32_t nc = ch->ncall[i], j = 0;
    for (uint32_t y = 0; y < c->n_sym && !gl_failed(c); y++) { /* calls in column order */
        uint32_t t = recompute(c, s, c->n_cls + y);
        if (t == GDFA_DEAD) continue;
        if (j >= nc || ch->calls[i][j].start != c->rule_start[y] || ch->calls[i][j].ret != t)
            return TR_ERR_INTERNAL;
        j++;
    }
    if (!gl_failed(c) && j != nc) return TR_ERR_INTERNAL;
    for (uint32_t j = 0; j < nc; j++) {
        bool is_start = false;
        for (uint32_t r = 0; r < c->n_kept && !is_start; r++)
            is_start = ch->calls[i][j].start == c->rule_start[r];
        if (!is_start || ch->calls[i][j].ret == GDFA_DEAD || ch->calls[i][j].ret >= ns)
            return TR_ERR_INTERNAL;
    }
    uint8_t want = (uint8_t)((nc ? GCFG_CALLS : 0) | (ch->accept[i] ? GCFG_ACCEPT : 0) |
                             (live ? GCFG_BYTES : 0));
    if (ch->flags[i] != want || ch->only[i] != only ||
        ch->tail[i] != (ch->accept[i] && !live && !nc))
        return TR_ERR_INTERNAL;
    return TR_OK;
}

tr_status tr_cfg_check(gcfg *c) {
    if (c->n_kept == 0 || c->k != c->n_cls + c->n_sym) return TR_ERR_INTERNAL;
    for (uint32_t q = 0; q < c->n_nfa; q++) {
        if (c->c_off[q + 1] < c->c_off[q] || c->e_off[q + 1] < c->e_off[q])
            return TR_ERR_INTERNAL;
        for (uint32_t e = c->c_off[q]; e < c->c_off[q + 1]; e++)
            if (c->c_edge[e].to >= c->n_nfa || c->c_edge[e].c1 >= c->k ||
                c->c_edge[e].c0 > c->c_edge[e].c1 ||
                (c->c_edge[e].c0 < c->n_cls) != (c->c_edge[e].c1 < c->n_cls))
                return TR_ERR_INTERNAL;
        for (uint32_t j = c->e_off[q]; j < c->e_off[q + 1]; j++)
            if (c->e_to[j] >= c->n_nfa) return TR_ERR_INTERNAL;
    }
    pthread_mutex_lock(&c->lock);
    uint32_t ns = atomic_load_explicit(&c->n_states, memory_order_relaxed);
    tr_status st = ns >= 1 ? TR_OK : TR_ERR_INTERNAL;
    for (uint32_t r = 0; r < c->n_kept && !st; r++)
        if (c->rule_start[r] == GDFA_DEAD || c->rule_start[r] >= ns) st = TR_ERR_INTERNAL;
    for (uint32_t s = 0; s < ns && !st; s++) st = check_state(c, s, ns);
    pthread_mutex_unlock(&c->lock);
    return st;
}

void tr_cfg_dump(gcfg *c, FILE *f) {
    uint32_t ns = tr_cfg_n_states(c);
    fprintf(f, "grammar: NFA %u states, %u byte classes, %u rules kept as calls, "
               "%u DFA states made so far%s\n",
            c->n_nfa, c->n_cls, c->n_kept, ns, gl_failed(c) ? " (budget exceeded)" : "");
    for (uint32_t r = 0; r < c->n_kept; r++)
        fprintf(f, "  rule %s: start %u\n", c->rule_name[r], c->rule_start[r]);
    for (uint32_t s = 1; s < ns; s++) {
        gl_chunk *ch = atomic_load_explicit(&c->chunks[s / GL_CH], memory_order_acquire);
        uint32_t i = s % GL_CH;
        fprintf(f, "  %u%s:", s, ch->accept[i] ? " (accept)" : "");
        if (!atomic_load_explicit(&ch->ready[i], memory_order_acquire)) {
            fprintf(f, " (not expanded)\n");
            continue;
        }
        const uint32_t *row = ch->rows + (size_t)i * c->n_cls;
        for (uint32_t col = 0; col < c->n_cls; col++)
            if (row[col] != GDFA_DEAD) fprintf(f, " c%u->%u", col, row[col]);
        for (uint32_t j = 0; j < ch->ncall[i]; j++)
            fprintf(f, " call %u->%u", ch->calls[i][j].start, ch->calls[i][j].ret);
        fprintf(f, "\n");
    }
}
