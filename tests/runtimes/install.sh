#!/usr/bin/env bash
# Installs what the real-runtime tests (tests/runtimes) need, and only what
# is missing: the runtimes are built from their pinned Go module versions,
# runc and busybox-static come from Debian's packages, the pause program is
# built here. Nothing of it is committed; it all lands in
# ${NRI_WASM_RUNTIMES:-<repo>/target/runtimes}, one directory per runtime
# and version, so a second run does nothing.
#
#   tests/runtimes/install.sh                  what .ci/run needs: containerd 2.3.4, crictl,
#                                              runc, the images, the native plugin (NRI 0.12),
#                                              the benchmark's CRI client (cri-timer)
#   tests/runtimes/install.sh --containerd-1.7 also containerd 1.7.34 (and its native plugin)
#   tests/runtimes/install.sh --crio           also CRI-O (tests/runtimes/install-crio.sh)
#   tests/runtimes/install.sh --all            everything
#
# Each step prints what it installs and how long it took.
set -euo pipefail

CONTAINERD_2_VERSION=2.3.4
CONTAINERD_17_VERSION=1.7.34
CRI_TOOLS_VERSION=1.36.0
# The NRI versions these containerd releases speak, for the native plugin.
NRI_FOR_CONTAINERD_2=0.12.0
NRI_FOR_CONTAINERD_17=0.8.0
DEBIAN_PACKAGES=(runc busybox-static gcc libc6-dev)

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
dest=${NRI_WASM_RUNTIMES:-$repo/target/runtimes}

want_17=false
want_crio=false
for arg in "$@"; do
    case $arg in
        --containerd-1.7) want_17=true ;;
        --crio) want_crio=true ;;
        --all) want_17=true want_crio=true ;;
        -h | --help)
            sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "install.sh: unknown argument '$arg' (known: --containerd-1.7, --crio, --all)" >&2
            exit 2
            ;;
    esac
done

step_prefix=install.sh
# shellcheck source=../support/sh/install-steps.sh
. "$repo/tests/support/sh/install-steps.sh"

mkdir -p "$dest"
debian_packages "${DEBIAN_PACKAGES[@]}"
need_go "the runtimes"

# go install of a module's commands, into a directory of its own.
go_install() { # dir module@version package...
    local dir=$1 version=$2
    shift 2
    local pkgs=() p
    for p in "$@"; do
        [ -x "$dir/$(basename "$p")" ] || pkgs+=("$p@$version")
    done
    ((${#pkgs[@]})) || return 0
    begin "go install ${pkgs[*]} -> $dir"
    mkdir -p "$dir"
    GOBIN="$dir" GOFLAGS=-buildvcs=false go install "${pkgs[@]}"
    done_step
}

# A module whose go.mod has directives `go install` refuses (exclude,
# replace): downloaded into the module cache, built from there.
go_build_module() { # dir module version package...
    local dir=$1 module=$2 version=$3
    shift 3
    local pkgs=() p
    for p in "$@"; do
        [ -x "$dir/$(basename "$p")" ] || pkgs+=("./$p")
    done
    ((${#pkgs[@]})) || return 0
    begin "go build $module@$version ${pkgs[*]} -> $dir"
    local src
    src=$(go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -d "$src" ] || {
        echo "install.sh: go mod download $module@$version gave no directory" >&2
        exit 1
    }
    mkdir -p "$dir"
    (cd "$src" && GOFLAGS="-mod=mod -buildvcs=false" go build -o "$dir/" "${pkgs[@]}")
    done_step
}

go_install "$dest/containerd-$CONTAINERD_2_VERSION" "v$CONTAINERD_2_VERSION" \
    github.com/containerd/containerd/v2/cmd/containerd \
    github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    github.com/containerd/containerd/v2/cmd/ctr
go_install "$dest/cri-tools-$CRI_TOOLS_VERSION" "v$CRI_TOOLS_VERSION" sigs.k8s.io/cri-tools/cmd/crictl
if $want_17; then
    # containerd 1.7's go.mod has exclude directives: no `go install`.
    go_build_module "$dest/containerd-$CONTAINERD_17_VERSION" github.com/containerd/containerd "v$CONTAINERD_17_VERSION" \
        cmd/containerd cmd/containerd-shim-runc-v2 cmd/ctr
fi

# The images' contents: the pause program (built here) and busybox (from
# busybox-static); tests/runtimes/src/images.rs packs them as OCI archives.
images="$dest/images"
if [ ! -x "$images/pause" ] || [ "$here/images/pause.c" -nt "$images/pause" ]; then
    begin "pause program -> $images/pause"
    mkdir -p "$images"
    gcc -static -O2 -o "$images/pause.tmp" "$here/images/pause.c"
    mv "$images/pause.tmp" "$images/pause"
    done_step
fi
if [ ! -x "$images/busybox" ]; then
    begin "busybox (busybox-static) -> $images/busybox"
    mkdir -p "$images"
    bb=$(dpkg -L busybox-static | grep -E '/busybox$' | head -n1)
    file_out=$(od -An -c -N4 "$bb" | tr -d ' \n')
    [ "$file_out" = '177ELF' ] || {
        echo "install.sh: $bb is not an ELF file" >&2
        exit 1
    }
    cp "$bb" "$images/busybox.tmp"
    mv "$images/busybox.tmp" "$images/busybox"
    done_step
fi

# The native reference plugin (tests/runtimes/native-plugin/build.sh).
native() { # nri-version
    local script=$here/native-plugin/build.sh
    if [ -f "$script" ]; then
        NRI_WASM_RUNTIMES=$dest bash "$script" "$1"
    else
        echo "install.sh: no $script here: the native plugin for NRI $1 is not built" >&2
    fi
}
native "$NRI_FOR_CONTAINERD_2"
if $want_17; then
    native "$NRI_FOR_CONTAINERD_17"
fi

# The CRI client that times creates for the real-runtime benchmark
# (tests/runtimes/cri-timer), from its committed module files.
timer=$dest/cri-timer/cri-timer
if [ ! -x "$timer" ] || [ "$here/cri-timer/main.go" -nt "$timer" ] || [ "$here/cri-timer/go.mod" -nt "$timer" ] ||
    [ "$here/cri-timer/go.sum" -nt "$timer" ]; then
    begin "cri-timer -> $timer"
    mkdir -p "$dest/cri-timer"
    # -mod=readonly: the module file and go.sum are used as committed.
    (cd "$here/cri-timer" && GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
        go build -trimpath -o "$timer.tmp" .)
    mv "$timer.tmp" "$timer"
    done_step
fi

if $want_crio; then
    NRI_WASM_RUNTIMES=$dest bash "$here/install-crio.sh"
fi

echo "install.sh: everything is in $dest"
