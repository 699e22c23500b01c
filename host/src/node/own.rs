//! The host's own pod: containers no policy may update or evict.
//!
//! Run as a DaemonSet, the host is one of the node's pods. A policy granted
//! `updates` could lower that pod's memory limit until the kernel kills the
//! host, or squeeze its CPU until every answer is late; one granted
//! `evictions` could ask the runtime to evict it. Either way the node would
//! go on creating containers with no policy at all: the opposite of what
//! granting those capabilities was for, and a way for one policy to take the
//! others down with the host. So every update or eviction naming one of the
//! host's own containers is refused as the policy's invalid output, whatever
//! it was granted.
//!
//! The pod is known by its UID, which the DaemonSet hands the host from the
//! downward API (`NRI_WASM_POD_UID`, [`crate::cli::RunArgs::pod_uid`]): any
//! pod may take a name, a label or a hostname, and a pod that took the host's
//! would have its containers shielded from every policy's updates; a UID is
//! assigned by the API server. The containers are learnt from the pods the
//! runtime names: at every Synchronize (the host's own container exists
//! before the host registers), and at CreateContainer or RemoveContainer of
//! a container of that pod (an ephemeral debug container), when the host
//! subscribes to those. Without a UID (the host outside Kubernetes, or an
//! older manifest) nothing is shielded.

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};

use nri_wasm_api::api as pb;

use crate::merge::{Known, KnownContainers};

/// The host's own pod and the containers of it the runtime has named.
#[derive(Debug, Default)]
pub struct OwnPod {
    uid: Option<String>,
    containers: RwLock<Arc<BTreeSet<String>>>,
}

impl OwnPod {
    /// The pod whose UID is `uid` (`None` or empty: no pod of its own).
    pub fn new(uid: Option<String>) -> Self {
        Self { uid: uid.filter(|u| !u.is_empty()), containers: RwLock::default() }
    }

    /// The pod's UID, if the host has one.
    pub fn uid(&self) -> Option<&str> {
        self.uid.as_deref()
    }

    fn is_own(&self, pod: &pb::PodSandbox) -> bool {
        self.uid.as_deref().is_some_and(|uid| pod.uid.eq_ignore_ascii_case(uid))
    }

    /// Learns the pod's containers anew from a Synchronize. A UID that
    /// names no pod of the node shields nothing, which is said: a wrong
    /// value, or a runtime that does not pass pod UIDs.
    pub fn synchronize(&self, pods: &[pb::PodSandbox], containers: &[pb::Container]) {
        let Some(uid) = self.uid.as_deref() else { return };
        let ids: BTreeSet<&str> = pods.iter().filter(|p| self.is_own(p)).map(|p| p.id.as_str()).collect();
        let own = containers.iter().filter(|c| ids.contains(c.pod_sandbox_id.as_str())).map(|c| c.id.clone()).collect();
        let own: BTreeSet<String> = own;
        if own.is_empty() {
            tracing::warn!(pod_uid = uid, "no container of the node is in the host's own pod: none is shielded");
        } else {
            tracing::info!(
                pod_uid = uid,
                containers = own.len(),
                "the host's own containers are shielded from policies"
            );
        }
        *self.containers.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(own);
    }

    /// A container of `pod` is being created (`true`) or was removed.
    pub fn container(&self, pod: &pb::PodSandbox, id: &str, present: bool) {
        if !self.is_own(pod) {
            return;
        }
        let mut guard = self.containers.write().unwrap_or_else(|e| e.into_inner());
        let mut set = (**guard).clone();
        let changed = if present { set.insert(id.to_string()) } else { set.remove(id) };
        if changed {
            *guard = Arc::new(set);
        }
    }

    /// The ids of the pod's containers as last learnt.
    pub fn containers(&self) -> Arc<BTreeSet<String>> {
        self.containers.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `known`, refusing the pod's containers too (`known` itself when the
    /// host has none).
    pub fn guard(&self, known: Known) -> Known {
        let own = self.containers();
        if own.is_empty() {
            return known;
        }
        Arc::new(Guarded { known, own })
    }
}

/// What the node knows, with the host's own containers marked.
struct Guarded {
    known: Known,
    own: Arc<BTreeSet<String>>,
}

impl KnownContainers for Guarded {
    fn exists(&self, id: &str) -> Option<bool> {
        self.known.exists(id)
    }

    fn is_hosts(&self, id: &str) -> bool {
        self.own.contains(id) || self.known.is_hosts(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::Unknown;

    fn pod(id: &str, uid: &str) -> pb::PodSandbox {
        pb::PodSandbox { id: id.into(), uid: uid.into(), ..Default::default() }
    }

    fn ctr(id: &str, pod: &str) -> pb::Container {
        pb::Container { id: id.into(), pod_sandbox_id: pod.into(), ..Default::default() }
    }

    #[test]
    fn the_containers_of_the_pod_with_the_hosts_uid_are_its_own() {
        let own = OwnPod::new(Some("uid-host".into()));
        let pods = [pod("p-host", "uid-host"), pod("p-other", "uid-other"), pod("p-forged", "")];
        // Same names, labels, anything but the UID: not the host's.
        let containers = [ctr("c-host", "p-host"), ctr("c-other", "p-other"), ctr("c-forged", "p-forged")];
        own.synchronize(&pods, &containers);
        let known = own.guard(Arc::new(Unknown));
        assert!(known.is_hosts("c-host"));
        assert!(!known.is_hosts("c-other") && !known.is_hosts("c-forged"));
        // A debug container joins, then leaves.
        own.container(&pods[0], "c-debug", true);
        own.container(&pods[1], "c-other-2", true);
        assert_eq!(own.containers().iter().map(String::as_str).collect::<Vec<_>>(), ["c-debug", "c-host"]);
        own.container(&pods[0], "c-debug", false);
        assert!(!own.guard(Arc::new(Unknown)).is_hosts("c-debug"));
        // A Synchronize starts again from what the runtime says.
        own.synchronize(&pods[1..], &containers[1..]);
        assert!(own.containers().is_empty());
    }

    #[test]
    fn without_a_uid_nothing_is_the_hosts() {
        for uid in [None, Some(String::new())] {
            let own = OwnPod::new(uid);
            own.synchronize(&[pod("p", "")], &[ctr("c", "p")]);
            own.container(&pod("p", ""), "d", true);
            assert!(own.containers().is_empty());
            assert!(!own.guard(Arc::new(Unknown)).is_hosts("c"));
        }
    }
}
