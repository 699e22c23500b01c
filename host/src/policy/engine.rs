//! The WebAssembly engine: compiled once, instantiated fresh for every call.
//!
//! Expensive things are built once: the [`Engine`] (with the pooling
//! allocator when the host can reserve its address space, on-demand
//! allocation otherwise), the [`Linker`] with the host interface and an empty
//! WASI context, and per policy a [`CompiledPolicy`] holding its `PolicyPre`.
//! Cheap things are built per call: a [`Store`] with the call's limits (fuel,
//! epoch deadline, memory/table/instance caps) and a new instance. Nothing a
//! policy does in one call can be seen by the next one.
//!
//! Time is enforced with epoch interruption: a ticker thread advances the
//! engine's epoch every millisecond and every store gets a deadline in ticks.
//! The ticker holds only a weak reference, so dropping the engine stops it.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Linker, ResourceTable, TypedFunc};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, StoreLimits, StoreLimitsBuilder, Trap,
};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{host, node, state, wit, PolicyPre};
use super::event::CallEvent;
use super::manifest::PolicySpec;
use super::output::{GuestOutput, Written};
use super::state::{StateSnapshot, StateStore, StateTxn, StateWrites};
use crate::node::topology::Topology;
use crate::node::view::{ContainerEntry, ContainerFilter, NodeView};
use crate::nri::version::{EventKind, EventMask};

/// Interval of the epoch ticker: the granularity of wall-clock limits.
pub const EPOCH_TICK: Duration = Duration::from_millis(1);
/// Memory (and table) bytes a pool slot keeps resident between calls.
const KEEP_RESIDENT: usize = 2 << 20;
/// The `nri-wasm:policy` package versions this host loads: `0.3.x`.
pub const WIT_VERSION: &str = "0.3";
/// Most bytes of stdout, and of stderr, kept per call (the first and the
/// last half of what was written; see `output.rs`).
const OUTPUT_CAPACITY: usize = 16 << 10;

/// Engine-wide settings (the `[engine]` table of the host configuration).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct EngineSettings {
    /// Directory for compiled policies, so that a restart or reload does not
    /// compile unchanged components again. Must be writable only by the
    /// host: its files are loaded as native code.
    pub cache_dir: Option<PathBuf>,
    /// Use the pooling allocator (falls back to on-demand if it cannot be set up).
    pub pooling: bool,
    /// Policy calls that may run at the same time (also sizes the pool).
    pub max_concurrent_calls: u32,
    /// Largest linear memory any policy may be given, in MiB (pool slot size).
    pub max_memory_mib: u64,
    /// Policies whose memory the pool keeps ready between their calls. A
    /// policy past this many still runs, but its calls map and fault in its
    /// memory afresh. Each costs address space (`max-memory-mib`), and the
    /// pages its calls touch (up to 2 MiB) stay resident.
    pub warm_policies: u32,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self { cache_dir: None, pooling: true, max_concurrent_calls: 4, max_memory_mib: 256, warm_policies: 128 }
    }
}

impl EngineSettings {
    /// Checks the settings against the default limits of policies.
    pub fn validate(&self, defaults: &super::limits::Limits) -> Result<(), String> {
        if self.max_concurrent_calls == 0 {
            return Err("[engine] max-concurrent-calls must be positive".into());
        }
        if self.max_memory_mib == 0 || self.max_memory_mib > 4096 {
            return Err(format!("[engine] max-memory-mib {} must be in 1..=4096", self.max_memory_mib));
        }
        if self.warm_policies == 0 || self.warm_policies > 4096 {
            return Err(format!("[engine] warm-policies {} must be in 1..=4096", self.warm_policies));
        }
        if defaults.memory_mib > self.max_memory_mib {
            return Err(format!(
                "[policies.limits] memory-mib {} exceeds [engine] max-memory-mib {}",
                defaults.memory_mib, self.max_memory_mib
            ));
        }
        Ok(())
    }
}

/// Which instance allocator the engine ended up with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allocator {
    Pooling,
    /// On-demand, with the reason the pool was not used.
    OnDemand(String),
}

/// Setting up the engine failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("creating the wasmtime engine failed: {0}")]
    Create(String),
    #[error("linking the host interface failed: {0}")]
    Link(String),
}

/// Loading one policy failed; each variant names the step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("policy {policy}: cannot read {path}: {reason}")]
    Read { policy: String, path: String, reason: String },
    #[error("policy {policy}: not a valid WebAssembly component: {reason}")]
    Compile { policy: String, reason: String },
    #[error("policy {policy}: imports {import}, which the host does not provide (allowed: nri-wasm:policy/*, wasi:cli, wasi:io, wasi:clocks, wasi:random, wasi:filesystem, wasi:sockets)")]
    ForbiddenImport { policy: String, import: String },
    #[error("policy {policy}: built against {import}, but this host loads nri-wasm:policy@{WIT_VERSION}.x: rebuild it with the current SDK or WIT package")]
    Version { policy: String, import: String },
    #[error("policy {policy}: cannot be linked: {reason}")]
    Link { policy: String, reason: String },
    #[error("policy {policy}: does not implement the nri-wasm:policy world: {reason}")]
    World { policy: String, reason: String },
    #[error("policy {policy}: configure (its settings step) failed: {reason}")]
    Init { policy: String, reason: String },
    #[error("policy {policy}: memory-mib {asked} exceeds the engine's max-memory-mib {max}")]
    Limits { policy: String, asked: u64, max: u64 },
}

/// Which limit cut a call off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    Fuel,
    Time,
    Memory,
    Stack,
}

/// A call that did not produce an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("policy {policy} on {event}: fuel limit of {limit} exhausted")]
    OutOfFuel { policy: String, event: String, limit: u64 },
    #[error("policy {policy} on {event}: time limit of {limit_ms} ms exceeded")]
    Timeout { policy: String, event: String, limit_ms: u64 },
    #[error("policy {policy} on {event}: memory limit of {limit_mib} MiB exceeded")]
    MemoryLimit { policy: String, event: String, limit_mib: u64 },
    #[error("policy {policy} on {event}: stack overflow")]
    StackOverflow { policy: String, event: String },
    #[error("policy {policy} on {event}: trapped: {trap}")]
    Trap { policy: String, event: String, trap: String },
    #[error("policy {policy} on {event}: configure rejected its settings: {reason}")]
    Init { policy: String, event: String, reason: String },
}

impl CallError {
    /// The limit that was hit, if the call was cut off by one.
    pub fn limit(&self) -> Option<LimitKind> {
        match self {
            Self::OutOfFuel { .. } => Some(LimitKind::Fuel),
            Self::Timeout { .. } => Some(LimitKind::Time),
            Self::MemoryLimit { .. } => Some(LimitKind::Memory),
            Self::StackOverflow { .. } => Some(LimitKind::Stack),
            _ => None,
        }
    }
}

/// Read-only facts offered to policies through the host interface.
#[derive(Debug, Clone)]
pub struct Facts {
    pub runtime: wit::RuntimeInfo,
    pub node: wit::NodeInfo,
    /// The node's topology, as policies see it (`node.topology`).
    pub topology: node::NodeTopology,
}

impl Facts {
    /// Facts before any runtime connected: the runtime's fields are empty
    /// until Configure names it.
    pub fn unconfigured(node: wit::NodeInfo, topology: &Topology) -> Self {
        let runtime = wit::RuntimeInfo { name: String::new(), version: String::new(), nri_version: String::new() };
        Self { runtime, node, topology: topology.into() }
    }

    /// Node facts read from the running system.
    pub fn node_from_system() -> wit::NodeInfo {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_string();
        let memory_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()))
            })
            .map_or(0, |kb| kb * 1024);
        wit::NodeInfo {
            hostname,
            arch: std::env::consts::ARCH.to_string(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            memory_bytes,
        }
    }
}

/// What a call may read besides its event: facts, the node view, the
/// committed state of every policy. Cheap to clone (shared parts only).
#[derive(Debug, Clone)]
pub struct CallEnv {
    pub facts: Arc<Facts>,
    /// The node view as of before the event.
    pub view: Arc<NodeView>,
    pub states: Arc<StateStore>,
}

impl CallEnv {
    /// An environment with an empty node view and in-memory state.
    pub fn detached(facts: Arc<Facts>) -> Self {
        Self { facts, view: Arc::default(), states: Arc::new(StateStore::in_memory()) }
    }
}

/// Per-call state of a store.
pub struct CallState {
    limits: StoreLimits,
    /// Built on the guest's first WASI call: most calls make none, and an
    /// empty context still costs the seeding of its random sources.
    wasi: Option<Box<Wasi>>,
    /// Seed of the policy's random sources.
    seed: u64,
    table: ResourceTable,
    policy: Arc<str>,
    settings: Arc<str>,
    facts: Arc<Facts>,
    view: Arc<NodeView>,
    /// The event's container as the chain has it now, standing in for the
    /// view's entry.
    current: Option<Arc<ContainerEntry>>,
    state: StateTxn,
    /// The event being handled; `None` in `configure`.
    event: Option<CallEvent>,
}

impl CallState {
    /// The event of this call (`None` in `configure`).
    pub fn event(&self) -> Option<&CallEvent> {
        self.event.as_ref()
    }

    pub fn policy_name(&self) -> &str {
        &self.policy
    }
}

/// The empty WASI context of a call, and the guest's stdout and stderr.
struct Wasi {
    ctx: WasiCtx,
    stdout: GuestOutput,
    stderr: GuestOutput,
}

impl Wasi {
    /// No files, environment, arguments, sockets or name lookup. Randomness
    /// is seeded per policy, not per call: a policy's language runtime (hash
    /// maps, for one) draws on it, and the same input must give the same
    /// output and cost the same fuel every time.
    fn new(seed: u64) -> Self {
        let (stdout, stderr) = (GuestOutput::new(OUTPUT_CAPACITY), GuestOutput::new(OUTPUT_CAPACITY));
        let ctx = WasiCtxBuilder::new()
            .secure_random(StdRng::seed_from_u64(seed))
            .insecure_random(StdRng::seed_from_u64(seed.rotate_left(32)))
            .insecure_random_seed(u128::from(seed))
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Self { ctx, stdout, stderr }
    }
}

impl std::fmt::Debug for CallState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallState").field("policy", &self.policy).finish_non_exhaustive()
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let seed = self.seed;
        let wasi = self.wasi.get_or_insert_with(|| Box::new(Wasi::new(seed)));
        WasiCtxView { ctx: &mut wasi.ctx, table: &mut self.table }
    }
}

impl wit::Host for CallState {}

impl host::Host for CallState {
    fn log(&mut self, level: wit::LogLevel, message: String) {
        let policy = &*self.policy;
        match level {
            wit::LogLevel::Debug => tracing::debug!(policy, "{message}"),
            wit::LogLevel::Info => tracing::info!(policy, "{message}"),
            wit::LogLevel::Warn => tracing::warn!(policy, "{message}"),
            wit::LogLevel::Error => tracing::error!(policy, "{message}"),
        }
    }

    fn settings(&mut self) -> String {
        self.settings.to_string()
    }

    fn runtime(&mut self) -> wit::RuntimeInfo {
        self.facts.runtime.clone()
    }

    fn node(&mut self) -> wit::NodeInfo {
        self.facts.node.clone()
    }
}

impl node::Host for CallState {
    fn pods(&mut self) -> Vec<node::PodInfo> {
        self.view.pods().map(node::PodInfo::from).collect()
    }

    fn pod(&mut self, id: String) -> Option<node::PodInfo> {
        self.view.pod(&id).map(node::PodInfo::from)
    }

    fn containers(&mut self, filter: node::ContainerFilter) -> Vec<node::ContainerInfo> {
        let filter = ContainerFilter::from(filter);
        self.view.containers(&filter, self.current.as_deref()).map(node::ContainerInfo::from).collect()
    }

    fn container_ids(&mut self, filter: node::ContainerFilter) -> node::IdList {
        let filter = ContainerFilter::from(filter);
        let (_, known) = self.view.len();
        // Container ids are 64 hex digits: one allocation for all of them.
        let mut list =
            node::IdList { ids: String::with_capacity((known + 1) * 64), ends: Vec::with_capacity(known + 1) };
        for c in self.view.containers(&filter, self.current.as_deref()) {
            list.ids.push_str(&c.id);
            list.ends.push(list.ids.len() as u32);
        }
        list
    }

    fn container(&mut self, id: String) -> Option<node::ContainerInfo> {
        match &self.current {
            Some(c) if c.id == id => Some(node::ContainerInfo::from(&**c)),
            _ => self.view.container(&id).map(node::ContainerInfo::from),
        }
    }

    fn topology(&mut self) -> node::NodeTopology {
        self.facts.topology.clone()
    }
}

impl state::Host for CallState {
    fn get(&mut self, key: String) -> Option<String> {
        self.state.get(&key).map(str::to_string)
    }

    fn set(&mut self, key: String, value: String) -> Result<(), state::StateError> {
        let result = self.state.set(key, value);
        if let Err(e) = &result {
            tracing::warn!(policy = &*self.policy, error = ?e, "state write refused");
        }
        result
    }

    fn remove(&mut self, key: String) {
        self.state.remove(key)
    }

    fn keys(&mut self, prefix: String) -> Vec<String> {
        self.state.keys(&prefix)
    }
}

/// Advances the engine's epoch until the engine is dropped.
struct Ticker {
    stop: Arc<AtomicBool>,
}

impl Ticker {
    fn start(engine: &Engine) -> Self {
        let weak = engine.weak();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::Builder::new()
            .name("nri-wasm-epoch".into())
            .spawn(move || {
                real_time_priority();
                // Ticks follow the wall clock: a ticker thread that was not
                // scheduled for a while catches up, so a deadline of N ticks
                // is N milliseconds however busy the machine is.
                let started = Instant::now();
                let mut ticks: u128 = 0;
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    let Some(engine) = weak.upgrade() else { break };
                    let due = started.elapsed().as_nanos() / EPOCH_TICK.as_nanos();
                    while ticks < due {
                        engine.increment_epoch();
                        ticks += 1;
                    }
                }
            })
            .expect("spawning the epoch ticker thread");
        Self { stop }
    }
}

/// Asks for the lowest real-time priority (`SCHED_FIFO` 1) for the calling
/// thread, so that a busy node does not delay the ticks that end policy
/// calls. The ticker sleeps between ticks and does almost nothing when it
/// wakes, so it cannot starve anything. Without the privilege (no
/// `CAP_SYS_NICE`) it stays a normal thread, which is logged.
fn real_time_priority() {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: plain system call on the calling thread (pid 0), with a valid
    // parameter struct that outlives it.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        tracing::debug!(error = %err, "epoch ticker runs without real-time priority");
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The engine, linker and ticker shared by every policy.
pub struct PolicyEngine {
    engine: Engine,
    max_memory_mib: u64,
    cache_dir: Option<PathBuf>,
    linker: Linker<CallState>,
    allocator: Allocator,
    /// The state of every policy that does not import `state` (shared, so
    /// that their calls allocate none).
    no_state: Arc<StateSnapshot>,
    _ticker: Ticker,
}

impl std::fmt::Debug for PolicyEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyEngine").field("allocator", &self.allocator).finish_non_exhaustive()
    }
}

fn base_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.consume_fuel(true);
    config.epoch_interruption(true);
    // Deterministic execution: same input, same result, same fuel.
    config.cranelift_nan_canonicalization(true);
    config
}

impl PolicyEngine {
    /// Builds the engine (pooling allocator if possible) and the linker.
    pub fn new(settings: &EngineSettings) -> Result<Self, EngineError> {
        let (engine, allocator) = if settings.pooling {
            let mut config = base_config();
            // Bounds are checked by compiled code rather than by guard pages:
            // a pool slot then never changes its page protections, so an
            // instance costs no mprotect (and no TLB shoot-down on the other
            // cores) when it is created, grows or is reset. Policies do
            // little arithmetic; the checks cost them less than the syscalls.
            config.signals_based_traps(false).memory_guard_size(0).guard_before_linear_memory(false);
            // Instances alive at once: one per call under way, as many again
            // for loads.
            let instances = settings.max_concurrent_calls.max(1) * 2;
            let mut pool = PoolingAllocationConfig::default();
            // A component is a handful of core instances, memories and tables.
            pool.total_component_instances(instances)
                .total_core_instances(instances * 16)
                // A memory slot remembers the last policy it held; a policy
                // that finds its slot again skips mapping its memory image
                // and faulting its pages in. One slot per policy keeps that
                // true for every policy of a long chain.
                .total_memories((instances * 4).max(settings.warm_policies))
                .max_unused_warm_slots(settings.warm_policies)
                .total_tables(instances * 16)
                .total_stacks(instances)
                .max_core_instances_per_component(16)
                .max_memories_per_component(4)
                .max_tables_per_component(16)
                .max_memory_size((settings.max_memory_mib as usize) << 20)
                // Keep the pages a call touched resident and reset only those
                // (found with PAGEMAP_SCAN where the kernel has it): the next
                // call then takes no page faults for its stack, data and heap.
                .linear_memory_keep_resident(KEEP_RESIDENT)
                .table_keep_resident(KEEP_RESIDENT)
                .pagemap_scan(wasmtime::Enabled::Auto);
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
            match Engine::new(&config) {
                Ok(e) => (e, Allocator::Pooling),
                Err(err) => {
                    let why = format!("{err:#}");
                    tracing::warn!(error = %why, "pooling allocator unavailable, using on-demand allocation");
                    (
                        Engine::new(&base_config()).map_err(|e| EngineError::Create(format!("{e:#}")))?,
                        Allocator::OnDemand(why),
                    )
                }
            }
        } else {
            let engine = Engine::new(&base_config()).map_err(|e| EngineError::Create(format!("{e:#}")))?;
            (engine, Allocator::OnDemand("disabled in the configuration".into()))
        };
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| EngineError::Link(format!("{e:#}")))?;
        super::bindings::Policy::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |s: &mut CallState| s,
        )
        .map_err(|e| EngineError::Link(format!("{e:#}")))?;
        let ticker = Ticker::start(&engine);
        Ok(Self {
            engine,
            max_memory_mib: settings.max_memory_mib,
            cache_dir: settings.cache_dir.clone(),
            linker,
            allocator,
            no_state: Arc::default(),
            _ticker: ticker,
        })
    }

    pub fn allocator(&self) -> &Allocator {
        &self.allocator
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Compiles, links and initialises one policy from its spec.
    pub fn load(&self, spec: &PolicySpec, facts: &Arc<Facts>) -> Result<CompiledPolicy, LoadError> {
        let bytes = std::fs::read(&spec.wasm).map_err(|e| LoadError::Read {
            policy: spec.name.clone(),
            path: spec.wasm.display().to_string(),
            reason: e.to_string(),
        })?;
        self.load_bytes(spec, &bytes, facts)
    }

    /// Like [`Self::load`] from bytes (binary or text format).
    pub fn load_bytes(&self, spec: &PolicySpec, bytes: &[u8], facts: &Arc<Facts>) -> Result<CompiledPolicy, LoadError> {
        let policy = spec.name.clone();
        if spec.limits.memory_mib > self.max_memory_mib {
            return Err(LoadError::Limits { policy, asked: spec.limits.memory_mib, max: self.max_memory_mib });
        }
        let component =
            self.compile(bytes).map_err(|e| LoadError::Compile { policy: policy.clone(), reason: format!("{e:#}") })?;
        let mut imports = Imports::default();
        for (import, _) in component.component_type().imports(&self.engine) {
            if import.starts_with("nri-wasm:policy/") && !import.contains(&format!("@{WIT_VERSION}.")) {
                return Err(LoadError::Version { policy, import: import.to_string() });
            }
            if !import_allowed(import) {
                return Err(LoadError::ForbiddenImport { policy, import: import.to_string() });
            }
            imports.node |= import.starts_with("nri-wasm:policy/node@");
            imports.state |= import.starts_with("nri-wasm:policy/state@");
        }
        let instance_pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError::Link { policy: policy.clone(), reason: format!("{e:#}") })?;
        // Checks every export against the world once; calls then skip it.
        let pre = PolicyPre::new(instance_pre.clone())
            .map_err(|e| LoadError::World { policy: policy.clone(), reason: format!("{e:#}") })?;
        let handle = component
            .get_export_index(None, "handle")
            .ok_or_else(|| LoadError::World { policy: policy.clone(), reason: "no export named handle".into() })?;
        let mut compiled = CompiledPolicy {
            spec: spec.clone(),
            seed: seed_of(&spec.name),
            pre,
            instance_pre,
            handle,
            imports,
            events: EventMask::EMPTY,
            synchronize: false,
            name: spec.name.as_str().into(),
            settings: spec.settings.as_str().into(),
        };
        // Validate the settings and learn the subscription once, at load.
        let kinds = self
            .init(&compiled, facts)
            .map_err(|e| LoadError::Init { policy: policy.clone(), reason: e.to_string() })?;
        compiled.events = kinds.iter().copied().filter_map(event_kind).collect();
        compiled.synchronize = kinds.contains(&wit::EventKind::Synchronize);
        Ok(compiled)
    }

    /// Compiles a component, through the cache directory when there is one.
    fn compile(&self, bytes: &[u8]) -> wasmtime::Result<Component> {
        let Some(dir) = &self.cache_dir else { return Component::new(&self.engine, bytes) };
        let path = dir.join(format!("{}.cwasm", self.cache_key(bytes)));
        if path.exists() {
            // The artifact is read into memory rather than mapped: a file
            // truncated under a mapping would crash the host on next access.
            match std::fs::read(&path) {
                // SAFETY: the cache directory holds only artifacts this host
                // serialized with a compatible engine (the key covers the
                // engine's compatibility hash), written under unique temporary
                // names and renamed into place, and the operator keeps the
                // directory host-private.
                Ok(bytes) => match unsafe { Component::deserialize(&self.engine, &bytes) } {
                    Ok(c) => return Ok(c),
                    Err(e) => tracing::warn!(path = %path.display(), error = %e, "ignoring unusable cached component"),
                },
                Err(e) => tracing::warn!(path = %path.display(), error = %e, "cannot read cached component"),
            }
        }
        let component = Component::new(&self.engine, bytes)?;
        if let Err(e) = store_artifact(dir, &path, &component) {
            tracing::warn!(path = %path.display(), error = %e, "cannot cache compiled component");
        }
        Ok(component)
    }

    fn cache_key(&self, bytes: &[u8]) -> String {
        struct Sha(Sha256);
        impl Hasher for Sha {
            fn write(&mut self, b: &[u8]) {
                self.0.update(b);
            }
            fn finish(&self) -> u64 {
                0
            }
        }
        let mut h = Sha(Sha256::new());
        self.engine.precompile_compatibility_hash().hash(&mut h);
        h.0.update(bytes);
        h.0.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    fn store(
        &self,
        policy: &CompiledPolicy,
        env: &CallEnv,
        current: Option<Arc<ContainerEntry>>,
        event: Option<CallEvent>,
        budget: Duration,
    ) -> Store<CallState> {
        let limits = &policy.spec.limits;
        let store_limits = StoreLimitsBuilder::new()
            .memory_size(limits.memory_bytes())
            .table_elements(limits.table_elements)
            .instances(limits.instances)
            .tables(limits.tables)
            .memories(limits.memories)
            .trap_on_grow_failure(true)
            .build();
        let state = match policy.imports.state {
            true => StateTxn::new(env.states.snapshot(&policy.name), limits.state_bytes()),
            false => StateTxn::new(self.no_state.clone(), 0),
        };
        let state = CallState {
            limits: store_limits,
            wasi: None,
            seed: policy.seed,
            table: ResourceTable::new(),
            policy: policy.name.clone(),
            settings: policy.settings.clone(),
            facts: env.facts.clone(),
            view: env.view.clone(),
            current: if policy.imports.node { current } else { None },
            state,
            event,
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        store.set_fuel(limits.fuel).expect("fuel is enabled");
        let ticks = budget.min(limits.timeout()).as_millis().max(1) as u64;
        store.set_epoch_deadline(ticks);
        store.epoch_deadline_trap();
        store
    }

    /// Runs `configure` in an instance of its own: the settings check and
    /// the subscription.
    fn init(&self, policy: &CompiledPolicy, facts: &Arc<Facts>) -> Result<Vec<wit::EventKind>, CallError> {
        let env = CallEnv::detached(facts.clone());
        let mut store = self.store(policy, &env, None, None, policy.spec.limits.timeout());
        let event = "configure";
        let outcome = (|| {
            let instance = policy.pre.instantiate(&mut store).map_err(|e| classify(e, policy, event))?;
            instance
                .call_configure(&mut store, &policy.spec.settings)
                .map_err(|e| classify(e, policy, event))?
                .map_err(|reason| CallError::Init { policy: policy.spec.name.clone(), event: event.into(), reason })
        })();
        with_output(outcome, store.data(), event)
    }

    /// Runs one event through one policy in a fresh instance, within its
    /// limits and at most `budget` of wall-clock time. `current` is the
    /// event's container as the chain has it, shown in the node view.
    pub fn call(
        &self,
        policy: &CompiledPolicy,
        event: CallEvent,
        env: &CallEnv,
        current: Option<&Arc<ContainerEntry>>,
        budget: Duration,
    ) -> CallReport {
        let started = Instant::now();
        let name = event.name();
        let kind = event.kind();
        let mut store = self.store(policy, env, current.cloned(), Some(event), budget);
        let fuel_start = policy.spec.limits.fuel;
        let outcome = (|| {
            let instance = policy.instance_pre.instantiate(&mut store).map_err(|e| classify(e, policy, name))?;
            let func = instance.get_func(&mut store, policy.handle).expect("export found at load");
            // SAFETY: `PolicyPre::new` checked at load that this component's
            // `handle` export has exactly the world's type, which these
            // parameter and result types are the bindings of; instances of
            // the same `InstancePre` share the component's types.
            let handle = unsafe { TypedFunc::<(wit::EventKind,), (Result<wit::Reply, String>,)>::new_unchecked(func) };
            handle.call(&mut store, (kind,)).map(|(r,)| r).map_err(|e| classify(e, policy, name))
        })();
        let fuel_used = fuel_start.saturating_sub(store.get_fuel().unwrap_or(0));
        let outcome = with_output(outcome, store.data(), name);
        let writes = match &outcome {
            Ok(Ok(_)) => store.data_mut().state.take_writes(),
            _ => None,
        };
        CallReport { outcome, fuel_used, elapsed: started.elapsed(), writes }
    }
}

/// Which optional host interfaces a policy imports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Imports {
    pub node: bool,
    pub state: bool,
}

/// Logs what the guest wrote to stdout and stderr, tagged with the policy
/// and the event, and adds the end of stderr to a trap (where a Rust panic,
/// for one, leaves its message).
fn with_output<T>(outcome: Result<T, CallError>, state: &CallState, event: &str) -> Result<T, CallError> {
    let policy = &*state.policy;
    let Some(wasi) = &state.wasi else { return outcome };
    let text = |w: Written| {
        if w.dropped == 0 {
            return String::from_utf8_lossy(&[w.head, w.tail].concat()).into_owned();
        }
        // Whole lines only on either side of the cut.
        let head = w.head.iter().rposition(|&b| b == b'\n').map_or(&w.head[..0], |i| &w.head[..=i]);
        let tail = w.tail.iter().position(|&b| b == b'\n').map_or(&w.tail[..], |i| &w.tail[i + 1..]);
        let dropped = w.dropped + (w.head.len() - head.len()) + (w.tail.len() - tail.len());
        format!("{}[{dropped} bytes dropped]\n{}", String::from_utf8_lossy(head), String::from_utf8_lossy(tail))
    };
    let (stdout, stderr) = (text(wasi.stdout.contents()), text(wasi.stderr.contents()));
    for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
        tracing::info!(policy, event, stream = "stdout", "{line}");
    }
    for line in stderr.lines().filter(|l| !l.trim().is_empty()) {
        tracing::warn!(policy, event, stream = "stderr", "{line}");
    }
    match outcome {
        Err(CallError::Trap { policy, event, trap }) if !stderr.trim().is_empty() => {
            let tail: String = {
                let t = stderr.trim();
                let start = t.char_indices().rev().nth(399).map_or(0, |(i, _)| i);
                t[start..].replace('\n', " | ")
            };
            Err(CallError::Trap { policy, event, trap: format!("{trap}; stderr: {tail}") })
        }
        other => other,
    }
}

/// Writes a compiled component atomically (temporary file, then rename).
fn store_artifact(dir: &Path, path: &Path, component: &Component) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let bytes = component.serialize().map_err(std::io::Error::other)?;
    // Unique per process and call: concurrent loads of one component must
    // never write into the same temporary file.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp.{}.{seq}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// What one call produced, with its cost.
#[derive(Debug, Clone)]
pub struct CallReport {
    /// `Ok(Ok(reply))`: an answer; `Ok(Err(reason))`: the policy denies the
    /// event; `Err`: the call failed.
    pub outcome: Result<Result<wit::Reply, String>, CallError>,
    pub fuel_used: u64,
    pub elapsed: Duration,
    /// What the call wrote to the policy's state (answered calls only).
    pub writes: Option<StateWrites>,
}

/// A loaded policy: its spec, its pre-linked component and its subscription.
#[derive(Clone)]
pub struct CompiledPolicy {
    pub spec: PolicySpec,
    /// Seed of the policy's random sources (from its name).
    seed: u64,
    /// Used for `configure` (bindings checked the whole world's types).
    pre: PolicyPre<CallState>,
    /// Used for `handle`, without the per-call export type check.
    instance_pre: InstancePre<CallState>,
    handle: ComponentExportIndex,
    imports: Imports,
    events: EventMask,
    synchronize: bool,
    name: Arc<str>,
    settings: Arc<str>,
}

impl std::fmt::Debug for CompiledPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledPolicy").field("name", &self.name).field("events", &self.events).finish_non_exhaustive()
    }
}

impl CompiledPolicy {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// NRI events the policy subscribed to in `configure`.
    pub fn events(&self) -> EventMask {
        self.events
    }

    /// Whether the policy subscribed to `synchronize`.
    pub fn wants_synchronize(&self) -> bool {
        self.synchronize
    }

    /// Which optional host interfaces it imports.
    pub fn imports(&self) -> Imports {
        self.imports
    }
}

/// A stable seed from a policy's name (FNV-1a).
fn seed_of(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Interfaces a policy may import: ours, and the WASI p2 interfaces language
/// runtimes need (linked with an empty context: no files, no env, no network).
fn import_allowed(name: &str) -> bool {
    const ALLOWED: [&str; 7] = [
        "nri-wasm:policy/",
        "wasi:cli/",
        "wasi:io/",
        "wasi:clocks/",
        "wasi:random/",
        "wasi:filesystem/",
        "wasi:sockets/",
    ];
    ALLOWED.iter().any(|p| name.starts_with(p))
}

fn classify(err: wasmtime::Error, policy: &CompiledPolicy, event: &str) -> CallError {
    let (p, e) = (policy.spec.name.clone(), event.to_string());
    let limits = &policy.spec.limits;
    if let Some(trap) = err.downcast_ref::<Trap>() {
        match trap {
            Trap::OutOfFuel => return CallError::OutOfFuel { policy: p, event: e, limit: limits.fuel },
            Trap::Interrupt => return CallError::Timeout { policy: p, event: e, limit_ms: limits.timeout_ms },
            Trap::StackOverflow => return CallError::StackOverflow { policy: p, event: e },
            _ => {}
        }
    }
    let text = format!("{err:#}");
    if text.contains("forcing trap when growing memory") || text.contains("memory size") && text.contains("exceeds") {
        return CallError::MemoryLimit { policy: p, event: e, limit_mib: limits.memory_mib };
    }
    CallError::Trap { policy: p, event: e, trap: text }
}

/// Protocol event of a WIT event kind (`synchronize` has none: it is not
/// an event a plugin subscribes to).
pub fn event_kind(k: wit::EventKind) -> Option<EventKind> {
    Some(match k {
        wit::EventKind::RunPodSandbox => EventKind::RunPodSandbox,
        wit::EventKind::StopPodSandbox => EventKind::StopPodSandbox,
        wit::EventKind::RemovePodSandbox => EventKind::RemovePodSandbox,
        wit::EventKind::CreateContainer => EventKind::CreateContainer,
        wit::EventKind::PostCreateContainer => EventKind::PostCreateContainer,
        wit::EventKind::StartContainer => EventKind::StartContainer,
        wit::EventKind::PostStartContainer => EventKind::PostStartContainer,
        wit::EventKind::UpdateContainer => EventKind::UpdateContainer,
        wit::EventKind::PostUpdateContainer => EventKind::PostUpdateContainer,
        wit::EventKind::StopContainer => EventKind::StopContainer,
        wit::EventKind::RemoveContainer => EventKind::RemoveContainer,
        wit::EventKind::UpdatePodSandbox => EventKind::UpdatePodSandbox,
        wit::EventKind::PostUpdatePodSandbox => EventKind::PostUpdatePodSandbox,
        wit::EventKind::ValidateContainerAdjustment => EventKind::ValidateContainerAdjustment,
        wit::EventKind::Synchronize => return None,
    })
}
