//! The Plugin service the runtime calls on conn 1.
//!
//! Handlers are thin: each one hands its request to the [`Dispatcher`] through
//! `PluginService::answer`, which applies the answer deadline and the single
//! error mapping ([`status_of`]). The protocol work that is not a plain
//! forward lives here too: choosing the subscription in `Configure`,
//! collecting a split `Synchronize`, and routing the generic `StateChange`
//! of older runtimes to the dedicated handlers.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nri_wasm_api::api as pb;
use nri_wasm_api::services;
use protobuf::Message;
use tokio::sync::Notify;
use ttrpc::r#async::TtrpcContext;

use super::answer::AnswerScope;
use super::dispatch::{DispatchError, Dispatcher, RuntimeInfo};
use super::mux::AnswerClock;
use super::version::{self, EventKind, EventMask};

/// Default registration timeout when the runtime does not send one.
pub const DEFAULT_REGISTRATION_TIMEOUT: Duration = Duration::from_secs(5);
/// Default request timeout when the runtime does not send one (NRI < v0.7).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Most bytes of split Synchronize chunks we hold before the last one arrives.
pub const MAX_SYNC_BYTES: usize = 256 << 20;

/// The single mapping from a dispatcher error to the status the runtime sees.
pub fn status_of(err: &DispatchError) -> ttrpc::Status {
    let code = match err {
        DispatchError::Denied(_) => ttrpc::Code::PERMISSION_DENIED,
        DispatchError::InvalidRequest(_) => ttrpc::Code::INVALID_ARGUMENT,
        DispatchError::DeadlineExceeded(_) => ttrpc::Code::DEADLINE_EXCEEDED,
        DispatchError::Internal(_) => ttrpc::Code::INTERNAL,
    };
    ttrpc::get_status(code, err.to_string())
}

fn rpc_error(err: &DispatchError) -> ttrpc::Error {
    ttrpc::Error::RpcStatus(status_of(err))
}

/// Builds what we know about the runtime from its Configure request.
pub fn runtime_info(req: &pb::ConfigureRequest) -> RuntimeInfo {
    let (nri_version, nri_version_source) = version::resolve(&req.NRI_version, &req.runtime_name, &req.runtime_version);
    let ms = |v: i64, default: Duration| if v > 0 { Duration::from_millis(v as u64) } else { default };
    RuntimeInfo {
        name: req.runtime_name.clone(),
        version: req.runtime_version.clone(),
        nri_version,
        nri_version_source,
        config: req.config.clone(),
        registration_timeout: ms(req.registration_timeout, DEFAULT_REGISTRATION_TIMEOUT),
        request_timeout: ms(req.request_timeout, DEFAULT_REQUEST_TIMEOUT),
    }
}

/// How long we allow the dispatcher for one answer: most of the runtime's
/// request timeout, keeping a margin for encoding and the socket.
pub fn answer_budget(request_timeout: Duration) -> Duration {
    let margin = (request_timeout / 10).clamp(Duration::from_millis(20), Duration::from_millis(250));
    request_timeout.saturating_sub(margin)
}

/// A dispatcher call the transport's backstop ended.
struct Overrun {
    /// The answer budget it had.
    budget: Duration,
    /// What the dispatcher said it was doing (`answer::Progress`).
    running: String,
}

#[derive(Debug, Default)]
struct SyncChunks {
    pods: Vec<pb::PodSandbox>,
    containers: Vec<pb::Container>,
    bytes: usize,
    chunks: usize,
}

/// What one connection has learnt, shared between the service and the session.
#[derive(Debug, Default)]
pub struct SessionState {
    runtime: Mutex<Option<RuntimeInfo>>,
    subscribed: Mutex<EventMask>,
    /// Once configured: the runtime's NRI version, the mask we answered,
    /// and the dispatcher's events version the mask was computed at.
    configured: tokio::sync::watch::Sender<Option<(version::NriVersion, EventMask, u64)>>,
    sync: tokio::sync::Mutex<SyncChunks>,
    /// Complete Synchronizes answered on this connection.
    synchronized: tokio::sync::watch::Sender<u64>,
    shutdown: Notify,
    /// Times each answer; the handlers tell it what the dispatcher took.
    clock: Arc<AnswerClock>,
    /// Dispatcher calls started and finished on this connection, so that a
    /// connection being retired answers what is in flight first.
    calls: tokio::sync::watch::Sender<(u64, u64)>,
}

/// Counts a dispatcher call as finished however it ends (answered, failed,
/// or dropped by ttrpc at its deadline).
struct CallGuard<'a>(&'a tokio::sync::watch::Sender<(u64, u64)>);

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|(_, finished)| *finished += 1);
    }
}

impl SessionState {
    /// The state of a new connection whose answers `clock` times.
    pub fn new(clock: Arc<AnswerClock>) -> Self {
        Self { clock, ..Self::default() }
    }

    /// The runtime as it described itself, once configured.
    pub fn runtime(&self) -> Option<RuntimeInfo> {
        self.runtime.lock().expect("runtime info lock").clone()
    }

    /// The event mask we answered Configure with.
    pub fn subscribed(&self) -> EventMask {
        *self.subscribed.lock().expect("subscription lock")
    }

    /// Waits until Configure was answered; returns the runtime's NRI
    /// version, the mask we answered with, and the dispatcher's events
    /// version it was computed at.
    pub async fn configured(&self) -> (version::NriVersion, EventMask, u64) {
        let mut rx = self.configured.subscribe();
        let got = rx.wait_for(Option::is_some).await.map(|v| *v);
        match got {
            Ok(Some(c)) => c,
            // The sender lives as long as `self`.
            _ => std::future::pending().await,
        }
    }

    /// Resolves once the last chunk of a Synchronize has been answered
    /// (at once if one was).
    pub async fn synchronized(&self) {
        let _ = self.synchronized.subscribe().wait_for(|n| *n > 0).await;
    }

    /// Resolves when the runtime called Shutdown.
    pub async fn shutdown_requested(&self) {
        self.shutdown.notified().await
    }

    /// Resolves once no dispatcher call is under way.
    pub async fn calls_finished(&self) {
        let _ = self.calls.subscribe().wait_for(|(started, finished)| finished >= started).await;
    }

    /// The time the dispatcher has for one answer on this connection.
    pub fn budget(&self) -> Duration {
        let timeout = self.runtime().map_or(DEFAULT_REQUEST_TIMEOUT, |r| r.request_timeout);
        answer_budget(timeout)
    }
}

/// The Plugin service of one connection.
#[derive(Clone)]
pub struct PluginService {
    dispatcher: Arc<dyn Dispatcher>,
    state: Arc<SessionState>,
}

impl std::fmt::Debug for PluginService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginService").field("state", &self.state).finish_non_exhaustive()
    }
}

impl PluginService {
    /// The Plugin service of one connection: events go to `dispatcher`,
    /// what the connection learns goes to `state`.
    pub fn new(dispatcher: Arc<dyn Dispatcher>, state: Arc<SessionState>) -> Self {
        Self { dispatcher, state }
    }

    /// The ttrpc service table to register with a server.
    pub fn into_services(self) -> std::collections::HashMap<String, ttrpc::r#async::Service> {
        services::create_plugin(Arc::new(self))
    }

    /// Runs one dispatcher call within the answer budget and maps its error.
    async fn answer<T>(
        &self,
        ctx: &TtrpcContext,
        event: &'static str,
        call: impl Future<Output = Result<T, DispatchError>>,
    ) -> ttrpc::Result<T> {
        match self.within_budget(ctx, event, call).await {
            Ok(result) => result.map_err(|e| {
                tracing::warn!(event, error = %e, "event failed");
                rpc_error(&e)
            }),
            Err(overrun) => {
                let e = DispatchError::DeadlineExceeded(overrun.budget);
                tracing::warn!(event, error = %e, running = %overrun.running, "event failed: the call was dropped");
                Err(rpc_error(&e))
            }
        }
    }

    /// Runs one dispatcher call until the transport's backstop: the answer
    /// budget, counted from now. The dispatcher learns the backstop (and may
    /// say what it is doing) through the task's answer scope (`answer.rs`),
    /// so that its own deadline ends before it. Past the backstop the call
    /// is dropped, and the error says what was running.
    async fn within_budget<T>(
        &self,
        ctx: &TtrpcContext,
        event: &'static str,
        call: impl Future<Output = Result<T, DispatchError>>,
    ) -> Result<Result<T, DispatchError>, Overrun> {
        let budget = self.state.budget();
        self.state.calls.send_modify(|(started, _)| *started += 1);
        let _call = CallGuard(&self.state.calls);
        self.state.clock.serving(ctx.mh.stream_id, event);
        let start = std::time::Instant::now();
        let scope = AnswerScope::new(start + budget);
        let result = match tokio::time::timeout_at((start + budget).into(), scope.clone().run(call)).await {
            Ok(r) => Ok(r),
            Err(_) => {
                self.dispatcher.answer_overrun(event, budget);
                Err(Overrun { budget, running: scope.describe() })
            }
        };
        self.state.clock.handled(ctx.mh.stream_id, start.elapsed());
        result
    }

    /// `Configure`: the runtime's facts, then the subscription.
    async fn serve_configure(
        &self,
        ctx: &TtrpcContext,
        req: pb::ConfigureRequest,
    ) -> ttrpc::Result<pb::ConfigureResponse> {
        let info = runtime_info(&req);
        // The dispatcher may settle what it wants while configuring (the
        // first load of its policies): ask for the mask after.
        self.answer(ctx, "Configure", self.dispatcher.configure(&info)).await?;
        let events_version = self.dispatcher.events_version();
        let mask = version::subscription(self.dispatcher.events(), info.nri_version);
        tracing::info!(
            runtime = %info.name,
            runtime_version = %info.version,
            nri_version = %info.nri_version,
            nri_version_source = %info.nri_version_source,
            request_timeout_ms = info.request_timeout.as_millis() as u64,
            events = %mask,
            "configured by runtime"
        );
        let nri_version = info.nri_version;
        *self.state.runtime.lock().expect("runtime info lock") = Some(info);
        *self.state.subscribed.lock().expect("subscription lock") = mask;
        self.state.configured.send_replace(Some((nri_version, mask, events_version)));
        Ok(pb::ConfigureResponse { events: mask.bits() as i32, ..Default::default() })
    }

    /// `Synchronize`, collected over its chunks.
    async fn serve_synchronize(
        &self,
        ctx: &TtrpcContext,
        req: pb::SynchronizeRequest,
    ) -> ttrpc::Result<pb::SynchronizeResponse> {
        let mut chunks = self.state.sync.lock().await;
        chunks.bytes += req.compute_size() as usize;
        chunks.chunks += 1;
        if chunks.bytes > MAX_SYNC_BYTES {
            let e = DispatchError::InvalidRequest(format!(
                "split Synchronize exceeds {MAX_SYNC_BYTES} bytes after {} chunks",
                chunks.chunks
            ));
            *chunks = SyncChunks::default();
            return Err(rpc_error(&e));
        }
        chunks.pods.extend(req.pods);
        chunks.containers.extend(req.containers);
        if req.more {
            return Ok(pb::SynchronizeResponse { more: true, ..Default::default() });
        }
        let SyncChunks { pods, containers, chunks: n, .. } = std::mem::take(&mut *chunks);
        drop(chunks);
        let (np, nc) = (pods.len(), containers.len());
        // A runtime drops a plugin whose Synchronize fails (and sends it
        // again when it reconnects, which can loop): past the backstop the
        // answer is a Synchronize without updates, and the log says why.
        let update = match self.within_budget(ctx, "Synchronize", self.dispatcher.synchronize(pods, containers)).await {
            Ok(r) => r.map_err(|e| {
                tracing::warn!(event = "Synchronize", error = %e, "event failed");
                rpc_error(&e)
            })?,
            Err(overrun) => {
                tracing::error!(
                    event = "Synchronize",
                    budget_ms = overrun.budget.as_millis() as u64,
                    running = %overrun.running,
                    pods = np,
                    containers = nc,
                    "no answer within the answer budget: answering Synchronize without updates, since a failed one \
                     would make the runtime drop the plugin"
                );
                Vec::new()
            }
        };
        tracing::info!(pods = np, containers = nc, chunks = n, updates = update.len(), "synchronized with runtime");
        self.state.synchronized.send_modify(|n| *n += 1);
        Ok(pb::SynchronizeResponse { update, more: false, ..Default::default() })
    }

    /// Delivers an event that arrived through the generic StateChange RPC.
    pub async fn state_change_event(&self, ev: pb::StateChangeEvent) -> Result<(), DispatchError> {
        let number = ev.event.value();
        let kind = EventKind::from_number(number)
            .ok_or_else(|| DispatchError::InvalidRequest(format!("StateChange for unknown event {number}")))?;
        deliver_state_change(self.dispatcher.as_ref(), kind, ev.pod, ev.container).await
    }
}

/// The RPC's response: the dispatcher's reply for an `answer` or `verdict`
/// event, an empty response once a `notify` event succeeded.
macro_rules! rpc_response {
    (notify, $call:expr) => {{
        $call?;
        Ok(Default::default())
    }};
    (answer, $call:expr) => {
        $call
    };
    (verdict, $call:expr) => {
        $call
    };
}

/// An event of a generic StateChange for the dispatcher: a `notify` event
/// gets its request built from the pod (and container) StateChange carries.
macro_rules! state_change_request {
    (notify, pod, $kind:ident, $d:ident.$method:ident($request:ident, $pod:ident, $container:ident)) => {
        $d.$method(pb::$request { pod: $pod, ..Default::default() }).await
    };
    (notify, container, $kind:ident, $d:ident.$method:ident($request:ident, $pod:ident, $container:ident)) => {
        $d.$method(pb::$request { pod: $pod, container: $container, ..Default::default() }).await
    };
    // These carry an answer (adjustments, updates, a verdict) that a
    // StateChange reply has no room for: dropping it silently would turn a
    // policy's decision into a no-op.
    (answer, $carries:ident, $kind:ident, $d:ident.$method:ident($request:ident, $pod:ident, $container:ident)) => {
        Err(DispatchError::InvalidRequest(format!(
            "{} cannot be delivered through StateChange: its reply would be lost",
            stringify!($kind)
        )))
    };
    (verdict, $carries:ident, $kind:ident, $d:ident.$method:ident($request:ident, $pod:ident, $container:ident)) => {
        state_change_request!(answer, $carries, $kind, $d.$method($request, $pod, $container))
    };
}

/// The `Plugin` service's RPCs, one per row of the event table
/// (`nri/events.rs`), and the routing of the generic StateChange.
macro_rules! plugin_service {
    ($($kind:ident = $number:literal since $since:tt, $method:ident, $request:ident => $response:ident, $reply:ident, $carries:ident, $shape:ident;)*) => {
        /// Delivers an event of kind `kind` that arrived through the generic
        /// StateChange RPC, with the pod and container it carried.
        async fn deliver_state_change(
            d: &dyn Dispatcher,
            kind: EventKind,
            pod: protobuf::MessageField<pb::PodSandbox>,
            container: protobuf::MessageField<pb::Container>,
        ) -> Result<(), DispatchError> {
            match kind {
                $(EventKind::$kind => state_change_request!($reply, $carries, $kind, d.$method($request, pod, container))),*
            }
        }

        #[async_trait]
        impl services::Plugin for PluginService {
            async fn configure(&self, ctx: &TtrpcContext, req: pb::ConfigureRequest) -> ttrpc::Result<pb::ConfigureResponse> {
                self.serve_configure(ctx, req).await
            }

            async fn synchronize(
                &self,
                ctx: &TtrpcContext,
                req: pb::SynchronizeRequest,
            ) -> ttrpc::Result<pb::SynchronizeResponse> {
                self.serve_synchronize(ctx, req).await
            }

            async fn shutdown(&self, _ctx: &TtrpcContext, _req: pb::Empty) -> ttrpc::Result<pb::Empty> {
                tracing::info!("runtime asked the plugin to shut down");
                self.state.shutdown.notify_one();
                Ok(pb::Empty::default())
            }

            async fn state_change(&self, ctx: &TtrpcContext, req: pb::StateChangeEvent) -> ttrpc::Result<pb::Empty> {
                self.answer(ctx, "StateChange", self.state_change_event(req)).await?;
                Ok(pb::Empty::default())
            }

            $(
                async fn $method(&self, ctx: &TtrpcContext, req: pb::$request) -> ttrpc::Result<pb::$response> {
                    rpc_response!($reply, self.answer(ctx, stringify!($kind), self.dispatcher.$method(req)).await)
                }
            )*
        }
    };
}
super::events::nri_events!(plugin_service);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dispatch_error_maps_to_a_distinct_code_and_keeps_the_message() {
        let cases = [
            (DispatchError::Denied("no privileged pods".into()), ttrpc::Code::PERMISSION_DENIED),
            (DispatchError::InvalidRequest("bad".into()), ttrpc::Code::INVALID_ARGUMENT),
            (DispatchError::DeadlineExceeded(Duration::from_millis(5)), ttrpc::Code::DEADLINE_EXCEEDED),
            (DispatchError::Internal("boom".into()), ttrpc::Code::INTERNAL),
        ];
        for (err, code) in cases {
            let status = status_of(&err);
            assert_eq!(status.code(), code, "{err}");
            assert_eq!(status.message(), err.to_string());
        }
    }

    #[test]
    fn runtime_info_applies_defaults_and_units() {
        let req = pb::ConfigureRequest {
            runtime_name: "containerd".into(),
            runtime_version: "v2.2.0".into(),
            request_timeout: 1500,
            ..Default::default()
        };
        let info = runtime_info(&req);
        assert_eq!(info.request_timeout, Duration::from_millis(1500));
        assert_eq!(info.registration_timeout, DEFAULT_REGISTRATION_TIMEOUT);
        assert_eq!(info.nri_version, version::NriVersion::new(0, 10, 0));
    }

    #[test]
    fn answer_budget_keeps_a_margin() {
        assert_eq!(answer_budget(Duration::from_secs(2)), Duration::from_millis(1800));
        assert_eq!(answer_budget(Duration::from_millis(100)), Duration::from_millis(80));
        assert_eq!(answer_budget(Duration::from_secs(10)), Duration::from_millis(9750));
    }

    #[tokio::test]
    async fn state_change_refuses_events_whose_reply_it_cannot_carry() {
        let svc = PluginService::new(Arc::new(super::super::dispatch::NullDispatcher), Arc::default());
        for ev in [pb::Event::CREATE_CONTAINER, pb::Event::UPDATE_CONTAINER, pb::Event::STOP_CONTAINER] {
            let req = pb::StateChangeEvent { event: ev.into(), ..Default::default() };
            assert!(matches!(svc.state_change_event(req).await, Err(DispatchError::InvalidRequest(_))));
        }
        let req = pb::StateChangeEvent { event: pb::Event::POST_START_CONTAINER.into(), ..Default::default() };
        svc.state_change_event(req).await.unwrap();
    }
}
