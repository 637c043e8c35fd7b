/* grammar_compile.c — from a constraint's kind to its compiler: the one
 * switch every compile goes through (trellis_grammar_compile, requests'
 * `regex`), the options each kind reads, and the choice-list compiler.
 *
 * Layering: runtime/engine, over grammar/ and jansson. Pure functions:
 * any thread (grammar_cache.c calls them with no lock held). The JSON
 * kinds map trellis_grammar_options onto grammar_json_options and collect
 * lenient mode's warnings, one line each ("pointer: message"). It also
 * gives the layers above grammar.h's exact-number carrier (trellis.h,
 * trellis_json_exact_numbers) for the schemas they parse first.
 *
 * Choices. A JSON array of distinct strings compiles to the regex that is
 * the alternation of the strings, each escaped into grammar.h's dialect:
 * ASCII letters, digits, space and bytes >= 0x80 (valid UTF-8, checked by
 * jansson) stand for themselves, other printable ASCII gets a backslash
 * (`\.` `\(` ...: "any escaped ASCII punctuation"), control characters
 * become \xHH. The regex compiler then builds the minimal DFA, which is
 * the trie of the choices with shared suffixes merged, so `yes|no` costs
 * what a hand-built automaton would, and masks, jump-forward (a choice's
 * unique rest is forced) and the memo come for free.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/engine/grammar_cache_internal.h"

/* The longest choice list, in bytes of the strings: the escaped
 * alternation is at most 4x that (\xHH), within the regex compiler's
 * pattern budget raised to match. */
#define CHOICES_MAX_BYTES (256u << 10)

const char *tr_engine_grammar_kind_name(trellis_grammar_kind kind) {
    switch (kind) {
    case TRELLIS_GRAMMAR_REGEX: return "regex";
    case TRELLIS_GRAMMAR_CHOICE: return "choices";
    case TRELLIS_GRAMMAR_JSON_SCHEMA: return "JSON Schema";
    case TRELLIS_GRAMMAR_JSON_OBJECT: return "JSON object";
    case TRELLIS_GRAMMAR_EBNF: return "EBNF grammar";
    }
    return NULL;
}

bool tr_engine_grammar_kind_ends_spans(trellis_grammar_kind kind) {
    return kind == TRELLIS_GRAMMAR_REGEX || kind == TRELLIS_GRAMMAR_CHOICE;
}

tr_status tr_engine_grammar_kind_options(trellis_grammar_kind kind,
                                         const trellis_grammar_options *in,
                                         trellis_grammar_options *out, tr_diag *diag) {
    memset(out, 0, sizeof *out);
    if (kind != TRELLIS_GRAMMAR_JSON_SCHEMA && kind != TRELLIS_GRAMMAR_JSON_OBJECT)
        return TR_OK; /* regex, choices, EBNF read none */
    trellis_grammar_options d;
    trellis_grammar_options_default(&d);
    if (!in) in = &d;
    if (in->whitespace < TRELLIS_WS_FLEXIBLE || in->whitespace > TRELLIS_WS_PRETTY)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "options.whitespace is %d, not a TRELLIS_WS_* value",
                           in->whitespace);
    if (in->json_numbers < TRELLIS_JSON_NUMBERS_CANONICAL ||
        in->json_numbers > TRELLIS_JSON_NUMBERS_FULL)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "options.json_numbers is %d, not a TRELLIS_JSON_NUMBERS_* value",
                           in->json_numbers);
    if (in->property_order < TRELLIS_PROPERTY_ORDER_SCHEMA ||
        in->property_order > TRELLIS_PROPERTY_ORDER_ANY)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "options.property_order is %d, not a TRELLIS_PROPERTY_ORDER_* value",
                           in->property_order);
    /* grammar/json/json_schema.c's bounds */
    if (in->max_ws_run < 0 || in->max_ws_run > 1000)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "options.max_ws_run is %d, expected 0..1000",
                           in->max_ws_run);
    if (in->indent < 0 || in->indent > 16)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "options.indent is %d, expected 0..16", in->indent);
    out->lenient = in->lenient && kind == TRELLIS_GRAMMAR_JSON_SCHEMA;
    out->whitespace = in->whitespace;
    out->json_numbers = in->json_numbers;
    /* only schemas have listed properties: one cache entry per JSON_OBJECT */
    out->property_order = kind == TRELLIS_GRAMMAR_JSON_SCHEMA ? in->property_order : 0;
    /* each layout reads only its own knob */
    out->max_ws_run = in->whitespace == TRELLIS_WS_FLEXIBLE ? in->max_ws_run : 0;
    out->indent = in->whitespace == TRELLIS_WS_PRETTY ? in->indent : 0;
    return TR_OK;
}

/* ---- choices ---- */

typedef struct choice {
    const char *s;
    size_t len;
    size_t index;
} choice;

static int choice_cmp(const void *a, const void *b) {
    const choice *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->index < y->index ? -1 : 1;
}

/* Appends s escaped into the regex dialect; p has room for 4 * len. */
static size_t escape_into(char *p, const char *s, size_t len) {
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        bool plain = c >= 0x80 || c == ' ' || (c >= '0' && c <= '9') ||
                     (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
        if (plain) {
            p[n++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            p[n++] = '\\', p[n++] = 'x';
            p[n++] = hex[c >> 4], p[n++] = hex[c & 15];
        } else {
            p[n++] = '\\', p[n++] = (char)c;
        }
    }
    return n;
}

/* Checks the list (diag says what is wrong and which element) and writes
 * the alternation into a malloc'd *pattern. */
static tr_status choices_pattern(const json_t *arr, char **pattern,
                                 size_t *pattern_len, tr_diag *diag) {
    size_t n = json_array_size(arr), total = 0;
    if (n == 0)
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "the list is empty: give at least one choice");
    choice *cs = calloc(n, sizeof *cs);
    if (!cs) return tr_diag_set(diag, TR_ERR_NOMEM, 0, "out of memory");
    tr_status st = TR_OK;
    for (size_t i = 0; i < n && !st; i++) {
        const json_t *v = json_array_get(arr, i);
        if (!json_is_string(v)) {
            st = tr_diag_set(diag, TR_ERR_FORMAT, 0,
                             "choice %zu is not a string", i);
            break;
        }
        cs[i] = (choice){json_string_value(v), json_string_length(v), i};
        total += cs[i].len;
        if (total > CHOICES_MAX_BYTES)
            st = tr_diag_set(diag, TR_ERR_LIMIT, 0,
                             "the choices exceed %u bytes in all",
                             CHOICES_MAX_BYTES);
    }
    if (!st) {
        qsort(cs, n, sizeof *cs, choice_cmp);
        for (size_t i = 1; i < n && !st; i++)
            if (cs[i].len == cs[i - 1].len &&
                memcmp(cs[i].s, cs[i - 1].s, cs[i].len) == 0)
                st = tr_diag_set(diag, TR_ERR_FORMAT, 0,
                                 "choices %zu and %zu are the same string \"%.*s\"",
                                 cs[i - 1].index, cs[i].index,
                                 (int)(cs[i].len > 64 ? 64 : cs[i].len), cs[i].s);
    }
    char *p = NULL;
    if (!st && !(p = malloc(4 * total + n + 1)))
        st = tr_diag_set(diag, TR_ERR_NOMEM, 0, "out of memory");
    if (st) {
        free(cs);
        return st;
    }
    /* sorted order: the language is the same, and equal lists in any
     * order give byte-identical patterns */
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i) p[k++] = '|';
        k += escape_into(p + k, cs[i].s, cs[i].len);
    }
    p[k] = 0;
    free(cs);
    *pattern = p;
    *pattern_len = k;
    return TR_OK;
}

static tr_status compile_choices(const char *text, size_t len,
                                 const grammar_limits *lim, grammar **out,
                                 tr_diag *diag) {
    json_error_t je;
    /* JSON_ALLOW_NUL: a choice may contain U+0000 like any token text */
    json_t *arr = json_loadb(text, len, JSON_ALLOW_NUL, &je);
    if (!arr)
        return tr_diag_set_at(diag, TR_ERR_FORMAT, (uint64_t)je.position, je.line,
                              je.column, "not JSON: %s (line %d, column %d)",
                              je.text, je.line, je.column);
    if (!json_is_array(arr)) {
        json_decref(arr);
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "expected a JSON array of strings");
    }
    char *pat = NULL;
    size_t plen = 0;
    tr_status st = choices_pattern(arr, &pat, &plen, diag);
    json_decref(arr);
    if (st) return st;
    grammar_limits l = *lim;
    if (l.max_pattern_bytes < plen) l.max_pattern_bytes = plen;
    tr_diag d = {0};
    st = tr_grammar_compile_regex(pat, plen, &l, out, &d);
    free(pat);
    if (st == TR_ERR_LIMIT)
        return tr_diag_set(diag, st, 0, "too big to compile: %s", d.message);
    if (st)
        return tr_diag_set(diag, st == TR_ERR_NOMEM ? st : TR_ERR_INTERNAL, 0,
                           "cannot compile the alternation: %s", d.message);
    return TR_OK;
}

/* ---- JSON kinds ---- */

/* Lenient mode's warnings, one line each: "pointer: message". */
typedef struct warn_buf {
    char *p;
    size_t len, cap;
    bool oom;
} warn_buf;

static void collect_warning(void *ctx, const char *pointer, const char *message) {
    warn_buf *w = ctx;
    size_t add = strlen(pointer) + strlen(message) + 3;
    if (w->oom) return;
    if (w->len + add + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + add + 1) cap *= 2;
        char *q = realloc(w->p, cap);
        if (!q) {
            w->oom = true;
            return;
        }
        w->p = q;
        w->cap = cap;
    }
    w->len += (size_t)snprintf(w->p + w->len, w->cap - w->len, "%s: %s\n",
                               pointer[0] ? pointer : "#", message);
}

_Static_assert(TRELLIS_WS_FLEXIBLE == (int)GRAMMAR_JSON_WS_FLEXIBLE &&
                   TRELLIS_WS_COMPACT == (int)GRAMMAR_JSON_WS_COMPACT &&
                   TRELLIS_WS_PRETTY == (int)GRAMMAR_JSON_WS_PRETTY,
               "trellis.h's whitespace layouts are grammar.h's");
_Static_assert(TRELLIS_JSON_NUMBERS_CANONICAL == (int)GRAMMAR_JSON_NUM_CANONICAL &&
                   TRELLIS_JSON_NUMBERS_FULL == (int)GRAMMAR_JSON_NUM_FULL,
               "trellis.h's number modes are grammar.h's");
_Static_assert(TRELLIS_PROPERTY_ORDER_SCHEMA == (int)GRAMMAR_JSON_ORDER_SCHEMA &&
                   TRELLIS_PROPERTY_ORDER_ANY == (int)GRAMMAR_JSON_ORDER_ANY,
               "trellis.h's property orders are grammar.h's");

static void json_options(const trellis_grammar_options *o, grammar_json_options *j,
                         warn_buf *w) {
    tr_grammar_json_options_default(j);
    if (o) {
        j->lenient = o->lenient;
        j->whitespace = (grammar_json_ws)o->whitespace;
        j->numbers = (grammar_json_numbers)o->json_numbers;
        j->property_order = (grammar_json_property_order)o->property_order;
        j->max_ws_run = (uint32_t)o->max_ws_run;
        j->indent = (uint32_t)o->indent;
    }
    j->warn = collect_warning;
    j->warn_ctx = w;
}

/* ---- the switch ---- */

tr_status tr_engine_grammar_compile(trellis_grammar_kind kind, const char *text,
                                    size_t len, const trellis_grammar_options *o,
                                    const grammar_limits *lim, grammar **out,
                                    char **warnings, tr_diag *diag) {
    warn_buf w = {0};
    grammar_json_options jo;
    grammar *g = NULL;
    tr_status st;
    switch (kind) {
    case TRELLIS_GRAMMAR_REGEX:
        st = tr_grammar_compile_regex(text, len, lim, &g, diag);
        break;
    case TRELLIS_GRAMMAR_CHOICE:
        st = compile_choices(text, len, lim, &g, diag);
        break;
    case TRELLIS_GRAMMAR_JSON_SCHEMA:
        json_options(o, &jo, &w);
        st = tr_grammar_compile_json_schema(text, len, &jo, lim, &g, diag);
        break;
    case TRELLIS_GRAMMAR_JSON_OBJECT:
        json_options(o, &jo, &w);
        st = tr_grammar_compile_json(true, &jo, lim, &g, diag);
        break;
    case TRELLIS_GRAMMAR_EBNF: /* %json items take the JSON options */
        json_options(o, &jo, &w);
        st = tr_grammar_compile_ebnf_json(text, len, &jo, lim, &g, diag);
        break;
    default:
        st = tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                         "%d is not a TRELLIS_GRAMMAR_* kind", (int)kind);
        break;
    }
    if (st == TR_OK && (w.oom || (!w.p && !(w.p = strdup(""))))) {
        tr_grammar_free(g);
        st = tr_diag_set(diag, TR_ERR_NOMEM, 0, "out of memory");
    }
    if (st) {
        free(w.p);
        return st;
    }
    *out = g;
    *warnings = w.p;
    return TR_OK;
}

/* ---- exact numbers (trellis.h): grammar.h's, for the layers above ---- */

bool trellis_json_exact_numbers(const char *text, size_t len, bool integers_only, char **out,
                                size_t *out_len) {
    return tr_grammar_json_exact_numbers(text, len, integers_only, out, out_len);
}

bool trellis_json_exact_string(const char *s, size_t len, const char **lit, size_t *lit_len) {
    return tr_grammar_json_exact_string(s, len, lit, lit_len);
}
