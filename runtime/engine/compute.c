/* compute.c — the real model behind engine_compute, and the compute thread
 * that runs forward passes while the engine thread prepares masks (and
 * samples half of the rows while the engine thread samples the other).
 *
 * Layering: runtime/engine -> runtime/model, kernels (backend).
 *
 * The compute thread is a plain hand-off: the engine thread posts one
 * batch, the compute thread runs compute.forward (tr_model_forward, whose
 * kernels run on the backend's worker pool with this thread as worker 0)
 * and signals completion. The same hand-off runs a sampling job
 * (tr_engine_sample_rows over a range of rows, each with its own sampler)
 * after the forward pass. Only one job is ever in flight, so the batch
 * arrays, page tables and logits buffer belong to the compute thread from
 * post to wait and to the engine thread otherwise. After start, only the
 * compute thread calls into the compute object (backend.h: one thread at
 * a time).
 */
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/util.h"
#include "runtime/engine/engine_internal.h"

/* ---- the model as an engine_compute ---- */

typedef struct model_compute {
    model *m;
    tr_backend *be;
    tr_kv_layout kv;
    bool own_model, own_backend;
} model_compute;

static tr_status mc_forward(void *ctx, const tr_batch *b, const int32_t *tokens,
                            const int32_t *rows, int32_t n_rows, float *logits,
                            const tr_logit_masks *masks) {
    model_compute *mc = ctx;
    return tr_model_forward_masked(mc->m, &mc->kv, b, tokens, rows, n_rows,
                                   logits, masks);
}

static void mc_destroy(void *ctx) {
    model_compute *mc = ctx;
    if (!mc) return;
    tr_model_kv_free(mc->m, &mc->kv);
    if (mc->own_model) tr_model_free(mc->m);
    if (mc->own_backend) tr_backend_free(mc->be);
    free(mc);
}

static int32_t mc_layer_window(void *ctx, int32_t layer) {
    model_compute *mc = ctx;
    return tr_model_layer_window(mc->m, layer);
}

static tr_status mc_kv_read(void *ctx, int32_t page, void *dst) {
    model_compute *mc = ctx;
    return tr_model_kv_page_copy(mc->m, &mc->kv, page, dst, false);
}

static tr_status mc_kv_write(void *ctx, int32_t page, const void *src) {
    model_compute *mc = ctx;
    return tr_model_kv_page_copy(mc->m, &mc->kv, page, (void *)src, true);
}

static const engine_compute_ops k_model_ops = {mc_forward, mc_destroy, mc_layer_window,
                                               mc_kv_read, mc_kv_write};

/* What a page's bytes depend on besides the weights (the engine mixes in
 * the model file's fingerprint): the layout, the kernels that wrote them
 * (another kernel set rounds differently) and the model's Q4 key
 * calibration, computed by those kernels. */
static uint64_t layout_fingerprint(const tr_kv_layout *kv, tr_backend *be,
                                   const model *m) {
    tr_backend_info bi = tr_backend_get_info(be);
    uint64_t h = TR_FNV1A_BASIS, calibration = tr_model_kv_fingerprint(m);
    if (calibration) h = tr_fnv1a_word(h, calibration); /* Q4 keys' centers and factors */
    int32_t v[9] = {kv->n_layers, kv->page_size, kv->n_kv_heads, kv->head_dim,
                    (int32_t)kv->type_k, (int32_t)kv->type_v, kv->window != NULL,
                    kv->unit_layers, TR_KV_FORMAT_VERSION};
    h = tr_fnv1a(h, v, sizeof v);
    for (int32_t l = 0; kv->window && l < kv->n_layers; l++)
        h = tr_fnv1a_word(h, (uint64_t)kv->window[l]);
    h = tr_fnv1a(h, bi.name, strlen(bi.name) + 1);
    if (bi.kernels) h = tr_fnv1a(h, bi.kernels, strlen(bi.kernels) + 1);
    return tr_splitmix64(h);
}

tr_kv_type tr_engine_kv_type(int32_t trellis_kv) {
    switch (trellis_kv) {
    case TRELLIS_KV_Q8: return TR_KV_Q8;
    case TRELLIS_KV_Q4: return TR_KV_Q4;
    default: return TR_KV_F16;
    }
}

static int32_t public_kv_type(tr_kv_type t) {
    return t == TR_KV_Q8 ? TRELLIS_KV_Q8 : t == TR_KV_Q4 ? TRELLIS_KV_Q4 : TRELLIS_KV_F16;
}

tr_status tr_engine_compute_model_new(model *m, tr_backend *be, int32_t n_pages,
                                            int32_t page_size, tr_kv_type k,
                                            tr_kv_type v, bool split, engine_own own,
                                            engine_compute *out, const char **why) {
    if (why) *why = NULL;
    if (!m || !be || !out || n_pages <= 0 || page_size <= 0)
        return TR_ERR_INVALID_ARG;
    model_compute *mc = calloc(1, sizeof *mc);
    if (!mc) return TR_ERR_NOMEM;
    tr_status s = tr_model_kv_alloc_units(m, n_pages, page_size, k, v, split, &mc->kv, why);
    if (s != TR_OK) {
        free(mc);
        return s;
    }
    mc->m = m;
    mc->be = be;
    mc->own_model = own != ENGINE_OWN_NONE;
    mc->own_backend = own == ENGINE_OWN_BOTH;
    const model_hparams *hp = tr_model_get_hparams(m);
    *out = (engine_compute){
        .ops = &k_model_ops,
        .ctx = mc,
        .n_vocab = hp->n_vocab,
        .n_ctx = hp->n_ctx_train,
        .max_batch = tr_model_max_batch_tokens(m),
        .n_pages = n_pages,
        .page_size = page_size,
        .threads = tr_backend_get_info(be).threads,
        .device = tr_backend_get_info(be).name,
        .arch = hp->arch,
        .n_layers = hp->n_layers,
        .kv_type_k = public_kv_type(k),
        .kv_type_v = public_kv_type(v),
        .kv_bytes = (int64_t)((uint64_t)tr_kv_page_bytes(&mc->kv) * (uint64_t)n_pages),
        .kv_page_bytes = tr_kv_page_bytes(&mc->kv),
        .kv_fingerprint = layout_fingerprint(&mc->kv, be, m),
    };
    tr_kv_units units;
    tr_model_kv_units(m, split, &units);
    out->kv_units = units.n;
    memcpy(out->kv_unit_window, units.window, sizeof units.window);
    return TR_OK;
}

/* ---- the compute thread ---- */

enum { W_IDLE = 0, W_POSTED = 1, W_DONE = 2, W_QUIT = 3 };

static void *worker_main(void *arg) {
    trellis_engine *e = arg;
    engine_worker *w = &e->worker;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->state != W_POSTED && w->state != W_QUIT)
            pthread_cond_wait(&w->cond, &w->mu);
        if (w->state == W_QUIT) break;
        pthread_mutex_unlock(&w->mu);
        tr_status s = TR_OK;
        if (w->kind == W_JOB_FORWARD)
            s = w->c->ops->forward(w->c->ctx, w->b, w->tokens, w->rows, w->n_rows,
                                   w->logits, w->lm);
        else
            tr_engine_sample_rows(e, w->r0, w->r1);
        pthread_mutex_lock(&w->mu);
        w->result = s;
        w->state = W_DONE;
        pthread_cond_broadcast(&w->cond);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

tr_status tr_worker_start(trellis_engine *e) {
    engine_worker *w = &e->worker;
    w->state = W_IDLE;
    if (pthread_create(&w->thread, NULL, worker_main, e) != 0)
        return TR_ERR_INTERNAL;
    w->started = true;
    return TR_OK;
}

void tr_worker_stop(trellis_engine *e) {
    engine_worker *w = &e->worker;
    if (!w->started) return;
    pthread_mutex_lock(&w->mu);
    w->state = W_QUIT;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    w->started = false;
}

static void post_forward(trellis_engine *e, const engine_compute *c, const tr_batch *b,
                         const int32_t *tokens, const int32_t *rows, int32_t n_rows,
                         float *logits, const tr_logit_masks *lm) {
    engine_worker *w = &e->worker;
    pthread_mutex_lock(&w->mu);
    TR_ASSERT(w->state == W_IDLE);
    w->kind = W_JOB_FORWARD;
    w->c = c;
    w->lm = lm;
    w->b = b;
    w->tokens = tokens;
    w->rows = rows;
    w->n_rows = n_rows;
    w->logits = logits;
    w->masks_ready = false;
    w->state = W_POSTED;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->mu);
}

void tr_worker_post(trellis_engine *e, const tr_batch *b, const int32_t *tokens,
                    const int32_t *rows, int32_t n_rows, float *logits) {
    post_forward(e, &e->compute, b, tokens, rows, n_rows, logits, &e->lmasks);
}

tr_status tr_worker_forward(trellis_engine *e, const engine_compute *c, const tr_batch *b,
                            const int32_t *tokens, const int32_t *rows, int32_t n_rows,
                            float *logits, const tr_logit_masks *lm) {
    if (!e->worker.started) return c->ops->forward(c->ctx, b, tokens, rows, n_rows, logits, lm);
    post_forward(e, c, b, tokens, rows, n_rows, logits, lm);
    return tr_worker_wait(e);
}

void tr_worker_post_sample(trellis_engine *e, int32_t r0, int32_t r1) {
    engine_worker *w = &e->worker;
    pthread_mutex_lock(&w->mu);
    TR_ASSERT(w->state == W_IDLE);
    w->kind = W_JOB_SAMPLE;
    w->r0 = r0;
    w->r1 = r1;
    w->state = W_POSTED;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->mu);
}

/* The forward's wait for the masks (tr_logit_masks.await), on the compute
 * thread. */
void tr_worker_await_masks(void *ctx) {
    engine_worker *w = &((trellis_engine *)ctx)->worker;
    pthread_mutex_lock(&w->mu);
    while (!w->masks_ready) pthread_cond_wait(&w->cond, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

void tr_worker_masks_ready(trellis_engine *e) {
    engine_worker *w = &e->worker;
    pthread_mutex_lock(&w->mu);
    w->masks_ready = true;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->mu);
}

tr_status tr_worker_wait(trellis_engine *e) {
    engine_worker *w = &e->worker;
    pthread_mutex_lock(&w->mu);
    while (w->state != W_DONE) pthread_cond_wait(&w->cond, &w->mu);
    w->state = W_IDLE;
    tr_status s = w->result;
    pthread_mutex_unlock(&w->mu);
    return s;
}
