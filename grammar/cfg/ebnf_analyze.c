/* ebnf_analyze.c — the rules of a parsed grammar, made ready for one
 * automaton: left recursion, dead parts, and what to inline.
 *
 * Layering: grammar/cfg (cfg_internal.h), between ebnf_parse.c and
 * ebnf_compile.c; one compile context per call, single-threaded.
 *
 * In order:
 *  1. Direct left recursion is rewritten: A ::= A x1 | .. | A xk | y1 | ..
 *     | ym (each A at the very start of an alternative) becomes A ::=
 *     (y1 | .. | ym) (x1 | .. | xk)*, the same language. llama.cpp refuses
 *     it; expression grammars are often written that way.
 *  2. Productive rules (those that derive some string) are found by a
 *     fixpoint per strongly connected component, callees first; every
 *     reference to an unproductive rule is an empty language and is
 *     pruned (an alternative that needs one is dropped), so the automaton
 *     never offers a path that cannot complete. A root that cannot
 *     complete is an error.
 *  3. Left recursion that remains (A reaches A without consuming input,
 *     through other rules or nullable prefixes) would make the matcher's
 *     closure push forever: refused, naming the cycle of rules.
 *  4. Inlining. Every rule that is not kept is substituted into its
 *     callers, so that its bytes run inside the caller's DFA rather than
 *     on the stack: one DFA walk instead of a push, a pop and a stack-
 *     dependent mask residue at its end. The kept rules are root and a
 *     feedback vertex set of the recursion (greedy: per cyclic component,
 *     a rule whose every alternative ends in a terminal first, since a
 *     call's end is where masks depend on the stack and a sharp end such
 *     as '}' keeps that residue small; then the least referenced). For
 *     JSON (value, object, array) that keeps object and array and inlines
 *     value into both. A non-recursive rule is kept too when inlining it
 *     would copy more than INLINE_MAX estimated NFA states into several
 *     callers, or nest the IR deeper than MAX_DEPTH (the NFA builder
 *     recurses on it).
 */
#include <stdio.h>
#include <string.h>

#include "grammar/cfg/cfg_internal.h"

#define INLINE_MAX 2000u
#define MAX_DEPTH 1000u
#define SAT (1u << 30)

typedef struct ga {
    gcc *cc;
    gebnf *e;
    uint32_t n;
    /* reference graph (occurrences), CSR */
    uint32_t *off, *adj;
    uint8_t *prod, *nul, *reach, *kept;
} ga;

static uint32_t sat_add(uint32_t a, uint32_t b) { return a + b > SAT ? SAT : a + b; }
static uint32_t sat_mul(uint32_t a, uint32_t b) {
    return (uint64_t)a * b > SAT ? SAT : a * b;
}

static tr_status fail_at(ga *a, tr_status code, uint64_t off, const char *fmt,
                         const char *msg) {
    if (a->cc->err) return a->cc->err;
    int line = 1, col = 1;
    for (uint64_t i = 0; i < off && i < a->e->len; i++) {
        if (a->e->text[i] == '\n')
            line++, col = 1;
        else if ((a->e->text[i] & 0xC0) != 0x80)
            col++;
    }
    tr_status st = tr_gcc_fail(a->cc, code, off, fmt, line, col, msg);
    tr_ebnf_diag_at(a->cc, a->e, off);
    return st;
}

static const char *rname(const ga *a, uint32_t r, char *buf, size_t cap) {
    snprintf(buf, cap, "%.*s", (int)a->e->rules[r].name_len, a->e->rules[r].name);
    return buf;
}

/* ---- IR helpers ---- */

static gre_node *mk(ga *a, gre_kind k, uint32_t off, uint32_t n_kids) {
    gre_node *n = tr_gcc_alloc(a->cc, sizeof *n);
    if (!n) return NULL;
    n->kind = k;
    n->offset = off;
    if (n_kids) {
        n->kids = tr_gcc_alloc(a->cc, (size_t)n_kids * sizeof *n->kids);
        if (!n->kids) return NULL;
    }
    return n;
}

/* Calls f(ref) for every rule reference in x (not through references). */
static void each_ref(const gre_node *x, void (*f)(void *, uint32_t), void *ctx) {
    if (!x || x->closed) return;
    if (x->kind == GRE_REF) {
        f(ctx, x->ref);
        return;
    }
    for (uint32_t i = 0; i < x->n_kids; i++) each_ref(x->kids[i], f, ctx);
}

static void count_ref(void *ctx, uint32_t r) { (void)r, ++*(uint32_t *)ctx; }

typedef struct fill_ctx {
    uint32_t *adj, *w;
} fill_ctx;
static void fill_ref(void *ctx, uint32_t r) {
    fill_ctx *c = ctx;
    c->adj[(*c->w)++] = r;
}

static tr_status build_graph(ga *a) {
    a->off = tr_gcc_alloc(a->cc, ((size_t)a->n + 1) * sizeof *a->off);
    if (!a->off) return a->cc->err;
    for (uint32_t r = 0; r < a->n; r++) {
        uint32_t c = 0;
        each_ref(a->e->rules[r].body, count_ref, &c);
        a->off[r + 1] = a->off[r] + c;
    }
    a->adj = tr_gcc_alloc(a->cc, ((size_t)a->off[a->n] + 1) * sizeof *a->adj);
    if (!a->adj) return a->cc->err;
    for (uint32_t r = 0; r < a->n; r++) {
        uint32_t w = a->off[r];
        fill_ctx c = {a->adj, &w};
        each_ref(a->e->rules[r].body, fill_ref, &c);
    }
    return TR_OK;
}

/* ---- strongly connected components (iterative Tarjan) ---- */

typedef struct gscc {
    uint32_t n_comp;
    uint32_t *comp;  /* [n] component, UINT32_MAX for inactive nodes;
                        numbered in emission order: callees first */
    uint32_t *order; /* [n] active nodes grouped by component, in order */
    uint32_t *cstart;/* [n_comp + 1] into order */
} gscc;

/* Components of the graph (off, adj) restricted to nodes with active[v]
 * (edges to inactive nodes ignored). */
static tr_status tarjan(gcc *cc, uint32_t n, const uint32_t *off,
                        const uint32_t *adj, const uint8_t *active, gscc *out) {
    uint32_t *idx = tr_gcc_alloc(cc, (size_t)n * sizeof *idx);
    uint32_t *low = tr_gcc_alloc(cc, (size_t)n * sizeof *low);
    uint32_t *stk = tr_gcc_alloc(cc, (size_t)n * sizeof *stk);
    uint32_t *cs_v = tr_gcc_alloc(cc, (size_t)n * sizeof *cs_v);
    uint32_t *cs_e = tr_gcc_alloc(cc, (size_t)n * sizeof *cs_e);
    uint8_t *on = tr_gcc_alloc(cc, n ? n : 1);
    out->comp = tr_gcc_alloc(cc, (size_t)n * sizeof *out->comp);
    out->order = tr_gcc_alloc(cc, (size_t)n * sizeof *out->order);
    out->cstart = tr_gcc_alloc(cc, ((size_t)n + 1) * sizeof *out->cstart);
    if (!idx || !low || !stk || !cs_v || !cs_e || !on || !out->comp ||
        !out->order || !out->cstart)
        return cc->err;
    for (uint32_t v = 0; v < n; v++) idx[v] = UINT32_MAX, out->comp[v] = UINT32_MAX;
    uint32_t next = 0, sp = 0, nc = 0, no = 0;
    for (uint32_t root = 0; root < n; root++) {
        if (!active[root] || idx[root] != UINT32_MAX) continue;
        uint32_t cp = 0;
        cs_v[cp] = root, cs_e[cp] = off[root], cp++;
        idx[root] = low[root] = next++;
        stk[sp++] = root, on[root] = 1;
        while (cp) {
            uint32_t v = cs_v[cp - 1];
            if (cs_e[cp - 1] < off[v + 1]) {
                uint32_t w = adj[cs_e[cp - 1]++];
                if (!active[w]) continue;
                if (idx[w] == UINT32_MAX) {
                    idx[w] = low[w] = next++;
                    stk[sp++] = w, on[w] = 1;
                    cs_v[cp] = w, cs_e[cp] = off[w], cp++;
                } else if (on[w] && idx[w] < low[v]) {
                    low[v] = idx[w];
                }
                continue;
            }
            cp--;
            if (cp && low[v] < low[cs_v[cp - 1]]) low[cs_v[cp - 1]] = low[v];
            if (low[v] != idx[v]) continue;
            out->cstart[nc] = no;
            uint32_t w;
            do {
                w = stk[--sp];
                on[w] = 0;
                out->comp[w] = nc;
                out->order[no++] = w;
            } while (w != v);
            nc++;
        }
    }
    out->cstart[nc] = no;
    out->n_comp = nc;
    return TR_OK;
}

static bool cyclic(const ga *a, const gscc *s, uint32_t c, const uint8_t *active) {
    if (s->cstart[c + 1] - s->cstart[c] > 1) return true;
    uint32_t v = s->order[s->cstart[c]];
    for (uint32_t j = a->off[v]; j < a->off[v + 1]; j++)
        if (a->adj[j] == v && active[v]) return true;
    return false;
}

/* ---- 1. direct left recursion ---- */

static bool leads_with(const gre_node *x, uint32_t r) {
    if (x->kind == GRE_REF) return x->ref == r;
    return x->kind == GRE_CONCAT && x->n_kids > 0 && x->kids[0]->kind == GRE_REF &&
           x->kids[0]->ref == r;
}

/* The alternative x without its leading reference. */
static gre_node *rest_of(ga *a, gre_node *x) {
    if (x->kind == GRE_REF || x->n_kids == 1) return mk(a, GRE_EMPTY, x->offset, 0);
    if (x->n_kids == 2) return x->kids[1];
    gre_node *c = mk(a, GRE_CONCAT, x->kids[1]->offset, 0);
    if (!c) return NULL;
    c->kids = x->kids + 1;
    c->n_kids = x->n_kids - 1;
    return c;
}

static tr_status rewrite_left(ga *a, uint32_t r, bool *changed) {
    gebnf_rule *rule = &a->e->rules[r];
    gre_node *b = rule->body;
    gre_node **alts = b->kind == GRE_ALT ? b->kids : &rule->body;
    uint32_t n = b->kind == GRE_ALT ? b->n_kids : 1, n_rec = 0;
    for (uint32_t i = 0; i < n; i++) n_rec += leads_with(alts[i], r);
    if (n_rec == 0) return TR_OK;
    *changed = true;
    if (n_rec == n) { /* A ::= A x | A y: never completes */
        rule->body = NULL;
        return TR_OK;
    }
    gre_node *beta = mk(a, GRE_ALT, b->offset, n - n_rec);
    gre_node *alpha = mk(a, GRE_ALT, b->offset, n_rec);
    gre_node *star = mk(a, GRE_REPEAT, b->offset, 1);
    gre_node *cat = mk(a, GRE_CONCAT, b->offset, 2);
    if (!beta || !alpha || !star || !cat) return a->cc->err;
    for (uint32_t i = 0; i < n; i++) {
        if (leads_with(alts[i], r)) {
            gre_node *x = rest_of(a, alts[i]);
            if (!x) return a->cc->err;
            alpha->kids[alpha->n_kids++] = x;
        } else {
            beta->kids[beta->n_kids++] = alts[i];
        }
    }
    star->kids[0] = alpha->n_kids == 1 ? alpha->kids[0] : alpha;
    star->n_kids = 1;
    star->min = 0;
    star->max = GRE_INF;
    cat->kids[0] = beta->n_kids == 1 ? beta->kids[0] : beta;
    cat->kids[1] = star;
    cat->n_kids = 2;
    rule->body = cat;
    return TR_OK;
}

/* ---- 2. productive rules, pruning ---- */

static bool productive(const ga *a, const gre_node *x) {
    if (!x) return false;
    if (x->closed) return true;
    switch (x->kind) {
    case GRE_EMPTY: return true;
    case GRE_SET: return x->set.n > 0;
    case GRE_DFA: return x->dfa->start != GDFA_DEAD;
    case GRE_REF: return a->prod[x->ref];
    case GRE_CONCAT:
        for (uint32_t i = 0; i < x->n_kids; i++)
            if (!productive(a, x->kids[i])) return false;
        return true;
    case GRE_ALT:
        for (uint32_t i = 0; i < x->n_kids; i++)
            if (productive(a, x->kids[i])) return true;
        return false;
    case GRE_REPEAT: return x->min == 0 || productive(a, x->kids[0]);
    default: return false; /* anchors never reach here */
    }
}

/* x without its unproductive parts; NULL when x derives nothing. */
static gre_node *prune(ga *a, gre_node *x) {
    if (!x) return NULL;
    if (x->closed) return x;
    switch (x->kind) {
    case GRE_REF: return a->prod[x->ref] ? x : NULL;
    case GRE_SET: return x->set.n ? x : NULL;
    case GRE_CONCAT:
        for (uint32_t i = 0; i < x->n_kids; i++)
            if (!(x->kids[i] = prune(a, x->kids[i]))) return NULL;
        return x;
    case GRE_ALT: {
        uint32_t w = 0;
        for (uint32_t i = 0; i < x->n_kids; i++)
            if ((x->kids[w] = prune(a, x->kids[i]))) w++;
        x->n_kids = w;
        return w == 0 ? NULL : w == 1 ? x->kids[0] : x;
    }
    case GRE_REPEAT:
        if ((x->kids[0] = prune(a, x->kids[0]))) return x;
        if (x->min > 0) return NULL;
        x->kind = GRE_EMPTY; /* (nothing)* matches only "" */
        x->n_kids = 0;
        return x;
    default: return x;
    }
}

/* Fixpoint of f over each component, callees first. */
static void per_component(ga *a, const gscc *s, uint8_t *flag,
                          bool (*f)(const ga *, const gre_node *)) {
    for (uint32_t c = 0; c < s->n_comp; c++) {
        bool changed = true;
        while (changed) {
            changed = false;
            for (uint32_t i = s->cstart[c]; i < s->cstart[c + 1]; i++) {
                uint32_t r = s->order[i];
                if (!flag[r] && f(a, a->e->rules[r].body)) flag[r] = changed = true;
            }
        }
    }
}

/* ---- 3. nullable rules, left calls ---- */

static bool nullable(const ga *a, const gre_node *x) {
    if (!x) return false;
    switch (x->kind) {
    case GRE_EMPTY: return true;
    case GRE_SET: return false;
    case GRE_DFA: return x->dfa->accept[x->dfa->start] != 0;
    case GRE_REF: return a->nul[x->ref];
    case GRE_CONCAT:
        for (uint32_t i = 0; i < x->n_kids; i++)
            if (!nullable(a, x->kids[i])) return false;
        return true;
    case GRE_ALT:
        for (uint32_t i = 0; i < x->n_kids; i++)
            if (nullable(a, x->kids[i])) return true;
        return false;
    case GRE_REPEAT: return x->min == 0 || nullable(a, x->kids[0]);
    default: return false;
    }
}

/* Calls f for every rule that x may call before consuming a byte. */
static void left_refs(const ga *a, const gre_node *x,
                      void (*f)(void *, uint32_t), void *ctx) {
    if (x->closed) return;
    switch (x->kind) {
    case GRE_REF: f(ctx, x->ref); return;
    case GRE_CONCAT:
        for (uint32_t i = 0; i < x->n_kids; i++) {
            left_refs(a, x->kids[i], f, ctx);
            if (!nullable(a, x->kids[i])) return;
        }
        return;
    case GRE_ALT:
        for (uint32_t i = 0; i < x->n_kids; i++) left_refs(a, x->kids[i], f, ctx);
        return;
    case GRE_REPEAT:
        if (x->max > 0) left_refs(a, x->kids[0], f, ctx);
        return;
    default: return;
    }
}

typedef struct lr_ctx {
    const ga *a;
    uint32_t *adj, *w;
} lr_ctx;
static void lr_count(void *ctx, uint32_t r) { (void)r, ++*((lr_ctx *)ctx)->w; }
static void lr_fill(void *ctx, uint32_t r) {
    lr_ctx *c = ctx;
    c->adj[(*c->w)++] = r;
}

/* Names a left-recursive cycle through r (inside component comp) and
 * fails. */
static tr_status left_error(ga *a, const uint32_t *off, const uint32_t *adj,
                            const gscc *s, uint32_t r) {
    /* BFS from r inside the component back to r */
    uint32_t n = a->n, comp = s->comp[r];
    uint32_t *prev = tr_gcc_alloc(a->cc, (size_t)n * sizeof *prev);
    uint32_t *q = tr_gcc_alloc(a->cc, (size_t)n * sizeof *q);
    if (!prev || !q) return a->cc->err;
    for (uint32_t v = 0; v < n; v++) prev[v] = UINT32_MAX;
    uint32_t qh = 0, qt = 0, last = UINT32_MAX;
    q[qt++] = r;
    while (qh < qt && last == UINT32_MAX) {
        uint32_t v = q[qh++];
        for (uint32_t j = off[v]; j < off[v + 1]; j++) {
            uint32_t w = adj[j];
            if (s->comp[w] != comp) continue;
            if (w == r) {
                last = v;
                break;
            }
            if (prev[w] == UINT32_MAX) prev[w] = v, q[qt++] = w;
        }
    }
    char path[256] = "", nb[80];
    uint32_t chain[8], k = 0;
    for (uint32_t v = last; v != UINT32_MAX && v != r && k < 8; v = prev[v]) chain[k++] = v;
    size_t used = 0;
    used += (size_t)snprintf(path + used, sizeof path - used, "%s", rname(a, r, nb, sizeof nb));
    while (k-- > 0 && used < sizeof path)
        used += (size_t)snprintf(path + used, sizeof path - used, " -> %s",
                                 rname(a, chain[k], nb, sizeof nb));
    if (used < sizeof path)
        snprintf(path + used, sizeof path - used, " -> %s", rname(a, r, nb, sizeof nb));
    return fail_at(a, TR_ERR_UNSUPPORTED, a->e->rules[r].def_off,
                   "%d:%d: left recursion: %s can call itself before consuming "
                   "any input; write the repetition with * or + instead (only "
                   "a rule's own leading self-reference, A ::= A x | y, is "
                   "rewritten)",
                   path);
}

static tr_status check_left(ga *a) {
    uint32_t n = a->n;
    uint32_t *off = tr_gcc_alloc(a->cc, ((size_t)n + 1) * sizeof *off);
    if (!off) return a->cc->err;
    for (uint32_t r = 0; r < n; r++) {
        uint32_t c = 0;
        lr_ctx x = {a, NULL, &c};
        if (a->reach[r]) left_refs(a, a->e->rules[r].body, lr_count, &x);
        off[r + 1] = off[r] + c;
    }
    uint32_t *adj = tr_gcc_alloc(a->cc, ((size_t)off[n] + 1) * sizeof *adj);
    if (!adj) return a->cc->err;
    for (uint32_t r = 0; r < n; r++) {
        uint32_t w = off[r];
        lr_ctx x = {a, adj, &w};
        if (a->reach[r]) left_refs(a, a->e->rules[r].body, lr_fill, &x);
    }
    gscc s;
    tr_status st = tarjan(a->cc, n, off, adj, a->reach, &s);
    if (st) return st;
    for (uint32_t c = 0; c < s.n_comp; c++) {
        bool cyc = s.cstart[c + 1] - s.cstart[c] > 1;
        uint32_t v = s.order[s.cstart[c]];
        for (uint32_t j = off[v]; j < off[v + 1] && !cyc; j++) cyc = adj[j] == v;
        if (!cyc) continue;
        uint32_t first = v; /* name the rule defined first */
        for (uint32_t i = s.cstart[c]; i < s.cstart[c + 1]; i++)
            if (a->e->rules[s.order[i]].def_off < a->e->rules[first].def_off)
                first = s.order[i];
        return left_error(a, off, adj, &s, first);
    }
    return TR_OK;
}

/* ---- 4. inlining ---- */

static bool ends_sharp(const ga *a, const gre_node *x) {
    if (x->closed) return true;
    switch (x->kind) {
    case GRE_REF: return false;
    case GRE_ALT:
        for (uint32_t i = 0; i < x->n_kids; i++)
            if (!ends_sharp(a, x->kids[i])) return false;
        return true;
    case GRE_CONCAT:
        for (uint32_t i = x->n_kids; i-- > 0;) {
            if (!ends_sharp(a, x->kids[i])) return false;
            if (!nullable(a, x->kids[i])) return true;
        }
        return true;
    case GRE_REPEAT: return ends_sharp(a, x->kids[0]);
    default: return true;
    }
}

typedef struct est {
    uint32_t size, depth;
} est;

/* Estimated NFA states and IR depth of x with non-kept references
 * replaced by their rules' (already computed) estimates. */
static est estimate(const ga *a, const gre_node *x, const est *rule_est) {
    est r = {1, 1};
    switch (x->kind) {
    case GRE_SET: r.size = sat_add(2, sat_mul(x->set.n, 3)); break;
    case GRE_DFA: r.size = x->dfa->n_states; break;
    case GRE_REF:
        if (!a->kept[x->ref]) r = rule_est[x->ref];
        r.size = sat_add(r.size, 1);
        break;
    case GRE_CONCAT:
    case GRE_ALT:
        for (uint32_t i = 0; i < x->n_kids; i++) {
            est k = estimate(a, x->kids[i], rule_est);
            r.size = sat_add(r.size, k.size);
            if (k.depth + 1 > r.depth) r.depth = k.depth + 1;
        }
        break;
    case GRE_REPEAT: {
        est k = estimate(a, x->kids[0], rule_est);
        uint32_t copies = x->max == GRE_INF ? (x->min ? x->min : 1) : x->max;
        r.size = sat_add(2, sat_mul(k.size, copies ? copies : 1));
        r.depth = k.depth + 1;
        break;
    }
    default: break;
    }
    return r;
}

static void substitute(ga *a, gre_node *x, gre_node **subst) {
    for (uint32_t i = 0; i < x->n_kids; i++) {
        gre_node *k = x->kids[i];
        if (k->kind == GRE_REF) {
            if (!a->kept[k->ref]) x->kids[i] = subst[k->ref];
        } else if (!k->closed) {
            substitute(a, k, subst);
        }
    }
}

/* Greedy feedback vertex set: until the rules not kept are acyclic. */
static tr_status choose_kept(ga *a, const uint32_t *occ) {
    uint8_t *active = tr_gcc_alloc(a->cc, a->n ? a->n : 1);
    uint8_t *sharp = tr_gcc_alloc(a->cc, a->n ? a->n : 1);
    if (!active || !sharp) return a->cc->err;
    for (uint32_t r = 0; r < a->n; r++)
        if (a->reach[r]) sharp[r] = ends_sharp(a, a->e->rules[r].body);
    for (;;) {
        for (uint32_t r = 0; r < a->n; r++) active[r] = a->reach[r] && !a->kept[r];
        gscc s;
        tr_status st = tarjan(a->cc, a->n, a->off, a->adj, active, &s);
        if (st) return st;
        bool any = false;
        for (uint32_t c = 0; c < s.n_comp; c++) {
            if (!cyclic(a, &s, c, active)) continue;
            uint32_t best = UINT32_MAX;
            for (uint32_t i = s.cstart[c]; i < s.cstart[c + 1]; i++) {
                uint32_t r = s.order[i];
                if (best == UINT32_MAX || sharp[r] > sharp[best] ||
                    (sharp[r] == sharp[best] &&
                     (occ[r] < occ[best] || (occ[r] == occ[best] && r < best))))
                    best = r;
            }
            a->kept[best] = 1;
            any = true;
        }
        if (!any) return TR_OK;
        if ((st = tr_gcc_poll_time(a->cc))) return st;
    }
}

static tr_status plan_inline(ga *a, gebnf_plan *plan) {
    uint32_t n = a->n;
    uint32_t *occ = tr_gcc_alloc(a->cc, (size_t)n * sizeof *occ);
    est *rule_est = tr_gcc_alloc(a->cc, (size_t)n * sizeof *rule_est);
    gre_node **subst = tr_gcc_alloc(a->cc, (size_t)n * sizeof *subst);
    uint8_t *active = tr_gcc_alloc(a->cc, n);
    if (!occ || !rule_est || !subst || !active) return a->cc->err;
    for (uint32_t r = 0; r < n; r++)
        if (a->reach[r])
            for (uint32_t j = a->off[r]; j < a->off[r + 1]; j++) occ[a->adj[j]]++;
    a->kept[a->e->root] = 1;
    tr_status st = choose_kept(a, occ);
    if (st) return st;
    /* the rules not kept form a DAG now: callees first */
    for (uint32_t r = 0; r < n; r++) active[r] = a->reach[r] && !a->kept[r];
    gscc s;
    if ((st = tarjan(a->cc, n, a->off, a->adj, active, &s))) return st;
    for (uint32_t i = 0; i < s.cstart[s.n_comp]; i++) {
        uint32_t r = s.order[i];
        est e = estimate(a, a->e->rules[r].body, rule_est);
        if ((occ[r] > 1 && e.size > INLINE_MAX) || e.depth > MAX_DEPTH) {
            a->kept[r] = 1; /* a call instead */
            continue;
        }
        rule_est[r] = e;
    }
    for (uint32_t i = 0; i < s.cstart[s.n_comp]; i++) {
        uint32_t r = s.order[i];
        if (a->kept[r]) continue;
        gre_node *b = a->e->rules[r].body;
        if (b->kind == GRE_REF)
            subst[r] = a->kept[b->ref] ? b : subst[b->ref];
        else
            substitute(a, b, subst), subst[r] = b;
    }
    uint32_t nk = 0;
    for (uint32_t r = 0; r < n; r++) nk += a->reach[r] && a->kept[r];
    plan->n_kept = nk;
    plan->kept = tr_gcc_alloc(a->cc, (size_t)nk * sizeof *plan->kept);
    plan->bodies = tr_gcc_alloc(a->cc, (size_t)nk * sizeof *plan->bodies);
    plan->sym_of_rule = tr_gcc_alloc(a->cc, (size_t)n * sizeof *plan->sym_of_rule);
    if (!plan->kept || !plan->bodies || !plan->sym_of_rule) return a->cc->err;
    for (uint32_t r = 0; r < n; r++) plan->sym_of_rule[r] = UINT32_MAX;
    uint32_t w = 0;
    plan->kept[w++] = a->e->root;
    for (uint32_t r = 0; r < n; r++)
        if (a->reach[r] && a->kept[r] && r != a->e->root) plan->kept[w++] = r;
    if (nk > GNFA_MAX_SYMS)
        return fail_at(a, TR_ERR_LIMIT, 0, "%d:%d: %s",
                       "more than 65536 recursive rules");
    for (uint32_t i = 0; i < nk; i++) {
        uint32_t r = plan->kept[i];
        plan->sym_of_rule[r] = i;
        gre_node *b = a->e->rules[r].body;
        if (b->kind == GRE_REF && !a->kept[b->ref]) {
            b = subst[b->ref];
        } else if (b->kind != GRE_REF) {
            substitute(a, b, subst);
        }
        plan->bodies[i] = b;
    }
    return TR_OK;
}

static void mark_reach(ga *a) {
    uint32_t *q = a->off ? tr_gcc_alloc(a->cc, (size_t)a->n * sizeof *q) : NULL;
    if (!q) return;
    uint32_t qh = 0, qt = 0;
    a->reach[a->e->root] = 1;
    q[qt++] = a->e->root;
    while (qh < qt) {
        uint32_t r = q[qh++];
        for (uint32_t j = a->off[r]; j < a->off[r + 1]; j++) {
            uint32_t t = a->adj[j];
            if (!a->reach[t]) a->reach[t] = 1, q[qt++] = t;
        }
    }
}

tr_status tr_ebnf_analyze(gcc *cc, gebnf *e, gebnf_plan *plan) {
    memset(plan, 0, sizeof *plan);
    ga a = {.cc = cc, .e = e, .n = e->n_rules};
    uint32_t n = a.n;
    a.prod = tr_gcc_alloc(cc, n);
    a.nul = tr_gcc_alloc(cc, n);
    a.reach = tr_gcc_alloc(cc, n);
    a.kept = tr_gcc_alloc(cc, n);
    if (!a.prod || !a.nul || !a.reach || !a.kept) return cc->err;
    for (uint32_t r = 0; r < n; r++) {
        bool ch = false;
        tr_status st = rewrite_left(&a, r, &ch);
        if (st) return st;
        plan->left_rewritten |= ch;
    }
    tr_status st = build_graph(&a);
    if (st) return st;
    gscc s;
    uint8_t *all = tr_gcc_alloc(cc, n);
    if (!all) return cc->err;
    memset(all, 1, n);
    if ((st = tarjan(cc, n, a.off, a.adj, all, &s))) return st;
    per_component(&a, &s, a.prod, productive);
    for (uint32_t r = 0; r < n; r++) e->rules[r].body = prune(&a, e->rules[r].body);
    if (!e->rules[e->root].body)
        return fail_at(&a, TR_ERR_FORMAT, e->rules[e->root].def_off,
                       "%d:%d: %s",
                       "the grammar matches no string: rule 'root' can never "
                       "complete (every way through it needs a rule that "
                       "never completes, such as a recursion without a base "
                       "case)");
    /* references changed with pruning: rebuild the graph */
    if ((st = build_graph(&a))) return st;
    mark_reach(&a);
    if (cc->err) return cc->err;
    if ((st = tarjan(cc, n, a.off, a.adj, a.reach, &s))) return st;
    per_component(&a, &s, a.nul, nullable);
    if ((st = check_left(&a))) return st;
    return plan_inline(&a, plan);
}
