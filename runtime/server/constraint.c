/* constraint.c — a request's constraint (regex, choices, JSON Schema, any
 * JSON object, EBNF) made ready for submission. Runs in the request's
 * submission job on libuv's thread pool, never on the loop thread: a
 * compile may take up to the grammar compiler's time budget.
 *
 * With the grammar-handle API (TRELLIS_SERVER_GRAMMAR_HANDLES) every kind
 * goes through trellis_grammar_compile and the engine's grammar cache;
 * a kind this build cannot compile comes back TRELLIS_ERR_UNSUPPORTED with
 * the compiler's sentence. Without it, regexes and choices (as an
 * escaped alternation) go through trellis_request.regex, which
 * trellis_submit compiles in the same job, and the JSON and EBNF kinds
 * are TRELLIS_ERR_UNSUPPORTED.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/server/server_internal.h"

static const char *kind_name(tr_srv_con k) {
    switch (k) {
    case TR_CON_REGEX: return "regex";
    case TR_CON_CHOICE: return "choices";
    case TR_CON_JSON_SCHEMA: return "JSON Schema";
    case TR_CON_JSON_OBJECT: return "JSON object";
    case TR_CON_EBNF: return "EBNF grammar";
    default: return "none";
    }
}

int tr_srv_constraint_prepare(tr_srv_req *q, trellis_engine *e, char *err, size_t cap) {
    tr_srv_gen *g = &q->gen;
    if (g->con == TR_CON_NONE) return TRELLIS_OK;
#ifdef TRELLIS_SERVER_GRAMMAR_HANDLES
    trellis_grammar_options opt;
    trellis_grammar_options_default(&opt);
    trellis_grammar *gr = NULL;
    int rc;
    if (g->con == TR_CON_CHOICE)
        rc = trellis_grammar_compile_choices(e, g->choices, g->n_choices, &gr, err, cap);
    else
        rc = trellis_grammar_compile(e, (trellis_grammar_kind)g->con, g->con_text, g->con_len,
                                     &opt, &gr, err, cap);
    if (rc != TRELLIS_OK) return rc;
    q->grammar = gr;
    g->req.grammar = gr;
    return TRELLIS_OK;
#else
    (void)e;
    if (g->con == TR_CON_REGEX) {
        g->req.regex = g->con_text;
        return TRELLIS_OK;
    }
    if (g->con == TR_CON_CHOICE) {
        q->regex_owned = tr_srv_choices_regex(g->choices, g->n_choices);
        if (!q->regex_owned) {
            snprintf(err, cap, "out of memory");
            return TRELLIS_ERR_NOMEM;
        }
        g->req.regex = q->regex_owned;
        return TRELLIS_OK;
    }
    snprintf(err, cap, "%s constraints cannot be compiled by this build", kind_name(g->con));
    return TRELLIS_ERR_UNSUPPORTED;
#endif
}

void tr_srv_constraint_release(tr_srv_req *q) {
#ifdef TRELLIS_SERVER_GRAMMAR_HANDLES
    trellis_grammar_release(q->grammar);
#endif
    q->grammar = NULL;
    free(q->regex_owned);
    q->regex_owned = NULL;
}
