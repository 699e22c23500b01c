#!/usr/bin/env bash
# Builds a C policy into a component for nri-wasm.
#
#   guest-sdk/c/build.sh [POLICY_DIR [OUT.wasm]]
#
# Every .c file of POLICY_DIR (default: .) but its native tests (*_test.c,
# see test.sh) is compiled with the SDK (src/)
# and the bindings `wit-bindgen c` generates from the repository's wit/, by
# Debian's clang for wasm32-wasi as a reactor (a library the host calls
# into: no main), then made a component by wasm-tools with the WASI
# preview1 adapter, which the C library's stdio needs (a panic's message
# reaches the host through stderr). OUT defaults to
# POLICY_DIR/target/<dir name>.wasm. CFLAGS adds compiler flags.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
eval "$("$here/../install-tools.sh" --env)"
need clang wasm-ld wit-bindgen wasm-tools
adapter="$NRI_WASM_GUEST_TOOLS/wasi/wasi_snapshot_preview1.reactor.wasm"
[ -f "$adapter" ] || {
    echo "the WASI preview1 adapter is not installed ($adapter): run '$(cd "$here/.." && pwd -P)/install-tools.sh' --lang c (it installs it)" >&2
    exit 1
}

src=$(cd "${1:-.}" && pwd)
out=${2:-$src/target/$(basename "$src").wasm}
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
work="$(dirname "$out")/.build-$(basename "$out" .wasm)"
rm -rf "$work"
mkdir -p "$work/gen"

wit-bindgen c "$here/../../wit" --world policy --out-dir "$work/gen" > "$work/gen.log" 2>&1 ||
    { cat "$work/gen.log" >&2; exit 1; }
shopt -s nullglob
sources=()
for f in "$src"/*.c; do
    case "$f" in *_test.c) ;; *) sources+=("$f") ;; esac # the native tests stay out
done
[ ${#sources[@]} -gt 0 ] || { echo "no .c files in $src" >&2; exit 1; }
# -mexec-model=reactor: initialised once by _initialize, then called;
# the exports come from the generated bindings.
# shellcheck disable=SC2086
clang --target=wasm32-wasi -mexec-model=reactor -O2 -std=c11 -Wall -Wextra -Wno-unused-parameter \
    -I "$here/include" -I "$work/gen" -I "$src" -ffile-prefix-map="$src/=" -ffile-prefix-map="$here/=nriwasm/" ${CFLAGS:-} \
    "${sources[@]}" "$here"/src/*.c "$work/gen/policy.c" "$work/gen/policy_component_type.o" \
    -Wl,--strip-debug -o "$work/core.wasm"
wasm-tools component new "$work/core.wasm" --adapt "wasi_snapshot_preview1=$adapter" -o "$work/component.wasm"
"$here/../declare.sh" "$work/component.wasm" "$src"
mv "$work/component.wasm" "$out"
echo "$out"
