# Sourced by build.sh and test.sh: finds the nri-wasm SDK this project is
# written for, the c SDK of WIT package nri-wasm:policy@0.3.0, and sets
# $sdk to its directory. The project names no path of this machine, so it
# can be committed and built anywhere the SDK is:
# - $NRI_WASM_SDK, the guest-sdk directory of an nri-wasm checkout, when
#   set (the link .sdk is made to point into it);
# - else the link .sdk (to <guest-sdk>/c), which `nri-wasm new` made
#   and .gitignore keeps out of the repository.
sdk_version=0.3.0
if [ -n "${NRI_WASM_SDK:-}" ]; then
    [ -d "$NRI_WASM_SDK/c" ] || { echo "NRI_WASM_SDK=$NRI_WASM_SDK has no c/ (set it to the guest-sdk directory of an nri-wasm checkout)" >&2; exit 2; }
    ln -sfn "$(cd "$NRI_WASM_SDK/c" && pwd)" "$here/.sdk"
fi
if [ ! -d "$here/.sdk" ]; then
    echo "no nri-wasm SDK for this project: set NRI_WASM_SDK to the guest-sdk directory of an nri-wasm checkout (SDK $sdk_version)" >&2
    exit 2
fi
sdk=$(cd "$here/.sdk" && pwd -P)
have=$(sed -n 's/^package nri-wasm:policy@\(.*\);$/\1/p' "$sdk/../../wit/world.wit" 2>/dev/null || true)
if [ "$have" != "$sdk_version" ]; then
    echo "this project is written for the SDK of nri-wasm:policy@$sdk_version; $sdk is ${have:-not an nri-wasm SDK}" >&2
    exit 2
fi
