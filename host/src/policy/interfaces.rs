//! The host side of the interfaces a policy imports: `host`, `event`,
//! `node` and `state` of `nri-wasm:policy`.
//!
//! Every function here runs on behalf of untrusted code, so each is bounded
//! by what it is given and by the node's size, never by a loop the guest
//! controls, and none may panic on guest input. What the guest passes in
//! was already bounded by the store's transfer limit (`store.rs`); what it
//! asks to be written (a log line) is clipped and counted before it reaches
//! the host's log.

use super::bindings::event::{self as api, ContainerMeta, PodMeta};
use super::bindings::{host, node, state, wit};
use super::clip;
use super::event::CallEvent;
use super::store::CallState;
use crate::node::view::ContainerFilter;

impl wit::Host for CallState {}

impl host::Host for CallState {
    fn log(&mut self, level: wit::LogLevel, message: String) {
        if !self.logs.take(message.len()) {
            return;
        }
        let policy = &*self.policy;
        let line = clip::guest_text(&message, clip::MAX_LOG_LINE_BYTES);
        match level {
            wit::LogLevel::Debug => tracing::debug!(policy, "{line}"),
            wit::LogLevel::Info => tracing::info!(policy, "{line}"),
            wit::LogLevel::Warn => tracing::warn!(policy, "{line}"),
            wit::LogLevel::Error => tracing::error!(policy, "{line}"),
        }
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

impl node::Host for CallState {
    fn pods(&mut self) -> Vec<node::PodInfo> {
        self.view().pods().map(node::PodInfo::from).collect()
    }

    fn pod(&mut self, id: String) -> Option<node::PodInfo> {
        self.view().pod(&id).map(node::PodInfo::from)
    }

    fn containers(&mut self, filter: node::ContainerFilter) -> Vec<node::ContainerInfo> {
        let filter = ContainerFilter::from(filter);
        self.view().containers(&filter, self.current.as_deref()).map(node::ContainerInfo::from).collect()
    }

    fn container_ids(&mut self, filter: node::ContainerFilter) -> node::IdList {
        let filter = ContainerFilter::from(filter);
        let (_, known) = self.view().len();
        // Container ids are 64 hex digits: one allocation for all of them.
        let mut list =
            node::IdList { ids: String::with_capacity((known + 1) * 64), ends: Vec::with_capacity(known + 1) };
        for c in self.view().containers(&filter, self.current.as_deref()) {
            list.ids.push_str(&c.id);
            list.ends.push(list.ids.len() as u32);
        }
        list
    }

    fn container(&mut self, id: String) -> Option<node::ContainerInfo> {
        match &self.current {
            Some(c) if c.id == id => Some(node::ContainerInfo::from(&**c)),
            _ => self.view().container(&id).map(node::ContainerInfo::from),
        }
    }

    fn topology(&mut self) -> node::NodeTopology {
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

/// The call's event, or the trap of a read from `configure`.
fn current(s: &CallState) -> wasmtime::Result<&CallEvent> {
    s.event().ok_or_else(|| {
        wasmtime::format_err!(
            "policy {}: nri-wasm:policy/event read outside handle (configure has no event)",
            s.policy_name()
        )
    })
}

impl api::Host for CallState {
    fn whole(&mut self) -> wasmtime::Result<wit::Event> {
        Ok(current(self)?.to_wit())
    }

    fn pod(&mut self) -> wasmtime::Result<Option<wit::PodSandbox>> {
        Ok(current(self)?.pod_wit())
    }

    fn pod_metadata(&mut self) -> wasmtime::Result<Option<PodMeta>> {
        Ok(current(self)?.pod_meta())
    }

    fn pod_label(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(current(self)?.pod_label(&key))
    }

    fn pod_labels(&mut self) -> wasmtime::Result<Vec<wit::KeyValue>> {
        Ok(current(self)?.pod_labels())
    }

    fn pod_annotation(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(current(self)?.pod_annotation(&key))
    }

    fn pod_annotations(&mut self) -> wasmtime::Result<Vec<wit::KeyValue>> {
        Ok(current(self)?.pod_annotations())
    }

    fn container(&mut self) -> wasmtime::Result<Option<wit::Container>> {
        Ok(current(self)?.container_wit())
    }

    fn container_metadata(&mut self) -> wasmtime::Result<Option<ContainerMeta>> {
        Ok(current(self)?.container_meta())
    }

    fn container_label(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(current(self)?.container_label(&key))
    }

    fn container_labels(&mut self) -> wasmtime::Result<Vec<wit::KeyValue>> {
        Ok(current(self)?.container_labels())
    }

    fn container_annotation(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(current(self)?.container_annotation(&key))
    }

    fn container_annotations(&mut self) -> wasmtime::Result<Vec<wit::KeyValue>> {
        Ok(current(self)?.container_annotations())
    }

    fn container_env(&mut self) -> wasmtime::Result<Vec<String>> {
        Ok(current(self)?.container_env())
    }

    fn container_env_var(&mut self, name: String) -> wasmtime::Result<Option<String>> {
        Ok(current(self)?.container_env_var(&name))
    }

    fn container_resources(&mut self) -> wasmtime::Result<Option<wit::LinuxResources>> {
        Ok(current(self)?.container_resources())
    }

    fn requested_resources(&mut self) -> wasmtime::Result<Option<wit::LinuxResources>> {
        Ok(current(self)?.requested_resources_wit())
    }
}
