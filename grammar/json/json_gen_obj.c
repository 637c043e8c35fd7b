/* json_gen_obj.c — object schemas to grammar expressions.
 *
 * Layering: grammar/json (json_internal.h), called by the
 * rule builder (json_gen.c). Single-threaded per compile.
 *
 * Members. The listed properties come in the order of `properties`
 * (members of the conjunction in order), then the required names not
 * listed there. A listed name's value must satisfy, for every member of
 * the conjunction, that member's `properties` schema for it, plus its
 * patternProperties whose pattern the name matches, or, if neither,
 * its additionalProperties. Required names cannot be skipped; a name
 * whose schema accepts nothing (or that propertyNames / `not required`
 * rule out) cannot appear.
 *
 * Additional properties follow the listed ones. Their keys are split
 * into regions by which patterns they match (every subset of the
 * patterns, empty regions dropped), each region's key language is
 * exact — the patterns of the subset, minus the other patterns, minus
 * the listed names (so a listed name is never taken twice), within
 * propertyNames — and each region gets the value schema every member
 * gives such keys. Regions whose value schema is `false` vanish, so the
 * usual additionalProperties: false costs nothing.
 *
 * Commas: a member is preceded by SEP unless it is the first present.
 *   R_i  = [SEP m_i] R_i+1          (brackets: optional member i)
 *   S_i  = m_i R_i+1 | S_i+1         (nonempty, nothing emitted yet)
 *   R_n  = (SEP A)*,  S_n = A (SEP A)*,  object = { PRE (S_0 POST)? }
 * Before the first required member S branches; after it only R runs.
 * Short chains are written out flat (regular, one terminal when the
 * values are); long ones share the R_i as rules. minProperties /
 * maxProperties add a count to the state: R(i, c).
 *
 * With property_order ANY the state is the set of listed members
 * written so far instead of the position in the list (chain_any).
 */
#include <string.h>

#include "base/utf8.h"
#include "grammar/json/json_internal.h"

#define JS_MAX_PATTERNS_SPLIT 24u
/* regions (subsets of the patterns whose keys are not empty) one object
 * may have */
#define JS_MAX_REGIONS 64u
#define JS_FLAT_CHAIN 64u
#define JS_MAX_DEPS 16u
#define JS_MAX_CHAIN_RULES 20000u
/* Additional keys counted up to this many: an object whose free keys are
 * fewer takes at most that many additional members, so that the matcher's
 * no-repeated-key rule (json_keys_internal.h) never meets a ',' after
 * which only a repeat could follow (an empty mask). More: left unbounded
 * (the repetition would grow the grammar), and that dead end stays
 * possible there. */
#define JS_MAX_COUNTED_KEYS 64u
/* property_order ANY: objects with at most this many listed properties
 * keep the set of those written in the grammar's state (chain_any);
 * larger ones count (chain_tally): 2^n states cost compile time fast
 * (a TTFM p99 of ~0.5 s on the MaskBench dev set with the set up to 10
 * members, ~0.06 s counting past 4) */
#define JS_ANY_SET_MEMBERS 4u

typedef struct member {
    const char *name;
    size_t len;
    bool required;
    gx *g; /* KEY COLON VALUE */
    /* property dependencies (dependentRequired): pair bits this member
     * raises when taken / skipped, and the bits that force / forbid it */
    uint64_t set_take, set_skip, need, block;
    bool witness; /* the member a "some member exists" rule asks for
                     (JS_KW_SOME): its key is a language, not a name */
} member;

/* A "some member exists" rule: keys (any: every string), value (NULL:
 * any value) */
typedef struct witness {
    cpdfa keys;
    bool any;
    const json_t *value;
} witness;

typedef struct objc {
    js_ctx *x;
    const js_norm *n;
    uint32_t depth;
    js_ws ws;
    member *m;
    uint32_t nm, cap;
    const char **all_names; /* every listed name, kept or dropped: never
                               an additional key */
    size_t *all_lens;
    uint32_t n_all;
    gx *add; /* one additional member (alternatives), NULL if none */
    uint64_t add_max; /* distinct keys the additional member has, when
                         few (<= JS_MAX_COUNTED_KEYS); UINT64_MAX: more */
    uint64_t min, max; /* properties count; max UINT64_MAX: none */
    uint32_t n_deps;   /* dependency pairs (<= JS_MAX_DEPS) */
    const char **pats; /* distinct patternProperties patterns */
    const json_t **pat_node; /* a node that has it (messages) */
    uint32_t n_pats;
    cpdfa pn; /* the propertyNames language (pn_any: every key) */
    bool pn_any;
} objc;

static bool has_obj_kw(const json_t *node) {
    return json_object_get(node, "properties") || json_object_get(node, "patternProperties") ||
           json_object_get(node, "additionalProperties");
}

static bool listed(const objc *o, const char *name, size_t len) {
    for (uint32_t i = 0; i < o->nm; i++)
        if (o->m[i].len == len && !memcmp(o->m[i].name, name, len)) return true;
    return false;
}

static tr_status push_member(objc *o, member m) {
    if (o->nm == o->cap) {
        uint32_t nc = o->cap ? o->cap * 2 : 16;
        if (nc > 100000)
            return tr_js_fail(o->x, TR_ERR_LIMIT, o->n->nodes[0].node, "too many properties");
        member *v = tr_gcc_alloc(o->x->cc, (size_t)nc * sizeof *v);
        if (!v) return o->x->cc->err;
        if (o->nm) memcpy(v, o->m, o->nm * sizeof *v);
        o->m = v;
        o->cap = nc;
    }
    o->m[o->nm++] = m;
    return TR_OK;
}

static tr_status add_name(objc *o, const char *name, size_t len) {
    if (listed(o, name, len)) return TR_OK;
    return push_member(o, (member){name, len, false, NULL, 0, 0, 0, 0, false});
}

/* Whether key matches the pattern (a pattern ignored in lenient mode
 * matches nothing). */
static tr_status key_matches(js_ctx *x, const json_t *node, const char *pat, const char *key,
                             size_t len, bool *yes) {
    cpdfa *d;
    *yes = false;
    tr_status st = tr_js_pattern_cpdfa(x, node, pat, &d);
    if (st || !d) return st;
    *yes = tr_cpdfa_matches(d, key, len);
    return TR_OK;
}

static tr_status push_item(gcc *cc, js_item **v, uint32_t *n, uint32_t *cap, const json_t *s) {
    if (*n == *cap) {
        uint32_t nc = *cap ? *cap * 2 : 8;
        js_item *w = tr_gcc_alloc(cc, (size_t)nc * sizeof *w);
        if (!w) return cc->err;
        if (*n) memcpy(w, *v, *n * sizeof *w);
        *v = w;
        *cap = nc;
    }
    (*v)[(*n)++] = (js_item){s, 0};
    return TR_OK;
}

/* The conjunction a key's value must satisfy. pset: for additional keys,
 * the subset of o->pats the key matches; name: for a listed key. */
static tr_status value_conj(objc *o, const char *name, size_t len, uint32_t pset,
                            js_conj *out) {
    js_ctx *x = o->x;
    js_item *v = NULL;
    uint32_t n = 0, cap = 0;
    tr_status st;
    for (uint32_t i = 0; i < o->n->n; i++) {
        const json_t *node = o->n->nodes[i].node;
        if (!has_obj_kw(node)) continue;
        const json_t *props = json_object_get(node, "properties");
        const json_t *pp = json_object_get(node, "patternProperties");
        const json_t *ap = json_object_get(node, "additionalProperties");
        bool covered = false;
        if (name && json_is_object(props)) {
            const json_t *s = json_object_getn(props, name, len);
            if (s) {
                covered = true;
                if ((st = push_item(x->cc, &v, &n, &cap, s))) return st;
            }
        }
        if (json_is_object(pp)) {
            const char *k;
            json_t *s;
            json_object_foreach((json_t *)pp, k, s) {
                bool m = false;
                if (name) {
                    if ((st = key_matches(x, node, k, name, len, &m))) return st;
                } else
                    for (uint32_t p = 0; p < o->n_pats; p++)
                        if ((pset >> p & 1) && !strcmp(o->pats[p], k)) m = true;
                if (m) {
                    covered = true;
                    if ((st = push_item(x->cc, &v, &n, &cap, s))) return st;
                }
            }
        }
        if (!covered && ap && (st = push_item(x->cc, &v, &n, &cap, ap))) return st;
    }
    out->v = v;
    out->n = n;
    return TR_OK;
}

static bool conj_false(const js_conj *c) {
    for (uint32_t i = 0; i < c->n; i++)
        if (json_is_false(c->v[i].node)) return true;
    return false;
}

static tr_status value_ref(objc *o, const js_conj *c, const char *hint, gx **out) {
    uint32_t r;
    tr_status st = c->n ? tr_js_rule_for(o->x, c, o->depth + 1, hint, &r)
                        : tr_js_any_value(o->x, o->depth + 1, &r);
    if (st) return st;
    *out = tr_gx_ref(o->x->cc, r);
    return *out ? TR_OK : o->x->cc->err;
}

/* propertyNames of every member, as one conjunction (n == 0: none). */
static tr_status names_conj(objc *o, js_conj *out) {
    js_item *v = NULL;
    uint32_t n = 0, cap = 0;
    for (uint32_t i = 0; i < o->n->n; i++) {
        const json_t *pn = json_object_get(o->n->nodes[i].node, "propertyNames");
        if (pn) {
            tr_status st = push_item(o->x->cc, &v, &n, &cap, pn);
            if (st) return st;
        }
    }
    out->v = v;
    out->n = n;
    return TR_OK;
}

/* ---- listed members ---- */

static tr_status collect_deps(objc *o);

static bool same_name(const member *m, const char *s, size_t n) {
    return m->len == n && !memcmp(m->name, s, n);
}

/* Names: `properties` in order, then `required` names not listed there
 * (and draft 3's `required: true` inside a property schema), then the
 * names dependencies mention. */
static tr_status gather_names(objc *o) {
    js_ctx *x = o->x;
    tr_status st;
    for (uint32_t i = 0; i < o->n->n; i++) {
        const json_t *props = json_object_get(o->n->nodes[i].node, "properties");
        if (props && !json_is_object(props))
            return tr_js_fail(x, TR_ERR_FORMAT, o->n->nodes[i].node, "properties must be an object");
        const char *k;
        size_t kl;
        json_t *s;
        json_object_keylen_foreach((json_t *)props, k, kl, s) {
            if ((st = add_name(o, k, kl))) return st;
            if (json_is_object(s) && json_is_true(json_object_get(s, "required")))
                for (uint32_t m = 0; m < o->nm; m++)
                    if (same_name(&o->m[m], k, kl)) o->m[m].required = true;
        }
    }
    for (uint32_t i = 0; i < o->n->n; i++) {
        const json_t *node = o->n->nodes[i].node;
        const json_t *req = json_object_get(node, "required");
        if (!req || json_is_boolean(req)) continue; /* boolean: draft 3, above */
        if (!json_is_array(req))
            return tr_js_fail(x, TR_ERR_FORMAT, node, "required must be an array of strings");
        for (size_t j = 0; j < json_array_size(req); j++) {
            const json_t *r = json_array_get(req, j);
            if (!json_is_string(r))
                return tr_js_fail(x, TR_ERR_FORMAT, node, "required must be an array of strings");
            if ((st = add_name(o, json_string_value(r), json_string_length(r)))) return st;
            for (uint32_t m = 0; m < o->nm; m++)
                if (same_name(&o->m[m], json_string_value(r), json_string_length(r)))
                    o->m[m].required = true;
        }
    }
    return collect_deps(o);
}

/* A member that cannot appear (its schema is false, propertyNames or
 * `not required` rule it out) also takes down every member whose
 * dependencies need it; to a fixpoint. TR_ERR_FULL: a required member
 * is among them, the object cannot exist. */
static tr_status drop_dead(objc *o, bool *ok) {
    uint64_t dead = 0;
    for (uint32_t i = 0; i < o->nm; i++)
        if (!ok[i]) dead |= o->m[i].need | o->m[i].set_skip;
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t i = 0; i < o->nm; i++) {
            if (!ok[i] || !((o->m[i].set_take | o->m[i].block) & dead)) continue;
            ok[i] = false;
            dead |= o->m[i].need | o->m[i].set_skip;
            changed = true;
        }
    }
    for (uint32_t i = 0; i < o->nm; i++)
        if (!ok[i] && o->m[i].required) return TR_ERR_FULL;
    return TR_OK;
}

static tr_status listed_members(objc *o, const js_conj *pn) {
    js_ctx *x = o->x;
    gcc *cc = x->cc;
    tr_status st = gather_names(o);
    if (st) return st;
    o->all_names = tr_gcc_alloc(cc, (size_t)(o->nm + 1) * sizeof *o->all_names);
    o->all_lens = tr_gcc_alloc(cc, (size_t)(o->nm + 1) * sizeof *o->all_lens);
    bool *ok = tr_gcc_alloc(cc, (size_t)(o->nm + 1) * sizeof *ok);
    js_conj *vc = tr_gcc_alloc(cc, (size_t)(o->nm + 1) * sizeof *vc);
    if (!o->all_names || !o->all_lens || !ok || !vc) return cc->err;
    for (uint32_t i = 0; i < o->nm; i++) o->all_names[i] = o->m[i].name, o->all_lens[i] = o->m[i].len;
    o->n_all = o->nm;
    for (uint32_t i = 0; i < o->nm; i++) {
        member *m = &o->m[i];
        ok[i] = true;
        if (ok[i] && pn->n) {
            json_t *name = json_stringn(m->name, m->len);
            if (!name) return tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory");
            st = tr_js_validate(x, pn, name, 0, &ok[i]);
            json_decref(name);
            if (st) return st;
        }
        if (ok[i] && (st = value_conj(o, m->name, m->len, 0, &vc[i]))) return st;
        if (ok[i] && conj_false(&vc[i])) ok[i] = false;
    }
    if ((st = drop_dead(o, ok))) return (o->nm = 0), st;
    uint32_t keep = 0;
    for (uint32_t i = 0; i < o->nm; i++) {
        member *m = &o->m[i];
        if (!ok[i]) continue;
        js_buf b;
        tr_js_buf_init(&b, cc);
        st = tr_js_key_regex(x, m->name, m->len, &b);
        gx *key = !st && js_buf_ok(&b) ? tr_gx_rx_ne(cc, b.p, b.n) : NULL;
        tr_js_buf_free(&b);
        gx *val;
        if (st || (st = value_ref(o, &vc[i], NULL, &val))) return st;
        m->g = tr_gx_seq3(cc, key, tr_gx_rxz(cc, o->ws.colon), val);
        if (!m->g) return cc->err;
        o->m[keep++] = *m;
    }
    o->nm = keep;
    return TR_OK;
}

/* ---- additional members ---- */

static tr_status collect_patterns(objc *o) {
    gcc *cc = o->x->cc;
    for (uint32_t i = 0; i < o->n->n; i++) {
        const json_t *node = o->n->nodes[i].node;
        const json_t *pp = json_object_get(node, "patternProperties");
        if (!pp) continue;
        if (!json_is_object(pp))
            return tr_js_fail(o->x, TR_ERR_FORMAT, node, "patternProperties must be an object");
        const char *k;
        json_t *s;
        json_object_foreach((json_t *)pp, k, s) {
            bool seen = false;
            for (uint32_t p = 0; p < o->n_pats && !seen; p++) seen = !strcmp(o->pats[p], k);
            if (seen) continue;
            if (o->n_pats == JS_MAX_PATTERNS_SPLIT)
                return tr_js_unsupported(o->x, node, "patternProperties",
                                         "more than 24 distinct patterns on one object");
            const char **v = tr_gcc_alloc(cc, (o->n_pats + 1) * sizeof *v);
            const json_t **w = tr_gcc_alloc(cc, (o->n_pats + 1) * sizeof *w);
            if (!v || !w) return cc->err;
            if (o->n_pats) {
                memcpy(v, o->pats, o->n_pats * sizeof *v);
                memcpy(w, o->pat_node, o->n_pats * sizeof *w);
            }
            v[o->n_pats] = k; /* a key of the document: lives as long as it */
            w[o->n_pats++] = node;
            o->pats = v;
            o->pat_node = w;
        }
    }
    return TR_OK;
}

/* Strings longer than L NOT in p, structurally when p is s{lo,hi} (one
 * set repeated: ^[a-z0-9_-]{1,255}$): a code point outside s somewhere
 * (a small automaton, cut to lengths > L), or only s but more than hi of
 * them. *fits false for other shapes. */
static tr_status complement_long(js_ctx *x, const gre_node *p, uint32_t L, gre_node **out,
                                 bool *fits) {
    gcc *cc = x->cc;
    *fits = false;
    if (p->kind != GRE_REPEAT || p->kids[0]->kind != GRE_SET) return TR_OK;
    gre_node *other = tr_js_ast_set(cc, 0, 0);
    if (!other) return cc->err;
    other->set.n = 0;
    if (tr_cpset_complement(cc, &p->kids[0]->set, &other->set)) return cc->err;
    gre_node *a = NULL;
    if (other->set.n) {
        gre_node *has = tr_js_ast_cat(cc, tr_js_ast_cat(cc, tr_js_rep_any(cc), other),
                                      tr_js_rep_any(cc));
        cpdfa d, len, r, m;
        tr_status st;
        bool big = false;
        if (!has || (st = tr_cpdfa_from_ast(cc, has, &d)) ||
            (st = tr_cpdfa_length(cc, L + 1, UINT32_MAX, &len)) ||
            (st = tr_cpdfa_product(cc, &d, &len, CPD_AND, &r)) ||
            (st = tr_js_ast_of_cpdfa_or_big(x, &r, NULL, "patternProperties", &a, &big, &m)))
            return cc->err ? cc->err : TR_ERR_NOMEM;
        if (big) return TR_OK; /* *fits false: the caller's automaton way */
    }
    if (p->max != GRE_INF) {
        uint32_t from = TR_MAX(p->max + 1, L + 1);
        gre_node *more = tr_js_ast_rep(cc, p->kids[0], from, GRE_INF);
        a = a ? tr_js_ast_alt(cc, a, more) : more;
    }
    *out = a;
    *fits = true;
    return cc->err;
}

/* Every string but the names, written from their trie so that "any
 * string" appears once: E | D ANY*, E the trie prefixes that are not
 * names (a finite set), D a trie prefix followed by one code point that
 * leaves the trie. Linear in the names' length; no automaton. */
typedef struct ntrie {
    uint32_t cp, first, next;
    bool term;
} ntrie;

static gre_node *alt_opt(gcc *cc, gre_node *acc, gre_node *x) {
    if (!x) return acc;
    return acc ? tr_js_ast_alt(cc, acc, x) : x;
}

static gre_node *trie_e(gcc *cc, const ntrie *t, uint32_t at, uint32_t depth) {
    if (depth > 2000) return NULL;
    gre_node *r = t[at].term ? NULL : tr_js_ast_empty(cc);
    for (uint32_t c = t[at].first; c != UINT32_MAX; c = t[c].next) {
        gre_node *k = trie_e(cc, t, c, depth + 1);
        if (k) r = alt_opt(cc, r, tr_js_ast_cat(cc, tr_js_ast_set(cc, t[c].cp, t[c].cp), k));
    }
    return r;
}

static gre_node *trie_d(gcc *cc, const ntrie *t, uint32_t at, uint32_t depth) {
    if (depth > 2000) return NULL;
    gre_node *kids = tr_js_ast_set(cc, 0, 0);
    if (!kids) return NULL;
    kids->set.n = 0;
    for (uint32_t c = t[at].first; c != UINT32_MAX; c = t[c].next)
        if (tr_cpset_add(cc, &kids->set, t[c].cp, t[c].cp)) return NULL;
    tr_cpset_normalize(&kids->set);
    gre_node *out = tr_js_ast_set(cc, 0, 0);
    if (!out) return NULL;
    out->set.n = 0;
    if (tr_cpset_complement(cc, &kids->set, &out->set)) return NULL;
    gre_node *r = out->set.n ? out : NULL;
    for (uint32_t c = t[at].first; c != UINT32_MAX; c = t[c].next) {
        gre_node *k = trie_d(cc, t, c, depth + 1);
        if (k) r = alt_opt(cc, r, tr_js_ast_cat(cc, tr_js_ast_set(cc, t[c].cp, t[c].cp), k));
    }
    return r;
}

static tr_status names_complement(gcc *cc, const char *const *vs, const size_t *vl, uint32_t n,
                                  gre_node **out) {
    uint64_t cap = 1;
    for (uint32_t i = 0; i < n; i++) cap += vl[i];
    ntrie *t = tr_gcc_alloc(cc, (size_t)cap * sizeof *t);
    if (!t) return cc->err;
    uint32_t nn = 1;
    t[0] = (ntrie){0, UINT32_MAX, UINT32_MAX, false};
    for (uint32_t i = 0; i < n; i++) {
        uint32_t at = 0;
        for (size_t j = 0; j < vl[i];) {
            uint32_t cp;
            int k = tr_utf8_decode((const uint8_t *)vs[i] + j, vl[i] - j, &cp);
            if (k <= 0) return tr_gcc_fail(cc, TR_ERR_FORMAT, 0, "invalid UTF-8 in a property name");
            j += (size_t)k;
            uint32_t c = t[at].first;
            while (c != UINT32_MAX && t[c].cp != cp) c = t[c].next;
            if (c == UINT32_MAX) {
                t[nn] = (ntrie){cp, UINT32_MAX, t[at].first, false};
                t[at].first = c = nn++;
            }
            at = c;
        }
        t[at].term = true;
    }
    gre_node *e = trie_e(cc, t, 0, 0), *d = trie_d(cc, t, 0, 0);
    if (cc->err) return cc->err;
    if (d) d = tr_js_ast_cat(cc, d, tr_js_rep_any(cc));
    *out = alt_opt(cc, e, d);
    if (!*out) return tr_gcc_fail(cc, TR_ERR_INTERNAL, 0, "empty complement of names");
    return cc->err;
}

static tr_status and_len(gcc *cc, const cpdfa *a, bool a_any, uint32_t lo, uint32_t hi,
                         cpdfa *out) {
    cpdfa len;
    tr_status st = tr_cpdfa_length(cc, lo, hi, &len);
    if (st || a_any) return st ? st : (*out = len, TR_OK);
    return tr_cpdfa_product(cc, a, &len, CPD_AND, out);
}

/* The keys of one region: in the subset pset of the patterns, not in
 * the others, valid names (propertyNames), not a listed name. Listed
 * names are excluded where they live: keys no longer than the longest
 * name go through the automaton, longer ones keep the patterns' own
 * shape (so ^[a-z]{1,255}$ minus a few names stays a counted repetition
 * instead of a 255-state chain turned inside out). Out: *any (every
 * string), else *ast (*names_only when it is every string but the listed
 * names), or, when a part's regex would be too large and the grammar may
 * name automata, *direct: the whole region's key (quotes included) as an
 * automaton. */
/* How many keys the region acc (names not yet removed) has: *count, or
 * UINT64_MAX when more than JS_MAX_COUNTED_KEYS. */
static tr_status region_count(objc *o, const cpdfa *acc, uint64_t *count) {
    gcc *cc = o->x->cc;
    tr_status st = tr_cpdfa_count(cc, acc, JS_MAX_COUNTED_KEYS + (uint64_t)o->n_all, count);
    if (st || *count == UINT64_MAX || !o->n_all) return st;
    cpdfa names, r;
    if ((st = tr_cpdfa_from_strings(cc, o->all_names, o->all_lens, o->n_all, &names)) ||
        (st = tr_cpdfa_product(cc, acc, &names, CPD_MINUS, &r)))
        return st;
    return tr_cpdfa_count(cc, &r, JS_MAX_COUNTED_KEYS, count);
}

static tr_status region_keys(objc *o, uint32_t pset, const cpdfa *pn, bool pn_any,
                             gre_node **ast, bool *any, bool *names_only, gx **direct,
                             uint64_t *count) {
    js_ctx *x = o->x;
    gcc *cc = x->cc;
    cpdfa acc;
    bool have = !pn_any;
    if (have) acc = *pn;
    tr_status st;
    uint32_t used = 0, single = UINT32_MAX;
    for (uint32_t p = 0; p < o->n_pats; p++) {
        cpdfa *d;
        if ((st = tr_js_pattern_cpdfa(x, o->pat_node[p], o->pats[p], &d))) return st;
        if (!d) {
            if (pset >> p & 1) return (*ast = NULL), (*any = false), TR_OK; /* ignored pattern */
            continue;
        }
        used++;
        if (pset >> p & 1) single = p;
        if (!have) {
            if ((st = tr_cpdfa_length(cc, 0, UINT32_MAX, &acc))) return st;
            have = true;
        }
        cpdfa r;
        if ((st = tr_cpdfa_product(cc, &acc, d, (pset >> p & 1) ? CPD_AND : CPD_MINUS, &r)))
            return st;
        acc = r;
    }
    *ast = NULL;
    *direct = NULL;
    *names_only = false;
    *count = UINT64_MAX;
    if (have && (st = region_count(o, &acc, count))) return st;
    const json_t *node = o->n->n ? o->n->nodes[0].node : NULL;
    uint32_t nx = o->n_all;
    bool big = false;
    cpdfa m;
    if (!nx) {
        *any = !have;
        if (!have) return TR_OK;
        st = tr_js_ast_of_cpdfa_or_big(x, &acc, node, "patternProperties", ast, &big, &m);
        return st || !big ? st : tr_js_string_dfa_gx(x, &m, node, "patternProperties", direct);
    }
    *any = false;
    const char **vs = tr_gcc_alloc(cc, nx * sizeof *vs);
    size_t *vl = tr_gcc_alloc(cc, nx * sizeof *vl);
    if (!vs || !vl) return cc->err;
    uint32_t L = 0;
    for (uint32_t i = 0; i < nx; i++) {
        vs[i] = o->all_names[i];
        vl[i] = o->all_lens[i];
        uint32_t cps = 0;
        for (size_t k = 0; k < vl[i]; k++) cps += ((unsigned char)vs[i][k] & 0xC0) != 0x80;
        L = TR_MAX(L, cps);
    }
    if (!have) { /* any key but the names: straight from their trie */
        *names_only = true;
        return names_complement(cc, vs, vl, nx, ast);
    }
    /* short keys: the automaton, names removed */
    cpdfa names, sh, r;
    if ((st = tr_cpdfa_from_strings(cc, vs, vl, nx, &names)) ||
        (st = and_len(cc, &acc, !have, 0, L, &sh)) ||
        (st = tr_cpdfa_product(cc, &sh, &names, CPD_MINUS, &r)))
        return st;
    gre_node *short_ast = NULL, *long_ast = NULL;
    if ((st = tr_js_ast_of_cpdfa_or_big(x, &r, node, "patternProperties", &short_ast, &big, &m)))
        return st;
    /* long keys: the region's own shape, longer than every name */
    if (!have)
        long_ast = tr_js_ast_rep(cc, tr_js_ast_any(cc), L + 1, GRE_INF);
    else {
        bool fits = false;
        if (used == 1 && pn_any) {
            uint32_t p = single;
            for (uint32_t k = 0; p == UINT32_MAX && k < o->n_pats; k++) p = k;
            gre_node *pa;
            if ((st = tr_js_pattern_ast(x, o->pat_node[p], o->pats[p], &pa))) return st;
            if (pa && single != UINT32_MAX)
                long_ast = tr_js_with_length(cc, pa, L + 1, GRE_INF, &fits);
            else if (pa && (st = complement_long(x, pa, L, &long_ast, &fits)))
                return st;
        }
        if (!fits && !big) {
            cpdfa lg;
            if ((st = and_len(cc, &acc, false, L + 1, UINT32_MAX, &lg)) ||
                (st = tr_js_ast_of_cpdfa_or_big(x, &lg, node, "patternProperties", &long_ast,
                                                &big, &m)))
                return st;
        }
    }
    if (big) { /* a part's regex would be too large: the whole region as an automaton */
        cpdfa whole;
        *ast = NULL;
        if ((st = tr_cpdfa_product(cc, &acc, &names, CPD_MINUS, &whole)) ||
            (st = tr_cpdfa_minimize(cc, &whole, &m)))
            return st;
        return tr_cpdfa_is_empty(&m) ? TR_OK
                                     : tr_js_string_dfa_gx(x, &m, node, "patternProperties", direct);
    }
    if (cc->err) return cc->err;
    *ast = short_ast && long_ast ? tr_js_ast_alt(cc, short_ast, long_ast)
                                 : short_ast ? short_ast : long_ast;
    return TR_OK;
}

/* The key terminal of a region: its regex text, or, when that text is
 * longer than a regex terminal may be (the complement of many long
 * names spells every name's prefixes with every other character) and
 * the grammar may name automata, the automaton of the same keys. */
static tr_status key_terminal(objc *o, bool any, const gre_node *ast, bool names_only,
                              gx **key) {
    js_ctx *x = o->x;
    gcc *cc = x->cc;
    js_buf b;
    tr_js_buf_init(&b, cc);
    /* where an automaton may stand in, the printing stops at the size
     * that calls for one (such regexes run to megabytes) */
    bool may = !any && x->dfas && x->dfas->allowed;
    if (may) b.limit = cc->lim.max_pattern_bytes;
    tr_status st = TR_OK;
    if (any)
        tr_js_str_any_regex(0, GRE_INF, &b);
    else
        st = tr_js_str_regex(cc, ast, &b);
    bool by_automaton = !st && may && js_buf_ok(&b) && b.over;
    *key = !st && !by_automaton && js_buf_ok(&b) ? tr_gx_rx_ne(cc, b.p, b.n) : NULL;
    tr_js_buf_free(&b);
    if (st || !by_automaton) return st ? st : *key ? TR_OK : cc->err;
    cpdfa d, m;
    const json_t *node = o->n->n ? o->n->nodes[0].node : NULL;
    if (names_only) { /* every string but the names: the names' trie, complemented */
        cpdfa names, all;
        st = tr_cpdfa_from_strings(cc, o->all_names, o->all_lens, o->n_all, &names);
        if (!st) st = tr_cpdfa_length(cc, 0, UINT32_MAX, &all);
        if (!st) st = tr_cpdfa_product(cc, &all, &names, CPD_MINUS, &d);
    } else {
        st = tr_cpdfa_from_ast(cc, ast, &d);
    }
    if (st || (st = tr_cpdfa_minimize(cc, &d, &m))) return st;
    return tr_js_string_dfa_gx(x, &m, node, "additionalProperties", key);
}

/* The subsets of the patterns whose region (the keys matching exactly
 * those patterns) is not empty, depth-first over the patterns with the
 * partial intersection cut as soon as it is empty: disjoint patterns
 * (literals, prefixes: the usual case) give n + 1 regions, not 2^n. */
typedef struct regions {
    objc *o;
    uint32_t v[JS_MAX_REGIONS];
    uint32_t n;
} regions;

static tr_status regions_from(regions *r, uint32_t p, const cpdfa *acc, uint32_t pset) {
    objc *o = r->o;
    gcc *cc = o->x->cc;
    if (p == o->n_pats) {
        if (r->n == JS_MAX_REGIONS)
            return tr_js_unsupported(o->x, o->pat_node[0], "patternProperties",
                                     "patterns that overlap in more than 64 ways");
        r->v[r->n++] = pset;
        return TR_OK;
    }
    cpdfa *d;
    tr_status st = tr_js_pattern_cpdfa(o->x, o->pat_node[p], o->pats[p], &d);
    if (st) return st;
    if (!d) return regions_from(r, p + 1, acc, pset); /* ignored: matches nothing */
    for (int take = 1; take >= 0; take--) {
        cpdfa next;
        if ((st = tr_cpdfa_product(cc, acc, d, take ? CPD_AND : CPD_MINUS, &next))) return st;
        if (!tr_cpdfa_is_empty(&next) &&
            (st = regions_from(r, p + 1, &next, take ? pset | 1u << p : pset)))
            return st;
    }
    return TR_OK;
}

static tr_status live_regions(objc *o, regions *r) {
    r->o = o;
    r->n = 0;
    if (!o->n_pats) return (r->v[r->n++] = 0), TR_OK;
    cpdfa all;
    tr_status st = tr_cpdfa_length(o->x->cc, 0, UINT32_MAX, &all);
    return st ? st : regions_from(r, 0, &all, 0);
}

static tr_status additional(objc *o, const js_conj *pnc) {
    js_ctx *x = o->x;
    gcc *cc = x->cc;
    tr_status st = collect_patterns(o);
    if (st) return st;
    cpdfa pn = {0};
    bool pn_any = true;
    if (pnc->n && (st = tr_js_string_lang(x, pnc, &pn, &pn_any))) return st;
    o->pn = pn;
    o->pn_any = pn_any;
    if (!pn_any && tr_cpdfa_is_empty(&pn)) return TR_OK; /* no key is a valid name */
    gx_list alts = {0};
    uint64_t keys = 0;
    regions live;
    if ((st = live_regions(o, &live))) return st;
    for (uint32_t ri = 0; ri < live.n; ri++) {
        uint32_t pset = live.v[ri];
        js_conj c;
        if ((st = value_conj(o, NULL, 0, pset, &c))) return st;
        if (conj_false(&c)) continue;
        gre_node *ast;
        gx *key = NULL;
        bool any, names_only;
        uint64_t n = UINT64_MAX;
        if ((st = region_keys(o, pset, &pn, pn_any, &ast, &any, &names_only, &key, &n)))
            return st;
        if (!any && !ast && !key) continue;
        /* saturating: once a region is unbounded, so is the sum */
        keys = n == UINT64_MAX || keys == UINT64_MAX || keys + n > JS_MAX_COUNTED_KEYS
                   ? UINT64_MAX
                   : keys + n;
        if (!key && (st = key_terminal(o, any, ast, names_only, &key))) return st;
        gx *val;
        if (st || (st = value_ref(o, &c, NULL, &val))) return st;
        if ((st = tr_gx_list_push(cc, &alts, tr_gx_seq3(cc, key, tr_gx_rxz(cc, o->ws.colon), val))))
            return st;
    }
    if (alts.n) o->add = tr_gx_alt(cc, alts.v, alts.n);
    o->add_max = alts.n ? keys : UINT64_MAX;
    return alts.n && !o->add ? cc->err : TR_OK;
}

/* ---- "some member exists" (JS_KW_SOME) ---- */

/* The witness member of w: an additional key of w's kind (listed names
 * are the other variants', gen_some) with a value both the key's region
 * and w allow; one alternative per region. TR_ERR_FULL: no such key. */
static tr_status witness_member(objc *o, const witness *w) {
    js_ctx *x = o->x;
    gcc *cc = x->cc;
    cpdfa keys = w->any ? o->pn : w->keys;
    bool any = w->any && o->pn_any;
    tr_status st = TR_OK;
    if (!w->any && !o->pn_any && (st = tr_cpdfa_product(cc, &o->pn, &w->keys, CPD_AND, &keys)))
        return st;
    gx_list alts = {0};
    regions live;
    if ((any || !tr_cpdfa_is_empty(&keys)) && (st = live_regions(o, &live))) return st;
    for (uint32_t ri = 0; (any || !tr_cpdfa_is_empty(&keys)) && ri < live.n; ri++) {
        js_conj c;
        uint32_t cap;
        if ((st = value_conj(o, NULL, 0, live.v[ri], &c))) return st;
        if (w->value && (cap = c.n, st = push_item(cc, &c.v, &c.n, &cap, w->value))) return st;
        if (conj_false(&c)) continue;
        gre_node *ast;
        gx *key = NULL, *val;
        bool kany, names_only;
        uint64_t n;
        if ((st = region_keys(o, live.v[ri], &keys, any, &ast, &kany, &names_only, &key, &n)))
            return st;
        if (!kany && !ast && !key) continue;
        if (!key && (st = key_terminal(o, kany, ast, names_only, &key))) return st;
        if ((st = value_ref(o, &c, NULL, &val))) return st;
        if ((st = tr_gx_list_push(cc, &alts, tr_gx_seq3(cc, key, tr_gx_rxz(cc, o->ws.colon), val))))
            return st;
    }
    if (!alts.n) return TR_ERR_FULL;
    gx *g = tr_gx_alt(cc, alts.v, alts.n);
    return g ? push_member(o, (member){"", 0, true, g, 0, 0, 0, 0, true}) : cc->err;
}

/* ---- the member chain ---- */

static gx *sep_m(objc *o, uint32_t i) {
    return tr_gx_seq2(o->x->cc, tr_gx_rxz(o->x->cc, o->ws.sep), o->m[i].g);
}

/* (SEP A){lo, hi}, hi also bounded by the additional keys left when
 * `done` additional members are written already (add_max). */
static gx *add_loop(objc *o, uint64_t lo, uint64_t hi, uint64_t done) {
    gcc *cc = o->x->cc;
    if (o->add_max != UINT64_MAX) hi = TR_MIN(hi, o->add_max > done ? o->add_max - done : 0);
    if (!o->add || lo > hi) return lo == 0 ? tr_gx_empty(cc) : tr_gx_never(cc);
    return tr_gx_rep(cc, tr_gx_seq2(cc, tr_gx_rxz(cc, o->ws.sep), o->add), (uint32_t)lo,
                     hi == UINT64_MAX ? GX_INF : (uint32_t)hi);
}

/* Without property counts: R_i flat (short) or as rules (long). A
 * witness member (listed last) may follow additional ones: (A SEP)* W. */
static tr_status chain_plain(objc *o, gx **out) {
    js_ctx *x = o->x;
    gcc *cc = x->cc;
    uint32_t n = o->nm, first_req = n;
    for (uint32_t i = 0; o->add && i < n; i++)
        if (o->m[i].witness) {
            gx *before = tr_gx_rep(cc, tr_gx_seq2(cc, o->add, tr_gx_rxz(cc, o->ws.sep)), 0, GX_INF);
            if (!(o->m[i].g = tr_gx_seq2(cc, before, o->m[i].g))) return cc->err;
        }
    for (uint32_t i = 0; i < n; i++)
        if (o->m[i].required) {
            first_req = i;
            break;
        }
    gx **R = tr_gcc_alloc(cc, (size_t)(n + 1) * sizeof *R);
    if (!R) return cc->err;
    bool flat = (uint64_t)(first_req + 1) * (n + 1) <= JS_FLAT_CHAIN;
    R[n] = tr_gx_empty(cc);
    for (uint32_t i = n; i-- > 0;) {
        gx *step = sep_m(o, i);
        if (!o->m[i].required) step = tr_gx_opt(cc, step);
        R[i] = tr_gx_seq2(cc, step, R[i + 1]);
        if (!flat && i > first_req && i + 1 < n) { /* share long tails as rules */
            uint32_t id;
            tr_status st = tr_gx_rule_add(cc, &x->g, "props", &id);
            if (st) return st;
            x->g.rules[id].body = R[i];
            R[i] = tr_gx_ref(cc, id);
        }
        if (!R[i]) return cc->err;
    }
    /* the listed part, nonempty: the first member present is i (one of
     * the optional ones before first_req, or first_req itself) */
    gx_list alts = {0};
    for (uint32_t i = 0; i <= first_req && i < n; i++)
        if (tr_gx_list_push(cc, &alts, tr_gx_seq2(cc, o->m[i].g, R[i + 1]))) return cc->err;
    /* additional members follow, once: the additional member (often the
     * largest piece: its keys exclude every listed name) appears twice in
     * the whole expression, not once per listed suffix */
    gx *listed = tr_gx_alt(cc, alts.v, alts.n);
    if (!o->add) {
        *out = listed;
        return *out ? TR_OK : cc->err;
    }
    gx *tail = add_loop(o, 0, UINT64_MAX, 0);
    gx *body = n ? tr_gx_seq2(cc, listed, tail) : tr_gx_never(cc);
    if (first_req == n) /* (the same tail when the keys are not counted) */
        body = tr_gx_alt2(cc, body,
                          tr_gx_seq2(cc, o->add,
                                     o->add_max == UINT64_MAX ? tail
                                                              : add_loop(o, 0, UINT64_MAX, 1)));
    *out = body;
    return *out ? TR_OK : cc->err;
}

/* The rule of a memoized state: *rid, and *fresh when it was just made
 * (its body is then the caller's to set). */
static tr_status state_rule(objc *o, js_ptrmap *ids, uint64_t key, uint32_t *rid, bool *fresh) {
    uint64_t id;
    *fresh = !tr_js_ptrmap_get(ids, (const void *)(uintptr_t)key, &id);
    if (!*fresh) return (*rid = (uint32_t)id), TR_OK;
    tr_status st = tr_gx_rule_add(o->x->cc, &o->x->g, "props", rid);
    return st ? st : tr_js_ptrmap_put(o->x->cc, ids, (const void *)(uintptr_t)key, *rid);
}

/* The dependency pairs a written member raises and those it meets; an
 * object may end when every raised pair is met. */
static void taken_pairs(const member *m, uint64_t *raised, uint64_t *met) {
    *raised |= m->set_take | m->block;
    *met |= m->need | m->set_skip;
}

/* With minProperties / maxProperties or property dependencies: R(i, c,
 * m, first): member i next, c members emitted so far (saturating at
 * min when there is no max), m the dependency pairs raised, first:
 * nothing emitted yet. Memoized rules, built lazily. */
typedef struct counted {
    objc *o;
    uint32_t cap;  /* counts 0..cap tracked */
    bool before;   /* additional members may come before a witness */
    js_ptrmap ids; /* state key -> rule id + 1 */
    uint32_t made;
} counted;

static uint32_t sat(const counted *k, uint64_t c) { return (uint32_t)TR_MIN(c, (uint64_t)k->cap); }

static gx *R_count(counted *k, uint32_t i, uint32_t c, uint64_t m, bool first);

static gx *R_body(counted *k, uint32_t i, uint32_t c, uint64_t m, bool first) {
    objc *o = k->o;
    gcc *cc = o->x->cc;
    if (o->max != UINT64_MAX && c > o->max) return tr_gx_never(cc);
    if (i == o->nm) {
        uint64_t lo = o->min > c ? o->min - c : 0;
        uint64_t hi = o->max == UINT64_MAX ? UINT64_MAX : o->max - c;
        if (!first) return add_loop(o, lo, hi, 0);
        /* nothing emitted yet: A (SEP A){lo-1, hi-1}, nonempty */
        if (!o->add || hi == 0) return tr_gx_never(cc);
        return tr_gx_seq2(cc, o->add,
                          add_loop(o, lo ? lo - 1 : 0, hi == UINT64_MAX ? hi : hi - 1, 1));
    }
    const member *mi = &o->m[i];
    bool can_take = !(m & mi->block), must_take = mi->required || (m & mi->need);
    gx *take = can_take ? tr_gx_seq2(cc, first ? mi->g : sep_m(o, i),
                                     R_count(k, i + 1, sat(k, c + 1), m | mi->set_take, false))
                        : tr_gx_never(cc);
    if (mi->witness && k->before) { /* additional members may come before it */
        gx *a = first ? o->add : tr_gx_seq2(cc, tr_gx_rxz(cc, o->ws.sep), o->add);
        take = tr_gx_alt2(cc, take, tr_gx_seq2(cc, a, R_count(k, i, sat(k, c + 1), m, false)));
    }
    if (must_take) return take;
    return tr_gx_alt2(cc, take, R_count(k, i + 1, c, m | mi->set_skip, first));
}

static gx *R_count(counted *k, uint32_t i, uint32_t c, uint64_t m, bool first) {
    objc *o = k->o;
    gcc *cc = o->x->cc;
    /* only the pairs that can still matter are part of the state */
    uint64_t live = 0;
    for (uint32_t j = i; j < o->nm; j++) live |= o->m[j].need | o->m[j].block;
    m &= live;
    uint64_t key = ((((uint64_t)i << 20 | c) << 17 | m) << 1 | first) + 1;
    uint32_t rid;
    bool fresh;
    if (state_rule(o, &k->ids, key, &rid, &fresh)) return NULL;
    if (fresh && ++k->made > JS_MAX_CHAIN_RULES) {
        tr_js_fail(o->x, TR_ERR_LIMIT, o->n->nodes[0].node,
                   "too many properties combined with minProperties / maxProperties / "
                   "dependencies (over %u states)",
                   JS_MAX_CHAIN_RULES);
        return NULL;
    }
    if (fresh) { /* the body first: building it may move the rule table */
        gx *b = R_body(k, i, c, m, first);
        if (!b) return NULL;
        o->x->g.rules[rid].body = b;
    }
    return tr_gx_ref(cc, rid);
}

static tr_status chain_counted(objc *o, gx **out) {
    /* c <= nm while listed members are read; past max everything dies,
     * and without a max every count >= min behaves alike. Additional
     * members before a witness count too: exactly up to max + 1 where
     * that is small (else the witness comes first among them), and
     * without a max saturating early (the tail then asks for more than
     * min needs: fewer texts, never more) */
    bool witness = false;
    for (uint32_t i = 0; i < o->nm; i++) witness |= o->m[i].witness;
    uint64_t room = (uint64_t)o->nm + 1 + (witness ? JS_MAX_COUNTED_KEYS : 0);
    bool before = witness && o->add && (o->max == UINT64_MAX || o->max < room);
    uint64_t cap = o->max != UINT64_MAX
                       ? TR_MIN(o->max + 1, before ? room : (uint64_t)o->nm + 1)
                       : TR_MIN(o->min, before ? room : (uint64_t)o->nm + 1);
    if (o->nm >= (1u << 19) || cap >= (1u << 19))
        return tr_js_fail(o->x, TR_ERR_LIMIT, o->n->nodes[0].node, "too many properties");
    counted k = {o, (uint32_t)cap, before, {0}, 0};
    *out = R_count(&k, 0, 0, 0, true);
    return *out ? TR_OK : o->x->cc->err;
}

/* A rule whose body is g, as a reference (rules let a piece appear in
 * many states while the text holds it once). */
static tr_status rule_of(objc *o, gx *g, const char *name, gx **out) {
    uint32_t id;
    tr_status st = g ? tr_gx_rule_add(o->x->cc, &o->x->g, name, &id) : o->x->cc->err;
    if (st) return st;
    o->x->g.rules[id].body = g;
    *out = tr_gx_ref(o->x->cc, id);
    return *out ? TR_OK : o->x->cc->err;
}

/* property_order ANY: A(S, a, first), S the set of listed members
 * written so far, a the additional members written (tracked up to
 * min / max, saturating at min without a max), first: nothing written.
 *   A(S, a, f) = | for each i not in S:  [SEP] m_i A(S+i, a, 0)
 *                | [SEP] add A(S, a+1, 0)
 *                | (empty)  when not first, S holds every required
 *                           name, every dependency it raises and
 *                           |S| + a >= min
 * and, once a saturates, the additional members are a loop in front:
 * A(S, sat, 0) = (SEP add)* (the rest). Exact: a listed name cannot be
 * taken twice (S), nor by an additional key (their keys exclude every
 * listed name). 2^n states: objects with more listed members than
 * GRAMMAR_JSON_ANY_ORDER_MAX_MEMBERS keep schema order (fewer texts,
 * never more). Each member is a rule, so its value is written once. */
typedef struct anyord {
    objc *o;
    uint32_t acap;  /* additional count tracked 0..acap */
    uint64_t req;   /* required members (bits) */
    uint32_t *kv;   /* rule id per member */
    js_ptrmap ids;  /* state key -> rule id */
} anyord;

static gx *A_ref(anyord *k, uint64_t S, uint32_t a, bool first);

static bool any_closable(const anyord *k, uint64_t S, uint32_t a) {
    const objc *o = k->o;
    if ((S & k->req) != k->req) return false;
    uint64_t raised = 0, met = 0;
    for (uint32_t i = 0; i < o->nm; i++)
        if (S >> i & 1) {
            taken_pairs(&o->m[i], &raised, &met);
        }
    uint64_t c = (uint64_t)__builtin_popcountll(S) + a;
    return !(raised & ~met) && c >= o->min;
}

static gx *A_body(anyord *k, uint64_t S, uint32_t a, bool first) {
    objc *o = k->o;
    gcc *cc = o->x->cc;
    uint64_t c = (uint64_t)__builtin_popcountll(S) + a;
    bool room = o->max == UINT64_MAX || c < o->max;
    /* with counted keys, a counts the additional members exactly (acap
     * >= add_max) and there is no unbounded loop */
    bool add_room = room && (o->add_max == UINT64_MAX || a < o->add_max);
    bool loop = o->add && o->max == UINT64_MAX && o->add_max == UINT64_MAX && a == k->acap &&
                !first;
    gx_list alts = {0};
    for (uint32_t i = 0; room && i < o->nm; i++) {
        if (S >> i & 1) continue;
        gx *m = tr_gx_ref(cc, k->kv[i]);
        if (!first) m = tr_gx_seq2(cc, tr_gx_rxz(cc, o->ws.sep), m);
        gx *next = A_ref(k, S | 1ull << i, a, false);
        if (!next || tr_gx_list_push(cc, &alts, tr_gx_seq2(cc, m, next))) return NULL;
    }
    if (o->add && add_room && !loop) {
        gx *m = first ? o->add : tr_gx_seq2(cc, tr_gx_rxz(cc, o->ws.sep), o->add);
        gx *next = A_ref(k, S, TR_MIN(a + 1, k->acap), false);
        if (!next || tr_gx_list_push(cc, &alts, tr_gx_seq2(cc, m, next))) return NULL;
    }
    if (!first && any_closable(k, S, a) && tr_gx_list_push(cc, &alts, tr_gx_empty(cc)))
        return NULL;
    gx *body = alts.n ? tr_gx_alt(cc, alts.v, alts.n) : tr_gx_never(cc);
    return loop && body ? tr_gx_seq2(cc, add_loop(o, 0, UINT64_MAX, a), body) : body;
}

static gx *A_ref(anyord *k, uint64_t S, uint32_t a, bool first) {
    objc *o = k->o;
    gcc *cc = o->x->cc;
    uint64_t key = ((S * ((uint64_t)k->acap + 1) + a) << 1 | first) + 1;
    uint32_t rid;
    bool fresh;
    if (state_rule(o, &k->ids, key, &rid, &fresh)) return NULL;
    if (fresh) { /* the body first: building it may move the rule table */
        gx *b = A_body(k, S, a, first);
        if (!b) return NULL;
        o->x->g.rules[rid].body = b;
    }
    return tr_gx_ref(cc, rid);
}

/* *out NULL: the object is too large for ANY and keeps schema order. */
static tr_status chain_any(objc *o, gx **out) {
    gcc *cc = o->x->cc;
    *out = NULL;
    uint64_t acap = 0;
    if (o->add)
        acap = o->max != UINT64_MAX ? o->max : o->min;
    if (o->nm > GRAMMAR_JSON_ANY_ORDER_MAX_MEMBERS || acap > 64 ||
        (acap + 1) << o->nm > (1u << GRAMMAR_JSON_ANY_ORDER_MAX_MEMBERS))
        return TR_OK;
    /* counted additional keys need a count up to add_max; where that
     * does not fit, they stay uncounted here (json_gen_obj.c's top) */
    uint64_t want = o->add && o->add_max != UINT64_MAX ? TR_MAX(acap, o->add_max) : acap;
    if (want > 64 || (want + 1) << o->nm > (1u << GRAMMAR_JSON_ANY_ORDER_MAX_MEMBERS))
        o->add_max = UINT64_MAX;
    else
        acap = want;
    anyord k = {o, (uint32_t)acap, 0, NULL, {0}};
    k.kv = tr_gcc_alloc(cc, (size_t)(o->nm + 1) * sizeof *k.kv);
    if (!k.kv) return cc->err;
    for (uint32_t i = 0; i < o->nm; i++) {
        if (o->m[i].required) k.req |= 1ull << i;
        tr_status st = tr_gx_rule_add(cc, &o->x->g, "prop", &k.kv[i]);
        if (st) return st;
        o->x->g.rules[k.kv[i]].body = o->m[i].g;
    }
    if (o->add) { /* its keys exclude every listed name: often long */
        uint32_t id;
        tr_status st = tr_gx_rule_add(cc, &o->x->g, "props-add", &id);
        if (st) return st;
        o->x->g.rules[id].body = o->add;
        o->add = tr_gx_ref(cc, id);
        if (!o->add) return cc->err;
    }
    *out = A_ref(&k, 0, 0, true);
    return *out ? TR_OK : cc->err;
}

/* property_order ANY by counting, for objects past chain_any's bound
 * (or every object, x->any_counted), in grammars whose matcher keeps the
 * key tracker (x->keys_tracked; text for EBNF's %json does not, and takes
 * the set up to its bound, then schema order). The matcher's tracker already
 * refuses a key its object has (json_keys_internal.h), so a listed
 * name is written at most once whatever the grammar offers; the grammar
 * only has to count. T(q, o, a, S): q required members written, o
 * optional listed ones, a additional ones, S the members named by a
 * property dependency (few) that are written, each its own alternative:
 *   T = | [SEP] REQ T(q+1, o, a, S)   when q < r
 *       | [SEP] OPT T(q, o+1, a, S)   when o < p       (tracked)
 *       | [SEP] ADD T(q, o, a+1, S)   when a < add_max (tracked)
 *       | [SEP] m_i T(q, o, a, S+i)   for each dependency member i not in S
 *       | (empty)                     when not first, q == r and S holds
 *                                     the required and dependent members
 * REQ / OPT: any required / optional member not named by a dependency,
 * one rule each. q distinct required names written means all of them:
 * exact. o and a are tracked only where keys can run out (no additional
 * member, or finitely many additional keys), so that no ',' leads where
 * only a repeat could follow; past JS_TALLY_MAX_STATES they are not, and
 * the untracked kinds loop instead ((SEP OPT|ADD)* before each step):
 * the dead end json_keys_internal.h states becomes possible there.
 * Unlike chain_any, a key's first bytes may be offered when only a
 * repeat can complete it (the tracker refuses its closing quote).
 * Objects with min >= 2 or maxProperties, or with more than
 * JS_TALLY_MAX_DEP_MEMBERS members named by dependencies, are left to
 * chain_any / schema order. */
#define JS_TALLY_MAX_STATES 256u
#define JS_TALLY_MAX_DEP_MEMBERS 8u

typedef struct tally {
    objc *o;
    uint32_t r, p;       /* required / optional listed members, neither
                            named by a dependency */
    bool track;          /* o and a counted */
    uint64_t acap;       /* a counted 0..acap when tracked */
    gx *req, *opt, *add; /* rule references; NULL: none */
    gx *loop;            /* (SEP (OPT | ADD))* when not tracked */
    uint32_t nd;         /* dependency members */
    uint32_t dm[JS_TALLY_MAX_DEP_MEMBERS]; /* their member indexes */
    gx *dg[JS_TALLY_MAX_DEP_MEMBERS];      /* their rules */
    js_ptrmap ids;       /* state key -> rule id */
} tally;

typedef struct tstate {
    uint32_t q, oc;
    uint64_t ac;
    uint32_t S; /* dependency members written (bits over dm) */
} tstate;

static gx *T_ref(tally *k, tstate t, bool first);

static tr_status T_push(tally *k, gx_list *alts, gx *m, bool first, gx *next) {
    gcc *cc = k->o->x->cc;
    if (!next) return cc->err;
    if (!first) m = tr_gx_seq2(cc, tr_gx_rxz(cc, k->o->ws.sep), m);
    return tr_gx_list_push(cc, alts, tr_gx_seq2(cc, m, next));
}

/* Whether the object may end with the dependency members S written:
 * the required ones among them written, every dependency they raise
 * met (chain_any's any_closable over them). */
static bool T_closable(const tally *k, uint32_t S) {
    const objc *o = k->o;
    uint64_t raised = 0, met = 0;
    for (uint32_t j = 0; j < k->nd; j++) {
        const member *m = &o->m[k->dm[j]];
        if (S >> j & 1) {
            taken_pairs(m, &raised, &met);
        } else if (m->required) {
            return false;
        }
    }
    return !(raised & ~met);
}

static gx *T_body(tally *k, tstate t, bool first) {
    gcc *cc = k->o->x->cc;
    gx_list alts = {0};
    tr_status st = TR_OK;
    tstate n = t;
    if (t.q < k->r) n.q = t.q + 1, st = T_push(k, &alts, k->req, first, T_ref(k, n, false));
    if (!st && k->track && t.oc < k->p)
        n = t, n.oc = t.oc + 1, st = T_push(k, &alts, k->opt, first, T_ref(k, n, false));
    if (!st && k->track && k->add && t.ac < k->acap)
        n = t, n.ac = t.ac + 1, st = T_push(k, &alts, k->add, first, T_ref(k, n, false));
    for (uint32_t j = 0; !st && j < k->nd; j++)
        if (!(t.S >> j & 1))
            n = t, n.S = t.S | 1u << j, st = T_push(k, &alts, k->dg[j], first, T_ref(k, n, false));
    if (!st && !k->track && first && (k->opt || k->add)) {
        gx *x = k->opt && k->add ? tr_gx_alt2(cc, k->opt, k->add) : k->opt ? k->opt : k->add;
        st = T_push(k, &alts, x, true, T_ref(k, t, false));
    }
    if (!st && !first && t.q == k->r && T_closable(k, t.S))
        st = tr_gx_list_push(cc, &alts, tr_gx_empty(cc));
    if (st) return NULL;
    gx *body = alts.n ? tr_gx_alt(cc, alts.v, alts.n) : tr_gx_never(cc);
    return k->loop && !first && body ? tr_gx_seq2(cc, k->loop, body) : body;
}

static gx *T_ref(tally *k, tstate t, bool first) {
    objc *o = k->o;
    gcc *cc = o->x->cc;
    uint64_t key = (((((uint64_t)t.q * (k->p + 1ull) + t.oc) * (k->acap + 1) + t.ac) << k->nd |
                     t.S) << 1 | first) + 1;
    uint32_t rid;
    bool fresh;
    if (state_rule(o, &k->ids, key, &rid, &fresh)) return NULL;
    if (fresh) { /* the body first: building it may move the rule table */
        gx *b = T_body(k, t, first);
        if (!b) return NULL;
        o->x->g.rules[rid].body = b;
    }
    return tr_gx_ref(cc, rid);
}

/* dependency members, and the witness: each is a bit of the state (a
 * witness counted among the required would let two witnesses stand for
 * a required name) */
static bool dep_member(const member *m) {
    return m->witness || (m->set_take | m->set_skip | m->need | m->block);
}

/* A rule holding the alternatives of the members with required == req
 * that no dependency names (NULL when there are none). */
static tr_status members_rule(objc *o, bool req, const char *name, gx **out) {
    gcc *cc = o->x->cc;
    gx_list alts = {0};
    *out = NULL;
    for (uint32_t i = 0; i < o->nm; i++)
        if (o->m[i].required == req && !dep_member(&o->m[i]) &&
            tr_gx_list_push(cc, &alts, o->m[i].g))
            return cc->err;
    if (!alts.n) return TR_OK;
    return rule_of(o, tr_gx_alt(cc, alts.v, alts.n), name, out);
}

/* The dependency members, each as a rule; false when there are too
 * many for the state. */
static tr_status dep_members(objc *o, tally *k, bool *fits) {
    *fits = true;
    for (uint32_t i = 0; i < o->nm; i++) {
        if (!dep_member(&o->m[i])) continue;
        if (k->nd == JS_TALLY_MAX_DEP_MEMBERS) return (*fits = false), TR_OK;
        k->dm[k->nd] = i;
        tr_status st = rule_of(o, o->m[i].g, "prop", &k->dg[k->nd++]);
        if (st) return st;
    }
    return TR_OK;
}

/* *out NULL: counts or dependencies this construction does not take. */
static tr_status chain_tally(objc *o, gx **out) {
    gcc *cc = o->x->cc;
    *out = NULL;
    if (o->min > 1 || o->max != UINT64_MAX) return TR_OK; /* chain_any's */
    tally k = {.o = o};
    bool fits;
    tr_status st = dep_members(o, &k, &fits);
    if (st || !fits) return st;
    for (uint32_t i = 0; i < o->nm; i++)
        if (!dep_member(&o->m[i])) o->m[i].required ? k.r++ : k.p++;
    if (!o->add || o->add_max != UINT64_MAX) {
        k.acap = o->add ? o->add_max : 0;
        k.track = (k.r + 1ull) * (k.p + 1ull) * (k.acap + 1) <= JS_TALLY_MAX_STATES;
    }
    st = members_rule(o, true, "props-req", &k.req);
    if (!st) st = members_rule(o, false, "props-opt", &k.opt);
    if (!st && o->add) st = rule_of(o, o->add, "props-add", &k.add);
    if (st) return st;
    if (!k.track && (k.opt || k.add)) {
        gx *x = k.opt && k.add ? tr_gx_alt2(cc, k.opt, k.add) : k.opt ? k.opt : k.add;
        k.loop = tr_gx_rep(cc, tr_gx_seq2(cc, tr_gx_rxz(cc, o->ws.sep), x), 0, GX_INF);
        if (!k.loop) return cc->err;
    }
    if (!k.track) k.acap = 0; /* o and a stay 0 in the state */
    *out = T_ref(&k, (tstate){0, 0, 0, 0}, true);
    return *out ? TR_OK : cc->err;
}

/* dependentRequired / dependencies (array form): "if t is present, so is
 * d", as pair bits on the members (names not listed become listed). */
static tr_status collect_deps(objc *o) {
    js_ctx *x = o->x;
    for (uint32_t i = 0; i < o->n->n; i++) {
        const json_t *node = o->n->nodes[i].node;
        static const char *const kws[] = {"dependentRequired", "dependencies"};
        for (int k = 0; k < 2; k++) {
            const json_t *d = json_object_get(node, kws[k]);
            if (!d) continue;
            if (!json_is_object(d))
                return tr_js_fail(x, TR_ERR_FORMAT, node, "%s must be an object", kws[k]);
            const char *t;
            json_t *v;
            json_object_foreach((json_t *)d, t, v) {
                size_t nd = json_is_array(v) ? json_array_size(v) : 1;
                if (!json_is_array(v) && !json_is_string(v))
                    continue; /* a schema: json_not.c's conditionals */
                for (size_t j = 0; j < nd; j++) {
                    const json_t *dn = json_is_array(v) ? json_array_get(v, j) : v;
                    if (!json_is_string(dn))
                        return tr_js_fail(x, TR_ERR_FORMAT, node, "%s: names must be strings", kws[k]);
                    if (o->n_deps == JS_MAX_DEPS)
                        return tr_js_unsupported(x, node, kws[k],
                                                 "more than 16 property dependencies on one object");
                    tr_status st = add_name(o, t, strlen(t));
                    if (!st) st = add_name(o, json_string_value(dn), json_string_length(dn));
                    if (st) return st;
                    uint32_t ti = 0, di = 0;
                    while (!same_name(&o->m[ti], t, strlen(t))) ti++;
                    while (!same_name(&o->m[di], json_string_value(dn), json_string_length(dn)))
                        di++;
                    if (ti == di) continue; /* "a needs a" */
                    uint64_t bit = 1ull << o->n_deps++;
                    if (ti < di) { /* t first: taking t raises "d needed" */
                        o->m[ti].set_take |= bit;
                        o->m[di].need |= bit;
                    } else { /* d first: skipping d raises "t forbidden" */
                        o->m[di].set_skip |= bit;
                        o->m[ti].block |= bit;
                    }
                }
            }
        }
    }
    return TR_OK;
}

/* unevaluatedProperties U of member at: a synthetic member {properties:
 * {names: true}, patternProperties: {patterns: true},
 * additionalProperties: U} with the names and patterns its in-place
 * members evaluate; NULL when one of them evaluates every property
 * (additionalProperties, or an unevaluatedProperties of its own). */
static tr_status unevaluated_member(js_ctx *x, const js_norm *n, uint32_t at, const json_t *u,
                                    const json_t **out) {
    *out = NULL;
    uint8_t *mark = tr_gcc_alloc(x->cc, n->n + 1);
    if (!mark) return x->cc->err;
    tr_status st = tr_js_in_place(x, n, at, mark);
    if (st) return st;
    json_t *o = tr_js_synth_new(x), *props = json_object(), *pats = json_object();
    bool ok = o && props && pats && !json_object_set(o, "properties", props) &&
              !json_object_set(o, "patternProperties", pats) &&
              !json_object_set(o, "additionalProperties", (json_t *)u);
    for (uint32_t i = 0; ok && i < n->n; i++) {
        if (!mark[i]) continue;
        const json_t *node = n->nodes[i].node;
        if (json_object_get(node, "additionalProperties") ||
            (i != at && json_object_get(node, "unevaluatedProperties"))) {
            json_decref(props), json_decref(pats);
            return TR_OK; /* every property evaluated */
        }
        static const char *const kws[] = {"properties", "patternProperties"};
        for (int k = 0; k < 2 && ok; k++) {
            const json_t *m = json_object_get(node, kws[k]);
            const char *name;
            json_t *v;
            if (json_is_object(m))
                json_object_foreach((json_t *)m, name, v) ok = ok &&
                    !json_object_set(k ? pats : props, name, json_true());
        }
    }
    json_decref(props), json_decref(pats);
    if (!ok) return x->cc->err ? x->cc->err : tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
    *out = o;
    return TR_OK;
}

/* n plus the synthetic members of its unevaluatedProperties */
static tr_status with_unevaluated(js_ctx *x, const js_norm *n, js_norm *out) {
    *out = *n;
    for (uint32_t i = 0; i < n->n; i++) {
        const json_t *u = json_object_get(n->nodes[i].node, "unevaluatedProperties");
        if (!u || json_is_true(u)) continue;
        const json_t *m;
        tr_status st = unevaluated_member(x, n, i, u, &m);
        if (st) return st;
        uint32_t cap = out->n; /* a copy: n's array stays as it is */
        if (m && (st = push_item(x->cc, &out->nodes, &out->n, &cap, m))) return st;
    }
    return TR_OK;
}

/* The members of the conjunction n0, listed, additional and the
 * witnesses w asks for; *never when no object has them all. */
static tr_status object_members(js_ctx *x, const js_norm *n0, uint32_t depth, const witness *w,
                                uint32_t nw, objc *out, bool *never) {
    js_norm *n = tr_gcc_alloc(x->cc, sizeof *n);
    if (!n) return x->cc->err;
    tr_status st = with_unevaluated(x, n0, n);
    if (st) return st;
    objc o = {.x = x, .n = n, .depth = depth, .max = UINT64_MAX, .add_max = UINT64_MAX};
    *never = false;
    tr_js_ws(x, depth, &o.ws);
    for (uint32_t i = 0; i < n->n; i++) {
        const json_t *node = n->nodes[i].node;
        for (int k = 0; k < 2; k++) {
            uint64_t c;
            bool has;
            if ((st = tr_js_count_kw(x, node, k ? "maxProperties" : "minProperties", &c, &has)))
                return st;
            if (!has) continue;
            if (k)
                o.max = TR_MIN(o.max, c);
            else
                o.min = TR_MAX(o.min, c);
        }
    }
    if (o.min > o.max) return (*never = true), TR_OK;
    js_conj pn;
    if ((st = names_conj(&o, &pn))) return st;
    st = listed_members(&o, &pn);
    if (st == TR_ERR_FULL) return (*never = true), TR_OK;
    if (st || (st = additional(&o, &pn))) return st;
    for (uint32_t i = 0; i < nw; i++) {
        st = witness_member(&o, &w[i]);
        if (st == TR_ERR_FULL) return (*never = true), TR_OK;
        if (st) return st;
    }
    *out = o;
    return TR_OK;
}

static tr_status gen_some(js_ctx *x, const js_norm *n0, uint32_t at, uint32_t depth,
                          const witness *w, uint32_t nw, uint32_t *left, gx **out);
static uint32_t some_at(const js_ctx *x, const js_norm *n);

static tr_status gen_object(js_ctx *x, const js_norm *n0, uint32_t depth, const witness *w,
                            uint32_t nw, uint32_t *left, gx **out) {
    uint32_t at = some_at(x, n0);
    if (at != UINT32_MAX) return gen_some(x, n0, at, depth, w, nw, left, out);
    objc o;
    bool never;
    tr_status st = object_members(x, n0, depth, w, nw, &o, &never);
    if (st || never) return st ? st : (*out = tr_gx_never(x->cc)) ? TR_OK : x->cc->err;
    bool any_required = false;
    for (uint32_t i = 0; i < o.nm; i++) any_required |= o.m[i].required;
    gx *items = NULL;
    /* ANY: the set of members in the state for small objects (exact
     * masks, even at a key's first bytes) and for minProperties >= 2 /
     * maxProperties (which only chain_any takes; past its bound, schema
     * order); by counting for the rest */
    bool counts = o.min > 1 || o.max != UINT64_MAX;
    bool any = x->opt.property_order == GRAMMAR_JSON_ORDER_ANY;
    bool tally = any && x->keys_tracked; /* counting needs the tracker */
    bool set_first = counts || !tally || (!x->any_counted && o.nm <= JS_ANY_SET_MEMBERS);
    if (any && set_first) st = chain_any(&o, &items);
    if (!st && !items && tally) st = chain_tally(&o, &items);
    if (!st && !items && tally && !set_first) st = chain_any(&o, &items);
    if (!st && !items)
        st = o.min > 1 || o.max != UINT64_MAX || o.n_deps ? chain_counted(&o, &items)
                                                          : chain_plain(&o, &items);
    if (st) return st;
    *out = tr_js_container(x, '{', items, !any_required && o.min == 0, depth);
    return *out ? TR_OK : x->cc->err;
}

/* The key language of a someMember spec (json_internal.h). */
static tr_status spec_keys(js_ctx *x, const json_t *spec, witness *w) {
    gcc *cc = x->cc;
    const json_t *at = json_object_get(spec, "at"), *pats = json_object_get(spec, "patterns");
    const json_t *notp = json_object_get(spec, "notPatterns");
    const json_t *names = json_object_get(spec, "notNames"), *nk = json_object_get(spec, "notKeys");
    tr_status st = TR_OK;
    *w = (witness){.any = !json_is_array(pats) && !json_array_size(notp) &&
                          !json_array_size(names) && !nk,
                   .value = json_object_get(spec, "value")};
    if (w->any) return TR_OK;
    cpdfa acc = {0}, d2;
    if (!json_is_array(pats) && (st = tr_cpdfa_length(cc, 0, UINT32_MAX, &acc))) return st;
    for (int neg = 0; neg < 2; neg++) {
        const json_t *l = neg ? notp : pats;
        for (size_t i = 0; json_is_array(l) && i < json_array_size(l); i++) {
            cpdfa *d;
            const json_t *p = json_array_get(l, i);
            if (!json_is_string(p)) continue;
            if ((st = tr_js_pattern_cpdfa(x, at, json_string_value(p), &d))) return st;
            if (!d) continue; /* ignored (lenient): matches nothing */
            if ((st = tr_cpdfa_product(cc, &acc, d, neg ? CPD_MINUS : CPD_OR, &d2))) return st;
            acc = d2;
        }
    }
    uint32_t nn = (uint32_t)json_array_size(names);
    if (nn) {
        const char **vs = tr_gcc_alloc(cc, nn * sizeof *vs);
        size_t *vl = tr_gcc_alloc(cc, nn * sizeof *vl);
        if (!vs || !vl) return cc->err;
        for (uint32_t i = 0; i < nn; i++) {
            vs[i] = json_string_value(json_array_get(names, i));
            vl[i] = json_string_length(json_array_get(names, i));
            if (!vs[i]) vs[i] = "", vl[i] = 0;
        }
        cpdfa nd;
        if ((st = tr_cpdfa_from_strings(cc, vs, vl, nn, &nd)) ||
            (st = tr_cpdfa_product(cc, &acc, &nd, CPD_MINUS, &d2)))
            return st;
        acc = d2;
    }
    if (nk) {
        js_item it = {nk, 0};
        js_conj c = {&it, 1};
        cpdfa l;
        bool lany;
        if ((st = tr_js_string_lang(x, &c, &l, &lany))) return st;
        if (lany) memset(&acc, 0, sizeof acc);
        else if ((st = tr_cpdfa_product(cc, &acc, &l, CPD_MINUS, &d2)))
            return st;
        else
            acc = d2;
    }
    w->keys = acc;
    return TR_OK;
}

static uint32_t some_at(const js_ctx *x, const js_norm *n) {
    for (uint32_t i = 0; i < n->n; i++)
        if (tr_js_is_synthetic(x, n->nodes[i].node) &&
            json_object_get(n->nodes[i].node, JS_KW_SOME))
            return i;
    return UINT32_MAX;
}

/* n with one node more: {required: [name], properties: {name: value}} */
static tr_status with_named(js_ctx *x, const js_norm *n, const char *name, size_t len,
                            const json_t *value, js_norm *out) {
    json_t *o = tr_js_synth_new(x), *req = json_array(), *props = json_object();
    json_t *k = json_stringn(name, len);
    bool ok = o && req && props && k && !json_array_append(req, k) &&
              !json_object_setn(props, name, len, (json_t *)(value ? value : json_true())) &&
              !json_object_set(o, "required", req) && !json_object_set(o, "properties", props);
    json_decref(req), json_decref(props), json_decref(k);
    if (!ok) return x->cc->err ? x->cc->err : tr_gcc_fail(x->cc, TR_ERR_NOMEM, 0, "out of memory");
    *out = *n;
    uint32_t cap = n->n; /* a copy: n's array stays as it is */
    return push_item(x->cc, &out->nodes, &out->n, &cap, o);
}

/* w with the rule b folded into its witness j (one member for both):
 * false when no key is of both kinds. */
static tr_status merged(js_ctx *x, const witness *w, uint32_t nw, uint32_t j, const witness *b,
                        witness **out) {
    gcc *cc = x->cc;
    witness *m = tr_gcc_alloc(cc, nw * sizeof *m);
    if (!m) return cc->err;
    memcpy(m, w, nw * sizeof *m);
    *out = m;
    const witness *a = &w[j];
    tr_status st = TR_OK;
    if (a->any) m[j].keys = b->keys, m[j].any = b->any;
    else if (!b->any && (st = tr_cpdfa_product(cc, &a->keys, &b->keys, CPD_AND, &m[j].keys)))
        return st;
    if (!m[j].any && tr_cpdfa_is_empty(&m[j].keys)) return (*out = NULL), TR_OK;
    if (a->value && b->value) {
        json_t *o = tr_js_synth_new(x), *all = json_array();
        if (!o || !all || json_array_append(all, (json_t *)a->value) ||
            json_array_append(all, (json_t *)b->value) || json_object_set_new(o, "allOf", all))
            return cc->err ? cc->err : tr_gcc_fail(cc, TR_ERR_NOMEM, 0, "out of memory");
        m[j].value = o;
    } else if (b->value) {
        m[j].value = b->value;
    }
    return TR_OK;
}

/* An object under "some member of a kind exists" (the node at `at` of
 * n0): the union of one variant per listed name of that kind (the name
 * required, its value under the rule's value schema), one per witness
 * member already asked for by another rule (the same member serving
 * both: key of both kinds, value under both) and one where the member
 * is an additional key of its own (a witness member). Exact: the member
 * the rule asks for is listed, or it is another rule's, or neither. In
 * schema order a witness member may follow additional ones, and several
 * come in the order of their rules. */
#define JS_MAX_WITNESSES 6u
#define JS_MAX_WITNESS_NAMES 32u
/* objects built for the cases of one object's rules */
#define JS_MAX_SOME_CASES 256u

static tr_status some_case(js_ctx *x, const js_norm *n, uint32_t depth, const witness *w,
                           uint32_t nw, uint32_t *left, const json_t *where, gx_list *alts) {
    if (*left == 0)
        return tr_js_unsupported(x, where, "not",
                                 "\"some member exists\" rules whose cases make more than 256 "
                                 "objects");
    --*left;
    gx *g;
    tr_status st = gen_object(x, n, depth, w, nw, left, &g);
    return st ? st : tr_gx_list_push(x->cc, alts, g);
}

static tr_status gen_some(js_ctx *x, const js_norm *n0, uint32_t at, uint32_t depth,
                          const witness *w, uint32_t nw, uint32_t *left, gx **out) {
    gcc *cc = x->cc;
    const json_t *spec = json_object_get(n0->nodes[at].node, JS_KW_SOME);
    const json_t *where = json_object_get(spec, "at");
    witness *w2 = tr_gcc_alloc(cc, (nw + 1) * sizeof *w2);
    js_item *rest = tr_gcc_alloc(cc, (size_t)n0->n * sizeof *rest);
    if (!w2 || !rest) return cc->err;
    if (nw) memcpy(w2, w, nw * sizeof *w2);
    tr_status st = spec_keys(x, spec, &w2[nw]);
    if (st) return st;
    js_norm r = *n0;
    r.nodes = rest;
    r.n = 0;
    for (uint32_t i = 0; i < n0->n; i++)
        if (i != at) rest[r.n++] = n0->nodes[i];
    /* the object without this rule: its names, whether it has additional
     * keys (closed objects, the usual oneOf branch, have none), its
     * maxProperties; no such object, no case */
    objc probe;
    bool never;
    if ((st = object_members(x, &r, depth, NULL, 0, &probe, &never))) return st;
    if (never) return (*out = tr_gx_never(cc)) ? TR_OK : cc->err;
    gx_list alts = {0};
    uint32_t taken = 0;
    for (uint32_t i = 0; i < probe.n_all; i++) {
        const char *name = probe.all_names[i];
        size_t len = probe.all_lens[i];
        if (!w2[nw].any && !tr_cpdfa_matches(&w2[nw].keys, name, len)) continue;
        if (++taken > JS_MAX_WITNESS_NAMES)
            return tr_js_unsupported(x, where, "not",
                                     "\"some member exists\" over more than 32 listed names");
        js_norm v;
        if ((st = with_named(x, &r, name, len, w2[nw].value, &v)) ||
            (st = some_case(x, &v, depth, w, nw, left, where, &alts)))
            return st;
    }
    bool additional_keys = probe.add != NULL;
    for (uint32_t j = 0; additional_keys && j < nw; j++) {
        witness *m = NULL;
        if ((st = merged(x, w, nw, j, &w2[nw], &m))) return st;
        if (m && (st = some_case(x, &r, depth, m, nw, left, where, &alts))) return st;
    }
    /* a member of its own: nw + 1 distinct keys must fit maxProperties */
    if (additional_keys && nw + 1 <= probe.max) {
        if (nw == JS_MAX_WITNESSES)
            return tr_js_unsupported(x, where, "not",
                                     "more than 6 members asked for by \"some member exists\" "
                                     "rules on one object");
        if ((st = some_case(x, &r, depth, w2, nw + 1, left, where, &alts))) return st;
    }
    *out = alts.n ? tr_gx_alt(cc, alts.v, alts.n) : tr_gx_never(cc);
    return *out ? TR_OK : cc->err;
}

tr_status tr_js_gen_object(js_ctx *x, const js_norm *n, uint32_t depth, gx **out) {
    uint32_t left = JS_MAX_SOME_CASES;
    return gen_object(x, n, depth, NULL, 0, &left, out);
}
