//! The `nri-wasm` binary: parse the command line, set up logging, run.

use clap::Parser;
use nri_wasm::cli::{self, Cli, Command};
use tracing_subscriber::EnvFilter;

/// Every event allocates many small strings (protobuf decoding, the WIT
/// conversions, the merge); mimalloc serves them faster than the system
/// allocator (see docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<std::process::ExitCode> {
    let cli = Cli::parse();
    if let Some(Command::InternalCompile(args)) = &cli.command {
        return Ok(nri_wasm::policy::compile::child_main(args.max_bytes));
    }
    // SAFETY: nothing has opened a file yet, so the socket the runtime
    // passed (if it did) is owned by nothing else in the process.
    unsafe { nri_wasm::nri::transport::claim_inherited(|k| std::env::var(k).ok()) }?;
    let filter = EnvFilter::try_from_default_env().or_else(|_| EnvFilter::try_new(&cli.log))?;
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        match cli.command {
            None => cli::run(cli::RunArgs::default()).await,
            Some(Command::Run(args)) => cli::run(args).await,
            #[cfg(feature = "demo")]
            Some(Command::Demo(args)) => cli::demo(args).await,
            Some(Command::InternalCompile(_)) => unreachable!("handled before the runtime starts"),
        }
    })?;
    Ok(std::process::ExitCode::SUCCESS)
}
