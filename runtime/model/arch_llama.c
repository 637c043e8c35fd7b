/* arch_llama.c — the llama family (Llama 2/3, SmolLM2, Mistral-style
 * GGUFs): RMSNorm, rotary embedding (GGML normal mode) on Q and K,
 * grouped-query attention, a SwiGLU feed-forward, an optional tied output
 * embedding.
 *
 * Layering: one entry of the architecture table (arch.c); written on the
 * shared blocks of model_internal.h. Shapes: n = tokens in the batch.
 */
#include <math.h>

#include "runtime/model/model_internal.h"

static tr_status llama_hparams(const gguf_file *f, model_hparams *hp,
                               tr_diag *diag) {
    tr_status s = tr_model_hp_read_common(f, hp, diag);
    if (s) return s;
    /* non-positive counts are left to tr_model_hp_check, which names all */
    if (hp->n_heads <= 0 || hp->dim <= 0) return TR_OK;
    if (hp->dim % hp->n_heads != 0)
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "implausible hyper-parameters: dim %d is not a "
                           "multiple of %d heads",
                           hp->dim, hp->n_heads);
    hp->head_dim = hp->dim / hp->n_heads;
    uint32_t v = (uint32_t)hp->head_dim;
    if ((s = tr_model_hp_u32(f, hp->arch, "rope.dimension_count", &v, false,
                             diag)))
        return s;
    if ((int32_t)v != hp->head_dim)
        return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0,
                           "partial rotary embedding (%u of %d dims)", v,
                           hp->head_dim);
    return TR_OK;
}

static tr_status llama_bind_layers(model *m, tr_diag *diag) {
    for (int32_t l = 0; l < m->hp.n_layers; l++) {
        tr_layer_weights *L = &m->layers[l];
        tr_status s;
        if ((s = tr_model_bind_attn(m, l, &L->attn, diag)) ||
            (s = tr_model_bind_ffn(m, l, &L->ffn, diag)))
            return s;
    }
    return TR_OK;
}

static tr_status llama_forward(tr_fwd *f) {
    const model_hparams *hp = &f->m->hp;
    const tr_attn_opts ao = {.rope_base = hp->rope_base, .rope_scale = 1.0f,
                             .scale = 1.0f / sqrtf((float)hp->head_dim)};
    tr_model_block_embed(f); /* x[n, dim] */
    for (int32_t l = 0; l < hp->n_layers; l++) {
        const tr_layer_weights *L = &f->m->layers[l];
        /* x += wo . attn(rope(q), rope(k), v) of rmsnorm(x) */
        tr_model_block_attn(f, l, &L->attn, &ao);
        /* x += down(silu(gate(xb)) * up(xb)), xb = rmsnorm(x) */
        tr_model_block_ffn_swiglu(f, &L->ffn);
    }
    /* logits[n_logits, vocab] = output . rmsnorm(x[logit_rows]) */
    return tr_model_block_logits(f);
}

const tr_model_arch tr_model_arch_llama = {
    .name = "llama",
    .load_hparams = llama_hparams,
    .bind_layers = llama_bind_layers,
    .forward = llama_forward,
};
