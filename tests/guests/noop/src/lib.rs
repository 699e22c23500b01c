//! Subscribes to every event and changes nothing: the cost of a policy call.
use nri_wasm_sdk::*;

struct Noop;

impl Policy for Noop {
    fn events() -> Vec<EventKind> {
        vec![
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
        ]
    }
}

export_policy!(Noop);
