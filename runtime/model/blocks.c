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

tr_status tr_model_block_logits(tr_fwd *f) {
    model *m = f->m;
    const model_hparams *hp = &m->hp;
    tr_backend *be = m->be;
    if (f->n_logits == 0) return f->op->synchronize(be);
    /* only the rows asked for (usually each sequence's last) */
    f->op->get_rows(f->st, m->xsel, m->x, hp->dim, f->logit_rows,
                    f->n_logits); /* xsel[n_logits, dim] */
    f->op->rmsnorm(f->st, m->xsel, m->xsel, m->out_norm, f->n_logits, hp->dim,
                   hp->rms_eps);
    /* Straight into the caller's buffer when device memory is host memory
     * (at 32 rows a download would copy 6 MB per step for nothing). */
    float *lo[1] = {be->host_memory ? f->logits : m->logits};
    const tr_weight *wout[1] = {&m->output};
    f->op->matmul(f->st, 1, lo, wout, m->xsel, f->n_logits,
                  false); /* [n_logits, vocab] */
    if (be->host_memory) return f->op->synchronize(be);
    return f->op->download(be, f->logits, m->logits,
                           (size_t)f->n_logits * (size_t)hp->n_vocab *
                               sizeof(float));
}
