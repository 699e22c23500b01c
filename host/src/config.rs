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

use crate::invalid::Invalid;
use crate::nri::registration::{IdentityError, PluginIdentity};
use crate::nri::transport::DEFAULT_SOCKET;
use crate::policy::chain::ChainSettings;
use crate::policy::engine::EngineSettings;
use crate::policy::spec::limits::{LimitOverrides, Limits};
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
    pub fn socket_addr(&self) -> Result<Option<std::net::SocketAddr>, Invalid> {
        if self.address.is_empty() {
            return Ok(None);
        }
        self.address.parse().map(Some).map_err(|_| {
            let rule = format!("{:?} is not an IP address and port such as 127.0.0.1:9580", self.address);
            Invalid::key("[metrics]", "address", rule)
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
    pub fn sources(&self) -> Result<Vec<(String, crate::registry::OciRef)>, Invalid> {
        self.sources.iter().map(|(name, text)| source(name, text)).collect()
    }
}

/// One entry of `[policies.sources]`, checked.
fn source(name: &str, text: &str) -> Result<(String, crate::registry::OciRef), Invalid> {
    const T: &str = "[policies.sources]";
    if crate::policy::spec::manifest::policy_stem(&format!("{name}.toml"), "toml").as_deref() != Some(name) {
        return Err(Invalid::key(T, name, "is not a policy name (NN-name, e.g. 30-ulimit)"));
    }
    let reference = crate::registry::OciRef::parse(text)
        .map_err(|e| Invalid::key(T, name, "is not a usable reference").because(e))?;
    Ok((name.to_string(), reference))
}

impl PoliciesConfig {
    /// `[policies.limits]` as the host applies it: every limit, the
    /// overrides of this file over the defaults.
    pub fn effective_limits(&self) -> LimitOverrides {
        let l = self.limits();
        LimitOverrides {
            fuel: Some(l.fuel),
            timeout_ms: Some(l.timeout_ms),
            memory_mib: Some(l.memory_mib),
            table_elements: Some(l.table_elements),
            instances: Some(l.instances),
            tables: Some(l.tables),
            memories: Some(l.memories),
            state_kib: Some(l.state_kib),
        }
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
    /// The path is not a regular file, or the file is larger than a
    /// configuration may be.
    #[error("config file {}: {reason}", path.display())]
    Unusable {
        /// The configuration file.
        path: PathBuf,
        /// What it is instead.
        reason: String,
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
    #[error(
        "config file {}{}: {}",
        path.display(),
        line.map(|l| format!(", line {l}")).unwrap_or_default(),
        problem.text()
    )]
    Invalid {
        /// The configuration file, or `(flags)` when command-line flags
        /// changed the value.
        path: PathBuf,
        /// The line of the offending key, when it can be found in the text.
        line: Option<usize>,
        /// The rule broken, naming the table and the key (shown with its
        /// cause, so it is not this error's `source()`).
        problem: Box<Invalid>,
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

/// A log filter: levels, or `target=level` directives, comma separated. A
/// bare word that is not a level would be taken as a target name and
/// silently log nothing of it, so it is refused.
fn check_log_filter(filter: &str) -> Result<(), Invalid> {
    const LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];
    let refused = |why: String| {
        let rule = format!(
            "{filter:?}: {why}; allowed: off, error, warn, info, debug, trace, or a filter such as \
             \"info,nri_wasm::nri=debug\""
        );
        Invalid::key("[logging]", "level", rule)
    };
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let level = directive.rsplit_once('=').map_or(directive, |(_, level)| level);
        if !LEVELS.contains(&level.to_ascii_lowercase().as_str()) {
            return Err(refused(format!("{directive:?} names no level")));
        }
    }
    tracing_subscriber::EnvFilter::try_new(filter).map(drop).map_err(|e| refused("not a filter".into()).because(e))
}

/// Every key and table name of the configuration file.
fn config_keys() -> Vec<&'static str> {
    TABLES.iter().flat_map(|(table, keys)| keys.iter().copied().chain(table.split('.'))).collect()
}

/// Most bytes of a configuration file: many times what the largest one
/// needs, and a bound on what the host reads before it has a limit of its
/// own.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

impl Config {
    /// Reads, parses and validates a configuration file: its first error
    /// (in file order), if it has any.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_all(path).map_err(first)
    }

    /// Reads, parses and validates a configuration file: every error, in
    /// file order (see [`Config::parse_all`]).
    pub fn load_all(path: &Path) -> Result<Self, Vec<ConfigError>> {
        use crate::files::FileError;
        // One descriptor, a regular file, a bound: a FIFO named as the
        // configuration would hold the start forever, `/dev/zero` would
        // fill the memory.
        let bytes = crate::files::read_bounded(path, MAX_CONFIG_BYTES).map_err(|e| {
            let path = path.to_path_buf();
            vec![match e {
                FileError::Read { source, .. } => ConfigError::Read { path, source },
                e => ConfigError::Unusable { path, reason: e.reason() },
            }]
        })?;
        let text = String::from_utf8(bytes)
            .map_err(|_| vec![ConfigError::Unusable { path: path.to_path_buf(), reason: "not UTF-8 text".into() }])?;
        Self::parse_all(&text, path)
    }

    /// Parses and validates configuration text; `origin` names it in
    /// errors. The first error in file order, if there is one.
    pub fn parse(text: &str, origin: &Path) -> Result<Self, ConfigError> {
        Self::parse_all(text, origin).map_err(first)
    }

    /// Parses and validates configuration text, and returns every error it
    /// finds, in file order, each with its line (`config check` prints them
    /// all, so that an operator fixes a file in one pass).
    ///
    /// serde stops at the first error of a document, so the errors past it
    /// are found key by key (`every_error`): syntax errors (all of them, as
    /// the parser recovers; nothing else is reported then, since what
    /// follows a syntax error may not read as it was meant), then each key
    /// whose type or name is wrong, then the rules on the values of
    /// the keys that did read (each value alone, and the file as a whole for
    /// rules that tie several keys).
    pub fn parse_all(text: &str, origin: &Path) -> Result<Self, Vec<ConfigError>> {
        // The common case, a file without errors, in one pass.
        if let Ok(config) = toml::from_str::<Config>(text) {
            if config.problems().is_empty() {
                return Ok(config);
            }
        }
        every_error::find(text, origin)
    }

    /// Checks what the types cannot (for a configuration built in code or
    /// changed by flags).
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.problems().into_iter().next() {
            Some(problem) => {
                Err(ConfigError::Invalid { path: PathBuf::from("(flags)"), line: None, problem: Box::new(problem) })
            }
            None => Ok(()),
        }
    }

    /// Every rule the values break, one message each, naming the table and
    /// the key. A rule that returns only its first finding (the limits', the
    /// engine's) is one message here; `every_error` asks again key by key.
    fn problems(&self) -> Vec<Invalid> {
        let mut found = Vec::new();
        let mut rule = |result: Result<(), Invalid>| found.extend(result.err());
        rule(self.identity().map(drop).map_err(|e| {
            let key = match e {
                IdentityError::BadIndex(_) => "index",
                IdentityError::EmptyName | IdentityError::BadName(_) => "name",
            };
            Invalid::key("[plugin]", key, "is not one the runtime accepts").because(e)
        }));
        const RT: &str = "[runtime]";
        let rt = &self.runtime;
        if rt.socket.as_os_str().is_empty() {
            rule(Err(Invalid::key(RT, "socket", "must not be empty")));
        }
        if rt.register_timeout_ms == 0 {
            rule(Err(Invalid::key(RT, "register-timeout-ms", "must be positive")));
        }
        if rt.reconnect_initial_ms == 0 || rt.reconnect_max_ms < rt.reconnect_initial_ms {
            let rule_text = format!(
                "({}) must be positive and at most reconnect-max-ms ({})",
                rt.reconnect_initial_ms, rt.reconnect_max_ms
            );
            rule(Err(Invalid::key(RT, "reconnect-initial-ms", rule_text).also(RT, "reconnect-max-ms")));
        }
        let registration_ms = RUNTIME_REGISTRATION_TIMEOUT.as_millis() as u64;
        if rt.start_wait_ms >= registration_ms {
            let rule_text = format!(
                "{} must be below {registration_ms}, the runtime's registration timeout (containerd's default): a \
                 plugin the runtime launched is dropped if it has not registered by then",
                rt.start_wait_ms
            );
            rule(Err(Invalid::key(RT, "start-wait-ms", rule_text)));
        }
        if self.policies.reload_debounce_ms > 60_000 {
            let rule_text = format!("{} must be at most 60000", self.policies.reload_debounce_ms);
            rule(Err(Invalid::key("[policies]", "reload-debounce-ms", rule_text)));
        }
        for (name, text) in &self.policies.sources {
            rule(source(name, text).map(drop));
        }
        let limits = self.policies.limits();
        rule(limits.validate("[policies.limits]"));
        rule(self.chain.validate());
        rule(self.engine.validate(&limits));
        rule(self.registry.validate());
        rule(self.metrics.socket_addr().map(drop));
        rule(check_log_filter(&self.logging.level));
        found
    }

    /// The identity the plugin registers with.
    pub fn identity(&self) -> Result<PluginIdentity, IdentityError> {
        PluginIdentity::new(&self.plugin.name, &self.plugin.index)
    }

    /// The configuration as TOML (the keys set, and every default).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot print the configuration: {e}\n"))
    }

    /// The configuration as the host applies it, as TOML that reads back to
    /// the same configuration: every key of every table with its value,
    /// default or not (`[policies.limits]` with every limit, not only those
    /// the file overrides), and a comment for each key that has no value
    /// (a key whose default is "not set", such as `[policies] dir`).
    pub fn effective_toml(&self) -> String {
        let mut effective = self.clone();
        effective.policies.limits = self.policies.effective_limits();
        let table = match toml::Table::try_from(&effective) {
            Ok(t) => t,
            Err(e) => return format!("# cannot print the configuration: {e}\n"),
        };
        let mut out = String::new();
        for (name, keys) in TABLES {
            let mut at = Some(&table);
            for part in name.split('.') {
                at = at.and_then(|t| t.get(part)).and_then(toml::Value::as_table);
            }
            let empty = toml::Table::new();
            let values = at.unwrap_or(&empty);
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!("[{name}]\n"));
            for key in *keys {
                match values.get(*key) {
                    // A map (`[policies] sources`) is a table of its own, below.
                    Some(toml::Value::Table(_)) => {}
                    Some(value) => out.push_str(&format!("{key} = {value}\n")),
                    None if *name == "policies" && *key == "sources" => {
                        out.push_str("# sources: none (no policy is named by reference here)\n")
                    }
                    None => out.push_str(&format!("# {key}: not set (no default)\n")),
                }
            }
            // A key the table list does not know yet is printed all the same.
            for (key, value) in values.iter().filter(|(k, v)| !keys.contains(&k.as_str()) && !v.is_table()) {
                out.push_str(&format!("{key} = {value}\n"));
            }
            for (key, value) in values.iter().filter_map(|(k, v)| v.as_table().map(|t| (k, t))) {
                if TABLES.iter().any(|(t, _)| *t == format!("{name}.{key}")) {
                    continue;
                }
                out.push_str(&format!("\n[{name}.{key}]\n"));
                for (k, v) in value {
                    out.push_str(&format!("{} = {v}\n", toml::Value::String(k.clone())));
                }
            }
        }
        out
    }
}

/// The first of several errors (there is always one).
fn first(mut errors: Vec<ConfigError>) -> ConfigError {
    errors.swap_remove(0)
}

/// Every error of a configuration text, past serde's first: see
/// [`Config::parse_all`].
mod every_error {
    use std::ops::Range;
    use std::path::Path;

    use serde::Deserialize as _;
    use toml::de::{DeTable, DeValue};
    use toml::Spanned;

    use crate::invalid::Invalid;

    use super::{config_keys, toml_error, Config, ConfigError};

    /// A key's place: the names from the top, each with its span (the key's
    /// own), and the span of the value it holds.
    type KeyPath<'i> = Vec<(Spanned<toml::de::DeString<'i>>, Range<usize>)>;

    /// One error and where it is (a byte offset; `usize::MAX`: nowhere).
    struct Found {
        at: usize,
        error: ConfigError,
    }

    pub(super) fn find(text: &str, origin: &Path) -> Result<Config, Vec<ConfigError>> {
        let parse_error = |e: &toml::de::Error| Found {
            at: e.span().map_or(usize::MAX, |s| s.start),
            error: ConfigError::Parse { path: origin.to_path_buf(), message: toml_error(text, e, &config_keys()) },
        };
        let (root, syntax) = DeTable::parse_recoverable(text);
        if !syntax.is_empty() {
            return Err(in_order(syntax.iter().map(parse_error).collect()));
        }
        let span = root.span();
        let root = root.into_inner();
        let mut found = Vec::new();

        // Keys of the wrong name or type: each key alone, the keys of a
        // table that does not read one by one (the deepest key at fault).
        let mut bad: Vec<(Vec<String>, toml::de::Error)> = Vec::new();
        if let Err(whole) = from_doc(&span, root.clone()) {
            for (key, value) in root.iter() {
                wrong_keys(&span, &mut vec![(key.clone(), value.span())], value, &mut bad);
            }
            if bad.is_empty() {
                bad.push((Vec::new(), whole));
            }
        }
        found.extend(bad.iter().map(|(_, e)| parse_error(e)));
        let kept = without(&root, &bad.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(), &mut Vec::new());
        let config = match from_doc(&span, kept.clone()) {
            Ok(config) => config,
            Err(e) => {
                found.push(parse_error(&e));
                return Err(in_order(found));
            }
        };

        // The rules on values: the file as a whole, then each key alone,
        // for the rules that say only their first finding.
        let invalid = |problem: Invalid, at: Option<usize>| Found {
            at: at.unwrap_or(usize::MAX),
            error: ConfigError::Invalid {
                path: origin.to_path_buf(),
                line: at.map(|at| line(text, at)),
                problem: Box::new(problem),
            },
        };
        let mut blamed: Vec<Vec<String>> = Vec::new();
        for problem in config.problems() {
            let key = blame(&root, &problem);
            if let Some((path, _)) = &key {
                blamed.push(path.clone());
            }
            found.push(invalid(problem, key.map(|(_, at)| at)));
        }
        let mut leaves = Vec::new();
        collect_leaves(&kept, &mut Vec::new(), &mut leaves);
        for (leaf, value) in leaves {
            let names = names(&leaf);
            if blamed.contains(&names) {
                continue;
            }
            let Ok(alone) = from_doc(&span, nest(&leaf, &value)) else { continue };
            for problem in alone.problems() {
                if let Some((path, at)) = blame(&root, &problem).filter(|(path, _)| *path == names) {
                    blamed.push(path);
                    found.push(invalid(problem, Some(at)));
                }
            }
        }
        match found.is_empty() {
            true => Ok(config),
            false => Err(in_order(found)),
        }
    }

    fn in_order(mut found: Vec<Found>) -> Vec<ConfigError> {
        found.sort_by_key(|f| f.at);
        found.into_iter().map(|f| f.error).collect()
    }

    fn from_doc(span: &Range<usize>, doc: DeTable<'_>) -> Result<Config, toml::de::Error> {
        Config::deserialize(toml::de::Deserializer::from(Spanned::new(span.clone(), doc)))
    }

    fn names(path: &KeyPath<'_>) -> Vec<String> {
        path.iter().map(|(k, _)| k.get_ref().to_string()).collect()
    }

    /// A document holding `value` alone, under the tables of `path`.
    fn nest<'i>(path: &KeyPath<'i>, value: &Spanned<DeValue<'i>>) -> DeTable<'i> {
        let mut below: Option<DeTable<'i>> = None;
        for (key, span) in path.iter().rev() {
            let held = match below.take() {
                Some(table) => Spanned::new(span.clone(), DeValue::Table(table)),
                None => value.clone(),
            };
            let mut table = DeTable::new();
            table.insert(key.clone(), held);
            below = Some(table);
        }
        below.unwrap_or_default()
    }

    /// Finds the keys under `path` that do not read (`value` is the value
    /// of its last key): the key itself when its value is not a table, or
    /// no key of its table is at fault alone.
    fn wrong_keys<'i>(
        span: &Range<usize>,
        path: &mut KeyPath<'i>,
        value: &Spanned<DeValue<'i>>,
        bad: &mut Vec<(Vec<String>, toml::de::Error)>,
    ) {
        let Err(error) = from_doc(span, nest(path, value)) else { return };
        let before = bad.len();
        if let DeValue::Table(table) = value.get_ref() {
            for (key, inner) in table.iter() {
                path.push((key.clone(), inner.span()));
                wrong_keys(span, path, inner, bad);
                path.pop();
            }
        }
        if bad.len() == before {
            bad.push((names(path), error));
        }
    }

    /// `table` without the keys at `paths` (relative to the document).
    fn without<'i>(table: &DeTable<'i>, paths: &[Vec<String>], prefix: &mut Vec<String>) -> DeTable<'i> {
        let mut kept = DeTable::new();
        for (key, value) in table.iter() {
            prefix.push(key.get_ref().to_string());
            if !paths.contains(prefix) {
                let value = match value.get_ref() {
                    DeValue::Table(inner) => Spanned::new(value.span(), DeValue::Table(without(inner, paths, prefix))),
                    _ => value.clone(),
                };
                kept.insert(key.clone(), value);
            }
            prefix.pop();
        }
        kept
    }

    /// Every key holding a value that is not a table, with its path.
    fn collect_leaves<'i>(
        table: &DeTable<'i>,
        path: &mut KeyPath<'i>,
        out: &mut Vec<(KeyPath<'i>, Spanned<DeValue<'i>>)>,
    ) {
        for (key, value) in table.iter() {
            path.push((key.clone(), value.span()));
            match value.get_ref() {
                DeValue::Table(inner) => collect_leaves(inner, path, out),
                _ => out.push((path.clone(), value.clone())),
            }
            path.pop();
        }
    }

    /// The key a refusal is about, and where the file sets it: its own key,
    /// else the key its rule ties it to; `None` when the file sets neither
    /// (a default broke the rule) or the refusal names no key.
    fn blame(root: &DeTable<'_>, problem: &Invalid) -> Option<(Vec<String>, usize)> {
        let own = problem.key.as_ref().map(|key| (problem.table.as_str(), key.as_str()));
        let also = problem.also.as_deref().map(|(table, key)| (table.as_str(), key.as_str()));
        own.into_iter().chain(also).find_map(|(table, key)| set_at(root, table, key))
    }

    /// The path of `key` in `table` (`[policies.limits]`) and where the file
    /// sets it, if it does.
    fn set_at(root: &DeTable<'_>, table: &str, key: &str) -> Option<(Vec<String>, usize)> {
        let name = table.strip_prefix('[')?.strip_suffix(']')?;
        let mut at = root;
        for part in name.split('.') {
            at = at.iter().find(|(k, _)| k.get_ref() == part).and_then(|(_, v)| match v.get_ref() {
                DeValue::Table(inner) => Some(inner),
                _ => None,
            })?;
        }
        // The key as written first; else as the host spells it (a file may
        // write `max_memory_mib`, which serde reads as `max-memory-mib`).
        let exact = at.iter().find(|(k, _)| k.get_ref() == key);
        let (found, _) = exact.or_else(|| at.iter().find(|(k, _)| k.get_ref().replace('_', "-") == key))?;
        let mut path: Vec<String> = name.split('.').map(str::to_string).collect();
        path.push(found.get_ref().to_string());
        Some((path, found.span().start))
    }

    /// The line (1-based) of a byte offset.
    fn line(text: &str, at: usize) -> usize {
        text.as_bytes()[..at.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
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
        assert!(e.contains("line 2: [policies.sources] ulimit is not a policy name"), "{e}");
        let e = parse("[policies.sources]\n\"30-u\" = \"https://r.example/p/u:1\"\n").unwrap_err().to_string();
        assert!(e.contains("line 2: [policies.sources] 30-u is not a usable reference: "), "{e}");
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

    /// The configuration is read through one descriptor and a bound: a
    /// FIFO, a directory, an endless device and an oversized file are each
    /// refused at once, named, and nothing of them is read past the bound.
    #[test]
    fn a_configuration_that_is_not_a_small_regular_file_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.toml");
        crate::files::mkfifo(&fifo);
        let zero = dir.path().join("zero.toml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let large = dir.path().join("large.toml");
        std::fs::write(&large, format!("# {}\n", "x".repeat(MAX_CONFIG_BYTES as usize))).unwrap();
        let binary = dir.path().join("binary.toml");
        std::fs::write(&binary, b"[plugin]\xff\n").unwrap();
        for (path, why) in [
            (&fifo, "must be a regular file, not a FIFO"),
            (&zero, "must be a regular file, not a character device"),
            (&dir.path().to_path_buf(), "must be a regular file, not a directory"),
            (&large, "larger than 1048576 bytes"),
            (&binary, "not UTF-8 text"),
        ] {
            let e = Config::load(path).unwrap_err();
            assert!(matches!(e, ConfigError::Unusable { .. }), "{}: {e:?}", path.display());
            assert_eq!(e.to_string(), format!("config file {}: {why}", path.display()));
        }
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
