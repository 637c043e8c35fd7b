#!/usr/bin/env bash
# tests/browser/run.sh BUILD_DIR [OUTDIR] — the playground page in headless
# Chromium: Debian's chromium and chromedriver (installed here if missing;
# Selenium's own driver download is not used), Selenium from PyPI in
# BUILD_DIR/browser-venv. logic.js's unit tests run under node when it is
# installed, and in the browser always. Screenshots go to OUTDIR (default
# BUILD_DIR/browser-artifacts).
set -euo pipefail
build="$(cd "$1" && pwd)"
out="${2:-$build/browser-artifacts}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq chromium chromium-driver >/dev/null
fi
venv="$build/browser-venv"
if ! "$venv/bin/python" -c "import selenium" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "selenium>=4.15,<5"
fi
if command -v node >/dev/null; then node "$here/logic_test.js"; fi
export SE_AVOID_STATS=true SE_OFFLINE=true
"$venv/bin/python" "$here/test_playground.py" "$build" "$out"
