/* cpu_internal.h — what the files of the CPU backend share: the backend
 * object, the per-ISA table of inner loops for the non-matmul ops, and the
 * op entry points that cpu_backend.c puts in its tr_backend_ops table.
 *
 * Layering: internal to kernels/cpu. The quantized math (matmul tiles,
 * activation quantization, dequantization, fp16/bf16) is kernels/cpu/quant_math_internal.h;
 * this file covers everything else.
 *
 * Determinism: an op's driver (ops.c) only decides which rows/items each
 * thread computes; every value is computed by a kernel whose arithmetic
 * depends only on that row's inputs and sizes, never on the thread count or
 * the batch. Kernels of one table are deterministic; the AVX2 and portable
 * tables may differ from each other in the last bits (exp, sums), except
 * rope_row and store_row, which give the same bits in both (tested).
 *
 * Thread-safety: a backend is used by one thread at a time; the kernels
 * are pure functions.
 */
#ifndef TR_KERNELS_CPU_INTERNAL_H
#define TR_KERNELS_CPU_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "kernels/cpu/quant_math_internal.h"
#include "kernels/cpu/threadpool_internal.h"

/* Positions per attention block. Each (token, head) runs softmax over its
 * positions 0..p in blocks [k*64, (k+1)*64); each block yields a partial
 * (max, sum, weighted V) and the partials are folded left to right. The
 * blocks depend only on p, so the result is the same whether the blocks
 * are folded on one thread or computed on many and folded afterwards. */
#define CPU_ATTN_BLOCK 64

/* The largest head_dim the attention kernels accept (stack buffers). */
#define CPU_ATTN_MAX_HEAD_DIM 1024

/* Inner loops with one implementation per instruction set. KV rows are
 * in a format of backend.h (tr_kv_type); a "row" argument points at one
 * head of row 0 and `stride` is in bytes from one row to the next (staged
 * F32 rows included). In attn_scores and attn_accum a quantized element
 * enters the arithmetic as its exact F32 value, in the order an F32 row's
 * would, so a row staged as F32 (load_heads) gives bitwise the same
 * results as the cached row. The attention op sends Q8 keys through
 * attn_scores_q8 instead (integer dots: several times fewer instructions
 * than converting every element), and never stages them as F32. */
typedef struct cpu_op_kernels {
    const char *name; /* "portable", "avx2" or "avx512vnni" */

    /* out[dim] = x * (1 / sqrt(mean(x^2) + eps)) * w; out may equal x. */
    void (*rmsnorm_row)(float *out, const float *x, const float *w,
                        int32_t dim, float eps);
    /* x[n_heads * head_dim] rotated pairwise by cs[2i] = cos, cs[2i+1] = sin
     * of pair i (head_dim / 2 pairs). */
    void (*rope_row)(float *x, int32_t n_heads, int32_t head_dim,
                     const float *cs);
    /* out[i] = silu(g[i]) * u[i]; out may equal g or u. */
    void (*swiglu)(float *out, const float *g, const float *u, int64_t n);
    /* out[i] = gelu_tanh(g[i]) * u[i] (backend.h's geglu); out may equal
     * g or u. */
    void (*geglu)(float *out, const float *g, const float *u, int64_t n);
    /* out[i] += x[i]. */
    void (*add)(float *out, const float *x, int64_t n);
    /* dst[n] (F16 or F32) = src[n]. */
    void (*store_row)(void *dst, const float *src, int32_t n, bool f16);
    /* dst[n] = src[n] (F16 or F32): exact, the inverse of store_row. */
    void (*load_row)(float *dst, const void *src, int32_t n, bool f16);
    /* dst[n_heads * hd] = the exact F32 values of n_heads consecutive
     * heads of a row of type t (any type). */
    void (*load_heads)(float *dst, const void *src, int32_t n_heads,
                       int32_t hd, tr_kv_type t);

    /* The g query heads of one KV head (grouped-query attention) against
     * the same K rows, so that each row is read and converted once:
     *   s[h * s_stride + j] = scale * dot(q + h * hd, k_j),  j < n, h < g,
     * k_j = k + j * stride bytes; max[h] = the largest of head h's s
     * (n >= 1). Each head's scores are bitwise those it gets alone
     * (g = 1): sharing a row changes no arithmetic. */
    void (*attn_scores)(float *s, size_t s_stride, float *max,
                        const float *q, int32_t g, const void *k,
                        size_t stride, int32_t n, int32_t hd, tr_kv_type t,
                        float scale);
    /* attn_scores for Q8 keys (backend.h) against quantized queries
     * (tr_cpu_kv_quantize_query: q + h * hd holds head h's levels, qd[h]
     * its step): with the integer dot i_j of head h and row j (exact in
     * int32), whose step is dk_j,
     *   s[h * s_stride + j] = ((float)i_j * dk_j) * (qd[h] * scale),
     * each conversion and product rounded to nearest, in that order, by
     * every kernel set: every set gives the same bits, however it cuts
     * the rows into calls. */
    void (*attn_scores_q8)(float *s, size_t s_stride, float *max,
                           const int16_t *q, const float *qd, int32_t g,
                           const void *k, size_t stride, int32_t n,
                           int32_t hd, float scale);
    /* s[j] = exp(s[j] - max) for j < n; returns their sum. */
    float (*attn_exp_sum)(float *s, int32_t n, float max);
    /* For the g heads of one KV head, against the same V rows:
     *   acc[h * acc_stride + d] += sum_j p[h * p_stride + j] * v_j[d],
     * j < n in order, v_j = v + j * stride bytes; bitwise as for g = 1. */
    void (*attn_accum)(float *acc, size_t acc_stride, const float *p,
                       size_t p_stride, int32_t g, const void *v,
                       size_t stride, int32_t n, int32_t hd, tr_kv_type t);
} cpu_op_kernels;

/* Quantizes one head of hd elements into backend.h's format t (Q8, Q4:
 * the one quantizer of every kernel set, so stored bytes never depend on
 * the CPU). dst: tr_kv_head_bytes(t, hd) bytes. */
void tr_cpu_kv_quantize_head(uint8_t *dst, const float *src, int32_t hd,
                             tr_kv_type t);
/* x[0..n) (n a multiple of block, a power of two) multiplied, block
 * elements at a time, by the orthonormal Walsh-Hadamard matrix of that
 * size (its own inverse): backend.h's tr_kv_rotation. One implementation
 * for every kernel set (stored keys and queries must agree). */
void tr_cpu_kv_rotate(float *x, int32_t n, int32_t block);
/* Levels of a quantized query: +-8191 (14 bits). Its rounding is 64
 * times finer than a Q8 key's, so it adds nothing measurable to the keys'
 * own error (8 bits cost Gemma 3's perplexity +0.4%), and the products
 * fit int16 x int16 instructions: |dot| <= 1024 * 127 * 8191 < 2^31. */
#define CPU_ATTN_Q_LEVELS 8191

/* Quantizes one query head of hd elements for attn_scores_q8: dst[i] =
 * round(src[i] * CPU_ATTN_Q_LEVELS / amax) (to nearest even, within
 * +-CPU_ATTN_Q_LEVELS; 0 for a NaN element); returns the step amax /
 * CPU_ATTN_Q_LEVELS. The one quantizer of every kernel set, as for
 * stored heads. */
float tr_cpu_kv_quantize_query(int16_t *dst, const float *src, int32_t hd);
/* Element d of a head of type t (exact), for the portable kernels. */
float tr_cpu_kv_elem(const uint8_t *head, int32_t d, int32_t hd, tr_kv_type t);

extern const cpu_op_kernels tr_cpu_op_kernels_portable;
extern const cpu_op_kernels tr_cpu_op_kernels_avx2; /* only if the CPU has it */
/* The AVX2 table with attn_scores_q8 on vpdpbusd (AVX512_VNNI + VL). */
extern const cpu_op_kernels tr_cpu_op_kernels_vnni;
void tr_cpu_attn_scores_q8_vnni(float *s, size_t s_stride, float *max,
                                const int16_t *q, const float *qd, int32_t g,
                                const void *k, size_t stride, int32_t n,
                                int32_t hd, float scale);

/* The portable entries, for AVX2 kernels that fall back on odd sizes. */
void tr_cpu_attn_scores_portable(float *s, size_t s_stride, float *max,
                                 const float *q, int32_t g, const void *k,
                                 size_t stride, int32_t n, int32_t hd,
                                 tr_kv_type t, float scale);
void tr_cpu_attn_scores_q8_portable(float *s, size_t s_stride, float *max,
                                    const int16_t *q, const float *qd,
                                    int32_t g, const void *k, size_t stride,
                                    int32_t n, int32_t hd, float scale);
void tr_cpu_attn_accum_portable(float *acc, size_t acc_stride, const float *p,
                                size_t p_stride, int32_t g, const void *v,
                                size_t stride, int32_t n, int32_t hd,
                                tr_kv_type t);
void tr_cpu_load_heads_portable(float *dst, const void *src, int32_t n_heads,
                                int32_t hd, tr_kv_type t);
void tr_cpu_rope_row_portable(float *x, int32_t n_heads, int32_t head_dim,
                           const float *cs);

/* Rope angle tables kept (two bases: Gemma 3's local and global layers). */
#define CPU_ROPE_TABLES 2

/* A rope angle table of a recent rope call, reused while the positions
 * stay the same (every layer of a forward pass, Q and K). */
typedef struct cpu_rope_cache {
    int32_t n; /* tokens; -1 when the table is not valid */
    int32_t head_dim;
    float base;
    float scale;
    uint64_t used; /* rope_clock at the last use (LRU) */
    void *pos;     /* int32_t [n]: the positions it was made for */
    size_t pos_cap;
    void *cs;      /* float [n][head_dim / 2][2]: cos, sin */
    size_t cs_cap;
} cpu_rope_cache;

/* The backend object. Scratch buffers are owned by it, grown on demand and
 * kept for the next op (their contents never outlive an op). */
typedef struct cpu_backend {
    tr_backend base;
    tr_stream stream0; /* the default stream */
    cpu_pool *pool;
    int n_threads;
    const char *kset; /* "portable", "avx2", "avx512vnni" (cpu.h) */
    bool avx2;        /* k is the AVX2 table */
    const cpu_op_kernels *k;
    const cpu_quant_kernels *qk;
    bool repack; /* prepare_matmul_weights copies matrices into r16 */

    void *act;        /* matmul: quantized activations */
    size_t act_cap;   /* bytes */
    void *attn;       /* attention: per-block partials of a split op */
    size_t attn_cap;  /* bytes */
    void *attn_q;     /* attention: queries rotated for rotated keys, or
                         quantized for Q8 keys */
    size_t attn_q_cap; /* bytes */
    void *rows;       /* matmul_rows: per-thread packed rows and outputs */
    size_t rows_cap;  /* bytes */
    cpu_rope_cache rope[CPU_ROPE_TABLES];
    uint64_t rope_clock;
} cpu_backend;

/* The backend a stream of it belongs to. */
static inline cpu_backend *cpu_of(tr_stream *s) { return (cpu_backend *)s->be; }

/* Grows *buf to at least `bytes` (64-byte aligned; contents not kept).
 * Returns false on allocation failure, leaving the old buffer. */
bool tr_cpu_scratch_reserve(void **buf, size_t *cap, size_t bytes);

/* Threads for an op of `work` units when a thread should get at least
 * `min_share` of them to be worth waking (1 .. the backend's threads). */
int tr_cpu_op_threads(const cpu_backend *c, int64_t work, int64_t min_share);

/* Rows [lo, hi) of n for thread ith of nth. */
void tr_cpu_share_rows(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi);

/* ---- op entry points (ops.c), the contracts are in kernels/backend.h ---- */
void tr_cpu_op_embed(tr_stream *s, float *out, const tr_weight *table,
                     const int32_t *ids, int32_t n);
void tr_cpu_op_rmsnorm(tr_stream *s, float *out, const float *x,
                       const float *w, int32_t n, int32_t dim, float eps);
/* tr_weight.layout of a matrix in quant_math_internal.h's r16 layout. */
#define TR_CPU_LAYOUT_R16 1

/* backend.h's prepare_matmul_weights (prepare.c). */
tr_status tr_cpu_prepare_matmul_weights(tr_backend *be, int32_t n,
                                        const tr_weight *const *w,
                                        tr_weight *out, void **owned,
                                        void (*copied)(void *ctx, int32_t i),
                                        void *ctx);

void tr_cpu_op_matmul(tr_stream *s, int32_t n_mats, float *const *out,
                      const tr_weight *const *w, const float *x, int32_t n,
                      bool accumulate);
void tr_cpu_op_rope(tr_stream *s, float *x, int32_t n, int32_t n_heads,
                    int32_t head_dim, const int32_t *pos, float freq_base);
void tr_cpu_op_kv_store(tr_stream *s, const tr_kv_layout *kv, int32_t layer,
                        const float *k, const float *v, const tr_batch *b);
void tr_cpu_op_attention(tr_stream *s, float *out, const float *q,
                         const tr_kv_layout *kv, int32_t layer,
                         const tr_batch *b, int32_t n_heads, float scale);
void tr_cpu_op_swiglu(tr_stream *s, float *out, const float *gate,
                      const float *up, int64_t n);
void tr_cpu_op_add(tr_stream *s, float *out, const float *x, int64_t n);
void tr_cpu_op_get_rows(tr_stream *s, float *out, const float *x, int32_t dim,
                        const int32_t *rows, int32_t n);
void tr_cpu_op_rope_neox(tr_stream *s, float *x, int32_t n, int32_t n_heads,
                         int32_t head_dim, const int32_t *pos, float freq_base,
                         float freq_scale);
void tr_cpu_op_geglu(tr_stream *s, float *out, const float *gate,
                     const float *up, int64_t n);
void tr_cpu_op_mul_cols(tr_stream *s, float *x, const float *w, int32_t n,
                        int32_t dim);
void tr_cpu_op_add_bias(tr_stream *s, float *x, const float *b, int32_t n,
                        int32_t dim);
/* ops_rows.c */
void tr_cpu_op_matmul_rows(tr_stream *s, float *out, const tr_weight *w,
                           const float *x, int32_t n, const int32_t *ids,
                           int32_t n_ids);
void tr_cpu_op_scale(tr_stream *s, float *x, float sc, int64_t n);
void tr_cpu_op_softcap(tr_stream *s, float *x, float cap, int64_t n);

#endif
