/* ebnf_stub.c — placeholder for the EBNF compiler (branch grammar-cfg),
 * so that the JSON Schema compiler links and its regular schemas (one
 * regex) work before the two branches meet. Removed by that merge. */
#include "grammar/grammar_internal.h"

tr_status tr_grammar_compile_ebnf(const char *text, size_t len, const grammar_limits *limits,
                                  grammar **out, tr_diag *diag) {
    (void)text, (void)len, (void)limits, (void)out;
    return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0,
                       "the EBNF compiler is not in this build yet (branch grammar-cfg)");
}
