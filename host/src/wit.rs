//! The policy world as Rust: the only `bindgen!` in the host.
//!
//! Everything else refers to the generated types through this module, so a
//! change of the WIT package shows up here and in `convert/`, nowhere else.
//!
//! The generated items are documented by the WIT files (`wit/*.wit`), not
//! here: the crate's `missing_docs` does not apply to them.
#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../wit",
    world: "policy",
    additional_derives: [PartialEq],
    // Reading the event from `configure`, where there is none, traps.
    imports: { "nri-wasm:policy/event": trappable },
});

// `self::`: the host's own tests link this crate as `nri_wasm` too (the
// dev-dependency that turns on `testing`), which the generated module's
// name would otherwise be ambiguous with.

/// The event being handled, read on demand (`nri-wasm:policy/event`).
pub use self::nri_wasm::policy::event;

/// The host interface a policy imports (`nri-wasm:policy/host`).
pub use self::nri_wasm::policy::host;
/// The node view and topology (`nri-wasm:policy/node`).
pub use self::nri_wasm::policy::node;
/// The policy's own key-value state (`nri-wasm:policy/state`).
pub use self::nri_wasm::policy::state;
/// The WIT types of the policy interface (`nri-wasm:policy/types`).
pub use self::nri_wasm::policy::types as wit;
