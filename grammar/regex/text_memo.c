/* text_memo.c — trees by the text they were parsed from (regex.h,
 * gre_memo): open addressing over (hash, text), doubled at half full.
 *
 * Layering: grammar/regex (regex.h); used by the grammar parser for its
 * terminals. Single-threaded per compile.
 */
#include <string.h>

#include "grammar/regex/regex.h"

uint64_t tr_gre_memo_hash(const void *text, size_t len) {
    const uint8_t *s = text;
    uint64_t h = TR_FNV1A_BASIS, w;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) memcpy(&w, s + i, 8), h = tr_fnv1a_word(h, w);
    return tr_fnv1a(h, s + i, len - i);
}

static gre_memo_ent *slot_of(const gre_memo *m, const void *text, size_t len, uint64_t h) {
    uint32_t mask = m->cap - 1;
    for (uint32_t j = (uint32_t)h & mask;; j = (j + 1) & mask) {
        gre_memo_ent *t = &m->slot[j];
        if (!t->node || (t->hash == h && t->len == len && !memcmp(t->text, text, len)))
            return t;
    }
}

gre_node *tr_gre_memo_get(const gre_memo *m, const void *text, size_t len, uint64_t hash) {
    return m->cap ? slot_of(m, text, len, hash)->node : NULL;
}

tr_status tr_gre_memo_put(gcc *cc, gre_memo *m, const void *text, size_t len, uint64_t hash,
                          gre_node *node) {
    if (2 * (m->n + 1) > m->cap) {
        gre_memo_ent *old = m->slot;
        uint32_t old_cap = m->cap, cap = old_cap ? 2 * old_cap : 64;
        gre_memo_ent *t = tr_gcc_alloc(cc, (size_t)cap * sizeof *t);
        if (!t) return cc->err;
        m->slot = t, m->cap = cap;
        for (uint32_t i = 0; i < old_cap; i++)
            if (old[i].node) *slot_of(m, old[i].text, old[i].len, old[i].hash) = old[i];
    }
    *slot_of(m, text, len, hash) = (gre_memo_ent){hash, text, len, node};
    m->n++;
    return TR_OK;
}
