/* value.h — the DSL's values are jansson values; these are the
 * operations the language defines on them (frontend/README.md,
 * "Values"): text form, truth, equality, ordering, arithmetic.
 *
 * Layering: frontend, internal. Pure functions; thread-safe (values are
 * shared across threads only through tr_dsl_ref/tr_dsl_unref, and no
 * function here mutates a value it did not create).
 */
#ifndef TR_FRONTEND_VALUE_H
#define TR_FRONTEND_VALUE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "base/status.h"

/* Reference counting for values shared across threads (fork branches,
 * batch workers, AST constants, futures completed on the engine's
 * thread): every incref/decref in frontend/ goes through these two.
 * jansson's own json_incref/json_decref (its header, 2.14) read the count
 * with a plain load (the test for its immortal constants, refcount
 * (size_t)-1) and drop it with release order only, so the thread that
 * frees a value is not ordered after another thread's last use of it:
 * ThreadSanitizer reports both, and on a weakly ordered CPU the second
 * can free memory another thread still reads. These use an atomic load
 * and an acquire-release decrement (as shared_ptr does). jansson must
 * itself count atomically: its containers incref their members inside
 * the library. */
#if !JSON_HAVE_ATOMIC_BUILTINS && !JSON_HAVE_SYNC_BUILTINS
#error "frontend/ shares jansson values across threads: jansson must count references atomically"
#endif
static inline json_t *tr_dsl_ref(json_t *v) {
    if (v && __atomic_load_n(&v->refcount, __ATOMIC_RELAXED) != (size_t)-1)
        __atomic_add_fetch(&v->refcount, 1, __ATOMIC_RELAXED);
    return v;
}
static inline void tr_dsl_unref(json_t *v) {
    if (v && __atomic_load_n(&v->refcount, __ATOMIC_RELAXED) != (size_t)-1 &&
        __atomic_sub_fetch(&v->refcount, 1, __ATOMIC_ACQ_REL) == 0)
        json_delete(v); /* what json_decref calls: the last reference is gone */
}

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
