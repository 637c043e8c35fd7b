/* sampler_kernels.c — the sampler's vector kernels instantiated with
 * 16-byte vectors (SSE2 on every x86-64, NEON on arm64): the fallback when
 * the CPU lacks AVX2, and the reference the AVX2 table must match bit for
 * bit (tested in tests/unit/test_sampler.c). */
#define SK_W 4
#define SK_SUFFIX generic
#define SK_NAME "generic"
#include "runtime/sampler/sampler_kernels_internal.h"
