#!/usr/bin/env bash
# Runs a Go policy's native tests, no WebAssembly build:
#
#   guest-sdk/go/test.sh [POLICY_DIR [go test arguments...]]
#
# `go test` for the host machine, in a Go workspace with this SDK (as
# build.sh builds; nothing is downloaded). The policy's package registers
# itself in init as in the component; its tests run it with the SDK's test
# host, package nri-wasm.local/nriwasm/nritest.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
eval "$("$here/../install-tools.sh" --env)"
need go
src=$(cd "${1:-.}" && pwd)
shift $(( $# > 0 ? 1 : 0 ))
work="$src/target/.test"
mkdir -p "$work"
cat > "$work/go.work" <<WORK
go 1.27

use (
	$src
	$here
)
WORK
cd "$src"
GOWORK="$work/go.work" exec go test "$@" .
