#!/usr/bin/env bash
# Builds target/{{name}}.wasm (QuickJS; `./build.sh spidermonkey` for
# SpiderMonkey) with the nri-wasm SDK that sdk.sh finds.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
. "$here/sdk.sh"
exec "$sdk/build.sh" --engine "${1:-quickjs}" "$here" "$here/target/{{name}}.wasm"
