/* json_gen_str.c — string and number schemas to grammar expressions.
 *
 * Layering: grammar/json (json_internal.h), called by the
 * rule builder (json_gen.c) with a flattened conjunction. Single-
 * threaded per compile.
 *
 * Strings: minLength / maxLength (code points) alone give a counted
 * repetition of one encoded code point; up to JS_STR_RX_MAX_COUNT it
 * stays inside one regex terminal, beyond it is the grammar's own
 * counted repetition of a one-code-point terminal, so that the DFA
 * never holds thousands of copies (maxLength 32767 is common). Patterns
 * and formats are decoded-string ASTs; one of them with a length is
 * intersected structurally when only one part of it varies in length
 * (^[a-z]+$ with maxLength 8 is [a-z]{1,8}); everything else (several
 * patterns, pattern and format, `not` a pattern, excluded values) goes
 * through code-point automata (cpdfa.c) and back.
 *
 * Numbers: the bounds of every member (draft-04 boolean exclusive* too)
 * give one exact range (json_num.c). multipleOf: integers through a
 * remainder automaton intersected with the range; non-integers only for
 * steps 10^-q (at most q fraction digits); others are refused.
 */
#include <string.h>

#include "grammar/json/json_internal.h"

#define JS_AST_MAX_NODES 20000u
#define JS_LEN_AUTOMATON_MAX 2048u
/* the product of a pattern and a length, kept under the string
 * automaton's budget (cpdfa.c, 200,000) with room for what follows */
#define JS_STR_PRODUCT_STATES 50000u

typedef struct js_pat {
    const char *text; /* len bytes: a `pattern` may hold a NUL */
    size_t len;
    tr_status err;
    char msg[384];
    gre_node *ast; /* search language, anchor-free */
    cpdfa *dfa;
} js_pat;

/* ---- patterns ---- */

static js_pat *pat_slot(js_ctx *x, const char *text, size_t len) {
    for (uint32_t i = 0; i < x->n_pats; i++)
        if (x->pats[i].len == len && memcmp(x->pats[i].text, text, len) == 0) return &x->pats[i];
    if (x->n_pats == x->cap_pats) {
        uint32_t nc = x->cap_pats ? x->cap_pats * 2 : 16;
        js_pat *p = tr_gcc_alloc(x->cc, (size_t)nc * sizeof *p);
        if (!p) return NULL;
        if (x->n_pats) memcpy(p, x->pats, x->n_pats * sizeof *p);
        x->pats = p;
        x->cap_pats = nc;
    }
    js_pat *p = &x->pats[x->n_pats++];
    memset(p, 0, sizeof *p);
    p->text = text;
    p->len = len;
    return p;
}

/* Clears a recoverable error of the compile context (a pattern that
 * does not parse is a property of that pattern, reported by the caller
 * in its own words), keeping its message. */
static tr_status take_error(js_ctx *x, char *msg, size_t cap) {
    tr_status e = x->cc->err;
    const char *m = x->cc->diag ? x->cc->diag->message : tr_status_message(e);
    size_t n = strnlen(m, cap - 1);
    memcpy(msg, m, n);
    msg[n] = 0;
    x->cc->err = TR_OK;
    if (x->cc->diag) memset(x->cc->diag, 0, sizeof *x->cc->diag);
    return e;
}

static bool recoverable(tr_status st) {
    return st == TR_ERR_FORMAT || st == TR_ERR_UNSUPPORTED || st == TR_ERR_LIMIT;
}

/* The decoded AST of a pattern (cached); *ast NULL with TR_OK when the
 * pattern is ignored (lenient mode, it did not parse). */
tr_status tr_js_pattern_ast_n(js_ctx *x, const json_t *node, const char *text, size_t len,
                             gre_node **ast) {
    *ast = NULL;
    js_pat *p = pat_slot(x, text, len);
    if (!p) return x->cc->err;
    if (!p->ast && !p->err) {
        tr_status st = tr_js_pattern_parse(x->cc, text, len, &p->ast);
        if (st) {
            if (!recoverable(st)) return st;
            p->err = take_error(x, p->msg, sizeof p->msg);
        }
    }
    if (p->err) {
        tr_status st = tr_js_unsupported(x, node, "pattern", p->msg);
        return st;
    }
    *ast = p->ast;
    return TR_OK;
}

tr_status tr_js_pattern_ast(js_ctx *x, const json_t *node, const char *text, gre_node **ast) {
    return tr_js_pattern_ast_n(x, node, text, strlen(text), ast);
}

tr_status tr_js_pattern_cpdfa_n(js_ctx *x, const json_t *node, const char *text, size_t len,
                                cpdfa **out) {
    *out = NULL;
    gre_node *ast;
    tr_status st = tr_js_pattern_ast_n(x, node, text, len, &ast);
    if (st || !ast) return st;
    js_pat *p = pat_slot(x, text, len);
    if (!p) return x->cc->err;
    if (!p->dfa) {
        cpdfa *d = tr_gcc_alloc(x->cc, sizeof *d);
        if (!d) return x->cc->err;
        if ((st = tr_cpdfa_from_ast(x->cc, ast, d))) return st;
        p->dfa = d;
    }
    *out = p->dfa;
    return TR_OK;
}

tr_status tr_js_pattern_cpdfa(js_ctx *x, const json_t *node, const char *text, cpdfa **out) {
    return tr_js_pattern_cpdfa_n(x, node, text, strlen(text), out);
}

/* ---- keys and literal strings ---- */

tr_status tr_js_key_regex(js_ctx *x, const char *key, size_t len, js_buf *b) {
    bool plain = true;
    for (size_t i = 0; i < len && plain; i++) {
        unsigned char c = (unsigned char)key[i];
        plain = c >= 0x20 && c != '"' && c != '\\' && c != '/' && c < 0x80;
    }
    if (plain) {
        tr_js_buf_putc(b, '"');
        tr_js_rx_escape(b, key, len);
        tr_js_buf_putc(b, '"');
        return js_buf_ok(b) ? TR_OK : x->cc->err;
    }
    gre_node *ast = tr_js_ast_lit(x->cc, key, len);
    if (!ast) return x->cc->err;
    return tr_js_str_regex(x->cc, ast, b);
}

/* ---- lengths ---- */

/* Structural intersection with a length range: exact when at most one
 * part of the AST varies in length and that part repeats one code point;
 * *fits false otherwise (the automaton route takes over). *out NULL
 * with *fits true: the intersection is empty. */
gre_node *tr_js_with_length(gcc *cc, gre_node *a, uint64_t min, uint64_t max, bool *fits) {
    uint64_t lo, hi;
    tr_js_ast_len(a, &lo, &hi);
    *fits = true;
    if (lo >= min && hi <= max) return a;
    if (a->kind == GRE_ALT) {
        gre_node *r = NULL;
        for (uint32_t i = 0; i < a->n_kids; i++) {
            bool f;
            gre_node *k = tr_js_with_length(cc, a->kids[i], min, max, &f);
            if (!f) return (*fits = false), NULL;
            if (k) r = r ? tr_js_ast_alt(cc, r, k) : k;
        }
        return r;
    }
    gre_node **kids = &a;
    uint32_t n = 1;
    if (a->kind == GRE_CONCAT) kids = a->kids, n = a->n_kids;
    uint64_t fixed = 0;
    uint32_t var = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t l, h;
        tr_js_ast_len(kids[i], &l, &h);
        if (l == h) {
            fixed += l;
            continue;
        }
        uint64_t kl, kh;
        if (var != UINT32_MAX || kids[i]->kind != GRE_REPEAT) return (*fits = false), NULL;
        tr_js_ast_len(kids[i]->kids[0], &kl, &kh);
        if (kl != 1 || kh != 1) return (*fits = false), NULL;
        var = i;
    }
    if (var == UINT32_MAX) return lo >= min && hi <= max ? a : NULL;
    const gre_node *r = kids[var];
    uint64_t nmin = min > fixed ? min - fixed : 0, nmax = max >= GRE_INF ? GRE_INF
                                                       : max >= fixed ? max - fixed : 0;
    if (max < fixed) return NULL;
    nmin = TR_MAX(nmin, r->min);
    nmax = TR_MIN(nmax, (uint64_t)r->max);
    if (nmin > nmax) return NULL;
    gre_node *out = tr_js_ast_empty(cc);
    for (uint32_t i = 0; out && i < n; i++)
        out = tr_js_ast_cat(cc, out, i == var ? tr_js_ast_rep(cc, r->kids[0], (uint32_t)nmin,
                                                              (uint32_t)nmax)
                                              : kids[i]);
    return out;
}

/* ---- strings ---- */

typedef struct str_c {
    uint64_t min, max; /* code points; max GRE_INF: none */
    gre_node *ast[64]; /* patterns and formats that must hold */
    uint32_t n_ast;
    const json_t *node; /* for messages */
} str_c;

static tr_status uint_kw(js_ctx *x, const json_t *node, const char *kw, uint64_t *out,
                         bool *has) {
    const json_t *v = json_object_get(node, kw);
    *has = false;
    if (!v) return TR_OK;
    js_dec d;
    if (!tr_js_is_num(v) || !tr_js_dec_from_json(x->cc, v, &d) || !tr_js_dec_is_int(&d) ||
        (d.neg && d.n))
        return tr_js_fail(x, TR_ERR_FORMAT, node, "%s must be a non-negative integer", kw);
    *has = true;
    *out = tr_js_dec_int_digits(&d) > 12 ? GRE_INF - 1 : (uint64_t)json_number_value(v);
    if (*out >= GRE_INF) *out = GRE_INF - 1;
    return TR_OK;
}

static tr_status collect_str(js_ctx *x, const js_norm *n, str_c *c) {
    memset(c, 0, sizeof *c);
    c->max = GRE_INF;
    for (uint32_t i = 0; i < n->n; i++) {
        const json_t *node = n->nodes[i].node;
        uint64_t v;
        bool has;
        tr_status st = uint_kw(x, node, "minLength", &v, &has);
        if (st) return st;
        if (has) c->min = TR_MAX(c->min, v), c->node = node;
        if ((st = uint_kw(x, node, "maxLength", &v, &has))) return st;
        if (has) c->max = TR_MIN(c->max, v), c->node = node;
        const json_t *p = json_object_get(node, "pattern");
        if (p && !json_is_string(p))
            return tr_js_fail(x, TR_ERR_FORMAT, node, "pattern must be a string");
        gre_node *a = NULL;
        if (p && (st = tr_js_pattern_ast_n(x, node, json_string_value(p), json_string_length(p),
                                           &a)))
            return st;
        const json_t *f = json_object_get(node, "format");
        if (json_is_string(f)) {
            gre_node *fa;
            bool known;
            if ((st = tr_js_format_ast(x->cc, json_string_value(f), &fa, &known))) return st;
            if (known) {
                if (c->n_ast == TR_ARRAY_LEN(c->ast))
                    return tr_js_fail(x, TR_ERR_LIMIT, node, "too many patterns on one string");
                c->ast[c->n_ast++] = fa;
            } else if (tr_js_format_is_asserted(json_string_value(f)) &&
                       (st = tr_js_unsupported(x, node, "format",
                                               "this format is not enforced")))
                return st;
        }
        if (a) {
            if (c->n_ast == TR_ARRAY_LEN(c->ast))
                return tr_js_fail(x, TR_ERR_LIMIT, node, "too many patterns on one string");
            c->ast[c->n_ast++] = a;
        }
        if (!c->node && (p || f)) c->node = node;
    }
    return TR_OK;
}

static tr_status and_dfa(js_ctx *x, cpdfa *acc, bool *have, const cpdfa *d, cpd_op op) {
    if (!*have && op == CPD_AND) {
        *acc = *d;
        *have = true;
        return TR_OK;
    }
    if (!*have) { /* start from "any string" for a subtraction */
        tr_status st = tr_cpdfa_length(x->cc, 0, UINT32_MAX, acc);
        if (st) return st;
        *have = true;
    }
    cpdfa r;
    tr_status st = tr_cpdfa_product(x->cc, acc, d, op, &r);
    if (!st) *acc = r;
    return st;
}

/* A maxLength next to a pattern or format becomes a product automaton of
 * about (pattern states) x (max + 1) states: past the string automaton's
 * budget (or JS_LEN_AUTOMATON_MAX code points), *max is lowered to the
 * largest length that fits, never below min (fewer texts, never more:
 * as counted repetitions are capped at max_repeat). acc is minimized. */
static tr_status cap_length(js_ctx *x, cpdfa *acc, uint64_t min, uint64_t *max) {
    cpdfa m;
    tr_status st = tr_cpdfa_minimize(x->cc, acc, &m);
    if (st) return st;
    *acc = m;
    uint64_t fits = JS_STR_PRODUCT_STATES / (m.n ? m.n : 1);
    fits = TR_MIN(fits ? fits - 1 : 0, JS_LEN_AUTOMATON_MAX);
    if (*max > fits && fits >= min) *max = fits;
    return TR_OK;
}

/* The automaton of every constraint on a string, combined; *any when
 * there is none (then *out is untouched). */
static tr_status str_cpdfa(js_ctx *x, const js_norm *n, const str_c *c, cpdfa *out,
                           bool *any) {
    gcc *cc = x->cc;
    cpdfa acc = {0};
    bool have = false;
    tr_status st;
    for (uint32_t i = 0; i < c->n_ast; i++) {
        cpdfa d;
        if ((st = tr_cpdfa_from_ast(cc, c->ast[i], &d)) || (st = and_dfa(x, &acc, &have, &d, CPD_AND)))
            return st;
    }
    for (uint32_t i = 0; i < n->n_not_strs; i++) {
        js_item it = {n->not_strs[i], 0};
        js_conj c1 = {&it, 1};
        cpdfa d;
        bool all;
        if ((st = tr_js_string_lang(x, &c1, &d, &all))) return st;
        if (all) { /* every string is excluded */
            memset(&acc, 0, sizeof acc);
            have = true;
            continue;
        }
        if ((st = and_dfa(x, &acc, &have, &d, CPD_MINUS))) return st;
    }
    const char *vs[256];
    size_t vl[256];
    uint32_t nv = 0;
    for (uint32_t i = 0; i < n->n_not_vals; i++) {
        if (!json_is_string(n->not_vals[i])) continue;
        if (nv == TR_ARRAY_LEN(vs))
            return tr_js_fail(x, TR_ERR_LIMIT, n->nodes[0].node, "too many excluded strings");
        vs[nv] = json_string_value(n->not_vals[i]);
        vl[nv++] = json_string_length(n->not_vals[i]);
    }
    if (nv) {
        cpdfa d;
        if ((st = tr_cpdfa_from_strings(cc, vs, vl, nv, &d)) ||
            (st = and_dfa(x, &acc, &have, &d, CPD_MINUS)))
            return st;
    }
    if (c->min > 0 || c->max < GRE_INF) {
        uint64_t max = c->max;
        if (have && max < GRE_INF && (st = cap_length(x, &acc, c->min, &max))) return st;
        uint64_t top = max < GRE_INF ? max : c->min;
        if (top > JS_LEN_AUTOMATON_MAX)
            return tr_js_unsupported(x, c->node, c->max < GRE_INF ? "maxLength" : "minLength",
                                     "a length this large together with a pattern or format "
                                     "is not enforced");
        cpdfa d;
        if ((st = tr_cpdfa_length(cc, (uint32_t)c->min,
                                  max < GRE_INF ? (uint32_t)max : UINT32_MAX, &d)) ||
            (st = and_dfa(x, &acc, &have, &d, CPD_AND)))
            return st;
    }
    *any = !have;
    if (have) *out = acc;
    return TR_OK;
}

tr_status tr_js_ast_of_cpdfa_or_big(js_ctx *x, const cpdfa *d, const json_t *node,
                                    const char *kw, gre_node **out, bool *big, cpdfa *min) {
    if (big) *big = false;
    *out = NULL;
    if (tr_cpdfa_is_empty(d)) return TR_OK;
    tr_status st = tr_cpdfa_minimize(x->cc, d, min);
    if (!st) st = tr_cpdfa_to_ast(x->cc, min, JS_AST_MAX_NODES, out);
    if (st != TR_ERR_LIMIT) return st;
    char msg[384];
    take_error(x, msg, sizeof msg);
    *out = NULL;
    if (!big || !x->dfas || !x->dfas->allowed) return tr_js_unsupported(x, node, kw, msg);
    *big = true;
    return TR_OK;
}

tr_status tr_js_ast_of_cpdfa(js_ctx *x, const cpdfa *d, const json_t *node, const char *kw,
                             gre_node **out) {
    cpdfa m;
    return tr_js_ast_of_cpdfa_or_big(x, d, node, kw, out, NULL, &m);
}

/* Registers the byte DFA of m (JSON string bodies, or plain text) as the
 * compile's next automaton; *dfa its gx. */
static tr_status dfa_gx(js_ctx *x, const cpdfa *m, const json_t *node, const char *kw, bool plain,
                        gx **dfa) {
    gcc *cc = x->cc;
    js_dfas *t = x->dfas;
    gdfa *g = tr_gcc_alloc(cc, sizeof *g);
    tr_status st = g ? TR_OK : cc->err;
    if (!st && t->n == t->cap) {
        uint32_t nc = t->cap ? t->cap * 2 : 8;
        gdfa **v = tr_gcc_alloc(cc, (size_t)nc * sizeof *v);
        if (!v) return cc->err;
        if (t->n) memcpy(v, t->v, t->n * sizeof *v);
        t->v = v;
        t->cap = nc;
    }
    if (!st) st = tr_cpdfa_encode(cc, m, plain, g);
    if (st == TR_ERR_LIMIT) {
        char msg[384];
        take_error(x, msg, sizeof msg);
        return tr_js_unsupported(x, node, kw, msg);
    }
    if (st) return st;
    t->v[t->n] = g;
    *dfa = tr_gx_dfa(cc, t->n++, m->acc[m->start]);
    return *dfa ? TR_OK : cc->err;
}

tr_status tr_js_string_dfa_gx(js_ctx *x, const cpdfa *m, const json_t *node, const char *kw,
                              gx **out) {
    gx *d;
    tr_status st = dfa_gx(x, m, node, kw, false, &d);
    if (st) return st;
    gx *q = tr_gx_lit(x->cc, "\"", 1);
    *out = tr_gx_seq3(x->cc, q, d, q);
    return *out ? TR_OK : x->cc->err;
}

tr_status tr_js_text_dfa_gx(js_ctx *x, const cpdfa *m, const json_t *node, const char *kw,
                            gx **out) {
    return dfa_gx(x, m, node, kw, true, out);
}

/* The string language of the constraints through the automaton route:
 * an AST (*out; NULL: no string), or, when its regex would be too large
 * and the grammar may name automata, the string's gx (*gout). */
static tr_status str_by_automaton(js_ctx *x, const js_norm *n, const str_c *c, gre_node **out,
                                  gx **gout) {
    cpdfa d;
    bool any;
    *gout = NULL;
    tr_status st = str_cpdfa(x, n, c, &d, &any);
    if (st) return st;
    if (any) {
        *out = tr_js_rep_any(x->cc);
        return *out ? TR_OK : x->cc->err;
    }
    const json_t *node = c->node ? c->node : n->nodes[0].node;
    bool big;
    cpdfa m;
    if ((st = tr_js_ast_of_cpdfa_or_big(x, &d, node, "pattern", out, &big, &m)) || !big)
        return st;
    return tr_js_string_dfa_gx(x, &m, node, "pattern", gout);
}

tr_status tr_js_string_lang(js_ctx *x, const js_conj *conj, cpdfa *out, bool *any) {
    js_norm n;
    tr_status st = tr_js_flatten(x, conj, &n);
    if (st) return st;
    *any = false;
    memset(out, 0, sizeof *out);
    if (n.never || !(n.types & JT_STR)) return TR_OK; /* no string at all */
    if (n.split != UINT32_MAX)
        return tr_js_unsupported(x, n.nodes[n.split].node, n.split_kw,
                                 "anyOf/oneOf in a key schema (propertyNames) is not enforced");
    if (n.has_values) {
        const char *vs[1024];
        size_t vl[1024];
        uint32_t k = 0;
        for (uint32_t i = 0; i < n.n_vals && k < TR_ARRAY_LEN(vs); i++) {
            bool ok;
            if (!json_is_string(n.vals[i])) continue;
            if ((st = tr_js_validate(x, conj, n.vals[i], 0, &ok))) return st;
            if (!ok) continue;
            vs[k] = json_string_value(n.vals[i]);
            vl[k++] = json_string_length(n.vals[i]);
        }
        return tr_cpdfa_from_strings(x->cc, vs, vl, k, out);
    }
    str_c c;
    if ((st = collect_str(x, &n, &c))) return st;
    if (c.min > c.max) return TR_OK;
    return str_cpdfa(x, &n, &c, out, any);
}

static gx *ast_gx(js_ctx *x, const gre_node *a) { return tr_js_str_gx(x->cc, a); }

/* "\"" unit{min,max} "\"": the printer keeps short counts inside one
 * regex terminal and leaves long ones to the grammar's own counting. */
static gx *any_string(js_ctx *x, uint64_t min, uint64_t max) {
    gcc *cc = x->cc;
    js_buf b;
    tr_js_buf_init(&b, cc);
    if (max >= GRE_INF)
        tr_js_str_any_unit(&b);
    else
        tr_js_str_counted_unit(&b);
    gx *unit = js_buf_ok(&b) ? tr_gx_rx_ne(cc, b.p, b.n) : NULL;
    tr_js_buf_free(&b);
    if (min >= GRE_INF) min = GRE_INF - 1;
    return tr_gx_seq3(cc, tr_gx_lit(cc, "\"", 1),
                      tr_gx_rep(cc, unit, (uint32_t)min, max >= GRE_INF ? GX_INF : (uint32_t)max),
                      tr_gx_lit(cc, "\"", 1));
}

tr_status tr_js_gen_string(js_ctx *x, const js_norm *n, gx **out) {
    str_c c;
    tr_status st = collect_str(x, n, &c);
    if (st) return st;
    if (c.min > c.max) return (*out = tr_gx_never(x->cc)), TR_OK;
    bool excl = n->n_not_strs > 0;
    for (uint32_t i = 0; i < n->n_not_vals && !excl; i++) excl = json_is_string(n->not_vals[i]);
    if (c.n_ast == 0 && !excl) {
        *out = any_string(x, c.min, c.max);
        return *out ? TR_OK : x->cc->err;
    }
    gre_node *a = NULL;
    gx *direct = NULL;
    if (c.n_ast == 1 && !excl) {
        bool fits = true;
        a = c.min > 0 || c.max < GRE_INF ? tr_js_with_length(x->cc, c.ast[0], c.min, c.max, &fits)
                                         : c.ast[0];
        if (!fits && (st = str_by_automaton(x, n, &c, &a, &direct))) return st;
    } else if ((st = str_by_automaton(x, n, &c, &a, &direct)))
        return st;
    if (x->cc->err) return x->cc->err;
    if (direct) return (*out = direct), TR_OK;
    *out = a ? ast_gx(x, a) : tr_gx_never(x->cc);
    return *out ? TR_OK : x->cc->err;
}

/* ---- numbers ---- */

static tr_status bound(js_ctx *x, const json_t *node, const char *kw, js_dec *d, bool *has) {
    const json_t *v = json_object_get(node, kw);
    *has = false;
    if (!v || json_is_boolean(v)) return TR_OK;
    if (!tr_js_is_num(v) || !tr_js_dec_from_json(x->cc, v, d))
        return tr_js_fail(x, TR_ERR_FORMAT, node, "%s must be a finite number", kw);
    *has = true;
    return TR_OK;
}

/* Tightens r with a lower (lower == true) or upper bound. */
static void tighten(js_range *r, bool lower, const js_dec *d, bool excl) {
    bool *has = lower ? &r->has_lo : &r->has_hi;
    js_dec *cur = lower ? &r->lo : &r->hi;
    bool *cx = lower ? &r->lo_excl : &r->hi_excl;
    int c = *has ? tr_js_dec_cmp(d, cur) : (lower ? 1 : -1);
    if ((lower && c > 0) || (!lower && c < 0) || !*has) {
        *cur = *d;
        *cx = excl;
        *has = true;
    } else if (c == 0)
        *cx = *cx || excl;
}

tr_status tr_js_num_range(js_ctx *x, const js_norm *n, js_range *r) {
    memset(r, 0, sizeof *r);
    for (uint32_t i = 0; i < n->n; i++) {
        const json_t *node = n->nodes[i].node;
        js_dec d;
        bool has;
        tr_status st;
        for (int lower = 0; lower < 2; lower++) {
            const char *kw = lower ? "minimum" : "maximum";
            const char *ekw = lower ? "exclusiveMinimum" : "exclusiveMaximum";
            if ((st = bound(x, node, kw, &d, &has))) return st;
            if (has) tighten(r, lower, &d, json_is_true(json_object_get(node, ekw)));
            if ((st = bound(x, node, ekw, &d, &has))) return st;
            if (has) tighten(r, lower, &d, true);
        }
    }
    return TR_OK;
}

/* A remainder automaton of n states over decimal text (at most 12
 * edges a state), allocated, with its two first states: 0 the start (an
 * optional '-'), 1 after the '-'; each goes on a digit d to the
 * integer-digit state of remainder d mod k, 2 + d mod k. Edges from
 * state 2 on start at *e. */
static tr_status remainder_dfa_begin(gcc *cc, uint32_t n, uint64_t k, cpdfa *out, uint32_t *e) {
    memset(out, 0, sizeof *out);
    out->n = n;
    out->acc = tr_gcc_alloc(cc, n);
    out->off = tr_gcc_alloc(cc, (size_t)(n + 1) * sizeof *out->off);
    out->e = tr_gcc_alloc(cc, (size_t)n * 12 * sizeof *out->e);
    if (!out->acc || !out->off || !out->e) return cc->err;
    *e = 0;
    for (uint32_t s = 0; s < 2; s++) {
        out->off[s] = *e;
        if (s == 0) out->e[(*e)++] = (cpd_edge){'-', '-', 1};
        for (uint32_t d = 0; d < 10; d++)
            out->e[(*e)++] = (cpd_edge){'0' + d, '0' + d, 2 + (uint32_t)(d % k)};
    }
    return TR_OK;
}

/* The remainder automaton of "integer text divisible by k" (sign,
 * digits, optional .0+), over code points. */
static tr_status mod_dfa(gcc *cc, uint64_t k, bool non, cpdfa *out) {
    /* states: 0 start, 1 after '-', 2 + r (digits read, remainder r),
     * 2 + k + r (inside a .0+ fraction: needs a digit), 2 + 2k + r
     * (fraction digits read) */
    uint64_t n64 = 2 + 3 * k;
    if (n64 > 100000) return tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "multipleOf too large");
    uint32_t n = (uint32_t)n64;
    uint32_t e;
    tr_status st = remainder_dfa_begin(cc, n, k, out, &e);
    if (st) return st;
    for (uint32_t s = 2; s < n; s++) {
        out->off[s] = e;
        uint64_t r = (s - 2) % k;
        uint32_t part = (uint32_t)((s - 2) / k);
        if (part == 0) {
            out->acc[s] = (r == 0) != non;
            out->e[e++] = (cpd_edge){'.', '.', (uint32_t)(2 + k + r)};
            for (uint32_t d = 0; d < 10; d++)
                out->e[e++] = (cpd_edge){'0' + d, '0' + d, (uint32_t)(2 + (r * 10 + d) % k)};
        } else {
            out->acc[s] = part == 2 && (r == 0) != non;
            out->e[e++] = (cpd_edge){'0', '0', (uint32_t)(2 + 2 * k + r)};
        }
    }
    out->off[n] = e;
    return TR_OK;
}

#define JS_DEC_STEP_STATES 100000u /* frac_mod_dfa's states at most */

/* frac_mod_dfa's states for p / 10^q: (q + 2) p + 2, or UINT64_MAX past
 * the budget (p has up to 18 digits: the product must not wrap). */
static uint64_t dec_step_states(uint64_t p, uint32_t q) {
    return p > JS_DEC_STEP_STATES ? UINT64_MAX : 2 + (uint64_t)(q + 2) * p;
}

/* "decimal text that is a multiple of p / 10^q" (q >= 1): the value
 * times 10^q is an integer divisible by p, i.e. the digits up to the
 * q-th fraction digit read as one integer have remainder 0 mod p once
 * scaled to q fraction digits, and every later fraction digit is 0. Over
 * code points, sign and digits and one '.', no exponent (1.5e1 is 15:
 * those spellings are dropped, sound). States: 0 start, 1 after '-',
 * then per remainder r: 2 + r integer digits, and 2 + (j + 1) p + r after
 * the '.' and j fraction digits (j = 0..q; j = q loops on '0'). */
static tr_status frac_mod_dfa(gcc *cc, uint64_t p, uint32_t q, cpdfa *out) {
    /* the caller refuses larger steps with the keyword: the backstop */
    uint64_t n64 = dec_step_states(p, q);
    if (p == 0 || q == 0 || n64 > JS_DEC_STEP_STATES)
        return tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "multipleOf too large");
    uint32_t n = (uint32_t)n64;
    uint32_t e;
    tr_status st = remainder_dfa_begin(cc, n, p, out, &e);
    if (st) return st;
    uint64_t *pow = tr_gcc_alloc(cc, (size_t)(q + 1) * sizeof *pow); /* 10^i mod p */
    if (!pow) return cc->err;
    pow[0] = 1 % p;
    for (uint32_t i = 1; i <= q; i++) pow[i] = pow[i - 1] * 10 % p;
    for (uint32_t s = 2; s < n; s++) {
        out->off[s] = e;
        uint64_t r = (s - 2) % p;
        uint32_t part = (uint32_t)((s - 2) / p); /* 0: integer digits; j + 1: j fraction digits */
        if (part == 0) {
            out->acc[s] = r * pow[q] % p == 0;
            out->e[e++] = (cpd_edge){'.', '.', (uint32_t)(2 + p + r)};
            for (uint32_t d = 0; d < 10; d++)
                out->e[e++] = (cpd_edge){'0' + d, '0' + d, (uint32_t)(2 + (r * 10 + d) % p)};
            continue;
        }
        uint32_t j = part - 1;
        out->acc[s] = j > 0 && r * pow[q - j] % p == 0;
        if (j < q) {
            for (uint32_t d = 0; d < 10; d++)
                out->e[e++] = (cpd_edge){'0' + d, '0' + d,
                                         (uint32_t)(2 + (uint64_t)(j + 2) * p + (r * 10 + d) % p)};
        } else {
            out->e[e++] = (cpd_edge){'0', '0', s};
        }
    }
    out->off[n] = e;
    return TR_OK;
}

#define JS_MAX_DEC_STEPS 4u

/* Decimal steps p / 10^q (q >= 1, p > 1) of multipleOf on numbers. */
typedef struct dec_steps {
    uint64_t p[JS_MAX_DEC_STEPS];
    uint32_t q[JS_MAX_DEC_STEPS];
    uint32_t n;
} dec_steps;

/* multipleOf: *step > 0 when values must be integral multiples of it
 * (an integral step, or any step on integer values), 0 when there is no
 * such step; *frac_digits = q >= 0 when values need at most q fraction
 * digits (steps 10^-q on numbers); the other steps on numbers (0.25,
 * 1.5) go to *dec, refused past JS_MAX_DEC_STEPS. */
static tr_status collect_step(js_ctx *x, const js_norm *n, bool integer, uint64_t *step,
                              int32_t *frac_digits, dec_steps *dec) {
    *step = 0;
    *frac_digits = -1;
    dec->n = 0;
    for (uint32_t i = 0; i < n->n; i++) {
        const json_t *node = n->nodes[i].node;
        const json_t *v = json_object_get(node, "multipleOf");
        if (!v) v = json_object_get(node, "divisibleBy");
        if (!v) continue;
        js_dec d;
        if (!tr_js_is_num(v) || !tr_js_dec_from_json(x->cc, v, &d) || d.n == 0 || d.neg)
            return tr_js_fail(x, TR_ERR_FORMAT, node, "multipleOf must be a number > 0");
        /* d = p / 10^q with p an integer */
        int32_t q = (int32_t)d.n - d.exp;
        if (q < 0) q = 0;
        if (d.n > 18 || q > 18 || tr_js_dec_int_digits(&d) > 18)
            return tr_js_unsupported(x, node, "multipleOf", "this step is too large or too fine");
        uint64_t p = 0;
        for (uint32_t k = 0; k < d.n; k++) p = p * 10 + (uint64_t)(d.d[k] - '0');
        for (int32_t k = (int32_t)d.n; k < d.exp; k++) p *= 10;
        uint64_t ten = 1;
        for (int32_t k = 0; k < q; k++) ten *= 10;
        if (q > 0 && !integer) {
            if (p == 1) {
                *frac_digits = *frac_digits < 0 ? q : TR_MIN(*frac_digits, q);
                continue;
            }
            if (dec->n == JS_MAX_DEC_STEPS)
                return tr_js_unsupported(x, node, "multipleOf",
                                         "more than 4 non-integral steps on one number");
            if (dec_step_states(p, (uint32_t)q) > JS_DEC_STEP_STATES) {
                char why[96];
                snprintf(why, sizeof why, "the step %llu / 10^%d needs more than %u automaton states",
                         (unsigned long long)p, q, JS_DEC_STEP_STATES);
                return tr_js_unsupported(x, node, "multipleOf", why);
            }
            dec->p[dec->n] = p;
            dec->q[dec->n++] = (uint32_t)q;
            continue;
        }
        uint64_t k = q > 0 ? p / tr_gcd_u64(p, ten) : p; /* integer multiples of p/10^q */
        if (*step == 0) *step = 1;
        uint64_t g = tr_gcd_u64(*step, k);
        if (*step / g > UINT64_MAX / k)
            return tr_js_unsupported(x, node, "multipleOf", "combined steps overflow");
        *step = *step / g * k;
    }
    return TR_OK;
}

/* A number language while it is built: regex text (b) until a step
 * needs an automaton, then the automaton (acc), which becomes a regex
 * again at the end, or stays an automaton when its regex would be too
 * large. */
typedef struct num_lang {
    js_buf b;
    cpdfa acc;
    bool dfa;       /* acc holds the language; b is stale */
    bool some;      /* the language is not empty */
    const char *kw; /* the keyword whose step made the automaton */
} num_lang;

static tr_status lang_of_regex(gcc *cc, const char *rx, size_t len, cpdfa *out) {
    gre_node *ast;
    tr_status st = tr_regex_parse(cc, rx, len, &ast);
    return st ? st : tr_cpdfa_from_ast(cc, ast, out);
}

/* l's language op d (CPD_AND, CPD_MINUS), minimized; kw names the step. */
static tr_status lang_apply(js_ctx *x, num_lang *l, const cpdfa *d, cpd_op op, const char *kw) {
    gcc *cc = x->cc;
    cpdfa a, r;
    tr_status st = l->dfa ? (a = l->acc, TR_OK) : lang_of_regex(cc, l->b.p, l->b.n, &a);
    if (!st) st = tr_cpdfa_product(cc, &a, d, op, &r);
    if (!st && !tr_cpdfa_is_empty(&r)) st = tr_cpdfa_minimize(cc, &r, &l->acc);
    if (st) return st;
    if (tr_cpdfa_is_empty(&r)) l->acc = r;
    l->dfa = true;
    l->some = !tr_cpdfa_is_empty(&l->acc);
    l->kw = kw;
    return TR_OK;
}

/* Non-multiples of the integral steps of notMultipleOf (complements of
 * multipleOf): integers with a nonzero remainder or numbers with a
 * nonzero fraction digit, written without exponent (1.5e1 is 15: the
 * exponent forms are dropped, sound). */
static tr_status minus_multiples(js_ctx *x, const js_norm *n, num_lang *l) {
    gcc *cc = x->cc;
    tr_status st = TR_OK;
    for (uint32_t i = 0; !st && l->some && i < n->n; i++) {
        const json_t *node = n->nodes[i].node;
        const json_t *k = tr_js_is_synthetic(x, node) ? json_object_get(node, JS_KW_NOT_MULTIPLE)
                                                     : NULL;
        if (!k) continue;
        json_int_t kv = json_is_integer(k) ? json_integer_value(k) : 0;
        if (kv <= 0 && json_is_real(k) && json_real_value(k) == (double)(json_int_t)json_real_value(k))
            kv = (json_int_t)json_real_value(k);
        if (kv <= 0 || kv > 1000000)
            return tr_js_fail(x, TR_ERR_INTERNAL, node, "notMultipleOf needs an integral step");
        static const char frac[] = "-?(?:0|[1-9][0-9]*)\\.[0-9]*[1-9][0-9]*";
        cpdfa m, f, u;
        if ((st = mod_dfa(cc, (uint64_t)kv, true, &m)) ||
            (st = lang_of_regex(cc, frac, strlen(frac), &f)) ||
            (st = tr_cpdfa_product(cc, &m, &f, CPD_OR, &u)))
            return st;
        st = lang_apply(x, l, &u, CPD_AND, "not");
    }
    return st;
}

/* Numbers excluded by value (complements of enum/const): the language
 * loses exponent forms (whose values cannot be told apart by a regular
 * language: 1e0 = 10e-1 = 1) and then every plain spelling of each
 * excluded value. */
static tr_status minus_values(js_ctx *x, const js_norm *n, num_lang *l) {
    gcc *cc = x->cc;
    bool any = false;
    for (uint32_t i = 0; i < n->n_not_vals && !any; i++) any = tr_js_is_num(n->not_vals[i]);
    if (!any) return TR_OK;
    static const char plain[] = "-?(?:0|[1-9][0-9]*)(?:\\.[0-9]+)?";
    cpdfa p;
    tr_status st = lang_of_regex(cc, plain, strlen(plain), &p);
    if (!st) st = lang_apply(x, l, &p, CPD_AND, "not");
    for (uint32_t i = 0; !st && l->some && i < n->n_not_vals; i++) {
        if (!tr_js_is_num(n->not_vals[i])) continue;
        js_range r = {.has_lo = true, .has_hi = true};
        if (!tr_js_dec_from_json(cc, n->not_vals[i], &r.lo)) continue; /* not finite: never written */
        r.hi = r.lo;
        js_buf vb;
        tr_js_buf_init(&vb, cc);
        if (tr_js_num_regex(cc, &r, false, &JS_NUMFMT_FULL, &vb) && js_buf_ok(&vb)) {
            cpdfa v;
            st = lang_of_regex(cc, vb.p, vb.n, &v);
            if (!st) st = lang_apply(x, l, &v, CPD_MINUS, "not");
        }
        tr_js_buf_free(&vb);
    }
    return st;
}

/* Only the values the step allows: integral multiples of step, or (step
 * <= 1) at most q fraction digits. */
static tr_status apply_step(js_ctx *x, num_lang *l, uint64_t step, int32_t q) {
    gcc *cc = x->cc;
    cpdfa m;
    tr_status st;
    if (step <= 1) {
        js_buf f;
        tr_js_buf_init(&f, cc);
        tr_js_buf_printf(&f, "-?[0-9]+(?:\\.[0-9]{0,%d}0*)?", q);
        st = js_buf_ok(&f) ? lang_of_regex(cc, f.p, f.n, &m) : cc->err;
        tr_js_buf_free(&f);
    } else
        st = mod_dfa(cc, step, false, &m);
    return st ? st : lang_apply(x, l, &m, CPD_AND, "multipleOf");
}

/* The terminal of l: its regex, or its automaton when the regex would be
 * too large (a compile that may name automata; otherwise refused). */
static tr_status lang_gx(js_ctx *x, num_lang *l, const json_t *node, gx **out) {
    gcc *cc = x->cc;
    if (l->some && l->dfa) {
        gre_node *res;
        bool big;
        cpdfa m;
        tr_status st = tr_js_ast_of_cpdfa_or_big(x, &l->acc, node, l->kw, &res, &big, &m);
        if (st) return st;
        if (big) return tr_js_text_dfa_gx(x, &m, node, l->kw, out);
        l->b.n = 0;
        l->some = res != NULL;
        if (res) tr_js_ast_regex(res, &l->b);
    }
    *out = l->some && js_buf_ok(&l->b) ? tr_gx_rx_ne(cc, l->b.p, l->b.n) : tr_gx_never(cc);
    return *out ? TR_OK : cc->err;
}

tr_status tr_js_gen_number(js_ctx *x, const js_norm *n, gx **out) {
    gcc *cc = x->cc;
    js_range r;
    tr_status st = tr_js_num_range(x, n, &r);
    if (st) return st;
    bool integer = !(n->types & JT_FRAC);
    uint64_t step;
    int32_t q;
    dec_steps dec;
    if ((st = collect_step(x, n, integer, &step, &q, &dec))) return st;
    /* "integer" (not a number with an integral step) is spelled plain */
    js_numfmt f = tr_js_numfmt(x, integer);
    if (step) integer = true; /* integral steps: only integral values */
    const json_t *node = n->nodes ? n->nodes[0].node : NULL;
    num_lang l = {.kw = "type"};
    tr_js_buf_init(&l.b, cc);
    if (!r.has_lo && !r.has_hi && step <= 1 && q < 0 && !dec.n) {
        tr_js_num_any_regex(&f, integer, &l.b);
        l.some = true;
    } else
        l.some = tr_js_num_regex(cc, &r, integer, &f, &l.b);
    bool frac_only = !(n->types & JT_INT);
    if (frac_only && integer) l.some = false; /* integral steps, no integers */
    if (l.some && frac_only) {
        /* non-integral values only: a nonzero fraction digit, no exponent */
        static const char fx[] = "-?(?:0|[1-9][0-9]*)\\.[0-9]*[1-9][0-9]*";
        cpdfa m;
        st = lang_of_regex(cc, fx, strlen(fx), &m);
        if (!st) st = lang_apply(x, &l, &m, CPD_AND, "type");
    }
    if (!st && l.some && (step > 1 || (q >= 0 && !integer))) st = apply_step(x, &l, step, q);
    for (uint32_t i = 0; !st && l.some && i < dec.n; i++) {
        cpdfa m;
        st = frac_mod_dfa(cc, dec.p[i], dec.q[i], &m);
        if (!st) st = lang_apply(x, &l, &m, CPD_AND, "multipleOf");
    }
    if (!st && l.some) st = minus_values(x, n, &l);
    if (!st && l.some) st = minus_multiples(x, n, &l);
    if (!st) st = lang_gx(x, &l, node, out);
    tr_js_buf_free(&l.b);
    return st;
}
