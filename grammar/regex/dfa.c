/* dfa.c — byte NFA -> minimized DFA over byte classes.
 *
 * Layering: grammar/regex (regex.h), after nfa.c; the DFA it returns is
 * what masks (grammar/mask) and matchers (grammar/matcher.c) run on.
 * Building is single-threaded under a compile context; the result is
 * immutable and shared.
 *
 * The idea in two paragraphs. Bytes that no NFA edge tells apart behave
 * identically, so the alphabet is first cut into byte classes at every
 * edge boundary (a digit-only regex has 3 classes, not 256), and the
 * subset construction works on classes. A DFA state is the set of NFA
 * states reachable after some input; only the states that consume bytes
 * (plus one "accepting" bit) are kept in its key, so epsilon-only states
 * never make two equivalent subsets look different. Anchors: BOL edges
 * are followed only in the start state's closure; crossing an EOL edge
 * sets a flag on the NFA state after which it may no longer consume, so
 * it can only contribute acceptance: ^ and $ anywhere get exactly PCRE's
 * anchored full-match meaning.
 *
 * The raw DFA is then trimmed (states that cannot reach acceptance all
 * become the dead state 0, so a mask walk can prune at the first dead
 * byte) and minimized by Hopcroft's partition refinement, O(k n log n)
 * for n states and k classes; finally, classes whose columns became equal
 * are merged and the states renumbered breadth-first from the start for
 * locality. Budgets: max_dfa_states caps the subset construction (the
 * exponential case), every table is charged to the memory budget, and
 * the clock is polled in each loop.
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/regex/regex.h"

/* ---- subset construction ---- */

typedef struct sc {
    gcc *cc;
    const gnfa *nfa;
    uint32_t n_nfa;
    /* NFA in CSR form */
    uint32_t *byte_off; /* [n_nfa + 1] into bedges */
    gnfa_edge *bedges;
    uint32_t *eps_off; /* [n_nfa + 1] into eedges */
    gnfa_edge *eedges;
    /* byte classes */
    uint8_t cls[256];
    uint32_t n_cls;
    /* DFA states: key = [accept, sorted consuming NFA states...] */
    uint32_t *pool;
    uint32_t pool_n, pool_cap;
    uint32_t *koff, *klen; /* [n_d] */
    uint32_t koff_cap, klen_cap;
    uint32_t n_d;
    uint32_t *trans; /* [n_d * n_cls] */
    uint32_t trans_cap;
    /* hash of keys -> DFA id */
    uint32_t *ht;
    uint32_t ht_cap;
    /* scratch */
    uint32_t *stack, *mark, *out, *bucket_off, *bucket;
    uint32_t gen;
    uint32_t bucket_cap;
} sc;

static void *charged_calloc(gcc *cc, size_t n, size_t es) {
    size_t bytes;
    if (tr_mul_overflow_size(n ? n : 1, es, &bytes)) {
        tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "table size overflows");
        return NULL;
    }
    if (tr_gcc_charge(cc, bytes)) return NULL;
    void *p = calloc(1, bytes);
    if (!p) {
        tr_gcc_refund(cc, bytes);
        tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory while compiling");
    }
    return p;
}

static void charged_free(gcc *cc, void *p, size_t n, size_t es) {
    if (!p) return;
    tr_gcc_refund(cc, (n ? n : 1) * es);
    free(p);
}

static tr_status build_csr(sc *s) {
    const gnfa *n = s->nfa;
    uint32_t N = n->n_states;
    s->byte_off = charged_calloc(s->cc, N + 1, sizeof(uint32_t));
    s->eps_off = charged_calloc(s->cc, N + 1, sizeof(uint32_t));
    s->bedges = charged_calloc(s->cc, n->n_edges, sizeof(gnfa_edge));
    s->eedges = charged_calloc(s->cc, n->n_edges, sizeof(gnfa_edge));
    if (!s->byte_off || !s->eps_off || !s->bedges || !s->eedges)
        return s->cc->err;
    bool bnd[257] = {false};
    for (uint32_t q = 0; q < N; q++) {
        for (uint32_t e = n->head[q]; e != UINT32_MAX; e = n->edges[e].next) {
            if (n->edges[e].kind == GNFA_BYTE) {
                s->byte_off[q + 1]++;
                bnd[n->edges[e].lo] = true;
                bnd[n->edges[e].hi + 1] = true;
            } else {
                s->eps_off[q + 1]++;
            }
        }
    }
    for (uint32_t q = 0; q < N; q++) {
        s->byte_off[q + 1] += s->byte_off[q];
        s->eps_off[q + 1] += s->eps_off[q];
    }
    for (uint32_t q = 0; q < N; q++) {
        uint32_t bi = s->byte_off[q], ei = s->eps_off[q];
        for (uint32_t e = n->head[q]; e != UINT32_MAX; e = n->edges[e].next) {
            if (n->edges[e].kind == GNFA_BYTE)
                s->bedges[bi++] = n->edges[e];
            else
                s->eedges[ei++] = n->edges[e];
        }
    }
    uint32_t c = 0;
    for (int b = 0; b < 256; b++) {
        if (b > 0 && bnd[b]) c++;
        s->cls[b] = (uint8_t)c;
    }
    s->n_cls = c + 1;
    return TR_OK;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void sort_u32(uint32_t *a, uint32_t n) {
    if (n < 16) { /* insertion sort: most sets are tiny */
        for (uint32_t i = 1; i < n; i++) {
            uint32_t v = a[i], j = i;
            while (j > 0 && a[j - 1] > v) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = v;
        }
        return;
    }
    qsort(a, n, sizeof *a, cmp_u32);
}

/* Epsilon closure of the seeds stack[0..n_seeds) (NFA ids, flag 0).
 * Writes the key [accept, consuming states sorted] to s->out; returns its
 * length. Elements are (state << 1 | after_eol). */
static uint32_t closure(sc *s, uint32_t n_seeds, bool at_start) {
    uint32_t gen = ++s->gen;
    uint32_t sp = 0, no = 1;
    bool acc = false;
    for (uint32_t i = 0; i < n_seeds; i++) {
        uint32_t el = s->stack[i] << 1;
        if (s->mark[el] != gen) {
            s->mark[el] = gen;
            s->stack[sp++] = el;
        }
    }
    while (sp) {
        uint32_t el = s->stack[--sp];
        uint32_t q = el >> 1, f = el & 1;
        if (q == s->nfa->final) acc = true;
        if (!f && s->byte_off[q + 1] > s->byte_off[q]) s->out[no++] = q;
        for (uint32_t i = s->eps_off[q]; i < s->eps_off[q + 1]; i++) {
            const gnfa_edge *e = &s->eedges[i];
            uint32_t nf = f;
            if (e->kind == GNFA_BOL && !at_start) continue;
            if (e->kind == GNFA_EOL) nf = 1;
            uint32_t ne = e->to << 1 | nf;
            if (s->mark[ne] != gen) {
                s->mark[ne] = gen;
                s->stack[sp++] = ne;
            }
        }
    }
    s->out[0] = acc;
    sort_u32(s->out + 1, no - 1);
    return no;
}

static tr_status ht_rehash(sc *s, uint32_t nc) {
    uint32_t *t = charged_calloc(s->cc, nc, sizeof *t);
    if (!t) return s->cc->err;
    for (uint32_t d = 0; d < s->n_d; d++) {
        uint32_t j = (uint32_t)gdfa_key_hash(s->pool + s->koff[d], s->klen[d]) &
                     (nc - 1);
        while (t[j]) j = (j + 1) & (nc - 1);
        t[j] = d + 1;
    }
    charged_free(s->cc, s->ht, s->ht_cap, sizeof *s->ht);
    s->ht = t;
    s->ht_cap = nc;
    return TR_OK;
}

/* Finds or adds the DFA state with key out[0..n). */
static tr_status intern(sc *s, uint32_t n, uint32_t *id) {
    const uint32_t *k = s->out;
    uint64_t h = gdfa_key_hash(k, n);
    uint32_t j = (uint32_t)h & (s->ht_cap - 1);
    while (s->ht[j]) {
        uint32_t d = s->ht[j] - 1;
        if (s->klen[d] == n &&
            memcmp(s->pool + s->koff[d], k, n * sizeof *k) == 0) {
            *id = d;
            return TR_OK;
        }
        j = (j + 1) & (s->ht_cap - 1);
    }
    if (s->n_d >= s->cc->lim.max_dfa_states)
        return tr_gcc_fail(s->cc, TR_ERR_LIMIT, 0,
                        "DFA larger than max_dfa_states = %u (the pattern's "
                        "automaton blows up; simplify it)",
                        s->cc->lim.max_dfa_states);
    uint32_t d = s->n_d;
    tr_status st = tr_gcc_grow(s->cc, (void **)&s->pool, &s->pool_cap,
                            sizeof *s->pool, (uint64_t)s->pool_n + n);
    if (!st) st = tr_gcc_grow(s->cc, (void **)&s->koff, &s->koff_cap,
                           sizeof *s->koff, (uint64_t)d + 1);
    if (!st) st = tr_gcc_grow(s->cc, (void **)&s->klen, &s->klen_cap,
                           sizeof *s->klen, (uint64_t)d + 1);
    if (!st) st = tr_gcc_grow(s->cc, (void **)&s->trans, &s->trans_cap,
                           sizeof *s->trans, ((uint64_t)d + 1) * s->n_cls);
    if (st) return st;
    memcpy(s->pool + s->pool_n, k, n * sizeof *k);
    s->koff[d] = s->pool_n;
    s->klen[d] = n;
    s->pool_n += n;
    s->n_d++;
    s->ht[j] = d + 1;
    if (s->n_d * 2 > s->ht_cap) {
        st = ht_rehash(s, s->ht_cap * 2);
        if (st) return st;
    }
    *id = d;
    return TR_OK;
}

static tr_status subset(sc *s) {
    uint32_t N = s->n_nfa;
    s->stack = charged_calloc(s->cc, (size_t)2 * N + 1, sizeof(uint32_t));
    s->mark = charged_calloc(s->cc, (size_t)2 * N + 1, sizeof(uint32_t));
    s->out = charged_calloc(s->cc, (size_t)N + 2, sizeof(uint32_t));
    s->bucket_off = charged_calloc(s->cc, s->n_cls + 1, sizeof(uint32_t));
    if (!s->stack || !s->mark || !s->out || !s->bucket_off) return s->cc->err;
    tr_status st = ht_rehash(s, 1024);
    if (st) return st;
    uint32_t id;
    /* state 0: the empty set (dead) */
    s->out[0] = 0;
    st = intern(s, 1, &id);
    if (st) return st;
    s->stack[0] = s->nfa->start;
    uint32_t n = closure(s, 1, true);
    st = intern(s, n, &id); /* the start state: id 1 (or 0 if empty) */
    if (st) return st;
    struct {
        uint64_t h;
        uint32_t off, len, t;
    } memo[512]; /* len 0: empty slot */
    uint16_t memo_used[256];
    memset(memo, 0, sizeof memo);
    for (uint32_t d = 0; d < s->n_d; d++) {
        st = tr_gcc_poll_time(s->cc);
        if (st) return st;
        /* bucket the targets of the key's byte edges by class */
        uint32_t *bo = s->bucket_off;
        memset(bo, 0, (s->n_cls + 1) * sizeof *bo);
        uint32_t klen = s->klen[d];
        uint64_t total = 0;
        for (uint32_t i = 1; i < klen; i++) {
            uint32_t q = s->pool[s->koff[d] + i];
            for (uint32_t e = s->byte_off[q]; e < s->byte_off[q + 1]; e++) {
                uint32_t c0 = s->cls[s->bedges[e].lo],
                         c1 = s->cls[s->bedges[e].hi];
                for (uint32_t c = c0; c <= c1; c++) bo[c + 1]++;
                total += c1 - c0 + 1;
            }
        }
        if (total > s->bucket_cap) {
            uint32_t cap = s->bucket_cap;
            st = tr_gcc_grow(s->cc, (void **)&s->bucket, &cap, sizeof *s->bucket,
                          total);
            if (st) return st;
            s->bucket_cap = cap;
        }
        for (uint32_t c = 0; c < s->n_cls; c++) bo[c + 1] += bo[c];
        /* fill (bo[c] advances; restored below by subtracting counts) */
        for (uint32_t i = 1; i < klen; i++) {
            uint32_t q = s->pool[s->koff[d] + i];
            for (uint32_t e = s->byte_off[q]; e < s->byte_off[q + 1]; e++) {
                uint32_t c0 = s->cls[s->bedges[e].lo],
                         c1 = s->cls[s->bedges[e].hi];
                for (uint32_t c = c0; c <= c1; c++)
                    s->bucket[bo[c]++] = s->bedges[e].to;
            }
        }
        /* now bo[c] is the end of bucket c, bo[c-1] (or 0) its start.
         * Many classes of one state have the same targets (all the UTF-8
         * continuation bytes, say): a per-state memo keyed by the sorted
         * target list computes each distinct closure once. */
        uint32_t start = 0;
        uint32_t n_memo = 0;
        for (uint32_t c = 0; c < s->n_cls; c++) {
            uint32_t end = bo[c];
            uint32_t t = 0;
            if (end > start) {
                uint32_t *seg = s->bucket + start;
                uint32_t len = end - start;
                sort_u32(seg, len);
                uint32_t w = 1;
                for (uint32_t i = 1; i < len; i++)
                    if (seg[i] != seg[w - 1]) seg[w++] = seg[i];
                len = w;
                uint64_t h = gdfa_key_hash(seg, len);
                uint32_t j = (uint32_t)h & 511;
                bool found = false;
                while (memo[j].len != 0) {
                    if (memo[j].h == h && memo[j].len == len &&
                        memcmp(s->bucket + memo[j].off, seg,
                               len * sizeof *seg) == 0) {
                        t = memo[j].t;
                        found = true;
                        break;
                    }
                    j = (j + 1) & 511;
                }
                if (!found) {
                    memcpy(s->stack, seg, len * sizeof *s->stack);
                    n = closure(s, len, false);
                    st = intern(s, n, &t);
                    if (st) return st;
                    memo[j].h = h;
                    memo[j].off = start;
                    memo[j].len = len;
                    memo[j].t = t;
                    memo_used[n_memo++] = (uint16_t)j;
                }
            }
            s->trans[(size_t)d * s->n_cls + c] = t;
            start = end;
        }
        for (uint32_t i = 0; i < n_memo; i++) memo[memo_used[i]].len = 0;
    }
    return TR_OK;
}

/* ---- trimming and minimization ---- */

typedef struct mz {
    gcc *cc;
    uint32_t n, k;        /* states (0 = dead), classes */
    const uint32_t *T;    /* [n * k] */
    uint32_t *pin_off;    /* [n + 1]: the live transitions into t are
                             (pin_c, pin_p)[pin_off[t] .. pin_off[t + 1]) */
    uint32_t *pin_c, *pin_p; /* [n_edges] class, predecessor */
    uint32_t n_edges;
    uint32_t *chead;      /* [k] gathered predecessors per class (lists
                             through gnext), UINT32_MAX: none */
    uint32_t *gnext, *gp; /* [n_edges] */
    uint32_t *tcls;       /* [k] classes gathered for the current splitter */
    uint32_t *elems, *loc, *blk;
    uint32_t *bstart, *bend, *bmark;
    uint8_t *inw;
    uint32_t *work, n_work;
    uint32_t n_blocks;
    uint32_t *touched, *splitter;
} mz;

static void mark_state(mz *m, uint32_t s, uint32_t *n_touched) {
    uint32_t b = m->blk[s];
    uint32_t i = m->loc[s], j = m->bstart[b] + m->bmark[b];
    if (i < j) return; /* already marked */
    uint32_t o = m->elems[j];
    m->elems[j] = s;
    m->loc[s] = j;
    m->elems[i] = o;
    m->loc[o] = i;
    if (m->bmark[b]++ == 0) m->touched[(*n_touched)++] = b;
}

static void push_work(mz *m, uint32_t b) {
    if (m->inw[b]) return;
    m->inw[b] = 1;
    m->work[m->n_work++] = b;
}

static tr_status hopcroft(mz *m, const uint8_t *accept) {
    uint32_t n = m->n, k = m->k;
    gcc *cc = m->cc;
    /* Inverse transitions, CSR per target state, leaving out every
     * transition into the dead state 0: most transitions of a UTF-8
     * automaton go there, and the dead state is its own block from the
     * start and never a splitter, so those lists would only be walked for
     * nothing. (Hopcroft stays correct on the resulting partial DFA
     * because every initial block is queued.) Per splitter, the
     * predecessors of its states are gathered once and grouped by class:
     * the work is the live transitions into the splitter, not classes x
     * splitter states (a scan of every class for every splitter state was
     * most of compiling automata of a few thousand states and ~50
     * classes). */
    m->pin_off = charged_calloc(cc, (size_t)n + 1, sizeof(uint32_t));
    m->elems = charged_calloc(cc, n, sizeof(uint32_t));
    m->loc = charged_calloc(cc, n, sizeof(uint32_t));
    m->blk = charged_calloc(cc, n, sizeof(uint32_t));
    m->bstart = charged_calloc(cc, n, sizeof(uint32_t));
    m->bend = charged_calloc(cc, n, sizeof(uint32_t));
    m->bmark = charged_calloc(cc, n, sizeof(uint32_t));
    m->inw = charged_calloc(cc, n, 1);
    m->work = charged_calloc(cc, n, sizeof(uint32_t));
    m->touched = charged_calloc(cc, n, sizeof(uint32_t));
    m->splitter = charged_calloc(cc, n, sizeof(uint32_t));
    m->chead = charged_calloc(cc, k, sizeof(uint32_t));
    m->tcls = charged_calloc(cc, k, sizeof(uint32_t));
    if (!m->pin_off || !m->elems || !m->loc || !m->blk || !m->bstart ||
        !m->bend || !m->bmark || !m->inw || !m->work || !m->touched ||
        !m->splitter || !m->chead || !m->tcls)
        return cc->err;
    uint32_t *io = m->pin_off;
    for (uint32_t s = 1; s < n; s++) {
        const uint32_t *row = m->T + (size_t)s * k;
        for (uint32_t c = 0; c < k; c++)
            if (row[c]) io[row[c] + 1]++;
    }
    for (uint32_t t = 0; t < n; t++) io[t + 1] += io[t];
    m->n_edges = io[n];
    m->pin_c = charged_calloc(cc, m->n_edges, sizeof(uint32_t));
    m->pin_p = charged_calloc(cc, m->n_edges, sizeof(uint32_t));
    m->gnext = charged_calloc(cc, m->n_edges, sizeof(uint32_t));
    m->gp = charged_calloc(cc, m->n_edges, sizeof(uint32_t));
    if (!m->pin_c || !m->pin_p || !m->gnext || !m->gp) return cc->err;
    for (uint32_t s = 1; s < n; s++) { /* fill; io[t] walks to io[t + 1] */
        const uint32_t *row = m->T + (size_t)s * k;
        for (uint32_t c = 0; c < k; c++) {
            uint32_t t = row[c];
            if (!t) continue;
            uint32_t e = io[t]++;
            m->pin_c[e] = c;
            m->pin_p[e] = s;
        }
    }
    for (uint32_t t = n; t > 0; t--) io[t] = io[t - 1];
    io[0] = 0;
    for (uint32_t c = 0; c < k; c++) m->chead[c] = UINT32_MAX;
    /* initial partition: {dead} (never queued), non-accepting, accepting */
    m->elems[0] = 0;
    uint32_t nf = 1;
    for (uint32_t s = 1; s < n; s++)
        if (!accept[s]) m->elems[nf++] = s;
    uint32_t na = nf;
    for (uint32_t s = 1; s < n; s++)
        if (accept[s]) m->elems[na++] = s;
    m->bstart[0] = 0;
    m->bend[0] = 1;
    m->n_blocks = 1;
    if (nf > 1) {
        m->bstart[1] = 1;
        m->bend[1] = nf;
        m->n_blocks = 2;
    }
    if (na > nf) {
        m->bstart[m->n_blocks] = nf;
        m->bend[m->n_blocks] = na;
        m->n_blocks++;
    }
    for (uint32_t b = 0; b < m->n_blocks; b++) {
        for (uint32_t i = m->bstart[b]; i < m->bend[b]; i++) {
            m->loc[m->elems[i]] = i;
            m->blk[m->elems[i]] = b;
        }
        if (b > 0) push_work(m, b);
    }
    while (m->n_work) {
        tr_status st = tr_gcc_poll_time(cc);
        if (st) return st;
        uint32_t a = m->work[--m->n_work];
        m->inw[a] = 0;
        uint32_t na_ = m->bend[a] - m->bstart[a];
        memcpy(m->splitter, m->elems + m->bstart[a], na_ * sizeof(uint32_t));
        uint32_t ng = 0, nt = 0;
        for (uint32_t i = 0; i < na_; i++) {
            uint32_t t = m->splitter[i];
            for (uint32_t e = m->pin_off[t]; e < m->pin_off[t + 1]; e++) {
                uint32_t c = m->pin_c[e];
                if (m->chead[c] == UINT32_MAX) m->tcls[nt++] = c;
                m->gnext[ng] = m->chead[c];
                m->gp[ng] = m->pin_p[e];
                m->chead[c] = ng++;
            }
        }
        for (uint32_t ci = 0; ci < nt; ci++) {
            uint32_t c = m->tcls[ci];
            uint32_t n_touched = 0;
            for (uint32_t g = m->chead[c]; g != UINT32_MAX; g = m->gnext[g])
                mark_state(m, m->gp[g], &n_touched);
            m->chead[c] = UINT32_MAX;
            for (uint32_t i = 0; i < n_touched; i++) {
                uint32_t b = m->touched[i];
                uint32_t size = m->bend[b] - m->bstart[b];
                uint32_t mk = m->bmark[b];
                m->bmark[b] = 0;
                if (mk == size) continue;
                uint32_t nb = m->n_blocks++;
                m->bstart[nb] = m->bstart[b];
                m->bend[nb] = m->bstart[b] + mk;
                m->bstart[b] = m->bend[nb];
                for (uint32_t j = m->bstart[nb]; j < m->bend[nb]; j++)
                    m->blk[m->elems[j]] = nb;
                if (m->inw[b])
                    push_work(m, nb);
                else
                    push_work(m, mk < size - mk ? nb : b);
            }
        }
    }
    return TR_OK;
}

static void mz_free(mz *m) {
    gcc *cc = m->cc;
    size_t n = m->n, k = m->k;
    charged_free(cc, m->pin_off, n + 1, sizeof(uint32_t));
    charged_free(cc, m->pin_c, m->n_edges, sizeof(uint32_t));
    charged_free(cc, m->pin_p, m->n_edges, sizeof(uint32_t));
    charged_free(cc, m->gnext, m->n_edges, sizeof(uint32_t));
    charged_free(cc, m->gp, m->n_edges, sizeof(uint32_t));
    charged_free(cc, m->chead, k, sizeof(uint32_t));
    charged_free(cc, m->tcls, k, sizeof(uint32_t));
    charged_free(cc, m->elems, n, sizeof(uint32_t));
    charged_free(cc, m->loc, n, sizeof(uint32_t));
    charged_free(cc, m->blk, n, sizeof(uint32_t));
    charged_free(cc, m->bstart, n, sizeof(uint32_t));
    charged_free(cc, m->bend, n, sizeof(uint32_t));
    charged_free(cc, m->bmark, n, sizeof(uint32_t));
    charged_free(cc, m->inw, n, 1);
    charged_free(cc, m->work, n, sizeof(uint32_t));
    charged_free(cc, m->touched, n, sizeof(uint32_t));
    charged_free(cc, m->splitter, n, sizeof(uint32_t));
}

/* Trim + minimize + renumber + merge classes: s->trans (raw) -> out. */
static tr_status finish(sc *s, gdfa *out) {
    gcc *cc = s->cc;
    uint32_t n = s->n_d, k = s->n_cls;
    tr_status st = TR_OK;
    /* liveness: reverse reachability from accepting states */
    uint32_t *roff = charged_calloc(cc, (size_t)n + 1, sizeof(uint32_t));
    uint32_t *radj = charged_calloc(cc, (size_t)n * k, sizeof(uint32_t));
    uint8_t *live = charged_calloc(cc, n, 1);
    uint32_t *queue = charged_calloc(cc, n, sizeof(uint32_t));
    uint32_t *newid = charged_calloc(cc, n, sizeof(uint32_t));
    uint32_t *T = NULL;
    uint8_t *acc = NULL;
    uint32_t nl = 1;
    mz m = {.cc = cc};
    if (!roff || !radj || !live || !queue || !newid) {
        st = cc->err;
        goto done;
    }
    /* reverse edges, except those into raw state 0 (the empty set, never
     * live): most transitions go there and would only cost time */
    for (size_t i = 0; i < (size_t)n * k; i++)
        if (s->trans[i]) roff[s->trans[i] + 1]++;
    for (uint32_t i = 0; i < n; i++) roff[i + 1] += roff[i];
    for (uint32_t d = 0; d < n; d++)
        for (uint32_t c = 0; c < k; c++) {
            uint32_t t = s->trans[(size_t)d * k + c];
            if (t) radj[roff[t]++] = d;
        }
    for (uint32_t i = n; i > 0; i--) roff[i] = roff[i - 1];
    roff[0] = 0;
    uint32_t qh = 0, qt = 0;
    for (uint32_t d = 0; d < n; d++)
        if (s->pool[s->koff[d]]) {
            live[d] = 1;
            queue[qt++] = d;
        }
    while (qh < qt) {
        uint32_t t = queue[qh++];
        for (uint32_t j = roff[t]; j < roff[t + 1]; j++) {
            uint32_t p = radj[j];
            if (!live[p]) {
                live[p] = 1;
                queue[qt++] = p;
            }
        }
    }
    /* compact: dead = 0, live states 1.. */
    for (uint32_t d = 0; d < n; d++) newid[d] = live[d] ? nl++ : 0;
    T = charged_calloc(cc, (size_t)nl * k, sizeof(uint32_t));
    acc = charged_calloc(cc, nl, 1);
    if (!T || !acc) {
        st = cc->err;
        goto done;
    }
    for (uint32_t d = 0; d < n; d++) {
        if (!live[d]) continue;
        uint32_t i = newid[d];
        acc[i] = (uint8_t)s->pool[s->koff[d]];
        for (uint32_t c = 0; c < k; c++)
            T[(size_t)i * k + c] = newid[s->trans[(size_t)d * k + c]];
    }
    uint32_t start = newid[1 < n ? 1 : 0];
    m.n = nl;
    m.k = k;
    m.T = T;
    st = hopcroft(&m, acc);
    if (st) goto done;
    /* renumber blocks: dead's block -> 0, then BFS from start's block */
    uint32_t nb = m.n_blocks;
    uint32_t *bid = newid; /* reuse: n >= nb */
    for (uint32_t b = 0; b < nb; b++) bid[b] = UINT32_MAX;
    uint32_t next = 0;
    bid[m.blk[0]] = next++;
    qh = qt = 0;
    uint32_t sb = m.blk[start];
    if (bid[sb] == UINT32_MAX) {
        bid[sb] = next++;
        queue[qt++] = sb;
    }
    while (qh < qt) {
        uint32_t b = queue[qh++];
        uint32_t rep = m.elems[m.bstart[b]];
        for (uint32_t c = 0; c < k; c++) {
            uint32_t tb = m.blk[T[(size_t)rep * k + c]];
            if (bid[tb] == UINT32_MAX) {
                bid[tb] = next++;
                queue[qt++] = tb;
            }
        }
    }
    /* blocks unreachable from start cannot exist (every raw state was
     * reached from the start), except the dead block */
    uint32_t ns = next;
    /* merge equal columns into final classes (hash first, so that this
     * is O(k * blocks), not O(k^2 * blocks)) */
    uint32_t colmap[256];
    uint32_t n_final = 0;
    uint32_t rep_of[256];
    uint64_t colh[256];
    for (uint32_t c = 0; c < k; c++) colh[c] = GHASH_SEED;
    for (uint32_t b = 0; b < nb; b++) { /* row by row: T is row-major */
        const uint32_t *row = T + (size_t)m.elems[m.bstart[b]] * k;
        for (uint32_t c = 0; c < k; c++) colh[c] = tr_fnv1a_word(colh[c], m.blk[row[c]]);
    }
    for (uint32_t c = 0; c < k; c++) {
        uint64_t h = colh[c];
        uint32_t found = UINT32_MAX;
        for (uint32_t f = 0; f < n_final && found == UINT32_MAX; f++) {
            uint32_t c2 = rep_of[f];
            if (colh[c2] != h) continue;
            bool same = true;
            for (uint32_t b = 0; b < nb && same; b++) {
                uint32_t r = m.elems[m.bstart[b]];
                if (m.blk[T[(size_t)r * k + c]] != m.blk[T[(size_t)r * k + c2]])
                    same = false;
            }
            if (same) found = f;
        }
        if (found == UINT32_MAX) {
            found = n_final;
            rep_of[n_final++] = c;
        }
        colmap[c] = found;
    }
    st = tr_gcc_poll_time(cc);
    if (st) goto done;
    memset(out, 0, sizeof *out);
    out->n_states = ns;
    out->n_classes = n_final;
    out->start = bid[sb];
    out->raw_states = n;
    for (int b = 0; b < 256; b++) out->cls[b] = (uint8_t)colmap[s->cls[b]];
    size_t tb;
    if (tr_mul_overflow_size(ns, n_final, &tb) ||
        tr_gcc_charge(cc, tb * 8 + (size_t)ns * 56)) {
        st = tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "DFA table too large");
        goto done;
    }
    out->trans = calloc(tb, sizeof(uint32_t));
    out->rows = calloc(tb, sizeof(uint32_t));
    out->accept = calloc(ns, 1);
    out->forced = calloc(ns, sizeof(int16_t));
    out->can_cont = calloc(ns, 1);
    out->aloop = calloc(ns, sizeof *out->aloop);
    out->ubits = calloc(ns, sizeof *out->ubits);
    out->dbits = calloc(ns, sizeof *out->dbits);
    out->usucc = calloc(ns, sizeof *out->usucc);
    if (!out->trans || !out->rows || !out->accept || !out->forced ||
        !out->can_cont || !out->aloop || !out->ubits || !out->dbits ||
        !out->usucc) {
        tr_dfa_free(out);
        st = tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory while compiling");
        goto done;
    }
    for (uint32_t b = 0; b < nb; b++) {
        if (bid[b] == UINT32_MAX) continue;
        uint32_t r = m.elems[m.bstart[b]];
        uint32_t i = bid[b];
        out->accept[i] = acc[r];
        for (uint32_t f = 0; f < n_final; f++)
            out->trans[(size_t)i * n_final + f] =
                bid[m.blk[T[(size_t)r * k + rep_of[f]]]];
    }
    for (size_t i = 0; i < tb; i++) out->rows[i] = out->trans[i] * n_final;
    /* ASCII self-loops and the row -> state multiplier (grammar/mask/mask.c) */
    out->row_magic = ((1ull << 40) + n_final - 1) / n_final;
    /* ASCII bytes per class */
    uint32_t ccount[256] = {0};
    for (int b = 0; b < 128; b++) ccount[out->cls[b]]++;
    for (uint32_t i = 1; i < ns; i++) {
        /* self-loops, and the most popular other live successor: counted
         * repetition ([a-z]{1,20}) moves every letter to the same next
         * state, which the walk follows as a chain. Counted per class
         * (a per-byte count made this the slowest part of compiling
         * \p{L}+: 95 classes x 128 bytes per state). */
        uint32_t best = 0, best_n = 0;
        const uint32_t *row = out->trans + (size_t)i * n_final;
        /* ASCII bytes per distinct target, targets in first-seen order
         * (a state has few distinct targets; a count per pair of classes
         * was quadratic in the classes) */
        uint32_t tg[256], cn[256], n_tg = 0;
        for (uint32_t f = 0; f < n_final; f++) {
            uint32_t t = row[f];
            if (!ccount[f] || t == GDFA_DEAD || t == i) continue;
            uint32_t j = 0;
            while (j < n_tg && tg[j] != t) j++;
            if (j == n_tg) tg[n_tg] = t, cn[n_tg++] = 0;
            cn[j] += ccount[f];
        }
        for (uint32_t j = 0; j < n_tg; j++)
            if (cn[j] > best_n) best_n = cn[j], best = tg[j];
        out->usucc[i] = best;
        for (int b = 0; b < 128; b++) {
            uint32_t t = out->trans[(size_t)i * n_final + out->cls[b]];
            if (t == i) out->aloop[i][b >> 6] |= 1ull << (b & 63);
            if (t == GDFA_DEAD) out->dbits[i][b >> 6] |= 1ull << (b & 63);
            if (best && t == best) out->ubits[i][b >> 6] |= 1ull << (b & 63);
        }
    }
    /* per state: can it continue, and is its next byte forced? */
    uint32_t cls_size[256] = {0};
    uint8_t cls_byte[256] = {0};
    for (int b = 0; b < 256; b++) {
        cls_size[out->cls[b]]++;
        cls_byte[out->cls[b]] = (uint8_t)b;
    }
    for (uint32_t i = 0; i < ns; i++) {
        uint32_t live_bytes = 0;
        int last = -1;
        for (uint32_t f = 0; f < n_final; f++) {
            if (out->trans[(size_t)i * n_final + f] != GDFA_DEAD) {
                live_bytes += cls_size[f];
                last = cls_byte[f];
            }
        }
        out->can_cont[i] = live_bytes > 0;
        out->forced[i] =
            (int16_t)((live_bytes == 1 && !out->accept[i]) ? last : -1);
    }
    tr_gcc_refund(cc, tb * 8 + (size_t)ns * 56); /* now owned by the grammar */
done:
    mz_free(&m);
    charged_free(cc, roff, (size_t)n + 1, sizeof(uint32_t));
    charged_free(cc, radj, (size_t)n * k, sizeof(uint32_t));
    charged_free(cc, live, n, 1);
    charged_free(cc, queue, n, sizeof(uint32_t));
    charged_free(cc, newid, n, sizeof(uint32_t));
    charged_free(cc, T, (size_t)nl * k, sizeof(uint32_t));
    charged_free(cc, acc, nl, 1);
    return st;
}

tr_status tr_dfa_build(gcc *cc, const gnfa *nfa, gdfa *out) {
    sc s = {.cc = cc, .nfa = nfa, .n_nfa = nfa->n_states};
    tr_status st = build_csr(&s);
    if (!st) st = subset(&s);
    if (!st) st = finish(&s, out);
    uint32_t N = nfa->n_states;
    charged_free(cc, s.byte_off, (size_t)N + 1, sizeof(uint32_t));
    charged_free(cc, s.eps_off, (size_t)N + 1, sizeof(uint32_t));
    charged_free(cc, s.bedges, nfa->n_edges, sizeof(gnfa_edge));
    charged_free(cc, s.eedges, nfa->n_edges, sizeof(gnfa_edge));
    charged_free(cc, s.stack, (size_t)2 * N + 1, sizeof(uint32_t));
    charged_free(cc, s.mark, (size_t)2 * N + 1, sizeof(uint32_t));
    charged_free(cc, s.out, (size_t)N + 2, sizeof(uint32_t));
    charged_free(cc, s.bucket_off, (size_t)s.n_cls + 1, sizeof(uint32_t));
    charged_free(cc, s.ht, s.ht_cap, sizeof(uint32_t));
    charged_free(cc, s.pool, s.pool_cap, sizeof(uint32_t));
    charged_free(cc, s.koff, s.koff_cap, sizeof(uint32_t));
    charged_free(cc, s.klen, s.klen_cap, sizeof(uint32_t));
    charged_free(cc, s.trans, s.trans_cap, sizeof(uint32_t));
    charged_free(cc, s.bucket, s.bucket_cap, sizeof(uint32_t));
    return st;
}

void tr_dfa_free(gdfa *d) {
    free(d->trans);
    free(d->rows);
    free(d->accept);
    free(d->forced);
    free(d->can_cont);
    free(d->aloop);
    free(d->ubits);
    free(d->dbits);
    free(d->usucc);
    memset(d, 0, sizeof *d);
}

size_t tr_dfa_bytes(const gdfa *d) {
    return (size_t)d->n_states * d->n_classes * 2 * sizeof(uint32_t) +
           (size_t)d->n_states * (1 + sizeof(int16_t) + 1 + 16 + 16 + 16 + 4);
}

uint32_t tr_dfa_run(const gdfa *d, uint32_t s, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n && s != GDFA_DEAD; i++) s = gdfa_step(d, s, p[i]);
    return s;
}

tr_status tr_dfa_check(const gdfa *d) {
    if (d->n_states < 1 || d->n_classes < 1 || d->n_classes > 256 ||
        d->start >= d->n_states)
        return TR_ERR_INTERNAL;
    for (int b = 0; b < 256; b++)
        if (d->cls[b] >= d->n_classes) return TR_ERR_INTERNAL;
    /* every class is used by some byte */
    uint8_t used[256] = {0};
    for (int b = 0; b < 256; b++) used[d->cls[b]] = 1;
    for (uint32_t c = 0; c < d->n_classes; c++)
        if (!used[c]) return TR_ERR_INTERNAL;
    size_t nk = (size_t)d->n_states * d->n_classes;
    for (size_t i = 0; i < nk; i++)
        if (d->trans[i] >= d->n_states ||
            d->rows[i] != d->trans[i] * d->n_classes)
            return TR_ERR_INTERNAL;
    /* the dead state: absorbing, not accepting */
    if (d->accept[GDFA_DEAD] || d->can_cont[GDFA_DEAD]) return TR_ERR_INTERNAL;
    for (uint32_t c = 0; c < d->n_classes; c++)
        if (d->trans[c] != GDFA_DEAD) return TR_ERR_INTERNAL;
    /* trimmed: every other state reaches an accepting state (fixpoint) */
    uint8_t *live = calloc(d->n_states, 1);
    if (!live) return TR_ERR_NOMEM;
    bool changed = true;
    for (uint32_t s = 0; s < d->n_states; s++) live[s] = d->accept[s];
    while (changed) {
        changed = false;
        for (uint32_t s = 1; s < d->n_states; s++) {
            if (live[s]) continue;
            for (uint32_t c = 0; c < d->n_classes; c++)
                if (live[d->trans[(size_t)s * d->n_classes + c]]) {
                    live[s] = 1;
                    changed = true;
                    break;
                }
        }
    }
    tr_status st = TR_OK;
    for (uint32_t s = 1; s < d->n_states; s++) {
        if (!live[s]) st = TR_ERR_INTERNAL;
        /* forced / can_cont agree with the table */
        int n_live = 0, last = -1;
        for (int b = 0; b < 256; b++)
            if (gdfa_step(d, s, (uint8_t)b) != GDFA_DEAD) n_live++, last = b;
        if (d->can_cont[s] != (n_live > 0)) st = TR_ERR_INTERNAL;
        int want = (n_live == 1 && !d->accept[s]) ? last : -1;
        if (d->forced[s] != want) st = TR_ERR_INTERNAL;
        for (int b = 0; b < 128; b++) {
            uint32_t t = gdfa_step(d, s, (uint8_t)b);
            if (((d->aloop[s][b >> 6] >> (b & 63)) & 1) != (t == s))
                st = TR_ERR_INTERNAL;
            if (((d->dbits[s][b >> 6] >> (b & 63)) & 1) != (t == GDFA_DEAD))
                st = TR_ERR_INTERNAL;
            if (((d->ubits[s][b >> 6] >> (b & 63)) & 1) !=
                (d->usucc[s] != GDFA_DEAD && t == d->usucc[s]))
                st = TR_ERR_INTERNAL;
        }
        if (d->usucc[s] == s || d->usucc[s] >= d->n_states) st = TR_ERR_INTERNAL;
        uint64_t row = (uint64_t)s * d->n_classes;
        if ((uint32_t)((row * d->row_magic) >> 40) != s) st = TR_ERR_INTERNAL;
    }
    free(live);
    return st;
}

void tr_dfa_dump(const gdfa *d, FILE *f) {
    fprintf(f, "dfa: %u states, %u classes, start %u\n", d->n_states,
            d->n_classes, d->start);
    for (uint32_t c = 0; c < d->n_classes; c++) {
        fprintf(f, "  class %u:", c);
        for (int b = 0; b < 256; b++) {
            if (d->cls[b] != c) continue;
            int e = b;
            while (e + 1 < 256 && d->cls[e + 1] == c) e++;
            if (e == b)
                fprintf(f, " %02x", b);
            else
                fprintf(f, " %02x-%02x", b, e);
            b = e;
        }
        fprintf(f, "\n");
    }
    for (uint32_t s = 1; s < d->n_states; s++) {
        fprintf(f, "  %u%s:", s, d->accept[s] ? " (accept)" : "");
        for (uint32_t c = 0; c < d->n_classes; c++) {
            uint32_t t = d->trans[(size_t)s * d->n_classes + c];
            if (t != GDFA_DEAD) fprintf(f, " c%u->%u", c, t);
        }
        fprintf(f, "\n");
    }
}
