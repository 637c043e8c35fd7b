/* json_emit.c — grammar expressions (gx) to grammar text.
 *
 * Layering: grammar/json (json_internal.h), the last step of the JSON Schema compiler
 * before tr_grammar_compile_ebnf. Single-threaded per compile.
 *
 * The generators build one rule per schema (and per nesting depth in
 * pretty mode) and leave the shape of the text to this file, which
 * keeps what a fast engine wants: few rule calls and big regular
 * terminals. In order:
 *   1. simplify (flatten SEQ/ALT, drop EMPTY and NEVER);
 *   2. unproductive rules (those that derive no string, e.g. a required
 *      property whose schema is `false`) become NEVER, to a fixpoint;
 *      a root that derives nothing is an error (the schema accepts no
 *      value);
 *   3. a rule that reaches itself without consuming input (left
 *      recursion, only possible through $ref cycles such as
 *      {"anyOf": [{"$ref": "#"}, ...]}) is refused, naming the rule;
 *   4. rules outside recursion cycles that are used once, or are regular
 *      and short, are inlined (children first, Tarjan's SCC order); the
 *      inlined depth is capped so printing never recurses deeply;
 *   5. printing: a regular subtree whose regex fits max_regex_bytes is
 *      one /regex/ terminal, and within a sequence or a choice the
 *      regular neighbours are merged into one terminal.
 * Merging never changes the language: the grammar format has no lexer,
 * a terminal is just the regular language of its regex.
 */
#include <string.h>

#include "grammar/json/json_internal.h"

#define EM_MAX_INLINE_DEPTH 32u
#define EM_MAX_DEPTH 4000u
#define EM_REGEX_MAX_REPEAT 1000u /* grammar_limits.max_repeat default */

typedef struct em {
    gcc *cc;
    gx_grammar *g;
    gx_emit_opts o;
    uint8_t *prod, *nullable, *reach, *rec, *inl;
    uint32_t *refs;
} em;

/* ---- simplification ---- */

static gx *simp(em *e, gx *x, uint32_t depth);

static tr_status depth_check(em *e, uint32_t depth) {
    if (depth > EM_MAX_DEPTH)
        return tr_gcc_fail(e->cc, TR_ERR_LIMIT, 0,
                           "grammar expression nested deeper than %u", EM_MAX_DEPTH);
    return TR_OK;
}

static gx *simp_list(em *e, gx *x, uint32_t depth) {
    gx_list l = {0};
    bool is_seq = x->kind == GX_SEQ;
    bool has_empty = false;
    /* nothing to change: x itself, so that a shared expression stays one
     * node and keeps the printer's memos (a member chain prints its
     * additional member at every position) */
    bool same = x->n >= 2;
    for (uint32_t i = 0; i < x->n; i++) {
        gx *k = simp(e, x->kids[i], depth + 1);
        if (!k) return NULL;
        if (is_seq) {
            if (k->kind == GX_NEVER) return k;
            if (k->kind == GX_EMPTY) {
                same = false;
                continue;
            }
        } else {
            if (k->kind == GX_NEVER) {
                same = false;
                continue;
            }
            if (k->kind == GX_EMPTY) {
                has_empty = true;
                same = false;
                continue;
            }
        }
        if (k->kind == x->kind) { /* flatten */
            same = false;
            for (uint32_t j = 0; j < k->n; j++)
                if (tr_gx_list_push(e->cc, &l, k->kids[j])) return NULL;
        } else if (tr_gx_list_push(e->cc, &l, k)) {
            return NULL;
        }
        same = same && k == x->kids[i];
    }
    if (same) return x;
    if (is_seq) return tr_gx_seq(e->cc, l.v, l.n);
    if (l.n == 0) return has_empty ? tr_gx_empty(e->cc) : tr_gx_never(e->cc);
    gx *a = tr_gx_alt(e->cc, l.v, l.n);
    return has_empty ? tr_gx_opt(e->cc, a) : a;
}

static gx *simp_node(em *e, gx *x, uint32_t depth);

/* A shared expression is simplified once per pass kind (the result only
 * depends on it and on e->prod, which each later pass sees final). */
static gx *simp(em *e, gx *x, uint32_t depth) {
    if (!x || depth_check(e, depth)) return NULL;
    int known = e->prod != NULL;
    if (x->simp_to[known]) return x->simp_to[known];
    gx *r = simp_node(e, x, depth);
    if (r) x->simp_to[known] = r;
    return r;
}

static gx *simp_node(em *e, gx *x, uint32_t depth) {
    switch (x->kind) {
    case GX_NEVER:
    case GX_EMPTY:
    case GX_RX:
    case GX_DFA:
        return x;
    case GX_REF:
        if (e->prod && !e->prod[x->n]) return tr_gx_never(e->cc);
        return x;
    case GX_SEQ:
    case GX_ALT:
        return simp_list(e, x, depth);
    case GX_REP: {
        if (x->min > e->o.max_repeat)
            return tr_gcc_fail(e->cc, TR_ERR_LIMIT, 0,
                               "a count of at least %u (minLength / minItems...) is above "
                               "max_repeat = %u",
                               x->min, e->o.max_repeat),
                   NULL;
        if (x->max != GX_INF && x->max > e->o.max_repeat)
            /* counts past max_repeat are capped: strings / arrays longer
             * than it are not produced (sound: only fewer texts) */
            return simp(e, tr_gx_rep(e->cc, x->kids[0], x->min, e->o.max_repeat), depth);
        gx *k = simp(e, x->kids[0], depth + 1);
        if (!k) return NULL;
        if (k->kind == GX_NEVER) return x->min == 0 ? tr_gx_empty(e->cc) : k;
        if (k->kind == GX_EMPTY) return k;
        if (k->kind == GX_REP && k->min == 0 && k->max == 1 && x->min == 0 &&
            (x->max == 1 || x->max == GX_INF))
            return tr_gx_rep(e->cc, k->kids[0], 0, x->max); /* (a?)? (a?)* */
        if (k == x->kids[0]) return x;
        return tr_gx_rep(e->cc, k, x->min, x->max);
    }
    }
    return NULL;
}

/* ---- productivity, nullability ---- */

static bool prod_expr(const em *e, const gx *x) {
    switch (x->kind) {
    case GX_NEVER: return false;
    case GX_EMPTY:
    case GX_RX:
    case GX_DFA: return true;
    case GX_REF: return e->prod[x->n];
    case GX_SEQ:
        for (uint32_t i = 0; i < x->n; i++)
            if (!prod_expr(e, x->kids[i])) return false;
        return true;
    case GX_ALT:
        for (uint32_t i = 0; i < x->n; i++)
            if (prod_expr(e, x->kids[i])) return true;
        return false;
    case GX_REP: return x->min == 0 || prod_expr(e, x->kids[0]);
    }
    return false;
}

static bool null_expr(const em *e, const gx *x) {
    switch (x->kind) {
    case GX_NEVER: return false;
    case GX_EMPTY: return true;
    case GX_RX:
    case GX_DFA: return x->nullable;
    case GX_REF: return e->nullable[x->n];
    case GX_SEQ:
        for (uint32_t i = 0; i < x->n; i++)
            if (!null_expr(e, x->kids[i])) return false;
        return true;
    case GX_ALT:
        for (uint32_t i = 0; i < x->n; i++)
            if (null_expr(e, x->kids[i])) return true;
        return false;
    case GX_REP: return x->min == 0 || null_expr(e, x->kids[0]);
    }
    return false;
}

static tr_status fixpoints(em *e) {
    uint32_t n = e->g->n;
    bool changed = true;
    while (changed) {
        changed = false;
        for (uint32_t r = 0; r < n; r++) {
            if (!e->prod[r] && prod_expr(e, e->g->rules[r].body)) {
                e->prod[r] = 1;
                changed = true;
            }
        }
        if (tr_gcc_poll_time(e->cc)) return e->cc->err;
    }
    for (uint32_t r = 0; r < n; r++) {
        e->g->rules[r].body = simp(e, e->g->rules[r].body, 0);
        if (!e->g->rules[r].body) return e->cc->err;
    }
    changed = true;
    while (changed) {
        changed = false;
        for (uint32_t r = 0; r < n; r++) {
            if (!e->nullable[r] && null_expr(e, e->g->rules[r].body)) {
                e->nullable[r] = 1;
                changed = true;
            }
        }
        if (tr_gcc_poll_time(e->cc)) return e->cc->err;
    }
    return TR_OK;
}

/* ---- references: reachability, counts, left edges ---- */

typedef struct u32v {
    uint32_t *v;
    uint32_t n, cap;
} u32v;

static tr_status u32v_push(gcc *cc, u32v *a, uint32_t x) {
    if (a->n == a->cap) {
        uint32_t nc = a->cap ? a->cap * 2 : 64;
        uint32_t *v = tr_gcc_alloc(cc, (size_t)nc * sizeof *v);
        if (!v) return cc->err;
        if (a->n) memcpy(v, a->v, a->n * sizeof *v);
        a->v = v;
        a->cap = nc;
    }
    a->v[a->n++] = x;
    return TR_OK;
}

/* Appends the rules referenced by x (with repetition) to out; with
 * left_only, only those that can be reached before any byte is read. */
static tr_status refs_of(em *e, const gx *x, bool left_only, u32v *out) {
    switch (x->kind) {
    case GX_NEVER:
    case GX_EMPTY:
    case GX_RX:
    case GX_DFA: return TR_OK;
    case GX_REF: return u32v_push(e->cc, out, x->n);
    case GX_SEQ:
        for (uint32_t i = 0; i < x->n; i++) {
            tr_status st = refs_of(e, x->kids[i], left_only, out);
            if (st) return st;
            if (left_only && !null_expr(e, x->kids[i])) break;
        }
        return TR_OK;
    case GX_ALT:
        for (uint32_t i = 0; i < x->n; i++) {
            tr_status st = refs_of(e, x->kids[i], left_only, out);
            if (st) return st;
        }
        return TR_OK;
    case GX_REP: return refs_of(e, x->kids[0], left_only, out);
    }
    return TR_OK;
}

static tr_status reach_and_count(em *e) {
    uint32_t n = e->g->n;
    memset(e->reach, 0, n);
    memset(e->refs, 0, (size_t)n * sizeof *e->refs);
    u32v work = {0}, kids = {0};
    tr_status st = u32v_push(e->cc, &work, 0);
    e->reach[0] = 1;
    while (!st && work.n) {
        uint32_t r = work.v[--work.n];
        kids.n = 0;
        st = refs_of(e, e->g->rules[r].body, false, &kids);
        for (uint32_t i = 0; !st && i < kids.n; i++) {
            uint32_t s = kids.v[i];
            e->refs[s]++;
            if (!e->reach[s]) {
                e->reach[s] = 1;
                st = u32v_push(e->cc, &work, s);
            }
        }
    }
    return st;
}

/* Left recursion: a cycle in the graph "r may call s before reading a
 * byte". Iterative DFS with colours (0 white, 1 on stack, 2 done). */
static tr_status left_recursion(em *e) {
    uint32_t n = e->g->n;
    uint8_t *col = tr_gcc_alloc(e->cc, n ? n : 1);
    uint32_t *it = tr_gcc_alloc(e->cc, (size_t)(n ? n : 1) * sizeof *it);
    u32v *adj = tr_gcc_alloc(e->cc, (size_t)(n ? n : 1) * sizeof *adj);
    if (!col || !it || !adj) return e->cc->err;
    for (uint32_t r = 0; r < n; r++) {
        if (!e->reach[r]) continue;
        tr_status st = refs_of(e, e->g->rules[r].body, true, &adj[r]);
        if (st) return st;
    }
    u32v stack = {0};
    for (uint32_t r0 = 0; r0 < n; r0++) {
        if (!e->reach[r0] || col[r0]) continue;
        tr_status st = u32v_push(e->cc, &stack, r0);
        if (st) return st;
        col[r0] = 1;
        it[r0] = 0;
        while (stack.n) {
            uint32_t r = stack.v[stack.n - 1];
            if (it[r] < adj[r].n) {
                uint32_t s = adj[r].v[it[r]++];
                if (col[s] == 1)
                    return tr_gcc_fail(
                        e->cc, TR_ERR_UNSUPPORTED, 0,
                        "rule %s can reach itself without reading any input "
                        "(left recursion, e.g. a $ref cycle through anyOf/allOf)",
                        e->g->rules[s].name);
                if (col[s] == 0) {
                    col[s] = 1;
                    it[s] = 0;
                    st = u32v_push(e->cc, &stack, s);
                    if (st) return st;
                }
            } else {
                col[r] = 2;
                stack.n--;
            }
        }
    }
    return TR_OK;
}

/* ---- recursion (Tarjan's SCC, iterative) and inlining ---- */

typedef struct tarjan {
    uint32_t *index, *low, *it;
    uint8_t *on;
    u32v stack, call, order; /* order: rules in reverse topological order */
    u32v *adj;
    uint32_t next;
} tarjan;

static tr_status scc(em *e, tarjan *t) {
    uint32_t n = e->g->n;
    size_t sz = (size_t)(n ? n : 1);
    t->index = tr_gcc_alloc(e->cc, sz * sizeof *t->index);
    t->low = tr_gcc_alloc(e->cc, sz * sizeof *t->low);
    t->it = tr_gcc_alloc(e->cc, sz * sizeof *t->it);
    t->on = tr_gcc_alloc(e->cc, sz);
    t->adj = tr_gcc_alloc(e->cc, sz * sizeof *t->adj);
    if (!t->index || !t->low || !t->it || !t->on || !t->adj) return e->cc->err;
    for (uint32_t r = 0; r < n; r++) {
        t->index[r] = UINT32_MAX;
        if (!e->reach[r]) continue;
        tr_status st = refs_of(e, e->g->rules[r].body, false, &t->adj[r]);
        if (st) return st;
        for (uint32_t i = 0; i < t->adj[r].n; i++)
            if (t->adj[r].v[i] == r) e->rec[r] = 1;
    }
    for (uint32_t r0 = 0; r0 < n; r0++) {
        if (!e->reach[r0] || t->index[r0] != UINT32_MAX) continue;
        tr_status st = u32v_push(e->cc, &t->call, r0);
        if (st) return st;
        t->index[r0] = t->low[r0] = t->next++;
        t->it[r0] = 0;
        if ((st = u32v_push(e->cc, &t->stack, r0))) return st;
        t->on[r0] = 1;
        while (t->call.n) {
            uint32_t r = t->call.v[t->call.n - 1];
            if (t->it[r] < t->adj[r].n) {
                uint32_t s = t->adj[r].v[t->it[r]++];
                if (t->index[s] == UINT32_MAX) {
                    t->index[s] = t->low[s] = t->next++;
                    t->it[s] = 0;
                    if ((st = u32v_push(e->cc, &t->stack, s))) return st;
                    t->on[s] = 1;
                    if ((st = u32v_push(e->cc, &t->call, s))) return st;
                } else if (t->on[s] && t->index[s] < t->low[r]) {
                    t->low[r] = t->index[s];
                }
                continue;
            }
            t->call.n--;
            if (t->call.n) {
                uint32_t p = t->call.v[t->call.n - 1];
                if (t->low[r] < t->low[p]) t->low[p] = t->low[r];
            }
            if (t->low[r] != t->index[r]) continue;
            uint32_t size = 0, top = t->stack.n;
            uint32_t w;
            do {
                w = t->stack.v[--t->stack.n];
                t->on[w] = 0;
                size++;
            } while (w != r);
            for (uint32_t k = t->stack.n; k < top; k++) {
                if (size > 1) e->rec[t->stack.v[k]] = 1;
                if ((st = u32v_push(e->cc, &t->order, t->stack.v[k]))) return st;
            }
        }
    }
    return TR_OK;
}

static bool regular(gx *x);
static uint64_t rx_size(gx *x);
static uint32_t depth_of(gx *x);

/* x with every REF to an inlined rule replaced by that rule's body. */
static gx *substitute(em *e, gx *x, uint32_t depth) {
    if (!x || depth_check(e, depth)) return NULL;
    switch (x->kind) {
    case GX_NEVER:
    case GX_EMPTY:
    case GX_RX:
    case GX_DFA: return x;
    case GX_REF: return e->inl[x->n] ? e->g->rules[x->n].body : x;
    case GX_SEQ:
    case GX_ALT: {
        gx **k = tr_gcc_alloc(e->cc, (size_t)x->n * sizeof *k);
        if (!k) return NULL;
        bool same = true;
        for (uint32_t i = 0; i < x->n; i++) {
            k[i] = substitute(e, x->kids[i], depth + 1);
            if (!k[i]) return NULL;
            same &= k[i] == x->kids[i];
        }
        if (same) return x;
        return x->kind == GX_SEQ ? tr_gx_seq(e->cc, k, x->n) : tr_gx_alt(e->cc, k, x->n);
    }
    case GX_REP: {
        gx *k = substitute(e, x->kids[0], depth + 1);
        if (!k || k == x->kids[0]) return k ? x : NULL;
        return tr_gx_rep(e->cc, k, x->min, x->max);
    }
    }
    return NULL;
}

static tr_status inline_rules(em *e, const tarjan *t) {
    for (uint32_t k = 0; k < t->order.n; k++) {
        uint32_t r = t->order.v[k];
        gx *b = substitute(e, e->g->rules[r].body, 0);
        if (b) b = simp(e, b, 0);
        if (!b) return e->cc->err;
        e->g->rules[r].body = b;
        if (r == 0 || e->rec[r] || depth_of(b) > EM_MAX_INLINE_DEPTH) continue;
        if (e->refs[r] == 1 || (regular(b) && rx_size(b) <= e->o.inline_bytes))
            e->inl[r] = 1;
        if (tr_gcc_poll_time(e->cc)) return e->cc->err;
    }
    return TR_OK;
}

/* ---- regex text of regular expressions ---- */

/* End of the regex atom starting at s[i] (an escape, a class, a group or
 * one UTF-8 character). */
static size_t atom_end(const char *s, size_t n, size_t i) {
    if (i >= n) return n;
    unsigned char c = (unsigned char)s[i];
    if (c == '\\') {
        if (i + 1 >= n) return n;
        char k = s[i + 1];
        size_t j = i + 2;
        if ((k == 'x' || k == 'u' || k == 'p' || k == 'P') && j < n && s[j] == '{') {
            while (j < n && s[j] != '}') j++;
            return j < n ? j + 1 : n;
        }
        if (k == 'x') return TR_MIN(n, j + 2);
        if (k == 'u') return TR_MIN(n, j + 4);
        if (k == 'c') return TR_MIN(n, j + 1);
        return j;
    }
    if (c == '[') {
        size_t j = i + 1;
        if (j < n && s[j] == '^') j++;
        if (j < n && s[j] == ']') j++;
        for (; j < n && s[j] != ']'; j++)
            if (s[j] == '\\') j++;
        return j < n ? j + 1 : n;
    }
    if (c == '(') {
        int d = 0;
        for (size_t j = i; j < n; j++) {
            if (s[j] == '\\') {
                j++;
                continue;
            }
            if (s[j] == '[') {
                j = atom_end(s, n, j) - 1;
                continue;
            }
            if (s[j] == '(') d++;
            if (s[j] == ')' && --d == 0) return j + 1;
        }
        return n;
    }
    size_t j = i + 1;
    while (j < n && ((unsigned char)s[j] & 0xC0) == 0x80) j++;
    return j;
}

static bool rx_is_atom(const char *s, size_t n) { return n > 0 && atom_end(s, n, 0) == n; }

static bool rx_has_top_alt(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        if (s[i] == '|') return true;
        i = atom_end(s, n, i);
    }
    return false;
}

static bool regular(gx *x) {
    if (x->reg >= 0) return x->reg;
    bool r = true;
    switch (x->kind) {
    case GX_NEVER:
    case GX_EMPTY:
    case GX_RX: r = true; break;
    case GX_REF:
    case GX_DFA: r = false; break; /* never part of a regex text */
    case GX_SEQ:
    case GX_ALT:
        for (uint32_t i = 0; i < x->n && r; i++) r = regular(x->kids[i]);
        break;
    case GX_REP:
        r = regular(x->kids[0]) && x->min <= EM_REGEX_MAX_REPEAT &&
            (x->max == GX_INF || x->max <= EM_REGEX_MAX_REPEAT);
        break;
    }
    x->reg = r;
    return r;
}

static uint64_t sat_add(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }

static uint32_t depth_of(gx *x) {
    if (x->depth) return x->depth;
    uint32_t d = 0;
    if (x->kind == GX_SEQ || x->kind == GX_ALT || x->kind == GX_REP) {
        uint32_t nk = x->kind == GX_REP ? 1 : x->n;
        for (uint32_t i = 0; i < nk; i++) d = TR_MAX(d, depth_of(x->kids[i]));
    }
    x->depth = d + 1;
    return x->depth;
}

/* Upper bound of the regex text's size (groups counted generously). */
static uint64_t rx_size(gx *x) {
    if (x->rx_size) return x->rx_size;
    uint64_t s = 0;
    switch (x->kind) {
    case GX_NEVER:
    case GX_EMPTY: s = 1; break;
    case GX_RX: s = (uint64_t)x->rx_len + 4; break;
    case GX_REF:
    case GX_DFA: s = UINT64_MAX; break;
    case GX_SEQ:
    case GX_ALT:
        s = 6;
        for (uint32_t i = 0; i < x->n; i++) s = sat_add(s, rx_size(x->kids[i]) + 1);
        break;
    case GX_REP: s = sat_add(rx_size(x->kids[0]), 30); break;
    }
    x->rx_size = s;
    return s;
}

/* States a DFA of x would roughly need: regex text is ~8 bytes per
 * state, and a counted repetition copies its operand. */
static uint64_t weight(gx *x) {
    if (x->weight) return x->weight;
    uint64_t w = 1;
    switch (x->kind) {
    case GX_NEVER:
    case GX_EMPTY: w = 1; break;
    case GX_RX: w = x->rx_len / 8 + 1; break;
    case GX_REF:
    case GX_DFA: w = UINT64_MAX; break;
    case GX_SEQ:
    case GX_ALT:
        w = 0;
        for (uint32_t i = 0; i < x->n; i++) w = sat_add(w, weight(x->kids[i]));
        break;
    case GX_REP: {
        uint64_t k = weight(x->kids[0]);
        uint64_t c = x->max == GX_INF ? TR_MAX(x->min, 1u) : x->max;
        w = k > UINT64_MAX / c ? UINT64_MAX : k * c;
        break;
    }
    }
    x->weight = w ? w : 1;
    return x->weight;
}

enum { P_ALT = 0, P_SEQ = 1, P_ATOM = 2 };

static void put_quant(js_buf *b, uint32_t min, uint32_t max) {
    if (min == 0 && max == 1)
        tr_js_buf_putc(b, '?');
    else if (min == 0 && max == GX_INF)
        tr_js_buf_putc(b, '*');
    else if (min == 1 && max == GX_INF)
        tr_js_buf_putc(b, '+');
    else if (min == max)
        tr_js_buf_printf(b, "{%u}", min);
    else if (max == GX_INF)
        tr_js_buf_printf(b, "{%u,}", min);
    else
        tr_js_buf_printf(b, "{%u,%u}", min, max);
}

static void to_rx(gx *x, int prec, js_buf *b) {
    switch (x->kind) {
    case GX_NEVER: tr_js_buf_puts(b, "[^\\x00-\\x{10FFFF}]"); return; /* unreachable */
    case GX_EMPTY:
        if (prec == P_ATOM) tr_js_buf_puts(b, "(?:)");
        return;
    case GX_RX: {
        if (prec == P_ATOM && x->rx_atom < 0) x->rx_atom = rx_is_atom(x->rx, x->rx_len);
        if (prec == P_SEQ && x->rx_top_alt < 0)
            x->rx_top_alt = rx_has_top_alt(x->rx, x->rx_len);
        bool wrap = prec == P_ATOM ? !x->rx_atom : prec == P_SEQ ? x->rx_top_alt : false;
        if (wrap) tr_js_buf_puts(b, "(?:");
        tr_js_buf_add(b, x->rx, x->rx_len);
        if (wrap) tr_js_buf_putc(b, ')');
        return;
    }
    case GX_REF:
    case GX_DFA: return; /* not regular: never asked */
    case GX_SEQ: {
        bool wrap = prec == P_ATOM;
        if (wrap) tr_js_buf_puts(b, "(?:");
        for (uint32_t i = 0; i < x->n; i++) to_rx(x->kids[i], P_SEQ, b);
        if (wrap) tr_js_buf_putc(b, ')');
        return;
    }
    case GX_ALT: {
        bool wrap = prec != P_ALT;
        if (wrap) tr_js_buf_puts(b, "(?:");
        for (uint32_t i = 0; i < x->n; i++) {
            if (i) tr_js_buf_putc(b, '|');
            to_rx(x->kids[i], P_ALT, b);
        }
        if (wrap) tr_js_buf_putc(b, ')');
        return;
    }
    case GX_REP: {
        bool wrap = prec == P_ATOM; /* x{2}{3} is not a regex */
        if (wrap) tr_js_buf_puts(b, "(?:");
        to_rx(x->kids[0], P_ATOM, b);
        put_quant(b, x->min, x->max);
        if (wrap) tr_js_buf_putc(b, ')');
        return;
    }
    }
}

char *tr_gx_to_regex(gcc *cc, const gx *x, size_t max, size_t *len) {
    gx *y = (gx *)x; /* the memo fields are filled in */
    if (!regular(y) || rx_size(y) > max || weight(y) > 200000) return NULL;
    js_buf b;
    tr_js_buf_init(&b, cc);
    to_rx(y, P_ALT, &b);
    char *s = tr_js_buf_dup(&b);
    if (s && len) *len = b.n;
    tr_js_buf_free(&b);
    return s;
}

/* ---- grammar text ---- */

/* s between slashes, a bare '/' escaped (escapes copied whole, so "\\/"
 * stays one escape); runs without a slash copied at once. */
static void put_terminal_rx(js_buf *b, const char *s, size_t n) {
    tr_js_buf_putc(b, '/');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n) {
            i++;
        } else if (s[i] == '/') {
            tr_js_buf_add(b, s + run, i - run);
            tr_js_buf_puts(b, "\\/");
            run = i + 1;
        }
    }
    tr_js_buf_add(b, s + run, n - run);
    tr_js_buf_putc(b, '/');
}

static void put_string_lit(js_buf *b, const char *s, size_t n) {
    tr_js_buf_putc(b, '"');
    size_t run = 0; /* start of the bytes not written yet, none escaped */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        bool quote = c == '"' || c == '\\', control = c < 0x20 || c == 0x7f;
        if (!quote && !control) continue;
        tr_js_buf_add(b, s + run, i - run);
        run = i + 1;
        if (quote) {
            tr_js_buf_putc(b, '\\');
            tr_js_buf_putc(b, (char)c);
        } else
            tr_js_buf_printf(b, "\\x%02x", c);
    }
    tr_js_buf_add(b, s + run, n - run);
    tr_js_buf_putc(b, '"');
}

/* One terminal for the regular expression x. */
static void put_terminal(js_buf *b, gx *x) {
    if (x->kind == GX_RX && x->lit) {
        put_string_lit(b, x->raw, x->raw_len);
        return;
    }
    if (x->kind == GX_EMPTY) {
        tr_js_buf_puts(b, "\"\"");
        return;
    }
    js_buf t;
    tr_js_buf_init(&t, b->cc);
    to_rx(x, P_ALT, &t);
    if (!js_buf_ok(&t)) b->failed = true;
    else put_terminal_rx(b, t.p ? t.p : "", t.n);
    tr_js_buf_free(&t);
}

static bool fits(const em *e, gx *x) {
    return regular(x) && rx_size(x) <= e->o.max_regex_bytes && weight(x) <= e->o.max_weight;
}

static void gbnf(em *e, gx *x, int prec, js_buf *b);

/* A run of regular kids [i, j) as one terminal (or each alone when the
 * run is too long). */
static void put_run(em *e, gx *const *kids, uint32_t i, uint32_t j, bool alt, js_buf *b) {
    if (j - i == 1) {
        put_terminal(b, kids[i]);
        return;
    }
    gx *run = alt ? tr_gx_alt(e->cc, kids + i, j - i) : tr_gx_seq(e->cc, kids + i, j - i);
    if (!run) {
        b->failed = true;
        return;
    }
    put_terminal(b, run);
}

static void gbnf_list(em *e, gx *x, int prec, js_buf *b) {
    bool alt = x->kind == GX_ALT;
    bool wrap = alt ? prec != P_ALT : prec == P_ATOM;
    if (wrap) tr_js_buf_puts(b, "( ");
    bool first = true;
    for (uint32_t i = 0; i < x->n;) {
        if (!first) tr_js_buf_puts(b, alt ? " | " : " ");
        first = false;
        if (!fits(e, x->kids[i])) {
            gbnf(e, x->kids[i], alt ? P_ALT : P_SEQ, b);
            i++;
            continue;
        }
        uint32_t j = i + 1;
        uint64_t size = rx_size(x->kids[i]), w = weight(x->kids[i]);
        while (j < x->n && fits(e, x->kids[j]) &&
               size + rx_size(x->kids[j]) <= e->o.max_regex_bytes &&
               w + weight(x->kids[j]) <= e->o.max_weight) {
            w += weight(x->kids[j]);
            size += rx_size(x->kids[j++]);
        }
        put_run(e, x->kids, i, j, alt, b);
        i = j;
    }
    if (wrap) tr_js_buf_puts(b, " )");
}

static void gbnf(em *e, gx *x, int prec, js_buf *b) {
    if (fits(e, x)) {
        put_terminal(b, x);
        return;
    }
    switch (x->kind) {
    case GX_REF: tr_js_buf_puts(b, e->g->rules[x->n].name); return;
    case GX_DFA: tr_js_buf_printf(b, "%%dfa%u", x->n); return;
    case GX_SEQ:
    case GX_ALT: gbnf_list(e, x, prec, b); return;
    case GX_REP: {
        gx *k = x->kids[0];
        bool atom = k->kind == GX_REF || k->kind == GX_DFA || fits(e, k);
        if (!atom) tr_js_buf_puts(b, "( ");
        gbnf(e, k, P_ALT, b);
        if (!atom) tr_js_buf_puts(b, " )");
        put_quant(b, x->min, x->max);
        return;
    }
    default: put_terminal(b, x); return;
    }
}

static tr_status print_rules(em *e, js_buf *out) {
    /* after inlining: print root, then every rule still referenced, in
     * breadth-first order from root */
    uint32_t n = e->g->n;
    uint8_t *seen = tr_gcc_alloc(e->cc, n ? n : 1);
    if (!seen) return e->cc->err;
    u32v q = {0}, kids = {0};
    tr_status st = u32v_push(e->cc, &q, 0);
    seen[0] = 1;
    for (uint32_t h = 0; !st && h < q.n; h++) {
        uint32_t r = q.v[h];
        tr_js_buf_puts(out, e->g->rules[r].name);
        tr_js_buf_puts(out, " ::= ");
        gbnf(e, e->g->rules[r].body, P_ALT, out);
        tr_js_buf_putc(out, '\n');
        kids.n = 0;
        st = refs_of(e, e->g->rules[r].body, false, &kids);
        for (uint32_t i = 0; !st && i < kids.n; i++) {
            if (seen[kids.v[i]]) continue;
            seen[kids.v[i]] = 1;
            st = u32v_push(e->cc, &q, kids.v[i]);
        }
        if (!st && !js_buf_ok(out)) st = e->cc->err ? e->cc->err : TR_ERR_NOMEM;
    }
    return st;
}

tr_status tr_gx_emit(gcc *cc, gx_grammar *g, const gx_emit_opts *o, js_buf *out) {
    em e = {.cc = cc, .g = g};
    e.o.max_regex_bytes = o && o->max_regex_bytes ? o->max_regex_bytes : 16384;
    e.o.inline_bytes = o && o->inline_bytes ? o->inline_bytes : 256;
    e.o.max_weight = o && o->max_weight ? o->max_weight : 2048;
    e.o.max_repeat = o && o->max_repeat ? o->max_repeat : EM_REGEX_MAX_REPEAT;
    uint32_t n = g->n;
    if (n == 0) return tr_gcc_fail(cc, TR_ERR_INTERNAL, 0, "grammar without rules");
    for (uint32_t r = 0; r < n; r++)
        if (!g->rules[r].body)
            return tr_gcc_fail(cc, TR_ERR_INTERNAL, 0, "rule %s was never built",
                               g->rules[r].name);
    e.prod = tr_gcc_alloc(cc, n);
    e.nullable = tr_gcc_alloc(cc, n);
    e.reach = tr_gcc_alloc(cc, n);
    e.rec = tr_gcc_alloc(cc, n);
    e.inl = tr_gcc_alloc(cc, n);
    e.refs = tr_gcc_alloc(cc, (size_t)n * sizeof *e.refs);
    if (!e.prod || !e.nullable || !e.reach || !e.rec || !e.inl || !e.refs) return cc->err;
    uint8_t *save = e.prod;
    e.prod = NULL; /* first pass: plain simplification */
    for (uint32_t r = 0; r < n; r++)
        if (!(g->rules[r].body = simp(&e, g->rules[r].body, 0))) return cc->err;
    e.prod = save;
    tr_status st = fixpoints(&e);
    if (st) return st;
    if (!e.prod[0])
        return tr_gcc_fail(cc, TR_ERR_FORMAT, 0, "the schema accepts no JSON value at all");
    if ((st = reach_and_count(&e)) || (st = left_recursion(&e))) return st;
    tarjan t = {0};
    if ((st = scc(&e, &t)) || (st = inline_rules(&e, &t))) return st;
    return print_rules(&e, out);
}
