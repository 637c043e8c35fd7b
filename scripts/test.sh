#!/usr/bin/env bash
# scripts/test.sh — set up (scripts/setup.sh), build, and run every test:
# the unit tests and fuzz-corpus replays under ctest in Release, then the
# unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer,
# then a short run of every libFuzzer target (clang).
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

# Every parser's libFuzzer target, built with clang and run briefly from
# its checked-in corpus (a copy: new inputs stay out of the repository), so
# the fuzz build cannot rot. FUZZ_SECONDS per target (default 10).
echo "== fuzz targets (clang + libFuzzer, ${FUZZ_SECONDS:-10} s each)"
if command -v clang >/dev/null 2>&1; then
  CC=clang cmake -S "$here" -B "$here/build-fuzz" -DCMAKE_BUILD_TYPE=Debug \
        -DTRELLIS_FUZZ=ON -DTRELLIS_CUDA=OFF >/dev/null
  targets=()
  for src in "$here"/tests/fuzz/fuzz_*.c; do
    targets+=("$(basename "$src" .c)")
  done
  cmake --build "$here/build-fuzz" -j "$jobs" --target "${targets[@]}" >/dev/null
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  for t in "${targets[@]}"; do
    name="${t#fuzz_}"
    mkdir -p "$work/$name"
    cp -r "$here/tests/fuzz/corpus/$name/." "$work/$name/" 2>/dev/null || true
    if ! (cd "$work" && "$here/build-fuzz/tests/$t" "$work/$name" \
            -max_total_time="${FUZZ_SECONDS:-10}" -rss_limit_mb=4096 \
            > "$work/$name.log" 2>&1); then
      tail -40 "$work/$name.log"
      echo "fuzz target $t failed (crash input saved under $work)" >&2
      trap - EXIT
      exit 1
    fi
    echo "  $t: $(grep -o 'Done [0-9]* runs' "$work/$name.log" || echo ok)"
  done
else
  echo "  skipped: clang not found"
fi
