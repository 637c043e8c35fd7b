/* cuda_quant_internal.h — the device helpers the weight-reading kernels of
 * matmul.cu (32-blocks, float weights, embed) and matmul_k.cu (K-quants)
 * share: little-endian loads, the warp folds, the token tile's store, and
 * the exact dequantization of one element.
 *
 * Layering: internal to kernels/cuda; CUDA C++, included by .cu files
 * only. Everything here is `static` (docs/style.md: no global symbol
 * without the tr_ prefix). Block layouts: kernels/cpu/quant_internal.h.
 * GGML blocks are 2-byte aligned within a row (Q6_K's 210 bytes make odd
 * blocks only 2-aligned), so 32-bit words are read as two 16-bit halves.
 */
#ifndef TR_KERNELS_CUDA_CUDA_QUANT_INTERNAL_H
#define TR_KERNELS_CUDA_CUDA_QUANT_INTERNAL_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/cuda/cuda_internal.h"

/* Tokens per tile (each warp keeps one float per token) and warps per
 * block of the matmul kernels; kernels/cuda/README.md says why. */
static const int k_tok_tile = 8;
static const int k_rows_per_block = 4;

static __device__ __forceinline__ uint32_t ld16(const uint8_t *p) {
    return *(const uint16_t *)p;
}
static __device__ __forceinline__ uint32_t ld32(const uint8_t *p) { /* p 2-aligned */
    return ld16(p) | ld16(p + 2) << 16;
}
static __device__ __forceinline__ float ldh(const uint8_t *p) {
    return __half2float(__ushort_as_half((unsigned short)ld16(p)));
}

static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Folds each lane's per-token sums across the warp (a fixed butterfly)
 * and stores (or adds) them at out[t, r] for the tile's tn tokens. Every
 * lane of the warp must call it. */
static __device__ __forceinline__ void store_tile(float *out, int64_t out_stride, int64_t r,
                                                  int32_t t0, int tn,
                                                  const float (&acc)[k_tok_tile],
                                                  bool accumulate, int lane) {
#pragma unroll
    for (int i = 0; i < k_tok_tile; i++) {
        if (i >= tn) break;
        float v = warp_sum(acc[i]);
        if (lane == 0) {
            float *o = out + (int64_t)(t0 + i) * out_stride + r;
            *o = accumulate ? *o + v : v;
        }
    }
}

/* A32 activation rows (matmul.cu rounds them; every 32-block kernel reads
 * them): i8 q[nb * 32] | f32 d[nb] | f32 s[nb] (= d * sum) | i32 sum[nb]
 * for a row of nb 32-blocks, rows a multiple of 16 bytes apart. */
static __device__ __forceinline__ float a32_d(const uint8_t *row, int64_t nb, int64_t b) {
    return ((const float *)(row + nb * 32))[b];
}
static __device__ __forceinline__ float a32_s(const uint8_t *row, int64_t nb, int64_t b) {
    return ((const float *)(row + nb * 36))[b];
}
static __device__ __forceinline__ int32_t a32_sum(const uint8_t *row, int64_t nb, int64_t b) {
    return ((const int32_t *)(row + nb * 40))[b];
}

/* ---- 32-blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), shared by matmul.cu's
 * warp-per-row kernel and matmul_mma.cu's tensor-core kernel, which must
 * store the same bits: one decoder and one float step for both ---- */

/* A 32-bit word at p: whole when the caller knows p is 4-aligned (A4),
 * else as two 16-bit halves. */
template <bool A4>
static __device__ __forceinline__ uint32_t ldw(const uint8_t *p) {
    return A4 ? *(const uint32_t *)p : ld32(p);
}

template <int T>
static __device__ __forceinline__ constexpr int blk32_bytes() {
    return T == TR_DTYPE_Q4_0 ? 18 : T == TR_DTYPE_Q4_1 ? 20 : T == TR_DTYPE_Q5_0 ? 22
         : T == TR_DTYPE_Q5_1 ? 24 : 34;
}
template <int T>
static __device__ __forceinline__ constexpr bool blk32_has_min() {
    return T == TR_DTYPE_Q4_1 || T == TR_DTYPE_Q5_1;
}
template <int T>
static __device__ __forceinline__ constexpr int blk32_offset() { /* subtracted from each quant */
    return T == TR_DTYPE_Q4_0 ? 8 : T == TR_DTYPE_Q5_0 ? 16 : 0;
}

/* Elements 4t..4t+3 (lo) and 16+4t..16+4t+3 (hi) of the block at b as 4
 * int8 each, element order; for the 4-bit types the low and high nibbles
 * of one 32-bit word. A4: the block is 4-aligned (Q4_1's 20 and Q5_1's 24
 * bytes keep it so in a 4-aligned row), so words load whole. */
template <int T, bool A4>
static __device__ __forceinline__ void blk32_words(const uint8_t *b, int t, int &lo, int &hi) {
    if (T == TR_DTYPE_Q8_0) {
        lo = (int)ldw<A4>(b + 2 + 4 * t);
        hi = (int)ldw<A4>(b + 18 + 4 * t);
        return;
    }
    const bool five = T == TR_DTYPE_Q5_0 || T == TR_DTYPE_Q5_1;
    const int qs = (blk32_has_min<T>() ? 4 : 2) + (five ? 4 : 0);
    uint32_t v = ldw<A4>(b + qs + 4 * t), l = v & 0x0f0f0f0fu, h = (v >> 4) & 0x0f0f0f0fu;
    if (five) {
        uint32_t qh = ldw<A4>(b + (blk32_has_min<T>() ? 4 : 2));
#pragma unroll
        for (int e = 0; e < 4; e++) {
            l |= ((qh >> (4 * t + e)) & 1u) << (8 * e + 4);
            h |= ((qh >> (4 * t + e + 16)) & 1u) << (8 * e + 4);
        }
    }
    lo = (int)l;
    hi = (int)h;
}

/* The block's scale d and minimum m (0 for the types without one). */
template <int T, bool A4>
static __device__ __forceinline__ void blk32_scales(const uint8_t *b, float &d, float &m) {
    if (blk32_has_min<T>() && A4) {
        __half2 dm = *(const __half2 *)b;
        d = __low2float(dm);
        m = __high2float(dm);
        return;
    }
    d = ldh(b);
    m = blk32_has_min<T>() ? ldh(b + 2) : 0.0f;
}

/* One block's float step on its integer dot product with activation row
 * xr (the CPU's mm_a32, fmaf for fmaf). */
template <int T>
static __device__ __forceinline__ float blk32_step(float acc, float d, float m,
                                                   const uint8_t *xr, int64_t nb, int64_t b,
                                                   int dot) {
    float dx = a32_d(xr, nb, b);
    if (blk32_has_min<T>()) return acc + fmaf(d * dx, (float)dot, m * a32_s(xr, nb, b));
    dot -= blk32_offset<T>() * a32_sum(xr, nb, b);
    return fmaf(d * dx, (float)dot, acc);
}

/* The output row of the k-th row this launch computes. */
static __device__ __forceinline__ int64_t out_row(const int32_t *ids, int64_t k) {
    return ids ? ids[k] : k;
}

/* Q4_K / Q5_K: sub-block j's 6-bit scale and min from the 12 packed bytes
 * s (the CPU's cpu_q_kscale, the same bits). */
static __device__ __forceinline__ void kscale(const uint8_t *s, int j, int &sc, int &m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Element e (0..255) of one K-quant block, exactly as the CPU's deq_256:
 * Q4_K/Q5_K fmaf(d * sc, q, -(dmin * m)) (two exact products, one
 * rounding), Q6_K d * (sc * (q - 32)) (an exact integer, one rounding). */
static __device__ __forceinline__ float deq_k_elem(int type, const uint8_t *blk, int e) {
    if (type == TR_DTYPE_Q6_K) {
        int n = e / 128, qq = (e % 128) / 32, l = e % 32;
        int ql = blk[64 * n + 32 * (qq & 1) + l];
        int q = (qq >= 2 ? ql >> 4 : ql & 15) | ((blk[128 + 32 * n + l] >> (2 * qq)) & 3) << 4;
        int sc = (int8_t)blk[192 + e / 16];
        return ldh(blk + 208) * (float)(sc * (q - 32));
    }
    int s = e / 32, c = e / 64, l = e % 32, sc, m;
    kscale(blk + 4, s, sc, m);
    bool five = type == TR_DTYPE_Q5_K;
    int byte = blk[(five ? 48 : 16) + 32 * c + l];
    int q = s & 1 ? byte >> 4 : byte & 15;
    if (five) q |= ((blk[16 + l] >> s) & 1) << 4;
    return fmaf(ldh(blk) * (float)sc, (float)q, -(ldh(blk + 2) * (float)m));
}

#endif
