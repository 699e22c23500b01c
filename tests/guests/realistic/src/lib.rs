//! A realistic policy for the benchmarks (to be completed).
use nri_wasm_sdk::*;

struct Realistic;

impl Policy for Realistic {
    fn events() -> Vec<EventKind> {
        vec![EventKind::CreateContainer]
    }
}

export_policy!(Realistic);
