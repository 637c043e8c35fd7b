#!/usr/bin/env bash
# tests/bench/spec_vs_llama.sh LLAMA_LOOKUP [ROUNDS] — prompt-lookup
# speculation, Trellis against llama.cpp on the same GGUF: `trellis
# generate --spec-ngram DRAFT` and llama.cpp's `llama-lookup` (n-gram
# drafts from the prompt and the output so far, up to DRAFT a step), one
# stream, greedy, N tokens with EOS ignored, THREADS threads; the
# workloads that copy (copy, extract from spec_prompts.sh) and one that
# does not (free). Alternates which goes first each round; prints medians
# of decode tok/s, the ratio, and each side's drafted / accepted tokens.
#
# llama-lookup is built from the llama.cpp sources in PyPI's
# llama-cpp-python 0.3.36 sdist, outside the repo:
#   pip download --no-binary :all: --no-deps llama-cpp-python==0.3.36
#   cmake vendor/llama.cpp -B build -DLLAMA_CURL=OFF -DGGML_NATIVE=ON
#   cmake --build build --target llama-lookup
# Environment: BUILD [build], MODEL [the default model], THREADS [2],
# N [160], DRAFT [8]. Run it on a quiet machine (ggml's threads spin).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
LOOKUP="${1:?usage: spec_vs_llama.sh LLAMA_LOOKUP [ROUNDS]}"
ROUNDS="${2:-3}"
BUILD="${BUILD:-$here/build}"
MODEL="${MODEL:-${TRELLIS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trellis}/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
THREADS="${THREADS:-2}" N="${N:-160}" DRAFT="${DRAFT:-8}"
. "$here/tests/bench/spec_prompts.sh"

trellis() { # prompt -> "tok/s drafted accepted"
    "$BUILD/trellis" generate -m "$MODEL" -p "$1" -n "$N" --temp 0 --seed 1 -t "$THREADS" \
        --ignore-eos --spec-ngram "$DRAFT" --json 2>/dev/null |
        python3 -c 'import sys, json
t = json.loads(sys.stdin.readline())["timings"]
print(round(t["decode_tok_per_s"], 2), t.get("spec_drafted_tokens", "-"), t["spec_accepted_tokens"])'
}
llama() { # prompt -> "tok/s drafted accepted"
    "$LOOKUP" -m "$MODEL" -p "$1" -n "$N" --temp 0 -s 1 -t "$THREADS" -tb "$THREADS" \
        --ignore-eos --spec-draft-n-max "$DRAFT" -c 2048 2>&1 |
        awk '/decoded/ { for (i = 1; i <= NF; i++) if ($i == "speed:") s = $(i + 1) }
             /n_drafted/ { d = $NF } /n_accept / { a = $NF }
             END { if (s == "") exit 1; print s, d, a }'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
     "threads $THREADS, n $N, draft $DRAFT, greedy, rounds $ROUNDS"
printf '%-8s %12s %12s %7s %22s %22s\n' workload "trellis t/s" "llama t/s" ratio \
       "trellis drafted/kept" "llama drafted/kept"
for w in copy extract free; do
    t=() l=() td= ld=
    for r in $(seq "$ROUNDS"); do
        if [ $((r % 2)) = 1 ]; then
            read -r a ad ak < <(trellis "${!w}"); read -r b bd bk < <(llama "${!w}")
        else
            read -r b bd bk < <(llama "${!w}"); read -r a ad ak < <(trellis "${!w}")
        fi
        t+=("$a") l+=("$b") td="$ad/$ak" ld="$bd/$bk"
    done
    mt=$(printf '%s\n' "${t[@]}" | median) ml=$(printf '%s\n' "${l[@]}" | median)
    printf '%-8s %12s %12s %7.2f %22s %22s\n' "$w" "$mt" "$ml" "$(echo "$mt / $ml" | bc -l)" "$td" "$ld"
done
