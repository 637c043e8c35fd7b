/* json_gx.c — constructors of grammar expressions (gx) and rules.
 *
 * Layering: grammar/json (json_internal.h), under the JSON
 * Schema generators and over the compile arena. Constructors allocate in
 * the arena and propagate NULL: a NULL kid yields a NULL result, so a
 * generator checks once after building a whole expression (the cc holds
 * the error). Expressions are immutable once built and may be shared.
 */
#include <string.h>

#include "grammar/json/json_internal.h"

static gx *gx_new(gcc *cc, gx_kind k) {
    gx *x = tr_gcc_alloc(cc, sizeof *x);
    if (!x) return NULL;
    x->kind = k;
    x->reg = x->rx_atom = x->rx_top_alt = -1;
    return x;
}

gx *tr_gx_never(gcc *cc) { return gx_new(cc, GX_NEVER); }
gx *tr_gx_empty(gcc *cc) { return gx_new(cc, GX_EMPTY); }

gx *tr_gx_rx(gcc *cc, const char *rx, size_t len) {
    if (len > UINT32_MAX / 2) {
        tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "regular expression too long");
        return NULL;
    }
    if (len == 0) return tr_gx_empty(cc);
    gx *x = gx_new(cc, GX_RX);
    if (!x) return NULL;
    char *t = tr_js_strndup(cc, rx, len);
    if (!t) return NULL;
    x->rx = t;
    x->rx_len = (uint32_t)len;
    x->nullable = 1;
    return x;
}

gx *tr_gx_rxz(gcc *cc, const char *rx) { return tr_gx_rx(cc, rx, strlen(rx)); }

gx *tr_gx_rx_ne(gcc *cc, const char *rx, size_t len) {
    gx *x = tr_gx_rx(cc, rx, len);
    if (x && x->kind == GX_RX) x->nullable = 0;
    return x;
}

gx *tr_gx_lit(gcc *cc, const char *s, size_t n) {
    if (n == 0) return tr_gx_empty(cc);
    js_buf b;
    tr_js_buf_init(&b, cc);
    tr_js_rx_escape(&b, s, n);
    gx *x = js_buf_ok(&b) ? tr_gx_rx_ne(cc, b.p, b.n) : NULL;
    tr_js_buf_free(&b);
    if (!x) return NULL;
    char *raw = tr_js_strndup(cc, s, n);
    if (!raw) return NULL;
    x->lit = 1;
    x->raw = raw;
    x->raw_len = (uint32_t)n;
    return x;
}

gx *tr_gx_litz(gcc *cc, const char *s) { return tr_gx_lit(cc, s, strlen(s)); }

gx *tr_gx_ref(gcc *cc, uint32_t rule) {
    gx *x = gx_new(cc, GX_REF);
    if (x) x->n = rule;
    return x;
}

gx *tr_gx_dfa(gcc *cc, uint32_t i, bool nullable) {
    gx *x = gx_new(cc, GX_DFA);
    if (!x) return NULL;
    x->n = i;
    x->nullable = nullable;
    return x;
}

static gx *gx_list_node(gcc *cc, gx_kind k, gx *const *kids, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (!kids[i]) return NULL;
    gx *x = gx_new(cc, k);
    if (!x) return NULL;
    if (n) {
        x->kids = tr_gcc_alloc(cc, (size_t)n * sizeof *x->kids);
        if (!x->kids) return NULL;
        memcpy(x->kids, kids, (size_t)n * sizeof *x->kids);
    }
    x->n = n;
    return x;
}

gx *tr_gx_seq(gcc *cc, gx *const *kids, uint32_t n) {
    if (n == 1) return kids[0];
    if (n == 0) return tr_gx_empty(cc);
    return gx_list_node(cc, GX_SEQ, kids, n);
}

gx *tr_gx_alt(gcc *cc, gx *const *kids, uint32_t n) {
    if (n == 1) return kids[0];
    if (n == 0) return tr_gx_never(cc);
    return gx_list_node(cc, GX_ALT, kids, n);
}

gx *tr_gx_seq2(gcc *cc, gx *a, gx *b) {
    gx *k[2] = {a, b};
    return tr_gx_seq(cc, k, 2);
}

gx *tr_gx_seq3(gcc *cc, gx *a, gx *b, gx *c) {
    gx *k[3] = {a, b, c};
    return tr_gx_seq(cc, k, 3);
}

gx *tr_gx_alt2(gcc *cc, gx *a, gx *b) {
    gx *k[2] = {a, b};
    return tr_gx_alt(cc, k, 2);
}

gx *tr_gx_rep(gcc *cc, gx *kid, uint32_t min, uint32_t max) {
    if (!kid) return NULL;
    if (max < min) return tr_gx_never(cc);
    if (min == 1 && max == 1) return kid;
    if (max == 0) return tr_gx_empty(cc);
    gx *x = gx_list_node(cc, GX_REP, &kid, 1);
    if (!x) return NULL;
    x->n = 0;
    x->min = min;
    x->max = max;
    return x;
}

gx *tr_gx_opt(gcc *cc, gx *kid) { return tr_gx_rep(cc, kid, 0, 1); }

tr_status tr_gx_list_push(gcc *cc, gx_list *l, gx *x) {
    if (!x) return cc->err ? cc->err : TR_ERR_NOMEM;
    if (l->n == l->cap) {
        uint32_t nc = l->cap ? l->cap * 2 : 8;
        if (nc > (1u << 28))
            return tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "grammar expression too large");
        gx **v = tr_gcc_alloc(cc, (size_t)nc * sizeof *v);
        if (!v) return cc->err;
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = nc;
    }
    l->v[l->n++] = x;
    return TR_OK;
}

/* Rule names: [A-Za-z][A-Za-z0-9-]*, from a hint such as a JSON pointer
 * ("/$defs/node" -> "defs-node"), at most 48 characters, made unique
 * with a numeric suffix. A hash set of the names keeps adding O(1). */
static uint64_t name_hash(const char *s) { return tr_fnv1a(GHASH_SEED, s, strlen(s)); }

/* The rule named s, or UINT32_MAX. */
static uint32_t name_find(const gx_grammar *g, const char *s) {
    if (!g->ht_cap) return UINT32_MAX;
    for (uint32_t i = (uint32_t)name_hash(s) & (g->ht_cap - 1);; i = (i + 1) & (g->ht_cap - 1)) {
        uint32_t id = g->ht[i];
        if (id == UINT32_MAX || strcmp(g->rules[id].name, s) == 0) return id;
    }
}

static bool name_taken(const gx_grammar *g, const char *s) {
    return name_find(g, s) != UINT32_MAX;
}

static tr_status name_insert(gcc *cc, gx_grammar *g, uint32_t id) {
    if ((uint64_t)(g->n + 1) * 2 > g->ht_cap) {
        uint32_t nc = g->ht_cap ? g->ht_cap * 2 : 128;
        uint32_t *t = tr_gcc_alloc(cc, (size_t)nc * sizeof *t);
        if (!t) return cc->err;
        memset(t, 0xff, (size_t)nc * sizeof *t);
        for (uint32_t k = 0; k < g->n; k++) {
            uint32_t i = (uint32_t)name_hash(g->rules[k].name) & (nc - 1);
            while (t[i] != UINT32_MAX) i = (i + 1) & (nc - 1);
            t[i] = k;
        }
        g->ht = t;
        g->ht_cap = nc;
    }
    uint32_t i = (uint32_t)name_hash(g->rules[id].name) & (g->ht_cap - 1);
    while (g->ht[i] != UINT32_MAX) i = (i + 1) & (g->ht_cap - 1);
    g->ht[i] = id;
    return TR_OK;
}

static void sanitize(const char *hint, char *out, size_t cap) {
    size_t n = 0;
    bool dash = false;
    for (const char *p = hint ? hint : ""; *p && n + 1 < cap; p++) {
        unsigned char c = (unsigned char)*p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                  (c >= '0' && c <= '9');
        if (ok) {
            if (n == 0 && c >= '0' && c <= '9') out[n++] = 'r';
            if (n + 1 < cap) out[n++] = (char)c;
            dash = false;
        } else if (n > 0 && !dash) {
            out[n++] = '-';
            dash = true;
        }
    }
    while (n > 0 && out[n - 1] == '-') n--;
    if (n == 0) out[n++] = 'r';
    out[n] = 0;
}

tr_status tr_gx_rule_add(gcc *cc, gx_grammar *g, const char *hint, uint32_t *id) {
    if (g->n == g->cap) {
        uint32_t nc = g->cap ? g->cap * 2 : 64;
        if (nc > (1u << 20))
            return tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "too many grammar rules (over %u)",
                               1u << 19);
        gx_rule *r = tr_gcc_alloc(cc, (size_t)nc * sizeof *r);
        if (!r) return cc->err;
        if (g->n) memcpy(r, g->rules, g->n * sizeof *r);
        g->rules = r;
        g->cap = nc;
    }
    char base[49], name[64];
    if (g->n == 0)
        memcpy(base, "root", 5);
    else
        sanitize(hint, base, sizeof base);
    memcpy(name, base, strlen(base) + 1);
    /* the first free base-K, K >= 2: names are never removed, so the
     * search goes on where the last one for this base stopped (a schema
     * with 100,000 rules of one base otherwise spent minutes here) */
    uint32_t owner = name_find(g, base);
    if (owner != UINT32_MAX) {
        uint32_t k = g->rules[owner].next_suffix ? g->rules[owner].next_suffix : 2;
        do snprintf(name, sizeof name, "%s-%u", base, k++);
        while (name_taken(g, name));
        g->rules[owner].next_suffix = k;
    }
    tr_status ts = tr_gcc_poll_time(cc);
    if (ts) return ts;
    char *s = tr_js_strndup(cc, name, strlen(name));
    if (!s) return cc->err;
    g->rules[g->n].name = s;
    g->rules[g->n].body = NULL;
    g->rules[g->n].next_suffix = 0;
    *id = g->n++;
    return name_insert(cc, g, *id);
}
