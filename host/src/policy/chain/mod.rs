//! The ordered chain of policies for one event.
//!
//! Policies run in file-name order and each sees the pod and container as the
//! policies before it left it, exactly as NRI runs its plugins. What each
//! one returns goes down one path (`pipeline.rs`): converted, bounded,
//! validated, merged with the runtime's own rules (`crate::merge`), and its
//! conflicts told apart from its failures:
//! - a policy's own failure (trap, limit, invalid output, no time left,
//!   quarantined) is handled by its `on-error`: `ignore` drops its output and
//!   goes on, `fail` fails the event;
//! - a conflict between two policies is a property of the chain: it fails
//!   the event, as the runtime fails it when two plugins conflict, unless
//!   the later policy says `on-conflict = "yield"` (its reply is then
//!   dropped, and that is reported);
//! - `mode = "audit"` evaluates and reports, but changes, denies and fails
//!   nothing.
//!
//! A circuit breaker quarantines a policy after repeated consecutive
//! failures, so that a broken policy does not cost every event its full time
//! limit; it reads the chain's own clock (`clock.rs`). Time is shared out
//! (`budget.rs`): each policy gets its own limit, but never so much that the
//! policies after it are left less than their share of the chain's budget.

mod budget;
mod change;
mod clock;
mod events;
mod pipeline;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nri_wasm_api::api as pb;
use serde::Deserialize;

use crate::invalid::Invalid;
use crate::merge::MergeError;
use crate::nri::version::{EventKind, EventMask};
use crate::policy::call::compiled::CompiledPolicy;
use crate::policy::call::state::StateWrites;
use crate::policy::engine::{CallEnv, CallError, PolicyEngine};
use crate::policy::load::directory::{Expected, Unloadable};
use crate::policy::load::known::Subscription;
use crate::policy::spec::manifest::{Mode, OnError, PolicySpec};

pub use budget::shares;
pub use change::Change;
#[cfg(any(test, feature = "testing"))]
pub use clock::ManualClock;
pub use clock::{Clock, SystemClock};

/// Largest reply one policy may give, encoded as the runtime would receive
/// it: NRI's transport carries at most 4 MiB per message.
pub const MAX_REPLY_BYTES: usize = 1 << 20;
/// Largest sum of the replies merged for one event.
pub const MAX_TOTAL_REPLY_BYTES: usize = 3 << 20;

/// Chain-wide settings (the `[chain]` table of the host configuration).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct ChainSettings {
    /// Share of the runtime's request timeout the whole chain may use.
    pub budget_fraction: f64,
    /// Consecutive failures after which a policy is quarantined.
    pub breaker_failures: u32,
    /// How long a quarantine lasts, in milliseconds.
    pub breaker_backoff_ms: u64,
    /// A call is not started with less time than this left (milliseconds).
    pub min_call_ms: u64,
}

impl Default for ChainSettings {
    fn default() -> Self {
        Self { budget_fraction: 0.5, breaker_failures: 5, breaker_backoff_ms: 30_000, min_call_ms: 1 }
    }
}

impl ChainSettings {
    /// Checks each setting's range; the error names the `[chain]` key and its bounds.
    pub fn validate(&self) -> Result<(), Invalid> {
        const T: &str = "[chain]";
        if !(self.budget_fraction > 0.0 && self.budget_fraction <= 0.9) {
            return Err(Invalid::key(T, "budget-fraction", format!("{} must be in (0, 0.9]", self.budget_fraction)));
        }
        if self.breaker_failures == 0 {
            return Err(Invalid::key(T, "breaker-failures", "must be positive"));
        }
        if self.min_call_ms == 0 || self.min_call_ms > 1000 {
            return Err(Invalid::key(T, "min-call-ms", format!("{} must be in 1..=1000", self.min_call_ms)));
        }
        Ok(())
    }

    /// The chain's time budget for a runtime request timeout:
    /// `budget-fraction` of it, but never more than the transport's answer
    /// budget leaves once [`BACKSTOP_RESERVE`] is set aside, so that the
    /// chain (with the dispatcher's grace past its deadline) has ended
    /// before the transport's backstop turns a late answer into an error.
    /// Only a fraction near 0.9, or a request timeout under 250 ms, is cut.
    pub fn budget(&self, request_timeout: Duration) -> Duration {
        let most = crate::nri::service::answer_budget(request_timeout).saturating_sub(BACKSTOP_RESERVE);
        request_timeout.mul_f64(self.budget_fraction).min(most)
    }

    /// When [`Self::budget`] is cut to fit before the transport's backstop,
    /// the warning that says so, naming the setting.
    pub fn budget_cut(&self, request_timeout: Duration) -> Option<String> {
        let asked = request_timeout.mul_f64(self.budget_fraction);
        let got = self.budget(request_timeout);
        (got < asked).then(|| {
            format!(
                "[chain] budget-fraction = {} of the runtime's request timeout of {} ms would give the chain {} ms; \
                 it gets {} ms, so that it answers before the transport gives up on the answer ({} ms, less {} ms \
                 for the answer to leave)",
                self.budget_fraction,
                request_timeout.as_millis(),
                asked.as_millis(),
                got.as_millis(),
                crate::nri::service::answer_budget(request_timeout).as_millis(),
                BACKSTOP_RESERVE.as_millis()
            )
        })
    }
}

/// What the chain leaves of the transport's answer budget
/// (`nri::service::answer_budget`, counted from when the transport started
/// the answer): the dispatcher's grace past the chain's deadline, for a
/// chain that waits in something async past it (20 ms), and room to hand
/// the answer back. Whatever `budget-fraction` and the runtime's request
/// timeout, the chain ends before the transport's backstop, which would
/// make the answer an error (on Synchronize, the runtime drops the plugin).
pub const BACKSTOP_RESERVE: Duration = Duration::from_millis(30);

/// Why a policy produced no usable output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyFailure {
    /// The call itself failed (trap, limit, refused host call, ...).
    #[error(transparent)]
    Call(#[from] CallError),
    /// The reply could not be converted, was too large, contradicted itself,
    /// or needs a capability the policy lacks.
    #[error("policy {policy} on {event}: invalid output: {reason}")]
    InvalidOutput {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The event's name (`CreateContainer`, `Synchronize`, ...).
        event: String,
        /// What is wrong with the reply.
        reason: String,
    },
    /// The reply conflicts with what an earlier policy in the chain set.
    #[error("policy {policy} on {event}: {conflict}")]
    Conflict {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The event's name (`CreateContainer`, `Synchronize`, ...).
        event: String,
        /// The merge's account of the conflict: the field and the two policies
        /// that set it.
        conflict: MergeError,
    },
    /// The call and the host's work on its reply together used more than
    /// the policy's time limit (the time each was charged: CPU time and
    /// waits, `policy/call/meter.rs`).
    #[error("policy {policy} on {event}: time limit of {limit_ms} ms exceeded: its call used {call_ms} ms and the host's work on its reply {host_ms} ms")]
    Overran {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The event's name (`CreateContainer`, `Synchronize`, ...).
        event: String,
        /// The time the policy was given for this call, in milliseconds.
        limit_ms: u64,
        /// How long the call into the policy took, in milliseconds.
        call_ms: u64,
        /// How long the host took to convert, check and merge the reply, in
        /// milliseconds.
        host_ms: u64,
    },
    /// The policy was not called: the chain's budget had too little time
    /// left, or the policy is still loading.
    #[error("policy {policy} on {event}: skipped, {reason}")]
    Skipped {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The event's name (`CreateContainer`, `Synchronize`, ...).
        event: String,
        /// Why it was not called.
        reason: String,
    },
    /// The policy was not called: its circuit breaker is open.
    #[error("policy {policy} on {event}: quarantined after {failures} consecutive failures")]
    Quarantined {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The event's name (`CreateContainer`, `Synchronize`, ...).
        event: String,
        /// Its consecutive failures when the event came.
        failures: u32,
    },
    /// A mandatory policy failed to load or is not ready yet, so the event
    /// fails.
    #[error("policy {policy} on {event}: not loaded: {reason}")]
    NotLoaded {
        /// The policy's name (`NN-name`).
        policy: String,
        /// The event's name (`CreateContainer`, `Synchronize`, ...).
        event: String,
        /// Why it is not loaded: its load error, or that it is still loading.
        reason: String,
    },
}

impl PolicyFailure {
    /// A short name of the kind of failure, for metrics and reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Call(e) => e.label(),
            Self::InvalidOutput { .. } => "invalid",
            Self::Conflict { .. } => "conflict",
            Self::Overran { .. } => "timeout",
            Self::Skipped { .. } => "skipped",
            Self::Quarantined { .. } => "quarantined",
            Self::NotLoaded { .. } => "not-loaded",
        }
    }

    /// The policy that failed.
    pub fn policy(&self) -> &str {
        match self {
            Self::Call(e) => &e.policy,
            Self::InvalidOutput { policy, .. }
            | Self::Conflict { policy, .. }
            | Self::Overran { policy, .. }
            | Self::Skipped { policy, .. }
            | Self::Quarantined { policy, .. }
            | Self::NotLoaded { policy, .. } => policy,
        }
    }
}

/// How the chain ended for an event, when it did not answer normally.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// A policy in enforce mode denied the event.
    #[error("policy {policy} denied {event} of {target}: {reason}")]
    Denied {
        /// The denying policy's name (`NN-name`).
        policy: String,
        /// The event's name (`CreateContainer`, `Synchronize`, ...).
        event: String,
        /// The pod or container, as [`container_target`] or [`pod_target`] names it.
        target: String,
        /// The reason the policy gave.
        reason: String,
    },
    /// A policy with `on-error = "fail"` failed.
    #[error("{failure} ({target}; on-error = fail)")]
    Failed {
        /// The pod or container, as [`container_target`] or [`pod_target`] names it.
        target: String,
        /// What the policy's failure was.
        failure: Box<PolicyFailure>,
    },
    /// Two policies conflicted, and the later one does not yield.
    #[error("{event} of {target}: {conflict}")]
    Conflict {
        /// The event's name (`CreateContainer`, `Synchronize`, ...).
        event: String,
        /// The pod or container, as [`container_target`] or [`pod_target`] names it.
        target: String,
        /// The merge's account of the conflict: the field and the two policies
        /// that set it.
        conflict: MergeError,
    },
}

/// What one policy did for one event, for logs, metrics and reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// The policy's name (`NN-name`).
    pub policy: String,
    /// The policy runs in audit mode: nothing it did took effect.
    pub audit: bool,
    /// Fuel the call consumed (0 when the policy was not called).
    pub fuel: u64,
    /// Time the call and the host's work on its reply took (zero when the
    /// policy was not called).
    pub elapsed: Duration,
    /// What came of its turn.
    pub outcome: Outcome,
}

/// Sees every step as it happens, whatever the evaluation's end (metrics,
/// decision logs). Called on the evaluating thread: keep it cheap.
pub trait Observer: Send + Sync + std::fmt::Debug {
    /// `policy` took a `step` on `event` of `target`.
    fn step(&self, event: &str, target: &str, step: &Step);
}

/// The outcome of one policy's turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It answered and changed nothing.
    Unchanged,
    /// It answered with changes (applied, or only reported in audit mode).
    Changed {
        /// The reply as the merge took it, kept when the evaluation
        /// explains ([`EvalContext::explain`]) or the policy is audited;
        /// `None` otherwise, so that other events keep nothing.
        change: Option<Arc<Change>>,
    },
    /// It denied the event (in audit mode, only reported).
    Denied {
        /// The reason the policy gave.
        reason: String,
    },
    /// Its reply conflicted with an earlier policy's and was dropped
    /// (`on-conflict = "yield"`).
    Yielded {
        /// The conflict, as text.
        conflict: String,
    },
    /// It produced no usable output.
    Failed {
        /// What went wrong.
        failure: PolicyFailure,
        /// The event went on without it (`on-error = "ignore"`, audit mode,
        /// or a policy not ready yet).
        ignored: bool,
    },
}

impl Outcome {
    /// A short name of the outcome, for metrics: ok, changed, denied,
    /// conflict, or the failure's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Unchanged => "ok",
            Self::Changed { .. } => "changed",
            Self::Denied { .. } => "denied",
            Self::Yielded { .. } => "conflict",
            Self::Failed { failure, .. } => failure.kind(),
        }
    }
}

/// A policy's failure history: the circuit breaker.
///
/// After `breaker-failures` consecutive failures the policy is quarantined
/// (not called) for `breaker-backoff-ms`. Once the back-off is over it is
/// called again, on probation: one more failure sends it straight back into
/// quarantine, each time for twice as long (up to [`Breaker::MAX_DOUBLINGS`]
/// doublings), so a policy that keeps failing costs the node a failed event
/// now and then, not every event. One success closes the breaker and
/// forgets the history.
#[derive(Debug, Default)]
struct Breaker {
    /// Consecutive failures (quarantined events not counted).
    failures: u32,
    open_until: Option<Instant>,
    /// Quarantines since the last success.
    trips: u32,
}

impl Breaker {
    /// The back-off stops doubling after this many doublings (30 s becomes
    /// at most 16 min).
    const MAX_DOUBLINGS: u32 = 5;

    /// Records a failure at `now`; returns the back-off if the breaker opens.
    fn fail(&mut self, now: Instant, threshold: u32, base: Duration) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        let on_probation = self.trips > 0;
        if !on_probation && self.failures < threshold {
            return None;
        }
        let backoff = base.saturating_mul(1 << self.trips.min(Self::MAX_DOUBLINGS));
        self.trips = self.trips.saturating_add(1);
        self.open_until = Some(now + backoff);
        Some(backoff)
    }

    /// Records a success: the breaker closes and its history is forgotten.
    fn succeed(&mut self) {
        *self = Self::default();
    }

    /// Whether the breaker is open at `now`.
    fn open_at(&self, now: Instant) -> bool {
        self.open_until.is_some_and(|t| now < t)
    }
}

#[cfg(test)]
mod breaker_tests {
    use super::*;

    #[test]
    fn a_policy_failing_after_its_back_off_goes_back_with_a_doubled_one() {
        let base = Duration::from_secs(30);
        let mut b = Breaker::default();
        let t0 = Instant::now();
        assert_eq!(b.fail(t0, 3, base), None);
        assert_eq!(b.fail(t0, 3, base), None);
        assert_eq!(b.fail(t0, 3, base), Some(base), "the third failure in a row trips it");
        assert!(b.open_at(t0 + base - Duration::from_millis(1)) && !b.open_at(t0 + base));
        // Back on probation: one failure is enough, and the back-off doubles.
        let t1 = t0 + base;
        assert_eq!(b.fail(t1, 3, base), Some(base * 2));
        assert!(b.open_at(t1 + base * 2 - Duration::from_millis(1)) && !b.open_at(t1 + base * 2));
        let mut t = t1 + base * 2;
        let mut last = base * 2;
        for _ in 0..10 {
            let next = b.fail(t, 3, base).expect("every failure on probation trips it");
            assert!(next >= last && next <= base * 32, "{next:?}");
            last = next;
            t += next;
        }
        assert_eq!(last, base * 32, "the back-off is capped");
        // One success forgets everything: the next trip needs the threshold again.
        b.succeed();
        assert!(!b.open_at(t));
        assert_eq!(b.fail(t, 3, base), None);
        assert_eq!(b.fail(t, 3, base), None);
        assert_eq!(b.fail(t, 3, base), Some(base));
    }
}

/// One policy in the chain, with its failure history.
#[derive(Debug)]
pub struct ChainEntry {
    /// The compiled policy, shared with the chains a reload builds.
    pub policy: Arc<CompiledPolicy>,
    /// Shared with the entry of the same policy in the chain this one
    /// replaced (see [`Chain::after`]): a reload does not forgive.
    breaker: Arc<Mutex<Breaker>>,
    /// The chain's clock, which its breaker reads.
    clock: Arc<dyn Clock>,
}

impl ChainEntry {
    fn breaker(&self) -> std::sync::MutexGuard<'_, Breaker> {
        // Two integers: nothing a panic could leave inconsistent.
        self.breaker.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the breaker is open now, by the chain's clock.
    pub fn quarantined(&self) -> bool {
        self.breaker().open_at(self.clock.now())
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.breaker().failures
    }
}

/// The events a mandatory policy still loading refuses, when it would see
/// them: those whose refusal keeps something from happening (a pod, a
/// container, its start or a resource change). Every other event goes on
/// without the policy, reported as its step `skipped`:
/// - the teardown events (StopContainer, RemoveContainer, StopPodSandbox,
///   RemovePodSandbox): a refused stop or remove leaves a pod that cannot
///   be torn down, which no policy still loading can justify;
/// - the post-events: they report what already happened, so a refusal
///   would change nothing but the runtime's log;
/// - Synchronize: a runtime drops a plugin whose Synchronize fails, and
///   with it every policy.
pub const REFUSED_WHILE_LOADING: [EventKind; 5] = [
    EventKind::RunPodSandbox,
    EventKind::CreateContainer,
    EventKind::StartContainer,
    EventKind::UpdateContainer,
    EventKind::UpdatePodSandbox,
];

/// A policy found in the directory that is not ready yet: it is still
/// being read, compiled or configured. Until it is, the start-up contract
/// (`policy/dispatcher.rs`) decides what an event it would see does.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The policy's name (`NN-name`).
    pub name: String,
    /// Its `on-error = "fail"` (in enforce mode) refuses the events it
    /// would see that are [refused while loading](REFUSED_WHILE_LOADING).
    pub mandatory: bool,
    /// When its load started.
    pub since: Instant,
    /// Its subscription as recorded at its last load, if there is a record.
    pub expected: Option<Subscription>,
    /// What its component declares it may subscribe to, if it declares it
    /// (`spec/declared.rs`).
    pub declared: Option<Subscription>,
    /// Set once an event waited for it in vain; shared by the copies of
    /// this entry in every chain installed while it loads.
    waited_in_vain: Arc<AtomicBool>,
}

impl Pending {
    /// A policy whose load started at `since`, of which nothing is known
    /// yet (see [`Self::with_record`], [`Self::with_declared`]).
    pub fn new(name: impl Into<String>, mandatory: bool, since: Instant) -> Self {
        Self { name: name.into(), mandatory, since, expected: None, declared: None, waited_in_vain: Arc::default() }
    }

    /// Each of `expected` as not ready yet, its load started now.
    pub fn all(expected: Vec<Expected>) -> Vec<Self> {
        let since = Instant::now();
        expected
            .into_iter()
            .map(|e| Self::new(e.name, e.mandatory, since).with_record(e.recorded).with_declared(e.declared))
            .collect()
    }

    /// With the subscription recorded at its last load.
    pub fn with_record(mut self, record: Option<Subscription>) -> Self {
        self.expected = record;
        self
    }

    /// With what its component declares.
    pub fn with_declared(mut self, declared: Option<Subscription>) -> Self {
        self.declared = declared;
        self
    }

    /// Why it did not run, for errors and reports.
    pub fn reason(&self) -> String {
        format!("not ready yet: compiling/loading (started {} ms ago)", self.since.elapsed().as_millis())
    }

    /// What it is expected to subscribe to: the record of its last load
    /// (the exact answer of this file with these settings), narrowed by
    /// its declaration; else its declaration (an upper bound); `None` when
    /// neither is known.
    pub fn subscription(&self) -> Option<Subscription> {
        match (self.expected, self.declared) {
            (Some(record), Some(declared)) => Some(record.within(declared)),
            (Some(known), None) | (None, Some(known)) => Some(known),
            (None, None) => None,
        }
    }

    /// Whether it would see `event` (an event kind's name, or
    /// `Synchronize`): what it is expected to subscribe to, or, when
    /// nothing is known, CreateContainer only (the event every policy
    /// checks and a mandatory one must be able to refuse).
    pub fn sees(&self, event: &str) -> bool {
        let Some(expected) = self.subscription() else { return event == EventKind::CreateContainer.name() };
        if event == "Synchronize" {
            return expected.synchronize;
        }
        expected
            .events
            .iter()
            .any(|k| k.name() == event || (event == "CreateContainer" && k == EventKind::ValidateContainerAdjustment))
    }

    /// Whether, while it loads, it refuses `event`: it is mandatory, would
    /// see the event, and the event is one of [`REFUSED_WHILE_LOADING`].
    pub fn refuses(&self, event: &str) -> bool {
        self.mandatory && self.sees(event) && REFUSED_WHILE_LOADING.iter().any(|k| k.name() == event)
    }

    /// Whether an event it would see still waits for it: until one event
    /// has waited for it in vain (the start-up contract, `dispatcher.rs`).
    pub fn awaited(&self) -> bool {
        !self.waited_in_vain.load(Ordering::Relaxed)
    }

    /// An event waited for it in vain: later events do not wait for it.
    pub fn waited_in_vain(&self) {
        self.waited_in_vain.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod pending_tests {
    use super::*;
    use EventKind::*;

    fn sub(events: &[EventKind], synchronize: bool, node: bool) -> Subscription {
        Subscription { events: events.iter().copied().collect(), synchronize, node }
    }

    fn loading(name: &str, mandatory: bool) -> Pending {
        Pending::new(name, mandatory, Instant::now())
    }

    #[test]
    fn a_policy_still_loading_sees_what_it_declares_and_with_nothing_known_creates_only() {
        let unknown = loading("10-u", true);
        assert_eq!(unknown.subscription(), None);
        for event in ["StopContainer", "RemoveContainer", "RunPodSandbox", "Synchronize", "PostCreateContainer"] {
            assert!(!unknown.sees(event), "{event}");
        }
        assert!(unknown.sees("CreateContainer") && unknown.refuses("CreateContainer"));

        let declared = loading("20-d", true).with_declared(Some(sub(&[CreateContainer, StopContainer], true, false)));
        assert!(declared.sees("CreateContainer") && declared.sees("StopContainer") && declared.sees("Synchronize"));
        assert!(!declared.sees("RemoveContainer") && !declared.sees("StartContainer"));
        // Mandatory: refuses what keeps something from happening, never a
        // teardown or Synchronize.
        assert!(declared.refuses("CreateContainer"));
        assert!(!declared.refuses("StopContainer") && !declared.refuses("Synchronize"));
        let ignored = loading("30-i", false).with_declared(declared.declared);
        assert!(ignored.sees("CreateContainer") && !ignored.refuses("CreateContainer"));

        // A record is exact, but cannot widen the declaration.
        let recorded = loading("40-r", true)
            .with_declared(Some(sub(&[CreateContainer, StopContainer], false, true)))
            .with_record(Some(sub(&[CreateContainer, RemoveContainer], true, true)));
        assert_eq!(recorded.subscription(), Some(sub(&[CreateContainer], false, true)));
        let record_only = loading("50-r", true).with_record(Some(sub(&[StartContainer], false, false)));
        assert!(record_only.sees("StartContainer") && record_only.refuses("StartContainer"));
        assert!(!record_only.sees("CreateContainer"), "known to see no create: a create does not fail for it");

        // Validation runs inside CreateContainer.
        let validator = loading("60-v", true).with_declared(Some(sub(&[ValidateContainerAdjustment], false, false)));
        assert!(validator.sees("CreateContainer") && validator.refuses("CreateContainer"));

        for kind in EventKind::ALL {
            let all = loading("70-a", true).with_declared(Some(sub(&EventKind::ALL, true, false)));
            assert_eq!(all.refuses(kind.name()), REFUSED_WHILE_LOADING.contains(&kind), "{kind}");
        }
    }

    #[test]
    fn the_chain_expects_what_its_policies_still_loading_may_see() {
        let declared = loading("10-d", true).with_declared(Some(sub(&[CreateContainer], false, false)));
        let recorded = loading("20-r", false).with_record(Some(sub(&[StartContainer], true, true)));
        let unknown = loading("30-u", false);
        let chain = Chain::default().with_pending(vec![declared.clone(), recorded.clone()]);
        assert!(chain.subscription_known());
        assert_eq!(chain.expected_events(), sub(&[CreateContainer, StartContainer], false, false).events);
        assert!(chain.wants(CreateContainer) && chain.wants(StartContainer) && chain.wants_synchronize());
        assert!(!chain.wants(StopContainer) && !chain.wants(RemovePodSandbox));
        assert!(chain.reads_node() && chain.keeps_view());
        let chain = Chain::default().with_pending(vec![declared.clone(), unknown]);
        assert!(!chain.subscription_known());
        assert!(!chain.reads_node() && chain.keeps_view(), "what is not known may read the view once loaded");
        assert!(chain.wants(CreateContainer) && !chain.wants(StopContainer) && !chain.wants_synchronize());

        // Waited for in vain once, in any copy: no event waits again.
        let chain = Chain::default().with_pending(vec![declared.clone()]);
        assert_eq!(chain.awaited("CreateContainer").count(), 1);
        declared.waited_in_vain();
        assert_eq!(chain.awaited("CreateContainer").count(), 0);
        assert_eq!(chain.not_ready("CreateContainer").count(), 1, "still not ready: refused or skipped");
    }
}

/// The loaded policies, in order. Immutable once built; reloads build a new one.
#[derive(Debug)]
pub struct Chain {
    entries: Vec<ChainEntry>,
    /// Policies that failed to load.
    unloadable: Vec<Unloadable>,
    /// Policies still loading.
    pending: Vec<Pending>,
    /// Union of the policies' subscriptions (the chain is immutable).
    events: EventMask,
    /// Some policy subscribed to `synchronize`.
    synchronize: bool,
    settings: ChainSettings,
    /// What the breakers read the time from ([`Chain::with_clock`]).
    clock: Arc<dyn Clock>,
}

impl Default for Chain {
    fn default() -> Self {
        Self::of(Vec::new(), ChainSettings::default())
    }
}

/// Everything an evaluation needs besides the request.
#[derive(Clone)]
pub struct EvalContext {
    /// The engine that runs the policies' calls.
    pub engine: Arc<PolicyEngine>,
    /// Facts, node view and state the policies read.
    pub env: CallEnv,
    /// When the chain's time is up; each policy's allowance is cut from what is left.
    pub deadline: Instant,
    /// Keep each policy's change in its step (for `eval` and the demo).
    pub explain: bool,
    /// What the merge may take as the node's containers: the view, when the
    /// host keeps it complete; otherwise nothing (existence unchecked).
    pub known: crate::merge::Known,
    /// Told of every step (see [`Observer`]).
    pub observer: Option<Arc<dyn Observer>>,
    /// What the event waited for before its chain started, out of its
    /// budget: said when a policy is skipped for want of time.
    pub waits: Waits,
}

/// The time an event spent, out of its chain's budget, before the chain
/// started (`dispatcher.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waits {
    /// For policies still loading.
    pub loading: Duration,
    /// For a call slot (`max-concurrent-calls`).
    pub slot: Duration,
}

impl std::fmt::Debug for EvalContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvalContext").field("deadline", &self.deadline).finish_non_exhaustive()
    }
}

impl EvalContext {
    /// A context ending at `deadline`, keeping no changes, knowing no containers.
    pub fn new(engine: Arc<PolicyEngine>, env: CallEnv, deadline: Instant) -> Self {
        Self {
            engine,
            env,
            deadline,
            explain: false,
            known: Arc::new(crate::merge::Unknown),
            observer: None,
            waits: Waits::default(),
        }
    }

    /// Keeps each policy's change in its step, for a report to describe.
    pub fn explaining(mut self) -> Self {
        self.explain = true;
        self
    }

    /// Tells `observer` of every step.
    pub fn observed_by(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Refuses updates and evictions of containers the view does not have
    /// (use only when the host keeps the view complete).
    pub fn knowing_view(mut self) -> Self {
        self.known = self.env.view.clone();
        self
    }
}

/// What an evaluation leaves to be done once the event has succeeded.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Effects {
    /// State written by policies whose replies were applied, in chain order.
    pub writes: Vec<(String, StateWrites)>,
    /// Updates no reply of this event can carry: for UpdateContainers.
    pub update: Vec<pb::ContainerUpdate>,
    /// Evictions no reply of this event can carry: for UpdateContainers.
    pub evict: Vec<pb::ContainerEviction>,
}

impl Effects {
    /// Whether nothing is left to be done.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.update.is_empty() && self.evict.is_empty()
    }
}

/// The answer of the chain for one event.
#[derive(Debug)]
pub struct Evaluated<T> {
    /// What goes back to the runtime.
    pub value: T,
    /// What each policy did.
    pub steps: Vec<Step>,
    /// What is due once the answer is given.
    pub effects: Effects,
}

impl Chain {
    /// A chain of `policies`, in the order given.
    pub fn new(policies: Vec<CompiledPolicy>, settings: ChainSettings) -> Self {
        Self::of(policies.into_iter().map(Arc::new).collect(), settings)
    }

    /// A chain of shared policies (a reload keeps the unchanged ones), on
    /// the [`SystemClock`].
    pub fn of(policies: Vec<Arc<CompiledPolicy>>, settings: ChainSettings) -> Self {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let entries: Vec<ChainEntry> = policies
            .into_iter()
            .map(|policy| ChainEntry { policy, breaker: Arc::default(), clock: clock.clone() })
            .collect();
        let events =
            entries.iter().fold(EventMask::EMPTY, |m, e| EventMask::from_bits(m.bits() | e.policy.events().bits()));
        let synchronize = entries.iter().any(|e| e.policy.wants_synchronize());
        Self { entries, unloadable: Vec::new(), pending: Vec::new(), events, synchronize, settings, clock }
    }

    /// The same chain with its breakers on `clock` (a [`ManualClock`] in
    /// tests of quarantine and back-off). Only the breakers read it: time
    /// limits and the chain's budget stay on the real clock.
    #[cfg(any(test, feature = "testing"))]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        for entry in &mut self.entries {
            entry.clock = clock.clone();
        }
        self.clock = clock;
        self
    }

    /// The same chain as the successor of `previous`, which it is about to
    /// replace: each policy that is the same as one of `previous` (the same
    /// name, component and spec; only where it came from may differ) keeps
    /// that one's failure history, so that a reload, which may be about
    /// another policy altogether, does not let a quarantined policy out
    /// early nor reset its count. A new or changed policy starts afresh.
    /// The breakers keep reading `previous`'s clock.
    pub fn after(mut self, previous: &Chain) -> Self {
        for entry in &mut self.entries {
            if let Some(old) = previous.entries.iter().find(|old| same_policy(&old.policy, &entry.policy)) {
                entry.breaker = old.breaker.clone();
            }
            entry.clock = previous.clock.clone();
        }
        self.clock = previous.clock.clone();
        self
    }

    /// The clock the breakers read.
    #[cfg(test)]
    pub(crate) fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    /// Adds the policies still loading; see [`Chain::pending`].
    pub fn with_pending(mut self, pending: Vec<Pending>) -> Self {
        self.pending = pending;
        self
    }

    /// Policies still loading.
    pub fn pending(&self) -> &[Pending] {
        &self.pending
    }

    /// The policies still loading that would see `event` (see [`Pending::sees`]).
    pub fn not_ready<'a>(&'a self, event: &'a str) -> impl Iterator<Item = &'a Pending> + 'a {
        self.pending.iter().filter(move |p| p.sees(event))
    }

    /// The policies still loading that an `event` waits for: those that
    /// would see it and that no earlier event waited for in vain (see
    /// [`Pending::awaited`]).
    pub fn awaited<'a>(&'a self, event: &'a str) -> impl Iterator<Item = &'a Pending> + 'a {
        self.not_ready(event).filter(|p| p.awaited())
    }

    /// Whether the subscription of every policy is known: each is loaded,
    /// failed, declares its events or has a record of its last load.
    pub fn subscription_known(&self) -> bool {
        self.pending.iter().all(|p| p.subscription().is_some())
    }

    /// What the policies still loading are expected to subscribe to
    /// ([`Pending::subscription`]).
    pub fn expected_events(&self) -> EventMask {
        self.pending
            .iter()
            .filter_map(Pending::subscription)
            .fold(EventMask::EMPTY, |m, e| EventMask::from_bits(m.bits() | e.events.bits()))
    }

    /// Adds the policies that failed to load; see [`Chain::unloadable`].
    pub fn with_unloadable(mut self, failed: Vec<Unloadable>) -> Self {
        self.unloadable = failed;
        self
    }

    /// Policies that are not loaded, with the reason.
    pub fn unloadable(&self) -> &[Unloadable] {
        &self.unloadable
    }

    /// A mandatory policy that failed to load: it fails container
    /// creation. Its name, and why. (One still loading refuses what it
    /// would see: [`Pending::refuses`].)
    fn mandatory_missing(&self) -> Option<(String, String)> {
        self.unloadable.iter().find(|u| u.mandatory).map(|u| (u.name.clone(), u.reason.clone()))
    }

    /// How many policies are loaded.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no policy is loaded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The chain-wide settings it was built with.
    pub fn settings(&self) -> &ChainSettings {
        &self.settings
    }

    /// The loaded policies with their breakers, in order.
    pub fn entries(&self) -> &[ChainEntry] {
        &self.entries
    }

    /// The loaded policies, in order.
    pub fn policies(&self) -> impl Iterator<Item = &CompiledPolicy> {
        self.entries.iter().map(|e| &*e.policy)
    }

    /// Whether any policy wants `kind` (validation counts for creation, and
    /// mandatory policies that failed to load count for creation).
    pub fn wants(&self, kind: EventKind) -> bool {
        let events = self.events();
        events.contains(kind)
            || self.not_ready(kind.name()).next().is_some()
            || kind == EventKind::CreateContainer
                && (events.contains(EventKind::ValidateContainerAdjustment) || self.mandatory_missing().is_some())
    }

    /// Union of the policies' subscriptions.
    pub fn events(&self) -> EventMask {
        self.events
    }

    /// Whether some policy subscribed to `synchronize`.
    pub fn wants_synchronize(&self) -> bool {
        self.synchronize || self.not_ready("Synchronize").next().is_some()
    }

    /// Whether some policy reads the node view (or, still loading, is
    /// expected to: by its record or its declaration): imports it and may
    /// call it ([`CompiledPolicy::reads_node`]).
    pub fn reads_node(&self) -> bool {
        self.entries.iter().any(|e| e.policy.reads_node())
            || self.pending.iter().any(|p| p.subscription().is_some_and(|e| e.node))
    }

    /// Whether the node view must be kept: some policy reads it, or a
    /// policy still loading, of which nothing is known (no declaration, no
    /// record), may read it once ready. A first start can register before
    /// such a policy is loaded; the view built from that Synchronize is
    /// what it sees. (A policy that updates other containers is held to
    /// their cpuset and swap as the view has them; in a chain that keeps
    /// none, they are unknown, and a cpuset or a swap-raising limit of
    /// theirs needs `cpuset-any` or `swap-raise`.)
    pub fn keeps_view(&self) -> bool {
        self.reads_node() || self.pending.iter().any(|p| p.subscription().is_none())
    }

    fn subscribed(&self, kind: EventKind) -> impl Iterator<Item = &ChainEntry> {
        self.entries.iter().filter(move |e| e.policy.events().contains(kind))
    }

    /// Records a failure in the breaker and passes it on.
    fn failed(&self, entry: &ChainEntry, failure: PolicyFailure) -> PolicyFailure {
        let mut b = entry.breaker();
        let base = Duration::from_millis(self.settings.breaker_backoff_ms);
        if let Some(backoff) = b.fail(self.clock.now(), self.settings.breaker_failures, base) {
            tracing::warn!(
                policy = entry.policy.name(),
                failures = b.failures,
                quarantines = b.trips,
                backoff_ms = backoff.as_millis() as u64,
                last = %failure,
                "policy quarantined"
            );
        }
        failure
    }

    fn succeeded(&self, entry: &ChainEntry) {
        entry.breaker().succeed();
    }
}

/// Whether `a` and `b` are the same policy for its failure history: one
/// compiled form, or the same name, component and spec but for where the
/// component came from (a tag that moved to a copy of what runs).
fn same_policy(a: &Arc<CompiledPolicy>, b: &Arc<CompiledPolicy>) -> bool {
    if Arc::ptr_eq(a, b) {
        return true;
    }
    let spec = |p: &CompiledPolicy| PolicySpec { provenance: None, ..p.spec.clone() };
    a.name() == b.name() && a.digest() == b.digest() && spec(a) == spec(b)
}

/// How errors and logs name a container: id, then namespace/pod/container.
pub fn container_target(pod: &pb::PodSandbox, ctr: &pb::Container) -> String {
    format!("container {} ({}/{}/{})", ctr.id, pod.namespace, pod.name, ctr.name)
}

/// How errors and logs name a pod: id, then namespace/name.
pub fn pod_target(pod: &pb::PodSandbox) -> String {
    format!("pod {} ({}/{})", pod.id, pod.namespace, pod.name)
}

/// Whether a policy runs in audit mode.
fn audited(entry: &ChainEntry) -> bool {
    entry.policy.spec.mode == Mode::Audit
}

/// Whether a policy's failures are ignored (`on-error = "ignore"`, or audit).
fn ignores_failures(entry: &ChainEntry) -> bool {
    entry.policy.spec.on_error == OnError::Ignore || audited(entry)
}

#[cfg(test)]
mod budget_tests {
    use super::*;
    use crate::nri::service::answer_budget;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    /// The chain's budget, grace included, ends before the transport's
    /// backstop at every allowed fraction and any request timeout; only
    /// what would cross it is cut, and the cut is said once, naming the
    /// setting.
    #[test]
    fn the_chain_budget_always_ends_before_the_transport_backstop() {
        for fraction in [0.1, 0.5, 0.8, 0.85, 0.9] {
            let settings = ChainSettings { budget_fraction: fraction, ..ChainSettings::default() };
            settings.validate().unwrap();
            for t in [10, 50, 100, 150, 200, 250, 500, 1000, 2000, 2500, 4000, 10_000, 60_000] {
                let budget = settings.budget(ms(t));
                assert!(
                    budget + BACKSTOP_RESERVE <= answer_budget(ms(t)) || budget.is_zero(),
                    "fraction {fraction}, timeout {t} ms: budget {budget:?}"
                );
                assert!(budget <= ms(t).mul_f64(fraction));
                assert_eq!(settings.budget_cut(ms(t)).is_some(), budget < ms(t).mul_f64(fraction));
            }
        }
        let default = ChainSettings::default();
        assert_eq!(default.budget(ms(2000)), ms(1000), "the default is not cut");
        assert_eq!(default.budget_cut(ms(2000)), None);
        let most = ChainSettings { budget_fraction: 0.9, ..ChainSettings::default() };
        // 2 s: the transport answers within 1,800 ms; the chain gets 1,770.
        assert_eq!(most.budget(ms(2000)), ms(1770));
        let said = most.budget_cut(ms(2000)).unwrap();
        assert!(
            said.contains("budget-fraction = 0.9") && said.contains("1800 ms") && said.contains("1770 ms"),
            "{said}"
        );
        // 10 s: far from the backstop, as asked.
        assert_eq!(most.budget(ms(10_000)), ms(9000));
    }
}
