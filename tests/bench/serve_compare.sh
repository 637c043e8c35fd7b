#!/usr/bin/env bash
# tests/bench/serve_compare.sh — `trellis serve` against llama.cpp's
# llama-server on this machine, side by side, with one client
# (tests/bench/serve_http.py), same GGUF, same threads; then a single
# stream through HTTP against the in-process engine (`trellis bench stream`).
#
#   tests/bench/serve_compare.sh [build-llama]   builds llama-server first if missing
#
# Environment (defaults in brackets):
#   BUILD [build]          Trellis build dir
#   PEERS [/work/peers]    where llama-server is built and its sources kept
#   MODEL [the default model]
#   THREADS [2]  WORKLOADS [fewshot,random,json]  CONCURRENCY [1,16,32]
#   REQUESTS [0 = 4 x concurrency, at least 8]  MAX_TOKENS [64]  ROUNDS [1]
#   CTX [4096]             context per sequence on both servers
#   KV_TYPE [f16]          KV cache type on both servers: f16, q8 (llama.cpp:
#                          -ctk/-ctv q8_0, which needs -fa on) or q4 (q4_0)
#   LLAMA_SERVER [$PEERS/llama.cpp-build/bin/llama-server]
#   LLAMA_ARGS []          more llama-server arguments, split on spaces
#                          (`-nr` where its AMX weight repacking crashes:
#                          Sapphire Rapids VMs, llama.cpp of 0.3.36)
#   PORT_T [18080] PORT_L [18081]
# Each (workload, concurrency) runs both servers one after the other,
# ROUNDS times alternating which goes first; every figure goes to
# $OUT [serve_compare.jsonl] and a table is printed at the end.
#
# llama-server is built from the llama.cpp sources vendored in PyPI's
# llama-cpp-python 0.3.36 sdist, outside the repo:
#   pip download --no-binary :all: --no-deps llama-cpp-python==0.3.36
#   cmake vendor/llama.cpp -DLLAMA_CURL=OFF -DGGML_NATIVE=ON; build llama-server
# It runs with --parallel = concurrency and continuous batching, its
# context split across slots (so -c = CTX x parallel).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${BUILD:-$here/build}"
PEERS="${PEERS:-/work/peers}"
MODEL="${MODEL:-${TRELLIS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trellis}/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
THREADS="${THREADS:-2}"
WORKLOADS="${WORKLOADS:-fewshot,random,json}"
CONCURRENCY="${CONCURRENCY:-1,16,32}"
REQUESTS="${REQUESTS:-0}"
MAX_TOKENS="${MAX_TOKENS:-64}"
ROUNDS="${ROUNDS:-1}"
CTX="${CTX:-4096}"
PORT_T="${PORT_T:-18080}"
PORT_L="${PORT_L:-18081}"
OUT="${OUT:-serve_compare.jsonl}"
KV_TYPE="${KV_TYPE:-f16}"
LLAMA_SERVER="${LLAMA_SERVER:-$PEERS/llama.cpp-build/bin/llama-server}"
case "$KV_TYPE" in
    f16) llama_kv=(-ctk f16 -ctv f16) ;;
    q8) llama_kv=(-ctk q8_0 -ctv q8_0 -fa on) ;;
    q4) llama_kv=(-ctk q4_0 -ctv q4_0 -fa on) ;;
    *) echo "KV_TYPE must be f16, q8 or q4" >&2; exit 2 ;;
esac
PY="${PYTHON:-python3}"

build_llama() {
    mkdir -p "$PEERS/dl" "$PEERS/src"
    if [ ! -d "$PEERS/src/llama_cpp_python-0.3.36" ]; then
        "$PY" -m pip download -q --no-binary :all: --no-deps llama-cpp-python==0.3.36 -d "$PEERS/dl"
        tar xzf "$PEERS/dl/llama_cpp_python-0.3.36.tar.gz" -C "$PEERS/src"
    fi
    nice cmake -S "$PEERS/src/llama_cpp_python-0.3.36/vendor/llama.cpp" -B "$PEERS/llama.cpp-build" \
        -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=ON \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >/dev/null
    nice cmake --build "$PEERS/llama.cpp-build" -j "$(nproc)" --target llama-server >/dev/null
}

if [ "${1:-}" = "build-llama" ] || [ ! -x "$LLAMA_SERVER" ]; then
    echo "building llama-server in $PEERS/llama.cpp-build"
    build_llama
fi

pid=""
stop_server() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid"
        wait "$pid" || true
    fi
    pid=""
}
trap stop_server EXIT

wait_health() { # port
    for _ in $(seq 1 600); do
        if curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    echo "server on port $1 did not become healthy" >&2
    return 1
}

start_trellis() { # concurrency
    "$BUILD/trellis" serve -m "$MODEL" --port "$PORT_T" --threads "$THREADS" --ctx "$CTX" \
        --kv-type "$KV_TYPE" --max-running "$(( $1 > 64 ? $1 : 64 ))" >"$OUT.trellis.log" 2>&1 &
    pid=$!
    wait_health "$PORT_T"
}

start_llama() { # concurrency
    "$LLAMA_SERVER" -m "$MODEL" --port "$PORT_L" --threads "$THREADS" --threads-batch "$THREADS" \
        --parallel "$1" --cont-batching -c "$(( CTX * $1 ))" --no-webui "${llama_kv[@]}" ${LLAMA_ARGS:-} \
        >"$OUT.llama.log" 2>&1 &
    pid=$!
    wait_health "$PORT_L"
}

run_client() { # label port workload concurrency
    "$PY" "$here/tests/bench/serve_http.py" --url "http://127.0.0.1:$2" --label "$1" \
        --workload "$3" --concurrency "$4" --requests "$REQUESTS" --max-tokens "$MAX_TOKENS" \
        --json "$OUT" || true
}

: >"$OUT"
IFS=, read -ra wls <<<"$WORKLOADS"
IFS=, read -ra cs <<<"$CONCURRENCY"
for round in $(seq 1 "$ROUNDS"); do
    for wl in "${wls[@]}"; do
        for c in "${cs[@]}"; do
            order="trellis llama"
            [ $((round % 2)) -eq 0 ] && order="llama trellis"
            for who in $order; do
                if [ "$who" = trellis ]; then
                    start_trellis "$c"
                    run_client trellis "$PORT_T" "$wl" "$c"
                else
                    start_llama "$c"
                    run_client llama.cpp "$PORT_L" "$wl" "$c"
                fi
                stop_server
            done
        done
    done
done

# single stream: HTTP against in-process (`trellis bench stream`: the same
# requests down both paths, alternating, a client that costs the cores
# little; tests/bench/stream_http.sh runs it alone)
echo "single stream: HTTP vs in-process engine (200-token prompt, $MAX_TOKENS tokens)"
start_trellis 1
"$BUILD/trellis" bench stream --url "http://127.0.0.1:$PORT_T" -m "$MODEL" --threads "$THREADS" \
    --ctx "$CTX" --max-running 64 --rounds 3 --requests 8 --max-tokens "$MAX_TOKENS" || true
stop_server

"$PY" - "$OUT" <<'EOF'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = collections.defaultdict(list)
for r in rows:
    by[(r["workload"], r["concurrency"], r["label"])].append(r)
def med(rs, k):
    v = [r[k] for r in rs if r["ok"]]
    return statistics.median(v) if v else float("nan")
print(f"\n{'workload':8s} {'conc':>4s} | {'trellis tok/s':>13s} {'llama tok/s':>11s} {'ratio':>6s} | "
      f"{'TTFT p50 T/L ms':>17s} {'ratio':>6s} | {'TTFT p99 T/L ms':>17s} | {'TPOT p50 T/L ms':>15s} | errors T/L")
keys = sorted({(w, c) for (w, c, l) in by if l in ("trellis", "llama.cpp")}, key=lambda k: (k[0], k[1]))
for w, c in keys:
    t, l = by.get((w, c, "trellis"), []), by.get((w, c, "llama.cpp"), [])
    tt, lt = med(t, "output_tok_s"), med(l, "output_tok_s")
    t1, l1 = med(t, "ttft_p50_ms"), med(l, "ttft_p50_ms")
    t9, l9 = med(t, "ttft_p99_ms"), med(l, "ttft_p99_ms")
    tp, lp = med(t, "tpot_p50_ms"), med(l, "tpot_p50_ms")
    te, le = sum(r["errors"] for r in t), sum(r["errors"] for r in l)
    print(f"{w:8s} {c:4d} | {tt:13.1f} {lt:11.1f} {tt / lt if lt else float('nan'):6.2f} | "
          f"{t1:8.0f}/{l1:<8.0f} {t1 / l1 if l1 else float('nan'):6.2f} | {t9:8.0f}/{l9:<8.0f} | "
          f"{tp:7.1f}/{lp:<7.1f} | {te}/{le}")
EOF
