/* status.h — the one status type of Trellis, parser diagnostics, and the
 * formatter of error messages into a caller's (err, cap) buffer.
 *
 * Layering: the bottom of everything; every module may include it.
 * Every fallible function returns tr_status: 0 (TR_OK) or a negative code
 * from the X-macro table below, which also yields each code's name and
 * message. Parsers of untrusted input additionally fill an optional
 * tr_diag (code, byte offset, line, column, message) saying what, where
 * and why. Thread-safe: no state.
 */
#ifndef TR_BASE_STATUS_H
#define TR_BASE_STATUS_H

#include <stddef.h>
#include <stdint.h>

/* C linkage for the CUDA backend's .cu files (compiled as C++). */
#ifdef __cplusplus
extern "C" {
#endif

#define TR_STATUS_LIST(X)                                              \
    X(TR_OK, 0, "ok")                                                  \
    X(TR_ERR_NOMEM, -1, "out of memory")                               \
    X(TR_ERR_INVALID_ARG, -2, "invalid argument")                      \
    X(TR_ERR_IO, -3, "input/output error")                             \
    X(TR_ERR_FORMAT, -4, "malformed input")                            \
    X(TR_ERR_UNSUPPORTED, -5, "unsupported feature")                   \
    X(TR_ERR_NOT_FOUND, -6, "not found")                               \
    X(TR_ERR_OVERFLOW, -7, "size or count overflows")                  \
    X(TR_ERR_LIMIT, -8, "configured limit exceeded")                   \
    X(TR_ERR_STATE, -9, "operation not valid in this state")           \
    X(TR_ERR_FULL, -10, "capacity exhausted")                          \
    X(TR_ERR_CANCELLED, -11, "cancelled")                              \
    X(TR_ERR_TOO_LONG, -12, "input longer than the context allows")    \
    X(TR_ERR_INTERNAL, -13, "internal error")

typedef enum tr_status {
#define TR_STATUS_ENUM_(name, value, msg) name = value,
    TR_STATUS_LIST(TR_STATUS_ENUM_)
#undef TR_STATUS_ENUM_
} tr_status;

/* "TR_ERR_NOMEM"; "TR_UNKNOWN_STATUS" for values outside the table. */
const char *tr_status_name(tr_status s);
/* "out of memory"; never NULL. */
const char *tr_status_message(tr_status s);

/* Diagnostic filled by parsers. Line and column are 1-based, 0 when the
 * input has no lines (binary files). offset is the byte offset in the input. */
typedef struct tr_diag {
    tr_status code;
    uint64_t offset;
    int line;
    int column;
    char message[384];
} tr_diag;

/* Fills *d (d may be NULL: then nothing happens) and returns code, so that
 * callers can write `return tr_diag_set(d, TR_ERR_FORMAT, off, "...")`. */
tr_status tr_diag_set(tr_diag *d, tr_status code, uint64_t offset,
                      const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Same, with line and column. */
tr_status tr_diag_set_at(tr_diag *d, tr_status code, uint64_t offset,
                         int line, int column, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Formats a message into the caller's buffer err[0..cap) and returns code,
 * for the functions that report errors as a (char *err, size_t cap) pair:
 * `return tr_errf(err, cap, TR_ERR_INVALID_ARG, "bad %s", what)`.
 * err NULL or cap 0: nothing is written. Truncation is vsnprintf's: at most
 * cap - 1 bytes of the message, always NUL-terminated, cut at a byte (it may
 * end inside a UTF-8 sequence). */
tr_status tr_errf(char *err, size_t cap, tr_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#ifdef __cplusplus
}
#endif

#endif
