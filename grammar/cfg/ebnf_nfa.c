/* ebnf_nfa.c — a grammar's IR (the kept rules, inlined rules substituted)
 * to one byte NFA whose rule calls are CALL edges, built so that equal
 * pieces with equal futures are one piece.
 *
 * Layering: grammar/cfg (cfg_internal.h), between ebnf_analyze.c
 * and cfg_dfa.c; one compile context, single-threaded. (Regexes keep
 * nfa.c's fragment construction: their DFA is minimized anyway.)
 *
 * The idea in two paragraphs. The NFA is built backwards, in
 * continuation-passing style: build(x, k) returns a state from which the
 * strings of x lead to state k (a concatenation builds its last item
 * first, into k, then the one before into that start, and so on). The
 * pair (x, k) says everything about what the returned state accepts, so
 * it is memoized: a piece of IR that appears twice with the same
 * continuation is built once. Before building, structurally equal IR
 * nodes are merged (hash-consing), so that equal text gives equal nodes.
 * Together they make the suffixes that JSON Schema's translator repeats
 * (the properties left after each optional one: `a (,b)? (,c)? | b (,c)?
 * | c`) one chain instead of a quadratic number of copies, and a rule
 * substituted at the tail of several rules with one continuation (a
 * right-linear grammar) one copy: the NFA of such a grammar is linear in
 * its rules, while inlining copies made it quadratic or exponential.
 *
 * Code-point sets become UTF-8 byte-range sequences (nfa.c's split,
 * cached per set node); their trailing states are shared through a
 * (lo, hi, next) table for the whole NFA. Counted repetitions are
 * unrolled, nested ((x(x)?)?) so that the subset construction sees few
 * overlapping choices. Every state is charged to max_nfa_states, so the
 * budgets bound any input as before.
 */
#include <stdint.h>
#include <string.h>

#include "grammar/cfg/cfg_internal.h"

#define NONE UINT32_MAX

/* open-addressing tables in the compile arena; 0 marks an empty slot */
typedef struct memo_slot {
    const gre_node *x; /* NULL: empty */
    uint32_t k, s;
} memo_slot;

typedef struct canon_slot {
    const gre_node *from; /* the node as parsed (NULL: empty) */
    gre_node *to;         /* its canonical node */
} canon_slot;

typedef struct seqs {
    const gre_node *set; /* NULL: empty slot */
    uint8_t (*lo)[4], (*hi)[4];
    uint8_t *len;
    uint32_t n;
} seqs;

typedef struct cb {
    gcc *cc;
    gnfa *n;
    const uint32_t *sym_of_rule;
    memo_slot *memo; /* (node, continuation) -> start state */
    uint32_t memo_cap, memo_n;
    canon_slot *cmap; /* node -> canonical node */
    uint32_t cmap_cap, cmap_n;
    gre_node **ctab; /* canonical nodes by structure */
    uint32_t ctab_cap, ctab_n;
    uint64_t *suf_key; /* UTF-8 suffix states: (lo, hi, next) -> state */
    uint32_t *suf_val;
    uint32_t suf_cap, suf_n;
    seqs *sq; /* set node -> its UTF-8 byte-range sequences */
    uint32_t sq_cap, sq_n;
} cb;

/* The tables index by the low bits, and a product's low bits depend only
 * on its factors' low bits (an aligned pointer's are constant), so the
 * high half is folded in: without it, pointer keys used 1 slot in 16 and
 * probe chains ran thousands long (2.3 s of one MaskBench compile). */
static uint64_t mix(uint64_t h, uint64_t x) {
    h ^= x + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdULL;
    return h ^ (h >> 32);
}

static uint64_t hptr(const void *p) { return mix(0, (uint64_t)(uintptr_t)p); }

/* Doubles an open-addressing table when half full: *tab of *cap slots of
 * es bytes, rehashed by h(slot). */
static bool grow_table(cb *b, void **tab, uint32_t *cap, uint32_t used, size_t es,
                       uint64_t (*h)(const void *slot), bool (*empty)(const void *slot)) {
    if ((uint64_t)(used + 1) * 2 <= *cap) return true;
    uint32_t nc = *cap ? *cap * 2 : 256;
    uint8_t *t = tr_gcc_alloc(b->cc, (size_t)nc * es);
    if (!t) return false;
    for (uint32_t i = 0; i < *cap; i++) {
        const uint8_t *slot = (const uint8_t *)*tab + (size_t)i * es;
        if (empty(slot)) continue;
        uint32_t j = (uint32_t)h(slot) & (nc - 1);
        while (!empty(t + (size_t)j * es)) j = (j + 1) & (nc - 1);
        memcpy(t + (size_t)j * es, slot, es);
    }
    *tab = t;
    *cap = nc;
    return true;
}

/* ---- hash-consing ---- */

static uint64_t node_hash(const gre_node *x) {
    uint64_t h = mix(x->kind, ((uint64_t)x->min << 32) | x->max);
    h = mix(h, x->ref);
    h = mix(h, (uint64_t)(uintptr_t)x->dfa);
    for (uint32_t i = 0; i < x->set.n; i++)
        h = mix(h, ((uint64_t)x->set.r[i][0] << 32) | x->set.r[i][1]);
    for (uint32_t i = 0; i < x->n_kids; i++) h = mix(h, (uint64_t)(uintptr_t)x->kids[i]);
    return h;
}

/* Equal structure, the kids already canonical (so compared by pointer). */
static bool node_eq(const gre_node *a, const gre_node *b) {
    if (a->kind != b->kind || a->min != b->min || a->max != b->max || a->ref != b->ref ||
        a->dfa != b->dfa || a->set.n != b->set.n || a->n_kids != b->n_kids)
        return false;
    if (a->set.n && memcmp(a->set.r, b->set.r, a->set.n * sizeof *a->set.r)) return false;
    for (uint32_t i = 0; i < a->n_kids; i++)
        if (a->kids[i] != b->kids[i]) return false;
    return true;
}

static uint64_t cmap_h(const void *s) { return hptr(((const canon_slot *)s)->from); }
static bool cmap_empty(const void *s) { return !((const canon_slot *)s)->from; }
static uint64_t ctab_h(const void *s) { return node_hash(*(gre_node *const *)s); }
static bool ctab_empty(const void *s) { return !*(gre_node *const *)s; }

/* The canonical node of x (kids first). Nodes are shared after analysis
 * (a substituted rule is one node under many parents), so results are
 * kept per node; the kids of x are replaced in place by theirs. */
static gre_node *canon(cb *b, gre_node *x, uint32_t depth) {
    if (depth > 4096) { /* analysis bounds the IR's depth far below this */
        tr_gcc_fail(b->cc, TR_ERR_LIMIT, x->offset, "grammar nested too deeply");
        return NULL;
    }
    if (b->cmap_cap) {
        uint32_t j = (uint32_t)hptr(x) & (b->cmap_cap - 1);
        for (; b->cmap[j].from; j = (j + 1) & (b->cmap_cap - 1))
            if (b->cmap[j].from == x) return b->cmap[j].to;
    }
    gre_node *c = x;
    if ((x->kind == GRE_CONCAT || x->kind == GRE_ALT) && x->n_kids == 1) {
        c = canon(b, x->kids[0], depth + 1);
    } else if (x->kind == GRE_REPEAT && x->min == 1 && x->max == 1) {
        c = canon(b, x->kids[0], depth + 1);
    } else {
        for (uint32_t i = 0; i < x->n_kids; i++) {
            gre_node *k = canon(b, x->kids[i], depth + 1);
            if (!k) return NULL;
            x->kids[i] = k;
        }
        if (!grow_table(b, (void **)&b->ctab, &b->ctab_cap, b->ctab_n, sizeof *b->ctab, ctab_h,
                        ctab_empty))
            return NULL;
        uint32_t j = (uint32_t)node_hash(x) & (b->ctab_cap - 1);
        for (; b->ctab[j]; j = (j + 1) & (b->ctab_cap - 1))
            if (node_eq(b->ctab[j], x)) break;
        if (b->ctab[j])
            c = b->ctab[j];
        else
            b->ctab[j] = x, b->ctab_n++;
    }
    if (!c) return NULL;
    if (!grow_table(b, (void **)&b->cmap, &b->cmap_cap, b->cmap_n, sizeof *b->cmap, cmap_h,
                    cmap_empty))
        return NULL;
    uint32_t j = (uint32_t)hptr(x) & (b->cmap_cap - 1);
    while (b->cmap[j].from) j = (j + 1) & (b->cmap_cap - 1);
    b->cmap[j] = (canon_slot){x, c};
    b->cmap_n++;
    return c;
}

/* ---- states, the memo, UTF-8 ---- */

static uint32_t new_state(cb *b) {
    uint32_t s;
    return tr_nfa_new_state(b->cc, b->n, &s) ? NONE : s;
}

static bool edge(cb *b, uint32_t from, uint32_t to, int kind, uint8_t lo, uint8_t hi) {
    return tr_nfa_add_edge(b->cc, b->n, from, to, kind, lo, hi) == TR_OK;
}

static uint64_t memo_hash(const gre_node *x, uint32_t k) { return mix(hptr(x), k); }
static uint64_t memo_h(const void *s) {
    const memo_slot *m = s;
    return memo_hash(m->x, m->k);
}
static bool memo_empty(const void *s) { return !((const memo_slot *)s)->x; }

static uint32_t memo_get(const cb *b, const gre_node *x, uint32_t k) {
    if (!b->memo_cap) return NONE;
    uint32_t j = (uint32_t)memo_hash(x, k) & (b->memo_cap - 1);
    for (; b->memo[j].x; j = (j + 1) & (b->memo_cap - 1))
        if (b->memo[j].x == x && b->memo[j].k == k) return b->memo[j].s;
    return NONE;
}

static uint32_t memo_put(cb *b, const gre_node *x, uint32_t k, uint32_t s) {
    if (s == NONE) return NONE;
    if (!grow_table(b, (void **)&b->memo, &b->memo_cap, b->memo_n, sizeof *b->memo, memo_h,
                    memo_empty))
        return NONE;
    uint32_t j = (uint32_t)memo_hash(x, k) & (b->memo_cap - 1);
    while (b->memo[j].x) j = (j + 1) & (b->memo_cap - 1);
    b->memo[j] = (memo_slot){x, k, s};
    b->memo_n++;
    return s;
}

static uint64_t suf_h(const void *s) { return mix(0, *(const uint64_t *)s); }

/* The state that reads [lo, hi] and goes to next (one per triple). */
static uint32_t suffix(cb *b, uint8_t lo, uint8_t hi, uint32_t next) {
    uint64_t key = ((uint64_t)lo + 1) << 40 | (uint64_t)hi << 32 | next; /* never 0 */
    if (b->suf_cap) {
        uint32_t j = (uint32_t)suf_h(&key) & (b->suf_cap - 1);
        for (; b->suf_key[j]; j = (j + 1) & (b->suf_cap - 1))
            if (b->suf_key[j] == key) return b->suf_val[j];
    }
    /* keys and values are two arrays: grow them together */
    if ((uint64_t)(b->suf_n + 1) * 2 > b->suf_cap) {
        uint32_t nc = b->suf_cap ? b->suf_cap * 2 : 256;
        uint64_t *k = tr_gcc_alloc(b->cc, (size_t)nc * sizeof *k);
        uint32_t *v = tr_gcc_alloc(b->cc, (size_t)nc * sizeof *v);
        if (!k || !v) return NONE;
        for (uint32_t i = 0; i < b->suf_cap; i++) {
            if (!b->suf_key[i]) continue;
            uint32_t j = (uint32_t)suf_h(&b->suf_key[i]) & (nc - 1);
            while (k[j]) j = (j + 1) & (nc - 1);
            k[j] = b->suf_key[i], v[j] = b->suf_val[i];
        }
        b->suf_key = k, b->suf_val = v, b->suf_cap = nc;
    }
    uint32_t s = new_state(b);
    if (s == NONE || !edge(b, s, next, GNFA_BYTE, lo, hi)) return NONE;
    uint32_t j = (uint32_t)suf_h(&key) & (b->suf_cap - 1);
    while (b->suf_key[j]) j = (j + 1) & (b->suf_cap - 1);
    b->suf_key[j] = key, b->suf_val[j] = s, b->suf_n++;
    return s;
}

typedef struct seq_acc {
    cb *b;
    seqs *q;
    uint32_t cap;
} seq_acc;

static tr_status seq_add(void *ctx, const uint8_t *a, const uint8_t *z, int n) {
    seq_acc *c = ctx;
    seqs *q = c->q;
    if (q->n == c->cap) {
        uint32_t nc = c->cap ? c->cap * 2 : 8;
        uint8_t(*lo)[4] = tr_gcc_alloc(c->b->cc, (size_t)nc * 4);
        uint8_t(*hi)[4] = tr_gcc_alloc(c->b->cc, (size_t)nc * 4);
        uint8_t *len = tr_gcc_alloc(c->b->cc, nc);
        if (!lo || !hi || !len) return c->b->cc->err;
        if (q->n) {
            memcpy(lo, q->lo, (size_t)q->n * 4);
            memcpy(hi, q->hi, (size_t)q->n * 4);
            memcpy(len, q->len, q->n);
        }
        q->lo = lo, q->hi = hi, q->len = len, c->cap = nc;
    }
    memcpy(q->lo[q->n], a, (size_t)n);
    memcpy(q->hi[q->n], z, (size_t)n);
    q->len[q->n++] = (uint8_t)n;
    return TR_OK;
}

static uint64_t sq_h(const void *s) { return hptr(((const seqs *)s)->set); }
static bool sq_empty(const void *s) { return !((const seqs *)s)->set; }

/* The byte-range sequences of set node x, split once per node. */
static const seqs *seqs_of(cb *b, const gre_node *x) {
    if (b->sq_cap) {
        uint32_t j = (uint32_t)hptr(x) & (b->sq_cap - 1);
        for (; b->sq[j].set; j = (j + 1) & (b->sq_cap - 1))
            if (b->sq[j].set == x) return &b->sq[j];
    }
    seqs q = {.set = x};
    seq_acc acc = {b, &q, 0};
    for (uint32_t i = 0; i < x->set.n; i++)
        if (tr_utf8_split(x->set.r[i][0], x->set.r[i][1], seq_add, &acc)) return NULL;
    if (!grow_table(b, (void **)&b->sq, &b->sq_cap, b->sq_n, sizeof *b->sq, sq_h, sq_empty))
        return NULL;
    uint32_t j = (uint32_t)hptr(x) & (b->sq_cap - 1);
    while (b->sq[j].set) j = (j + 1) & (b->sq_cap - 1);
    b->sq[j] = q;
    b->sq_n++;
    return &b->sq[j];
}

/* ---- the construction ---- */

static uint32_t build(cb *b, const gre_node *x, uint32_t k);

static uint32_t build_set(cb *b, const gre_node *x, uint32_t k) {
    const seqs *q = seqs_of(b, x);
    uint32_t s = q ? new_state(b) : NONE;
    for (uint32_t i = 0; s != NONE && i < q->n; i++) {
        uint32_t next = k;
        for (int j = q->len[i] - 1; j >= 1 && next != NONE; j--)
            next = suffix(b, q->lo[i][j], q->hi[i][j], next);
        if (next == NONE || !edge(b, s, next, GNFA_BYTE, q->lo[i][0], q->hi[i][0])) s = NONE;
    }
    return s;
}

/* x{min,max} into k: (x (x (x)?)?)? for the optional copies, built from
 * the innermost, then the required ones; x* and x+ loop. */
static uint32_t build_repeat(cb *b, const gre_node *x, uint32_t k) {
    const gre_node *kid = x->kids[0];
    uint32_t cur = k, need = x->min;
    if (x->max == GRE_INF) {
        uint32_t loop = new_state(b); /* loop --eps--> k, loop --eps--> kid */
        uint32_t ks = loop != NONE ? build(b, kid, loop) : NONE;
        if (ks == NONE || !edge(b, loop, k, GNFA_EPS, 0, 0) ||
            !edge(b, loop, ks, GNFA_EPS, 0, 0))
            return NONE;
        if (need == 0) return loop;
        cur = ks; /* x{m,} = x{m-1} x+ */
        need--;
    } else {
        for (uint32_t i = x->min; i < x->max && cur != NONE; i++) {
            uint32_t o = new_state(b), ks = o != NONE ? build(b, kid, cur) : NONE;
            if (ks == NONE || !edge(b, o, k, GNFA_EPS, 0, 0) || !edge(b, o, ks, GNFA_EPS, 0, 0))
                return NONE;
            cur = o;
        }
    }
    for (uint32_t i = 0; i < need && cur != NONE; i++) cur = build(b, kid, cur);
    return cur;
}

/* A terminal compiled on its own, state by state: its accepting states
 * lead to k. */
static uint32_t build_dfa(cb *b, const gdfa *d, uint32_t k) {
    if (d->start == GDFA_DEAD) return new_state(b); /* nothing reaches k */
    uint32_t *map = tr_gcc_alloc(b->cc, (size_t)d->n_states * sizeof *map);
    if (!map) return NONE;
    for (uint32_t q = 1; q < d->n_states; q++)
        if ((map[q] = new_state(b)) == NONE) return NONE;
    uint8_t rlo[256], rhi[256], rcls[256];
    uint32_t nr = 0;
    for (int c = 0; c < 256;) {
        int y = c;
        while (y + 1 < 256 && d->cls[y + 1] == d->cls[c]) y++;
        rlo[nr] = (uint8_t)c, rhi[nr] = (uint8_t)y, rcls[nr] = d->cls[c];
        nr++;
        c = y + 1;
    }
    for (uint32_t q = 1; q < d->n_states; q++) {
        for (uint32_t r = 0; r < nr; r++) {
            uint32_t t = d->trans[(size_t)q * d->n_classes + rcls[r]];
            if (t != GDFA_DEAD && !edge(b, map[q], map[t], GNFA_BYTE, rlo[r], rhi[r]))
                return NONE;
        }
        if (d->accept[q] && !edge(b, map[q], k, GNFA_EPS, 0, 0)) return NONE;
    }
    return map[d->start];
}

/* A state from which the strings of x lead to k (NONE: error in cc). */
static uint32_t build(cb *b, const gre_node *x, uint32_t k) {
    if (x->kind == GRE_EMPTY) return k;
    uint32_t s = memo_get(b, x, k);
    if (s != NONE) return s;
    switch (x->kind) {
    case GRE_SET:
        s = build_set(b, x, k);
        break;
    case GRE_CONCAT:
        s = k;
        for (uint32_t i = x->n_kids; i-- > 0 && s != NONE;) s = build(b, x->kids[i], s);
        break;
    case GRE_ALT:
        s = new_state(b);
        for (uint32_t i = 0; i < x->n_kids && s != NONE; i++) {
            uint32_t t = build(b, x->kids[i], k);
            if (t == NONE || !edge(b, s, t, GNFA_EPS, 0, 0)) s = NONE;
        }
        break;
    case GRE_REPEAT:
        s = build_repeat(b, x, k);
        break;
    case GRE_REF: {
        uint32_t sym = b->sym_of_rule[x->ref];
        if (sym >= GNFA_MAX_SYMS) { /* inlining substituted every other reference */
            tr_gcc_fail(b->cc, TR_ERR_INTERNAL, x->offset, "a rule was neither inlined nor kept");
            return NONE;
        }
        s = new_state(b);
        if (s != NONE && !edge(b, s, k, GNFA_CALL, (uint8_t)(sym & 0xFF), (uint8_t)(sym >> 8)))
            s = NONE;
        break;
    }
    case GRE_DFA:
        s = build_dfa(b, x->dfa, k);
        break;
    default: /* anchors never reach a grammar's NFA */
        tr_gcc_fail(b->cc, TR_ERR_INTERNAL, x->offset, "unexpected IR node");
        return NONE;
    }
    return memo_put(b, x, k, s);
}

tr_status tr_ebnf_nfa_build(gcc *cc, gre_node *const *bodies, uint32_t n,
                            const uint32_t *sym_of_rule, gnfa *out, uint32_t *starts) {
    memset(out, 0, sizeof *out);
    cb b = {.cc = cc, .n = out, .sym_of_rule = sym_of_rule};
    uint32_t fin = new_state(&b);
    for (uint32_t i = 0; i < n && fin != NONE; i++) {
        gre_node *c = canon(&b, bodies[i], 0);
        starts[i] = c ? build(&b, c, fin) : NONE;
        if (starts[i] == NONE) fin = NONE;
    }
    if (fin == NONE) {
        tr_status st = cc->err ? cc->err : tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory");
        tr_nfa_free(cc, out);
        return st;
    }
    out->start = n ? starts[0] : fin;
    out->final = fin;
    return TR_OK;
}
