#!/usr/bin/env bash
# tests/gpu/fetch_engine_debs.sh [DIR] — on a Debian machine with network,
# downloads (apt-get download: no install, no root needed for the files)
# the packages the full build needs that a bare GPU machine lacks, so that
# tests/gpu/run.sh can build and run test_gpu_engine THERE from source:
# it unpacks them into a private prefix (never into /) and configures with
# it. The second route; the first, a build made here and carried over, is
# tests/gpu/prepare_engine.sh.
#
# What the full build's configure asks for (CMakeLists.txt): PCRE2,
# jansson, libuv, http_parser, zlib and cmocka (headers, .pc files,
# libraries), and pkg-config to find them (pkgconf, with its library).
# zlib1g too: zlib1g-dev's libz.so points at its file by an absolute path,
# which run.sh points into the prefix.
#
# DIR defaults to build-gpudebs at the repository root (ignored by git);
# ~2.6 MB. Carry it, then on the GPU machine
#   TRELLIS_GPU_ENGINE_DEBS=build-gpudebs TRELLIS_GPU_STEPS=engine \
#       tests/gpu/run.sh OUTDIR
# The packages are this machine's release's (Debian 12 here): the GPU
# machine's C library must be as new as theirs.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="${1:-$here/build-gpudebs}"
pkgs=(libpcre2-dev libpcre2-8-0 libjansson-dev libjansson4 libuv1-dev libuv1
      libhttp-parser-dev libhttp-parser2.9 zlib1g-dev zlib1g libcmocka-dev libcmocka0
      pkgconf pkgconf-bin libpkgconf3)
mkdir -p "$dir"
rm -f "$dir"/*.deb
# apt's sandbox user cannot write everywhere: fetching as the caller is fine
(cd "$dir" && apt-get -q -o APT::Sandbox::User=root download "${pkgs[@]}")
echo "downloaded into $dir ($(du -sh "$dir" | cut -f1)):"
ls "$dir"
