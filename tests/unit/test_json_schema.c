/* test_json_schema.c — the JSON Schema compiler, keyword by keyword.
 *
 * Each case compiles a schema (strict mode unless said) and feeds JSON
 * texts byte by byte through the real matcher (every byte checked
 * against its mask, then end-of-generation) and through the reference
 * recognizer of the printed grammar text (test_json_gbnf.h): both must
 * accept exactly the texts listed as valid. Then: error messages (code,
 * keyword, JSON pointer), strict vs lenient and its warnings, whitespace
 * modes (pretty = Python's json.dumps(indent=2) byte for byte), deep
 * recursion, budgets, Python-compatible serialization, and exhaustive
 * differential checks of numeric ranges and string lengths against the
 * compiler's own validator.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "grammar/json/json_internal.h"
#include "tests/unit/test_json_gbnf.h"
#include "tests/unit/test_json_util.h"

static grammar_vocab *V;

static grammar *compile_opt(const char *schema, const grammar_json_options *o, tr_diag *d) {
    grammar *g = NULL;
    tr_status st = tr_grammar_compile_json_schema(schema, strlen(schema), o, NULL, &g, d);
    if (st) {
        fprintf(stderr, "compile failed (%s): %s\n  schema: %s\n", tr_status_name(st), d->message,
                schema);
        return NULL;
    }
    return g;
}

/* Accepted by the matcher; the reference recognizer of the same text must agree. */
static bool accepts_opt(const char *schema, const grammar_json_options *o, const char *text) {
    tr_diag d;
    grammar *g = compile_opt(schema, o, &d);
    assert_non_null(g);
    bool m = tj_accepts(g, V, text, strlen(text));
    char *gt;
    size_t gn;
    assert_int_equal(tr_grammar_json_schema_to_ebnf(schema, strlen(schema), o, NULL, &gt, &gn, &d), TR_OK);
    tg_gram *r = tg_parse(gt);
    bool ref = tg_accepts(r, text, strlen(text));
    if (m != ref) fprintf(stderr, "matcher %d reference %d on %s\n  grammar:\n%s", m, ref, text, gt);
    assert_int_equal(m, ref);
    tg_free(r);
    free(gt);
    tr_grammar_free(g);
    return m;
}

static bool accepts(const char *schema, const char *text) {
    grammar_json_options o;
    tr_grammar_json_options_default(&o);
    return accepts_opt(schema, &o, text);
}

/* The default options with numbers in mode m (GRAMMAR_JSON_NUM_*). */
static grammar_json_options numbers_opt(grammar_json_numbers m) {
    grammar_json_options o;
    tr_grammar_json_options_default(&o);
    o.numbers = m;
    return o;
}

/* Every text of yes is accepted, every text of no rejected (NULL-ended),
 * with options o. */
static void check_opt(const char *schema, const grammar_json_options *o, const char *const *yes,
                      const char *const *no) {
    for (int i = 0; yes && yes[i]; i++) {
        if (!accepts_opt(schema, o, yes[i])) fail_msg("should accept %s under %s", yes[i], schema);
    }
    for (int i = 0; no && no[i]; i++) {
        if (accepts_opt(schema, o, no[i])) fail_msg("should reject %s under %s", no[i], schema);
    }
}

/* The same with the default options. */
static void check(const char *schema, const char *const *yes, const char *const *no) {
    grammar_json_options o;
    tr_grammar_json_options_default(&o);
    check_opt(schema, &o, yes, no);
}

/* The same in full-number mode (every JSON spelling of a valid value:
 * 1.0 and 1e3 are integers). */
static void check_full(const char *schema, const char *const *yes, const char *const *no) {
    grammar_json_options o = numbers_opt(GRAMMAR_JSON_NUM_FULL);
    check_opt(schema, &o, yes, no);
}

/* Whether t is a canonical integer: an optional minus and digits, no
 * leading zero, not -0. */
static bool plain_int(const char *t, size_t n) {
    size_t i = n && t[0] == '-';
    if (i == n || (t[i] == '0' && (n > i + 1 || i == 1))) return false;
    for (; i < n; i++)
        if (t[i] < '0' || t[i] > '9') return false;
    return true;
}

#define Y(...) ((const char *const[]){__VA_ARGS__, NULL})

/* ---- types and values ---- */

static void test_types(void **s) {
    (void)s;
    check("{\"type\":\"null\"}", Y("null"), Y("0", "\"null\"", "nul", "null ", " null"));
    check("{\"type\":\"boolean\"}", Y("true", "false"), Y("1", "null", "True"));
    check_full("{\"type\":\"integer\"}", Y("0", "-0", "12", "-12", "1.0", "1.000", "1e3", "2E+2"),
               Y("1.5", "01", "1.", ".5", "+1", "1e-2", "\"1\"", "-"));
    check_full("{\"type\":\"number\"}", Y("0", "1.5", "-0.25", "1e-5", "2E+10", "1e400"),
               Y("01", "1.", ".5", "+1", "NaN", "Infinity", "1e"));
    check("{\"type\":\"string\"}", Y("\"\"", "\"a b\"", "\"\\u00e9\\n\\\"\"", "\"\xc3\xa9\"",
                                     "\"\\ud83d\\ude00\""),
          Y("\"\\ud83d\"", "\"\n\"", "\"\\x\"", "'a'", "\"a"));
    check("{\"type\":[\"string\",\"null\"]}", Y("null", "\"x\""), Y("1", "[]"));
    check("true", Y("null", "[1,{\"a\":[]}]", "{\"x\": {\"y\": null}}", "\"s\"", "-1.5e3"),
          Y("", "[1,]", "{\"a\"}", "{a:1}"));
    check("{\"type\":\"object\"}", Y("{}", "{\"a\": [1, 2]}"), Y("[]", "1"));
    check("{\"not\":{\"type\":\"integer\"}}", Y("1.5", "\"x\"", "null"), Y("1", "2.0", "-3"));
}

static void test_enum_const(void **s) {
    (void)s;
    check("{\"enum\":[\"a\",1,null,{\"k\":[true]}]}",
          Y("\"a\"", "1", "1.0", "null", "{\"k\": [true]}", "{\"k\":[true]}"),
          Y("\"b\"", "2", "{\"k\": [false]}", "{}", "[true]"));
    check("{\"const\":1e16}", Y("1e+16", "10000000000000000", "10000000000000000.0"), Y("1e+15"));
    check("{\"const\":\"a/b\\n\"}", Y("\"a/b\\n\"", "\"a\\/b\\n\"", "\"a/b\\u000a\""),
          Y("\"a/b\"", "\"a/b\\r\""));
    /* enum values that fail the rest of the schema are dropped */
    check("{\"type\":\"string\",\"maxLength\":2,\"enum\":[\"ab\",\"abc\",1]}", Y("\"ab\""),
          Y("\"abc\"", "1"));
    check("{\"type\":\"string\",\"not\":{\"enum\":[\"a\",\"b\"]}}", Y("\"c\"", "\"ab\"", "\"\""),
          Y("\"a\"", "\"b\"", "1"));
}

/* ---- numbers ---- */

static void test_integer_ranges(void **s) {
    (void)s;
    check_full("{\"type\":\"integer\",\"minimum\":-15,\"maximum\":230}",
          Y("-15", "-1", "0", "-0", "9", "10", "99", "100", "199", "230", "230.0"),
          Y("-16", "231", "1000", "-100", "2300", "1e2"));
    check("{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":10}", Y("1", "9"),
          Y("0", "10", "-0"));
    check_full("{\"type\":\"integer\",\"minimum\":5}", Y("5", "1000000000000000000000", "1e+20"),
               Y("4", "-5"));
    check("{\"type\":\"integer\",\"minimum\":2.5,\"maximum\":4.5}", Y("3", "4"), Y("2", "5", "3.5"));
    /* draft-04 boolean exclusiveMinimum */
    check("{\"type\":\"integer\",\"minimum\":3,\"exclusiveMinimum\":true}", Y("4"), Y("3"));
}

static void test_number_ranges(void **s) {
    (void)s;
    check("{\"type\":\"number\",\"minimum\":0.5,\"exclusiveMaximum\":2.25}",
          Y("0.5", "0.50", "0.6", "1", "1.999", "2.2", "2.24999", "2"),
          Y("0.49999", "2.25", "2.250", "2.3", "3", "-1", "0"));
    check("{\"type\":\"number\",\"minimum\":-1.5,\"maximum\":-0.25}",
          Y("-1.5", "-1.0", "-0.25", "-0.5", "-1.25"), Y("-1.51", "-0.24", "0", "-0", "1"));
    check("{\"type\":\"number\",\"minimum\":0}", Y("0", "-0", "-0.0", "3.5", "1e-7", "1e+30"),
          Y("-0.1", "-1e-7"));
    check("{\"type\":\"number\",\"maximum\":0,\"exclusiveMaximum\":0}", Y("-1", "-0.001"),
          Y("0", "-0", "0.0", "1"));
}

static void test_multiple_of(void **s) {
    (void)s;
    check_full("{\"type\":\"integer\",\"multipleOf\":7}", Y("0", "7", "-14", "700", "7.0"),
               Y("1", "8", "15", "70.5"));
    check("{\"type\":\"integer\",\"multipleOf\":3,\"minimum\":1,\"maximum\":20}", Y("3", "18"),
          Y("0", "21", "4"));
    check("{\"type\":\"number\",\"multipleOf\":0.01}", Y("1", "1.2", "1.25", "1.250", "-0.07"),
          Y("1.255", "0.001"));
    check("{\"type\":\"number\",\"multipleOf\":1.0}", Y("1", "2.0"), Y("2.5"));
    /* decimal steps other than 10^-n: the value times 10^q divisible by p */
    check("{\"type\":\"number\",\"multipleOf\":0.25}",
          Y("0", "1", "0.25", "-0.75", "2.5", "2.50", "10.000", "-3"),
          Y("0.1", "0.125", "1.3", "0.2500001", "2.05"));
    check("{\"type\":\"number\",\"multipleOf\":1.5,\"minimum\":0,\"maximum\":10}",
          Y("0", "1.5", "3", "4.50", "9.0"), Y("1", "2", "0.75", "10", "-1.5"));
    check_full("{\"type\":\"number\",\"multipleOf\":0.3}", Y("0.3", "0.9", "3", "-1.2", "6.00"),
               Y("0.1", "1", "0.31", "0.03"));
    check("{\"type\":\"number\",\"multipleOf\":0.5,\"allOf\":[{\"multipleOf\":0.75}]}",
          Y("0", "1.5", "3", "-4.5"), Y("0.5", "0.75", "1", "2.25"));
    /* a step whose automaton would pass the budget is refused with its
     * numbers */
    const char *huge = "{\"type\":\"number\",\"multipleOf\":123456.5}";
    grammar *g = NULL;
    tr_diag d = {0};
    assert_int_equal(tr_grammar_compile_json_schema(huge, strlen(huge), NULL, NULL, &g, &d),
                     TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(d.message, "the step 1234565 / 10^1 needs more than 100000"));
}

/* Decimal steps against the validator as oracle: values k / 100 in
 * [-20, 20] (every 7th), each also with a trailing zero, accepted
 * exactly when valid. */
static void test_multiple_of_decimal_exhaustive(void **s) {
    (void)s;
    const char *schemas[] = {
        "{\"type\":\"number\",\"multipleOf\":0.25}",
        "{\"type\":\"number\",\"multipleOf\":0.12}",
        "{\"type\":\"number\",\"multipleOf\":2.5,\"minimum\":-7}",
        "{\"type\":\"number\",\"multipleOf\":0.35,\"allOf\":[{\"multipleOf\":0.5}]}",
    };
    grammar_json_options o;
    tr_grammar_json_options_default(&o);
    for (size_t k = 0; k < TR_ARRAY_LEN(schemas); k++) {
        const char *sc = schemas[k];
        tr_diag d;
        grammar *g = compile_opt(sc, &o, &d);
        assert_non_null(g);
        for (int v = -2000; v <= 2000; v += 7)
            for (int w = 0; w < 2; w++) {
                char t[48];
                int a = v < 0 ? -v : v;
                snprintf(t, sizeof t, "%s%d.%02d%s", v < 0 ? "-" : "", a / 100, a % 100,
                         w ? "0" : "");
                bool valid;
                assert_int_equal(tr_js_check_instance(sc, strlen(sc), t, strlen(t), &valid, &d),
                                 TR_OK);
                if (tj_accepts(g, V, t, strlen(t)) != valid)
                    fail_msg("%s: %s accepted %d, valid %d", sc, t, !valid, valid);
            }
        tr_grammar_free(g);
    }
}

/* Every integer in [-300, 300] against ranges, with the validator as
 * oracle: in full mode exactly the valid texts, in canonical mode those
 * of them an integer schema writes as plain digits. */
static void test_ranges_exhaustive(void **s) {
    (void)s;
    const char *schemas[] = {
        "{\"type\":\"integer\",\"minimum\":-17,\"maximum\":123}",
        "{\"type\":\"integer\",\"exclusiveMinimum\":-100,\"exclusiveMaximum\":99}",
        "{\"type\":\"number\",\"minimum\":-2.5,\"maximum\":7.25}",
        "{\"type\":\"number\",\"exclusiveMinimum\":0.1,\"exclusiveMaximum\":100.01}",
        "{\"type\":\"integer\",\"minimum\":100}",
        "{\"type\":\"number\",\"maximum\":-9.5}",
        "{\"type\":\"integer\",\"multipleOf\":6,\"minimum\":-50,\"maximum\":250}",
    };
    for (size_t k = 0; k < 2 * TR_ARRAY_LEN(schemas); k++) {
        bool full = k & 1;
        grammar_json_options o = numbers_opt(full ? GRAMMAR_JSON_NUM_FULL : GRAMMAR_JSON_NUM_CANONICAL);
        const char *sc = schemas[k / 2];
        bool plain = !full && strstr(sc, "integer");
        tr_diag d;
        grammar *g = compile_opt(sc, &o, &d);
        assert_non_null(g);
        int n = small_scale_json() ? 60 : 300;
        for (int i = -n; i <= n; i++)
            for (int frac = 0; frac < 4; frac++) {
                char t[64];
                static const char *const fr[] = {"", ".5", ".25", ".0"};
                snprintf(t, sizeof t, "%s%d%s", i < 0 ? "-" : "", i < 0 ? -i : i, fr[frac]);
                bool valid;
                assert_int_equal(tr_js_check_instance(sc, strlen(sc), t, strlen(t), &valid, &d),
                                 TR_OK);
                bool want = valid && (!plain || plain_int(t, strlen(t)));
                bool acc = tj_accepts(g, V, t, strlen(t));
                if (acc != want)
                    fail_msg("%s (%s): %s accepted %d, valid %d", sc, full ? "full" : "canonical", t,
                             acc, valid);
            }
        tr_grammar_free(g);
    }
}

/* Canonical numbers (the default): "integer" is an optional minus and
 * digits (no fraction, exponent, leading zero or -0), ranges and steps
 * as exact as in full mode; other numbers take at most
 * GRAMMAR_JSON_MAX_FRAC_DIGITS fraction and GRAMMAR_JSON_MAX_EXP_DIGITS
 * exponent digits; enum / const values keep every spelling. */
static void test_canonical_numbers(void **s) {
    (void)s;
    assert_int_equal(GRAMMAR_JSON_MAX_FRAC_DIGITS, 20);
    assert_int_equal(GRAMMAR_JSON_MAX_EXP_DIGITS, 3);
    check("{\"type\":\"integer\"}", Y("0", "-7", "123", "1000000000000000000000"),
          Y("1.0", "1e5", "01", "-0", "-01", "1E5", "0.0", "-0.0", "1.5"));
    check("{\"type\":[\"integer\",\"null\"]}", Y("3", "null", "-3"), Y("3.0", "3e0", "-0"));
    check("{\"type\":\"integer\",\"minimum\":-15,\"maximum\":230}",
          Y("-15", "-1", "0", "9", "10", "199", "230"),
          Y("-0", "230.0", "2e2", "-16", "231", "010"));
    check("{\"type\":\"integer\",\"exclusiveMinimum\":-1,\"exclusiveMaximum\":10}", Y("0", "9"),
          Y("-0", "-1", "10", "9.0"));
    check("{\"type\":\"integer\",\"maximum\":0}", Y("0", "-1", "-123456789012"),
          Y("-0", "1", "-1.0", "-1e3"));
    check("{\"type\":\"integer\",\"minimum\":5}", Y("5", "1000000000000000000000"),
          Y("1e+20", "5.0", "4"));
    check("{\"type\":\"integer\",\"multipleOf\":7}", Y("0", "7", "-14", "700"),
          Y("7.0", "7e1", "-0", "1", "070"));
    check("{\"type\":\"integer\",\"multipleOf\":3,\"minimum\":-20,\"maximum\":20}",
          Y("-18", "0", "3", "18"), Y("-0", "3.0", "4", "21"));
    /* a number with an integral step is still a number */
    check("{\"type\":\"number\",\"multipleOf\":2}", Y("4", "4.0", "-6"), Y("3", "4.5"));
    /* enum / const values: every spelling of the value, as before */
    check("{\"enum\":[1.0,2]}", Y("1", "1.0", "2", "2.00"), Y("3"));
    check("{\"type\":\"integer\",\"const\":3}", Y("3", "3.0"), Y("4"));
    /* numbers: 20 fraction digits, 3 exponent digits */
    check("{\"type\":\"number\"}",
          Y("0.12345678901234567890", "-0.00012345678901234567", "1e308", "5e-324", "1E+001",
            "1.5"),
          Y("0.123456789012345678901", "1e1000", "1e0001", "1.000000000000000000000"));
    check("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}",
          Y("0.99999999999999999999", "1.00000000000000000000", "0", "1"),
          Y("0.999999999999999999999", "1.000000000000000000000"));
    check("{\"type\":\"number\",\"exclusiveMinimum\":0}",
          Y("0.00000000000000000001", "1e5", "0.5e-300"),
          Y("0.000000000000000000001", "0", "1e1000", "0.5e-3000"));
    check("{\"type\":\"number\",\"minimum\":0.5,\"exclusiveMaximum\":2.25}",
          Y("2.24999999999999999999", "0.50000000000000000000", "1.12345678901234567890"),
          Y("2.249999999999999999999", "1.123456789012345678901"));
    check("{\"type\":\"number\",\"minimum\":150}", Y("150", "2e3", "1e999", "5e003"),
          Y("1e1000", "5e0003", "1e1"));
    /* unconstrained values too */
    check("true", Y("[1.5, 1e308, 0.12345678901234567890]"), Y("1e1000", "[0.123456789012345678901]"));
    /* full mode: the JSON grammar as before */
    check_full("{\"type\":\"number\"}", Y("0.123456789012345678901", "1e1000", "1e0001"), NULL);
    check_full("{\"type\":\"number\",\"minimum\":150}", Y("1e1000", "5e0003"), Y("1e1"));
    check_full("{\"type\":\"integer\",\"minimum\":0}", Y("1.0", "1e5", "7"), Y("-1", "-0.0e1"));
    check_full("true", Y("1e1000", "[0.123456789012345678901]"), NULL);
    /* an unknown mode is refused, naming it */
    grammar_json_options o = numbers_opt((grammar_json_numbers)7);
    grammar *g = NULL;
    tr_diag d;
    assert_int_equal(tr_grammar_compile_json_schema("{}", 2, &o, NULL, &g, &d),
                     TR_ERR_INVALID_ARG);
    assert_non_null(strstr(d.message, "unknown numbers mode 7"));
    assert_null(g);
}

/* ---- strings ---- */

static void test_string_lengths(void **s) {
    (void)s;
    check("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
          Y("\"ab\"", "\"abc\"", "\"\xc3\xa9\xc3\xa9\"", "\"\\n\\t\"", "\"\\u0001x\"",
            "\"\xf0\x9f\x98\x80x\""),
          Y("\"a\"", "\"abcd\"", "\"\xc3\xa9\"", "\"\""));
    /* counted strings take Python's spellings only (a smaller DFA per
     * position): \uXXXX of a printable character is not produced */
    check("{\"type\":\"string\",\"maxLength\":3}", NULL, Y("\"\\u00e9\"", "\"\\ud83d\\ude00\""));
    check("{\"type\":\"string\"}", Y("\"\\u00e9\"", "\"\\ud83d\\ude00\""), NULL);
    /* large counts stay grammar repetitions, not a DFA of copies */
    check("{\"type\":\"string\",\"maxLength\":300}", Y("\"\"", "\"abc\""), NULL);
    char big[400];
    memset(big, 'x', sizeof big);
    big[0] = '"';
    big[302] = '"';
    big[303] = 0;
    check("{\"type\":\"string\",\"maxLength\":301}", Y(big), NULL);
    check("{\"type\":\"string\",\"maxLength\":300}", NULL, Y(big));
    /* a long maxLength beside a pattern or format is lowered to what the
     * product automaton fits (fewer texts, never more): 2,048 code points
     * at most, fewer for larger patterns, and a counted repetition takes
     * at most max_repeat (1,000) */
    char *lng = malloc(1001 + 3);
    assert_non_null(lng);
    lng[0] = '"';
    memset(lng + 1, 'a', 1001);
    lng[1002] = '"';
    lng[1003] = 0;
    const char *pat = "{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"maxLength\":100000}";
    check(pat, Y("\"abc\""), Y("\"a1\"", "\"\"", lng));
    lng[1001] = '"', lng[1002] = 0; /* 1,000 letters */
    check(pat, Y(lng), NULL);
    free(lng);
    /* (an automaton terminal: the grammar text export refuses it) */
    const char *em = "{\"type\":\"string\",\"format\":\"email\",\"maxLength\":1024}";
    tr_diag d;
    grammar *g = compile_opt(em, NULL, &d);
    assert_non_null(g);
    const char *ok = "\"jane.doe@example.com\"", *bad = "\"jane.doe\"";
    assert_true(tj_accepts(g, V, ok, strlen(ok)));
    assert_false(tj_accepts(g, V, bad, strlen(bad)));
    tr_grammar_free(g);
}

static void test_patterns(void **s) {
    (void)s;
    check("{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"maxLength\":4}", Y("\"ab\"", "\"abcd\""),
          Y("\"abcde\"", "\"\"", "\"aB\""));
    check("{\"type\":\"string\",\"pattern\":\"ab\"}", Y("\"ab\"", "\"xaby\"", "\"\\u0000ab\""),
          Y("\"a b\"", "\"\""));
    /* ECMAScript: . excludes line terminators, \s takes Unicode spaces */
    check("{\"type\":\"string\",\"pattern\":\"^a.b$\"}", Y("\"axb\"", "\"a\xc3\xa9" "b\""),
          Y("\"a\\nb\"", "\"a\\rb\"", "\"a\xe2\x80\xa8" "b\""));
    check("{\"type\":\"string\",\"pattern\":\"^\\\\s$\"}", Y("\" \"", "\"\xc2\xa0\"", "\"\\t\""),
          Y("\"x\""));
    check("{\"type\":\"string\",\"pattern\":\"^x|y$\"}", Y("\"xa\"", "\"ay\"", "\"x\""),
          Y("\"ax\"", "\"ya\""));
    check("{\"type\":\"string\",\"pattern\":\"^[a-z]+(-[a-z]+)*$\",\"maxLength\":5}",
          Y("\"ab-cd\"", "\"a-b-c\""), Y("\"ab-cde\"", "\"-a\""));
    check("{\"type\":\"string\",\"pattern\":\"a\",\"not\":{\"pattern\":\"b\"}}", Y("\"a\"", "\"ca\""),
          Y("\"ab\"", "\"c\""));
    /* lookaheads at the start, and the tempered dot */
    check("{\"type\":\"string\",\"pattern\":\"^(?!foo)[a-z]+$\"}", Y("\"bar\"", "\"fo\"", "\"afoo\""),
          Y("\"foo\"", "\"fooo\"", "\"\"", "\"Bar\""));
    check("{\"type\":\"string\",\"pattern\":\"^((?!mode)(?!Mode).)*$\"}",
          Y("\"abc\"", "\"mod\"", "\"\"", "\"MODE\""),
          Y("\"xmodex\"", "\"Mode\"", "\"a\\nb\"", "\"mode\""));
    check("{\"type\":\"string\",\"pattern\":\"^(?=[^=]+$)(?!\\\\s+$)(.|\\\\n)+$\"}",
          Y("\"a b\"", "\"x\\ny\""), Y("\"a=b\"", "\"   \"", "\"\""));
    check("{\"type\":\"string\",\"pattern\":\"^(?![i|I][o|O][b|B])\"}", Y("\"abc\"", "\"iox\"", "\"\""),
          Y("\"iobroker\"", "\"IOB\"", "\"|||\""));
    check("{\"type\":\"string\",\"pattern\":\"^(?=.*[0-9])(?=.*[a-z]).{4,}$\"}",
          Y("\"ab12\"", "\"1xyz\""), Y("\"abcd\"", "\"1234\"", "\"a1\""));
}

/* A schema whose regex would be too large: the text export refuses it,
 * saying so, and the compile takes it (its automaton as a terminal). */
static grammar *compile_automaton_only_opt(const char *sc, const grammar_json_options *o) {
    char *gt = NULL;
    size_t gn;
    tr_diag d;
    assert_int_equal(tr_grammar_json_schema_to_ebnf(sc, strlen(sc), o, NULL, &gt, &gn, &d),
                     TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(d.message, "too complex"));
    grammar *g = compile_opt(sc, o, &d);
    assert_non_null(g);
    return g;
}

static grammar *compile_automaton_only(const char *sc) {
    return compile_automaton_only_opt(sc, NULL);
}

/* The matcher and the compiler's validator agree on t (plain: the
 * grammar takes only the valid texts that are canonical integers);
 * counts it. */
static void agrees_plain(grammar *g, const char *sc, bool plain, const char *t, size_t tl,
                         int *yes, int *no) {
    bool valid;
    tr_diag d;
    assert_int_equal(tr_js_check_instance(sc, strlen(sc), t, tl, &valid, &d), TR_OK);
    bool want = valid && (!plain || plain_int(t, tl));
    bool acc = tj_accepts(g, V, t, tl);
    if (acc != want) fail_msg("%s: %s accepted %d, valid %d", sc, t, acc, valid);
    *yes += want;
    *no += !want;
}

static void agrees_with_validator(grammar *g, const char *sc, const char *t, size_t tl,
                                  int *yes, int *no) {
    agrees_plain(g, sc, false, t, tl, yes, no);
}

/* String constraints whose regex would be too large (a pattern with a
 * length; a count of words): the text export refuses them, the compile
 * names their automaton as a terminal. Random strings near and past the
 * bounds, with escapes, against the compiler's validator. */
static void test_automaton_terminals(void **s) {
    (void)s;
    const char *schemas[] = {
        "{\"type\":\"string\",\"pattern\":\"[a-zA-Z0-9_.-]+\",\"minLength\":3,\"maxLength\":255}",
        "{\"type\":\"string\",\"pattern\":\"^[a-z\\\\d]+(?:-[a-z\\\\d]+)*$\",\"minLength\":1,"
        "\"maxLength\":200}",
        "{\"type\":\"string\",\"pattern\":\"a[^b]*b\",\"minLength\":4,\"maxLength\":250}",
    };
    /* units as Python's json.dumps spells them, and their decoded length */
    static const char *const units[] = {"a", "z", "7", "-", "_", ".", " ", "A", "\\n", "\\\"",
                                        "\\\\", "\\t", "\\u0001", "b", "c", "a-"};
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int n = small_scale_json() ? 80 : 400;
    for (size_t k = 0; k < TR_ARRAY_LEN(schemas); k++) {
        const char *sc = schemas[k];
        grammar *g = compile_automaton_only(sc);
        int yes = 0, no = 0;
        for (int i = 0; i < n; i++) {
            char t[4096];
            size_t m = 0;
            t[m++] = '"';
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int len = (int)(rng >> 33) % 320;
            bool plain = (rng >> 20) % 3 != 0; /* mostly slug-like units */
            for (int j = 0; j < len; j++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                uint32_t u = (uint32_t)(rng >> 35) % (plain ? 4 : TR_ARRAY_LEN(units));
                if (plain && u == 3 && j % 3) u = 0; /* fewer dashes */
                const char *un = units[u];
                memcpy(t + m, un, strlen(un));
                m += strlen(un);
            }
            t[m++] = '"';
            t[m] = 0;
            agrees_with_validator(g, sc, t, m, &yes, &no);
        }
        if (yes < n / 20 || no < n / 20) fail_msg("%s: %d valid, %d invalid", sc, yes, no);
        tr_grammar_free(g);
    }
}

/* Number constraints whose regex would be too large (a step with a
 * bound, steps combined through not): the text export refuses them, the
 * compile names their automaton (the number's own bytes) as a terminal.
 * Random integers, fractions and exponent forms against the validator. */
static void test_automaton_numbers(void **s) {
    (void)s;
    const char *schemas[] = {
        "{\"type\":\"number\",\"multipleOf\":11,\"minimum\":100}",
        "{\"type\":\"integer\",\"minimum\":1,\"anyOf\":[{\"multipleOf\":3},{\"multipleOf\":5}],"
        "\"not\":{\"multipleOf\":8}}",
    };
    uint64_t rng = 4242;
    int n = small_scale_json() ? 150 : 600;
    for (size_t k = 0; k < 2 * TR_ARRAY_LEN(schemas); k++) {
        bool full = k & 1;
        grammar_json_options o = numbers_opt(full ? GRAMMAR_JSON_NUM_FULL : GRAMMAR_JSON_NUM_CANONICAL);
        const char *sc = schemas[k / 2];
        bool plain = !full && strstr(sc, "integer");
        grammar *g = compile_automaton_only_opt(sc, &o);
        int yes = 0, no = 0;
        for (int i = 0; i < n; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            long long v = (long long)((rng >> 33) % 2000) - 300;
            if ((rng >> 20) % 4 == 0) v = v * 11; /* more multiples */
            if ((rng >> 22) % 4 == 1) v = v * 15;
            static const char *const tails[] = {"", "", "", ".0", ".5", "e1", ".00", "0"};
            char t[64];
            const char *tail = tails[(rng >> 40) % 8];
            size_t tl = (size_t)snprintf(t, sizeof t, "%lld%s", v, tail);
            if (tail[0] != 'e') {
                agrees_plain(g, sc, plain, t, tl, &yes, &no);
                continue;
            }
            /* exponent forms of multiples are left out (sound): never an
             * invalid one accepted */
            bool valid;
            tr_diag d;
            assert_int_equal(tr_js_check_instance(sc, strlen(sc), t, tl, &valid, &d), TR_OK);
            if (tj_accepts(g, V, t, tl) && !valid) fail_msg("%s: %s accepted, invalid", sc, t);
        }
        if (yes < n / 20 || no < n / 20) fail_msg("%s: %d valid, %d invalid", sc, yes, no);
        /* the number's own bytes: no JSON string escapes (110 spelled
         * with \u0031) */
        assert_false(tj_accepts(g, V, "\\u0031\\u0031\\u0030", 18));
        assert_true(tj_accepts(g, V, "330", 3));
        tr_grammar_free(g);
    }
}

/* Single-key objects {"K": 7 or true} whose keys are near names (a
 * name, cut, a character changed to one of changes, one appended, or
 * the prefix x-), against the compiler's validator; both verdicts must
 * occur. */
static void keys_agree(grammar *g, const char *sc, const char *const *names, int nn,
                       uint64_t rng, const char *changes) {
    int yes = 0, no = 0, n = small_scale_json() ? 150 : 600;
    for (int i = 0; i < n; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        char key[200];
        const char *base = names[(rng >> 33) % (uint64_t)nn];
        size_t kl = strlen(base);
        memcpy(key, base, kl + 1);
        switch ((rng >> 40) % 5) {
        case 1: key[1 + (rng >> 45) % (kl - 1)] = 0; break;
        case 2: key[(rng >> 45) % kl] = changes[(rng >> 50) % 4]; break;
        case 3: key[kl] = changes[3], key[kl + 1] = 0; break;
        case 4: memcpy(key, "x-", 2); break;
        default: break;
        }
        char t[256];
        size_t tl = (size_t)snprintf(t, sizeof t, "{\"%s\": %s}", key, (rng >> 55) & 1 ? "7" : "true");
        agrees_with_validator(g, sc, t, tl, &yes, &no);
    }
    if (yes < n / 10 || no < n / 10) fail_msg("%d valid, %d invalid", yes, no);
}

/* Keys of additional properties whose regex would be too large (many
 * listed names, a patternProperties region): the text export refuses
 * them, the compile names the key automaton as a terminal. Single-key
 * objects with random keys near the names, against the validator. */
static void test_automaton_keys(void **s) {
    (void)s;
    static const char *const words[] = {"Align", "Consecutive", "Macros", "Assignments",
                                        "Bitfields", "Escaped", "Newlines", "Operands",
                                        "Trailing", "Comments", "Allow", "Short", "Blocks"};
    enum { NN = 120 };
    static char names[NN][64], sc[16384];
    size_t m = (size_t)snprintf(sc, sizeof sc, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < NN; i++) {
        snprintf(names[i], sizeof names[i], "%s%s%s%s", words[i % 13], words[(i / 13 + 3) % 13],
                 words[(i * 5 + 1) % 13], i % 2 ? words[(i * 7 + 2) % 13] : "");
        m += (size_t)snprintf(sc + m, sizeof sc - m, "%s\"%s\":{\"type\":\"boolean\"}",
                              i ? "," : "", names[i]);
    }
    snprintf(sc + m, sizeof sc - m, "},\"patternProperties\":{\"^x-\":{}},"
                                    "\"additionalProperties\":{\"type\":\"integer\"}}");
    grammar *g = compile_automaton_only(sc);
    const char *np[NN];
    for (int i = 0; i < NN; i++) np[i] = names[i];
    keys_agree(g, sc, np, NN, 12345, "aZx-");
    tr_grammar_free(g);
}

/* Any key but many long listed names (questions as keys): the
 * complement of their trie spells every prefix with every other
 * character, a regex past max_pattern_bytes; the compile names its
 * automaton instead. The exported text keeps the regex and so does not
 * compile (its terminal is over the budget). Random keys near the names
 * against the validator. */
static void test_automaton_key_complement(void **s) {
    (void)s;
    static const char *const words[] = {"Which", "size", "would", "best", "describe", "the",
                                        "place", "of", "work", "you", "are", "in", "now"};
    enum { NN = 40 }; /* distinct: the first two words are i's base-13 digits */
    static char names[NN][160], sc[16384];
    size_t m = (size_t)snprintf(sc, sizeof sc, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < NN; i++) {
        size_t k = 0;
        for (int w = 0; w < 8; w++)
            k += (size_t)snprintf(names[i] + k, sizeof names[i] - k, "%s%s", w ? " " : "",
                                  words[w == 0 ? i % 13 : w == 1 ? i / 13 : (i * 7 + w * 5) % 13]);
        m += (size_t)snprintf(sc + m, sizeof sc - m, "%s\"%s\":{\"type\":\"boolean\"}",
                              i ? "," : "", names[i]);
    }
    snprintf(sc + m, sizeof sc - m, "},\"additionalProperties\":{\"type\":\"integer\"}}");
    char *gt = NULL;
    size_t gn;
    tr_diag d;
    tr_status st = tr_grammar_json_schema_to_ebnf(sc, strlen(sc), NULL, NULL, &gt, &gn, &d);
    if (st) fail_msg("export: %s", d.message);
    grammar *g = NULL;
    assert_int_equal(tr_grammar_compile_ebnf(gt, gn, NULL, &g, &d), TR_ERR_LIMIT);
    assert_non_null(strstr(d.message, "max_pattern_bytes"));
    free(gt);
    g = compile_opt(sc, NULL, &d);
    assert_non_null(g);
    const char *np[NN];
    for (int i = 0; i < NN; i++) np[i] = names[i];
    keys_agree(g, sc, np, NN, 777, "aZx?");
    tr_grammar_free(g);
}

static void test_formats(void **s) {
    (void)s;
    check("{\"format\":\"date\"}", Y("\"2020-02-29\"", "\"1999-12-31\"", "5"),
          Y("\"2019-02-29\"", "\"2020-13-01\"", "\"0000-01-01\"", "\"2020-1-01\""));
    check("{\"format\":\"date-time\"}", Y("\"2020-01-01T10:20:30Z\"", "\"2020-01-01t10:20:30.5+01:00\""),
          Y("\"2020-01-01 10:20:30Z\"", "\"2020-01-01T24:00:00Z\""));
    check("{\"format\":\"email\"}", Y("\"a.b@example.com\""), Y("\"a@\"", "\"@b.com\"", "\"ab\""));
    check("{\"format\":\"ipv4\"}", Y("\"192.168.0.1\""), Y("\"256.1.1.1\"", "\"01.1.1.1\""));
    check("{\"format\":\"ipv6\"}", Y("\"::1\"", "\"fe80::1:2\"", "\"::ffff:1.2.3.4\""),
          Y("\"1:::2\"", "\"12345::\""));
    check("{\"format\":\"uuid\"}", Y("\"123e4567-e89b-12d3-a456-426614174000\""),
          Y("\"123e4567e89b12d3a456426614174000\""));
    check("{\"format\":\"uri\"}", Y("\"http://a.b/c?d#e\"", "\"urn:isbn:0451450523\""),
          Y("\"//a.b\"", "\"a b\"", "\"http://a@b@c\""));
    check("{\"format\":\"duration\"}", Y("\"P1Y2M3DT4H5M6S\"", "\"P3W\"", "\"PT1S\""),
          Y("\"P\"", "\"PT1D\"", "\"1D\""));
    check("{\"format\":\"hostname\"}", Y("\"example.com\"", "\"a-b.c\""),
          Y("\"-a.com\"", "\"1.2.3.4\"", "\"a..b\""));
    check("{\"format\":\"uri-template\"}",
          Y("\"http://example.com/{user}/{+path}{?q,lang}\"", "\"{var:3}\"", "\"{list*}\"",
            "\"/a{.b}{;x,y.z}\"", "\"%20x\""),
          Y("\"{\"", "\"{}\"", "\"{a b}\"", "\"{=a}\"", "\"a b\"", "\"{a:0}\"", "\"%2\""));
    /* regexes both ECMA-262 and Python compile (a subset: deeper groups,
     * other constructs are left out) */
    check("{\"format\":\"regex\"}",
          Y("\"^example$\"", "\"old text\"", "\"^/api/(.*)$\"", "\"[a-zA-Z0-9_.-]+\"",
            "\"(?:a|b)*?\"", "\"\\\\d{1,3}\"", "\"\"", "\"a||b\"", "\"((a))\"", "\"[\\\\w.\\\\-]\"",
            "\"x{2,}\"", "\"\\\\bword\\\\b\""),
          Y("\"[\"", "\"(\"", "\"a)\"", "\"*a\"", "\"a**\"", "\"[z-a]\"", "\"a{3,1}\"",
            "\"(?i)a\"", "\"^*\"", "\"\\\\\"", "\"[]\"", "\"[^]\"", "\"a{\"", "\"((((a))))\""));
    /* internationalized forms: their ASCII subsets */
    check("{\"format\":\"iri\"}", Y("\"http://a.b/c?d#e\""), Y("\"//a.b\"", "\"a b\""));
    check("{\"format\":\"iri-reference\"}", Y("\"//a.b\"", "\"c/d\""), Y("\"a b\""));
    check("{\"format\":\"idn-email\"}", Y("\"a.b@example.com\""), Y("\"ab\"", "\"a@\""));
    check("{\"format\":\"int64\"}", Y("\"anything\""), NULL); /* unknown: annotation */
}

/* ---- arrays ---- */

static void test_arrays(void **s) {
    (void)s;
    check("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}",
          Y("[1]", "[1, 2, 3]", "[ 1 ,2 ]"), Y("[]", "[1, 2, 3, 4]", "[1, \"a\"]", "[1,]"));
    check("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
          "\"items\":false}",
          Y("[]", "[\"a\"]", "[\"a\", 1]"), Y("[1]", "[\"a\", 1, 2]"));
    check("{\"type\":\"array\",\"items\":[{\"type\":\"string\"}],\"additionalItems\":{\"type\":"
          "\"null\"}}",
          Y("[\"a\", null, null]"), Y("[\"a\", 1]"));
    check("{\"type\":\"array\",\"prefixItems\":[true,false]}", Y("[1]", "[]"), Y("[1, 2]"));
    check("{\"type\":\"array\",\"uniqueItems\":true,\"maxItems\":1}", Y("[1]", "[]"), Y("[1, 1]"));
}

/* ---- objects ---- */

static void test_objects(void **s) {
    (void)s;
    const char *sch = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":"
                      "\"integer\"},\"c\":{\"type\":\"null\"}},\"required\":[\"b\"],"
                      "\"additionalProperties\":false}";
    check(sch, Y("{\"b\": 1}", "{\"a\": \"x\", \"b\": 1}", "{\"a\":\"x\",\"b\":1,\"c\":null}",
                 "{\"b\": 1, \"c\": null}"),
          Y("{}", "{\"a\": \"x\"}", "{\"b\": 1, \"d\": 2}", "{\"b\": 1, \"b\": 2}", "{\"b\": \"1\"}",
            "{\"b\": 1,}"));
    /* additional properties after the listed ones, never a listed name */
    check("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
          "\"additionalProperties\":{\"type\":\"string\"}}",
          Y("{\"a\": 1, \"x\": \"y\"}", "{\"x\": \"y\", \"z\": \"w\"}"),
          Y("{\"a\": 1, \"x\": 2}", "{\"a\": 1, \"a\": \"s\"}", "{\"x\": \"y\", \"a\": \"s\"}"));
    check("{\"type\":\"object\",\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}},"
          "\"additionalProperties\":false}",
          Y("{\"x-a\": 1}", "{}"), Y("{\"x-a\": \"s\"}", "{\"y\": 1}"));
    check("{\"type\":\"object\",\"patternProperties\":{\"^[a-h]{1,255}$\":{\"type\":\"null\"}},"
          "\"properties\":{\"id\":{\"type\":\"integer\"}}}",
          Y("{\"id\": 1, \"abc\": null, \"X\": 5}"), Y("{\"abc\": 1}", "{\"id\": null}"));
    /* a pattern of finitely many names beside the unbounded other keys:
     * any number of members (the count of additional keys saturates) */
    check("{\"type\":\"object\",\"patternProperties\":{\"^(ab|cd)$\":{\"type\":\"string\"}}}",
          Y("{\"ab\": \"a\", \"cd\": \"b\"}", "{\"x\": 1, \"ab\": \"a\", \"y\": 2, \"z\": 3}"),
          Y("{\"ab\": 1}", "{\"x\": 1, \"ab\": \"a\", \"cd\": 2}"));
    /* nine patterns, eight of them inside the ninth: only the regions
     * that have keys are made (10, not 2^9) */
    {
        char sc[1024];
        size_t n = (size_t)snprintf(sc, sizeof sc, "{\"type\":\"object\",\"patternProperties\":{");
        for (int i = 0; i < 8; i++)
            n += (size_t)snprintf(sc + n, sizeof sc - n, "\"^k%d$\":{\"type\":\"integer\"},", i);
        snprintf(sc + n, sizeof sc - n, "\"^k\":{\"minimum\":0}}}");
        check(sc, Y("{\"k3\": 5, \"kx\": \"s\", \"z\": -1}", "{\"k7\": 0}"),
              Y("{\"k3\": -1}", "{\"k3\": \"s\"}", "{\"kx\": -1}"));
    }
    /* a listed name that a pattern also matches must satisfy both */
    check("{\"type\":\"object\",\"patternProperties\":{\"^[a-z]+$\":{\"type\":\"null\"}},"
          "\"properties\":{\"id\":{\"type\":\"integer\"}}}",
          Y("{\"abc\": null}", "{}"), Y("{\"id\": 1}", "{\"id\": null}"));
    check("{\"type\":\"object\",\"propertyNames\":{\"maxLength\":3}}", Y("{\"abc\": 1}"),
          Y("{\"abcd\": 1}"));
    check("{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{}},\"minProperties\":2,"
          "\"maxProperties\":2}",
          Y("{\"a\": 1, \"c\": 2}", "{\"b\": 1, \"x\": 2}"), Y("{\"a\": 1}", "{\"a\":1,\"b\":2,\"c\":3}"));
    check("{\"type\":\"object\",\"properties\":{\"a\":false}}", Y("{}", "{\"b\": 1}"),
          Y("{\"a\": 1}"));
    check("{\"type\":\"object\",\"required\":[\"q\"]}", Y("{\"q\": 1}", "{\"q\": 1, \"r\": 2}"),
          Y("{}", "{\"r\": 2}"));
    check("{\"type\":\"object\",\"not\":{\"required\":[\"x\"]}}", Y("{}", "{\"y\": 1}"),
          Y("{\"x\": 1}"));
    /* dependencies, both directions of the property order */
    check("{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{}},"
          "\"dependentRequired\":{\"a\":[\"c\"],\"c\":[\"b\"]}}",
          Y("{}", "{\"a\": 1, \"b\": 2, \"c\": 3}", "{\"b\": 1}", "{\"b\": 1, \"c\": 1}"),
          Y("{\"a\": 1, \"c\": 3}", "{\"c\": 1}", "{\"a\": 1}"));
    check("{\"type\":\"object\",\"properties\":{\"b\":false},\"dependencies\":{\"a\":[\"b\"]}}",
          Y("{}", "{\"c\": 1}"), Y("{\"a\": 1}", "{\"a\": 1, \"b\": 2}"));
    /* keys with escapes */
    check("{\"type\":\"object\",\"properties\":{\"a/\\\"b\":{\"const\":1}},\"required\":[\"a/\\\"b\"]}",
          Y("{\"a/\\\"b\": 1}", "{\"a\\/\\\"b\": 1}"), Y("{\"a/b\": 1}"));
}

/* ---- combinators and references ---- */

/* Compiles schema under a compile memory budget of 8 MiB. */
static void compiles_in_8mib(const char *schema) {
    grammar_limits lim;
    tr_grammar_limits_default(&lim);
    lim.max_compile_bytes = 8u << 20;
    grammar *g = NULL;
    tr_diag d = {0};
    tr_status st = tr_grammar_compile_json_schema(schema, strlen(schema), NULL, &lim, &g, &d);
    if (st) fail_msg("%s: %s", tr_status_name(st), d.message);
    tr_grammar_free(g);
}

/* head, then n comma-separated branches (first for branch 0, each the
 * format of its index), then tail, into buf; buf. */
static const char *branches(char *buf, size_t cap, const char *head, const char *first,
                            const char *each, int n, const char *tail) {
    size_t len = (size_t)snprintf(buf, cap, "%s", head);
    for (int i = 0; i < n && len < cap; i++) {
        if (i) len += (size_t)snprintf(buf + len, cap - len, ",");
        len += (size_t)snprintf(buf + len, cap - len, i ? each : first, i);
    }
    if (len < cap) len += (size_t)snprintf(buf + len, cap - len, "%s", tail);
    assert_true(len < cap);
    return buf;
}

/* oneOf branches proven disjoint without complements: by property counts
 * (required names or minProperties against maxProperties), through a
 * branch's own oneOf (each of its branches disjoint from the other
 * side), by a required property whose values the branches cannot share
 * (patterns, types: the general form of the enum discriminator), with
 * the names the oneOf's siblings require (an allOf beside it), and only
 * on the types the holding schema allows.
 * Without these proofs each branch takes the others' complements, whose
 * size grows exponentially with the branches (the six-way `many` below:
 * 57 ms and 136 kB of grammar text, against 0.3 ms and 11 kB; ten run
 * out of the 8 MiB budget). */
static void test_oneof_disjoint_proofs(void **s) {
    (void)s;
    const char *repo =
        "{\"oneOf\":[{\"$ref\":\"#/$defs/repo\"},"
        "{\"type\":\"object\",\"additionalProperties\":{\"const\":false},\"maxProperties\":1}],"
        "\"$defs\":{\"repo\":{\"type\":\"object\",\"oneOf\":["
        "{\"required\":[\"type\",\"url\"],\"properties\":{\"type\":{\"const\":\"vcs\"},"
        "\"url\":{\"type\":\"string\"}}},"
        "{\"required\":[\"type\",\"package\"],\"properties\":{\"type\":{\"const\":\"package\"},"
        "\"package\":{\"type\":\"string\"}}}]}}}";
    check(repo,
          Y("{\"type\": \"vcs\", \"url\": \"u\"}", "{\"type\": \"package\", \"package\": \"p\"}",
            "{\"x\": false}", "{}"),
          Y("{\"x\": true}", "{\"a\": false, \"b\": false}", "{\"type\": \"vcs\"}",
            "{\"type\": \"git\", \"url\": \"u\"}", "{\"type\": \"vcs\", \"package\": \"p\"}", "3"));
    check("{\"type\":\"object\",\"oneOf\":[{\"minProperties\":2},"
          "{\"additionalProperties\":{\"const\":false},\"maxProperties\":1}]}",
          Y("{\"a\": 1, \"b\": 2}", "{\"a\": false}", "{}"),
          Y("{\"a\": 1}", "{\"a\": true}"));
    /* ten branches behind a oneOf of their own, beside an object of one
     * false member */
    char many[4096];
    const char *url = "{\"required\":[\"type\",\"url\"],\"properties\":{\"type\":"
                      "{\"const\":\"t%d\"},\"url\":{\"type\":\"string\"}}}";
    branches(many, sizeof many, "{\"oneOf\":[{\"type\":\"object\",\"oneOf\":[", url, url, 10,
             "]},{\"type\":\"object\",\"additionalProperties\":{\"const\":false},"
             "\"maxProperties\":1}]}");
    compiles_in_8mib(many);
    check(many, Y("{\"type\": \"t9\", \"url\": \"u\"}", "{\"k\": false}"),
          Y("{\"type\": \"t10\", \"url\": \"u\"}", "{\"type\": \"t1\"}"));
    /* ten branches whose discriminator the oneOf's sibling requires */
    const char *closed = "{\"properties\":{\"type\":{\"const\":\"t%d\"},\"v\":{\"type\":"
                         "\"integer\"}},\"additionalProperties\":false}";
    branches(many, sizeof many, "{\"type\":\"object\",\"allOf\":[{\"required\":[\"type\"]},{\"oneOf\":[",
             closed, closed, 10, "]}]}");
    compiles_in_8mib(many);
    check(many, Y("{\"type\": \"t3\"}", "{\"type\": \"t9\", \"v\": 1}"),
          Y("{}", "{\"v\": 1}", "{\"type\": \"t3\", \"v\": \"x\"}", "{\"type\": \"t10\"}"));
    /* six branches with a disjunction inside (dependencies), so none is
     * "unconstrained" on the types the holding schema's `type: object`
     * already rules out: without the context's types each pair needed
     * the other's complement on strings, numbers... and was refused */
    const char *dep = "{\"required\":[\"type\"],\"properties\":{\"type\":{\"const\":"
                      "\"t%d\"},\"f\":{\"type\":\"string\"}},\"additionalProperties\":false,"
                      "\"dependencies\":{\"f\":{\"oneOf\":[{\"properties\":{\"f\":{\"const\":"
                      "\"a\"}}},{\"properties\":{\"f\":{\"const\":\"b\"}}}]}}}";
    branches(many, sizeof many, "{\"type\":\"object\",\"oneOf\":[", dep, dep, 6, "]}");
    check(many, Y("{\"type\": \"t5\"}", "{\"type\": \"t0\", \"f\": \"b\"}"),
          Y("{\"type\": \"t0\", \"f\": \"c\"}", "{\"type\": \"t6\"}", "\"t0\"", "{}"));
    /* ten closed branches told apart by a pattern on a required property,
     * one of them with a closed object as its value, and one by the
     * property's type */
#define TAGGED(VALUE)                                                                         \
    "{\"type\":\"object\",\"required\":[\"type\",\"value\"],\"additionalProperties\":false,"   \
    "\"properties\":{\"type\":{\"type\":\"string\",\"pattern\":\"^basic:k%d$\"},\"value\":" VALUE \
    "}}"
    branches(many, sizeof many, "{\"type\":\"array\",\"items\":{\"oneOf\":[",
             TAGGED("{\"type\":\"object\",\"required\":[\"file\"],\"additionalProperties\":false,"
                    "\"properties\":{\"file\":{\"type\":\"string\"}}}"),
             TAGGED("{\"type\":\"integer\"}"), 10,
             ",{\"type\":\"object\",\"required\":[\"type\"],\"additionalProperties\":false,"
             "\"properties\":{\"type\":{\"type\":\"integer\"}}}]}}");
#undef TAGGED
    compiles_in_8mib(many);
    check(many,
          Y("[{\"type\": \"basic:k0\", \"value\": {\"file\": \"f\"}}, {\"type\": \"basic:k7\", "
            "\"value\": 3}]",
            "[{\"type\": 2}]", "[]"),
          Y("[{\"type\": \"basic:k7\", \"value\": \"v\"}]", "[{\"type\": \"basic:k10\", \"value\": 1}]",
            "[{\"type\": \"basic:k0\", \"value\": {\"file\": \"f\", \"x\": 1}}]",
            "[{\"type\": \"2\"}]"));
}


static void test_combinators(void **s) {
    (void)s;
    check("{\"anyOf\":[{\"type\":\"string\",\"maxLength\":1},{\"type\":\"integer\"}]}",
          Y("\"a\"", "5"), Y("\"ab\"", "null"));
    check("{\"allOf\":[{\"type\":\"integer\"},{\"minimum\":3}],\"maximum\":5}", Y("3", "5"),
          Y("2", "6", "4.5"));
    check("{\"type\":\"object\",\"oneOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}",
          Y("{\"a\": 1}", "{\"b\": 1}"), Y("{\"a\": 1, \"b\": 2}", "{}"));
    check("{\"oneOf\":[{\"properties\":{\"k\":{\"const\":\"x\"},\"v\":{\"type\":\"integer\"}},"
          "\"required\":[\"k\"]},{\"properties\":{\"k\":{\"const\":\"y\"}},\"required\":[\"k\"]}]}",
          Y("{\"k\": \"x\", \"v\": 1}", "{\"k\": \"y\"}"), Y("{\"k\": \"z\"}", "{\"k\": \"x\", \"v\": \"s\"}", "3"));
    check("{\"oneOf\":[{\"format\":\"hostname\"},{\"format\":\"ipv4\"}]}", Y("\"a.com\"", "\"1.2.3.4\""),
          Y("5"));    /* properties merged through allOf / $ref come in the schema's text
     * order (depth first): a base's before an extension's */
    check("{\"$defs\":{\"base\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}},"
          "\"mid\":{\"allOf\":[{\"$ref\":\"#/$defs/base\"},{\"properties\":{\"b\":{\"type\":\"string\"}}}]}},"
          "\"allOf\":[{\"$ref\":\"#/$defs/mid\"},{\"properties\":{\"c\":{\"const\":true}}}],"
          "\"required\":[\"a\",\"b\",\"c\"]}",
          Y("{\"a\": 1, \"b\": \"x\", \"c\": true}"), Y("{\"a\": 1, \"b\": \"x\"}", "{\"a\": \"1\", \"b\": \"x\", \"c\": true}"));
}

static void test_refs(void **s) {
    (void)s;
    const char *list = "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":"
                       "\"integer\"},\"next\":{\"$ref\":\"#/$defs/n\"}},\"required\":[\"v\"],"
                       "\"additionalProperties\":false}},\"$ref\":\"#/$defs/n\"}";
    check(list, Y("{\"v\": 1}", "{\"v\": 1, \"next\": {\"v\": 2}}"),
          Y("{\"v\": 1, \"next\": {}}", "{\"next\": {\"v\": 1}}"));
    /* 200 deep */
    char *deep = malloc(200 * 32 + 64);
    size_t n = 0;
    for (int i = 0; i < 200; i++) n += (size_t)sprintf(deep + n, "{\"v\": %d, \"next\": ", i);
    n += (size_t)sprintf(deep + n, "{\"v\": 200}");
    for (int i = 0; i < 200; i++) deep[n++] = '}';
    deep[n] = 0;
    assert_true(accepts(list, deep));
    deep[n - 1] = 0; /* one brace short */
    assert_false(accepts(list, deep));
    free(deep);
    /* $id-relative, $anchor, pointer escapes, definitions */
    check("{\"$id\":\"http://x.org/root.json\",\"$defs\":{\"a\":{\"$id\":\"sub/a.json\",\"$anchor\":"
          "\"it\",\"type\":\"integer\"}},\"type\":\"array\",\"prefixItems\":[{\"$ref\":\"sub/a.json\"},"
          "{\"$ref\":\"http://x.org/sub/a.json#it\"}]}",
          Y("[1, 2]"), Y("[1, \"x\"]"));
    check("{\"definitions\":{\"a/b\":{\"type\":\"integer\"},\"c~d\":{\"type\":\"null\"},\"e f\":"
          "{\"type\":\"string\"}},\"type\":\"array\",\"prefixItems\":[{\"$ref\":\"#/definitions/a~1b\"},"
          "{\"$ref\":\"#/definitions/c~0d\"},{\"$ref\":\"#/definitions/e%20f\"}]}",
          Y("[1, null, \"s\"]"), Y("[1, 2]"));
    /* which identifier a draft reads: `id` up to draft 4 (`$id` is an
     * unknown word there), `$id` after; beside `$ref` neither, up to
     * draft 7 (the reference is the whole object) */
    static const char *const ids[] = {
        "{\"$schema\":\"http://json-schema.org/draft-04/schema#\",\"id\":\"http://x.org/r.json\","
        "\"definitions\":{\"c\":{\"type\":\"integer\"}},\"properties\":{\"v\":{\"$id\":\"/o/v\","
        "\"properties\":{\"w\":{\"$ref\":\"#/definitions/c\"}}}}}",
        "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"$id\":\"http://x.org/r.json\","
        "\"definitions\":{\"c\":{\"type\":\"integer\"}},\"properties\":{\"v\":{\"properties\":"
        "{\"w\":{\"$id\":\"/o/w\",\"$ref\":\"#/definitions/c\"}}}}}",
    };
    for (size_t i = 0; i < TR_ARRAY_LEN(ids); i++)
        check(ids[i], Y("{\"v\": {\"w\": 1}}"), Y("{\"v\": {\"w\": \"x\"}}"));
    /* plain-name fragments as identifiers: anchors (draft 4 `id`, draft 7 `$id`) */
    check("{\"$schema\":\"http://json-schema.org/draft-04/schema#\",\"definitions\":{\"s\":"
          "{\"id\":\"#sid\",\"type\":\"integer\",\"minimum\":0},\"l\":{\"id\":\"#slist\","
          "\"type\":\"array\",\"items\":{\"$ref\":\"#sid\"}}},\"properties\":{\"a\":{\"$ref\":\"#slist\"}}}",
          Y("{\"a\": [1, 0]}"), Y("{\"a\": [-1]}", "{\"a\": 1}"));
    check("{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"definitions\":{\"s\":"
          "{\"$id\":\"#sid\",\"type\":\"integer\"}},\"properties\":{\"a\":{\"$ref\":\"#sid\"}}}",
          Y("{\"a\": 1}"), Y("{\"a\": \"x\"}"));
    /* draft 3's `extends` with a value that is no schema: an annotation */
    check("{\"properties\":{\"a\":{\"extends\":\"types.json#/boolean\",\"type\":\"integer\"}}}",
          Y("{\"a\": 1}"), Y("{\"a\": true}"));
    /* 2020-12: an $id names a resource, and a $ref beside it resolves there */
    check("{\"$id\":\"http://x.org/r.json\",\"$defs\":{\"c\":{\"type\":\"integer\"}},"
          "\"properties\":{\"w\":{\"$id\":\"/o/w.json\",\"$defs\":{\"c\":{\"type\":\"string\"}},"
          "\"$ref\":\"#/$defs/c\"}}}",
          Y("{\"w\": \"x\"}"), Y("{\"w\": 1}"));
    /* mutual recursion: a tree */
    check("{\"$defs\":{\"t\":{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"integer\"},{\"$ref\":"
          "\"#/$defs/t\"}]}}},\"$ref\":\"#/$defs/t\"}",
          Y("[]", "[1, [2, [3, []]]]"), Y("[1, [2, \"x\"]]"));
}

/* Drafts 3..7 ignore the siblings of $ref; 2019-09 on (and a document
 * that names no draft) applies them beside it. Keywords newer than the
 * declared draft are ignored too. A sibling some reference
 * leads into stays (the reference must resolve), keeping that node's
 * siblings: stricter, never looser. The validator reads the same way. */
static void test_ref_siblings_by_draft(void **s) {
    (void)s;
    const char *body = "\"definitions\":{\"obj\":{\"type\":\"object\",\"properties\":{\"a\":"
                       "{\"type\":\"integer\"}},\"required\":[\"a\"]}},\"type\":\"object\","
                       "\"properties\":{\"v\":{\"type\":\"string\",\"$ref\":\"#/definitions/obj\"}}";
    char sc[1024];
    const char *drafts[] = {"http://json-schema.org/draft-04/schema#",
                            "http://json-schema.org/draft-07/schema#"};
    for (int i = 0; i < 2; i++) {
        snprintf(sc, sizeof sc, "{\"$schema\":\"%s\",%s}", drafts[i], body);
        check(sc, Y("{\"v\": {\"a\": 1}}"), Y("{\"v\": \"s\"}", "{\"v\": {}}"));
        bool valid = false;
        tr_diag d;
        const char *inst = "{\"v\": {\"a\": 1}}";
        assert_int_equal(tr_js_check_instance(sc, strlen(sc), inst, strlen(inst), &valid, &d),
                         TR_OK);
        assert_true(valid);
    }
    /* 2020-12 and no $schema: both apply (a string and an object: nothing) */
    snprintf(sc, sizeof sc,
             "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",%s,\"required\":[]}",
             body);
    check(sc, Y("{}"), Y("{\"v\": {\"a\": 1}}", "{\"v\": \"s\"}"));
    snprintf(sc, sizeof sc, "{%s}", body);
    check(sc, Y("{}"), Y("{\"v\": {\"a\": 1}}"));
    /* keywords newer than the declared draft are annotations there */
    check("{\"$schema\":\"http://json-schema.org/draft-04/schema#\",\"type\":\"object\","
          "\"properties\":{\"k\":{\"const\":1}},\"if\":{\"required\":[\"k\"]},"
          "\"then\":{\"required\":[\"z\"]}}",
          Y("{\"k\": 2}", "{\"k\": 1}"), Y("{\"k\": \"s\", \"k\": 1}"));
    check("{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"type\":\"object\","
          "\"properties\":{\"k\":{\"const\":1}},\"if\":{\"required\":[\"k\"]},"
          "\"then\":{\"required\":[\"z\"]},\"dependentRequired\":{\"z\":[\"w\"]}}",
          Y("{\"k\": 1, \"z\": 0}", "{}"), Y("{\"k\": 2, \"z\": 0}", "{\"k\": 1}"));
    check("{\"type\":\"object\",\"properties\":{\"k\":{\"const\":1}},"
          "\"dependentRequired\":{\"k\":[\"w\"]}}",
          Y("{\"k\": 1, \"w\": 0}", "{}"), Y("{\"k\": 1}", "{\"k\": 2, \"w\": 0}"));
    /* a reference into a sibling keeps it */
    check("{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"type\":\"array\","
          "\"items\":[{\"$ref\":\"#/items/1/properties/x\",\"properties\":{\"x\":{\"type\":"
          "\"integer\"}}},{\"properties\":{\"x\":{\"type\":\"boolean\"}}}]}",
          Y("[true]", "[false]"), Y("[1]", "[{\"x\": true}]"));
    check("{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"type\":\"array\","
          "\"items\":[{\"$ref\":\"#/items/0/properties/x\",\"properties\":{\"x\":{\"type\":"
          "\"integer\"}}}]}",
          Y("[1]"), Y("[\"s\"]", "[{\"x\": true}]"));
}

/* ---- errors, strict / lenient, warnings ---- */

typedef struct warns {
    int n;
    char last[512];
} warns;

static void on_warn(void *ctx, const char *ptr, const char *msg) {
    warns *w = ctx;
    w->n++;
    snprintf(w->last, sizeof w->last, "%s: %s", ptr, msg);
}

/* A oneOf whose branches may overlap and whose first branch has no
 * complement here (uniqueItems): neither provable nor exact. */
#define ONEOF_OPEN \
    "{\"oneOf\":[{\"type\":\"array\",\"uniqueItems\":true},{\"type\":\"array\",\"maxItems\":2}]}"

static void test_errors(void **s) {
    (void)s;
    struct {
        const char *schema;
        tr_status code;
        const char *needles[3];
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"tags\":{\"type\":\"array\","
         "\"not\":{\"uniqueItems\":true}}}}",
         TR_ERR_UNSUPPORTED, {"uniqueItems", "/properties/tags", NULL}},
        {"{\"not\":{\"type\":\"array\",\"uniqueItems\":true}}", TR_ERR_UNSUPPORTED,
         {"not", "uniqueItems", NULL}},
        {"{\"if\":{\"uniqueItems\":true},\"then\":{\"required\":[\"a\"]}}",
         TR_ERR_UNSUPPORTED, {"\"if\"", "uniqueItems", NULL}},
        {"{\"$ref\":\"#/$defs/missing\"}", TR_ERR_NOT_FOUND, {"#/$defs/missing", NULL, NULL}},
        {"{\"$ref\":\"http://example.com/other.json\"}", TR_ERR_NOT_FOUND, {"never fetched", NULL, NULL}},
        {"{\"type\":\"strin\"}", TR_ERR_FORMAT, {"strin", NULL, NULL}},
        {"{\"type\":\"string\",\"pattern\":\"(?<=a)b\"}", TR_ERR_UNSUPPORTED, {"pattern", "lookbehind", NULL}},
        {"{\"type\":\"string\",\"minLength\":-1}", TR_ERR_FORMAT, {"minLength", NULL, NULL}},
        {"{\"properties\": {", TR_ERR_FORMAT, {"not valid JSON", NULL, NULL}},
        {"false", TR_ERR_FORMAT, {"no JSON value", NULL, NULL}},
        {"{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", TR_ERR_UNSUPPORTED, {"recursion", NULL, NULL}},
        {ONEOF_OPEN, TR_ERR_UNSUPPORTED, {"oneOf", "complement of uniqueItems", NULL}},
        /* a lookahead in the middle: not one of the shapes rewritten */
        {"{\"pattern\":\"a(?!b)c\"}", TR_ERR_UNSUPPORTED, {"pattern", "lookahead", NULL}},
    };
    for (size_t i = 0; i < TR_ARRAY_LEN(cases); i++) {
        grammar *g = NULL;
        tr_diag d;
        tr_status st = tr_grammar_compile_json_schema(cases[i].schema, strlen(cases[i].schema),
                                                      NULL, NULL, &g, &d);
        if (st != cases[i].code)
            fail_msg("%s: got %s (%s), want %s", cases[i].schema, tr_status_name(st), d.message,
                     tr_status_name(cases[i].code));
        assert_null(g);
        assert_int_equal(d.code, st);
        for (int k = 0; k < 3 && cases[i].needles[k]; k++)
            if (!strstr(d.message, cases[i].needles[k]))
                fail_msg("%s: message \"%s\" lacks \"%s\"", cases[i].schema, d.message,
                         cases[i].needles[k]);
    }
    /* not JSON: line and column */
    tr_diag d;
    grammar *g = NULL;
    assert_int_equal(tr_grammar_compile_json_schema("{\n  \"a\": ]", 10, NULL, NULL, &g, &d),
                     TR_ERR_FORMAT);
    assert_int_equal(d.line, 2);
    /* bad options */
    grammar_json_options o;
    tr_grammar_json_options_default(&o);
    o.max_ws_run = 5000;
    assert_int_equal(tr_grammar_compile_json_schema("true", 4, &o, NULL, &g, &d), TR_ERR_INVALID_ARG);
}

static void test_lenient(void **s) {
    (void)s;
    /* arrays with a repeat: no complement of uniqueItems */
    const char *sch = "{\"type\":\"object\",\"properties\":{\"t\":"
                      "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"not\":{\"uniqueItems\":true}}}}";
    grammar_json_options o;
    tr_grammar_json_options_default(&o);
    warns w = {0};
    o.lenient = true;
    o.warn = on_warn;
    o.warn_ctx = &w;
    assert_true(accepts_opt(sch, &o, "{\"t\": [1, 2]}")); /* ignored, as documented */
    assert_true(w.n >= 1);
    assert_non_null(strstr(w.last, "uniqueItems"));
    assert_non_null(strstr(w.last, "/properties/t"));
    /* the rest still holds */
    assert_false(accepts_opt(sch, &o, "{\"t\": [1, \"a\"]}"));
    /* oneOf that cannot be proven exact becomes anyOf, with a warning */
    w.n = 0;
    assert_true(accepts_opt(ONEOF_OPEN, &o, "[1, 2]")); /* both branches hold */
    assert_true(w.n >= 1);
    assert_non_null(strstr(w.last, "oneOf"));
}

/* ---- whitespace ---- */

static void test_whitespace(void **s) {
    (void)s;
    const char *sch = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":"
                      "{\"type\":\"integer\"}},\"b\":{\"type\":\"object\"}},\"required\":[\"a\",\"b\"]}";
    grammar_json_options o;
    tr_grammar_json_options_default(&o);
    o.whitespace = GRAMMAR_JSON_WS_COMPACT;
    assert_true(accepts_opt(sch, &o, "{\"a\":[1,2],\"b\":{}}"));
    assert_false(accepts_opt(sch, &o, "{\"a\": [1,2],\"b\":{}}"));
    o.whitespace = GRAMMAR_JSON_WS_PRETTY;
    /* exactly json.dumps(v, indent=2) */
    assert_true(accepts_opt(sch, &o, "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {}\n}"));
    assert_true(accepts_opt(sch, &o, "{\n  \"a\": [],\n  \"b\": {\n    \"x\": [\n      null\n    ]\n  }\n}"));
    assert_false(accepts_opt(sch, &o, "{\"a\":[1,2],\"b\":{}}"));
    assert_false(accepts_opt(sch, &o, "{\n  \"a\": [\n  1\n  ],\n  \"b\": {}\n}"));
    o.whitespace = GRAMMAR_JSON_WS_FLEXIBLE;
    o.max_ws_run = 3;
    assert_true(accepts_opt(sch, &o, "{ \"a\" :\t[ 1 ,\n2 ] , \"b\":{  } }"));
    assert_false(accepts_opt(sch, &o, "{    \"a\":[1,2],\"b\":{}}")); /* a run of 4 */
    assert_false(accepts_opt(sch, &o, " {\"a\":[1,2],\"b\":{}}"));    /* leading */
}

/* A vocabulary for whitespace runs: every byte, then blank runs of 2..40
 * spaces, LF + 0..30 spaces, tabs, and blanks glued to punctuation on
 * either side; EOG last. */
static grammar_vocab *ws_vocab(int32_t *n_out) {
    static char store[400][48];
    static const char *const glue[] = {"\",", ":", "{", "}", "[", "]", "\"", ",", "1"};
    const uint8_t *tb[512];
    uint32_t tl[512];
    int32_t n = 0, k = 0;
    for (int b = 0; b < 256; b++, n++) {
        store[k][0] = (char)b;
        tb[n] = (const uint8_t *)store[k++];
        tl[n] = 1;
    }
    for (int r = 2; r <= 40; r++, n++) { /* spaces */
        memset(store[k], ' ', (size_t)r);
        tb[n] = (const uint8_t *)store[k++];
        tl[n] = (uint32_t)r;
    }
    for (int r = 0; r <= 30; r += 2, n++) { /* LF + indentation */
        store[k][0] = '\n';
        memset(store[k] + 1, ' ', (size_t)r);
        tb[n] = (const uint8_t *)store[k++];
        tl[n] = (uint32_t)r + 1;
    }
    for (int r = 2; r <= 8; r += 3, n++) { /* tabs, CR LF */
        for (int j = 0; j < r; j++) store[k][j] = j % 3 == 2 ? '\r' : '\t';
        tb[n] = (const uint8_t *)store[k++];
        tl[n] = (uint32_t)r;
    }
    for (size_t gi = 0; gi < TR_ARRAY_LEN(glue); gi++)
        for (int r = 1; r <= 9; r += 4) { /* blanks before, after, around */
            for (int side = 0; side < 3; side++, n++) {
                size_t gl = strlen(glue[gi]), m = 0;
                if (side != 1) memset(store[k] + m, side == 2 ? '\n' : ' ', (size_t)r), m += (size_t)r;
                memcpy(store[k] + m, glue[gi], gl), m += gl;
                if (side != 0) memset(store[k] + m, ' ', (size_t)r), m += (size_t)r;
                tb[n] = (const uint8_t *)store[k++];
                tl[n] = (uint32_t)m;
            }
        }
    tb[n] = NULL;
    tl[n] = 0;
    uint8_t sp[512] = {0};
    sp[n] = 1;
    int32_t eog = n++;
    grammar_vocab_desc d = {.n_vocab = n, .token_bytes = tb, .token_lens = tl,
                            .is_special = sp, .eog_ids = &eog, .n_eog = 1};
    grammar_vocab *v = NULL;
    assert_int_equal(tr_grammar_vocab_new(&d, &v, NULL), TR_OK);
    *n_out = n;
    return v;
}

/* Flexible whitespace is counted by the matcher (the compiled grammar
 * loops on blanks) instead of spelled as a bounded repetition at every
 * place (the exported text): the two must allow exactly the same tokens.
 * Random walks through both, biased to blank tokens, masks compared bit
 * for bit at every step, token_allowed checked against the mask, and
 * rollbacks that restore the run. */
static void test_whitespace_counted(void **s) {
    (void)s;
    const char *sch = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":"
                      "{\"type\":\"integer\"}},\"b\":{\"type\":\"object\",\"properties\":{\"c\":"
                      "{\"type\":\"string\"}}},\"d\":{\"enum\":[1,\"x\",[]]}},\"required\":[\"a\"]}";
    int32_t nv;
    grammar_vocab *v = ws_vocab(&nv);
    size_t nw = tr_grammar_vocab_mask_words(v);
    uint64_t rng = 99;
    static const uint32_t bounds[] = {1, 3, 7, 24};
    for (size_t bi = 0; bi < TR_ARRAY_LEN(bounds); bi++) {
        grammar_json_options o;
        tr_grammar_json_options_default(&o);
        o.max_ws_run = bounds[bi];
        tr_diag d;
        char *text = NULL;
        size_t tn;
        assert_int_equal(tr_grammar_json_schema_to_ebnf(sch, strlen(sch), &o, NULL, &text, &tn, &d),
                         TR_OK);
        grammar *ref = NULL, *g = compile_opt(sch, &o, &d);
        assert_int_equal(tr_grammar_compile_ebnf(text, tn, NULL, &ref, &d), TR_OK);
        free(text);
        assert_non_null(g);
        /* the schema's matchers keep keys unique (the object takes other
         * keys too); the text's compiled alone would not: give it the
         * same tracker, so that only the blanks are compared */
        assert_true(g->unique_keys);
        ref->unique_keys = true;
        int walks = small_scale_json() ? 30 : 120;
        for (int wk = 0; wk < walks; wk++) {
            grammar_matcher *m = NULL, *r = NULL;
            assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
            assert_int_equal(tr_grammar_matcher_new(ref, v, 0, &r), TR_OK);
            uint64_t mm[16], mr[16];
            int taken = 0;
            for (int step = 0; step < 80; step++) {
                assert_int_equal(tr_grammar_matcher_fill_mask(m, mm, nw), TR_OK);
                assert_int_equal(tr_grammar_matcher_fill_mask(r, mr, nw), TR_OK);
                for (int32_t t = 0; t < nv; t++) {
                    bool a = mm[t >> 6] >> (t & 63) & 1, b = mr[t >> 6] >> (t & 63) & 1;
                    if (a != b)
                        fail_msg("bound %u, walk %d, step %d: token %d counted %d, spelled %d",
                                 bounds[bi], wk, step, t, a, b);
                    if ((t % 7 == 0 || t >= 256) && tr_grammar_matcher_token_allowed(m, t) != a)
                        fail_msg("bound %u: token %d allowed disagrees with the mask", bounds[bi], t);
                }
                int32_t cand[512], nc = 0, blank = 0;
                for (int32_t t = 0; t < nv; t++)
                    if (mm[t >> 6] >> (t & 63) & 1) cand[nc++] = t, blank += t >= 256;
                if (!nc) break;
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                int32_t pick = cand[(rng >> 33) % (uint64_t)nc];
                if (blank && (rng >> 20) % 3) /* mostly a multi-byte token */
                    while (pick < 256) {
                        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                        pick = cand[(rng >> 33) % (uint64_t)nc];
                    }
                if (pick == nv - 1) break; /* EOG */
                assert_int_equal(tr_grammar_matcher_accept_token(m, pick), TR_OK);
                assert_int_equal(tr_grammar_matcher_accept_token(r, pick), TR_OK);
                taken++;
                if ((rng >> 40) % 5 == 0 && taken >= 2) { /* undo two */
                    assert_int_equal(tr_grammar_matcher_rollback(m, 2), TR_OK);
                    assert_int_equal(tr_grammar_matcher_rollback(r, 2), TR_OK);
                    taken -= 2;
                }
            }
            tr_grammar_matcher_free(m);
            tr_grammar_matcher_free(r);
        }
        tr_grammar_free(g);
        tr_grammar_free(ref);
    }
    tr_grammar_vocab_free(v);
}

/* ---- budgets and hostile schemas ---- */

/* A buffer with a limit stops at it: nothing is written past it (by any
 * append, a long printf included), over is set and stays, and it is
 * not an error. */
static void test_buf_limit(void **s) {
    (void)s;
    gcc cc;
    tr_gcc_init(&cc, NULL, NULL);
    js_buf b;
    tr_js_buf_init(&b, &cc);
    b.limit = 10;
    tr_js_buf_puts(&b, "abcdefgh");
    tr_js_buf_putc(&b, 'i');
    assert_false(b.over);
    tr_js_buf_puts(&b, "jk"); /* 11 bytes: refused whole */
    assert_true(b.over);
    assert_int_equal(b.n, 9);
    tr_js_buf_putc(&b, 'j'); /* would fit, but the text is already cut */
    assert_int_equal(b.n, 9);
    assert_true(js_buf_ok(&b));
    tr_js_buf_free(&b);
    tr_js_buf_init(&b, &cc);
    b.limit = 300;
    char big[400];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    tr_js_buf_printf(&b, "%s", big + 200); /* 199 bytes: fits */
    assert_false(b.over);
    tr_js_buf_printf(&b, "%s", big); /* 399, past the small-buffer path too */
    assert_true(b.over);
    assert_int_equal(b.n, 199);
    tr_js_buf_free(&b);
    tr_js_buf_init(&b, &cc); /* no limit: all of it */
    tr_js_buf_printf(&b, "%s", big);
    assert_int_equal(b.n, 399);
    assert_false(b.over);
    tr_js_buf_free(&b);
    tr_gcc_deinit(&cc);
}

static void test_budgets(void **s) {
    (void)s;
    grammar_limits lim;
    tr_grammar_limits_default(&lim);
    lim.max_compile_us = 50000;
    lim.max_compile_bytes = 8u << 20;
    /* a huge enum, deep nesting: fail cleanly or compile, in bounded time */
    js_buf b = {0};
    gcc cc;
    tr_gcc_init(&cc, NULL, NULL);
    tr_js_buf_init(&b, &cc);
    tr_js_buf_puts(&b, "{\"enum\":[");
    for (int i = 0; i < 20000; i++) tr_js_buf_printf(&b, "%s\"value-%d\"", i ? "," : "", i);
    tr_js_buf_puts(&b, "]}");
    grammar *g = NULL;
    tr_diag d;
    uint64_t t0 = tr_now_ns();
    tr_status st = tr_grammar_compile_json_schema(b.p, b.n, NULL, &lim, &g, &d);
    assert_true(st == TR_OK || st == TR_ERR_LIMIT);
    if (st) assert_non_null(strstr(d.message, "budget"));
    assert_true((tr_now_ns() - t0) / 1000000 < 5000);
    tr_grammar_free(g);
    b.n = 0;
    for (int i = 0; i < 1500; i++) tr_js_buf_puts(&b, "{\"type\":\"array\",\"items\":");
    tr_js_buf_puts(&b, "true");
    for (int i = 0; i < 1500; i++) tr_js_buf_putc(&b, '}');
    st = tr_grammar_compile_json_schema(b.p, b.n, NULL, NULL, &g, &d);
    if (st != TR_ERR_LIMIT) fail_msg("deep nesting: %s: %s", tr_status_name(st), d.message);
    assert_non_null(strstr(d.message, "deeper"));
    /* distinct items over 15 strings: 2^15 array states in the grammar
     * once ran 28 s past a 2 s budget; past 12 values the tracker keeps
     * them distinct instead, at once */
    b.n = 0;
    tr_js_buf_puts(&b, "{\"type\":\"array\",\"uniqueItems\":true,\"items\":{\"enum\":[");
    for (int i = 0; i < 15; i++) tr_js_buf_printf(&b, "%s\"option-%d\"", i ? "," : "", i);
    tr_js_buf_puts(&b, "]}}");
    lim.max_compile_bytes = 256u << 20;
    t0 = tr_now_ns();
    st = tr_grammar_compile_json_schema(b.p, b.n, NULL, &lim, &g, &d);
    assert_int_equal(st, TR_OK);
    assert_true((tr_now_ns() - t0) / 1000000 < 5000);
    tr_grammar_free(g);
    g = NULL;
    /* 12 values and a counted contains: too many states, stopped */
    b.n = 0;
    tr_js_buf_puts(&b, "{\"type\":\"array\",\"uniqueItems\":true,\"contains\":{\"enum\":"
                       "[\"option-0\",\"option-1\",\"option-2\"]},\"minContains\":2,"
                       "\"items\":{\"enum\":[");
    for (int i = 0; i < 12; i++) tr_js_buf_printf(&b, "%s\"option-%d\"", i ? "," : "", i);
    tr_js_buf_puts(&b, "]}}");
    t0 = tr_now_ns();
    st = tr_grammar_compile_json_schema(b.p, b.n, NULL, &lim, &g, &d);
    if (st != TR_ERR_LIMIT) fail_msg("12 values and contains: %s", tr_status_name(st));
    assert_true((tr_now_ns() - t0) / 1000000 < 5000);
    tr_js_buf_free(&b);
    tr_gcc_deinit(&cc);
    /* a budget smaller than the schema needs */
    lim.max_compile_bytes = 100000;
    const char *v6 = "{\"type\":\"string\",\"format\":\"ipv6\"}";
    st = tr_grammar_compile_json_schema(v6, strlen(v6), NULL, &lim, &g, &d);
    assert_int_equal(st, TR_ERR_LIMIT);
    assert_non_null(strstr(d.message, "max_compile_bytes"));
}

/* ---- Python-compatible serialization ---- */

static void test_dumps(void **s) {
    (void)s;
    struct {
        const char *in, *out;
    } cases[] = {
        {"1.0", "1.0"},       {"0.0001", "0.0001"},      {"0.00001", "1e-05"},
        {"1e16", "1e+16"},    {"1e15", "1000000000000000.0"}, {"-0.0", "-0.0"},
        {"1.5e300", "1.5e+300"}, {"123.456", "123.456"}, {"0.1", "0.1"},
        {"1e22", "1e+22"},    {"12345678901234567890.0", "1.2345678901234567e+19"},
        {"-12", "-12"},       {"[1, {\"a\": \"b\"}, []]", "[1, {\"a\": \"b\"}, []]"},
        {"{\"k\":\"\\u0001\\n\\\"\\\\/\\u00e9\\u2028\"}", "{\"k\": \"\\u0001\\n\\\"\\\\/\xc3\xa9\xe2\x80\xa8\"}"},
        {"{}", "{}"},         {"\"\\u007f\"", "\"\x7f\""},
    };
    for (size_t i = 0; i < TR_ARRAY_LEN(cases); i++) {
        json_error_t je;
        json_t *v = json_loads(cases[i].in, JSON_DECODE_ANY, &je);
        assert_non_null(v);
        char *t = tj_dumps(v);
        if (strcmp(t, cases[i].out)) fail_msg("dumps(%s) = %s, want %s", cases[i].in, t, cases[i].out);
        free(t);
        json_decref(v);
    }
}

static int setup(void **s) {
    (void)s;
    V = tj_byte_vocab();
    return V ? 0 : -1;
}

static int teardown(void **s) {
    (void)s;
    tr_grammar_vocab_free(V);
    return 0;
}

/* Rule names from one hint: root, then h, h-2, h-3, ... (a name a hint
 * already took is skipped); 300,000 of them are made in linear time
 * (each used to search from h-2 up: a MaskBench schema spent minutes
 * there, past its time budget), and the loop polls the time budget. */
static void test_rule_names_many(void **s) {
    (void)s;
    tr_diag d;
    gcc cc;
    tr_gcc_init(&cc, NULL, &d);
    gx_grammar g = {0};
    uint32_t id;
    assert_int_equal(tr_gx_rule_add(&cc, &g, "h", &id), TR_OK);
    assert_string_equal(g.rules[id].name, "root");
    assert_int_equal(tr_gx_rule_add(&cc, &g, "h-3", &id), TR_OK); /* taken ahead */
    const uint32_t n = 300000;
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(tr_gx_rule_add(&cc, &g, "h", &id), TR_OK);
        char want[32];
        uint32_t k = i + (i >= 2); /* h, h-2, h-4, h-5, ... */
        if (k == 0)
            snprintf(want, sizeof want, "h");
        else
            snprintf(want, sizeof want, "h-%u", k + 1);
        if (strcmp(g.rules[id].name, want) != 0)
            fail_msg("rule %u named %s, expected %s", i, g.rules[id].name, want);
    }
    tr_gcc_deinit(&cc);
    /* a spent budget stops the adding with TR_ERR_LIMIT */
    grammar_limits lim;
    tr_grammar_limits_default(&lim);
    lim.max_compile_us = 1;
    tr_gcc_init(&cc, &lim, &d);
    gx_grammar g2 = {0};
    tr_status st = TR_OK;
    for (uint32_t i = 0; i < 100000 && st == TR_OK; i++) st = tr_gx_rule_add(&cc, &g2, "h", &id);
    assert_int_equal(st, TR_ERR_LIMIT);
    assert_non_null(strstr(d.message, "time budget"));
    tr_gcc_deinit(&cc);
}

/* A budget that runs out while the rules are built says for which part
 * of the schema (its JSON pointer) and how far the compile got. */
static void test_budget_names_the_part(void **s) {
    (void)s;
    static char sch[65536];
    size_t n = (size_t)snprintf(sch, sizeof sch, "{\"$defs\":{\"big\":{\"type\":\"object\","
                                                 "\"properties\":{");
    for (int i = 0; i < 200; i++)
        n += (size_t)snprintf(sch + n, sizeof sch - n, "%s\"p%d\":{\"type\":\"array\",\"items\":"
                              "{\"type\":\"object\",\"properties\":{\"q%d\":{\"type\":\"integer\"}}}}",
                              i ? "," : "", i, i);
    snprintf(sch + n, sizeof sch - n, "}}},\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/big\"}}");
    grammar_limits lim;
    tr_grammar_limits_default(&lim);
    lim.max_compile_bytes = 256u << 10;
    grammar *g = NULL;
    tr_diag d;
    assert_int_equal(tr_grammar_compile_json_schema(sch, strlen(sch), NULL, &lim, &g, &d),
                     TR_ERR_LIMIT);
    assert_null(g);
    if (!strstr(d.message, "while building the rule for /$defs/big"))
        fail_msg("%s", d.message);
}

/* A `pattern` holding U+0000 (written \u0000 in the schema) is the whole
 * pattern, not a text cut at the NUL ("missing ]" before); the
 * validator reads it the same way. */
static void test_pattern_with_nul(void **s) {
    (void)s;
    const char *sch = "{\"type\":\"string\",\"pattern\":\"^/[^\\u0000]+$\"}";
    assert_true(accepts(sch, "\"/a/b\""));
    assert_false(accepts(sch, "\"/a\\u0000b\""));
    assert_false(accepts(sch, "\"a\""));
    bool valid = true;
    tr_diag d;
    assert_int_equal(tr_js_check_instance(sch, strlen(sch), "\"/x\\u0000\"", 10, &valid, &d), TR_OK);
    assert_false(valid);
    assert_int_equal(tr_js_check_instance(sch, strlen(sch), "\"/x\"", 4, &valid, &d), TR_OK);
    assert_true(valid);
}

/* Integers jansson cannot hold (beyond 64 bits) reach the compiler and
 * the validator exactly, as the schema and the instance write them; the
 * carrier itself can take decimals too (integers_only false). */
static void test_exact_numbers(void **s) {
    (void)s;
    char *out;
    size_t n;
    const char *plain = "{\"a\":[1,-9223372036854775808,9223372036854775807,1.5,\"99999999999999999999\"]}";
    assert_true(tr_grammar_json_exact_numbers(plain, strlen(plain), false, &out, &n));
    assert_null(out); /* nothing to carry */
    const char *big = "[9223372036854775808,-9223372036854775809,0.1234567890123456789,1e400,\"1e400\"]";
    assert_true(tr_grammar_json_exact_numbers(big, strlen(big), false, &out, &n));
    assert_non_null(out);
    json_error_t je;
    json_t *v = json_loadb(out, n, JSON_ALLOW_NUL, &je);
    assert_non_null(v);
    const char *lit;
    size_t ln;
    static const char *const want[] = {"9223372036854775808", "-9223372036854775809",
                                       "0.1234567890123456789", "1e400"};
    for (size_t i = 0; i < 4; i++) {
        assert_true(tr_grammar_json_exact_literal(json_array_get(v, i), &lit, &ln));
        assert_int_equal(ln, strlen(want[i]));
        assert_memory_equal(lit, want[i], ln);
    }
    assert_false(tr_grammar_json_exact_literal(json_array_get(v, 4), &lit, &ln)); /* a string */
    json_decref(v);
    free(out);

    const char *range = "{\"type\":\"integer\",\"minimum\":-18446744073709551616,"
                        "\"maximum\":18446744073709551615}";
    assert_true(accepts(range, "18446744073709551615"));
    assert_false(accepts(range, "18446744073709551616"));
    assert_true(accepts(range, "-18446744073709551616"));
    assert_false(accepts(range, "-18446744073709551617"));
    assert_true(accepts(range, "7"));
    /* decimals are the doubles they denote (as Python's json reads them) */
    const char *vals = "{\"enum\":[18446744073709551616,0.12345678901234567891]}";
    assert_true(accepts(vals, "18446744073709551616"));
    assert_false(accepts(vals, "18446744073709551617"));
    assert_true(accepts(vals, "0.12345678901234568"));
    assert_false(accepts(vals, "0.1234567890123456"));
    bool valid = false;
    tr_diag d;
    const char *inst = "18446744073709551616";
    assert_int_equal(tr_js_check_instance(vals, strlen(vals), inst, strlen(inst), &valid, &d), TR_OK);
    assert_true(valid);
    assert_int_equal(tr_js_check_instance(range, strlen(range), inst, strlen(inst), &valid, &d), TR_OK);
    assert_false(valid);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),         cmocka_unit_test(test_enum_const),
        cmocka_unit_test(test_integer_ranges), cmocka_unit_test(test_number_ranges),
        cmocka_unit_test(test_multiple_of),
        cmocka_unit_test(test_multiple_of_decimal_exhaustive),   cmocka_unit_test(test_ranges_exhaustive),
        cmocka_unit_test(test_canonical_numbers),
        cmocka_unit_test(test_string_lengths), cmocka_unit_test(test_patterns),
        cmocka_unit_test(test_automaton_terminals), cmocka_unit_test(test_automaton_keys),
        cmocka_unit_test(test_whitespace_counted),
        cmocka_unit_test(test_rule_names_many),
        cmocka_unit_test(test_budget_names_the_part),
        cmocka_unit_test(test_pattern_with_nul),
        cmocka_unit_test(test_exact_numbers),
        cmocka_unit_test(test_automaton_numbers),
        cmocka_unit_test(test_automaton_key_complement),
        cmocka_unit_test(test_formats),       cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_objects),       cmocka_unit_test(test_combinators),
        cmocka_unit_test(test_oneof_disjoint_proofs),
        cmocka_unit_test(test_refs),          cmocka_unit_test(test_ref_siblings_by_draft),          cmocka_unit_test(test_errors),
        cmocka_unit_test(test_lenient),       cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_buf_limit),
        cmocka_unit_test(test_budgets),       cmocka_unit_test(test_dumps),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
