//! Keeps the plugin connected for as long as the process runs.
//!
//! A runtime restart looks like the socket closing, and a runtime that drops a
//! plugin never calls it back: an external plugin that does not reconnect is
//! gone until someone restarts it. So in external mode every lost connection
//! is followed by a reconnect with capped exponential back-off and a fresh
//! registration. A launched plugin cannot reconnect (its socket was a gift of
//! the runtime), so it returns and the process exits; the runtime starts it
//! again. Every state change is logged.
//!
//! When the policies need other events, the connection is not closed and
//! opened again: that loses what the runtime sends in between, and the
//! runtime lets such an event go ahead without the plugin. Instead a second
//! connection registers under the same name and index with the new
//! subscription while the first keeps serving; once the runtime sends it an
//! event it takes over and the first is closed (make before break,
//! `handover.rs`), inside a farewell registration's `Synchronize` when the
//! binary asked for farewells, so that the runtime removes it quietly
//! instead of failing a call on it (`farewell.rs`). A second connection that fails leaves the first serving
//! and is tried again after a back-off. A launched plugin cannot open a
//! second connection: it logs that the new subscription waits for its next
//! start.

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::dispatch::Dispatcher;
use super::handover::{ConnId, Handover, Role};
use super::registration::PluginIdentity;
use super::session::{Phase, RuntimeLink, Session, SessionContext, SessionEnd, SessionEvent, Status};
use super::transport::{self, Backoff, ConnectError, Endpoint};
use super::version::{self, EventMask};

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
    dispatcher: Arc<dyn Dispatcher>,
    link: RuntimeLink,
    status: watch::Sender<Status>,
    /// The last connection's number.
    conns: AtomicU64,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor").field("options", &self.options).finish_non_exhaustive()
    }
}

/// A future that resolves as `f` does, or never without one.
async fn maybe<F: Future>(f: Option<F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// Resolves at `at`, or never without one.
async fn until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The longest a connection registered for a new subscription may wait for
/// the runtime's Synchronize, in registration timeouts: the runtime
/// synchronises a plugin once the CRI calls under way are done.
const SYNC_WAIT_FACTOR: u32 = 2;

/// The connections of one stay with the runtime: the one serving, a
/// successor registered for a new subscription, those being closed.
struct Connections {
    handover: Arc<Handover>,
    live: Session,
    next: Option<Session>,
    retiring: JoinSet<(ConnId, SessionEnd)>,
    /// A failed successor is tried again after a back-off, from here.
    retry_at: Option<tokio::time::Instant>,
    backoff: Backoff,
    /// The successor must be synchronised by then, or it is given up.
    sync_by: Option<tokio::time::Instant>,
    /// Launched mode: the subscription last warned about.
    warned: Option<EventMask>,
}

impl Connections {
    /// Closes `session` once what is in flight on it is answered; the
    /// handover forgets it when it is gone.
    fn retire(&mut self, session: Session) {
        session.retire();
        let handover = self.handover.clone();
        self.retiring.spawn(async move {
            let id = session.id();
            let end = session.finished().await;
            handover.closed(id);
            (id, end)
        });
    }
}

/// What happened next, for the supervisor's loop.
enum Step {
    Live(SessionEvent),
    Next(SessionEvent),
    TookOver(Option<ConnId>),
    EventsChanged,
    RetryDue,
    SyncOverdue,
    Retired(ConnId, SessionEnd),
}

impl Supervisor {
    /// A supervisor that sends the runtime's events to `dispatcher` until
    /// `stop` is cancelled.
    pub fn new(options: ConnectOptions, dispatcher: Arc<dyn Dispatcher>, stop: CancellationToken) -> Self {
        let (status, _) = watch::channel(Status::default());
        let cx = SessionContext {
            identity: options.identity.clone(),
            register_timeout: options.register_timeout,
            stop,
            farewell: None,
        };
        Self { options, cx, dispatcher, link: RuntimeLink::default(), status, conns: AtomicU64::new(0) }
    }

    /// Keeps `link` pointed at the live connection (a dispatcher that sends
    /// UpdateContainers holds a clone of it).
    pub fn with_link(mut self, link: RuntimeLink) -> Self {
        self.link = link;
        self
    }

    /// On a requested stop, leave through a farewell registration so that
    /// the runtime drops the plugin before its next event (`farewell.rs`):
    /// what the binary does. External mode only (a launched plugin's socket
    /// is its one connection); without it the connection just closes.
    pub fn with_farewell(mut self) -> Self {
        if let Endpoint::Socket(path) = &self.options.endpoint {
            self.cx.farewell = Some(super::farewell::through(path.clone()));
        }
        self
    }

    /// The status and link of the plugin, for metrics, health and tests.
    pub fn handles(&self) -> PluginHandles {
        PluginHandles { status: self.status.subscribe(), link: self.link.clone() }
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
        self.status.send_modify(|s| s.phase = Phase::Stopped);
        result
    }

    async fn run_launched(&self, fd: std::os::fd::RawFd) -> Result<(), SupervisorError> {
        tracing::info!(plugin = %self.cx.identity, fd, "launched by the runtime; using the inherited socket");
        let stream = transport::take_inherited(fd)?;
        match self.serve(stream, None).await {
            SessionEnd::Stopped => Ok(()),
            end => Err(SupervisorError::LaunchedSessionEnded(end.to_string())),
        }
    }

    async fn run_external(&self, path: &Path) {
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
                    match self.serve(stream, Some(path)).await {
                        SessionEnd::Stopped => {
                            tracing::info!("stopped; connection to the runtime closed");
                            return;
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

    /// Starts a session on `stream` in `role`.
    fn open<S>(&self, handover: &Arc<Handover>, stream: S, role: Role) -> Session
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let id = self.conns.fetch_add(1, Ordering::Relaxed) + 1;
        let dispatcher = handover.open(id, role);
        Session::spawn(stream, &self.cx, id, dispatcher)
    }

    /// Serves the runtime over `stream` and, when the subscription must
    /// change, over the connections that take over from it (only with a
    /// `path` to open them), until no connection is left; how the last one
    /// ended.
    async fn serve<S>(&self, stream: S, path: Option<&Path>) -> SessionEnd
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let handover = Handover::new(self.dispatcher.clone());
        let live = self.open(&handover, stream, Role::Evaluating);
        self.status.send_modify(|s| s.phase = Phase::Registering);
        let mut took_over = handover.took_over();
        let mut seen = self.dispatcher.events_version();
        let mut c = Connections {
            handover,
            live,
            next: None,
            retiring: JoinSet::new(),
            retry_at: None,
            backoff: Backoff::new(self.options.backoff_initial, self.options.backoff_max),
            sync_by: None,
            warned: None,
        };
        let end = loop {
            let step = tokio::select! {
                ev = c.live.next_event() => Step::Live(ev),
                ev = maybe(c.next.as_mut().map(Session::next_event)) => Step::Next(ev),
                _ = took_over.changed() => Step::TookOver(*took_over.borrow_and_update()),
                _ = self.dispatcher.events_changed(seen) => Step::EventsChanged,
                _ = until(c.retry_at) => Step::RetryDue,
                _ = until(c.sync_by) => Step::SyncOverdue,
                Some(Ok((id, end))) = c.retiring.join_next(), if !c.retiring.is_empty() => Step::Retired(id, end),
            };
            match step {
                Step::Live(SessionEvent::Ended(end)) => {
                    c.handover.closed(c.live.id());
                    let stopping = matches!(end, SessionEnd::Stopped);
                    match c.next.take() {
                        Some(next) if !stopping => {
                            // The successor serves alone: it was about to
                            // take over anyway.
                            tracing::info!(
                                reason = %end,
                                conn = next.id(),
                                "the connection that served ended; the one registered for the new subscription serves alone"
                            );
                            c.handover.promote(next.id());
                            self.link.set(next.link());
                            let phase = if next.registered() { Phase::Registered } else { Phase::Registering };
                            self.status.send_modify(|s| s.phase = phase);
                            c.live = next;
                            c.sync_by = None;
                        }
                        next => {
                            if let Some(next) = next {
                                c.retire(next);
                            }
                            if let SessionEnd::NotRegistered(_) = &end {
                                self.status.send_modify(|s| s.registration_failures += 1);
                            }
                            break end;
                        }
                    }
                }
                Step::Live(SessionEvent::Registered(link)) => {
                    self.link.set(Some(link));
                    self.status.send_modify(|s| {
                        s.phase = Phase::Registered;
                        s.registrations += 1;
                    });
                }
                Step::Live(_) => {}
                Step::Next(SessionEvent::Registered(_)) => {
                    self.status.send_modify(|s| s.registrations += 1);
                    let wait = self.options.register_timeout * SYNC_WAIT_FACTOR;
                    c.sync_by = Some(tokio::time::Instant::now() + wait);
                    tracing::info!(
                        conn = c.next.as_ref().map_or(0, Session::id),
                        "registered a second connection for the new subscription; the first serves until it takes over"
                    );
                }
                Step::Next(SessionEvent::Synchronized) => {
                    c.sync_by = None;
                    // UpdateContainers go over the newest connection.
                    if let Some(next) = &c.next {
                        self.link.set(next.link());
                    }
                }
                Step::Next(SessionEvent::Configured(..)) => {}
                Step::Next(SessionEvent::Ended(end)) => {
                    let Some(next) = c.next.take() else { continue };
                    c.handover.closed(next.id());
                    c.sync_by = None;
                    self.link.set(c.live.link());
                    if let SessionEnd::NotRegistered(_) = &end {
                        self.status.send_modify(|s| s.registration_failures += 1);
                    }
                    if !matches!(end, SessionEnd::Stopped) {
                        self.successor_failed(&mut c, &end.to_string());
                    }
                }
                Step::TookOver(id) => {
                    if id.is_some() && id == c.next.as_ref().map(Session::id) {
                        let next = c.next.take().expect("checked above");
                        self.link.set(next.link());
                        let old = std::mem::replace(&mut c.live, next);
                        tracing::info!(
                            from = old.configured().map_or(EventMask::EMPTY, |(_, m, _)| m).to_string(),
                            to = c.live.configured().map_or(EventMask::EMPTY, |(_, m, _)| m).to_string(),
                            conn = c.live.id(),
                            "the connection with the new subscription took over; closing the previous one"
                        );
                        c.retire(old);
                        c.backoff.reset();
                        c.retry_at = None;
                        c.sync_by = None;
                        self.status.send_modify(|s| s.handovers += 1);
                    }
                }
                Step::EventsChanged => seen = self.dispatcher.events_version(),
                Step::RetryDue => c.retry_at = None,
                Step::SyncOverdue => {
                    c.sync_by = None;
                    if let Some(next) = c.next.take_if(|n| !n.synchronized()) {
                        if c.handover.abandon(next.id()) {
                            c.retire(next);
                            self.successor_failed(&mut c, "the runtime did not synchronise it in time");
                        } else {
                            c.next = Some(next);
                        }
                    }
                }
                Step::Retired(id, end) => tracing::debug!(conn = id, %end, "a retired connection is closed"),
            }
            self.reconcile(&mut c, path).await;
            self.publish_subscription(&c);
        };
        if let Some(next) = c.next.take() {
            c.retire(next);
        }
        // Retired connections close within their bounds (answer budget, a
        // second for the server); a stop ends them at once.
        let _ = tokio::time::timeout(Duration::from_secs(5), async { while c.retiring.join_next().await.is_some() {} })
            .await;
        self.link.set(None);
        self.dispatcher.disconnected().await;
        self.status.send_modify(|s| s.phase = Phase::Disconnected);
        end
    }

    /// Says in the status what the serving connection subscribed to, when
    /// that changed (a configure, a takeover, a promotion).
    fn publish_subscription(&self, c: &Connections) {
        let mask = c.live.configured().map_or(EventMask::EMPTY, |(_, m, _)| m);
        self.status.send_if_modified(|s| {
            let changed = s.subscribed != mask;
            s.subscribed = mask;
            changed
        });
    }

    /// A successor failed or was given up: the live connection keeps
    /// serving, and another is tried after the back-off.
    fn successor_failed(&self, c: &mut Connections, reason: &str) {
        let delay = c.backoff.next_delay();
        c.retry_at = Some(tokio::time::Instant::now() + delay);
        tracing::warn!(
            reason,
            retry_in_ms = delay.as_millis() as u64,
            "the connection for the policies' new subscription failed; the current one keeps serving with the old subscription"
        );
    }

    /// Opens a successor when the live connection's subscription is not
    /// what the dispatcher wants, and gives up one registered for a
    /// subscription no longer wanted.
    async fn reconcile(&self, c: &mut Connections, path: Option<&Path>) {
        let Some((nri_version, subscribed, _)) = c.live.configured() else { return };
        if !c.live.synchronized() {
            return;
        }
        let wanted = version::subscription(self.dispatcher.events(), nri_version);
        let Some(path) = path else {
            if wanted != subscribed && c.warned != Some(wanted) {
                tracing::warn!(
                    %subscribed,
                    %wanted,
                    "the policies need a different subscription, which a plugin launched by the runtime gets only when it is started again"
                );
                c.warned = Some(wanted);
            }
            return;
        };
        if let Some(next) = &c.next {
            let stale = wanted == subscribed || next.configured().is_some_and(|(_, m, _)| m != wanted);
            if stale && c.handover.abandon(next.id()) {
                let next = c.next.take().expect("checked above");
                tracing::info!(
                    conn = next.id(),
                    "giving up the connection registered for a subscription no longer wanted"
                );
                c.sync_by = None;
                self.link.set(c.live.link());
                c.retire(next);
            }
        }
        if c.next.is_some() || wanted == subscribed || c.retry_at.is_some() {
            return;
        }
        match transport::connect_socket(path).await {
            Ok(stream) => {
                let next = self.open(&c.handover, stream, Role::Successor);
                tracing::info!(
                    from = %subscribed,
                    to = %wanted,
                    conn = next.id(),
                    "the policies need a different subscription: registering a second connection with it"
                );
                c.next = Some(next);
            }
            Err(e) => self.successor_failed(c, &crate::text::chain(&e)),
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
