//! Every request the runtime can send, decoded from arbitrary bytes: the
//! decoder must never panic; a request that decodes must record and read
//! back (`run --record`, then `eval --replay`) as the same request; and its
//! conversion to what a policy reads (the WIT event, the piece by piece
//! accessors, the node view's entries) must never panic either.
//!
//! The host never encodes a request again, so a protobuf round trip is not
//! asserted: rust-protobuf 3.7 writes a negative value of a packed repeated
//! enum in 10 bytes after sizing it as 5, so such a request does not decode
//! again (`regressions/request_decode`). Replies carry only the enum values
//! WIT can name, all of them non-negative.
#![no_main]

use std::time::SystemTime;

use libfuzzer_sys::fuzz_target;
use nri_wasm::node::view::{NodeView, ViewLimits};
use nri_wasm::nri::record::{parse_document, Request};
use nri_wasm::policy::bindings::wit;
use nri_wasm::policy::call::event::CallEvent;
use protobuf::Message;

/// The request of kind `which` (one per event), if `data` decodes as one.
fn decode(which: u8, data: &[u8]) -> Option<Request> {
    fn parse<M: Message>(data: &[u8], into: fn(M) -> Request) -> Option<Request> {
        M::parse_from_bytes(data).ok().map(into)
    }
    match which % 16 {
        0 => parse(data, Request::CreateContainer),
        1 => parse(data, Request::UpdateContainer),
        2 => parse(data, Request::StopContainer),
        3 => parse(data, Request::UpdatePodSandbox),
        4 => parse(data, Request::ValidateContainerAdjustment),
        5 => parse(data, Request::Synchronize),
        6 => parse(data, Request::RunPodSandbox),
        7 => parse(data, Request::Configure),
        8 => parse(data, Request::PostUpdateContainer),
        9 => parse(data, Request::StartContainer),
        10 => parse(data, Request::PostCreateContainer),
        11 => parse(data, Request::PostStartContainer),
        12 => parse(data, Request::RemoveContainer),
        13 => parse(data, Request::StopPodSandbox),
        14 => parse(data, Request::RemovePodSandbox),
        _ => parse(data, Request::PostUpdatePodSandbox),
    }
}

/// What is recorded reads back as the request that was received. JSON
/// keeps no unknown fields and prints maps in any order, so the comparison
/// is of what the JSON holds.
fn record_and_read(request: &Request) {
    let line = request.to_line(SystemTime::UNIX_EPOCH);
    let back = parse_document(&line, None).unwrap_or_else(|e| panic!("a recorded request reads back: {e}: {line}"));
    assert_eq!(back.request.name(), request.name());
    let json = |r: &Request| serde_json::from_str::<serde_json::Value>(&r.to_json()).expect("the JSON is JSON");
    assert_eq!(json(&back.request), json(request), "{line}");
}

fn read_pieces(e: &CallEvent) {
    let _ = e.to_wit();
    let _ = (e.pod_meta(), e.pod_labels(), e.pod_annotations(), e.pod_label("app"));
    let _ = (e.container_meta(), e.container_labels(), e.container_annotations(), e.container_env());
    let _ = (e.container_env_var("PATH"), e.container_resources(), e.requested_resources_wit());
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, data)) = data.split_first() else { return };
    let Some(request) = decode(which, data) else { return };
    record_and_read(&request);
    match &request {
        Request::CreateContainer(r) => {
            let e = CallEvent::container(
                wit::EventKind::CreateContainer,
                std::sync::Arc::new((*r.pod).clone()),
                std::sync::Arc::new((*r.container).clone()),
            );
            read_pieces(&e);
            let mut view = NodeView::new(ViewLimits::default());
            view.container_created(&r.container, None);
        }
        Request::UpdateContainer(r) => {
            let _ = wit::Event::from(r);
        }
        Request::StopContainer(r) => read_pieces(&CallEvent::from(r)),
        Request::UpdatePodSandbox(r) => read_pieces(&CallEvent::from(r)),
        Request::ValidateContainerAdjustment(r) => read_pieces(&CallEvent::validation(r.clone())),
        Request::Synchronize(r) => {
            let mut view = NodeView::new(ViewLimits { max_pods: 64, max_containers: 256 });
            view.synchronize(&r.pods, &r.containers);
        }
        Request::RunPodSandbox(r) => read_pieces(&CallEvent::from(r)),
        Request::StopPodSandbox(r) => read_pieces(&CallEvent::from(r)),
        Request::RemovePodSandbox(r) => read_pieces(&CallEvent::from(r)),
        Request::PostUpdatePodSandbox(r) => read_pieces(&CallEvent::from(r)),
        Request::PostCreateContainer(r) => read_pieces(&CallEvent::from(r)),
        Request::StartContainer(r) => read_pieces(&CallEvent::from(r)),
        Request::PostStartContainer(r) => read_pieces(&CallEvent::from(r)),
        Request::PostUpdateContainer(r) => read_pieces(&CallEvent::from(r)),
        Request::RemoveContainer(r) => read_pieces(&CallEvent::from(r)),
        Request::Configure(_) => {}
    }
});
