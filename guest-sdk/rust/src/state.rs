//! The policy's own key-value state (see `wit/state.wit` for when writes
//! become permanent).
//!
//! Every call runs in a fresh instance, so nothing a handler keeps in memory
//! survives it; what must (the CPUs a policy handed out, the settings it
//! changed and must restore) goes here.

pub use crate::bindings::nri_wasm::policy::state::*;
pub use crate::sys::state::{get, keys, remove, set};
