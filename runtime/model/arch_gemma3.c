/* arch_gemma3.c — the gemma3 family (Gemma 3 text models, 270M to 27B):
 *
 *   x = embed(tokens) * sqrt(dim)
 *   per layer l:
 *     q, k, v = rmsnorm(x) . wq, wk, wv
 *     q, k    = per-head rmsnorm(q), rmsnorm(k); NEOX rope with base_l
 *     x      += rmsnorm_post(attn_l(q, k, v) . wo)   attn_l: sliding window
 *                                                     or global
 *     x      += rmsnorm_post(down(gelu(rmsnorm(x) . gate) * (rmsnorm(x) . up)))
 *   logits = [softcap](rmsnorm(x) . token_embd)     (tied output)
 *
 * Local and global layers: with attention.sliding_window = W > 0, layer l
 * is local (window W, rope base rope.freq_base_swa, default 10000, no
 * rope scaling) unless the pattern makes it global (rope.freq_base and the
 * linear rope scaling, if any). The pattern is
 * attention.sliding_window_pattern: a count P (layer l global iff l % P ==
 * P - 1; P = 0: all local) or one bool per layer (true = local); absent:
 * P = 6, Gemma 3's 5 local : 1 global. Query scale: attention.scale if
 * given, else 1 / sqrt(head_dim), except 1 / sqrt(dim / n_heads) for the
 * 62-layer (27B) model, whose query_pre_attn_scalar differs (llama.cpp
 * decides the same way: the converter writes no key for it).
 *
 * Layering: one entry of the architecture table (arch.c); written on the
 * shared blocks of model_internal.h. See model.h for how local layers use
 * the KV pages.
 */
#include <math.h>
#include <stdio.h>

#include "runtime/model/model_internal.h"

#define GEMMA3_DEFAULT_PATTERN 6

static tr_status gemma3_hparams(const gguf_file *f, model_hparams *hp,
                                tr_diag *diag) {
    const char *a = hp->arch;
    tr_status s;
    if ((s = tr_model_hp_read_common(f, hp, diag)) ||
        (s = tr_model_hp_f32(f, a, "attention.layer_norm_rms_epsilon", &hp->rms_eps,
                             true, diag)) ||
        (s = tr_model_hp_read_head_dim(f, hp, diag)) ||
        (s = tr_model_hp_read_rope_scaling(f, hp, diag)))
        return s;
    uint32_t w = 0;
    if ((s = tr_model_hp_u32(f, a, "attention.sliding_window", &w, false, diag)))
        return s;
    if (w > (uint32_t)INT32_MAX)
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "model metadata '%s.attention.sliding_window': %u", a, w);
    hp->sliding_window = (int32_t)w;
    hp->rope_base_local = 10000.0f;
    if ((s = tr_model_hp_f32(f, a, "rope.freq_base_swa", &hp->rope_base_local, false,
                             diag)))
        return s;
    hp->final_softcap = 0.0f;
    if ((s = tr_model_hp_f32(f, a, "final_logit_softcapping", &hp->final_softcap, false,
                             diag)))
        return s;
    if (!(hp->final_softcap >= 0.0f) || isinf(hp->final_softcap))
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "model metadata '%s.final_logit_softcapping': %g", a,
                           (double)hp->final_softcap);
    if (!(hp->rope_base > 0.0f) || !(hp->rope_base_local > 0.0f))
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "model metadata '%s.rope.freq_base' / 'rope.freq_base_swa': "
                           "%g / %g",
                           a, (double)hp->rope_base, (double)hp->rope_base_local);
    float scale = 0.0f;
    if ((s = tr_model_hp_f32(f, a, "attention.scale", &scale, false, diag))) return s;
    if (scale > 0.0f && isfinite(scale))
        hp->attn_scale = scale;
    else if (scale != 0.0f)
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "model metadata '%s.attention.scale': %g", a, (double)scale);
    else if (hp->n_layers == 62 && hp->dim % hp->n_heads == 0)
        hp->attn_scale = 1.0f / sqrtf((float)(hp->dim / hp->n_heads));
    hp->embd_scale = sqrtf((float)hp->dim); /* as llama.cpp: sqrtf in float */
    return TR_OK;
}

static tr_status gemma3_windows(const gguf_file *f, const model_hparams *hp,
                                int32_t *window, tr_diag *diag) {
    if (hp->sliding_window == 0) return TR_OK; /* every layer global */
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", hp->arch);
    gguf_type et;
    uint64_t n;
    tr_status s = tr_gguf_get_arr(f, key, &et, &n);
    if (s == TR_OK) { /* one entry per layer, true = local */
        if (n != (uint64_t)hp->n_layers || et == GGUF_TYPE_STRING ||
            et == GGUF_TYPE_ARRAY || et == GGUF_TYPE_FLOAT32 || et == GGUF_TYPE_FLOAT64)
            return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                               "model metadata '%s': expected %d bools, one per layer",
                               key, hp->n_layers);
        for (int32_t l = 0; l < hp->n_layers; l++) {
            int64_t v;
            if (tr_gguf_get_arr_i64(f, key, (uint64_t)l, &v))
                return tr_diag_set(diag, TR_ERR_FORMAT, 0, "model metadata '%s'[%d]",
                                   key, l);
            window[l] = v ? hp->sliding_window : 0;
        }
        return TR_OK;
    }
    uint32_t p = GEMMA3_DEFAULT_PATTERN;
    if ((s = tr_model_hp_u32(f, hp->arch, "attention.sliding_window_pattern", &p, false,
                             diag)))
        return s;
    for (int32_t l = 0; l < hp->n_layers; l++)
        window[l] = p == 0 || (uint32_t)l % p < p - 1 ? hp->sliding_window : 0;
    return TR_OK;
}

static tr_status gemma3_bind_layers(model *m, tr_diag *diag) {
    const int64_t hd = m->hp.head_dim, dim = m->hp.dim;
    tr_status s;
    for (int32_t l = 0; l < m->hp.n_layers; l++) {
        tr_layer_weights *L = &m->layers[l];
        if ((s = tr_model_bind_attn(m, l, &L->attn, diag)) ||
            (s = tr_model_bind_layer_vec(m, l, "attn_q_norm", hd, true, &L->attn.q_norm,
                                         diag)) ||
            (s = tr_model_bind_layer_vec(m, l, "attn_k_norm", hd, true, &L->attn.k_norm,
                                         diag)) ||
            (s = tr_model_bind_layer_vec(m, l, "post_attention_norm", dim, true,
                                         &L->attn.post_norm, diag)) ||
            (s = tr_model_bind_ffn(m, l, &L->ffn, diag)) ||
            (s = tr_model_bind_layer_vec(m, l, "post_ffw_norm", dim, true,
                                         &L->ffn.post_norm, diag)))
            return s;
    }
    return TR_OK;
}

static tr_status gemma3_forward(tr_fwd *f) {
    const model *m = f->m;
    const model_hparams *hp = &m->hp;
    /* global layers: the model's base and rope scaling; local ones their
     * own base, unscaled (llama.cpp's freq_scale_swa is 1) */
    const tr_attn_opts global = {.rope_base = hp->rope_base,
                                 .rope_scale = hp->rope_freq_scale,
                                 .neox = true,
                                 .scale = hp->attn_scale};
    const tr_attn_opts local = {.rope_base = hp->rope_base_local,
                                .rope_scale = 1.0f,
                                .neox = true,
                                .scale = hp->attn_scale};
    tr_model_block_embed(f); /* x[n, dim] = embd * sqrt(dim) */
    for (int32_t l = 0; l < hp->n_layers; l++) {
        const tr_layer_weights *L = &m->layers[l];
        /* x += post_norm(wo . attn(rope(qnorm(q)), rope(knorm(k)), v)) */
        tr_model_block_attn(f, l, &L->attn, m->window[l] ? &local : &global);
        /* x += post_norm(down(gelu(gate(xb)) * up(xb))) */
        tr_model_block_ffn_geglu(f, &L->ffn);
    }
    return tr_model_block_logits(f); /* [n_logits, vocab], soft-capped */
}

const tr_model_arch tr_model_arch_gemma3 = {
    .name = "gemma3",
    .load_hparams = gemma3_hparams,
    .load_windows = gemma3_windows,
    .bind_layers = gemma3_bind_layers,
    .forward = gemma3_forward,
};
