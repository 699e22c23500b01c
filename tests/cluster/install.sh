#!/usr/bin/env bash
# Installs what the cluster tests (tests/cluster) need, and only what is
# missing: a Kubernetes control plane and kubelet, etcd, kubectl, the CNI
# plugins, and (through tests/runtimes/install.sh) containerd 2.3.4, runc,
# crictl and the image contents. Kubernetes and etcd are built from their
# pinned Go module versions; nothing of it is committed. Everything lands in
# ${NRI_WASM_CLUSTER:-<repo>/target/cluster} (the runtimes in
# ${NRI_WASM_RUNTIMES:-<repo>/target/runtimes}), one directory per version,
# so a second run does nothing.
#
#   tests/cluster/install.sh
#
# Each step prints what it installs and how long it took (wall and CPU).
set -euo pipefail

# Kubernetes: the release whose go.mod the scratch module below reads. Its
# staging modules (k8s.io/api, ...) are published as v0.<minor>.<patch>.
KUBERNETES_VERSION=1.34.4
ETCD_VERSION=3.6.16
# bridge, host-local and loopback for the pod network; iptables for the
# kubelet's own chains; openssl makes the cluster's certificates.
DEBIAN_PACKAGES=(containernetworking-plugins iptables openssl)

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
dest=${NRI_WASM_CLUSTER:-$repo/target/cluster}

for arg in "$@"; do
    case $arg in
        -h | --help)
            sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "install.sh: unknown argument '$arg'" >&2
            exit 2
            ;;
    esac
done

step_prefix=cluster/install.sh
# shellcheck source=../support/sh/install-steps.sh
. "$repo/tests/support/sh/install-steps.sh"

mkdir -p "$dest"

# containerd 2.3.4, crictl, runc, busybox and the pause program; Debian's
# docker-registry for the registry test.
bash "$repo/tests/runtimes/install.sh"
bash "$repo/tests/registry/install.sh"

debian_packages "${DEBIAN_PACKAGES[@]}"

need_go "Kubernetes and etcd"

# Kubernetes. k8s.io/kubernetes's go.mod replaces its staging modules by
# paths inside its repository that the module's zip does not hold, so it
# cannot be built as it is. A scratch module requires it and replaces each
# staging module by the published module of the matching version instead;
# the list of names is read from that go.mod, so a new staging module needs
# no change here.
k8s_bin="$dest/kubernetes-$KUBERNETES_VERSION"
k8s_cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
need_k8s=false
for c in "${k8s_cmds[@]}"; do [ -x "$k8s_bin/$c" ] || need_k8s=true; done
if $need_k8s; then
    begin "Kubernetes v$KUBERNETES_VERSION (${k8s_cmds[*]}) -> $k8s_bin"
    src="$dest/src/kubernetes-$KUBERNETES_VERSION"
    rm -rf "$src"
    mkdir -p "$src"
    gomod=$(go mod download -json "k8s.io/kubernetes@v$KUBERNETES_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
    [ -f "$gomod" ] || {
        echo "cluster/install.sh: go mod download k8s.io/kubernetes@v$KUBERNETES_VERSION gave no go.mod" >&2
        exit 1
    }
    go_directive=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod" | head -n1)
    staging=$(sed -n '/^replace (/,/^)/s#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$gomod")
    [ -n "$staging" ] || {
        echo "cluster/install.sh: no staging replace directives in $gomod" >&2
        exit 1
    }
    {
        echo "module nri-wasm.test/kubernetes-build"
        echo
        echo "go $go_directive"
        echo
        echo "require k8s.io/kubernetes v$KUBERNETES_VERSION"
        echo
        echo "replace ("
        for m in $staging; do echo "	$m => $m v0.${KUBERNETES_VERSION#1.}"; done
        echo ")"
    } >"$src/go.mod"
    {
        echo "//go:build tools"
        echo
        echo "// The commands built, for go mod tidy."
        echo "package tools"
        echo
        echo "import ("
        for c in "${k8s_cmds[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done
        echo ")"
    } >"$src/tools.go"
    (cd "$src" && go mod tidy)
    minor=${KUBERNETES_VERSION#1.}
    minor=${minor%%.*}
    ldflags="-s -w"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $pkg.gitVersion=v$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    done
    pkgs=()
    for c in "${k8s_cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
    mkdir -p "$k8s_bin.tmp"
    (cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$k8s_bin.tmp/" "${pkgs[@]}")
    rm -rf "$k8s_bin"
    mv "$k8s_bin.tmp" "$k8s_bin"
    done_step
fi

# etcd: the server module's root package is the etcd binary.
etcd_bin="$dest/etcd-$ETCD_VERSION"
if [ ! -x "$etcd_bin/etcd" ]; then
    begin "etcd v$ETCD_VERSION -> $etcd_bin"
    src="$dest/src/etcd-$ETCD_VERSION"
    rm -rf "$src"
    mkdir -p "$src"
    (cd "$src" && go mod init nri-wasm.test/etcd-build >/dev/null 2>&1 &&
        go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION" &&
        mkdir -p "$etcd_bin.tmp" &&
        CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$etcd_bin.tmp/etcd" go.etcd.io/etcd/server/v3)
    rm -rf "$etcd_bin"
    mv "$etcd_bin.tmp" "$etcd_bin"
    done_step
fi

echo "cluster/install.sh: everything is in $dest"
