/* kv_balance.c — 4-bit keys balanced against their queries, for the
 * families whose heads are RMS-normed. See model_internal.h,
 * tr_model_balance_q4_keys.
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
 * Where the sizes come from: a normed head has unit RMS before its weight,
 * so the weights |w_q[c]| and |w_k[c]| stand for the sizes of q_c and k_c,
 * and the factors fold into a second copy of the two norms (w_q / a,
 * w_k * a): no op changes, on any backend. RoPE turns each pair of
 * channels by one angle, so a pair shares one factor (the scaling then
 * commutes with it). The clip to [1/8, 8] keeps a near-zero weight from
 * sending a channel's keys to the group's extremes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

/* qb, kb[hd]: the balanced copies of wq, wk. */
static void balance(const float *wq, const float *wk, int32_t hd, float *qb,
                    float *kb) {
    const int32_t half = hd / 2;
    for (int32_t c = 0; c < half; c++) {
        double q = (fabs(wq[c]) + fabs(wq[c + half])) / 2;
        double k = (fabs(wk[c]) + fabs(wk[c + half])) / 2;
        double a = pair_factor(q, k);
        for (int32_t i = c; i < hd; i += half) {
            qb[i] = (float)(wq[i] / a);
            kb[i] = (float)(wk[i] * a);
        }
    }
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
        const float *wq = file_norm(m, l, "attn_q_norm"), *wk = file_norm(m, l, "attn_k_norm");
        if (!w->q_norm || !w->k_norm || !wq || !wk) continue;
        float *qb = m->balanced_norms + (size_t)l * 2 * (size_t)hd, *kb = qb + hd;
        balance(wq, wk, hd, qb, kb);
        const void *q_dev, *k_dev;
        tr_status s;
        if ((s = tr_model_import(m, qb, sizeof(float) * (size_t)hd, &q_dev)) ||
            (s = tr_model_import(m, kb, sizeof(float) * (size_t)hd, &k_dev)))
            return tr_diag_set(diag, s, 0,
                               "cannot load layer %d's balanced Q/K norms to the device", l);
        w->q_norm_q4k = q_dev;
        w->k_norm_q4k = k_dev;
    }
    return TR_OK;
}
