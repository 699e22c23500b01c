#!/usr/bin/env bash
# Records a policy's declarations in its component, for the SDKs whose
# toolchains cannot emit a custom section themselves (C, Go, JavaScript,
# Python; Rust has `nri_wasm_sdk::capabilities!` and `Policy::EVENTS`).
#
#   guest-sdk/declare.sh COMPONENT.wasm POLICY_DIR
#
# Two files of POLICY_DIR, each names separated by white space or commas,
# `#` starting a comment:
# - `events`: the events the policy may subscribe to, as the WIT enum
#   `event-kind` names them (create-container, stop-container, ...,
#   synchronize), recorded as the section `nri-wasm:events`. The host reads
#   it before compiling the component: it registers for these events from
#   its first second, and while the policy loads only these events wait for
#   it or fail for it. What the policy's configure answers must be within
#   it, or the host refuses to load it; the SDKs' native test hosts check
#   the same. A name that is not an event kind stops the build. Without the
#   file nothing is recorded (a warning says so), and the host knows the
#   policy's subscription only from an earlier load, or once it loads.
# - `capabilities`: what the policy may change and read (docs/wit.md lists
#   the names), recorded as the section `nri-wasm:capabilities`; the host
#   checks the names when it loads the component. Without the file nothing
#   is recorded, and the host takes the component to declare nothing
#   dangerous.
#
# A custom section is id 0, the section's size, the name's length and the
# name, then the text, sizes in unsigned LEB128, appended to the component.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
component=$1
dir=$2

# The names of a declaration file, one line, single spaces.
names() {
    sed -e 's/#.*//' "$1" | tr ',\n\t\r' '    ' | tr -s ' ' | sed -e 's/^ //' -e 's/ $//'
}

# Unsigned LEB128 of $1, as bytes on stdout.
leb128() {
    local n=$1 byte
    while :; do
        byte=$((n & 0x7f))
        n=$((n >> 7))
        if [ "$n" -ne 0 ]; then byte=$((byte | 0x80)); fi
        printf "\\$(printf '%03o' "$byte")"
        if [ "$n" -eq 0 ]; then break; fi
    done
}

# Appends the custom section named $1 holding the text $2 to the component.
section() {
    local name=$1 text=$2 name_len text_len size
    name_len=${#name}
    text_len=$(printf '%s' "$text" | wc -c)
    size=$(($(leb128 "$name_len" | wc -c) + name_len + text_len))
    {
        printf '\000'
        leb128 "$size"
        leb128 "$name_len"
        printf '%s' "$name"
        printf '%s' "$text"
    } >> "$component"
}

if [ -f "$dir/events" ]; then
    events=$(names "$dir/events")
    # The event kinds of the WIT package the component is built against.
    known=$(sed -n '/enum event-kind {/,/}/p' "$here/../wit/types.wit" | sed -e 's://.*::' -e 's/[{},]/ /g' |
        tr -s ' \n' '\n\n' | grep -v -e '^enum$' -e '^event-kind$' -e '^$' | tr '\n' ' ')
    for name in $events; do
        case " $known" in
            *" $name "*) ;;
            *)
                echo "$dir/events: \"$name\" is not an event kind (one of: ${known% })" >&2
                exit 1 ;;
        esac
    done
    # A declaration of no event is still one: a single space.
    section "nri-wasm:events" "${events:- }"
else
    echo "warning: $dir/events is missing: the component declares no events, so a host knows what it subscribes to only once it has loaded it (write the events its configure may answer in that file)" >&2
fi

if [ -f "$dir/capabilities" ]; then
    section "nri-wasm:capabilities" "$(names "$dir/capabilities")"
fi
