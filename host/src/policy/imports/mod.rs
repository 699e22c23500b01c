//! The host side of the interfaces a policy imports: `host`, `event`,
//! `node` and `state` of `nri-wasm:policy`.
//!
//! Every function here runs on behalf of untrusted code, so each is bounded
//! by what it is given and by the node's size, never by a loop the guest
//! controls, and none may panic on guest input. What the guest passes in
//! was already bounded by the store's transfer limit (`store.rs`); what it
//! asks to be written (a log line) is clipped and counted before it reaches
//! the host's log.
//!
//! Bounded is not enough: a host function runs inline on the host's one
//! transport thread, and epochs do not interrupt it, so its time is the
//! runtime's time. So each function's work is linear in its arguments (a
//! 16 MiB filter is compiled once into a bounded query, `node/view.rs`;
//! lookups go through maps, never a scan per element), and every loop over
//! the node or over an argument charges the call's [`WorkClock`] and stops
//! at the call's deadline. A function that stops there gives up
//! (`CallState::gave_up`): the call ends as the policy's timeout, and the
//! host's log names the policy, the event, the function and the limit.
//! Functions that return a `wasmtime::Result` (the event reads) trap at
//! once; the others return an empty answer that the guest never gets to
//! use, since the epoch has been advanced past its deadline.
//!
//! The `node` functions first check the policy's `node` capability
//! (`caps.rs`); without it they answer empty and the call fails naming the
//! capability (`CallState::may_read_node`).

use crate::node::view::{ContainerQuery, Expired, WorkClock, COPY_UNITS};
use crate::policy::call::event::CallEvent;
use crate::policy::call::store::CallState;
use crate::wit::event::{self as api, ContainerMeta, PodMeta};
use crate::wit::{host, node, state, wit};

impl wit::Host for CallState {}

impl host::Host for CallState {
    fn log(&mut self, level: wit::LogLevel, message: String) {
        if !self.logs.take(message.len()) {
            return;
        }
        let level = match level {
            wit::LogLevel::Debug => tracing::Level::DEBUG,
            wit::LogLevel::Info => tracing::Level::INFO,
            wit::LogLevel::Warn => tracing::Level::WARN,
            wit::LogLevel::Error => tracing::Level::ERROR,
        };
        crate::policy::call::output::log_message(&self.policy, level, &message);
    }

    fn settings(&mut self) -> String {
        self.settings.to_string()
    }

    fn runtime(&mut self) -> wit::RuntimeInfo {
        self.env.facts.runtime.clone()
    }

    fn node(&mut self) -> wit::NodeInfo {
        self.env.facts.node.clone()
    }
}

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

impl node::Host for CallState {
    fn pods(&mut self) -> Vec<node::PodInfo> {
        if !self.may_read_node("node.pods") {
            return Vec::new();
        }
        let mut clock = self.clock();
        let mut pods = Vec::with_capacity(self.view().len().0);
        let done = self.view().each_pod(&mut clock, |p| {
            pods.push(node::PodInfo::from(p));
            COPY_UNITS + p.containers.len() as u64
        });
        match done {
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
        let done = query(&filter, &mut clock).and_then(|q| {
            self.view().query(&q, self.current.as_deref(), &mut clock, |c| {
                found.push(node::ContainerInfo::from(c));
                COPY_UNITS
            })
        });
        match done {
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

impl state::Host for CallState {
    fn get(&mut self, key: String) -> Option<String> {
        self.state.get(&key).map(str::to_string)
    }

    fn set(&mut self, key: String, value: String) -> Result<(), state::StateError> {
        let result = self.state.set(key, value);
        if let Err(e) = &result {
            tracing::debug!(policy = &*self.policy, error = ?e, "state write refused");
        }
        result
    }

    fn remove(&mut self, key: String) {
        self.state.remove(key)
    }

    fn keys(&mut self, prefix: String) -> Vec<String> {
        self.state.keys(&prefix)
    }
}

/// The call's event, or the trap of a read from `configure`, or the
/// policy's timeout if its deadline has passed (a read copies up to the
/// whole event: a guest reading it in a loop stops here at its deadline).
fn current<'s>(s: &'s CallState, function: &'static str) -> wasmtime::Result<&'s CallEvent> {
    if s.past_deadline() {
        return Err(s.timeout_trap(function, Expired { units: 0 }));
    }
    s.event().ok_or_else(|| {
        wasmtime::format_err!(
            "policy {}: nri-wasm:policy/event read outside handle (configure has no event)",
            s.policy_name()
        )
    })
}

impl api::Host for CallState {
    fn whole(&mut self) -> wasmtime::Result<wit::Event> {
        Ok(current(self, "event.whole")?.to_wit())
    }

    fn pod(&mut self) -> wasmtime::Result<Option<wit::PodSandbox>> {
        Ok(current(self, "event.pod")?.pod_wit())
    }

    fn pod_metadata(&mut self) -> wasmtime::Result<Option<PodMeta>> {
        Ok(current(self, "event.pod-metadata")?.pod_meta())
    }

    fn pod_label(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(current(self, "event.pod-label")?.pod_label(&key))
    }

    fn pod_labels(&mut self) -> wasmtime::Result<Vec<wit::KeyValue>> {
        Ok(current(self, "event.pod-labels")?.pod_labels())
    }

    fn pod_annotation(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(current(self, "event.pod-annotation")?.pod_annotation(&key))
    }

    fn pod_annotations(&mut self) -> wasmtime::Result<Vec<wit::KeyValue>> {
        Ok(current(self, "event.pod-annotations")?.pod_annotations())
    }

    fn container(&mut self) -> wasmtime::Result<Option<wit::Container>> {
        Ok(current(self, "event.container")?.container_wit())
    }

    fn container_metadata(&mut self) -> wasmtime::Result<Option<ContainerMeta>> {
        Ok(current(self, "event.container-metadata")?.container_meta())
    }

    fn container_label(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(current(self, "event.container-label")?.container_label(&key))
    }

    fn container_labels(&mut self) -> wasmtime::Result<Vec<wit::KeyValue>> {
        Ok(current(self, "event.container-labels")?.container_labels())
    }

    fn container_annotation(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(current(self, "event.container-annotation")?.container_annotation(&key))
    }

    fn container_annotations(&mut self) -> wasmtime::Result<Vec<wit::KeyValue>> {
        Ok(current(self, "event.container-annotations")?.container_annotations())
    }

    fn container_env(&mut self) -> wasmtime::Result<Vec<String>> {
        Ok(current(self, "event.container-env")?.container_env())
    }

    fn container_env_var(&mut self, name: String) -> wasmtime::Result<Option<String>> {
        Ok(current(self, "event.container-env-var")?.container_env_var(&name))
    }

    fn container_resources(&mut self) -> wasmtime::Result<Option<wit::LinuxResources>> {
        Ok(current(self, "event.container-resources")?.container_resources())
    }

    fn requested_resources(&mut self) -> wasmtime::Result<Option<wit::LinuxResources>> {
        Ok(current(self, "event.requested-resources")?.requested_resources_wit())
    }
}
