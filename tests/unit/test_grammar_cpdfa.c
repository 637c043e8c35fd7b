/* test_grammar_cpdfa.c — code-point automata (grammar/json/cpdfa.c):
 * minimization gives the minimal state count on automata whose minimum is
 * known (tries of word sets that share suffixes, chains that are minimal
 * already and long), keeps the language (random strings against the
 * input), and is idempotent; state elimination back to a regex keeps the
 * language too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grammar/json/json_internal.h"

/* a and b agree on n random strings over a few letters (one of them two
 * bytes), lengths 0..max_len. */
static void same_language(const cpdfa *a, const cpdfa *b, uint32_t n, uint32_t max_len,
                          uint32_t seed) {
    static const char *const letters[] = {"a", "b", "c", "x", "\xc3\xa9"};
    char s[256];
    for (uint32_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        uint32_t len = (seed >> 16) % (max_len + 1), at = 0;
        for (uint32_t k = 0; k < len && at + 2 < sizeof s; k++) {
            seed = seed * 1103515245u + 12345u;
            const char *l = letters[(seed >> 16) % 5];
            memcpy(s + at, l, strlen(l));
            at += (uint32_t)strlen(l);
        }
        bool x = tr_cpdfa_matches(a, s, at), y = tr_cpdfa_matches(b, s, at);
        if (x != y) fail_msg("'%.*s': %d before, %d after", (int)at, s, x, y);
    }
}

/* Minimizes a, checks the count (0: not known), the language and that a
 * second pass changes nothing; returns the minimized automaton. */
static cpdfa minimized(gcc *cc, const cpdfa *a, uint32_t want_n) {
    cpdfa m, m2;
    assert_int_equal(tr_cpdfa_minimize(cc, a, &m), TR_OK);
    if (want_n) assert_int_equal(m.n, want_n);
    same_language(a, &m, 2000, 14, 7u + a->n);
    assert_int_equal(tr_cpdfa_minimize(cc, &m, &m2), TR_OK);
    assert_int_equal(m2.n, m.n);
    return m;
}

static cpdfa from_words(gcc *cc, char **w, uint32_t n) {
    size_t *lens = malloc(n * sizeof *lens);
    assert_non_null(lens);
    for (uint32_t i = 0; i < n; i++) lens[i] = strlen(w[i]);
    cpdfa a;
    assert_int_equal(tr_cpdfa_from_strings(cc, (const char *const *)w, lens, n, &a), TR_OK);
    free(lens);
    return a;
}

/* Every word of k letters over {a, b}: a trie of 2^(k+1) - 1 states, whose
 * minimum is a chain of k + 1. */
static void test_all_words_of_length(void **state) {
    (void)state;
    gcc cc;
    tr_gcc_init(&cc, NULL, NULL);
    enum { K = 11, N = 1 << K };
    char **w = malloc(N * sizeof *w);
    assert_non_null(w);
    for (uint32_t i = 0; i < N; i++) {
        w[i] = malloc(K + 1);
        assert_non_null(w[i]);
        for (int k = 0; k < K; k++) w[i][k] = (char)('a' + ((i >> k) & 1));
        w[i][K] = 0;
    }
    cpdfa a = from_words(&cc, w, N);
    assert_true(a.n > K + 1);
    minimized(&cc, &a, K + 1);
    for (uint32_t i = 0; i < N; i++) free(w[i]);
    free(w);
    tr_gcc_deinit(&cc);
}

/* Words with shared suffixes ({ab, cb, xb} -> 3 states) and chains that
 * are minimal already (a, aa, ..., a^n: n + 1 states; strings of 1 to
 * 5,000 code points: 5,001): the case where rounds over every state cost
 * n^2. */
static void test_suffixes_and_chains(void **state) {
    (void)state;
    gcc cc;
    tr_gcc_init(&cc, NULL, NULL);
    char *three[] = {"ab", "cb", "xb"};
    cpdfa t = from_words(&cc, three, 3);
    minimized(&cc, &t, 3);
    enum { CHAIN = 600 }; /* from_strings takes 200,000 bytes in all */
    char **w = malloc(CHAIN * sizeof *w);
    assert_non_null(w);
    for (uint32_t i = 0; i < CHAIN; i++) {
        w[i] = malloc(i + 2);
        assert_non_null(w[i]);
        memset(w[i], 'a', i + 1);
        w[i][i + 1] = 0;
    }
    cpdfa c = from_words(&cc, w, CHAIN);
    minimized(&cc, &c, CHAIN + 1);
    for (uint32_t i = 0; i < CHAIN; i++) free(w[i]);
    free(w);
    cpdfa len;
    assert_int_equal(tr_cpdfa_length(&cc, 1, 5000, &len), TR_OK);
    minimized(&cc, &len, 5001);
    tr_gcc_deinit(&cc);
}

/* Regexes through the code-point automaton, minimized, back to a regex
 * by state elimination, and to an automaton again: one language. */
static void test_regex_round_trip(void **state) {
    (void)state;
    static const char *const patterns[] = {
        "a(b|c)*x", "(ab|ac|xb)*", "[a-c]{2,5}x?", "(a|b)*a(a|b)(a|b)", "x(\xc3\xa9|a)+b*",
        "((a|b)(c|x))*|a{3}"};
    for (size_t i = 0; i < sizeof patterns / sizeof *patterns; i++) {
        gcc cc;
        tr_gcc_init(&cc, NULL, NULL);
        gre_node *ast = NULL, *back = NULL;
        cpdfa a, again;
        assert_int_equal(tr_regex_parse(&cc, patterns[i], strlen(patterns[i]), &ast), TR_OK);
        assert_int_equal(tr_cpdfa_from_ast(&cc, ast, &a), TR_OK);
        cpdfa m = minimized(&cc, &a, 0);
        assert_true(m.n <= a.n);
        assert_int_equal(tr_cpdfa_to_ast(&cc, &m, 20000, &back), TR_OK);
        assert_int_equal(tr_cpdfa_from_ast(&cc, back, &again), TR_OK);
        same_language(&a, &again, 3000, 12, 99u + (uint32_t)i);
        tr_gcc_deinit(&cc);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_words_of_length),
        cmocka_unit_test(test_suffixes_and_chains),
        cmocka_unit_test(test_regex_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
