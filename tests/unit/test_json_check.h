/* test_json_check.h — the three-way check of the JSON Schema tests: a
 * text is fed through the real matcher (byte vocabulary, every byte
 * checked against its mask, then end-of-generation) and through the
 * reference recognizer of the printed grammar (test_json_gbnf.h), which
 * must agree; and the compiler's validator (json_valid.c) judges the
 * same value, so that a listed expectation that contradicts the schema's
 * meaning is caught too.
 *
 * Texts are written with ' for " (JSON in C strings stays readable): a
 * test that needs a real apostrophe spells it \u0027.
 *
 * tjc_check(schema, yes, no): every text of yes is accepted and valid,
 * every text of no rejected and invalid. tjc_lossy(schema, texts):
 * valid texts the grammar rejects by design (sound approximations that
 * are documented), so that the loss stays visible in the tests.
 */
#ifndef TR_TEST_JSON_CHECK_H
#define TR_TEST_JSON_CHECK_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "grammar/json/json_internal.h"
#include "tests/unit/test_json_gbnf.h"
#include "tests/unit/test_json_util.h"

static grammar_vocab *tjc_v;

static inline int tjc_setup(void **s) {
    (void)s;
    tjc_v = tj_byte_vocab();
    return tjc_v ? 0 : -1;
}

static inline int tjc_teardown(void **s) {
    (void)s;
    tr_grammar_vocab_free(tjc_v);
    return 0;
}

/* s with ' turned into " (static ring of buffers: a few live at once) */
static inline const char *tjc_q(const char *s) {
    static char buf[8][16384];
    static int at;
    char *b = buf[at++ & 7];
    size_t n = strlen(s);
    assert_true(n < sizeof buf[0]);
    for (size_t i = 0; i <= n; i++) b[i] = s[i] == '\'' ? '"' : s[i];
    return b;
}

/* matcher result; the reference recognizer must agree */
static inline bool tjc_accepts_opt(const char *schema, const grammar_json_options *o, const char *text) {
    schema = tjc_q(schema);
    text = tjc_q(text);
    tr_diag d;
    grammar *g = NULL;
    tr_status st = tr_grammar_compile_json_schema(schema, strlen(schema), o, NULL, &g, &d);
    if (st) fail_msg("compile failed (%s): %s\n  schema: %s", tr_status_name(st), d.message, schema);
    bool m = tj_accepts(g, tjc_v, text, strlen(text));
    char *gt;
    size_t gn;
    assert_int_equal(tr_grammar_json_schema_to_ebnf(schema, strlen(schema), o, NULL, &gt, &gn, &d),
                     TR_OK);
    tg_gram *r = tg_parse(gt);
    bool ref = tg_accepts(r, text, strlen(text));
    if (m != ref) fprintf(stderr, "matcher %d reference %d on %s\n  grammar:\n%s", m, ref, text, gt);
    assert_int_equal(m, ref);
    tg_free(r);
    free(gt);
    tr_grammar_free(g);
    return m;
}

static inline bool tjc_accepts(const char *schema, const char *text) {
    grammar_json_options o;
    tr_grammar_json_options_default(&o);
    return tjc_accepts_opt(schema, &o, text);
}

static inline bool tjc_valid(const char *schema, const char *text) {
    schema = tjc_q(schema);
    text = tjc_q(text);
    bool valid = false;
    tr_diag d;
    tr_status st = tr_js_check_instance(schema, strlen(schema), text, strlen(text), &valid, &d);
    if (st) fail_msg("validator failed (%s): %s\n  schema: %s", tr_status_name(st), d.message, schema);
    return valid;
}

static inline void tjc_check(const char *schema, const char *const *yes, const char *const *no) {
    for (int i = 0; yes && yes[i]; i++) {
        if (!tjc_valid(schema, yes[i])) fail_msg("the validator rejects %s under %s", yes[i], schema);
        if (!tjc_accepts(schema, yes[i])) fail_msg("should accept %s under %s", yes[i], schema);
    }
    for (int i = 0; no && no[i]; i++) {
        if (tjc_valid(schema, no[i])) fail_msg("the validator accepts %s under %s", no[i], schema);
        if (tjc_accepts(schema, no[i])) fail_msg("should reject %s under %s", no[i], schema);
    }
}

static inline void tjc_lossy(const char *schema, const char *const *texts) {
    for (int i = 0; texts[i]; i++) {
        if (!tjc_valid(schema, texts[i])) fail_msg("%s is not even valid under %s", texts[i], schema);
        if (tjc_accepts(schema, texts[i]))
            fail_msg("%s is accepted under %s: the documented loss is gone (move it to yes)",
                     texts[i], schema);
    }
}

/* The compile fails with code and a message containing needle. */
static inline void tjc_refused(const char *schema, tr_status code, const char *needle) {
    schema = tjc_q(schema);
    grammar *g = NULL;
    tr_diag d;
    tr_status st = tr_grammar_compile_json_schema(schema, strlen(schema), NULL, NULL, &g, &d);
    if (st != code)
        fail_msg("%s: got %s (%s), want %s", schema, tr_status_name(st), d.message,
                 tr_status_name(code));
    if (needle && !strstr(d.message, needle))
        fail_msg("%s: message \"%s\" lacks \"%s\"", schema, d.message, needle);
    assert_null(g);
}

#define TJC_Y(...) ((const char *const[]){__VA_ARGS__, NULL})

#endif
