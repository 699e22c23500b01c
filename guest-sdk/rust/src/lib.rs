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
//!     fn create_container(e: ContainerEvent) -> Result<Reply, String> {
//!         if e.container.annotation("example.com/privileged") == Some("true") {
//!             return Err("privileged containers are not allowed".into());
//!         }
//!         Ok(Reply::none())
//!     }
//! }
//!
//! export_policy!(DenyPrivileged);
//! ```
//!
//! Build with `cargo build --release --target wasm32-wasip2`; the `.wasm` in
//! `target/wasm32-wasip2/release/` is the component to install as
//! `NN-name.wasm`.

// The generated record types cannot carry derives of ours, so their
// `Default` impls are written out below.
#![allow(clippy::derivable_impls)]

extern crate self as nri_wasm_sdk;

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
    });
}

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

pub mod alloc;

#[cfg(all(feature = "bump-alloc", target_arch = "wasm32"))]
#[global_allocator]
static ALLOC: alloc::BumpAlloc = alloc::BumpAlloc::new();

pub use bindings::nri_wasm::policy::host::{log as host_log, node, runtime};
pub use bindings::nri_wasm::policy::types::*;

/// The host's view of the node: pods, containers, topology.
pub mod view {
    pub use crate::bindings::nri_wasm::policy::node::*;

    /// The ids of the containers `filter` selects, sorted.
    pub fn container_ids(filter: &ContainerFilter) -> ContainerIds {
        ContainerIds(crate::bindings::nri_wasm::policy::node::container_ids(filter))
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
}

static SETTINGS: OnceLock<String> = OnceLock::new();

/// The operator's settings for this policy (empty if none were given),
/// asked of the host on first use.
pub fn settings() -> &'static str {
    SETTINGS.get_or_init(bindings::nri_wasm::policy::host::settings)
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

    fn run_pod_sandbox(_event: PodEvent) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn stop_pod_sandbox(_event: PodEvent) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn remove_pod_sandbox(_event: PodEvent) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn create_container(_event: ContainerEvent) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn post_create_container(_event: ContainerEvent) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn start_container(_event: ContainerEvent) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn post_start_container(_event: ContainerEvent) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn update_container(_event: UpdateContainerEvent) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn post_update_container(_event: ContainerEvent) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn stop_container(_event: ContainerEvent) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn remove_container(_event: ContainerEvent) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn update_pod_sandbox(_event: UpdatePodSandboxEvent) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn post_update_pod_sandbox(_event: PodEvent) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    /// Return `Err(reason)` to reject the chain's merged adjustment.
    fn validate_container_adjustment(_event: ValidationEvent) -> Result<Reply, String> {
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
pub fn __handle<P: Policy>(event: Event) -> Result<Reply, String> {
    match event {
        Event::RunPodSandbox(e) => P::run_pod_sandbox(e),
        Event::StopPodSandbox(e) => P::stop_pod_sandbox(e),
        Event::RemovePodSandbox(e) => P::remove_pod_sandbox(e),
        Event::CreateContainer(e) => P::create_container(e),
        Event::PostCreateContainer(e) => P::post_create_container(e),
        Event::StartContainer(e) => P::start_container(e),
        Event::PostStartContainer(e) => P::post_start_container(e),
        Event::UpdateContainer(e) => P::update_container(e),
        Event::PostUpdateContainer(e) => P::post_update_container(e),
        Event::StopContainer(e) => P::stop_container(e),
        Event::RemoveContainer(e) => P::remove_container(e),
        Event::UpdatePodSandbox(e) => P::update_pod_sandbox(e),
        Event::PostUpdatePodSandbox(e) => P::post_update_pod_sandbox(e),
        Event::ValidateContainerAdjustment(e) => P::validate_container_adjustment(e),
        Event::Synchronize => P::synchronize(),
    }
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

            fn handle(event: $crate::Event) -> Result<$crate::Reply, String> {
                $crate::__handle::<$policy>(event)
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
        self.env.iter().find_map(|e| e.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
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
