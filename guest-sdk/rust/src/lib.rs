//! Write nri-wasm policies in Rust.
//!
//! A policy implements [`Policy`]: it names the events it wants in
//! [`Policy::events`] and overrides only the handlers of those events; every
//! other handler has a default that changes nothing. [`export_policy!`] turns
//! the type into the component's exports.
//!
//! ```ignore
//! use nri_wasm_sdk::*;
//!
//! struct DenyPrivileged;
//!
//! impl Policy for DenyPrivileged {
//!     fn events() -> Vec<EventKind> {
//!         vec![EventKind::CreateContainer]
//!     }
//!
//!     fn create_container(e: &Event) -> Result<Reply, String> {
//!         if e.container_annotation("example.com/privileged").as_deref() == Some("true") {
//!             return Err("privileged containers are not allowed".into());
//!         }
//!         Ok(Reply::none())
//!     }
//! }
//!
//! export_policy!(DenyPrivileged);
//! ```
//!
//! A policy also declares what it may change and read, with
//! [`capabilities!`]: `nri_wasm_sdk::capabilities!("env", "annotations");`.
//! The host refuses output beyond what is declared and granted by the
//! operator (docs/wit.md lists the names; the dangerous ones such as
//! `hooks`, `mounts` or `devices` need a `grant` in the settings file).
//!
//! A handler receives an [`Event`] and reads from it what it needs: each
//! read asks the host once (and is kept), so a policy that looks at one
//! annotation pays for one string, not for the whole pod and container.
//!
//! Build with `cargo build --release --target wasm32-wasip2`; the `.wasm` in
//! `target/wasm32-wasip2/release/` is the component to install as
//! `NN-name.wasm`.

// The generated record types cannot carry derives of ours, so their
// `Default` impls are written out below.
#![allow(clippy::derivable_impls)]

extern crate self as nri_wasm_sdk;

use std::cell::OnceCell;
#[cfg(target_arch = "wasm32")]
use std::sync::OnceLock;

/// Generated bindings of the `nri-wasm:policy` world.
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "policy",
        pub_export_macro: true,
        export_macro_name: "__export_policy_world",
        default_bindings_module: "nri_wasm_sdk::bindings",
        runtime_path: "nri_wasm_sdk::__wit_bindgen::rt",
        additional_derives: [PartialEq],
    });
}

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

pub mod alloc;
pub mod field;
mod sys;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

#[cfg(all(feature = "bump-alloc", target_arch = "wasm32"))]
#[global_allocator]
static ALLOC: alloc::BumpAlloc = alloc::BumpAlloc::new();

pub use bindings::nri_wasm::policy::event::{ContainerMeta, PodMeta};
/// The whole event as one value (see [`Event::whole`]).
pub use bindings::nri_wasm::policy::types::Event as WholeEvent;
pub use bindings::nri_wasm::policy::types::*;
pub use sys::host::{log as host_log, node, runtime};

use sys::event as host_event;

/// The event a handler handles, read from the host on demand.
///
/// Every accessor asks the host at most once and keeps the answer; the
/// lookups (`pod_label`, `container_annotation`, ...) answer from the whole
/// record instead when it was read already. What a policy sees is the event
/// as the policies before it in the chain left it.
#[derive(Debug)]
pub struct Event {
    kind: EventKind,
    whole: OnceCell<WholeEvent>,
    pod: OnceCell<Option<PodSandbox>>,
    container: OnceCell<Option<Container>>,
    pod_meta: OnceCell<Option<PodMeta>>,
    container_meta: OnceCell<Option<ContainerMeta>>,
    env: OnceCell<Vec<String>>,
    resources: OnceCell<Option<LinuxResources>>,
    requested: OnceCell<Option<LinuxResources>>,
}

impl Event {
    #[doc(hidden)]
    pub fn __new(kind: EventKind) -> Self {
        Event {
            kind,
            whole: OnceCell::new(),
            pod: OnceCell::new(),
            container: OnceCell::new(),
            pod_meta: OnceCell::new(),
            container_meta: OnceCell::new(),
            env: OnceCell::new(),
            resources: OnceCell::new(),
            requested: OnceCell::new(),
        }
    }

    /// Which event this is.
    pub fn kind(&self) -> EventKind {
        self.kind
    }

    /// Everything at once: the costliest read. The event-specific parts
    /// (the resources of an update, the merged adjustment being validated)
    /// are only here; see [`Event::requested_resources`] and
    /// [`Event::validation`].
    pub fn whole(&self) -> &WholeEvent {
        self.whole.get_or_init(host_event::whole)
    }

    /// The whole pod. Panics on synchronize, which has none.
    pub fn pod(&self) -> &PodSandbox {
        self.pod.get_or_init(host_event::pod).as_ref().unwrap_or_else(|| panic!("{:?} has no pod", self.kind))
    }

    /// The whole container. Panics on pod events, which have none.
    pub fn container(&self) -> &Container {
        self.container
            .get_or_init(host_event::container)
            .as_ref()
            .unwrap_or_else(|| panic!("{:?} has no container", self.kind))
    }

    fn pod_read(&self) -> Option<&PodSandbox> {
        self.pod.get().and_then(Option::as_ref)
    }

    fn container_read(&self) -> Option<&Container> {
        self.container.get().and_then(Option::as_ref)
    }

    /// The pod's id, name, uid, namespace, runtime handler and pid. Panics
    /// on synchronize.
    pub fn pod_meta(&self) -> &PodMeta {
        self.pod_meta
            .get_or_init(host_event::pod_metadata)
            .as_ref()
            .unwrap_or_else(|| panic!("{:?} has no pod", self.kind))
    }

    /// The container's id, pod id, name, state and pid. Panics on pod
    /// events.
    pub fn container_meta(&self) -> &ContainerMeta {
        self.container_meta
            .get_or_init(host_event::container_metadata)
            .as_ref()
            .unwrap_or_else(|| panic!("{:?} has no container", self.kind))
    }

    pub fn pod_label(&self, key: &str) -> Option<String> {
        match self.pod_read() {
            Some(p) => p.label(key).map(str::to_string),
            None => host_event::pod_label(key),
        }
    }

    /// Every pod label, sorted by key.
    pub fn pod_labels(&self) -> Vec<KeyValue> {
        match self.pod_read() {
            Some(p) => p.labels.clone(),
            None => host_event::pod_labels(),
        }
    }

    pub fn pod_annotation(&self, key: &str) -> Option<String> {
        match self.pod_read() {
            Some(p) => p.annotation(key).map(str::to_string),
            None => host_event::pod_annotation(key),
        }
    }

    /// Every pod annotation, sorted by key.
    pub fn pod_annotations(&self) -> Vec<KeyValue> {
        match self.pod_read() {
            Some(p) => p.annotations.clone(),
            None => host_event::pod_annotations(),
        }
    }

    pub fn container_label(&self, key: &str) -> Option<String> {
        match self.container_read() {
            Some(c) => c.label(key).map(str::to_string),
            None => host_event::container_label(key),
        }
    }

    /// Every container label, sorted by key.
    pub fn container_labels(&self) -> Vec<KeyValue> {
        match self.container_read() {
            Some(c) => c.labels.clone(),
            None => host_event::container_labels(),
        }
    }

    pub fn container_annotation(&self, key: &str) -> Option<String> {
        match self.container_read() {
            Some(c) => c.annotation(key).map(str::to_string),
            None => host_event::container_annotation(key),
        }
    }

    /// Every container annotation, sorted by key.
    pub fn container_annotations(&self) -> Vec<KeyValue> {
        match self.container_read() {
            Some(c) => c.annotations.clone(),
            None => host_event::container_annotations(),
        }
    }

    /// The container's environment, `NAME=value` strings in order.
    pub fn env(&self) -> &[String] {
        if let Some(c) = self.container_read() {
            return &c.env;
        }
        self.env.get_or_init(host_event::container_env)
    }

    /// The value of the container's environment variable `name`.
    pub fn env_var(&self, name: &str) -> Option<String> {
        if let Some(c) = self.container_read() {
            return c.env_var(name).map(str::to_string);
        }
        match self.env.get() {
            Some(env) => env_value(env, name).map(str::to_string),
            None => host_event::container_env_var(name),
        }
    }

    /// The container's Linux resources, as far as they are set.
    pub fn resources(&self) -> Option<&LinuxResources> {
        if let Some(c) = self.container_read() {
            return c.linux.as_ref().and_then(|l| l.resources.as_ref());
        }
        self.resources.get_or_init(host_event::container_resources).as_ref()
    }

    /// On update-container: the resources the runtime is about to apply,
    /// as the policies before left them.
    pub fn requested_resources(&self) -> Option<&LinuxResources> {
        self.requested.get_or_init(host_event::requested_resources).as_ref()
    }

    /// On update-pod-sandbox: the pod's new resources and overhead.
    pub fn pod_update(&self) -> Option<&UpdatePodSandboxEvent> {
        match self.whole() {
            WholeEvent::UpdatePodSandbox(e) => Some(e),
            _ => None,
        }
    }

    /// On validate-container-adjustment: the merged result of the chain.
    pub fn validation(&self) -> Option<&ValidationEvent> {
        match self.whole() {
            WholeEvent::ValidateContainerAdjustment(e) => Some(e),
            _ => None,
        }
    }
}

impl EventKind {
    /// The kind's WIT name (`create-container`, ...).
    pub fn name(self) -> &'static str {
        match self {
            EventKind::RunPodSandbox => "run-pod-sandbox",
            EventKind::StopPodSandbox => "stop-pod-sandbox",
            EventKind::RemovePodSandbox => "remove-pod-sandbox",
            EventKind::CreateContainer => "create-container",
            EventKind::PostCreateContainer => "post-create-container",
            EventKind::StartContainer => "start-container",
            EventKind::PostStartContainer => "post-start-container",
            EventKind::UpdateContainer => "update-container",
            EventKind::PostUpdateContainer => "post-update-container",
            EventKind::StopContainer => "stop-container",
            EventKind::RemoveContainer => "remove-container",
            EventKind::UpdatePodSandbox => "update-pod-sandbox",
            EventKind::PostUpdatePodSandbox => "post-update-pod-sandbox",
            EventKind::ValidateContainerAdjustment => "validate-container-adjustment",
            EventKind::Synchronize => "synchronize",
        }
    }
}

impl WholeEvent {
    /// The kind of this event.
    pub fn kind(&self) -> EventKind {
        match self {
            WholeEvent::RunPodSandbox(_) => EventKind::RunPodSandbox,
            WholeEvent::StopPodSandbox(_) => EventKind::StopPodSandbox,
            WholeEvent::RemovePodSandbox(_) => EventKind::RemovePodSandbox,
            WholeEvent::CreateContainer(_) => EventKind::CreateContainer,
            WholeEvent::PostCreateContainer(_) => EventKind::PostCreateContainer,
            WholeEvent::StartContainer(_) => EventKind::StartContainer,
            WholeEvent::PostStartContainer(_) => EventKind::PostStartContainer,
            WholeEvent::UpdateContainer(_) => EventKind::UpdateContainer,
            WholeEvent::PostUpdateContainer(_) => EventKind::PostUpdateContainer,
            WholeEvent::StopContainer(_) => EventKind::StopContainer,
            WholeEvent::RemoveContainer(_) => EventKind::RemoveContainer,
            WholeEvent::UpdatePodSandbox(_) => EventKind::UpdatePodSandbox,
            WholeEvent::PostUpdatePodSandbox(_) => EventKind::PostUpdatePodSandbox,
            WholeEvent::ValidateContainerAdjustment(_) => EventKind::ValidateContainerAdjustment,
            WholeEvent::Synchronize => EventKind::Synchronize,
        }
    }

    /// The event's pod; `None` on synchronize.
    pub fn pod(&self) -> Option<&PodSandbox> {
        match self {
            WholeEvent::RunPodSandbox(e)
            | WholeEvent::StopPodSandbox(e)
            | WholeEvent::RemovePodSandbox(e)
            | WholeEvent::PostUpdatePodSandbox(e) => Some(&e.pod),
            WholeEvent::CreateContainer(e)
            | WholeEvent::PostCreateContainer(e)
            | WholeEvent::StartContainer(e)
            | WholeEvent::PostStartContainer(e)
            | WholeEvent::PostUpdateContainer(e)
            | WholeEvent::StopContainer(e)
            | WholeEvent::RemoveContainer(e) => Some(&e.pod),
            WholeEvent::UpdateContainer(e) => Some(&e.pod),
            WholeEvent::UpdatePodSandbox(e) => Some(&e.pod),
            WholeEvent::ValidateContainerAdjustment(e) => Some(&e.pod),
            WholeEvent::Synchronize => None,
        }
    }

    /// The event's container; `None` on pod events and synchronize.
    pub fn container(&self) -> Option<&Container> {
        match self {
            WholeEvent::CreateContainer(e)
            | WholeEvent::PostCreateContainer(e)
            | WholeEvent::StartContainer(e)
            | WholeEvent::PostStartContainer(e)
            | WholeEvent::PostUpdateContainer(e)
            | WholeEvent::StopContainer(e)
            | WholeEvent::RemoveContainer(e) => Some(&e.container),
            WholeEvent::UpdateContainer(e) => Some(&e.container),
            WholeEvent::ValidateContainerAdjustment(e) => Some(&e.container),
            _ => None,
        }
    }
}

fn env_value<'a>(env: &'a [String], name: &str) -> Option<&'a str> {
    env.iter().find_map(|e| e.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
}

/// The host's view of the node: pods, containers, topology.
pub mod view {
    pub use crate::bindings::nri_wasm::policy::node::*;
    // The functions, from where the SDK reaches the host (the generated
    // imports themselves on wasm32, the test host elsewhere).
    pub use crate::sys::node::{container, containers, pod, pods, topology};

    /// The ids of the containers `filter` selects, sorted.
    pub fn container_ids(filter: &ContainerFilter) -> ContainerIds {
        ContainerIds(crate::sys::node::container_ids(filter))
    }

    /// Container ids as the host sends them (packed), read in place.
    #[derive(Debug, Clone)]
    pub struct ContainerIds(IdList);

    impl ContainerIds {
        /// The id at `i`.
        pub fn get(&self, i: usize) -> Option<&str> {
            let end = *self.0.ends.get(i)? as usize;
            let start = if i == 0 { 0 } else { self.0.ends[i - 1] as usize };
            self.0.ids.get(start..end)
        }

        pub fn iter(&self) -> impl Iterator<Item = &str> {
            (0..self.len()).filter_map(|i| self.get(i))
        }

        pub fn len(&self) -> usize {
            self.0.ends.len()
        }

        pub fn is_empty(&self) -> bool {
            self.0.ends.is_empty()
        }

        pub fn contains(&self, id: &str) -> bool {
            self.iter().any(|i| i == id)
        }
    }

    impl ContainerFilter {
        /// Every container.
        pub fn all() -> Self {
            ContainerFilter { pod_id: None, states: Vec::new(), labels: Vec::new(), pod_labels: Vec::new() }
        }

        /// The containers of one pod.
        pub fn of_pod(pod_id: &str) -> Self {
            ContainerFilter { pod_id: Some(pod_id.into()), ..Self::all() }
        }

        /// Only containers in one of `states`.
        pub fn in_states(mut self, states: &[crate::ContainerState]) -> Self {
            self.states = states.to_vec();
            self
        }

        /// Only containers carrying label `key=value`.
        pub fn with_label(mut self, key: &str, value: &str) -> Self {
            self.labels.push(crate::kv(key, value));
            self
        }

        /// Only containers whose pod carries label `key=value`.
        pub fn with_pod_label(mut self, key: &str, value: &str) -> Self {
            self.pod_labels.push(crate::kv(key, value));
            self
        }
    }

    impl ContainerInfo {
        pub fn label(&self, key: &str) -> Option<&str> {
            crate::find(&self.labels, key)
        }

        pub fn annotation(&self, key: &str) -> Option<&str> {
            crate::find(&self.annotations, key)
        }
    }

    impl PodInfo {
        pub fn label(&self, key: &str) -> Option<&str> {
            crate::find(&self.labels, key)
        }

        pub fn annotation(&self, key: &str) -> Option<&str> {
            crate::find(&self.annotations, key)
        }
    }
}

/// The policy's own key-value state (see `wit/state.wit` for when writes
/// become permanent).
pub mod state {
    pub use crate::bindings::nri_wasm::policy::state::*;
    pub use crate::sys::state::{get, keys, remove, set};
}

#[cfg(target_arch = "wasm32")]
static SETTINGS: OnceLock<String> = OnceLock::new();

/// The operator's settings for this policy (empty if none were given),
/// asked of the host on first use.
#[cfg(target_arch = "wasm32")]
pub fn settings() -> &'static str {
    SETTINGS.get_or_init(sys::host::settings)
}

/// The operator's settings for this policy (empty if none were given): in
/// a native build, those of the [`testing::TestHost`] running the call.
#[cfg(not(target_arch = "wasm32"))]
pub fn settings() -> &'static str {
    testing::fake::settings()
}

/// Parses a kernel CPU list such as `0-3,8` (what cpusets are written as).
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, String> {
    let mut cpus = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let lo: u32 = lo.trim().parse().map_err(|_| format!("bad CPU number in {part:?}"))?;
        let hi: u32 = hi.trim().parse().map_err(|_| format!("bad CPU number in {part:?}"))?;
        if hi < lo || hi - lo > 65_535 {
            return Err(format!("bad CPU range {part:?}"));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Formats CPUs as a kernel CPU list (`0-3,8`).
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        while i + 1 < sorted.len() && sorted[i + 1] == sorted[i] + 1 {
            i += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == sorted[i] {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{}", sorted[i]));
        }
        i += 1;
    }
    out
}

/// Logs a line at `level`, tagged by the host with the policy's name.
pub fn log(level: LogLevel, message: &str) {
    host_log(level, message)
}

/// Every lifecycle event of pods and containers: what a policy that wants
/// to see everything returns from [`Policy::events`] (add
/// `ValidateContainerAdjustment` and `Synchronize` to it for those steps).
pub const LIFECYCLE_EVENTS: [EventKind; 13] = [
    EventKind::RunPodSandbox,
    EventKind::StopPodSandbox,
    EventKind::RemovePodSandbox,
    EventKind::CreateContainer,
    EventKind::PostCreateContainer,
    EventKind::StartContainer,
    EventKind::PostStartContainer,
    EventKind::UpdateContainer,
    EventKind::PostUpdateContainer,
    EventKind::StopContainer,
    EventKind::RemoveContainer,
    EventKind::UpdatePodSandbox,
    EventKind::PostUpdatePodSandbox,
];

/// A policy. Override `events` and the handlers of those events.
pub trait Policy {
    /// The events the host delivers to this policy.
    fn events() -> Vec<EventKind>;

    /// Checks the settings when the host loads the policy (the component's
    /// `configure`); an error keeps the policy from loading. Handlers read
    /// the settings with [`settings`]: they run in fresh instances, which
    /// have not seen this call.
    fn init(_settings: &str) -> Result<(), String> {
        Ok(())
    }

    fn run_pod_sandbox(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn stop_pod_sandbox(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn remove_pod_sandbox(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn create_container(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn post_create_container(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn start_container(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn post_start_container(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn update_container(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn post_update_container(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn stop_container(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn remove_container(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn update_pod_sandbox(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn post_update_pod_sandbox(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    /// Return `Err(reason)` to reject the chain's merged adjustment.
    fn validate_container_adjustment(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    /// The runtime (re)connected; the node view holds everything it
    /// reported. Reconcile state here; updates go back to the runtime.
    fn synchronize() -> Result<Reply, String> {
        Ok(Reply::none())
    }
}

#[doc(hidden)]
pub fn __init<P: Policy>(settings: String) -> Result<Vec<EventKind>, String> {
    P::init(&settings)?;
    Ok(P::events())
}

#[doc(hidden)]
pub fn __handle<P: Policy>(kind: EventKind) -> Result<Reply, String> {
    let e = Event::__new(kind);
    match kind {
        EventKind::RunPodSandbox => P::run_pod_sandbox(&e),
        EventKind::StopPodSandbox => P::stop_pod_sandbox(&e),
        EventKind::RemovePodSandbox => P::remove_pod_sandbox(&e),
        EventKind::CreateContainer => P::create_container(&e),
        EventKind::PostCreateContainer => P::post_create_container(&e),
        EventKind::StartContainer => P::start_container(&e),
        EventKind::PostStartContainer => P::post_start_container(&e),
        EventKind::UpdateContainer => P::update_container(&e),
        EventKind::PostUpdateContainer => P::post_update_container(&e),
        EventKind::StopContainer => P::stop_container(&e),
        EventKind::RemoveContainer => P::remove_container(&e),
        EventKind::UpdatePodSandbox => P::update_pod_sandbox(&e),
        EventKind::PostUpdatePodSandbox => P::post_update_pod_sandbox(&e),
        EventKind::ValidateContainerAdjustment => P::validate_container_adjustment(&e),
        EventKind::Synchronize => P::synchronize(),
    }
}

/// Declares what the policy may change and read: capability names, as the
/// host knows them (`env`, `annotations`, `args`, `rlimits`, `cpu`,
/// `memory`, `hugepages`, `blockio`, `rdt`, `unified`, `pids`,
/// `oom-score-adj`, `io-priority`, `scheduler`, `memory-policy`, `deny`,
/// `node`, and the dangerous `mounts`, `hooks`, `devices`, `cdi-devices`,
/// `namespaces`, `seccomp`, `sysctl`, `net-devices`, `cgroups-path`,
/// `updates`, `evictions`). The list is recorded in the component, in the
/// custom section `nri-wasm:capabilities`, where `nri-wasm check` shows it
/// and the host enforces it. Use it once per component; a component
/// without it is taken to declare nothing dangerous.
///
/// ```ignore
/// nri_wasm_sdk::capabilities!("env", "hooks");
/// ```
#[macro_export]
macro_rules! capabilities {
    ($($name:literal),* $(,)?) => {
        const __NRI_WASM_CAPABILITIES_TEXT: &str = concat!($($name, " ",)*);
        // A custom section only in the component: native builds (the
        // policy's own tests) keep a plain static, since other object
        // formats name sections differently.
        #[doc(hidden)]
        #[used]
        #[cfg_attr(target_arch = "wasm32", link_section = "nri-wasm:capabilities")]
        static __NRI_WASM_CAPABILITIES: [u8; __NRI_WASM_CAPABILITIES_TEXT.len()] = {
            let text = __NRI_WASM_CAPABILITIES_TEXT.as_bytes();
            let mut out = [0u8; __NRI_WASM_CAPABILITIES_TEXT.len()];
            let mut i = 0;
            while i < text.len() {
                out[i] = text[i];
                i += 1;
            }
            out
        };
    };
}

/// Exports a [`Policy`] implementation as the component's `configure` and `handle`.
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        #[doc(hidden)]
        pub struct __NriWasmExports;

        impl $crate::bindings::Guest for __NriWasmExports {
            fn configure(settings: String) -> Result<Vec<$crate::EventKind>, String> {
                $crate::__init::<$policy>(settings)
            }

            fn handle(kind: $crate::EventKind) -> Result<$crate::Reply, String> {
                $crate::__handle::<$policy>(kind)
            }
        }

        $crate::bindings::__export_policy_world!(__NriWasmExports);
    };
}

fn find<'a>(list: &'a [KeyValue], key: &str) -> Option<&'a str> {
    list.iter().find(|kv| kv.key == key).map(|kv| kv.value.as_str())
}

impl Container {
    pub fn annotation(&self, key: &str) -> Option<&str> {
        find(&self.annotations, key)
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        find(&self.labels, key)
    }

    /// The value of environment variable `name`.
    pub fn env_var(&self, name: &str) -> Option<&str> {
        env_value(&self.env, name)
    }
}

impl PodSandbox {
    pub fn annotation(&self, key: &str) -> Option<&str> {
        find(&self.annotations, key)
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        find(&self.labels, key)
    }
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue { key: key.to_string(), value: value.to_string() }
}

impl Reply {
    /// A reply that changes nothing.
    pub fn none() -> Self {
        Reply { adjust: None, update: Vec::new(), evict: Vec::new() }
    }

    /// A reply that adjusts the container being created.
    pub fn adjust(adjust: ContainerAdjustment) -> Self {
        Reply { adjust: Some(adjust), ..Self::none() }
    }

    /// Adds an update of another container.
    pub fn with_update(mut self, update: ContainerUpdate) -> Self {
        self.update.push(update);
        self
    }

    /// Adds an eviction.
    pub fn with_eviction(mut self, container_id: &str, reason: &str) -> Self {
        self.evict.push(ContainerEviction { container_id: container_id.into(), reason: reason.into() });
        self
    }
}

impl Default for ContainerAdjustment {
    fn default() -> Self {
        ContainerAdjustment {
            annotations: Vec::new(),
            mounts: Vec::new(),
            env: Vec::new(),
            hooks: None,
            linux: None,
            rlimits: Vec::new(),
            cdi_devices: Vec::new(),
            args: Vec::new(),
        }
    }
}

impl Default for LinuxContainerAdjustment {
    fn default() -> Self {
        LinuxContainerAdjustment {
            devices: Vec::new(),
            resources: None,
            cgroups_path: String::new(),
            oom_score_adj: None,
            io_priority: None,
            seccomp_policy: None,
            namespaces: Vec::new(),
            sysctl: Vec::new(),
            net_devices: Vec::new(),
            scheduler: None,
            rdt: None,
            memory_policy: None,
        }
    }
}

impl Default for LinuxResources {
    fn default() -> Self {
        LinuxResources {
            memory: None,
            cpu: None,
            hugepage_limits: Vec::new(),
            blockio_class: None,
            rdt_class: None,
            unified: Vec::new(),
            devices: Vec::new(),
            pids: None,
        }
    }
}

impl Default for LinuxMemory {
    fn default() -> Self {
        LinuxMemory {
            limit: None,
            reservation: None,
            swap: None,
            kernel: None,
            kernel_tcp: None,
            swappiness: None,
            disable_oom_killer: None,
            use_hierarchy: None,
        }
    }
}

impl Default for LinuxCpu {
    fn default() -> Self {
        LinuxCpu {
            shares: None,
            quota: None,
            period: None,
            realtime_runtime: None,
            realtime_period: None,
            cpus: String::new(),
            mems: String::new(),
        }
    }
}

impl ContainerAdjustment {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn set_annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.push(kv(key, value));
        self
    }

    pub fn remove_annotation(mut self, key: &str) -> Self {
        self.annotations.push(kv(&format!("-{key}"), ""));
        self
    }

    pub fn set_env(mut self, name: &str, value: &str) -> Self {
        self.env.push(kv(name, value));
        self
    }

    pub fn remove_env(mut self, name: &str) -> Self {
        self.env.push(kv(&format!("-{name}"), ""));
        self
    }

    pub fn add_mount(mut self, mount: Mount) -> Self {
        self.mounts.push(mount);
        self
    }

    pub fn remove_mount(mut self, destination: &str) -> Self {
        self.mounts.push(Mount {
            destination: format!("-{destination}"),
            type_: String::new(),
            source: String::new(),
            options: Vec::new(),
        });
        self
    }

    pub fn set_rlimit(mut self, kind: &str, soft: u64, hard: u64) -> Self {
        self.rlimits.push(PosixRlimit { type_: kind.into(), soft, hard });
        self
    }

    /// Replaces the container's arguments.
    pub fn replace_args(mut self, args: &[&str]) -> Self {
        self.args = std::iter::once(String::new()).chain(args.iter().map(|a| a.to_string())).collect();
        self
    }

    /// The Linux part, created on first use.
    pub fn linux_mut(&mut self) -> &mut LinuxContainerAdjustment {
        self.linux.get_or_insert_with(LinuxContainerAdjustment::default)
    }

    /// The resources, created on first use.
    pub fn resources_mut(&mut self) -> &mut LinuxResources {
        self.linux_mut().resources.get_or_insert_with(LinuxResources::default)
    }

    pub fn set_memory_limit(mut self, bytes: i64) -> Self {
        self.resources_mut().memory.get_or_insert_with(LinuxMemory::default).limit = Some(bytes);
        self
    }

    pub fn set_cpu_shares(mut self, shares: u64) -> Self {
        self.resources_mut().cpu.get_or_insert_with(LinuxCpu::default).shares = Some(shares);
        self
    }

    pub fn set_cpuset(mut self, cpus: &str) -> Self {
        self.resources_mut().cpu.get_or_insert_with(LinuxCpu::default).cpus = cpus.into();
        self
    }

    pub fn set_oom_score_adj(mut self, value: i64) -> Self {
        self.linux_mut().oom_score_adj = Some(value);
        self
    }
}

impl ContainerUpdate {
    /// An update of `container_id` with the given resources.
    pub fn new(container_id: &str, resources: LinuxResources) -> Self {
        ContainerUpdate { container_id: container_id.into(), resources: Some(resources), ignore_failure: false }
    }

    /// An update of `container_id`'s CPU settings only.
    pub fn cpu(container_id: &str, cpu: LinuxCpu) -> Self {
        Self::new(container_id, LinuxResources { cpu: Some(cpu), ..LinuxResources::default() })
    }

    /// Marks the update as one the event does not depend on.
    pub fn ignoring_failure(mut self) -> Self {
        self.ignore_failure = true;
        self
    }
}

/// The points in a container's life where an OCI hook runs, for
/// [`ContainerAdjustment::add_hook`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookStage {
    Prestart,
    CreateRuntime,
    CreateContainer,
    StartContainer,
    Poststart,
    Poststop,
}

impl HookStage {
    /// Every stage, in the order the runtime runs them.
    pub const ALL: [HookStage; 6] = [
        HookStage::Prestart,
        HookStage::CreateRuntime,
        HookStage::CreateContainer,
        HookStage::StartContainer,
        HookStage::Poststart,
        HookStage::Poststop,
    ];

    /// The stage's name as the OCI runtime specification writes it
    /// (`prestart`, `createRuntime`, `createContainer`, `startContainer`,
    /// `poststart`, `poststop`).
    pub fn name(self) -> &'static str {
        match self {
            HookStage::Prestart => "prestart",
            HookStage::CreateRuntime => "createRuntime",
            HookStage::CreateContainer => "createContainer",
            HookStage::StartContainer => "startContainer",
            HookStage::Poststart => "poststart",
            HookStage::Poststop => "poststop",
        }
    }

    /// The stage named `name` (the OCI name, or the same in kebab or snake
    /// case: `create-runtime`, `create_runtime`).
    pub fn parse(name: &str) -> Option<HookStage> {
        let plain: String = name.chars().filter(|c| *c != '-' && *c != '_').collect::<String>().to_ascii_lowercase();
        HookStage::ALL.into_iter().find(|s| s.name().to_ascii_lowercase() == plain)
    }

    /// The hooks of this stage in `hooks`.
    pub fn of(self, hooks: &Hooks) -> &Vec<Hook> {
        match self {
            HookStage::Prestart => &hooks.prestart,
            HookStage::CreateRuntime => &hooks.create_runtime,
            HookStage::CreateContainer => &hooks.create_container,
            HookStage::StartContainer => &hooks.start_container,
            HookStage::Poststart => &hooks.poststart,
            HookStage::Poststop => &hooks.poststop,
        }
    }

    /// The hooks of this stage in `hooks`, to change.
    pub fn of_mut(self, hooks: &mut Hooks) -> &mut Vec<Hook> {
        match self {
            HookStage::Prestart => &mut hooks.prestart,
            HookStage::CreateRuntime => &mut hooks.create_runtime,
            HookStage::CreateContainer => &mut hooks.create_container,
            HookStage::StartContainer => &mut hooks.start_container,
            HookStage::Poststart => &mut hooks.poststart,
            HookStage::Poststop => &mut hooks.poststop,
        }
    }
}

impl Hooks {
    /// Whether no stage has a hook.
    pub fn is_empty(&self) -> bool {
        HookStage::ALL.iter().all(|s| s.of(self).is_empty())
    }

    /// Every hook with its stage, stage by stage.
    pub fn iter(&self) -> impl Iterator<Item = (HookStage, &Hook)> {
        HookStage::ALL.into_iter().flat_map(move |s| s.of(self).iter().map(move |h| (s, h)))
    }
}

impl Default for Hooks {
    fn default() -> Self {
        Hooks {
            prestart: Vec::new(),
            create_runtime: Vec::new(),
            create_container: Vec::new(),
            start_container: Vec::new(),
            poststart: Vec::new(),
            poststop: Vec::new(),
        }
    }
}

impl Hook {
    /// A hook running the program at `path` (absolute) without arguments.
    pub fn new(path: &str) -> Self {
        Hook { path: path.into(), args: Vec::new(), env: Vec::new(), timeout: None }
    }

    /// Its command line, `args[0]` included (as in the OCI specification).
    pub fn with_args<S: AsRef<str>>(mut self, args: &[S]) -> Self {
        self.args = args.iter().map(|a| a.as_ref().to_string()).collect();
        self
    }

    /// Adds `NAME=value` to its environment.
    pub fn with_env(mut self, name: &str, value: &str) -> Self {
        self.env.push(format!("{name}={value}"));
        self
    }

    /// Seconds the runtime waits for it (positive).
    pub fn with_timeout(mut self, seconds: i64) -> Self {
        self.timeout = Some(seconds);
        self
    }
}

impl Mount {
    /// A bind mount of host path `source` at `destination` in the container.
    pub fn bind(source: &str, destination: &str, options: &[&str]) -> Self {
        Mount {
            destination: destination.into(),
            type_: "bind".into(),
            source: source.into(),
            options: options.iter().map(|o| o.to_string()).collect(),
        }
    }
}

impl LinuxDevice {
    /// A device node: `kind` is `c` (character), `b` (block), `u` or `p`.
    pub fn new(path: &str, kind: &str, major: i64, minor: i64) -> Self {
        LinuxDevice { path: path.into(), type_: kind.into(), major, minor, file_mode: None, uid: None, gid: None }
    }

    /// Its permission bits (`0o666`).
    pub fn with_file_mode(mut self, mode: u32) -> Self {
        self.file_mode = Some(mode);
        self
    }

    /// Its owner.
    pub fn with_owner(mut self, uid: u32, gid: u32) -> Self {
        self.uid = Some(uid);
        self.gid = Some(gid);
        self
    }
}

impl LinuxDeviceCgroup {
    /// A rule allowing `access` (some of `r`, `w`, `m`) to the device
    /// `kind` (`c` or `b`) `major:minor`.
    pub fn allow(kind: &str, major: i64, minor: i64, access: &str) -> Self {
        LinuxDeviceCgroup {
            allow: true,
            type_: kind.into(),
            major: Some(major),
            minor: Some(minor),
            access: access.into(),
        }
    }
}

impl ContainerAdjustment {
    /// Adds (or replaces, by path) a device node.
    pub fn add_device(mut self, device: LinuxDevice) -> Self {
        self.linux_mut().devices.push(device);
        self
    }

    /// Adds a rule to the container's device cgroup.
    pub fn allow_device(mut self, rule: LinuxDeviceCgroup) -> Self {
        self.resources_mut().devices.push(rule);
        self
    }

    /// Injects a CDI device by its fully qualified name (`vendor/class=name`).
    pub fn add_cdi_device(mut self, name: &str) -> Self {
        self.cdi_devices.push(name.into());
        self
    }

    /// Adds an OCI hook at `stage` (hooks accumulate across policies).
    pub fn add_hook(mut self, stage: HookStage, hook: Hook) -> Self {
        stage.of_mut(self.hooks.get_or_insert_with(Hooks::default)).push(hook);
        self
    }

    /// Sets the CPU quota and its period, in microseconds.
    pub fn set_cpu_quota(mut self, quota: i64, period: u64) -> Self {
        let cpu = self.resources_mut().cpu.get_or_insert_with(LinuxCpu::default);
        cpu.quota = Some(quota);
        cpu.period = Some(period);
        self
    }

    /// Sets the memory nodes the container may allocate from (`0-1`).
    pub fn set_cpuset_mems(mut self, mems: &str) -> Self {
        self.resources_mut().cpu.get_or_insert_with(LinuxCpu::default).mems = mems.into();
        self
    }

    /// Sets a cgroup v2 file (`cpu.weight`, `memory.high`, ...).
    pub fn set_unified(mut self, file: &str, value: &str) -> Self {
        self.resources_mut().unified.push(kv(file, value));
        self
    }
}

impl Default for PodSandbox {
    fn default() -> Self {
        PodSandbox {
            id: String::new(),
            name: String::new(),
            uid: String::new(),
            namespace: String::new(),
            labels: Vec::new(),
            annotations: Vec::new(),
            runtime_handler: String::new(),
            linux: None,
            pid: 0,
            ips: Vec::new(),
        }
    }
}

impl Default for Container {
    fn default() -> Self {
        Container {
            id: String::new(),
            pod_sandbox_id: String::new(),
            name: String::new(),
            state: ContainerState::Unknown,
            labels: Vec::new(),
            annotations: Vec::new(),
            args: Vec::new(),
            env: Vec::new(),
            mounts: Vec::new(),
            hooks: None,
            linux: None,
            pid: 0,
            rlimits: Vec::new(),
            created_at: 0,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            status_reason: String::new(),
            status_message: String::new(),
            cdi_devices: Vec::new(),
            user: None,
            image: None,
        }
    }
}

impl Default for LinuxContainer {
    fn default() -> Self {
        LinuxContainer {
            namespaces: Vec::new(),
            devices: Vec::new(),
            resources: None,
            oom_score_adj: None,
            cgroups_path: String::new(),
            io_priority: None,
            seccomp_profile: None,
            seccomp_policy: None,
            sysctl: Vec::new(),
            net_devices: Vec::new(),
            scheduler: None,
            rdt: None,
        }
    }
}

impl Default for LinuxPodSandbox {
    fn default() -> Self {
        LinuxPodSandbox {
            pod_overhead: None,
            pod_resources: None,
            cgroup_parent: String::new(),
            cgroups_path: String::new(),
            namespaces: Vec::new(),
            resources: None,
        }
    }
}
