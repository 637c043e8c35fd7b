/* quant_avx2.c — the AVX2+FMA+F16C kernel set of quant_math_internal.h ("avx2"). The
 * code is quant_x86_impl_internal.h; see there. Built with -mavx2 -mfma -mf16c (the
 * build gives that to *_avx2.c) and run only after a CPU check. */
#if defined(__x86_64__) || defined(__i386__)
#define QX_NAME(x) x##_avx2
#include "kernels/cpu/quant_x86_impl_internal.h"
#endif
