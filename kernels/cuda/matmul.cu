/* matmul.cu — the CUDA backend's ops that read weights: matmul,
 * matmul_rows and embed, with weights in their GGUF types on the device.
 *
 * Layering: kernels/cuda; the table is in cuda_backend.cu. Block layouts:
 * kernels/cpu/quant_internal.h (the GGML formats; all 2-byte aligned
 * within a row, so 32-bit words are read as two 16-bit halves).
 *
 * Weight types: F32, F16, BF16 (float activations) and the 32-blocks
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (activations rounded to 8 bits per
 * 32-block with the CPU's rule: d = amax / 127, q = round-to-even(x *
 * 127 / amax), the block's integer sum kept; so the integer dot products
 * equal the CPU's and the per-block float steps are the CPU's mm_a32,
 * fmaf for fmaf). The K-quants (Q4_K, Q5_K, Q6_K) have their own kernel
 * and 256-block activations in matmul_k.cu; this file rounds x once for
 * every matrix of a call, in each form the call's weights need, and
 * dispatches. embed dequantizes every type exactly as the CPU's
 * dequantize_row (the same bits).
 *
 * Geometry, first version (kernels/cuda/README.md): one warp per weight
 * row and tile of up to 8 tokens; lane l takes blocks l, l + 32, ... of
 * the row (float weights: elements), so a warp reads a row's bytes once
 * per token tile, coalesced; each lane keeps one float sum per token and
 * the warp folds them with a fixed butterfly. The order of every sum
 * depends on cols only: a row's output is the same alone or in any batch
 * (backend.h's determinism). The same kernels serve matmul_rows (rows
 * given by index), so its outputs are matmul's bit for bit. Not yet: a
 * tensor-core path for prefill (many tokens re-read each row from L2
 * here); cuBLAS GEMMs are not used because their kernel choice, and so
 * their summation order, changes with the number of tokens, which the
 * determinism contract forbids.
 */
#include <math.h>
#include <string.h>

#include "kernels/cuda/cuda_quant_internal.h"

/* ---- one 32-block decoded: 32 quants as 8 words of 4 int8 (element
 * order) and the scales (cuda_quant_internal.h's decoder) ---- */

struct blk32 {
    int q[8];
    float d, m;
};

template <int T, bool A4>
static __device__ __forceinline__ void blk32_decode(const uint8_t *b, blk32 &o) {
#pragma unroll
    for (int k = 0; k < 4; k++) blk32_words<T, A4>(b, k, o.q[k], o.q[k + 4]);
    blk32_scales<T, A4>(b, o.d, o.m);
}

/* ---- activations, A32 rows (cuda_quant_internal.h's layout) ---- */

static size_t a32_stride(int64_t cols) {
    int64_t nb = cols / 32;
    return (size_t)((nb * 44 + 15) / 16 * 16);
}

/* One warp per (token, 32-block); lane l holds element l. */
static __global__ void quantize_a32_kernel(uint8_t *dst, size_t stride, const float *x, int64_t cols,
                                    int64_t n_blocks_total) {
    int64_t nb = cols / 32;
    int lane = threadIdx.x & 31;
    for (int64_t g = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; g < n_blocks_total;
         g += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        int64_t t = g / nb, b = g % nb;
        float v = x[t * cols + b * 32 + lane], a = fabsf(v);
        bool finite = __all_sync(0xffffffffu, a <= 3.402823466e38f);
        float amax = a;
        for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        uint8_t *row = dst + (size_t)t * stride;
        int q = 0;
        float d;
        if (!finite || amax < 1e-30f) {
            d = finite ? 0.0f : NAN;
        } else {
            float id = 127.0f / amax, r = rintf(v * id);
            q = (int)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
            d = amax / 127.0f;
        }
        row[b * 32 + lane] = (uint8_t)(int8_t)q;
        int sum = q;
        for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) {
            ((float *)(row + nb * 32))[b] = d;
            ((float *)(row + nb * 36))[b] = d * (float)sum;
            ((int32_t *)(row + nb * 40))[b] = sum;
        }
    }
}

template <int T, bool A4>
static __global__ void __launch_bounds__(32 * k_rows_per_block)
    matmul_a32_kernel(float *out, int64_t out_stride, const uint8_t *w, size_t w_row_bytes,
                      int64_t cols, const uint8_t *xq, size_t x_stride, int32_t n,
                      int64_t n_rows, const int32_t *ids, bool accumulate) {
    const int lane = threadIdx.x & 31;
    const int64_t k = (int64_t)blockIdx.x * k_rows_per_block + (threadIdx.x >> 5);
    if (k >= n_rows) return;
    const int64_t r = out_row(ids, k), nb = cols / 32;
    const int32_t t0 = blockIdx.y * k_tok_tile;
    const int tn = n - t0 < k_tok_tile ? n - t0 : k_tok_tile;
    const uint8_t *wr = w + (size_t)r * w_row_bytes;
    float acc[k_tok_tile];
#pragma unroll
    for (int i = 0; i < k_tok_tile; i++) acc[i] = 0.0f;
    blk32 blk;
    for (int64_t b = lane; b < nb; b += 32) {
        blk32_decode<T, A4>(wr + b * blk32_bytes<T>(), blk);
#pragma unroll
        for (int i = 0; i < k_tok_tile; i++) {
            if (i >= tn) break;
            const uint8_t *xr = xq + (size_t)(t0 + i) * x_stride;
            const int4 *xv = (const int4 *)(xr + b * 32);
            int4 a0 = xv[0], a1 = xv[1];
            int dot = 0;
            dot = __dp4a(blk.q[0], a0.x, dot);
            dot = __dp4a(blk.q[1], a0.y, dot);
            dot = __dp4a(blk.q[2], a0.z, dot);
            dot = __dp4a(blk.q[3], a0.w, dot);
            dot = __dp4a(blk.q[4], a1.x, dot);
            dot = __dp4a(blk.q[5], a1.y, dot);
            dot = __dp4a(blk.q[6], a1.z, dot);
            dot = __dp4a(blk.q[7], a1.w, dot);
            acc[i] = blk32_step<T>(acc[i], blk.d, blk.m, xr, nb, b, dot);
        }
    }
    store_tile(out, out_stride, r, t0, tn, acc, accumulate, lane);
}

template <int T>
static __device__ __forceinline__ float wfloat(const uint8_t *row, int64_t e) {
    if (T == TR_DTYPE_F32) return ((const float *)row)[e];
    if (T == TR_DTYPE_F16) return __half2float(((const __half *)row)[e]);
    return __uint_as_float((uint32_t)((const uint16_t *)row)[e] << 16); /* BF16 */
}

template <int T>
static __global__ void __launch_bounds__(32 * k_rows_per_block)
    matmul_float_kernel(float *out, int64_t out_stride, const uint8_t *w, size_t w_row_bytes,
                        int64_t cols, const float *x, int32_t n, int64_t n_rows,
                        const int32_t *ids, bool accumulate) {
    const int lane = threadIdx.x & 31;
    const int64_t k = (int64_t)blockIdx.x * k_rows_per_block + (threadIdx.x >> 5);
    if (k >= n_rows) return;
    const int64_t r = out_row(ids, k);
    const int32_t t0 = blockIdx.y * k_tok_tile;
    const int tn = n - t0 < k_tok_tile ? n - t0 : k_tok_tile;
    const uint8_t *wr = w + (size_t)r * w_row_bytes;
    float acc[k_tok_tile];
#pragma unroll
    for (int i = 0; i < k_tok_tile; i++) acc[i] = 0.0f;
    for (int64_t e = lane; e < cols; e += 32) {
        float wv = wfloat<T>(wr, e);
#pragma unroll
        for (int i = 0; i < k_tok_tile; i++) {
            if (i >= tn) break;
            acc[i] = fmaf(wv, x[(int64_t)(t0 + i) * cols + e], acc[i]);
        }
    }
    store_tile(out, out_stride, r, t0, tn, acc, accumulate, lane);
}

static bool is_a32(tr_dtype t) {
    return t == TR_DTYPE_Q4_0 || t == TR_DTYPE_Q4_1 || t == TR_DTYPE_Q5_0 ||
           t == TR_DTYPE_Q5_1 || t == TR_DTYPE_Q8_0;
}

/* x[n, cols] in the forms the weights of one call multiply with: as it
 * is (float weights), A32 rows (32-block types), A256 rows (K-quants). */
typedef struct acts {
    const float *x;
    const uint8_t *a32, *a256;
    size_t s32, s256; /* row strides */
} acts;

/* One weight matrix (rows given by ids, device, or all of them) on the
 * prepared activations. */
static void launch_one(cuda_stream *cs, float *out, int64_t out_stride, const tr_weight *w,
                       const acts *a, int32_t n, int64_t n_rows, const int32_t *ids,
                       bool accumulate) {
    if (tr_cuda_is_k(w->type)) {
        tr_cuda_matmul_k(cs, out, out_stride, w, a->a256, a->s256, n, n_rows, ids, accumulate);
        return;
    }
    const float *x = a->x;
    const uint8_t *xq = a->a32;
    const size_t xq_stride = a->s32;
    uint64_t rb = 0;
    tr_dtype_row_bytes(w->type, (uint64_t)w->cols, &rb);
    const int32_t mma_min = tr_cuda_backend_of(&cs->base)->mma_min_tokens;
    if (is_a32(w->type) && mma_min > 0 && n >= mma_min &&
        tr_cuda_matmul_a32_mma(cs, out, out_stride, w, (size_t)rb, xq, xq_stride, n, n_rows, ids,
                               accumulate))
        return;
    const uint8_t *wd = (const uint8_t *)w->data;
    dim3 grid((unsigned)((n_rows + k_rows_per_block - 1) / k_rows_per_block),
              (unsigned)((n + k_tok_tile - 1) / k_tok_tile));
    dim3 block(32 * k_rows_per_block);
    cudaStream_t st = cs->s;
    /* every block of a 4-aligned matrix with 4-aligned rows is 4-aligned
     * (Q4_1, Q5_1: 20 and 24 bytes) */
    const bool a4 = ((uintptr_t)wd | (uintptr_t)rb) % 4 == 0;
#define A32(T, A4)                                                                      \
    matmul_a32_kernel<T, A4><<<grid, block, 0, st>>>(out, out_stride, wd, (size_t)rb,      \
                                                     w->cols, xq, xq_stride, n, n_rows, ids, \
                                                     accumulate)
#define FLT(T)                                                                                \
    matmul_float_kernel<T><<<grid, block, 0, st>>>(out, out_stride, wd, (size_t)rb, w->cols, \
                                                   x, n, n_rows, ids, accumulate)
    switch (w->type) {
    case TR_DTYPE_Q4_0: A32(TR_DTYPE_Q4_0, false); break;
    case TR_DTYPE_Q4_1:
        if (a4) A32(TR_DTYPE_Q4_1, true);
        else A32(TR_DTYPE_Q4_1, false);
        break;
    case TR_DTYPE_Q5_0: A32(TR_DTYPE_Q5_0, false); break;
    case TR_DTYPE_Q5_1:
        if (a4) A32(TR_DTYPE_Q5_1, true);
        else A32(TR_DTYPE_Q5_1, false);
        break;
    case TR_DTYPE_Q8_0: A32(TR_DTYPE_Q8_0, false); break;
    case TR_DTYPE_F32: FLT(TR_DTYPE_F32); break;
    case TR_DTYPE_F16: FLT(TR_DTYPE_F16); break;
    case TR_DTYPE_BF16: FLT(TR_DTYPE_BF16); break;
    default:
        /* supports() said no: the model never gets here */
        tr_cuda_check(tr_cuda_backend_of(&cs->base), cudaErrorInvalidValue,
                      "matmul (weight type not supported)");
        return;
    }
#undef A32
#undef FLT
    tr_cuda_launched(cs, "matmul");
}

/* Rounds x[n, cols] once for every weight of the call (w[0..n_mats)):
 * A32 rows if one is a 32-block type, A256 rows if one is a K-quant,
 * both in one piece of s's scratch. false (fault set) on failure. */
static bool prepare_acts(cuda_stream *cs, const float *x, int32_t n, int64_t cols,
                         int32_t n_mats, const tr_weight *const *w, acts *a) {
    bool need32 = false, need256 = false;
    for (int32_t i = 0; i < n_mats; i++) {
        need32 = need32 || is_a32(w[i]->type);
        need256 = need256 || tr_cuda_is_k(w[i]->type);
    }
    a->x = x;
    a->a32 = a->a256 = NULL;
    a->s32 = need32 ? a32_stride(cols) : 0;
    a->s256 = need256 ? tr_cuda_a256_stride(cols) : 0;
    size_t b32 = a->s32 * (size_t)n, b256 = a->s256 * (size_t)n;
    if (!need32 && !need256) return true;
    uint8_t *xq = (uint8_t *)tr_cuda_scratch(cs, b32 + b256);
    if (!xq) return false;
    if (need32) {
        int64_t total = (int64_t)n * (cols / 32);
        int64_t blocks = (total * 32 + 255) / 256;
        quantize_a32_kernel<<<(unsigned)(blocks < 65535 * 8 ? blocks : 65535 * 8), 256, 0,
                              cs->s>>>(xq, a->s32, x, cols, total);
        tr_cuda_launched(cs, "matmul (activations)");
        a->a32 = xq;
    }
    if (need256) { /* b32 is a multiple of 16: the rows stay 16-aligned */
        tr_cuda_a256_quantize(cs, xq + b32, a->s256, x, n, cols);
        a->a256 = xq + b32;
    }
    return true;
}

/* ---- embed: one block per token ---- */

static __device__ float deq_elem(int type, const uint8_t *row, int64_t e) {
    switch (type) {
    case TR_DTYPE_F32: return ((const float *)row)[e];
    case TR_DTYPE_F16: return __half2float(((const __half *)row)[e]);
    case TR_DTYPE_BF16: return __uint_as_float((uint32_t)((const uint16_t *)row)[e] << 16);
    case TR_DTYPE_Q4_K: return deq_k_elem(type, row + e / 256 * 144, (int)(e % 256));
    case TR_DTYPE_Q5_K: return deq_k_elem(type, row + e / 256 * 176, (int)(e % 256));
    case TR_DTYPE_Q6_K: return deq_k_elem(type, row + e / 256 * 210, (int)(e % 256));
    default: break;
    }
    int64_t b = e / 32;
    int j = (int)(e % 32), lo = j < 16, jj = j & 15;
    if (type == TR_DTYPE_Q8_0) {
        const uint8_t *blk = row + b * 34;
        return ldh(blk) * (float)(int8_t)blk[2 + j];
    }
    if (type == TR_DTYPE_Q4_0 || type == TR_DTYPE_Q4_1) {
        bool one = type == TR_DTYPE_Q4_1;
        const uint8_t *blk = row + b * (one ? 20 : 18);
        uint8_t byte = blk[(one ? 4 : 2) + jj];
        int q = lo ? byte & 15 : byte >> 4;
        return one ? fmaf(ldh(blk), (float)q, ldh(blk + 2)) : ldh(blk) * (float)(q - 8);
    }
    /* Q5_0, Q5_1 */
    bool one = type == TR_DTYPE_Q5_1;
    const uint8_t *blk = row + b * (one ? 24 : 22);
    uint32_t qh = ld32(blk + (one ? 4 : 2));
    uint8_t byte = blk[(one ? 8 : 6) + jj];
    int q = (lo ? byte & 15 : byte >> 4) | (int)((qh >> j) & 1u) << 4;
    return one ? fmaf(ldh(blk), (float)q, ldh(blk + 2)) : ldh(blk) * (float)(q - 16);
}

static __global__ void embed_kernel(float *out, const uint8_t *table, size_t row_bytes, int type,
                             int64_t vocab, int64_t dim, const int32_t *ids) {
    int32_t id = ids[blockIdx.x];
    float *dst = out + (int64_t)blockIdx.x * dim;
    const uint8_t *row = table + (size_t)id * row_bytes;
    bool ok = id >= 0 && id < vocab;
    for (int64_t e = threadIdx.x; e < dim; e += blockDim.x)
        dst[e] = ok ? deq_elem(type, row, e) : 0.0f;
}


bool tr_cuda_weight_type_ok(tr_dtype t) {
    return is_a32(t) || tr_cuda_is_k(t) || t == TR_DTYPE_F32 || t == TR_DTYPE_F16 ||
           t == TR_DTYPE_BF16;
}

void tr_cuda_op_matmul(tr_stream *s, int32_t n_mats, float *const *out,
                       const tr_weight *const *w, const float *x, int32_t n,
                       bool accumulate) {
    cuda_stream *cs = tr_cuda_stream_of(s);
    if (n <= 0 || n_mats <= 0 || !tr_cuda_enter(tr_cuda_backend_of(s))) return;
    acts a; /* x rounded once for them all */
    if (!prepare_acts(cs, x, n, w[0]->cols, n_mats, w, &a)) return;
    for (int32_t i = 0; i < n_mats; i++)
        launch_one(cs, out[i], w[i]->rows, w[i], &a, n, w[i]->rows, NULL, accumulate);
}

void tr_cuda_op_matmul_rows(tr_stream *s, float *out, const tr_weight *w, const float *x,
                            int32_t n, const int32_t *ids, int32_t n_ids) {
    cuda_stream *cs = tr_cuda_stream_of(s);
    if (n <= 0 || n_ids <= 0 || !tr_cuda_enter(tr_cuda_backend_of(s))) return;
    const int32_t *dids =
        (const int32_t *)tr_cuda_stage(cs, ids, sizeof(int32_t) * (size_t)n_ids);
    if (!dids) return;
    acts a;
    if (!prepare_acts(cs, x, n, w->cols, 1, &w, &a)) return;
    launch_one(cs, out, w->rows, w, &a, n, n_ids, dids, false);
}

void tr_cuda_op_embed(tr_stream *s, float *out, const tr_weight *table, const int32_t *ids,
                      int32_t n) {
    cuda_stream *cs = tr_cuda_stream_of(s);
    if (n <= 0 || !tr_cuda_enter(tr_cuda_backend_of(s))) return;
    const int32_t *dids = (const int32_t *)tr_cuda_stage(cs, ids, sizeof(int32_t) * (size_t)n);
    if (!dids) return;
    uint64_t rb = 0;
    tr_dtype_row_bytes(table->type, (uint64_t)table->cols, &rb);
    embed_kernel<<<(unsigned)n, 256, 0, cs->s>>>(out, (const uint8_t *)table->data, (size_t)rb,
                                                 (int)table->type, table->rows, table->cols,
                                                 dids);
    tr_cuda_launched(cs, "embed");
}
