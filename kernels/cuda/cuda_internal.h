/* cuda_internal.h — what the CUDA backend's files share: the backend,
 * stream and event objects, the staging of host index arrays (rule 3 of
 * backend.h), the sticky fault, and the ops each .cu file defines for
 * the table in cuda_backend.cu.
 *
 * Layering: internal to kernels/cuda; CUDA C++ (included by .cu files
 * only). Every function here has C linkage and a tr_cuda_ name, so the
 * library's global symbols keep the tr_ prefix (tests/check_symbols.sh);
 * kernels and helpers of one file are `static`. (Not an anonymous
 * namespace: nvcc renames it to a named _GLOBAL__N_<hash> namespace for
 * the host compiler, so its functions and kernel stubs come out global.)
 */
#ifndef TR_KERNELS_CUDA_CUDA_INTERNAL_H
#define TR_KERNELS_CUDA_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/cuda.h"

extern "C" {

/* Host index arrays of one op go through a pinned ring of two halves on
 * the op's stream: copied into pinned memory, then cudaMemcpyAsync to the
 * device twin of that region, then read by the op's kernel. Entering a
 * half waits (on the host, rarely) for the event recorded when the stream
 * last left it, so a region is never rewritten while a copy or kernel of
 * an earlier op may still read it. */
typedef struct cuda_staging {
    char *host;       /* pinned, 2 * half bytes */
    char *dev;        /* device, 2 * half bytes */
    size_t half;      /* 0 until the first use */
    size_t used;      /* bytes used of the current half */
    int cur;          /* the current half, 0 or 1 */
    cudaEvent_t left[2]; /* recorded when the stream left half i */
} cuda_staging;

typedef struct cuda_stream {
    tr_stream base;
    cudaStream_t s;
    cuda_staging stage;
    void *scratch; /* device memory for an op's temporaries (quantized
                      activations), grown on demand */
    size_t scratch_cap;
} cuda_stream;

typedef struct cuda_backend {
    tr_backend base;
    int device;
    char name[80]; /* cudaDeviceProp.name */
    int cc_major, cc_minor;
    uint64_t memory_total;
    cuda_stream def; /* the default stream */
    /* A fault (a failed launch, a CUDA error in an op, a staging buffer
     * that could not be had) sticks: ops become no-ops and every
     * synchronize, download and event wait reports it. */
    tr_status fault;
    /* The 32-block matmul runs on tensor cores (matmul_mma.cu) from this
     * many tokens up, 0 never: TRELLIS_CUDA_MMA_MIN, read at open. Both
     * kernels store the same bits; the choice is speed only. */
    int32_t mma_min_tokens;
    /* Positions per piece of a split attention row (attention.cu):
     * TRELLIS_CUDA_ATTN_CHUNK, read at open. It changes where rows are cut,
     * so results differ by rounding between values, never within one. */
    int32_t attn_chunk;
} cuda_backend;

typedef struct cuda_event {
    tr_event base;
    cudaEvent_t e;
} cuda_event;

static inline cuda_stream *tr_cuda_stream_of(tr_stream *s) {
    return (cuda_stream *)s;
}
static inline cuda_backend *tr_cuda_backend_of(tr_stream *s) {
    return (cuda_backend *)s->be;
}

/* Records err (not cudaSuccess) as the backend's sticky fault, logging
 * where; returns true when err was cudaSuccess. */
bool tr_cuda_check(cuda_backend *c, cudaError_t err, const char *what);

/* Makes c's device current on this thread and says whether ops may run
 * (no fault yet). Every op starts with it. */
bool tr_cuda_enter(cuda_backend *c);

/* A device copy of `bytes` host bytes at src, enqueued on s, valid for
 * the work enqueued on s after this call (rule 3: src may change once
 * this returns). NULL (and the fault set) on failure. */
void *tr_cuda_stage(cuda_stream *s, const void *src, size_t bytes);

/* s's scratch, at least `bytes`; NULL (and the fault set) on failure.
 * Growing waits for s's earlier work (which may use the old buffer). */
void *tr_cuda_scratch(cuda_stream *s, size_t bytes);

/* Checks the launch just made on s. */
void tr_cuda_launched(cuda_stream *s, const char *what);

/* ---- ops (backend.h's contracts): ops.cu ---- */
void tr_cuda_op_embed(tr_stream *s, float *out, const tr_weight *table,
                      const int32_t *ids, int32_t n);
void tr_cuda_op_rmsnorm(tr_stream *s, float *out, const float *x,
                        const float *w, int32_t n, int32_t dim, float eps);
void tr_cuda_op_rope(tr_stream *s, float *x, int32_t n, int32_t n_heads,
                     int32_t head_dim, const int32_t *pos, float freq_base);
void tr_cuda_op_rope_neox(tr_stream *s, float *x, int32_t n, int32_t n_heads,
                          int32_t head_dim, const int32_t *pos,
                          float freq_base, float freq_scale);
void tr_cuda_op_swiglu(tr_stream *s, float *out, const float *gate,
                       const float *up, int64_t n);
void tr_cuda_op_geglu(tr_stream *s, float *out, const float *gate,
                      const float *up, int64_t n);
void tr_cuda_op_add(tr_stream *s, float *out, const float *x, int64_t n);
void tr_cuda_op_mul_cols(tr_stream *s, float *x, const float *w, int32_t n,
                         int32_t dim);
void tr_cuda_op_add_bias(tr_stream *s, float *x, const float *b, int32_t n,
                         int32_t dim);
void tr_cuda_op_scale(tr_stream *s, float *x, float sc, int64_t n);
void tr_cuda_op_softcap(tr_stream *s, float *x, float cap, int64_t n);
void tr_cuda_op_get_rows(tr_stream *s, float *out, const float *x,
                         int32_t dim, const int32_t *rows, int32_t n);

/* ---- ops on the paged KV memory: attention.cu ---- */
void tr_cuda_op_kv_store(tr_stream *s, const tr_kv_layout *kv, int32_t layer,
                         const float *k, const float *v, const tr_batch *b);
void tr_cuda_op_attention(tr_stream *s, float *out, const float *q,
                          const tr_kv_layout *kv, int32_t layer,
                          const tr_batch *b, int32_t n_heads, float scale);

/* ---- matmul: matmul.cu (the K-quants: matmul_k.cu) ---- */
/* The weight types matmul, matmul_rows and embed compute with. */
bool tr_cuda_weight_type_ok(tr_dtype t);
void tr_cuda_op_matmul(tr_stream *s, int32_t n_mats, float *const *out,
                       const tr_weight *const *w, const float *x, int32_t n,
                       bool accumulate);
void tr_cuda_op_matmul_rows(tr_stream *s, float *out, const tr_weight *w,
                            const float *x, int32_t n, const int32_t *ids,
                            int32_t n_ids);
/* Q4_K, Q5_K, Q6_K. */
bool tr_cuda_is_k(tr_dtype t);
/* Bytes of one A256 activation row (matmul_k.cu's layout), a multiple of
 * 16. */
size_t tr_cuda_a256_stride(int64_t cols);
/* Enqueues on cs the A256 rows of x[n, cols] (cols a multiple of 256)
 * into dst, rows `stride` bytes apart (dst 16-aligned). */
void tr_cuda_a256_quantize(cuda_stream *cs, uint8_t *dst, size_t stride, const float *x,
                           int32_t n, int64_t cols);
/* Enqueues out[t, ids[k] (or k)] (+)= x[t] . row of w, for k < n_rows and
 * t < n, w a K-quant, xq its A256 rows (device; ids device or NULL). */
void tr_cuda_matmul_k(cuda_stream *cs, float *out, int64_t out_stride, const tr_weight *w,
                      const uint8_t *xq, size_t xq_stride, int32_t n, int64_t n_rows,
                      const int32_t *ids, bool accumulate);

/* matmul_mma.cu: enqueues what matmul.cu's 32-block kernel stores (the
 * same bits) for w of type Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0 with xq its A32
 * rows, on int8 tensor cores; false (nothing enqueued) for another type
 * or a batch over the grid's limits. */
bool tr_cuda_matmul_a32_mma(cuda_stream *cs, float *out, int64_t out_stride, const tr_weight *w,
                            size_t w_row_bytes, const uint8_t *xq, size_t x_stride, int32_t n,
                            int64_t n_rows, const int32_t *ids, bool accumulate);

} /* extern "C" */

#endif
