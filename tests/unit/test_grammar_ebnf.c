/* test_grammar_ebnf.c — EBNF grammars: the parser, the compiler, and the
 * matcher over recursive grammars, against an independent reference.
 *
 *   - syntax and semantic errors: code, line, column, byte offset and
 *     what the message names, for every kind of mistake;
 *   - the format: literals, escapes, classes, '.', groups, every
 *     quantifier, comments, rules over several lines, regex terminals
 *     (anchors mean the terminal's ends);
 *   - left recursion: a rule's own leading self-reference is rewritten
 *     (same language), any other left recursion is refused naming the
 *     cycle; rules that never complete are pruned, a root that never
 *     completes is an error;
 *   - the reference (test_grammar_earley.h: its own parser into BNF and
 *     an Earley recognizer) decides, for hand-written grammars (JSON,
 *     arithmetic, lists, a C subset, chess moves, ambiguous ones) and for
 *     hundreds of random ones: every prefix of random and generated
 *     strings is accepted by the matcher iff Earley finds it viable, the
 *     end iff Earley accepts, and at every step of random token walks
 *     the mask is exactly the set of tokens whose bytes keep the text
 *     viable (EOG iff accepting);
 *   - SmolLM2's vocabulary on a JSON grammar: masks against each token
 *     checked on its own (all 49,152 tokens, many steps); the same on
 *     JSON Schema grammars in flexible whitespace (MaskBench's setting),
 *     with the memo on and off;
 *   - matcher API on stacks: rollback, forced bytes through rule
 *     boundaries, EOG and termination, deep nesting (the frame collector),
 *     the stacks budget on an exponentially ambiguous grammar, compile
 *     budgets, the memo budget, threads sharing one grammar.
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

#include "grammar/cfg/cfg_internal.h"
#include "tests/unit/test_env.h"
#include "tests/unit/test_grammar_earley.h"
#include "tests/unit/test_grammar_util.h"

/* the grammar under test, for failure messages */
static const char *g_text = "";
/* checks cut short by the stacks budget (exponentially ambiguous random
 * grammars): the matcher said TR_ERR_LIMIT, which is its documented
 * answer there; counted, and required to be rare */
static int g_budget_hits;

static bool over_budget(const grammar_matcher *m) {
    return m->cfg && m->cfg->x.err == TR_ERR_LIMIT;
}

static grammar *compile(const char *text) {
    grammar *g = NULL;
    tr_diag d;
    tr_status st = tr_grammar_compile_ebnf(text, strlen(text), NULL, &g, &d);
    if (st) fprintf(stderr, "grammar:\n%s\nerror: %s\n", text, d.message);
    assert_int_equal(st, TR_OK);
    assert_int_equal(tr_grammar_check(g), TR_OK);
    return g;
}

static bool matches(const grammar *g, const char *s) {
    return tr_grammar_matches(g, s, strlen(s));
}

/* ---- errors ---- */

typedef struct err_case {
    const char *text;
    tr_status code;
    int line, column;
    const char *needle; /* in the message */
} err_case;

static void test_errors(void **state) {
    (void)state;
    static const err_case cases[] = {
        {"", TR_ERR_FORMAT, 1, 1, "no rule named 'root'"},
        {"# only a comment\n", TR_ERR_FORMAT, 1, 1, "no rule named 'root'"},
        {"item ::= \"x\"\n", TR_ERR_FORMAT, 1, 1, "no rule named 'root'"},
        {"root ::= \"x\" foo\n", TR_ERR_FORMAT, 1, 14, "undefined rule 'foo'"},
        {"root ::= a\na ::= \"x\"\n\nb ::= \"y\" zz\n", TR_ERR_FORMAT, 4, 11,
         "undefined rule 'zz'"},
        {"root ::= \"x\"\nroot ::= \"y\"\n", TR_ERR_FORMAT, 2, 1,
         "defined twice (first on line 1)"},
        {"root = \"x\"\n", TR_ERR_FORMAT, 1, 6, "expected '::='"},
        {"root ::= \"x\n\"", TR_ERR_FORMAT, 1, 12, "unterminated string literal"},
        {"root ::= \"x", TR_ERR_FORMAT, 1, 12, "unterminated string literal"},
        {"root ::= [a-z\n", TR_ERR_FORMAT, 1, 14, "unterminated character class"},
        {"root ::= [z-a]\n", TR_ERR_FORMAT, 1, 11, "range out of order"},
        {"root ::= []\n", TR_ERR_FORMAT, 1, 10, "empty character class"},
        {"root ::= ( \"x\"\n", TR_ERR_FORMAT, 1, 10, "missing )"},
        {"root ::= \"x\" )\n", TR_ERR_FORMAT, 1, 14, "unmatched )"},
        {"root ::= * \"x\"\n", TR_ERR_FORMAT, 1, 10, "does not follow an item"},
        {"root ::= \"x\"{3,2}\n", TR_ERR_FORMAT, 1, 13, "n < m"},
        {"root ::= \"x\"{2\n", TR_ERR_FORMAT, 1, 13, "expected }"},
        {"root ::= \"x\"{a}\n", TR_ERR_FORMAT, 1, 13, "expected a number"},
        {"root ::= \"\\q\"\n", TR_ERR_FORMAT, 1, 11, "unknown escape"},
        {"root ::= \"\\x4\"\n", TR_ERR_FORMAT, 1, 11, "expected 2 hex digits"},
        {"root ::= \"\\uD800\"\n", TR_ERR_FORMAT, 1, 11, "not a character"},
        {"root ::= \"\\U00110000\"\n", TR_ERR_FORMAT, 1, 11, "not a character"},
        {"root ::= \"\xff\"\n", TR_ERR_FORMAT, 1, 11, "invalid UTF-8"},
        {"root ::= \"x\" @\n", TR_ERR_FORMAT, 1, 14, "unexpected '@'"},
        /* %dfaN names an automaton of an internal caller only */
        {"root ::= %dfa0\n", TR_ERR_FORMAT, 1, 10, "unexpected '%'"},
        {"root ::= <token>\n", TR_ERR_UNSUPPORTED, 1, 10, "token references"},
        {"::= \"x\"\n", TR_ERR_FORMAT, 1, 1, "expected a rule name"},
        {"root ::= \"a\"\n  \"b\"\n", TR_ERR_FORMAT, 2, 3,
         "expected a rule name (name ::= ...), found '\"'"},
        {"root ::= (a\n  b ::= \"x\")\n", TR_ERR_FORMAT, 2, 3,
         "rule 'b' starts inside the previous rule"},
        {"root ::= /abc\n", TR_ERR_FORMAT, 1, 10, "unterminated regex terminal"},
        {"root ::= \"a\" /x(?=y)/\n", TR_ERR_UNSUPPORTED, 1, 16, "lookahead"},
        {"root ::= \"a\" /x[/\n", TR_ERR_FORMAT, 1, 16,
         "in regex terminal: missing ] for class"},
        {"root ::= /a^b/\n", TR_ERR_FORMAT, 1, 10, "matches no string"},
        {"root ::= root \"x\"\n", TR_ERR_FORMAT, 1, 1, "matches no string"},
        {"root ::= \"x\" a\na ::= \"y\" a\n", TR_ERR_FORMAT, 1, 1,
         "matches no string"},
        {"root ::= a \"x\"\na ::= b \"y\" | \"z\"\nb ::= a\n", TR_ERR_UNSUPPORTED,
         2, 1, "left recursion: a -> b -> a"},
        {"root ::= e\ne ::= n e \"+\" | \"1\"\nn ::= \"-\"?\n", TR_ERR_UNSUPPORTED,
         2, 1, "left recursion: e -> e"},
    };
    for (size_t i = 0; i < TR_ARRAY_LEN(cases); i++) {
        const err_case *c = &cases[i];
        grammar *g = NULL;
        tr_diag d;
        tr_status st = tr_grammar_compile_ebnf(c->text, strlen(c->text), NULL, &g, &d);
        if (st != c->code || d.code != c->code || d.line != c->line ||
            d.column != c->column || !strstr(d.message, c->needle))
            fail_msg("case %zu %s: got %s at %d:%d (offset %llu) \"%s\"", i, c->text,
                     tr_status_name(st), d.line, d.column,
                     (unsigned long long)d.offset, d.message);
        assert_null(g);
        /* the offset agrees with line and column on these ASCII texts */
        int line = 1, col = 1;
        for (uint64_t k = 0; k < d.offset; k++)
            if (c->text[k] == '\n') line++, col = 1;
            else col++;
        assert_int_equal(line, d.line);
        assert_int_equal(col, d.column);
    }
    /* arguments */
    grammar *g = NULL;
    tr_diag d;
    assert_int_equal(tr_grammar_compile_ebnf(NULL, 3, NULL, &g, &d), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_grammar_compile_ebnf("root ::= \"x\"", 12, NULL, NULL, &d),
                     TR_ERR_INVALID_ARG);
    /* a diag is optional */
    assert_int_equal(tr_grammar_compile_ebnf("root ::= ", 9, NULL, &g, NULL), TR_OK);
    assert_true(matches(g, ""));
    tr_grammar_free(g);
}

/* ---- the format ---- */

static void test_format(void **state) {
    (void)state;
    grammar *g;
    /* escapes and UTF-8 in literals; comments; blank lines */
    g = compile("# a comment\n\nroot ::= \"a\\n\\t\\\\\\\"\\x41\\u00e9\\U0001F600\" "
                "\"\xe4\xb8\xad\" # trailing\n");
    assert_true(matches(g, "a\n\t\\\"A\xc3\xa9\xf0\x9f\x98\x80\xe4\xb8\xad"));
    assert_false(matches(g, "a\n\t\\\"A\xc3\xa9\xf0\x9f\x98\x80"));
    tr_grammar_free(g);
    /* classes: ranges, negation over code points, escapes, '-' at the ends */
    g = compile("root ::= [a-c\\]\\-] [^a\\n] [-x] [\\u00e0-\\u00ff]\n");
    assert_true(matches(g, "]\xe4\xb8\xad-\xc3\xa9"));
    assert_true(matches(g, "c\xf0\x9f\x98\x80x\xc3\xa0"));
    assert_false(matches(g, "cax\xc3\xa0"));
    assert_false(matches(g, "c\nx\xc3\xa0"));
    assert_false(matches(g, "c\xed\xa0\x80x\xc3\xa0")); /* a surrogate: never */
    tr_grammar_free(g);
    /* '.' is any code point, newline included */
    g = compile("root ::= . .\n");
    assert_true(matches(g, "\n\xf4\x8f\xbf\xbf"));
    assert_false(matches(g, "\xff\x41"));
    tr_grammar_free(g);
    /* quantifiers, stacked ones, groups, empty alternatives */
    g = compile("root ::= \"a\"{2} \"b\"{1,} \"c\"{0,2} \"d\"{,1} (\"e\" | ) \"f\"*? \"g\"+\n");
    assert_true(matches(g, "aabgg"));
    assert_true(matches(g, "aabbbccdeffg"));
    assert_false(matches(g, "abg"));
    assert_false(matches(g, "aabcccg"));
    assert_false(matches(g, "aabdd"));
    tr_grammar_free(g);
    /* rules over several lines as llama.cpp writes them */
    g = compile("root ::=\n  item (\n  \",\" item)*\nitem ::= \"x\" |\n  \"y\"\n"
                "  | \"z\" # continued on a line starting with |\n"
                "other-rule_2 ::= \"unused\"\n");
    assert_true(matches(g, "x,y,z"));
    assert_false(matches(g, "x,"));
    tr_grammar_free(g);
    /* regex terminals: the dialect of grammar.h, \/ for a slash, anchors at
     * the terminal's ends, '.' without newline there */
    g = compile("root ::= \"<\" /[a-z]+\\/\\d{2}/ \">\" /^x$/ /.?/\n");
    assert_true(matches(g, "<ab/12>x"));
    assert_true(matches(g, "<ab/12>xq"));
    assert_false(matches(g, "<ab/12>x\n"));
    assert_false(matches(g, "<ab12>x"));
    tr_grammar_free(g);
    /* CRLF line ends */
    g = compile("root ::= a\r\na ::= \"x\"\r\n");
    assert_true(matches(g, "x"));
    tr_grammar_free(g);
}

/* ---- left recursion, pruning, inlining ---- */

/* A terminal written several times is parsed once and its tree shared
 * (ebnf_parse.c): every place must still mean the terminal, also where the
 * analysis rewrites or prunes around it. */
static void test_shared_terminals(void **state) {
    (void)state;
    grammar *g = compile("root ::= a \",\" a \",\" b \",\" d\n"
                         "a ::= /[0-9]+/ | a /[0-9]+/ \"x\"\n"
                         "b ::= /[0-9]+/ dead | /[0-9]+/ \"x\"? | \"x\"\n"
                         "dead ::= \"x\" dead\n"
                         "d ::= /^[0-9]+$/ /^[0-9]+$/? \"x\"\n");
    assert_true(matches(g, "1,2,3,4x"));
    assert_true(matches(g, "1,12x345x,3x,45x"));
    assert_true(matches(g, "12,1,x,4x"));
    assert_false(matches(g, "1,2x,3,4x"));  /* a: digits, then (digits x)* */
    assert_false(matches(g, "1,2,3xx,4x")); /* b's pruned branch not offered */
    assert_false(matches(g, "1,2,3,4"));
    assert_false(matches(g, "x,2,3,4x"));
    tr_grammar_free(g);
}

static void test_left_recursion(void **state) {
    (void)state;
    /* a rule's own leading self-reference is rewritten */
    grammar *g = compile("root ::= expr\nexpr ::= expr \"+\" term | expr \"-\" term | term\n"
                         "term ::= term \"*\" [0-9] | [0-9]\n");
    assert_true(matches(g, "1"));
    assert_true(matches(g, "1+2*3-4"));
    assert_false(matches(g, "1+"));
    assert_false(matches(g, "+1"));
    tr_grammar_free(g);
    /* also a bare self-reference alternative (A ::= A | x) */
    g = compile("root ::= root | \"x\"\n");
    assert_true(matches(g, "x"));
    assert_false(matches(g, "xx"));
    tr_grammar_free(g);
    /* through a nullable prefix: refused */
    grammar *bad = NULL;
    tr_diag d;
    const char *t = "root ::= \"(\" a \")\"\na ::= ws a \"x\" | \"y\"\nws ::= \" \"*\n";
    assert_int_equal(tr_grammar_compile_ebnf(t, strlen(t), NULL, &bad, &d),
                     TR_ERR_UNSUPPORTED);
    assert_non_null(strstr(d.message, "a -> a"));
    /* unproductive alternatives are pruned, not offered */
    g = compile("root ::= \"x\" | \"y\" dead\ndead ::= \"z\" dead\n");
    assert_true(matches(g, "x"));
    grammar_vocab *v;
    {
        static const char *const toks[] = {"x", "y", "z", "</s>"};
        v = tg_vocab_from_strings(toks, 4, 0, 3);
    }
    grammar_matcher *m;
    assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
    assert_false(tr_grammar_matcher_token_allowed(m, 1)); /* "y" leads nowhere */
    assert_true(tr_grammar_matcher_token_allowed(m, 0));
    tr_grammar_matcher_free(m);
    tr_grammar_free(g);
    /* a grammar without recursion is one rule: no call */
    g = compile("root ::= \"{\" kv (\",\" kv)* \"}\"\nkv ::= key \":\" val\n"
                "key ::= /\"[a-z]+\"/\nval ::= [0-9]+ | key\n");
    grammar_stats st;
    tr_grammar_get_stats(g, &st);
    assert_int_equal(st.rules, 4);
    assert_int_equal(st.rules_kept, 1);
    assert_int_equal(st.call_edges, 0);
    assert_true(matches(g, "{\"a\":1,\"b\":\"c\"}"));
    tr_grammar_free(g);
    /* JSON keeps object and array as calls and inlines value */
    g = compile("root ::= value\nvalue ::= object | array | \"1\"\n"
                "object ::= \"{\" (value (\",\" value)*)? \"}\"\n"
                "array ::= \"[\" (value (\",\" value)*)? \"]\"\n");
    tr_grammar_get_stats(g, &st);
    assert_int_equal(st.rules_kept, 3); /* root, object, array */
    assert_true(st.call_edges > 0);
    assert_true(matches(g, "[{},[1,{1}]]"));
    tr_grammar_free(g);
    tr_grammar_vocab_free(v);
}

/* ---- hand-written grammars ---- */

static const char k_json[] =
    "# JSON, in the style of llama.cpp's json.gbnf (written for this test)\n"
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "    string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "array  ::=\n"
    "  \"[\" ws (\n"
    "    value\n"
    "    (\",\" ws value)*\n"
    "  )? \"]\" ws\n"
    "string ::=\n"
    "  \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "  )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]*)) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)? ws\n"
    "ws ::= ([ \\t\\n] ws)?\n";

static const char k_arith[] =
    "root ::= expr\n"
    "expr ::= term ((\"+\" | \"-\") term)*\n"
    "term ::= factor ((\"*\" | \"/\") factor)*\n"
    "factor ::= num | \"(\" ws expr ws \")\" | \"-\" factor\n"
    "num ::= [0-9]+ (\".\" [0-9]+)?\n"
    "ws ::= \" \"?\n";

static const char k_list[] =
    "root ::= item+\n"
    "item ::= \"- \" [^\\n]+ \"\\n\" (\"  \" item)*\n";

static const char k_c[] =
    "root ::= (decl ws)+\n"
    "decl ::= type ws ident \"(\" params? \")\" ws block\n"
    "type ::= \"int\" | \"void\" | \"char\" \"*\"?\n"
    "params ::= type ws ident (\",\" ws type ws ident)*\n"
    "block ::= \"{\" ws (stmt ws)* \"}\"\n"
    "stmt ::= \"return\" (ws expr)? \";\" | type ws ident (ws \"=\" ws expr)? \";\" "
    "| \"if\" ws \"(\" expr \")\" ws block (ws \"else\" ws block)? | block "
    "| expr \";\"\n"
    "expr ::= atom (ws [-+*/<>] ws atom)*\n"
    "atom ::= ident (\"(\" (expr (\",\" ws expr)*)? \")\")? | [0-9]+ | \"(\" expr \")\"\n"
    "ident ::= [a-z_] [a-z0-9_]*\n"
    "ws ::= [ \\n]*\n";

static const char k_chess[] =
    "root ::= \"1. \" move \" \" move (\" \" [1-9] [0-9]? \". \" move \" \" move)*\n"
    "move ::= (pawn | piece | castle) [+#]?\n"
    "pawn ::= [a-h] ([x] [a-h])? [1-8] (\"=\" [NBRQ])?\n"
    "piece ::= [NBRQK] [a-h]? [1-8]? \"x\"? [a-h] [1-8]\n"
    "castle ::= \"O-O\" \"-O\"?\n";

/* ambiguous: the matcher must follow several stacks */
static const char k_ambig[] =
    "root ::= s\n"
    "s ::= \"a\" s \"b\" | \"a\" s \"bb\" | t\n"
    "t ::= \"c\" t | \"c\" t t \"d\" | \"\"\n";

static const char k_dyck[] =
    "root ::= x*\n"
    "x ::= \"(\" x* \")\" | \"[\" x* \"]\" | \"{\" y \"}\"\n"
    "y ::= (\"\\u00e9\" | x)*\n";

typedef struct hw_case {
    const char *name, *text;
    const char *yes[8], *no[8];
} hw_case;

static const hw_case k_hand[] = {
    {"json", k_json,
     {"{}", "{\"a\": [1, -2.5e+3, true, null, {\"b\": \"\\u00e9\\n\"}]}\n",
      "{ \"k\" : { } }", "{\"\xc3\xa9\": []}", NULL},
     {"[]", "{\"a\"}", "{\"a\": 01}", "{\"a\": \"\x01\"}", "{\"a\": [1,]}", NULL}},
    {"arith", k_arith, {"1", "(1+2)*-3", "((4.5)/2)", "--1", NULL},
     {"1+", "(1", "1..2", "()", NULL}},
    {"list", k_list, {"- a\n", "- a\n  - b\n  - c\n- e\n", NULL},
     {"- \n", "  - a\n", "- a", NULL}},
    {"c", k_c,
     {"int main() { return 0; }", "void f(int a, char* b) { if (a < 1) { f(a - 1, b); } else { } }",
      NULL},
     {"int main() { return 0 }", "int 1() {}", NULL}},
    {"chess", k_chess, {"1. e4 e5 2. Nf3 Nc6 3. Bb5 a6", "1. O-O-O Qxd8#", NULL},
     {"1. e9 e5", "1. e4", NULL}},
    {"ambiguous", k_ambig, {"", "ab", "aabbb", "aacbbb", "ccccdd", "accdb", NULL},
     {"b", "aab", "cd d", NULL}},
    {"dyck", k_dyck, {"", "()[]", "{\xc3\xa9()[]\xc3\xa9}", "([{}])", NULL},
     {"(]", "{", "[\xc3\xa9]", NULL}},
};

/* The chart over the complete code points of s[0..len) (positions
 * 1..); returns the chart position, *done the bytes they take. */
static int chart_prefix(rf_chart *c, const uint8_t *s, size_t len, size_t *done) {
    bool v, a;
    rf_check(c, s, 0, &v, &a);
    int base = 1;
    *done = 0;
    while (*done < len) {
        uint32_t cp;
        int n = tr_utf8_decode(s + *done, len - *done, &cp);
        if (n == 0 || !rf_push(c, cp)) break;
        base++;
        *done += (size_t)n;
    }
    return base;
}

/* The matcher fed s byte by byte agrees with Earley on every prefix. */
static void check_string(const grammar *g, grammar_vocab *v, rf_chart *c,
                         const uint8_t *s, size_t len) {
    grammar_matcher *m;
    assert_int_equal(tr_grammar_matcher_new((grammar *)g, v, 0, &m), TR_OK);
    bool alive = true;
    rf_check(c, s, 0, &(bool){0}, &(bool){0});
    int base = 1;      /* chart positions of the complete code points */
    size_t done = 0;   /* bytes they take */
    for (size_t i = 0; i <= len && alive; i++) {
        bool viable, accept;
        rf_check_tail(c, base, s + done, i - done, &viable, &accept);
        uint32_t cp;
        if (viable && i > done && tr_utf8_decode(s + done, i - done, &cp) == (int)(i - done))
            base = c->n, done = i; /* keep the code point just completed */
        if (i > 0) {
            tr_status st = tr_grammar_matcher_accept_bytes(m, s + i - 1, 1);
            if (st == TR_ERR_LIMIT) {
                g_budget_hits++;
                break;
            }
            if ((st == TR_OK) != viable)
                fail_msg("prefix of %zu bytes of \"%.*s\": matcher %s, Earley %s", i,
                         (int)len, (const char *)s, tr_status_name(st),
                         viable ? "viable" : "dead");
            alive = viable;
        }
        if (alive) {
            if (tr_grammar_matcher_is_accepting(m) != accept && !over_budget(m))
                fail_msg("%s\n\"%.*s\" (%zu bytes): accepting %d, Earley %d", g_text,
                         (int)len, (const char *)s, i, !accept, accept);
            if (!over_budget(m)) assert_int_equal(tr_grammar_matches(g, s, i), accept);
        }
    }
    tr_grammar_matcher_free(m);
}

/* A vocabulary over the characters the test grammars use: each character,
 * the bytes of multi-byte ones alone and in pairs (split code points),
 * and random 2..4-character strings. */
static grammar_vocab *char_vocab(tg_rng *r, const char *const *chars, int n_chars,
                                 int n_random) {
    int cap = n_chars * 6 + n_random + 8, n = 0;
    char **t = calloc((size_t)cap, sizeof *t);
    for (int i = 0; i < n_chars; i++) {
        t[n++] = strdup(chars[i]);
        size_t l = strlen(chars[i]);
        for (size_t k = 0; l > 1 && k < l; k++) t[n++] = strndup(chars[i] + k, 1);
        if (l > 2) t[n++] = strndup(chars[i], 2), t[n++] = strndup(chars[i] + 1, l - 1);
    }
    for (int i = 0; i < n_random; i++) {
        char buf[64] = "";
        int k = 2 + (int)tg_below(r, 3);
        for (int j = 0; j < k; j++) strcat(buf, chars[tg_below(r, (uint32_t)n_chars)]);
        t[n++] = strdup(buf);
    }
    t[n++] = strdup("</s>"); /* EOG */
    t[n++] = strdup("<pad>"); /* special */
    grammar_vocab *v = tg_vocab_from_strings((const char *const *)t, n, 1, n - 2);
    for (int i = 0; i < n; i++) free(t[i]);
    free(t);
    assert_non_null(v);
    return v;
}

/* Random token walks: at each step the mask is exactly the tokens whose
 * bytes keep the text viable for Earley (EOG iff Earley accepts), and
 * token_allowed agrees; a random allowed token is then accepted, with a
 * rollback now and then. */
static void check_walks(grammar *g, grammar_vocab *v, rf_chart *c, tg_rng *r,
                        int n_walks, int steps) {
    size_t nw = tr_grammar_vocab_mask_words(v);
    uint64_t *mask = malloc(nw * sizeof *mask);
    int32_t nv = tr_grammar_vocab_n_vocab(v);
    grammar_matcher *m;
    assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
    for (int w = 0; w < n_walks; w++) {
        tr_grammar_matcher_reset(m);
        tg_str text = {0};
        tg_put(&text, "", 0);
        for (int step = 0; step < steps; step++) {
            tr_status fst = tr_grammar_matcher_fill_mask(m, mask, nw);
            if (fst == TR_ERR_LIMIT) {
                g_budget_hits++;
                break;
            }
            assert_int_equal(fst, TR_OK);
            /* the chart of the complete code points of the text so far */
            size_t done;
            int base = chart_prefix(c, (const uint8_t *)text.p, text.len, &done);
            for (int32_t id = 0; id < nv; id++) {
                size_t tl;
                const uint8_t *tb = tr_grammar_vocab_token_bytes(v, id, &tl);
                bool want;
                if (tr_grammar_vocab_is_eog(v, id)) {
                    bool viable;
                    rf_check_tail(c, base, (const uint8_t *)text.p + done,
                                  text.len - done, &viable, &want);
                } else if (tr_grammar_vocab_is_special(v, id) || tl == 0) {
                    want = false;
                } else {
                    uint8_t buf[256];
                    size_t pl = text.len - done;
                    memcpy(buf, text.p + done, pl);
                    memcpy(buf + pl, tb, tl);
                    bool acc;
                    rf_check_tail(c, base, buf, pl + tl, &want, &acc);
                }
                if (tg_bit(mask, id) != want)
                    fail_msg("%s\nafter \"%s\": token %d \"%.*s\" mask %d, Earley %d",
                             g_text, text.p, id, (int)tl, (const char *)tb, !want, want);
                if (tr_grammar_matcher_token_allowed(m, id) != want && !over_budget(m))
                    fail_msg("%s\nafter \"%s\": token %d \"%.*s\" token_allowed %d, Earley %d",
                             g_text, text.p, id, (int)tl, (const char *)tb, !want, want);
            }
            size_t cnt = tr_grammar_mask_count(mask, nw);
            if (cnt == 0) break;
            int32_t id = tr_grammar_mask_nth(mask, nw, tg_below(r, (uint32_t)cnt));
            tr_status ast = tr_grammar_matcher_accept_token(m, id);
            if (ast == TR_ERR_LIMIT) {
                g_budget_hits++;
                break;
            }
            assert_int_equal(ast, TR_OK);
            if (tr_grammar_vocab_is_eog(v, id)) break;
            size_t tl;
            const uint8_t *tb = tr_grammar_vocab_token_bytes(v, id, &tl);
            if (tg_below(r, 6) == 0) { /* roll back and take the same again */
                assert_int_equal(tr_grammar_matcher_rollback(m, 1), TR_OK);
                assert_int_equal(tr_grammar_matcher_accept_bytes(m, tb, tl), TR_OK);
            }
            if (tg_below(r, 8) == 0) { /* the same from a copy of the history */
                assert_int_equal(tr_grammar_matcher_rollback(m, 1), TR_OK);
                assert_int_equal(tr_grammar_matcher_accept_token(m, id), TR_OK);
            }
            tg_put(&text, tb, tl);
        }
        free(text.p);
    }
    tr_grammar_matcher_free(m);
    free(mask);
}

static const char *const k_chars[] = {
    "a", "b", "c", "d", "e", "x", "y", "0", "1", "2", "9", "-", "+", "*", "/", "(",
    ")", "[", "]", "{", "}", "\"", ":", ",", ".", " ", "\n", "\\", "u", "t", "r",
    "n", "l", "f", "s", "i", "O", "N", "=", "#", ";", "<", "_", "\xc3\xa9",
    "\xe4\xb8\xad", "\xf0\x9f\x98\x80"};

static void test_handwritten(void **state) {
    (void)state;
    tg_rng r = {0x1234567ULL};
    grammar_vocab *v = char_vocab(&r, k_chars, (int)TR_ARRAY_LEN(k_chars), 150);
    for (size_t i = 0; i < TR_ARRAY_LEN(k_hand); i++) {
        const hw_case *h = &k_hand[i];
        grammar *g = compile(h->text);
        g_text = h->text;
        rf_gram rg;
        rf_parse(&rg, h->text, strlen(h->text));
        rf_chart c;
        rf_chart_init(&c, &rg);
        for (int k = 0; h->yes[k]; k++) {
            if (!matches(g, h->yes[k])) fail_msg("%s: \"%s\" rejected", h->name, h->yes[k]);
            check_string(g, v, &c, (const uint8_t *)h->yes[k], strlen(h->yes[k]));
        }
        for (int k = 0; h->no[k]; k++) {
            if (matches(g, h->no[k])) fail_msg("%s: \"%s\" accepted", h->name, h->no[k]);
            check_string(g, v, &c, (const uint8_t *)h->no[k], strlen(h->no[k]));
        }
        check_walks(g, v, &c, &r, small_scale() ? 4 : 20, 24);
        rf_chart_free(&c);
        rf_free(&rg);
        tr_grammar_free(g);
    }
    tr_grammar_vocab_free(v);
}

/* ---- random grammars ---- */

static const char *const k_alpha[] = {"a", "b", "c", "\xc3\xa9", "\xe4\xb8\xad",
                                      "\xf0\x9f\x98\x80"};
static const char *const k_alpha_esc[] = {"\\x61", "b", "\\u0063", "\\u00e9",
                                          "\\U00004e2d", "\\U0001F600"};

static void gen_char(tg_rng *r, tg_str *s, bool esc_ok) {
    uint32_t k = tg_below(r, TR_ARRAY_LEN(k_alpha));
    tg_puts(s, esc_ok && tg_below(r, 4) == 0 ? k_alpha_esc[k] : k_alpha[k]);
}

static void gen_class(tg_rng *r, tg_str *s, bool regex) {
    tg_putc(s, '[');
    if (tg_below(r, 3) == 0) tg_putc(s, '^');
    int n = 1 + (int)tg_below(r, 2);
    for (int i = 0; i < n; i++) {
        if (tg_below(r, 3) == 0) {
            tg_puts(s, "a-");
            tg_puts(s, tg_below(r, 2) ? "c" : "\xc3\xa9");
        } else {
            gen_char(r, s, !regex); /* \U is EBNF only */
        }
    }
    tg_putc(s, ']');
}

/* counted repetitions long enough that the NFA builder copies one built
 * piece instead of building each copy (ebnf_nfa.c, CLONE_MIN_COPIES) */
static bool g_long_counts;

static void gen_quant(tg_rng *r, tg_str *s, bool regex) {
    /* {,n} is EBNF only (the regex dialect refuses it) */
    static const char *const q[] = {"*", "+", "?", "{0,2}", "{1,2}", "{2}", "{2,}", "{,2}"};
    static const char *const q_long[] = {"{0,9}", "{8,9}", "{9}", "{3,12}", "{9,}", "{,10}"};
    if (g_long_counts && tg_below(r, 2) == 0)
        tg_puts(s, q_long[tg_below(r, TR_ARRAY_LEN(q_long) - regex)]);
    else if (tg_below(r, 3) == 0)
        tg_puts(s, q[tg_below(r, TR_ARRAY_LEN(q) - regex)]);
}

static void gen_regex(tg_rng *r, tg_str *s, int depth) {
    int n = 1 + (int)tg_below(r, 3);
    for (int i = 0; i < n; i++) {
        uint32_t k = tg_below(r, depth < 2 ? 5 : 4);
        if (k <= 1) gen_char(r, s, false);
        else if (k == 2) gen_class(r, s, true);
        else if (k == 3) tg_putc(s, '.');
        else {
            tg_puts(s, tg_below(r, 2) ? "(" : "(?:");
            gen_regex(r, s, depth + 1);
            tg_putc(s, '|');
            gen_regex(r, s, depth + 1);
            tg_putc(s, ')');
        }
        gen_quant(r, s, true);
    }
}

static void gen_alts(tg_rng *r, tg_str *s, int depth, int n_rules);

static void gen_item(tg_rng *r, tg_str *s, int depth, int n_rules) {
    uint32_t k = tg_below(r, 100);
    if (k < 30) {
        tg_putc(s, '"');
        int n = 1 + (int)tg_below(r, 3);
        for (int i = 0; i < n; i++) gen_char(r, s, true);
        tg_putc(s, '"');
    } else if (k < 45) {
        gen_class(r, s, false);
    } else if (k < 48) {
        tg_putc(s, '.');
    } else if (k < 75) {
        uint32_t t = tg_below(r, (uint32_t)n_rules);
        char name[16];
        snprintf(name, sizeof name, t ? "r%u" : "root", t);
        tg_puts(s, name);
    } else if (k < 87 && depth < 2) {
        tg_putc(s, '(');
        gen_alts(r, s, depth + 1, n_rules);
        tg_putc(s, ')');
    } else if (k < 95) {
        tg_putc(s, '/');
        gen_regex(r, s, 0);
        tg_putc(s, '/');
    } else {
        tg_puts(s, "\"\"");
    }
    gen_quant(r, s, false);
}

static void gen_alts(tg_rng *r, tg_str *s, int depth, int n_rules) {
    int n = 1 + (int)tg_below(r, 3);
    for (int i = 0; i < n; i++) {
        if (i) tg_puts(s, depth == 0 && tg_below(r, 4) == 0 ? "\n  | " : " | ");
        int k = 1 + (int)tg_below(r, 3);
        for (int j = 0; j < k; j++) {
            if (j) tg_putc(s, ' ');
            gen_item(r, s, depth, n_rules);
        }
    }
}

/* Does the reference grammar reach a nonterminal from itself without
 * consuming input? */
static bool rf_left_recursive(const rf_gram *g) {
    int n = g->nnt;
    bool *reach = calloc((size_t)n * n, 1);
    for (int i = 0; i < g->np; i++) {
        if (!g->prod_ok[i]) continue;
        for (int k = 0; k < g->p[i].n; k++) {
            int x = g->syms[g->p[i].off + k];
            if (x < 0) break;
            reach[g->p[i].lhs * n + x] = true;
            if (!g->nullable[x]) break;
        }
    }
    for (int k = 0; k < n; k++) /* transitive closure */
        for (int i = 0; i < n; i++)
            if (reach[i * n + k])
                for (int j = 0; j < n; j++) reach[i * n + j] |= reach[k * n + j];
    bool any = false;
    for (int i = 0; i < n && !any; i++) any = reach[i * n + i];
    free(reach);
    return any;
}

static void random_string(tg_rng *r, tg_str *s) {
    static const char *const extra[] = {"d", "\xc3", "\xa9", "\xff", "\xe4\xb8"};
    int n = (int)tg_below(r, 10);
    s->len = 0;
    tg_put(s, "", 0);
    for (int i = 0; i < n; i++) {
        if (tg_below(r, 8) == 0)
            tg_puts(s, extra[tg_below(r, TR_ARRAY_LEN(extra))]);
        else
            gen_char(r, s, false);
    }
}

/* Random grammars compiled and checked against the Earley reference:
 * strings, and walks of `steps` tokens whose every mask is compared with
 * the chart's answer for every token. */
static void random_grammars(uint64_t seed, int n_grammars, int steps) {
    tg_rng r = {seed};
    grammar_vocab *v = char_vocab(&r, k_alpha, (int)TR_ARRAY_LEN(k_alpha), 120);
    int compiled = 0, left = 0, empty = 0, cfg = 0, limit = 0, cut = 0;
    for (int gi = 0; gi < n_grammars; gi++) {
        tg_str text = {0};
        int n_rules = 1 + (int)tg_below(&r, 4);
        for (int i = 0; i < n_rules; i++) {
            char name[32];
            snprintf(name, sizeof name, i ? "r%d ::= " : "root ::= ", i);
            tg_puts(&text, name);
            gen_alts(&r, &text, 0, n_rules);
            tg_putc(&text, '\n');
        }
        grammar *g = NULL;
        tr_diag d;
        g_text = text.p;
        tr_status st = tr_grammar_compile_ebnf(text.p, text.len, NULL, &g, &d);
        rf_gram rg;
        if (st == TR_ERR_LIMIT) { /* random regexes can blow a DFA up */
            limit++;
            free(text.p);
            continue;
        }
        if (st == TR_OK || st == TR_ERR_UNSUPPORTED || strstr(d.message, "matches no string"))
            rf_parse(&rg, text.p, text.len);
        else
            fail_msg("grammar %d:\n%s\nerror %s: %s", gi, text.p, tr_status_name(st),
                     d.message);
        if (st == TR_ERR_UNSUPPORTED) {
            if (!strstr(d.message, "left recursion") || !rf_left_recursive(&rg))
                fail_msg("grammar %d:\n%s\nrefused: %s", gi, text.p, d.message);
            left++;
        } else if (st != TR_OK) {
            if (rf_start_productive(&rg))
                fail_msg("grammar %d:\n%s\nsaid empty: %s", gi, text.p, d.message);
            empty++;
        } else {
            compiled++;
            int hits = g_budget_hits;
            assert_int_equal(tr_grammar_check(g), TR_OK);
            cfg += g->kind == GRAMMAR_KIND_CFG;
            rf_chart c;
            rf_chart_init(&c, &rg);
            tg_str s = {0};
            for (int k = 0; k < 30; k++) {
                random_string(&r, &s);
                check_string(g, v, &c, (const uint8_t *)s.p, s.len);
            }
            free(s.p);
            check_walks(g, v, &c, &r, 3, steps);
            assert_int_equal(tr_grammar_check(g), TR_OK); /* the states the walks made */
            cut += g_budget_hits > hits;
            rf_chart_free(&c);
            tr_grammar_free(g);
        }
        rf_free(&rg);
        free(text.p);
    }
    fprintf(stderr, "random grammars: %d compiled (%d with stacks), %d left-recursive, "
                    "%d empty, %d over a compile budget, %d with checks cut by "
                    "the stacks budget\n", compiled, cfg, left, empty, limit, cut);
    assert_true(limit < n_grammars / 20);
    assert_true(cut < n_grammars / 20);
    /* the generator's mix (about half compile at full scale); the
     * stream of draws depends on how many checks the stacks budget
     * cuts, so at small scale the share moves by a grammar or two */
    assert_true(compiled >= n_grammars / 3);
    assert_true(cfg > n_grammars / 8);
    tr_grammar_vocab_free(v);
}

static void test_random_grammars(void **state) {
    (void)state;
    g_long_counts = false;
    random_grammars(0xC0FFEEULL, small_scale() ? 60 : 400, 10);
}

/* Half the quantifiers count 8 or more copies: the copies made from one
 * built piece must accept what copies built one by one accept. */
static void test_random_grammars_long_counts(void **state) {
    (void)state;
    g_long_counts = true;
    random_grammars(0x10C0FFEEULL, small_scale() ? 40 : 60, small_scale() ? 16 : 24);
    g_long_counts = false;
}

/* ---- the real vocabulary ---- */

static char *read_data(const char *name, size_t *len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/grammar/ebnf/%s", TRELLIS_SOURCE_DIR, name);
    char *t = tg_read_file(path, len);
    if (!t) fail_msg("cannot read %s", path);
    return t;
}

/* Drives m through text with the longest allowed token that is a prefix
 * of what remains (a stand-in for tokenizing), calling check before each
 * token with the text consumed so far in *done; returns its length. */
typedef void (*step_check)(grammar_matcher *m, grammar_vocab *v, const uint64_t *mask,
                           const tg_str *done, void *ctx);

static size_t drive(grammar_matcher *m, grammar_vocab *v, const char *text, size_t len,
                    step_check check, void *ctx) {
    tg_str done = {0};
    tg_put(&done, "", 0);
    size_t nw = tr_grammar_vocab_mask_words(v), pos = 0;
    uint64_t *mask = malloc(nw * sizeof *mask);
    int32_t nv = tr_grammar_vocab_n_vocab(v);
    while (pos < len) {
        assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
        if (check) check(m, v, mask, &done, ctx);
        int32_t best = -1;
        size_t best_len = 0;
        for (int32_t id = 0; id < nv; id++) {
            size_t tl;
            const uint8_t *tb = tr_grammar_vocab_token_bytes(v, id, &tl);
            if (tl > best_len && tl <= len - pos && memcmp(tb, text + pos, tl) == 0 &&
                tg_bit(mask, id))
                best = id, best_len = tl;
        }
        if (best < 0) break;
        assert_int_equal(tr_grammar_matcher_accept_token(m, best), TR_OK);
        tg_put(&done, text + pos, best_len);
        pos += best_len;
    }
    free(mask);
    free(done.p);
    return pos;
}

/* Every token of the mask against token_allowed (a separate path: the
 * token's bytes simulated on its own), and against Earley on a sample. */
typedef struct vocab_check {
    rf_chart *c;
    tg_rng r;
    int steps, earley_every;
} vocab_check;

static void check_all_tokens(grammar_matcher *m, grammar_vocab *v, const uint64_t *mask,
                             const tg_str *text, void *ctx) {
    vocab_check *vc = ctx;
    int32_t nv = tr_grammar_vocab_n_vocab(v);
    for (int32_t id = 0; id < nv; id++)
        if (tg_bit(mask, id) != tr_grammar_matcher_token_allowed(m, id)) {
            size_t tl;
            const uint8_t *tb = tr_grammar_vocab_token_bytes(v, id, &tl);
            fail_msg("after \"%s\": token %d \"%.*s\": mask %d, token_allowed %d",
                     text->p, id, (int)tl, (const char *)tb,
                     tg_bit(mask, id), !tg_bit(mask, id));
        }
    if (vc->c && vc->steps++ % vc->earley_every == 0) {
        size_t done;
        int base = chart_prefix(vc->c, (const uint8_t *)text->p, text->len, &done);
        for (int k = 0; k < 400; k++) {
            int32_t id = (int32_t)tg_below(&vc->r, (uint32_t)nv);
            size_t tl;
            const uint8_t *tb = tr_grammar_vocab_token_bytes(v, id, &tl);
            if (tr_grammar_vocab_is_special(v, id) || tl == 0 || tl > 200) continue;
            uint8_t buf[512];
            size_t pl = text->len - done;
            memcpy(buf, text->p + done, pl);
            memcpy(buf + pl, tb, tl);
            bool viable, acc;
            rf_check_tail(vc->c, base, buf, pl + tl, &viable, &acc);
            if (viable != tg_bit(mask, id))
                fail_msg("after \"%s\": token %d \"%.*s\": mask %d, Earley %d", text->p,
                         id, (int)tl, (const char *)tb, !viable, viable);
        }
    }
}

/* Random tokens (uniform among the allowed ones, no EOG), each mask
 * checked as above. */
static void check_walk_vocab(grammar_matcher *m, grammar_vocab *v, vocab_check *vc,
                             int steps) {
    size_t nw = tr_grammar_vocab_mask_words(v);
    uint64_t *mask = malloc(nw * sizeof *mask);
    tg_str text = {0};
    tg_put(&text, "", 0);
    for (int i = 0; i < steps; i++) {
        assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
        check_all_tokens(m, v, mask, &text, vc);
        for (int32_t id = 0; id < tr_grammar_vocab_n_vocab(v); id++)
            if (tr_grammar_vocab_is_eog(v, id)) mask[id >> 6] &= ~(1ull << (id & 63));
        size_t cnt = tr_grammar_mask_count(mask, nw);
        if (cnt == 0) break;
        int32_t id = tr_grammar_mask_nth(mask, nw, tg_below(&vc->r, (uint32_t)cnt));
        assert_int_equal(tr_grammar_matcher_accept_token(m, id), TR_OK);
        size_t tl;
        const uint8_t *tb = tr_grammar_vocab_token_bytes(v, id, &tl);
        tg_put(&text, tb, tl);
    }
    free(text.p);
    free(mask);
}

static void test_smollm2(void **state) {
    (void)state;
    if (!model_present())
        fail_msg("the default model is needed for its vocabulary (scripts/setup.sh "
                 "fetches it)");
    grammar_vocab *v = tg_vocab_smollm2();
    assert_non_null(v);
    static const char *const names[] = {"json", "schema_tree", "arithmetic", "list"};
    for (size_t gi = 0; gi < TR_ARRAY_LEN(names); gi++) {
        char fn[64];
        size_t len, dl;
        snprintf(fn, sizeof fn, "%s.gbnf", names[gi]);
        char *text = read_data(fn, &len);
        snprintf(fn, sizeof fn, "%s.txt", names[gi]);
        char *docs = read_data(fn, &dl);
        g_text = text;
        grammar *g = compile(text);
        rf_gram rg;
        rf_parse(&rg, text, len);
        rf_chart c;
        rf_chart_init(&c, &rg);
        grammar_matcher *m;
        assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
        /* the first document of the samples, driven token by token */
        char *sep = strstr(docs, "\n%%\n");
        size_t n = sep ? (size_t)(sep - docs) + 1 : strlen(docs);
        if (small_scale() && n > 60) n = 60;
        vocab_check vc = {.c = &c, .r = {0xABCDEF + gi}, .earley_every = 8};
        size_t pos = drive(m, v, docs, n, check_all_tokens, &vc);
        if (pos + 1 < n) /* all of it (its final newline aside) */
            fail_msg("%s: stuck after %zu of %zu bytes", names[gi], pos, n);
        /* and a random walk */
        tr_grammar_matcher_reset(m);
        check_walk_vocab(m, v, &vc, small_scale() ? 8 : 40);
        tr_grammar_matcher_free(m);
        rf_chart_free(&c);
        rf_free(&rg);
        tr_grammar_free(g);
        free(text);
        free(docs);
    }
    tr_grammar_vocab_free(v);
}

/* JSON Schema grammars as MaskBench runs them (flexible whitespace: runs
 * of blanks before every key and value; fixed keys, enums, patterns,
 * nesting) on SmolLM2: every mask of random walks against each token
 * checked on its own, from fresh matchers on one grammar (the first walk
 * computes the memo's entries, sparse and dense ones, the later ones read
 * them), and the same walks with the memo off (every entry computed and
 * dropped) give the same masks. */
static uint64_t walk_hash(grammar *g, grammar_vocab *v, uint64_t seed, int steps);

static const char *const k_mb_schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0},\"tags\":{\"type\":\"array\","
    "\"items\":{\"type\":\"string\",\"maxLength\":8}}},\"required\":[\"name\"]}",
    "{\"type\":\"object\",\"properties\":{\"kind\":{\"enum\":[\"apiVersion\",\"Pod\","
    "\"Service\"]},\"spec\":{\"type\":\"object\",\"properties\":{\"replicas\":{\"type\":"
    "\"number\"},\"ok\":{\"type\":\"boolean\"},\"note\":{\"type\":[\"string\",\"null\"]}}}},"
    "\"required\":[\"kind\",\"spec\"],\"additionalProperties\":false}",
    "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":"
    "\"string\",\"pattern\":\"^[a-z]+[0-9]*$\"},\"children\":{\"type\":\"array\","
    "\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"value\"]}},"
    "\"$ref\":\"#/$defs/node\"}",
    "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
};

static void test_schema_masks(void **state) {
    (void)state;
    if (!model_present())
        fail_msg("the default model is needed for its vocabulary (scripts/setup.sh "
                 "fetches it)");
    grammar_vocab *v = tg_vocab_smollm2();
    assert_non_null(v);
    assert_int_equal(tr_grammar_vocab_check(v), TR_OK);
    int steps = small_scale() ? 12 : 30, walks = small_scale() ? 2 : 3;
    for (size_t si = 0; si < TR_ARRAY_LEN(k_mb_schemas); si++) {
        const char *sc = k_mb_schemas[si];
        grammar_json_options jo;
        tr_grammar_json_options_default(&jo);
        jo.numbers = GRAMMAR_JSON_NUM_FULL; /* MaskBench's setting */
        grammar_limits lim;
        tr_grammar_limits_default(&lim);
        grammar *g = NULL, *off = NULL;
        tr_diag d = {0};
        tr_status st = tr_grammar_compile_json_schema(sc, strlen(sc), &jo, &lim, &g, &d);
        if (st) fail_msg("schema %zu: %s", si, d.message);
        lim.mask_cache_bytes = 0;
        assert_int_equal(tr_grammar_compile_json_schema(sc, strlen(sc), &jo, &lim, &off, &d),
                         TR_OK);
        for (int k = 0; k < walks; k++) {
            grammar_matcher *m;
            assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
            vocab_check vc = {.c = NULL, .r = {0x5C4E + si * 31 + (uint64_t)k}};
            check_walk_vocab(m, v, &vc, steps);
            tr_grammar_matcher_free(m);
            uint64_t seed = 0xA11CE + si * 7 + (uint64_t)k;
            if (walk_hash(g, v, seed, 4 * steps) != walk_hash(off, v, seed, 4 * steps))
                fail_msg("schema %zu walk %d: masks differ with the memo off", si, k);
        }
        grammar_memo_stats ms;
        tr_grammar_get_memo_stats(g, &ms);
        assert_true(ms.masks > 0);
        tr_grammar_get_memo_stats(off, &ms);
        assert_true(ms.masks == 0);
        tr_grammar_free(g);
        tr_grammar_free(off);
    }
    tr_grammar_vocab_free(v);
}

/* ---- the matcher API on stacks ---- */

static grammar_vocab *byte_vocab(void) {
    /* every byte, a few longer tokens, EOG and a special token */
    static char store[256][2];
    const char *toks[256 + 8];
    int n = 0;
    for (int b = 1; b < 256; b++) {
        store[b][0] = (char)b;
        toks[n++] = store[b];
    }
    toks[n++] = "{\"k\":";
    toks[n++] = ",\"t\":true}";
    toks[n++] = "}]";
    toks[n++] = "1,";
    toks[n++] = "</s>";
    toks[n++] = "<pad>";
    grammar_vocab *v = tg_vocab_from_strings(toks, n, 1, n - 2);
    assert_non_null(v);
    return v;
}

static void mask_of(grammar_matcher *m, uint64_t *mask, size_t nw) {
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_OK);
}

static void test_api_stacks(void **state) {
    (void)state;
    grammar_vocab *v = byte_vocab();
    size_t nw = tr_grammar_vocab_mask_words(v);
    int32_t eog = tr_grammar_vocab_n_vocab(v) - 2;
    uint64_t *a = malloc(nw * 8), *b = malloc(nw * 8);
    /* forced bytes through rule boundaries: keys, closing brackets */
    grammar *g = compile("root ::= obj\nobj ::= \"{\\\"k\\\":\" (obj | \"1\" | \"[\" obj \"]\") "
                         "\",\\\"t\\\":true}\"\n");
    assert_int_equal(g->kind, GRAMMAR_KIND_CFG);
    grammar_matcher *m;
    assert_int_equal(tr_grammar_matcher_new(g, v, 4, &m), TR_OK);
    uint8_t buf[64];
    size_t n;
    assert_int_equal(tr_grammar_matcher_forced_bytes(m, buf, sizeof buf, &n), TR_OK);
    assert_int_equal(n, 5);
    assert_memory_equal(buf, "{\"k\":", 5);
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, "{\"k\":[{\"k\":1", 12), TR_OK);
    assert_int_equal(tr_grammar_matcher_forced_bytes(m, buf, sizeof buf, &n), TR_OK);
    /* the inner object's end, the array's, then the outer object's */
    assert_int_equal(n, 21);
    assert_memory_equal(buf, ",\"t\":true}],\"t\":true}", 21);
    assert_int_equal(tr_grammar_matcher_forced_bytes(m, buf, 3, &n), TR_OK);
    assert_int_equal(n, 3); /* bounded by cap */
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, ",\"t\":true}],\"t\":true}", 21), TR_OK);
    assert_true(tr_grammar_matcher_is_accepting(m));
    assert_false(tr_grammar_matcher_can_continue(m));
    assert_int_equal(tr_grammar_matcher_forced_bytes(m, buf, sizeof buf, &n), TR_OK);
    assert_int_equal(n, 0); /* accepting: nothing is forced */
    /* EOG only when accepting; then terminated */
    mask_of(m, a, nw);
    assert_true(tg_bit(a, eog));
    assert_int_equal(tr_grammar_matcher_accept_token(m, eog), TR_OK);
    assert_true(tr_grammar_matcher_is_terminated(m));
    mask_of(m, a, nw);
    assert_int_equal(tr_grammar_mask_count(a, nw), 0);
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, "x", 1), TR_ERR_STATE);
    assert_int_equal(tr_grammar_matcher_rollback(m, 1), TR_OK);
    assert_false(tr_grammar_matcher_is_terminated(m));
    assert_true(tr_grammar_matcher_is_accepting(m));
    /* the ring holds 4 entries */
    assert_int_equal(tr_grammar_matcher_history_len(m), 2);
    tr_grammar_matcher_reset(m);
    assert_int_equal(tr_grammar_matcher_history_len(m), 0);
    assert_int_equal(tr_grammar_matcher_accept_token(m, eog), TR_ERR_STATE);
    assert_int_equal(tr_grammar_matcher_accept_token(m, -1), TR_ERR_INVALID_ARG);
    assert_int_equal(tr_grammar_matcher_accept_token(m, eog + 1), TR_ERR_STATE); /* special */
    /* all or nothing: a valid prefix then a bad byte leaves it unchanged */
    mask_of(m, a, nw);
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, "{\"k\":[{\"k\":1,x", 14),
                     TR_ERR_STATE);
    mask_of(m, b, nw);
    assert_memory_equal(a, b, nw * 8);
    assert_int_equal(tr_grammar_matcher_history_len(m), 0);
    /* rollback against a fresh matcher fed the same prefix */
    static const char *const steps[] = {"{\"k\":", "[", "{\"k\":", "1", ",\"t\":true}",
                                        "]", ",\"t\":true}"};
    for (size_t i = 0; i < TR_ARRAY_LEN(steps); i++)
        assert_int_equal(tr_grammar_matcher_accept_bytes(m, steps[i], strlen(steps[i])), TR_OK);
    assert_int_equal(tr_grammar_matcher_history_len(m), 4);
    assert_int_equal(tr_grammar_matcher_rollback(m, 5), TR_ERR_STATE);
    assert_int_equal(tr_grammar_matcher_rollback(m, 3), TR_OK);
    grammar_matcher *f;
    assert_int_equal(tr_grammar_matcher_new(g, v, 0, &f), TR_OK);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(tr_grammar_matcher_accept_bytes(f, steps[i], strlen(steps[i])), TR_OK);
    mask_of(m, a, nw);
    mask_of(f, b, nw);
    assert_memory_equal(a, b, nw * 8);
    tr_grammar_matcher_free(f);
    tr_grammar_matcher_free(m);
    tr_grammar_free(g);

    /* deep nesting: 20,000 open brackets, then the way out; the frame
     * collector runs meanwhile (rollback history of 256 sets) */
    g = compile("root ::= \"[\" root \"]\" | \"x\"\n");
    assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
    int depth = small_scale() ? 3000 : 20000;
    for (int i = 0; i < depth; i++) assert_int_equal(tr_grammar_matcher_accept_bytes(m, "[", 1), TR_OK);
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, "x", 1), TR_OK);
    assert_int_equal(tr_grammar_matcher_rollback(m, 200), TR_OK);
    for (int i = 0; i < 199; i++) assert_int_equal(tr_grammar_matcher_accept_bytes(m, "[", 1), TR_OK);
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, "x", 1), TR_OK);
    for (int i = 0; i < depth; i++) {
        assert_false(tr_grammar_matcher_is_accepting(m));
        assert_int_equal(tr_grammar_matcher_accept_bytes(m, "]", 1), TR_OK);
    }
    assert_true(tr_grammar_matcher_is_accepting(m));
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, "]", 1), TR_ERR_STATE);
    assert_true(m->cfg->per.n < (uint32_t)depth + 1000); /* collected */
    tr_grammar_matcher_free(m);
    tr_grammar_free(g);

    /* right recursion is a tail call: no frame per item */
    g = compile("root ::= item root | \"\"\nitem ::= \"(\" root \")\" | \"x\"\n");
    assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
    for (int i = 0; i < 50000; i++)
        assert_int_equal(tr_grammar_matcher_accept_bytes(m, "x", 1), TR_OK);
    assert_true(tr_grammar_matcher_is_accepting(m));
    assert_true(m->cfg->per.n < 16);
    tr_grammar_matcher_free(m);
    tr_grammar_free(g);
    free(a), free(b);
    tr_grammar_vocab_free(v);
}

/* An exponentially ambiguous grammar: each 'a' may open either rule, so
 * the stacks double; the budget stops it cleanly. */
static void test_stacks_budget(void **state) {
    (void)state;
    grammar_vocab *v = byte_vocab();
    size_t nw = tr_grammar_vocab_mask_words(v);
    grammar_limits lim;
    tr_grammar_limits_default(&lim);
    lim.max_stacks = 64;
    const char *t = "root ::= s1\ns1 ::= \"a\" s1 \"x\" | \"a\" s2 \"x\" | \"\"\n"
                    "s2 ::= \"a\" s1 \"y\" | \"a\" s2 \"y\" | \"\"\n";
    grammar *g = NULL;
    tr_diag d;
    if (tr_grammar_compile_ebnf(t, strlen(t), &lim, &g, &d)) fail_msg("%s", d.message);
    grammar_matcher *m;
    assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
    uint64_t *a = malloc(nw * 8), *b = malloc(nw * 8);
    tr_status st = TR_OK;
    int i;
    for (i = 0; i < 40 && st == TR_OK; i++) {
        mask_of(m, a, nw);
        st = tr_grammar_matcher_accept_bytes(m, "a", 1);
    }
    assert_int_equal(st, TR_ERR_LIMIT);
    assert_true(i > 4 && i < 12); /* 2^i stacks pass 64 between 6 and 7 */
    assert_int_equal(tr_grammar_matcher_history_len(m), (uint32_t)i - 1);
    mask_of(m, b, nw); /* unchanged */
    assert_memory_equal(a, b, nw * 8);
    assert_int_equal(tr_grammar_matcher_rollback(m, (uint32_t)i - 1), TR_OK);
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, "aax", 3), TR_OK);
    tr_grammar_matcher_free(m);
    tr_grammar_free(g);
    free(a), free(b);
    tr_grammar_vocab_free(v);
}

typedef struct budget_case {
    const char *what; /* in the message */
    void (*set)(grammar_limits *);
    const char *text;
    const char *where; /* NULL, or what the message must also say */
} budget_case;

static void set_text(grammar_limits *l) { l->max_grammar_bytes = 16; }
static void set_nfa(grammar_limits *l) { l->max_nfa_states = 50; }
static void set_dfa(grammar_limits *l) { l->max_lazy_dfa_states = 20; }
static void set_repeat(grammar_limits *l) { l->max_repeat = 10; }
static void set_nesting(grammar_limits *l) { l->max_nesting = 3; }
static void set_bytes(grammar_limits *l) { l->max_compile_bytes = 20000; }
static void set_time(grammar_limits *l) { l->max_compile_us = 1; }

static void test_budgets(void **state) {
    (void)state;
    /* a grammar whose DFA blows up: the n-th character from the end */
    const char *big = "root ::= [ab]* \"a\" [ab]{12} x\nx ::= \"(\" x \")\" | \"\"\n";
    /* compiling is linear in the text: time needs a long one */
    tg_str huge = {0};
    tg_puts(&huge, "root ::= \"w\"");
    for (int i = 0; i < 20000; i++) {
        char alt[32];
        snprintf(alt, sizeof alt, " | \"w%d\"", i);
        tg_puts(&huge, alt);
    }
    tg_putc(&huge, '\n');
    const budget_case cases[] = {
        {"max_grammar_bytes", set_text, "root ::= \"a long enough grammar\"\n", NULL},
        {"max_nfa_states", set_nfa, "root ::= \"abcdefghijklmnopqrstuvwxyz\"{3}\n", NULL},
        /* a size budget names the rule whose automaton passed it */
        {"max_nfa_states", set_nfa,
         "root ::= \"x\" item\nitem ::= \"[\" item \"]\" | \"abcdefghijklmnopqrstuvwxyz\"{3}\n",
         "while building the automaton of rule item)"},
        {"max_repeat", set_repeat, "root ::= \"a\"{11}\n", NULL},
        {"max_nesting", set_nesting, "root ::= ((((\"a\"))))\n", NULL},
        {"max_compile_bytes", set_bytes, big, NULL},
        {"max_compile_us", set_time, huge.p, NULL},
    };
    for (size_t i = 0; i < TR_ARRAY_LEN(cases); i++) {
        grammar_limits lim;
        tr_grammar_limits_default(&lim);
        cases[i].set(&lim);
        grammar *g = NULL;
        tr_diag d;
        tr_status st = tr_grammar_compile_ebnf(cases[i].text, strlen(cases[i].text), &lim, &g, &d);
        if (st != TR_ERR_LIMIT || !strstr(d.message, cases[i].what) ||
            (cases[i].where && !strstr(d.message, cases[i].where)))
            fail_msg("%s: %s \"%s\"", cases[i].what, tr_status_name(st), d.message);
        assert_null(g);
    }
    free(huge.p);
    /* DFA states are made as matchers reach them: past max_lazy_dfa_states
     * the call that needs one fails with TR_ERR_LIMIT (matcher unchanged),
     * and so does every later call on that grammar, which says it is
     * exhausted; the states made count in its memo stats */
    grammar_limits lim;
    tr_grammar_limits_default(&lim);
    set_dfa(&lim);
    grammar *g = NULL;
    tr_diag d;
    assert_int_equal(tr_grammar_compile_ebnf(big, strlen(big), &lim, &g, &d), TR_OK);
    grammar_vocab *v = byte_vocab();
    size_t nw = tr_grammar_vocab_mask_words(v);
    uint64_t *mask = malloc(nw * 8);
    grammar_matcher *m;
    assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
    grammar_memo_stats ms0, ms1;
    tr_grammar_get_memo_stats(g, &ms0);
    assert_false(tr_grammar_exhausted(g));
    tr_status st = TR_OK;
    int i;
    for (i = 0; i < 64 && st == TR_OK; i++) st = tr_grammar_matcher_accept_bytes(m, i % 3 ? "a" : "b", 1);
    assert_int_equal(st, TR_ERR_LIMIT);
    assert_true(tr_grammar_exhausted(g));
    tr_grammar_get_memo_stats(g, &ms1);
    assert_true(ms1.bytes > ms0.bytes);
    assert_int_equal(tr_grammar_matcher_history_len(m), (uint32_t)i - 1);
    assert_int_equal(tr_grammar_matcher_fill_mask(m, mask, nw), TR_ERR_LIMIT);
    assert_int_equal(tr_grammar_matcher_accept_bytes(m, "a", 1), TR_ERR_LIMIT);
    assert_false(tr_grammar_matcher_token_allowed(m, 'a' - 1));
    assert_false(tr_grammar_matches(g, "ab", 2));
    assert_int_equal(tr_grammar_check(g), TR_OK);
    tr_grammar_matcher_free(m);
    tr_grammar_free(g);
    free(mask);
    tr_grammar_vocab_free(v);
    /* within the default budgets the same blow-up compiles and runs */
    g = compile(big);
    assert_true(tr_grammar_matches(g, "babbbbbbbbbbbb()", 16));
    assert_false(tr_grammar_exhausted(g));
    assert_false(tr_grammar_matches(g, "bbbbbbbbbbbbbb()", 16));
    tr_grammar_free(g);
}

/* Masks along random walks on a JSON grammar: with the memo off, tiny
 * (past the budget entries are recomputed) and default, single-thread
 * and from 4 threads sharing one grammar, all identical. */
typedef struct walk_job {
    grammar *g;
    grammar_vocab *v;
    uint64_t seed;
    int steps;
    uint64_t hash; /* of every mask */
} walk_job;

static uint64_t hash_words(uint64_t h, const uint64_t *w, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ w[i]) * 0x100000001b3ULL;
    return h;
}

static void *run_walk(void *arg) {
    walk_job *j = arg;
    size_t nw = tr_grammar_vocab_mask_words(j->v);
    uint64_t *mask = malloc(nw * 8);
    grammar_matcher *m;
    if (tr_grammar_matcher_new(j->g, j->v, 0, &m) != TR_OK) abort();
    tg_rng r = {j->seed};
    j->hash = 0xcbf29ce484222325ULL;
    for (int i = 0; i < j->steps; i++) {
        if (tr_grammar_matcher_fill_mask(m, mask, nw) != TR_OK) abort();
        j->hash = hash_words(j->hash, mask, nw);
        size_t cnt = tr_grammar_mask_count(mask, nw);
        int32_t id = tr_grammar_mask_nth(mask, nw, tg_below(&r, (uint32_t)cnt));
        if (tr_grammar_vocab_is_eog(j->v, id)) {
            tr_grammar_matcher_reset(m);
            continue;
        }
        if (tr_grammar_matcher_accept_token(m, id) != TR_OK) abort();
    }
    tr_grammar_matcher_free(m);
    free(mask);
    return NULL;
}

static void test_memo_threads(void **state) {
    (void)state;
    tg_rng r = {77};
    grammar_vocab *v = char_vocab(&r, k_chars, (int)TR_ARRAY_LEN(k_chars), 2000);
    size_t len;
    char *text = read_data("json.gbnf", &len);
    uint64_t budgets[] = {0, 20000, 64u << 20};
    uint64_t want = 0;
    int steps = small_scale() ? 200 : 2000;
    for (size_t bi = 0; bi < TR_ARRAY_LEN(budgets); bi++) {
        grammar_limits lim;
        tr_grammar_limits_default(&lim);
        lim.mask_cache_bytes = budgets[bi];
        grammar *g = NULL;
        assert_int_equal(tr_grammar_compile_ebnf(text, len, &lim, &g, NULL), TR_OK);
        walk_job j = {g, v, 99, steps, 0};
        run_walk(&j);
        if (bi == 0) want = j.hash;
        assert_true(j.hash == want);
        if (budgets[bi] == 20000) {
            /* a second walk on the same grammar sees the same masks */
            run_walk(&j);
            assert_true(j.hash == want);
        }
        tr_grammar_free(g);
    }
    /* 4 threads on one grammar with a cold memo */
    grammar *g = NULL;
    assert_int_equal(tr_grammar_compile_ebnf(text, len, NULL, &g, NULL), TR_OK);
    pthread_t th[4];
    walk_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (walk_job){g, v, 99, steps, 0};
        assert_int_equal(pthread_create(&th[i], NULL, run_walk, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_true(jobs[i].hash == want);
    }
    tr_grammar_free(g);
    free(text);
    tr_grammar_vocab_free(v);
}

/* Regions (cfg_mask.c): the entries of looping lexer states, built from
 * the vocabulary's shared region cache plus per-grammar exit walks, equal
 * the plain walk's, mask for mask, on several grammars sharing one
 * vocabulary (so later grammars hit regions made by earlier ones), and
 * 4 threads filling a fresh vocabulary's cache at once agree. */
static uint64_t walk_hash(grammar *g, grammar_vocab *v, uint64_t seed, int steps) {
    size_t nw = tr_grammar_vocab_mask_words(v);
    uint64_t *mask = malloc(nw * 8), h = 0xcbf29ce484222325ULL;
    grammar_matcher *m;
    assert_int_equal(tr_grammar_matcher_new(g, v, 0, &m), TR_OK);
    tg_rng r = {seed};
    for (int i = 0; i < steps; i++) {
        tr_status st = tr_grammar_matcher_fill_mask(m, mask, nw);
        h = hash_words(h ^ (uint64_t)(st + 1000), mask, st ? 0 : nw);
        size_t cnt = st ? 0 : tr_grammar_mask_count(mask, nw);
        if (cnt == 0) break; /* a budget (C's stacks): same on both sides */
        int32_t id = tr_grammar_mask_nth(mask, nw, tg_below(&r, (uint32_t)cnt));
        if (tr_grammar_vocab_is_eog(v, id)) {
            tr_grammar_matcher_reset(m);
            continue;
        }
        assert_int_equal(tr_grammar_matcher_accept_token(m, id), TR_OK);
    }
    tr_grammar_matcher_free(m);
    free(mask);
    return h;
}

static void test_regions(void **state) {
    (void)state;
    static const char *const names[] = {"json.gbnf", "schema_tree.gbnf", "schema_flat.gbnf",
                                        "list.gbnf", "c.gbnf"};
    int steps = small_scale() ? 100 : 600;
    for (int pass = 0; pass < 2; pass++) {
        tg_rng r = {0x5EED + (uint64_t)pass};
        grammar_vocab *v = pass == 0 ? char_vocab(&r, k_chars, (int)TR_ARRAY_LEN(k_chars), 3000)
                                     : (model_present() ? tg_vocab_smollm2() : NULL);
        if (!v) continue;
        for (size_t gi = 0; gi < TR_ARRAY_LEN(names); gi++) {
            size_t len;
            char *text = read_data(names[gi], &len);
            grammar *a = NULL, *b = NULL;
            assert_int_equal(tr_grammar_compile_ebnf(text, len, NULL, &a, NULL), TR_OK);
            assert_int_equal(tr_grammar_compile_ebnf(text, len, NULL, &b, NULL), TR_OK);
            for (uint64_t seed = 1; seed <= 3; seed++) {
                tr_cfg_regions_off = true;
                uint64_t want = walk_hash(a, v, seed * 7919 + gi, steps);
                tr_cfg_regions_off = false;
                uint64_t got = walk_hash(b, v, seed * 7919 + gi, steps);
                if (got != want) fail_msg("%s seed %d: masks differ with regions", names[gi], (int)seed);
            }
            tr_grammar_free(a);
            tr_grammar_free(b);
            free(text);
        }
        tr_grammar_vocab_free(v);
    }
    /* a fresh vocabulary's cache filled by 4 threads on 4 grammars */
    tg_rng r = {0xC0FFEE};
    grammar_vocab *v = char_vocab(&r, k_chars, (int)TR_ARRAY_LEN(k_chars), 3000);
    size_t len;
    char *text = read_data("json.gbnf", &len);
    grammar *g[4];
    tr_cfg_regions_off = true;
    uint64_t want;
    {
        grammar *ref = NULL;
        assert_int_equal(tr_grammar_compile_ebnf(text, len, NULL, &ref, NULL), TR_OK);
        walk_job j = {ref, v, 99, steps, 0};
        run_walk(&j);
        want = j.hash;
        tr_grammar_free(ref);
    }
    tr_cfg_regions_off = false;
    pthread_t th[4];
    walk_job jobs[4];
    for (int i = 0; i < 4; i++) {
        assert_int_equal(tr_grammar_compile_ebnf(text, len, NULL, &g[i], NULL), TR_OK);
        jobs[i] = (walk_job){g[i], v, 99, steps, 0};
    }
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, run_walk, &jobs[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_true(jobs[i].hash == want);
        tr_grammar_free(g[i]);
    }
    free(text);
    tr_grammar_vocab_free(v);
}

/* ---- expansion: by ranges of columns against per column ---- */

/* Expands grammar g's states in order of creation until none is left or
 * cap are made; returns how many there are. */
static uint32_t expand_all(grammar *g, uint32_t cap) {
    gcfg *c = g->cfg;
    uint32_t s = 0;
    for (; s < tr_cfg_n_states(c) && s < cap; s++) gl_ready(c, s);
    return s;
}

/* Whether states s of a and b (made the same way) have equal rows,
 * calls and facts. */
static bool same_state(gcfg *a, gcfg *b, uint32_t s) {
    gl_chunk *x = gl_ready(a, s), *y = gl_ready(b, s);
    uint32_t i = s % GL_CH, nc = a->n_cls;
    if (memcmp(x->rows + (size_t)i * nc, y->rows + (size_t)i * nc, nc * sizeof(uint32_t)) ||
        x->flags[i] != y->flags[i] || x->only[i] != y->only[i] || x->tail[i] != y->tail[i] ||
        x->accept[i] != y->accept[i] || x->ncall[i] != y->ncall[i] ||
        memcmp(x->aloop[i], y->aloop[i], sizeof x->aloop[i]))
        return false;
    return x->ncall[i] == 0 || !memcmp(x->calls[i], y->calls[i], x->ncall[i] * sizeof(gl_call));
}

/* Expansion computes a state's targets per range of columns when its
 * subset has few edges, per column otherwise (cfg_dfa.c): both ways must
 * make the same automaton, state by state, and the same masks. The
 * generated grammar's start has one edge per alternative (48 > the range
 * way's limit), its words share letters (ranges that overlap). */
static void test_expand_ways(void **state) {
    (void)state;
    static const char *const names[] = {"json.gbnf", "schema_tree.gbnf", "schema_flat.gbnf",
                                        "list.gbnf", "c.gbnf", NULL};
    tg_str gen = {0};
    tg_puts(&gen, "root ::= (");
    for (int i = 0; i < 48; i++) {
        char alt[64];
        snprintf(alt, sizeof alt, "%s\"%c%c%s\" x", i ? " | " : "", 'a' + i % 26,
                 'a' + (i * 7) % 26, i % 3 ? "q" : "[a-f]z");
        tg_puts(&gen, alt);
    }
    tg_puts(&gen, ")+\nx ::= [0-9]* | \"(\" root \")\" | [^a-z()]\n");
    tg_rng r = {0xE4A9D};
    grammar_vocab *v = char_vocab(&r, k_chars, (int)TR_ARRAY_LEN(k_chars), 3000);
    int steps = small_scale() ? 100 : 400;
    for (size_t gi = 0; gi < TR_ARRAY_LEN(names); gi++) {
        size_t len = gen.len;
        char *text = names[gi] ? read_data(names[gi], &len) : gen.p;
        grammar *a = NULL, *b = NULL;
        assert_int_equal(tr_grammar_compile_ebnf(text, len, NULL, &a, NULL), TR_OK);
        assert_int_equal(tr_grammar_compile_ebnf(text, len, NULL, &b, NULL), TR_OK);
        a->cfg->by_column = true;
        uint32_t na = expand_all(a, 4000);
        uint32_t nb = expand_all(b, 4000);
        assert_int_equal(na, nb);
        for (uint32_t s = 0; s < na; s++)
            if (!same_state(a->cfg, b->cfg, s))
                fail_msg("%s: state %u differs", names[gi] ? names[gi] : "generated", s);
        assert_int_equal(tr_grammar_check(a), TR_OK);
        assert_int_equal(tr_grammar_check(b), TR_OK);
        tr_grammar_free(a);
        tr_grammar_free(b);
        /* masks of random walks, each way from a fresh grammar */
        assert_int_equal(tr_grammar_compile_ebnf(text, len, NULL, &a, NULL), TR_OK);
        assert_int_equal(tr_grammar_compile_ebnf(text, len, NULL, &b, NULL), TR_OK);
        a->cfg->by_column = true;
        uint64_t want = walk_hash(a, v, 77 + gi, steps);
        uint64_t got = walk_hash(b, v, 77 + gi, steps);
        if (got != want) fail_msg("%s: masks differ", names[gi] ? names[gi] : "generated");
        assert_int_equal(tr_grammar_check(b), TR_OK);
        tr_grammar_free(a);
        tr_grammar_free(b);
        if (names[gi]) free(text);
    }
    free(gen.p);
    tr_grammar_vocab_free(v);
}

static void test_stats_dump(void **state) {
    (void)state;
    size_t len;
    char *text = read_data("json.gbnf", &len);
    grammar *g = compile(text);
    grammar_stats st;
    tr_grammar_get_stats(g, &st);
    assert_int_equal(st.rules, 7);
    assert_int_equal(st.rules_kept, 3);
    /* DFA states are made lazily: at compile time, the dead state and
     * the kept rules' starts */
    assert_true(st.call_edges > 0 && st.nfa_states > 100 && st.dfa_states == 4);
    assert_true(st.byte_classes > 10);
    assert_true(st.bytes > 0 && st.compile_ns > 0);
    assert_true(tr_grammar_matches(g, "{\"a\": [1, {}]}", 14));
    assert_false(tr_grammar_matches(g, "{\"a\": [1, {}]", 13));
    FILE *f = tmpfile();
    tr_grammar_dump(g, f);
    rewind(f);
    char buf[4096] = "";
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    assert_non_null(strstr(buf, "rule object: start"));
    assert_non_null(strstr(buf, "call")); /* expanded by the matches above */
    assert_int_equal(tr_grammar_check(g), TR_OK);
    tr_grammar_free(g);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_left_recursion),
        cmocka_unit_test(test_shared_terminals),
        cmocka_unit_test(test_handwritten),
        cmocka_unit_test(test_random_grammars),
        cmocka_unit_test(test_random_grammars_long_counts),
        cmocka_unit_test(test_smollm2),
        cmocka_unit_test(test_schema_masks),
        cmocka_unit_test(test_regions),
        cmocka_unit_test(test_expand_ways),
        cmocka_unit_test(test_api_stacks),
        cmocka_unit_test(test_stacks_budget),
        cmocka_unit_test(test_budgets),
        cmocka_unit_test(test_memo_threads),
        cmocka_unit_test(test_stats_dump),
    };
    /* TRELLIS_TEST_FILTER=<glob> runs a subset (the tsan stage: the
     * threaded ones) */
    tr_test_filter_from_env();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
