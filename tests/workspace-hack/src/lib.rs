//! Nothing to call: this crate exists for its dependency list.
//!
//! Cargo enables a third-party crate's features per build, as the union of
//! what the selected packages ask for. `cargo test --workspace` selects the
//! deploy checks, whose PromQL parser and Kubernetes types ask `libc`,
//! `num-traits`, `indexmap`, `fnv` and `serde_json` for more than the other
//! members do; `cargo test -p nri-wasm-e2e` alone then builds those crates
//! with fewer features, and
//! since `libc` sits under the protobuf code generator, under the wire
//! protocol crate and so under the host, it rebuilt the host and most of
//! its dependencies a second time. Every test crate depends on this one,
//! which asks for the workspace's union itself, so that any selection
//! builds the same units as the whole workspace.
//!
//! It is a dev-dependency of the crates the binary ships (`nri-wasm`,
//! `nri-sim`, `nri-wasm-api`): the binary's own build never sees it.
//! `tests/aligned.rs` compares cargo's unit graph of every member's tests
//! with the workspace's and says what to add here when a dependency changes.
