/* utf8.h — UTF-8 encoding shared by the tokenizer, the grammar compiler and
 * the CLI. Layering: bottom. Thread-safe (pure functions). */
#ifndef TR_BASE_UTF8_H
#define TR_BASE_UTF8_H

#include <stdint.h>

/* Writes the UTF-8 bytes of code point cp (<= 0x10FFFF; surrogates are
 * encoded as-is, callers that care reject them first) to out; returns the
 * count, 1..4. */
int tr_utf8_encode(uint32_t cp, uint8_t out[4]);

#endif
