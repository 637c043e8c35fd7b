/* test_grammar_cache.c — grammar handles and the engine's compile cache
 * (runtime/engine/grammar_cache_internal.h, trellis.h "Grammars").
 *
 * On the cache alone, over a synthetic vocabulary (no model needed):
 *   - keys: the same (kind, text) is one entry whatever the options a kind
 *     does not read; hits return the same handle;
 *   - every compile error with its code and message (bad regex with its
 *     byte offset, unsupported construct, compile budget, every kind of
 *     bad choice list, bad JSON Schemas and EBNF), and failures are not
 *     cached;
 *   - the JSON kinds and EBNF through the same call: options in the key
 *     (only those the layout reads), lenient warnings, JSON_OBJECT
 *     without text, a CFG grammar's memo measured;
 *   - choices: all printable ASCII, control characters and UTF-8 escape
 *     correctly (the grammar matches exactly the choices);
 *   - a grammar whose automaton reached its state budget is dropped and
 *     compiled afresh at the next lookup, its old handle still usable;
 *   - LRU eviction under a small budget, with evicted handles still
 *     serving matchers, and memo growth counted against the budget;
 *   - single flight: 8 threads x 1,000 compiles over 20 regexes compile
 *     exactly 20 times; 8 threads compiling one over-budget pattern share
 *     its failure;
 *   - compiles, releases, matchers, stats and checks from 4 threads under
 *     a budget that keeps evicting (run under ThreadSanitizer by
 *     scripts/test.sh's tsan stage).
 *
 * Through the engine, on test_engine's fake model (engine_fake.h, with the
 * synthetic vocabulary of tiny_vocab.h: no model file either):
 *   - 1,000 requests over 20 distinct regexes, half by `regex` and half by
 *     handle, submitted from 4 threads, compile exactly 20 times; masks
 *     are computed once per grammar state across all requests (computed
 *     == the states the memos hold, the rest reused); every output is the
 *     same as with a private grammar per request (no reuse at all);
 *   - eviction under a 1 MiB cache while requests hold evicted handles;
 *   - request errors: grammar with regex, a handle of another engine;
 *     handles released after trellis_engine_free.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/harness.h"
#include <jansson.h>

#include "runtime/engine/constraint_internal.h"
#include "runtime/engine/grammar_cache_internal.h"
#include "runtime/vocab/vocab.h"
#include "tests/unit/engine_fake.h"
#include "tests/unit/test_env.h"
#include "tests/unit/test_grammar_util.h"

static grammar_vocab *small_vocab(void) {
    tg_rng r = {0x5eed};
    grammar_vocab *v = tg_vocab_random(&r, 600);
    assert_non_null(v);
    return v;
}

static trellis_grammar *compile_ok(gcache *c, trellis_grammar_kind kind,
                                   const char *text) {
    trellis_grammar *h = NULL;
    char err[512];
    tr_status st = tr_gcache_compile(c, kind, text, 0, NULL, &h, err, sizeof err);
    if (st) fprintf(stderr, "compile '%s': %s\n", text, err);
    assert_int_equal(st, TR_OK);
    assert_non_null(h);
    return h;
}

static void expect_error(gcache *c, trellis_grammar_kind kind, const char *text,
                         tr_status code, const char *frag) {
    trellis_grammar *h = (trellis_grammar *)0x1;
    char err[512] = "";
    tr_status st = tr_gcache_compile(c, kind, text, 0, NULL, &h, err, sizeof err);
    if (st != code || !strstr(err, frag))
        fprintf(stderr, "'%s': got %s '%s', expected %s with '%s'\n", text,
                tr_status_name(st), err, tr_status_name(code), frag);
    assert_int_equal(st, code);
    assert_non_null(strstr(err, frag));
    assert_ptr_equal(h, (trellis_grammar *)0x1); /* untouched */
}

/* A bad regex's message names its byte offset exactly once. */
static void expect_position_once(gcache *c, const char *regex) {
    trellis_grammar *h = NULL;
    char err[512] = "";
    assert_int_not_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_REGEX, regex, 0, NULL, &h, err,
                                           sizeof err),
                         TR_OK);
    const char *at = strstr(err, "at byte ");
    if (!at || strstr(at + 1, "at byte ")) fprintf(stderr, "'%s': '%s'\n", regex, err);
    assert_non_null(at);
    assert_null(strstr(at + 1, "at byte "));
}

static trellis_grammar_cache_stats stats(gcache *c) {
    trellis_grammar_cache_stats s;
    tr_gcache_get_stats(c, &s);
    assert_int_equal(tr_gcache_check(c), TR_OK);
    return s;
}

/* ------------------------------------------------------------------ */
/* The cache alone                                                     */
/* ------------------------------------------------------------------ */

static void test_keys_and_hits(void **state) {
    (void)state;
    grammar_vocab *v = small_vocab();
    gcache *c;
    assert_int_equal(tr_gcache_new(v, 64u << 20, &c), TR_OK);
    trellis_grammar *a = compile_ok(c, TRELLIS_GRAMMAR_REGEX, "[a-c]+x");
    trellis_grammar *b = compile_ok(c, TRELLIS_GRAMMAR_REGEX, "[a-c]+x");
    assert_ptr_equal(a, b);
    assert_int_equal(trellis_grammar_get_kind(a), TRELLIS_GRAMMAR_REGEX);
    assert_string_equal(trellis_grammar_warnings(a), "");
    /* a regex reads no options: any options, same entry */
    trellis_grammar_options o;
    trellis_grammar_options_default(&o);
    o.lenient = true;
    o.whitespace = TRELLIS_WS_PRETTY;
    o.json_numbers = TRELLIS_JSON_NUMBERS_FULL;
    trellis_grammar *d = NULL;
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_REGEX, "[a-c]+xyz", 7, &o,
                                       &d, NULL, 0), TR_OK);
    assert_ptr_equal(a, d); /* 7 bytes of the text: the same key */
    /* the same text as another kind is another entry */
    trellis_grammar *e = compile_ok(c, TRELLIS_GRAMMAR_CHOICE, "[\"[a-c]+x\"]");
    trellis_grammar *f = compile_ok(c, TRELLIS_GRAMMAR_REGEX, "[\"[a-c]+x\"]");
    assert_ptr_not_equal(e, f);
    assert_int_equal(trellis_grammar_get_kind(e), TRELLIS_GRAMMAR_CHOICE);
    assert_true(tr_grammar_matches(e->g, "[a-c]+x", 7));
    assert_false(tr_grammar_matches(e->g, "ax", 2));
    assert_true(tr_grammar_matches(f->g, "a\"[x\"]", 6)); /* a class, then x"] */
    trellis_grammar_cache_stats s = stats(c);
    assert_int_equal(s.hits, 2);
    assert_int_equal(s.misses, 3);
    assert_int_equal(s.compiles, 3);
    assert_int_equal(s.failures, 0);
    assert_int_equal(s.entries, 3);
    assert_true(s.bytes > 0 && s.bytes <= s.budget_bytes);
    assert_int_equal(s.budget_bytes, 64u << 20);
    /* references: 3 from compile calls on a, plus the cache's */
    assert_int_equal(atomic_load(&a->refs), 4);
    trellis_grammar_release(a);
    trellis_grammar_release(b);
    trellis_grammar_release(d);
    assert_int_equal(atomic_load(&a->refs), 1);
    trellis_grammar_release(e);
    /* the cache frees its references; f lives on and still works */
    tr_gcache_free(c);
    grammar_matcher *m;
    assert_int_equal(tr_grammar_matcher_new(f->g, f->v, 0, &m), TR_OK);
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, "[abx\"]", 6), TR_OK);
    assert_true(tr_grammar_matcher_is_accepting(m));
    tr_grammar_matcher_free(m);
    trellis_grammar_release(f);
    trellis_grammar_release(NULL);
    tr_grammar_vocab_free(v);
}

static void test_errors(void **state) {
    (void)state;
    grammar_vocab *v = small_vocab();
    gcache *c;
    assert_int_equal(tr_gcache_new(v, 64u << 20, &c), TR_OK);
    expect_error(c, TRELLIS_GRAMMAR_REGEX, "ab(c", TR_ERR_FORMAT, "bad regex: ");
    expect_error(c, TRELLIS_GRAMMAR_REGEX, "ab(c", TR_ERR_FORMAT, "for group at byte 2");
    expect_error(c, TRELLIS_GRAMMAR_REGEX, "a(?=b)", TR_ERR_UNSUPPORTED, "lookahead");
    expect_error(c, TRELLIS_GRAMMAR_REGEX, "a(?=b)", TR_ERR_UNSUPPORTED, "at byte 1");
    /* the position is said once (the parser's message has it already) */
    expect_position_once(c, "ab(c");
    expect_position_once(c, "(a");
    expect_position_once(c, "a(?=b)");
    expect_error(c, TRELLIS_GRAMMAR_REGEX, "[a-z]\xff", TR_ERR_FORMAT, "UTF-8");
    /* a DFA of 2^17 states: over the 50,000-state budget (or, in a slow
     * sanitizer build, the 2 s budget first); the message names it */
    expect_error(c, TRELLIS_GRAMMAR_REGEX, "(a|b)*a(a|b){16}", TR_ERR_LIMIT, "max_");
    expect_error(c, TRELLIS_GRAMMAR_CHOICE, "[]", TR_ERR_FORMAT, "empty");
    expect_error(c, TRELLIS_GRAMMAR_CHOICE, "[\"a\", 2]", TR_ERR_FORMAT,
                 "choice 1 is not a string");
    expect_error(c, TRELLIS_GRAMMAR_CHOICE, "[\"a\",\"b\",\"a\"]", TR_ERR_FORMAT,
                 "choices 0 and 2 are the same string \"a\"");
    expect_error(c, TRELLIS_GRAMMAR_CHOICE, "{\"a\": 1}", TR_ERR_FORMAT,
                 "expected a JSON array of strings");
    expect_error(c, TRELLIS_GRAMMAR_CHOICE, "[\"a\",\n \"b\"", TR_ERR_FORMAT,
                 "line 2");
    expect_error(c, TRELLIS_GRAMMAR_CHOICE, "[\"\xff\"]", TR_ERR_FORMAT, "bad choices: not JSON");
    expect_error(c, TRELLIS_GRAMMAR_JSON_SCHEMA, "{\"type\": ", TR_ERR_FORMAT,
                 "bad JSON Schema: ");
    expect_error(c, TRELLIS_GRAMMAR_JSON_SCHEMA, "{\"type\":\"array\",\"not\":{\"uniqueItems\":true}}",
                 TR_ERR_UNSUPPORTED, "uniqueItems");
    expect_error(c, TRELLIS_GRAMMAR_EBNF, "root ::= \"a\" | nowhere", TR_ERR_FORMAT,
                 "bad EBNF grammar: ");
    expect_error(c, (trellis_grammar_kind)9, "a", TR_ERR_INVALID_ARG,
                 "not a TRELLIS_GRAMMAR_* kind");
    expect_error(c, TRELLIS_GRAMMAR_REGEX, NULL, TR_ERR_INVALID_ARG, "no regex text");
    trellis_grammar_options o;
    trellis_grammar_options_default(&o);
    o.whitespace = 7;
    trellis_grammar *h = NULL;
    char err[256];
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_JSON_OBJECT, NULL, 0, &o,
                                       &h, err, sizeof err), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "options.whitespace is 7"));
    trellis_grammar_options_default(&o);
    o.json_numbers = 2;
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_JSON_SCHEMA, "{}", 0, &o, &h, err,
                                       sizeof err), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "options.json_numbers is 2, not a TRELLIS_JSON_NUMBERS_* value"));
    assert_null(h);
    trellis_grammar_options_default(&o);
    o.property_order = -1;
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_JSON_SCHEMA, "{}", 0, &o, &h, err,
                                       sizeof err), TR_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "options.property_order is -1, not a TRELLIS_PROPERTY_ORDER_* value"));
    assert_null(h);
    /* too many choice bytes */
    json_t *arr = json_array();
    char item[1100];
    memset(item, 'q', sizeof item - 1);
    item[sizeof item - 1] = 0;
    for (int i = 0; i < 260; i++) {
        snprintf(item, 8, "%07u", (unsigned)i % 10000000u); /* 7 digits at most */
        item[7] = 'q';
        json_array_append_new(arr, json_string(item));
    }
    char *big = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    expect_error(c, TRELLIS_GRAMMAR_CHOICE, big, TR_ERR_LIMIT, "bytes in all");
    free(big);
    /* failures are not cached: the same bad text fails (and counts) again */
    trellis_grammar_cache_stats s = stats(c);
    assert_int_equal(s.compiles, 0);
    assert_int_equal(s.entries, 0);
    uint64_t f0 = s.failures;
    assert_true(f0 >= 14);
    assert_int_equal(s.misses, f0);
    expect_error(c, TRELLIS_GRAMMAR_REGEX, "ab(c", TR_ERR_FORMAT, "bad regex");
    s = stats(c);
    assert_int_equal(s.failures, f0 + 1);
    assert_int_equal(s.hits, 0);
    /* and the cache still works */
    h = compile_ok(c, TRELLIS_GRAMMAR_REGEX, "ab(c)");
    trellis_grammar_release(h);
    tr_gcache_free(c);
    tr_grammar_vocab_free(v);
}

static void walk_masks(trellis_grammar *h, uint64_t seed, int steps);

/* The JSON kinds and EBNF through the same call: options in the key,
 * lenient warnings, JSON_OBJECT without text. */
static void test_json_and_ebnf(void **state) {
    (void)state;
    grammar_vocab *v = small_vocab();
    gcache *c;
    assert_int_equal(tr_gcache_new(v, 64u << 20, &c), TR_OK);
    const char *schema = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},"
                         "\"not\":{\"uniqueItems\":true}}";
    trellis_grammar_options o;
    trellis_grammar_options_default(&o);
    assert_int_equal(o.max_ws_run, 24); /* grammar/'s defaults */
    assert_int_equal(o.indent, 2);
    o.lenient = true;
    o.whitespace = TRELLIS_WS_COMPACT;
    trellis_grammar *s1 = NULL, *s2 = NULL, *s3 = NULL;
    char err[512];
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_JSON_SCHEMA, schema, 0, &o,
                                       &s1, err, sizeof err), TR_OK);
    assert_non_null(strstr(trellis_grammar_warnings(s1), "uniqueItems"));
    assert_true(tr_grammar_matches(s1->g, "[1,2,3]", 7));
    assert_false(tr_grammar_matches(s1->g, "[1, 2]", 6)); /* compact */
    assert_false(tr_grammar_matches(s1->g, "[\"a\"]", 5));
    /* compact ignores max_ws_run: the same entry */
    o.max_ws_run = 3;
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_JSON_SCHEMA, schema, 0, &o,
                                       &s2, err, sizeof err), TR_OK);
    assert_ptr_equal(s1, s2);
    /* another layout: another entry */
    o.whitespace = TRELLIS_WS_FLEXIBLE;
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_JSON_SCHEMA, schema, 0, &o,
                                       &s3, err, sizeof err), TR_OK);
    assert_ptr_not_equal(s1, s3);
    assert_true(tr_grammar_matches(s3->g, "[1,  2]", 7));
    assert_false(tr_grammar_matches(s3->g, "[1,    2]", 9)); /* 4 > max_ws_run 3 */
    trellis_grammar *obj = NULL, *obj2 = NULL;
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_JSON_OBJECT, NULL, 0, NULL, &obj,
                                       err, sizeof err), TR_OK);
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_JSON_OBJECT, "ignored", 0, NULL,
                                       &obj2, err, sizeof err), TR_OK);
    assert_ptr_equal(obj, obj2);
    assert_string_equal(trellis_grammar_warnings(obj), "");
    assert_true(tr_grammar_matches(obj->g, "{\"a\": [1, true]}", 16));
    assert_false(tr_grammar_matches(obj->g, "[1]", 3));
    trellis_grammar *eb = compile_ok(c, TRELLIS_GRAMMAR_EBNF,
                                     "root ::= \"(\" root \")\" | \"x\"");
    assert_true(tr_grammar_matches(eb->g, "((x))", 5));
    assert_false(tr_grammar_matches(eb->g, "((x)", 4));
    /* a CFG grammar's memo counts toward the budget like a regex's */
    walk_masks(eb, 9, 6);
    grammar_memo_stats ms;
    tr_grammar_get_memo_stats(eb->g, &ms);
    assert_true(ms.masks > 0 && ms.bytes > 0);
    /* canonical (the default) and full numbers: two entries of one schema */
    const char *ints = "{\"type\":\"integer\",\"minimum\":0}";
    trellis_grammar_options_default(&o);
    assert_int_equal(o.json_numbers, TRELLIS_JSON_NUMBERS_CANONICAL);
    trellis_grammar *n1 = NULL, *n2 = NULL, *n3 = NULL;
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_JSON_SCHEMA, ints, 0, &o, &n1, err,
                                       sizeof err), TR_OK);
    o.json_numbers = TRELLIS_JSON_NUMBERS_FULL;
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_JSON_SCHEMA, ints, 0, &o, &n2, err,
                                       sizeof err), TR_OK);
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_JSON_SCHEMA, ints, 0, &o, &n3, err,
                                       sizeof err), TR_OK);
    assert_ptr_not_equal(n1, n2);
    assert_ptr_equal(n2, n3);
    assert_true(tr_grammar_matches(n1->g, "12", 2));
    assert_false(tr_grammar_matches(n1->g, "12.0", 4));
    assert_false(tr_grammar_matches(n1->g, "1e5", 3));
    assert_true(tr_grammar_matches(n2->g, "12.0", 4));
    assert_true(tr_grammar_matches(n2->g, "1e5", 3));
    /* JSON_OBJECT reads it too (its numbers); a regex does not */
    trellis_grammar *o1 = NULL;
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_JSON_OBJECT, NULL, 0, &o, &o1, err,
                                       sizeof err), TR_OK);
    assert_ptr_not_equal(o1, obj);
    assert_true(tr_grammar_matches(o1->g, "{\"a\": 1e1000}", 13));
    assert_false(tr_grammar_matches(obj->g, "{\"a\": 1e1000}", 13));
    trellis_grammar_cache_stats st = stats(c);
    assert_int_equal(st.compiles, 7);
    /* property order: schema (the default) and any, two entries; plain
     * JSON objects read it not (one entry) */
    const char *ab = "{\"properties\":{\"a\":{},\"b\":{}},\"required\":[\"a\",\"b\"]}";
    trellis_grammar_options_default(&o);
    assert_int_equal(o.property_order, TRELLIS_PROPERTY_ORDER_SCHEMA);
    trellis_grammar *p1 = NULL, *p2 = NULL, *p3 = NULL, *o2 = NULL;
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_JSON_SCHEMA, ab, 0, &o, &p1, err,
                                       sizeof err), TR_OK);
    o.property_order = TRELLIS_PROPERTY_ORDER_ANY;
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_JSON_SCHEMA, ab, 0, &o, &p2, err,
                                       sizeof err), TR_OK);
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_JSON_SCHEMA, ab, 0, &o, &p3, err,
                                       sizeof err), TR_OK);
    assert_ptr_not_equal(p1, p2);
    assert_ptr_equal(p2, p3);
    assert_true(tr_grammar_matches(p1->g, "{\"a\": 1, \"b\": 2}", 16));
    assert_false(tr_grammar_matches(p1->g, "{\"b\": 2, \"a\": 1}", 16));
    assert_true(tr_grammar_matches(p2->g, "{\"b\": 2, \"a\": 1}", 16));
    assert_false(tr_grammar_matches(p2->g, "{\"b\": 2, \"b\": 1}", 16));
    assert_int_equal(tr_gcache_compile(c, TRELLIS_GRAMMAR_JSON_OBJECT, NULL, 0, &o, &o2, err,
                                       sizeof err), TR_OK);
    assert_ptr_equal(o2, obj);
    st = stats(c);
    assert_int_equal(st.compiles, 9);
    trellis_grammar *hs[] = {s1, s2, s3, obj, obj2, eb, n1, n2, n3, o1, p1, p2, p3, o2};
    for (size_t i = 0; i < sizeof hs / sizeof *hs; i++) trellis_grammar_release(hs[i]);
    tr_gcache_free(c);
    tr_grammar_vocab_free(v);
}

/* A grammar whose automaton reaches its state budget fails every matcher
 * from then on: the cache drops it at the next lookup and compiles the
 * text afresh (counted as exhausted and as a miss), while the requests
 * holding the old handle keep it. */
static void test_exhausted_recompiled(void **state) {
    (void)state;
    grammar_vocab *v = small_vocab();
    gcache *c;
    assert_int_equal(tr_gcache_new(v, 64u << 20, &c), TR_OK);
    grammar_limits lim;
    tr_grammar_limits_default(&lim);
    lim.max_lazy_dfa_states = 40;
    tr_gcache_set_limits(c, &lim);
    /* the 10th symbol from the end: each new window is a new state */
    const char *text = "root ::= [ab]* \"a\" [ab]{9}";
    trellis_grammar *h1 = compile_ok(c, TRELLIS_GRAMMAR_EBNF, text);
    grammar_matcher *m = NULL;
    assert_int_equal(tr_grammar_matcher_new(h1->g, h1->v, 0, &m), TR_OK);
    tr_status st = TR_OK;
    uint32_t x = 1;
    for (int i = 0; i < 400 && st == TR_OK; i++) {
        x = x * 1103515245u + 12345u;
        st = tr_grammar_matcher_accept_bytes(m, (x >> 16) & 1 ? "a" : "b", 1);
    }
    assert_int_equal(st, TR_ERR_LIMIT);
    assert_true(tr_grammar_exhausted(h1->g));
    trellis_grammar *h2 = compile_ok(c, TRELLIS_GRAMMAR_EBNF, text);
    assert_ptr_not_equal(h1, h2);
    assert_false(tr_grammar_exhausted(h2->g));
    assert_true(tr_grammar_matches(h2->g, "abbbbbbbbb", 10));
    trellis_grammar *h3 = compile_ok(c, TRELLIS_GRAMMAR_EBNF, text); /* a hit */
    assert_ptr_equal(h2, h3);
    trellis_grammar_cache_stats s = stats(c);
    assert_int_equal(s.exhausted, 1);
    assert_int_equal(s.compiles, 2);
    assert_int_equal(s.misses, 2);
    assert_int_equal(s.hits, 1);
    assert_int_equal(s.entries, 1);
    /* the old handle still answers (with the error) and is freed last */
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, "a", 1), TR_ERR_LIMIT);
    tr_grammar_matcher_free(m);
    trellis_grammar_release(h1);
    trellis_grammar_release(h2);
    trellis_grammar_release(h3);
    tr_gcache_free(c);
    tr_grammar_vocab_free(v);
}

/* Choices with every printable ASCII character, control characters and
 * multi-byte UTF-8: the grammar matches exactly the choices, not their
 * prefixes, extensions or concatenations; the order of the list does not
 * matter. */
static void test_choices(void **state) {
    (void)state;
    grammar_vocab *v = small_vocab();
    gcache *c;
    assert_int_equal(tr_gcache_new(v, 64u << 20, &c), TR_OK);
    enum { N = 101 };
    char items[N][8];
    json_t *arr = json_array(), *rev = json_array();
    for (int i = 0; i < 95; i++) { /* each printable ASCII char, twice + "z" */
        snprintf(items[i], sizeof items[i], "%c%cz", 32 + i, 32 + i);
        json_array_append_new(arr, json_string(items[i]));
    }
    static const char *const extra[N - 95] = {"\t\n\x01", "\x7f", "\xc3\xa9t\xc3\xa9",
                                              "\xe4\xb8\xad", "yes", ""};
    for (int i = 95; i < N; i++) {
        snprintf(items[i], sizeof items[i], "%s", extra[i - 95]);
        json_array_append_new(arr, json_string(items[i]));
    }
    for (int i = N - 1; i >= 0; i--) json_array_append_new(rev, json_string(items[i]));
    char *t1 = json_dumps(arr, JSON_COMPACT), *t2 = json_dumps(rev, 0);
    json_decref(arr);
    json_decref(rev);
    trellis_grammar *h1 = compile_ok(c, TRELLIS_GRAMMAR_CHOICE, t1);
    trellis_grammar *h2 = compile_ok(c, TRELLIS_GRAMMAR_CHOICE, t2);
    assert_ptr_not_equal(h1, h2); /* different texts, different keys */
    grammar_stats s1, s2;
    tr_grammar_get_stats(h1->g, &s1);
    tr_grammar_get_stats(h2->g, &s2);
    assert_int_equal(s1.dfa_states, s2.dfa_states); /* the same minimal DFA */
    for (int i = 0; i < N; i++) {
        size_t n = strlen(items[i]);
        assert_true(tr_grammar_matches(h1->g, items[i], n));
        assert_true(tr_grammar_matches(h2->g, items[i], n));
        if (n > 1) assert_false(tr_grammar_matches(h1->g, items[i], n - 1));
        char longer[16];
        snprintf(longer, sizeof longer, "%sz", items[i]);
        assert_false(tr_grammar_matches(h1->g, longer, n + 1));
        snprintf(longer, sizeof longer, "%s%s", items[i], items[(i + 1) % (N - 1)]);
        if (n > 0) assert_false(tr_grammar_matches(h1->g, longer, strlen(longer)));
    }
    assert_false(tr_grammar_matches(h1->g, "ye", 2));
    assert_true(tr_grammar_matches(h1->g, "", 0)); /* the empty choice */
    assert_true(tr_grammar_matches(h1->g, "\\\\z", 3)); /* backslashes */
    assert_false(tr_grammar_matches(h1->g, "\\z", 2));
    free(t1);
    free(t2);
    trellis_grammar_release(h1);
    trellis_grammar_release(h2);
    tr_gcache_free(c);
    tr_grammar_vocab_free(v);
}

/* Fills the masks of n random walks through h's grammar (grows its memo). */
static void walk_masks(trellis_grammar *h, uint64_t seed, int steps) {
    grammar_matcher *m;
    assert_int_equal(tr_grammar_matcher_new(h->g, h->v, 0, &m), TR_OK);
    size_t nw = tr_grammar_vocab_mask_words(h->v);
    uint64_t *mask = malloc(nw * sizeof *mask);
    tg_rng r = {seed | 1};
    for (int i = 0; i < steps; i++) {
        assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
        size_t k = tr_grammar_mask_count(mask, nw);
        if (k == 0) break;
        int32_t t = tr_grammar_mask_nth(mask, nw, tg_below(&r, (uint32_t)k));
        if (tr_grammar_vocab_is_eog(h->v, t)) break;
        assert_int_equal(tr_grammar_matcher_accept_token(m, t), TR_OK);
    }
    free(mask);
    tr_grammar_matcher_free(m);
}

static void test_lru_eviction(void **state) {
    (void)state;
    grammar_vocab *v = small_vocab();
    gcache *c;
    /* the weight of one entry, measured alone */
    assert_int_equal(tr_gcache_new(v, 64u << 20, &c), TR_OK);
    trellis_grammar *h = compile_ok(c, TRELLIS_GRAMMAR_REGEX, "a[0-9]{3}");
    uint64_t w = stats(c).bytes;
    trellis_grammar_release(h);
    tr_gcache_free(c);
    /* room for two and a half entries of that shape */
    assert_int_equal(tr_gcache_new(v, w * 5 / 2, &c), TR_OK);
    trellis_grammar *A = compile_ok(c, TRELLIS_GRAMMAR_REGEX, "a[0-9]{3}");
    trellis_grammar *B = compile_ok(c, TRELLIS_GRAMMAR_REGEX, "b[0-9]{3}");
    assert_int_equal(stats(c).entries, 2);
    trellis_grammar *A2 = compile_ok(c, TRELLIS_GRAMMAR_REGEX, "a[0-9]{3}"); /* A is MRU */
    assert_ptr_equal(A, A2);
    trellis_grammar *C = compile_ok(c, TRELLIS_GRAMMAR_REGEX, "c[0-9]{3}");
    trellis_grammar_cache_stats s = stats(c);
    assert_int_equal(s.entries, 2);
    assert_int_equal(s.evictions, 1);
    assert_true(s.bytes <= s.budget_bytes);
    /* B went (least recently used); A stayed */
    trellis_grammar *A3 = compile_ok(c, TRELLIS_GRAMMAR_REGEX, "a[0-9]{3}");
    assert_ptr_equal(A3, A);
    trellis_grammar *B2 = compile_ok(c, TRELLIS_GRAMMAR_REGEX, "b[0-9]{3}");
    assert_ptr_not_equal(B2, B); /* compiled again */
    s = stats(c);
    assert_int_equal(s.compiles, 4);
    assert_int_equal(s.evictions, 2); /* C went for B2 */
    /* the evicted B still serves its holders */
    walk_masks(B, 1, 8);
    assert_true(tr_grammar_matches(B->g, "b123", 4));
    /* memo growth counts: fill A's masks, then one more insert evicts
     * down to the budget again */
    walk_masks(A, 2, 6);
    grammar_memo_stats ms;
    tr_grammar_get_memo_stats(A->g, &ms);
    assert_true(ms.masks >= 4);
    trellis_grammar *D = compile_ok(c, TRELLIS_GRAMMAR_REGEX, "d[0-9]{3}");
    s = stats(c);
    assert_true(s.bytes <= s.budget_bytes);
    assert_true(s.evictions >= 3);
    trellis_grammar *hs[] = {A, A2, A3, B, B2, C, D};
    for (size_t i = 0; i < sizeof hs / sizeof *hs; i++) trellis_grammar_release(hs[i]);
    /* a budget smaller than any entry: each is evicted once handed out */
    tr_gcache_free(c);
    assert_int_equal(tr_gcache_new(v, 1, &c), TR_OK);
    h = compile_ok(c, TRELLIS_GRAMMAR_REGEX, "x+");
    s = stats(c);
    assert_int_equal(s.entries, 0);
    assert_int_equal(s.evictions, 1);
    walk_masks(h, 3, 4); /* still usable (no memo: budget too small) */
    trellis_grammar_release(h);
    tr_gcache_free(c);
    tr_grammar_vocab_free(v);
}

/* ---- threads ---- */

/* Patterns that compile in well under a second even in a ThreadSanitizer
 * build on a loaded machine (the compile time budget is 2 s of wall
 * clock); \p{N} (~5 ms in Release) makes concurrent waits likely. */
static const char *const k_regexes[20] = {
    "[0-9]{3}-[a-z]{2,4}", "[\\x{C0}-\\x{24F}]+( [\\x{C0}-\\x{24F}]+)*",
    "(yes|no|maybe)", "[A-Z][a-z]+", "-?[0-9]+(\\.[0-9]+)?", "\\{\"a\": [0-9]+\\}",
    "[a-f0-9]{8}", "(ab|cd)+e", "x{2,5}y?", "[A-Z][a-z]{1,8}( [A-Z][a-z]{1,8}){0,3}",
    "[^\"]*\"", "(0|[1-9][0-9]*)", "hello (world|there)", "[ -~]{1,20}", "a+b+c+",
    "\\w+@\\w+\\.com", "(\\d{1,3}\\.){3}\\d{1,3}", "[xyz]{4}", "(a|b|c|d|e|f)*g",
    "\\p{N}+\\p{P}?"};

typedef struct flight_ctx {
    gcache *c;
    pthread_barrier_t *start;
    uint64_t seed;
    int iters;
    const char *pattern; /* failure test: everyone compiles this */
    tr_status status;
    char err[256];
    trellis_grammar *seen[20];
    int mismatches;
} flight_ctx;

static void *flight_thread(void *p) {
    flight_ctx *x = p;
    pthread_barrier_wait(x->start);
    if (x->pattern) {
        trellis_grammar *h = NULL;
        x->status = tr_gcache_compile(x->c, TRELLIS_GRAMMAR_REGEX, x->pattern, 0, NULL,
                                      &h, x->err, sizeof x->err);
        return NULL;
    }
    uint64_t r = x->seed;
    for (int i = 0; i < x->iters; i++) {
        r = mix(r);
        int k = (int)(r % 20);
        trellis_grammar *h = NULL;
        if (tr_gcache_compile(x->c, TRELLIS_GRAMMAR_REGEX, k_regexes[k], 0, NULL, &h,
                              NULL, 0) != TR_OK) {
            x->mismatches++;
            continue;
        }
        /* the budget is large: a key always maps to one handle */
        if (x->seen[k] && x->seen[k] != h) x->mismatches++;
        if (!x->seen[k]) x->seen[k] = trellis_grammar_ref(h);
        trellis_grammar_release(h);
    }
    return NULL;
}

static void test_single_flight(void **state) {
    (void)state;
    enum { T = 8 };
    const int iters = small_scale() ? 200 : 1000;
    grammar_vocab *v = small_vocab();
    gcache *c;
    assert_int_equal(tr_gcache_new(v, 256u << 20, &c), TR_OK);
    pthread_barrier_t b;
    pthread_barrier_init(&b, NULL, T);
    flight_ctx x[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) {
        x[i] = (flight_ctx){.c = c, .start = &b, .seed = 77 + (uint64_t)i, .iters = iters};
        assert_int_equal(pthread_create(&th[i], NULL, flight_thread, &x[i]), 0);
    }
    for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
    trellis_grammar_cache_stats s = stats(c);
    assert_int_equal(s.compiles, 20);
    assert_int_equal(s.misses, 20);
    assert_int_equal(s.hits, (uint64_t)T * iters - 20);
    assert_int_equal(s.failures, 0);
    assert_int_equal(s.entries, 20);
    for (int i = 0; i < T; i++) {
        assert_int_equal(x[i].mismatches, 0);
        for (int k = 0; k < 20; k++) {
            if (x[i].seen[k] && x[0].seen[k]) assert_ptr_equal(x[i].seen[k], x[0].seen[k]);
            trellis_grammar_release(x[i].seen[k]);
        }
    }
    /* one over-budget pattern from 8 threads at once: each gets the error,
     * the compile runs at most once per wave of waiters */
    for (int i = 0; i < T; i++) {
        x[i] = (flight_ctx){.c = c, .start = &b, .pattern = "(a|b)*a(a|b){18}"};
        assert_int_equal(pthread_create(&th[i], NULL, flight_thread, &x[i]), 0);
    }
    for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < T; i++) {
        assert_int_equal(x[i].status, TR_ERR_LIMIT);
        assert_string_equal(x[i].err, x[0].err);
    }
    assert_non_null(strstr(x[0].err, "bad regex"));
    trellis_grammar_cache_stats s2 = stats(c);
    uint64_t f = s2.failures - s.failures;
    fprintf(stderr, "failure shared: %llu compile(s) for %d threads\n",
            (unsigned long long)f, T);
    assert_true(f >= 1 && f <= T);
    assert_int_equal(s2.misses - s.misses, f);
    assert_int_equal(s2.hits - s.hits, T - f);
    pthread_barrier_destroy(&b);
    tr_gcache_free(c);
    tr_grammar_vocab_free(v);
}

typedef struct churn_ctx {
    gcache *c;
    uint64_t seed;
    int iters;
} churn_ctx;

static void *churn_thread(void *p) {
    churn_ctx *x = p;
    uint64_t r = x->seed;
    trellis_grammar *held[4] = {0};
    for (int i = 0; i < x->iters; i++) {
        r = mix(r);
        int k = (int)(r % 20), slot = (int)((r >> 8) % 4);
        trellis_grammar *h = NULL;
        if (tr_gcache_compile(x->c, TRELLIS_GRAMMAR_REGEX, k_regexes[k], 0, NULL, &h,
                              NULL, 0) == TR_OK) {
            if ((r >> 16) % 4 == 0) walk_masks(h, r, 6); /* memo writes */
            trellis_grammar_release(held[slot]);
            held[slot] = h; /* released later, maybe after eviction */
        }
        if ((r >> 24) % 16 == 0) {
            trellis_grammar_cache_stats s;
            tr_gcache_get_stats(x->c, &s);
            if (tr_gcache_check(x->c) != TR_OK) abort();
        }
        if ((r >> 32) % 32 == 0) { /* a failure now and then */
            trellis_grammar *bad = NULL;
            tr_gcache_compile(x->c, TRELLIS_GRAMMAR_REGEX, "(x", 0, NULL, &bad, NULL, 0);
        }
    }
    for (int s = 0; s < 4; s++) trellis_grammar_release(held[s]);
    return NULL;
}

/* Compiles, releases, matchers (memo writes), stats and failures from 4
 * threads under a budget that holds ~5 of the 20 grammars: evictions all
 * the time, handles outliving their entries. */
static void test_churn_threads(void **state) {
    (void)state;
    enum { T = 4 };
    grammar_vocab *v = small_vocab();
    gcache *c;
    assert_int_equal(tr_gcache_new(v, 48u << 10, &c), TR_OK);
    churn_ctx x[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) {
        x[i] = (churn_ctx){.c = c, .seed = 1000 + (uint64_t)i,
                           .iters = small_scale() ? 150 : 600};
        assert_int_equal(pthread_create(&th[i], NULL, churn_thread, &x[i]), 0);
    }
    for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
    trellis_grammar_cache_stats s = stats(c);
    fprintf(stderr, "churn: %llu hits %llu misses %llu evictions %d entries %llu bytes\n",
            (unsigned long long)s.hits, (unsigned long long)s.misses,
            (unsigned long long)s.evictions, s.entries, (unsigned long long)s.bytes);
    assert_true(s.evictions > 20);
    assert_true(s.bytes <= s.budget_bytes);
    assert_int_equal(s.misses, s.compiles + s.failures);
    tr_gcache_free(c);
    tr_grammar_vocab_free(v);
}

/* ------------------------------------------------------------------ */
/* Through the engine (fake model)                                     */
/* ------------------------------------------------------------------ */

/* The reference: a private grammar per sample, compiled per state (no
 * cache, no shared memo). */
typedef struct priv_state {
    grammar *g;
    grammar_vocab *v;
    grammar_matcher *m;
    const char *rx;
} priv_state;

static void *priv_new(const char *rx, grammar_vocab *v) {
    priv_state *p = calloc(1, sizeof *p);
    assert_int_equal(tr_grammar_compile_regex(rx, strlen(rx), NULL, &p->g, NULL), TR_OK);
    assert_int_equal(tr_grammar_matcher_new(p->g, v, 0, &p->m), TR_OK);
    p->v = tr_grammar_vocab_ref(v);
    p->rx = rx;
    return p;
}
#define PM(st) (((priv_state *)(st))->m)
static int priv_fill(void *st, uint64_t *m, size_t n) {
    return tr_constraint_matcher_ops.fill_mask(PM(st), m, n);
}
static int priv_accept(void *st, int32_t t) {
    return tr_constraint_matcher_ops.accept(PM(st), t);
}
static bool priv_done(void *st) { return tr_constraint_matcher_ops.is_done(PM(st)); }
static int priv_forced(void *st, uint8_t *b, size_t cap, size_t *len) {
    return tr_constraint_matcher_ops.forced_bytes(PM(st), b, cap, len);
}
static int priv_rollback(void *st, int32_t n) {
    return tr_constraint_matcher_ops.rollback(PM(st), n);
}
static void priv_free(void *st) {
    priv_state *p = st;
    tr_grammar_matcher_free(p->m);
    tr_grammar_free(p->g);
    tr_grammar_vocab_free(p->v);
    free(p);
}
static void *priv_clone(void *st) {
    priv_state *p = st;
    return priv_new(p->rx, p->v);
}
static const trellis_constraint_ops k_priv_ops = {
    .fill_mask = priv_fill, .accept = priv_accept, .is_done = priv_done,
    .clone = priv_clone, .free = priv_free, .forced_bytes = priv_forced,
    .rollback = priv_rollback};

enum { NREQ = 1000 };

typedef struct req_spec {
    int32_t prompt[16];
    int rx;
    trellis_request q;
} req_spec;

static void make_specs(req_spec *sp, int n) {
    uint64_t r = 4242;
    for (int i = 0; i < n; i++) {
        r = mix(r);
        rand_tokens(r, sp[i].prompt, 16);
        sp[i].rx = (int)(r % 20);
        trellis_request_default(&sp[i].q);
        sp[i].q.tokens = sp[i].prompt;
        sp[i].q.n_tokens = 4 + (int)((r >> 8) % 12);
        sp[i].q.max_tokens = 4 + (int)((r >> 16) % 20);
        sp[i].q.seed = r;
        sp[i].q.temperature = (r >> 24) % 3 == 0 ? 0.0f : 1.0f;
        sp[i].q.n = (r >> 32) % 10 == 0 ? 2 : 1;
        /* explicit: AUTO would differ between a regex and the reference's
         * custom constraint */
        sp[i].q.end_span = (r >> 40) & 1 ? TRELLIS_END_SPAN_ON : TRELLIS_END_SPAN_OFF;
    }
}

typedef struct submit_ctx {
    trellis_engine *e;
    req_spec *sp;
    result *rs;
    int from, to;
} submit_ctx;

/* Half the requests by `regex`, half by a handle compiled on this thread
 * (and released right after submit: the request holds its own). */
static void *submit_thread(void *p) {
    submit_ctx *x = p;
    for (int i = x->from; i < x->to; i++) {
        trellis_request q = x->sp[i].q;
        trellis_grammar *h = NULL;
        char err[256];
        if (i % 2) {
            q.regex = k_regexes[x->sp[i].rx];
        } else if (trellis_grammar_compile(x->e, TRELLIS_GRAMMAR_REGEX,
                                           k_regexes[x->sp[i].rx], 0, NULL, &h, err,
                                           sizeof err) != 0) {
            fprintf(stderr, "compile: %s\n", err);
            abort(); /* cmocka's asserts are for the main thread */
        } else {
            q.grammar = h;
        }
        memset(&x->rs[i], 0, sizeof x->rs[i]);
        x->rs[i].n = q.n;
        if (trellis_submit(x->e, &q, &x->rs[i].id, err, sizeof err) != 0) {
            fprintf(stderr, "submit: %s\n", err);
            abort();
        }
        trellis_grammar_release(h);
    }
    return NULL;
}

/* Drains events for requests identified by id (any order of ids). */
static void drain_by_id(trellis_engine *e, result *rs, int n, int expected_done) {
    int done = 0;
    while (done < expected_done) {
        trellis_event *ev;
        assert_int_equal(trellis_wait(e, 600000, &ev), 1);
        int k = -1;
        for (int i = 0; i < n && k < 0; i++)
            if (rs[i].id == ev->request_id) k = i;
        assert_true(k >= 0);
        bool was = rs[k].request_done;
        collect(&rs[k], ev);
        if (!was && rs[k].request_done) done++;
        trellis_event_free(ev);
    }
}

static void test_engine_1000_requests(void **state) {
    (void)state;
    req_spec *sp = calloc(NREQ, sizeof *sp);
    result *got = calloc(NREQ, sizeof *got), *ref = calloc(NREQ, sizeof *ref);
    make_specs(sp, NREQ);
    fake_cfg cfg = fake_default();
    fake *f;
    trellis_engine *e = fake_engine(&cfg, &f);
    /* 4 submitting threads; ids are assigned concurrently, so events are
     * matched by id after all submits returned */
    enum { T = 4 };
    submit_ctx x[T];
    pthread_t th[T];
    for (int i = 0; i < T; i++) {
        x[i] = (submit_ctx){.e = e, .sp = sp, .rs = got, .from = i * NREQ / T,
                            .to = (i + 1) * NREQ / T};
        assert_int_equal(pthread_create(&th[i], NULL, submit_thread, &x[i]), 0);
    }
    for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
    drain_by_id(e, got, NREQ, NREQ);
    assert_int_equal(f->bad, 0);
    trellis_grammar_cache_stats s;
    trellis_grammar_cache_get_stats(e, &s);
    fprintf(stderr, "1000 requests: %llu compiles, %llu hits, masks %llu computed "
                    "%llu reused\n",
            (unsigned long long)s.compiles, (unsigned long long)s.hits,
            (unsigned long long)s.masks_computed, (unsigned long long)s.masks_reused);
    assert_int_equal(s.compiles, 20);
    assert_int_equal(s.misses, 20);
    assert_int_equal(s.hits, NREQ - 20);
    assert_int_equal(s.entries, 20);
    /* masks: once per state the memos hold, all others reused */
    uint64_t memo_masks = 0, states = 0;
    for (int k = 0; k < 20; k++) {
        trellis_grammar *h = NULL;
        assert_int_equal(trellis_grammar_compile(e, TRELLIS_GRAMMAR_REGEX, k_regexes[k],
                                                 0, NULL, &h, NULL, 0), 0);
        grammar_memo_stats ms;
        grammar_stats gs;
        tr_grammar_get_memo_stats(h->g, &ms);
        tr_grammar_get_stats(h->g, &gs);
        assert_true(ms.masks <= gs.dfa_states);
        memo_masks += ms.masks;
        states += gs.dfa_states;
        trellis_grammar_release(h);
    }
    assert_int_equal(s.masks_computed, memo_masks);
    assert_true(s.masks_reused > 4 * s.masks_computed);
    expect_clean(e);
    trellis_engine_free(e);

    /* the same requests, each sample with a private grammar */
    e = fake_engine(&cfg, &f);
    grammar_vocab *v = NULL;
    {
        tokenizer *tok = tv_tokenizer();
        assert_non_null(tok);
        assert_int_equal(tr_vocab_from_tokenizer(tok, &v, NULL), TR_OK);
        tr_tokenizer_free(tok);
    }
    for (int i = 0; i < NREQ; i++) {
        trellis_request q = sp[i].q;
        q.constraint = &k_priv_ops;
        q.constraint_state = priv_new(k_regexes[sp[i].rx], v);
        submit_ok(e, &q, &ref[i]);
    }
    drain_by_id(e, ref, NREQ, NREQ);
    trellis_grammar_cache_stats s0;
    trellis_grammar_cache_get_stats(e, &s0);
    assert_int_equal(s0.compiles, 0);
    int stop = 0;
    for (int i = 0; i < NREQ; i++) {
        for (int j = 0; j < sp[i].q.n; j++) {
            same_tokens(&ref[i], &got[i], j);
            assert_string_equal(ref[i].s[j].text, got[i].s[j].text);
            stop += got[i].s[j].finish == TRELLIS_FINISH_STOP;
        }
        result_free(&ref[i]);
        result_free(&got[i]);
    }
    assert_true(stop > NREQ / 4); /* many reached the end of their regex */
    tr_grammar_vocab_free(v);
    trellis_engine_free(e);
    free(sp);
    free(got);
    free(ref);
}

/* Runs one request per pattern (pattern i with handle hs[i] if given, else
 * compiled here) and checks each output against its pattern. */
static void run_patterns(trellis_engine *e, char (*rx)[32], int n, int first,
                         trellis_grammar **hs) {
    result *rs = calloc((size_t)n, sizeof *rs);
    int32_t prompt[8];
    for (int i = 0; i < n; i++) {
        rand_tokens(900 + (uint64_t)(first + i), prompt, 8);
        trellis_grammar *h = hs ? trellis_grammar_ref(hs[i]) : NULL;
        if (!h)
            assert_int_equal(trellis_grammar_compile(e, TRELLIS_GRAMMAR_REGEX,
                                                     rx[first + i], 0, NULL, &h, NULL,
                                                     0), 0);
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompt;
        q.n_tokens = 8;
        q.max_tokens = 24;
        q.n = 2;
        q.seed = (uint64_t)(first + i);
        q.grammar = h;
        q.end_span = TRELLIS_END_SPAN_OFF; /* long outputs: big memos */
        submit_ok(e, &q, &rs[i]);
        trellis_grammar_release(h); /* the request holds it now */
    }
    drain(e, rs, n);
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < 2; j++) {
            const char *t = rs[i].s[j].text;
            size_t l = rs[i].s[j].text_len;
            if (rs[i].s[j].finish == TRELLIS_FINISH_STOP)
                assert_true(pcre_full_match(rx[first + i], t, l));
            else
                assert_true(pcre_live_prefix(rx[first + i], t, l));
        }
        result_free(&rs[i]);
    }
    free(rs);
}

/* A 1 MiB cache against 60 grammars whose memos (6 KiB per mask) need
 * several times that: warm memos get evicted by later compiles while
 * requests still hold their handles, an evicted handle still constrains
 * new requests, and every output stays valid. */
static void test_engine_eviction(void **state) {
    (void)state;
    fake_cfg cfg = fake_default();
    cfg.grammar_cache_mb = 1;
    fake *f;
    trellis_engine *e = fake_engine(&cfg, &f);
    enum { N = 60 };
    char rx[N][32];
    for (int i = 0; i < N; i++)
        snprintf(rx[i], sizeof rx[i], "%c%c[a-z]{1,12}[0-9]?", 'a' + i % 26,
                 'a' + i / 26);
    /* warm 30 memos (~30 x 10 masks x 6 KiB); rx[0] first, so it is the
     * least recently used */
    trellis_grammar *h0 = NULL;
    assert_int_equal(trellis_grammar_compile(e, TRELLIS_GRAMMAR_REGEX, rx[0], 0, NULL,
                                             &h0, NULL, 0), 0);
    run_patterns(e, rx, 30, 0, NULL);
    /* 30 more while requests run: the warm ones are evicted */
    f->delay_us = 200;
    run_patterns(e, rx, 30, 30, NULL);
    trellis_grammar_cache_stats s;
    trellis_grammar_cache_get_stats(e, &s);
    fprintf(stderr, "1 MiB cache: %llu compiles, %llu evictions, %d entries, %llu bytes\n",
            (unsigned long long)s.compiles, (unsigned long long)s.evictions, s.entries,
            (unsigned long long)s.bytes);
    assert_int_equal(s.budget_bytes, 1u << 20);
    assert_true(s.bytes <= s.budget_bytes);
    assert_true(s.evictions >= 10);
    assert_true(s.entries < N);
    /* h0 was evicted: compiling its text again makes a new grammar */
    trellis_grammar *h0b = NULL;
    assert_int_equal(trellis_grammar_compile(e, TRELLIS_GRAMMAR_REGEX, rx[0], 0, NULL,
                                             &h0b, NULL, 0), 0);
    assert_ptr_not_equal(h0, h0b);
    /* and the evicted handle still constrains requests, warm memo and all */
    grammar_memo_stats m0, m1;
    tr_grammar_get_memo_stats(h0->g, &m0);
    assert_true(m0.masks > 0);
    run_patterns(e, rx, 1, 0, &h0);
    tr_grammar_get_memo_stats(h0->g, &m1);
    assert_true(m1.masks >= m0.masks);
    trellis_grammar_release(h0);
    trellis_grammar_release(h0b);
    assert_int_equal(f->bad, 0);
    expect_all_free(e);
    trellis_engine_free(e);
}

static void test_engine_request_errors(void **state) {
    (void)state;
    fake_cfg cfg = fake_default();
    trellis_engine *e1 = fake_engine(&cfg, NULL), *e2 = fake_engine(&cfg, NULL);
    trellis_grammar *h = NULL;
    char err[512];
    assert_int_equal(trellis_grammar_compile(e1, TRELLIS_GRAMMAR_REGEX, "[a-z]{3}", 0,
                                             NULL, &h, err, sizeof err), 0);
    int32_t prompt[4] = {100, 200, 300, 400};
    trellis_request q;
    trellis_request_default(&q);
    q.tokens = prompt;
    q.n_tokens = 4;
    q.grammar = h;
    q.regex = "a";
    assert_int_equal(trellis_submit(e1, &q, NULL, err, sizeof err), TRELLIS_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "at most one of grammar, regex and constraint"));
    q.regex = NULL;
    assert_int_equal(trellis_submit(e2, &q, NULL, err, sizeof err), TRELLIS_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "another engine"));
    q.grammar = NULL;
    q.regex = "[a-";
    assert_int_equal(trellis_submit(e1, &q, NULL, err, sizeof err), TRELLIS_ERR_FORMAT);
    assert_non_null(strstr(err, "bad regex"));
    /* choices through the public call */
    const char *ch[] = {"red", "green", "blue"};
    trellis_grammar *c = NULL;
    assert_int_equal(trellis_grammar_compile_choices(e1, ch, 3, &c, err, sizeof err), 0);
    assert_int_equal(trellis_grammar_get_kind(c), TRELLIS_GRAMMAR_CHOICE);
    const char *dup[] = {"red", "red"};
    trellis_grammar *bad = NULL;
    assert_int_equal(trellis_grammar_compile_choices(e1, dup, 2, &bad, err, sizeof err),
                     TRELLIS_ERR_FORMAT);
    assert_non_null(strstr(err, "same string"));
    const char *nul[] = {"a", NULL};
    assert_int_equal(trellis_grammar_compile_choices(e1, nul, 2, &bad, err, sizeof err),
                     TRELLIS_ERR_INVALID_ARG);
    const char *inv[] = {"\xc3"};
    assert_int_equal(trellis_grammar_compile_choices(e1, inv, 1, &bad, err, sizeof err),
                     TRELLIS_ERR_FORMAT);
    assert_non_null(strstr(err, "UTF-8"));
    assert_int_equal(trellis_grammar_compile_choices(e1, NULL, 0, &bad, err, sizeof err),
                     TRELLIS_ERR_FORMAT);
    assert_non_null(strstr(err, "empty"));
    assert_null(bad);
    /* a choice request runs and ends with one of the choices, n = 3 */
    q.regex = NULL;
    q.grammar = c;
    q.n = 3;
    q.seed = 11;
    q.max_tokens = 10;
    result r;
    run1(e1, &q, &r);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r.s[i].finish, TRELLIS_FINISH_STOP);
        assert_true(!strcmp(r.s[i].text, "red") || !strcmp(r.s[i].text, "green") ||
                    !strcmp(r.s[i].text, "blue"));
    }
    result_free(&r);
    trellis_engine_free(e2);
    trellis_engine_free(e1);
    /* handles outlive their engine: releasing them now is safe */
    assert_true(tr_grammar_matches(h->g, "abc", 3));
    trellis_grammar_release(h);
    trellis_grammar_release(c);
}

/* JSON object and JSON Schema handles constrain requests end to end:
 * finished outputs parse (jansson) as what the grammar promises. */
static void test_engine_json(void **state) {
    (void)state;
    fake_cfg cfg = fake_default();
    trellis_engine *e = fake_engine(&cfg, NULL);
    trellis_grammar *obj = NULL, *sch = NULL;
    char err[512];
    assert_int_equal(trellis_grammar_compile(e, TRELLIS_GRAMMAR_JSON_OBJECT, NULL, 0, NULL,
                                             &obj, err, sizeof err), 0);
    const char *schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":"
                         "\"integer\",\"minimum\":0,\"maximum\":1000},\"ok\":"
                         "{\"type\":\"boolean\"}},"
                         "\"required\":[\"n\",\"ok\"],\"additionalProperties\":false}";
    trellis_grammar_options o;
    trellis_grammar_options_default(&o);
    o.whitespace = TRELLIS_WS_COMPACT;
    assert_int_equal(trellis_grammar_compile(e, TRELLIS_GRAMMAR_JSON_SCHEMA, schema, 0, &o,
                                             &sch, err, sizeof err), 0);
    int parsed = 0;
    for (int k = 0; k < 2; k++) {
        int32_t prompt[6];
        rand_tokens(31 + (uint64_t)k, prompt, 6);
        trellis_request q;
        trellis_request_default(&q);
        q.tokens = prompt;
        q.n_tokens = 6;
        q.grammar = k ? sch : obj;
        q.n = 4;
        q.seed = 3;
        q.max_tokens = 200;
        result r;
        run1(e, &q, &r);
        for (int j = 0; j < 4; j++) {
            if (r.s[j].finish != TRELLIS_FINISH_STOP) {
                assert_int_equal(r.s[j].finish, TRELLIS_FINISH_LENGTH);
                continue;
            }
            json_error_t je;
            json_t *v = json_loadb(r.s[j].text, r.s[j].text_len, 0, &je);
            if (!v) {
                /* valid JSON numbers jansson cannot hold (1e999999) are
                 * the only excuse */
                fprintf(stderr, "jansson: %s: %s\n", je.text, r.s[j].text);
                assert_non_null(strstr(je.text, "overflow"));
                continue;
            }
            assert_true(json_is_object(v));
            if (k) {
                /* JSON Schema integers include 1.0 and 5e2 */
                json_t *n = json_object_get(v, "n");
                double x = json_number_value(n);
                if (!json_is_number(n) || x != (double)(int64_t)x || x < 0 || x > 1000)
                    fprintf(stderr, "bad n: %s\n", r.s[j].text);
                assert_true(json_is_number(n));
                assert_true(x == (double)(int64_t)x && x >= 0 && x <= 1000);
                assert_true(json_is_boolean(json_object_get(v, "ok")));
                assert_int_equal(json_object_size(v), 2);
            }
            json_decref(v);
            parsed++;
        }
        result_free(&r);
    }
    fprintf(stderr, "json: %d of 8 samples finished and parsed\n", parsed);
    assert_true(parsed >= 2);
    trellis_grammar_release(obj);
    trellis_grammar_release(sch);
    expect_all_free(e);
    trellis_engine_free(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_and_hits),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_choices),
        cmocka_unit_test(test_json_and_ebnf),
        cmocka_unit_test(test_exhausted_recompiled),
        cmocka_unit_test(test_lru_eviction),
        cmocka_unit_test(test_single_flight),
        cmocka_unit_test(test_churn_threads),
        cmocka_unit_test(test_engine_1000_requests),
        cmocka_unit_test(test_engine_eviction),
        cmocka_unit_test(test_engine_request_errors),
        cmocka_unit_test(test_engine_json),
    };
    tr_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
