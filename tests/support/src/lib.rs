//! Helpers that more than one test crate needs (the end-to-end suite, the
//! languages suite, the host's own tests), defined once so that the copies
//! cannot drift apart:
//!
//! - [`guests`]: the test policies of `tests/guests/`, built for
//!   `wasm32-wasip2` from source (by `host/components/build.rs`, which also
//!   builds the example policies for `nri-wasm-components`);
//! - [`cases`]: the cases of the example policies
//!   (`example-policies/<name>/src/cases.rs`) as the runtime's requests and
//!   as the earlier policies a case puts in the chain;
//! - [`heap`]: a global allocator that counts the process's live heap;
//! - [`without_event_declaration`]: a component as an SDK without event
//!   declarations built it.
//!
//! It depends on neither the host nor wasmtime, so a test crate that uses it
//! links nothing more than it already did.

pub mod cases;
pub mod heap;

include!(concat!(env!("OUT_DIR"), "/components.rs"));

/// The custom section a component declares its events in (the host's
/// `policy::spec::declared::SECTION`, which this crate does not depend on).
const EVENTS_SECTION: &[u8] = b"nri-wasm:events";

/// `component` as it was before the SDKs declared events: its event
/// declaration section renamed (one byte of the name changed, sizes
/// unchanged), so that the host finds no declaration and knows the
/// policy's subscription only from a record or once it loaded it. Panics
/// unless the component has exactly one declaration.
pub fn without_event_declaration(component: &[u8]) -> Vec<u8> {
    let at: Vec<usize> = component
        .windows(EVENTS_SECTION.len())
        .enumerate()
        .filter(|(_, w)| *w == EVENTS_SECTION)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "a component with one event declaration (found {})", at.len());
    let mut out = component.to_vec();
    // `nri-wasm:events` becomes `nri-wasm:xvents`, a section no host reads.
    out[at[0] + "nri-wasm:".len()] = b'x';
    out
}
