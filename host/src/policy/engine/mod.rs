//! The WebAssembly engine: built once, a fresh instance for every call.
//!
//! Expensive things are built once: the [`Engine`] (with the pooling
//! allocator when the host can reserve its address space, on-demand
//! allocation otherwise) and the [`Linker`] with the policy interfaces and
//! an empty WASI context; per policy, loading (`load/`) makes a
//! [`CompiledPolicy`] against them. Cheap things are built per call: a
//! store with the call's limits (`call/store.rs`) and an instance. Nothing a
//! policy does in one call can be seen by the next one.
//!
//! The engine only runs calls: an event's call ([`PolicyEngine::call_async`])
//! and a load's `configure`. It knows nothing of files, compiling or the
//! compile cache; the loader (`load/loader.rs`) holds those and uses the
//! engine to compile for, link against and configure in.
//!
//! Every guest call is asynchronous:
//! - a call ends when its time runs out whatever the guest does: the time
//!   the policy used against its own limit, or the wall-clock time the
//!   chain left it (`meter.rs`); guest code is interrupted through the
//!   epoch (`watchdog.rs`), a guest waiting in a host call (a WASI sleep or
//!   poll) is cancelled with the call's future;
//! - WASI's implementations are async and never start a nested runtime, so
//!   whatever a guest calls, at load or per event, is safe wherever the
//!   host makes the call.
//!
//! The engine owns a *policy runtime* where loads (and their `configure`)
//! run, off the path of events; an event's chain runs in the task that
//! received it (`dispatcher.rs`). A `configure` takes one of
//! [`MAX_CONCURRENT_CONFIGURES`] instance slots of the pool, until its
//! instance is dropped (at its time limit at the latest), and its guest
//! code yields to the other loads every [`CONFIGURE_YIELD_FUEL`] units of
//! fuel: the loader polls every load of a directory from one task, where a
//! `configure` that computes without a pause would otherwise stop every
//! other load until its deadline. Compiles are bounded by the loader
//! ([`MAX_CONCURRENT_COMPILES`] at once).
//!
//! Callers that are not async themselves (tests, the CLI) use the blocking
//! wrapper [`PolicyEngine::call`].

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use wasmtime::component::{Linker, TypedFunc};
use wasmtime::{Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::invalid::Invalid;
use crate::node::view::ContainerEntry;
use crate::policy::call::errors::{classify, timeout, Attempt};
use crate::policy::call::event::CallEvent;
pub use crate::policy::call::meter::CallTime;
use crate::policy::call::meter::{metered, CallClock};
use crate::policy::call::state::{StateSnapshot, StateTxn, StateWrites};
use crate::policy::call::store::{drain_output, new_store, CallState};
use crate::policy::call::watchdog::Watchdog;
use crate::wit::wit;

pub use crate::files::{default_cache_dir, ROOT_CACHE_DIR};
pub use crate::policy::call::compiled::{CompiledPolicy, Imports, LoadTimings};
pub use crate::policy::call::env::{CallEnv, Facts};
pub use crate::policy::call::errors::{CallError, CallErrorKind, LimitKind, TrapCode};

/// Most core instances, memories and tables a component may create, as
/// the engine's instance pool is sized (below).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolShape {
    /// Most core instances one component may create.
    pub core_instances: usize,
    /// Most linear memories one component may create.
    pub memories: usize,
    /// Most tables one component may create.
    pub tables: usize,
    /// Largest linear memory, in bytes (`[engine] max-memory-mib`).
    pub max_memory_bytes: u64,
}

/// The engine configuration that decides the compiled code. The host and a
/// compiling child (below) must use exactly this, or the child's
/// artifacts would not load.
pub fn codegen_config() -> wasmtime::Config {
    let mut config = wasmtime::Config::new();
    config.wasm_component_model(true);
    config.consume_fuel(true);
    config.epoch_interruption(true);
    // Deterministic execution: same input, same result, same fuel.
    config.cranelift_nan_canonicalization(true);
    // A trap's wasm backtrace costs time to capture and names functions
    // the guest chose; errors are reported as one line without it.
    config.wasm_backtrace_max_frames(None);
    // Bounds are checked by compiled code rather than by guard pages: a pool
    // slot then never changes its page protections, so an instance costs no
    // mprotect (and no TLB shoot-down on the other cores) when it is
    // created, grows or is reset. Policies do little arithmetic; the checks
    // cost them less than the syscalls.
    config.signals_based_traps(false).memory_guard_size(0).guard_before_linear_memory(false);
    config
}

/// Memory (and table) bytes a pool slot keeps resident between calls.
const KEEP_RESIDENT: usize = 2 << 20;
/// Components compiled at the same time (each may take a child process of
/// `[engine] compile-memory-mib`).
pub const MAX_CONCURRENT_COMPILES: u32 = 2;
/// `configure` calls under way at the same time (each holds an instance of
/// the pool, beside the event calls'). A `configure` that runs to its time
/// limit holds one for that long; the others load through the rest.
pub const MAX_CONCURRENT_CONFIGURES: u32 = 4;
/// Fuel a `configure` runs between two yields to the other loads (about a
/// millisecond of guest code).
pub const CONFIGURE_YIELD_FUEL: u64 = 1_000_000;
/// The least wall-clock time a `configure` gets, whatever the policy's
/// `timeout-ms`: it runs once per load, off every event's path, and the
/// start of a language runtime (Go's, Python's) that fits an event's time
/// limit on an idle node may not on a busy one (a Go policy's `configure`
/// went past 100 ms with the load average at 9 on 2 cores, and the policy
/// was left out). Fuel still bounds its work.
pub const CONFIGURE_MIN_TIMEOUT: Duration = Duration::from_secs(2);

/// The wall-clock time a `configure` may take, in multiples of its time
/// limit: its limit counts the time it used (`meter.rs`), and a load has
/// no runtime waiting on it, so a busy node may stretch it this far.
pub const CONFIGURE_WALL_FACTOR: u32 = 4;
/// Threads that read policy files and records at the same time, beside the
/// compiles' (a file on a stalled mount holds one until it answers).
const READ_THREADS: usize = 8;
/// Most core instances, memories and tables per component in the pool.
const POOL_CORE_INSTANCES: u32 = 16;
const POOL_MEMORIES: u32 = 4;
const POOL_TABLES: u32 = 16;

/// Engine-wide settings (the `[engine]` table of the host configuration).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct EngineSettings {
    /// Directory for compiled policies, so that a restart or reload does not
    /// compile unchanged components again. Must be owned by the host's user
    /// and writable by no one else: its files are loaded as native code.
    /// On by default ([`default_cache_dir`]); `""` in the file (`None`)
    /// turns it off.
    #[serde(deserialize_with = "cache_dir::read", serialize_with = "cache_dir::write")]
    pub cache_dir: Option<PathBuf>,
    /// Largest size of the cache directory; unused entries past it are removed.
    pub cache_max_mib: u64,
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
    /// Largest policy file, in MiB.
    pub max_component_mib: u64,
    /// Longest a policy may take to compile, in milliseconds.
    pub compile_timeout_ms: u64,
    /// Most memory the compiling process may use, in MiB.
    pub compile_memory_mib: u64,
}

/// `cache-dir` in the file: a path, or `""` for none.
mod cache_dir {
    use std::path::PathBuf;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn read<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
        let path = PathBuf::deserialize(d)?;
        Ok((!path.as_os_str().is_empty()).then_some(path))
    }

    pub(super) fn write<S: Serializer>(dir: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
        match dir {
            Some(dir) => s.serialize_str(&dir.to_string_lossy()),
            None => s.serialize_str(""),
        }
    }
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            cache_dir: default_cache_dir(),
            cache_max_mib: 1024,
            pooling: true,
            max_concurrent_calls: 4,
            max_memory_mib: 256,
            warm_policies: 128,
            max_component_mib: 64,
            compile_timeout_ms: 60_000,
            compile_memory_mib: 2048,
        }
    }
}

impl EngineSettings {
    /// Checks the settings against the default limits of policies.
    pub fn validate(&self, defaults: &crate::policy::spec::limits::Limits) -> Result<(), Invalid> {
        const T: &str = "[engine]";
        let ranges: [(&str, u64, u64, u64); 7] = [
            ("max-concurrent-calls", self.max_concurrent_calls.into(), 1, 256),
            ("max-memory-mib", self.max_memory_mib, 1, 4096),
            ("warm-policies", self.warm_policies.into(), 1, 4096),
            ("max-component-mib", self.max_component_mib, 1, 1024),
            ("compile-timeout-ms", self.compile_timeout_ms, 100, 3_600_000),
            ("compile-memory-mib", self.compile_memory_mib, 256, 1 << 20),
            ("cache-max-mib", self.cache_max_mib, 1, 1 << 20),
        ];
        for (key, value, min, max) in ranges {
            if !(min..=max).contains(&value) {
                return Err(Invalid::key(T, key, format!("{value} must be in {min}..={max}")));
            }
        }
        if let Some(dir) = self.cache_dir.as_ref().filter(|d| !d.is_absolute()) {
            let rule = format!(
                "{:?} must be an absolute path, or \"\" to compile every policy afresh",
                dir.display().to_string()
            );
            return Err(Invalid::key(T, "cache-dir", rule));
        }
        if defaults.memory_mib > self.max_memory_mib {
            let rule = format!("{} exceeds [engine] max-memory-mib {}", defaults.memory_mib, self.max_memory_mib);
            return Err(Invalid::key("[policies.limits]", "memory-mib", rule).also(T, "max-memory-mib"));
        }
        Ok(())
    }
}

/// Which instance allocator the engine ended up with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allocator {
    /// The pooling allocator: instance slots reserved up front.
    Pooling,
    /// On-demand, with the reason the pool was not used.
    OnDemand(String),
}

/// Setting up the engine failed; each step keeps its cause as the source.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Wasmtime refused the engine's configuration.
    #[error("creating the wasmtime engine failed")]
    Create(#[source] wasmtime::Error),
    /// The WASI or `nri-wasm:policy` host functions could not be added to
    /// the linker.
    #[error("linking the host interface failed")]
    Link(#[source] wasmtime::Error),
    /// The watchdog that enforces calls' time limits, or the runtime the
    /// calls run on, could not be started.
    #[error("starting the policy runtime failed")]
    Runtime(#[source] std::io::Error),
}

/// The policy denies the event: its reason, clipped to one line (a
/// verdict, not a failure of the call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial(pub String);

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What one call produced, with its cost.
#[derive(Debug, Clone)]
pub struct CallReport {
    /// `Ok(Ok(reply))`: an answer; `Ok(Err(denial))`: the policy denies the
    /// event; `Err`: the call failed.
    pub outcome: Result<Result<wit::Reply, Denial>, CallError>,
    /// Fuel the call consumed.
    pub fuel_used: u64,
    /// Wall-clock time the call took.
    pub elapsed: Duration,
    /// The time the call was charged against its limit: CPU time and
    /// waits, not the time a busy node kept it from running (`meter.rs`).
    pub charged: Duration,
    /// The policy's time limit.
    pub limit: Duration,
    /// What the call wrote to the policy's state (answered calls only).
    pub writes: Option<StateWrites>,
}

/// The engine, linker, deadline thread and policy runtime shared by every policy.
pub struct PolicyEngine {
    engine: Engine,
    linker: Linker<CallState>,
    allocator: Allocator,
    settings: EngineSettings,
    watchdog: Watchdog,
    /// Where guest code runs; shut down without blocking when dropped.
    runtime: Option<tokio::runtime::Runtime>,
    /// Bounds the `configure` calls under way (each instantiates once in
    /// the pool).
    configures: tokio::sync::Semaphore,
    /// The state of every policy that does not import `state` (shared, so
    /// that their calls allocate none).
    no_state: Arc<StateSnapshot>,
}

impl std::fmt::Debug for PolicyEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyEngine").field("allocator", &self.allocator).finish_non_exhaustive()
    }
}

impl Drop for PolicyEngine {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            // Dropping a runtime blocks, which is refused inside another
            // runtime; nothing of it is still needed.
            runtime.shutdown_background();
        }
    }
}

impl PolicyEngine {
    /// Builds the engine (pooling allocator if possible), the linker, the
    /// deadline thread and the policy runtime.
    pub fn new(settings: &EngineSettings) -> Result<Self, EngineError> {
        let (engine, allocator) = if settings.pooling {
            let mut config = codegen_config();
            // Instances alive at once: one per call under way, one per
            // `configure` under way.
            let instances = settings.max_concurrent_calls.max(1) + MAX_CONCURRENT_CONFIGURES;
            let mut pool = PoolingAllocationConfig::default();
            pool.total_component_instances(instances)
                .total_core_instances(instances * POOL_CORE_INSTANCES)
                // A memory slot remembers the last policy it held; a policy
                // that finds its slot again skips mapping its memory image
                // and faulting its pages in. One slot per policy keeps that
                // true for every policy of a long chain.
                .total_memories((instances * POOL_MEMORIES).max(settings.warm_policies))
                .max_unused_warm_slots(settings.warm_policies)
                .total_tables(instances * POOL_TABLES)
                .total_stacks(instances)
                .max_core_instances_per_component(POOL_CORE_INSTANCES)
                .max_memories_per_component(POOL_MEMORIES)
                .max_tables_per_component(POOL_TABLES)
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
                    let engine = Engine::new(&codegen_config()).map_err(EngineError::Create)?;
                    (engine, Allocator::OnDemand(why))
                }
            }
        } else {
            let engine = Engine::new(&codegen_config()).map_err(EngineError::Create)?;
            (engine, Allocator::OnDemand("disabled in the configuration".into()))
        };
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(EngineError::Link)?;
        crate::wit::Policy::add_to_linker::<_, wasmtime::component::HasSelf<_>>(&mut linker, |s: &mut CallState| s)
            .map_err(EngineError::Link)?;
        let watchdog = Watchdog::start(&engine).map_err(EngineError::Runtime)?;
        // Guest code is CPU work, and a guest waiting in a host call frees
        // its thread: more workers than cores would only compete.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads((settings.max_concurrent_calls.max(1) as usize).min(cores))
            .max_blocking_threads(MAX_CONCURRENT_COMPILES as usize + READ_THREADS)
            .thread_name("nri-wasm-policy")
            // Time for deadlines and WASI clocks; I/O for the compiling
            // child process's pipes.
            .enable_all()
            .build()
            .map_err(EngineError::Runtime)?;
        Ok(Self {
            engine,
            linker,
            allocator,
            settings: settings.clone(),
            watchdog,
            runtime: Some(runtime),
            configures: tokio::sync::Semaphore::new(MAX_CONCURRENT_CONFIGURES as usize),
            no_state: Arc::default(),
        })
    }

    /// The instance allocator the engine ended up with, and why.
    pub fn allocator(&self) -> &Allocator {
        &self.allocator
    }

    /// The wasmtime engine policies are compiled for and run on.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The `[engine]` settings it was built with.
    pub fn settings(&self) -> &EngineSettings {
        &self.settings
    }

    pub(crate) fn linker(&self) -> &Linker<CallState> {
        &self.linker
    }

    /// What one component may create, as the pool is sized.
    pub fn pool_shape(&self) -> PoolShape {
        PoolShape {
            core_instances: POOL_CORE_INSTANCES as usize,
            memories: POOL_MEMORIES as usize,
            tables: POOL_TABLES as usize,
            max_memory_bytes: self.settings.max_memory_mib << 20,
        }
    }

    /// The runtime guest code runs on.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime.as_ref().expect("the policy runtime lives as long as the engine").handle()
    }

    /// Runs `work` to completion from a caller that is not async. From a
    /// thread inside another runtime (where blocking on a future is refused)
    /// it waits on a thread of its own.
    pub fn block_on<F: Future + Send>(&self, work: F) -> F::Output
    where
        F::Output: Send,
    {
        let handle = self.handle();
        if tokio::runtime::Handle::try_current().is_err() {
            return handle.block_on(work);
        }
        std::thread::scope(|s| s.spawn(|| handle.block_on(work)).join().expect("a policy call panicked"))
    }

    /// The state a call of `policy` starts from.
    pub(crate) fn state_for(&self, policy: &CompiledPolicy, env: &CallEnv) -> StateTxn {
        match policy.imports.state {
            true => StateTxn::new(env.states.snapshot(&policy.profile.name), policy.profile.limits.state_bytes()),
            false => StateTxn::new(self.no_state.clone(), 0),
        }
    }

    /// Runs `configure` in an instance of its own: the settings check and
    /// the subscription.
    pub(crate) async fn configure(
        &self,
        policy: &CompiledPolicy,
        facts: &Arc<Facts>,
    ) -> Result<Vec<wit::EventKind>, CallError> {
        self.configure_then(policy, facts, async |_, _| ()).await.map(|(kinds, ())| kinds)
    }

    /// [`Self::configure`], then `after` with the store and the instance
    /// `configure` ran in, once it succeeded: pre-initialisation
    /// (`load/snapshot.rs`) reads the instance's state there. `after` runs
    /// while the instance still holds its slot of the pool, outside the
    /// call's time (the store's fuel and deadline are what `configure`
    /// left; `after` sets its own).
    pub(crate) async fn configure_then<R>(
        &self,
        policy: &CompiledPolicy,
        facts: &Arc<Facts>,
        after: impl AsyncFnOnce(&mut wasmtime::Store<CallState>, wasmtime::component::Instance) -> R,
    ) -> Result<(Vec<wit::EventKind>, R), CallError> {
        let env = CallEnv::detached(facts.clone());
        let limits = &policy.profile.limits;
        // An instance slot of the pool; the policy's time starts once it has one.
        let _slot = self.configures.acquire().await.expect("the configure semaphore is never closed");
        let limit = limits.timeout().max(CONFIGURE_MIN_TIMEOUT);
        let time = Arc::new(CallClock::new(CallTime::new(limit, limit * CONFIGURE_WALL_FACTOR)));
        let state = self.state_for(policy, &env);
        let mut store =
            new_store(&self.engine, &policy.profile, &env, state, None, None, time.clone(), &self.watchdog.arming());
        // Other loads are polled from the same task: let them run.
        store.fuel_async_yield_interval(Some(CONFIGURE_YIELD_FUEL)).expect("fuel and async are enabled");
        let settings = policy.spec.settings.clone();
        let run = async {
            let instance = policy.instance_pre.instantiate_async(&mut store).await?;
            let configure = instance
                .get_typed_func::<(String,), (Result<Vec<wit::EventKind>, String>,)>(&mut store, &policy.configure)?;
            configure.call_async(&mut store, (settings,)).await.map(|(r,)| (instance, r))
        };
        let result = metered(&time, run).await;
        let event = "configure";
        let stderr = drain_output(store.data(), event);
        let attempt = Attempt {
            policy: &policy.profile.name,
            event,
            limits,
            time: &time,
            refused: store.data().limiter.refused(),
            stderr,
            host_call: store.data().stopped_in(),
        };
        match result {
            // A host function refused an answer over the transfer limit and
            // ended the call (or the guest returned first): that is why.
            _ if store.data().oversized_in().is_some() => Err(answer_too_large(&attempt, store.data())),
            // A host function stopped at the deadline: whatever the guest
            // made of its empty answer is not used.
            Ok(_) if attempt.host_call.is_some() => Err(timeout(&attempt)),
            Ok(_) if store.data().refused_in().is_some() => Err(ungranted_node(&attempt, store.data())),
            Ok((instance, Ok(kinds))) => {
                let after = after(&mut store, instance).await;
                Ok((kinds, after))
            }
            Ok((_, Err(reason))) => Err(CallError::new(
                &*policy.profile.name,
                event,
                CallErrorKind::Init { reason: crate::text::reason(&reason) },
            )),
            Err(e) => Err(classify(&e, &attempt)),
        }
    }

    /// Runs one event through one policy in a fresh instance, within its
    /// fuel and memory limits and the `time` its caller planned (charged as
    /// `meter.rs` says). `current` is the event's container as the chain
    /// has it, shown in the node view.
    pub async fn call_async(
        &self,
        policy: &CompiledPolicy,
        event: CallEvent,
        env: &CallEnv,
        current: Option<&Arc<ContainerEntry>>,
        time: CallTime,
    ) -> CallReport {
        let started = Instant::now();
        let name = event.name();
        let kind = event.kind();
        let limits = &policy.profile.limits;
        let time = Arc::new(CallClock::new(time));
        let state = self.state_for(policy, env);
        let arming = self.watchdog.arming();
        let mut store =
            new_store(&self.engine, &policy.profile, env, state, current.cloned(), Some(event), time.clone(), &arming);
        let run = async {
            let instance = policy.instance_pre.instantiate_async(&mut store).await?;
            let func = instance.get_func(&mut store, policy.handle).expect("export found at load");
            // SAFETY: `PolicyPre::new` checked at load that this component's
            // `handle` export has exactly the world's type, which these
            // parameter and result types are the bindings of; instances of
            // the same `InstancePre` share the component's types.
            let handle = unsafe { TypedFunc::<(wit::EventKind,), (Result<wit::Reply, String>,)>::new_unchecked(func) };
            handle.call_async(&mut store, (kind,)).await.map(|(r,)| r)
        };
        let result = metered(&time, run).await;
        let fuel_used = limits.fuel.saturating_sub(store.get_fuel().unwrap_or(0));
        let stderr = drain_output(store.data(), name);
        let attempt = Attempt {
            policy: &policy.profile.name,
            event: name,
            limits,
            time: &time,
            refused: store.data().limiter.refused(),
            stderr,
            host_call: store.data().stopped_in(),
        };
        let outcome = match result {
            // A host function refused an answer over the transfer limit and
            // ended the call (or the guest returned first): that is why.
            _ if store.data().oversized_in().is_some() => Err(answer_too_large(&attempt, store.data())),
            // A host function stopped at the deadline and answered empty:
            // a reply built on that answer is not used, even if the guest
            // returned before the epoch reached it.
            Ok(_) if attempt.host_call.is_some() => Err(timeout(&attempt)),
            // The guest read the node view without the capability: what it
            // answered (on an empty view) is not used.
            Ok(_) if store.data().refused_in().is_some() => Err(ungranted_node(&attempt, store.data())),
            Ok(Ok(reply)) => Ok(Ok(reply)),
            Ok(Err(reason)) => Ok(Err(Denial(crate::text::reason(&reason)))),
            Err(e) => Err(classify(&e, &attempt)),
        };
        let writes = match &outcome {
            Ok(Ok(_)) => store.data_mut().state.take_writes(),
            _ => None,
        };
        CallReport {
            outcome,
            fuel_used,
            elapsed: started.elapsed(),
            charged: time.charged(),
            limit: time.limit(),
            writes,
        }
    }

    /// [`Self::call_async`] for callers that are not async.
    /// A call on its own, outside a chain (tests, benchmarks, `nri-wasm
    /// check`): the policy's own time limit, within `wall` of wall-clock
    /// time.
    pub fn call(
        &self,
        policy: &CompiledPolicy,
        event: CallEvent,
        env: &CallEnv,
        current: Option<&Arc<ContainerEntry>>,
        wall: Duration,
    ) -> CallReport {
        let time = CallTime::new(policy.profile.limits.timeout(), wall);
        self.block_on(self.call_async(policy, event, env, current, time))
    }
}

/// The call asked a host function for more than a transfer may carry.
fn answer_too_large(a: &Attempt<'_>, state: &CallState) -> CallError {
    CallError::new(
        a.policy,
        a.event,
        CallErrorKind::Answer {
            function: state.oversized_in().unwrap_or("node"),
            limit: crate::policy::call::store::TRANSFER_LIMIT,
        },
    )
}

/// The call read the node view without the capability.
fn ungranted_node(a: &Attempt<'_>, state: &CallState) -> CallError {
    CallError::new(
        a.policy,
        a.event,
        CallErrorKind::Ungranted {
            capability: crate::policy::spec::caps::Capability::Node.name(),
            function: state.refused_in().unwrap_or("node"),
        },
    )
}
