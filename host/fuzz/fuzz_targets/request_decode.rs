//! Every request the runtime can send, decoded from arbitrary bytes: the
//! decoder must never panic, a request that decodes must encode again to
//! bytes that decode to the same request, and its conversion to what a
//! policy reads (the WIT event, the piece by piece accessors, the node
//! view's entries) must never panic either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_wasm::api::api as pb;
use nri_wasm::node::view::{NodeView, ViewLimits};
use nri_wasm::policy::bindings::wit;
use nri_wasm::policy::event::CallEvent;
use protobuf::Message;

fn round_trip<M: Message + PartialEq + std::fmt::Debug>(data: &[u8]) -> Option<M> {
    let msg = M::parse_from_bytes(data).ok()?;
    let bytes = msg.write_to_bytes().expect("a decoded message encodes");
    let again = M::parse_from_bytes(&bytes).expect("an encoded message decodes");
    assert_eq!(msg, again);
    Some(msg)
}

fn read_pieces(e: &CallEvent) {
    let _ = e.to_wit();
    let _ = (e.pod_meta(), e.pod_labels(), e.pod_annotations(), e.pod_label("app"));
    let _ = (e.container_meta(), e.container_labels(), e.container_annotations(), e.container_env());
    let _ = (e.container_env_var("PATH"), e.container_resources(), e.requested_resources_wit());
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, data)) = data.split_first() else { return };
    match which % 10 {
        0 => {
            if let Some(r) = round_trip::<pb::CreateContainerRequest>(data) {
                let e = CallEvent::container(
                    wit::EventKind::CreateContainer,
                    std::sync::Arc::new((*r.pod).clone()),
                    std::sync::Arc::new((*r.container).clone()),
                );
                read_pieces(&e);
                let mut view = NodeView::new(ViewLimits::default());
                view.container_created(&r.container, None);
            }
        }
        1 => {
            if let Some(r) = round_trip::<pb::UpdateContainerRequest>(data) {
                let _ = wit::Event::from(&r);
            }
        }
        2 => {
            if let Some(r) = round_trip::<pb::StopContainerRequest>(data) {
                read_pieces(&CallEvent::from(&r));
            }
        }
        3 => {
            if let Some(r) = round_trip::<pb::UpdatePodSandboxRequest>(data) {
                read_pieces(&CallEvent::from(&r));
            }
        }
        4 => {
            if let Some(r) = round_trip::<pb::ValidateContainerAdjustmentRequest>(data) {
                read_pieces(&CallEvent::validation(r));
            }
        }
        5 => {
            if let Some(r) = round_trip::<pb::SynchronizeRequest>(data) {
                let mut view = NodeView::new(ViewLimits { max_pods: 64, max_containers: 256 });
                view.synchronize(&r.pods, &r.containers);
            }
        }
        6 => {
            if let Some(r) = round_trip::<pb::RunPodSandboxRequest>(data) {
                read_pieces(&CallEvent::from(&r));
            }
        }
        7 => {
            let _ = round_trip::<pb::ConfigureRequest>(data);
        }
        8 => {
            if let Some(r) = round_trip::<pb::StateChangeEvent>(data) {
                let _ = (r.event.value(), r.pod.as_ref(), r.container.as_ref());
            }
        }
        _ => {
            if let Some(r) = round_trip::<pb::PostUpdateContainerRequest>(data) {
                read_pieces(&CallEvent::from(&r));
            }
        }
    }
});
