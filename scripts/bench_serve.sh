#!/bin/sh
# bench_serve.sh — the engine's target figures from `bench serve`, each
# ratio measured side by side in one run (the machine may be shared and
# noisy: absolute numbers move, ratios of configurations run back to back
# move much less).
#
#   scripts/bench_serve.sh [BUILD_DIR] [--sweep]
#
# Writes CSVs (and, with --sweep, the full sweep's PNG plot) to
# $OUT (default bench-out/) and prints the targets:
#   1. output tok/s with 32 concurrent decoding sequences / single stream
#      (target >= 5x)
#   2. fewshot (one 1,500-token prefix, 64 questions): throughput radix on /
#      off (>= 3x), prefill tokens computed (falls >= 90%), mean TTFT
#      (>= 5x lower)
#   3. multiturn (8 turns): prompt tokens found in the cache from turn 2 on
#      (>= 80%)
#   4. scheduler overhead per step at 64 running sequences (< 2%)
# THREADS (default 2) sets the compute threads.
set -eu
BUILD=${1:-build}
SWEEP=${2:-}
BIN="$BUILD/trellis"
OUT=${OUT:-bench-out}
T=${THREADS:-2}
[ -x "$BIN" ] || { echo "bench_serve.sh: $BIN not built (cmake --build $BUILD --target trellis)" >&2; exit 1; }
mkdir -p "$OUT"

echo "== 1. continuous batching: 1 vs 32 vs 64 concurrent decoding streams"
echo "   (random, 16..32-token prompts, 128 tokens each; 3 interleaved runs, median)"
"$BIN" bench serve --workload random --concurrency 1,32,64 --radix on -t "$T" \
       --prompt-min 16 --prompt-max 32 --max-tokens 128 --repeat 3 \
       --csv "$OUT/batching.csv"
echo "== 2. fewshot: radix on vs off"
"$BIN" bench serve --workload fewshot --concurrency 64 --radix on,off -t "$T" --csv "$OUT/fewshot.csv"
echo "== 3. multiturn: 8 conversations x 8 turns"
"$BIN" bench serve --workload multiturn --concurrency 8 --radix on,off -t "$T" --csv "$OUT/multiturn.csv"

# column numbers: see the CSV header written by app/bench/bench_serve.c
awk -F, '
  FNR == 1 { next }
  FILENAME ~ /batching/ { tps[$3] = $6; if ($3 == 64) sched = $24 }
  FILENAME ~ /fewshot/  { ftps[$2] = $6; fpre[$2] = $18; fttft[$2] = $8 }
  FILENAME ~ /multiturn/ && $2 == "on" { hit2 = $21 }
  END {
    printf "\ntargets\n"
    printf "  output tok/s at 32 / single stream: %.2fx (target >= 5)  [%.1f vs %.1f tok/s; 64: %.1f]\n", tps[32] / tps[1], tps[32], tps[1], tps[64]
    printf "  fewshot throughput radix on / off:  %.2fx (target >= 3)  [%.1f vs %.1f tok/s]\n", ftps["on"] / ftps["off"], ftps["on"], ftps["off"]
    printf "  fewshot prefill tokens computed:    -%.1f%% (target >= 90%%)  [%d vs %d]\n", 100 * (1 - fpre["on"] / fpre["off"]), fpre["on"], fpre["off"]
    printf "  fewshot mean TTFT off / on:         %.2fx (target >= 5)  [%.0f vs %.0f ms]\n", fttft["off"] / fttft["on"], fttft["off"], fttft["on"]
    printf "  multiturn cached prompt, turn 2+:   %.1f%% (target >= 80%%)\n", 100 * hit2
    printf "  scheduler overhead at 64 running:   %.2f%% of step time (target < 2%%)\n", sched
  }' "$OUT/batching.csv" "$OUT/fewshot.csv" "$OUT/multiturn.csv"

if [ "$SWEEP" = "--sweep" ]; then
  echo "== full sweep (all workloads, concurrency 1,8,32,64, radix on and off)"
  "$BIN" bench serve -t "$T" --csv "$OUT/sweep.csv" --png "$OUT/sweep.png" --quiet
  echo "plot: $OUT/sweep.png"
fi
