//! Builds the test policies in `tests/guests` for wasm32-wasip2 into
//! `OUT_DIR`, so every test and benchmark runs real compiled components.

use std::path::PathBuf;
use std::process::Command;

const GUESTS: [&str; 6] = ["noop", "faults", "annotate", "replay", "realistic", "probe"];
/// Example policies (`example-policies/`), tested end to end.
const EXAMPLES: [&str; 2] = ["exclusive-cpus", "colocation-qos"];

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest.join("../..").canonicalize().expect("repository root");
    let guests = root.join("tests/guests");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let target_dir = out.join("guest-target");
    for dir in [guests.join("Cargo.toml"), guests.join("Cargo.lock"), root.join("guest-sdk/rust/src"), root.join("wit")]
    {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    for g in GUESTS {
        println!("cargo:rerun-if-changed={}", guests.join(g).display());
    }

    let examples = root.join("example-policies");
    for f in [examples.join("Cargo.toml"), examples.join("Cargo.lock")] {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    for e in EXAMPLES {
        println!("cargo:rerun-if-changed={}", examples.join(e).display());
    }

    build(&guests.join("Cargo.toml"), &target_dir);
    build(&examples.join("Cargo.toml"), &target_dir);

    // Compiled components are cached here across the tests of one build.
    println!("cargo:rustc-env=NRI_WASM_TEST_CACHE={}", out.join("component-cache").display());

    let release = target_dir.join("wasm32-wasip2/release");
    for g in GUESTS {
        let wasm = release.join(format!("guest_{g}.wasm"));
        assert!(wasm.exists(), "{} was not built", wasm.display());
        println!("cargo:rustc-env=GUEST_{}={}", g.to_uppercase(), wasm.display());
    }
    for e in EXAMPLES {
        let wasm = release.join(format!("{}.wasm", e.replace('-', "_")));
        assert!(wasm.exists(), "{} was not built", wasm.display());
        println!("cargo:rustc-env=EXAMPLE_{}={}", e.replace('-', "_").to_uppercase(), wasm.display());
    }
}

/// Builds a workspace of components for wasm32-wasip2.
fn build(manifest: &std::path::Path, target_dir: &std::path::Path) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--locked", "--target", "wasm32-wasip2", "--manifest-path"])
        .arg(manifest)
        .arg("--target-dir")
        .arg(target_dir)
        // The outer build's settings are for the host, not for the guests.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .status()
        .expect("running cargo for the guest components");
    assert!(status.success(), "building {} failed (is the wasm32-wasip2 target installed?)", manifest.display());
}
