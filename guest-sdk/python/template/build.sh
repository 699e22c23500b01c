#!/usr/bin/env bash
# Builds target/{{name}}.wasm with the SDK in {{sdk}}.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "{{sdk}}/build.sh" "$here" "$here/target/{{name}}.wasm"
