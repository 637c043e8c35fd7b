#!/usr/bin/env bash
# scripts/test.sh — set up (scripts/setup.sh) and run every test, stage by
# stage, then print a one-screen summary (stage, pass/fail, time). Every
# stage runs even when an earlier one failed; the exit status is non-zero
# if any failed.
#
#   release    unit tests, fuzz-corpus replays, symbol check, end-to-end
#              tests under ctest (Release build in build/)
#   asan       the unit tests again under AddressSanitizer + UBSan (Debug
#              at -O1, in build-asan/)
#   server-asan  `trellis` built with ASan + UBSan (RelWithDebInfo, in
#              build-asan-rel/): the server's e2e tests and the short load
#              test against it (twice: the second with the disk tier on);
#              a leak or UB report makes the server exit non-zero, which
#              fails its test
#   tsan       the engine's fake-model tests (test_engine, test_engine_spec:
#              speculative decoding, test_engine_draft: with a draft
#              model, test_engine_plp, test_end_span,
#              test_engine_disk: the disk tier; and its store, test_kv_disk;
#              test_engine_window: windowed KV pages),
#              the grammar tests that share state across threads
#              (test_grammar_cache; test_grammar_ebnf's regions and memo
#              threads), the server's unit tests and the DSL's threaded
#              tests (fork, parallel, spawned calls, batches; over the fake
#              engine and over HTTP) under ThreadSanitizer (small scale)
#   core-only  the model core (base, kernels, gguf, model) and its tests,
#              configured with every other package disabled: what a GPU
#              test machine without our dependencies builds
#   cuda-build the CUDA backend (kernels/cuda) configured and built in the
#              core-only setting with TRELLIS_CUDA=ON (warnings are errors
#              in host and device code), then its tests: they SKIP (77)
#              without a GPU, and ctest counts a skip as a skip, never a
#              pass. The GPU run itself: tests/gpu/run.sh on a GPU machine
#   browser    the playground page (`trellis serve` at /) in headless
#              Chromium: tests/browser/run.sh (installs Debian's chromium
#              and chromedriver if missing, Selenium from PyPI); screenshots
#              in build/browser-artifacts/
#   install    cmake --install into a temporary prefix, then the samples
#              built against it with pkg-config (shared and static) and run
#   fuzz       tests/fuzz/run.sh: every libFuzzer target for FUZZ_SECONDS
#              (default 10) from its checked-in corpus (clang)
#
# STAGES="release asan" runs only those stages. The setup stage also
# fetches Gemma 3 270M (238 MB, once; scripts/setup.sh --model gemma3-270m).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="$(nproc)"
stages="${STAGES:-release asan server-asan tsan browser core-only cuda-build install fuzz}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
summary=()
failed=0

run_stage() { # name function
    local name="$1" t0 rc
    echo "== $name"
    t0=$(date +%s)
    "$2"
    rc=$?
    local dt=$(($(date +%s) - t0))
    if [ $rc -eq 0 ]; then
        summary+=("$(printf '%-10s pass  %5ss' "$name" "$dt")")
    else
        summary+=("$(printf '%-10s FAIL  %5ss  (exit %s)' "$name" "$dt" "$rc")")
        failed=1
    fi
}

# Gemma 3 270M too: its parity and tokenizer tests (label gemma) are part
# of every test run; `ctest -LE gemma` leaves them out by hand.
stage_setup() { "$here/scripts/setup.sh" --model gemma3-270m; }

stage_release() {
    ctest --test-dir "$here/build" --output-on-failure -j "$jobs"
}

stage_asan() {
    # -O1, as the sanitizers' own docs advise: at -O0 the model tests spent
    # most of the stage loading and running real weights (test_model_gemma
    # alone 347 s; the unit tests 723 s, against 274 s at -O1). Debug keeps
    # assert() on.
    cmake -S "$here" -B "$here/build-asan" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" \
          -DTRELLIS_SANITIZE=ON -DTRELLIS_CUDA=OFF -DTRELLIS_SHARED=OFF >/dev/null &&
    cmake --build "$here/build-asan" -j "$jobs" >/dev/null &&
    # The tests that drive the server binary (e2e_*, schema_generate_quick)
    # run against an ASan build in server-asan (RelWithDebInfo): a Debug
    # server generates too slowly for their budgets.
    TRELLIS_TEST_SCALE=small ASAN_OPTIONS=detect_leaks=1 \
        ctest --test-dir "$here/build-asan" --output-on-failure -j "$jobs" \
              -E "^(e2e_|symbols|schema_generate)"
}

stage_server_asan() {
    local b="$here/build-asan-rel"
    cmake -S "$here" -B "$b" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRELLIS_SANITIZE=ON \
          -DTRELLIS_TESTS=OFF -DTRELLIS_CUDA=OFF -DTRELLIS_SHARED=OFF >/dev/null &&
    cmake --build "$b" -j "$jobs" --target trellis >/dev/null || return 1
    # the release build's venv (build/e2e-venv) serves; only the binary
    # changes. The OpenAI-client and protocol tests (one server, a few
    # more for keys, the queue and SIGTERM), the disk tier's and the draft
    # model's (a second model in the engine) and a short load test: the
    # hardening tests start a server each, which ASan makes slow. RSS is
    # not judged here (ASan's quarantine keeps freed memory); LeakSanitizer
    # at the server's exit is the check, and the release stage checks RSS.
    export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
    TRELLIS_BIN="$b/trellis" bash "$here/tests/e2e/server/run.sh" "$here/build" -q \
        test_openai.py test_protocol.py test_kv_disk.py test_draft_model.py &&
    python3 "$here/tests/e2e/server/load.py" "$b/trellis" --requests 80 --concurrency 16 \
        --max-tokens 8 --rss-growth 10 &&
    python3 "$here/tests/e2e/server/load.py" "$b/trellis" --requests 80 --concurrency 16 \
        --max-tokens 8 --rss-growth 10 --kv-cache-dir
}

stage_tsan() {
    local b="$here/build-tsan"
    cmake -S "$here" -B "$b" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRELLIS_TSAN=ON \
          -DTRELLIS_CUDA=OFF -DTRELLIS_SHARED=OFF >/dev/null &&
    cmake --build "$b" -j "$jobs" --target test_engine test_engine_spec test_engine_draft test_engine_plp \
          test_engine_disk test_kv_disk test_engine_window test_grammar_cache test_end_span test_grammar_ebnf \
          test_server test_dsl_interp test_dsl_http >/dev/null || return 1
    # Any report fails the stage (halt_on_error); nothing is suppressed.
    # The real-model tests (test_engine_model, test_end_span's
    # test_measure_real) are left out: the same engine threads and queues
    # plus the CPU backend's worker pool, ~65x slower under TSan
    # (test_batch_invariance_real at small scale: 1.9 s in Release, 126 s
    # here; the four of test_engine_model at small scale: 19 min, clean;
    # test_measure_real at small scale: a few minutes, clean). Run them by
    # hand. The stage took ~10 min on the shared 2-core machine.
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
    TRELLIS_TEST_SCALE=small "$b/tests/test_engine" &&
    TRELLIS_TEST_SCALE=small "$b/tests/test_engine_spec" &&
    TRELLIS_TEST_SCALE=small "$b/tests/test_engine_draft" &&
    TRELLIS_TEST_SCALE=small "$b/tests/test_engine_plp" &&
    "$b/tests/test_engine_disk" && "$b/tests/test_kv_disk" && "$b/tests/test_engine_window" &&
    TRELLIS_TEST_SCALE=small "$b/tests/test_grammar_cache" &&
    TRELLIS_TEST_SCALE=small TRELLIS_TEST_FILTER='test_regions' "$b/tests/test_grammar_ebnf" &&
    TRELLIS_TEST_SCALE=small TRELLIS_TEST_FILTER='test_memo_threads' "$b/tests/test_grammar_ebnf" &&
    TRELLIS_TEST_SCALE=small TRELLIS_TEST_SKIP='*_real' "$b/tests/test_end_span" &&
    "$b/tests/test_server" &&
    TRELLIS_TEST_SCALE=small "$b/tests/test_dsl_interp" &&
    TRELLIS_TEST_SCALE=small "$b/tests/test_dsl_http"
}

stage_core_only() {
    local b="$here/build-core"
    cmake -S "$here" -B "$b" -DTRELLIS_CORE_ONLY=ON -DTRELLIS_CUDA=OFF \
          -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON >/dev/null &&
    cmake --build "$b" -j "$jobs" >/dev/null &&
    TRELLIS_TEST_SCALE=small ctest --test-dir "$b" --output-on-failure -j "$jobs"
}

# Without nvcc the stage fails (TRELLIS_CUDA=ON requires the toolkit):
# CI has it. Measured on the shared 2-core machine: 19 s from scratch
# (configure, the four .cu files for sm_80, sm_90 and compute_90, the two
# tests), the tests themselves 0.01 s (they skip).
stage_cuda_build() {
    local b="$here/build-cuda-ci"
    cmake -S "$here" -B "$b" -DTRELLIS_CORE_ONLY=ON -DTRELLIS_CUDA=ON \
          -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON >/dev/null &&
    cmake --build "$b" -j "$jobs" --target tr_kernels_cuda test_cuda_open test_backend_ops \
          test_gpu_parity >/dev/null &&
    TRELLIS_TEST_SCALE=small ctest --test-dir "$b" --output-on-failure -L gpu
}

stage_browser() {
    bash "$here/tests/browser/run.sh" "$here/build" "$here/build/browser-artifacts"
}

stage_install() {
    local prefix="$work/prefix" model
    model="${TRELLIS_MODEL:-${TRELLIS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trellis}/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
    cmake --install "$here/build" --prefix "$prefix" >/dev/null || return 1
    export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
    local cflags libs
    cflags="$(pkg-config --cflags trellis)" && libs="$(pkg-config --libs trellis)" || return 1
    # shared: the documented way (README, "C API")
    cc -std=c11 -Wall -Wextra -Werror "$here/samples/embed.c" $cflags $libs \
       -o "$work/embed_shared" || return 1
    LD_LIBRARY_PATH="$prefix/lib" "$work/embed_shared" "$model" "Say hello." >"$work/embed.out" ||
        { cat "$work/embed.out"; return 1; }
    grep -q '^engine:' "$work/embed.out" || { echo "embed_shared: no summary line"; return 1; }
    # static, with the libuv sample
    cc -std=c11 -Wall -Wextra -Werror "$here/samples/embed_uv.c" $cflags \
       "$prefix/lib/libtrellis.a" $(pkg-config --static --libs-only-l trellis | sed 's/-ltrellis//') \
       $(pkg-config --libs libuv) -o "$work/embed_uv_static" || return 1
    ! ldd "$work/embed_uv_static" | grep -q libtrellis || { echo "static build loads libtrellis.so"; return 1; }
    "$work/embed_uv_static" "$model" >"$work/embed_uv.out" || { cat "$work/embed_uv.out"; return 1; }
    echo "  samples built with pkg-config (shared and static) and run"
}

stage_fuzz() {
    # one table row per target; crash inputs land in tests/fuzz/artifacts/
    bash "$here/tests/fuzz/run.sh" "${FUZZ_SECONDS:-10}"
}

run_stage setup stage_setup
if [ "$failed" -ne 0 ]; then
    echo "setup failed: nothing else can run" >&2
    exit 1
fi
for s in $stages; do
    run_stage "$s" "stage_${s//-/_}"
done

echo
echo "== summary"
printf '  %s\n' "${summary[@]}"
exit "$failed"
