/* json_gen_arr.c — array schemas to grammar expressions.
 *
 * Layering: grammar/ internal (json_schema_internal.h), called by the
 * rule builder (json_gen.c). Single-threaded per compile.
 *
 * Every member of the conjunction gives a tuple shape: a prefix of
 * per-position schemas and a schema for the rest. Draft 2020-12 says
 * prefixItems + items; drafts 4..2019 say items (an array) +
 * additionalItems, or items (one schema for all). Position j must
 * satisfy, for every member, its prefix schema j or its rest schema, so
 * positions up to the longest prefix get their own rule and the rest
 * share one. minItems / maxItems bound the length:
 *
 *   [ PRE ( e0 (SEP e1 (SEP e2 ... (SEP rest){a,b})?)?)? POST ]
 *
 * with the first minItems elements not optional. A position whose
 * schema accepts nothing ends the array there (the grammar's NEVER
 * propagation cuts the rest). uniqueItems is only enforced when it
 * holds by construction (at most one element); `contains` is refused.
 */
#include <string.h>

#include "grammar/json_schema_internal.h"

typedef struct shape {
    const json_t *node;
    const json_t *prefix; /* array of schemas, or NULL */
    const json_t *rest;   /* schema for the other positions, NULL: any */
} shape;

static tr_status shapes(js_ctx *x, const js_norm *n, shape *s, uint32_t *ns) {
    *ns = 0;
    for (uint32_t i = 0; i < n->n; i++) {
        const json_t *node = n->nodes[i].node;
        const json_t *pi = json_object_get(node, "prefixItems");
        const json_t *it = json_object_get(node, "items");
        const json_t *ai = json_object_get(node, "additionalItems");
        shape sh = {node, NULL, NULL};
        if (pi) {
            if (!json_is_array(pi))
                return tr_js_fail(x, TR_ERR_FORMAT, node, "prefixItems must be an array");
            sh.prefix = pi;
            sh.rest = json_is_array(it) ? NULL : it;
        } else if (json_is_array(it)) {
            sh.prefix = it;
            sh.rest = ai;
        } else
            sh.rest = it;
        if (sh.prefix || sh.rest) s[(*ns)++] = sh;
    }
    return TR_OK;
}

static tr_status count_kw(js_ctx *x, const json_t *node, const char *kw, uint64_t *v, bool *has) {
    const json_t *j = json_object_get(node, kw);
    *has = false;
    if (!j) return TR_OK;
    js_dec d;
    if (!json_is_number(j) || !tr_js_dec_from_json(x->cc, j, &d) || !tr_js_dec_is_int(&d) ||
        (d.neg && d.n))
        return tr_js_fail(x, TR_ERR_FORMAT, node, "%s must be a non-negative integer", kw);
    *has = true;
    *v = tr_js_dec_int_digits(&d) > 9 ? 1000000000ull : (uint64_t)json_number_value(j);
    return TR_OK;
}

/* The rule of position j (j == UINT32_MAX: the rest). */
static tr_status position_rule(js_ctx *x, const shape *s, uint32_t ns, uint32_t j,
                               uint32_t depth, gx **out) {
    gcc *cc = x->cc;
    js_item *it = tr_gcc_alloc(cc, (size_t)(ns ? ns : 1) * sizeof *it);
    if (!it) return cc->err;
    uint32_t k = 0;
    for (uint32_t i = 0; i < ns; i++) {
        size_t np = s[i].prefix ? json_array_size(s[i].prefix) : 0;
        const json_t *sch = j != UINT32_MAX && j < np ? json_array_get(s[i].prefix, j) : s[i].rest;
        if (sch) it[k++] = (js_item){sch, 0};
    }
    uint32_t r;
    tr_status st;
    if (k == 0)
        st = tr_js_any_value(x, depth + 1, &r);
    else {
        js_conj c = {it, k};
        st = tr_js_rule_for(x, &c, depth + 1, NULL, &r);
    }
    if (st) return st;
    *out = tr_gx_ref(cc, r);
    return *out ? TR_OK : cc->err;
}

tr_status tr_js_gen_array(js_ctx *x, const js_norm *n, uint32_t depth, gx **out) {
    gcc *cc = x->cc;
    shape *s = tr_gcc_alloc(cc, (size_t)(n->n ? n->n : 1) * sizeof *s);
    if (!s) return cc->err;
    uint32_t ns;
    tr_status st = shapes(x, n, s, &ns);
    if (st) return st;
    uint64_t min = 0, max = UINT64_MAX;
    for (uint32_t i = 0; i < n->n; i++) {
        const json_t *node = n->nodes[i].node;
        uint64_t v;
        bool has;
        if ((st = count_kw(x, node, "minItems", &v, &has))) return st;
        if (has) min = TR_MAX(min, v);
        if ((st = count_kw(x, node, "maxItems", &v, &has))) return st;
        if (has) max = TR_MIN(max, v);
    }
    for (uint32_t i = 0; i < n->n; i++) {
        const json_t *node = n->nodes[i].node;
        if (json_is_true(json_object_get(node, "uniqueItems")) && max > 1 &&
            (st = tr_js_unsupported(x, node, "uniqueItems",
                                    "distinct array elements are not enforced")))
            return st;
        if (json_object_get(node, "contains") &&
            (st = tr_js_unsupported(x, node, "contains", "`contains` is not enforced")))
            return st;
        if (json_object_get(node, "unevaluatedItems") &&
            !json_is_true(json_object_get(node, "unevaluatedItems")) &&
            (st = tr_js_unsupported(x, node, "unevaluatedItems", "not enforced")))
            return st;
    }
    if (min > max) return (*out = tr_gx_never(cc)), TR_OK;
    if (min > 100000)
        return tr_js_fail(x, TR_ERR_LIMIT, n->nodes[0].node, "minItems %llu is too large",
                          (unsigned long long)min);
    size_t K = 0;
    for (uint32_t i = 0; i < ns; i++)
        if (s[i].prefix) K = TR_MAX(K, json_array_size(s[i].prefix));
    if (K > max) K = (size_t)max;
    if (K > 2000)
        return tr_js_fail(x, TR_ERR_LIMIT, n->nodes[0].node,
                          "more than 2000 positional item schemas");
    js_ws ws;
    tr_js_ws(x, depth, &ws);
    /* the tail after position K: (SEP rest){a, b} */
    gx *rest;
    if ((st = position_rule(x, s, ns, UINT32_MAX, depth, &rest))) return st;
    uint64_t a = min > K ? min - K : 0;
    uint64_t b = max == UINT64_MAX ? GX_INF : max - K;
    gx *tail;
    if (K == 0) {
        /* rest (SEP rest){a-1, b-1}, the whole optional when min == 0 */
        if (b == 0) return (*out = tr_js_container(x, '[', NULL, true, depth)), TR_OK;
        gx *more = tr_gx_rep(cc, tr_gx_seq2(cc, tr_gx_rxz(cc, ws.sep), rest),
                             a > 0 ? (uint32_t)(a - 1) : 0,
                             b == GX_INF ? GX_INF : (uint32_t)(b - 1));
        *out = tr_js_container(x, '[', tr_gx_seq2(cc, rest, more), min == 0, depth);
        return *out ? TR_OK : cc->err;
    }
    tail = tr_gx_rep(cc, tr_gx_seq2(cc, tr_gx_rxz(cc, ws.sep), rest), (uint32_t)a,
                     b == GX_INF ? GX_INF : (uint32_t)b);
    /* positions K-1 .. 1, innermost first: SEP e_j tail, optional when j >= min */
    gx *acc = tail;
    for (size_t j = K; j-- > 1;) {
        gx *e;
        if ((st = position_rule(x, s, ns, (uint32_t)j, depth, &e))) return st;
        gx *step = tr_gx_seq3(cc, tr_gx_rxz(cc, ws.sep), e, acc);
        acc = j >= min ? tr_gx_opt(cc, step) : step;
    }
    gx *e0;
    if ((st = position_rule(x, s, ns, 0, depth, &e0))) return st;
    *out = tr_js_container(x, '[', tr_gx_seq2(cc, e0, acc), min == 0, depth);
    return *out ? TR_OK : cc->err;
}
