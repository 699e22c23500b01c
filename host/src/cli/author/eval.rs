//! `nri-wasm eval`: events through a chain of policies, offline, exactly as
//! a node would run them.
//!
//! The policies load through the loader's steps; a [`PolicyDispatcher`]
//! (the one the transport calls on a node) runs each event, within the
//! answer budget the transport gives it, so every limit, time share,
//! on-error, conflict rule, merge and validation applies, and the node view
//! and the policies' state carry from one event to the next. Nothing is
//! evaluated here: an observer collects each policy's step, and the report
//! shows them with the reply the runtime would have received.
//!
//! Input is NRI's protobuf JSON with the proto field names (see
//! `nri/record.rs`): a bare request with `--event`, a document
//! `{"event": ..., "request": {...}}` (the captured fixtures), or, with
//! `--replay`, a recording of `nri-wasm run --record`. `--node` seeds the
//! node view from a Synchronize request first, as the runtime does when it
//! connects; `--state` preloads the policies' state, which is printed after
//! the run. What differs from a node: no runtime takes the updates that go
//! out with UpdateContainers (each policy's step shows them), and the node's
//! facts (CPUs, NUMA, memory) are this machine's.

use std::collections::BTreeMap;
use std::io::{Read as _, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use nri_wasm_api::api as pb;
use serde_json::{json, Value};

use super::{describe, HostArgs, SettingsArgs, SetupError, EXIT_FAILED, EXIT_OK, EXIT_POLICY_ERROR, EXIT_USAGE};
use crate::nri::record::{self, parse_document, FormatError, Recorded, Request};
use crate::nri::service::{answer_budget, runtime_info, DEFAULT_REQUEST_TIMEOUT};
use crate::nri::{DispatchError, Dispatcher as _};
use crate::policy::chain::{container_target, pod_target, Chain, Observer, Outcome, PolicyFailure, Step};
use crate::policy::compile::Compiler;
use crate::policy::dispatcher::PolicyDispatcher;
use crate::policy::engine::LimitKind;
use crate::policy::limits::Limits;
use crate::policy::loader::{self, DirOptions, LoadProblem};
use crate::policy::state::{StateSnapshot, StateStore, StateTxn};

#[derive(Debug, Args)]
#[command(after_help = "Exit codes: 0 every event succeeded and every policy loaded and answered; \
    1 an event fails at the runtime (a denial, a failure with on-error = \"fail\", a conflict); \
    2 nothing ran (usage, or input that cannot be read); \
    3 every event succeeded, but a policy did not load or failed and on-error = \"ignore\" dropped its output.\n\
    Guide: docs/writing-policies.md")]
pub struct EvalArgs {
    /// A policy component (`.wasm`, with its `NN-name.toml` if one is
    /// beside it), or a policy directory as the host reads it.
    #[arg(value_name = "POLICY|DIR")]
    pub policies: PathBuf,
    /// The event of a bare request: `CreateContainer`, `create-container`,
    /// ... (a document `{"event": ..., "request": ...}` names its own).
    #[arg(long)]
    pub event: Option<String>,
    /// The request, in NRI's protobuf JSON with the proto field names
    /// (`-`: standard input).
    #[arg(long, value_name = "EVENT.json", required_unless_present = "replay")]
    pub input: Option<PathBuf>,
    /// Seed the node view from a Synchronize request first, as the
    /// runtime does when it connects.
    #[arg(long, value_name = "SYNC.json")]
    pub node: Option<PathBuf>,
    /// Replay a recording of `nri-wasm run --record`, in order (repeat
    /// for several files, oldest first: `FILE.jsonl.1 FILE.jsonl`).
    #[arg(long, value_name = "FILE.jsonl", conflicts_with_all = ["input", "event", "node"])]
    pub replay: Vec<PathBuf>,
    #[command(flatten)]
    pub settings: SettingsArgs,
    /// Preload the policies' state: a JSON file `{"NN-name": {"key":
    /// "value"}}`, or a state directory (`NN-name.json` files, read only).
    #[arg(long, value_name = "STATE.json|DIR")]
    pub state: Option<PathBuf>,
    /// JSON for machines: one document (with `--replay`, one object a line).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub host: HostArgs,
}

/// What keeps `eval` from evaluating.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}: {error}", path.display())]
    Input { path: PathBuf, error: FormatError },
    #[error("{}, line {line}: {error}", path.display())]
    Recording { path: PathBuf, line: usize, error: FormatError },
    #[error("--state {}: {reason}", path.display())]
    State { path: PathBuf, reason: String },
    #[error("cannot start the event runtime: {0}")]
    Runtime(std::io::Error),
}

/// A policy's turn on an event, as the observer saw it.
#[derive(Debug, Clone)]
pub struct SeenStep {
    /// The event the policy ran on (validation runs inside CreateContainer).
    pub event: String,
    pub step: Step,
}

/// Collects the steps of the event under way.
#[derive(Debug, Default)]
struct StepLog(Mutex<Vec<SeenStep>>);

impl Observer for StepLog {
    fn step(&self, event: &str, _target: &str, step: &Step) {
        let seen = SeenStep { event: event.to_string(), step: step.clone() };
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(seen);
    }
}

impl StepLog {
    fn take(&self) -> Vec<SeenStep> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// What the runtime would have received.
#[derive(Debug, Clone)]
pub enum Reply {
    /// The event's reply carries nothing.
    Nothing,
    Create(pb::CreateContainerResponse),
    Update(pb::UpdateContainerResponse),
    Stop(pb::StopContainerResponse),
    Synchronize(pb::SynchronizeResponse),
    Validate(pb::ValidateContainerAdjustmentResponse),
}

impl Reply {
    fn message(&self) -> Option<&dyn protobuf::MessageDyn> {
        match self {
            Self::Nothing => None,
            Self::Create(m) => Some(m),
            Self::Update(m) => Some(m),
            Self::Stop(m) => Some(m),
            Self::Synchronize(m) => Some(m),
            Self::Validate(m) => Some(m),
        }
    }

    /// The reply as the SDK's test lines.
    pub fn lines(&self) -> Vec<String> {
        match self {
            Self::Nothing | Self::Validate(_) => Vec::new(),
            Self::Create(r) => describe::lines(r.adjust.as_ref(), &r.update, &r.evict),
            Self::Update(r) => describe::lines(None, &r.update, &r.evict),
            Self::Stop(r) => describe::lines(None, &r.update, &[]),
            Self::Synchronize(r) => describe::lines(None, &r.update, &[]),
        }
    }
}

/// One event, evaluated.
#[derive(Debug)]
pub struct EventReport {
    /// Its place in the input (a recording's line number).
    pub index: usize,
    pub event: &'static str,
    /// When it was recorded, if it was.
    pub time: Option<String>,
    pub target: String,
    pub elapsed: Duration,
    pub steps: Vec<SeenStep>,
    pub answer: Result<Reply, DispatchError>,
}

impl EventReport {
    /// `changed`, `unchanged`, `denied` or `failed`: what the runtime saw.
    pub fn result(&self) -> &'static str {
        match &self.answer {
            Ok(reply) if reply.lines().is_empty() => "unchanged",
            Ok(_) => "changed",
            Err(DispatchError::Denied(_)) => "denied",
            Err(_) => "failed",
        }
    }

    /// Policies that failed (trap, limit, invalid output, ...), whatever
    /// their on-error made of it.
    pub fn policy_errors(&self) -> usize {
        self.steps.iter().filter(|s| matches!(s.step.outcome, Outcome::Failed { .. })).count()
    }
}

/// What the chain looks like, for the report.
#[derive(Debug, Clone)]
pub struct PolicyInfo {
    pub name: String,
    pub events: Vec<&'static str>,
    pub synchronize: bool,
    /// It imports the node interface and may call it (see `check`'s `reads` line).
    pub reads_node: bool,
    pub keeps_state: bool,
    pub limits: Limits,
    pub cached: bool,
}

/// A loaded chain behind a dispatcher, ready for events.
pub struct Session {
    dispatcher: Arc<PolicyDispatcher>,
    steps: Arc<StepLog>,
    pub policies: Vec<PolicyInfo>,
    pub problems: Vec<LoadProblem>,
    /// Policies whose state the report shows.
    stateful: Vec<String>,
    request_timeout: Duration,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("policies", &self.policies).finish_non_exhaustive()
    }
}

/// Reads `--state`: `{"NN-name": {"key": "value"}}`, or a directory of
/// `NN-name.json` files of `{"key": "value"}`.
fn read_state(path: &Path) -> Result<BTreeMap<String, BTreeMap<String, String>>, EvalError> {
    let bad = |reason: String| EvalError::State { path: path.to_path_buf(), reason };
    fn parse<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }
    if path.is_dir() {
        let mut all = BTreeMap::new();
        let entries = std::fs::read_dir(path).map_err(|e| bad(e.to_string()))?;
        for entry in entries.filter_map(|e| e.ok()) {
            let file = entry.path();
            let Some(policy) = file.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            let text = std::fs::read_to_string(&file).map_err(|e| bad(format!("{}: {e}", file.display())))?;
            let state = parse(&text).map_err(|e| bad(format!("{}: not an object of strings: {e}", file.display())))?;
            all.insert(policy.to_string(), state);
        }
        return Ok(all);
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    parse(&text).map_err(|e| bad(format!("not an object of policies' states (objects of strings): {e}")))
}

/// Commits `state` to `store` as a policy's earlier events would have.
fn preload(store: &StateStore, state: &BTreeMap<String, BTreeMap<String, String>>) -> Result<(), String> {
    for (policy, entries) in state {
        let mut txn = StateTxn::new(Arc::new(StateSnapshot::default()), usize::MAX);
        for (key, value) in entries {
            txn.set(key.clone(), value.clone()).map_err(|e| format!("{policy}: key {key:?}: {e:?}"))?;
        }
        if let Some(writes) = txn.take_writes() {
            store.commit(policy, writes);
        }
    }
    Ok(())
}

impl Session {
    /// Loads the policies of `path` (a component or a directory) with the
    /// production engine, behind a dispatcher that describes every step.
    pub fn load(
        path: &Path,
        settings: &SettingsArgs,
        host: &HostArgs,
        state: Option<&Path>,
        compiler: Compiler,
    ) -> Result<Self, EvalError> {
        let config = super::host_config(host)?;
        let defaults = config.policies.limits();
        let meta = std::fs::metadata(path).map_err(|_| SetupError::Missing(path.to_path_buf()))?;
        let (specs, spec_errors) = if meta.is_dir() {
            let (mut specs, errors) = loader::scan(path, DirOptions { defaults, strict_permissions: false });
            let overridden = settings.settings.is_some() || settings.settings_file.is_some();
            if overridden && specs.len() + errors.len() != 1 {
                let e = "--settings and --settings-file apply to one policy; a directory's policies take theirs from their NN-name.toml";
                return Err(SetupError::Usage(e.into()).into());
            }
            if overridden {
                for spec in &mut specs {
                    super::apply_settings(spec, settings, defaults)?;
                }
            }
            (specs, errors)
        } else {
            (vec![super::file_spec(path, settings, defaults)?], Vec::new())
        };
        let preloaded = state.map(read_state).transpose()?.unwrap_or_default();
        let states = StateStore::in_memory();
        preload(&states, &preloaded)
            .map_err(|reason| EvalError::State { path: state.unwrap_or(path).into(), reason })?;

        let cache = super::cache_dir(&host.cache_dir, &config.engine);
        let engine = super::engine(&config.engine, cache, compiler)?;
        let facts = Arc::new(super::facts());
        let loaded = engine.block_on(loader::load_specs(&engine, specs, spec_errors, &facts));
        let policies = loaded
            .policies
            .iter()
            .map(|p| PolicyInfo {
                name: p.name().to_string(),
                events: p.events().iter().map(|e| e.name()).collect(),
                synchronize: p.wants_synchronize(),
                // What it may read (its declaration, else its imports), not
                // what a toolchain that imports every interface imported:
                // the same test as the runtime's subscription.
                reads_node: p.reads_node(),
                keeps_state: p.imports().state,
                limits: p.spec.limits,
                cached: p.timings().cached,
            })
            .collect::<Vec<_>>();
        let mut stateful: Vec<String> = policies.iter().filter(|p| p.keeps_state).map(|p| p.name.clone()).collect();
        stateful.extend(preloaded.keys().cloned());
        stateful.sort();
        stateful.dedup();
        let chain = Chain::new(loaded.policies, config.chain).with_unloadable(loaded.unloadable);
        let steps = Arc::new(StepLog::default());
        let dispatcher =
            PolicyDispatcher::new(engine, chain, (*facts).clone(), config.engine.max_concurrent_calls as usize)
                .with_states(Arc::new(states))
                .with_observer(steps.clone())
                .explaining();
        Ok(Self {
            dispatcher: Arc::new(dispatcher),
            steps,
            policies,
            problems: loaded.problems,
            stateful,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        })
    }

    /// Runs one request through the dispatcher, as the transport would
    /// (within the answer budget of the runtime's request timeout).
    pub async fn run(&mut self, index: usize, recorded: Recorded) -> EventReport {
        let Recorded { request, time } = recorded;
        let event = request.name();
        let target = target(&request);
        self.steps.take();
        let budget = answer_budget(self.request_timeout);
        if let Request::Configure(c) = &request {
            self.request_timeout = runtime_info(c).request_timeout;
        }
        let started = Instant::now();
        let answer = match tokio::time::timeout(budget, dispatch(&self.dispatcher, request)).await {
            Ok(answer) => answer,
            Err(_) => {
                self.dispatcher.answer_overrun(event, budget);
                Err(DispatchError::DeadlineExceeded(budget))
            }
        };
        EventReport { index, event, time, target, elapsed: started.elapsed(), steps: self.steps.take(), answer }
    }

    /// Every policy's committed state that the report shows.
    pub fn state(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        let states = self.dispatcher.states();
        self.stateful
            .iter()
            .map(|name| {
                let snapshot = states.snapshot(name);
                (name.clone(), snapshot.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
            })
            .collect()
    }

    fn limits_of(&self, policy: &str) -> Option<&Limits> {
        self.policies.iter().find(|p| p.name == policy).map(|p| &p.limits)
    }
}

/// How reports name what an event is about.
fn target(request: &Request) -> String {
    use Request as R;
    let container = |pod: &protobuf::MessageField<pb::PodSandbox>, ctr: &protobuf::MessageField<pb::Container>| {
        container_target(pod.get_or_default(), ctr.get_or_default())
    };
    match request {
        R::Configure(c) => format!("runtime {} {}", c.runtime_name, c.runtime_version),
        R::Synchronize(s) => format!("the node (pods: {}, containers: {})", s.pods.len(), s.containers.len()),
        R::RunPodSandbox(r) => pod_target(r.pod.get_or_default()),
        R::UpdatePodSandbox(r) => pod_target(r.pod.get_or_default()),
        R::PostUpdatePodSandbox(r) => pod_target(r.pod.get_or_default()),
        R::StopPodSandbox(r) => pod_target(r.pod.get_or_default()),
        R::RemovePodSandbox(r) => pod_target(r.pod.get_or_default()),
        R::CreateContainer(r) => container(&r.pod, &r.container),
        R::PostCreateContainer(r) => container(&r.pod, &r.container),
        R::StartContainer(r) => container(&r.pod, &r.container),
        R::PostStartContainer(r) => container(&r.pod, &r.container),
        R::UpdateContainer(r) => container(&r.pod, &r.container),
        R::PostUpdateContainer(r) => container(&r.pod, &r.container),
        R::StopContainer(r) => container(&r.pod, &r.container),
        R::RemoveContainer(r) => container(&r.pod, &r.container),
        R::ValidateContainerAdjustment(r) => container(&r.pod, &r.container),
    }
}

/// Hands a request to the dispatcher's method for its event.
async fn dispatch(d: &PolicyDispatcher, request: Request) -> Result<Reply, DispatchError> {
    use Request as R;
    let nothing = |r: Result<(), DispatchError>| r.map(|()| Reply::Nothing);
    match request {
        R::Configure(c) => nothing(d.configure(&runtime_info(&c)).await),
        R::Synchronize(s) => d
            .synchronize(s.pods, s.containers)
            .await
            .map(|update| Reply::Synchronize(pb::SynchronizeResponse { update, ..Default::default() })),
        R::RunPodSandbox(r) => nothing(d.run_pod_sandbox(r).await),
        R::UpdatePodSandbox(r) => nothing(d.update_pod_sandbox(r).await),
        R::PostUpdatePodSandbox(r) => nothing(d.post_update_pod_sandbox(r).await),
        R::StopPodSandbox(r) => nothing(d.stop_pod_sandbox(r).await),
        R::RemovePodSandbox(r) => nothing(d.remove_pod_sandbox(r).await),
        R::CreateContainer(r) => d.create_container(r).await.map(Reply::Create),
        R::PostCreateContainer(r) => nothing(d.post_create_container(r).await),
        R::StartContainer(r) => nothing(d.start_container(r).await),
        R::PostStartContainer(r) => nothing(d.post_start_container(r).await),
        R::UpdateContainer(r) => d.update_container(r).await.map(Reply::Update),
        R::PostUpdateContainer(r) => nothing(d.post_update_container(r).await),
        R::StopContainer(r) => d.stop_container(r).await.map(Reply::Stop),
        R::RemoveContainer(r) => nothing(d.remove_container(r).await),
        R::ValidateContainerAdjustment(r) => d.validate_container_adjustment(r).await.map(Reply::Validate),
    }
}

/// A step's changes: the SDK's lines and the reply as NRI's JSON (proto
/// field names), read back from the description the chain made.
fn changes(event: &str, what: &str) -> (Vec<String>, Option<String>) {
    fn parse<M: protobuf::MessageFull>(what: &str) -> Option<M> {
        protobuf_json_mapping::parse_from_str::<M>(what).ok()
    }
    let parsed = match event {
        "CreateContainer" => parse::<pb::CreateContainerResponse>(what)
            .map(|r| (describe::lines(r.adjust.as_ref(), &r.update, &r.evict), record::to_json(&r))),
        "UpdateContainer" | "StopContainer" => parse::<pb::UpdateContainerResponse>(what)
            .map(|r| (describe::lines(None, &r.update, &r.evict), record::to_json(&r))),
        "ValidateContainerAdjustment" => Some((Vec::new(), "{}".to_string())),
        _ => parse::<pb::UpdateContainersRequest>(what)
            .map(|r| (describe::lines(None, &r.update, &r.evict), record::to_json(&r))),
    };
    match parsed {
        Some((lines, json)) => (lines, Some(json)),
        // Too large to describe: the chain says so instead.
        None => (vec![what.to_string()], None),
    }
}

fn limit_name(failure: &PolicyFailure) -> Option<&'static str> {
    let kind = match failure {
        PolicyFailure::Call(e) => e.limit()?,
        PolicyFailure::Overran { .. } => LimitKind::Time,
        _ => return None,
    };
    Some(match kind {
        LimitKind::Fuel => "fuel",
        LimitKind::Time => "time",
        LimitKind::Memory => "memory",
        LimitKind::Table => "table",
        LimitKind::Stack => "stack",
        LimitKind::Transfer => "transfer",
        LimitKind::Handles => "handles",
    })
}

/// The parsed JSON of a message printed by [`record::to_json`].
fn json_value(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::String(text.to_string()))
}

fn step_json(seen: &SeenStep, limits: Option<&Limits>) -> Value {
    let step = &seen.step;
    let mut v = json!({
        "policy": step.policy,
        "event": seen.event,
        "audit": step.audit,
        "time_us": step.elapsed.as_micros() as u64,
        "fuel": step.fuel,
    });
    if let Some(l) = limits {
        v["fuel_limit"] = json!(l.fuel);
        v["timeout_ms"] = json!(l.timeout_ms);
    }
    match &step.outcome {
        Outcome::Unchanged => v["outcome"] = json!("unchanged"),
        Outcome::Changed { what } => {
            let (lines, reply) = changes(&seen.event, what);
            v["outcome"] = json!("changed");
            v["lines"] = json!(lines);
            v["changes"] = reply.map_or(Value::Null, |r| json_value(&r));
        }
        Outcome::Denied { reason } => {
            v["outcome"] = json!("denied");
            v["reason"] = json!(reason);
        }
        Outcome::Yielded { conflict } => {
            v["outcome"] = json!("yielded");
            v["conflict"] = json!(conflict);
        }
        Outcome::Failed { failure, ignored } => {
            v["outcome"] = json!("failed");
            v["error"] = json!(failure.to_string());
            v["kind"] = json!(failure.kind());
            v["limit"] = limit_name(failure).map_or(Value::Null, |l| json!(l));
            v["ignored"] = json!(ignored);
        }
    }
    v
}

/// An event report as JSON.
pub fn event_json(session: &Session, report: &EventReport) -> Value {
    let mut v = json!({
        "index": report.index,
        "event": report.event,
        "target": report.target,
        "result": report.result(),
        "time_us": report.elapsed.as_micros() as u64,
        "policies": report.steps.iter().map(|s| step_json(s, session.limits_of(&s.step.policy))).collect::<Vec<_>>(),
    });
    if let Some(t) = &report.time {
        v["recorded"] = json!(t);
    }
    match &report.answer {
        Ok(reply) => {
            v["reply"] = reply.message().map_or(Value::Null, |m| json_value(&record::to_json(m)));
            v["lines"] = json!(reply.lines());
            v["error"] = Value::Null;
        }
        Err(e) => {
            v["reply"] = Value::Null;
            v["lines"] = json!([]);
            v["error"] = json!(e.to_string());
        }
    }
    v
}

/// The chain as JSON: loaded policies and those left out.
pub fn chain_json(session: &Session) -> Value {
    let policies: Vec<Value> = session
        .policies
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "events": p.events,
                "synchronize": p.synchronize,
                "reads_node": p.reads_node,
                "keeps_state": p.keeps_state,
                "limits": {"fuel": p.limits.fuel, "timeout_ms": p.limits.timeout_ms, "memory_mib": p.limits.memory_mib},
                "from_cache": p.cached,
            })
        })
        .collect();
    let problems: Vec<String> = session.problems.iter().map(|p| p.to_string()).collect();
    json!({"policies": policies, "problems": problems})
}

/// The chain as text.
pub fn write_chain(session: &Session, out: &mut dyn Write) {
    let _ = writeln!(out, "chain: {} loaded, {} left out", session.policies.len(), session.problems.len());
    for p in &session.policies {
        let events = if p.events.is_empty() && !p.synchronize { "no event".to_string() } else { p.events.join(", ") };
        let sync = if p.synchronize { " + Synchronize" } else { "" };
        let mut reads = Vec::new();
        if p.reads_node {
            reads.push("node view");
        }
        if p.keeps_state {
            reads.push("state");
        }
        let reads = if reads.is_empty() { String::new() } else { format!("; uses {}", reads.join(" and ")) };
        let _ = writeln!(out, "  {:<28} {events}{sync}{reads}", p.name);
    }
    for problem in &session.problems {
        let _ = writeln!(out, "  left out: {problem}");
    }
}

/// An event report as text; `brief` leaves out events no policy ran on.
pub fn write_event(session: &Session, report: &EventReport, brief: bool, out: &mut dyn Write) {
    if brief && report.steps.is_empty() && report.answer.is_ok() {
        return;
    }
    let when = report.time.as_deref().map(|t| format!(" at {t}")).unwrap_or_default();
    let _ = writeln!(out, "[{}] {} of {}{when}", report.index, report.event, report.target);
    if report.steps.is_empty() {
        let _ = writeln!(out, "    no policy ran on it");
    }
    for seen in &report.steps {
        let step = &seen.step;
        let limits = session.limits_of(&step.policy);
        let (outcome, detail): (String, Vec<String>) = match &step.outcome {
            Outcome::Unchanged => ("unchanged".into(), Vec::new()),
            Outcome::Changed { what } => ("changed".into(), changes(&seen.event, what).0),
            Outcome::Denied { reason } => ("denied".into(), vec![reason.clone()]),
            Outcome::Yielded { conflict } => ("yielded".into(), vec![conflict.clone()]),
            Outcome::Failed { failure, ignored } => {
                let what = if *ignored { "failed, ignored" } else { "failed" };
                (what.into(), vec![failure.to_string()])
            }
        };
        let outcome = if step.audit { format!("{outcome} (audit: not applied)") } else { outcome };
        let on = if seen.event != report.event { format!(" on {}", seen.event) } else { String::new() };
        let time = match limits {
            Some(l) => format!("{} of {} ms", super::ms(step.elapsed), l.timeout_ms),
            None => super::ms(step.elapsed),
        };
        let fuel = match limits {
            Some(l) => format!("fuel {} of {}", super::grouped(step.fuel), super::grouped(l.fuel)),
            None => format!("fuel {}", super::grouped(step.fuel)),
        };
        let outcome = format!("{outcome}{on}");
        let _ = writeln!(out, "    {:<28} {outcome:<16} {time}, {fuel}", step.policy);
        for line in detail {
            let _ = writeln!(out, "        {line}");
        }
    }
    let took = super::ms(report.elapsed);
    match &report.answer {
        Ok(reply) => {
            let lines = reply.lines();
            let what = if lines.is_empty() { "nothing changed" } else { "changed" };
            let _ = writeln!(out, "  answer in {took}: {what}");
            for line in lines {
                let _ = writeln!(out, "        {line}");
            }
        }
        Err(e) => {
            let _ = writeln!(out, "  answer in {took}: the event fails: {e}");
        }
    }
}

/// The state after the run, as text.
fn write_state(state: &BTreeMap<String, BTreeMap<String, String>>, out: &mut dyn Write) {
    for (policy, entries) in state {
        let json = serde_json::to_string(entries).unwrap_or_default();
        let _ = writeln!(out, "state of {policy}: {json}");
    }
}

/// The exit code of a run: an event that failed at the runtime first, then
/// a policy that did not load or failed.
pub fn exit_code(event_failed: bool, policy_errors: bool) -> u8 {
    match (event_failed, policy_errors) {
        (true, _) => EXIT_FAILED,
        (false, true) => EXIT_POLICY_ERROR,
        (false, false) => EXIT_OK,
    }
}

/// Reads a document: a file, or standard input for `-`.
fn read_input(path: &Path) -> Result<String, EvalError> {
    let read_err = |source| EvalError::Read { path: path.to_path_buf(), source };
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map_err(read_err)?;
        return Ok(text);
    }
    std::fs::read_to_string(path).map_err(read_err)
}

/// `nri-wasm eval`: the report to `out`, what kept it from running to `err`.
pub fn eval(args: &EvalArgs, compiler: Compiler, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    let result =
        if args.replay.is_empty() { single(args, compiler, out) } else { super::replay::replay(args, compiler, out) };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let _ = writeln!(err, "nri-wasm eval: {}", crate::text::chain(&e));
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// One event (after the node's Synchronize, with `--node`).
fn single(args: &EvalArgs, compiler: Compiler, out: &mut dyn Write) -> Result<u8, EvalError> {
    let input = args.input.as_deref().unwrap_or(Path::new("-"));
    let event = parse_document(&read_input(input)?, args.event.as_deref())
        .map_err(|error| EvalError::Input { path: input.to_path_buf(), error })?;
    let node = match &args.node {
        Some(path) => Some(
            parse_document(&read_input(path)?, Some("Synchronize"))
                .map_err(|error| EvalError::Input { path: path.clone(), error })?,
        ),
        None => None,
    };
    let mut session = Session::load(&args.policies, &args.settings, &args.host, args.state.as_deref(), compiler)?;
    let runtime = crate::cli::transport_runtime().map_err(EvalError::Runtime)?;
    let reports = runtime.block_on(async {
        let mut reports = Vec::new();
        for (i, recorded) in node.into_iter().chain([event]).enumerate() {
            reports.push(session.run(i + 1, recorded).await);
        }
        reports
    });
    let policy_errors = !session.problems.is_empty() || reports.iter().any(|r| r.policy_errors() > 0);
    let code = exit_code(reports.iter().any(|r| r.answer.is_err()), policy_errors);
    let state = session.state();
    if args.json {
        let mut doc = chain_json(&session);
        doc["events"] = Value::Array(reports.iter().map(|r| event_json(&session, r)).collect());
        doc["state"] = json!(state);
        doc["exit"] = json!(code);
        let _ = writeln!(out, "{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        write_chain(&session, out);
        for report in &reports {
            write_event(&session, report, false, out);
        }
        write_state(&state, out);
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_reads_back_as_lines_and_proto_named_json() {
        let mut reply = pb::CreateContainerResponse::default();
        reply
            .adjust
            .mut_or_insert_default()
            .CDI_devices
            .push(pb::CDIDevice { name: "vendor.com/gpu=0".into(), ..Default::default() });
        // The chain describes with the default (camelCase) names.
        let what = protobuf_json_mapping::print_to_string(&reply).unwrap();
        assert!(what.contains("CDIDevices"), "{what}");
        let (lines, json) = changes("CreateContainer", &what);
        assert_eq!(lines, ["cdi vendor.com/gpu=0"]);
        assert!(json.unwrap().contains("\"CDI_devices\""));
        let (lines, json) = changes("CreateContainer", "a reply of 2000000 bytes (too large to show)");
        assert_eq!((lines.len(), json), (1, None));
    }

    #[test]
    fn state_reads_as_a_file_of_policies_or_a_state_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("state.json");
        std::fs::write(&file, r#"{"10-a": {"k": "v"}, "20-b": {}}"#).unwrap();
        let state = read_state(&file).unwrap();
        assert_eq!(state["10-a"]["k"], "v");
        let store = StateStore::in_memory();
        preload(&store, &state).unwrap();
        assert_eq!(store.snapshot("10-a").get("k"), Some("v"));
        assert!(store.snapshot("20-b").is_empty());

        let states = dir.path().join("states");
        std::fs::create_dir(&states).unwrap();
        std::fs::write(states.join("30-c.json"), r#"{"x": "1"}"#).unwrap();
        assert_eq!(read_state(&states).unwrap()["30-c"]["x"], "1");

        std::fs::write(&file, r#"{"k": "v"}"#).unwrap();
        let e = read_state(&file).unwrap_err().to_string();
        assert!(e.contains("not an object of policies' states"), "{e}");
        let bad_key = BTreeMap::from([("10-a".to_string(), BTreeMap::from([(String::new(), "v".to_string())]))]);
        assert!(preload(&store, &bad_key).unwrap_err().contains("10-a"));
    }
}
