/* cmd_bench.h — `trellis bench serve`: the serving benchmark (in-process,
 * through the C API of runtime/trellis.h), and `trellis bench grammar`:
 * constrained decoding's costs and jump-forward's savings. Layering: CLI. */
#ifndef TR_CLI_CMD_BENCH_H
#define TR_CLI_CMD_BENCH_H

/* argv[0] is the bench kind ("serve"). Returns the exit status. */
int cmd_bench(int argc, char **argv);

/* `trellis bench grammar` (cmd_bench_grammar.c); argv[0] is "grammar". */
int cmd_bench_grammar(int argc, char **argv);

/* `trellis bench maskbench` (cmd_bench_maskbench.c): JSON Schema coverage
 * and mask speed on MaskBench data; argv[0] is "maskbench". */
int cmd_bench_maskbench(int argc, char **argv);

#endif
