//! A harness for running the host against real container runtimes.
//!
//! The simulator (`host/sim`) answers every question about the protocol
//! quickly, but it was written by the same people as the host. This crate
//! puts the real thing under the host: a containerd (2.3.4 or 1.7.34) or
//! CRI-O built from its pinned version by `tests/runtimes/install.sh`,
//! runc, and crictl as the kubelet's stand-in. Each test gets a node of its
//! own: a runtime whose root, state, sockets and log live in a temporary
//! directory on a tmpfs, and whose pods sit under a cgroup parent of their
//! own, so that everything the test started can be found and stopped by its
//! pid, even after a panic.
//!
//! - [`runtime`]: which runtime (`NRI_WASM_RUNTIME`), and the [`runtime::Node`]
//!   every test starts;
//! - [`containerd`]: containerd's configuration per version, start, restart;
//! - [`crictl`]: pods and containers through the CRI, the OCI spec back;
//! - [`crio`]: CRI-O's configuration, start, restart, images in its storage;
//! - [`host`]: the nri-wasm host as a process, its policy directory;
//! - [`images`]: the pause and busybox images as OCI archives;
//! - [`log`]: what the runtime logged;
//! - [`native`]: the native reference NRI plugin, for the differential tests;
//! - [`process`]: a child process stopped by its pid when dropped.

pub mod containerd;
pub mod cri_timer;
pub mod crictl;
pub mod crio;
pub mod host;
pub mod images;
pub mod log;
pub mod native;
pub mod process;
pub mod runtime;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What can go wrong while setting a node up or driving it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Something install.sh installs is not there.
    #[error("{what} is missing ({path}): run tests/runtimes/install.sh{args} first")]
    Missing { what: String, path: PathBuf, args: &'static str },
    /// A command ran and failed.
    #[error("{command} failed ({status}): {stderr}")]
    Command { command: String, status: String, stderr: String },
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Something did not happen within its (generous) backstop.
    #[error("{what} did not happen within {secs} s")]
    Timeout { what: String, secs: u64 },
    /// Output that could not be read.
    #[error("{what}: {detail}")]
    Parse { what: String, detail: String },
    /// A runtime this build cannot drive.
    #[error("{0}")]
    Unsupported(String),
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { what: what.into(), source }
    }
}

/// Where install.sh puts the runtimes: `NRI_WASM_RUNTIMES`, or the
/// repository's `target/runtimes`.
pub fn runtimes_dir() -> PathBuf {
    match std::env::var_os("NRI_WASM_RUNTIMES") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/runtimes"),
    }
}

/// `path` if it exists, otherwise an error telling what to install.
pub fn require(what: &str, path: PathBuf, install_args: &'static str) -> Result<PathBuf, Error> {
    if path.exists() {
        Ok(path)
    } else {
        Err(Error::Missing { what: what.into(), path, args: install_args })
    }
}

/// Polls `check` every 20 ms until it gives a value, or fails after
/// `backstop` (a generous limit: the tests assert what happens, never how
/// fast).
pub fn wait_for<T>(what: &str, backstop: Duration, mut check: impl FnMut() -> Option<T>) -> Result<T, Error> {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return Ok(v);
        }
        if start.elapsed() > backstop {
            return Err(Error::Timeout { what: what.into(), secs: backstop.as_secs() });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A directory for one node's runtime state: on `/dev/shm` (a tmpfs, so
/// containerd's bolt database does not fsync to disk) when it is there.
pub fn node_tempdir() -> Result<tempfile::TempDir, Error> {
    let shm = Path::new("/dev/shm");
    let builder = {
        let mut b = tempfile::Builder::new();
        b.prefix("nri-wasm-rt-");
        b
    };
    let dir = if shm.is_dir() { builder.tempdir_in(shm) } else { builder.tempdir() };
    dir.map_err(|e| Error::io("creating the node's temporary directory", e))
}
