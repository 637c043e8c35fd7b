/* cpset.c — sets of Unicode code points as sorted range lists, and the
 * UTF-8 codec the regex compiler and the tests share.
 *
 * Layering: grammar/regex (regex.h). Sets live in a compile context's arena.
 * Invariant of a normalized set: ranges sorted, disjoint, not adjacent,
 * inside [0, 0x10FFFF], and surrogates (U+D800..U+DFFF, which UTF-8
 * cannot encode) never members: tr_cpset_add drops them on the way in.
 */
#include "base/utf8.h"
#include <stdlib.h>
#include <string.h>

#include "grammar/regex/regex_internal.h"

static tr_status push_range(gcc *cc, gcpset *s, uint32_t lo, uint32_t hi) {
    if (s->n == s->cap) {
        uint32_t nc = s->cap ? s->cap * 2 : 4;
        if (nc > (1u << 24))
            return tr_gcc_fail(cc, TR_ERR_LIMIT, 0, "character class too large");
        uint32_t(*r)[2] = tr_gcc_alloc(cc, (size_t)nc * sizeof *r);
        if (!r) return cc->err;
        if (s->n) memcpy(r, s->r, (size_t)s->n * sizeof *r);
        s->r = r;
        s->cap = nc;
    }
    s->r[s->n][0] = lo;
    s->r[s->n][1] = hi;
    s->n++;
    return TR_OK;
}

tr_status tr_cpset_add(gcc *cc, gcpset *s, uint32_t lo, uint32_t hi) {
    if (lo > hi || lo > GCP_MAX) return TR_OK;
    if (hi > GCP_MAX) hi = GCP_MAX;
    /* cut the surrogates out */
    if (lo <= GCP_SURR_HI && hi >= GCP_SURR_LO) {
        tr_status st = TR_OK;
        if (lo < GCP_SURR_LO) st = push_range(cc, s, lo, GCP_SURR_LO - 1);
        if (st == TR_OK && hi > GCP_SURR_HI)
            st = push_range(cc, s, GCP_SURR_HI + 1, hi);
        return st;
    }
    return push_range(cc, s, lo, hi);
}

tr_status tr_cpset_add_set(gcc *cc, gcpset *s, const gcpset *t) {
    for (uint32_t i = 0; i < t->n; i++) {
        tr_status st = tr_cpset_add(cc, s, t->r[i][0], t->r[i][1]);
        if (st) return st;
    }
    return TR_OK;
}

tr_status tr_cpset_add_table(gcc *cc, gcpset *s, const uint32_t (*r)[2],
                           size_t n) {
    for (size_t i = 0; i < n; i++) {
        tr_status st = tr_cpset_add(cc, s, r[i][0], r[i][1]);
        if (st) return st;
    }
    return TR_OK;
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* Ranges by their first code point; most sets come written in order or
 * have a few ranges, which qsort would pay for with a buffer and calls. */
static void sort_ranges(gcpset *s) {
    uint32_t n = s->n;
    bool sorted = true;
    for (uint32_t i = 1; i < n && sorted; i++) sorted = s->r[i - 1][0] <= s->r[i][0];
    if (sorted) return;
    if (n > 16) {
        qsort(s->r, n, sizeof *s->r, cmp_range);
        return;
    }
    for (uint32_t i = 1; i < n; i++) {
        uint32_t lo = s->r[i][0], hi = s->r[i][1], j = i;
        for (; j > 0 && s->r[j - 1][0] > lo; j--) {
            s->r[j][0] = s->r[j - 1][0];
            s->r[j][1] = s->r[j - 1][1];
        }
        s->r[j][0] = lo;
        s->r[j][1] = hi;
    }
}

void tr_cpset_normalize(gcpset *s) {
    if (s->n < 2) return;
    sort_ranges(s);
    uint32_t w = 0;
    for (uint32_t i = 1; i < s->n; i++) {
        /* merge overlapping or adjacent (hi + 1 == lo) ranges */
        if (s->r[i][0] <= s->r[w][1] + 1) {
            if (s->r[i][1] > s->r[w][1]) s->r[w][1] = s->r[i][1];
        } else {
            w++;
            s->r[w][0] = s->r[i][0];
            s->r[w][1] = s->r[i][1];
        }
    }
    s->n = w + 1;
}

tr_status tr_cpset_complement(gcc *cc, const gcpset *s, gcpset *out) {
    memset(out, 0, sizeof *out);
    uint32_t next = 0; /* first code point not yet covered */
    for (uint32_t i = 0; i < s->n; i++) {
        if (s->r[i][0] > next) {
            tr_status st = tr_cpset_add(cc, out, next, s->r[i][0] - 1);
            if (st) return st;
        }
        next = s->r[i][1] + 1;
    }
    if (next <= GCP_MAX) return tr_cpset_add(cc, out, next, GCP_MAX);
    return TR_OK;
}

bool tr_cpset_contains(const gcpset *s, uint32_t cp) {
    uint32_t lo = 0, hi = s->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (cp < s->r[mid][0])
            hi = mid;
        else if (cp > s->r[mid][1])
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

