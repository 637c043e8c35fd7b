/* gen_constraint.c — what `generate`'s constraint flags become on the
 * engine's API (see gen_internal.h):
 *
 *   --regex R            trellis_request.regex (the engine compiles it
 *                        through its grammar cache; compiled here first
 *                        so that its errors name the flag)
 *   --choice A ...       trellis_grammar_compile_choices -> request.grammar
 *   --json-schema S      trellis_grammar_compile(JSON_SCHEMA), with
 *                        --schema-mode, --whitespace, --json-numbers and
 *                        --property-order as its options
 *   --json-object        trellis_grammar_compile(JSON_OBJECT)
 *   --grammar FILE       trellis_grammar_compile(EBNF)
 *
 * A kind the engine cannot compile yet answers TRELLIS_ERR_UNSUPPORTED,
 * reported as "FLAG: ..." like any other bad constraint.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "app/cli/cli.h"
#include "app/cli/gen_internal.h"

static bool check(const gen_opts *o) {
    const char *given[5];
    int n = 0;
    if (o->regex) given[n++] = "--regex";
    if (o->choices.n) given[n++] = "--choice";
    if (o->json_schema) given[n++] = "--json-schema";
    if (o->json_object) given[n++] = "--json-object";
    if (o->grammar) given[n++] = "--grammar";
    if (n > 1) {
        fprintf(stderr, "trellis generate: give one constraint, not both %s and %s\n",
                given[0], given[1]);
        return false;
    }
    if (o->regex && !o->regex[0]) {
        fprintf(stderr, "trellis generate: --regex: is empty\n");
        return false;
    }
    for (int i = 0; i < o->choices.n; i++) {
        const char *c = o->choices.items[i];
        char what[48];
        snprintf(what, sizeof what, "--choice number %d", i + 1);
        if (!c[0]) {
            fprintf(stderr, "trellis generate: %s: is empty\n", what);
            return false;
        }
        if (!tr_cli_check_text("generate", what, c, strlen(c))) return false;
    }
    if (o->schema_mode >= 0 && !o->json_schema) {
        fprintf(stderr, "trellis generate: --schema-mode: needs --json-schema\n");
        return false;
    }
    if (o->whitespace >= 0 && !o->json_schema && !o->json_object) {
        fprintf(stderr, "trellis generate: --whitespace: needs --json-schema or "
                        "--json-object\n");
        return false;
    }
    if (o->property_order >= 0 && !o->json_schema) {
        fprintf(stderr, "trellis generate: --property-order: needs --json-schema\n");
        return false;
    }
    if (o->json_numbers >= 0 && !o->json_schema && !o->json_object) {
        fprintf(stderr, "trellis generate: --json-numbers: needs --json-schema or "
                        "--json-object\n");
        return false;
    }
    return true;
}

/* The text of --json-schema (inline when it starts with '{', else a
 * file) or --grammar (a file). */
static bool read_text(const gen_opts *o, gen_constraint *c) {
    if (o->grammar)
        return tr_cli_read_file("generate", "--grammar", o->grammar, &c->text, &c->text_len);
    if (!o->json_schema) return true;
    const char *s = o->json_schema;
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    if (*s != '{')
        return tr_cli_read_file("generate", "--json-schema", o->json_schema, &c->text,
                                &c->text_len);
    c->text_len = strlen(o->json_schema);
    c->text = malloc(c->text_len + 1);
    if (c->text) memcpy(c->text, o->json_schema, c->text_len + 1);
    return c->text != NULL;
}

static void print_warnings(const char *flag, const char *w) {
    while (w && *w) {
        const char *nl = strchr(w, '\n');
        size_t n = nl ? (size_t)(nl - w) : strlen(w);
        if (n) fprintf(stderr, "trellis generate: %s: warning: %.*s\n", flag, (int)n, w);
        w += n + (nl != NULL);
    }
}

static int compile_grammar(const gen_opts *o, trellis_engine *e, gen_constraint *c) {
    trellis_grammar_options go;
    trellis_grammar_options_default(&go);
    if (o->schema_mode >= 0) go.lenient = o->schema_mode == 1;
    if (o->whitespace >= 0) go.whitespace = o->whitespace;
    if (o->json_numbers >= 0) go.json_numbers = o->json_numbers;
    if (o->property_order >= 0) go.property_order = o->property_order;
    trellis_grammar_kind kind = o->json_object ? TRELLIS_GRAMMAR_JSON_OBJECT
                                : o->grammar   ? TRELLIS_GRAMMAR_EBNF
                                               : TRELLIS_GRAMMAR_JSON_SCHEMA;
    char err[1024];
    int rc = trellis_grammar_compile(e, kind, c->text, c->text_len, &go, &c->grammar, err,
                                     sizeof err);
    if (rc != TRELLIS_OK) {
        fprintf(stderr, "trellis generate: %s: %s\n", c->flag, err);
        return rc == TRELLIS_ERR_NOMEM ? 1 : 2;
    }
    print_warnings(c->flag, trellis_grammar_warnings(c->grammar));
    return 0;
}

/* --regex: the request carries it (the engine compiles it through its
 * grammar cache). With grammar handles it is compiled here first, so that
 * its error is told apart from the request's other errors; the request
 * then finds it in the cache. */
static int compile_regex(const gen_opts *o, trellis_engine *e, gen_constraint *c) {
    c->regex = o->regex;
    trellis_grammar *g = NULL;
    char err[1024];
    int rc = trellis_grammar_compile(e, TRELLIS_GRAMMAR_REGEX, o->regex, 0, NULL, &g, err,
                                     sizeof err);
    if (rc != TRELLIS_OK) {
        fprintf(stderr, "trellis generate: --regex: %s\n", err);
        return rc == TRELLIS_ERR_NOMEM ? 1 : 2;
    }
    trellis_grammar_release(g);
    return 0;
}

int tr_cli_gen_constraint_prepare(const gen_opts *o, gen_constraint *c) {
    memset(c, 0, sizeof *c);
    if (!check(o)) return 2;
    c->kind = o->regex         ? "regex"
              : o->choices.n   ? "choice"
              : o->json_schema ? "json_schema"
              : o->json_object ? "json_object"
              : o->grammar     ? "grammar"
                               : NULL;
    c->flag = o->regex         ? "--regex"
              : o->choices.n   ? "--choice"
              : o->json_schema ? "--json-schema"
              : o->json_object ? "--json-object"
                               : "--grammar";
    if (!c->kind || o->regex || o->choices.n) return 0;
    return read_text(o, c) ? 0 : 1;
}

int tr_cli_gen_constraint_compile(const gen_opts *o, trellis_engine *e, gen_constraint *c) {
    if (!c->kind) return 0;
    uint64_t t0 = tr_now_ns();
    int rc = 0;
    if (o->regex) {
        rc = compile_regex(o, e, c);
    } else if (o->choices.n) {
        char err[1024];
        rc = trellis_grammar_compile_choices(e, o->choices.items, o->choices.n,
                                             &c->grammar, err, sizeof err);
        if (rc != TRELLIS_OK) fprintf(stderr, "trellis generate: --choice: %s\n", err);
        rc = rc == TRELLIS_OK ? 0 : rc == TRELLIS_ERR_NOMEM ? 1 : 2;
    } else {
        rc = compile_grammar(o, e, c);
    }
    c->compile_ms = (double)(tr_now_ns() - t0) / 1e6;
    return rc;
}

void tr_cli_gen_constraint_free(gen_constraint *c) {
    trellis_grammar_release(c->grammar);
    free(c->text);
    memset(c, 0, sizeof *c);
}
