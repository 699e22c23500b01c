//! What the host tells its operator: Prometheus metrics, health, and the
//! state of every policy, served over HTTP (`/metrics`, `/healthz`,
//! `/readyz`, `/status`).
//!
//! Everything is recorded where it happens, at a cost of an atomic add per
//! number: policy calls and their outcomes as the chain reports each step
//! ([`crate::policy::chain::Observer`]), events and the chain's time by the
//! dispatcher, registration and reconnects from the supervisor's status,
//! loaded policies and reloads by the loader, failed saves of policy state
//! from the state store when it is read (at every scrape and `/status`),
//! connections the endpoint shed or failed to accept by the endpoint
//! itself (an operator sees an attack on the port, or a descriptor limit
//! too low, in a number, not only in a log line every 10 s).
//! The HTTP server is deliberately
//! small (`http.rs`): GET only, a bounded request head, a deadline per
//! connection, one response per connection.

mod bound;
mod encode;
mod http;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use serde::Serialize;

use crate::policy::call::state::StateStore;
use crate::policy::chain::{Chain, Observer, Outcome, Step};
use crate::policy::Tally;

pub use http::{get, serve};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    policy: String,
    event: String,
    outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabel {
    policy: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    event: String,
    result: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabel {
    event: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    policy: String,
    sha256: String,
    mode: String,
    on_error: String,
    /// For a policy named by reference, its manifest digest's short form
    /// (`sha256:` and 12 hex digits); empty for a file. Only loaded
    /// versions have a series, so this adds none.
    manifest: String,
}

/// `sha256:` and the first 12 hex digits of a `sha256:<hex>` digest.
fn short_digest(digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    format!("sha256:{}", &hex[..hex.len().min(12)])
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: String,
}

/// What `/status` and `nri-wasm status` show of one policy.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq, Default)]
pub struct PolicyStatus {
    /// The policy's name (`NN-name`).
    pub name: String,
    /// `loaded`, `failed` or `loading`.
    pub status: String,
    /// The SHA-256 of its component, hex.
    pub sha256: String,
    /// The events it subscribes to, comma-separated.
    pub events: String,
    /// `enforce` or `audit`.
    pub mode: String,
    /// What a failure of it does to the event: `ignore` (fail-open) or `fail`.
    pub on_error: String,
    /// Why it is not loaded.
    pub reason: String,
    /// A newer version on disk that was refused, and why: the version
    /// shown here keeps running until the file is fixed.
    #[serde(default)]
    pub refused: String,
    /// Calls by outcome since the host started.
    pub calls: std::collections::BTreeMap<String, u64>,
    /// Consecutive failures, and whether it is quarantined now.
    pub failures: u32,
    /// Whether its circuit breaker is open, so that it is skipped.
    pub quarantined: bool,
    /// Saves of its state that failed since the host started (a full or
    /// read-only volume, an unusable state directory).
    #[serde(default)]
    pub state_save_failures: u64,
    /// Committed state that is only in memory: the last save failed; the
    /// next commit saves it again.
    #[serde(default)]
    pub state_unsaved: bool,
    /// Why the last save failed, if it did; otherwise why its state file
    /// was not read when it was installed, if it was not.
    #[serde(default)]
    pub state_error: String,
    /// For a policy named by reference: the reference (empty for a file).
    #[serde(default)]
    pub source: String,
    /// The digest of the manifest it was pulled as.
    #[serde(default)]
    pub manifest: String,
    /// The key that signed it, or empty.
    #[serde(default)]
    pub signer: String,
    /// Whether it was loaded from the node's registry cache.
    #[serde(default)]
    pub from_cache: bool,
    /// Why, when it was: `pinned-digest` (the reference pins a digest the
    /// cache holds; the registry was not asked) or `registry-unreachable`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub from_cache_reason: String,
    /// With `registry-unreachable`: the registry's failure.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub registry_error: String,
}

impl PolicyStatus {
    fn with_state(mut self, health: Option<&crate::policy::call::state::SaveHealth>) -> Self {
        if let Some(h) = health {
            self.state_save_failures = h.failures;
            self.state_unsaved = h.unsaved;
            // A failing save first: it is what is at risk now.
            self.state_error = h.last_error.clone().or_else(|| h.load_error.clone()).unwrap_or_default();
        }
        self
    }
}

/// What `/status` returns.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq, Default)]
pub struct HostStatus {
    /// Whether the host is registered with a runtime now.
    pub registered: bool,
    /// Whether the chain of policies has loaded.
    pub chain_loaded: bool,
    /// Connections to the runtime made again since the host started.
    pub reconnects: u64,
    /// The events the host subscribed to, comma-separated.
    pub subscribed: String,
    /// Every policy in the directory (and named by reference), in chain order.
    pub policies: Vec<PolicyStatus>,
}

/// Every metric of the host, and its health.
pub struct Metrics {
    registry: Registry,
    /// Calls, their time and fuel, by policy (`bound.rs`).
    calls: bound::CallSeries,
    /// Events, the chain's time and the answer's, by event (`bound.rs`).
    events: bound::EventSeries,
    overruns: Counter,
    registered: Gauge,
    reconnects: Counter,
    policies: Family<StatusLabel, Gauge>,
    info: Family<InfoLabels, Gauge>,
    reloads: Family<ResultLabel, Counter>,
    state_save_failures: Family<PolicyLabel, Counter>,
    state_unsaved: Family<PolicyLabel, Gauge>,
    http_shed: Counter,
    http_accept_errors: Counter,
    /// The policies' state, whose saves the metrics and `/status` report.
    states: Mutex<Option<Arc<StateStore>>>,
    chain_loaded: AtomicBool,
    /// The policies as last installed, for `/status`.
    chain: Mutex<Option<Arc<Chain>>>,
    subscribed: Mutex<String>,
    /// New versions the last reload refused: policy -> why.
    refused: Mutex<std::collections::BTreeMap<String, String>>,
    /// Where the endpoint listens, once it does.
    endpoint: Mutex<Option<std::net::SocketAddr>>,
}

/// How many loading policies `/readyz` names before it counts the rest.
const MAX_NAMED: usize = 5;

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The buckets of every latency histogram: 10 µs to about 1.3 s.
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(1e-5, 2.0, 18))
}

impl Metrics {
    /// The metrics of a host, none recorded yet.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let calls = Family::<CallLabels, Counter>::default();
        let call_duration = Family::<PolicyLabel, Histogram>::new_with_constructor(latency);
        let fuel = Family::<PolicyLabel, Counter>::default();
        let events = Family::<EventLabels, Counter>::default();
        let chain_duration = Family::<EventLabel, Histogram>::new_with_constructor(latency);
        let answer_duration = Family::<EventLabel, Histogram>::new_with_constructor(latency);
        let overruns = Counter::default();
        let registered = Gauge::default();
        let reconnects = Counter::default();
        let policies = Family::<StatusLabel, Gauge>::default();
        let info = Family::<InfoLabels, Gauge>::default();
        let reloads = Family::<ResultLabel, Counter>::default();
        let state_save_failures = Family::<PolicyLabel, Counter>::default();
        let state_unsaved = Family::<PolicyLabel, Gauge>::default();
        let http_shed = Counter::default();
        let http_accept_errors = Counter::default();
        registry.register("nri_wasm_policy_calls", "Policy calls by policy, event and outcome", calls.clone());
        registry.register_with_unit(
            "nri_wasm_policy_call_duration",
            "Time of a policy call, the host's work on its reply included",
            Unit::Seconds,
            call_duration.clone(),
        );
        registry.register("nri_wasm_policy_fuel_consumed", "Fuel policies consumed", fuel.clone());
        registry.register("nri_wasm_events", "NRI events by type and result", events.clone());
        registry.register_with_unit(
            "nri_wasm_chain_duration",
            "Time of the chain for one event",
            Unit::Seconds,
            chain_duration.clone(),
        );
        registry.register_with_unit(
            "nri_wasm_answer_duration",
            "Time from a request's last byte read off the socket to its answer handed to the socket: \
             the chain and the transport, what the host adds to the runtime's wait",
            Unit::Seconds,
            answer_duration.clone(),
        );
        registry.register(
            "nri_wasm_answer_budget_overruns",
            "Events answered with DEADLINE_EXCEEDED because the answer budget ran out",
            overruns.clone(),
        );
        registry.register("nri_wasm_registered", "1 while registered with the runtime", registered.clone());
        registry.register(
            "nri_wasm_reconnects",
            "Connections to the runtime after the first (after a lost connection or a failed registration)",
            reconnects.clone(),
        );
        registry.register("nri_wasm_policies", "Policies by status (loaded, failed, loading)", policies.clone());
        registry.register("nri_wasm_policy_info", "One series per policy of the chain, always 1", info.clone());
        registry.register("nri_wasm_reloads", "Reloads of the policy directory by result", reloads.clone());
        registry.register(
            "nri_wasm_state_save_failures",
            "Saves of a policy's state to the state directory that failed; the state stays in memory and the next \
             commit saves it again",
            state_save_failures.clone(),
        );
        registry.register(
            "nri_wasm_state_unsaved",
            "1 while a policy has committed state that its last save could not write to disk",
            state_unsaved.clone(),
        );
        registry.register(
            "nri_wasm_http_connections_shed",
            "Connections to this endpoint closed unanswered because more than 256 were open (the oldest idle first)",
            http_shed.clone(),
        );
        registry.register(
            "nri_wasm_http_accept_errors",
            "Connections to this endpoint the host failed to accept (out of descriptors or memory); it shed an idle \
             connection or backed off",
            http_accept_errors.clone(),
        );
        Self {
            registry,
            calls: bound::CallSeries::new(calls, call_duration, fuel),
            events: bound::EventSeries::new(events, chain_duration, answer_duration),
            overruns,
            registered,
            reconnects,
            policies,
            info,
            reloads,
            state_save_failures,
            state_unsaved,
            http_shed,
            http_accept_errors,
            states: Mutex::new(None),
            chain_loaded: AtomicBool::new(false),
            chain: Mutex::new(None),
            subscribed: Mutex::new(String::new()),
            refused: Mutex::default(),
            endpoint: Mutex::new(None),
        }
    }

    /// The address the endpoint listens on (the port the system chose for
    /// a configured port 0).
    pub fn endpoint(&self) -> Option<std::net::SocketAddr> {
        *self.endpoint.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the address the endpoint listens on (for `status`).
    pub fn set_endpoint(&self, addr: std::net::SocketAddr) {
        *self.endpoint.lock().unwrap_or_else(|e| e.into_inner()) = Some(addr);
    }

    /// Reports the saves of `states` (its failures, what is unsaved).
    pub fn watch_states(&self, states: Arc<StateStore>) {
        *self.states.lock().unwrap_or_else(|p| p.into_inner()) = Some(states);
    }

    /// How saving each policy's state went, if a store is watched.
    fn state_health(&self) -> std::collections::BTreeMap<String, crate::policy::call::state::SaveHealth> {
        let states = self.states.lock().unwrap_or_else(|p| p.into_inner()).clone();
        states.map(|s| s.health()).unwrap_or_default()
    }

    /// Brings the state series up to the store's counts. The store counts
    /// where the saves happen; reading it at a scrape costs the saves
    /// nothing and needs no link from the store to the metrics.
    fn sync_states(&self) {
        for (policy, health) in self.state_health() {
            let label = PolicyLabel { policy };
            let counter = self.state_save_failures.get_or_create(&label);
            let seen = counter.get();
            if health.failures > seen {
                counter.inc_by(health.failures - seen);
            }
            self.state_unsaved.get_or_create(&label).set(i64::from(health.unsaved));
        }
    }

    /// The metrics in Prometheus's text format.
    pub fn encode(&self) -> String {
        self.sync_states();
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// An event was answered: `result` is ok, denied or failed.
    pub fn event(&self, event: &str, result: &str, chain: Duration) {
        self.events.record(event, result, chain);
    }

    /// An event's answer is out, `total` after its request arrived.
    pub fn answer(&self, event: &str, total: Duration) {
        self.events.answered(event, total);
    }

    /// The endpoint shed a connection past its cap.
    pub(crate) fn http_shed(&self) {
        self.http_shed.inc();
    }

    /// The endpoint failed to accept a connection.
    pub(crate) fn http_accept_error(&self) {
        self.http_accept_errors.inc();
    }

    /// An answer ran out of the answer budget.
    pub fn budget_overrun(&self) {
        self.overruns.inc();
    }

    /// The host registered (or lost the runtime). Every connection after
    /// the first registration, and every one the runtime refused to
    /// register, is a reconnect.
    pub fn set_registered(&self, registered: bool, registrations: u64, refused: u64) {
        self.registered.set(i64::from(registered));
        let reconnects = registrations.saturating_sub(1) + refused;
        let seen = self.reconnects.get();
        if reconnects > seen {
            self.reconnects.inc_by(reconnects - seen);
        }
    }

    /// The subscription the runtime was given.
    pub fn set_subscribed(&self, mask: String) {
        *self.subscribed.lock().unwrap_or_else(|p| p.into_inner()) = mask;
    }

    /// A chain was installed; `loading` policies are still being loaded.
    pub fn chain_installed(&self, chain: &Arc<Chain>, loading: bool) {
        self.info.clear();
        for p in chain.policies() {
            self.info
                .get_or_create(&InfoLabels {
                    policy: p.name().into(),
                    sha256: p.digest().into(),
                    mode: format!("{:?}", p.spec.mode).to_lowercase(),
                    on_error: format!("{:?}", p.spec.on_error).to_lowercase(),
                    manifest: p.spec.provenance.as_ref().map(|v| short_digest(&v.manifest)).unwrap_or_default(),
                })
                .set(1);
        }
        // Policies of the start set still loading are the chain's pending
        // entries; those that could not load, its unloadable ones.
        let (pending, failed) = (chain.pending().len() as i64, chain.unloadable().len() as i64);
        self.policies.get_or_create(&StatusLabel { status: "loaded".into() }).set(chain.len() as i64);
        self.policies.get_or_create(&StatusLabel { status: "failed".into() }).set(failed);
        self.policies.get_or_create(&StatusLabel { status: "loading".into() }).set(pending);
        self.chain_loaded.store(!loading, Ordering::Relaxed);
        *self.chain.lock().unwrap_or_else(|p| p.into_inner()) = Some(chain.clone());
    }

    /// A reload of the policy directory ended.
    pub fn reload(&self, ok: bool) {
        self.reloads.get_or_create(&ResultLabel { result: if ok { "ok" } else { "failed" }.into() }).inc();
    }

    /// Alive: the process answers.
    pub fn healthy(&self) -> bool {
        true
    }

    /// Ready: registered with the runtime and the first load done.
    pub fn ready(&self) -> bool {
        self.not_ready_because().is_none()
    }

    /// Why the host is not ready, for `/readyz`: not registered, or which
    /// policies of the start are still loading.
    pub fn not_ready_because(&self) -> Option<String> {
        if self.registered.get() != 1 {
            return Some("not registered with the runtime".into());
        }
        if self.chain_loaded.load(Ordering::Relaxed) {
            return None;
        }
        let chain = self.chain.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let names: Vec<String> = chain.iter().flat_map(|c| c.pending().iter().map(|p| p.name.clone())).collect();
        Some(match names.len() {
            0 => "policies loading".into(),
            n if n <= MAX_NAMED => format!("policies loading: {}", names.join(", ")),
            n => format!("policies loading: {} and {} more", names[..MAX_NAMED].join(", "), n - MAX_NAMED),
        })
    }

    /// New versions a reload refused (policy, why); the previous versions
    /// run. Replaces what the last reload said.
    pub fn versions_refused(&self, refused: &[(String, String)]) {
        *self.refused.lock().unwrap_or_else(|p| p.into_inner()) = refused.iter().cloned().collect();
    }

    /// What `/status` shows.
    pub fn status(&self) -> HostStatus {
        let chain = self.chain.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let loading = !self.chain_loaded.load(Ordering::Relaxed);
        let health = self.state_health();
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut policies = Vec::new();
        if let Some(chain) = &chain {
            for e in chain.entries() {
                let p = &e.policy;
                let cached = p.spec.provenance.as_ref().and_then(|v| v.from_cache.as_ref());
                policies.push(
                    PolicyStatus {
                        name: p.name().into(),
                        status: "loaded".into(),
                        sha256: p.digest().into(),
                        events: p.events().to_string(),
                        mode: format!("{:?}", p.spec.mode).to_lowercase(),
                        on_error: format!("{:?}", p.spec.on_error).to_lowercase(),
                        reason: String::new(),
                        refused: refused.get(p.name()).cloned().unwrap_or_default(),
                        calls: self.calls_of(p.name()),
                        failures: e.failures(),
                        quarantined: e.quarantined(),
                        source: p.spec.provenance.as_ref().map(|v| v.source.clone()).unwrap_or_default(),
                        manifest: p.spec.provenance.as_ref().map(|v| v.manifest.clone()).unwrap_or_default(),
                        signer: p.spec.provenance.as_ref().and_then(|v| v.signer.clone()).unwrap_or_default(),
                        from_cache: cached.is_some(),
                        from_cache_reason: cached.map(|c| c.code().to_string()).unwrap_or_default(),
                        registry_error: match cached {
                            Some(crate::registry::CacheUse::Unreachable { error }) => error.clone(),
                            _ => String::new(),
                        },
                        ..PolicyStatus::default()
                    }
                    .with_state(health.get(p.name())),
                );
            }
            for u in chain.unloadable() {
                policies.push(
                    PolicyStatus {
                        name: u.name.clone(),
                        status: if loading { "loading" } else { "failed" }.into(),
                        reason: u.reason.clone(),
                        calls: self.calls_of(&u.name),
                        on_error: if u.mandatory { "fail" } else { "ignore" }.into(),
                        ..PolicyStatus::default()
                    }
                    .with_state(health.get(&u.name)),
                );
            }
            policies.sort_by(|a, b| a.name.cmp(&b.name));
        }
        HostStatus {
            registered: self.registered.get() == 1,
            chain_loaded: !loading,
            reconnects: self.reconnects.get(),
            subscribed: self.subscribed.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            policies,
        }
    }

    fn calls_of(&self, policy: &str) -> std::collections::BTreeMap<String, u64> {
        // The family cannot be iterated; the outcomes are a fixed list.
        let mut calls = std::collections::BTreeMap::new();
        for outcome in OUTCOMES {
            let mut total = 0;
            for event in bound::events() {
                total += self.calls.count(policy, event, outcome);
            }
            if total > 0 {
                calls.insert((*outcome).to_string(), total);
            }
        }
        calls
    }
}

/// Every outcome a policy call can have, as metrics label them.
pub const OUTCOMES: &[&str] = &[
    "ok",
    "changed",
    "denied",
    "trap",
    "timeout",
    "fuel",
    "memory",
    "invalid",
    "conflict",
    "skipped",
    "quarantined",
    "not-loaded",
];

/// The dispatcher's and the reloader's reports, counted.
impl Tally for Metrics {
    fn event(&self, event: &str, result: &str, chain: Duration) {
        Metrics::event(self, event, result, chain)
    }
    fn answer(&self, event: &str, total: Duration) {
        Metrics::answer(self, event, total)
    }
    fn budget_overrun(&self) {
        Metrics::budget_overrun(self)
    }
    fn chain_installed(&self, chain: &Arc<Chain>, loading: bool) {
        Metrics::chain_installed(self, chain, loading)
    }
    fn reload(&self, ok: bool) {
        Metrics::reload(self, ok)
    }
    fn versions_refused(&self, refused: &[(String, String)]) {
        Metrics::versions_refused(self, refused)
    }
}

impl Observer for Metrics {
    fn step(&self, event: &str, target: &str, step: &Step) {
        let ran = (step.fuel > 0 || !step.elapsed.is_zero()).then_some((step.elapsed, step.fuel));
        self.calls.record(&step.policy, event, step.outcome.kind(), ran);
        // One line per decision that changed or denied something.
        match &step.outcome {
            // The change is kept only when asked for (audit mode, `eval`,
            // the demo), and printed only if this line is logged: printing
            // every reply would cost the events their time.
            Outcome::Changed { change: None } => {
                tracing::info!(policy = step.policy, event, target, audit = step.audit, "policy decision: changed");
            }
            Outcome::Changed { change: Some(changed) } => {
                tracing::info!(policy = step.policy, event, target, audit = step.audit, %changed, "policy decision: changed");
            }
            Outcome::Denied { reason } => {
                tracing::info!(
                    policy = step.policy,
                    event,
                    target,
                    audit = step.audit,
                    reason,
                    "policy decision: denied"
                );
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_encoded_with_their_names_and_labels() {
        let m = Metrics::new();
        let step = Step {
            policy: "10-a".into(),
            audit: false,
            fuel: 1000,
            elapsed: Duration::from_micros(50),
            outcome: Outcome::Denied { reason: "no".into() },
        };
        m.step("CreateContainer", "container c", &step);
        m.event("CreateContainer", "denied", Duration::from_micros(80));
        m.set_registered(true, 3, 0);
        m.budget_overrun();
        let text = m.encode();
        for line in [
            "nri_wasm_policy_calls_total{policy=\"10-a\",event=\"CreateContainer\",outcome=\"denied\"} 1",
            "nri_wasm_policy_fuel_consumed_total{policy=\"10-a\"} 1000",
            "nri_wasm_events_total{event=\"CreateContainer\",result=\"denied\"} 1",
            "nri_wasm_registered 1",
            "nri_wasm_reconnects_total 2",
            "nri_wasm_answer_budget_overruns_total 1",
            "nri_wasm_policy_call_duration_seconds_count{policy=\"10-a\"} 1",
            "nri_wasm_chain_duration_seconds_count{event=\"CreateContainer\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert!(!m.ready(), "not ready before a chain is loaded");
        assert_eq!(m.calls_of("10-a").get("denied"), Some(&1));
    }

    #[test]
    fn readiness_names_what_it_waits_for() {
        use crate::policy::chain::{ChainSettings, Pending};
        let m = Metrics::new();
        assert_eq!(m.not_ready_because().as_deref(), Some("not registered with the runtime"));
        m.set_registered(true, 1, 0);
        let pending = |n: usize| -> Vec<Pending> {
            (0..n).map(|i| Pending::new(format!("{i:02}-p"), false, std::time::Instant::now())).collect()
        };
        let chain = |n| Arc::new(Chain::new(Vec::new(), ChainSettings::default()).with_pending(pending(n)));
        m.chain_installed(&chain(2), true);
        assert_eq!(m.not_ready_because().as_deref(), Some("policies loading: 00-p, 01-p"));
        m.chain_installed(&chain(8), true);
        assert_eq!(m.not_ready_because().as_deref(), Some("policies loading: 00-p, 01-p, 02-p, 03-p, 04-p and 3 more"));
        m.chain_installed(&chain(0), false);
        assert_eq!(m.not_ready_because(), None);
        assert!(m.ready());
        m.set_registered(false, 1, 2);
        assert_eq!(m.not_ready_because().as_deref(), Some("not registered with the runtime"));
        assert!(m.encode().contains("nri_wasm_reconnects_total 2"), "refused registrations are reconnects");
    }

    #[test]
    fn failed_state_saves_are_counted_and_shown_per_policy() {
        use crate::policy::call::state::StateTxn;
        use crate::policy::chain::ChainSettings;
        use crate::policy::load::directory::Unloadable;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // A directory anyone may write: every save is refused.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let states = Arc::new(StateStore::in_dir(dir.path().to_path_buf()));
        let m = Metrics::new();
        m.watch_states(states.clone());
        let unloadable = vec![Unloadable { name: "10-a".into(), reason: "still loading".into(), mandatory: false }];
        m.chain_installed(
            &Arc::new(Chain::new(Vec::new(), ChainSettings::default()).with_unloadable(unloadable)),
            true,
        );
        for i in 0..3 {
            let mut t = StateTxn::new(states.snapshot("10-a"), 1024);
            t.set("n".into(), i.to_string()).unwrap();
            states.commit("10-a", t.take_writes().unwrap());
            assert!(states.persist("10-a").is_err());
        }
        let text = m.encode();
        for line in
            ["nri_wasm_state_save_failures_total{policy=\"10-a\"} 3", "nri_wasm_state_unsaved{policy=\"10-a\"} 1"]
        {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        let status = m.status();
        let p = &status.policies[0];
        assert_eq!((p.name.as_str(), p.state_save_failures, p.state_unsaved), ("10-a", 3, true));
        assert!(p.state_error.contains("writable by group or others"), "{}", p.state_error);
        // Counted once: a second scrape does not add them again.
        assert!(m.encode().contains("nri_wasm_state_save_failures_total{policy=\"10-a\"} 3"));
    }
}
