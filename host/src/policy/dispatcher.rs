//! The policy chain behind the NRI transport: [`PolicyDispatcher`]
//! implements [`Dispatcher`].
//!
//! Handlers stay thin: each converts nothing itself and hands a closure to
//! [`PolicyDispatcher::evaluate`], which owns the three promises the chain
//! makes to the runtime:
//! - **in time**: the chain gets a deadline of `budget-fraction` of the
//!   runtime's request timeout (from Configure); every policy call gets at
//!   most the time left, and a call that cannot start in time is skipped (its
//!   `on-error` decides). An async-side timeout backs this up, so a stuck
//!   thread can never hold the runtime's answer.
//! - **off the reactor**: wasm runs on the blocking pool, never on the
//!   threads that serve the socket;
//! - **bounded**: at most `max-concurrent-calls` evaluations run at once
//!   (a semaphore); one waiting for a permit past its deadline is answered
//!   with every policy skipped.

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nri_wasm_api::api as pb;
use tokio::sync::Semaphore;

use super::bindings::wit;
use super::chain::{container_target, pod_target, Chain, ChainError, EvalContext, Step};
use super::engine::{Facts, PolicyEngine};
use crate::nri::service::DEFAULT_REQUEST_TIMEOUT;
use crate::nri::version::{EventKind, EventMask};
use crate::nri::{DispatchError, Dispatcher, RuntimeInfo};

/// Extra time the async side waits for a chain past its deadline before it
/// gives up on the blocking thread (which ends shortly after anyway).
const GRACE: Duration = Duration::from_millis(20);

impl From<ChainError> for DispatchError {
    fn from(e: ChainError) -> Self {
        match e {
            ChainError::Denied { .. } => DispatchError::Denied(e.to_string()),
            ChainError::Failed { .. } => DispatchError::Internal(e.to_string()),
        }
    }
}

/// Runs the policy chain for every NRI event.
pub struct PolicyDispatcher {
    engine: Arc<PolicyEngine>,
    chain: RwLock<Arc<Chain>>,
    facts: RwLock<Arc<Facts>>,
    request_timeout: Mutex<Duration>,
    permits: Arc<Semaphore>,
}

impl std::fmt::Debug for PolicyDispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyDispatcher").field("policies", &self.chain().len()).finish_non_exhaustive()
    }
}

impl PolicyDispatcher {
    /// A dispatcher for `chain`; `max_concurrent` evaluations at a time.
    pub fn new(engine: Arc<PolicyEngine>, chain: Chain, facts: Facts, max_concurrent: usize) -> Self {
        Self {
            engine,
            chain: RwLock::new(Arc::new(chain)),
            facts: RwLock::new(Arc::new(facts)),
            request_timeout: Mutex::new(DEFAULT_REQUEST_TIMEOUT),
            permits: Arc::new(Semaphore::new(max_concurrent.max(1))),
        }
    }

    /// The chain events are evaluated with now.
    pub fn chain(&self) -> Arc<Chain> {
        self.chain.read().expect("chain lock").clone()
    }

    /// Swaps in a new chain; evaluations under way finish with the old one.
    pub fn replace_chain(&self, chain: Chain) {
        *self.chain.write().expect("chain lock") = Arc::new(chain);
    }

    /// The facts policies are shown now.
    pub fn facts(&self) -> Arc<Facts> {
        self.facts.read().expect("facts lock").clone()
    }

    /// The chain's time budget for one event.
    pub fn budget(&self) -> Duration {
        let timeout = *self.request_timeout.lock().expect("timeout lock");
        self.chain().settings().budget(timeout)
    }

    /// Evaluates `f` against the current chain within the chain deadline.
    async fn evaluate<T, F>(&self, kind: EventKind, f: F) -> Result<T, DispatchError>
    where
        T: Send + 'static,
        F: FnOnce(&Chain, &EvalContext) -> Result<(T, Vec<Step>), ChainError> + Send + 'static,
    {
        let budget = self.budget();
        let deadline = Instant::now() + budget;
        let chain = self.chain();
        let cx = EvalContext { engine: self.engine.clone(), facts: self.facts(), deadline };
        if !chain.wants(kind) {
            // No policy runs: only conversion and merge, cheap enough inline.
            return f(&chain, &cx).map(|(t, _)| t).map_err(DispatchError::from);
        }
        // Waiting for a permit counts against the deadline. Without one in
        // time the chain still runs: every call finds no time left and is
        // skipped, so each policy's on-error decides, without running wasm.
        let permit = tokio::time::timeout_at(deadline.into(), self.permits.clone().acquire_owned()).await.ok();
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let out = f(&chain, &cx);
            if let Ok((_, steps)) = &out {
                for step in steps {
                    tracing::debug!(event = kind.name(), ?step, "policy step");
                }
            }
            out
        });
        match tokio::time::timeout_at((deadline + GRACE).into(), task).await {
            Ok(Ok(out)) => out.map(|(t, _)| t).map_err(DispatchError::from),
            Ok(Err(join)) => Err(DispatchError::Internal(format!("{kind}: policy evaluation panicked: {join}"))),
            Err(_) => Err(DispatchError::DeadlineExceeded(budget)),
        }
    }

    /// An event whose policies may only observe or deny.
    async fn notify(&self, kind: EventKind, event: wit::Event, target: String) -> Result<(), DispatchError> {
        self.evaluate(kind, move |chain, cx| chain.notify(cx, kind, &event, &target).map(|steps| ((), steps))).await
    }
}

#[async_trait]
impl Dispatcher for PolicyDispatcher {
    fn events(&self) -> EventMask {
        let wanted = self.chain().events();
        if wanted.is_empty() {
            return EventMask::all().without(EventKind::ValidateContainerAdjustment);
        }
        // Policy-level validation runs inside CreateContainer; subscribing to
        // the runtime's validation would make the host a validator of every
        // other plugin instead.
        match wanted.contains(EventKind::ValidateContainerAdjustment) {
            true => wanted.without(EventKind::ValidateContainerAdjustment).with(EventKind::CreateContainer),
            false => wanted,
        }
    }

    async fn configure(&self, runtime: &RuntimeInfo) -> Result<(), DispatchError> {
        *self.request_timeout.lock().expect("timeout lock") = runtime.request_timeout;
        let mut facts = (*self.facts()).clone();
        facts.runtime = wit::RuntimeInfo {
            name: runtime.name.clone(),
            version: runtime.version.clone(),
            nri_version: runtime.nri_version.to_string(),
        };
        *self.facts.write().expect("facts lock") = Arc::new(facts);
        tracing::info!(
            policies = self.chain().len(),
            chain_budget_ms = self.budget().as_millis() as u64,
            "policy chain ready"
        );
        Ok(())
    }

    async fn run_pod_sandbox(&self, req: pb::RunPodSandboxRequest) -> Result<(), DispatchError> {
        self.notify(EventKind::RunPodSandbox, (&req).into(), pod_target(&req.pod)).await
    }

    async fn update_pod_sandbox(&self, req: pb::UpdatePodSandboxRequest) -> Result<(), DispatchError> {
        self.notify(EventKind::UpdatePodSandbox, (&req).into(), pod_target(&req.pod)).await
    }

    async fn post_update_pod_sandbox(&self, req: pb::PostUpdatePodSandboxRequest) -> Result<(), DispatchError> {
        self.notify(EventKind::PostUpdatePodSandbox, (&req).into(), pod_target(&req.pod)).await
    }

    async fn stop_pod_sandbox(&self, req: pb::StopPodSandboxRequest) -> Result<(), DispatchError> {
        self.notify(EventKind::StopPodSandbox, (&req).into(), pod_target(&req.pod)).await
    }

    async fn remove_pod_sandbox(&self, req: pb::RemovePodSandboxRequest) -> Result<(), DispatchError> {
        self.notify(EventKind::RemovePodSandbox, (&req).into(), pod_target(&req.pod)).await
    }

    async fn create_container(
        &self,
        req: pb::CreateContainerRequest,
    ) -> Result<pb::CreateContainerResponse, DispatchError> {
        self.evaluate(EventKind::CreateContainer, move |chain, cx| chain.create_container(cx, &req)).await
    }

    async fn post_create_container(&self, req: pb::PostCreateContainerRequest) -> Result<(), DispatchError> {
        let target = container_target(&req.pod, &req.container);
        self.notify(EventKind::PostCreateContainer, (&req).into(), target).await
    }

    async fn start_container(&self, req: pb::StartContainerRequest) -> Result<(), DispatchError> {
        let target = container_target(&req.pod, &req.container);
        self.notify(EventKind::StartContainer, (&req).into(), target).await
    }

    async fn post_start_container(&self, req: pb::PostStartContainerRequest) -> Result<(), DispatchError> {
        let target = container_target(&req.pod, &req.container);
        self.notify(EventKind::PostStartContainer, (&req).into(), target).await
    }

    async fn update_container(
        &self,
        req: pb::UpdateContainerRequest,
    ) -> Result<pb::UpdateContainerResponse, DispatchError> {
        self.evaluate(EventKind::UpdateContainer, move |chain, cx| chain.update_container(cx, &req)).await
    }

    async fn post_update_container(&self, req: pb::PostUpdateContainerRequest) -> Result<(), DispatchError> {
        let target = container_target(&req.pod, &req.container);
        self.notify(EventKind::PostUpdateContainer, (&req).into(), target).await
    }

    async fn stop_container(&self, req: pb::StopContainerRequest) -> Result<pb::StopContainerResponse, DispatchError> {
        self.evaluate(EventKind::StopContainer, move |chain, cx| chain.stop_container(cx, &req)).await
    }

    async fn remove_container(&self, req: pb::RemoveContainerRequest) -> Result<(), DispatchError> {
        let target = container_target(&req.pod, &req.container);
        self.notify(EventKind::RemoveContainer, (&req).into(), target).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::chain::PolicyFailure;
    use crate::policy::engine::CallError;

    #[test]
    fn chain_errors_map_to_denied_or_internal_with_the_whole_story() {
        let denied = ChainError::Denied {
            policy: "10-p".into(),
            event: "CreateContainer".into(),
            target: "container c1 (ns/pod/app)".into(),
            reason: "privileged containers are not allowed".into(),
        };
        let d = DispatchError::from(denied);
        assert!(
            matches!(&d, DispatchError::Denied(m) if m.contains("10-p") && m.contains("c1") && m.contains("privileged"))
        );
        let failed = ChainError::Failed {
            target: "container c1 (ns/pod/app)".into(),
            failure: Box::new(PolicyFailure::Call(CallError::OutOfFuel {
                policy: "20-q".into(),
                event: "CreateContainer".into(),
                limit: 1000,
            })),
        };
        let d = DispatchError::from(failed);
        let DispatchError::Internal(m) = &d else { panic!("{d:?}") };
        for part in ["20-q", "CreateContainer", "fuel limit of 1000", "container c1", "on-error = fail"] {
            assert!(m.contains(part), "{part} missing from {m}");
        }
        assert_eq!(crate::nri::service::status_of(&d).code(), ttrpc::Code::INTERNAL);
    }
}
