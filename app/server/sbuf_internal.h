/* sbuf_internal.h — the server's growable byte buffer: responses, SSE chunks and
 * request bodies are assembled in one before they reach the socket.
 *
 * Layering: app/server, bottom (libc only). Not thread-safe: a buffer
 * belongs to one owner at a time.
 *
 * Invariants: data[len] == '\0' whenever data != NULL (so a buffer of text
 * is a C string); len <= cap. A failed append (out of memory, or the
 * buffer would pass its limit) leaves the buffer unchanged and returns -1;
 * callers treat that as an error of the whole response, never as a
 * truncation.
 */
#ifndef TR_SERVER_SBUF_H
#define TR_SERVER_SBUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct tr_sbuf {
    char *data;   /* owned; NULL until the first append */
    size_t len;
    size_t cap;   /* allocated bytes, the NUL included */
    size_t limit; /* most bytes it may hold; 0 = no limit */
} tr_sbuf;

/* 0, or -1 (unchanged) when out of memory or past limit. */
int tr_sbuf_append(tr_sbuf *b, const void *p, size_t n);
int tr_sbuf_puts(tr_sbuf *b, const char *s);
int tr_sbuf_printf(tr_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s[0..n) as the inside of a JSON string (quotes not included):
 * control characters, '"' and '\\' escaped; bytes >= 0x80 copied (the
 * caller passes valid UTF-8). */
int tr_sbuf_json_str(tr_sbuf *b, const char *s, size_t n);
/* Hands the bytes to the caller (free with free()); the buffer is empty. */
char *tr_sbuf_take(tr_sbuf *b, size_t *len);
void tr_sbuf_reset(tr_sbuf *b); /* frees the data, keeps the limit */

#endif
