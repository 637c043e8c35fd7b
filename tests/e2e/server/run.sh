#!/usr/bin/env bash
# tests/e2e/server/run.sh BUILD_DIR [pytest args] — the server's end-to-end
# tests (official `openai` client, `instructor`, LangChain's `langchain-openai`,
# `jsonschema`, raw sockets) with pytest,
# in a venv this script makes from PyPI under BUILD_DIR/e2e-venv (build
# output, ignored by git; made once, reused after). Needs the default model
# (label `model`: fails when it is missing). TRELLIS_ROUTER=1 also installs
# sglang-router==0.3.2 for test_router.py (skipped without it). TRELLIS_BIN
# runs another binary (the server-asan stage: an ASan build) with this venv.
#   e.g. run.sh build -k stream   narrows the run.
set -euo pipefail
build="$(cd "$1" && pwd)"
shift
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$build/e2e-venv"
# pinned: left free, the resolver picked instructor 1.3 (another API) on a
# fresh machine; these versions are the ones the tests were written with
pins=(openai==3.3.0 jsonschema==4.26.0 pytest==9.2.0 instructor==1.17.0
      langchain-openai==1.8.1)
if [ ! -x "$venv/bin/pytest" ] || ! "$venv/bin/python" - "${pins[@]}" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(any(version(n) != v for n, v in (p.split("==") for p in sys.argv[1:])))
PY
then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
fi
if [ "${TRELLIS_ROUTER:-0}" = 1 ] && ! "$venv/bin/python" -c 'import sglang_router' 2>/dev/null; then
    "$venv/bin/pip" install -q --disable-pip-version-check sglang-router==0.3.2
fi
export TRELLIS_BIN="${TRELLIS_BIN:-$build/trellis}" # another build (sanitizers) may be named
cd "$here"
# exit 5 (no test collected) is a failure here too
exec "$venv/bin/pytest" -q -p no:cacheprovider "$@"
