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
 * the public headers of grammar, tokenizer, gguf and runtime/vocab (the
 * grammar vocabulary of a tokenizer, built as the engine builds it).
 * Flags are parsed by app/common/args.h; serve and grammar start an
 * engine and take the engine flags of app/common/engine_flags.h.
 * Single-threaded apart from the engine's threads.
 */
#ifndef TR_BENCH_H
#define TR_BENCH_H

/* `trellis bench NAME [options]`: argv[0] is NAME. Returns the exit
 * status (0 ok, 1 failure, 2 bad usage). */
int tr_bench_main(int argc, char **argv);

/* The benchmarks; argv[0] is the benchmark's name. */
int tr_bench_serve(int argc, char **argv);
int tr_bench_grammar(int argc, char **argv);
int tr_bench_maskbench(int argc, char **argv);

#endif
