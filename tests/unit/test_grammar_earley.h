/* test_grammar_earley.h — an independent reference for grammar texts:
 * a small parser of the EBNF format into plain BNF over code-point sets,
 * and an Earley recognizer over it. Used by test_grammar_ebnf.c as the
 * oracle the compiled grammars are checked against.
 *
 * Deliberately simple rather than fast: every EBNF construct becomes
 * fresh nonterminals with obvious productions (x* is Q -> | x Q, groups
 * are nonterminals, literals are sequences of one-code-point terminals),
 * and Earley (with Aycock and Horspool's fix for nullable nonterminals)
 * handles any context-free grammar, left recursion and ambiguity
 * included. It shares no code with grammar/ beyond base's UTF-8 decoder. The parser assumes well-formed input (the tests
 * only give it texts the compiler accepted) and treats newlines as
 * blanks, ending a rule where the next `name ::=` begins.
 *
 * Byte strings: the input is decoded into code points; a trailing
 * incomplete UTF-8 sequence is "viable" if some expected terminal holds
 * a code point whose encoding starts with those bytes; invalid UTF-8 is
 * never viable (every string of a grammar's language is valid UTF-8).
 */
#ifndef TR_TEST_GRAMMAR_EARLEY_H
#define TR_TEST_GRAMMAR_EARLEY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

#define RF_MAXCP 0x10FFFFu

typedef struct rf_set { /* sorted disjoint ranges, no surrogates */
    uint32_t (*r)[2];
    int n;
} rf_set;

typedef struct rf_prod {
    int lhs, off, n; /* rhs = syms[off .. off + n): >= 0 nonterminal,
                        < 0 terminal set -(i + 1) */
} rf_prod;

typedef struct rf_gram {
    rf_prod *p;
    int np, capp;
    int *syms;
    int ns, caps;
    rf_set *sets;
    int nsets, capsets;
    int nnt;
    /* rule names -> nonterminal */
    char **names;
    int *name_nt;
    int nnames, capnames;
    int start;
    bool *nullable; /* [nnt] */
    bool *prod_ok;  /* [np] every symbol productive */
    int *by_lhs_off, *by_lhs; /* productions (usable ones) per nonterminal */
    /* parser */
    const char *s;
    size_t len, pos;
} rf_gram;

static void *rf_grow(void *p, int *cap, int need, size_t es) {
    if (need <= *cap) return p;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    p = realloc(p, (size_t)nc * es);
    if (!p) abort();
    *cap = nc;
    return p;
}

static int rf_new_nt(rf_gram *g) { return g->nnt++; }

static void rf_add_prod(rf_gram *g, int lhs, const int *rhs, int n) {
    g->p = rf_grow(g->p, &g->capp, g->np + 1, sizeof *g->p);
    g->syms = rf_grow(g->syms, &g->caps, g->ns + n + 1, sizeof *g->syms);
    g->p[g->np].lhs = lhs;
    g->p[g->np].off = g->ns;
    g->p[g->np].n = n;
    if (n) memcpy(g->syms + g->ns, rhs, (size_t)n * sizeof *rhs);
    g->ns += n;
    g->np++;
}

/* ---- code-point sets ---- */

static void rf_set_add(rf_set *s, uint32_t lo, uint32_t hi) {
    s->r = realloc(s->r, (size_t)(s->n + 2) * sizeof *s->r);
    if (!s->r) abort();
    if (lo <= 0xDFFF && hi >= 0xD800) { /* cut out the surrogates */
        if (lo < 0xD800) s->r[s->n][0] = lo, s->r[s->n][1] = 0xD7FF, s->n++;
        if (hi > 0xDFFF) s->r[s->n][0] = 0xE000, s->r[s->n][1] = hi, s->n++;
        return;
    }
    s->r[s->n][0] = lo, s->r[s->n][1] = hi, s->n++;
}

static void rf_set_norm(rf_set *s) {
    for (int i = 1; i < s->n; i++) /* insertion sort: sets are small */
        for (int j = i; j > 0 && s->r[j][0] < s->r[j - 1][0]; j--) {
            uint32_t a = s->r[j][0], b = s->r[j][1];
            s->r[j][0] = s->r[j - 1][0], s->r[j][1] = s->r[j - 1][1];
            s->r[j - 1][0] = a, s->r[j - 1][1] = b;
        }
    int w = 0;
    for (int i = 0; i < s->n; i++) {
        if (w && s->r[i][0] <= s->r[w - 1][1] + 1) {
            if (s->r[i][1] > s->r[w - 1][1]) s->r[w - 1][1] = s->r[i][1];
        } else {
            s->r[w][0] = s->r[i][0], s->r[w][1] = s->r[i][1], w++;
        }
    }
    s->n = w;
}

static rf_set rf_set_complement(const rf_set *s) {
    rf_set c = {0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i][0] > next) rf_set_add(&c, next, s->r[i][0] - 1);
        next = s->r[i][1] + 1;
    }
    if (next <= RF_MAXCP) rf_set_add(&c, next, RF_MAXCP);
    rf_set_norm(&c);
    return c;
}

static bool rf_set_overlaps(const rf_set *s, uint32_t lo, uint32_t hi) {
    for (int i = 0; i < s->n; i++)
        if (s->r[i][0] <= hi && s->r[i][1] >= lo) return true;
    return false;
}

/* A terminal symbol for set s (taken). */
static int rf_term(rf_gram *g, rf_set s) {
    g->sets = rf_grow(g->sets, &g->capsets, g->nsets + 1, sizeof *g->sets);
    g->sets[g->nsets] = s;
    return -(++g->nsets);
}

static int rf_term_cp(rf_gram *g, uint32_t lo, uint32_t hi) {
    rf_set s = {0};
    rf_set_add(&s, lo, hi);
    return rf_term(g, s);
}

/* ---- the EBNF parser ---- */

static int rf_peek(const rf_gram *g) { return g->pos < g->len ? (uint8_t)g->s[g->pos] : -1; }

static void rf_blank(rf_gram *g) {
    for (;;) {
        int c = rf_peek(g);
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            g->pos++;
        } else if (c == '#') {
            while (rf_peek(g) != -1 && rf_peek(g) != '\n') g->pos++;
        } else {
            return;
        }
    }
}

static bool rf_namec(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static int rf_rule_nt(rf_gram *g, const char *name, size_t n) {
    for (int i = 0; i < g->nnames; i++)
        if (strlen(g->names[i]) == n && memcmp(g->names[i], name, n) == 0)
            return g->name_nt[i];
    g->names = rf_grow(g->names, &g->capnames, g->nnames + 1, sizeof *g->names);
    int cap = g->capnames;
    (void)cap;
    g->name_nt = realloc(g->name_nt, (size_t)g->capnames * sizeof *g->name_nt);
    g->names[g->nnames] = strndup(name, n);
    g->name_nt[g->nnames] = rf_new_nt(g);
    return g->name_nt[g->nnames++];
}

/* Is a `name ::=` at pos? */
static bool rf_at_rule(rf_gram *g) {
    size_t p = g->pos;
    while (p < g->len && rf_namec((uint8_t)g->s[p])) p++;
    if (p == g->pos) return false;
    while (p < g->len && (g->s[p] == ' ' || g->s[p] == '\t')) p++;
    return p + 2 < g->len && g->s[p] == ':' && g->s[p + 1] == ':' && g->s[p + 2] == '=';
}

static int rf_hex(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                        : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static uint32_t rf_utf8(rf_gram *g) {
    uint32_t cp;
    int n = tr_utf8_decode((const uint8_t *)g->s + g->pos, g->len - g->pos, &cp);
    if (n <= 0) abort();
    g->pos += (size_t)n;
    return cp;
}

/* One code point, escapes of the EBNF format (regex: also \d \w \s are
 * not generated by the tests, so not handled). */
static uint32_t rf_char(rf_gram *g) {
    if (rf_peek(g) != '\\') return rf_utf8(g);
    g->pos++;
    int e = rf_peek(g);
    g->pos++;
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (e == 'n') return '\n';
    if (e == 'r') return '\r';
    if (e == 't') return '\t';
    if (!digits) return (uint32_t)e;
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) v = v * 16 + (uint32_t)rf_hex((uint8_t)g->s[g->pos++]);
    return v;
}

static int rf_class(rf_gram *g) {
    g->pos++; /* [ */
    bool neg = rf_peek(g) == '^';
    if (neg) g->pos++;
    rf_set s = {0};
    while (rf_peek(g) != ']') {
        uint32_t a = rf_char(g), b = a;
        if (rf_peek(g) == '-' && g->pos + 1 < g->len && g->s[g->pos + 1] != ']') {
            g->pos++;
            b = rf_char(g);
        }
        rf_set_add(&s, a, b);
    }
    g->pos++;
    rf_set_norm(&s);
    if (!neg) return rf_term(g, s);
    rf_set c = rf_set_complement(&s);
    free(s.r);
    return rf_term(g, c);
}

/* x{mn,mx} (mx < 0: unbounded) around symbol x, as a new nonterminal. */
static int rf_repeat(rf_gram *g, int x, int mn, int mx) {
    int q = rf_new_nt(g);
    int tail; /* the optional part after mn copies */
    if (mx < 0) { /* T -> | x T */
        tail = rf_new_nt(g);
        int r[2] = {x, tail};
        rf_add_prod(g, tail, NULL, 0);
        rf_add_prod(g, tail, r, 2);
    } else { /* T_k -> | x T_{k-1}, T_0 -> */
        tail = rf_new_nt(g);
        rf_add_prod(g, tail, NULL, 0);
        for (int k = 1; k <= mx - mn; k++) {
            int t = rf_new_nt(g), r[2] = {x, tail};
            rf_add_prod(g, t, NULL, 0);
            rf_add_prod(g, t, r, 2);
            tail = t;
        }
    }
    int *rhs = malloc((size_t)(mn + 1) * sizeof *rhs);
    for (int i = 0; i < mn; i++) rhs[i] = x;
    rhs[mn] = tail;
    rf_add_prod(g, q, rhs, mn + 1);
    free(rhs);
    return q;
}

static int rf_quant(rf_gram *g, int x) {
    for (;;) {
        int c = rf_peek(g);
        if (c == '*') g->pos++, x = rf_repeat(g, x, 0, -1);
        else if (c == '+') g->pos++, x = rf_repeat(g, x, 1, -1);
        else if (c == '?') g->pos++, x = rf_repeat(g, x, 0, 1);
        else if (c == '{') {
            g->pos++;
            int mn = 0, mx;
            while (rf_peek(g) >= '0' && rf_peek(g) <= '9') mn = mn * 10 + (g->s[g->pos++] - '0');
            if (rf_peek(g) == '}') {
                mx = mn;
            } else {
                g->pos++; /* , */
                if (rf_peek(g) == '}') {
                    mx = -1;
                } else {
                    mx = 0;
                    while (rf_peek(g) >= '0' && rf_peek(g) <= '9') mx = mx * 10 + (g->s[g->pos++] - '0');
                }
            }
            g->pos++; /* } */
            x = rf_repeat(g, x, mn, mx);
        } else {
            return x;
        }
    }
}

static int rf_alts(rf_gram *g, bool regex, int close);

/* A regex terminal's item (regex syntax: bare characters). */
static int rf_regex_item(rf_gram *g) {
    int c = rf_peek(g);
    if (c == '(') {
        g->pos++;
        if (rf_peek(g) == '?') g->pos += 2; /* (?: */
        int x = rf_alts(g, true, ')');
        g->pos++;
        return x;
    }
    if (c == '[') return rf_class(g);
    if (c == '.') {
        g->pos++;
        rf_set s = {0};
        rf_set_add(&s, 0, '\n' - 1);
        rf_set_add(&s, '\n' + 1, RF_MAXCP);
        return rf_term(g, s);
    }
    uint32_t cp = rf_char(g);
    return rf_term_cp(g, cp, cp);
}

static int rf_item(rf_gram *g) {
    int c = rf_peek(g);
    if (c == '"') {
        g->pos++;
        int nt = rf_new_nt(g), n = 0, rhs[256];
        while (rf_peek(g) != '"') {
            uint32_t cp = rf_char(g);
            rhs[n++] = rf_term_cp(g, cp, cp);
        }
        g->pos++;
        rf_add_prod(g, nt, rhs, n);
        return nt;
    }
    if (c == '[') return rf_class(g);
    if (c == '.') {
        g->pos++;
        return rf_term_cp(g, 0, RF_MAXCP);
    }
    if (c == '(') {
        g->pos++;
        int x = rf_alts(g, false, ')');
        g->pos++;
        return x;
    }
    if (c == '/') {
        g->pos++;
        int x = rf_alts(g, true, '/');
        g->pos++;
        return x;
    }
    size_t st = g->pos;
    while (rf_namec(rf_peek(g))) g->pos++;
    return rf_rule_nt(g, g->s + st, g->pos - st);
}

/* Alternatives up to `close` (or, top level, the next rule / the end),
 * as a new nonterminal. */
static int rf_alts(rf_gram *g, bool regex, int close) {
    int nt = rf_new_nt(g);
    int rhs[512], n = 0;
    for (;;) {
        if (!regex) rf_blank(g);
        int c = rf_peek(g);
        bool end = c == -1 || c == close || (close == 0 && rf_at_rule(g));
        if (end || c == '|') {
            rf_add_prod(g, nt, rhs, n);
            n = 0;
            if (end) return nt;
            g->pos++;
            continue;
        }
        int x = regex ? rf_regex_item(g) : rf_item(g);
        rhs[n++] = rf_quant(g, x);
    }
}

static void rf_analyze(rf_gram *g);

/* Parses a grammar text the compiler accepted. */
static void rf_parse(rf_gram *g, const char *text, size_t len) {
    memset(g, 0, sizeof *g);
    g->s = text;
    g->len = len;
    for (;;) {
        rf_blank(g);
        if (rf_peek(g) == -1) break;
        size_t st = g->pos;
        while (rf_namec(rf_peek(g))) g->pos++;
        int lhs = rf_rule_nt(g, g->s + st, g->pos - st);
        while (rf_peek(g) != ':') g->pos++;
        g->pos += 3;
        int body = rf_alts(g, false, 0);
        rf_add_prod(g, lhs, &body, 1);
    }
    g->start = rf_rule_nt(g, "root", 4);
    rf_analyze(g);
}

static void rf_free(rf_gram *g) {
    for (int i = 0; i < g->nsets; i++) free(g->sets[i].r);
    for (int i = 0; i < g->nnames; i++) free(g->names[i]);
    free(g->p), free(g->syms), free(g->sets), free(g->names), free(g->name_nt);
    free(g->nullable), free(g->prod_ok), free(g->by_lhs_off), free(g->by_lhs);
    memset(g, 0, sizeof *g);
}

/* Productive nonterminals (productions using others are dropped, so that
 * every Earley item can complete) and nullable ones. */
static void rf_analyze(rf_gram *g) {
    bool *prod = calloc((size_t)g->nnt + 1, 1);
    g->nullable = calloc((size_t)g->nnt + 1, 1);
    g->prod_ok = calloc((size_t)g->np + 1, 1);
    for (bool ch = true; ch;) {
        ch = false;
        for (int i = 0; i < g->np; i++) {
            bool ok = true, nul = true;
            for (int k = 0; k < g->p[i].n && ok; k++) {
                int s = g->syms[g->p[i].off + k];
                if (s >= 0) ok = prod[s], nul = nul && g->nullable[s];
                else nul = false, ok = g->sets[-s - 1].n > 0;
            }
            if (ok && !prod[g->p[i].lhs]) prod[g->p[i].lhs] = ch = true;
            if (ok && nul && !g->nullable[g->p[i].lhs]) g->nullable[g->p[i].lhs] = ch = true;
        }
    }
    for (int i = 0; i < g->np; i++) {
        bool ok = prod[g->p[i].lhs];
        for (int k = 0; k < g->p[i].n && ok; k++) {
            int s = g->syms[g->p[i].off + k];
            ok = s >= 0 ? prod[s] : g->sets[-s - 1].n > 0;
        }
        g->prod_ok[i] = ok;
    }
    free(prod);
    g->by_lhs_off = calloc((size_t)g->nnt + 2, sizeof *g->by_lhs_off);
    g->by_lhs = calloc((size_t)g->np + 1, sizeof *g->by_lhs);
    for (int i = 0; i < g->np; i++)
        if (g->prod_ok[i]) g->by_lhs_off[g->p[i].lhs + 1]++;
    for (int x = 0; x < g->nnt; x++) g->by_lhs_off[x + 1] += g->by_lhs_off[x];
    int *fill = calloc((size_t)g->nnt + 1, sizeof *fill);
    for (int i = 0; i < g->np; i++)
        if (g->prod_ok[i]) g->by_lhs[g->by_lhs_off[g->p[i].lhs] + fill[g->p[i].lhs]++] = i;
    free(fill);
}

static bool rf_start_productive(const rf_gram *g) {
    for (int i = 0; i < g->np; i++)
        if (g->p[i].lhs == g->start && g->prod_ok[i]) return true;
    return false;
}

/* ---- Earley ---- */

typedef struct rf_item_t {
    int prod, dot, origin;
} rf_item_t;

typedef struct rf_eset {
    rf_item_t *it;
    int n, cap;
    uint64_t *h; /* hash of the items (key + 1), 0 empty */
    int hcap;
} rf_eset;

typedef struct rf_chart {
    const rf_gram *g;
    rf_eset *sets;
    int n, cap; /* sets[0..n) built; n - 1 is the last position */
} rf_chart;

static uint64_t rf_key(int prod, int dot, int origin) {
    return ((uint64_t)(uint32_t)prod << 40 ^ (uint64_t)(uint32_t)dot << 24 ^
            (uint64_t)(uint32_t)origin) + 1;
}

static void rf_eset_clear(rf_eset *s) {
    s->n = 0;
    if (s->h) memset(s->h, 0, (size_t)s->hcap * sizeof *s->h);
}

static void rf_eset_add(rf_eset *s, int prod, int dot, int origin) {
    if ((s->n + 1) * 2 > s->hcap) {
        int nc = s->hcap ? s->hcap * 2 : 64;
        free(s->h);
        s->h = calloc((size_t)nc, sizeof *s->h);
        s->hcap = nc;
        for (int i = 0; i < s->n; i++) {
            uint64_t k = rf_key(s->it[i].prod, s->it[i].dot, s->it[i].origin);
            uint64_t j = (k * 0x9E3779B97F4A7C15ULL >> 20) & (uint64_t)(nc - 1);
            while (s->h[j]) j = (j + 1) & (uint64_t)(nc - 1);
            s->h[j] = k;
        }
    }
    uint64_t k = rf_key(prod, dot, origin);
    uint64_t j = (k * 0x9E3779B97F4A7C15ULL >> 20) & (uint64_t)(s->hcap - 1);
    for (; s->h[j]; j = (j + 1) & (uint64_t)(s->hcap - 1))
        if (s->h[j] == k) return;
    s->h[j] = k;
    s->it = rf_grow(s->it, &s->cap, s->n + 1, sizeof *s->it);
    s->it[s->n].prod = prod, s->it[s->n].dot = dot, s->it[s->n].origin = origin;
    s->n++;
}

/* Predicts and completes set k to a fixpoint (items are processed in
 * order as they are added; a completion at origin k is covered by the
 * nullable rule at prediction). */
static void rf_close(rf_chart *c, int k) {
    const rf_gram *g = c->g;
    for (int i = 0; i < c->sets[k].n; i++) {
        rf_item_t it = c->sets[k].it[i];
        const rf_prod *p = &g->p[it.prod];
        if (it.dot < p->n) {
            int x = g->syms[p->off + it.dot];
            if (x < 0) continue;
            for (int q = g->by_lhs_off[x]; q < g->by_lhs_off[x + 1]; q++)
                rf_eset_add(&c->sets[k], g->by_lhs[q], 0, k);
            if (g->nullable[x]) rf_eset_add(&c->sets[k], it.prod, it.dot + 1, it.origin);
        } else {
            for (int j = 0; j < c->sets[it.origin].n; j++) {
                rf_item_t jt = c->sets[it.origin].it[j];
                const rf_prod *jp = &g->p[jt.prod];
                if (jt.dot < jp->n && g->syms[jp->off + jt.dot] == p->lhs)
                    rf_eset_add(&c->sets[k], jt.prod, jt.dot + 1, jt.origin);
            }
        }
    }
}

static void rf_chart_init(rf_chart *c, const rf_gram *g) {
    memset(c, 0, sizeof *c);
    c->g = g;
    c->sets = rf_grow(NULL, &c->cap, 1, sizeof *c->sets);
    memset(c->sets, 0, (size_t)c->cap * sizeof *c->sets);
    c->n = 1;
    for (int q = 0; q < g->np; q++)
        if (g->p[q].lhs == g->start && g->prod_ok[q]) rf_eset_add(&c->sets[0], q, 0, 0);
    rf_close(c, 0);
}

static void rf_chart_free(rf_chart *c) {
    for (int i = 0; i < c->cap; i++) free(c->sets[i].it), free(c->sets[i].h);
    free(c->sets);
}

static bool rf_term_has(const rf_gram *g, int x, uint32_t lo, uint32_t hi) {
    return x < 0 && rf_set_overlaps(&g->sets[-x - 1], lo, hi);
}

/* Scans code point cp from the last set into a new one; false if empty. */
static bool rf_push(rf_chart *c, uint32_t cp) {
    const rf_gram *g = c->g;
    int old = c->cap;
    c->sets = rf_grow(c->sets, &c->cap, c->n + 1, sizeof *c->sets);
    if (c->cap > old) memset(c->sets + old, 0, (size_t)(c->cap - old) * sizeof *c->sets);
    rf_eset *nx = &c->sets[c->n];
    rf_eset_clear(nx);
    const rf_eset *cur = &c->sets[c->n - 1];
    for (int i = 0; i < cur->n; i++) {
        rf_item_t it = cur->it[i];
        const rf_prod *p = &g->p[it.prod];
        if (it.dot < p->n && rf_term_has(g, g->syms[p->off + it.dot], cp, cp))
            rf_eset_add(nx, it.prod, it.dot + 1, it.origin);
    }
    c->n++;
    rf_close(c, c->n - 1);
    return nx->n > 0;
}

/* The code points an incomplete UTF-8 sequence b[0..m) can start
 * (false if no valid encoding starts so). */
static bool rf_partial_range(const uint8_t *b, int m, uint32_t *lo, uint32_t *hi) {
    int len = b[0] >= 0xC2 && b[0] <= 0xDF ? 2 : b[0] >= 0xE0 && b[0] <= 0xEF ? 3
              : b[0] >= 0xF0 && b[0] <= 0xF4 ? 4 : 0;
    if (len == 0 || m >= len) return false;
    for (int i = 1; i < m; i++)
        if ((b[i] & 0xC0) != 0x80) return false;
    uint32_t a = b[0] & (0xFF >> (len + 1)), z = a;
    for (int i = 1; i < len; i++) {
        a = a << 6 | (i < m ? (b[i] & 0x3Fu) : 0);
        z = z << 6 | (i < m ? (b[i] & 0x3Fu) : 0x3F);
    }
    static const uint32_t mins[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (a < mins[len]) a = mins[len];
    if (z > RF_MAXCP) z = RF_MAXCP;
    *lo = a, *hi = z;
    return a <= z;
}

/* With the chart kept up to position base (base - 1 code points
 * scanned), decodes the bytes that follow; *viable: a prefix of some
 * string of the language; *accept: in the language. */
static void rf_check_tail(rf_chart *c, int base, const uint8_t *s, size_t len,
                          bool *viable, bool *accept) {
    c->n = base;
    *viable = true;
    *accept = false;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        int n = tr_utf8_decode(s + i, len - i, &cp);
        if (n == 0) break;
        if (!rf_push(c, cp)) {
            *viable = false;
            return;
        }
        i += (size_t)n;
    }
    const rf_gram *g = c->g;
    const rf_eset *last = &c->sets[c->n - 1];
    if (i < len) { /* an incomplete or invalid tail */
        uint32_t lo, hi;
        *viable = false;
        if (len - i >= 4 || !rf_partial_range(s + i, (int)(len - i), &lo, &hi)) return;
        for (int k = 0; k < last->n && !*viable; k++) {
            const rf_prod *p = &g->p[last->it[k].prod];
            if (last->it[k].dot < p->n)
                *viable = rf_term_has(g, g->syms[p->off + last->it[k].dot], lo, hi);
        }
        return;
    }
    *viable = last->n > 0;
    for (int k = 0; k < last->n && !*accept; k++) {
        const rf_prod *p = &g->p[last->it[k].prod];
        *accept = p->lhs == g->start && last->it[k].dot == p->n && last->it[k].origin == 0;
    }
}

static void rf_check(rf_chart *c, const uint8_t *s, size_t len, bool *viable,
                     bool *accept) {
    rf_check_tail(c, 1, s, len, viable, accept);
}

#endif
