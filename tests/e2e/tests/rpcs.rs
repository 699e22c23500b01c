//! Every Plugin RPC through the simulator: the host receives each request with
//! every field intact, and the runtime receives exactly what the dispatcher
//! returned.

use std::time::Duration;

use nri_sim::populate::{populated, unset_fields};
use nri_sim::{RuntimeProfile, SimError};
use nri_wasm::nri::DispatchError;
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{Harness, Recorder, Replies, Seen};
use protobuf::MessageField;

fn full_replies() -> Replies {
    let create: pb::CreateContainerResponse = populated(11);
    let update: pb::UpdateContainerResponse = populated(12);
    let stop: pb::StopContainerResponse = populated(13);
    let validate: pb::ValidateContainerAdjustmentResponse = populated(14);
    for m in [&create as &dyn protobuf::MessageDyn, &update, &stop, &validate] {
        assert!(unset_fields(m).is_empty(), "{:?}", unset_fields(m));
    }
    Replies {
        sync: populated::<pb::SynchronizeResponse>(15).update,
        create,
        update,
        stop,
        validate,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_round_trips_fully_populated_messages() {
    let recorder = Recorder::new(full_replies());
    let h = Harness::start(RuntimeProfile::v0_12(), recorder.clone()).await;
    let conn = h.connect().await;
    let replies = recorder.replies.lock().unwrap().clone();

    let sync: pb::SynchronizeRequest = populated(1);
    let updates = conn.synchronize(&sync.pods, &sync.containers, 0).await.unwrap();
    assert_eq!(updates, replies.sync);
    assert_eq!(
        recorder.last(),
        Some(Seen::Synchronize { pods: sync.pods.clone(), containers: sync.containers.clone() })
    );

    let req: pb::CreateContainerRequest = populated(2);
    assert!(unset_fields(&req).is_empty());
    let (pod, ctr) = (req.pod.clone().unwrap(), req.container.clone().unwrap());
    assert_eq!(conn.create_container(&pod, &ctr).await.unwrap(), replies.create);
    assert_eq!(recorder.last(), Some(Seen::CreateContainer(req.clone())));

    let upd: pb::UpdateContainerRequest = populated(3);
    assert_eq!(conn.update_container(&upd).await.unwrap(), replies.update);
    assert_eq!(recorder.last(), Some(Seen::UpdateContainer(upd)));

    assert_eq!(conn.stop_container(&pod, &ctr).await.unwrap(), replies.stop);
    let want = pb::StopContainerRequest {
        pod: MessageField::some(pod.clone()),
        container: MessageField::some(ctr.clone()),
        ..Default::default()
    };
    assert_eq!(recorder.last(), Some(Seen::StopContainer(want)));

    let val: pb::ValidateContainerAdjustmentRequest = populated(4);
    assert!(unset_fields(&val).is_empty());
    assert_eq!(conn.validate_container_adjustment(&val).await.unwrap(), replies.validate);
    assert_eq!(recorder.last(), Some(Seen::Validate(val)));

    let ups: pb::UpdatePodSandboxRequest = populated(5);
    conn.update_pod_sandbox(&ups).await.unwrap();
    assert_eq!(recorder.last(), Some(Seen::UpdatePodSandbox(ups)));

    let p = || MessageField::some(pod.clone());
    let c = || MessageField::some(ctr.clone());
    conn.run_pod_sandbox(&pod).await.unwrap();
    assert_eq!(recorder.last(), Some(Seen::RunPodSandbox(pb::RunPodSandboxRequest { pod: p(), ..Default::default() })));
    conn.post_update_pod_sandbox(&pod).await.unwrap();
    assert_eq!(
        recorder.last(),
        Some(Seen::PostUpdatePodSandbox(pb::PostUpdatePodSandboxRequest { pod: p(), ..Default::default() }))
    );
    conn.stop_pod_sandbox(&pod).await.unwrap();
    assert_eq!(
        recorder.last(),
        Some(Seen::StopPodSandbox(pb::StopPodSandboxRequest { pod: p(), ..Default::default() }))
    );
    conn.remove_pod_sandbox(&pod).await.unwrap();
    assert_eq!(
        recorder.last(),
        Some(Seen::RemovePodSandbox(pb::RemovePodSandboxRequest { pod: p(), ..Default::default() }))
    );
    conn.post_create_container(&pod, &ctr).await.unwrap();
    assert_eq!(
        recorder.last(),
        Some(Seen::PostCreateContainer(pb::PostCreateContainerRequest {
            pod: p(),
            container: c(),
            ..Default::default()
        }))
    );
    conn.start_container(&pod, &ctr).await.unwrap();
    assert_eq!(
        recorder.last(),
        Some(Seen::StartContainer(pb::StartContainerRequest { pod: p(), container: c(), ..Default::default() }))
    );
    conn.post_start_container(&pod, &ctr).await.unwrap();
    assert_eq!(
        recorder.last(),
        Some(Seen::PostStartContainer(pb::PostStartContainerRequest {
            pod: p(),
            container: c(),
            ..Default::default()
        }))
    );
    conn.post_update_container(&pod, &ctr).await.unwrap();
    assert_eq!(
        recorder.last(),
        Some(Seen::PostUpdateContainer(pb::PostUpdateContainerRequest {
            pod: p(),
            container: c(),
            ..Default::default()
        }))
    );
    conn.remove_container(&pod, &ctr).await.unwrap();
    assert_eq!(
        recorder.last(),
        Some(Seen::RemoveContainer(pb::RemoveContainerRequest { pod: p(), container: c(), ..Default::default() }))
    );

    // Dedicated RPCs were used throughout: no StateChange fallback.
    assert_eq!(conn.fallbacks(), 0);
    assert!(conn.stats().violations().is_empty());
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captured_containerd_requests_arrive_intact() {
    let recorder = Recorder::new(Replies::default());
    let h = Harness::start(RuntimeProfile::v0_12(), recorder.clone()).await;
    let conn = h.connect().await;

    let sync: pb::SynchronizeRequest = nri_sim::fixtures::load("Synchronize").expect("Synchronize fixture");
    conn.synchronize(&sync.pods, &sync.containers, 0).await.unwrap();
    assert_eq!(
        recorder.last(),
        Some(Seen::Synchronize { pods: sync.pods.clone(), containers: sync.containers.clone() })
    );

    let run: pb::RunPodSandboxRequest = nri_sim::fixtures::load("RunPodSandbox").expect("RunPodSandbox fixture");
    conn.run_pod_sandbox(&run.pod).await.unwrap();
    assert_eq!(recorder.last(), Some(Seen::RunPodSandbox(run)));

    let create: pb::CreateContainerRequest = nri_sim::fixtures::load("CreateContainer").expect("fixture");
    assert_eq!(create.container.env[0], "PATH=/:/bin", "fixture decoded with proto field names");
    conn.create_container(&create.pod, &create.container).await.unwrap();
    assert_eq!(recorder.last(), Some(Seen::CreateContainer(create)));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_error_fails_the_event_and_keeps_the_plugin() {
    let recorder = Recorder::new(Replies {
        fail: Some(DispatchError::Denied("privileged containers are not allowed".into())),
        ..Default::default()
    });
    let h = Harness::start(RuntimeProfile::v0_12(), recorder.clone()).await;
    let conn = h.connect().await;
    let w = nri_sim::workload::Workload::generate(1, 1);
    let err = conn.create_container(&w.pods[0], &w.containers[0]).await.unwrap_err();
    let status = err.status().expect("event failed with a status");
    assert_eq!(status.code(), ttrpc::Code::PERMISSION_DENIED);
    assert!(status.message().contains("privileged containers are not allowed"), "{status:?}");
    // Still connected: the next event is delivered.
    recorder.replies.lock().unwrap().fail = None;
    conn.create_container(&w.pods[0], &w.containers[0]).await.unwrap();
    assert!(!conn.is_closed());
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_dispatcher_is_answered_for_inside_the_request_timeout() {
    let recorder = Recorder::new(Replies { delay: Some(Duration::from_secs(5)), ..Default::default() });
    // containerd's default: the host answers at 90 % of it, leaving the
    // margin a real runtime leaves (a shorter timeout would leave a margin a
    // busy machine can eat).
    let profile = RuntimeProfile::v0_12().with_request_timeout(Duration::from_secs(2));
    let h = Harness::start(profile, recorder.clone()).await;
    let conn = h.connect().await;
    let w = nri_sim::workload::Workload::generate(1, 1);
    // The simulated runtime times the request out itself, as a runtime
    // does: an answer it got is one inside its timeout (no wall-clock bound
    // of the test's own).
    let err = conn.create_container(&w.pods[0], &w.containers[0]).await.unwrap_err();
    assert!(matches!(err, SimError::Failed { .. }), "the runtime got an answer, not a timeout: {err}");
    assert!(!conn.is_closed(), "plugin must not be dropped");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_is_timed_at_both_ends_of_the_socket() {
    // The chain takes 20 ms: the handler's part must hold it, the host's
    // answer the handler's part, and the runtime's round trip the answer.
    let chain = Duration::from_millis(20);
    let recorder = Recorder::new(Replies { delay: Some(chain), ..Default::default() });
    let h = Harness::start(RuntimeProfile::v0_12(), recorder.clone()).await;
    let conn = h.connect().await;
    conn.synchronize(&[], &[], 0).await.unwrap();
    let pod = nri_sim::workload::pod(1);
    let ctr = nri_sim::workload::container(&pod, 1);
    // Over 4 KiB: the request arrives in two frames.
    let req = pb::CreateContainerRequest {
        pod: MessageField::some(pod.clone()),
        container: MessageField::some(ctr.clone()),
        ..Default::default()
    };
    assert!(protobuf::Message::compute_size(&req) > 4096);
    conn.create_container(&pod, &ctr).await.expect("created");
    let trip = conn.stats().last_round_trip().expect("the runtime timed its request");

    let waited = std::time::Instant::now();
    let answers = loop {
        let answers = recorder.answers.lock().unwrap().clone();
        if answers.iter().any(|a| a.stream == trip.stream) {
            break answers;
        }
        assert!(waited.elapsed() < Duration::from_secs(10), "no answer timed for stream {}: {answers:?}", trip.stream);
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // One report per request, each naming its event.
    let events: Vec<_> = answers.iter().map(|a| a.event).collect();
    assert_eq!(events, [Some("Configure"), Some("Synchronize"), Some("CreateContainer")], "{answers:?}");
    let create = answers[2];
    assert_eq!(create.stream, trip.stream);
    let handler = create.handler.expect("the handler's part");
    assert!(handler >= chain, "{create:?}");
    assert!(create.total >= handler, "{create:?}");
    assert!(trip.took >= create.total, "runtime {trip:?}, host {create:?}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_of_a_cri_call_is_timed_in_the_order_it_was_sent() {
    // CreateContainer then PostCreateContainer, as a runtime sends them for
    // one CRI CreateContainer: each is its own round trip, and the first is
    // CreateContainer's (the last one alone would be PostCreateContainer's).
    let recorder = Recorder::new(Replies::default());
    let h = Harness::start(RuntimeProfile::v0_12(), recorder.clone()).await;
    let conn = h.connect().await;
    conn.synchronize(&[], &[], 0).await.unwrap();
    let runtime = nri_sim::node::SimRuntime::new(conn, nri_sim::node::NodeModel::shared());
    let pod = nri_sim::workload::pod(1);
    runtime.run_pod(&pod).await.unwrap();
    runtime.conn.stats().take_round_trips();
    let created = runtime.create(&nri_sim::workload::container(&pod, 1)).await.expect("created");
    let trips = runtime.conn.stats().take_round_trips();
    runtime.start(&created.id).await.expect("started");
    let started = runtime.conn.stats().take_round_trips();
    assert!(runtime.conn.stats().take_round_trips().is_empty(), "taken trips are gone");

    let all: Vec<_> = trips.iter().chain(&started).copied().collect();
    let waited = std::time::Instant::now();
    let answers = loop {
        let answers = recorder.answers.lock().unwrap().clone();
        if all.iter().all(|t| answers.iter().any(|a| a.stream == t.stream)) {
            break answers;
        }
        assert!(waited.elapsed() < Duration::from_secs(10), "not every trip answered: {all:?} {answers:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let event = |t: &nri_sim::RoundTrip| answers.iter().find(|a| a.stream == t.stream).and_then(|a| a.event);
    let events: Vec<_> = all.iter().map(event).collect();
    assert_eq!(
        events,
        [Some("CreateContainer"), Some("PostCreateContainer"), Some("StartContainer"), Some("PostStartContainer")],
        "{all:?}"
    );
    h.shutdown().await;
}
