#!/bin/sh
# check_symbols.sh BUILD_DIR [LIB.a...] — every global symbol a static
# library of the build defines starts with trellis_ (the public API) or tr_
# (internal), and the shared library exports only trellis_ (it is built
# with hidden visibility: TRELLIS_API marks the public functions). A static
# library cannot hide its internals from an embedder's linker, so a bare
# `model_load` or `sampler_new` would collide with the embedder's own.
#
# The libraries: those named (tests/CMakeLists.txt names every static
# library target: the core modules, libtrellis.a, the applications' own),
# else every *.a under BUILD_DIR. A named library that is missing (not
# built) fails the check rather than passing it unchecked.
set -eu
build="$1"
shift
bad=0
found=0
if [ "$#" -eq 0 ]; then
    set -- $(find "$build" -name '*.a' | sort)
fi
for lib in "$@"; do
    if [ ! -f "$lib" ]; then
        echo "$lib: not built"
        bad=1
        continue
    fi
    found=$((found + 1))
    syms=$(nm -g --defined-only "$lib" 2>/dev/null | awk 'NF == 3 && $2 ~ /[A-Z]/ {print $3}' |
           grep -Ev '^(tr_|trellis_)' || true)
    if [ -n "$syms" ]; then
        echo "$lib: global symbols without the tr_/trellis_ prefix:"
        echo "$syms" | sed 's/^/  /'
        bad=1
    fi
done
for so in $(find "$build" -name 'libtrellis.so*' -type f); do
    found=$((found + 1))
    syms=$(nm -D --defined-only "$so" | awk 'NF == 3 && $2 ~ /[A-Z]/ {print $3}' |
           grep -Ev '^trellis_' || true)
    if [ -n "$syms" ]; then
        echo "$so: exports symbols outside the public API:"
        echo "$syms" | sed 's/^/  /'
        bad=1
    fi
    if ! nm -D --defined-only "$so" | grep -q ' T trellis_submit$'; then
        echo "$so: does not export trellis_submit"
        bad=1
    fi
done
if [ "$found" -eq 0 ]; then
    echo "no libraries found under $build"
    exit 1
fi
[ "$bad" -eq 0 ] && echo "checked $found libraries: symbols ok"
exit "$bad"
