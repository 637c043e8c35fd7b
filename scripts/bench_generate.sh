#!/bin/sh
# bench_generate.sh — single-stream speed of two `trellis` binaries side by
# side (e.g. the CLI before and after it became a client of the engine):
# `generate --json` on a 512-token prompt (prefilled in one chunk), then
# 128 greedy tokens with EOS ignored, at 1 and 2 threads. The binaries
# alternate every round (the order flips each round), so that a noisy
# minute on a shared machine hits both; prints every run, then the medians
# as a table (markdown, for docs/performance.md).
#
#   scripts/bench_generate.sh OLD_BINARY NEW_BINARY [ROUNDS]
#
# ROUNDS defaults to 5. THREADS (default "1 2") lists the thread counts;
# MODEL (default: the binaries' default model) is passed as -m; NEW_FLAGS
# go to the new binary only (e.g. NEW_FLAGS=--no-overlap). Figures are
# each binary's own --json timings: prefill_tok_per_s (prompt tokens over
# the time to the first token) and decode_tok_per_s (tokens after the
# first over the time they took).
set -eu
[ $# -ge 2 ] || { sed -n '2,18p' "$0" >&2; exit 2; }
OLD=$1
NEW=$2
ROUNDS=${3:-5}
THREADS=${THREADS:-"1 2"}
for b in "$OLD" "$NEW"; do
  [ -x "$b" ] || { echo "bench_generate.sh: $b is not an executable" >&2; exit 1; }
done
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# 512 words of one token each (SmolLM2's vocabulary: "the", " of", ...)
awk 'BEGIN {
  split("the of and to in is was he for it with as his on be at by had are but from or have an they which one you were her all she there would their we him been has when who will more no if out so said what up its about into than them can only other new some could time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people how too little state good very make world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three", w, " ")
  n = 0; for (k in w) n++
  for (i = 0; i < 512; i++) printf "%s%s", (i ? " " : ""), w[i % n + 1]
}' >"$TMP/prompt.txt"

# field NAME of the first JSON line of a file
field() { sed -n '1s/.*"'"$2"'":\([-0-9.e+]*\).*/\1/p' "$1"; }

run() { # label binary threads round
  extra=""
  [ "$1" = new ] && extra=${NEW_FLAGS:-}
  # shellcheck disable=SC2086 # NEW_FLAGS is a list of flags
  "$2" generate -f "$TMP/prompt.txt" -n 128 --ignore-eos -b 512 -t "$3" --json \
       ${MODEL:+-m "$MODEL"} $extra >"$TMP/out.json" 2>"$TMP/err" ||
    { echo "bench_generate.sh: $2 failed:" >&2; cat "$TMP/err" >&2; exit 1; }
  p=$(field "$TMP/out.json" prefill_tok_per_s)
  d=$(field "$TMP/out.json" decode_tok_per_s)
  n=$(field "$TMP/out.json" prompt_tokens)
  c=$(field "$TMP/out.json" completion_tokens)
  [ "$n" = 512 ] && [ "$c" = 128 ] ||
    echo "  note: $1 ran $n prompt / $c generated tokens, not 512 / 128" >&2
  printf '  threads %s  round %s  %-3s  prefill %8.1f tok/s  decode %7.1f tok/s\n' \
         "$3" "$4" "$1" "$p" "$d"
  echo "$3 $1 $p $d" >>"$TMP/all"
}

for t in $THREADS; do
  for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then
      run old "$OLD" "$t" "$r"; run new "$NEW" "$t" "$r"
    else
      run new "$NEW" "$t" "$r"; run old "$OLD" "$t" "$r"
    fi
  done
done

awk -v rounds="$ROUNDS" '
  function median(a, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { k = $1 " " $2; n[k]++; p[k, n[k]] = $3; d[k, n[k]] = $4; if (!($1 in seen)) { seen[$1] = 1; ts[++nt] = $1 } }
  END {
    printf "\nmedians of %d rounds (old and new alternating)\n\n", rounds
    print "| threads | phase | old tok/s | new tok/s | new / old |"
    print "| --- | --- | --- | --- | --- |"
    for (i = 1; i <= nt; i++) {
      t = ts[i]
      for (ph = 0; ph < 2; ph++) {
        for (b = 0; b < 2; b++) {
          k = t " " (b ? "new" : "old"); delete a
          for (j = 1; j <= n[k]; j++) a[j] = ph ? d[k, j] : p[k, j]
          m[b] = median(a, n[k])
        }
        printf "| %s | %s | %.1f | %.1f | %.3f |\n", t, ph ? "decode 128" : "prefill 512", m[0], m[1], (m[0] > 0 ? m[1] / m[0] : 0)
      }
    }
  }' "$TMP/all"
