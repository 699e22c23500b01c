#!/usr/bin/env bash
# Builds a Go policy into a component for nri-wasm.
#
#   guest-sdk/go/build.sh [POLICY_DIR [OUT.wasm]]
#
# POLICY_DIR (default: .) is a Go module whose main package registers a
# policy (see template/); OUT defaults to POLICY_DIR/target/<dir name>.wasm.
# Steps: go build for wasip1 as a reactor (-buildmode=c-shared), in a Go
# workspace with this SDK (nothing is downloaded); the world's type
# information is embedded; wasm-tools makes the component, with the SDK's
# own WASI adapter (adapter/adapter.wat) for what Go's runtime imports.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
eval "$("$here/../install-tools.sh" --env)"
need go wasm-tools

src=$(cd "${1:-.}" && pwd)
out=${2:-$src/target/$(basename "$src").wasm}
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
work="$(dirname "$out")/.build-$(basename "$out" .wasm)"
mkdir -p "$work"

cat > "$work/go.work" <<WORK
go 1.27

use (
	$src
	$here
)
WORK
(cd "$src" && GOWORK="$work/go.work" GOOS=wasip1 GOARCH=wasm \
    go build -buildmode=c-shared -trimpath -ldflags=-s -o "$work/core.wasm" .)
wasm-tools parse "$here/adapter/adapter.wat" -o "$work/adapter.core.wasm"
wasm-tools component embed "$here/adapter/wit" --world adapter "$work/adapter.core.wasm" -o "$work/adapter.wasm"
wasm-tools component embed "$here/../../wit" --world policy "$work/core.wasm" -o "$work/embedded.wasm"
wasm-tools component new "$work/embedded.wasm" --adapt "wasi_snapshot_preview1=$work/adapter.wasm" -o "$work/component.wasm"
"$here/../declare.sh" "$work/component.wasm" "$src"
mv "$work/component.wasm" "$out"
echo "$out"
