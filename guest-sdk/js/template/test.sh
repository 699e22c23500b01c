#!/usr/bin/env bash
# Runs the native tests (policy.test.js) on Node with the SDK in {{sdk}}.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "{{sdk}}/test.sh" "$here" "$@"
