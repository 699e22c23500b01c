//! The host's integration tests, one test binary: each module runs the
//! `nri-wasm` binary (or reads the crate's sources) as a user, a runtime, a
//! kubelet or an attacker would. One binary links the host and its test
//! dependencies once instead of once per file, which is most of what these
//! tests cost to build. A file's tests run alone with
//! `cargo test -p nri-wasm --test integration <module>::`.
//!
//! The files' tests run side by side, as the tests of one file always did,
//! with two exceptions that take [`alone`]: the tests that hold the host to
//! a deadline on this machine (probes within a second, answers within the
//! runtime's timeout, a load within its start wait) and the tests that
//! build whole projects (the guide's walkthrough, a new project of every
//! language) and would take their CPUs. Nothing else needs a process of its
//! own: a test that changes process-wide state does it in a child (the
//! binary it starts); `endpoints` raises this process's soft limit of
//! descriptors to its hard limit, which the children it and others start
//! then inherit, harmlessly.

mod author_tools;
mod cli;
mod endpoints;
mod hostile_load;
mod launched;
mod log_pipe;
mod module_circles;

/// The lock of the tests that must not share the machine with another test
/// of this binary that is timed or builds a project (see the module doc).
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// [`ALONE`], for a test that is not async.
pub(crate) fn alone() -> tokio::sync::MutexGuard<'static, ()> {
    ALONE.blocking_lock()
}

/// [`ALONE`], for an async test.
pub(crate) async fn alone_async() -> tokio::sync::MutexGuard<'static, ()> {
    ALONE.lock().await
}
