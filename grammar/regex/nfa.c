/* nfa.c — AST -> byte-level Thompson NFA.
 *
 * Layering: grammar/regex (regex.h), between regex_parse.c and dfa.c. One
 * compile context per call; single-threaded.
 *
 * Each AST node becomes a fragment with one entry and one exit state; the
 * exit has no outgoing edges until the enclosing construct links it.
 * Code-point sets become UTF-8 byte-range sequences: a range is split
 * until every piece is a product of byte ranges (e.g. U+0800..U+FFFF ->
 * [E0][A0-BF][80-BF] | [E1-EF][80-BF][80-BF]), and the trailing parts of
 * those sequences are shared through a (lo, hi, next) cache, so a class
 * like \p{L} costs hundreds of states instead of thousands. Counted
 * repetition copies its operand: x{2,4} = x x (x (x)?)? (nested, so the
 * subset construction sees few overlapping choices). Every new state is
 * charged against max_nfa_states and every table against the memory
 * budget, which bounds the work of any AST, however nested its counts.
 *
 * ^ and $ become BOL/EOL edges that dfa.c interprets: BOL may only be
 * crossed before the first byte, and nothing may be consumed after EOL.
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/regex/regex.h"

#define NO_EDGE UINT32_MAX

typedef struct nb {
    gcc *cc;
    gnfa *n;
    /* suffix cache for the UTF-8 expansion of one set */
    uint64_t *keys; /* (lo << 40) | (hi << 32) | next, 0 = empty slot */
    uint32_t *vals;
    uint32_t cache_cap, cache_n;
} nb;

tr_status tr_nfa_new_state(gcc *cc, gnfa *n, uint32_t *id) {
    if (n->n_states >= cc->lim.max_nfa_states)
        return tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "NFA larger than max_nfa_states = %u",
                           cc->lim.max_nfa_states);
    tr_status st = tr_gcc_poll_time(cc);
    if (st) return st;
    st = tr_gcc_grow(cc, (void **)&n->head, &n->cap_states, sizeof *n->head,
                     (uint64_t)n->n_states + 1);
    if (st) return st;
    n->head[n->n_states] = NO_EDGE;
    *id = n->n_states++;
    return TR_OK;
}

tr_status tr_nfa_add_edge(gcc *cc, gnfa *n, uint32_t from, uint32_t to, int kind, uint8_t lo,
                          uint8_t hi) {
    tr_status st = tr_gcc_grow(cc, (void **)&n->edges, &n->cap_edges, sizeof *n->edges,
                               (uint64_t)n->n_edges + 1);
    if (st) return st;
    gnfa_edge *e = &n->edges[n->n_edges];
    e->to = to;
    e->kind = (uint8_t)kind;
    e->lo = lo;
    e->hi = hi;
    e->pad = 0;
    e->next = n->head[from];
    n->head[from] = n->n_edges++;
    return TR_OK;
}

static tr_status new_state(nb *b, uint32_t *id) {
    *id = 0;
    return tr_nfa_new_state(b->cc, b->n, id);
}

static tr_status add_edge(nb *b, uint32_t from, uint32_t to, int kind, uint8_t lo, uint8_t hi) {
    return tr_nfa_add_edge(b->cc, b->n, from, to, kind, lo, hi);
}

/* ---- UTF-8 expansion ---- */

static uint64_t hash64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

/* The state that reads [lo, hi] and goes to next, shared per set. */
static tr_status suffix_state(nb *b, uint8_t lo, uint8_t hi, uint32_t next,
                              uint32_t *out) {
    if (b->cache_n * 2 >= b->cache_cap) {
        uint32_t nc = b->cache_cap ? b->cache_cap * 2 : 64;
        uint64_t *k = tr_gcc_alloc(b->cc, (size_t)nc * sizeof *k);
        uint32_t *v = tr_gcc_alloc(b->cc, (size_t)nc * sizeof *v);
        if (!k || !v) return b->cc->err;
        for (uint32_t i = 0; i < b->cache_cap; i++) {
            if (!b->keys[i]) continue;
            uint32_t j = (uint32_t)hash64(b->keys[i]) & (nc - 1);
            while (k[j]) j = (j + 1) & (nc - 1);
            k[j] = b->keys[i];
            v[j] = b->vals[i];
        }
        b->keys = k;
        b->vals = v;
        b->cache_cap = nc;
    }
    /* +1 on lo keeps the key nonzero (0 marks empty slots) */
    uint64_t key = ((uint64_t)lo + 1) << 40 | (uint64_t)hi << 32 | next;
    uint32_t j = (uint32_t)hash64(key) & (b->cache_cap - 1);
    while (b->keys[j]) {
        if (b->keys[j] == key) {
            *out = b->vals[j];
            return TR_OK;
        }
        j = (j + 1) & (b->cache_cap - 1);
    }
    uint32_t s;
    tr_status st = new_state(b, &s);
    if (!st) st = add_edge(b, s, next, GNFA_BYTE, lo, hi);
    if (st) return st;
    b->keys[j] = key;
    b->vals[j] = s;
    b->cache_n++;
    *out = s;
    return TR_OK;
}

static tr_status emit_seq(nb *b, uint32_t from, uint32_t to, const uint8_t *a,
                          const uint8_t *z, int n) {
    uint32_t next = to;
    for (int k = n - 1; k >= 1; k--) {
        tr_status st = suffix_state(b, a[k], z[k], next, &next);
        if (st) return st;
    }
    return add_edge(b, from, next, GNFA_BYTE, a[0], z[0]);
}

/* Splits [lo, hi] (no surrogates inside) into products of byte ranges:
 * f(ctx, a, z, n) once per product, bytes a[i]..z[i] at position i. */
tr_status tr_utf8_split(uint32_t lo, uint32_t hi, gutf8_seq_fn f, void *ctx) {
    static const uint32_t len_bounds[] = {0x7F, 0x7FF, 0xFFFF};
    for (size_t i = 0; i < TR_ARRAY_LEN(len_bounds); i++) {
        uint32_t m = len_bounds[i];
        if (lo <= m && hi > m) {
            tr_status st = tr_utf8_split(lo, m, f, ctx);
            return st ? st : tr_utf8_split(m + 1, hi, f, ctx);
        }
    }
    if (hi < 0x80) {
        uint8_t a = (uint8_t)lo, z = (uint8_t)hi;
        return f(ctx, &a, &z, 1);
    }
    /* make every continuation byte span full or equal in lo and hi */
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                tr_status st = tr_utf8_split(lo, lo | m, f, ctx);
                return st ? st : tr_utf8_split((lo | m) + 1, hi, f, ctx);
            }
            if ((hi & m) != m) {
                tr_status st = tr_utf8_split(lo, (hi & ~m) - 1, f, ctx);
                return st ? st : tr_utf8_split(hi & ~m, hi, f, ctx);
            }
        }
    }
    uint8_t a[4], z[4];
    int n = tr_utf8_encode(lo, a);
    int n2 = tr_utf8_encode(hi, z);
    TR_ASSERT(n == n2);
    return f(ctx, a, z, n);
}

typedef struct seq_ctx {
    nb *b;
    uint32_t from, to;
} seq_ctx;

static tr_status emit_seq_cb(void *ctx, const uint8_t *a, const uint8_t *z, int n) {
    seq_ctx *c = ctx;
    return emit_seq(c->b, c->from, c->to, a, z, n);
}

/* ---- fragments ---- */

static tr_status build(nb *b, const gre_node *x, uint32_t *s, uint32_t *e);

static tr_status build_set(nb *b, const gre_node *x, uint32_t *s,
                           uint32_t *e) {
    tr_status st = new_state(b, s);
    if (!st) st = new_state(b, e);
    if (st) return st;
    /* the suffix cache is per set: its states end at this set's exit */
    b->keys = NULL;
    b->vals = NULL;
    b->cache_cap = b->cache_n = 0;
    for (uint32_t i = 0; i < x->set.n; i++) {
        seq_ctx c = {b, *s, *e};
        st = tr_utf8_split(x->set.r[i][0], x->set.r[i][1], emit_seq_cb, &c);
        if (st) return st;
    }
    return TR_OK;
}

static tr_status build_repeat(nb *b, const gre_node *x, uint32_t *s,
                              uint32_t *e) {
    const gre_node *k = x->kids[0];
    tr_status st = new_state(b, s);
    if (st) return st;
    uint32_t cur = *s, ks = 0, ke = 0;
    for (uint32_t i = 0; i < x->min; i++) {
        st = build(b, k, &ks, &ke);
        if (!st) st = add_edge(b, cur, ks, GNFA_EPS, 0, 0);
        if (st) return st;
        cur = ke;
    }
    if (x->max == GRE_INF) {
        if (x->min > 0) {
            /* x{m,} = x{m-1} x+ : loop back over the last copy */
            st = add_edge(b, ke, ks, GNFA_EPS, 0, 0);
            if (st) return st;
            *e = cur;
            return TR_OK;
        }
        uint32_t loop;
        st = new_state(b, &loop);
        if (!st) st = add_edge(b, cur, loop, GNFA_EPS, 0, 0);
        if (!st) st = build(b, k, &ks, &ke);
        if (!st) st = add_edge(b, loop, ks, GNFA_EPS, 0, 0);
        if (!st) st = add_edge(b, ke, loop, GNFA_EPS, 0, 0);
        if (st) return st;
        *e = loop;
        return TR_OK;
    }
    if (x->max == x->min) {
        *e = cur;
        return TR_OK;
    }
    uint32_t end;
    st = new_state(b, &end);
    if (st) return st;
    for (uint32_t i = x->min; i < x->max; i++) {
        st = build(b, k, &ks, &ke);
        if (!st) st = add_edge(b, cur, ks, GNFA_EPS, 0, 0);
        if (!st) st = add_edge(b, cur, end, GNFA_EPS, 0, 0);
        if (st) return st;
        cur = ke;
    }
    st = add_edge(b, cur, end, GNFA_EPS, 0, 0);
    if (st) return st;
    *e = end;
    return TR_OK;
}

static tr_status build(nb *b, const gre_node *x, uint32_t *s, uint32_t *e) {
    tr_status st;
    switch (x->kind) {
    case GRE_EMPTY:
        st = new_state(b, s);
        *e = *s;
        return st;
    case GRE_SET:
        return build_set(b, x, s, e);
    case GRE_BOL:
    case GRE_EOL:
        st = new_state(b, s);
        if (!st) st = new_state(b, e);
        if (!st)
            st = add_edge(b, *s, *e, x->kind == GRE_BOL ? GNFA_BOL : GNFA_EOL,
                          0, 0);
        return st;
    case GRE_CONCAT: {
        uint32_t ks, ke, prev = 0;
        for (uint32_t i = 0; i < x->n_kids; i++) {
            st = build(b, x->kids[i], &ks, &ke);
            if (st) return st;
            if (i == 0)
                *s = ks;
            else if ((st = add_edge(b, prev, ks, GNFA_EPS, 0, 0)))
                return st;
            prev = ke;
        }
        if (x->n_kids == 0) {
            st = new_state(b, s);
            *e = *s;
            return st;
        }
        *e = prev;
        return TR_OK;
    }
    case GRE_ALT: {
        st = new_state(b, s);
        if (!st) st = new_state(b, e);
        if (st) return st;
        for (uint32_t i = 0; i < x->n_kids; i++) {
            uint32_t ks, ke;
            st = build(b, x->kids[i], &ks, &ke);
            if (!st) st = add_edge(b, *s, ks, GNFA_EPS, 0, 0);
            if (!st) st = add_edge(b, ke, *e, GNFA_EPS, 0, 0);
            if (st) return st;
        }
        return TR_OK;
    }
    case GRE_REPEAT:
        return build_repeat(b, x, s, e);
    case GRE_REF: /* grammars only: grammar/cfg/ebnf_nfa.c */
    case GRE_DFA:
        break;
    }
    return tr_gcc_fail(b->cc, TR_ERR_INTERNAL, x->offset, "unknown AST node");
}

tr_status tr_nfa_build(gcc *cc, const gre_node *root, gnfa *out) {
    memset(out, 0, sizeof *out);
    nb b = {.cc = cc, .n = out};
    tr_status st = build(&b, root, &out->start, &out->final);
    if (st) {
        tr_nfa_free(cc, out);
        return st;
    }
    return TR_OK;
}

tr_status tr_nfa_add_fragment(gcc *cc, gnfa *n, const gre_node *ast, uint32_t *s,
                              uint32_t *e) {
    nb b = {.cc = cc, .n = n};
    return build(&b, ast, s, e);
}

void tr_nfa_free(gcc *cc, gnfa *n) {
    tr_gcc_refund(cc, (size_t)n->cap_states * sizeof *n->head);
    tr_gcc_refund(cc, (size_t)n->cap_edges * sizeof *n->edges);
    free(n->head);
    free(n->edges);
    memset(n, 0, sizeof *n);
}
