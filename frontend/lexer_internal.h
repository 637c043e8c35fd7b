/* lexer_internal.h — the DSL's tokens (frontend/README.md, "Lexical structure").
 *
 * Layering: frontend, internal (parser only).
 * The lexer walks src[pos..end) of a script held by the caller; every
 * token carries its byte offset in the whole script, so that sub-lexers
 * over an interpolation's span (`"... {expr} ..."`) report positions in
 * the original text. Strings are decoded here: escapes, multi-line
 * dedent, and the split into literal parts and interpolation spans
 * (which the parser lexes and parses in turn). Everything it allocates
 * lives in the caller's arena.
 * Errors fill a tr_diag (code, offset; the parser adds line and column)
 * and return TR_ERR_FORMAT, or TR_ERR_LIMIT / TR_ERR_NOMEM.
 * Threads: a lexer is used by one thread.
 */
#ifndef TR_FRONTEND_LEXER_H
#define TR_FRONTEND_LEXER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "base/arena.h"

#define TR_DSL_TOKEN_LIST(X)                                                   \
    X(EOF, "end of input") X(IDENT, "a name") X(INT, "a number")               \
    X(FLOAT, "a number") X(STRING, "a string")                                 \
    X(FN, "'fn'") X(LET, "'let'") X(IF, "'if'") X(ELSE, "'else'")              \
    X(FOR, "'for'") X(IN, "'in'") X(FORK, "'fork'") X(PARALLEL, "'parallel'")  \
    X(BRANCH, "'branch'") X(RETURN, "'return'") X(GEN, "'gen'")                \
    X(SELECT, "'select'") X(TRUE, "'true'") X(FALSE, "'false'")                \
    X(NULL, "'null'") X(AND, "'and'") X(OR, "'or'") X(NOT, "'not'")            \
    X(LPAREN, "'('") X(RPAREN, "')'") X(LBRACE, "'{'") X(RBRACE, "'}'")        \
    X(LBRACKET, "'['") X(RBRACKET, "']'") X(COMMA, "','") X(DOT, "'.'")        \
    X(COLON, "':'") X(ASSIGN, "'='") X(EQ, "'=='") X(NE, "'!='") X(LT, "'<'")  \
    X(LE, "'<='") X(GT, "'>'") X(GE, "'>='") X(PLUS, "'+'") X(MINUS, "'-'")    \
    X(STAR, "'*'") X(SLASH, "'/'") X(PERCENT, "'%'")

typedef enum tr_dsl_tok {
#define TR_DSL_TOK_ENUM_(name, desc) TR_DSL_TOK_##name,
    TR_DSL_TOKEN_LIST(TR_DSL_TOK_ENUM_)
#undef TR_DSL_TOK_ENUM_
        TR_DSL_TOK_COUNT_
} tr_dsl_tok;

/* "'fn'", "a name", ...: how an error message names a token kind. */
const char *tr_dsl_tok_describe(tr_dsl_tok t);

/* A piece of a string literal: decoded text, or the source span of an
 * interpolated expression (between its braces). */
typedef struct tr_dsl_strpart {
    bool is_expr;
    const char *text; /* literal: decoded bytes (NUL-terminated) */
    size_t len;       /* literal: byte count; expr: span length */
    uint32_t offset;  /* expr: span start in the script; literal: where
                         the literal starts (for messages) */
} tr_dsl_strpart;

typedef struct tr_dsl_token {
    tr_dsl_tok kind;
    uint32_t offset;  /* first byte in the script */
    uint32_t len;     /* bytes of source */
    bool nl_before;   /* a line break between the previous token and this */
    int64_t i;        /* INT */
    double f;         /* FLOAT */
    const char *name; /* IDENT: NUL-terminated, in the arena */
    const tr_dsl_strpart *parts; /* STRING */
    int32_t n_parts;
} tr_dsl_token;

typedef struct tr_dsl_lexer {
    const char *src;  /* the whole script */
    size_t pos, end;  /* the part being lexed */
    tr_arena *arena;
    tr_diag *diag;
    int32_t max_nesting; /* braces within interpolations within strings */
} tr_dsl_lexer;

void tr_dsl_lexer_init(tr_dsl_lexer *lx, const char *src, size_t start, size_t end,
                       tr_arena *arena, tr_diag *diag, int32_t max_nesting);

/* The next token into *t. On error *t is undefined and diag says why. */
tr_status tr_dsl_lex_next(tr_dsl_lexer *lx, tr_dsl_token *t);

#endif
