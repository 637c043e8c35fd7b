/* model.c — the llama architecture against the backend table.
 *
 * Reads top to bottom like llama2.c: load binds tensors, forward runs the
 * layers. Shapes are written beside every buffer; n = tokens in the batch.
 */
#include "runtime/model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"

typedef struct layer_weights {
    const float *attn_norm; /* [dim] */
    tr_weight wq;           /* [dim, dim] */
    tr_weight wk;           /* [kv_dim, dim] */
    tr_weight wv;           /* [kv_dim, dim] */
    tr_weight wo;           /* [dim, dim] */
    const float *ffn_norm;  /* [dim] */
    tr_weight w_gate;       /* [ffn, dim] */
    tr_weight w_up;         /* [ffn, dim] */
    tr_weight w_down;       /* [dim, ffn] */
} layer_weights;

struct model {
    model_hparams hp;
    tr_backend *be;           /* borrowed */
    const gguf_file *file;    /* borrowed */
    tr_weight tok_embd;       /* [vocab, dim] */
    const float *out_norm;    /* [dim] */
    tr_weight output;         /* [vocab, dim], may alias tok_embd */
    layer_weights *layers;    /* [n_layers] */
    void **device_copies;     /* weights uploaded to a non-host backend */
    int n_device_copies;
    uint64_t weight_bytes;

    /* scratch on the backend, sized for max_batch tokens */
    int32_t max_batch;
    float *x;      /* [n, dim] residual stream */
    float *xb;     /* [n, dim] normed input of a sub-layer */
    float *q;      /* [n, dim] */
    float *k;      /* [n, kv_dim] */
    float *v;      /* [n, kv_dim] */
    float *att;    /* [n, dim] attention output before wo */
    float *hg;     /* [n, ffn] gate, then silu(gate) * up */
    float *hu;     /* [n, ffn] up */
    float *xsel;   /* [n, dim] rows whose logits are wanted */
    float *logits; /* [n, vocab] on the device (NULL with host memory) */
};

static tr_status fail(tr_diag *diag, tr_status code, const char *fmt,
                      const char *a, const char *b) {
    return tr_diag_set(diag, code, 0, fmt, a, b);
}

static tr_status read_u32(const gguf_file *f, const char *arch,
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

static tr_status read_f32(const gguf_file *f, const char *arch,
                          const char *suffix, float *out, tr_diag *diag) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    tr_status s = tr_gguf_get_f32(f, key, out);
    if (s == TR_ERR_NOT_FOUND) return TR_OK; /* keep the default */
    if (s != TR_OK)
        return tr_diag_set(diag, TR_ERR_FORMAT, 0,
                           "model metadata '%s': not a float", key);
    return TR_OK;
}

static tr_status read_hparams(const gguf_file *f, model_hparams *hp,
                              tr_diag *diag) {
    memset(hp, 0, sizeof *hp);
    gguf_str arch;
    if (tr_gguf_get_str(f, "general.architecture", &arch) != TR_OK)
        return tr_diag_set(diag, TR_ERR_NOT_FOUND, 0,
                           "model metadata 'general.architecture' missing");
    if (arch.len >= sizeof hp->arch) arch.len = sizeof hp->arch - 1;
    memcpy(hp->arch, arch.ptr, arch.len);
    hp->arch[arch.len] = 0;
    for (size_t i = 0; i < arch.len; i++)
        if ((unsigned char)hp->arch[i] < 0x20) hp->arch[i] = '?';
    if (strcmp(hp->arch, "llama") != 0)
        return fail(diag, TR_ERR_UNSUPPORTED,
                    "unsupported architecture '%s' (supported: %s)", hp->arch,
                    "llama");
    uint32_t v = 0;
    tr_status s;
#define NEED(suffix, field)                                          \
    if ((s = read_u32(f, hp->arch, suffix, &v, true, diag))) return s; \
    hp->field = (int32_t)v;
    NEED("block_count", n_layers);
    NEED("embedding_length", dim);
    NEED("attention.head_count", n_heads);
    NEED("feed_forward_length", ffn_dim);
#undef NEED
    v = (uint32_t)hp->n_heads;
    if ((s = read_u32(f, hp->arch, "attention.head_count_kv", &v, false, diag)))
        return s;
    hp->n_kv_heads = (int32_t)v;
    v = 4096;
    if ((s = read_u32(f, hp->arch, "context_length", &v, false, diag))) return s;
    hp->n_ctx_train = (int32_t)v;
    hp->rms_eps = 1e-5f;
    hp->rope_base = 10000.0f;
    if ((s = read_f32(f, hp->arch, "attention.layer_norm_rms_epsilon",
                      &hp->rms_eps, diag)))
        return s;
    if ((s = read_f32(f, hp->arch, "rope.freq_base", &hp->rope_base, diag)))
        return s;

    if (hp->n_layers <= 0 || hp->n_layers > 1024 || hp->dim <= 0 ||
        hp->dim > 65536 || hp->n_heads <= 0 || hp->dim % hp->n_heads != 0 ||
        hp->n_kv_heads <= 0 || hp->n_heads % hp->n_kv_heads != 0 ||
        hp->ffn_dim <= 0 || hp->ffn_dim > 1 << 20 || hp->n_ctx_train <= 0)
        return tr_diag_set(
            diag, TR_ERR_FORMAT, 0,
            "implausible hyper-parameters: layers %d, dim %d, heads %d/%d, "
            "ffn %d, context %d",
            hp->n_layers, hp->dim, hp->n_heads, hp->n_kv_heads, hp->ffn_dim,
            hp->n_ctx_train);
    hp->head_dim = hp->dim / hp->n_heads;
    if (hp->head_dim % 2 != 0)
        return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0,
                           "odd head dimension %d", hp->head_dim);
    v = (uint32_t)hp->head_dim;
    if ((s = read_u32(f, hp->arch, "rope.dimension_count", &v, false, diag)))
        return s;
    if ((int32_t)v != hp->head_dim)
        return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0,
                           "partial rotary embedding (%u of %d dims)", v,
                           hp->head_dim);
    return TR_OK;
}

/* Binds tensor `name` of shape [rows, cols] (ne = {cols, rows}). */
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
    if (!tr_dtype_computable(t->type))
        return tr_diag_set(diag, TR_ERR_UNSUPPORTED, t->offset,
                           "tensor '%s' has type %s, which Trellis cannot "
                           "compute with (supported: F32 F16 BF16 Q4_0 Q4_1 "
                           "Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K)",
                           name, tr_dtype_name(t->type));
    const void *data = t->data;
    if (!m->be->host_memory) {
        void *dev = NULL;
        void **grown = realloc(m->device_copies,
                               sizeof(void *) * (size_t)(m->n_device_copies + 1));
        if (!grown) return TR_ERR_NOMEM;
        m->device_copies = grown;
        tr_status s = m->be->ops->alloc(m->be, t->size, &dev);
        if (s) return tr_diag_set(diag, s, 0, "cannot allocate '%s'", name);
        m->device_copies[m->n_device_copies++] = dev;
        s = m->be->ops->upload(m->be, dev, t->data, t->size);
        if (s) return tr_diag_set(diag, s, 0, "cannot upload '%s'", name);
        data = dev;
    }
    w->data = data;
    w->type = (tr_dtype)t->type;
    w->rows = rows;
    w->cols = cols;
    m->weight_bytes += t->size;
    return TR_OK;
}

static tr_status bind_norm(model *m, const char *name, int64_t n,
                           const float **out, tr_diag *diag) {
    tr_weight w;
    tr_status s = bind(m, name, 1, n, false, &w, diag);
    if (s == TR_OK) *out = (const float *)w.data;
    return s;
}

static tr_status alloc_scratch(model *m, float **p, int64_t rows,
                               int64_t cols) {
    uint64_t bytes;
    if (tr_mul_overflow_u64((uint64_t)rows, (uint64_t)cols, &bytes) ||
        tr_mul_overflow_u64(bytes, sizeof(float), &bytes))
        return TR_ERR_OVERFLOW;
    return m->be->ops->alloc(m->be, (size_t)bytes, (void **)p);
}

tr_status tr_model_load(const gguf_file *f, tr_backend *be,
                     int32_t max_batch_tokens, model **out, tr_diag *diag) {
    if (!f || !be || !out || max_batch_tokens <= 0)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "model_load: bad arguments");
    model *m = calloc(1, sizeof *m);
    if (!m) return TR_ERR_NOMEM;
    m->be = be;
    m->file = f;
    m->max_batch = max_batch_tokens;
    tr_status s = read_hparams(f, &m->hp, diag);
    if (s) goto fail;
    model_hparams *hp = &m->hp;
    const int64_t dim = hp->dim, kv_dim = (int64_t)hp->n_kv_heads * hp->head_dim;

    const gguf_tensor *te = tr_gguf_tensor_find(f, "token_embd.weight");
    if (!te) {
        s = tr_diag_set(diag, TR_ERR_NOT_FOUND, 0,
                        "tensor 'token_embd.weight' missing");
        goto fail;
    }
    if (te->ne[1] == 0 || te->ne[1] > (1u << 24)) {
        s = tr_diag_set(diag, TR_ERR_FORMAT, te->offset,
                        "tensor 'token_embd.weight': implausible vocabulary "
                        "size %llu",
                        (unsigned long long)te->ne[1]);
        goto fail;
    }
    hp->n_vocab = (int32_t)te->ne[1];
    if ((s = bind(m, "token_embd.weight", hp->n_vocab, dim, true, &m->tok_embd,
                  diag)))
        goto fail;
    if ((s = bind_norm(m, "output_norm.weight", dim, &m->out_norm, diag)))
        goto fail;
    if (tr_gguf_tensor_find(f, "output.weight")) {
        if ((s = bind(m, "output.weight", hp->n_vocab, dim, true, &m->output,
                      diag)))
            goto fail;
    } else {
        hp->tied_output = true;
        m->output = m->tok_embd;
    }
    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    if (!m->layers) {
        s = TR_ERR_NOMEM;
        goto fail;
    }
    for (int32_t l = 0; l < hp->n_layers; l++) {
        layer_weights *L = &m->layers[l];
        char name[96];
#define BIND(field, suffix, rows, cols)                                   \
    snprintf(name, sizeof name, "blk.%d.%s.weight", l, suffix);           \
    if ((s = bind(m, name, rows, cols, true, &L->field, diag))) goto fail;
#define NORM(field, suffix)                                               \
    snprintf(name, sizeof name, "blk.%d.%s.weight", l, suffix);           \
    if ((s = bind_norm(m, name, dim, &L->field, diag))) goto fail;
        NORM(attn_norm, "attn_norm");
        BIND(wq, "attn_q", dim, dim);
        BIND(wk, "attn_k", kv_dim, dim);
        BIND(wv, "attn_v", kv_dim, dim);
        BIND(wo, "attn_output", dim, dim);
        NORM(ffn_norm, "ffn_norm");
        BIND(w_gate, "ffn_gate", hp->ffn_dim, dim);
        BIND(w_up, "ffn_up", hp->ffn_dim, dim);
        BIND(w_down, "ffn_down", dim, hp->ffn_dim);
#undef BIND
#undef NORM
    }
    const int64_t n = max_batch_tokens;
    if ((s = alloc_scratch(m, &m->x, n, dim)) ||
        (s = alloc_scratch(m, &m->xb, n, dim)) ||
        (s = alloc_scratch(m, &m->q, n, dim)) ||
        (s = alloc_scratch(m, &m->k, n, kv_dim)) ||
        (s = alloc_scratch(m, &m->v, n, kv_dim)) ||
        (s = alloc_scratch(m, &m->att, n, dim)) ||
        (s = alloc_scratch(m, &m->hg, n, hp->ffn_dim)) ||
        (s = alloc_scratch(m, &m->hu, n, hp->ffn_dim)) ||
        (s = alloc_scratch(m, &m->xsel, n, dim)) ||
        /* host memory: the output matmul writes the caller's buffer */
        (!be->host_memory && (s = alloc_scratch(m, &m->logits, n, hp->n_vocab)))) {
        tr_diag_set(diag, s, 0, "cannot allocate scratch for %d tokens",
                    max_batch_tokens);
        goto fail;
    }
    *out = m;
    return TR_OK;
fail:
    tr_model_free(m);
    return s;
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
    free(m->layers);
    free(m);
}

const model_hparams *tr_model_get_hparams(const model *m) { return &m->hp; }
uint64_t tr_model_weight_bytes(const model *m) { return m->weight_bytes; }
int32_t tr_model_max_batch_tokens(const model *m) { return m->max_batch; }

uint64_t tr_model_kv_page_bytes(const model *m, int32_t page_size,
                             tr_dtype type) {
    uint64_t esize = type == TR_DTYPE_F16 ? 2 : 4;
    return (uint64_t)m->hp.n_layers * 2u * (uint64_t)page_size *
           (uint64_t)m->hp.n_kv_heads * (uint64_t)m->hp.head_dim * esize;
}

tr_status tr_model_kv_alloc(model *m, int32_t n_pages, int32_t page_size,
                         tr_dtype type, tr_kv_layout *kv) {
    if (n_pages <= 0 || page_size <= 0 ||
        (type != TR_DTYPE_F16 && type != TR_DTYPE_F32))
        return TR_ERR_INVALID_ARG;
    uint64_t bytes;
    if (tr_mul_overflow_u64(tr_model_kv_page_bytes(m, page_size, type),
                            (uint64_t)n_pages, &bytes) ||
        bytes > SIZE_MAX)
        return TR_ERR_OVERFLOW;
    void *base = NULL;
    tr_status s = m->be->ops->alloc(m->be, (size_t)bytes, &base);
    if (s) return s;
    kv->base = base;
    kv->n_pages = n_pages;
    kv->n_layers = m->hp.n_layers;
    kv->page_size = page_size;
    kv->n_kv_heads = m->hp.n_kv_heads;
    kv->head_dim = m->hp.head_dim;
    kv->type = type;
    return TR_OK;
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
    if (kv->n_layers != m->hp.n_layers || kv->n_kv_heads != m->hp.n_kv_heads ||
        kv->head_dim != m->hp.head_dim)
        return TR_ERR_INVALID_ARG;
    for (int32_t t = 0; t < b->n_tokens; t++) {
        int32_t s = b->seq[t], p = b->pos[t];
        if (tokens[t] < 0 || tokens[t] >= m->hp.n_vocab) return TR_ERR_INVALID_ARG;
        if (s < 0 || s >= b->n_seqs || p < 0) return TR_ERR_INVALID_ARG;
        if (p / kv->page_size >= b->n_pages[s]) return TR_ERR_INVALID_ARG;
    }
    for (int32_t s = 0; s < b->n_seqs; s++)
        for (int32_t i = 0; i < b->n_pages[s]; i++)
            if (b->page_table[s][i] < 0 || b->page_table[s][i] >= kv->n_pages)
                return TR_ERR_INVALID_ARG;
    for (int32_t i = 0; i < n_logits; i++)
        if (logit_rows[i] < 0 || logit_rows[i] >= b->n_tokens)
            return TR_ERR_INVALID_ARG;
    return TR_OK;
}

tr_status tr_model_forward(model *m, const tr_kv_layout *kv, const tr_batch *b,
                        const int32_t *tokens, const int32_t *logit_rows,
                        int32_t n_logits, float *logits) {
    tr_status s = check_batch(m, kv, b, tokens, logit_rows, n_logits);
    if (s) {
        tr_log(TR_LOG_ERROR, "model_forward: malformed batch (%d tokens)",
               b->n_tokens);
        return s;
    }
    tr_backend *be = m->be;
    const tr_backend_ops *op = be->ops;
    const model_hparams *hp = &m->hp;
    const int32_t n = b->n_tokens, dim = hp->dim;
    const float scale = 1.0f / sqrtf((float)hp->head_dim);

    op->embed(be, m->x, &m->tok_embd, tokens, n); /* x[n, dim] */
    for (int32_t l = 0; l < hp->n_layers; l++) {
        const layer_weights *L = &m->layers[l];
        /* attention block: x += wo . attn(rope(q), rope(k), v) */
        op->rmsnorm(be, m->xb, m->x, L->attn_norm, n, dim, hp->rms_eps);
        float *qkv_out[3] = {m->q, m->k, m->v};
        const tr_weight *qkv_w[3] = {&L->wq, &L->wk, &L->wv};
        op->matmul(be, 3, qkv_out, qkv_w, m->xb, n, false);
        op->rope(be, m->q, n, hp->n_heads, hp->head_dim, b->pos, hp->rope_base);
        op->rope(be, m->k, n, hp->n_kv_heads, hp->head_dim, b->pos,
                 hp->rope_base);
        op->kv_store(be, kv, l, m->k, m->v, b);
        op->attention(be, m->att, m->q, kv, l, b, hp->n_heads, scale);
        float *res[1] = {m->x};
        const tr_weight *wo[1] = {&L->wo};
        op->matmul(be, 1, res, wo, m->att, n, true);

        /* feed-forward block: x += down(silu(gate(xb)) * up(xb)) */
        op->rmsnorm(be, m->xb, m->x, L->ffn_norm, n, dim, hp->rms_eps);
        float *gu_out[2] = {m->hg, m->hu};
        const tr_weight *gu_w[2] = {&L->w_gate, &L->w_up};
        op->matmul(be, 2, gu_out, gu_w, m->xb, n, false);
        op->swiglu(be, m->hg, m->hg, m->hu, (int64_t)n * hp->ffn_dim);
        const tr_weight *wd[1] = {&L->w_down};
        op->matmul(be, 1, res, wd, m->hg, n, true);
    }
    if (n_logits == 0) return op->synchronize(be);
    /* logits only for the rows asked for (usually each sequence's last) */
    op->get_rows(be, m->xsel, m->x, dim, logit_rows, n_logits);
    op->rmsnorm(be, m->xsel, m->xsel, m->out_norm, n_logits, dim, hp->rms_eps);
    /* Straight into the caller's buffer when device memory is host memory
     * (at 32 rows a download would copy 6 MB per step for nothing). */
    float *lo[1] = {be->host_memory ? logits : m->logits};
    const tr_weight *wout[1] = {&m->output};
    op->matmul(be, 1, lo, wout, m->xsel, n_logits, false);
    if (be->host_memory) return op->synchronize(be);
    return op->download(be, logits, m->logits,
                        (size_t)n_logits * (size_t)hp->n_vocab * sizeof(float));
}
