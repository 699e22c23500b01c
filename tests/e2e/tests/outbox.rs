//! Updates the host sends on its own (UpdateContainers, after an event
//! whose reply cannot carry them) against a runtime that takes one lock
//! for every event and for a plugin's UpdateContainers, as containerd and
//! CRI-O do: an update sent while the runtime is in the next event is
//! applied after that event, so the next event must not wait for it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nri_sim::node::{NodeModel, SimRuntime};
use nri_sim::RuntimeProfile;
use nri_wasm::policy::chain::{Chain, ChainSettings};
use nri_wasm::policy::dispatcher::PolicyDispatcher;
use nri_wasm::policy::engine::CompiledPolicy;
use nri_wasm::policy::spec::manifest::OnError;
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{guests, policy_spec, roomy, shared_engine, shared_loader, test_facts, Harness};
use protobuf::MessageField;

const LABEL: &str = "example.com/squeeze";

fn load(name: &str, wasm: &str, settings: &str) -> CompiledPolicy {
    let spec = policy_spec(name, wasm, settings, OnError::Fail, roomy());
    shared_loader().load(&spec, &Arc::new(test_facts())).unwrap_or_else(|e| panic!("{e}"))
}

/// Container `n` of `pod`, labelled for squeeze as `role`, with a CPU
/// quota of 50 ms per 100 ms.
fn container(pod: &pb::PodSandbox, n: usize, role: &str) -> pb::Container {
    let mut c = nri_sim::workload::container(pod, n);
    c.id = format!("{role}-{n}");
    c.labels.insert(LABEL.into(), role.into());
    let cpu = c.linux.mut_or_insert_default().resources.mut_or_insert_default().cpu.mut_or_insert_default();
    cpu.quota = MessageField::some(pb::OptionalInt64 { value: 50_000, ..Default::default() });
    cpu.period = MessageField::some(pb::OptionalUInt64 { value: 100_000, ..Default::default() });
    c
}

fn quota(rt: &SimRuntime, id: &str) -> Option<i64> {
    let m = rt.model();
    let r = m.containers[id].linux.as_ref()?.resources.as_ref()?;
    Some(r.cpu.as_ref()?.quota.as_ref()?.value)
}

/// squeeze updates the running target when a trigger starts, with
/// UpdateContainers once StartContainer is answered; a probe keeps that
/// StartContainer 300 ms, long enough for the runtime to start the next
/// event (a create, from another CRI call) and wait for its lock meanwhile.
/// The host's update then waits for the lock behind that create: the
/// create's answer must not wait for it (it waited 250 ms, in vain, for an
/// update that could only be applied after it), its policies see the target
/// as the update leaves it, and the update reaches the runtime after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_in_flight_does_not_hold_back_the_next_event() {
    let chain = Chain::new(
        vec![
            load("10-squeeze", guests::SQUEEZE, "30000"),
            load("20-probe", guests::PROBE, "start-sleep:300;view-quotas"),
        ],
        ChainSettings::default(),
    );
    let d = Arc::new(PolicyDispatcher::new(shared_engine(), chain, test_facts(), 4));
    let h = Harness::start_policies(RuntimeProfile::v0_12(), d.clone()).await;
    let rt = Arc::new(SimRuntime::new(h.connect().await, NodeModel::shared()));
    rt.synchronize().await.unwrap();
    let pod = nri_sim::workload::pod(1);
    rt.run_pod(&pod).await.unwrap();
    let target = rt.create(&container(&pod, 1, "target")).await.unwrap();
    let trigger = rt.create(&container(&pod, 2, "trigger")).await.unwrap();
    let quotas = |reply: &pb::Container| reply.annotations.get("example.com/quotas").cloned().unwrap_or_default();
    assert_eq!(quotas(&trigger), "target-1=50000,trigger-2=50000", "as created");
    // Each start answered 300 ms later; the target's own changes nothing.
    rt.start(&target.id).await.unwrap();
    d.outbox_flushed(Duration::from_secs(2)).await;

    let written = rt.conn.stats().frames_written();
    let starting = tokio::spawn({
        let (rt, id) = (rt.clone(), trigger.id.clone());
        async move {
            rt.start(&id).await.expect("the trigger starts");
            Instant::now()
        }
    });
    // The runtime is in the StartContainer (its request is on the wire,
    // sent under the runtime's lock); the next event waits for it.
    let deadline = Instant::now() + Duration::from_secs(60);
    while rt.conn.stats().frames_written() == written {
        assert!(Instant::now() < deadline, "the StartContainer was not sent within 60 s");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let next = rt.create(&container(&pod, 3, "other")).await.expect("the next event is answered");
    let answered = Instant::now();
    let started = starting.await.unwrap();
    let waited = answered.saturating_duration_since(started);
    // Waiting for the update took the outbox's whole 250 ms (253 measured),
    // on top of the create's own evaluation.
    assert!(
        waited < Duration::from_millis(250),
        "the next event was answered {waited:?} after the start it waited for"
    );
    assert_eq!(
        quotas(&next),
        "other-3=50000,target-1=30000,trigger-2=50000",
        "its policies see the update the runtime has yet to apply"
    );

    d.outbox_flushed(Duration::from_secs(2)).await;
    assert_eq!(quota(&rt, "target-1"), Some(30_000), "the update reached the runtime after the create");
    let seen = d.view().container("target-1").and_then(|c| c.resources.clone()).map(|r| r.cpu.quota.value);
    assert_eq!(seen, Some(30_000), "the view has what the runtime took");
    assert!(!rt.conn.is_closed());
    Arc::into_inner(rt).expect("the start is over").close().await;
    h.shutdown().await;
}
