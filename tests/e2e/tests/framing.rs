//! Framing: messages of every size pass the reference reader in both
//! directions, and malformed input closes the connection without harming the
//! host, which reconnects.

use std::time::Duration;

use nri_sim::workload::Workload;
use nri_sim::RuntimeProfile;
use nri_wasm::nri::mux::{FrameHeader, MAX_FRAME_PAYLOAD};
use nri_wasm::nri::{Endpoint, Phase, Supervisor};
use nri_wasm::testing::NullDispatcher;
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{options, Harness, Recorder, Replies, Seen};
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;

/// Largest annotation that keeps a CreateContainer message under 4 MiB.
const MAX_BLOB: usize = (4 << 20) - (16 << 10);

fn reply_with_blob(len: usize) -> pb::CreateContainerResponse {
    let mut adjust = pb::ContainerAdjustment::default();
    adjust.annotations.insert("blob".into(), "x".repeat(len));
    pb::CreateContainerResponse { adjust: protobuf::MessageField::some(adjust), ..Default::default() }
}

fn sizes() -> impl Strategy<Value = usize> {
    prop_oneof![1usize..8192, 8192usize..262_144, 262_144usize..MAX_BLOB]
}

#[test]
fn messages_of_every_size_pass_the_reference_reader_both_ways() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let recorder = Recorder::new(Replies::default());
    let (h, conn) = rt.block_on(async {
        let h = Harness::start(RuntimeProfile::v0_12(), recorder.clone()).await;
        let conn = h.connect().await;
        (h, conn)
    });
    let w = Workload::generate(1, 1);
    let (pod, base) = (w.pods[0].clone(), w.containers[0].clone());

    let roundtrip = |reply_len: usize, request_len: usize| {
        recorder.replies.lock().unwrap().create = reply_with_blob(reply_len);
        let mut ctr = base.clone();
        ctr.annotations.insert("blob".into(), "y".repeat(request_len));
        let got = rt.block_on(conn.create_container(&pod, &ctr)).expect("round trip");
        assert_eq!(got.adjust.annotations["blob"].len(), reply_len);
        match recorder.last() {
            Some(Seen::CreateContainer(req)) => assert_eq!(req.container.annotations["blob"].len(), request_len),
            other => panic!("unexpected {other:?}"),
        }
        recorder.clear();
    };

    // Every size around the 4096-byte reader buffer, byte by byte.
    for len in 3900..4300 {
        roundtrip(len, len);
    }
    proptest!(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() }, |(a in sizes(), b in sizes())| {
        roundtrip(a, b);
    });
    roundtrip(MAX_BLOB, MAX_BLOB);
    roundtrip(1, 1);

    assert!(conn.stats().violations().is_empty(), "{:?}", conn.stats().violations());
    assert!(!conn.is_closed());
    rt.block_on(h.shutdown());
}

/// Accepts the host's connection on a socket we control and waits for its
/// first frame (the RegisterPlugin call on conn 2).
async fn accept_raw(listener: &UnixListener) -> tokio::net::UnixStream {
    let (mut s, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept()).await.unwrap().unwrap();
    let mut header = [0u8; 8];
    s.read_exact(&mut header).await.unwrap();
    assert_eq!(u32::from_be_bytes(header[..4].try_into().unwrap()), 2, "registration goes out on conn 2");
    let len = u32::from_be_bytes(header[4..].try_into().unwrap()) as usize;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).await.unwrap();
    s
}

/// Reads until the host closes the connection; fails if it does not.
async fn expect_closed_by_host(mut s: tokio::net::UnixStream) {
    let mut sink = vec![0u8; 65536];
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match s.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "host did not close the connection after a bad frame");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_close_the_connection_and_the_host_reconnects() {
    nri_wasm_e2e::init_logging();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raw.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let stop = CancellationToken::new();
    let sup =
        Supervisor::new(options(Endpoint::Socket(path.clone())), std::sync::Arc::new(NullDispatcher), stop.clone());
    let mut status = sup.handles().status;
    let task = tokio::spawn(sup.run());

    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        ("conn id 0", [FrameHeader::encode(0, 4).to_vec(), vec![1, 2, 3, 4]].concat(), false),
        ("unknown conn id", [FrameHeader::encode(9, 4).to_vec(), vec![1, 2, 3, 4]].concat(), false),
        ("length over the cap", FrameHeader::encode(1, MAX_FRAME_PAYLOAD + 1).to_vec(), false),
        ("length u32::MAX", vec![0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff], false),
        // Header promises 100 bytes, 10 arrive, then the runtime side closes.
        ("EOF mid-frame", [FrameHeader::encode(1, 100).to_vec(), vec![0; 10]].concat(), true),
        ("EOF mid-header", vec![0, 0, 0], true),
    ];
    for (name, bytes, then_close) in cases {
        let mut s = accept_raw(&listener).await;
        s.write_all(&bytes).await.unwrap();
        if then_close {
            s.shutdown().await.unwrap();
        }
        expect_closed_by_host(s).await;
        assert!(!task.is_finished(), "host exited after {name}");
        let _ = status.borrow_and_update();
    }
    // And it still registers with a real runtime afterwards.
    drop(listener);
    let sim = nri_sim::Simulator::listen(&path, RuntimeProfile::v0_12()).await.unwrap();
    let mut conn = sim.accept().await.unwrap();
    conn.configure().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), status.wait_for(|s| s.phase == Phase::Registered))
        .await
        .unwrap()
        .unwrap();
    stop.cancel();
    task.await.unwrap().unwrap();
}
