/* attn_q8_vnni_avx2.c — attn_scores_q8 on vpdpbusd (256-bit vectors,
 * AVX512_VNNI + AVX512VL) for the "avx512vnni" table of ops_avx2.c: the
 * AVX2 kernel (attn_q8_x86_impl_internal.h) with one instruction where
 * AVX2 takes three. Integer dots are exact: the bits are the other sets'.
 * Run only after cpu_backend.c saw AVX512VL/BW/VNNI and OS support. */
#if defined(__x86_64__) || defined(__i386__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni,prefer-vector-width=256")
#endif
#define AQ_VNNI 1
#define AQ_NAME(x) x##_vnni
#include "kernels/cpu/attn_q8_x86_impl_internal.h"

void tr_cpu_attn_scores_q8_vnni(float *s, size_t s_stride, float *max,
                                const int16_t *q, const float *qd, int32_t g,
                                const void *k, size_t stride, int32_t n,
                                int32_t hd, float scale) {
    attn_scores_q8_vnni(s, s_stride, max, q, qd, g, k, stride, n, hd, scale);
}
#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif
