//! Returns the reply its settings describe, for the merge tests (to be
//! completed: the settings format is defined by tests/e2e/tests/merge_plugins.rs).
use nri_wasm_sdk::*;

struct Replay;

impl Policy for Replay {
    fn events() -> Vec<EventKind> {
        vec![EventKind::CreateContainer]
    }
}

export_policy!(Replay);
