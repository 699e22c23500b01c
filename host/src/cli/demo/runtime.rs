//! The simulated runtime's side of the demo: each pod's life, event by
//! event, as containerd orders them, with the plugin's answers handed to
//! the report. Kept apart from the report so that what is sent and what is
//! said about it can be read (and changed) one at a time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_sim::{PluginConn, SimError};
use nri_wasm_api::api as pb;
use protobuf::MessageField;

use super::describe;
use super::report::{EventResult, Report};
use super::scenario::Scenario;
use crate::cli::steps::StepLog;

/// The simulated runtime's side of a pod's life, as containerd orders the
/// events (a runtime sends only those the plugin subscribed to).
pub(super) struct Runtime<'a> {
    pub(super) conn: &'a mut PluginConn,
    pub(super) model: &'a nri_sim::node::SharedModel,
    pub(super) dispatcher: &'a Arc<crate::policy::dispatcher::PolicyDispatcher>,
    pub(super) recorder: &'a StepLog,
}

impl Runtime<'_> {
    /// RunPodSandbox, CreateContainer (+Post), StartContainer (+Post).
    /// Returns the container if it was created.
    pub(super) async fn lifecycle(
        &mut self,
        s: &Scenario,
        report: &mut Report<'_>,
    ) -> anyhow::Result<Option<pb::Container>> {
        let pod = &s.pod;
        let target = format!("{}/{}", pod.namespace, pod.name);
        self.model.lock().expect("model lock").pods.insert(pod.id.clone(), pod.clone());
        if self.conn.is_subscribed(pb::Event::RUN_POD_SANDBOX) {
            let t = Instant::now();
            let r = self.conn.run_pod_sandbox(pod).await;
            self.notified("RunPodSandbox", &target, t, r, report).await?;
        }
        let ctarget = format!("{target}/{}", s.container.name);
        let mut container = s.container.clone();
        container.state = pb::ContainerState::CONTAINER_UNKNOWN.into();
        let (reply, error, elapsed) = if self.conn.is_subscribed(pb::Event::CREATE_CONTAINER) {
            let t = Instant::now();
            match self.conn.create_container(pod, &container).await {
                Ok(reply) => (Some(reply), None, t.elapsed()),
                Err(e) => (None, Some(refusal(&e)), t.elapsed()),
            }
        } else {
            (Some(pb::CreateContainerResponse::default()), None, Duration::ZERO)
        };
        let steps = self.recorder.take();
        let result = EventResult {
            event: "CreateContainer",
            target: ctarget.clone(),
            elapsed,
            reply: reply.as_ref(),
            error: error.clone(),
        };
        report.event(&result, &steps)?;
        report.check(s, &result, &steps);
        let Some(reply) = reply else {
            report.refused += 1;
            return Ok(None);
        };
        report.created += 1;
        let req = pb::CreateContainerRequest {
            pod: MessageField::some(pod.clone()),
            container: MessageField::some(container),
            ..Default::default()
        };
        let mut created = self.model.lock().expect("model lock").create(&req, &reply);
        self.model.lock().expect("model lock").apply_updates(&reply.update);
        if self.conn.is_subscribed(pb::Event::POST_CREATE_CONTAINER) {
            let t = Instant::now();
            let r = self.conn.post_create_container(pod, &created).await;
            self.notified("PostCreateContainer", &ctarget, t, r, report).await?;
        }
        if self.conn.is_subscribed(pb::Event::START_CONTAINER) {
            let t = Instant::now();
            let r = self.conn.start_container(pod, &created).await;
            self.notified("StartContainer", &ctarget, t, r, report).await?;
        }
        self.model.lock().expect("model lock").set_state(&created.id, pb::ContainerState::CONTAINER_RUNNING);
        created.state = pb::ContainerState::CONTAINER_RUNNING.into();
        if self.conn.is_subscribed(pb::Event::POST_START_CONTAINER) {
            let t = Instant::now();
            let r = self.conn.post_start_container(pod, &created).await;
            self.notified("PostStartContainer", &ctarget, t, r, report).await?;
        }
        Ok(Some(created))
    }

    /// StopContainer (whose reply may update others), RemoveContainer.
    pub(super) async fn stop_and_remove(
        &mut self,
        pod: &pb::PodSandbox,
        c: &pb::Container,
        report: &mut Report<'_>,
    ) -> anyhow::Result<()> {
        let target = format!("{}/{}/{}", pod.namespace, pod.name, c.name);
        if self.conn.is_subscribed(pb::Event::STOP_CONTAINER) {
            let t = Instant::now();
            let r = self.conn.stop_container(pod, c).await;
            let elapsed = t.elapsed();
            let (reply, error) = match r {
                Ok(r) => (Some(pb::CreateContainerResponse { update: r.update, ..Default::default() }), None),
                Err(e) => (None, Some(refusal(&e))),
            };
            if let Some(reply) = &reply {
                self.model.lock().expect("model lock").apply_updates(&reply.update);
            }
            let steps = self.recorder.take();
            report.event(
                &EventResult { event: "StopContainer", target: target.clone(), elapsed, reply: reply.as_ref(), error },
                &steps,
            )?;
            self.pushed(report).await?;
        }
        self.model.lock().expect("model lock").set_state(&c.id, pb::ContainerState::CONTAINER_STOPPED);
        let t = Instant::now();
        let r = self.conn.remove_container(pod, c).await;
        self.model.lock().expect("model lock").containers.remove(&c.id);
        if self.conn.is_subscribed(pb::Event::REMOVE_CONTAINER) {
            self.notified("RemoveContainer", &target, t, r, report).await?;
        }
        Ok(())
    }

    /// Reports an event with no reply, then any updates the plugin pushed
    /// because of it.
    async fn notified(
        &mut self,
        event: &'static str,
        target: &str,
        started: Instant,
        result: Result<(), SimError>,
        report: &mut Report<'_>,
    ) -> anyhow::Result<()> {
        let elapsed = started.elapsed();
        let steps = self.recorder.take();
        let error = result.err().map(|e| refusal(&e));
        if !steps.is_empty() || error.is_some() {
            report.event(&EventResult { event, target: target.into(), elapsed, reply: None, error }, &steps)?;
        } else {
            report.quiet_event(event, elapsed);
        }
        self.pushed(report).await
    }

    /// UpdateContainers the plugin sent on its own (policies changing other
    /// containers on an event with no reply), once they were answered.
    async fn pushed(&mut self, report: &mut Report<'_>) -> anyhow::Result<()> {
        self.dispatcher.outbox_flushed(Duration::from_secs(2)).await;
        while let Some(req) = self.conn.next_update_request(Duration::from_millis(1)).await {
            let phrases = describe::updates(&req.update, &req.evict, &report.names);
            report.pushed(&phrases)?;
        }
        Ok(())
    }
}

/// The plugin's refusal as the runtime reports it.
fn refusal(e: &SimError) -> String {
    match e {
        SimError::Failed { status, .. } => status.message.clone(),
        other => other.to_string(),
    }
}
