#!/usr/bin/env bash
# Runs the native tests (test_*.py) with the SDK in {{sdk}}.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "{{sdk}}/test.sh" "$here" "$@"
