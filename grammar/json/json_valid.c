/* json_valid.c — a JSON Schema validator for concrete values, used where
 * the compiler must know whether one value is valid: which enum/const
 * values survive the rest of the schema, propertyNames of listed names,
 * oneOf branches told apart by their values; and the tests' and the
 * fuzzer's oracle.
 *
 * Layering: grammar/json (json_internal.h). Single-threaded
 * per compile. It shares the compiler's reading of every keyword
 * (patterns are ECMAScript searches, formats the regexes of
 * json_format.c, numbers exact decimals), and decides more than the
 * generator can enforce (uniqueItems, any `not`: all easy on a value).
 * unevaluatedProperties / unevaluatedItems are decided with annotations
 * as draft 2020-12 defines them: each schema collects the property
 * names / item positions it and its successful in-place subschemas
 * (allOf, anyOf, oneOf, $ref, if/then/else, dependentSchemas) evaluated;
 * `not` contributes none. Synthetic nodes (json_not.c) are read with
 * their private keywords. What it cannot decide (dynamic refs, a
 * multipleOf beyond 64 bits) is an error of the usual kind (refusal in
 * strict mode). Recursion through $ref is bounded (JS_VALID_MAX_DEPTH)
 * so that an unguarded cycle ends as a clear error.
 */
#include <string.h>

#include "grammar/json/json_internal.h"

#define JS_VALID_MAX_DEPTH 256u

static tr_status valid_here(js_ctx *x, const json_t *s, const json_t *v, uint32_t depth,
                            bool *ok, uint8_t *ev);
/* ev: NULL, or one flag per property (in the object's order) / item,
 * raised for those this schema evaluated when it holds. */
static tr_status valid_node(js_ctx *x, const json_t *s, const json_t *v, uint32_t depth,
                            bool *ok, uint8_t *ev);

static uint64_t cp_len(const char *s, size_t n) {
    uint64_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

static tr_status kw_uint(js_ctx *x, const json_t *s, const char *kw, uint64_t *out, bool *has) {
    const json_t *j = json_object_get(s, kw);
    *has = j != NULL;
    if (!j) return TR_OK;
    js_dec d;
    if (!tr_js_is_num(j) || !tr_js_dec_from_json(x->cc, j, &d) || !tr_js_dec_is_int(&d) ||
        (d.neg && d.n))
        return tr_js_fail(x, TR_ERR_FORMAT, s, "%s must be a non-negative integer", kw);
    *out = tr_js_dec_int_digits(&d) > 15 ? UINT64_MAX : (uint64_t)json_number_value(j);
    return TR_OK;
}

/* x is a multiple of k (both exact decimals, k > 0). */
static tr_status multiple_of(js_ctx *x, const json_t *s, const js_dec *v, const js_dec *k,
                             bool *yes) {
    /* scale both by 10^q, q the larger count of fraction digits */
    int64_t qv = (int64_t)v->n - v->exp, qk = (int64_t)k->n - k->exp;
    int64_t q = TR_MAX(0, TR_MAX(qv, qk));
    int64_t kd = (int64_t)k->exp + q; /* digits of K */
    if (kd > 18 || q > 100000)
        return tr_js_unsupported(x, s, "multipleOf", "step too large to check exactly");
    uint64_t K = 0;
    for (int64_t i = 0; i < kd; i++) K = K * 10 + (i < (int64_t)k->n ? (uint64_t)(k->d[i] - '0') : 0);
    if (v->n == 0) return (*yes = true), TR_OK;
    int64_t vd = (int64_t)v->exp + q;
    if (vd <= 0) return (*yes = false), TR_OK;
    if (vd > 1000000) return tr_js_unsupported(x, s, "multipleOf", "value too large to check");
    uint64_t r = 0;
    for (int64_t i = 0; i < vd; i++) {
        uint64_t d = i < (int64_t)v->n ? (uint64_t)(v->d[i] - '0') : 0;
        r = (r * 10 + d) % K;
    }
    *yes = r == 0;
    return TR_OK;
}

static tr_status valid_number(js_ctx *x, const json_t *s, const json_t *v, bool *ok) {
    js_dec d;
    if (!tr_js_dec_from_json(x->cc, v, &d)) return (*ok = false), TR_OK;
    static const char *const kw[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    for (int i = 0; i < 4 && *ok; i++) {
        const json_t *b = json_object_get(s, kw[i]);
        if (!b || json_is_boolean(b)) continue;
        js_dec bd;
        if (!tr_js_is_num(b) || !tr_js_dec_from_json(x->cc, b, &bd))
            return tr_js_fail(x, TR_ERR_FORMAT, s, "%s must be a finite number", kw[i]);
        int c = tr_js_dec_cmp(&d, &bd);
        bool excl = i >= 2 || json_is_true(json_object_get(s, i ? "exclusiveMaximum"
                                                                 : "exclusiveMinimum"));
        bool lower = i % 2 == 0;
        *ok = lower ? (excl ? c > 0 : c >= 0) : (excl ? c < 0 : c <= 0);
    }
    const json_t *m = json_object_get(s, "multipleOf");
    if (!m) m = json_object_get(s, "divisibleBy");
    if (m && *ok) {
        js_dec k;
        if (!tr_js_is_num(m) || !tr_js_dec_from_json(x->cc, m, &k) || k.n == 0 || k.neg)
            return tr_js_fail(x, TR_ERR_FORMAT, s, "multipleOf must be a number > 0");
        return multiple_of(x, s, &d, &k, ok);
    }
    return TR_OK;
}

static tr_status valid_string(js_ctx *x, const json_t *s, const json_t *v, bool *ok) {
    const char *str = json_string_value(v);
    size_t n = json_string_length(v);
    uint64_t len = cp_len(str, n), b;
    bool has;
    tr_status st = kw_uint(x, s, "minLength", &b, &has);
    if (st) return st;
    if (has && len < b) return (*ok = false), TR_OK;
    if ((st = kw_uint(x, s, "maxLength", &b, &has))) return st;
    if (has && len > b) return (*ok = false), TR_OK;
    const json_t *p = json_object_get(s, "pattern");
    if (json_is_string(p)) {
        cpdfa *d;
        if ((st = tr_js_pattern_cpdfa_n(x, s, json_string_value(p), json_string_length(p), &d)))
            return st;
        if (d && !tr_cpdfa_matches(d, str, n)) return (*ok = false), TR_OK;
    }
    const json_t *f = json_object_get(s, "format");
    if (json_is_string(f)) {
        gre_node *a;
        bool known;
        if ((st = tr_js_format_ast(x->cc, json_string_value(f), &a, &known))) return st;
        if (known) {
            cpdfa d;
            if ((st = tr_cpdfa_from_ast(x->cc, a, &d))) return st;
            if (!tr_cpdfa_matches(&d, str, n)) return (*ok = false), TR_OK;
        } else if (tr_js_format_is_asserted(json_string_value(f)))
            return tr_js_unsupported(x, s, "format", "this format is not checked");
    }
    return TR_OK;
}

static tr_status valid_array(js_ctx *x, const json_t *s, const json_t *v, uint32_t depth,
                             bool *ok, uint8_t *ev) {
    size_t n = json_array_size(v);
    uint64_t b;
    bool has;
    tr_status st = kw_uint(x, s, "minItems", &b, &has);
    if (st) return st;
    if (has && n < b) return (*ok = false), TR_OK;
    if ((st = kw_uint(x, s, "maxItems", &b, &has))) return st;
    if (has && n > b) return (*ok = false), TR_OK;
    const json_t *pi = json_object_get(s, "prefixItems"), *it = json_object_get(s, "items");
    const json_t *prefix = json_is_array(pi) ? pi : json_is_array(it) ? it : NULL;
    const json_t *rest = json_is_array(pi) ? (json_is_array(it) ? NULL : it)
                         : json_is_array(it) ? json_object_get(s, "additionalItems") : it;
    size_t np = prefix ? json_array_size(prefix) : 0;
    for (size_t i = 0; i < n && *ok; i++) {
        const json_t *sch = i < np ? json_array_get(prefix, i) : rest;
        if (sch && (st = valid_node(x, sch, json_array_get(v, i), depth + 1, ok, NULL))) return st;
        if (sch) ev[i] = 1;
    }
    if (*ok && json_is_true(json_object_get(s, "uniqueItems")))
        for (size_t i = 0; i < n && *ok; i++)
            for (size_t j = i + 1; j < n && *ok; j++)
                if (tr_js_json_equal(x->cc, json_array_get(v, i), json_array_get(v, j))) *ok = false;
    const json_t *c = json_object_get(s, "contains");
    if (c && *ok) {
        uint64_t lo = 1, hi = UINT64_MAX, hits = 0;
        if ((st = kw_uint(x, s, "minContains", &b, &has))) return st;
        if (has) lo = b;
        if ((st = kw_uint(x, s, "maxContains", &b, &has))) return st;
        if (has) hi = b;
        const json_t *from = tr_js_is_synthetic(x, s) ? json_object_get(s, JS_KW_CONTAINS_FROM)
                                                       : NULL;
        size_t f = json_is_integer(from) ? (size_t)json_integer_value(from) : 0;
        for (size_t i = f; i < n; i++) {
            bool m = true;
            if ((st = valid_node(x, c, json_array_get(v, i), depth + 1, &m, NULL))) return st;
            hits += m;
            if (m) ev[i] = 1;
        }
        *ok = hits >= lo && hits <= hi;
    }
    return TR_OK;
}

static tr_status valid_object(js_ctx *x, const json_t *s, const json_t *v, uint32_t depth,
                              bool *ok, uint8_t *ev) {
    uint64_t b;
    bool has;
    size_t n = json_object_size(v);
    tr_status st = kw_uint(x, s, "minProperties", &b, &has);
    if (st) return st;
    if (has && n < b) return (*ok = false), TR_OK;
    if ((st = kw_uint(x, s, "maxProperties", &b, &has))) return st;
    if (has && n > b) return (*ok = false), TR_OK;
    const json_t *req = json_object_get(s, "required");
    for (size_t i = 0; json_is_array(req) && i < json_array_size(req) && *ok; i++) {
        const json_t *r = json_array_get(req, i);
        if (json_is_string(r) && !json_object_getn(v, json_string_value(r), json_string_length(r)))
            *ok = false;
    }
    const json_t *props = json_object_get(s, "properties"), *pp = json_object_get(s, "patternProperties");
    const json_t *ap = json_object_get(s, "additionalProperties"), *pn = json_object_get(s, "propertyNames");
    const char *k;
    size_t kl;
    json_t *e;
    size_t ki = 0;
    json_object_keylen_foreach((json_t *)v, k, kl, e) {
        if (!*ok) break;
        bool covered = false;
        const json_t *ps = json_is_object(props) ? json_object_getn(props, k, kl) : NULL;
        if (ps) {
            covered = true;
            if ((st = valid_node(x, ps, e, depth + 1, ok, NULL))) return st;
        }
        const char *pk;
        json_t *psch;
        if (json_is_object(pp))
            json_object_foreach((json_t *)pp, pk, psch) {
                cpdfa *d;
                if ((st = tr_js_pattern_cpdfa(x, s, pk, &d))) return st;
                if (d && tr_cpdfa_matches(d, k, kl)) {
                    covered = true;
                    if (*ok && (st = valid_node(x, psch, e, depth + 1, ok, NULL))) return st;
                }
            }
        if (!covered && ap && *ok && (st = valid_node(x, ap, e, depth + 1, ok, NULL))) return st;
        if (covered || ap) ev[ki] = 1;
        if (pn && *ok) {
            json_t *name = json_stringn(k, kl);
            if (!name) return tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
            st = valid_node(x, pn, name, depth + 1, ok, NULL);
            json_decref(name);
            if (st) return st;
        }
        ki++;
    }
    static const char *const deps[] = {"dependentRequired", "dependencies", "dependentSchemas"};
    for (size_t i = 0; i < TR_ARRAY_LEN(deps) && *ok; i++) {
        const json_t *d = json_object_get(s, deps[i]);
        if (!json_is_object(d)) continue;
        const char *dk;
        json_t *dv;
        json_object_foreach((json_t *)d, dk, dv) {
            if (!*ok || !json_object_get(v, dk)) continue;
            if (json_is_array(dv)) {
                for (size_t j = 0; j < json_array_size(dv) && *ok; j++) {
                    const json_t *r = json_array_get(dv, j);
                    if (json_is_string(r) && !json_object_get(v, json_string_value(r))) *ok = false;
                }
            } else if ((st = valid_node(x, dv, v, depth + 1, ok, ev)))
                return st;
        }
    }
    return TR_OK;
}

static tr_status valid_type(js_ctx *x, const json_t *s, const json_t *v, bool *ok) {
    const json_t *t = json_object_get(s, "type");
    uint32_t vt = tr_js_value_type(x->cc, v), bits = 0;
    const json_t *pt = tr_js_is_synthetic(x, s) ? json_object_get(s, JS_KW_TYPES) : NULL;
    if (json_is_integer(pt) && !(vt & (uint32_t)json_integer_value(pt))) return (*ok = false), TR_OK;
    if (!t) return TR_OK;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_is_array(t) ? json_array_get(t, i) : t;
        const char *name = json_is_string(e) ? json_string_value(e) : "";
        bits |= !strcmp(name, "null")      ? JT_NULL
                : !strcmp(name, "boolean") ? JT_BOOL
                : !strcmp(name, "integer") ? JT_INT
                : !strcmp(name, "number")  ? JT_INT | JT_FRAC
                : !strcmp(name, "string")  ? JT_STR
                : !strcmp(name, "array")   ? JT_ARR
                : !strcmp(name, "object")  ? JT_OBJ
                : !strcmp(name, "any")     ? JT_ALL
                                           : 0;
    }
    *ok = (vt & bits) != 0;
    return TR_OK;
}

static tr_status valid_combinators(js_ctx *x, const json_t *s, const json_t *v, uint32_t depth,
                                   bool *ok, uint8_t *ev) {
    tr_status st;
    const json_t *l;
    static const char *const alls[] = {"allOf", "extends"};
    for (size_t k = 0; k < TR_ARRAY_LEN(alls) && *ok; k++) {
        l = json_object_get(s, alls[k]);
        if (json_is_object(l) && k == 1 && (st = valid_node(x, l, v, depth + 1, ok, ev))) return st;
        for (size_t i = 0; json_is_array(l) && i < json_array_size(l) && *ok; i++)
            if ((st = valid_node(x, json_array_get(l, i), v, depth + 1, ok, ev))) return st;
    }
    /* every branch is tried: each successful one annotates */
    for (int one = 0; one < 2 && *ok; one++) {
        if (!json_is_array(l = json_object_get(s, one ? "oneOf" : "anyOf"))) continue;
        size_t hits = 0;
        for (size_t i = 0; i < json_array_size(l); i++) {
            bool m = true;
            if ((st = valid_node(x, json_array_get(l, i), v, depth + 1, &m, ev))) return st;
            hits += m;
        }
        *ok = one ? hits == 1 : hits >= 1;
    }
    const json_t *sub;
    if (*ok && (sub = json_object_get(s, "not"))) {
        bool m = true;
        if ((st = valid_node(x, sub, v, depth + 1, &m, NULL))) return st;
        *ok = !m;
    }
    if (*ok && (sub = json_object_get(s, "if"))) {
        bool m = true;
        if ((st = valid_node(x, sub, v, depth + 1, &m, ev))) return st;
        const json_t *br = json_object_get(s, m ? "then" : "else");
        if (br && (st = valid_node(x, br, v, depth + 1, ok, ev))) return st;
    }
    return TR_OK;
}

/* Whether key k (kl bytes) is of the kind a someMember spec names. */
static tr_status some_key(js_ctx *x, const json_t *spec, const char *k, size_t kl, uint32_t depth,
                          bool *in) {
    const json_t *at = json_object_get(spec, "at"), *pats = json_object_get(spec, "patterns");
    const json_t *notp = json_object_get(spec, "notPatterns");
    const json_t *names = json_object_get(spec, "notNames"), *nk = json_object_get(spec, "notKeys");
    tr_status st;
    *in = !json_is_array(pats);
    for (int neg = 0; neg < 2; neg++) {
        const json_t *l = neg ? notp : pats;
        for (size_t i = 0; json_is_array(l) && i < json_array_size(l); i++) {
            const json_t *p = json_array_get(l, i);
            cpdfa *d;
            if (!json_is_string(p)) continue;
            if ((st = tr_js_pattern_cpdfa(x, at, json_string_value(p), &d))) return st;
            if (d && tr_cpdfa_matches(d, k, kl)) {
                if (neg) return (*in = false), TR_OK;
                *in = true;
            }
        }
        if (!*in) return TR_OK;
    }
    for (size_t i = 0; json_is_array(names) && i < json_array_size(names); i++) {
        const json_t *n = json_array_get(names, i);
        if (json_string_length(n) == kl && !memcmp(json_string_value(n), k, kl))
            return (*in = false), TR_OK;
    }
    if (!nk) return TR_OK;
    json_t *name = json_stringn(k, kl);
    if (!name) return tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
    bool m = true;
    st = valid_node(x, nk, name, depth + 1, &m, NULL);
    json_decref(name);
    *in = !m;
    return st;
}

/* someMember: some member of the object v is of the spec's kind and has
 * a value it allows */
static tr_status valid_some(js_ctx *x, const json_t *spec, const json_t *v, uint32_t depth,
                            bool *ok) {
    const json_t *val = json_object_get(spec, "value");
    const char *k;
    size_t kl;
    json_t *e;
    json_object_keylen_foreach((json_t *)v, k, kl, e) {
        bool in, m = true;
        tr_status st = some_key(x, spec, k, kl, depth, &in);
        if (!st && in && val) st = valid_node(x, val, e, depth + 1, &m, NULL);
        if (st || (in && m)) return st;
    }
    *ok = false;
    return TR_OK;
}

/* Private keywords of synthetic nodes (json_not.c). */
static tr_status valid_private(js_ctx *x, const json_t *s, const json_t *v, uint32_t depth,
                               bool *ok) {
    const json_t *nv = json_object_get(s, JS_KW_NOT_VALUES);
    for (size_t i = 0; json_is_array(nv) && i < json_array_size(nv) && *ok; i++)
        if (tr_js_json_equal(x->cc, json_array_get(nv, i), v)) *ok = false;
    const json_t *ns = json_object_get(s, JS_KW_NOT_STRING);
    if (*ok && ns && json_is_string(v) && !tr_js_exact_literal(v, NULL, NULL)) {
        bool m = true;
        tr_status st = valid_node(x, ns, v, depth + 1, &m, NULL);
        if (st) return st;
        *ok = !m;
    }
    const json_t *sm = json_object_get(s, JS_KW_SOME);
    if (*ok && json_is_object(sm) && json_is_object(v)) {
        tr_status st = valid_some(x, sm, v, depth, ok);
        if (st) return st;
    }
    const json_t *nm = json_object_get(s, JS_KW_NOT_MULTIPLE);
    if (*ok && nm && tr_js_is_num(v)) {
        js_dec d, k;
        if (!tr_js_dec_from_json(x->cc, v, &d) || !tr_js_dec_from_json(x->cc, nm, &k))
            return (*ok = false), TR_OK;
        bool yes;
        tr_status st = multiple_of(x, s, &d, &k, &yes);
        if (st) return st;
        *ok = !yes;
    }
    return TR_OK;
}

/* unevaluatedProperties / unevaluatedItems: what no keyword of this
 * schema (nor a successful in-place subschema) evaluated. */
static tr_status valid_unevaluated(js_ctx *x, const json_t *s, const json_t *v, uint32_t depth,
                                   bool *ok, uint8_t *ev) {
    const json_t *u = json_object_get(s, json_is_object(v) ? "unevaluatedProperties"
                                                            : "unevaluatedItems");
    if (!u || !*ok) return TR_OK;
    tr_status st;
    size_t i = 0;
    if (json_is_object(v)) {
        const char *k;
        json_t *e;
        json_object_foreach((json_t *)v, k, e) {
            if (!ev[i] && *ok && (st = valid_node(x, u, e, depth + 1, ok, NULL))) return st;
            ev[i++] = 1;
        }
    } else
        for (; i < json_array_size(v); i++) {
            if (!ev[i] && *ok &&
                (st = valid_node(x, u, json_array_get(v, i), depth + 1, ok, NULL)))
                return st;
            ev[i] = 1;
        }
    return TR_OK;
}

static tr_status valid_node(js_ctx *x, const json_t *s, const json_t *v, uint32_t depth,
                            bool *ok, uint8_t *ev_out) {
    *ok = true;
    if (json_is_true(s)) return TR_OK;
    if (json_is_false(s)) return (*ok = false), TR_OK;
    if (!json_is_object(s)) return tr_js_fail(x, TR_ERR_FORMAT, s, "a schema must be an object or a boolean");
    if (depth > JS_VALID_MAX_DEPTH)
        return tr_js_fail(x, TR_ERR_UNSUPPORTED, s,
                          "validating a value recursed deeper than %u schemas ($ref cycle "
                          "without progress?)",
                          JS_VALID_MAX_DEPTH);
    static const char *const undecided[] = {"$dynamicRef", "$recursiveRef"};
    for (size_t i = 0; i < TR_ARRAY_LEN(undecided); i++)
        if (json_object_get(s, undecided[i]))
            return tr_js_unsupported(x, s, undecided[i], "not decided");
    /* this schema's annotations, merged into the caller's if it holds */
    size_t nev = json_is_object(v) ? json_object_size(v) : json_is_array(v) ? json_array_size(v) : 0;
    uint8_t *ev = tr_gcc_alloc(x->cc, nev + 1);
    if (!ev) return x->cc->err;
    tr_status st = valid_here(x, s, v, depth, ok, ev);
    if (!st && *ok && ev_out)
        for (size_t i = 0; i < nev; i++) ev_out[i] |= ev[i];
    return st;
}

static tr_status valid_here(js_ctx *x, const json_t *s, const json_t *v, uint32_t depth,
                            bool *ok, uint8_t *ev) {
    tr_status st;
    const json_t *ref = json_object_get(s, "$ref");
    if (json_is_string(ref)) {
        const json_t *t;
        if ((st = tr_js_resolve_ref(x, s, json_string_value(ref), &t)) ||
            (st = valid_node(x, t, v, depth + 1, ok, ev)) || !*ok)
            return st;
    }
    if ((st = valid_type(x, s, v, ok)) || !*ok) return st;
    if ((st = tr_gcc_poll_time(x->cc))) return st;
    /* the caller already knows v is one of the top-level enum values */
    bool skip_values = depth == 0 && x->valid_skip_values;
    const json_t *e = skip_values ? NULL : json_object_get(s, "enum");
    if (json_is_array(e)) {
        bool in = false;
        for (size_t i = 0; i < json_array_size(e) && !in; i++)
            in = tr_js_json_equal(x->cc, json_array_get(e, i), v);
        if (!in) return (*ok = false), TR_OK;
    }
    const json_t *c = skip_values ? NULL : json_object_get(s, "const");
    if (c && !tr_js_json_equal(x->cc, c, v)) return (*ok = false), TR_OK;
    if (tr_js_is_num(v))
        st = valid_number(x, s, v, ok);
    else if (json_is_string(v))
        st = valid_string(x, s, v, ok);
    else if (json_is_array(v))
        st = valid_array(x, s, v, depth, ok, ev);
    else if (json_is_object(v))
        st = valid_object(x, s, v, depth, ok, ev);
    if (st || !*ok) return st;
    if (tr_js_is_synthetic(x, s) && ((st = valid_private(x, s, v, depth, ok)) || !*ok)) return st;
    if ((st = valid_combinators(x, s, v, depth, ok, ev)) || !*ok) return st;
    if (json_is_object(v) || json_is_array(v)) return valid_unevaluated(x, s, v, depth, ok, ev);
    return TR_OK;
}

tr_status tr_js_validate(js_ctx *x, const js_conj *c, const json_t *v, uint32_t depth, bool *ok) {
    *ok = true;
    for (uint32_t i = 0; i < c->n && *ok; i++) {
        tr_status st = valid_node(x, c->v[i].node, v, depth, ok, NULL);
        if (st) return st;
    }
    return TR_OK;
}
