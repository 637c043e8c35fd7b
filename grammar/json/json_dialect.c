/* json_dialect.c — what the document's `$schema` changes before any
 * keyword is read. Validators follow the declared draft, and two things
 * differ between drafts in ways that decide validity:
 *  - in drafts 3 to 7 an object with `$ref` is a reference and nothing
 *    else (its other keywords are ignored); from 2019-09 on they apply
 *    beside it. A draft-07 schema such as {"type": "string", "$ref":
 *    "#/defs/obj"} admits objects; read as 2019-09 it admits nothing.
 *  - a keyword newer than the declared draft is an unknown word there,
 *    an annotation: `if`/`then`/`else` before draft 7; `const`,
 *    `contains`, `propertyNames` before draft 6; `dependentRequired`,
 *    `dependentSchemas`, `unevaluated*`, `prefixItems`, `min/maxContains`
 *    before 2019-09.
 * A document that names no draft (or a later one) is read as 2020-12.
 *
 * Layering: grammar/json (json_internal.h), called once per compile
 * right after the index (json_ref.c) is built. Single-threaded per
 * compile.
 *
 * How: every indexed schema object loses the keywords its draft ignores
 * (with `$ref` in drafts 3..7: all but `$ref` and those that only hold
 * or name schemas for others: `definitions`, `$defs`, `$id`, `id`,
 * `$schema`), except any keyword some reference might lead into (a
 * `$ref` or a resource's pointer passes through a segment of that name):
 * the reference stays resolvable, at the price of that node keeping the
 * keyword (stricter: fewer texts, never more). The removed values stay
 * alive until the compile ends (tr_js_keep), so the index never holds a
 * freed node.
 */
#include <string.h>

#include "grammar/json/json_internal.h"

/* The declared draft: 3, 4, 6, 7, or 0 for 2019-09 and later (and for
 * a document that names none). */
static int draft_of(const json_t *doc) {
    const json_t *s = json_is_object(doc) ? json_object_get(doc, "$schema") : NULL;
    const char *v = json_is_string(s) ? json_string_value(s) : "";
    static const struct {
        const char *name;
        int draft;
    } d[] = {{"draft-03", 3}, {"draft-04", 4}, {"draft-06", 6}, {"draft-07", 7}};
    for (size_t i = 0; i < TR_ARRAY_LEN(d); i++)
        if (strstr(v, d[i].name)) return d[i].draft;
    return 0;
}

/* Whether draft (3..7) ignores keyword k. */
static bool newer_keyword(int draft, const char *k) {
    static const struct {
        const char *kw;
        int since; /* 8: 2019-09 */
    } kws[] = {{"const", 6},
               {"contains", 6},
               {"propertyNames", 6},
               {"if", 7},
               {"then", 7},
               {"else", 7},
               {"dependentRequired", 8},
               {"dependentSchemas", 8},
               {"unevaluatedProperties", 8},
               {"unevaluatedItems", 8},
               {"prefixItems", 8},
               {"minContains", 8},
               {"maxContains", 8}};
    for (size_t i = 0; i < TR_ARRAY_LEN(kws); i++)
        if (!strcmp(k, kws[i].kw)) return draft < kws[i].since;
    return false;
}

static bool holds_schemas(const char *k) {
    static const char *const keep[] = {"$ref", "definitions", "$defs", "$id", "id", "$schema"};
    for (size_t i = 0; i < TR_ARRAY_LEN(keep); i++)
        if (!strcmp(k, keep[i])) return true;
    return false;
}

/* Whether path (a pointer or a $ref) has a segment spelled k. */
static bool has_segment(const char *path, const char *k) {
    size_t n = strlen(k);
    for (const char *p = strchr(path, '/'); p; p = strchr(p + 1, '/'))
        if (!strncmp(p + 1, k, n) && (p[1 + n] == '/' || p[1 + n] == 0)) return true;
    return false;
}

/* Every $ref string and every resource's pointer: where references may
 * lead. */
typedef struct targets {
    const char **v;
    uint32_t n;
} targets;

static tr_status collect_targets(js_ctx *x, targets *t) {
    const js_index *ix = &x->idx;
    t->n = 0;
    t->v = tr_gcc_alloc(x->cc, ((size_t)ix->info_cap + ix->n_res + 1) * sizeof *t->v);
    if (!t->v) return x->cc->err;
    for (uint32_t i = 0; i < ix->info_cap; i++) {
        const json_t *node = ix->info[i].node;
        const json_t *ref = node && json_is_object(node) ? json_object_get(node, "$ref") : NULL;
        if (json_is_string(ref)) t->v[t->n++] = json_string_value(ref);
    }
    for (uint32_t i = 0; i < ix->n_res; i++) {
        const js_info *in = tr_js_info(x, ix->res[i].node);
        if (in) t->v[t->n++] = in->ptr;
    }
    return TR_OK;
}

static bool reachable_below(const targets *t, const char *k) {
    for (uint32_t i = 0; i < t->n; i++)
        if (has_segment(t->v[i], k)) return true;
    return false;
}

static tr_status strip(js_ctx *x, const targets *t, int draft, json_t *node) {
    bool ref = json_is_string(json_object_get(node, "$ref"));
    const char *k;
    json_t *v;
    void *tmp;
    json_object_foreach_safe(node, tmp, k, v) {
        bool ignored = ref ? !holds_schemas(k) : newer_keyword(draft, k);
        if (!ignored || reachable_below(t, k)) continue;
        tr_status st = tr_js_keep(x, json_incref(v));
        if (st) return st;
        json_object_del(node, k);
    }
    return TR_OK;
}

tr_status tr_js_dialect_apply(js_ctx *x) {
    int draft = draft_of(x->doc);
    if (!draft) return TR_OK;
    const js_index *ix = &x->idx;
    targets t;
    tr_status st = collect_targets(x, &t);
    for (uint32_t i = 0; !st && i < ix->info_cap; i++) {
        json_t *node = (json_t *)ix->info[i].node;
        if (node && json_is_object(node)) st = strip(x, &t, draft, node);
    }
    return st ? st : tr_gcc_poll_time(x->cc);
}
