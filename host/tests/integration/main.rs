//! The host's integration tests, one test binary: each module runs the
//! `nri-wasm` binary (or reads the crate's sources) as a user, a runtime, a
//! kubelet or an attacker would. One binary links the host and its test
//! dependencies once instead of once per file, which is most of what these
//! tests cost to build. A file's tests run alone with
//! `cargo test -p nri-wasm --test integration <module>::`.
//!
//! Nothing here needs a process of its own: every test that changes
//! process-wide state does it in a child (the binary it starts), apart from
//! `endpoints`, which only raises this process's descriptor limit.

mod author_tools;
mod cli;
mod endpoints;
mod hostile_load;
mod launched;
mod log_pipe;
mod module_circles;
