//! The host's view of the node: pods, containers, topology.
//!
//! Policies that manage resources across containers (CPU pools, throttling
//! of neighbours) need more than the event: this is the host's record of
//! every pod and container on the node. Container ids come packed in one
//! string ([`ContainerIds`]) because a node can hold thousands of them and a
//! list of strings would cost one allocation each in the guest.

pub use crate::bindings::nri_wasm::policy::node::*;
// The functions, from where the SDK reaches the host (the generated
// imports themselves on wasm32, the test host elsewhere).
pub use crate::sys::node::{container, containers, pod, pods, topology};

/// The ids of the containers `filter` selects, sorted.
pub fn container_ids(filter: &ContainerFilter) -> ContainerIds {
    ContainerIds(crate::sys::node::container_ids(filter))
}

/// Container ids as the host sends them (packed), read in place.
#[derive(Debug, Clone)]
pub struct ContainerIds(IdList);

impl ContainerIds {
    /// The id at `i`.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.0.ends.get(i)? as usize;
        let start = if i == 0 { 0 } else { self.0.ends[i - 1] as usize };
        self.0.ids.get(start..end)
    }

    pub fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    pub fn len(&self) -> usize {
        self.0.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.ends.is_empty()
    }

    pub fn contains(&self, id: &str) -> bool {
        self.iter().any(|i| i == id)
    }
}

impl ContainerFilter {
    /// Every container.
    pub fn all() -> Self {
        ContainerFilter { pod_id: None, states: Vec::new(), labels: Vec::new(), pod_labels: Vec::new() }
    }

    /// The containers of one pod.
    pub fn of_pod(pod_id: &str) -> Self {
        ContainerFilter { pod_id: Some(pod_id.into()), ..Self::all() }
    }

    /// Only containers in one of `states`.
    pub fn in_states(mut self, states: &[crate::ContainerState]) -> Self {
        self.states = states.to_vec();
        self
    }

    /// Only containers carrying label `key=value`.
    pub fn with_label(mut self, key: &str, value: &str) -> Self {
        self.labels.push(crate::kv(key, value));
        self
    }

    /// Only containers whose pod carries label `key=value`.
    pub fn with_pod_label(mut self, key: &str, value: &str) -> Self {
        self.pod_labels.push(crate::kv(key, value));
        self
    }
}

impl ContainerInfo {
    pub fn label(&self, key: &str) -> Option<&str> {
        crate::find(&self.labels, key)
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        crate::find(&self.annotations, key)
    }
}

impl PodInfo {
    pub fn label(&self, key: &str) -> Option<&str> {
        crate::find(&self.labels, key)
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        crate::find(&self.annotations, key)
    }
}
