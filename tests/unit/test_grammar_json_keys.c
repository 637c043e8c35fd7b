/* test_grammar_json_keys.c — no object gets a key twice in the text of a
 * JSON Schema grammar's matcher (grammar/json_keys_internal.h): accept
 * calls refuse a repeated key however it is spelled (escapes, surrogate
 * pairs), masks lose exactly the tokens that would close one, forced
 * bytes stop before one, rollback restores what was known, other
 * objects (nested, siblings in an array) are their own; and random walks
 * over masks with key-heavy tokens only ever write objects whose keys a
 * strict parser (jansson, JSON_REJECT_DUPLICATES) accepts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include "grammar/grammar.h"
#include "tests/unit/test_json_util.h"

/* Every byte, then tokens that write or close keys; EOG last. */
static const char *const k_multi[] = {
    "\"a\"", "\"b\"", "\"a\":", "\"b\":", "a\"", "b\"", "\",\"", "\":", ",\"", "{\"",
    "{\"a\":", "\"ab\"", "1,\"a\":", "},\"a\"", "\":1,\"a\"", "\\u0061", "\"\\u0061\"", "a\":",
    "[\"a\",\"a\"", "[\"a\",\"b\"", "1,", "1]", " 1", "{\"a\":1}", "[1,1",
};

static grammar_vocab *key_vocab(int32_t *n_out) {
    static uint8_t bytes[256];
    const uint8_t *tb[256 + 32];
    uint32_t tl[256 + 32];
    int32_t n = 0;
    for (int b = 0; b < 256; b++, n++) {
        bytes[b] = (uint8_t)b;
        tb[n] = &bytes[b];
        tl[n] = 1;
    }
    for (size_t i = 0; i < sizeof k_multi / sizeof k_multi[0]; i++, n++) {
        tb[n] = (const uint8_t *)k_multi[i];
        tl[n] = (uint32_t)strlen(k_multi[i]);
    }
    tb[n] = NULL;
    tl[n] = 0;
    uint8_t sp[256 + 32] = {0};
    sp[n] = 1;
    int32_t eog = n++;
    grammar_vocab_desc d = {.n_vocab = n, .token_bytes = tb, .token_lens = tl,
                            .is_special = sp, .eog_ids = &eog, .n_eog = 1};
    grammar_vocab *v = NULL;
    assert_int_equal(tr_grammar_vocab_new(&d, &v, NULL), TR_OK);
    *n_out = n;
    return v;
}

static int32_t multi_id(const char *s) {
    for (size_t i = 0; i < sizeof k_multi / sizeof k_multi[0]; i++)
        if (!strcmp(k_multi[i], s)) return 256 + (int32_t)i;
    fail_msg("no token %s", s);
    return -1;
}

typedef tr_status (*compile_fn)(const char *, size_t, const grammar_json_options *,
                                const grammar_limits *, grammar **, tr_diag *);

/* A matcher of text's grammar (which the matcher keeps alive). */
static grammar_matcher *matcher_of(compile_fn compile, const char *text, grammar_vocab *v) {
    tr_diag d;
    grammar *g = NULL;
    if (compile(text, strlen(text), NULL, NULL, &g, &d) != TR_OK)
        fail_msg("%s: %s", text, d.message);
    grammar_matcher *m = NULL;
    assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
    tr_grammar_free(g); /* the matcher holds its own reference */
    return m;
}

static grammar_matcher *matcher_for(const char *schema, grammar_vocab *v) {
    return matcher_of(tr_grammar_compile_json_schema, schema, v);
}

static tr_status feed(grammar_matcher *m, const char *s) {
    return tr_grammar_matcher_accept_bytes(m, s, strlen(s));
}

static bool bit(const uint64_t *mask, int32_t id) { return mask[id >> 6] >> (id & 63) & 1; }

/* an array of distinct strings, and one that may repeat */
#define STR_SET "{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"uniqueItems\":true}"
#define STR_LIST "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}"

/* distinct items of any kind */
#define ANY_SET                                                                              \
    "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"object\","    \
    "\"additionalProperties\":{\"type\":\"integer\"}}]},\"uniqueItems\":true,\"maxItems\":6}"

#define FREE_OBJ "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}"

static void test_repeated_key_refused(void **s) {
    (void)s;
    int32_t nv;
    grammar_vocab *v = key_vocab(&nv);
    grammar_matcher *m = matcher_for(FREE_OBJ, v);
    assert_int_equal(feed(m, "{\"a\":1,"), TR_OK);
    assert_int_equal(feed(m, "\"a\""), TR_ERR_STATE);      /* the same key */
    assert_int_equal(feed(m, "\"\\u0061\""), TR_ERR_STATE); /* the same, escaped */
    assert_int_equal(feed(m, "\"a"), TR_OK);                /* not closed yet */
    assert_int_equal(feed(m, "\""), TR_ERR_STATE);
    assert_int_equal(feed(m, "b\":2"), TR_OK); /* "ab" is new */
    assert_int_equal(feed(m, ",\"ab\""), TR_ERR_STATE);
    assert_int_equal(feed(m, ",\"b\":3}"), TR_OK);
    assert_true(tr_grammar_matcher_is_accepting(m));
    tr_grammar_matcher_free(m);

    /* non-ASCII: a raw character and its escape, a surrogate pair and the
     * raw 4-byte character are one key each */
    m = matcher_for(FREE_OBJ, v);
    assert_int_equal(feed(m, "{\"\xc3\xa9\":1,"), TR_OK);
    assert_int_equal(feed(m, "\"\\u00e9\""), TR_ERR_STATE);
    assert_int_equal(feed(m, "\"\\u00E9x\":2,\"\\ud83d\\ude00\":3,"), TR_OK);
    assert_int_equal(feed(m, "\"\xf0\x9f\x98\x80\""), TR_ERR_STATE);
    assert_int_equal(feed(m, "\"\xc3\xa9x\""), TR_ERR_STATE);
    assert_int_equal(feed(m, "\"\\n\":4,\"\\u000a\""), TR_ERR_STATE);
    tr_grammar_matcher_free(m);
    tr_grammar_vocab_free(v);
}

static void test_objects_are_their_own(void **s) {
    (void)s;
    int32_t nv;
    grammar_vocab *v = key_vocab(&nv);
    /* nested objects and objects in an array keep separate key sets; a
     * closed object's keys are forgotten */
    grammar_matcher *m = matcher_for("{\"type\":\"object\"}", v);
    assert_int_equal(feed(m, "{\"a\":{\"a\":{\"a\":1}},\"b\":[{\"a\":1},{\"a\":1,\"b\":\"a\"}]"),
                     TR_OK);
    assert_int_equal(feed(m, ",\"a\""), TR_ERR_STATE);
    assert_int_equal(feed(m, ",\"b\""), TR_ERR_STATE);
    assert_int_equal(feed(m, ",\"c\":{\"a\":1,\"c\":2}}"), TR_OK);
    assert_true(tr_grammar_matcher_is_accepting(m));
    tr_grammar_matcher_free(m);
    /* a string value equal to a key is no key */
    m = matcher_for(FREE_OBJ, v);
    assert_int_equal(feed(m, "{\"a\":1}"), TR_OK);
    tr_grammar_matcher_free(m);
    tr_grammar_vocab_free(v);
}

static void test_masks_and_allowed(void **s) {
    (void)s;
    int32_t nv;
    grammar_vocab *v = key_vocab(&nv);
    size_t nw = tr_grammar_vocab_mask_words(v);
    uint64_t mask[8];
    grammar_matcher *m = matcher_for(FREE_OBJ, v);
    assert_int_equal(feed(m, "{\"a\":1"), TR_OK);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    /* "1,"a": closes a repeat of "a"; ":1,"a" would be a value's end */
    assert_false(bit(mask, multi_id("1,\"a\":")));
    assert_int_equal(feed(m, ","), TR_OK);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    assert_false(bit(mask, multi_id("\"a\"")));
    assert_false(bit(mask, multi_id("\"a\":")));
    assert_false(bit(mask, multi_id("\"\\u0061\"")));
    assert_true(bit(mask, multi_id("\"b\"")));
    assert_true(bit(mask, multi_id("\"ab\"")));
    assert_true(bit(mask, '"'));
    assert_int_equal(feed(m, "\"a"), TR_OK);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    assert_false(bit(mask, '"'));
    assert_false(bit(mask, multi_id("\":")));
    assert_false(bit(mask, multi_id("\",\""))); /* not JSON here anyway */
    assert_true(bit(mask, 'b'));
    assert_true(bit(mask, multi_id("b\"")));
    for (int32_t t = 0; t < nv; t++)
        assert_int_equal(tr_grammar_matcher_token_allowed(m, t), bit(mask, t));
    assert_int_equal(tr_grammar_matcher_accept_token(m, '"'), TR_ERR_STATE);
    assert_int_equal(tr_grammar_matcher_accept_token(m, multi_id("b\"")), TR_OK);
    tr_grammar_matcher_free(m);
    tr_grammar_vocab_free(v);
}

static void test_rollback_restores(void **s) {
    (void)s;
    int32_t nv;
    grammar_vocab *v = key_vocab(&nv);
    size_t nw = tr_grammar_vocab_mask_words(v);
    uint64_t before[8], after[8];
    grammar_matcher *m = matcher_for(FREE_OBJ, v);
    assert_int_equal(feed(m, "{\"a\":1,"), TR_OK);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, before, nw), TR_OK);
    /* write "b", close the object, roll all of it back */
    assert_int_equal(tr_grammar_matcher_accept_token(m, multi_id("\"b\":")), TR_OK);
    assert_int_equal(feed(m, "2}"), TR_OK);
    assert_int_equal(tr_grammar_matcher_rollback(m, 2), TR_OK);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, after, nw), TR_OK);
    assert_memory_equal(before, after, nw * sizeof *before);
    /* "b" is free again, "a" is still taken */
    assert_int_equal(feed(m, "\"a\""), TR_ERR_STATE);
    assert_int_equal(feed(m, "\"b\":3}"), TR_OK);
    tr_grammar_matcher_reset(m);
    assert_int_equal(feed(m, "{\"a\":1,\"b\":2}"), TR_OK); /* reset: nothing taken */
    tr_grammar_matcher_free(m);
    tr_grammar_vocab_free(v);
}

static void test_forced_bytes_stop(void **s) {
    (void)s;
    int32_t nv;
    grammar_vocab *v = key_vocab(&nv);
    size_t nw = tr_grammar_vocab_mask_words(v);
    uint64_t mask[8];
    /* the only key this object takes is "k": after it, no ',' at all (a
     * key set this small is counted: test_few_keys_no_dead_end) */
    grammar_matcher *m = matcher_for("{\"type\":\"object\",\"patternProperties\":{\"^k$\":"
                                     "{\"type\":\"integer\"}},\"additionalProperties\":false}",
                                     v);
    uint8_t buf[64];
    size_t n;
    assert_int_equal(feed(m, "{\""), TR_OK);
    assert_int_equal(tr_grammar_matcher_forced_bytes(m, buf, sizeof buf, &n), TR_OK);
    assert_int_equal(n, 2); /* blanks may come before the colon */
    assert_memory_equal(buf, "k\"", 2);
    assert_int_equal(feed(m, "k\":1"), TR_OK);
    assert_int_equal(feed(m, ","), TR_ERR_STATE);
    tr_grammar_matcher_free(m);
    /* 65 names (more than are counted): "k" and z00..z63. After "k", the
     * automaton forces the quote that would close a repeat of it; the
     * tracker stops before it, and the mask is empty there (the stated
     * limit, where keys are not counted) */
    char schema[1024] = "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"},"
                        "\"propertyNames\":{\"enum\":[\"k\"";
    for (int i = 0; i < 64; i++)
        snprintf(schema + strlen(schema), sizeof schema - strlen(schema), ",\"z%02d\"", i);
    strcat(schema, "]}}");
    m = matcher_for(schema, v);
    assert_int_equal(feed(m, "{\"k\":1,\"k"), TR_OK);
    assert_int_equal(tr_grammar_matcher_forced_bytes(m, buf, sizeof buf, &n), TR_OK);
    assert_int_equal(n, 0);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    for (size_t w = 0; w < nw; w++) assert_int_equal(mask[w], 0);
    tr_grammar_matcher_free(m);
    tr_grammar_vocab_free(v);
}

/* Random walks over the masks, biased to the key tokens; every finished
 * text parses under JSON_REJECT_DUPLICATES. */
/* Few possible keys, all written: the object may close, and no ',' is
 * offered, since only a repeat could follow it (an empty mask). Schema
 * order and any order, with and without listed members. */
static void test_few_keys_no_dead_end(void **s) {
    (void)s;
    static const char *const schemas[] = {
        "{\"type\":\"object\",\"patternProperties\":{\"^[ab]{1,2}$\":{\"type\":\"integer\"}},"
        "\"additionalProperties\":false}",
        "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},"
        "\"patternProperties\":{\"^[ab]{1,2}$\":{\"type\":\"integer\"}},"
        "\"additionalProperties\":false}",
        "{\"type\":\"object\",\"propertyNames\":{\"enum\":[\"a\",\"b\",\"aa\",\"ab\",\"ba\","
        "\"bb\"]},\"additionalProperties\":{\"type\":\"integer\"}}",
    };
    int32_t nv;
    grammar_vocab *v = key_vocab(&nv);
    size_t nw = tr_grammar_vocab_mask_words(v);
    uint64_t mask[8];
    for (int order = 0; order < 2; order++)
        for (size_t i = 0; i < sizeof schemas / sizeof schemas[0]; i++) {
            grammar_json_options o;
            tr_grammar_json_options_default(&o);
            o.property_order = order ? GRAMMAR_JSON_ORDER_ANY : GRAMMAR_JSON_ORDER_SCHEMA;
            tr_diag d;
            grammar *g = NULL;
            if (tr_grammar_compile_json_schema(schemas[i], strlen(schemas[i]), &o, NULL, &g, &d))
                fail_msg("%s: %s", schemas[i], d.message);
            grammar_matcher *m = NULL;
            assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
            tr_grammar_free(g);
            const char *start = i == 1 ? "{\"x\":0,\"a\":1" : "{\"a\":1";
            assert_int_equal(feed(m, start), TR_OK);
            assert_int_equal(feed(m, ",\"b\":2,\"aa\":3,\"ab\":4,\"ba\":5,\"bb\":6"), TR_OK);
            assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
            if (bit(mask, ','))
                fail_msg("%s (order %d): ',' offered with every key written", schemas[i], order);
            assert_true(bit(mask, '}'));
            assert_int_equal(feed(m, "}"), TR_OK);
            assert_true(tr_grammar_matcher_is_accepting(m));
            /* with a key left, ',' is offered */
            tr_grammar_matcher_reset(m);
            assert_int_equal(feed(m, start), TR_OK);
            assert_int_equal(feed(m, ",\"bb\":6"), TR_OK);
            assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
            assert_true(bit(mask, ','));
            tr_grammar_matcher_free(m);
        }
    tr_grammar_vocab_free(v);
}

/* An EBNF grammar with %json-keys-after: prose (which may hold quotes,
 * braces and repeated "keys") then tagged objects, as tool calls are. */
#define GATED                                                                       \
    "root ::= prose (\"<t>\" %json " FREE_OBJ " \"</t>\")*\n"                     \
    "prose ::= /[a-z \"{}:,0-9]*/\n"                                              \
    "%json-keys-after \"<t>\"\n"

static grammar_matcher *ebnf_matcher(const char *text, grammar_vocab *v) {
    return matcher_of(tr_grammar_compile_ebnf_json, text, v);
}

static void test_keys_after_literal(void **s) {
    (void)s;
    int32_t nv;
    grammar_vocab *v = key_vocab(&nv);
    size_t nw = tr_grammar_vocab_mask_words(v);
    uint64_t mask[8];
    grammar_matcher *m = ebnf_matcher(GATED, v);
    /* before the literal nothing is JSON: a "repeated key" is prose */
    assert_int_equal(feed(m, "say {\"a\":1,\"a\":2} "), TR_OK);
    assert_int_equal(feed(m, "<t>{\"a\":1,"), TR_OK);
    assert_int_equal(feed(m, "\"a\""), TR_ERR_STATE); /* inside: refused */
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    assert_false(bit(mask, multi_id("\"a\":")));
    assert_true(bit(mask, multi_id("\"b\":")));
    assert_int_equal(feed(m, "\"b\":2}</t>"), TR_OK);
    /* each tagged object starts afresh */
    assert_int_equal(feed(m, "<t>{\"a\":3,"), TR_OK);
    assert_int_equal(feed(m, "\"b\":4"), TR_OK);
    assert_int_equal(feed(m, ",\"b\""), TR_ERR_STATE);
    /* rollback: "b" is free again, "a" still taken; and back across the
     * literal, to where nothing is JSON */
    assert_int_equal(tr_grammar_matcher_rollback(m, 1), TR_OK);
    assert_int_equal(feed(m, "\"a\""), TR_ERR_STATE);
    assert_int_equal(feed(m, "\"b\":5}</t>"), TR_OK);
    assert_int_equal(tr_grammar_matcher_rollback(m, 2), TR_OK);
    assert_int_equal(feed(m, "<t>{\"b\":6,\"a\":7}</t>"), TR_OK);
    assert_true(tr_grammar_matcher_is_accepting(m));
    tr_grammar_matcher_free(m);

    /* a literal matched across accept calls and after a false start */
    m = ebnf_matcher("root ::= /[a-z<]*/ \"<<t>\" %json " FREE_OBJ
                     "\n%json-keys-after \"<<t>\"", v);
    assert_int_equal(feed(m, "a<b<<"), TR_OK);
    assert_int_equal(feed(m, "<t"), TR_OK);
    assert_int_equal(feed(m, ">{\"x\":1,"), TR_OK);
    assert_int_equal(feed(m, "\"x\""), TR_ERR_STATE);
    tr_grammar_matcher_free(m);

    /* without the directive an EBNF grammar tracks nothing */
    m = ebnf_matcher("root ::= \"<t>\" %json " FREE_OBJ, v);
    assert_int_equal(feed(m, "<t>{\"a\":1,\"a\":2}"), TR_OK);
    tr_grammar_matcher_free(m);
    tr_grammar_vocab_free(v);
}

static void test_keys_after_refusals(void **s) {
    (void)s;
    static const struct { const char *text, *msg; } bad[] = {
        {"root ::= \"x\"\n%json-keys-after \"a\"\n%json-keys-after \"b\"", "given twice"},
        {"root ::= \"x\"\n%json-keys-after \"\"", "JSON string of 1 to 64 bytes"},
        {"root ::= \"x\"\n%json-keys-after 12", "JSON string of 1 to 64 bytes"},
        {"root ::= \"x\"\n%json-keys-after", "JSON string of 1 to 64 bytes"},
        {"root ::= \"x\"\n%json-keys-after \"0123456789012345678901234567890123456789"
         "012345678901234567890123456789\"", "JSON string of 1 to 64 bytes"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tr_diag d;
        grammar *g = NULL;
        assert_int_equal(tr_grammar_compile_ebnf_json(bad[i].text, strlen(bad[i].text), NULL,
                                                      NULL, &g, &d),
                         TR_ERR_FORMAT);
        assert_null(g);
        if (!strstr(d.message, bad[i].msg) || !strstr(d.message, "%json-keys-after"))
            fail_msg("%s: %s", bad[i].text, d.message);
    }
    /* the expansion drops the directive (plain EBNF comes out); inside a
     * literal it is text */
    char *x = NULL;
    size_t n = 0;
    tr_diag d;
    const char *t = "root ::= \"%json-keys-after \\\"a\\\"\"\n%json-keys-after \"a\"\n";
    assert_int_equal(tr_grammar_ebnf_expand_json(t, strlen(t), NULL, NULL, &x, &n, &d), TR_OK);
    assert_non_null(strstr(x, "root ::= \"%json-keys-after"));
    assert_null(strstr(x + 20, "%json-keys-after"));
    free(x);
}

static void test_random_walks_unique(void **s) {
    (void)s;
    int32_t nv;
    grammar_vocab *v = key_vocab(&nv);
    size_t nw = tr_grammar_vocab_mask_words(v);
    static const char *const schemas[] = {
        FREE_OBJ,
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
        "\"additionalProperties\":{\"type\":\"object\",\"additionalProperties\":"
        "{\"type\":\"integer\"}}}",
        "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"additionalProperties\":"
        "{\"enum\":[1,\"a\"]}}}",
        /* distinct strings: JSON_REJECT_DUPLICATES does not see arrays;
         * the walk checks them below */
        "{\"type\":\"array\",\"items\":" STR_SET "}",
        /* distinct items of any kind (integers, objects) */
        ANY_SET,
    };
    uint64_t rng = 7;
    int finished = 0, walks = small_scale_json() ? 60 : 400;
    for (size_t si = 0; si < sizeof schemas / sizeof schemas[0]; si++) {
        grammar_matcher *m = matcher_for(schemas[si], v);
        for (int w = 0; w < walks; w++) {
            tr_grammar_matcher_reset(m);
            char text[4096];
            size_t len = 0;
            uint64_t mask[8];
            for (int step = 0; step < 200; step++) {
                assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
                int32_t cand[512], nc = 0, keyish = 0;
                for (int32_t t = 0; t < nv; t++)
                    if (bit(mask, t)) cand[nc++] = t, keyish += t >= 256;
                if (!nc) break; /* the stated dead end */
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                uint32_t r = (uint32_t)(rng >> 33);
                int32_t t = cand[r % (uint32_t)nc];
                if (keyish && r % 3 == 0) /* prefer a multi-byte token */
                    for (int i = 0; i < nc; i++)
                        if (cand[(r / 3 + (uint32_t)i) % (uint32_t)nc] >= 256) {
                            t = cand[(r / 3 + (uint32_t)i) % (uint32_t)nc];
                            break;
                        }
                if (len > 3000 && bit(mask, nv - 1)) t = nv - 1; /* end when it may */
                assert_int_equal(tr_grammar_matcher_accept_token(m, t), TR_OK);
                if (t == nv - 1) break;
                size_t tl;
                const uint8_t *tb = tr_grammar_vocab_token_bytes(v, t, &tl);
                memcpy(text + len, tb, tl);
                len += tl;
                if (step > 60 && tr_grammar_matcher_is_accepting(m)) break;
            }
            if (!tr_grammar_matcher_is_accepting(m) && !tr_grammar_matcher_is_terminated(m))
                continue;
            json_error_t je;
            json_t *doc = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
            if (!doc) fail_msg("schema %zu walk %d: %.*s: %s", si, w, (int)len, text, je.text);
            if (si == 4) /* the items distinct (integers only: json_equal is
                            JSON Schema's equality there) */
                for (size_t j = 0; j < json_array_size(doc); j++)
                    for (size_t k = j + 1; k < json_array_size(doc); k++)
                        if (json_equal(json_array_get(doc, j), json_array_get(doc, k)))
                            fail_msg("walk %d repeats an item: %.*s", w, (int)len, text);
            if (si == 3) /* every inner array's strings distinct */
                for (size_t i = 0; i < json_array_size(doc); i++) {
                    const json_t *a = json_array_get(doc, i);
                    for (size_t j = 0; j < json_array_size(a); j++)
                        for (size_t k = j + 1; k < json_array_size(a); k++)
                            if (json_equal(json_array_get(a, j), json_array_get(a, k)))
                                fail_msg("walk %d repeats an item: %.*s", w, (int)len, text);
                }
            json_decref(doc);
            finished++;
        }
        tr_grammar_matcher_free(m);
    }
    assert_true(finished > walks); /* most walks end in a whole value */
    tr_grammar_vocab_free(v);
}

/* ---- uniqueItems over strings (grammar/json/json_unique.c) ---- */


/* An array of distinct strings refuses an item equal to an earlier one,
 * however spelled; its siblings without uniqueItems do not. */
static void test_unique_strings_refused(void **s) {
    (void)s;
    int32_t nv;
    grammar_vocab *v = key_vocab(&nv);
    grammar_matcher *m = matcher_for(
        "{\"type\":\"object\",\"properties\":{\"tags\":" STR_SET ",\"list\":" STR_LIST "}}", v);
    assert_int_equal(feed(m, "{\"tags\":[\"a\",\"b\","), TR_OK);
    assert_int_equal(feed(m, "\"a\""), TR_ERR_STATE);
    assert_int_equal(feed(m, "\"\\u0061\""), TR_ERR_STATE);
    assert_int_equal(feed(m, "\"ab\"]"), TR_OK);
    assert_int_equal(feed(m, ",\"list\":[\"a\",\"a\",\"b\"]}"), TR_OK); /* repeats allowed */
    assert_true(tr_grammar_matcher_is_accepting(m));
    tr_grammar_matcher_free(m);
    /* the root array; a key named like a path element elsewhere is no path */
    m = matcher_for(STR_SET, v);
    assert_int_equal(feed(m, "[\"x\",\"y\","), TR_OK);
    assert_int_equal(feed(m, "\"y\""), TR_ERR_STATE);
    assert_int_equal(feed(m, "\"z\"]"), TR_OK);
    tr_grammar_matcher_free(m);
    /* items of an array of objects: each object's array is its own; a
     * $ref used at two paths holds at both */
    m = matcher_for("{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":"
                    "{\"t\":{\"$ref\":\"#/$defs/set\"},\"u\":{\"$ref\":\"#/$defs/set\"}}},"
                    "\"$defs\":{\"set\":" STR_SET "}}",
                    v);
    assert_int_equal(feed(m, "[{\"t\":[\"a\"],\"u\":[\"a\"]},{\"t\":[\"a\",\"b\"],\"u\":[\"b\","),
                     TR_OK);
    assert_int_equal(feed(m, "\"b\""), TR_ERR_STATE);
    assert_int_equal(feed(m, "\"a\"]}]"), TR_OK);
    assert_true(tr_grammar_matcher_is_accepting(m));
    tr_grammar_matcher_free(m);
    /* additionalProperties: every key but the listed ones */
    m = matcher_for("{\"type\":\"object\",\"properties\":{\"x\":" STR_LIST
                    "},\"additionalProperties\":" STR_SET "}",
                    v);
    assert_int_equal(feed(m, "{\"x\":[\"a\",\"a\"],\"y\":[\"b\","), TR_OK);
    assert_int_equal(feed(m, "\"b\""), TR_ERR_STATE);
    assert_int_equal(feed(m, "\"a\"],\"xx\":[\"c\","), TR_OK);
    assert_int_equal(feed(m, "\"c\""), TR_ERR_STATE);
    assert_int_equal(feed(m, "\"d\"]}"), TR_OK);
    assert_true(tr_grammar_matcher_is_accepting(m));
    tr_grammar_matcher_free(m);
    tr_grammar_vocab_free(v);
}

/* Masks lose the tokens that would close a repeated item; rollback
 * forgets items taken back. */
static void test_unique_strings_masks(void **s) {
    (void)s;
    int32_t nv;
    grammar_vocab *v = key_vocab(&nv);
    size_t nw = tr_grammar_vocab_mask_words(v);
    uint64_t mask[8];
    grammar_matcher *m =
        matcher_for("{\"type\":\"object\",\"properties\":{\"a\":" STR_SET "}}", v);
    assert_int_equal(feed(m, "{\"a\":[\"a\","), TR_OK);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    assert_false(bit(mask, multi_id("\"a\"")));
    assert_true(bit(mask, multi_id("\"b\"")));
    assert_true(bit(mask, multi_id("\"ab\"")));
    assert_int_equal(tr_grammar_matcher_accept_token(m, '"'), TR_OK);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    assert_false(bit(mask, multi_id("a\""))); /* closes "a" */
    assert_true(bit(mask, multi_id("b\"")));
    tr_grammar_matcher_free(m);
    /* a token that opens the array and repeats inside it */
    m = matcher_for("{\"type\":\"object\",\"properties\":{\"a\":" STR_SET ",\"b\":" STR_LIST
                    "}}",
                    v);
    assert_int_equal(feed(m, "{\"a\":"), TR_OK);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    assert_false(bit(mask, multi_id("[\"a\",\"a\"")));
    assert_true(bit(mask, multi_id("[\"a\",\"b\"")));
    assert_int_equal(feed(m, "[\"a\",\"b\"],\"b\":"), TR_OK);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    assert_true(bit(mask, multi_id("[\"a\",\"a\"")));
    tr_grammar_matcher_free(m);
    tr_grammar_vocab_free(v);
}

/* Items of any kind: kept as canonical forms (numbers by value, object
 * members in any order); the byte that ends a repeat is refused, in
 * accept calls and masks; rollback forgets items taken back. */
static void test_unique_any_items(void **s) {
    (void)s;
    int32_t nv;
    grammar_vocab *v = key_vocab(&nv);
    size_t nw = tr_grammar_vocab_mask_words(v);
    uint64_t mask[8];
    grammar_matcher *m =
        matcher_for("{\"type\":\"array\",\"items\":{\"type\":\"number\"},\"uniqueItems\":true}", v);
    assert_int_equal(feed(m, "[1,2,"), TR_OK);
    assert_int_equal(feed(m, "1,"), TR_ERR_STATE);
    assert_int_equal(feed(m, "1.0]"), TR_ERR_STATE);
    assert_int_equal(feed(m, "10e-1 "), TR_ERR_STATE);
    assert_int_equal(feed(m, "0.2e1]"), TR_ERR_STATE);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    assert_false(bit(mask, multi_id("1,")));
    assert_false(bit(mask, multi_id("1]")));
    assert_true(bit(mask, '1'));
    assert_int_equal(feed(m, "1"), TR_OK);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    assert_false(bit(mask, ','));
    assert_false(bit(mask, ']'));
    assert_false(bit(mask, ' '));
    assert_true(bit(mask, '0'));
    assert_true(bit(mask, '.'));
    assert_int_equal(feed(m, "0]"), TR_OK); /* 10 is new */
    assert_true(tr_grammar_matcher_is_accepting(m));
    tr_grammar_matcher_free(m);
    /* objects: equal whatever the member order and number spelling */
    m = matcher_for("{\"type\":\"array\",\"items\":{\"type\":\"object\"},\"uniqueItems\":true}", v);
    assert_int_equal(feed(m, "[{\"a\":1,\"b\":[1,\"x\"]},"), TR_OK);
    assert_int_equal(feed(m, "{\"b\":[1.0,\"\\u0078\"],\"a\":1}"), TR_ERR_STATE);
    assert_int_equal(feed(m, "{\"a\":1}"), TR_OK);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    assert_true(bit(mask, ','));
    assert_int_equal(feed(m, ","), TR_OK);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    assert_false(bit(mask, multi_id("{\"a\":1}")));
    assert_int_equal(feed(m, "{\"a\":1"), TR_OK);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    assert_false(bit(mask, '}'));
    assert_true(bit(mask, '0'));
    assert_int_equal(feed(m, ",\"c\":null}]"), TR_OK);
    assert_true(tr_grammar_matcher_is_accepting(m));
    tr_grammar_matcher_free(m);
    /* mixed kinds; nested arrays compare item by item, in order */
    m = matcher_for("{\"type\":\"array\",\"uniqueItems\":true}", v);
    assert_int_equal(feed(m, "[1,\"1\",[1,2],null,true,{}"), TR_OK);
    assert_int_equal(feed(m, ",[1,2]"), TR_ERR_STATE);
    assert_int_equal(feed(m, ",null"), TR_OK);
    assert_int_equal(feed(m, "]"), TR_ERR_STATE); /* null again, ended by ] */
    assert_int_equal(feed(m, "l"), TR_ERR_STATE); /* not JSON either */
    tr_grammar_matcher_reset(m);
    assert_int_equal(feed(m, "[[1,2],{},[2,1], {\"a\":{}} , -0"), TR_OK);
    assert_int_equal(feed(m, ",0]"), TR_ERR_STATE); /* -0 == 0 */
    assert_int_equal(feed(m, ",{ }"), TR_ERR_STATE);
    assert_int_equal(feed(m, ",0.5]"), TR_OK);
    tr_grammar_matcher_free(m);
    /* one token of lookahead: a last member whose value would leave the
     * object able only to close as a repeat is not offered */
    m = matcher_for("{\"type\":\"array\",\"uniqueItems\":true,\"items\":{\"type\":\"object\","
                    "\"properties\":{\"x\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":2}},"
                    "\"required\":[\"x\"],\"additionalProperties\":false}}",
                    v);
    assert_int_equal(feed(m, "[{\"x\":0},{\"x\":"), TR_OK);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    assert_false(bit(mask, '0'));
    assert_true(bit(mask, '1'));
    assert_true(bit(mask, '2'));
    assert_int_equal(feed(m, "2}]"), TR_OK);
    assert_true(tr_grammar_matcher_is_accepting(m));
    tr_grammar_matcher_free(m);
    /* a token that opens the array and repeats inside it */
    m = matcher_for("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\","
                    "\"items\":{\"type\":\"integer\"},\"uniqueItems\":true}}}",
                    v);
    assert_int_equal(feed(m, "{\"a\":"), TR_OK);
    assert_int_equal(feed(m, "[1,1,"), TR_ERR_STATE);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    assert_true(bit(mask, multi_id("[1,1"))); /* 1 then 1... may be 11 */
    assert_int_equal(tr_grammar_matcher_accept_token(m, multi_id("[1,1")), TR_OK);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
    assert_false(bit(mask, ','));
    assert_true(bit(mask, '1'));
    /* rollback: the second item taken back, then written anew */
    assert_int_equal(tr_grammar_matcher_rollback(m, 1), TR_OK);
    assert_int_equal(feed(m, "[1,2"), TR_OK);
    assert_int_equal(feed(m, ",2"), TR_OK);
    assert_int_equal(feed(m, "]"), TR_ERR_STATE);
    assert_int_equal(tr_grammar_matcher_rollback(m, 2), TR_OK);
    assert_int_equal(feed(m, "[1"), TR_OK);
    assert_int_equal(feed(m, ",2]}"), TR_OK);
    assert_true(tr_grammar_matcher_is_accepting(m));
    tr_grammar_matcher_free(m);
    tr_grammar_vocab_free(v);
}

/* Where the array's location or holding depends on the instance, the
 * rule is applied wherever it may apply (json_unique.c): enforced there,
 * stricter than the schema where another branch allows repeats. */
static void test_unique_strings_widened(void **s) {
    (void)s;
    int32_t nv;
    grammar_vocab *v = key_vocab(&nv);
    static const struct {
        const char *schema, *prefix, *repeat, *rest;
    } cases[] = {
        {"{\"anyOf\":[" STR_SET ",{\"type\":\"integer\"}]}", "[\"a\",", "\"a\"", "\"b\"]"},
        {"{\"type\":\"object\",\"patternProperties\":{\"^x\":" STR_SET "}}",
         "{\"xa\":[\"a\",", "\"a\"", "\"b\"]}"},
        {"{\"type\":\"object\",\"patternProperties\":{\"^x\":{}},\"additionalProperties\":"
         STR_SET "}",
         "{\"y\":[\"a\",", "\"a\"", "\"b\"]}"},
        {"{\"type\":\"array\",\"prefixItems\":[" STR_SET "]}", "[[\"a\",", "\"a\"", "\"b\"]]"},
        {"{\"if\":{\"type\":\"array\"},\"then\":" STR_SET "}", "[\"a\",", "\"a\"", "\"b\"]"},
        {"{\"type\":\"object\",\"properties\":{\"k\":{\"oneOf\":[" STR_SET
         ",{\"type\":\"string\"}]}}}",
         "{\"k\":[\"a\",", "\"a\"", "\"b\"]}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        grammar_matcher *m = matcher_for(cases[i].schema, v);
        if (feed(m, cases[i].prefix) != TR_OK) fail_msg("prefix refused: %s", cases[i].schema);
        if (feed(m, cases[i].repeat) != TR_ERR_STATE)
            fail_msg("repeat taken: %s", cases[i].schema);
        if (feed(m, cases[i].rest) != TR_OK || !tr_grammar_matcher_is_accepting(m))
            fail_msg("rest refused: %s", cases[i].schema);
        tr_grammar_matcher_free(m);
    }
    /* a recursive path: past 32 levels the array's own key, at any depth */
    {
        grammar_matcher *r = matcher_for("{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"},"
                                         "\"b\":" STR_SET "}}",
                                         v);
        char deep[512] = "";
        for (int d = 0; d < 40; d++) strcat(deep, "{\"a\":");
        strcat(deep, "{\"b\":[\"x\",");
        assert_int_equal(feed(r, deep), TR_OK);
        assert_int_equal(feed(r, "\"x\""), TR_ERR_STATE);
        assert_int_equal(feed(r, "\"y\"]}"), TR_OK);
        tr_grammar_matcher_free(r);
    }
    /* the stated cost: a branch without uniqueItems loses its repeats */
    grammar_matcher *m = matcher_for(
        "{\"anyOf\":[" STR_SET ",{\"type\":\"array\",\"items\":{\"type\":\"string\"},"
        "\"minItems\":3}]}",
        v);
    assert_int_equal(feed(m, "[\"a\",\"b\","), TR_OK);
    assert_int_equal(feed(m, "\"a\""), TR_ERR_STATE);
    tr_grammar_matcher_free(m);
    tr_grammar_vocab_free(v);
}

/* Below `not`, or in a grammar that must stand alone as text: refused as
 * before, naming uniqueItems. */
static void test_unique_strings_refusals(void **s) {
    (void)s;
    static const char *const refused[] = {
        "{\"type\":\"array\",\"not\":" STR_SET "}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"uniqueItems\":true,"
        "\"not\":{\"not\":" STR_SET "}}",
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        tr_diag d;
        grammar *g = NULL;
        tr_status st = tr_grammar_compile_json_schema(refused[i], strlen(refused[i]), NULL,
                                                      NULL, &g, &d);
        if (st == TR_OK) fail_msg("compiled: %s", refused[i]);
        assert_non_null(strstr(d.message, "uniqueItems"));
    }
    char *text = NULL;
    tr_diag d;
    const char *ok = STR_SET;
    assert_int_equal(tr_grammar_json_schema_to_ebnf(ok, strlen(ok), NULL, NULL, &text, NULL, &d),
                     TR_ERR_UNSUPPORTED);
    assert_null(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repeated_key_refused),
        cmocka_unit_test(test_objects_are_their_own),
        cmocka_unit_test(test_masks_and_allowed),
        cmocka_unit_test(test_rollback_restores),
        cmocka_unit_test(test_forced_bytes_stop),
        cmocka_unit_test(test_few_keys_no_dead_end),
        cmocka_unit_test(test_keys_after_literal),
        cmocka_unit_test(test_keys_after_refusals),
        cmocka_unit_test(test_random_walks_unique),
        cmocka_unit_test(test_unique_strings_refused),
        cmocka_unit_test(test_unique_strings_masks),
        cmocka_unit_test(test_unique_strings_widened),
        cmocka_unit_test(test_unique_any_items),
        cmocka_unit_test(test_unique_strings_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
