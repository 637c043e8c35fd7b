/* quant_x86_impl_internal.h — the x86 SIMD kernel sets of quant_math_internal.h, written once and
 * compiled twice: by quant_avx2.c (AVX2+FMA+F16C) and by quant_vnni_avx2.c
 * (the same plus AVX-512 VNNI on 256-bit vectors, QX_VNNI defined), each
 * defining QX_NAME(x) to suffix the function names.
 *
 * Layering: internal to kernels/cpu/quant_*.c. Included only from .c files
 * compiled for (at least) AVX2; called only after tr_cpu_quant_select found
 * the CPU able to run them.
 *
 * The idea. ggml multiplies one weight row by one token at a time and
 * reduces each block's 32 products horizontally. Here eight weight rows
 * go down the eight 32-bit lanes of a vector instead: the 16 (or 32) quant
 * bytes of a block in 8 rows are loaded and transposed so that vector g_i
 * holds, in lane r, the 4 quants of row r that multiply activation bytes
 * 4i..4i+3 (for nibble formats: a lane of g_2j holds the low nibbles of
 * qs[4j..4j+3], elements 4j.., and g_2j+1 their high nibbles, elements
 * 16+4j..). Multiplying g_i by the token's 4 bytes broadcast to every lane
 * (vpmaddubsw / vpdpbusd) accumulates all 8 rows at once, with no
 * horizontal reduction at all:
 *
 *      lane:     0      1            7
 *      g_i    [r0:q q q q][r1:q q q q] ... [r7:q q q q]
 *      x      [ x x x x  ][ x x x x  ] ... [ x x x x  ]   (4 bytes, broadcast)
 *      -> int32 lane r += sum of 4 products of row r
 *
 * Rows go in tiles of 16 (two such groups of 8; K-quants: one), so that
 * each broadcast activation dword feeds two multiplies: with 8 rows the
 * broadcasts alone (8 loads per token and block) kept the load ports
 * busier than the multipliers. A tile's transposed quants and scales are
 * unpacked once into a buffer on the stack (chunks of up to 24 blocks) and
 * reused by every token of a 64-token tile, four tokens at a time, so the
 * unpacking cost vanishes in prefill and a weight byte is read from memory
 * once per token tile; while a tile is unpacked, the next one is
 * prefetched. Per (token, block) the rows' exact int32 dots then meet the
 * float scales with the arithmetic of quant_math_internal.h, lane by lane; since that is
 * the same whatever the tile, token group or row position, the results
 * match the portable set bit for bit.
 *
 * Measured on the 2-core Ice Lake server this was tuned on (one thread,
 * SmolLM2 Q4_1 shapes, tests/bench/bench_matmul): prefill ~80-90 GFLOP/s
 * (AVX2) and ~120-150 (VNNI) against ~20 for ggml's row-by-row dots;
 * decode GEMVs stream the weights at ~6-8 GB/s, close to what one core
 * reads from DRAM there. On a Zen 3 (EPYC) core, after the block loop
 * stopped being unrolled (see run32): Q4_1 ~160-200 GFLOP/s and Q8_0
 * ~90-110 at 32-64 tokens.
 *
 * Overflow bounds (vpmaddubsw saturates int16 pairs): activation quants
 * are in [-127, 127]; a 4-bit pair is <= 2*15*127 = 3810, so eight groups
 * sum to <= 30480; 5-bit pairs (<= 7874) are summed four at a time; Q6_K
 * pairs (<= 16002) two at a time; Q8_0 (AVX2) uses |w| and sign(x, w),
 * pairs <= 2*128*127 = 32512, each widened at once.
 *
 * Reads: every load stays inside the rows' blocks (16-byte loads start at
 * most 16 bytes before a block's end), so rows clamped to r1 - 1 for a
 * partial tile never read past the last row (prefetches may: they cannot
 * fault).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/cpu/quant_internal.h"

#define QX_INLINE static inline __attribute__((always_inline))
#define QX_TT 64   /* tokens per tile (accumulators live in a stack tile) */
/* Repacked matrices: up to QX_GEMV_TOK tokens go through the decode GEMV,
 * QX_GEMV_NT at a time. Whole SmolLM2 passes, 2 threads, Zen 4: with
 * VNNI, 2 rows 2.6 ms against 4.4 tiled, 8 rows 6.2 against 6.9, 12 rows
 * even, 16 rows 11.1 against 10.1; 8 tokens at a time was slower than 4
 * (out of registers). The AVX2 set (16 registers, no VNNI) gains at 2 and
 * 3 rows, three at a time (2 rows 3.2-4.0 against 4.4-5.5, 3 rows 4.1-5.3
 * against 5.5-7.0), and loses from 5 (5 rows 7.7 against 6.8-7.0; 9 rows
 * four at a time 10.2-10.6 against 8.1-8.4). */
#ifdef QX_VNNI
#define QX_GEMV_NT 4
#define QX_GEMV_TOK 11
#else
#define QX_GEMV_NT 3
#define QX_GEMV_TOK 3
#endif
#define QX_KC32 24 /* 32-blocks per unpacked chunk (24 x 1152 B for Q8_0) */
#define QX_KC256 4 /* 256-blocks per unpacked chunk */

/* ---- loads and transposes ---- */

/* 16 bytes at a+off in the low half and b+off in the high half. */
QX_INLINE __m256i ld2x16(const uint8_t *a, const uint8_t *b, size_t off) {
    return _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + off))),
        _mm_loadu_si128((const __m128i *)(b + off)), 1);
}

/* Dwords j = 0..3 of the 16 bytes at p[r]+off, transposed: o[j] lane r. */
QX_INLINE void ld_t8x4(const uint8_t *const p[8], size_t off, __m256i o[4]) {
    __m256i y0 = ld2x16(p[0], p[4], off), y1 = ld2x16(p[1], p[5], off);
    __m256i y2 = ld2x16(p[2], p[6], off), y3 = ld2x16(p[3], p[7], off);
    __m256i t0 = _mm256_unpacklo_epi32(y0, y1), t1 = _mm256_unpackhi_epi32(y0, y1);
    __m256i t2 = _mm256_unpacklo_epi32(y2, y3), t3 = _mm256_unpackhi_epi32(y2, y3);
    o[0] = _mm256_unpacklo_epi64(t0, t2);
    o[1] = _mm256_unpackhi_epi64(t0, t2);
    o[2] = _mm256_unpacklo_epi64(t1, t3);
    o[3] = _mm256_unpackhi_epi64(t1, t3);
}

QX_INLINE __m256i ld2x8(const uint8_t *a, const uint8_t *b, size_t off) {
    return _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(a + off))),
        _mm_loadl_epi64((const __m128i *)(b + off)), 1);
}

/* Dwords 0 and 1 of the 8 bytes at p[r]+off, transposed. */
QX_INLINE void ld_t8x2(const uint8_t *const p[8], size_t off, __m256i *d0,
                       __m256i *d1) {
    __m256i y0 = ld2x8(p[0], p[4], off), y1 = ld2x8(p[1], p[5], off);
    __m256i y2 = ld2x8(p[2], p[6], off), y3 = ld2x8(p[3], p[7], off);
    __m256i t0 = _mm256_unpacklo_epi32(y0, y1), t2 = _mm256_unpacklo_epi32(y2, y3);
    *d0 = _mm256_unpacklo_epi64(t0, t2);
    *d1 = _mm256_unpackhi_epi64(t0, t2);
}

/* The dword at p[r]+off in lane r. */
QX_INLINE __m256i ld_t8x1(const uint8_t *const p[8], size_t off) {
    return _mm256_setr_epi32((int)cpu_rd32(p[0] + off), (int)cpu_rd32(p[1] + off),
                             (int)cpu_rd32(p[2] + off), (int)cpu_rd32(p[3] + off),
                             (int)cpu_rd32(p[4] + off), (int)cpu_rd32(p[5] + off),
                             (int)cpu_rd32(p[6] + off), (int)cpu_rd32(p[7] + off));
}

/* fp16 in the low (h2f_lo) or high (h2f_hi) half of each dword -> floats. */
QX_INLINE __m256 h2f_lo(__m256i v) {
    const __m256i idx = _mm256_setr_epi8(
        0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1,
        0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i s = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, idx), 0x08);
    return _mm256_cvtph_ps(_mm256_castsi256_si128(s));
}
QX_INLINE __m256 h2f_hi(__m256i v) {
    return h2f_lo(_mm256_srli_epi32(v, 16));
}

/* Broadcasts of activation data. */
QX_INLINE __m256i bc32(const void *p) {
    return _mm256_set1_epi32((int)cpu_rd32(p));
}
QX_INLINE __m256 bcf(const float *p) { return _mm256_broadcast_ss(p); }

/* Lane r byte k = bit (base + k) of lane r's dword qh, moved to bit 4. */
QX_INLINE __m256i qh_bits(__m256i qh, int base) {
    const int byte = base >> 3;
    const __m256i idx = _mm256_setr_epi8(
        byte, byte, byte, byte, 4 + byte, 4 + byte, 4 + byte, 4 + byte,
        8 + byte, 8 + byte, 8 + byte, 8 + byte, 12 + byte, 12 + byte, 12 + byte, 12 + byte,
        byte, byte, byte, byte, 4 + byte, 4 + byte, 4 + byte, 4 + byte,
        8 + byte, 8 + byte, 8 + byte, 8 + byte, 12 + byte, 12 + byte, 12 + byte, 12 + byte);
    const __m256i m = (base & 7) ? _mm256_set1_epi32(0x80402010)
                                 : _mm256_set1_epi32(0x08040201);
    __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(qh, idx), m);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, m), _mm256_set1_epi8(0x10));
}

/* ---- the integer dot of 4 bytes x 8 rows ---- */

#ifdef QX_VNNI
QX_INLINE __m256i dp4(__m256i acc, __m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(acc, u, s);
}
#endif

/* ---- stores ---- */

/* Writes (or adds) 8 lanes of v to o[0..n-1], n <= 8. */
QX_INLINE void store_rows(float *o, __m256 v, int n, bool accumulate) {
    if (n == 8) {
        if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(o), v);
        _mm256_storeu_ps(o, v);
        return;
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
    if (accumulate) v = _mm256_add_ps(_mm256_maskload_ps(o, mask), v);
    _mm256_maskstore_ps(o, mask, v);
}

/* Keeps v in a register at this point. Without it GCC re-associates an
 * accumulation chain (p += maddubs(...) eight times) into a tree whose
 * temporaries outnumber the 16 ymm registers and go to the stack (measured:
 * 2x slower prefill). */
#define QX_PIN(v) __asm__("" : "+x"(v))
#define QX_UNROLL _Pragma("GCC unroll 16")

/* Dword 0 of the 16 bytes at p[r]+off, lanes in row order [0 1 4 5 2 3 6 7]
 * (the order h2f_pair wants: it costs 3 shuffles instead of ld_t8x2's 7). */
QX_INLINE __m256i ld_dw0_perm(const uint8_t *const p[8], size_t off) {
    __m256i y0 = ld2x16(p[0], p[2], off), y1 = ld2x16(p[1], p[3], off);
    __m256i y2 = ld2x16(p[4], p[6], off), y3 = ld2x16(p[5], p[7], off);
    __m256i t0 = _mm256_unpacklo_epi32(y0, y1), t2 = _mm256_unpacklo_epi32(y2, y3);
    return _mm256_unpacklo_epi64(t0, t2);
}

/* The two fp16 of each dword of v (lanes in ld_dw0_perm's order) as floats
 * in row order: *lo from the low halves, *hi from the high halves. */
QX_INLINE void h2f_pair(__m256i v, __m256 *lo, __m256 *hi) {
    __m256 a = _mm256_cvtph_ps(_mm256_castsi256_si128(v));      /* rows 0 1 4 5 */
    __m256 b = _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1)); /* rows 2 3 6 7 */
    *lo = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    *hi = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
}

/* Software prefetch of the next row tile while the current one is being
 * unpacked: the rows of a tile are one contiguous stretch of the matrix
 * (rows are stored back to back), and spreading its cache lines over the
 * current tile's blocks keeps DRAM busy while the unpacking computes.
 * Measured on the decode GEMVs: without it, memory and compute time added
 * up (5.5 GB/s of weights where a plain read streams 9). */
typedef struct qx_prefetch {
    const char *base; /* first byte of the next tile (maybe past the end) */
    int64_t lines;    /* 64-byte lines in it */
} qx_prefetch;

/* The tile after the current one, even past r1: a caller that cuts its
 * range into several calls (ops.c walks 64-row blocks) usually computes
 * those rows next, and a prefetch never faults, even past the end of the
 * matrix (at worst one tile's lines are fetched for nothing). */
QX_INLINE qx_prefetch next_tile(const uint8_t *w, size_t wrb, int64_t next,
                                int64_t tile_rows) {
    qx_prefetch pf;
    /* integer arithmetic: the address may lie past the matrix object */
    pf.base = (const char *)((uintptr_t)w + (uintptr_t)next * wrb);
    pf.lines = (int64_t)(((size_t)tile_rows * wrb + 63) / 64);
    return pf;
}

/* The share of the next tile's lines that goes with block bi of nb. */
QX_INLINE void prefetch_part(const qx_prefetch *pf, int64_t bi, int64_t nb) {
    for (int64_t l = bi * pf->lines / nb; l < (bi + 1) * pf->lines / nb; l++)
        _mm_prefetch(pf->base + 64 * l, _MM_HINT_T0);
}

/* =====================================================================
 * 32-blocks: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0
 * Rows go in tiles of 16 = two groups A, B of 8, so that each activation
 * broadcast feeds two vpmaddubsw (the loads, 8 broadcasts per token and
 * block, would otherwise bound the loop). Unpacked block in the buffer:
 *   g[0..7] group A's transposed quants, g[8..15] group B's;
 *   (Q8_0 on AVX2: g[0..15] = |w|, g[16..31] = the signed bytes)
 *   then d_A, m_A, d_B, m_B (m only for type-1) at u32_spos.
 * ===================================================================== */

#define QX_U32_MAX 36 /* vectors per unpacked block, at most */

QX_INLINE int u32_spos(tr_dtype t) {
#ifdef QX_VNNI
    (void)t;
    return 16;
#else
    return t == TR_DTYPE_Q8_0 ? 32 : 16;
#endif
}
QX_INLINE int u32_nvec(tr_dtype t) { return u32_spos(t) + 4; }

/* Activation byte offset of group i. */
QX_INLINE int a32_xoff(tr_dtype t, int i) {
    return t == TR_DTYPE_Q8_0 ? 4 * i : (i & 1) * 16 + (i >> 1) * 4;
}

/* Unpacks one block of 8 rows: quants into g[0..7] (g[0..7] and raw[0..7]
 * for Q8_0 on AVX2), scales into *d and *m. */
QX_INLINE void unpack32(tr_dtype t, const uint8_t *const p[8], __m256i *g, __m256i *raw,
                        __m256 *d, __m256 *m) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i q[4];
    switch (t) {
    case TR_DTYPE_Q4_0:
    case TR_DTYPE_Q4_1:
        ld_t8x4(p, t == TR_DTYPE_Q4_0 ? 2 : 4, q);
        for (int j = 0; j < 4; j++) {
            g[2 * j] = _mm256_and_si256(q[j], m4);
            g[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(q[j], 4), m4);
        }
        h2f_pair(ld_dw0_perm(p, 0), d, m);
        break;
    case TR_DTYPE_Q5_0:
    case TR_DTYPE_Q5_1: {
        __m256i d0, d1;
        ld_t8x4(p, t == TR_DTYPE_Q5_0 ? 6 : 8, q);
        ld_t8x2(p, 0, &d0, &d1);
        __m256i qh = t == TR_DTYPE_Q5_1
                         ? d1
                         : _mm256_or_si256(_mm256_srli_epi32(d0, 16), _mm256_slli_epi32(d1, 16));
        for (int j = 0; j < 4; j++) {
            g[2 * j] = _mm256_or_si256(_mm256_and_si256(q[j], m4), qh_bits(qh, 4 * j));
            g[2 * j + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q[j], 4), m4),
                                           qh_bits(qh, 16 + 4 * j));
        }
        *d = h2f_lo(d0);
        *m = h2f_hi(d0);
        break;
    }
    default: { /* Q8_0 */
        __m256i q2[4];
        ld_t8x4(p, 2, q);
        ld_t8x4(p, 18, q2);
        const __m256i r[8] = {q[0], q[1], q[2], q[3], q2[0], q2[1], q2[2], q2[3]};
        for (int j = 0; j < 8; j++) {
#ifdef QX_VNNI
            /* w + 128 as unsigned bytes; the dot subtracts 128 * sum(x) */
            g[j] = _mm256_xor_si256(r[j], _mm256_set1_epi8((char)0x80));
            (void)raw;
#else
            g[j] = _mm256_abs_epi8(r[j]);
            raw[j] = r[j];
#endif
        }
        h2f_pair(ld_dw0_perm(p, 0), d, m);
        break;
    }
    }
}

/* Unpacks one block of NG groups of 8 rows (rows p[0..8*NG-1]) into u. */
QX_INLINE void unpack32_tile(tr_dtype t, const uint8_t *const *p, __m256i *u, const int ng) {
    const int sp = u32_spos(t);
    for (int grp = 0; grp < ng; grp++) {
        __m256 d, m;
        unpack32(t, p + 8 * grp, u + 8 * grp, u + 16 + 8 * grp, &d, &m);
        _mm256_store_si256(u + sp + 2 * grp, _mm256_castps_si256(d));
        _mm256_store_si256(u + sp + 2 * grp + 1, _mm256_castps_si256(m));
    }
}

/* The exact int32 dots (offset-corrected, see quant_math_internal.h) of one unpacked
 * block with NT tokens (activation quants x[k], sums sum[k]), for NG row
 * groups: dot[grp * 4 + k]. For 5-bit types NT * NG <= 4. */
QX_INLINE void dot32(tr_dtype t, const __m256i *u, const int8_t *const *x,
                     const int32_t *const *sum, __m256i *dot, const int nt, const int ng) {
    const int sh = t == TR_DTYPE_Q4_0 ? 3 : t == TR_DTYPE_Q5_0 ? 4
#ifdef QX_VNNI
                 : t == TR_DTYPE_Q8_0 ? 7
#endif
                 : 0;
    __m256i a[8];
    QX_UNROLL
    for (int j = 0; j < 8; j++) a[j] = _mm256_setzero_si256();
#ifdef QX_VNNI
    QX_UNROLL
    for (int i = 0; i < 8; i++) {
        __m256i gA = _mm256_load_si256(u + i);
        __m256i gB = ng > 1 ? _mm256_load_si256(u + 8 + i) : gA;
        QX_UNROLL
        for (int k = 0; k < nt; k++) {
            __m256i xb = bc32(x[k] + a32_xoff(t, i));
            a[k] = dp4(a[k], gA, xb);
            if (ng > 1) a[4 + k] = dp4(a[4 + k], gB, xb);
        }
    }
#else
    const __m256i ones = _mm256_set1_epi16(1);
    if (t == TR_DTYPE_Q8_0) {
        QX_UNROLL
        for (int i = 0; i < 8; i++) {
            __m256i gA = _mm256_load_si256(u + i), sA = _mm256_load_si256(u + 16 + i);
            __m256i gB = gA, sB = sA;
            if (ng > 1) {
                gB = _mm256_load_si256(u + 8 + i);
                sB = _mm256_load_si256(u + 24 + i);
            }
            QX_UNROLL
            for (int k = 0; k < nt; k++) {
                __m256i xb = bc32(x[k] + 4 * i);
                a[k] = _mm256_add_epi32(
                    a[k], _mm256_madd_epi16(_mm256_maddubs_epi16(gA, _mm256_sign_epi8(xb, sA)), ones));
                QX_PIN(a[k]);
                if (ng > 1) {
                    a[4 + k] = _mm256_add_epi32(
                        a[4 + k],
                        _mm256_madd_epi16(_mm256_maddubs_epi16(gB, _mm256_sign_epi8(xb, sB)), ones));
                    QX_PIN(a[4 + k]);
                }
            }
        }
    } else {
        /* 4-bit: the 8 groups' int16 pair sums fit (<= 30480); 5-bit: two
         * halves of 4, widened separately */
        const bool five = t == TR_DTYPE_Q5_0 || t == TR_DTYPE_Q5_1;
        __m256i h[8];
        QX_UNROLL
        for (int j = 0; j < 8; j++) h[j] = _mm256_setzero_si256();
        QX_UNROLL
        for (int i = 0; i < 8; i++) {
            __m256i gA = _mm256_load_si256(u + i);
            __m256i gB = ng > 1 ? _mm256_load_si256(u + 8 + i) : gA;
            QX_UNROLL
            for (int k = 0; k < nt; k++) {
                __m256i xb = bc32(x[k] + a32_xoff(t, i));
                __m256i *pa = five && i >= 4 ? &h[k] : &a[k];
                *pa = _mm256_add_epi16(*pa, _mm256_maddubs_epi16(gA, xb));
                QX_PIN(*pa);
                if (ng > 1) {
                    __m256i *pb = five && i >= 4 ? &h[4 + k] : &a[4 + k];
                    *pb = _mm256_add_epi16(*pb, _mm256_maddubs_epi16(gB, xb));
                    QX_PIN(*pb);
                }
            }
        }
        QX_UNROLL
        for (int j = 0; j < 8; j++) {
            if ((j & 3) >= nt || (j >= 4 && ng < 2)) continue;
            a[j] = _mm256_madd_epi16(a[j], ones);
            if (five) a[j] = _mm256_add_epi32(a[j], _mm256_madd_epi16(h[j], ones));
        }
    }
#endif
    QX_UNROLL
    for (int grp = 0; grp < ng; grp++)
        QX_UNROLL
        for (int k = 0; k < nt; k++) {
            __m256i v = a[4 * grp + k];
            if (sh) v = _mm256_sub_epi32(v, _mm256_set1_epi32(*sum[k] * (1 << sh)));
            dot[4 * grp + k] = v;
        }
}

/* acc update of quant_math_internal.h for one (block, token) and 8 rows; sc points at the
 * group's d (and m after it). */
QX_INLINE __m256 upd32(tr_dtype t, const __m256i *sc, __m256 acc, __m256i dot,
                       const float *dx, const float *sx) {
    __m256 dv = _mm256_castsi256_ps(_mm256_load_si256(sc));
    __m256 s = _mm256_mul_ps(dv, bcf(dx));
    __m256 fd = _mm256_cvtepi32_ps(dot);
    if (cpu_q_has_min(t)) {
        __m256 mv = _mm256_castsi256_ps(_mm256_load_si256(sc + 1));
        return _mm256_add_ps(acc, _mm256_fmadd_ps(s, fd, _mm256_mul_ps(mv, bcf(sx))));
    }
    return _mm256_fmadd_ps(s, fd, acc);
}

/* NT tokens (rows xr[k] of the activations) x the kn unpacked blocks of u
 * (blocks kb.. of the row) x NG groups: acc tiles in accbuf (16 floats per
 * token: group A then B), zero-started when first. */
QX_INLINE void run32(tr_dtype t, const __m256i *u, int kn, int64_t kb, int64_t nb,
                     const uint8_t *const *xr, float *acc16, bool first, const int nt,
                     const int ng) {
    const int nv = u32_nvec(t), sp = u32_spos(t);
    __m256 acc[8];
    QX_UNROLL
    for (int grp = 0; grp < ng; grp++)
        QX_UNROLL
        for (int k = 0; k < nt; k++)
            acc[4 * grp + k] = first ? _mm256_setzero_ps()
                                     : _mm256_load_ps(acc16 + 16 * k + 8 * grp);
    /* Not unrolled: one block's body (~450 instructions for 4 tokens x 16
     * rows) already hides every latency, and unrolling it 16 times made
     * each of the ~20 (type, NT, NG) variants ~35 KB of code, more than
     * the 32 KB L1i: the loop then ran from L2, front-end bound (measured
     * on Zen 3: 1.4-1.8x faster at 16-64 tokens without the unroll). */
    _Pragma("GCC unroll 1")
    for (int b = 0; b < kn; b++) {
        const int64_t bi = kb + b;
        const __m256i *ub = u + b * nv;
        const int8_t *x[4];
        const int32_t *sm[4];
        __m256i dot[8];
        QX_UNROLL
        for (int k = 0; k < nt; k++) {
            x[k] = cpu_a32_q(xr[k]) + bi * 32;
            sm[k] = cpu_a32_sum(xr[k], nb) + bi;
        }
        dot32(t, ub, x, sm, dot, nt, ng);
        QX_UNROLL
        for (int grp = 0; grp < ng; grp++)
            QX_UNROLL
            for (int k = 0; k < nt; k++)
                acc[4 * grp + k] = upd32(t, ub + sp + 2 * grp, acc[4 * grp + k], dot[4 * grp + k],
                                         cpu_a32_d(xr[k], nb) + bi, cpu_a32_s(xr[k], nb) + bi);
    }
    QX_UNROLL
    for (int grp = 0; grp < ng; grp++)
        QX_UNROLL
        for (int k = 0; k < nt; k++) _mm256_store_ps(acc16 + 16 * k + 8 * grp, acc[4 * grp + k]);
}

/* ---- 16-row interleaved weights (the r16 layout of quant_math_internal.h) ----
 * A chunk holds one block of 16 rows already transposed, so unpacking is
 * aligned loads (and the nibble split): no shuffles, no stack buffer for a
 * decode step. */

QX_INLINE bool r16_five(tr_dtype t) { return t == TR_DTYPE_Q5_0 || t == TR_DTYPE_Q5_1; }

/* A 4/5-bit group's (q: its body vectors) qh vector (zero for 4-bit). */
QX_INLINE __m256i r16_qh(tr_dtype t, const __m256i *q) {
    return r16_five(t) ? _mm256_load_si256(q) : _mm256_setzero_si256();
}

/* Quant vector j (0..3) of a 4/5-bit group split into its low and high
 * nibbles with their fifth bits: unpack32's g[2 j] and g[2 j + 1]. */
QX_INLINE void r16_nibbles(tr_dtype t, const __m256i *q, __m256i qh, int j, __m256i *lo,
                           __m256i *hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const bool five = r16_five(t);
    __m256i v = _mm256_load_si256(q + five + j);
    *lo = _mm256_and_si256(v, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (five) {
        *lo = _mm256_or_si256(*lo, qh_bits(qh, 4 * j));
        *hi = _mm256_or_si256(*hi, qh_bits(qh, 16 + 4 * j));
    }
}

/* unpack32's vectors for group grp (rows 8 grp .. 8 grp + 7) of chunk c. */
QX_INLINE void unpack32_r16(tr_dtype t, const uint8_t *c, int grp, __m256i *g, __m256i *raw,
                            __m256 *d, __m256 *m) {
    const int nd = (int)cpu_r16_nd(t);
    const __m256i *q = (const __m256i *)c + grp * nd;
    const uint8_t *sc = c + cpu_r16_scales_off((size_t)nd);
    *d = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(sc + 16 * grp)));
    *m = cpu_q_has_min(t) ? _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(sc + 32 + 16 * grp)))
                          : _mm256_setzero_ps();
    if (t == TR_DTYPE_Q8_0) {
        for (int j = 0; j < 8; j++) {
            __m256i r = _mm256_load_si256(q + j);
#ifdef QX_VNNI
            g[j] = _mm256_xor_si256(r, _mm256_set1_epi8((char)0x80));
            (void)raw;
#else
            g[j] = _mm256_abs_epi8(r);
            raw[j] = r;
#endif
        }
        return;
    }
    const __m256i qh = r16_qh(t, q);
    for (int j = 0; j < 4; j++) r16_nibbles(t, q, qh, j, &g[2 * j], &g[2 * j + 1]);
}

/* unpack32_tile for one chunk (both groups). */
QX_INLINE void unpack32_tile_r16(tr_dtype t, const uint8_t *c, __m256i *u) {
    const int sp = u32_spos(t);
    for (int grp = 0; grp < 2; grp++) {
        __m256 d, m;
        unpack32_r16(t, c, grp, u + 8 * grp, u + 16 + 8 * grp, &d, &m);
        _mm256_store_si256(u + sp + 2 * grp, _mm256_castps_si256(d));
        _mm256_store_si256(u + sp + 2 * grp + 1, _mm256_castps_si256(m));
    }
}

/* The exact int32 dots of one group's body (q: nd vectors) with 32
 * activation bytes of each of nt tokens (x + k * xs), lane r = row r:
 * dot32's sums, from registers; the weights are unpacked once for all
 * tokens. */
QX_INLINE void dot32_r16(tr_dtype t, const __m256i *q, const int8_t *x, size_t xs, int nt,
                           __m256i *a) {
    for (int k = 0; k < nt; k++) a[k] = _mm256_setzero_si256();
    if (t == TR_DTYPE_Q8_0) {
#ifndef QX_VNNI
        const __m256i ones = _mm256_set1_epi16(1);
#endif
        QX_UNROLL
        for (int j = 0; j < 8; j++) {
            __m256i r = _mm256_load_si256(q + j);
#ifdef QX_VNNI
            __m256i u = _mm256_xor_si256(r, _mm256_set1_epi8((char)0x80));
            for (int k = 0; k < nt; k++) a[k] = dp4(a[k], u, bc32(x + k * xs + 4 * j));
#else
            __m256i u = _mm256_abs_epi8(r);
            for (int k = 0; k < nt; k++)
                a[k] = _mm256_add_epi32(
                    a[k], _mm256_madd_epi16(
                              _mm256_maddubs_epi16(u, _mm256_sign_epi8(bc32(x + k * xs + 4 * j), r)),
                              ones));
#endif
        }
        return;
    }
    const __m256i qh = r16_qh(t, q);
#ifndef QX_VNNI
    const bool five = r16_five(t);
    __m256i h[QX_GEMV_NT]; /* 5-bit: the second half's int16 sums */
    for (int k = 0; k < nt; k++) h[k] = _mm256_setzero_si256();
#endif
    QX_UNROLL
    for (int j = 0; j < 4; j++) {
        __m256i lo, hi;
        r16_nibbles(t, q, qh, j, &lo, &hi);
        for (int k = 0; k < nt; k++) {
            __m256i xl = bc32(x + k * xs + 4 * j), xh = bc32(x + k * xs + 16 + 4 * j);
#ifdef QX_VNNI
            a[k] = dp4(dp4(a[k], lo, xl), hi, xh);
#else
            __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xl), _mm256_maddubs_epi16(hi, xh));
            if (five && j >= 2)
                h[k] = _mm256_add_epi16(h[k], p);
            else
                a[k] = _mm256_add_epi16(a[k], p);
#endif
        }
    }
#ifndef QX_VNNI
    for (int k = 0; k < nt; k++) {
        a[k] = _mm256_madd_epi16(a[k], _mm256_set1_epi16(1));
        if (five) a[k] = _mm256_add_epi32(a[k], _mm256_madd_epi16(h[k], _mm256_set1_epi16(1)));
    }
#endif
}

/* Decode GEMV over one group of 16 repacked rows (chunks c[0..nb-1]) for
 * nt <= QX_GEMV_NT tokens (rows of token k at o + k * os), everything in
 * registers. Per (block, row, token) the float steps are upd32's, in its
 * order, so a row's result does not depend on the tokens beside it. Each
 * chunk is read and unpacked once for all tokens: a few tokens cost
 * little more than one (speculative decoding's verification rows, small
 * decode batches). No software prefetch: the chunks are one contiguous
 * stream, which the hardware prefetcher follows; prefetching 4-32 chunks
 * ahead cost 3-10% (bench_model decode, 2 threads, Zen 4). */
QX_INLINE void gemv32_r16(tr_dtype t, const uint8_t *c, int64_t nb, const uint8_t *xq, size_t xs,
                         int nt, float *o, size_t os, bool accumulate) {
    const int nd = (int)cpu_r16_nd(t);
    const size_t csz = (size_t)16 * tr_dtype_type_size(t);
    const int sh = t == TR_DTYPE_Q4_0 ? 3 : t == TR_DTYPE_Q5_0 ? 4
#ifdef QX_VNNI
                 : t == TR_DTYPE_Q8_0 ? 7
#endif
                 : 0;
    const int8_t *xqk[QX_GEMV_NT];
    const float *dx[QX_GEMV_NT], *sx[QX_GEMV_NT];
    const int32_t *xsum[QX_GEMV_NT];
    __m256 accA[QX_GEMV_NT], accB[QX_GEMV_NT];
    for (int k = 0; k < nt; k++) {
        const uint8_t *xr = xq + (size_t)k * xs;
        xqk[k] = cpu_a32_q(xr);
        dx[k] = cpu_a32_d(xr, nb);
        sx[k] = cpu_a32_s(xr, nb);
        xsum[k] = cpu_a32_sum(xr, nb);
        accA[k] = accB[k] = _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++, c += csz) {
        __m256i iA[QX_GEMV_NT], iB[QX_GEMV_NT];
        dot32_r16(t, (const __m256i *)c, xqk[0] + 32 * b, xs, nt, iA);
        dot32_r16(t, (const __m256i *)c + nd, xqk[0] + 32 * b, xs, nt, iB);
        const uint8_t *sc = c + cpu_r16_scales_off((size_t)nd);
        const __m256 wA = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)sc));
        const __m256 wB = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(sc + 16)));
        const bool has_min = cpu_q_has_min(t);
        const __m256 mA = has_min ? _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(sc + 32)))
                                  : _mm256_setzero_ps();
        const __m256 mB = has_min ? _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(sc + 48)))
                                  : _mm256_setzero_ps();
        for (int k = 0; k < nt; k++) {
            if (sh) {
                const __m256i off = _mm256_set1_epi32(xsum[k][b] * (1 << sh));
                iA[k] = _mm256_sub_epi32(iA[k], off);
                iB[k] = _mm256_sub_epi32(iB[k], off);
            }
            const __m256 dxv = bcf(dx[k] + b);
            __m256 sA = _mm256_mul_ps(wA, dxv), sB = _mm256_mul_ps(wB, dxv);
            if (has_min) {
                const __m256 sxv = bcf(sx[k] + b);
                accA[k] = _mm256_add_ps(accA[k], _mm256_fmadd_ps(sA, _mm256_cvtepi32_ps(iA[k]), _mm256_mul_ps(mA, sxv)));
                accB[k] = _mm256_add_ps(accB[k], _mm256_fmadd_ps(sB, _mm256_cvtepi32_ps(iB[k]), _mm256_mul_ps(mB, sxv)));
            } else {
                accA[k] = _mm256_fmadd_ps(sA, _mm256_cvtepi32_ps(iA[k]), accA[k]);
                accB[k] = _mm256_fmadd_ps(sB, _mm256_cvtepi32_ps(iB[k]), accB[k]);
            }
        }
    }
    for (int k = 0; k < nt; k++) {
        store_rows(o + (size_t)k * os, accA[k], 8, accumulate);
        store_rows(o + (size_t)k * os + 8, accB[k], 8, accumulate);
    }
}

/* One row tile of NG groups: rows[0..8*NG-1] (clamped), nr valid rows. */
/* grp: NULL for row-major rows, else the tile's first r16 chunk (then
 * ng == 2, nr == 16, rows unused). */
QX_INLINE void mm32_tile(tr_dtype t, const uint8_t *const *rows, const uint8_t *grp, int nr,
                         int64_t nb, size_t tsz, const uint8_t *xq, size_t xs, int n_tok,
                         float *out, size_t os, int64_t rg, bool accumulate, __m256i *buf,
                         float *accbuf, const qx_prefetch *pf, const int ng) {
    const int nv = u32_nvec(t);
    const bool five = t == TR_DTYPE_Q5_0 || t == TR_DTYPE_Q5_1;
    const int nt4 = five ? 4 / ng : 4; /* tokens per pass */
    if (grp && n_tok <= QX_GEMV_TOK) {
        for (int k = 0; k < n_tok; k += QX_GEMV_NT) {
            const int kn = n_tok - k < QX_GEMV_NT ? n_tok - k : QX_GEMV_NT;
            const uint8_t *xk = xq + (size_t)k * xs;
            float *ok = out + (size_t)k * os + rg;
            /* constant token counts: the loops over tokens unroll */
            if (kn == 4 && QX_GEMV_NT >= 4)
                gemv32_r16(t, grp, nb, xk, xs, 4, ok, os, accumulate);
            else if (kn == 3)
                gemv32_r16(t, grp, nb, xk, xs, 3, ok, os, accumulate);
            else if (kn == 2)
                gemv32_r16(t, grp, nb, xk, xs, 2, ok, os, accumulate);
            else
                gemv32_r16(t, grp, nb, xk, xs, 1, ok, os, accumulate);
        }
        return;
    }
    if (n_tok == 1) {
        /* Decode GEMV: each block is used once, so it is unpacked and
         * consumed at once (same arithmetic, one block per run32), not
         * staged in a chunk of QX_KC32 blocks: a Q8_0 chunk (27 KB) pushed
         * the activations and the next rows out of L1 (measured: the Q8_0
         * output matrix 1.15-1.3x faster, Q4_1 unchanged). A loop of its
         * own, not the chunked loop below with chunks of one: that one's
         * per-chunk bookkeeping cost the GEMV 1.1-1.4x (measured). */
        const uint8_t *xr[1] = {xq};
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *p[16];
            for (int i = 0; i < 8 * ng; i++) p[i] = rows[i] + (size_t)b * tsz;
            prefetch_part(pf, b, nb);
            unpack32_tile(t, p, buf, ng);
            run32(t, buf, 1, b, nb, xr, accbuf, b == 0, 1, ng);
        }
        store_rows(out + rg, _mm256_load_ps(accbuf), nr < 8 ? nr : 8, accumulate);
        if (ng > 1) store_rows(out + rg + 8, _mm256_load_ps(accbuf + 8), nr - 8, accumulate);
        return;
    }
    for (int t0 = 0; t0 < n_tok; t0 += QX_TT) {
        const int tn = n_tok - t0 < QX_TT ? n_tok - t0 : QX_TT;
        for (int64_t kb = 0; kb < nb; kb += QX_KC32) {
            const int kn = nb - kb < QX_KC32 ? (int)(nb - kb) : QX_KC32;
            for (int b = 0; b < kn; b++) {
                if (t0 == 0) prefetch_part(pf, kb + b, nb);
                if (grp) {
                    unpack32_tile_r16(t, grp + (size_t)(kb + b) * 16 * tsz, buf + b * nv);
                    continue;
                }
                const uint8_t *p[16];
                for (int i = 0; i < 8 * ng; i++) p[i] = rows[i] + (size_t)(kb + b) * tsz;
                unpack32_tile(t, p, buf + b * nv, ng);
            }
            int k = 0;
            for (; k + nt4 <= tn; k += nt4) {
                const uint8_t *xr[4];
                for (int j = 0; j < nt4; j++) xr[j] = xq + (size_t)(t0 + k + j) * xs;
                if (nt4 == 4)
                    run32(t, buf, kn, kb, nb, xr, accbuf + 16 * k, kb == 0, 4, ng);
                else
                    run32(t, buf, kn, kb, nb, xr, accbuf + 16 * k, kb == 0, 2, ng);
            }
            for (; k < tn; k++) {
                const uint8_t *xr[1] = {xq + (size_t)(t0 + k) * xs};
                run32(t, buf, kn, kb, nb, xr, accbuf + 16 * k, kb == 0, 1, ng);
            }
        }
        for (int k = 0; k < tn; k++) {
            float *o = out + (size_t)(t0 + k) * os + rg;
            store_rows(o, _mm256_load_ps(accbuf + 16 * k), nr < 8 ? nr : 8, accumulate);
            if (ng > 1) store_rows(o + 8, _mm256_load_ps(accbuf + 16 * k + 8), nr - 8, accumulate);
        }
    }
}

/* Q5_0 decode GEMV (one token), 8 rows at a time without transposing the
 * weights: each row's block is expanded in place (nibbles, then the fifth
 * bits from qh) and dotted with the token's 32 bytes (vpmaddubsw, pairs <=
 * 2*31*127), and the 8 rows' int32 lanes are reduced together into one
 * vector, lane r = row r's exact block dot; from there the float update
 * is quant_math_internal.h's, lane by lane, so the result is bitwise the tiled path's.
 * The transposed unpack costs more than the dot for a single token
 * (measured on Gemma's 640->2048: 6.2 GB/s hot). */
QX_INLINE __m256i q5_0_expand(const uint8_t *b) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m128i qs = _mm_loadu_si128((const __m128i *)(b + 6));
    __m256i nib = _mm256_and_si256(
        _mm256_setr_m128i(qs, _mm_srli_epi16(qs, 4)), m4); /* elements 0..31 */
    /* byte j gets bit j of qh as 0x10 */
    const __m256i sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i h = _mm256_shuffle_epi8(_mm256_set1_epi32((int)cpu_rd32(b + 2)), sel);
    h = _mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit);
    return _mm256_or_si256(nib, _mm256_and_si256(h, _mm256_set1_epi8(0x10)));
}

/* Lane r = sum of the 8 int32 lanes of v[r]. */
QX_INLINE __m256i reduce8x8i(const __m256i v[8]) {
    __m256i a = _mm256_hadd_epi32(v[0], v[1]), b = _mm256_hadd_epi32(v[2], v[3]);
    __m256i c = _mm256_hadd_epi32(v[4], v[5]), d = _mm256_hadd_epi32(v[6], v[7]);
    __m256i ab = _mm256_hadd_epi32(a, b), cd = _mm256_hadd_epi32(c, d);
    return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20),
                            _mm256_permute2x128_si256(ab, cd, 0x31));
}

QX_INLINE void gemv_q5_0(const uint8_t *w, size_t wrb, int64_t cols, const uint8_t *xr,
                         float *out, int64_t r0, int64_t r1, bool accumulate) {
    const int64_t nb = cols / 32;
    const int8_t *xq = cpu_a32_q(xr);
    const float *dx = cpu_a32_d(xr, nb);
    const int32_t *sx = cpu_a32_sum(xr, nb);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t rg = r0; rg < r1; rg += 8) {
        const int nr = r1 - rg < 8 ? (int)(r1 - rg) : 8;
        const uint8_t *rows[8];
        for (int i = 0; i < 8; i++) rows[i] = w + (size_t)(i < nr ? rg + i : r1 - 1) * wrb;
        const qx_prefetch pf = next_tile(w, wrb, rg + 8, 8);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            prefetch_part(&pf, b, nb);
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + b * 32));
            __m256i dot[8];
            const uint8_t *p[8];
            for (int i = 0; i < 8; i++) {
                p[i] = rows[i] + (size_t)b * 22;
                dot[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(q5_0_expand(p[i]), xv), ones);
            }
            __m256i isum = _mm256_sub_epi32(reduce8x8i(dot), _mm256_set1_epi32(16 * sx[b]));
            __m256 d = _mm256_cvtph_ps(_mm_setr_epi16(
                (short)cpu_rd16(p[0]), (short)cpu_rd16(p[1]), (short)cpu_rd16(p[2]),
                (short)cpu_rd16(p[3]), (short)cpu_rd16(p[4]), (short)cpu_rd16(p[5]),
                (short)cpu_rd16(p[6]), (short)cpu_rd16(p[7])));
            acc = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(dx[b])),
                                  _mm256_cvtepi32_ps(isum), acc);
        }
        store_rows(out + rg, acc, nr, accumulate);
    }
}

/* r16: w is in the r16 layout (r0, r1 multiples of 16); its group of 16
 * rows starting at row rg lies where those rows would (rg * wrb). */
QX_INLINE void mm32_any(tr_dtype t, const uint8_t *w, size_t wrb, int64_t cols,
                        const uint8_t *xq, size_t xs, int n_tok, float *out,
                        size_t os, int64_t r0, int64_t r1, bool accumulate, const bool r16) {
    if (t == TR_DTYPE_Q5_0 && n_tok == 1 && !r16) {
        gemv_q5_0(w, wrb, cols, xq, out, r0, r1, accumulate);
        return;
    }
    const int64_t nb = cols / 32;
    const size_t tsz = tr_dtype_type_size(t);
    __m256i buf[QX_KC32 * QX_U32_MAX];
    float accbuf[QX_TT * 16] __attribute__((aligned(32)));
    for (int64_t rg = r0; rg < r1; rg += 16) {
        const int nr = r1 - rg < 16 ? (int)(r1 - rg) : 16;
        const uint8_t *rows[16];
        for (int i = 0; i < 16; i++)
            rows[i] = w + (size_t)(i < nr ? rg + i : r1 - 1) * wrb;
        const qx_prefetch pf = next_tile(w, wrb, rg + 16, 16);
        if (r16)
            mm32_tile(t, rows, w + (size_t)rg * wrb, 16, nb, tsz, xq, xs, n_tok, out, os, rg,
                      accumulate, buf, accbuf, &pf, 2);
        else if (nr > 8)
            mm32_tile(t, rows, NULL, nr, nb, tsz, xq, xs, n_tok, out, os, rg, accumulate, buf,
                      accbuf, &pf, 2);
        else
            mm32_tile(t, rows, NULL, nr, nb, tsz, xq, xs, n_tok, out, os, rg, accumulate, buf,
                      accbuf, &pf, 1);
    }
}

QX_INLINE void mm32(tr_dtype t, const uint8_t *w, size_t wrb, int64_t cols,
                    const uint8_t *xq, size_t xs, int n_tok, float *out,
                    size_t os, int64_t r0, int64_t r1, bool accumulate) {
    mm32_any(t, w, wrb, cols, xq, xs, n_tok, out, os, r0, r1, accumulate, false);
}

QX_INLINE void mm32_r16(tr_dtype t, const uint8_t *w, size_t wrb, int64_t cols,
                        const uint8_t *xq, size_t xs, int n_tok, float *out,
                        size_t os, int64_t r0, int64_t r1, bool accumulate) {
    mm32_any(t, w, wrb, cols, xq, xs, n_tok, out, os, r0, r1, accumulate, true);
}

/* =====================================================================
 * 256-blocks: Q4_K Q5_K Q6_K
 * Unpacked block: g[0..63] (g_i: elements 4i..4i+3 of the block, natural
 * order), then the scale vectors:
 *   Q4_K/Q5_K: sc16[8] (int16 pairs [sc, sc] per lane, for vpmaddwd),
 *              m16[4] (int16 pairs [m_2p, m_2p+1]), d, dmin   -> 78
 *   Q6_K:      sc16[16], scp[8] (pairs [sc_2p, sc_2p+1]), d    -> 89
 * ===================================================================== */

#define QX_K_NVEC 89

/* A vpshufb index repeating one 4-byte pattern in every dword: b_k is the
 * byte (0..3) of the same dword that lands in byte k, or -1 for zero. */
QX_INLINE __m256i shuf_z(int b0, int b1, int b2, int b3) {
    char v[32];
    for (int l = 0; l < 8; l++) {
        const int bb[4] = {b0, b1, b2, b3};
        for (int k = 0; k < 4; k++)
            v[4 * l + k] = bb[k] < 0 ? (char)0x80 : (char)(4 * (l & 3) + bb[k]);
    }
    __m256i r;
    memcpy(&r, v, sizeof r);
    return r;
}

QX_INLINE void unpack256(tr_dtype t, const uint8_t *const p[8], __m256i *u) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    if (t == TR_DTYPE_Q6_K) {
        for (int n = 0; n < 2; n++) {
            __m256i ql[16], qh[8];
            for (int c = 0; c < 4; c++) ld_t8x4(p, 64 * n + 16 * c, ql + 4 * c);
            ld_t8x4(p, 128 + 32 * n, qh);
            ld_t8x4(p, 128 + 32 * n + 16, qh + 4);
            const __m256i m30 = _mm256_set1_epi8(0x30);
            for (int j = 0; j < 8; j++) {
                __m256i a = ql[j], b = ql[j + 8], h = qh[j];
                u[32 * n + j] = _mm256_or_si256(_mm256_and_si256(a, m4),
                                                _mm256_and_si256(_mm256_slli_epi16(h, 4), m30));
                u[32 * n + 8 + j] = _mm256_or_si256(_mm256_and_si256(b, m4),
                                                    _mm256_and_si256(_mm256_slli_epi16(h, 2), m30));
                u[32 * n + 16 + j] = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_and_si256(h, m30));
                u[32 * n + 24 + j] = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(b, 4), m4),
                    _mm256_and_si256(_mm256_srli_epi16(h, 2), m30));
            }
        }
        __m256i sc[4];
        ld_t8x4(p, 192, sc);
        for (int s = 0; s < 16; s++) /* sign-extended int16 [sc, sc] */
            u[64 + s] = _mm256_srai_epi16(
                _mm256_shuffle_epi8(sc[s >> 2], shuf_z(-1, s & 3, -1, s & 3)), 8);
        for (int q = 0; q < 8; q++)
            u[80 + q] = _mm256_srai_epi16(
                _mm256_shuffle_epi8(sc[q >> 1], shuf_z(-1, 2 * (q & 1), -1, 2 * (q & 1) + 1)), 8);
        u[88] = _mm256_castps_si256(h2f_hi(ld_t8x1(p, 206)));
        return;
    }
    /* Q4_K / Q5_K */
    __m256i h[4];
    ld_t8x4(p, 0, h); /* h[0] = d | dmin << 16, h[1..3] = the 12 scale bytes */
    const __m256i m6 = _mm256_set1_epi8(0x3f), m2 = _mm256_set1_epi8(0x03);
    __m256i sc_lo = _mm256_and_si256(h[1], m6), m_lo = _mm256_and_si256(h[2], m6);
    __m256i sc_hi = _mm256_or_si256(
        _mm256_and_si256(h[3], m4),
        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h[1], 6), m2), 4));
    __m256i m_hi = _mm256_or_si256(
        _mm256_and_si256(_mm256_srli_epi16(h[3], 4), m4),
        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h[2], 6), m2), 4));
    for (int s = 0; s < 8; s++)
        u[64 + s] = _mm256_shuffle_epi8(s < 4 ? sc_lo : sc_hi, shuf_z(s & 3, -1, s & 3, -1));
    for (int q = 0; q < 4; q++)
        u[72 + q] = _mm256_shuffle_epi8(q < 2 ? m_lo : m_hi,
                                        shuf_z(2 * (q & 1), -1, 2 * (q & 1) + 1, -1));
    u[76] = _mm256_castps_si256(h2f_lo(h[0]));
    u[77] = _mm256_castps_si256(h2f_hi(h[0]));
    const bool five = t == TR_DTYPE_Q5_K;
    __m256i qh[8];
    if (five) {
        ld_t8x4(p, 16, qh);
        ld_t8x4(p, 32, qh + 4);
    }
    const size_t qoff = five ? 48 : 16;
    const __m256i m10 = _mm256_set1_epi8(0x10);
    for (int c = 0; c < 4; c++) {
        __m256i q[8];
        ld_t8x4(p, qoff + 32 * c, q);
        ld_t8x4(p, qoff + 32 * c + 16, q + 4);
        for (int j = 0; j < 8; j++) {
            __m256i lo = _mm256_and_si256(q[j], m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q[j], 4), m4);
            if (five) {
                const int s0 = 2 * c, s1 = 2 * c + 1; /* qh bit -> bit 4 */
                __m256i b0 = s0 <= 4 ? _mm256_slli_epi32(qh[j], 4 - s0)
                                     : _mm256_srli_epi32(qh[j], s0 - 4);
                __m256i b1 = s1 <= 4 ? _mm256_slli_epi32(qh[j], 4 - s1)
                                     : _mm256_srli_epi32(qh[j], s1 - 4);
                lo = _mm256_or_si256(lo, _mm256_and_si256(b0, m10));
                hi = _mm256_or_si256(hi, _mm256_and_si256(b1, m10));
            }
            u[8 * (2 * c) + j] = lo;
            u[8 * (2 * c + 1) + j] = hi;
        }
    }
}

/* One token's update for one unpacked 256-block. */
QX_INLINE __m256 upd256(tr_dtype t, const __m256i *u, __m256 acc,
                        const int8_t *x, float dx, const int16_t *bs16,
                        const int16_t *bs32) {
    __m256i isum = _mm256_setzero_si256();
    if (t == TR_DTYPE_Q6_K) {
        for (int s = 0; s < 16; s++) {
            const __m256i *g = u + 4 * s;
            const int8_t *xs = x + 16 * s;
            __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_load_si256(g), bc32(xs)),
                                          _mm256_maddubs_epi16(_mm256_load_si256(g + 1), bc32(xs + 4)));
            __m256i p2 = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_load_si256(g + 2), bc32(xs + 8)),
                                          _mm256_maddubs_epi16(_mm256_load_si256(g + 3), bc32(xs + 12)));
            __m256i sc = _mm256_load_si256(u + 64 + s);
            isum = _mm256_add_epi32(isum, _mm256_add_epi32(_mm256_madd_epi16(p1, sc),
                                                           _mm256_madd_epi16(p2, sc)));
        }
        __m256i corr = _mm256_setzero_si256();
        for (int q = 0; q < 8; q++)
            corr = _mm256_add_epi32(corr, _mm256_madd_epi16(_mm256_load_si256(u + 80 + q),
                                                            bc32(bs16 + 2 * q)));
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(corr, 5));
        __m256 dv = _mm256_castsi256_ps(_mm256_load_si256(u + 88));
        return _mm256_fmadd_ps(_mm256_mul_ps(dv, _mm256_set1_ps(dx)),
                               _mm256_cvtepi32_ps(isum), acc);
    }
    const bool five = t == TR_DTYPE_Q5_K;
    for (int s = 0; s < 8; s++) {
        const __m256i *g = u + 8 * s;
        const int8_t *xs = x + 32 * s;
        __m256i pa = _mm256_setzero_si256(), pb = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            __m256i pr = _mm256_maddubs_epi16(_mm256_load_si256(g + j), bc32(xs + 4 * j));
            if (five && j >= 4)
                pb = _mm256_add_epi16(pb, pr);
            else
                pa = _mm256_add_epi16(pa, pr);
        }
        __m256i sc = _mm256_load_si256(u + 64 + s);
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pa, sc));
        if (five) isum = _mm256_add_epi32(isum, _mm256_madd_epi16(pb, sc));
    }
    __m256i imin = _mm256_setzero_si256();
    for (int q = 0; q < 4; q++)
        imin = _mm256_add_epi32(imin, _mm256_madd_epi16(_mm256_load_si256(u + 72 + q),
                                                        bc32(bs32 + 2 * q)));
    __m256 dxv = _mm256_set1_ps(dx);
    __m256 a = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_load_si256(u + 76)), dxv);
    __m256 b = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_load_si256(u + 77)), dxv);
    __m256 v = _mm256_fmsub_ps(a, _mm256_cvtepi32_ps(isum),
                               _mm256_mul_ps(b, _mm256_cvtepi32_ps(imin)));
    return _mm256_add_ps(acc, v);
}

QX_INLINE float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

QX_INLINE int32_t hsum8i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* Q6_K decode GEMV (one token): row by row, no transpose. The 8-row
 * transposed unpack above pays off when a token tile reuses it; for one
 * token its shuffles cost more than the dot itself (measured: Gemma's
 * 2048->640 down projection ran at 2.9 GB/s, 1/3 of the Q4_K GEMV). Per
 * block: q (6-bit, unsigned) times x by vpmaddubsw, 32 elements (two
 * 16-element sub-blocks) at a time, times the two sub-blocks' scales by
 * vpmaddwd; the -32 offset through the activation's 16-sums; one
 * horizontal sum gives the block's exact int32, folded into the row's
 * float accumulator with quant_math_internal.h's Q6_K update. Same integers, same float
 * operations in the same order: bitwise the tiled path's result. */
QX_INLINE int32_t q6k_block_dot(const uint8_t *b, const int8_t *x, const int16_t *bs16) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(0x03);
    const int8_t *sc = (const int8_t *)(b + 192);
    __m256i acc = _mm256_setzero_si256();
    for (int n = 0; n < 2; n++) {
        const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b + 64 * n));
        const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b + 64 * n + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * n));
        const __m256i q[4] = {
            _mm256_or_si256(_mm256_and_si256(ql0, m4),
                            _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4)),
            _mm256_or_si256(_mm256_and_si256(ql1, m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4)),
        };
        for (int k = 0; k < 4; k++) {
            const int s0 = 8 * n + 2 * k; /* sub-blocks s0, s0 + 1 */
            __m256i xv = _mm256_loadu_si256((const __m256i *)(x + 128 * n + 32 * k));
            __m256i p = _mm256_maddubs_epi16(q[k], xv); /* pairs <= 2*63*127 */
            __m256i scv = _mm256_setr_m128i(_mm_set1_epi16(sc[s0]), _mm_set1_epi16(sc[s0 + 1]));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scv));
        }
    }
    /* - 32 * sum_s sc_s * bsum16_s */
    __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
    __m256i corr = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)bs16));
    acc = _mm256_sub_epi32(acc, _mm256_slli_epi32(corr, 5));
    return hsum8i(acc);
}

QX_INLINE void gemv_q6k(const uint8_t *w, size_t wrb, int64_t cols, const uint8_t *xr,
                        float *out, int64_t r0, int64_t r1, bool accumulate) {
    const int64_t nb = cols / 256;
    const int8_t *xq = cpu_a256_q(xr);
    const float *dx = cpu_a256_d(xr, nb);
    const int16_t *bs = cpu_a256_bsum16(xr, nb);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = w + (size_t)r * wrb;
        /* the row after next, spread over this row's blocks (a prefetch
         * never faults, even past the matrix) */
        const char *pf = (const char *)((uintptr_t)row + 2 * wrb);
        float acc = 0.0f;
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *blk = row + (size_t)b * 210;
            for (size_t o = (size_t)b * wrb / (size_t)nb; o < (size_t)(b + 1) * wrb / (size_t)nb;
                 o += 64)
                _mm_prefetch(pf + o, _MM_HINT_T0);
            int32_t isum = q6k_block_dot(blk, xq + b * 256, bs + b * 16);
            acc = fmaf(cpu_rdh(blk + 208) * dx[b], (float)isum, acc);
        }
        cpu_q_store(&out[r], acc, accumulate);
    }
}

QX_INLINE void mm256(tr_dtype t, const uint8_t *w, size_t wrb, int64_t cols,
                     const uint8_t *xq, size_t xs, int n_tok, float *out,
                     size_t os, int64_t r0, int64_t r1, bool accumulate) {
    const int64_t nb = cols / 256;
    const size_t tsz = tr_dtype_type_size(t);
    if (t == TR_DTYPE_Q6_K && n_tok == 1) {
        gemv_q6k(w, wrb, cols, xq, out, r0, r1, accumulate);
        return;
    }
    __m256i buf[QX_KC256 * QX_K_NVEC];
    float accbuf[QX_TT * 8] __attribute__((aligned(32)));

    for (int64_t rg = r0; rg < r1; rg += 8) {
        const int nr = r1 - rg < 8 ? (int)(r1 - rg) : 8;
        const uint8_t *rows[8];
        for (int i = 0; i < 8; i++)
            rows[i] = w + (size_t)(i < nr ? rg + i : r1 - 1) * wrb;
        const qx_prefetch pf = next_tile(w, wrb, rg + 8, 8);
        for (int t0 = 0; t0 < n_tok; t0 += QX_TT) {
            const int tn = n_tok - t0 < QX_TT ? n_tok - t0 : QX_TT;
            for (int64_t kb = 0; kb < nb; kb += QX_KC256) {
                const int kn = nb - kb < QX_KC256 ? (int)(nb - kb) : QX_KC256;
                for (int b = 0; b < kn; b++) {
                    const uint8_t *p[8];
                    for (int i = 0; i < 8; i++) p[i] = rows[i] + (size_t)(kb + b) * tsz;
                    if (t0 == 0) prefetch_part(&pf, kb + b, nb);
                    unpack256(t, p, buf + b * QX_K_NVEC);
                }
                for (int k = 0; k < tn; k++) {
                    const uint8_t *xr = xq + (size_t)(t0 + k) * xs;
                    __m256 acc = kb == 0 ? _mm256_setzero_ps() : _mm256_load_ps(accbuf + k * 8);
                    for (int b = 0; b < kn; b++) {
                        const int64_t bi = kb + b;
                        acc = upd256(t, buf + b * QX_K_NVEC, acc, cpu_a256_q(xr) + bi * 256,
                                     cpu_a256_d(xr, nb)[bi], cpu_a256_bsum16(xr, nb) + bi * 16,
                                     cpu_a256_bsum32(xr, nb) + bi * 8);
                    }
                    _mm256_store_ps(accbuf + k * 8, acc);
                }
            }
            for (int k = 0; k < tn; k++)
                store_rows(out + (size_t)(t0 + k) * os + rg,
                           _mm256_load_ps(accbuf + k * 8), nr, accumulate);
        }
    }
}

/* =====================================================================
 * Float weights: F32 F16 BF16. Tiles of 4 rows x 3 tokens, one 8-lane
 * accumulator per (row, token), lanes summed by cpu_q_lane_sum.
 * ===================================================================== */

QX_INLINE __m256 ldw8(tr_dtype t, const uint8_t *row, int64_t k) {
    switch (t) {
    case TR_DTYPE_F32:
        return _mm256_loadu_ps((const float *)(row + 4 * k));
    case TR_DTYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * k)));
    default:
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + 2 * k))), 16));
    }
}

/* The last, partial chunk of 8 (n < 8 elements left), zero-padded. */
QX_INLINE __m256 ldw8_tail(tr_dtype t, const uint8_t *row, int64_t k, int n) {
    uint8_t tmp[32] __attribute__((aligned(32))) = {0};
    const int esz = t == TR_DTYPE_F32 ? 4 : 2;
    memcpy(tmp, row + esz * k, (size_t)(n * esz));
    return ldw8(t, tmp, 0);
}

QX_INLINE void mmf(tr_dtype t, const uint8_t *w, size_t wrb, int64_t cols,
                   const uint8_t *xq, size_t xs, int n_tok, float *out,
                   size_t os, int64_t r0, int64_t r1, bool accumulate) {
    const int64_t full = cols / 8 * 8;
    const int tail = (int)(cols - full);
    for (int64_t rg = r0; rg < r1; rg += 4) {
        const int nr = r1 - rg < 4 ? (int)(r1 - rg) : 4;
        const uint8_t *rows[4];
        for (int i = 0; i < 4; i++)
            rows[i] = w + (size_t)(i < nr ? rg + i : r1 - 1) * wrb;
        for (int t0 = 0; t0 < n_tok; t0 += 3) {
            const int tn = n_tok - t0 < 3 ? n_tok - t0 : 3;
            const float *x[3];
            for (int j = 0; j < 3; j++)
                x[j] = (const float *)(xq + (size_t)(t0 + (j < tn ? j : tn - 1)) * xs);
            __m256 acc[4][3];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 3; j++) acc[i][j] = _mm256_setzero_ps();
            for (int64_t k = 0; k < full; k += 8) {
                __m256 wv[4];
                for (int i = 0; i < 4; i++) wv[i] = ldw8(t, rows[i], k);
                for (int j = 0; j < 3; j++) {
                    __m256 xv = _mm256_loadu_ps(x[j] + k);
                    for (int i = 0; i < 4; i++) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
                }
            }
            if (tail) {
                for (int i = 0; i < 4; i++) {
                    __m256 wv = ldw8_tail(t, rows[i], full, tail);
                    for (int j = 0; j < 3; j++)
                        acc[i][j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[j] + full), acc[i][j]);
                }
            }
            for (int j = 0; j < tn; j++) {
                for (int i = 0; i < nr; i++) {
                    float l[8];
                    _mm256_storeu_ps(l, acc[i][j]);
                    cpu_q_store(&out[(size_t)(t0 + j) * os + rg + i], cpu_q_lane_sum(l),
                                accumulate);
                }
            }
        }
    }
}

/* ---- entry points ---- */

static void QX_NAME(matmul_tile)(tr_dtype wtype, const void *w, size_t w_row_bytes,
                                 int64_t cols, const void *xq, size_t xq_stride,
                                 int n_tok, float *out, size_t out_stride,
                                 int64_t r0, int64_t r1, bool accumulate) {
    if (n_tok <= 0 || r1 <= r0) return;
    const uint8_t *wb = (const uint8_t *)w, *xb = (const uint8_t *)xq;
#define QX_CASE(T, F)                                                         \
    case T:                                                                   \
        F(T, wb, w_row_bytes, cols, xb, xq_stride, n_tok, out, out_stride, r0, \
          r1, accumulate);                                                    \
        break;
    switch (wtype) {
        QX_CASE(TR_DTYPE_Q4_0, mm32)
        QX_CASE(TR_DTYPE_Q4_1, mm32)
        QX_CASE(TR_DTYPE_Q5_0, mm32)
        QX_CASE(TR_DTYPE_Q5_1, mm32)
        QX_CASE(TR_DTYPE_Q8_0, mm32)
        QX_CASE(TR_DTYPE_Q4_K, mm256)
        QX_CASE(TR_DTYPE_Q5_K, mm256)
        QX_CASE(TR_DTYPE_Q6_K, mm256)
        QX_CASE(TR_DTYPE_F32, mmf)
        QX_CASE(TR_DTYPE_F16, mmf)
        QX_CASE(TR_DTYPE_BF16, mmf)
    default:
        break;
    }
#undef QX_CASE
}

static void QX_NAME(matmul_tile_r16)(tr_dtype wtype, const void *w, size_t w_row_bytes,
                                     int64_t cols, const void *xq, size_t xq_stride,
                                     int n_tok, float *out, size_t out_stride,
                                     int64_t r0, int64_t r1, bool accumulate) {
    if (n_tok <= 0 || r1 <= r0) return;
    const uint8_t *wb = (const uint8_t *)w, *xb = (const uint8_t *)xq;
#define QX_CASE(T)                                                                        \
    case T:                                                                               \
        mm32_r16(T, wb, w_row_bytes, cols, xb, xq_stride, n_tok, out, out_stride, r0, r1, \
                 accumulate);                                                             \
        break;
    switch (wtype) {
        QX_CASE(TR_DTYPE_Q4_0)
        QX_CASE(TR_DTYPE_Q4_1)
        QX_CASE(TR_DTYPE_Q5_0)
        QX_CASE(TR_DTYPE_Q5_1)
        QX_CASE(TR_DTYPE_Q8_0)
    default:
        break;
    }
#undef QX_CASE
}

/* ---- activation quantization ---- */

/* Quantizes n (a multiple of 32) floats with one shared scale (the rule
 * of quant_internal.h); returns d; *sum = sum of q. */
static float quant_blk(const float *x, int n, int8_t *q, int32_t *sum) {
    const __m256 sign = _mm256_set1_ps(-0.0f), inf = _mm256_set1_ps(INFINITY);
    __m256 amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) {
        __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i));
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ));
        amax = _mm256_max_ps(amax, a);
    }
    float am = hmax8(amax);
    const bool finite = _mm256_movemask_ps(bad) == 0;
    if (!finite || am < CPU_ACT_TINY) {
        memset(q, 0, (size_t)n);
        *sum = 0;
        return finite ? 0.0f : NAN;
    }
    const __m256 id = _mm256_set1_ps(127.0f / am);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256i s = _mm256_setzero_si256();
    for (int i = 0; i < n; i += 32) {
        __m256i v0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), id));
        __m256i v1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), id));
        __m256i v2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 16), id));
        __m256i v3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 24), id));
        s = _mm256_add_epi32(s, _mm256_add_epi32(_mm256_add_epi32(v0, v1), _mm256_add_epi32(v2, v3)));
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
        _mm256_storeu_si256((__m256i *)(q + i), _mm256_permutevar8x32_epi32(p, perm));
    }
    *sum = hsum8i(s);
    return am / 127.0f;
}

static void QX_NAME(quantize_act_row)(tr_dtype wtype, const float *x, void *dst,
                                      int64_t cols) {
    char *row = (char *)dst;
    switch (cpu_q_act_kind(wtype)) {
    case CPU_ACT_A32: {
        const int64_t nb = cols / 32;
        int8_t *q = (int8_t *)row;
        float *d = (float *)(row + nb * 32), *s = (float *)(row + nb * 36);
        int32_t *sum = (int32_t *)(row + nb * 40);
        for (int64_t b = 0; b < nb; b++) {
            int32_t acc;
            d[b] = quant_blk(x + b * 32, 32, q + b * 32, &acc);
            sum[b] = acc;
            s[b] = d[b] * (float)acc;
        }
        break;
    }
    case CPU_ACT_A256: {
        const int64_t nb = cols / 256;
        int8_t *q = (int8_t *)row;
        float *d = (float *)(row + nb * 256);
        int16_t *bs16 = (int16_t *)(row + nb * 260);
        int16_t *bs32 = (int16_t *)(row + nb * 292);
        for (int64_t b = 0; b < nb; b++) {
            int32_t total;
            d[b] = quant_blk(x + b * 256, 256, q + b * 256, &total);
            const int8_t *qb = q + b * 256;
            for (int sb = 0; sb < 16; sb++) {
                /* 16 bytes -> sum via sad against zero after biasing */
                __m128i v = _mm_loadu_si128((const __m128i *)(qb + 16 * sb));
                __m128i u = _mm_xor_si128(v, _mm_set1_epi8((char)0x80));
                __m128i sad = _mm_sad_epu8(u, _mm_setzero_si128());
                int su = _mm_cvtsi128_si32(sad) + _mm_extract_epi16(sad, 4);
                bs16[b * 16 + sb] = (int16_t)(su - 16 * 128);
            }
            for (int sb = 0; sb < 8; sb++)
                bs32[b * 8 + sb] = (int16_t)(bs16[b * 16 + 2 * sb] + bs16[b * 16 + 2 * sb + 1]);
        }
        break;
    }
    case CPU_ACT_FLOAT: {
        const int64_t padded = (cols + 7) / 8 * 8;
        memcpy(row, x, (size_t)cols * sizeof(float));
        memset(row + cols * 4, 0, (size_t)(padded - cols) * sizeof(float));
        break;
    }
    default:
        break;
    }
}

const cpu_quant_kernels QX_NAME(tr_cpu_quant_kernels) = {
#ifdef QX_VNNI
    .name = "avx512vnni",
#else
    .name = "avx2",
#endif
    .quantize_act_row = QX_NAME(quantize_act_row),
    .matmul_tile = QX_NAME(matmul_tile),
    .matmul_tile_r16 = QX_NAME(matmul_tile_r16),
    .dequantize_row = tr_cpu_q_dequantize_row_portable,
};
