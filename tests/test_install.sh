#!/usr/bin/env bash
# hearth installs like any C library and program: `cmake --install` into a temp prefix gives bin/hearth,
# lib/libhearth.so.MAJOR (+ libhearth.a), include/hearth.h and lib/pkgconfig/hearth.pc; a C program builds with
# `cc demo.c $(pkg-config --cflags --libs hearth)` against the shared library (and statically) and runs; both
# libraries define hearth_* symbols only; the installed binary runs the embedded model from / with no file
# beside it.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
BUILD=${HEARTH_BUILD:?}
if grep -qa __asan_init "$HEARTH"; then echo "sanitizer build: a plain cc cannot link its library; covered by the normal run"; exit 0; fi
command -v pkg-config >/dev/null || { echo "FAIL: pkg-config not found (apt-get install -y pkg-config)"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cmake --install "$BUILD" --prefix "$tmp/p" > "$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; echo "FAIL: cmake --install"; exit 1; }
lib=$(ls -d "$tmp/p"/lib*/ | head -1)
for f in bin/hearth include/hearth.h; do check "installed $f" '[[ -f "$tmp/p/$f" ]]'; done
check "installed libhearth.so.0 (and the dev symlink)" '[[ -f $(echo "$lib"/libhearth.so.0) && -L "$lib/libhearth.so" ]]'
check "installed libhearth.a" '[[ -f "$lib/libhearth.a" ]]'
check "installed hearth.pc" '[[ -f "$lib/pkgconfig/hearth.pc" ]]'
check "installed the README" '[[ -n $(find "$tmp/p/share" -name README.md) ]]'

export PKG_CONFIG_PATH="$lib/pkgconfig"
cc "$here/install/demo.c" $(pkg-config --cflags --libs hearth) -o "$tmp/demo" 2> "$tmp/cc.log" || cat "$tmp/cc.log"
out=$(cd / && LD_LIBRARY_PATH="$lib" "$tmp/demo" "$here/data/models/stories260K.gguf" "Once upon a time" 12 2>&1)
check "demo against the shared library" '[[ $out == ", there was a little girl named Lily"* ]] || { echo "  [$out]"; false; }'
check "demo links the shared library" 'LD_LIBRARY_PATH="$lib" ldd "$tmp/demo" | matches "libhearth.so.0"'
# the archive, with the shared system libraries hearth.pc names as private requirements
cc "$here/install/demo.c" $(pkg-config --cflags hearth) "$lib/libhearth.a" \
    $(pkg-config --libs $(pkg-config --print-requires-private hearth | awk '{print $1}')) -lm -pthread \
    -o "$tmp/demo-static" 2> "$tmp/cc2.log" || cat "$tmp/cc2.log"
out2=$("$tmp/demo-static" "$here/data/models/stories260K.gguf" "Once upon a time" 12 2>&1)
check "demo against the static library" '[[ "$out2" == "$out" ]]'

bad=$(nm -D --defined-only "$lib/libhearth.so.0" | awk '{print $3}' | grep -v '^hearth_' | grep -v '^_init$\|^_fini$')
check "libhearth.so exports hearth_* only" '[[ -z $bad ]] || { echo "  $bad" | head; false; }'
bad2=$(nm -g --defined-only "$lib/libhearth.a" 2>/dev/null | awk 'NF == 3 {print $3}' | grep -v '^hearth_')
check "libhearth.a defines hearth_* only" '[[ -z $bad2 ]] || { echo "  $bad2" | head; false; }'
check "no collision with llama.cpp's gguf_find_tensor / gguf_type_name" \
    '! nm -g --defined-only "$lib/libhearth.a" "$lib/libhearth.so.0" 2>/dev/null | matches -w "gguf_find_tensor\|gguf_type_name"'

run=$(cd / && "$tmp/p/bin/hearth" run -p "Once upon a time" -n 12 --temp 0 2>/dev/null)
check "the installed binary runs its embedded model from /" '[[ $run == ", there was a little girl named Lily"* ]] || { echo "  [$run]"; false; }'
check "the installed binary holds no path to the source tree" '! grep -qa "$(cd "$here/.." && pwd)/models" "$tmp/p/bin/hearth"'

[[ $fail -eq 0 ]] && echo "all install checks passed"
exit $fail
