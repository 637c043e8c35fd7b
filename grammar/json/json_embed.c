/* json_embed.c — EBNF grammars with embedded JSON Schemas: an item
 * `%json SCHEMA` (grammar.h, tr_grammar_compile_ebnf_json) stands for the
 * JSON texts SCHEMA accepts.
 *
 * Layering: grammar/json (public through grammar.h), over the schema
 * translator (json_schema.c) and the EBNF compiler (cfg). Thread-safe.
 *
 * How: the text is scanned as the EBNF lexer reads it (literals, classes,
 * /regex/ terminals and comments are skipped, so a `%json` inside them is
 * text); each `%json` is followed by a JSON value read with jansson, which
 * reports how many bytes it took. The schema's own grammar text
 * (tr_grammar_json_schema_to_ebnf) gets its rule names prefixed with
 * "jsonK-" (K counts the embedded schemas), so that schemas, and the
 * user's rules, never share a name; the `%json SCHEMA` span becomes a
 * reference to the prefixed root, and the prefixed rules are appended.
 * The user's own rule names must therefore not start with "json" followed
 * by a digit and a '-' (refused, so that a collision can never silently
 * change a language). Offsets of errors the EBNF compiler reports after
 * the first `%json` refer to the expanded text; errors in a schema name
 * the `%json` they belong to by line and column.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "grammar/cfg/cfg.h"
#include "grammar/json/json_internal.h"

typedef struct tbuf {
    char *p;
    size_t n, cap;
    bool oom;
} tbuf;

static void tb_put(tbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (b->n + n + 1 > nc) nc *= 2;
        char *p = realloc(b->p, nc);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

/* The end of the quoted / bracketed / slashed token starting at t[i]
 * (one past its closer; len when unclosed: the compiler reports it). */
static size_t skip_delimited(const char *t, size_t len, size_t i, char close) {
    for (i++; i < len; i++) {
        if (t[i] == '\\' && i + 1 < len) {
            i++;
            continue;
        }
        if (t[i] == close) return i + 1;
        if (t[i] == '\n' && close != ']') return i; /* literals and regexes end at lines */
    }
    return len;
}

/* The length of the lexically inert token at t[i] (literal, class,
 * regex, comment, quantifier braces), 0 when t[i] starts none. */
static size_t inert_len(const char *t, size_t len, size_t i) {
    size_t e;
    switch (t[i]) {
    case '"': e = skip_delimited(t, len, i, '"'); break;
    case '[': e = skip_delimited(t, len, i, ']'); break;
    case '/': e = skip_delimited(t, len, i, '/'); break;
    case '{': e = skip_delimited(t, len, i, '}'); break;
    case '#':
        for (e = i; e < len && t[e] != '\n'; e++) {}
        break;
    default: return 0;
    }
    return e - i;
}

/* Appends text with every rule name prefixed by prefix. */
static void put_prefixed(tbuf *b, const char *t, size_t len, const char *prefix) {
    size_t pl = strlen(prefix);
    for (size_t i = 0; i < len;) {
        size_t k = inert_len(t, len, i);
        if (k) {
            tb_put(b, t + i, k);
            i += k;
        } else if (name_char(t[i])) {
            size_t j = i;
            while (j < len && name_char(t[j])) j++;
            tb_put(b, prefix, pl);
            tb_put(b, t + i, j - i);
            i = j;
        } else {
            tb_put(b, t + i, 1);
            i++;
        }
    }
}

static void line_col(const char *t, size_t off, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off; i++) {
        if (t[i] == '\n') {
            (*line)++;
            *col = 1;
        } else if (((unsigned char)t[i] & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}

/* A user rule named like the embedded ones (jsonK-...) would collide. */
static tr_status check_reserved(const char *t, size_t len, tr_diag *diag) {
    for (size_t i = 0; i < len;) {
        size_t k = inert_len(t, len, i);
        if (k) {
            i += k;
            continue;
        }
        if (!name_char(t[i]) || (i > 0 && (name_char(t[i - 1]) || t[i - 1] == '%'))) {
            i++;
            continue;
        }
        size_t j = i + 4;
        if (j < len && strncmp(t + i, "json", 4) == 0 && t[j] >= '0' && t[j] <= '9') {
            while (j < len && t[j] >= '0' && t[j] <= '9') j++;
            if (j < len && t[j] == '-') {
                int line, col;
                line_col(t, i, &line, &col);
                tr_diag_set(diag, TR_ERR_FORMAT, i,
                            "%d:%d: the rule name prefix 'jsonN-' is reserved for "
                            "embedded schemas (%%json); rename the rule",
                            line, col);
                if (diag) diag->line = line, diag->column = col;
                return TR_ERR_FORMAT;
            }
        }
        while (i < len && name_char(t[i])) i++;
    }
    return TR_OK;
}

/* Reads the schema after `%json` at t[at..]; appends the reference to
 * *b and the schema's prefixed rules to *rules. *end: one past it. */
static tr_status embed_one(const char *t, size_t len, size_t at, unsigned k,
                           const grammar_json_options *opt, const grammar_limits *lim,
                           tbuf *b, tbuf *rules, size_t *end, tr_diag *diag) {
    int line, col;
    line_col(t, at, &line, &col);
    size_t s = at + 5;
    while (s < len && (t[s] == ' ' || t[s] == '\t' || t[s] == '\r' || t[s] == '\n')) s++;
    if (s >= len || t[s] != '{') {
        tr_diag_set(diag, TR_ERR_FORMAT, at, "%d:%d: %%json must be followed by a JSON Schema "
                    "object ({...})", line, col);
        if (diag) diag->line = line, diag->column = col;
        return TR_ERR_FORMAT;
    }
    json_error_t je;
    json_t *schema = json_loadb(t + s, len - s, JSON_DISABLE_EOF_CHECK, &je);
    if (!schema) {
        tr_diag_set(diag, TR_ERR_FORMAT, at, "%d:%d: %%json: the schema is not JSON: %s", line,
                    col, je.text);
        if (diag) diag->line = line, diag->column = col;
        return TR_ERR_FORMAT;
    }
    size_t used = je.position;
    json_decref(schema);
    char *text = NULL;
    size_t tn = 0;
    tr_status st = tr_grammar_json_schema_to_ebnf(t + s, used, opt, lim, &text, &tn, diag);
    if (st) {
        if (diag) {
            char m[sizeof diag->message + 40];
            snprintf(m, sizeof m, "%d:%d: %%json: %s", line, col, diag->message);
            memcpy(diag->message, m, sizeof diag->message - 1);
            diag->message[sizeof diag->message - 1] = 0;
            diag->line = line, diag->column = col, diag->offset = at;
        }
        return st;
    }
    char prefix[32];
    snprintf(prefix, sizeof prefix, "json%u-", k);
    tb_put(b, " ", 1);
    tb_put(b, prefix, strlen(prefix));
    tb_put(b, "root ", 5);
    tb_put(rules, "\n", 1);
    put_prefixed(rules, text, tn, prefix);
    free(text);
    *end = s + used;
    return TR_OK;
}

#define KEYS_AFTER "%json-keys-after"
#define KEYS_AFTER_MAX 64

/* Whether t[i..] starts the directive word w (then not a longer name). */
static bool at_word(const char *t, size_t len, size_t i, const char *w) {
    size_t n = strlen(w);
    return len - i >= n && strncmp(t + i, w, n) == 0 && (i + n == len || !name_char(t[i + n]));
}

/* Reads `%json-keys-after "TEXT"` at t[at..] (grammar.h): TEXT, a JSON
 * string of 1 to 64 bytes, into *after (one per grammar). *end: one past
 * it. */
static tr_status keys_after_one(const char *t, size_t len, size_t at, tbuf *after, size_t *end,
                                tr_diag *diag) {
    int line, col;
    line_col(t, at, &line, &col);
    size_t s = at + strlen(KEYS_AFTER);
    while (s < len && (t[s] == ' ' || t[s] == '\t' || t[s] == '\r' || t[s] == '\n')) s++;
    json_error_t je;
    json_t *v = s < len && t[s] == '"' && !after->p
                    ? json_loadb(t + s, len - s, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &je)
                    : NULL;
    size_t n = json_is_string(v) ? json_string_length(v) : 0;
    if (n == 0 || n > KEYS_AFTER_MAX) {
        json_decref(v);
        tr_diag_set(diag, TR_ERR_FORMAT, at,
                    after->p ? "%d:%d: %%json-keys-after given twice (one per grammar)"
                             : "%d:%d: %%json-keys-after must be followed by a JSON string "
                               "of 1 to 64 bytes",
                    line, col);
        if (diag) diag->line = line, diag->column = col;
        return TR_ERR_FORMAT;
    }
    tb_put(after, json_string_value(v), n);
    json_decref(v);
    *end = s + je.position;
    return after->oom ? tr_diag_set(diag, TR_ERR_NOMEM, 0, "out of memory") : TR_OK;
}

/* tr_grammar_ebnf_expand_json, also returning %json-keys-after's text in
 * *after (empty when the grammar has none). */
static tr_status expand(const char *t, size_t len, const grammar_json_options *opt,
                        const grammar_limits *lim, char **out, size_t *out_len, tbuf *after,
                        tr_diag *diag) {
    if (diag) memset(diag, 0, sizeof *diag);
    if (!out || (!t && len)) return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0, "NULL argument");
    tr_status st = check_reserved(t, len, diag);
    if (st) return st;
    tbuf b = {0}, rules = {0};
    unsigned k = 0;
    size_t i = 0, copied = 0;
    while (i < len && st == TR_OK) {
        size_t n = inert_len(t, len, i);
        if (n) {
            i += n;
            continue;
        }
        bool at_keys = t[i] == '%' && at_word(t, len, i, KEYS_AFTER);
        if (!at_keys && !(t[i] == '%' && at_word(t, len, i, "%json"))) {
            i++;
            continue;
        }
        tb_put(&b, t + copied, i - copied);
        size_t end = i;
        if (at_keys) {
            st = keys_after_one(t, len, i, after, &end, diag);
            tb_put(&b, " ", 1); /* the directive is not EBNF: it goes */
        } else {
            st = embed_one(t, len, i, k++, opt, lim, &b, &rules, &end, diag);
        }
        i = copied = end;
    }
    if (st == TR_OK) {
        tb_put(&b, t + copied, len - copied);
        if (rules.n) tb_put(&b, rules.p, rules.n);
        tb_put(&b, "", 0);
        if (b.oom || rules.oom) st = tr_diag_set(diag, TR_ERR_NOMEM, 0, "out of memory");
    }
    free(rules.p);
    if (st) {
        free(b.p);
        return st;
    }
    *out = b.p;
    if (out_len) *out_len = b.n;
    return TR_OK;
}

tr_status tr_grammar_ebnf_expand_json(const char *t, size_t len, const grammar_json_options *opt,
                                      const grammar_limits *lim, char **out, size_t *out_len,
                                      tr_diag *diag) {
    tbuf after = {0};
    tr_status st = expand(t, len, opt, lim, out, out_len, &after, diag);
    free(after.p);
    return st;
}

tr_status tr_grammar_compile_ebnf_json(const char *text, size_t len,
                                       const grammar_json_options *opt,
                                       const grammar_limits *lim, grammar **out,
                                       tr_diag *diag) {
    char *x = NULL;
    size_t n = 0;
    tbuf after = {0};
    tr_status st = expand(text, len, opt, lim, &x, &n, &after, diag);
    if (st == TR_OK) st = tr_grammar_compile_ebnf(x, n, lim, out, diag);
    free(x);
    if (st == TR_OK && after.p) { /* the grammar takes the text */
        (*out)->unique_keys = true;
        (*out)->keys_after = (uint8_t *)after.p;
        (*out)->keys_after_len = after.n;
        after.p = NULL;
    }
    free(after.p);
    return st;
}
