//! The host's own pod (`--pod-uid`) is out of every policy's reach: the
//! updates and evictions a policy granted everything aims at one of its
//! containers are dropped from its reply, and the rest of the reply goes
//! through, on the served path (a real socket, ttrpc and a Synchronize that
//! names the host's pod), at CreateContainer and when the runtime resizes
//! the host's own container, in a chain that keeps no node view. Another pod
//! that takes the host's name and labels, but not its UID, is updated and
//! evicted as before, and so is the host's container when the host is not
//! told its UID.

use std::sync::Arc;

use nri_sim::{PluginConn, RuntimeProfile};
use nri_wasm::policy::chain::{Chain, ChainSettings};
use nri_wasm::policy::dispatcher::PolicyDispatcher;
use nri_wasm::policy::spec::manifest::{Mode, OnError, PolicySpec};
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{guests, roomy, shared_engine, shared_loader, test_facts, Harness};

const HOST_UID: &str = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";

/// The host's pod, a pod that copies its name and labels under another UID,
/// and a container in each.
struct Node {
    pods: Vec<pb::PodSandbox>,
    host: pb::Container,
    impostor: pb::Container,
}

fn node() -> Node {
    let mut host_pod = nri_sim::workload::pod(1);
    host_pod.name = "nri-wasm-x7k2p".into();
    host_pod.namespace = "kube-system".into();
    host_pod.uid = HOST_UID.into();
    host_pod.labels.insert("io.kubernetes.pod.uid".into(), HOST_UID.into());
    host_pod.labels.insert("app.kubernetes.io/name".into(), "nri-wasm".into());
    let mut impostor_pod = nri_sim::workload::pod(2);
    impostor_pod.name = host_pod.name.clone();
    impostor_pod.namespace = host_pod.namespace.clone();
    impostor_pod.labels = host_pod.labels.clone();
    let host = nri_sim::workload::container(&host_pod, 1);
    let impostor = nri_sim::workload::container(&impostor_pod, 1);
    Node { pods: vec![host_pod, impostor_pod], host, impostor }
}

fn chain(script: &str, on_error: OnError) -> Chain {
    let spec = PolicySpec {
        settings: script.into(),
        on_error,
        mode: Mode::Enforce,
        limits: roomy(),
        ..PolicySpec::granting_all("20-reach", guests::REPLAY)
    };
    let policy = shared_loader().load(&spec, &Arc::new(test_facts())).unwrap_or_else(|e| panic!("{e}"));
    Chain::new(vec![policy], ChainSettings::default())
}

struct Served {
    h: Harness,
    conn: PluginConn,
    dispatcher: Arc<PolicyDispatcher>,
}

async fn serve(uid: Option<&str>, w: &Node) -> Served {
    let dispatcher = Arc::new(
        PolicyDispatcher::new(shared_engine(), chain("", OnError::Fail), test_facts(), 1)
            .with_own_pod(uid.map(String::from)),
    );
    let h = Harness::start_policies(RuntimeProfile::v0_12(), dispatcher.clone()).await;
    let conn = h.connect().await;
    conn.synchronize(&w.pods, &[w.host.clone(), w.impostor.clone()], 10).await.expect("synchronize");
    Served { h, conn, dispatcher }
}

/// A container being created in the impostor's pod.
fn new_container(w: &Node) -> pb::Container {
    pb::Container { id: "c-new".into(), name: "new".into(), ..nri_sim::workload::container(&w.pods[1], 9) }
}

/// Whether a reply's updates or evictions name `id`.
fn names(update: &[pb::ContainerUpdate], evict: &[pb::ContainerEviction], id: &str) -> bool {
    update.iter().any(|u| u.container_id == id) || evict.iter().any(|e| e.container_id == id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_policy_updates_or_evicts_the_hosts_own_containers() {
    let w = node();
    let s = serve(Some(HOST_UID), &w).await;
    let host = w.host.id.as_str();
    let (pod, ctr) = (&w.pods[1], &new_container(&w));
    let impostor = w.impostor.id.as_str();
    for (label, script, kept) in [
        ("evict", format!("evict {host} make room"), 0),
        ("memory", format!("update {host} memory-limit 4096"), 0),
        ("cpu", format!("update {host} cpu-shares 2 ignore-failure"), 0),
        ("among others", format!("update {impostor} cpu-shares 512; evict {host} make room; evict {impostor} x"), 2),
    ] {
        for on_error in [OnError::Fail, OnError::Ignore] {
            assert!(!s.dispatcher.replace_chain(chain(&script, on_error)));
            let label = format!("{label} ({on_error:?})");
            let reply = s.conn.create_container(pod, ctr).await.unwrap_or_else(|e| panic!("{label}: {e}"));
            assert!(
                !names(&reply.update, &reply.evict, host),
                "{label}: the host's container is out of reach: {reply:?}"
            );
            // The rest of the reply goes through.
            assert_eq!(reply.update.len() + reply.evict.len(), kept, "{label}: {reply:?}");
            assert!(kept == 0 || names(&reply.update, &reply.evict, impostor), "{label}: {reply:?}");
        }
    }
    // The runtime asks to update the host's own container (a resize of its
    // pod): the policies may not change it.
    assert!(!s.dispatcher.replace_chain(chain(&format!("update {host} memory-limit 4096"), OnError::Fail)));
    let req = pb::UpdateContainerRequest {
        pod: Some(w.pods[0].clone()).into(),
        container: Some(w.host.clone()).into(),
        linux_resources: w.host.linux.as_ref().and_then(|l| l.resources.clone().into_option()).into(),
        ..Default::default()
    };
    let reply = s.conn.update_container(&req).await.expect("update");
    let limited = |u: &pb::ContainerUpdate| {
        let memory = u.linux.as_ref().and_then(|l| l.resources.as_ref()).and_then(|r| r.memory.as_ref());
        memory.and_then(|m| m.limit.as_ref()).is_some_and(|l| l.value == 4096)
    };
    assert!(!reply.update.iter().any(limited), "the policy's limit is not the host's: {reply:?}");
    assert!(!s.conn.is_closed(), "the runtime kept the plugin");
    s.conn.close().await;
    s.h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_with_the_hosts_name_and_labels_is_not_shielded_nor_is_the_host_without_its_uid() {
    let w = node();
    for (uid, target) in [(Some(HOST_UID), &w.impostor), (None, &w.host)] {
        let s = serve(uid, &w).await;
        let script = format!("update {id} memory-limit 4096; evict {id} make room", id = target.id);
        assert!(!s.dispatcher.replace_chain(chain(&script, OnError::Fail)));
        let reply = s.conn.create_container(&w.pods[1], &new_container(&w)).await.expect("create");
        let label = format!("{uid:?}");
        assert_eq!(reply.update.len(), 1, "{label}: {reply:?}");
        assert_eq!(reply.update[0].container_id, target.id, "{label}");
        assert_eq!(reply.evict.len(), 1, "{label}: {reply:?}");
        assert_eq!(reply.evict[0].container_id, target.id, "{label}");
        s.conn.close().await;
        s.h.shutdown().await;
    }
}
