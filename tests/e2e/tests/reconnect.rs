//! Staying connected: the runtime goes away again and again, the host comes
//! back every time and serves events after each registration.

use std::time::Duration;

use nri_sim::workload::Workload;
use nri_sim::RuntimeProfile;
use nri_wasm::nri::Phase;
use nri_wasm_e2e::{Harness, Recorder, Replies, Seen};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_closes_in_a_row_twenty_re_registrations() {
    let recorder = Recorder::new(Replies::default());
    let h = Harness::start(RuntimeProfile::v0_12(), recorder.clone()).await;
    let w = Workload::generate(2, 1);
    let mut status = h.handles.status.clone();
    for round in 0..=20u64 {
        let conn = h.connect().await;
        conn.synchronize(&w.pods, &w.containers, 0).await.unwrap();
        conn.create_container(&w.pods[0], &w.containers[0]).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), status.wait_for(|s| s.registrations == round + 1))
            .await
            .expect("registration counted")
            .unwrap();
        assert!(h.handles.link.is_connected());
        conn.close().await;
        tokio::time::timeout(Duration::from_secs(5), status.wait_for(|s| s.phase != Phase::Registered))
            .await
            .expect("host notices the closed connection")
            .unwrap();
    }
    let seen = recorder.seen();
    let creates = seen.iter().filter(|s| matches!(s, Seen::CreateContainer(_))).count();
    let disconnects = seen.iter().filter(|s| matches!(s, Seen::Disconnected)).count();
    assert_eq!(creates, 21, "an event served after every registration");
    assert_eq!(disconnects, 21, "the dispatcher is told of every lost connection");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_waits_for_a_runtime_that_is_not_there_yet() {
    let recorder = Recorder::new(Replies::default());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("late.sock");
    let stop = tokio_util::sync::CancellationToken::new();
    let sup = nri_wasm::nri::Supervisor::new(
        nri_wasm_e2e::options(nri_wasm::nri::Endpoint::Socket(path.clone())),
        recorder.clone(),
        stop.clone(),
    );
    let task = tokio::spawn(sup.run());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!task.is_finished());
    let sim = nri_sim::Simulator::listen(&path, RuntimeProfile::v0_12()).await.unwrap();
    let mut conn = tokio::time::timeout(Duration::from_secs(5), sim.accept()).await.unwrap().unwrap();
    conn.configure().await.unwrap();
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_containers_reaches_the_runtime_and_reports_failures() {
    let recorder = Recorder::new(Replies::default());
    let h = Harness::start(RuntimeProfile::v0_12(), recorder).await;
    let mut conn = h.connect().await;
    // The host takes the link once its registration call returns, which
    // may be after the runtime's Configure reached it on a loaded machine.
    for _ in 0..500 {
        if h.handles.link.is_connected() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    conn.fail_updates_for(&["b"]);
    let update = |id: &str| nri_wasm_api::api::ContainerUpdate { container_id: id.into(), ..Default::default() };
    let evict =
        nri_wasm_api::api::ContainerEviction { container_id: "c".into(), reason: "oom".into(), ..Default::default() };
    let failed = h
        .handles
        .link
        .update_containers(vec![update("a"), update("b")], vec![evict.clone()], Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(failed, vec![update("b")]);
    let req = conn.next_update_request(Duration::from_secs(2)).await.unwrap();
    assert_eq!(req.update, vec![update("a"), update("b")]);
    assert_eq!(req.evict, vec![evict]);
    conn.close().await;
    let mut status = h.handles.status.clone();
    status.wait_for(|s| s.phase != Phase::Registered).await.unwrap();
    let err = h.handles.link.update_containers(vec![update("a")], vec![], Duration::from_secs(1)).await.unwrap_err();
    assert!(matches!(err, nri_wasm::nri::session::LinkError::NotConnected), "{err}");
    h.shutdown().await;
}
