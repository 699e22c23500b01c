//! Registration and Configure against runtimes of every NRI generation, the
//! StateChange path of old runtimes, and split synchronisation.

use nri_sim::workload::Workload;
use nri_sim::{RuntimeProfile, MASK_BEFORE_V0_10};
use nri_wasm::nri::version::{NriVersion, VersionSource};
use nri_wasm::nri::{EventKind, EventMask};
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{Harness, Recorder, Replies, Seen};

async fn mask_for(profile: RuntimeProfile, wanted: EventMask) -> i32 {
    let recorder = Recorder::new(Replies { events: Some(wanted), ..Default::default() });
    let h = Harness::start(profile, recorder).await;
    let conn = h.connect().await;
    let reg = conn.registration().clone();
    assert_eq!((reg.plugin_name.as_str(), reg.plugin_idx.as_str()), ("nri-wasm", "10"));
    assert_eq!(reg.NRI_version, "v0.12.0");
    let mask = conn.subscribed().unwrap();
    h.shutdown().await;
    mask
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_masks_match_each_runtime_generation() {
    let all = EventMask::all();
    let all_but_validation = all.without(EventKind::ValidateContainerAdjustment);
    // (runtime, what the dispatcher wants, the mask the runtime must get)
    let cases = [
        (RuntimeProfile::v0_6(), all, 0x7ff),
        (RuntimeProfile::v0_8(), all, 0x7ff),
        (RuntimeProfile::v0_10(), all, 0x3fff),
        (RuntimeProfile::v0_12(), all, 0x3fff),
        (RuntimeProfile::v0_12(), all_but_validation, 0x1fff),
        (RuntimeProfile::v0_6(), all_but_validation, 0x7ff),
        // iSulad: v0.6.1 inferred from its name, so no validation either.
        (RuntimeProfile::isulad(), all, 0x7ff),
        // Only events the old runtime does not know: never 0, never unknown.
        (RuntimeProfile::v0_8(), EventMask::EMPTY.with(EventKind::UpdatePodSandbox), 1 << 8),
    ];
    for (profile, wanted, want) in cases {
        let name = format!("{} {}", profile.runtime_name, profile.runtime_version);
        let got = mask_for(profile, wanted).await;
        assert_eq!(got, want, "{name}: mask {got:#x}, expected {want:#x}");
    }
}

/// iSulad announces no NRI version: the host infers v0.6.1 from its name,
/// and no validation is subscribed (it has none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn isulad_is_recognised_by_name() {
    let recorder = Recorder::new(Replies::default());
    let h = Harness::start(RuntimeProfile::isulad(), recorder.clone()).await;
    let conn = h.connect().await;
    assert_eq!(conn.subscribed(), Some(0x7ff));
    let runtime = recorder.runtime.lock().unwrap().clone().expect("configured");
    assert_eq!(runtime.nri_version, NriVersion::new(0, 6, 1));
    assert_eq!(
        runtime.nri_version_source,
        VersionSource::Inferred { runtime: "isulad".into(), version: "2.1.6".into() }
    );
    let w = Workload::generate(1, 1);
    let err = conn.validate_container_adjustment(&Default::default()).await.unwrap_err();
    assert!(matches!(err, nri_sim::SimError::NotSubscribed(_)), "{err}");
    conn.create_container(&w.pods[0], &w.containers[0]).await.unwrap();
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_runtime_gets_the_baseline_mask() {
    let mut profile = RuntimeProfile::v0_8();
    profile.runtime_name = "some-new-runtime".into();
    profile.runtime_version = "0.1.0".into();
    assert_eq!(mask_for(profile, EventMask::all()).await, MASK_BEFORE_V0_10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_runtimes_deliver_events_through_state_change() {
    for profile in [RuntimeProfile::v0_6(), RuntimeProfile::isulad(), RuntimeProfile::v0_8(), RuntimeProfile::v0_10()] {
        let recorder = Recorder::new(Replies::default());
        let h = Harness::start(profile, recorder.clone()).await;
        let conn = h.connect().await;
        let w = Workload::generate(1, 1);
        let (pod, ctr) = (&w.pods[0], &w.containers[0]);
        conn.run_pod_sandbox(pod).await.unwrap();
        conn.create_container(pod, ctr).await.unwrap();
        conn.post_create_container(pod, ctr).await.unwrap();
        conn.start_container(pod, ctr).await.unwrap();
        conn.post_start_container(pod, ctr).await.unwrap();
        conn.post_update_container(pod, ctr).await.unwrap();
        conn.stop_container(pod, ctr).await.unwrap();
        conn.remove_container(pod, ctr).await.unwrap();
        conn.stop_pod_sandbox(pod).await.unwrap();
        conn.remove_pod_sandbox(pod).await.unwrap();
        let kinds: Vec<&str> = recorder
            .seen()
            .iter()
            .filter_map(|s| match s {
                Seen::RunPodSandbox(r) if r.pod.id == pod.id => Some("run"),
                Seen::CreateContainer(_) => Some("create"),
                Seen::PostCreateContainer(r) if r.container.id == ctr.id => Some("post-create"),
                Seen::StartContainer(_) => Some("start"),
                Seen::PostStartContainer(_) => Some("post-start"),
                Seen::PostUpdateContainer(_) => Some("post-update"),
                Seen::StopContainer(_) => Some("stop"),
                Seen::RemoveContainer(_) => Some("remove"),
                Seen::StopPodSandbox(_) => Some("stop-pod"),
                Seen::RemovePodSandbox(_) => Some("remove-pod"),
                _ => None,
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "run",
                "create",
                "post-create",
                "start",
                "post-start",
                "post-update",
                "stop",
                "remove",
                "stop-pod",
                "remove-pod"
            ],
            "{}",
            conn.profile().runtime_version
        );
        assert_eq!(conn.fallbacks(), 0);
        h.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_change_for_an_event_with_a_reply_is_refused_not_dropped() {
    let recorder = Recorder::new(Replies::default());
    let h = Harness::start(RuntimeProfile::v0_6(), recorder.clone()).await;
    let conn = h.connect().await;
    let w = Workload::generate(1, 1);
    let ev = pb::StateChangeEvent {
        event: pb::Event::CREATE_CONTAINER.into(),
        pod: protobuf::MessageField::some(w.pods[0].clone()),
        container: protobuf::MessageField::some(w.containers[0].clone()),
        ..Default::default()
    };
    let err = conn.raw_state_change(&ev).await.unwrap_err();
    assert_eq!(err.status().unwrap().code(), ttrpc::Code::INVALID_ARGUMENT);
    assert!(!recorder.seen().iter().any(|s| matches!(s, Seen::CreateContainer(_))));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_synchronize_of_2000_containers() {
    let update = pb::ContainerUpdate { container_id: "ctr-7".into(), ignore_failure: true, ..Default::default() };
    let recorder = Recorder::new(Replies { sync: vec![update.clone()], ..Default::default() });
    let h = Harness::start(RuntimeProfile::v0_12(), recorder.clone()).await;
    let conn = h.connect().await;
    let w = Workload::generate(500, 4);
    assert_eq!(w.containers.len(), 2000);
    // 64 containers per chunk: 32 chunks, 31 of them with more=true; the
    // simulator checks each of those is answered more=true without updates.
    let updates = conn.synchronize(&w.pods, &w.containers, 64).await.unwrap();
    assert_eq!(updates, vec![update]);
    let syncs: Vec<_> = recorder.seen().into_iter().filter(|s| matches!(s, Seen::Synchronize { .. })).collect();
    assert_eq!(syncs.len(), 1, "the dispatcher sees one synchronisation");
    match &syncs[0] {
        Seen::Synchronize { pods, containers } => {
            assert_eq!(pods, &w.pods);
            assert_eq!(containers, &w.containers);
        }
        _ => unreachable!(),
    }
    assert!(conn.stats().violations().is_empty());
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configure_passes_the_runtime_config_to_the_dispatcher() {
    let recorder = Recorder::new(Replies::default());
    let profile = RuntimeProfile::v0_12().with_config("[plugin]\nname = \"x\"\n");
    let h = Harness::start(profile, recorder.clone()).await;
    let _conn = h.connect().await;
    assert_eq!(recorder.seen()[0], Seen::Configure("[plugin]\nname = \"x\"\n".into()));
    h.shutdown().await;
}
