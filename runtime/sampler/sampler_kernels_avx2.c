/* sampler_kernels_avx2.c — the sampler's vector kernels instantiated for
 * AVX2 (8-wide vectors). Built with -mavx2 -mfma -mf16c by the build's
 * *_avx2.c rule and selected at run time by tr_sampler_new only when the CPU
 * has AVX2. Results are bit-identical to the generic instantiation (see
 * sampler_internal.h); FMA is not used (no contraction), by design. */
#ifdef __AVX2__
#define SK_W 8
#define SK_SUFFIX avx2
#define SK_NAME "avx2"
#include "runtime/sampler/sampler_kernels_internal.h"
#else
/* Not an x86 build: sampler_internal.h declares no AVX2 table. */
typedef int sampler_kernels_avx2_unused;
#endif
