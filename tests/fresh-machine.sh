#!/usr/bin/env bash
# Runs the README's set-up commands the way a new user runs them.
#
#   tests/fresh-machine.sh            the README's test command, here
#   tests/fresh-machine.sh --demo     its demo command too
#   tests/fresh-machine.sh --clone    in a fresh clone of HEAD, with an empty
#                                     cargo home and target directory (what a
#                                     new user's machine has: Rust and rustup)
#
# The commands are read from the README's "Set-up" block, not copied here,
# so the README cannot drift from what CI runs: `.ci/run` runs this script.
# On a machine without the pinned toolchain, rustup installs it with the
# wasm32-wasip2 target of rust-toolchain.toml. It adds the targets only to a
# toolchain it installs itself, so on a machine that already had it this
# script adds the target first, as the README tells such a user to (the
# build does not change the toolchain; it fails saying what to run).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
demo=false
clone=false
for arg in "$@"; do
    case "$arg" in
        --demo) demo=true ;;
        --clone) clone=true ;;
        *) echo "usage: $0 [--demo] [--clone]" >&2; exit 2 ;;
    esac
done

# The README's two commands: the first ```sh block after "## Set-up".
mapfile -t commands < <(awk '
    /^## Set-up/ { in_setup = 1; next }
    in_setup && /^```sh/ { in_block = 1; next }
    in_block && /^```/ { exit }
    in_block { sub(/[[:space:]]+#.*$/, ""); if (length($0)) print }
' "$root/README.md")
if [ "${#commands[@]}" -ne 2 ]; then
    echo "the README's Set-up block should hold two commands, found ${#commands[@]}:" >&2
    printf '  %s\n' "${commands[@]}" >&2
    exit 1
fi
demo_command=${commands[0]}
test_command=${commands[1]}
case "$demo_command" in *" demo"*) ;; *) echo "first Set-up command is not the demo: $demo_command" >&2; exit 1 ;; esac
case "$test_command" in "cargo test "*) ;; *) echo "second Set-up command is not a cargo test: $test_command" >&2; exit 1 ;; esac

work=$root
if $clone; then
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/nri-wasm-fresh.XXXXXX")
    trap 'rm -rf "$scratch"' EXIT
    git clone --quiet --no-hardlinks "$root" "$scratch/nri-wasm"
    work=$scratch/nri-wasm
    # A new user's cargo: no registry cache, no config, no target directory.
    export CARGO_HOME=$scratch/cargo-home
    mkdir -p "$CARGO_HOME"
    # rustup's toolchains stay where they are (they are "Rust and rustup").
    export RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}
    export PATH="$CARGO_HOME/bin:$PATH"
    unset CARGO_TARGET_DIR
fi

cd "$work"
echo "fresh-machine: in $work"
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
    echo "fresh-machine: this machine's toolchain predates the target: rustup target add wasm32-wasip2"
    rustup target add wasm32-wasip2
fi
if $demo; then
    echo "fresh-machine: $demo_command"
    out=$(mktemp)
    bash -c "$demo_command" | tee "$out"
    grep -q "every pod was handled as its scenario describes" "$out" || {
        echo "fresh-machine: the demo did not show the policies at work" >&2
        exit 1
    }
fi
echo "fresh-machine: $test_command"
bash -c "$test_command"
echo "fresh-machine: the README's commands work as written"
