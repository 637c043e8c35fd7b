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
 *   stream    one stream through `trellis serve` against the same requests
 *             in-process, alternating: TTFT and TPOT and their ratios
 *             (bench_stream.c; the HTTP client is frontend/http.h)
 *   ppl       perplexity of a text in windows, and teacher-forced top-1
 *             agreement with a saved reference run (bench_ppl.c)
 *
 * Layering: applications, beside app/cli (compiled into the trellis
 * binary). The engine is reached through include/trellis.h only; `bench
 * grammar`'s compile/mask micro-benchmark and `bench maskbench` also use
 * the public headers of grammar, tokenizer, gguf and runtime/vocab (the
 * grammar vocabulary of a tokenizer, built as the engine builds it).
 * Flags are parsed by app/common/args.h; serve, grammar, stream and ppl
 * start an engine and take the engine flags of app/common/engine_flags.h.
 * Single-threaded apart from the engine's threads.
 */
#ifndef TR_BENCH_H
#define TR_BENCH_H

#include <stdint.h>

/* `trellis bench NAME [options]`: argv[0] is NAME. Returns the exit
 * status (0 ok, 1 failure, 2 bad usage). */
int tr_bench_main(int argc, char **argv);

/* The benchmarks; argv[0] is the benchmark's name. */
int tr_bench_serve(int argc, char **argv);
int tr_bench_grammar(int argc, char **argv);
int tr_bench_maskbench(int argc, char **argv);
int tr_bench_stream(int argc, char **argv);
int tr_bench_ppl(int argc, char **argv);

/* Shared by the benchmarks (bench_util.c). */

/* n prompt ids in [100, 40100), a pure function of seed: the same
 * prompts for every run and every path of a comparison. */
void tr_bench_rand_ids(uint64_t seed, int32_t *out, int n);
/* CLOCK_MONOTONIC in seconds. */
double tr_bench_now_s(void);
/* The nearest-rank percentile, p in [0, 1], of v[0..n) (v unchanged);
 * 0 when n is 0 or a copy cannot be made. */
double tr_bench_pct(const double *v, int n, double p);

#endif
