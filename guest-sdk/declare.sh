#!/usr/bin/env bash
# Records a policy's capability declaration in its component, for the SDKs
# whose toolchains cannot emit a custom section themselves (C, Go,
# JavaScript, Python; Rust has `nri_wasm_sdk::capabilities!`).
#
#   guest-sdk/declare-capabilities.sh COMPONENT.wasm POLICY_DIR
#
# The declaration is POLICY_DIR/capabilities: capability names separated by
# white space or commas, `#` starting a comment (docs/wit.md lists the
# names). Without that file nothing is recorded, and the host takes the
# component to declare nothing dangerous. The names are appended to the
# component as a custom section named `nri-wasm:capabilities` (id 0, the
# section's size, the name's length and the name, then the text: sizes in
# unsigned LEB128). The host checks the names when it loads the component.
set -euo pipefail
component=$1
file=$2/capabilities
[ -f "$file" ] || exit 0
text=$(sed -e 's/#.*//' "$file" | tr ',\n\t' '   ' | tr -s ' ' | sed -e 's/^ //' -e 's/ $//')
name="nri-wasm:capabilities"

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

name_len=${#name}
text_len=$(printf '%s' "$text" | wc -c)
name_len_bytes=$(leb128 "$name_len" | wc -c)
size=$((name_len_bytes + name_len + text_len))
{
    printf '\000'
    leb128 "$size"
    leb128 "$name_len"
    printf '%s' "$name"
    printf '%s' "$text"
} >> "$component"
