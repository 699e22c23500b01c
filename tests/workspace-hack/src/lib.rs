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
//!
//! Why not `cargo-hakari`, which writes such a crate: it is a tool to
//! install in CI (a build of it and its graph library, minutes on two
//! cores), and it checks the crate against its own model of cargo's
//! feature resolution; the test here asks cargo itself which compilations
//! a selection would run, which is the cost being avoided. The crate is a
//! list of about a dozen dependencies, kept by hand from what the test prints.
