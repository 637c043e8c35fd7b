/* bench.h — `trellis bench`: benchmarks a user runs against a model, like
 * llama-bench or `vllm bench` (the library micro-benchmarks are programs
 * in tests/bench).
 *
 *   serve     the engine under load: throughput, TTFT/TPOT percentiles,
 *             prefix-cache hits, scheduler overhead (bench_serve.c)
 *   grammar   constrained decoding: compile and mask costs, constrained vs
 *             unconstrained throughput, jump-forward savings
 *             (bench_grammar.c)
 *   maskbench JSON Schema coverage and mask speed on MaskBench data, as
 *             the peers' runner measures them (bench_maskbench.c)
 *
 * Layering: applications, beside app/cli (compiled into the trellis
 * binary). The engine is reached through include/trellis.h only; `bench
 * grammar`'s compile/mask micro-benchmark and `bench maskbench` also use
 * the public headers of grammar, tokenizer and gguf (bench_vocab.h).
 * Flags are parsed by app/common/args.h (maskbench: its own parser).
 * Single-threaded apart from the engine's threads.
 */
#ifndef TR_BENCH_H
#define TR_BENCH_H

/* `trellis bench NAME [options]`: argv[0] is NAME. Returns the exit
 * status (0 ok, 1 failure, 2 bad usage). */
int cmd_bench(int argc, char **argv);

/* The benchmarks; argv[0] is the benchmark's name. */
int bench_serve(int argc, char **argv);
int bench_grammar(int argc, char **argv);
int bench_maskbench(int argc, char **argv);

#endif
