/* ops_avx2.c — AVX2 + FMA + F16C inner loops for the non-matmul ops (the
 * table tr_cpu_op_kernels_avx2). Compiled with -mavx2 -mfma -mf16c; called
 * only after cpu_backend.c has checked the CPU at run time.
 *
 * Layering: internal to kernels/cpu; pure functions, thread-safe.
 *
 * Determinism: every element is computed by the same instruction sequence
 * wherever it sits. Loops whose length is not a multiple of 8 finish with a
 * padded vector iteration (never a scalar tail with different math), and
 * horizontal sums always reduce lanes as ((0+1)+(2+3))+((4+5)+(6+7)).
 * head_dim not a multiple of 8 falls back to the portable loops (a function
 * of the shape, not the batch).
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "base/util.h"

/* ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)), the tree reduce8x8 uses too. */
static inline float hsum8(__m256 v) {
    __m256 h = _mm256_hadd_ps(v, v); /* l0+l1, l2+l3 | l4+l5, l6+l7 */
    h = _mm256_hadd_ps(h, h);        /* (01)+(23)    | (45)+(67) */
    return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h),
                                    _mm256_extractf128_ps(h, 1)));
}

/* exp(x): x = n ln2 + r, |r| <= ln2/2, exp(r) by its degree-7 Taylor
 * polynomial (truncation < 6e-9 relative), times 2^n built in the exponent
 * field. Measured over [-87, 88]: relative error <= 7.9e-8 (~1.3 ulp).
 * (The portable tables' scalar expf makes SwiGLU ~7x slower.) Inputs are
 * clamped to [-87, 88] so that 2^n stays a normal float; below -87 the
 * result is 0 (exp(-87) ~ 1.6e-38 is far below anything a softmax or a
 * sigmoid can resolve). NaN propagates. */
static inline __m256 exp8(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.0f), lo = _mm256_set1_ps(-87.0f);
    __m256 keep = _mm256_cmp_ps(x, lo, _CMP_NLT_UQ); /* x >= -87 or NaN */
    x = _mm256_min_ps(hi, x); /* second operand wins on NaN */
    x = _mm256_max_ps(lo, x);
    __m256 n = _mm256_round_ps(
        _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* ln2 split so that n * ln2_hi is exact. */
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_and_ps(y, keep);
}

/* Lanes [0, rem) of an all-ones mask. */
static inline __m256i lane_mask(int32_t rem) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), idx);
}


static void rmsnorm_row_avx2(float *out, const float *x, const float *w,
                             int32_t dim, float eps) {
    /* Exact squares summed in double, 2 x 4 lanes. */
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int32_t i = 0;
    for (; i + 8 <= dim; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        s0 = _mm256_fmadd_pd(a, a, s0);
        s1 = _mm256_fmadd_pd(b, b, s1);
    }
    __m256d s = _mm256_add_pd(s0, s1);
    double lanes[4];
    _mm256_storeu_pd(lanes, s);
    double ss = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for (; i < dim; i++) ss += (double)x[i] * (double)x[i];
    float scale = 1.0f / sqrtf((float)(ss / dim) + eps);
    __m256 vs = _mm256_set1_ps(scale);
    i = 0;
    for (; i + 8 <= dim; i += 8)
        _mm256_storeu_ps(out + i,
                         _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs),
                                       _mm256_loadu_ps(w + i)));
    /* Elementwise: the scalar tail is the same two roundings. */
    for (; i < dim; i++) out[i] = (x[i] * scale) * w[i];
}

/* Pairs (x0, x1) -> (x0 c - x1 s, x0 s + x1 c): the products rounded, then
 * subtracted / added, exactly as the portable loop does (no FMA), so both
 * tables give the same bits. */
static void rope_row_avx2(float *x, int32_t n_heads, int32_t head_dim,
                          const float *cs) {
    if (head_dim % 8 != 0) {
        tr_cpu_rope_row_portable(x, n_heads, head_dim, cs);
        return;
    }
    for (int32_t h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * head_dim;
        for (int32_t e = 0; e < head_dim; e += 8) {
            __m256 t = _mm256_loadu_ps(cs + e); /* c0 s0 c1 s1 ... */
            __m256 c = _mm256_moveldup_ps(t);   /* c0 c0 c1 c1 ... */
            __m256 sn = _mm256_movehdup_ps(t);  /* s0 s0 s1 s1 ... */
            __m256 a = _mm256_loadu_ps(v + e);
            __m256 sw = _mm256_permute_ps(a, 0xb1); /* x1 x0 x3 x2 ... */
            _mm256_storeu_ps(v + e, _mm256_addsub_ps(_mm256_mul_ps(a, c),
                                                     _mm256_mul_ps(sw, sn)));
        }
    }
}

static inline __m256 silu_mul8(__m256 g, __m256 u) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    __m256 s = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    return _mm256_mul_ps(s, u);
}

static void swiglu_avx2(float *out, const float *g, const float *u,
                        int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(g + i),
                                            _mm256_loadu_ps(u + i)));
    if (i < n) {
        int32_t rem = (int32_t)(n - i);
        __m256i m = lane_mask(rem);
        __m256 r = silu_mul8(_mm256_maskload_ps(g + i, m),
                             _mm256_maskload_ps(u + i, m));
        _mm256_maskstore_ps(out + i, m, r);
    }
}

/* gelu_tanh(g) * u in the sigmoid form of geglu_portable (2y =
 * 1.59577 (g + 0.044715 g^3)). */
static inline __m256 gelu_mul8(__m256 g, __m256 u) {
    __m256 g2 = _mm256_mul_ps(g, g);
    __m256 y2 = _mm256_mul_ps(
        _mm256_mul_ps(_mm256_set1_ps(1.5957691216057308f), g),
        _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), g2, _mm256_set1_ps(1.0f)));
    __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), y2));
    __m256 s = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    return _mm256_mul_ps(s, u);
}

static void geglu_avx2(float *out, const float *g, const float *u,
                       int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, gelu_mul8(_mm256_loadu_ps(g + i),
                                            _mm256_loadu_ps(u + i)));
    if (i < n) {
        int32_t rem = (int32_t)(n - i);
        __m256i m = lane_mask(rem);
        __m256 r = gelu_mul8(_mm256_maskload_ps(g + i, m),
                             _mm256_maskload_ps(u + i, m));
        _mm256_maskstore_ps(out + i, m, r);
    }
}

static void add_avx2(float *out, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i),
                                                _mm256_loadu_ps(x + i)));
    for (; i < n; i++) out[i] += x[i];
}

static void store_row_avx2(void *dst, const float *src, int32_t n, bool f16) {
    if (!f16) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *d = dst;
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                         _MM_FROUND_TO_NEAREST_INT));
    /* Round-to-nearest-even both ways: the portable conversion gives the
     * same bits. */
    for (; i < n; i++) d[i] = cpu_fp32_to_fp16(src[i]);
}

static void load_row_avx2(float *dst, const void *src, int32_t n, bool f16) {
    if (!f16) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    const uint16_t *s = src;
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                      (const __m128i *)(s + i))));
    for (; i < n; i++) dst[i] = cpu_fp16_to_fp32(s[i]);
}

#define ALWAYS_INLINE inline __attribute__((always_inline))

/* A Q8/Q4 scale (F16 at p) in every lane. */
static ALWAYS_INLINE __m256 kv_scale8(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _mm256_set1_ps(_cvtsh_ss(h));
}

/* Elements d .. d + 7 (d a multiple of 8) of one head of a KV row of type
 * t (backend.h's formats), as their exact F32 values. With t and hd
 * constant at the call site, the kernels below compile to straight-line
 * code with constant displacements. */
static ALWAYS_INLINE __m256 kv_load8(const uint8_t *row, int32_t d,
                                     tr_kv_type t, int32_t hd) {
    switch (t) {
    case TR_KV_F32:
        return _mm256_loadu_ps((const float *)(const void *)row + d);
    case TR_KV_F16:
        return _mm256_cvtph_ps(
            _mm_loadu_si128((const __m128i *)(const void *)(row + 2 * (size_t)d)));
    case TR_KV_Q8: {
        __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(row + d));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)),
                             kv_scale8(row + hd));
    }
    default: { /* TR_KV_Q4 */
        int32_t g = d / 32, i = d % 32;
        __m128i b = _mm_loadl_epi64(
            (const __m128i *)(const void *)(row + 16 * g + (i & 15)));
        if (i >= 16) b = _mm_srli_epi16(b, 4);
        b = _mm_and_si128(b, _mm_set1_epi8(15));
        const __m128i levels = _mm_setr_epi8(
            (char)tr_kv_q4_level(0), (char)tr_kv_q4_level(1), (char)tr_kv_q4_level(2),
            (char)tr_kv_q4_level(3), (char)tr_kv_q4_level(4), (char)tr_kv_q4_level(5),
            (char)tr_kv_q4_level(6), (char)tr_kv_q4_level(7), (char)tr_kv_q4_level(8),
            (char)tr_kv_q4_level(9), (char)tr_kv_q4_level(10), (char)tr_kv_q4_level(11),
            (char)tr_kv_q4_level(12), (char)tr_kv_q4_level(13), (char)tr_kv_q4_level(14),
            (char)tr_kv_q4_level(15));
        __m256i v = _mm256_cvtepi8_epi32(_mm_shuffle_epi8(levels, b));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(v), kv_scale8(row + hd / 2 + 2 * g));
    }
    }
}

/* Lane i = ((a_i0+a_i1)+(a_i2+a_i3)) + ((a_i4+a_i5)+(a_i6+a_i7)) for the 8
 * accumulators a_0..a_7 (an 8x8 transpose-reduce; the same tree as
 * hsum8). */
static ALWAYS_INLINE __m256 reduce8x8(const __m256 a[8]) {
    __m256 h01 = _mm256_hadd_ps(a[0], a[1]); /* per half: 0+1 2+3 of a0, a1 */
    __m256 h23 = _mm256_hadd_ps(a[2], a[3]);
    __m256 h45 = _mm256_hadd_ps(a[4], a[5]);
    __m256 h67 = _mm256_hadd_ps(a[6], a[7]);
    __m256 h0123 = _mm256_hadd_ps(h01, h23); /* rows 0..3, per half */
    __m256 h4567 = _mm256_hadd_ps(h45, h67);
    __m256 lo = _mm256_permute2f128_ps(h0123, h4567, 0x20);
    __m256 hi = _mm256_permute2f128_ps(h0123, h4567, 0x31);
    return _mm256_add_ps(lo, hi);
}

/* The largest of the 8 lanes. */
static ALWAYS_INLINE float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* Scores of rows j < n, 8 at a time: one accumulator per row, d
 * ascending; rows past n (last block) repeat row n - 1, so they neither
 * change the max nor get stored. Returns the max score. */
static ALWAYS_INLINE float scores_impl(float *s, const float *q,
                                       const void *k, size_t stride,
                                       int32_t n, int32_t hd, tr_kv_type t,
                                       float scale) {
    const __m256 vs = _mm256_set1_ps(scale);
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    for (int32_t j0 = 0; j0 < n; j0 += 8) {
        __m256 acc[8];
        for (int i = 0; i < 8; i++) {
            const uint8_t *row =
                (const uint8_t *)k + (size_t)TR_MIN(j0 + i, n - 1) * stride;
            __m256 a = _mm256_setzero_ps();
            for (int32_t d = 0; d < hd; d += 8)
                a = _mm256_fmadd_ps(kv_load8(row, d, t, hd),
                                    _mm256_loadu_ps(q + d), a);
            acc[i] = a;
        }
        __m256 r = _mm256_mul_ps(reduce8x8(acc), vs);
        vmax = _mm256_max_ps(vmax, r);
        if (n - j0 >= 8) {
            _mm256_storeu_ps(s + j0, r);
        } else {
            _mm256_maskstore_ps(s + j0, lane_mask(n - j0), r);
        }
    }
    return hmax8(vmax);
}

/* Scores of G heads (2 or 3) at once: for each 8 rows, 4 rows at a time,
 * every K chunk is loaded and converted once and multiplied into the G
 * heads' accumulators. Each (row, head) accumulator is built exactly as
 * in scores_impl (one 8-lane fma chain over d ascending) and each head's
 * 8 rows go through the same reduce8x8, so every score is bitwise what
 * scores_impl gives that head alone. */
static ALWAYS_INLINE void scores_group_impl(float *s, size_t s_stride,
                                            float *max, const float *q,
                                            const int G, const void *k,
                                            size_t stride, int32_t n,
                                            int32_t hd, tr_kv_type t,
                                            float scale) {
    const __m256 vs = _mm256_set1_ps(scale);
    __m256 vmax[3];
    for (int h = 0; h < G; h++) vmax[h] = _mm256_set1_ps(-INFINITY);
    for (int32_t j0 = 0; j0 < n; j0 += 8) {
        __m256 acc[3][8];
        for (int r0 = 0; r0 < 8; r0 += 4) {
            const uint8_t *row[4];
            for (int r = 0; r < 4; r++)
                row[r] = (const uint8_t *)k +
                         (size_t)TR_MIN(j0 + r0 + r, n - 1) * stride;
            __m256 a[3][4];
            for (int h = 0; h < G; h++)
                for (int r = 0; r < 4; r++) a[h][r] = _mm256_setzero_ps();
            for (int32_t d = 0; d < hd; d += 8) {
                for (int r = 0; r < 4; r++) {
                    __m256 kv = kv_load8(row[r], d, t, hd);
                    for (int h = 0; h < G; h++)
                        a[h][r] = _mm256_fmadd_ps(
                            kv, _mm256_loadu_ps(q + (size_t)h * hd + d),
                            a[h][r]);
                }
            }
            for (int h = 0; h < G; h++)
                for (int r = 0; r < 4; r++) acc[h][r0 + r] = a[h][r];
        }
        for (int h = 0; h < G; h++) {
            __m256 r = _mm256_mul_ps(reduce8x8(acc[h]), vs);
            vmax[h] = _mm256_max_ps(vmax[h], r);
            float *sh = s + (size_t)h * s_stride;
            if (n - j0 >= 8) {
                _mm256_storeu_ps(sh + j0, r);
            } else {
                _mm256_maskstore_ps(sh + j0, lane_mask(n - j0), r);
            }
        }
    }
    for (int h = 0; h < G; h++) max[h] = hmax8(vmax[h]);
}

/* The heads of a group three at a time (their 12 accumulators fill the
 * registers), then a pair or a single head. */
static ALWAYS_INLINE void scores_heads(float *s, size_t s_stride, float *max,
                                       const float *q, int32_t g,
                                       const void *k, size_t stride,
                                       int32_t n, int32_t hd, tr_kv_type t,
                                       float scale) {
    int32_t h = 0;
    for (; h + 3 <= g; h += 3)
        scores_group_impl(s + (size_t)h * s_stride, s_stride, max + h,
                          q + (size_t)h * hd, 3, k, stride, n, hd, t, scale);
    if (g - h == 2)
        scores_group_impl(s + (size_t)h * s_stride, s_stride, max + h,
                          q + (size_t)h * hd, 2, k, stride, n, hd, t, scale);
    else if (g - h == 1)
        max[h] = scores_impl(s + (size_t)h * s_stride, q + (size_t)h * hd, k,
                             stride, n, hd, t, scale);
}

/* Common head sizes get fully unrolled copies (f16 is a constant in each
 * call below, so each KV type gets its own copies too). */
static ALWAYS_INLINE void scores_by_hd(float *s, size_t s_stride, float *max,
                                       const float *q, int32_t g,
                                       const void *k, size_t stride,
                                       int32_t n, int32_t hd, tr_kv_type t,
                                       float scale) {
    if (hd == 64)
        scores_heads(s, s_stride, max, q, g, k, stride, n, 64, t, scale);
    else if (hd == 128)
        scores_heads(s, s_stride, max, q, g, k, stride, n, 128, t, scale);
    else
        scores_heads(s, s_stride, max, q, g, k, stride, n, hd, t, scale);
}

static void attn_scores_avx2(float *s, size_t s_stride, float *max,
                             const float *q, int32_t g, const void *k,
                             size_t stride, int32_t n, int32_t hd, tr_kv_type t,
                             float scale) {
    if (hd % 8 != 0)
        tr_cpu_attn_scores_portable(s, s_stride, max, q, g, k, stride, n, hd, t,
                                    scale);
    else if (t == TR_KV_F16)
        scores_by_hd(s, s_stride, max, q, g, k, stride, n, hd, TR_KV_F16, scale);
    else if (t == TR_KV_F32)
        scores_by_hd(s, s_stride, max, q, g, k, stride, n, hd, TR_KV_F32, scale);
    else if (t == TR_KV_Q8)
        scores_by_hd(s, s_stride, max, q, g, k, stride, n, hd, TR_KV_Q8, scale);
    else
        scores_by_hd(s, s_stride, max, q, g, k, stride, n, hd, TR_KV_Q4, scale);
}

static float attn_exp_sum_avx2(float *s, int32_t n, float max) {
    const __m256 vm = _mm256_set1_ps(max);
    __m256 sum = _mm256_setzero_ps();
    int32_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        _mm256_storeu_ps(s + j, e);
        sum = _mm256_add_ps(sum, e);
    }
    if (j < n) {
        __m256i m = lane_mask(n - j);
        __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(s + j, m), vm));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(s + j, m, e);
        sum = _mm256_add_ps(sum, e);
    }
    return hsum8(sum);
}

/* acc[d] = fma(p[j], v_j[d], acc[d]) for j ascending: 64 output lanes at
 * a time live in 8 registers across all rows. */
static ALWAYS_INLINE void accum_impl(float *acc, const float *p,
                                     const void *v, size_t stride, int32_t n,
                                     int32_t hd, tr_kv_type t) {
    for (int32_t d0 = 0; d0 < hd; d0 += 64) {
        int32_t nv = TR_MIN(8, (hd - d0) / 8);
        __m256 a[8];
        if (nv == 8) {
            for (int u = 0; u < 8; u++) a[u] = _mm256_loadu_ps(acc + d0 + 8 * u);
            for (int32_t j = 0; j < n; j++) {
                __m256 w = _mm256_set1_ps(p[j]);
                const uint8_t *row = (const uint8_t *)v + (size_t)j * stride;
                for (int u = 0; u < 8; u++)
                    a[u] = _mm256_fmadd_ps(
                        w, kv_load8(row, d0 + 8 * u, t, hd), a[u]);
            }
            for (int u = 0; u < 8; u++) _mm256_storeu_ps(acc + d0 + 8 * u, a[u]);
        } else {
            for (int u = 0; u < nv; u++) a[u] = _mm256_loadu_ps(acc + d0 + 8 * u);
            for (int32_t j = 0; j < n; j++) {
                __m256 w = _mm256_set1_ps(p[j]);
                const uint8_t *row = (const uint8_t *)v + (size_t)j * stride;
                for (int u = 0; u < nv; u++)
                    a[u] = _mm256_fmadd_ps(
                        w, kv_load8(row, d0 + 8 * u, t, hd), a[u]);
            }
            for (int u = 0; u < nv; u++) _mm256_storeu_ps(acc + d0 + 8 * u, a[u]);
        }
    }
}

/* acc_h[d] += p_h[j] * v_j[d] for G heads (2 or 3) at once, 16 output
 * lanes per pass so that the G heads' accumulators stay in registers:
 * every V chunk is loaded and converted once per pass and multiplied into
 * all G heads. Each element's fma sequence (j ascending, fma(p, v, acc))
 * is accum_impl's, so the result is bitwise that of each head alone. */
static ALWAYS_INLINE void accum_group_impl(float *acc, size_t acc_stride,
                                           const float *p, size_t p_stride,
                                           const int G, const void *v,
                                           size_t stride, int32_t n,
                                           int32_t hd, tr_kv_type t) {
    for (int32_t d0 = 0; d0 < hd; d0 += 16) {
        const bool two = hd - d0 >= 16; /* hd % 8 == 0: else one vector */
        __m256 a[3][2];
        for (int h = 0; h < G; h++) {
            float *ah = acc + (size_t)h * acc_stride + d0;
            a[h][0] = _mm256_loadu_ps(ah);
            a[h][1] = two ? _mm256_loadu_ps(ah + 8) : _mm256_setzero_ps();
        }
        for (int32_t j = 0; j < n; j++) {
            const uint8_t *row = (const uint8_t *)v + (size_t)j * stride;
            __m256 v0 = kv_load8(row, d0, t, hd);
            __m256 v1 = two ? kv_load8(row, d0 + 8, t, hd) : _mm256_setzero_ps();
            for (int h = 0; h < G; h++) {
                __m256 w = _mm256_set1_ps(p[(size_t)h * p_stride + (size_t)j]);
                a[h][0] = _mm256_fmadd_ps(w, v0, a[h][0]);
                if (two) a[h][1] = _mm256_fmadd_ps(w, v1, a[h][1]);
            }
        }
        for (int h = 0; h < G; h++) {
            float *ah = acc + (size_t)h * acc_stride + d0;
            _mm256_storeu_ps(ah, a[h][0]);
            if (two) _mm256_storeu_ps(ah + 8, a[h][1]);
        }
    }
}

static ALWAYS_INLINE void accum_heads(float *acc, size_t acc_stride,
                                      const float *p, size_t p_stride,
                                      int32_t g, const void *v, size_t stride,
                                      int32_t n, int32_t hd, tr_kv_type t) {
    int32_t h = 0;
    for (; h + 3 <= g; h += 3)
        accum_group_impl(acc + (size_t)h * acc_stride, acc_stride,
                         p + (size_t)h * p_stride, p_stride, 3, v, stride, n,
                         hd, t);
    if (g - h == 2)
        accum_group_impl(acc + (size_t)h * acc_stride, acc_stride,
                         p + (size_t)h * p_stride, p_stride, 2, v, stride, n,
                         hd, t);
    else if (g - h == 1)
        accum_impl(acc + (size_t)h * acc_stride, p + (size_t)h * p_stride, v,
                   stride, n, hd, t);
}

/* As scores_by_hd: hd == 64 unrolled, one copy per KV type. */
static ALWAYS_INLINE void accum_by_hd(float *acc, size_t acc_stride,
                                      const float *p, size_t p_stride,
                                      int32_t g, const void *v, size_t stride,
                                      int32_t n, int32_t hd, tr_kv_type t) {
    if (hd == 64)
        accum_heads(acc, acc_stride, p, p_stride, g, v, stride, n, 64, t);
    else
        accum_heads(acc, acc_stride, p, p_stride, g, v, stride, n, hd, t);
}

static void attn_accum_avx2(float *acc, size_t acc_stride, const float *p,
                            size_t p_stride, int32_t g, const void *v,
                            size_t stride, int32_t n, int32_t hd, tr_kv_type t) {
    if (hd % 8 != 0)
        tr_cpu_attn_accum_portable(acc, acc_stride, p, p_stride, g, v, stride, n,
                                   hd, t);
    else if (t == TR_KV_F16)
        accum_by_hd(acc, acc_stride, p, p_stride, g, v, stride, n, hd, TR_KV_F16);
    else if (t == TR_KV_F32)
        accum_by_hd(acc, acc_stride, p, p_stride, g, v, stride, n, hd, TR_KV_F32);
    else if (t == TR_KV_Q8)
        accum_by_hd(acc, acc_stride, p, p_stride, g, v, stride, n, hd, TR_KV_Q8);
    else
        accum_by_hd(acc, acc_stride, p, p_stride, g, v, stride, n, hd, TR_KV_Q4);
}

/* load_heads: 8 elements at a time through kv_load8 (exact). */
static void load_heads_avx2(float *dst, const void *src, int32_t n_heads,
                            int32_t hd, tr_kv_type t) {
    if (hd % 8 != 0 || t == TR_KV_F32) {
        tr_cpu_load_heads_portable(dst, src, n_heads, hd, t);
        return;
    }
    size_t hb = tr_kv_head_bytes(t, hd);
    for (int32_t h = 0; h < n_heads; h++) {
        const uint8_t *head = (const uint8_t *)src + (size_t)h * hb;
        float *o = dst + (size_t)h * hd;
        if (t == TR_KV_F16)
            for (int32_t d = 0; d < hd; d += 8)
                _mm256_storeu_ps(o + d, kv_load8(head, d, TR_KV_F16, hd));
        else if (t == TR_KV_Q8)
            for (int32_t d = 0; d < hd; d += 8)
                _mm256_storeu_ps(o + d, kv_load8(head, d, TR_KV_Q8, hd));
        else
            for (int32_t d = 0; d < hd; d += 8)
                _mm256_storeu_ps(o + d, kv_load8(head, d, TR_KV_Q4, hd));
    }
}

#define AQ_NAME(x) x##_avx2
#include "kernels/cpu/attn_q8_x86_impl_internal.h"

/* The entries both x86 tables share. */
#define AVX2_OP_ENTRIES                  \
    .rmsnorm_row = rmsnorm_row_avx2,     \
    .rope_row = rope_row_avx2,           \
    .swiglu = swiglu_avx2,               \
    .geglu = geglu_avx2,                 \
    .add = add_avx2,                     \
    .store_row = store_row_avx2,         \
    .load_row = load_row_avx2,           \
    .load_heads = load_heads_avx2,       \
    .attn_scores = attn_scores_avx2,     \
    .attn_exp_sum = attn_exp_sum_avx2,   \
    .attn_accum = attn_accum_avx2

const cpu_op_kernels tr_cpu_op_kernels_avx2 = {
    .name = "avx2",
    AVX2_OP_ENTRIES,
    .attn_scores_q8 = attn_scores_q8_avx2,
};

const cpu_op_kernels tr_cpu_op_kernels_vnni = {
    .name = "avx512vnni",
    AVX2_OP_ENTRIES,
    .attn_scores_q8 = tr_cpu_attn_scores_q8_vnni,
};
