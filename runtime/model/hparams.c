/* hparams.c — reading an architecture's hyper-parameters from GGUF
 * metadata, and the bounds every family must meet. See model_internal.h.
 *
 * The file is untrusted: every count is checked before it sizes anything
 * (scratch, KV pages, stack buffers of the attention kernels), and every
 * error names the key or the values at fault.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/model/model_internal.h"

/* The largest head_dim the attention kernels of every backend take
 * (kernels/cpu: CPU_ATTN_MAX_HEAD_DIM, stack buffers). */
#define HP_MAX_HEAD_DIM 1024

tr_status tr_model_hp_u32(const gguf_file *f, const char *arch,
                          const char *suffix, uint32_t *out, bool required,
                          tr_diag *diag) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    tr_status s = tr_gguf_get_u32(f, key, out);
    if (s == TR_ERR_NOT_FOUND && !required) return TR_OK;
    if (s != TR_OK)
        return tr_diag_set(diag, s == TR_ERR_NOT_FOUND ? TR_ERR_NOT_FOUND
                                                       : TR_ERR_FORMAT,
                           0, "model metadata '%s': %s", key,
                           s == TR_ERR_NOT_FOUND ? "missing"
                                                 : "not a 32-bit count");
    return TR_OK;
}

tr_status tr_model_hp_f32(const gguf_file *f, const char *arch,
                          const char *suffix, float *out, bool required,
                          tr_diag *diag) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    tr_status s = tr_gguf_get_f32(f, key, out);
    if (s == TR_ERR_NOT_FOUND && !required) return TR_OK;
    if (s != TR_OK)
        return tr_diag_set(diag, s == TR_ERR_NOT_FOUND ? TR_ERR_NOT_FOUND
                                                       : TR_ERR_FORMAT,
                           0, "model metadata '%s': %s", key,
                           s == TR_ERR_NOT_FOUND ? "missing" : "not a float");
    return TR_OK;
}

tr_status tr_model_hp_read_common(const gguf_file *f, model_hparams *hp,
                                  tr_diag *diag) {
    const char *a = hp->arch;
    uint32_t v = 0;
    tr_status s;
#define NEED(suffix, field)                                              \
    if ((s = tr_model_hp_u32(f, a, suffix, &v, true, diag))) return s;   \
    hp->field = (int32_t)v;
    NEED("block_count", n_layers);
    NEED("embedding_length", dim);
    NEED("attention.head_count", n_heads);
    NEED("feed_forward_length", ffn_dim);
#undef NEED
    v = (uint32_t)hp->n_heads;
    if ((s = tr_model_hp_u32(f, a, "attention.head_count_kv", &v, false, diag)))
        return s;
    hp->n_kv_heads = (int32_t)v;
    v = 4096;
    if ((s = tr_model_hp_u32(f, a, "context_length", &v, false, diag)))
        return s;
    hp->n_ctx_train = (int32_t)v;
    hp->rms_eps = 1e-5f;
    hp->rope_base = 10000.0f;
    hp->rope_freq_scale = 1.0f;
    hp->embd_scale = 1.0f;
    if ((s = tr_model_hp_f32(f, a, "attention.layer_norm_rms_epsilon",
                             &hp->rms_eps, false, diag)) ||
        (s = tr_model_hp_f32(f, a, "rope.freq_base", &hp->rope_base, false,
                             diag)))
        return s;
    return TR_OK;
}

tr_status tr_model_hp_check(const model_hparams *hp, tr_diag *diag) {
    /* u32 keys were cast to int32: a value >= 2^31 shows up negative */
    if (hp->n_layers <= 0 || hp->n_layers > 1024 || hp->dim <= 0 ||
        hp->dim > 65536 || hp->n_heads <= 0 || hp->n_heads > 1024 ||
        hp->n_kv_heads <= 0 || hp->n_heads % hp->n_kv_heads != 0 ||
        hp->ffn_dim <= 0 || hp->ffn_dim > 1 << 20 || hp->n_ctx_train <= 0)
        return tr_diag_set(
            diag, TR_ERR_FORMAT, 0,
            "implausible hyper-parameters: layers %d, dim %d, heads %d/%d, "
            "ffn %d, context %d",
            hp->n_layers, hp->dim, hp->n_heads, hp->n_kv_heads, hp->ffn_dim,
            hp->n_ctx_train);
    if (hp->head_dim <= 0 || hp->head_dim % 2 != 0 ||
        hp->head_dim > HP_MAX_HEAD_DIM)
        return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0,
                           "head dimension %d (supported: even, at most %d)",
                           hp->head_dim, HP_MAX_HEAD_DIM);
    return TR_OK;
}

tr_status tr_model_hp_read_head_dim(const gguf_file *f, model_hparams *hp,
                                    tr_diag *diag) {
    if (hp->n_heads <= 0 || hp->dim <= 0)
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "implausible hyper-parameters: dim %d, %d heads",
                           hp->dim, hp->n_heads);
    uint32_t k = 0, v;
    tr_status s;
    if ((s = tr_model_hp_u32(f, hp->arch, "attention.key_length", &k, false, diag)))
        return s;
    if (k == 0) { /* absent: dim / n_heads */
        if (hp->dim % hp->n_heads != 0)
            return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                               "implausible hyper-parameters: dim %d is not a multiple "
                               "of %d heads and '%s.attention.key_length' is missing",
                               hp->dim, hp->n_heads, hp->arch);
        k = (uint32_t)(hp->dim / hp->n_heads);
    }
    v = k;
    if ((s = tr_model_hp_u32(f, hp->arch, "attention.value_length", &v, false, diag)))
        return s;
    if (k != v)
        return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0,
                           "model metadata '%s.attention.key_length' (%u) and "
                           "'%s.attention.value_length' (%u) differ",
                           hp->arch, k, hp->arch, v);
    if (k > 1u << 16) /* (the kernels' own bound is checked later) */
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "model metadata '%s.attention.key_length': %u", hp->arch, k);
    hp->head_dim = (int32_t)k;
    uint32_t rot = k;
    if ((s = tr_model_hp_u32(f, hp->arch, "rope.dimension_count", &rot, false, diag)))
        return s;
    if (rot != k)
        return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0,
                           "model metadata '%s.rope.dimension_count': partial rotary "
                           "embedding (%u of %u dims)",
                           hp->arch, rot, k);
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    return TR_OK;
}

tr_status tr_model_hp_read_rope_scaling(const gguf_file *f, model_hparams *hp,
                                        tr_diag *diag) {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", hp->arch);
    gguf_str type;
    bool linear = true; /* llama.cpp's default when a factor is given */
    tr_status s = tr_gguf_get_str(f, key, &type);
    if (s == TR_OK) {
        if (tr_gguf_str_eq(type, "none")) {
            linear = false;
        } else if (!tr_gguf_str_eq(type, "linear")) {
            char name[32];
            int n = (int)(type.len < sizeof name - 1 ? type.len : sizeof name - 1);
            return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0,
                               "model metadata '%s': rope scaling '%.*s' (supported: "
                               "none, linear)",
                               key, n, type.ptr);
        }
    } else if (s != TR_ERR_NOT_FOUND) {
        return tr_diag_set(diag, TR_ERR_FORMAT, 0, "model metadata '%s': not a string",
                           key);
    }
    float factor = 0.0f;
    if ((s = tr_model_hp_f32(f, hp->arch, "rope.scaling.factor", &factor, false, diag)))
        return s;
    if (factor == 0.0f &&
        (s = tr_model_hp_f32(f, hp->arch, "rope.scale_linear", &factor, false, diag)))
        return s;
    if (!(factor >= 0.0f) || factor > 1e6f || (factor > 0.0f && factor < 1e-6f))
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "model metadata '%s.rope.scaling.factor': %g", hp->arch,
                           (double)factor);
    hp->rope_freq_scale = linear && factor > 0.0f ? 1.0f / factor : 1.0f;
    return TR_OK;
}
