/* json_unique.c — uniqueItems over items with unboundedly many values,
 * left to the matcher's JSON tracker (json_keys_internal.h) at the
 * instance paths where it may hold.
 *
 * Layering: grammar/json (json_internal.h), called by the array builder
 * (json_gen_arr.c). Single-threaded per compile.
 *
 * Distinct strings (or objects, numbers...) are not a context-free
 * language, so the grammar cannot say "no item twice"; the tracker can,
 * the way it keeps an object from repeating a key: in an array it knows
 * to be unique it keeps each item (a string item as a key, any other as
 * its canonical form). What it needs is where such arrays are: the
 * instance paths (a key per object level, "an item" per array level) at
 * which the uniqueItems schema may be in force, and whether their items
 * are strings only.
 *
 * The walk below follows every subschema keyword from the root and
 * records, for each uniqueItems node U, the paths where it is met. Steps
 * that keep a definite location: properties (the value under that key),
 * items as one schema (every item), allOf / extends and $ref (in place),
 * additionalProperties beside no patternProperties (every key but the
 * listed ones: a path element the tracker can check). Steps whose
 * location or whose holding depends on the instance are widened, so that
 * the rule is applied wherever U may apply: the choices (anyOf, oneOf,
 * if / then / else, dependentSchemas / dependencies) keep the location as
 * if they held; patternProperties, additionalProperties beside patterns
 * and unevaluatedProperties take every key; tuple items, prefixItems,
 * contains and additional / unevaluated items take every item. Widened,
 * the tracker refuses repeats at some locations where the schema allows
 * them (an instance that takes another anyOf branch, a key no pattern
 * matches): fewer texts, never more. Past JU_MAX_DEPTH levels (a
 * recursive path) only the last element is kept and the record matches
 * an array under it at any depth (wider still). Below `not` (and draft
 * 3's `disallow`) uniqueItems means its opposite: a U met there is
 * refused as before. A $ref that does not resolve stops the walk there
 * (the compile fails on it wherever it meets it, the same resolution).
 * U is approved when every meeting kept a path; its records say whether
 * U's own items are strings only (one `items` schema of strings: the
 * tracker's cheaper key-like way) or may be anything.
 *
 * Output (for the grammar, then the tracker): per approved path, one
 * record: [n elements, TR_GKEYS_ANY_ITEMS (cfg.h) set unless the items
 * are strings only] then per element 'i' (an item), 'k' + 4-byte
 * little-endian length + the key's bytes (decoded, as the tracker
 * decodes keys), or 'a' + a 4-byte count of keys + each as 'k' spells
 * it (any key but those).
 */
#include <string.h>

#include "base/hash.h"
#include "grammar/cfg/cfg.h"
#include "grammar/json/json_internal.h"

/* past this many levels a path keeps its last element only (wild): a
 * recursive schema's paths stop multiplying there */
#define JU_MAX_DEPTH 8u
#define JU_MAX_VISITS 200000u

typedef struct ju_el {
    const char *key;      /* NULL: an item, or any key but excl's */
    size_t len;
    const json_t *excl;   /* additionalProperties: the `properties` whose
                             keys it does not govern (an object, maybe
                             empty); NULL: an item or a key */
    uint64_t h;           /* hash of the path up to this element */
} ju_el;

typedef struct ju_rec {
    const json_t *node; /* a uniqueItems node */
    ju_el *path;        /* NULL when cond */
    uint32_t n;
    bool cond;
    bool wild;          /* path is the last element only, at any depth */
} ju_rec;

struct js_uwalk {
    ju_rec *recs;
    uint32_t n, cap;
    ju_el stack[JU_MAX_DEPTH];
    uint32_t depth;
    /* past JU_MAX_DEPTH (a recursive path): only the last element is
     * kept, and a record then matches any array under it at any depth */
    bool wild;
    ju_el win;
    uint64_t *seen; /* open-addressed (node, path) hashes, 0 empty */
    uint32_t seen_cap, seen_n;
    uint32_t visits;
    bool broken; /* the walk gave up: nothing is approved */
    const json_t *empty; /* {}: the `properties` of an object without */
    js_ptrmap approved;
};

/* A hash of (node, the current path or "conditional"); 0 never. */
static uint64_t state_hash(const js_uwalk *w, const json_t *node, bool cond) {
    uint64_t path = cond       ? 0x5bd1e995u
                    : w->wild  ? w->win.h ^ 0x9e3779b97f4a7c15ull
                    : w->depth ? w->stack[w->depth - 1].h
                               : 0;
    uint64_t h = tr_splitmix64(tr_fnv1a_word(path, (uint64_t)(uintptr_t)node));
    return h ? h : 1;
}

/* Whether the state was seen; marks it. */
static tr_status seen_before(js_ctx *x, js_uwalk *w, uint64_t h, bool *seen) {
    if ((w->seen_n + 1) * 2 > w->seen_cap) {
        uint32_t nc = w->seen_cap ? w->seen_cap * 2 : 256;
        uint64_t *t = tr_gcc_alloc(x->cc, (size_t)nc * sizeof *t);
        if (!t) return x->cc->err;
        memset(t, 0, (size_t)nc * sizeof *t);
        for (uint32_t i = 0; i < w->seen_cap; i++) {
            if (!w->seen[i]) continue;
            uint32_t j = (uint32_t)w->seen[i] & (nc - 1);
            while (t[j]) j = (j + 1) & (nc - 1);
            t[j] = w->seen[i];
        }
        w->seen = t;
        w->seen_cap = nc;
    }
    uint32_t i = (uint32_t)h & (w->seen_cap - 1);
    while (w->seen[i] && w->seen[i] != h) i = (i + 1) & (w->seen_cap - 1);
    *seen = w->seen[i] == h;
    if (!*seen) {
        w->seen[i] = h;
        w->seen_n++;
    }
    return TR_OK;
}

static tr_status record(js_ctx *x, js_uwalk *w, const json_t *node, bool cond) {
    if (w->n == w->cap) {
        uint32_t nc = w->cap ? w->cap * 2 : 16;
        ju_rec *r = tr_gcc_alloc(x->cc, (size_t)nc * sizeof *r);
        if (!r) return x->cc->err;
        if (w->n) memcpy(r, w->recs, (size_t)w->n * sizeof *r);
        w->recs = r;
        w->cap = nc;
    }
    ju_rec *r = &w->recs[w->n++];
    *r = (ju_rec){node, NULL, cond ? 0 : w->wild ? 1 : w->depth, cond, w->wild && !cond};
    if (r->wild) {
        if (!(r->path = tr_gcc_alloc(x->cc, sizeof *r->path))) return x->cc->err;
        r->path[0] = w->win;
    } else if (!cond && w->depth) {
        r->path = tr_gcc_alloc(x->cc, (size_t)w->depth * sizeof *r->path);
        if (!r->path) return x->cc->err;
        memcpy(r->path, w->stack, (size_t)w->depth * sizeof *r->path);
    }
    return TR_OK;
}

static tr_status walk(js_ctx *x, js_uwalk *w, const json_t *node, bool cond);

/* A child location: one more path element while unconditional; past
 * JU_MAX_DEPTH, the element alone (wild). */
static tr_status walk_at(js_ctx *x, js_uwalk *w, const json_t *s, const char *key, size_t len,
                         const json_t *excl, bool cond) {
    if (cond) return walk(x, w, s, true);
    if (w->wild || w->depth == JU_MAX_DEPTH) {
        uint64_t h = tr_fnv1a_word(TR_FNV1A_BASIS,
                                   key ? len : excl ? (uint64_t)(uintptr_t)excl : UINT64_MAX);
        if (key) h = tr_fnv1a(h, key, len);
        bool was_wild = w->wild;
        ju_el was = w->win;
        w->wild = true;
        w->win = (ju_el){key, len, excl, tr_splitmix64(h)};
        tr_status st = walk(x, w, s, false);
        w->wild = was_wild;
        w->win = was;
        return st;
    }
    uint64_t h = w->depth ? w->stack[w->depth - 1].h : TR_FNV1A_BASIS;
    h = tr_fnv1a_word(h, key ? len : excl ? (uint64_t)(uintptr_t)excl : UINT64_MAX);
    if (key) h = tr_fnv1a(h, key, len);
    w->stack[w->depth++] = (ju_el){key, len, excl, tr_splitmix64(h)};
    tr_status st = walk(x, w, s, false);
    w->depth--;
    return st;
}

/* Every member of an array (or the one object) of schemas, in place. */
static tr_status walk_list(js_ctx *x, js_uwalk *w, const json_t *v, bool cond) {
    if (json_is_object(v) || json_is_boolean(v)) return walk(x, w, v, cond);
    size_t i;
    const json_t *s;
    json_array_foreach(v, i, s) {
        tr_status st = walk(x, w, s, cond);
        if (st) return st;
    }
    return TR_OK;
}

/* How walk_members places each value of an object of schemas. */
enum { JU_BY_KEY, JU_ANY_KEY, JU_IN_PLACE };

/* Every value of an object of schemas: under its own key (properties),
 * under any key (patternProperties: a key the tracker cannot test
 * against the pattern), or in place (dependentSchemas, dependencies). */
static tr_status walk_members(js_ctx *x, js_uwalk *w, const json_t *v, int how, bool cond) {
    const json_t *s;
    void *it;
    if (!json_is_object(v)) return TR_OK;
    for (it = json_object_iter((json_t *)v); it; it = json_object_iter_next((json_t *)v, it)) {
        s = json_object_iter_value(it);
        if (!json_is_object(s) && !json_is_boolean(s)) continue; /* dependencies' lists */
        tr_status st =
            how == JU_BY_KEY ? walk_at(x, w, s, json_object_iter_key(it),
                                       json_object_iter_key_len(it), NULL, cond)
            : how == JU_ANY_KEY ? walk_at(x, w, s, NULL, 0, w->empty, cond)
                                : walk(x, w, s, cond);
        if (st) return st;
    }
    return TR_OK;
}

/* Every schema of v (one, or an array) at "an item" of this array. */
static tr_status walk_items(js_ctx *x, js_uwalk *w, const json_t *v, bool cond) {
    if (!json_is_array(v)) return walk_at(x, w, v, NULL, 0, NULL, cond);
    size_t i;
    const json_t *s;
    json_array_foreach(v, i, s) {
        tr_status st = walk_at(x, w, s, NULL, 0, NULL, cond);
        if (st) return st;
    }
    return TR_OK;
}

static tr_status walk_in_place(js_ctx *x, js_uwalk *w, const json_t *node, bool cond) {
    const json_t *v;
    tr_status st = TR_OK;
    if ((v = json_object_get(node, "$ref")) && json_is_string(v)) {
        const json_t *t = NULL;
        /* a $ref that does not resolve is the compile's to report where
         * it meets it (the same resolution: nothing below it is ever
         * generated): here the walk only does not go on through it */
        tr_diag saved = x->cc->diag ? *x->cc->diag : (tr_diag){0};
        st = tr_js_resolve_ref(x, node, json_string_value(v), &t);
        if (st == TR_ERR_NOT_FOUND) {
            x->cc->err = TR_OK;
            if (x->cc->diag) *x->cc->diag = saved;
            st = TR_OK;
            t = NULL;
        }
        if (st || (t && (st = walk(x, w, t, cond)))) return st;
    }
    if (json_object_get(node, "$dynamicRef") || json_object_get(node, "$recursiveRef"))
        w->broken = true;
    /* in place, at the same instance location: allOf, and the choices
     * (a uniqueItems met in a branch is applied there whichever branch
     * the instance takes: stricter, never looser); `not` and draft 3's
     * `disallow` flip its meaning, so below them nothing is approved */
    static const char *const same[] = {"allOf", "extends", "anyOf", "oneOf", "if", "then", "else"};
    static const char *const flipped[] = {"not", "disallow"};
    for (size_t i = 0; !st && i < sizeof same / sizeof *same; i++)
        if ((v = json_object_get(node, same[i]))) st = walk_list(x, w, v, cond);
    for (size_t i = 0; !st && i < sizeof flipped / sizeof *flipped; i++)
        if ((v = json_object_get(node, flipped[i]))) st = walk_list(x, w, v, true);
    if (!st && (v = json_object_get(node, "type")) && json_is_array(v))
        st = walk_list(x, w, v, cond); /* draft 3: schemas among the types */
    static const char *const conditional_members[] = {"dependentSchemas", "dependencies"};
    for (size_t i = 0; !st && i < 2; i++)
        if ((v = json_object_get(node, conditional_members[i])))
            st = walk_members(x, w, v, JU_IN_PLACE, cond);
    return st;
}

/* The locations below an object or array schema. Where the tracker
 * cannot tell which keys or indices a keyword governs (patternProperties,
 * additionalProperties beside patterns, unevaluatedProperties; tuple
 * items, contains, additional / unevaluated items) the path takes every
 * key or every item: a superset of the locations, so stricter. */
static tr_status walk_children(js_ctx *x, js_uwalk *w, const json_t *node, bool cond) {
    const json_t *v;
    tr_status st = TR_OK;
    const json_t *props = json_object_get(node, "properties");
    bool pats = json_object_get(node, "patternProperties") != NULL;
    if (props) st = walk_members(x, w, props, JU_BY_KEY, cond);
    if (!st && (v = json_object_get(node, "patternProperties")))
        st = walk_members(x, w, v, JU_ANY_KEY, cond);
    /* additionalProperties: every key but the listed ones (beside
     * patterns: more keys than it governs) */
    if (!st && (v = json_object_get(node, "additionalProperties")))
        st = walk_at(x, w, v, NULL, 0, !pats && json_is_object(props) ? props : w->empty, cond);
    if (!st && (v = json_object_get(node, "unevaluatedProperties")))
        st = walk_at(x, w, v, NULL, 0, w->empty, cond);
    static const char *const some_items[] = {"additionalItems", "unevaluatedItems",
                                             "prefixItems", "contains", "items"};
    for (size_t i = 0; !st && i < sizeof some_items / sizeof *some_items; i++)
        if ((v = json_object_get(node, some_items[i]))) st = walk_items(x, w, v, cond);
    /* keys are strings: a uniqueItems there never applies */
    if (!st && (v = json_object_get(node, "propertyNames"))) st = walk(x, w, v, true);
    return st;
}

static tr_status walk(js_ctx *x, js_uwalk *w, const json_t *node, bool cond) {
    if (w->broken || !json_is_object(node)) return TR_OK;
    if (++w->visits > JU_MAX_VISITS) {
        w->broken = true;
        return TR_OK;
    }
    bool seen = false;
    tr_status st = seen_before(x, w, state_hash(w, node, cond), &seen);
    if (st || seen) return st;
    if (json_is_true(json_object_get(node, "uniqueItems")) && (st = record(x, w, node, cond)))
        return st;
    if ((st = walk_in_place(x, w, node, cond))) return st;
    return walk_children(x, w, node, cond);
}

/* U's own items are strings only (one `items` schema, no tuple): the
 * tracker then keeps them as keys; otherwise as canonical values. */
static tr_status items_are_strings(js_ctx *x, const json_t *u, bool *ok) {
    *ok = false;
    const json_t *it = json_object_get(u, "items");
    if (!json_is_object(it) || json_object_get(u, "prefixItems")) return TR_OK;
    js_item i = {it, 0};
    js_conj c = {&i, 1};
    js_norm n;
    tr_status st = tr_js_flatten(x, &c, &n);
    if (st) return st;
    *ok = !n.never && n.types == JT_STR;
    return TR_OK;
}

static void put_u32(js_buf *b, uint32_t v) {
    char le[4] = {(char)(v & 0xff), (char)(v >> 8 & 0xff), (char)(v >> 16 & 0xff),
                  (char)(v >> 24)};
    tr_js_buf_add(b, le, 4);
}

/* The record of path p (json.h keys are UTF-8 already decoded). */
static void put_path(js_buf *b, const ju_rec *r, bool strings) {
    char n = (char)(r->n | (strings ? 0 : TR_GKEYS_ANY_ITEMS) | (r->wild ? TR_GKEYS_ANY_DEPTH : 0));
    tr_js_buf_add(b, &n, 1);
    for (uint32_t i = 0; i < r->n; i++) {
        const ju_el *e = &r->path[i];
        if (e->excl) { /* 'a', the count, then each listed key */
            tr_js_buf_add(b, "a", 1);
            put_u32(b, (uint32_t)json_object_size(e->excl));
            void *it;
            for (it = json_object_iter((json_t *)e->excl); it;
                 it = json_object_iter_next((json_t *)e->excl, it)) {
                put_u32(b, (uint32_t)json_object_iter_key_len(it));
                tr_js_buf_add(b, json_object_iter_key(it), json_object_iter_key_len(it));
            }
            continue;
        }
        if (!e->key) {
            tr_js_buf_add(b, "i", 1);
            continue;
        }
        tr_js_buf_add(b, "k", 1);
        put_u32(b, (uint32_t)r->path[i].len);
        tr_js_buf_add(b, r->path[i].key, r->path[i].len);
    }
}

tr_status tr_js_unique_items(js_ctx *x, const json_t *u, bool *ok) {
    *ok = false;
    if (!x->dfas || !x->dfas->allowed || !x->dfas->upaths) return TR_OK; /* text export */
    js_uwalk *w = x->uwalk;
    tr_status st;
    if (!w) {
        if (!(w = tr_gcc_alloc(x->cc, sizeof *w))) return x->cc->err;
        memset(w, 0, sizeof *w);
        if (!(w->empty = tr_js_synth_new(x))) return x->cc->err;
        x->uwalk = w;
        if ((st = walk(x, w, x->doc, false))) return st;
    }
    uint64_t done;
    if (tr_js_ptrmap_get(&w->approved, u, &done)) {
        *ok = done == 1;
        return TR_OK;
    }
    bool strings, met = false, fine = !w->broken;
    if ((st = items_are_strings(x, u, &strings))) return st;
    for (uint32_t i = 0; fine && i < w->n; i++)
        if (w->recs[i].node == u) met = true, fine = !w->recs[i].cond;
    *ok = fine && met;
    for (uint32_t i = 0; *ok && i < w->n; i++)
        if (w->recs[i].node == u) put_path(x->dfas->upaths, &w->recs[i], strings);
    if (!js_buf_ok(x->dfas->upaths)) return x->cc->err ? x->cc->err : TR_ERR_NOMEM;
    return tr_js_ptrmap_put(x->cc, &w->approved, u, *ok ? 1 : 2);
}
