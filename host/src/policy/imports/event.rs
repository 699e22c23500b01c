//! `nri-wasm:policy/event`: the event being handled, read on demand; a
//! read from `configure` (which has no event) traps.

use crate::node::view::Expired;
use crate::policy::call::event::CallEvent;
use crate::policy::call::store::CallState;
use crate::wit::event::{self as api, ContainerMeta, PodMeta};
use crate::wit::wit;

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
