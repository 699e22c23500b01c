//! The ordered chain of policies for one event.
//!
//! Policies run in file-name order and each sees the pod and container as the
//! policies before it left them, exactly as NRI runs its plugins. What each
//! one returns is merged with the runtime's own rules (`crate::merge`). A
//! policy that fails (trap, limit, invalid output, merge conflict, no time
//! left, quarantined) is handled by its `on-error`: `ignore` drops its output
//! and goes on, `fail` fails the event. `mode = "audit"` evaluates and
//! reports but changes and denies nothing. A circuit breaker quarantines a
//! policy after repeated consecutive failures so that a broken policy does
//! not cost every event its full time limit.
//!
//! Evaluation is synchronous and runs on a blocking thread (see
//! `dispatcher.rs`); every call gets at most the time left until the chain's
//! deadline, so the chain as a whole ends inside its budget.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nri_wasm_api::api as pb;
use serde::Deserialize;

use super::bindings::wit;
use super::engine::{CallEnv, CallError, CompiledPolicy, LoadError, PolicyEngine};
use super::event::CallEvent;
use super::manifest::{Mode, OnError, PolicySpec};
use super::state::StateWrites;
use crate::merge::{self, CreateMerge, MergeError, StopMerge, UpdateMerge, UpdatesMerge};
use crate::node::view::{container_entry, overlay_resources, ContainerEntry};
use crate::nri::version::{EventKind, EventMask};

/// Largest reply one policy may give, encoded as the runtime would receive
/// it: NRI's transport carries at most 4 MiB per message.
pub const MAX_REPLY_BYTES: usize = 1 << 20;
/// Largest sum of the replies merged for one event.
pub const MAX_TOTAL_REPLY_BYTES: usize = 3 << 20;

/// Chain-wide settings (the `[chain]` table of the host configuration).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
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
    pub fn validate(&self) -> Result<(), String> {
        if !(self.budget_fraction > 0.0 && self.budget_fraction <= 0.9) {
            return Err(format!("[chain] budget-fraction {} must be in (0, 0.9]", self.budget_fraction));
        }
        if self.breaker_failures == 0 {
            return Err("[chain] breaker-failures must be positive".into());
        }
        Ok(())
    }

    /// The chain's time budget for a runtime request timeout.
    pub fn budget(&self, request_timeout: Duration) -> Duration {
        request_timeout.mul_f64(self.budget_fraction)
    }
}

/// Why a policy produced no usable output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyFailure {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("policy {policy} on {event}: invalid output: {reason}")]
    InvalidOutput { policy: String, event: String, reason: String },
    #[error("policy {policy} on {event}: {conflict}")]
    Conflict { policy: String, event: String, conflict: MergeError },
    #[error("policy {policy} on {event}: skipped, chain deadline reached")]
    Skipped { policy: String, event: String },
    #[error("policy {policy} on {event}: quarantined after {failures} consecutive failures")]
    Quarantined { policy: String, event: String, failures: u32 },
    #[error("policy {policy} on {event}: not loaded: {reason}")]
    NotLoaded { policy: String, event: String, reason: String },
}

/// How the chain ended for an event, when it did not answer normally.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// A policy in enforce mode denied the event.
    #[error("policy {policy} denied {event} of {target}: {reason}")]
    Denied { policy: String, event: String, target: String, reason: String },
    /// A policy with `on-error = "fail"` failed.
    #[error("{failure} ({target}; on-error = fail)")]
    Failed { target: String, failure: Box<PolicyFailure> },
}

/// What one policy did for one event, for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Applied {
        policy: String,
        fuel: u64,
        elapsed: Duration,
    },
    Denied {
        policy: String,
        reason: String,
        audit: bool,
    },
    /// An audited policy's reply, checked and merged into a copy only:
    /// `would` is what it would have changed (JSON of the adjustment,
    /// updates and evictions; empty if nothing).
    AuditOnly {
        policy: String,
        fuel: u64,
        would: String,
    },
    Failed {
        failure: PolicyFailure,
        ignored: bool,
    },
}

#[derive(Debug, Default)]
struct Breaker {
    failures: u32,
    open_until: Option<Instant>,
}

/// One policy in the chain, with its failure history.
#[derive(Debug)]
pub struct ChainEntry {
    pub policy: CompiledPolicy,
    breaker: Mutex<Breaker>,
}

/// The loaded policies, in order. Immutable once built; reloads build a new one.
#[derive(Debug, Default)]
pub struct Chain {
    entries: Vec<ChainEntry>,
    /// Policies that failed to load with `on-error = "fail"`: they fail every
    /// CreateContainer (no container is created without a policy the
    /// operator declared mandatory). Those with `ignore` are only reported.
    unloadable: Vec<(String, String)>,
    /// Union of the policies' subscriptions (the chain is immutable).
    events: EventMask,
    /// Some policy subscribed to `synchronize`.
    synchronize: bool,
    settings: ChainSettings,
}

/// Everything an evaluation needs besides the request.
#[derive(Debug, Clone)]
pub struct EvalContext {
    pub engine: Arc<PolicyEngine>,
    /// Facts, node view and state the policies read.
    pub env: CallEnv,
    pub deadline: Instant,
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

/// The running state of one evaluation: its target, steps, effects, reply budget.
#[derive(Debug)]
struct Run<'t> {
    /// How errors name what the event is about.
    target: &'t str,
    steps: Vec<Step>,
    effects: Effects,
    /// Bytes of replies merged so far.
    total: usize,
}

impl<'t> Run<'t> {
    fn new(target: &'t str) -> Self {
        Self { target, steps: Vec::new(), effects: Effects::default(), total: 0 }
    }

    fn done<T>(self, value: T) -> Evaluated<T> {
        Evaluated { value, steps: self.steps, effects: self.effects }
    }
}

/// A policy's answered call: the reply and what came with it.
struct Answer {
    reply: wit::Reply,
    fuel: u64,
    elapsed: Duration,
    writes: Option<StateWrites>,
}

impl Chain {
    pub fn new(policies: Vec<CompiledPolicy>, settings: ChainSettings) -> Self {
        let entries: Vec<ChainEntry> =
            policies.into_iter().map(|policy| ChainEntry { policy, breaker: Mutex::default() }).collect();
        let events = policies_events(&entries);
        let synchronize = entries.iter().any(|e| e.policy.wants_synchronize());
        Self { entries, unloadable: Vec::new(), events, synchronize, settings }
    }

    /// Adds the policies that failed to load; see [`Chain::unloadable`].
    pub fn with_unloadable(mut self, failed: Vec<(PolicySpec, LoadError)>) -> Self {
        self.unloadable = failed
            .into_iter()
            .filter(|(spec, _)| spec.on_error == OnError::Fail && spec.mode == Mode::Enforce)
            .map(|(spec, e)| (spec.name, e.to_string()))
            .collect();
        self
    }

    /// Mandatory policies that are not loaded, with the reason.
    pub fn unloadable(&self) -> &[(String, String)] {
        &self.unloadable
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn settings(&self) -> &ChainSettings {
        &self.settings
    }

    pub fn policies(&self) -> impl Iterator<Item = &CompiledPolicy> {
        self.entries.iter().map(|e| &e.policy)
    }

    /// Whether any policy wants `kind` (validation counts for creation, and
    /// mandatory policies that failed to load count for creation).
    pub fn wants(&self, kind: EventKind) -> bool {
        let events = self.events();
        events.contains(kind)
            || kind == EventKind::CreateContainer
                && (events.contains(EventKind::ValidateContainerAdjustment) || !self.unloadable.is_empty())
    }

    /// Union of the policies' subscriptions.
    pub fn events(&self) -> EventMask {
        self.events
    }

    fn subscribed(&self, kind: EventKind) -> impl Iterator<Item = &ChainEntry> {
        self.entries.iter().filter(move |e| e.policy.events().contains(kind))
    }

    /// Whether some policy subscribed to `synchronize`.
    pub fn wants_synchronize(&self) -> bool {
        self.synchronize
    }

    /// Calls one policy, or explains why not; updates its breaker. The
    /// event is dropped when the call returns, so that the merge can then
    /// change the parts it shares with it in place.
    fn call(
        &self,
        entry: &ChainEntry,
        cx: &EvalContext,
        event: CallEvent,
        current: Option<&Arc<ContainerEntry>>,
    ) -> Result<Result<Answer, String>, PolicyFailure> {
        let policy = entry.policy.name().to_string();
        let name = event.name().to_string();
        let now = Instant::now();
        {
            let mut b = entry.breaker.lock().expect("breaker lock");
            if let Some(until) = b.open_until {
                if now < until {
                    return Err(PolicyFailure::Quarantined { policy, event: name, failures: b.failures });
                }
                b.open_until = None;
            }
        }
        let left = cx.deadline.saturating_duration_since(now);
        if left < Duration::from_millis(self.settings.min_call_ms) {
            return Err(PolicyFailure::Skipped { policy, event: name });
        }
        let report = cx.engine.call(&entry.policy, event, &cx.env, current, left);
        match report.outcome {
            Ok(Ok(reply)) => {
                Ok(Ok(Answer { reply, fuel: report.fuel_used, elapsed: report.elapsed, writes: report.writes }))
            }
            Ok(Err(reason)) => Ok(Err(reason)),
            Err(e) => Err(self.failed(entry, e.into())),
        }
    }

    /// Records a failure in the breaker and passes it on.
    fn failed(&self, entry: &ChainEntry, failure: PolicyFailure) -> PolicyFailure {
        let mut b = entry.breaker.lock().expect("breaker lock");
        b.failures += 1;
        if b.failures >= self.settings.breaker_failures && b.open_until.is_none() {
            b.open_until = Some(Instant::now() + Duration::from_millis(self.settings.breaker_backoff_ms));
            tracing::warn!(
                policy = entry.policy.name(),
                failures = b.failures,
                backoff_ms = self.settings.breaker_backoff_ms,
                last = %failure,
                "policy quarantined"
            );
        }
        failure
    }

    fn succeeded(&self, entry: &ChainEntry) {
        let mut b = entry.breaker.lock().expect("breaker lock");
        b.failures = 0;
        b.open_until = None;
    }

    /// Applies `on-error` to a failure: `Ok` to go on, `Err` to fail the event.
    /// A policy in audit mode fails nothing, whatever its `on-error`.
    fn on_failure(entry: &ChainEntry, failure: PolicyFailure, run: &mut Run<'_>) -> Result<(), ChainError> {
        let audit = entry.policy.spec.mode == Mode::Audit;
        let ignored = entry.policy.spec.on_error == OnError::Ignore || audit;
        tracing::warn!(error = %failure, target = run.target, ignored, audit, "policy failed");
        run.steps.push(Step::Failed { failure: failure.clone(), ignored });
        if ignored {
            Ok(())
        } else {
            Err(ChainError::Failed { target: run.target.to_string(), failure: Box::new(failure) })
        }
    }

    fn deny(&self, entry: &ChainEntry, event: &str, reason: String, run: &mut Run<'_>) -> Result<(), ChainError> {
        let target = run.target;
        let policy = entry.policy.name().to_string();
        let audit = entry.policy.spec.mode == Mode::Audit;
        tracing::info!(policy, event, target, reason, audit, "policy denies");
        run.steps.push(Step::Denied { policy: policy.clone(), reason: reason.clone(), audit });
        if audit {
            Ok(())
        } else {
            Err(ChainError::Denied { policy, event: event.into(), target: target.into(), reason })
        }
    }

    /// Runs one policy; `apply` converts, validates and merges its reply
    /// (transactionally) and says whether it changed what later policies
    /// see. Handles denial, audit, failure, and keeps the state it wrote.
    /// Returns whether the reply was applied and changed something.
    fn run_one<F>(
        &self,
        entry: &ChainEntry,
        cx: &EvalContext,
        event: CallEvent,
        current: Option<&Arc<ContainerEntry>>,
        run: &mut Run<'_>,
        apply: F,
    ) -> Result<bool, ChainError>
    where
        F: FnOnce(&str, wit::Reply, bool, &mut Run<'_>) -> Result<bool, PolicyFailure>,
    {
        let name = event.name();
        let policy = entry.policy.name().to_string();
        let audit = entry.policy.spec.mode == Mode::Audit;
        match self.call(entry, cx, event, current) {
            Err(f) => Self::on_failure(entry, f, run).map(|()| false),
            Ok(Err(reason)) => {
                self.succeeded(entry);
                self.deny(entry, name, reason, run).map(|()| false)
            }
            Ok(Ok(Answer { reply, fuel, elapsed, writes })) => {
                let would = audit.then(|| would_change(&reply));
                match apply(&policy, reply, audit, run) {
                    Ok(changed) => {
                        self.succeeded(entry);
                        if let Some(would) = would {
                            tracing::info!(
                                policy,
                                event = name,
                                target = run.target,
                                would,
                                "audit: would have changed"
                            );
                            run.steps.push(Step::AuditOnly { policy, fuel, would });
                            return Ok(false);
                        }
                        if let Some(w) = writes {
                            run.effects.writes.push((policy.clone(), w));
                        }
                        run.steps.push(Step::Applied { policy, fuel, elapsed });
                        Ok(changed)
                    }
                    Err(f) => {
                        let f = self.failed(entry, f);
                        Self::on_failure(entry, f, run).map(|()| false)
                    }
                }
            }
        }
    }

    /// Runs the chain for an event whose reply to the runtime carries
    /// nothing (pod events, post-events, start, remove, pod updates).
    /// Policies may deny it, and may update or evict other containers: those
    /// go to the runtime with UpdateContainers once the event is answered.
    /// `event` is built only if some policy subscribed to `kind`.
    pub fn notify(
        &self,
        cx: &EvalContext,
        kind: EventKind,
        event: impl FnOnce() -> CallEvent,
        target: &str,
    ) -> Result<Evaluated<()>, ChainError> {
        let mut run = Run::new(target);
        if !self.events.contains(kind) {
            return Ok(run.done(()));
        }
        let event = event();
        let mut merge = UpdatesMerge::new();
        for entry in self.subscribed(kind) {
            self.run_one(entry, cx, event.clone(), None, &mut run, |policy, reply, audit, run| {
                if reply.adjust.is_some() {
                    return Err(invalid(policy, kind.name(), format!("{kind} allows no adjustment")));
                }
                merge_updates(&mut merge, policy, kind.name(), reply, audit, &mut run.total).map(|_| false)
            })?;
        }
        let (update, evict) = merge.finish();
        run.effects.update = update;
        run.effects.evict = evict;
        Ok(run.done(()))
    }

    /// Synchronize: the node view was rebuilt from what the runtime reported.
    /// Policies subscribed to `synchronize` reconcile their state; their
    /// updates go into the Synchronize reply, their evictions out with
    /// UpdateContainers.
    pub fn synchronize(&self, cx: &EvalContext) -> Result<Evaluated<Vec<pb::ContainerUpdate>>, ChainError> {
        let mut run = Run::new("the node");
        let mut merge = UpdatesMerge::new();
        let event = CallEvent::synchronize();
        for entry in self.entries.iter().filter(|e| e.policy.wants_synchronize()) {
            self.run_one(entry, cx, event.clone(), None, &mut run, |policy, reply, audit, run| {
                if reply.adjust.is_some() {
                    return Err(invalid(policy, "Synchronize", "Synchronize allows no adjustment"));
                }
                merge_updates(&mut merge, policy, "Synchronize", reply, audit, &mut run.total).map(|_| false)
            })?;
        }
        let (update, evict) = merge.finish();
        run.effects.evict = evict;
        Ok(run.done(update))
    }

    /// CreateContainer: adjust the new container, update others, evict; then
    /// the policy-level validation of the merged result.
    pub fn create_container(
        &self,
        cx: &EvalContext,
        req: &pb::CreateContainerRequest,
    ) -> Result<Evaluated<pb::CreateContainerResponse>, ChainError> {
        let kind = EventKind::CreateContainer;
        let target = container_target(&req.pod, &req.container);
        if let Some((policy, reason)) = self.unloadable.first() {
            let failure =
                PolicyFailure::NotLoaded { policy: policy.clone(), event: kind.name().into(), reason: reason.clone() };
            return Err(ChainError::Failed { target, failure: Box::new(failure) });
        }
        let mut run = Run::new(&target);
        if !self.wants(kind) {
            return Ok(run.done(pb::CreateContainerResponse::default()));
        }
        let mut merge = CreateMerge::new(req);
        let mut pod: Option<Arc<pb::PodSandbox>> = None;
        let mut current: Option<Arc<ContainerEntry>> = None;
        for entry in self.subscribed(kind) {
            let pod = pod.get_or_insert_with(|| Arc::new((*req.pod).clone()));
            if entry.policy.imports().node && current.is_none() {
                current = Some(Arc::new(container_entry(merge.container())));
            }
            // Each policy reads the container as the ones before it left it:
            // the merge's own copy, shared for the length of the call.
            let event =
                CallEvent::container(wit::EventKind::CreateContainer, pod.clone(), merge.shared_container().clone());
            let changed = self.run_one(entry, cx, event, current.as_ref(), &mut run, |policy, reply, audit, run| {
                let resp = reply_to_create(policy, kind, reply)?;
                bounded(policy, kind, &resp, &mut run.total, audit)?;
                fold(&mut merge, audit, |m| m.apply(policy, &resp)).map_err(|e| conflict(policy, kind, e))?;
                Ok(resp.adjust.is_some())
            })?;
            if changed {
                current = None;
            }
        }
        let owners = merge.owners();
        let response = merge.finish();
        self.validate(cx, req, &response, owners, &mut run)?;
        Ok(run.done(response))
    }

    fn validate(
        &self,
        cx: &EvalContext,
        req: &pb::CreateContainerRequest,
        response: &pb::CreateContainerResponse,
        owners: pb::OwningPlugins,
        run: &mut Run<'_>,
    ) -> Result<(), ChainError> {
        let kind = EventKind::ValidateContainerAdjustment;
        if self.subscribed(kind).next().is_none() {
            return Ok(());
        }
        let vreq = pb::ValidateContainerAdjustmentRequest {
            pod: req.pod.clone(),
            container: req.container.clone(),
            adjust: response.adjust.clone(),
            update: response.update.clone(),
            owners: protobuf::MessageField::some(owners),
            ..Default::default()
        };
        let event = CallEvent::validation(vreq);
        for entry in self.subscribed(kind) {
            self.run_one(entry, cx, event.clone(), None, run, |policy, reply, _, _| {
                if reply.adjust.is_some() || !reply.update.is_empty() || !reply.evict.is_empty() {
                    return Err(invalid(
                        policy,
                        kind.name(),
                        format!("{kind} allows no adjustments, updates or evictions"),
                    ));
                }
                Ok(false)
            })?;
        }
        Ok(())
    }

    /// UpdateContainer: updates (of this and other containers) and evictions.
    pub fn update_container(
        &self,
        cx: &EvalContext,
        req: &pb::UpdateContainerRequest,
    ) -> Result<Evaluated<pb::UpdateContainerResponse>, ChainError> {
        let kind = EventKind::UpdateContainer;
        let target = container_target(&req.pod, &req.container);
        let mut run = Run::new(&target);
        if !self.wants(kind) {
            return Ok(run.done(pb::UpdateContainerResponse::default()));
        }
        let pod = Arc::new((*req.pod).clone());
        let container = Arc::new((*req.container).clone());
        let mut merge = UpdateMerge::new(req);
        for entry in self.subscribed(kind) {
            let current = entry.policy.imports().node.then(|| {
                let mut c = cx
                    .env
                    .view
                    .container(&req.container.id)
                    .cloned()
                    .unwrap_or_else(|| container_entry(&req.container));
                overlay_resources(c.resources.get_or_insert_with(Default::default), merge.resources());
                Arc::new(c)
            });
            let requested = Arc::new(merge.resources().clone());
            let event = CallEvent::update_container(pod.clone(), container.clone(), requested);
            self.run_one(entry, cx, event, current.as_ref(), &mut run, |policy, reply, audit, run| {
                if reply.adjust.is_some() {
                    return Err(invalid(policy, kind.name(), "UpdateContainer allows no adjustment"));
                }
                let (update, evict) = reply_updates(policy, kind.name(), reply)?;
                merge::validate_updates(policy, &update, &evict).map_err(|e| invalid(policy, kind.name(), e))?;
                let resp = pb::UpdateContainerResponse { update, evict, ..Default::default() };
                bounded(policy, kind, &resp, &mut run.total, audit)?;
                fold(&mut merge, audit, |m| m.apply(policy, &resp)).map_err(|e| conflict(policy, kind, e))?;
                Ok(true)
            })?;
        }
        Ok(run.done(merge.finish()))
    }

    /// StopContainer: updates of other containers in the reply; evictions
    /// go out with UpdateContainers.
    pub fn stop_container(
        &self,
        cx: &EvalContext,
        req: &pb::StopContainerRequest,
    ) -> Result<Evaluated<pb::StopContainerResponse>, ChainError> {
        let kind = EventKind::StopContainer;
        let target = container_target(&req.pod, &req.container);
        let mut run = Run::new(&target);
        if !self.wants(kind) {
            return Ok(run.done(pb::StopContainerResponse::default()));
        }
        let event = CallEvent::from(req);
        let mut merge = StopMerge::new(req);
        let mut evictions = UpdatesMerge::new();
        for entry in self.subscribed(kind) {
            self.run_one(entry, cx, event.clone(), None, &mut run, |policy, reply, audit, run| {
                if reply.adjust.is_some() {
                    return Err(invalid(policy, kind.name(), "StopContainer allows no adjustment"));
                }
                let (update, evict) = reply_updates(policy, kind.name(), reply)?;
                merge::validate_updates(policy, &update, &evict).map_err(|e| invalid(policy, kind.name(), e))?;
                let resp = pb::StopContainerResponse { update, ..Default::default() };
                bounded(policy, kind, &resp, &mut run.total, audit)?;
                fold(&mut merge, audit, |m| m.apply(policy, &resp)).map_err(|e| conflict(policy, kind, e))?;
                if !audit {
                    evictions.apply(policy, &[], &evict).map_err(|e| conflict(policy, kind, e))?;
                }
                Ok(true)
            })?;
        }
        run.effects.evict = evictions.finish().1;
        Ok(run.done(merge.finish()))
    }
}

fn policies_events(entries: &[ChainEntry]) -> EventMask {
    entries.iter().fold(EventMask::EMPTY, |m, e| EventMask::from_bits(m.bits() | e.policy.events().bits()))
}

/// How errors and logs name a container: id, then namespace/pod/container.
pub fn container_target(pod: &pb::PodSandbox, ctr: &pb::Container) -> String {
    format!("container {} ({}/{}/{})", ctr.id, pod.namespace, pod.name, ctr.name)
}

/// How errors and logs name a pod: id, then namespace/name.
pub fn pod_target(pod: &pb::PodSandbox) -> String {
    format!("pod {} ({}/{})", pod.id, pod.namespace, pod.name)
}

/// Merges one reply. `apply` is transactional, so in enforce mode it works on
/// the merge itself (a failure leaves it unchanged); an audited reply is
/// merged into a copy that is dropped, to report conflicts without effect.
fn fold<M: Clone>(
    merge: &mut M,
    audit: bool,
    apply: impl FnOnce(&mut M) -> Result<(), MergeError>,
) -> Result<(), MergeError> {
    if audit {
        apply(&mut merge.clone())
    } else {
        apply(merge)
    }
}

/// Keeps replies within what the runtime can receive: one policy's reply at
/// most [`MAX_REPLY_BYTES`], all merged replies at most
/// [`MAX_TOTAL_REPLY_BYTES`]. An audit reply is measured but not counted.
fn bounded(
    policy: &str,
    kind: EventKind,
    reply: &impl protobuf::Message,
    total: &mut usize,
    audit: bool,
) -> Result<(), PolicyFailure> {
    bounded_in(policy, kind.name(), reply, total, audit)
}

fn bounded_in(
    policy: &str,
    kind: &str,
    reply: &impl protobuf::Message,
    total: &mut usize,
    audit: bool,
) -> Result<(), PolicyFailure> {
    let size = reply.compute_size() as usize;
    if size > MAX_REPLY_BYTES {
        return Err(invalid(
            policy,
            kind,
            format!("reply of {size} bytes exceeds the limit of {MAX_REPLY_BYTES} bytes"),
        ));
    }
    if *total + size > MAX_TOTAL_REPLY_BYTES {
        return Err(invalid(
            policy,
            kind,
            format!("reply of {size} bytes would take the merged reply past {MAX_TOTAL_REPLY_BYTES} bytes"),
        ));
    }
    if !audit {
        *total += size;
    }
    Ok(())
}

/// Most bytes of an audited reply's description in logs and steps.
const MAX_WOULD_BYTES: usize = 4096;

/// What an audited reply would change, as JSON of its parts (empty if it
/// changes nothing); cut at [`MAX_WOULD_BYTES`].
fn would_change(reply: &wit::Reply) -> String {
    let (adjust, update, evict) = match crate::convert::reply_parts(reply.clone()) {
        Ok(parts) => parts,
        // Invalid output is reported as the policy's failure instead.
        Err(e) => return format!("invalid output: {e}"),
    };
    let json = |m: &dyn protobuf::MessageDyn| protobuf_json_mapping::print_to_string(m).unwrap_or_default();
    let mut parts = Vec::new();
    if let Some(a) = &adjust {
        parts.push(format!("adjust: {}", json(a)));
    }
    if !update.is_empty() {
        parts.push(format!("update: [{}]", update.iter().map(|u| json(u)).collect::<Vec<_>>().join(", ")));
    }
    if !evict.is_empty() {
        parts.push(format!("evict: [{}]", evict.iter().map(|e| json(e)).collect::<Vec<_>>().join(", ")));
    }
    let mut text = parts.join("; ");
    if text.len() > MAX_WOULD_BYTES {
        let cut = (0..=MAX_WOULD_BYTES).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        text.truncate(cut);
        text.push_str(" [...]");
    }
    text
}

fn invalid(policy: &str, event: &str, reason: impl ToString) -> PolicyFailure {
    PolicyFailure::InvalidOutput { policy: policy.into(), event: event.into(), reason: reason.to_string() }
}

fn conflict(policy: &str, kind: EventKind, e: MergeError) -> PolicyFailure {
    conflict_in(policy, kind.name(), e)
}

fn conflict_in(policy: &str, event: &str, e: MergeError) -> PolicyFailure {
    match e {
        MergeError::Invalid { reason, .. } => invalid(policy, event, reason),
        other => PolicyFailure::Conflict { policy: policy.into(), event: event.into(), conflict: other },
    }
}

/// Merges the updates and evictions of a reply whose event has no reply of
/// its own to put them in (they go out with UpdateContainers).
fn merge_updates(
    merge: &mut UpdatesMerge,
    policy: &str,
    event: &str,
    reply: wit::Reply,
    audit: bool,
    total: &mut usize,
) -> Result<bool, PolicyFailure> {
    let (update, evict) = reply_updates(policy, event, reply)?;
    if update.is_empty() && evict.is_empty() {
        return Ok(false);
    }
    merge::validate_updates(policy, &update, &evict).map_err(|e| invalid(policy, event, e))?;
    let req = pb::UpdateContainersRequest { update, evict, ..Default::default() };
    bounded_in(policy, event, &req, total, audit)?;
    fold(merge, audit, |m| m.apply(policy, &req.update, &req.evict)).map_err(|e| conflict_in(policy, event, e))?;
    Ok(true)
}

fn reply_updates(
    policy: &str,
    event: &str,
    reply: wit::Reply,
) -> Result<(Vec<pb::ContainerUpdate>, Vec<pb::ContainerEviction>), PolicyFailure> {
    let update = reply
        .update
        .into_iter()
        .map(pb::ContainerUpdate::try_from)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(policy, event, e))?;
    let evict = reply.evict.into_iter().map(pb::ContainerEviction::from).collect();
    Ok((update, evict))
}

fn reply_to_create(
    policy: &str,
    kind: EventKind,
    reply: wit::Reply,
) -> Result<pb::CreateContainerResponse, PolicyFailure> {
    let adjust = match reply.adjust {
        Some(a) => protobuf::MessageField::some(
            pb::ContainerAdjustment::try_from(a).map_err(|e| invalid(policy, kind.name(), e))?,
        ),
        None => protobuf::MessageField::none(),
    };
    let (update, evict) = reply_updates(policy, kind.name(), wit::Reply { adjust: None, ..reply })?;
    Ok(pb::CreateContainerResponse { adjust, update, evict, ..Default::default() })
}
