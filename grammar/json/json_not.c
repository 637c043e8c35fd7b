/* json_not.c — the complement of a schema, written as schema nodes.
 *
 * Layering: grammar/json (json_internal.h), called while a
 * conjunction is flattened (`not`, if/then/else, dependentSchemas), by
 * the oneOf planner (a branch excludes the others) and by the array
 * generator (maxContains needs the items that do NOT match). Single-
 * threaded per compile.
 *
 * A schema object is a conjunction of keyword groups, so its complement
 * is the disjunction of the groups' complements (De Morgan), each one
 * said with ordinary keywords where JSON Schema can say it:
 *
 *   not {type: T}           {types: all but T}
 *   not {minimum: a}        {types: number, exclusiveMaximum: a}
 *   not {minLength..pattern..format}
 *                           {types: string, notString: {those keywords}}
 *   not {required: [a]}     {types: object, properties: {a: false}}
 *   not {properties: {a: S}}
 *                           {types: object, required: [a], properties: {a: not S}}
 *   not {prefixItems: [.., S_i]}
 *                           {types: array, minItems: i+1, prefixItems: [true x i, not S_i]}
 *   not {items: S} (after k positions)
 *                           {types: array, contains: not S, containsFrom: k}
 *   not {enum: [scalars]}   {notValues: [...]}; arrays and objects element-wise
 *   not allOf / anyOf / oneOf / not / if-then-else / $ref: De Morgan again
 *
 * A type-specific group only speaks about its type, so its complement
 * is limited to that type (a number fails `minLength` never). Groups
 * whose complement needs "some member exists" (patternProperties,
 * additionalProperties, propertyNames) say it with a private keyword
 * (JS_KW_SOME) that the object generator writes as a witness member.
 * uniqueItems (duplicates are not context-free), unevaluated*, dynamic
 * refs and the complement of a "some member" rule itself have no
 * complement here: the caller refuses or falls back.
 *
 * Private keywords (JS_KW_*, a control character first so no schema
 * keyword is one of them) say what JSON Schema cannot; they are read
 * only on nodes this compile made (tr_js_is_synthetic). Complements are
 * memoized per node and built from a worklist: the node of `not S` is
 * made (empty) before its content, so recursion through $ref gives a
 * recursive complement, and C never recurses on the schema's nesting.
 * One failure anywhere discards every complement made by that call.
 */
#include <stdio.h>
#include <string.h>

#include "grammar/json/json_internal.h"

#define JS_MAX_SYNTH 200000u
#define JS_NEG_MAX_ONEOF 12u
#define JS_NEG_MAX_VALUE_DEPTH 64u

/* ---- synthetic nodes ---- */

json_t *tr_js_synth_new(js_ctx *x) {
    if (x->n_synth >= JS_MAX_SYNTH) {
        tr_gcc_fail(x->cc, TR_ERR_LIMIT, 0,
                    "more than %u schema nodes made for not / if / oneOf / dependentSchemas",
                    JS_MAX_SYNTH);
        return NULL;
    }
    if (tr_gcc_charge(x->cc, 192)) return NULL;
    json_t *o = json_object();
    if (!o) {
        tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
        return NULL;
    }
    if (tr_js_keep(x, o)) return NULL;
    if (tr_js_ptrmap_put(x->cc, &x->synth, o, 1)) return NULL;
    x->n_synth++;
    return o;
}

bool tr_js_is_synthetic(const js_ctx *x, const json_t *node) {
    uint64_t v;
    return json_is_object(node) && tr_js_ptrmap_get(&x->synth, node, &v);
}

/* jansson setters that take a new reference; false (error set) on OOM */
static bool put(js_ctx *x, json_t *o, const char *k, const json_t *v) {
    if (!o || !v || json_object_set(o, k, (json_t *)v)) {
        tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
        return false;
    }
    return true;
}

static bool put_new(js_ctx *x, json_t *o, const char *k, json_t *v) {
    if (!o) json_decref(v);
    if (!o || !v || json_object_set_new(o, k, v)) {
        tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
        return false;
    }
    return true;
}

static bool push(js_ctx *x, json_t *a, const json_t *v) {
    if (!a || !v || json_array_append(a, (json_t *)v)) {
        tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
        return false;
    }
    return true;
}

/* A synthetic node limited to the JT_* types t (0: accepts nothing). */
static json_t *typed(js_ctx *x, uint32_t t) {
    json_t *o = tr_js_synth_new(x);
    if (o && !put_new(x, o, JS_KW_TYPES, json_integer(t))) return NULL;
    return o;
}

json_t *tr_js_synth_types(js_ctx *x, uint32_t types) { return typed(x, types); }

/* ---- the call: a worklist of complements to fill ---- */

typedef struct neg_job {
    const json_t *src;
    json_t *dst;
} neg_job;

typedef struct negc {
    js_ctx *x;
    js_ptrmap local; /* src -> dst made by this call (merged on success) */
    neg_job *q;
    uint32_t nq, capq;
    const char *why; /* set when some group has no complement */
} negc;

static bool fail(negc *c, const char *why) {
    if (!c->why) c->why = why;
    return false;
}

/* The node standing for "not s" (made empty and queued when new);
 * NULL on failure (c->why or the compile error set). */
static const json_t *neg_of(negc *c, const json_t *s) {
    js_ctx *x = c->x;
    if (json_is_true(s)) return json_false();
    if (json_is_false(s)) return json_true();
    if (!json_is_object(s)) return fail(c, "a schema must be an object or a boolean"), NULL;
    uint64_t v;
    if (tr_js_ptrmap_get(&x->neg, s, &v) || tr_js_ptrmap_get(&c->local, s, &v))
        return (const json_t *)(uintptr_t)v;
    if (tr_js_ptrmap_get(&x->neg_fail, s, &v))
        return fail(c, (const char *)(uintptr_t)v), NULL;
    json_t *d = tr_js_synth_new(x);
    if (!d || tr_js_ptrmap_put(x->cc, &c->local, s, (uint64_t)(uintptr_t)d)) return NULL;
    if (c->nq == c->capq) {
        uint32_t nc = c->capq ? c->capq * 2 : 16;
        neg_job *q = tr_gcc_alloc(x->cc, (size_t)nc * sizeof *q);
        if (!q) return NULL;
        if (c->nq) memcpy(q, c->q, c->nq * sizeof *q);
        c->q = q;
        c->capq = nc;
    }
    c->q[c->nq++] = (neg_job){s, d};
    return d;
}

/* ---- groups ---- */

typedef struct dlist {
    json_t *arr; /* the disjuncts */
} dlist;

static bool add(negc *c, dlist *d, const json_t *n) { return n && push(c->x, d->arr, n); }

/* allOf of the nodes (one node: itself) as a new disjunct */
static const json_t *all_of(negc *c, const json_t *const *v, uint32_t n) {
    if (n == 1) return v[0];
    json_t *o = tr_js_synth_new(c->x), *a = json_array();
    if (!o || !put_new(c->x, o, "allOf", a)) return NULL;
    for (uint32_t i = 0; i < n; i++)
        if (!push(c->x, a, v[i])) return NULL;
    return o;
}

static uint32_t node_types(js_ctx *x, const json_t *s, bool synth) {
    uint32_t t = JT_ALL;
    const json_t *ty = json_object_get(s, "type");
    if (json_is_string(ty) || json_is_array(ty)) {
        uint32_t b = 0;
        size_t n = json_is_array(ty) ? json_array_size(ty) : 1;
        for (size_t i = 0; i < n; i++) {
            const json_t *e = json_is_array(ty) ? json_array_get(ty, i) : ty;
            const char *name = json_is_string(e) ? json_string_value(e) : "";
            b |= !strcmp(name, "null")      ? JT_NULL
                 : !strcmp(name, "boolean") ? JT_BOOL
                 : !strcmp(name, "integer") ? JT_INT
                 : !strcmp(name, "number")  ? JT_INT | JT_FRAC
                 : !strcmp(name, "string")  ? JT_STR
                 : !strcmp(name, "array")   ? JT_ARR
                 : !strcmp(name, "object")  ? JT_OBJ
                 : !strcmp(name, "any")     ? JT_ALL
                                            : 0;
        }
        t &= b;
    }
    const json_t *pt = synth ? json_object_get(s, JS_KW_TYPES) : NULL;
    if (json_is_integer(pt)) t &= (uint32_t)json_integer_value(pt) & JT_ALL;
    (void)x;
    return t;
}

/* not {type...}: the other types */
static bool g_type(negc *c, const json_t *s, bool synth, dlist *d) {
    bool has = json_object_get(s, "type") || (synth && json_object_get(s, JS_KW_TYPES));
    if (!has) return true;
    const json_t *t = json_object_get(s, "type");
    if (t && !json_is_string(t) && !json_is_array(t)) return fail(c, "malformed `type`");
    for (size_t i = 0; json_is_array(t) && i < json_array_size(t); i++)
        if (!json_is_string(json_array_get(t, i)))
            return fail(c, "schemas inside `type` (draft 3)");
    uint32_t other = ~node_types(c->x, s, synth) & JT_ALL;
    return !other || add(c, d, typed(c->x, other));
}

/* not of one JSON value (arrays and objects element-wise) */
static const json_t *not_value(negc *c, const json_t *v, uint32_t depth);

static const json_t *not_scalars(negc *c, const json_t *const *v, uint32_t n) {
    json_t *o = tr_js_synth_new(c->x), *a = json_array();
    if (!o || !put_new(c->x, o, JS_KW_NOT_VALUES, a)) return NULL;
    for (uint32_t i = 0; i < n; i++)
        if (!push(c->x, a, v[i])) return NULL;
    return o;
}

static const json_t *not_array_value(negc *c, const json_t *v, uint32_t depth) {
    js_ctx *x = c->x;
    json_t *o = tr_js_synth_new(x), *alts = json_array();
    if (!o || !put_new(x, o, "anyOf", alts)) return NULL;
    size_t n = json_array_size(v);
    json_t *t;
    if (!(t = typed(x, JT_ALL & ~JT_ARR)) || !push(x, alts, t)) return NULL;
    if (n && (!(t = typed(x, JT_ARR)) || !put_new(x, t, "maxItems", json_integer((json_int_t)n - 1)) ||
              !push(x, alts, t)))
        return NULL;
    if (!(t = typed(x, JT_ARR)) || !put_new(x, t, "minItems", json_integer((json_int_t)n + 1)) ||
        !push(x, alts, t))
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = not_value(c, json_array_get(v, i), depth + 1);
        json_t *p = json_array();
        if (!e || !(t = typed(x, JT_ARR)) || !put_new(x, t, "prefixItems", p)) return NULL;
        for (size_t k = 0; k < i; k++)
            if (!push(x, p, json_true())) return NULL;
        if (!push(x, p, e) || !put_new(x, t, "minItems", json_integer((json_int_t)i + 1)) ||
            !push(x, alts, t))
            return NULL;
    }
    return o;
}

static json_t *one_prop(js_ctx *x, const char *k, const json_t *v);
static json_t *one_name(js_ctx *x, const char *k);

static const json_t *not_object_value(negc *c, const json_t *v, uint32_t depth) {
    js_ctx *x = c->x;
    json_t *o = tr_js_synth_new(x), *alts = json_array();
    if (!o || !put_new(x, o, "anyOf", alts)) return NULL;
    json_t *t;
    if (!(t = typed(x, JT_ALL & ~JT_OBJ)) || !push(x, alts, t)) return NULL;
    if (!(t = typed(x, JT_OBJ)) ||
        !put_new(x, t, "minProperties", json_integer((json_int_t)json_object_size(v) + 1)) ||
        !push(x, alts, t))
        return NULL;
    const char *k;
    json_t *e;
    json_object_foreach((json_t *)v, k, e) {
        /* k missing, or k with another value */
        if (!(t = typed(x, JT_OBJ)) || !put_new(x, t, "properties", one_prop(x, k, json_false())) ||
            !push(x, alts, t))
            return NULL;
        const json_t *ne = not_value(c, e, depth + 1);
        if (!ne || !(t = typed(x, JT_OBJ)) || !put_new(x, t, "properties", one_prop(x, k, ne)) ||
            !put_new(x, t, "required", one_name(x, k)) || !push(x, alts, t))
            return NULL;
    }
    return o;
}

static const json_t *not_value(negc *c, const json_t *v, uint32_t depth) {
    if (depth > JS_NEG_MAX_VALUE_DEPTH) return fail(c, "an enum/const value nested too deep"), NULL;
    if (json_is_array(v)) return not_array_value(c, v, depth);
    if (json_is_object(v)) return not_object_value(c, v, depth);
    return not_scalars(c, &v, 1);
}

/* not {enum / const}: every listed value excluded */
static const json_t *not_enum(negc *c, const json_t *en) {
    js_ctx *x = c->x;
    size_t n = json_array_size(en);
    const json_t **sc = tr_gcc_alloc(x->cc, (n + 1) * sizeof *sc);
    const json_t **parts = tr_gcc_alloc(x->cc, (n + 1) * sizeof *parts);
    if (!sc || !parts) return NULL;
    uint32_t ns = 0, np = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(en, i);
        if (json_is_array(v) || json_is_object(v)) {
            if (!(parts[np++] = not_value(c, v, 0))) return NULL;
        } else
            sc[ns++] = v;
    }
    if ((ns || !np) && !(parts[np++] = not_scalars(c, sc, ns))) return NULL;
    return all_of(c, parts, np);
}

static bool g_values(negc *c, const json_t *s, bool synth, dlist *d) {
    js_ctx *x = c->x;
    const json_t *en = json_object_get(s, "enum"), *co = json_object_get(s, "const");
    const json_t *nv = synth ? json_object_get(s, JS_KW_NOT_VALUES) : NULL;
    if (nv) { /* not (none of V) = one of V */
        json_t *o = tr_js_synth_new(x);
        if (!o || !put(x, o, "enum", nv) || !add(c, d, o)) return false;
    }
    if (en && !json_is_array(en)) return fail(c, "enum must be an array");
    if (en && !add(c, d, not_enum(c, en))) return false;
    return !co || add(c, d, not_value(c, co, 0));
}

/* not {minLength, maxLength, pattern, format}: strings outside that language */
static bool g_string(negc *c, const json_t *s, bool synth, uint32_t types, dlist *d) {
    js_ctx *x = c->x;
    static const char *const kws[] = {"minLength", "maxLength", "pattern", "format"};
    json_t *lang = NULL;
    for (size_t i = 0; i < TR_ARRAY_LEN(kws); i++) {
        const json_t *v = json_object_get(s, kws[i]);
        if (!v) continue;
        if (i == 3) {
            if (!json_is_string(v)) continue;
            gre_node *a;
            bool known;
            tr_status st = tr_js_format_ast(x->cc, json_string_value(v), &a, &known);
            if (st) return false;
            if (!known) {
                if (tr_js_format_is_asserted(json_string_value(v)))
                    return fail(c, "the complement of a format this compiler does not know");
                continue;
            }
        }
        if (!lang && !(lang = tr_js_synth_new(x))) return false;
        if (!put(x, lang, kws[i], v)) return false;
    }
    const json_t *ns = synth ? json_object_get(s, JS_KW_NOT_STRING) : NULL;
    if (ns) { /* not (strings outside L) = strings in L */
        json_t *o = typed(x, JT_STR & types), *a = json_array();
        if (!o || !put_new(x, o, "allOf", a) || !push(x, a, ns) || !add(c, d, o)) return false;
    }
    if (!lang || !(types & JT_STR)) return true;
    json_t *o = typed(x, JT_STR);
    return o && put(x, o, JS_KW_NOT_STRING, lang) && add(c, d, o);
}

/* not {minimum.., multipleOf}: numbers below / above, non-multiples */
static bool g_number(negc *c, const json_t *s, bool synth, uint32_t types, dlist *d) {
    js_ctx *x = c->x;
    uint32_t nt = types & (JT_INT | JT_FRAC);
    js_item it = {s, 0};
    js_norm one = {.nodes = &it, .n = 1};
    js_range r;
    if (tr_js_num_range(x, &one, &r)) return false;
    for (int lower = 1; lower >= 0; lower--) {
        if (!(lower ? r.has_lo : r.has_hi) || !nt) continue;
        const js_dec *b = lower ? &r.lo : &r.hi;
        bool excl = lower ? r.lo_excl : r.hi_excl;
        /* the keyword whose value is the bound, reused as the new bound */
        static const char *const cand[2][2] = {{"maximum", "exclusiveMaximum"},
                                               {"minimum", "exclusiveMinimum"}};
        const json_t *bv = NULL;
        for (int k = 0; k < 2 && !bv; k++) {
            const json_t *v = json_object_get(s, cand[lower][k]);
            js_dec dv;
            if (tr_js_is_num(v) && tr_js_dec_from_json(x->cc, v, &dv) && !tr_js_dec_cmp(&dv, b))
                bv = v;
        }
        if (!bv) return fail(c, "a numeric bound that could not be read back");
        /* below a lower bound: x < lo (x <= lo when lo was exclusive) */
        const char *kw = lower ? (excl ? "maximum" : "exclusiveMaximum")
                               : (excl ? "minimum" : "exclusiveMinimum");
        json_t *o = typed(x, nt);
        if (!o || !put(x, o, kw, bv) || !add(c, d, o)) return false;
    }
    const json_t *m = json_object_get(s, "multipleOf");
    if (!m) m = json_object_get(s, "divisibleBy");
    if (m && nt) {
        /* non-multiples of integral steps only (the remainder automaton) */
        if (!json_is_number(m) || json_number_value(m) <= 0 || json_number_value(m) > 1000000 ||
            json_number_value(m) != (double)(json_int_t)json_number_value(m))
            return fail(c, "the complement of a multipleOf that is not an integer up to 10^6");
        json_t *o = typed(x, nt);
        if (!o || !put(x, o, JS_KW_NOT_MULTIPLE, m) || !add(c, d, o)) return false;
    }
    const json_t *nm = synth ? json_object_get(s, JS_KW_NOT_MULTIPLE) : NULL;
    if (nm) {
        json_t *o = typed(x, JT_INT | JT_FRAC);
        if (!o || !put(x, o, "multipleOf", nm) || !add(c, d, o)) return false;
    }
    return true;
}

static bool count_kw(negc *c, const json_t *s, const char *kw, json_int_t *v) {
    const json_t *j = json_object_get(s, kw);
    if (!j) return false;
    double f = json_number_value(j);
    if (!json_is_number(j) || f < 0 || f != (double)(json_int_t)f) return fail(c, "malformed count");
    *v = f > 1e15 ? (json_int_t)1000000000000000 : (json_int_t)f;
    return true;
}

/* not {minItems/maxItems} / {minProperties/maxProperties}: counts outside */
static bool g_counts(negc *c, const json_t *s, uint32_t t, const char *lo_kw, const char *hi_kw,
                     dlist *d) {
    js_ctx *x = c->x;
    json_int_t v;
    if (count_kw(c, s, lo_kw, &v) && v > 0) {
        json_t *o = typed(x, t);
        if (!o || !put_new(x, o, hi_kw, json_integer(v - 1)) || !add(c, d, o)) return false;
    }
    if (c->why) return false;
    if (count_kw(c, s, hi_kw, &v)) {
        json_t *o = typed(x, t);
        if (!o || !put_new(x, o, lo_kw, json_integer(v + 1)) || !add(c, d, o)) return false;
    }
    return !c->why;
}

static json_t *true_prefix(js_ctx *x, size_t k, const json_t *last) {
    json_t *p = json_array();
    if (!p) return NULL;
    for (size_t i = 0; i < k; i++)
        if (json_array_append(p, json_true())) return json_decref(p), NULL;
    if (last && json_array_append(p, (json_t *)last)) return json_decref(p), NULL;
    (void)x;
    return p;
}

static bool trivially_true(const json_t *s) {
    return json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0);
}

/* not {prefixItems / items / additionalItems, contains, min/maxItems} */
static bool g_array(negc *c, const json_t *s, bool synth, uint32_t types, dlist *d) {
    js_ctx *x = c->x;
    if (!(types & JT_ARR)) return true;
    const json_t *u = json_object_get(s, "uniqueItems");
    if (json_is_true(u)) return fail(c, "the complement of uniqueItems (arrays with duplicates)");
    const json_t *ue = json_object_get(s, "unevaluatedItems");
    if (ue && !json_is_true(ue)) return fail(c, "the complement of unevaluatedItems");
    const json_t *pi = json_object_get(s, "prefixItems"), *it = json_object_get(s, "items");
    const json_t *prefix = json_is_array(pi) ? pi : json_is_array(it) ? it : NULL;
    const json_t *rest = json_is_array(pi) ? (json_is_array(it) ? NULL : it)
                         : json_is_array(it) ? json_object_get(s, "additionalItems")
                                             : it;
    size_t np = prefix ? json_array_size(prefix) : 0;
    for (size_t i = 0; i < np; i++) {
        const json_t *e = json_array_get(prefix, i);
        if (trivially_true(e)) continue;
        const json_t *ne = neg_of(c, e);
        json_t *o = typed(x, JT_ARR);
        if (!ne || !o || !put_new(x, o, "prefixItems", true_prefix(x, i, ne)) ||
            !put_new(x, o, "minItems", json_integer((json_int_t)i + 1)) || !add(c, d, o))
            return false;
    }
    if (rest && !trivially_true(rest)) {
        const json_t *ne = neg_of(c, rest);
        json_t *o = typed(x, JT_ARR);
        if (!ne || !o || !put(x, o, "contains", ne) ||
            (np && !put_new(x, o, JS_KW_CONTAINS_FROM, json_integer((json_int_t)np))) ||
            !add(c, d, o))
            return false;
    }
    const json_t *ct = json_object_get(s, "contains");
    if (ct) {
        json_int_t lo = 1, hi = -1, v;
        if (count_kw(c, s, "minContains", &v)) lo = v;
        if (count_kw(c, s, "maxContains", &v)) hi = v;
        if (c->why) return false;
        const json_t *from = synth ? json_object_get(s, JS_KW_CONTAINS_FROM) : NULL;
        for (int side = 0; side < 2; side++) {
            if (side == 0 && lo == 0) continue;
            if (side == 1 && hi < 0) continue;
            json_t *o = typed(x, JT_ARR);
            if (!o || !put(x, o, "contains", ct) || (from && !put(x, o, JS_KW_CONTAINS_FROM, from)))
                return false;
            if (side == 0 && (!put_new(x, o, "minContains", json_integer(0)) ||
                              !put_new(x, o, "maxContains", json_integer(lo - 1))))
                return false;
            if (side == 1 && !put_new(x, o, "minContains", json_integer(hi + 1))) return false;
            if (!add(c, d, o)) return false;
        }
    }
    return g_counts(c, s, JT_ARR, "minItems", "maxItems", d);
}

static json_t *one_prop(js_ctx *x, const char *k, const json_t *v) {
    json_t *p = json_object();
    if (!p || json_object_set(p, k, (json_t *)v)) {
        json_decref(p);
        tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
        return NULL;
    }
    return p;
}

static json_t *one_name(js_ctx *x, const char *k) {
    json_t *r = json_array();
    if (!r || json_array_append_new(r, json_string(k))) {
        json_decref(r);
        tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
        return NULL;
    }
    return r;
}

/* {types: object, required: [a], <kw>: v} */
static bool obj_with(negc *c, dlist *d, const char *req, const char *kw, json_t *v_new) {
    js_ctx *x = c->x;
    json_t *o = typed(x, JT_OBJ);
    if (!o || (req && !put_new(x, o, "required", one_name(x, req)))) return json_decref(v_new), false;
    if (kw && !put_new(x, o, kw, v_new)) return false;
    return add(c, d, o);
}

/* {types: object, someMember: spec} with spec's value v (NULL: any) */
static bool some_member(negc *c, dlist *d, json_t *spec, const json_t *v) {
    js_ctx *x = c->x;
    /* v may still be empty (a complement filled later): only `true` is left out */
    if (v && !json_is_true(v) && !put(x, spec, "value", v)) return json_decref(spec), false;
    json_t *o = typed(x, JT_OBJ);
    x->used_some = true;
    return o && put_new(x, o, JS_KW_SOME, spec) && add(c, d, o);
}

static json_t *spec_at(negc *c, const json_t *s) {
    json_t *spec = json_object();
    if (!spec || json_object_set(spec, "at", (json_t *)s)) {
        json_decref(spec);
        tr_gcc_fail(c->x->cc, TR_ERR_NOMEM, 0, "out of memory");
        return NULL;
    }
    return spec;
}

/* The groups that speak of every member:
 *   not {patternProperties: {P: S}}   some member, key matching P, value in not S
 *   not {additionalProperties: A}     some member, key neither listed in
 *                                     `properties` nor matching a pattern,
 *                                     value in not A
 *   not {propertyNames: N}            some member whose key fails N */
static bool g_members(negc *c, const json_t *s, const json_t *ap, const json_t *pp,
                      const json_t *pn, dlist *d) {
    js_ctx *x = c->x;
    const char *k;
    json_t *v;
    if (x->no_some) {
        if (ap && !trivially_true(ap))
            return fail(c, "the complement of additionalProperties (some other property exists)");
        if (json_is_object(pp) && json_object_size(pp))
            return fail(c, "the complement of patternProperties");
        if (pn && !trivially_true(pn)) return fail(c, "the complement of propertyNames");
        return true;
    }
    if (pp && !json_is_object(pp)) return fail(c, "malformed patternProperties");
    if (json_is_object(pp))
        json_object_foreach((json_t *)pp, k, v) {
            if (trivially_true(v)) continue;
            const json_t *nv = neg_of(c, v);
            json_t *spec = nv ? spec_at(c, s) : NULL;
            if (!spec || !put_new(x, spec, "patterns", one_name(x, k)) ||
                !some_member(c, d, spec, nv))
                return false;
        }
    if (ap && !trivially_true(ap)) {
        const json_t *nv = neg_of(c, ap);
        json_t *spec = nv ? spec_at(c, s) : NULL, *names = json_array(), *pats = json_array();
        const json_t *props = json_object_get(s, "properties");
        bool ok = spec && names && pats;
        if (json_is_object(props))
            json_object_foreach((json_t *)props, k, v) ok =
                ok && !json_array_append_new(names, json_string(k));
        if (json_is_object(pp))
            json_object_foreach((json_t *)pp, k, v) ok =
                ok && !json_array_append_new(pats, json_string(k));
        if (!ok) {
            json_decref(spec), json_decref(names), json_decref(pats);
            return nv ? (tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory"), false) : false;
        }
        if (!put_new(x, spec, "notNames", names) || !put_new(x, spec, "notPatterns", pats) ||
            !some_member(c, d, spec, nv))
            return false;
    }
    if (pn && !trivially_true(pn)) {
        json_t *spec = spec_at(c, s);
        if (!spec || !put(x, spec, "notKeys", pn) || !some_member(c, d, spec, NULL)) return false;
    }
    return true;
}

/* not {required, properties, dependentRequired, dependentSchemas, counts} */
static bool g_object(negc *c, const json_t *s, uint32_t types, dlist *d) {
    js_ctx *x = c->x;
    if (!(types & JT_OBJ)) return true;
    const json_t *ap = json_object_get(s, "additionalProperties");
    const json_t *pp = json_object_get(s, "patternProperties");
    const json_t *pn = json_object_get(s, "propertyNames");
    const json_t *ue = json_object_get(s, "unevaluatedProperties");
    if (ue && !json_is_true(ue)) return fail(c, "the complement of unevaluatedProperties");
    if (!g_members(c, s, ap, pp, pn, d)) return false;
    const json_t *req = json_object_get(s, "required");
    for (size_t i = 0; json_is_array(req) && i < json_array_size(req); i++) {
        const json_t *r = json_array_get(req, i);
        if (!json_is_string(r)) return fail(c, "malformed required");
        if (!obj_with(c, d, NULL, "properties", one_prop(x, json_string_value(r), json_false())))
            return false;
    }
    const json_t *props = json_object_get(s, "properties");
    const char *k;
    json_t *v;
    if (json_is_object(props))
        json_object_foreach((json_t *)props, k, v) {
            if (json_is_object(v) && json_is_true(json_object_get(v, "required")))
                if (!obj_with(c, d, NULL, "properties", one_prop(x, k, json_false()))) return false;
            if (trivially_true(v)) continue;
            const json_t *nv = neg_of(c, v);
            if (!nv || !obj_with(c, d, k, "properties", one_prop(x, k, nv))) return false;
        }
    static const char *const deps[] = {"dependentRequired", "dependencies", "dependentSchemas"};
    for (size_t i = 0; i < TR_ARRAY_LEN(deps); i++) {
        const json_t *dp = json_object_get(s, deps[i]);
        if (!json_is_object(dp)) continue;
        json_object_foreach((json_t *)dp, k, v) {
            size_t n = json_is_array(v) ? json_array_size(v) : 1;
            if (json_is_array(v) || json_is_string(v)) {
                for (size_t j = 0; j < n; j++) {
                    const json_t *b = json_is_array(v) ? json_array_get(v, j) : v;
                    if (!json_is_string(b)) return fail(c, "malformed dependency");
                    if (!obj_with(c, d, k, "properties",
                                  one_prop(x, json_string_value(b), json_false())))
                        return false;
                }
                continue;
            }
            const json_t *nv = neg_of(c, v);
            json_t *a = json_array();
            if (!nv || !a || json_array_append(a, (json_t *)nv)) {
                json_decref(a);
                return nv ? (tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory"), false) : false;
            }
            if (!obj_with(c, d, k, "allOf", a)) return false;
        }
    }
    return g_counts(c, s, JT_OBJ, "minProperties", "maxProperties", d);
}

/* not of the in-place applicators */
static bool g_generic(negc *c, const json_t *s, dlist *d) {
    js_ctx *x = c->x;
    static const char *const dyn[] = {"$dynamicRef", "$recursiveRef"};
    for (size_t i = 0; i < TR_ARRAY_LEN(dyn); i++)
        if (json_object_get(s, dyn[i])) return fail(c, "the complement of a dynamic reference");
    const json_t *ref = json_object_get(s, "$ref");
    if (json_is_string(ref)) {
        const json_t *t;
        if (tr_js_resolve_ref(x, s, json_string_value(ref), &t)) return false;
        if (!add(c, d, neg_of(c, t))) return false;
    }
    static const char *const alls[] = {"allOf", "extends"};
    for (size_t k = 0; k < TR_ARRAY_LEN(alls); k++) {
        const json_t *l = json_object_get(s, alls[k]);
        if (json_is_object(l) && k == 1) {
            if (!add(c, d, neg_of(c, l))) return false;
            continue;
        }
        if (l && !json_is_array(l) && k == 1) continue; /* not a schema: an annotation */
        if (l && !json_is_array(l)) return fail(c, "malformed allOf");
        for (size_t i = 0; i < json_array_size(l); i++)
            if (!add(c, d, neg_of(c, json_array_get(l, i)))) return false;
    }
    const json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    if ((any && !json_is_array(any)) || (one && !json_is_array(one)))
        return fail(c, "malformed anyOf / oneOf");
    for (int o = 0; o < 2; o++) {
        const json_t *l = o ? one : any;
        size_t n = json_array_size(l);
        if (!n) continue;
        const json_t **v = tr_gcc_alloc(x->cc, n * sizeof *v);
        if (!v) return false;
        for (size_t i = 0; i < n; i++)
            if (!(v[i] = neg_of(c, json_array_get(l, i)))) return false;
        if (!add(c, d, all_of(c, v, (uint32_t)n))) return false; /* none holds */
        if (!o) continue;
        if (n > JS_NEG_MAX_ONEOF) return fail(c, "the complement of a oneOf of more than 12 branches");
        for (size_t i = 0; i < n; i++) /* two hold */
            for (size_t j = i + 1; j < n; j++) {
                const json_t *p[2] = {json_array_get(l, i), json_array_get(l, j)};
                if (!add(c, d, all_of(c, p, 2))) return false;
            }
    }
    const json_t *nt = json_object_get(s, "not");
    if (nt && !add(c, d, nt)) return false;
    const json_t *ifs = json_object_get(s, "if"), *th = json_object_get(s, "then"),
                 *el = json_object_get(s, "else");
    if (ifs && (th || el)) {
        /* if I then T else E  =  (I and T) or (not I and E) */
        if (th) {
            const json_t *p[2] = {ifs, neg_of(c, th)};
            if (!p[1] || !add(c, d, all_of(c, p, 2))) return false;
        }
        if (el) {
            const json_t *p[2] = {neg_of(c, ifs), neg_of(c, el)};
            if (!p[0] || !p[1] || !add(c, d, all_of(c, p, 2))) return false;
        }
    }
    return true;
}

/* Fills dst with not src. */
static bool fill(negc *c, const json_t *src, json_t *dst) {
    js_ctx *x = c->x;
    bool synth = tr_js_is_synthetic(x, src);
    if (synth && json_object_get(src, JS_KW_SOME))
        return fail(c, "the complement of \"some member exists\" (every member of a kind)");
    dlist d = {json_array()};
    if (!d.arr) return tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory"), false;
    uint32_t types = node_types(x, src, synth);
    bool ok = g_type(c, src, synth, &d) && g_values(c, src, synth, &d) &&
              g_string(c, src, synth, types, &d) && g_number(c, src, synth, types, &d) &&
              g_array(c, src, synth, types, &d) && g_object(c, src, types, &d) &&
              g_generic(c, src, &d);
    if (ok) {
        size_t n = json_array_size(d.arr);
        if (n == 0)
            ok = put_new(x, dst, JS_KW_TYPES, json_integer(0)); /* not {} = false */
        else
            ok = put(x, dst, n == 1 ? "allOf" : "anyOf", d.arr);
    }
    json_decref(d.arr);
    return ok;
}

tr_status tr_js_negate(js_ctx *x, const json_t *s, const json_t **out, const char **why) {
    *out = NULL;
    *why = NULL;
    negc c = {.x = x};
    const json_t *r = neg_of(&c, s);
    for (uint32_t i = 0; r && i < c.nq; i++) {
        if (!fill(&c, c.q[i].src, c.q[i].dst)) r = NULL;
        else if (tr_gcc_poll_time(x->cc)) r = NULL;
    }
    if (x->cc->err) return x->cc->err;
    if (!r) {
        *why = c.why ? c.why : "no complement";
        if (json_is_object(s))
            (void)tr_js_ptrmap_put(x->cc, &x->neg_fail, s, (uint64_t)(uintptr_t)*why);
        return x->cc->err;
    }
    for (uint32_t i = 0; i < c.nq; i++)
        if (tr_js_ptrmap_put(x->cc, &x->neg, c.q[i].src, (uint64_t)(uintptr_t)c.q[i].dst))
            return x->cc->err;
    *out = r;
    return TR_OK;
}

/* ---- if/then/else and dependentSchemas as disjunctions ---- */

static const json_t *if_member(js_ctx *x, const json_t *node, tr_status *st) {
    const json_t *ifs = json_object_get(node, "if"), *th = json_object_get(node, "then"),
                 *el = json_object_get(node, "else");
    *st = TR_OK;
    if (!ifs) return NULL;
    /* `if` alone constrains nothing, but when it holds it annotates:
     * split on it where unevaluated* will look */
    bool alone = !th && !el;
    if (alone && !json_object_get(node, "unevaluatedProperties") &&
        !json_object_get(node, "unevaluatedItems"))
        return NULL;
    const json_t *ni;
    const char *why;
    if ((*st = tr_js_negate(x, ifs, &ni, &why))) return NULL;
    if (!ni && alone) return NULL; /* no split: fewer annotations, stricter */
    if (!ni) {
        char msg[256];
        snprintf(msg, sizeof msg, "if/then/else needs the complement of `if`, and there is none "
                 "here: %s", why);
        *st = tr_js_unsupported(x, node, "if", msg);
        return NULL;
    }
    /* (if and then) or (not if and else): disjoint, so exact */
    json_t *o = tr_js_synth_new(x), *alts = json_array(), *a = json_array(), *b = json_array();
    json_t *ba = tr_js_synth_new(x), *bb = tr_js_synth_new(x);
    bool ok = o && ba && bb && alts && a && b && !json_array_append(a, (json_t *)ifs) &&
              (!th || !json_array_append(a, (json_t *)th)) &&
              !json_array_append(b, (json_t *)ni) && (!el || !json_array_append(b, (json_t *)el)) &&
              !json_object_set(ba, "allOf", a) && !json_object_set(bb, "allOf", b) &&
              !json_array_append(alts, ba) && !json_array_append(alts, bb) &&
              !json_object_set(o, "anyOf", alts);
    json_decref(alts), json_decref(a), json_decref(b);
    if (!ok) {
        *st = x->cc->err ? x->cc->err : tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
        return NULL;
    }
    return o;
}

/* "objects that have name satisfy s": not an object, or no name, or s */
static json_t *dep_member(js_ctx *x, const char *name, const json_t *s) {
    json_t *o = tr_js_synth_new(x), *alts = json_array();
    json_t *no = typed(x, JT_ALL & ~JT_OBJ), *without = typed(x, JT_OBJ), *with = typed(x, JT_OBJ);
    json_t *all = json_array();
    bool ok = o && alts && no && without && with && all &&
              !tr_js_ptrmap_put(x->cc, &x->dep_with, s, (uint64_t)(uintptr_t)with) &&
              put_new(x, without, "properties", one_prop(x, name, json_false())) &&
              put_new(x, with, "required", one_name(x, name)) && !json_array_append(all, (json_t *)s) &&
              put(x, with, "allOf", all) && push(x, alts, no) && push(x, alts, without) &&
              push(x, alts, with) && put(x, o, "anyOf", alts);
    json_decref(alts), json_decref(all);
    if (!ok && !x->cc->err) tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
    return ok ? o : NULL;
}

tr_status tr_js_conditionals(js_ctx *x, const json_t *node, const json_t **out) {
    *out = NULL;
    uint64_t v;
    if (tr_js_ptrmap_get(&x->cond, node, &v)) {
        *out = (const json_t *)(uintptr_t)v;
        return TR_OK;
    }
    json_t *parts = json_array();
    if (!parts) return tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
    tr_status st;
    const json_t *m = if_member(x, node, &st);
    if (!st && m && json_array_append(parts, (json_t *)m))
        st = tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
    static const char *const kws[] = {"dependentSchemas", "dependencies"};
    for (size_t k = 0; !st && k < TR_ARRAY_LEN(kws); k++) {
        const json_t *d = json_object_get(node, kws[k]);
        if (!d) continue;
        if (!json_is_object(d)) {
            st = tr_js_fail(x, TR_ERR_FORMAT, node, "%s must be an object", kws[k]);
            break;
        }
        const char *name;
        json_t *s;
        json_object_foreach((json_t *)d, name, s) {
            if (json_is_array(s) || json_is_string(s) || trivially_true(s)) continue;
            if (!json_is_object(s) && !json_is_boolean(s)) {
                st = tr_js_fail(x, TR_ERR_FORMAT, node, "%s: \"%s\" must be a schema", kws[k], name);
                break;
            }
            json_t *dm = dep_member(x, name, s);
            if (!dm || json_array_append(parts, dm)) {
                st = x->cc->err ? x->cc->err : tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
                break;
            }
        }
    }
    if (!st && json_array_size(parts) == 1)
        *out = json_array_get(parts, 0);
    else if (!st && json_array_size(parts) > 1) {
        json_t *o = tr_js_synth_new(x);
        if (!o || !put(x, o, "allOf", parts)) st = x->cc->err;
        *out = o;
    }
    json_decref(parts);
    if (st) return (*out = NULL), st;
    return tr_js_ptrmap_put(x->cc, &x->cond, node, (uint64_t)(uintptr_t)*out);
}
