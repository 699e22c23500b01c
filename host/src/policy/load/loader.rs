//! The policy loader: what loading keeps between loads, beside the engine
//! that runs the calls.
//!
//! Loading a policy needs the engine (to compile for it, to link against
//! its linker and to run `configure` in its pool), but the engine needs
//! nothing of loading: it runs calls. What only loading uses lives here, in
//! one place: how components are compiled ([`Compiler`], a child process in
//! the binary) and how many at once, the compile cache, the components in
//! use (shared by every policy of one file), the subscription records
//! (`known.rs`) and the registry client policies named by reference are
//! pulled with. The load steps themselves are `prepare.rs`.
//!
//! The composition root (`cli/host.rs`'s `HostBuilder`, which the author
//! tools use too) makes one engine and one loader over it; tests and
//! benchmarks do the same.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};

use wasmtime::component::Component;

use super::cache::Cache;
use super::compile::{CompileBounds, CompileError, Compiler};
use super::rewrite::SnapshotStep;
use crate::policy::engine::{EngineSettings, PolicyEngine, MAX_CONCURRENT_COMPILES};

/// The registry client policies named by reference are pulled with, or
/// why `[registry]` gave none (shared: every such load reports it).
pub type RegistryClient = Result<Arc<crate::registry::client::Registry>, Arc<crate::registry::client::ClientError>>;

/// Why a policy named by reference cannot be pulled by a loader made
/// without a registry client.
pub const NO_REGISTRY: &str = "this host was made without a registry client ([registry])";

/// What [`PolicyLoader::prune_cache`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Compiled forms and temporary files.
    pub entries: usize,
    /// Subscription records.
    pub records: usize,
}

/// One component being made for the loads that asked for it together: the
/// component, or why its bytes could not be compiled (`prepare.rs`,
/// `component_shared`).
pub(super) type Flight = tokio::sync::OnceCell<Result<Flown, String>>;

/// A component a flight made, and whether it came from the cache.
#[derive(Debug)]
pub(super) struct Flown {
    pub(super) component: Arc<Component>,
    pub(super) cached: bool,
}

/// Loads policies for one engine: reads, checks, compiles (or takes from
/// the cache), links and configures them (`prepare.rs`).
pub struct PolicyLoader {
    engine: Arc<PolicyEngine>,
    compiler: Compiler,
    /// Bounds the compiles under way (and the snapshots' steps on bytes).
    pub(super) compiles: tokio::sync::Semaphore,
    cache: Option<Cache>,
    /// Components in use, by cache key: a file loaded as several policies
    /// (one component, several settings) or reloaded unchanged shares one
    /// copy of its code and metadata instead of holding one per policy.
    pub(super) in_use: Mutex<HashMap<String, Weak<Component>>>,
    /// Components being compiled (or read from the cache), by cache key:
    /// the loads of one file that start together wait for one compile and
    /// share its result (`prepare.rs`, `component_shared`).
    pub(super) in_flight: Mutex<HashMap<String, Weak<Flight>>>,
    /// The subscription record (`known.rs`) of each policy's version this
    /// host last loaded, refused or found at start, by policy name: what
    /// [`Self::prune_cache`] keeps.
    records: Mutex<HashMap<String, String>>,
    /// Compile-cache keys a pre-initialised policy's next load needs but no
    /// loaded component holds (its component as built, its instrumented
    /// component), by policy name: kept from pruning like those in use.
    pub(super) pinned: Mutex<HashMap<String, Vec<String>>>,
    /// Where policies named by reference are pulled from (`[registry]`),
    /// as the composition root made it; none unless given.
    registry: Option<RegistryClient>,
}

impl std::fmt::Debug for PolicyLoader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyLoader")
            .field("engine", &self.engine)
            .field("cache", &self.cache.as_ref().map(Cache::dir))
            .finish_non_exhaustive()
    }
}

impl PolicyLoader {
    /// A loader for `engine`, with the compile cache its `[engine]`
    /// settings name (none if it cannot be opened: every load then compiles,
    /// and the reason is logged). Components are compiled in process until
    /// [`Self::with_compiler`] says otherwise.
    pub fn new(engine: Arc<PolicyEngine>) -> Self {
        let settings = engine.settings();
        let cache = match &settings.cache_dir {
            None => None,
            Some(dir) => match Cache::open(dir, settings.cache_max_mib << 20) {
                Ok(cache) => Some(cache),
                Err(e) => {
                    tracing::warn!(error = %e, "compiled policies are not cached");
                    None
                }
            },
        };
        Self {
            engine,
            compiler: Compiler::InProcess,
            compiles: tokio::sync::Semaphore::new(MAX_CONCURRENT_COMPILES as usize),
            cache,
            in_use: Mutex::default(),
            in_flight: Mutex::default(),
            records: Mutex::default(),
            pinned: Mutex::default(),
            registry: None,
        }
    }

    /// This loader, compiling components with `compiler` instead (the
    /// binary compiles in a child process).
    pub fn with_compiler(mut self, compiler: Compiler) -> Self {
        self.compiler = compiler;
        self
    }

    /// This loader, pulling policies named by reference with `registry` (or
    /// failing their load with its error: the settings could not be used).
    /// Without one, such a policy fails to load, saying so.
    pub fn with_registry(mut self, registry: RegistryClient) -> Self {
        self.registry = Some(registry);
        self
    }

    /// The engine policies are loaded for, and run on.
    pub fn engine(&self) -> &Arc<PolicyEngine> {
        &self.engine
    }

    /// The `[engine]` settings loads are bounded by.
    pub fn settings(&self) -> &EngineSettings {
        self.engine.settings()
    }

    /// The registry client policies named by reference are pulled with, if
    /// one was given.
    pub fn registry(&self) -> Option<&RegistryClient> {
        self.registry.as_ref()
    }

    /// Compiles `component` within the `[engine]` bounds, holding one of the
    /// [`MAX_CONCURRENT_COMPILES`] permits for the compile only.
    pub(super) async fn compile(&self, component: Arc<[u8]>) -> Result<Vec<u8>, CompileError> {
        let _permit = self.compiles.acquire().await.expect("the compile semaphore is never closed");
        self.compiler.compile(self.engine.engine(), component, CompileBounds::of(self.settings())).await
    }

    /// Runs one of the snapshot's steps on bytes within the compile bounds,
    /// holding one of the [`MAX_CONCURRENT_COMPILES`] permits while it runs;
    /// its output is at most `max-component-mib` and one byte more, which
    /// says it made too much.
    pub(super) async fn snapshot_step(&self, step: SnapshotStep, input: Vec<u8>) -> Result<Vec<u8>, CompileError> {
        let _permit = self.compiles.acquire().await.expect("the compile semaphore is never closed");
        let bounds = CompileBounds::of(self.settings());
        self.compiler.snapshot_step(step, input, bounds, bounds.max_component_bytes as usize).await
    }

    /// The cache of compiled components, if one is configured.
    pub fn cache(&self) -> Option<&Cache> {
        self.cache.as_ref()
    }

    /// Remembers `record` (a file name) as the subscription record of the
    /// current version of `policy`.
    pub(crate) fn keep_record(&self, policy: &str, record: String) {
        self.records.lock().unwrap_or_else(|p| p.into_inner()).insert(policy.to_string(), record);
    }

    /// Prunes the compile cache once the chain changed: compiled forms no
    /// loaded policy uses (once a day old, or past `cache-max-mib`), and the
    /// subscription records of versions gone from the directory, `policies`
    /// (the names in it now), once a day old (`known.rs`). Reads the
    /// directory: run it off the event path.
    pub fn prune_cache(&self, policies: &[String]) -> Pruned {
        let Some(cache) = &self.cache else { return Pruned::default() };
        let mut used: HashSet<String> = {
            let in_use = self.in_use.lock().unwrap_or_else(|p| p.into_inner());
            in_use.iter().filter(|(_, w)| w.strong_count() > 0).map(|(k, _)| k.clone()).collect()
        };
        {
            let mut pinned = self.pinned.lock().unwrap_or_else(|p| p.into_inner());
            pinned.retain(|name, _| policies.contains(name));
            used.extend(pinned.values().flatten().cloned());
        }
        let records: HashSet<String> = {
            let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
            records.retain(|name, _| policies.contains(name));
            records.values().cloned().collect()
        };
        let pruned = Pruned { entries: cache.prune(&used), records: super::known::prune(cache.dir(), &records) };
        if pruned != Pruned::default() {
            tracing::info!(
                dir = %cache.dir().display(),
                entries = pruned.entries,
                records = pruned.records,
                "compile cache pruned"
            );
        }
        pruned
    }
}
