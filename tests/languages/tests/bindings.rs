//! The checked-in bindings match the WIT package: the JavaScript SDK's
//! `src/world.js`, `src/schema.js` and `types/world.d.ts` and the Go SDK's
//! `wit/types.go`, `wit/bindings.go` and `wit/native.go` are what their
//! generators make of `wit/` now, and so is the C test host's
//! `testing/schema.c`. (The C and Python bindings
//! are generated from `wit/` by every build.)
#![cfg(feature = "languages")]

use std::path::Path;
use std::process::Command;

fn run_check(script: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("bash").arg(root.join(script)).arg("--check").output().expect("running the check");
    assert!(
        out.status.success(),
        "{script} --check: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn javascript_bindings_and_types_match_the_wit() {
    run_check("guest-sdk/js/gen.sh");
}

#[test]
fn go_bindings_match_the_wit() {
    run_check("guest-sdk/go/gen-bindings.sh");
    run_check("guest-sdk/c/gen.sh");
}
