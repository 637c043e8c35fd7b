/* test_fault_grammar.c — allocation failure in the grammar compiler.
 *
 * For each input (regexes, EBNF grammars, JSON Schemas, plain JSON) the
 * compile runs once per allocation index k: the k-th allocation fails,
 * k = 0, 1, ... until a compile makes fewer than k+1 allocations. Each
 * failed compile must return TR_ERR_NOMEM, leave *out untouched and leave
 * no block allocated (the live-block count is back to its value before
 * the call; the asan stage also runs this binary under LeakSanitizer).
 * One exception, jansson's: see json_alloc.
 * A compile that absorbs the failure (a cache that gives up, say) must
 * still produce a grammar that accepts and rejects like the reference.
 *
 * How the failures are injected: this binary alone is linked with
 * -Wl,--wrap=malloc,... (tests/CMakeLists.txt), so every call to the libc
 * allocator from the static libraries goes through the __wrap_ functions
 * below; jansson (a shared library: --wrap cannot reach it) is given the
 * same functions through json_set_alloc_funcs. Nothing in the library
 * knows about the hook.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "grammar/grammar.h"
#include "tests/unit/test_env.h"

/* ---- the counting allocator ---- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
int __real_posix_memalign(void **p, size_t align, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);

typedef struct fault_alloc {
    int armed;       /* count and fail only while a compile runs */
    int64_t calls;   /* allocation calls since armed */
    int64_t fail_at; /* the call that fails; -1 never */
    int64_t failed;  /* failures injected */
    int64_t live;    /* blocks handed out minus blocks freed */
} fault_alloc;
static fault_alloc fa = {.fail_at = -1};

/* true: this allocation must fail */
static int fa_fail(void) {
    if (!fa.armed) return 0;
    if (fa.calls++ != fa.fail_at) return 0;
    fa.failed++;
    return 1;
}

void *__wrap_malloc(size_t n) {
    if (fa_fail()) return NULL;
    void *p = __real_malloc(n);
    if (p && fa.armed) fa.live++;
    return p;
}
void *__wrap_calloc(size_t n, size_t size) {
    if (fa_fail()) return NULL;
    void *p = __real_calloc(n, size);
    if (p && fa.armed) fa.live++;
    return p;
}
void *__wrap_realloc(void *old, size_t n) {
    if (fa_fail()) return NULL; /* the old block stays the caller's */
    void *p = __real_realloc(old, n);
    if (p && !old && fa.armed) fa.live++;
    return p;
}
void __wrap_free(void *p) {
    if (p && fa.armed) fa.live--;
    __real_free(p);
}
int __wrap_posix_memalign(void **p, size_t align, size_t n) {
    if (fa_fail()) return 12; /* ENOMEM */
    int rc = __real_posix_memalign(p, align, n);
    if (rc == 0 && fa.armed) fa.live++;
    return rc;
}
char *__wrap_strdup(const char *s) {
    if (fa_fail()) return NULL;
    char *p = __real_strdup(s);
    if (p && fa.armed) fa.live++;
    return p;
}
char *__wrap_strndup(const char *s, size_t n) {
    if (fa_fail()) return NULL;
    char *p = __real_strndup(s, n);
    if (p && fa.armed) fa.live++;
    return p;
}
/* Two faults of jansson (2.14) under allocation failure, outside our code:
 * its lexer reports some failed allocations as a syntax error ("string or
 * '}' expected"), so the compiler cannot tell them from bad JSON and
 * returns TR_ERR_FORMAT; and lex_save ignores strbuffer_append_byte's
 * failure, so a string token can silently lose bytes (a "pattern" then
 * compiles to another language). For a failure inside jansson the test
 * asserts only what Trellis controls: no crash, no leak, *out untouched
 * on error and a valid grammar on success. */
static int json_failed;
static void *json_alloc(size_t n) {
    int64_t before = fa.failed;
    void *p = __wrap_malloc(n);
    if (fa.failed != before) json_failed = 1;
    return p;
}
static void json_release(void *p) { __wrap_free(p); }

/* ---- the loop ---- */

typedef enum { K_REGEX, K_EBNF, K_SCHEMA, K_JSON } kind;

typedef struct fcase {
    kind k;
    const char *text;
    const char *yes[4]; /* accepted strings (NULL-terminated) */
    const char *no[4];  /* rejected strings */
} fcase;

static tr_status compile(const fcase *c, grammar **out, tr_diag *d) {
    size_t n = strlen(c->text);
    switch (c->k) {
    case K_REGEX: return tr_grammar_compile_regex(c->text, n, NULL, out, d);
    case K_EBNF: return tr_grammar_compile_ebnf(c->text, n, NULL, out, d);
    case K_SCHEMA: return tr_grammar_compile_json_schema(c->text, n, NULL, NULL, out, d);
    case K_JSON: return tr_grammar_compile_json(c->text[0] == 'o', NULL, NULL, out, d);
    }
    return TR_ERR_INTERNAL;
}

static int64_t cur_k = -1; /* the failing allocation index; -1 none */

static void check_language(const fcase *c, const grammar *g) {
    assert_int_equal(tr_grammar_check(g), TR_OK);
    for (int i = 0; i < 4 && c->yes[i]; i++)
        if (!tr_grammar_matches(g, c->yes[i], strlen(c->yes[i]))) {
            fprintf(stderr, "%s: rejects %s (allocation %lld failed)\n", c->text,
                    c->yes[i], (long long)cur_k);
            fail();
        }
    for (int i = 0; i < 4 && c->no[i]; i++)
        if (tr_grammar_matches(g, c->no[i], strlen(c->no[i]))) {
            fprintf(stderr, "%s: accepts %s (allocation %lld failed)\n", c->text,
                    c->no[i], (long long)cur_k);
            fail();
        }
}

/* Returns the number of allocation indices tried. */
static int64_t fail_each_allocation(const fcase *c) {
    grammar *g = NULL;
    tr_diag d;
    /* reference compile (also warms any lazily built static tables) */
    cur_k = -1;
    assert_int_equal(compile(c, &g, &d), TR_OK);
    check_language(c, g);
    tr_grammar_free(g);

    /* small scale (asan stage): every 7th index, plus the first 64 */
    int64_t step = small_scale() ? 7 : 1;
    for (int64_t k = 0;; k = k < 64 ? k + 1 : k + step) {
        grammar *sentinel = (grammar *)&fa; /* any non-NULL address */
        g = sentinel;
        fa = (fault_alloc){.armed = 1, .fail_at = k};
        json_failed = 0;
        cur_k = k;
        tr_status st = compile(c, &g, &d);
        int64_t failed = fa.failed, live_after;
        fa.fail_at = -1; /* checking and freeing count blocks, never fail */
        if (st == TR_OK) {
            assert_true(g != sentinel && g != NULL);
            if (json_failed)
                assert_int_equal(tr_grammar_check(g), TR_OK);
            else
                check_language(c, g);
            tr_grammar_free(g);
        }
        live_after = fa.live;
        fa.armed = 0;
        if (failed == 0) { /* the compile needs fewer than k+1 allocations */
            assert_int_equal(st, TR_OK);
            assert_int_equal(live_after, 0);
            return k;
        }
        if (st == TR_ERR_FORMAT && json_failed) st = TR_ERR_NOMEM;
        if (st != TR_OK && st != TR_ERR_NOMEM)
            fprintf(stderr, "%.40s: allocation %lld failed: %s (%s)\n", c->text,
                    (long long)k, tr_status_name(st), d.message);
        if (st != TR_OK) {
            assert_int_equal(st, TR_ERR_NOMEM);
            assert_ptr_equal(g, sentinel);
        }
        if (live_after != 0)
            fprintf(stderr, "%.40s: allocation %lld failed: %lld blocks leaked\n",
                    c->text, (long long)k, (long long)live_after);
        assert_int_equal(live_after, 0);
    }
}

static void run_cases(const fcase *cs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int64_t tried = fail_each_allocation(&cs[i]);
        assert_true(tried > 0); /* each compile allocates: the hook is live */
        int line = (int)strcspn(cs[i].text, "\n");
        fprintf(stderr, "  %-50.*s %lld allocation indices\n", line < 50 ? line : 50,
                cs[i].text, (long long)tried);
    }
}

static void test_regex(void **state) {
    (void)state;
    static const fcase cs[] = {
        {K_REGEX, "[a-z]+@[a-z]+\\.(com|org)", {"ab@cd.com", "x@y.org"}, {"ab@cd.net", "@x.com"}},
        {K_REGEX, "\\d{3}-\\d{4}( x\\d{1,5})?", {"555-1234", "555-1234 x12"}, {"5551234"}},
        {K_REGEX, "(\\p{L}|[0-9_])+\\s*=\\s*\"[^\"]*\"", {"clé = \"v\""}, {"= \"v\""}},
        {K_REGEX, "(a|b)*abb(a|b){0,6}", {"abb", "babbab"}, {"ab", "abba"  "aaaaaaa"}},
    };
    run_cases(cs, sizeof cs / sizeof cs[0]);
}

static void test_ebnf(void **state) {
    (void)state;
    static const fcase cs[] = {
        {K_EBNF,
         "root ::= expr\n"
         "expr ::= term ((\"+\" | \"-\") term)*\n"
         "term ::= factor ((\"*\" | \"/\") factor)*\n"
         "factor ::= [0-9]+ | \"(\" expr \")\"\n",
         {"1+2*3", "(1+2)*3", "((4))"},
         {"1+", "(1", "a"}},
        {K_EBNF,
         "root ::= \"[\" ws (item (\",\" ws item)*)? \"]\"\n"
         "item ::= [a-z]+ | root\n"
         "ws ::= [ \\t]*\n",
         {"[]", "[a, [b,c], []]"},
         {"[", "[a,]"}},
    };
    run_cases(cs, sizeof cs / sizeof cs[0]);
}

static void test_json_schema(void **state) {
    (void)state;
    static const fcase cs[] = {
        {K_SCHEMA,
         "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\","
         "\"maxLength\":8},\"age\":{\"type\":\"integer\",\"minimum\":0},"
         "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]}}},"
         "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}",
         {"{\"name\":\"x\",\"age\":3}", "{\"name\":\"x\",\"age\":0,\"tags\":[\"a\"]}"},
         {"{\"age\":3}", "{\"name\":\"x\",\"age\":-1}"}},
        {K_SCHEMA,
         "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":"
         "{\"type\":\"number\"},\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},"
         "{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"],"
         "\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}",
         {"{\"v\":1,\"next\":null}", "{\"v\":1.5,\"next\":{\"v\":2,\"next\":null}}"},
         {"{\"v\":1}", "{\"v\":\"1\",\"next\":null}"}},
        {K_SCHEMA,
         "{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}[0-9]{2,3}$\"}",
         {"\"AB12\"", "\"XY123\""},
         {"\"A12\"", "\"AB1\""}},
        {K_JSON, "object", {"{}", "{\"a\":[1,true,null]}"}, {"[]", "{"}},
    };
    run_cases(cs, sizeof cs / sizeof cs[0]);
}

int main(void) {
    json_set_alloc_funcs(json_alloc, json_release);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regex),
        cmocka_unit_test(test_ebnf),
        cmocka_unit_test(test_json_schema),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
