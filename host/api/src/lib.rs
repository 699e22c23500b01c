//! The NRI protocol as Rust types: every message and enum of NRI v0.12
//! (`api`) and the `Runtime`/`Plugin` ttrpc services (`services`), generated at
//! build time from the project's `nri.proto`.
//!
//! Both sides of the protocol use this crate: the host (plugin side) and the
//! runtime simulator in `tests/`. Keeping it separate lets the host binary
//! embed the simulator for its demo without a dependency cycle.

#![allow(missing_debug_implementations)]

include!(concat!(env!("OUT_DIR"), "/generated.rs"));

/// NRI messages and enums (package `nri.pkg.api.v1alpha1`).
pub use nri as api;
/// ttrpc clients, server traits and service tables for `Runtime` and `Plugin`.
pub use nri_ttrpc as services;

/// Fully qualified name of the Plugin service on the wire.
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
/// Fully qualified name of the Runtime service on the wire.
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";
