#!/usr/bin/env bash
# tests/bench/stream_http.sh — one client's stream through `trellis serve`
# against the same requests in-process (`trellis bench stream`): starts the
# server with the engine flags the in-process engine gets, runs the
# alternating rounds, prints each round and the median HTTP / in-process
# ratios of TTFT and TPOT, and the CPU time per streamed token of the
# server's loop thread (from /proc: what the HTTP path adds to the two
# cores; the engine and compute threads do what they do in-process).
#
#   tests/bench/stream_http.sh [extra `bench stream` flags]
#
# Environment (defaults in brackets): BUILD [build], MODEL [the default
# model], THREADS [2], CTX [4096], PORT [18095], ROUNDS [5], REQUESTS [8],
# PROMPT_TOKENS [200], MAX_TOKENS [128]. Run it on a quiet machine.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${BUILD:-$here/build}"
MODEL="${MODEL:-${TRELLIS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trellis}/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
THREADS="${THREADS:-2}"
CTX="${CTX:-4096}"
PORT="${PORT:-18095}"
engine=(-m "$MODEL" --threads "$THREADS" --ctx "$CTX")
tmp="$(mktemp -d)"
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT

"$BUILD/trellis" serve "${engine[@]}" --port "$PORT" >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.2; done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { cat "$tmp/server.log"; exit 1; }

loop_ticks() { awk '{ print $14 + $15 }' /proc/"$pid"/task/"$pid"/stat; }
echo "$(date -u "+%Y-%m-%d %H:%M UTC"), $(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | sed "s/^ //") ($(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || echo AVX2 or less)), $(nproc) CPUs, load $(cut -d" " -f1-3 /proc/loadavg)"
c0=$(loop_ticks)
"$BUILD/trellis" bench stream --url "http://127.0.0.1:$PORT" "${engine[@]}" \
    --rounds "${ROUNDS:-5}" --requests "${REQUESTS:-8}" \
    --prompt-tokens "${PROMPT_TOKENS:-200}" --max-tokens "${MAX_TOKENS:-128}" "$@" | tee "$tmp/out"
c1=$(loop_ticks)
# the streamed tokens: every round's requests plus the warm-up one
toks=$(( (${ROUNDS:-5} * ${REQUESTS:-8} + 1) * ${MAX_TOKENS:-128} ))
awk -v t="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" -v n="$toks" \
    'BEGIN { printf "server loop thread: %.2f s of CPU for %d streamed tokens, %.0f us a token\n", t / hz, n, 1e6 * t / hz / n }'
