/* kv_center.c — 4-bit keys stored less a constant vector and balanced
 * against the queries, for the families whose heads are not RMS-normed
 * (llama, qwen2). See model.h, tr_model_calibrate_q4_keys.
 *
 * Why: a query's scores against keys k_j and against k_j - mu differ by
 * q.mu, the same for every j, so softmax, and the attention output, do not
 * change. These families' keys carry a large common part (the same
 * direction at every position, from the residual stream's fixed
 * components), and a Q4 group's step is sized by the group's extreme: the
 * common part spends most of the 16 levels on what every key shares.
 * Storing k - mu spends them on what tells keys apart.
 *
 * Which mu: keys are turned by their position (RoPE), so an offset m that
 * every key carries before the rope is R(p) m at position p, and mu is one
 * vector for all positions (cached prefixes are shared). Where a pair of
 * channels turns slowly, R(p) m stays near m over any context served, and
 * mu = m removes it; where it turns fast, R(p) m goes round and no
 * constant removes it, and any mu other than 0 adds its own size to every
 * key. So mu = m in the pairs RoPE turns by at most a radian over the
 * first 2,048 positions, 0 in the others. (Means averaged over positions,
 * which fit one context length, were measured worse at other lengths,
 * and worse than nothing where the average had turned a pair's offset
 * sideways: docs/performance.md "Quantized KV".) m comes from running a
 * fixed text through the model (the caller's tokens) with F32 keys and
 * turning each stored key back by its position. The result depends on
 * the kernels' rounding as well as on the weights, so the engine's page
 * fingerprint includes it (tr_model_kv_fingerprint): pages stored with
 * one mu are never read with another.
 *
 * The keys are then balanced against the queries as kv_balance.c does for
 * the normed families (factors from W_q and W_k, with unit norms), applied
 * by the forward (mul_cols) since there are no norms to fold them into.
 *
 * Families with Q/K norms are left alone: their keys are balanced instead
 * (kv_balance.c), and a mean taken there gained nothing (Gemma 3,
 * docs/performance.md "Quantized KV").
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/util.h"
#include "runtime/model/model_internal.h"

/* A pair of channels is centered when RoPE turns it by at most
 * CENTER_MAX_TURN radians over the first CENTER_HORIZON positions. */
#define CENTER_HORIZON 2048
#define CENTER_MAX_TURN 1.0
#define CALIB_PAGE 16

typedef struct rope_shape {
    bool neox;   /* pairs (i, i + hd/2), else (2i, 2i+1) */
    double base, scale;
} rope_shape;

/* The families centered and how they turn their keys (their arch files'
 * tr_attn_opts); false for the others. */
static bool centered_family(const model *m, rope_shape *r) {
    for (int32_t l = 0; l < m->hp.n_layers; l++)
        if (m->layers[l].attn.q_norm || m->window[l]) return false;
    if (!strcmp(m->arch->name, "llama")) {
        *r = (rope_shape){false, m->hp.rope_base, 1.0};
        return true;
    }
    if (!strcmp(m->arch->name, "qwen2")) {
        *r = (rope_shape){true, m->hp.rope_base, m->hp.rope_freq_scale};
        return true;
    }
    return false;
}

static void pair_of(const rope_shape *r, int32_t hd, int32_t i, int32_t *a, int32_t *b) {
    *a = r->neox ? i : 2 * i;
    *b = r->neox ? i + hd / 2 : 2 * i + 1;
}

static double pair_angle(const rope_shape *r, int32_t hd, int32_t i, double pos) {
    return pos * pow(r->base, -2.0 * i / hd) * r->scale;
}

/* Runs tokens[0..n) as one sequence into an F32 KV of its own; *out (host,
 * [n_pages] pages) receives the pages. */
static tr_status calibration_pages(model *m, const int32_t *tokens, int32_t n,
                                   tr_kv_layout *kv, char **out) {
    int32_t n_pages = (n + CALIB_PAGE - 1) / CALIB_PAGE;
    tr_status s = tr_model_kv_alloc(m, n_pages, CALIB_PAGE, TR_KV_F32, TR_KV_F32, kv, NULL);
    if (s) return s;
    size_t pb = tr_kv_page_bytes(kv);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n_pages + 2 * n));
    char *pages = malloc(pb * (size_t)n_pages);
    if (!ids || !pages) s = TR_ERR_NOMEM;
    int32_t *pos = ids ? ids + n_pages : NULL, *seq = pos ? pos + n : NULL;
    for (int32_t i = 0; s == TR_OK && i < n_pages; i++) ids[i] = i;
    for (int32_t i = 0; s == TR_OK && i < n; i++) pos[i] = i, seq[i] = 0;
    const int32_t *table[1] = {ids};
    for (int32_t at = 0; s == TR_OK && at < n; at += m->max_batch) {
        int32_t k = TR_MIN(m->max_batch, n - at);
        tr_batch b = {.n_tokens = k, .pos = pos + at, .seq = seq + at, .n_seqs = 1,
                      .page_table = table, .n_pages = &n_pages};
        s = tr_model_forward(m, kv, &b, tokens + at, NULL, 0, NULL);
    }
    for (int32_t i = 0; s == TR_OK && i < n_pages; i++)
        s = tr_model_kv_page_copy(m, kv, i, pages + pb * (size_t)i, false);
    free(ids);
    if (s) free(pages);
    else *out = pages;
    tr_model_kv_free(m, kv);
    return s;
}

/* mu[kv_dim] of layer l from the calibration pages (n positions): the
 * keys' mean before the rope, in the pairs that keep it. */
static tr_status layer_center(const model *m, const rope_shape *r,
                              const tr_kv_layout *kv, const char *pages, int32_t n,
                              int32_t l, float *mu) {
    const int32_t hd = m->hp.head_dim, kv_dim = m->hp.n_kv_heads * hd;
    double *mean = calloc((size_t)kv_dim, sizeof *mean);
    if (!mean) return TR_ERR_NOMEM;
    for (int32_t p = 0; p < n; p++) {
        const float *k = (const float *)(pages + tr_kv_offset(kv, l, p / CALIB_PAGE, 0,
                                                               p % CALIB_PAGE));
        for (int32_t h = 0; h < m->hp.n_kv_heads; h++)
            for (int32_t i = 0; i < hd / 2; i++) { /* turned back by -angle */
                int32_t a, b;
                pair_of(r, hd, i, &a, &b);
                double t = pair_angle(r, hd, i, p), c = cos(t), sn = sin(t);
                double x = k[h * hd + a], y = k[h * hd + b];
                mean[h * hd + a] += (x * c + y * sn) / n;
                mean[h * hd + b] += (y * c - x * sn) / n;
            }
    }
    for (int32_t i = 0; i < hd / 2; i++) { /* pairs that turn little keep it */
        bool keep = pair_angle(r, hd, i, CENTER_HORIZON) <= CENTER_MAX_TURN;
        for (int32_t h = 0; h < m->hp.n_kv_heads; h++) {
            int32_t a, b;
            pair_of(r, hd, i, &a, &b);
            mu[h * hd + a] = keep ? (float)mean[h * hd + a] : 0.0f;
            mu[h * hd + b] = keep ? (float)mean[h * hd + b] : 0.0f;
        }
    }
    free(mean);
    return TR_OK;
}

/* Layer l's part of the calibration: [kv_dim] minus the keys' mean, then
 * the K factors and the Q factors ([head_dim] each). */
static tr_status calibrate_layer(model *m, const rope_shape *r, const tr_kv_layout *kv,
                                 const char *pages, int32_t n, int32_t l, float *out) {
    const int32_t hd = m->hp.head_dim, kv_dim = m->hp.n_kv_heads * hd;
    float *k_scale = out + kv_dim, *q_scale = k_scale + hd;
    tr_status s = layer_center(m, r, kv, pages, n, l, out);
    for (int32_t c = 0; s == TR_OK && c < kv_dim; c++) out[c] = -out[c];
    if (s == TR_OK) s = tr_model_q4k_factors(m, l, r->neox, k_scale);
    if (s == TR_ERR_NOT_FOUND) { /* attn_norm not the file's F32: unbalanced */
        s = TR_OK;
        for (int32_t c = 0; c < hd; c++) k_scale[c] = 1.0f;
    }
    for (int32_t c = 0; s == TR_OK && c < hd; c++) q_scale[c] = 1.0f / k_scale[c];
    return s;
}

tr_status tr_model_calibrate_q4_keys(model *m, const int32_t *tokens, int32_t n,
                                     tr_diag *diag) {
    rope_shape r;
    if (!m || !tokens || n <= 0) return TR_ERR_INVALID_ARG;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab)
            return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                               "calibration token %d (id %d) is not in the vocabulary", i,
                               tokens[i]);
    if (m->q4k_calibration || !centered_family(m, &r)) return TR_OK;
    const int32_t n_layers = m->hp.n_layers, hd = m->hp.head_dim,
                  per_layer = m->hp.n_kv_heads * hd + 2 * hd;
    tr_kv_layout kv;
    char *pages = NULL;
    tr_status s = calibration_pages(m, tokens, n, &kv, &pages);
    if (s) return tr_diag_set(diag, s, 0, "cannot run the key calibration text");
    float *cal = calloc((size_t)n_layers * (size_t)per_layer, sizeof *cal);
    const void **dev = calloc((size_t)n_layers * 3, sizeof *dev);
    s = cal && dev ? TR_OK : TR_ERR_NOMEM;
    for (int32_t l = 0; s == TR_OK && l < n_layers; l++)
        s = calibrate_layer(m, &r, &kv, pages, n, l, cal + (size_t)l * (size_t)per_layer);
    free(pages);
    for (int32_t l = 0; s == TR_OK && l < n_layers; l++) {
        float *v = cal + (size_t)l * (size_t)per_layer;
        size_t kv_dim = (size_t)per_layer - 2 * (size_t)hd;
        if ((s = tr_model_import(m, v, sizeof(float) * kv_dim, &dev[3 * l])) == TR_OK &&
            (s = tr_model_import(m, v + kv_dim, sizeof(float) * (size_t)hd,
                                 &dev[3 * l + 1])) == TR_OK)
            s = tr_model_import(m, v + kv_dim + hd, sizeof(float) * (size_t)hd,
                                &dev[3 * l + 2]);
    }
    if (s) { /* device copies made so far are freed with the model */
        free(dev);
        free(cal);
        return tr_diag_set(diag, s, 0, "cannot calibrate the Q4 keys (%s)",
                           tr_status_message(s));
    }
    for (int32_t l = 0; l < n_layers; l++) {
        tr_attn_weights *w = &m->layers[l].attn;
        w->k_center_neg = dev[3 * l];
        w->k_scale_q4k = dev[3 * l + 1];
        w->q_scale_q4k = dev[3 * l + 2];
    }
    free(dev);
    m->q4k_calibration = cal;
    m->kv_fingerprint = tr_fnv1a(TR_FNV1A_BASIS, cal,
                                 sizeof(float) * (size_t)n_layers * (size_t)per_layer);
    return TR_OK;
}

uint64_t tr_model_kv_fingerprint(const model *m) { return m ? m->kv_fingerprint : 0; }
