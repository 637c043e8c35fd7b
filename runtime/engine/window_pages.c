/* window_pages.c — the page slots of windowed units (engine_internal.h,
 * "Pages of a sequence"; radix_tree.h, "Units").
 *
 * Layering: runtime/engine, engine thread only; on the pool and the tree.
 *
 * With W == 1 every function here reduces to what a single-unit engine
 * does: nothing to let go, and the sequence's references are those of its
 * private slots.
 *
 * Why references and not pins for windowed ids: a lock pins a whole node,
 * but a long sequence only needs its window's worth of a windowed unit.
 * Holding references per id lets the ids behind every running window
 * become cached pages (the tree's alone), which the tree evicts under
 * pressure; those never inserted (decode slots) go straight back to the
 * pool.
 */
#include "base/util.h"
#include "runtime/engine/engine_internal.h"

int64_t tr_win_pages_for(const trellis_engine *e, int64_t tokens) {
    int64_t slots = (tokens + e->page_size - 1) / e->page_size, ids = 0;
    for (int32_t u = 0; u < e->W; u++) {
        int32_t w = e->unit_window[u];
        /* the window behind a chunk, the chunk, and a slot cut on each side */
        int64_t reach = w == 0 ? slots
                               : ((int64_t)w + e->opt.chunk_size) / e->page_size + 2;
        ids += TR_MIN(slots, reach);
    }
    return ids;
}

int64_t tr_win_pool_tokens(const trellis_engine *e) {
    int64_t lo = 0, hi = (int64_t)e->n_pages * e->page_size; /* W >= 1 */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (tr_win_pages_for(e, mid) <= e->n_pages) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

void tr_win_take_match(trellis_engine *e, engine_seq *s) {
    s->let_go = 0;
    if (!e->windowed) return;
    int32_t let_go = s->n_pages;
    for (int32_t u = 0; u < e->W; u++) {
        if (e->unit_window[u] == 0) continue;
        int32_t lo = TR_MIN(tr_radix_tree_window_lo(e->tree, u, s->n_kv), s->n_pages);
        let_go = TR_MIN(let_go, lo);
        for (int32_t i = 0; i < s->n_pages; i++) {
            int32_t *id = &s->pages[(int64_t)i * e->W + u];
            if (i < lo) {
                *id = -1;
                continue;
            }
            tr_status st = tr_kv_pool_ref(e->pool, *id); /* a match ends before any hole */
            TR_ASSERT(st == TR_OK);
            (void)st;
        }
    }
    s->let_go = let_go;
}

void tr_win_let_go(trellis_engine *e, engine_seq *s) {
    if (!e->windowed) return;
    int32_t let_go = s->n_pages;
    for (int32_t u = 0; u < e->W; u++) {
        if (e->unit_window[u] == 0) continue;
        int32_t lo = TR_MIN(tr_radix_tree_window_lo(e->tree, u, s->n_kv), s->n_pages);
        let_go = TR_MIN(let_go, lo);
        for (int32_t i = s->let_go; i < lo; i++) {
            int32_t *id = &s->pages[(int64_t)i * e->W + u];
            if (*id < 0) continue;
            tr_status st = tr_kv_pool_unref(e->pool, *id);
            TR_ASSERT(st == TR_OK);
            (void)st;
            *id = -1;
            e->st.kv_window_released++;
        }
    }
    if (let_go > s->let_go) s->let_go = let_go;
}

void tr_win_unref_all(trellis_engine *e, engine_seq *s) {
    for (int32_t i = 0; i < s->n_pages; i++) {
        for (int32_t u = 0; u < e->W; u++) {
            int32_t id = s->pages[(int64_t)i * e->W + u];
            if (id < 0 || (i < s->n_locked && e->unit_window[u] == 0)) continue;
            tr_status st = tr_kv_pool_unref(e->pool, id);
            TR_ASSERT(st == TR_OK);
            (void)st;
        }
    }
}
