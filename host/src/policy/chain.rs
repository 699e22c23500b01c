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
use super::engine::LoadError;
use super::engine::{event_name, kind_of, CallError, CompiledPolicy, Facts, PolicyEngine};
use super::manifest::{Mode, OnError, PolicySpec};
use crate::merge::{self, CreateMerge, MergeError, StopMerge, UpdateMerge};
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
    Applied { policy: String, fuel: u64, elapsed: Duration },
    Denied { policy: String, reason: String, audit: bool },
    AuditOnly { policy: String, fuel: u64 },
    Failed { failure: PolicyFailure, ignored: bool },
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
    settings: ChainSettings,
}

/// Everything an evaluation needs besides the request.
#[derive(Debug, Clone)]
pub struct EvalContext {
    pub engine: Arc<PolicyEngine>,
    pub facts: Arc<Facts>,
    pub deadline: Instant,
}

impl Chain {
    pub fn new(policies: Vec<CompiledPolicy>, settings: ChainSettings) -> Self {
        let entries: Vec<ChainEntry> =
            policies.into_iter().map(|policy| ChainEntry { policy, breaker: Mutex::default() }).collect();
        let events = policies_events(&entries);
        Self { entries, unloadable: Vec::new(), events, settings }
    }

    /// Adds the policies that failed to load; see [`Chain::unloadable`].
    pub fn with_unloadable(mut self, failed: Vec<(PolicySpec, LoadError)>) -> Self {
        self.unloadable = failed
            .into_iter()
            .filter(|(spec, _)| spec.on_error == OnError::Fail)
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

    /// Calls one policy, or explains why not; updates its breaker.
    fn call(
        &self,
        entry: &ChainEntry,
        cx: &EvalContext,
        event: &wit::Event,
    ) -> Result<(Result<wit::Reply, String>, u64, Duration), PolicyFailure> {
        let policy = entry.policy.name().to_string();
        let name = event_name(event).to_string();
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
        let report = cx.engine.call(&entry.policy, event, &cx.facts, left);
        match report.outcome {
            Ok(answer) => Ok((answer, report.fuel_used, report.elapsed)),
            Err(e) => Err(self.failed(entry, e.into())),
        }
    }

    /// Records a failure in the breaker and passes it on.
    fn failed(&self, entry: &ChainEntry, failure: PolicyFailure) -> PolicyFailure {
        let mut b = entry.breaker.lock().expect("breaker lock");
        b.failures += 1;
        if b.failures >= self.settings.breaker_failures && b.open_until.is_none() {
            b.open_until = Some(Instant::now() + Duration::from_millis(self.settings.breaker_backoff_ms));
            tracing::warn!(policy = entry.policy.name(), failures = b.failures, "policy quarantined");
        }
        failure
    }

    fn succeeded(&self, entry: &ChainEntry) {
        let mut b = entry.breaker.lock().expect("breaker lock");
        b.failures = 0;
        b.open_until = None;
    }

    /// Applies `on-error` to a failure: `Ok` to go on, `Err` to fail the event.
    fn on_failure(
        entry: &ChainEntry,
        failure: PolicyFailure,
        target: &str,
        steps: &mut Vec<Step>,
    ) -> Result<(), ChainError> {
        let ignored = entry.policy.spec.on_error == OnError::Ignore;
        tracing::warn!(error = %failure, ignored, "policy failed");
        steps.push(Step::Failed { failure: failure.clone(), ignored });
        if ignored {
            Ok(())
        } else {
            Err(ChainError::Failed { target: target.to_string(), failure: Box::new(failure) })
        }
    }

    /// Runs the chain for an event whose policies may only observe or deny
    /// (pod events, post-events, start, remove, pod updates).
    pub fn notify(
        &self,
        cx: &EvalContext,
        kind: EventKind,
        event: &wit::Event,
        target: &str,
    ) -> Result<Vec<Step>, ChainError> {
        let mut steps = Vec::new();
        for entry in self.subscribed(kind) {
            let policy = entry.policy.name().to_string();
            match self.call(entry, cx, event) {
                Err(f) => Self::on_failure(entry, f, target, &mut steps)?,
                Ok((Err(reason), _, _)) => {
                    self.succeeded(entry);
                    self.deny(entry, kind, target, reason, &mut steps)?;
                }
                Ok((Ok(reply), fuel, elapsed)) => {
                    if reply.adjust.is_some() || !reply.update.is_empty() || !reply.evict.is_empty() {
                        let f = self.failed(
                            entry,
                            PolicyFailure::InvalidOutput {
                                policy,
                                event: kind.name().into(),
                                reason: format!("{kind} allows no adjustments, updates or evictions"),
                            },
                        );
                        Self::on_failure(entry, f, target, &mut steps)?;
                    } else {
                        self.succeeded(entry);
                        steps.push(Step::Applied { policy, fuel, elapsed });
                    }
                }
            }
        }
        Ok(steps)
    }

    fn deny(
        &self,
        entry: &ChainEntry,
        kind: EventKind,
        target: &str,
        reason: String,
        steps: &mut Vec<Step>,
    ) -> Result<(), ChainError> {
        let policy = entry.policy.name().to_string();
        let audit = entry.policy.spec.mode == Mode::Audit;
        tracing::info!(policy, event = kind.name(), target, reason, audit, "policy denies");
        steps.push(Step::Denied { policy: policy.clone(), reason: reason.clone(), audit });
        if audit {
            Ok(())
        } else {
            Err(ChainError::Denied { policy, event: kind.name().into(), target: target.into(), reason })
        }
    }

    /// Runs one policy that may change things; `apply` converts, validates and
    /// merges its reply (transactionally). Handles denial, audit and failure.
    fn run_changing<F>(
        &self,
        entry: &ChainEntry,
        cx: &EvalContext,
        event: &wit::Event,
        target: &str,
        steps: &mut Vec<Step>,
        apply: F,
    ) -> Result<(), ChainError>
    where
        F: FnOnce(&str, wit::Reply, bool) -> Result<(), PolicyFailure>,
    {
        let kind = kind_of(event);
        let policy = entry.policy.name().to_string();
        let audit = entry.policy.spec.mode == Mode::Audit;
        match self.call(entry, cx, event) {
            Err(f) => Self::on_failure(entry, f, target, steps),
            Ok((Err(reason), _, _)) => {
                self.succeeded(entry);
                self.deny(entry, kind, target, reason, steps)
            }
            Ok((Ok(reply), fuel, elapsed)) => match apply(&policy, reply, audit) {
                Ok(()) => {
                    self.succeeded(entry);
                    steps.push(if audit {
                        Step::AuditOnly { policy, fuel }
                    } else {
                        Step::Applied { policy, fuel, elapsed }
                    });
                    Ok(())
                }
                Err(f) => {
                    let f = self.failed(entry, f);
                    Self::on_failure(entry, f, target, steps)
                }
            },
        }
    }

    /// CreateContainer: adjust the new container, update others, evict; then
    /// the policy-level validation of the merged result.
    pub fn create_container(
        &self,
        cx: &EvalContext,
        req: &pb::CreateContainerRequest,
    ) -> Result<(pb::CreateContainerResponse, Vec<Step>), ChainError> {
        let kind = EventKind::CreateContainer;
        let target = container_target(&req.pod, &req.container);
        if let Some((policy, reason)) = self.unloadable.first() {
            let failure =
                PolicyFailure::NotLoaded { policy: policy.clone(), event: kind.name().into(), reason: reason.clone() };
            return Err(ChainError::Failed { target, failure: Box::new(failure) });
        }
        if !self.wants(kind) {
            return Ok((CreateMerge::new(req).finish(), Vec::new()));
        }
        let pod = wit::PodSandbox::from(&*req.pod);
        let mut merge = CreateMerge::new(req);
        let mut steps = Vec::new();
        let mut total = 0;
        for entry in self.subscribed(kind) {
            let event = wit::Event::CreateContainer(wit::ContainerEvent {
                pod: pod.clone(),
                container: wit::Container::from(merge.container()),
            });
            self.run_changing(entry, cx, &event, &target, &mut steps, |policy, reply, audit| {
                let resp = reply_to_create(policy, kind, reply)?;
                bounded(policy, kind, &resp, &mut total, audit)?;
                merge::validate_create_reply(policy, &resp).map_err(|e| invalid(policy, kind, e))?;
                fold(&mut merge, audit, |m| m.apply(policy, &resp)).map_err(|e| conflict(policy, kind, e))
            })?;
        }
        let owners = merge.owners();
        let response = merge.finish();
        self.validate(cx, req, &response, owners, &target, &mut steps)?;
        Ok((response, steps))
    }

    fn validate(
        &self,
        cx: &EvalContext,
        req: &pb::CreateContainerRequest,
        response: &pb::CreateContainerResponse,
        owners: pb::OwningPlugins,
        target: &str,
        steps: &mut Vec<Step>,
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
        let event = wit::Event::ValidateContainerAdjustment(wit::ValidationEvent::from(&vreq));
        let found = self.notify(cx, kind, &event, target)?;
        steps.extend(found);
        Ok(())
    }

    /// UpdateContainer: updates (of this and other containers) and evictions.
    pub fn update_container(
        &self,
        cx: &EvalContext,
        req: &pb::UpdateContainerRequest,
    ) -> Result<(pb::UpdateContainerResponse, Vec<Step>), ChainError> {
        let kind = EventKind::UpdateContainer;
        if !self.wants(kind) {
            return Ok((UpdateMerge::new(req).finish(), Vec::new()));
        }
        let target = container_target(&req.pod, &req.container);
        let pod = wit::PodSandbox::from(&*req.pod);
        let container = wit::Container::from(&*req.container);
        let mut merge = UpdateMerge::new(req);
        let mut steps = Vec::new();
        let mut total = 0;
        for entry in self.subscribed(kind) {
            let event = wit::Event::UpdateContainer(wit::UpdateContainerEvent {
                pod: pod.clone(),
                container: container.clone(),
                linux_resources: Some(wit::LinuxResources::from(merge.resources())),
            });
            self.run_changing(entry, cx, &event, &target, &mut steps, |policy, reply, audit| {
                if reply.adjust.is_some() {
                    return Err(invalid(policy, kind, "UpdateContainer allows no adjustment"));
                }
                let (update, evict) = reply_updates(policy, kind, reply)?;
                merge::validate_updates(policy, &update, &evict).map_err(|e| invalid(policy, kind, e))?;
                let resp = pb::UpdateContainerResponse { update, evict, ..Default::default() };
                bounded(policy, kind, &resp, &mut total, audit)?;
                fold(&mut merge, audit, |m| m.apply(policy, &resp)).map_err(|e| conflict(policy, kind, e))
            })?;
        }
        Ok((merge.finish(), steps))
    }

    /// StopContainer: updates of other containers (no evictions).
    pub fn stop_container(
        &self,
        cx: &EvalContext,
        req: &pb::StopContainerRequest,
    ) -> Result<(pb::StopContainerResponse, Vec<Step>), ChainError> {
        let kind = EventKind::StopContainer;
        if !self.wants(kind) {
            return Ok((StopMerge::new(req).finish(), Vec::new()));
        }
        let target = container_target(&req.pod, &req.container);
        let event = wit::Event::StopContainer(wit::ContainerEvent {
            pod: wit::PodSandbox::from(&*req.pod),
            container: wit::Container::from(&*req.container),
        });
        let mut merge = StopMerge::new(req);
        let mut steps = Vec::new();
        let mut total = 0;
        for entry in self.subscribed(kind) {
            self.run_changing(entry, cx, &event, &target, &mut steps, |policy, reply, audit| {
                if reply.adjust.is_some() || !reply.evict.is_empty() {
                    return Err(invalid(policy, kind, "StopContainer allows only updates"));
                }
                let (update, evict) = reply_updates(policy, kind, reply)?;
                merge::validate_updates(policy, &update, &evict).map_err(|e| invalid(policy, kind, e))?;
                let resp = pb::StopContainerResponse { update, ..Default::default() };
                bounded(policy, kind, &resp, &mut total, audit)?;
                fold(&mut merge, audit, |m| m.apply(policy, &resp)).map_err(|e| conflict(policy, kind, e))
            })?;
        }
        Ok((merge.finish(), steps))
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

fn invalid(policy: &str, kind: EventKind, reason: impl ToString) -> PolicyFailure {
    PolicyFailure::InvalidOutput { policy: policy.into(), event: kind.name().into(), reason: reason.to_string() }
}

fn conflict(policy: &str, kind: EventKind, e: MergeError) -> PolicyFailure {
    match e {
        MergeError::Invalid { reason, .. } => invalid(policy, kind, reason),
        other => PolicyFailure::Conflict { policy: policy.into(), event: kind.name().into(), conflict: other },
    }
}

fn reply_updates(
    policy: &str,
    kind: EventKind,
    reply: wit::Reply,
) -> Result<(Vec<pb::ContainerUpdate>, Vec<pb::ContainerEviction>), PolicyFailure> {
    let update = reply
        .update
        .into_iter()
        .map(pb::ContainerUpdate::try_from)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(policy, kind, e))?;
    let evict = reply.evict.into_iter().map(pb::ContainerEviction::from).collect();
    Ok((update, evict))
}

fn reply_to_create(
    policy: &str,
    kind: EventKind,
    reply: wit::Reply,
) -> Result<pb::CreateContainerResponse, PolicyFailure> {
    let adjust = match reply.adjust {
        Some(a) => {
            protobuf::MessageField::some(pb::ContainerAdjustment::try_from(a).map_err(|e| invalid(policy, kind, e))?)
        }
        None => protobuf::MessageField::none(),
    };
    let (update, evict) = reply_updates(policy, kind, wit::Reply { adjust: None, ..reply })?;
    Ok(pb::CreateContainerResponse { adjust, update, evict, ..Default::default() })
}
