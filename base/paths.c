/* paths.c — see paths.h. */
#include "base/paths.h"

#include <stdio.h>
#include <stdlib.h>

char *tr_cached_model_path(const char *file, char *buf, size_t size) {
    const char *env;
    int n;
    if ((env = getenv("TRELLIS_CACHE")) && *env) {
        n = snprintf(buf, size, "%s/models/%s", env, file);
    } else if ((env = getenv("XDG_CACHE_HOME")) && *env) {
        n = snprintf(buf, size, "%s/trellis/models/%s", env, file);
    } else {
        env = getenv("HOME");
        n = snprintf(buf, size, "%s/.cache/trellis/models/%s",
                     env && *env ? env : ".", file);
    }
    return (n < 0 || (size_t)n >= size) ? NULL : buf;
}

char *tr_default_model_path(char *buf, size_t size) {
    const char *env = getenv("TRELLIS_MODEL");
    if (env && *env) {
        int n = snprintf(buf, size, "%s", env);
        return (n < 0 || (size_t)n >= size) ? NULL : buf;
    }
    return tr_cached_model_path(TR_DEFAULT_MODEL_FILE, buf, size);
}
