/* parser_internal.h — tokens to AST (frontend/ast_internal.h), by recursive descent over
 * the grammar of frontend/README.md, then name resolution: every call is
 * bound to a script function or a builtin and its arguments checked
 * against the parameters, and each function is marked `generates` when it
 * can reach a generation.
 *
 * Layering: frontend, internal (script.c calls it).
 * Errors: the first one stops the parse; diag gets its code (TR_ERR_FORMAT
 * for syntax and names, TR_ERR_LIMIT, TR_ERR_NOMEM) and byte offset.
 * Recursion is bounded by limits->max_nesting, so no input overflows the
 * stack. On failure the script's arena may hold partial nodes; the caller
 * frees the script.
 */
#ifndef TR_FRONTEND_PARSER_H
#define TR_FRONTEND_PARSER_H

#include "base/status.h"
#include "frontend/ast_internal.h"
#include "frontend/dsl.h"

tr_status tr_dsl_parse(tr_dsl_script *s, const tr_dsl_limits *limits, tr_diag *diag);

#endif
