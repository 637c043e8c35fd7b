/* model.c — what every architecture shares: loading (the architecture
 * table lookup, the generic hyper-parameters and the input/output
 * tensors, scratch), the KV memory, the batch checks, and the forward
 * call that hands the batch to the family's forward pass.
 *
 * The families are in arch_<family>.c, the blocks they are written with
 * in blocks.c (model_internal.h).
 */
#include "runtime/model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "runtime/model/model_internal.h"

/* general.architecture -> the table entry, with hp->arch set. */
static tr_status find_arch(const gguf_file *f, model_hparams *hp,
                           const tr_model_arch **out, tr_diag *diag) {
    gguf_str arch;
    if (tr_gguf_get_str(f, "general.architecture", &arch) != TR_OK)
        return tr_diag_set(diag, TR_ERR_NOT_FOUND, 0,
                           "model metadata 'general.architecture' missing");
    if (arch.len >= sizeof hp->arch) arch.len = sizeof hp->arch - 1;
    memcpy(hp->arch, arch.ptr, arch.len);
    hp->arch[arch.len] = 0;
    for (size_t i = 0; i < arch.len; i++)
        if ((unsigned char)hp->arch[i] < 0x20) hp->arch[i] = '?';
    *out = tr_model_arch_find(hp->arch);
    if (!*out) {
        char list[256];
        return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0,
                           "unsupported architecture '%s' (supported: %s)",
                           hp->arch, tr_model_arch_list(list, sizeof list));
    }
    return TR_OK;
}

/* The vocabulary size is token_embd's row count, whatever the family. */
static tr_status read_vocab(const gguf_file *f, model_hparams *hp,
                            tr_diag *diag) {
    const gguf_tensor *te = tr_gguf_tensor_find(f, "token_embd.weight");
    if (!te)
        return tr_diag_set(diag, TR_ERR_NOT_FOUND, 0,
                           "tensor 'token_embd.weight' missing");
    if (te->ne[1] == 0 || te->ne[1] > (1u << 24))
        return tr_diag_set(diag, TR_ERR_FORMAT, te->offset,
                           "tensor 'token_embd.weight': implausible "
                           "vocabulary size %llu",
                           (unsigned long long)te->ne[1]);
    hp->n_vocab = (int32_t)te->ne[1];
    return TR_OK;
}

/* token_embd, output_norm, output (absent: tied to token_embd). */
static tr_status bind_io(model *m, tr_diag *diag) {
    model_hparams *hp = &m->hp;
    tr_status s;
    if ((s = tr_model_bind(m, "token_embd.weight", hp->n_vocab, hp->dim,
                           &m->tok_embd, diag)) ||
        (s = tr_model_bind_norm(m, "output_norm.weight", hp->dim,
                                &m->out_norm, diag)))
        return s;
    if (!tr_gguf_tensor_find(m->file, "output.weight")) {
        hp->tied_output = true;
        m->output = m->tok_embd;
        return TR_OK;
    }
    return tr_model_bind(m, "output.weight", hp->n_vocab, hp->dim, &m->output,
                         diag);
}

static tr_status alloc_scratch(model *m, float **p, int64_t rows,
                               int64_t cols) {
    uint64_t bytes;
    if (tr_mul_overflow_u64((uint64_t)rows, (uint64_t)cols, &bytes) ||
        tr_mul_overflow_u64(bytes, sizeof(float), &bytes))
        return TR_ERR_OVERFLOW;
    return m->be->ops->alloc(m->be, (size_t)bytes, (void **)p);
}

/* owned: f again when the caller lets the model give back copied tensors'
 * bytes, else NULL. */
static tr_status load(const gguf_file *f, gguf_file *owned, tr_backend *be,
                      int32_t max_batch_tokens, model **out, tr_diag *diag) {
    if (!f || !be || !out || max_batch_tokens <= 0)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "model_load: bad arguments");
    const char *missing = tr_backend_missing_op(be);
    if (missing)
        return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0,
                           "the %s backend lacks the '%s' op",
                           be->ops->get_info ? tr_backend_get_info(be).name
                                             : "compute",
                           missing);
    model *m = calloc(1, sizeof *m);
    if (!m) return TR_ERR_NOMEM;
    m->be = be;
    m->owned_file = owned;
    m->host_memory = tr_backend_get_info(be).host_memory;
    m->file = f;
    m->max_batch = max_batch_tokens;
    model_hparams *hp = &m->hp;
    tr_status s;
    if ((s = find_arch(f, hp, &m->arch, diag)) ||
        (s = m->arch->load_hparams(f, hp, diag)) ||
        (s = tr_model_hp_check(hp, diag)) || (s = read_vocab(f, hp, diag)) ||
        (s = bind_io(m, diag)))
        goto fail;
    if (hp->attn_scale == 0.0f) hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    m->window = calloc((size_t)hp->n_layers, sizeof *m->window);
    if (!m->layers || !m->window) {
        s = TR_ERR_NOMEM;
        goto fail;
    }
    if ((m->arch->load_windows &&
         (s = m->arch->load_windows(f, hp, m->window, diag))) ||
        (s = m->arch->bind_layers(m, diag)) ||
        (s = tr_model_balance_q4_keys(m, diag)) ||
        (s = tr_model_prepare_matmuls(m, diag)))
        goto fail;
    hp->n_local_layers = 0;
    for (int32_t l = 0; l < hp->n_layers; l++) hp->n_local_layers += m->window[l] > 0;
    if ((s = tr_model_kv_units_init(m))) goto fail;

    const int64_t n = max_batch_tokens, dim = hp->dim,
                  q_dim = (int64_t)hp->n_heads * hp->head_dim,
                  kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim;
    if ((s = alloc_scratch(m, &m->x, n, dim)) ||
        (s = alloc_scratch(m, &m->xb, n, dim)) ||
        (s = alloc_scratch(m, &m->q, n, q_dim)) ||
        (s = alloc_scratch(m, &m->k, n, kv_dim)) ||
        (s = alloc_scratch(m, &m->v, n, kv_dim)) ||
        (s = alloc_scratch(m, &m->att, n, q_dim)) ||
        (s = alloc_scratch(m, &m->hg, n, hp->ffn_dim)) ||
        (s = alloc_scratch(m, &m->hu, n, hp->ffn_dim)) ||
        (s = alloc_scratch(m, &m->xsel, n, dim)) ||
        /* host memory: the output matmul writes the caller's buffer */
        (!m->host_memory && (s = alloc_scratch(m, &m->logits, n, hp->n_vocab)))) {
        tr_diag_set(diag, s, 0, "cannot allocate scratch for %d tokens",
                    max_batch_tokens);
        goto fail;
    }
    m->mask_union = calloc(((size_t)hp->n_vocab + 63) / 64, sizeof *m->mask_union);
    m->mask_ids = calloc((size_t)(hp->n_vocab / MODEL_SPARSE_LOGITS_SHARE) + 1,
                         sizeof *m->mask_ids);
    if (!m->mask_union || !m->mask_ids) {
        s = tr_diag_set(diag, TR_ERR_NOMEM, 0, "cannot allocate the logit mask scratch");
        goto fail;
    }
    *out = m;
    return TR_OK;
fail:
    tr_model_free(m);
    return s;
}

tr_status tr_model_load(const gguf_file *f, tr_backend *be,
                        int32_t max_batch_tokens, model **out, tr_diag *diag) {
    return load(f, NULL, be, max_batch_tokens, out, diag);
}

tr_status tr_model_load_owning(gguf_file *f, tr_backend *be,
                               int32_t max_batch_tokens, model **out,
                               tr_diag *diag) {
    return load(f, f, be, max_batch_tokens, out, diag);
}

void tr_model_free(model *m) {
    if (!m) return;
    tr_backend *be = m->be;
    float *bufs[] = {m->x,  m->xb, m->q,  m->k,    m->v,
                     m->att, m->hg, m->hu, m->xsel, m->logits};
    for (size_t i = 0; i < TR_ARRAY_LEN(bufs); i++)
        if (bufs[i]) be->ops->free(be, bufs[i]);
    for (int i = 0; i < m->n_device_copies; i++)
        be->ops->free(be, m->device_copies[i]);
    free(m->device_copies);
    free(m->balanced_norms);
    free(m->q4k_calibration);
    free(m->layers);
    free(m->window);
    free(m->kv_layer_unit);
    free(m->kv_layer_slot);
    free(m->unit_ids);
    free(m->unit_ptrs);
    free(m->mask_union);
    free(m->mask_ids);
    free(m);
}

const model_hparams *tr_model_get_hparams(const model *m) { return &m->hp; }
int32_t tr_model_layer_window(const model *m, int32_t layer) {
    return m && layer >= 0 && layer < m->hp.n_layers ? m->window[layer] : 0;
}
uint64_t tr_model_weight_bytes(const model *m) { return m->weight_bytes; }
int32_t tr_model_max_batch_tokens(const model *m) { return m->max_batch; }

/* The layout of a model's pages, without memory. */
static tr_kv_layout kv_shape(const model *m, int32_t page_size, tr_kv_type k,
                             tr_kv_type v) {
    return (tr_kv_layout){.n_layers = m->hp.n_layers,
                          .page_size = page_size,
                          .n_kv_heads = m->hp.n_kv_heads,
                          .head_dim = m->hp.head_dim,
                          .type_k = k,
                          .type_v = v};
}

uint64_t tr_model_kv_page_bytes(const model *m, int32_t page_size, tr_kv_type k,
                                tr_kv_type v) {
    tr_kv_layout kv = kv_shape(m, page_size, k, v);
    if (!tr_kv_row_bytes(&kv, 0) || !tr_kv_row_bytes(&kv, 1)) return 0;
    /* in 64 bits: the layout's own size_t helpers could wrap on 32-bit */
    return (uint64_t)m->hp.n_layers * (uint64_t)page_size *
           ((uint64_t)tr_kv_row_bytes(&kv, 0) + (uint64_t)tr_kv_row_bytes(&kv, 1));
}

tr_status tr_model_kv_alloc(model *m, int32_t n_pages, int32_t page_size,
                            tr_kv_type k, tr_kv_type v, tr_kv_layout *kv,
                            const char **why) {
    return tr_model_kv_alloc_units(m, n_pages, page_size, k, v, false, kv, why);
}

tr_status tr_model_kv_alloc_units(model *m, int32_t n_pages, int32_t page_size,
                                  tr_kv_type k, tr_kv_type v, bool split,
                                  tr_kv_layout *kv, const char **why) {
    const char *dummy;
    if (!why) why = &dummy;
    *why = NULL;
    if (n_pages <= 0 || page_size <= 0 || (unsigned)k >= TR_KV_TYPE_COUNT ||
        (unsigned)v >= TR_KV_TYPE_COUNT)
        return TR_ERR_INVALID_ARG;
    tr_kv_units units;
    tr_model_kv_units(m, split, &units);
    uint64_t page_bytes = tr_model_kv_page_bytes(m, page_size, k, v) /
                          (uint64_t)units.n;
    if (page_bytes == 0) {
        *why = "the KV type needs head_dim to be a multiple of 32 (q4)";
        return TR_ERR_UNSUPPORTED;
    }
    if (!m->be->ops->supports_kv(m->be, k, v)) {
        *why = "the compute backend does not implement this KV type";
        return TR_ERR_UNSUPPORTED;
    }
    uint64_t bytes;
    if (tr_mul_overflow_u64(page_bytes, (uint64_t)n_pages, &bytes) ||
        bytes > SIZE_MAX)
        return TR_ERR_OVERFLOW;
    void *base = NULL;
    tr_status s = m->be->ops->alloc(m->be, (size_t)bytes, &base);
    if (s) return s;
    *kv = kv_shape(m, page_size, k, v);
    kv->base = base;
    kv->n_pages = n_pages;
    kv->window = m->hp.n_local_layers ? m->window : NULL;
    if (units.n > 1) {
        kv->unit_layers = units.layers;
        kv->layer_slot = m->kv_layer_slot;
    }
    return TR_OK;
}

tr_status tr_model_kv_page_copy(model *m, const tr_kv_layout *kv, int32_t page,
                                void *host, bool to_device) {
    if (!kv || !kv->base || !host || page < 0 || page >= kv->n_pages)
        return TR_ERR_INVALID_ARG;
    size_t pb = tr_kv_page_bytes(kv);
    char *dev = (char *)kv->base + (size_t)page * pb;
    const tr_backend_ops *o = m->be->ops;
    tr_stream *st = tr_backend_stream(m->be);
    tr_status s = to_device ? o->upload(st, dev, host, pb) : o->download(st, host, dev, pb);
    return s != TR_OK ? s : o->stream_synchronize(st);
}

void tr_model_kv_free(model *m, tr_kv_layout *kv) {
    if (kv && kv->base) m->be->ops->free(m->be, kv->base);
    if (kv) kv->base = NULL;
}

/* The batch is host memory built by the caller (the engine); check it
 * before any kernel reads through it. */
static tr_status check_batch(const model *m, const tr_kv_layout *kv,
                             const tr_batch *b, const int32_t *tokens,
                             const int32_t *logit_rows, int32_t n_logits) {
    if (b->n_tokens <= 0 || b->n_tokens > m->max_batch || b->n_seqs <= 0 ||
        n_logits < 0 || n_logits > b->n_tokens)
        return TR_ERR_INVALID_ARG;
    /* the windows come with the layout tr_model_kv_alloc made */
    if (kv->window != (m->hp.n_local_layers ? m->window : NULL))
        return TR_ERR_INVALID_ARG;
    if (kv->n_layers != m->hp.n_layers || kv->n_kv_heads != m->hp.n_kv_heads ||
        kv->head_dim != m->hp.head_dim)
        return TR_ERR_INVALID_ARG;
    if (kv->unit_layers > 0 && (kv->layer_slot != m->kv_layer_slot ||
                                kv->unit_layers != m->kv_split.layers))
        return TR_ERR_INVALID_ARG;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        int32_t s = b->seq[t], p = b->pos[t];
        if (tokens[t] < 0 || tokens[t] >= m->hp.n_vocab) return TR_ERR_INVALID_ARG;
        if (s < 0 || s >= b->n_seqs || p < 0) return TR_ERR_INVALID_ARG;
        if (p / kv->page_size >= b->n_pages[s]) return TR_ERR_INVALID_ARG;
    }
    if (tr_model_check_tables(m, kv, b) != TR_OK) return TR_ERR_INVALID_ARG;
    for (int32_t i = 0; i < n_logits; i++)
        if (logit_rows[i] < 0 || logit_rows[i] >= b->n_tokens)
            return TR_ERR_INVALID_ARG;
    return TR_OK;
}

tr_status tr_model_forward(model *m, const tr_kv_layout *kv, const tr_batch *b,
                           const int32_t *tokens, const int32_t *logit_rows,
                           int32_t n_logits, float *logits) {
    return tr_model_forward_masked(m, kv, b, tokens, logit_rows, n_logits,
                                   logits, NULL);
}

tr_status tr_model_forward_masked(model *m, const tr_kv_layout *kv,
                                  const tr_batch *b, const int32_t *tokens,
                                  const int32_t *logit_rows, int32_t n_logits,
                                  float *logits, const tr_logit_masks *masks) {
    tr_status s = check_batch(m, kv, b, tokens, logit_rows, n_logits);
    if (!s && masks && (!masks->row_mask ||
                        masks->n_words < ((size_t)m->hp.n_vocab + 63) / 64))
        s = TR_ERR_INVALID_ARG;
    if (s) {
        tr_log(TR_LOG_ERROR, "model_forward: malformed batch (%d tokens)",
               b->n_tokens);
        return s;
    }
    const tr_batch *unit_b = NULL;
    if ((s = tr_model_unit_batches(m, kv, b, &unit_b))) return s;
    tr_fwd f = {
        .m = m,
        .st = tr_backend_stream(m->be),
        .op = m->be->ops,
        .kv = kv,
        .b = b,
        .unit_b = unit_b,
        .tokens = tokens,
        .n = b->n_tokens,
        .logit_rows = logit_rows,
        .n_logits = n_logits,
        .logits = logits,
        .masks = masks,
    };
    return m->arch->forward(&f);
}
