#!/usr/bin/env bash
# Builds a JavaScript or TypeScript policy into a component for nri-wasm.
#
#   guest-sdk/js/build.sh [--engine quickjs|spidermonkey] [POLICY_DIR [OUT.wasm]]
#
# POLICY_DIR (default: .) holds policy.ts or policy.js, which exports the
# world's `configure` and `handle` (made by the SDK's `policy()`); OUT
# defaults to POLICY_DIR/target/<dir name>.wasm. Steps:
# 1. if POLICY_DIR has a tsconfig.json, tsc type-checks the policy against
#    the SDK's types (types/);
# 2. rolldown bundles the policy with the SDK (src/) into one module;
# 3. the engine makes the component:
#    - quickjs (default): componentize-qjs, the non-async runtime; about
#      1.8 MB, built in seconds;
#    - spidermonkey: componentize-js with outbound HTTP and the fetch event
#      off (the host links no wasi:http); about 25 MB.
# Only what guest-sdk/install-tools.sh installed is used; nothing is
# downloaded.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
eval "$("$here/../install-tools.sh" --env)"
need node

engine=${NRI_WASM_JS_ENGINE:-quickjs}
if [ "${1:-}" = --engine ]; then
    engine=${2:?--engine needs quickjs or spidermonkey}
    shift 2
fi
case "$engine" in
    quickjs) need componentize-qjs ;;
    spidermonkey) need componentize-js ;;
    *) echo "unknown engine $engine (quickjs or spidermonkey)" >&2; exit 2 ;;
esac

src=$(cd "${1:-.}" && pwd)
out=${2:-$src/target/$(basename "$src").wasm}
mkdir -p "$(dirname "$out")"
out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
work="$(dirname "$out")/.build-$(basename "$out" .wasm)"
mkdir -p "$work"

entry=
for f in policy.ts policy.js; do
    [ -f "$src/$f" ] && { entry="$src/$f"; break; }
done
[ -n "$entry" ] || { echo "no policy.ts or policy.js in $src" >&2; exit 1; }

if [ -f "$src/tsconfig.json" ]; then
    need tsc
    "$here/tools/typecheck.sh" "$src"
fi
node "$here/tools/bundle.mjs" "$entry" "$work/bundle.js" "$engine"
wit="$here/../../wit"
case "$engine" in
    quickjs)
        componentize-qjs --wit "$wit" --world policy --js "$work/bundle.js" --sync -o "$work/component.wasm" > "$work/componentize.log" 2>&1 ||
            { cat "$work/componentize.log" >&2; exit 1; } ;;
    spidermonkey)
        componentize-js "$work/bundle.js" --wit "$wit" --world-name policy -d http -d fetch-event -o "$work/component.wasm" > "$work/componentize.log" 2>&1 ||
            { cat "$work/componentize.log" >&2; exit 1; } ;;
esac
"$here/../declare.sh" "$work/component.wasm" "$src"
mv "$work/component.wasm" "$out"
echo "$out"
