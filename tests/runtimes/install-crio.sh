#!/usr/bin/env bash
# Installs CRI-O for the real-runtime tests (tests/runtimes, NRI_WASM_RUNTIME=crio),
# and only what is missing. install.sh --crio calls it; it also runs alone.
#
# - crio: built from the pinned release's Go module. `go install` refuses the
#   module (the Go module proxy answers 403 for its version list, which
#   `go install` reads for deprecations), so the module's source is
#   downloaded into the module cache and built from there. CGO off and the
#   tags below: no btrfs, ostree or gpgme (and so no seccomp in this build).
# - pinns (CRI-O's namespace pinner, C): built from the same source.
# - conmon, runc and skopeo from Debian's packages. skopeo puts the images'
#   OCI archives into a node's containers/storage (src/crio.rs): there is no
#   registry to pull from.
#
# Nothing of it is committed; it lands in
# ${NRI_WASM_RUNTIMES:-<repo>/target/runtimes}/crio-<version>/.
set -euo pipefail

CRIO_VERSION=1.36.3 # NRI v0.11.0; the newest 1.3x the Go module proxy serves
CRIO_MODULE=github.com/cri-o/cri-o
CRIO_BUILD_TAGS="containers_image_openpgp containers_image_ostree_stub exclude_graphdriver_btrfs"
DEBIAN_PACKAGES=(conmon runc skopeo gcc libc6-dev)

case ${1:-} in
    "") ;;
    -h | --help)
        sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "install-crio.sh: unknown argument '$1' (it takes none)" >&2
        exit 2
        ;;
esac

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
dest=${NRI_WASM_RUNTIMES:-$repo/target/runtimes}/crio-$CRIO_VERSION

step_start=0
begin() {
    step_start=$SECONDS
    echo "install-crio.sh: $*"
}
done_step() {
    echo "install-crio.sh:   done in $((SECONDS - step_start)) s"
}

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    begin "Debian packages: ${missing[*]}"
    # Another apt may hold the lock for a while on a shared machine.
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
    done_step
fi

if [ -x "$dest/crio" ] && [ -x "$dest/pinns" ]; then
    echo "install-crio.sh: CRI-O $CRIO_VERSION is in $dest"
    exit 0
fi

command -v go >/dev/null || {
    echo "install-crio.sh: go is not installed; CRI-O is built from its Go module" >&2
    exit 1
}

begin "go mod download $CRIO_MODULE@v$CRIO_VERSION"
src=$(go mod download -json "$CRIO_MODULE@v$CRIO_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || {
    echo "install-crio.sh: go mod download $CRIO_MODULE@v$CRIO_VERSION gave no source directory" >&2
    exit 1
}
done_step

mkdir -p "$dest"
if [ ! -x "$dest/crio" ]; then
    begin "go build $CRIO_MODULE@v$CRIO_VERSION ./cmd/crio (tags: $CRIO_BUILD_TAGS) -> $dest/crio"
    # The module cache is read-only: -mod=mod reads go.sum and writes nothing.
    # Its ~200 "go: downloading" lines on a cold cache are left out.
    (cd "$src" && CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" \
        go build -trimpath -tags "$CRIO_BUILD_TAGS" -o "$dest/crio.tmp" ./cmd/crio 2>&1) |
        { grep -v '^go: downloading ' || true; }
    mv "$dest/crio.tmp" "$dest/crio"
    done_step
fi
if [ ! -x "$dest/pinns" ]; then
    begin "pinns (C, from the same source) -> $dest/pinns"
    gcc -std=c99 -Os -Wall -static -o "$dest/pinns.tmp" "$src"/pinns/src/*.c
    mv "$dest/pinns.tmp" "$dest/pinns"
    done_step
fi
"$dest/crio" --config "" --config-dir "" version 2>/dev/null | grep -q "^Version: *$CRIO_VERSION$" || {
    echo "install-crio.sh: $dest/crio does not say it is version $CRIO_VERSION" >&2
    exit 1
}
echo "install-crio.sh: CRI-O $CRIO_VERSION is in $dest"
