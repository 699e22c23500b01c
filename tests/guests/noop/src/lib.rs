//! Subscribes to every event and changes nothing: the cost of a policy call.
use nri_wasm_sdk::*;

struct Noop;

impl Policy for Noop {
    const EVENTS: &'static [EventKind] = &LIFECYCLE_EVENTS;
}

export_policy!(Noop);
