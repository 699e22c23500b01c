//! The policy author's commands: `check`, `eval` (with `--replay`) and `new`.
//!
//! They answer, offline and in minutes, what an author otherwise learns on
//! a node: does the host load this component, what does the chain do with
//! this event, what does a policy cost. So they run nothing of their own:
//! the host is put together by [`HostBuilder`](crate::cli::HostBuilder),
//! the composition root `run` uses, from a node's configuration when
//! `--config` names one (its engine and compile cache, the registry client
//! of its `[registry]`, its `[policies.sources]`), with the loader's steps,
//! the chain with its limits, time shares, merge and validation, and the
//! dispatcher that keeps the node view and the policies' state between
//! events. What they add is only the input (a request in NRI's JSON, a
//! recording) and a report of what each policy did; what they do not do as
//! a node does (state kept in memory, nothing served or watched) is said in
//! `session.rs` and docs/writing-policies.md.
//!
//! - `check.rs`: one component through every load step, with its costs;
//! - `eval.rs`: events through a chain, one or a recording (`replay.rs`),
//!   both run by `session.rs` (the chain loaded, each request dispatched)
//!   and reported by `report.rs`; neither of those knows which input it
//!   serves, so that `eval` and `replay` do not depend on each other;
//! - `describe.rs`: replies as the Rust SDK's test lines;
//! - `new.rs`: a project from a template.
//!
//! Exit codes are part of the interface (scripts and CI use them):
//! [`EXIT_OK`], [`EXIT_FAILED`], [`EXIT_USAGE`], [`EXIT_POLICY_ERROR`].

pub mod check;
pub mod describe;
pub mod eval;
pub mod new;
mod replay;
mod report;
mod session;

use std::path::{Path, PathBuf};

use clap::Args;

use crate::cli::host::BuildError;
use crate::config::{Config, ConfigError};
use crate::policy::engine::EngineSettings;
use crate::policy::spec::limits::Limits;
use crate::policy::spec::manifest;
use crate::policy::spec::manifest::{PolicySpec, ReadOptions, SpecError};

/// `check`: the policy loads. `eval`: every event succeeded and every
/// policy loaded and answered.
pub const EXIT_OK: u8 = 0;
/// `check`: the host refuses the policy (the report names the step).
/// `eval`: an event would fail at the runtime (a denial, a failure of a
/// policy with `on-error = "fail"`, a conflict).
pub const EXIT_FAILED: u8 = 1;
/// Nothing was checked or evaluated: a usage error, or an input (policy
/// file, event, recording, settings, state, configuration) that cannot be
/// read.
pub const EXIT_USAGE: u8 = 2;
/// `eval`: every event succeeded, but a policy did not load or failed (a
/// trap, a limit, invalid output) and `on-error = "ignore"` dropped its
/// output.
pub const EXIT_POLICY_ERROR: u8 = 3;

/// Where a policy's settings come from, when not from its `NN-name.toml`.
#[derive(Debug, Args, Clone, Default)]
pub struct SettingsArgs {
    /// The settings text given to the policy's `configure`.
    #[arg(long, conflicts_with = "settings_file")]
    pub settings: Option<String>,
    /// The settings from a file: its text as is, or, for a `.toml` file,
    /// the policy file an operator installs as `NN-name.toml` (its
    /// settings, limits, on-error, on-conflict and mode apply).
    #[arg(long, value_name = "FILE")]
    pub settings_file: Option<PathBuf>,
}

/// The host side: its configuration and the compile cache.
#[derive(Debug, Args, Clone, Default)]
pub struct HostArgs {
    // The brackets name TOML tables in `--help`, not Rust items.
    #[allow(rustdoc::broken_intra_doc_links, rustdoc::private_intra_doc_links)]
    /// A node's configuration file: the policies load as on a node with it
    /// (its [engine], [chain], default [policies.limits], [registry] with
    /// its keys and certificates, and the policies of [policies.sources]
    /// beside those given); see docs/writing-policies.md for what differs.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where compiled policies are kept between runs (default: the
    /// configuration's cache-dir, else $XDG_CACHE_HOME/nri-wasm or
    /// ~/.cache/nri-wasm).
    #[arg(long, value_name = "DIR", env = "NRI_WASM_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
}

/// What keeps a command from starting.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The `--config` file cannot be read or is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The configuration's limits, engine or chain settings break a rule
    /// (the rule, naming the table).
    #[error("invalid configuration: {}", .0.text())]
    InvalidConfig(Box<crate::invalid::Invalid>),
    /// The policy file or directory (given) does not exist.
    #[error("{}: no such file or directory", .0.display())]
    Missing(PathBuf),
    /// The `--settings-file` cannot be read or is not UTF-8 text.
    #[error("--settings-file {}: {reason}", path.display())]
    SettingsFile {
        /// The `--settings-file` given.
        path: PathBuf,
        /// Why it cannot be used.
        reason: String,
    },
    /// The policy's file name or its `NN-name.toml` is invalid.
    #[error(transparent)]
    PolicyFile(#[from] SpecError),
    /// The host could not be put together (the engine, `[policies.sources]`).
    #[error(transparent)]
    Host(#[from] BuildError),
    /// The command line asks for something the command cannot do, or the
    /// command's own setup (a runtime, a temporary directory) failed.
    #[error("{0}")]
    Usage(String),
}

/// How long `check` and `eval` let a compile take without a configuration:
/// a node's default (60 s) protects a node, but an author's busy laptop
/// compiling an 18 MB Python component takes longer, and would be refused
/// for nothing. With `--config`, the node's own limit applies.
const AUTHOR_COMPILE_TIMEOUT_MS: u64 = 600_000;

/// The host's configuration, checked, or the defaults (with a compile
/// limit for an author's machine).
fn host_config(args: &HostArgs) -> Result<Config, SetupError> {
    let config = match &args.config {
        Some(path) => Config::load(path)?,
        None => {
            let mut config = Config::default();
            config.engine.compile_timeout_ms = config.engine.compile_timeout_ms.max(AUTHOR_COMPILE_TIMEOUT_MS);
            config
        }
    };
    let invalid = |e| SetupError::InvalidConfig(Box::new(e));
    config.policies.limits().validate("[policies.limits]").map_err(invalid)?;
    config.engine.validate(&config.policies.limits()).map_err(invalid)?;
    config.chain.validate().map_err(invalid)?;
    Ok(config)
}

/// The compile cache `check` and `eval` share with the host: the one the
/// command line names, else the configuration's, else the user's.
fn cache_dir(named: &Option<PathBuf>, settings: &EngineSettings) -> Option<PathBuf> {
    named.clone().or_else(|| settings.cache_dir.clone()).or_else(user_cache_dir)
}

/// The user's cache of compiled policies.
fn user_cache_dir() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?).join(".cache"),
    };
    Some(base.join("nri-wasm"))
}

/// The spec of one component file: named `NN-name` after the file (or its
/// stem), with its `NN-name.toml` beside it if there is one, then the
/// settings the command line gives.
fn file_spec(wasm: &Path, settings: &SettingsArgs, defaults: Limits) -> Result<PolicySpec, SetupError> {
    let file_name = wasm.file_name().and_then(|n| n.to_str()).unwrap_or("policy.wasm");
    let (name, beside) = match manifest::policy_stem(file_name, "wasm") {
        Some(stem) => {
            let toml = wasm.with_file_name(format!("{stem}.toml"));
            (stem, toml.is_file().then_some(toml))
        }
        None => (file_name.strip_suffix(".wasm").unwrap_or(file_name).to_string(), None),
    };
    let mut spec = manifest::read_spec(&name, wasm, beside.as_deref(), ReadOptions::lenient(defaults))?;
    apply_settings(&mut spec, settings, defaults)?;
    Ok(spec)
}

/// Most bytes of a settings file (as for a policy's `NN-name.toml`).
const MAX_SETTINGS_BYTES: u64 = 1 << 20;

/// Applies `--settings` or `--settings-file` to `spec`.
fn apply_settings(spec: &mut PolicySpec, settings: &SettingsArgs, defaults: Limits) -> Result<(), SetupError> {
    if let Some(text) = &settings.settings {
        spec.settings = text.clone();
    }
    let Some(path) = &settings.settings_file else { return Ok(()) };
    let bad = |reason: String| SetupError::SettingsFile { path: path.clone(), reason };
    // A file that cannot be read is a usage error of this command, said as
    // such, whatever its kind (a `.toml` is then read as a node reads it).
    let bytes = crate::files::read_bounded(path, MAX_SETTINGS_BYTES).map_err(|e| bad(e.reason()))?;
    if path.extension().is_some_and(|e| e == "toml") {
        let from_file = manifest::read_spec(&spec.name, &spec.wasm, Some(path), ReadOptions::lenient(defaults))?;
        *spec = from_file;
    } else {
        spec.settings = String::from_utf8(bytes).map_err(|_| bad("not UTF-8 text".into()))?;
    }
    Ok(())
}

/// Thousands separated by commas, for fuel.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration in milliseconds, for people.
fn ms(d: std::time::Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_easily() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(100_000_000), "100,000,000");
        assert_eq!(ms(std::time::Duration::from_micros(1234)), "1.23 ms");
        assert_eq!(ms(std::time::Duration::from_micros(12_340)), "12.3 ms");
    }

    #[test]
    fn a_policy_file_is_read_beside_the_component_and_settings_override_it() {
        let dir = tempfile::tempdir().unwrap();
        let wasm = dir.path().join("20-x.wasm");
        std::fs::write(
            dir.path().join("20-x.toml"),
            "on-error = \"fail\"\nsettings = \"beside\"\n[limits]\nfuel = 7\n",
        )
        .unwrap();
        let none = SettingsArgs::default();
        let spec = file_spec(&wasm, &none, Limits::default()).unwrap();
        assert_eq!((spec.name.as_str(), spec.settings.as_str(), spec.limits.fuel), ("20-x", "beside", 7));
        let text = SettingsArgs { settings: Some("given".into()), settings_file: None };
        assert_eq!(file_spec(&wasm, &text, Limits::default()).unwrap().settings, "given");

        let raw = dir.path().join("settings.json");
        std::fs::write(&raw, "{\"a\": 1}").unwrap();
        let from_raw = SettingsArgs { settings: None, settings_file: Some(raw) };
        let spec = file_spec(&dir.path().join("plain.wasm"), &from_raw, Limits::default()).unwrap();
        assert_eq!((spec.name.as_str(), spec.settings.as_str()), ("plain", "{\"a\": 1}"));

        let policy = dir.path().join("policy.toml");
        std::fs::write(&policy, "mode = \"audit\"\n[settings]\nlabel = \"team\"\n").unwrap();
        let from_toml = SettingsArgs { settings: None, settings_file: Some(policy) };
        let spec = file_spec(&dir.path().join("plain.wasm"), &from_toml, Limits::default()).unwrap();
        assert_eq!(spec.settings, r#"{"label":"team"}"#);
        assert_eq!(spec.mode, crate::policy::spec::manifest::Mode::Audit);

        let typo = dir.path().join("typo.toml");
        std::fs::write(&typo, "on-eror = \"fail\"\n").unwrap();
        let e = file_spec(&wasm, &SettingsArgs { settings: None, settings_file: Some(typo) }, Limits::default());
        assert!(e.unwrap_err().to_string().contains("on-eror"));
    }
}
