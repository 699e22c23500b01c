//! `nri-wasm run --record` at the dispatcher seam, over the real transport:
//! what the recording holds is what the dispatcher received, whichever way
//! the runtime delivered it (a split Synchronize, the StateChange of older
//! runtimes), in order, in the format `eval --replay` reads.
//!
//! The binary's author commands themselves (`check`, `eval`, `new`, a
//! recording made by the binary replayed against its live run) are tested
//! with the binary, in `host/tests/integration/author_tools.rs`: an integration test of
//! another package cannot run it.

use std::sync::Arc;
use std::time::Duration;

use nri_sim::workload::Workload;
use nri_sim::RuntimeProfile;
use nri_wasm::nri::record::{self, parse_document, RecordOptions, RecordingDispatcher, Request};
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{Harness, Recorder, Replies, Seen};

fn read(path: &std::path::Path) -> Vec<Request> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| parse_document(line, None).unwrap_or_else(|e| panic!("{e}: {line}")).request)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_recorded_as_the_dispatcher_received_it() {
    // v0.12 announces its NRI version and has the dedicated RPCs; v0.8
    // delivers start and remove through StateChange and announces nothing.
    for (profile, announced) in [(RuntimeProfile::v0_12(), "v0.12.0"), (RuntimeProfile::v0_8(), "")] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requests.jsonl");
        let inner = Recorder::new(Replies::default());
        let requests = Arc::new(record::Recorder::start(RecordOptions { path: path.clone(), max_bytes: 0 }));
        let dispatcher = Arc::new(RecordingDispatcher::new(inner.clone(), requests.clone()));
        let h = Harness::start(profile.clone(), dispatcher).await;
        let conn = h.connect().await;
        let w = Workload::generate(3, 2);
        // Split in chunks of two containers: recorded once, whole.
        conn.synchronize(&w.pods, &w.containers, 2).await.unwrap();
        let (pod, ctr) = (&w.pods[0], &w.containers[0]);
        conn.run_pod_sandbox(pod).await.unwrap();
        conn.create_container(pod, ctr).await.unwrap();
        conn.start_container(pod, ctr).await.unwrap();
        conn.stop_container(pod, ctr).await.unwrap();
        conn.remove_container(pod, ctr).await.unwrap();
        conn.close().await;
        h.shutdown().await;
        requests.close(Duration::from_secs(10));
        assert_eq!(requests.dropped(), 0);

        let recorded = read(&path);
        let names: Vec<&str> = recorded.iter().map(Request::name).collect();
        let want = [
            "Configure",
            "Synchronize",
            "RunPodSandbox",
            "CreateContainer",
            "StartContainer",
            "StopContainer",
            "RemoveContainer",
        ];
        assert_eq!(names, want, "{}", profile.runtime_version);
        let Request::Configure(configure) = &recorded[0] else { unreachable!() };
        assert_eq!(
            (configure.runtime_version.as_str(), configure.NRI_version.as_str(), configure.request_timeout),
            (profile.runtime_version.as_str(), announced, profile.request_timeout.as_millis() as i64)
        );
        let whole =
            pb::SynchronizeRequest { pods: w.pods.clone(), containers: w.containers.clone(), ..Default::default() };
        assert_eq!(recorded[1], Request::Synchronize(whole));
        let create = pb::CreateContainerRequest {
            pod: protobuf::MessageField::some(pod.clone()),
            container: protobuf::MessageField::some(ctr.clone()),
            ..Default::default()
        };
        assert_eq!(recorded[3], Request::CreateContainer(create.clone()));

        // The dispatcher behind the recording saw the same, in the same order.
        let seen: Vec<Seen> = inner.seen().into_iter().filter(|s| !matches!(s, Seen::Disconnected)).collect();
        assert_eq!(seen.len(), want.len(), "{seen:?}");
        assert!(matches!(&seen[3], Seen::CreateContainer(r) if *r == create));
        assert!(matches!(&seen[4], Seen::StartContainer(r) if r.container.id == ctr.id));
    }
}
