//! What a call may read besides its event: facts about the runtime and the
//! node, the node view, and the committed state of every policy.

use std::sync::Arc;

use super::state::StateStore;
use crate::node::topology::Topology;
use crate::node::view::NodeView;
use crate::wit::{node, wit};

/// Read-only facts offered to policies through the host interface.
#[derive(Debug, Clone)]
pub struct Facts {
    /// The runtime's name and version and its NRI version, from Configure
    /// (empty until then).
    pub runtime: wit::RuntimeInfo,
    /// The node's host name, architecture, CPUs and memory.
    pub node: wit::NodeInfo,
    /// The node's topology, as policies see it (`node.topology`).
    pub topology: node::NodeTopology,
}

impl Facts {
    /// Facts before any runtime connected: the runtime's fields are empty
    /// until Configure names it.
    pub fn unconfigured(node: wit::NodeInfo, topology: &Topology) -> Self {
        let runtime = wit::RuntimeInfo { name: String::new(), version: String::new(), nri_version: String::new() };
        Self { runtime, node, topology: topology.into() }
    }

    /// Node facts read from the running system.
    pub fn node_from_system() -> wit::NodeInfo {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_string();
        let memory_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find(|l| l.starts_with("MemTotal:"))
                    .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()))
            })
            .map_or(0, |kb| kb * 1024);
        wit::NodeInfo {
            hostname,
            arch: std::env::consts::ARCH.to_string(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            memory_bytes,
        }
    }
}

/// What a call may read besides its event: facts, the node view, the
/// committed state of every policy. Cheap to clone (shared parts only).
#[derive(Debug, Clone)]
pub struct CallEnv {
    /// Facts about the runtime and the node.
    pub facts: Arc<Facts>,
    /// The node view as of before the event.
    pub view: Arc<NodeView>,
    /// The committed state of every policy.
    pub states: Arc<StateStore>,
}

impl CallEnv {
    /// An environment with an empty node view and in-memory state.
    pub fn detached(facts: Arc<Facts>) -> Self {
        Self { facts, view: Arc::default(), states: Arc::new(StateStore::in_memory()) }
    }
}
