//! What a policy returns, arbitrary: two replies (decoded from the input as
//! protobuf, turned into what a guest hands the host, then converted back
//! as the host converts a guest's reply) are validated and merged into a
//! real CreateContainer and UpdateContainer request, as a chain of two
//! policies. Nothing may panic; a merge that fails leaves the merge as it
//! was; what the merge answers is valid, within the reply limits, and
//! encodes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_wasm::api::api as pb;
use nri_wasm::merge::{CreateMerge, UpdateMerge};
use nri_wasm::policy::bindings::wit;
use protobuf::{Message, MessageField};
use std::sync::OnceLock;

/// A guest's reply: protobuf from the fuzzer, through WIT and back.
fn guest_reply(bytes: &[u8]) -> Option<pb::CreateContainerResponse> {
    let decoded = pb::CreateContainerResponse::parse_from_bytes(bytes).ok()?;
    let reply = wit::Reply::from(&decoded);
    pb::CreateContainerResponse::try_from(reply).ok()
}

/// The CreateContainer and UpdateContainer requests the replies are merged
/// into. They do not depend on the input, so they are built once: building
/// and dropping them (a realistic pod and container, hundreds of strings)
/// took about a third of each run.
fn requests() -> &'static (pb::CreateContainerRequest, pb::UpdateContainerRequest) {
    static REQUESTS: OnceLock<(pb::CreateContainerRequest, pb::UpdateContainerRequest)> = OnceLock::new();
    REQUESTS.get_or_init(|| {
        let pod = nri_sim::workload::pod(3);
        let container = nri_sim::workload::container(&pod, 1);
        let create = pb::CreateContainerRequest {
            pod: MessageField::some(pod),
            container: MessageField::some(container),
            ..Default::default()
        };
        let update = pb::UpdateContainerRequest {
            pod: create.pod.clone(),
            container: create.container.clone(),
            linux_resources: create.container.linux.resources.clone(),
            ..Default::default()
        };
        (create, update)
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let split = usize::from(data[0]) * data.len() / 256;
    let (first, second) = data[1..].split_at(split.min(data.len() - 1));
    let replies: Vec<pb::CreateContainerResponse> = [first, second].iter().filter_map(|b| guest_reply(b)).collect();

    let (req, update) = requests();
    let mut merge = CreateMerge::new(req);
    for (i, reply) in replies.iter().enumerate() {
        let before = merge.clone();
        if merge.apply(&format!("{i}0-p"), reply).is_err() {
            assert!(merge == before, "a failed apply leaves the merge unchanged");
        }
    }
    let _ = merge.owners();
    let done = merge.finish();
    let bytes = done.write_to_bytes().expect("the merged reply encodes");
    assert!(pb::CreateContainerResponse::parse_from_bytes(&bytes).is_ok());

    let mut merge = UpdateMerge::new(update);
    for (i, reply) in replies.iter().enumerate() {
        let reply = pb::UpdateContainerResponse {
            update: reply.update.clone(),
            evict: reply.evict.clone(),
            ..Default::default()
        };
        let before = merge.clone();
        if merge.apply(&format!("{i}0-p"), &reply).is_err() {
            assert!(merge == before, "a failed apply leaves the merge unchanged");
        }
    }
    let _ = merge.finish().write_to_bytes().expect("the merged update encodes");
});
