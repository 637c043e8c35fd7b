/* kv_units.c — how a model's KV pages are cut into units (layers that are
 * freed together), and the per-unit page tables a forward pass gives each
 * layer.
 *
 * Layering: runtime/model. The engine keeps one table per sequence with W
 * ids per page slot (slot-major: ids[slot * W + u], as radix_tree.h); the
 * kernels take one plain table per layer (backend.h). So the forward pass
 * copies each unit's column out once per call (a few thousand ints for a
 * batch of long sequences) rather than teaching every kernel a stride.
 *
 * Cutting: layers grouped by window value; every unit holds g layers of
 * one value, g the greatest common divisor of the groups' sizes, so all
 * pages have one size and one pool serves them all (Gemma 3 270M, 15
 * windowed layers and 3 global ones: g = 3, six units, five of them
 * windowed). Within a value, layers go to units in layer order.
 */
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "runtime/model/model_internal.h"

tr_status tr_model_kv_units_init(model *m) {
    const int32_t n = m->hp.n_layers;
    m->kv_split.n = 1;
    m->kv_split.layers = n;
    m->kv_split.window[0] = 0;
    if (m->hp.n_local_layers == 0) return TR_OK;
    /* sizes of the groups of equal windows */
    int32_t g = 0;
    for (int32_t l = 0; l < n; l++) {
        bool seen = false;
        for (int32_t j = 0; j < l && !seen; j++) seen = m->window[j] == m->window[l];
        if (seen) continue;
        int32_t count = 0;
        for (int32_t j = l; j < n; j++) count += m->window[j] == m->window[l];
        g = (int32_t)tr_gcd_u64((uint64_t)g, (uint64_t)count);
    }
    int32_t units = n / g;
    if (units > TR_MODEL_MAX_KV_UNITS) return TR_OK; /* stays one unit */
    m->kv_layer_unit = malloc((size_t)n * sizeof(int32_t));
    m->kv_layer_slot = malloc((size_t)n * sizeof(int32_t));
    if (!m->kv_layer_unit || !m->kv_layer_slot) return TR_ERR_NOMEM;
    int32_t next = 0;
    for (int32_t l = 0; l < n; l++) m->kv_layer_unit[l] = -1;
    for (int32_t l = 0; l < n; l++) {
        if (m->kv_layer_unit[l] >= 0) continue;
        /* layer l opens units for its window value, g layers each */
        int32_t filled = 0;
        for (int32_t j = l; j < n; j++) {
            if (m->window[j] != m->window[l]) continue;
            if (filled % g == 0) m->kv_split.window[next++] = m->window[l];
            m->kv_layer_unit[j] = next - 1;
            m->kv_layer_slot[j] = filled % g;
            filled++;
        }
    }
    m->kv_split.n = units;
    m->kv_split.layers = g;
    return TR_OK;
}

void tr_model_kv_units(const model *m, bool split, tr_kv_units *out) {
    if (split && m->kv_layer_unit) {
        *out = m->kv_split;
        return;
    }
    memset(out, 0, sizeof *out);
    out->n = 1;
    out->layers = m->hp.n_layers;
}

int32_t tr_model_kv_n_units(const model *m, const tr_kv_layout *kv) {
    return kv->unit_layers > 0 ? m->hp.n_layers / kv->unit_layers : 1;
}

/* Windowed units may leave -1 in the slots none of a sequence's tokens in
 * this batch reads; every other id must be a page. */
tr_status tr_model_check_tables(const model *m, const tr_kv_layout *kv,
                                const tr_batch *b) {
    const int32_t W = tr_model_kv_n_units(m, kv);
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t first = INT32_MAX; /* only windowed units may skip ids */
        for (int32_t t = 0; W > 1 && t < b->n_tokens; t++)
            if (b->seq[t] == s && b->pos[t] < first) first = b->pos[t];
        for (int32_t i = 0; i < b->n_pages[s]; i++) {
            for (int32_t u = 0; u < W; u++) {
                int32_t id = b->page_table[s][(int64_t)i * W + u];
                int32_t w = W > 1 ? m->kv_split.window[u] : 0;
                bool unread = w > 0 && first != INT32_MAX &&
                              (int64_t)(i + 1) * kv->page_size <= (int64_t)first - w + 1;
                if (id == -1 && unread) continue;
                if (id < 0 || id >= kv->n_pages) return TR_ERR_INVALID_ARG;
            }
        }
    }
    return TR_OK;
}

tr_status tr_model_unit_batches(model *m, const tr_kv_layout *kv, const tr_batch *b,
                                const tr_batch **out) {
    const int32_t W = tr_model_kv_n_units(m, kv);
    *out = NULL;
    if (W == 1) return TR_OK;
    size_t ids = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) ids += (size_t)b->n_pages[s];
    ids *= (size_t)W;
    size_t ptrs = (size_t)W * (size_t)b->n_seqs;
    if (ids > m->unit_ids_cap) {
        int32_t *p = realloc(m->unit_ids, ids * sizeof *p);
        if (!p) return TR_ERR_NOMEM;
        m->unit_ids = p;
        m->unit_ids_cap = ids;
    }
    if (ptrs > m->unit_ptrs_cap) {
        const int32_t **p = realloc(m->unit_ptrs, ptrs * sizeof *p);
        if (!p) return TR_ERR_NOMEM;
        m->unit_ptrs = p;
        m->unit_ptrs_cap = ptrs;
    }
    int32_t *at = m->unit_ids;
    for (int32_t u = 0; u < W; u++) {
        for (int32_t s = 0; s < b->n_seqs; s++) {
            const int32_t *src = b->page_table[s];
            m->unit_ptrs[(size_t)u * b->n_seqs + s] = at;
            for (int32_t i = 0; i < b->n_pages[s]; i++) at[i] = src[(int64_t)i * W + u];
            at += b->n_pages[s];
        }
        m->unit_b[u] = *b;
        m->unit_b[u].page_table = m->unit_ptrs + (size_t)u * b->n_seqs;
    }
    *out = m->unit_b;
    return TR_OK;
}

const tr_batch *tr_fwd_layer_batch(const tr_fwd *f, int32_t layer) {
    return f->unit_b ? &f->unit_b[f->m->kv_layer_unit[layer]] : f->b;
}
