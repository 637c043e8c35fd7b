#!/usr/bin/env bash
# scripts/test.sh — set up (scripts/setup.sh), build, and run every test:
# the unit tests and fuzz-corpus replays under ctest in Release, then the
# unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$here/scripts/setup.sh"
jobs="$(nproc)"

echo "== unit tests (Release)"
ctest --test-dir "$here/build" --output-on-failure -j "$jobs"

echo "== unit tests (ASan + UBSan)"
cmake -S "$here" -B "$here/build-asan" -DCMAKE_BUILD_TYPE=Debug \
      -DTRELLIS_SANITIZE=ON -DTRELLIS_CUDA=OFF >/dev/null
cmake --build "$here/build-asan" -j "$jobs" >/dev/null
TRELLIS_TEST_SCALE=small ASAN_OPTIONS=detect_leaks=1 \
  ctest --test-dir "$here/build-asan" --output-on-failure -j "$jobs" -E "^e2e_"
