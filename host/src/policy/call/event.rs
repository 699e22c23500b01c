//! The event of one call, which the policy reads on demand through the
//! `nri-wasm:policy/event` interface.
//!
//! Lowering a whole pod and container into the guest costs a guest
//! allocation per string, hundreds on a real node, and was most of the cost
//! of a call. So `handle` receives only the kind of event, and the guest asks
//! for what it reads: a label lookup copies one string back, `whole` copies
//! everything.
//!
//! A [`CallEvent`] holds the request's protobuf parts behind `Arc`s, shared
//! with the chain: creating one per call costs a few reference counts, and
//! nothing is converted to WIT unless a policy reads it. On CreateContainer
//! the container is the merge's working copy, so a policy reads the
//! container as the policies before it left it without any conversion
//! between policies (the store holding the `Arc` is dropped before the next
//! reply is merged, so the merge modifies it in place).
//!
//! What `whole` returns is built per WIT record (`Whole`), and the match
//! from kind to record is generated from the table of events
//! (`nri/events.rs`), as is the call event of a request that carries only
//! its pod (and container).

use std::collections::HashMap;
use std::sync::Arc;

use nri_wasm_api::api as pb;
use protobuf::Message;

use crate::convert::event_kind;
use crate::nri::version::EventKind;
use crate::wit::event::{ContainerMeta, PodMeta};
use crate::wit::wit;

/// The event one policy call handles.
#[derive(Debug, Clone)]
pub struct CallEvent {
    kind: wit::EventKind,
    pod: Option<Arc<pb::PodSandbox>>,
    container: Option<Arc<pb::Container>>,
    detail: Detail,
}

/// The parts only some events carry.
#[derive(Debug, Clone)]
enum Detail {
    None,
    /// update-container: the resources to apply, as the policies before
    /// left them.
    Requested(Arc<pb::LinuxResources>),
    /// update-pod-sandbox: the request, its pod moved out.
    PodUpdate(Arc<pb::UpdatePodSandboxRequest>),
    /// validate-container-adjustment: the request, pod and container moved out.
    Validation(Arc<pb::ValidateContainerAdjustmentRequest>),
}

impl CallEvent {
    /// The `synchronize` call, which has no pod or container.
    pub fn synchronize() -> Self {
        Self { kind: wit::EventKind::Synchronize, pod: None, container: None, detail: Detail::None }
    }

    /// An event about a pod only (run, stop, remove, post-update).
    pub fn pod(kind: wit::EventKind, pod: Arc<pb::PodSandbox>) -> Self {
        Self { kind, pod: Some(pod), container: None, detail: Detail::None }
    }

    /// An event about a container of a pod.
    pub fn container(kind: wit::EventKind, pod: Arc<pb::PodSandbox>, container: Arc<pb::Container>) -> Self {
        Self { kind, pod: Some(pod), container: Some(container), detail: Detail::None }
    }

    /// update-container, with the resources the runtime is about to apply.
    pub fn update_container(
        pod: Arc<pb::PodSandbox>,
        container: Arc<pb::Container>,
        requested: Arc<pb::LinuxResources>,
    ) -> Self {
        Self {
            kind: wit::EventKind::UpdateContainer,
            pod: Some(pod),
            container: Some(container),
            detail: Detail::Requested(requested),
        }
    }

    /// validate-container-adjustment.
    pub fn validation(mut req: pb::ValidateContainerAdjustmentRequest) -> Self {
        let pod = Arc::new(req.pod.take().unwrap_or_default());
        let container = Arc::new(req.container.take().unwrap_or_default());
        Self {
            kind: wit::EventKind::ValidateContainerAdjustment,
            pod: Some(pod),
            container: Some(container),
            detail: Detail::Validation(Arc::new(req)),
        }
    }

    /// The kind `handle` receives.
    pub fn kind(&self) -> wit::EventKind {
        self.kind
    }

    /// The event's name in errors and logs.
    pub fn name(&self) -> &'static str {
        event_kind(self.kind).map_or("Synchronize", EventKind::name)
    }

    /// The event's pod, as the runtime sent it.
    pub fn pod_sandbox(&self) -> Option<&pb::PodSandbox> {
        self.pod.as_deref()
    }

    /// The event's container, as the policies before this one left it.
    pub fn container_record(&self) -> Option<&pb::Container> {
        self.container.as_deref()
    }

    /// The same, shared: kept past the call without a copy.
    pub fn container_shared(&self) -> Option<Arc<pb::Container>> {
        self.container.clone()
    }

    /// The same, shared: kept past the call without a copy.
    pub fn requested_shared(&self) -> Option<Arc<pb::LinuxResources>> {
        match &self.detail {
            Detail::Requested(r) => Some(r.clone()),
            _ => None,
        }
    }

    /// On update-container, the requested resources.
    pub fn requested_resources(&self) -> Option<&pb::LinuxResources> {
        match &self.detail {
            Detail::Requested(r) => Some(r),
            _ => None,
        }
    }
}

/// An event's WIT record (the row's `shape` in the event table,
/// `nri/events.rs`) as `whole` returns it, built from what the call holds:
/// the pod and container as the chain left them, the rest from its detail.
trait Whole {
    fn whole(event: &CallEvent) -> Self;
}

impl CallEvent {
    fn pod_or_default(&self) -> wit::PodSandbox {
        wit::PodSandbox::from(self.pod.as_deref().unwrap_or_else(|| pb::PodSandbox::default_instance()))
    }

    fn container_or_default(&self) -> wit::Container {
        wit::Container::from(self.container.as_deref().unwrap_or_else(|| pb::Container::default_instance()))
    }
}

impl Whole for wit::PodEvent {
    fn whole(event: &CallEvent) -> Self {
        Self { pod: event.pod_or_default() }
    }
}

impl Whole for wit::ContainerEvent {
    fn whole(event: &CallEvent) -> Self {
        Self { pod: event.pod_or_default(), container: event.container_or_default() }
    }
}

impl Whole for wit::UpdateContainerEvent {
    fn whole(event: &CallEvent) -> Self {
        Self {
            pod: event.pod_or_default(),
            container: event.container_or_default(),
            linux_resources: match &event.detail {
                Detail::Requested(r) => Some(wit::LinuxResources::from(&**r)),
                _ => None,
            },
        }
    }
}

impl Whole for wit::UpdatePodSandboxEvent {
    fn whole(event: &CallEvent) -> Self {
        let mut e = match &event.detail {
            Detail::PodUpdate(req) => wit::UpdatePodSandboxEvent::from(&**req),
            _ => wit::UpdatePodSandboxEvent::from(&pb::UpdatePodSandboxRequest::default()),
        };
        e.pod = event.pod_or_default();
        e
    }
}

impl Whole for wit::ValidationEvent {
    fn whole(event: &CallEvent) -> Self {
        let mut e = match &event.detail {
            Detail::Validation(req) => wit::ValidationEvent::from(&**req),
            _ => wit::ValidationEvent::from(&pb::ValidateContainerAdjustmentRequest::default()),
        };
        e.pod = event.pod_or_default();
        e.container = event.container_or_default();
        e
    }
}

/// The call event of a request whose `shape` is the plain one of what it
/// carries: its pod, or its pod and container. A request with a record of
/// its own is built by a named constructor ([`CallEvent::update_container`],
/// [`CallEvent::validation`]) or a `From` written out below.
/// CreateContainer's is generated with the rest but the chain does not use
/// it: it builds that event from the merge's working container
/// (`policy/chain/events.rs`), which later policies see adjusted.
macro_rules! plain_call_event {
    (PodEvent, $kind:ident, $req:ident) => {
        impl From<&pb::$req> for CallEvent {
            fn from(r: &pb::$req) -> Self {
                CallEvent::pod(wit::EventKind::$kind, Arc::new((*r.pod).clone()))
            }
        }
    };
    (ContainerEvent, $kind:ident, $req:ident) => {
        impl From<&pb::$req> for CallEvent {
            fn from(r: &pb::$req) -> Self {
                CallEvent::container(
                    wit::EventKind::$kind,
                    Arc::new((*r.pod).clone()),
                    Arc::new((*r.container).clone()),
                )
            }
        }
    };
    ($own:ident, $kind:ident, $req:ident) => {};
}

/// From the event table: the call event of every plain request, and the
/// whole event of every kind (a kind the WIT world lacks, or a record
/// without a [`Whole`], does not compile).
macro_rules! call_events {
    ($($kind:ident = $number:literal since $since:tt, $method:ident, $request:ident => $response:ident, $reply:ident, $carries:ident, $shape:ident;)*) => {
        $(plain_call_event!($shape, $kind, $request);)*

        impl CallEvent {
            /// The whole event as WIT, as `whole` returns it.
            pub fn to_wit(&self) -> wit::Event {
                match self.kind {
                    wit::EventKind::Synchronize => wit::Event::Synchronize,
                    $(wit::EventKind::$kind => wit::Event::$kind(<wit::$shape as Whole>::whole(self)),)*
                }
            }
        }
    };
}
crate::nri::events::nri_events!(call_events);

/// update-pod-sandbox: the pod, and the rest of the request for `whole`.
impl From<&pb::UpdatePodSandboxRequest> for CallEvent {
    fn from(r: &pb::UpdatePodSandboxRequest) -> Self {
        let mut rest = r.clone();
        let pod = Arc::new(rest.pod.take().unwrap_or_default());
        Self {
            kind: wit::EventKind::UpdatePodSandbox,
            pod: Some(pod),
            container: None,
            detail: Detail::PodUpdate(Arc::new(rest)),
        }
    }
}

/// What each function of the `event` interface answers, for one event.
impl CallEvent {
    /// `pod`: the event's whole pod; `None` on synchronize.
    pub fn pod_wit(&self) -> Option<wit::PodSandbox> {
        self.pod_sandbox().map(wit::PodSandbox::from)
    }

    /// `pod-metadata`: the pod's id, name, namespace and the like, without its maps.
    pub fn pod_meta(&self) -> Option<PodMeta> {
        self.pod_sandbox().map(PodMeta::from)
    }

    /// `pod-label`: the value of the pod's label `key`, if it has one.
    pub fn pod_label(&self, key: &str) -> Option<String> {
        lookup(self.pod_sandbox().map(|p| &p.labels), key)
    }

    /// `pod-labels`: every pod label (none without a pod).
    pub fn pod_labels(&self) -> Vec<wit::KeyValue> {
        list(self.pod_sandbox().map(|p| &p.labels))
    }

    /// `pod-annotation`: the value of the pod's annotation `key`, if it has one.
    pub fn pod_annotation(&self, key: &str) -> Option<String> {
        lookup(self.pod_sandbox().map(|p| &p.annotations), key)
    }

    /// `pod-annotations`: every pod annotation (none without a pod).
    pub fn pod_annotations(&self) -> Vec<wit::KeyValue> {
        list(self.pod_sandbox().map(|p| &p.annotations))
    }

    /// `container`: the event's whole container; `None` on pod events and synchronize.
    pub fn container_wit(&self) -> Option<wit::Container> {
        self.container_record().map(wit::Container::from)
    }

    /// `container-metadata`: the container's id, pod, name, state and pid, without its maps.
    pub fn container_meta(&self) -> Option<ContainerMeta> {
        self.container_record().map(ContainerMeta::from)
    }

    /// `container-label`: the value of the container's label `key`, if it has one.
    pub fn container_label(&self, key: &str) -> Option<String> {
        lookup(self.container_record().map(|c| &c.labels), key)
    }

    /// `container-labels`: every container label (none without a container).
    pub fn container_labels(&self) -> Vec<wit::KeyValue> {
        list(self.container_record().map(|c| &c.labels))
    }

    /// `container-annotation`: the value of the container's annotation `key`, if it has one.
    pub fn container_annotation(&self, key: &str) -> Option<String> {
        lookup(self.container_record().map(|c| &c.annotations), key)
    }

    /// `container-annotations`: every container annotation (none without a container).
    pub fn container_annotations(&self) -> Vec<wit::KeyValue> {
        list(self.container_record().map(|c| &c.annotations))
    }

    /// `container-env`: the container's environment, `name=value` entries in order.
    pub fn container_env(&self) -> Vec<String> {
        self.container_record().map(|c| c.env.clone()).unwrap_or_default()
    }

    /// The value of the first `name=` entry of the environment.
    pub fn container_env_var(&self, name: &str) -> Option<String> {
        let env = &self.container_record()?.env;
        env.iter().find_map(|e| e.strip_prefix(name)?.strip_prefix('=').map(str::to_string))
    }

    /// `container-resources`: the container's Linux resources, if it has any.
    pub fn container_resources(&self) -> Option<wit::LinuxResources> {
        let c = self.container_record()?;
        c.linux.as_ref()?.resources.as_ref().map(wit::LinuxResources::from)
    }

    /// `requested-resources`: on update-container, the resources asked for.
    pub fn requested_resources_wit(&self) -> Option<wit::LinuxResources> {
        self.requested_resources().map(wit::LinuxResources::from)
    }
}

fn lookup(map: Option<&HashMap<String, String>>, key: &str) -> Option<String> {
    map.and_then(|m| m.get(key)).cloned()
}

fn list(map: Option<&HashMap<String, String>>) -> Vec<wit::KeyValue> {
    map.map(crate::convert::kv_to_wit).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use nri_sim::populate::populated;

    use super::*;

    /// `whole` is the full conversion of the request, for every kind of event.
    #[test]
    fn the_whole_event_is_the_full_conversion_of_the_request() {
        fn same<R: protobuf::MessageFull>(make: impl Fn(&R) -> CallEvent)
        where
            for<'r> wit::Event: From<&'r R>,
        {
            for seed in 1..4 {
                let req: R = populated(seed);
                assert_eq!(make(&req).to_wit(), wit::Event::from(&req), "{} (seed {seed})", R::NAME);
            }
        }
        same::<pb::RunPodSandboxRequest>(|r| CallEvent::from(r));
        same::<pb::StopPodSandboxRequest>(|r| CallEvent::from(r));
        same::<pb::RemovePodSandboxRequest>(|r| CallEvent::from(r));
        same::<pb::PostUpdatePodSandboxRequest>(|r| CallEvent::from(r));
        same::<pb::UpdatePodSandboxRequest>(|r| CallEvent::from(r));
        same::<pb::PostCreateContainerRequest>(|r| CallEvent::from(r));
        same::<pb::StartContainerRequest>(|r| CallEvent::from(r));
        same::<pb::PostStartContainerRequest>(|r| CallEvent::from(r));
        same::<pb::PostUpdateContainerRequest>(|r| CallEvent::from(r));
        same::<pb::StopContainerRequest>(|r| CallEvent::from(r));
        same::<pb::RemoveContainerRequest>(|r| CallEvent::from(r));
        same::<pb::CreateContainerRequest>(|r| CallEvent::from(r));
        same::<pb::UpdateContainerRequest>(|r| {
            CallEvent::update_container(
                Arc::new((*r.pod).clone()),
                Arc::new((*r.container).clone()),
                Arc::new((*r.linux_resources).clone()),
            )
        });
        same::<pb::ValidateContainerAdjustmentRequest>(|r| CallEvent::validation(r.clone()));
        assert_eq!(CallEvent::synchronize().to_wit(), wit::Event::Synchronize);
    }

    /// Each piece a policy can ask for is what it would find in the whole event.
    #[test]
    fn every_piece_agrees_with_the_whole_event() {
        for seed in 1..4 {
            let req: pb::UpdateContainerRequest = populated(seed);
            let mut container = (*req.container).clone();
            // Two entries of one variable (the first one counts), one without
            // a value, one without `=` at all.
            container.env = ["PATH=/bin", "A=1", "EMPTY=", "A=again", "NOEQUALS"].map(String::from).to_vec();
            let e = CallEvent::update_container(
                Arc::new((*req.pod).clone()),
                Arc::new(container),
                Arc::new((*req.linux_resources).clone()),
            );
            let wit::Event::UpdateContainer(whole) = e.to_wit() else { panic!("not an update") };
            let (pod, ctr) = (&whole.pod, &whole.container);

            assert_eq!(e.pod_wit().as_ref(), Some(pod));
            assert_eq!(e.container_wit().as_ref(), Some(ctr));
            let meta = e.pod_meta().unwrap();
            assert_eq!(
                (&meta.id, &meta.name, &meta.uid, &meta.namespace, &meta.runtime_handler, meta.pid),
                (&pod.id, &pod.name, &pod.uid, &pod.namespace, &pod.runtime_handler, pod.pid)
            );
            let meta = e.container_meta().unwrap();
            assert_eq!(
                (&meta.id, &meta.pod_sandbox_id, &meta.name, meta.state, meta.pid),
                (&ctr.id, &ctr.pod_sandbox_id, &ctr.name, ctr.state, ctr.pid)
            );
            assert_eq!(e.pod_labels(), pod.labels);
            assert_eq!(e.pod_annotations(), pod.annotations);
            assert_eq!(e.container_labels(), ctr.labels);
            assert_eq!(e.container_annotations(), ctr.annotations);
            assert!(!pod.labels.is_empty() && !ctr.annotations.is_empty(), "populated maps");
            for kv in &pod.labels {
                assert_eq!(e.pod_label(&kv.key).as_ref(), Some(&kv.value));
            }
            for kv in &pod.annotations {
                assert_eq!(e.pod_annotation(&kv.key).as_ref(), Some(&kv.value));
            }
            for kv in &ctr.labels {
                assert_eq!(e.container_label(&kv.key).as_ref(), Some(&kv.value));
            }
            for kv in &ctr.annotations {
                assert_eq!(e.container_annotation(&kv.key).as_ref(), Some(&kv.value));
            }
            for missing in [
                e.pod_label("no-such-key"),
                e.pod_annotation("no-such-key"),
                e.container_label("no-such-key"),
                e.container_annotation("no-such-key"),
                e.container_env_var("NO_SUCH_VAR"),
            ] {
                assert_eq!(missing, None);
            }
            assert_eq!(e.container_env(), ctr.env);
            assert_eq!(e.container_env_var("A").as_deref(), Some("1"), "the first entry wins");
            assert_eq!(e.container_env_var("EMPTY").as_deref(), Some(""));
            assert_eq!(e.container_env_var("PATH").as_deref(), Some("/bin"));
            assert_eq!(e.container_env_var("NOEQUALS"), None);
            assert_eq!(e.container_env_var("PAT"), None, "a prefix of a name is not the name");
            assert_eq!(e.container_resources(), ctr.linux.as_ref().and_then(|l| l.resources.clone()));
            assert_eq!(e.requested_resources_wit(), whole.linux_resources);
        }
    }

    /// Parts an event does not have read as absent, not as errors.
    #[test]
    fn absent_parts_read_as_none_or_empty() {
        let pod: pb::RunPodSandboxRequest = populated(1);
        let e = CallEvent::from(&pod);
        assert!(e.pod_meta().is_some());
        assert_eq!(e.container_wit(), None);
        assert_eq!(e.container_meta(), None);
        assert_eq!(e.container_annotation("a"), None);
        assert!(e.container_env().is_empty() && e.container_labels().is_empty());
        assert_eq!(e.requested_resources_wit(), None);

        let sync = CallEvent::synchronize();
        assert_eq!((sync.pod_wit(), sync.pod_meta(), sync.pod_label("a")), (None, None, None));
        assert!(sync.pod_labels().is_empty() && sync.container_annotations().is_empty());
        assert_eq!(sync.name(), "Synchronize");
        assert_eq!(e.name(), "RunPodSandbox");
    }
}
