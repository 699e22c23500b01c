//! The event a handler is given, read from the host piece by piece.
//!
//! Why on demand: the host copies every string it hands a guest, and most
//! policies look at one or two annotations of a container. [`Event`] asks the
//! host only for what a handler reads (and keeps each answer for the rest of
//! the call), so a policy pays for the strings it looks at, not for the whole
//! pod and container. When the whole record has been read anyway, lookups
//! answer from it instead of asking again.
//!
//! The generated records ([`Container`], [`PodSandbox`], [`WholeEvent`]) get
//! the same lookups here, for handlers that hold a whole record.

use std::cell::OnceCell;

use crate::sys::event as host_event;
use crate::{
    Container, ContainerMeta, EventKind, KeyValue, LinuxResources, PodMeta, PodSandbox, UpdatePodSandboxEvent,
    ValidationEvent, WholeEvent,
};

/// The event a handler handles, read from the host on demand.
///
/// Every accessor asks the host at most once and keeps the answer; the
/// lookups (`pod_label`, `container_annotation`, ...) answer from the whole
/// record instead when it was read already. What a policy sees is the event
/// as the policies before it in the chain left it.
#[derive(Debug)]
pub struct Event {
    kind: EventKind,
    whole: OnceCell<WholeEvent>,
    pod: OnceCell<Option<PodSandbox>>,
    container: OnceCell<Option<Container>>,
    pod_meta: OnceCell<Option<PodMeta>>,
    container_meta: OnceCell<Option<ContainerMeta>>,
    env: OnceCell<Vec<String>>,
    resources: OnceCell<Option<LinuxResources>>,
    requested: OnceCell<Option<LinuxResources>>,
}

impl Event {
    #[doc(hidden)]
    pub fn __new(kind: EventKind) -> Self {
        Event {
            kind,
            whole: OnceCell::new(),
            pod: OnceCell::new(),
            container: OnceCell::new(),
            pod_meta: OnceCell::new(),
            container_meta: OnceCell::new(),
            env: OnceCell::new(),
            resources: OnceCell::new(),
            requested: OnceCell::new(),
        }
    }

    /// Which event this is.
    pub fn kind(&self) -> EventKind {
        self.kind
    }

    /// Everything at once: the costliest read. The event-specific parts
    /// (the resources of an update, the merged adjustment being validated)
    /// are only here; see [`Event::requested_resources`] and
    /// [`Event::validation`].
    pub fn whole(&self) -> &WholeEvent {
        self.whole.get_or_init(host_event::whole)
    }

    /// The whole pod. Panics on synchronize, which has none.
    pub fn pod(&self) -> &PodSandbox {
        self.pod.get_or_init(host_event::pod).as_ref().unwrap_or_else(|| panic!("{:?} has no pod", self.kind))
    }

    /// The whole container. Panics on pod events, which have none.
    pub fn container(&self) -> &Container {
        self.container
            .get_or_init(host_event::container)
            .as_ref()
            .unwrap_or_else(|| panic!("{:?} has no container", self.kind))
    }

    fn pod_read(&self) -> Option<&PodSandbox> {
        self.pod.get().and_then(Option::as_ref)
    }

    fn container_read(&self) -> Option<&Container> {
        self.container.get().and_then(Option::as_ref)
    }

    /// The pod's id, name, uid, namespace, runtime handler and pid. Panics
    /// on synchronize.
    pub fn pod_meta(&self) -> &PodMeta {
        self.pod_meta
            .get_or_init(host_event::pod_metadata)
            .as_ref()
            .unwrap_or_else(|| panic!("{:?} has no pod", self.kind))
    }

    /// The container's id, pod id, name, state and pid. Panics on pod
    /// events.
    pub fn container_meta(&self) -> &ContainerMeta {
        self.container_meta
            .get_or_init(host_event::container_metadata)
            .as_ref()
            .unwrap_or_else(|| panic!("{:?} has no container", self.kind))
    }

    pub fn pod_label(&self, key: &str) -> Option<String> {
        match self.pod_read() {
            Some(p) => p.label(key).map(str::to_string),
            None => host_event::pod_label(key),
        }
    }

    /// Every pod label, sorted by key.
    pub fn pod_labels(&self) -> Vec<KeyValue> {
        match self.pod_read() {
            Some(p) => p.labels.clone(),
            None => host_event::pod_labels(),
        }
    }

    pub fn pod_annotation(&self, key: &str) -> Option<String> {
        match self.pod_read() {
            Some(p) => p.annotation(key).map(str::to_string),
            None => host_event::pod_annotation(key),
        }
    }

    /// Every pod annotation, sorted by key.
    pub fn pod_annotations(&self) -> Vec<KeyValue> {
        match self.pod_read() {
            Some(p) => p.annotations.clone(),
            None => host_event::pod_annotations(),
        }
    }

    pub fn container_label(&self, key: &str) -> Option<String> {
        match self.container_read() {
            Some(c) => c.label(key).map(str::to_string),
            None => host_event::container_label(key),
        }
    }

    /// Every container label, sorted by key.
    pub fn container_labels(&self) -> Vec<KeyValue> {
        match self.container_read() {
            Some(c) => c.labels.clone(),
            None => host_event::container_labels(),
        }
    }

    pub fn container_annotation(&self, key: &str) -> Option<String> {
        match self.container_read() {
            Some(c) => c.annotation(key).map(str::to_string),
            None => host_event::container_annotation(key),
        }
    }

    /// Every container annotation, sorted by key.
    pub fn container_annotations(&self) -> Vec<KeyValue> {
        match self.container_read() {
            Some(c) => c.annotations.clone(),
            None => host_event::container_annotations(),
        }
    }

    /// The container's environment, `NAME=value` strings in order.
    pub fn env(&self) -> &[String] {
        if let Some(c) = self.container_read() {
            return &c.env;
        }
        self.env.get_or_init(host_event::container_env)
    }

    /// The value of the container's environment variable `name`.
    pub fn env_var(&self, name: &str) -> Option<String> {
        if let Some(c) = self.container_read() {
            return c.env_var(name).map(str::to_string);
        }
        match self.env.get() {
            Some(env) => env_value(env, name).map(str::to_string),
            None => host_event::container_env_var(name),
        }
    }

    /// The container's Linux resources, as far as they are set.
    pub fn resources(&self) -> Option<&LinuxResources> {
        if let Some(c) = self.container_read() {
            return c.linux.as_ref().and_then(|l| l.resources.as_ref());
        }
        self.resources.get_or_init(host_event::container_resources).as_ref()
    }

    /// On update-container: the resources the runtime is about to apply,
    /// as the policies before left them.
    pub fn requested_resources(&self) -> Option<&LinuxResources> {
        self.requested.get_or_init(host_event::requested_resources).as_ref()
    }

    /// On update-pod-sandbox: the pod's new resources and overhead.
    pub fn pod_update(&self) -> Option<&UpdatePodSandboxEvent> {
        match self.whole() {
            WholeEvent::UpdatePodSandbox(e) => Some(e),
            _ => None,
        }
    }

    /// On validate-container-adjustment: the merged result of the chain.
    pub fn validation(&self) -> Option<&ValidationEvent> {
        match self.whole() {
            WholeEvent::ValidateContainerAdjustment(e) => Some(e),
            _ => None,
        }
    }
}

impl EventKind {
    /// The kind's WIT name (`create-container`, ...).
    pub fn name(self) -> &'static str {
        crate::policy::event_name(self)
    }
}

impl WholeEvent {
    /// The event's pod; `None` on synchronize.
    pub fn pod(&self) -> Option<&PodSandbox> {
        match self {
            WholeEvent::RunPodSandbox(e)
            | WholeEvent::StopPodSandbox(e)
            | WholeEvent::RemovePodSandbox(e)
            | WholeEvent::PostUpdatePodSandbox(e) => Some(&e.pod),
            WholeEvent::CreateContainer(e)
            | WholeEvent::PostCreateContainer(e)
            | WholeEvent::StartContainer(e)
            | WholeEvent::PostStartContainer(e)
            | WholeEvent::PostUpdateContainer(e)
            | WholeEvent::StopContainer(e)
            | WholeEvent::RemoveContainer(e) => Some(&e.pod),
            WholeEvent::UpdateContainer(e) => Some(&e.pod),
            WholeEvent::UpdatePodSandbox(e) => Some(&e.pod),
            WholeEvent::ValidateContainerAdjustment(e) => Some(&e.pod),
            WholeEvent::Synchronize => None,
        }
    }

    /// The event's container; `None` on pod events and synchronize.
    pub fn container(&self) -> Option<&Container> {
        match self {
            WholeEvent::CreateContainer(e)
            | WholeEvent::PostCreateContainer(e)
            | WholeEvent::StartContainer(e)
            | WholeEvent::PostStartContainer(e)
            | WholeEvent::PostUpdateContainer(e)
            | WholeEvent::StopContainer(e)
            | WholeEvent::RemoveContainer(e) => Some(&e.container),
            WholeEvent::UpdateContainer(e) => Some(&e.container),
            WholeEvent::ValidateContainerAdjustment(e) => Some(&e.container),
            _ => None,
        }
    }
}

pub(crate) fn env_value<'a>(env: &'a [String], name: &str) -> Option<&'a str> {
    env.iter().find_map(|e| e.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
}

pub(crate) fn find<'a>(list: &'a [KeyValue], key: &str) -> Option<&'a str> {
    list.iter().find(|kv| kv.key == key).map(|kv| kv.value.as_str())
}

impl Container {
    pub fn annotation(&self, key: &str) -> Option<&str> {
        find(&self.annotations, key)
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        find(&self.labels, key)
    }

    /// The value of environment variable `name`.
    pub fn env_var(&self, name: &str) -> Option<&str> {
        env_value(&self.env, name)
    }
}

impl PodSandbox {
    pub fn annotation(&self, key: &str) -> Option<&str> {
        find(&self.annotations, key)
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        find(&self.labels, key)
    }
}
