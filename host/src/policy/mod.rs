//! Policies: WebAssembly components that decide what happens on NRI events.
//!
//! - `bindings`: the WIT world as Rust types (one `bindgen!`);
//! - `limits`: fuel, time, memory caps per call;
//! - `manifest`: finding `NN-name.wasm` and reading `NN-name.toml`;
//! - `engine`: one wasmtime engine, linker and epoch ticker; a compiled
//!   policy (`PolicyPre`) per file; a fresh store per call;
//! - `output`: a guest's stdout and stderr, bounded, never refusing a write;
//! - `loader`: a policy directory into compiled policies, skipping bad files;
//! - `chain`: the ordered chain for one event, on-error, audit, breaker;
//! - `dispatcher`: the chain behind the transport's `Dispatcher`, in time,
//!   off the reactor, bounded.

pub mod bindings;
pub mod chain;
pub mod dispatcher;
pub mod engine;
pub mod event;
pub mod limits;
pub mod loader;
pub mod manifest;
pub mod output;
pub mod state;
