/* blocks.c — the sub-layers the architectures share, written once against
 * the backend table: embedding, attention with paged KV, the gated FFN,
 * and the final norm with the output projection. See model_internal.h.
 *
 * Reads like llama2.c: every op on one line, the shape of what it writes
 * beside it (n = tokens in the batch). The optional parts (biases, per-head
 * norms, post-norms, embedding scale, soft-capping) are each one branch on
 * a weight or hyper-parameter a family may not have.
 */
#include <string.h>

#include "runtime/model/model_internal.h"

void tr_model_block_embed(tr_fwd *f) {
    model *m = f->m;
    f->op->embed(f->st, m->x, &m->tok_embd, f->tokens, f->n); /* x[n, dim] */
    if (m->hp.embd_scale != 1.0f)
        f->op->scale(f->st, m->x, m->hp.embd_scale, (int64_t)f->n * m->hp.dim);
}

/* x += o, or x += rmsnorm(o) with a post-norm. o[n, dim] is scratch. */
static void residual_add(tr_fwd *f, float *o, const float *post_norm) {
    model *m = f->m;
    const model_hparams *hp = &m->hp;
    if (post_norm)
        f->op->rmsnorm(f->st, o, o, post_norm, f->n, hp->dim, hp->rms_eps);
    f->op->add(f->st, m->x, o, (int64_t)f->n * hp->dim); /* x[n, dim] += */
}

/* x[n, dim] += in[n, cols] . w^T, through a post-norm when there is one. */
static void project_residual(tr_fwd *f, const tr_weight *w, const float *in,
                             const float *post_norm) {
    model *m = f->m;
    const tr_weight *ws[1] = {w};
    if (!post_norm) { /* the residual add fused into the matmul */
        float *res[1] = {m->x};
        f->op->matmul(f->st, 1, res, ws, in, f->n, true); /* x[n, dim] += */
        return;
    }
    float *o[1] = {m->xb};
    f->op->matmul(f->st, 1, o, ws, in, f->n, false); /* xb[n, dim] */
    residual_add(f, m->xb, post_norm);
}

void tr_model_block_attn(tr_fwd *f, int32_t l, const tr_attn_weights *w,
                         const tr_attn_opts *o) {
    model *m = f->m;
    const model_hparams *hp = &m->hp;
    const int32_t n = f->n, hd = hp->head_dim;
    f->op->rmsnorm(f->st, m->xb, m->x, w->norm, n, hp->dim,
                   hp->rms_eps); /* xb[n, dim] */
    /* one activation quantization for the three projections */
    float *qkv[3] = {m->q, m->k, m->v}; /* [n, q_dim], [n, kv_dim] x 2 */
    const tr_weight *wqkv[3] = {&w->wq, &w->wk, &w->wv};
    f->op->matmul(f->st, 3, qkv, wqkv, m->xb, n, false);
    if (w->bq) {
        f->op->add_bias(f->st, m->q, w->bq, n, hp->n_heads * hd);
        f->op->add_bias(f->st, m->k, w->bk, n, hp->n_kv_heads * hd);
        f->op->add_bias(f->st, m->v, w->bv, n, hp->n_kv_heads * hd);
    }
    if (w->q_norm) { /* every head a row of head_dim */
        bool q4k = w->q_norm_q4k && f->kv->type_k == TR_KV_Q4; /* kv_balance.c */
        f->op->rmsnorm(f->st, m->q, m->q, q4k ? w->q_norm_q4k : w->q_norm,
                       n * hp->n_heads, hd, hp->rms_eps);
        f->op->rmsnorm(f->st, m->k, m->k, q4k ? w->k_norm_q4k : w->k_norm,
                       n * hp->n_kv_heads, hd, hp->rms_eps);
    }
    if (o->neox) {
        f->op->rope_neox(f->st, m->q, n, hp->n_heads, hd, f->b->pos, o->rope_base,
                         o->rope_scale);
        f->op->rope_neox(f->st, m->k, n, hp->n_kv_heads, hd, f->b->pos, o->rope_base,
                         o->rope_scale);
    } else {
        f->op->rope(f->st, m->q, n, hp->n_heads, hd, f->b->pos, o->rope_base);
        f->op->rope(f->st, m->k, n, hp->n_kv_heads, hd, f->b->pos, o->rope_base);
    }
    if (w->k_center_neg && f->kv->type_k == TR_KV_Q4) { /* kv_center.c */
        f->op->add_bias(f->st, m->k, w->k_center_neg, n, hp->n_kv_heads * hd);
        f->op->mul_cols(f->st, m->k, w->k_scale_q4k, n * hp->n_kv_heads, hd);
        f->op->mul_cols(f->st, m->q, w->q_scale_q4k, n * hp->n_heads, hd);
    }
    const tr_batch *lb = tr_fwd_layer_batch(f, l); /* its unit's pages */
    f->op->kv_store(f->st, f->kv, l, m->k, m->v, lb);
    f->op->attention(f->st, m->att, m->q, f->kv, l, lb, hp->n_heads,
                     o->scale); /* att[n, q_dim] */
    project_residual(f, &w->wo, m->att, w->post_norm); /* x[n, dim] += */
}

static void block_ffn(tr_fwd *f, const tr_ffn_weights *w, bool gelu) {
    model *m = f->m;
    const model_hparams *hp = &m->hp;
    const int32_t n = f->n;
    f->op->rmsnorm(f->st, m->xb, m->x, w->norm, n, hp->dim,
                   hp->rms_eps); /* xb[n, dim] */
    float *gu[2] = {m->hg, m->hu}; /* [n, ffn] x 2 */
    const tr_weight *wgu[2] = {&w->gate, &w->up};
    f->op->matmul(f->st, 2, gu, wgu, m->xb, n, false);
    if (gelu)
        f->op->geglu(f->st, m->hg, m->hg, m->hu, (int64_t)n * hp->ffn_dim);
    else
        f->op->swiglu(f->st, m->hg, m->hg, m->hu, (int64_t)n * hp->ffn_dim);
    project_residual(f, &w->down, m->hg, w->post_norm); /* x[n, dim] += */
}

void tr_model_block_ffn_swiglu(tr_fwd *f, const tr_ffn_weights *w) {
    block_ffn(f, w, false);
}

void tr_model_block_ffn_geglu(tr_fwd *f, const tr_ffn_weights *w) {
    block_ffn(f, w, true);
}

/* The rows whose logits are wanted: the optional get_rows op, else one
 * device copy per row (n_logits is usually one per sequence). */
static tr_status gather_rows(tr_fwd *f, float *out, const float *x,
                             int32_t dim) {
    if (f->op->get_rows) {
        f->op->get_rows(f->st, out, x, dim, f->logit_rows, f->n_logits);
        return TR_OK;
    }
    const size_t row = (size_t)dim * sizeof(float);
    for (int32_t i = 0; i < f->n_logits; i++) {
        tr_status s = f->op->copy(f->st, out + (size_t)i * (size_t)dim,
                                  x + (size_t)f->logit_rows[i] * (size_t)dim,
                                  row);
        if (s) return s;
    }
    return TR_OK;
}

/* How many output rows the logit rows' masks (model.h tr_logit_masks)
 * want, with their ids in m->mask_ids; -1 for every row: no masks, a row
 * without one, a backend without matmul_rows, or more than 1 /
 * MODEL_SPARSE_LOGITS_SHARE of the vocabulary (a gathered row costs more
 * than a streamed one). Waits for the masks first. */
static int32_t masked_rows(tr_fwd *f) {
    const tr_logit_masks *lm = f->masks;
    model *m = f->m;
    if (!lm || !f->op->matmul_rows) return -1;
    if (lm->await) lm->await(lm->ctx);
    const int32_t nv = m->hp.n_vocab;
    const size_t nw = ((size_t)nv + 63) / 64;
    memset(m->mask_union, 0, nw * sizeof *m->mask_union);
    for (int32_t i = 0; i < f->n_logits; i++) {
        const uint64_t *r = lm->row_mask[i];
        if (!r) return -1;
        for (size_t k = 0; k < nw; k++) m->mask_union[k] |= r[k];
    }
    if (nv % 64) m->mask_union[nw - 1] &= (UINT64_C(1) << (nv % 64)) - 1;
    int64_t count = 0;
    for (size_t k = 0; k < nw; k++) count += __builtin_popcountll(m->mask_union[k]);
    if (count > nv / MODEL_SPARSE_LOGITS_SHARE) return -1;
    int32_t n = 0;
    for (size_t k = 0; k < nw; k++)
        for (uint64_t b = m->mask_union[k]; b; b &= b - 1)
            m->mask_ids[n++] = (int32_t)(k * 64 + (size_t)__builtin_ctzll(b));
    return n;
}

tr_status tr_model_block_logits(tr_fwd *f) {
    model *m = f->m;
    const model_hparams *hp = &m->hp;
    if (f->n_logits == 0) return f->op->stream_synchronize(f->st);
    /* only the rows asked for (usually each sequence's last) */
    tr_status s = gather_rows(f, m->xsel, m->x, hp->dim); /* xsel[n_logits, dim] */
    if (s) return s;
    f->op->rmsnorm(f->st, m->xsel, m->xsel, m->out_norm, f->n_logits, hp->dim,
                   hp->rms_eps);
    /* The one branch on the kind of memory: where ops may write host
     * memory, the output matmul writes the caller's buffer (at 32 rows a
     * device buffer and a download would copy 6 MB per step for nothing);
     * elsewhere it writes device memory and the logits come back by an
     * asynchronous download. */
    float *lo[1] = {m->host_memory ? f->logits : m->logits};
    const tr_weight *wout[1] = {&m->output};
    int32_t n_ids = masked_rows(f);
    if (n_ids >= 0) /* only the rows some mask allows */
        f->op->matmul_rows(f->st, lo[0], &m->output, m->xsel, f->n_logits,
                           m->mask_ids, n_ids);
    else
        f->op->matmul(f->st, 1, lo, wout, m->xsel, f->n_logits,
                      false); /* [n_logits, vocab] */
    if (m->output_bias)
        f->op->add_bias(f->st, lo[0], m->output_bias, f->n_logits, hp->n_vocab);
    if (hp->final_softcap > 0.0f)
        f->op->softcap(f->st, lo[0], hp->final_softcap,
                       (int64_t)f->n_logits * hp->n_vocab);
    if (!m->host_memory)
        s = f->op->download(f->st, f->logits, m->logits,
                            (size_t)f->n_logits * (size_t)hp->n_vocab *
                                sizeof(float));
    tr_status s2 = f->op->stream_synchronize(f->st);
    return s ? s : s2;
}
