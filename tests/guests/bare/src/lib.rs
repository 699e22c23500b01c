//! The cheapest policy a component can be: no standard library, no WASI,
//! no SDK; it subscribes to CreateContainer and changes nothing.
//!
//! Its component has one core module and one core instance, and imports
//! nothing but the world's types, so a call of it costs what the host's
//! sandbox itself costs: a fresh store and instance, fuel, the deadline, the
//! call and the reply. The benchmarks use it as the floor of a policy (what
//! ten policies cost before they do any work); the tests check that the host
//! runs a component built this way like any other.
#![no_std]

extern crate alloc;

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

wit_bindgen::generate!({
    path: "../../../wit",
    world: "policy",
});

struct Bare;

impl Guest for Bare {
    fn configure(_settings: String) -> Result<Vec<EventKind>, String> {
        Ok(vec![EventKind::CreateContainer])
    }

    fn handle(_kind: EventKind) -> Result<Reply, String> {
        Ok(Reply { adjust: None, update: Vec::new(), evict: Vec::new() })
    }
}

export!(Bare);

mod floor;
