#!/usr/bin/env bash
# Regenerates src/world.js, src/schema.js and types/world.d.ts from the repository's wit/
# (run after a WIT change); `--check` only says whether they are current.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
eval "$("$here/../install-tools.sh" --env)"
need node wasm-tools
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
wasm-tools component wit "$here/../../wit" --json > "$tmp/wit.json"
node "$here/tools/witgen.mjs" --js --world policy < "$tmp/wit.json" > "$tmp/world.js"
node "$here/tools/witgen.mjs" --dts --world policy < "$tmp/wit.json" > "$tmp/world.d.ts"
node "$here/tools/witgen.mjs" --schema --world policy < "$tmp/wit.json" > "$tmp/schema.js"
if [ "${1:-}" = --check ]; then
    status=0
    for f in src/world.js src/schema.js types/world.d.ts; do
        if ! cmp -s "$tmp/$(basename "$f")" "$here/$f"; then
            echo "guest-sdk/js/$f does not match wit/: run guest-sdk/js/gen.sh" >&2
            status=1
        fi
    done
    [ $status -eq 0 ] && echo "guest-sdk/js/src/world.js, src/schema.js and types/world.d.ts match wit/"
    exit $status
fi
mkdir -p "$here/src" "$here/types"
cp "$tmp/world.js" "$here/src/world.js"
cp "$tmp/schema.js" "$here/src/schema.js"
cp "$tmp/world.d.ts" "$here/types/world.d.ts"
