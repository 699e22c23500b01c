//! A chain of policies loaded for `eval`, and each event run through it.
//!
//! `eval` (one event, after the node's Synchronize) and `eval --replay` (a
//! recording) both load the chain the same way and run each request as the
//! transport would; this is that part, apart from how either reads its
//! input and from how the report is written (`report.rs`).
//!
//! The policies load as a node loads them: the host is put together by
//! [`HostBuilder`], the composition root of `run`, from the node's
//! configuration when one is given, and its first load is awaited; its
//! [`PolicyDispatcher`] (the one the transport calls on a node) runs each
//! event, within the answer budget the transport gives it, so every limit,
//! time share, on-error, conflict rule, merge and validation applies, and
//! the node view and the policies' state carry from one event to the next.
//! An observer collects each policy's step; the reply is kept as the
//! runtime would have received it, typed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_wasm_api::api as pb;

use super::{describe, HostArgs, SettingsArgs, SetupError};
use crate::cli::steps::{SeenStep, StepLog};
use crate::cli::HostBuilder;
use crate::nri::record::{FormatError, Recorded, Request};
use crate::nri::service::{answer_budget, runtime_info, DEFAULT_REQUEST_TIMEOUT};
use crate::nri::{DispatchError, Dispatcher as _};
use crate::policy::call::state::{StateSnapshot, StateStore, StateTxn};
use crate::policy::chain::{container_target, pod_target, Outcome};
use crate::policy::dispatcher::PolicyDispatcher;
use crate::policy::load::compile::Compiler;
use crate::policy::load::directory;
use crate::policy::spec::limits::Limits;
use crate::policy::spec::manifest::ReadOptions;

/// What keeps `eval` from evaluating.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The host could not be set up: usage, configuration, a policy's
    /// file or settings, the engine.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// An input file (`--input`, `--node`, `--replay`) could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        /// The file (`-` for standard input).
        path: PathBuf,
        /// Why reading it failed.
        source: std::io::Error,
    },
    /// An `--input` or `--node` document is not a request `eval` can run.
    #[error("{}: {error}", path.display())]
    Input {
        /// The file (`-` for standard input).
        path: PathBuf,
        /// What is wrong with the document.
        error: FormatError,
    },
    /// A line of a `--replay` recording is not a recorded request.
    #[error("{}, line {line}: {error}", path.display())]
    Recording {
        /// The recording.
        path: PathBuf,
        /// The line, counted from 1.
        line: usize,
        /// What is wrong with the line.
        error: FormatError,
    },
    /// The `--state` file or directory cannot be read or preloaded.
    #[error("--state {}: {problem}", path.display())]
    State {
        /// The `--state` file or directory.
        path: PathBuf,
        /// What is wrong, naming the policy or file where it can.
        problem: StateInput,
    },
    /// The async runtime that runs the events could not be built.
    #[error("cannot start the event runtime: {0}")]
    Runtime(std::io::Error),
}

/// What the runtime would have received.
#[derive(Debug, Clone)]
pub enum Reply {
    /// The event's reply carries nothing.
    Nothing,
    /// CreateContainer's reply: an adjustment, updates, evictions.
    Create(pb::CreateContainerResponse),
    /// UpdateContainer's reply: updates and evictions.
    Update(pb::UpdateContainerResponse),
    /// StopContainer's reply: updates of other containers.
    Stop(pb::StopContainerResponse),
    /// Synchronize's reply: updates of existing containers.
    Synchronize(pb::SynchronizeResponse),
    /// ValidateContainerAdjustment's reply (a denial is an error instead).
    Validate(pb::ValidateContainerAdjustmentResponse),
}

/// The reply of each `answer` and `verdict` event of the table (`nri/events.rs`).
macro_rules! reply_from {
    ($($response:ident => $variant:ident),* $(,)?) => {
        $(impl From<pb::$response> for Reply {
            fn from(response: pb::$response) -> Self {
                Self::$variant(response)
            }
        })*
    };
}
reply_from! {
    CreateContainerResponse => Create,
    UpdateContainerResponse => Update,
    StopContainerResponse => Stop,
    ValidateContainerAdjustmentResponse => Validate,
}

impl Reply {
    pub(super) fn message(&self) -> Option<&dyn protobuf::MessageDyn> {
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
    /// The event's NRI name (`CreateContainer`, ...).
    pub event: &'static str,
    /// When it was recorded, if it was.
    pub time: Option<String>,
    /// What the event is about: the pod or container, the runtime, or the node.
    pub target: String,
    /// How long the dispatcher took to answer.
    pub elapsed: Duration,
    /// Each policy's step through the chain, in order.
    pub steps: Vec<SeenStep>,
    /// The reply the runtime would have received, or the error it would
    /// have seen (a denial, a failure, the answer budget overrun).
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
    /// The policy's name (`NN-name`).
    pub name: String,
    /// The NRI events it subscribes to.
    pub events: Vec<&'static str>,
    /// It subscribes to `synchronize`.
    pub synchronize: bool,
    /// It imports the node interface and may call it (see `check`'s `reads` line).
    pub reads_node: bool,
    /// It imports the state interface.
    pub keeps_state: bool,
    /// Its effective limits (its settings over the host's defaults).
    pub limits: Limits,
    /// Its compiled code came from the compilation cache.
    pub cached: bool,
}

/// A loaded chain behind a dispatcher, ready for events.
pub struct Session {
    dispatcher: Arc<PolicyDispatcher>,
    steps: Arc<StepLog>,
    /// The policies that loaded, in chain order.
    pub policies: Vec<PolicyInfo>,
    /// What kept policies from loading, one problem each (the policy's
    /// file and the step, as a node's log says it).
    pub problems: Vec<String>,
    /// Policies whose state the report shows.
    stateful: Vec<String>,
    request_timeout: Duration,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("policies", &self.policies).finish_non_exhaustive()
    }
}

/// What is wrong with a `--state` file or directory.
#[derive(Debug, thiserror::Error)]
pub enum StateInput {
    /// The directory, or a file, cannot be read.
    #[error("{}{error}", file.as_ref().map(|f| format!("{}: ", f.display())).unwrap_or_default())]
    Read {
        /// The file of the directory, if one is to blame.
        file: Option<PathBuf>,
        /// The system's reason.
        error: std::io::Error,
    },
    /// A file is not the JSON it should be.
    #[error("{}not {what}: {error}", file.as_ref().map(|f| format!("{}: ", f.display())).unwrap_or_default())]
    Parse {
        /// The file of the directory, if one is to blame.
        file: Option<PathBuf>,
        /// What it should be.
        what: &'static str,
        /// Where the JSON parser stopped.
        error: serde_json::Error,
    },
    /// A key a policy's state could never hold.
    #[error("{policy}: key {key:?}: {error:?}")]
    Key {
        /// The policy.
        policy: String,
        /// The key.
        key: String,
        /// Why the state refuses it.
        error: crate::wit::state::StateError,
    },
}

/// Reads `--state`: `{"NN-name": {"key": "value"}}`, or a directory of
/// `NN-name.json` files of `{"key": "value"}`.
fn read_state(path: &Path) -> Result<BTreeMap<String, BTreeMap<String, String>>, EvalError> {
    let bad = |problem: StateInput| EvalError::State { path: path.to_path_buf(), problem };
    if path.is_dir() {
        let mut all = BTreeMap::new();
        let entries = std::fs::read_dir(path).map_err(|error| bad(StateInput::Read { file: None, error }))?;
        for entry in entries.filter_map(|e| e.ok()) {
            let file = entry.path();
            let Some(policy) = file.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            let text = std::fs::read_to_string(&file)
                .map_err(|error| bad(StateInput::Read { file: Some(file.clone()), error }))?;
            let state = serde_json::from_str(&text).map_err(|error| {
                bad(StateInput::Parse { file: Some(file.clone()), what: "an object of strings", error })
            })?;
            all.insert(policy.to_string(), state);
        }
        return Ok(all);
    }
    let text = std::fs::read_to_string(path).map_err(|error| bad(StateInput::Read { file: None, error }))?;
    serde_json::from_str(&text).map_err(|error| {
        bad(StateInput::Parse { file: None, what: "an object of policies' states (objects of strings)", error })
    })
}

/// Commits `state` to `store` as a policy's earlier events would have.
fn preload(store: &StateStore, state: &BTreeMap<String, BTreeMap<String, String>>) -> Result<(), StateInput> {
    for (policy, entries) in state {
        let mut txn = StateTxn::new(Arc::new(StateSnapshot::default()), usize::MAX);
        for (key, value) in entries {
            txn.set(key.clone(), value.clone()).map_err(|error| StateInput::Key {
                policy: policy.clone(),
                key: key.clone(),
                error,
            })?;
        }
        if let Some(writes) = txn.take_writes() {
            store.commit(policy, writes);
        }
    }
    Ok(())
}

impl Session {
    /// Loads the policies of `path` (a component or a directory) as a host
    /// with the configuration of `host` loads them ([`HostBuilder`], the
    /// composition root `run` uses): `path` stands for its `[policies] dir`
    /// (a component for a directory of one, with the settings of the command
    /// line), the policies of its `[policies.sources]` join them, pulled
    /// with its `[registry]`. What differs from a node: the state is kept
    /// in memory (preloaded from `state`), and nothing is served or watched.
    pub fn load(
        path: &Path,
        settings: &SettingsArgs,
        host: &HostArgs,
        state: Option<&Path>,
        compiler: Compiler,
    ) -> Result<Self, EvalError> {
        let mut config = super::host_config(host)?;
        let defaults = config.policies.limits();
        let meta = std::fs::metadata(path).map_err(|_| SetupError::Missing(path.to_path_buf()))?;
        let overridden = settings.settings.is_some() || settings.settings_file.is_some();
        let mut given = Vec::new();
        config.policies.dir = None;
        if !meta.is_dir() {
            given.push(super::file_spec(path, settings, defaults)?);
        } else if !overridden {
            config.policies.dir = Some(path.to_path_buf());
        } else {
            // The settings of the command line are for the directory's one
            // policy, which is then given with them.
            let options = ReadOptions { defaults, strict_permissions: config.policies.strict_permissions };
            let (mut specs, errors) = directory::scan(path, options);
            if specs.len() + errors.len() != 1 {
                let e = "--settings and --settings-file apply to one policy; a directory's policies take theirs from their NN-name.toml";
                return Err(SetupError::Usage(e.into()).into());
            }
            match specs.pop() {
                Some(mut spec) => {
                    super::apply_settings(&mut spec, settings, defaults)?;
                    given.push(spec);
                }
                // Its settings file cannot be used: reported as a node reports it.
                None => config.policies.dir = Some(path.to_path_buf()),
            }
        }
        config.policies.watch = false;
        config.metrics.address = String::new();
        config.engine.cache_dir = super::cache_dir(&host.cache_dir, &config.engine);
        let preloaded = state.map(read_state).transpose()?.unwrap_or_default();
        let states = StateStore::in_memory();
        preload(&states, &preloaded)
            .map_err(|problem| EvalError::State { path: state.unwrap_or(path).into(), problem })?;

        let steps = Arc::new(StepLog::default());
        let built = HostBuilder::new(config)
            .compiler(compiler)
            .observer(steps.clone())
            .states(Arc::new(states))
            .given(given)
            .build()
            .map_err(SetupError::from)?;
        let mut reloads = built.reloader.reloads();
        let engine = built.dispatcher.engine().clone();
        let loaded = engine.block_on(async move { reloads.wait_for(|(n, _)| *n >= 1).await.map(|r| r.1.clone()) });
        let loaded = loaded.map_err(|_| SetupError::Usage("the host stopped before loading the policies".into()))?;
        let chain = built.dispatcher.chain();
        let policies = chain
            .policies()
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
        let problems =
            loaded.failed.iter().map(|(_, why)| why.clone()).chain(loaded.problems.iter().cloned()).collect();
        Ok(Self {
            dispatcher: built.dispatcher,
            steps,
            policies,
            problems,
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

    pub(super) fn limits_of(&self, policy: &str) -> Option<&Limits> {
        self.policies.iter().find(|p| p.name == policy).map(|p| &p.limits)
    }
}

/// What an event's request is about, for the report.
macro_rules! event_target {
    (pod, $r:ident) => {
        pod_target($r.pod.get_or_default())
    };
    (container, $r:ident) => {
        container_target($r.pod.get_or_default(), $r.container.get_or_default())
    };
}

/// What an event's dispatcher method returned, as a [`Reply`].
macro_rules! event_reply {
    (notify, $answer:expr) => {
        $answer.map(|()| Reply::Nothing)
    };
    (answer, $answer:expr) => {
        $answer.map(Reply::from)
    };
    (verdict, $answer:expr) => {
        $answer.map(Reply::from)
    };
}

/// `eval`'s naming and dispatch of every request: Configure and
/// Synchronize, then one arm per row of the event table (`nri/events.rs`).
macro_rules! eval_requests {
    ($($kind:ident = $number:literal since $since:tt, $method:ident, $request:ident => $response:ident, $reply:ident, $carries:ident, $shape:ident;)*) => {
        /// How reports name what an event is about.
        fn target(request: &Request) -> String {
            match request {
                Request::Configure(c) => format!("runtime {} {}", c.runtime_name, c.runtime_version),
                Request::Synchronize(s) => {
                    format!("the node (pods: {}, containers: {})", s.pods.len(), s.containers.len())
                }
                $(Request::$kind(r) => event_target!($carries, r)),*
            }
        }

        /// Hands a request to the dispatcher's method for its event.
        async fn dispatch(d: &PolicyDispatcher, request: Request) -> Result<Reply, DispatchError> {
            match request {
                Request::Configure(c) => d.configure(&runtime_info(&c)).await.map(|()| Reply::Nothing),
                Request::Synchronize(s) => d
                    .synchronize(s.pods, s.containers)
                    .await
                    .map(|update| Reply::Synchronize(pb::SynchronizeResponse { update, ..Default::default() })),
                $(Request::$kind(r) => event_reply!($reply, d.$method(r).await)),*
            }
        }
    };
}
crate::nri::events::nri_events!(eval_requests);

#[cfg(test)]
mod tests {
    use super::*;

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
        let e = preload(&store, &bad_key).unwrap_err();
        assert!(matches!(&e, StateInput::Key { policy, key, .. } if policy == "10-a" && key.is_empty()), "{e}");
    }
}
