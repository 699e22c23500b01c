//! Keeps the plugin connected for as long as the process runs.
//!
//! A runtime restart looks like the socket closing, and a runtime that drops a
//! plugin never calls it back: an external plugin that does not reconnect is
//! gone until someone restarts it. So in external mode every lost connection
//! is followed by a reconnect with capped exponential back-off and a fresh
//! registration. A launched plugin cannot reconnect (its socket was a gift of
//! the runtime), so it returns and the process exits; the runtime starts it
//! again. Every state change is logged.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::dispatch::Dispatcher;
use super::registration::PluginIdentity;
use super::session::{self, Phase, RuntimeLink, SessionContext, SessionEnd, Status};
use super::transport::{self, Backoff, ConnectError, Endpoint};

/// How to reach and stay with the runtime.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// The name and index to register with.
    pub identity: PluginIdentity,
    /// The socket path to connect to, or the socket the runtime launched us with.
    pub endpoint: Endpoint,
    /// How long the runtime has to answer RegisterPlugin.
    pub register_timeout: Duration,
    /// The first delay before reconnecting (external mode).
    pub backoff_initial: Duration,
    /// The longest delay between reconnect attempts.
    pub backoff_max: Duration,
}

/// Why the plugin stopped other than by request.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    /// The inherited socket cannot be used (launched mode).
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The one connection of a launched plugin ended (how, given).
    #[error("runtime connection of launched plugin ended ({0}); exiting so the runtime can restart the plugin")]
    LaunchedSessionEnded(String),
}

/// The running plugin's handles: its status and its link to the runtime.
#[derive(Debug, Clone)]
pub struct PluginHandles {
    /// The connection's phase and registration counts, as they change.
    pub status: watch::Receiver<Status>,
    /// Calls the runtime over the current connection.
    pub link: RuntimeLink,
}

/// Connects, registers and serves until `stop` is cancelled (external mode),
/// or until the one inherited connection ends (launched mode).
pub struct Supervisor {
    options: ConnectOptions,
    cx: SessionContext,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor").field("options", &self.options).finish_non_exhaustive()
    }
}

impl Supervisor {
    /// A supervisor that sends the runtime's events to `dispatcher` until
    /// `stop` is cancelled.
    pub fn new(options: ConnectOptions, dispatcher: Arc<dyn Dispatcher>, stop: CancellationToken) -> Self {
        let (status, _) = watch::channel(Status::default());
        let cx = SessionContext {
            identity: options.identity.clone(),
            dispatcher,
            link: RuntimeLink::default(),
            status,
            register_timeout: options.register_timeout,
            stop,
            can_resubscribe: !matches!(options.endpoint, Endpoint::Inherited(_)),
            farewell: None,
        };
        Self { options, cx }
    }

    /// Keeps `link` pointed at the live connection (a dispatcher that sends
    /// UpdateContainers holds a clone of it).
    pub fn with_link(mut self, link: RuntimeLink) -> Self {
        self.cx.link = link;
        self
    }

    /// On a requested stop, leave through a farewell registration so that
    /// the runtime drops the plugin before its next event (`farewell.rs`):
    /// what the binary does. External mode only (a launched plugin's socket
    /// is its one connection); without it the connection just closes.
    pub fn with_farewell(mut self) -> Self {
        if let Endpoint::Socket(path) = &self.options.endpoint {
            self.cx.farewell = Some(path.clone());
        }
        self
    }

    /// The status and link of the plugin, for metrics, health and tests.
    pub fn handles(&self) -> PluginHandles {
        PluginHandles { status: self.cx.status.subscribe(), link: self.cx.link.clone() }
    }

    /// Runs to the end. `Ok` means we were asked to stop.
    pub async fn run(self) -> Result<(), SupervisorError> {
        let result = match self.options.endpoint.clone() {
            Endpoint::Inherited(fd) => self.run_launched(fd).await,
            Endpoint::Socket(path) => {
                self.run_external(&path).await;
                Ok(())
            }
        };
        self.cx.status.send_modify(|s| s.phase = Phase::Stopped);
        result
    }

    async fn run_launched(&self, fd: std::os::fd::RawFd) -> Result<(), SupervisorError> {
        tracing::info!(plugin = %self.cx.identity, fd, "launched by the runtime; using the inherited socket");
        let stream = transport::take_inherited(fd)?;
        match session::run_session(stream, &self.cx).await {
            SessionEnd::Stopped => Ok(()),
            end => Err(SupervisorError::LaunchedSessionEnded(end.to_string())),
        }
    }

    async fn run_external(&self, path: &std::path::Path) {
        let mut backoff = Backoff::new(self.options.backoff_initial, self.options.backoff_max);
        let mut socket = SocketWatch::new(path);
        let mut failures = Failures::new(Trouble::Unreachable);
        let mut refusals = Failures::new(Trouble::Refused);
        let mut quick = 0u32;
        let stop = &self.cx.stop;
        tracing::info!(socket = %path.display(), plugin = %self.cx.identity, "connecting to the runtime");
        loop {
            let connected = tokio::select! {
                c = transport::connect_socket(path) => c,
                _ = stop.cancelled() => return,
            };
            match connected {
                Ok(stream) => {
                    failures.ended();
                    match session::run_session(stream, &self.cx).await {
                        SessionEnd::Stopped => {
                            tracing::info!("stopped; connection to the runtime closed");
                            return;
                        }
                        SessionEnd::Resubscribe { from, to } => {
                            refusals.ended();
                            tracing::info!(%from, %to, "reconnecting to subscribe to the events the policies need");
                            backoff.reset();
                            continue;
                        }
                        // Refused again and again (another plugin holds
                        // the name, say): one warning, then summaries.
                        SessionEnd::NotRegistered(e) => refusals.failed(&e.to_string()),
                        end => {
                            let registered = matches!(end, SessionEnd::Lost { registered: true, .. })
                                || matches!(end, SessionEnd::ShutdownRequested);
                            if registered {
                                refusals.ended();
                                backoff.reset();
                            }
                            tracing::warn!(reason = %end, "disconnected from the runtime; reconnecting");
                        }
                    }
                }
                Err(e) => failures.failed(&crate::text::chain(&e)),
            }
            let delay = match quick.checked_sub(1) {
                Some(left) => {
                    quick = left;
                    QUICK_RETRY
                }
                None => backoff.next_delay(),
            };
            tracing::debug!(delay_ms = delay.as_millis() as u64, "waiting before the next attempt, or for the socket");
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = socket.appeared() => {
                    tracing::debug!(socket = %path.display(), "the runtime's socket was created");
                    // A socket is bound before it listens, and a runtime
                    // may create it before it serves: a few quick attempts
                    // first, then the back-off from its start.
                    backoff.reset();
                    quick = QUICK_RETRIES;
                }
                _ = stop.cancelled() => return,
            }
        }
    }
}

/// Attempts at a short interval after the runtime's socket appears (two
/// seconds in all), before the back-off takes over again.
const QUICK_RETRIES: u32 = 40;
const QUICK_RETRY: Duration = Duration::from_millis(50);

/// What keeps failing: reaching the runtime at all, or registering once
/// connected.
#[derive(Debug, Clone, Copy)]
enum Trouble {
    Unreachable,
    Refused,
}

/// Failed attempts (to reach the runtime, or to register with it), logged
/// once with a count instead of a warning per attempt: the first failure,
/// then a summary every few minutes or when the reason changes, then how
/// long it took on success.
#[derive(Debug)]
struct Failures {
    trouble: Trouble,
    count: u64,
    since: Option<std::time::Instant>,
    reported: Option<std::time::Instant>,
    last: String,
}

/// How often a runtime that stays unreachable is mentioned again.
const FAILURE_SUMMARY_EVERY: Duration = Duration::from_secs(300);

impl Failures {
    fn new(trouble: Trouble) -> Self {
        Self { trouble, count: 0, since: None, reported: None, last: String::new() }
    }

    fn failed(&mut self, reason: &str) {
        let now = std::time::Instant::now();
        self.count += 1;
        let since = *self.since.get_or_insert(now);
        let due = self.reported.is_none_or(|r| now.duration_since(r) >= FAILURE_SUMMARY_EVERY);
        if self.count == 1 || reason != self.last || due {
            let waited_s = now.duration_since(since).as_secs();
            match (self.trouble, self.count) {
                (Trouble::Unreachable, 1) => {
                    tracing::warn!(error = %reason, "runtime not reachable; retrying, and connecting as soon as its socket appears")
                }
                (Trouble::Unreachable, n) => {
                    tracing::warn!(error = %reason, attempts = n, waited_s, "runtime still not reachable")
                }
                (Trouble::Refused, 1) => {
                    tracing::warn!(error = %reason, "registration with the runtime failed; retrying")
                }
                (Trouble::Refused, n) => {
                    tracing::warn!(error = %reason, attempts = n, waited_s, "registration with the runtime still fails")
                }
            }
            self.reported = Some(now);
        } else {
            tracing::debug!(error = %reason, attempts = self.count, trouble = ?self.trouble, "attempt failed");
        }
        self.last = reason.to_string();
    }

    /// The attempt went through. A runtime reachable again is worth a line
    /// (how long it took); a registration accepted at last is logged by
    /// the session when it happens, so this only starts the count anew.
    fn ended(&mut self) {
        if let (Some(since), Trouble::Unreachable) = (self.since.take(), self.trouble) {
            tracing::info!(
                failed_attempts = self.count,
                waited_ms = since.elapsed().as_millis() as u64,
                "runtime reachable again"
            );
        }
        *self = Self::new(self.trouble);
    }
}

/// Waits for the runtime's socket to be created (or replaced) in its
/// directory. Where the directory itself does not exist (yet), it looks
/// again once a second.
#[derive(Debug)]
struct SocketWatch {
    dir: Option<std::path::PathBuf>,
    name: Option<std::ffi::OsString>,
    watch: Option<crate::watch::DirWatch>,
}

impl SocketWatch {
    fn new(path: &std::path::Path) -> Self {
        Self {
            dir: path.parent().map(|d| d.to_path_buf()),
            name: path.file_name().map(|n| n.to_os_string()),
            watch: None,
        }
    }

    /// Resolves when the socket may have appeared.
    async fn appeared(&mut self) {
        let Some(dir) = self.dir.clone() else { return std::future::pending().await };
        loop {
            if self.watch.as_ref().is_none_or(|w| w.is_gone()) {
                match crate::watch::DirWatch::new(&dir) {
                    Ok(w) => self.watch = Some(w),
                    Err(_) => {
                        // No directory to watch: look again in a second, and
                        // tell the caller to try once it is there.
                        loop {
                            tokio::time::sleep(Duration::from_secs(1)).await;
                            if dir.is_dir() {
                                return;
                            }
                        }
                    }
                }
            }
            let watch = self.watch.as_mut().expect("set above");
            match watch.changed().await {
                Ok(names) if names.iter().any(|n| Some(n) == self.name.as_ref()) => return,
                Ok(_) if watch.is_gone() => continue,
                Ok(_) => continue,
                Err(_) => {
                    self.watch = None;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    return;
                }
            }
        }
    }
}
