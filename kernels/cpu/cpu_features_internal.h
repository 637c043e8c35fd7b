/* cpu_features_internal.h — the x86 SIMD extensions this CPU and OS offer, read
 * once per call from CPUID (through the compiler's builtins where they
 * exist). Both kernel choosers (the ops table in cpu_backend.c and the
 * quantized matmul sets in quant_ref.c) ask here, so they always agree.
 *
 * Layering: internal to kernels/cpu. Pure functions; thread-safe.
 * Portable to GCC and clang: clang 14's __builtin_cpu_supports does not
 * know "f16c", so that bit comes from CPUID leaf 1 directly. On non-x86
 * targets every answer is false.
 */
#ifndef TR_KERNELS_CPU_FEATURES_H
#define TR_KERNELS_CPU_FEATURES_H

#include <stdbool.h>

/* AVX2, FMA and F16C (what every *_avx2.c file is compiled for). */
bool tr_cpu_features_avx2(void);

/* tr_cpu_features_avx2() and AVX-512 F, VL, BW and VNNI with the OS saving
 * the AVX-512 state (256-bit vpdpbusd). */
bool tr_cpu_features_avx512vnni(void);

#endif
