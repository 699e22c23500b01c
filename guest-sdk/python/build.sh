#!/usr/bin/env bash
# Builds a Python policy into a component for nri-wasm.
#
#   guest-sdk/python/build.sh [POLICY_DIR [OUT.wasm]]
#
# POLICY_DIR (default: .) holds policy.py, which creates an nriwasm.Policy
# and registers its handlers (see template/); other modules of POLICY_DIR
# may be imported by it. OUT defaults to POLICY_DIR/target/<dir name>.wasm.
# componentize-py generates the bindings of the world from the
# repository's wit/ and bundles CPython, the SDK (nriwasm/) and the policy
# into a pre-initialised component. WASI imports stay (the host links an
# empty WASI context): Python's own error output reaches the host that way,
# and stubbing them (--stub-wasi) would add an instance per interface, 38
# core instances in all, more than the host allows a component.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
eval "$("$here/../install-tools.sh" --env)"
need componentize-py

src=$(cd "${1:-.}" && pwd)
out=${2:-$src/target/$(basename "$src").wasm}
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
work="$(dirname "$out")/.build-$(basename "$out" .wasm)"
rm -rf "$work"
mkdir -p "$work"
[ -f "$src/policy.py" ] || { echo "no policy.py in $src" >&2; exit 1; }

# The component's entry module: imports the policy (which registers its
# handlers) and exports the SDK's WitWorld.
cat > "$work/nriwasm_entry.py" <<'PY'
import policy  # noqa: F401  (registers the policy's handlers)
from nriwasm import WitWorld  # noqa: F401
PY
# Copies of the policy and the SDK are built (componentize-py writes
# bytecode caches beside the sources it reads); only these directories are
# searched, no virtual environment's packages.
mkdir -p "$work/policy" "$work/sdk"
tar -C "$src" --exclude=./target --exclude='./.build-*' --exclude=__pycache__ --exclude="./test_*.py" -cf - . | tar -C "$work/policy" -xf -
cp -r "$here/nriwasm" "$work/sdk/"
rm -rf "$work/sdk/nriwasm/__pycache__" "$work/sdk/nriwasm/testing.py"
unset VIRTUAL_ENV PYTHONPATH
componentize-py -d "$here/../../wit" -w policy componentize nriwasm_entry \
    -p "$work" -p "$work/policy" -p "$work/sdk" -o "$work/component.wasm" > "$work/componentize.log" 2>&1 ||
    { cat "$work/componentize.log" >&2; exit 1; }
"$here/../declare.sh" "$work/component.wasm" "$src"
mv "$work/component.wasm" "$out"
echo "$out"
