/* hash.h — FNV-1a, the tree's one non-cryptographic hash (hash tables,
 * cache keys, state interning). Not for anything an adversary may choose
 * to collide on purpose where a collision would cost more than a slower
 * lookup: every user compares keys after a hash match.
 *
 * Layering: base (header only, libc).
 *
 * tr_fnv1a hashes bytes; tr_fnv1a_word folds one 64-bit value in at once
 * (the callers that hash ids, pointers or counts: cheaper than feeding its
 * eight bytes, and a different value from doing so). Start from
 * TR_FNV1A_BASIS, or from a previous result to chain several pieces.
 *
 * tr_splitmix64 is not a hash of bytes but a mixer of one 64-bit value
 * (a bijection, every input bit spread over the output): for seeds and
 * ids, where neighbouring inputs must give unrelated outputs.
 */
#ifndef TR_BASE_HASH_H
#define TR_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define TR_FNV1A_BASIS 0xcbf29ce484222325ull
#define TR_FNV1A_PRIME 0x100000001b3ull

static inline uint64_t tr_fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * TR_FNV1A_PRIME;
    return h;
}

static inline uint64_t tr_fnv1a_word(uint64_t h, uint64_t v) {
    return (h ^ v) * TR_FNV1A_PRIME;
}

/* SplitMix64 (Steele, Lea, Flood 2014): the output for state x is
 * tr_splitmix64(x), and the next state is x + TR_SPLITMIX64_GAMMA. */
#define TR_SPLITMIX64_GAMMA 0x9e3779b97f4a7c15ull

static inline uint64_t tr_splitmix64(uint64_t x) {
    uint64_t z = x + TR_SPLITMIX64_GAMMA;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
