//! How we reach the runtime: the two ways in, and the reconnect back-off.
//!
//! *External* plugins connect to the runtime's NRI socket and must come back
//! by themselves when the runtime restarts. *Launched* plugins are started by
//! the runtime with an already-connected socket on an inherited fd (named by
//! `NRI_PLUGIN_SOCKET`) plus `NRI_PLUGIN_NAME` and `NRI_PLUGIN_IDX`; when that
//! connection ends the process must exit so the runtime can start it again.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::UnixStream;

/// Default NRI socket of containerd and CRI-O.
pub const DEFAULT_SOCKET: &str = "/var/run/nri/nri.sock";
/// Environment variable with the fd of a runtime-provided socket.
pub const ENV_SOCKET: &str = "NRI_PLUGIN_SOCKET";
/// Environment variable with the plugin name a runtime launched us as.
pub const ENV_NAME: &str = "NRI_PLUGIN_NAME";
/// Environment variable with the plugin index a runtime launched us as.
pub const ENV_IDX: &str = "NRI_PLUGIN_IDX";

/// Where the connection to the runtime comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// Connect to this socket path (and reconnect when it goes away).
    Socket(PathBuf),
    /// Use the connected socket the runtime gave us on this fd (once).
    Inherited(RawFd),
}

/// What the runtime put in our environment when it launched us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchEnv {
    /// The connected socket's fd number (`NRI_PLUGIN_SOCKET`).
    pub fd: RawFd,
    /// The plugin name the runtime gave us (`NRI_PLUGIN_NAME`), if any.
    pub name: Option<String>,
    /// The plugin index the runtime gave us (`NRI_PLUGIN_IDX`), if any.
    pub idx: Option<String>,
}

/// Failing to reach the runtime.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Connecting to the runtime's socket path failed.
    #[error("cannot connect to NRI socket {}", path.display())]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// Why connecting failed.
        source: std::io::Error,
    },
    /// `NRI_PLUGIN_SOCKET` is set but is not a non-negative number.
    #[error("{ENV_SOCKET}={value:?} is not a file descriptor number")]
    BadFdVar {
        /// The variable's value.
        value: String,
    },
    /// The fd the runtime named is not an open socket, was not claimed at
    /// start, or could not be set up.
    #[error("inherited fd {fd} is not a usable socket: {reason}")]
    BadFd {
        /// The fd number from `NRI_PLUGIN_SOCKET`.
        fd: RawFd,
        /// What is wrong with it.
        reason: String,
    },
    /// The inherited socket (fd given) was already claimed or taken: a
    /// launched plugin has one connection.
    #[error("inherited fd {0} was already used; a launched plugin cannot reconnect")]
    FdUsed(RawFd),
}

/// Reads the launch environment from the given variables (an accessor so tests
/// need not mutate the process environment).
pub fn launch_env(get: impl Fn(&str) -> Option<String>) -> Result<Option<LaunchEnv>, ConnectError> {
    let Some(value) = get(ENV_SOCKET) else { return Ok(None) };
    let fd = value.trim().parse::<RawFd>().map_err(|_| ConnectError::BadFdVar { value: value.clone() })?;
    if fd < 0 {
        return Err(ConnectError::BadFdVar { value });
    }
    Ok(Some(LaunchEnv { fd, name: get(ENV_NAME), idx: get(ENV_IDX) }))
}

/// Connects to a runtime socket path.
pub async fn connect_socket(path: &Path) -> Result<UnixStream, ConnectError> {
    UnixStream::connect(path).await.map_err(|source| ConnectError::Connect { path: path.to_path_buf(), source })
}

/// The runtime's socket once claimed: its fd number, and the fd itself
/// until the supervisor takes it.
static INHERITED: std::sync::Mutex<Option<(RawFd, Option<OwnedFd>)>> = std::sync::Mutex::new(None);

/// Checks that `fd` is an open socket.
fn check_socket(fd: RawFd) -> Result<(), ConnectError> {
    let bad = |reason: String| ConnectError::BadFd { fd, reason };
    // SAFETY: fstat only reads the fd's metadata into a local struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(bad(std::io::Error::last_os_error().to_string()));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(bad("not a socket".into()));
    }
    Ok(())
}

/// Claims the socket a runtime launched us with (named by
/// `NRI_PLUGIN_SOCKET`), if there is one: checks that it is a socket, marks
/// it close-on-exec (a compiling child process must not hold the runtime's
/// connection open), and keeps it until [`take_inherited`] takes it.
///
/// # Safety
///
/// Nothing else in the process may own the fd: call this before anything
/// opens a file (the binary calls it first thing in `main`). It claims at
/// most one fd, once.
pub unsafe fn claim_inherited(get: impl Fn(&str) -> Option<String>) -> Result<Option<LaunchEnv>, ConnectError> {
    let Some(launch) = launch_env(get)? else { return Ok(None) };
    let mut claimed = INHERITED.lock().unwrap_or_else(|p| p.into_inner());
    if claimed.is_some() {
        return Err(ConnectError::FdUsed(launch.fd));
    }
    check_socket(launch.fd)?;
    // SAFETY: the fd is an open socket (checked above) and, by this
    // function's contract, owned by nothing else in the process.
    let owned = unsafe { OwnedFd::from_raw_fd(launch.fd) };
    // SAFETY: fcntl on an fd we own, with valid flags.
    if unsafe { libc::fcntl(launch.fd, libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        let reason = std::io::Error::last_os_error().to_string();
        return Err(ConnectError::BadFd { fd: launch.fd, reason });
    }
    *claimed = Some((launch.fd, Some(owned)));
    Ok(Some(launch))
}

/// Takes the claimed socket `fd`: once per process, and only the one
/// [`claim_inherited`] claimed.
pub fn take_inherited(fd: RawFd) -> Result<UnixStream, ConnectError> {
    let bad = |reason: String| ConnectError::BadFd { fd, reason };
    let owned = match &mut *INHERITED.lock().unwrap_or_else(|p| p.into_inner()) {
        Some((claimed, slot)) if *claimed == fd => slot.take().ok_or(ConnectError::FdUsed(fd))?,
        _ => return Err(bad("it was not claimed at start (see transport::claim_inherited)".into())),
    };
    let std_stream = std::os::unix::net::UnixStream::from(owned);
    std_stream.set_nonblocking(true).map_err(|e| bad(e.to_string()))?;
    UnixStream::from_std(std_stream).map_err(|e| bad(e.to_string()))
}

/// Capped exponential back-off between reconnect attempts.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Starts at `initial` (at least 1 ms) and doubles up to `max` (at least `initial`).
    pub fn new(initial: Duration, max: Duration) -> Self {
        let initial = initial.max(Duration::from_millis(1));
        Self { initial, max: max.max(initial), next: initial }
    }

    /// The delay before the next attempt; doubles up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    /// Back to the initial delay (after a connection that registered).
    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(700));
        let seq: Vec<_> = (0..6).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(seq, [100, 200, 400, 700, 700, 700]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
    }

    #[test]
    fn launch_env_parsing() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        assert_eq!(launch_env(env(&[])).unwrap(), None);
        let got = launch_env(env(&[(ENV_SOCKET, "3"), (ENV_NAME, "wasm"), (ENV_IDX, "10")])).unwrap().unwrap();
        assert_eq!(got, LaunchEnv { fd: 3, name: Some("wasm".into()), idx: Some("10".into()) });
        assert!(matches!(launch_env(env(&[(ENV_SOCKET, "three")])), Err(ConnectError::BadFdVar { .. })));
        assert!(matches!(launch_env(env(&[(ENV_SOCKET, "-1")])), Err(ConnectError::BadFdVar { .. })));
    }

    #[test]
    fn only_sockets_pass_and_nothing_unclaimed_is_taken() {
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        assert!(matches!(check_socket(fd), Err(ConnectError::BadFd { .. })));
        assert!(matches!(check_socket(100_000), Err(ConnectError::BadFd { .. })));
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        check_socket(std::os::fd::AsRawFd::as_raw_fd(&a)).unwrap();
        let e = take_inherited(std::os::fd::AsRawFd::as_raw_fd(&a)).unwrap_err();
        assert!(e.to_string().contains("not claimed"), "{e}");
    }
}
