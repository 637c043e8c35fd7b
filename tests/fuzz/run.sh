#!/usr/bin/env bash
# tests/fuzz/run.sh SECONDS [TARGET...] — run every libFuzzer target
# (tests/fuzz/fuzz_<name>.c) for SECONDS each, starting from its checked-in
# corpus (tests/fuzz/corpus/<name>/), and print one table row per target.
#
# Builds the targets with clang in build-fuzz/ (ASan + UBSan + libFuzzer)
# when needed; BUILD_DIR overrides the folder. The checked-in corpus is
# never written: each run mutates a copy. A crash, leak, timeout or OOM
# input is saved in tests/fuzz/artifacts/<name>/ (git-ignored) and the
# script exits non-zero. To make it a permanent regression test, copy it
# into tests/fuzz/corpus/<name>/ once fixed: ctest's replay_<name> runs every
# corpus file in every build.
#
# Options (environment): FUZZ_RSS_MB (default 4096), FUZZ_JOBS (build -j,
# default nproc), FUZZ_KEEP=1 keeps the work folder (new corpus entries).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
secs="${1:-}"
if ! [[ "$secs" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: tests/fuzz/run.sh SECONDS [TARGET...]" >&2
    exit 2
fi
shift
build="${BUILD_DIR:-$here/build-fuzz}"
rss="${FUZZ_RSS_MB:-4096}"
jobs="${FUZZ_JOBS:-$(nproc)}"
if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz: clang not found (apt-get install clang)" >&2
    exit 2
fi

targets=()
if [ $# -gt 0 ]; then
    for t in "$@"; do targets+=("fuzz_${t#fuzz_}"); done
else
    for src in "$here"/tests/fuzz/fuzz_*.c; do targets+=("$(basename "$src" .c)"); done
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
    CC=clang cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Debug \
        -DTRELLIS_FUZZ=ON -DTRELLIS_CUDA=OFF -DTRELLIS_SHARED=OFF >/dev/null || exit 1
fi
cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$build/fuzz-build.log" 2>&1 ||
    { tail -30 "$build/fuzz-build.log"; echo "fuzz: build failed" >&2; exit 1; }

work="$(mktemp -d)"
[ "${FUZZ_KEEP:-0}" = 1 ] && echo "fuzz: work folder $work" || trap 'rm -rf "$work"' EXIT
rows=()
failed=0
for t in "${targets[@]}"; do
    name="${t#fuzz_}"
    dir="$work/$name"
    mkdir -p "$dir/corpus" "$dir/out"
    cp -r "$here/tests/fuzz/corpus/$name/." "$dir/corpus/" 2>/dev/null || true
    t0=$(date +%s)
    (cd "$dir/out" && "$build/tests/$t" "$dir/corpus" -max_total_time="$secs" \
        -rss_limit_mb="$rss" -timeout=25 -artifact_prefix="$dir/out/" \
        -print_final_stats=1 >"$dir/log" 2>&1)
    rc=$?
    dt=$(($(date +%s) - t0))
    runs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/log" | grep -o '[0-9]*$')"
    cov="$(grep -o 'cov: [0-9]*' "$dir/log" | tail -1 | grep -o '[0-9]*$')"
    found=("$dir"/out/crash-* "$dir"/out/leak-* "$dir"/out/timeout-* "$dir"/out/oom-*)
    found=($(ls "${found[@]}" 2>/dev/null))
    if [ $rc -eq 0 ] && [ ${#found[@]} -eq 0 ]; then
        result=ok
    else
        result="FAIL (exit $rc)"
        failed=1
        dest="$here/tests/fuzz/artifacts/$name"
        mkdir -p "$dest"
        cp "$dir/log" "$dest/fuzz.log"
        [ ${#found[@]} -gt 0 ] && cp "${found[@]}" "$dest/"
        echo "---- $t (last lines of $dest/fuzz.log)"
        grep -A25 -m1 'ERROR:\|==ERROR\|runtime error\|deadly signal\|Timeout\|out-of-memory' "$dir/log" |
            head -40
        echo "---- inputs saved in $dest/ (${#found[@]})"
    fi
    rows+=("$(printf '%-14s %-14s %6ss %10s %7s' "$name" "$result" "$dt" "${runs:-?}" "${cov:-?}")")
done

echo
printf '%-14s %-14s %7s %10s %7s\n' target result time runs cov
printf '%s\n' "${rows[@]}"
[ $failed -eq 0 ] || echo "fuzz: failures; inputs in tests/fuzz/artifacts/<target>/" >&2
exit $failed
