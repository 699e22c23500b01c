//! The `nri-wasm` command line: one file per verb.
//!
//! A runtime that launches plugins from its plugin directory runs them with no
//! arguments at all, so the binary without a subcommand is `run`, and `run`
//! detects launched mode from the environment the runtime sets.
//!
//! - `run.rs`: the settings of `run` (the DaemonSet's command): file, flags
//!   and the launch environment;
//! - `host.rs`: the composition root, [`HostBuilder`]: the binary and the
//!   tests put a host together and serve a runtime with it; the demo builds
//!   the policy side with it and serves its simulated runtime itself;
//! - `demo/`: the example policies against the embedded runtime simulator;
//! - `config.rs`: `config check`, the effective configuration or its errors;
//! - `status.rs`: a running host's chain and counters, over its endpoint;
//! - `steps.rs`: the policies' steps of an event, collected for the reports
//!   of `eval` and the demo;
//! - `log.rs`: the serving host's log writer, which never blocks the thread
//!   that logs;
//! - `oci.rs`: `push`, `pull`, `sign` and `verify`, policies in OCI registries;
//! - `author/`: the policy author's `check`, `eval` (and `eval --replay`)
//!   and `new`.

pub mod author;
mod config;
#[cfg(feature = "demo")]
mod demo;
mod host;
pub mod log;
pub mod oci;
mod run;
mod status;
pub mod steps;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::LogFormat;
use crate::nri::transport;

pub use host::{BuildError, Host, HostBuilder};
pub use run::{connect_options, settings, stop_on_signals, subprocess_compiler, transport_runtime};
pub use status::print as print_status;

/// One NRI plugin that runs a chain of WebAssembly policies.
#[derive(Debug, Parser)]
#[command(name = "nri-wasm", version, about)]
pub struct Cli {
    /// Log filter (`error`, `warn`, `info`, `debug`, `trace`, or e.g.
    /// `info,nri_wasm::nri=debug`); overrides the config file; `RUST_LOG`
    /// overrides both.
    #[arg(long, global = true)]
    pub log: Option<String>,
    /// Log format; overrides the config file.
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormat>,
    /// What to do; none serves as `run` does (how a runtime launches the
    /// plugin), with the configuration file `NRI_WASM_CONFIG` names.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The commands of `nri-wasm`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Connect to the runtime (or use the socket it launched us with) and serve events.
    Run(RunArgs),
    /// Run the example policies through a simulated pod lifecycle: no real runtime needed.
    #[cfg(feature = "demo")]
    Demo(DemoArgs),
    /// Check a configuration file.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Show a running host's chain, each policy's state and counters.
    Status(StatusArgs),
    /// Will this host load a policy, and what will it cost? (exit 0 loads,
    /// 1 refused, 2 usage or unreadable file)
    Check(author::check::CheckArgs),
    /// Run an event, or a recording (--replay), through policies offline
    /// with the production engine (exit 0 ok, 1 an event fails, 2 usage or
    /// bad input, 3 a policy failed or did not load)
    Eval(author::eval::EvalArgs),
    /// Create a policy project (handler, settings, native tests, a fixture,
    /// a README with the build and install commands) from its SDK's template.
    New(author::new::NewArgs),
    /// Push a policy component to an OCI registry as a wasm artifact; prints
    /// the reference pinned to the pushed manifest's digest.
    Push(oci::PushArgs),
    /// Pull a policy from an OCI registry as a node would (digests checked,
    /// signatures with --key) and write it to a file.
    Pull(oci::PullArgs),
    /// Sign a policy in a registry, cosign-compatible (or --generate a key pair).
    Sign(oci::SignArgs),
    /// Verify a policy's signature in a registry with public keys, as a node would.
    Verify(oci::VerifyArgs),
    /// Compile a component from stdin to stdout (the host's own child process).
    #[command(hide = true)]
    InternalCompile(InternalCompileArgs),
    /// Run one step of a policy's snapshot from stdin to stdout (the host's own child process).
    #[command(hide = true)]
    InternalSnapshot(InternalSnapshotArgs),
}

/// The commands of `nri-wasm config`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate a configuration file and the settings files of its policy
    /// directory; print the effective configuration.
    Check(ConfigCheckArgs),
}

/// The arguments of `nri-wasm config check`.
#[derive(Debug, Args)]
pub struct ConfigCheckArgs {
    /// The configuration file (TOML).
    pub file: PathBuf,
    /// Print nothing but errors.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// The arguments of `nri-wasm status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The host's metrics endpoint.
    #[arg(long, default_value = crate::config::DEFAULT_METRICS_ADDRESS)]
    pub address: String,
    /// Print the JSON the host returned.
    #[arg(long)]
    pub json: bool,
}

/// The arguments of the hidden `nri-wasm internal-compile`.
#[derive(Debug, Args)]
pub struct InternalCompileArgs {
    /// Largest component accepted, in bytes.
    #[arg(long)]
    pub max_bytes: u64,
}

/// The arguments of the hidden `nri-wasm internal-snapshot`.
#[derive(Debug, Args)]
pub struct InternalSnapshotArgs {
    /// The step.
    pub step: crate::policy::load::rewrite::SnapshotStep,
    /// Most bytes read from stdin.
    #[arg(long)]
    pub max_bytes: u64,
    /// Most bytes the step may write.
    #[arg(long)]
    pub max_output: u64,
}

/// The arguments of `nri-wasm run`.
#[derive(Debug, Args, Default, Clone)]
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
    /// Address of the metrics and health endpoint (`""` turns it off).
    #[arg(long)]
    pub metrics_address: Option<String>,
    /// Record every request the runtime sends to this file, one JSON line
    /// each, for `nri-wasm eval --replay` (off by default). The file holds
    /// the containers' environment: it is created with mode 0600.
    #[arg(long, value_name = "FILE.jsonl")]
    pub record: Option<PathBuf>,
    /// Past this size the recording moves to FILE.jsonl.1 (replacing it) and
    /// starts anew; 0 never rotates.
    #[arg(long, value_name = "MIB", default_value_t = 64)]
    pub record_max_mib: u64,
    /// The UID of the pod the host runs in (a DaemonSet passes
    /// metadata.uid from the downward API): no policy may update or evict
    /// that pod's containers.
    #[arg(long, value_name = "UID", env = "NRI_WASM_POD_UID", value_parser = pod_uid)]
    pub pod_uid: Option<String>,
}

/// A pod UID: a UUID from the API server, or for a static pod the
/// kubelet's 32 hexadecimal digits; compared as lower case, as the kubelet
/// hands it to the runtime. Empty (an unset downward-API variable) is none.
fn pod_uid(text: &str) -> Result<String, String> {
    let fits = text.len() <= 64 && text.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    match fits {
        true => Ok(text.to_ascii_lowercase()),
        false => Err(format!(
            "\"{}\" is not a pod UID (hexadecimal digits and dashes, at most 64)",
            crate::text::guest_text(text, 64)
        )),
    }
}

#[cfg(feature = "demo")]
/// The arguments of `nri-wasm demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Directory of policies to run instead of the built-in examples (the
    /// demo then reports what they did and judges nothing).
    #[arg(long)]
    pub policies: Option<PathBuf>,
    /// A node's configuration file, for its engine, limits and defaults
    /// (the policies are still --policies or the examples).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Pods of the simulated workload (the first few are the scenarios that
    /// trigger the examples; more are ordinary pods).
    #[arg(long, default_value_t = 11)]
    pub pods: usize,
    /// Pods to play instead of the built-in ones: CreateContainer requests
    /// in NRI's JSON (`{"event": "CreateContainer", "request": {...}}`, as
    /// `eval --input` reads them), one after another.
    #[arg(long, value_name = "FILE", conflicts_with = "pods")]
    pub pods_file: Option<PathBuf>,
    /// NRI version the simulated runtime speaks.
    #[arg(long, default_value = "v0.12.0")]
    pub nri_version: String,
    /// One JSON object per event, then a summary object, instead of text.
    #[arg(long)]
    pub json: bool,
    /// Colour: auto (when stdout is a terminal), always, never.
    #[arg(long, value_enum, default_value_t = Colour::Auto)]
    pub colour: Colour,
}

/// When to colour output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Colour {
    /// When standard output is a terminal.
    Auto,
    /// Always, even into a pipe or a file.
    Always,
    /// Never.
    Never,
}

/// The log filter of `check` and `eval`: their reports tell what the
/// policies did, so the policy modules' own lines would only repeat them
/// (and say that UpdateContainers could not be sent: there is no runtime).
const AUTHOR_LOG: &str = "error,nri_wasm::policy=off";

/// Sets up logging: to stderr, `format`, `filter` unless `RUST_LOG` is set;
/// colours only when stderr is a terminal. Each record is written before
/// the call that logs it returns: for the tools a person runs, whose log
/// goes with their report. The serving host uses [`init_serve_logging`].
pub fn init_logging(filter: &str, format: LogFormat) -> anyhow::Result<()> {
    install_logging(filter, format, std::io::stderr)
}

/// Sets up logging as [`init_logging`] does, through a queue that a thread
/// of its own writes to stderr (`log.rs`): a reader that stops reading
/// costs log records, counted and reported, never an answer to the runtime.
/// Hold the guard until exit: dropping it flushes the queue, for a bounded
/// time.
pub fn init_serve_logging(filter: &str, format: LogFormat) -> anyhow::Result<log::LogGuard> {
    let (queue, guard) = log::queue(Box::new(std::io::stderr()), format, log::QUEUE_BYTES, log::LINGER)
        .map_err(|e| anyhow::anyhow!("cannot start the log writer thread: {e}"))?;
    install_logging(filter, format, queue)?;
    Ok(guard)
}

fn install_logging<W>(filter: &str, format: LogFormat, writer: W) -> anyhow::Result<()>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use std::io::IsTerminal as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    log_dispatch(filter, format, writer, std::io::stderr().is_terminal())?
        .try_init()
        .map_err(|e| anyhow::anyhow!("cannot set up logging: {e}"))
}

/// The host's log records as they are formatted and filtered: `filter`
/// unless `RUST_LOG` is set, in `format`, to `writer`, coloured if `ansi`
/// (text only). The benchmarks log through the very same.
pub fn log_dispatch<W>(filter: &str, format: LogFormat, writer: W, ansi: bool) -> anyhow::Result<tracing::Dispatch>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().or_else(|_| EnvFilter::try_new(filter))?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer);
    Ok(match format {
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).finish().into(),
        LogFormat::Text => builder.with_ansi(ansi).finish().into(),
    })
}

/// No transparent huge pages for this process. mimalloc asks for them on
/// its arenas, and a huge page is faulted in whole: a heap whose live data
/// is spread thin after policies were loaded in parallel stays resident in
/// 2 MiB steps (20 small policies: 58-94 MiB idle instead of 38-55 MiB, a
/// different figure on every start). The host is a small agent on every
/// node; its footprint matters more than the TLB. Only pages faulted from
/// now on are affected, which is all but the first few. A kernel without
/// the call leaves the default.
fn no_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE reads and writes no memory of ours.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

/// How the binary ends with what [`main`] returned: an error is one line
/// on stderr, its causes joined with `: `, whatever `RUST_BACKTRACE` says
/// (an operator reads what went wrong, not where the host noticed it).
pub fn exit(result: anyhow::Result<std::process::ExitCode>) -> std::process::ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("Error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The binary: parse the command line, set up logging, run.
///
/// # Safety
///
/// Call it first thing in a binary's `main`, before anything opens a file:
/// it claims the socket a runtime may have passed (see
/// [`transport::claim_inherited`]).
pub unsafe fn main() -> anyhow::Result<std::process::ExitCode> {
    no_huge_pages();
    let cli = Cli::parse();
    if let Some(Command::InternalCompile(args)) = &cli.command {
        return Ok(crate::policy::load::compile::child_main(args.max_bytes));
    }
    if let Some(Command::InternalSnapshot(args)) = &cli.command {
        return Ok(crate::policy::load::compile::snapshot_child_main(args.step, args.max_bytes, args.max_output));
    }
    // SAFETY: by this function's contract nothing has opened a file yet, so
    // the socket the runtime passed (if it did) is owned by nothing else.
    unsafe { transport::claim_inherited(|k| std::env::var(k).ok()) }?;
    let format = cli.log_format.unwrap_or(LogFormat::Text);
    match cli.command {
        // Launched by the runtime, without arguments: the environment may
        // still name a configuration file, as it may for `run`.
        None => {
            let config = std::env::var_os("NRI_WASM_CONFIG").filter(|v| !v.is_empty()).map(PathBuf::from);
            serve(&cli.log, cli.log_format, RunArgs { config, ..RunArgs::default() })
        }
        Some(Command::Run(args)) => serve(&cli.log, cli.log_format, args),
        #[cfg(feature = "demo")]
        Some(Command::Demo(args)) => {
            // The report says what loading and the policies did; the log
            // only what went wrong in the host itself.
            init_logging(cli.log.as_deref().unwrap_or("error,nri_wasm::policy::reload=off"), format)?;
            transport_runtime()?.block_on(demo::demo(args))
        }
        Some(Command::Config(ConfigCommand::Check(args))) => {
            init_logging(cli.log.as_deref().unwrap_or("warn"), format)?;
            Ok(config::check(&args, &mut std::io::stdout().lock(), &mut std::io::stderr().lock()))
        }
        Some(Command::Status(args)) => {
            init_logging(cli.log.as_deref().unwrap_or("warn"), format)?;
            transport_runtime()?.block_on(status::status(&args, &mut std::io::stdout().lock()))
        }
        Some(Command::Check(args)) => {
            // The report says what the policy did; the log only what went
            // wrong in the host itself.
            init_logging(cli.log.as_deref().unwrap_or(AUTHOR_LOG), format)?;
            let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
            Ok(author::check::check(&args, subprocess_compiler(), &mut out, &mut err))
        }
        Some(Command::Eval(args)) => {
            init_logging(cli.log.as_deref().unwrap_or(AUTHOR_LOG), format)?;
            let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
            Ok(author::eval::eval(&args, subprocess_compiler(), &mut out, &mut err))
        }
        Some(Command::New(args)) => {
            init_logging(cli.log.as_deref().unwrap_or("warn"), format)?;
            Ok(author::new::new(&args, &mut std::io::stdout().lock(), &mut std::io::stderr().lock()))
        }
        Some(Command::Push(args)) => {
            init_logging(cli.log.as_deref().unwrap_or("warn"), format)?;
            Ok(oci::push(&args, &mut std::io::stdout().lock(), &mut std::io::stderr().lock()))
        }
        Some(Command::Pull(args)) => {
            init_logging(cli.log.as_deref().unwrap_or("warn"), format)?;
            Ok(oci::pull(&args, &mut std::io::stdout().lock(), &mut std::io::stderr().lock()))
        }
        Some(Command::Sign(args)) => {
            init_logging(cli.log.as_deref().unwrap_or("warn"), format)?;
            Ok(oci::sign(&args, &mut std::io::stdout().lock(), &mut std::io::stderr().lock()))
        }
        Some(Command::Verify(args)) => {
            init_logging(cli.log.as_deref().unwrap_or("warn"), format)?;
            Ok(oci::verify(&args, &mut std::io::stdout().lock(), &mut std::io::stderr().lock()))
        }
        Some(Command::InternalCompile(_) | Command::InternalSnapshot(_)) => {
            unreachable!("handled before anything else")
        }
    }
}

/// `run`: the configuration first (its logging settings apply), then serve.
/// An error after logging is set up is logged (in the log's format), not
/// printed: stderr may be a pipe nobody reads, and the process must still
/// exit once the log is flushed for [`log::FLUSH_WAIT`].
fn serve(log: &Option<String>, format: Option<LogFormat>, args: RunArgs) -> anyhow::Result<std::process::ExitCode> {
    let (config, options) = settings(&args, |k| std::env::var(k).ok())?;
    let filter = log.clone().unwrap_or_else(|| config.logging.level.clone());
    let _log = init_serve_logging(&filter, format.unwrap_or(config.logging.format))?;
    let record = args
        .record
        .clone()
        .map(|path| crate::nri::record::RecordOptions { path, max_bytes: args.record_max_mib.saturating_mul(1 << 20) });
    let served = transport_runtime().map_err(anyhow::Error::from).and_then(|rt| {
        rt.block_on(async {
            let stop = tokio_util::sync::CancellationToken::new();
            stop_on_signals(stop.clone())?;
            if let Some(uid) = args.pod_uid.as_ref().filter(|u| !u.is_empty()) {
                tracing::info!(pod_uid = %uid, "running in this pod: no policy may update or evict its containers");
            }
            HostBuilder::new(config).record(record).own_pod(args.pod_uid.clone()).build()?.serve(options, stop).await
        })
    });
    match served {
        Ok(()) => Ok(std::process::ExitCode::SUCCESS),
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "nri-wasm stopped");
            Ok(std::process::ExitCode::FAILURE)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Cli, Command};

    fn pod_uid(args: &[&str]) -> Result<Option<String>, String> {
        let cli = Cli::try_parse_from(["nri-wasm", "run"].iter().chain(args)).map_err(|e| e.to_string())?;
        match cli.command {
            Some(Command::Run(run)) => Ok(run.pod_uid),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_pod_uid_is_a_uuid_or_refused_by_name() {
        let uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
        assert_eq!(pod_uid(&["--pod-uid", uid]), Ok(Some(uid.into())));
        assert_eq!(pod_uid(&["--pod-uid", &uid.to_uppercase()]), Ok(Some(uid.into())), "compared as lower case");
        // A static pod's: the hash of its manifest.
        assert_eq!(pod_uid(&["--pod-uid", "9f2c1e0d8b7a6f5e4d3c2b1a0f9e8d7c"]).unwrap().unwrap().len(), 32);
        assert_eq!(pod_uid(&[]), Ok(None));
        assert_eq!(pod_uid(&["--pod-uid", ""]), Ok(Some(String::new())), "unset: shields nothing");
        for bad in ["nri-wasm-abcde", "0f1e2d3c 4b5a", "0".repeat(65).as_str(), "0f1e/../x"] {
            let e = pod_uid(&["--pod-uid", bad]).unwrap_err();
            assert!(e.contains("--pod-uid") && e.contains("is not a pod UID"), "{bad:?}: {e}");
        }
    }
}
