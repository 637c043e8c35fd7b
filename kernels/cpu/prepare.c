/* prepare.c — the CPU backend's prepare_matmul_weights: matrices the
 * kernel set can read in the 16-row interleaved layout (quant_math_internal.h,
 * "r16") are copied into it once, at load, into one buffer advised for
 * transparent huge pages (a decode step walks all of them: 4 KiB pages
 * cost TLB misses, measured in bench_matmul's forward block). */
#include <string.h>
#include <sys/mman.h>

#include "base/util.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/quant_math_internal.h"

#define PREPARE_HUGE (2u << 20)

static bool repackable(const cpu_backend *c, const tr_weight *w) {
    return c->repack && c->qk->matmul_tile_r16 && w->layout == 0 &&
           tr_cpu_repack16_supported(w->type, w->rows, w->cols);
}

/* A copy's bytes in the buffer: the matrix's, each copy 64-byte aligned
 * (the layout's loads want 32). */
static size_t copy_bytes(const tr_weight *w) {
    size_t bytes = tr_dtype_type_size(w->type) * (size_t)(w->cols / 32) * (size_t)w->rows;
    return (bytes + 63) / 64 * 64;
}

tr_status tr_cpu_prepare_matmul_weights(tr_backend *be, int32_t n,
                                        const tr_weight *const *w,
                                        tr_weight *out, void **owned,
                                        void (*copied)(void *ctx, int32_t i),
                                        void *ctx) {
    cpu_backend *c = (cpu_backend *)be;
    if (!be || n < 0 || (n && (!w || !out)) || !owned) return TR_ERR_INVALID_ARG;
    *owned = NULL;
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!w[i]) return TR_ERR_INVALID_ARG;
        if (repackable(c, w[i])) total += copy_bytes(w[i]);
    }
    uint8_t *buf = NULL;
    if (total) {
        const bool huge = total >= PREPARE_HUGE;
        buf = tr_aligned_alloc(huge ? (total + PREPARE_HUGE - 1) / PREPARE_HUGE * PREPARE_HUGE
                                    : total,
                               huge ? PREPARE_HUGE : 64);
        if (!buf) return TR_ERR_NOMEM;
#ifdef MADV_HUGEPAGE
        if (huge) (void)madvise(buf, total, MADV_HUGEPAGE); /* advice: failure costs speed only */
#endif
    }
    size_t at = 0;
    for (int32_t i = 0; i < n; i++) {
        out[i] = *w[i];
        if (!repackable(c, w[i])) continue;
        tr_cpu_repack16(w[i]->type, w[i]->data, w[i]->rows, w[i]->cols, buf + at);
        out[i].data = buf + at;
        out[i].layout = TR_CPU_LAYOUT_R16;
        at += copy_bytes(w[i]);
        if (copied) copied(ctx, i);
    }
    *owned = buf;
    return TR_OK;
}
