/* cpu_features.c — see cpu_features_internal.h. */
#include "kernels/cpu/cpu_features_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* CPUID.1:ECX bit 29. */
static bool has_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    return (c >> 29) & 1u;
}

/* CPUID.(EAX=7,ECX=0):ECX bit 11. */
static bool has_avx512vnni_bit(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return (c >> 11) & 1u;
}

bool tr_cpu_features_avx2(void) {
    __builtin_cpu_init();
    /* the builtins also check that the OS saves the AVX state */
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           has_f16c();
}

bool tr_cpu_features_avx512vnni(void) {
    /* avx512f: the builtin checks the OS's AVX-512 state (XCR0) too */
    return tr_cpu_features_avx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && has_avx512vnni_bit();
}
#else
bool tr_cpu_features_avx2(void) { return false; }
bool tr_cpu_features_avx512vnni(void) { return false; }
#endif
