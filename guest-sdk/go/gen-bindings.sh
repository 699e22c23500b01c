#!/usr/bin/env bash
# Regenerates wit/types.go, wit/bindings.go (wasip1) and wit/native.go (the
# native build of a policy's tests) from the repository's wit/ (run after a
# WIT change); `--check` only says whether the checked-in files are current.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
eval "$("$here/../install-tools.sh" --env)"
need wasm-tools go
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
wasm-tools component wit "$here/../../wit" --json > "$tmp/wit.json"
(cd "$here" && go build -o "$tmp/witgen" ./cmd/witgen)
for part in types:types.go wasm:bindings.go native:native.go; do
    "$tmp/witgen" -world policy -package wit -part "${part%%:*}" < "$tmp/wit.json" > "$tmp/${part#*:}"
done
if [ "${1:-}" = --check ]; then
    status=0
    for f in types.go bindings.go native.go; do
        if ! cmp -s "$tmp/$f" "$here/wit/$f"; then
            echo "guest-sdk/go/wit/$f does not match wit/: run guest-sdk/go/gen-bindings.sh" >&2
            status=1
        fi
    done
    [ $status -eq 0 ] && echo "guest-sdk/go/wit/types.go, bindings.go and native.go match wit/"
    exit $status
fi
for f in types.go bindings.go native.go; do
    cp "$tmp/$f" "$here/wit/$f"
done
