//! The node view and topology as policies see them (`nri-wasm:policy/node`).

use std::collections::BTreeMap;

use nri_wasm_api::api as pb;
use protobuf::EnumOrUnknown;

use super::enums::Informational;
use crate::node::topology::Topology;
use crate::node::view::{ContainerEntry, ContainerFilter, PodEntry};
use crate::wit::{node, wit};

/// A sorted map as a list of key-values (already in key order).
fn kv(map: &BTreeMap<String, String>) -> Vec<wit::KeyValue> {
    map.iter().map(|(k, v)| wit::KeyValue { key: k.clone(), value: v.clone() }).collect()
}

fn pairs(list: Vec<wit::KeyValue>) -> Vec<(String, String)> {
    list.into_iter().map(|kv| (kv.key, kv.value)).collect()
}

impl From<&PodEntry> for node::PodInfo {
    fn from(p: &PodEntry) -> Self {
        let PodEntry { id, name, namespace, uid, labels, annotations, containers } = p;
        Self {
            id: id.clone(),
            name: name.clone(),
            namespace: namespace.clone(),
            uid: uid.clone(),
            labels: kv(labels),
            annotations: kv(annotations),
            containers: containers.iter().cloned().collect(),
        }
    }
}

impl From<&ContainerEntry> for node::ContainerInfo {
    fn from(c: &ContainerEntry) -> Self {
        let ContainerEntry { id, pod_id, name, state, labels, annotations, resources } = c;
        Self {
            id: id.clone(),
            pod_id: pod_id.clone(),
            name: name.clone(),
            state: wit::ContainerState::informational(EnumOrUnknown::new(*state)),
            labels: kv(labels),
            annotations: kv(annotations),
            resources: resources.as_ref().map(wit::LinuxResources::from),
        }
    }
}

impl From<node::ContainerFilter> for ContainerFilter {
    fn from(f: node::ContainerFilter) -> Self {
        let node::ContainerFilter { pod_id, states, labels, pod_labels } = f;
        Self {
            pod_id,
            states: states.into_iter().map(pb::ContainerState::from).collect(),
            labels: pairs(labels),
            pod_labels: pairs(pod_labels),
        }
    }
}

impl From<&Topology> for node::NodeTopology {
    fn from(t: &Topology) -> Self {
        Self {
            online_cpus: t.online_cpus.clone(),
            numa_nodes: t
                .numa_nodes
                .iter()
                .map(|n| node::NumaNode { id: n.id, cpus: n.cpus.clone(), memory_bytes: n.memory_bytes })
                .collect(),
            memory_bytes: t.memory_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::topology::NumaNode;

    #[test]
    fn view_entries_and_filters_convert_field_by_field() {
        let mut c = ContainerEntry {
            id: "c1".into(),
            pod_id: "p1".into(),
            name: "app".into(),
            state: pb::ContainerState::CONTAINER_RUNNING,
            ..Default::default()
        };
        c.labels.insert("b".into(), "2".into());
        c.labels.insert("a".into(), "1".into());
        let mut r = pb::LinuxResources::default();
        r.cpu.mut_or_insert_default().cpus = "0-1".into();
        c.resources = Some(r);
        let info = node::ContainerInfo::from(&c);
        assert_eq!((info.id.as_str(), info.pod_id.as_str(), info.state), ("c1", "p1", wit::ContainerState::Running));
        assert_eq!(info.labels.iter().map(|kv| kv.key.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(info.resources.unwrap().cpu.unwrap().cpus, "0-1");

        let f = ContainerFilter::from(node::ContainerFilter {
            pod_id: Some("p1".into()),
            states: vec![wit::ContainerState::Created, wit::ContainerState::Running],
            labels: vec![wit::KeyValue { key: "a".into(), value: "1".into() }],
            pod_labels: vec![],
        });
        assert_eq!(f.states, [pb::ContainerState::CONTAINER_CREATED, pb::ContainerState::CONTAINER_RUNNING]);
        assert_eq!(f.labels, [("a".to_string(), "1".to_string())]);

        let t = Topology {
            online_cpus: vec![0, 1, 2, 3],
            numa_nodes: vec![
                NumaNode { id: 0, cpus: vec![0, 1], memory_bytes: 10 },
                NumaNode { id: 1, cpus: vec![2, 3], memory_bytes: 20 },
            ],
            memory_bytes: 30,
        };
        let w = node::NodeTopology::from(&t);
        assert_eq!((w.online_cpus.len(), w.numa_nodes[1].cpus.clone(), w.memory_bytes), (4, vec![2, 3], 30));
    }
}
