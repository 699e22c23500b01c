//! nri-wasm: one NRI plugin that hosts a chain of WebAssembly policies.
//!
//! The crate is laid out like the system it implements:
//! - [`nri`]: the plugin side of the NRI protocol (multiplexed socket,
//!   registration, the Plugin service, reconnects) and the [`nri::Dispatcher`]
//!   seam where events leave the transport;
//! - [`policy`]: the engine, the loader and the chain of policies;
//! - [`merge`] and [`convert`]: what the runtime would do with several
//!   plugins' replies, and the mapping between NRI and the WIT interface;
//! - [`node`]: the view of the node's pods and containers policies read;
//! - [`registry`]: policies named by an OCI reference, pulled, verified
//!   (digests, signatures) and cached by digest;
//! - [`config`]: the operator's configuration file, validated up front;
//! - [`metrics`]: Prometheus metrics, health and status over HTTP;
//! - [`cli`]: the command line of the `nri-wasm` binary;
//! - [`wit`], [`text`], [`files`], [`invalid`]: what several of the above
//!   share (the WIT world as Rust types, text made safe to show,
//!   host-private files, a setting a rule refuses),
//!   kept at the bottom so that none of them imports another for it;
//! - `testing` (with the `testing` feature): seams for tests, benchmarks
//!   and fuzz targets, not part of the stable surface.
//!
//! Layers, lowest first: what the modules import from each other today.
//! What is checked (`host/tests/integration/module_circles.rs`) is that no
//! two of these modules, no two groups of `policy/` and no two files of one
//! folder (a folder's `mod.rs` aside) import each other, directly or around
//! a circle:
//! 1. `alloc`, `files`, `invalid`, `text`, `watch`, `wit`;
//! 2. `nri` (the transport and its `Dispatcher` seam);
//! 3. `merge`, `node`, `convert`, `registry`;
//! 4. `policy`;
//! 5. `metrics` (implements the policy's `Observer` and `Tally`), `config`;
//! 6. `cli`.

#![warn(unreachable_pub, missing_docs)]

pub mod alloc;
pub mod cli;
pub mod config;
pub mod convert;
pub mod files;
pub mod invalid;
pub mod merge;
pub mod metrics;
pub mod node;
pub mod nri;
pub mod policy;
pub mod registry;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod text;
pub mod watch;
pub mod wit;

pub use nri_wasm_api as api;
