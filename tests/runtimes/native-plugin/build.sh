#!/usr/bin/env bash
# Builds the native reference NRI plugin (main.go here) for one NRI version,
# into ${NRI_WASM_RUNTIMES:-<repo>/target/runtimes}/native-plugin-<version>/native-plugin,
# only when it is missing or older than its sources. The same source builds
# against each NRI version with the module file pinned for it:
#   0.12.0  go.mod       (containerd 2.3.x)
#   0.8.0   go-0.8.mod   (containerd 1.7.26 to 1.7.34, 2.0, 2.1)
# Modules come from the Go module proxy, checked against the committed go.sum files.
#
#   tests/runtimes/native-plugin/build.sh [0.12.0|0.8.0]   (default 0.12.0)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
dest=${NRI_WASM_RUNTIMES:-$repo/target/runtimes}
version=${1:-0.12.0}

case $version in
    0.12.0) modfile=go.mod ;;
    0.8.0) modfile=go-0.8.mod ;;
    *)
        echo "native-plugin/build.sh: no module file for NRI $version (known: 0.12.0, 0.8.0)" >&2
        exit 2
        ;;
esac
grep -q "github.com/containerd/nri v$version\$" "$here/$modfile" || {
    echo "native-plugin/build.sh: $here/$modfile does not pin github.com/containerd/nri v$version" >&2
    exit 1
}

out=$dest/native-plugin-$version
bin=$out/native-plugin
if [ -x "$bin" ] && [ "$bin" -nt "$here/main.go" ] && [ "$bin" -nt "$here/$modfile" ]; then
    exit 0
fi

command -v go >/dev/null || {
    echo "native-plugin/build.sh: go is not installed" >&2
    exit 1
}
echo "native-plugin/build.sh: native plugin for NRI $version -> $bin"
start=$SECONDS
mkdir -p "$out"
# -mod=readonly: the module files and go.sum are used as committed.
(cd "$here" && GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
    go build -modfile="$modfile" -trimpath -o "$bin.tmp" .)
mv "$bin.tmp" "$bin"
echo "native-plugin/build.sh:   done in $((SECONDS - start)) s"
