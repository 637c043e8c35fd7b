/* quant_internal.h — what the kernel sets of quant_*.c share: the GGML
 * block layouts (byte offsets), the activation row layouts, and the few
 * scalar helpers whose results must be bitwise the same in every set.
 *
 * Layering: internal to kernels/cpu/quant_*.c; nothing else includes it.
 *
 * GGML weight blocks (little-endian; "h" = fp16):
 *   Q4_0  18 B: h d | u8 qs[16]         x[j] = d*(lo(qs[j]) - 8), x[j+16] = d*(hi(qs[j]) - 8)
 *   Q4_1  20 B: h d, h m | u8 qs[16]    x = d*q + m (q as Q4_0, unsigned)
 *   Q5_0  22 B: h d | u32 qh | qs[16]   q = nibble | bit j of qh << 4, x = d*(q - 16)
 *   Q5_1  24 B: h d, h m | u32 qh | qs[16]   x = d*q + m
 *   Q8_0  34 B: h d | i8 qs[32]         x = d*q
 *   Q4_K 144 B: h d, h dmin | scales[12] | qs[128]
 *               64-chunk c: lo(qs[32c+l]) -> x[64c+l] (sub-block 2c),
 *               hi -> x[64c+32+l] (sub-block 2c+1); 6-bit sc/m per
 *               sub-block (cpu_q_kscale); x = d*sc*q - dmin*m
 *   Q5_K 176 B: h d, h dmin | scales[12] | qh[32] | qs[128]
 *               as Q4_K, plus bit 2c (lo) / 2c+1 (hi) of qh[l] << 4
 *   Q6_K 210 B: ql[128] | qh[64] | i8 scales[16] | h d
 *               half n (128 values): ql' = ql+64n, qh' = qh+32n, l < 32:
 *               x[128n+l]    = lo(ql'[l])    | ((qh'[l]>>0)&3)<<4
 *               x[128n+l+32] = lo(ql'[l+32]) | ((qh'[l]>>2)&3)<<4
 *               x[128n+l+64] = hi(ql'[l])    | ((qh'[l]>>4)&3)<<4
 *               x[128n+l+96] = hi(ql'[l+32]) | ((qh'[l]>>6)&3)<<4
 *               value = d * scales[e/16] * (q - 32) for element e
 *
 * Activation rows (one row of `cols` values; nb = number of blocks):
 *   A32:   i8 q[nb*32] | f32 d[nb] | f32 s[nb] (= d*sum) | i32 sum[nb]
 *   A256:  i8 q[nb*256] | f32 d[nb] | i16 bsum16[nb*16] | i16 bsum32[nb*8]
 *   float: f32 x[round_up(cols, 8)], the padding zero
 * each rounded up to a multiple of 64 bytes. Quants come first so that a
 * 64-aligned row keeps its blocks 32-aligned.
 */
#ifndef TR_KERNELS_CPU_QUANT_INTERNAL_H
#define TR_KERNELS_CPU_QUANT_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/quant_math_internal.h"

/* Which activation format a weight type multiplies with. */
typedef enum cpu_act_kind {
    CPU_ACT_NONE = 0,
    CPU_ACT_A32,
    CPU_ACT_A256,
    CPU_ACT_FLOAT,
} cpu_act_kind;

static inline cpu_act_kind cpu_q_act_kind(tr_dtype t) {
    switch (t) {
    case TR_DTYPE_Q4_0:
    case TR_DTYPE_Q4_1:
    case TR_DTYPE_Q5_0:
    case TR_DTYPE_Q5_1:
    case TR_DTYPE_Q8_0:
        return CPU_ACT_A32;
    case TR_DTYPE_Q4_K:
    case TR_DTYPE_Q5_K:
    case TR_DTYPE_Q6_K:
        return CPU_ACT_A256;
    case TR_DTYPE_F32:
    case TR_DTYPE_F16:
    case TR_DTYPE_BF16:
        return CPU_ACT_FLOAT;
    default:
        return CPU_ACT_NONE;
    }
}

/* The 32-blocks that store a minimum m after d (x = d*q + m). */
static inline bool cpu_q_has_min(tr_dtype t) {
    return t == TR_DTYPE_Q4_1 || t == TR_DTYPE_Q5_1;
}

/* ---- the r16 layout (quant_math_internal.h): offsets in a chunk ---- */
/* Body dwords per row of a block: 4 (Q4_0, Q4_1), 5 (Q5_0, Q5_1: qh, then
 * the quants) or 8 (Q8_0). */
static inline size_t cpu_r16_nd(tr_dtype t) {
    return t == TR_DTYPE_Q8_0 ? 8 : t == TR_DTYPE_Q5_0 || t == TR_DTYPE_Q5_1 ? 5 : 4;
}
/* Dword j of row r's body (r < 16). */
static inline size_t cpu_r16_body_off(size_t nd, size_t r, size_t j) {
    return (r / 8) * nd * 32 + (8 * j + r % 8) * 4;
}
/* The 16 fp16 d (then, with a minimum, the 16 m) after both bodies. */
static inline size_t cpu_r16_scales_off(size_t nd) { return 64 * nd; }

/* ---- activation row accessors (row = start of one quantized row) ---- */
static inline const int8_t *cpu_a32_q(const void *row) {
    return (const int8_t *)row;
}
static inline const float *cpu_a32_d(const void *row, int64_t nb) {
    return (const float *)((const char *)row + nb * 32);
}
static inline const float *cpu_a32_s(const void *row, int64_t nb) {
    return (const float *)((const char *)row + nb * 36);
}
static inline const int32_t *cpu_a32_sum(const void *row, int64_t nb) {
    return (const int32_t *)((const char *)row + nb * 40);
}
static inline const int8_t *cpu_a256_q(const void *row) {
    return (const int8_t *)row;
}
static inline const float *cpu_a256_d(const void *row, int64_t nb) {
    return (const float *)((const char *)row + nb * 256);
}
static inline const int16_t *cpu_a256_bsum16(const void *row, int64_t nb) {
    return (const int16_t *)((const char *)row + nb * 260);
}
static inline const int16_t *cpu_a256_bsum32(const void *row, int64_t nb) {
    return (const int16_t *)((const char *)row + nb * 292);
}

/* Activation block scale rule, shared so every set rounds alike: a block
 * with max |x| = amax gets d = amax / 127 and q = round_even(x * (127 /
 * amax)); amax < 1e-30 (all zero or subnormal) gives d = 0, q = 0; a
 * non-finite value in the block gives d = NaN, q = 0 (NaN propagates to
 * the outputs instead of being hidden). */
#define CPU_ACT_TINY 1e-30f

/* Unaligned little-endian loads. */
static inline uint16_t cpu_rd16(const void *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline uint32_t cpu_rd32(const void *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline float cpu_rdh(const void *p) { /* fp16 at p as float */
    return cpu_fp16_to_fp32(cpu_rd16(p));
}

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12
 * packed bytes s: sub-blocks 0-3 keep theirs in the low 6 bits of s[0..3]
 * (scales) and s[4..7] (mins); 4-7 put their low 4 bits in s[8..11]
 * (scale low nibble, min high nibble) and their top 2 bits in the spare
 * top bits of s[0..3] (scales) and s[4..7] (mins). */
static inline void cpu_q_kscale(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* The float lanes' final sum (see quant_math_internal.h): ((l0+l4)+(l2+l6)) +
 * ((l1+l5)+(l3+l7)). Every set reduces with this one function. */
static inline float cpu_q_lane_sum(const float l[8]) {
    float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6],
          a3 = l[3] + l[7];
    float b0 = a0 + a2, b1 = a1 + a3;
    return b0 + b1;
}

/* Stores a finished accumulator: out = v, or out += v. */
static inline void cpu_q_store(float *out, float v, bool accumulate) {
    *out = accumulate ? *out + v : v;
}

extern const cpu_quant_kernels tr_cpu_quant_kernels_portable;
#if defined(__x86_64__) || defined(__i386__)
extern const cpu_quant_kernels tr_cpu_quant_kernels_avx2;
extern const cpu_quant_kernels tr_cpu_quant_kernels_vnni;
#endif

/* Portable entries the SIMD sets reuse (dequantization is exact, so one
 * implementation serves every set). */
void tr_cpu_q_dequantize_row_portable(tr_dtype type, const void *src,
                                   float *dst, int64_t n);

#endif
