/* weights.c — binding GGUF tensors to a model: presence, shape and type
 * checks, and making each tensor readable by the backend. See
 * model_internal.h.
 *
 * The backend's import_weights decides where the bytes live: a
 * host-memory backend (the CPU) reads them in place from the file's
 * mapping or read-in copy, so the gguf_file outlives the model (model.h);
 * a device backend makes a copy, freed with the model.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/model/model_internal.h"

/* "F32 F16 ...": the weight types be computes with. */
static const char *weight_types(const tr_backend *be, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (uint32_t t = 0; t < TR_DTYPE_COUNT_; t++) {
        if (!tr_dtype_known(t) ||
            !be->ops->supports(be, TR_BACKEND_CAP_WEIGHT, (tr_dtype)t))
            continue;
        int w = snprintf(buf + at, cap - at, "%s%s", at ? " " : "",
                         tr_dtype_name(t));
        if (w < 0 || (size_t)w >= cap - at) break;
        at += (size_t)w;
    }
    return buf;
}

tr_status tr_model_import(model *m, const void *host, size_t bytes,
                          const void **out) {
    void **grown = realloc(m->device_copies,
                           sizeof(void *) * (size_t)(m->n_device_copies + 1));
    if (!grown) return TR_ERR_NOMEM;
    m->device_copies = grown;
    void *owned = NULL;
    tr_status s = m->be->ops->import_weights(m->be, host, bytes, out, &owned);
    if (s == TR_OK && owned) m->device_copies[m->n_device_copies++] = owned;
    return s;
}

/* Binds tensor `name` of shape [rows, cols] (ne = {cols, rows}); a norm
 * (matrix false) is a vector of cols F32 elements. */
static tr_status bind(model *m, const char *name, int64_t rows, int64_t cols,
                      bool matrix, tr_weight *w, tr_diag *diag) {
    const gguf_tensor *t = tr_gguf_tensor_find(m->file, name);
    if (!t)
        return tr_diag_set(diag, TR_ERR_NOT_FOUND, 0, "tensor '%s' missing",
                           name);
    uint64_t want1 = matrix ? (uint64_t)rows : 1;
    if (t->ne[0] != (uint64_t)cols || t->ne[1] != want1 || t->ne[2] != 1 ||
        t->ne[3] != 1)
        return tr_diag_set(
            diag, TR_ERR_FORMAT, t->offset,
            "tensor '%s' has shape [%llu, %llu, %llu, %llu], expected "
            "[%lld, %lld]",
            name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
            (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
            (long long)cols, (long long)want1);
    if (!matrix && t->type != TR_DTYPE_F32)
        return tr_diag_set(diag, TR_ERR_UNSUPPORTED, t->offset,
                           "tensor '%s' has type %s, expected F32 for a norm",
                           name, tr_dtype_name(t->type));
    if (!m->be->ops->supports(m->be, TR_BACKEND_CAP_WEIGHT, t->type)) {
        tr_backend_info info = tr_backend_get_info(m->be);
        char types[160];
        return tr_diag_set(diag, TR_ERR_UNSUPPORTED, t->offset,
                           "tensor '%s' has type %s, which the %s backend "
                           "cannot compute with (supported: %s)",
                           name, tr_dtype_name(t->type), info.name,
                           weight_types(m->be, types, sizeof types));
    }
    const void *data = NULL;
    tr_status s = tr_model_import(m, t->data, t->size, &data);
    if (s) return tr_diag_set(diag, s, 0, "cannot load '%s' to the device", name);
    w->data = data;
    w->type = (tr_dtype)t->type;
    w->rows = rows;
    w->cols = cols;
    m->weight_bytes += t->size;
    return TR_OK;
}

tr_status tr_model_bind(model *m, const char *name, int64_t rows,
                        int64_t cols, tr_weight *w, tr_diag *diag) {
    return bind(m, name, rows, cols, true, w, diag);
}

tr_status tr_model_bind_norm(model *m, const char *name, int64_t n,
                             const float **out, tr_diag *diag) {
    tr_weight w = {0};
    tr_status s = bind(m, name, 1, n, false, &w, diag);
    if (s == TR_OK) *out = (const float *)w.data;
    return s;
}

/* blk.<l>.<suffix>.weight */
static const char *layer_name(char *buf, size_t cap, int32_t l,
                              const char *suffix) {
    snprintf(buf, cap, "blk.%d.%s.weight", l, suffix);
    return buf;
}

tr_status tr_model_bind_layer_vec(model *m, int32_t l, const char *suffix,
                                  int64_t n, bool required, const float **out,
                                  tr_diag *diag) {
    char name[96];
    /* suffix names the tensor fully ("attn_q.bias") or takes ".weight" */
    const char *dot = strchr(suffix, '.');
    snprintf(name, sizeof name, "blk.%d.%s%s", l, suffix, dot ? "" : ".weight");
    *out = NULL;
    if (!required && !tr_gguf_tensor_find(m->file, name)) return TR_OK;
    return tr_model_bind_norm(m, name, n, out, diag);
}

tr_status tr_model_bind_attn(model *m, int32_t l, tr_attn_weights *w,
                             tr_diag *diag) {
    const model_hparams *hp = &m->hp;
    const int64_t dim = hp->dim, q_dim = (int64_t)hp->n_heads * hp->head_dim,
                  kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim;
    char n[96];
    tr_status s;
    if ((s = tr_model_bind_norm(m, layer_name(n, sizeof n, l, "attn_norm"),
                                dim, &w->norm, diag)) ||
        (s = tr_model_bind(m, layer_name(n, sizeof n, l, "attn_q"), q_dim, dim,
                           &w->wq, diag)) ||
        (s = tr_model_bind(m, layer_name(n, sizeof n, l, "attn_k"), kv_dim,
                           dim, &w->wk, diag)) ||
        (s = tr_model_bind(m, layer_name(n, sizeof n, l, "attn_v"), kv_dim,
                           dim, &w->wv, diag)) ||
        (s = tr_model_bind(m, layer_name(n, sizeof n, l, "attn_output"), dim,
                           q_dim, &w->wo, diag)))
        return s;
    return TR_OK;
}

tr_status tr_model_bind_ffn(model *m, int32_t l, tr_ffn_weights *w,
                            tr_diag *diag) {
    const int64_t dim = m->hp.dim, ffn = m->hp.ffn_dim;
    char n[96];
    tr_status s;
    if ((s = tr_model_bind_norm(m, layer_name(n, sizeof n, l, "ffn_norm"), dim,
                                &w->norm, diag)) ||
        (s = tr_model_bind(m, layer_name(n, sizeof n, l, "ffn_gate"), ffn, dim,
                           &w->gate, diag)) ||
        (s = tr_model_bind(m, layer_name(n, sizeof n, l, "ffn_up"), ffn, dim,
                           &w->up, diag)) ||
        (s = tr_model_bind(m, layer_name(n, sizeof n, l, "ffn_down"), dim, ffn,
                           &w->down, diag)))
        return s;
    return TR_OK;
}

/* prepare's callback: matrix i's file bytes are no longer read. */
typedef struct forget_ctx {
    model *m;
    const tr_weight *const *in;
} forget_ctx;

static void forget_copied(void *ctx, int32_t i) {
    const forget_ctx *c = ctx;
    const tr_weight *w = c->in[i];
    uint64_t rb = 0;
    if (c->m->host_memory && tr_dtype_row_bytes(w->type, (uint64_t)w->cols, &rb))
        tr_gguf_forget(c->m->owned_file, w->data, (size_t)(rb * (uint64_t)w->rows));
}

/* Every layer's matrices and the output matrix (a tied one is also the
 * token table: embed reads the prepared copy too). A separate token_embd
 * stays as it is: embed reads one row of it per token. With an owned
 * file, each copied matrix's file bytes are given back as soon as it is
 * copied, so the load never holds both (peak RSS). */
tr_status tr_model_prepare_matmuls(model *m, tr_diag *diag) {
    if (!m->be->ops->prepare_matmul_weights || m->hp.n_layers <= 0) return TR_OK;
    const int32_t per_layer = 7, n = m->hp.n_layers * per_layer + 1;
    const tr_weight **in = malloc(sizeof *in * (size_t)n);
    tr_weight *out = malloc(sizeof *out * (size_t)n);
    void **grown = realloc(m->device_copies,
                           sizeof(void *) * (size_t)(m->n_device_copies + 1));
    if (grown) m->device_copies = grown;
    tr_status s = in && out && grown ? TR_OK : TR_ERR_NOMEM;
    for (int32_t l = 0; s == TR_OK && l < m->hp.n_layers; l++) {
        tr_layer_weights *L = &m->layers[l];
        tr_weight *mats[] = {&L->attn.wq, &L->attn.wk, &L->attn.wv, &L->attn.wo,
                             &L->ffn.gate, &L->ffn.up, &L->ffn.down};
        for (int32_t i = 0; i < per_layer; i++) in[l * per_layer + i] = mats[i];
    }
    if (s == TR_OK) in[n - 1] = &m->output;
    void *owned = NULL;
    forget_ctx fc = {m, in};
    if (s == TR_OK)
        s = m->be->ops->prepare_matmul_weights(m->be, n, in, out, &owned,
                                               m->owned_file ? forget_copied : NULL, &fc);
    if (s == TR_OK) {
        if (owned) m->device_copies[m->n_device_copies++] = owned;
        for (int32_t k = 0; k < n; k++) *(tr_weight *)in[k] = out[k];
        if (m->hp.tied_output) m->tok_embd = m->output;
    }
    free(in);
    free(out);
    return s ? tr_diag_set(diag, s, 0, "cannot prepare the layers' matrices") : TR_OK;
}
