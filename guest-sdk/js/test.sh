#!/usr/bin/env bash
# Runs a JavaScript or TypeScript policy's native tests on Node, no
# WebAssembly build, after type-checking the policy as build.sh does (when
# the project has a tsconfig.json):
#
#   guest-sdk/js/test.sh [POLICY_DIR [node --test arguments...]]
#
# The tests (`*.test.js`, `*.test.mjs`, `*.test.ts`, or the files given) import
# the policy (`./policy.js`, which is policy.ts if that is what the
# project has) and `nriwasm/testing` (testing/index.mjs); testing/
# register.mjs maps the world's interfaces to the test host's fakes.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
eval "$("$here/../install-tools.sh" --env)"
need node
cd "${1:-.}"
shift $(( $# > 0 ? 1 : 0 ))
# Type-checked as build.sh checks it, first: a policy whose tests pass
# must also build (an untyped parameter, say, is an error of both).
if [ -f tsconfig.json ]; then
    need tsc
    "$here/tools/typecheck.sh" .
fi
if [ $# -eq 0 ]; then
    # The project's test files, not those of what it links or builds.
    mapfile -t tests < <(find . \( -name node_modules -o -name target -o -name .sdk -o -name '.build-*' \) -prune -o \
        -type f \( -name '*.test.js' -o -name '*.test.mjs' -o -name '*.test.ts' \) -print | sort)
    [ ${#tests[@]} -gt 0 ] || { echo "no *.test.js, *.test.mjs or *.test.ts in $(pwd)" >&2; exit 1; }
    set -- "${tests[@]}"
fi
exec node --import "$here/testing/register.mjs" --test "$@"
