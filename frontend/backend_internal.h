/* backend_internal.h — helpers the backends share (backend.c).
 * Layering: frontend, internal (backends only). Thread-safe. */
#ifndef TR_FRONTEND_BACKEND_INTERNAL_H
#define TR_FRONTEND_BACKEND_INTERNAL_H

#include "frontend/backend.h"

/* A regex matching exactly one of choices[0..n): an alternation of the
 * choices with every ASCII punctuation escaped. malloc'd; NULL when out
 * of memory. */
char *tr_dsl_choices_regex(const char *const *choices, int32_t n);

#endif
