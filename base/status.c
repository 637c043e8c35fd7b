/* status.c — names and messages of tr_status, diagnostics, error
 * formatting. See status.h. */
#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *tr_status_name(tr_status s) {
    switch (s) {
#define TR_STATUS_NAME_(name, value, msg) \
    case name:                            \
        return #name;
        TR_STATUS_LIST(TR_STATUS_NAME_)
#undef TR_STATUS_NAME_
    }
    return "TR_UNKNOWN_STATUS";
}

const char *tr_status_message(tr_status s) {
    switch (s) {
#define TR_STATUS_MSG_(name, value, msg) \
    case name:                           \
        return msg;
        TR_STATUS_LIST(TR_STATUS_MSG_)
#undef TR_STATUS_MSG_
    }
    return "unknown status";
}

static void diag_vset(tr_diag *d, tr_status code, uint64_t offset, int line,
                      int column, const char *fmt, va_list ap) {
    d->code = code;
    d->offset = offset;
    d->line = line;
    d->column = column;
    vsnprintf(d->message, sizeof d->message, fmt, ap);
}

tr_status tr_diag_set(tr_diag *d, tr_status code, uint64_t offset,
                      const char *fmt, ...) {
    if (d) {
        va_list ap;
        va_start(ap, fmt);
        diag_vset(d, code, offset, 0, 0, fmt, ap);
        va_end(ap);
    }
    return code;
}

tr_status tr_diag_set_at(tr_diag *d, tr_status code, uint64_t offset,
                         int line, int column, const char *fmt, ...) {
    if (d) {
        va_list ap;
        va_start(ap, fmt);
        diag_vset(d, code, offset, line, column, fmt, ap);
        va_end(ap);
    }
    return code;
}

tr_status tr_errf(char *err, size_t cap, tr_status code, const char *fmt, ...) {
    if (err && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, cap, fmt, ap);
        va_end(ap);
    }
    return code;
}
