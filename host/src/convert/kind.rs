//! Event kinds: the WIT world's `event-kind` and the protocol's
//! [`EventKind`], which the loader (a subscription) and a call (the event's
//! name) both translate.

use crate::nri::version::EventKind;
use crate::wit::wit;

/// Protocol event of a WIT event kind (`synchronize` has none: it is not
/// an event a plugin subscribes to).
pub fn event_kind(k: wit::EventKind) -> Option<EventKind> {
    Some(match k {
        wit::EventKind::RunPodSandbox => EventKind::RunPodSandbox,
        wit::EventKind::StopPodSandbox => EventKind::StopPodSandbox,
        wit::EventKind::RemovePodSandbox => EventKind::RemovePodSandbox,
        wit::EventKind::CreateContainer => EventKind::CreateContainer,
        wit::EventKind::PostCreateContainer => EventKind::PostCreateContainer,
        wit::EventKind::StartContainer => EventKind::StartContainer,
        wit::EventKind::PostStartContainer => EventKind::PostStartContainer,
        wit::EventKind::UpdateContainer => EventKind::UpdateContainer,
        wit::EventKind::PostUpdateContainer => EventKind::PostUpdateContainer,
        wit::EventKind::StopContainer => EventKind::StopContainer,
        wit::EventKind::RemoveContainer => EventKind::RemoveContainer,
        wit::EventKind::UpdatePodSandbox => EventKind::UpdatePodSandbox,
        wit::EventKind::PostUpdatePodSandbox => EventKind::PostUpdatePodSandbox,
        wit::EventKind::ValidateContainerAdjustment => EventKind::ValidateContainerAdjustment,
        wit::EventKind::Synchronize => return None,
    })
}
