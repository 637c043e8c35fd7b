/* profile.c — the timing backend (the contract: profile.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "kernels/profile.h"

typedef struct prof_stream {
    tr_stream base; /* base.be: the profile backend */
    tr_stream *inner;
} prof_stream;

typedef struct prof_event {
    tr_event base;
    tr_event *inner;
} prof_event;

typedef struct prof_key {
    char key[64];
    _Atomic uint64_t calls, ns;
} prof_key;

_Static_assert(sizeof(((prof_key *)0)->key) == sizeof(((tr_profile_entry *)0)->key),
               "keys are copied whole");

typedef struct prof {
    tr_backend base;
    tr_backend_ops ops;
    tr_backend *inner;
    prof_stream def;
    bool async;
    pthread_mutex_t mu; /* guards n_keys and key names */
    prof_key keys[TR_PROFILE_MAX_KEYS + 1]; /* the last: "other" */
    int n_keys;
} prof;

static prof *of_be(const tr_backend *be) { return (prof *)be; }
static prof *of_st(const tr_stream *s) { return (prof *)s->be; }
static tr_stream *in_st(tr_stream *s) { return ((prof_stream *)s)->inner; }
static const tr_backend_ops *in_ops(const tr_stream *s) { return of_st(s)->inner->ops; }

static prof_key *key_for(prof *p, const char *key) {
    pthread_mutex_lock(&p->mu);
    prof_key *k = &p->keys[TR_PROFILE_MAX_KEYS];
    for (int i = 0; i < p->n_keys; i++)
        if (strcmp(p->keys[i].key, key) == 0) {
            k = &p->keys[i];
            goto out;
        }
    if (p->n_keys < TR_PROFILE_MAX_KEYS) {
        k = &p->keys[p->n_keys++];
        size_t n = strnlen(key, sizeof k->key - 1);
        memcpy(k->key, key, n);
        k->key[n] = 0;
    }
out:
    pthread_mutex_unlock(&p->mu);
    return k;
}

/* Ends a timed op started at t0: waits for the stream if asynchronous. */
static void done(tr_stream *s, const char *key, uint64_t t0) {
    prof *p = of_st(s);
    if (p->async) in_ops(s)->stream_synchronize(in_st(s));
    uint64_t dt = tr_now_ns() - t0;
    prof_key *k = key_for(p, key);
    atomic_fetch_add_explicit(&k->calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&k->ns, dt, memory_order_relaxed);
}

#define TIMED(s, key, call)            \
    do {                               \
        uint64_t t0_ = tr_now_ns();    \
        in_ops(s)->call;               \
        done(s, key, t0_);             \
    } while (0)

/* ---- compute ops ---- */

static void p_embed(tr_stream *s, float *out, const tr_weight *t, const int32_t *ids,
                    int32_t n) {
    TIMED(s, "embed", embed(in_st(s), out, t, ids, n));
}
static void p_rmsnorm(tr_stream *s, float *out, const float *x, const float *w, int32_t n,
                      int32_t dim, float eps) {
    TIMED(s, "rmsnorm", rmsnorm(in_st(s), out, x, w, n, dim, eps));
}
static void p_matmul(tr_stream *s, int32_t n_mats, float *const *out, const tr_weight *const *w,
                     const float *x, int32_t n, bool accumulate) {
    char key[64];
    int k = snprintf(key, sizeof key, "matmul %dx%lld -> ", (int)n_mats, (long long)w[0]->cols);
    for (int32_t i = 0; i < n_mats && k > 0 && (size_t)k < sizeof key; i++)
        k += snprintf(key + k, sizeof key - (size_t)k, "%s%lld", i ? "+" : "",
                      (long long)w[i]->rows);
    TIMED(s, key, matmul(in_st(s), n_mats, out, w, x, n, accumulate));
}
static void p_rope(tr_stream *s, float *x, int32_t n, int32_t nh, int32_t hd, const int32_t *pos,
                   float base) {
    TIMED(s, "rope", rope(in_st(s), x, n, nh, hd, pos, base));
}
static void p_kv_store(tr_stream *s, const tr_kv_layout *kv, int32_t layer, const float *k,
                       const float *v, const tr_batch *b) {
    TIMED(s, "kv_store", kv_store(in_st(s), kv, layer, k, v, b));
}
static void p_attention(tr_stream *s, float *out, const float *q, const tr_kv_layout *kv,
                        int32_t layer, const tr_batch *b, int32_t nh, float scale) {
    TIMED(s, "attention", attention(in_st(s), out, q, kv, layer, b, nh, scale));
}
static void p_swiglu(tr_stream *s, float *out, const float *g, const float *u, int64_t n) {
    TIMED(s, "swiglu", swiglu(in_st(s), out, g, u, n));
}
static void p_add(tr_stream *s, float *out, const float *x, int64_t n) {
    TIMED(s, "add", add(in_st(s), out, x, n));
}
static void p_get_rows(tr_stream *s, float *out, const float *x, int32_t dim, const int32_t *rows,
                       int32_t n) {
    TIMED(s, "get_rows", get_rows(in_st(s), out, x, dim, rows, n));
}
static void p_rope_neox(tr_stream *s, float *x, int32_t n, int32_t nh, int32_t hd,
                        const int32_t *pos, float base, float fs) {
    TIMED(s, "rope_neox", rope_neox(in_st(s), x, n, nh, hd, pos, base, fs));
}
static void p_geglu(tr_stream *s, float *out, const float *g, const float *u, int64_t n) {
    TIMED(s, "geglu", geglu(in_st(s), out, g, u, n));
}
static void p_add_bias(tr_stream *s, float *x, const float *b, int32_t n, int32_t dim) {
    TIMED(s, "add_bias", add_bias(in_st(s), x, b, n, dim));
}
static void p_scale(tr_stream *s, float *x, float sc, int64_t n) {
    TIMED(s, "scale", scale(in_st(s), x, sc, n));
}
static void p_mul_cols(tr_stream *s, float *x, const float *w, int32_t n, int32_t dim) {
    TIMED(s, "mul_cols", mul_cols(in_st(s), x, w, n, dim));
}

static void p_softcap(tr_stream *s, float *x, float cap, int64_t n) {
    TIMED(s, "softcap", softcap(in_st(s), x, cap, n));
}
static void p_matmul_rows(tr_stream *s, float *out, const tr_weight *w, const float *x,
                          int32_t n, const int32_t *ids, int32_t n_ids) {
    char key[64];
    snprintf(key, sizeof key, "matmul_rows %lld -> %lld", (long long)w->cols,
             (long long)w->rows);
    TIMED(s, key, matmul_rows(in_st(s), out, w, x, n, ids, n_ids));
}

/* ---- copies ---- */

static tr_status p_upload(tr_stream *s, void *dst, const void *src, size_t n) {
    return in_ops(s)->upload(in_st(s), dst, src, n);
}
static tr_status p_download(tr_stream *s, void *dst, const void *src, size_t n) {
    return in_ops(s)->download(in_st(s), dst, src, n);
}
static tr_status p_copy(tr_stream *s, void *dst, const void *src, size_t n) {
    return in_ops(s)->copy(in_st(s), dst, src, n);
}

/* ---- lifetime, streams, events, memory: forwarded ---- */

static void p_destroy(tr_backend *be) {
    prof *p = of_be(be);
    p->inner->ops->destroy(p->inner);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
static void p_get_info(const tr_backend *be, tr_backend_info *out) {
    of_be(be)->inner->ops->get_info(of_be(be)->inner, out);
}
static bool p_supports(const tr_backend *be, tr_backend_cap cap, tr_dtype t) {
    return of_be(be)->inner->ops->supports(of_be(be)->inner, cap, t);
}

static bool p_supports_kv(const tr_backend *be, tr_kv_type k, tr_kv_type v) {
    return of_be(be)->inner->ops->supports_kv(of_be(be)->inner, k, v);
}
static tr_status p_stream_new(tr_backend *be, tr_stream **out) {
    prof *p = of_be(be);
    prof_stream *ps = calloc(1, sizeof *ps);
    if (!ps) return TR_ERR_NOMEM;
    tr_status st = p->inner->ops->stream_new(p->inner, &ps->inner);
    if (st) {
        free(ps);
        return st;
    }
    ps->base.be = be;
    *out = &ps->base;
    return TR_OK;
}
static void p_stream_free(tr_stream *s) {
    if (in_ops(s)->stream_free) in_ops(s)->stream_free(in_st(s));
    free(s);
}
static tr_status p_stream_synchronize(tr_stream *s) {
    return in_ops(s)->stream_synchronize(in_st(s));
}
static tr_status p_event_new(tr_backend *be, tr_event **out) {
    prof *p = of_be(be);
    prof_event *pe = calloc(1, sizeof *pe);
    if (!pe) return TR_ERR_NOMEM;
    tr_status st = p->inner->ops->event_new(p->inner, &pe->inner);
    if (st) {
        free(pe);
        return st;
    }
    pe->base.be = be;
    *out = &pe->base;
    return TR_OK;
}
static tr_event *in_ev(tr_event *e) { return ((prof_event *)e)->inner; }
static void p_event_free(tr_event *e) {
    of_be(e->be)->inner->ops->event_free(in_ev(e));
    free(e);
}
static tr_status p_event_record(tr_event *e, tr_stream *s) {
    if (e->be != s->be) return TR_ERR_INVALID_ARG;
    return in_ops(s)->event_record(in_ev(e), in_st(s));
}
static tr_status p_stream_wait(tr_stream *s, tr_event *e) {
    if (e->be != s->be) return TR_ERR_INVALID_ARG;
    return in_ops(s)->stream_wait(in_st(s), in_ev(e));
}
static tr_status p_event_synchronize(tr_event *e) {
    return of_be(e->be)->inner->ops->event_synchronize(in_ev(e));
}
static tr_status p_synchronize(tr_backend *be) {
    return of_be(be)->inner->ops->synchronize(of_be(be)->inner);
}
static tr_status p_alloc(tr_backend *be, size_t n, void **out) {
    return of_be(be)->inner->ops->alloc(of_be(be)->inner, n, out);
}
static void p_free(tr_backend *be, void *ptr) { of_be(be)->inner->ops->free(of_be(be)->inner, ptr); }
static tr_status p_host_alloc(tr_backend *be, size_t n, void **out) {
    return of_be(be)->inner->ops->host_alloc(of_be(be)->inner, n, out);
}
static void p_host_free(tr_backend *be, void *ptr) {
    of_be(be)->inner->ops->host_free(of_be(be)->inner, ptr);
}
static tr_status p_prepare(tr_backend *be, int32_t n, const tr_weight *const *w, tr_weight *out,
                           void **owned, void (*copied)(void *ctx, int32_t i), void *ctx) {
    return of_be(be)->inner->ops->prepare_matmul_weights(of_be(be)->inner, n, w, out, owned,
                                                         copied, ctx);
}
static tr_status p_import_weights(tr_backend *be, const void *src, size_t n, const void **dev,
                                  void **owned) {
    return of_be(be)->inner->ops->import_weights(of_be(be)->inner, src, n, dev, owned);
}

static const tr_backend_ops profile_ops = {
    .destroy = p_destroy, .get_info = p_get_info, .supports = p_supports,
    .supports_kv = p_supports_kv,
    .stream_new = p_stream_new, .stream_free = p_stream_free,
    .stream_synchronize = p_stream_synchronize, .event_new = p_event_new,
    .event_free = p_event_free, .event_record = p_event_record, .stream_wait = p_stream_wait,
    .event_synchronize = p_event_synchronize, .synchronize = p_synchronize, .alloc = p_alloc,
    .free = p_free, .host_alloc = p_host_alloc, .host_free = p_host_free,
    .import_weights = p_import_weights, .prepare_matmul_weights = p_prepare, .upload = p_upload, .download = p_download,
    .copy = p_copy, .embed = p_embed, .rmsnorm = p_rmsnorm, .matmul = p_matmul, .rope = p_rope,
    .kv_store = p_kv_store, .attention = p_attention, .swiglu = p_swiglu, .add = p_add,
    .get_rows = p_get_rows, .rope_neox = p_rope_neox, .geglu = p_geglu, .add_bias = p_add_bias,
    .scale = p_scale, .softcap = p_softcap, .mul_cols = p_mul_cols, .matmul_rows = p_matmul_rows,
};

tr_status tr_backend_profile_new(tr_backend *inner, tr_backend **out) {
    prof *p = calloc(1, sizeof *p);
    if (!p) return TR_ERR_NOMEM;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return TR_ERR_NOMEM;
    }
    p->ops = profile_ops;
    /* an optional op the inner backend lacks stays absent here */
    if (!inner->ops->get_rows) p->ops.get_rows = NULL;
    if (!inner->ops->matmul_rows) p->ops.matmul_rows = NULL;
    if (!inner->ops->prepare_matmul_weights) p->ops.prepare_matmul_weights = NULL;
    if (!inner->ops->stream_free) p->ops.stream_free = NULL;
    p->inner = inner;
    p->base.ops = &p->ops;
    p->def.base.be = &p->base;
    p->def.inner = inner->stream;
    p->base.stream = &p->def.base;
    tr_backend_info info;
    inner->ops->get_info(inner, &info);
    p->async = info.async;
    snprintf(p->keys[TR_PROFILE_MAX_KEYS].key, sizeof p->keys[0].key, "other");
    *out = &p->base;
    return TR_OK;
}

int tr_backend_profile_get(tr_backend *be, tr_profile_entry *out, int cap) {
    prof *p = of_be(be);
    pthread_mutex_lock(&p->mu);
    int n = p->n_keys + (atomic_load(&p->keys[TR_PROFILE_MAX_KEYS].calls) > 0);
    for (int i = 0, j = 0; i <= TR_PROFILE_MAX_KEYS && j < cap; i++) {
        if (i >= p->n_keys && i < TR_PROFILE_MAX_KEYS) continue;
        const prof_key *k = &p->keys[i];
        if (i == TR_PROFILE_MAX_KEYS && atomic_load(&k->calls) == 0) break;
        memcpy(out[j].key, k->key, sizeof out[j].key); /* NUL-terminated: key_for */
        out[j].calls = atomic_load(&k->calls);
        out[j].ns = atomic_load(&k->ns);
        j++;
    }
    pthread_mutex_unlock(&p->mu);
    return n;
}

void tr_backend_profile_reset(tr_backend *be) {
    prof *p = of_be(be);
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i <= TR_PROFILE_MAX_KEYS; i++) {
        atomic_store(&p->keys[i].calls, 0);
        atomic_store(&p->keys[i].ns, 0);
    }
    pthread_mutex_unlock(&p->mu);
}
