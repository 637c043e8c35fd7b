/* quant_vnni_avx2.c — the "avx512vnni" kernel set of quant_math_internal.h: the AVX2 set
 * (quant_x86_impl_internal.h) with its 32-block integer dots done by vpdpbusd on
 * 256-bit vectors (AVX512_VNNI + AVX512VL), which replaces vpmaddubsw +
 * vpmaddwd + vpaddd and has no int16 saturation. 512-bit vectors are not
 * used: on 2-port server cores they halve the ports and lower the clock.
 * Results are bitwise those of the other sets (integer dots are exact).
 * Run only after tr_cpu_quant_select saw AVX512VL/BW/VNNI and OS support. */
#if defined(__x86_64__) || defined(__i386__)
#if defined(__clang__)
/* clang has no `#pragma GCC target`; it keeps 256-bit vectors by default */
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni,prefer-vector-width=256")
#endif
#define QX_VNNI 1
#define QX_NAME(x) x##_vnni
#include "kernels/cpu/quant_x86_impl_internal.h"
#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif
