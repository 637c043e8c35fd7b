/* utf8.c — see utf8.h. */
#include "base/utf8.h"

int tr_utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* The lead byte fixes the length and the range of the second byte (which
 * is what excludes overlong forms, surrogates and values past U+10FFFF:
 * Unicode 15, table 3-7); every later byte is 80..BF. */
size_t tr_utf8_partial(const uint8_t *s, size_t n, size_t *need) {
    uint8_t b = s[0], lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
        *need = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        *need = 3;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        *need = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        *need = 1;
        return b < 0x80; /* ASCII is a whole character; others start none */
    }
    size_t k = 1;
    while (k < *need && k < n) {
        uint8_t x = s[k];
        if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) break;
        k++;
    }
    return k;
}

int tr_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    size_t need;
    if (tr_utf8_partial(s, n, &need) != need || need == 1) return 0; /* bad lead, broken or cut off */
    uint32_t c = s[0] & (0x7Fu >> need);
    for (size_t k = 1; k < need; k++) c = (c << 6) | (s[k] & 0x3Fu);
    *cp = c;
    return (int)need;
}

size_t tr_utf8_invalid_at(const void *p, size_t n) {
    const uint8_t *s = p;
    size_t i = 0;
    uint32_t cp;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int k = tr_utf8_decode(s + i, n - i, &cp);
        if (k == 0) return i;
        i += (size_t)k;
    }
    return n;
}
