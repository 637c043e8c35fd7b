/* test_json_logic.c — the JSON Schema keywords built on complements
 * (json_not.c): `not` of every keyword group, if/then/else, oneOf made
 * exact by "not the other branches", dependentSchemas; through the real
 * matcher, the reference recognizer and the validator (test_json_check.h).
 */
#include "tests/unit/test_json_check.h"

#define Y TJC_Y

static void test_not_types_values(void **s) {
    (void)s;
    tjc_check("{'not':{'type':['string','null']}}", Y("1", "[]", "{}", "true"),
              Y("'a'", "null"));
    tjc_check("{'not':{'type':'integer'}}", Y("1.5", "'1'"), Y("1", "1.0", "-0"));
    tjc_check("{'type':'number','not':{'type':'integer'}}", Y("1.5", "-0.25"), Y("1", "'x'"));
    /* numbers excluded by value: every plain spelling goes */
    tjc_check("{'type':'number','not':{'enum':[1,2.5]}}", Y("0", "3", "2.25", "-1", "2.55"),
              Y("1", "1.0", "1.00", "2.5", "2.50"));
    tjc_check("{'not':{'const':0}}", Y("1", "0.5", "'0'", "null"), Y("0", "-0", "0.0", "-0.0"));
    /* arrays and objects excluded element-wise */
    tjc_check("{'not':{'enum':[[1,2],{'a':1}]}}",
              Y("[1]", "[1, 2, 3]", "[2, 1]", "[1, 3]", "{'a': 2}", "{'a': 1, 'b': 2}", "{}", "3"),
              Y("[1, 2]", "[1.0, 2]", "{'a': 1}", "{'a': 1.0}"));
    tjc_check("{'not':{'const':{'a':[1,{'b':null}]}}}",
              Y("{'a': [1, {'b': 0}]}", "{'a': [1]}", "{'a': [1, {'b': null, 'c': 1}]}"),
              Y("{'a': [1, {'b': null}]}"));
    tjc_check("{'not':{'type':'string','enum':['a','b']}}", Y("'c'", "1"), Y("'a'", "'b'"));
}

static void test_not_strings_numbers(void **s) {
    (void)s;
    tjc_check("{'not':{'pattern':'^a'}}", Y("'ba'", "''"), Y("'a'", "'abc'", "1", "null"));
    tjc_check("{'type':'string','not':{'minLength':3}}", Y("''", "'ab'"), Y("'abc'", "'abcd'"));
    tjc_check("{'not':{'maxLength':2,'pattern':'x'}}", Y("'abc'", "'ab'", "'xxx'"),
              Y("'x'", "'ax'", "'xx'", "1"));
    tjc_check("{'not':{'format':'date'}}", Y("'2020-13-01'", "'x'"), Y("'2020-01-31'", "1"));
    tjc_check("{'type':'integer','not':{'minimum':3,'maximum':7}}", Y("2", "8", "-1", "100"),
              Y("3", "5", "7"));
    tjc_check("{'not':{'exclusiveMinimum':0}}", Y("0", "-0.5"), Y("0.001", "5", "'a'"));
    tjc_check("{'type':'integer','not':{'multipleOf':3}}", Y("1", "2", "4", "-5"),
              Y("0", "3", "-6", "9"));
    tjc_check("{'not':{'multipleOf':2}}", Y("1.5", "3"), Y("4", "0", "'x'"));
    /* not of not */
    tjc_check("{'not':{'not':{'type':'string','minLength':2}}}", Y("'ab'"), Y("'a'", "1"));
}

static void test_not_arrays_objects(void **s) {
    (void)s;
    tjc_check("{'not':{'prefixItems':[{'type':'integer'}]}}", Y("['a']", "[1.5, 2]"),
              Y("[]", "[1]", "[1, 'a']", "{}"));
    tjc_check("{'not':{'minItems':2}}", Y("[]", "[1]"), Y("[1, 2]", "null"));
    tjc_check("{'not':{'required':['a','b']}}", Y("{}", "{'a': 1}", "{'b': 1}"),
              Y("{'a': 1, 'b': 2}", "{'b': 1, 'a': 2}", "1", "[]"));
    tjc_check("{'not':{'properties':{'a':{'type':'string'}}}}", Y("{'a': 1}", "{'a': null, 'b': 0}"),
              Y("{}", "{'a': 'x'}", "{'b': 1}", "'a'"));
    tjc_check("{'not':{'maxProperties':1}}", Y("{'a': 1, 'b': 2}"), Y("{}", "{'a': 1}", "3"));
    tjc_check("{'not':{'dependentRequired':{'a':['b']}}}", Y("{'a': 1}", "{'a': 1, 'c': 1}"),
              Y("{'a': 1, 'b': 2}", "{'b': 1}", "{}"));
    /* recursion: a chain of objects through c that ends in a string, negated */
    tjc_check("{'$defs':{'t':{'anyOf':[{'type':'string'},"
              "{'type':'object','properties':{'c':{'$ref':'#/$defs/t'}}}]}},"
              "'not':{'$ref':'#/$defs/t'}}",
              Y("1", "[]", "{'c': 1}", "{'c': {'c': null}}"),
              Y("'a'", "{}", "{'d': 1}", "{'c': 'a'}", "{'c': {}}", "{'c': {'c': {'c': 'x'}}}"));
}

static void test_not_refused(void **s) {
    (void)s;
    tjc_refused("{'not':{'uniqueItems':true}}", TR_ERR_UNSUPPORTED, "uniqueItems");
    tjc_refused("{'not':{'unevaluatedItems':false}}", TR_ERR_UNSUPPORTED, "unevaluatedItems");
    /* lenient: ignored, with a warning */
    grammar_json_options o;
    tr_grammar_json_options_default(&o);
    o.lenient = true;
    assert_true(tjc_accepts_opt("{'type':'array','not':{'uniqueItems':true}}", &o, "[1, 1]"));
}

static void test_if_then_else(void **s) {
    (void)s;
    const char *k = "{'if':{'properties':{'kind':{'const':'a'}}},"
                    "'then':{'required':['x']},'else':{'required':['y']}}";
    tjc_check(k, Y("{'kind': 'a', 'x': 1}", "{'kind': 'b', 'y': 1}", "{'x': 1}", "3"),
              Y("{'kind': 'a', 'y': 1}", "{'kind': 'b', 'x': 1}", "{'y': 1}", "{}"));
    tjc_check("{'if':{'minimum':10},'then':{'multipleOf':5}}", Y("5", "1", "10", "15", "'a'"),
              Y("11", "12"));
    tjc_check("{'if':{'type':'string'},'else':{'type':'integer'}}", Y("'a'", "3"),
              Y("1.5", "null"));
    tjc_check("{'type':'object','properties':{'country':{'enum':['US','CA']}},"
              "'if':{'properties':{'country':{'const':'US'}}},"
              "'then':{'properties':{'zip':{'pattern':'^[0-9]{5}$'}}},"
              "'else':{'properties':{'zip':{'pattern':'^[A-Z][0-9][A-Z]$'}}}}",
              Y("{'country': 'US', 'zip': '12345'}", "{'country': 'CA', 'zip': 'K1A'}"),
              Y("{'country': 'US', 'zip': 'K1A'}", "{'country': 'CA', 'zip': '12345'}"));
    /* if alone, then alone: no constraint */
    tjc_check("{'if':{'type':'string'}}", Y("1", "'a'"), NULL);
    tjc_check("{'then':{'type':'string'}}", Y("1", "'a'"), NULL);
    tjc_refused("{'if':{'uniqueItems':true},'then':{'minItems':1}}", TR_ERR_UNSUPPORTED, "if");
}

static void test_oneof_exact(void **s) {
    (void)s;
    /* overlapping branches: exactly one must hold */
    tjc_check("{'oneOf':[{'minimum':1},{'maximum':5}]}", Y("0", "6", "0.5"),
              Y("3", "1", "5", "'a'", "null"));
    tjc_check("{'oneOf':[{'type':'integer'},{'minimum':2}]}", Y("1", "2.5", "-3"),
              Y("2", "7", "1.5"));
    tjc_check("{'type':'object','oneOf':[{'required':['a']},{'required':['b']}]}",
              Y("{'a': 1}", "{'b': 1}"), Y("{'a': 1, 'b': 1}", "{}"));
    tjc_check("{'oneOf':[{'pattern':'a'},{'pattern':'b'},{'maxLength':1}]}",
              Y("'xa'", "'xb'", "'c'", "''"), Y("'ab'", "'a'", "'b'", "'xy'", "1"));
    /* closed objects over disjoint keys, nothing required (a condition
     * tree: and / or / not): {} satisfies all three, so none is valid */
    const char *tree = "{'type':'object','oneOf':["
                       "{'properties':{'and':{'type':'array'}},'additionalProperties':false},"
                       "{'properties':{'or':{'type':'array'}},'additionalProperties':false},"
                       "{'properties':{'not':{'type':'integer'}},'additionalProperties':false}]}";
    tjc_check(tree, Y("{'and': []}", "{'or': [1]}", "{'not': 3}"),
              Y("{}", "{'and': [], 'or': []}", "{'not': 'x'}", "{'x': 1}"));
    /* closed, sharing a discriminator key: the other key tells them apart */
    tjc_check("{'oneOf':[{'properties':{'kind':{},'first':{'type':'string'}},"
              "'additionalProperties':false},"
              "{'properties':{'kind':{},'second':{'type':'string'}},'additionalProperties':false}]}",
              Y("{'kind': 1, 'first': 'a'}", "{'second': 'b'}"),
              Y("{'kind': 1}", "{}", "{'first': 'a', 'second': 'b'}", "{'first': 1}", "1"));
    /* the discriminator required by the schema holding the oneOf, pinned
     * in each branch; the other property open (no complement needed) */
    tjc_check("{'type':'object','required':['t','v'],'oneOf':["
              "{'properties':{'t':{'enum':['a']},'v':{'patternProperties':{'^x':{}}}}},"
              "{'properties':{'t':{'enum':['b']},'v':{'type':'array'}}}]}",
              Y("{'t': 'a', 'v': {'x': 1}}", "{'t': 'b', 'v': []}", "{'t': 'a', 'v': 3}"),
              Y("{'t': 'b', 'v': {}}", "{'t': 'c', 'v': []}", "{'v': []}", "{'t': 'a'}"));
    /* pinned apart though only one branch requires it: a value with t in
     * both would need one of both pinned sets */
    tjc_check("{'type':'object','oneOf':[{'properties':{'t':{'enum':['a','b']}}},"
              "{'required':['t','v'],'properties':{'t':{'const':'c'},"
              "'v':{'patternProperties':{'^x':{'type':'integer'}}}}}]}",
              Y("{'t': 'a'}", "{}", "{'t': 'c', 'v': {}}", "{'t': 'a', 'v': {'x': 's'}}"),
              Y("{'t': 'c'}", "{'t': 'c', 'v': {'x': 's'}}", "{'t': 'd'}"));
}

static void test_dependent_schemas(void **s) {
    (void)s;
    const char *d = "{'dependentSchemas':{'card':{'required':['billing'],"
                    "'properties':{'billing':{'type':'string'}}}}}";
    tjc_check(d, Y("{}", "{'name': 1}", "{'billing': 'x', 'card': 1}", "{'billing': 1}", "[]"),
              Y("{'card': 1}", "{'card': 1, 'billing': 2}"));
    tjc_check("{'dependencies':{'a':{'maxProperties':1}}}", Y("{'a': 1}", "{'b': 1, 'c': 2}"),
              Y("{'a': 1, 'b': 2}"));
    tjc_check("{'dependentSchemas':{'a':false}}", Y("{}", "{'b': 1}"), Y("{'a': 1}"));
}

static void test_contains(void **s) {
    (void)s;
    tjc_check("{'contains':{'type':'integer'}}", Y("[1]", "['a', 2, 'b']", "[1, 2]", "{}", "'x'"),
              Y("[]", "['a']", "['a', 1.5]"));
    tjc_check("{'contains':{'type':'integer'},'minContains':2,'maxContains':3}",
              Y("[1, 2]", "['a', 1, 'b', 2, 3]"), Y("[1]", "[1, 2, 3, 4]", "['a', 'b']"));
    tjc_check("{'contains':{'const':1},'minContains':0,'maxContains':0}", Y("[]", "[2, 3]"),
              Y("[1]", "[2, 1]"));
    tjc_check("{'contains':{'const':1},'minContains':0}", Y("[]", "[1, 1]"), NULL);
    /* with tuples and lengths */
    tjc_check("{'prefixItems':[{'type':'string'}],'items':{'type':'number'},'maxItems':3,"
              "'contains':{'type':'number','minimum':10}}",
              Y("['a', 10]", "['a', 1, 20]", "['x', 10, 10]"),
              Y("['a', 1]", "['a', 1, 2, 30]", "[]", "[10]"));
    /* two contains at once (allOf) */
    tjc_check("{'allOf':[{'contains':{'const':'a'}},{'contains':{'const':'b'},'maxContains':1}]}",
              Y("['a', 'b']", "['b', 'x', 'a', 'a']"), Y("['a']", "['a', 'b', 'b']", "['b']"));
    /* not items: some item fails (counted from the prefix's end) */
    tjc_check("{'not':{'items':{'type':'integer'}}}", Y("[1, 'a']", "['a']", "[1.5]"),
              Y("[]", "[1, 2]", "1", "'s'"));
    tjc_check("{'not':{'prefixItems':[{'type':'integer'}],'items':{'type':'string'}}}",
              Y("['a']", "[1, 2]", "[1, 'a', 3]"), Y("[]", "[1]", "[1, 'a', 'b']", "{}"));
    tjc_check("{'not':{'contains':{'const':1},'maxContains':1}}",
              Y("[1, 1]", "[1, 2, 1]", "[]", "[2]"), Y("[1]", "[2, 1]", "null"));
}

/* As tjc_check for a schema the matcher's tracker completes: its text
 * export is refused (the grammar alone is not the schema), so the
 * matcher is checked against the validator only. */
static void check_tracked(const char *schema, const char *const *yes, const char *const *no) {
    const char *q = tjc_q(schema);
    char *sc = strdup(q);
    assert_non_null(sc);
    grammar *g = NULL;
    tr_diag d;
    if (tr_grammar_compile_json_schema(sc, strlen(sc), NULL, NULL, &g, &d))
        fail_msg("compile failed: %s\n  schema: %s", d.message, sc);
    char *gt = NULL;
    assert_int_equal(tr_grammar_json_schema_to_ebnf(sc, strlen(sc), NULL, NULL, &gt, NULL, &d),
                     TR_ERR_UNSUPPORTED);
    for (int pass = 0; pass < 2; pass++)
        for (const char *const *t = pass ? no : yes; *t; t++) {
            if (tjc_valid(sc, *t) != !pass) fail_msg("validator on %s under %s", *t, sc);
            const char *text = tjc_q(*t);
            if (tj_accepts(g, tjc_v, text, strlen(text)) != !pass)
                fail_msg("matcher on %s under %s", text, sc);
        }
    tr_grammar_free(g);
    free(sc);
}

static void test_unique_items(void **s) {
    (void)s;
    tjc_check("{'type':'array','items':{'enum':['a','b','c']},'uniqueItems':true}",
              Y("[]", "['a']", "['c', 'a', 'b']"), Y("['a', 'a']", "['a', 'b', 'a']", "['d']"));
    tjc_check("{'prefixItems':[{'type':'boolean'},{'type':'boolean'}],'items':false,"
              "'uniqueItems':true}",
              Y("[]", "[true]", "[false, true]"), Y("[true, true]", "[false, false]", "[1]"));
    /* numbers compare by value: 1 and 1.0 are one value */
    tjc_check("{'items':{'enum':[1,2]},'uniqueItems':true}", Y("[1, 2]", "[2.0, 1]"),
              Y("[1, 1.0]", "[2, 2]"));
    tjc_check("{'items':{'enum':[1,2,3]},'uniqueItems':true,'contains':{'const':3}}",
              Y("[3]", "[1, 3, 2]"), Y("[1, 2]", "[3, 3]"));
    /* strings: the matcher's tracker keeps them distinct (json_unique.c) */
    check_tracked("{'items':{'type':'string'},'uniqueItems':true}",
              Y("[]", "['a', 'b']", "['a', 'ab', 'b']"), Y("['a', 'a']", "['b', 'a', 'b']"));
    check_tracked("{'properties':{'t':{'items':{'type':'string'},'uniqueItems':true}}}",
              Y("{'t': ['x', 'y']}", "{'u': ['x', 'x']}"), Y("{'t': ['x', 'x']}"));
    /* any items: canonical forms (json_keys_internal.h) */
    check_tracked("{'items':{'type':'object'},'uniqueItems':true}",
                  Y("[{'a': 1}, {'a': 2}]", "[{'a': 1}, {'a': 1, 'b': 2}]", "[{}, {'a': {}}]"),
                  Y("[{'a': 1}, {'a': 1}]", "[{'a': 1, 'b': [2]}, {'b': [2.0], 'a': 1.0}]",
                    "[{}, {'x': null}, { }]"));
    check_tracked("{'uniqueItems':true}",
                  Y("[1, '1', [1], {'1': 1}, null, true, false]", "[[1, 2], [2, 1]]", "[0.5, 5]",
                    "1"),
                  Y("[1, 1.0]", "[0.5, 5e-1]", "[-0, 0]", "[100, 1e2]", "[null, null]",
                    "[true, false, true]", "[[1, 2], [1, 2.0]]", "['a', '\\u0061']"));
    check_tracked("{'items':{'enum':['a','b','c','d','e','f','g','h','i','j','k','l','m','n',"
                  "'o','p','q']},'uniqueItems':true}",
                  Y("['a', 'q', 'b']"), Y("['q', 'a', 'q']"));
    /* widened: a choice's uniqueItems holds wherever the array is */
    check_tracked("{'anyOf':[{'items':{'type':'string'},'uniqueItems':true},{'type':'object'}]}",
                  Y("['a', 'b']", "{}"), Y("['a', 'a']"));
    /* through a recursive path: every such array at any depth */
    check_tracked("{'properties':{'r':{'$ref':'#'},'t':{'items':{'type':'object'},"
                  "'uniqueItems':true}}}",
                  Y("{'r': {'r': {'t': [{'a': 1}, {}]}}, 't': [{}, {'a': 1}]}"),
                  Y("{'r': {'r': {'t': [{'a': 1}, {'a': 1}]}}}", "{'t': [{}, {}]}"));
    tjc_refused("{'type':'array','not':{'uniqueItems':true}}", TR_ERR_UNSUPPORTED, "uniqueItems");
    /* at most one item: unique by construction */
    tjc_check("{'items':{'type':'string'},'uniqueItems':true,'maxItems':1}", Y("[]", "['a']"),
              Y("['a', 'b']"));
}

static void test_unevaluated(void **s) {
    (void)s;
    tjc_check("{'allOf':[{'properties':{'a':{}}}],'properties':{'b':{}},"
              "'unevaluatedProperties':false}",
              Y("{}", "{'a': 1}", "{'b': 2}"), Y("{'c': 1}", "{'a': 1, 'c': 2}"));
    /* a nested unevaluatedProperties sees only its own subtree */
    tjc_check("{'properties':{'a':{}},'allOf':[{'unevaluatedProperties':false}]}",
              Y("{}"), Y("{'a': 1}", "{'b': 1}"));
    tjc_check("{'anyOf':[{'properties':{'a':{'type':'string'}},'required':['a']},"
              "{'properties':{'b':{'type':'integer'}},'required':['b']}],"
              "'unevaluatedProperties':{'type':'boolean'}}",
              Y("{'a': 'x'}", "{'b': 1}", "{'a': 'x', 'c': true}"),
              Y("{'a': 'x', 'c': 1}", "{'c': true}"));
    tjc_check("{'patternProperties':{'^x-':{}},'unevaluatedProperties':false,"
              "'if':{'properties':{'k':{'const':1}},'required':['k']},'then':{'properties':{'v':{}}}}",
              Y("{'x-a': 1}", "{'k': 1, 'v': 2}"), Y("{'k': 2, 'v': 2}", "{'y': 1}"));
    tjc_check("{'dependentSchemas':{'a':{'properties':{'b':{}}}},'properties':{'a':{}},"
              "'unevaluatedProperties':false}",
              Y("{'a': 1, 'b': 2}", "{'a': 1}"), Y("{'b': 2}"));
    tjc_check("{'prefixItems':[{'type':'string'}],'unevaluatedItems':false}", Y("[]", "['a']"),
              Y("['a', 1]"));
    tjc_check("{'prefixItems':[{}],'contains':{'type':'string'},'unevaluatedItems':{'type':'null'}}",
              Y("['a']", "[1, 'a', null]", "[null, 'b']"), Y("[1, 2, 'a']", "[1]"));
    tjc_check("{'allOf':[{'items':{'type':'integer'}}],'unevaluatedItems':false}",
              Y("[]", "[1, 2]"), Y("['a']"));
}

/* With enum/const in the conjunction its language is those values, each
 * checked against the whole schema by the validator: a `not` without a
 * complement, an overlapping oneOf or uniqueItems over objects costs
 * nothing there; without values they are refused as before. */
static void test_values_decide(void **s) {
    (void)s;
    tjc_check("{'allOf':[{'enum':[{'foo':1},{'bar':true},{'baz':'x'}]},"
              "{'not':{'additionalProperties':{'type':'boolean'}}}]}",
              Y("{'foo': 1}", "{'baz': 'x'}"), Y("{'bar': true}", "{'foo': 2}", "{}"));
    tjc_check("{'enum':[{'aaaa':31},{'aaa':5}],"
              "'not':{'patternProperties':{'a*':{'type':'integer'},'aaa*':{'maximum':20}}}}",
              Y("{'aaaa': 31}"), Y("{'aaa': 5}"));
    tjc_check("{'const':{'a4':1},'not':{'propertyNames':{'not':{'const':'a4'}}}}",
              Y("{'a4': 1}"), Y("{'b': 1}", "{}"));
    tjc_refused("{'const':{'b':1},'not':{'propertyNames':{'not':{'const':'a4'}}}}",
                TR_ERR_FORMAT, "accepts no JSON value");
    /* two held `not`s, one value left */
    tjc_check("{'enum':[{'a':1},{'b':1},{'a':1,'b':1}],"
              "'allOf':[{'not':{'patternProperties':{'^a$':false}}},"
              "{'not':{'patternProperties':{'^b$':false}}}]}",
              Y("{'a': 1, 'b': 1}"), Y("{'a': 1}", "{'b': 1}"));
    /* oneOf whose branches overlap, decided value by value */
    tjc_check("{'enum':[[1,1],[1,2],'x'],'oneOf':[{'type':'array','uniqueItems':true},"
              "{'type':'array','maxItems':2}]}",
              Y("[1, 1]"), Y("[1, 2]", "'x'"));
    tjc_check("{'enum':[[{'a':1},{'a':1}],[{'a':1},{'a':2}]],'uniqueItems':true}",
              Y("[{'a': 1}, {'a': 2}]"), Y("[{'a': 1}, {'a': 1}]"));
}

/* both orders: yes accepted and valid, no rejected and invalid */
static void check_orders(const char *schema, const char *const *yes, const char *const *no) {
    tjc_check(schema, yes, no);
    grammar_json_options o;
    tr_grammar_json_options_default(&o);
    o.property_order = GRAMMAR_JSON_ORDER_ANY;
    for (int i = 0; yes[i]; i++)
        if (!tjc_accepts_opt(schema, &o, yes[i])) fail_msg("any order: should accept %s", yes[i]);
    for (int i = 0; no[i]; i++)
        if (tjc_accepts_opt(schema, &o, no[i])) fail_msg("any order: should reject %s", no[i]);
}

/* The complements that say "some member exists": additionalProperties,
 * patternProperties, propertyNames (json_not.c's JS_KW_SOME), the
 * member being a listed name or an additional key (json_gen_obj.c). */
static void test_some_member(void **s) {
    (void)s;
    check_orders("{'not':{'additionalProperties':false}}", Y("{'a': 1}", "{'a': 1, 'b': {}}"),
                 Y("{}", "1", "'x'", "[]"));
    check_orders("{'type':'object','not':{'properties':{'a':{}},'additionalProperties':false}}",
                 Y("{'a': 1, 'b': 2}", "{'b': 2}", "{'b': 2, 'c': 3}"), Y("{}", "{'a': 1}"));
    /* the rule's own `properties` count, not the object's */
    check_orders("{'type':'object','properties':{'a':{}},'not':{'additionalProperties':false}}",
                 Y("{'a': 1}", "{'b': 2}"), Y("{}"));
    /* additionalProperties beside patterns: keys neither listed nor matched */
    check_orders("{'type':'object','not':{'properties':{'id':{}},'patternProperties':{'^x-':{}},"
                 "'additionalProperties':{'type':'string'}}}",
                 Y("{'a': 1}", "{'id': 1, 'b': null}", "{'x-a': 1, 'c': [], 'd': 'e'}"),
                 Y("{}", "{'id': 1}", "{'x-a': 1}", "{'a': 'b'}", "{'x-q': 2, 'r': 's'}"));
    check_orders("{'not':{'propertyNames':{'maxLength':2}}}",
                 Y("{'abc': 1}", "{'a': 1, 'abcd': 2}"),
                 Y("{}", "{'ab': 1}", "{'a': 1, 'b': 2}", "5"));
    check_orders("{'type':'object','not':{'patternProperties':{'^x':{'type':'integer'}}}}",
                 Y("{'x1': 'a'}", "{'y': 1, 'xa': null}", "{'x': [1], 'a': 1}"),
                 Y("{}", "{'x': 1}", "{'y': 'a'}", "{'x': 1, 'xy': 2}"));
    /* the member is a listed name (required or optional) or an additional key */
    check_orders("{'type':'object','properties':{'x1':{'type':['integer','string']},'z':{}},"
                 "'required':['x1'],'not':{'patternProperties':{'^x':{'type':'integer'}}}}",
                 Y("{'x1': 'a'}", "{'x1': 1, 'x2': 'b'}", "{'x1': 'a', 'z': 1, 'x3': 4}"),
                 Y("{'x1': 1}", "{'x1': 1, 'x2': 3}", "{'x1': 1, 'z': 'q'}"));
    check_orders("{'type':'object','properties':{'xa':{},'xb':{}},"
                 "'not':{'patternProperties':{'^x':{'type':'integer'}}}}",
                 Y("{'xa': 'a'}", "{'xa': 1, 'xb': 'b'}", "{'xc': null}", "{'xa': 1, 'xd': []}"),
                 Y("{}", "{'xa': 1}", "{'xa': 1, 'xb': 2, 'xq': 3}"));
    /* with counts, two rules on one object */
    check_orders("{'type':'object','maxProperties':3,'allOf':["
                 "{'not':{'patternProperties':{'^a':{'type':'integer'}}}},"
                 "{'not':{'patternProperties':{'^b':{'type':'integer'}}}}]}",
                 Y("{'a': 'x', 'b': 'y'}", "{'c': 1, 'a': null, 'b': true}"),
                 Y("{'a': 'x'}", "{'a': 'x', 'b': 1}", "{'a': 'x', 'b': 'y', 'c': 1, 'd': 2}"));
    /* schema order writes several such members in the order of the rules
     * (any order takes them as they come) */
    const char *two = "{'type':'object','allOf':["
                      "{'not':{'patternProperties':{'^a':{'type':'integer'}}}},"
                      "{'not':{'patternProperties':{'^b':{'type':'integer'}}}}]}";
    tjc_lossy(two, Y("{'b': null, 'a': true}"));
    grammar_json_options o;
    tr_grammar_json_options_default(&o);
    o.property_order = GRAMMAR_JSON_ORDER_ANY;
    assert_true(tjc_accepts_opt(two, &o, "{'b': null, 'a': true}"));
    /* counted: additional members before the witness count too */
    check_orders("{'type':'object','maxProperties':2,'patternProperties':{'^[0-9]$':{}},"
                 "'additionalProperties':false,'not':{'propertyNames':{'not':{'enum':['1','3']}}}}",
                 Y("{'1': 0, '2': 0}", "{'3': 0}"), Y("{'1': 0, '2': 0, '3': 0}", "{'2': 0}"));
    /* oneOf of overlapping object branches, exact through the complements */
    check_orders("{'oneOf':[{'type':'object','patternProperties':{'^a':{'type':'integer'}}},"
                 "{'type':'object','properties':{'b':{'type':'string'}}}]}",
                 Y("{'a': 'x'}", "{'b': 1}", "{'b': 3, 'a1': 2}"),
                 Y("{}", "{'a': 1}", "{'a': 'x', 'b': 2}", "{'b': 's'}", "1"));
    check_orders("{'oneOf':[{'type':'object','additionalProperties':false,'minProperties':1,"
                 "'patternProperties':{'^[0-9]x$':{'type':'string'}}},"
                 "{'type':'object','additionalProperties':false,"
                 "'patternProperties':{'^[a-z]+$':{'type':'string'}}}]}",
                 Y("{'1x': 'a'}", "{'ab': 'c'}", "{}"),
                 Y("{'1x': 'a', 'ab': 'c'}", "{'1x': 1}", "{'AB': 'c'}"));
    /* propertyNames beside listed names: a listed name is no witness when
     * it fails the rule's key kind */
    check_orders("{'type':'object','properties':{'id':{'type':'integer'}},"
                 "'not':{'propertyNames':{'pattern':'^[a-z]+$'}}}",
                 Y("{'id': 1, 'A': 2}", "{'_': null}"), Y("{'id': 1}", "{}", "{'id': 1, 'ab': 2}"));
}

static uint32_t rnd(uint64_t *st) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*st >> 33);
}

/* Random objects under random "some member" rules (one or two `not`s of
 * patternProperties / additionalProperties / propertyNames beside
 * listed properties, required names and maxProperties), random
 * instances with distinct keys: in any property order the grammar
 * accepts exactly the valid ones; in schema order only valid ones (it
 * takes an order). */
static void test_some_member_random(void **s) {
    (void)s;
    static const char *const groups[] = {
        "{'patternProperties':{'^x':{'type':'integer'}}}",
        "{'patternProperties':{'b':{'type':'string'}},'additionalProperties':false}",
        "{'properties':{'a':{}},'additionalProperties':{'type':'boolean'}}",
        "{'propertyNames':{'maxLength':1}}",
        "{'propertyNames':{'pattern':'^[ab]+$'}}",
        "{'additionalProperties':false}",
        "{'properties':{'x1':{'type':'integer'}},'patternProperties':{'^a':{'enum':[1,true]}}}",
    };
    static const char *const keys[] = {"a", "ab", "b", "x1", "x2", "c"};
    static const char *const vals[] = {"1", "'s'", "true", "null", "[]"};
    uint64_t st = 777;
    int trials = small_scale_json() ? 15 : 80, checked = 0, accepted = 0;
    grammar_json_options o, so;
    tr_grammar_json_options_default(&o);
    tr_grammar_json_options_default(&so);
    o.property_order = GRAMMAR_JSON_ORDER_ANY;
    int in_schema_order = 0;
    for (int t = 0; t < trials; t++) {
        char sc[2048];
        size_t n = (size_t)snprintf(sc, sizeof sc, "{'type':'object','properties':{");
        uint32_t props = rnd(&st) % 8, req = rnd(&st) % 4;
        const char *pk[3] = {"a", "x1", "c"};
        for (uint32_t i = 0, k = 0; i < 3; i++)
            if (props >> i & 1)
                n += (size_t)snprintf(sc + n, sizeof sc - n, "%s'%s':{'type':'%s'}", k++ ? "," : "",
                                      pk[i], rnd(&st) % 2 ? "integer" : "string");
        n += (size_t)snprintf(sc + n, sizeof sc - n, "},'required':[%s]",
                              req == 1 ? "'a'" : req == 2 ? "'x1'" : "");
        if (rnd(&st) % 3 == 0) n += (size_t)snprintf(sc + n, sizeof sc - n, ",'maxProperties':3");
        uint32_t nr = 1 + rnd(&st) % 2;
        n += (size_t)snprintf(sc + n, sizeof sc - n, ",'allOf':[");
        for (uint32_t r = 0; r < nr; r++)
            n += (size_t)snprintf(sc + n, sizeof sc - n, "%s{'not':%s}", r ? "," : "",
                                  groups[rnd(&st) % TR_ARRAY_LEN(groups)]);
        snprintf(sc + n, sizeof sc - n, "]}");
        const char *q = tjc_q(sc);
        grammar *g = NULL;
        tr_diag cd;
        tr_status cst = tr_grammar_compile_json_schema(q, strlen(q), &o, NULL, &g, &cd);
        if (cst && (cst != TR_ERR_FORMAT || !strstr(cd.message, "accepts no JSON value")))
            fail_msg("compile failed (%s): %s\n  schema: %s", tr_status_name(cst), cd.message, q);
        grammar *gs = NULL;
        if (g && tr_grammar_compile_json_schema(q, strlen(q), &so, NULL, &gs, &cd))
            fail_msg("schema order: compile failed: %s\n  schema: %s", cd.message, q);
        for (int k = 0; k < 40; k++) {
            char in[512];
            uint32_t used = 0, nk = rnd(&st) % 5;
            size_t m = (size_t)snprintf(in, sizeof in, "{");
            for (uint32_t j = 0; j < nk; j++) {
                uint32_t ki = rnd(&st) % TR_ARRAY_LEN(keys);
                if (used >> ki & 1) continue;
                used |= 1u << ki;
                m += (size_t)snprintf(in + m, sizeof in - m, "%s'%s': %s", m > 1 ? ", " : "",
                                      keys[ki], vals[rnd(&st) % TR_ARRAY_LEN(vals)]);
            }
            snprintf(in + m, sizeof in - m, "}");
            const char *text = tjc_q(in);
            bool valid = tjc_valid(sc, in), got = g && tj_accepts(g, tjc_v, text, strlen(text));
            if (valid != got) fail_msg("%s %s under %s", got ? "accepted" : "rejected", in, sc);
            bool got_s = gs && tj_accepts(gs, tjc_v, text, strlen(text));
            if (got_s && !valid) fail_msg("schema order accepted %s under %s", in, sc);
            checked++;
            accepted += got;
            in_schema_order += got_s;
        }
        tr_grammar_free(g);
        tr_grammar_free(gs);
    }
    fprintf(stderr, "some member, random: %d texts, %d accepted (%d in schema order)\n", checked,
            accepted, in_schema_order);
    assert_true(accepted > checked / 20);
}

/* Past the compile's memory budget with "some member exists", the
 * compile runs again without it: the oneOf planner's sound fallbacks
 * (json_schema.c). Here branch 0 then says "no k1" and loses objects
 * whose k1 fails branch 1. */
static void test_some_member_budget(void **s) {
    (void)s;
    const char *schema = tjc_q(
        "{'type':'object','oneOf':["
        "{'required':['k0'],'properties':{'k0':{'type':'object','properties':{'v':{'type':'integer'}},"
        "'additionalProperties':false}}},"
        "{'required':['k1'],'properties':{'k1':{'type':'object','properties':{'v':{'type':'integer'}},"
        "'additionalProperties':false}}}]}");
    const char *exact_only = "{\"k0\": {\"v\": 1}, \"k1\": {\"v\": 1, \"x\": 2}}";
    const char *plain = "{\"k0\": {\"v\": 1}}";
    assert_true(tjc_valid(schema, exact_only));
    assert_true(tjc_accepts(schema, exact_only));
    grammar_limits lim;
    tr_grammar_limits_default(&lim);
    lim.max_compile_bytes = 550000; /* the fallback needs ~475 kB, the exact ~875 kB */
    grammar *g = NULL;
    tr_diag d;
    tr_status st = tr_grammar_compile_json_schema(schema, strlen(schema), NULL, &lim, &g, &d);
    if (st) fail_msg("the retry without \"some member\" should fit: %s", d.message);
    assert_false(tj_accepts(g, tjc_v, exact_only, strlen(exact_only)));
    assert_true(tj_accepts(g, tjc_v, plain, strlen(plain)));
    tr_grammar_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_types_values),  cmocka_unit_test(test_not_strings_numbers),
        cmocka_unit_test(test_not_arrays_objects), cmocka_unit_test(test_not_refused),
        cmocka_unit_test(test_values_decide),     cmocka_unit_test(test_some_member),
        cmocka_unit_test(test_some_member_budget), cmocka_unit_test(test_some_member_random),
        cmocka_unit_test(test_if_then_else),       cmocka_unit_test(test_oneof_exact),
        cmocka_unit_test(test_dependent_schemas),  cmocka_unit_test(test_contains),
        cmocka_unit_test(test_unique_items),       cmocka_unit_test(test_unevaluated),
    };
    return cmocka_run_group_tests(tests, tjc_setup, tjc_teardown);
}
