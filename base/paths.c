/* paths.c — see paths.h. */
#include "base/paths.h"

#include <stdio.h>
#include <stdlib.h>

char *tr_default_model_path(char *buf, size_t size) {
    const char *env = getenv("TRELLIS_MODEL");
    int n;
    if (env && *env) {
        n = snprintf(buf, size, "%s", env);
    } else if ((env = getenv("TRELLIS_CACHE")) && *env) {
        n = snprintf(buf, size, "%s/models/%s", env, TR_DEFAULT_MODEL_FILE);
    } else if ((env = getenv("XDG_CACHE_HOME")) && *env) {
        n = snprintf(buf, size, "%s/trellis/models/%s", env,
                     TR_DEFAULT_MODEL_FILE);
    } else {
        env = getenv("HOME");
        n = snprintf(buf, size, "%s/.cache/trellis/models/%s",
                     env && *env ? env : ".", TR_DEFAULT_MODEL_FILE);
    }
    return (n < 0 || (size_t)n >= size) ? NULL : buf;
}
