//! nri-wasm: one NRI plugin that hosts a chain of WebAssembly policies.
//!
//! The crate is laid out like the system it implements:
//! - [`nri`]: the plugin side of the NRI protocol (multiplexed socket,
//!   registration, the Plugin service, reconnects) and the [`nri::Dispatcher`]
//!   seam where events leave the transport;
//! - [`config`]: the operator's configuration file, validated up front;
//! - [`cli`]: the command line of the `nri-wasm` binary.

pub mod cli;
pub mod config;
pub mod convert;
pub mod merge;
pub mod node;
pub mod nri;
pub mod policy;

pub use nri_wasm_api as api;
