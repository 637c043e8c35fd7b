/* bench_ports.c — how many of the vector instructions the matmul kernels
 * are made of one core issues per cycle, alone and mixed (x86-64 with
 * AVX2+FMA only; elsewhere it says so and exits 0).
 *
 * Why it exists: docs/performance.md's account of the 32-stream ceiling rests on these
 * figures (which instructions share execution ports on this CPU, and what
 * the inner loops of the Q4_1 and Q8_0 kernels cost per 256 multiply-adds
 * at best). Each line times a loop of independent register-only
 * instructions (no memory traffic except the broadcasts, which read one
 * stack dword) and prints cycles per iteration, with the cycle measured
 * first as the time of a chain of dependent scalar adds (one per cycle on
 * every x86 core since the Pentium Pro). Run it on an idle core: another
 * job on the same core shows up as extra cycles.
 *
 * Usage: bench_ports [seconds per line, default 0.2]
 * Not run by ctest (timings are not tests).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Eight independent instances of an instruction, writing ymm0..7 from
 * ymm8..14 and ymm15 (never read back: no dependency between them). */
#define X8(op) op(0, 8) op(1, 9) op(2, 10) op(3, 11) op(4, 12) op(5, 13) op(6, 14) op(7, 8)
#define X4(op) op(0, 8) op(1, 9) op(2, 10) op(3, 11)
#define ADD(a, b) "vpaddd %%ymm15, %%ymm" #b ", %%ymm" #a "\n"
#define MWD(a, b) "vpmaddwd %%ymm15, %%ymm" #b ", %%ymm" #a "\n"
#define MUB(a, b) "vpmaddubsw %%ymm15, %%ymm" #b ", %%ymm" #a "\n"
#define SGN(a, b) "vpsignb %%ymm15, %%ymm" #b ", %%ymm" #a "\n"
#define FMA(a, b) "vfmadd231ps %%ymm15, %%ymm" #b ", %%ymm" #a "\n"
#define SHF(a, b) "vpsrlw $4, %%ymm" #b ", %%ymm" #a "\n"
#define BC(a, b) "vpbroadcastd (%%rsp), %%ymm" #a "\n"
#define CLOBBER                                                               \
    "rax", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",    \
        "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"

/* Times BODY in a loop for about g_secs; prints cycles per iteration. */
#define MEASURE(name, body)                                                   \
    do {                                                                      \
        long n = 1000;                                                        \
        double t = 0;                                                         \
        for (;;) {                                                            \
            double t0 = now_s();                                              \
            for (long i = 0; i < n; i++) __asm__ volatile(body ::: CLOBBER);  \
            t = now_s() - t0;                                                 \
            if (t >= g_secs) break;                                           \
            n *= t < g_secs / 64 ? 16 : 2;                                    \
        }                                                                     \
        printf("  %-42s %6.2f cycles\n", name, t / (double)n / g_cycle_s);    \
    } while (0)

static double g_secs = 0.2;
static double g_cycle_s;

static void measure_cycle(void) {
    long n = 1000;
    double t = 0;
    for (;;) {
        double t0 = now_s();
        for (long i = 0; i < n; i++)
            __asm__ volatile("add $1, %%rax\n add $1, %%rax\n add $1, %%rax\n"
                             "add $1, %%rax\n add $1, %%rax\n add $1, %%rax\n"
                             "add $1, %%rax\n add $1, %%rax\n" ::: "rax");
        t = now_s() - t0;
        if (t >= g_secs) break;
        n *= t < g_secs / 64 ? 16 : 2;
    }
    g_cycle_s = t / ((double)n * 8);
}

int main(int argc, char **argv) {
    if (argc > 1) g_secs = atof(argv[1]);
    if (!(g_secs > 0)) g_secs = 0.2;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        printf("bench_ports: this CPU lacks AVX2+FMA; nothing to measure\n");
        return 0;
    }
    measure_cycle();
    printf("core clock: %.2f GHz (a chain of dependent adds)\n", 1e-9 / g_cycle_s);
    printf("8 independent instructions per iteration (4 per cycle would be 2 cycles):\n");
    MEASURE("vpaddd", X8(ADD));
    MEASURE("vpmaddwd", X8(MWD));
    MEASURE("vpmaddubsw", X8(MUB));
    MEASURE("vpsignb", X8(SGN));
    MEASURE("vfmadd231ps", X8(FMA));
    MEASURE("vpsrlw", X8(SHF));
    MEASURE("vpbroadcastd from memory", X8(BC));
    printf("mixes, 8 + 8 (same ports: 8 cycles; disjoint: 4):\n");
    MEASURE("vpmaddubsw + vpmaddwd", X8(MUB) X8(MWD));
    MEASURE("vpmaddwd + vfmadd231ps", X8(MWD) X8(FMA));
    MEASURE("vpmaddwd + vpsignb", X8(MWD) X8(SGN));
    MEASURE("vpmaddwd + vpaddd", X8(MWD) X8(ADD));
    MEASURE("vpmaddwd + vpsrlw", X8(MWD) X8(SHF));
    printf("inner loops of the matmul kernels, per 256 multiply-adds (8 rows x\n"
           "32 elements x 1 token; a broadcast serves two row groups):\n");
    MEASURE("Q4_1: 8 maddubs + 8 add + 4 bcast", X8(MUB) X8(ADD) X4(BC));
    MEASURE("Q8_0: 8 (sign + maddubs + maddwd + add) + 4 bcast",
            X8(SGN) X8(MUB) X8(MWD) X8(ADD) X4(BC));
    MEASURE("Q8_0 as int16: 16 (maddwd + add) + 8 bcast",
            X8(MWD) X8(MWD) X8(ADD) X8(ADD) X8(BC));
    return 0;
}

#else

int main(void) {
    printf("bench_ports: x86-64 only; nothing to measure\n");
    return 0;
}

#endif
