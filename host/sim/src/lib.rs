//! A container runtime's side of NRI, for tests, benchmarks and the demo.
//!
//! [`Simulator`] listens on a real unix socket like containerd or CRI-O do,
//! accepts plugins, serves `RegisterPlugin` and `UpdateContainers`, and lets a
//! test drive the plugin through [`PluginConn`]: `Configure` as a runtime of a
//! chosen name, version and NRI version ([`RuntimeProfile`]), `Synchronize`
//! (optionally split), and every event. It behaves like the reference
//! runtime where plugins usually get it wrong:
//! - it reads frames exactly as the reference reader does ([`goio`]); what
//!   that reader would have failed on is a recorded violation that closes
//!   the connection;
//! - it refuses a subscription with events its NRI version does not know;
//! - it only sends events the plugin subscribed to;
//! - before NRI v0.12 it delivers the notification events through
//!   `StateChange`; from v0.12 it calls the dedicated RPCs and falls back to
//!   `StateChange` when the plugin answers `Unimplemented`;
//! - a plugin that does not answer within the request timeout is dropped
//!   (the connection is closed), as a runtime does, and so is one whose
//!   Synchronize fails (NRI closes a plugin it could not synchronise);
//! - it holds one lock ([`RuntimeLock`]) across every event and the whole
//!   Synchronize, and a plugin's `UpdateContainers` takes it too, as the
//!   runtimes' NRI glue does (containerd's and CRI-O's `internal/nri/nri.go`:
//!   `l.Lock()` in every event, in `syncPlugin` and in `updateFromPlugin`;
//!   NRI up to v0.12.0 also takes the adaptation's lock in
//!   `updateContainers`). An update the plugin sends while an event is
//!   under way is applied, and answered, only once that event is over.
//!
//! [`plugins::Plugins`] is the runtime around several such connections: its
//! list of plugins, called in order under one lock, a closed plugin skipped
//! and removed as NRI does, every call journalled.

pub mod fixtures;
pub mod goio;
pub mod node;
pub mod plugins;
pub mod populate;
pub mod reference;
pub mod wire;
pub mod workload;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use nri_wasm_api::api as pb;
use nri_wasm_api::services;
use tokio::net::UnixListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use ttrpc::r#async::transport::{Listener, Socket};
use ttrpc::r#async::TtrpcContext;

pub use wire::{RoundTrip, WireStats};

/// Bits of the events known to runtimes before NRI v0.10 (events 1 to 11).
pub const MASK_BEFORE_V0_10: i32 = 0x7ff;
/// Bits of the events known from NRI v0.10 on (events 1 to 14).
pub const MASK_FROM_V0_10: i32 = 0x3fff;

/// Who the simulated runtime pretends to be.
#[derive(Debug, Clone)]
pub struct RuntimeProfile {
    pub runtime_name: String,
    pub runtime_version: String,
    /// NRI version announced in Configure (runtimes before v0.12 send none).
    pub announced_nri_version: String,
    /// NRI version the runtime actually implements: (minor) of v0.x.
    pub nri_minor: u32,
    pub request_timeout: Duration,
    pub registration_timeout: Duration,
    /// Plugin configuration passed in Configure.
    pub config: String,
    /// Refuse every RegisterPlugin with this message (a runtime that
    /// already has a plugin of that index and name, say).
    pub refuse_registration: Option<String>,
}

impl RuntimeProfile {
    /// A containerd release speaking the given NRI version (`v0.12.0`, ...).
    /// Like real runtimes, only v0.12 and later announce their NRI version.
    pub fn containerd(runtime_version: &str, nri_version: &str) -> Self {
        let minor = nri_version.trim_start_matches('v').split('.').nth(1).and_then(|m| m.parse().ok()).unwrap_or(12);
        Self {
            runtime_name: "containerd".into(),
            runtime_version: runtime_version.into(),
            announced_nri_version: if minor >= 12 { nri_version.into() } else { String::new() },
            nri_minor: minor,
            request_timeout: Duration::from_secs(2),
            registration_timeout: Duration::from_secs(5),
            config: String::new(),
            refuse_registration: None,
        }
    }

    /// containerd 1.7.20: NRI v0.6, events only through StateChange.
    pub fn v0_6() -> Self {
        Self::containerd("v1.7.20", "v0.6.1")
    }

    /// containerd 2.1.4: NRI v0.8.
    pub fn v0_8() -> Self {
        Self::containerd("v2.1.4", "v0.8.0")
    }

    /// CRI-O 1.34: NRI v0.10, the first with pod updates and validation.
    pub fn v0_10() -> Self {
        Self { runtime_name: "cri-o".into(), runtime_version: "1.34.1".into(), ..Self::containerd("", "v0.10.0") }
    }

    /// containerd 2.3.4: NRI v0.12, dedicated event RPCs.
    pub fn v0_12() -> Self {
        Self::containerd("v2.3.4", "v0.12.0")
    }

    /// iSulad 2.1.6 (openEuler 24.09), built with NRI: its own C++ side of
    /// the protocol at API v0.6.1. It announces no NRI version (the plugin
    /// must infer it from the runtime's name), knows events 1 to 11 only,
    /// delivers notifications through `StateChange`, and has no validation.
    /// Fields its spec generator ignores (the block I/O class; OCI hooks
    /// other than prestart, poststart and poststop) are still accepted in
    /// a reply.
    pub fn isulad() -> Self {
        Self {
            runtime_name: "isulad".into(),
            runtime_version: "2.1.6".into(),
            announced_nri_version: String::new(),
            nri_minor: 6,
            ..Self::containerd("", "v0.6.1")
        }
    }

    /// Event bits this runtime accepts in a subscription.
    pub fn valid_mask(&self) -> i32 {
        if self.nri_minor >= 10 {
            MASK_FROM_V0_10
        } else {
            MASK_BEFORE_V0_10
        }
    }

    /// Whether notification events go through the dedicated RPCs.
    pub fn dedicated_rpcs(&self) -> bool {
        self.nri_minor >= 12
    }

    pub fn with_request_timeout(mut self, t: Duration) -> Self {
        self.request_timeout = t;
        self
    }

    pub fn with_config(mut self, config: &str) -> Self {
        self.config = config.into();
        self
    }
}

/// How a simulated runtime call went wrong.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("plugin did not register within {0:?}")]
    NoRegistration(Duration),
    #[error("plugin subscribed to events {mask:#x} that an NRI v0.{minor} runtime does not know")]
    UnknownEvents { mask: i32, minor: u32 },
    #[error("plugin is not subscribed to {0}")]
    NotSubscribed(&'static str),
    #[error("plugin was not configured yet")]
    NotConfigured,
    #[error("{event}: plugin did not answer within {timeout:?}; plugin dropped")]
    Timeout { event: &'static str, timeout: Duration },
    #[error("{event} failed: {status:?}")]
    Failed { event: &'static str, status: ttrpc::Status },
    #[error("{event}: connection lost: {reason}")]
    Disconnected { event: &'static str, reason: String },
    #[error("protocol violation: {0}")]
    Protocol(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl SimError {
    /// The status of a failed call (a plugin that failed the event).
    pub fn status(&self) -> Option<&ttrpc::Status> {
        match self {
            Self::Failed { status, .. } => Some(status),
            _ => None,
        }
    }
}

/// Listens for plugins like a runtime's NRI socket.
#[derive(Debug)]
pub struct Simulator {
    listener: UnixListener,
    path: PathBuf,
    profile: RuntimeProfile,
}

impl Simulator {
    /// Binds the socket (removing a stale one).
    pub async fn listen(path: &Path, profile: RuntimeProfile) -> std::io::Result<Self> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        Ok(Self { listener, path: path.to_path_buf(), profile })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn profile(&self) -> &RuntimeProfile {
        &self.profile
    }

    /// Changes the profile for connections accepted from now on.
    pub fn set_profile(&mut self, profile: RuntimeProfile) {
        self.profile = profile;
    }

    /// Accepts the next plugin and waits for its registration.
    pub async fn accept(&self) -> Result<PluginConn, SimError> {
        let (socket, _) = self.listener.accept().await?;
        PluginConn::establish(socket, self.profile.clone()).await
    }

    /// Accepts a plugin as a runtime does at start: its registration
    /// (waited for at most `within`), Configure, then an empty Synchronize.
    /// Panics naming the step that failed: for tests.
    pub async fn accept_started(&self, within: Duration) -> PluginConn {
        let mut conn = tokio::time::timeout(within, self.accept())
            .await
            .unwrap_or_else(|_| panic!("the plugin did not register within {within:?}"))
            .expect("registration");
        conn.configure().await.expect("configure");
        conn.synchronize(&[], &[], 0).await.expect("synchronize");
        conn
    }
}

/// The runtime's lock over its plugins: held across every event (all the
/// plugins it calls for it) and a Synchronize, and taken by a plugin's
/// UpdateContainers. Configure is sent without it.
pub type RuntimeLock = Arc<tokio::sync::Mutex<()>>;

/// What the Runtime service recorded.
#[derive(Debug, Default)]
struct RuntimeRecord {
    registered: Mutex<Option<pb::RegisterPluginRequest>>,
    registered_notify: tokio::sync::Notify,
    fail_updates: Mutex<Vec<String>>,
    /// The ground truth UpdateContainers is applied to, if a test keeps one.
    model: Mutex<Option<node::SharedModel>>,
}

/// The Runtime service (conn 2) of the simulated runtime.
struct RuntimeService {
    record: Arc<RuntimeRecord>,
    updates: mpsc::UnboundedSender<pb::UpdateContainersRequest>,
    refuse_registration: Option<String>,
    lock: RuntimeLock,
}

#[async_trait]
impl services::Runtime for RuntimeService {
    async fn register_plugin(&self, _ctx: &TtrpcContext, req: pb::RegisterPluginRequest) -> ttrpc::Result<pb::Empty> {
        let valid_name = !req.plugin_name.is_empty()
            && req.plugin_name.chars().all(|c| c.is_ascii_alphanumeric() || "_.+-".contains(c));
        let valid_idx = req.plugin_idx.len() == 2 && req.plugin_idx.chars().all(|c| c.is_ascii_digit());
        if !valid_name || !valid_idx {
            return Err(ttrpc::Error::RpcStatus(ttrpc::get_status(
                ttrpc::Code::INVALID_ARGUMENT,
                format!("invalid plugin name/index {:?}/{:?}", req.plugin_name, req.plugin_idx),
            )));
        }
        if let Some(why) = &self.refuse_registration {
            return Err(ttrpc::Error::RpcStatus(ttrpc::get_status(ttrpc::Code::FAILED_PRECONDITION, why.clone())));
        }
        *self.record.registered.lock().expect("registration lock") = Some(req);
        self.record.registered_notify.notify_one();
        Ok(pb::Empty::default())
    }

    async fn update_containers(
        &self,
        _ctx: &TtrpcContext,
        req: pb::UpdateContainersRequest,
    ) -> ttrpc::Result<pb::UpdateContainersResponse> {
        // Not while an event is under way (see the module documentation).
        let _runtime = self.lock.lock().await;
        let fail = self.record.fail_updates.lock().expect("fail list lock").clone();
        let (refused, accepted): (Vec<_>, Vec<_>) =
            req.update.iter().cloned().partition(|u| fail.contains(&u.container_id));
        let mut failed = refused;
        if let Some(model) = self.record.model.lock().expect("model lock").as_ref() {
            let mut model = model.lock().expect("model lock");
            failed.extend(model.apply_updates(&accepted));
            for e in &req.evict {
                model.set_state(&e.container_id, pb::ContainerState::CONTAINER_STOPPED);
            }
        }
        let _ = self.updates.send(req);
        Ok(pb::UpdateContainersResponse { failed, ..Default::default() })
    }
}

/// One connected plugin, seen from the runtime.
pub struct PluginConn {
    profile: RuntimeProfile,
    client: services::PluginClient,
    registration: pb::RegisterPluginRequest,
    subscribed: Option<i32>,
    record: Arc<RuntimeRecord>,
    stats: Arc<WireStats>,
    closed: CancellationToken,
    /// In a mutex only so that a connection can be shared between tasks
    /// (the server is `Send`, not `Sync`); nothing locks it but `close`.
    server: Mutex<ttrpc::r#async::Server>,
    updates: mpsc::UnboundedReceiver<pb::UpdateContainersRequest>,
    fallbacks: AtomicU64,
    /// The runtime's lock ([`RuntimeLock`]).
    lock: RuntimeLock,
    /// Whether this connection's events take [`Self::lock`] themselves
    /// (false when a runtime around several connections holds it across
    /// each of its events, [`plugins::Plugins`]).
    locks_events: bool,
}

impl std::fmt::Debug for PluginConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginConn")
            .field("profile", &self.profile)
            .field("registration", &self.registration)
            .field("subscribed", &self.subscribed)
            .finish_non_exhaustive()
    }
}

impl PluginConn {
    /// Sets up the wire on an accepted socket and waits for RegisterPlugin.
    /// The connection's events take a runtime lock of its own.
    pub async fn establish(socket: tokio::net::UnixStream, profile: RuntimeProfile) -> Result<Self, SimError> {
        Self::establish_with(socket, profile, RuntimeLock::default(), true).await
    }

    /// [`Self::establish`] for a runtime around several connections, which
    /// holds `lock` across each of its events: this connection's events do
    /// not take it, its UpdateContainers do.
    pub async fn establish_under(
        socket: tokio::net::UnixStream,
        profile: RuntimeProfile,
        lock: RuntimeLock,
    ) -> Result<Self, SimError> {
        Self::establish_with(socket, profile, lock, false).await
    }

    async fn establish_with(
        socket: tokio::net::UnixStream,
        profile: RuntimeProfile,
        lock: RuntimeLock,
        locks_events: bool,
    ) -> Result<Self, SimError> {
        let stats = Arc::new(WireStats::default());
        let closed = CancellationToken::new();
        let conns = wire::start(socket, stats.clone(), closed.clone());

        let record = Arc::new(RuntimeRecord::default());
        let (updates_tx, updates) = mpsc::unbounded_channel();
        let service = RuntimeService {
            record: record.clone(),
            updates: updates_tx,
            refuse_registration: profile.refuse_registration.clone(),
            lock: lock.clone(),
        };
        let runtime_conn = conns.runtime;
        let incoming = futures::stream::once(async move { Ok(runtime_conn) }).chain(futures::stream::pending());
        let mut server = ttrpc::r#async::Server::new()
            .add_listener(Listener::new(incoming))
            .register_service(services::create_runtime(Arc::new(service)));
        server.start().await.map_err(|e| SimError::Protocol(format!("runtime service: {e}")))?;
        let client = services::PluginClient::new(ttrpc::r#async::Client::new(Socket::new(conns.plugin)));

        let wait = async {
            loop {
                let notified = record.registered_notify.notified();
                if let Some(r) = record.registered.lock().expect("registration lock").clone() {
                    return r;
                }
                notified.await;
            }
        };
        let registration = tokio::select! {
            r = tokio::time::timeout(profile.registration_timeout, wait) => {
                r.map_err(|_| SimError::NoRegistration(profile.registration_timeout))?
            }
            _ = closed.cancelled() => {
                return Err(SimError::Protocol(format!("connection closed before registration: {:?}", stats.violations())));
            }
        };
        Ok(Self {
            profile,
            client,
            registration,
            subscribed: None,
            record,
            stats,
            closed,
            server: Mutex::new(server),
            updates,
            fallbacks: AtomicU64::new(0),
            lock,
            locks_events,
        })
    }

    /// Holds the runtime's lock for one event, unless a runtime around
    /// this connection holds it already.
    async fn event_lock(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match self.locks_events {
            true => Some(self.lock.lock().await),
            false => None,
        }
    }

    pub fn registration(&self) -> &pb::RegisterPluginRequest {
        &self.registration
    }

    pub fn profile(&self) -> &RuntimeProfile {
        &self.profile
    }

    /// The event mask from Configure.
    pub fn subscribed(&self) -> Option<i32> {
        self.subscribed
    }

    /// Frames read from the plugin so far.
    pub fn frames_read(&self) -> u64 {
        self.stats.frames_read()
    }

    pub fn stats(&self) -> &WireStats {
        &self.stats
    }

    /// Times a dedicated RPC was answered `Unimplemented` and StateChange used.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }

    /// Whether the connection is closed (by either side or a violation).
    pub fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Waits until the connection closes.
    pub async fn closed(&self) {
        self.closed.cancelled().await
    }

    /// Applies every UpdateContainers request to `model` (updates of
    /// unknown containers are reported failed; evicted containers stop).
    pub fn attach_model(&self, model: node::SharedModel) {
        *self.record.model.lock().expect("model lock") = Some(model);
    }

    /// Makes UpdateContainers report these containers as failed.
    pub fn fail_updates_for(&self, ids: &[&str]) {
        *self.record.fail_updates.lock().expect("fail list lock") = ids.iter().map(|s| s.to_string()).collect();
    }

    /// The next UpdateContainers request the plugin sent.
    pub async fn next_update_request(&mut self, timeout: Duration) -> Option<pb::UpdateContainersRequest> {
        tokio::time::timeout(timeout, self.updates.recv()).await.ok().flatten()
    }

    /// Closes the connection, as a runtime that restarts or drops the plugin.
    pub async fn close(mut self) {
        self.closed.cancel();
        let server = self.server.get_mut().unwrap_or_else(|p| p.into_inner());
        let _ = tokio::time::timeout(Duration::from_secs(1), server.shutdown()).await;
    }

    fn ctx(&self) -> ttrpc::context::Context {
        ttrpc::context::with_timeout(self.profile.request_timeout.as_nanos() as i64)
    }

    /// Runs one event's call under the runtime's lock, with the runtime's
    /// failure semantics.
    async fn call<T>(
        &self,
        event: &'static str,
        fut: impl std::future::Future<Output = ttrpc::Result<T>>,
    ) -> Result<T, SimError> {
        let _runtime = self.event_lock().await;
        self.call_unlocked(event, fut).await
    }

    /// Runs one call with the runtime's failure semantics (the caller holds
    /// the runtime's lock if the call needs it).
    async fn call_unlocked<T>(
        &self,
        event: &'static str,
        fut: impl std::future::Future<Output = ttrpc::Result<T>>,
    ) -> Result<T, SimError> {
        if self.closed.is_cancelled() {
            return Err(self.lost(event));
        }
        let limit = self.profile.request_timeout + Duration::from_millis(50);
        let result = tokio::select! {
            r = tokio::time::timeout(limit, fut) => r,
            _ = self.closed.cancelled() => return Err(self.lost(event)),
        };
        match result {
            Ok(Ok(v)) => {
                self.check_violations(event)?;
                Ok(v)
            }
            Ok(Err(ttrpc::Error::RpcStatus(status))) => {
                self.check_violations(event)?;
                Err(SimError::Failed { event, status })
            }
            Ok(Err(ttrpc::Error::Others(m))) if m.contains("deadline") => {
                self.closed.cancel();
                Err(SimError::Timeout { event, timeout: self.profile.request_timeout })
            }
            Ok(Err(e)) => {
                self.closed.cancel();
                Err(SimError::Disconnected { event, reason: format!("{e}; violations: {:?}", self.stats.violations()) })
            }
            Err(_) => {
                self.closed.cancel();
                Err(SimError::Timeout { event, timeout: self.profile.request_timeout })
            }
        }
    }

    fn lost(&self, event: &'static str) -> SimError {
        SimError::Disconnected {
            event,
            reason: format!("connection closed; violations: {:?}", self.stats.violations()),
        }
    }

    fn check_violations(&self, event: &'static str) -> Result<(), SimError> {
        let v = self.stats.violations();
        if v.is_empty() {
            Ok(())
        } else {
            Err(SimError::Protocol(format!("{event}: {v:?}")))
        }
    }

    fn require(&self, event: pb::Event) -> Result<(), SimError> {
        let mask = self.subscribed.ok_or(SimError::NotConfigured)?;
        let bit = 1i32 << (event as i32 - 1);
        let effective = if mask == 0 { self.profile.valid_mask() } else { mask };
        if effective & bit == 0 {
            return Err(SimError::NotSubscribed(event_name(event)));
        }
        Ok(())
    }

    /// Whether the plugin subscribed to `event`.
    pub fn is_subscribed(&self, event: pb::Event) -> bool {
        self.require(event).is_ok()
    }

    /// Sends Configure as this runtime and checks the subscription.
    pub async fn configure(&mut self) -> Result<pb::ConfigureResponse, SimError> {
        let p = &self.profile;
        let req = pb::ConfigureRequest {
            config: p.config.clone(),
            runtime_name: p.runtime_name.clone(),
            runtime_version: p.runtime_version.clone(),
            registration_timeout: p.registration_timeout.as_millis() as i64,
            request_timeout: p.request_timeout.as_millis() as i64,
            NRI_version: p.announced_nri_version.clone(),
            ..Default::default()
        };
        // Outside the runtime's lock, as NRI configures a plugin.
        let resp = self.call_unlocked("Configure", self.client.configure(self.ctx(), &req)).await?;
        if resp.events & !self.profile.valid_mask() != 0 {
            // A real runtime refuses the plugin and closes the connection.
            self.closed.cancel();
            return Err(SimError::UnknownEvents { mask: resp.events, minor: self.profile.nri_minor });
        }
        self.subscribed = Some(resp.events);
        Ok(resp)
    }

    /// Sends Synchronize, split in chunks of `chunk` containers (0: whole),
    /// under the runtime's lock. A failed chunk closes the connection, as NRI
    /// closes a plugin it could not synchronise.
    pub async fn synchronize(
        &self,
        pods: &[pb::PodSandbox],
        containers: &[pb::Container],
        chunk: usize,
    ) -> Result<Vec<pb::ContainerUpdate>, SimError> {
        if self.subscribed.is_none() {
            return Err(SimError::NotConfigured);
        }
        let mut requests = Vec::new();
        if chunk == 0 || containers.len() <= chunk {
            requests.push(pb::SynchronizeRequest {
                pods: pods.to_vec(),
                containers: containers.to_vec(),
                more: false,
                ..Default::default()
            });
        } else {
            let chunks: Vec<_> = containers.chunks(chunk).collect();
            for (i, c) in chunks.iter().enumerate() {
                requests.push(pb::SynchronizeRequest {
                    pods: if i == 0 { pods.to_vec() } else { Vec::new() },
                    containers: c.to_vec(),
                    more: i + 1 < chunks.len(),
                    ..Default::default()
                });
            }
        }
        let last = requests.len() - 1;
        let _runtime = self.event_lock().await;
        for (i, req) in requests.into_iter().enumerate() {
            let more = req.more;
            let resp = match self.call_unlocked("Synchronize", self.client.synchronize(self.ctx(), &req)).await {
                Ok(resp) => resp,
                Err(e) => {
                    self.closed.cancel();
                    return Err(e);
                }
            };
            if more && (!resp.more || !resp.update.is_empty()) {
                return Err(SimError::Protocol(format!(
                    "Synchronize chunk {i} of {}: reply must be more=true without updates, got more={} with {} updates",
                    last + 1,
                    resp.more,
                    resp.update.len()
                )));
            }
            if i == last {
                if resp.more {
                    return Err(SimError::Protocol("last Synchronize reply says more=true".into()));
                }
                return Ok(resp.update);
            }
        }
        unreachable!("at least one Synchronize request is sent")
    }

    /// Delivers a notification event: the dedicated RPC on v0.12+ (with the
    /// StateChange fallback on Unimplemented), StateChange before.
    async fn notify<F, Fut>(
        &self,
        event: pb::Event,
        pod: &pb::PodSandbox,
        container: Option<&pb::Container>,
        dedicated: F,
    ) -> Result<(), SimError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = ttrpc::Result<()>>,
    {
        self.require(event)?;
        let name = event_name(event);
        let _runtime = self.event_lock().await;
        if self.profile.dedicated_rpcs() {
            match self.call_unlocked(name, dedicated()).await {
                Err(SimError::Failed { status, .. }) if status.code() == ttrpc::Code::UNIMPLEMENTED => {
                    self.fallbacks.fetch_add(1, Ordering::Relaxed);
                }
                other => return other,
            }
        }
        let req = pb::StateChangeEvent {
            event: event.into(),
            pod: protobuf::MessageField::some(pod.clone()),
            container: container.cloned().into(),
            ..Default::default()
        };
        self.call_unlocked(name, self.client.state_change(self.ctx(), &req)).await.map(|_| ())
    }

    pub async fn run_pod_sandbox(&self, pod: &pb::PodSandbox) -> Result<(), SimError> {
        let req = pb::RunPodSandboxRequest { pod: some(pod), ..Default::default() };
        self.notify(pb::Event::RUN_POD_SANDBOX, pod, None, || async {
            self.client.run_pod_sandbox(self.ctx(), &req).await.map(|_| ())
        })
        .await
    }

    pub async fn stop_pod_sandbox(&self, pod: &pb::PodSandbox) -> Result<(), SimError> {
        let req = pb::StopPodSandboxRequest { pod: some(pod), ..Default::default() };
        self.notify(pb::Event::STOP_POD_SANDBOX, pod, None, || async {
            self.client.stop_pod_sandbox(self.ctx(), &req).await.map(|_| ())
        })
        .await
    }

    pub async fn remove_pod_sandbox(&self, pod: &pb::PodSandbox) -> Result<(), SimError> {
        let req = pb::RemovePodSandboxRequest { pod: some(pod), ..Default::default() };
        self.notify(pb::Event::REMOVE_POD_SANDBOX, pod, None, || async {
            self.client.remove_pod_sandbox(self.ctx(), &req).await.map(|_| ())
        })
        .await
    }

    pub async fn post_update_pod_sandbox(&self, pod: &pb::PodSandbox) -> Result<(), SimError> {
        let req = pb::PostUpdatePodSandboxRequest { pod: some(pod), ..Default::default() };
        self.notify(pb::Event::POST_UPDATE_POD_SANDBOX, pod, None, || async {
            self.client.post_update_pod_sandbox(self.ctx(), &req).await.map(|_| ())
        })
        .await
    }

    pub async fn update_pod_sandbox(&self, req: &pb::UpdatePodSandboxRequest) -> Result<(), SimError> {
        self.require(pb::Event::UPDATE_POD_SANDBOX)?;
        self.call("UpdatePodSandbox", self.client.update_pod_sandbox(self.ctx(), req)).await.map(|_| ())
    }

    pub async fn create_container(
        &self,
        pod: &pb::PodSandbox,
        container: &pb::Container,
    ) -> Result<pb::CreateContainerResponse, SimError> {
        self.require(pb::Event::CREATE_CONTAINER)?;
        let req = pb::CreateContainerRequest { pod: some(pod), container: some(container), ..Default::default() };
        self.call("CreateContainer", self.client.create_container(self.ctx(), &req)).await
    }

    pub async fn post_create_container(&self, pod: &pb::PodSandbox, ctr: &pb::Container) -> Result<(), SimError> {
        let req = pb::PostCreateContainerRequest { pod: some(pod), container: some(ctr), ..Default::default() };
        self.notify(pb::Event::POST_CREATE_CONTAINER, pod, Some(ctr), || async {
            self.client.post_create_container(self.ctx(), &req).await.map(|_| ())
        })
        .await
    }

    pub async fn start_container(&self, pod: &pb::PodSandbox, ctr: &pb::Container) -> Result<(), SimError> {
        let req = pb::StartContainerRequest { pod: some(pod), container: some(ctr), ..Default::default() };
        self.notify(pb::Event::START_CONTAINER, pod, Some(ctr), || async {
            self.client.start_container(self.ctx(), &req).await.map(|_| ())
        })
        .await
    }

    pub async fn post_start_container(&self, pod: &pb::PodSandbox, ctr: &pb::Container) -> Result<(), SimError> {
        let req = pb::PostStartContainerRequest { pod: some(pod), container: some(ctr), ..Default::default() };
        self.notify(pb::Event::POST_START_CONTAINER, pod, Some(ctr), || async {
            self.client.post_start_container(self.ctx(), &req).await.map(|_| ())
        })
        .await
    }

    pub async fn update_container(
        &self,
        req: &pb::UpdateContainerRequest,
    ) -> Result<pb::UpdateContainerResponse, SimError> {
        self.require(pb::Event::UPDATE_CONTAINER)?;
        self.call("UpdateContainer", self.client.update_container(self.ctx(), req)).await
    }

    pub async fn post_update_container(&self, pod: &pb::PodSandbox, ctr: &pb::Container) -> Result<(), SimError> {
        let req = pb::PostUpdateContainerRequest { pod: some(pod), container: some(ctr), ..Default::default() };
        self.notify(pb::Event::POST_UPDATE_CONTAINER, pod, Some(ctr), || async {
            self.client.post_update_container(self.ctx(), &req).await.map(|_| ())
        })
        .await
    }

    pub async fn stop_container(
        &self,
        pod: &pb::PodSandbox,
        ctr: &pb::Container,
    ) -> Result<pb::StopContainerResponse, SimError> {
        self.require(pb::Event::STOP_CONTAINER)?;
        let req = pb::StopContainerRequest { pod: some(pod), container: some(ctr), ..Default::default() };
        self.call("StopContainer", self.client.stop_container(self.ctx(), &req)).await
    }

    pub async fn remove_container(&self, pod: &pb::PodSandbox, ctr: &pb::Container) -> Result<(), SimError> {
        let req = pb::RemoveContainerRequest { pod: some(pod), container: some(ctr), ..Default::default() };
        self.notify(pb::Event::REMOVE_CONTAINER, pod, Some(ctr), || async {
            self.client.remove_container(self.ctx(), &req).await.map(|_| ())
        })
        .await
    }

    pub async fn validate_container_adjustment(
        &self,
        req: &pb::ValidateContainerAdjustmentRequest,
    ) -> Result<pb::ValidateContainerAdjustmentResponse, SimError> {
        self.require(pb::Event::VALIDATE_CONTAINER_ADJUSTMENT)?;
        self.call("ValidateContainerAdjustment", self.client.validate_container_adjustment(self.ctx(), req)).await
    }

    /// Sends a raw StateChange (as an old runtime would), bypassing the
    /// subscription check: for tests of the plugin's StateChange handling.
    pub async fn raw_state_change(&self, req: &pb::StateChangeEvent) -> Result<(), SimError> {
        self.call("StateChange", self.client.state_change(self.ctx(), req)).await.map(|_| ())
    }
}

fn some<T: Clone>(v: &T) -> protobuf::MessageField<T> {
    protobuf::MessageField::some(v.clone())
}

/// The RPC name of an event.
pub fn event_name(e: pb::Event) -> &'static str {
    match e {
        pb::Event::RUN_POD_SANDBOX => "RunPodSandbox",
        pb::Event::STOP_POD_SANDBOX => "StopPodSandbox",
        pb::Event::REMOVE_POD_SANDBOX => "RemovePodSandbox",
        pb::Event::CREATE_CONTAINER => "CreateContainer",
        pb::Event::POST_CREATE_CONTAINER => "PostCreateContainer",
        pb::Event::START_CONTAINER => "StartContainer",
        pb::Event::POST_START_CONTAINER => "PostStartContainer",
        pb::Event::UPDATE_CONTAINER => "UpdateContainer",
        pb::Event::POST_UPDATE_CONTAINER => "PostUpdateContainer",
        pb::Event::STOP_CONTAINER => "StopContainer",
        pb::Event::REMOVE_CONTAINER => "RemoveContainer",
        pb::Event::UPDATE_POD_SANDBOX => "UpdatePodSandbox",
        pb::Event::POST_UPDATE_POD_SANDBOX => "PostUpdatePodSandbox",
        pb::Event::VALIDATE_CONTAINER_ADJUSTMENT => "ValidateContainerAdjustment",
        _ => "Unknown",
    }
}
