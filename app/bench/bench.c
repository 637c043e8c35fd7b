/* bench.c — `trellis bench NAME`: the table of benchmarks (bench.h). */
#include "app/bench/bench.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *what;
} k_benches[] = {
    {"serve", tr_bench_serve, "the engine under load: throughput, TTFT/TPOT, prefix cache"},
    {"grammar", tr_bench_grammar, "constrained decoding: compile, masks, jump-forward"},
    {"maskbench", tr_bench_maskbench, "JSON Schema coverage and mask speed on MaskBench data"},
    {"stream", tr_bench_stream, "one stream over HTTP against in-process: TTFT, TPOT"},
    {"ppl", tr_bench_ppl, "perplexity of a text, top-1 agreement with a reference run"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: trellis bench NAME [options]\n\nbenchmarks:\n");
    for (size_t i = 0; i < sizeof k_benches / sizeof k_benches[0]; i++)
        fprintf(f, "  %-10s %s\n", k_benches[i].name, k_benches[i].what);
    fprintf(f, "\n`trellis bench NAME --help` lists a benchmark's options.\n");
}

int tr_bench_main(int argc, char **argv) {
    if (argc < 1) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof k_benches / sizeof k_benches[0]; i++)
        if (!strcmp(argv[0], k_benches[i].name)) return k_benches[i].run(argc, argv);
    fprintf(stderr, "trellis bench: unknown benchmark '%s'\n\n", argv[0]);
    usage(stderr);
    return 2;
}
