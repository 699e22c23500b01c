//! The node view: what listing it costs a policy, and what keeping it
//! current costs the host, with 250 pods and 1,000 containers known.
//!
//! `cargo bench -p nri-wasm-benches --bench node`; `docs/performance.md`
//! records the figures. The listing cost is the difference between a probe
//! policy that lists every container and the same probe doing nothing, on
//! the same (small) event and view.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use nri_sim::workload::{self, Workload};
use nri_wasm::node::view::{NodeView, ViewLimits};
use nri_wasm::policy::bindings::wit;
use nri_wasm::policy::call::event::CallEvent;
use nri_wasm::policy::call::state::StateStore;
use nri_wasm::policy::engine::CallEnv;
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::OnError;
use nri_wasm_api::api as pb;
use nri_wasm_benches::{guests, Bench};
use protobuf::MessageField;

/// The allocator of the `nri-wasm` binary, so the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BUDGET: Duration = Duration::from_secs(10);

fn view(pods: usize, per_pod: usize) -> NodeView {
    let w = Workload::generate(pods, per_pod);
    let mut v = NodeView::new(ViewLimits::default());
    v.synchronize(&w.pods, &w.containers);
    v
}

fn benches(c: &mut Criterion) {
    let bench = Bench::new();
    let big = Arc::new(view(250, 4));
    assert_eq!(big.len(), (250, 1000));
    let env = CallEnv { facts: bench.facts.clone(), view: big.clone(), states: Arc::new(StateStore::in_memory()) };
    let event = CallEvent::container(wit::EventKind::CreateContainer, Arc::default(), Arc::default());
    let probe = |settings: &str| bench.load("10-probe", guests::PROBE, settings, OnError::Fail, Limits::default());
    let mut g = c.benchmark_group("node_view");
    for (name, settings) in [("call_baseline", ""), ("list_ids_1000", "list-ids"), ("list_full_1000", "list-full")] {
        let policy = probe(settings);
        g.bench_function(name, |b| {
            b.iter(|| {
                let report = bench.engine.call(&policy, black_box(event.clone()), &env, None, BUDGET);
                assert!(matches!(report.outcome, Ok(Ok(_))), "{:?}", report.outcome);
                report
            })
        });
    }

    // One container's life, seven events: create (with an adjustment),
    // post-create, start, post-start, an update, stop, remove.
    let pod = workload::pod(7);
    let mut ctr = workload::container(&pod, 9);
    ctr.id = "bench-container".into();
    let mut adjust = pb::ContainerAdjustment::default();
    adjust.annotations.insert("example.com/a".into(), "1".into());
    adjust.linux.mut_or_insert_default().resources.mut_or_insert_default().cpu.mut_or_insert_default().cpus =
        "2-3".into();
    let update = pb::ContainerUpdate {
        container_id: "bench-container".into(),
        linux: MessageField::some(pb::LinuxContainerUpdate {
            resources: adjust.linux.resources.clone(),
            ..Default::default()
        }),
        ..Default::default()
    };
    // The same view throughout: every iteration adds the container and
    // removes it again.
    let mut v = (*big).clone();
    g.bench_function("lifecycle_of_one_container", |b| {
        b.iter(|| {
            v.container_created(black_box(&ctr), Some(&adjust));
            v.container_seen(&ctr);
            v.set_state(&ctr.id, pb::ContainerState::CONTAINER_RUNNING);
            v.container_seen(&ctr);
            v.apply_updates(std::slice::from_ref(&update));
            v.set_state(&ctr.id, pb::ContainerState::CONTAINER_STOPPED);
            v.container_removed(&ctr.id);
        })
    });
    assert_eq!(v.len(), (250, 1000));
    g.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    benches(&mut c);
    c.final_summary();
}
