#!/usr/bin/env bash
# tests/gpu/prepare_engine.sh [DIR] — on a machine WITHOUT a GPU (but with
# the CUDA toolkit and the full build's packages: PCRE2, jansson, libuv,
# cmocka, ...), builds what tests/gpu/run.sh's TRELLIS_GPU_ENGINE_PREBUILT
# runs on a GPU machine, which has CUDA, CMake and a C compiler but none of
# those packages and no network:
#
#   DIR/tests/test_gpu_engine   the engine on the GPU (full build, CUDA)
#   DIR/lib/                    the shared libraries it loads that a bare
#                               machine lacks (ldd's list less glibc,
#                               libstdc++, libgcc_s and CUDA's own: the GPU
#                               machine's CUDA provides libcudart)
#
# DIR defaults to build-gpueng at the repository root (ignored by git). It
# is a full build tree (~30 MB of objects), configured Release with the
# CUDA backend for TRELLIS_CUDA_ARCHS (default 90-real: an H100/H200; add
# 80-real for an A100). Only the two paths above need to travel (~4 MB):
# carry DIR/tests/test_gpu_engine and DIR/lib, then on the GPU machine
#   TRELLIS_GPU_ENGINE_PREBUILT=DIR tests/gpu/run.sh OUTDIR
# (TRELLIS_GPU_STEPS=engine runs that step alone). The libraries were
# built against this machine's glibc: the GPU machine's must be as new.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="${1:-$here/build-gpueng}"
archs="${TRELLIS_CUDA_ARCHS:-90-real}"
jobs="${JOBS:-2}"

cmake -S "$here" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DTRELLIS_CUDA=ON \
      "-DCMAKE_CUDA_ARCHITECTURES=$archs" >/dev/null
cmake --build "$dir" -j "$jobs" --target test_gpu_engine >/dev/null
bin="$dir/tests/test_gpu_engine"

# What a GPU machine has without our packages: the C runtime, the C++
# runtime nvcc's host code links, and CUDA's runtime (its toolkit's).
rm -rf "$dir/lib"
mkdir -p "$dir/lib"
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' |
while read -r soname path; do
    case "$soname" in
    linux-vdso* | ld-linux* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | \
        librt.so.* | libstdc++.so.* | libgcc_s.so.* | libcudart.so.*)
        continue ;;
    esac
    cp -L "$path" "$dir/lib/$soname"
done
echo "built $bin ($(du -h "$bin" | cut -f1)); libraries in $dir/lib:"
ls -l "$dir/lib" | tail -n +2
echo "carry: ${bin#"$here"/} ${dir#"$here"/}/lib ($(du -shc "$bin" "$dir/lib" | tail -1 | cut -f1))"
