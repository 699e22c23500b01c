//! One connection to the runtime, from the first frame to the last.
//!
//! Order matters: conn 1 is served *before* RegisterPlugin goes out on conn 2,
//! because a runtime may call Configure before it answers the registration.
//! A session runs in a task of its own and reports how far it got
//! (registered, configured, synchronised) to the supervisor, which decides
//! what the connection is for: the only one, a successor registered for a
//! new subscription, or one being retired (`handover.rs`). The session ends
//! when the socket ends, when the runtime calls Shutdown, when we are told to
//! stop, or when the supervisor retires it; in every case both ttrpc sides
//! are torn down. What the end means for the dispatcher, the runtime link
//! and the status is the supervisor's business: another connection may
//! still serve.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use nri_wasm_api::api as pb;
use nri_wasm_api::services::RuntimeClient;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use ttrpc::r#async::transport::{Listener, Socket};

use super::dispatch::Dispatcher;
use super::handover::ConnId;
use super::mux::{self, AnswerClock, MuxEnd};
use super::registration::{self, PluginIdentity, RegistrationError};
use super::service::{PluginService, SessionState};
use super::version::{EventMask, NriVersion};

/// Log target of the line traced for every answer with its times
/// (`--log info,nri_wasm::answer=trace`).
pub const ANSWER_LOG: &str = "nri_wasm::answer";

/// Where the plugin stands with the runtime (observable for logs and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    /// Where the current connection stands.
    pub phase: Phase,
    /// Successful registrations since start (1 + reconnects, including the
    /// connections registered for a new subscription).
    pub registrations: u64,
    /// Connections on which the registration failed (refused, or the
    /// connection closed or timed out before the runtime answered)
    /// (each is followed by another attempt: a reconnect too).
    pub registration_failures: u64,
    /// Subscription changes completed by a second connection taking over
    /// from the first (make before break).
    pub handovers: u64,
    /// The events the connection serving the runtime subscribed to (empty
    /// before it is configured): not what the policies want, which a
    /// successor may still be registering for, or may have given up.
    pub subscribed: EventMask,
}

/// The phase of the connection to the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    /// Not connected (yet, or any more).
    #[default]
    Disconnected,
    /// Socket open, registration under way.
    Registering,
    /// Registered and serving events.
    Registered,
    /// Stopped for good.
    Stopped,
}

/// How a session ended.
#[derive(Debug, Clone)]
pub enum SessionEnd {
    /// We were asked to stop (signal).
    Stopped,
    /// The runtime called Shutdown.
    ShutdownRequested,
    /// The socket ended or failed.
    Lost {
        /// Whether the plugin had registered on this connection.
        registered: bool,
        /// How the socket ended.
        why: MuxEnd,
    },
    /// The runtime did not accept the registration.
    NotRegistered(RegistrationError),
    /// The Plugin service could not be started on conn 1.
    ServeFailed(String),
    /// The supervisor closed it: another connection took over, or a
    /// successor was given up.
    Retired,
}

impl std::fmt::Display for SessionEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Stopped => f.write_str("stopped"),
            Self::ShutdownRequested => f.write_str("runtime requested shutdown"),
            Self::Lost { why, .. } => write!(f, "connection {why}"),
            Self::NotRegistered(e) => write!(f, "{e}"),
            Self::ServeFailed(e) => write!(f, "cannot serve the Plugin service: {e}"),
            Self::Retired => f.write_str("retired"),
        }
    }
}

/// Failing to reach the runtime service.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LinkError {
    /// No registered connection to the runtime at the moment.
    #[error("not connected to the runtime")]
    NotConnected,
    /// The UpdateContainers call failed (the ttrpc error's text).
    #[error("UpdateContainers failed: {0}")]
    Rpc(String),
}

/// The Runtime service of one registered connection, with the calls on it
/// still under way (a connection being retired waits for them).
pub struct LinkConn {
    client: RuntimeClient,
    in_flight: AtomicUsize,
    idle: Notify,
}

impl std::fmt::Debug for LinkConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkConn").field("in_flight", &self.in_flight).finish_non_exhaustive()
    }
}

impl LinkConn {
    fn new(client: RuntimeClient) -> Arc<Self> {
        Arc::new(Self { client, in_flight: AtomicUsize::new(0), idle: Notify::new() })
    }

    /// Resolves once no call is under way on it.
    async fn idle(&self) {
        loop {
            let idle = self.idle.notified();
            if self.in_flight.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// Counts a call on a [`LinkConn`] as finished however it ends.
struct InFlight<'a>(&'a LinkConn);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// A handle for calling the runtime outside of an event (`UpdateContainers`),
/// valid across reconnects: it always uses the connection the supervisor
/// points it at (the newest one the runtime has synchronised).
#[derive(Clone, Default)]
pub struct RuntimeLink {
    current: Arc<RwLock<Option<Arc<LinkConn>>>>,
}

impl std::fmt::Debug for RuntimeLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeLink").field("connected", &self.is_connected()).finish()
    }
}

impl RuntimeLink {
    pub(crate) fn set(&self, conn: Option<Arc<LinkConn>>) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = conn;
    }

    /// Whether a registered connection is there to call.
    pub fn is_connected(&self) -> bool {
        self.current.read().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Asks the runtime to update (and evict) containers; returns the updates
    /// the runtime reports as failed.
    pub async fn update_containers(
        &self,
        update: Vec<pb::ContainerUpdate>,
        evict: Vec<pb::ContainerEviction>,
        timeout: Duration,
    ) -> Result<Vec<pb::ContainerUpdate>, LinkError> {
        let conn = self.current.read().unwrap_or_else(|p| p.into_inner()).clone().ok_or(LinkError::NotConnected)?;
        conn.in_flight.fetch_add(1, Ordering::SeqCst);
        let _in_flight = InFlight(&conn);
        let req = pb::UpdateContainersRequest { update, evict, ..Default::default() };
        let ctx = ttrpc::context::with_timeout(timeout.as_nanos() as i64);
        conn.client.update_containers(ctx, &req).await.map(|r| r.failed).map_err(|e| LinkError::Rpc(e.to_string()))
    }
}

/// Why a connection leaves: what its log lines say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leaving {
    /// The host was asked to stop: the plugin leaves the runtime.
    Stop,
    /// A connection retired after its successor took over.
    Retired {
        /// The retired connection's number (`supervisor.rs`).
        conn: u64,
    },
}

/// How a stopped or retired session leaves the runtime instead of just
/// closing its connection: given the connection, the plugin's identity,
/// the registration timeout and why, it closes the connection and says
/// whether it left as planned. The supervisor injects it (`farewell.rs`
/// leaves through a farewell registration, which runs a session of its
/// own), so that a session names no farewell and the two do not import
/// each other.
#[derive(Clone)]
pub struct Farewell(Arc<FarewellFn>);

/// The function a [`Farewell`] runs.
type FarewellFn =
    dyn for<'a> Fn(&'a mux::MuxHandle, &'a PluginIdentity, Duration, Leaving) -> LeaveFuture<'a> + Send + Sync;

/// A farewell under way: whether the connection left as planned.
pub type LeaveFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>>;

impl Farewell {
    /// A farewell that runs `leave`.
    pub fn new(
        leave: impl for<'a> Fn(&'a mux::MuxHandle, &'a PluginIdentity, Duration, Leaving) -> LeaveFuture<'a>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        Self(Arc::new(leave))
    }
}

impl std::fmt::Debug for Farewell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Farewell")
    }
}

/// What every session of a plugin needs besides its socket.
#[derive(Debug, Clone)]
pub struct SessionContext {
    /// The name and index to register with.
    pub identity: PluginIdentity,
    /// How long the runtime has to answer RegisterPlugin.
    pub register_timeout: Duration,
    /// Cancelled to end every session (a signal): each closes cleanly.
    pub stop: CancellationToken,
    /// How to leave when stopped or retired (a farewell registration on
    /// the runtime's socket, `farewell.rs`); `None` closes the connection
    /// directly.
    pub farewell: Option<Farewell>,
}

/// How far the registration of a session got.
#[derive(Debug, Clone)]
enum Registration {
    Pending,
    Registered(Arc<LinkConn>),
    Failed,
}

/// What a session reports to the supervisor, each once and in this order
/// where they happen (Configure may come before the registration's answer).
#[derive(Debug)]
pub enum SessionEvent {
    /// The runtime accepted the registration; its Runtime service.
    Registered(Arc<LinkConn>),
    /// Configure was answered: the runtime's NRI version, the events
    /// subscribed to, and the dispatcher's events version they were
    /// computed at.
    Configured(NriVersion, EventMask, u64),
    /// A Synchronize was answered in full: the runtime adds the plugin to
    /// the plugins it calls now (it may still run an event or two without
    /// it).
    Synchronized,
    /// The session is over.
    Ended(SessionEnd),
}

/// A running session: its task, and what it has reported so far.
#[derive(Debug)]
pub struct Session {
    id: ConnId,
    state: Arc<SessionState>,
    registration: watch::Receiver<Registration>,
    retire: CancellationToken,
    task: JoinHandle<SessionEnd>,
    link: Option<Arc<LinkConn>>,
    configured: Option<(NriVersion, EventMask, u64)>,
    seen_registration: bool,
    seen_configured: bool,
    seen_synchronized: bool,
    ended: bool,
}

impl Session {
    /// Starts serving `socket` as connection `id`, its events going to
    /// `dispatcher` (the connection's own, from the handover).
    pub fn spawn<S>(socket: S, cx: &SessionContext, id: ConnId, dispatcher: Arc<dyn Dispatcher>) -> Self
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let answers = dispatcher.clone();
        let clock = Arc::new(AnswerClock::new(move |answer| {
            tracing::trace!(
                target: ANSWER_LOG,
                event = answer.event.unwrap_or(""),
                stream = answer.stream,
                total_us = answer.total.as_secs_f64() * 1e6,
                handler_us = answer.handler.map_or(0.0, |h| h.as_secs_f64() * 1e6),
                "answered"
            );
            answers.answered(&answer);
        }));
        let conns = mux::multiplex(socket, clock.clone());
        let state = Arc::new(SessionState::new(clock));
        let (registration_tx, registration) = watch::channel(Registration::Pending);
        let retire = CancellationToken::new();
        let run = Run {
            cx: cx.clone(),
            id,
            dispatcher,
            state: state.clone(),
            registration: registration_tx,
            retire: retire.clone(),
        };
        let task = tokio::spawn(run.run(conns));
        Self {
            id,
            state,
            registration,
            retire,
            task,
            link: None,
            configured: None,
            seen_registration: false,
            seen_configured: false,
            seen_synchronized: false,
            ended: false,
        }
    }

    /// The connection's number.
    pub fn id(&self) -> ConnId {
        self.id
    }

    /// Its Runtime service, once registered.
    pub fn link(&self) -> Option<Arc<LinkConn>> {
        self.link.clone()
    }

    /// What Configure settled, once answered.
    pub fn configured(&self) -> Option<(NriVersion, EventMask, u64)> {
        self.configured
    }

    /// Whether the runtime has synchronised this connection.
    pub fn synchronized(&self) -> bool {
        self.seen_synchronized
    }

    /// Whether the runtime accepted the registration.
    pub fn registered(&self) -> bool {
        self.link.is_some()
    }

    /// Closes the connection once what is in flight on it is answered
    /// (bounded); it ends as [`SessionEnd::Retired`].
    pub fn retire(&self) {
        self.retire.cancel();
    }

    /// The next thing the session reports; after [`SessionEvent::Ended`],
    /// never resolves again.
    pub async fn next_event(&mut self) -> SessionEvent {
        tokio::select! {
            biased;
            registration = settled(&mut self.registration), if !self.seen_registration => {
                self.seen_registration = true;
                match registration {
                    Registration::Registered(link) => {
                        self.link = Some(link.clone());
                        SessionEvent::Registered(link)
                    }
                    // A failed registration ends the session: say so then.
                    _ => join(&mut self.task, &mut self.ended).await,
                }
            }
            c = self.state.configured(), if !self.seen_configured => {
                self.seen_configured = true;
                self.configured = Some(c);
                SessionEvent::Configured(c.0, c.1, c.2)
            }
            _ = self.state.synchronized(), if !self.seen_synchronized => {
                self.seen_synchronized = true;
                SessionEvent::Synchronized
            }
            end = join(&mut self.task, &mut self.ended) => end,
        }
    }

    /// Waits for the session to end (after [`Self::retire`], or a stop).
    pub async fn finished(mut self) -> SessionEnd {
        loop {
            if let SessionEvent::Ended(end) = self.next_event().await {
                return end;
            }
        }
    }
}

/// The registration once it is settled.
async fn settled(registration: &mut watch::Receiver<Registration>) -> Registration {
    match registration.wait_for(|r| !matches!(r, Registration::Pending)).await {
        Ok(r) => r.clone(),
        Err(_) => Registration::Failed,
    }
}

/// The session's end, once (then never again).
async fn join(task: &mut JoinHandle<SessionEnd>, ended: &mut bool) -> SessionEvent {
    if *ended {
        return std::future::pending().await;
    }
    let end = task.await.unwrap_or_else(|e| SessionEnd::ServeFailed(format!("session task: {e}")));
    *ended = true;
    SessionEvent::Ended(end)
}

/// The session's own task.
struct Run {
    cx: SessionContext,
    id: ConnId,
    dispatcher: Arc<dyn Dispatcher>,
    state: Arc<SessionState>,
    registration: watch::Sender<Registration>,
    retire: CancellationToken,
}

impl Run {
    async fn run(self, conns: mux::MuxConns) -> SessionEnd {
        let handle = conns.handle.clone();
        // Serve conn 1 first.
        let plugin_conn = futures::stream::once(async move { Ok(conns.plugin) }).chain(futures::stream::pending());
        let mut server = ttrpc::r#async::Server::new()
            .add_listener(Listener::new(plugin_conn))
            .register_service(PluginService::new(self.dispatcher.clone(), self.state.clone()).into_services());
        if let Err(e) = server.start().await {
            handle.close();
            self.registration.send_replace(Registration::Failed);
            return SessionEnd::ServeFailed(e.to_string());
        }

        let client = RuntimeClient::new(ttrpc::r#async::Client::new(Socket::new(conns.runtime)));
        let cx = &self.cx;
        let registered = tokio::select! {
            r = registration::register(&client, &cx.identity, cx.register_timeout) => r,
            why = handle.ended() => Err(RegistrationError { plugin: cx.identity.to_string(), reason: format!("connection {why}") }),
            _ = cx.stop.cancelled() => {
                self.registration.send_replace(Registration::Failed);
                finish(&mut server, &handle).await;
                return SessionEnd::Stopped;
            }
            _ = self.retire.cancelled() => {
                self.registration.send_replace(Registration::Failed);
                finish(&mut server, &handle).await;
                return SessionEnd::Retired;
            }
        };
        if let Err(e) = registered {
            self.registration.send_replace(Registration::Failed);
            finish(&mut server, &handle).await;
            return SessionEnd::NotRegistered(e);
        }
        let link = LinkConn::new(client);
        self.registration.send_replace(Registration::Registered(link.clone()));
        tracing::info!(plugin = %cx.identity, conn = self.id, "registered with the runtime");

        let end = tokio::select! {
            why = handle.ended() => SessionEnd::Lost { registered: true, why },
            _ = self.state.shutdown_requested() => SessionEnd::ShutdownRequested,
            _ = cx.stop.cancelled() => SessionEnd::Stopped,
            _ = self.retire.cancelled() => SessionEnd::Retired,
        };
        if matches!(end, SessionEnd::Retired) {
            self.quiesce(&link, &handle).await;
        }
        let leaving = match end {
            SessionEnd::Stopped => Some(Leaving::Stop),
            SessionEnd::Retired => Some(Leaving::Retired { conn: self.id }),
            _ => None,
        };
        if let (Some(why), Some(farewell)) = (leaving, &cx.farewell) {
            // Serving on meanwhile (a retired one as a plugin that changes
            // nothing): the connection closes inside the farewell's
            // Synchronize, and the runtime removes it before its next event.
            (farewell.0)(&handle, &cx.identity, cx.register_timeout, why).await;
        }
        finish(&mut server, &handle).await;
        end
    }

    /// Before a retired connection closes: no dispatcher call under way on
    /// it (a shadow answers at once, unless it answers for an evaluation the
    /// runtime gave up on the other connection) and no UpdateContainers
    /// still out on it. Bounded by the answer budget and the request
    /// timeout: whatever it still had to say, it said as a plugin that
    /// changes nothing, so losing it loses nothing.
    async fn quiesce(&self, link: &LinkConn, handle: &mux::MuxHandle) {
        let limit = self.state.budget() + QUIESCE_MARGIN;
        let quiet = async {
            self.state.calls_finished().await;
            link.idle().await;
        };
        tokio::select! {
            r = tokio::time::timeout(limit, quiet) => {
                if r.is_err() {
                    tracing::debug!(conn = self.id, waited_ms = limit.as_millis() as u64, "closing a retired connection with a call still under way");
                }
            }
            _ = handle.ended() => {}
        }
    }
}

/// What a retired connection waits past the answer budget for what is in
/// flight on it.
const QUIESCE_MARGIN: Duration = Duration::from_millis(500);

async fn finish(server: &mut ttrpc::r#async::Server, handle: &mux::MuxHandle) {
    handle.close();
    let _ = tokio::time::timeout(Duration::from_secs(1), server.shutdown()).await;
}
