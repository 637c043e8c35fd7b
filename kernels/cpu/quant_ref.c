/* quant_ref.c — the portable (plain C) kernel set of quant_math_internal.h, the choice
 * of kernel set at run time, and the dequantizers every set shares.
 *
 * Layering: internal to kernels/cpu. These loops are also the reference
 * the SIMD sets are tested against bit for bit, so they follow quant_math_internal.h's
 * arithmetic literally (integer block dots, then fmaf in block order) and
 * favour clarity over speed; they still decode each weight block once per
 * group of up to 64 tokens rather than once per (row, token).
 *
 * Thread-safety: pure functions; tr_cpu_quant_select only reads CPU features.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_features_internal.h"
#include "kernels/cpu/quant_internal.h"

/* ---- sizes ---- */

bool tr_cpu_quant_supported(tr_dtype wtype, int64_t cols) {
    cpu_act_kind k = cpu_q_act_kind(wtype);
    if (k == CPU_ACT_NONE || cols <= 0 || cols > ((int64_t)1 << 24))
        return false;
    int64_t bs = tr_dtype_block_size(wtype);
    return bs > 0 && cols % bs == 0;
}

size_t tr_cpu_quant_act_row_bytes(tr_dtype wtype, int64_t cols) {
    if (!tr_cpu_quant_supported(wtype, cols)) return 0;
    size_t n;
    switch (cpu_q_act_kind(wtype)) {
    case CPU_ACT_A32:
        n = (size_t)(cols / 32) * 44;
        break;
    case CPU_ACT_A256:
        n = (size_t)(cols / 256) * 308;
        break;
    default:
        n = (size_t)((cols + 7) / 8 * 8) * sizeof(float);
        break;
    }
    return (n + 63) / 64 * 64;
}

/* ---- fp16 / bf16 rows ---- */

void tr_cpu_fp16_to_fp32_row(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = cpu_fp16_to_fp32(src[i]);
}

void tr_cpu_fp32_to_fp16_row(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = cpu_fp32_to_fp16(src[i]);
}

void tr_cpu_bf16_to_fp32_row(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = cpu_bf16_to_fp32(src[i]);
}

/* ---- dequantization (exact; shared by every set) ---- */

static void deq_32(tr_dtype t, const uint8_t *b, float *y) {
    switch (t) {
    case TR_DTYPE_Q4_0: {
        float d = cpu_rdh(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)((qs[j] & 15) - 8);
            y[j + 16] = d * (float)((qs[j] >> 4) - 8);
        }
        break;
    }
    case TR_DTYPE_Q4_1: {
        float d = cpu_rdh(b), m = cpu_rdh(b + 2);
        const uint8_t *qs = b + 4;
        for (int j = 0; j < 16; j++) {
            y[j] = fmaf(d, (float)(qs[j] & 15), m);
            y[j + 16] = fmaf(d, (float)(qs[j] >> 4), m);
        }
        break;
    }
    case TR_DTYPE_Q5_0: {
        float d = cpu_rdh(b);
        uint32_t qh = cpu_rd32(b + 2);
        const uint8_t *qs = b + 6;
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
            int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = d * (float)(lo - 16);
            y[j + 16] = d * (float)(hi - 16);
        }
        break;
    }
    case TR_DTYPE_Q5_1: {
        float d = cpu_rdh(b), m = cpu_rdh(b + 2);
        uint32_t qh = cpu_rd32(b + 4);
        const uint8_t *qs = b + 8;
        for (int j = 0; j < 16; j++) {
            int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
            int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = fmaf(d, (float)lo, m);
            y[j + 16] = fmaf(d, (float)hi, m);
        }
        break;
    }
    default: { /* Q8_0 */
        float d = cpu_rdh(b);
        const int8_t *qs = (const int8_t *)(b + 2);
        for (int j = 0; j < 32; j++) y[j] = d * (float)qs[j];
        break;
    }
    }
}

/* Decodes a K-quant block's quants (unsigned, natural element order) and
 * per-sub-block integer scales: Q4_K/Q5_K fill sc[8], m[8] (32 values per
 * sub-block); Q6_K fills sc[16] (16 values per sub-block), m unused. */
static void kblock_decode(tr_dtype t, const uint8_t *b, uint8_t q[256],
                          int sc[16], int m[8]) {
    if (t == TR_DTYPE_Q6_K) {
        const int8_t *s = (const int8_t *)(b + 192);
        for (int i = 0; i < 16; i++) sc[i] = s[i];
        for (int n = 0; n < 2; n++) {
            const uint8_t *ql = b + 64 * n, *qh = b + 128 + 32 * n;
            uint8_t *y = q + 128 * n;
            for (int l = 0; l < 32; l++) {
                y[l] = (uint8_t)((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4);
                y[l + 32] = (uint8_t)((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4);
                y[l + 64] = (uint8_t)((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4);
                y[l + 96] = (uint8_t)((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4);
            }
        }
        return;
    }
    const uint8_t *scales = b + 4;
    for (int j = 0; j < 8; j++) cpu_q_kscale(scales, j, &sc[j], &m[j]);
    const uint8_t *qh = t == TR_DTYPE_Q5_K ? b + 16 : NULL;
    const uint8_t *qs = t == TR_DTYPE_Q5_K ? b + 48 : b + 16;
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            int lo = qs[32 * c + l] & 15, hi = qs[32 * c + l] >> 4;
            if (qh) {
                lo |= ((qh[l] >> (2 * c)) & 1) << 4;
                hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
            }
            q[64 * c + l] = (uint8_t)lo;
            q[64 * c + 32 + l] = (uint8_t)hi;
        }
    }
}

static void deq_256(tr_dtype t, const uint8_t *b, float *y) {
    uint8_t q[256];
    int sc[16], m[8];
    kblock_decode(t, b, q, sc, m);
    if (t == TR_DTYPE_Q6_K) {
        float d = cpu_rdh(b + 208);
        for (int e = 0; e < 256; e++)
            y[e] = d * (float)(sc[e / 16] * (q[e] - 32));
        return;
    }
    float d = cpu_rdh(b), dmin = cpu_rdh(b + 2);
    for (int e = 0; e < 256; e++) {
        int s = e / 32;
        /* d*sc and dmin*m are exact products of an fp16 and a 6-bit
         * integer; one fma then rounds the element once */
        y[e] = fmaf(d * (float)sc[s], (float)q[e], -(dmin * (float)m[s]));
    }
}

void tr_cpu_q_dequantize_row_portable(tr_dtype type, const void *src,
                                   float *dst, int64_t n) {
    const uint8_t *b = (const uint8_t *)src;
    switch (type) {
    case TR_DTYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    case TR_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = cpu_fp16_to_fp32(cpu_rd16(b + 2 * i));
        return;
    case TR_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = cpu_bf16_to_fp32(cpu_rd16(b + 2 * i));
        return;
    default:
        break;
    }
    int64_t bs = tr_dtype_block_size(type), tsz = tr_dtype_type_size(type);
    if (bs == 0) return;
    for (int64_t i = 0; i < n / bs; i++) {
        if (bs == 32)
            deq_32(type, b + i * tsz, dst + i * 32);
        else
            deq_256(type, b + i * tsz, dst + i * 256);
    }
}

/* ---- activation quantization ---- */

/* Quantizes n values (32 or 256) with the shared scale rule; returns d and
 * writes q. */
static float quant_block(const float *x, int n, int8_t *q) {
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (!(a <= 3.402823466e38f)) finite = false; /* inf or NaN */
        if (a > amax) amax = a;
    }
    if (!finite || amax < CPU_ACT_TINY) {
        memset(q, 0, (size_t)n);
        return finite ? 0.0f : NAN;
    }
    float id = 127.0f / amax;
    for (int i = 0; i < n; i++) {
        float v = nearbyintf(x[i] * id); /* |v| <= 127 by construction */
        q[i] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
    }
    return amax / 127.0f;
}

static void quantize_act_row_portable(tr_dtype wtype, const float *x,
                                      void *dst, int64_t cols) {
    char *row = (char *)dst;
    switch (cpu_q_act_kind(wtype)) {
    case CPU_ACT_A32: {
        int64_t nb = cols / 32;
        int8_t *q = (int8_t *)row;
        float *d = (float *)(row + nb * 32), *s = (float *)(row + nb * 36);
        int32_t *sum = (int32_t *)(row + nb * 40);
        for (int64_t b = 0; b < nb; b++) {
            d[b] = quant_block(x + b * 32, 32, q + b * 32);
            int32_t acc = 0;
            for (int i = 0; i < 32; i++) acc += q[b * 32 + i];
            sum[b] = acc;
            s[b] = d[b] * (float)acc;
        }
        break;
    }
    case CPU_ACT_A256: {
        int64_t nb = cols / 256;
        int8_t *q = (int8_t *)row;
        float *d = (float *)(row + nb * 256);
        int16_t *bs16 = (int16_t *)(row + nb * 260);
        int16_t *bs32 = (int16_t *)(row + nb * 292);
        for (int64_t b = 0; b < nb; b++) {
            d[b] = quant_block(x + b * 256, 256, q + b * 256);
            for (int s = 0; s < 16; s++) {
                int acc = 0;
                for (int i = 0; i < 16; i++) acc += q[b * 256 + s * 16 + i];
                bs16[b * 16 + s] = (int16_t)acc;
            }
            for (int s = 0; s < 8; s++)
                bs32[b * 8 + s] = (int16_t)(bs16[b * 16 + 2 * s] + bs16[b * 16 + 2 * s + 1]);
        }
        break;
    }
    case CPU_ACT_FLOAT: {
        int64_t padded = (cols + 7) / 8 * 8;
        memcpy(row, x, (size_t)cols * sizeof(float));
        memset(row + cols * 4, 0, (size_t)(padded - cols) * sizeof(float));
        break;
    }
    default:
        break;
    }
}

/* ---- matmul ---- */

#define TOK_TILE 64

/* One 32-block of a weight row: unsigned (or, for Q8_0, signed) quants in
 * element order, the offset subtracted from them, and the scales. */
typedef struct blk32 {
    int16_t q[32];
    int off;     /* 8 (Q4_0), 16 (Q5_0), 0 otherwise */
    bool has_m;  /* Q4_1, Q5_1 */
    float d, m;
} blk32;

static void blk32_decode(tr_dtype t, const uint8_t *b, blk32 *o) {
    o->off = 0;
    o->has_m = false;
    o->m = 0.0f;
    o->d = cpu_rdh(b);
    switch (t) {
    case TR_DTYPE_Q4_0:
    case TR_DTYPE_Q4_1: {
        bool one = t == TR_DTYPE_Q4_1;
        const uint8_t *qs = b + (one ? 4 : 2);
        for (int j = 0; j < 16; j++) {
            o->q[j] = qs[j] & 15;
            o->q[j + 16] = qs[j] >> 4;
        }
        if (one) {
            o->has_m = true;
            o->m = cpu_rdh(b + 2);
        } else {
            o->off = 8;
        }
        break;
    }
    case TR_DTYPE_Q5_0:
    case TR_DTYPE_Q5_1: {
        bool one = t == TR_DTYPE_Q5_1;
        uint32_t qh = cpu_rd32(b + (one ? 4 : 2));
        const uint8_t *qs = b + (one ? 8 : 6);
        for (int j = 0; j < 16; j++) {
            o->q[j] = (int16_t)((qs[j] & 15) | ((qh >> j) & 1) << 4);
            o->q[j + 16] = (int16_t)((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
        }
        if (one) {
            o->has_m = true;
            o->m = cpu_rdh(b + 2);
        } else {
            o->off = 16;
        }
        break;
    }
    default: { /* Q8_0 */
        const int8_t *qs = (const int8_t *)(b + 2);
        for (int j = 0; j < 32; j++) o->q[j] = qs[j];
        break;
    }
    }
}

static void mm_a32(tr_dtype t, const uint8_t *w, size_t wrb, int64_t cols,
                   const uint8_t *xq, size_t xs, int n_tok, float *out,
                   size_t os, int64_t r0, int64_t r1, bool accumulate) {
    int64_t nb = cols / 32;
    size_t tsz = tr_dtype_type_size(t);
    float acc[TOK_TILE];
    blk32 blk;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *wr = w + (size_t)r * wrb;
        for (int t0 = 0; t0 < n_tok; t0 += TOK_TILE) {
            int tn = n_tok - t0 < TOK_TILE ? n_tok - t0 : TOK_TILE;
            for (int i = 0; i < tn; i++) acc[i] = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                blk32_decode(t, wr + b * tsz, &blk);
                for (int i = 0; i < tn; i++) {
                    const uint8_t *xr = xq + (size_t)(t0 + i) * xs;
                    const int8_t *q = cpu_a32_q(xr) + b * 32;
                    int32_t dot = 0;
                    for (int j = 0; j < 32; j++) dot += blk.q[j] * q[j];
                    dot -= blk.off * cpu_a32_sum(xr, nb)[b];
                    float dx = cpu_a32_d(xr, nb)[b];
                    if (blk.has_m)
                        acc[i] = acc[i] + fmaf(blk.d * dx, (float)dot,
                                               blk.m * cpu_a32_s(xr, nb)[b]);
                    else
                        acc[i] = fmaf(blk.d * dx, (float)dot, acc[i]);
                }
            }
            for (int i = 0; i < tn; i++)
                cpu_q_store(&out[(size_t)(t0 + i) * os + r], acc[i], accumulate);
        }
    }
}

static void mm_a256(tr_dtype t, const uint8_t *w, size_t wrb, int64_t cols,
                    const uint8_t *xq, size_t xs, int n_tok, float *out,
                    size_t os, int64_t r0, int64_t r1, bool accumulate) {
    int64_t nb = cols / 256;
    size_t tsz = tr_dtype_type_size(t);
    bool q6 = t == TR_DTYPE_Q6_K;
    float acc[TOK_TILE];
    uint8_t q[256];
    int sc[16], m[8];
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *wr = w + (size_t)r * wrb;
        for (int t0 = 0; t0 < n_tok; t0 += TOK_TILE) {
            int tn = n_tok - t0 < TOK_TILE ? n_tok - t0 : TOK_TILE;
            for (int i = 0; i < tn; i++) acc[i] = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = wr + b * tsz;
                kblock_decode(t, blk, q, sc, m);
                for (int i = 0; i < tn; i++) {
                    const uint8_t *xr = xq + (size_t)(t0 + i) * xs;
                    const int8_t *x = cpu_a256_q(xr) + b * 256;
                    float dx = cpu_a256_d(xr, nb)[b];
                    int32_t isum = 0;
                    if (q6) {
                        const int16_t *bs = cpu_a256_bsum16(xr, nb) + b * 16;
                        int32_t corr = 0;
                        for (int s = 0; s < 16; s++) {
                            int32_t dot = 0;
                            for (int j = 0; j < 16; j++) dot += q[16 * s + j] * x[16 * s + j];
                            isum += sc[s] * dot;
                            corr += sc[s] * bs[s];
                        }
                        isum -= 32 * corr;
                        acc[i] = fmaf(cpu_rdh(blk + 208) * dx, (float)isum, acc[i]);
                    } else {
                        const int16_t *bs = cpu_a256_bsum32(xr, nb) + b * 8;
                        int32_t imin = 0;
                        for (int s = 0; s < 8; s++) {
                            int32_t dot = 0;
                            for (int j = 0; j < 32; j++) dot += q[32 * s + j] * x[32 * s + j];
                            isum += sc[s] * dot;
                            imin += m[s] * bs[s];
                        }
                        float mn = (cpu_rdh(blk + 2) * dx) * (float)imin;
                        acc[i] = acc[i] + fmaf(cpu_rdh(blk) * dx, (float)isum, -mn);
                    }
                }
            }
            for (int i = 0; i < tn; i++)
                cpu_q_store(&out[(size_t)(t0 + i) * os + r], acc[i], accumulate);
        }
    }
}

static inline float wfloat(tr_dtype t, const uint8_t *row, int64_t k) {
    switch (t) {
    case TR_DTYPE_F32: {
        float f;
        memcpy(&f, row + 4 * k, sizeof f);
        return f;
    }
    case TR_DTYPE_F16:
        return cpu_fp16_to_fp32(cpu_rd16(row + 2 * k));
    default:
        return cpu_bf16_to_fp32(cpu_rd16(row + 2 * k));
    }
}

static void mm_float(tr_dtype t, const uint8_t *w, size_t wrb, int64_t cols,
                     const uint8_t *xq, size_t xs, int n_tok, float *out,
                     size_t os, int64_t r0, int64_t r1, bool accumulate) {
    int64_t padded = (cols + 7) / 8 * 8;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *wr = w + (size_t)r * wrb;
        for (int i = 0; i < n_tok; i++) {
            const float *x = (const float *)(xq + (size_t)i * xs);
            float l[8] = {0};
            for (int64_t k = 0; k < padded; k++) {
                float wv = k < cols ? wfloat(t, wr, k) : 0.0f;
                l[k & 7] = fmaf(wv, x[k], l[k & 7]);
            }
            cpu_q_store(&out[(size_t)i * os + r], cpu_q_lane_sum(l), accumulate);
        }
    }
}

static void matmul_tile_portable(tr_dtype wtype, const void *w,
                                 size_t w_row_bytes, int64_t cols,
                                 const void *xq, size_t xq_stride, int n_tok,
                                 float *out, size_t out_stride, int64_t r0,
                                 int64_t r1, bool accumulate) {
    if (n_tok <= 0 || r1 <= r0) return;
    void (*f)(tr_dtype, const uint8_t *, size_t, int64_t, const uint8_t *,
              size_t, int, float *, size_t, int64_t, int64_t, bool);
    switch (cpu_q_act_kind(wtype)) {
    case CPU_ACT_A32: f = mm_a32; break;
    case CPU_ACT_A256: f = mm_a256; break;
    case CPU_ACT_FLOAT: f = mm_float; break;
    default: return;
    }
    f(wtype, (const uint8_t *)w, w_row_bytes, cols, (const uint8_t *)xq,
      xq_stride, n_tok, out, out_stride, r0, r1, accumulate);
}

const cpu_quant_kernels tr_cpu_quant_kernels_portable = {
    .name = "portable",
    .quantize_act_row = quantize_act_row_portable,
    .matmul_tile = matmul_tile_portable,
    .dequantize_row = tr_cpu_q_dequantize_row_portable,
};

/* ---- choice of kernel set ---- */


const cpu_quant_kernels *tr_cpu_quant_get(const char *name) {
    if (!name) return NULL;
    if (strcmp(name, "portable") == 0) return &tr_cpu_quant_kernels_portable;
#if defined(__x86_64__) || defined(__i386__)
    if (strcmp(name, "avx2") == 0 && tr_cpu_features_avx2())
        return &tr_cpu_quant_kernels_avx2;
    if (strcmp(name, "avx512vnni") == 0 && tr_cpu_features_avx512vnni())
        return &tr_cpu_quant_kernels_vnni;
#endif
    return NULL;
}

const cpu_quant_kernels *tr_cpu_quant_select(bool force_portable) {
    if (force_portable) return &tr_cpu_quant_kernels_portable;
#if defined(__x86_64__) || defined(__i386__)
    if (tr_cpu_features_avx512vnni()) return &tr_cpu_quant_kernels_vnni;
    if (tr_cpu_features_avx2()) return &tr_cpu_quant_kernels_avx2;
#endif
    return &tr_cpu_quant_kernels_portable;
}
