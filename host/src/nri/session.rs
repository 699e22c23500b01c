//! One connection to the runtime, from the first frame to the last.
//!
//! Order matters: conn 1 is served *before* RegisterPlugin goes out on conn 2,
//! because a runtime may call Configure before it answers the registration.
//! The session ends when the socket ends, when the runtime calls Shutdown, or
//! when we are told to stop; in every case both ttrpc sides are torn down and
//! the dispatcher is told, so the next session starts clean.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use nri_wasm_api::api as pb;
use nri_wasm_api::services::RuntimeClient;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use ttrpc::r#async::transport::{Listener, Socket};

use super::dispatch::Dispatcher;
use super::mux::{self, AnswerClock, MuxEnd};
use super::registration::{self, PluginIdentity, RegistrationError};
use super::service::{PluginService, SessionState};
use super::version::{self, EventMask};

/// Log target of the line traced for every answer with its times
/// (`--log info,nri_wasm::answer=trace`).
pub const ANSWER_LOG: &str = "nri_wasm::answer";

/// Where the plugin stands with the runtime (observable for logs and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    /// Where the current connection stands.
    pub phase: Phase,
    /// Successful registrations since start (1 + reconnects).
    pub registrations: u64,
    /// Connections on which the registration failed (refused, or the
    /// connection closed or timed out before the runtime answered)
    /// (each is followed by another attempt: a reconnect too).
    pub registration_failures: u64,
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
    /// The events the dispatcher wants changed: reconnect to subscribe anew.
    Resubscribe {
        /// The events subscribed to on this connection.
        from: EventMask,
        /// The events the dispatcher wants now.
        to: EventMask,
    },
}

impl std::fmt::Display for SessionEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Stopped => f.write_str("stopped"),
            Self::ShutdownRequested => f.write_str("runtime requested shutdown"),
            Self::Lost { why, .. } => write!(f, "connection {why}"),
            Self::NotRegistered(e) => write!(f, "{e}"),
            Self::ServeFailed(e) => write!(f, "cannot serve the Plugin service: {e}"),
            Self::Resubscribe { from, to } => write!(f, "the subscription changes from {from} to {to}"),
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

/// A handle for calling the runtime outside of an event (`UpdateContainers`),
/// valid across reconnects: it always uses the current connection.
#[derive(Clone, Default)]
pub struct RuntimeLink {
    client: Arc<RwLock<Option<RuntimeClient>>>,
}

impl std::fmt::Debug for RuntimeLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeLink").field("connected", &self.is_connected()).finish()
    }
}

impl RuntimeLink {
    fn set(&self, client: Option<RuntimeClient>) {
        *self.client.write().expect("runtime link lock") = client;
    }

    /// Whether a registered connection is there to call.
    pub fn is_connected(&self) -> bool {
        self.client.read().expect("runtime link lock").is_some()
    }

    /// Asks the runtime to update (and evict) containers; returns the updates
    /// the runtime reports as failed.
    pub async fn update_containers(
        &self,
        update: Vec<pb::ContainerUpdate>,
        evict: Vec<pb::ContainerEviction>,
        timeout: Duration,
    ) -> Result<Vec<pb::ContainerUpdate>, LinkError> {
        let client = self.client.read().expect("runtime link lock").clone().ok_or(LinkError::NotConnected)?;
        let req = pb::UpdateContainersRequest { update, evict, ..Default::default() };
        let ctx = ttrpc::context::with_timeout(timeout.as_nanos() as i64);
        client.update_containers(ctx, &req).await.map(|r| r.failed).map_err(|e| LinkError::Rpc(e.to_string()))
    }
}

/// Everything a session needs besides the socket.
#[derive(Clone)]
pub struct SessionContext {
    /// The name and index to register with.
    pub identity: PluginIdentity,
    /// Where the runtime's events go.
    pub dispatcher: Arc<dyn Dispatcher>,
    /// Set to the session's Runtime client once registered, cleared when it ends.
    pub link: RuntimeLink,
    /// Where the session publishes its phase and registration counts.
    pub status: watch::Sender<Status>,
    /// How long the runtime has to answer RegisterPlugin.
    pub register_timeout: Duration,
    /// Cancelled to end the session (a signal): it then closes cleanly.
    pub stop: CancellationToken,
    /// Whether a changed subscription may end the session to reconnect (a
    /// launched plugin cannot reconnect).
    pub can_resubscribe: bool,
    /// The runtime's socket, to leave through a farewell registration when
    /// stopped (`farewell.rs`); `None` closes the connection directly.
    pub farewell: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for SessionContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionContext").field("identity", &self.identity).finish_non_exhaustive()
    }
}

/// Runs one connection until it ends.
pub async fn run_session<S>(socket: S, cx: &SessionContext) -> SessionEnd
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let dispatcher = cx.dispatcher.clone();
    // Answers out on the socket, for draining before a chosen end.
    let answered = Arc::new(watch::Sender::new(0u64));
    let answers_out = answered.clone();
    let clock = Arc::new(AnswerClock::new(move |answer| {
        answers_out.send_modify(|n| *n += 1);
        tracing::trace!(
            target: ANSWER_LOG,
            event = answer.event.unwrap_or(""),
            stream = answer.stream,
            total_us = answer.total.as_secs_f64() * 1e6,
            handler_us = answer.handler.map_or(0.0, |h| h.as_secs_f64() * 1e6),
            "answered"
        );
        dispatcher.answered(&answer);
    }));
    let conns = mux::multiplex(socket, clock.clone());
    let handle = conns.handle.clone();
    let state = Arc::new(SessionState::new(clock));
    cx.status.send_modify(|s| s.phase = Phase::Registering);

    // Serve conn 1 first.
    let plugin_conn = futures::stream::once(async move { Ok(conns.plugin) }).chain(futures::stream::pending());
    let mut server = ttrpc::r#async::Server::new()
        .add_listener(Listener::new(plugin_conn))
        .register_service(PluginService::new(cx.dispatcher.clone(), state.clone()).into_services());
    if let Err(e) = server.start().await {
        handle.close();
        return SessionEnd::ServeFailed(e.to_string());
    }

    let client = RuntimeClient::new(ttrpc::r#async::Client::new(Socket::new(conns.runtime)));
    let registered = tokio::select! {
        r = registration::register(&client, &cx.identity, cx.register_timeout) => r,
        why = handle.ended() => Err(RegistrationError { plugin: cx.identity.to_string(), reason: format!("connection {why}") }),
        _ = cx.stop.cancelled() => {
            finish(&mut server, &handle, cx).await;
            return SessionEnd::Stopped;
        }
    };
    if let Err(e) = registered {
        finish(&mut server, &handle, cx).await;
        cx.status.send_modify(|s| s.registration_failures += 1);
        return SessionEnd::NotRegistered(e);
    }
    cx.link.set(Some(client));
    cx.status.send_modify(|s| {
        s.phase = Phase::Registered;
        s.registrations += 1;
    });
    tracing::info!(plugin = %cx.identity, "registered with the runtime");

    let end = tokio::select! {
        why = handle.ended() => SessionEnd::Lost { registered: true, why },
        _ = state.shutdown_requested() => SessionEnd::ShutdownRequested,
        _ = cx.stop.cancelled() => SessionEnd::Stopped,
        (from, to) = subscription_drift(&state, &*cx.dispatcher, cx.can_resubscribe) => SessionEnd::Resubscribe { from, to },
    };
    if matches!(end, SessionEnd::Resubscribe { .. }) {
        drain(&state, &answered).await;
    }
    if let (SessionEnd::Stopped, Some(socket)) = (&end, &cx.farewell) {
        // Serving on meanwhile: the main connection closes inside the
        // farewell's Synchronize.
        super::farewell::leave(socket, &cx.identity, &handle, cx.register_timeout).await;
    }
    finish(&mut server, &handle, cx).await;
    end
}

/// Before a session the host ends by choice (to subscribe anew), every
/// request in flight is answered: the runtime would otherwise see the
/// connection lost under a request (`PostUpdateContainer: connection
/// lost`). Waits until no dispatcher call is under way and as many answers
/// are out on the socket as calls were started, then lingers
/// ([`ANSWER_LINGER`]) while the runtime reads the last answer, answering
/// what arrives meanwhile too; all of it at most the answer budget and a
/// margin (a call ends by the budget; an answer ttrpc dropped at its
/// deadline is never out, which the bound covers).
async fn drain(state: &SessionState, answered: &watch::Sender<u64>) {
    let limit = state.budget() + DRAIN_MARGIN;
    let drained = tokio::time::timeout(limit, async {
        loop {
            state.calls_finished().await;
            let started = state.calls_started();
            let _ = answered.subscribe().wait_for(|out| *out >= started).await;
            tokio::time::sleep(ANSWER_LINGER).await;
            if state.calls_started() == started {
                return;
            }
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(waited_ms = limit.as_millis() as u64, "requests still unanswered when reconnecting");
    }
}

/// What a drain waits past the answer budget for answers to reach the socket.
const DRAIN_MARGIN: Duration = Duration::from_millis(500);

/// How long the host keeps a connection it is about to close after its
/// last answer is out. An answer on the socket is not yet one the runtime
/// has: NRI's multiplexer queues what it reads for each connection, and
/// when the socket ends it may fail the call before the queued answer is
/// read (Go picks at random between the two). The runtime reads an answer
/// within microseconds of its arrival; this leaves it a quarter of a second.
const ANSWER_LINGER: Duration = Duration::from_millis(250);

/// Resolves when the events the dispatcher wants no longer match what the
/// runtime was told in Configure, with the old and the new subscription.
/// Where the session cannot reconnect, the change is logged and waits for
/// the next connection.
async fn subscription_drift(
    state: &SessionState,
    dispatcher: &dyn Dispatcher,
    can_resubscribe: bool,
) -> (EventMask, EventMask) {
    let (nri_version, mask, mut seen) = state.configured().await;
    loop {
        dispatcher.events_changed(seen).await;
        seen = dispatcher.events_version();
        let wanted = version::subscription(dispatcher.events(), nri_version);
        if wanted == mask {
            continue;
        }
        if can_resubscribe {
            return (mask, wanted);
        }
        tracing::warn!(
            subscribed = %mask,
            wanted = %wanted,
            "the policies need a different subscription, which a plugin launched by the runtime gets only when it is started again"
        );
    }
}

async fn finish(server: &mut ttrpc::r#async::Server, handle: &mux::MuxHandle, cx: &SessionContext) {
    cx.link.set(None);
    handle.close();
    let _ = tokio::time::timeout(Duration::from_secs(1), server.shutdown()).await;
    cx.dispatcher.disconnected().await;
    cx.status.send_modify(|s| s.phase = Phase::Disconnected);
}
