/* bench_util.c — see bench.h ("shared by the benchmarks"). */
#include "app/bench/bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/hash.h"

void tr_bench_rand_ids(uint64_t seed, int32_t *out, int n) {
    for (int i = 0; i < n; i++)
        out[i] = 100 + (int32_t)(tr_splitmix64(seed * 0x100000001b3ull + (uint64_t)i) % 40000u);
}

double tr_bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double tr_bench_pct(const double *v, int n, double p) {
    if (n <= 0) return 0;
    double *c = malloc((size_t)n * sizeof *c);
    if (!c) return 0;
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_d);
    int k = (int)ceil(p * n) - 1;
    if (k < 0) k = 0;
    if (k >= n) k = n - 1;
    double r = c[k];
    free(c);
    return r;
}
