/* cuda_backend.cu — the CUDA backend: opening a device (with an error
 * naming why it cannot be), the tr_backend_ops table, memory, streams and
 * events, the staging of host index arrays, the sticky fault, and the
 * registry entry. The ops are in ops.cu, attention.cu and matmul.cu.
 *
 * Layering: kernels/cuda; implements kernels/backend.h, declared in
 * kernels/cuda/cuda.h (which says what the knobs and errors are).
 *
 * Streams: cudaStreamNonBlocking streams (the default stream is one too,
 * never CUDA's legacy stream, which would serialise every other stream).
 * Events: cudaEventDisableTiming. Every call makes the backend's device
 * current first, so two backends on two GPUs can share a thread.
 *
 * Thread-safety: one thread at a time per backend object (backend.h).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

extern "C" {
#include "base/log.h"
}


const char *const k_sets[] = {"sm_80", NULL};

/* The first staging half: a decode step's positions and page tables are
 * a few KB per op; prefill chunks grow it (doubling). */
const size_t k_stage_half = 256u * 1024u;

/* Why no backend can be opened here, or NULL when devices exist:
 * writes *count. The cases cuda.h promises, each named. */
static const char *why_unavailable(int *count, char *buf, size_t cap) {
    *count = 0;
    int drv = 0;
    cudaError_t e = cudaDriverGetVersion(&drv);
    if (e != cudaSuccess || drv == 0) {
        snprintf(buf, cap,
                 "no CUDA driver found (libcuda.so.1 not loadable): %s",
                 cudaGetErrorString(e != cudaSuccess ? e : cudaErrorInsufficientDriver));
        return buf;
    }
    if (drv < CUDART_VERSION) {
        snprintf(buf, cap,
                 "the CUDA driver supports CUDA %d.%d, older than the runtime's "
                 "%d.%d: update the NVIDIA driver",
                 drv / 1000, drv % 1000 / 10, CUDART_VERSION / 1000,
                 CUDART_VERSION % 1000 / 10);
        return buf;
    }
    e = cudaGetDeviceCount(count);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && *count == 0)) {
        *count = 0;
        snprintf(buf, cap, "no CUDA device found: %s",
                 cudaGetErrorString(cudaErrorNoDevice));
        return buf;
    }
    if (e != cudaSuccess) {
        *count = 0;
        snprintf(buf, cap, "the CUDA runtime cannot start: %s (%s)",
                 cudaGetErrorString(e), cudaGetErrorName(e));
        return buf;
    }
    return NULL;
}

static bool cuda_available(char *why, size_t cap) {
    int n;
    char buf[256];
    const char *w = why_unavailable(&n, buf, sizeof buf);
    if (!w) return true;
    if (why && cap) snprintf(why, cap, "%s", w);
    return false;
}

static bool cuda_kernels_available(const char *name, char *why, size_t cap) {
    if (strcmp(name, "sm_80") != 0) {
        snprintf(why, cap, "unknown CUDA kernel set '%s' (there is: sm_80)", name);
        return false;
    }
    return cuda_available(why, cap);
}

static cuda_backend *backend_of(const tr_backend *be) { return (cuda_backend *)be; }

/* ---- lifetime ---- */

static void staging_free(cuda_staging *st) {
    if (st->host) cudaFreeHost(st->host);
    if (st->dev) cudaFree(st->dev);
    for (int i = 0; i < 2; i++)
        if (st->left[i]) cudaEventDestroy(st->left[i]);
    memset(st, 0, sizeof *st);
}

static void stream_release(cuda_stream *s) {
    staging_free(&s->stage);
    if (s->scratch) cudaFree(s->scratch);
    s->scratch = NULL;
    s->scratch_cap = 0;
    if (s->s) cudaStreamDestroy(s->s);
    s->s = NULL;
}

static tr_status stream_init(cuda_backend *c, cuda_stream *s) {
    memset(s, 0, sizeof *s);
    s->base.be = &c->base;
    return cudaStreamCreateWithFlags(&s->s, cudaStreamNonBlocking) == cudaSuccess
               ? TR_OK
               : TR_ERR_INTERNAL;
}

static void cuda_destroy(tr_backend *be) {
    cuda_backend *c = backend_of(be);
    cudaSetDevice(c->device);
    cudaDeviceSynchronize(); /* waits for every stream (backend.h) */
    stream_release(&c->def);
    free(c);
}

static void cuda_get_info(const tr_backend *be, tr_backend_info *out) {
    const cuda_backend *c = backend_of(be);
    memset(out, 0, sizeof *out);
    out->name = "cuda";
    out->kernels = k_sets[0];
    snprintf(out->device, sizeof out->device, "%.60s (device %d, sm_%d%d)", c->name,
             c->device, c->cc_major, c->cc_minor);
    out->device_index = c->device;
    out->memory_total = c->memory_total;
    out->host_memory = false;
    out->async = true;
}

static bool cuda_supports(const tr_backend *be, tr_backend_cap cap, tr_dtype t) {
    (void)be;
    if (cap == TR_BACKEND_CAP_WEIGHT) return tr_cuda_weight_type_ok(t);
    return false;
}

/* Every KV type, K and V independently (attention.cu; Q4 also needs
 * head_dim % 32 == 0, which tr_kv_head_bytes says). */
static bool cuda_supports_kv(const tr_backend *be, tr_kv_type k, tr_kv_type v) {
    (void)be;
    return (unsigned)k < TR_KV_TYPE_COUNT && (unsigned)v < TR_KV_TYPE_COUNT;
}

/* ---- streams and events ---- */

static tr_status cuda_stream_new(tr_backend *be, tr_stream **out) {
    cuda_backend *c = backend_of(be);
    if (cudaSetDevice(c->device) != cudaSuccess) return TR_ERR_INTERNAL;
    cuda_stream *s = (cuda_stream *)malloc(sizeof *s);
    if (!s) return TR_ERR_NOMEM;
    if (stream_init(c, s) != TR_OK) {
        free(s);
        return TR_ERR_INTERNAL;
    }
    *out = &s->base;
    return TR_OK;
}

static void cuda_stream_free(tr_stream *st) {
    if (!st) return;
    cuda_backend *c = tr_cuda_backend_of(st);
    if (st == &c->def.base) return; /* never the default stream */
    cudaSetDevice(c->device);
    stream_release(tr_cuda_stream_of(st));
    free(st);
}

static tr_status cuda_stream_synchronize(tr_stream *st) {
    cuda_backend *c = tr_cuda_backend_of(st);
    if (cudaSetDevice(c->device) == cudaSuccess)
        tr_cuda_check(c, cudaStreamSynchronize(tr_cuda_stream_of(st)->s),
                      "stream_synchronize");
    return c->fault;
}

static tr_status cuda_event_new(tr_backend *be, tr_event **out) {
    cuda_backend *c = backend_of(be);
    if (cudaSetDevice(c->device) != cudaSuccess) return TR_ERR_INTERNAL;
    cuda_event *e = (cuda_event *)malloc(sizeof *e);
    if (!e) return TR_ERR_NOMEM;
    e->base.be = be;
    if (cudaEventCreateWithFlags(&e->e, cudaEventDisableTiming) != cudaSuccess) {
        free(e);
        return TR_ERR_INTERNAL;
    }
    *out = &e->base;
    return TR_OK;
}

static void cuda_event_free(tr_event *ev) {
    if (!ev) return;
    cudaSetDevice(backend_of(ev->be)->device);
    cudaEventDestroy(((cuda_event *)ev)->e);
    free(ev);
}

static tr_status cuda_event_record(tr_event *ev, tr_stream *st) {
    if (ev->be != st->be) return TR_ERR_INVALID_ARG;
    cuda_backend *c = backend_of(ev->be);
    if (!tr_cuda_enter(c)) return c->fault;
    tr_cuda_check(c, cudaEventRecord(((cuda_event *)ev)->e, tr_cuda_stream_of(st)->s),
                  "event_record");
    return c->fault;
}

static tr_status cuda_stream_wait(tr_stream *st, tr_event *ev) {
    if (ev->be != st->be) return TR_ERR_INVALID_ARG;
    cuda_backend *c = backend_of(ev->be);
    if (!tr_cuda_enter(c)) return c->fault;
    tr_cuda_check(c,
                  cudaStreamWaitEvent(tr_cuda_stream_of(st)->s, ((cuda_event *)ev)->e, 0),
                  "stream_wait");
    return c->fault;
}

static tr_status cuda_event_synchronize(tr_event *ev) {
    cuda_backend *c = backend_of(ev->be);
    if (cudaSetDevice(c->device) == cudaSuccess)
        tr_cuda_check(c, cudaEventSynchronize(((cuda_event *)ev)->e), "event_synchronize");
    return c->fault;
}

static tr_status cuda_synchronize(tr_backend *be) {
    cuda_backend *c = backend_of(be);
    if (cudaSetDevice(c->device) == cudaSuccess)
        tr_cuda_check(c, cudaDeviceSynchronize(), "synchronize");
    return c->fault;
}

/* ---- memory ---- */

/* An allocation's status, *out set only on success; a failure is not a
 * sticky fault (the error is cleared). */
static tr_status alloc_result(cudaError_t e, void *p, void **out) {
    if (e == cudaSuccess) {
        *out = p;
        return TR_OK;
    }
    cudaGetLastError();
    return e == cudaErrorMemoryAllocation ? TR_ERR_NOMEM : TR_ERR_INTERNAL;
}

static tr_status cuda_alloc(tr_backend *be, size_t bytes, void **out) {
    cuda_backend *c = backend_of(be);
    if (cudaSetDevice(c->device) != cudaSuccess) return TR_ERR_INTERNAL;
    void *p = NULL;
    /* (the call first, in its own statement: as an argument beside p, p
     * may be read before the call writes it) */
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1); /* 256-aligned */
    return alloc_result(e, p, out);
}

static void cuda_free(tr_backend *be, void *p) {
    if (!p) return;
    cudaSetDevice(backend_of(be)->device);
    cudaFree(p);
}

static tr_status cuda_host_alloc(tr_backend *be, size_t bytes, void **out) {
    cuda_backend *c = backend_of(be);
    if (cudaSetDevice(c->device) != cudaSuccess) return TR_ERR_INTERNAL;
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1); /* page-aligned; as cuda_alloc */
    return alloc_result(e, p, out);
}

static void cuda_host_free(tr_backend *be, void *p) {
    if (!p) return;
    cudaSetDevice(backend_of(be)->device);
    cudaFreeHost(p);
}

/* Weights keep their GGUF types on the device: one synchronous copy. */
static tr_status cuda_import_weights(tr_backend *be, const void *src, size_t bytes,
                              const void **dev, void **owned) {
    void *p = NULL;
    tr_status st = cuda_alloc(be, bytes, &p);
    if (st != TR_OK) return st;
    if (bytes && cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(p);
        return TR_ERR_INTERNAL;
    }
    *dev = p;
    *owned = p;
    return TR_OK;
}

static tr_status copy_on(tr_stream *st, void *dst, const void *src, size_t bytes,
                  cudaMemcpyKind kind, const char *what) {
    cuda_backend *c = tr_cuda_backend_of(st);
    if (!tr_cuda_enter(c)) return c->fault;
    if (bytes == 0) return TR_OK;
    tr_cuda_check(c, cudaMemcpyAsync(dst, src, bytes, kind, tr_cuda_stream_of(st)->s),
                  what);
    return c->fault;
}

static tr_status cuda_upload(tr_stream *s, void *dst, const void *src, size_t bytes) {
    return copy_on(s, dst, src, bytes, cudaMemcpyHostToDevice, "upload");
}
static tr_status cuda_download(tr_stream *s, void *dst, const void *src, size_t bytes) {
    return copy_on(s, dst, src, bytes, cudaMemcpyDeviceToHost, "download");
}
static tr_status cuda_copy(tr_stream *s, void *dst, const void *src, size_t bytes) {
    return copy_on(s, dst, src, bytes, cudaMemcpyDeviceToDevice, "copy");
}

static const tr_backend_ops k_ops = {
    /* .destroy = */ cuda_destroy,
    /* .get_info = */ cuda_get_info,
    /* .supports = */ cuda_supports,
    /* .supports_kv = */ cuda_supports_kv,
    /* .stream_new = */ cuda_stream_new,
    /* .stream_free = */ cuda_stream_free,
    /* .stream_synchronize = */ cuda_stream_synchronize,
    /* .event_new = */ cuda_event_new,
    /* .event_free = */ cuda_event_free,
    /* .event_record = */ cuda_event_record,
    /* .stream_wait = */ cuda_stream_wait,
    /* .event_synchronize = */ cuda_event_synchronize,
    /* .synchronize = */ cuda_synchronize,
    /* .alloc = */ cuda_alloc,
    /* .free = */ cuda_free,
    /* .host_alloc = */ cuda_host_alloc,
    /* .host_free = */ cuda_host_free,
    /* .import_weights = */ cuda_import_weights,
    /* .upload = */ cuda_upload,
    /* .download = */ cuda_download,
    /* .copy = */ cuda_copy,
    /* .embed = */ tr_cuda_op_embed,
    /* .rmsnorm = */ tr_cuda_op_rmsnorm,
    /* .matmul = */ tr_cuda_op_matmul,
    /* .rope = */ tr_cuda_op_rope,
    /* .kv_store = */ tr_cuda_op_kv_store,
    /* .attention = */ tr_cuda_op_attention,
    /* .swiglu = */ tr_cuda_op_swiglu,
    /* .add = */ tr_cuda_op_add,
    /* .get_rows = */ tr_cuda_op_get_rows,
    /* .rope_neox = */ tr_cuda_op_rope_neox,
    /* .geglu = */ tr_cuda_op_geglu,
    /* .add_bias = */ tr_cuda_op_add_bias,
    /* .scale = */ tr_cuda_op_scale,
    /* .softcap = */ tr_cuda_op_softcap,
    /* .mul_cols = */ tr_cuda_op_mul_cols,
    /* .matmul_rows = */ tr_cuda_op_matmul_rows,
    /* .prepare_matmul_weights = */ NULL, /* weights stay row-major */
};


/* ---- shared helpers (cuda_internal.h) ---- */

bool tr_cuda_check(cuda_backend *c, cudaError_t err, const char *what) {
    if (err == cudaSuccess) return true;
    if (c->fault == TR_OK)
        tr_log(TR_LOG_ERROR, "cuda: device %d: %s failed: %s (%s); the backend can only be "
                             "destroyed now",
               c->device, what, cudaGetErrorString(err), cudaGetErrorName(err));
    c->fault = TR_ERR_INTERNAL;
    return false;
}

bool tr_cuda_enter(cuda_backend *c) {
    if (c->fault != TR_OK) return false;
    return tr_cuda_check(c, cudaSetDevice(c->device), "cudaSetDevice");
}

void tr_cuda_launched(cuda_stream *s, const char *what) {
    tr_cuda_check(tr_cuda_backend_of(&s->base), cudaGetLastError(), what);
}

/* (Re)makes the ring with halves of `half` bytes; the caller has waited
 * for the stream when an old ring existed. */
static bool staging_make(cuda_stream *s, size_t half) {
    cuda_backend *c = tr_cuda_backend_of(&s->base);
    cuda_staging *st = &s->stage;
    staging_free(st);
    if (!tr_cuda_check(c, cudaMallocHost((void **)&st->host, 2 * half), "staging (pinned)") ||
        !tr_cuda_check(c, cudaMalloc((void **)&st->dev, 2 * half), "staging (device)") ||
        !tr_cuda_check(c, cudaEventCreateWithFlags(&st->left[0], cudaEventDisableTiming),
                       "staging event") ||
        !tr_cuda_check(c, cudaEventCreateWithFlags(&st->left[1], cudaEventDisableTiming),
                       "staging event")) {
        staging_free(st);
        return false;
    }
    st->half = half;
    return true;
}

void *tr_cuda_stage(cuda_stream *s, const void *src, size_t bytes) {
    cuda_backend *c = tr_cuda_backend_of(&s->base);
    cuda_staging *st = &s->stage;
    size_t need = (bytes + 255) & ~(size_t)255;
    if (need == 0) need = 256;
    if (need > st->half) { /* first use, or larger than a half: regrow */
        size_t half = st->half ? st->half : k_stage_half;
        while (half < need) half *= 2;
        if (st->half && !tr_cuda_check(c, cudaStreamSynchronize(s->s), "staging"))
            return NULL;
        if (!staging_make(s, half)) return NULL;
    } else if (st->used + need > st->half) { /* move to the other half */
        if (!tr_cuda_check(c, cudaEventRecord(st->left[st->cur], s->s), "staging") ||
            !tr_cuda_check(c, cudaEventSynchronize(st->left[1 - st->cur]), "staging"))
            return NULL;
        st->cur = 1 - st->cur;
        st->used = 0;
    }
    size_t off = (size_t)st->cur * st->half + st->used;
    st->used += need;
    memcpy(st->host + off, src, bytes);
    if (!tr_cuda_check(c, cudaMemcpyAsync(st->dev + off, st->host + off, bytes,
                                          cudaMemcpyHostToDevice, s->s),
                       "staging copy"))
        return NULL;
    return st->dev + off;
}

void *tr_cuda_scratch(cuda_stream *s, size_t bytes) {
    cuda_backend *c = tr_cuda_backend_of(&s->base);
    if (bytes <= s->scratch_cap) return s->scratch;
    size_t cap = s->scratch_cap ? s->scratch_cap : 1u << 20;
    while (cap < bytes) cap *= 2;
    if (s->scratch) {
        if (!tr_cuda_check(c, cudaStreamSynchronize(s->s), "scratch")) return NULL;
        cudaFree(s->scratch);
        s->scratch = NULL;
        s->scratch_cap = 0;
    }
    if (!tr_cuda_check(c, cudaMalloc(&s->scratch, cap), "scratch")) return NULL;
    s->scratch_cap = cap;
    return s->scratch;
}

/* ---- creation and the registry entry ---- */

/* The knobs read from the environment at open, unset: the defaults.
 * TRELLIS_CUDA_MMA_MIN: the token count from which the 32-block matmul
 * runs on tensor cores (0: never; both kernels store the same bits).
 * TRELLIS_CUDA_ATTN_CHUNK: positions per piece of a split attention row. */
static const int32_t k_mma_min_default = 9;
static const int32_t k_attn_chunk_default = 128;

/* *out = the variable's whole number in [lo, hi], or dflt when unset. */
static tr_status knob_from_env(const char *name, int32_t dflt, long lo, long hi, int32_t *out,
                               tr_diag *diag) {
    const char *v = getenv(name);
    *out = dflt;
    if (!v) return TR_OK;
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "cuda: %s='%.40s': expected a whole number in %ld..%ld", name, v,
                           lo, hi);
    *out = (int32_t)x;
    return TR_OK;
}

tr_status tr_backend_cuda_new(const tr_backend_config *cfg, tr_backend **out,
                              tr_diag *diag) {
    static const tr_backend_config k_default = {0, NULL, 0};
    if (!out) return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0, "cuda: out is NULL");
    if (!cfg) cfg = &k_default;
    char why[256];
    if (cfg->kernels && strcmp(cfg->kernels, k_sets[0]) != 0)
        return tr_diag_set(diag, TR_ERR_NOT_FOUND, 0,
                           "cuda: unknown kernel set '%.40s' (there is: sm_80)", cfg->kernels);
    int32_t mma_min = 0, chunk = 0;
    tr_status st = knob_from_env("TRELLIS_CUDA_MMA_MIN", k_mma_min_default, 0, INT32_MAX,
                                 &mma_min, diag);
    if (st == TR_OK)
        st = knob_from_env("TRELLIS_CUDA_ATTN_CHUNK", k_attn_chunk_default, 1, 1 << 20, &chunk,
                           diag);
    if (st != TR_OK) return st; /* before the device: a bad knob is said anywhere */
    int count = 0;
    if (why_unavailable(&count, why, sizeof why))
        return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0, "cuda: %s", why);
    if (cfg->device < 0 || cfg->device >= count)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "cuda: device %d out of range (this machine has %d CUDA "
                           "device%s: 0..%d)",
                           cfg->device, count, count == 1 ? "" : "s", count - 1);
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, cfg->device);
    if (e != cudaSuccess)
        return tr_diag_set(diag, TR_ERR_INTERNAL, 0, "cuda: device %d: %s", cfg->device,
                           cudaGetErrorString(e));
    if (p.major < 8)
        return tr_diag_set(diag, TR_ERR_UNSUPPORTED, 0,
                           "cuda: device %d (%.60s) has compute capability %d.%d; the "
                           "CUDA backend needs 8.0 or newer (A100, H100, ...)",
                           cfg->device, p.name, p.major, p.minor);
    e = cudaSetDevice(cfg->device);
    if (e != cudaSuccess)
        return tr_diag_set(diag, TR_ERR_INTERNAL, 0, "cuda: device %d: %s", cfg->device,
                           cudaGetErrorString(e));
    cuda_backend *c = (cuda_backend *)calloc(1, sizeof *c);
    if (!c) return tr_diag_set(diag, TR_ERR_NOMEM, 0, "cuda: out of memory");
    c->base.ops = &k_ops;
    c->device = cfg->device;
    snprintf(c->name, sizeof c->name, "%.79s", p.name);
    c->cc_major = p.major;
    c->cc_minor = p.minor;
    c->memory_total = (uint64_t)p.totalGlobalMem;
    c->mma_min_tokens = mma_min;
    c->attn_chunk = chunk;
    if (stream_init(c, &c->def) != TR_OK) {
        e = cudaGetLastError();
        free(c);
        return tr_diag_set(diag, TR_ERR_INTERNAL, 0, "cuda: device %d: cannot create a "
                           "stream: %s", cfg->device, cudaGetErrorString(e));
    }
    c->base.stream = &c->def.base;
    *out = &c->base;
    return TR_OK;
}

extern "C" const tr_backend_reg tr_backend_cuda_reg = {
    /* .name = */ "cuda",
    /* .kernel_sets = */ k_sets,
    /* .available = */ cuda_available,
    /* .kernels_available = */ cuda_kernels_available,
    /* .create = */ tr_backend_cuda_new,
};
