//! The `nri-wasm` command line.
//!
//! A runtime that launches plugins from its plugin directory runs them with no
//! arguments at all, so the binary without a subcommand is `run`, and `run`
//! detects launched mode from the environment the runtime sets.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::node::topology::Topology;
use crate::nri::transport::{self, Endpoint};
use crate::nri::{ConnectOptions, Dispatcher, PluginIdentity, Supervisor};
use crate::policy::chain::{Chain, Unloadable};
use crate::policy::compile::Compiler;
use crate::policy::dispatcher::PolicyDispatcher;
use crate::policy::engine::{Allocator, Facts, PolicyEngine};
use crate::policy::loader::{self, DirOptions};
use crate::policy::state::StateStore;

/// One NRI plugin that runs a chain of WebAssembly policies.
#[derive(Debug, Parser)]
#[command(name = "nri-wasm", version, about)]
pub struct Cli {
    /// Log filter (tracing syntax, e.g. `info` or `nri_wasm=debug`); `RUST_LOG` overrides.
    #[arg(long, global = true, default_value = "info")]
    pub log: String,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Connect to the runtime (or use the socket it launched us with) and serve events.
    Run(RunArgs),
    /// Run against the embedded runtime simulator: no real runtime needed.
    #[cfg(feature = "demo")]
    Demo(DemoArgs),
    /// Compile a component from stdin to stdout (the host's own child process).
    #[command(hide = true)]
    InternalCompile(InternalCompileArgs),
}

#[derive(Debug, Args)]
pub struct InternalCompileArgs {
    /// Largest component accepted, in bytes.
    #[arg(long)]
    pub max_bytes: u64,
}

#[derive(Debug, Args, Default)]
pub struct RunArgs {
    /// Configuration file (TOML).
    #[arg(long, short = 'c', env = "NRI_WASM_CONFIG")]
    pub config: Option<PathBuf>,
    /// The runtime's NRI socket (external mode).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Plugin name to register with.
    #[arg(long)]
    pub name: Option<String>,
    /// Two-digit plugin index to register with.
    #[arg(long)]
    pub idx: Option<String>,
    /// Directory of policies (`NN-name.wasm`, optional `NN-name.toml`).
    #[arg(long, env = "NRI_WASM_POLICIES")]
    pub policies: Option<PathBuf>,
}

#[cfg(feature = "demo")]
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Pods the simulated runtime creates (one container each).
    #[arg(long, default_value_t = 3)]
    pub pods: usize,
    /// NRI version the simulated runtime speaks.
    #[arg(long, default_value = "v0.12.0")]
    pub nri_version: String,
    /// Directory of policies to run the simulated workload through.
    #[arg(long)]
    pub policies: Option<PathBuf>,
}

/// The binary: parse the command line, set up logging, run.
///
/// # Safety
///
/// Call it first thing in a binary's `main`, before anything opens a file:
/// it claims the socket a runtime may have passed (see
/// [`transport::claim_inherited`]).
pub unsafe fn main() -> anyhow::Result<std::process::ExitCode> {
    use tracing_subscriber::EnvFilter;
    let cli = Cli::parse();
    if let Some(Command::InternalCompile(args)) = &cli.command {
        return Ok(crate::policy::compile::child_main(args.max_bytes));
    }
    // SAFETY: by this function's contract nothing has opened a file yet, so
    // the socket the runtime passed (if it did) is owned by nothing else.
    unsafe { transport::claim_inherited(|k| std::env::var(k).ok()) }?;
    let filter = EnvFilter::try_from_default_env().or_else(|_| EnvFilter::try_new(&cli.log))?;
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();

    let runtime = transport_runtime()?;
    runtime.block_on(async move {
        match cli.command {
            None => run(RunArgs::default()).await,
            Some(Command::Run(args)) => run(args).await,
            #[cfg(feature = "demo")]
            Some(Command::Demo(args)) => demo(args).await,
            Some(Command::InternalCompile(_)) => unreachable!("handled before the runtime starts"),
        }
    })?;
    Ok(std::process::ExitCode::SUCCESS)
}

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

/// The engine and a dispatcher whose policies load in the background: the
/// host registers with the runtime at once, and a mandatory policy that is
/// not loaded yet fails container creation until it is.
pub fn policy_dispatcher(config: &Config, compiler: Compiler) -> anyhow::Result<Arc<PolicyDispatcher>> {
    let engine = Arc::new(PolicyEngine::new(&config.engine)?.with_compiler(compiler));
    if let Allocator::OnDemand(why) = engine.allocator() {
        tracing::info!(reason = %why, "instances are allocated on demand");
    }
    let topology = Topology::from_system().unwrap_or_else(|e| {
        tracing::warn!(error = %e, "node topology unreadable; policies see the CPU count only");
        Topology::fallback(std::thread::available_parallelism().map_or(1, |n| n.get() as u32))
    });
    let facts = Facts::unconfigured(Facts::node_from_system(), &topology);
    let states = match &config.policies.state_dir {
        Some(dir) => StateStore::in_dir(dir.clone()),
        None => StateStore::in_memory(),
    };
    let options = DirOptions { defaults: config.policies.limits(), strict_permissions: false };
    let (specs, errors) = match &config.policies.dir {
        Some(dir) => loader::scan(dir, options),
        None => {
            tracing::info!("no policy directory configured: the chain is empty");
            Default::default()
        }
    };
    // Until they load, every policy found counts as not loaded.
    let pending: Vec<Unloadable> = specs
        .iter()
        .map(|s| Unloadable { name: s.name.clone(), reason: "still loading".into(), mandatory: loader::mandatory(s) })
        .collect();
    let placeholder = Chain::new(Vec::new(), config.chain).with_unloadable(pending);
    let dispatcher =
        PolicyDispatcher::new(engine.clone(), placeholder, facts.clone(), config.engine.max_concurrent_calls as usize)
            .with_states(Arc::new(states))
            .pending();
    let dispatcher = Arc::new(dispatcher);
    let chain_settings = config.chain;
    let loading = dispatcher.clone();
    let names: Vec<(String, bool)> = specs.iter().map(|s| (s.name.clone(), loader::mandatory(s))).collect();
    let load = engine.handle().spawn(async move {
        let engine = loading.engine().clone();
        let loaded = loader::load_specs(&engine, specs, errors, &Arc::new(facts)).await;
        let chain = Chain::new(loaded.policies, chain_settings).with_unloadable(loaded.unloadable);
        for u in chain.unloadable().iter().filter(|u| u.mandatory) {
            tracing::error!(
                policy = u.name,
                reason = u.reason,
                "mandatory policy not loaded: container creation fails until it is fixed"
            );
        }
        tracing::info!(policies = chain.len(), "policies loaded");
        loading.install(chain).await;
    });
    // A load that failed in the host itself must not leave the policies
    // "still loading" for ever.
    let failed = dispatcher.clone();
    engine.handle().spawn(async move {
        if let Err(e) = load.await {
            tracing::error!(error = %e, "loading the policies failed");
            let unloadable = names
                .into_iter()
                .map(|(name, mandatory)| Unloadable {
                    name,
                    reason: format!("the host failed to load it: {e}"),
                    mandatory,
                })
                .collect();
            failed.install(Chain::new(Vec::new(), chain_settings).with_unloadable(unloadable)).await;
        }
    });
    Ok(dispatcher)
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

/// `nri-wasm run`.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let (config, options) = settings(&args, |k| std::env::var(k).ok())?;
    let stop = CancellationToken::new();
    stop_on_signals(stop.clone())?;
    let dispatcher = policy_dispatcher(&config, subprocess_compiler())?;
    let link = dispatcher.link();
    let dispatcher: Arc<dyn Dispatcher> = dispatcher;
    Supervisor::new(options, dispatcher, stop).with_link(link).run().await?;
    Ok(())
}

/// `nri-wasm demo`: a simulated runtime in-process, the real transport
/// against it over a real unix socket, and a report of what happened.
#[cfg(feature = "demo")]
pub async fn demo(args: DemoArgs) -> anyhow::Result<()> {
    use std::io::Write as _;

    use nri_sim::{RuntimeProfile, Simulator};

    let dir = tempfile_dir()?;
    let socket = dir.join("nri.sock");
    let profile = RuntimeProfile::containerd("v2.3.4", &args.nri_version);
    let sim = Simulator::listen(&socket, profile).await?;

    let stop = CancellationToken::new();
    let options = ConnectOptions {
        identity: PluginIdentity::new("nri-wasm", "10")?,
        endpoint: Endpoint::Socket(socket.clone()),
        register_timeout: std::time::Duration::from_secs(5),
        backoff_initial: std::time::Duration::from_millis(100),
        backoff_max: std::time::Duration::from_secs(1),
    };
    let config = Config {
        policies: crate::config::PoliciesConfig { dir: args.policies.clone(), ..Default::default() },
        ..Default::default()
    };
    let dispatcher = policy_dispatcher(&config, subprocess_compiler())?;
    dispatcher.loaded().await;
    writeln!(std::io::stdout(), "host: {} policies loaded", dispatcher.chain().len())?;
    let link = dispatcher.link();
    let plugin = tokio::spawn(Supervisor::new(options, dispatcher, stop.clone()).with_link(link).run());

    let mut out = std::io::stdout().lock();
    let mut plugin_conn = sim.accept().await?;
    let reg = plugin_conn.registration();
    writeln!(out, "runtime: plugin registered as {}-{} (NRI {})", reg.plugin_idx, reg.plugin_name, reg.NRI_version)?;
    let configured = plugin_conn.configure().await?;
    writeln!(out, "runtime: plugin subscribed to events {:#x}", configured.events)?;
    let workload = nri_sim::workload::Workload::generate(args.pods, 1);
    plugin_conn.synchronize(&workload.pods, &workload.containers, 0).await?;
    writeln!(out, "runtime: synchronized {} pods, {} containers", workload.pods.len(), workload.containers.len())?;
    // A runtime sends a plugin only the events it subscribed to.
    let wants = |e: nri_wasm_api::api::Event| plugin_conn.is_subscribed(e);
    let (run, create, start) = (
        wants(nri_wasm_api::api::Event::RUN_POD_SANDBOX),
        wants(nri_wasm_api::api::Event::CREATE_CONTAINER),
        wants(nri_wasm_api::api::Event::START_CONTAINER),
    );
    for (pod, ctr) in workload.pods.iter().zip(&workload.containers) {
        if run {
            plugin_conn.run_pod_sandbox(pod).await?;
        }
        if create {
            match plugin_conn.create_container(pod, ctr).await {
                Ok(reply) => {
                    let adjusted =
                        reply.adjust.as_ref().map(|a| a.env.len() + a.mounts.len() + a.annotations.len()).unwrap_or(0);
                    writeln!(out, "runtime: CreateContainer {}/{}: {} adjustments", pod.name, ctr.name, adjusted)?;
                }
                Err(e) => writeln!(out, "runtime: CreateContainer {}/{}: refused: {e}", pod.name, ctr.name)?,
            }
        }
        if start {
            plugin_conn.start_container(pod, ctr).await?;
        }
    }
    writeln!(
        out,
        "runtime: framing checks passed ({} frames read the way the reference reader reads)",
        plugin_conn.frames_read()
    )?;
    drop(out);
    stop.cancel();
    plugin.await??;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[cfg(feature = "demo")]
fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("nri-wasm-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

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
