//! The composition root: one place that puts a host together.
//!
//! The binary (`run`, launched mode), the demo, the author tools (`check`,
//! `eval`, `eval --replay`) and the tests all need the same host, differing
//! only in a few knobs: which compiler, whose metrics, who watches the
//! chain's steps, whether requests are recorded, where the policies' state
//! lives, and which policies (a directory, or a component given with its
//! settings). Those knobs are the fields of [`HostBuilder`], each defaulted
//! in [`HostBuilder::new`] and nowhere else; everything else (the engine,
//! the loader with its compile cache and the registry client of the
//! configuration's `[registry]`, the node's facts and the chain's settings) is
//! made here, from the configuration, the same way for all of them, so that
//! an author's `eval --config` loads what a node with that configuration
//! loads. [`HostBuilder::build`] gives the policy side ([`Host`]), and
//! [`Host::serve`] adds the metrics endpoint, the directory watch and the
//! supervised connection to the runtime; [`HostBuilder::loader`] gives the
//! engine and its loader alone, for `check`, which loads one component step
//! by step.
//!
//! Order matters for a node's pods: the host loads its policies in the
//! background and registers with the runtime as soon as it knows what they
//! subscribe to (at once when their subscriptions are recorded, see
//! `policy/load/known.rs`; the start-up contract is in `policy/dispatcher.rs`);
//! the metrics endpoint and the directory watch run on the policy runtime,
//! so that the thread serving the runtime does nothing but serve it.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::subprocess_compiler;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::node::topology::Topology;
use crate::nri::record::{RecordOptions, Recorder, RecordingDispatcher};
use crate::nri::{ConnectOptions, Dispatcher, Supervisor};
use crate::policy::call::state::StateStore;
use crate::policy::chain::{Chain, Observer, Pending};
use crate::policy::dispatcher::PolicyDispatcher;
use crate::policy::engine::{Allocator, EngineError, Facts, PolicyEngine};
use crate::policy::load::compile::Compiler;
use crate::policy::load::directory::{self, Unloadable};
use crate::policy::reload::{PolicySource, Reloader};
use crate::policy::spec::manifest::PolicySpec;
use crate::policy::spec::manifest::ReadOptions;
use crate::policy::PolicyLoader;

/// What a host is made of, before it is made. Start with
/// [`HostBuilder::new`] (every knob at its default), change what differs,
/// then [`build`](HostBuilder::build).
#[derive(Debug)]
pub struct HostBuilder {
    /// The checked configuration: engine, policies, chain, registry,
    /// metrics endpoint, runtime timings.
    config: Config,
    /// How components are compiled. Default: a child process of this
    /// executable ([`subprocess_compiler`]), which bounds a compile's
    /// memory; a test binary, which cannot compile as a child, passes
    /// [`Compiler::InProcess`].
    compiler: Compiler,
    /// Where the host's counters go (and what `/metrics` serves). Default:
    /// a fresh set; a test passes its own to read them.
    metrics: Arc<Metrics>,
    /// Who sees each step of every event, with every change described.
    /// Default: nobody (the metrics count them); the demo and `eval` pass
    /// their reports.
    observer: Option<Arc<dyn Observer>>,
    /// Record every request the runtime sends to a file, for
    /// `nri-wasm eval --replay` (`nri/record/`). Default: off.
    record: Option<RecordOptions>,
    /// Where the policies' state is kept. Default: `[policies] state-dir`,
    /// else memory. The demo and `eval` pass a store in memory of their own
    /// (`eval` preloaded with `--state`): a tool run beside a node never
    /// writes the node's state.
    states: Option<Arc<StateStore>>,
    /// Policies given one by one rather than found in `[policies] dir`:
    /// `eval`'s component with the settings of its command line. Each joins
    /// the chain as if its files were in the directory. Default: none.
    given: Vec<PolicySpec>,
    /// The UID of the pod the host runs in (`--pod-uid`), whose containers
    /// no policy may update or evict (`node::own`). Default: none.
    own_pod: Option<String>,
}

/// What keeps a host from being built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The WebAssembly engine could not be made.
    #[error("cannot start the engine")]
    Engine(#[from] EngineError),
    /// `[policies.sources]` names a policy or a reference that cannot be
    /// used (a configuration built in code; a file's is checked when read).
    #[error("{}", .0.text())]
    Sources(Box<crate::invalid::Invalid>),
}

impl HostBuilder {
    /// A host for `config` with every other knob at its default.
    pub fn new(config: Config) -> Self {
        Self {
            config,
            compiler: subprocess_compiler(),
            metrics: Arc::new(Metrics::new()),
            observer: None,
            record: None,
            states: None,
            given: Vec::new(),
            own_pod: None,
        }
    }

    /// Compiles components with `compiler`.
    pub fn compiler(mut self, compiler: Compiler) -> Self {
        self.compiler = compiler;
        self
    }

    /// Counts into `metrics`.
    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Shows every step of every event to `observer`.
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Records every request the runtime sends (`None`: off).
    pub fn record(mut self, record: Option<RecordOptions>) -> Self {
        self.record = record;
        self
    }

    /// Keeps the policies' state in `states` instead of `[policies] state-dir`.
    pub fn states(mut self, states: Arc<StateStore>) -> Self {
        self.states = Some(states);
        self
    }

    /// Loads `given` beside the policies of `[policies] dir` and
    /// `[policies.sources]` (one of the same name is replaced).
    pub fn given(mut self, given: Vec<PolicySpec>) -> Self {
        self.given = given;
        self
    }

    /// The host runs in the pod whose UID is `uid` (`None`: in none).
    pub fn own_pod(mut self, uid: Option<String>) -> Self {
        self.own_pod = uid;
        self
    }

    /// The engine and its loader alone, as [`build`](Self::build) makes
    /// them: the configuration's `[engine]` (with its compile cache), this
    /// builder's compiler, and the registry client of `[registry]` for
    /// policies named by reference. For `check`, which runs one component
    /// through the load steps itself.
    pub fn loader(self) -> Result<Arc<PolicyLoader>, BuildError> {
        make_loader(&self.config, self.compiler)
    }

    /// Builds the policy side of the host and starts the first load in the
    /// background: the host registers with the runtime at once, and a
    /// mandatory policy that is not loaded yet fails container creation
    /// until it is.
    pub fn build(self) -> Result<Host, BuildError> {
        let HostBuilder { config, compiler, metrics, observer, record, states, given, own_pod } = self;
        let loader = make_loader(&config, compiler)?;
        let engine = loader.engine().clone();
        if let Allocator::OnDemand(why) = engine.allocator() {
            tracing::info!(reason = %why, "instances are allocated on demand");
        }
        let facts = node_facts();
        let states = states.unwrap_or_else(|| {
            Arc::new(match &config.policies.state_dir {
                Some(dir) => StateStore::in_dir(dir.clone()),
                None => StateStore::in_memory(),
            })
        });
        // Failed saves show in /metrics and /status, per policy.
        metrics.watch_states(states.clone());
        let options =
            ReadOptions { defaults: config.policies.limits(), strict_permissions: config.policies.strict_permissions };
        let mut specs = match &config.policies.dir {
            Some(dir) => directory::scan(dir, options).0,
            None => {
                if config.policies.sources.is_empty() && given.is_empty() {
                    tracing::info!("no policy directory configured: the chain is empty");
                }
                Vec::new()
            }
        };
        // Those named in the host configuration ([policies.sources]) are found too.
        let sources = config.policies.sources().map_err(|e| BuildError::Sources(Box::new(e)))?;
        directory::add_config_sources(&mut specs, &mut Vec::new(), config.policies.dir.as_deref(), &sources, options);
        let source = PolicySource { dir: config.policies.dir.clone(), options, chain: config.chain, sources, given };
        source.add_given(&mut specs, &mut Vec::new());
        // Until they load, every policy found is not ready yet, with the
        // subscription of its last load if one is recorded.
        let pending: Vec<Pending> = Pending::all(directory::expected(&loader, &specs));
        let placeholder = Arc::new(Chain::new(Vec::new(), config.chain).with_pending(pending.clone()));
        metrics.chain_installed(&placeholder, true);
        let dispatcher = PolicyDispatcher::new(
            engine.clone(),
            Chain::new(Vec::new(), config.chain).with_pending(pending.clone()),
            facts.clone(),
            config.engine.max_concurrent_calls as usize,
        )
        .with_states(states)
        .with_own_pod(own_pod)
        .with_metrics(metrics.clone())
        .pending();
        let dispatcher = match observer {
            Some(observer) => dispatcher.with_observer(observer).explaining(),
            None => dispatcher,
        };
        let dispatcher = Arc::new(dispatcher);
        let reloader = Arc::new(
            Reloader::new(loader, dispatcher.clone(), metrics.clone(), source, Arc::new(facts))
                .with_tag_recheck(config.registry.tag_recheck()),
        );
        let first = reloader.clone();
        let chain_settings = config.chain;
        let fallback = dispatcher.clone();
        let fallback_metrics = metrics.clone();
        engine.handle().spawn(async move {
            first.reload().await;
            // A load that failed in the host itself must not leave the policies
            // "still loading" for ever.
            if !fallback.is_loaded() {
                let unloadable = pending
                    .into_iter()
                    .map(|p| Unloadable {
                        name: p.name,
                        reason: "the host failed to load it (see the log)".into(),
                        mandatory: p.mandatory,
                    })
                    .collect();
                let chain = Arc::new(Chain::new(Vec::new(), chain_settings).with_unloadable(unloadable));
                fallback_metrics.chain_installed(&chain, false);
                fallback.install_shared(chain).await;
            }
        });
        Ok(Host { dispatcher, reloader, metrics, config, record })
    }
}

/// The engine of `config` and its loader, compiling with `compiler`, with
/// the registry client of its `[registry]` (a client that cannot be made is
/// logged, and each policy named by reference fails to load with the
/// reason).
fn make_loader(config: &Config, compiler: Compiler) -> Result<Arc<PolicyLoader>, BuildError> {
    let registry = crate::registry::client::Registry::new(&config.registry, config.engine.max_component_mib << 20)
        .map(Arc::new)
        .map_err(Arc::new);
    if let Err(e) = &registry {
        tracing::error!(error = %crate::text::chain(&**e), "policies named by reference cannot load");
    }
    let engine = Arc::new(PolicyEngine::new(&config.engine)?);
    Ok(Arc::new(PolicyLoader::new(engine).with_compiler(compiler).with_registry(registry)))
}

/// The facts policies see of this node until the runtime configures the
/// host: this machine's CPUs, NUMA nodes and memory.
pub(crate) fn node_facts() -> Facts {
    let topology = Topology::from_system().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "node topology unreadable; policies see the CPU count only");
        Topology::fallback(std::thread::available_parallelism().map_or(1, |n| n.get() as u32))
    });
    Facts::unconfigured(Facts::node_from_system(), &topology)
}

/// A built host: the dispatcher the transport calls, the reloader that
/// keeps its chain in step with the directory, and the metrics both record
/// into. Tests and the demo drive these directly; the binary
/// [serves](Host::serve) them.
#[derive(Debug)]
pub struct Host {
    /// Runs the chain on the runtime's events.
    pub dispatcher: Arc<PolicyDispatcher>,
    /// Reloads the policy directory into the dispatcher.
    pub reloader: Arc<Reloader>,
    /// The host's Prometheus metrics.
    pub metrics: Arc<Metrics>,
    config: Config,
    record: Option<RecordOptions>,
}

impl Host {
    /// The whole host (metrics endpoint, reload watch, the supervised
    /// connection to the runtime, the recording if asked for) until `stop`
    /// is cancelled. With a recording, the transport serves a recording
    /// wrapper around the policies' dispatcher, and the recording's last
    /// lines are written out when the host stops.
    pub async fn serve(self, options: ConnectOptions, stop: CancellationToken) -> anyhow::Result<()> {
        let Host { dispatcher: policies, reloader, metrics, config, record } = self;
        let engine = policies.engine().clone();
        if let Some(addr) = config.metrics.socket_addr()? {
            let serving = engine.handle().spawn(crate::metrics::serve(addr, metrics.clone(), stop.clone()));
            // Policies matter more than their metrics: a port someone else
            // holds is reported, and the host serves the runtime without it
            // (a liveness probe on the endpoint then restarts it, visibly).
            match serving.await? {
                Ok(bound) => {
                    tracing::info!(address = %bound, "metrics and health endpoint listening");
                    metrics.set_endpoint(bound);
                }
                Err(e) => tracing::error!(address = %addr, error = %e, "metrics and health endpoint not started"),
            }
        }
        let debounce = std::time::Duration::from_millis(config.policies.reload_debounce_ms);
        engine.handle().spawn(crate::policy::reload::watch(reloader, debounce, config.policies.watch, stop.clone()));
        let link = policies.link();
        let dispatcher: Arc<dyn Dispatcher> = policies.clone();
        let recorder = record.map(|options| Arc::new(Recorder::start(options)));
        let dispatcher: Arc<dyn Dispatcher> = match &recorder {
            Some(recorder) => Arc::new(RecordingDispatcher::new(dispatcher, recorder.clone())),
            None => dispatcher,
        };
        let supervisor = Supervisor::new(options, dispatcher, stop).with_link(link).with_farewell();
        let mut status = supervisor.handles().status;
        tokio::spawn(async move {
            while status.changed().await.is_ok() {
                let s = *status.borrow_and_update();
                let registered = s.phase == crate::nri::Phase::Registered;
                metrics.set_registered(registered, s.registrations, s.registration_failures);
                if registered {
                    // What the serving connection subscribed to: a change
                    // the policies want shows once a connection with it
                    // serves (or never, if it was given up as no longer
                    // wanted).
                    metrics.set_subscribed(s.subscribed.to_string());
                }
            }
        });
        wait_for_subscription(&policies, config.runtime.start_wait()).await;
        let served = supervisor.run().await;
        if let Some(recorder) = recorder {
            let closing = tokio::task::spawn_blocking(move || recorder.close(RECORD_CLOSE_WAIT));
            if let Err(e) = closing.await {
                tracing::warn!(error = %e, "the recording was not closed");
            }
        }
        served?;
        Ok(())
    }
}

/// Waits, at most `limit` (`[runtime] start-wait-ms`), until the
/// dispatcher knows the subscription of every policy (those whose component
/// declares no events and that have no record of their last load finish
/// `configure`; see the start-up contract in `policy/dispatcher.rs`).
/// Policies that declare their events, and a restart with unchanged files
/// and a compile cache, do not wait at all. A launched plugin must register
/// within the runtime's registration timeout (containerd: 5 s), which the
/// configuration keeps the wait below; a policy still unknown then is
/// registered for what is known, plus CreateContainer, so that it can
/// refuse; if it needs more once loaded, the host registers a second
/// connection with it, which takes over from the first.
async fn wait_for_subscription(dispatcher: &PolicyDispatcher, limit: std::time::Duration) {
    let started = std::time::Instant::now();
    match tokio::time::timeout(limit, dispatcher.subscription_known()).await {
        Ok(()) => tracing::info!(
            waited_ms = started.elapsed().as_millis() as u64,
            events = %dispatcher.events(),
            "the policies' subscription is known: registering"
        ),
        Err(_) => {
            let chain = dispatcher.chain();
            let unknown: Vec<&str> =
                chain.pending().iter().filter(|p| p.subscription().is_none()).map(|p| p.name.as_str()).collect();
            tracing::warn!(
                waited_ms = limit.as_millis() as u64,
                ?unknown,
                events = %dispatcher.events(),
                "registering before the subscription of every policy is known; a reconnect follows if they need more"
            );
        }
    }
}

/// Longest the host waits at exit for the recording's last lines.
const RECORD_CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
