/* ngram.c — the n-gram (prompt lookup) proposer (the contract: spec.h).
 *
 * Index. Table n maps the hash of an n-gram to the position where its
 * most recent occurrence ENDS, for occurrences followed by at least one
 * token: the n-gram ending at position p is entered when token p + 1 is
 * appended, so the sequence's own last n-gram is never in its table and a
 * lookup of it finds only earlier text. A slot holds a position (int32,
 * -1 empty); the key is recomputed from the tokens, so a hash collision
 * is caught by comparing them. A slot pointing at or past the end (after
 * a failed append) is treated as a miss.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "runtime/spec/spec.h"

typedef struct ngram_table {
    int32_t *slot;  /* [cap] end positions, -1 empty */
    int32_t *count; /* [cap] occurrences (the 1-gram table only) */
    uint32_t cap;   /* power of two */
    uint32_t used;
} ngram_table;

struct tr_ngram {
    tr_ngram_options o;
    int32_t *tok;
    int32_t len, cap;
    ngram_table t[TR_NGRAM_MAX_N + 1]; /* [n] for n in min_n .. max_n, and
                                          [1] for the unique fallback */
    int32_t draft;    /* current draft length */
    float rate;       /* running acceptance rate */
    int32_t seen;     /* proposals with feedback */
    int32_t off_for;  /* calls left while off */
    int32_t backoff;  /* the next off period */
    int32_t src;      /* where the last proposal was copied from, -1 */
    int32_t cursor;   /* where the copy goes on in the text, -1 none */
};

void tr_ngram_options_default(tr_ngram_options *o) {
    *o = (tr_ngram_options){.min_n = 2, .max_n = 4, .start = 4, .max_draft = 8, .grow = 2,
                            .off_below = 0.2f, .backoff = 16, .unique_1gram = true};
}

static uint64_t gram_hash(const int32_t *t, int32_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int32_t i = 0; i < n; i++) h = tr_fnv1a_word(h, (uint32_t)t[i]);
    return tr_splitmix64(h);
}

tr_status tr_ngram_new(const tr_ngram_options *o, tr_ngram **out, tr_diag *diag) {
    tr_ngram_options d;
    tr_ngram_options_default(&d);
    if (!o) o = &d;
    if (o->min_n < 1 || o->max_n < o->min_n || o->max_n > TR_NGRAM_MAX_N)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "n-gram sizes %d..%d (expected 1 <= min <= max <= %d)", o->min_n,
                           o->max_n, TR_NGRAM_MAX_N);
    if (o->start < 1 || o->max_draft < o->start || o->max_draft > TR_NGRAM_MAX_DRAFT)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "draft lengths start %d, max %d (expected 1 <= start <= max <= %d)",
                           o->start, o->max_draft, TR_NGRAM_MAX_DRAFT);
    if (o->grow < 0 || !(o->off_below >= 0 && o->off_below <= 1) || o->backoff < 1)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "grow %d, off_below %g, backoff %d (expected >= 0, 0..1, >= 1)",
                           o->grow, (double)o->off_below, o->backoff);
    tr_ngram *g = calloc(1, sizeof *g);
    if (!g) return tr_diag_set(diag, TR_ERR_NOMEM, 0, "out of memory");
    g->o = *o;
    g->draft = o->start;
    g->rate = 1.0f;
    g->backoff = o->backoff;
    g->src = g->cursor = -1;
    *out = g;
    return TR_OK;
}

void tr_ngram_free(tr_ngram *g) {
    if (!g) return;
    for (int32_t n = 0; n <= TR_NGRAM_MAX_N; n++) {
        free(g->t[n].slot);
        free(g->t[n].count);
    }
    free(g->tok);
    free(g);
}

static int32_t *find_slot(const ngram_table *t, const int32_t *tok, int32_t n,
                          const int32_t *gram, uint64_t h) {
    uint32_t mask = t->cap - 1;
    for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
        int32_t e = t->slot[i];
        if (e < 0 || memcmp(tok + e - n + 1, gram, (size_t)n * sizeof *gram) == 0)
            return &t->slot[i];
    }
}

static bool grow_table(ngram_table *t, const int32_t *tok, int32_t n, bool counted) {
    uint32_t cap = t->cap ? 2 * t->cap : 64;
    int32_t *s = malloc((size_t)cap * sizeof *s);
    int32_t *c = counted ? calloc(cap, sizeof *c) : NULL;
    if (!s || (counted && !c)) {
        free(s);
        free(c);
        return false;
    }
    memset(s, 0xff, (size_t)cap * sizeof *s);
    ngram_table nt = {s, c, cap, 0};
    for (uint32_t i = 0; i < t->cap; i++) {
        int32_t e = t->slot[i];
        if (e < 0) continue;
        const int32_t *gram = tok + e - n + 1;
        int32_t *to = find_slot(&nt, tok, n, gram, gram_hash(gram, n));
        *to = e;
        if (c) c[to - s] = t->count[i];
        nt.used++;
    }
    free(t->slot);
    free(t->count);
    *t = nt;
    return true;
}

/* Enters the n-gram of size n ending at position p; counted: the table
 * also counts occurrences. */
static bool index_gram(tr_ngram *g, int32_t n, int32_t p, bool counted) {
    ngram_table *t = &g->t[n];
    if (2 * (t->used + 1) > t->cap && !grow_table(t, g->tok, n, counted)) return false;
    const int32_t *gram = g->tok + p - n + 1;
    int32_t *s = find_slot(t, g->tok, n, gram, gram_hash(gram, n));
    if (*s < 0) t->used++;
    *s = p; /* the most recent occurrence */
    if (counted) t->count[s - t->slot]++;
    return true;
}

/* Enters the n-grams ending at position p (its follower p + 1 exists). */
static bool index_end(tr_ngram *g, int32_t p) {
    /* a unique token needs every 1-gram counted, so with min_n 1 the
     * table counts too */
    bool uniq = g->o.unique_1gram;
    if ((uniq || g->o.min_n == 1) && !index_gram(g, 1, p, uniq)) return false;
    for (int32_t n = g->o.min_n > 1 ? g->o.min_n : 2; n <= g->o.max_n && n <= p + 1; n++)
        if (!index_gram(g, n, p, false)) return false;
    return true;
}

tr_status tr_ngram_append(tr_ngram *g, const int32_t *tokens, int32_t n) {
    if (n <= 0) return TR_OK;
    if (g->len + n > g->cap) {
        int32_t cap = g->cap ? g->cap : 256;
        while (cap < g->len + n) cap *= 2;
        int32_t *t = realloc(g->tok, (size_t)cap * sizeof *t);
        if (!t) return TR_ERR_NOMEM;
        g->tok = t;
        g->cap = cap;
    }
    int32_t len0 = g->len;
    memcpy(g->tok + g->len, tokens, (size_t)n * sizeof *tokens);
    for (int32_t p = len0; p < len0 + n; p++) {
        g->len = p + 1;
        if (p > 0 && !index_end(g, p - 1)) {
            g->len = len0; /* what was entered points below len0 or is ignored */
            return TR_ERR_NOMEM;
        }
    }
    return TR_OK;
}

/* Cutting the sequence rebuilds the index: an n-gram's slot keeps only
 * its most recent occurrence, which may lie in the part cut off, and the
 * earlier one must be found again. O(len); rare (rejected drafts are
 * never appended). Out of memory leaves an index that misses some
 * n-grams (fewer proposals, never wrong ones). */
void tr_ngram_truncate(tr_ngram *g, int32_t len) {
    if (len < 0 || len >= g->len) return;
    g->len = len;
    g->src = g->cursor = -1;
    for (int32_t n = 0; n <= TR_NGRAM_MAX_N; n++) {
        ngram_table *t = &g->t[n];
        if (t->cap) memset(t->slot, 0xff, (size_t)t->cap * sizeof *t->slot);
        if (t->count) memset(t->count, 0, (size_t)t->cap * sizeof *t->count);
        t->used = 0;
    }
    for (int32_t p = 0; p + 1 < len; p++)
        if (!index_end(g, p)) return;
}

int32_t tr_ngram_length(const tr_ngram *g) { return g->len; }

/* The end of the most recent earlier occurrence of the sequence's last
 * n tokens, or -1; *count its occurrences where the table counts. */
static int32_t earlier(const tr_ngram *g, int32_t n, int32_t *count) {
    const ngram_table *t = &g->t[n];
    if (g->len < n + 1 || !t->cap) return -1;
    const int32_t *gram = g->tok + g->len - n;
    const int32_t *s = find_slot(t, g->tok, n, gram, gram_hash(gram, n));
    /* a stale slot past a truncation, or no earlier occurrence */
    if (*s < 0 || *s >= g->len - 1) return -1;
    if (count) *count = t->count ? t->count[s - t->slot] : 0;
    return *s;
}

/* The first occurrence of the sequence's last n tokens that ends at or
 * after the cursor, within TR_NGRAM_CURSOR_SPAN tokens, or -1. */
static int32_t after_cursor(const tr_ngram *g, int32_t n) {
    if (g->cursor < 0 || g->len < n + 1) return -1;
    const int32_t *gram = g->tok + g->len - n;
    int32_t from = g->cursor > n - 1 ? g->cursor : n - 1;
    int32_t to = g->len - 2; /* followed by a token, and earlier text */
    if (to > from + TR_NGRAM_CURSOR_SPAN) to = from + TR_NGRAM_CURSOR_SPAN;
    for (int32_t e = from; e <= to; e++)
        if (g->tok[e] == gram[n - 1] && memcmp(g->tok + e - n + 1, gram, (size_t)n * sizeof *gram) == 0)
            return e;
    return -1;
}

int32_t tr_ngram_propose(tr_ngram *g, int32_t *out, int32_t cap) {
    if (g->off_for > 0) {
        g->off_for--;
        return 0;
    }
    int32_t want = cap < g->draft ? cap : g->draft;
    if (want <= 0) return 0;
    int32_t e = -1;
    for (int32_t n = g->o.max_n; n >= g->o.min_n && e < 0; n--)
        if ((e = after_cursor(g, n)) < 0) e = earlier(g, n, NULL);
    /* a token seen once before: a name or a number copied from the
     * prompt continues as it did there, even where the tokens before it
     * differ (a value after `"name": "` that followed `name=`); a common
     * token (` the`, `"`) has many continuations and proposes nothing */
    int32_t seen = 0;
    if (e < 0 && g->o.min_n > 1 && g->o.unique_1gram && (e = earlier(g, 1, &seen)) >= 0 &&
        seen != 1)
        e = -1;
    if (e < 0) return 0;
    int32_t k = 0;
    for (int32_t p = e + 1; p < g->len && k < want; p++) out[k++] = g->tok[p];
    g->src = e + 1;
    return k;
}

void tr_ngram_feedback(tr_ngram *g, int32_t proposed, int32_t accepted) {
    if (proposed <= 0 || accepted < 0 || accepted > proposed) return;
    g->rate = 0.75f * g->rate + 0.25f * (float)accepted / (float)proposed;
    g->seen++;
    /* the copy goes on after what was kept: after a departure (a word
     * left out, an edit) the text is looked for from there on first */
    if (g->src >= 0) g->cursor = g->src + accepted;
    g->src = -1;
    if (accepted == proposed) {
        g->draft = g->draft + g->o.grow > g->o.max_draft ? g->o.max_draft : g->draft + g->o.grow;
        g->backoff = g->o.backoff;
    } else {
        g->draft = accepted + 1 < g->o.max_draft ? accepted + 1 : g->o.max_draft;
    }
    if (g->seen >= 8 && g->rate < g->o.off_below) {
        g->off_for = g->backoff;
        g->backoff = g->backoff * 2 > 256 ? 256 : g->backoff * 2;
        g->rate = 0.5f; /* a fresh start when it comes back */
        g->seen = 0;
        g->draft = g->o.start;
    }
}

int32_t tr_ngram_draft_length(const tr_ngram *g) { return g->draft; }

int tr_ngram_is_off(const tr_ngram *g) { return g->off_for > 0; }

float tr_ngram_acceptance(const tr_ngram *g) { return g->rate; }
