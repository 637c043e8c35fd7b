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
 * cached per set node); their trailing states are shared per (lo, hi,
 * next), kept beside the memo. Counted repetitions are unrolled, nested
 * ((x(x)?)?) so that the subset construction sees few overlapping
 * choices; many copies are made from one built piece. Every state is
 * charged to max_nfa_states, so the budgets bound any input as before.
 */
#include <stdint.h>
#include <string.h>

#include "grammar/cfg/cfg_internal.h"

#define NONE UINT32_MAX

/* What was built into a state k, found by a key: the start state of a
 * (node, k) (the memo; the key is the node's address, even) or the UTF-8
 * suffix state reading [lo, hi] into k (the key is odd, below). Kept per
 * state: the entries of k form a list from lists[k], newest first. States
 * are made in the order the construction builds into them, so the lists
 * in use sit in cache, where one table keyed by (key, k) misses it on
 * nearly every lookup (most of this builder's time on large grammars,
 * MaskBench's slowest compiles among them). A state
 * that collects LIST_MAX entries (a choice of many branches into one
 * state) keeps the rest in the overflow table. */
#define LIST_MAX 8u

typedef struct cont_entry {
    uint64_t key;
    uint32_t s, next; /* next: the state's older entry, or NONE */
} cont_entry;

typedef struct cont_list {
    uint32_t head, len;
} cont_list;

/* the overflow table (open addressing in the compile arena; key 0 marks
 * an empty slot) */
typedef struct cont_slot {
    uint64_t key;
    uint32_t k, s;
} cont_slot;

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
    /* per state, and every list's entries: chunks of CHUNK in the compile
     * arena, found through directories; never moved, since arrays grown
     * by realloc beside the NFA's own make those copy when they grow */
    cont_list **lists;
    uint32_t lists_dir;
    cont_entry **ents;
    uint32_t ents_dir, ents_n;
    cont_slot *over; /* entries past a list's LIST_MAX */
    uint32_t over_cap, over_n;
    gre_node **ctab; /* canonical nodes by structure */
    uint32_t ctab_cap, ctab_n;
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

static uint64_t ctab_h(const void *s) { return node_hash(*(gre_node *const *)s); }
static bool ctab_empty(const void *s) { return !*(gre_node *const *)s; }

/* The canonical node of x (kids first). Nodes are shared after analysis
 * (a substituted rule is one node under many parents), so results are
 * kept in the node (x->canon); the kids of x are replaced in place by
 * theirs. */
static gre_node *canon(cb *b, gre_node *x, uint32_t depth) {
    if (depth > 4096) { /* analysis bounds the IR's depth far below this */
        tr_gcc_fail(b->cc, TR_ERR_LIMIT, x->offset, "grammar nested too deeply");
        return NULL;
    }
    if (x->canon) return x->canon;
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
    if (c) x->canon = c;
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

static uint64_t cont_hash(uint64_t key, uint32_t k) { return mix(mix(0, key), k); }
static uint64_t over_h(const void *s) {
    const cont_slot *m = s;
    return cont_hash(m->key, m->k);
}
static bool over_empty(const void *s) { return !((const cont_slot *)s)->key; }

#define CHUNK 4096u

/* Makes chunk i of a directory of *n (grown as needed) of es-byte
 * elements; NULL: error in cc. */
static void *chunk(cb *b, void ***dir, uint32_t *n, uint32_t i, size_t es) {
    if (i >= *n) {
        uint32_t nn = *n ? *n * 2 : 16;
        while (nn <= i) nn *= 2;
        void **d = tr_gcc_alloc(b->cc, (size_t)nn * sizeof *d);
        if (!d) return NULL;
        if (*n) memcpy(d, *dir, (size_t)*n * sizeof *d);
        *dir = d, *n = nn;
    }
    if (!(*dir)[i]) (*dir)[i] = tr_gcc_alloc(b->cc, (size_t)CHUNK * es);
    return (*dir)[i];
}

/* The list of state k; NULL when none was made (or, with make, on error:
 * cc->err says which). A new chunk's lists start empty. */
static cont_list *list_of(cb *b, uint32_t k, bool make) {
    uint32_t i = k / CHUNK;
    if (!make) return i < b->lists_dir && b->lists[i] ? &b->lists[i][k % CHUNK] : NULL;
    bool fresh = i >= b->lists_dir || !b->lists[i];
    cont_list *c = chunk(b, (void ***)&b->lists, &b->lists_dir, i, sizeof *c);
    if (!c) return NULL;
    if (fresh)
        for (uint32_t j = 0; j < CHUNK; j++) c[j] = (cont_list){NONE, 0};
    return &c[k % CHUNK];
}

static const cont_entry *ent(const cb *b, uint32_t e) { return &b->ents[e / CHUNK][e % CHUNK]; }

/* The state stored under (key, k), or NONE. */
static uint32_t cont_get(const cb *b, uint64_t key, uint32_t k) {
    const cont_list *l = list_of((cb *)b, k, false);
    if (!l) return NONE;
    for (uint32_t e = l->head; e != NONE; e = ent(b, e)->next)
        if (ent(b, e)->key == key) return ent(b, e)->s;
    if (l->len < LIST_MAX || !b->over_cap) return NONE;
    uint32_t j = (uint32_t)cont_hash(key, k) & (b->over_cap - 1);
    for (; b->over[j].key; j = (j + 1) & (b->over_cap - 1))
        if (b->over[j].key == key && b->over[j].k == k) return b->over[j].s;
    return NONE;
}

/* Stores s under (key, k), not there yet; false: error in cc. */
static bool cont_put(cb *b, uint64_t key, uint32_t k, uint32_t s) {
    cont_list *l = list_of(b, k, true);
    if (!l) return false;
    if (l->len < LIST_MAX) {
        uint32_t e = b->ents_n;
        cont_entry *c = chunk(b, (void ***)&b->ents, &b->ents_dir, e / CHUNK, sizeof *c);
        if (!c) return false;
        c[e % CHUNK] = (cont_entry){key, s, l->head};
        l->head = e;
        l->len++;
        b->ents_n++;
        return true;
    }
    if (!grow_table(b, (void **)&b->over, &b->over_cap, b->over_n, sizeof *b->over, over_h,
                    over_empty))
        return false;
    uint32_t j = (uint32_t)cont_hash(key, k) & (b->over_cap - 1);
    while (b->over[j].key) j = (j + 1) & (b->over_cap - 1);
    b->over[j] = (cont_slot){key, k, s};
    b->over_n++;
    return true;
}

static uint64_t memo_key(const gre_node *x) { return (uint64_t)(uintptr_t)x; }

static uint32_t memo_put(cb *b, const gre_node *x, uint32_t k, uint32_t s) {
    if (s == NONE) return NONE;
    return cont_put(b, memo_key(x), k, s) ? s : NONE;
}

/* The state that reads [lo, hi] and goes to next (one per triple). Its
 * key is odd: nodes are aligned, so no memo key is. */
static uint32_t suffix(cb *b, uint8_t lo, uint8_t hi, uint32_t next) {
    uint64_t key = 1 | (uint64_t)lo << 8 | (uint64_t)hi << 16;
    uint32_t s = cont_get(b, key, next);
    if (s != NONE) return s;
    s = new_state(b);
    if (s == NONE || !edge(b, s, next, GNFA_BYTE, lo, hi) || !cont_put(b, key, next, s))
        return NONE;
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

/* The copies of a counted repetition that go into a fresh state (an
 * optional copy's own state, or anything built into one) cannot share a
 * state with anything else: built one by one, each would only fill the
 * memo with entries nobody looks up again (a maxLength of 1,000 is
 * ~16,000 states). Past this many such copies x is built once into a
 * state of its own and the copies are made from it. Copies into k itself
 * (the first optional one; all of x{n}) are built: an x{8} and an x{9}
 * into one k share their chain through the memo. */
#define CLONE_MIN_COPIES 8u

typedef struct piece {
    uint32_t s0, s1; /* its states [s0, s1) and edges [e0, e1) */
    uint32_t e0, e1;
    uint32_t entry, exit; /* where x starts; the continuation it was built into */
    uint32_t *from;       /* [e1 - e0] each edge's source state */
    bool placed;          /* the piece itself serves as a copy already */
} piece;

/* x built into a fresh state, which nothing reaches but x's own states:
 * everything the build makes is new, since every memo entry or shared
 * suffix it could reuse has a continuation made during the build.
 * false: error, or x is empty (nothing to copy). */
static bool make_piece(cb *b, const gre_node *x, piece *p) {
    p->exit = new_state(b);
    if (p->exit == NONE) return false;
    p->s0 = b->n->n_states, p->e0 = b->n->n_edges;
    p->entry = build(b, x, p->exit);
    p->s1 = b->n->n_states, p->e1 = b->n->n_edges;
    if (p->entry == NONE || p->entry == p->exit) return false;
    p->placed = false;
    p->from = tr_gcc_alloc(b->cc, ((size_t)(p->e1 - p->e0) + 1) * sizeof *p->from);
    if (!p->from) return false;
    for (uint32_t q = p->s0; q < p->s1; q++)
        for (uint32_t e = b->n->head[q]; e != UINT32_MAX; e = b->n->edges[e].next)
            p->from[e - p->e0] = q;
    return true;
}

/* A copy of piece p whose exit is k; NONE on error (in cc). The first is
 * the piece itself, its exit edges moved to k (the exit state, known to
 * no one else, is left without a way in; the states inside keep what the
 * memo says of them). The others are new states and edges, added in p's
 * order, so that each state lists its edges as p's state does. */
static uint32_t copy_piece(cb *b, piece *p, uint32_t k) {
    if (!p->placed) {
        for (uint32_t e = p->e0; e < p->e1; e++)
            if (b->n->edges[e].to == p->exit) b->n->edges[e].to = k;
        p->placed = true;
        return p->entry;
    }
    uint32_t base = b->n->n_states;
    for (uint32_t i = p->s0; i < p->s1; i++)
        if (new_state(b) == NONE) return NONE;
    for (uint32_t e = p->e0; e < p->e1; e++) {
        gnfa_edge x = b->n->edges[e]; /* by value: adding may move the array */
        /* an edge out of the piece is an exit edge (moved to the first
         * copy's continuation by now) */
        uint32_t to = x.to < p->s0 || x.to >= p->s1 ? k : x.to - p->s0 + base;
        if (!edge(b, p->from[e - p->e0] - p->s0 + base, to, x.kind, x.lo, x.hi)) return NONE;
    }
    return p->entry - p->s0 + base;
}

/* One copy of x into cur, a fresh state unless it is the repetition's
 * own continuation k: from the piece when there is one. */
static uint32_t copy_into(cb *b, const gre_node *x, piece *p, uint32_t cur, uint32_t k) {
    return p && cur != k ? copy_piece(b, p, cur) : build(b, x, cur);
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
    }
    uint64_t fresh = x->max == GRE_INF   ? need
                     : x->max > x->min ? (uint64_t)x->max - x->min - 1 + need
                                       : 0;
    piece pc, *p = NULL;
    if (fresh >= CLONE_MIN_COPIES) {
        if (make_piece(b, kid, &pc))
            p = &pc;
        else if (b->cc->err)
            return NONE;
    }
    if (x->max != GRE_INF) {
        for (uint32_t i = x->min; i < x->max && cur != NONE; i++) {
            uint32_t o = new_state(b), ks = o != NONE ? copy_into(b, kid, p, cur, k) : NONE;
            if (ks == NONE || !edge(b, o, k, GNFA_EPS, 0, 0) || !edge(b, o, ks, GNFA_EPS, 0, 0))
                return NONE;
            cur = o;
        }
    }
    for (uint32_t i = 0; i < need && cur != NONE; i++) cur = copy_into(b, kid, p, cur, k);
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
    uint32_t s = cont_get(b, memo_key(x), k);
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
                            const uint32_t *sym_of_rule, gnfa *out, uint32_t *starts,
                            uint32_t *at) {
    memset(out, 0, sizeof *out);
    cb b = {.cc = cc, .n = out, .sym_of_rule = sym_of_rule};
    uint32_t fin = new_state(&b);
    *at = n;
    for (uint32_t i = 0; i < n && fin != NONE; i++) {
        gre_node *c = canon(&b, bodies[i], 0);
        starts[i] = c ? build(&b, c, fin) : NONE;
        if (starts[i] == NONE) fin = NONE, *at = i;
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
