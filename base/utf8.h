/* utf8.h — UTF-8 for every module: strict decoding (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF), validation with the
 * offset of the first bad byte, encoding, and the prefix test a streaming
 * decoder needs. The tokenizer, the grammar compiler, the engine's request
 * checks and the applications all use these; none has its own copy.
 *
 * Layering: bottom (base). Thread-safe (pure functions).
 */
#ifndef TR_BASE_UTF8_H
#define TR_BASE_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Writes the UTF-8 bytes of code point cp (<= 0x10FFFF; surrogates are
 * encoded as-is, callers that care reject them first) to out; returns the
 * count, 1..4. */
int tr_utf8_encode(uint32_t cp, uint8_t out[4]);

/* Decodes the character at s[0..n): returns its length (1..4) and sets
 * *cp, or returns 0 (and leaves *cp alone) when the bytes there are not a
 * complete, valid character (n == 0 included). */
int tr_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* The offset of the first byte of s[0..n) that does not begin a complete,
 * valid character; n when all of it is valid UTF-8. */
size_t tr_utf8_invalid_at(const void *s, size_t n);

static inline bool tr_utf8_valid(const void *s, size_t n) {
    return tr_utf8_invalid_at(s, n) == n;
}

/* For streaming and for replacing bad bytes: the character s[0] starts
 * (n >= 1) needs *need bytes (1 for ASCII and for a byte that starts no
 * character); returns how many of s[0..n) are a valid beginning of it:
 * *need when it is complete, fewer when the next byte breaks it or s ends
 * first (then, if k == n, it may still complete; else s[0..k) is a
 * "maximal subpart" that one U+FFFD replaces), 0 when s[0] starts no
 * character. */
size_t tr_utf8_partial(const uint8_t *s, size_t n, size_t *need);

#endif
