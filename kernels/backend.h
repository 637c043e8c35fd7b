/* backend.h — the compute backend interface: a table of operations on
 * device buffers that the model code (runtime/model) is written against
 * once, and that each backend (kernels/cpu now, kernels/cuda later) fills.
 *
 * Layering: kernels/ knows nothing about requests, tokenizers or the radix
 * tree. It sees weights, activations, a paged KV memory and a batch layout.
 *
 * Execution model: operations are enqueued on the backend's stream in call
 * order. The CPU backend runs each op synchronously on its worker pool
 * before returning (so `synchronize` is a no-op there); the CUDA backend
 * enqueues and returns. Pointers passed to ops are device pointers obtained
 * from `alloc` (or, when `host_memory` is true, any host pointer, e.g. the
 * mmapped weights). Batch layouts (tr_batch) are host memory; a device
 * backend copies what it needs when the op is enqueued.
 *
 * Determinism (a contract, tested): the value computed for one token row
 * depends only on that row's inputs (and, for attention, its sequence's KV),
 * never on how many other rows share the batch, on their content, or on the
 * number of threads. Reductions run in a fixed order per output element.
 * This gives batch invariance and bit-identical logits whether a prefix was
 * cached or recomputed.
 *
 * Threads: a backend object is used by one thread at a time (the engine
 * thread); it owns its worker pool / stream.
 *
 * Ops cannot fail once their arguments are valid (sizes are checked by the
 * model at load time), so they return void; allocation and copies return
 * tr_status.
 */
#ifndef TR_KERNELS_BACKEND_H
#define TR_KERNELS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "kernels/dtype.h"

typedef struct tr_backend tr_backend;

/* A weight matrix W of `rows` x `cols`, row-major, each row `cols`
 * elements of `type` (quantized rows are blocks along cols). In GGUF terms
 * ne[0] = cols (input features), ne[1] = rows (output features). */
typedef struct tr_weight {
    const void *data; /* device pointer (borrowed) */
    tr_dtype type;
    int64_t rows;
    int64_t cols;
} tr_weight;

/* Paged KV memory. Page p, layer l, kind c (0 = K, 1 = V), slot s starts at
 *   base + ((((p * n_layers + l) * 2 + c) * page_size + s) * kv_dim) * esize
 * where kv_dim = n_kv_heads * head_dim and esize = 2 for F16, 4 for F32.
 * So one page holds K and V of page_size consecutive positions for every
 * layer, and a layer's K (or V) rows of one page are contiguous. */
typedef struct tr_kv_layout {
    void *base;     /* device pointer, n_pages * page_bytes (borrowed) */
    int32_t n_pages;
    int32_t n_layers;
    int32_t page_size; /* tokens per page, >= 1 */
    int32_t n_kv_heads;
    int32_t head_dim;
    tr_dtype type; /* TR_DTYPE_F16 or TR_DTYPE_F32 */
    /* Sliding-window layers: window[l] > 0 means a token at position p
     * attends only to positions p - window[l] + 1 .. p in layer l (the
     * older ones stay in the pages, unread); 0 = every position. NULL: no
     * layer has a window. Host memory, borrowed (the model owns it). */
    const int32_t *window;
} tr_kv_layout;

/* A ragged batch of tokens from one or more sequences.
 * Token t belongs to sequence seq[t] at position pos[t]. Its K/V is written
 * to page page_table[seq[t]][pos[t] / page_size], slot pos[t] % page_size.
 * It attends causally to positions 0..pos[t] of its own sequence (the
 * positions before this batch must already be in the KV pages; those of
 * this batch are written by kv_store before attention runs).
 * All arrays are host memory, borrowed for the duration of the call. */
typedef struct tr_batch {
    int32_t n_tokens;
    const int32_t *pos;              /* [n_tokens] */
    const int32_t *seq;              /* [n_tokens] index into the arrays below */
    int32_t n_seqs;
    const int32_t *const *page_table; /* [n_seqs] -> page ids */
    const int32_t *n_pages;          /* [n_seqs] length of each page table */
} tr_batch;

typedef struct tr_backend_ops {
    const char *name;

    /* ---- lifetime and memory (required) ---- */
    void (*destroy)(tr_backend *be);
    /* 64-byte aligned device memory; *out untouched on failure. */
    tr_status (*alloc)(tr_backend *be, size_t bytes, void **out);
    void (*free)(tr_backend *be, void *ptr);
    tr_status (*upload)(tr_backend *be, void *dst, const void *src,
                        size_t bytes);
    tr_status (*download)(tr_backend *be, void *dst, const void *src,
                          size_t bytes);
    /* Waits until every enqueued op has finished. */
    tr_status (*synchronize)(tr_backend *be);

    /* ---- ops (required) ----
     * Shapes are given as [rows, cols] row-major, float32 unless noted. */

    /* out[n, dim] = dequantized rows ids[i] of table[vocab, dim]. */
    void (*embed)(tr_backend *be, float *out, const tr_weight *table,
                  const int32_t *ids, int32_t n);

    /* out[n, dim] = x / sqrt(mean(x^2) + eps) * w[dim]. out may equal x. */
    void (*rmsnorm)(tr_backend *be, float *out, const float *x,
                    const float *w, int32_t n, int32_t dim, float eps);

    /* For each i < n_mats: out[i][n, w[i]->rows] (+)= x[n, cols] . w[i]^T.
     * All w[i] share cols. x is quantized once (to the activation format
     * the weight type's integer dot product needs) and reused for every
     * matrix: pass Q, K and V (or gate and up) together. With accumulate,
     * the product is added to out instead of stored (residual add fused). */
    void (*matmul)(tr_backend *be, int32_t n_mats, float *const *out,
                   const tr_weight *const *w, const float *x, int32_t n,
                   bool accumulate);

    /* Rotary embedding in place, GGML "normal" mode (pairs (2i, 2i+1) of
     * each head rotated by angle pos * base^(-2i / head_dim)).
     * x[n, n_heads * head_dim]. */
    void (*rope)(tr_backend *be, float *x, int32_t n, int32_t n_heads,
                 int32_t head_dim, const int32_t *pos, float freq_base);

    /* Writes k[n, kv_dim], v[n, kv_dim] of the batch's tokens into their
     * pages of layer `layer` (converting to kv->type). */
    void (*kv_store)(tr_backend *be, const tr_kv_layout *kv, int32_t layer,
                     const float *k, const float *v, const tr_batch *b);

    /* out[n, n_heads * head_dim] = causal softmax(q k^T * scale) v over each
     * token's sequence, read through its page table; in a sliding-window
     * layer (kv->window) over the window's positions only. n_heads is a
     * multiple of kv->n_kv_heads (grouped-query attention: query head h
     * reads KV head h / (n_heads / n_kv_heads)). */
    void (*attention)(tr_backend *be, float *out, const float *q,
                      const tr_kv_layout *kv, int32_t layer,
                      const tr_batch *b, int32_t n_heads, float scale);

    /* out[i] = silu(gate[i]) * up[i] for i < n. out may equal gate. */
    void (*swiglu)(tr_backend *be, float *out, const float *gate,
                   const float *up, int64_t n);

    /* out[i] += x[i] for i < n. */
    void (*add)(tr_backend *be, float *out, const float *x, int64_t n);

    /* out[i, dim] = x[rows[i], dim] for i < n (gather the rows whose logits
     * are wanted). out must not overlap x. */
    void (*get_rows)(tr_backend *be, float *out, const float *x, int32_t dim,
                     const int32_t *rows, int32_t n);

    /* Rotary embedding in place, GGML "NEOX" mode (Qwen, Gemma): element i
     * of each head pairs with element i + head_dim / 2, rotated by
     * theta_i = freq_scale * pos * base^(-2i / head_dim) (the power as the
     * same float running product as rope; freq_scale: 1 / the linear
     * rope-scaling factor, 1 without scaling). x[n, n_heads * head_dim]. */
    void (*rope_neox)(tr_backend *be, float *x, int32_t n, int32_t n_heads,
                      int32_t head_dim, const int32_t *pos, float freq_base,
                      float freq_scale);

    /* out[i] = gelu(gate[i]) * up[i] for i < n, GELU's tanh form:
     * gelu(x) = x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))).
     * out may equal gate. */
    void (*geglu)(tr_backend *be, float *out, const float *gate,
                  const float *up, int64_t n);

    /* x[n, dim] += b[dim] (every row; a projection's bias). */
    void (*add_bias)(tr_backend *be, float *x, const float *b, int32_t n,
                     int32_t dim);

    /* x[i] *= s for i < n. */
    void (*scale)(tr_backend *be, float *x, float s, int64_t n);

    /* x[i] = cap * tanh(x[i] / cap) for i < n (logit soft-capping). */
    void (*softcap)(tr_backend *be, float *x, float cap, int64_t n);
} tr_backend_ops;

/* Every backend object starts with this header. */
struct tr_backend {
    const tr_backend_ops *ops;
    bool host_memory; /* device pointers are host pointers (CPU backend) */
};

/* ---- the CPU backend (kernels/cpu) ----
 * n_threads <= 0 means one per online core. The calling thread takes part
 * in every op as worker 0. Kernels are chosen at creation from what the CPU
 * supports (AVX2+FMA+F16C, else portable C); TRELLIS_CPU=portable in the
 * environment forces the portable kernels. */
tr_status tr_backend_cpu_new(int n_threads, tr_backend **out);
/* Which kernel set the CPU backend runs: "avx2" or "portable". */
const char *tr_backend_cpu_kernels(const tr_backend *be);
int tr_backend_cpu_threads(const tr_backend *be);

static inline void tr_backend_free(tr_backend *be) {
    if (be) be->ops->destroy(be);
}

#endif
