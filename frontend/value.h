/* value.h — the DSL's values are jansson values; these are the
 * operations the language defines on them (frontend/README.md,
 * "Values"): text form, truth, equality, ordering, arithmetic.
 *
 * Layering: frontend, internal. Pure functions; thread-safe (jansson's
 * reference counts are atomic, and no function here mutates a value it
 * did not create).
 */
#ifndef TR_FRONTEND_VALUE_H
#define TR_FRONTEND_VALUE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "base/status.h"

/* A growable byte buffer (malloc'd, NUL-terminated when not empty). */
typedef struct tr_dsl_buf {
    char *p;
    size_t len, cap;
} tr_dsl_buf;

bool tr_dsl_buf_put(tr_dsl_buf *b, const char *s, size_t n);
void tr_dsl_buf_free(tr_dsl_buf *b);

/* "null", "a boolean", "a number", "a string", "a list", "an object". */
const char *tr_dsl_type_name(const json_t *v);

/* Appends v's text form: a string as it is, null as nothing, a number or
 * boolean as written in JSON, a list or object as compact JSON. */
tr_status tr_dsl_value_append_text(tr_dsl_buf *b, const json_t *v);

/* Compact JSON of v (any type); malloc'd. */
char *tr_dsl_value_json(const json_t *v);

/* false for null, false, 0, "", [] and {}; true otherwise. */
bool tr_dsl_truthy(const json_t *v);

/* Deep equality; integers and reals compare by value (1 == 1.0). */
bool tr_dsl_equal(const json_t *a, const json_t *b);

/* Applies a binary operator (tr_dsl_op, not AND/OR) to a and b: a new
 * value in *out, or an error with a sentence in err. */
tr_status tr_dsl_binary(int op, const json_t *a, const json_t *b, size_t max_string,
                        json_t **out, char *err, size_t cap);

/* v[index] for lists (negative counts from the end), strings (by
 * character) and objects (by key). */
tr_status tr_dsl_index(const json_t *v, const json_t *index, json_t **out, char *err,
                       size_t cap);

/* Number of characters (code points) of a UTF-8 string. */
size_t tr_dsl_utf8_count(const char *s, size_t n);

#endif
