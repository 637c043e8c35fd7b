/* bench_serve.c — `trellis bench serve` as a standalone program built
 * against the core library alone (no CLI, no libuv): the same source,
 * runtime/cli/cmd_bench.c, compiled into this file (with the CLI helpers
 * it calls, runtime/cli/common.c), so the figures of the two are the same
 * code's. Not a test: never run by ctest.
 *
 *   bench_serve [serve] [options of `trellis bench serve`]
 *
 * e.g. the README's target figures, each measured side by side in one run:
 *   bench_serve --workload random --concurrency 1,32,64 --radix on
 *   bench_serve --workload fewshot --concurrency 64
 *   bench_serve --workload multiturn --concurrency 8 --radix on
 */
#include <string.h>

#include "runtime/cli/cmd_bench.c"
#include "runtime/cli/common.c"

int main(int argc, char **argv) {
    /* accept both `bench_serve serve ...` and `bench_serve ...` */
    if (argc >= 2 && strcmp(argv[1], "serve") == 0) return cmd_bench(argc - 1, argv + 1);
    argv[0] = (char *)"serve";
    return cmd_bench(argc, argv);
}
