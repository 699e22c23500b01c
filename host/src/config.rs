//! The operator's configuration: one TOML file, every key optional.
//!
//! Defaults live in one place (the `Default` impls below), unknown keys are
//! errors (a typo must not silently fall back to a default), and
//! [`Config::validate`] checks what types cannot, before anything connects.
//! Command-line flags override the file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::nri::registration::{IdentityError, PluginIdentity};
use crate::nri::transport::DEFAULT_SOCKET;
use crate::policy::chain::ChainSettings;
use crate::policy::engine::EngineSettings;
use crate::policy::limits::{LimitOverrides, Limits};

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub plugin: PluginConfig,
    pub runtime: RuntimeConfig,
    pub policies: PoliciesConfig,
    pub engine: EngineSettings,
    pub chain: ChainSettings,
}

/// Where the policies are, and the limits they get unless their own
/// settings file says otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct PoliciesConfig {
    /// Directory of `NN-name.wasm` (+ optional `NN-name.toml`) files. Without
    /// one the host runs an empty chain (it answers every event unchanged).
    pub dir: Option<PathBuf>,
    /// Directory where each policy's state is kept across restarts
    /// (`NN-name.json`); without one, state lives in memory only.
    pub state_dir: Option<PathBuf>,
    /// Default limits of every policy call (`[policies.limits]`).
    pub limits: LimitOverrides,
}

impl PoliciesConfig {
    /// The default limits with this file's overrides applied.
    pub fn limits(&self) -> Limits {
        Limits::default().with(&self.limits)
    }
}

/// How we present ourselves to the runtime.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PluginConfig {
    /// Plugin name (`[a-zA-Z0-9_.+-]`).
    pub name: String,
    /// Two-digit index: where the runtime calls us among its plugins.
    pub index: String,
}

impl Default for PluginConfig {
    fn default() -> Self {
        Self { name: "nri-wasm".into(), index: "10".into() }
    }
}

/// How we reach the runtime (external mode). Keys are kebab-case like every
/// other table; the snake_case spelling of the first release is still read.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct RuntimeConfig {
    /// The runtime's NRI socket.
    pub socket: PathBuf,
    /// How long we wait for the runtime to answer RegisterPlugin.
    #[serde(alias = "register_timeout_ms")]
    pub register_timeout_ms: u64,
    /// First reconnect delay after the runtime goes away.
    #[serde(alias = "reconnect_initial_ms")]
    pub reconnect_initial_ms: u64,
    /// Largest reconnect delay.
    #[serde(alias = "reconnect_max_ms")]
    pub reconnect_max_ms: u64,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            socket: PathBuf::from(DEFAULT_SOCKET),
            register_timeout_ms: 5_000,
            reconnect_initial_ms: 250,
            reconnect_max_ms: 30_000,
        }
    }
}

impl RuntimeConfig {
    pub fn register_timeout(&self) -> Duration {
        Duration::from_millis(self.register_timeout_ms)
    }

    pub fn reconnect_initial(&self) -> Duration {
        Duration::from_millis(self.reconnect_initial_ms)
    }

    pub fn reconnect_max(&self) -> Duration {
        Duration::from_millis(self.reconnect_max_ms)
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path} is not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid [plugin] settings: {0}")]
    Identity(#[from] IdentityError),
    #[error("invalid [runtime] settings: {0}")]
    Runtime(String),
    #[error("invalid policy settings: {0}")]
    Policies(String),
}

impl Config {
    /// Reads, parses and validates a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Self::parse(&text, path)
    }

    /// Parses and validates configuration text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text)
            .map_err(|e| ConfigError::Parse { path: origin.to_path_buf(), message: e.to_string() })?;
        config.validate()?;
        Ok(config)
    }

    /// Checks what the types cannot.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.identity()?;
        let rt = &self.runtime;
        if rt.socket.as_os_str().is_empty() {
            return Err(ConfigError::Runtime("socket path is empty".into()));
        }
        if rt.register_timeout_ms == 0 {
            return Err(ConfigError::Runtime("register-timeout-ms must be positive".into()));
        }
        if rt.reconnect_initial_ms == 0 || rt.reconnect_max_ms < rt.reconnect_initial_ms {
            return Err(ConfigError::Runtime(format!(
                "reconnect delays must satisfy 0 < reconnect-initial-ms ({}) <= reconnect-max-ms ({})",
                rt.reconnect_initial_ms, rt.reconnect_max_ms
            )));
        }
        let limits = self.policies.limits();
        limits.validate("[policies.limits]").map_err(ConfigError::Policies)?;
        self.chain.validate().map_err(ConfigError::Policies)?;
        self.engine.validate(&limits).map_err(ConfigError::Policies)?;
        Ok(())
    }

    /// The identity the plugin registers with.
    pub fn identity(&self) -> Result<PluginIdentity, IdentityError> {
        PluginIdentity::new(&self.plugin.name, &self.plugin.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("test.toml"))
    }

    #[test]
    fn empty_file_gives_defaults() {
        let c = parse("").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.runtime.socket, PathBuf::from("/var/run/nri/nri.sock"));
        assert_eq!(c.identity().unwrap().to_string(), "10-nri-wasm");
    }

    #[test]
    fn keys_override_defaults() {
        let c = parse("[plugin]\nname = \"policies\"\nindex = \"05\"\n[runtime]\nsocket = \"/run/x.sock\"\n").unwrap();
        assert_eq!(c.identity().unwrap().to_string(), "05-policies");
        assert_eq!(c.runtime.socket, PathBuf::from("/run/x.sock"));
        assert_eq!(c.runtime.reconnect_max_ms, 30_000);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_errors_that_say_where() {
        let e = parse("[plugin]\nnmae = \"x\"\n").unwrap_err().to_string();
        assert!(e.contains("test.toml") && e.contains("nmae"), "{e}");
        let e = parse("[plugin]\nindex = \"7\"\n").unwrap_err().to_string();
        assert!(e.contains("two digits"), "{e}");
        let e = parse("[runtime]\nreconnect_initial_ms = 10\nreconnect_max_ms = 5\n").unwrap_err().to_string();
        assert!(e.contains("reconnect"), "{e}");
        let e = parse("[runtime]\nregister_timeout_ms = 0\n").unwrap_err().to_string();
        assert!(e.contains("register-timeout-ms"), "{e}");
        let e = parse("[runtime]\nregister-timeout-ms = 0\n").unwrap_err().to_string();
        assert!(e.contains("register-timeout-ms"), "{e}");
    }

    #[test]
    fn the_readme_example_is_a_valid_configuration() {
        let readme = include_str!("../../README.md");
        let section = readme.split("### Configuration").nth(1).expect("README has a Configuration section");
        let block = section.split("```toml\n").nth(1).and_then(|b| b.split("```").next()).expect("a toml block");
        let c = parse(block).unwrap();
        assert_eq!(c.policies.dir.as_deref(), Some(Path::new("/etc/nri-wasm/policies")));
        assert_eq!(c.chain, ChainSettings::default());
        assert_eq!(c.policies.limits(), Limits::default(), "the README shows the defaults");
    }

    #[test]
    fn policy_sections_parse_and_validate() {
        let c = parse(
            "[policies]\ndir = \"/etc/nri-wasm/policies\"\n[policies.limits]\nfuel = 5000\n\
             [engine]\nmax-concurrent-calls = 8\n[chain]\nbudget-fraction = 0.25\n",
        )
        .unwrap();
        assert_eq!(c.policies.dir.as_deref(), Some(Path::new("/etc/nri-wasm/policies")));
        assert_eq!(c.policies.limits().fuel, 5000);
        assert_eq!(c.policies.limits().timeout_ms, Limits::default().timeout_ms);
        assert_eq!(c.engine.max_concurrent_calls, 8);
        assert_eq!(c.chain.budget(Duration::from_secs(2)), Duration::from_millis(500));
        let e = parse("[chain]\nbudget-fraction = 1.5\n").unwrap_err().to_string();
        assert!(e.contains("budget-fraction"), "{e}");
        let e = parse("[policies.limits]\nmemory-mib = 512\n").unwrap_err().to_string();
        assert!(e.contains("memory-mib") && e.contains("max-memory-mib"), "{e}");
        let e = parse("[policies.limits]\nfuel = 0\n").unwrap_err().to_string();
        assert!(e.contains("fuel"), "{e}");
        let c =
            parse("[policies]\nstate-dir = \"/var/lib/nri-wasm/state\"\n[policies.limits]\nstate-kib = 64\n").unwrap();
        assert_eq!(c.policies.state_dir.as_deref(), Some(Path::new("/var/lib/nri-wasm/state")));
        assert_eq!(c.policies.limits().state_kib, 64);
        let e = parse("[policies.limits]\nstate-kib = 0\n").unwrap_err().to_string();
        assert!(e.contains("state-kib"), "{e}");
        let e = parse("[engine]\npoolng = true\n").unwrap_err().to_string();
        assert!(e.contains("poolng"), "{e}");
        assert_eq!(parse("[engine]\nwarm-policies = 16\n").unwrap().engine.warm_policies, 16);
        let e = parse("[engine]\nwarm-policies = 0\n").unwrap_err().to_string();
        assert!(e.contains("warm-policies"), "{e}");
    }
}
