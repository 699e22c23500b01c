#!/usr/bin/env bash
# Runs a Python policy's native tests, no WebAssembly build:
#
#   guest-sdk/python/test.sh [POLICY_DIR [python -m unittest arguments...]]
#
# componentize-py generates the world's bindings (the `wit_world` package
# the component gets) into POLICY_DIR/target/bindings when wit/ changed;
# then `python -m unittest` runs in POLICY_DIR with the policy, the SDK
# (nriwasm/, whose nriwasm.testing is the test host) and the bindings on
# the path. Tests are test*.py files (unittest's discovery).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
eval "$("$here/../install-tools.sh" --env)"
need componentize-py python3
src=$(cd "${1:-.}" && pwd)
shift $(( $# > 0 ? 1 : 0 ))
wit="$here/../../wit"
bindings="$src/target/bindings"
stamp=$(cat "$wit"/*.wit | cksum)
if [ "$(cat "$bindings/.wit-stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$bindings"
    mkdir -p "$bindings"
    componentize-py -d "$wit" -w policy bindings "$bindings" > "$bindings.log" 2>&1 ||
        { cat "$bindings.log" >&2; exit 1; }
    rm -f "$bindings.log"
    echo "$stamp" > "$bindings/.wit-stamp"
fi
cd "$src"
unset VIRTUAL_ENV
export PYTHONPATH="$src:$here:$bindings" PYTHONDONTWRITEBYTECODE=1
if [ $# -eq 0 ]; then set -- discover -s . -p 'test*.py'; fi
exec python3 -m unittest "$@"
