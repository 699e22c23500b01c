//! Node state for policies, end to end: the example policies against the
//! simulated runtime and its ground truth, policy state semantics, and the
//! node view compared with what the runtime really runs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use nri_sim::node::{NodeModel, SimRuntime};
use nri_sim::{workload, RuntimeProfile};
use nri_wasm::policy::chain::{Chain, ChainSettings};
use nri_wasm::policy::dispatcher::PolicyDispatcher;
use nri_wasm::policy::engine::CompiledPolicy;
use nri_wasm::policy::spec::limits::Limits;
use nri_wasm::policy::spec::manifest::OnError;
use nri_wasm_api::api as pb;
use nri_wasm_e2e::{guests, policy_spec, roomy, shared_engine, shared_loader, test_facts, Harness};
use protobuf::MessageField;

const EXCLUSIVE: &str = "exclusive-cpus.nri-wasm.io/count";
const CPUS: &str = "exclusive-cpus.nri-wasm.io/cpus";

/// A small deterministic generator (xorshift64*), so failures replay.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn load(name: &str, wasm: &str, settings: &str, limits: Limits) -> CompiledPolicy {
    let spec = policy_spec(name, wasm, settings, OnError::Fail, limits);
    shared_loader().load(&spec, &Arc::new(test_facts())).unwrap_or_else(|e| panic!("{e}"))
}

fn dispatcher(policies: Vec<CompiledPolicy>) -> Arc<PolicyDispatcher> {
    let chain = Chain::new(policies, ChainSettings::default());
    Arc::new(PolicyDispatcher::new(shared_engine(), chain, test_facts(), 2))
}

/// Pod `n` of the workload, asking for `cpus` exclusive CPUs (0: none) and
/// labelled with the QoS `class` if any.
fn pod(n: usize, cpus: usize, class: Option<&str>) -> pb::PodSandbox {
    let mut p = workload::pod(n);
    if cpus > 0 {
        p.annotations.insert(EXCLUSIVE.into(), cpus.to_string());
    }
    if let Some(class) = class {
        p.labels.insert("qos.nri-wasm.io/class".into(), class.into());
    }
    p
}

fn cpuset(c: &pb::Container) -> BTreeSet<u32> {
    let text = c.linux.as_ref().and_then(|l| l.resources.as_ref()).and_then(|r| r.cpu.as_ref()).map_or("", |c| &c.cpus);
    nri_wasm::node::topology::parse_cpu_list(text).expect("a valid cpuset").into_iter().collect()
}

/// No CPU belongs to two exclusive containers, and no other live container
/// runs on an exclusive one. Returns the exclusive allocations.
fn check_exclusive(model: &NodeModel, when: &str) -> BTreeMap<String, BTreeSet<u32>> {
    let live = |c: &&pb::Container| {
        let s = c.state.enum_value_or_default();
        s == pb::ContainerState::CONTAINER_CREATED || s == pb::ContainerState::CONTAINER_RUNNING
    };
    let exclusive: BTreeMap<String, BTreeSet<u32>> = model
        .containers
        .values()
        .filter(live)
        .filter(|c| c.annotations.contains_key(CPUS))
        .map(|c| (c.id.clone(), cpuset(c)))
        .collect();
    let mut owner: BTreeMap<u32, &str> = BTreeMap::new();
    for (id, cpus) in &exclusive {
        assert!(!cpus.is_empty(), "{when}: exclusive container {id} has no cpuset");
        for cpu in cpus {
            if let Some(other) = owner.insert(*cpu, id) {
                panic!("{when}: CPU {cpu} given to both {other} and {id}");
            }
        }
    }
    for c in model.containers.values().filter(live).filter(|c| !exclusive.contains_key(&c.id)) {
        let shared = cpuset(c);
        assert!(!shared.is_empty(), "{when}: shared container {} has no cpuset", c.id);
        if let Some(cpu) = shared.iter().find(|cpu| owner.contains_key(cpu)) {
            panic!("{when}: shared container {} runs on CPU {cpu} of {}", c.id, owner[cpu]);
        }
    }
    exclusive
}

/// The exclusive-cpus policy's allocation table, from its committed state.
fn allocations(d: &PolicyDispatcher) -> BTreeMap<String, String> {
    d.states()
        .snapshot("10-exclusive-cpus")
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("cpus/")?.to_string(), v.to_string())))
        .collect()
}

/// 200 pods created and removed in random order, some asking for exclusive
/// CPUs, with a runtime restart half-way during which a container vanishes.
/// At every step no CPU belongs to two containers; after the restart the
/// view and the allocations match what the runtime reports; at the end every
/// CPU is back in the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_cpus_over_200_pods_in_random_order_with_a_restart() {
    let policy = load("10-exclusive-cpus", guests::EXCLUSIVE_CPUS, "pool=1-7", roomy());
    let d = dispatcher(vec![policy]);
    let h = Harness::start_policies(RuntimeProfile::v0_12(), d.clone()).await;
    let model = NodeModel::shared();
    let mut rt = SimRuntime::new(h.connect().await, model.clone());
    rt.synchronize().await.unwrap();

    let mut rng = Rng(0x5eed_cafe);
    let (mut live, mut created, mut denied) = (Vec::<String>::new(), 0, 0);
    let mut next_pod = 0;
    while next_pod < 200 || !live.is_empty() {
        let create = next_pod < 200 && (live.len() < 3 || rng.below(3) != 0) && live.len() < 12;
        if create {
            let cpus = [0, 0, 1, 2, 3][rng.below(5)];
            let p = pod(next_pod, cpus, None);
            next_pod += 1;
            rt.run_pod(&p).await.unwrap();
            match rt.create(&workload::container(&p, 0)).await {
                Ok(c) => {
                    rt.start(&c.id).await.unwrap();
                    created += 1;
                }
                Err(e) => {
                    let text = e.to_string();
                    assert!(cpus > 0 && text.contains("exclusive CPUs requested"), "unexpected refusal: {text}");
                    denied += 1;
                }
            }
            live.push(p.id.clone());
        } else {
            let p = live.swap_remove(rng.below(live.len()));
            rt.remove_pod(&p).await.unwrap();
        }
        d.outbox_flushed(Duration::from_secs(2)).await;
        let exclusive = check_exclusive(&rt.model(), &format!("after pod {next_pod}"));
        let table = allocations(&d);
        assert_eq!(table.keys().collect::<Vec<_>>(), exclusive.keys().collect::<Vec<_>>(), "state matches the runtime");

        if next_pod == 100 && create {
            // The runtime restarts; while the host is away one exclusive
            // container (if any) goes away without an event.
            rt.close().await;
            let gone = exclusive.keys().next().cloned();
            if let Some(id) = &gone {
                let mut m = model.lock().unwrap();
                let pod_id = m.containers[id].pod_sandbox_id.clone();
                m.remove_pod(&pod_id);
                live.retain(|p| *p != pod_id);
            }
            rt = SimRuntime::new(h.connect().await, model.clone());
            rt.synchronize().await.unwrap();
            let view: Vec<String> = d.view().containers(&Default::default(), None).map(|c| c.id.clone()).collect();
            let truth: Vec<String> = rt.model().containers.keys().cloned().collect();
            assert_eq!(view, truth, "the view is rebuilt from Synchronize");
            if let Some(id) = gone {
                assert!(!allocations(&d).contains_key(&id), "the vanished container's CPUs were released");
            }
            check_exclusive(&rt.model(), "after the restart");
        }
    }
    assert!(
        created + denied == 200 && created > 100 && denied > 0,
        "created {created}, denied {denied}: the pool was exercised"
    );
    assert!(allocations(&d).is_empty(), "every CPU is back in the pool");
    assert!(d.view().containers(&Default::default(), None).next().is_none());

    // The whole pool can be handed out again.
    let p = pod(1000, 7, None);
    rt.run_pod(&p).await.unwrap();
    let c = rt.create(&workload::container(&p, 0)).await.expect("all seven CPUs are free");
    assert_eq!(cpuset(&c), (1..=7).collect());
    rt.close().await;
    h.shutdown().await;
}

/// CPUs come from one NUMA node when one has room (the fullest that fits),
/// and a request the pool cannot meet is denied with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_cpus_are_numa_aligned_when_a_node_has_room() {
    // Test topology: node 0 has CPUs 0-3, node 1 has 4-7; CPU 0 stays shared.
    let policy = load("10-exclusive-cpus", guests::EXCLUSIVE_CPUS, "pool=1-7", roomy());
    let d = dispatcher(vec![policy]);
    let h = Harness::start_policies(RuntimeProfile::v0_12(), d.clone()).await;
    let rt = SimRuntime::new(h.connect().await, NodeModel::shared());
    rt.synchronize().await.unwrap();
    let mut got = Vec::new();
    for (n, count) in [(0, 3), (1, 3), (2, 1)] {
        let p = pod(n, count, None);
        rt.run_pod(&p).await.unwrap();
        got.push(cpuset(&rt.create(&workload::container(&p, 0)).await.unwrap()));
    }
    assert_eq!(got, [BTreeSet::from([1, 2, 3]), BTreeSet::from([4, 5, 6]), BTreeSet::from([7])]);
    let p = pod(3, 1, None);
    rt.run_pod(&p).await.unwrap();
    let err = rt.create(&workload::container(&p, 0)).await.unwrap_err().to_string();
    assert!(err.contains("1 exclusive CPUs requested, 0 free in the pool"), "{err}");
    rt.close().await;
    h.shutdown().await;
}

fn quota(c: &pb::Container) -> Option<i64> {
    c.linux.as_ref()?.resources.as_ref()?.cpu.as_ref()?.quota.as_ref().map(|q| q.value)
}

fn memory_high(c: &pb::Container) -> Option<String> {
    c.linux.as_ref()?.resources.as_ref()?.unified.get("memory.high").cloned()
}

/// Latency-critical work starts: offline containers are throttled through
/// UpdateContainers (StartContainer has no reply), an offline container
/// created meanwhile is created throttled, and when the latency-critical
/// container stops everything is restored in the StopContainer reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn colocation_qos_throttles_offline_work_while_latency_critical_work_runs() {
    let policy = load("20-colocation-qos", guests::COLOCATION_QOS, "cpu-percent=25 memory-high=128M", roomy());
    let d = dispatcher(vec![policy]);
    let h = Harness::start_policies(RuntimeProfile::v0_12(), d.clone()).await;
    let model = NodeModel::shared();
    let rt = SimRuntime::new(h.connect().await, model.clone());
    rt.synchronize().await.unwrap();

    let mut offline = Vec::new();
    for n in 0..2 {
        let p = pod(n, 0, Some("offline"));
        rt.run_pod(&p).await.unwrap();
        let c = rt.create(&workload::container(&p, 0)).await.unwrap();
        rt.start(&c.id).await.unwrap();
        offline.push(c);
    }
    let original: Vec<Option<i64>> = offline.iter().map(quota).collect();
    let lc_pod = pod(10, 0, Some("latency-critical"));
    rt.run_pod(&lc_pod).await.unwrap();
    let lc = rt.create(&workload::container(&lc_pod, 0)).await.unwrap();
    rt.start(&lc.id).await.unwrap();
    d.outbox_flushed(Duration::from_secs(2)).await;
    for c in &offline {
        let now = rt.model().containers[&c.id].clone();
        let period = now.linux.resources.cpu.period.value as i64;
        assert_eq!(quota(&now), Some(period / 4), "{} throttled to 25% of its period", c.id);
        assert_eq!(memory_high(&now).as_deref(), Some("128M"));
    }
    assert_eq!(quota(&rt.model().containers[&lc.id]), quota(&lc), "the latency-critical container is untouched");

    let late = pod(3, 0, Some("offline"));
    rt.run_pod(&late).await.unwrap();
    let late_c = rt.create(&workload::container(&late, 0)).await.unwrap();
    assert_eq!(memory_high(&late_c).as_deref(), Some("128M"), "created throttled");

    rt.stop(&lc.id).await.unwrap();
    for (c, q) in offline.iter().zip(&original) {
        let now = rt.model().containers[&c.id].clone();
        assert_eq!(quota(&now), Some(q.unwrap_or(-1)), "{} restored", c.id);
        assert_eq!(memory_high(&now).as_deref(), Some("max"));
    }
    assert_eq!(memory_high(&rt.model().containers[&late_c.id]).as_deref(), Some("max"));
    let saved = d.states().snapshot("20-colocation-qos");
    assert!(saved.is_empty(), "nothing left to restore: {:?}", saved.iter().collect::<Vec<_>>());
    rt.close().await;
    h.shutdown().await;
}

/// Writes are kept only when the event succeeds, survive a reload of the
/// policy, and the size limit is enforced with an error that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_commits_with_the_event_survives_reloads_and_is_bounded() {
    let count = || load("10-count", guests::PROBE, "count", roomy());
    let d = dispatcher(vec![count(), load("20-deny", guests::PROBE, "deny", roomy())]);
    let h = Harness::start_policies(RuntimeProfile::v0_12(), d.clone()).await;
    let rt = SimRuntime::new(h.connect().await, NodeModel::shared());
    rt.synchronize().await.unwrap();
    let p = pod(0, 0, None);
    rt.run_pod(&p).await.unwrap();
    let create = |n: usize| workload::container(&p, n);
    let counted = |c: &pb::Container| c.annotations.get("example.com/count").cloned();

    let err = rt.create(&create(0)).await.unwrap_err().to_string();
    assert!(err.contains("denied by the probe"), "{err}");
    assert!(d.states().snapshot("10-count").is_empty(), "a denied event commits nothing");

    // A failed call discards its own writes; on-error = ignore lets the event through.
    let trap = policy_spec("10-count", guests::PROBE, "count;trap", OnError::Ignore, roomy());
    let trapping = shared_loader().load(&trap, &Arc::new(test_facts())).unwrap();
    d.replace_chain(Chain::new(vec![trapping], ChainSettings::default()));
    rt.create(&create(1)).await.unwrap();
    assert!(d.states().snapshot("10-count").is_empty(), "a trapped call commits nothing");

    d.replace_chain(Chain::new(vec![count()], ChainSettings::default()));
    assert_eq!(counted(&rt.create(&create(2)).await.unwrap()).as_deref(), Some("1"));
    assert_eq!(counted(&rt.create(&create(3)).await.unwrap()).as_deref(), Some("2"));
    // A reload of the same policy (a new chain, a newly compiled component).
    d.replace_chain(Chain::new(vec![count()], ChainSettings::default()));
    assert_eq!(counted(&rt.create(&create(4)).await.unwrap()).as_deref(), Some("3"), "state survives the reload");

    let tight = Limits { state_kib: 1, ..roomy() };
    d.replace_chain(Chain::new(vec![load("30-fill", guests::PROBE, "fill:900", tight)], ChainSettings::default()));
    rt.create(&create(5)).await.expect("900 bytes, their key and its 64 fit in 1 KiB");
    d.replace_chain(Chain::new(vec![load("30-fill", guests::PROBE, "fill:2000", tight)], ChainSettings::default()));
    let err = rt.create(&create(6)).await.unwrap_err().to_string();
    assert!(err.contains("30-fill") && err.contains("limit of 1024 bytes exceeded"), "{err}");
    assert_eq!(d.states().snapshot("30-fill").bytes(), 4 + 900 + 64, "the refused write left the state as it was");
    rt.close().await;
    h.shutdown().await;
}

/// A policy that fails to reconcile never fails Synchronize (the runtime
/// would drop the plugin): the host answers, stays connected and serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_failing_on_synchronize_does_not_fail_it() {
    let spec = policy_spec("10-sync", guests::PROBE, "sync-trap;count", OnError::Fail, roomy());
    let policy = shared_loader().load(&spec, &Arc::new(test_facts())).unwrap();
    let d = dispatcher(vec![policy]);
    let h = Harness::start_policies(RuntimeProfile::v0_12(), d.clone()).await;
    let rt = SimRuntime::new(h.connect().await, NodeModel::shared());
    rt.synchronize().await.expect("Synchronize is answered");
    let p = pod(0, 0, None);
    rt.run_pod(&p).await.unwrap();
    let c = rt.create(&workload::container(&p, 0)).await.expect("the host still serves events");
    assert_eq!(c.annotations.get("example.com/count").map(String::as_str), Some("1"));
    assert!(!rt.conn.is_closed());
    rt.close().await;
    h.shutdown().await;
}

/// A policy sees the container being created in the view as the policies
/// before it left it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_view_shows_the_event_container_as_earlier_policies_left_it() {
    let d = dispatcher(vec![
        load("10-count", guests::PROBE, "count", roomy()),
        load("20-self", guests::PROBE, "self;list-ids", roomy()),
    ]);
    let h = Harness::start_policies(RuntimeProfile::v0_12(), d.clone()).await;
    let rt = SimRuntime::new(h.connect().await, NodeModel::shared());
    rt.synchronize().await.unwrap();
    let p = pod(0, 0, None);
    rt.run_pod(&p).await.unwrap();
    let first = rt.create(&workload::container(&p, 0)).await.unwrap();
    assert_eq!(first.annotations.get("example.com/self").map(String::as_str), Some(&*format!("{} 1", first.name)));
    assert_eq!(first.annotations.get("example.com/listed").map(String::as_str), Some("1"));
    let second = rt.create(&workload::container(&p, 1)).await.unwrap();
    assert_eq!(second.annotations.get("example.com/listed").map(String::as_str), Some("2"), "the first is in the view");
    rt.close().await;
    h.shutdown().await;
}

/// What the view keeps of a container, normalised for comparison.
#[derive(Debug, PartialEq)]
struct Seen {
    pod: String,
    state: pb::ContainerState,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    cpus: String,
    shares: Option<u64>,
    quota: Option<i64>,
    memory: Option<i64>,
}

impl Seen {
    fn new(
        pod: &str,
        state: pb::ContainerState,
        labels: BTreeMap<String, String>,
        annotations: BTreeMap<String, String>,
        r: Option<&pb::LinuxResources>,
    ) -> Self {
        let cpu = r.and_then(|r| r.cpu.as_ref());
        Self {
            pod: pod.to_string(),
            state,
            labels,
            annotations,
            cpus: cpu.map_or(String::new(), |c| c.cpus.clone()),
            shares: cpu.and_then(|c| c.shares.as_ref()).map(|v| v.value),
            quota: cpu.and_then(|c| c.quota.as_ref()).map(|v| v.value),
            memory: r.and_then(|r| r.memory.as_ref()).and_then(|m| m.limit.as_ref()).map(|v| v.value),
        }
    }
}

fn sorted(map: &std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    map.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn truth(model: &NodeModel) -> BTreeMap<String, Seen> {
    let resources = |c: &pb::Container| c.linux.as_ref().and_then(|l| l.resources.as_ref()).cloned();
    model
        .containers
        .values()
        .map(|c| {
            let state = c.state.enum_value_or_default();
            let r = resources(c);
            let seen = Seen::new(&c.pod_sandbox_id, state, sorted(&c.labels), sorted(&c.annotations), r.as_ref());
            (c.id.clone(), seen)
        })
        .collect()
}

fn believed(d: &PolicyDispatcher) -> BTreeMap<String, Seen> {
    d.view()
        .containers(&Default::default(), None)
        .map(|c| {
            let seen = Seen::new(&c.pod_id, c.state, c.labels.clone(), c.annotations.clone(), c.resources.as_ref());
            (c.id.clone(), seen)
        })
        .collect()
}

#[derive(Debug, Clone)]
enum Op {
    Pod,
    Create(usize),
    Start(usize),
    Update(usize, u64),
    Stop(usize),
    Remove(usize),
    RemovePod(usize),
    Reconnect,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        2 => Just(Op::Pod),
        4 => any::<usize>().prop_map(Op::Create),
        3 => any::<usize>().prop_map(Op::Start),
        2 => (any::<usize>(), 2u64..2048).prop_map(|(i, s)| Op::Update(i, s)),
        2 => any::<usize>().prop_map(Op::Stop),
        2 => any::<usize>().prop_map(Op::Remove),
        1 => any::<usize>().prop_map(Op::RemovePod),
        1 => Just(Op::Reconnect),
    ]
}

/// Runs `ops` against the host (annotate + exclusive-cpus) and the ground
/// truth, comparing the view with the truth after every step.
async fn view_follows_the_runtime(ops: Vec<Op>) {
    let d = dispatcher(vec![
        load("10-exclusive-cpus", guests::EXCLUSIVE_CPUS, "pool=2-7", roomy()),
        load("20-annotate", guests::ANNOTATE, "seen", roomy()),
    ]);
    let h = Harness::start_policies(RuntimeProfile::v0_12(), d.clone()).await;
    let model = NodeModel::shared();
    let mut rt = SimRuntime::new(h.connect().await, model.clone());
    rt.synchronize().await.unwrap();
    let (mut pods, mut next) = (Vec::<pb::PodSandbox>::new(), 0);
    for (step, op) in ops.into_iter().enumerate() {
        let ids: Vec<String> = rt.model().containers.keys().cloned().collect();
        let pick = |i: usize| (!ids.is_empty()).then(|| ids[i % ids.len()].clone());
        let state = |id: &str| rt.model().containers[id].state.enum_value_or_default();
        use pb::ContainerState::*;
        match op {
            Op::Pod => {
                let p = pod(next, [0, 0, 1, 2][next % 4], None);
                next += 1;
                rt.run_pod(&p).await.unwrap();
                pods.push(p);
            }
            Op::Create(i) if !pods.is_empty() => {
                let p = &pods[i % pods.len()];
                // Refusals (no CPUs left) leave both sides unchanged.
                let _ = rt.create(&workload::container(p, next)).await;
                next += 1;
            }
            Op::Start(i) => {
                if let Some(id) = pick(i).filter(|id| state(id) == CONTAINER_CREATED) {
                    rt.start(&id).await.unwrap();
                }
            }
            Op::Update(i, shares) => {
                if let Some(id) = pick(i).filter(|id| state(id) != CONTAINER_STOPPED) {
                    let mut r = pb::LinuxResources::default();
                    r.cpu.mut_or_insert_default().shares =
                        MessageField::some(pb::OptionalUInt64 { value: shares, ..Default::default() });
                    rt.update(&id, r).await.unwrap();
                }
            }
            Op::Stop(i) => {
                if let Some(id) = pick(i).filter(|id| state(id) != CONTAINER_STOPPED) {
                    rt.stop(&id).await.unwrap();
                }
            }
            Op::Remove(i) => {
                if let Some(id) = pick(i).filter(|id| state(id) == CONTAINER_STOPPED) {
                    rt.remove(&id).await.unwrap();
                }
            }
            Op::RemovePod(i) if !pods.is_empty() => {
                let p = pods.swap_remove(i % pods.len());
                rt.remove_pod(&p.id).await.unwrap();
            }
            Op::Reconnect => {
                rt.close().await;
                rt = SimRuntime::new(h.connect().await, model.clone());
                rt.synchronize().await.unwrap();
            }
            _ => {}
        }
        d.outbox_flushed(Duration::from_secs(2)).await;
        let (view, truth) = (believed(&d), truth(&rt.model()));
        assert_eq!(view, truth, "step {step}: the view differs from the runtime");
        let pods: Vec<String> = d.view().pods().map(|p| p.id.clone()).collect();
        let real: Vec<String> = rt.model().pods.keys().cloned().collect();
        assert_eq!(pods, real, "step {step}: the view's pods differ from the runtime's");
        check_exclusive(&rt.model(), &format!("step {step}"));
    }
    rt.close().await;
    h.shutdown().await;
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 10, ..Default::default() })]
    #[test]
    fn the_view_matches_the_runtime_after_random_events(ops in proptest::collection::vec(op(), 100..200)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(view_follows_the_runtime(ops));
    }
}
