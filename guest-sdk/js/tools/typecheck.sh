#!/usr/bin/env bash
# Type-checks a JavaScript or TypeScript policy, when its directory has a
# tsconfig.json: the one check build.sh and test.sh both run, so a policy
# whose native tests pass also builds.
#
#   guest-sdk/js/tools/typecheck.sh POLICY_DIR
#
# The project's tsconfig.json is extended by one written to a temporary
# directory that maps `nriwasm` to the types of this SDK (the one building
# or testing the policy), whatever path the project's own mapping names:
# a project copied away from its checkout (an example out of
# example-policies/, a clone without the link .sdk) checks against the SDK
# that runs it. Every other option, and the files, are the project's.
# Needs tsc on PATH (install-tools.sh --env).
set -euo pipefail
sdk=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
src=$(cd "$1" && pwd -P)
[ -f "$src/tsconfig.json" ] || exit 0
overlay=$(mktemp -d)
trap 'rm -rf "$overlay"' EXIT
node -e '
const [base, types, out] = process.argv.slice(1);
require("node:fs").writeFileSync(out, JSON.stringify({
  extends: base,
  compilerOptions: { paths: { nriwasm: [types] } },
}));
' "$src/tsconfig.json" "$sdk/types/nriwasm.d.ts" "$overlay/tsconfig.json"
cd "$src"
tsc -p "$overlay/tsconfig.json" --noEmit
