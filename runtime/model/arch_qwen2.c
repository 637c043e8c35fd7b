/* arch_qwen2.c — the qwen2 family (Qwen2, Qwen2.5): llama's layer sequence
 * with biases on the Q, K and V projections and GGML's NEOX rope mode
 * (element i of a head pairs with i + head_dim / 2).
 *
 * Layering: one entry of the architecture table (arch.c); written on the
 * shared blocks of model_internal.h. Shapes: n = tokens in the batch.
 *
 * As llama.cpp: the biases are optional (a file has all three or none; one
 * or two is refused), and so is output.bias; rms epsilon is required.
 * Tested on random-weight files (scripts/ref/synth_models.py): no real
 * Qwen2 weights are available here.
 */
#include "runtime/model/model_internal.h"

static tr_status qwen2_hparams(const gguf_file *f, model_hparams *hp,
                               tr_diag *diag) {
    tr_status s;
    if ((s = tr_model_hp_read_common(f, hp, diag)) ||
        (s = tr_model_hp_f32(f, hp->arch, "attention.layer_norm_rms_epsilon",
                             &hp->rms_eps, true, diag)) ||
        (s = tr_model_hp_read_head_dim(f, hp, diag)) ||
        (s = tr_model_hp_read_rope_scaling(f, hp, diag)))
        return s;
    return TR_OK;
}

/* Q, K and V biases: all three or none. */
static tr_status bind_biases(model *m, int32_t l, tr_attn_weights *w,
                             tr_diag *diag) {
    const model_hparams *hp = &m->hp;
    const int64_t q_dim = (int64_t)hp->n_heads * hp->head_dim,
                  kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim;
    tr_status s;
    if ((s = tr_model_bind_layer_vec(m, l, "attn_q.bias", q_dim, false, &w->bq, diag)) ||
        (s = tr_model_bind_layer_vec(m, l, "attn_k.bias", kv_dim, false, &w->bk, diag)) ||
        (s = tr_model_bind_layer_vec(m, l, "attn_v.bias", kv_dim, false, &w->bv, diag)))
        return s;
    if ((w->bq != NULL) != (w->bk != NULL) || (w->bq != NULL) != (w->bv != NULL))
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "layer %d has some of attn_q.bias, attn_k.bias, "
                           "attn_v.bias but not all three",
                           l);
    return TR_OK;
}

static tr_status qwen2_bind_layers(model *m, tr_diag *diag) {
    tr_status s;
    for (int32_t l = 0; l < m->hp.n_layers; l++) {
        tr_layer_weights *L = &m->layers[l];
        if ((s = tr_model_bind_attn(m, l, &L->attn, diag)) ||
            (s = bind_biases(m, l, &L->attn, diag)) ||
            (s = tr_model_bind_ffn(m, l, &L->ffn, diag)))
            return s;
    }
    if (tr_gguf_tensor_find(m->file, "output.bias"))
        return tr_model_bind_norm(m, "output.bias", m->hp.n_vocab, &m->output_bias, diag);
    return TR_OK;
}

static tr_status qwen2_forward(tr_fwd *f) {
    const model_hparams *hp = &f->m->hp;
    const tr_attn_opts ao = {.rope_base = hp->rope_base,
                             .rope_scale = hp->rope_freq_scale,
                             .neox = true,
                             .scale = hp->attn_scale};
    tr_model_block_embed(f); /* x[n, dim] */
    for (int32_t l = 0; l < hp->n_layers; l++) {
        const tr_layer_weights *L = &f->m->layers[l];
        /* x += wo . attn(rope(xb.wq + bq), rope(xb.wk + bk), xb.wv + bv) */
        tr_model_block_attn(f, l, &L->attn, &ao);
        /* x += down(silu(gate(xb)) * up(xb)) */
        tr_model_block_ffn_swiglu(f, &L->ffn);
    }
    return tr_model_block_logits(f); /* [n_logits, vocab] */
}

const tr_model_arch tr_model_arch_qwen2 = {
    .name = "qwen2",
    .load_hparams = qwen2_hparams,
    .bind_layers = qwen2_bind_layers,
    .forward = qwen2_forward,
};
