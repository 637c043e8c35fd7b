#!/usr/bin/env bash
# tests/bench/serve_cpu_split.sh — where a single stream's CPU goes when
# served over HTTP: CPU seconds of each `trellis serve` thread (from
# /proc/PID/task/*/stat) and of the client (tests/bench/serve_http.py,
# under /usr/bin/time) over 8 streamed requests of 64 tokens.
#
#   tests/bench/serve_cpu_split.sh            (BUILD [build], MODEL [the
#                                               default model], THREADS [2],
#                                               PORT [18090])
# Prints one line per server thread that ran ("thread TID cpu_ticks N",
# 100 ticks a second) and the client's user/sys/wall seconds. Run it on a
# quiet machine; the first thread is the loop thread.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${BUILD:-$here/build}"
MODEL="${MODEL:-${TRELLIS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trellis}/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
THREADS="${THREADS:-2}"
PORT="${PORT:-18090}"
tmp="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT

snap() { for t in /proc/"$1"/task/*; do echo "$(basename "$t") $(awk '{print $14 + $15}' "$t/stat")"; done | sort; }
client=(python3 "$here/tests/bench/serve_http.py" --url "http://127.0.0.1:$PORT" --workload tokens
        --prompt-tokens 200 --concurrency 1 --max-tokens 64)

"$BUILD/trellis" serve -m "$MODEL" --port "$PORT" --threads "$THREADS" --ctx 4096 >"$tmp/server.log" 2>&1 &
pid=$!
for _ in $(seq 150); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.2; done
"${client[@]}" --label warm --requests 2 >/dev/null
snap "$pid" >"$tmp/before"
/usr/bin/time -f "client user %U s, sys %S s, wall %e s" -o "$tmp/time" \
    "${client[@]}" --label http --requests 8
snap "$pid" >"$tmp/after"
join "$tmp/before" "$tmp/after" | awk '{ d = $3 - $2; if (d > 0) print "thread", $1, "cpu_ticks", d }'
cat "$tmp/time"
