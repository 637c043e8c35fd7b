#!/bin/sh
# decode_vs_llama.sh — one-stream decode of `bench_model` (Trellis) against
# llama.cpp's `llama-bench` on the same GGUF and threads, at an empty
# context and at a context depth, alternating every round (the order flips
# each round), with Trellis's weights repacked (the default) and row-major
# (TRELLIS_CPU_REPACK=0), and prefill of a 512-token prompt (Trellis's
# from the same runs at depth 512, llama-bench's pp512); then bench_membw's
# read bandwidth, so that decode can be stated as a share of it. Prints
# every run, then medians.
#
#   tests/bench/decode_vs_llama.sh LLAMA_BENCH [ROUNDS]
#
# ROUNDS defaults to 3. MODEL (default: the cached SmolLM2 Q4_1), THREADS
# (default 2), DEPTHS (default "0 512"), N (decode tokens, default 128).
# Trellis's decode at depth D is `bench_model -p D -n N` (a D-token prompt
# prefilled, then N steps; D = 0 runs a 1-token prompt); llama-bench's is
# `-p 0 -n N -d D` (tg N at depth D). Run on a quiet machine: ggml's threads
# spin, and a busy core slows llama.cpp many times over.
set -eu
[ $# -ge 1 ] || { sed -n '2,18p' "$0" >&2; exit 2; }
LLAMA=$1
ROUNDS=${2:-3}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
BM=$HERE/build/tests/bench_model
MODEL=${MODEL:-${TRELLIS_CACHE:-$HOME/.cache/trellis}/models/SmolLM2-135M-Instruct.Q4_1.gguf}
THREADS=${THREADS:-2}
DEPTHS=${DEPTHS:-"0 512"}
N=${N:-128}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

trellis() { # depth repack -> decode tok/s (prefill tok/s to $TMP/pp.$2.$1)
  p=$1; [ "$p" -gt 0 ] || p=1
  line=$(TRELLIS_CPU_REPACK=$2 "$BM" -m "$MODEL" -t "$THREADS" -p "$p" -n "$N" -r 1 2>/dev/null | tail -1)
  echo "$line" | sed 's/.*"prefill_tok_s":\([0-9.]*\).*/\1/' >>"$TMP/pp.$2.$1"
  echo "$line" | sed 's/.*"decode_tok_s":\([0-9.]*\).*/\1/'
}
llama_pp() { # -> prefill tok/s of a 512-token prompt
  "$LLAMA" -m "$MODEL" -t "$THREADS" -p 512 -n 0 -r 1 -o jsonl 2>/dev/null |
    sed -n 's/.*"avg_ts": *\([0-9.]*\).*/\1/p' | tail -1
}
llama() { # depth -> tok/s
  "$LLAMA" -m "$MODEL" -t "$THREADS" -p 0 -n "$N" -d "$1" -r 1 -o jsonl 2>/dev/null |
    sed -n 's/.*"avg_ts": *\([0-9.]*\).*/\1/p' | tail -1
}
for r in $(seq 1 "$ROUNDS"); do
  for d in $DEPTHS; do
    if [ $((r % 2)) -eq 1 ]; then order="trellis trellis0 llama"; else order="llama trellis0 trellis"; fi
    for who in $order; do
      case $who in
        trellis) v=$(trellis "$d" 1) ;;
        trellis0) v=$(trellis "$d" 0) ;;
        llama) v=$(llama "$d") ;;
      esac
      echo "round $r depth $d $who $v"
      echo "$v" >>"$TMP/$who.$d"
    done
  done
  v=$(llama_pp)
  echo "round $r llama pp512 $v"
  echo "$v" >>"$TMP/llama_pp"
done
median() { sort -n "$1" | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo
# ratios per round (the runs of one round share the machine's mood), then
# their median beside the ratio of the medians
ratios() { paste "$1" "$2" | awk '{print $1 / $2}' >"$3"; }
echo "| depth | Trellis tok/s | Trellis row-major tok/s | llama-bench tok/s | Trellis / llama (per-round median) | repacked / row-major (per-round median) |"
echo "| --- | --- | --- | --- | --- | --- |"
for d in $DEPTHS; do
  t=$(median "$TMP/trellis.$d"); t0=$(median "$TMP/trellis0.$d"); l=$(median "$TMP/llama.$d")
  ratios "$TMP/trellis.$d" "$TMP/llama.$d" "$TMP/rl.$d"
  ratios "$TMP/trellis.$d" "$TMP/trellis0.$d" "$TMP/rr.$d"
  awk -v d="$d" -v t="$t" -v t0="$t0" -v l="$l" -v rl="$(median "$TMP/rl.$d")" -v rr="$(median "$TMP/rr.$d")" \
    'BEGIN {printf "| %s | %.1f | %.1f | %.1f | %.2fx (%.2fx) | %.2fx (%.2fx) |\n", d, t, t0, l, t / l, rl, t / t0, rr}'
done
if [ -s "$TMP/pp.1.512" ]; then
  awk -v t="$(median "$TMP/pp.1.512")" -v t0="$(median "$TMP/pp.0.512")" -v l="$(median "$TMP/llama_pp")" \
    'BEGIN {printf "\nprefill 512: Trellis %.1f tok/s (row-major %.1f), llama-bench %.1f: %.2fx\n", t, t0, l, t / l}'
fi
"$HERE/build/tests/bench_membw" 2>/dev/null | grep -E "thread"
