/* fuzz_kv_record.c — libFuzzer target for the disk tier's record header
 * checker, tr_kvd_header_check (radix/disk/kv_record.c): the parser of
 * bytes read back from disk, which a torn write, a flipped bit or another
 * program's file can make anything.
 *
 * Input: byte 0 picks the page size (1 + b % 64), byte 1 a change to the
 * expectation (b % 10: none, fingerprint, key a, key b, parent a,
 * parent b, payload size, first token, no tokens, page size + 1); the rest
 * is the header. The expectation is read from the header's own fields
 * (zero where it is short), so a valid header (the seeds) passes and each
 * change reaches one field's check.
 *
 * Checked, aborting on a violation:
 *  - the checker agrees with a reference written here from the format in
 *    kv_record.c's comment (length, magic, version, page size, header
 *    hash, fields, tokens, zero padding), reads nothing past n bytes
 *    (ASan: the header is copied to a buffer of exactly n bytes), gives the
 *    payload hash field on success and a terminated reason on failure,
 *    with or without a reason buffer;
 *  - an accepted header is canonical: writing it again from what was
 *    expected gives the same bytes;
 *  - a header written by tr_kvd_header_write passes, is refused one byte
 *    short, and is refused with any one byte changed (each in turn).
 * Replayed over tests/fuzz/corpus/kv_record/ by ctest (replay_kv_record).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "radix/disk/kv_disk.h"

#define FZ_CHECK(cond)                                                      \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "fuzz_kv_record: check failed: %s (line %d)\n", \
                    #cond, __LINE__);                                       \
            abort();                                                        \
        }                                                                   \
    } while (0)

enum { FZ_MAX_PS = 65, FZ_FIXED = 72 };

static uint64_t rd64(const uint8_t *h, size_t n, size_t at) {
    uint64_t v = 0;
    if (at + 8 <= n) memcpy(&v, h + at, 8);
    return v;
}
static uint32_t rd32(const uint8_t *h, size_t n, size_t at) {
    uint32_t v = 0;
    if (at + 4 <= n) memcpy(&v, h + at, 4);
    return v;
}

/* The format, as its comment states it; the hash is the library's (its
 * own properties are tested in test_kv_disk.c). */
static size_t ref_header_bytes(int32_t ps) {
    return ((FZ_FIXED + 4 * (size_t)ps + 7) / 8) * 8 + 8;
}

static bool ref_ok(const uint8_t *h, size_t n, const tr_kvd_expect *x) {
    if (x->page_size < 1 || x->page_size > 65536) return false;
    size_t hb = ref_header_bytes(x->page_size);
    if (n < hb) return false;
    if (memcmp(h, "TRKVDSK1", 8) != 0 || rd32(h, n, 8) != 1 ||
        rd32(h, n, 12) != (uint32_t)x->page_size)
        return false;
    if (rd64(h, n, hb - 8) != tr_kvd_hash(h, hb - 8)) return false;
    if (rd64(h, n, 16) != x->fingerprint || rd64(h, n, 24) != x->key.a ||
        rd64(h, n, 32) != x->key.b || rd64(h, n, 40) != x->parent.a ||
        rd64(h, n, 48) != x->parent.b || rd64(h, n, 56) != x->payload_bytes)
        return false;
    size_t tb = 4 * (size_t)x->page_size;
    if (x->tokens && memcmp(h + FZ_FIXED, x->tokens, tb) != 0) return false;
    for (size_t i = FZ_FIXED + tb; i < hb - 8; i++)
        if (h[i]) return false;
    return true;
}

/* The checker on h[0..n), every way it can be called, against ref_ok. */
static tr_status check_all(const uint8_t *h, size_t n, const tr_kvd_expect *x,
                           uint64_t *payload_hash) {
    char why[96];
    memset(why, 'x', sizeof why);
    uint64_t ph = 0x5eed;
    tr_status s = tr_kvd_header_check(h, n, x, &ph, why, sizeof why);
    FZ_CHECK(s == TR_OK || s == TR_ERR_FORMAT);
    FZ_CHECK((s == TR_OK) == ref_ok(h, n, x));
    if (s == TR_OK) {
        FZ_CHECK(ph == rd64(h, n, 64));
    } else {
        FZ_CHECK(ph == 0x5eed); /* untouched */
        FZ_CHECK(memchr(why, 0, sizeof why) != NULL && why[0] != 0);
    }
    FZ_CHECK(tr_kvd_header_check(h, n, x, NULL, NULL, 0) == s);
    char one[1] = {'x'};
    FZ_CHECK(tr_kvd_header_check(h, n, x, NULL, one, 1) == s);
    FZ_CHECK(s == TR_OK ? one[0] == 'x' : one[0] == 0);
    if (payload_hash) *payload_hash = ph;
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int32_t ps = 1 + data[0] % 64;
    int change = data[1] % 10;
    size_t n = size - 2;
    /* exactly n bytes, so that ASan sees any read past them */
    uint8_t *h = malloc(n ? n : 1);
    FZ_CHECK(h != NULL);
    if (n) memcpy(h, data + 2, n);

    /* the expectation: the header's own fields, then one changed */
    int32_t toks[FZ_MAX_PS + 1] = {0};
    for (int32_t i = 0; i < FZ_MAX_PS; i++)
        toks[i] = (int32_t)rd32(h, n, FZ_FIXED + 4 * (size_t)i);
    tr_kvd_expect x = {.fingerprint = rd64(h, n, 16),
                       .page_size = ps,
                       .payload_bytes = rd64(h, n, 56),
                       .key = {rd64(h, n, 24), rd64(h, n, 32)},
                       .parent = {rd64(h, n, 40), rd64(h, n, 48)},
                       .tokens = toks};
    switch (change) {
    case 1: x.fingerprint ^= 1; break;
    case 2: x.key.a += 1; break;
    case 3: x.key.b ^= 1ull << 63; break;
    case 4: x.parent.a -= 1; break;
    case 5: x.parent.b ^= 0xff; break;
    case 6: x.payload_bytes += 1; break;
    case 7: toks[0] ^= 1; break;
    case 8: x.tokens = NULL; break;
    case 9: x.page_size += 1; break;
    default: break;
    }
    size_t hb = tr_kvd_header_bytes(x.page_size);
    FZ_CHECK(hb == ref_header_bytes(x.page_size));

    /* 1. the input as a header */
    uint64_t ph = 0;
    if (check_all(h, n, &x, &ph) == TR_OK) {
        /* canonical: written again from what it was checked against */
        uint8_t *w = malloc(hb);
        FZ_CHECK(w != NULL);
        tr_kvd_expect xw = x;
        xw.tokens = toks; /* case 8: the header's own tokens, read above */
        tr_kvd_header_write(w, &xw, ph);
        FZ_CHECK(memcmp(w, h, hb) == 0);
        free(w);
    }
    free(h);

    /* 2. a header written from the expectation (its tokens, a payload hash
     * of the input) passes, then fails one byte short and one byte off */
    x.tokens = toks;
    uint64_t want = tr_kvd_hash(data, size);
    uint8_t *w = malloc(hb + 8);
    FZ_CHECK(w != NULL);
    memset(w, 0xa5, hb + 8);
    tr_kvd_header_write(w, &x, want);
    for (size_t i = hb; i < hb + 8; i++) FZ_CHECK(w[i] == 0xa5); /* nothing past hb */
    FZ_CHECK(check_all(w, hb, &x, &ph) == TR_OK && ph == want);
    FZ_CHECK(check_all(w, hb + 8, &x, &ph) == TR_OK && ph == want);
    FZ_CHECK(check_all(w, hb - 1, &x, NULL) == TR_ERR_FORMAT);
    for (size_t i = 0; i < hb; i++) {
        uint8_t v = data[i % size];
        if (!v) v = 0x80;
        w[i] ^= v;
        FZ_CHECK(check_all(w, hb, &x, NULL) == TR_ERR_FORMAT);
        w[i] ^= v;
    }
    free(w);
    return 0;
}
