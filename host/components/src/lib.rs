//! The project's WebAssembly components, built from source by `build.rs`.
//!
//! [`examples`]: the policies of `example-policies/`, as files and as bytes
//! (the demo embeds them, so `nri-wasm demo` needs no build step of its
//! own). The test guests of `tests/guests/` are built by the same script
//! for `nri-wasm-test-support`.
//!
//! Both workspaces are built for `wasm32-wasip2` in release mode into one
//! directory under the target directory, shared by every profile, so a
//! debug test build and a release build compile the guests once.

include!(concat!(env!("OUT_DIR"), "/components.rs"));

/// Where compiled components may be cached across the tests of one build.
pub const COMPONENT_CACHE: &str = env!("NRI_WASM_COMPONENT_CACHE");

/// The build script's target-directory rule, tested here (a build script has
/// no tests of its own).
#[cfg(test)]
#[path = "../target_dir.rs"]
mod target_dir;
