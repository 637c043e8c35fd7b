/* arch_qwen3.c — the qwen3 family (Qwen3 dense): llama's layer sequence
 * with a per-head RMSNorm of Q and K (before the rope), NEOX rope mode,
 * no biases, and a head size of its own (attention.key_length: Qwen3-0.6B
 * has 16 heads of 128 over a width of 1024, so q_dim != dim).
 *
 * Layering: one entry of the architecture table (arch.c); written on the
 * shared blocks of model_internal.h. Shapes: n = tokens in the batch.
 * Tested on random-weight files (scripts/ref/synth_models.py).
 */
#include "runtime/model/model_internal.h"

static tr_status qwen3_hparams(const gguf_file *f, model_hparams *hp,
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

static tr_status qwen3_bind_layers(model *m, tr_diag *diag) {
    const int64_t hd = m->hp.head_dim;
    tr_status s;
    for (int32_t l = 0; l < m->hp.n_layers; l++) {
        tr_layer_weights *L = &m->layers[l];
        if ((s = tr_model_bind_attn(m, l, &L->attn, diag)) ||
            (s = tr_model_bind_layer_vec(m, l, "attn_q_norm", hd, true, &L->attn.q_norm,
                                         diag)) ||
            (s = tr_model_bind_layer_vec(m, l, "attn_k_norm", hd, true, &L->attn.k_norm,
                                         diag)) ||
            (s = tr_model_bind_ffn(m, l, &L->ffn, diag)))
            return s;
    }
    return TR_OK;
}

static tr_status qwen3_forward(tr_fwd *f) {
    const model_hparams *hp = &f->m->hp;
    const tr_attn_opts ao = {.rope_base = hp->rope_base,
                             .rope_scale = hp->rope_freq_scale,
                             .neox = true,
                             .scale = hp->attn_scale};
    tr_model_block_embed(f); /* x[n, dim] */
    for (int32_t l = 0; l < hp->n_layers; l++) {
        const tr_layer_weights *L = &f->m->layers[l];
        /* x += wo . attn(rope(qnorm(xb.wq)), rope(knorm(xb.wk)), xb.wv) */
        tr_model_block_attn(f, l, &L->attn, &ao);
        /* x += down(silu(gate(xb)) * up(xb)) */
        tr_model_block_ffn_swiglu(f, &L->ffn);
    }
    return tr_model_block_logits(f); /* [n_logits, vocab] */
}

const tr_model_arch tr_model_arch_qwen3 = {
    .name = "qwen3",
    .load_hparams = qwen3_hparams,
    .bind_layers = qwen3_bind_layers,
    .forward = qwen3_forward,
};
