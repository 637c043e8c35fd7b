/* blocks.c — the sub-layers the architectures share, written once against
 * the backend table: embedding, attention with paged KV, the gated FFN,
 * and the final norm with the output projection. See model_internal.h.
 *
 * Reads like llama2.c: every op on one line, the shape of what it writes
 * beside it (n = tokens in the batch).
 */
#include "runtime/model/model_internal.h"

void tr_model_block_embed(tr_fwd *f) {
    model *m = f->m;
    f->op->embed(f->st, m->x, &m->tok_embd, f->tokens, f->n); /* x[n, dim] */
}

void tr_model_block_attn(tr_fwd *f, int32_t l, const tr_attn_weights *w,
                         float rope_base, float scale) {
    model *m = f->m;
    const model_hparams *hp = &m->hp;
    const int32_t n = f->n;
    f->op->rmsnorm(f->st, m->xb, m->x, w->norm, n, hp->dim,
                   hp->rms_eps); /* xb[n, dim] */
    /* one activation quantization for the three projections */
    float *qkv[3] = {m->q, m->k, m->v}; /* [n, q_dim], [n, kv_dim] x 2 */
    const tr_weight *wqkv[3] = {&w->wq, &w->wk, &w->wv};
    f->op->matmul(f->st, 3, qkv, wqkv, m->xb, n, false);
    f->op->rope(f->st, m->q, n, hp->n_heads, hp->head_dim, f->b->pos, rope_base);
    f->op->rope(f->st, m->k, n, hp->n_kv_heads, hp->head_dim, f->b->pos,
                rope_base);
    f->op->kv_store(f->st, f->kv, l, m->k, m->v, f->b); /* pages of layer l */
    f->op->attention(f->st, m->att, m->q, f->kv, l, f->b, hp->n_heads,
                     scale); /* att[n, q_dim] */
    float *res[1] = {m->x};
    const tr_weight *wo[1] = {&w->wo};
    f->op->matmul(f->st, 1, res, wo, m->att, n, true); /* x[n, dim] += */
}

void tr_model_block_ffn_swiglu(tr_fwd *f, const tr_ffn_weights *w) {
    model *m = f->m;
    const model_hparams *hp = &m->hp;
    const int32_t n = f->n;
    f->op->rmsnorm(f->st, m->xb, m->x, w->norm, n, hp->dim,
                   hp->rms_eps); /* xb[n, dim] */
    float *gu[2] = {m->hg, m->hu}; /* [n, ffn] x 2 */
    const tr_weight *wgu[2] = {&w->gate, &w->up};
    f->op->matmul(f->st, 2, gu, wgu, m->xb, n, false);
    f->op->swiglu(f->st, m->hg, m->hg, m->hu,
                  (int64_t)n * hp->ffn_dim); /* hg[n, ffn] */
    float *res[1] = {m->x};
    const tr_weight *wd[1] = {&w->down};
    f->op->matmul(f->st, 1, res, wd, m->hg, n, true); /* x[n, dim] += */
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
    f->op->matmul(f->st, 1, lo, wout, m->xsel, f->n_logits,
                  false); /* [n_logits, vocab] */
    if (!m->host_memory)
        s = f->op->download(f->st, f->logits, m->logits,
                            (size_t)f->n_logits * (size_t)hp->n_vocab *
                                sizeof(float));
    tr_status s2 = f->op->stream_synchronize(f->st);
    return s ? s : s2;
}
