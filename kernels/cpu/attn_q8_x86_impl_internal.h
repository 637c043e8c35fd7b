/* attn_q8_x86_impl_internal.h — cpu_internal.h's attn_scores_q8 for x86,
 * written once for two instruction sets: included by ops_avx2.c (AVX2:
 * vpmaddwd + vpaddd) and by attn_q8_vnni_avx2.c (AQ_VNNI 1: vpdpwssd on
 * 256-bit vectors), each compiled for its set; AQ_NAME(x) names this
 * copy's functions.
 *
 * Layering: internal to kernels/cpu. Pure functions, thread-safe.
 *
 * Why integer dots. A Q8 key converted to F32 costs a widen, a convert and
 * a multiply per 8 elements before its FMA. Here 8 rows at a time are
 * widened to int16 once (for every query head of the call) and each query
 * head's 16-bit levels multiply them 16 at a time into int32 lanes. The
 * dots are exact integers, which makes the result bitwise the portable
 * kernel's however the rows are cut into calls. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "base/util.h"

#ifndef AQ_VNNI
#define AQ_VNNI 0
#endif

#define AQ_INLINE inline __attribute__((always_inline))

/* acc += the 16 products k_i * q_i (int16), 2 per int32 lane; no lane
 * can overflow (CPU_ATTN_Q_LEVELS). */
static AQ_INLINE __m256i AQ_NAME(aq_dot16)(__m256i acc, __m256i k, __m256i q) {
#if AQ_VNNI
    return _mm256_dpwssd_epi32(acc, k, q);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(k, q));
#endif
}

/* Lane r = the sum of a[r]'s 8 lanes (integer: any order is exact). */
static AQ_INLINE __m256i AQ_NAME(aq_reduce8x8)(const __m256i a[8]) {
    __m256i h01 = _mm256_hadd_epi32(a[0], a[1]);
    __m256i h23 = _mm256_hadd_epi32(a[2], a[3]);
    __m256i h45 = _mm256_hadd_epi32(a[4], a[5]);
    __m256i h67 = _mm256_hadd_epi32(a[6], a[7]);
    __m256i h0123 = _mm256_hadd_epi32(h01, h23); /* rows 0..3, per half */
    __m256i h4567 = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(h0123, h4567, 0x20),
                            _mm256_permute2x128_si256(h0123, h4567, 0x31));
}

static AQ_INLINE float AQ_NAME(aq_hmax8)(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* The 8 rows j0 .. j0 + 7 (past n: row n - 1 again) widened to int16 into
 * kw (8 * hd), their steps as F32 lanes. */
static AQ_INLINE __m256 AQ_NAME(aq_widen8)(int16_t *kw, const void *k,
                                           size_t stride, int32_t j0,
                                           int32_t n, int32_t hd) {
    uint16_t dk[8];
    for (int r = 0; r < 8; r++) {
        const uint8_t *row =
            (const uint8_t *)k + (size_t)TR_MIN(j0 + r, n - 1) * stride;
        for (int32_t d = 0; d < hd; d += 16)
            _mm256_storeu_si256(
                (__m256i *)(void *)(kw + (size_t)r * hd + d),
                _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(row + d))));
        memcpy(&dk[r], row + hd, 2);
    }
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)dk));
}

/* Scores of one query head against the 8 widened rows (hd % 16 == 0). */
static AQ_INLINE __m256 AQ_NAME(aq_scores8)(const int16_t *kw, const int16_t *q,
                                            __m256 step, float qs, int32_t hd) {
    __m256i acc[8];
    for (int r = 0; r < 8; r++) {
        __m256i a = _mm256_setzero_si256();
        for (int32_t d = 0; d < hd; d += 16)
            a = AQ_NAME(aq_dot16)(
                a, _mm256_loadu_si256((const __m256i *)(const void *)(kw + (size_t)r * hd + d)),
                _mm256_loadu_si256((const __m256i *)(const void *)(q + d)));
        acc[r] = a;
    }
    __m256 v = _mm256_cvtepi32_ps(AQ_NAME(aq_reduce8x8)(acc));
    return _mm256_mul_ps(_mm256_mul_ps(v, step), _mm256_set1_ps(qs));
}

static AQ_INLINE void AQ_NAME(aq_scores_heads)(float *s, size_t s_stride,
                                               float *max, const int16_t *q,
                                               const float *qd, int32_t g,
                                               const void *k, size_t stride,
                                               int32_t n, int32_t hd,
                                               float scale) {
    int16_t kw[8 * CPU_ATTN_MAX_HEAD_DIM] __attribute__((aligned(32)));
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int32_t h = 0; h < g; h++) max[h] = -INFINITY;
    for (int32_t j0 = 0; j0 < n; j0 += 8) {
        __m256 step = AQ_NAME(aq_widen8)(kw, k, stride, j0, n, hd);
        __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - j0), idx);
        for (int32_t h = 0; h < g; h++) {
            __m256 v = AQ_NAME(aq_scores8)(kw, q + (size_t)h * (size_t)hd, step,
                                           qd[h] * scale, hd);
            float *sh = s + (size_t)h * s_stride + j0;
            if (n - j0 >= 8)
                _mm256_storeu_ps(sh, v);
            else
                _mm256_maskstore_ps(sh, tail, v);
            /* rows past n repeat row n - 1: they change no max */
            float m = AQ_NAME(aq_hmax8)(v);
            max[h] = m > max[h] ? m : max[h];
        }
    }
}

/* The table entry: head sizes of 64 and 128 get unrolled copies; sizes
 * that are not a multiple of 16 take the portable loop (same bits). */
static void AQ_NAME(attn_scores_q8)(float *s, size_t s_stride, float *max,
                                    const int16_t *q, const float *qd,
                                    int32_t g, const void *k, size_t stride,
                                    int32_t n, int32_t hd, float scale) {
    if (hd % 16 != 0)
        tr_cpu_attn_scores_q8_portable(s, s_stride, max, q, qd, g, k, stride,
                                       n, hd, scale);
    else if (hd == 64)
        AQ_NAME(aq_scores_heads)(s, s_stride, max, q, qd, g, k, stride, n, 64,
                                 scale);
    else if (hd == 128)
        AQ_NAME(aq_scores_heads)(s, s_stride, max, q, qd, g, k, stride, n, 128,
                                 scale);
    else
        AQ_NAME(aq_scores_heads)(s, s_stride, max, q, qd, g, k, stride, n, hd,
                                 scale);
}
