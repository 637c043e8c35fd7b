#!/usr/bin/env bash
# scripts/bench_dsl.sh — the DSL's performance targets (issue #16), on the
# default model, in-process:
#
#   1. batching: samples/dsl/fewshot_classify.tr over N reviews (default
#      all 100 of samples/dsl/reviews.jsonl) with --batch (32 runs at once,
#      prefix cache on), against the same N prompts sent one by one with
#      the prefix cache off (--parallel 1 --no-radix --no-warm). Target:
#      >= 5x faster end to end.
#   2. prefix sharing: samples/dsl/tree_of_thought.tr, cached / prompt
#      tokens over all its requests (and the engine's own counter).
#      Target: >= 90%.
#   3. interpreter overhead: CPU time the interpreter's threads spend
#      outside backend calls, over the run's wall time, for every run
#      above. Target: < 1%.
#
#   scripts/bench_dsl.sh [BUILD_DIR] [N]       (THREADS=n: engine threads)
#
# Quick check on a busy machine: scripts/bench_dsl.sh build 8
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$here/build}"
n="${2:-100}"
trellis="$build/trellis"
samples="$here/samples/dsl"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
engine=(--threads "${THREADS:-0}")
[ "${THREADS:-0}" = 0 ] && engine=()

head -n "$n" "$samples/reviews.jsonl" >"$work/in.jsonl"
n=$(wc -l <"$work/in.jsonl")

# "batch: G gens, P prompt tokens (C cached, R%), T generated; wall W ms,
#  interpreter I ms (O% of wall), ..." -> "W I P C"
stats() { sed -n 's/^batch: [0-9]* gens, \([0-9]*\) prompt tokens (\([0-9]*\) cached.* wall \([0-9.]*\) ms, interpreter \([0-9.]*\) ms.*/\3 \4 \1 \2/p' "$1"; }

echo "== 1. few-shot classification over $n reviews"
"$trellis" run "$samples/fewshot_classify.tr" --batch "$work/in.jsonl" --stats "${engine[@]}" \
    >"$work/batch.out" 2>"$work/batch.err" || { cat "$work/batch.err"; exit 1; }
"$trellis" run "$samples/fewshot_classify.tr" --batch "$work/in.jsonl" --stats "${engine[@]}" \
    --parallel 1 --no-radix --no-warm >"$work/seq.out" 2>"$work/seq.err" ||
    { cat "$work/seq.err"; exit 1; }
read -r bw bi bp bc <<<"$(stats "$work/batch.err")"
read -r sw si sp sc <<<"$(stats "$work/seq.err")"
cmp -s "$work/batch.out" "$work/seq.out" && same="same labels" || same="labels differ"
python3 - "$bw" "$bi" "$bp" "$bc" "$sw" "$si" "$sp" "$sc" "$n" "$same" <<'PY'
import sys
bw, bi, bp, bc, sw, si, sp, sc = map(float, sys.argv[1:9])
n, same = sys.argv[9], sys.argv[10]
print(f"  --batch (32 at once, cache on): {bw/1000:8.2f} s  {int(bc)}/{int(bp)} prompt tokens cached"
      f"  interpreter {100*bi/bw:.3f}% of wall")
print(f"  one by one, --no-radix:          {sw/1000:8.2f} s  {int(sc)}/{int(sp)} prompt tokens cached"
      f"  interpreter {100*si/sw:.3f}% of wall")
print(f"  speed-up: {sw/bw:.2f}x (target >= 5x); {same}")
PY

echo "== 2. tree of thought: prefix-cache hit rate"
"$trellis" run "$samples/tree_of_thought.tr" --json "${engine[@]}" >"$work/tot.json" ||
    { echo "tree_of_thought failed"; exit 1; }
python3 - "$work/tot.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["stats"]
print(f"  {s['gens']} requests, {s['cached_tokens']}/{s['prompt_tokens']} prompt tokens cached:"
      f" {100*s['cache_hit_rate']:.1f}% (target >= 90%; engine counter"
      f" {100*s['engine_cache_hit_rate']:.1f}%)")
print(f"  interpreter {s['interp_ms']:.2f} ms of {s['wall_ms']/1000:.2f} s wall:"
      f" {100*s['interp_overhead']:.3f}% (target < 1%)")
PY

echo "== 3. chain: interpreter overhead"
"$trellis" run "$samples/chain.tr" --json "${engine[@]}" >"$work/chain.json"
python3 - "$work/chain.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["stats"]
print(f"  interpreter {s['interp_ms']:.2f} ms of {s['wall_ms']/1000:.2f} s wall:"
      f" {100*s['interp_overhead']:.3f}% (target < 1%)")
PY
