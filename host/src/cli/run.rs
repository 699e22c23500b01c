//! `nri-wasm run`: serve a runtime until told to stop.
//!
//! Order matters for a node's pods: the host loads its policies in the
//! background and registers with the runtime as soon as it knows what they
//! subscribe to (at once when their subscriptions are recorded, see
//! `policy/known.rs`; the start-up contract is in `policy/dispatcher.rs`);
//! the metrics endpoint and the directory watch run on the policy runtime,
//! so that the thread serving the runtime does nothing but serve it.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::RunArgs;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::node::topology::Topology;
use crate::nri::record::{RecordOptions, Recorder, RecordingDispatcher};
use crate::nri::transport::{self, Endpoint};
use crate::nri::{ConnectOptions, Dispatcher, PluginIdentity, Supervisor};
use crate::policy::chain::{Chain, Observer, Pending, Unloadable};
use crate::policy::compile::Compiler;
use crate::policy::dispatcher::PolicyDispatcher;
use crate::policy::engine::{Allocator, Facts, PolicyEngine};
use crate::policy::loader::{self, DirOptions};
use crate::policy::reload::{PolicySource, Reloader};
use crate::policy::state::StateStore;

/// The runtime the host serves the runtime's socket on: one thread.
///
/// The runtime calls its plugins one event at a time and waits for each
/// answer, so there is no parallelism to gain on this side, and every wake-up
/// of another worker thread (a task moving between the socket's reader, the
/// ttrpc server and the handler) costs a system call and a context switch on
/// the user's critical path. On one thread a task waking another is a queue
/// push. Policies load on the engine's own runtime, and the chain of an event
/// runs inline, each call bounded by its deadline (see `policy/dispatcher.rs`).
pub fn transport_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build()
}

/// Builds the connection options from the file, the flags and the environment.
pub fn connect_options(args: &RunArgs, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<ConnectOptions> {
    settings(args, env).map(|(_, options)| options)
}

/// The effective configuration (file, then flags, then the runtime's launch
/// environment) and the connection options derived from it.
pub fn settings(args: &RunArgs, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<(Config, ConnectOptions)> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(s) = &args.socket {
        config.runtime.socket = s.clone();
    }
    if let Some(n) = &args.name {
        config.plugin.name = n.clone();
    }
    if let Some(i) = &args.idx {
        config.plugin.index = i.clone();
    }
    if let Some(p) = &args.policies {
        config.policies.dir = Some(p.clone());
    }
    if let Some(a) = &args.metrics_address {
        config.metrics.address = a.clone();
    }
    let launched = transport::launch_env(env)?;
    let endpoint = match &launched {
        Some(l) => {
            if let Some(n) = &l.name {
                config.plugin.name = n.clone();
            }
            if let Some(i) = &l.idx {
                config.plugin.index = i.clone();
            }
            Endpoint::Inherited(l.fd)
        }
        None => Endpoint::Socket(config.runtime.socket.clone()),
    };
    config.validate()?;
    let identity: PluginIdentity = config.identity()?;
    let options = ConnectOptions {
        identity,
        endpoint,
        register_timeout: config.runtime.register_timeout(),
        backoff_initial: config.runtime.reconnect_initial(),
        backoff_max: config.runtime.reconnect_max(),
    };
    Ok((config, options))
}

/// The compiler of the binary: a child process of this executable.
pub fn subprocess_compiler() -> Compiler {
    match std::env::current_exe() {
        Ok(exe) => Compiler::Subprocess { exe },
        Err(e) => {
            tracing::warn!(error = %e, "cannot find the executable; compiling policies in process, without bounds on memory");
            Compiler::InProcess
        }
    }
}

/// The policy side of a host: the dispatcher the transport calls, the
/// reloader that keeps its chain in step with the directory, and the
/// metrics both record into.
#[derive(Debug, Clone)]
pub struct PolicyHost {
    pub dispatcher: Arc<PolicyDispatcher>,
    pub reloader: Arc<Reloader>,
    pub metrics: Arc<Metrics>,
}

/// Builds the policy side of a host and starts the first load in the
/// background: the host registers with the runtime at once, and a mandatory
/// policy that is not loaded yet fails container creation until it is.
pub fn policy_host(config: &Config, compiler: Compiler, metrics: Arc<Metrics>) -> anyhow::Result<PolicyHost> {
    policy_host_observed(config, compiler, metrics, None)
}

/// [`policy_host`] whose steps `observer` sees instead of the metrics,
/// with every change described (the demo's report).
pub fn policy_host_observed(
    config: &Config,
    compiler: Compiler,
    metrics: Arc<Metrics>,
    observer: Option<Arc<dyn Observer>>,
) -> anyhow::Result<PolicyHost> {
    let registry = crate::registry::client::Registry::new(&config.registry, config.engine.max_component_mib << 20)
        .map(Arc::new)
        .map_err(|e| format!("[registry] cannot be used: {e}"));
    if let Err(e) = &registry {
        tracing::error!(error = %e, "policies named by reference cannot load");
    }
    let engine = Arc::new(PolicyEngine::new(&config.engine)?.with_compiler(compiler).with_registry(registry));
    if let Allocator::OnDemand(why) = engine.allocator() {
        tracing::info!(reason = %why, "instances are allocated on demand");
    }
    let topology = Topology::from_system().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "node topology unreadable; policies see the CPU count only");
        Topology::fallback(std::thread::available_parallelism().map_or(1, |n| n.get() as u32))
    });
    let facts = Facts::unconfigured(Facts::node_from_system(), &topology);
    let states = Arc::new(match &config.policies.state_dir {
        Some(dir) => StateStore::in_dir(dir.clone()),
        None => StateStore::in_memory(),
    });
    // Failed saves show in /metrics and /status, per policy.
    metrics.watch_states(states.clone());
    let options =
        DirOptions { defaults: config.policies.limits(), strict_permissions: config.policies.strict_permissions };
    let mut specs = match &config.policies.dir {
        Some(dir) => loader::scan(dir, options).0,
        None => {
            if config.policies.sources.is_empty() {
                tracing::info!("no policy directory configured: the chain is empty");
            }
            Vec::new()
        }
    };
    // Those named in the host configuration ([policies.sources]) are found too.
    let sources = config.policies.sources().map_err(anyhow::Error::msg)?;
    loader::add_config_sources(&mut specs, &mut Vec::new(), config.policies.dir.as_deref(), &sources, options);
    // Until they load, every policy found is not ready yet, with the
    // subscription of its last load if one is recorded.
    let pending: Vec<Pending> = loader::pending(&engine, &specs);
    let placeholder = Arc::new(Chain::new(Vec::new(), config.chain).with_pending(pending.clone()));
    metrics.chain_installed(&placeholder, true);
    let dispatcher = PolicyDispatcher::new(
        engine.clone(),
        Chain::new(Vec::new(), config.chain).with_pending(pending.clone()),
        facts.clone(),
        config.engine.max_concurrent_calls as usize,
    )
    .with_states(states)
    .with_metrics(metrics.clone())
    .pending();
    let dispatcher = match observer {
        Some(observer) => dispatcher.with_observer(observer).explaining(),
        None => dispatcher,
    };
    let dispatcher = Arc::new(dispatcher);
    let source = PolicySource { dir: config.policies.dir.clone(), options, chain: config.chain, sources };
    let reloader = Arc::new(
        Reloader::new(engine.clone(), dispatcher.clone(), metrics.clone(), source, Arc::new(facts))
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
    Ok(PolicyHost { dispatcher, reloader, metrics })
}

/// Cancels `stop` on SIGTERM or SIGINT.
pub fn stop_on_signals(stop: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received, stopping"),
            _ = int.recv() => tracing::info!("SIGINT received, stopping"),
        }
        stop.cancel();
    });
    Ok(())
}

/// `nri-wasm run` with a checked configuration, until SIGTERM or SIGINT.
pub async fn run(config: Config, options: ConnectOptions) -> anyhow::Result<()> {
    run_recording(config, options, None).await
}

/// [`run`], recording every request the runtime sends to a file for
/// `nri-wasm eval --replay` (`nri/record.rs`).
pub async fn run_recording(
    config: Config,
    options: ConnectOptions,
    record: Option<RecordOptions>,
) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    stop_on_signals(stop.clone())?;
    run_host_recording(config, options, subprocess_compiler(), Arc::new(Metrics::new()), stop, record).await
}

/// The whole host (policy host, metrics endpoint, reload watch, the
/// supervised connection to the runtime) until `stop` is cancelled. The
/// tests run it as the binary does, with their own compiler and metrics.
pub async fn run_host(
    config: Config,
    options: ConnectOptions,
    compiler: Compiler,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    run_host_recording(config, options, compiler, metrics, stop, None).await
}

/// [`run_host`], recording every request to `record`: the transport serves
/// a recording wrapper around the policies' dispatcher, and the recording's
/// last lines are written out when the host stops.
pub async fn run_host_recording(
    config: Config,
    options: ConnectOptions,
    compiler: Compiler,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    record: Option<RecordOptions>,
) -> anyhow::Result<()> {
    let host = policy_host(&config, compiler, metrics.clone())?;
    let engine = host.dispatcher.engine().clone();
    if let Some(addr) = config.metrics.socket_addr().map_err(anyhow::Error::msg)? {
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
    engine.handle().spawn(crate::policy::reload::watch(
        host.reloader.clone(),
        debounce,
        config.policies.watch,
        stop.clone(),
    ));
    let link = host.dispatcher.link();
    let dispatcher: Arc<dyn Dispatcher> = host.dispatcher.clone();
    let recorder = record.map(|options| Arc::new(Recorder::start(options)));
    let dispatcher: Arc<dyn Dispatcher> = match &recorder {
        Some(recorder) => Arc::new(RecordingDispatcher::new(dispatcher, recorder.clone())),
        None => dispatcher,
    };
    let supervisor = Supervisor::new(options, dispatcher, stop).with_link(link);
    let mut status = supervisor.handles().status;
    let wanted = host.dispatcher.clone();
    tokio::spawn(async move {
        while status.changed().await.is_ok() {
            let s = *status.borrow_and_update();
            let registered = s.phase == crate::nri::Phase::Registered;
            metrics.set_registered(registered, s.registrations, s.registration_failures);
            if registered {
                metrics.set_subscribed(wanted.events().to_string());
            }
        }
    });
    wait_for_subscription(&host.dispatcher, config.runtime.start_wait()).await;
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

/// Waits, at most `limit` (`[runtime] start-wait-ms`), until the
/// dispatcher knows the subscription of every policy (those with no record
/// of their last load finish `configure`; see the start-up contract in
/// `policy/dispatcher.rs`). A restart with unchanged files and a compile
/// cache does not wait at all. A launched plugin must register within the
/// runtime's registration timeout (containerd: 5 s), which the
/// configuration keeps the wait below; a policy still unknown then is
/// registered for what is known, plus CreateContainer if it is mandatory,
/// so that it can refuse; if it needs more once loaded, the host
/// reconnects (answering what is in flight first).
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
                chain.pending().iter().filter(|p| p.expected.is_none()).map(|p| p.name.as_str()).collect();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::RunArgs;

    #[test]
    fn launch_environment_selects_inherited_fd_and_identity() {
        let env = |k: &str| match k {
            "NRI_PLUGIN_SOCKET" => Some("3".to_string()),
            "NRI_PLUGIN_NAME" => Some("policies".to_string()),
            "NRI_PLUGIN_IDX" => Some("07".to_string()),
            _ => None,
        };
        let o = connect_options(&RunArgs::default(), env).unwrap();
        assert_eq!(o.endpoint, Endpoint::Inherited(3));
        assert_eq!(o.identity.to_string(), "07-policies");
    }

    #[test]
    fn flags_override_defaults_in_external_mode() {
        let args = RunArgs { socket: Some("/tmp/x.sock".into()), idx: Some("42".into()), ..Default::default() };
        let o = connect_options(&args, |_| None).unwrap();
        assert_eq!(o.endpoint, Endpoint::Socket("/tmp/x.sock".into()));
        assert_eq!(o.identity.to_string(), "42-nri-wasm");
        let bad = RunArgs { idx: Some("4".into()), ..Default::default() };
        assert!(connect_options(&bad, |_| None).is_err());
    }
}
