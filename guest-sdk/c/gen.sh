#!/usr/bin/env bash
# Regenerates testing/schema.c (the world's event records as data for the
# native test host) from the JavaScript SDK's generated schema, itself made
# from wit/ (run guest-sdk/js/gen.sh first after a WIT change); `--check`
# only says whether it is current.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
eval "$("$here/../install-tools.sh" --env)"
need node
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
node "$here/testing/gen-schema.mjs" > "$tmp"
if [ "${1:-}" = --check ]; then
    if ! cmp -s "$tmp" "$here/testing/schema.c"; then
        echo "guest-sdk/c/testing/schema.c does not match wit/: run guest-sdk/c/gen.sh" >&2
        exit 1
    fi
    echo "guest-sdk/c/testing/schema.c matches wit/"
    exit 0
fi
cp "$tmp" "$here/testing/schema.c"
