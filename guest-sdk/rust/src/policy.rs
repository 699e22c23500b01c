//! The [`Policy`] trait and the dispatch from the component's exports to it.
//!
//! The WIT world has one `handle(kind)` export; a trait with one method per
//! event, each with a default that changes nothing, lets a policy write only
//! the handlers of the events it asked for, and keeps the match on the kind
//! in one place (here) instead of in every policy.

use crate::{Event, EventKind, Reply};

/// Every lifecycle event of pods and containers: what a policy that wants
/// to see everything returns from [`Policy::events`] (add
/// `ValidateContainerAdjustment` and `Synchronize` to it for those steps).
pub const LIFECYCLE_EVENTS: [EventKind; 13] = [
    EventKind::RunPodSandbox,
    EventKind::StopPodSandbox,
    EventKind::RemovePodSandbox,
    EventKind::CreateContainer,
    EventKind::PostCreateContainer,
    EventKind::StartContainer,
    EventKind::PostStartContainer,
    EventKind::UpdateContainer,
    EventKind::PostUpdateContainer,
    EventKind::StopContainer,
    EventKind::RemoveContainer,
    EventKind::UpdatePodSandbox,
    EventKind::PostUpdatePodSandbox,
];

/// A policy. Override `events` and the handlers of those events.
pub trait Policy {
    /// The events the host delivers to this policy.
    fn events() -> Vec<EventKind>;

    /// Checks the settings when the host loads the policy (the component's
    /// `configure`); an error keeps the policy from loading. Handlers read
    /// the settings with [`settings()`](crate::settings()): they run in fresh instances, which
    /// have not seen this call.
    fn init(_settings: &str) -> Result<(), String> {
        Ok(())
    }

    fn run_pod_sandbox(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn stop_pod_sandbox(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn remove_pod_sandbox(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn create_container(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn post_create_container(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn start_container(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn post_start_container(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn update_container(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn post_update_container(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn stop_container(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn remove_container(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn update_pod_sandbox(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    fn post_update_pod_sandbox(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    /// Return `Err(reason)` to reject the chain's merged adjustment.
    fn validate_container_adjustment(_event: &Event) -> Result<Reply, String> {
        Ok(Reply::none())
    }
    /// The runtime (re)connected; the node view holds everything it
    /// reported. Reconcile state here; updates go back to the runtime.
    fn synchronize() -> Result<Reply, String> {
        Ok(Reply::none())
    }
}

#[doc(hidden)]
pub fn __init<P: Policy>(settings: String) -> Result<Vec<EventKind>, String> {
    P::init(&settings)?;
    Ok(P::events())
}

#[doc(hidden)]
pub fn __handle<P: Policy>(kind: EventKind) -> Result<Reply, String> {
    let e = Event::__new(kind);
    match kind {
        EventKind::RunPodSandbox => P::run_pod_sandbox(&e),
        EventKind::StopPodSandbox => P::stop_pod_sandbox(&e),
        EventKind::RemovePodSandbox => P::remove_pod_sandbox(&e),
        EventKind::CreateContainer => P::create_container(&e),
        EventKind::PostCreateContainer => P::post_create_container(&e),
        EventKind::StartContainer => P::start_container(&e),
        EventKind::PostStartContainer => P::post_start_container(&e),
        EventKind::UpdateContainer => P::update_container(&e),
        EventKind::PostUpdateContainer => P::post_update_container(&e),
        EventKind::StopContainer => P::stop_container(&e),
        EventKind::RemoveContainer => P::remove_container(&e),
        EventKind::UpdatePodSandbox => P::update_pod_sandbox(&e),
        EventKind::PostUpdatePodSandbox => P::post_update_pod_sandbox(&e),
        EventKind::ValidateContainerAdjustment => P::validate_container_adjustment(&e),
        EventKind::Synchronize => P::synchronize(),
    }
}
