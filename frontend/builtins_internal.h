/* builtins_internal.h — the functions every script may call (frontend/README.md,
 * "Built-in functions"): len, str, json, parse_json, load, range, trim,
 * lower, upper, split, join, replace, starts_with, ends_with, int, float,
 * keys, min, max, sum, argmax, print.
 *
 * Layering: frontend, internal. Builtins are pure functions of their
 * arguments (load reads a file, print writes to stderr) and run on the
 * calling task's thread; none generates.
 */
#ifndef TR_FRONTEND_BUILTINS_H
#define TR_FRONTEND_BUILTINS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/status.h"

/* What a builtin may need from its caller. */
typedef struct tr_dsl_builtin_env {
    const char *dir;       /* where relative paths resolve */
    size_t max_file_bytes;
    size_t max_string_bytes;
    int64_t max_items;     /* range() and split() results */
    char *err;             /* a sentence on failure */
    size_t err_cap;
} tr_dsl_builtin_env;

/* args[0..n) borrowed; *out a new reference on success. */
typedef tr_status (*tr_dsl_builtin_fn)(tr_dsl_builtin_env *env, json_t *const *args,
                                       int32_t n, json_t **out);

typedef struct tr_dsl_builtin {
    const char *name;
    int32_t min_args, max_args;
    tr_dsl_builtin_fn fn;
    const char *signature; /* for messages: "split(text, separator)" */
} tr_dsl_builtin;

/* The index of builtin name, or -1. */
int32_t tr_dsl_builtin_find(const char *name);
const tr_dsl_builtin *tr_dsl_builtin_get(int32_t index);

#endif
