#!/usr/bin/env bash
# tests/bench/spec_bench.sh — speculative decoding with n-gram drafts
# (--spec-ngram) against plain decoding, on one stream with `trellis
# generate`: the same prompt, tokens and seed, alternating off / on for
# ROUNDS rounds, medians of decode tok/s (first token to last), and the
# drafts kept per sample. Checks on the way that both give the same tokens.
#
#   tests/bench/spec_bench.sh        (BUILD [build], THREADS [2], N [160],
#                                     DRAFT [8], ROUNDS [3], TEMP [0],
#                                     ON ["--spec-ngram $DRAFT"]: the flags
#                                     of the "on" runs, e.g. ON="--draft-model
#                                     FILE --spec-draft 4"; SAME [1]: 0
#                                     lets the on runs give other tokens,
#                                     for --draft-sampling: the same
#                                     distribution, other draws)
# Workloads: rewrite (a passage with a small edit, ending where the model
# ends it), copy (repeat a passage), extract (records to JSON, free text),
# json (the same under a JSON Schema: drafts cut by the grammar, masks
# down the drafts, jump-forward as always; ends with the JSON), json_nojf
# (the same with --no-jump-forward: forced bytes become drafts), free (a
# story: little to copy). copy, extract and free ignore EOS and run N
# tokens: past the model's own end they also measure text it makes up.
# Run on a quiet machine.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${BUILD:-$here/build}"
SAME="${SAME:-1}" THREADS="${THREADS:-2}" N="${N:-160}" DRAFT="${DRAFT:-8}" ROUNDS="${ROUNDS:-3}" TEMP="${TEMP:-0}"
read -r -a on_flags <<< "${ON:---spec-ngram $DRAFT}"
. "$here/tests/bench/spec_prompts.sh"
run() { # workload off|on [more flags] -> "tok/s accepted md5"
    local p="${!1}" extra=(--ignore-eos)
    case "$1" in json*) extra=(--json-schema "$schema") ;; rewrite) extra=() ;; esac
    extra+=("${@:3}")
    "$BUILD/trellis" generate -p "$p" -n "$N" --temp "$TEMP" --seed 1 -t "$THREADS" \
        "${extra[@]}" $([ "$2" = on ] && printf '%s ' "${on_flags[@]}") --json 2>/dev/null |
        python3 -c 'import sys, json, hashlib
d = json.loads(sys.stdin.readline()); t = d["timings"]
print(round(t["decode_tok_per_s"], 2), t["spec_accepted_tokens"], len(d["tokens"]),
      hashlib.md5(json.dumps(d["tokens"]).encode()).hexdigest()[:12])'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
     "threads $THREADS, n $N, on: ${on_flags[*]}, temp $TEMP, rounds $ROUNDS"
printf '%-9s %10s %10s %7s %12s\n' workload "off tok/s" "on tok/s" speedup "kept/tokens"
for w in rewrite copy extract json json_nojf free; do
    off=() on=() kept=0 more=()
    [ "$w" = json_nojf ] && more=(--no-jump-forward)
    for r in $(seq "$ROUNDS"); do
        read -r a _ _ ha < <(run "$w" off "${more[@]}")
        read -r b k nt hb < <(run "$w" on "${more[@]}")
        [ "$SAME" = 0 ] || [ "$ha" = "$hb" ] || { echo "spec_bench: $w: tokens differ with speculation" >&2; exit 1; }
        off+=("$a") on+=("$b") kept=$k/$nt
    done
    mo=$(printf '%s\n' "${off[@]}" | median) mn=$(printf '%s\n' "${on[@]}" | median)
    printf '%-9s %10s %10s %7.2f %12s\n' "$w" "$mo" "$mn" "$(echo "$mn / $mo" | bc -l)" "$kept"
done
