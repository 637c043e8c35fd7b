/* log.c — see log.h. */
#include "base/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

static _Atomic int g_log_level = TR_LOG_WARN;

void tr_log_set_level(tr_log_level level) {
    atomic_store_explicit(&g_log_level, (int)level, memory_order_relaxed);
}

tr_log_level tr_log_get_level(void) {
    return (tr_log_level)atomic_load_explicit(&g_log_level,
                                              memory_order_relaxed);
}

void tr_log(tr_log_level level, const char *fmt, ...) {
    static const char *const names[] = {"error", "warn", "info", "debug"};
    if ((int)level > atomic_load_explicit(&g_log_level, memory_order_relaxed))
        return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "trellis %s: %s\n", names[level & 3], buf);
}
