//! Policies: WebAssembly components that decide what happens on NRI events.
//!
//! Loading (a file to a [`prepare::CompiledPolicy`]):
//! - `manifest`: finding `NN-name.wasm` and reading `NN-name.toml`;
//! - `inspect`: the cheap checks before compiling (size, world, imports,
//!   structure against the pool);
//! - `compile`: compiling within bounds (a child process in the binary);
//! - `cache`: compiled components on disk, trusted only when host-private;
//! - `prepare`: the steps in order, cheapest first;
//! - `loader`: a policy directory into compiled policies, skipping bad files.
//!
//! Calling (one event, one policy, one fresh instance):
//! - `bindings`: the WIT world as Rust types (one `bindgen!`);
//! - `engine`: the wasmtime engine, linker, policy runtime; a call;
//! - `store`: a call's store and its limits; `limiter`: memory and tables;
//! - `watchdog`: ends calls at their deadlines, idle otherwise;
//! - `interfaces`: the host side of the policy's imports;
//! - `event`, `env`, `state`: what a call reads and writes;
//! - `output`, `clip`: what a guest says, bounded and made one line;
//! - `caps`: what a policy may change and read (declared, granted, checked);
//! - `errors`: load and call failures, named after the step or the limit.
//!
//! Running the chain:
//! - `chain`: the ordered chain for one event, time shares, on-error,
//!   on-conflict, audit, breaker;
//! - `dispatcher`: the chain behind the transport's `Dispatcher`, in time,
//!   off the reactor, bounded.

pub mod bindings;
pub mod cache;
pub mod caps;
pub mod chain;
pub mod clip;
pub mod compile;
pub mod dispatcher;
pub mod engine;
pub mod env;
pub mod errors;
pub mod event;
pub mod inspect;
pub mod interfaces;
pub mod known;
pub mod limiter;
pub mod limits;
pub mod loader;
pub mod manifest;
pub mod output;
pub mod prepare;
pub mod reload;
pub mod state;
pub mod store;
pub mod watchdog;
