/* test_env.h — what the environment says about how much to test, shared
 * by the unit tests that run the real model.
 *
 *   TRELLIS_TEST_SCALE=small   the sanitizer pass of scripts/test.sh: the
 *                              same checks on fewer cases
 *   the default model          present at tr_default_model_path() (else
 *                              model tests skip, saying so)
 *   Gemma 3 270M               in the model cache (else the gemma tests
 *                              fail, saying how to fetch it)
 */
#ifndef TR_TESTS_UNIT_TEST_ENV_H
#define TR_TESTS_UNIT_TEST_ENV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
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

/* The Gemma 3 270M file of the model cache in path[0..cap); false, saying
 * on stderr how to fetch it, when it is missing: the gemma tests then fail
 * in their group setup (they never skip: ctest label gemma). */
static inline bool gemma_model_path(char *path, size_t cap) {
    if (tr_cached_model_path(TR_GEMMA3_MODEL_FILE, path, cap) && access(path, R_OK) == 0)
        return true;
    fprintf(stderr, "Gemma 3 model missing at %s (run scripts/setup.sh --model "
                    "gemma3-270m)\n",
            path);
    return false;
}

#endif
