/* json_oneof.c — oneOf ("exactly one branch holds") as anyOf plus, per
 * branch, constraints that make every other branch fail.
 *
 * Layering: grammar/json (json_internal.h), called by the
 * rule builder (json_gen.c). Single-threaded per compile.
 *
 * For every ordered pair of branches (i, j) and every JSON type t both
 * may take, one of these must hold, else the oneOf is refused:
 *   - i and j are disjoint on t, provably: their enum/const values fail
 *     the other (checked with the validator); their string languages do
 *     not meet (automaton product); their number ranges do not meet;
 *     for objects, a property one requires (or the conjunction holding
 *     the oneOf requires: its node, and siblings such as the other
 *     members of an allOf) has values pinned apart in both (the
 *     discriminator: the other need not require it), or one requires a
 *     property the other does not allow (additionalProperties: false),
 *     or one's objects have more properties (required names,
 *     minProperties) than the other's maxProperties allows, or a
 *     property one requires has values under the two that are disjoint
 *     by these same rules (patterns, types, nested discriminators: the
 *     general form of the enum/const one); or a side
 *     with a disjunction of its own has every branch of it disjoint from
 *     the other side by these same rules (nested up to 3 deep);
 *   - neither constrains t at all: every value of type t satisfies both,
 *     so none satisfies exactly one; t leaves branch i (exact);
 *   - branch i gets "not j" (json_not.c; exact);
 *   - j has no complement, t is object and j requires a property p that
 *     i does not: branch i gets "objects have no p", so no value it
 *     accepts satisfies j (sound; values of i that carry p and still
 *     fail j are lost);
 *   - else, j closed (additionalProperties false): branch i gets "some
 *     property i lists and j does not allow is present" (sound; the
 *     objects of i with only keys j allows are lost: for branches over
 *     disjoint keys, the empty object, which satisfies them all).
 * Branch i then compiles as B_i plus those constraints (synthetic schema
 * nodes owned by the compile), and the oneOf as the anyOf of them.
 * Each step is sound, so the result accepts only values that satisfy
 * exactly one branch.
 */
#include <string.h>

#include "grammar/json/json_internal.h"

typedef struct facts {
    const json_t *b;
    const js_norm *ctx; /* the conjunction holding the oneOf (its own
                           node and every sibling member): their
                           `required` holds in every branch */
    js_norm n;
    uint32_t types; /* effective: enum values counted */
    bool pending;   /* a disjunction inside: facts are a superset */
} facts;

/* f's members, then its context's: the schemas whose `required` hold for
 * f's values. */
static uint32_t holders(const facts *f) { return f->n.n + (f->ctx ? f->ctx->n : 0); }

static const json_t *holder(const facts *f, uint32_t i) {
    return i < f->n.n ? f->n.nodes[i].node : f->ctx->nodes[i - f->n.n].node;
}

static const char *const kw_str[] = {"minLength", "maxLength", "pattern", "format", NULL};
static const char *const kw_num[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                     "multipleOf", "divisibleBy", NULL};
static const char *const kw_arr[] = {"items", "prefixItems", "additionalItems", "minItems",
                                     "maxItems", "uniqueItems", "contains", "minContains",
                                     "maxContains", "unevaluatedItems", NULL};
static const char *const kw_obj[] = {"properties", "patternProperties", "additionalProperties",
                                     "required", "propertyNames", "minProperties",
                                     "maxProperties", "dependencies", "dependentRequired",
                                     "dependentSchemas", "unevaluatedProperties", NULL};

static const char *const *kw_of(uint32_t t) {
    return t == JT_STR ? kw_str : (t == JT_INT || t == JT_FRAC) ? kw_num
         : t == JT_ARR ? kw_arr : t == JT_OBJ ? kw_obj : NULL;
}

/* Every value of type t satisfies the branch. */
static bool unconstrained(js_ctx *x, const facts *f, uint32_t t) {
    if (f->pending || f->n.has_values || f->n.never || !(f->n.types & t)) return false;
    const char *const *kws = kw_of(t);
    for (uint32_t i = 0; i < f->n.n; i++) {
        const json_t *node = f->n.nodes[i].node;
        if (json_object_get(node, "not") || json_object_get(node, "if") ||
            tr_js_is_synthetic(x, node))
            return false;
        for (int k = 0; kws && kws[k]; k++)
            if (json_object_get(node, kws[k])) return false;
    }
    return true;
}

static bool lists_name(const json_t *node, const char *name) {
    const json_t *r = json_object_get(node, "required");
    for (size_t k = 0; json_is_array(r) && k < json_array_size(r); k++)
        if (json_is_string(json_array_get(r, k)) &&
            !strcmp(json_string_value(json_array_get(r, k)), name))
            return true;
    return false;
}

/* Whether a value of branch f, where the oneOf applies, has property
 * name (required by the branch or by a member of the conjunction
 * holding the oneOf: its node and the siblings beside it, as allOf's). */
static bool requires(const facts *f, const char *name) {
    for (uint32_t i = 0; i < holders(f); i++)
        if (lists_name(holder(f, i), name)) return true;
    return false;
}

/* Whether some member of f forbids property name (its schema there, by
 * properties / patternProperties / additionalProperties, is `false`). */
static tr_status disallows(js_ctx *x, const facts *f, const char *name, bool *no) {
    *no = false;
    for (uint32_t i = 0; i < f->n.n && !*no; i++) {
        const json_t *node = f->n.nodes[i].node;
        const json_t *props = json_object_get(node, "properties");
        const json_t *pp = json_object_get(node, "patternProperties");
        const json_t *ap = json_object_get(node, "additionalProperties");
        const json_t *s = json_is_object(props) ? json_object_get(props, name) : NULL;
        if (s) {
            *no = json_is_false(s);
            continue;
        }
        bool matched = false;
        const char *k;
        json_t *v;
        if (json_is_object(pp))
            json_object_foreach((json_t *)pp, k, v) {
                cpdfa *d;
                tr_status st = tr_js_pattern_cpdfa(x, node, k, &d);
                if (st) return st;
                if (!d || !tr_cpdfa_matches(d, name, strlen(name))) continue;
                matched = true;
                if (json_is_false(v)) *no = true;
            }
        if (!matched && json_is_false(ap)) *no = true;
    }
    return TR_OK;
}

/* f's members' `properties` schemas for name, the first cap of them
 * (fewer constraints: a superset of the values, which is all a
 * disjointness proof needs); how many. */
static uint32_t property_items(const facts *f, const char *name, js_item *it, uint32_t cap) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < f->n.n && k < cap; i++) {
        const json_t *props = json_object_get(f->n.nodes[i].node, "properties");
        const json_t *s = json_is_object(props) ? json_object_get(props, name) : NULL;
        if (s) it[k++] = (js_item){s, 0};
    }
    return k;
}

/* The values a required property of f is pinned to (enum/const), if any. */
static tr_status pinned(js_ctx *x, const facts *f, const char *name, js_norm *pv, bool *yes) {
    *yes = false;
    js_item it[64];
    uint32_t k = property_items(f, name, it, 64);
    if (!k) return TR_OK;
    js_conj c = {it, k};
    tr_status st = tr_js_flatten(x, &c, pv);
    *yes = !st && (pv->has_values || pv->never);
    return st;
}

/* How many distinct names f's objects must have (its members' `required`
 * and its context's), counted up to 64. */
static uint32_t required_count(const facts *f) {
    const char *seen[64];
    uint32_t n = 0;
    for (uint32_t i = 0; i < holders(f) && n < 64; i++) {
        const json_t *r = json_object_get(holder(f, i), "required");
        for (size_t k = 0; json_is_array(r) && k < json_array_size(r) && n < 64; k++) {
            const char *name = json_string_value(json_array_get(r, k));
            bool dup = !name;
            for (uint32_t m = 0; m < n && !dup; m++) dup = !strcmp(seen[m], name);
            if (!dup) seen[n++] = name;
        }
    }
    return n;
}

static tr_status recover(js_ctx *x, tr_status st, bool *ok);

/* A property count bound of f's members (minProperties: the largest;
 * maxProperties: the smallest); *any false when none states one (a
 * malformed count is the generator's error to report: none here). */
static tr_status count_bound(js_ctx *x, const facts *f, const char *kw, uint64_t *out,
                             bool *any) {
    bool max = kw[1] == 'a';
    *any = false;
    for (uint32_t i = 0; i < f->n.n; i++) {
        uint64_t c;
        bool has, ok = true;
        tr_status st = tr_js_count_kw(x, f->n.nodes[i].node, kw, &c, &has);
        if ((st = recover(x, st, &ok))) return st;
        if (!ok || !has) continue;
        *out = !*any ? c : max ? TR_MIN(*out, c) : TR_MAX(*out, c);
        *any = true;
    }
    return TR_OK;
}

/* p's objects have more properties than q's may: p requires more
 * distinct names, or a larger minProperties, than q's maxProperties. */
static tr_status counts_apart(js_ctx *x, const facts *p, const facts *q, bool *apart) {
    uint64_t qmax, pmin = required_count(p), m;
    bool has;
    *apart = false;
    tr_status st = count_bound(x, q, "maxProperties", &qmax, &has);
    if (st || !has) return st;
    if ((st = count_bound(x, p, "minProperties", &m, &has))) return st;
    if (has) pmin = TR_MAX(pmin, m);
    *apart = pmin > qmax;
    return TR_OK;
}

static tr_status objects_disjoint(js_ctx *x, const facts *a, const facts *b, bool *dis) {
    *dis = false;
    for (int side = 0; side < 2 && !*dis; side++) {
        const facts *p = side ? b : a, *q = side ? a : b;
        tr_status st = counts_apart(x, p, q, dis);
        if (st || *dis) return st;
        /* the names p's members and its context require */
        for (uint32_t i = 0; i < holders(p) && !*dis; i++) {
            const json_t *r = json_object_get(holder(p, i), "required");
            for (size_t k = 0; json_is_array(r) && k < json_array_size(r) && !*dis; k++) {
                const char *name = json_string_value(json_array_get(r, k));
                if (!name) continue;
                bool no;
                st = disallows(x, q, name, &no);
                if (st) return st;
                if (no) {
                    *dis = true;
                    break;
                }
                /* p has name; where q's values have it too, it is pinned
                 * apart (q need not require it) */
                js_norm pa, pb;
                bool ka, kb;
                if ((st = pinned(x, p, name, &pa, &ka)) || (st = pinned(x, q, name, &pb, &kb)))
                    return st;
                if (!ka || !kb) continue;
                bool meet = false;
                for (uint32_t u = 0; u < pa.n_vals && !meet && !pa.never; u++)
                    for (uint32_t v = 0; v < pb.n_vals && !meet && !pb.never; v++)
                        meet = tr_js_json_equal(x->cc, pa.vals[u], pb.vals[v]);
                *dis = !meet;
            }
        }
    }
    return TR_OK;
}

/* Runs a sub-proof whose refusal only means "not proven". */
static tr_status recover(js_ctx *x, tr_status st, bool *ok) {
    if (st == TR_ERR_UNSUPPORTED || st == TR_ERR_LIMIT || st == TR_ERR_FORMAT) {
        x->cc->err = TR_OK;
        if (x->cc->diag) memset(x->cc->diag, 0, sizeof *x->cc->diag);
        *ok = false;
        return TR_OK;
    }
    return st;
}

static tr_status strings_disjoint(js_ctx *x, const facts *a, const facts *b, bool *dis) {
    *dis = false;
    if (a->pending || b->pending) return TR_OK;
    js_item ia = {a->b, 0}, ib = {b->b, 0};
    js_conj ca = {&ia, 1}, cb = {&ib, 1};
    cpdfa la, lb, r;
    bool anya, anyb, ok = true;
    tr_status st = tr_js_string_lang(x, &ca, &la, &anya);
    if (!st) st = tr_js_string_lang(x, &cb, &lb, &anyb);
    if ((st = recover(x, st, &ok)) || !ok || anya || anyb) return st;
    st = tr_cpdfa_product(x->cc, &la, &lb, CPD_AND, &r);
    if ((st = recover(x, st, &ok)) || !ok) return st;
    *dis = tr_cpdfa_is_empty(&r);
    return TR_OK;
}

static tr_status numbers_disjoint(js_ctx *x, const facts *a, const facts *b, bool *dis) {
    *dis = false;
    js_range ra, rb;
    tr_status st = tr_js_num_range(x, &a->n, &ra);
    if (!st) st = tr_js_num_range(x, &b->n, &rb);
    if (st) return st;
    for (int side = 0; side < 2 && !*dis; side++) {
        const js_range *lo = side ? &rb : &ra, *hi = side ? &ra : &rb;
        if (!lo->has_hi || !hi->has_lo) continue; /* lo below hi? */
        int c = tr_js_dec_cmp(&lo->hi, &hi->lo);
        *dis = c < 0 || (c == 0 && (lo->hi_excl || hi->lo_excl));
    }
    return TR_OK;
}

/* Every enum/const value of a has type outside t or fails b. */
static tr_status values_fail(js_ctx *x, const facts *a, const facts *b, uint32_t t, bool *yes) {
    *yes = false;
    if (!a->n.has_values) return TR_OK;
    js_item it = {b->b, 0};
    js_conj c = {&it, 1};
    for (uint32_t i = 0; i < a->n.n_vals; i++) {
        if (!(tr_js_value_type(x->cc, a->n.vals[i]) & t)) continue;
        bool ok = false, decided = true;
        tr_status st = tr_js_validate(x, &c, a->n.vals[i], 0, &ok);
        /* a value the validator cannot decide may satisfy b: not proven */
        if ((st = recover(x, st, &decided))) return st;
        if (ok || !decided) return TR_OK;
    }
    *yes = true;
    return TR_OK;
}

static tr_status disjoint_on(js_ctx *x, const facts *a, const facts *b, uint32_t t, bool *dis) {
    tr_status st;
    if ((st = values_fail(x, a, b, t, dis)) || *dis) return st;
    if ((st = values_fail(x, b, a, t, dis)) || *dis) return st;
    if (t == JT_STR) return strings_disjoint(x, a, b, dis);
    if (t == JT_INT || t == JT_FRAC) return numbers_disjoint(x, a, b, dis);
    if (t == JT_OBJ) return objects_disjoint(x, a, b, dis);
    *dis = false;
    return TR_OK;
}

static uint32_t eff_types(js_ctx *x, const js_norm *n) {
    if (n->never) return 0;
    if (!n->has_values) return n->types;
    uint32_t t = 0;
    for (uint32_t i = 0; i < n->n_vals; i++) t |= tr_js_value_type(x->cc, n->vals[i]);
    return t & n->types;
}

/* The facts of conjunction c, b standing for it where one schema is read
 * (a superset of c when c has more: sound for disjointness); *ok false
 * when c cannot be flattened (not proven). */
static tr_status facts_of(js_ctx *x, const js_conj *c, const json_t *b, const js_norm *ctx,
                          facts *out, bool *ok) {
    *ok = true;
    out->b = b;
    out->ctx = ctx;
    tr_status st = tr_js_flatten(x, c, &out->n);
    if ((st = recover(x, st, ok)) || !*ok) return st;
    out->types = eff_types(x, &out->n);
    out->pending = out->n.split != UINT32_MAX;
    return TR_OK;
}

/* The facts of p with its first disjunction decided for branch br: p's
 * members (expanded, the disjunction marked done, as split() in json_gen.c
 * builds a branch) plus br. A oneOf branch's exclusions of the others are
 * left out: the facts are a superset, which is all a disjointness proof
 * needs. *ok false when the branch cannot be flattened (not proven). */
static tr_status branch_facts(js_ctx *x, const facts *p, const json_t *br, facts *out, bool *ok) {
    gcc *cc = x->cc;
    js_conj c = {tr_gcc_alloc(cc, (size_t)(p->n.n + 1) * sizeof *c.v), p->n.n + 1};
    if (!c.v) return cc->err;
    for (uint32_t i = 0; i < p->n.n; i++) {
        c.v[i] = p->n.nodes[i];
        c.v[i].done |= JS_EXPANDED;
    }
    c.v[p->n.split].done |= p->n.split_kw[0] == 'o' ? JS_DONE_ONEOF : JS_DONE_ANYOF;
    c.v[p->n.n] = (js_item){br, 0};
    return facts_of(x, &c, br, p->ctx, out, ok); /* br alone: a superset, sound where used */
}

#define JS_SPLIT_DEPTH 3u     /* nested disjunctions looked into */
#define JS_SPLIT_BRANCHES 64u  /* a disjunction with more is not */
#define JS_SPLIT_WORK 256u     /* branches flattened per pair and type */

static tr_status disjoint_deep(js_ctx *x, const facts *a, const facts *b, uint32_t t,
                               uint32_t depth, uint32_t *work, bool *dis);

/* The facts of the value of property name in f's objects: the
 * conjunction of f's members' `properties` schemas for it (*ok false when
 * none constrains it or it cannot be flattened: not proven). */
static tr_status property_facts(js_ctx *x, const facts *f, const char *name, facts *out,
                                bool *ok) {
    js_item it[16];
    uint32_t k = property_items(f, name, it, 16);
    *ok = k > 0;
    if (!*ok) return TR_OK;
    js_conj c = {it, k};
    return facts_of(x, &c, it[0].node, NULL, out, ok); /* it[0] alone: a superset */
}

/* Objects of a and b cannot agree on a property one of them requires:
 * its values under the two are disjoint on every type (the other need
 * not require it; where the objects meet, it is present). The general
 * form of the enum/const discriminator: patterns, types, nested
 * discriminators. */
static tr_status values_apart(js_ctx *x, const facts *a, const facts *b, uint32_t depth,
                              uint32_t *work, bool *dis) {
    *dis = false;
    tr_status st;
    for (int side = 0; side < 2 && !*dis; side++) {
        const facts *p = side ? b : a, *q = side ? a : b;
        for (uint32_t i = 0; i < holders(p) && !*dis; i++) {
            const json_t *r = json_object_get(holder(p, i), "required");
            for (size_t k = 0; json_is_array(r) && k < json_array_size(r) && !*dis; k++) {
                const char *name = json_string_value(json_array_get(r, k));
                if (!name || !*work) continue;
                --*work;
                if ((st = tr_gcc_poll_time(x->cc))) return st; /* the compile's time budget */
                facts pv, qv;
                bool ok;
                st = property_facts(x, p, name, &pv, &ok);
                if (!st && ok) st = property_facts(x, q, name, &qv, &ok);
                if (st) return st;
                if (!ok) continue;
                bool all = true;
                for (uint32_t u = 1; u < JT_ALL && all; u <<= 1)
                    if (pv.types & qv.types & u &&
                        (st = disjoint_deep(x, &pv, &qv, u, depth + 1, work, &all)))
                        return st;
                *dis = all;
            }
        }
    }
    return TR_OK;
}

/* disjoint_on, and where a side has a disjunction still to choose (its
 * facts a superset), also "every branch of it is disjoint from the
 * other side" (branches without type t count as disjoint): a oneOf of
 * discriminated objects against, say, an object of at most one
 * property. Each proof is of disjointness, never assumed; *work bounds
 * the branches flattened (past it: not proven). */
static tr_status disjoint_deep(js_ctx *x, const facts *a, const facts *b, uint32_t t,
                               uint32_t depth, uint32_t *work, bool *dis) {
    tr_status st = disjoint_on(x, a, b, t, dis);
    if (st || *dis || depth >= JS_SPLIT_DEPTH) return st;
    if (t == JT_OBJ && ((st = values_apart(x, a, b, depth, work, dis)) || *dis)) return st;
    for (int side = 0; side < 2; side++) {
        const facts *p = side ? b : a, *q = side ? a : b;
        if (!p->pending) continue;
        const json_t *list = json_object_get(p->n.nodes[p->n.split].node, p->n.split_kw);
        size_t k = json_array_size(list);
        bool all = k > 0 && k <= JS_SPLIT_BRANCHES;
        for (size_t br = 0; br < k && all; br++) {
            facts pb;
            all = *work > 0;
            if (!all) break;
            --*work;
            if ((st = tr_gcc_poll_time(x->cc))) return st; /* the compile's time budget */
            if ((st = branch_facts(x, p, json_array_get(list, br), &pb, &all))) return st;
            if (!all || !(pb.types & t)) continue;
            if ((st = disjoint_deep(x, &pb, q, t, depth + 1, work, &all))) return st;
        }
        if (all) {
            *dis = true;
            return TR_OK;
        }
    }
    return TR_OK;
}

/* "objects have no name" */
static const json_t *forbid_node(js_ctx *x, const char *name) {
    json_t *o = tr_js_synth_new(x), *p = json_object();
    if (!o || !p || json_object_set_new(p, name, json_false()) ||
        json_object_set_new(o, "properties", p)) {
        if (!o) json_decref(p);
        return x->cc->err ? NULL : (tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory"), NULL);
    }
    return o;
}

/* Whether name is among the keys j's objects may have, when j is closed
 * (a member with additionalProperties false and no patternProperties:
 * its listed properties, less those set to false). */
static bool closed_allows(const facts *j, const char *name, bool *closed) {
    bool ok = true;
    *closed = false;
    for (uint32_t m = 0; m < j->n.n; m++) {
        const json_t *node = j->n.nodes[m].node;
        if (!json_is_false(json_object_get(node, "additionalProperties")) ||
            json_object_get(node, "patternProperties"))
            continue;
        *closed = true;
        const json_t *props = json_object_get(node, "properties");
        const json_t *s = json_is_object(props) ? json_object_get(props, name) : NULL;
        if (!s || json_is_false(s)) ok = false;
    }
    return ok;
}

/* For objects of branch i against a closed branch j (see closed_allows):
 * "some property j does not allow is present", over the properties i
 * lists, as {anyOf: [{required: [k]}, ...]} (a single {required: [k]}
 * for one key); such an object fails j whatever its values. *need NULL
 * when j is not closed or i lists no such key. Sound; the objects of i
 * that carry only keys j allows are lost (exactly the empty object when
 * the branches list disjoint keys, and {} then satisfies every such
 * branch, so no oneOf holds for it anyway). */
static tr_status key_outside(js_ctx *x, const facts *i, const facts *j, const json_t **need) {
    *need = NULL;
    json_t *alts = json_array();
    if (!alts) return tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
    bool closed = false;
    for (uint32_t m = 0; m < i->n.n; m++) {
        const json_t *props = json_object_get(i->n.nodes[m].node, "properties");
        const char *k;
        json_t *v;
        if (!json_is_object(props)) continue;
        json_object_foreach((json_t *)props, k, v) {
            if (json_is_false(v) || closed_allows(j, k, &closed) || !closed) continue;
            json_t *o = json_object(), *r = json_array();
            if (!o || !r || json_array_append_new(r, json_string(k)) ||
                json_object_set_new(o, "required", r) || json_array_append_new(alts, o)) {
                if (!o) json_decref(r);
                json_decref(alts);
                return tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
            }
        }
    }
    if (!json_array_size(alts)) {
        json_decref(alts);
        return TR_OK;
    }
    json_t *o = tr_js_synth_new(x);
    if (!o || json_object_set_new(o, "anyOf", alts)) {
        if (!o) json_decref(alts);
        return x->cc->err ? x->cc->err : tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
    }
    *need = o;
    return TR_OK;
}

static tr_status add_extra(gcc *cc, js_item **extra, uint32_t *n, const json_t *node) {
    js_item *v = tr_gcc_alloc(cc, (*n + 2) * sizeof *v);
    if (!v) return cc->err;
    if (*n) memcpy(v, *extra, *n * sizeof *v);
    v[(*n)++] = (js_item){node, 0};
    *extra = v;
    return TR_OK;
}

/* For branch i against branch j: which common types are not proven
 * disjoint (and not droppable); drops go to *drop. */
static tr_status pair_gaps(js_ctx *x, facts *f, size_t i, size_t j, uint32_t *drop,
                           uint32_t *gaps) {
    *gaps = 0;
    uint32_t common = f[i].types & f[j].types & ~*drop;
    for (uint32_t t = 1; t < JT_ALL; t <<= 1) {
        if (!(common & t)) continue;
        bool dis;
        uint32_t work = JS_SPLIT_WORK;
        tr_status st = disjoint_deep(x, &f[i], &f[j], t, 0, &work, &dis);
        if (st) return st;
        if (dis) continue;
        if (unconstrained(x, &f[i], t) && unconstrained(x, &f[j], t)) {
            *drop |= t;
            continue;
        }
        *gaps |= t;
    }
    return TR_OK;
}

tr_status tr_js_oneof_plan(js_ctx *x, const js_norm *ctx, const json_t *list, js_item **extra,
                           uint32_t *n_extra, bool *ok, const char **why_out) {
    gcc *cc = x->cc;
    size_t k = json_array_size(list);
    *ok = false;
    *why_out = NULL;
    facts *f = tr_gcc_alloc(cc, k * sizeof *f);
    uint32_t *drop = tr_gcc_alloc(cc, k * sizeof *drop);
    if (!f || !drop) return cc->err;
    uint32_t ctx_types = eff_types(x, ctx);
    for (size_t i = 0; i < k; i++) {
        f[i].b = json_array_get(list, i);
        f[i].ctx = ctx;
        js_item it = {f[i].b, 0};
        js_conj c = {&it, 1};
        tr_status st = tr_js_flatten(x, &c, &f[i].n);
        if (st) return st;
        /* only the types the conjunction holding the oneOf allows can meet */
        f[i].types = eff_types(x, &f[i].n) & ctx_types;
        f[i].pending = f[i].n.split != UINT32_MAX;
    }
    for (size_t i = 0; i < k; i++) {
        extra[i] = NULL;
        n_extra[i] = 0;
        for (size_t j = 0; j < k; j++) {
            if (i == j) continue;
            uint32_t gaps;
            tr_status st = pair_gaps(x, f, i, j, &drop[i], &gaps);
            if (st) return st;
            if (!gaps) continue;
            /* exact: branch i also satisfies "not branch j" */
            const json_t *neg;
            const char *why;
            if ((st = tr_js_negate(x, f[j].b, &neg, &why))) return st;
            if (neg) {
                if ((st = add_extra(cc, &extra[i], &n_extra[i], neg))) return st;
                continue;
            }
            *why_out = why;
            /* objects only: forbid in i a property j requires and i does
             * not (sound: values of i that carry it and fail j are lost) */
            if (gaps != JT_OBJ) return TR_OK;
            const char *p = NULL;
            for (uint32_t m = 0; m < f[j].n.n && !p; m++) {
                const json_t *r = json_object_get(f[j].n.nodes[m].node, "required");
                for (size_t q = 0; json_is_array(r) && q < json_array_size(r) && !p; q++) {
                    const char *name = json_string_value(json_array_get(r, q));
                    if (name && !requires(&f[i], name)) p = name;
                }
            }
            if (!p) { /* j closed: i keeps a key j does not allow */
                const json_t *need;
                if ((st = key_outside(x, &f[i], &f[j], &need))) return st;
                if (!need) return TR_OK;
                if ((st = add_extra(cc, &extra[i], &n_extra[i], need))) return st;
                continue;
            }
            const json_t *fb = forbid_node(x, p);
            if (!fb || (st = add_extra(cc, &extra[i], &n_extra[i], fb))) return cc->err;
        }
        if (drop[i]) {
            const json_t *dn = tr_js_synth_types(x, JT_ALL & ~drop[i]);
            tr_status st;
            if (!dn || (st = add_extra(cc, &extra[i], &n_extra[i], dn))) return cc->err;
        }
    }
    *ok = true;
    return TR_OK;
}
