//! One path for every reply of every event: call the policy within its
//! allowance, refuse what it has no capability for (`caps.rs`), then
//! convert its reply, bound it, validate and merge it, and
//! tell a conflict with an earlier policy apart from the policy's own
//! failure. The host's work on a reply (its CPU time, the capability check
//! included) counts against the policy's time limit, so a reply built to
//! make the host work is that policy's failure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_wasm_api::api as pb;
use protobuf::Message as _;

use super::budget::Plan;
use super::{
    audited, ignores_failures, Chain, ChainEntry, ChainError, Change, Effects, EvalContext, Evaluated, Observer,
    Outcome, PolicyFailure, Step, MAX_REPLY_BYTES, MAX_TOTAL_REPLY_BYTES,
};
use crate::merge::{CreateMerge, MergeError, StopMerge, UpdateMerge, UpdatesMerge, MAX_UPDATES};
use crate::node::view::ContainerEntry;
use crate::policy::call::event::CallEvent;
use crate::policy::call::meter::cpu_time;
use crate::policy::spec::caps::{self, Capability};
use crate::policy::spec::manifest::OnConflict;
use crate::wit::wit;

/// Why a reply cannot be taken for its event, before any merge.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReplyRefused {
    /// A value the runtime's protocol cannot carry.
    #[error(transparent)]
    Convert(#[from] crate::convert::ConvertError),
    /// An adjustment, where the event adjusts no container being created.
    #[error("{event} allows no adjustment")]
    Adjustment {
        /// The event.
        event: String,
    },
    /// Anything but a verdict, where the event takes only a verdict.
    #[error("{event} allows no adjustments, updates or evictions")]
    NotAVerdict {
        /// The event.
        event: String,
    },
}

/// Where the replies of one event go.
pub(super) trait Sink: Clone {
    /// A reply in protobuf form.
    type Reply: protobuf::MessageFull;
    /// A reply as the change a report describes (`None` for a reply that
    /// can change nothing).
    fn change(reply: Self::Reply) -> Option<Change>;
    /// Converts a reply, refusing the parts the event does not allow.
    fn convert(&self, event: &str, reply: wit::Reply) -> Result<Self::Reply, ReplyRefused>;
    /// Validates and merges a reply, transactionally; says whether the
    /// policies after see something different.
    fn merge(&mut self, policy: &str, reply: &Self::Reply) -> Result<bool, MergeError>;
    /// Whether nothing else holds the parts a merge changes in place: a
    /// reference left over from the call (the event's container) makes the
    /// merge copy them first, a whole container per policy.
    fn exclusive(&self) -> bool {
        true
    }
}

/// CreateContainer: an adjustment, updates of other containers, evictions.
#[derive(Clone, Debug)]
pub(super) struct CreateSink<'r>(pub CreateMerge<'r>);

impl Sink for CreateSink<'_> {
    type Reply = pb::CreateContainerResponse;
    fn change(reply: Self::Reply) -> Option<Change> {
        Some(reply.into())
    }
    fn convert(&self, _event: &str, reply: wit::Reply) -> Result<Self::Reply, ReplyRefused> {
        Ok(pb::CreateContainerResponse::try_from(reply)?)
    }
    fn merge(&mut self, policy: &str, reply: &Self::Reply) -> Result<bool, MergeError> {
        self.0.apply(policy, reply)?;
        Ok(reply.adjust.is_some())
    }
    fn exclusive(&self) -> bool {
        Arc::strong_count(self.0.shared_container()) == 1
    }
}

/// UpdateContainer: updates (of this container and others), evictions.
#[derive(Clone, Debug)]
pub(super) struct UpdateSink(pub UpdateMerge);

impl Sink for UpdateSink {
    type Reply = pb::UpdateContainerResponse;
    fn change(reply: Self::Reply) -> Option<Change> {
        Some(reply.into())
    }
    fn convert(&self, _event: &str, reply: wit::Reply) -> Result<Self::Reply, ReplyRefused> {
        Ok(pb::UpdateContainerResponse::try_from(reply)?)
    }
    fn merge(&mut self, policy: &str, reply: &Self::Reply) -> Result<bool, MergeError> {
        self.0.apply(policy, reply)?;
        Ok(true)
    }
}

/// StopContainer: updates in the reply; evictions go out with UpdateContainers.
#[derive(Clone, Debug)]
pub(super) struct StopSink {
    pub merge: StopMerge,
    pub evictions: UpdatesMerge,
}

impl Sink for StopSink {
    type Reply = pb::UpdateContainerResponse;
    fn change(reply: Self::Reply) -> Option<Change> {
        Some(reply.into())
    }
    fn convert(&self, event: &str, reply: wit::Reply) -> Result<Self::Reply, ReplyRefused> {
        no_adjustment(event, &reply)?;
        Ok(pb::UpdateContainerResponse::try_from(reply)?)
    }
    fn merge(&mut self, policy: &str, reply: &Self::Reply) -> Result<bool, MergeError> {
        let mut evictions = self.evictions.clone();
        evictions.apply(policy, &[], &reply.evict)?;
        self.merge.apply_updates(policy, &reply.update)?;
        self.evictions = evictions;
        Ok(false)
    }
}

/// Events whose reply carries nothing: updates and evictions go out with
/// UpdateContainers once the event is answered.
#[derive(Clone, Debug)]
pub(super) struct UpdatesSink(pub UpdatesMerge);

impl Sink for UpdatesSink {
    type Reply = pb::UpdateContainersRequest;
    fn change(reply: Self::Reply) -> Option<Change> {
        Some(reply.into())
    }
    fn convert(&self, event: &str, reply: wit::Reply) -> Result<Self::Reply, ReplyRefused> {
        no_adjustment(event, &reply)?;
        let (_, update, evict) = crate::convert::reply_parts(reply)?;
        Ok(pb::UpdateContainersRequest { update, evict, ..Default::default() })
    }
    fn merge(&mut self, policy: &str, reply: &Self::Reply) -> Result<bool, MergeError> {
        self.0.apply(policy, &reply.update, &reply.evict)?;
        Ok(false)
    }
}

/// ValidateContainerAdjustment: a verdict, nothing else.
#[derive(Clone, Copy, Debug)]
pub(super) struct VerdictSink;

impl Sink for VerdictSink {
    type Reply = pb::Empty;
    fn change(_reply: Self::Reply) -> Option<Change> {
        None
    }
    fn convert(&self, event: &str, reply: wit::Reply) -> Result<Self::Reply, ReplyRefused> {
        if reply.adjust.is_some() || !reply.update.is_empty() || !reply.evict.is_empty() {
            return Err(ReplyRefused::NotAVerdict { event: event.into() });
        }
        Ok(pb::Empty::default())
    }
    fn merge(&mut self, _policy: &str, _reply: &Self::Reply) -> Result<bool, MergeError> {
        Ok(false)
    }
}

fn no_adjustment(event: &str, reply: &wit::Reply) -> Result<(), ReplyRefused> {
    match reply.adjust {
        Some(_) => Err(ReplyRefused::Adjustment { event: event.into() }),
        None => Ok(()),
    }
}

/// The running state of one evaluation.
#[derive(Debug)]
pub(super) struct Run<'t> {
    /// How errors name what the event is about.
    pub target: &'t str,
    pub event: &'static str,
    pub steps: Vec<Step>,
    pub effects: Effects,
    /// Bytes of replies merged so far.
    total: usize,
    plan: Plan,
    /// When the chain's plan was made (its first policy about to start).
    planned_at: Option<Instant>,
    /// How many steps were recorded before the plan (policies not ready,
    /// reported without a call).
    planned_steps: usize,
    observer: Option<Arc<dyn Observer>>,
}

impl<'t> Run<'t> {
    pub(super) fn new(target: &'t str, event: &'static str) -> Self {
        Self {
            target,
            event,
            steps: Vec::new(),
            effects: Effects::default(),
            total: 0,
            plan: Plan::default(),
            planned_at: None,
            planned_steps: 0,
            observer: None,
        }
    }

    /// Plans time for `entries`, the policies that will run, in order.
    pub(super) fn plan<'e>(
        &mut self,
        entries: impl IntoIterator<Item = &'e ChainEntry>,
        cx: &EvalContext,
        start: Instant,
    ) {
        self.plan = Plan::new(entries, cx.deadline.saturating_duration_since(start));
        self.planned_at = Some(start);
        self.planned_steps = self.steps.len();
        self.observer = cx.observer.clone();
    }

    pub(super) fn done<T>(self, value: T) -> Evaluated<T> {
        Evaluated { value, steps: self.steps, effects: self.effects }
    }

    fn step(&mut self, entry: &ChainEntry, fuel: u64, elapsed: Duration, outcome: Outcome) {
        let audit = audited(entry);
        let step = Step { policy: entry.policy.name().to_string(), audit, fuel, elapsed, outcome };
        if let Some(observer) = &self.observer {
            observer.step(self.event, self.target, &step);
        }
        self.steps.push(step);
    }
}

/// More updates or evictions than the output checks take (`MAX_UPDATES`,
/// the same refusal): said before the capability check, which would
/// otherwise go through every one of them.
fn too_many(reply: &wit::Reply) -> Option<String> {
    let wit::Reply { adjust: _, update, evict } = reply;
    [("update", "updates", update.len()), ("evict", "evictions", evict.len())]
        .into_iter()
        .find(|(_, _, n)| *n > MAX_UPDATES)
        .map(|(field, what, n)| format!("{field}: {n} {what}; at most {MAX_UPDATES} per reply"))
}

/// Output that needs a capability the policy does not have.
fn ungranted(policy: &str, event: &str, refusal: caps::Refusal) -> PolicyFailure {
    invalid(policy, event, refusal)
}

fn invalid(policy: &str, event: &str, reason: impl ToString) -> PolicyFailure {
    PolicyFailure::InvalidOutput { policy: policy.into(), event: event.into(), reason: reason.to_string() }
}

impl Chain {
    /// Runs the `index`-th policy of the evaluation's plan on `event` and
    /// sends its reply down the one path into `sink`. Handles denial, audit,
    /// conflicts and failures, and keeps the state the policy wrote.
    /// Returns whether the reply changed what the next policies see.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run_one<S: Sink>(
        &self,
        entry: &ChainEntry,
        index: usize,
        cx: &EvalContext,
        run: &mut Run<'_>,
        event: CallEvent,
        current: Option<&Arc<ContainerEntry>>,
        sink: &mut S,
    ) -> Result<bool, ChainError> {
        let policy = entry.policy.name();
        let name = run.event;
        let audit = audited(entry);
        {
            let b = entry.breaker();
            if b.open_at(self.clock.now()) {
                let failure =
                    PolicyFailure::Quarantined { policy: policy.into(), event: name.into(), failures: b.failures };
                drop(b);
                return self.on_failure(entry, failure, Duration::ZERO, 0, run).map(|()| false);
            }
        }
        let time = run.plan.time(index, cx.deadline);
        if time.wall < Duration::from_millis(self.settings.min_call_ms) {
            let reason = no_time_left(cx, run);
            let failure = PolicyFailure::Skipped { policy: policy.into(), event: name.into(), reason };
            return self.on_failure(entry, failure, Duration::ZERO, 0, run).map(|()| false);
        }
        // The event's own container: the bounds of its adjustment and of
        // its updates are measured against it; updating any other needs
        // `updates`, and is measured against that one in the node view.
        // Both are let go once the reply is checked, before it is merged
        // (`Sink::exclusive`).
        let own_container = event.container_shared();
        // On UpdateContainer, what the runtime asks for the container now:
        // the default grant's bounds measure against it too.
        let requested = event.requested_shared();
        let report = cx.engine.call_async(&entry.policy, event, &cx.env, current, time).await;
        let (fuel, elapsed) = (report.fuel_used, report.elapsed);
        let may = entry.policy.allowed().effective();
        let mut reply = match report.outcome {
            Err(e) => {
                let failure = self.failed(entry, e.into());
                return self.on_failure(entry, failure, elapsed, fuel, run).map(|()| false);
            }
            Ok(Err(_)) if !may.contains(Capability::Deny) => {
                let refusal = caps::Refusal { capability: Capability::Deny, field: None };
                let failure = self.failed(entry, ungranted(policy, name, refusal));
                return self.on_failure(entry, failure, elapsed, fuel, run).map(|()| false);
            }
            Ok(Err(denial)) => {
                self.succeeded(entry);
                return self.deny(entry, denial.0, elapsed, fuel, run).map(|()| false);
            }
            Ok(Ok(reply)) => reply,
        };
        // The capability check is the host's work on the reply too, timed
        // with the rest: a reply built to make it work overruns the policy.
        let host_started = Instant::now();
        let (taken, host) = cpu_time(|| {
            let base = caps::Baseline {
                own: own_container.as_deref(),
                requested: requested.as_deref(),
                others: Some(&cx.env.view),
            };
            let refused = match too_many(&reply) {
                Some(reason) => Some(invalid(policy, name, reason)),
                None => {
                    shield(&mut reply, &*cx.known, policy, name);
                    caps::missing(&reply, base, may).map(|refusal| ungranted(policy, name, refusal))
                }
            };
            drop((own_container, requested));
            match refused {
                Some(failure) => Err(failure),
                None => take(sink, policy, name, reply, audit, &mut run.total, audit || cx.explain),
            }
        });
        let elapsed = elapsed + host_started.elapsed();
        let taken = match taken {
            Ok(t) if report.charged + host > report.limit => {
                drop(t);
                Err(PolicyFailure::Overran {
                    policy: policy.into(),
                    event: name.into(),
                    limit_ms: report.limit.as_millis() as u64,
                    call_ms: report.charged.as_millis() as u64,
                    host_ms: host.as_millis() as u64,
                })
            }
            other => other,
        };
        match taken {
            Ok(Taken { changed, nonempty, change }) => {
                self.succeeded(entry);
                let outcome = match nonempty {
                    true => Outcome::Changed { change: change.map(Arc::new) },
                    false => Outcome::Unchanged,
                };
                if audit {
                    if let Outcome::Changed { change: Some(would) } = &outcome {
                        tracing::info!(policy, event = name, target = run.target, %would, "audit: would have changed");
                    }
                    run.step(entry, fuel, elapsed, outcome);
                    return Ok(false);
                }
                if let Some(w) = report.writes {
                    run.effects.writes.push((policy.to_string(), w));
                }
                run.step(entry, fuel, elapsed, outcome);
                Ok(changed)
            }
            Err(PolicyFailure::Conflict { conflict, .. }) => self.conflicted(entry, conflict, elapsed, fuel, run),
            Err(f) => {
                let failure = self.failed(entry, f);
                self.on_failure(entry, failure, elapsed, fuel, run).map(|()| false)
            }
        }
    }

    /// A reply that conflicts with an earlier policy's: fails the event,
    /// unless the policy yields or is audited (then it is only reported).
    fn conflicted(
        &self,
        entry: &ChainEntry,
        conflict: MergeError,
        elapsed: Duration,
        fuel: u64,
        run: &mut Run<'_>,
    ) -> Result<bool, ChainError> {
        let policy = entry.policy.name();
        let audit = audited(entry);
        if audit || entry.policy.spec.on_conflict == OnConflict::Yield {
            tracing::warn!(policy, event = run.event, target = run.target, %conflict, audit, "policy's reply conflicts with an earlier policy's and is dropped");
            let outcome = Outcome::Yielded { conflict: conflict.to_string() };
            run.step(entry, fuel, elapsed, outcome);
            return Ok(false);
        }
        let failure =
            PolicyFailure::Conflict { policy: policy.into(), event: run.event.into(), conflict: conflict.clone() };
        run.step(entry, fuel, elapsed, Outcome::Failed { failure, ignored: false });
        tracing::warn!(policy, event = run.event, target = run.target, %conflict, "conflicting policies fail the event");
        Err(ChainError::Conflict { event: run.event.into(), target: run.target.into(), conflict })
    }

    /// Applies `on-error` to a failure: `Ok` to go on, `Err` to fail the
    /// event. A policy in audit mode fails nothing, whatever its `on-error`.
    pub(super) fn on_failure(
        &self,
        entry: &ChainEntry,
        failure: PolicyFailure,
        elapsed: Duration,
        fuel: u64,
        run: &mut Run<'_>,
    ) -> Result<(), ChainError> {
        let ignored = ignores_failures(entry);
        tracing::warn!(error = %failure, target = run.target, ignored, audit = audited(entry), "policy failed");
        run.step(entry, fuel, elapsed, Outcome::Failed { failure: failure.clone(), ignored });
        if ignored {
            Ok(())
        } else {
            Err(ChainError::Failed { target: run.target.to_string(), failure: Box::new(failure) })
        }
    }

    fn deny(
        &self,
        entry: &ChainEntry,
        reason: String,
        elapsed: Duration,
        fuel: u64,
        run: &mut Run<'_>,
    ) -> Result<(), ChainError> {
        let policy = entry.policy.name().to_string();
        let audit = audited(entry);
        // The decision's log line is the observer's (one per decision).
        tracing::debug!(policy, event = run.event, target = run.target, reason, audit, "policy denies");
        run.step(entry, fuel, elapsed, Outcome::Denied { reason: reason.clone() });
        if audit {
            return Ok(());
        }
        Err(ChainError::Denied { policy, event: run.event.into(), target: run.target.into(), reason })
    }
}

/// Drops the updates and evictions of the host's own containers
/// (`node::own`) from a reply, whatever the policy was granted: a policy
/// that updates every container it lists (exclusive-cpus shrinking the
/// shared pool) goes on working without reaching the host, and one that
/// aims at the host gets nothing. Said once per policy at WARN, naming it
/// and the container, then at DEBUG.
fn shield(reply: &mut wit::Reply, known: &dyn crate::merge::KnownContainers, policy: &str, event: &str) {
    static WARNED: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let mut dropped: Option<String> = None;
    let mut keep = |id: &str| {
        let hosts = known.is_hosts(id);
        if hosts && dropped.is_none() {
            dropped = Some(id.to_string());
        }
        !hosts
    };
    reply.update.retain(|u| keep(&u.container_id));
    reply.evict.retain(|e| keep(&e.container_id));
    let Some(container) = dropped else { return };
    let first = WARNED.lock().unwrap_or_else(|e| e.into_inner()).insert(policy.to_string());
    let message = "updates and evictions of the host's own container dropped from the policy's reply";
    if first {
        tracing::warn!(policy, event, container, "{message} (said once per policy)");
    } else {
        tracing::debug!(policy, event, container, "{message}");
    }
}

/// What taking a reply found.
struct Taken {
    /// The next policies see something different.
    changed: bool,
    /// The reply asked for something.
    nonempty: bool,
    /// The reply, when it is to be reported.
    change: Option<Change>,
}

/// Converts, bounds, validates and merges one reply. An audited reply is
/// merged into a copy that is dropped, to find its conflicts without effect.
fn take<S: Sink>(
    sink: &mut S,
    policy: &str,
    event: &str,
    reply: wit::Reply,
    audit: bool,
    total: &mut usize,
    explain: bool,
) -> Result<Taken, PolicyFailure> {
    let reply = sink.convert(event, reply).map_err(|e| invalid(policy, event, e))?;
    let size = reply.compute_size() as usize;
    if size > MAX_REPLY_BYTES {
        return Err(invalid(
            policy,
            event,
            format!("reply of {size} bytes exceeds the limit of {MAX_REPLY_BYTES} bytes"),
        ));
    }
    if *total + size > MAX_TOTAL_REPLY_BYTES {
        return Err(invalid(
            policy,
            event,
            format!("reply of {size} bytes would take the merged reply past {MAX_TOTAL_REPLY_BYTES} bytes"),
        ));
    }
    // An audited policy's reply is merged into a copy, which shares the
    // container until it changes it; any other merge changes it in place.
    debug_assert!(audit || sink.exclusive(), "{policy} on {event}: something still holds what the merge changes");
    let merged = if audit { sink.clone().merge(policy, &reply) } else { sink.merge(policy, &reply) };
    let changed = merged.map_err(|e| match e {
        MergeError::Invalid { reason, .. } => invalid(policy, event, reason),
        MergeError::UpdatesCreatedContainer { .. } => invalid(policy, event, e),
        // A policy that contradicts itself made an invalid reply; only two
        // policies make a conflict.
        MergeError::Conflict { field, first, second } if first == second => {
            invalid(policy, event, format!("it sets {field} twice"))
        }
        conflict @ MergeError::Conflict { .. } => {
            PolicyFailure::Conflict { policy: policy.into(), event: event.into(), conflict }
        }
    })?;
    if !audit {
        *total += size;
    }
    // Moved, not printed: a report makes its text when it shows it.
    let change = if explain { S::change(reply) } else { None };
    Ok(Taken { changed, nonempty: size > 0, change })
}

/// Why a policy is skipped for want of time: where the chain's budget went
/// (waits before the chain started, the policies that ran before it and
/// the chain's own work between them), so that an operator can tell a slow
/// runtime from a crowded host or a slow policy. The policies' share is the
/// sum of their measured calls, not the clock since the plan: with none
/// called before it (none, or only policies skipped, quarantined or not
/// ready), none is blamed.
fn no_time_left(cx: &EvalContext, run: &Run<'_>) -> String {
    let ms = |d: Duration| d.as_millis();
    let w = cx.waits;
    let chain = run.planned_at.map(|t| t.elapsed()).unwrap_or_default();
    // The policies of this plan that were called (one skipped, quarantined
    // or not ready took no time and is not counted).
    let (called, took) = run.steps[run.planned_steps..]
        .iter()
        .map(|s| s.elapsed)
        .filter(|d| !d.is_zero())
        .fold((0, Duration::ZERO), |(n, sum), d| (n + 1, sum + d));
    let before = match called {
        0 => "no policy ran before this one".to_string(),
        1 => format!("the policy before this one took {} ms", ms(took)),
        n => format!("the {n} policies before this one took {} ms", ms(took)),
    };
    let own = chain.saturating_sub(took);
    format!(
        "no time left in the chain's budget ({} ms left): before the chain started the event waited {} ms for \
         policies still loading and {} ms for a call slot (max-concurrent-calls); {before}, the chain's own work {} ms",
        ms(cx.deadline.saturating_duration_since(Instant::now())),
        ms(w.loading),
        ms(w.slot),
        ms(own)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(adjust: bool, evict: bool) -> wit::Reply {
        let adjust = adjust.then(|| wit::ContainerAdjustment::from(&pb::ContainerAdjustment::default()));
        let evict =
            if evict { vec![wit::ContainerEviction { container_id: "c".into(), reason: "r".into() }] } else { vec![] };
        wit::Reply { adjust, update: vec![], evict }
    }

    /// A reply with a part its event cannot carry is refused for what it
    /// is, before any merge: the kind is the error's type, the text names
    /// the event.
    #[test]
    fn a_reply_with_parts_its_event_cannot_take_is_refused_for_what_it_is() {
        let updates = UpdatesSink(UpdatesMerge::default());
        let e = updates.convert("RemoveContainer", reply(true, false)).unwrap_err();
        assert!(matches!(&e, ReplyRefused::Adjustment { event } if event == "RemoveContainer"), "{e:?}");
        assert_eq!(e.to_string(), "RemoveContainer allows no adjustment");
        assert!(updates.convert("RemoveContainer", reply(false, true)).is_ok(), "evictions go out afterwards");

        let e = VerdictSink.convert("ValidateContainerAdjustment", reply(false, true)).unwrap_err();
        assert!(matches!(e, ReplyRefused::NotAVerdict { .. }), "{e:?}");
        assert_eq!(e.to_string(), "ValidateContainerAdjustment allows no adjustments, updates or evictions");
        assert!(VerdictSink.convert("ValidateContainerAdjustment", reply(false, false)).is_ok());
    }
}
