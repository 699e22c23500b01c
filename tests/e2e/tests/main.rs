//! The end-to-end suite as one test binary: each file of this directory is
//! a module, so the host, wasmtime and the compiled components are linked
//! once rather than once per file. A test keeps its file's name as a filter
//! (`cargo test -p nri-wasm-e2e -- chain::`).
//!
//! The tests that measure the process's memory (`faults`, `hostile`,
//! `reload`) are not here but in `memory.rs`: they need a process where
//! nothing else allocates. `startup`, `host_calls` and `loads` are test
//! binaries of their own (see Cargo.toml): they load the CPUs or measure
//! time, and must not share a process with the rest.

mod author_tools;
mod bounds;
mod caps;
mod chain;
mod deadlines;
mod disk;
mod engine;
mod examples;
mod framing;
mod handshake;
mod merge_plugins;
mod node_state;
mod operations;
mod outbox;
mod own_pod;
mod preinit;
mod reconnect;
mod registry;
mod rpcs;
mod sdk_agrees;
