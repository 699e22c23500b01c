//! The operator's configuration: one TOML file, every key optional.
//!
//! Defaults live in one place (the `Default` impls below), unknown keys are
//! errors (a typo must not silently fall back to a default), and
//! [`Config::validate`] checks what types cannot, before anything connects.
//! Errors name the file, the line, the key and what is allowed. Command-line
//! flags override the file. Every key is documented in
//! `docs/configuration.md`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::nri::registration::{IdentityError, PluginIdentity};
use crate::nri::transport::DEFAULT_SOCKET;
use crate::policy::chain::ChainSettings;
use crate::policy::engine::EngineSettings;
use crate::policy::limits::{LimitOverrides, Limits};
pub use crate::text::toml_error;

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Deserialize, Default, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `[plugin]`: the name and index the host registers with.
    pub plugin: PluginConfig,
    /// `[runtime]`: the runtime's socket and the timings of the connection.
    pub runtime: RuntimeConfig,
    /// `[policies]`: where the policies are and which are named by reference.
    pub policies: PoliciesConfig,
    /// `[engine]`: the WebAssembly engine and each call's default limits.
    pub engine: EngineSettings,
    /// `[registry]`: pulling and verifying policies named by reference.
    pub registry: crate::registry::RegistrySettings,
    /// `[chain]`: how the chain shares the runtime's time and handles failures.
    pub chain: ChainSettings,
    /// `[metrics]`: the metrics, health and status endpoint.
    pub metrics: MetricsConfig,
    /// `[logging]`: the level and format of the host's log.
    pub logging: LoggingConfig,
}

/// Where the metrics and health endpoint listens unless configured.
pub const DEFAULT_METRICS_ADDRESS: &str = "127.0.0.1:9580";

/// The metrics and health endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct MetricsConfig {
    /// Address of the HTTP endpoint (`/metrics`, `/healthz`, `/readyz`,
    /// `/status`); an empty string turns it off.
    pub address: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self { address: DEFAULT_METRICS_ADDRESS.into() }
    }
}

impl MetricsConfig {
    /// The address to listen on, if the endpoint is on.
    pub fn socket_addr(&self) -> Result<Option<std::net::SocketAddr>, String> {
        if self.address.is_empty() {
            return Ok(None);
        }
        self.address.parse().map(Some).map_err(|_| {
            format!("[metrics] address {:?} is not an IP address and port such as 127.0.0.1:9580", self.address)
        })
    }
}

/// How the host logs.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default, rename_all = "kebab-case")]
pub struct LoggingConfig {
    /// A level (`error`, `warn`, `info`, `debug`, `trace`) or a filter such
    /// as `info,nri_wasm::nri=debug`; `RUST_LOG` overrides it.
    pub level: String,
    /// `text` or `json`.
    pub format: LogFormat,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        Self { level: "info".into(), format: LogFormat::Text }
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// Human-readable lines (colours only on a terminal).
    Text,
    /// One JSON object per line.
    Json,
}

/// Where the policies are, and the limits they get unless their own
/// settings file says otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
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
    /// Refuse policy files (and settings files) not owned by root or
    /// writable by group or others.
    pub strict_permissions: bool,
    /// Watch the directory and reload when it changes (SIGHUP reloads too).
    pub watch: bool,
    /// How long the directory must be quiet before a reload, in milliseconds
    /// (editors, `kubectl cp` and ConfigMap updates write in several steps).
    pub reload_debounce_ms: u64,
    /// Policies named by reference in the host configuration rather than in
    /// a settings file: `"NN-name" = "oci://…"`. The policy's `NN-name.toml`
    /// in `dir`, if there, gives its settings and must not name a source.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub sources: std::collections::BTreeMap<String, String>,
}

impl Default for PoliciesConfig {
    fn default() -> Self {
        Self {
            dir: None,
            state_dir: None,
            limits: LimitOverrides::default(),
            strict_permissions: false,
            watch: true,
            reload_debounce_ms: 500,
            sources: std::collections::BTreeMap::new(),
        }
    }
}

impl PoliciesConfig {
    /// The default limits with this file's overrides applied.
    pub fn limits(&self) -> Limits {
        Limits::default().with(&self.limits)
    }

    /// `[policies.sources]`, checked: each name is a policy's (`NN-name`),
    /// each reference parses.
    pub fn sources(&self) -> Result<Vec<(String, crate::registry::OciRef)>, String> {
        self.sources
            .iter()
            .map(|(name, text)| {
                if crate::policy::manifest::policy_stem(&format!("{name}.toml"), "toml").as_deref() != Some(name) {
                    return Err(format!("[policies.sources] {name:?} is not a policy name (NN-name, e.g. 30-ulimit)"));
                }
                let reference =
                    crate::registry::OciRef::parse(text).map_err(|e| format!("[policies.sources] {name}: {e}"))?;
                Ok((name.clone(), reference))
            })
            .collect()
    }
}

/// How we present ourselves to the runtime.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
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
    /// Longest the host waits at start, before registering, for the
    /// subscriptions of its policies to be known (both modes).
    pub start_wait_ms: u64,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            socket: PathBuf::from(DEFAULT_SOCKET),
            register_timeout_ms: 5_000,
            reconnect_initial_ms: 250,
            reconnect_max_ms: 30_000,
            start_wait_ms: 3_000,
        }
    }
}

impl RuntimeConfig {
    /// `register-timeout-ms` as a duration.
    pub fn register_timeout(&self) -> Duration {
        Duration::from_millis(self.register_timeout_ms)
    }

    /// `reconnect-initial-ms` as a duration.
    pub fn reconnect_initial(&self) -> Duration {
        Duration::from_millis(self.reconnect_initial_ms)
    }

    /// `reconnect-max-ms` as a duration.
    pub fn reconnect_max(&self) -> Duration {
        Duration::from_millis(self.reconnect_max_ms)
    }

    /// `start-wait-ms` as a duration.
    pub fn start_wait(&self) -> Duration {
        Duration::from_millis(self.start_wait_ms)
    }
}

/// What `[runtime] start-wait-ms` must stay below: the time a runtime gives
/// a plugin it launched to register (containerd's default; the runtime
/// tells its own value only in Configure, after the registration). A
/// launched plugin that has not registered by then is dropped.
pub const RUNTIME_REGISTRATION_TIMEOUT: Duration = crate::nri::service::DEFAULT_REGISTRATION_TIMEOUT;

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}")]
    Read {
        /// The configuration file.
        path: PathBuf,
        /// Why reading it failed.
        source: std::io::Error,
    },
    /// The file is not TOML of the expected shape (unknown key, wrong type).
    #[error("config file {}: {message}", path.display())]
    Parse {
        /// The configuration file (or the origin its text was given as).
        path: PathBuf,
        /// What is wrong, with the line and the keys the table accepts.
        message: String,
    },
    /// The file parses, but a value breaks a rule the types cannot express.
    #[error("config file {}{}: {message}", path.display(), line.map(|l| format!(", line {l}")).unwrap_or_default())]
    Invalid {
        /// The configuration file, or `(flags)` when command-line flags
        /// changed the value.
        path: PathBuf,
        /// The line of the offending key, when it can be found in the text.
        line: Option<usize>,
        /// The rule broken, naming the table and the key.
        message: String,
    },
    /// The `[plugin]` name or index is not one the runtime accepts.
    #[error("invalid [plugin] settings")]
    Identity(#[from] IdentityError),
}

/// The tables of the file and the keys each may hold (for locating errors).
const TABLES: &[(&str, &[&str])] = &[
    ("plugin", &["name", "index"]),
    ("runtime", &["socket", "register-timeout-ms", "reconnect-initial-ms", "reconnect-max-ms", "start-wait-ms"]),
    ("policies", &["dir", "state-dir", "strict-permissions", "watch", "reload-debounce-ms", "sources"]),
    (
        "policies.limits",
        &["fuel", "timeout-ms", "memory-mib", "table-elements", "instances", "tables", "memories", "state-kib"],
    ),
    (
        "engine",
        &[
            "cache-dir",
            "cache-max-mib",
            "pooling",
            "max-concurrent-calls",
            "max-memory-mib",
            "warm-policies",
            "max-component-mib",
            "compile-timeout-ms",
            "compile-memory-mib",
        ],
    ),
    (
        "registry",
        &[
            "cache-dir",
            "auth-file",
            "ca-file",
            "timeout-ms",
            "public-keys",
            "tag-recheck-ms",
            "plain-http",
            "plain-http-signed",
        ],
    ),
    ("chain", &["budget-fraction", "breaker-failures", "breaker-backoff-ms", "min-call-ms"]),
    ("metrics", &["address"]),
    ("logging", &["level", "format"]),
];

/// The line (1-based) of the key an error message names, in its table.
fn line_of(text: &str, message: &str) -> Option<usize> {
    let (table, keys) = TABLES.iter().rev().find(|(t, _)| message.contains(&format!("[{t}]")))?;
    let key = keys.iter().find(|k| message.contains(&format!(" {k}")))?;
    let mut in_table = false;
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.starts_with('[') {
            in_table = l.trim_matches(|c| c == '[' || c == ']').trim() == *table;
            continue;
        }
        if in_table {
            let name = l.split('=').next().unwrap_or("").trim().replace('_', "-");
            if name == *key {
                return Some(i + 1);
            }
        }
    }
    None
}

/// A log filter: levels, or `target=level` directives, comma separated. A
/// bare word that is not a level would be taken as a target name and
/// silently log nothing of it, so it is refused.
fn check_log_filter(filter: &str) -> Result<(), String> {
    const LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let level = directive.rsplit_once('=').map_or(directive, |(_, level)| level);
        if !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            return Err(format!("{directive:?} names no level"));
        }
    }
    tracing_subscriber::EnvFilter::try_new(filter).map(drop).map_err(|e| e.to_string())
}

/// Every key and table name of the configuration file.
fn config_keys() -> Vec<&'static str> {
    TABLES.iter().flat_map(|(table, keys)| keys.iter().copied().chain(table.split('.'))).collect()
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
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_path_buf(),
            message: toml_error(text, &e, &config_keys()),
        })?;
        config.check().map_err(|message| ConfigError::Invalid {
            path: origin.to_path_buf(),
            line: line_of(text, &message),
            message,
        })?;
        Ok(config)
    }

    /// Checks what the types cannot (for a configuration built in code or
    /// changed by flags).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check().map_err(|message| ConfigError::Invalid { path: PathBuf::from("(flags)"), line: None, message })
    }

    fn check(&self) -> Result<(), String> {
        self.identity().map_err(|e| format!("[plugin] {e}"))?;
        let rt = &self.runtime;
        if rt.socket.as_os_str().is_empty() {
            return Err("[runtime] socket must not be empty".into());
        }
        if rt.register_timeout_ms == 0 {
            return Err("[runtime] register-timeout-ms must be positive".into());
        }
        if rt.reconnect_initial_ms == 0 || rt.reconnect_max_ms < rt.reconnect_initial_ms {
            return Err(format!(
                "[runtime] reconnect-initial-ms ({}) must be positive and at most reconnect-max-ms ({})",
                rt.reconnect_initial_ms, rt.reconnect_max_ms
            ));
        }
        let registration_ms = RUNTIME_REGISTRATION_TIMEOUT.as_millis() as u64;
        if rt.start_wait_ms >= registration_ms {
            return Err(format!(
                "[runtime] start-wait-ms {} must be below {registration_ms}, the runtime's registration timeout \
                 (containerd's default): a plugin the runtime launched is dropped if it has not registered by then",
                rt.start_wait_ms
            ));
        }
        if self.policies.reload_debounce_ms > 60_000 {
            return Err(format!(
                "[policies] reload-debounce-ms {} must be at most 60000",
                self.policies.reload_debounce_ms
            ));
        }
        self.policies.sources()?;
        let limits = self.policies.limits();
        limits.validate("[policies.limits]")?;
        self.chain.validate()?;
        self.engine.validate(&limits)?;
        self.registry.validate()?;
        self.metrics.socket_addr()?;
        check_log_filter(&self.logging.level).map_err(|why| {
            format!(
                "[logging] level {:?}: {why}; allowed: off, error, warn, info, debug, trace, or a filter such as \
                 \"info,nri_wasm::nri=debug\"",
                self.logging.level
            )
        })?;
        Ok(())
    }

    /// The identity the plugin registers with.
    pub fn identity(&self) -> Result<PluginIdentity, IdentityError> {
        PluginIdentity::new(&self.plugin.name, &self.plugin.index)
    }

    /// The configuration as TOML (every key, defaults included).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot print the configuration: {e}\n"))
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

    /// `[policies.sources]`: policy names and references, checked.
    #[test]
    fn policies_named_in_the_host_configuration_are_checked() {
        let digest = "a".repeat(64);
        let c = parse(&format!(
            "[policies.sources]\n\"30-ulimit\" = \"oci://r.example:5000/p/ulimit:1@sha256:{digest}\"\n"
        ))
        .unwrap();
        let sources = c.policies.sources().unwrap();
        assert_eq!(sources.len(), 1);
        assert_eq!((sources[0].0.as_str(), sources[0].1.repository.as_str()), ("30-ulimit", "p/ulimit"));
        assert_eq!(parse(&c.to_toml()).unwrap().policies.sources, c.policies.sources, "{}", c.to_toml());
        let e = parse("[policies.sources]\nulimit = \"oci://r.example/p/u:1\"\n").unwrap_err().to_string();
        assert!(e.contains("[policies.sources] \"ulimit\" is not a policy name"), "{e}");
        let e = parse("[policies.sources]\n\"30-u\" = \"https://r.example/p/u:1\"\n").unwrap_err().to_string();
        assert!(e.contains("[policies.sources] 30-u:"), "{e}");
    }

    /// The start wait is below the runtime's registration timeout; an error
    /// names the key, its line, the value and the limit.
    #[test]
    fn start_wait_is_below_the_runtimes_registration_timeout() {
        assert_eq!(parse("").unwrap().runtime.start_wait(), Duration::from_secs(3));
        assert_eq!(parse("[runtime]\nstart-wait-ms = 0\n").unwrap().runtime.start_wait_ms, 0);
        assert_eq!(parse("[runtime]\nstart-wait-ms = 4999\n").unwrap().runtime.start_wait_ms, 4999);
        for value in [5000, 60_000] {
            let e = parse(&format!("[plugin]\nname = \"x\"\n[runtime]\nstart-wait-ms = {value}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("line 4")
                    && e.contains(&format!(
                        "[runtime] start-wait-ms {value} must be below 5000, the runtime's registration timeout"
                    )),
                "{e}"
            );
        }
        let mut c = Config::default();
        c.runtime.start_wait_ms = 5000;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("start-wait-ms 5000") && e.contains("registration"), "{e}");
    }

    /// A file that cannot be read is named, and the reason given once, by
    /// the error's Display and by its source (anyhow's `{:#}`, `text::chain`).
    #[test]
    fn a_read_error_gives_its_cause_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.toml");
        let e = Config::load(&path).unwrap_err();
        let direct = crate::text::chain(&e);
        let shown = format!("{:#}", anyhow::Error::new(e));
        assert_eq!(shown, direct);
        assert!(shown.starts_with(&format!("cannot read config file {}: ", path.display())), "{shown}");
        assert_eq!(shown.matches("No such file or directory").count(), 1, "{shown}");
    }

    /// A syntax or type error says where it is and why, never what the line
    /// says: Config::load names the file, line and column.
    #[test]
    fn toml_errors_locate_without_echoing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nri-wasm.toml");
        std::fs::write(&path, "[plugin]\nname = \"x\"\n[runtime]\nsocket = \"/run/hunter2-secret.sock\n").unwrap();
        let e = Config::load(&path).unwrap_err().to_string();
        assert!(e.contains("nri-wasm.toml") && e.contains("line 4, column"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        for (text, at, why) in [
            ("[runtime]\nregister-timeout-ms = \"hunter2\"\n", "line 2, column 23", "invalid type: a string, expected"),
            ("[logging]\nformat = \"hunter2\"\n", "line 2, column 10", "unknown variant, expected `text` or `json`"),
            ("[logging]\n  level = 'é' 'hunter2'\n", "line 2, column 15", ""),
            ("[plugin]\nindex = 3.5\n", "line 2, column 9", "invalid type: a floating-point number, expected"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(at) && e.contains(why) && !e.contains("hunter2") && !e.contains("3.5"), "{text:?}: {e}");
        }
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

    /// docs/configuration.md documents every key of every table, with the
    /// default the code has, and its complete example is a valid file.
    #[test]
    fn the_configuration_reference_documents_every_key_and_default() {
        let doc = include_str!("../../docs/configuration.md");
        let defaults: toml::Table = toml::from_str(&Config::default().to_toml()).unwrap();
        let limits = toml::Table::try_from(Limits::default()).unwrap();
        let limit_keys: Vec<&str> = limits.keys().map(String::as_str).collect();
        let tables = TABLES.iter().map(|(t, k)| (*t, k.to_vec())).chain([("policies.limits", limit_keys)]);
        for (table, keys) in tables {
            let heading = doc.find(&format!("`[{table}]`")).unwrap_or_else(|| panic!("no section for [{table}]"));
            let values = match table {
                "policies.limits" => Some(&limits),
                t => defaults.get(t).and_then(|v| v.as_table()),
            };
            for key in keys {
                let row = doc[heading..]
                    .lines()
                    .find(|l| l.starts_with(&format!("| `{key}` |")))
                    .unwrap_or_else(|| panic!("[{table}] {key} is not documented"));
                let documented = row.split('|').nth(2).unwrap().trim().trim_matches('`');
                // The cache's default depends on the user; the table shows root's.
                let root_cache = toml::Value::from(crate::policy::engine::ROOT_CACHE_DIR);
                let root_oci = toml::Value::from("/var/cache/nri-wasm/oci");
                let value = if (table, key) == ("engine", "cache-dir") {
                    Some(&root_cache)
                } else if (table, key) == ("registry", "cache-dir") {
                    Some(&root_oci)
                } else {
                    values.and_then(|t| t.get(key))
                };
                match value {
                    Some(value) => assert_eq!(documented, value.to_string(), "[{table}] {key}: documented default"),
                    None => assert_eq!(documented, "none", "[{table}] {key} has no default"),
                }
            }
        }
        let example = doc.split("## A complete file").nth(1).expect("a complete example");
        let block = example.split("```toml\n").nth(1).and_then(|b| b.split("```").next()).unwrap();
        let c = parse(block).unwrap();
        assert_eq!(c.policies.dir.as_deref(), Some(Path::new("/etc/nri-wasm/policies")));
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
        // The compile cache: on by default, in the same place whether or not
        // [engine] is there; "" turns it off, and reads back as off.
        let default = crate::policy::engine::default_cache_dir();
        assert!(default.is_some(), "a user with a home has a default cache");
        assert_eq!(parse("").unwrap().engine.cache_dir, default);
        assert_eq!(parse("[engine]\npooling = true\n").unwrap().engine.cache_dir, default);
        let off = parse("[engine]\ncache-dir = \"\"\n").unwrap();
        assert_eq!(off.engine.cache_dir, None);
        assert_eq!(parse(&off.to_toml()).unwrap().engine.cache_dir, None, "{}", off.to_toml());
        let e = parse("[engine]\ncache-dir = \"cache\"\n").unwrap_err().to_string();
        assert!(e.contains("cache-dir") && e.contains("absolute") && e.contains("line 2"), "{e}");
        let e = parse("[engine]\nwarm-policies = 0\n").unwrap_err().to_string();
        assert!(e.contains("warm-policies"), "{e}");
    }
}
