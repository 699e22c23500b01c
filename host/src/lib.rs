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
//! - [`cli`]: the command line of the `nri-wasm` binary.

pub mod alloc;
pub mod cli;
pub mod config;
pub mod convert;
pub mod merge;
pub mod metrics;
pub mod node;
pub mod nri;
pub mod policy;
pub mod registry;
pub mod watch;

pub use nri_wasm_api as api;
