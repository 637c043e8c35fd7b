#!/usr/bin/env bash
# tests/bench/disk_throughput.sh [TRELLIS] [ROUNDS] [REQUESTS] — serving throughput
# with the disk tier on and no hits against it off (target >= 0.97x):
# `trellis bench serve`'s random workload (prompts that share nothing) at
# 16 clients on a KV pool small enough that the radix cache evicts all
# the time, so every eviction is a page write. Rounds alternate the two
# arms; prints each run's output tok/s, the medians' ratio and the median
# of the rounds' ratios (the machine's speed drifts between rounds).
# DROP=1 deletes each "on" run's folder as soon as the run ends, before
# the kernel writes its pages to the disk (dirty pages wait 30 s by
# default; a run takes ~25 s): what is left is the cost of the tier's own
# work (copies, hashes, the I/O thread, page-cache writes).
set -euo pipefail
bin="${1:-build/trellis}"
rounds="${2:-3}"
requests="${3:-128}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
args=(bench serve --workload random --concurrency 16 --radix on --kv-mem 32 --requests "$requests" --quiet)
for r in $(seq 1 "$rounds"); do
    for arm in off on; do
        [ $((r % 2)) = 0 ] && arm=$([ "$arm" = off ] && echo on || echo off)
        extra=()
        [ "$arm" = on ] && extra=(--kv-cache-dir "$work/kv-$r")
        "$bin" "${args[@]}" "${extra[@]}" --csv "$work/$arm-$r.csv" >/dev/null 2>"$work/log"
        tps=$(python3 -c "import csv,sys; print(next(csv.DictReader(open(sys.argv[1])))['output_tok_s'])" "$work/$arm-$r.csv")
        kept=""
        [ "$arm" = on ] && kept=" ($(find "$work/kv-$r" -name '*.kvp' | wc -l) pages on disk after the run)"
        [ "$arm" = on ] && [ "${DROP:-0}" = 1 ] && rm -rf "$work/kv-$r"
        echo "round $r tier $arm: $tps output tok/s$kept"
        echo "$tps" >> "$work/$arm"
    done
done
python3 - "$work/on" "$work/off" <<'PY'
import statistics, sys
on, off = ([float(x) for x in open(p)] for p in sys.argv[1:])
m_on, m_off = statistics.median(on), statistics.median(off)
ratio = statistics.median(a / b for a, b in zip(on, off))
print(f"median output tok/s: tier on {m_on:.1f}, off {m_off:.1f}: {m_on / m_off:.3f}x; "
      f"median of the rounds' ratios {ratio:.3f}x")
PY
