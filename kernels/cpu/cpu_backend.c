/* cpu_backend.c — the CPU backend: the tr_backend_ops table, creation
 * (thread pool, kernel-set choice), and memory. The ops are in ops.c.
 *
 * Layering: kernels/cpu; implements kernels/backend.h.
 *
 * Memory is host memory (host_memory = true): alloc is 64-byte aligned
 * malloc, upload/download are memcpy, synchronize is a no-op because every
 * op has finished when it returns.
 *
 * Kernel choice: AVX2+FMA+F16C loops when the CPU has them, else portable
 * C; TRELLIS_CPU=portable in the environment (read once, at creation)
 * forces portable loops for both the ops and the quantized math. The quant
 * module may pick an even faster set (AVX-512 VNNI) for the matmul; its
 * results are bitwise equal to its other sets by its contract.
 *
 * Thread-safety: one thread at a time per backend object (backend.h).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_internal.h"
#include "base/util.h"

/* Activation scratch reserved at creation: enough for a decode step of any
 * model up to ~32K-wide rows, so that decode never depends on growing it
 * (matmul falls back to token chunks of this size if growth fails). */
#define CPU_ACT_RESERVE (128u * 1024u)

static void cpu_destroy(tr_backend *be) {
    cpu_backend *c = (cpu_backend *)be;
    tr_cpu_pool_free(c->pool);
    tr_aligned_free(c->act);
    tr_aligned_free(c->attn);
    for (int e = 0; e < CPU_ROPE_TABLES; e++) {
        tr_aligned_free(c->rope[e].pos);
        tr_aligned_free(c->rope[e].cs);
    }
    free(c);
}

static tr_status cpu_alloc(tr_backend *be, size_t bytes, void **out) {
    (void)be;
    if (!out) return TR_ERR_INVALID_ARG;
    void *p = tr_aligned_alloc(bytes, 64);
    if (!p) return TR_ERR_NOMEM;
    *out = p;
    return TR_OK;
}

static void cpu_free(tr_backend *be, void *ptr) {
    (void)be;
    tr_aligned_free(ptr);
}

static tr_status cpu_copy(tr_backend *be, void *dst, const void *src,
                          size_t bytes) {
    (void)be;
    if (bytes == 0) return TR_OK;
    if (!dst || !src) return TR_ERR_INVALID_ARG;
    memmove(dst, src, bytes);
    return TR_OK;
}

static tr_status cpu_synchronize(tr_backend *be) {
    (void)be;
    return TR_OK;
}

static const tr_backend_ops k_cpu_ops = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .synchronize = cpu_synchronize,
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
};

tr_status tr_backend_cpu_new(int n_threads, tr_backend **out) {
    if (!out) return TR_ERR_INVALID_ARG;
    if (n_threads > TR_POOL_MAX_THREADS) return TR_ERR_INVALID_ARG;
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n < 1 ? 1 : (int)TR_MIN(n, (long)TR_POOL_MAX_THREADS);
    }
    const char *env = getenv("TRELLIS_CPU");
    bool force_portable = env && strcmp(env, "portable") == 0;

    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) return TR_ERR_NOMEM;
    c->base.ops = &k_cpu_ops;
    c->base.host_memory = true;
    c->n_threads = n_threads;
    c->avx2 = !force_portable && tr_cpu_features_avx2();
    c->k = c->avx2 ? &tr_cpu_op_kernels_avx2 : &tr_cpu_op_kernels_portable;
    c->qk = tr_cpu_quant_select(force_portable);
    for (int e = 0; e < CPU_ROPE_TABLES; e++) c->rope[e].n = -1;
    if (!tr_cpu_scratch_reserve(&c->act, &c->act_cap, CPU_ACT_RESERVE)) {
        free(c);
        return TR_ERR_NOMEM;
    }
    tr_status s = tr_cpu_pool_new(n_threads, &c->pool);
    if (s != TR_OK) {
        tr_aligned_free(c->act);
        free(c);
        return s;
    }
    *out = &c->base;
    return TR_OK;
}

const char *tr_backend_cpu_kernels(const tr_backend *be) {
    if (!be || be->ops != &k_cpu_ops) return NULL;
    return ((const cpu_backend *)be)->k->name;
}

int tr_backend_cpu_threads(const tr_backend *be) {
    if (!be || be->ops != &k_cpu_ops) return 0;
    return ((const cpu_backend *)be)->n_threads;
}
