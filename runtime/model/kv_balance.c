/* kv_balance.c — 4-bit keys balanced against their queries: folded into
 * the per-head norms of the families that have them (model_internal.h,
 * tr_model_balance_q4_keys), as factors of their own for the others
 * (tr_model_q4k_factors, applied by kv_center.c's path).
 *
 * Why: with Q4 keys a score q.k is off by sum_c q_c e_c, where e_c, key
 * channel c's rounding error, is about the same for every channel of a
 * rotated group (backend.h, tr_kv_rotation) and sized by the group's keys
 * as a whole. Storing a_c k_c and scoring with q_c / a_c leaves q.k as it
 * was, and the error's expected size, proportional to
 * (sum_c q_c^2 / a_c^2) (sum_c a_c^2 k_c^2), is least (Cauchy-Schwarz) at
 * a_c^2 proportional to |q_c| / |k_c|: channels the queries weigh heavily
 * get finer steps, channels with large keys but small queries coarser ones.
 *
 * Where the sizes come from: channel c of a normed head is the projection's
 * output c divided by the head's RMS, times the norm's weight w[c]. Taking
 * the input (attn_norm's output) as isotropic, output c's size is the norm
 * of row c of W weighted by attn_norm's weights g, so
 *   |q_c| ~ |w_q[c]| * size_c / (the head's RMS of size),
 * the profile averaged (RMS) over the heads. RoPE turns each pair of
 * channels by one angle, so a pair shares one factor (sizes as RMS over
 * the pair; the scaling then commutes with RoPE). The clip to [1/8, 8]
 * keeps a near-zero size from sending a channel's keys to the group's
 * extremes. With norms, the factors fold into a second copy of the two
 * norms (w_q / a, w_k * a): no op changes. Without them (llama, qwen2) the
 * same sizes are taken with unit norms, and the forward multiplies Q and K
 * by the factors itself (mul_cols).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/util.h"
#include "runtime/model/model_internal.h"

#define Q4K_FACTOR_MIN 0.125
#define Q4K_FACTOR_MAX 8.0

static double pair_factor(double q_size, double k_size) {
    if (!(q_size > 0) || !(k_size > 0) || !isfinite(q_size) || !isfinite(k_size))
        return 1.0;
    double a = sqrt(q_size / k_size);
    return a < Q4K_FACTOR_MIN ? Q4K_FACTOR_MIN : a > Q4K_FACTOR_MAX ? Q4K_FACTOR_MAX : a;
}

static const float *file_norm(const model *m, int32_t l, const char *suffix) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s.weight", l, suffix);
    const gguf_tensor *t = tr_gguf_tensor_find(m->file, name);
    return t && t->type == TR_DTYPE_F32 ? (const float *)t->data : NULL;
}

#define ROWS_PER_CALL 64

/* sizes[r] = sqrt(sum_j (w[r, j] g[j])^2), the rows dequantized by the
 * backend's embed op (w as bound: the file's layout), ROWS_PER_CALL at a
 * time. */
static tr_status row_sizes(model *m, const tr_weight *w, const float *g, double *sizes) {
    const tr_backend_ops *o = m->be->ops;
    const size_t n = (size_t)ROWS_PER_CALL * (size_t)w->cols;
    float *dev = NULL, *host = NULL;
    tr_status s = o->alloc(m->be, n * sizeof(float), (void **)&dev);
    host = s ? NULL : m->host_memory ? dev : malloc(n * sizeof(float));
    if (s == TR_OK && !host) s = TR_ERR_NOMEM;
    tr_stream *st = tr_backend_stream(m->be);
    for (int64_t r0 = 0; s == TR_OK && r0 < w->rows; r0 += ROWS_PER_CALL) {
        int32_t ids[ROWS_PER_CALL], k = (int32_t)TR_MIN(ROWS_PER_CALL, w->rows - r0);
        for (int32_t i = 0; i < k; i++) ids[i] = (int32_t)(r0 + i);
        o->embed(st, dev, w, ids, k);
        if (!m->host_memory) s = o->download(st, host, dev, (size_t)k * (size_t)w->cols * sizeof(float));
        if (s == TR_OK) s = o->stream_synchronize(st);
        for (int32_t i = 0; s == TR_OK && i < k; i++) {
            double ss = 0;
            for (int64_t j = 0; j < w->cols; j++) {
                double x = (double)host[(size_t)i * (size_t)w->cols + (size_t)j] * g[j];
                ss += x * x;
            }
            sizes[r0 + i] = sqrt(ss);
        }
    }
    if (host != dev) free(host);
    if (dev && o->free) o->free(m->be, dev);
    return s;
}

/* size[hd] = |norm[c]| (1 without a norm) times the RMS over the heads of
 * W's rows' sizes, each head's divided by its RMS: the expected size of
 * channel c of a head. */
static tr_status channel_sizes(model *m, const tr_weight *w, const float *g,
                               const float *norm, int32_t heads, double *size) {
    const int32_t hd = m->hp.head_dim;
    double *rows = malloc(sizeof(double) * (size_t)w->rows);
    tr_status s = rows ? row_sizes(m, w, g, rows) : TR_ERR_NOMEM;
    for (int32_t c = 0; c < hd; c++) size[c] = 0;
    for (int32_t h = 0; s == TR_OK && h < heads; h++) {
        const double *r = rows + (size_t)h * (size_t)hd;
        double ms = 0;
        for (int32_t c = 0; c < hd; c++) ms += r[c] * r[c] / hd;
        for (int32_t c = 0; c < hd && ms > 0; c++) size[c] += r[c] * r[c] / ms / heads;
    }
    for (int32_t c = 0; c < hd; c++) size[c] = (norm ? fabs(norm[c]) : 1.0) * sqrt(size[c]);
    free(rows);
    return s;
}

/* qb, kb[hd]: the norms wq, wk balanced by the channel sizes qs, ks. */
static void balance(const float *wq, const float *wk, const double *qs, const double *ks,
                    int32_t hd, float *qb, float *kb) {
    const int32_t half = hd / 2; /* both families rope NEOX: pairs (c, c + hd / 2) */
    for (int32_t c = 0; c < half; c++) {
        int32_t p = c + half;
        double a = pair_factor(sqrt((qs[c] * qs[c] + qs[p] * qs[p]) / 2),
                               sqrt((ks[c] * ks[c] + ks[p] * ks[p]) / 2));
        for (int32_t i = c; i < hd; i += half) {
            qb[i] = (float)(wq[i] / a);
            kb[i] = (float)(wk[i] * a);
        }
    }
}

/* Layer l's balanced norms into qb, kb[hd]. */
static tr_status balance_layer(model *m, int32_t l, float *qb, float *kb) {
    const int32_t hd = m->hp.head_dim;
    const tr_attn_weights *w = &m->layers[l].attn;
    const float *wq = file_norm(m, l, "attn_q_norm"), *wk = file_norm(m, l, "attn_k_norm"),
                *g = file_norm(m, l, "attn_norm");
    if (!wq || !wk || !g) return TR_ERR_NOT_FOUND;
    double *qs = malloc(sizeof(double) * 2 * (size_t)hd), *ks = qs ? qs + hd : NULL;
    tr_status s = qs ? channel_sizes(m, &w->wq, g, wq, m->hp.n_heads, qs) : TR_ERR_NOMEM;
    if (s == TR_OK) s = channel_sizes(m, &w->wk, g, wk, m->hp.n_kv_heads, ks);
    if (s == TR_OK) balance(wq, wk, qs, ks, hd, qb, kb);
    free(qs);
    return s;
}

tr_status tr_model_balance_q4_keys(model *m, tr_diag *diag) {
    const int32_t hd = m->hp.head_dim, n_layers = m->hp.n_layers;
    int32_t with_norms = 0;
    for (int32_t l = 0; l < n_layers; l++) with_norms += m->layers[l].attn.q_norm != NULL;
    if (with_norms == 0) return TR_OK;
    m->balanced_norms = malloc(sizeof(float) * 2 * (size_t)hd * (size_t)n_layers);
    if (!m->balanced_norms)
        return tr_diag_set(diag, TR_ERR_NOMEM, 0, "cannot allocate the Q4 key factors");
    for (int32_t l = 0; l < n_layers; l++) {
        tr_attn_weights *w = &m->layers[l].attn;
        if (!w->q_norm || !w->k_norm) continue;
        float *qb = m->balanced_norms + (size_t)l * 2 * (size_t)hd, *kb = qb + hd;
        tr_status s = balance_layer(m, l, qb, kb);
        if (s == TR_ERR_NOT_FOUND) continue; /* not bound from the file as F32 */
        if (s) return tr_diag_set(diag, s, 0, "cannot size layer %d's Q/K channels", l);
        const void *q_dev, *k_dev;
        if ((s = tr_model_import(m, qb, sizeof(float) * (size_t)hd, &q_dev)) ||
            (s = tr_model_import(m, kb, sizeof(float) * (size_t)hd, &k_dev)))
            return tr_diag_set(diag, s, 0,
                               "cannot load layer %d's balanced Q/K norms to the device", l);
        w->q_norm_q4k = q_dev;
        w->k_norm_q4k = k_dev;
    }
    return TR_OK;
}

tr_status tr_model_q4k_factors(model *m, int32_t l, bool neox, float *a) {
    const int32_t hd = m->hp.head_dim, half = hd / 2;
    const tr_attn_weights *w = &m->layers[l].attn;
    const float *g = file_norm(m, l, "attn_norm");
    if (!g) return TR_ERR_NOT_FOUND;
    double *qs = malloc(sizeof(double) * 2 * (size_t)hd), *ks = qs ? qs + hd : NULL;
    tr_status s = qs ? channel_sizes(m, &w->wq, g, NULL, m->hp.n_heads, qs) : TR_ERR_NOMEM;
    if (s == TR_OK) s = channel_sizes(m, &w->wk, g, NULL, m->hp.n_kv_heads, ks);
    for (int32_t i = 0; s == TR_OK && i < half; i++) {
        int32_t c = neox ? i : 2 * i, p = neox ? i + half : 2 * i + 1;
        double f = pair_factor(sqrt((qs[c] * qs[c] + qs[p] * qs[p]) / 2),
                               sqrt((ks[c] * ks[c] + ks[p] * ks[p]) / 2));
        a[c] = a[p] = (float)f;
    }
    free(qs);
    return s;
}
