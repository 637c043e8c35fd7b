/* test_json_gbnf.h — a slow, obviously-correct recognizer of grammar text
 * (the GBNF + /regex/ subset the JSON Schema compiler prints), for
 * testing the compiler's output independently of the EBNF engine, and
 * as a differential oracle against it.
 *
 * ends(item, i) = every j such that the item derives text[i..j),
 * memoized per (rule, i); regex terminals run their DFA (compiled by
 * tr_grammar_compile_regex) from i and collect the accepting ends. Sets
 * of positions are bitsets. Terminates on every grammar without left
 * recursion (the compiler refuses those). Test code: aborts on malformed
 * grammar text (the compiler's output must parse).
 */
#ifndef TR_TEST_JSON_GBNF_H
#define TR_TEST_JSON_GBNF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/cfg/cfg.h"

typedef enum { TG_LIT, TG_RX, TG_REF, TG_SEQ, TG_ALT, TG_REP } tg_kind;

typedef struct tg_node {
    tg_kind k;
    char *lit;
    size_t lit_len;
    grammar *rx;
    int ref;
    struct tg_node **kid;
    int n;
    uint32_t min, max; /* max UINT32_MAX: unbounded */
} tg_node;

typedef struct tg_gram {
    char **names;
    tg_node **body;
    int n;
} tg_gram;

static void tg_die(const char *what, const char *at) {
    fprintf(stderr, "test_json_gbnf: %s at: %.60s\n", what, at);
    abort();
}

static tg_node *tg_new(tg_kind k) {
    tg_node *x = calloc(1, sizeof *x);
    x->k = k;
    return x;
}

static void tg_push(tg_node *x, tg_node *k) {
    x->kid = realloc(x->kid, (size_t)(x->n + 1) * sizeof *x->kid);
    x->kid[x->n++] = k;
}

static void tg_ws(const char **p) {
    while (**p == ' ' || **p == '\t') (*p)++;
}

static int tg_rule_id(tg_gram *g, const char *s, size_t n) {
    for (int i = 0; i < g->n; i++)
        if (strlen(g->names[i]) == n && !memcmp(g->names[i], s, n)) return i;
    g->names = realloc(g->names, (size_t)(g->n + 1) * sizeof *g->names);
    g->body = realloc(g->body, (size_t)(g->n + 1) * sizeof *g->body);
    g->names[g->n] = strndup(s, n);
    g->body[g->n] = NULL;
    return g->n++;
}

static tg_node *tg_alt(tg_gram *g, const char **p);

static int tg_hex(char c) {
    return c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : -1;
}

static tg_node *tg_atom(tg_gram *g, const char **p) {
    const char *s = *p;
    if (*s == '"') {
        tg_node *x = tg_new(TG_LIT);
        x->lit = malloc(strlen(s) + 1);
        s++;
        while (*s && *s != '"') {
            if (*s == '\\') {
                s++;
                char c = *s++;
                if (c == 'x') {
                    x->lit[x->lit_len++] = (char)(tg_hex(s[0]) * 16 + tg_hex(s[1]));
                    s += 2;
                } else
                    x->lit[x->lit_len++] = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
            } else
                x->lit[x->lit_len++] = *s++;
        }
        if (*s != '"') tg_die("unterminated literal", *p);
        *p = s + 1;
        return x;
    }
    if (*s == '/') {
        const char *a = ++s;
        while (*s && *s != '/') s += *s == '\\' && s[1] ? 2 : 1;
        if (*s != '/') tg_die("unterminated regex", *p);
        tg_node *x = tg_new(TG_RX);
        tr_diag d;
        if (tr_grammar_compile_regex(a, (size_t)(s - a), NULL, &x->rx, &d) != TR_OK) {
            fprintf(stderr, "regex: %.*s\n", (int)(s - a), a);
            tg_die(d.message, a);
        }
        *p = s + 1;
        return x;
    }
    if (*s == '(') {
        (*p)++;
        tg_node *x = tg_alt(g, p);
        tg_ws(p);
        if (**p != ')') tg_die("expected )", *p);
        (*p)++;
        return x;
    }
    const char *a = s;
    while ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
           *s == '-' || *s == '_')
        s++;
    if (s == a) tg_die("expected an item", s);
    tg_node *x = tg_new(TG_REF);
    x->ref = tg_rule_id(g, a, (size_t)(s - a));
    *p = s;
    return x;
}

static tg_node *tg_item(tg_gram *g, const char **p) {
    tg_node *x = tg_atom(g, p);
    for (;;) {
        uint32_t mn, mx;
        char c = **p;
        if (c == '?') mn = 0, mx = 1;
        else if (c == '*') mn = 0, mx = UINT32_MAX;
        else if (c == '+') mn = 1, mx = UINT32_MAX;
        else if (c == '{') {
            char *e;
            mn = (uint32_t)strtoul(*p + 1, &e, 10);
            mx = mn;
            if (*e == ',') {
                e++;
                mx = *e == '}' ? UINT32_MAX : (uint32_t)strtoul(e, &e, 10);
            }
            if (*e != '}') tg_die("bad quantifier", *p);
            *p = e;
        } else
            return x;
        (*p)++;
        tg_node *r = tg_new(TG_REP);
        tg_push(r, x);
        r->min = mn, r->max = mx;
        x = r;
    }
}

static tg_node *tg_seq(tg_gram *g, const char **p) {
    tg_node *x = tg_new(TG_SEQ);
    for (;;) {
        tg_ws(p);
        char c = **p;
        if (!c || c == '\n' || c == '|' || c == ')') return x;
        tg_push(x, tg_item(g, p));
    }
}

static tg_node *tg_alt(tg_gram *g, const char **p) {
    tg_node *x = tg_new(TG_ALT);
    for (;;) {
        tg_push(x, tg_seq(g, p));
        tg_ws(p);
        if (**p != '|') return x;
        (*p)++;
    }
}

static tg_gram *tg_parse(const char *text) {
    tg_gram *g = calloc(1, sizeof *g);
    tg_rule_id(g, "root", 4);
    const char *p = text;
    while (*p) {
        while (*p == '\n') p++;
        if (!*p) break;
        const char *a = p;
        while (*p && *p != ' ') p++;
        int id = tg_rule_id(g, a, (size_t)(p - a));
        tg_ws(&p);
        if (strncmp(p, "::=", 3)) tg_die("expected ::=", p);
        p += 3;
        tg_node *body = tg_alt(g, &p); /* may grow g->body */
        g->body[id] = body;
        if (*p && *p != '\n') tg_die("junk after rule", p);
    }
    for (int i = 0; i < g->n; i++)
        if (!g->body[i]) tg_die("undefined rule", g->names[i]);
    return g;
}

/* ---- recognition over text[0..n) ---- */

typedef struct tg_run {
    tg_gram *g;
    const uint8_t *t;
    size_t n, words;
    uint64_t **memo; /* [rule][pos] -> bitset, NULL until computed */
} tg_run;

static uint64_t *tg_set(tg_run *r) { return calloc(r->words, sizeof(uint64_t)); }
static void tg_add(uint64_t *s, size_t j) { s[j >> 6] |= 1ull << (j & 63); }
static bool tg_has(const uint64_t *s, size_t j) { return s[j >> 6] >> (j & 63) & 1; }

static void tg_ends(tg_run *r, tg_node *x, size_t i, uint64_t *out);

static void tg_ends_set(tg_run *r, tg_node *x, const uint64_t *from, uint64_t *out) {
    for (size_t w = 0; w < r->words; w++)
        for (uint64_t bits = from[w]; bits; bits &= bits - 1)
            tg_ends(r, x, w * 64 + (size_t)__builtin_ctzll(bits), out);
}

static void tg_ends(tg_run *r, tg_node *x, size_t i, uint64_t *out) {
    switch (x->k) {
    case TG_LIT:
        if (i + x->lit_len <= r->n && !memcmp(r->t + i, x->lit, x->lit_len)) tg_add(out, i + x->lit_len);
        return;
    case TG_RX: {
        const gdfa *d = &x->rx->dfa;
        uint32_t s = d->start;
        if (d->accept[s]) tg_add(out, i);
        for (size_t j = i; j < r->n && s != GDFA_DEAD; j++) {
            s = gdfa_step(d, s, r->t[j]);
            if (s != GDFA_DEAD && d->accept[s]) tg_add(out, j + 1);
        }
        return;
    }
    case TG_REF: {
        uint64_t **m = &r->memo[(size_t)x->ref * (r->n + 1) + i];
        if (!*m) {
            *m = tg_set(r);
            tg_ends(r, r->g->body[x->ref], i, *m);
        }
        for (size_t w = 0; w < r->words; w++) out[w] |= (*m)[w];
        return;
    }
    case TG_SEQ: {
        uint64_t *cur = tg_set(r);
        tg_add(cur, i);
        for (int k = 0; k < x->n; k++) {
            uint64_t *nx = tg_set(r);
            tg_ends_set(r, x->kid[k], cur, nx);
            free(cur);
            cur = nx;
        }
        for (size_t w = 0; w < r->words; w++) out[w] |= cur[w];
        free(cur);
        return;
    }
    case TG_ALT:
        for (int k = 0; k < x->n; k++) tg_ends(r, x->kid[k], i, out);
        return;
    case TG_REP: {
        uint64_t *cur = tg_set(r), *all = tg_set(r);
        tg_add(cur, i);
        if (x->min == 0) tg_add(all, i);
        for (uint32_t c = 1; c <= x->max; c++) {
            uint64_t *nx = tg_set(r);
            tg_ends_set(r, x->kid[0], cur, nx);
            bool grew = false;
            for (size_t w = 0; w < r->words; w++) {
                if (c >= x->min && (nx[w] & ~all[w])) grew = true;
                if (c >= x->min) all[w] |= nx[w];
            }
            free(cur);
            cur = nx;
            bool empty = true;
            for (size_t w = 0; w < r->words; w++) empty &= cur[w] == 0;
            if (empty || (c > x->min && !grew)) break;
        }
        for (size_t w = 0; w < r->words; w++) out[w] |= all[w];
        free(cur);
        free(all);
        return;
    }
    }
}

/* Whether the grammar derives exactly text[0..n) from root. */
static bool tg_accepts(tg_gram *g, const char *text, size_t n) {
    tg_run r = {g, (const uint8_t *)text, n, (n + 1 + 63) / 64, NULL};
    r.memo = calloc((size_t)g->n * (n + 1), sizeof *r.memo);
    uint64_t *out = tg_set(&r);
    tg_node root = {.k = TG_REF, .ref = 0};
    tg_ends(&r, &root, 0, out);
    bool ok = tg_has(out, n);
    free(out);
    for (size_t i = 0; i < (size_t)g->n * (n + 1); i++) free(r.memo[i]);
    free(r.memo);
    return ok;
}

static void tg_free_node(tg_node *x) {
    if (!x) return;
    for (int i = 0; i < x->n; i++) tg_free_node(x->kid[i]);
    free(x->kid);
    free(x->lit);
    tr_grammar_free(x->rx);
    free(x);
}

static void tg_free(tg_gram *g) {
    for (int i = 0; i < g->n; i++) {
        tg_free_node(g->body[i]);
        free(g->names[i]);
    }
    free(g->names);
    free(g->body);
    free(g);
}

#endif
