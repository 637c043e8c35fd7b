/* json_ref.c — where every schema sits: JSON pointers, base URIs, $id /
 * $anchor resources, and $ref resolution.
 *
 * Layering: grammar/json (json_internal.h), called by the
 * JSON Schema driver once per compile (the index) and by the
 * generators for every $ref. Single-threaded per compile.
 *
 * The index walks the document along the keywords whose values are
 * schemas (properties, items, allOf, $defs, ...), recording for each
 * schema object its JSON pointer (for messages) and its base URI
 * (RFC 3986 resolution of every enclosing $id against the document's;
 * a document without $id gets trellis://schema/root.json). Resources
 * (`$id`; `id` instead when $schema says draft-04 or older; neither
 * beside `$ref` up to draft 7, as validators read them) and anchors
 * ($anchor, $dynamicAnchor, plain-name $id fragments) map an absolute
 * URI to a node. A $ref is resolved against its node's base, then looked
 * up as a resource, and its fragment read as a JSON pointer (percent-
 * decoded, ~1 and ~0 unescaped) or an anchor name. Nothing outside the
 * document is ever fetched: such refs are TR_ERR_NOT_FOUND.
 */
#include <stdio.h>
#include <string.h>

#include "grammar/json/json_internal.h"

#define JS_DEFAULT_BASE "trellis://schema/root.json"
#define JS_MAX_WALK_DEPTH 1000u

/* ---- URIs (RFC 3986, section 5.2) ---- */

typedef struct uri {
    const char *scheme, *auth, *path, *query, *frag; /* NULL when absent */
    size_t ls, la, lp, lq, lf;
} uri;

static void uri_parse(const char *s, uri *u) {
    memset(u, 0, sizeof *u);
    size_t n = strlen(s), i = 0;
    /* scheme: ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":" */
    size_t j = 0;
    if (n && ((s[0] | 32) >= 'a' && (s[0] | 32) <= 'z')) {
        j = 1;
        while (j < n && (((s[j] | 32) >= 'a' && (s[j] | 32) <= 'z') ||
                         (s[j] >= '0' && s[j] <= '9') || strchr("+-.", s[j])))
            j++;
        if (j < n && s[j] == ':') {
            u->scheme = s;
            u->ls = j;
            i = j + 1;
        }
    }
    if (i + 1 < n + 1 && s[i] == '/' && s[i + 1] == '/') {
        i += 2;
        size_t a = i;
        while (i < n && !strchr("/?#", s[i])) i++;
        u->auth = s + a;
        u->la = i - a;
    }
    size_t p = i;
    while (i < n && s[i] != '?' && s[i] != '#') i++;
    u->path = s + p;
    u->lp = i - p;
    if (i < n && s[i] == '?') {
        size_t q = ++i;
        while (i < n && s[i] != '#') i++;
        u->query = s + q;
        u->lq = i - q;
    }
    if (i < n && s[i] == '#') {
        u->frag = s + i + 1;
        u->lf = n - i - 1;
    }
}

/* RFC 3986 5.2.4, into b. */
static void remove_dots(js_buf *b, const char *p, size_t n) {
    size_t start = b->n;
    size_t i = 0;
    while (i < n) {
        if (n - i >= 3 && !memcmp(p + i, "../", 3)) i += 3;
        else if (n - i >= 2 && !memcmp(p + i, "./", 2)) i += 2;
        else if (n - i >= 3 && !memcmp(p + i, "/./", 3)) i += 2;
        else if (n - i == 2 && !memcmp(p + i, "/.", 2)) {
            tr_js_buf_putc(b, '/');
            i += 2;
        } else if ((n - i >= 4 && !memcmp(p + i, "/../", 4)) ||
                   (n - i == 3 && !memcmp(p + i, "/..", 3))) {
            i += 3;
            /* drop the last segment written */
            while (b->n > start && b->p[b->n - 1] != '/') b->n--;
            if (b->n > start) b->n--;
            if (i >= n) tr_js_buf_putc(b, '/');
            else if (p[i] != '/') tr_js_buf_putc(b, '/');
        } else if ((n - i == 1 && p[i] == '.') || (n - i == 2 && !memcmp(p + i, "..", 2)))
            i = n;
        else {
            size_t j = i + (p[i] == '/');
            while (j < n && p[j] != '/') j++;
            tr_js_buf_add(b, p + i, j - i);
            i = j;
        }
    }
}

static char *uri_resolve(gcc *cc, const char *base, const char *ref) {
    uri B, R;
    uri_parse(base, &B);
    uri_parse(ref, &R);
    js_buf b;
    tr_js_buf_init(&b, cc);
    const char *scheme = R.scheme ? R.scheme : B.scheme;
    size_t ls = R.scheme ? R.ls : B.ls;
    if (scheme) {
        tr_js_buf_add(&b, scheme, ls);
        tr_js_buf_putc(&b, ':');
    }
    if (R.scheme || R.auth) {
        if (R.auth) {
            tr_js_buf_puts(&b, "//");
            tr_js_buf_add(&b, R.auth, R.la);
        }
        remove_dots(&b, R.path, R.lp);
        if (R.query) tr_js_buf_putc(&b, '?'), tr_js_buf_add(&b, R.query, R.lq);
    } else {
        if (B.auth) {
            tr_js_buf_puts(&b, "//");
            tr_js_buf_add(&b, B.auth, B.la);
        }
        if (R.lp == 0) {
            tr_js_buf_add(&b, B.path, B.lp);
            const char *q = R.query ? R.query : B.query;
            size_t lq = R.query ? R.lq : B.lq;
            if (q) tr_js_buf_putc(&b, '?'), tr_js_buf_add(&b, q, lq);
        } else {
            if (R.path[0] == '/')
                remove_dots(&b, R.path, R.lp);
            else {
                js_buf m;
                tr_js_buf_init(&m, cc);
                if (B.auth && B.lp == 0)
                    tr_js_buf_putc(&m, '/');
                else {
                    size_t k = B.lp;
                    while (k > 0 && B.path[k - 1] != '/') k--;
                    tr_js_buf_add(&m, B.path, k);
                }
                tr_js_buf_add(&m, R.path, R.lp);
                if (js_buf_ok(&m)) remove_dots(&b, m.p, m.n);
                tr_js_buf_free(&m);
            }
            if (R.query) tr_js_buf_putc(&b, '?'), tr_js_buf_add(&b, R.query, R.lq);
        }
    }
    if (R.frag) tr_js_buf_putc(&b, '#'), tr_js_buf_add(&b, R.frag, R.lf);
    char *s = tr_js_buf_dup(&b);
    tr_js_buf_free(&b);
    return s;
}

/* ---- the index ---- */

static uint64_t hptr(const void *p) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static tr_status info_put(js_ctx *x, const json_t *node, const char *ptr, const char *base) {
    js_index *ix = &x->idx;
    if ((uint64_t)(ix->info_n + 1) * 2 > ix->info_cap) {
        uint32_t nc = ix->info_cap ? ix->info_cap * 2 : 256;
        js_info *t = tr_gcc_alloc(x->cc, (size_t)nc * sizeof *t);
        if (!t) return x->cc->err;
        for (uint32_t i = 0; i < ix->info_cap; i++) {
            if (!ix->info[i].node) continue;
            uint32_t j = (uint32_t)hptr(ix->info[i].node) & (nc - 1);
            while (t[j].node) j = (j + 1) & (nc - 1);
            t[j] = ix->info[i];
        }
        ix->info = t;
        ix->info_cap = nc;
    }
    uint32_t j = (uint32_t)hptr(node) & (ix->info_cap - 1);
    while (ix->info[j].node && ix->info[j].node != node) j = (j + 1) & (ix->info_cap - 1);
    if (ix->info[j].node) return TR_OK; /* first position wins (shared true/false) */
    ix->info[j] = (js_info){node, ptr, base};
    ix->info_n++;
    return TR_OK;
}

const js_info *tr_js_info(const js_ctx *x, const json_t *node) {
    const js_index *ix = &x->idx;
    if (!ix->info_cap) return NULL;
    uint32_t j = (uint32_t)hptr(node) & (ix->info_cap - 1);
    while (ix->info[j].node) {
        if (ix->info[j].node == node) return &ix->info[j];
        j = (j + 1) & (ix->info_cap - 1);
    }
    return NULL;
}

const char *tr_js_ptr(const js_ctx *x, const json_t *node) {
    const js_info *i = tr_js_info(x, node);
    return i ? (i->ptr[0] ? i->ptr : "#") : "(generated)";
}

static tr_status res_add(js_ctx *x, const char *uri, const json_t *node) {
    js_index *ix = &x->idx;
    for (uint32_t i = 0; i < ix->n_res; i++)
        if (strcmp(ix->res[i].uri, uri) == 0) return TR_OK; /* first wins */
    if (ix->n_res == ix->cap_res) {
        uint32_t nc = ix->cap_res ? ix->cap_res * 2 : 16;
        if (nc > (1u << 20)) return tr_gcc_fail(x->cc, TR_ERR_LIMIT, 0, "too many $id / $anchor");
        js_resource *r = tr_gcc_alloc(x->cc, (size_t)nc * sizeof *r);
        if (!r) return x->cc->err;
        if (ix->n_res) memcpy(r, ix->res, ix->n_res * sizeof *r);
        ix->res = r;
        ix->cap_res = nc;
    }
    ix->res[ix->n_res++] = (js_resource){uri, node};
    return TR_OK;
}

static const json_t *res_find(const js_ctx *x, const char *uri) {
    for (uint32_t i = 0; i < x->idx.n_res; i++)
        if (strcmp(x->idx.res[i].uri, uri) == 0) return x->idx.res[i].node;
    return NULL;
}

static char *ptr_join(gcc *cc, const char *ptr, const char *key) {
    js_buf b;
    tr_js_buf_init(&b, cc);
    tr_js_buf_puts(&b, ptr);
    tr_js_buf_putc(&b, '/');
    for (const char *k = key; *k; k++) {
        if (*k == '~')
            tr_js_buf_puts(&b, "~0");
        else if (*k == '/')
            tr_js_buf_puts(&b, "~1");
        else
            tr_js_buf_putc(&b, *k);
    }
    char *s = tr_js_buf_dup(&b);
    tr_js_buf_free(&b);
    return s;
}

static char *ptr_index(gcc *cc, const char *ptr, size_t i) {
    char k[32];
    snprintf(k, sizeof k, "%zu", i);
    return ptr_join(cc, ptr, k);
}

static bool draft4_ids(const js_ctx *x) {
    const json_t *s = json_is_object(x->doc) ? json_object_get(x->doc, "$schema") : NULL;
    const char *v = json_is_string(s) ? json_string_value(s) : "";
    return strstr(v, "draft-04") || strstr(v, "draft-03") || strstr(v, "draft-02") ||
           strstr(v, "draft-01");
}

static bool draft6_or_7(const js_ctx *x) {
    const json_t *s = json_is_object(x->doc) ? json_object_get(x->doc, "$schema") : NULL;
    const char *v = json_is_string(s) ? json_string_value(s) : "";
    return strstr(v, "draft-06") || strstr(v, "draft-07");
}

/* The identifier of node as its draft reads it: `id` up to draft 4,
 * `$id` after; up to draft 7 an object with `$ref` is a reference and
 * nothing else, so its id is ignored (as validators do: Python's
 * `referencing` for drafts 4..7). */
static const json_t *id_of(const js_ctx *x, const json_t *node) {
    bool d4 = draft4_ids(x);
    if ((d4 || draft6_or_7(x)) && json_object_get(node, "$ref")) return NULL;
    return json_object_get(node, d4 ? "id" : "$id");
}

static const char *const kw_one[] = {
    "additionalProperties", "additionalItems", "items", "contains", "propertyNames",
    "not", "if", "then", "else", "unevaluatedItems", "unevaluatedProperties",
    "contentSchema"};
static const char *const kw_list[] = {"allOf", "anyOf", "oneOf", "prefixItems", "items"};
static const char *const kw_map[] = {"properties", "patternProperties", "$defs",
                                     "definitions", "dependentSchemas", "dependencies"};

static tr_status walk(js_ctx *x, const json_t *node, const char *ptr, const char *base,
                      uint32_t depth);

static tr_status walk_kid(js_ctx *x, const json_t *kid, const char *ptr, const char *base,
                          uint32_t depth) {
    if (!json_is_object(kid) && !json_is_boolean(kid)) return TR_OK;
    if (!ptr) return x->cc->err;
    return walk(x, kid, ptr, base, depth + 1);
}

static tr_status walk(js_ctx *x, const json_t *node, const char *ptr, const char *base,
                      uint32_t depth) {
    gcc *cc = x->cc;
    if (depth > JS_MAX_WALK_DEPTH)
        return tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "schema nested deeper than %u levels at %s",
                           JS_MAX_WALK_DEPTH, ptr);
    if (tr_js_info(x, node)) return TR_OK; /* already indexed */
    if (json_is_object(node)) {
        const json_t *id = id_of(x, node);
        if (json_is_string(id)) {
            char *abs = uri_resolve(cc, base, json_string_value(id));
            if (!abs) return cc->err;
            char *hash = strchr(abs, '#');
            if (hash && hash[1] && hash[1] != '/') {
                /* plain-name fragment: an anchor (its own copy of the URI:
                 * the table keeps the pointer, and abs is cut below) */
                size_t len = strlen(abs) + 1;
                char *anchor = tr_gcc_alloc(cc, len);
                if (!anchor) return cc->err;
                memcpy(anchor, abs, len);
                tr_status st = res_add(x, anchor, node);
                if (st) return st;
                *hash = 0;
                if (hash != abs && !(id && json_string_value(id)[0] == '#')) {
                    if ((st = res_add(x, abs, node))) return st;
                    base = abs;
                }
            } else {
                if (hash) *hash = 0;
                tr_status st = res_add(x, abs, node);
                if (st) return st;
                base = abs;
            }
        }
        static const char *const anchors[] = {"$anchor", "$dynamicAnchor"};
        for (size_t i = 0; i < TR_ARRAY_LEN(anchors); i++) {
            const json_t *a = json_object_get(node, anchors[i]);
            if (!json_is_string(a)) continue;
            js_buf b;
            tr_js_buf_init(&b, cc);
            tr_js_buf_printf(&b, "%s#%s", base, json_string_value(a));
            char *u = tr_js_buf_dup(&b);
            tr_js_buf_free(&b);
            tr_status st = u ? res_add(x, u, node) : cc->err;
            if (st) return st;
        }
    }
    tr_status st = info_put(x, node, ptr, base);
    if (st || !json_is_object(node)) return st;
    for (size_t i = 0; i < TR_ARRAY_LEN(kw_one); i++) {
        const json_t *k = json_object_get(node, kw_one[i]);
        if (k && (st = walk_kid(x, k, ptr_join(cc, ptr, kw_one[i]), base, depth))) return st;
    }
    for (size_t i = 0; i < TR_ARRAY_LEN(kw_list); i++) {
        const json_t *l = json_object_get(node, kw_list[i]);
        if (!json_is_array(l)) continue;
        char *lp = ptr_join(cc, ptr, kw_list[i]);
        if (!lp) return cc->err;
        for (size_t j = 0; j < json_array_size(l); j++)
            if ((st = walk_kid(x, json_array_get(l, j), ptr_index(cc, lp, j), base, depth)))
                return st;
    }
    for (size_t i = 0; i < TR_ARRAY_LEN(kw_map); i++) {
        const json_t *m = json_object_get(node, kw_map[i]);
        if (!json_is_object(m)) continue;
        char *mp = ptr_join(cc, ptr, kw_map[i]);
        if (!mp) return cc->err;
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)m, key, v) {
            if ((st = walk_kid(x, v, ptr_join(cc, mp, key), base, depth))) return st;
        }
    }
    return tr_gcc_poll_time(cc);
}

tr_status tr_js_index_build(js_ctx *x) {
    tr_status st = res_add(x, JS_DEFAULT_BASE, x->doc);
    if (st) return st;
    return walk(x, x->doc, "", JS_DEFAULT_BASE, 0);
}

/* ---- $ref ---- */

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if ((c | 32) >= 'a' && (c | 32) <= 'f') return (c | 32) - 'a' + 10;
    return -1;
}

static char *pct_decode(gcc *cc, const char *s) {
    size_t n = strlen(s);
    char *r = tr_gcc_alloc(cc, n + 1);
    if (!r) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%' && i + 2 < n + 1 && hexv(s[i + 1]) >= 0 && hexv(s[i + 2]) >= 0) {
            r[k++] = (char)(hexv(s[i + 1]) * 16 + hexv(s[i + 2]));
            i += 2;
        } else
            r[k++] = s[i];
    }
    r[k] = 0;
    return r;
}

/* Follows a JSON pointer ("/a/b~1c/0") from node; NULL if it leads nowhere. */
static const json_t *follow(gcc *cc, const json_t *node, const char *p) {
    while (node && *p == '/') {
        p++;
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char *tok = tr_gcc_alloc(cc, n + 1);
        if (!tok) return NULL;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (p[i] == '~' && i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1')) {
                tok[k++] = p[i + 1] == '0' ? '~' : '/';
                i++;
            } else
                tok[k++] = p[i];
        }
        tok[k] = 0;
        if (json_is_object(node))
            node = json_object_getn(node, tok, k);
        else if (json_is_array(node)) {
            if (k == 0 || (k > 1 && tok[0] == '0') || k > 9) return NULL;
            size_t idx = 0;
            for (size_t i = 0; i < k; i++) {
                if (tok[i] < '0' || tok[i] > '9') return NULL;
                idx = idx * 10 + (size_t)(tok[i] - '0');
            }
            node = json_array_get(node, idx);
        } else
            return NULL;
        p += n;
    }
    return *p ? NULL : node;
}

tr_status tr_js_resolve_ref(js_ctx *x, const json_t *node, const char *ref,
                            const json_t **target) {
    gcc *cc = x->cc;
    const js_info *in = tr_js_info(x, node);
    const char *base = in ? in->base : JS_DEFAULT_BASE;
    char *abs = uri_resolve(cc, base, ref);
    if (!abs) return cc->err;
    char *hash = strchr(abs, '#');
    const char *frag = "";
    if (hash) {
        *hash = 0;
        frag = hash + 1;
    }
    const json_t *res = res_find(x, abs);
    if (!res)
        return tr_js_fail(x, TR_ERR_NOT_FOUND, node,
                          "$ref \"%s\" points outside this schema (%s); references are "
                          "never fetched",
                          ref, abs);
    const json_t *t = NULL;
    char *dec = pct_decode(cc, frag);
    if (!dec) return cc->err;
    if (dec[0] == 0)
        t = res;
    else if (dec[0] == '/')
        t = follow(cc, res, dec);
    else {
        js_buf b;
        tr_js_buf_init(&b, cc);
        tr_js_buf_printf(&b, "%s#%s", abs, dec);
        if (js_buf_ok(&b)) t = res_find(x, b.p);
        tr_js_buf_free(&b);
    }
    if (!t || (!json_is_object(t) && !json_is_boolean(t)))
        return tr_js_fail(x, TR_ERR_NOT_FOUND, node, "$ref \"%s\" does not resolve to a schema",
                          ref);
    if (!tr_js_info(x, t)) {
        /* a pointer into a place the index did not walk (an unknown
         * keyword's value): index it now, under the resource's base */
        const js_info *ri = tr_js_info(x, res);
        js_buf b;
        tr_js_buf_init(&b, cc);
        tr_js_buf_printf(&b, "%s%s", ri ? ri->ptr : "", dec);
        char *p = tr_js_buf_dup(&b);
        tr_js_buf_free(&b);
        if (!p) return cc->err;
        tr_status st = walk(x, t, p, ri ? ri->base : JS_DEFAULT_BASE, 0);
        if (st) return st;
    }
    *target = t;
    return TR_OK;
}
