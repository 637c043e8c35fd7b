/* test_env.h — what the environment says about how much to test, shared
 * by the unit tests that run the real model.
 *
 *   TRELLIS_TEST_SCALE=small   the sanitizer pass of scripts/test.sh: the
 *                              same checks on fewer cases
 *   the default model          present at tr_default_model_path() (else
 *                              model tests skip, saying so)
 */
#ifndef TR_TESTS_UNIT_TEST_ENV_H
#define TR_TESTS_UNIT_TEST_ENV_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/paths.h"

static inline bool small_scale(void) {
    const char *s = getenv("TRELLIS_TEST_SCALE");
    return s && strcmp(s, "small") == 0;
}

static inline bool model_present(void) {
    char path[4096];
    return tr_default_model_path(path, sizeof path) && access(path, R_OK) == 0;
}

#endif
