//! Shared harness of the end-to-end tests: a host plugin connected to the
//! runtime simulator over a real unix socket, and a dispatcher that records
//! what it receives and answers what the test tells it to.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nri_sim::{PluginConn, RuntimeProfile, Simulator};
use nri_wasm::nri::{
    ConnectOptions, DispatchError, Dispatcher, Endpoint, EventMask, PluginHandles, PluginIdentity, RuntimeInfo,
    Supervisor,
};
use nri_wasm::policy::dispatcher::PolicyDispatcher;
use nri_wasm_api::api as pb;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// One recorded dispatcher call.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    Configure(String),
    Synchronize { pods: Vec<pb::PodSandbox>, containers: Vec<pb::Container> },
    RunPodSandbox(pb::RunPodSandboxRequest),
    UpdatePodSandbox(pb::UpdatePodSandboxRequest),
    PostUpdatePodSandbox(pb::PostUpdatePodSandboxRequest),
    StopPodSandbox(pb::StopPodSandboxRequest),
    RemovePodSandbox(pb::RemovePodSandboxRequest),
    CreateContainer(pb::CreateContainerRequest),
    PostCreateContainer(pb::PostCreateContainerRequest),
    StartContainer(pb::StartContainerRequest),
    PostStartContainer(pb::PostStartContainerRequest),
    UpdateContainer(pb::UpdateContainerRequest),
    PostUpdateContainer(pb::PostUpdateContainerRequest),
    StopContainer(pb::StopContainerRequest),
    RemoveContainer(pb::RemoveContainerRequest),
    Validate(pb::ValidateContainerAdjustmentRequest),
    Disconnected,
}

/// What the recording dispatcher answers.
#[derive(Debug, Clone, Default)]
pub struct Replies {
    pub events: Option<EventMask>,
    pub sync: Vec<pb::ContainerUpdate>,
    pub create: pb::CreateContainerResponse,
    pub update: pb::UpdateContainerResponse,
    pub stop: pb::StopContainerResponse,
    pub validate: pb::ValidateContainerAdjustmentResponse,
    /// Fail every event with this error.
    pub fail: Option<DispatchError>,
    /// Take this long before answering any event.
    pub delay: Option<Duration>,
}

/// A dispatcher that records every call.
#[derive(Debug, Default)]
pub struct Recorder {
    pub seen: Mutex<Vec<Seen>>,
    pub replies: Mutex<Replies>,
    /// The times the transport reported for each answer.
    pub answers: Mutex<Vec<nri_wasm::nri::mux::AnswerTime>>,
    /// What the last `Configure` said about the runtime.
    pub runtime: Mutex<Option<RuntimeInfo>>,
    /// The dispatcher's events version, bumped by [`Recorder::set_events`].
    pub events_version: tokio::sync::watch::Sender<u64>,
}

impl Recorder {
    pub fn new(replies: Replies) -> Arc<Self> {
        Arc::new(Self {
            seen: Mutex::default(),
            replies: Mutex::new(replies),
            answers: Mutex::default(),
            runtime: Mutex::default(),
            events_version: tokio::sync::watch::Sender::new(0),
        })
    }

    /// Wants `events` from now on, as a reload that changes the policies'
    /// subscription does: the host registers again with them.
    pub fn set_events(&self, events: EventMask) {
        self.replies.lock().unwrap().events = Some(events);
        self.events_version.send_modify(|v| *v += 1);
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn last(&self) -> Option<Seen> {
        self.seen.lock().unwrap().iter().rev().find(|s| !matches!(s, Seen::Disconnected)).cloned()
    }

    pub fn clear(&self) {
        self.seen.lock().unwrap().clear();
    }

    async fn record(&self, s: Seen) -> Result<Replies, DispatchError> {
        self.seen.lock().unwrap().push(s);
        let replies = self.replies.lock().unwrap().clone();
        if let Some(d) = replies.delay {
            tokio::time::sleep(d).await;
        }
        match &replies.fail {
            Some(e) => Err(e.clone()),
            None => Ok(replies),
        }
    }
}

#[async_trait]
impl Dispatcher for Recorder {
    fn events(&self) -> EventMask {
        self.replies.lock().unwrap().events.unwrap_or_else(EventMask::all)
    }

    fn events_version(&self) -> u64 {
        *self.events_version.borrow()
    }

    async fn events_changed(&self, since: u64) {
        let _ = self.events_version.subscribe().wait_for(|v| *v > since).await;
    }

    async fn configure(&self, runtime: &RuntimeInfo) -> Result<(), DispatchError> {
        self.seen.lock().unwrap().push(Seen::Configure(runtime.config.clone()));
        *self.runtime.lock().unwrap() = Some(runtime.clone());
        Ok(())
    }

    async fn synchronize(
        &self,
        pods: Vec<pb::PodSandbox>,
        containers: Vec<pb::Container>,
    ) -> Result<Vec<pb::ContainerUpdate>, DispatchError> {
        Ok(self.record(Seen::Synchronize { pods, containers }).await?.sync)
    }

    async fn run_pod_sandbox(&self, req: pb::RunPodSandboxRequest) -> Result<(), DispatchError> {
        self.record(Seen::RunPodSandbox(req)).await.map(drop)
    }

    async fn update_pod_sandbox(&self, req: pb::UpdatePodSandboxRequest) -> Result<(), DispatchError> {
        self.record(Seen::UpdatePodSandbox(req)).await.map(drop)
    }

    async fn post_update_pod_sandbox(&self, req: pb::PostUpdatePodSandboxRequest) -> Result<(), DispatchError> {
        self.record(Seen::PostUpdatePodSandbox(req)).await.map(drop)
    }

    async fn stop_pod_sandbox(&self, req: pb::StopPodSandboxRequest) -> Result<(), DispatchError> {
        self.record(Seen::StopPodSandbox(req)).await.map(drop)
    }

    async fn remove_pod_sandbox(&self, req: pb::RemovePodSandboxRequest) -> Result<(), DispatchError> {
        self.record(Seen::RemovePodSandbox(req)).await.map(drop)
    }

    async fn create_container(
        &self,
        req: pb::CreateContainerRequest,
    ) -> Result<pb::CreateContainerResponse, DispatchError> {
        Ok(self.record(Seen::CreateContainer(req)).await?.create)
    }

    async fn post_create_container(&self, req: pb::PostCreateContainerRequest) -> Result<(), DispatchError> {
        self.record(Seen::PostCreateContainer(req)).await.map(drop)
    }

    async fn start_container(&self, req: pb::StartContainerRequest) -> Result<(), DispatchError> {
        self.record(Seen::StartContainer(req)).await.map(drop)
    }

    async fn post_start_container(&self, req: pb::PostStartContainerRequest) -> Result<(), DispatchError> {
        self.record(Seen::PostStartContainer(req)).await.map(drop)
    }

    async fn update_container(
        &self,
        req: pb::UpdateContainerRequest,
    ) -> Result<pb::UpdateContainerResponse, DispatchError> {
        Ok(self.record(Seen::UpdateContainer(req)).await?.update)
    }

    async fn post_update_container(&self, req: pb::PostUpdateContainerRequest) -> Result<(), DispatchError> {
        self.record(Seen::PostUpdateContainer(req)).await.map(drop)
    }

    async fn stop_container(&self, req: pb::StopContainerRequest) -> Result<pb::StopContainerResponse, DispatchError> {
        Ok(self.record(Seen::StopContainer(req)).await?.stop)
    }

    async fn remove_container(&self, req: pb::RemoveContainerRequest) -> Result<(), DispatchError> {
        self.record(Seen::RemoveContainer(req)).await.map(drop)
    }

    async fn validate_container_adjustment(
        &self,
        req: pb::ValidateContainerAdjustmentRequest,
    ) -> Result<pb::ValidateContainerAdjustmentResponse, DispatchError> {
        Ok(self.record(Seen::Validate(req)).await?.validate)
    }

    async fn disconnected(&self) {
        self.seen.lock().unwrap().push(Seen::Disconnected);
    }

    fn answered(&self, answer: &nri_wasm::nri::mux::AnswerTime) {
        self.answers.lock().unwrap().push(*answer);
    }
}

/// A running host plugin in external mode against a simulator.
#[derive(Debug)]
pub struct Harness {
    pub sim: Simulator,
    pub stop: CancellationToken,
    pub handles: PluginHandles,
    pub task: JoinHandle<Result<(), nri_wasm::nri::SupervisorError>>,
    _dir: tempfile::TempDir,
    pub socket: PathBuf,
}

impl Harness {
    /// Starts a simulator with `profile` and the host (external mode) with `dispatcher`.
    pub async fn start(profile: RuntimeProfile, dispatcher: Arc<dyn Dispatcher>) -> Self {
        init_logging();
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("nri.sock");
        let sim = Simulator::listen(&socket, profile).await.expect("listen");
        let stop = CancellationToken::new();
        let supervisor = Supervisor::new(options(Endpoint::Socket(socket.clone())), dispatcher, stop.clone());
        let handles = supervisor.handles();
        let task = tokio::spawn(supervisor.run());
        Self { sim, stop, handles, task, _dir: dir, socket }
    }

    /// Starts a simulator and the host serving `dispatcher`, whose
    /// UpdateContainers go over the live connection.
    pub async fn start_policies(profile: RuntimeProfile, dispatcher: Arc<PolicyDispatcher>) -> Self {
        init_logging();
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("nri.sock");
        let sim = Simulator::listen(&socket, profile).await.expect("listen");
        let stop = CancellationToken::new();
        let link = dispatcher.link();
        let supervisor =
            Supervisor::new(options(Endpoint::Socket(socket.clone())), dispatcher, stop.clone()).with_link(link);
        let handles = supervisor.handles();
        let task = tokio::spawn(supervisor.run());
        Self { sim, stop, handles, task, _dir: dir, socket }
    }

    /// Accepts the plugin and configures it (the runtime's first two steps).
    pub async fn connect(&self) -> PluginConn {
        let mut conn = tokio::time::timeout(Duration::from_secs(10), self.sim.accept())
            .await
            .expect("plugin connects within 10 s")
            .expect("plugin registers");
        conn.configure().await.expect("configure");
        conn
    }

    /// Stops the host and waits for it.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let r = tokio::time::timeout(Duration::from_secs(5), self.task).await.expect("host stops within 5 s");
        r.expect("host task").expect("host stops cleanly");
    }
}

/// Connection options used by the tests: fast reconnects.
pub fn options(endpoint: Endpoint) -> ConnectOptions {
    ConnectOptions {
        identity: PluginIdentity::new("nri-wasm", "10").unwrap(),
        endpoint,
        register_timeout: Duration::from_secs(5),
        backoff_initial: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
    }
}

/// Logs to the test output when `RUST_LOG` is set.
pub fn init_logging() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    }
}

/// Engine settings for tests: a compile cache shared by every test of the
/// build, so each test component is compiled once.
pub fn engine_settings() -> nri_wasm::policy::engine::EngineSettings {
    nri_wasm::policy::engine::EngineSettings {
        cache_dir: Some(PathBuf::from(nri_wasm_components::COMPONENT_CACHE)),
        ..Default::default()
    }
}

/// One engine for every test of a test binary (compiling the test
/// components once per binary, through the shared cache).
pub fn shared_engine() -> Arc<nri_wasm::policy::engine::PolicyEngine> {
    use nri_wasm::policy::engine::PolicyEngine;
    static ENGINE: std::sync::OnceLock<Arc<PolicyEngine>> = std::sync::OnceLock::new();
    ENGINE.get_or_init(|| Arc::new(PolicyEngine::new(&engine_settings()).expect("engine"))).clone()
}

/// The loader over [`shared_engine`], for every test of a test binary.
pub fn shared_loader() -> Arc<nri_wasm::policy::PolicyLoader> {
    use nri_wasm::policy::PolicyLoader;
    static LOADER: std::sync::OnceLock<Arc<PolicyLoader>> = std::sync::OnceLock::new();
    LOADER.get_or_init(|| Arc::new(PolicyLoader::new(shared_engine()))).clone()
}

/// The variable that sets how long the fault and attack matrices run.
pub const MATRIX_VAR: &str = "NRI_WASM_MATRIX";

/// Runs of each case of the fault and attack matrices (`faults.rs`,
/// `hostile.rs`): 200 by default, 1,000 with `NRI_WASM_MATRIX=full` (before
/// a release, or after a change to the call path). Their leak checks allow
/// 2 MiB of heap growth over the runs after the first tenth: a leak shows
/// from about 12 KiB per event in the default matrix, from about 2.3 KiB in
/// the full one. Any other value is refused, so that a typo does not
/// quietly run the short matrix.
pub fn matrix_runs() -> usize {
    match std::env::var(MATRIX_VAR).as_deref() {
        Err(std::env::VarError::NotPresent) | Ok("" | "quick") => 200,
        Ok("full") => 1_000,
        Ok(other) => {
            panic!("{MATRIX_VAR}={other:?}: expected \"full\" (1,000 runs per case) or \"quick\" (200, the default)")
        }
        Err(e) => panic!("{MATRIX_VAR}: {e}"),
    }
}

/// Runs a future (a chain evaluation, a load) to completion on the shared
/// engine's policy runtime, from a test that is not async.
pub fn block_on<F>(work: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    shared_engine().block_on(work)
}

/// The topology tests show policies: 8 CPUs on two NUMA nodes, 16 GiB.
pub fn test_topology() -> nri_wasm::node::topology::Topology {
    use nri_wasm::node::topology::{NumaNode, Topology};
    Topology {
        online_cpus: (0..8).collect(),
        numa_nodes: vec![
            NumaNode { id: 0, cpus: vec![0, 1, 2, 3], memory_bytes: 8 << 30 },
            NumaNode { id: 1, cpus: vec![4, 5, 6, 7], memory_bytes: 8 << 30 },
        ],
        memory_bytes: 16 << 30,
    }
}

/// The facts tests show policies: a small fixed node, no runtime yet.
pub fn test_facts() -> nri_wasm::policy::engine::Facts {
    nri_wasm::policy::engine::Facts::unconfigured(
        nri_wasm::policy::bindings::wit::NodeInfo {
            hostname: "node-1".into(),
            arch: "x86_64".into(),
            cpus: 8,
            memory_bytes: 16 << 30,
        },
        &test_topology(),
    )
}

/// An evaluation context with the test facts, an empty node view and
/// in-memory state, ending `budget` from now.
pub fn eval_cx(budget: Duration) -> nri_wasm::policy::chain::EvalContext {
    nri_wasm::policy::chain::EvalContext::new(
        shared_engine(),
        nri_wasm::policy::engine::CallEnv::detached(Arc::new(test_facts())),
        std::time::Instant::now() + budget,
    )
}

/// The default limits with a time limit (2 s) that no busy machine
/// reaches: for the tests that are about anything but time. A test about a
/// time limit sets its own and asserts which limit fired; with the default
/// 100 ms, a healthy policy on a loaded 2-core machine can run out of time
/// and fail a test that is about something else.
pub fn roomy() -> nri_wasm::policy::spec::limits::Limits {
    nri_wasm::policy::spec::limits::Limits { timeout_ms: 2_000, ..nri_wasm::policy::spec::limits::Limits::default() }
}

/// A policy spec as the loader would build it from `NN-name.wasm` + `.toml`.
pub fn policy_spec(
    name: &str,
    wasm: &str,
    settings: &str,
    on_error: nri_wasm::policy::spec::manifest::OnError,
    limits: nri_wasm::policy::spec::limits::Limits,
) -> nri_wasm::policy::spec::manifest::PolicySpec {
    nri_wasm::policy::spec::manifest::PolicySpec {
        settings: settings.into(),
        on_error,
        limits,
        ..nri_wasm::policy::spec::manifest::PolicySpec::granting_all(name, wasm)
    }
}

/// Paths of the test policies and example policies, compiled for
/// wasm32-wasip2 (`nri-wasm-test-support`, `nri-wasm-components`).
pub mod guests {
    pub use nri_wasm_components::examples::{COLOCATION_QOS, EXCLUSIVE_CPUS};
    pub use nri_wasm_test_support::guests::*;
}

/// A CreateContainer of a small container, as a policy call reads it.
pub fn create_event() -> nri_wasm::policy::call::event::CallEvent {
    let pod =
        pb::PodSandbox { id: "pod".into(), name: "pod".into(), namespace: "default".into(), ..Default::default() };
    let container = pb::Container {
        id: "ctr".into(),
        pod_sandbox_id: "pod".into(),
        name: "app".into(),
        state: pb::ContainerState::CONTAINER_CREATED.into(),
        args: vec!["/app".into()],
        env: vec!["PATH=/bin".into()],
        ..Default::default()
    };
    nri_wasm::policy::call::event::CallEvent::container(
        nri_wasm::policy::bindings::wit::EventKind::CreateContainer,
        Arc::new(pod),
        Arc::new(container),
    )
}
