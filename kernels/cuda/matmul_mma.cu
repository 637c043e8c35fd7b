/* matmul_mma.cu — the 32-block matmul (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 on
 * A32 activations) on int8 tensor cores, storing bit for bit what
 * matmul.cu's warp-per-row kernel stores.
 *
 * Layering: kernels/cuda; matmul.cu picks this kernel by the number of
 * tokens (cuda_internal.h, tr_cuda_matmul_a32_mma). Block layouts:
 * kernels/cpu/quant_internal.h; activations: cuda_quant_internal.h.
 *
 * Why the outputs are the other kernel's bits: there, lane l of a row's
 * warp adds the float steps of blocks l, l + 32, l + 64, ... in that
 * order, and the warp folds the 32 lane sums by the butterfly 16, 8, 4,
 * 2, 1. Here warp l of a block of 32 warps does the same for blocks l,
 * l + 32, ... of a whole tile of rows and tokens, and the 32 warps fold
 * through shared memory in the butterfly's pairs. The block's integer dot
 * product comes from one mma.sync m16n8k32 (a k-step is exactly one
 * 32-block); integer sums are exact in any order, and the float step
 * applied to it is the other kernel's expression. So a row's output does
 * not depend on which kernel ran, nor on its batch (backend.h's
 * determinism), and the choice by token count is free.
 *
 * Geometry: a block of 32 warps computes 32 rows (two 16-row fragments)
 * by 8 * NT tokens; per k-step a warp loads its rows' block words straight
 * into the A fragment (a thread of group g, t: rows g and g + 8, elements
 * 4t..4t+3 and 16+4t..16+4t+3, which for the 4-bit types are the low and
 * high nibbles of one 32-bit word), the tokens' A32 words into B, and
 * keeps a float per (row, token) of its fragment in registers.
 */
#include <math.h>

#include "kernels/cuda/cuda_quant_internal.h"

enum { k_mma_warps = 32, k_mma_mf = 2 }; /* warps (= butterfly lanes); row fragments */

/* c = a (16 x 32, rows) . b (32 x 8, columns), int8 in, int32 out. */
static __device__ __forceinline__ void mma_s8(int (&c)[4], const int (&a)[4], int b0, int b1) {
    c[0] = c[1] = c[2] = c[3] = 0;
    __syncwarp(); /* the lanes' loads were conditional; .aligned wants them together */
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <int T, int NT>
static __global__ void __launch_bounds__(32 * k_mma_warps, 1)
    mma_a32_kernel(float *out, int64_t out_stride, const uint8_t *w, size_t w_row_bytes,
                   int64_t nb, const uint8_t *xq, size_t x_stride, int32_t n, int64_t n_rows,
                   const int32_t *ids, bool accumulate) {
    constexpr int MF = k_mma_mf, NACC = MF * NT * 4;
    __shared__ float fold[k_mma_warps / 2][NACC][32];
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t k0 = (int64_t)blockIdx.x * (16 * MF);
    const int32_t t0 = (int32_t)blockIdx.y * (8 * NT);
    /* the rows this thread loads and stores: fragment m, half h */
    const uint8_t *wr[MF][2];
#pragma unroll
    for (int m = 0; m < MF; m++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int64_t k = k0 + 16 * m + 8 * h + g;
            wr[m][h] = k < n_rows ? w + (size_t)out_row(ids, k) * w_row_bytes : NULL;
        }
    float acc[NACC]; /* (row fragment m, token fragment f, c element e) at (m * NT + f) * 4 + e */
#pragma unroll
    for (int i = 0; i < NACC; i++) acc[i] = 0.0f;
    for (int64_t b = wp; b < nb; b += k_mma_warps) {
        int a[MF][4];
        float d[MF][2], mn[MF][2];
#pragma unroll
        for (int m = 0; m < MF; m++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int lo = 0, hi = 0;
                d[m][h] = mn[m][h] = 0.0f;
                if (wr[m][h]) {
                    const uint8_t *blk = wr[m][h] + b * blk32_bytes<T>();
                    blk32_words<T, false>(blk, t, lo, hi);
                    blk32_scales<T, false>(blk, d[m][h], mn[m][h]);
                }
                a[m][h] = lo; /* a0: row g, a1: row g + 8; a2, a3 the high halves */
                a[m][2 + h] = hi;
            }
#pragma unroll
        for (int f = 0; f < NT; f++) {
            int b0 = 0, b1 = 0;
            const int32_t tb = t0 + 8 * f + g; /* the B column this thread loads */
            if (tb < n) {
                const int *q = (const int *)(xq + (size_t)tb * x_stride + b * 32);
                b0 = q[t];
                b1 = q[4 + t];
            }
#pragma unroll
            for (int m = 0; m < MF; m++) {
                int c[4];
                mma_s8(c, a[m], b0, b1);
#pragma unroll
                for (int e = 0; e < 4; e++) { /* c[e]: row g + 8 (e / 2), token 2t + e % 2 */
                    const int32_t tok = t0 + 8 * f + 2 * t + (e & 1);
                    if (tok >= n) continue;
                    const uint8_t *xr = xq + (size_t)tok * x_stride;
                    float &s = acc[(m * NT + f) * 4 + e];
                    s = blk32_step<T>(s, d[m][e >> 1], mn[m][e >> 1], xr, nb, b, c[e]);
                }
            }
        }
    }
    /* the butterfly across warps: warp l < o adds warp l + o's sums */
    for (int o = k_mma_warps / 2; o > 0; o /= 2) {
        if (wp >= o && wp < 2 * o) {
#pragma unroll
            for (int i = 0; i < NACC; i++) fold[wp - o][i][lane] = acc[i];
        }
        __syncthreads();
        if (wp < o) {
#pragma unroll
            for (int i = 0; i < NACC; i++) acc[i] = acc[i] + fold[wp][i][lane];
        }
        __syncthreads();
    }
    if (wp != 0) return;
#pragma unroll
    for (int m = 0; m < MF; m++)
#pragma unroll
        for (int f = 0; f < NT; f++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t k = k0 + 16 * m + 8 * (e >> 1) + g;
                const int32_t tok = t0 + 8 * f + 2 * t + (e & 1);
                if (k >= n_rows || tok >= n) continue;
                const float v = acc[(m * NT + f) * 4 + e];
                float *o = out + (int64_t)tok * out_stride + out_row(ids, k);
                *o = accumulate ? *o + v : v;
            }
}

bool tr_cuda_matmul_a32_mma(cuda_stream *cs, float *out, int64_t out_stride, const tr_weight *w,
                            size_t w_row_bytes, const uint8_t *xq, size_t x_stride, int32_t n,
                            int64_t n_rows, const int32_t *ids, bool accumulate) {
    const int nt = n <= 8 ? 1 : 2;
    const int64_t tiles = (n + 8 * nt - 1) / (8 * nt), row_tiles = (n_rows + 31) / 32;
    if (tiles > 65535 || row_tiles > 0x7fffffff) return false; /* the grid's limits */
    dim3 grid((unsigned)row_tiles, (unsigned)tiles), block(32 * k_mma_warps);
    const uint8_t *wd = (const uint8_t *)w->data;
    const int64_t nb = w->cols / 32;
    cudaStream_t st = cs->s;
#define MMA(T, NT)                                                                           \
    mma_a32_kernel<T, NT><<<grid, block, 0, st>>>(out, out_stride, wd, w_row_bytes, nb, xq, \
                                                  x_stride, n, n_rows, ids, accumulate)
#define BOTH(T)            \
    if (nt == 1) MMA(T, 1); \
    else MMA(T, 2);
    switch (w->type) {
    case TR_DTYPE_Q4_0: BOTH(TR_DTYPE_Q4_0); break;
    case TR_DTYPE_Q4_1: BOTH(TR_DTYPE_Q4_1); break;
    case TR_DTYPE_Q5_0: BOTH(TR_DTYPE_Q5_0); break;
    case TR_DTYPE_Q5_1: BOTH(TR_DTYPE_Q5_1); break;
    case TR_DTYPE_Q8_0: BOTH(TR_DTYPE_Q8_0); break;
    default: return false;
    }
#undef BOTH
#undef MMA
    tr_cuda_launched(cs, "matmul (tensor cores)");
    return true;
}
