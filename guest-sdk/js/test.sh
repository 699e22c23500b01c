#!/usr/bin/env bash
# Runs a JavaScript or TypeScript policy's native tests on Node, no
# WebAssembly build:
#
#   guest-sdk/js/test.sh [POLICY_DIR [node --test arguments...]]
#
# The tests (`*.test.js`, `test/*.js`, as `node --test` finds them) import
# the policy (`./policy.js`, which is policy.ts if that is what the
# project has) and `nriwasm/testing` (testing/index.mjs); testing/
# register.mjs maps the world's interfaces to the test host's fakes.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
eval "$("$here/../install-tools.sh" --env)"
need node
cd "${1:-.}"
shift $(( $# > 0 ? 1 : 0 ))
exec node --import "$here/testing/register.mjs" --test "$@"
