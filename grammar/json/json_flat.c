/* json_flat.c — a conjunction of schemas flattened into one js_norm.
 *
 * Layering: grammar/json (json_internal.h), called by the
 * rule builder for every rule. Single-threaded per compile.
 *
 * A value must satisfy every schema of the conjunction; `allOf` members
 * and `$ref` targets join it (siblings of $ref too: applying them is
 * what draft 2019+ says and, for older drafts that ignore them, only
 * stricter). A node met twice counts once (A and A is A), which also
 * ends allOf / $ref cycles; a node met once with a disjunction already
 * expanded and once without keeps it pending (the second occurrence
 * still requires it). `not S` joins as the node of S's complement, and
 * if/then/else and dependentSchemas as a node of their disjunctions
 * (json_not.c). Then the cheap facts are computed: the JSON types every
 * member allows (`type`), the values every `enum` / `const` allows
 * (intersection by JSON equality: 1 == 1.0), the first anyOf/oneOf
 * still to expand, and what synthetic members exclude (values, string
 * languages). The type-specific keywords stay on the member nodes, read
 * by the type generators.
 */
#include <string.h>

#include "grammar/json/json_internal.h"

#define JS_MAX_CONJ 4096u

/* ---- values ---- */

uint32_t tr_js_value_type(gcc *cc, const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL: return JT_NULL;
    case JSON_TRUE:
    case JSON_FALSE: return JT_BOOL;
    case JSON_INTEGER: return JT_INT;
    case JSON_REAL: {
        js_dec d;
        if (!tr_js_dec_from_json(cc, v, &d)) return JT_FRAC;
        return tr_js_dec_is_int(&d) ? JT_INT : JT_FRAC;
    }
    case JSON_STRING: {
        js_dec d;
        if (!tr_js_exact_literal(v, NULL, NULL)) return JT_STR;
        if (!tr_js_dec_from_json(cc, v, &d)) return JT_FRAC;
        return tr_js_dec_is_int(&d) ? JT_INT : JT_FRAC;
    }
    case JSON_ARRAY: return JT_ARR;
    case JSON_OBJECT: return JT_OBJ;
    }
    return 0;
}

bool tr_js_json_equal(gcc *cc, const json_t *a, const json_t *b) {
    if (tr_js_is_num(a) && tr_js_is_num(b)) {
        js_dec x, y;
        if (!tr_js_dec_from_json(cc, a, &x) || !tr_js_dec_from_json(cc, b, &y))
            return json_is_number(a) && json_is_number(b) &&
                   json_number_value(a) == json_number_value(b);
        return tr_js_dec_cmp(&x, &y) == 0;
    }
    if (json_typeof(a) != json_typeof(b)) return false;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!tr_js_json_equal(cc, json_array_get(a, i), json_array_get(b, i))) return false;
        return true;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return false;
        const char *k;
        size_t kl;
        json_t *v;
        json_object_keylen_foreach((json_t *)a, k, kl, v) {
            const json_t *w = json_object_getn(b, k, kl);
            if (!w || !tr_js_json_equal(cc, v, w)) return false;
        }
        return true;
    }
    return json_equal((json_t *)a, (json_t *)b);
}

/* ---- the member list ---- */

/* `not` members without a complement, held until the values are known:
 * a conjunction with enum/const needs none (its values are checked
 * against them), any other is refused as before */
#define JS_MAX_DEFERRED_NOT 16u

typedef struct flat {
    js_ctx *x;
    js_norm *n;
    uint32_t cap;
    uint32_t ins; /* where the next new member goes; UINT32_MAX: the end */
    const json_t *held[JS_MAX_DEFERRED_NOT]; /* nodes whose `not` is held */
    const char *held_why[JS_MAX_DEFERRED_NOT];
    uint32_t n_held;
} flat;

/* from_new: the node comes from expanding a member that was not yet
 * expanded. If it is already listed with a disjunction decided, the
 * branch chosen for that disjunction leads back to the node itself
 * (A = anyOf[X, A]): unguarded recursion, whose meaning (the least
 * fixpoint) this compiler does not compute: refused. */
static tr_status add_node(flat *f, const json_t *node, uint32_t done, bool from_new) {
    js_norm *n = f->n;
    for (uint32_t i = 0; i < n->n; i++)
        if (n->nodes[i].node == node) {
            if (from_new && (n->nodes[i].done & (JS_DONE_ANYOF | JS_DONE_ONEOF)))
                return tr_js_fail(f->x, TR_ERR_UNSUPPORTED, node,
                                  "a branch of this schema's anyOf/oneOf refers back to the "
                                  "schema itself without any object or array in between "
                                  "(unguarded recursion)");
            return TR_OK;
        }
    if (n->n >= JS_MAX_CONJ)
        return tr_js_fail(f->x, TR_ERR_LIMIT, node,
                          "more than %u schemas combined by allOf / $ref", JS_MAX_CONJ);
    if (n->n == f->cap) {
        uint32_t nc = f->cap ? f->cap * 2 : 8;
        js_item *v = tr_gcc_alloc(f->x->cc, (size_t)nc * sizeof *v);
        if (!v) return f->x->cc->err;
        if (n->n) memcpy(v, n->nodes, n->n * sizeof *v);
        n->nodes = v;
        f->cap = nc;
    }
    uint32_t at = f->ins == UINT32_MAX ? n->n : f->ins++;
    memmove(n->nodes + at + 1, n->nodes + at, (n->n - at) * sizeof *n->nodes);
    n->nodes[at] = (js_item){node, done};
    n->n++;
    return TR_OK;
}

/* Joins the members a node brings: $ref target, allOf, draft-3 extends. */
static tr_status expand(flat *f, const json_t *node) {
    js_ctx *x = f->x;
    const json_t *ref = json_object_get(node, "$ref");
    if (json_is_string(ref)) {
        const json_t *t;
        tr_status st = tr_js_resolve_ref(x, node, json_string_value(ref), &t);
        if (st || (st = add_node(f, t, 0, true))) return st;
    }
    static const char *const lists[] = {"allOf", "extends"};
    for (size_t k = 0; k < TR_ARRAY_LEN(lists); k++) {
        const json_t *l = json_object_get(node, lists[k]);
        if (!l) continue;
        if (json_is_object(l) && k == 1) {
            tr_status st = add_node(f, l, 0, true);
            if (st) return st;
            continue;
        }
        if (!json_is_array(l) && k == 1) continue; /* draft 3's word, not a schema
                                                     here: an annotation, as the
                                                     validator reads it */
        if (!json_is_array(l))
            return tr_js_fail(x, TR_ERR_FORMAT, node, "%s must be an array of schemas",
                              lists[k]);
        for (size_t i = 0; i < json_array_size(l); i++) {
            tr_status st = add_node(f, json_array_get(l, i), 0, true);
            if (st) return st;
        }
    }
    const json_t *nt = json_object_get(node, "not");
    if (nt) {
        const json_t *neg;
        const char *why;
        tr_status st = tr_js_negate(x, nt, &neg, &why);
        if (st) return st;
        if (neg && (st = add_node(f, neg, 0, true))) return st;
        if (!neg && f->n_held < JS_MAX_DEFERRED_NOT) {
            f->held[f->n_held] = node;
            f->held_why[f->n_held++] = why;
        } else if (!neg && (st = tr_js_unsupported(x, node, "not", why)))
            return st;
    }
    const json_t *cond;
    tr_status cst = tr_js_conditionals(x, node, &cond);
    if (cst || (cond && (cst = add_node(f, cond, 0, true)))) return cst;
    static const char *const dyn[] = {"$dynamicRef", "$recursiveRef"};
    for (size_t k = 0; k < TR_ARRAY_LEN(dyn); k++)
        if (json_object_get(node, dyn[k])) {
            tr_status st = tr_js_unsupported(x, node, dyn[k], "dynamic references");
            if (st) return st;
        }
    return TR_OK;
}

static tr_status type_bits(js_ctx *x, const json_t *node, const json_t *t, uint32_t *out) {
    static const struct { const char *name; uint32_t bits; } names[] = {
        {"null", JT_NULL},   {"boolean", JT_BOOL}, {"integer", JT_INT},
        {"number", JT_INT | JT_FRAC}, {"string", JT_STR}, {"array", JT_ARR},
        {"object", JT_OBJ},  {"any", JT_ALL}};
    *out = 0;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_is_array(t) ? json_array_get(t, i) : t;
        if (!json_is_string(e))
            return json_is_object(e)
                       ? tr_js_unsupported(x, node, "type",
                                           "schemas inside `type` (draft 3) are not supported")
                       : tr_js_fail(x, TR_ERR_FORMAT, node, "`type` must be a string or an "
                                                           "array of strings");
        size_t k = 0;
        while (k < TR_ARRAY_LEN(names) && strcmp(names[k].name, json_string_value(e))) k++;
        if (k == TR_ARRAY_LEN(names))
            return tr_js_fail(x, TR_ERR_FORMAT, node, "unknown type \"%s\"",
                              json_string_value(e));
        *out |= names[k].bits;
    }
    return TR_OK;
}

static tr_status values_of(flat *f, const json_t *node) {
    js_ctx *x = f->x;
    js_norm *n = f->n;
    for (int k = 0; k < 2; k++) {
        const json_t *l = json_object_get(node, k ? "const" : "enum");
        if (!l) continue;
        if (!k && !json_is_array(l))
            return tr_js_fail(x, TR_ERR_FORMAT, node, "enum must be an array");
        size_t m = k ? 1 : json_array_size(l);
        if (!n->has_values) {
            n->vals = tr_gcc_alloc(x->cc, (m ? m : 1) * sizeof *n->vals);
            if (!n->vals) return x->cc->err;
            for (size_t i = 0; i < m; i++) n->vals[i] = k ? (json_t *)l : json_array_get(l, i);
            n->n_vals = (uint32_t)m;
            n->has_values = true;
            continue;
        }
        uint32_t keep = 0;
        for (uint32_t i = 0; i < n->n_vals; i++) {
            bool in = false;
            for (size_t j = 0; j < m && !in; j++)
                in = tr_js_json_equal(x->cc, n->vals[i], k ? l : json_array_get(l, j));
            if (in) n->vals[keep++] = n->vals[i];
        }
        n->n_vals = keep;
    }
    return TR_OK;
}

/* The held `not` members: with enum/const values, the values valid
 * under a held `not`'s schema are dropped (exact: the conjunction's
 * language is its values, each checked against the whole); without
 * values, refused (strict) or ignored with a warning (lenient). */
static tr_status settle_held(flat *f) {
    js_ctx *x = f->x;
    js_norm *n = f->n;
    tr_status st;
    for (uint32_t h = 0; h < f->n_held; h++) {
        const json_t *node = f->held[h];
        if (!n->has_values) {
            if ((st = tr_js_unsupported(x, node, "not", f->held_why[h]))) return st;
            continue;
        }
        js_item it = {json_object_get(node, "not"), 0};
        js_conj c = {&it, 1};
        uint32_t keep = 0;
        for (uint32_t i = 0; i < n->n_vals; i++) {
            bool valid = false;
            if ((st = tr_js_validate(x, &c, n->vals[i], 0, &valid))) return st;
            if (!valid) n->vals[keep++] = n->vals[i];
        }
        n->n_vals = keep;
    }
    return TR_OK;
}

/* ---- exclusions carried by synthetic members ---- */

static tr_status push_ptr(gcc *cc, void ***v, uint32_t *n, const void *p) {
    void **nv = tr_gcc_alloc(cc, (size_t)(*n + 1) * sizeof *nv);
    if (!nv) return cc->err;
    if (*n) memcpy(nv, *v, *n * sizeof *nv);
    nv[(*n)++] = (void *)p;
    *v = nv;
    return TR_OK;
}

static tr_status private_kws(js_ctx *x, const json_t *node, js_norm *n) {
    const json_t *t = json_object_get(node, JS_KW_TYPES);
    if (json_is_integer(t)) n->types &= (uint32_t)json_integer_value(t) & JT_ALL;
    const json_t *nv = json_object_get(node, JS_KW_NOT_VALUES);
    tr_status st;
    for (size_t i = 0; json_is_array(nv) && i < json_array_size(nv); i++)
        if ((st = push_ptr(x->cc, (void ***)&n->not_vals, &n->n_not_vals, json_array_get(nv, i))))
            return st;
    const json_t *ns = json_object_get(node, JS_KW_NOT_STRING);
    if (ns && (st = push_ptr(x->cc, (void ***)&n->not_strs, &n->n_not_strs, ns))) return st;
    return TR_OK;
}

/* ---- flatten ---- */

tr_status tr_js_flatten(js_ctx *x, const js_conj *c, js_norm *out) {
    memset(out, 0, sizeof *out);
    out->types = JT_ALL;
    out->split = UINT32_MAX;
    flat f = {.x = x, .n = out, .ins = UINT32_MAX};
    tr_status st;
    for (uint32_t i = 0; i < c->n; i++)
        if ((st = add_node(&f, c->v[i].node, c->v[i].done, false))) return st;
    /* The list grows while it is read: a member's new members go right
     * after it, so the list ends in depth-first pre-order, the order in
     * which the schema's text names them. Object properties follow it:
     * allOf [{$ref: base}, {properties: extra}] lists base's properties
     * before the extra ones, as a writer of such a schema means. */
    uint32_t kept = 0;
    for (uint32_t i = 0; i < out->n; i++) {
        const json_t *node = out->nodes[i].node;
        if (json_is_true(node)) continue;
        if (json_is_false(node)) {
            out->never = true;
            continue;
        }
        if (!json_is_object(node))
            return tr_js_fail(x, TR_ERR_FORMAT, node, "a schema must be an object or a boolean");
        if (out->nodes[i].done & JS_EXPANDED) continue;
        out->nodes[i].done |= JS_EXPANDED;
        f.ins = i + 1;
        st = expand(&f, node);
        f.ins = UINT32_MAX;
        if (st) return st;
        if ((st = tr_gcc_poll_time(x->cc))) return st;
    }
    /* keep the objects only, in order */
    for (uint32_t i = 0; i < out->n; i++)
        if (json_is_object(out->nodes[i].node)) out->nodes[kept++] = out->nodes[i];
    out->n = kept;
    for (uint32_t i = 0; i < out->n; i++) {
        const json_t *node = out->nodes[i].node;
        const json_t *t = json_object_get(node, "type");
        if (t) {
            uint32_t bits;
            if ((st = type_bits(x, node, t, &bits))) return st;
            out->types &= bits;
        }
        if ((st = values_of(&f, node))) return st;
        if (tr_js_is_synthetic(x, node) && (st = private_kws(x, node, out))) return st;
        if (out->split == UINT32_MAX) {
            if (json_object_get(node, "anyOf") && !(out->nodes[i].done & JS_DONE_ANYOF))
                out->split = i, out->split_kw = "anyOf";
            else if (json_object_get(node, "oneOf") && !(out->nodes[i].done & JS_DONE_ONEOF))
                out->split = i, out->split_kw = "oneOf";
        }
    }
    if ((st = settle_held(&f))) return st;
    if (out->never || out->types == 0) out->never = true;
    return TR_OK;
}

/* ---- annotations: the members that evaluate for a member ---- */

static int32_t member_index(const js_norm *n, const json_t *node) {
    for (uint32_t i = 0; i < n->n; i++)
        if (n->nodes[i].node == node) return (int32_t)i;
    return -1;
}

/* Whether node holds in the conjunction: a member, or a pointer-only
 * node (left out of memo keys) whose targets all hold. */
static bool holds(js_ctx *x, const js_norm *n, const json_t *node, uint32_t depth) {
    if (member_index(n, node) >= 0) return true;
    if (!json_is_object(node) || !tr_js_trivial(node) || depth > 64) return false;
    const json_t *ref = json_object_get(node, "$ref"), *all = json_object_get(node, "allOf");
    const json_t *t;
    if (json_is_string(ref) && (tr_js_resolve_ref(x, node, json_string_value(ref), &t) ||
                                !holds(x, n, t, depth + 1)))
        return false;
    for (size_t i = 0; json_is_array(all) && i < json_array_size(all); i++)
        if (!holds(x, n, json_array_get(all, i), depth + 1)) return false;
    return true;
}

/* Marks kid, or what a pointer-only kid stands for. */
static void visit(js_ctx *x, const js_norm *n, const json_t *kid, uint8_t *mark,
                  uint32_t *stack, uint32_t *sp, uint32_t depth) {
    int32_t i = member_index(n, kid);
    if (i >= 0) {
        if (!mark[i]) mark[i] = 1, stack[(*sp)++] = (uint32_t)i;
        return;
    }
    /* a pointer-only node annotates only when all it points to holds */
    if (!json_is_object(kid) || !tr_js_trivial(kid) || depth > 64 || !holds(x, n, kid, depth))
        return;
    const json_t *ref = json_object_get(kid, "$ref"), *all = json_object_get(kid, "allOf");
    const json_t *t;
    if (json_is_string(ref) && !tr_js_resolve_ref(x, kid, json_string_value(ref), &t))
        visit(x, n, t, mark, stack, sp, depth + 1);
    for (size_t k = 0; json_is_array(all) && k < json_array_size(all); k++)
        visit(x, n, json_array_get(all, k), mark, stack, sp, depth + 1);
}

tr_status tr_js_in_place(js_ctx *x, const js_norm *n, uint32_t at, uint8_t *mark) {
    memset(mark, 0, n->n);
    uint32_t *stack = tr_gcc_alloc(x->cc, (size_t)(n->n + 1) * sizeof *stack);
    if (!stack) return x->cc->err;
    uint32_t sp = 0;
    mark[at] = 1;
    stack[sp++] = at;
    while (sp) {
        const json_t *m = n->nodes[stack[--sp]].node;
        const json_t *ref = json_object_get(m, "$ref");
        if (json_is_string(ref)) {
            const json_t *t;
            tr_status st = tr_js_resolve_ref(x, m, json_string_value(ref), &t);
            if (st) return st;
            visit(x, n, t, mark, stack, &sp, 0);
        }
        static const char *const lists[] = {"allOf", "anyOf", "oneOf", "extends"};
        for (size_t k = 0; k < TR_ARRAY_LEN(lists); k++) {
            const json_t *l = json_object_get(m, lists[k]);
            if (json_is_object(l)) visit(x, n, l, mark, stack, &sp, 0);
            for (size_t i = 0; json_is_array(l) && i < json_array_size(l); i++)
                visit(x, n, json_array_get(l, i), mark, stack, &sp, 0);
        }
        /* dependentSchemas: where the conjunction says the property is
         * there (the member json_not.c made for it holds) */
        static const char *const deps[] = {"dependentSchemas", "dependencies"};
        for (size_t k = 0; k < TR_ARRAY_LEN(deps); k++) {
            const json_t *d = json_object_get(m, deps[k]);
            const char *name;
            json_t *sv;
            uint64_t w;
            if (json_is_object(d))
                json_object_foreach((json_t *)d, name, sv) if (
                    tr_js_ptrmap_get(&x->dep_with, sv, &w) &&
                    holds(x, n, (const json_t *)(uintptr_t)w, 0))
                    visit(x, n, sv, mark, stack, &sp, 0);
        }
        /* then / else count only when the condition's outcome is known
         * from the conjunction: `if` itself, or its complement, is in it */
        const json_t *ifs = json_object_get(m, "if");
        if (!ifs) continue;
        visit(x, n, ifs, mark, stack, &sp, 0);
        uint64_t neg;
        const json_t *th = json_object_get(m, "then"), *el = json_object_get(m, "else");
        if (th && holds(x, n, ifs, 0)) visit(x, n, th, mark, stack, &sp, 0);
        if (el && tr_js_ptrmap_get(&x->neg, ifs, &neg) &&
            holds(x, n, (const json_t *)(uintptr_t)neg, 0))
            visit(x, n, el, mark, stack, &sp, 0);
    }
    return TR_OK;
}
