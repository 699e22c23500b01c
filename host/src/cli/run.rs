//! `nri-wasm run`: the settings a serving host starts from.
//!
//! The configuration file, the flags and the environment a runtime launches
//! plugins with are merged here into one checked [`Config`] and the
//! connection options; the host itself is put together in `host.rs`
//! ([`super::HostBuilder`]), so that the binary and the tests assemble it the
//! same way.

use tokio_util::sync::CancellationToken;

use super::RunArgs;
use crate::config::Config;
use crate::nri::transport::{self, Endpoint};
use crate::nri::{ConnectOptions, PluginIdentity};
use crate::policy::load::compile::Compiler;

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
