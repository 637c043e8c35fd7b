/* cmd_bench.h — `trellis bench serve`: the serving benchmark (in-process,
 * through the C API of runtime/trellis.h). Layering: CLI. */
#ifndef TR_CLI_CMD_BENCH_H
#define TR_CLI_CMD_BENCH_H

/* argv[0] is the bench kind ("serve"). Returns the exit status. */
int cmd_bench(int argc, char **argv);

#endif
