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
    pub identity: PluginIdentity,
    pub endpoint: Endpoint,
    pub register_timeout: Duration,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
}

/// Why the plugin stopped other than by request.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("runtime connection of launched plugin ended ({0}); exiting so the runtime can restart the plugin")]
    LaunchedSessionEnded(String),
}

/// The running plugin's handles: its status and its link to the runtime.
#[derive(Debug, Clone)]
pub struct PluginHandles {
    pub status: watch::Receiver<Status>,
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
        };
        Self { options, cx }
    }

    /// Keeps `link` pointed at the live connection (a dispatcher that sends
    /// UpdateContainers holds a clone of it).
    pub fn with_link(mut self, link: RuntimeLink) -> Self {
        self.cx.link = link;
        self
    }

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
        let stop = &self.cx.stop;
        loop {
            tracing::info!(socket = %path.display(), plugin = %self.cx.identity, "connecting to the runtime");
            let connected = tokio::select! {
                c = transport::connect_socket(path) => c,
                _ = stop.cancelled() => return,
            };
            match connected {
                Ok(stream) => match session::run_session(stream, &self.cx).await {
                    SessionEnd::Stopped => {
                        tracing::info!("stopped; connection to the runtime closed");
                        return;
                    }
                    SessionEnd::Resubscribe { from, to } => {
                        tracing::info!(%from, %to, "reconnecting to subscribe to the events the policies need");
                        backoff.reset();
                        continue;
                    }
                    end => {
                        let registered = matches!(end, SessionEnd::Lost { registered: true, .. })
                            || matches!(end, SessionEnd::ShutdownRequested);
                        if registered {
                            backoff.reset();
                        }
                        tracing::warn!(reason = %end, "disconnected from the runtime");
                    }
                },
                Err(e) => tracing::warn!(error = %e, "runtime not reachable"),
            }
            let delay = backoff.next_delay();
            tracing::info!(delay_ms = delay.as_millis() as u64, "reconnecting after back-off");
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = stop.cancelled() => return,
            }
        }
    }
}
