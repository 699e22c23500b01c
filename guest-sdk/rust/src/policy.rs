//! The [`Policy`] trait and the dispatch from the component's exports to it.
//!
//! The WIT world has one `handle(kind)` export; a trait with one method per
//! event, each with a default that changes nothing, lets a policy write only
//! the handlers of the events it asked for, and keeps the match on the kind
//! in one place (here) instead of in every policy.
//!
//! What a policy subscribes to is declared once, as the constant
//! [`Policy::EVENTS`]: the component's declaration is made from it at
//! compile time (`export_policy!`), `configure` answers it by default, and
//! a narrower answer is checked against it, so the declaration the host
//! reads cannot drift from what the code subscribes to.

use crate::{Event, EventKind, Reply};

/// Every lifecycle event of pods and containers: what a policy that wants
/// to see everything declares as [`Policy::EVENTS`] (with
/// `ValidateContainerAdjustment` and `Synchronize` for those steps, a list
/// of its own).
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

/// Every event kind: the lifecycle events, `ValidateContainerAdjustment`
/// and `Synchronize`, in the WIT enum's order.
pub const ALL_EVENTS: [EventKind; 15] = [
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
    EventKind::ValidateContainerAdjustment,
    EventKind::Synchronize,
];

/// A policy. Declare [`EVENTS`](Policy::EVENTS) and override the handlers
/// of those events.
pub trait Policy {
    /// Every event this policy may ever subscribe to, whatever its
    /// settings. [`export_policy!`](crate::export_policy) records the list
    /// in the component (custom section `nri-wasm:events`), where the host
    /// reads it before compiling the component: it registers with the
    /// runtime for these events from its first second, and while the policy
    /// is still loading only these events can wait for it or fail for it.
    /// What [`events`](Policy::events) answers must be within it (the host
    /// refuses to load the policy otherwise).
    const EVENTS: &'static [EventKind];

    /// The events the host delivers to this policy, which its settings
    /// (read with [`settings()`](crate::settings())) may narrow: by default
    /// all of [`EVENTS`](Policy::EVENTS). Any event answered that
    /// `EVENTS` does not list makes `configure` fail (natively too, in the
    /// test host).
    fn events() -> Vec<EventKind> {
        Self::EVENTS.to_vec()
    }

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
    let events = P::events();
    let undeclared: Vec<&str> = events.iter().filter(|k| !P::EVENTS.contains(k)).map(|k| event_name(*k)).collect();
    if !undeclared.is_empty() {
        let declared: Vec<&str> = P::EVENTS.iter().map(|k| event_name(*k)).collect();
        return Err(format!(
            "Policy::events() answers {}, which Policy::EVENTS does not declare (it declares {}): add them to EVENTS",
            undeclared.join(", "),
            if declared.is_empty() { "none".to_string() } else { declared.join(", ") }
        ));
    }
    Ok(events)
}

/// The WIT name of an event kind (`create-container`), as declarations and
/// the host's messages spell it.
pub const fn event_name(kind: EventKind) -> &'static str {
    match kind {
        EventKind::RunPodSandbox => "run-pod-sandbox",
        EventKind::StopPodSandbox => "stop-pod-sandbox",
        EventKind::RemovePodSandbox => "remove-pod-sandbox",
        EventKind::CreateContainer => "create-container",
        EventKind::PostCreateContainer => "post-create-container",
        EventKind::StartContainer => "start-container",
        EventKind::PostStartContainer => "post-start-container",
        EventKind::UpdateContainer => "update-container",
        EventKind::PostUpdateContainer => "post-update-container",
        EventKind::StopContainer => "stop-container",
        EventKind::RemoveContainer => "remove-container",
        EventKind::UpdatePodSandbox => "update-pod-sandbox",
        EventKind::PostUpdatePodSandbox => "post-update-pod-sandbox",
        EventKind::ValidateContainerAdjustment => "validate-container-adjustment",
        EventKind::Synchronize => "synchronize",
    }
}

/// Bytes of the declaration of `events`: each name followed by a space (a
/// single space for none, so that the section exists and declares nothing).
#[doc(hidden)]
pub const fn __events_len(events: &[EventKind]) -> usize {
    let mut len = 0;
    let mut i = 0;
    while i < events.len() {
        len += event_name(events[i]).len() + 1;
        i += 1;
    }
    if len == 0 {
        1
    } else {
        len
    }
}

/// The declaration of `events`, as [`export_policy!`](crate::export_policy)
/// records it: `N` is [`__events_len`] of the same list.
#[doc(hidden)]
pub const fn __events_text<const N: usize>(events: &[EventKind]) -> [u8; N] {
    let mut out = [b' '; N];
    let mut at = 0;
    let mut i = 0;
    while i < events.len() {
        let name = event_name(events[i]).as_bytes();
        let mut j = 0;
        while j < name.len() {
            out[at] = name[j];
            at += 1;
            j += 1;
        }
        at += 1;
        i += 1;
    }
    out
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
