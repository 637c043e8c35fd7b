/* test_utf8.c — base/utf8 against PCRE2's UTF-8 validity check (an
 * independent implementation): every byte string of 1 to 3 bytes, and a
 * few million random and near-boundary strings of 4 to 8 bytes, get the
 * same verdict and, where invalid, the same offset; decoding then encoding
 * gives the bytes back; every code point encodes to what decodes to it;
 * tr_utf8_partial agrees with decode on complete characters and on every
 * prefix of one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/utf8.h"

typedef struct oracle {
    pcre2_code *re;
    pcre2_match_data *md;
} oracle;

static oracle oracle_new(void) {
    int err;
    PCRE2_SIZE off;
    oracle o;
    o.re = pcre2_compile((PCRE2_SPTR) "", 0, PCRE2_UTF, &err, &off, NULL);
    assert_non_null(o.re);
    o.md = pcre2_match_data_create(1, NULL);
    assert_non_null(o.md);
    return o;
}

static void oracle_free(oracle *o) {
    pcre2_match_data_free(o->md);
    pcre2_code_free(o->re);
}

/* PCRE2 checks the whole subject before matching; on failure the match
 * data's "right-most" offset is where the bad character starts. */
static size_t oracle_invalid_at(oracle *o, const uint8_t *s, size_t n) {
    int rc = pcre2_match(o->re, s, n, 0, 0, o->md, NULL);
    if (rc >= 0 || rc == PCRE2_ERROR_NOMATCH) return n;
    assert_true(rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21);
    return pcre2_get_startchar(o->md);
}

static void check(oracle *o, const uint8_t *s, size_t n) {
    size_t want = oracle_invalid_at(o, s, n), got = tr_utf8_invalid_at(s, n);
    if (want != got) {
        char hex[64] = "";
        for (size_t i = 0; i < n; i++) snprintf(hex + 3 * i, 4, "%02X ", s[i]);
        fail_msg("%s: pcre2 says %zu, tr_utf8_invalid_at %zu", hex, want, got);
    }
    assert_int_equal(tr_utf8_valid(s, n), want == n);
}

static void test_exhaustive_short(void **state) {
    (void)state;
    oracle o = oracle_new();
    uint8_t b[3];
    for (uint32_t x = 0; x < 256; x++) {
        b[0] = (uint8_t)x;
        check(&o, b, 1);
    }
    for (uint32_t x = 0; x < 65536; x++) {
        b[0] = (uint8_t)(x >> 8), b[1] = (uint8_t)x;
        check(&o, b, 2);
    }
    for (uint32_t x = 0; x < (1u << 24); x++) {
        b[0] = (uint8_t)(x >> 16), b[1] = (uint8_t)(x >> 8), b[2] = (uint8_t)x;
        check(&o, b, 3);
    }
    oracle_free(&o);
}

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* Bytes drawn mostly from the interesting ranges: lead bytes, the edges
 * of the second-byte ranges, continuation bytes. */
static uint8_t pick(uint64_t *s) {
    static const uint8_t edge[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF,
                                   0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4,
                                   0xF5, 0xFF};
    uint64_t r = rng(s);
    return (r & 3) ? edge[(r >> 8) % sizeof edge] : (uint8_t)(r >> 16);
}

static void test_random_longer(void **state) {
    (void)state;
    oracle o = oracle_new();
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    uint8_t b[8];
    for (int i = 0; i < 3000000; i++) {
        size_t n = 4 + (size_t)(rng(&seed) % 5);
        for (size_t k = 0; k < n; k++) b[k] = pick(&seed);
        check(&o, b, n);
    }
    oracle_free(&o);
}

static void test_round_trip(void **state) {
    (void)state;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        uint8_t b[4];
        int n = tr_utf8_encode(cp, b);
        assert_true(n >= 1 && n <= 4);
        uint32_t back = 0xFFFFFFFF;
        assert_int_equal(tr_utf8_decode(b, (size_t)n, &back), n);
        assert_int_equal(back, cp);
        size_t need;
        assert_int_equal(tr_utf8_partial(b, (size_t)n, &need), (size_t)n);
        assert_int_equal(need, (size_t)n);
        for (int k = 1; k < n; k++) { /* every proper prefix may still complete */
            assert_int_equal(tr_utf8_partial(b, (size_t)k, &need), (size_t)k);
            assert_int_equal(need, (size_t)n);
            assert_int_equal(tr_utf8_decode(b, (size_t)k, &back), 0);
        }
    }
    uint32_t cp = 7;
    assert_int_equal(tr_utf8_decode((const uint8_t *)"", 0, &cp), 0);
    assert_int_equal(cp, 7); /* untouched */
    size_t need;
    assert_int_equal(tr_utf8_partial((const uint8_t *)"\x80", 1, &need), 0);
    assert_int_equal(need, 1);
    /* a surrogate's lead is fine, its second byte is not */
    assert_int_equal(tr_utf8_partial((const uint8_t *)"\xED\xA0\x80", 3, &need), 1);
    assert_int_equal(need, 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exhaustive_short),
        cmocka_unit_test(test_random_longer),
        cmocka_unit_test(test_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
