/* test_grammar_dfa.c — the automata, checked without PCRE2:
 *
 *   - the minimized DFA against a direct simulation of the NFA it came
 *     from (sets of NFA states, BOL/EOL as documented in dfa.c), on walks,
 *     mutations and random byte strings: catches subset-construction and
 *     minimization bugs independently of the oracle's dialect;
 *   - minimality: a naive Moore refinement of the result finds no two
 *     equivalent states, no two byte classes have equal columns, every
 *     state is reachable, and known minimal sizes come out exactly;
 *   - tr_dfa_check (trimmed, dead state absorbing, forced/can_cont) on all.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tests/unit/test_grammar_util.h"

/* ---- NFA simulation ---- */

typedef struct nsim {
    const gnfa *n;
    uint8_t *cur, *nxt; /* [2 * n_states]: (state << 1 | after_eol) */
    uint32_t *stack;
} nsim;

static void closure(nsim *s, uint8_t *set, bool at_start) {
    uint32_t N = s->n->n_states, sp = 0;
    for (uint32_t e = 0; e < 2 * N; e++)
        if (set[e]) s->stack[sp++] = e;
    while (sp) {
        uint32_t el = s->stack[--sp];
        uint32_t q = el >> 1, f = el & 1;
        for (uint32_t i = s->n->head[q]; i != UINT32_MAX; i = s->n->edges[i].next) {
            const gnfa_edge *e = &s->n->edges[i];
            uint32_t nf = f;
            if (e->kind == GNFA_BYTE) continue;
            if (e->kind == GNFA_BOL && !at_start) continue;
            if (e->kind == GNFA_EOL) nf = 1;
            uint32_t ne = e->to << 1 | nf;
            if (!set[ne]) {
                set[ne] = 1;
                s->stack[sp++] = ne;
            }
        }
    }
}

static bool nfa_accepts(nsim *s, const uint8_t *p, size_t len) {
    uint32_t N = s->n->n_states;
    memset(s->cur, 0, 2 * N);
    s->cur[s->n->start << 1] = 1;
    closure(s, s->cur, true);
    for (size_t i = 0; i < len; i++) {
        memset(s->nxt, 0, 2 * N);
        bool any = false;
        for (uint32_t q = 0; q < N; q++) {
            if (!s->cur[q << 1]) continue; /* after $ nothing is consumed */
            for (uint32_t k = s->n->head[q]; k != UINT32_MAX; k = s->n->edges[k].next) {
                const gnfa_edge *e = &s->n->edges[k];
                if (e->kind == GNFA_BYTE && p[i] >= e->lo && p[i] <= e->hi) {
                    s->nxt[e->to << 1] = 1;
                    any = true;
                }
            }
        }
        if (!any) return false;
        closure(s, s->nxt, false);
        uint8_t *t = s->cur;
        s->cur = s->nxt;
        s->nxt = t;
    }
    return s->cur[s->n->final << 1] || s->cur[s->n->final << 1 | 1];
}

/* ---- minimality ---- */

/* Number of equivalence classes of states by naive Moore refinement. */
static uint32_t moore_classes(const gdfa *d) {
    uint32_t n = d->n_states, k = d->n_classes;
    uint32_t *cls = malloc(n * sizeof *cls), *ncls = malloc(n * sizeof *ncls);
    uint32_t *sig = malloc((size_t)n * (k + 1) * sizeof *sig);
    for (uint32_t s = 0; s < n; s++) cls[s] = d->accept[s];
    uint32_t count = 0, prev = 0;
    for (;;) {
        for (uint32_t s = 0; s < n; s++) {
            sig[(size_t)s * (k + 1)] = cls[s];
            for (uint32_t c = 0; c < k; c++)
                sig[(size_t)s * (k + 1) + 1 + c] = cls[d->trans[(size_t)s * k + c]];
        }
        count = 0;
        for (uint32_t s = 0; s < n; s++) {
            uint32_t found = UINT32_MAX;
            for (uint32_t t = 0; t < s && found == UINT32_MAX; t++)
                if (memcmp(sig + (size_t)s * (k + 1), sig + (size_t)t * (k + 1),
                           (k + 1) * sizeof *sig) == 0)
                    found = ncls[t];
            ncls[s] = found == UINT32_MAX ? count++ : found;
        }
        memcpy(cls, ncls, n * sizeof *cls);
        if (count == prev) break;
        prev = count;
    }
    free(cls), free(ncls), free(sig);
    return count;
}

static void check_minimal(const gdfa *d, const char *pat) {
    assert_int_equal(tr_dfa_check(d), TR_OK);
    uint32_t mc = moore_classes(d);
    if (mc != d->n_states)
        fprintf(stderr, "/%s/: %u states but %u classes\n", pat, d->n_states, mc);
    assert_int_equal(mc, d->n_states);
    /* no two byte classes with the same column */
    for (uint32_t a = 0; a < d->n_classes; a++)
        for (uint32_t b = a + 1; b < d->n_classes; b++) {
            bool same = true;
            for (uint32_t s = 0; s < d->n_states && same; s++)
                same = d->trans[(size_t)s * d->n_classes + a] ==
                       d->trans[(size_t)s * d->n_classes + b];
            assert_false(same);
        }
    /* every live state reachable from the start */
    uint8_t *seen = calloc(d->n_states, 1);
    uint32_t *q = malloc(d->n_states * sizeof *q), h = 0, t = 0;
    seen[d->start] = 1;
    q[t++] = d->start;
    while (h < t) {
        uint32_t s = q[h++];
        for (uint32_t c = 0; c < d->n_classes; c++) {
            uint32_t x = d->trans[(size_t)s * d->n_classes + c];
            if (!seen[x]) seen[x] = 1, q[t++] = x;
        }
    }
    for (uint32_t s = 1; s < d->n_states; s++) assert_true(seen[s]);
    free(seen), free(q);
}

/* ---- the NFA of a pattern, through the internal pipeline ---- */

typedef struct built {
    gcc cc;
    gnfa nfa;
    grammar *g;
} built;

static bool build(const char *pat, size_t len, built *b) {
    memset(b, 0, sizeof *b);
    if (tr_grammar_compile_regex(pat, len, NULL, &b->g, NULL) != TR_OK) return false;
    tr_gcc_init(&b->cc, NULL, NULL);
    gre_node *ast;
    assert_int_equal(tr_regex_parse(&b->cc, pat, len, &ast), TR_OK);
    assert_int_equal(tr_nfa_build(&b->cc, ast, &b->nfa), TR_OK);
    return true;
}

static void unbuild(built *b) {
    tr_nfa_free(&b->cc, &b->nfa);
    tr_gcc_deinit(&b->cc);
    tr_grammar_free(b->g);
}

static void walk(const gdfa *d, tg_rng *r, tg_str *out) {
    out->len = 0;
    tg_put(out, "", 0);
    uint32_t s = d->start;
    while (out->len < 40) {
        if (d->accept[s] && (!d->can_cont[s] || tg_below(r, 3) == 0)) return;
        uint8_t b;
        do b = (uint8_t)tg_below(r, 256);
        while (gdfa_step(d, s, b) == GDFA_DEAD);
        tg_put(out, &b, 1);
        s = gdfa_step(d, s, b);
    }
}

static size_t g_compared;

static void compare_with_nfa(const char *pat, size_t len, tg_rng *r) {
    built b;
    if (!build(pat, len, &b)) return;
    const gdfa *d = &b.g->dfa;
    check_minimal(d, pat);
    nsim s = {.n = &b.nfa};
    s.cur = malloc(2 * b.nfa.n_states);
    s.nxt = malloc(2 * b.nfa.n_states);
    s.stack = malloc(2 * b.nfa.n_states * sizeof *s.stack);
    tg_str str = {0};
    for (int k = 0; k < 60; k++) {
        if (k < 20) {
            walk(d, r, &str);
        } else if (k < 45) {
            walk(d, r, &str);
            if (str.len) str.p[tg_below(r, (uint32_t)str.len)] ^= (char)(1 + tg_below(r, 255));
            if (tg_below(r, 2)) tg_putc(&str, (char)tg_below(r, 256));
        } else {
            str.len = 0;
            tg_put(&str, "", 0);
            uint32_t n = tg_below(r, 6);
            for (uint32_t i = 0; i < n; i++) tg_putc(&str, "ab\n\xc3\xa9x0"[tg_below(r, 7)]);
        }
        bool want = nfa_accepts(&s, (const uint8_t *)str.p, str.len);
        bool got = tr_grammar_matches(b.g, str.p, str.len);
        if (want != got) {
            fprintf(stderr, "/%s/ on %zu bytes: dfa %d nfa %d\n", pat, str.len, got, want);
            fail();
        }
        g_compared++;
    }
    free(str.p);
    free(s.cur), free(s.nxt), free(s.stack);
    unbuild(&b);
}

static void test_dfa_vs_nfa_handwritten(void **state) {
    (void)state;
    size_t len;
    char *text = tg_read_file(TRELLIS_SOURCE_DIR "/tests/data/grammar/regexes.txt", &len);
    assert_non_null(text);
    tg_rng r = {31337};
    size_t n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char *tab = strchr(line, '\t');
        size_t plen = tab ? (size_t)(tab - line) : strlen(line);
        compare_with_nfa(line, plen, &r);
        n++;
    }
    free(text);
    fprintf(stderr, "dfa vs nfa: %zu patterns, %zu strings\n", n, g_compared);
    assert_true(n >= 200);
}

static void test_dfa_vs_nfa_random(void **state) {
    (void)state;
    static const char *const pieces[] = {
        "a", "b", "ab", "(a|b)", "[ab]", "a*", "b+", "(ab)?", "(a|bb)*",
        "^", "$", "(^a)", "(b$)", ".", "é", "[^a]", "a{2}", "b{1,3}",
        "(a*b)*", "(|a)", "\\d", "(a|^b)", "(a$|b)*",
    };
    tg_rng r = {4242};
    char pat[256];
    for (int k = 0; k < 3000; k++) {
        size_t n = 0;
        int parts = 1 + (int)tg_below(&r, 5);
        for (int i = 0; i < parts; i++) {
            const char *p = pieces[tg_below(&r, TR_ARRAY_LEN(pieces))];
            if (i && tg_below(&r, 6) == 0) pat[n++] = '|';
            memcpy(pat + n, p, strlen(p));
            n += strlen(p);
        }
        if (tg_below(&r, 5) == 0) {
            memmove(pat + 1, pat, n);
            pat[0] = '(';
            n++;
            pat[n++] = ')';
            pat[n++] = "*+?"[tg_below(&r, 3)];
        }
        pat[n] = 0;
        compare_with_nfa(pat, n, &r);
    }
}

static void test_known_sizes(void **state) {
    (void)state;
    static const struct {
        const char *pat;
        uint32_t states; /* including the dead state */
    } cases[] = {
        {"(a|b)*abb", 5},
        {"[0-9]{2,4}", 6},
        {"(a|b)*a(a|b){3}", 17}, /* 2^4 live states */
        {"a*", 2},
        {"(a*)*", 2},
        {"(a|b)*", 2},
        {"(ab|cd)+", 5},
        {".", 10}, /* start, 1-3 continuations, E0/ED/F0/F4 lead-ins, final, dead */
        {"abc|abd", 5},
        {"x{3,}", 5},
        {"(a|aa)*b", 3},
        {"^a$|^a$", 3},
    };
    for (size_t i = 0; i < TR_ARRAY_LEN(cases); i++) {
        grammar *g = NULL;
        assert_int_equal(tr_grammar_compile_regex(cases[i].pat, strlen(cases[i].pat),
                                               NULL, &g, NULL), TR_OK);
        if (g->dfa.n_states != cases[i].states)
            fprintf(stderr, "/%s/: %u states, want %u\n", cases[i].pat,
                    g->dfa.n_states, cases[i].states);
        assert_int_equal(g->dfa.n_states, cases[i].states);
        check_minimal(&g->dfa, cases[i].pat);
        tr_grammar_free(g);
    }
    /* minimization does real work: the raw subset DFA of this one is larger */
    grammar *g = NULL;
    assert_int_equal(tr_grammar_compile_regex("(a|b)*(abb|bbb)", 15, NULL, &g, NULL), TR_OK);
    grammar_stats st;
    tr_grammar_get_stats(g, &st);
    assert_true(st.dfa_states_raw > st.dfa_states);
    tr_grammar_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_sizes),
        cmocka_unit_test(test_dfa_vs_nfa_handwritten),
        cmocka_unit_test(test_dfa_vs_nfa_random),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
