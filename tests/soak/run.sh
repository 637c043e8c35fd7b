#!/usr/bin/env bash
# tests/soak/run.sh MINUTES [soak.py args] — the soak test (not in CI):
# `trellis serve` (BUILD_DIR/trellis, default build/) under a mixed
# workload for MINUTES; fails on RSS growth >= 5 % after warm-up, a KV
# page not back when idle, or any unexpected error. See soak.py for the
# workload and docs/reliability.md for the last recorded run.
#   e.g. tests/soak/run.sh 30 --concurrency 8
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mins="${1:?usage: tests/soak/run.sh MINUTES [--concurrency N] [--model PATH]}"
shift
bin="${BUILD_DIR:-$here/build}/trellis"
[ -x "$bin" ] || { echo "soak: $bin not built (cmake --build build)" >&2; exit 2; }
exec python3 "$here/tests/soak/soak.py" "$bin" --minutes "$mins" "$@"
