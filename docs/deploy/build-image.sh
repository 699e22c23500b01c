#!/usr/bin/env bash
# Builds the nri-wasm image without a base image: an OCI image archive that
# holds the host binary, the shared libraries it is linked against (as
# `ldd` finds them on this machine), and a CA bundle for policies pulled
# from registries over TLS. Nothing is pulled: it works offline and behind
# an air gap, with any Linux machine that built the binary.
#
#   docs/deploy/build-image.sh [--binary FILE] [--ca-bundle FILE]
#                              [--name NAME:TAG] [--output FILE]
#
#   --binary     the host binary (default: target/release/nri-wasm). Build
#                it as the Containerfile does:
#                  CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=symbols \
#                    cargo build --release --locked -p nri-wasm --no-default-features
#                A binary with debug information is stripped in the image.
#   --ca-bundle  the certificates the host trusts for registries (default:
#                /etc/ssl/certs/ca-certificates.crt of this machine); put
#                your organisation's CA here, or add it later with
#                [registry] ca-file
#   --name       the image's name (default: registry.example.com/nri-wasm:0.1.0,
#                the name kustomize/base/kustomization.yaml gives the DaemonSet)
#   --output     where the archive goes (default: target/nri-wasm-image.oci.tar)
#
# Then, on each node (the containerd namespace of the CRI is k8s.io):
#
#   ctr -n k8s.io images import target/nri-wasm-image.oci.tar
#
# or copy it to your registry with an OCI tool (skopeo copy
# oci-archive:target/nri-wasm-image.oci.tar docker://<registry>/nri-wasm:0.1.0).
# The archive is reproducible: the same inputs give the same digests.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
binary=$repo/target/release/nri-wasm
ca_bundle=/etc/ssl/certs/ca-certificates.crt
name=registry.example.com/nri-wasm:0.1.0
output=$repo/target/nri-wasm-image.oci.tar

die() {
    echo "build-image.sh: $*" >&2
    exit 1
}

while (($#)); do
    case $1 in
        --binary) binary=${2:?--binary needs a file} && shift ;;
        --ca-bundle) ca_bundle=${2:?--ca-bundle needs a file} && shift ;;
        --name) name=${2:?--name needs NAME:TAG} && shift ;;
        --output) output=${2:?--output needs a file} && shift ;;
        -h | --help)
            sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done

[ -f "$binary" ] || die "no binary at $binary: build it first (see --help), or name it with --binary"
[ -f "$ca_bundle" ] || die "no CA bundle at $ca_bundle (Debian's ca-certificates package has one), or name one with --ca-bundle"
grep -q 'BEGIN CERTIFICATE' "$ca_bundle" || die "$ca_bundle holds no PEM certificate"
case $name in
    *:*) ;;
    *) die "--name $name: give a tag (NAME:TAG)" ;;
esac
tag=${name##*:}
for tool in ldd tar sha256sum; do
    command -v "$tool" >/dev/null || die "$tool is needed"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs"

# The binary, without debug information or symbols (a panic still prints
# its message and source location).
install -m 0755 "$binary" "$root/usr/local/bin/nri-wasm"
if command -v strip >/dev/null; then
    strip --strip-all "$root/usr/local/bin/nri-wasm"
fi

# Its shared libraries and loader, at the paths the binary asks for. A
# statically linked binary needs none.
libs=$(ldd "$binary" 2>/dev/null | awk '/=> \// { print $3 } /^[[:space:]]*\// { print $1 }') || true
for lib in $libs; do
    [ -f "$lib" ] || die "ldd names $lib, which is not a file"
    mkdir -p "$root$(dirname "$lib")"
    # The file itself, under the name the loader looks for.
    cp -L "$lib" "$root$lib"
    chmod 0755 "$root$lib"
done

install -m 0644 "$ca_bundle" "$root/etc/ssl/certs/ca-certificates.crt"

# One layer, fixed owners and times: the same inputs give the same bytes.
find "$root" -exec touch -h -d @0 {} +
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$root" -cf "$work/layer.tar" .

layout=$work/layout
mkdir -p "$layout/blobs/sha256"
put() { # file -> "sha256:<hex> <size>"
    local digest size
    digest=$(sha256sum "$1" | cut -d' ' -f1)
    size=$(stat -c %s "$1")
    cp "$1" "$layout/blobs/sha256/$digest"
    echo "sha256:$digest $size"
}
case $(uname -m) in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) arch=$(uname -m) ;;
esac
read -r layer_digest layer_size < <(put "$work/layer.tar")
# The DaemonSet sets the user (uid 0, no capabilities) and the arguments;
# these are what `docker run` of the image would do.
printf '%s' "{\"architecture\":\"$arch\",\"os\":\"linux\",\"config\":{\"Entrypoint\":[\"/usr/local/bin/nri-wasm\"],\"Cmd\":[\"run\"],\"Env\":[\"PATH=/usr/local/bin\"]},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"$layer_digest\"]},\"history\":[{\"created_by\":\"docs/deploy/build-image.sh\"}]}" >"$work/config.json"
read -r config_digest config_size < <(put "$work/config.json")
printf '%s' "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"$config_digest\",\"size\":$config_size},\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"$layer_digest\",\"size\":$layer_size}]}" >"$work/manifest.json"
read -r manifest_digest manifest_size < <(put "$work/manifest.json")
printf '%s' "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"manifests\":[{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"$manifest_digest\",\"size\":$manifest_size,\"platform\":{\"architecture\":\"$arch\",\"os\":\"linux\"},\"annotations\":{\"io.containerd.image.name\":\"$name\",\"org.opencontainers.image.ref.name\":\"$tag\"}}]}" >"$layout/index.json"
printf '%s' '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
find "$layout" -exec touch -h -d @0 {} +

mkdir -p "$(dirname "$output")"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$layout" -cf "$output.partial" .
mv "$output.partial" "$output"
echo "build-image.sh: $name ($manifest_digest, layer $((layer_size / 1048576)) MiB) -> $output"
