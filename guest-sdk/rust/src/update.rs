//! Updates of containers other than the one the event is about.
//!
//! An update is the one output that reaches past the event's container (a
//! policy that hands a container exclusive CPUs moves the others off them),
//! so it is kept apart from the adjustment builders: the host treats it as a
//! dangerous capability (`updates`) that the operator grants by name.

use crate::{ContainerUpdate, LinuxCpu, LinuxResources};

impl ContainerUpdate {
    /// An update of `container_id` with the given resources.
    pub fn new(container_id: &str, resources: LinuxResources) -> Self {
        ContainerUpdate { container_id: container_id.into(), resources: Some(resources), ignore_failure: false }
    }

    /// An update of `container_id`'s CPU settings only.
    pub fn cpu(container_id: &str, cpu: LinuxCpu) -> Self {
        Self::new(container_id, LinuxResources { cpu: Some(cpu), ..LinuxResources::default() })
    }

    /// Marks the update as one the event does not depend on.
    pub fn ignoring_failure(mut self) -> Self {
        self.ignore_failure = true;
        self
    }
}
