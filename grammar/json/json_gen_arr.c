/* json_gen_arr.c — array schemas to grammar expressions.
 *
 * Layering: grammar/json (json_internal.h), called by the
 * rule builder (json_gen.c). Single-threaded per compile.
 *
 * Every member of the conjunction gives a tuple shape: a prefix of
 * per-position schemas and a schema for the rest. Draft 2020-12 says
 * prefixItems + items; drafts 4..2019 say items (an array) +
 * additionalItems, or items (one schema for all). Position j must
 * satisfy, for every member, its prefix schema j or its rest schema, so
 * positions up to the longest prefix get their own rule and the rest
 * share one. unevaluatedItems U of a member adds one more shape: the
 * positions its in-place members' prefixes cover are free, the others
 * must satisfy U or one of those members' `contains` schemas (the items
 * a contains matched are evaluated). minItems / maxItems bound the
 * length:
 *
 *   [ PRE ( e0 (SEP e1 (SEP e2 ... (SEP rest){a,b})?)?)? POST ]
 *
 * with the first minItems elements not optional. A position whose
 * schema accepts nothing ends the array there (the grammar's NEVER
 * propagation cuts the rest).
 *
 * `contains` S with minContains a / maxContains b (and the private
 * containsFrom f of complements: only positions >= f count) makes the
 * array a counting automaton: state (position, count per contains),
 * one rule per state, built on demand. Each item either matches S
 * (item and S; count + 1) or not (item and not S, json_not.c, needed
 * only while a maximum can still be exceeded; without one, an item that
 * is not counted may match anyway: the count is a lower bound, and the
 * parse that counts it exists too). Once a count reaches its minimum
 * with no maximum it stops mattering.
 *
 * uniqueItems holds by construction when at most one element fits; for
 * arrays whose every position takes finitely many values (enum / const
 * / booleans / null), each state also carries the set of values used,
 * and each item is one literal value not used yet (up to 12 values).
 * Other arrays get the plain grammar and the matcher's tracker keeps
 * their items distinct at the paths json_unique.c records (distinct
 * strings or objects are not a context-free language); where it cannot
 * place the array, refused.
 */
#include <string.h>

#include "grammar/json/json_internal.h"

#define JS_MAX_CONTAINS 3u
/* uniqueItems in the grammar's state over at most this many values
 * (2^n sets of used values per position); more go to the tracker */
#define JS_MAX_UNIQUE_VALUES 12u
#define JS_MAX_ARRAY_STATES 20000u
#define JS_MAX_COUNT 255u

typedef struct shape {
    const json_t *prefix; /* array of schemas, or NULL: np positions of `true` */
    size_t np;
    const json_t *rest;   /* schema for the other positions, NULL: any */
} shape;

typedef struct counter {
    const json_t *node; /* the member (messages) */
    const json_t *s;    /* items counted: those matching s */
    const json_t *neg;  /* not s, made when a maximum needs it */
    uint32_t lo, hi;    /* hi UINT32_MAX: no maximum */
    uint32_t from;      /* first position counted */
} counter;

typedef struct arrc {
    js_ctx *x;
    const js_norm *n;
    uint32_t depth;
    js_ws ws;
    shape *s;
    uint32_t ns;
    uint64_t min, max; /* max UINT64_MAX: none */
    size_t K;          /* positions with their own schema */
    counter c[JS_MAX_CONTAINS];
    uint32_t nc;
    /* uniqueItems over a finite domain */
    bool unique;
    json_t **dom; /* the values */
    uint32_t ndom;
    uint32_t *dom_ok;    /* [position class] bitset of values allowed */
    uint8_t *dom_hit;    /* [value][counter] the value matches contains */
    /* states */
    uint32_t J; /* positions tracked exactly: 0..J (J: "J or more" when max is none) */
    js_ptrmap ids;
    uint32_t made;
} arrc;

/* ---- shapes ---- */

static tr_status add_shape(arrc *a, const json_t *prefix, size_t np, const json_t *rest) {
    shape *v = tr_gcc_alloc(a->x->cc, (a->ns + 1) * sizeof *v);
    if (!v) return a->x->cc->err;
    if (a->ns) memcpy(v, a->s, a->ns * sizeof *v);
    v[a->ns++] = (shape){prefix, np, rest};
    a->s = v;
    return TR_OK;
}

static void member_shape(const json_t *node, const json_t **prefix, const json_t **rest) {
    const json_t *pi = json_object_get(node, "prefixItems");
    const json_t *it = json_object_get(node, "items");
    *prefix = json_is_array(pi) ? pi : json_is_array(it) ? it : NULL;
    *rest = json_is_array(pi) ? (json_is_array(it) ? NULL : it)
            : json_is_array(it) ? json_object_get(node, "additionalItems")
                                : it;
}

static tr_status shapes(arrc *a) {
    js_ctx *x = a->x;
    for (uint32_t i = 0; i < a->n->n; i++) {
        const json_t *node = a->n->nodes[i].node;
        const json_t *pi = json_object_get(node, "prefixItems");
        if (pi && !json_is_array(pi))
            return tr_js_fail(x, TR_ERR_FORMAT, node, "prefixItems must be an array");
        const json_t *prefix, *rest;
        member_shape(node, &prefix, &rest);
        if (prefix || rest) {
            tr_status st = add_shape(a, prefix, prefix ? json_array_size(prefix) : 0, rest);
            if (st) return st;
        }
    }
    return TR_OK;
}

/* unevaluatedItems U of member at: positions beyond its in-place
 * members' prefixes satisfy U or one of their contains schemas; none
 * when one of them has a rest schema (everything evaluated). */
static tr_status unevaluated_shape(arrc *a, uint32_t at, const json_t *u) {
    js_ctx *x = a->x;
    uint8_t *mark = tr_gcc_alloc(x->cc, a->n->n + 1);
    if (!mark) return x->cc->err;
    tr_status st = tr_js_in_place(x, a->n, at, mark);
    if (st) return st;
    size_t np = 0;
    json_t *alts = json_array();
    if (!alts || json_array_append(alts, (json_t *)u)) {
        json_decref(alts);
        return tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
    }
    bool all = false;
    for (uint32_t i = 0; i < a->n->n && !all; i++) {
        if (!mark[i]) continue;
        const json_t *node = a->n->nodes[i].node, *prefix, *rest;
        member_shape(node, &prefix, &rest);
        if (rest || (i != at && json_object_get(node, "unevaluatedItems"))) all = true;
        if (prefix) np = TR_MAX(np, json_array_size(prefix));
        const json_t *ct = json_object_get(node, "contains");
        if (ct && !tr_js_is_synthetic(x, node) && json_array_append(alts, (json_t *)ct)) {
            json_decref(alts);
            return tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
        }
    }
    const json_t *rest = u;
    if (!all && json_array_size(alts) > 1) {
        json_t *o = tr_js_synth_new(x);
        if (!o || json_object_set(o, "anyOf", alts)) {
            json_decref(alts);
            return x->cc->err ? x->cc->err : tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
        }
        rest = o;
    }
    json_decref(alts);
    return all ? TR_OK : add_shape(a, NULL, np, rest);
}

/* ---- counts ---- */

tr_status tr_js_count_kw(js_ctx *x, const json_t *node, const char *kw, uint64_t *v, bool *has) {
    const json_t *j = json_object_get(node, kw);
    *has = false;
    if (!j) return TR_OK;
    js_dec d;
    if (!tr_js_is_num(j) || !tr_js_dec_from_json(x->cc, j, &d) || !tr_js_dec_is_int(&d) ||
        (d.neg && d.n))
        return tr_js_fail(x, TR_ERR_FORMAT, node, "%s must be a non-negative integer", kw);
    *has = true;
    *v = tr_js_dec_int_digits(&d) > 9 ? 1000000000ull : (uint64_t)json_number_value(j);
    return TR_OK;
}

static tr_status counters(arrc *a) {
    js_ctx *x = a->x;
    for (uint32_t i = 0; i < a->n->n; i++) {
        const json_t *node = a->n->nodes[i].node;
        const json_t *ct = json_object_get(node, "contains");
        if (!ct) continue;
        uint64_t lo = 1, hi = UINT64_MAX, v;
        bool has;
        tr_status st = tr_js_count_kw(x, node, "minContains", &v, &has);
        if (st) return st;
        if (has) lo = v;
        if ((st = tr_js_count_kw(x, node, "maxContains", &v, &has))) return st;
        if (has) hi = v;
        const json_t *from = tr_js_is_synthetic(x, node) ? json_object_get(node, JS_KW_CONTAINS_FROM)
                                                         : NULL;
        if (lo > hi) return TR_ERR_FULL; /* no array */
        if (lo == 0 && hi == UINT64_MAX) continue;
        if (a->nc == JS_MAX_CONTAINS)
            return tr_js_unsupported(x, node, "contains", "more than 3 `contains` on one array");
        if (lo > JS_MAX_COUNT || (hi != UINT64_MAX && hi > JS_MAX_COUNT))
            return tr_js_unsupported(x, node, lo > JS_MAX_COUNT ? "minContains" : "maxContains",
                                     "counts above 255 are not enforced");
        a->c[a->nc++] = (counter){node, ct, NULL, (uint32_t)lo,
                                  hi == UINT64_MAX ? UINT32_MAX : (uint32_t)hi,
                                  json_is_integer(from) ? (uint32_t)json_integer_value(from) : 0};
    }
    return TR_OK;
}

/* ---- positions ---- */

/* The schemas position j must satisfy (j == SIZE_MAX: the rest). */
static tr_status position_items(arrc *a, size_t j, js_item **out, uint32_t *n) {
    js_item *it = tr_gcc_alloc(a->x->cc, (size_t)(a->ns + JS_MAX_CONTAINS + 1) * sizeof *it);
    if (!it) return a->x->cc->err;
    uint32_t k = 0;
    for (uint32_t i = 0; i < a->ns; i++) {
        const shape *s = &a->s[i];
        const json_t *sch;
        if (j != SIZE_MAX && j < s->np)
            sch = s->prefix ? json_array_get(s->prefix, j) : NULL;
        else
            sch = s->rest;
        if (sch) it[k++] = (js_item){sch, 0};
    }
    *out = it;
    *n = k;
    return TR_OK;
}

static tr_status items_ref(arrc *a, js_item *it, uint32_t k, gx **out) {
    uint32_t r;
    tr_status st;
    if (k == 0)
        st = tr_js_any_value(a->x, a->depth + 1, &r);
    else {
        js_conj c = {it, k};
        st = tr_js_rule_for(a->x, &c, a->depth + 1, NULL, &r);
    }
    if (st) return st;
    *out = tr_gx_ref(a->x->cc, r);
    return *out ? TR_OK : a->x->cc->err;
}

static tr_status position_rule(arrc *a, size_t j, gx **out) {
    js_item *it = NULL;
    uint32_t k = 0;
    tr_status st = position_items(a, j, &it, &k);
    return st ? st : items_ref(a, it, k, out);
}

/* The plain form: no counting. */
static tr_status plain(arrc *a, gx **out) {
    js_ctx *x = a->x;
    gcc *cc = x->cc;
    size_t K = a->K;
    uint64_t min = a->min, max = a->max;
    gx *rest;
    tr_status st = position_rule(a, SIZE_MAX, &rest);
    if (st) return st;
    uint64_t lo = min > K ? min - K : 0;
    uint64_t hi = max == UINT64_MAX ? GX_INF : max - K;
    if (K == 0) {
        /* rest (SEP rest){lo-1, hi-1}, the whole optional when min == 0 */
        if (hi == 0) return (*out = tr_js_container(x, '[', NULL, true, a->depth)), TR_OK;
        gx *more = tr_gx_rep(cc, tr_gx_seq2(cc, tr_gx_rxz(cc, a->ws.sep), rest),
                             lo > 0 ? (uint32_t)(lo - 1) : 0,
                             hi == GX_INF ? GX_INF : (uint32_t)(hi - 1));
        *out = tr_js_container(x, '[', tr_gx_seq2(cc, rest, more), min == 0, a->depth);
        return *out ? TR_OK : cc->err;
    }
    gx *acc = tr_gx_rep(cc, tr_gx_seq2(cc, tr_gx_rxz(cc, a->ws.sep), rest), (uint32_t)lo,
                        hi == GX_INF ? GX_INF : (uint32_t)hi);
    /* positions K-1 .. 1, innermost first: SEP e_j tail, optional when j >= min */
    for (size_t j = K; j-- > 1;) {
        gx *e;
        if ((st = position_rule(a, j, &e))) return st;
        gx *step = tr_gx_seq3(cc, tr_gx_rxz(cc, a->ws.sep), e, acc);
        acc = j >= min ? tr_gx_opt(cc, step) : step;
    }
    gx *e0;
    if ((st = position_rule(a, 0, &e0))) return st;
    *out = tr_js_container(x, '[', tr_gx_seq2(cc, e0, acc), min == 0, a->depth);
    return *out ? TR_OK : cc->err;
}

/* ---- the counting automaton ---- */

typedef struct astate {
    uint32_t j;
    uint8_t cnt[JS_MAX_CONTAINS];
    uint32_t used; /* unique: values taken */
} astate;

static uint64_t state_key(const astate *s, bool first) {
    uint64_t k = s->j;
    for (uint32_t i = 0; i < JS_MAX_CONTAINS; i++) k = k << 8 | s->cnt[i];
    return ((k << 16 | s->used) << 1 | first) + 1;
}

static bool accepting(const arrc *a, const astate *s) {
    if (s->j < a->min) return false;
    for (uint32_t i = 0; i < a->nc; i++)
        if (s->cnt[i] < a->c[i].lo) return false;
    return true;
}

/* Whether counter i still counts at this state (else items need not
 * be told apart for it). */
static bool live(const arrc *a, const astate *s, uint32_t i) {
    const counter *c = &a->c[i];
    if (s->j < c->from) return false;
    return c->hi != UINT32_MAX || s->cnt[i] < c->lo;
}

static gx *state_ref(arrc *a, const astate *s, bool first);

/* The state after one item that matched the counters in hit; false
 * when such an item is not allowed here. */
static bool step_state(const arrc *a, const astate *s, uint32_t hit, astate *t) {
    *t = *s;
    if ((uint64_t)s->j + 1 > a->max) return false;
    t->j = s->j + 1 > a->J ? a->J : s->j + 1;
    for (uint32_t i = 0; i < a->nc && i < JS_MAX_CONTAINS; i++) {
        if (!(hit >> i & 1)) continue;
        const counter *c = &a->c[i];
        if (c->hi != UINT32_MAX && s->cnt[i] >= c->hi) return false;
        uint32_t cap = c->hi != UINT32_MAX ? c->hi : c->lo;
        t->cnt[i] = (uint8_t)TR_MIN((uint32_t)s->cnt[i] + 1, cap);
    }
    return true;
}

/* Items of a state: schemas (general) */
static tr_status schema_items(arrc *a, const astate *s, bool first, gx_list *alts) {
    js_ctx *x = a->x;
    gcc *cc = x->cc;
    js_item *base = NULL;
    uint32_t nb = 0;
    tr_status st = position_items(a, s->j < a->K ? s->j : SIZE_MAX, &base, &nb);
    if (st) return st;
    uint32_t livem = 0;
    for (uint32_t i = 0; i < a->nc; i++)
        if (live(a, s, i)) livem |= 1u << i;
    for (uint32_t hit = 0; hit < (1u << a->nc); hit++) {
        if (hit & ~livem) continue;
        astate t;
        if (!step_state(a, s, hit, &t)) continue;
        js_item *it = tr_gcc_alloc(cc, (size_t)(nb + a->nc + 1) * sizeof *it);
        if (!it) return cc->err;
        memcpy(it, base, nb * sizeof *it);
        uint32_t k = nb;
        for (uint32_t i = 0; i < a->nc; i++) {
            if (!(livem >> i & 1)) continue;
            if (hit >> i & 1)
                it[k++] = (js_item){a->c[i].s, 0};
            else if (a->c[i].hi != UINT32_MAX) { /* must not be counted: not s */
                if (!a->c[i].neg) {
                    const char *why;
                    if ((st = tr_js_negate(x, a->c[i].s, &a->c[i].neg, &why))) return st;
                    if (!a->c[i].neg)
                        return tr_js_unsupported(x, a->c[i].node, "maxContains", why);
                }
                it[k++] = (js_item){a->c[i].neg, 0};
            }
        }
        gx *item, *next = state_ref(a, &t, false);
        if (!next || (st = items_ref(a, it, k, &item))) return cc->err ? cc->err : st;
        gx *g = first ? tr_gx_seq2(cc, item, next)
                      : tr_gx_seq3(cc, tr_gx_rxz(cc, a->ws.sep), item, next);
        if ((st = tr_gx_list_push(cc, alts, g))) return st;
    }
    return TR_OK;
}

/* Items of a state: literal values not used yet (uniqueItems) */
static tr_status value_items(arrc *a, const astate *s, bool first, gx_list *alts) {
    gcc *cc = a->x->cc;
    uint32_t cls = s->j < a->K ? s->j : (uint32_t)a->K;
    for (uint32_t v = 0; v < a->ndom; v++) {
        if (s->used >> v & 1 || !(a->dom_ok[cls] >> v & 1)) continue;
        uint32_t hit = 0;
        for (uint32_t i = 0; i < a->nc; i++)
            if (live(a, s, i) && a->dom_hit[v * JS_MAX_CONTAINS + i]) hit |= 1u << i;
        astate t;
        if (!step_state(a, s, hit, &t)) continue;
        t.used |= 1u << v;
        gx *next = state_ref(a, &t, false);
        gx *item = tr_js_value_gx(a->x, a->dom[v], a->depth + 1);
        if (!next || !item) return cc->err ? cc->err : TR_ERR_NOMEM;
        gx *g = first ? tr_gx_seq2(cc, item, next)
                      : tr_gx_seq3(cc, tr_gx_rxz(cc, a->ws.sep), item, next);
        tr_status st = tr_gx_list_push(cc, alts, g);
        if (st) return st;
    }
    return TR_OK;
}

/* "the items from state s on": the rule of a state (first: nothing
 * emitted yet, so no separator and no empty alternative) */
static gx *state_ref(arrc *a, const astate *s, bool first) {
    js_ctx *x = a->x;
    gcc *cc = x->cc;
    uint64_t key = state_key(s, first);
    uint64_t id;
    if (tr_js_ptrmap_get(&a->ids, (const void *)(uintptr_t)key, &id)) return tr_gx_ref(cc, (uint32_t)id);
    if (tr_gcc_check_time(cc)) return NULL; /* a state can cost a millisecond */
    if (++a->made > JS_MAX_ARRAY_STATES) {
        tr_js_fail(x, TR_ERR_LIMIT, a->n->nodes[0].node,
                   "an array with contains / uniqueItems needs over %u states",
                   JS_MAX_ARRAY_STATES);
        return NULL;
    }
    uint32_t rid;
    if (tr_gx_rule_add(cc, &x->g, "items", &rid) ||
        tr_js_ptrmap_put(cc, &a->ids, (const void *)(uintptr_t)key, rid))
        return NULL;
    gx_list alts = {0};
    if (!first && accepting(a, s) && tr_gx_list_push(cc, &alts, tr_gx_empty(cc))) return NULL;
    tr_status st = a->unique ? value_items(a, s, first, &alts) : schema_items(a, s, first, &alts);
    if (st) return NULL;
    gx *b = tr_gx_alt(cc, alts.v, alts.n);
    if (!b) return NULL;
    x->g.rules[rid].body = b;
    return tr_gx_ref(cc, rid);
}

static tr_status counting(arrc *a, gx **out) {
    js_ctx *x = a->x;
    uint64_t J = a->K;
    for (uint32_t i = 0; i < a->nc; i++) J = TR_MAX(J, a->c[i].from);
    J = TR_MAX(J, a->min);
    if (a->max != UINT64_MAX) J = TR_MAX(J, a->max);
    if (J >= JS_MAX_ARRAY_STATES)
        return tr_js_fail(x, TR_ERR_LIMIT, a->n->nodes[0].node,
                          "an array with contains / uniqueItems and %llu tracked positions",
                          (unsigned long long)J);
    a->J = (uint32_t)J;
    /* the first state is a rule of its own: no separator, nonempty */
    astate s0 = {0};
    gx *first = state_ref(a, &s0, true);
    if (!first) return x->cc->err;
    *out = tr_js_container(x, '[', first, accepting(a, &s0), a->depth);
    return *out ? TR_OK : x->cc->err;
}

/* ---- uniqueItems over a finite domain ---- */

/* The values position class cls can take (every type finite), added
 * to the domain; false: not finite. */
static tr_status class_values(arrc *a, uint32_t cls, bool *finite) {
    js_ctx *x = a->x;
    js_item *it = NULL;
    uint32_t k = 0;
    tr_status st = position_items(a, cls < a->K ? cls : SIZE_MAX, &it, &k);
    if (st) return st;
    *finite = false;
    if (k == 0) return TR_OK;
    js_conj c = {it, k};
    js_norm n;
    if ((st = tr_js_flatten(x, &c, &n))) return st;
    json_t *cand[3];
    json_t **vals;
    uint32_t nv;
    if (n.never)
        nv = 0, vals = cand;
    else if (n.has_values)
        vals = n.vals, nv = n.n_vals;
    else if (!(n.types & ~(JT_NULL | JT_BOOL))) {
        nv = 0;
        if (n.types & JT_NULL) cand[nv++] = json_null();
        if (n.types & JT_BOOL) cand[nv++] = json_true(), cand[nv++] = json_false();
        vals = cand;
    } else
        return TR_OK;
    *finite = true;
    for (uint32_t i = 0; i < nv; i++) {
        bool ok;
        if ((st = tr_js_validate(x, &c, vals[i], 0, &ok))) return st;
        if (!ok) continue;
        uint32_t v = 0;
        while (v < a->ndom && !tr_js_json_equal(x->cc, a->dom[v], vals[i])) v++;
        if (v == a->ndom) {
            if (a->ndom == JS_MAX_UNIQUE_VALUES) /* too many for the state: the
                                                     tracker's, if it can */
                return (*finite = false), TR_OK;
            a->dom[a->ndom++] = vals[i];
        }
        a->dom_ok[cls] |= 1u << v;
    }
    return TR_OK;
}

static tr_status unique_domain(arrc *a, const json_t *node, bool *ok) {
    js_ctx *x = a->x;
    *ok = false;
    a->dom = tr_gcc_alloc(x->cc, JS_MAX_UNIQUE_VALUES * sizeof *a->dom);
    a->dom_ok = tr_gcc_alloc(x->cc, (a->K + 1) * sizeof *a->dom_ok);
    a->dom_hit = tr_gcc_alloc(x->cc, JS_MAX_UNIQUE_VALUES * JS_MAX_CONTAINS);
    if (!a->dom || !a->dom_ok || !a->dom_hit) return x->cc->err;
    for (uint32_t cls = 0; cls <= a->K; cls++) {
        bool finite;
        tr_status st = class_values(a, cls, &finite);
        if (st) return st;
        if (!finite) {
            /* the matcher's tracker may keep them distinct
             * (json_unique.c); the grammar is then the plain array's */
            bool tracked = false;
            if ((st = tr_js_unique_items(x, node, &tracked))) return st;
            if (tracked) return TR_OK;
            return tr_js_unsupported(x, node, "uniqueItems",
                                     "distinct items over unboundedly many values are enforced "
                                     "by the matcher's tracker, which needs the array's place "
                                     "in the instance: none below `not`, through a recursive "
                                     "path, or in a grammar exported as text");
        }
    }
    for (uint32_t v = 0; v < a->ndom; v++)
        for (uint32_t i = 0; i < a->nc; i++) {
            bool m;
            js_item it = {a->c[i].s, 0};
            js_conj c = {&it, 1};
            tr_status st = tr_js_validate(x, &c, a->dom[v], 0, &m);
            if (st) return st;
            a->dom_hit[v * JS_MAX_CONTAINS + i] = m;
        }
    *ok = true;
    return TR_OK;
}

/* ---- the array ---- */

tr_status tr_js_gen_array(js_ctx *x, const js_norm *n, uint32_t depth, gx **out) {
    gcc *cc = x->cc;
    arrc a = {.x = x, .n = n, .depth = depth, .min = 0, .max = UINT64_MAX};
    tr_js_ws(x, depth, &a.ws);
    tr_status st = shapes(&a);
    if (st) return st;
    for (uint32_t i = 0; i < n->n; i++) {
        const json_t *node = n->nodes[i].node;
        uint64_t v;
        bool has;
        if ((st = tr_js_count_kw(x, node, "minItems", &v, &has))) return st;
        if (has) a.min = TR_MAX(a.min, v);
        if ((st = tr_js_count_kw(x, node, "maxItems", &v, &has))) return st;
        if (has) a.max = TR_MIN(a.max, v);
        const json_t *u = json_object_get(node, "unevaluatedItems");
        if (u && !json_is_true(u) && (st = unevaluated_shape(&a, i, u))) return st;
    }
    if (a.min > a.max) return (*out = tr_gx_never(cc)), TR_OK;
    if (a.min > 100000)
        return tr_js_fail(x, TR_ERR_LIMIT, n->nodes[0].node, "minItems %llu is too large",
                          (unsigned long long)a.min);
    for (uint32_t i = 0; i < a.ns; i++) a.K = TR_MAX(a.K, a.s[i].np);
    if (a.K > a.max) a.K = (size_t)a.max;
    if (a.K > 2000)
        return tr_js_fail(x, TR_ERR_LIMIT, n->nodes[0].node,
                          "more than 2000 positional item schemas");
    st = counters(&a);
    if (st == TR_ERR_FULL) return (*out = tr_gx_never(cc)), TR_OK;
    if (st) return st;
    for (uint32_t i = 0; i < n->n && !a.unique && a.max > 1; i++) {
        const json_t *node = n->nodes[i].node;
        if (!json_is_true(json_object_get(node, "uniqueItems"))) continue;
        bool ok;
        if ((st = unique_domain(&a, node, &ok))) return st;
        a.unique = ok;
    }
    if (a.nc == 0 && !a.unique) return plain(&a, out);
    return counting(&a, out);
}
