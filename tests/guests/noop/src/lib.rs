//! Subscribes to every event and changes nothing: the cost of a policy call.
use nri_wasm_sdk::*;

struct Noop;

impl Policy for Noop {
    fn events() -> Vec<EventKind> {
        LIFECYCLE_EVENTS.to_vec()
    }
}

export_policy!(Noop);
