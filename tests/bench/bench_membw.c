/* bench_membw.c — how fast this machine streams memory: a read of a
 * buffer far larger than the last-level cache, by 1 and by 2 threads (each
 * its half), best of several passes, in GB/s. The floor under a decode
 * step: a step reads every weight and the sequence's K/V once, so it
 * cannot take less than their bytes over this rate.
 *
 *   bench_membw [MiB]      (default 1024; at least 64)
 *
 * Wall clock; run it on a quiet machine. Not run by ctest.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct part {
    const uint64_t *p;
    size_t n;      /* words */
    uint64_t sum;  /* kept so the reads are not optimized away */
} part;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Four independent sums: loads are not serialized behind one add. */
static void *read_part(void *arg) {
    part *a = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= a->n; i += 4) {
        s0 += a->p[i];
        s1 += a->p[i + 1];
        s2 += a->p[i + 2];
        s3 += a->p[i + 3];
    }
    for (; i < a->n; i++) s0 += a->p[i];
    a->sum = s0 + s1 + s2 + s3;
    return NULL;
}

/* Best GB/s of `passes` reads of the whole buffer by nth threads. */
static double stream(const uint64_t *buf, size_t words, int nth, int passes, uint64_t *sink) {
    double best = 0;
    for (int r = 0; r < passes; r++) {
        part parts[2];
        pthread_t th[2];
        size_t per = words / (size_t)nth;
        double t0 = now_s();
        for (int i = 0; i < nth; i++) {
            parts[i] = (part){buf + (size_t)i * per, i == nth - 1 ? words - (size_t)i * per : per, 0};
            if (i > 0 && pthread_create(&th[i], NULL, read_part, &parts[i]) != 0) return -1;
        }
        read_part(&parts[0]);
        for (int i = 1; i < nth; i++) pthread_join(th[i], NULL);
        double dt = now_s() - t0;
        for (int i = 0; i < nth; i++) *sink += parts[i].sum;
        double gbs = (double)words * 8.0 / dt / 1e9;
        if (gbs > best) best = gbs;
    }
    return best;
}

int main(int argc, char **argv) {
    long mib = argc > 1 ? strtol(argv[1], NULL, 10) : 1024;
    if (mib < 64 || mib > (1L << 20)) {
        fprintf(stderr, "usage: bench_membw [MiB >= 64]\n");
        return 2;
    }
    size_t words = (size_t)mib << 17; /* MiB / 8 bytes */
    uint64_t *buf = malloc(words * sizeof *buf);
    if (!buf) {
        fprintf(stderr, "bench_membw: cannot allocate %ld MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < words; i++) buf[i] = i; /* fault every page in */
    uint64_t sink = 0;
    printf("bench_membw: read of %ld MiB, best of 5 passes\n", mib);
    for (int nth = 1; nth <= 2; nth++) {
        double g = stream(buf, words, nth, 5, &sink);
        if (g < 0) {
            fprintf(stderr, "bench_membw: cannot start a thread\n");
            free(buf);
            return 1;
        }
        printf("  %d thread%s  %6.1f GB/s\n", nth, nth > 1 ? "s" : " ", g);
    }
    printf("  (checksum %llu)\n", (unsigned long long)(sink % 1000003u));
    free(buf);
    return 0;
}
