/* json_gen.c — one grammar rule per conjunction of schemas: the memo,
 * the worklist, disjunctions, enum/const values, and the dispatch to
 * the per-type generators (json_gen_str.c, json_gen_arr.c,
 * json_gen_obj.c).
 *
 * Layering: grammar/json (json_internal.h), driven by
 * json_schema.c. Single-threaded per compile.
 *
 * A rule stands for "a JSON value satisfying every schema of this
 * conjunction, nested at this depth" (depth matters in pretty mode
 * only). The memo key is the conjunction as a sorted set, so a $ref
 * reached twice, or a recursive one, yields one rule: recursion in the
 * schema becomes recursion in the grammar. Bodies are built from a
 * worklist, never by C recursion on the schema's nesting.
 *
 * anyOf expands into alternatives, each a new conjunction: the members
 * so far (already flattened, the disjunction marked decided) plus the
 * branch; nested and sibling disjunctions multiply out this way. oneOf
 * is an anyOf whose branches are made pairwise disjoint (json_oneof.c:
 * proven by type, values, languages or a discriminator, else "not the
 * other branch"); when that fails it is refused (strict) or read as
 * anyOf (lenient, with a warning).
 */
#include <stdio.h>
#include <string.h>

#include "grammar/json/json_internal.h"

/* ---- memo ---- */

static int item_cmp(const void *a, const void *b) {
    const js_item *x = a, *y = b;
    if (x->node != y->node) return (uintptr_t)x->node < (uintptr_t)y->node ? -1 : 1;
    return x->done < y->done ? -1 : x->done > y->done;
}

static uint64_t conj_hash(const js_conj *c, uint32_t depth) {
    uint64_t h = GHASH_SEED ^ depth;
    for (uint32_t i = 0; i < c->n; i++) {
        h = tr_fnv1a_word(h, (uint64_t)(uintptr_t)c->v[i].node);
        h = tr_fnv1a_word(h, c->v[i].done);
    }
    return h ? h : 1;
}

static bool conj_eq(const js_conj *a, const js_conj *b) {
    return a->n == b->n && !memcmp(a->v, b->v, a->n * sizeof *a->v);
}

static tr_status memo_grow(js_ctx *x) {
    js_memo *m = &x->memo;
    uint32_t nc = m->cap ? m->cap * 2 : 256;
    uint64_t *h = tr_gcc_alloc(x->cc, (size_t)nc * sizeof *h);
    uint32_t *r = tr_gcc_alloc(x->cc, (size_t)nc * sizeof *r);
    js_conj *k = tr_gcc_alloc(x->cc, (size_t)nc * sizeof *k);
    uint32_t *d = tr_gcc_alloc(x->cc, (size_t)nc * sizeof *d);
    if (!h || !r || !k || !d) return x->cc->err;
    for (uint32_t i = 0; i < m->cap; i++) {
        if (!m->hash[i]) continue;
        uint32_t j = (uint32_t)m->hash[i] & (nc - 1);
        while (h[j]) j = (j + 1) & (nc - 1);
        h[j] = m->hash[i], r[j] = m->rule[i], k[j] = m->key[i], d[j] = m->depth[i];
    }
    m->hash = h, m->rule = r, m->key = k, m->depth = d, m->cap = nc;
    return TR_OK;
}

static tr_status push_job(js_ctx *x, uint32_t rule, const js_conj *c, uint32_t depth) {
    if (x->n_jobs == x->cap_jobs) {
        uint32_t nc = x->cap_jobs ? x->cap_jobs * 2 : 64;
        js_job *j = tr_gcc_alloc(x->cc, (size_t)nc * sizeof *j);
        if (!j) return x->cc->err;
        if (x->n_jobs) memcpy(j, x->jobs, x->n_jobs * sizeof *j);
        x->jobs = j;
        x->cap_jobs = nc;
    }
    x->jobs[x->n_jobs++] = (js_job){rule, *c, depth};
    return TR_OK;
}

/* A member that only points elsewhere ($ref, allOf) and annotates: once
 * flattened, its targets are listed and it adds nothing. */
bool tr_js_trivial(const json_t *node) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)node, k, v) {
        static const char *const skip[] = {
            "$ref", "allOf", "$defs", "definitions", "$schema", "$id", "id", "$comment",
            "title", "description", "examples", "example", "default", "$anchor",
            "deprecated", "readOnly", "writeOnly", "$dynamicAnchor", "$vocabulary"};
        size_t i = 0;
        while (i < TR_ARRAY_LEN(skip) && strcmp(skip[i], k)) i++;
        if (i == TR_ARRAY_LEN(skip)) return false;
    }
    return true;
}

tr_status tr_js_rule_for(js_ctx *x, const js_conj *c, uint32_t depth, const char *hint,
                         uint32_t *rule) {
    gcc *cc = x->cc;
    if (x->opt.whitespace != GRAMMAR_JSON_WS_PRETTY) depth = 0;
    /* canonical: flattened, pointer-only members dropped, sorted */
    js_norm n;
    tr_status st = tr_js_flatten(x, c, &n);
    if (st) return st;
    js_conj k = {tr_gcc_alloc(cc, (size_t)(n.n + 1) * sizeof *k.v), 0};
    if (!k.v) return cc->err;
    if (n.never) /* every conjunction that accepts nothing is one rule */
        k.v[k.n++] = (js_item){json_false(), JS_EXPANDED};
    else
        for (uint32_t i = 0; i < n.n; i++)
            if (!tr_js_trivial(n.nodes[i].node)) k.v[k.n++] = n.nodes[i];
    /* the job keeps the members in schema order (property order follows
     * it); the memo key is the same set sorted */
    js_conj job = {tr_gcc_alloc(cc, (size_t)(k.n + 1) * sizeof *job.v), k.n};
    if (!job.v) return cc->err;
    memcpy(job.v, k.v, k.n * sizeof *k.v);
    if (k.n > 1) qsort(k.v, k.n, sizeof *k.v, item_cmp);
    js_memo *m = &x->memo;
    if ((uint64_t)(m->n + 1) * 2 > m->cap && (st = memo_grow(x))) return st;
    uint64_t h = conj_hash(&k, depth);
    uint32_t j = (uint32_t)h & (m->cap - 1);
    while (m->hash[j]) {
        if (m->hash[j] == h && m->depth[j] == depth && conj_eq(&m->key[j], &k)) {
            *rule = m->rule[j];
            return TR_OK;
        }
        j = (j + 1) & (m->cap - 1);
    }
    if (!hint) hint = c->n ? tr_js_ptr(x, c->v[0].node) : "any";
    if ((st = tr_gx_rule_add(cc, &x->g, hint, rule))) return st;
    m->hash[j] = h, m->rule[j] = *rule, m->key[j] = k, m->depth[j] = depth;
    m->n++;
    return push_job(x, *rule, &job, depth);
}

tr_status tr_js_rule_for_node(js_ctx *x, const json_t *node, uint32_t depth, uint32_t *rule) {
    js_item it = {node, 0};
    js_conj c = {&it, 1};
    return tr_js_rule_for(x, &c, depth, NULL, rule);
}

/* ---- whitespace ---- */

static const char *indent(js_ctx *x, uint32_t level, const char *prefix) {
    size_t n = (size_t)level * x->opt.indent;
    js_buf b;
    tr_js_buf_init(&b, x->cc);
    tr_js_buf_puts(&b, prefix);
    tr_js_buf_puts(&b, "\\n");
    for (size_t i = 0; i < n; i++) tr_js_buf_putc(&b, ' ');
    char *s = tr_js_buf_dup(&b);
    tr_js_buf_free(&b);
    return s ? s : "";
}

void tr_js_ws(const js_ctx *cx, uint32_t depth, js_ws *ws) {
    js_ctx *x = (js_ctx *)cx;
    switch (x->opt.whitespace) {
    case GRAMMAR_JSON_WS_COMPACT:
        *ws = (js_ws){"", "", ",", "", ":"};
        return;
    case GRAMMAR_JSON_WS_PRETTY:
        *ws = (js_ws){"", indent(x, depth + 1, ""), indent(x, depth + 1, ","),
                      indent(x, depth, ""), ": "};
        return;
    default: {
        const char *w = x->ws_rx;
        js_buf b;
        tr_js_buf_init(&b, x->cc);
        tr_js_buf_printf(&b, "%s,%s", w, w);
        const char *sep = tr_js_buf_dup(&b);
        b.n = 0;
        tr_js_buf_printf(&b, "%s:%s", w, w);
        const char *col = tr_js_buf_dup(&b);
        tr_js_buf_free(&b);
        *ws = (js_ws){w, "", sep ? sep : ",", w, col ? col : ":"};
        return;
    }
    }
}

/* open PRE (FIRST items POST)? close; items NULL: only the empty form */
static gx *container(js_ctx *x, char open, gx *items, bool may_be_empty, uint32_t depth) {
    gcc *cc = x->cc;
    js_ws ws;
    tr_js_ws(x, depth, &ws);
    char o[2] = {open, 0}, c[2] = {open == '[' ? ']' : '}', 0};
    gx *body = items ? tr_gx_seq3(cc, tr_gx_rxz(cc, ws.first), items, tr_gx_rxz(cc, ws.post))
                     : tr_gx_never(cc);
    if (may_be_empty) body = tr_gx_opt(cc, body);
    return tr_gx_seq(cc, (gx *[]){tr_gx_lit(cc, o, 1), tr_gx_rxz(cc, ws.pre), body,
                                  tr_gx_lit(cc, c, 1)},
                     4);
}

gx *tr_js_container(js_ctx *x, char open, gx *items, bool may_be_empty, uint32_t depth) {
    return container(x, open, items, may_be_empty, depth);
}

/* ---- any JSON value ---- */

static gx *string_any(gcc *cc) {
    js_buf b;
    tr_js_buf_init(&b, cc);
    tr_js_str_any_regex(0, GRE_INF, &b);
    gx *r = js_buf_ok(&b) ? tr_gx_rx_ne(cc, b.p, b.n) : NULL;
    tr_js_buf_free(&b);
    return r;
}

static gx *number_any(js_ctx *x) {
    js_buf b;
    tr_js_buf_init(&b, x->cc);
    js_numfmt f = tr_js_numfmt(x, false);
    tr_js_num_any_regex(&f, false, &b);
    gx *r = js_buf_ok(&b) ? tr_gx_rx_ne(x->cc, b.p, b.n) : NULL;
    tr_js_buf_free(&b);
    return r;
}

tr_status tr_js_any_value(js_ctx *x, uint32_t depth, uint32_t *rule) {
    gcc *cc = x->cc;
    bool pretty = x->opt.whitespace == GRAMMAR_JSON_WS_PRETTY;
    if (!pretty) depth = 0;
    if (depth > x->opt.max_depth) depth = x->opt.max_depth;
    if (x->any_rule[depth]) {
        *rule = x->any_rule[depth];
        return TR_OK;
    }
    tr_status st = tr_gx_rule_add(cc, &x->g, "value", rule);
    if (st) return st;
    x->any_rule[depth] = *rule;
    gx *arr, *obj;
    if (pretty && depth >= x->opt.max_depth) {
        arr = tr_gx_litz(cc, "[]");
        obj = tr_gx_litz(cc, "{}");
    } else {
        uint32_t kid;
        if ((st = tr_js_any_value(x, depth + 1, &kid))) return st;
        js_ws ws;
        tr_js_ws(x, depth, &ws);
        gx *sep = tr_gx_rxz(cc, ws.sep);
        gx *items = tr_gx_seq2(cc, tr_gx_ref(cc, kid),
                               tr_gx_rep(cc, tr_gx_seq2(cc, sep, tr_gx_ref(cc, kid)), 0, GX_INF));
        arr = container(x, '[', items, true, depth);
        gx *member = tr_gx_seq3(cc, string_any(cc), tr_gx_rxz(cc, ws.colon), tr_gx_ref(cc, kid));
        gx *members = tr_gx_seq2(cc, member, tr_gx_rep(cc, tr_gx_seq2(cc, sep, member), 0, GX_INF));
        obj = container(x, '{', members, true, depth);
    }
    gx *alts[] = {obj, arr, string_any(cc), number_any(x), tr_gx_litz(cc, "true"),
                  tr_gx_litz(cc, "false"), tr_gx_litz(cc, "null")};
    gx *body = tr_gx_alt(cc, alts, 7);
    if (!body) return cc->err;
    x->g.rules[*rule].body = body;
    return TR_OK;
}

/* ---- exact values ---- */

/* A number value (jansson's, or an exact-number string) spelled every
 * way JSON writes it, plus Python's exponent form of a large or tiny
 * double. */
static gx *number_gx(gcc *cc, const json_t *v) {
    js_range r = {.has_lo = true, .has_hi = true};
    if (!tr_js_dec_from_json(cc, v, &r.lo)) return tr_gx_never(cc);
    r.hi = r.lo;
    js_buf b;
    tr_js_buf_init(&b, cc);
    tr_js_num_regex(cc, &r, false, &JS_NUMFMT_FULL, &b);
    if (json_is_real(v)) { /* Python writes large and tiny floats as 1e+16 */
        char *py = NULL;
        size_t n = 0, cap = 0;
        if (tr_grammar_json_dumps_py(v, &py, &n, &cap) && memchr(py, 'e', n)) {
            tr_js_buf_putc(&b, '|');
            tr_js_rx_escape(&b, py, n);
        }
        free(py);
    }
    gx *g = js_buf_ok(&b) && b.n ? tr_gx_rx_ne(cc, b.p, b.n) : tr_gx_never(cc);
    tr_js_buf_free(&b);
    return g;
}

gx *tr_js_value_gx(js_ctx *x, const json_t *v, uint32_t depth) {
    gcc *cc = x->cc;
    if (tr_js_exact_literal(v, NULL, NULL)) return number_gx(cc, v);
    switch (json_typeof(v)) {
    case JSON_NULL: return tr_gx_litz(cc, "null");
    case JSON_INTEGER:
    case JSON_REAL: return number_gx(cc, v);
    case JSON_TRUE: return tr_gx_litz(cc, "true");
    case JSON_FALSE: return tr_gx_litz(cc, "false");
    case JSON_STRING: {
        js_buf b;
        tr_js_buf_init(&b, cc);
        tr_status st = tr_js_key_regex(x, json_string_value(v), json_string_length(v), &b);
        gx *r = !st && js_buf_ok(&b) ? tr_gx_rx_ne(cc, b.p, b.n) : NULL;
        tr_js_buf_free(&b);
        return r;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        if (n == 0) return container(x, '[', NULL, true, depth);
        js_ws ws;
        tr_js_ws(x, depth, &ws);
        gx_list l = {0};
        for (size_t i = 0; i < n; i++) {
            if (i && tr_gx_list_push(cc, &l, tr_gx_rxz(cc, ws.sep))) return NULL;
            if (tr_gx_list_push(cc, &l, tr_js_value_gx(x, json_array_get(v, i), depth + 1)))
                return NULL;
        }
        return container(x, '[', tr_gx_seq(cc, l.v, l.n), false, depth);
    }
    case JSON_OBJECT: {
        if (json_object_size(v) == 0) return container(x, '{', NULL, true, depth);
        js_ws ws;
        tr_js_ws(x, depth, &ws);
        gx_list l = {0};
        const char *k;
        size_t kl;
        json_t *e;
        json_object_keylen_foreach((json_t *)v, k, kl, e) {
            if (l.n && tr_gx_list_push(cc, &l, tr_gx_rxz(cc, ws.sep))) return NULL;
            js_buf b;
            tr_js_buf_init(&b, cc);
            tr_status st = tr_js_key_regex(x, k, kl, &b);
            gx *key = !st && js_buf_ok(&b) ? tr_gx_rx_ne(cc, b.p, b.n) : NULL;
            tr_js_buf_free(&b);
            if (tr_gx_list_push(cc, &l, key) || tr_gx_list_push(cc, &l, tr_gx_rxz(cc, ws.colon)) ||
                tr_gx_list_push(cc, &l, tr_js_value_gx(x, e, depth + 1)))
                return NULL;
        }
        return container(x, '{', tr_gx_seq(cc, l.v, l.n), false, depth);
    }
    }
    return tr_gx_never(cc);
}

/* ---- rule bodies ---- */

static tr_status split(js_ctx *x, const js_job *j, const js_norm *n, gx **out) {
    gcc *cc = x->cc;
    const json_t *node = n->nodes[n->split].node;
    const json_t *list = json_object_get(node, n->split_kw);
    bool one = n->split_kw[0] == 'o';
    if (!json_is_array(list) || json_array_size(list) == 0)
        return tr_js_fail(x, TR_ERR_FORMAT, node, "%s must be a non-empty array of schemas",
                          n->split_kw);
    size_t k = json_array_size(list);
    js_item **extra = tr_gcc_alloc(cc, k * sizeof *extra);
    uint32_t *n_extra = tr_gcc_alloc(cc, k * sizeof *n_extra);
    if (!extra || !n_extra) return cc->err;
    if (one) {
        bool ok;
        const char *why;
        tr_status st = tr_js_oneof_plan(x, n, list, extra, n_extra, &ok, &why);
        if (st) return st;
        if (!ok) {
            memset(n_extra, 0, k * sizeof *n_extra);
            char msg[512];
            snprintf(msg, sizeof msg,
                     "its branches may overlap (no type, enum/const or discriminator property "
                     "tells them apart, and a branch has no complement here: %s), so \"exactly "
                     "one\" cannot be enforced; lenient mode reads it as anyOf",
                     why ? why : "none");
            tr_status st = tr_js_unsupported(x, node, "oneOf", msg);
            if (st) return st;
        }
    }
    /* each branch: every member so far (flattened, so marked expanded),
     * this disjunction decided, plus the branch */
    gx_list alts = {0};
    for (size_t b = 0; b < k; b++) {
        uint32_t ne = one ? n_extra[b] : 0;
        js_conj c = {tr_gcc_alloc(cc, (size_t)(n->n + 1 + ne) * sizeof *c.v), n->n + 1 + ne};
        if (!c.v) return cc->err;
        for (uint32_t i = 0; i < n->n; i++) {
            c.v[i] = n->nodes[i];
            c.v[i].done |= JS_EXPANDED;
        }
        c.v[n->split].done |= one ? JS_DONE_ONEOF : JS_DONE_ANYOF;
        c.v[n->n] = (js_item){json_array_get(list, b), 0};
        for (uint32_t e = 0; e < ne; e++) c.v[n->n + 1 + e] = extra[b][e];
        uint32_t r;
        tr_status st = tr_js_rule_for(x, &c, j->depth, tr_js_ptr(x, json_array_get(list, b)), &r);
        if (st || (st = tr_gx_list_push(cc, &alts, tr_gx_ref(cc, r)))) return st;
    }
    *out = tr_gx_alt(cc, alts.v, alts.n);
    return *out ? TR_OK : cc->err;
}

static tr_status values(js_ctx *x, const js_job *j, const js_norm *n, gx **out) {
    gcc *cc = x->cc;
    gx_list alts = {0};
    for (uint32_t i = 0; i < n->n_vals; i++) {
        const json_t *v = n->vals[i];
        if (!(tr_js_value_type(cc, v) & n->types)) continue;
        bool excluded = false;
        for (uint32_t k = 0; k < n->n_not_vals && !excluded; k++)
            excluded = tr_js_json_equal(cc, v, n->not_vals[k]);
        bool ok = !excluded;
        if (ok) {
            x->valid_skip_values = true; /* v is in every enum/const already */
            tr_status st = tr_js_validate(x, &j->conj, v, 0, &ok);
            x->valid_skip_values = false;
            if (st) return st;
        }
        if (ok && tr_gx_list_push(cc, &alts, tr_js_value_gx(x, v, j->depth))) return cc->err;
    }
    *out = tr_gx_alt(cc, alts.v, alts.n);
    return *out ? TR_OK : cc->err;
}

tr_status tr_js_build(js_ctx *x, const js_job *j) {
    gcc *cc = x->cc;
    js_norm n;
    tr_status st = tr_js_flatten(x, &j->conj, &n);
    if (st) return st;
    gx *body = NULL;
    if (n.never)
        body = tr_gx_never(cc);
    else if (n.has_values) /* each value checked against the whole
                              conjunction, disjunctions included */
        st = values(x, j, &n, &body);
    else if (n.split != UINT32_MAX)
        st = split(x, j, &n, &body);
    else {
        gx_list alts = {0};
        bool no_null = false, no_true = false, no_false = false;
        for (uint32_t k = 0; k < n.n_not_vals; k++) {
            no_null |= json_is_null(n.not_vals[k]);
            no_true |= json_is_true(n.not_vals[k]);
            no_false |= json_is_false(n.not_vals[k]);
        }
        if ((n.types & JT_NULL) && !no_null) st = tr_gx_list_push(cc, &alts, tr_gx_litz(cc, "null"));
        if (!st && (n.types & JT_BOOL) && !no_true)
            st = tr_gx_list_push(cc, &alts, tr_gx_litz(cc, "true"));
        if (!st && (n.types & JT_BOOL) && !no_false)
            st = tr_gx_list_push(cc, &alts, tr_gx_litz(cc, "false"));
        gx *t = NULL;
        if (!st && (n.types & (JT_INT | JT_FRAC)) && !(st = tr_js_gen_number(x, &n, &t)))
            st = tr_gx_list_push(cc, &alts, t);
        if (!st && (n.types & JT_STR) && !(st = tr_js_gen_string(x, &n, &t)))
            st = tr_gx_list_push(cc, &alts, t);
        if (!st && (n.types & JT_ARR) && !(st = tr_js_gen_array(x, &n, j->depth, &t)))
            st = tr_gx_list_push(cc, &alts, t);
        if (!st && (n.types & JT_OBJ) && !(st = tr_js_gen_object(x, &n, j->depth, &t)))
            st = tr_gx_list_push(cc, &alts, t);
        if (!st) body = tr_gx_alt(cc, alts.v, alts.n);
    }
    if (st) return st;
    if (!body) return cc->err ? cc->err : TR_ERR_NOMEM;
    x->g.rules[j->rule].body = body;
    return TR_OK;
}
