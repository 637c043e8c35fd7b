/* test_dsl_parse.c — the DSL's lexer and parser (frontend/): every
 * construct parses, every malformed input fails with the right message
 * at the right line and column, the error renders with a caret, and the
 * limits hold. No model, no backend. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frontend/ast_internal.h"
#include "frontend/dsl.h"
#include "frontend/lexer_internal.h"

static tr_dsl_script *parse_ok(const char *src) {
    tr_dsl_script *s = NULL;
    tr_dsl_error e;
    tr_status st = tr_dsl_script_parse("t.tr", NULL, src, strlen(src), NULL, &s, &e);
    if (st != TR_OK) fprintf(stderr, "unexpected error %d:%d: %s\n", e.line, e.column, e.message);
    assert_int_equal(st, TR_OK);
    assert_non_null(s);
    return s;
}

static const char ALL_CONSTRUCTS[] =
    "# every construct once\n"
    "let shots = [{text: \"good\", label: \"pos\"}, {\"text\": \"bad\", \"label\": \"neg\"}]\n"
    "let greeting = \"hi\"\n"
    "fn shot(ex) {\n"
    "  user { ex.text }\n"
    "  assistant { ex.label }\n"
    "}\n"
    "fn helper(a, b = 2) { return a + b }\n"
    "fn main(topic, n = 3) {\n"
    "  system {\n"
    "    \"\"\"\n"
    "    You classify.\n"
    "      Indented {topic}.\n"
    "    \"\"\"\n"
    "  }\n"
    "  for i, ex in shots { shot(ex) }\n"
    "  user { \"{greeting}: {topic} {{literal}}\" r\"raw {x} \\d\" }\n"
    "  assistant {\n"
    "    gen answer(max_tokens=16, stop=[\"\\n\"], temperature=0.5, top_p=0.9, top_k=4,\n"
    "               min_p=0.1, seed=1, ignore_eos=false, presence_penalty=0.1,\n"
    "               frequency_penalty=0.2, repetition_penalty=1.1)\n"
    "  }\n"
    "  assistant { gen num(regex=r\"[0-9]+\") }\n"
    "  assistant { gen obj(json_schema={type: \"object\"}) }\n"
    "  assistant { gen any(json=true) }\n"
    "  assistant { gen pick(choices=[\"a\", \"b\"]) }\n"
    "  assistant { select label(temperature=0) from [\"pos\", \"neg\"] }\n"
    "  if label == \"pos\" and not (n < 2) { let x = 1 } else if n >= 4 { let x = 2 } else { let x = 3 }\n"
    "  x = x * 2 - -1 % 3 / 1\n"
    "  fork 2 { assistant { gen idea } }\n"
    "  fork k, t in [\"a\", \"b\"] { assistant { gen more } }\n"
    "  parallel {\n"
    "    branch { assistant { gen p1 } }\n"
    "    branch { assistant { gen p2 } }\n"
    "  }\n"
    "  let h = helper(1, b=5)\n"
    "  let s = shots[0].text + str(len(shots)) + json(obj)\n"
    "  if \"a\" in [\"a\"] and \"z\" not in \"abc\" { return {h: h, s: s, idea: idea} }\n"
    "  return\n"
    "}\n";

static void test_parse_all_constructs(void **state) {
    (void)state;
    tr_dsl_script *s = parse_ok(ALL_CONSTRUCTS);
    assert_int_equal(s->n_fns, 3);
    assert_int_equal(s->n_globals, 2);
    assert_true(tr_dsl_script_has_fn(s, "main"));
    assert_string_equal(tr_dsl_script_default_fn(s), "main");
    /* generates: main and shot (role blocks) do, helper does not */
    for (int i = 0; i < s->n_fns; i++)
        assert_int_equal(s->fns[i].generates, strcmp(s->fns[i].name, "helper") != 0);
    tr_dsl_script_free(s);
}

static void test_generates_through_calls(void **state) {
    (void)state;
    tr_dsl_script *s = parse_ok("fn a() { return b() }\n"
                                "fn b() { return c() }\n"
                                "fn c() { \"x\" gen y }\n"
                                "fn d() { return 1 }\n");
    assert_true(s->fns[0].generates);
    assert_true(s->fns[1].generates);
    assert_true(s->fns[2].generates);
    assert_false(s->fns[3].generates);
    assert_null(tr_dsl_script_default_fn(s)); /* no main, four functions */
    tr_dsl_script_free(s);
}

typedef struct bad_case {
    const char *src;
    int line, column;
    const char *message; /* a substring */
    tr_status code;
} bad_case;

static const bad_case BAD[] = {
    {"fn main() {\n  gen x(max_tokens=)\n}\n", 2, 20, "expected a value", TR_ERR_FORMAT},
    {"fn main() {\n  let s = \"abc\n}\n", 2, 11, "unterminated string", TR_ERR_FORMAT},
    {"fn main() {\n  gen x(max_token=3)\n}\n", 2, 9, "unknown option 'max_token'", TR_ERR_FORMAT},
    {"fn main() {\n  foo(1)\n}\n", 2, 3, "unknown function 'foo'", TR_ERR_FORMAT},
    {"fn main() {\n  user { \"x\"\n", 2, 8, "never closed", TR_ERR_FORMAT},
    {"\"text at the top\"\n", 1, 1, "at the top level", TR_ERR_FORMAT},
    {"fn main() {\n  let x = gen y\n}\n", 2, 11, "gen is a statement", TR_ERR_FORMAT},
    {"fn main() {\n  fork 2 { return 1 }\n}\n", 2, 12, "return inside a fork", TR_ERR_FORMAT},
    {"fn main() {\n  fn inner() {}\n}\n", 2, 3, "top level", TR_ERR_FORMAT},
    {"fn f() {}\nfn f() {}\n", 2, 1, "defined twice", TR_ERR_FORMAT},
    {"fn len() {}\n", 1, 1, "built-in", TR_ERR_FORMAT},
    {"fn f(a) {}\nfn main() { f(1, 2) }\n", 2, 13, "takes 1 argument", TR_ERR_FORMAT},
    {"fn f(a) {}\nfn main() { f() }\n", 2, 13, "missing argument 'a'", TR_ERR_FORMAT},
    {"fn f(a) {}\nfn main() { f(b=1) }\n", 2, 17, "no parameter 'b'", TR_ERR_FORMAT},
    {"fn main() { len(1, 2) }\n", 1, 13, "len(value)", TR_ERR_FORMAT},
    {"fn main() {\n  let s = \"\"\"\n    a\n  b\n    \"\"\"\n}\n", 4, 1, "indented less",
     TR_ERR_FORMAT},
    {"fn main() {\n  let s = \"\"\"a\n  \"\"\"\n}\n", 2, 11, "starts on the line after",
     TR_ERR_FORMAT},
    {"fn main() {\n  let s = \"x {y\"\n}\n", 2, 14, "unterminated interpolation",
     TR_ERR_FORMAT},
    {"fn main() {\n  let s = \"x }\"\n}\n", 2, 14, "lone '}'", TR_ERR_FORMAT},
    {"fn main() {\n  let s = \"x {}\"\n}\n", 2, 14, "empty interpolation", TR_ERR_FORMAT},
    {"fn main() {\n  let s = \"a {1 +} b\"\n}\n", 2, 18, "expected a value", TR_ERR_FORMAT},
    {"fn main() {\n  let s = \"\\q\"\n}\n", 2, 12, "unknown escape", TR_ERR_FORMAT},
    {"fn main() {\n  let s = 'x'\n}\n", 2, 11, "double quotes", TR_ERR_FORMAT},
    {"fn main() {\n  select x [\"a\"]\n}\n", 2, 12, "expected `from`", TR_ERR_FORMAT},
    {"fn main() {\n  \"q\" select x from [\"a\"] by chance\n}\n", 2, 30,
     "expected `logprob` or `constrained` after `by`", TR_ERR_FORMAT},
    {"fn main() {\n  select x(stop=\"a\") from [\"a\"]\n}\n", 2, 12, "select takes only",
     TR_ERR_FORMAT},
    {"fn main() {\n  gen x(max_tokens=1, max_tokens=2)\n}\n", 2, 23, "given twice", TR_ERR_FORMAT},
    {"fn main() {\n  if 1 < 2 < 3 { }\n}\n", 2, 12, "do not chain", TR_ERR_FORMAT},
    {"fn main() {\n  else { }\n}\n", 2, 3, "else without an if", TR_ERR_FORMAT},
    {"fn main() {\n  parallel { let x = 1 }\n}\n", 2, 14, "branch", TR_ERR_FORMAT},
    {"fn main() {\n  let x = 99999999999999999999\n}\n", 2, 11, "too large", TR_ERR_FORMAT},
    {"fn main() {\n  let x = a && b\n}\n", 2, 13, "'and'", TR_ERR_FORMAT},
    {"fn main() {\n  x.y(1)\n}\n", 2, 6, "only functions can be called", TR_ERR_FORMAT},
    {"fn main(a, b = 1, c) {}\n", 1, 19, "without a default", TR_ERR_FORMAT},
    {"fn main() {\n  let s = \"\\u{D800}\"\n}\n", 2, 12, "scalar value", TR_ERR_FORMAT},
    {"fn main() { let é = 1 }\n", 1, 17, "non-ASCII", TR_ERR_FORMAT},
    {"fn main() { \"ok\" }\xff\n", 1, 19, "not valid UTF-8", TR_ERR_FORMAT},
};

static void test_parse_errors(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        const bad_case *c = &BAD[i];
        tr_dsl_script *s = NULL;
        tr_dsl_error e;
        tr_status st = tr_dsl_script_parse("t.tr", NULL, c->src, strlen(c->src), NULL, &s, &e);
        if (st != c->code || e.line != c->line || e.column != c->column ||
            !strstr(e.message, c->message))
            fprintf(stderr, "case %zu: got %d at %d:%d: %s\n", i, st, e.line, e.column,
                    e.message);
        assert_int_equal(st, c->code);
        assert_null(s);
        assert_true(e.has_location);
        assert_int_equal(e.line, c->line);
        assert_int_equal(e.column, c->column);
        assert_non_null(strstr(e.message, c->message));
    }
}

static void test_error_caret(void **state) {
    (void)state;
    const char *src = "fn main() {\n  gen x(max_tokens=)\n}\n";
    tr_dsl_script *s = NULL;
    tr_dsl_error e;
    assert_int_not_equal(tr_dsl_script_parse("a.tr", NULL, src, strlen(src), NULL, &s, &e),
                         TR_OK);
    char buf[1024];
    tr_dsl_error_format_src("a.tr", src, strlen(src), &e, buf, sizeof buf);
    assert_non_null(strstr(buf, "a.tr:2:20: error: expected a value"));
    assert_non_null(strstr(buf, "    2 |   gen x(max_tokens=)\n"));
    /* the caret under column 20: "      | " then 19 spaces */
    assert_non_null(strstr(buf, "\n      |                    ^\n"));
    /* a tiny buffer is truncated, never overrun */
    char tiny[8];
    tr_dsl_error_format_src("a.tr", src, strlen(src), &e, tiny, sizeof tiny);
    assert_int_equal(strlen(tiny), 7);
}

/* The decoded text of the string literal in `let s = ...`. */
static void expect_literal(const char *literal, const char *want) {
    char src[1024];
    snprintf(src, sizeof src, "let s = %s\n", literal);
    tr_dsl_script *s = parse_ok(src);
    const tr_dsl_expr *e = s->globals[0].value;
    assert_int_equal(e->kind, TR_DSL_E_CONST);
    assert_true(json_is_string(e->u.value));
    assert_string_equal(json_string_value(e->u.value), want);
    tr_dsl_script_free(s);
}

static void test_strings(void **state) {
    (void)state;
    expect_literal("\"a\\tb\\nc\\\\d\\\"e\\{\\}\"", "a\tb\nc\\d\"e{}");
    expect_literal("\"{{x}}\"", "{x}");
    expect_literal("\"\\u{48}\\u{e9}\\u{1F600}\"", "H\xc3\xa9\xf0\x9f\x98\x80");
    expect_literal("r\"[0-9]{3}\\d\"", "[0-9]{3}\\d");
    expect_literal("\"\"\"\n    line one\n      two\n\n    three\n    \"\"\"", "line one\n  two\n\nthree");
    expect_literal("\"\"\"\n  joined \\\n  here\n  \"\"\"", "joined here");
    expect_literal("r\"\"\"\n  raw {x} \\n\n  \"\"\"", "raw {x} \\n");
    expect_literal("\"\"\"\n  \"\"\"", "");
    expect_literal("\"\"", "");
}

static void test_interpolation_spans(void **state) {
    (void)state;
    tr_dsl_script *s = parse_ok("let s = \"a {join([\"}}\", \"{{\"], \"-\")} b {1 + 2}\"\n");
    const tr_dsl_expr *e = s->globals[0].value;
    assert_int_equal(e->kind, TR_DSL_E_STRING);
    assert_int_equal(e->u.str.n, 4);
    assert_string_equal(e->u.str.segs[0].text, "a ");
    assert_int_equal(e->u.str.segs[1].expr->kind, TR_DSL_E_CALL);
    assert_string_equal(e->u.str.segs[2].text, " b ");
    assert_int_equal(e->u.str.segs[3].expr->kind, TR_DSL_E_BINARY);
    tr_dsl_script_free(s);
}

static void test_line_breaks_end_expressions(void **state) {
    (void)state;
    /* `(x)` on the next line is a new statement, not a call of b */
    tr_dsl_script *s = parse_ok("fn main(b, x) {\n  let a = b\n  (x)\n}\n");
    assert_int_equal(s->fns[0].body.n, 2);
    tr_dsl_script_free(s);
    /* inside brackets, line breaks are free */
    s = parse_ok("fn main() {\n  let a = [1,\n    2] + [\n 3]\n  let b = (1\n + 2)\n}\n");
    assert_int_equal(s->fns[0].body.n, 2);
    tr_dsl_script_free(s);
}

static void test_limits(void **state) {
    (void)state;
    tr_dsl_limits lim;
    tr_dsl_limits_default(&lim);
    lim.max_script_bytes = 10;
    tr_dsl_script *s = NULL;
    tr_dsl_error e;
    const char *src = "fn main() {}\n";
    assert_int_equal(tr_dsl_script_parse("t", NULL, src, strlen(src), &lim, &s, &e), TR_ERR_LIMIT);
    assert_non_null(strstr(e.message, "max_script_bytes"));
    /* nesting: 5000 parentheses, a block 5000 deep, strings in strings */
    tr_dsl_limits_default(&lim);
    size_t n = 5000;
    char *deep = malloc(4 * n + 64);
    for (int kind = 0; kind < 3; kind++) {
        char *w = deep;
        w += sprintf(w, "fn main() { let x = ");
        for (size_t i = 0; i < n; i++) *w++ = kind == 0 ? '(' : kind == 1 ? '[' : '-';
        *w++ = '1';
        if (kind < 2)
            for (size_t i = 0; i < n; i++) *w++ = kind == 0 ? ')' : ']';
        w += sprintf(w, " }\n");
        assert_int_equal(tr_dsl_script_parse("t", NULL, deep, strlen(deep), &lim, &s, &e),
                         TR_ERR_LIMIT);
        assert_non_null(strstr(e.message, "max_nesting"));
    }
    char *w = deep;
    w += sprintf(w, "let x = ");
    for (size_t i = 0; i < 200; i++) w += sprintf(w, "\"{");
    *w = 0;
    assert_int_not_equal(tr_dsl_script_parse("t", NULL, deep, strlen(deep), &lim, &s, &e), TR_OK);
    free(deep);
    /* the parser's memory budget */
    lim.max_ast_bytes = 4096;
    char big[20000];
    w = big;
    w += sprintf(w, "fn main() {");
    for (int i = 0; i < 1500; i++) w += sprintf(w, " 1");
    sprintf(w, " }");
    assert_int_equal(tr_dsl_script_parse("t", NULL, big, strlen(big), &lim, &s, &e), TR_ERR_NOMEM);
    assert_non_null(strstr(e.message, "budget"));
}

static void test_lexer_tokens(void **state) {
    (void)state;
    const char *src = "fn x_1 12 3.5e2 == != <= >= and or not # comment\n )";
    tr_arena a;
    tr_arena_init(&a, 4096, (size_t)1 << 20, UINT64_MAX);
    tr_diag d = {0};
    tr_dsl_lexer lx;
    tr_dsl_lexer_init(&lx, src, 0, strlen(src), &a, &d, 64);
    tr_dsl_tok want[] = {TR_DSL_TOK_FN, TR_DSL_TOK_IDENT, TR_DSL_TOK_INT, TR_DSL_TOK_FLOAT,
                         TR_DSL_TOK_EQ, TR_DSL_TOK_NE, TR_DSL_TOK_LE, TR_DSL_TOK_GE,
                         TR_DSL_TOK_AND, TR_DSL_TOK_OR, TR_DSL_TOK_NOT, TR_DSL_TOK_RPAREN,
                         TR_DSL_TOK_EOF};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        tr_dsl_token t;
        assert_int_equal(tr_dsl_lex_next(&lx, &t), TR_OK);
        assert_int_equal(t.kind, want[i]);
        if (t.kind == TR_DSL_TOK_INT) assert_int_equal(t.i, 12);
        if (t.kind == TR_DSL_TOK_FLOAT) assert_true(t.f == 350.0);
        if (t.kind == TR_DSL_TOK_IDENT) assert_string_equal(t.name, "x_1");
        if (t.kind == TR_DSL_TOK_RPAREN) assert_true(t.nl_before);
    }
    tr_arena_deinit(&a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_all_constructs),
        cmocka_unit_test(test_generates_through_calls),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_error_caret),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_interpolation_spans),
        cmocka_unit_test(test_line_breaks_end_expressions),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_lexer_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
