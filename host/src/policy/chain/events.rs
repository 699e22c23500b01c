//! The chain for each kind of event: which policies run, what they see,
//! where their replies go.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_wasm_api::api as pb;

use super::pipeline::{CreateSink, Run, StopSink, UpdateSink, UpdatesSink, VerdictSink};
use super::{container_target, Chain, ChainEntry, ChainError, EvalContext, Evaluated, Outcome, PolicyFailure, Step};
use crate::merge::{CreateMerge, Known, StopMerge, UpdateMerge, UpdatesMerge};
use crate::node::view::{container_entry, overlay_resources, ContainerEntry};
use crate::nri::version::EventKind;
use crate::policy::call::event::CallEvent;
use crate::wit::wit;

impl EvalContext {
    /// What the merge may know of the node's containers.
    fn known(&self) -> Known {
        self.known.clone()
    }
}

impl Chain {
    /// The start-up contract for the policies that are not ready yet and
    /// would see this event (the dispatcher already waited for them, within
    /// the event's budget): a mandatory one fails an event it refuses while
    /// loading ([`super::REFUSED_WHILE_LOADING`]), naming itself and that
    /// it is not ready; otherwise it is skipped, and the skip is reported
    /// as its step ("skipped, not ready yet").
    fn pass_not_ready(&self, cx: &EvalContext, run: &mut Run<'_>) -> Result<(), ChainError> {
        for pending in self.not_ready(run.event) {
            let (policy, event, reason) = (pending.name.clone(), run.event.to_string(), pending.reason());
            if pending.refuses(run.event) {
                let failure = PolicyFailure::NotLoaded { policy, event, reason };
                return Err(ChainError::Failed { target: run.target.to_string(), failure: Box::new(failure) });
            }
            let failure = PolicyFailure::Skipped { policy: policy.clone(), event, reason };
            tracing::warn!(error = %failure, target = run.target, "policy not ready: the event goes on without it");
            let outcome = Outcome::Failed { failure, ignored: true };
            let step = Step { policy, audit: false, fuel: 0, elapsed: Duration::ZERO, outcome };
            if let Some(observer) = &cx.observer {
                observer.step(run.event, run.target, &step);
            }
            run.steps.push(step);
        }
        Ok(())
    }

    /// Runs the chain for an event whose reply to the runtime carries
    /// nothing (pod events, post-events, start, remove, pod updates).
    /// Policies may deny it, and may update or evict other containers: those
    /// go to the runtime with UpdateContainers once the event is answered.
    /// `event` is built only if some policy subscribed to `kind`.
    pub async fn notify(
        &self,
        cx: &EvalContext,
        kind: EventKind,
        event: impl FnOnce() -> CallEvent,
        target: &str,
    ) -> Result<Evaluated<()>, ChainError> {
        let mut run = Run::new(target, kind.name());
        if !self.wants(kind) {
            return Ok(run.done(()));
        }
        self.pass_not_ready(cx, &mut run)?;
        let event = event();
        let entries: Vec<&ChainEntry> = self.subscribed(kind).collect();
        run.plan(entries.iter().copied(), cx, Instant::now());
        let mut sink = UpdatesSink(UpdatesMerge::new().knowing(cx.known()));
        for (i, entry) in entries.into_iter().enumerate() {
            self.run_one(entry, i, cx, &mut run, event.clone(), None, &mut sink).await?;
        }
        let (update, evict) = sink.0.finish();
        run.effects.update = update;
        run.effects.evict = evict;
        Ok(run.done(()))
    }

    /// Synchronize: the node view was rebuilt from what the runtime reported.
    /// Policies subscribed to `synchronize` reconcile their state; their
    /// updates go into the Synchronize reply, their evictions out with
    /// UpdateContainers.
    pub async fn synchronize(&self, cx: &EvalContext) -> Result<Evaluated<Vec<pb::ContainerUpdate>>, ChainError> {
        let mut run = Run::new("the node", "Synchronize");
        self.pass_not_ready(cx, &mut run)?;
        let entries: Vec<&ChainEntry> = self.entries.iter().filter(|e| e.policy.wants_synchronize()).collect();
        run.plan(entries.iter().copied(), cx, Instant::now());
        let mut sink = UpdatesSink(UpdatesMerge::new().knowing(cx.known()));
        let event = CallEvent::synchronize();
        for (i, entry) in entries.into_iter().enumerate() {
            self.run_one(entry, i, cx, &mut run, event.clone(), None, &mut sink).await?;
        }
        let (update, evict) = sink.0.finish();
        run.effects.evict = evict;
        Ok(run.done(update))
    }

    /// CreateContainer: adjust the new container, update others, evict; then
    /// the policy-level validation of the merged result.
    pub async fn create_container(
        &self,
        cx: &EvalContext,
        req: &pb::CreateContainerRequest,
    ) -> Result<Evaluated<pb::CreateContainerResponse>, ChainError> {
        let kind = EventKind::CreateContainer;
        let target = container_target(&req.pod, &req.container);
        if let Some((policy, reason)) = self.mandatory_missing() {
            let failure = PolicyFailure::NotLoaded { policy, event: kind.name().into(), reason };
            return Err(ChainError::Failed { target, failure: Box::new(failure) });
        }
        let mut run = Run::new(&target, kind.name());
        if !self.wants(kind) {
            return Ok(run.done(pb::CreateContainerResponse::default()));
        }
        self.pass_not_ready(cx, &mut run)?;
        let creators: Vec<&ChainEntry> = self.subscribed(kind).collect();
        let validators: Vec<&ChainEntry> = self.subscribed(EventKind::ValidateContainerAdjustment).collect();
        run.plan(creators.iter().chain(&validators).copied(), cx, Instant::now());
        let mut sink = CreateSink(CreateMerge::new(req).knowing(cx.known()));
        let mut pod: Option<Arc<pb::PodSandbox>> = None;
        let mut current: Option<Arc<ContainerEntry>> = None;
        for (i, entry) in creators.iter().enumerate() {
            let pod = pod.get_or_insert_with(|| Arc::new((*req.pod).clone()));
            if entry.policy.reads_node() && current.is_none() {
                current = Some(Arc::new(container_entry(sink.0.container())));
            }
            // Each policy reads the container as the ones before it left it:
            // the merge's own copy, shared for the length of the call.
            let event =
                CallEvent::container(wit::EventKind::CreateContainer, pod.clone(), sink.0.shared_container().clone());
            if self.run_one(entry, i, cx, &mut run, event, current.as_ref(), &mut sink).await? {
                current = None;
            }
        }
        let owners = sink.0.owners();
        let response = sink.0.finish();
        if !validators.is_empty() {
            let vreq = pb::ValidateContainerAdjustmentRequest {
                pod: req.pod.clone(),
                container: req.container.clone(),
                adjust: response.adjust.clone(),
                update: response.update.clone(),
                owners: protobuf::MessageField::some(owners),
                ..Default::default()
            };
            let event = CallEvent::validation(vreq);
            let previous = run.event;
            run.event = EventKind::ValidateContainerAdjustment.name();
            for (i, entry) in validators.into_iter().enumerate() {
                let index = creators.len() + i;
                self.run_one(entry, index, cx, &mut run, event.clone(), None, &mut VerdictSink).await?;
            }
            run.event = previous;
        }
        Ok(run.done(response))
    }

    /// UpdateContainer: updates (of this and other containers) and evictions.
    pub async fn update_container(
        &self,
        cx: &EvalContext,
        req: &pb::UpdateContainerRequest,
    ) -> Result<Evaluated<pb::UpdateContainerResponse>, ChainError> {
        let kind = EventKind::UpdateContainer;
        let target = container_target(&req.pod, &req.container);
        let mut run = Run::new(&target, kind.name());
        if !self.wants(kind) {
            return Ok(run.done(pb::UpdateContainerResponse::default()));
        }
        self.pass_not_ready(cx, &mut run)?;
        let entries: Vec<&ChainEntry> = self.subscribed(kind).collect();
        run.plan(entries.iter().copied(), cx, Instant::now());
        let pod = Arc::new((*req.pod).clone());
        let container = Arc::new((*req.container).clone());
        let mut sink = UpdateSink(UpdateMerge::new(req).knowing(cx.known()));
        for (i, entry) in entries.into_iter().enumerate() {
            let current = entry.policy.reads_node().then(|| {
                let mut c = cx
                    .env
                    .view
                    .container(&req.container.id)
                    .cloned()
                    .unwrap_or_else(|| container_entry(&req.container));
                overlay_resources(c.resources.get_or_insert_with(Default::default), sink.0.resources());
                Arc::new(c)
            });
            let requested = Arc::new(sink.0.resources().clone());
            let event = CallEvent::update_container(pod.clone(), container.clone(), requested);
            self.run_one(entry, i, cx, &mut run, event, current.as_ref(), &mut sink).await?;
        }
        Ok(run.done(sink.0.finish()))
    }

    /// StopContainer: updates of other containers in the reply; evictions
    /// go out with UpdateContainers.
    pub async fn stop_container(
        &self,
        cx: &EvalContext,
        req: &pb::StopContainerRequest,
    ) -> Result<Evaluated<pb::StopContainerResponse>, ChainError> {
        let kind = EventKind::StopContainer;
        let target = container_target(&req.pod, &req.container);
        let mut run = Run::new(&target, kind.name());
        if !self.wants(kind) {
            return Ok(run.done(pb::StopContainerResponse::default()));
        }
        self.pass_not_ready(cx, &mut run)?;
        let entries: Vec<&ChainEntry> = self.subscribed(kind).collect();
        run.plan(entries.iter().copied(), cx, Instant::now());
        let event = CallEvent::from(req);
        let mut sink = StopSink {
            merge: StopMerge::new(req).knowing(cx.known()),
            evictions: UpdatesMerge::new().knowing(cx.known()),
        };
        for (i, entry) in entries.into_iter().enumerate() {
            self.run_one(entry, i, cx, &mut run, event.clone(), None, &mut sink).await?;
        }
        run.effects.evict = sink.evictions.finish().1;
        Ok(run.done(sink.merge.finish()))
    }
}
