/* kv_record.c — the disk tier's keys, payload hash and record header.
 * Contract in kv_disk.h. Pure functions, any thread.
 *
 * Header, little-endian as written by this host (the magic's last byte
 * tells a foreign byte order apart: it fails as a bad magic):
 *   0  "TRKVDSK" + '1'         8
 *   8  version (1), u32        12 page_size, u32
 *   16 fingerprint, u64        24 key a, b          40 parent a, b
 *   56 payload bytes, u64      64 payload hash, u64
 *   72 tokens, page_size x i32, then zero padding to a multiple of 8
 *   last 8 bytes: tr_kvd_hash of everything before them
 */
#include <string.h>

#include "base/hash.h"
#include "radix/disk/kv_disk.h"

#define REC_VERSION 1u
#define REC_FIXED 72u
static const char k_magic[8] = {'T', 'R', 'K', 'V', 'D', 'S', 'K', '1'};

tr_kvd_key tr_kvd_key_root(uint64_t fingerprint, uint64_t ns) {
    tr_kvd_key k = {tr_splitmix64(fingerprint ^ 0x6b766469736b0001ull),
                    tr_splitmix64(fingerprint + 0x51ed27aa1f3b9d2cull)};
    k.a = tr_splitmix64(k.a ^ ns);
    k.b = tr_splitmix64(k.b + ns * 0xff51afd7ed558ccdull);
    return k;
}

/* Two different mixers, so that the halves do not collide together. */
tr_kvd_key tr_kvd_key_next(tr_kvd_key parent, const int32_t *tokens, int32_t n) {
    uint64_t a = parent.a, b = parent.b;
    for (int32_t i = 0; i < n; i++) {
        uint64_t t = (uint32_t)tokens[i];
        a = tr_splitmix64(a ^ t);
        b = (b ^ (t + 0x9fb21c651e98df25ull)) * 0xc4ceb9fe1a85ec53ull;
        b ^= b >> 29;
    }
    a = tr_splitmix64(a ^ (uint64_t)n);
    b = tr_splitmix64(b + 0x2545f4914f6cdd1dull);
    return (tr_kvd_key){a, b};
}

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

#define P1 0x9e3779b185ebca87ull
#define P2 0xc2b2ae3d27d4eb4full

static inline uint64_t lane(uint64_t acc, uint64_t w) {
    return rotl(acc + w * P2, 31) * P1;
}

uint64_t tr_kvd_hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t v[4] = {P1 + P2, P2, 0, (uint64_t)0 - P1};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, s + i + 8 * (size_t)k, 8);
            v[k] = lane(v[k], w);
        }
    uint64_t h = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18);
    h ^= (uint64_t)n * P1;
    for (; i < n; i++) h = rotl(h ^ (s[i] * P2), 23) * P1;
    return tr_splitmix64(h);
}

size_t tr_kvd_header_bytes(int32_t page_size) {
    if (page_size < 1 || page_size > 65536) return 0;
    size_t body = REC_FIXED + 4u * (size_t)page_size;
    return ((body + 7u) & ~(size_t)7u) + 8u;
}

static void put64(unsigned char *h, size_t at, uint64_t v) { memcpy(h + at, &v, 8); }
static uint64_t get64(const unsigned char *h, size_t at) {
    uint64_t v;
    memcpy(&v, h + at, 8);
    return v;
}
static uint32_t get32(const unsigned char *h, size_t at) {
    uint32_t v;
    memcpy(&v, h + at, 4);
    return v;
}

void tr_kvd_header_write(void *hv, const tr_kvd_expect *x, uint64_t payload_hash) {
    unsigned char *h = hv;
    size_t hb = tr_kvd_header_bytes(x->page_size);
    if (hb == 0) return; /* a page size out of range has no header */
    memset(h, 0, hb);
    memcpy(h, k_magic, 8);
    uint32_t ver = REC_VERSION, ps = (uint32_t)x->page_size;
    memcpy(h + 8, &ver, 4);
    memcpy(h + 12, &ps, 4);
    put64(h, 16, x->fingerprint);
    put64(h, 24, x->key.a);
    put64(h, 32, x->key.b);
    put64(h, 40, x->parent.a);
    put64(h, 48, x->parent.b);
    put64(h, 56, x->payload_bytes);
    put64(h, 64, payload_hash);
    memcpy(h + REC_FIXED, x->tokens, 4u * (size_t)x->page_size);
    put64(h, hb - 8, tr_kvd_hash(h, hb - 8));
}

static tr_status bad(char *why, size_t cap, const char *what) {
    if (why && cap) {
        strncpy(why, what, cap - 1);
        why[cap - 1] = 0;
    }
    return TR_ERR_FORMAT;
}

tr_status tr_kvd_header_check(const void *hv, size_t n, const tr_kvd_expect *x,
                              uint64_t *payload_hash, char *why, size_t cap) {
    const unsigned char *h = hv;
    size_t hb = tr_kvd_header_bytes(x->page_size);
    if (hb == 0) return bad(why, cap, "page size out of range");
    if (n < hb) return bad(why, cap, "record shorter than its header");
    if (memcmp(h, k_magic, 8) != 0) return bad(why, cap, "bad magic");
    if (get32(h, 8) != REC_VERSION) return bad(why, cap, "unknown version");
    if (get32(h, 12) != (uint32_t)x->page_size) return bad(why, cap, "other page size");
    if (get64(h, hb - 8) != tr_kvd_hash(h, hb - 8)) return bad(why, cap, "header hash");
    if (get64(h, 16) != x->fingerprint) return bad(why, cap, "other fingerprint");
    if (get64(h, 24) != x->key.a || get64(h, 32) != x->key.b)
        return bad(why, cap, "other key");
    if (get64(h, 40) != x->parent.a || get64(h, 48) != x->parent.b)
        return bad(why, cap, "other parent");
    if (get64(h, 56) != x->payload_bytes) return bad(why, cap, "other payload size");
    if (x->tokens && memcmp(h + REC_FIXED, x->tokens, 4u * (size_t)x->page_size) != 0)
        return bad(why, cap, "other tokens");
    for (size_t i = REC_FIXED + 4u * (size_t)x->page_size; i < hb - 8; i++)
        if (h[i]) return bad(why, cap, "padding not zero");
    if (payload_hash) *payload_hash = get64(h, 64);
    return TR_OK;
}
