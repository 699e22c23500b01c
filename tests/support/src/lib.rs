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
//! - [`heap`]: a global allocator that counts the process's live heap.
//!
//! It depends on neither the host nor wasmtime, so a test crate that uses it
//! links nothing more than it already did.

pub mod cases;
pub mod heap;

include!(concat!(env!("OUT_DIR"), "/components.rs"));
