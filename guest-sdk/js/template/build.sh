#!/usr/bin/env bash
# Builds target/{{name}}.wasm (QuickJS; `./build.sh spidermonkey` for
# SpiderMonkey) with the SDK in {{sdk}}.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "{{sdk}}/build.sh" --engine "${1:-quickjs}" "$here" "$here/target/{{name}}.wasm"
