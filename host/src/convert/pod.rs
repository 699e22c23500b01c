//! Pod sandboxes and Linux namespaces (shared by pods and containers).

use nri_wasm_api::api as pb;

use super::{kv_to_pb, kv_to_wit, list_to_pb, list_to_wit, opt_to_wit, opt_try_to_pb, ConvertError};
use crate::wit::{event, wit};

impl From<&pb::PodSandbox> for wit::PodSandbox {
    fn from(p: &pb::PodSandbox) -> Self {
        let pb::PodSandbox {
            id,
            name,
            uid,
            namespace,
            labels,
            annotations,
            runtime_handler,
            linux,
            pid,
            ips,
            special_fields: _,
        } = p;
        Self {
            id: id.clone(),
            name: name.clone(),
            uid: uid.clone(),
            namespace: namespace.clone(),
            labels: kv_to_wit(labels),
            annotations: kv_to_wit(annotations),
            runtime_handler: runtime_handler.clone(),
            linux: opt_to_wit(linux),
            pid: *pid,
            ips: ips.clone(),
        }
    }
}

/// The pod's scalar fields, what `event.pod-metadata` returns.
impl From<&pb::PodSandbox> for event::PodMeta {
    fn from(p: &pb::PodSandbox) -> Self {
        Self {
            id: p.id.clone(),
            name: p.name.clone(),
            uid: p.uid.clone(),
            namespace: p.namespace.clone(),
            runtime_handler: p.runtime_handler.clone(),
            pid: p.pid,
        }
    }
}

impl TryFrom<wit::PodSandbox> for pb::PodSandbox {
    type Error = ConvertError;
    fn try_from(p: wit::PodSandbox) -> Result<Self, ConvertError> {
        let wit::PodSandbox { id, name, uid, namespace, labels, annotations, runtime_handler, linux, pid, ips } = p;
        Ok(Self {
            id,
            name,
            uid,
            namespace,
            labels: kv_to_pb("PodSandbox.labels", labels)?,
            annotations: kv_to_pb("PodSandbox.annotations", annotations)?,
            runtime_handler,
            linux: opt_try_to_pb(linux)?,
            pid,
            ips,
            ..Default::default()
        })
    }
}

impl From<&pb::LinuxPodSandbox> for wit::LinuxPodSandbox {
    fn from(l: &pb::LinuxPodSandbox) -> Self {
        let pb::LinuxPodSandbox {
            pod_overhead,
            pod_resources,
            cgroup_parent,
            cgroups_path,
            namespaces,
            resources,
            special_fields: _,
        } = l;
        Self {
            pod_overhead: opt_to_wit(pod_overhead),
            pod_resources: opt_to_wit(pod_resources),
            cgroup_parent: cgroup_parent.clone(),
            cgroups_path: cgroups_path.clone(),
            namespaces: list_to_wit(namespaces),
            resources: opt_to_wit(resources),
        }
    }
}

impl TryFrom<wit::LinuxPodSandbox> for pb::LinuxPodSandbox {
    type Error = ConvertError;
    fn try_from(l: wit::LinuxPodSandbox) -> Result<Self, ConvertError> {
        let wit::LinuxPodSandbox { pod_overhead, pod_resources, cgroup_parent, cgroups_path, namespaces, resources } =
            l;
        Ok(Self {
            pod_overhead: opt_try_to_pb(pod_overhead)?,
            pod_resources: opt_try_to_pb(pod_resources)?,
            cgroup_parent,
            cgroups_path,
            namespaces: list_to_pb(namespaces),
            resources: opt_try_to_pb(resources)?,
            ..Default::default()
        })
    }
}

impl From<&pb::LinuxNamespace> for wit::LinuxNamespace {
    fn from(n: &pb::LinuxNamespace) -> Self {
        let pb::LinuxNamespace { type_, path, special_fields: _ } = n;
        Self { type_: type_.clone(), path: path.clone() }
    }
}

impl From<wit::LinuxNamespace> for pb::LinuxNamespace {
    fn from(n: wit::LinuxNamespace) -> Self {
        let wit::LinuxNamespace { type_, path } = n;
        Self { type_, path, ..Default::default() }
    }
}
