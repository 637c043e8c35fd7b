/* cpu_backend.c — the CPU backend: the tr_backend_ops table, creation
 * (thread pool, kernel-set choice), memory, streams and events, and its
 * registry entry. The ops are in ops.c.
 *
 * Layering: kernels/cpu; implements kernels/backend.h, declared in
 * kernels/cpu/cpu.h (which says what the knobs mean).
 *
 * Streams and events: every op and copy finishes before it returns, so a
 * stream never holds pending work and every event is complete. The calls
 * still check what a device backend would reject (an event and a stream of
 * two backends), so code that runs here runs unchanged on a GPU.
 *
 * Thread-safety: one thread at a time per backend object (backend.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_features_internal.h"
#include "kernels/cpu/cpu_internal.h"

_Static_assert(TR_CPU_MAX_THREADS == TR_POOL_MAX_THREADS,
               "cpu.h's thread limit is the pool's");

/* Activation scratch reserved at creation: enough for a decode step of any
 * model up to ~32K-wide rows, so that decode never depends on growing it
 * (matmul falls back to token chunks of this size if growth fails). */
#define CPU_ACT_RESERVE (128u * 1024u)

/* ---- kernel sets ---- */

static const char *const k_sets[] = {"portable", "avx2", "avx512vnni", NULL};

static bool set_available(const char *name, char *why, size_t cap) {
    if (strcmp(name, "portable") == 0) return true;
    if (strcmp(name, "avx2") == 0) {
        if (tr_cpu_features_avx2()) return true;
        snprintf(why, cap, "this CPU lacks AVX2, FMA or F16C");
        return false;
    }
    if (strcmp(name, "avx512vnni") == 0) {
        if (tr_cpu_features_avx512vnni()) return true;
        snprintf(why, cap, "this CPU lacks AVX-512 VNNI (with F, VL, BW)");
        return false;
    }
    snprintf(why, cap, "unknown kernel set (known: portable, avx2, "
                       "avx512vnni)");
    return false;
}

static bool set_known(const char *name) {
    for (int i = 0; k_sets[i]; i++)
        if (strcmp(k_sets[i], name) == 0) return true;
    return false;
}

/* The best set this CPU runs. */
static const char *set_best(void) {
    if (tr_cpu_features_avx512vnni()) return "avx512vnni";
    if (tr_cpu_features_avx2()) return "avx2";
    return "portable";
}

/* Binds set `name` (known and available) to c's two kernel tables. */
static void set_bind(cpu_backend *c, const char *name) {
    c->kset = name;
    c->avx2 = strcmp(name, "portable") != 0;
    c->k = !c->avx2                           ? &tr_cpu_op_kernels_portable
           : strcmp(name, "avx512vnni") == 0 ? &tr_cpu_op_kernels_vnni
                                             : &tr_cpu_op_kernels_avx2;
    c->qk = tr_cpu_quant_get(name);
}

/* The set a config asks for: cfg->kernels, else $TRELLIS_CPU, else the
 * best; an unknown or unavailable name is an error naming its source. */
static tr_status set_choose(const tr_backend_config *cfg, const char **out,
                            tr_diag *diag) {
    const char *name = cfg->kernels, *src = "kernel set";
    if (!name) {
        name = getenv("TRELLIS_CPU");
        src = "TRELLIS_CPU";
        if (name && !*name) name = NULL;
    }
    if (!name) {
        *out = set_best();
        return TR_OK;
    }
    char why[96];
    if (!set_available(name, why, sizeof why))
        return tr_diag_set(diag,
                           set_known(name) ? TR_ERR_UNSUPPORTED
                                           : TR_ERR_NOT_FOUND,
                           0, "cpu backend: %s '%s': %s", src, name, why);
    for (int i = 0; k_sets[i]; i++) /* the static copy of the name */
        if (strcmp(k_sets[i], name) == 0) *out = k_sets[i];
    return TR_OK;
}

/* ---- lifetime, info ---- */

static void cpu_destroy(tr_backend *be) {
    cpu_backend *c = (cpu_backend *)be;
    tr_cpu_pool_free(c->pool);
    tr_aligned_free(c->act);
    tr_aligned_free(c->attn);
    tr_aligned_free(c->attn_q);
    tr_aligned_free(c->rows);
    for (int e = 0; e < CPU_ROPE_TABLES; e++) {
        tr_aligned_free(c->rope[e].pos);
        tr_aligned_free(c->rope[e].cs);
    }
    free(c);
}

static void cpu_get_info(const tr_backend *be, tr_backend_info *out) {
    const cpu_backend *c = (const cpu_backend *)be;
    memset(out, 0, sizeof *out);
    out->name = "cpu";
    out->kernels = c->kset;
#if defined(__x86_64__)
    const char *isa = "x86-64";
#elif defined(__aarch64__)
    const char *isa = "aarch64";
#else
    const char *isa = "host CPU";
#endif
    snprintf(out->device, sizeof out->device, "%s (%d thread%s)", isa,
             c->n_threads, c->n_threads == 1 ? "" : "s");
    out->threads = c->n_threads;
    out->host_memory = true;
    out->async = false;
}

static bool cpu_supports(const tr_backend *be, tr_backend_cap cap,
                         tr_dtype t) {
    (void)be;
    if (cap == TR_BACKEND_CAP_WEIGHT) return tr_dtype_computable(t);
    return false;
}

/* Every format of backend.h, K and V independently. */
static bool cpu_supports_kv(const tr_backend *be, tr_kv_type k, tr_kv_type v) {
    (void)be;
    return (unsigned)k < TR_KV_TYPE_COUNT && (unsigned)v < TR_KV_TYPE_COUNT;
}

/* ---- streams and events ---- */

static tr_status cpu_stream_new(tr_backend *be, tr_stream **out) {
    if (!out) return TR_ERR_INVALID_ARG;
    tr_stream *s = calloc(1, sizeof *s);
    if (!s) return TR_ERR_NOMEM;
    s->be = be;
    *out = s;
    return TR_OK;
}

static void cpu_stream_free(tr_stream *s) {
    if (s && s != s->be->stream) free(s);
}

static tr_status cpu_stream_synchronize(tr_stream *s) {
    return s ? TR_OK : TR_ERR_INVALID_ARG;
}

static tr_status cpu_event_new(tr_backend *be, tr_event **out) {
    if (!out) return TR_ERR_INVALID_ARG;
    tr_event *e = calloc(1, sizeof *e);
    if (!e) return TR_ERR_NOMEM;
    e->be = be;
    *out = e;
    return TR_OK;
}

static void cpu_event_free(tr_event *e) { free(e); }

/* The work before the record point has finished: the event is complete
 * as soon as it is recorded. */
static tr_status cpu_event_record(tr_event *e, tr_stream *s) {
    if (!e || !s || e->be != s->be) return TR_ERR_INVALID_ARG;
    return TR_OK;
}

static tr_status cpu_stream_wait(tr_stream *s, tr_event *e) {
    if (!e || !s || e->be != s->be) return TR_ERR_INVALID_ARG;
    return TR_OK;
}

static tr_status cpu_event_synchronize(tr_event *e) {
    return e ? TR_OK : TR_ERR_INVALID_ARG;
}

static tr_status cpu_synchronize(tr_backend *be) {
    (void)be;
    return TR_OK;
}

/* ---- memory ---- */

static tr_status cpu_alloc(tr_backend *be, size_t bytes, void **out) {
    (void)be;
    if (!out) return TR_ERR_INVALID_ARG;
    void *p = tr_aligned_alloc(bytes ? bytes : 1, 64);
    if (!p) return TR_ERR_NOMEM;
    *out = p;
    return TR_OK;
}

static void cpu_free(tr_backend *be, void *ptr) {
    (void)be;
    tr_aligned_free(ptr);
}

/* Weights are read in place: the CPU reads host memory. */
static tr_status cpu_import_weights(tr_backend *be, const void *src,
                                    size_t bytes, const void **dev,
                                    void **owned) {
    (void)be;
    (void)bytes;
    if (!dev || !owned || (!src && bytes)) return TR_ERR_INVALID_ARG;
    *dev = src;
    *owned = NULL;
    return TR_OK;
}

static tr_status cpu_copy(tr_stream *s, void *dst, const void *src,
                          size_t bytes) {
    (void)s;
    if (bytes == 0) return TR_OK;
    if (!dst || !src) return TR_ERR_INVALID_ARG;
    memmove(dst, src, bytes);
    return TR_OK;
}

static const tr_backend_ops k_cpu_ops = {
    .destroy = cpu_destroy,
    .get_info = cpu_get_info,
    .supports = cpu_supports,
    .supports_kv = cpu_supports_kv,
    .stream_new = cpu_stream_new,
    .stream_free = cpu_stream_free,
    .stream_synchronize = cpu_stream_synchronize,
    .event_new = cpu_event_new,
    .event_free = cpu_event_free,
    .event_record = cpu_event_record,
    .stream_wait = cpu_stream_wait,
    .event_synchronize = cpu_event_synchronize,
    .synchronize = cpu_synchronize,
    .prepare_matmul_weights = tr_cpu_prepare_matmul_weights,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .import_weights = cpu_import_weights,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .embed = tr_cpu_op_embed,
    .rmsnorm = tr_cpu_op_rmsnorm,
    .matmul = tr_cpu_op_matmul,
    .rope = tr_cpu_op_rope,
    .kv_store = tr_cpu_op_kv_store,
    .attention = tr_cpu_op_attention,
    .swiglu = tr_cpu_op_swiglu,
    .add = tr_cpu_op_add,
    .get_rows = tr_cpu_op_get_rows,
    .rope_neox = tr_cpu_op_rope_neox,
    .geglu = tr_cpu_op_geglu,
    .add_bias = tr_cpu_op_add_bias,
    .scale = tr_cpu_op_scale,
    .softcap = tr_cpu_op_softcap,
    .mul_cols = tr_cpu_op_mul_cols,
    .matmul_rows = tr_cpu_op_matmul_rows,
};

tr_status tr_backend_cpu_new(const tr_backend_config *cfg, tr_backend **out,
                             tr_diag *diag) {
    static const tr_backend_config k_default;
    if (!cfg) cfg = &k_default;
    if (!out)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "cpu backend: out is NULL");
    int n_threads = cfg->threads;
    if (n_threads > TR_CPU_MAX_THREADS)
        return tr_diag_set(diag, TR_ERR_INVALID_ARG, 0,
                           "cpu backend: %d threads (at most %d)", n_threads,
                           TR_CPU_MAX_THREADS);
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n < 1 ? 1 : (int)TR_MIN(n, (long)TR_CPU_MAX_THREADS);
    }
    const char *set = NULL;
    tr_status s = set_choose(cfg, &set, diag);
    if (s) return s;

    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) return TR_ERR_NOMEM;
    c->base.ops = &k_cpu_ops;
    c->base.stream = &c->stream0;
    c->stream0.be = &c->base;
    c->n_threads = n_threads;
    set_bind(c, set);
    /* TRELLIS_CPU_REPACK=0 keeps every matrix row-major (a before/after
     * switch for benchmarks, and half the weights' memory where the model
     * file is read into memory rather than mapped) */
    const char *rp = getenv("TRELLIS_CPU_REPACK");
    c->repack = !(rp && strcmp(rp, "0") == 0);
    for (int e = 0; e < CPU_ROPE_TABLES; e++) c->rope[e].n = -1;
    if (!tr_cpu_scratch_reserve(&c->act, &c->act_cap, CPU_ACT_RESERVE)) {
        free(c);
        return TR_ERR_NOMEM;
    }
    s = tr_cpu_pool_new(n_threads, &c->pool);
    if (s != TR_OK) {
        tr_aligned_free(c->act);
        free(c);
        return tr_diag_set(diag, s, 0, "cpu backend: cannot start %d threads",
                           n_threads);
    }
    *out = &c->base;
    return TR_OK;
}

/* ---- registry entry ---- */

static bool cpu_available(char *why, size_t cap) {
    (void)why;
    (void)cap;
    return true;
}

const tr_backend_reg tr_backend_cpu_reg = {
    .name = "cpu",
    .kernel_sets = k_sets,
    .available = cpu_available,
    .kernels_available = set_available,
    .create = tr_backend_cpu_new,
};
