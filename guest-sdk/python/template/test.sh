#!/usr/bin/env bash
# Runs the native tests (test_*.py) with the nri-wasm SDK that sdk.sh finds.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
. "$here/sdk.sh"
exec "$sdk/test.sh" "$here" "$@"
