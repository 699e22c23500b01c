#!/usr/bin/env bash
# Runs a C policy's native tests, no WebAssembly build:
#
#   guest-sdk/c/test.sh [POLICY_DIR [TEST_NAME...]]
#
# Compiles the policy (every .c file of POLICY_DIR, its tests `*_test.c`
# with them), the SDK (src/) and the test host (testing/) for this machine
# with the bindings `wit-bindgen c` generates from wit/ (the generated
# policy.c, the WebAssembly glue, is not used: the test host answers the
# world's imported functions), and runs the tests, each call in a process
# of its own. TEST_NAME runs only the tests whose names contain it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
eval "$("$here/../install-tools.sh" --env)"
need wit-bindgen
cc=${CC:-clang}
command -v "$cc" >/dev/null || cc=cc
src=$(cd "${1:-.}" && pwd)
shift $(( $# > 0 ? 1 : 0 ))
work="$src/target/.test"
mkdir -p "$work/gen"
wit-bindgen c "$here/../../wit" --world policy --out-dir "$work/gen" > "$work/gen.log" 2>&1 ||
    { cat "$work/gen.log" >&2; exit 1; }
shopt -s nullglob
sources=("$src"/*.c)
[ ${#sources[@]} -gt 0 ] || { echo "no .c files in $src" >&2; exit 1; }
# C11, not GNU C: GNU C defines `linux`, a field name of the bindings.
# shellcheck disable=SC2086
"$cc" -std=c11 -Ulinux -g -O0 -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers \
    -I "$here/include" -I "$here/testing" -I "$work/gen" -I "$src" ${CFLAGS:-} \
    "${sources[@]}" "$here"/src/*.c "$here"/testing/nwtest.c "$here"/testing/schema.c -o "$work/tests"
cd "$src"
exec "$work/tests" "$@"
