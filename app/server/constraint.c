/* constraint.c — a request's constraint (regex, choices, JSON Schema, any
 * JSON object, EBNF) compiled into a grammar handle through the engine's
 * grammar cache (trellis_grammar_compile), in the request's submission job
 * on libuv's thread pool, never on the loop thread: a compile may take up
 * to the grammar compiler's time budget, a cached one microseconds.
 *
 * A kind this build cannot compile comes back TRELLIS_ERR_UNSUPPORTED with
 * the compiler's sentence, and the request gets a 400 that says so; such
 * kinds start working with no change here when the compiler has them.
 * The handle is released when the request is freed (trellis_submit holds
 * its own references for the sequences).
 */
#include "app/server/server_internal.h"

int tr_srv_constraint_prepare(tr_srv_req *q, trellis_engine *e, char *err, size_t cap) {
    tr_srv_gen *g = &q->gen;
    if (g->con == TR_CON_NONE) return TRELLIS_OK;
    trellis_grammar *gr = NULL;
    int rc;
    if (g->con == TR_CON_CHOICE) {
        rc = trellis_grammar_compile_choices(e, g->choices, g->n_choices, &gr, err, cap);
    } else {
        trellis_grammar_options opt;
        trellis_grammar_options_default(&opt);
        if (g->con_ws >= 0) opt.whitespace = g->con_ws;
        if (g->con_numbers >= 0) opt.json_numbers = g->con_numbers;
        if (g->con_order >= 0) opt.property_order = g->con_order;
        rc = trellis_grammar_compile(e, (trellis_grammar_kind)g->con, g->con_text, g->con_len,
                                     &opt, &gr, err, cap);
    }
    if (rc != TRELLIS_OK) return rc;
    q->grammar = gr;
    g->req.grammar = gr;
    return TRELLIS_OK;
}

void tr_srv_constraint_release(tr_srv_req *q) {
    trellis_grammar_release(q->grammar);
    q->grammar = NULL;
}
