#!/usr/bin/env bash
# tests/e2e/server/sglang_suite.sh BUILD_DIR [OUT.json] — SGLang's own
# tests against `trellis serve` (sglang_suite.py says what runs and how).
# Installs the `sglang` package from PyPI without its dependencies (torch,
# triton and the GPU stack are not needed to send HTTP requests; a stub
# stands in for their imports) plus the few small packages its frontend
# and kits import, into BUILD_DIR/sglang-venv (made once, reused). Starts
# the server on a free port with the default model, runs every test,
# prints one line per test and a summary. Informational: the exit status
# is 0 whatever the tests do (their answers depend on the 135M model);
# docs/compatibility.md lists each failure's reason.
set -euo pipefail
build="$(cd "$1" && pwd)"
out="${2:-}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$build/sglang-venv"
sglang_version=0.5.23
if ! "$venv/bin/pip" show sglang 2>/dev/null | grep -q "^Version: $sglang_version$" ||
   ! "$venv/bin/python" -c "import anthropic, openai, yaml, jinja2, fastapi" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check --no-deps "sglang==$sglang_version"
    # what `import sglang`, its frontend and its HTTP test kits import
    "$venv/bin/pip" install -q --disable-pip-version-check numpy requests orjson psutil \
        pybase64 packaging starlette msgspec pydantic pyzmq tqdm aiohttp openai httpx \
        tabulate pyyaml anthropic jinja2 fastapi
fi
dir="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
"${TRELLIS_BIN:-$build/trellis}" serve --port 0 --port-file "$dir/port" > "$dir/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
    [ -s "$dir/port" ] && curl -sf "http://127.0.0.1:$(cat "$dir/port")/health" >/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$dir/serve.log"; exit 1; }
    sleep 0.1
done
url="http://127.0.0.1:$(cat "$dir/port")"
args=(--url "$url")
[ -n "$out" ] && args+=(--json "$out")
"$venv/bin/python" -u "$here/sglang_suite.py" "${args[@]}" || true
