/* util.h — small helpers every module uses: overflow-checked arithmetic,
 * internal-invariant assertions, aligned allocation, a monotonic clock.
 *
 * Layering: bottom; depends on libc only. Thread-safe.
 *
 * TR_ASSERT is for internal invariants only, never for untrusted input
 * (check that and return an error). ALWAYS(x)/NEVER(x) (after SQLite) mark
 * conditions believed impossible that the code nevertheless handles: they
 * assert in debug builds and evaluate to x in release builds.
 */
#ifndef TR_BASE_UTIL_H
#define TR_BASE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define TR_ASSERT(cond)                                                  \
    do {                                                                 \
        if (!(cond)) {                                                   \
            fprintf(stderr, "trellis: internal invariant failed: %s (%s:%d)\n", \
                    #cond, __FILE__, __LINE__);                          \
            abort();                                                     \
        }                                                                \
    } while (0)

/* Reports a broken invariant and aborts; an expression, for ALWAYS/NEVER. */
static inline int tr_invariant_failed_(const char *cond, const char *file,
                                       int line) {
    fprintf(stderr, "trellis: internal invariant failed: %s (%s:%d)\n", cond,
            file, line);
    abort();
    return 0;
}

#ifdef NDEBUG
#define ALWAYS(x) (x)
#define NEVER(x) (x)
#else
#define ALWAYS(x) ((x) ? 1 : tr_invariant_failed_(#x, __FILE__, __LINE__))
#define NEVER(x) ((x) ? tr_invariant_failed_(#x, __FILE__, __LINE__) : 0)
#endif

#define TR_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TR_MAX(a, b) ((a) > (b) ? (a) : (b))
#define TR_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* true on overflow; *out is only meaningful when false is returned. */
static inline bool tr_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline bool tr_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}
static inline bool tr_mul_overflow_size(size_t a, size_t b, size_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline bool tr_add_overflow_size(size_t a, size_t b, size_t *out) {
    return __builtin_add_overflow(a, b, out);
}

/* Greatest common divisor (gcd(a, 0) = a). */
static inline uint64_t tr_gcd_u64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* The value of hexadecimal digit c (either case), -1 when c is not one
 * (any int: EOF and bytes above 127 included). */
static inline int tr_hex_digit(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Aligned allocation (align a power of two >= sizeof(void*)); free with
 * tr_aligned_free. Returns NULL on failure or size overflow. */
void *tr_aligned_alloc(size_t size, size_t align);
void tr_aligned_free(void *p);

/* Monotonic clock in nanoseconds. */
uint64_t tr_now_ns(void);

/* Reads a whole file into a NUL-terminated heap buffer (free with free()).
 * Returns TR_ERR_IO (file missing or unreadable) or TR_ERR_NOMEM. */
int tr_read_file(const char *path, char **out, size_t *out_len);

#endif
