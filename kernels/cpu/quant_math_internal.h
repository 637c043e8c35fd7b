/* quant_math_internal.h — the CPU backend's quantized math: GGML weight blocks,
 * activations quantized on the fly, integer-dot matmul tiles, row
 * dequantization, and fp16/bf16 conversions.
 *
 * Layering: internal to kernels/cpu (the ops helper's matmul and embed ops
 * and the tests/benchmarks call it); depends on kernels/dtype.h only.
 *
 * How a matmul runs. For each weight type there is an activation format
 * (tr_cpu_quant_act_row_bytes / quantize_act_row): the caller quantizes each
 * token row of x once, then calls matmul_tile on disjoint row ranges from
 * any number of threads. Quantized weights are multiplied with integer dot
 * products, never dequantized to floats per call:
 *
 *   weight type            activation row ("A32" / "A256" / float)
 *   Q4_0 Q4_1 Q5_0 Q5_1    A32: per 32 values one float scale d, int8 q[32]
 *   Q8_0                        (|q| <= 127), int32 sum(q) and d * sum(q)
 *   Q4_K Q5_K Q6_K         A256: per 256 values a float scale, int8 q[256],
 *                               int16 sums of q per 16 and per 32
 *   F32 F16 BF16           float row, zero-padded to a multiple of 8
 *
 * Per 32- (or 256-) block b of a (weight row r, token t) pair, the kernels
 * compute the integer dot product of the block's quants exactly (int32),
 * then fold it into ONE float accumulator per (r, t), blocks in order:
 *
 *   Q4_0 Q5_0 Q8_0:  acc = fma(dw*dx, (float)(sum_i qw_i*qx_i - o*sum_i qx_i), acc)
 *                    (o = 8, 16, 0: the offset of the stored unsigned quant)
 *   Q4_1 Q5_1:       acc = acc + fma(dw*dx, (float)sum_i qw_i*qx_i, mw*sx)
 *                    (sx = dx*(float)sum_i qx_i, stored with the activation)
 *   Q4_K Q5_K:       acc = acc + fma(d*dx, (float)sum_s sc_s*dot_s,
 *                                    -((dmin*dx)*(float)sum_s m_s*xsum_s))
 *   Q6_K:            acc = fma(d*dx, (float)(sum_s sc_s*dot_s - 32*sum_s sc_s*xsum_s), acc)
 *
 * (each block adds one rounding step to the accumulator's dependency
 * chain, so the chain is never the bottleneck)
 * (dw, mw, d, dmin: the block's fp16 scales as floats; dx: the activation
 * block's scale; fma: one rounding, fmaf() in C.) Float weights use eight
 * lanes: lane j accumulates with fma the products of elements k = j mod 8,
 * k ascending (the row zero-padded to a multiple of 8), and the lanes are
 * summed as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
 *
 * DETERMINISM (a contract, tested): out[t][r] is a function of W row r and
 * x row t only, computed by exactly the arithmetic above. It is bitwise the
 * same whatever n_tok, whatever row range [r0, r1) contains r, wherever r
 * falls in a register tile, and on whichever thread. Since integer sums
 * are exact and every kernel set performs the same float operations in the
 * same order, the portable, AVX2 and AVX-512-VNNI sets give bitwise equal
 * results too (the C code uses fmaf; on an x86 CPU without FMA that is a
 * slow library call, but such CPUs also lack AVX2, so only the fallback
 * pays it). Activation quantization is bitwise equal across sets as well.
 *
 * Accuracy: vs. an exact (double) dot of the dequantized weights with the
 * UNquantized x, the error is dominated by activation quantization: at most
 * sum_b (d_b/2) * sum_{i in b} |w_i| (round-to-nearest of each x_i to a
 * multiple of the block scale d_b = amax_b/127), plus float accumulation
 * error of order 1e-6 * sum |w_i x_i|. Float weights: float rounding only.
 *
 * Non-finite activations (inf/NaN) give unspecified outputs but never
 * undefined behaviour or out-of-bounds accesses. Subnormal-only activation
 * blocks (max |x| < 1e-30) quantize to zero.
 *
 * Thread-safety: every function here is pure (no global state after
 * tr_cpu_quant_select's first call, which is itself thread-safe: it only reads
 * CPU features). Concurrent matmul_tile calls may share w and xq and must
 * write disjoint output elements.
 */
#ifndef TR_KERNELS_CPU_QUANT_H
#define TR_KERNELS_CPU_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/dtype.h"

/* Bytes of stack a matmul_tile call may use (the unpacked weights of one
 * row tile and its token tile's accumulators, ~32 KB); worker threads need
 * at least this much stack headroom. */
#define CPU_QUANT_STACK_BYTES (40 * 1024)

/* One kernel set. All members are required. Arguments are trusted (the
 * model checks shapes at load time); violating a precondition is a bug in
 * the caller, not a reported error. */
typedef struct cpu_quant_kernels {
    const char *name; /* "portable", "avx2" or "avx512vnni" */

    /* Quantizes one activation row x[cols] into dst, the format that
     * matmul_tile needs for weights of type wtype (see the table above).
     * dst must hold tr_cpu_quant_act_row_bytes(wtype, cols) bytes and be
     * 4-byte aligned (64 is fastest); the bytes past the format's end are
     * left as they were. Precondition: tr_cpu_quant_supported(wtype, cols). */
    void (*quantize_act_row)(tr_dtype wtype, const float *x, void *dst,
                             int64_t cols);

    /* For r in [r0, r1) and t < n_tok:
     *   out[t * out_stride + r]  = dot(W row r, x row t)   (accumulate false)
     *   out[t * out_stride + r] += dot(W row r, x row t)   (accumulate true)
     * W row r is `cols` elements of wtype at (char *)w + r * w_row_bytes;
     * x row t is a quantize_act_row result at (char *)xq + t * xq_stride
     * (xq and xq_stride multiples of 4). W rows may have any alignment.
     * Writes nothing else. out must not overlap w or xq. Preconditions:
     * tr_cpu_quant_supported(wtype, cols), 0 <= r0 <= r1, n_tok >= 0,
     * w_row_bytes >= the row's size, xq_stride >= act_row_bytes,
     * out_stride >= r1.
     * Cost model (for splitting work across threads): rows go in tiles of
     * 16 (8 for K-quants), a partial tile costing a whole one, so give each
     * thread a multiple of 16 rows; tokens go in tiles of 64 and every
     * weight byte is read and unpacked once per token tile, so split
     * prefill by rows, not tokens. While a row tile computes, the next 16
     * rows (even past r1) are prefetched, so a thread should walk its rows
     * upwards. The calling thread needs
     * CPU_QUANT_STACK_BYTES of stack. */
    void (*matmul_tile)(tr_dtype wtype, const void *w, size_t w_row_bytes,
                        int64_t cols, const void *xq, size_t xq_stride,
                        int n_tok, float *out, size_t out_stride, int64_t r0,
                        int64_t r1, bool accumulate);

    /* OPTIONAL (NULL in the portable set): matmul_tile over a matrix in
     * the 16-row interleaved layout (tr_cpu_repack16, below): w is the
     * repacked matrix, w_row_bytes its rows' size before repacking, r0 and
     * r1 multiples of 16. Otherwise matmul_tile's contract, with the same
     * results bit for bit (the same integer dots and float steps; only the
     * loads differ). */
    void (*matmul_tile_r16)(tr_dtype wtype, const void *w, size_t w_row_bytes,
                            int64_t cols, const void *xq, size_t xq_stride,
                            int n_tok, float *out, size_t out_stride,
                            int64_t r0, int64_t r1, bool accumulate);

    /* dst[n] = the n elements of a row of type `type` at src. Precondition:
     * tr_dtype_computable(type) and n a multiple of its block size. The
     * result is exact (each element is fp16 * small int (+ fp16 * int),
     * rounded once to float), so it is the same in every kernel set.
     * dst must not overlap src. */
    void (*dequantize_row)(tr_dtype type, const void *src, float *dst,
                           int64_t n);
} cpu_quant_kernels;

/* The kernel set to use: the fastest the CPU supports (AVX-512 VNNI with
 * 256-bit vectors, else AVX2+FMA+F16C, else portable C), or the portable
 * one when force_portable. Never NULL. */
const cpu_quant_kernels *tr_cpu_quant_select(bool force_portable);

/* A kernel set by name ("portable", "avx2", "avx512vnni"), or NULL if the
 * name is unknown or this CPU cannot run it. For tests and benchmarks. */
const cpu_quant_kernels *tr_cpu_quant_get(const char *name);

/* true if matmul_tile / quantize_act_row support weights of type wtype with
 * `cols` columns: wtype is F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q4_K, Q5_K or Q6_K, and cols is positive, a multiple of the block size
 * (32 or 256) and at most 2^24 (row byte counts stay far from overflow). */
bool tr_cpu_quant_supported(tr_dtype wtype, int64_t cols);

/* ---- the 16-row interleaved layout ("r16") ----
 * Why: a decode step multiplies each weight byte by one token, so the
 * GEMV's cost is its instructions per byte. Row-major blocks must be
 * transposed (8 rows' dwords into the 8 lanes of a vector) before the
 * lane-parallel integer dot; stored already transposed, a block of 16 rows
 * is a handful of aligned loads. Done once, when the model loads.
 * Layout: rows in groups of 16, each group's blocks in column order, one
 * chunk of 16 * type_size bytes per (group, block):
 *   body of rows 0-7:  dword j of row r's body at byte (8 j + r) * 4
 *   body of rows 8-15: the same, after it
 *   d of rows 0..15:   16 fp16 (row order)
 *   m of rows 0..15:   16 fp16 (Q4_1, Q5_1 only)
 * where a row's body is its block's bytes after d (and m): Q4_0, Q4_1 the
 * 16 quant bytes (4 dwords; chunks of 288, 320 bytes); Q5_0, Q5_1 qh then
 * the quants (5 dwords; 352, 384 bytes); Q8_0 32 quant bytes (8 dwords;
 * 544 bytes). A matrix keeps its byte size. Chunks are 32-byte aligned
 * when the matrix is. */

/* true if tr_cpu_repack16 takes a rows x cols matrix of type t: Q4_0, Q4_1,
 * Q5_0, Q5_1 or Q8_0, rows a positive multiple of 16,
 * tr_cpu_quant_supported. */
bool tr_cpu_repack16_supported(tr_dtype t, int64_t rows, int64_t cols);

/* dst (the matrix's byte size, 32-byte aligned) = src (row-major, GGUF's
 * layout) in the r16 layout. Precondition: tr_cpu_repack16_supported. */
void tr_cpu_repack16(tr_dtype t, const void *src, int64_t rows, int64_t cols,
                     void *dst);

/* dst = blocks [b0, b0 + n_blocks) of row `row` of the r16 matrix r16
 * (cols columns), as they were before repacking (GGUF's block bytes): the
 * way back, for ops that read single rows (embed, matmul_rows). */
void tr_cpu_r16_read_blocks(tr_dtype t, const void *r16, int64_t cols, int64_t row,
                            int64_t b0, int64_t n_blocks, void *dst);

/* Bytes of one quantized activation row for weights of type wtype, a
 * multiple of 64 (so consecutive rows of a 64-aligned buffer stay
 * aligned). 0 if !tr_cpu_quant_supported(wtype, cols). */
size_t tr_cpu_quant_act_row_bytes(tr_dtype wtype, int64_t cols);

/* ---- fp16 / bf16 (bit patterns in uint16_t) ----
 * fp16 -> fp32 and bf16 -> fp32 are exact (subnormals, inf, NaN kept).
 * fp32 -> fp16 and fp32 -> bf16 round to nearest even; overflow gives inf,
 * NaN stays NaN (quiet). Same results as F16C's vcvtph2ps / vcvtps2ph. */
static inline float cpu_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1fu) { /* inf / NaN */
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) { /* normal */
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) { /* zero */
        bits = sign;
    } else { /* subnormal: normalize */
        uint32_t e = 113u; /* exponent of 2^-14 in fp32 bias, +1 */
        while (!(man & 0x400u)) {
            man <<= 1;
            e--;
        }
        bits = sign | (e << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t cpu_fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: keep the top payload bits, force quiet */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: subnormal fp16 (or zero) */
        if (ax < 0x33000000u) return sign; /* < 2^-25: rounds to 0 */
        uint32_t e = ax >> 23;             /* 102..112 */
        uint32_t man = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t q = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    /* normal: rebias the exponent, round the mantissa to 10 bits */
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u); /* round half to even */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline float cpu_bf16_to_fp32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t cpu_fp32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet it */
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* Row conversions (portable loops; dst and src must not overlap). */
void tr_cpu_fp16_to_fp32_row(const uint16_t *src, float *dst, int64_t n);
void tr_cpu_fp32_to_fp16_row(const float *src, uint16_t *dst, int64_t n);
void tr_cpu_bf16_to_fp32_row(const uint16_t *src, float *dst, int64_t n);

#endif
