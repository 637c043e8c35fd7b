#!/bin/sh
# bench_load.sh — decode speed with the model file mapped (--load mmap) or
# read into huge pages (--load read), side by side: the two modes alternate
# ROUNDS times (default 4) at 1 and at 32 concurrent streams, so that a
# noisy minute on a shared machine hits both; prints each run and the
# medians.
#
#   scripts/bench_load.sh [BUILD_DIR] [ROUNDS]
#
# Workload: `bench serve --workload random`, 16..32-token prompts, 128
# output tokens (as scripts/bench_serve.sh part 1). THREADS (default 2).
set -eu
BUILD=${1:-build}
ROUNDS=${2:-4}
BIN="$BUILD/trellis"
T=${THREADS:-2}
[ -x "$BIN" ] || { echo "bench_load.sh: $BIN not built (cmake --build $BUILD --target trellis)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
for C in 1 32; do
  N=$C; [ "$C" = 1 ] && N=4
  for i in $(seq "$ROUNDS"); do
    for MODE in mmap read; do
      "$BIN" bench serve --workload random --concurrency "$C" --radix on -t "$T" --prompt-min 16 \
             --prompt-max 32 --max-tokens 128 --requests "$N" --load "$MODE" \
             --csv "$TMP/run.csv" >/dev/null 2>&1
      # columns: see the CSV header written by app/bench/bench_serve.c
      awk -F, -v c="$C" -v m="$MODE" 'NR == 2 { print c, m, $6, $12 }' "$TMP/run.csv" >>"$TMP/all"
      tail -n 1 "$TMP/all" | awk '{ printf "  %2d streams  %-4s  %7.1f tok/s  TPOT p50 %6.2f ms\n", $1, $2, $3, $4 }'
    done
  done
done
awk '
  function median(a, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { k = $1 " " $2; n[k]++; v[k, n[k]] = $3 }
  END {
    printf "\nmedians (read / mmap)\n"
    split("1 32", cs, " ")
    for (ci = 1; ci <= 2; ci++) {
      c = cs[ci]
      for (m = 0; m < 2; m++) {
        mode = m ? "read" : "mmap"; k = c " " mode
        delete a; for (i = 1; i <= n[k]; i++) a[i] = v[k, i]
        med[mode] = median(a, n[k])
      }
      printf "  %2d streams: %7.1f vs %7.1f tok/s = %.3fx\n", c, med["read"], med["mmap"], med["read"] / med["mmap"]
    }
  }' "$TMP/all"
