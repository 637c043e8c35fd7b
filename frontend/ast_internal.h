/* ast_internal.h — the parsed form of a script (frontend/README.md gives the
 * grammar). Every node lives in the script's arena, except literal values,
 * which are jansson values the script holds one reference to (released by
 * tr_dsl_script_free). A parsed script is immutable: any number of
 * interpreter threads walk it at once.
 *
 * Layering: frontend, internal (parser and interpreter).
 *
 *   script ─┬─ globals: let NAME = expr        (evaluated once per session)
 *           └─ fns ─ fn NAME(params) { block }
 *   block  ─ stmts: text/expr (appended), let, assign, role { }, gen,
 *            select, if, for, fork, parallel, return
 *
 * Every node has `off`, the byte offset of its first token in the script;
 * line and column are computed from it only when an error is reported.
 */
#ifndef TR_FRONTEND_AST_H
#define TR_FRONTEND_AST_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "base/arena.h"

typedef struct tr_dsl_expr tr_dsl_expr;
typedef struct tr_dsl_stmt tr_dsl_stmt;

typedef enum tr_dsl_expr_kind {
    TR_DSL_E_CONST,  /* a literal: number, true/false/null, plain string */
    TR_DSL_E_STRING, /* a string with interpolations */
    TR_DSL_E_VAR,
    TR_DSL_E_FIELD,  /* base.name */
    TR_DSL_E_INDEX,  /* base[index] */
    TR_DSL_E_CALL,   /* name(args) */
    TR_DSL_E_LIST,   /* [a, b] */
    TR_DSL_E_OBJECT, /* {k: v} */
    TR_DSL_E_UNARY,
    TR_DSL_E_BINARY,
} tr_dsl_expr_kind;

typedef enum tr_dsl_op {
    TR_DSL_OP_NEG, TR_DSL_OP_NOT,
    TR_DSL_OP_ADD, TR_DSL_OP_SUB, TR_DSL_OP_MUL, TR_DSL_OP_DIV, TR_DSL_OP_MOD,
    TR_DSL_OP_EQ, TR_DSL_OP_NE, TR_DSL_OP_LT, TR_DSL_OP_LE, TR_DSL_OP_GT,
    TR_DSL_OP_GE, TR_DSL_OP_IN, TR_DSL_OP_NOT_IN, TR_DSL_OP_AND, TR_DSL_OP_OR,
} tr_dsl_op;

typedef struct tr_dsl_strseg {
    const char *text;  /* literal bytes, or NULL for an expression */
    size_t len;
    tr_dsl_expr *expr;
} tr_dsl_strseg;

/* A call's callee, resolved when the whole script is parsed. */
typedef enum tr_dsl_callee_kind {
    TR_DSL_CALLEE_SCRIPT,  /* fns[index] */
    TR_DSL_CALLEE_BUILTIN, /* builtin table[index] */
} tr_dsl_callee_kind;

struct tr_dsl_expr {
    tr_dsl_expr_kind kind;
    uint32_t off;
    union {
        json_t *value; /* CONST (the script's reference) */
        struct {
            tr_dsl_strseg *segs;
            int32_t n;
        } str;
        const char *name; /* VAR */
        struct {
            tr_dsl_expr *base;
            const char *name;
        } field;
        struct {
            tr_dsl_expr *base, *index;
        } index;
        struct {
            const char *name;
            tr_dsl_expr **args;
            const char **arg_names; /* NULL entries: positional */
            int32_t n_args;
            tr_dsl_callee_kind callee;
            int32_t index;
        } call;
        struct {
            tr_dsl_expr **items;
            int32_t n;
        } list;
        struct {
            const char **keys;
            tr_dsl_expr **values;
            int32_t n;
        } object;
        struct {
            tr_dsl_op op;
            tr_dsl_expr *a, *b; /* b NULL for unary */
        } op;
    } u;
};

typedef struct tr_dsl_block {
    tr_dsl_stmt **stmts;
    int32_t n;
} tr_dsl_block;

/* gen / select options, by name (frontend/README.md, "gen"). */
#define TR_DSL_GEN_OPTION_LIST(X)                                                 \
    X(MAX_TOKENS, "max_tokens") X(TEMPERATURE, "temperature") X(TOP_P, "top_p")   \
    X(TOP_K, "top_k") X(MIN_P, "min_p") X(STOP, "stop") X(SEED, "seed")           \
    X(REGEX, "regex") X(JSON_SCHEMA, "json_schema") X(JSON, "json")               \
    X(CHOICES, "choices") X(IGNORE_EOS, "ignore_eos")                             \
    X(PRESENCE_PENALTY, "presence_penalty")                                       \
    X(FREQUENCY_PENALTY, "frequency_penalty")                                     \
    X(REPETITION_PENALTY, "repetition_penalty")

typedef enum tr_dsl_gen_option {
#define TR_DSL_GEN_OPT_ENUM_(name, text) TR_DSL_GEN_OPT_##name,
    TR_DSL_GEN_OPTION_LIST(TR_DSL_GEN_OPT_ENUM_)
#undef TR_DSL_GEN_OPT_ENUM_
        TR_DSL_GEN_OPT_COUNT_
} tr_dsl_gen_option;

extern const char *const tr_dsl_gen_option_names[TR_DSL_GEN_OPT_COUNT_];

typedef struct tr_dsl_genopt {
    tr_dsl_gen_option opt;
    uint32_t off;
    tr_dsl_expr *value;
} tr_dsl_genopt;

typedef enum tr_dsl_stmt_kind {
    TR_DSL_S_EXPR,     /* append the value; a script call runs inline */
    TR_DSL_S_LET,      /* let name = expr */
    TR_DSL_S_ASSIGN,   /* name = expr */
    TR_DSL_S_ROLE,     /* system|user|assistant { block } */
    TR_DSL_S_GEN,      /* gen name(options) */
    TR_DSL_S_SELECT,   /* select name from expr (options) */
    TR_DSL_S_IF,
    TR_DSL_S_FOR,
    TR_DSL_S_FORK,
    TR_DSL_S_PARALLEL,
    TR_DSL_S_RETURN,
} tr_dsl_stmt_kind;

struct tr_dsl_stmt {
    tr_dsl_stmt_kind kind;
    uint32_t off;
    union {
        tr_dsl_expr *expr; /* EXPR, RETURN (may be NULL) */
        struct {
            const char *name;
            tr_dsl_expr *value;
        } let; /* LET, ASSIGN */
        struct {
            const char *role;
            tr_dsl_block body;
        } role;
        struct {
            const char *name;
            tr_dsl_expr *from; /* SELECT: the options */
            tr_dsl_genopt *opts;
            int32_t n_opts;
            bool by_logprob;   /* SELECT ... by logprob: scored, not
                                  constrained (frontend/README.md) */
        } gen; /* GEN, SELECT */
        struct {
            tr_dsl_expr **conds; /* n_conds conditions ... */
            tr_dsl_block *blocks; /* ... and their blocks */
            int32_t n_conds;
            bool has_else;
            tr_dsl_block else_block;
        } if_;
        struct {
            const char *index_name; /* may be NULL */
            const char *item_name;  /* FORK: NULL for `fork N` */
            tr_dsl_expr *iter;      /* list, object, or (FORK) a count */
            tr_dsl_block body;
            bool generates;         /* FORK: the body can generate */
        } loop; /* FOR, FORK */
        struct {
            tr_dsl_block *branches;
            uint32_t *offs;
            int32_t n;
            bool generates;         /* a branch can generate */
        } par;
    } u;
};

typedef struct tr_dsl_param {
    const char *name;
    tr_dsl_expr *def; /* default value, or NULL: required */
    uint32_t off;
} tr_dsl_param;

typedef struct tr_dsl_fn {
    const char *name;
    uint32_t off;
    tr_dsl_param *params;
    int32_t n_params;
    tr_dsl_block body;
    bool generates; /* may reach gen/select/role/fork (possibly through a
                       call): a call in an expression then runs as a task
                       of its own; a function that cannot is run in place */
} tr_dsl_fn;

typedef struct tr_dsl_global {
    const char *name;
    uint32_t off;
    tr_dsl_expr *value;
} tr_dsl_global;

struct tr_dsl_script {
    char *name;  /* for messages: the path as given */
    char *dir;   /* where load() resolves relative paths ("." if none) */
    char *src;   /* the source, NUL-terminated */
    size_t len;
    tr_arena arena;
    tr_dsl_fn *fns;
    int32_t n_fns;
    tr_dsl_global *globals;
    int32_t n_globals;
    json_t **consts; /* the literal values, one reference each */
    int32_t n_consts, cap_consts;
};

#endif
