/* matmul_k.cu — matmul and matmul_rows for the K-quant weights (Q4_K,
 * Q5_K, Q6_K: 256-element blocks, Gemma 3 Q4_K_M's types), and the
 * activations they multiply with.
 *
 * Layering: kernels/cuda; matmul.cu calls in (tr_cuda_a256_*,
 * tr_cuda_matmul_k). Block layouts: kernels/cpu/quant_internal.h.
 *
 * Arithmetic: the CPU's (kernels/cpu/quant_math_internal.h), block for
 * block. Activations are rounded to 8 bits per 256-block with the shared
 * rule (d = amax / 127, q = round-to-even(x * 127 / amax)); a block's
 * integer sums (sum_s sc_s * dot_s, and sum_s m_s * xsum_s or the Q6_K
 * offset term) are exact, so they equal the CPU's whatever the order; the
 * block's float step is the CPU's, operation for operation:
 *   Q4_K, Q5_K:  acc = acc + fmaf(d * dx, isum, -((dmin * dx) * imin))
 *   Q6_K:        acc = fmaf(d * dx, isum - 32 * corr, acc)
 * Only the order in which block results are added differs from the CPU
 * (four running sums per warp, folded at the end), which is within the
 * op test's quantized-matmul bound and depends on cols alone.
 *
 * Geometry: one warp per weight row and tile of up to 8 tokens, as the
 * 32-block kernels; the warp is four groups of 8 lanes, group g taking
 * blocks g, g + 4, ... of the row, lane j of a group the block's 32
 * elements 32j..32j+31 (a Q4_K/Q5_K sub-block, two Q6_K sub-blocks). So
 * each weight byte is read once per token tile, four consecutive blocks
 * (576-840 bytes) per step, and a 1024- or 2048-wide row (Gemma 3's
 * attn_output and ffn_down) keeps every lane busy, which one lane per
 * block would not (4 or 8 blocks a row). A group folds its integers with
 * three shuffles (exact), and its first lane does the float step. The
 * order of every float operation depends on cols only: batch invariance
 * (backend.h) holds, and matmul_rows is matmul bit for bit.
 */
#include <math.h>

#include "kernels/cuda/cuda_quant_internal.h"

/* ---- A256 activation rows: i8 q[nb*256] | f32 d[nb] | i32 s16[nb*16]
 * (the sum of q over each 16 values), `stride` bytes a row (a multiple of
 * 16, so every block's quants are 16-aligned) ---- */

size_t tr_cuda_a256_stride(int64_t cols) {
    int64_t nb = cols / 256;
    return (size_t)((nb * 324 + 15) / 16 * 16);
}

/* One warp per (token, 256-block); lane l holds elements 8l..8l+7. The
 * scale rule is the CPU's quant_block (and matmul.cu's 32-block one):
 * the same q and d bits. */
static __global__ void quantize_a256_kernel(uint8_t *dst, size_t stride, const float *x,
                                            int64_t cols, int64_t n_blocks_total) {
    const int64_t nb = cols / 256;
    const int lane = threadIdx.x & 31;
    for (int64_t g = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; g < n_blocks_total;
         g += ((int64_t)gridDim.x * blockDim.x) >> 5) {
        const int64_t t = g / nb, b = g % nb;
        const float *src = x + t * cols + b * 256 + 8 * lane;
        float v[8], amax = 0.0f;
        bool fin = true;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            v[i] = src[i];
            float a = fabsf(v[i]);
            fin = fin && a <= 3.402823466e38f;
            amax = fmaxf(amax, a);
        }
        bool finite = __all_sync(0xffffffffu, fin);
        for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        uint8_t *row = dst + (size_t)t * stride;
        bool zero = !finite || amax < 1e-30f;
        float id = zero ? 0.0f : 127.0f / amax;
        uint32_t w[2] = {0, 0};
        int sum = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int q = 0;
            if (!zero) {
                float r = rintf(v[i] * id);
                q = (int)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
            }
            sum += q;
            w[i / 4] |= (uint32_t)(uint8_t)(int8_t)q << (8 * (i % 4));
        }
        uint32_t *qd = (uint32_t *)(row + b * 256 + 8 * lane);
        qd[0] = w[0];
        qd[1] = w[1];
        int pair = sum + __shfl_xor_sync(0xffffffffu, sum, 1); /* 16 values: lanes 2k, 2k+1 */
        if ((lane & 1) == 0) ((int32_t *)(row + nb * 260))[b * 16 + lane / 2] = pair;
        if (lane == 0)
            ((float *)(row + nb * 256))[b] = finite ? (zero ? 0.0f : amax / 127.0f) : NAN;
    }
}

void tr_cuda_a256_quantize(cuda_stream *cs, uint8_t *dst, size_t stride, const float *x,
                           int32_t n, int64_t cols) {
    int64_t total = (int64_t)n * (cols / 256);
    int64_t blocks = (total * 32 + 255) / 256;
    quantize_a256_kernel<<<(unsigned)(blocks < 65535 * 8 ? blocks : 65535 * 8), 256, 0,
                           cs->s>>>(dst, stride, x, cols, total);
    tr_cuda_launched(cs, "matmul (activations, 256-blocks)");
}

/* ---- one lane's 32 weights of a block: 8 words of 4 unsigned quants in
 * element order, and the integer scales of its sub-block(s) ---- */

template <int T>
static __device__ __forceinline__ void klane_decode(const uint8_t *blk, int j, int (&q)[8],
                                                    int &sc0, int &sc1) {
    if (T == TR_DTYPE_Q6_K) {
        const int n = j / 4, qq = j % 4;
        const uint8_t *ql = blk + 64 * n + 32 * (qq & 1), *qh = blk + 128 + 32 * n;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            uint32_t v = ld32(ql + 4 * k);
            uint32_t lo = qq >= 2 ? (v >> 4) & 0x0f0f0f0fu : v & 0x0f0f0f0fu;
            q[k] = (int)(lo | ((ld32(qh + 4 * k) >> (2 * qq)) & 0x03030303u) << 4);
        }
        sc0 = (int8_t)blk[192 + 2 * j];
        sc1 = (int8_t)blk[193 + 2 * j];
        return;
    }
    const bool five = T == TR_DTYPE_Q5_K;
    const uint8_t *qs = blk + (five ? 48 : 16) + 32 * (j / 2);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        uint32_t v = ld32(qs + 4 * k);
        uint32_t w = j & 1 ? (v >> 4) & 0x0f0f0f0fu : v & 0x0f0f0f0fu;
        if (five) w |= ((ld32(blk + 16 + 4 * k) >> j) & 0x01010101u) << 4;
        q[k] = (int)w;
    }
    kscale(blk + 4, j, sc0, sc1); /* sc1: the sub-block's min */
}

/* Adds v over the 8 lanes of this lane's group (exact: integers). */
static __device__ __forceinline__ int group_sum(int v, unsigned mask) {
    v += __shfl_xor_sync(mask, v, 4);
    v += __shfl_xor_sync(mask, v, 2);
    v += __shfl_xor_sync(mask, v, 1);
    return v;
}

template <int T>
static __global__ void __launch_bounds__(32 * k_rows_per_block)
    matmul_k_kernel(float *out, int64_t out_stride, const uint8_t *w, size_t w_row_bytes,
                    int64_t cols, const uint8_t *xq, size_t x_stride, int32_t n, int64_t n_rows,
                    const int32_t *ids, bool accumulate) {
    const int lane = threadIdx.x & 31, grp = lane >> 3, j = lane & 7;
    const unsigned mask = 0xffu << (8 * grp);
    const int64_t k = (int64_t)blockIdx.x * k_rows_per_block + (threadIdx.x >> 5);
    if (k >= n_rows) return;
    const int64_t r = out_row(ids, k), nb = cols / 256;
    const int32_t t0 = blockIdx.y * k_tok_tile;
    const int tn = n - t0 < k_tok_tile ? n - t0 : k_tok_tile;
    const size_t tsz = T == TR_DTYPE_Q4_K ? 144 : T == TR_DTYPE_Q5_K ? 176 : 210;
    const uint8_t *wr = w + (size_t)r * w_row_bytes;
    float acc[k_tok_tile];
#pragma unroll
    for (int i = 0; i < k_tok_tile; i++) acc[i] = 0.0f;
    int q[8], sc0, sc1;
    for (int64_t b = grp; b < nb; b += 4) {
        const uint8_t *blk = wr + b * tsz;
        klane_decode<T>(blk, j, q, sc0, sc1);
#pragma unroll
        for (int i = 0; i < k_tok_tile; i++) {
            if (i >= tn) break;
            const uint8_t *xr = xq + (size_t)(t0 + i) * x_stride;
            const int4 *xv = (const int4 *)(xr + b * 256 + 32 * j);
            const int32_t *s16 = (const int32_t *)(xr + nb * 260) + b * 16 + 2 * j;
            int4 a0 = xv[0], a1 = xv[1];
            int d0 = 0, d1 = 0;
            d0 = __dp4a(q[0], a0.x, d0);
            d0 = __dp4a(q[1], a0.y, d0);
            d0 = __dp4a(q[2], a0.z, d0);
            d0 = __dp4a(q[3], a0.w, d0);
            d1 = __dp4a(q[4], a1.x, d1);
            d1 = __dp4a(q[5], a1.y, d1);
            d1 = __dp4a(q[6], a1.z, d1);
            d1 = __dp4a(q[7], a1.w, d1);
            const float dx = ((const float *)(xr + nb * 256))[b];
            if (T == TR_DTYPE_Q6_K) {
                /* two 16-value sub-blocks; the -32 offset through the
                 * activation sums, as the CPU */
                int isum = group_sum(sc0 * d0 + sc1 * d1 - 32 * (sc0 * s16[0] + sc1 * s16[1]),
                                     mask);
                if (j == 0) acc[i] = fmaf(ldh(blk + 208) * dx, (float)isum, acc[i]);
            } else {
                int isum = group_sum(sc0 * (d0 + d1), mask);
                int imin = group_sum(sc1 * (s16[0] + s16[1]), mask);
                if (j == 0) {
                    float mn = (ldh(blk + 2) * dx) * (float)imin;
                    acc[i] = acc[i] + fmaf(ldh(blk) * dx, (float)isum, -mn);
                }
            }
        }
    }
    store_tile(out, out_stride, r, t0, tn, acc, accumulate, lane);
}

bool tr_cuda_is_k(tr_dtype t) {
    return t == TR_DTYPE_Q4_K || t == TR_DTYPE_Q5_K || t == TR_DTYPE_Q6_K;
}

void tr_cuda_matmul_k(cuda_stream *cs, float *out, int64_t out_stride, const tr_weight *w,
                      const uint8_t *xq, size_t xq_stride, int32_t n, int64_t n_rows,
                      const int32_t *ids, bool accumulate) {
    uint64_t rb = 0;
    tr_dtype_row_bytes(w->type, (uint64_t)w->cols, &rb);
    const uint8_t *wd = (const uint8_t *)w->data;
    dim3 grid((unsigned)((n_rows + k_rows_per_block - 1) / k_rows_per_block),
              (unsigned)((n + k_tok_tile - 1) / k_tok_tile));
    dim3 block(32 * k_rows_per_block);
#define K_(T)                                                                             \
    matmul_k_kernel<T><<<grid, block, 0, cs->s>>>(out, out_stride, wd, (size_t)rb, w->cols, \
                                                  xq, xq_stride, n, n_rows, ids, accumulate)
    switch (w->type) {
    case TR_DTYPE_Q4_K: K_(TR_DTYPE_Q4_K); break;
    case TR_DTYPE_Q5_K: K_(TR_DTYPE_Q5_K); break;
    case TR_DTYPE_Q6_K: K_(TR_DTYPE_Q6_K); break;
    default:
        tr_cuda_check(tr_cuda_backend_of(&cs->base), cudaErrorInvalidValue,
                      "matmul (not a K-quant)");
        return;
    }
#undef K_
    tr_cuda_launched(cs, "matmul (K-quants)");
}
