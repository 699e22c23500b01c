#!/usr/bin/env bash
# Runs the native tests (main_test.go) with the SDK in {{sdk}}.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "{{sdk}}/test.sh" "$here" "$@"
