/* test_json_schema_suite.c — the JSON-Schema-Test-Suite (draft2020-12) in
 * acceptance mode through the JSON Schema compiler and the real matcher.
 *
 * Every schema of ../shared/data/json-schema-test-suite/tests/draft2020-12
 * (or $TRELLIS_SHARED_DATA/json-schema-test-suite/...) is compiled in
 * strict mode with flexible whitespace and full numbers (the suite's
 * valid integers include 1.0, which canonical numbers refuse by design);
 * each test instance is written as
 * Python's json.dumps writes it and fed byte by byte (every byte checked
 * against the mask) through a fresh matcher, then end-of-generation.
 * Per file and in total: pass (accepted iff valid), unsupported (the
 * schema was refused), false accept (an invalid instance accepted: a
 * bug, the test fails) and false reject (a valid instance rejected: a
 * completeness gap, reported). The data folder missing is a failure, not
 * a skip: CI has it. TRELLIS_SUITE_VERBOSE=1 lists every refusal and
 * every wrong answer.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/unit/test_json_gbnf.h"
#include "tests/unit/test_json_util.h"

/* The count of passes this tree reaches; a drop is a regression. */
#define SUITE_MIN_PASS 0

typedef struct tally {
    int pass, unsupported, false_accept, false_reject;
    int ref_only;     /* schemas checked by the reference recognizer alone */
    int disagree;     /* matcher and reference recognizer differ */
} tally;

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool verbose(void) {
    const char *v = getenv("TRELLIS_SUITE_VERBOSE");
    return v && *v && strcmp(v, "0");
}

static void run_group(const char *file, json_t *group, grammar_vocab *v, tally *t) {
    json_t *schema = json_object_get(group, "schema");
    json_t *tests = json_object_get(group, "tests");
    const char *desc = json_string_value(json_object_get(group, "description"));
    char *text = json_dumps(schema, JSON_ENCODE_ANY | JSON_COMPACT);
    assert_non_null(text);
    grammar *g = NULL;
    tr_diag d;
    char *gt = NULL;
    size_t gn = 0;
    grammar_json_options o;
    tr_grammar_json_options_default(&o);
    o.numbers = GRAMMAR_JSON_NUM_FULL;
    tr_status st = tr_grammar_json_schema_to_ebnf(text, strlen(text), &o, NULL, &gt, &gn, &d);
    if (!st) {
        tr_diag d2;
        tr_status cs = tr_grammar_compile_json_schema(text, strlen(text), &o, NULL, &g, &d2);
        if (cs && !strstr(d2.message, "not in this build")) st = cs, d = d2;
    }
    if (st) {
        t->unsupported += (int)json_array_size(tests);
        if (verbose())
            printf("  %s: \"%s\": refused (%s): %s\n", file, desc, tr_status_name(st), d.message);
        free(text);
        free(gt);
        return;
    }
    tg_gram *ref = tg_parse(gt);
    if (!g) t->ref_only++;
    for (size_t i = 0; i < json_array_size(tests); i++) {
        json_t *tc = json_array_get(tests, i);
        bool valid = json_is_true(json_object_get(tc, "valid"));
        char *inst = tj_dumps(json_object_get(tc, "data"));
        assert_non_null(inst);
        bool acc = tg_accepts(ref, inst, strlen(inst));
        if (g) {
            bool m = tj_accepts(g, v, inst, strlen(inst));
            if (m != acc) {
                t->disagree++;
                printf("  DISAGREE %s: \"%s\": matcher %d, reference %d, instance %s\n", file,
                       desc, m, acc, inst);
                acc = acc || m;
            }
        }
        if (acc == valid)
            t->pass++;
        else if (acc) {
            t->false_accept++;
            printf("  FALSE ACCEPT %s: \"%s\" / \"%s\": schema %s instance %s\n", file, desc,
                   json_string_value(json_object_get(tc, "description")), text, inst);
        } else {
            t->false_reject++;
            if (verbose())
                printf("  false reject %s: \"%s\" / \"%s\": instance %s\n", file, desc,
                       json_string_value(json_object_get(tc, "description")), inst);
        }
        free(inst);
    }
    tg_free(ref);
    free(gt);
    tr_grammar_free(g);
    free(text);
}

static void test_suite(void **state) {
    (void)state;
    char base[4096], dir[4200];
    snprintf(dir, sizeof dir, "%s/json-schema-test-suite/tests/draft2020-12",
             tj_shared_data(base, sizeof base));
    DIR *dp = opendir(dir);
    if (!dp) fail_msg("the JSON-Schema-Test-Suite is not at %s (set TRELLIS_SHARED_DATA)", dir);
    char *names[256];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dp)) && n < 256) {
        size_t l = strlen(de->d_name);
        if (l > 5 && !strcmp(de->d_name + l - 5, ".json")) names[n++] = strdup(de->d_name);
    }
    closedir(dp);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    grammar_vocab *v = tj_byte_vocab();
    assert_non_null(v);
    tally all = {0};
    printf("%-28s %5s %5s %5s %5s\n", "file", "pass", "unsup", "FA", "FR");
    for (int i = 0; i < n; i++) {
        char path[4500];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        json_error_t je;
        json_t *doc = json_load_file(path, JSON_ALLOW_NUL, &je);
        if (!doc) fail_msg("%s: %s", path, je.text);
        tally t = {0};
        for (size_t k = 0; k < json_array_size(doc); k++)
            run_group(names[i], json_array_get(doc, k), v, &t);
        printf("%-28s %5d %5d %5d %5d\n", names[i], t.pass, t.unsupported, t.false_accept,
               t.false_reject);
        all.pass += t.pass, all.unsupported += t.unsupported;
        all.false_accept += t.false_accept, all.false_reject += t.false_reject;
        all.ref_only += t.ref_only, all.disagree += t.disagree;
        json_decref(doc);
        free(names[i]);
    }
    printf("%-28s %5d %5d %5d %5d   (of %d tests)\n", "TOTAL", all.pass, all.unsupported,
           all.false_accept, all.false_reject,
           all.pass + all.unsupported + all.false_accept + all.false_reject);
    if (all.ref_only)
        printf("(%d schemas checked by the reference recognizer only: no EBNF engine)\n",
               all.ref_only);
    tr_grammar_vocab_free(v);
    assert_int_equal(all.disagree, 0);
    assert_int_equal(all.false_accept, 0);
    assert_true(all.pass >= SUITE_MIN_PASS);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_suite)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
