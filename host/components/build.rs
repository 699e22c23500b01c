//! Builds policy components for wasm32-wasip2 and writes `components.rs`
//! naming them: the example policies for `nri-wasm-components` (what the
//! demo embeds), the test guests of `tests/guests` for
//! `nri-wasm-test-support`, whose manifest points here. Two crates rather
//! than a feature: a feature the tests turn on would give the host another
//! dependency graph in `cargo test -p <crate>` than in the workspace build,
//! and build it twice.
//!
//! rustup installs the targets listed in `rust-toolchain.toml` only when it
//! installs the toolchain itself; a machine that already had the pinned
//! toolchain lacks `wasm32-wasip2`. This script does not change the user's
//! toolchain: without the target it fails with the command to run
//! (`rustup target add wasm32-wasip2`, as the README's Set-up says).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

mod target_dir;

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let root = manifest.join("../..").canonicalize().expect("repository root");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let package = std::env::var("CARGO_PKG_NAME").expect("CARGO_PKG_NAME");
    let workspaces = match package.as_str() {
        "nri-wasm-components" => [("examples", "EXAMPLE", root.join("example-policies"))],
        "nri-wasm-test-support" => [("guests", "GUEST", root.join("tests/guests"))],
        other => panic!(
            "{other}: this build script builds the components of nri-wasm-components and nri-wasm-test-support only"
        ),
    };
    for dir in [root.join("guest-sdk/rust/src"), root.join("guest-sdk/rust/Cargo.toml"), root.join("wit")] {
        println!("cargo:rerun-if-changed={}", dir.display());
    }

    ensure_target();
    let target_dir = guest_target_dir(&out);
    let mut code = String::new();
    for (module, prefix, dir) in &workspaces {
        println!("cargo:rerun-if-changed={}", dir.join("Cargo.toml").display());
        println!("cargo:rerun-if-changed={}", dir.join("Cargo.lock").display());
        let members = members(&dir.join("Cargo.toml"));
        for m in &members {
            println!("cargo:rerun-if-changed={}", dir.join(m).display());
        }
        build(&dir.join("Cargo.toml"), &target_dir);
        let release = target_dir.join(TARGET).join("release");
        writeln!(code, "/// Components of `{}`.", dir.strip_prefix(&root).unwrap_or(dir).display()).unwrap();
        writeln!(code, "pub mod {module} {{").unwrap();
        let mut all = String::new();
        let mut files = String::new();
        for m in &members {
            let name = Path::new(m).file_name().and_then(|n| n.to_str()).expect("member name");
            let crate_name = crate_name(&dir.join(m).join("Cargo.toml"));
            let wasm = release.join(format!("{}.wasm", crate_name.replace('-', "_")));
            assert!(wasm.exists(), "{} was not built", wasm.display());
            let konst = name.replace('-', "_").to_uppercase();
            let path = wasm.display().to_string();
            writeln!(code, "    /// `{m}`, compiled.\n    pub const {konst}: &str = {path:?};").unwrap();
            println!("cargo:rustc-env={prefix}_{konst}={path}");
            writeln!(all, "        ({name:?}, {konst}, include_bytes!({path:?})),").unwrap();
            let policy_file = dir.join(m).join("policy.toml");
            if policy_file.exists() {
                let path = policy_file.display().to_string();
                writeln!(files, "        ({name:?}, include_str!({path:?})),").unwrap();
            }
        }
        writeln!(code, "    /// Every one: name, path, bytes.").unwrap();
        writeln!(code, "    pub static ALL: &[(&str, &str, &[u8])] = &[\n{all}    ];").unwrap();
        writeln!(code, "    /// The `policy.toml` of those that have one: name, text (what an operator").unwrap();
        writeln!(code, "    /// installs beside the component as `NN-name.toml`).").unwrap();
        writeln!(code, "    pub static POLICY_FILES: &[(&str, &str)] = &[\n{files}    ];").unwrap();
        writeln!(code, "}}").unwrap();
    }
    std::fs::write(out.join("components.rs"), code).expect("writing components.rs");
    println!("cargo:rustc-env=NRI_WASM_COMPONENT_CACHE={}", target_dir.join("component-cache").display());
}

/// The members of a workspace, from its `Cargo.toml`.
fn members(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let doc: toml::Table = text.parse().unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let members = doc.get("workspace").and_then(|w| w.get("members")).and_then(|m| m.as_array());
    members
        .unwrap_or_else(|| panic!("{}: no [workspace] members", manifest.display()))
        .iter()
        .map(|m| m.as_str().expect("member path").to_string())
        .collect()
}

fn crate_name(manifest: &Path) -> String {
    let text = std::fs::read_to_string(manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let doc: toml::Table = text.parse().unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    doc.get("package").and_then(|p| p.get("name")).and_then(|n| n.as_str()).expect("package name").to_string()
}

/// One directory for the guest builds of every profile: the target
/// directory's `wasm-guests`, or `OUT_DIR`'s if the layout is not cargo's.
fn guest_target_dir(out: &Path) -> PathBuf {
    target_dir::target_dir(out, std::env::var_os("TARGET").as_deref())
        .unwrap_or_else(|| out.to_path_buf())
        .join("wasm-guests")
}

/// Fails the build, saying what to run, when the standard library for
/// wasm32-wasip2 is not installed.
fn ensure_target() {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let installed = || {
        Command::new(&rustc)
            .args(["--print", "target-libdir", "--target", TARGET])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
            .and_then(|dir| std::fs::read_dir(dir).ok())
            .is_some_and(|mut entries| {
                entries.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("libstd-")))
            })
    };
    if !installed() {
        // A build script does not change the user's toolchain: it says what
        // to run (the README's Set-up says so; `.ci/run` runs it).
        panic!(
            "the {TARGET} target is not installed for this toolchain, and the policy components \
             are built for it: run `rustup target add {TARGET}` in the repository and build again \
             (rust-toolchain.toml lists the target, but rustup adds it only to a toolchain it \
             installs itself)"
        );
    }
}

/// Builds a workspace of components for wasm32-wasip2, release mode.
fn build(manifest: &Path, target_dir: &Path) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--locked", "--target", TARGET, "--manifest-path"])
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
        .expect("running cargo for the policy components");
    assert!(status.success(), "building the components of {} failed", manifest.display());
}
