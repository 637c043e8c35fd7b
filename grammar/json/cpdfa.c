/* cpdfa.c — DFAs over code points, for the boolean operations JSON
 * Schema needs on string languages, and their way back to a regex.
 *
 * Layering: grammar/json (json_internal.h), over nfa.c and
 * dfa.c (regex AST -> minimized byte DFA). Arena memory of the compile
 * context; budgets: state counts, the expression size of the result,
 * and the context's clock. Single-threaded per compile.
 *
 * Why: the grammar text can only say "this regex"; it cannot say
 * "pattern AND maxLength", "any key but the listed ones" or "matches
 * pattern p but not q". Those are intersections and complements of
 * regular languages, easy on DFAs: build the byte DFA of each side with
 * the regex compiler, read it back as a DFA over code points (every
 * path of the byte DFA spells valid UTF-8, so each state at a character
 * boundary has edges labelled with code-point ranges), combine by the
 * product construction, and turn the result back into a regex AST by
 * state elimination (Brzozowski-McCluskey), eliminating first the
 * states with the fewest in x out edges. State elimination can blow up
 * on automata with many crossing loops; the tree size of the expression
 * is tracked as it grows and capped (TR_ERR_LIMIT), so callers can
 * refuse the schema instead of producing a gigantic grammar, or take the
 * direct way: tr_cpdfa_encode makes the byte DFA of the language's JSON
 * encodings, which the grammar takes as a terminal of its own.
 *
 * Representation: state s has edges e[off[s] .. off[s+1]), sorted by
 * code point, disjoint; a code point with no edge dies. n == 0 is the
 * empty language. Automata from here are trimmed: every state is
 * reachable and can reach acceptance.
 */
#include <string.h>

#include "base/utf8.h"
#include "grammar/json/json_internal.h"

#define CPD_MAX_STATES 200000u

/* ---- building helpers ---- */

typedef struct ebuf {
    cpd_edge *v;
    uint32_t n, cap;
} ebuf;

static tr_status ebuf_push(gcc *cc, ebuf *b, uint32_t lo, uint32_t hi, uint32_t to) {
    if (b->n && b->v[b->n - 1].to == to && b->v[b->n - 1].hi + 1 == lo) {
        b->v[b->n - 1].hi = hi; /* merge with the previous range */
        return TR_OK;
    }
    if (b->n && b->v[b->n - 1].to == to && b->v[b->n - 1].hi == GCP_SURR_LO - 1 &&
        lo == GCP_SURR_HI + 1) {
        b->v[b->n - 1].hi = hi; /* across the surrogate gap: same set */
        return TR_OK;
    }
    if (b->n == b->cap) {
        uint32_t nc = b->cap ? b->cap * 2 : 16;
        if (nc > (1u << 26))
            return tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "string automaton too large");
        cpd_edge *v = tr_gcc_alloc(cc, (size_t)nc * sizeof *v);
        if (!v) return cc->err;
        if (b->n) memcpy(v, b->v, b->n * sizeof *v);
        b->v = v;
        b->cap = nc;
    }
    b->v[b->n++] = (cpd_edge){lo, hi, to};
    return TR_OK;
}

/* The per-state edge lists gathered in order into CSR form. */
typedef struct builder {
    uint32_t n, cap;
    uint8_t *acc;
    uint32_t *off;
    ebuf e;
} builder;

static tr_status b_state(gcc *cc, builder *b, bool acc, uint32_t *id) {
    if (b->n >= CPD_MAX_STATES)
        return tr_gcc_fail(cc, TR_ERR_LIMIT, 0,
                           "string automaton has more than %u states", CPD_MAX_STATES);
    if (b->n + 1 >= b->cap) {
        uint32_t nc = b->cap ? b->cap * 2 : 64;
        uint8_t *a = tr_gcc_alloc(cc, nc);
        uint32_t *o = tr_gcc_alloc(cc, (size_t)(nc + 1) * sizeof *o);
        if (!a || !o) return cc->err;
        if (b->n) memcpy(a, b->acc, b->n), memcpy(o, b->off, (b->n + 1) * sizeof *o);
        b->acc = a;
        b->off = o;
        b->cap = nc;
    }
    b->acc[b->n] = acc;
    *id = b->n++;
    return TR_OK;
}

/* ---- from a byte DFA ---- */

typedef struct conv {
    gcc *cc;
    const gdfa *d;
    uint32_t *map;          /* byte state -> code-point state, UINT32_MAX */
    ebuf **memo;            /* [n_states * 3] suffix tables, per depth */
} conv;

/* Ranges of suffix values (k continuation bytes from byte state m) and
 * the boundary byte states they reach. */
static tr_status suffix(conv *c, uint32_t m, uint32_t k, const ebuf **out) {
    size_t slot = (size_t)m * 3 + (k - 1);
    if (c->memo[slot]) {
        *out = c->memo[slot];
        return TR_OK;
    }
    ebuf *r = tr_gcc_alloc(c->cc, sizeof *r);
    if (!r) return c->cc->err;
    for (uint32_t b = 0x80; b <= 0xBF; b++) {
        uint32_t u = gdfa_step(c->d, m, (uint8_t)b);
        if (u == GDFA_DEAD) continue;
        uint32_t v = b & 0x3F;
        tr_status st;
        if (k == 1) {
            st = ebuf_push(c->cc, r, v, v, u);
        } else {
            const ebuf *sub;
            if ((st = suffix(c, u, k - 1, &sub))) return st;
            uint32_t sh = 6 * (k - 1);
            for (uint32_t i = 0; !st && i < sub->n; i++)
                st = ebuf_push(c->cc, r, (v << sh) + sub->v[i].lo, (v << sh) + sub->v[i].hi,
                               sub->v[i].to);
        }
        if (st) return st;
    }
    c->memo[slot] = r;
    *out = r;
    return TR_OK;
}

tr_status tr_cpdfa_from_ast(gcc *cc, const gre_node *ast, cpdfa *out) {
    memset(out, 0, sizeof *out);
    gnfa nfa = {0};
    gdfa d = {0};
    tr_status st = tr_nfa_build(cc, ast, &nfa);
    if (!st) st = tr_dfa_build(cc, &nfa, &d);
    tr_nfa_free(cc, &nfa);
    if (st) return st;
    if (d.start == GDFA_DEAD) {
        tr_dfa_free(&d);
        return TR_OK;
    }
    conv c = {.cc = cc, .d = &d};
    c.map = tr_gcc_alloc(cc, (size_t)d.n_states * sizeof *c.map);
    c.memo = tr_gcc_alloc(cc, (size_t)d.n_states * 3 * sizeof *c.memo);
    builder b = {0};
    uint32_t *queue = tr_gcc_alloc(cc, (size_t)d.n_states * sizeof *queue);
    if (!c.map || !c.memo || !queue) {
        tr_dfa_free(&d);
        return cc->err;
    }
    memset(c.map, 0xff, (size_t)d.n_states * sizeof *c.map);
    uint32_t qh = 0, qn = 0;
    queue[qn++] = d.start;
    st = b_state(cc, &b, d.accept[d.start], &c.map[d.start]);
    ebuf *edges = tr_gcc_alloc(cc, (size_t)d.n_states * sizeof *edges);
    if (!edges) st = cc->err;
    while (!st && qh < qn) {
        uint32_t s = queue[qh++];
        ebuf *e = &edges[c.map[s]];
        for (uint32_t lead = 0; !st && lead < 0xF5; lead++) {
            uint32_t t = gdfa_step(&d, s, (uint8_t)lead);
            if (t == GDFA_DEAD) continue;
            uint32_t k = lead < 0x80 ? 0 : lead < 0xE0 ? 1 : lead < 0xF0 ? 2 : 3;
            uint32_t base = k == 0 ? lead : k == 1 ? (lead & 0x1F) << 6
                            : k == 2 ? (lead & 0x0F) << 12 : (lead & 0x07) << 18;
            cpd_edge one = {0, 0, t};
            const cpd_edge *list = &one;
            uint32_t nl = 1;
            if (k) {
                const ebuf *sub;
                if ((st = suffix(&c, t, k, &sub))) break;
                list = sub->v;
                nl = sub->n;
            }
            for (uint32_t i = 0; !st && i < nl; i++) {
                uint32_t to = list[i].to;
                if (c.map[to] == UINT32_MAX) {
                    st = b_state(cc, &b, d.accept[to], &c.map[to]);
                    queue[qn++] = to;
                }
                if (!st) st = ebuf_push(cc, e, base + list[i].lo, base + list[i].hi, c.map[to]);
            }
        }
        if (!st) st = tr_gcc_poll_time(cc);
    }
    tr_dfa_free(&d);
    if (st) return st;
    /* CSR */
    uint64_t total = 0;
    for (uint32_t i = 0; i < b.n; i++) total += edges[i].n;
    out->e = tr_gcc_alloc(cc, (size_t)(total ? total : 1) * sizeof *out->e);
    out->off = tr_gcc_alloc(cc, (size_t)(b.n + 1) * sizeof *out->off);
    if (!out->e || !out->off) return cc->err;
    uint32_t k = 0;
    for (uint32_t i = 0; i < b.n; i++) {
        out->off[i] = k;
        if (edges[i].n) memcpy(out->e + k, edges[i].v, edges[i].n * sizeof *out->e);
        k += edges[i].n;
    }
    out->off[b.n] = k;
    out->n = b.n;
    out->start = 0;
    out->acc = b.acc;
    return TR_OK;
}

/* ---- finite sets and lengths ---- */

typedef struct tnode {
    uint32_t cp, first, next; /* first child, next sibling (UINT32_MAX) */
    bool acc;
} tnode;

tr_status tr_cpdfa_from_strings(gcc *cc, const char *const *strs, const size_t *lens,
                                uint32_t n, cpdfa *out) {
    memset(out, 0, sizeof *out);
    uint64_t cap = 1;
    for (uint32_t i = 0; i < n; i++) cap += lens[i];
    if (cap > CPD_MAX_STATES)
        return tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "too many or too long strings (%llu bytes)",
                           (unsigned long long)cap);
    tnode *t = tr_gcc_alloc(cc, (size_t)cap * sizeof *t);
    if (!t) return cc->err;
    uint32_t nn = 1;
    t[0] = (tnode){0, UINT32_MAX, UINT32_MAX, false};
    for (uint32_t i = 0; i < n; i++) {
        uint32_t at = 0;
        for (size_t j = 0; j < lens[i];) {
            uint32_t cp;
            int k = tr_utf8_decode((const uint8_t *)strs[i] + j, lens[i] - j, &cp);
            if (k <= 0) return tr_gcc_fail(cc, TR_ERR_FORMAT, j, "invalid UTF-8 in a string");
            j += (size_t)k;
            /* children sorted by code point */
            uint32_t *link = &t[at].first;
            while (*link != UINT32_MAX && t[*link].cp < cp) link = &t[*link].next;
            if (*link == UINT32_MAX || t[*link].cp != cp) {
                t[nn] = (tnode){cp, UINT32_MAX, *link, false};
                *link = nn++;
            }
            at = *link;
        }
        t[at].acc = true;
    }
    out->n = nn;
    out->acc = tr_gcc_alloc(cc, nn);
    out->off = tr_gcc_alloc(cc, (size_t)(nn + 1) * sizeof *out->off);
    out->e = tr_gcc_alloc(cc, (size_t)nn * sizeof *out->e);
    if (!out->acc || !out->off || !out->e) return cc->err;
    uint32_t k = 0;
    for (uint32_t s = 0; s < nn; s++) {
        out->acc[s] = t[s].acc;
        out->off[s] = k;
        for (uint32_t c = t[s].first; c != UINT32_MAX; c = t[c].next)
            out->e[k++] = (cpd_edge){t[c].cp, t[c].cp, c};
    }
    out->off[nn] = k;
    return TR_OK;
}

tr_status tr_cpdfa_length(gcc *cc, uint32_t min, uint32_t max, cpdfa *out) {
    memset(out, 0, sizeof *out);
    if (max != UINT32_MAX && max < min) return TR_OK;
    uint32_t last = max == UINT32_MAX ? min : max;
    if (last >= CPD_MAX_STATES)
        return tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "string length %u too large for an automaton",
                           last);
    uint32_t n = last + 1;
    out->n = n;
    out->acc = tr_gcc_alloc(cc, n);
    out->off = tr_gcc_alloc(cc, (size_t)(n + 1) * sizeof *out->off);
    out->e = tr_gcc_alloc(cc, (size_t)n * 2 * sizeof *out->e);
    if (!out->acc || !out->off || !out->e) return cc->err;
    uint32_t k = 0;
    for (uint32_t s = 0; s < n; s++) {
        out->acc[s] = s >= min;
        out->off[s] = k;
        uint32_t to = s + 1 < n ? s + 1 : (max == UINT32_MAX ? s : UINT32_MAX);
        if (to == UINT32_MAX) continue;
        out->e[k++] = (cpd_edge){0, GCP_SURR_LO - 1, to};
        out->e[k++] = (cpd_edge){GCP_SURR_HI + 1, GCP_MAX, to};
    }
    out->off[n] = k;
    return TR_OK;
}

/* ---- product ---- */

typedef struct pmap {
    uint64_t *key; /* (a + 1) << 32 | (b + 1); 0 empty */
    uint32_t *val;
    uint32_t cap, n;
} pmap;

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static tr_status pmap_get(gcc *cc, pmap *m, uint64_t key, uint32_t next_id, uint32_t *id,
                          bool *fresh) {
    if ((uint64_t)(m->n + 1) * 2 > m->cap) {
        uint32_t nc = m->cap ? m->cap * 2 : 256;
        uint64_t *k = tr_gcc_alloc(cc, (size_t)nc * sizeof *k);
        uint32_t *v = tr_gcc_alloc(cc, (size_t)nc * sizeof *v);
        if (!k || !v) return cc->err;
        for (uint32_t i = 0; i < m->cap; i++) {
            if (!m->key[i]) continue;
            uint32_t j = (uint32_t)mix(m->key[i]) & (nc - 1);
            while (k[j]) j = (j + 1) & (nc - 1);
            k[j] = m->key[i];
            v[j] = m->val[i];
        }
        m->key = k;
        m->val = v;
        m->cap = nc;
    }
    uint32_t j = (uint32_t)mix(key) & (m->cap - 1);
    while (m->key[j] && m->key[j] != key) j = (j + 1) & (m->cap - 1);
    *fresh = !m->key[j];
    if (*fresh) {
        m->key[j] = key;
        m->val[j] = next_id;
        m->n++;
    }
    *id = m->val[j];
    return TR_OK;
}

static const cpd_edge *edge_at(const cpdfa *a, uint32_t s, uint32_t *n) {
    if (s == UINT32_MAX || a->n == 0) {
        *n = 0;
        return NULL;
    }
    *n = a->off[s + 1] - a->off[s];
    return a->e + a->off[s];
}

static bool op_acc(cpd_op op, bool x, bool y) {
    return op == CPD_AND ? (x && y) : op == CPD_OR ? (x || y) : (x && !y);
}

static bool op_live(cpd_op op, bool x, bool y) {
    return op == CPD_AND ? (x && y) : op == CPD_OR ? (x || y) : x;
}

/* Removes the states that cannot reach acceptance; renumbers. */
static tr_status trim(gcc *cc, const builder *b, const ebuf *edges, uint32_t start, cpdfa *out) {
    uint32_t n = b->n;
    memset(out, 0, sizeof *out);
    uint8_t *live = tr_gcc_alloc(cc, n ? n : 1);
    uint32_t *map = tr_gcc_alloc(cc, (size_t)(n ? n : 1) * sizeof *map);
    if (!live || !map) return cc->err;
    /* backwards breadth-first search from the accepting states */
    uint32_t *roff = tr_gcc_alloc(cc, (size_t)(n + 1) * sizeof *roff);
    uint32_t *queue = tr_gcc_alloc(cc, (size_t)(n ? n : 1) * sizeof *queue);
    if (!roff || !queue) return cc->err;
    uint64_t ne = 0;
    for (uint32_t s = 0; s < n; s++) {
        ne += edges[s].n;
        for (uint32_t i = 0; i < edges[s].n; i++) roff[edges[s].v[i].to + 1]++;
    }
    for (uint32_t s = 0; s < n; s++) roff[s + 1] += roff[s];
    uint32_t *rsrc = tr_gcc_alloc(cc, (size_t)(ne ? ne : 1) * sizeof *rsrc);
    uint32_t *fill = tr_gcc_alloc(cc, (size_t)(n ? n : 1) * sizeof *fill);
    if (!rsrc || !fill) return cc->err;
    for (uint32_t s = 0; s < n; s++)
        for (uint32_t i = 0; i < edges[s].n; i++) {
            uint32_t t = edges[s].v[i].to;
            rsrc[roff[t] + fill[t]++] = s;
        }
    uint32_t qn = 0;
    for (uint32_t s = 0; s < n; s++)
        if (b->acc[s]) live[s] = 1, queue[qn++] = s;
    for (uint32_t h = 0; h < qn; h++) {
        uint32_t t = queue[h];
        for (uint32_t k = roff[t]; k < roff[t + 1]; k++)
            if (!live[rsrc[k]]) live[rsrc[k]] = 1, queue[qn++] = rsrc[k];
    }
    if (!live[start]) return TR_OK; /* empty language */
    uint32_t m = 0;
    for (uint32_t s = 0; s < n; s++) map[s] = live[s] ? m++ : UINT32_MAX;
    uint64_t total = 0;
    for (uint32_t s = 0; s < n; s++)
        if (live[s]) total += edges[s].n;
    out->acc = tr_gcc_alloc(cc, m);
    out->off = tr_gcc_alloc(cc, (size_t)(m + 1) * sizeof *out->off);
    out->e = tr_gcc_alloc(cc, (size_t)(total ? total : 1) * sizeof *out->e);
    if (!out->acc || !out->off || !out->e) return cc->err;
    uint32_t k = 0;
    for (uint32_t s = 0; s < n; s++) {
        if (!live[s]) continue;
        uint32_t t = map[s];
        out->acc[t] = b->acc[s];
        out->off[t] = k;
        for (uint32_t i = 0; i < edges[s].n; i++) {
            const cpd_edge *e = &edges[s].v[i];
            if (!live[e->to]) continue;
            cpd_edge ne = {e->lo, e->hi, map[e->to]};
            if (k > out->off[t] && out->e[k - 1].to == ne.to && out->e[k - 1].hi + 1 == ne.lo)
                out->e[k - 1].hi = ne.hi;
            else
                out->e[k++] = ne;
        }
    }
    out->off[m] = k;
    out->n = m;
    out->start = map[start];
    return TR_OK;
}

/* Pair states of a product, with their edge lists, grown together. */
typedef struct ptab {
    ebuf *edges;
    uint32_t (*pairs)[2];
    uint32_t n, cap;
} ptab;

static tr_status ptab_add(gcc *cc, ptab *t, uint32_t x, uint32_t y) {
    if (t->n >= CPD_MAX_STATES)
        return tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "string automaton has more than %u states",
                           CPD_MAX_STATES);
    if (t->n == t->cap) {
        uint32_t nc = t->cap ? t->cap * 2 : 64;
        ebuf *ne = tr_gcc_alloc(cc, (size_t)nc * sizeof *ne);
        uint32_t(*np)[2] = tr_gcc_alloc(cc, (size_t)nc * sizeof *np);
        if (!ne || !np) return cc->err;
        if (t->n) memcpy(ne, t->edges, t->n * sizeof *ne), memcpy(np, t->pairs, t->n * sizeof *np);
        t->edges = ne;
        t->pairs = np;
        t->cap = nc;
    }
    t->pairs[t->n][0] = x;
    t->pairs[t->n][1] = y;
    t->n++;
    return TR_OK;
}

static uint64_t pkey(uint32_t x, uint32_t y) {
    return ((uint64_t)(x + 1) << 32) | (uint32_t)(y + 1);
}

/* The edges of pair state `at`: sweep the two sorted range lists. */
static tr_status product_state(gcc *cc, const cpdfa *a, const cpdfa *b, cpd_op op, pmap *m,
                               ptab *t, uint32_t at) {
    uint32_t x = t->pairs[at][0], y = t->pairs[at][1];
    uint32_t nx, ny;
    const cpd_edge *ex = edge_at(a, x, &nx), *ey = edge_at(b, y, &ny);
    uint32_t i = 0, j = 0, cp = 0;
    for (;;) {
        while (i < nx && ex[i].hi < cp) i++;
        while (j < ny && ey[j].hi < cp) j++;
        if (i >= nx && j >= ny) return TR_OK;
        bool inx = i < nx && ex[i].lo <= cp, iny = j < ny && ey[j].lo <= cp;
        uint32_t end = GCP_MAX;
        if (i < nx) end = TR_MIN(end, inx ? ex[i].hi : ex[i].lo - 1);
        if (j < ny) end = TR_MIN(end, iny ? ey[j].hi : ey[j].lo - 1);
        if (op_live(op, inx, iny)) {
            uint32_t tx = inx ? ex[i].to : UINT32_MAX, ty = iny ? ey[j].to : UINT32_MAX;
            uint32_t tid;
            bool fresh;
            tr_status st = pmap_get(cc, m, pkey(tx, ty), t->n, &tid, &fresh);
            if (!st && fresh) st = ptab_add(cc, t, tx, ty);
            if (!st) st = ebuf_push(cc, &t->edges[at], cp, end, tid);
            if (st) return st;
        }
        if (end == GCP_MAX) return TR_OK;
        cp = end + 1;
    }
}

tr_status tr_cpdfa_product(gcc *cc, const cpdfa *a, const cpdfa *b, cpd_op op, cpdfa *out) {
    memset(out, 0, sizeof *out);
    uint32_t sa = a->n ? a->start : UINT32_MAX, sb = b->n ? b->start : UINT32_MAX;
    if (!op_live(op, sa != UINT32_MAX, sb != UINT32_MAX)) return TR_OK;
    pmap m = {0};
    ptab t = {0};
    uint32_t id;
    bool fresh;
    tr_status st = pmap_get(cc, &m, pkey(sa, sb), 0, &id, &fresh);
    if (!st) st = ptab_add(cc, &t, sa, sb);
    builder bl = {0};
    for (uint32_t at = 0; !st && at < t.n; at++) {
        uint32_t x = t.pairs[at][0], y = t.pairs[at][1];
        bool ax = x != UINT32_MAX && a->acc[x], ay = y != UINT32_MAX && b->acc[y];
        st = b_state(cc, &bl, op_acc(op, ax, ay), &id);
        if (!st) st = product_state(cc, a, b, op, &m, &t, at);
        if (!st) st = tr_gcc_poll_time(cc);
    }
    if (st) return st;
    return trim(cc, &bl, t.edges, 0, out);
}

tr_status tr_cpdfa_complement(gcc *cc, const cpdfa *a, cpdfa *out) {
    cpdfa all;
    tr_status st = tr_cpdfa_length(cc, 0, UINT32_MAX, &all);
    if (st) return st;
    return tr_cpdfa_product(cc, &all, a, CPD_MINUS, out);
}

/* Strings accepted from state s (color: 0 new, 1 on the path, 2 done),
 * saturating at cap + 1; UINT64_MAX on a cycle (or a path too deep to
 * follow), which means "unbounded" to the caller. */
static uint64_t count_from(const cpdfa *a, uint32_t s, uint8_t *color, uint64_t *cnt,
                           uint64_t cap, uint32_t depth) {
    if (color[s] == 2) return cnt[s];
    if (color[s] == 1 || depth > 4096) return UINT64_MAX;
    color[s] = 1;
    uint64_t n = a->acc[s] ? 1 : 0;
    for (uint32_t i = a->off[s]; i < a->off[s + 1] && n <= cap; i++) {
        uint64_t c = count_from(a, a->e[i].to, color, cnt, cap, depth + 1);
        uint64_t w = (uint64_t)(a->e[i].hi - a->e[i].lo) + 1;
        if (c == UINT64_MAX) {
            n = UINT64_MAX;
            break;
        }
        n = c && w > (cap + 1 - n) / c ? cap + 1 : n + c * w;
    }
    color[s] = 2;
    cnt[s] = n;
    return n;
}

tr_status tr_cpdfa_count(gcc *cc, const cpdfa *a, uint64_t cap, uint64_t *out) {
    *out = 0;
    if (a->n == 0) return TR_OK;
    uint8_t *color = tr_gcc_alloc(cc, a->n);
    uint64_t *cnt = tr_gcc_alloc(cc, (size_t)a->n * sizeof *cnt);
    if (!color || !cnt) return cc->err;
    memset(color, 0, a->n);
    uint64_t n = count_from(a, a->start, color, cnt, cap, 0);
    *out = n > cap ? UINT64_MAX : n;
    return TR_OK;
}

bool tr_cpdfa_is_empty(const cpdfa *a) { return a->n == 0; }

bool tr_cpdfa_matches(const cpdfa *a, const char *s, size_t n) {
    if (a->n == 0) return false;
    uint32_t st = a->start;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = tr_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (k <= 0) return false;
        i += (size_t)k;
        uint32_t lo = a->off[st], hi = a->off[st + 1];
        while (lo < hi) { /* binary search */
            uint32_t mid = (lo + hi) / 2;
            if (a->e[mid].hi < cp)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == a->off[st + 1] || a->e[lo].lo > cp) return false;
        st = a->e[lo].to;
    }
    return a->acc[st] != 0;
}

/* ---- Moore minimization ---- */

/* A state's signature under a partition: its edges with targets replaced
 * by their classes, adjacent ranges of one class merged (across the
 * surrogate gap too, which no edge covers), read one merged range at a
 * time from edge *i on. */
typedef struct sig_range {
    uint32_t lo, hi, cls;
} sig_range;

static bool sig_next(const cpdfa *a, const uint32_t *cls, uint32_t s, uint32_t *i,
                     sig_range *r) {
    uint32_t e = *i, end = a->off[s + 1];
    if (e >= end) return false;
    *r = (sig_range){a->e[e].lo, a->e[e].hi, cls[a->e[e].to]};
    for (e++; e < end && cls[a->e[e].to] == r->cls; e++) {
        uint32_t lo = a->e[e].lo;
        bool next = lo == r->hi + 1 || (r->hi == GCP_SURR_LO - 1 && lo == GCP_SURR_HI + 1);
        if (!next) break;
        r->hi = a->e[e].hi;
    }
    *i = e;
    return true;
}

static uint64_t sig_hash(const cpdfa *a, const uint32_t *cls, uint32_t s) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ cls[s];
    uint32_t i = a->off[s];
    sig_range r;
    while (sig_next(a, cls, s, &i, &r)) {
        h = tr_fnv1a_word(h, r.lo);
        h = tr_fnv1a_word(h, r.hi);
        h = tr_fnv1a_word(h, r.cls);
    }
    return h ? h : 1;
}

static bool sig_equal(const cpdfa *a, const uint32_t *cls, uint32_t s, uint32_t t) {
    if (cls[s] != cls[t]) return false;
    uint32_t i = a->off[s], j = a->off[t];
    sig_range x, y;
    for (;;) {
        bool hx = sig_next(a, cls, s, &i, &x), hy = sig_next(a, cls, t, &j, &y);
        if (hx != hy) return false;
        if (!hx) return true;
        if (x.lo != y.lo || x.hi != y.hi || x.cls != y.cls) return false;
    }
}

/* The coarsest partition of a's states that separates accepting from
 * rejecting ones and that every state's signature respects (Moore's
 * fixpoint, unique), found by refining only where something changed: a
 * class is re-examined in a round only for its members whose successors
 * changed class in the round before ("dirty"), since its other members
 * still share one signature (they did when the class last settled, and
 * their successors kept their classes). A class whose members are not
 * all dirty keeps its number for the members that match a clean one;
 * only dirty members move. So a chain of n states costs O(n) signatures
 * in all, where rounds over every state cost n^2 (1.2 s of one MaskBench
 * compile). Signatures are computed against the partition as the round
 * found it; moves are applied after. */
typedef struct refiner {
    uint32_t *cls;                /* class of each state */
    uint32_t *head, *size;        /* per class: first member, member count */
    uint32_t *next, *prev;        /* member lists (UINT32_MAX ends) */
    uint32_t *pred_off, *pred;    /* states with an edge into s */
    uint32_t *dirty, nd;          /* this round's dirty states */
    uint8_t *is_dirty;
    uint32_t *dcount;             /* dirty members per class this round */
    uint32_t *grp;                /* per dirty state: its group (a state) */
    uint64_t *hk;                 /* group table: signature hash */
    uint32_t *hv;                 /* group table: representative + 1 */
    uint32_t *gid;                /* per representative: its group's class */
    uint32_t n_cls;
} refiner;

static void member_unlink(refiner *r, uint32_t s) {
    uint32_t c = r->cls[s];
    if (r->prev[s] != UINT32_MAX) r->next[r->prev[s]] = r->next[s];
    else r->head[c] = r->next[s];
    if (r->next[s] != UINT32_MAX) r->prev[r->next[s]] = r->prev[s];
    r->size[c]--;
}

static void member_push_front(refiner *r, uint32_t s, uint32_t c) {
    r->cls[s] = c;
    r->prev[s] = UINT32_MAX;
    r->next[s] = r->head[c];
    if (r->head[c] != UINT32_MAX) r->prev[r->head[c]] = s;
    r->head[c] = s;
    r->size[c]++;
}

static void mark_dirty(refiner *r, uint32_t s) {
    if (r->is_dirty[s]) return;
    r->is_dirty[s] = 1;
    r->dirty[r->nd++] = s;
    r->dcount[r->cls[s]]++;
    member_unlink(r, s); /* dirty members first: a clean one is found fast */
    member_push_front(r, s, r->cls[s]);
}

/* The group of state s in the round's table of cap slots: an equal
 * signature already there, else s itself. */
static uint32_t group_of(const cpdfa *a, refiner *r, uint32_t s, uint32_t cap) {
    uint64_t h = sig_hash(a, r->cls, s);
    uint32_t j = (uint32_t)(h ^ (h >> 29)) & (cap - 1);
    for (; r->hv[j]; j = (j + 1) & (cap - 1))
        if (r->hk[j] == h && sig_equal(a, r->cls, s, r->hv[j] - 1)) return r->hv[j] - 1;
    r->hk[j] = h;
    r->hv[j] = s + 1;
    return s;
}

/* One round: regroups the dirty states, moves those whose group is not
 * their class's kept one, and marks the next round's dirty states (the
 * predecessors of the moved). Returns the number moved. */
static uint32_t refine_round(const cpdfa *a, refiner *r, uint32_t *moved) {
    uint32_t nd = r->nd, cap = 16;
    while (cap < 4 * nd + 4) cap *= 2;
    memset(r->hv, 0, (size_t)cap * sizeof *r->hv);
    /* a clean member of each partly dirty class goes in first, so that
     * dirty members equal to it join its group, which keeps the class */
    for (uint32_t i = 0; i < nd; i++) {
        uint32_t c = r->cls[r->dirty[i]];
        if (r->dcount[c] == 0 || r->dcount[c] == r->size[c]) continue;
        uint32_t m = r->head[c];
        while (r->is_dirty[m]) m = r->next[m];
        uint32_t g = group_of(a, r, m, cap);
        r->gid[g] = c;
        r->dcount[c] = 0; /* done: its clean members keep c */
    }
    for (uint32_t i = 0; i < nd; i++) r->grp[i] = group_of(a, r, r->dirty[i], cap);
    /* a fully dirty class keeps its number for its first dirty member's
     * group; other new groups get new classes */
    for (uint32_t i = 0; i < nd; i++) {
        uint32_t s = r->dirty[i], g = r->grp[i], c = r->cls[s];
        if (g != s) continue; /* not a group's first: gid set by it */
        if (r->dcount[c] != 0) {
            r->gid[g] = c;
            r->dcount[c] = 0;
        } else {
            r->gid[g] = r->n_cls++;
        }
    }
    uint32_t n_moved = 0;
    for (uint32_t i = 0; i < nd; i++) {
        uint32_t s = r->dirty[i], c = r->gid[r->grp[i]];
        r->is_dirty[s] = 0;
        if (c == r->cls[s]) continue;
        member_unlink(r, s);
        member_push_front(r, s, c);
        moved[n_moved++] = s;
    }
    r->nd = 0;
    for (uint32_t i = 0; i < n_moved; i++)
        for (uint32_t j = r->pred_off[moved[i]]; j < r->pred_off[moved[i] + 1]; j++)
            mark_dirty(r, r->pred[j]);
    return n_moved;
}

/* r's arrays for a's n states, the predecessor lists filled, every state
 * dirty in the first class of its acceptance. */
static tr_status refiner_init(gcc *cc, const cpdfa *a, refiner *r) {
    uint32_t n = a->n, ne = a->off[n], cap = 16;
    while (cap < 4 * n + 4) cap *= 2;
    memset(r, 0, sizeof *r);
    r->cls = tr_gcc_alloc(cc, (size_t)n * sizeof *r->cls);
    r->head = tr_gcc_alloc(cc, (size_t)(n + 2) * sizeof *r->head); /* classes: n + 1 */
    r->size = tr_gcc_alloc(cc, (size_t)(n + 2) * sizeof *r->size); /* classes: n + 1 */
    r->next = tr_gcc_alloc(cc, (size_t)n * sizeof *r->next);
    r->prev = tr_gcc_alloc(cc, (size_t)n * sizeof *r->prev);
    r->pred_off = tr_gcc_alloc(cc, (size_t)(n + 1) * sizeof *r->pred_off);
    r->pred = tr_gcc_alloc(cc, (size_t)(ne ? ne : 1) * sizeof *r->pred);
    r->dirty = tr_gcc_alloc(cc, (size_t)n * sizeof *r->dirty);
    r->is_dirty = tr_gcc_alloc(cc, n);
    r->dcount = tr_gcc_alloc(cc, (size_t)(n + 2) * sizeof *r->dcount); /* classes: n + 1 */
    r->grp = tr_gcc_alloc(cc, (size_t)n * sizeof *r->grp);
    r->gid = tr_gcc_alloc(cc, (size_t)(n + 2) * sizeof *r->gid); /* classes: n + 1 */
    r->hk = tr_gcc_alloc(cc, (size_t)cap * sizeof *r->hk);
    r->hv = tr_gcc_alloc(cc, (size_t)cap * sizeof *r->hv);
    if (!r->cls || !r->head || !r->size || !r->next || !r->prev || !r->pred_off || !r->pred ||
        !r->dirty || !r->is_dirty || !r->dcount || !r->grp || !r->gid || !r->hk || !r->hv)
        return cc->err;
    memset(r->pred_off, 0, (size_t)(n + 1) * sizeof *r->pred_off);
    for (uint32_t i = 0; i < ne; i++) r->pred_off[a->e[i].to + 1]++;
    for (uint32_t s = 0; s < n; s++) r->pred_off[s + 1] += r->pred_off[s];
    uint32_t *fill = r->grp; /* scratch until the first round */
    memcpy(fill, r->pred_off, (size_t)n * sizeof *fill);
    for (uint32_t s = 0; s < n; s++)
        for (uint32_t i = a->off[s]; i < a->off[s + 1]; i++) r->pred[fill[a->e[i].to]++] = s;
    for (uint32_t c = 0; c < n + 2; c++) r->head[c] = UINT32_MAX, r->size[c] = 0, r->dcount[c] = 0;
    r->n_cls = 2;
    for (uint32_t s = n; s-- > 0;) member_push_front(r, s, a->acc[s] != 0);
    for (uint32_t s = 0; s < n; s++) mark_dirty(r, s);
    return TR_OK;
}

tr_status tr_cpdfa_minimize(gcc *cc, const cpdfa *a, cpdfa *out) {
    uint32_t n = a->n;
    if (n == 0 || n > CPD_MAX_STATES) {
        *out = *a;
        return TR_OK;
    }
    refiner r;
    tr_status st = refiner_init(cc, a, &r);
    uint32_t *moved = tr_gcc_alloc(cc, (size_t)n * sizeof *moved);
    if (!st && !moved) st = cc->err;
    while (!st && r.nd > 0) {
        refine_round(a, &r, moved);
        st = tr_gcc_poll_time(cc);
    }
    if (st) return st;
    /* classes numbered in order of their first state */
    uint32_t *num = r.gid, k = 0;
    for (uint32_t c = 0; c < r.n_cls; c++) num[c] = UINT32_MAX;
    for (uint32_t s = 0; s < n; s++)
        if (num[r.cls[s]] == UINT32_MAX) num[r.cls[s]] = k++;
    uint32_t *cls = r.cls;
    for (uint32_t s = 0; s < n; s++) cls[s] = num[cls[s]];
    builder b = {0};
    ebuf *edges = tr_gcc_alloc(cc, (size_t)k * sizeof *edges);
    uint8_t *done = tr_gcc_alloc(cc, k);
    if (!edges || !done) return cc->err;
    for (uint32_t c = 0; c < k; c++) {
        uint32_t id;
        tr_status st = b_state(cc, &b, false, &id);
        if (st) return st;
    }
    for (uint32_t s = 0; s < n; s++) {
        uint32_t c = cls[s];
        if (done[c]) continue;
        done[c] = 1;
        b.acc[c] = a->acc[s];
        for (uint32_t i = a->off[s]; i < a->off[s + 1]; i++) {
            tr_status st = ebuf_push(cc, &edges[c], a->e[i].lo, a->e[i].hi, cls[a->e[i].to]);
            if (st) return st;
        }
    }
    return trim(cc, &b, edges, cls[a->start], out);
}

/* ---- state elimination ---- */

typedef struct sedge {
    uint32_t to;
    gre_node *re;
    uint64_t size; /* tree size of re */
} sedge;

typedef struct selist {
    sedge *v;
    uint32_t n, cap;
} selist;

typedef struct elim {
    gcc *cc;
    uint32_t n;
    selist *out, *in; /* in-lists hold (from, NULL, 0) */
    uint8_t *gone;
    uint64_t max;
} elim;

static sedge *find(selist *l, uint32_t to) {
    for (uint32_t i = 0; i < l->n; i++)
        if (l->v[i].to == to) return &l->v[i];
    return NULL;
}

static tr_status push(gcc *cc, selist *l, uint32_t to, gre_node *re, uint64_t size) {
    if (l->n == l->cap) {
        uint32_t nc = l->cap ? l->cap * 2 : 4;
        sedge *v = tr_gcc_alloc(cc, (size_t)nc * sizeof *v);
        if (!v) return cc->err;
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = nc;
    }
    l->v[l->n++] = (sedge){to, re, size};
    return TR_OK;
}

static void drop(selist *l, uint32_t to) {
    for (uint32_t i = 0; i < l->n; i++)
        if (l->v[i].to == to) {
            l->v[i] = l->v[--l->n];
            return;
        }
}

/* R(p,q) |= re */
static tr_status add_edge(elim *el, uint32_t p, uint32_t q, gre_node *re, uint64_t size) {
    sedge *e = find(&el->out[p], q);
    if (!e) {
        tr_status st = push(el->cc, &el->out[p], q, re, size);
        if (!st) st = push(el->cc, &el->in[q], p, NULL, 0);
        return st;
    }
    gre_node *a = e->re;
    if (a->kind == GRE_SET && re->kind == GRE_SET) {
        gre_node *u = tr_js_ast_set(el->cc, 0, 0);
        if (!u) return el->cc->err;
        u->set.n = 0;
        if (tr_cpset_add_set(el->cc, &u->set, &a->set) ||
            tr_cpset_add_set(el->cc, &u->set, &re->set))
            return el->cc->err;
        tr_cpset_normalize(&u->set);
        e->re = u;
        e->size = 1;
        return TR_OK;
    }
    if (a->kind == GRE_EMPTY || re->kind == GRE_EMPTY) {
        gre_node *other = a->kind == GRE_EMPTY ? re : a;
        uint64_t os = a->kind == GRE_EMPTY ? size : e->size;
        if (other->kind == GRE_EMPTY) return TR_OK;
        e->re = tr_js_ast_rep(el->cc, other, 0, 1);
        e->size = os + 1;
        return e->re ? TR_OK : el->cc->err;
    }
    e->re = tr_js_ast_alt(el->cc, a, re);
    e->size = e->size + size + 1;
    return e->re ? TR_OK : el->cc->err;
}

/* ---- the order of elimination: the live state of least in * out
 * edges, the lowest index among equals. A binary heap of (cost, state)
 * with stale entries left in and skipped when popped (the state gone, or
 * its cost changed since): a state's costs change only when a neighbour
 * is eliminated, and each change pushes its new cost, so the top valid
 * entry is always the least (cost, state) pair, what a scan of every
 * state would pick, without the scan's n^2 (0.9 s of one MaskBench
 * compile). */

typedef struct cheap {
    uint64_t *v; /* cost << 32 | state: ordered as (cost, state) */
    uint32_t n, cap;
} cheap;

/* s's in * out edges, capped to 32 bits (past the cap: by state). */
static uint64_t state_cost(const elim *el, uint32_t s) {
    uint64_t c = (uint64_t)el->in[s].n * el->out[s].n;
    return c > UINT32_MAX ? UINT32_MAX : c;
}

static tr_status cheap_push(elim *el, cheap *h, uint32_t s) {
    uint64_t c = state_cost(el, s);
    if (h->n == h->cap) {
        uint32_t nc = h->cap ? h->cap * 2 : 256;
        uint64_t *v = tr_gcc_alloc(el->cc, (size_t)nc * sizeof *v);
        if (!v) return el->cc->err;
        if (h->n) memcpy(v, h->v, h->n * sizeof *v);
        h->v = v, h->cap = nc;
    }
    uint32_t i = h->n++;
    uint64_t key = c << 32 | s;
    while (i > 0 && h->v[(i - 1) / 2] > key) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = key;
    return TR_OK;
}

static uint64_t cheap_pop(cheap *h) {
    uint64_t top = h->v[0], last = h->v[--h->n];
    uint32_t i = 0;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->v[c + 1] < h->v[c]) c++;
        if (h->v[c] >= last) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

/* The next state to eliminate (UINT32_MAX: none left). */
static uint32_t cheap_next(const elim *el, cheap *h, uint32_t n_states) {
    while (h->n) {
        uint64_t key = cheap_pop(h);
        uint32_t s = (uint32_t)key;
        if (!el->gone[s] && state_cost(el, s) == key >> 32 && s < n_states)
            return s;
    }
    return UINT32_MAX;
}

static tr_status eliminate(elim *el, uint32_t k) {
    sedge *self = find(&el->out[k], k);
    gre_node *loop = self ? tr_js_ast_rep(el->cc, self->re, 0, GRE_INF) : NULL;
    uint64_t ls = self ? self->size + 1 : 0;
    if (self && !loop) return el->cc->err;
    for (uint32_t i = 0; i < el->in[k].n; i++) {
        uint32_t p = el->in[k].v[i].to;
        if (p == k) continue;
        sedge *pk = find(&el->out[p], k);
        for (uint32_t j = 0; j < el->out[k].n; j++) {
            sedge kq = el->out[k].v[j];
            if (kq.to == k) continue;
            gre_node *re = pk->re;
            uint64_t size = pk->size + kq.size + ls + 1;
            if (size > el->max)
                return tr_gcc_fail(el->cc, TR_ERR_LIMIT, 0,
                                   "string constraint too complex to express as a regex "
                                   "(over %llu regex nodes)",
                                   (unsigned long long)el->max);
            if (loop) re = tr_js_ast_cat(el->cc, re, loop);
            re = tr_js_ast_cat(el->cc, re, kq.re);
            if (!re) return el->cc->err;
            tr_status st = add_edge(el, p, kq.to, re, size);
            if (st) return st;
            pk = find(&el->out[p], k); /* the list may have moved */
        }
        drop(&el->out[p], k);
    }
    for (uint32_t j = 0; j < el->out[k].n; j++)
        if (el->out[k].v[j].to != k) drop(&el->in[el->out[k].v[j].to], k);
    el->out[k].n = el->in[k].n = 0;
    el->gone[k] = 1;
    return tr_gcc_poll_time(el->cc);
}

/* Eliminates k, then queues the new costs of its neighbours (eliminate
 * empties k's lists by their counts only, and never writes them: the
 * entries stay readable). */
static tr_status eliminate_and_requeue(elim *el, cheap *h, uint32_t k, uint32_t n_states) {
    const selist in = el->in[k], out = el->out[k];
    tr_status st = eliminate(el, k);
    for (uint32_t i = 0; !st && i < in.n; i++)
        if (in.v[i].to < n_states && !el->gone[in.v[i].to]) st = cheap_push(el, h, in.v[i].to);
    for (uint32_t i = 0; !st && i < out.n; i++)
        if (out.v[i].to < n_states && !el->gone[out.v[i].to])
            st = cheap_push(el, h, out.v[i].to);
    return st;
}

tr_status tr_cpdfa_to_ast(gcc *cc, const cpdfa *a, uint32_t max_nodes, gre_node **out) {
    if (a->n == 0) return tr_gcc_fail(cc, TR_ERR_FORMAT, 0, "string constraint matches nothing");
    elim el = {.cc = cc, .n = a->n + 2, .max = max_nodes};
    uint32_t S = a->n, F = a->n + 1;
    el.out = tr_gcc_alloc(cc, (size_t)el.n * sizeof *el.out);
    el.in = tr_gcc_alloc(cc, (size_t)el.n * sizeof *el.in);
    el.gone = tr_gcc_alloc(cc, el.n);
    if (!el.out || !el.in || !el.gone) return cc->err;
    tr_status st = TR_OK;
    for (uint32_t s = 0; !st && s < a->n; s++) {
        for (uint32_t i = a->off[s]; !st && i < a->off[s + 1]; i++) {
            const cpd_edge *e = &a->e[i];
            gre_node *re = tr_js_ast_set(cc, e->lo, e->hi);
            st = re ? add_edge(&el, s, e->to, re, 1) : cc->err;
        }
        if (!st && a->acc[s]) {
            gre_node *eps = tr_js_ast_empty(cc);
            st = eps ? add_edge(&el, s, F, eps, 1) : cc->err;
        }
    }
    gre_node *eps = tr_js_ast_empty(cc);
    if (!st) st = eps ? add_edge(&el, S, a->start, eps, 1) : cc->err;
    cheap h = {0};
    for (uint32_t s = 0; !st && s < a->n; s++) st = cheap_push(&el, &h, s);
    for (uint32_t round = 0; !st && round < a->n; round++) {
        uint32_t best = cheap_next(&el, &h, a->n);
        if (best == UINT32_MAX) break; /* cannot happen: a state per round */
        st = eliminate_and_requeue(&el, &h, best, a->n);
    }
    if (st) return st;
    sedge *e = find(&el.out[S], F);
    if (!e) return tr_gcc_fail(cc, TR_ERR_FORMAT, 0, "string constraint matches nothing");
    gre_node *r = tr_js_ast_compress(cc, e->re);
    if (!r) return cc->err;
    /* the regex compiler nests groups at most max_nesting (200) deep */
    uint32_t depth = tr_js_ast_depth(cc, r);
    uint64_t size = tr_js_ast_tree_size(cc, r);
    if (depth > 150 || size > max_nodes)
        return tr_gcc_fail(cc, TR_ERR_LIMIT, 0,
                           "string constraint too complex to express as a regex (%llu nodes "
                           "nested %u deep)",
                           (unsigned long long)size, depth);
    *out = r;
    return TR_OK;
}

/* ---- the direct way: the encodings as a byte DFA ---- */

/* The set of code points that lead from state s to state `to`. */
static tr_status edge_set(gcc *cc, const cpdfa *a, uint32_t s, uint32_t to, gcpset *out) {
    memset(out, 0, sizeof *out);
    for (uint32_t j = a->off[s]; j < a->off[s + 1]; j++)
        if (a->e[j].to == to && tr_cpset_add(cc, out, a->e[j].lo, a->e[j].hi)) return cc->err;
    tr_cpset_normalize(out);
    return TR_OK;
}

/* Links from -> to in n by the JSON encodings of the code points of set
 * (tr_js_str_unit_regex's regex, built as an NFA fragment), or, plain,
 * by their UTF-8 bytes. */
static tr_status encoded_edge(gcc *cc, gnfa *n, const gcpset *set, bool plain, uint32_t from,
                              uint32_t to, js_buf *b) {
    gre_node *ast = NULL;
    tr_status st = TR_OK;
    if (plain) {
        for (uint32_t i = 0; i < set->n; i++) {
            gre_node *r = tr_js_ast_set(cc, set->r[i][0], set->r[i][1]);
            ast = ast && r ? tr_js_ast_alt(cc, ast, r) : r;
        }
        if (!ast) return cc->err ? cc->err : TR_ERR_NOMEM;
    } else {
        b->n = 0;
        tr_js_str_unit_regex(set, b);
        if (!js_buf_ok(b)) return cc->err ? cc->err : TR_ERR_NOMEM;
        st = tr_regex_parse(cc, b->p, b->n, &ast);
    }
    uint32_t fs, fe;
    if (!st) st = tr_nfa_add_fragment(cc, n, ast, &fs, &fe);
    if (!st) st = tr_nfa_add_edge(cc, n, from, fs, GNFA_EPS, 0, 0);
    if (!st) st = tr_nfa_add_edge(cc, n, fe, to, GNFA_EPS, 0, 0);
    return st;
}

tr_status tr_cpdfa_encode(gcc *cc, const cpdfa *a, bool plain, gdfa *out) {
    if (a->n == 0) return tr_gcc_fail(cc, TR_ERR_FORMAT, 0, "string constraint matches nothing");
    gnfa nfa = {0};
    uint32_t *st_of = tr_gcc_alloc(cc, (size_t)a->n * sizeof *st_of);
    uint32_t fin = 0;
    tr_status st = st_of ? tr_nfa_new_state(cc, &nfa, &fin) : cc->err;
    for (uint32_t s = 0; !st && s < a->n; s++) st = tr_nfa_new_state(cc, &nfa, &st_of[s]);
    js_buf b;
    tr_js_buf_init(&b, cc);
    for (uint32_t s = 0; !st && s < a->n; s++) {
        if (a->acc[s]) st = tr_nfa_add_edge(cc, &nfa, st_of[s], fin, GNFA_EPS, 0, 0);
        /* one fragment per target state, for the union of its ranges */
        for (uint32_t i = a->off[s]; !st && i < a->off[s + 1]; i++) {
            uint32_t to = a->e[i].to, j = a->off[s];
            while (j < i && a->e[j].to != to) j++;
            if (j < i) continue; /* done with an earlier range */
            gcpset set;
            st = edge_set(cc, a, s, to, &set);
            if (!st) st = encoded_edge(cc, &nfa, &set, plain, st_of[s], st_of[to], &b);
        }
    }
    tr_js_buf_free(&b);
    if (!st) {
        nfa.start = st_of[a->start];
        nfa.final = fin;
        st = tr_dfa_build(cc, &nfa, out);
    }
    tr_nfa_free(cc, &nfa);
    return st;
}
