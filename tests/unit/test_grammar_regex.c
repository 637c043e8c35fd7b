/* test_grammar_regex.c — the regex front end: what compiles, what each
 * unsupported or malformed construct reports (code, byte offset, the
 * construct named in the message), every budget of grammar_limits, and
 * that hostile patterns end in bounded time. Language equivalence with
 * PCRE2 is test_grammar_pcre's job; the automaton's own invariants are
 * test_grammar_dfa's.
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

static grammar *compile_ok(const char *pat) {
    grammar *g = NULL;
    tr_diag d;
    tr_status st = tr_grammar_compile_regex(pat, strlen(pat), NULL, &g, &d);
    if (st != TR_OK)
        fprintf(stderr, "/%s/: %s: %s\n", pat, tr_status_name(st), d.message);
    assert_int_equal(st, TR_OK);
    assert_int_equal(tr_grammar_check(g), TR_OK);
    return g;
}

static bool m(const grammar *g, const char *s) {
    return tr_grammar_matches(g, s, strlen(s));
}

/* ---- errors ---- */

typedef struct err_case {
    const char *pat;
    tr_status code;
    int offset; /* -1: don't check */
    const char *needle;
} err_case;

static const err_case k_errors[] = {
    /* unsupported constructs: named, with their offset */
    {"a(?=b)", TR_ERR_UNSUPPORTED, 1, "lookahead"},
    {"a(?!b)", TR_ERR_UNSUPPORTED, 1, "negative lookahead"},
    {"(?<=a)b", TR_ERR_UNSUPPORTED, 0, "lookbehind"},
    {"x(?<!a)b", TR_ERR_UNSUPPORTED, 1, "negative lookbehind"},
    {"(a)\\1", TR_ERR_UNSUPPORTED, 3, "backreference"},
    {"(?<n>a)\\k<n>", TR_ERR_UNSUPPORTED, 7, "backreference"},
    {"(?<n>a)(?P=n)", TR_ERR_UNSUPPORTED, 7, "backreference"},
    {"a\\g{1}", TR_ERR_UNSUPPORTED, 1, "backreference"},
    {"ab*+", TR_ERR_UNSUPPORTED, 3, "possessive"},
    {"a++", TR_ERR_UNSUPPORTED, 2, "possessive"},
    {"a?+", TR_ERR_UNSUPPORTED, 2, "possessive"},
    {"a{2,3}+", TR_ERR_UNSUPPORTED, 6, "possessive"},
    {"(?>a)", TR_ERR_UNSUPPORTED, 0, "atomic group"},
    {"a(?R)?", TR_ERR_UNSUPPORTED, 1, "recursion"},
    {"(a)(?1)", TR_ERR_UNSUPPORTED, 3, "recursion"},
    {"(?&n)", TR_ERR_UNSUPPORTED, 0, "recursion"},
    {"(?P>n)", TR_ERR_UNSUPPORTED, 0, "recursion"},
    {"(?(1)a|b)", TR_ERR_UNSUPPORTED, 0, "conditional"},
    {"(?i)a", TR_ERR_UNSUPPORTED, 0, "inline flags"},
    {"(?i:a)", TR_ERR_UNSUPPORTED, 0, "inline flags"},
    {"\\bfoo", TR_ERR_UNSUPPORTED, 0, "word boundary"},
    {"a\\B", TR_ERR_UNSUPPORTED, 1, "word boundary"},
    {"a\\z", TR_ERR_UNSUPPORTED, 1, "anchor"},
    {"\\Aa", TR_ERR_UNSUPPORTED, 0, "anchor"},
    {"a\\Kb", TR_ERR_UNSUPPORTED, 1, "\\K"},
    {"\\Qa.b\\E", TR_ERR_UNSUPPORTED, 0, "quoting"},
    {"\\012", TR_ERR_UNSUPPORTED, 0, "octal"},
    {"[\\1]", TR_ERR_UNSUPPORTED, 1, "octal"},
    {"\\o{12}", TR_ERR_UNSUPPORTED, 0, "octal"},
    {"x[[:alpha:]]", TR_ERR_UNSUPPORTED, 2, "POSIX"},
    {"\\p{Greek}", TR_ERR_UNSUPPORTED, 0, "Unicode property"},
    {"\\p{Script=Greek}", TR_ERR_UNSUPPORTED, 0, "Unicode property"},
    {"\\e", TR_ERR_UNSUPPORTED, 0, "escape"},
    {"\\R", TR_ERR_UNSUPPORTED, 0, "PCRE-only"},
    {"\\h", TR_ERR_UNSUPPORTED, 0, "PCRE-only"},
    {"(*UTF)a", TR_ERR_UNSUPPORTED, 0, "verb"},
    {"(?C1)a", TR_ERR_UNSUPPORTED, 0, "callout"},
    {"[]a]", TR_ERR_UNSUPPORTED, 0, "class starting with ']'"},
    {"[^]", TR_ERR_UNSUPPORTED, 0, "class starting with ']'"},
    {"^*", TR_ERR_UNSUPPORTED, 1, "anchor"},
    {"a$?", TR_ERR_UNSUPPORTED, 2, "anchor"},
    {"a{,3}", TR_ERR_UNSUPPORTED, 1, "{,n}"},
    {"[\\d-z]", TR_ERR_UNSUPPORTED, 3, "range"},
    /* syntax errors */
    {"(a", TR_ERR_FORMAT, 0, "missing )"},
    {"a(b(c)", TR_ERR_FORMAT, 1, "missing )"},
    {"a)", TR_ERR_FORMAT, 1, "unmatched )"},
    {"[a", TR_ERR_FORMAT, 0, "missing ]"},
    {"x[^", TR_ERR_FORMAT, 1, "missing ]"},
    {"*a", TR_ERR_FORMAT, 0, "does not follow"},
    {"a|+", TR_ERR_FORMAT, 2, "does not follow"},
    {"(?:{2})", TR_ERR_FORMAT, 3, "does not follow"},
    {"a**", TR_ERR_FORMAT, 2, "follows a quantifier"},
    {"a{2}{3}", TR_ERR_FORMAT, 4, "follows a quantifier"},
    {"a{3,2}", TR_ERR_FORMAT, 1, "n < m"},
    {"a{2", TR_ERR_FORMAT, 1, "malformed quantifier"},
    {"a{2,x}", TR_ERR_FORMAT, 1, "malformed quantifier"},
    {"[z-a]", TR_ERR_FORMAT, 1, "out of order"},
    {"\\x4", TR_ERR_FORMAT, 0, "hex"},
    {"\\x{}", TR_ERR_FORMAT, 0, "hex"},
    {"\\u12", TR_ERR_FORMAT, 0, "hex"},
    {"\\u{110000}", TR_ERR_FORMAT, 0, "above U+10FFFF"},
    {"\\x{FFFFFFFFF}", TR_ERR_FORMAT, 0, "above U+10FFFF"},
    {"\\uD800", TR_ERR_FORMAT, 0, "surrogate"},
    {"ab\\x{DC00}", TR_ERR_FORMAT, 2, "surrogate"},
    {"a\\", TR_ERR_FORMAT, 1, "trailing backslash"},
    {"\xff", TR_ERR_FORMAT, 0, "UTF-8"},
    {"a\xc3", TR_ERR_FORMAT, 1, "UTF-8"},
    {"\xed\xa0\x80", TR_ERR_FORMAT, 0, "UTF-8"}, /* encoded surrogate */
    {"\xc0\xaf", TR_ERR_FORMAT, 0, "UTF-8"},     /* overlong */
    {"[\xe4\xb8]", TR_ERR_FORMAT, 1, "UTF-8"},
    {"(?<1a>x)", TR_ERR_FORMAT, 0, "group name"},
    {"(?<a>x)(?<a>y)", TR_ERR_FORMAT, 7, "duplicate"},
    {"(?Px)", TR_ERR_FORMAT, 0, "(?P"},
    {"\\c1", TR_ERR_FORMAT, 0, "\\c"},
    {"\\p{L", TR_ERR_FORMAT, 0, "missing }"},
    {"(?#abc", TR_ERR_FORMAT, 0, "comment"},
    {"[^\\x{0}-\\x{10FFFF}]", TR_ERR_FORMAT, 0, "no string"},
    {"\\p{Cs}", TR_ERR_FORMAT, 0, "no string"},
    {"a^b", TR_ERR_FORMAT, 0, "no string"},
    {"a$b", TR_ERR_FORMAT, 0, "no string"},
    /* budgets */
    {"a{1001}", TR_ERR_LIMIT, 1, "max_repeat"},
    {"a{2,99999999999999999999}", TR_ERR_LIMIT, 1, "max_repeat"},
    {"(a|b)*a(a|b){20}", TR_ERR_LIMIT, -1, "max_dfa_states"},
    {"((a{1000}){1000})", TR_ERR_LIMIT, -1, "max_nfa_states"},
    {"(\\p{L}|\\p{N}){1000}", TR_ERR_LIMIT, -1, "max_nfa_states"},
};

static void test_errors(void **state) {
    (void)state;
    /* the default limits, but time: on a loaded machine the 2 s compile
     * budget could run out before the state budget a case is about */
    grammar_limits lim;
    tr_grammar_limits_default(&lim);
    lim.max_compile_us = 600ull * 1000 * 1000;
    for (size_t i = 0; i < TR_ARRAY_LEN(k_errors); i++) {
        const err_case *c = &k_errors[i];
        grammar *g = NULL;
        tr_diag d;
        tr_status st = tr_grammar_compile_regex(c->pat, strlen(c->pat), &lim, &g, &d);
        if (st != c->code || (c->offset >= 0 && d.offset != (uint64_t)c->offset) ||
            !strstr(d.message, c->needle)) {
            fprintf(stderr, "/%s/: got %s at %llu \"%s\"; want %s at %d \"%s\"\n",
                    c->pat, tr_status_name(st), (unsigned long long)d.offset,
                    d.message, tr_status_name(c->code), c->offset, c->needle);
            fail();
        }
        assert_null(g);
        assert_int_equal(d.code, st);
        /* the message names the offset too, for humans reading logs */
        if (c->offset >= 0 && st != TR_ERR_FORMAT) {
            char at[32];
            snprintf(at, sizeof at, "at byte %d", c->offset);
            if (!strstr(d.message, at))
                fprintf(stderr, "note: /%s/ message lacks '%s': %s\n", c->pat,
                        at, d.message);
        }
    }
}

static void test_nesting_limit(void **state) {
    (void)state;
    grammar_limits lim;
    tr_grammar_limits_default(&lim);
    char pat[1024];
    size_t n = 0;
    for (int i = 0; i < 300; i++) pat[n++] = '(';
    pat[n++] = 'a';
    for (int i = 0; i < 300; i++) pat[n++] = ')';
    grammar *g = NULL;
    tr_diag d;
    assert_int_equal(tr_grammar_compile_regex(pat, n, &lim, &g, &d), TR_ERR_LIMIT);
    assert_non_null(strstr(d.message, "max_nesting"));
    assert_int_equal(d.offset, 200); /* the group that went one too deep */
    /* 200 deep is fine */
    n = 0;
    for (int i = 0; i < 200; i++) pat[n++] = '(';
    pat[n++] = 'a';
    for (int i = 0; i < 200; i++) pat[n++] = ')';
    assert_int_equal(tr_grammar_compile_regex(pat, n, &lim, &g, &d), TR_OK);
    assert_true(tr_grammar_matches(g, "a", 1));
    tr_grammar_free(g);
    /* a million '(' must not blow the C stack */
    size_t big = 1000000;
    char *p = malloc(big);
    memset(p, '(', big);
    lim.max_pattern_bytes = big;
    assert_int_equal(tr_grammar_compile_regex(p, big, &lim, &g, &d), TR_ERR_LIMIT);
    free(p);
}

static void test_other_limits(void **state) {
    (void)state;
    grammar_limits lim;
    grammar *g = NULL;
    tr_diag d;
    /* pattern size */
    tr_grammar_limits_default(&lim);
    lim.max_pattern_bytes = 10;
    assert_int_equal(tr_grammar_compile_regex("0123456789", 10, &lim, &g, &d), TR_OK);
    tr_grammar_free(g);
    assert_int_equal(tr_grammar_compile_regex("0123456789a", 11, &lim, &g, &d),
                     TR_ERR_LIMIT);
    assert_non_null(strstr(d.message, "max_pattern_bytes"));
    /* repeat bound is configurable */
    tr_grammar_limits_default(&lim);
    lim.max_repeat = 5;
    assert_int_equal(tr_grammar_compile_regex("a{5}", 4, &lim, &g, &d), TR_OK);
    tr_grammar_free(g);
    assert_int_equal(tr_grammar_compile_regex("a{2,6}", 6, &lim, &g, &d), TR_ERR_LIMIT);
    /* NFA states */
    tr_grammar_limits_default(&lim);
    lim.max_nfa_states = 50;
    const char *p = "[a-z]{30}";
    assert_int_equal(tr_grammar_compile_regex(p, strlen(p), &lim, &g, &d), TR_ERR_LIMIT);
    assert_non_null(strstr(d.message, "max_nfa_states"));
    /* DFA states */
    tr_grammar_limits_default(&lim);
    lim.max_dfa_states = 100;
    p = "(a|b)*a(a|b){6}"; /* 128 raw states */
    assert_int_equal(tr_grammar_compile_regex(p, strlen(p), &lim, &g, &d), TR_ERR_LIMIT);
    assert_non_null(strstr(d.message, "max_dfa_states"));
    lim.max_dfa_states = 200;
    assert_int_equal(tr_grammar_compile_regex(p, strlen(p), &lim, &g, &d), TR_OK);
    tr_grammar_free(g);
    /* memory */
    tr_grammar_limits_default(&lim);
    lim.max_compile_bytes = 200000;
    p = "\\p{L}{1,30}";
    assert_int_equal(tr_grammar_compile_regex(p, strlen(p), &lim, &g, &d), TR_ERR_LIMIT);
    assert_non_null(strstr(d.message, "memory"));
    /* time: a 16k-state DFA takes far more than 2 ms */
    tr_grammar_limits_default(&lim);
    lim.max_compile_us = 2000;
    p = "(a|b)*a(a|b){14}";
    uint64_t t0 = tr_now_ns();
    assert_int_equal(tr_grammar_compile_regex(p, strlen(p), &lim, &g, &d), TR_ERR_LIMIT);
    uint64_t dt = tr_now_ns() - t0;
    assert_non_null(strstr(d.message, "time"));
    assert_true(dt < 500u * 1000 * 1000); /* gave up soon after the budget */
}

/* Hostile patterns end (with a result or a budget error) quickly under
 * the default limits. */
static void test_hostile_patterns_bounded(void **state) {
    (void)state;
    static const char *const pats[] = {
        "(a|b)*a(a|b){15}",  "((a*)*)*b", "(.*){1000}", "(.{0,1000}){0,1000}",
        "(\\p{L}{0,1000}){1000}", "([\\s\\S]{1000}){1000}",
        "(x+x+)+y", "(a|aa|aaa|aaaa)*{", "((((((((((.*)*)*)*)*)*)*)*)*)*)*",
        "(.*a){40}", "[^a]{1000}", ".{1000}", "(\\w|\\W|\\d|\\D|\\s|\\S){300}",
        "(.*,){20}", "(\\p{L}|\\p{N}|\\p{P}|\\p{S}){1,50}",
    };
    for (size_t i = 0; i < TR_ARRAY_LEN(pats); i++) {
        grammar *g = NULL;
        tr_diag d;
        uint64_t t0 = tr_now_ns();
        tr_status st = tr_grammar_compile_regex(pats[i], strlen(pats[i]), NULL, &g, &d);
        double ms = (double)(tr_now_ns() - t0) / 1e6;
        grammar_stats s = {0};
        if (g) tr_grammar_get_stats(g, &s);
        fprintf(stderr, "  %-40s %-14s %8.1f ms  dfa %u\n", pats[i],
                tr_status_name(st), ms, s.dfa_states);
        assert_true(st == TR_OK || st == TR_ERR_LIMIT);
        /* default max_compile_us is 2 s; allow slack for a loaded machine
         * and sanitizers */
        assert_true(ms < 6000);
        if (g) assert_int_equal(tr_grammar_check(g), TR_OK);
        tr_grammar_free(g);
    }
}

/* ---- what compiles, and means what ---- */

static void test_basics(void **state) {
    (void)state;
    grammar *g;
    /* the empty pattern matches exactly the empty string */
    assert_int_equal(tr_grammar_compile_regex("", 0, NULL, &g, NULL), TR_OK);
    assert_true(tr_grammar_matches(g, "", 0));
    assert_false(tr_grammar_matches(g, "a", 1));
    tr_grammar_free(g);
    assert_int_equal(tr_grammar_compile_regex(NULL, 0, NULL, &g, NULL), TR_OK);
    tr_grammar_free(g);
    assert_int_equal(tr_grammar_compile_regex(NULL, 3, NULL, &g, NULL),
                     TR_ERR_INVALID_ARG);
    assert_int_equal(tr_grammar_compile_regex("a", 1, NULL, NULL, NULL),
                     TR_ERR_INVALID_ARG);
    /* length, not NUL, ends the pattern: a raw NUL is a literal */
    assert_int_equal(tr_grammar_compile_regex("a\0b", 3, NULL, &g, NULL), TR_OK);
    assert_true(tr_grammar_matches(g, "a\0b", 3));
    assert_false(tr_grammar_matches(g, "a", 1));
    tr_grammar_free(g);
    /* a pattern need not be NUL-terminated */
    assert_int_equal(tr_grammar_compile_regex("abcdef", 3, NULL, &g, NULL), TR_OK);
    assert_true(m(g, "abc"));
    assert_false(m(g, "abcdef"));
    tr_grammar_free(g);

    g = compile_ok("(?<year>\\d{4})-(?P<mo>\\d{2})-(?'d'\\d{2})");
    assert_true(m(g, "2024-01-31"));
    assert_false(m(g, "2024-1-31"));
    tr_grammar_free(g);

    /* lazy quantifiers: same language */
    g = compile_ok("a+?b??c*?d{1,2}?");
    assert_true(m(g, "ad") && m(g, "aabcccdd") && !m(g, "bd"));
    tr_grammar_free(g);

    /* escapes */
    g = compile_ok("\\n\\t\\r\\f\\v\\0\\x41\\x{42}\\u0043\\u{44}\\cJ\\.\\-\\/");
    assert_true(tr_grammar_matches(g, "\n\t\r\f\v\0ABCD\n.-/", 14));
    tr_grammar_free(g);
    g = compile_ok("\\uD83D\\uDE00|\\u{1F600}x"); /* surrogate pair escape */
    assert_true(m(g, "\xF0\x9F\x98\x80"));
    assert_true(m(g, "\xF0\x9F\x98\x80x"));
    tr_grammar_free(g);
    g = compile_ok("\\é\\中"); /* escaped non-ASCII: itself */
    assert_true(m(g, "é中"));
    tr_grammar_free(g);

    /* literal braces where no quantifier can start */
    g = compile_ok("x{y}{}{");
    assert_true(m(g, "x{y}{}{"));
    tr_grammar_free(g);
}

static void test_classes_and_dot(void **state) {
    (void)state;
    grammar *g = compile_ok(".");
    assert_true(m(g, "a") && m(g, "\xc3\xa9") && m(g, "\xe4\xb8\xad") &&
                m(g, "\xf0\x9f\x98\x80") && m(g, "\r"));
    assert_false(m(g, "\n") || m(g, "") || m(g, "ab"));
    /* only valid UTF-8 */
    assert_false(m(g, "\xc3") || m(g, "\xff") || m(g, "\xed\xa0\x80") ||
                 m(g, "\xc0\x80") || m(g, "\xf4\x90\x80\x80"));
    tr_grammar_free(g);

    g = compile_ok("[^a]");
    assert_true(m(g, "b") && m(g, "\n") && m(g, "\xf4\x8f\xbf\xbf"));
    assert_false(m(g, "a") || m(g, "\xed\xa0\x80"));
    tr_grammar_free(g);

    g = compile_ok("[\\d\\s_-]+");
    assert_true(m(g, "0 9\t_-\v\f\r\n"));
    assert_false(m(g, "a"));
    tr_grammar_free(g);

    g = compile_ok("\\w+");
    assert_true(m(g, "aZ09_"));
    assert_false(m(g, "\xc3\xa9")); /* ASCII \w */
    tr_grammar_free(g);

    g = compile_ok("\\S");
    assert_true(m(g, "\xc2\xa0")); /* NBSP is not ASCII space */
    assert_false(m(g, " "));
    tr_grammar_free(g);

    g = compile_ok("[\\b]");
    assert_true(m(g, "\b"));
    tr_grammar_free(g);

    g = compile_ok("[\\x{7FF}-\\x{800}\\x{FFFF}-\\x{10000}]");
    assert_true(m(g, "\xdf\xbf") && m(g, "\xe0\xa0\x80") &&
                m(g, "\xef\xbf\xbf") && m(g, "\xf0\x90\x80\x80"));
    assert_false(m(g, "\xe0\xa0\x81"));
    tr_grammar_free(g);

    /* surrogates inside a range are skipped, not an error */
    g = compile_ok("[\\x{D000}-\\x{E000}]");
    assert_true(m(g, "\xed\x80\x80") && m(g, "\xee\x80\x80"));
    assert_false(m(g, "\xed\xa0\x80"));
    tr_grammar_free(g);

    g = compile_ok("\\p{Lu}\\p{Ll}+\\P{L}");
    assert_true(m(g, "Abc1") && m(g, "\xc3\x89t\xc3\xa9!"));
    assert_false(m(g, "abc1") || m(g, "Abcd"));
    tr_grammar_free(g);
    g = compile_ok("\\p{Letter}\\p{gc=Nd}\\p{General_Category=Sc}\\p{^L}\\pN");
    assert_true(m(g, "x1$!2"));
    tr_grammar_free(g);
}

static void test_anchors(void **state) {
    (void)state;
    grammar *g = compile_ok("^abc$");
    assert_true(m(g, "abc"));
    assert_false(m(g, "abcabc"));
    tr_grammar_free(g);
    g = compile_ok("a*^b"); /* ^ after a nullable prefix */
    assert_true(m(g, "b"));
    assert_false(m(g, "ab"));
    tr_grammar_free(g);
    g = compile_ok("a$|b"); /* $ inside an alternative */
    assert_true(m(g, "a") && m(g, "b"));
    tr_grammar_free(g);
    g = compile_ok("a(b$|c)d?");
    assert_true(m(g, "ab") && m(g, "ac") && m(g, "acd"));
    assert_false(m(g, "abd"));
    tr_grammar_free(g);
    g = compile_ok("(^a)*b");
    assert_true(m(g, "b") && m(g, "ab"));
    assert_false(m(g, "aab"));
    tr_grammar_free(g);
    g = compile_ok("^$");
    assert_true(m(g, ""));
    assert_false(m(g, "a"));
    tr_grammar_free(g);
}

/* text_memo.c: every text put is found again by its bytes (not its
 * address), others are not, across the table's growth. */
static void test_text_memo(void **state) {
    (void)state;
    gcc cc;
    tr_gcc_init(&cc, NULL, NULL);
    gre_memo m = {0};
    char texts[1000][16];
    gre_node *nodes = tr_gcc_alloc(&cc, 1000 * sizeof *nodes);
    assert_non_null(nodes);
    for (int i = 0; i < 1000; i++) {
        int n = snprintf(texts[i], sizeof texts[i], "t%d", i * 7);
        uint64_t h = tr_gre_memo_hash(texts[i], (size_t)n);
        assert_null(tr_gre_memo_get(&m, texts[i], (size_t)n, h));
        assert_int_equal(tr_gre_memo_put(&cc, &m, texts[i], (size_t)n, h, &nodes[i]), TR_OK);
    }
    for (int i = 0; i < 1000; i++) {
        char copy[16];
        int n = snprintf(copy, sizeof copy, "t%d", i * 7);
        gre_node *got = tr_gre_memo_get(&m, copy, (size_t)n, tr_gre_memo_hash(copy, (size_t)n));
        assert_ptr_equal(got, &nodes[i]); /* its own entry: each text has its node */
        n = snprintf(copy, sizeof copy, "t%d", i * 7 + 1); /* never put */
        assert_null(tr_gre_memo_get(&m, copy, (size_t)n, tr_gre_memo_hash(copy, (size_t)n)));
    }
    tr_gcc_deinit(&cc);
}

static void test_stats_and_dump(void **state) {
    (void)state;
    grammar *g = compile_ok("(a|b)*abb");
    grammar_stats s;
    tr_grammar_get_stats(g, &s);
    assert_true(s.nfa_states > 0);
    assert_true(s.dfa_states_raw >= s.dfa_states);
    assert_int_equal(s.dfa_states, 5); /* 4 live + dead: the textbook DFA */
    assert_int_equal(s.byte_classes, 3); /* a, b, everything else */
    assert_true(s.bytes > 0 && s.compile_ns > 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    tr_grammar_dump(g, f);
    fclose(f);
    assert_non_null(strstr(buf, "5 states"));
    assert_non_null(strstr(buf, "(accept)"));
    free(buf);
    /* references */
    assert_ptr_equal(tr_grammar_ref(g), g);
    tr_grammar_free(g);
    assert_true(m(g, "abb"));
    tr_grammar_free(g);
    tr_grammar_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test(test_other_limits),
        cmocka_unit_test(test_hostile_patterns_bounded),
        cmocka_unit_test(test_basics),
        cmocka_unit_test(test_classes_and_dot),
        cmocka_unit_test(test_anchors),
        cmocka_unit_test(test_text_memo),
        cmocka_unit_test(test_stats_and_dump),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
