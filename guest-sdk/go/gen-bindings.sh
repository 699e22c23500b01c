#!/usr/bin/env bash
# Regenerates wit/bindings.go from the repository's wit/ (run after a WIT
# change); `--check` only says whether the checked-in file is current.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
eval "$("$here/../install-tools.sh" --env)"
need wasm-tools go
out=$(mktemp)
trap 'rm -f "$out"' EXIT
wasm-tools component wit "$here/../../wit" --json | (cd "$here" && go run ./cmd/witgen -world policy -package wit) > "$out"
if [ "${1:-}" = --check ]; then
    if ! cmp -s "$out" "$here/wit/bindings.go"; then
        echo "guest-sdk/go/wit/bindings.go does not match wit/: run guest-sdk/go/gen-bindings.sh" >&2
        exit 1
    fi
    echo "guest-sdk/go/wit/bindings.go matches wit/"
else
    cp "$out" "$here/wit/bindings.go"
fi
