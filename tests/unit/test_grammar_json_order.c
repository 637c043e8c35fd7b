/* test_grammar_json_order.c — property_order ANY (grammar_json_options).
 *
 * JSON objects are unordered: with ANY, an object's listed properties
 * may come in any order, each at most once, every required one before
 * `}`, each value under its own schema, additional / pattern properties
 * anywhere under their own rules. Each case feeds texts byte by byte
 * through the real matcher (mask checked at every byte) and through the
 * reference recognizer of the printed grammar (test_json_gbnf.h), which
 * must agree. Then, on small finite schemas, every mask at every prefix
 * is compared with a brute force over the whole language (a byte is
 * allowed iff some valid text continues with it), reaching the prefixes
 * by accept and rollback (so rollback across key boundaries must restore
 * the set of keys seen exactly), and forced bytes are checked against
 * the language's single continuations. Last, random schemas and
 * instances against the compiler's validator (json_valid.c): accepted
 * iff valid and no listed key repeats (additional keys may repeat, in
 * both orders).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "grammar/grammar.h"
#include "grammar/json/json_internal.h"
#include "tests/unit/test_json_gbnf.h"
#include "tests/unit/test_json_util.h"

static grammar_vocab *V;

static grammar_json_options order_opt(grammar_json_property_order ord, grammar_json_ws ws) {
    grammar_json_options o;
    tr_grammar_json_options_default(&o);
    o.property_order = ord;
    o.whitespace = ws;
    return o;
}

static grammar *compile(const char *schema, const grammar_json_options *o) {
    grammar *g = NULL;
    tr_diag d;
    tr_status st = tr_grammar_compile_json_schema(schema, strlen(schema), o, NULL, &g, &d);
    if (st)
        fail_msg("compile failed (%s): %s\n  schema: %s", tr_status_name(st), d.message, schema);
    return g;
}

/* Matcher and reference recognizer agree; returns the verdict. */
static bool accepts(const char *schema, const grammar_json_options *o, const char *text) {
    grammar *g = compile(schema, o);
    bool m = tj_accepts(g, V, text, strlen(text));
    char *gt;
    size_t gn;
    tr_diag d;
    assert_int_equal(tr_grammar_json_schema_to_ebnf(schema, strlen(schema), o, NULL, &gt, &gn, &d),
                     TR_OK);
    tg_gram *r = tg_parse(gt);
    bool ref = tg_accepts(r, text, strlen(text));
    if (m != ref)
        fprintf(stderr, "matcher %d reference %d on %s\n  grammar:\n%s", m, ref, text, gt);
    assert_int_equal(m, ref);
    tg_free(r);
    free(gt);
    tr_grammar_free(g);
    return m;
}

static void check(const char *schema, grammar_json_property_order ord, const char *const *yes,
                  const char *const *no) {
    grammar_json_options o = order_opt(ord, GRAMMAR_JSON_WS_FLEXIBLE);
    for (int i = 0; yes && yes[i]; i++)
        if (!accepts(schema, &o, yes[i]))
            fail_msg("should accept %s under %s", yes[i], schema);
    for (int i = 0; no && no[i]; i++)
        if (accepts(schema, &o, no[i]))
            fail_msg("should reject %s under %s", no[i], schema);
}

#define ANY GRAMMAR_JSON_ORDER_ANY
#define SCHEMA GRAMMAR_JSON_ORDER_SCHEMA

static void test_every_order(void **s) {
    (void)s;
    const char *sc = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                     "\"b\":{\"type\":\"string\"},\"c\":{\"type\":\"boolean\"}},"
                     "\"required\":[\"a\",\"b\"],\"additionalProperties\":false}";
    const char *yes[] = {"{\"a\": 1, \"b\": \"x\"}",
                         "{\"b\": \"x\", \"a\": 1}",
                         "{\"a\": 1, \"b\": \"x\", \"c\": true}",
                         "{\"a\": 1, \"c\": true, \"b\": \"x\"}",
                         "{\"b\": \"x\", \"a\": 1, \"c\": true}",
                         "{\"b\": \"x\", \"c\": true, \"a\": 1}",
                         "{\"c\": true, \"a\": 1, \"b\": \"x\"}",
                         "{\"c\": true, \"b\": \"x\", \"a\": 1}",
                         NULL};
    const char *no[] = {"{}",
                        "{\"a\": 1}",
                        "{\"b\": \"x\"}",
                        "{\"c\": true, \"b\": \"x\"}",
                        "{\"a\": 1, \"a\": 2, \"b\": \"x\"}",
                        "{\"b\": \"x\", \"a\": 1, \"b\": \"y\"}",
                        "{\"a\": 1, \"b\": \"x\", \"c\": true, \"c\": false}",
                        "{\"b\": 1, \"a\": 1}",
                        "{\"b\": \"x\", \"a\": \"1\"}",
                        "{\"b\": \"x\", \"a\": 1, \"d\": 1}",
                        "{\"b\": \"x\",, \"a\": 1}",
                        "{, \"b\": \"x\", \"a\": 1}",
                        "{\"b\": \"x\", \"a\": 1,}",
                        NULL};
    check(sc, ANY, yes, no);
    /* the default keeps schema order */
    const char *s_yes[] = {"{\"a\": 1, \"b\": \"x\", \"c\": true}", NULL};
    const char *s_no[] = {"{\"b\": \"x\", \"a\": 1}", "{\"c\": true, \"a\": 1, \"b\": \"x\"}",
                          NULL};
    check(sc, SCHEMA, s_yes, s_no);
    grammar_json_options d;
    tr_grammar_json_options_default(&d);
    assert_int_equal(d.property_order, GRAMMAR_JSON_ORDER_SCHEMA);
    /* the other layouts: Python's indent=2 and compact */
    grammar_json_options p = order_opt(ANY, GRAMMAR_JSON_WS_PRETTY);
    assert_true(accepts(sc, &p, "{\n  \"c\": true,\n  \"b\": \"x\",\n  \"a\": 1\n}"));
    assert_false(accepts(sc, &p, "{\n  \"c\": true,\n  \"b\": \"x\"\n}"));
    grammar_json_options c = order_opt(ANY, GRAMMAR_JSON_WS_COMPACT);
    assert_true(accepts(sc, &c, "{\"b\":\"x\",\"a\":1}"));
    assert_false(accepts(sc, &c, "{\"b\": \"x\",\"a\":1}"));
}

static void test_additional_and_patterns(void **s) {
    (void)s;
    /* additional properties anywhere; a listed name is never additional */
    const char *sc = "{\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"null\"}},"
                     "\"required\":[\"a\"],\"additionalProperties\":{\"type\":\"integer\"}}";
    const char *yes[] = {"{\"x\": 1, \"a\": \"s\", \"y\": 2}", "{\"a\": \"s\", \"x\": 1}",
                         "{\"x\": 1, \"y\": 2, \"b\": null, \"z\": 3, \"a\": \"s\"}", NULL};
    const char *no[] = {"{\"x\": 1}",
                        "{\"x\": \"s\", \"a\": \"s\"}",
                        "{\"a\": 1}",
                        "{\"a\": \"s\", \"a\": \"t\"}",
                        "{\"x\": 1, \"a\": \"s\", \"a\": \"t\"}",
                        "{\"b\": null, \"a\": \"s\", \"b\": null}",
                        NULL};
    check(sc, ANY, yes, no);
    /* patternProperties next to listed names, nothing else */
    const char *pc = "{\"properties\":{\"id\":{\"type\":\"integer\"},\"xa\":{\"const\":\"lit\"}},"
                     "\"patternProperties\":{\"^x\":{\"type\":\"string\"}},"
                     "\"required\":[\"id\"],\"additionalProperties\":false}";
    const char *pyes[] = {"{\"xb\": \"q\", \"id\": 3}",
                          "{\"xa\": \"lit\", \"xb\": \"q\", \"id\": 3}",
                          "{\"id\": 3, \"xz\": \"q\", \"xa\": \"lit\"}", NULL};
    const char *pno[] = {"{\"xb\": \"q\"}",
                         "{\"y\": \"q\", \"id\": 3}",
                         "{\"xb\": 1, \"id\": 3}",
                         "{\"xa\": \"q\", \"id\": 3}",
                         "{\"xa\": \"lit\", \"id\": 3, \"xa\": \"lit\"}",
                         NULL};
    check(pc, ANY, pyes, pno);
}

static void test_nested(void **s) {
    (void)s;
    /* each object has its own set: an inner `a` does not count outside */
    const char *sc = "{\"properties\":{\"o\":{\"properties\":{\"a\":{\"type\":\"integer\"},"
                     "\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"],"
                     "\"additionalProperties\":false},\"a\":{\"type\":\"integer\"}},"
                     "\"required\":[\"o\",\"a\"],\"additionalProperties\":false}";
    const char *yes[] = {"{\"a\": 1, \"o\": {\"b\": 2, \"a\": 1}}",
                         "{\"o\": {\"a\": 1, \"b\": 2}, \"a\": 1}", NULL};
    const char *no[] = {"{\"o\": {\"b\": 1, \"a\": 1}}", "{\"a\": 1, \"o\": {\"a\": 1}}",
                        "{\"a\": 1, \"o\": {\"a\": 1, \"b\": 2, \"a\": 3}}",
                        "{\"o\": {\"a\": 1, \"b\": 2}, \"a\": 1, \"o\": {\"a\": 1, \"b\": 2}}",
                        NULL};
    check(sc, ANY, yes, no);
    /* recursion: a tree whose nodes write their keys in any order */
    const char *rc =
        "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
        "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}}},"
        "\"required\":[\"v\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/n\"}";
    const char *ryes[] = {"{\"kids\": [{\"v\": 2}, {\"kids\": [], \"v\": 3}], \"v\": 1}", NULL};
    const char *rno[] = {"{\"kids\": [{\"kids\": []}], \"v\": 1}",
                         "{\"v\": 1, \"kids\": [], \"v\": 1}", NULL};
    check(rc, ANY, ryes, rno);
}

static void test_counts_and_dependencies(void **s) {
    (void)s;
    const char *sc = "{\"properties\":{\"a\":{},\"b\":{},\"c\":{}},\"minProperties\":2,"
                     "\"maxProperties\":3,\"additionalProperties\":{\"type\":\"integer\"}}";
    const char *yes[] = {"{\"c\": 1, \"a\": 1}", "{\"x\": 1, \"b\": 2}", "{\"x\": 1, \"y\": 2}",
                         "{\"c\": 1, \"x\": 1, \"a\": 1}", NULL};
    const char *no[] = {"{\"c\": 1}",
                        "{\"x\": 1}",
                        "{\"c\": 1, \"b\": 1, \"x\": 1, \"a\": 1}",
                        "{\"x\": 1, \"y\": 1, \"z\": 1, \"w\": 1}",
                        "{\"c\": 1, \"c\": 1}",
                        NULL};
    check(sc, ANY, yes, no);
    const char *dc =
        "{\"properties\":{\"card\":{\"type\":\"integer\"},\"addr\":{\"type\":\"string\"}},"
        "\"dependentRequired\":{\"card\":[\"addr\"]},\"additionalProperties\":false}";
    const char *dyes[] = {"{}", "{\"addr\": \"s\"}", "{\"addr\": \"s\", \"card\": 1}",
                          "{\"card\": 1, \"addr\": \"s\"}", NULL};
    const char *dno[] = {"{\"card\": 1}", NULL};
    check(dc, ANY, dyes, dno);
    /* the pair the other way round (dependent listed first) */
    const char *rc =
        "{\"properties\":{\"addr\":{\"type\":\"string\"},\"card\":{\"type\":\"integer\"}},"
        "\"dependentRequired\":{\"card\":[\"addr\"]},\"additionalProperties\":false}";
    check(rc, ANY, dyes, dno);
}

/* Objects past GRAMMAR_JSON_ANY_ORDER_MAX_MEMBERS listed properties keep
 * schema order (fewer texts, never more). */
static void test_large_objects_keep_order(void **s) {
    (void)s;
    char sc[1024], in_order[512], swapped[512];
    size_t n = (size_t)snprintf(sc, sizeof sc, "{\"properties\":{");
    uint32_t k = GRAMMAR_JSON_ANY_ORDER_MAX_MEMBERS + 1;
    for (uint32_t i = 0; i < k; i++)
        n += (size_t)snprintf(sc + n, sizeof sc - n, "%s\"p%u\":{\"type\":\"integer\"}",
                              i ? "," : "", i);
    snprintf(sc + n, sizeof sc - n, "},\"additionalProperties\":false}");
    snprintf(in_order, sizeof in_order, "{\"p0\": 1, \"p1\": 2}");
    snprintf(swapped, sizeof swapped, "{\"p1\": 2, \"p0\": 1}");
    const char *yes[] = {in_order, NULL}, *no[] = {swapped, NULL};
    check(sc, ANY, yes, no);
    /* at the limit, any order */
    n = (size_t)snprintf(sc, sizeof sc, "{\"properties\":{");
    for (uint32_t i = 0; i + 1 < k; i++)
        n += (size_t)snprintf(sc + n, sizeof sc - n, "%s\"p%u\":{\"type\":\"integer\"}",
                              i ? "," : "", i);
    snprintf(sc + n, sizeof sc - n, "},\"additionalProperties\":false}");
    const char *yes2[] = {in_order, swapped, NULL}, *no2[] = {"{\"p1\": 2, \"p1\": 1}", NULL};
    check(sc, ANY, yes2, no2);
}

/* Past a size budget, ANY compiles the schema again in schema order. */
static void test_budget_falls_back(void **s) {
    (void)s;
    const char *sc = "{\"type\":\"object\",\"properties\":{\"p0\":{\"type\":\"string\"},"
                     "\"p1\":{\"type\":\"string\"},\"p2\":{\"type\":\"string\"},"
                     "\"p3\":{\"type\":\"string\"},\"p4\":{\"type\":\"string\"},"
                     "\"p5\":{\"type\":\"string\"}},\"additionalProperties\":false}";
    grammar_json_options so = order_opt(SCHEMA, GRAMMAR_JSON_WS_COMPACT),
                         ao = order_opt(ANY, GRAMMAR_JSON_WS_COMPACT);
    grammar_limits lim;
    tr_grammar_limits_default(&lim);
    uint32_t lo = 16, hi = 500000; /* smallest NFA budget schema order fits */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        lim.max_nfa_states = mid;
        grammar *g = NULL;
        tr_diag d;
        tr_status st = tr_grammar_compile_json_schema(sc, strlen(sc), &so, &lim, &g, &d);
        tr_grammar_free(g);
        if (st == TR_OK)
            hi = mid;
        else
            lo = mid + 1;
    }
    lim.max_nfa_states = lo;
    grammar *g = NULL;
    tr_diag d;
    assert_int_equal(tr_grammar_compile_json_schema(sc, strlen(sc), &ao, &lim, &g, &d), TR_OK);
    const char *in_order = "{\"p0\":\"a\",\"p1\":\"b\"}", *swapped = "{\"p1\":\"b\",\"p0\":\"a\"}";
    assert_true(tj_accepts(g, V, in_order, strlen(in_order)));
    assert_false(tj_accepts(g, V, swapped, strlen(swapped))); /* schema order */
    tr_grammar_free(g);
    tr_grammar_limits_default(&lim);
    assert_int_equal(tr_grammar_compile_json_schema(sc, strlen(sc), &ao, &lim, &g, &d), TR_OK);
    assert_true(tj_accepts(g, V, swapped, strlen(swapped)));
    tr_grammar_free(g);
}

static void test_bad_option(void **s) {
    (void)s;
    grammar_json_options o = order_opt((grammar_json_property_order)7, GRAMMAR_JSON_WS_FLEXIBLE);
    grammar *g = NULL;
    tr_diag d;
    assert_int_equal(tr_grammar_compile_json_schema("{}", 2, &o, NULL, &g, &d), TR_ERR_INVALID_ARG);
    assert_null(g);
    assert_non_null(strstr(d.message, "property_order"));
}

/* ---- brute force: every mask of a finite language ---- */

typedef struct lang {
    char **t;
    size_t n, cap;
} lang;

static void lang_add(lang *L, const char *s) {
    if (L->n == L->cap) {
        L->cap = L->cap ? L->cap * 2 : 64;
        L->t = realloc(L->t, L->cap * sizeof *L->t);
        assert_non_null(L->t);
    }
    L->t[L->n++] = strdup(s);
}

/* Every compact text of objects over members (name, values) where the
 * members with req set must appear: each subset, each order, each value. */
typedef struct pm {
    const char *name;
    const char *const *vals;
    bool req;
} pm;

static void gen(lang *L, const pm *m, int nm, uint32_t used, char *buf, size_t len) {
    uint32_t req = 0;
    for (int i = 0; i < nm; i++)
        if (m[i].req)
            req |= 1u << i;
    if ((used & req) == req) {
        buf[len] = '}', buf[len + 1] = 0;
        lang_add(L, buf);
    }
    for (int i = 0; i < nm; i++) {
        if (used >> i & 1)
            continue;
        for (int v = 0; m[i].vals[v]; v++) {
            size_t l = len;
            l += (size_t)sprintf(buf + l, "%s\"%s\":%s", used ? "," : "", m[i].name, m[i].vals[v]);
            gen(L, m, nm, used | 1u << i, buf, l);
        }
    }
}

/* The masks of every prefix of L, reached depth-first by accept and
 * rollback(1), against the brute force; plus forced bytes. */
static void dfs(grammar_matcher *mt, const lang *L, char *pre, size_t len, size_t *visited) {
    (*visited)++;
    uint64_t mask[8] = {0}, want[8] = {0};
    bool whole = false;
    for (size_t i = 0; i < L->n; i++) {
        size_t tl = strlen(L->t[i]);
        if (tl < len || memcmp(L->t[i], pre, len))
            continue;
        if (tl == len)
            whole = true;
        else
            want[(uint8_t)L->t[i][len] >> 6] |= 1ull << ((uint8_t)L->t[i][len] & 63);
    }
    if (whole)
        want[256 >> 6] |= 1ull << (256 & 63);
    assert_int_equal(tr_grammar_matcher_fill_mask(mt, mask, tr_grammar_vocab_mask_words(V)), TR_OK);
    for (int w = 0; w < 5; w++)
        if (mask[w] != want[w])
            fail_msg("mask differs after \"%.*s\" (word %d: %016llx, want %016llx)", (int)len, pre,
                     w, (unsigned long long)mask[w], (unsigned long long)want[w]);
    assert_int_equal(tr_grammar_matcher_is_accepting(mt), whole);
    /* forced bytes: the language's single continuation, as far as it goes
     * (the matcher may stop earlier, never go further or elsewhere) */
    uint8_t fb[64];
    size_t nf = 0;
    assert_int_equal(tr_grammar_matcher_forced_bytes(mt, fb, sizeof fb, &nf), TR_OK);
    for (size_t j = 0; j < nf; j++) {
        int c = -1;
        bool single = true;
        for (size_t i = 0; i < L->n; i++) {
            size_t tl = strlen(L->t[i]);
            if (tl <= len + j || memcmp(L->t[i], pre, len) || memcmp(L->t[i] + len, fb, j))
                continue;
            if (c >= 0 && c != (uint8_t)L->t[i][len + j])
                single = false;
            c = (uint8_t)L->t[i][len + j];
        }
        if (!single || c != fb[j])
            fail_msg("forced byte %zu after \"%.*s\"", j, (int)len, pre);
    }
    for (int b = 0; b < 256; b++) {
        if (!(want[b >> 6] >> (b & 63) & 1))
            continue;
        assert_int_equal(tr_grammar_matcher_accept_token(mt, b), TR_OK);
        pre[len] = (char)b;
        dfs(mt, L, pre, len + 1, visited);
        assert_int_equal(tr_grammar_matcher_rollback(mt, 1), TR_OK);
    }
}

static void brute(const char *schema, const pm *m, int nm) {
    lang L = {0};
    char buf[512] = "{";
    gen(&L, m, nm, 0, buf, 1);
    grammar_json_options o = order_opt(ANY, GRAMMAR_JSON_WS_COMPACT);
    grammar *g = compile(schema, &o);
    grammar_matcher *mt;
    assert_int_equal(tr_grammar_matcher_new(g, V, 0, &mt), TR_OK);
    char pre[512];
    size_t visited = 0;
    dfs(mt, &L, pre, 0, &visited);
    assert_true(visited > L.n);
    /* long jumps back: accept a whole text, roll back to every depth,
     * the mask there is what a fresh matcher has */
    for (size_t i = 0; i < L.n; i += 3) {
        size_t tl = strlen(L.t[i]);
        for (size_t back = 1; back < tl; back += 2) {
            tr_grammar_matcher_reset(mt);
            assert_int_equal(tr_grammar_matcher_accept_bytes(mt, L.t[i], tl - back), TR_OK);
            assert_int_equal(tr_grammar_matcher_accept_bytes(mt, L.t[i] + tl - back, back), TR_OK);
            assert_int_equal(tr_grammar_matcher_rollback(mt, 1), TR_OK);
            grammar_matcher *f;
            assert_int_equal(tr_grammar_matcher_new(g, V, 0, &f), TR_OK);
            assert_int_equal(tr_grammar_matcher_accept_bytes(f, L.t[i], tl - back), TR_OK);
            uint64_t a[8] = {0}, b[8] = {0};
            size_t nw = tr_grammar_vocab_mask_words(V);
            assert_int_equal(tr_grammar_matcher_fill_mask(mt, a, nw), TR_OK);
            assert_int_equal(tr_grammar_matcher_fill_mask(f, b, nw), TR_OK);
            assert_memory_equal(a, b, sizeof a);
            tr_grammar_matcher_free(f);
        }
    }
    tr_grammar_matcher_free(mt);
    tr_grammar_free(g);
    for (size_t i = 0; i < L.n; i++)
        free(L.t[i]);
    free(L.t);
}

static void test_masks_brute_force(void **s) {
    (void)s;
    static const char *const ab[] = {"\"1\"", "\"2\"", NULL}, *const x[] = {"\"x\"", NULL},
                             *const tf[] = {"true", "false", NULL}, *const nl[] = {"null", NULL};
    const pm m3[] = {{"a", ab, true}, {"b", x, false}, {"c", tf, false}};
    brute("{\"type\":\"object\",\"properties\":{\"a\":{\"enum\":[\"1\",\"2\"]},\"b\":{\"const\":"
          "\"x\"},\"c\":{\"type\":"
          "\"boolean\"}},\"required\":[\"a\"],\"additionalProperties\":false}",
          m3, 3);
    /* shared prefixes between names: the key decides late */
    const pm p4[] = {{"k", nl, false}, {"ka", nl, true}, {"kab", tf, false}, {"b", nl, true}};
    brute("{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"null\"},\"ka\":{\"type\":"
          "\"null\"},\"kab\":{\"type\":"
          "\"boolean\"},\"b\":{\"const\":null}},\"required\":[\"ka\",\"b\"],"
          "\"additionalProperties\":false}",
          p4, 4);
    /* nothing required: {} too */
    const pm o2[] = {{"p", nl, false}, {"q", ab, false}};
    brute("{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"null\"},\"q\":{\"enum\":[\"1\","
          "\"2\"]}},"
          "\"additionalProperties\":false}",
          o2, 2);
}

/* ---- random schemas against the validator ---- */

static uint32_t rnd(uint64_t *st) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*st >> 33);
}

static void test_random_against_validator(void **s) {
    (void)s;
    static const char *const names[] = {"a", "ab", "b", "ba", "c"};
    static const char *const types[] = {"integer", "string", "boolean", "null"};
    static const char *const vals[] = {"1", "\"s\"", "true", "null"};
    static const char *const extra[] = {"x", "a1", "bb"};
    uint64_t st = 12345;
    int trials = small_scale_json() ? 20 : 120, checked = 0, accepted = 0;
    grammar_json_options o = order_opt(ANY, GRAMMAR_JSON_WS_FLEXIBLE);
    for (int t = 0; t < trials; t++) {
        char sc[1024];
        uint32_t np = 1 + rnd(&st) % 5, req = rnd(&st) & ((1u << np) - 1), ty[5];
        size_t n = (size_t)snprintf(sc, sizeof sc, "{\"type\":\"object\",\"properties\":{");
        for (uint32_t i = 0; i < np; i++)
            n += (size_t)snprintf(sc + n, sizeof sc - n, "%s\"%s\":{\"type\":\"%s\"}", i ? "," : "",
                                  names[i], types[ty[i] = rnd(&st) % 4]);
        n += (size_t)snprintf(sc + n, sizeof sc - n, "},\"required\":[");
        for (uint32_t i = 0, k = 0; i < np; i++)
            if (req >> i & 1)
                n += (size_t)snprintf(sc + n, sizeof sc - n, "%s\"%s\"", k++ ? "," : "", names[i]);
        n += (size_t)snprintf(sc + n, sizeof sc - n, "]");
        uint32_t ap = rnd(&st) % 3;
        if (ap < 2)
            n += (size_t)snprintf(sc + n, sizeof sc - n, ",\"additionalProperties\":%s",
                                  ap ? "{\"type\":\"integer\"}" : "false");
        if (rnd(&st) % 4 == 0)
            n += (size_t)snprintf(sc + n, sizeof sc - n, ",\"minProperties\":2");
        if (rnd(&st) % 4 == 0)
            n += (size_t)snprintf(sc + n, sizeof sc - n, ",\"maxProperties\":3");
        snprintf(sc + n, sizeof sc - n, "}");
        grammar *g = NULL;
        tr_diag cd;
        tr_status cst = tr_grammar_compile_json_schema(sc, strlen(sc), &o, NULL, &g, &cd);
        /* an empty language (4 required, at most 3): nothing may be valid */
        if (cst && (cst != TR_ERR_FORMAT || !strstr(cd.message, "accepts no JSON value")))
            fail_msg("compile failed (%s): %s\n  schema: %s", tr_status_name(cst), cd.message, sc);
        for (int k = 0; k < 40; k++) {
            char in[512];
            const char *keys[6];
            uint32_t nk = rnd(&st) % 6;
            size_t m = (size_t)snprintf(in, sizeof in, "{");
            bool dup = false, skip = false;
            for (uint32_t j = 0; j < nk; j++) {
                uint32_t pi = rnd(&st) % np, vi = rnd(&st) % 4 ? 0 : rnd(&st) % 4;
                bool listed_key = rnd(&st) % 4;
                keys[j] = listed_key ? names[pi] : extra[rnd(&st) % 3];
                if (vi == 0)
                    vi = listed_key ? ty[pi] : 0; /* mostly the right type */
                /* a repeated listed name; a repeated additional key the
                 * grammar takes (as in schema order: the duplicate-key
                 * rule is not here yet) but jansson keeps only its last
                 * value, so such texts are not compared */
                for (uint32_t q = 0; q < j; q++) {
                    dup |= listed_key && !strcmp(keys[q], keys[j]);
                    skip |= !listed_key && !strcmp(keys[q], keys[j]);
                }
                m += (size_t)snprintf(in + m, sizeof in - m, "%s\"%s\": %s", j ? ", " : "", keys[j],
                                      vals[vi]);
            }
            snprintf(in + m, sizeof in - m, "}");
            if (skip)
                continue;
            bool valid = false;
            tr_diag d;
            assert_int_equal(tr_js_check_instance(sc, strlen(sc), in, strlen(in), &valid, &d),
                             TR_OK);
            bool want = valid && !dup, got = g && tj_accepts(g, V, in, strlen(in));
            if (want != got)
                fail_msg("%s %s under %s", got ? "accepted" : "rejected", in, sc);
            checked++;
            accepted += got;
        }
        tr_grammar_free(g);
    }
    fprintf(stderr, "random: %d texts, %d accepted\n", checked, accepted);
    assert_true(accepted > checked / 20); /* the walk reaches valid texts too */
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_order),
        cmocka_unit_test(test_additional_and_patterns),
        cmocka_unit_test(test_nested),
        cmocka_unit_test(test_counts_and_dependencies),
        cmocka_unit_test(test_large_objects_keep_order),
        cmocka_unit_test(test_budget_falls_back),
        cmocka_unit_test(test_bad_option),
        cmocka_unit_test(test_masks_brute_force),
        cmocka_unit_test(test_random_against_validator),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
