//! `nri-wasm:policy/node`: the node view and topology, for a policy with
//! the `node` capability; every loop charges the call's work clock.

use crate::node::view::{ContainerQuery, Expired, WorkClock, COPY_UNITS};
use crate::policy::call::store::{CallState, TRANSFER_LIMIT};
use crate::wit::{node, wit};

/// A WIT filter compiled for a query, charging `clock` for its elements.
fn query<'f>(filter: &'f node::ContainerFilter, clock: &mut WorkClock) -> Result<ContainerQuery<'f>, Expired> {
    let pairs = |l: &'f [wit::KeyValue]| l.iter().map(|kv| (kv.key.as_str(), kv.value.as_str()));
    ContainerQuery::new(
        filter.pod_id.as_deref(),
        filter.states.iter().map(|s| nri_wasm_api::api::ContainerState::from(*s)),
        pairs(&filter.labels),
        pairs(&filter.pod_labels),
        clock,
    )
}

/// Ids are 64 hex digits; a policy's own ids may be longer or shorter.
const ID_BYTES: usize = 64;

/// Bytes copied out per unit of work, besides [`COPY_UNITS`] an entry: a
/// large entry (a container with a megabyte of annotations) costs its size.
const BYTES_PER_UNIT: usize = 64;

/// The bytes an answer has copied out of the view so far: past the
/// transfer limit, the host stops copying (the answer would be refused on
/// its way into the guest anyway, after costing the host its memory).
#[derive(Debug, Default)]
struct Copied {
    bytes: usize,
    over: bool,
}

impl Copied {
    /// Counts an entry of `bytes`: whether to copy it, and its units.
    fn take(&mut self, bytes: usize) -> (bool, u64) {
        self.bytes = self.bytes.saturating_add(bytes);
        self.over |= self.bytes > TRANSFER_LIMIT;
        (!self.over, COPY_UNITS + (bytes / BYTES_PER_UNIT) as u64)
    }
}

impl node::Host for CallState {
    fn pods(&mut self) -> Vec<node::PodInfo> {
        if !self.may_read_node("node.pods") {
            return Vec::new();
        }
        let mut clock = self.clock();
        let mut pods = Vec::with_capacity(self.view().len().0);
        let mut copied = Copied::default();
        let done = self.view().each_pod(&mut clock, |p| {
            let (copy, units) = copied.take(p.bytes());
            if copy {
                pods.push(node::PodInfo::from(p));
            }
            units + p.containers.len() as u64
        });
        match done {
            Ok(()) if copied.over => {
                self.answer_too_large("node.pods");
                Vec::new()
            }
            Ok(()) => pods,
            Err(e) => {
                self.gave_up("node.pods", e);
                Vec::new()
            }
        }
    }

    fn pod(&mut self, id: String) -> Option<node::PodInfo> {
        if !self.may_read_node("node.pod") {
            return None;
        }
        self.view().pod(&id).map(node::PodInfo::from)
    }

    fn containers(&mut self, filter: node::ContainerFilter) -> Vec<node::ContainerInfo> {
        if !self.may_read_node("node.containers") {
            return Vec::new();
        }
        let mut clock = self.clock();
        let mut found = Vec::new();
        let mut copied = Copied::default();
        let done = query(&filter, &mut clock).and_then(|q| {
            self.view().query(&q, self.current.as_deref(), &mut clock, |c| {
                let (copy, units) = copied.take(c.bytes());
                if copy {
                    found.push(node::ContainerInfo::from(c));
                }
                units
            })
        });
        match done {
            Ok(()) if copied.over => {
                self.answer_too_large("node.containers");
                Vec::new()
            }
            Ok(()) => found,
            Err(e) => {
                self.gave_up("node.containers", e);
                Vec::new()
            }
        }
    }

    fn container_ids(&mut self, filter: node::ContainerFilter) -> node::IdList {
        if !self.may_read_node("node.container-ids") {
            return node::IdList { ids: String::new(), ends: Vec::new() };
        }
        let mut clock = self.clock();
        let (_, known) = self.view().len();
        // One allocation for all of them.
        let mut list =
            node::IdList { ids: String::with_capacity((known + 1) * ID_BYTES), ends: Vec::with_capacity(known + 1) };
        let done = query(&filter, &mut clock).and_then(|q| {
            self.view().query(&q, self.current.as_deref(), &mut clock, |c| {
                list.ids.push_str(&c.id);
                list.ends.push(list.ids.len() as u32);
                1
            })
        });
        match done {
            Ok(()) => list,
            Err(e) => {
                self.gave_up("node.container-ids", e);
                node::IdList { ids: String::new(), ends: Vec::new() }
            }
        }
    }

    fn container(&mut self, id: String) -> Option<node::ContainerInfo> {
        if !self.may_read_node("node.container") {
            return None;
        }
        match &self.current {
            Some(c) if c.id == id => Some(node::ContainerInfo::from(&**c)),
            _ => self.view().container(&id).map(node::ContainerInfo::from),
        }
    }

    fn topology(&mut self) -> node::NodeTopology {
        if !self.may_read_node("node.topology") {
            return node::NodeTopology { online_cpus: Vec::new(), numa_nodes: Vec::new(), memory_bytes: 0 };
        }
        self.env.facts.topology.clone()
    }
}
