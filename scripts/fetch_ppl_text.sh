#!/usr/bin/env bash
# scripts/fetch_ppl_text.sh — the text `trellis bench ppl` is measured on:
# the King James Version of the Bible, Genesis 1:1 to Exodus 20:26, one
# verse per line, a blank line between chapters (275,832 bytes of ASCII;
# 69,343 tokens of the SmolLM2 tokenizer). Prints the file's path.
#
#   scripts/fetch_ppl_text.sh            fetch (once), check, print the path
#   build/trellis bench ppl --text "$(scripts/fetch_ppl_text.sh)"
#
# Source: Debian's bible-kjv-text package (bookworm: 4.38; the text data
# of the Bible Retrieval System) read with the `bible` program of the
# bible-kjv package. Both .debs are fetched with `apt-get download` (no
# install, no root) and unpacked into a temporary folder; libreadline8,
# which `bible` links, is unpacked beside them when the machine lacks it.
#
# Public domain: the KJV translation dates from 1611; its copyright has
# long expired (Debian's copyright file for bible-kjv-text: "The copyright
# for the King James Version text of the Bible is expired"). (In the
# United Kingdom the KJV is under a perpetual Crown patent; the text used
# here for measurement is not redistributed by this repository.)
#
# Reproducible: the output is checked against the SHA-256 below, so a
# different package version, a changed `bible` output format or a damaged
# download is refused instead of silently measuring another text.
#
# Cached in $TRELLIS_CACHE/text, else $XDG_CACHE_HOME/trellis/text, else
# ~/.cache/trellis/text (the folder scripts/setup.sh uses for models).
# Idempotent: a second run downloads nothing.
set -euo pipefail

cache="${TRELLIS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trellis}"
text_dir="$cache/text"
text_file="kjv-genesis-exodus20.txt"
text_sha256="603c2a0371c731ca7e6664508fe8d442aa1512288a386903cabcb164f4076ec6"
verses="Gen1:1-Exo20:26"

log() { printf 'fetch_ppl_text: %s\n' "$*" >&2; }
sha_ok() { [ -f "$1" ] && echo "$text_sha256  $1" | sha256sum -c --status; }

[ $# -eq 0 ] || { log "takes no arguments (the text and its checksum are fixed)"; exit 2; }

if sha_ok "$text_dir/$text_file"; then
  echo "$text_dir/$text_file"
  exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"

# apt-get download needs the package lists; a fresh machine may not have
# them yet (as root, or with sudo, they are fetched once)
download() { apt-get download "$@" >"$tmp/apt.log" 2>&1; }
if ! download bible-kjv bible-kjv-text; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  log "apt-get download failed; updating the package lists"
  $sudo_cmd apt-get update -qq
  download bible-kjv bible-kjv-text || { cat "$tmp/apt.log" >&2; exit 1; }
fi
for deb in bible-kjv_*.deb bible-kjv-text_*.deb; do
  dpkg-deb -x "$deb" "$tmp/root"
done
log "unpacked $(ls bible-kjv-text_*.deb)"

bible="$tmp/root/usr/bin/bible"
if ldd "$bible" | grep -q 'libreadline.so.8 => not found'; then
  download libreadline8 || { cat "$tmp/apt.log" >&2; exit 1; }
  dpkg-deb -x libreadline8_*.deb "$tmp/root"
fi
export LD_LIBRARY_PATH="$tmp/root/lib/$(uname -m)-linux-gnu:$tmp/root/usr/lib/$(uname -m)-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# -f: no pretty-printing, so one verse a line as "Ge1:1 In the beginning
# ..."; the reference is dropped and a blank line marks a new chapter
"$bible" -p "$tmp/root/usr/lib" -f "$verses" </dev/null |
  awk '{ ref = $1; sub(/^[^ ]+ /, ""); split(ref, c, ":")
         if (NR > 1 && c[1] != prev) print ""
         prev = c[1]; print }' >"$tmp/$text_file"

if ! sha_ok "$tmp/$text_file"; then
  log "SHA-256 mismatch for $text_file ($(sha256sum "$tmp/$text_file" | cut -d' ' -f1)," \
      "$(wc -c <"$tmp/$text_file") bytes): refusing to use it"
  exit 1
fi
mkdir -p "$text_dir"
mv "$tmp/$text_file" "$text_dir/$text_file"
log "$verses, $(wc -c <"$text_dir/$text_file") bytes, SHA-256 checked"
echo "$text_dir/$text_file"
