/* grammar_constraint.c — the constraint ops every grammar-constrained
 * sample runs on: one grammar_matcher per sample over a shared handle
 * (grammar_cache_internal.h). The matcher part is tr_constraint_matcher_ops
 * (constraint.c, which the unit tests also use on bare matchers); this
 * state adds the handle reference that clone needs and the engine's mask
 * counters.
 *
 * Layering: runtime/engine. A state belongs to one sample and is used by
 * the engine thread only (created on the submitting thread, before the
 * engine sees it).
 */
#include <stdlib.h>

#include "runtime/engine/constraint_internal.h"
#include "runtime/engine/grammar_cache_internal.h"

typedef struct gc_state {
    grammar_matcher *m;
    trellis_grammar *h;        /* one reference */
    gcache_mask_counters *ctr; /* borrowed; may be NULL */
} gc_state;

#define GC_M(st) (((gc_state *)(st))->m)

static int gc_fill(void *p, uint64_t *mask, size_t n_words) {
    gc_state *st = p;
    uint64_t c0 = 0, c1 = 0;
    tr_grammar_matcher_mask_counts(st->m, NULL, &c0);
    int rc = tr_constraint_matcher_ops.fill_mask(st->m, mask, n_words);
    if (rc == 0 && st->ctr) {
        tr_grammar_matcher_mask_counts(st->m, NULL, &c1);
        /* relaxed: counters, read only for statistics */
        atomic_fetch_add_explicit(c1 > c0 ? &st->ctr->computed : &st->ctr->reused, 1,
                                  memory_order_relaxed);
    }
    return rc;
}
static int gc_accept(void *st, int32_t tok) {
    return tr_constraint_matcher_ops.accept(GC_M(st), tok);
}
static bool gc_done(void *st) { return tr_constraint_matcher_ops.is_done(GC_M(st)); }
static int gc_forced(void *st, uint8_t *buf, size_t cap, size_t *len) {
    return tr_constraint_matcher_ops.forced_bytes(GC_M(st), buf, cap, len);
}
static int gc_rollback(void *st, int32_t n) {
    return tr_constraint_matcher_ops.rollback(GC_M(st), n);
}

static void gc_free(void *p) {
    gc_state *st = p;
    if (!st) return;
    tr_grammar_matcher_free(st->m);
    trellis_grammar_release(st->h);
    free(st);
}

void *tr_gconstraint_new(trellis_grammar *h, gcache_mask_counters *ctr) {
    gc_state *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    if (tr_grammar_matcher_new(h->g, h->v, 0, &st->m) != TR_OK) {
        free(st);
        return NULL;
    }
    st->h = trellis_grammar_ref(h);
    st->ctr = ctr;
    return st;
}

static void *gc_clone(void *p) {
    gc_state *st = p;
    return tr_gconstraint_new(st->h, st->ctr);
}

const trellis_constraint_ops tr_gconstraint_ops = {
    .fill_mask = gc_fill,
    .accept = gc_accept,
    .is_done = gc_done,
    .clone = gc_clone,
    .free = gc_free,
    .forced_bytes = gc_forced,
    .rollback = gc_rollback,
};
