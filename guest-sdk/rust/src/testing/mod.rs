//! Native unit tests of policies: a fake host, events built in code or
//! loaded from NRI's JSON, and the host's way of running a call.
//!
//! Compiled for every target but `wasm32` (where the SDK talks to the real
//! host), so a policy crate tests its handlers with a plain `cargo test` on
//! the developer's machine; nothing needs to be enabled.
//!
//! ```ignore
//! use nri_wasm_sdk::testing::{TestEvent, TestHost};
//! use nri_wasm_sdk::*;
//!
//! #[test]
//! fn a_pod_without_the_annotation_is_left_alone() {
//!     // The CreateContainer that containerd 2.3.4 really sent, as captured.
//!     let event = TestEvent::fixture("CreateContainer");
//!     let out = TestHost::new().with_settings(r#"{"max-nofile": 65536}"#).run::<MyPolicy>(&event);
//!     assert_eq!(out.lines(), Vec::<String>::new());
//!
//!     let event = event.with_pod_annotation("example.com/memory", "lots");
//!     let out = TestHost::new().run::<MyPolicy>(&event);
//!     assert_eq!(out.denial(), "example.com/memory: \"lots\" is not a size");
//! }
//! ```
//!
//! What the test host does, as the real one:
//! - [`TestHost::run`] calls the policy's `configure` (its [`Policy::init`]
//!   and [`Policy::events`]) with the settings, then, only if the policy
//!   subscribed to the event's kind, its handler, through the same entry
//!   points a component's exports use;
//! - the handler reads the event, the settings, the node view and the state
//!   through the usual SDK functions; [`crate::log`] lines are collected;
//! - the state written by the call is committed only when the handler
//!   answered `Ok` with a reply the host would accept
//!   ([`Outcome::invalid`], checked by [`check_reply`]);
//! - event reads from `configure` panic, where the host traps them.
//!
//! What differs: the host runs every call in a fresh instance, so a
//! policy's own statics start afresh in every call; natively they live as
//! long as the test's thread. The test host does not enforce fuel, time or
//! memory limits, and it runs one policy, not a chain (build a validation
//! event with [`Validation`] to test a validating policy).
//!
//! [`describe`] turns a reply into sorted one-line descriptions, which make
//! exact assertions short; the end-to-end tests of the example policies
//! describe the host's protobuf replies the same way, so that the same
//! [`cases`] are checked natively and through the real host.

pub mod cases;
mod check;
mod describe;
pub(crate) mod fake;
mod json;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;

pub use check::check_reply;
pub use describe::{describe, describe_adjustment};
pub use json::{adjustment_from_json, event_from_json, view_from_json};

use crate::view::{ContainerInfo, NodeTopology, NumaNode, PodInfo};
use crate::*;

/// The directory of the captured containerd requests, relative to some
/// ancestor of the crate under test.
const FIXTURE_DIR: &str = "tests/fixtures/containerd-2.3.4";
/// Environment variable naming the fixture directory instead.
pub const ENV_FIXTURES: &str = "NRI_WASM_FIXTURES";

/// One line a policy logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub level: LogLevel,
    pub message: String,
}

impl std::fmt::Display for LogLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", fake::level_name(self.level), self.message)
    }
}

/// The node view a call sees: pods, containers and the topology.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    pub pods: BTreeMap<String, PodInfo>,
    pub containers: BTreeMap<String, ContainerInfo>,
    pub topology: NodeTopology,
}

impl Default for View {
    /// An empty node of 8 CPUs on two NUMA nodes and 16 GiB (the
    /// topology the project's end-to-end tests give policies).
    fn default() -> Self {
        View { pods: BTreeMap::new(), containers: BTreeMap::new(), topology: default_topology() }
    }
}

fn default_topology() -> NodeTopology {
    NodeTopology {
        online_cpus: (0..8).collect(),
        numa_nodes: vec![
            NumaNode { id: 0, cpus: vec![0, 1, 2, 3], memory_bytes: 8 << 30 },
            NumaNode { id: 1, cpus: vec![4, 5, 6, 7], memory_bytes: 8 << 30 },
        ],
        memory_bytes: 16 << 30,
    }
}

/// A host for native tests: settings, a node view, facts and the policy's
/// committed state, kept across the calls it runs.
#[derive(Debug, Clone)]
pub struct TestHost {
    /// The text `configure` receives and [`settings`] returns.
    pub settings: String,
    pub view: View,
    pub runtime: RuntimeInfo,
    pub node: NodeInfo,
    /// The policy's committed state.
    pub state: BTreeMap<String, String>,
    /// Most bytes of keys and values (`state-kib` × 1024).
    pub state_limit: usize,
}

impl Default for TestHost {
    fn default() -> Self {
        Self::new()
    }
}

impl TestHost {
    /// No settings, an empty view of the default topology, an unconfigured
    /// runtime (empty strings, as before the runtime configured the host),
    /// node `node-1` (x86_64, 8 CPUs, 16 GiB), empty state of 1 MiB.
    pub fn new() -> Self {
        TestHost {
            settings: String::new(),
            view: View::default(),
            runtime: RuntimeInfo { name: String::new(), version: String::new(), nri_version: String::new() },
            node: NodeInfo { hostname: "node-1".into(), arch: "x86_64".into(), cpus: 8, memory_bytes: 16 << 30 },
            state: BTreeMap::new(),
            state_limit: 1024 << 10,
        }
    }

    pub fn with_settings(mut self, settings: &str) -> Self {
        self.settings = settings.into();
        self
    }

    /// Adds (or replaces) a pod of the node view.
    pub fn with_pod(mut self, pod: PodInfo) -> Self {
        self.view.pods.insert(pod.id.clone(), pod);
        self
    }

    /// Adds (or replaces) a container of the node view.
    pub fn with_container(mut self, container: ContainerInfo) -> Self {
        self.view.containers.insert(container.id.clone(), container);
        self
    }

    pub fn with_topology(mut self, topology: NodeTopology) -> Self {
        self.view.topology = topology;
        self
    }

    /// The node view of a Synchronize request in NRI's JSON (such as the
    /// captured `Synchronize.json`), replacing the pods and containers.
    pub fn with_view_json(mut self, text: &str) -> Result<Self, String> {
        let (pods, containers) = view_from_json(text)?;
        self.view.pods = pods.into_iter().map(|p| (p.id.clone(), p)).collect();
        self.view.containers = containers.into_iter().map(|c| (c.id.clone(), c)).collect();
        Ok(self)
    }

    pub fn with_runtime(mut self, name: &str, version: &str, nri_version: &str) -> Self {
        self.runtime = RuntimeInfo { name: name.into(), version: version.into(), nri_version: nri_version.into() };
        self
    }

    pub fn with_node_info(mut self, node: NodeInfo) -> Self {
        self.node = node;
        self
    }

    /// Preloads a key of the policy's state.
    pub fn with_state(mut self, key: &str, value: &str) -> Self {
        self.state.insert(key.into(), value.into());
        self
    }

    /// The state limit in bytes.
    pub fn with_state_limit(mut self, bytes: usize) -> Self {
        self.state_limit = bytes;
        self
    }

    fn call(&self, event: Option<WholeEvent>) -> fake::Call {
        let current = event.as_ref().and_then(current_container);
        fake::Call {
            settings: intern(&self.settings),
            event,
            pods: self.view.pods.clone(),
            containers: self.view.containers.clone(),
            current,
            topology: self.view.topology.clone(),
            runtime: self.runtime.clone(),
            node: self.node.clone(),
            state: self.state.clone(),
            state_limit: self.state_limit,
            logs: Vec::new(),
        }
    }

    /// Runs the policy's `configure` as the host does when it loads the
    /// policy: `Ok` with its subscription, or its error (invalid settings).
    pub fn configure<P: Policy>(&self) -> Result<Vec<EventKind>, String> {
        self.configure_logged::<P>().0
    }

    fn configure_logged<P: Policy>(&self) -> (Result<Vec<EventKind>, String>, Vec<LogLine>) {
        let (result, call) = fake::with_call(self.call(None), || crate::__init::<P>(self.settings.clone()));
        (result, call.logs)
    }

    /// Runs `event` through the policy as the host would: `configure` with
    /// the settings, then the handler, if the policy subscribed to the
    /// event's kind, in a call that sees the view, the facts and the
    /// committed state. The state the call wrote is committed when the
    /// handler answered `Ok` and the host would accept the reply.
    ///
    /// Panics if `configure` fails: the host would not have loaded the
    /// policy (test settings errors with [`TestHost::configure`]).
    pub fn run<P: Policy>(&mut self, event: &TestEvent) -> Outcome {
        let kind = event.kind();
        let (configured, mut logs) = self.configure_logged::<P>();
        let events = configured.unwrap_or_else(|e| {
            panic!("configure rejected the settings {:?}: {e} (the host would not load the policy)", self.settings)
        });
        if !events.contains(&kind) {
            return Outcome {
                kind,
                called: false,
                result: Ok(Reply::none()),
                invalid: None,
                logs,
                state: self.state.clone(),
            };
        }
        let (result, call) = fake::with_call(self.call(Some(event.0.clone())), || crate::__handle::<P>(kind));
        logs.extend(call.logs);
        let invalid = match &result {
            Ok(reply) => check_reply(kind, reply).and_then(|()| check::no_self_update(&event.0, reply)).err(),
            Err(_) => None,
        };
        if result.is_ok() && invalid.is_none() {
            self.state = call.state;
        }
        Outcome { kind, called: true, result, invalid, logs, state: self.state.clone() }
    }
}

/// What a call answered, logged and left in the state.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub kind: EventKind,
    /// Whether the handler was called (the policy subscribed to the kind).
    pub called: bool,
    /// The handler's answer: a reply, or a denial's reason.
    pub result: Result<Reply, String>,
    /// Why the host would refuse the reply as invalid output (handled by
    /// the policy's `on-error` like a trap), if it would.
    pub invalid: Option<String>,
    /// Lines logged by `configure` and the handler, in order.
    pub logs: Vec<LogLine>,
    /// The committed state after the call.
    pub state: BTreeMap<String, String>,
}

impl Outcome {
    /// The reply. Panics if the event was denied or the host would refuse
    /// the reply.
    pub fn reply(&self) -> &Reply {
        if let Some(why) = &self.invalid {
            panic!("the host would refuse this reply as invalid output: {why}");
        }
        match &self.result {
            Ok(reply) => reply,
            Err(reason) => panic!("the policy denied {:?}: {reason}", self.kind),
        }
    }

    /// The reason of the denial. Panics if the policy answered.
    pub fn denial(&self) -> &str {
        match &self.result {
            Err(reason) => reason,
            Ok(reply) => panic!("the policy did not deny {:?}; it replied {:?}", self.kind, describe(reply)),
        }
    }

    /// The reply described line by line ([`describe`]). Panics as
    /// [`Outcome::reply`] does.
    pub fn lines(&self) -> Vec<String> {
        describe(self.reply())
    }

    /// The adjustment of the reply. Panics if there is none.
    pub fn adjust(&self) -> &ContainerAdjustment {
        self.reply().adjust.as_ref().unwrap_or_else(|| panic!("the reply to {:?} adjusts nothing", self.kind))
    }

    /// Whether some logged line contains `text`.
    pub fn logged(&self, text: &str) -> bool {
        self.logs.iter().any(|l| l.message.contains(text))
    }
}

/// Settings texts as `&'static str`, as [`settings`] returns them: leaked
/// once per distinct text, which a test process can afford.
fn intern(text: &str) -> &'static str {
    static SEEN: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let seen = seen.get_or_insert_with(HashSet::new);
    if let Some(s) = seen.get(text) {
        return s;
    }
    let leaked: &'static str = Box::leak(text.to_string().into_boxed_str());
    seen.insert(leaked);
    leaked
}

/// The view entry the event's own container stands for (the container as
/// the event shows it; on update-container, with the requested resources
/// laid over its own).
fn current_container(event: &WholeEvent) -> Option<ContainerInfo> {
    match event {
        WholeEvent::ValidateContainerAdjustment(_) => None,
        WholeEvent::UpdateContainer(u) => {
            let mut info = ContainerInfo::of(&u.container);
            if let Some(req) = &u.linux_resources {
                let base = info.resources.get_or_insert_with(LinuxResources::default);
                overlay(base, req);
            }
            Some(info)
        }
        e => e.container().map(ContainerInfo::of),
    }
}

/// Sets in `base` what `over` sets.
fn overlay(base: &mut LinuxResources, over: &LinuxResources) {
    if let Some(m) = &over.memory {
        let b = base.memory.get_or_insert_with(LinuxMemory::default);
        let pairs = [
            (&mut b.limit, m.limit),
            (&mut b.reservation, m.reservation),
            (&mut b.swap, m.swap),
            (&mut b.kernel, m.kernel),
            (&mut b.kernel_tcp, m.kernel_tcp),
        ];
        for (to, from) in pairs {
            if from.is_some() {
                *to = from;
            }
        }
        if m.swappiness.is_some() {
            b.swappiness = m.swappiness;
        }
        if m.disable_oom_killer.is_some() {
            b.disable_oom_killer = m.disable_oom_killer;
        }
        if m.use_hierarchy.is_some() {
            b.use_hierarchy = m.use_hierarchy;
        }
    }
    if let Some(c) = &over.cpu {
        let b = base.cpu.get_or_insert_with(LinuxCpu::default);
        if c.shares.is_some() {
            b.shares = c.shares;
        }
        if c.quota.is_some() {
            b.quota = c.quota;
        }
        if c.period.is_some() {
            b.period = c.period;
        }
        if c.realtime_runtime.is_some() {
            b.realtime_runtime = c.realtime_runtime;
        }
        if c.realtime_period.is_some() {
            b.realtime_period = c.realtime_period;
        }
        if !c.cpus.is_empty() {
            b.cpus = c.cpus.clone();
        }
        if !c.mems.is_empty() {
            b.mems = c.mems.clone();
        }
    }
    if !over.hugepage_limits.is_empty() {
        base.hugepage_limits = over.hugepage_limits.clone();
    }
    if over.blockio_class.is_some() {
        base.blockio_class = over.blockio_class.clone();
    }
    if over.rdt_class.is_some() {
        base.rdt_class = over.rdt_class.clone();
    }
    for kv in &over.unified {
        set_kv(&mut base.unified, &kv.key, &kv.value);
    }
    if !over.devices.is_empty() {
        base.devices = over.devices.clone();
    }
    if over.pids.is_some() {
        base.pids = over.pids;
    }
}

/// Sets `key` in a map kept sorted by key.
fn set_kv(list: &mut Vec<KeyValue>, key: &str, value: &str) {
    match list.binary_search_by(|kv| kv.key.as_str().cmp(key)) {
        Ok(i) => list[i].value = value.into(),
        Err(i) => list.insert(i, KeyValue { key: key.into(), value: value.into() }),
    }
}

fn remove_kv(list: &mut Vec<KeyValue>, key: &str) {
    list.retain(|kv| kv.key != key);
}

fn sort_kv(list: &mut [KeyValue]) {
    list.sort_by(|a, b| a.key.cmp(&b.key));
}

/// Sorts every map of the event by key, as the host sends them.
fn normalize(event: &mut WholeEvent) {
    fn pod(p: &mut PodSandbox) {
        sort_kv(&mut p.labels);
        sort_kv(&mut p.annotations);
    }
    fn container(c: &mut Container) {
        sort_kv(&mut c.labels);
        sort_kv(&mut c.annotations);
        if let Some(l) = &mut c.linux {
            sort_kv(&mut l.sysctl);
            if let Some(r) = &mut l.resources {
                sort_kv(&mut r.unified);
            }
        }
    }
    match event {
        WholeEvent::RunPodSandbox(e)
        | WholeEvent::StopPodSandbox(e)
        | WholeEvent::RemovePodSandbox(e)
        | WholeEvent::PostUpdatePodSandbox(e) => pod(&mut e.pod),
        WholeEvent::CreateContainer(e)
        | WholeEvent::PostCreateContainer(e)
        | WholeEvent::StartContainer(e)
        | WholeEvent::PostStartContainer(e)
        | WholeEvent::PostUpdateContainer(e)
        | WholeEvent::StopContainer(e)
        | WholeEvent::RemoveContainer(e) => {
            pod(&mut e.pod);
            container(&mut e.container);
        }
        WholeEvent::UpdateContainer(e) => {
            pod(&mut e.pod);
            container(&mut e.container);
        }
        WholeEvent::UpdatePodSandbox(e) => pod(&mut e.pod),
        WholeEvent::ValidateContainerAdjustment(e) => {
            pod(&mut e.pod);
            container(&mut e.container);
        }
        WholeEvent::Synchronize => {}
    }
}

/// An event to run through a policy: built in code, or loaded from NRI's
/// JSON (a captured request).
#[derive(Debug, Clone, PartialEq)]
pub struct TestEvent(WholeEvent);

impl TestEvent {
    /// The event `whole` (its maps sorted by key, as the host sends them).
    pub fn new(mut whole: WholeEvent) -> Self {
        normalize(&mut whole);
        TestEvent(whole)
    }

    /// A create-container event.
    pub fn create_container(pod: PodSandbox, container: Container) -> Self {
        Self::container_event(EventKind::CreateContainer, pod, container)
    }

    /// An event of a container-level `kind` (create, post-create, start,
    /// post-start, post-update, stop, remove; update-container gets no
    /// requested resources). Panics for other kinds.
    pub fn container_event(kind: EventKind, pod: PodSandbox, container: Container) -> Self {
        let e = ContainerEvent { pod, container };
        Self::new(match kind {
            EventKind::CreateContainer => WholeEvent::CreateContainer(e),
            EventKind::PostCreateContainer => WholeEvent::PostCreateContainer(e),
            EventKind::StartContainer => WholeEvent::StartContainer(e),
            EventKind::PostStartContainer => WholeEvent::PostStartContainer(e),
            EventKind::PostUpdateContainer => WholeEvent::PostUpdateContainer(e),
            EventKind::StopContainer => WholeEvent::StopContainer(e),
            EventKind::RemoveContainer => WholeEvent::RemoveContainer(e),
            EventKind::UpdateContainer => WholeEvent::UpdateContainer(UpdateContainerEvent {
                pod: e.pod,
                container: e.container,
                linux_resources: None,
            }),
            other => panic!("{other:?} is not an event of a container"),
        })
    }

    /// An event of a pod-level `kind` (run, stop, remove, post-update;
    /// update-pod-sandbox gets no resources). Panics for other kinds.
    pub fn pod_event(kind: EventKind, pod: PodSandbox) -> Self {
        let e = PodEvent { pod };
        Self::new(match kind {
            EventKind::RunPodSandbox => WholeEvent::RunPodSandbox(e),
            EventKind::StopPodSandbox => WholeEvent::StopPodSandbox(e),
            EventKind::RemovePodSandbox => WholeEvent::RemovePodSandbox(e),
            EventKind::PostUpdatePodSandbox => WholeEvent::PostUpdatePodSandbox(e),
            EventKind::UpdatePodSandbox => WholeEvent::UpdatePodSandbox(UpdatePodSandboxEvent {
                pod: e.pod,
                overhead_linux_resources: None,
                linux_resources: None,
            }),
            other => panic!("{other:?} is not an event of a pod"),
        })
    }

    /// An update-container event asking for `requested`.
    pub fn update_container(pod: PodSandbox, container: Container, requested: LinuxResources) -> Self {
        Self::new(WholeEvent::UpdateContainer(UpdateContainerEvent {
            pod,
            container,
            linux_resources: Some(requested),
        }))
    }

    /// An update-pod-sandbox event.
    pub fn update_pod_sandbox(
        pod: PodSandbox,
        overhead: Option<LinuxResources>,
        resources: Option<LinuxResources>,
    ) -> Self {
        Self::new(WholeEvent::UpdatePodSandbox(UpdatePodSandboxEvent {
            pod,
            overhead_linux_resources: overhead,
            linux_resources: resources,
        }))
    }

    /// The synchronize step.
    pub fn synchronize() -> Self {
        TestEvent(WholeEvent::Synchronize)
    }

    /// An event in NRI's protobuf JSON: `{"event": "<RPC name>", "request":
    /// {...}}`, as the captured fixtures are (see [`event_from_json`]).
    pub fn from_json(text: &str) -> Result<Self, String> {
        event_from_json(text).map(Self::new)
    }

    /// A captured request: `<name>.json` of the fixture directory (see
    /// [`fixture_text`]). Panics with the reason if it cannot be loaded.
    pub fn fixture(name: &str) -> Self {
        let text = fixture_text(name).unwrap_or_else(|e| panic!("{e}"));
        Self::from_json(&text).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
    }

    pub fn kind(&self) -> EventKind {
        self.0.kind()
    }

    pub fn whole(&self) -> &WholeEvent {
        &self.0
    }

    pub fn into_whole(self) -> WholeEvent {
        self.0
    }

    /// The same pod and container as another event `kind` (a captured
    /// CreateContainer replayed as StartContainer, say). Panics if this
    /// event lacks what `kind` carries.
    pub fn as_kind(&self, kind: EventKind) -> Self {
        match (self.0.pod(), self.0.container()) {
            _ if kind == EventKind::Synchronize => Self::synchronize(),
            (Some(p), _) if is_pod_kind(kind) => Self::pod_event(kind, p.clone()),
            (Some(p), Some(c)) if kind == EventKind::ValidateContainerAdjustment => {
                Validation::new(p.clone(), c.clone()).into()
            }
            (Some(p), Some(c)) => Self::container_event(kind, p.clone(), c.clone()),
            _ => panic!("a {:?} event has nothing to make a {kind:?} of", self.kind()),
        }
    }

    /// The event's pod, to change. Panics on synchronize.
    pub fn pod_mut(&mut self) -> &mut PodSandbox {
        match &mut self.0 {
            WholeEvent::RunPodSandbox(e)
            | WholeEvent::StopPodSandbox(e)
            | WholeEvent::RemovePodSandbox(e)
            | WholeEvent::PostUpdatePodSandbox(e) => &mut e.pod,
            WholeEvent::CreateContainer(e)
            | WholeEvent::PostCreateContainer(e)
            | WholeEvent::StartContainer(e)
            | WholeEvent::PostStartContainer(e)
            | WholeEvent::PostUpdateContainer(e)
            | WholeEvent::StopContainer(e)
            | WholeEvent::RemoveContainer(e) => &mut e.pod,
            WholeEvent::UpdateContainer(e) => &mut e.pod,
            WholeEvent::UpdatePodSandbox(e) => &mut e.pod,
            WholeEvent::ValidateContainerAdjustment(e) => &mut e.pod,
            WholeEvent::Synchronize => panic!("synchronize has no pod"),
        }
    }

    /// The event's container, to change. Panics on events without one.
    pub fn container_mut(&mut self) -> &mut Container {
        match &mut self.0 {
            WholeEvent::CreateContainer(e)
            | WholeEvent::PostCreateContainer(e)
            | WholeEvent::StartContainer(e)
            | WholeEvent::PostStartContainer(e)
            | WholeEvent::PostUpdateContainer(e)
            | WholeEvent::StopContainer(e)
            | WholeEvent::RemoveContainer(e) => &mut e.container,
            WholeEvent::UpdateContainer(e) => &mut e.container,
            WholeEvent::ValidateContainerAdjustment(e) => &mut e.container,
            other => panic!("{:?} has no container", other.kind()),
        }
    }

    /// Sets a pod label.
    pub fn with_pod_label(mut self, key: &str, value: &str) -> Self {
        self.pod_mut().set_label(key, value);
        self
    }

    /// Sets a pod annotation.
    pub fn with_pod_annotation(mut self, key: &str, value: &str) -> Self {
        self.pod_mut().set_annotation(key, value);
        self
    }

    /// Removes a pod annotation.
    pub fn without_pod_annotation(mut self, key: &str) -> Self {
        remove_kv(&mut self.pod_mut().annotations, key);
        self
    }

    /// Sets the pod's namespace.
    pub fn with_namespace(mut self, namespace: &str) -> Self {
        self.pod_mut().namespace = namespace.into();
        self
    }

    /// Sets a container label.
    pub fn with_container_label(mut self, key: &str, value: &str) -> Self {
        self.container_mut().set_label(key, value);
        self
    }

    /// Sets a container annotation.
    pub fn with_container_annotation(mut self, key: &str, value: &str) -> Self {
        self.container_mut().set_annotation(key, value);
        self
    }

    /// Renames the container.
    pub fn with_container_name(mut self, name: &str) -> Self {
        self.container_mut().name = name.into();
        self
    }

    /// Adds a mount to the container.
    pub fn with_mount(mut self, mount: Mount) -> Self {
        self.container_mut().mounts.push(mount);
        self
    }

    /// Sets the container's image as NRI 0.12.2 reports it (a runtime of
    /// NRI 0.12.0, such as containerd 2.3.4, sends none).
    pub fn with_image(mut self, name: &str, digest: &str) -> Self {
        self.container_mut().image =
            Some(Image { name: name.into(), digest: digest.into(), config_digest: String::new() });
        self
    }
}

fn is_pod_kind(kind: EventKind) -> bool {
    matches!(
        kind,
        EventKind::RunPodSandbox
            | EventKind::StopPodSandbox
            | EventKind::RemovePodSandbox
            | EventKind::UpdatePodSandbox
            | EventKind::PostUpdatePodSandbox
    )
}

impl From<WholeEvent> for TestEvent {
    fn from(whole: WholeEvent) -> Self {
        Self::new(whole)
    }
}

impl From<Validation> for TestEvent {
    fn from(v: Validation) -> Self {
        Self::new(WholeEvent::ValidateContainerAdjustment(v.build()))
    }
}

/// Builders of the records events and views are made of (test-only).
impl PodSandbox {
    /// A pod with an id, name and namespace (its uid is `<id>-uid`).
    pub fn new(id: &str, name: &str, namespace: &str) -> Self {
        PodSandbox {
            id: id.into(),
            name: name.into(),
            uid: format!("{id}-uid"),
            namespace: namespace.into(),
            ..PodSandbox::default()
        }
    }

    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.set_label(key, value);
        self
    }

    pub fn with_annotation(mut self, key: &str, value: &str) -> Self {
        self.set_annotation(key, value);
        self
    }

    pub fn set_label(&mut self, key: &str, value: &str) {
        set_kv(&mut self.labels, key, value);
    }

    pub fn set_annotation(&mut self, key: &str, value: &str) {
        set_kv(&mut self.annotations, key, value);
    }
}

impl Container {
    /// A container of `pod` being created (state `unknown`, as NRI shows a
    /// container in CreateContainer).
    pub fn new(id: &str, pod: &PodSandbox, name: &str) -> Self {
        Container { id: id.into(), pod_sandbox_id: pod.id.clone(), name: name.into(), ..Container::default() }
    }

    pub fn with_state(mut self, state: ContainerState) -> Self {
        self.state = state;
        self
    }

    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.set_label(key, value);
        self
    }

    pub fn with_annotation(mut self, key: &str, value: &str) -> Self {
        self.set_annotation(key, value);
        self
    }

    /// Adds `NAME=value` to the environment.
    pub fn with_env(mut self, name: &str, value: &str) -> Self {
        self.env.push(format!("{name}={value}"));
        self
    }

    pub fn with_args(mut self, args: &[&str]) -> Self {
        self.args = args.iter().map(|a| a.to_string()).collect();
        self
    }

    pub fn with_mount(mut self, mount: Mount) -> Self {
        self.mounts.push(mount);
        self
    }

    /// Sets the Linux resources.
    pub fn with_resources(mut self, resources: LinuxResources) -> Self {
        self.linux.get_or_insert_with(LinuxContainer::default).resources = Some(resources);
        self
    }

    pub fn set_label(&mut self, key: &str, value: &str) {
        set_kv(&mut self.labels, key, value);
    }

    pub fn set_annotation(&mut self, key: &str, value: &str) {
        set_kv(&mut self.annotations, key, value);
    }
}

impl PodInfo {
    /// A pod of the node view.
    pub fn new(id: &str, name: &str, namespace: &str) -> Self {
        PodInfo {
            id: id.into(),
            name: name.into(),
            namespace: namespace.into(),
            uid: format!("{id}-uid"),
            labels: Vec::new(),
            annotations: Vec::new(),
            containers: Vec::new(),
        }
    }

    /// The view's record of an event's pod.
    pub fn of(pod: &PodSandbox) -> Self {
        PodInfo {
            id: pod.id.clone(),
            name: pod.name.clone(),
            namespace: pod.namespace.clone(),
            uid: pod.uid.clone(),
            labels: pod.labels.clone(),
            annotations: pod.annotations.clone(),
            containers: Vec::new(),
        }
    }

    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        set_kv(&mut self.labels, key, value);
        self
    }

    pub fn with_annotation(mut self, key: &str, value: &str) -> Self {
        set_kv(&mut self.annotations, key, value);
        self
    }
}

impl ContainerInfo {
    /// A container of the node view.
    pub fn new(id: &str, pod_id: &str, name: &str, state: ContainerState) -> Self {
        ContainerInfo {
            id: id.into(),
            pod_id: pod_id.into(),
            name: name.into(),
            state,
            labels: Vec::new(),
            annotations: Vec::new(),
            resources: None,
        }
    }

    /// The view's record of an event's container.
    pub fn of(c: &Container) -> Self {
        ContainerInfo {
            id: c.id.clone(),
            pod_id: c.pod_sandbox_id.clone(),
            name: c.name.clone(),
            state: c.state,
            labels: c.labels.clone(),
            annotations: c.annotations.clone(),
            resources: c.linux.as_ref().and_then(|l| l.resources.clone()),
        }
    }

    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        set_kv(&mut self.labels, key, value);
        self
    }

    pub fn with_annotation(mut self, key: &str, value: &str) -> Self {
        set_kv(&mut self.annotations, key, value);
        self
    }

    pub fn with_resources(mut self, resources: LinuxResources) -> Self {
        self.resources = Some(resources);
        self
    }
}

/// A validate-container-adjustment event: the container as the runtime
/// sent it and what the chain's policies did to it, with the owner of
/// every field recorded as the host records it (per key for compound
/// fields, every contributor for OCI hooks, `-NN-name` for a removal).
///
/// ```ignore
/// let create = TestEvent::fixture("CreateContainer");
/// let event: TestEvent = Validation::of(&create)
///     .adjusted_by("10-hooks", &ContainerAdjustment::new().add_hook(HookStage::Prestart, Hook::new("/bin/x")))
///     .into();
/// ```
///
/// Policies are merged in the order given. [`Validation::adjusted_by`]
/// lets later setters replace earlier ones; [`Validation::try_adjust`]
/// refuses, as the host does, an adjustment that sets a field another
/// policy set.
#[derive(Debug, Clone, PartialEq)]
pub struct Validation {
    event: ValidationEvent,
}

impl Validation {
    pub fn new(pod: PodSandbox, container: Container) -> Self {
        Validation {
            event: ValidationEvent {
                pod,
                container,
                adjust: None,
                update: Vec::new(),
                owners: Vec::new(),
                plugins: Vec::new(),
            },
        }
    }

    /// The pod and container of a container event (a create-container).
    pub fn of(event: &TestEvent) -> Self {
        let pod = event.whole().pod().cloned().expect("an event with a pod");
        let container = event.whole().container().cloned().expect("an event with a container");
        Self::new(pod, container)
    }

    /// Merges `policy`'s adjustment of the container, recording it as the
    /// owner of what it set.
    pub fn adjusted_by(mut self, policy: &str, adjust: &ContainerAdjustment) -> Self {
        let id = self.event.container.id.clone();
        let owners = &mut self.event.owners;
        let merged = self.event.adjust.get_or_insert_with(ContainerAdjustment::default);
        owners::merge(owners, &id, policy, merged, adjust, true).expect("a lenient merge records over conflicts");
        self
    }

    /// Merges `policy`'s adjustment as the host's chain would: refused,
    /// leaving the validation as it was, when the host would refuse it
    /// (output it does not accept, [`check_reply`]; or a field another
    /// policy set, or this one twice); else merged as by
    /// [`Validation::adjusted_by`].
    pub fn try_adjust(&mut self, policy: &str, adjust: &ContainerAdjustment) -> Result<(), Refusal> {
        check::check_values(EventKind::CreateContainer, &Reply::adjust(adjust.clone())).map_err(Refusal::Invalid)?;
        let id = self.event.container.id.clone();
        let mut owners = self.event.owners.clone();
        let mut merged = self.event.adjust.clone().unwrap_or_default();
        owners::merge(&mut owners, &id, policy, &mut merged, adjust, false).map_err(|c| {
            // A policy that contradicts itself made invalid output, as the
            // host's chain says; only two policies make a conflict.
            if c.first == c.second {
                let key = if c.key.is_empty() { String::new() } else { format!(" {:?}", c.key) };
                Refusal::Invalid(format!("it sets {}{key} twice", crate::field::name(c.field)))
            } else {
                Refusal::Conflict(c)
            }
        })?;
        self.event.owners = owners;
        self.event.adjust = Some(merged);
        Ok(())
    }

    /// The owners recorded so far.
    pub fn owners(&self) -> &[FieldOwner] {
        &self.event.owners
    }

    /// Adds `policy`'s update of another container.
    pub fn updated_by(mut self, policy: &str, update: ContainerUpdate) -> Self {
        let id = update.container_id.clone();
        if let Some(r) = &update.resources {
            owners::resources(&mut self.event.owners, &id, policy, r);
        }
        self.event.update.push(update);
        self
    }

    pub fn build(self) -> ValidationEvent {
        self.event
    }
}

mod owners;

pub use owners::Conflict;

/// Why the host would refuse one policy's adjustment in a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Output the host does not accept ([`check_reply`]'s error).
    Invalid(String),
    /// A field another policy set (or removed) before.
    Conflict(Conflict),
}

/// The directory of the captured containerd requests: `$NRI_WASM_FIXTURES`
/// if set, else `tests/fixtures/containerd-2.3.4` in the nearest ancestor
/// of the crate under test (or of this SDK) that has it.
pub fn fixture_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os(ENV_FIXTURES) {
        return Ok(PathBuf::from(dir));
    }
    let starts =
        [std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from), Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")))];
    let mut tried = Vec::new();
    for start in starts.into_iter().flatten() {
        for dir in start.ancestors() {
            let candidate = dir.join(FIXTURE_DIR);
            if candidate.is_dir() {
                return Ok(candidate);
            }
            tried.push(candidate.display().to_string());
        }
    }
    Err(format!("fixture directory not found (set {ENV_FIXTURES}); looked in {}", tried.join(", ")))
}

/// The text of fixture `<name>.json`.
pub fn fixture_text(name: &str) -> Result<String, String> {
    let path = fixture_dir()?.join(format!("{name}.json"));
    std::fs::read_to_string(&path).map_err(|e| format!("cannot read fixture {}: {e}", path.display()))
}
