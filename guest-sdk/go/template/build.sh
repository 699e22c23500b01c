#!/usr/bin/env bash
# Builds target/{{name}}.wasm with the nri-wasm SDK that sdk.sh finds.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
. "$here/sdk.sh"
exec "$sdk/build.sh" "$here" "$here/target/{{name}}.wasm"
